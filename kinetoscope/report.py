"""`kinetoscope summary`: the analysis as JSON, or as Rich tables read top to bottom."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import msgspec


def run_summary(path: str, as_json: bool) -> int:
    """Load a trace and print its summary; 1 with a one-line message when it cannot be read."""
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import TraceError, load
    from kinetoscope.parser.builder import release_heap
    from kinetoscope.parser.reader import release_workers

    try:
        # A cached model is used when the viewer left one, but summary writes none: scripts and
        # CI call it on traces nobody will reopen, and the write would add seconds to a big one.
        trace = load(path, write_cache=False)
        release_workers()  # the analysis needs the memory more than an idle worker server
        release_heap()  # and the heap the decoding freed goes back to the system
    except TraceError as exc:
        from kinetoscope.tui.safe_text import clean  # the message holds the file's name

        print(f"kinetoscope: {clean(str(exc))}", file=sys.stderr)
        return 1
    if as_json:
        sys.stdout.write(summary_json(build_summary(trace)))
        sys.stdout.write("\n")
        return 0
    from rich.console import Console

    from kinetoscope.analysis import analyze

    console = Console()
    for renderable in summary_tables(analyze(trace), build_summary(trace)):
        console.print(renderable)
    return 0


def summary_json(document: dict[str, Any]) -> str:
    """The document as indented JSON text. NaN and Infinity (possible in header values copied
    through) become null; lone surrogates (a trace may spell `\\ud800`) stay JSON escapes."""
    try:
        return msgspec.json.format(msgspec.json.encode(document), indent=2).decode()
    except UnicodeEncodeError:
        return json.dumps(_finite(document), indent=2, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


# -- text report ----------------------------------------------------------------------------


def summary_tables(analysis: Any, document: dict[str, Any]) -> list[Any]:
    """The report's Rich renderables, in reading order."""
    from kinetoscope.report_memory_sync import memory_sync_tables

    sections = [
        trace_facts(analysis, document),
        steps_table(analysis),
        gpu_table(document),
        gaps_table(document),
        operators_table(document),
        kernels_table(analysis, document),
        memory_table(document),
        *memory_sync_tables(document),
        findings_table(document),
    ]
    return [s for s in sections if s is not None]


def _data(text: Any) -> Any:
    """Text from the trace, shown literally: no markup, no terminal control characters."""
    from rich.text import Text

    from kinetoscope.tui.safe_text import clean

    return Text(clean(str(text)))


def _dur(us: float | None) -> str:
    from kinetoscope.tui.timefmt import fmt_duration

    return "–" if us is None else fmt_duration(us * 1000)


def _pct(part: float, whole: float) -> str:
    return "–" if whole <= 0 else f"{100 * part / whole:.0f}%"


NAME_WIDTH = 48


def _table(
    title: str, *columns: str, right: tuple[str, ...] = (), names: tuple[str, ...] = ()
) -> Any:
    """A table; `right` columns are numbers, `names` columns hold event names, cut at
    NAME_WIDTH cells with an ellipsis so one C++ template name cannot take the screen."""
    from rich.table import Table
    from rich.text import Text

    # Titles and headers are Text, never markup: a title like "([memory] events)" stays whole.
    table = Table(title=Text(title), title_justify="left", title_style="bold", expand=False)
    for column in columns:
        if column in names:
            table.add_column(Text(column), no_wrap=True, overflow="ellipsis", max_width=NAME_WIDTH)
        else:
            table.add_column(Text(column), justify="right" if column in right else "left")
    return table


def trace_facts(analysis: Any, document: dict[str, Any]) -> Any:
    source, trace = document["source"], document["trace"]
    table = _table("Trace", "", "")
    table.show_header = False
    size = f"{source['bytes']:,} bytes" + (" (gzip)" if source["compressed"] else "")
    table.add_row("file", _data(source["path"]))
    table.add_row("size", size)
    phases = ", ".join(f"{ph} {n:,}" for ph, n in sorted(trace["by_phase"].items()))
    table.add_row("events", _data(f"{trace['events']:,} ({phases})"))
    cats = sorted(trace["by_category"].items(), key=lambda kv: -kv[1])
    table.add_row("slices", _data(", ".join(f"{c or '(none)'} {n:,}" for c, n in cats[:8])))
    if trace["start_us"] is not None:
        span = trace["end_us"] - trace["start_us"]
        table.add_row("span", f"{_dur(span)} from ts {trace['start_us']:.3f} µs")
    table.add_row("schema", _data(trace["schema_version"]))
    for device in document["devices"]:
        memory = device["total_memory_bytes"]
        mem = f", {memory / 2**30:.1f} GiB" if isinstance(memory, int) else ""
        table.add_row(_data(f"device {device['id']}"), _data(f"{device['name']}{mem}"))
    if not trace["complete"]:
        table.add_row("incomplete", "the file ended before the JSON did")
    for warning in trace["warnings"]:
        table.add_row("warning", _data(warning))
    return table


def steps_table(analysis: Any) -> Any:
    steps = analysis.steps
    if len(steps) == 0:
        return None
    trace = analysis.trace
    table = _table(
        "Steps: where the wall time went (GPU columns add up to the step; CPU columns overlap)",
        "step",
        "duration",
        "GPU compute",
        "comm",
        "memcpy/set",
        "GPU idle",
        "DataLoader (CPU)",
        "runtime (CPU)",
        right=(
            "duration",
            "GPU compute",
            "comm",
            "memcpy/set",
            "GPU idle",
            "DataLoader (CPU)",
            "runtime (CPU)",
        ),
        names=("step",),
    )
    for i in range(len(steps)):
        dur = int(steps.dur[i])

        def cell(ns: Any, dur: int = dur) -> str:
            return f"{_dur(int(ns) / 1000)} {_pct(int(ns), dur)}"

        table.add_row(
            _data(trace.name_of(int(steps.rows[i]))),
            _dur(dur / 1000),
            cell(steps.compute[i]),
            cell(steps.comm[i]),
            cell(steps.memory[i]),
            cell(steps.idle[i]),
            cell(steps.dataloader[i]),
            cell(steps.runtime[i]),
        )
    return table


def gpu_table(document: dict[str, Any]) -> Any:
    if not document["gpu"]:
        return None
    causes = ("host_wait", "kernel_wait", "other")
    numbers = ("kernels", "memcpy", "memset", "window", "busy", "idle", *causes)
    table = _table("GPU utilisation and idle time by cause", "device", *numbers, right=numbers)
    for gpu in document["gpu"]:
        start, end = gpu["window_start_us"], gpu["window_end_us"]
        window = None if start is None else end - start
        idle_by_cause = gpu["idle_by_cause"]
        table.add_row(
            str(gpu["device"]),
            f"{gpu['kernels']:,}",
            f"{gpu['memcpys']:,}",
            f"{gpu['memsets']:,}",
            _dur(window),
            f"{_dur(gpu['busy_us'])} {_pct(gpu['busy_us'], window or 0)}",
            f"{_dur(gpu['idle_us'])} {_pct(gpu['idle_us'], window or 0)}",
            *(_dur(idle_by_cause[c]) for c in causes),
        )
    return table


def gaps_table(document: dict[str, Any]) -> Any:
    if not document["idle_gaps"]:
        return None
    table = _table(
        "Longest GPU idle gaps, with what the CPU was doing at their midpoint",
        "device",
        "at",
        "duration",
        "cause",
        "next GPU event",
        "CPU stack (innermost last)",
        right=("at", "duration"),
        names=("next GPU event",),
    )
    origin = document["trace"]["start_us"] or 0.0
    for gap in document["idle_gaps"]:
        stack = gap["cpu_stack"]
        shown = stack if len(stack) <= 4 else ["…", *stack[-3:]]
        table.add_row(
            str(gap["device"]),
            "+" + _dur(gap["start_us"] - origin),
            _dur(gap["dur_us"]),
            gap["cause"],
            _data(gap["next_gpu_event"]),
            _data(" > ".join(shown)) if stack else "–",
        )
    return table


def operators_table(document: dict[str, Any], limit: int = 20) -> Any:
    if not document["operators"]:
        return None
    numbers = ("count", "self", "total", "GPU self", "GPU total")
    table = _table(
        f"Top operators by self time (of {len(document['operators'])} listed in --json)",
        "operator",
        "category",
        *numbers,
        right=numbers,
        names=("operator",),
    )
    for op in document["operators"][:limit]:
        table.add_row(
            _data(op["name"]),
            _data(op["cat"]),
            f"{op['count']:,}",
            _dur(op["excl_us"]),
            _dur(op["incl_us"]),
            _dur(op["gpu_self_us"]),
            _dur(op["gpu_total_us"]),
        )
    return table


def kernels_table(analysis: Any, document: dict[str, Any], limit: int = 20) -> Any:
    if not document["kernels"]:
        return None
    from kinetoscope.analysis.kernels import top_launcher

    numbers = ("count", "total", "mean", "min", "max")
    table = _table(
        f"Top GPU kernels and copies by total time (of {len(document['kernels'])} in --json)",
        "kernel",
        *numbers,
        "launched mostly by",
        right=numbers,
        names=("kernel", "launched mostly by"),
    )
    for kernel in document["kernels"][:limit]:
        launcher = top_launcher(analysis, kernel["cat"], kernel["name"])
        table.add_row(
            _data(kernel["name"]),
            f"{kernel['count']:,}",
            _dur(kernel["total_us"]),
            _dur(kernel["mean_us"]),
            _dur(kernel["min_us"]),
            _dur(kernel["max_us"]),
            _data(launcher) if launcher else "–",
        )
    return table


def memory_table(document: dict[str, Any]) -> Any:
    if not document["memory"]:
        return None
    capacity = {d["id"]: d["total_memory_bytes"] for d in document["devices"]}
    table = _table(
        "Memory peaks ([memory] events)",
        "device type",
        "device id",
        "peak allocated",
        "peak reserved",
        "of device memory",
        right=("peak allocated", "peak reserved", "of device memory"),
    )

    def size(value: int | None) -> str:
        return "–" if value is None else f"{value / 2**20:,.1f} MiB"

    for group in document["memory"]:
        total = capacity.get(group["device_id"]) if group["device_type"] == 1 else None
        peak = group["peak_reserved_bytes"] or group["peak_allocated_bytes"]
        share = _pct(peak, total) if isinstance(total, int) and peak is not None else "–"
        table.add_row(
            _data(group["device_type"]),
            _data(group["device_id"]),
            size(group["peak_allocated_bytes"]),
            size(group["peak_reserved_bytes"]),
            share,
        )
    return table


def findings_table(document: dict[str, Any]) -> Any:
    from rich.text import Text

    table = _table("Findings", "severity", "rule", "what we saw, and what to try")
    colours = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
    for finding in document["findings"]:
        table.add_row(
            Text(finding["severity"], style=colours.get(finding["severity"], "")),
            finding["rule"],
            _data(finding["message"]),
        )
    if not document["findings"]:
        table.add_row("", "", "No rule fired.")
    return table
