"""Operator statistics: CPU slices grouped by (cat, name), with the GPU time they launched."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import Trace

from .classify import Groups
from .intervals import add_at, cumulative_in_place, sums_fit
from .links import Links
from .nesting import Nesting

# Positions of the nesting taken at a time for the sums over outermost instances.
OPERATOR_BLOCK = 1 << 20


@dataclass(frozen=True)
class OperatorTable:
    """Per (cat, name) group of CPU slices; all times int64 ns, one entry per group."""

    groups: Groups
    count: np.ndarray
    incl: np.ndarray  # Σ dur over instances that are outermost for their group
    excl: np.ndarray  # Σ self time
    gpu_self: np.ndarray  # Σ dur of GPU work launched by runtime calls that are direct children
    gpu_total: np.ndarray  # Σ dur of GPU work launched anywhere below outermost instances

    def __len__(self) -> int:
        return len(self.count)


def gpu_launched_per_position(
    nesting: Nesting, links: Links, trace: Trace, fits: bool = True, prefixed: bool = False
) -> np.ndarray:
    """Σ dur of the GPU activities linked to each CPU slice (by position in the nesting order).

    int64, or Python integers unless `fits` (see intervals.sums_fit). `prefixed`: with a
    leading 0 (one longer), ready for `cumulative_in_place`."""
    launched = np.zeros(len(nesting.order) + prefixed, dtype=np.int64)
    linked = links.gpu_runtime >= 0
    runtime_pos = nesting.position[links.gpu_runtime[linked]]
    if prefixed:
        runtime_pos = runtime_pos.astype(np.int64) + 1
    return add_at(launched, runtime_pos, trace.dur[links.gpu_rows[linked]], fits)


def compute_operators(
    trace: Trace, nesting: Nesting, groups: Groups, links: Links
) -> OperatorTable:
    # Per-position temporaries are kept few and narrow: on a 1 GB trace each is millions
    # long, and this is where the summary's memory peaks. Only the launches' prefix sums span
    # the whole nesting (a subtree may cross blocks); the groups are gathered a block at a time.
    order = nesting.order
    index = groups.index
    n_groups = len(groups)

    # Every sum below adds each event's duration at most once: when all durations together fit
    # in int64 (any real trace), so does each sum; otherwise they are summed as Python ints.
    fits = sums_fit(trace.dur)
    launched = gpu_launched_per_position(nesting, links, trace, fits, prefixed=True)
    # gpu_self: the runtime call's parent is an instance of the group.
    # Only the slices that launched GPU work add to a sum (the others add zero): far fewer.
    with_parent = np.flatnonzero((nesting.parent_pos >= 0) & (launched[1:] != 0))
    gpu_self = add_at(
        np.zeros(n_groups, dtype=np.int64),
        index[order[nesting.parent_pos[with_parent]]],
        launched[1:][with_parent],
        fits,
    )
    del with_parent
    # gpu_total: strict descendants of outermost instances. Subtrees are contiguous ranges of
    # positions, and outermost instances of one group never nest, so each launch counts once.
    # The prefix sums are taken in the launches' own array (which has a leading zero for it).
    prefix = cumulative_in_place(launched, fits)
    del launched
    count = np.zeros(n_groups, dtype=np.int64)
    excl = np.zeros(n_groups, dtype=np.int64)
    incl = np.zeros(n_groups, dtype=np.int64)
    gpu_total = np.zeros(n_groups, dtype=np.int64)
    stop = nesting.subtree_stop
    for lo in range(0, max(len(order), 1), OPERATOR_BLOCK):  # once when empty: the dtypes
        group = index[order[lo : lo + OPERATOR_BLOCK]]  # int32
        count += np.bincount(group, minlength=n_groups)
        excl = add_at(excl, group, nesting.self_time[lo : lo + OPERATOR_BLOCK], fits)
        # incl and gpu_total over the block's outermost instances.
        outer = np.flatnonzero(nesting.outermost[lo : lo + OPERATOR_BLOCK])
        outer_group = group[outer]
        outer += lo
        incl = add_at(incl, outer_group, trace.dur[order[outer]], fits)
        below = prefix[stop[outer]] - prefix[outer + 1]
        gpu_total = add_at(gpu_total, outer_group, below, fits)
    del prefix
    return OperatorTable(
        groups=groups, count=count, incl=incl, excl=excl, gpu_self=gpu_self, gpu_total=gpu_total
    )


@dataclass(frozen=True)
class OperatorInstance:
    """One CPU slice, for drill-down."""

    row: int
    self_time: int
    children: np.ndarray  # rows
    launched: np.ndarray  # rows of GPU activities launched by the slice or anything below it
    input_shapes: str | None


def operator_instance(trace: Trace, nesting: Nesting, links: Links, row: int) -> OperatorInstance:
    pos = int(nesting.position[row])
    if pos < 0:
        raise ValueError(f"row {row} is not a CPU slice")
    # GPU work whose runtime call lies in the slice's subtree (a range of positions).
    linked = np.flatnonzero(links.gpu_runtime >= 0)
    runtime_pos = nesting.position[links.gpu_runtime[linked]]
    inside = (runtime_pos >= pos) & (runtime_pos < int(nesting.subtree_stop[pos]))
    shape = int(trace.shape[row])
    return OperatorInstance(
        row=row,
        self_time=int(nesting.self_time[pos]),
        children=nesting.children(row),
        launched=links.gpu_rows[linked[inside]],
        input_shapes=trace.strings[shape] if shape >= 0 else None,
    )
