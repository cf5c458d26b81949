"""GPU busy time per device, and the idle gaps inside each device's window with their causes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, Trace

from .intervals import Union
from .links import Links
from .nesting import Nesting

# A gap shorter than this, with the next work already asked for, is the GPU waiting on the
# previous kernel's tail / launch latency rather than on the host.
KERNEL_WAIT_LIMIT_NS = 30_000

HOST_WAIT, KERNEL_WAIT, OTHER = 0, 1, 2
CAUSES = ("host_wait", "kernel_wait", "other")


@dataclass(frozen=True)
class DeviceActivity:
    """One device's GPU activity: counts, the busy union and its window (None when all dur 0)."""

    device: int
    kernels: int
    memcpys: int
    memsets: int
    busy: Union
    idle_by_cause: tuple[int, int, int]  # ns per cause, in CAUSES order

    @property
    def window(self) -> tuple[int, int] | None:
        return self.busy.window

    @property
    def busy_ns(self) -> int:
        return self.busy.total

    @property
    def idle_ns(self) -> int:
        window = self.window
        return 0 if window is None else window[1] - window[0] - self.busy.total


@dataclass(frozen=True)
class Gaps:
    """Idle gaps of all devices, sorted by (start, device). Arrays of equal length."""

    device: np.ndarray  # int64
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    cause: np.ndarray  # int8, index into CAUSES
    next_row: np.ndarray  # int64: the GPU activity that ended the gap
    runtime_row: np.ndarray  # int64: the runtime call linked to next_row, or -1

    def __len__(self) -> int:
        return len(self.start)

    @property
    def length(self) -> np.ndarray:
        return self.end - self.start

    def _eligible(self, device: int | None, min_len: int) -> np.ndarray:
        mask = self.length >= min_len
        if device is not None:
            mask &= self.device == device
        return mask

    def next_gap(self, t: int, device: int | None = None, min_len: int = 0) -> int:
        """Index of the first gap starting strictly after t (optionally on one device, at least
        min_len ns long), or -1."""
        first = int(np.searchsorted(self.start, t, side="right"))
        hits = np.flatnonzero(self._eligible(device, min_len)[first:])
        return first + int(hits[0]) if len(hits) else -1

    def prev_gap(self, t: int, device: int | None = None, min_len: int = 0) -> int:
        """Index of the last gap starting strictly before t, or -1."""
        stop = int(np.searchsorted(self.start, t, side="left"))
        hits = np.flatnonzero(self._eligible(device, min_len)[:stop])
        return int(hits[-1]) if len(hits) else -1

    def gap_at(self, t: int, device: int | None = None) -> int:
        """Index of a gap containing t (start <= t < end), or -1."""
        mask = (self.start <= t) & (t < self.end)
        if device is not None:
            mask &= self.device == device
        hits = np.flatnonzero(mask)
        return int(hits[0]) if len(hits) else -1

    def longest(self, limit: int | None = None, device: int | None = None) -> np.ndarray:
        """Gap indices longest first; ties: earlier start, then lower device."""
        order = np.lexsort((self.device, self.start, -self.length))
        if device is not None:
            order = order[self.device[order] == device]
        return order if limit is None else order[:limit]

    def midpoint(self, i: int) -> int:
        return int(self.start[i]) + (int(self.end[i]) - int(self.start[i])) // 2


@dataclass(frozen=True)
class IdleAnalysis:
    devices: list[DeviceActivity]
    gaps: Gaps
    all_busy: Union  # union over every device, for per-step clipping

    def device(self, device: int) -> DeviceActivity | None:
        for entry in self.devices:
            if entry.device == device:
                return entry
        return None


def compute_idle(trace: Trace, kind: np.ndarray, links: Links) -> IdleAnalysis:
    rows = links.gpu_rows
    device = trace.device[rows]
    start = trace.start[rows]
    dur = trace.dur[rows]
    row_kind = kind[rows]
    runtime_start = np.where(
        links.gpu_runtime >= 0, trace.start[np.maximum(links.gpu_runtime, 0)], 0
    )

    devices = []
    parts: list[tuple[np.ndarray, ...]] = []
    for dev in np.unique(device).tolist():
        on_device = device == dev
        positive = np.flatnonzero(on_device & (dur > 0))
        # Sort by start, ties in file order (positions are in file order already).
        positive = positive[np.argsort(start[positive], kind="stable")]
        s = start[positive]
        e = s + dur[positive]
        reach = np.maximum.accumulate(e) if len(e) else e
        opens = np.flatnonzero(s[1:] > reach[:-1]) + 1
        gap_start = reach[opens - 1]
        gap_end = s[opens]
        nxt = positive[opens]  # the first in file order among those starting at gap_end
        runtime = links.gpu_runtime[nxt]
        cause = np.full(len(opens), OTHER, dtype=np.int8)
        cause[gap_end - gap_start < KERNEL_WAIT_LIMIT_NS] = KERNEL_WAIT
        cause[(runtime >= 0) & (runtime_start[nxt] > gap_start)] = HOST_WAIT
        length = gap_end - gap_start
        by_cause = tuple(int(length[cause == c].sum()) for c in range(3))
        run_first = np.concatenate(([0], opens))
        run_last = np.append(opens - 1, len(s) - 1) if len(s) else np.zeros(0, np.int64)
        busy = Union(s[run_first], reach[run_last]) if len(s) else Union.of(s, e)
        devices.append(
            DeviceActivity(
                device=int(dev),
                kernels=int((row_kind[on_device] == KIND_KERNEL).sum()),
                memcpys=int((row_kind[on_device] == KIND_MEMCPY).sum()),
                memsets=int((row_kind[on_device] == KIND_MEMSET).sum()),
                busy=busy,
                idle_by_cause=(by_cause[0], by_cause[1], by_cause[2]),
            )
        )
        parts.append(
            (np.full(len(opens), dev, np.int64), gap_start, gap_end, cause, rows[nxt], runtime)
        )
    if parts:
        cols = [np.concatenate(c) for c in zip(*parts)]
    else:
        empty = np.zeros(0, np.int64)
        cols = [empty, empty, empty, np.zeros(0, np.int8), empty, empty]
    order = np.lexsort((cols[0], cols[1]))
    gaps = Gaps(*(c[order] for c in cols))
    all_busy = Union.of(start, start + dur)
    return IdleAnalysis(devices=devices, gaps=gaps, all_busy=all_busy)


# -- GPU idle per CPU operator -----------------------------------------------------------------


def innermost_at(
    trace: Trace, nesting: Nesting, lanes: np.ndarray, times: np.ndarray
) -> np.ndarray:
    """Per (lane, t): the row of the innermost CPU slice of the lane with start <= t < end, -1
    when none (`Nesting.innermost`, in rows)."""
    pos = nesting.innermost(trace, lanes, times)
    out = np.full(len(pos), -1, dtype=np.int64)
    found = pos >= 0
    out[found] = nesting.order[pos[found]]
    return out


def launch_lane(trace: Trace, links: Links) -> int:
    """The lane whose runtime calls launched the most GPU activities, -1 when none did."""
    launched = links.gpu_runtime[links.gpu_runtime >= 0]
    if not len(launched):
        return -1
    lanes, counts = np.unique(trace.lane[launched], return_counts=True)
    return int(lanes[int(np.argmax(counts))])


@dataclass(frozen=True)
class IdleByCpu:
    """GPU idle time totalled by the CPU operator that was running during the gaps.

    A gap's operator is the innermost CPU slice, on the lane of the runtime call that launched
    the gap's next GPU event (else on the lane that launched the most GPU work), that holds the
    gap's midpoint (as the summary's `cpu_stack`); the whole gap counts for it. Entries are
    (cat, name) string-id pairs, most idle first (ties: more gaps, then cat and name ids);
    gaps with no such slice are totalled apart."""

    gap_row: np.ndarray  # per gap: the innermost CPU slice at its midpoint, -1 when none
    cat: np.ndarray  # per entry: string id
    name: np.ndarray  # per entry: string id
    idle: np.ndarray  # per entry: Σ ns of the gaps
    gaps: np.ndarray  # per entry: number of gaps
    longest: np.ndarray  # per entry: the longest gap's length, ns
    unattributed_idle: int  # Σ ns of the gaps with no CPU slice at the midpoint
    unattributed_gaps: int

    def __len__(self) -> int:
        return len(self.idle)


def compute_idle_by_cpu(
    trace: Trace, nesting: Nesting, links: Links, gaps: Gaps, mask: np.ndarray | None = None
) -> IdleByCpu:
    """`mask` (optional, per gap) keeps only some gaps, e.g. those of one device or range."""
    chosen = np.arange(len(gaps)) if mask is None else np.flatnonzero(mask)
    runtime = gaps.runtime_row[chosen]
    fallback = launch_lane(trace, links)
    lanes = np.where(runtime >= 0, trace.lane[np.maximum(runtime, 0)].astype(np.int64), fallback)
    start, end = gaps.start[chosen], gaps.end[chosen]
    mid = start + (end - start) // 2
    rows = np.full(len(chosen), -1, dtype=np.int64)
    known = lanes >= 0
    rows[known] = innermost_at(trace, nesting, lanes[known], mid[known])
    gap_row = np.full(len(gaps), -1, dtype=np.int64)
    gap_row[chosen] = rows
    length = end - start
    hit = rows >= 0
    n_strings = max(len(trace.strings), 1)
    key = trace.cat[rows[hit]].astype(np.int64) * n_strings + trace.name[rows[hit]]
    keys, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(-1)
    idle = np.bincount(inverse, weights=length[hit], minlength=len(keys)).astype(np.int64)
    count = np.bincount(inverse, minlength=len(keys)).astype(np.int64)
    longest = np.zeros(len(keys), dtype=np.int64)
    np.maximum.at(longest, inverse, length[hit])
    ranked = np.lexsort((keys, -count, -idle))
    return IdleByCpu(
        gap_row=gap_row,
        cat=(keys[ranked] // n_strings).astype(np.int64),
        name=(keys[ranked] % n_strings).astype(np.int64),
        idle=idle[ranked],
        gaps=count[ranked],
        longest=longest[ranked],
        unattributed_idle=int(length[~hit].sum()),
        unattributed_gaps=int((~hit).sum()),
    )
