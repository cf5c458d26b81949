"""A rank of a distributed job collapsed to three rows for the job's timeline (GPU compute,
communication, the main CPU thread), its times relative to the job's origin.

`collapsed_rows` picks each row's trace rows from a rank's `ViewData` (laid out with its lanes'
top levels only: no nesting needed when the rank's digest names its collectives);
`CollapsedRank` is that `ViewData` seen as three lanes, which the `Timeline` draws
(tui/job/rank_timeline.py). This module does not import Textual.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from kinetoscope.analysis.collectives import RankCollectives
from kinetoscope.parser.model import KIND_OTHER, KIND_RUNTIME, Lane
from kinetoscope.tui.data.viewdata import (
    GPU_KINDS,
    SLOT_COMM,
    DisplayRow,
    Group,
    LaneView,
    Level,
    ViewData,
)

ROW_NAMES = ("GPU compute", "communication", "CPU main thread")
NO_GPU = "no GPU"  # the first row's name on a rank that recorded no GPU work (CPU only)


def _level(trace: Any, rows: np.ndarray, origin: int, slot: np.ndarray) -> Level:
    """A level of `rows` (any lanes), sorted by (start, end descending), times from `origin`."""
    if not len(rows):
        return Level.empty()
    start = trace.start[rows].astype(np.int64) - origin
    end = start + trace.dur[rows].astype(np.int64)
    order = np.lexsort((-end, start))
    rows, start, end = rows[order], start[order], end[order]
    return Level(
        rows=rows,
        start=start,
        end=end,
        end_max=np.maximum.accumulate(end),
        cum_dur=np.concatenate(([0], np.cumsum(end - start))),
        slot=slot[rows],
    )


def _same_events(trace: Any, found: dict[str, RankCollectives]) -> bool:
    """The collectives (a rank's digest, made in another process) name this trace's rows."""
    for coll in found.values():
        rows = coll.row
        if not len(rows):
            continue
        if int(rows.min()) < 0 or int(rows.max()) >= len(trace):
            return False
        if not np.array_equal(trace.start[rows], coll.start):
            return False
        if [trace.name_of(int(r)) for r in rows[:64].tolist()] != coll.name[:64]:
            return False
    return True


def collapsed_rows(
    data: ViewData, source: str | None = None, found: dict[str, RankCollectives] | None = None
) -> list[np.ndarray]:
    """The trace rows of a rank's three collapsed rows (ROW_NAMES): its GPU work other than
    communication, every stream together; its collectives (communication kernels, or the CPU
    backend's annotations; `source` "gpu" or "cpu" as the job's matching chose, else whichever
    it has); the top-level slices of the CPU thread with the most CPU time. `found`: the rank's
    collectives from its digest, used when they name this trace's rows (else found again,
    which needs the trace's nesting)."""
    from kinetoscope.analysis.collectives import find_collectives

    trace = data.trace
    kind = data.kind
    gpu = np.isin(kind, GPU_KINDS)
    if not found or not {"gpu", "cpu"} <= set(found) or not _same_events(trace, found):
        found = find_collectives(data.session, read_args=False)
    if source not in found or not len(found[source]):
        source = "gpu" if len(found["gpu"]) else "cpu"
    comm = np.unique(found[source].row.astype(np.int64))
    is_comm = np.zeros(len(trace), bool)
    is_comm[comm] = True
    compute = np.flatnonzero(gpu & ~is_comm & (data.slot != SLOT_COMM))
    best, best_time = None, -1
    for view in data.lanes:
        if view.is_gpu:
            continue
        level = view.levels[0]
        cpu = (kind[level.rows] == KIND_OTHER) | (kind[level.rows] == KIND_RUNTIME)
        busy = int((level.end[cpu] - level.start[cpu]).sum())
        if cpu.any() and busy > best_time:
            best, best_time = view, busy
    main = np.zeros(0, np.int64)
    if best is not None:
        rows = best.levels[0].rows
        main = rows[(kind[rows] == KIND_OTHER) | (kind[rows] == KIND_RUNTIME)].astype(np.int64)
    return [compute, comm, main]


def row_names(has_gpu: bool) -> tuple[str, ...]:
    """ROW_NAMES, with the GPU row named NO_GPU on a rank without GPU work (an empty "GPU
    compute" row would read as a GPU left idle)."""
    return ROW_NAMES if has_gpu else (NO_GPU, *ROW_NAMES[1:])


class CollapsedRank:
    """A rank's `ViewData` seen as three lanes (ROW_NAMES) for the `Timeline`, with times
    relative to `origin` (the job's origin, plus the rank's offset when applied). Everything
    else (the trace, gaps, links, nesting) is the rank's own `ViewData`'s."""

    def __init__(self, data: ViewData, rank: int, rows: list[np.ndarray], origin: int, span: int):
        self.inner = data
        self.rank = rank
        self.groups = [Group(label=f"rank {rank}", is_gpu=False, lanes=[0, 1, 2])]
        self._rows = rows
        self.row_names = row_names(has_gpu=bool(np.isin(data.kind, GPU_KINDS).any()))
        self._lane_of = [self._model_lane(r) for r in rows]
        self.lanes: list[LaneView] = []
        self.rebase(origin, span)

    def __getattr__(self, name: str) -> Any:
        # Only for names this view does not define; `inner` itself is looked up plainly, so a
        # half-built instance raises AttributeError instead of recursing.
        return getattr(object.__getattribute__(self, "inner"), name)

    def _model_lane(self, rows: np.ndarray) -> Lane:
        trace = self.inner.trace
        if len(rows):
            return trace.lanes[int(trace.lane[rows[0]])]
        return Lane(id=-1, pid="-", tid="-")

    def rebase(self, origin: int, span: int) -> None:
        """Times from `origin` now (the job's span from there: `span`)."""
        self.origin = origin
        self.span = max(1, span)
        trace, slot = self.inner.trace, self.inner.slot
        self.lanes = [
            LaneView(
                lane=lane, group=0, short_label=name, levels=[_level(trace, rows, origin, slot)]
            )
            for lane, name, rows in zip(self._lane_of, self.row_names, self._rows)
        ]
        placed = [(i, level.rows) for i, view in enumerate(self.lanes) for level in view.levels]
        rows = np.concatenate([r for _, r in placed]) if placed else np.zeros(0, np.int64)
        lane = np.concatenate([np.full(len(r), i, np.int64) for i, r in placed])
        entry = np.concatenate([np.arange(len(r)) for _, r in placed])
        order = np.argsort(rows, kind="stable")
        self._placed_rows, self._placed_lane, self._placed_entry = (
            rows[order],
            lane[order],
            entry[order],
        )

    @property
    def complete(self) -> bool:
        """Its three rows are all there (the rank's own deeper levels may not be)."""
        return True

    def display_rows(self, expanded: set[int]) -> list[DisplayRow]:
        return [DisplayRow(0, i, 0) for i in range(len(self.lanes))]

    def level_of_row(self, row: int) -> tuple[int, int, int]:
        k = int(np.searchsorted(self._placed_rows, row))
        if k < len(self._placed_rows) and int(self._placed_rows[k]) == row:
            return int(self._placed_lane[k]), 0, int(self._placed_entry[k])
        return -1, -1, -1

    def rel_start(self, row: int) -> int:
        return int(self.inner.trace.start[row]) - self.origin

    def rel_end(self, row: int) -> int:
        trace = self.inner.trace
        return int(trace.start[row] + trace.dur[row]) - self.origin

    def first_launch_below(self, row: int) -> int:
        return -1  # the operators below the thread's top level are not drawn here

    def set_hide_python(self, hide: bool) -> None:
        pass
