"""Operator statistics: CPU slices grouped by (cat, name), with the GPU time they launched."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import Trace

from .classify import Groups
from .intervals import add_at, cumulative, sums_fit
from .links import Links
from .nesting import Nesting


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
    nesting: Nesting, links: Links, trace: Trace, fits: bool = True
) -> np.ndarray:
    """Σ dur of the GPU activities linked to each CPU slice (by position in the nesting order).

    int64, or Python integers unless `fits` (see intervals.sums_fit)."""
    launched = np.zeros(len(nesting.order), dtype=np.int64)
    linked = links.gpu_runtime >= 0
    runtime_pos = nesting.position[links.gpu_runtime[linked]]
    return add_at(launched, runtime_pos, trace.dur[links.gpu_rows[linked]], fits)


def compute_operators(
    trace: Trace, nesting: Nesting, groups: Groups, links: Links
) -> OperatorTable:
    # Per-position temporaries are kept few and narrow: on a 1 GB trace each is millions
    # long, and this is where the summary's memory peaks.
    order = nesting.order
    group = groups.index[order]  # int32
    n_groups = len(groups)

    # Every sum below adds each event's duration at most once: when all durations together fit
    # in int64 (any real trace), so does each sum; otherwise they are summed as Python ints.
    fits = sums_fit(trace.dur)
    count = np.bincount(group, minlength=n_groups).astype(np.int64)
    excl = add_at(np.zeros(n_groups, dtype=np.int64), group, nesting.self_time, fits)
    outer_pos = np.flatnonzero(nesting.outermost)
    incl = add_at(
        np.zeros(n_groups, dtype=np.int64), group[outer_pos], trace.dur[order[outer_pos]], fits
    )

    launched = gpu_launched_per_position(nesting, links, trace, fits)
    # gpu_self: the runtime call's parent is an instance of the group.
    with_parent = np.flatnonzero(nesting.parent_pos >= 0)
    gpu_self = add_at(
        np.zeros(n_groups, dtype=np.int64),
        group[nesting.parent_pos[with_parent]],
        launched[with_parent],
        fits,
    )
    del with_parent
    # gpu_total: strict descendants of outermost instances. Subtrees are contiguous ranges of
    # positions, and outermost instances of one group never nest, so each launch counts once.
    prefix = cumulative(launched, fits)
    del launched
    below = prefix[nesting.subtree_stop[outer_pos]] - prefix[outer_pos + 1]
    del prefix
    gpu_total = add_at(np.zeros(n_groups, dtype=np.int64), group[outer_pos], below, fits)
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
