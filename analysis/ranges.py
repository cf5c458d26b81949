"""Operator, kernel and GPU idle statistics restricted to a time range [t0, t1] (absolute ns).

Every time is clipped to the range: a slice counts with the part of it inside the range, and
self time is the clipped duration less the clipped durations of the children. GPU time is
attributed to the operator that launched it whenever the GPU activity overlaps the range, even
when the launch itself happened before the range began. Over the whole trace every function
gives the same numbers as its unrestricted counterpart.

An event is *in* the range when it overlaps it by more than zero, or, for a zero-length event,
when it lies inside the closed range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import Trace

from .classify import Groups
from .idle import IdleAnalysis
from .kernels import KernelTable
from .links import Links
from .nesting import Nesting
from .operators import OperatorTable


def clip(start: np.ndarray, dur: np.ndarray, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """(duration inside [t0, t1], in-range mask) for intervals [start, start + dur)."""
    end = start + dur
    inside_len = np.maximum(np.minimum(end, t1) - np.maximum(start, t0), 0)
    point = (dur == 0) & (start >= t0) & (start <= t1)
    return inside_len, (inside_len > 0) | point


def operators_in_range(
    trace: Trace, nesting: Nesting, groups: Groups, links: Links, t0: int, t1: int
) -> OperatorTable:
    """The operator table of the part of the trace inside [t0, t1]."""
    order = nesting.order
    group = groups.index[order].astype(np.int64)
    n_groups = len(groups)
    inside_len, in_range = clip(trace.start[order], trace.dur[order], t0, t1)

    count = np.bincount(group[in_range], minlength=n_groups).astype(np.int64)
    has_parent = nesting.parent_pos >= 0
    children = np.zeros(len(order), dtype=np.int64)
    np.add.at(children, nesting.parent_pos[has_parent], inside_len[has_parent])
    self_time = np.maximum(inside_len - children, 0)
    excl = np.zeros(n_groups, dtype=np.int64)
    np.add.at(excl, group, self_time)
    incl = np.zeros(n_groups, dtype=np.int64)
    outer = nesting.outermost
    np.add.at(incl, group[outer], inside_len[outer])

    gpu_len, _ = clip(trace.start[links.gpu_rows], trace.dur[links.gpu_rows], t0, t1)
    launched = np.zeros(len(order), dtype=np.int64)
    linked = links.gpu_runtime >= 0
    np.add.at(launched, nesting.position[links.gpu_runtime[linked]], gpu_len[linked])
    gpu_self = np.zeros(n_groups, dtype=np.int64)
    np.add.at(gpu_self, group[nesting.parent_pos[has_parent]], launched[has_parent])
    prefix = np.concatenate(([0], np.cumsum(launched)))
    outer_pos = np.flatnonzero(outer)
    below = prefix[nesting.subtree_stop[outer_pos]] - prefix[outer_pos + 1]
    gpu_total = np.zeros(n_groups, dtype=np.int64)
    np.add.at(gpu_total, group[outer_pos], below)
    return OperatorTable(
        groups=groups, count=count, incl=incl, excl=excl, gpu_self=gpu_self, gpu_total=gpu_total
    )


def kernels_in_range(
    trace: Trace, table: KernelTable, links: Links, t0: int, t1: int
) -> KernelTable:
    """The kernel table of the GPU activities in [t0, t1], durations clipped to the range.

    Groups with no activity in the range get count 0, total 0, and min = max = 0."""
    rows = links.gpu_rows
    inside_len, in_range = clip(trace.start[rows], trace.dur[rows], t0, t1)
    group = table.groups.index[rows[in_range]].astype(np.int64)
    length = inside_len[in_range]
    n = len(table.groups)
    count = np.bincount(group, minlength=n).astype(np.int64)
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, group, length)
    low = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(low, group, length)
    low[count == 0] = 0
    high = np.zeros(n, dtype=np.int64)
    np.maximum.at(high, group, length)
    return KernelTable(
        groups=table.groups,
        count=count,
        total=total,
        min=low,
        max=high,
        launcher_row=table.launcher_row,
    )


@dataclass(frozen=True)
class RangeIdle:
    """One device's GPU time inside a range: the device window clipped to the range, the busy
    part of it, the idle rest split by cause (CAUSES order), and how many gaps touch the range."""

    device: int
    window: int
    busy: int
    idle: int
    idle_by_cause: tuple[int, int, int]
    gaps: int


def idle_in_range(idle: IdleAnalysis, t0: int, t1: int) -> list[RangeIdle]:
    out = []
    gaps = idle.gaps
    for dev in idle.devices:
        window = dev.window
        if window is None:
            out.append(RangeIdle(dev.device, 0, 0, 0, (0, 0, 0), 0))
            continue
        lo, hi = max(window[0], t0), min(window[1], t1)
        span = max(hi - lo, 0)
        busy = int(dev.busy.covered(lo, hi)[0]) if span else 0
        mine = gaps.device == dev.device
        gap_len = np.maximum(np.minimum(gaps.end, hi) - np.maximum(gaps.start, lo), 0)
        touching = mine & (gap_len > 0)
        by_cause = tuple(int(gap_len[touching & (gaps.cause == c)].sum()) for c in range(3))
        out.append(
            RangeIdle(
                device=dev.device,
                window=span,
                busy=busy,
                idle=span - busy,
                idle_by_cause=(by_cause[0], by_cause[1], by_cause[2]),
                gaps=int(touching.sum()),
            )
        )
    return out
