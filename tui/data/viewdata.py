"""What the timeline draws, computed once per trace: lanes in display order and, for each lane
and nesting level, the slices sorted by start so that a frame only searches, never scans."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kinetoscope.analysis.devices import LISTED, PAIRED, UNLISTED, header_device_names
from kinetoscope.analysis.idle import CAUSES
from kinetoscope.analysis.intervals import slice_order
from kinetoscope.analysis.nesting import Nesting, compute_nesting
from kinetoscope.analysis.session import TraceSession
from kinetoscope.analysis.sync import blocking_rows
from kinetoscope.parser import cache as model_cache
from kinetoscope.parser.model import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_NOT_CPU,
    KIND_OTHER,
    KIND_RUNTIME,
    Lane,
    Trace,
)

# Colour slots: the renderer maps each to a colour. Kept here because the slot of an event is
# data (its category, or an NCCL kernel name), while the colours are presentation.
SLOT_OTHER = 0
SLOT_KERNEL = 1
SLOT_MEMCPY = 2
SLOT_MEMSET = 3
SLOT_RUNTIME = 4
SLOT_OPERATOR = 5
SLOT_ANNOTATION = 6
SLOT_PYTHON = 7
SLOT_GPU_ANNOTATION = 8
SLOT_COMM = 9
SLOT_SYNC = 10  # a runtime call that blocks the host on the GPU, and GPU-side sync records
SLOT_NAMES = (
    "other",
    "kernel",
    "memcpy",
    "memset",
    "runtime",
    "operator",
    "annotation",
    "python",
    "gpu annotation",
    "communication kernel",
    "blocking sync",
)

_CATEGORY_SLOTS = {
    "kernel": SLOT_KERNEL,
    "gpu_memcpy": SLOT_MEMCPY,
    "memcpy": SLOT_MEMCPY,
    "gpu_memset": SLOT_MEMSET,
    "memset": SLOT_MEMSET,
    "cuda_runtime": SLOT_RUNTIME,
    "cuda_driver": SLOT_RUNTIME,
    "runtime": SLOT_RUNTIME,
    "cpu_op": SLOT_OPERATOR,
    "operator": SLOT_OPERATOR,
    "user_annotation": SLOT_ANNOTATION,
    "python_function": SLOT_PYTHON,
    "gpu_user_annotation": SLOT_GPU_ANNOTATION,
    "cuda_sync": SLOT_SYNC,
}

GPU_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)


@dataclass
class Level:
    """The slices of one lane at one nesting depth, sorted by (start, end desc, file order).

    Times are int64 ns relative to the view origin. `end_max` is the running maximum of `end`,
    so `searchsorted(end_max, t, "right")` is the first slice that can still be running at t;
    `cum_dur[i]` is the total duration of the first i slices (busy time without a scan).
    """

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    end_max: np.ndarray
    cum_dur: np.ndarray
    slot: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @classmethod
    def empty(cls) -> Level:
        zero = np.zeros(0, dtype=np.int64)
        return cls(zero, zero, zero, zero, np.zeros(1, dtype=np.int64), np.zeros(0, np.uint8))


@dataclass(frozen=True)
class Placement:
    """Drawn slices in drawing order: `key` is lane id * stride + level, ascending, and within
    a key the rows are ordered by (start, end descending, file order)."""

    rows: np.ndarray  # int64
    key: np.ndarray  # int64
    stride: int


@dataclass
class LaneView:
    """One lane as displayed: its model lane, group, short label and levels (depth 0 first)."""

    lane: Lane
    group: int
    short_label: str
    levels: list[Level]  # only the first until the view's levels are complete
    device: int | None = None  # GPU lanes: the device of their activities
    expandable: bool = False  # it has slices below its first level (placed or not yet)

    @property
    def is_gpu(self) -> bool:
        return self.lane.is_gpu

    @property
    def label(self) -> str:
        return self.lane.label


@dataclass
class Group:
    """Lanes of one process (CPU) or one device (GPU)."""

    label: str
    is_gpu: bool
    lanes: list[int] = field(default_factory=list)  # indices into ViewData.lanes


@dataclass(frozen=True)
class DisplayRow:
    """One screen row of the timeline: a group header, or a level of a lane."""

    group: int
    lane: int = -1  # -1 for a group header
    level: int = 0

    @property
    def is_header(self) -> bool:
        return self.lane < 0


class ViewData:
    """A trace prepared for drawing and navigating: a layout over the trace's `TraceSession`,
    which owns everything derived from the trace (classes, links, idle gaps, the CPU nesting);
    this keeps only where each slice is drawn. Built in a worker thread, then read-only.

    `staged`: only each lane's top level is placed at first (the roots of the
    nesting, found with one sort): enough for the first frame, where every lane is collapsed.
    `complete_levels()` (from a background thread) then nests every slice and swaps the full
    levels in; `nesting` and the deeper levels wait for it. A model cache entry may hold the
    finished nesting and placement (`CachedView`): staged, the first frame then takes the top
    levels from it (no sort, no nesting), and `complete_levels()` rebuilds the rest from it.
    """

    def __init__(self, session: TraceSession | Trace, *, staged: bool = False) -> None:
        if not isinstance(session, TraceSession):
            session = TraceSession(session)
        self.session = session
        trace = self.trace = session.trace
        # A cached view is mapped (and, unless the model was mapped unchecked, its CRCs read)
        # while the rest is computed.
        pending = _in_thread(load_view_cache, trace) if trace.from_cache else None
        self.classes = session.classes
        self.kind = self.classes.kind
        self.origin = int(trace.slice_start_min) if trace.slice_start_min is not None else 0
        end = trace.slice_end_max if trace.slice_end_max is not None else self.origin
        self.span = max(1, int(end) - self.origin)
        self.links = session.links
        self.idle = session.idle
        self.gaps = self.idle.gaps
        self._slot: np.ndarray | None = None  # see `slot`
        self.lanes: list[LaneView] = []
        self.groups: list[Group] = []
        # Per trace row (-1: not drawn, or not placed yet): index into self.lanes, level, and
        # index in that level. Set from each placement, and swapped in whole.
        self.row_lane = self.row_level = self.row_entry = np.zeros(0, dtype=np.int32)
        self._levels_ready = threading.Event()
        self._lock = threading.Lock()
        self.placement: Placement | None = None  # every slice's place (what the cache keeps)
        self.hide_python = False  # python_function slices left out of the lanes' levels
        self._python_placement: Placement | None = None
        self._python_category: np.ndarray | None = None
        self._expandable: list[bool] = []  # each lane's flag with every slice shown
        cached = pending.result() if pending is not None else None
        top = cached.top_placement(trace) if cached is not None and staged else None
        if staged and top is None:
            cached = None
        self.levels_from_cache = cached is not None
        self._cached: CachedView | None = cached  # what complete_levels() installs
        if cached is not None and top is not None:
            # The colour slots of the top levels' rows only; all of them after the first frame.
            top_slots = self._slots(top.rows)
            self._make_lanes(self._per_lane(top, top_slots), deep=cached.deep_lanes())
            self._set_row_lane(top)
        elif cached is not None:
            self.complete_levels()
        elif staged:
            placement = self._root_placement()
            self._make_lanes(self._per_lane(placement))
            self._set_row_lane(placement)
        else:
            self.complete_levels()
        self.device_names = _device_names(trace.header)
        # Each GPU the events use, matched to the header's list (analysis/devices.py).
        used = {
            int(self.lanes[g.lanes[0]].device)
            for g in self.groups
            if g.is_gpu and g.lanes and self.lanes[g.lanes[0]].device is not None
        }
        used |= {int(dev.device) for dev in session.idle.devices}
        self.gpu_names = header_device_names(trace.header, used)

    @functools.cached_property
    def gap_order_longest(self) -> np.ndarray:
        """Gap indices, longest first (made on first use: a sort of every gap)."""
        return np.lexsort((self.gaps.device, self.gaps.start, -(self.gaps.end - self.gaps.start)))

    @property
    def slot(self) -> np.ndarray:
        """The colour slot (SLOT_*) of every trace row; made on first use."""
        slot = self._slot
        if slot is None:
            slot = self._slot = self._slots()
        return slot

    @property
    def nesting(self) -> Nesting:
        """The session's CPU nesting; computes it, or waits for it, if it is not there yet."""
        return self.session.nesting

    @property
    def complete(self) -> bool:
        """Every slice is placed on its level (not only the top levels)."""
        return self._levels_ready.is_set()

    def complete_levels(self) -> None:
        """Nest every slice and place it on its level. Safe to call from any thread, once or
        many times: the first call does the work, the others wait for it."""
        with self._lock:
            if self._levels_ready.is_set():
                return
            cached, self._cached = self._cached, None
            parts = cached.rebuild(self.trace) if cached is not None else None
            if parts is not None:
                self._install(*parts)
                return
            self.levels_from_cache = False
            nesting = self.session.nesting
            self._install(nesting, self._full_placement(nesting))

    def _install(self, nesting: Nesting, placement: Placement) -> None:
        per_lane = self._per_lane(placement)
        self.session.provide_nesting(nesting)
        self.placement = placement
        if self.lanes:  # the top levels' lanes (from a view cache that may not fit: .get)
            for view in self.lanes:
                view.levels = _level_list(per_lane.get(view.lane.id, {}))
        else:
            self._make_lanes(per_lane)
        self._set_row_lane(placement)
        self._expandable = [view.expandable for view in self.lanes]
        self._levels_ready.set()

    def set_hide_python(self, hide: bool) -> None:
        """Leave the python_function slices out of the lanes' levels (the operators below them
        move up), or put them back. Only once the levels are complete; from the UI thread."""
        if not self.complete or hide == self.hide_python:
            return
        assert self.placement is not None
        if hide and self._python_placement is None:
            self._python_placement = self._full_placement(self.nesting, hide_python=True)
        placement = self._python_placement if hide else self.placement
        assert placement is not None
        per_lane = self._per_lane(placement)
        for index, view in enumerate(self.lanes):
            view.levels = _level_list(per_lane.get(view.lane.id, {}))
            view.expandable = len(view.levels) > 1 if hide else self._expandable[index]
        self._set_row_lane(placement)
        self.hide_python = hide

    @property
    def python_category(self) -> np.ndarray:
        """A bool per string id: the category python_function (any case)."""
        if self._python_category is None:
            strings = self.trace.strings
            self._python_category = np.array(
                [s.lower() == "python_function" for s in strings], dtype=bool
            )
        return self._python_category

    def python_rows(self) -> np.ndarray:
        """A bool per trace row: a python_function slice."""
        trace = self.trace
        return self.python_category[trace.cat] if len(trace) else np.zeros(0, dtype=bool)

    # -- construction -------------------------------------------------------------------------

    def _slots(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The colour slot of every row, or of `rows` only."""
        trace = self.trace
        lowered = [s.lower() for s in trace.strings]
        by_string = np.array([_CATEGORY_SLOTS.get(s, SLOT_OTHER) for s in lowered], dtype=np.uint8)
        comm = np.array(["nccl" in s or "rccl" in s for s in lowered], dtype=bool)
        runtime = self.classes.runtime
        if rows is None:
            cat, name, kind = trace.cat, trace.name, self.kind
        else:
            cat, name, kind = trace.cat[rows], trace.name[rows], self.kind[rows]
            only = np.zeros(len(trace), dtype=bool)
            only[rows] = runtime[rows]
            runtime = only
        slot = by_string[cat] if len(cat) else np.zeros(0, np.uint8)
        gpu = np.isin(kind, GPU_KINDS)
        slot = np.where(gpu & (slot == SLOT_OTHER), SLOT_KERNEL, slot)
        slot = np.where((kind == KIND_RUNTIME), SLOT_RUNTIME, slot)
        if len(cat):
            slot = np.where((kind == KIND_KERNEL) & comm[name], SLOT_COMM, slot)
            blocking = blocking_rows(trace, runtime)
            slot = np.where(blocking if rows is None else blocking[rows], SLOT_SYNC, slot)
        return slot.astype(np.uint8)

    def _full_placement(self, nesting: Nesting, hide_python: bool = False) -> Placement:
        """Every slice's (lane, level), in drawing order; with `hide_python`, every slice but
        the python_function ones, each CPU slice as deep as its other ancestors make it."""
        trace = self.trace
        kind = self.kind
        n_lanes = len(trace.lanes)
        level = np.full(len(trace), -1, dtype=np.int64)
        gpu = np.isin(kind, GPU_KINDS)
        # GPU work that overlaps earlier work on its stream (a broken or merged trace) nests
        # like CPU slices do, so that a kernel inside another one is drawn a level below it.
        # This nesting (and the one of the other slices below) is layout: where a slice is
        # drawn. The CPU nesting, an analysis result, is the session's (`nesting` above).
        gpu_depth = compute_nesting(trace, gpu, np.zeros(len(trace), dtype=np.int32)).depth
        level[gpu] = gpu_depth[gpu]
        gpu_levels = np.zeros(n_lanes + 1, dtype=np.int64)
        np.maximum.at(gpu_levels, trace.lane[gpu], gpu_depth[gpu] + 1)
        cpu = (kind == KIND_OTHER) | (kind == KIND_RUNTIME)
        depth = nesting.depth
        if hide_python:
            python = self.python_rows()
            cpu &= ~python
            depth = depth - _ancestors_among(nesting, python)
        level[cpu] = depth[cpu] + gpu_levels[trace.lane[cpu]]
        # Slices that are neither CPU work nor GPU activity (GPU annotations, syncs, Kineto's
        # window span) get levels of their own below the lane's other levels.
        other_rows = np.flatnonzero(kind == KIND_NOT_CPU)
        if len(other_rows):
            deepest = np.full(n_lanes + 1, -1, dtype=np.int64)
            placed = np.flatnonzero(level >= 0)
            np.maximum.at(deepest, trace.lane[placed], level[placed])
            others = compute_nesting(
                trace, kind == KIND_NOT_CPU, np.zeros(len(trace), dtype=np.int32)
            )
            level[other_rows] = deepest[trace.lane[other_rows]] + 1 + others.depth[other_rows]

        placed = np.flatnonzero(level >= 0)
        stride = int(level.max()) + 1 if len(placed) else 1
        key = trace.lane[placed].astype(np.int64) * stride + level[placed]
        start = trace.start[placed]
        end = start + trace.dur[placed]
        order = slice_order(key, start, end)  # stable: file order on ties
        return Placement(rows=placed[order], key=key[order], stride=stride)

    def _root_placement(self) -> Placement:
        """Only the slices drawn on their lane's first level, as `_full_placement` places them:
        the roots of the GPU nesting; the CPU roots of lanes without GPU work; the roots of the
        remaining slices on lanes with neither. A root is a slice that ends after every slice
        before it (by start, longest first) on its lane has ended."""
        trace = self.trace
        kind = self.kind
        gpu = np.isin(kind, GPU_KINDS)
        cpu = (kind == KIND_OTHER) | (kind == KIND_RUNTIME)
        has_gpu = np.zeros(len(trace.lanes) + 1, dtype=bool)
        has_gpu[trace.lane[gpu]] = True
        has_cpu = has_gpu.copy()
        has_cpu[trace.lane[cpu]] = True
        pieces = [
            _roots(trace, gpu),
            _roots(trace, cpu & ~has_gpu[trace.lane]),
            _roots(trace, (kind == KIND_NOT_CPU) & ~has_cpu[trace.lane]),
        ]
        rows = np.concatenate(pieces)
        lanes = trace.lane[rows].astype(np.int64)
        # Each lane's roots come from one class, already in drawing order: order by lane only.
        order = np.argsort(lanes, kind="stable")
        return Placement(rows=rows[order], key=lanes[order], stride=1)

    def _per_lane(
        self, placement: Placement, slots: np.ndarray | None = None
    ) -> dict[int, dict[int, Level]]:
        """Levels per lane id from a placement (`slots`: of its rows, if known); fills
        row_level and row_entry anew."""
        trace = self.trace
        placed, key, stride = placement.rows, placement.key, placement.stride
        slot_of = self.slot[placed] if slots is None else slots
        start = trace.start[placed] - self.origin
        # Saturate: a slice hundreds of years long would wrap around int64 once made relative.
        end = start + np.minimum(trace.dur[placed], np.iinfo(np.int64).max - start)
        bounds = np.flatnonzero(np.diff(key)) + 1
        first = np.concatenate(([0], bounds))
        last = np.concatenate((bounds, [len(key)]))
        row_level = np.full(len(trace), -1, dtype=np.int32)
        row_entry = np.full(len(trace), -1, dtype=np.int32)  # a level holds < 2**31 slices
        per_lane: dict[int, dict[int, Level]] = {}
        for lo, hi in zip(first.tolist(), last.tolist()):
            if lo == hi:
                continue
            lane_id, lvl = divmod(int(key[lo]), stride)
            s, e = start[lo:hi], end[lo:hi]
            per_lane.setdefault(lane_id, {})[lvl] = Level(
                rows=placed[lo:hi],
                start=s,
                end=e,
                end_max=np.maximum.accumulate(e),
                cum_dur=np.concatenate(([0], np.cumsum(e - s))),
                slot=slot_of[lo:hi],
            )
            row_level[placed[lo:hi]] = lvl
            row_entry[placed[lo:hi]] = np.arange(hi - lo)
        # Swapped in whole, so that a reader on another thread sees old or new, never half.
        self.row_level, self.row_entry = row_level, row_entry
        return per_lane

    def _set_row_lane(self, placement: Placement) -> None:
        """row_lane from a placement, once the lanes are laid out."""
        trace = self.trace
        view_of = np.full(len(trace.lanes) + 1, -1, dtype=np.int32)
        view_of[[view.lane.id for view in self.lanes]] = np.arange(len(self.lanes))
        row_lane = np.full(len(trace), -1, dtype=np.int32)
        row_lane[placement.rows] = view_of[placement.key // placement.stride]
        self.row_lane = row_lane

    def _make_lanes(
        self, per_lane: dict[int, dict[int, Level]], deep: set[int] | None = None
    ) -> None:
        """The lane views and groups; `deep`: the lanes with slices below their first level, if
        known (else counted)."""
        trace = self.trace
        lane_ids = sorted(per_lane, key=lambda i: trace.lanes[i].sort_key)
        # A lane is deep when it has slices below its first level: more slices than its first
        # level holds (known before the deeper levels are placed).
        if deep is None:
            slices = np.bincount(trace.lane[self.kind >= 0], minlength=len(trace.lanes) + 1)
            deep = {i for i in lane_ids if slices[i] > len(per_lane[i].get(0, Level.empty()))}
        # Group by process (CPU) or device (GPU); groups ordered by their first lane.
        group_of: dict[tuple, int] = {}
        for lane_id in lane_ids:
            lane = trace.lanes[lane_id]
            levels = _level_list(per_lane[lane_id])
            device = None
            if lane.is_gpu:
                lane_rows = levels[0].rows
                devices = trace.device[lane_rows] if len(lane_rows) else np.zeros(0, np.int64)
                device = int(devices[0]) if len(devices) else None
            group_key = (
                ("gpu", device if device is not None else str(lane.pid))
                if lane.is_gpu
                else (
                    "cpu",
                    _key(lane.pid),
                )
            )
            label = lane.label
            head, _, tail = label.partition(" / ")
            if group_key not in group_of:
                group_of[group_key] = len(self.groups)
                self.groups.append(Group(label=head, is_gpu=lane.is_gpu))
            group_index = group_of[group_key]
            view_index = len(self.lanes)
            self.lanes.append(
                LaneView(
                    lane=lane,
                    group=group_index,
                    short_label=tail or head,
                    levels=levels,
                    device=device,
                    expandable=lane_id in deep,
                )
            )
            self.groups[group_index].lanes.append(view_index)
        # The GPU groups' labels say which device they are.
        for group in self.groups:
            if group.is_gpu:
                first_lane = self.lanes[group.lanes[0]]
                if first_lane.device is not None:
                    group.label = f"GPU {first_lane.device}"

    def finish_labels(self) -> None:
        """Add device names (from the header) to GPU group labels."""
        for group in self.groups:
            if not group.is_gpu:
                continue
            device = self.lanes[group.lanes[0]].device
            named = self.gpu_names.get(int(device)) if device is not None else None
            if named is None or named.how == UNLISTED:
                continue
            if named.how == LISTED:
                if named.name:
                    group.label = f"GPU {device} · {named.name}"
            elif named.how == PAIRED:
                what = f"{named.name} " if named.name else ""
                group.label = f"GPU {device} · {what}(listed as device {named.listed_as})"
            else:
                group.label = f"GPU {device} · name unknown ({named.listed_note})"

    # -- queries --------------------------------------------------------------------------------

    def display_rows(self, expanded: set[int]) -> list[DisplayRow]:
        """Screen rows: per group a header, then per lane one row, or one per level if expanded."""
        rows: list[DisplayRow] = []
        for group_index, group in enumerate(self.groups):
            rows.append(DisplayRow(group=group_index))
            for lane_index in group.lanes:
                count = len(self.lanes[lane_index].levels) if lane_index in expanded else 1
                rows.extend(DisplayRow(group_index, lane_index, lvl) for lvl in range(count))
        return rows

    def level_of_row(self, row: int) -> tuple[int, int, int]:
        """(lane view index, level, entry) of a trace row, each -1 if it is not drawn."""
        return int(self.row_lane[row]), int(self.row_level[row]), int(self.row_entry[row])

    def rel_start(self, row: int) -> int:
        return int(self.trace.start[row]) - self.origin

    def rel_end(self, row: int) -> int:
        return int(self.trace.start[row] + self.trace.dur[row]) - self.origin

    def parent_of(self, row: int) -> int:
        """The row above `row`: kernel -> its launch; CPU slice -> its enclosing slice; else -1."""
        if self.kind[row] in GPU_KINDS:
            return self.links.runtime_of(row)
        return int(self.nesting.parent[row])

    def ancestors(self, row: int) -> list[int]:
        """Rows enclosing `row`, innermost first (CPU nesting; a kernel starts at its launch)."""
        out: list[int] = []
        current = self.parent_of(row)
        while current >= 0 and len(out) < 10_000:
            out.append(current)
            current = int(self.nesting.parent[current])
        return out

    def kernels_of(self, row: int) -> np.ndarray:
        """GPU rows launched by runtime row `row` (same correlation), in file order."""
        if self.kind[row] != KIND_RUNTIME:
            return np.zeros(0, dtype=np.int64)
        return self.links.gpu_of(row)

    def launch_of(self, row: int) -> int:
        """The runtime row that launched GPU row `row`, or -1."""
        if self.kind[row] not in GPU_KINDS:
            return -1
        return self.links.runtime_of(row)

    def first_launch_below(self, row: int) -> int:
        """The earliest runtime row nested in CPU slice `row` that launched GPU work, or -1."""
        lane_index, level, _ = self.level_of_row(row)
        if lane_index < 0:
            return -1
        lane = self.lanes[lane_index]
        begin, finish = self.rel_start(row), self.rel_end(row)
        best = -1
        best_start = None
        for deeper in lane.levels[level + 1 :]:
            lo = int(np.searchsorted(deeper.start, begin, "left"))
            hi = int(np.searchsorted(deeper.start, finish, "right"))
            candidates = deeper.rows[lo:hi]
            if not len(candidates):
                continue
            runtime = candidates[self.kind[candidates] == KIND_RUNTIME]
            for cand in runtime.tolist():
                if len(self.kernels_of(cand)):
                    cand_start = self.rel_start(cand)
                    if best_start is None or cand_start < best_start:
                        best, best_start = cand, cand_start
                    break
        return best

    def stack_at(self, lane_index: int, when: int) -> list[int]:
        """Rows of CPU slices on a lane containing relative time `when`, outermost first."""
        lane_id = self.lanes[lane_index].lane.id
        rows = self.nesting.slices_at(self.trace, lane_id, when + self.origin)
        return [int(r) for r in rows]

    def gap_cause(self, gap: int) -> str:
        return CAUSES[int(self.gaps.cause[gap])]

    def gpu_lanes_of_device(self, device: int) -> list[int]:
        return [i for i, lane in enumerate(self.lanes) if lane.is_gpu and lane.device == device]

    def spans_by_group(self, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """The time `rows` (trace rows, e.g. the compiled regions) cover, per group of the lanes
        they are on: (starts, ends), relative ns, merged (`merge_spans`)."""
        trace = self.trace
        group_of = {lane.lane.id: lane.group for lane in self.lanes}
        rows = np.asarray(rows, dtype=np.int64)
        groups = np.array([group_of.get(int(i), -1) for i in trace.lane[rows]], dtype=np.int64)
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for group in np.unique(groups[groups >= 0]).tolist():
            mine = rows[groups == group]
            start = trace.start[mine] - self.origin
            out[int(group)] = merge_spans(start, start + trace.dur[mine])
        return out


def merge_spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [starts, ends) merged where they overlap or touch: sorted and disjoint."""
    if not len(starts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > ends[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(starts)) - 1
    return starts[first].astype(np.int64), ends[last].astype(np.int64)


def _in_thread(function: Any, *args: Any) -> Any:
    """Run `function(*args)` in a thread of its own; `.result()` waits for it."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(function, *args)
    finally:
        pool.shutdown(wait=False)


def _level_list(levels: dict[int, Level]) -> list[Level]:
    return [levels.get(i, Level.empty()) for i in range(max(levels, default=0) + 1)]


def _ancestors_among(nesting: Nesting, marked: np.ndarray) -> np.ndarray:
    """Per trace row: how many of its CPU ancestors are `marked` (a bool per row). The nesting's
    order is a preorder, so a slice's descendants are the positions up to its subtree's stop:
    each marked slice adds one over that range (a difference array, summed once)."""
    order = nesting.order
    counts = np.zeros(len(marked), dtype=np.int64)
    if not len(order):
        return counts
    positions = np.flatnonzero(marked[order])
    steps = np.zeros(len(order) + 1, dtype=np.int64)
    np.add.at(steps, positions + 1, 1)
    np.add.at(steps, nesting.subtree_stop[positions], -1)
    counts[order] = np.cumsum(steps)[:-1]
    return counts


def _roots(trace: Trace, mask: np.ndarray) -> np.ndarray:
    """Rows of the roots of the nesting of the `mask` slices, per lane, in drawing order."""
    rows = np.flatnonzero(mask)
    if not len(rows):
        return rows
    start = trace.start[rows]
    end = start + trace.dur[rows]
    lane = trace.lane[rows]
    order = slice_order(lane, start, end)  # stable, and `rows` ascend: file order on ties
    rows, end, lane = rows[order], end[order], lane[order]
    bounds = np.flatnonzero(lane[1:] != lane[:-1]) + 1
    root = np.empty(len(rows), dtype=bool)
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(rows)]):
        ends = end[lo:hi]
        root[lo] = True
        # Nested under an earlier slice exactly when one of them ends at or after its end.
        root[lo + 1 : hi] = ends[1:] > np.maximum.accumulate(ends)[:-1]
    return rows[root]


def _key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _device_names(header: dict[str, Any]) -> dict[int, str]:
    props = header.get("deviceProperties")
    if not isinstance(props, list):
        props = header.get("computeProperties")
    names: dict[int, str] = {}
    if isinstance(props, list):
        for entry in props:
            if isinstance(entry, dict) and isinstance(entry.get("id"), int):
                name = entry.get("name")
                if isinstance(name, str) and name.strip():
                    names[entry["id"]] = name.strip()
    return names


def build_view_data(session: TraceSession | Trace, *, staged: bool = False) -> ViewData:
    """Everything the timeline needs, computed once (call it off the UI thread). With
    `staged`, call `complete_levels()` later, off the UI thread too."""
    data = ViewData(session, staged=staged)
    data.finish_labels()
    return data


VIEW_CACHE = "view"
VIEW_CACHE_VERSION = 2
# What the view cache keeps of the nesting: the forest itself. The per-row arrays (position,
# parent, depth), the lanes of the positions and the self times follow from it in a few passes
# (`CachedView.rebuild`), and cost no disk.
_FOREST_FIELDS = ("order", "parent_pos", "subtree_stop", "outermost", "lane_ids", "lane_start")


def _narrow(index: np.ndarray) -> np.ndarray:
    """Row or position indices as int32 when they fit (they do below 2**31 rows)."""
    fits = not len(index) or (int(index.min()) >= -1 and int(index.max()) < (1 << 31) - 1)
    return index.astype(np.int32) if fits else index


def save_view_cache(data: ViewData) -> bool:
    """Keep the finished nesting and placement with the trace's model cache entry: the nesting's
    forest (positions as int32), the placed rows (int32) and their keys as runs (one key and
    count per lane and level)."""
    if not data.complete or data.placement is None or not data.session.nesting_ready:
        return False
    nesting = data.session.nesting
    arrays = {f"nesting.{name}": getattr(nesting, name) for name in _FOREST_FIELDS}
    for name in ("order", "parent_pos", "subtree_stop"):
        arrays[f"nesting.{name}"] = _narrow(arrays[f"nesting.{name}"])
    placement = data.placement
    key = placement.key
    first = np.flatnonzero(np.diff(key)) + 1 if len(key) else np.zeros(0, np.int64)
    starts = np.concatenate(([0], first)) if len(key) else first
    arrays["placement.rows"] = _narrow(placement.rows)
    arrays["placement.keys"] = key[starts].astype(np.int64)
    arrays["placement.counts"] = np.diff(np.append(starts, len(key))).astype(np.int64)
    arrays["placement.stride"] = np.array([placement.stride], dtype=np.int64)
    return model_cache.save_extra(data.trace, VIEW_CACHE, VIEW_CACHE_VERSION, arrays)


@dataclass(frozen=True)
class CachedView:
    """A view cache entry as mapped: nothing derived yet. `top_placement` (the first frame's)
    costs the top levels' rows; `rebuild` (after the first frame) the whole nesting."""

    forest: dict[str, np.ndarray]
    rows: np.ndarray  # placed rows, in drawing order
    keys: np.ndarray  # lane * stride + level of each run of rows, ascending
    counts: np.ndarray  # rows in each run
    stride: int

    def _lanes_levels(self) -> tuple[np.ndarray, np.ndarray]:
        return self.keys // self.stride, self.keys % self.stride

    def top_placement(self, trace: Trace) -> Placement | None:
        """Each lane's first level, as `ViewData._root_placement` places it (None if its rows
        are not rows of the trace)."""
        lanes, levels = self._lanes_levels()
        ends = np.cumsum(self.counts)
        top = np.flatnonzero(levels == 0)
        pieces = [self.rows[ends[i] - self.counts[i] : ends[i]] for i in top.tolist()]
        rows = np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, np.int64)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= len(trace)):
            return None
        return Placement(rows=rows, key=np.repeat(lanes[top], self.counts[top]), stride=1)

    def deep_lanes(self) -> set[int]:
        """Lanes with slices below their first level."""
        lanes, levels = self._lanes_levels()
        return {int(lane) for lane in np.unique(lanes[levels > 0])}

    def rebuild(self, trace: Trace) -> tuple[Nesting, Placement] | None:
        """The nesting and placement as they were saved, or None if the arrays do not fit the
        trace (then the view is computed)."""
        n = len(trace)
        rows = self.rows
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= n):
            return None
        forest = self.forest
        order = forest["order"].astype(np.int64)
        if len(order) and (int(order.min()) < 0 or int(order.max()) >= n):
            return None
        parent_pos = np.asarray(forest["parent_pos"])
        subtree_stop = np.asarray(forest["subtree_stop"])
        count = len(order)
        if len(parent_pos) and (int(parent_pos.max()) >= count or int(parent_pos.min()) < -1):
            return None
        if len(subtree_stop) and (int(subtree_stop.max()) > count or int(subtree_stop.min()) < 0):
            return None
        # As compute_nesting makes them (analysis/nesting.py).
        has_parent = parent_pos >= 0
        dur = trace.dur[order]
        children_dur = np.zeros(count, dtype=np.int64)
        np.add.at(children_dur, parent_pos[has_parent], dur[has_parent])
        self_time = np.maximum(dur - children_dur, 0)
        index_type = parent_pos.dtype
        position = np.full(n, -1, dtype=index_type)
        position[order] = np.arange(count, dtype=index_type)
        parent = np.full(n, -1, dtype=np.int32)
        parent[order[has_parent]] = order[parent_pos[has_parent]]
        nesting = Nesting(
            order=order,
            parent_pos=parent_pos,
            subtree_stop=subtree_stop,
            self_time=self_time,
            outermost=forest["outermost"],
            position=position,
            parent=parent,
            lane_ids=forest["lane_ids"],
            lane_start=forest["lane_start"],
        )
        key = np.repeat(self.keys, self.counts)
        return nesting, Placement(rows=rows.astype(np.int64), key=key, stride=self.stride)


def load_view_cache(trace: Trace) -> CachedView | None:
    """The trace's view cache entry, mapped and checked in constant time (sizes, not values:
    `CachedView.rebuild` checks those), or None."""
    if not trace.from_cache:
        return None
    arrays = model_cache.load_extra(trace, VIEW_CACHE, VIEW_CACHE_VERSION)
    if arrays is None:
        return None
    try:
        forest = {name: arrays[f"nesting.{name}"] for name in _FOREST_FIELDS}
        stride = int(arrays["placement.stride"][0])
        rows, keys = arrays["placement.rows"], arrays["placement.keys"]
        counts = arrays["placement.counts"]
    except (KeyError, IndexError, TypeError):
        return None
    positions = len(forest["order"])
    lane_start = forest["lane_start"]
    sizes_ok = (
        all(len(forest[name]) == positions for name in _FOREST_FIELDS[:4])
        and len(lane_start) == len(forest["lane_ids"]) + 1
        and int(lane_start[-1]) == positions
        and forest["outermost"].dtype == np.bool_
        and forest["parent_pos"].dtype == forest["subtree_stop"].dtype
    )
    runs_ok = (
        stride > 0
        and len(keys) == len(counts)
        and (not len(counts) or int(counts.min()) > 0)
        and int(counts.sum()) == len(rows)
        and bool(np.all(keys[1:] > keys[:-1]))
        and (not len(keys) or (int(keys[0]) >= 0 and int(keys[-1]) // stride < len(trace.lanes)))
        and len(rows) <= len(trace)
    )
    if not (sizes_ok and runs_ok):
        return None
    return CachedView(forest, rows, keys, counts, stride)
