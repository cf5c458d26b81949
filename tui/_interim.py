"""Minimal nesting, link and idle-gap computations the timeline needs.

TODO: switch to kinetoscope.analysis (nesting, links, gaps) once it lands; these follow the same
spec rules (summary-json.md) so the switch changes no numbers, only speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kinetoscope.parser.model import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_NOT_CPU,
    KIND_OTHER,
    KIND_RUNTIME,
    NO_VALUE,
    Trace,
)

KERNEL_WAIT_LIMIT_NS = 30_000


def nest(
    lane: np.ndarray, start: np.ndarray, end: np.ndarray, ordinal: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Parent position (-1 for none) and depth of each interval, with the spec's stack walk."""
    count = len(start)
    parent = np.full(count, -1, dtype=np.int64)
    depth = np.zeros(count, dtype=np.int32)
    if count == 0:
        return parent, depth
    order = np.lexsort((ordinal, -end, start, lane))
    lanes = lane[order].tolist()
    ends = end[order].tolist()
    order_list = order.tolist()
    parent_out = [-1] * count
    depth_out = [0] * count
    stack: list[int] = []  # positions in `order`
    current_lane = None
    for pos, row in enumerate(order_list):
        if lanes[pos] != current_lane:
            stack.clear()
            current_lane = lanes[pos]
        my_end = ends[pos]
        while stack and ends[stack[-1]] < my_end:
            stack.pop()
        if stack:
            top = stack[-1]
            parent_out[row] = order_list[top]
            depth_out[row] = len(stack)
        stack.append(pos)
    parent[:] = parent_out
    depth[:] = depth_out
    return parent, depth


@dataclass
class Nesting:
    """Parent row (-1 for none) and depth of every CPU slice; -1 depth for other rows."""

    parent: np.ndarray
    depth: np.ndarray


def cpu_nesting(trace: Trace, kind: np.ndarray) -> Nesting:
    rows = np.flatnonzero((kind == KIND_OTHER) | (kind == KIND_RUNTIME))
    parent = np.full(len(trace), -1, dtype=np.int64)
    depth = np.full(len(trace), -1, dtype=np.int32)
    local_parent, local_depth = nest(
        trace.lane[rows], trace.start[rows], trace.start[rows] + trace.dur[rows], trace.ordinal[rows]
    )
    has_parent = local_parent >= 0
    parent[rows[has_parent]] = rows[local_parent[has_parent]]
    depth[rows] = local_depth
    return Nesting(parent=parent, depth=depth)


@dataclass
class Links:
    """Correlation links: runtime row of each GPU activity and GPU rows of each runtime row."""

    gpu_corr_sorted: np.ndarray  # correlation of GPU activities, ascending
    gpu_rows_by_corr: np.ndarray  # their rows, in the same order (file order within a value)
    runtime_corr_sorted: np.ndarray  # correlation of the first runtime event per value
    runtime_row_by_corr: np.ndarray

    def kernels_of(self, corr: int) -> np.ndarray:
        lo = np.searchsorted(self.gpu_corr_sorted, corr, "left")
        hi = np.searchsorted(self.gpu_corr_sorted, corr, "right")
        return self.gpu_rows_by_corr[lo:hi]

    def runtime_of(self, corr: int) -> int:
        pos = int(np.searchsorted(self.runtime_corr_sorted, corr, "left"))
        if pos < len(self.runtime_corr_sorted) and self.runtime_corr_sorted[pos] == corr:
            return int(self.runtime_row_by_corr[pos])
        return -1


def links(trace: Trace, kind: np.ndarray) -> Links:
    has_corr = trace.corr != NO_VALUE
    gpu = np.flatnonzero(has_corr & ((kind == KIND_KERNEL) | (kind == KIND_MEMCPY) | (kind == KIND_MEMSET)))
    gpu = gpu[np.lexsort((trace.ordinal[gpu], trace.corr[gpu]))]
    runtime = np.flatnonzero(has_corr & (kind == KIND_RUNTIME))
    runtime = runtime[np.lexsort((trace.ordinal[runtime], trace.corr[runtime]))]
    runtime_corr = trace.corr[runtime]
    first = np.ones(len(runtime), dtype=bool)
    first[1:] = runtime_corr[1:] != runtime_corr[:-1]
    return Links(
        gpu_corr_sorted=trace.corr[gpu],
        gpu_rows_by_corr=gpu,
        runtime_corr_sorted=runtime_corr[first],
        runtime_row_by_corr=runtime[first],
    )


@dataclass
class Gaps:
    """GPU idle gaps of every device, ordered by start (then device)."""

    device: np.ndarray  # int64
    start: np.ndarray  # ns, trace time base
    end: np.ndarray
    next_row: np.ndarray  # row of the next GPU event
    runtime_row: np.ndarray  # runtime row linked to the next GPU event, -1 if none
    cause: list[str]

    def __len__(self) -> int:
        return len(self.start)


def gpu_gaps(trace: Trace, kind: np.ndarray, link: Links) -> Gaps:
    is_gpu = (kind == KIND_KERNEL) | (kind == KIND_MEMCPY) | (kind == KIND_MEMSET)
    rows = np.flatnonzero(is_gpu & (trace.dur > 0))
    devices, starts, ends, nexts = [], [], [], []
    for device in np.unique(trace.device[rows]):
        dev_rows = rows[trace.device[rows] == device]
        dev_rows = dev_rows[np.lexsort((trace.ordinal[dev_rows], trace.start[dev_rows]))]
        begin = trace.start[dev_rows]
        finish = np.maximum.accumulate(begin + trace.dur[dev_rows])
        hole = np.flatnonzero(begin[1:] > finish[:-1]) + 1
        devices.append(np.full(len(hole), device, dtype=np.int64))
        starts.append(finish[hole - 1])
        ends.append(begin[hole])
        nexts.append(dev_rows[hole])
    if not devices:
        empty = np.zeros(0, dtype=np.int64)
        return Gaps(empty, empty, empty, empty, empty, [])
    device = np.concatenate(devices)
    start = np.concatenate(starts)
    end = np.concatenate(ends)
    next_row = np.concatenate(nexts)
    order = np.lexsort((device, start))
    device, start, end, next_row = device[order], start[order], end[order], next_row[order]
    runtime_row = np.array(
        [link.runtime_of(int(c)) if c != NO_VALUE else -1 for c in trace.corr[next_row]],
        dtype=np.int64,
    )
    cause = []
    for gap_start, gap_end, r_row in zip(start.tolist(), end.tolist(), runtime_row.tolist()):
        if r_row >= 0 and int(trace.start[r_row]) > gap_start:
            cause.append("host_wait")
        elif gap_end - gap_start < KERNEL_WAIT_LIMIT_NS:
            cause.append("kernel_wait")
        else:
            cause.append("other")
    return Gaps(device, start, end, next_row, runtime_row, cause)


__all__ = ["KIND_NOT_CPU", "Gaps", "Links", "Nesting", "cpu_nesting", "gpu_gaps", "links", "nest"]
