"""Where the CPU waits for the GPU: blocking runtime calls, the operators that issue them, the
time blocked per step and per call site, and the GPU idle gap that follows each wait.

A *blocking call* is a runtime call (CPU slice of a runtime category) whose name is one of the
CUDA/HIP synchronisation calls, a synchronous (non-`Async`) memcpy/memset, a device memory free
(`cudaFree`, `hipFree`, ...: they synchronise the device), a device memory allocation
(`cudaMalloc`, `hipMalloc`, ...) during which the GPU went idle (it waited for the device), or an
`...Async` memcpy whose copy on the GPU reads or writes pageable host memory (the runtime stages
it through a bounce buffer and returns only when the copy is done). Its blocked time is its
duration on the CPU. Its *cause* is the operator that asked for the result on the host: the
outermost of the run of known host-syncing operators (`aten::item`, `aten::_local_scalar_dense`,
`aten::to`/`_to_copy`/`copy_`, `aten::nonzero`, ...) directly above the call; none for an
explicit `torch.cuda.synchronize()`. Its *call site* is the innermost Python source frame above
the call that is not inside torch (else the innermost source frame, else the innermost Python
frame) followed by the last four slices between it and the call; without Python frames, the
innermost four slices above the call. `ProfilerStep#N` is left out so that sites compare across
steps, and object addresses are cut from builtin frame names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from kinetoscope.parser.model import KIND_MEMCPY, Trace

from .classify import RowClasses
from .idle import Gaps
from .intervals import Union, ids_in_use, previous_at_least
from .links import Links
from .nesting import Nesting
from .steps import STEP_NAME, names_matching, step_rows
from .units import us as _us

# What kind of wait a blocking call is; index into KINDS.
DEVICE_SYNC, STREAM_SYNC, EVENT_SYNC, STREAM_WAIT, MEMCPY, MEMSET, FREE, MALLOC, PAGEABLE = range(9)
KINDS = (
    "device_sync",
    "stream_sync",
    "event_sync",
    "stream_wait",
    "memcpy",
    "memset",
    "free",
    "malloc",
    "pageable_memcpy",
)
KIND_TEXT = (
    "device synchronize",
    "stream synchronize",
    "event synchronize",
    "stream waits on event",
    "synchronous memcpy",
    "synchronous memset",
    "device memory free (synchronises the device)",
    "device memory allocation (the GPU went idle during it)",
    "async memcpy of pageable host memory (blocks the host)",
)
# A GPU memcpy whose name says one side is pageable host memory (`Memcpy HtoD (Pageable ->
# Device)`, `Memcpy DtoH (Device -> Pageable)`).
PAGEABLE_COPY = re.compile(r"pageable", re.IGNORECASE)

_BLOCKING = (
    (DEVICE_SYNC, re.compile(r"(cuda|hip)DeviceSynchronize|cuCtxSynchronize")),
    (STREAM_SYNC, re.compile(r"(cuda|hip)StreamSynchronize|cuStreamSynchronize")),
    (EVENT_SYNC, re.compile(r"(cuda|hip)EventSynchronize|cuEventSynchronize")),
    (STREAM_WAIT, re.compile(r"(cuda|hip)StreamWaitEvent|cuStreamWaitEvent")),
    # cudaMemcpy, cudaMemcpy2D, cudaMemcpyPeer, hipMemcpyWithStream, cuMemcpyDtoH...: any
    # memcpy entry point that is not an ...Async one returns only when the copy is done.
    (MEMCPY, re.compile(r"(cuda|hip|cu)Memcpy(?!.*Async)\w*")),
    (MEMSET, re.compile(r"(cuda|hip|cu)Memset(?!.*Async)\w*")),
    # cudaFree/hipFree wait for the whole device before they release memory (the stream-ordered
    # cudaFreeAsync does not); so do cudaFreeHost, cudaFreeArray and the driver's cuMemFree.
    (FREE, re.compile(r"(cuda|hip)Free(?!.*Async)\w*|hipHostFree|cuMemFree(?!.*Async)\w*")),
    # Allocations may synchronise (the driver can wait for the device to reclaim memory): they
    # are kept as blocking calls only when the GPU went idle while they ran (see compute_sync).
    (
        MALLOC,
        re.compile(
            r"(cuda|hip)Malloc(?!.*Async)\w*|hipHostMalloc|hipExtMallocWithFlags"
            r"|cuMemAlloc(?!.*Async)\w*"
        ),
    ),
)

# Operators that need a GPU result on the host and so wait for the GPU.
CAUSE_OPERATORS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::equal",
        "aten::to",
        "aten::_to_copy",
        "aten::copy_",
        "aten::cpu",
        "aten::tolist",
        "aten::nonzero",
        "aten::nonzero_static",
        "aten::masked_select",
        "aten::unique",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::repeat_interleave",
    }
)
# Python frames that mean "the tensor is being printed or formatted".
PRINTING_FRAME = re.compile(r"torch/_tensor_str\.py|_tensor\.py\(\d+\): __(repr|format|str)__")
PYTHON_CATEGORY = "python_function"
SOURCE_FRAME = re.compile(r"\.py\(\d+\): ")
OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
TORCH_FRAME = re.compile(r"(.*/)?(site|dist)-packages/torch/|torch/")
SITE_DEPTH = 4


def short_frame(name: str) -> str:
    """`path/to/model.py(12): fn` -> `model.py(12): fn`, for narrow columns; other names as is."""
    head, sep, tail = name.partition(".py(")
    if sep and "/" in head:
        return head.rsplit("/", 1)[1] + sep + tail
    return name


def blocking_kind_of_name(name: str) -> int:
    """KINDS index of a runtime call name, or -1 when the call does not block the host."""
    for kind, pattern in _BLOCKING:
        if pattern.fullmatch(name):
            return kind
    return -1


def blocking_kinds(trace: Trace, runtime: np.ndarray) -> np.ndarray:
    """int8 per row: the KINDS index of a blocking runtime call, else -1. Only the names that
    runtime calls use are tested (a trace can hold hundreds of thousands of other names)."""
    kinds = np.full(len(trace), -1, dtype=np.int8)
    rows = np.flatnonzero(runtime)
    if not len(rows):
        return kinds
    used, inverse = np.unique(trace.name[rows], return_inverse=True)
    by_name = np.array([blocking_kind_of_name(trace.strings[int(i)]) for i in used], np.int8)
    kinds[rows] = by_name[inverse.reshape(-1)]
    return kinds


def blocking_rows(trace: Trace, runtime: np.ndarray) -> np.ndarray:
    """Boolean per row: a runtime call that blocks the host by its name alone (the viewer marks
    these; allocations, which block only sometimes, are not marked)."""
    kinds = blocking_kinds(trace, runtime)
    return (kinds >= 0) & (kinds != MALLOC)


@dataclass(frozen=True)
class SyncCalls:
    """One entry per blocking call, by start (ties: file order). Times int64 ns."""

    rows: np.ndarray  # the runtime call
    dur: np.ndarray  # int64 ns blocked (the call's duration)
    kind: np.ndarray  # int8 index into KINDS
    cause: np.ndarray  # row of the causing operator, -1 when none (an explicit sync)
    printing: np.ndarray  # bool: a tensor was being printed/formatted
    site: np.ndarray  # int64 index into `sites`
    step: np.ndarray  # int64 index into `step_rows`, -1 outside steps
    gpu_sync: np.ndarray  # row of the GPU-side `cuda_sync` record with its correlation, -1
    gap: np.ndarray  # index into the idle gaps of the gap holding the call's end, -1
    idle_after: np.ndarray  # ns the GPU stayed idle after the call returned (0: no gap)
    idle_during: np.ndarray  # ns the GPU was idle while the call ran (the most idle device)
    idle: np.ndarray  # ns of GPU idle the call caused: idle_during + idle_after, the latter
    # cut at the start of the next blocking call (which is credited with the rest)
    step_rows: np.ndarray  # the step slices, by start
    step_blocked: np.ndarray  # per step: length of the union of blocking calls inside it
    sites: list[tuple[str, ...]]  # call site names, outermost first
    unlinked_gpu_syncs: np.ndarray  # rows of cuda_sync records no runtime call carries

    def __len__(self) -> int:
        return len(self.rows)

    def worst(self) -> np.ndarray:
        """Positions by blocked time, longest first (ties: earlier first)."""
        return np.argsort(-self.dur, kind="stable")


@dataclass(frozen=True)
class SyncSite:
    """Blocking calls grouped by (call name, cause operator, call site)."""

    call: str
    cause: str  # the cause operator's name, `print(tensor)`, or "" for an explicit sync
    site: tuple[str, ...]
    calls: np.ndarray  # positions into SyncCalls, by start
    count: int
    total: int  # ns blocked
    max: int
    idle_after: int  # Σ ns the GPU stayed idle after these calls returned
    idle: int  # Σ ns of GPU idle these calls caused (SyncCalls.idle)
    worst: int  # position (into SyncCalls) of the longest call


def _site_of(trace: Trace, chain: list[int], python: np.ndarray) -> tuple[str, ...]:
    rows = [r for r in chain if not STEP_NAME.fullmatch(trace.name_of(r))]
    frames = [i for i, r in enumerate(rows) if python[trace.cat[r]]]
    # A source frame (`file.py(12): fn`) says more than a builtin (`<built-in method to ...>`),
    # and the user's own code more than torch's.
    source = [i for i in frames if SOURCE_FRAME.search(trace.name_of(rows[i]))]
    user = [i for i in source if not TORCH_FRAME.match(trace.name_of(rows[i]))]
    best = user or source or frames
    if best:
        frame = best[-1]
        picked = [rows[frame], *rows[frame + 1 :][-SITE_DEPTH:]]
    else:
        picked = rows[-SITE_DEPTH:]
    # Builtin frames name the object's address, which would split one site into many.
    return tuple(OBJECT_ADDRESS.sub("", trace.name_of(r)) for r in picked)


def _causes_and_sites(
    trace: Trace, nesting: Nesting, rows: np.ndarray, python: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[tuple[str, ...], int]]:
    """Per call: its cause (a row, -1), whether it is a print, and its site (an index into the
    returned sites, numbered by first appearance in call order).

    All three depend on the call's ancestors alone, and on nothing of them but their names and
    categories (the cause is the ancestor so many levels up). Calls are grouped by that chain:
    level by level, from the parent up, each chain's (name, category) is numbered together with
    the number of the chain below it (exact, no hashing), so the Python that reads names runs
    once per distinct chain (a trace that repeats one loop has a handful), not once per call.
    """
    site_index: dict[tuple[str, ...], int] = {}
    parents = nesting.parent[rows].astype(np.int64)
    distinct, first_call, of_call = np.unique(parents, return_index=True, return_inverse=True)
    of_call = of_call.reshape(-1)
    # Each distinct parent's ancestors, level by level from the parent up (-1 above the root).
    parent_of = nesting.parent
    levels: list[np.ndarray] = []
    at = distinct.copy()
    while len(at) and (at >= 0).any():
        levels.append(at)
        at = np.where(at >= 0, parent_of[np.maximum(at, 0)].astype(np.int64), -1)
    names = [np.where(a >= 0, trace.name[np.maximum(a, 0)].astype(np.int64), -1) for a in levels]
    names = _steps_as_one(trace, names)
    # The chain number of each distinct parent, built from the parent up to the root.
    chain = np.zeros(len(distinct), dtype=np.int64)
    for a, name in zip(levels, names):
        cat = np.where(a >= 0, trace.cat[np.maximum(a, 0)].astype(np.int64), -1)
        _, chain = np.unique(np.stack((chain, name, cat), axis=1), axis=0, return_inverse=True)
        chain = chain.reshape(-1).astype(np.int64)
    groups, first_parent, of_parent = np.unique(chain, return_index=True, return_inverse=True)
    of_parent = of_parent.reshape(-1)
    # Each chain is read once, from one of its parents, in the order of its first call.
    first_of_group = np.full(len(groups), len(rows), dtype=np.int64)
    np.minimum.at(first_of_group, of_parent, first_call)
    up = np.full(len(groups), -1, dtype=np.int64)  # levels above the parent to the cause
    printing_of = np.zeros(len(groups), dtype=bool)
    site_of = np.zeros(len(groups), dtype=np.int64)
    for g in np.argsort(first_of_group, kind="stable").tolist():
        parent = int(distinct[first_parent[g]])
        ancestry = [*nesting.ancestors(parent), parent] if parent >= 0 else []
        cause = _cause_of(trace, ancestry)
        if cause >= 0:
            up[g] = len(ancestry) - 1 - ancestry.index(cause)
        printing_of[g] = any(PRINTING_FRAME.search(trace.name_of(r)) for r in ancestry)
        site_of[g] = site_index.setdefault(_site_of(trace, ancestry, python), len(site_index))
    # The cause of each distinct parent: its ancestor `up` levels above it.
    levels = up[of_parent]
    cause_of = np.full(len(distinct), -1, dtype=np.int64)
    at = distinct.copy()
    for level in range(int(levels.max()) + 1 if len(levels) else 0):
        here = levels == level
        cause_of[here] = at[here]
        at = np.where(at >= 0, parent_of[np.maximum(at, 0)].astype(np.int64), -1)
    per_call = of_parent[of_call] if len(rows) else np.zeros(0, dtype=np.int64)
    return (
        cause_of[of_call] if len(rows) else np.zeros(0, dtype=np.int64),
        printing_of[per_call],
        site_of[per_call],
        site_index,
    )


def _steps_as_one(trace: Trace, names: list[np.ndarray]) -> list[np.ndarray]:
    """The name ids of the chains' levels, with every step's name (`ProfilerStep#N`: the site
    skips them, and no step name is a cause or a print) as one: the steps of a loop then share
    their chains. A name is read once however many chains hold it."""
    if not names:
        return names
    distinct = np.unique(np.concatenate(names))
    distinct = distinct[distinct >= 0]
    strings = trace.strings
    held = [strings[i] for i in distinct.tolist()]
    step = np.array(
        [
            bool(STEP_NAME.fullmatch(name))
            and not PRINTING_FRAME.search(name)
            and name not in CAUSE_OPERATORS
            for name in held
        ],
        dtype=bool,
    )
    steps = distinct[step]
    if not len(steps):
        return names
    return [np.where(np.isin(name, steps), -2, name) for name in names]


def _runtime_for_corrs(links: Links, corrs: np.ndarray) -> np.ndarray:
    """`links.runtime_for_corr` of each correlation, in one search."""
    values = links.corr_values
    slot = np.searchsorted(values, corrs)
    runtime = np.full(len(corrs), -1, dtype=np.int64)
    if len(values):
        clipped = np.minimum(slot, len(values) - 1)
        found = (slot < len(values)) & (values[clipped] == corrs)
        runtime[found] = links.corr_runtime[clipped[found]]
    return runtime


def _cause_of(trace: Trace, chain: list[int]) -> int:
    """The outermost of the run of host-syncing operators directly above the call, or -1."""
    cause = -1
    for row in reversed(chain):
        if trace.name_of(row) in CAUSE_OPERATORS:
            cause = row
        else:
            break
    return cause


def _gap_after(gaps: Gaps, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per time: the gap (any device) holding it, start <= t < end, the one lasting longest
    after t when several devices are idle; and how long it lasts after t."""
    best = np.full(len(ends), -1, dtype=np.int64)
    after = np.zeros(len(ends), dtype=np.int64)
    for device in np.unique(gaps.device).tolist():
        mine = np.flatnonzero(gaps.device == device)  # by start
        k = np.searchsorted(gaps.start[mine], ends, side="right") - 1
        ok = k >= 0
        k_safe = np.maximum(k, 0)
        inside = ok & (gaps.end[mine][k_safe] > ends)
        left = np.where(inside, gaps.end[mine][k_safe] - ends, 0)
        better = inside & (left > after)
        best[better] = mine[k_safe[better]]
        after[better] = left[better]
    return best, after


def device_idle(gaps: Gaps) -> list[tuple[int, Union]]:
    """Per device with gaps: (device, the union of its idle gaps)."""
    out = []
    for device in np.unique(gaps.device).tolist():
        mine = np.flatnonzero(gaps.device == device)  # by start, disjoint on one device
        out.append((int(device), Union(gaps.start[mine], gaps.end[mine])))
    return out


def idle_within(gaps: Gaps, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per range [lo, hi): GPU idle time inside it on the device that was idle longest there."""
    best = np.zeros(len(lo), dtype=np.int64)
    for _device, idle in device_idle(gaps):
        np.maximum(best, idle.covered(lo, hi), out=best)
    return best


def _category_mask(trace: Trace, lowered: str) -> np.ndarray:
    """Boolean per string id: a category used by some row that is `lowered` in lower case."""
    mask = np.zeros(len(trace.strings), dtype=bool)
    for cat in ids_in_use(trace.cat, len(trace.strings)).tolist():
        mask[cat] = trace.strings[cat].lower() == lowered
    return mask


def compute_sync(
    trace: Trace, classes: RowClasses, nesting: Nesting, links: Links, gaps: Gaps
) -> SyncCalls:
    kinds = blocking_kinds(trace, classes.runtime)
    # Async memcpys whose GPU copy touches pageable host memory block like synchronous ones.
    copies = np.flatnonzero(classes.kind[links.gpu_rows] == KIND_MEMCPY)
    launched_by = links.gpu_runtime[copies]
    copies, launched_by = copies[launched_by >= 0], launched_by[launched_by >= 0]
    if len(copies):
        pageable = names_matching(trace, PAGEABLE_COPY.search)
        hit = pageable[trace.name[links.gpu_rows[copies]]] & (kinds[launched_by] < 0)
        kinds[launched_by[hit]] = PAGEABLE
    rows = np.flatnonzero(kinds >= 0).astype(np.int64)
    # An allocation counts only when the GPU went idle while it ran: a gap began inside it.
    mallocs = rows[kinds[rows] == MALLOC]
    if len(mallocs):
        m_start = trace.start[mallocs]
        m_end = m_start + trace.dur[mallocs]
        order = np.argsort(gaps.start, kind="stable")
        g_start = gaps.start[order]
        first = np.searchsorted(g_start, m_start, side="right")
        last = np.searchsorted(g_start, m_end, side="left")
        blocked = last > first
        rows = np.concatenate((rows[kinds[rows] != MALLOC], mallocs[blocked]))
    rows = rows[np.lexsort((rows, trace.start[rows]))]
    kind = kinds[rows]
    start = trace.start[rows]
    end = start + trace.dur[rows]
    python = _category_mask(trace, PYTHON_CATEGORY)

    cause, printing, site, site_index = _causes_and_sites(trace, nesting, rows, python)

    # The GPU-side record of a sync carries the runtime call's correlation.
    sync_cat = _category_mask(trace, "cuda_sync")
    gpu_sync_rows = np.flatnonzero(sync_cat[trace.cat] & (trace.ph == ord("X")))
    linked_runtime = _runtime_for_corrs(links, trace.corr[gpu_sync_rows])
    gpu_sync = np.full(len(rows), -1, dtype=np.int64)
    # File order (rows are): the first cuda_sync record carrying a correlation is the one kept.
    by_row = np.argsort(rows, kind="stable")
    at = np.searchsorted(rows[by_row], linked_runtime)
    at_clipped = np.minimum(at, max(len(rows) - 1, 0))
    hit = (linked_runtime >= 0) & (at < len(rows))
    if len(rows):
        hit &= rows[by_row][at_clipped] == linked_runtime
    position, first_record = np.unique(by_row[at_clipped[hit]], return_index=True)
    gpu_sync[position] = gpu_sync_rows[hit][first_record]
    unlinked = gpu_sync_rows[linked_runtime < 0]

    steps = step_rows(trace, classes.cpu)
    step_start = trace.start[steps]
    step_end = step_start + trace.dur[steps]
    step = latest_holding(step_start, step_end, start)
    blocked_union = Union.of(start, end)
    step_blocked = (
        blocked_union.covered(step_start, step_end) if len(steps) else np.zeros(0, np.int64)
    )

    gap, idle_after = _gap_after(gaps, end)
    idle_during = idle_within(gaps, start, end)
    # Idle after a call is its own until the next blocking call starts (a 10 µs stream wait
    # right after a long synchronous memcpy is credited only with what follows it).
    next_start = np.full(len(rows), np.iinfo(np.int64).max, dtype=np.int64)
    if len(rows) > 1:
        next_start[:-1] = start[1:]  # calls are by start
    own_after = np.minimum(idle_after, np.maximum(next_start - end, 0))
    return SyncCalls(
        rows=rows,
        dur=trace.dur[rows].astype(np.int64),
        kind=kind,
        cause=cause,
        printing=printing,
        site=site,
        step=step,
        gpu_sync=gpu_sync,
        gap=gap,
        idle_after=idle_after,
        idle_during=idle_during,
        idle=idle_during + own_after,
        step_rows=steps,
        step_blocked=np.asarray(step_blocked, dtype=np.int64),
        sites=list(site_index),
        unlinked_gpu_syncs=unlinked,
    )


def latest_holding(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per time, the last of the windows (sorted by start) with start <= t < end, or -1.

    The last window starting by t holds it unless it has ended; then only an earlier one that
    ends later can (nested steps, rare): each unresolved time climbs to the nearest earlier
    window ending no earlier, all of them together, one numpy pass per climb."""
    times = np.asarray(times, dtype=np.int64)
    found = np.searchsorted(starts, times, side="right") - 1
    if not len(starts):
        return found.astype(np.int64)
    longer = previous_at_least(np.asarray(ends, dtype=np.int64), np.zeros(len(ends), np.int64))
    climbing = np.flatnonzero(found >= 0)
    while len(climbing):
        ended = ends[found[climbing]] <= times[climbing]
        climbing = climbing[ended]
        found[climbing] = longer[found[climbing]]
        climbing = climbing[found[climbing] >= 0]
    return found.astype(np.int64)


def cause_label(trace: Trace, calls: SyncCalls, i: int) -> str:
    """The cause of call i in words: an operator name, `print(tensor)`, or ``""`` (explicit)."""
    if calls.printing[i]:
        return "print(tensor)"
    cause = int(calls.cause[i])
    return trace.name_of(cause) if cause >= 0 else ""


def group_sites(trace: Trace, calls: SyncCalls) -> list[SyncSite]:
    """Blocking calls grouped by (call name, cause, site); most time blocked first
    (ties: more calls, then the earlier first call)."""
    if not len(calls):
        return []
    # Keyed per distinct (call name, cause, site) as ids, then by their words (two ids of the
    # same words are one site): Python works per distinct key, not per call.
    cause = np.asarray(calls.cause, dtype=np.int64)
    cause_id = np.where(cause >= 0, trace.name[np.maximum(cause, 0)].astype(np.int64), -1)
    cause_id[np.asarray(calls.printing, dtype=bool)] = -2
    ids = np.stack(
        (trace.name[calls.rows].astype(np.int64), cause_id, np.asarray(calls.site, np.int64)),
        axis=1,
    )
    distinct, inverse = np.unique(ids, axis=0, return_inverse=True)
    buckets: dict[tuple[str, str, tuple[str, ...]], int] = {}
    bucket_of = np.empty(len(distinct), dtype=np.int64)
    for k, (name_id, cause_of, site_of) in enumerate(distinct.tolist()):
        label = (
            "print(tensor)" if cause_of == -2 else trace.strings[cause_of] if cause_of >= 0 else ""
        )
        key = (trace.strings[name_id], label, calls.sites[site_of])
        bucket_of[k] = buckets.setdefault(key, len(buckets))
    bucket = bucket_of[inverse.reshape(-1)]
    by_bucket = np.argsort(bucket, kind="stable")  # each bucket's calls in order
    bounds = np.searchsorted(bucket[by_bucket], np.arange(len(buckets) + 1))
    dur = calls.dur
    out = []
    for (call, cause, site), b in buckets.items():
        positions = by_bucket[bounds[b] : bounds[b + 1]].astype(np.int64)
        durations = dur[positions]
        out.append(
            SyncSite(
                call=call,
                cause=cause,
                site=site,
                calls=positions,
                count=len(positions),
                total=int(durations.sum()),
                max=int(durations.max()),
                idle_after=int(calls.idle_after[positions].sum()),
                idle=int(calls.idle[positions].sum()),
                worst=int(positions[int(np.argmax(durations))]),
            )
        )
    out.sort(key=lambda s: (-s.total, -s.count, int(s.calls[0])))
    return out


# -- the summary's extra keys ------------------------------------------------------------------

TOP_SITES = 20


def sync_section(trace: Trace, calls: SyncCalls, limit: int = TOP_SITES) -> list[dict[str, Any]]:
    """The call sites that blocked the host longest."""
    out = []
    for entry in group_sites(trace, calls)[:limit]:
        worst_row = int(calls.rows[entry.worst])
        out.append(
            {
                "call": entry.call,
                "kind": KINDS[int(calls.kind[entry.worst])],
                "cause": entry.cause,
                "site": list(entry.site),
                "count": entry.count,
                "total_us": _us(entry.total),
                "max_us": _us(entry.max),
                "gpu_idle_after_us": _us(entry.idle_after),
                "gpu_idle_us": _us(entry.idle),
                "worst_start_us": _us(trace.start[worst_row]),
            }
        )
    return out


def step_sync_us(calls: SyncCalls) -> list[float]:
    """Time blocked per step (union of blocking calls clipped to the step), in step order."""
    return [_us(v) for v in calls.step_blocked.tolist()]
