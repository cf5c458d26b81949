"""`kinetoscope summary DIR` (or several files): a distributed job as tables or as one JSON
document (docs/summary-ranks.md)."""

from __future__ import annotations

import sys
from typing import Any

from kinetoscope.analysis.units import fmt_bytes, fmt_duration
from kinetoscope.report import (
    Note,
    _data,
    _dur,
    _table,
    emit,
    emit_sections,
    summary_json,
)

TEXT_COLLECTIVES = 20  # rows of the collectives table in the text report (the JSON has 50)


def run_job_summary(
    inputs: list[str],
    output: str = "text",
    width: int | None = None,
    align_clocks: bool = False,
    cycle: int | None = None,
    workers: int | None = None,
    executor: Any = None,
    csv_dir: str | None = None,
    csv_raw: bool = False,
) -> int:
    """Discover the job in `inputs`, digest its ranks in worker processes, merge and print;
    1 with a one-line message when there is no job to read. With `csv_dir`, write the job
    viewer's tables there as CSV files instead (kinetoscope/tables.py; `csv_raw`: cells as
    recorded)."""
    from kinetoscope.analysis.job import analyze_job, job_document, map_ranks
    from kinetoscope.parser.ranks import JobError, discover
    from kinetoscope.tui.safe_text import clean

    try:
        files = discover(inputs, cycle=cycle)
    except JobError as exc:
        print(f"kinetoscope: {clean(str(exc))}", file=sys.stderr)
        return 1
    digests = map_ranks([f.path for f in files.files], executor=executor, workers=workers)
    try:
        job = analyze_job(digests, files, align_clocks=align_clocks)
        if csv_dir is not None:
            from kinetoscope import tables

            return tables.emit_written(tables.job_tables(job), csv_dir, inputs[0], raw=csv_raw)
        document = job_document(job)
    except MemoryError:  # the merge of the ranks' digests (each rank's own: in its digest)
        events = sum(d.events for d in digests)
        del digests
        from kinetoscope.parser.model import out_of_memory_message

        message = out_of_memory_message(clean(inputs[0]), events, "the merge of the ranks")
        print(f"kinetoscope: {message}", file=sys.stderr)
        return 1
    if output == "json":
        emit(summary_json(document) + "\n")
    else:
        emit_sections(job_tables(document), output, width)
    if job.ranks and not any(entry.loaded for entry in job.ranks):
        print("kinetoscope: no rank could be read (the report says why)", file=sys.stderr)
        return 1
    return 0


def job_tables(document: dict[str, Any]) -> list[Any]:
    """The job report's sections, in reading order."""
    sections = [
        job_facts(document),
        ranks_table(document),
        straggler_note(document),
        steps_table(document),
        collectives_table(document),
        stops_table(document),
        cycles_table(document),
        left_out_table(document),
    ]
    return [s for s in sections if s is not None]


def _rank_status(rank: dict[str, Any]) -> str:
    if rank["error"]:
        return "not loaded"
    return "ok" if rank["complete"] else "incomplete"


def job_facts(document: dict[str, Any]) -> Any:
    table = _table("Job", "fact", "value")
    table.show_header = False
    ranks = document["ranks"]
    loaded = sum(1 for r in ranks if r["loaded"])
    table.add_row("world size", str(document["world_size"] or "unknown"))
    table.add_row("ranks", f"{len(ranks)} files, {loaded} loaded")
    if document["missing"]:
        table.add_row("missing ranks", _rank_list(document["missing"]))
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
    table.add_row(
        "clocks",
        f"aligned on rank {document['clock_reference']} (estimated offsets subtracted)"
        if document["clocks_aligned"]
        else "as recorded (--align-clocks subtracts the estimated offsets)",
    )
    return table


def _rank_list(ranks: list[int], limit: int = 20) -> str:
    shown = ", ".join(str(r) for r in ranks[:limit])
    return shown + (f" and {len(ranks) - limit} more" if len(ranks) > limit else "")


def _offset(rank: dict[str, Any]) -> str:
    offset = rank["clock_offset_us"]
    if offset is None:
        return "–"
    sign = "-" if offset < 0 else "+"
    return f"{sign}{_dur(abs(offset))} ± {_dur(rank['clock_spread_us'] or 0.0)}"


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
    table = _table(
        "Ranks: the straggler waited least in collectives (it arrived last)",
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
    from kinetoscope.analysis.job import PHASE_TEXT

    straggler = document["straggler"]
    if straggler is None:
        return Note("No straggler: fewer than two ranks took part in matched collectives.")
    text = (
        f"Straggler: rank {straggler['rank']} waited {_short(straggler['wait_us'])} in "
        f"collectives, the median other rank {_short(straggler['median_wait_us'])}"
    )
    if straggler["phase"]:
        excess = straggler["excess_us"][straggler["phase"]]
        text += (
            f"; {PHASE_TEXT[straggler['phase']]} explains it: {_short(excess)} more than the "
            f"median rank over {len(straggler['steps'])} steps"
        )
        if straggler.get("worst_step"):
            text += f", most in {straggler['worst_step']}"
    elif straggler.get("reason"):
        text += f"; {straggler['reason']}"
    return Note(text + ".")


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
