"""Drill-down queries for one operator or kernel group: instances, child split, launched kernels,
input shapes, and operators grouped by (cat, name, input shape). Pure numpy on the analyses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import Trace

from .classify import Groups
from .kernels import KernelLaunchers, kernel_launchers  # noqa: F401 (re-exported)
from .links import Links
from .nesting import Nesting, compute_nesting


def longest_first(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """`rows` by duration descending, ties in file order."""
    rows = np.asarray(rows, dtype=np.int64)
    return rows[np.lexsort((rows, -trace.dur[rows]))]


def instances_of(trace: Trace, groups: Groups, group: int) -> np.ndarray:
    """Rows of a group's instances, longest first (ties in file order)."""
    return longest_first(trace, np.flatnonzero(groups.index == group))


def self_times(nesting: Nesting, rows: np.ndarray) -> np.ndarray:
    """Self time of each CPU slice in `rows` (int64 ns)."""
    return nesting.self_time[nesting.position[rows]]


def launched_per_position(trace: Trace, nesting: Nesting, links: Links) -> np.ndarray:
    """Σ dur of the GPU activities each CPU slice launched itself, per nesting position."""
    launched = np.zeros(len(nesting.order), dtype=np.int64)
    linked = links.gpu_runtime >= 0
    np.add.at(
        launched, nesting.position[links.gpu_runtime[linked]], trace.dur[links.gpu_rows[linked]]
    )
    return launched


def subtree_gpu(trace: Trace, nesting: Nesting, links: Links, rows: np.ndarray) -> np.ndarray:
    """Σ dur of the GPU work launched by each CPU slice in `rows` or anything below it."""
    prefix = np.concatenate(([0], np.cumsum(launched_per_position(trace, nesting, links))))
    pos = nesting.position[rows]
    return prefix[nesting.subtree_stop[pos]] - prefix[pos]


def outermost_positions(nesting: Nesting, groups: Groups, group: int) -> np.ndarray:
    """Nesting positions of the group's instances that are outermost for the group, ascending."""
    in_group = groups.index[nesting.order] == group
    return np.flatnonzero(in_group & nesting.outermost)


@dataclass(frozen=True)
class ChildSplit:
    """How the inclusive time of a group (its outermost instances) splits into self and children.

    `self_time + child_time.sum()` equals the inclusive time unless children of one instance
    overlap each other (the spec then clamps self time at 0)."""

    inclusive: int  # Σ dur of the outermost instances
    self_time: int  # Σ self of the outermost instances
    child_group: np.ndarray  # CPU group ids of the children, most time first
    child_count: np.ndarray
    child_time: np.ndarray  # Σ dur of the children of that group


def child_split(trace: Trace, nesting: Nesting, groups: Groups, group: int) -> ChildSplit:
    outer = outermost_positions(nesting, groups, group)
    n = len(nesting.order)
    is_outer = np.zeros(n, dtype=bool)
    is_outer[outer] = True
    parent = nesting.parent_pos
    children = np.flatnonzero((parent >= 0) & is_outer[np.maximum(parent, 0)])
    child_groups = groups.index[nesting.order[children]].astype(np.int64)
    child_dur = trace.dur[nesting.order[children]]
    ids, inverse, counts = np.unique(child_groups, return_inverse=True, return_counts=True)
    totals = np.zeros(len(ids), dtype=np.int64)
    np.add.at(totals, inverse.reshape(-1), child_dur)
    order = np.lexsort((ids, -totals))
    return ChildSplit(
        inclusive=int(trace.dur[nesting.order[outer]].sum()),
        self_time=int(nesting.self_time[outer].sum()),
        child_group=ids[order],
        child_count=counts[order].astype(np.int64),
        child_time=totals[order],
    )


@dataclass(frozen=True)
class LaunchedKernels:
    """GPU activities launched from inside a group's outermost instances, by kernel group."""

    kernel_group: np.ndarray  # GPU group ids, most time first
    count: np.ndarray
    total: np.ndarray
    rows: np.ndarray  # every launched GPU row, file order

    @property
    def total_time(self) -> int:
        return int(self.total.sum())


def kernels_launched(
    trace: Trace,
    nesting: Nesting,
    links: Links,
    groups: Groups,
    gpu_groups: Groups,
    group: int,
) -> LaunchedKernels:
    """Kernels, memcpys and memsets launched by a group's outermost instances or below them.

    Outermost instances never nest, so their subtrees are disjoint ranges of positions and each
    launch belongs to at most one of them. A runtime call's own launches count for its group."""
    outer = outermost_positions(nesting, groups, group)
    stop = nesting.subtree_stop[outer]
    linked = np.flatnonzero(links.gpu_runtime >= 0)
    runtime_pos = nesting.position[links.gpu_runtime[linked]]
    slot = np.searchsorted(outer, runtime_pos, side="right") - 1
    reach = np.where(slot >= 0, stop[np.maximum(slot, 0)] if len(stop) else 0, 0)
    inside = (slot >= 0) & (runtime_pos < reach)
    gpu_rows = np.sort(links.gpu_rows[linked[inside]])
    kernel_group = gpu_groups.index[gpu_rows].astype(np.int64)
    ids, inverse, counts = np.unique(kernel_group, return_inverse=True, return_counts=True)
    totals = np.zeros(len(ids), dtype=np.int64)
    np.add.at(totals, inverse.reshape(-1), trace.dur[gpu_rows])
    order = np.lexsort((ids, -totals))
    return LaunchedKernels(
        kernel_group=ids[order],
        count=counts[order].astype(np.int64),
        total=totals[order],
        rows=gpu_rows,
    )


@dataclass(frozen=True)
class ShapeSplit:
    """Input shapes recorded on a set of instances: string id (-1: none recorded), count, Σ dur."""

    shape: np.ndarray
    count: np.ndarray
    total: np.ndarray


def shape_split(trace: Trace, rows: np.ndarray) -> ShapeSplit:
    shapes = trace.shape[rows].astype(np.int64)
    ids, inverse, counts = np.unique(shapes, return_inverse=True, return_counts=True)
    totals = np.zeros(len(ids), dtype=np.int64)
    np.add.at(totals, inverse.reshape(-1), trace.dur[rows])
    order = np.lexsort((ids, -totals))
    return ShapeSplit(shape=ids[order], count=counts[order].astype(np.int64), total=totals[order])


@dataclass(frozen=True)
class ShapeGroups:
    """CPU slices grouped by (cat, name, input shape), with a nesting whose `outermost` is
    computed for these groups. `shape[g]` is a string id, -1 when no shape was recorded."""

    groups: Groups
    shape: np.ndarray
    nesting: Nesting


def group_by_shape(trace: Trace, cpu: np.ndarray, by_name: Groups) -> ShapeGroups:
    """Refine the (cat, name) groups of CPU slices by their `Input Dims`."""
    rows = np.flatnonzero(cpu)
    name_group = by_name.index[rows].astype(np.int64)
    shape = trace.shape[rows].astype(np.int64)
    key = name_group * (len(trace.strings) + 1) + (shape + 1)
    keys, inverse = np.unique(key, return_inverse=True)
    index = np.full(len(trace), -1, dtype=np.int32)
    index[rows] = inverse.reshape(-1).astype(np.int32)
    parent_group = keys // (len(trace.strings) + 1)
    groups = Groups(
        cat=by_name.cat[parent_group].astype(np.int32),
        name=by_name.name[parent_group].astype(np.int32),
        index=index,
    )
    nesting = compute_nesting(trace, cpu, index)
    return ShapeGroups(groups=groups, shape=(keys % (len(trace.strings) + 1)) - 1, nesting=nesting)
