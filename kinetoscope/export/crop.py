"""Export a time window of one trace as a smaller trace that Perfetto and kinetoscope open.

The crop is made from the file's own text: the events kept are copied byte for byte from the
file (re-read run by run through the model's `ChunkIndex`, never re-encoded from the model),
and only an event whose times change (clipped, re-stamped) is written again, with its other
fields still copied as they were written. docs/export.md defines what is kept and why:

- every top-level key except `traceEvents`, as its raw text, in the file's order;
- every metadata (`M`) event;
- every `X` event that overlaps the window (more than zero time inside it, or a zero-length
  one inside the closed window; the definition of analysis/ranges.py), and the correlation
  closure: a kept runtime call brings the GPU activities it launched and a kept GPU activity
  its launch, wherever they are, and every slice kept brings its enclosing slices (so nesting
  stays valid and the range statistics of the crop over the window equal the original's);
- flows (`s`/`t`/`f`) whose every event is bound to a kept slice, and only those: never an
  orphan start or end;
- `[memory]` instants inside the window, plus one per device at the window's start carrying
  the totals before it; `Iteration Start` / `Record Window End` re-stamped to the window's
  start / end; every other instant, counter or event of another phase inside the window.

Times that change are computed in integer ns from the model and written as µs with exactly
three decimals (never through a float).

`open_crop` chooses the events and `write_crop` then reads the file's runs as it writes them,
so the memory is the model's plus one run's (streamed, whatever the number of events kept);
`crop_trace` is the same crop with every kept event's text held (the multi-rank merge).
"""

from __future__ import annotations

import gzip
import os
import re
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from kinetoscope.parser.access import RAW_LIST, read_ranges
from kinetoscope.parser.model import (
    NO_VALUE,
    PH_COMPLETE,
    PH_FLOW_END,
    PH_FLOW_START,
    PH_FLOW_STEP,
    PH_INSTANT,
    PH_INSTANT_OLD,
    Trace,
)

MEMORY_NAME = "[memory]"
ITERATION_START = "Iteration Start"  # Kineto: "Iteration Start: PyTorch Profiler"
RECORD_WINDOW_END = "Record Window End"
# Earlier slices of a GPU stream tried for a flow event the latest one does not hold.
OTHER_ANCHOR_TRIES = 8
# What the memory baseline instant says about itself, in its args.
BASELINE_NOTE = "memory totals before the exported window"


class ExportError(Exception):
    """An export that cannot be made: the one line that says why."""


@dataclass(frozen=True)
class Window:
    """[start_ns, end_ns]: absolute ns in the trace's own clock (the model's `start`)."""

    start_ns: int
    end_ns: int

    @property
    def length(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class CropStats:
    """Counts for the message: what the crop holds and why."""

    events: int = 0  # events written, all phases
    source_events: int = 0  # events in the original (what was read of it)
    slices: int = 0  # X events
    in_window: int = 0  # X events overlapping the window
    closure: int = 0  # X events outside the window brought by correlation (and their parents)
    flows: int = 0  # flows kept (pairs, or chains with steps)
    flows_dropped: int = 0  # flows with an end bound to no kept slice
    memory: int = 0  # [memory] instants inside the window
    baseline: int = 0  # [memory] instants added at the window's start
    metadata: int = 0  # M events
    restamped: int = 0  # Iteration Start / Record Window End moved to the window
    clipped: int = 0  # X events whose times were clipped
    other: int = 0  # other instants, counters, other phases inside the window
    reencoded: int = 0  # events from a damaged region, written from their decoded value


@dataclass
class Crop:
    """What `write_crop` writes: the top-level keys (raw JSON text, in order) and the events."""

    top: dict[str, bytes]
    events: list[bytes]
    window: Window
    events_at: int = 0  # how many of `top`'s keys come before `traceEvents`
    array_form: bool = False  # the original was a bare array of events (no top-level object)
    stats: CropStats = field(default_factory=CropStats)
    warnings: list[str] = field(default_factory=list)
    stopped_at: int | None = None  # the original stopped early (damaged, cut off) at this byte
    edges: Window | None = None  # the times written at the window's edges (readable_edges)

    @property
    def kept(self) -> int:
        return len(self.events)


# -- times as text --------------------------------------------------------------------------


def us_bytes(ns: int) -> bytes:
    """Integer ns as µs with exactly three decimals, exact at any size (no float), as the bytes
    of a JSON number: the digits of analysis/units.py's `us_text`, on the write's hot path."""
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}".encode()


_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TIME = re.compile(r"\s*([+-]?)\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|μs|ms|s)\s*$")


def parse_time(text: str) -> int:
    """`+12.5ms`, `40 ms`, `-3us`, `1.5s` -> integer ns (exact: decimals are read as text)."""
    from kinetoscope.common.numbers import MAX_NUMBER_TEXT, shown

    if len(text) > MAX_NUMBER_TEXT:  # before int(): 5,000 digits are a ValueError of their own
        raise ExportError(f"the time {shown(text.strip())} is too large")
    match = _TIME.match(text)
    if match is None:
        raise ExportError(
            f"cannot read the time {text.strip()!r}: write a number and a unit "
            "(ns, us, µs, ms or s), e.g. +12.5ms"
        )
    sign, number, unit = match.groups()
    whole, _, frac = number.partition(".")
    scale = _UNIT_NS[unit]
    digits = len(str(scale)) - 1
    frac_digits = (frac + "0" * digits)[:digits]
    if frac[digits:].strip("0"):
        raise ExportError(f"the time {text.strip()!r} is finer than a nanosecond")
    ns = int(whole or "0") * scale + (int(frac_digits) if digits else 0)
    if ns >= 1 << 60:  # some 36 years: beyond any trace, and beyond int64 arithmetic
        raise ExportError(f"the time {text.strip()!r} is too large")
    return -ns if sign == "-" else ns


def parse_window(text: str, trace_origin_ns: int, trace_end_ns: int | None = None) -> Window:
    """`A..B` as the viewer shows times (relative to the viewer's origin, the trace's first
    slice start), e.g. `+12.5ms..+40ms`. `A..` runs to the trace's end (`trace_end_ns`), `..B`
    from the origin. The result is absolute ns in the trace's clock."""
    if ".." not in text:
        raise ExportError(
            f"cannot read the window {text.strip()!r}: write START..END, e.g. +12.5ms..+40ms"
        )
    left, _, right = text.partition("..")
    start = trace_origin_ns + (parse_time(left) if left.strip() else 0)
    if right.strip():
        end = trace_origin_ns + parse_time(right)
    elif trace_end_ns is not None:
        end = max(trace_end_ns, start + 1)  # after the trace: "outside the trace", not "empty"
    else:
        raise ExportError(f"the window {text.strip()!r} has no end")
    if end <= start:
        raise ExportError(f"the window {text.strip()!r} is empty: its end is not after its start")
    return Window(start, end)


def read_back(ns: int) -> int:
    """The ns a reader gets for a time written as `us_bytes(ns)`: JSON numbers with decimals
    are read as doubles (kinetoscope's parser, Perfetto), then rounded to a ns."""
    from kinetoscope.parser.convert import to_ns

    value = to_ns(float(us_bytes(ns)))
    return ns if value is None else value


# How far from a window's edge a time that reads back exactly is looked for (epoch-based times
# are read to some 256 ns; a few µs is plenty).
EDGE_SEARCH_NS = 4096


def readable_edges(window: Window) -> Window:
    """The window's edges as written into the crop: each edge itself when a reader reads it
    back exactly (every trace whose times fit a double), else the nearest time outside the
    window that reads back exactly, so that clipped slices still cover the whole window for
    a reader. `start_ns <= window.start_ns` and `end_ns >= window.end_ns`."""

    def search(ns: int, step: int) -> int:
        for offset in range(EDGE_SEARCH_NS):
            candidate = ns + step * offset
            if read_back(candidate) == candidate:
                return candidate
        return ns

    return Window(search(window.start_ns, -1), search(window.end_ns, 1))


# -- reading the file's bytes again -----------------------------------------------------------


_RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])


class _Phase(msgspec.Struct):
    ph: Any = None


_PHASE = msgspec.json.Decoder(_Phase)
_KEY_OF_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[\s*$')


def _head_keys(head: bytes) -> tuple[list[tuple[str, bytes]], bool]:
    """The top-level keys before the events array as raw text, in order, and whether the file
    is a bare array of events (then there are none)."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"["):
        return [], True
    match = _KEY_OF_EVENTS.search(text)
    if match is not None and text.startswith(b"{"):
        before = text[1 : match.start()].rstrip().rstrip(b",")
        try:
            return [
                (k, bytes(v)) for k, v in _RAW_OBJECT.decode(b"{" + before + b"}").items()
            ], False
        except msgspec.DecodeError:
            pass
    return [], False


def _tail_keys(
    trace: Trace, before: dict[str, bytes], tail: bytes, warnings: list[str]
) -> list[tuple[str, bytes]]:
    """The top-level keys written after the events array, as raw text: those after it in the
    file (but the keys `before` it), then the trace's keys whose text could not be read again
    (damaged), from their parsed value, with a warning."""
    after: dict[str, bytes] = {}
    text = _after_events(tail)
    if text is not None:
        try:
            for key, value in _RAW_OBJECT.decode(text).items():
                if key not in before:
                    after.setdefault(key, bytes(value))
        except msgspec.DecodeError:
            pass
    missing = [
        key
        for key in trace.header
        if key not in before and key not in after and key != "traceEvents"
    ]
    for key in missing:  # unreadable as text again (damaged): written from the parsed value
        try:
            after[key] = msgspec.json.encode(trace.header[key])
        except (TypeError, ValueError, OverflowError):
            continue
    if missing:
        warnings.append(
            "top-level keys written from their parsed value (their text could not be read "
            "again): " + ", ".join(missing[:5])
        )
    return list(after.items())


def _after_events(tail: bytes) -> bytes | None:
    """The keys after the events array (`], "k": v}`) as an object's text, or None."""
    from kinetoscope.parser.access import array_elements

    if not tail.strip():
        return None
    _starts, _ends, closed = array_elements(tail, 0)
    if closed is None:
        return None
    rest = tail[closed + 1 :].lstrip()
    if rest.startswith(b","):
        return b"{" + rest[1:]
    return None


# -- choosing the events ------------------------------------------------------------------------


@dataclass
class _Plan:
    """Rows kept and the times to write again (new start, new end in ns) where they change."""

    keep: np.ndarray  # bool per row
    new_start: dict[int, int]
    new_end: dict[int, int]  # X events: the end (start + dur)
    baseline: list[tuple[int, int, int]]  # (ordinal of the last event before, alloc, reserved)
    stats: CropStats
    order_of: dict[int, int]  # rows written at another row's place (clipping ties)
    edges: Window  # the times written at the window's edges (readable_edges)


def _names(trace: Trace, test: Any) -> np.ndarray:
    """Boolean per row: does the row's name pass `test`."""
    ok = np.fromiter(
        (bool(test(s[:256])) for s in trace.strings), dtype=bool, count=len(trace.strings)
    )
    return ok[trace.name] if len(trace.strings) else np.zeros(len(trace), dtype=bool)


def _plan(trace: Trace, session: Any, window: Window, clip: bool) -> _Plan:
    t0, t1 = window.start_ns, window.end_ns
    stats = CropStats()
    ph = trace.ph
    start = trace.start
    end = start + trace.dur
    n = len(trace)
    is_x = ph == PH_COMPLETE
    inside = np.minimum(end, t1) - np.maximum(start, t0)
    point = (trace.dur == 0) & (start >= t0) & (start <= t1)
    in_window = is_x & ((inside > 0) | point)
    keep = in_window.copy()

    # Correlation closure (runtime calls of kept GPU activities, GPU activities of kept calls)
    # and the enclosing slices of everything kept (the nesting's parents, up to the roots), to a
    # fixed point: an enclosing slice may be a runtime call with GPU work of its own.
    links = session.links
    gpu_rows, gpu_runtime = links.gpu_rows, links.gpu_runtime
    linked = gpu_runtime >= 0
    launches = np.zeros(n, dtype=bool)
    launches[links.corr_runtime] = True
    parent = session.nesting.parent
    while True:
        before = int(keep.sum())
        runtime_kept = keep & launches
        runtime_kept[gpu_runtime[linked & keep[gpu_rows]]] = True
        keep |= runtime_kept
        keep[gpu_rows[linked & runtime_kept[np.maximum(gpu_runtime, 0)]]] = True
        frontier = np.flatnonzero(keep)
        while len(frontier):
            up = parent[frontier]
            up = np.unique(up[up >= 0])
            up = up[~keep[up]]
            keep[up] = True
            frontier = up
        if int(keep.sum()) == before:
            break
    stats.in_window = int(in_window.sum())
    stats.slices = int(keep.sum())
    stats.closure = stats.slices - stats.in_window

    new_start: dict[int, int] = {}
    new_end: dict[int, int] = {}
    order_of: dict[int, int] = {}
    # The times written at the window's edges: the window's own, or just outside it where a
    # reader would read those back a few ns off (epoch-based times beyond a double's precision).
    edges = readable_edges(window)
    e0, e1 = edges.start_ns, edges.end_ns
    if clip:
        depth = session.nesting.depth
        cut_start, cut_end, order_of = _clipping(trace, keep, in_window, parent, depth, edges)
        for row in np.flatnonzero(cut_start).tolist():
            new_start[row] = e0
        for row in np.flatnonzero(cut_end).tolist():
            new_end[row] = e1
        stats.clipped = int((cut_start | cut_end).sum())

    # Flows: kept when every event of the flow is bound to a kept slice.
    is_flow = (ph == PH_FLOW_START) | (ph == PH_FLOW_STEP) | (ph == PH_FLOW_END)
    flow_rows = np.flatnonzero(is_flow & (trace.flow_id != NO_VALUE))
    if len(flow_rows):
        anchor = _flow_anchors(trace, session, flow_rows)
        bound = (anchor >= 0) & keep[np.maximum(anchor, 0)]
        key = np.stack([trace.cat[flow_rows].astype(np.int64), trace.flow_id[flow_rows]], axis=1)
        _, group = np.unique(key, axis=0, return_inverse=True)
        group = group.reshape(-1)
        groups = int(group.max()) + 1
        all_bound = np.bincount(group, weights=~bound, minlength=groups) == 0
        fph = ph[flow_rows]
        has_start = np.bincount(group, weights=fph == PH_FLOW_START, minlength=groups) > 0
        has_end = np.bincount(group, weights=fph == PH_FLOW_END, minlength=groups) > 0
        whole = has_start & has_end
        good = all_bound & whole
        touched = np.bincount(group, weights=bound, minlength=groups) > 0
        stats.flows = int(good.sum())
        stats.flows_dropped = int((touched & ~good).sum())
        kept_flow = good[group]
        keep[flow_rows[kept_flow]] = True
        if clip:  # a flow event stays inside the slice it is bound to
            for row, a in zip(flow_rows[kept_flow].tolist(), anchor[kept_flow].tolist()):
                ts = int(start[row])
                if a in new_start and ts < e0:
                    new_start[row] = e0
                elif a in new_end and ts > e1:
                    new_start[row] = e1

    # Instants, counters and the other phases.
    instant = (ph == PH_INSTANT) | (ph == PH_INSTANT_OLD)
    inside_closed = (start >= t0) & (start <= t1)
    memory = instant & _names(trace, lambda s: s == MEMORY_NAME)
    restamp_start = instant & _names(trace, lambda s: s.startswith(ITERATION_START))
    restamp_end = instant & _names(trace, lambda s: s == RECORD_WINDOW_END)
    # The marks sit exactly on the window's bounds (written from the integer ns), not on the
    # readable edges the clipped slices use: they say where the window is.
    for row in np.flatnonzero(restamp_start).tolist():
        new_start[row] = t0
    for row in np.flatnonzero(restamp_end).tolist():
        new_start[row] = t1
    restamped = restamp_start | restamp_end
    stats.restamped = int(restamped.sum())
    keep |= restamped
    stats.memory = int((memory & inside_closed).sum())
    rest = ~is_x & ~is_flow & ~restamped
    stats.other = int((rest & ~memory & inside_closed).sum())
    keep |= rest & inside_closed
    return _Plan(
        keep=keep,
        new_start=new_start,
        new_end=new_end,
        baseline=_memory_baseline(trace, t0),
        edges=edges,
        stats=stats,
        order_of=order_of,
    )


def _clipping(
    trace: Trace,
    keep: np.ndarray,
    in_window: np.ndarray,
    parent: np.ndarray,
    depth: np.ndarray,
    window: Window,
) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
    """Which kept slices are clipped at the window's start and at its end, and the file
    positions of clipping ties (`_ties_in_nesting_order`).

    A slice is clipped on a side where it crosses the window's edge, unless it encloses a slice
    kept outside the window on that side (a closure partner: it then keeps its time there, so
    the partner stays inside it), and unless clipping would nest it differently: a slice that
    crosses the edge without enclosing its neighbour there (slices that overlap without nesting)
    would, clipped, fall inside that neighbour. Such slices, and the slices around them, keep
    their times as written, so that the crop nests exactly as the original does."""
    t0, t1 = window.start_ns, window.end_ns
    start = trace.start
    end = start + trace.dur
    frozen = np.zeros(len(trace), dtype=bool)
    kept_cpu = np.flatnonzero(keep & (depth > 0))
    levels = [kept_cpu[depth[kept_cpu] == d] for d in range(int(depth.max(initial=0)), 0, -1)]
    for _ in range(64):
        clipped = in_window & ~frozen
        lo = np.where(clipped, np.maximum(start, t0), start)
        hi = np.where(clipped, np.minimum(end, t1), end)
        for rows in levels:  # widen each slice to what it keeps inside it
            if len(rows):
                np.minimum.at(lo, parent[rows], lo[rows])
                np.maximum.at(hi, parent[rows], hi[rows])
        cut_start = keep & clipped & (start < t0) & (lo == t0)
        cut_end = keep & clipped & (end > t1) & (hi == t1)
        lo = np.where(cut_start, t0, start)
        hi = np.where(cut_end, t1, end)
        changed = np.flatnonzero(cut_start | cut_end)
        order_of = _ties_in_nesting_order(trace, keep, depth, lo, hi, changed)
        moved, old, new = _parents_changed(trace, keep, depth, lo, hi, order_of, parent)
        if not len(moved):
            return cut_start, cut_end, order_of
        frozen[moved] = True
        frozen[old[old >= 0]] = True
        frozen[new[new >= 0]] = True
    nothing = np.zeros(len(trace), dtype=bool)
    return nothing, nothing.copy(), {}


def _parents_changed(
    trace: Trace,
    keep: np.ndarray,
    depth: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    order_of: dict[int, int],
    parent: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept slices whose parent in the crop (times lo..hi, in the crop's file order) is
    not their parent in the original: (rows, their parents in the original, in the crop)."""
    from kinetoscope.analysis.intervals import previous_at_least, slice_order

    rows = np.flatnonzero(keep & (depth >= 0))
    if not len(rows):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    position = trace.ordinal[rows].copy()
    if order_of:
        index = np.searchsorted(rows, np.fromiter(order_of, dtype=np.int64))
        position[index] = np.fromiter(order_of.values(), dtype=np.int64)
    rows = rows[np.argsort(position, kind="stable")]
    lane = trace.lane[rows]
    sort = slice_order(lane, lo[rows], hi[rows])
    order = rows[sort]
    lane = lane[sort]
    n = len(order)
    lane_first = np.concatenate(([0], np.flatnonzero(lane[1:] != lane[:-1]) + 1))
    counts = np.diff(np.append(lane_first, n))
    first = np.repeat(lane_first, counts)
    found = previous_at_least(hi[order], first)
    new = np.where(found >= 0, order[np.maximum(found, 0)], -1)
    old = parent[order].astype(np.int64)
    wrong = new != old
    return order[wrong], old[wrong], new[wrong]


def _ties_in_nesting_order(
    trace: Trace,
    keep: np.ndarray,
    depth: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    changed: np.ndarray,
) -> dict[int, int]:
    """Clipping can give a slice and its parent the same times (both span the window), and
    slices with the same times nest in file order: where clipping made such a tie, the slices
    of the tie are written in their nesting order (outermost first), in the file positions
    they held, so that the crop nests as the original does. Row -> ordinal to sort it by."""
    if not len(changed):
        return {}
    rows = np.flatnonzero(keep & (depth >= 0))
    sort = np.lexsort((trace.ordinal[rows], hi[rows], lo[rows], trace.lane[rows]))
    rows = rows[sort]
    key = np.stack([trace.lane[rows].astype(np.int64), lo[rows], hi[rows]], axis=1)
    same = np.all(key[1:] == key[:-1], axis=1)
    if not same.any():
        return {}
    is_changed = np.zeros(len(trace), dtype=bool)
    is_changed[changed] = True
    out: dict[int, int] = {}
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    stops = np.append(starts[1:], len(rows))
    for a, b in zip(starts.tolist(), stops.tolist()):
        if b - a < 2 or not is_changed[rows[a:b]].any():
            continue
        members = rows[a:b]
        ordinals = np.sort(trace.ordinal[members])
        by_depth = members[np.lexsort((trace.ordinal[members], depth[members]))]
        out.update(zip(by_depth.tolist(), ordinals.tolist()))
    return out


def _flow_anchors(trace: Trace, session: Any, flow_rows: np.ndarray) -> np.ndarray:
    """Per flow event, the row of the slice it is bound to, or -1: the innermost CPU slice of
    its thread that holds its time (start <= ts <= end), or else a slice there (a GPU
    activity, ...) that starts at or before it and ends at or after it, latest start first.

    Its thread is its own lane, or, where no slice there holds it, the other lanes of the same
    pid and tid written as text, in lane order: 2021 Kineto traces write the CPU slices with
    tid "24572" (a string) and their flow events with tid 24572 (an int). The parser keeps
    them apart as the spec says; Perfetto reads them as one thread and draws the arrows."""
    ts = trace.start[flow_rows]
    own = trace.lane[flow_rows].astype(np.int64)
    anchor = _anchors_on(trace, session, own, ts)
    for mate in _same_thread_lanes(trace):  # the k-th other lane of each lane's thread
        lane = mate[own]
        retry = np.flatnonzero((anchor < 0) & (lane >= 0))
        if len(retry):
            anchor[retry] = _anchors_on(trace, session, lane[retry], ts[retry])
    return anchor


def _same_thread_lanes(trace: Trace) -> list[np.ndarray]:
    """The other lanes of each lane's thread: the lanes of the same pid and tid as text
    (`24572`, `"24572"`) that hold slices, in lane order. Item k maps a lane id to the k-th
    such lane, or -1."""
    with_slices = set(np.unique(trace.lane[trace.ph == PH_COMPLETE]).tolist())
    by_text: dict[tuple[str, str], list[int]] = {}
    for lane in trace.lanes:
        by_text.setdefault((str(lane.pid), str(lane.tid)), []).append(lane.id)
    size = max((lane.id for lane in trace.lanes), default=-1) + 1
    out: list[np.ndarray] = []
    for ids in by_text.values():
        for lane_id in ids:
            mates = [other for other in ids if other != lane_id and other in with_slices]
            for k, other in enumerate(mates):
                if k == len(out):
                    out.append(np.full(size, -1, dtype=np.int64))
                out[k][lane_id] = other
    return out


def _anchors_on(trace: Trace, session: Any, lane: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Per (lane, ts), the row of the slice of that lane a flow event there is bound to, or -1
    (`_flow_anchors`)."""
    nesting = session.nesting
    anchor = np.full(len(lane), -1, dtype=np.int64)
    order = nesting.order
    if len(order):
        key_lane = nesting.lane_of.astype(np.int64)
        key_start = trace.start[order]
        # Last position (lane, start <= ts): the latest slice of the lane that starts by ts.
        pos = _last_at_or_before(key_lane, key_start, lane, ts)
        ok = pos >= 0
        ok[ok] = key_lane[pos[ok]] == lane[ok]
        current = np.where(ok, pos, -1)
        # Walk up while the slice ends before ts (its ancestors may still hold it).
        end = trace.start + trace.dur
        for _ in range(512):
            live = current >= 0
            row = order[np.maximum(current, 0)]
            short = live & (end[row] < ts)
            if not short.any():
                break
            current[short] = nesting.parent_pos[current[short]]
        live = current >= 0
        anchor[live] = order[current[live]]
    # Other slices (GPU activities, annotations): the innermost on the lane that holds ts,
    # i.e. of those starting by ts the latest start, then the earliest end (a kernel rather
    # than the GPU annotation that starts with it). A few earlier slices are tried when the
    # latest one ends before ts.
    rest = np.flatnonzero(anchor < 0)
    if len(rest):
        other = np.flatnonzero((trace.ph == PH_COMPLETE) & (nesting.position < 0))
        if len(other):
            o_end = trace.start[other] + trace.dur[other]
            sort = np.lexsort((-o_end, trace.start[other], trace.lane[other]))
            other = other[sort]
            o_lane = trace.lane[other].astype(np.int64)
            pos = _last_at_or_before(o_lane, trace.start[other], lane[rest], ts[rest])
            for _ in range(OTHER_ANCHOR_TRIES):
                live = pos >= 0
                found = other[np.maximum(pos, 0)]
                ok = live & (o_lane[np.maximum(pos, 0)] == lane[rest])
                ok &= trace.start[found] + trace.dur[found] >= ts[rest]
                anchor[rest[ok]] = found[ok]
                again = live & ~ok & (o_lane[np.maximum(pos, 0)] == lane[rest])
                if not again.any():
                    break
                rest, pos = rest[again], pos[again] - 1
    return anchor


def _last_at_or_before(
    key_lane: np.ndarray, key_start: np.ndarray, lane: np.ndarray, ts: np.ndarray
) -> np.ndarray:
    """Index of the last (key_lane, key_start) <= (lane, ts) in keys sorted by (lane, start)."""
    lane_lo = np.searchsorted(key_lane, lane, side="left")
    lane_hi = np.searchsorted(key_lane, lane, side="right")
    pos = np.empty(len(lane), dtype=np.int64)
    for value in np.unique(lane).tolist():
        mine = lane == value
        lo, hi = int(lane_lo[mine][0]), int(lane_hi[mine][0])
        pos[mine] = lo + np.searchsorted(key_start[lo:hi], ts[mine], side="right") - 1
    pos[pos < lane_lo] = -1
    return pos


def _memory_baseline(trace: Trace, t0: int) -> list[tuple[int, int, int]]:
    """Per (device type, device id) with `[memory]` events before t0: (ordinal of the last
    such event, Total Allocated, Total Reserved), the totals as they stood at t0 (each the last
    value recorded before t0; NO_VALUE when none was)."""
    memory = trace.memory
    if not len(memory):
        return []
    before = np.flatnonzero((memory.ts != NO_VALUE) & (memory.ts < t0) & (memory.lane >= 0))
    if not len(before):
        return []
    before = before[np.lexsort((memory.ordinal[before], memory.ts[before]))]
    out = []
    keys = np.stack([memory.device_type[before], memory.device_id[before]], axis=1)
    for key in np.unique(keys, axis=0):
        mine = before[(keys == key).all(axis=1)]
        totals = []
        for column in (memory.total_allocated, memory.total_reserved):
            values = column[mine]
            present = np.flatnonzero(values != NO_VALUE)
            totals.append(int(values[present[-1]]) if len(present) else NO_VALUE)
        out.append((int(memory.ordinal[mine[-1]]), totals[0], totals[1]))
    return out


# -- the crop -----------------------------------------------------------------------------------


def _with_times(raw: bytes, ts: int | None, end: int | None, model: tuple[int, int]) -> bytes:
    """The event's text with `ts` and/or its end written again (`dur` = end - ts), from the
    model's integer ns (`model`: start, dur). The model's times are what a reader of the file
    reads for the original (JSON numbers are read as doubles, as kinetoscope's parser and
    Perfetto's do), so a clipped slice ends, for a reader, exactly where the original did."""
    fields = _RAW_OBJECT.decode(raw)
    start, dur = model
    if ts is not None:
        fields["ts"] = msgspec.Raw(us_bytes(ts))
    if end is not None or (ts is not None and "dur" in fields):
        new_start = start if ts is None else ts
        new_end = start + dur if end is None else end
        fields["dur"] = msgspec.Raw(us_bytes(max(new_end - new_start, 0)))
    return msgspec.json.encode(fields)


def _baseline_event(raw: bytes, t0: int, allocated: int, reserved: int) -> bytes:
    fields = _RAW_OBJECT.decode(raw)
    fields["ts"] = msgspec.Raw(us_bytes(t0))
    try:
        args = _RAW_OBJECT.decode(bytes(fields.get("args", b"{}")))
    except msgspec.DecodeError:
        args = {}
    args["Bytes"] = msgspec.Raw(b"0")
    args["Addr"] = msgspec.Raw(b"0")
    for key, value in (("Total Allocated", allocated), ("Total Reserved", reserved)):
        if value != NO_VALUE:
            args[key] = msgspec.Raw(str(value).encode())
    args["Export"] = msgspec.Raw(msgspec.json.encode(BASELINE_NOTE))
    fields["args"] = msgspec.Raw(msgspec.json.encode(args))
    return msgspec.json.encode(fields)


def crop_trace(
    path: str,
    window: Window,
    *,
    clip: bool = False,
    trace: Trace | None = None,
    session: Any = None,
) -> Crop:
    """Crop the trace at `path` to `window` (see the module's docstring for what is kept), every
    kept event's text held in the result (`open_crop` streams it to a file instead).

    `trace` / `session`: the trace already loaded from `path` and its TraceSession, when the
    caller has them (the viewer); else the trace is loaded here. Raises ExportError (one line).
    """
    return open_crop(path, window, clip=clip, trace=trace, session=session).collect()


def open_crop(
    path: str,
    window: Window,
    *,
    clip: bool = False,
    trace: Trace | None = None,
    session: Any = None,
) -> CropStream:
    """The crop of the trace at `path` to `window`, chosen but not yet read: `write_crop` reads
    the file's runs as it writes them, so that only one run's text is held at a time (the
    memory is the model's plus a bounded working set, whatever the number of events kept).
    Arguments as `crop_trace`'s. Raises ExportError (one line)."""
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.parser import TraceError, load
    from kinetoscope.parser.access import file_changed

    if window.end_ns <= window.start_ns:
        raise ExportError("the window is empty: its end is not after its start")
    if trace is None:
        try:
            trace = session.trace if session is not None else load(path, write_cache=False)
        except TraceError as exc:
            raise ExportError(str(exc)) from None
    if session is None:
        session = TraceSession(trace)
    if len(trace) == 0:
        raise ExportError(f"{path}: the trace holds no timed events: nothing to export")
    first = int(trace.start.min())
    last = int((trace.start + trace.dur).max())
    if window.end_ns < first or window.start_ns > last:
        origin = trace.slice_start_min if trace.slice_start_min is not None else first
        raise ExportError(
            f"the window lies outside the trace (its events run from "
            f"{_relative(first - origin)} to {_relative(last - origin)})"
        )
    changed = file_changed(trace)
    if changed is not None:
        raise ExportError(changed)
    chunks = trace.chunks
    if chunks is None or not len(chunks.first_ordinal):
        raise ExportError(f"{path}: the events cannot be read again from the file")
    return CropStream(path, trace, window, _plan(trace, session, window, clip))


class CropStream:
    """A crop whose events are read from the file while they are written (`write_crop`), in
    the order the crop holds them: the memory baselines first, then the events in file order.

    Two kinds of event are read ahead, in a first pass over their runs only (seeks in a plain
    file, decompression up to the last of them in a gzip'd one), because they are written
    before their own place in the file: the sources of the memory baselines, and the slices
    that clipping gave the same times as their parent (written at another one's place,
    `_ties_in_nesting_order`: a few per lane). Everything else is written as its run is read.

    `stats`, `warnings` and the keys after the events are complete once the events have been
    read (written, or `collect`ed). The events can be read once."""

    def __init__(self, path: str, trace: Trace, window: Window, plan: _Plan) -> None:
        self.path = path
        self.trace = trace
        self.window = window
        self.plan = plan
        self.stats = plan.stats
        self.edges = plan.edges
        self.warnings: list[str] = []
        self.stopped_at = None if trace.complete else trace.stopped_at
        self.kept_rows = np.flatnonzero(plan.keep)
        self.kept_ord = trace.ordinal[self.kept_rows]
        # Clipping ties: ordinal of each slice of a tie -> the file position it is written at.
        self.placed = {int(trace.ordinal[row]): place for row, place in plan.order_of.items()}
        self.baselines, self.ahead = self._read_ahead()
        chunks = trace.chunks
        assert chunks is not None
        firsts = chunks.first_ordinal
        # Events per run: up to the next run's first ordinal (the last: up to the event count).
        counts = np.diff(np.append(firsts, max(trace.n_events, int(firsts[-1]))))
        big = np.iinfo(np.int64).max
        rows_per = np.diff(np.searchsorted(trace.ordinal, np.append(firsts, big)))
        kept_per = np.diff(np.searchsorted(self.kept_ord, np.append(firsts, big)))
        # A run is read when it holds a kept event or events that are not rows (metadata).
        read = (kept_per > 0) | (rows_per != counts)
        read[-1] = True
        self.to_read = np.flatnonzero(read).tolist()
        head_end = int(chunks.offset[0])
        last_end = int(chunks.offset[-1] + chunks.length[-1])
        ranges: list[tuple[int, int | None]] = [(0, head_end)]
        ranges += [
            (int(chunks.offset[i]), int(chunks.offset[i] + chunks.length[i])) for i in self.to_read
        ]
        ranges.append((last_end, None))
        self._ranges = ranges
        self._pieces: Generator[bytes, None, None] | None = None
        self.before: list[tuple[str, bytes]] = []
        self.array_form = False
        self._after: list[tuple[str, bytes]] | None = None
        self._used = False

    def _start(self) -> None:
        """Start the pass over the file: read the text before the events (the top-level keys
        written before them, `before`, or a bare array: `array_form`). Once; `close` ends it."""
        if self._pieces is None:
            self._pieces = self._guarded(read_ranges(self.trace, self._ranges))
            self.before, self.array_form = _head_keys(next(self._pieces, b""))

    def close(self) -> None:
        """End the pass over the file (its file and, for a gzip'd one, its thread)."""
        if self._pieces is not None:
            self._pieces.close()

    def _guarded(self, pieces: Iterator[bytes]) -> Generator[bytes, None, None]:
        """The pieces, a failure to read them being one line (ExportError)."""
        try:
            yield from pieces
        except OSError as exc:
            raise ExportError(
                f"{self.path}: cannot read it again ({exc.strerror or exc})"
            ) from None

    def _runs(self, chunk_list: list[int], pieces: Iterator[bytes]) -> Iterator[tuple[int, Any]]:
        """(first ordinal, (items, re-encode)) of each run of `chunk_list`, read from `pieces`."""
        firsts = self.trace.chunks.first_ordinal  # type: ignore[union-attr]
        for chunk in chunk_list:
            raw = next(pieces)
            try:
                items: list[Any] = RAW_LIST.decode(b"[" + raw + b"]")
                reencode = False
            except msgspec.DecodeError:
                items = _lenient_items(raw)
                reencode = True
            yield int(firsts[chunk]), (items, reencode)

    def _kept_in(self, first: int, last: int) -> dict[int, int]:
        """Ordinal -> row of the kept rows with ordinals in [first, last)."""
        lo, hi = np.searchsorted(self.kept_ord, [first, last])
        return dict(zip(self.kept_ord[lo:hi].tolist(), self.kept_rows[lo:hi].tolist()))

    def _row_text(self, item: Any, reencode: bool, row: int) -> bytes | None:
        """A kept row's text as the crop writes it (its times written again where they change)."""
        plan = self.plan
        text = _as_bytes(item, reencode)
        if text is None:
            return None
        self.stats.reencoded += reencode
        if row in plan.new_start or row in plan.new_end:
            text = _with_times(
                text,
                plan.new_start.get(row),
                plan.new_end.get(row),
                (int(self.trace.start[row]), int(self.trace.dur[row])),
            )
        return text

    def _read_ahead(self) -> tuple[list[bytes], list[tuple[int, bytes]]]:
        """The memory baselines (in file order of their sources), and the clipping ties' texts
        as (the place each is written at, text), by place."""
        trace = self.trace
        plan = self.plan
        baseline_of = {ordinal: (a, r) for ordinal, a, r in plan.baseline}
        wanted = np.array(sorted(set(baseline_of) | set(self.placed)), dtype=np.int64)
        if not len(wanted):
            return [], []
        firsts = trace.chunks.first_ordinal  # type: ignore[union-attr]
        offset, length = trace.chunks.offset, trace.chunks.length  # type: ignore[union-attr]
        chunk_list = np.unique(np.searchsorted(firsts, wanted, side="right") - 1)
        chunk_list = chunk_list[chunk_list >= 0].tolist()
        ranges: list[tuple[int, int | None]] = [
            (int(offset[i]), int(offset[i] + length[i])) for i in chunk_list
        ]
        baselines: list[bytes] = []
        ahead: list[tuple[int, bytes]] = []
        pieces = self._guarded(read_ranges(trace, ranges))
        try:
            self._read_runs_ahead(pieces, chunk_list, wanted, baseline_of, baselines, ahead)
        finally:
            pieces.close()
        ahead.sort(key=lambda pair: pair[0])
        return baselines, ahead

    def _read_runs_ahead(
        self,
        pieces: Iterator[bytes],
        chunk_list: list[int],
        wanted: np.ndarray,
        baseline_of: dict[int, tuple[int, int]],
        baselines: list[bytes],
        ahead: list[tuple[int, bytes]],
    ) -> None:
        for first, (items, reencode) in self._runs(chunk_list, pieces):
            last = first + len(items)
            kept = self._kept_in(first, last)
            lo, hi = np.searchsorted(wanted, [first, last])
            for ordinal in wanted[lo:hi].tolist():
                item = items[ordinal - first]
                if ordinal in baseline_of:
                    alloc, reserved = baseline_of[ordinal]
                    text = _as_bytes(item, reencode)
                    if text is not None:
                        baselines.append(
                            _baseline_event(text, self.window.start_ns, alloc, reserved)
                        )
                row = kept.get(ordinal)
                if row is not None and ordinal in self.placed:
                    text = self._row_text(item, reencode, row)
                    if text is not None:
                        ahead.append((self.placed[ordinal], text))

    def events(self) -> Iterator[bytes]:
        """The crop's events in order, read from the file run by run (once)."""
        if self._used:
            raise RuntimeError("a CropStream's events can be read once")
        self._used = True
        self._start()
        assert self._pieces is not None
        stats = self.stats
        trace = self.trace
        stats.baseline = len(self.baselines)
        stats.events = 0
        yield from self.baselines
        stats.events += len(self.baselines)
        ahead = self.ahead
        next_ahead = 0
        row_set = trace.ordinal
        for first, (items, reencode) in self._runs(self.to_read, self._pieces):
            # Only the events kept, and those that are not rows (metadata), are looked at.
            last = first + len(items)
            lo, hi = np.searchsorted(row_set, [first, last])
            is_row = np.zeros(len(items), dtype=bool)
            is_row[row_set[lo:hi] - first] = True
            kept = self._kept_in(first, last)
            positions = np.union1d(
                np.fromiter(kept, dtype=np.int64, count=len(kept)) - first,
                np.flatnonzero(~is_row),
            )
            for position in positions.tolist():
                ordinal = first + position
                # The clipping ties placed before this event.
                while next_ahead < len(ahead) and ahead[next_ahead][0] < ordinal:
                    yield ahead[next_ahead][1]
                    stats.events += 1
                    next_ahead += 1
                item = items[position]
                row = kept.get(ordinal)
                if row is not None:
                    if ordinal in self.placed:  # a tie: written from what was read ahead
                        continue
                    text = self._row_text(item, reencode, row)
                    if text is None:
                        continue
                elif not is_row[position]:
                    text = _as_bytes(item, reencode)
                    if text is None or not _is_metadata(text):
                        continue
                    stats.metadata += 1
                    stats.reencoded += reencode
                else:
                    continue
                yield text
                stats.events += 1
        for _place, text in ahead[next_ahead:]:
            yield text
            stats.events += 1
        tail = next(self._pieces, b"")
        self.close()
        if not self.array_form:
            self._after = _tail_keys(trace, dict(self.before), tail, self.warnings)
        else:
            self._after = []
        stats.source_events = trace.n_events
        if not trace.complete:
            self.warnings.extend(trace.warnings[:1])

    def after(self) -> list[tuple[str, bytes]]:
        """The top-level keys written after the events (known once the events were read)."""
        if self._after is None:
            raise RuntimeError("the keys after the events are known once the events are read")
        return self._after

    def collect(self) -> Crop:
        """The whole crop in memory: every kept event's text."""
        try:
            events = list(self.events())
        finally:
            self.close()
        top = dict(self.before)
        top.update(self.after())
        return Crop(
            top=top,
            events=events,
            window=self.window,
            events_at=len(self.before),
            array_form=self.array_form,
            stats=self.stats,
            warnings=self.warnings,
            stopped_at=self.stopped_at,
            edges=self.edges,
        )


def _lenient_items(raw: bytes) -> list[Any]:
    """A run that needed repairs at load: its events decoded the lenient way."""
    from kinetoscope.parser.events import lenient_loads

    try:
        items = lenient_loads(b"[" + raw + b"]")
    except ValueError:
        return []
    return items if isinstance(items, list) else []


def _as_bytes(item: Any, reencode: bool) -> bytes | None:
    if not reencode:
        return bytes(item)
    try:
        return msgspec.json.encode(item)
    except (TypeError, ValueError, OverflowError):
        return None


def _is_metadata(text: bytes) -> bool:
    try:
        return _PHASE.decode(text).ph == "M"
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


# -- writing ------------------------------------------------------------------------------------


def _blocks_of(crop: Crop | CropStream, size: int = 1 << 20) -> Iterator[bytes]:
    """The crop's text in blocks of about `size` bytes (few writes, each of them big)."""
    pending: list[bytes] = []
    have = 0
    for piece in _chunks_of(crop):
        pending.append(piece)
        have += len(piece)
        if have >= size:
            yield b"".join(pending)
            pending, have = [], 0
    if pending:
        yield b"".join(pending)


def _chunks_of(crop: Crop | CropStream) -> Iterator[bytes]:
    """The crop's text: the top-level keys before the events, the events (a CropStream's read
    from the file as they are written), then the keys after them."""
    before: list[tuple[str, bytes]]
    after: Callable[[], list[tuple[str, bytes]]]
    if isinstance(crop, CropStream):
        crop._start()
        before, events, after = crop.before, crop.events(), crop.after
    else:
        keys = list(crop.top.items())
        before, events = keys[: crop.events_at], iter(crop.events)

        def after() -> list[tuple[str, bytes]]:
            return keys[crop.events_at :]

    def array() -> Iterator[bytes]:
        yield b"[\n"
        for index, event in enumerate(events):
            yield (b",\n" if index else b"") + event
        yield b"\n]"

    if crop.array_form:
        yield from array()
        yield b"\n"
        return
    yield b"{\n"
    parts = 0
    for key, value in before:
        yield (b",\n" if parts else b"") + msgspec.json.encode(key) + b": " + value
        parts += 1
    yield (b",\n" if parts else b"") + b'"traceEvents": '
    yield from array()
    for key, value in after():
        yield b",\n" + msgspec.json.encode(key) + b": " + value
    yield b"\n}\n"


@contextmanager
def replaced_file(out_path: str) -> Iterator[str]:
    """A temporary file's path beside `out_path` to write, renamed onto `out_path` when the block
    ends and removed when it raises: a failed write leaves no half file. The temporary file is
    created by whoever writes it, so it gets the mode any new file would (the umask's)."""
    folder = os.path.dirname(os.path.abspath(out_path))
    name = f".{os.path.basename(out_path)}.{os.getpid()}.{threading.get_ident()}.part"
    temp = os.path.join(folder, name)
    try:
        yield temp
        os.replace(temp, out_path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


# Names of archives and compressed files a crop is not written as (plain JSON in such a name
# would be opened by no tool that goes by the name): a single trace is .json or .json.gz.
NOT_WRITTEN_AS = (".zip", ".7z", ".tar", ".tgz", ".bz2", ".xz", ".zst", ".lz4")


def output_problem(out_path: str) -> str | None:
    """Why a crop cannot be written under `out_path`'s name (an archive's suffix), or None.
    Suffixes are compared in any case (`.JSON.GZ` is gzip'd, `.ZIP` refused)."""
    lower = str(out_path).lower()
    suffix = next((s for s in NOT_WRITTEN_AS if lower.endswith(s)), None)
    if suffix is None:
        return None
    bundle = " (a .zip Perfetto bundle is for a job: a folder or several rank files)"
    return f"{out_path}: a single trace is written as .json or .json.gz, not {suffix}" + (
        bundle if suffix == ".zip" else ""
    )


def write_crop(crop: Crop | CropStream, out_path: str) -> int:
    """Write the crop to `out_path` (.gz in any case: gzip'd, else plain JSON; an archive's
    suffix such as .zip is refused: `output_problem`); the number of bytes written to the file.
    A CropStream (`open_crop`) is read from the trace's file as it is written.
    Written to a temporary file beside it and renamed, so a failed write leaves no half file.
    Raises ExportError (one line) when it cannot be written."""
    out_path = str(out_path)
    problem = output_problem(out_path)
    if problem is not None:
        if isinstance(crop, CropStream):
            crop.close()
        raise ExportError(problem)
    try:
        with replaced_file(out_path) as temp:
            if out_path.lower().endswith(".gz"):
                with (
                    open(temp, "wb") as raw,
                    gzip.GzipFile(
                        filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0
                    ) as handle,
                ):
                    for block in _blocks_of(crop):
                        handle.write(block)
            else:
                with open(temp, "wb") as handle:
                    for block in _blocks_of(crop):
                        handle.write(block)
            size = os.path.getsize(temp)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ExportError(f"{out_path}: cannot write the export ({reason})") from None
    finally:
        if isinstance(crop, CropStream):
            crop.close()
    return size


# -- choosing the window: steps, gaps -------------------------------------------------------------

_STEP_NUMBER = re.compile(r"ProfilerStep#([0-9]+)")
MAX_STEP_DIGITS = 18  # a ProfilerStep#N's N fits an int64
_STEP_ITEM = re.compile(r"\s*#?(\d+)\s*(?:-\s*#?(\d+)\s*)?$")


def parse_step_numbers(texts: list[str]) -> list[int]:
    """`--step` values: `3`, `3,5`, `3-5` (inclusive), repeatable -> step numbers, ascending."""
    from kinetoscope.common.numbers import shown

    numbers: set[int] = set()
    for text in texts:
        for item in text.split(","):
            match = _STEP_ITEM.match(item)
            if match is not None and max(len(n or "") for n in match.groups()) > MAX_STEP_DIGITS:
                raise ExportError(f"the step {shown(item.strip())} is too large a number")
            if match is None:
                raise ExportError(
                    f"cannot read the step {shown(item.strip())}: write N, N,M or N-M "
                    "(the N of ProfilerStep#N)"
                )
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) is not None else first
            if last < first:
                raise ExportError(f"the steps {item.strip()!r} run backwards")
            if last - first > 1_000_000 or len(numbers) + last - first > 1_000_000:
                raise ExportError(f"the steps {shown(item.strip())} are too many")
            numbers.update(range(first, last + 1))
    return sorted(numbers)


def step_window(session: Any, numbers: list[int]) -> Window:
    """The span of the ProfilerStep#N slices named (every slice of each name, any thread)."""
    trace = session.trace
    steps = session.steps
    by_number: dict[int, list[int]] = {}
    for row in steps.rows.tolist():
        match = _STEP_NUMBER.fullmatch(trace.name_of(row))
        if match is not None:
            by_number.setdefault(int(match.group(1)), []).append(row)
    if not by_number:
        raise ExportError("the trace holds no ProfilerStep#N slices: choose a --window instead")
    missing = [n for n in numbers if n not in by_number]
    if missing:
        have = sorted(by_number)
        shown = f"#{have[0]}..#{have[-1]}" if len(have) > 1 else f"#{have[0]}"
        raise ExportError(
            f"no ProfilerStep#{missing[0]} in the trace (its steps: {shown}, {len(have)} in all)"
        )
    rows = np.array([row for n in numbers for row in by_number[n]], dtype=np.int64)
    start = int(trace.start[rows].min())
    end = int((trace.start[rows] + trace.dur[rows]).max())
    if end <= start:
        raise ExportError("the steps chosen last no time: the window would be empty")
    return Window(start, end)


def gap_window(session: Any, rank: int, context_ns: int | None = None) -> Window:
    """The `rank`-th longest GPU idle gap (1-based, the order of the viewer's gap list) with
    `context_ns` on each side (default: the gap's own length, so the window is three gaps
    long and shows the work before and after it)."""
    from kinetoscope.analysis.units import plural

    gaps = session.idle.gaps
    order = gaps.longest()
    if not len(order):
        raise ExportError("the trace has no GPU idle gaps: choose a --window or --step instead")
    if not 1 <= rank <= len(order):
        raise ExportError(
            f"--around-gap {rank}: the trace has {plural(len(order), 'GPU idle gap')} "
            "(1 = the longest)"
        )
    gap = int(order[rank - 1])
    start, end = int(gaps.start[gap]), int(gaps.end[gap])
    context = end - start if context_ns is None else context_ns
    trace = session.trace
    first = int(trace.start.min())
    last = int((trace.start + trace.dur).max())
    return Window(max(start - context, first), min(end + context, last))


def export_trace(
    path: str,
    out_path: str,
    *,
    window: str | Window | None = None,
    steps: list[int] | None = None,
    around_gap: int | None = None,
    context_ns: int | None = None,
    clip: bool = False,
    session: Any = None,
) -> tuple[str, list[str]]:
    """Load (unless `session` holds it), choose the window, crop, write. Returns the line that
    says where it wrote and what it kept, and notes (a trace that stops early). ExportError."""
    from kinetoscope.analysis.session import AnalysisFailed, TraceSession, memory_failure
    from kinetoscope.parser import TraceError, load
    from kinetoscope.parser.source import trace_path_problem

    if session is None:
        problem = trace_path_problem(path)
        if problem is not None:
            raise ExportError(problem)
    check_output(path, out_path)
    problem = output_problem(out_path)
    if problem is not None:
        raise ExportError(problem)
    if session is None:
        try:
            trace = load(path, write_cache=False, release=True)
        except TraceError as exc:
            raise ExportError(str(exc)) from None
        session = TraceSession(trace)
    trace = session.trace
    if not len(trace):
        raise ExportError(f"{path}: the trace holds no events: there is nothing to export")
    try:
        return _export_session(path, out_path, session, window, steps, around_gap, context_ns, clip)
    except (AnalysisFailed, MemoryError) as exc:  # one line: which stage, and what would help
        from kinetoscope.parser.model import out_of_memory_message

        stage = memory_failure(exc)
        if stage is None:
            raise ExportError(f"{path}: {exc}") from None
        raise ExportError(
            out_of_memory_message(path, trace.n_events, stage or "the export")
        ) from None


def _export_session(
    path: str,
    out_path: str,
    session: Any,
    window: str | Window | None,
    steps: list[int] | None,
    around_gap: int | None,
    context_ns: int | None,
    clip: bool,
) -> tuple[str, list[str]]:
    """export_trace's work once the trace is loaded: the window, the crop, the file."""
    trace = session.trace
    origin = int(trace.slice_start_min) if trace.slice_start_min is not None else 0
    if isinstance(window, str):
        end = int((trace.start + trace.dur).max()) if len(trace) else origin
        chosen = parse_window(window, origin, end)
    elif isinstance(window, Window):
        chosen = window
    elif steps:
        chosen = step_window(session, steps)
    elif around_gap is not None:
        chosen = gap_window(session, around_gap, context_ns)
    else:
        raise ExportError("choose the window: --window A..B, --step N or --around-gap K")
    crop = open_crop(path, chosen, clip=clip, trace=trace, session=session)
    size = write_crop(crop, out_path)  # the events are read from the file as they are written
    notes = []
    if crop.stopped_at is not None:
        notes.append(
            f"{path}: the file stops being readable at byte {crop.stopped_at:,}"
            f"{' of the decompressed JSON' if trace.source.compressed else ''} (damaged or cut "
            "off): the export holds what was read before it"
        )
    notes.extend(w for w in crop.warnings if w not in trace.warnings)
    return describe(crop, out_path, size, origin), notes


def check_output(path: str, out_path: str) -> None:
    if not out_path:
        raise ExportError("-o: name the file to write")
    if os.path.isdir(out_path):
        raise ExportError(f"{out_path}: is a directory; name the file to write")
    if os.path.exists(out_path) and not os.path.isfile(out_path):  # never renamed over a device
        raise ExportError(f"{out_path}: not a regular file; name a file to write")
    try:
        if os.path.exists(out_path) and os.path.samefile(path, out_path):
            raise ExportError(f"{out_path}: is the trace itself; write the export elsewhere")
    except OSError:
        pass
    directory = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(directory):
        raise ExportError(f"{out_path}: no such folder: {directory}")
    if not os.access(directory, os.W_OK):
        raise ExportError(f"{out_path}: cannot write in {directory} (permission denied)")


def _relative(ns: int) -> str:
    """A time from the viewer's origin as the viewer writes it, and --window reads it: +12.5ms."""
    from kinetoscope.analysis.units import fmt_duration

    return ("+" if ns >= 0 else "-") + fmt_duration(abs(ns)).replace(" ", "")


def describe(crop: Crop | CropStream, out_path: str, size: int, origin: int) -> str:
    """One line: where the crop went, its window as the viewer shows times, and what it kept."""
    from kinetoscope.analysis.units import fmt_bytes, fmt_duration, plural

    s = crop.stats
    w = crop.window

    def at(ns: int) -> str:
        return _relative(ns - origin)

    parts = [f"{plural(s.slices, 'slice')} ({s.closure:,} outside the window by correlation)"]
    parts.append(plural(s.flows, "flow"))
    if s.memory or s.baseline:
        parts.append(f"{plural(s.memory, '[memory] instant')} + {s.baseline} at the start")
    parts.append(f"{s.metadata:,} metadata")
    if s.clipped:
        parts.append(f"{s.clipped:,} clipped")
    return (
        f"wrote {out_path} ({fmt_bytes(size)}): {s.events:,} of "
        f"{plural(s.source_events, 'event')}, "
        f"window {at(w.start_ns)}..{at(w.end_ns)} ({fmt_duration(w.length)}): " + ", ".join(parts)
    )
