"""`kinetoscope diff BASE NEW`: the diff as tables (text, Markdown, TSV) or as the JSON document
(docs/diff.md defines every key). Headless: no Textual. The command (its options, exit
statuses, the viewer or the text) is kinetoscope/commands/diff.py."""

from __future__ import annotations

from typing import Any

from kinetoscope.analysis.units import fmt_bytes, fmt_table_time, us
from kinetoscope.present.report_summary import (
    Note,
    _data,
    _table,
    summary_json,  # noqa: F401 - the diff's JSON is written as the summary's
)

DIFF_VERSION = 1
TOP_ROWS = 100  # operators and kernels in the JSON document, by |Δ|
TABLE_ROWS = 20  # rows of each text table
ALIGN_ENTRIES = 50  # non-equal alignment entries listed per stream in the JSON document
UNNAMED = "not named (no deviceProperties)"  # the GPUs row, for a trace that names no GPU


# -- the JSON document ------------------------------------------------------------------------


def _value(key: str, value: int | None) -> Any:
    from kinetoscope.analysis.diff import metric_unit

    if value is None:
        return None
    return value if metric_unit(key) == "bytes" else us(value)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _metric(m: Any) -> dict[str, Any]:
    return {
        "base": _value(m.key, m.base),
        "new": _value(m.key, m.new),
        "delta": _value(m.key, m.delta),
        "delta_pct": _round(m.delta_pct),
    }


def _group(g: Any) -> dict[str, Any]:
    return {
        "cat": g.cat,
        "name": g.name,
        "status": g.status,
        "base_count": g.base_count,
        "new_count": g.new_count,
        "base_total_us": us(g.base_total),
        "new_total_us": us(g.new_total),
        "base_mean_us": None if g.base_mean is None else round(g.base_mean / 1000, 3),
        "new_mean_us": None if g.new_mean is None else round(g.new_mean / 1000, 3),
        "delta_us": us(g.delta),
        "delta_pct": _round(g.delta_pct),
        "more_calls_us": round(g.more_calls / 1000, 3),
        "slower_calls_us": round(g.slower_calls / 1000, 3),
        # The original names, when normalisation matched more than one into this row.
        "merged_base_names": list(g.base_names) if g.merged else [],
        "merged_new_names": list(g.new_names) if g.merged else [],
    }


def _pair_pct(low: float | None, high: float | None) -> list[float] | None:
    return None if low is None or high is None else [round(low, 3), round(high, 3)]


def _interval_keys(v: Any) -> dict[str, Any]:
    """The verdict's statistics (docs/diff.md, "The verdict")."""
    from kinetoscope.analysis.diff_stats import METHOD, pct

    iv = v.interval

    def evidence(e: Any) -> dict[str, Any]:
        implied = e.implied
        return {
            "kind": e.kind,
            "name": e.name,
            "base_calls": e.base_calls,
            "new_calls": e.new_calls,
            "change_pct": round(e.interval.change_pct, 3),
            "interval_pct": _pair_pct(e.interval.low_pct, e.interval.high_pct),
            "confidence": e.interval.confidence,
            "slower_pairs": e.slower_pairs,
            "pairs": e.pairs,
            "step_change_pct": None if implied is None else round(pct(implied[0]), 3),
            "step_interval_pct": None
            if implied is None
            else _pair_pct(pct(implied[1]), pct(implied[2])),
            "decisive": e.decisive,
        }

    return {
        "method": METHOD if iv is not None else None,
        "confidence": iv.confidence if iv is not None else None,
        "change_pct": None if iv is None else round(iv.change_pct, 3),
        "interval_pct": None if iv is None else _pair_pct(iv.low_pct, iv.high_pct),
        "samples": None if iv is None else {"base": iv.n_base, "new": iv.n_new},
        "df": None if iv is None else (None if iv.df == float("inf") else round(iv.df, 3)),
        "decided_by": v.decided_by,
        "gate_interval_pct": _pair_pct(v.gate_low_pct, v.gate_high_pct),
        "steps_to_settle": v.steps_to_settle,
        "evidence": [evidence(e) for e in v.evidence],
    }


def worst_pair(diff: Any) -> int:
    """The pair whose step time changed most (|Δ|; the first on ties); 0 when there is none."""
    best, best_delta = 0, -1
    for i, metrics in enumerate(diff.per_step):
        delta = metrics[0].delta
        if delta is not None and abs(delta) > best_delta:
            best, best_delta = i, abs(delta)
    return best


def _alignment(diff: Any, pair: int) -> dict[str, Any]:
    from kinetoscope.analysis.diff import EQUAL

    streams = []
    for s in diff.alignment(pair):
        base_names = diff.base.trace
        new_names = diff.new.trace
        changes = []
        for b, n, op in s.ops:
            if op == EQUAL:
                continue
            if len(changes) == ALIGN_ENTRIES:
                break
            changes.append(
                {
                    "op": op,
                    "base": base_names.name_of(int(s.base_rows[b])) if b >= 0 else None,
                    "new": new_names.name_of(int(s.new_rows[n])) if n >= 0 else None,
                    "base_index": b,
                    "new_index": n,
                }
            )
        streams.append(
            {
                "base_stream": list(s.base_key) if s.base_key else None,
                "new_stream": list(s.new_key) if s.new_key else None,
                "base_kernels": len(s.base_rows),
                "new_kernels": len(s.new_rows),
                **s.counts(),
                "capped": s.capped,
                "changes": changes,
            }
        )
    number = diff.pairs[pair].number if diff.pairs else None
    return {"pair": number, "streams": streams}


def diff_document(diff: Any, base_path: str, new_path: str) -> dict[str, Any]:
    from kinetoscope.analysis.diff import ADDED, METRIC_KEYS, REMOVED

    v = diff.verdict

    def side(path: str, steps: int, devices: list[str]) -> dict[str, Any]:
        return {"path": path, "steps": steps, "devices": devices}

    def groups(rows: list[Any]) -> dict[str, Any]:
        return {
            "overlap": None,
            "rows": [_group(g) for g in rows[:TOP_ROWS]],
            "added": [g.name for g in rows if g.status == ADDED],
            "removed": [g.name for g in rows if g.status == REMOVED],
            "merged": sum(1 for g in rows if g.merged),
        }

    operators, kernels = groups(diff.operators), groups(diff.kernels)
    operators["overlap"] = round(diff.operator_overlap, 4)
    kernels["overlap"] = round(diff.kernel_overlap, 4)
    return {
        "kinetoscope_diff": DIFF_VERSION,
        "base": side(base_path, diff.steps_base, diff.devices_base),
        "new": side(new_path, diff.steps_new, diff.devices_new),
        "options": {
            "threshold_pct": diff.options.threshold_pct,
            "templates": diff.options.templates,
            "steps": [p.number for p in diff.pairs] if not diff.whole else None,
        },
        "verdict": {
            "verdict": v.kind,
            "reasons": list(v.reasons),
            "step_time_delta_pct": _round(v.delta_pct),
            "threshold_pct": v.threshold_pct,
            "noise_factor": None,  # version 1's key, no longer used (docs/diff.md)
            "noise_base_pct": _round(v.noise_base_pct),
            "noise_new_pct": _round(v.noise_new_pct),
            **_interval_keys(v),
        },
        "whole_traces": diff.whole,
        "common_steps": diff.common_steps,
        "overall": {m.key: _metric(m) for m in diff.overall},
        "steps": [
            {
                "pair": pair.number,
                "base_name": pair.base_name,
                "new_name": pair.new_name,
                **{key: _metric(m) for key, m in zip(METRIC_KEYS, metrics)},
            }
            for pair, metrics in zip(diff.pairs, diff.per_step)
        ],
        "operators": operators,
        "kernels": kernels,
        "alignment": _alignment(diff, worst_pair(diff)) if diff.pairs else None,
    }


# -- tables -------------------------------------------------------------------------------------


def _signed_dur(ns: float | None) -> str:
    if ns is None:
        return "–"
    text = fmt_table_time(ns, align_units=False)
    return f"+{text}" if ns > 0 else text


def _cell(key: str, value: int | None, signed: bool = False) -> str:
    from kinetoscope.analysis.diff import metric_unit

    if value is None:
        return "–"
    if metric_unit(key) == "bytes":
        return fmt_bytes(value, signed=signed)
    return _signed_dur(value) if signed else fmt_table_time(value, align_units=False)


def _pct_cell(pct: float | None) -> str:
    return "–" if pct is None else f"{pct:+.1f} %"


def diff_tables(diff: Any) -> list[Any]:
    from kinetoscope.analysis.diff import METRIC_KEYS, metric_label

    v = diff.verdict
    out: list[Any] = []
    head = _table("Verdict", "fact", "value")
    head.show_header = False
    head.add_row("verdict", v.kind.upper())
    for reason in v.reasons:
        head.add_row("because", _data(reason))
    compared = (
        "whole traces (no common steps)"
        if diff.whole
        else f"{len(diff.pairs)} of {diff.common_steps} paired steps "
        f"(BASE has {diff.steps_base}, NEW {diff.steps_new})"
    )
    head.add_row("compared", compared)
    head.add_row(
        "noise",
        f"BASE {_noise(v.noise_base_pct)}, NEW {_noise(v.noise_new_pct)} "
        f"(threshold {v.threshold_pct:g} %)",
    )
    if v.interval is not None:
        from kinetoscope.analysis.diff_stats import METHOD

        head.add_row(
            "method",
            f"{100 * v.interval.confidence:g} % interval, {METHOD} (docs/diff.md)",
        )
    head.add_row(
        "GPUs",
        _data(
            f"BASE {', '.join(diff.devices_base) or UNNAMED}; "
            f"NEW {', '.join(diff.devices_new) or UNNAMED}"
        ),
    )
    out.append(head)

    numbers = ("BASE", "NEW", "Δ", "Δ %")
    title = "Overall: whole traces" if diff.whole else "Overall: sum over the compared steps"
    table = _table(f"{title} (memory: the highest peak)", "metric", *numbers, right=numbers)
    for m in diff.overall:
        table.add_row(
            metric_label(m.key),
            _cell(m.key, m.base),
            _cell(m.key, m.new),
            _cell(m.key, m.delta, signed=True),
            _pct_cell(m.delta_pct),
        )
    out.append(table)

    if not diff.whole and diff.pairs:
        step_numbers = ("BASE time", "NEW time", "Δ", "Δ %", "GPU busy Δ")
        table = _table(
            "Steps, paired in order",
            "pair",
            "BASE step",
            "NEW step",
            *step_numbers,
            right=("pair", *step_numbers),
            names=("BASE step", "NEW step"),
        )
        busy = METRIC_KEYS.index("gpu_busy")
        for pair, metrics in list(zip(diff.pairs, diff.per_step))[:TABLE_ROWS]:
            t = metrics[0]
            table.add_row(
                str(pair.number),
                _data(pair.base_name),
                _data(pair.new_name),
                _cell(t.key, t.base),
                _cell(t.key, t.new),
                _cell(t.key, t.delta, signed=True),
                _pct_cell(t.delta_pct),
                _cell("gpu_busy", metrics[busy].delta, signed=True),
            )
        out.append(table)
        if len(diff.pairs) > TABLE_ROWS:
            out.append(Note(f"{len(diff.pairs) - TABLE_ROWS} more steps in --json"))

    for label, rows, overlap in (
        ("Kernels and copies", diff.kernels, diff.kernel_overlap),
        ("Operators", diff.operators, diff.operator_overlap),
    ):
        out.extend(_group_tables(label, rows, overlap))

    if diff.pairs:
        out.extend(_alignment_tables(diff))
    return [s for s in out if s is not None]


def _noise(pct: float | None) -> str:
    return "unknown (< 2 steps)" if pct is None else f"{pct:.2f} %"


def _group_tables(label: str, rows: list[Any], overlap: float) -> list[Any]:
    from kinetoscope.analysis.diff import ADDED, REMOVED

    if not rows:
        return []
    numbers = ("BASE n", "NEW n", "BASE total", "NEW total", "Δ", "Δ %", "more calls", "slower")
    table = _table(
        f"{label} by |Δ| ({100 * overlap:.0f} % of names in both)",
        "name",
        "status",
        *numbers,
        right=numbers,
        names=("name",),
    )
    for g in rows[:TABLE_ROWS]:
        table.add_row(
            _data(g.name + (" *" if g.merged else "")),
            g.status,
            f"{g.base_count:,}",
            f"{g.new_count:,}",
            fmt_table_time(g.base_total, align_units=False),
            fmt_table_time(g.new_total, align_units=False),
            _signed_dur(g.delta),
            _pct_cell(g.delta_pct),
            _signed_dur(g.more_calls),
            _signed_dur(g.slower_calls),
        )
    out: list[Any] = [table]
    merged = [g for g in rows if g.merged]
    if merged:
        note = _table(
            f"{label}: names merged by normalisation (* above)",
            "normalised",
            "side",
            "original",
            names=("normalised", "original"),
        )
        for g in merged[:TABLE_ROWS]:
            for side, names in (("BASE", g.base_names), ("NEW", g.new_names)):
                for name in names:
                    note.add_row(_data(g.name), side, _data(name))
        out.append(note)
    for status, title in ((ADDED, "only in NEW"), (REMOVED, "only in BASE")):
        alone = [g for g in rows if g.status == status]
        if not alone:
            continue
        table = _table(
            f"{label} {title}: no counterpart ({len(alone)})",
            "name",
            "count",
            "total",
            right=("count", "total"),
            names=("name",),
        )
        alone.sort(key=lambda g: -(g.base_total + g.new_total))
        for g in alone[:TABLE_ROWS]:
            table.add_row(
                _data(g.name),
                f"{g.base_count + g.new_count:,}",
                fmt_table_time(g.base_total + g.new_total, align_units=False),
            )
        out.append(table)
        if len(alone) > TABLE_ROWS:
            out.append(Note(f"{len(alone) - TABLE_ROWS} more in --json"))
    return out


def _alignment_tables(diff: Any) -> list[Any]:
    pair = worst_pair(diff)
    where = "the whole traces" if diff.whole else f"step pair {diff.pairs[pair].number}"
    numbers = ("BASE", "NEW", "equal", "changed", "added", "removed")
    table = _table(
        f"GPU sequences of {where}"
        + ("" if diff.whole else " (the largest step-time Δ)")
        + ", aligned per stream",
        "stream",
        *numbers,
        right=numbers,
    )
    capped = False
    for s in diff.alignment(pair):
        counts = s.counts()
        capped = capped or s.capped
        table.add_row(
            _stream(s.base_key)
            if s.base_key == s.new_key
            else f"{_stream(s.base_key)} / {_stream(s.new_key)}",
            f"{len(s.base_rows):,}",
            f"{len(s.new_rows):,}",
            *(f"{counts[k]:,}" for k in ("equal", "changed", "added", "removed")),
        )
    out: list[Any] = [table]
    if capped:
        out.append(
            Note(
                "a stream's sequences differ too much for the alignment's work cap: "
                "the middle was paired by position"
            )
        )
    return out


def _stream(key: tuple[int, int] | None) -> str:
    return "–" if key is None else f"GPU {key[0]} stream {key[1]}"


# -- the command --------------------------------------------------------------------------------


def _gzipped(path: str) -> bool:
    """A regular file starting with gzip's magic bytes (a stream is never read ahead)."""
    import os

    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as handle:
            return handle.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def load_sessions(base_path: str, new_path: str, overlap: bool = True) -> tuple[Any, Any]:
    """Both traces as sessions (BASE, NEW), on few cores as fast as they come:

    - one load at a time, each decoded by the parser's own worker processes (one per CPU): the
      decoding already keeps every core busy, so two loads side by side only take turns (and
      hold both loads' working memory at once: measured in BENCHMARKS.md);
    - a gzip'd trace first: its load keeps the cores busiest (one more thread inflates), while a
      plain file's load leaves some CPU time idle, which the first trace's analysis, run in a
      thread meanwhile, takes (`overlap`);
    - then the second trace's analysis on two threads: the nesting's chain (the steps and sync
      after it) beside what needs no nesting (`PREPARE_PLANS`).
    docs/diff.md and BENCHMARKS.md give the measurements."""
    import threading

    from kinetoscope.analysis import TraceSession
    from kinetoscope.analysis.diff import prepare, prepare_concurrently
    from kinetoscope.parser import load, threads_affordable

    swap = _gzipped(new_path) and not _gzipped(base_path)
    first_path, second_path = (new_path, base_path) if swap else (base_path, new_path)
    first = TraceSession(load(first_path, write_cache=False))
    worker = None
    if overlap and threads_affordable():
        worker = threading.Thread(target=prepare, args=(first,), name="diff-first", daemon=True)
        try:
            worker.start()
        except RuntimeError:  # no thread to be had (an address-space limit): analysed later
            worker = None
    try:
        # `release` after the last load: the analysis needs the memory more than idle workers.
        second = TraceSession(load(second_path, write_cache=False, release=True))
    finally:
        if worker is not None:
            worker.join()
    if overlap:
        prepare_concurrently(second)
    return (second, first) if swap else (first, second)
