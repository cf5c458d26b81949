"""Shared pieces of the fuzz and robustness tests: hostile values, byte mutations, a time limit,
and the checks every loaded trace must pass at the parser, analysis and view levels.

The example budget is small by default so the suite fits in CI; `KINETOSCOPE_FUZZ_EXAMPLES`
multiplies it for a long run (see docs/broken-traces.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kinetoscope.parser import Trace, TraceError, load, loads, read_event

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
INT64_MAX = (1 << 63) - 1


def scale() -> float:
    """How many times the default number of examples to run (KINETOSCOPE_FUZZ_EXAMPLES)."""
    raw = os.environ.get("KINETOSCOPE_FUZZ_EXAMPLES", "")
    try:
        return max(0.01, float(raw)) if raw else 1.0
    except ValueError:
        return 1.0


def fuzz_settings(examples: int, **extra: Any) -> settings:
    """Hypothesis settings: a bounded number of examples, no per-example deadline (the time
    limit below catches hangs instead, so a slow shared machine gives no false alarms)."""
    return settings(
        max_examples=max(1, int(examples * scale())),
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
        **extra,
    )


class Hang(BaseException):
    """Raised by `time_limit`; a BaseException so that no `except Exception` swallows it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail with Hang when the block runs longer than `seconds` (main thread only)."""

    def on_alarm(signum, frame):  # noqa: ARG001
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- hostile values ------------------------------------------------------------------------------

HOSTILE_STRINGS = [
    "",
    "[bold]markup[/bold]",
    "[memory]",
    "[red]x[/]",
    "[link=file:///etc/passwd]click[/link]",
    "\x1b[31mred\x1b[0m",
    "\x1b]0;pwned title\x07",
    "\x1b[2J\x1b[H",
    "\x1bP+q\x1b\\",
    "\x9b31m",
    "line\nbreak\rreturn\ttab",
    "\x00nul\x7fdel",
    "\u202eevil\u202c",
    "zero\u200bwidth",
    "\u2028sep",
    "wide 全角字符 名前",
    "e\u0301\u0301\u0301",
    "\ud800",
    "\udcff",
    "ProfilerStep#1",
    "ProfilerStep#99999999999999999999",
    "enumerate(DataLoader)#_Iter",
    "cudaLaunchKernel",
    "x" * 3000,
    "}, {",
    '"},{"',
    "\\",
]

hostile_text = st.one_of(
    st.sampled_from(HOSTILE_STRINGS),
    st.text(max_size=12),
    st.text(alphabet=st.characters(max_codepoint=0xA0), max_size=12),
)

HUGE_NUMBERS = [
    INT64_MAX,
    INT64_MAX + 1,
    -(1 << 63),
    1 << 64,
    10**30,
    -(10**30),
    9_223_372_036_854_775,
    9.2e15,
    -9.2e15,
    1e308,
    -1e308,
    5e-324,
    1.7976931348623157e308,
    float("nan"),
    float("inf"),
    float("-inf"),
]

numbers = st.one_of(
    st.integers(-100, 10_000),
    st.floats(-1e4, 1e4),
    st.sampled_from(HUGE_NUMBERS),
    st.integers(),
    st.floats(),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, hostile_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)


def maybe(plausible: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a plausible value, sometimes any JSON value at all."""
    return st.one_of(plausible, plausible, plausible, json_values)


PHASES = ["X", "X", "X", "X", "i", "I", "M", "s", "f", "t", "C", "B", "E", "b", "e", "", "XX"]
CATS = [
    "cpu_op",
    "kernel",
    "Kernel",
    "cuda_runtime",
    "cuda_driver",
    "gpu_memcpy",
    "gpu_memset",
    "Memcpy",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "cuda_sync",
    "Trace",
    "ac2g",
]
META_NAMES = ["process_name", "thread_name", "process_sort_index", "thread_sort_index"]


@st.composite
def events(draw) -> Any:
    """One element of traceEvents: usually an event-shaped object with odd values in places."""
    if draw(st.integers(0, 19)) == 0:
        return draw(json_values)  # not an object at all
    event: dict[str, Any] = {}
    ph = draw(maybe(st.sampled_from(PHASES)))
    fields = {
        "ph": ph,
        "cat": draw(maybe(st.sampled_from(CATS))),
        "name": draw(
            maybe(
                st.one_of(
                    st.sampled_from(["aten::mm", "ProfilerStep#3", "[memory]", *META_NAMES]),
                    hostile_text,
                )
            )
        ),
        "pid": draw(maybe(st.sampled_from([0, 1, 1, 2, "1", "007", "Spans", -1]))),
        "tid": draw(maybe(st.sampled_from([0, 1, 7, "stream 7", "PyTorch Profiler"]))),
        "ts": draw(maybe(st.one_of(st.integers(0, 200), st.floats(0, 200), numbers))),
        "dur": draw(maybe(st.one_of(st.integers(-5, 100), st.floats(-5, 100), numbers))),
        "id": draw(maybe(st.one_of(st.integers(0, 5), hostile_text))),
        "bp": draw(maybe(st.sampled_from(["e", "s", ""]))),
        "s": draw(maybe(st.sampled_from(["t", "p", "g"]))),
    }
    for key, value in fields.items():
        if draw(st.integers(0, 9)):
            event[key] = value
    if draw(st.booleans()):
        args = {
            "correlation": draw(maybe(st.integers(0, 6))),
            "External id": draw(maybe(st.integers(0, 6))),
            "device": draw(maybe(st.integers(0, 2))),
            "stream": draw(maybe(st.integers(0, 9))),
            "Input Dims": draw(maybe(st.lists(st.lists(st.integers(0, 9), max_size=3)))),
            "Total Allocated": draw(maybe(st.integers(0, 1 << 40))),
            "Total Reserved": draw(maybe(st.integers(0, 1 << 40))),
            "Device Type": draw(maybe(st.integers(0, 2))),
            "Device Id": draw(maybe(st.integers(-1, 2))),
            "name": draw(maybe(hostile_text)),
            "sort_index": draw(maybe(st.integers(-3, 3))),
            "Call stack": draw(maybe(hostile_text)),
        }
        kept = {k: v for k, v in args.items() if draw(st.integers(0, 3)) == 0}
        extra = draw(st.dictionaries(hostile_text, json_values, max_size=2))
        event["args"] = draw(st.sampled_from([{**kept, **extra}, {**kept, **extra}, json_values]))
        if not isinstance(event["args"], dict):
            event["args"] = draw(json_values)
    return event


@st.composite
def documents(draw) -> Any:
    """A whole trace: a bare array, or an object with header keys around traceEvents."""
    body = draw(st.lists(events(), max_size=30))
    if draw(st.integers(0, 4)) == 0:
        return body
    header_values = {
        "schemaVersion": maybe(st.integers(0, 3)),
        "baseTimeNanoseconds": maybe(st.integers(0, 1 << 62)),
        "deviceProperties": maybe(
            st.lists(
                st.fixed_dictionaries(
                    {"id": maybe(st.integers(0, 3)), "name": hostile_text},
                    optional={"totalGlobalMem": maybe(st.integers(0, 1 << 40))},
                ),
                max_size=3,
            )
        ),
        "distributedInfo": json_values,
        "displayTimeUnit": hostile_text,
        "traceName": hostile_text,
    }
    keys = draw(st.lists(st.sampled_from(sorted(header_values)), unique=True, max_size=4))
    before = draw(st.integers(0, len(keys)))
    doc: dict[str, Any] = {}
    for key in keys[:before]:
        doc[key] = draw(header_values[key])
    doc["traceEvents"] = body
    for key in keys[before:]:
        doc[key] = draw(header_values[key])
    return doc


def encode(doc: Any, ascii_only: bool, indent: int | None) -> bytes:
    """JSON text as a careless writer would produce it: NaN/Infinity literals, lone surrogates
    written as raw (invalid) UTF-8 when not escaped."""
    text = json.dumps(doc, ensure_ascii=ascii_only, allow_nan=True, indent=indent)
    return text.encode("utf-8", "surrogatepass")


# -- byte mutations ------------------------------------------------------------------------------

SPECIAL_BYTES = b'{}[]",:\\ \n\x00\xff\xc3-0eE.'


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """`data` after a few random edits: cut, drop, duplicate, insert, overwrite or flip bytes."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        size = len(out)
        at = draw(st.integers(0, size))
        op = draw(st.sampled_from(["cut", "drop", "dup", "insert", "special", "flip", "swap"]))
        if op == "cut":
            del out[at:]
        elif op == "drop":
            del out[at : at + draw(st.integers(1, 16))]
        elif op == "dup":
            out[at:at] = out[at : at + draw(st.integers(1, 64))]
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "special" and at < size:
            out[at] = draw(st.sampled_from(SPECIAL_BYTES))
        elif op == "flip" and at < size:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "swap" and size:
            other = draw(st.integers(0, size - 1))
            lo, hi = sorted((at if at < size else size - 1, other))
            out[lo], out[hi] = out[hi], out[lo]
    return bytes(out)


# -- what must hold for every input ----------------------------------------------------------------


def load_bytes(data: bytes, tmp_dir: Path | None = None, name: str = "fuzz.json") -> Trace | None:
    """Load `data` in memory (and, with `tmp_dir`, from a file too): a Trace, or None when the
    parser refused it with its one-line TraceError. Anything else propagates and fails the test."""
    results = []
    for how in ("bytes", "file") if tmp_dir is not None else ("bytes",):
        try:
            if how == "bytes":
                trace = loads(data, name)
            else:
                path = tmp_dir / name
                path.write_bytes(data)
                trace = load(str(path), use_cache=False, workers=1)
        except TraceError as error:
            message = str(error)
            assert message and "\n" not in message and "\r" not in message, repr(message)
            results.append(None)
            continue
        results.append(trace)
    if len(results) == 2:
        a, b = results
        assert (a is None) == (b is None), "loading from bytes and from a file disagree"
        if a is not None and b is not None:
            assert a.n_events == b.n_events
            assert np.array_equal(a.start, b.start) and np.array_equal(a.name, b.name)
    return results[0]


def check_trace(trace: Trace) -> None:
    """The model's own invariants."""
    n = len(trace)
    for column in ("ph", "name", "cat", "lane", "start", "dur", "corr", "ext_id", "device"):
        assert len(getattr(trace, column)) == n, column
    for column in ("stream", "flow_id", "flow_bp", "shape", "ordinal"):
        assert len(getattr(trace, column)) == n, column
    assert n <= trace.n_events
    if n:
        assert int(trace.dur.min()) >= 0
        assert bool(np.all(trace.start <= INT64_MAX - trace.dur)), "start + dur overflows"
        assert int(trace.name.max()) < len(trace.strings)
        assert int(trace.cat.max()) < len(trace.strings)
        assert 0 <= int(trace.lane.min()) and int(trace.lane.max()) < len(trace.lanes)
        assert bool(np.all(np.diff(trace.ordinal) > 0)), "rows out of file order"
        assert int(trace.ordinal[-1]) < trace.n_events
    assert sum(trace.by_phase.values()) == trace.n_events
    for warning in trace.warnings:
        assert isinstance(warning, str) and "\n" not in warning


def check_analysis(trace: Trace) -> dict:
    """Build the summary document and check the contract's invariants; returns the document."""
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.analysis.summary import build_summary

    from kinetoscope.present.report_summary import summary_json

    document = build_summary(trace)
    # What `summary --json` prints must be a valid JSON document: no NaN or Infinity.
    text = summary_json(document)

    def no_constants(name: str) -> Any:
        raise AssertionError(f"{name} in the summary")

    reparsed = json.loads(text, parse_constant=no_constants)
    assert reparsed["kinetoscope_summary"] == 1
    assert reparsed["trace"]["events"] == trace.n_events

    analysis = TraceSession(trace)
    for device in analysis.idle.devices:
        window = device.window
        if window is None:
            assert device.busy_ns == 0 and device.idle_ns == 0
            continue
        assert device.busy_ns + device.idle_ns == window[1] - window[0]
        assert device.idle_ns >= 0
        assert sum(device.idle_by_cause) == device.idle_ns
    gaps = analysis.idle.gaps
    assert bool(np.all(gaps.end - gaps.start > 0)), "a gap of zero or negative length"
    for entry in reparsed["gpu"]:
        if entry["window_start_us"] is not None:
            assert entry["busy_us"] >= 0 and entry["idle_us"] >= 0
    for op in reparsed["operators"]:
        assert op["count"] >= 1 and op["excl_us"] >= 0 and op["incl_us"] >= 0
    for kernel in reparsed["kernels"]:
        assert kernel["min_us"] <= kernel["mean_us"] + 0.001
        assert kernel["mean_us"] <= kernel["max_us"] + 0.001
    for step in reparsed["steps"]:
        assert 0 <= step["gpu_busy_us"] <= step["dur_us"] + 0.001
        assert 0 <= step["dataloader_us"] <= step["dur_us"] + 0.001
    for gap in reparsed["idle_gaps"]:
        assert gap["dur_us"] > 0
    for number in _numbers(reparsed):
        assert math.isfinite(number)
    return reparsed


SGR = re.compile(r"\x1b\[[0-9;]*m")


def check_report(trace: Trace, width: int = 80) -> str:
    """Render the `summary` text report as a terminal would get it; returns the plain text.

    Rich's own colour codes (SGR) are the only escape sequences allowed; no other control
    character may reach the terminal, and no line may be wider than the terminal."""
    import io

    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.analysis.summary import build_summary
    from rich.console import Console

    from kinetoscope.present.report_summary import summary_tables

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=width, color_system="truecolor")
    for renderable in summary_tables(TraceSession(trace), build_summary(trace)):
        console.print(renderable)
    plain = SGR.sub("", out.getvalue())
    bad = [ch for ch in plain if (ord(ch) < 32 and ch != "\n") or 0x7F <= ord(ch) < 0xA0]
    assert not bad, f"control characters reach the terminal: {bad[:5]!r}"
    assert not any(0xD800 <= ord(ch) < 0xE000 for ch in plain), "surrogates reach the terminal"
    for line in plain.split("\n"):
        assert _cell_len(line) <= width, line
    return plain


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)


def check_view(trace: Trace) -> None:
    """Build what the timeline draws and draw every level at a few zoom levels."""
    from kinetoscope.tui.data.viewdata import build_view_data
    from kinetoscope.tui.widgets.render import cells_to_segments, compute_cells

    data = build_view_data(trace)
    drawn = set()
    for lane in data.lanes:
        for level in lane.levels:
            drawn.update(level.rows.tolist())
            for per_cell in (max(1.0, data.span / 50), 7.0, data.span * 3.0):
                for t0 in (0.0, -per_cell * 10, float(data.span) / 2):
                    cells = compute_cells(level, t0, per_cell, 50)
                    assert bool(np.all((cells.busy >= 0) & (cells.busy <= 1)))
                    segments = cells_to_segments(cells, level, trace.name_of, cursor_col=3)
                    text = "".join(segment.text for segment in segments)
                    assert sum(_cell_len(segment.text) for segment in segments) == 50
                    assert not any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in text)
    # Every slice and GPU activity is drawn somewhere (nothing hidden).
    slices = np.flatnonzero(trace.ph == ord("X"))
    missing = set(slices.tolist()) - drawn
    assert not missing, f"rows never drawn: {sorted(missing)[:5]}"
    # ... and can be seen: zoomed in on it, some cell of its level shows it.
    for lane in data.lanes:
        for level in lane.levels:
            for entry in range(min(len(level), 200)):
                start, end = int(level.start[entry]), int(level.end[entry])
                if end > start:
                    per_cell = max((end - start) / 20, 1e-3)
                    t0 = start - 15 * per_cell
                else:
                    per_cell = 1000.0
                    t0 = start - 25.5 * per_cell
                cells = compute_cells(level, t0, per_cell, 50)
                row = int(level.rows[entry])
                assert entry in cells.entry, f"{trace.name_of(row)!r} (row {row}) is hidden"
    for row in range(min(len(trace), 3)):
        read_event(trace, row)


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def regression_files() -> list[Path]:
    return sorted(p for p in REGRESSIONS.iterdir() if p.is_file()) if REGRESSIONS.is_dir() else []
