"""`kinetoscope summary DIR` (or several files): a distributed job as tables or as one JSON
document (docs/summary-ranks.md). The command (the job found, its ranks digested and merged,
the errors) is kinetoscope/commands/summary.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kinetoscope.analysis.units import fmt_bytes, fmt_duration, plural
from kinetoscope.present.report_summary import (
    Note,
    _data,
    _dur,
    _table,
)

TEXT_COLLECTIVES = 20  # rows of the collectives table in the text report (the JSON has 50)
TEXT_PHASES = 8  # rows of the straggler's phases (the largest excesses; the rest in one row)


def _table_in_bundle(table: Any, bundle: Any) -> Any:
    """A CSV table whose text cells name the bundle's members, not its temporary folder
    (which is gone once the command ends)."""
    import dataclasses

    def shown(value: Callable[[int], Any]) -> Callable[[int], Any]:
        return lambda row: (lambda v: bundle.shown(v) if isinstance(v, str) else v)(value(row))

    fields = [
        dataclasses.replace(f, value=shown(f.value)) if f.kind.csv == "text" else f
        for f in table.fields
    ]
    return dataclasses.replace(table, fields=fields)


def _as_in_bundle(value: Any, bundle: Any) -> Any:
    """The document with the bundle's temporary paths shown as `job.zip:rank3.json`, and the
    ranks its manifest says were left out of the export listed in `left_out`."""

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return bundle.shown(item)
        if isinstance(item, list):
            return [walk(v) for v in item]
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        return item

    document = walk(value)
    document["left_out"] = document.get("left_out", []) + [
        {"path": f"{bundle.archive}: rank {rank}", "reason": f"not in the bundle: {why}"}
        for rank, why in bundle.left_out
    ]
    return document


def job_tables(document: dict[str, Any]) -> list[Any]:
    """The job report's sections, in reading order."""
    sections = [
        job_facts(document),
        *health_notes(document),
        ranks_table(document),
        straggler_note(document),
        straggler_phases_table(document),
        steps_table(document),
        collectives_table(document),
        stops_table(document),
        cycles_table(document),
        left_out_table(document),
        notes_table(document),
    ]
    return [s for s in sections if s is not None]


def _rank_status(rank: dict[str, Any]) -> str:
    if rank["error"]:
        return "not loaded"
    ended = (rank.get("exit") or {}).get("ended")
    if ended in ("exception", "exit", "lost"):
        # It failed because a peer failed first (a peer error in a collective).
        return "knock-on" if (rank.get("exit") or {}).get("knock_on_of") is not None else "failed"
    if ended == "stopped":
        return "stopped"
    return "ok" if rank["complete"] else "incomplete"


def health_notes(document: dict[str, Any]) -> list[Any]:
    """One line per rank whose program did not end normally (capture's exit records), in the
    order they ended: `rank 2 exited with RuntimeError at ProfilerStep#8; its trace is
    partial`, with the exception's message; none when every rank ended normally or no record
    was left. The ranks that failed because a peer failed first (knock-on failures) are said
    in one line after the failure they followed, not one each."""
    health = document.get("health") or {}
    order = health.get("ended_badly") or []
    by_rank = {r["rank"]: r for r in document["ranks"]}
    first = health.get("first_failure") if len(health.get("failed") or []) > 1 else None
    knocked = set(health.get("knock_on") or [])
    cause = health.get("cause")
    notes = []
    for rank, text in zip(order, health.get("messages") or []):
        if rank in knocked:
            continue
        message = ((by_rank.get(rank) or {}).get("exit") or {}).get("message")
        line = f"Rank {text.removeprefix('rank ')}"
        if rank == first:
            line += " (the first rank to fail)"
        notes.append(Note(line + (f": {message}" if message else ".")))
        if rank == cause and health.get("knock_on_message"):
            said = health["knock_on_message"]
            notes.append(Note(said[:1].upper() + said[1:] + "."))
    return notes


def job_facts(document: dict[str, Any]) -> Any:
    table = _table("Job", "fact", "value")
    table.show_header = False
    ranks = document["ranks"]
    loaded = sum(1 for r in ranks if r["loaded"])
    table.add_row("world size", str(document["world_size"] or "unknown"))
    table.add_row("ranks", f"{len(ranks)} files, {loaded} loaded")
    if document["missing_count"]:
        from kinetoscope.parser.ranks import ranges_text

        ranges = [(r["first"], r["last"]) for r in document["missing_ranges"]]
        table.add_row("missing ranks", ranges_text(ranges, document["missing_count"]))
    for item in document["incomplete"]:
        table.add_row(f"rank {item['rank']}", _data(item["reason"]))
    matching = document["matching"]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(matching["by_kind"].items()))
    source = "GPU kernels" if matching["source"] == "gpu" else "CPU (backend annotations)"
    table.add_row(
        "collectives",
        f"{matching['matched']} matched across ranks, from {source}"
        + (f": {kinds}" if kinds else ""),
    )
    chosen = next((c for c in document["cycles"] if c["chosen"]), None)
    if chosen is not None and len(document["cycles"]) > 1:
        table.add_row(
            "profiling cycle",
            f"{chosen['index']} of {len(document['cycles'])} (--cycle N picks another)",
        )
    table.add_row("clocks", _clocks_text(document))
    return table


def _clocks_text(document: dict[str, Any]) -> str:
    clocks = document.get("clocks") or {}
    if clocks.get("one_clock"):
        source = "their traces" if clocks.get("host_source") == "trace" else "capture's records"
        host = clocks["hosts"][0] if clocks.get("hosts") else "?"
        text = f"one clock: every rank ran on host {host} (said by {source})"
        if clocks.get("alignment") == "forced":
            return (
                text + f"; aligned on rank {document['clock_reference']} anyway "
                "(--force-align-clocks: the estimated offsets, arrival differences here, "
                "subtracted)"
            )
        if clocks.get("alignment") == "not needed: one host":
            return text + "; --align-clocks has nothing to align (--force-align-clocks does)"
        return text + "; the offsets below are arrival differences, not clock skew"
    if document["clocks_aligned"]:
        return f"aligned on rank {document['clock_reference']} (estimated offsets subtracted)"
    text = "as recorded (--align-clocks subtracts the estimated offsets)"
    if len(clocks.get("hosts") or []) > 1:
        text = f"{len(clocks['hosts'])} hosts; " + text
    return text


def _rank_list(ranks: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(r) for r in ranks[:limit])
    return shown + (f" and {len(ranks) - limit} more" if len(ranks) > limit else "")


def _offset(rank: dict[str, Any]) -> str:
    """`+100.000 µs ± 4.000 µs`, with `(n.s.)` when it does not stand out of its spread."""
    offset = rank["clock_offset_us"]
    if offset is None:
        return "–"
    sign = "-" if offset < 0 else "+"
    text = f"{sign}{_dur(abs(offset))} ± {_dur(rank['clock_spread_us'] or 0.0)}"
    return text + (" (n.s.)" if rank.get("clock_offset_significant") is False else "")


def ranks_table(document: dict[str, Any]) -> Any:
    numbers = (
        "steps",
        "mean step",
        "GPU busy",
        "GPU idle",
        "in collectives",
        "waited",
        "clock offset",
    )
    one_clock = (document.get("clocks") or {}).get("one_clock")
    table = _table(
        "Ranks: the straggler waited least in collectives (it arrived last)"
        + (
            "; one clock: offsets are arrival differences"
            if one_clock
            else "; clock offset ± its spread, n.s.: not significant"
        ),
        "rank",
        "status",
        *numbers,
        "rank from",
        right=numbers,
    )
    straggler = (document["straggler"] or {}).get("rank")
    for rank in document["ranks"]:
        durations = [s["dur_us"] for s in rank["steps"] if s["dur_us"] is not None]
        mean = sum(durations) / len(durations) if durations else None
        label = f"{rank['rank']} ◀ straggler" if rank["rank"] == straggler else str(rank["rank"])
        table.add_row(
            label,
            _rank_status(rank),
            str(len(rank["steps"])),
            _dur(mean),
            _dur(rank["busy_us"]),
            _dur(rank["idle_us"]),
            _dur(rank["collective_us"]) if rank["loaded"] else "–",
            _dur(rank["wait_us"]) if rank["loaded"] else "–",
            _offset(rank),
            rank["rank_rule"],
        )
    return table


def straggler_note(document: dict[str, Any]) -> Any:
    from kinetoscope.analysis.job import ANNOTATION, phase_label

    straggler = document["straggler"]
    health = document.get("health") or {}
    failed = health.get("failed") or []
    if straggler is None and failed:
        knocked = health.get("knock_on") or []
        own = [r for r in failed if r not in knocked]
        said = f"{'rank' if len(own) == 1 else 'ranks'} {_rank_list(own)} failed"
        if knocked:
            these = "rank" if len(knocked) == 1 else "ranks"
            after = "it" if len(own) == 1 else f"rank {health.get('cause')}"
            said += f" and {these} {_rank_list(sorted(knocked))} stopped after {after}"
        return Note(
            f"No straggler named: fewer than two ranks that did not die took part in matched "
            f"collectives ({said}: a rank that died is not named for arriving late)."
        )
    if straggler is None:
        return Note("No straggler: fewer than two ranks took part in matched collectives.")
    text = (
        f"Straggler: rank {straggler['rank']} waited {_short(straggler['wait_us'])} in "
        f"collectives, the median other rank {_short(straggler['median_wait_us'])}"
    )
    if straggler["phase"] == ANNOTATION:
        name = straggler["phase_annotation"]
        excess, label = straggler["annotation_excess_us"][name], phase_label(f"{ANNOTATION}:{name}")
    elif straggler["phase"]:
        excess, label = straggler["excess_us"][straggler["phase"]], phase_label(straggler["phase"])
    if straggler["phase"]:
        text += (
            f"; {label} explains it: {_short(excess)} more than the median rank "
            f"(rank {straggler['reference_rank']}) over {len(straggler['steps'])} steps"
        )
        if straggler.get("worst_step"):
            text += f", most in {straggler['worst_step']}"
    else:
        delay = straggler.get("start_delay_us")
        if delay is not None and delay > 0:
            text += f"; it started its step {_short(delay)} after the others"
        if straggler.get("reason"):
            text += f"; {straggler['reason']}"
    return Note(text + ".")


def straggler_phases_table(document: dict[str, Any]) -> Any:
    """The straggler's step partition against the median rank's, over the steps every rank
    recorded: a row per phase or annotation either rank spent time in, by excess."""
    from kinetoscope.analysis.job import ANNOTATION, phase_label

    straggler = document["straggler"]
    if not straggler or not straggler.get("steps") or straggler.get("reference_rank") is None:
        return None
    ranks = {r["rank"]: r for r in document["ranks"]}
    mine, ref = ranks.get(straggler["rank"]), ranks.get(straggler["reference_rank"])
    if mine is None or ref is None:
        return None
    common = set(straggler["steps"])

    def totals(rank: dict[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        for step in rank["steps"]:
            if step["name"] in common:
                for key, value in step["phases_us"].items():
                    out[key] = out.get(key, 0.0) + value
                for name, value in step["annotations_us"].items():
                    key = f"{ANNOTATION}:{name}"
                    out[key] = out.get(key, 0.0) + value
        return out

    a, b = totals(mine), totals(ref)
    excess = {**straggler["excess_us"]}
    excess.update({f"{ANNOTATION}:{n}": v for n, v in straggler["annotation_excess_us"].items()})
    keys = [k for k in excess if a.get(k, 0.0) or b.get(k, 0.0)]
    kept = set(sorted(keys, key=lambda k: -abs(excess[k]))[:TEXT_PHASES])
    rest = [k for k in keys if k not in kept]
    keys = sorted(kept, key=lambda k: -excess[k])
    numbers = (f"rank {mine['rank']}", f"rank {ref['rank']} (median)", "excess")
    table = _table(
        f"Straggler's phases against the median rank, over {plural(len(common), 'step')} "
        "(they add up to the step time)",
        "phase",
        *numbers,
        right=numbers,
        names=("phase",),
        key=3,
    )
    rows = [(_data(phase_label(k)), a.get(k, 0.0), b.get(k, 0.0), excess[k]) for k in keys]
    if rest:
        rows.append(
            (
                f"({plural(len(rest), 'other phase')})",
                sum(a.get(k, 0.0) for k in rest),
                sum(b.get(k, 0.0) for k in rest),
                sum(excess[k] for k in rest),
            )
        )
    for label, own, median, more in rows:
        sign = "+" if more > 0 else ("−" if more < 0 else "")
        # A table's durations, zeros kept, as its other columns (`+403.000 µs`, not `+403 µs`)
        excess_cell = sign + _dur(round(abs(more), 3))
        table.add_row(label, _dur(round(own, 3)), _dur(round(median, 3)), excess_cell)
    return table


def steps_table(document: dict[str, Any]) -> Any:
    rows = [(rank, step) for rank in document["ranks"] for step in rank["steps"]]
    if not rows:
        return None
    numbers = ("duration", "compute", "exposed comm", "GPU idle", "waited")
    table = _table(
        "Steps by rank: compute and exposed communication on the GPU (CPU-only ranks: –), "
        "collective wait",
        "rank",
        "step",
        *numbers,
        right=numbers,
        names=("step",),
        key=2,
    )
    for rank, step in rows:
        table.add_row(
            str(rank["rank"]),
            _data(step["name"]),
            _dur(step["dur_us"]),
            _dur(step["compute_us"]),
            _dur(step["comm_us"]),
            _dur(step["idle_us"]),
            _dur(step["wait_us"]),
        )
    return table


def _short(us: float) -> str:
    """A duration for prose and packed cells: its unit, trailing zeros dropped (`508 µs`)."""
    return fmt_duration(us * 1000)


def _size(value: int | None) -> str:
    """Bytes in binary units, two decimals above B."""
    return "–" if value is None else fmt_bytes(value)


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g} GB/s"


def collectives_table(document: dict[str, Any], limit: int = TEXT_COLLECTIVES) -> Any:
    entries = document["collectives"]
    if not entries:
        return None
    numbers = ("size", "latency", "start skew", "end skew", "last", "algbw", "busbw")
    table = _table(
        f"Collectives by start skew (top {min(limit, len(entries))} of "
        f"{document['matching']['matched']} matched; waits per rank, * not significant)",
        "collective",
        "group",
        "step",
        *numbers,
        "waits",
        right=numbers,
        names=("collective", "group", "step"),
    )
    for entry in entries[:limit]:
        quiet = set(entry["not_significant"])
        waits = ", ".join(
            f"{r}: {_short(w)}{'*' if int(r) in quiet else ''}" for r, w in entry["wait_us"].items()
        )
        table.add_row(
            _data(f"{entry['kind']} #{entry['index']}"),
            _data(entry["group"]),
            _data(entry["step"] or "–"),
            _size(entry["bytes"]),
            _dur(entry["latency_us"]),
            _dur(entry["start_skew_us"]),
            _dur(entry["end_skew_us"]),
            str(entry["last_rank"]),
            _rate(entry["algbw_GBps"]),
            _rate(entry["busbw_GBps"]),
            waits,
        )
    return table


def stops_table(document: dict[str, Any]) -> Any:
    stops = document["matching"]["stopped"]
    if not stops:
        return None
    table = _table(
        "Where matching stopped (the ranks disagree)",
        "group",
        "step",
        "at",
        "why",
        right=("at",),
        names=("group", "step"),
    )
    for stop in stops:
        table.add_row(
            _data(stop["group"] or "–"),
            _data(stop["step"] or "–"),
            str(stop["index"]),
            _data(stop["reason"]),
        )
    return table


def cycles_table(document: dict[str, Any]) -> Any:
    cycles = document["cycles"]
    if len(cycles) <= 1:
        return None
    table = _table(
        "Profiling cycles (--cycle N picks one)",
        "cycle",
        "ranks",
        "complete",
        "used",
        right=("cycle",),
    )
    for cycle in cycles:
        table.add_row(
            str(cycle["index"]),
            _rank_list(cycle["ranks"]),
            "yes" if cycle["complete"] else "no",
            "◀" if cycle["chosen"] else "",
        )
    return table


def left_out_table(document: dict[str, Any]) -> Any:
    if not document["left_out"]:
        return None
    table = _table("Files left out", "file", "why", names=("file",))
    for item in document["left_out"]:
        table.add_row(_data(item["path"]), _data(item["reason"]))
    return table


def notes_table(document: dict[str, Any]) -> Any:
    """Files used with another rank than their name's number (docs/summary-ranks.md)."""
    if not document.get("notes"):
        return None
    table = _table("Rank numbers not taken", "file", "why", names=("file",))
    for item in document["notes"]:
        table.add_row(_data(item["path"]), _data(item["note"]))
    return table
