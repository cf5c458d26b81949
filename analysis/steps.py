"""ProfilerStep#N windows and where each step's time went."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import KIND_KERNEL, Trace

from .intervals import Union
from .names import SCAN_LIMIT
from .nesting import Nesting

STEP_NAME = re.compile(r"ProfilerStep#[0-9]+")
DATALOADER_PREFIX = "enumerate(DataLoader)"
# Collective-communication kernels: NCCL on NVIDIA, RCCL on AMD.
COMM_NAME = re.compile(r"nccl|rccl", re.IGNORECASE)
# Collectives on the CPU side: backend annotations (`gloo:all_reduce`, `nccl:all_reduce`, ...),
# c10d operators (`c10d::allreduce_`) and `record_param_comms`.
COLLECTIVE_NAME = re.compile(
    r"(gloo|nccl|rccl|mpi|ucc|xccl|hccl|mtia):|c10d::|record_param_comms$", re.IGNORECASE
)


def names_matching(trace: Trace, test) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Boolean per string id: does the string pass `test` (on its first SCAN_LIMIT characters:
    a name of megabytes costs what a long one does)."""
    return np.fromiter(
        (bool(test(s if len(s) <= SCAN_LIMIT else s[:SCAN_LIMIT])) for s in trace.strings),
        dtype=bool,
        count=len(trace.strings),
    )


@dataclass(frozen=True)
class Steps:
    """One entry per step slice, in start order (ties: file order). Times int64 ns.

    The GPU columns split the step's wall time on the union of all devices' GPU activity, by
    priority: compute kernels first, then communication kernels not hidden under compute, then
    memcpy/memset not hidden under either, and the rest is idle; they add up to `dur`. The CPU
    columns are unions of CPU slices clipped to the step (they may overlap GPU time and each
    other). `cpu_busy` is the union of the CPU slices on the step's own thread inside it (the
    step slice left out), `uninstrumented` the rest of the step: time on that thread that no
    profiled operator covers.
    """

    rows: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    gpu_busy: np.ndarray  # union of all GPU activity inside the step (the spec's gpu_busy_us)
    dataloader: np.ndarray  # union of `enumerate(DataLoader)...` CPU slices inside the step
    compute: np.ndarray  # non-communication kernels
    comm: np.ndarray  # communication kernels not overlapped by compute
    comm_total: np.ndarray  # communication kernels, overlapped or not
    memory: np.ndarray  # memcpy / memset not overlapped by kernels
    idle: np.ndarray  # no GPU activity at all
    runtime: np.ndarray  # union of runtime calls (kernel launches, syncs...) inside the step
    cpu_busy: np.ndarray  # union of the other CPU slices on the step's thread inside the step
    uninstrumented: np.ndarray  # dur - cpu_busy
    collective: np.ndarray  # union of CPU-side collectives (COLLECTIVE_NAME), any thread

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur


def step_rows(trace: Trace, cpu: np.ndarray) -> np.ndarray:
    """Rows of the CPU slices named ProfilerStep#<digits>, by start then file order."""
    is_step = names_matching(trace, STEP_NAME.fullmatch)
    rows = np.flatnonzero(cpu & is_step[trace.name])
    return rows[np.argsort(trace.start[rows], kind="stable")]


def _union(trace: Trace, mask: np.ndarray) -> Union:
    rows = np.flatnonzero(mask)
    start = trace.start[rows]
    end = trace.dur[rows].astype(np.int64, copy=False)  # a new array: written below
    del rows
    end += start
    return Union.of(start, end)


def _lane_union(trace: Trace, nesting: Nesting, lane: int, mask: np.ndarray) -> Union:
    """`_union` of the lane's CPU slices that `mask` keeps, taken in the nesting's order: by
    start already, so the union needs no sort and no copies (the peak of memory at 4 GB)."""
    lo, hi = nesting.lane_range(lane)
    rows = nesting.order[lo:hi]
    rows = rows[mask[rows]]
    start = trace.start[rows]
    end = trace.dur[rows].astype(np.int64, copy=False)  # a new array: written below
    del rows
    end += start
    return Union.of(start, end, writable=True)


def compute_steps(
    trace: Trace,
    cpu: np.ndarray,
    gpu: np.ndarray,
    kind: np.ndarray,
    runtime: np.ndarray,
    nesting: Nesting | None = None,
) -> Steps:
    """The steps' breakdown. `nesting`, the nesting of the `cpu` slices when there already,
    only saves memory and time: the result is the same."""
    rows = step_rows(trace, cpu)
    start = trace.start[rows]
    end = start + trace.dur[rows]

    def clip(union: Union) -> np.ndarray:
        return union.covered(start, end) if len(rows) else np.zeros(0, np.int64)

    loader_name = names_matching(trace, lambda s: s.startswith(DATALOADER_PREFIX))
    is_comm_name = names_matching(trace, COMM_NAME.search)
    kernel = gpu & (kind == KIND_KERNEL)
    comm_kernel = kernel & is_comm_name[trace.name]
    compute_union = _union(trace, kernel & ~comm_kernel)
    comm_union = _union(trace, comm_kernel)
    kernels_union = compute_union.merge(comm_union)
    all_union = _union(trace, gpu)

    compute = clip(compute_union)
    with_comm = clip(kernels_union)
    busy = clip(all_union)
    dur = end - start
    # Per thread holding steps: the union of its other CPU slices, clipped to its steps.
    cpu_busy = np.zeros(len(rows), dtype=np.int64)
    step_lane = trace.lane[rows]
    others = cpu.copy()
    others[rows] = False
    for lane in np.unique(step_lane).tolist():
        mine = np.flatnonzero(step_lane == lane)
        if nesting is None:
            on_lane = _union(trace, others & (trace.lane == lane))
        else:
            on_lane = _lane_union(trace, nesting, lane, others)
        cpu_busy[mine] = on_lane.covered(start[mine], end[mine])
    is_collective = names_matching(trace, COLLECTIVE_NAME.match)
    return Steps(
        rows=rows,
        start=start,
        dur=dur,
        gpu_busy=busy,
        dataloader=clip(_union(trace, cpu & loader_name[trace.name])),
        compute=compute,
        comm=with_comm - compute,
        comm_total=clip(comm_union),
        memory=busy - with_comm,
        idle=dur - busy,
        runtime=clip(_union(trace, runtime)),
        cpu_busy=cpu_busy,
        uninstrumented=dur - cpu_busy,
        collective=clip(_union(trace, cpu & is_collective[trace.name])),
    )
