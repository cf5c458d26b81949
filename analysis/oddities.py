"""Trace oddities: things in a trace that do not add up, found and said rather than hidden.

None of them changes a number of the summary. Overlapping GPU work on one stream is counted in
full (busy time counts the overlap once); a slice that ends after the slice it started in is that
slice's sibling, as the spec's nesting says; a runtime call whose correlation id was already used
launches nothing. Each oddity becomes an `info` finding naming how many events show it and the
first few of them, so the viewer can jump there and the reader knows why a number looks odd.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
from kinetoscope.parser.model import (
    KIND_NOT_CPU,
    KIND_OTHER,
    NO_VALUE,
    PH_COMPLETE,
    PH_FLOW_END,
    PH_FLOW_START,
    Trace,
)

from .finding import INFO, Finding
from .intervals import Union
from .units import plural

if TYPE_CHECKING:
    from .session import TraceSession

EXAMPLES = 5  # rows kept as evidence per finding
# A gap in time this large a share of the trace's span, with at most FAR_SHARE of the slices on
# one side of it, sets those slices apart as far from the rest.
FAR_GAP_SHARE = 0.9
FAR_SHARE = 0.01
ROW_BLOCK = 1 << 20  # rows counted at a time by unknown_accelerator_categories
# Categories of slices that look like accelerator work the analysis does not model (they are
# counted as CPU slices): other accelerators' runtimes and device events (MTIA `mtia_runtime`,
# `mtia_ccp_events`; XPU, HPU, NPU, ...), and `*_runtime`/`*_driver` categories other than CUDA's.
ACCELERATOR_CATEGORY = re.compile(
    r".*(mtia|xpu|hpu|npu|tpu|ipu|mlu|habana|gaudi|privateuse|ccp_event|_kernel|_memcpy|"
    r"_memset|_runtime|_driver).*",
    re.IGNORECASE,
)


def overlapping_gpu_work(trace: Trace, gpu_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GPU activities (dur > 0) that start before an earlier one on the same stream has ended.

    Returns (rows, overlapped): each such row and the row still running when it started."""
    rows = gpu_rows[trace.dur[gpu_rows] > 0]
    found: list[np.ndarray] = []
    under: list[np.ndarray] = []
    lanes = trace.lane[rows]
    for lane in np.unique(lanes).tolist():
        on_lane = rows[lanes == lane]
        start = trace.start[on_lane]
        order = np.lexsort((-(start + trace.dur[on_lane]), start))
        on_lane, start = on_lane[order], start[order]
        end = start + trace.dur[on_lane]
        reach = np.maximum.accumulate(end)
        # Where the running maximum of ends was set: the row that is still running.
        holder = np.maximum.accumulate(np.where(end == reach, np.arange(len(end)), 0))
        late = np.flatnonzero(start[1:] < reach[:-1]) + 1
        found.append(on_lane[late])
        under.append(on_lane[holder[late - 1]])
    if not found:
        empty = np.zeros(0, np.int64)
        return empty, empty
    return np.concatenate(found), np.concatenate(under)


OUTLIVING_BLOCK = 1 << 20


def slices_outliving_parent(trace: Trace, session: TraceSession) -> tuple[np.ndarray, np.ndarray]:
    """CPU slices that start inside a slice on their lane and end after it.

    The spec's nesting makes such a slice the sibling of the one it started in, and siblings
    end in increasing order, so it is enough to compare each slice with its previous sibling.
    Returns (rows, earlier): each such slice and the sibling it overlaps."""
    nesting = session.nesting
    order = nesting.order
    n = len(order)
    if n < 2:
        empty = np.zeros(0, np.int64)
        return empty, empty
    # A slice's next sibling, when it has one, is where its subtree stops: the positions in
    # between are its descendants, and the one after has a greater end, so it is a sibling
    # when it has the same parent on the same lane. Taken a block of positions at a time:
    # this runs at the summary's peak of memory, and whole-trace temporaries would raise it.
    parent, stop = nesting.parent_pos, nesting.subtree_stop
    lane_ids, lane_start = nesting.lane_ids, nesting.lane_start

    def lane(positions: np.ndarray) -> np.ndarray:
        """The lane of each position (lanes are contiguous runs of positions)."""
        return lane_ids[np.searchsorted(lane_start, positions, side="right") - 1]

    found_later, found_earlier, found_family = [], [], []
    for lo in range(0, n, OUTLIVING_BLOCK):
        hi = min(n, lo + OUTLIVING_BLOCK)
        nxt = stop[lo:hi].astype(np.int64)
        here = np.flatnonzero(nxt < n)
        nxt = nxt[here]
        here += lo
        sibling = (parent[nxt] == parent[here]) & (lane(nxt) == lane(here))
        here, nxt = here[sibling], nxt[sibling]
        earlier_rows, later_rows = order[here], order[nxt]
        overlap = trace.start[earlier_rows] + trace.dur[earlier_rows] > trace.start[later_rows]
        found_later.append(nxt[overlap])
        found_earlier.append(here[overlap])
        family = parent[nxt[overlap]].astype(np.int64)
        roots = family < 0
        family[roots] = -1 - lane(nxt[overlap][roots]).astype(np.int64)
        found_family.append(family)
    later = np.concatenate(found_later)
    earlier = np.concatenate(found_earlier)
    # In the order of the sibling groups (by parent position, roots first by lane
    # descending), then by position within each.
    by = np.lexsort((later, np.concatenate(found_family)))
    return order[later[by]].astype(np.int64), order[earlier[by]].astype(np.int64)


def duplicate_correlations(trace: Trace, runtime: np.ndarray) -> np.ndarray:
    """Runtime calls whose correlation id an earlier runtime call already carries."""
    rows = np.flatnonzero(runtime & (trace.corr != NO_VALUE))
    _values, first = np.unique(trace.corr[rows], return_index=True)
    repeated = np.ones(len(rows), dtype=bool)
    repeated[first] = False
    return rows[repeated]


def before_window(trace: Trace, kind: np.ndarray) -> np.ndarray:
    """Slices that start before the profiler's own window span (category `Trace`) begins."""
    is_trace = np.fromiter(
        (len(s) == 5 and s.lower() == "trace" for s in trace.strings),
        dtype=bool,
        count=len(trace.strings),
    )
    window_rows = np.flatnonzero((kind == KIND_NOT_CPU) & is_trace[trace.cat])
    if not len(window_rows):
        return np.zeros(0, np.int64)
    begin = int(trace.start[window_rows].min())
    slices = (trace.ph == PH_COMPLETE) & (trace.start < begin)
    return np.flatnonzero(slices)


# Rows taken at a time by `_widest_gap_bound`.
FAR_BLOCK = 1 << 20


def _widest_gap_bound(trace: Trace) -> tuple[int, int, int] | None:
    """(count, span, bound) of the complete slices: how many, from the first start to the last
    end, and a length no stretch of that span which no slice covers exceeds (the widest hole
    of the union of the slices with a length, its two ends included). Worked a block of rows at
    a time, so that the usual answer, no wide hole, takes no whole-trace arrays (this runs at
    the summary's peak of memory). None where a slice ends before it starts."""
    union = Union(np.zeros(0, np.int64), np.zeros(0, np.int64))
    count, first, last = 0, 0, 0
    for lo in range(0, len(trace), FAR_BLOCK):
        rows = np.flatnonzero(trace.ph[lo : lo + FAR_BLOCK] == PH_COMPLETE) + lo
        if not len(rows):
            continue
        dur = trace.dur[rows].astype(np.int64, copy=False)
        if (dur < 0).any():
            return None
        start = trace.start[rows]
        end = dur
        end += start
        first = int(start.min()) if not count else min(first, int(start.min()))
        last = int(end.max()) if not count else max(last, int(end.max()))
        count += len(rows)
        union = union.merge(Union.of(start, end, writable=True))
    edge_start = np.concatenate(([first], union.end))
    edge_end = np.concatenate((union.start, [last]))
    return count, last - first, int((edge_end - edge_start).max()) if count else 0


def far_from_the_rest(trace: Trace) -> tuple[np.ndarray, int]:
    """Slices set apart from nearly all others by a gap of most of the trace's span.

    Returns (rows, gap in ns). Such slices (a clock that jumped, events of another run) make
    `fit all` show mostly emptiness."""
    empty = np.zeros(0, np.int64)
    bound = _widest_gap_bound(trace)
    if bound is not None:
        count, span, widest = bound
        # Every hole found below lies in a stretch no slice covers: none is as wide as that.
        if count < 2 or span <= 0 or widest < FAR_GAP_SHARE * span:
            return empty, 0
    complete = trace.ph == PH_COMPLETE
    # The holes of the union of the slices, from their starts and their ends each sorted on
    # its own (in place: this runs at the summary's peak of memory, and whole-trace index
    # arrays would raise it). With i slices started before a time t and the i-th smallest end
    # at or before it, none is running at t, so the union has a hole from the i-th smallest
    # end to the (i+1)-th start exactly where that end comes first: the same holes, at the
    # same indices, as the running maximum of ends in start order gives.
    start = trace.start[complete]
    n = len(start)
    if n < 2:
        return empty, 0
    end = trace.dur[complete].astype(np.int64, copy=False)  # a new array: written below
    end += start
    del complete
    # Plain values: any sort gives the same array, and numpy's default one sorts in place
    # (a stable sort takes a buffer of half the array).
    start.sort()
    end.sort()
    span = int(end[-1]) - int(start[0])
    if span <= 0:
        return empty, 0
    holes = np.subtract(start[1:], end[:-1], out=end[:-1])  # the ends are not needed after
    del start
    widest = int(np.argmax(holes))
    gap = int(holes[widest])
    del holes, end
    if gap < FAR_GAP_SHARE * span:
        return empty, 0
    # Rare (a clock that jumped): now the slices themselves, by start, on each side.
    rows = np.flatnonzero(trace.ph == PH_COMPLETE)
    rows = rows[np.argsort(trace.start[rows], kind="stable")]
    before, after = rows[: widest + 1], rows[widest + 1 :]
    few = max(1, int(FAR_SHARE * n))
    if len(after) <= few:
        return after, gap
    if len(before) <= few:
        return before, gap
    return empty, 0


def unknown_accelerator_categories(trace: Trace, kind: np.ndarray) -> list[tuple[int, int]]:
    """(category string id, slice count) of CPU-classed slices whose category looks like
    accelerator work (ACCELERATOR_CATEGORY), most slices first."""
    # A block of rows at a time: at 4 GB the whole-trace mask and gather were some 45 MB,
    # taken while memory per operator ran beside the findings at the summary's peak.
    counts = np.zeros(len(trace.strings), dtype=np.int64)
    for lo in range(0, len(kind), ROW_BLOCK):
        block = trace.cat[lo : lo + ROW_BLOCK][kind[lo : lo + ROW_BLOCK] == KIND_OTHER]
        counts += np.bincount(block, minlength=len(trace.strings))
    used = np.flatnonzero(counts)  # a lookup table, not a sort of every row
    found = [
        (int(c), int(counts[c]))
        for c in used.tolist()
        if ACCELERATOR_CATEGORY.fullmatch(trace.strings[c])
    ]
    return sorted(found, key=lambda item: (-item[1], item[0]))


def unmatched_flows(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Flow events whose (cat, id) has no partner: (ends without a start, starts without an
    end), as rows in file order."""
    empty = np.zeros(0, np.int64)
    rows = np.flatnonzero(
        ((trace.ph == PH_FLOW_START) | (trace.ph == PH_FLOW_END)) & (trace.flow_id != NO_VALUE)
    )
    if not len(rows):
        return empty, empty
    cat, ident = trace.cat[rows], trace.flow_id[rows]
    order = np.lexsort((ident, cat))
    cat, ident = cat[order], ident[order]
    new = np.ones(len(rows), dtype=bool)
    new[1:] = (cat[1:] != cat[:-1]) | (ident[1:] != ident[:-1])
    group = np.cumsum(new) - 1
    is_start = trace.ph[rows[order]] == PH_FLOW_START
    starts = np.bincount(group, weights=is_start) > 0
    ends = np.bincount(group, weights=~is_start) > 0
    lone_end = ~is_start & ~starts[group]
    lone_start = is_start & ~ends[group]
    return np.sort(rows[order][lone_end]), np.sort(rows[order][lone_start])


def oddity_findings(session: TraceSession) -> list[Finding]:
    """The oddities of a trace as `info` findings, for the rules table and the summary."""
    trace = session.trace
    classes = session.classes
    found: list[Finding] = []

    def name(row: int) -> str:
        text = trace.name_of(row)
        return text if len(text) <= 60 else text[:59] + "…"

    def add(rule: str, rows: np.ndarray, message: str, device: int | None = None) -> None:
        first = int(rows[0])
        shown = tuple(int(r) for r in rows[:EXAMPLES])
        start, dur = int(trace.start[first]), int(trace.dur[first])
        found.append(Finding(rule, INFO, message, start, dur, device=device, rows=shown))

    late, under = overlapping_gpu_work(trace, session.links.gpu_rows)
    if len(late):
        first = int(late[0])
        lane = trace.lanes[int(trace.lane[first])]
        add(
            "overlapping_gpu_work",
            np.concatenate((late[:1], under[:1], late[1:])),
            f"{plural(len(late), 'GPU activity starts', 'GPU activities start')} before the "
            "previous one on the same stream has "
            f"ended (first: {name(first)} on {lane.label}). All are drawn and counted; busy "
            "time counts the overlap once. Clock skew or a merged trace can cause this.",
            device=int(trace.device[first]),
        )
    outliving, earlier = slices_outliving_parent(trace, session)
    if len(outliving):
        first = int(outliving[0])
        add(
            "slice_outlives_parent",
            np.concatenate((outliving[:1], earlier[:1], outliving[1:])),
            f"{len(outliving):,} CPU slices start inside another slice on the same thread but "
            f"end after it (first: {name(first)} in {name(int(earlier[0]))}). Each is shown "
            "as that slice's sibling, not its child, so self time in its group can add up to "
            "more than the group's total.",
        )
    repeated = duplicate_correlations(trace, classes.runtime)
    if len(repeated):
        first = int(repeated[0])
        add(
            "duplicate_correlation",
            repeated,
            f"{len(repeated):,} runtime calls reuse a correlation id an earlier call carries "
            f"(first: {name(first)}, id {int(trace.corr[first])}). GPU work with that id is "
            "linked to the first call only.",
        )
    early = before_window(trace, classes.kind)
    if len(early):
        add(
            "events_before_window",
            early,
            f"{len(early):,} slices start before the profiler's window (its `Trace` span) "
            f"begins (first: {name(int(early[0]))}). They are drawn and counted as they are.",
        )
    far, gap = far_from_the_rest(trace)
    if len(far):
        from .units import fmt_ms as ms

        add(
            "events_far_from_the_rest",
            far,
            f"{len(far):,} slices lie {ms(gap)} away from all the others (first: "
            f"{name(int(far[0]))}): a clock jump, or events of another run? Fit-all (0) "
            "includes them, so the main part looks small: zoom in on it.",
        )
    span_start = trace.slice_start_min
    span = 0 if span_start is None else int(trace.slice_end_max or span_start) - int(span_start)

    def whole(rule: str, message: str, rows: tuple[int, ...] = ()) -> None:
        """A finding about the whole trace: its span as the range."""
        found.append(Finding(rule, INFO, message, int(span_start or 0), span, rows=rows))

    foreign = unknown_accelerator_categories(trace, classes.kind)
    if foreign:
        listed = ", ".join(f"{trace.strings[c]} ({n:,})" for c, n in foreign[:4])
        total = sum(n for _, n in foreign)
        cats = np.array([c for c, _ in foreign], dtype=np.int64)
        examples = np.flatnonzero(np.isin(trace.cat, cats) & (classes.kind == KIND_OTHER))
        whole(
            "unknown_accelerator_events",
            f"{plural(total, 'slice')} of categories kinetoscope does not understand "
            f"{'looks' if total == 1 else 'look'} like accelerator work: {listed}. They are counted as CPU work (operators table, CPU "
            "lanes, steps' CPU columns) and take no part in GPU busy and idle time, kernel "
            "statistics or launch links.",
            tuple(int(r) for r in examples[:EXAMPLES]),
        )
    if span_start is not None and not classes.gpu.any():
        launches = int(classes.runtime.sum())
        also = (
            f" The trace has {launches:,} runtime calls whose GPU side was not recorded "
            "(profile with ProfilerActivity.CUDA)."
            if launches
            else ""
        )
        whole(
            "no_gpu_activity",
            "The trace has no GPU activity (no kernel, memcpy or memset events): GPU busy and "
            "idle time, idle gaps and kernel statistics are empty, and steps show CPU columns."
            + also,
        )
    if span_start is not None and not len(session.steps):
        whole(
            "no_steps",
            "The trace has no ProfilerStep#N slices, so there is no per-step breakdown and the "
            "step rules judge the whole trace or nothing. Call prof.step() once per iteration "
            "under torch.profiler.profile(schedule=...) to get them.",
        )
    lone_ends, lone_starts = unmatched_flows(trace)
    if len(lone_ends) or len(lone_starts):
        lone = np.sort(np.concatenate((lone_ends[:EXAMPLES], lone_starts[:EXAMPLES])))
        parts = []
        if len(lone_ends):
            parts.append(
                f"{len(lone_ends):,} flow end{'s' if len(lone_ends) > 1 else ''} without a start"
            )
        if len(lone_starts):
            parts.append(
                f"{len(lone_starts):,} flow start{'s' if len(lone_starts) > 1 else ''} without an end"
            )
        whole(
            "unmatched_flows",
            f"The trace has {' and '.join(parts)} (same category and id). kinetoscope links runtime calls to GPU work by "
            "correlation id, not by flows, so nothing is lost; other tools may show fewer "
            "arrows.",
            tuple(int(r) for r in lone[:EXAMPLES]),
        )
    return found
