"""Triage rules: named checks with documented thresholds that turn the analyses into findings.

Each finding names its rule, a severity, a sentence saying what was seen and what to try, and
evidence (a time range, a device, the rows that show it) the viewer can jump to. The thresholds
are the module constants below; docs/analysis.md explains each rule.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from kinetoscope.parser.model import NO_VALUE

from .finding import CRITICAL, INFO, SEVERITY_ORDER, WARNING, Finding
from .idle import HOST_WAIT, KERNEL_WAIT
from .intervals import Union, ids_in_use
from .memory import GPU_DEVICE_TYPES, device_properties
from .oddities import oddity_findings
from .steps import COMM_NAME, DATALOADER_PREFIX, names_matching
from .units import fmt_bytes, plural
from .units import fmt_ms as ms
from .units import fmt_percent as pct

if TYPE_CHECKING:
    from .session import TraceSession


# dataloader_bound: share of a step spent in `enumerate(DataLoader)` on the CPU.
DATALOADER_WARNING = 0.10
DATALOADER_CRITICAL = 0.30
# low_gpu_utilization: busy share of a device's window (windows under 1 ms are not judged).
UTILIZATION_WARNING = 0.50
UTILIZATION_CRITICAL = 0.20
MIN_WINDOW_NS = 1_000_000
# host_sync: GPU idle time caused by host-blocking calls as a share of the device's window
# (without GPU activity: their host time as a share of the profiled span).
SYNC_WARNING = 0.05
SYNC_CRITICAL = 0.20
MIN_SYNC_NS = 100_000
# pageable_memcpy: a warning from this much host time blocked in pageable copies, else info.
PAGEABLE_WARNING_NS = 1_000_000
# launch_bound: mostly short kernels, separated by many small gaps in which the GPU waited for
# the next launch (host_wait or kernel_wait gaps under LAUNCH_GAP_NS), as a share of the window.
SHORT_KERNEL_NS = 10_000
LAUNCH_MIN_SHORT_KERNELS = 50
LAUNCH_STEP_MIN_SHORT_KERNELS = 20
LAUNCH_SHORT_SHARE = 0.50
LAUNCH_GAP_NS = 100_000
LAUNCH_WAIT_WARNING = 0.10
LAUNCH_WAIT_CRITICAL = 0.30
# host_wait_idle: host_wait idle as a share of the window, and of all idle time.
HOST_WAIT_WARNING = 0.10
HOST_WAIT_CRITICAL = 0.30
HOST_WAIT_SHARE_OF_IDLE = 0.50
# waiting_for_work (traces without steps): GPU idle while no operator runs on the host, as a
# share of the window, with a stretch of at least WAITING_MIN_NS; the blocking call that ended
# at most WAITING_CALL_NEAR_NS before the stretch is named as what led into it.
WAITING_WARNING = 0.10
WAITING_CRITICAL = 0.30
WAITING_MIN_NS = 1_000_000
WAITING_CALL_NEAR_NS = 1_000_000
WAITING_IGNORED_CATEGORIES = frozenset({"python_function", "trace"})
# communication_heavy: communication kernels as a share of a step (or of the GPU window).
COMM_WARNING = 0.20
COMM_EXPOSED_CRITICAL = 0.20
# collective_wait (traces without GPU activity): CPU-side collectives as a share of a step.
COLLECTIVE_WARNING = 0.20
COLLECTIVE_CRITICAL = 0.50
# uninstrumented_step_time (traces without GPU activity): time on a step's thread that no
# profiled slice covers, as a share of the step.
UNINSTRUMENTED_WARNING = 0.30
# memory_near_capacity: peak reserved (else allocated) memory as a share of the device's memory.
MEMORY_WARNING = 0.90
MEMORY_CRITICAL = 0.97
# compile_in_window: compilation inside the profiled window, critical from this share of the
# profiled span.
COMPILE_CRITICAL = 0.20
# guard_overhead: self time of `TorchDynamo Cache Lookup` as a share of a step (of the profiled
# span without steps), from at least GUARD_MIN_NS.
GUARD_WARNING = 0.05
GUARD_MIN_NS = 100_000


def dataloader_bound(session: TraceSession) -> list[Finding]:
    steps = session.steps
    if len(steps) == 0:
        return []
    share = steps.dataloader / np.maximum(steps.dur, 1)
    slow = np.flatnonzero(share >= DATALOADER_WARNING)
    if len(slow) == 0:
        return []
    worst = int(slow[np.argmax(share[slow])])
    row = int(steps.rows[worst])
    severity = CRITICAL if share[worst] >= DATALOADER_CRITICAL else WARNING
    trace = session.trace
    loader = _loader_rows(session)
    iterators = {trace.name_of(int(r)) for r in loader[:10_000]}
    single = any(SINGLE_PROCESS_LOADER in name for name in iterators)
    multi = any(MULTI_PROCESS_LOADER in name for name in iterators)
    if single and not multi:
        advice = (
            f"The DataLoader has no worker processes (num_workers=0: the trace shows "
            f"{SINGLE_PROCESS_LOADER}), so loading runs in the training loop: set num_workers "
            "to a few processes (start with the CPU cores per GPU), with pin_memory=True and "
            "persistent_workers=True, or move decoding/augmentation off the training process."
        )
        where = "num_workers=0"
    elif multi and not single:
        advice = (
            f"The DataLoader already uses worker processes ({MULTI_PROCESS_LOADER}) and they "
            "do not keep up: more workers (num_workers), a larger prefetch_factor, "
            "pin_memory=True with persistent_workers, or cheaper decoding/augmentation."
        )
        where = "its workers do not keep up"
    else:
        advice = (
            "Try more DataLoader workers (num_workers), pin_memory=True with "
            "persistent_workers, prefetching, or moving decoding/augmentation off the "
            "training process."
        )
        where = ""
    message = (
        f"{len(slow):,} of {len(steps):,} steps spend at least {pct(DATALOADER_WARNING)} of their "
        f"time waiting for the DataLoader (worst: {trace.name_of(row)}, "
        f"{ms(steps.dataloader[worst])}, {pct(share[worst])}). {advice}"
    )
    device, claim = _claim_of_rows(session, loader)
    title = (
        f"Steps wait for the DataLoader{f' ({where})' if where else ''}: worst "
        f"{trace.name_of(row)}, {pct(share[worst])} of it"
    )
    return [
        Finding(
            "dataloader_bound",
            severity,
            message,
            int(steps.start[worst]),
            int(steps.dur[worst]),
            device=None,
            rows=(row,),
            stake=int(claim.total) if claim is not None else int(steps.dataloader.sum()),
            title=title,
            claim=None if device is None or claim is None else (device, claim),
        )
    ]


SINGLE_PROCESS_LOADER = "_SingleProcessDataLoaderIter"
MULTI_PROCESS_LOADER = "_MultiProcessingDataLoaderIter"


def _loader_rows(session: TraceSession) -> np.ndarray:
    """Rows of the `enumerate(DataLoader)...` CPU slices."""
    trace = session.trace
    loader_name = names_matching(trace, lambda s: s.startswith(DATALOADER_PREFIX))
    return np.flatnonzero(session.classes.cpu & loader_name[trace.name])


def _claim_of_rows(session: TraceSession, rows: np.ndarray) -> tuple[int | None, Union | None]:
    """The GPU idle time the host time of `rows` covers, on the device where it covers most:
    (device, the idle covered), or (None, None) without GPU idle there."""
    from .sync import device_idle

    trace = session.trace
    if len(rows) == 0:
        return None, None
    busy = Union.of(trace.start[rows], trace.start[rows] + trace.dur[rows])
    best: tuple[int | None, Union | None] = (None, None)
    for dev, idle in device_idle(session.idle.gaps):
        claim = busy.intersect(idle)
        if claim.total and (best[1] is None or claim.total > best[1].total):
            best = (dev, claim)
    return best


def low_gpu_utilization(session: TraceSession) -> list[Finding]:
    out = []
    for dev in session.idle.devices:
        window = dev.window
        if window is None or window[1] - window[0] < MIN_WINDOW_NS:
            continue
        length = window[1] - window[0]
        share = dev.busy_ns / length
        if share >= UTILIZATION_WARNING:
            continue
        severity = CRITICAL if share < UTILIZATION_CRITICAL else WARNING
        causes = dict(zip(("host_wait", "kernel_wait", "other"), dev.idle_by_cause))
        main_cause = max(causes, key=lambda c: causes[c])
        message = (
            f"GPU {dev.device} is busy only {pct(share)} of its {ms(length)} window; most idle "
            f"time is {main_cause} ({ms(causes[main_cause])}).{_idle_mostly_in(session, dev.device)} "
            "Open the idle-gap list to see what the CPU was doing in the longest gaps, and see "
            "the host_wait, launch_bound and dataloader_bound findings for the likely fix."
        )
        mine = np.flatnonzero(session.idle.gaps.device == dev.device)
        out.append(
            Finding(
                "low_gpu_utilization",
                severity,
                message,
                window[0],
                length,
                device=dev.device,
                stake=int(dev.idle_ns),
                title=f"GPU {dev.device} is busy only {pct(share)} of its {ms(length)} window",
                claim=(
                    dev.device,
                    Union(session.idle.gaps.start[mine], session.idle.gaps.end[mine]),
                ),
            )
        )
    return out


def _idle_mostly_in(session: TraceSession, device: int) -> str:
    """` While it idled, the CPU was mostly in X (…)`: the CPU operator that ran during most of
    the device's idle time (all its gaps, however short), or "" when none is known."""
    from .idle import compute_idle_by_cpu

    gaps = session.idle.gaps
    table = compute_idle_by_cpu(
        session.trace, session.nesting, session.links, gaps, gaps.device == device
    )
    if not len(table):
        return ""
    count = int(table.gaps[0])
    return (
        f" While it idled, the CPU was mostly in {session.trace.strings[int(table.name[0])]} "
        f"({ms(table.idle[0])} in {count:,} gap{'s' if count != 1 else ''})."
    )


def host_sync(session: TraceSession) -> list[Finding]:
    """Host-blocking waits, as the sync analysis finds them (so the finding and the sync view
    agree), weighed by the GPU idle time they caused (idle while a call ran, and after it
    returned until the GPU got work again or the next blocking call began), not by the host
    time they took: a long synchronize while the GPU stays busy costs nothing.
    `cudaStreamWaitEvent` is left out since it makes a GPU stream wait, not the host."""
    from .sync import FREE, MEMCPY, PAGEABLE, STREAM_WAIT, device_idle, group_sites

    trace = session.trace
    calls = session.sync
    blocking = np.flatnonzero(calls.kind != STREAM_WAIT)
    if len(blocking) == 0 or trace.slice_start_min is None or trace.slice_end_max is None:
        return []
    rows = calls.rows[blocking]
    starts, durs = trace.start[rows], trace.dur[rows]
    blocked = Union.of(starts, starts + durs).total
    n_calls = f"{len(blocking):,} call{'s' if len(blocking) != 1 else ''}"
    windows = {d.device: d.window for d in session.idle.devices if d.window is not None}
    sites = [site for site in group_sites(trace, calls) if calls.kind[site.worst] != STREAM_WAIT]
    if windows:
        # The GPU idle the calls caused: each call's [start, end + its own idle after) on the
        # device's idle gaps, union over calls; the device that lost the largest share.
        own_after = calls.idle[blocking] - calls.idle_during[blocking]
        caused = Union.of(starts, starts + durs + own_after)
        idle, device, share, device_gaps = 0, None, 0.0, None
        for dev, gaps in device_idle(session.idle.gaps):
            window = windows.get(dev)
            if window is None:
                continue
            lost = int(gaps.covered(caused.start, caused.end).sum())
            lost_share = lost / max(window[1] - window[0], 1)
            if device is None or lost_share > share:
                idle, device, share, device_gaps = lost, dev, lost_share, gaps
        if device is None or idle < MIN_SYNC_NS or share < SYNC_WARNING:
            return []
        sites.sort(key=lambda site: -site.idle)
        weight = calls.idle[blocking]
        where = f"GPU {device} idle {ms(idle)} ({pct(share)} of its window)"
        seen = (
            f"Calls that wait for the GPU left {where}; the host was blocked {ms(blocked)} in "
            f"{n_calls}"
        )
        per_site = lambda site: f"{ms(site.idle)} idle"  # noqa: E731
    else:
        # No GPU activity to measure idle time on: weighed by the host time instead.
        span = max(trace.slice_end_max - trace.slice_start_min, 1)
        share = blocked / span
        if blocked < MIN_SYNC_NS or share < SYNC_WARNING:
            return []
        device, weight = None, durs
        seen = (
            f"The host is blocked {ms(blocked)} ({pct(share)} of the profile) in {n_calls} "
            "that wait for the GPU (the trace has no GPU activity to measure the idle time "
            "they cause)"
        )
        per_site = lambda site: ms(site.total)  # noqa: E731
    listed = "; ".join(
        f"{site.call} ×{site.count}"
        + (f" from {site.cause}" if site.cause else "")
        + (f" at {site.site[0]}" if site.site and site.site[0] != site.cause else "")
        + f" ({per_site(site)})"
        for site in sites[:3]
    )
    kinds = {int(calls.kind[site.worst]) for site in sites[:3]}
    # What the blocking copies' own GPU copies say of the host memory: pinned or pageable.
    copy_memory = _copy_memory(
        session,
        [
            int(calls.rows[site.worst])
            for site in sites[:3]
            if calls.kind[site.worst] in (MEMCPY, PAGEABLE)
        ],
    )
    advice = []
    if FREE in kinds:
        advice.append(
            "cudaFree/hipFree synchronise the whole device: they come from the caching "
            "allocator giving memory back (torch.cuda.empty_cache(), or allocations retried "
            "after freeing the cache under memory pressure) or from libraries allocating per "
            "call; avoid empty_cache() in the loop, lower the peak memory, or try "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    if PAGEABLE in kinds or copy_memory == "pageable":
        advice.append(
            "the copies use pageable host memory (the copy names say Pageable): pin the host "
            "buffer (tensor.pin_memory(), DataLoader(pin_memory=True)) and copy with "
            "non_blocking=True (see pageable_memcpy)"
        )
    if copy_memory == "pinned":
        advice.append(
            "the copies already use pinned host memory (the copy names say Pinned), so the "
            "wait is for the value itself: read it later (after more GPU work is queued), "
            "or keep it on the GPU; remove .item(), .cpu(), .tolist() and prints of CUDA "
            "tensors from the loop, and explicit torch.cuda.synchronize()"
        )
    else:
        advice.append(
            "remove .item(), .cpu(), .tolist() and prints of CUDA tensors from the step loop, "
            "explicit torch.cuda.synchronize(), and use non_blocking copies from pinned memory"
        )
    longest = rows[np.argsort(-weight, kind="stable")[:5]]
    top = int(longest[0])
    severity = CRITICAL if share >= SYNC_CRITICAL else WARNING
    message = f"{seen}: {listed}. Try: " + "; ".join(advice) + "."
    claim = None
    if device is not None and device_gaps is not None:
        claim = (device, caused.intersect(device_gaps))
    first = sites[0] if sites else None
    at = ""
    if first is not None:
        at = f": {first.call}" + (f" from {first.cause}" if first.cause else "")
        at += f" at {first.site[0]}" if first.site and first.site[0] != first.cause else ""
    stake_text = f"GPU {device} idle" if device is not None else "host blocked"
    return [
        Finding(
            "host_sync",
            severity,
            message,
            int(trace.start[top]),
            int(trace.dur[top]),
            device=device,
            rows=tuple(int(r) for r in longest),
            stake=int(idle if device is not None else blocked),
            title=f"Calls that wait for the GPU ({stake_text}){at}",
            claim=claim,
        )
    ]


def _copy_memory(session: TraceSession, calls: list[int]) -> str:
    """`pinned` or `pageable` when every GPU copy the runtime calls `calls` launched says so
    in its name (`Memcpy DtoH (Device -> Pinned)`), else ``""``."""
    seen = set()
    for row in calls:
        for gpu in session.links.gpu_of(int(row)).tolist():
            name = session.trace.name_of(gpu).lower()
            if "pageable" in name:
                seen.add("pageable")
            elif "pinned" in name:
                seen.add("pinned")
            else:
                seen.add("")
    return seen.pop() if len(seen) == 1 else ""


def pageable_memcpy(session: TraceSession) -> list[Finding]:
    """Copies between the GPU and pageable host memory: they block the host even when issued
    as cudaMemcpyAsync (`non_blocking=True`), since the runtime stages them through a pinned
    bounce buffer."""
    from .sync import PAGEABLE_COPY

    trace = session.trace
    links = session.links
    gpu_rows = links.gpu_rows
    copies = np.flatnonzero(session.classes.memcpy[gpu_rows])
    if len(copies) == 0:
        return []
    pageable = names_matching(trace, PAGEABLE_COPY.search)
    copies = copies[pageable[trace.name[gpu_rows[copies]]]]
    if len(copies) == 0:
        return []
    copy_rows = gpu_rows[copies]
    launched_by = links.gpu_runtime[copies]
    calls_rows = np.unique(launched_by[launched_by >= 0])
    host = Union.of(trace.start[calls_rows], trace.start[calls_rows] + trace.dur[calls_rows])
    calls = session.sync
    mine = np.isin(calls.rows, calls_rows)
    idle = int(calls.idle[mine].sum())
    # Per distinct name, not per copy or call (a 1 GB trace has them by the hundred thousand).
    names = sorted({trace.strings[n] for n in np.unique(trace.name[calls_rows]).tolist()})
    directions: dict[str, int] = {}
    name_ids, counts = np.unique(trace.name[copy_rows], return_counts=True)
    for name_id, count in zip(name_ids.tolist(), counts.tolist()):
        label = trace.strings[name_id]
        directions[label] = directions.get(label, 0) + count
    kinds = ", ".join(f"{count} {label}" for label, count in sorted(directions.items()))
    severity = WARNING if host.total >= PAGEABLE_WARNING_NS else INFO
    issued = f" issued by {', '.join(names[:3])}" if names else ""
    message = (
        f"{len(copy_rows):,} copies between the GPU and pageable host memory ({kinds}){issued}: "
        f"the host is blocked {ms(host.total)} in them, even in the async ones, and the GPU "
        f"idles {ms(idle)} meanwhile. Copy from pinned memory: DataLoader(pin_memory=True) "
        "or tensor.pin_memory(), then .to(device, non_blocking=True); keep host buffers for "
        "results pinned too."
    )
    worst = calls_rows[np.argsort(-trace.dur[calls_rows], kind="stable")[:4]]
    evidence = tuple(int(r) for r in worst) if len(worst) else ()
    first = int(evidence[0]) if evidence else int(copy_rows[0])
    device, claim = _claim_of_rows(session, calls_rows)
    return [
        Finding(
            "pageable_memcpy",
            severity,
            message,
            int(trace.start[first]),
            int(trace.dur[first]),
            rows=evidence + (int(copy_rows[0]),),
            stake=int(host.total),
            title=(
                f"{len(copy_rows):,} cop{'ies' if len(copy_rows) != 1 else 'y'} of pageable host "
                f"memory block the host {ms(host.total)}{issued}"
            ),
            claim=None if device is None or claim is None else (device, claim),
        )
    ]


def launch_bound(session: TraceSession) -> list[Finding]:
    out = []
    trace = session.trace
    gaps = session.idle.gaps
    rows = session.links.gpu_rows
    kernel_rows = rows[session.classes.kernel[rows]]
    small_gap = (gaps.length < LAUNCH_GAP_NS) & (
        (gaps.cause == HOST_WAIT) | (gaps.cause == KERNEL_WAIT)
    )
    for dev in session.idle.devices:
        window = dev.window
        if window is None:
            continue
        length = window[1] - window[0]
        mine = kernel_rows[trace.device[kernel_rows] == dev.device]
        short = int((trace.dur[mine] < SHORT_KERNEL_NS).sum())
        waits = np.flatnonzero(small_gap & (gaps.device == dev.device))
        waited = int(gaps.length[waits].sum())
        share = waited / max(length, 1)
        if (
            short < LAUNCH_MIN_SHORT_KERNELS
            or short < LAUNCH_SHORT_SHARE * len(mine)
            or share < LAUNCH_WAIT_WARNING
        ):
            continue
        severity = CRITICAL if share >= LAUNCH_WAIT_CRITICAL else WARNING
        message = (
            f"GPU {dev.device} runs mostly short kernels ({short:,} of {len(mine):,} under "
            f"{SHORT_KERNEL_NS // 1000} µs) and sits idle between them in {len(waits):,} gaps "
            f"under {LAUNCH_GAP_NS // 1000} µs ({ms(waited)}, {pct(share)} of its window): "
            "launches cannot keep up with the GPU. Try CUDA graphs or torch.compile "
            "(mode='reduce-overhead'), fusing small operations, or larger batches."
        )
        longest = waits[np.argsort(-gaps.length[waits], kind="stable")[:5]]
        out.append(
            Finding(
                "launch_bound",
                severity,
                message,
                window[0],
                length,
                device=dev.device,
                rows=tuple(int(r) for r in gaps.next_row[longest]),
                stake=waited,
                title=(
                    f"GPU {dev.device} is launch-bound: {short:,} of {len(mine):,} kernels under "
                    f"{SHORT_KERNEL_NS // 1000} µs, idle between them"
                ),
                claim=(dev.device, Union(gaps.start[waits], gaps.end[waits])),
            )
        )
    if not out:
        out.extend(_launch_bound_steps(session, kernel_rows, small_gap))
    return out


def _launch_bound_steps(
    session: TraceSession, kernel_rows: np.ndarray, small_gap: np.ndarray
) -> list:
    """launch_bound judged step by step, for a stretch that the whole window dilutes: in a
    step, at least LAUNCH_STEP_MIN_SHORT_KERNELS kernels of a device, half of its kernels
    there, are short, and small waits cover a share of the step."""
    trace, steps, gaps = session.trace, session.steps, session.idle.gaps
    if len(steps) == 0 or len(kernel_rows) == 0:
        return []
    k_start = trace.start[kernel_rows]
    k_short = trace.dur[kernel_rows] < SHORT_KERNEL_NS
    k_device = trace.device[kernel_rows]
    g_start = np.maximum(gaps.start, 0)
    bound = []  # (share, step index, device, waited, short, kernels, gap indices)
    for i in range(len(steps)):
        s, e = int(steps.start[i]), int(steps.start[i] + steps.dur[i])
        if e <= s:
            continue
        inside = (k_start >= s) & (k_start < e)
        for device in np.unique(k_device[inside]).tolist():
            mine = inside & (k_device == device)
            short = int((mine & k_short).sum())
            total = int(mine.sum())
            if short < LAUNCH_STEP_MIN_SHORT_KERNELS or short < LAUNCH_SHORT_SHARE * total:
                continue
            waits = np.flatnonzero(
                small_gap & (gaps.device == device) & (g_start < e) & (gaps.end > s)
            )
            waited = int((np.minimum(gaps.end[waits], e) - np.maximum(gaps.start[waits], s)).sum())
            share = waited / (e - s)
            if share >= LAUNCH_WAIT_WARNING:
                bound.append((share, i, device, waited, short, total, waits))
    if not bound:
        return []
    share, i, device, waited, short, total, waits = max(bound, key=lambda b: (b[0], -b[1]))
    row = int(steps.rows[i])
    severity = CRITICAL if share >= LAUNCH_WAIT_CRITICAL else WARNING
    message = (
        f"{len(bound):,} of {len(steps):,} steps are launch-bound (worst: {trace.name_of(row)} on "
        f"GPU {device}: {short:,} of {total:,} kernels under {SHORT_KERNEL_NS // 1000} µs, idle "
        f"{ms(waited)} ({pct(share)} of the step) in gaps under {LAUNCH_GAP_NS // 1000} µs "
        "between them): launches cannot keep up with the GPU there. Try CUDA graphs or "
        "torch.compile (mode='reduce-overhead'), fusing small operations, or larger batches."
    )
    longest = waits[np.argsort(-gaps.length[waits], kind="stable")[:5]]
    s, e = int(steps.start[i]), int(steps.start[i] + steps.dur[i])
    claim = Union(gaps.start[waits], gaps.end[waits]).intersect(
        Union.of(np.array([s]), np.array([e]))
    )
    return [
        Finding(
            "launch_bound",
            severity,
            message,
            int(steps.start[i]),
            int(steps.dur[i]),
            device=device,
            rows=(row, *(int(r) for r in gaps.next_row[longest])),
            stake=waited,
            title=f"{trace.name_of(row)} is launch-bound on GPU {device}: {short:,} of {total:,} kernels under {SHORT_KERNEL_NS // 1000} µs",
            claim=(int(device), claim),
        )
    ]


def host_wait_idle(session: TraceSession) -> list[Finding]:
    out = []
    gaps = session.idle.gaps
    trace = session.trace
    for dev in session.idle.devices:
        window = dev.window
        if window is None or dev.idle_ns == 0:
            continue
        length = window[1] - window[0]
        waited = dev.idle_by_cause[HOST_WAIT]
        share = waited / max(length, 1)
        if share < HOST_WAIT_WARNING or waited < HOST_WAIT_SHARE_OF_IDLE * dev.idle_ns:
            continue
        mine = np.flatnonzero((gaps.device == dev.device) & (gaps.cause == HOST_WAIT))
        longest = int(mine[np.argmax(gaps.length[mine])])
        stack = [trace.name_of(int(r)) for r in session.gap_cpu_stack(longest)]
        doing = f" the CPU was in {' > '.join(stack[-3:])}" if stack else " no CPU context"
        severity = CRITICAL if share >= HOST_WAIT_CRITICAL else WARNING
        loader = next((s for s in stack if s.startswith(DATALOADER_PREFIX)), None)
        if loader is not None:  # the evidence says what the host was doing: loading data
            single = SINGLE_PROCESS_LOADER in loader
            advice = (
                "The host was loading data then"
                + (" in the training process (num_workers=0)" if single else "")
                + ": "
                + (
                    "give the DataLoader worker processes (num_workers > 0, "
                    "persistent_workers=True)"
                    if single
                    else "more DataLoader workers or prefetching"
                )
                + ", pin_memory=True, and see dataloader_bound."
            )
        else:
            advice = (
                "Try to keep the GPU queue full: remove host synchronisation, overlap data "
                "loading and host work with GPU execution, or capture the step with CUDA graphs."
            )
        message = (
            f"GPU {dev.device} waits for the host {ms(waited)} ({pct(share)} of its window): "
            f"the next work was launched only after the GPU had gone idle. In the longest gap "
            f"({ms(gaps.length[longest])}){doing}. {advice}"
        )
        runtime = int(gaps.runtime_row[longest])
        rows = (int(gaps.next_row[longest]),) + ((runtime,) if runtime >= 0 else ())
        out.append(
            Finding(
                "host_wait_idle",
                severity,
                message,
                int(gaps.start[longest]),
                int(gaps.length[longest]),
                device=dev.device,
                rows=rows,
                stake=int(waited),
                title=(
                    f"GPU {dev.device} waits for the host {ms(waited)}; in the longest gap"
                    + (f" the CPU was in {stack[-1]}" if stack else " no CPU context")
                ),
                claim=(dev.device, Union(gaps.start[mine], gaps.end[mine])),
            )
        )
    return out


def waiting_for_work(session: TraceSession) -> list[Finding]:
    """On a trace without steps, GPU idle time during which no operator runs on the host at
    all: the process was waiting for work (a server between requests) or ran code the
    profiler does not record; not a slowdown of the work the trace shows."""
    if len(session.steps):
        return []
    trace = session.trace
    gaps = session.idle.gaps
    operating = _operator_time(session)
    out = []
    for dev in session.idle.devices:
        window = dev.window
        if window is None or window[1] - window[0] < MIN_WINDOW_NS or dev.idle_ns == 0:
            continue
        length = window[1] - window[0]
        mine = np.flatnonzero(gaps.device == dev.device)
        idle = Union(gaps.start[mine], gaps.end[mine])
        lo, hi = window
        free = Union.of(
            np.concatenate(([lo], operating.end)), np.concatenate((operating.start, [hi]))
        )
        waiting = idle.intersect(free)
        share = waiting.total / length
        if share < WAITING_WARNING or not len(waiting):
            continue
        longest = int(np.argmax(waiting.end - waiting.start))
        s, e = int(waiting.start[longest]), int(waiting.end[longest])
        if e - s < WAITING_MIN_NS:
            continue
        before = _last_call_before(session, s)
        gap = int(np.searchsorted(gaps.start[mine], s, side="right")) - 1
        next_row = int(gaps.next_row[mine[gap]]) if gap >= 0 else -1
        rows = tuple(r for r in (before, next_row) if r >= 0)
        origin = trace.slice_start_min or 0
        after = f", after {trace.name_of(before)}" if before >= 0 else ""
        severity = CRITICAL if share >= WAITING_CRITICAL else WARNING
        message = (
            f"GPU {dev.device} is idle {ms(waiting.total)} ({pct(share)} of its window) while no "
            f"operator runs on the host (the longest stretch: {ms(e - s)} from "
            f"+{ms(s - origin)}{after}), and the trace has no ProfilerStep: the process was "
            "waiting for work (a server between requests, a pause between calls), not slowed "
            "by the GPU or by the work the trace shows. If it serves requests, this idle is "
            "time without requests: profile under load, or judge the busy stretches only "
            "(kinetoscope export --window); if it should have been busy, it ran code the "
            "profiler does not record: profile with with_stack=True, or wrap that code in "
            "torch.profiler.record_function(...)."
        )
        out.append(
            Finding(
                "waiting_for_work",
                severity,
                message,
                s,
                e - s,
                device=dev.device,
                rows=rows,
                stake=int(waiting.total),
                title=(
                    f"GPU {dev.device} idle with no operator running on the host (waiting for "
                    f"work?): longest {ms(e - s)} from +{ms(s - origin)}{after}"
                ),
                claim=(dev.device, waiting),
            )
        )
    return out


def _operator_time(session: TraceSession) -> Union:
    """When some operator or runtime call runs on the host: CPU slices other than Python
    frames (`python_function`, which stay open while an event loop waits) and the profiler's
    own span (category `Trace`)."""
    trace = session.trace
    skip = np.zeros(len(trace.strings), dtype=bool)
    for cat in ids_in_use(trace.cat, len(trace.strings)).tolist():
        skip[cat] = trace.strings[cat].lower() in WAITING_IGNORED_CATEGORIES
    rows = np.flatnonzero(session.classes.cpu & ~skip[trace.cat])
    return Union.of(trace.start[rows], trace.start[rows] + trace.dur[rows])


def _last_call_before(session: TraceSession, t: int) -> int:
    """The host-blocking call (sync analysis) that ended last at or before t, else the CPU
    slice that did (not a Python frame), else -1."""
    trace = session.trace
    calls = session.sync.rows
    for rows in (calls, None):
        if rows is None:
            rows = np.flatnonzero(session.classes.cpu)
        if not len(rows):
            continue
        ends = trace.start[rows] + trace.dur[rows]
        ok = np.flatnonzero(ends <= t)
        if len(ok):
            best = ok[np.argmax(ends[ok])]
            if rows is calls and t - int(ends[best]) > WAITING_CALL_NEAR_NS:
                continue  # a blocking call long before the stretch did not lead into it
            return int(rows[best])
    return -1


def communication_heavy(session: TraceSession) -> list[Finding]:
    steps = session.steps
    trace = session.trace
    if len(steps):
        share = steps.comm_total / np.maximum(steps.dur, 1)
        exposed = steps.comm / np.maximum(steps.dur, 1)
        heavy = np.flatnonzero(share >= COMM_WARNING)
        if len(heavy) == 0:
            return []
        worst = int(heavy[np.argmax(share[heavy])])
        severity = CRITICAL if exposed[worst] >= COMM_EXPOSED_CRITICAL else WARNING
        name = trace.name_of(int(steps.rows[worst]))
        if int(steps.comm[worst]) >= int(steps.comm_total[worst]):
            hidden = "all of it exposed (not overlapped by compute)"
        elif int(steps.comm[worst]) == 0:
            hidden = "all of it overlapped by compute"
        else:
            hidden = f"{pct(exposed[worst])} of the step exposed (not overlapped by compute)"
        message = (
            f"{len(heavy):,} of {len(steps):,} steps spend at least {pct(COMM_WARNING)} of their "
            f"time in communication kernels (worst: {name}, {pct(share[worst])} of the step, "
            f"{hidden}). Try overlapping communication "
            "with compute (DDP bucket size, FSDP prefetching), fewer or larger collectives "
            "(gradient accumulation), or check the interconnect."
        )
        return [
            Finding(
                "communication_heavy",
                severity,
                message,
                int(steps.start[worst]),
                int(steps.dur[worst]),
                rows=(int(steps.rows[worst]),),
                stake=int(steps.comm.sum()),
                title=f"Communication kernels take {pct(share[worst])} of {name}, {hidden}",
            )
        ]
    window = session.idle.all_busy.window
    if window is None or window[1] - window[0] < MIN_WINDOW_NS:
        return []
    is_comm = names_matching(trace, COMM_NAME.search)
    comm_rows = session.links.gpu_rows[session.classes.kernel[session.links.gpu_rows]]
    comm_rows = comm_rows[is_comm[trace.name[comm_rows]]]
    if len(comm_rows) == 0:
        return []
    comm = Union.of(trace.start[comm_rows], trace.start[comm_rows] + trace.dur[comm_rows]).total
    length = window[1] - window[0]
    share = comm / max(length, 1)
    if share < COMM_WARNING:
        return []
    message = (
        f"Communication kernels cover {pct(share)} of the GPU window ({ms(comm)}). Try "
        "overlapping communication with compute, fewer or larger collectives, or check the "
        "interconnect."
    )
    return [
        Finding(
            "communication_heavy",
            WARNING,
            message,
            window[0],
            length,
            stake=comm,
            title=f"Communication kernels cover {pct(share)} of the GPU window",
        )
    ]


def _cpu_only(session: TraceSession) -> bool:
    return len(session.steps) > 0 and not bool(session.classes.gpu.any())


def collective_wait(session: TraceSession) -> list[Finding]:
    """On a trace without GPU activity (a CPU-only rank, e.g. gloo), the share of a step spent
    in CPU-side collectives: mostly waiting for the other ranks."""
    if not _cpu_only(session):
        return []
    from .steps import COLLECTIVE_NAME

    steps, trace = session.steps, session.trace
    share = steps.collective / np.maximum(steps.dur, 1)
    heavy = np.flatnonzero(share >= COLLECTIVE_WARNING)
    if len(heavy) == 0:
        return []
    worst = int(heavy[np.argmax(share[heavy])])
    s, e = int(steps.start[worst]), int(steps.start[worst] + steps.dur[worst])
    is_collective = names_matching(trace, COLLECTIVE_NAME.match)
    inside = np.flatnonzero(
        session.classes.cpu & is_collective[trace.name] & (trace.start < e) & (trace.end > s)
    )
    inside = inside[np.argsort(-trace.dur[inside], kind="stable")]
    names = sorted({trace.name_of(int(r)) for r in inside[:50]})
    severity = CRITICAL if share[worst] >= COLLECTIVE_CRITICAL else WARNING
    message = (
        f"{len(heavy):,} of {len(steps):,} steps spend at least {pct(COLLECTIVE_WARNING)} of their "
        f"time in collectives (worst: {trace.name_of(int(steps.rows[worst]))}, "
        f"{ms(steps.collective[worst])}, {pct(share[worst])}, in {', '.join(names[:3])}). "
        "Without a GPU, time in a collective is mostly waiting for the slowest rank: compare "
        "the ranks' traces for a straggler or uneven work, overlap communication with compute "
        "(DDP buckets), or use fewer, larger collectives."
    )
    return [
        Finding(
            "collective_wait",
            severity,
            message,
            s,
            e - s,
            rows=(int(steps.rows[worst]), *(int(r) for r in inside[:4])),
            stake=int(steps.collective.sum()),
        )
    ]


def uninstrumented_step_time(session: TraceSession) -> list[Finding]:
    """On a trace without GPU activity, steps whose thread spends much of the step in no
    profiled slice: the time is real but the trace cannot say what it was."""
    if not _cpu_only(session):
        return []
    steps, trace = session.steps, session.trace
    share = steps.uninstrumented / np.maximum(steps.dur, 1)
    dark = np.flatnonzero(share >= UNINSTRUMENTED_WARNING)
    if len(dark) == 0:
        return []
    worst = int(dark[np.argmax(share[dark])])
    collective = (
        " (the collectives run on other threads meanwhile)" if (steps.collective[worst] > 0) else ""
    )
    message = (
        f"{len(dark):,} of {len(steps):,} steps spend at least {pct(UNINSTRUMENTED_WARNING)} of "
        f"their time on the step's thread outside every profiled operator (worst: "
        f"{trace.name_of(int(steps.rows[worst]))}, {ms(steps.uninstrumented[worst])}, "
        f"{pct(share[worst])}){collective}: Python code between operators, waiting on other "
        "threads, or sleeping. Record with with_stack=True, or wrap parts of the step in "
        "torch.profiler.record_function(...), to see where it goes."
    )
    return [
        Finding(
            "uninstrumented_step_time",
            WARNING,
            message,
            int(steps.start[worst]),
            int(steps.dur[worst]),
            rows=(int(steps.rows[worst]),),
            stake=int(steps.uninstrumented.sum()),
        )
    ]


def memory_near_capacity(session: TraceSession) -> list[Finding]:
    capacity: dict[int, int] = {}
    for props in device_properties(session.trace):
        dev, total = props.get("id"), props.get("totalGlobalMem")
        if type(dev) is int and type(total) is int and total > 0:
            capacity[dev] = total
    out = []
    memory = session.trace.memory
    for group in session.memory:
        if group.device_type not in GPU_DEVICE_TYPES or group.device_id not in capacity:
            continue
        peak = group.peak_reserved if group.peak_reserved is not None else group.peak_allocated
        if peak is None:
            continue
        total = capacity[group.device_id]
        share = peak / total
        if share < MEMORY_WARNING:
            continue
        values = (
            memory.total_reserved if group.peak_reserved is not None else (memory.total_allocated)
        )
        idx = group.indices[values[group.indices] == peak]
        with_ts = idx[memory.ts[idx] != NO_VALUE]
        at = int(memory.ts[with_ts[0]]) if len(with_ts) else (session.trace.slice_start_min or 0)
        severity = CRITICAL if share >= MEMORY_CRITICAL else WARNING
        message = (
            f"GPU {group.device_id} reaches {fmt_bytes(peak)} of {fmt_bytes(total)} "
            f"({pct(share)}) of memory. Try a smaller batch, activation checkpointing, mixed "
            "precision, or PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when reserved memory "
            "is much larger than allocated."
        )
        out.append(
            Finding("memory_near_capacity", severity, message, at, 0, device=group.device_id)
        )
    return out


def _span(session: TraceSession) -> tuple[int, int]:
    trace = session.trace
    if trace.slice_start_min is None or trace.slice_end_max is None:
        return 0, 0
    return trace.slice_start_min, trace.slice_end_max - trace.slice_start_min


def recompiles(session: TraceSession) -> list[Finding]:
    """Frames seen with more than one compile id inside the window (docs/compile.md)."""
    c = session.compiled
    frames = c.recompiled_frames()
    if not frames:
        return []
    rows = tuple(r for f in frames for r in f.first_rows)
    listed = ", ".join(
        f"frame {f.frame}: ids {', '.join(map(str, f.compile_ids))}" for f in frames[:5]
    )
    start = min(int(session.trace.start[r]) for r in rows)
    end = max(int(session.trace.start[r] + session.trace.dur[r]) for r in rows)
    message = (
        f"{len(frames):,} compiled frame{'s' if len(frames) != 1 else ''} recompiled inside the "
        f"window ({listed}): a guard failed (a new shape, dtype, or a changed Python value), and "
        "each recompile costs compile time. Run with TORCH_LOGS=recompiles to see which guard; "
        "mark varying sizes dynamic (torch._dynamo.mark_dynamic) or keep them constant."
    )
    return [Finding("recompiles", WARNING, message, start, end - start, rows=rows[:8])]


def compile_in_window(session: TraceSession) -> list[Finding]:
    """Compilation (`(dynamo_timed)` events, `Lazy Function Loading`) inside the window."""
    compiling = session.compiled.compiling
    if not compiling.count:
        return []
    start, span = _span(session)
    share = compiling.ns / span if span else 0.0
    severity = CRITICAL if share >= COMPILE_CRITICAL else WARNING
    first = min(int(session.trace.start[r]) for r in compiling.rows)
    last = max(int(session.trace.start[r] + session.trace.dur[r]) for r in compiling.rows)
    message = (
        f"torch.compile compiled inside the profiled window: {compiling.count:,} compile "
        f"event{'s' if compiling.count != 1 else ''} covering {ms(compiling.ns)} "
        f"({pct(share)} of the trace). The numbers of this trace mix compilation with the "
        "steady state: profile after more warm-up steps (torch.profiler.schedule(wait=..., "
        "warmup=...)), or call the compiled model once before profiling."
    )
    return [
        Finding(
            "compile_in_window",
            severity,
            message,
            first,
            last - first,
            rows=compiling.rows,
            stake=int(compiling.ns),
        )
    ]


def likely_graph_breaks(session: TraceSession) -> list[Finding]:
    """Steps (or the whole trace) whose compiled regions come from more than one frame."""
    breaks = session.compiled.likely_graph_breaks
    if not breaks:
        return []
    worst = max(breaks, key=lambda b: (len(b.frames), -b.start))
    where = (
        f"{len(breaks):,} step{'s' if len(breaks) != 1 else ''} run"
        if worst.step_row >= 0
        else "the trace runs"
    )
    message = (
        f"{where} compiled code from more than one frame (up to {len(worst.frames)}: frames "
        f"{', '.join(map(str, worst.frames[:8]))}): likely graph breaks, each one a return to "
        "eager Python between compiled graphs (or several compiled functions). Find them with "
        "TORCH_LOGS=graph_breaks or torch._dynamo.explain(model)(inputs), or compile with "
        "fullgraph=True to make them errors."
    )
    rows = tuple(worst.rows[:8])
    if worst.step_row >= 0:
        rows = (worst.step_row, *rows)
    return [
        Finding(
            "likely_graph_breaks", WARNING, message, worst.start, worst.end - worst.start, rows=rows
        )
    ]


def guard_overhead(session: TraceSession) -> list[Finding]:
    """Self time of `TorchDynamo Cache Lookup` (guard evaluation) per step."""
    c = session.compiled
    if not c.guard_calls:
        return []
    if c.steps:
        worst = max(c.steps, key=lambda s: (s.guard_ns / max(s.end - s.start, 1), -s.start))
        ns, length, start = worst.guard_ns, worst.end - worst.start, worst.start
        calls, rows = worst.guard_calls, (worst.row,)
        what = f"in {session.trace.name_of(worst.row)}"
    else:
        start, length = _span(session)
        ns, calls, rows, what = c.guard_ns, c.guard_calls, (), "over the trace"
    if ns < GUARD_MIN_NS or not length or ns / length < GUARD_WARNING:
        return []
    message = (
        f"Guard evaluation (TorchDynamo Cache Lookup) takes {ms(ns)} in {calls:,} "
        f"call{'s' if calls != 1 else ''} {what} ({pct(ns / length)}): many small compiled "
        "calls or many guards. Compile a larger function, reduce the Python state the "
        "compiled code reads, or try torch.compiler.set_stance / guard filtering."
    )
    return [Finding("guard_overhead", WARNING, message, start, length, rows=rows)]


def graph_replay(session: TraceSession) -> list[Finding]:
    """CUDA/HIP graph replay (or capture) is present: say which numbers it makes partial."""
    c = session.compiled
    replay = c.replay
    if replay is None:
        return []
    longest = sorted(c.graphs, key=lambda g: (-g.gpu_ns, g.row))[:5]
    start, length = _span(session)
    seen = (
        f"{replay.launches:,} graph launch{'es replay' if replay.launches != 1 else ' replays'} "
        f"{plural(replay.kernels, 'GPU activity', 'GPU activities')} ({ms(replay.gpu_ns)})"
        if replay.launches
        else "CUDA/HIP graphs were captured inside the window"
    )
    message = (
        f"{seen}. Partial because of it: "
        + "; ".join(replay.partial)
        + ". The compile section (summary --json) has the replay-aware numbers."
    )
    return [
        Finding("graph_replay", INFO, message, start, length, rows=tuple(g.row for g in longest))
    ]


RULES = {
    "dataloader_bound": dataloader_bound,
    "low_gpu_utilization": low_gpu_utilization,
    "host_sync": host_sync,
    "pageable_memcpy": pageable_memcpy,
    "launch_bound": launch_bound,
    "host_wait_idle": host_wait_idle,
    "waiting_for_work": waiting_for_work,
    "communication_heavy": communication_heavy,
    "collective_wait": collective_wait,
    "uninstrumented_step_time": uninstrumented_step_time,
    "memory_near_capacity": memory_near_capacity,
    "trace_oddities": oddity_findings,
    "recompiles": recompiles,
    "compile_in_window": compile_in_window,
    "likely_graph_breaks": likely_graph_breaks,
    "guard_overhead": guard_overhead,
    "graph_replay": graph_replay,
}


def run_rules(session: TraceSession) -> list[Finding]:
    """Every rule's findings, most severe first (then in rule order)."""
    found: list[Finding] = []
    for rule in RULES.values():
        found.extend(rule(session))
    return sorted(found, key=lambda f: SEVERITY_ORDER[f.severity])


# group_findings: the rules whose findings claim GPU idle time, in the order in which one is
# taken as the cause of another (a cause named by its mechanism before the symptoms), and the
# share of a finding's claimed idle that a cause must explain for the finding to support it.
CAUSE_ORDER = (
    "waiting_for_work",
    "host_sync",
    "dataloader_bound",
    "launch_bound",
    "pageable_memcpy",
    "host_wait_idle",
    "low_gpu_utilization",
)
SUPPORT_SHARE = 0.5
MAX_GROUP_ROWS = 8
# The causes a finding of a mechanism may support (the symptoms, host_wait_idle and
# low_gpu_utilization, may support any): pageable copies are one way a host sync blocks, a
# DataLoader may sync while loading, and waiting for work is no slowdown of any kind; a
# launch-bound stretch that pageable copies sit in is still two things to fix.
MAY_SUPPORT = {
    "pageable_memcpy": frozenset({"host_sync", "waiting_for_work"}),
    "dataloader_bound": frozenset({"host_sync", "waiting_for_work"}),
    "launch_bound": frozenset({"waiting_for_work"}),
    "host_sync": frozenset({"waiting_for_work"}),
    "waiting_for_work": frozenset(),
}


def group_findings(findings: list[Finding]) -> list[Finding]:
    """One finding per cause: a finding whose claimed GPU idle (`claim`) is at least
    SUPPORT_SHARE explained by the claim of an earlier finding in CAUSE_ORDER on the same
    device, one it MAY_SUPPORT, joins it as supporting evidence (`supports`, the rules' own findings, unchanged).
    A group's severity is the highest of its members', its evidence rows the primary's, then
    its supports' (at most MAX_GROUP_ROWS); its stake and title are the primary's. Sorted most
    severe first, then by time at stake, then in rule order."""
    rank = {rule: i for i, rule in enumerate(CAUSE_ORDER)}
    order = sorted(
        range(len(findings)),
        key=lambda i: (rank.get(findings[i].rule, -1), -findings[i].stake, i),
    )
    groups: list[tuple[int, list[int]]] = []
    for i in order:
        f = findings[i]
        best, best_overlap = None, 0
        if f.claim is not None and f.claim[1].total > 0:
            for g, (p, _) in enumerate(groups):
                primary = findings[p]
                if primary.claim is None or primary.claim[0] != f.claim[0]:
                    continue
                allowed = MAY_SUPPORT.get(f.rule)
                if allowed is not None and primary.rule not in allowed:
                    continue
                overlap = primary.claim[1].intersect(f.claim[1]).total
                if overlap >= SUPPORT_SHARE * f.claim[1].total and overlap > best_overlap:
                    best, best_overlap = g, overlap
        if best is None:
            groups.append((i, []))
        else:
            groups[best][1].append(i)
    out = []
    for p, members in groups:
        primary = findings[p]
        supports = tuple(findings[m] for m in members)
        severity = min((primary, *supports), key=lambda f: SEVERITY_ORDER[f.severity]).severity
        rows = list(primary.rows)
        for s in supports:
            rows.extend(r for r in s.rows if r not in rows)
        grouped = replace(
            primary,
            severity=severity,
            rows=tuple(rows[: max(MAX_GROUP_ROWS, len(primary.rows))]),
            supports=supports,
            own=primary,
        )
        out.append(((SEVERITY_ORDER[severity], -primary.stake, p), grouped))
    out.sort(key=lambda pair: pair[0])
    return [grouped for _, grouped in out]


def cause_members(causes: list[Finding]) -> list[Finding]:
    """Every rule's own finding, cause by cause: each primary, then the findings it explains
    (the findings CSV's order)."""
    return [m for cause in causes for m in (cause.own or cause, *cause.supports)]
