"""Memory per operator: who allocated what, the live-memory curve per device, its peak and owner,
and each allocation's lifetime (leak suspects are the allocations never freed in the trace).

A `[memory]` event belongs to the innermost CPU slice on its own lane (the thread that allocated)
with start <= ts < end (the lane with the same pid and tid as text when its own has no slices). Events are ordered by (ts, file order) within a device, which is the
order the allocator saw them. Bytes > 0 is an allocation, < 0 a free; 0 or missing is neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from kinetoscope.parser.model import NO_VALUE, MemoryEvents, Trace

from .classify import Groups
from .intervals import add_at, cumulative, sums_fit
from .memory import compute_memory
from .nesting import Nesting
from .units import us as _us

# c10::DeviceType values seen in traces (ROCm builds report HIP devices as CUDA).
DEVICE_TYPE_NAMES = {0: "CPU", 1: "CUDA", 6: "HIP", 12: "XPU", 13: "MPS", 19: "MTIA"}

# Allocation states (`Allocations.state`).
FREED = 0  # a later free at the same address
NEVER_FREED = 1  # the last event at its address: still live when the trace ends
REUSED = 2  # the address was allocated again with no free seen in between: lifetime unknown

HOW_TO_RECORD = (
    "This trace has no [memory] events. Record them with "
    "torch.profiler.profile(profile_memory=True, ...) "
    "or `kinetoscope capture --profile-memory script.py`."
)


def device_label(device_type: int | None, device_id: int | None) -> str:
    """`CUDA 0`, `CPU`, `type 7 / 2`: how the viewer and the text report name a memory device."""
    if device_type is None:
        kind = "unknown device"
    else:
        kind = DEVICE_TYPE_NAMES.get(device_type, f"device type {device_type}")
    if device_id is None or device_id < 0:
        return kind
    return f"{kind} {device_id}"


def cpu_lanes_for(trace: Trace, nesting: Nesting, lanes: np.ndarray) -> np.ndarray:
    """The lane whose CPU slices own events written on `lanes`: the lane itself, or, when it
    holds no CPU slice, the one with the same pid and tid as text (old traces write the
    `[memory]` events' tid as an int and the operators' tid as a string)."""
    out = np.asarray(lanes, dtype=np.int64).copy()
    with_slices = set(nesting.lane_ids.tolist())
    by_text: dict[tuple[str, str], int] = {}
    for lane_id in with_slices:
        lane = trace.lanes[lane_id]
        by_text.setdefault((str(lane.pid), str(lane.tid)), lane_id)
    for lane_id in np.unique(out).tolist():
        if lane_id < 0 or lane_id in with_slices:
            continue
        lane = trace.lanes[lane_id]
        alias = by_text.get((str(lane.pid), str(lane.tid)), -1)
        if alias >= 0:
            out[out == lane_id] = alias
    return out


def range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo[i]:hi[i]]) for each i; NO_VALUE for empty ranges."""
    out = np.full(len(lo), NO_VALUE, dtype=np.int64)
    keep = np.flatnonzero(hi > lo)
    if not len(keep):
        return out
    padded = np.append(values, NO_VALUE)  # so that hi == len(values) is a valid index
    bounds = np.empty(2 * len(keep), dtype=np.int64)
    bounds[0::2] = lo[keep]
    bounds[1::2] = hi[keep]
    # reduceat reduces [bounds[k], bounds[k + 1]); the even k are our ranges.
    out[keep] = np.maximum.reduceat(padded, bounds)[0::2]
    return out


@dataclass(frozen=True)
class OperatorMemory:
    """Per CPU (cat, name) group (indexed like the Groups it was computed with); int64 bytes.

    Self columns count the events whose innermost slice is an instance of the group; the
    inclusive ones also count every event below an instance, each event once per group."""

    allocations: np.ndarray  # self: number of allocations
    allocated: np.ndarray  # self: bytes allocated
    frees: np.ndarray  # self: number of frees
    freed: np.ndarray  # self: bytes freed (positive)
    self_net: np.ndarray  # self: allocated - freed
    incl_allocations: np.ndarray
    incl_allocated: np.ndarray
    incl_net: np.ndarray
    peak_live: np.ndarray  # largest allocated total while an instance ran; NO_VALUE: unknown
    peak_row: np.ndarray  # the instance (row) that saw peak_live, -1
    unfreed: np.ndarray  # self: allocations never freed in the trace
    unfreed_bytes: np.ndarray
    # Each allocation's lifetime (matched by address, `Allocations`) attributed to the group
    # that owns the allocation: the bytes it freed itself, those another operator (or no
    # operator) freed, and the most of its allocations live at one time. NO_VALUE where the
    # trace records no addresses (nothing can be matched).
    freed_own: np.ndarray  # bytes of its allocations freed by an instance of the group
    handed_off: np.ndarray  # bytes of its allocations freed elsewhere (left for others)
    handed_off_count: np.ndarray  # how many such allocations
    freer: np.ndarray  # the group that freed the most of those bytes; -1: none (or no operator)
    freer_bytes: np.ndarray  # the bytes it freed
    held_most: np.ndarray  # the most bytes of its allocations live at one time

    def __len__(self) -> int:
        return len(self.allocations)

    def active(self) -> np.ndarray:
        """Groups with any memory event at or below them."""
        return np.flatnonzero((self.incl_allocations > 0) | (self.frees > 0) | (self.incl_net != 0))


@dataclass(frozen=True)
class Allocations:
    """Every allocation of one device (positions into the DeviceMemory arrays, by time)."""

    event: np.ndarray  # int64 position of the allocation
    free: np.ndarray  # int64 position of the matching free, -1 when none
    state: np.ndarray  # int8 FREED / NEVER_FREED / REUSED
    lifetime: np.ndarray  # int64 ns from allocation to free; -1 when not freed
    frees_without_allocation: int  # frees of memory allocated before the trace began
    addresses_known: bool  # False for old traces without `Addr`: nothing can be matched

    def __len__(self) -> int:
        return len(self.event)

    @property
    def never_freed(self) -> np.ndarray:
        """Positions (into `event`) of leak suspects, largest first (ties: earliest first)."""
        return np.flatnonzero(self.state == NEVER_FREED)


@dataclass(frozen=True)
class DeviceMemory:
    """The timed `[memory]` events of one (device type, device id), ordered by (ts, file order).

    `allocated` is `Total Allocated` after each event; where the trace did not record it, it
    continues from the last recorded value by `Bytes` (from 0 when nothing was recorded, so the
    curve is then relative to the start of the trace)."""

    device_type: int | None
    device_id: int | None
    events: np.ndarray  # int64 indices into trace.memory
    ts: np.ndarray  # int64 ns
    bytes: np.ndarray  # int64; 0 where missing
    allocated: np.ndarray  # int64
    reserved: np.ndarray  # int64; NO_VALUE until the first recorded value
    allocated_recorded: bool
    owner: np.ndarray  # int64 row of the innermost CPU slice holding each event, -1
    owner_pos: np.ndarray  # the same as a position in the nesting order, -1
    peak: int  # position of the largest `allocated` (first of equals), -1 when empty
    peak_reserved: int  # position of the largest `reserved`, -1 when none recorded
    peak_step: int  # row of the step slice whose [start, end) holds the peak, -1
    ops: OperatorMemory
    allocations: Allocations

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def label(self) -> str:
        return device_label(self.device_type, self.device_id)

    @property
    def is_accelerator(self) -> bool:
        return self.device_type is not None and self.device_type != 0

    def level_at(self, t: int) -> int:
        """Position of the last event at or before t (the one that set the level at t), or -1."""
        return int(np.searchsorted(self.ts, t, side="right")) - 1

    def column_max(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per window [edges[i], edges[i+1]): the largest allocated and reserved level reached
        in it (the level entering the window counts); NO_VALUE before the first event."""
        first = np.searchsorted(self.ts, edges[:-1], side="right") - 1  # level entering
        stop = np.searchsorted(self.ts, edges[1:], side="left")
        lo = np.maximum(first, 0)
        hi = np.maximum(stop, lo)
        # Windows before any event but holding some start from the first event in them.
        alloc = range_max(self.allocated, lo, hi)
        reserved = range_max(self.reserved, lo, hi)
        entering_missing = (first < 0) & (stop <= 0)
        alloc[entering_missing] = NO_VALUE
        reserved[entering_missing] = NO_VALUE
        return alloc, reserved


@dataclass(frozen=True)
class MemoryOps:
    devices: list[DeviceMemory]
    groups: Groups  # the CPU groups the per-operator arrays follow

    def __bool__(self) -> bool:
        return bool(self.devices)

    @property
    def primary(self) -> DeviceMemory | None:
        """The device people mean by "memory": the accelerator with the highest peak, else the
        device with the highest peak."""
        if not self.devices:
            return None

        def peak_of(dev: DeviceMemory) -> int:
            return int(dev.allocated[dev.peak]) if dev.peak >= 0 else -1

        accelerators = [d for d in self.devices if d.is_accelerator and len(d)]
        pool = accelerators or self.devices
        return max(pool, key=peak_of)

    def device(self, device_type: int | None, device_id: int | None) -> DeviceMemory | None:
        for dev in self.devices:
            if dev.device_type == device_type and dev.device_id == device_id:
                return dev
        return None


def _forward_fill(recorded: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, bool]:
    """Recorded totals where present; elsewhere the last recorded total plus the deltas since."""
    present = recorded != NO_VALUE
    running = np.cumsum(deltas)
    if not present.any():
        return running, False
    index = np.where(present, np.arange(len(recorded)), -1)
    last = np.maximum.accumulate(index)
    anchor = np.maximum(last, 0)
    filled = np.where(last >= 0, recorded[anchor] + (running - running[anchor]), 0)
    # Before the first recorded value, walk back from it instead of up from 0.
    first = int(np.argmax(present))
    if first > 0:
        filled[:first] = recorded[first] - (running[first] - running[:first])
    return filled.astype(np.int64), True


def _fill_reserved(recorded: np.ndarray) -> np.ndarray:
    present = recorded != NO_VALUE
    if not present.any():
        return recorded.copy()
    index = np.where(present, np.arange(len(recorded)), -1)
    last = np.maximum.accumulate(index)
    return np.where(last >= 0, recorded[np.maximum(last, 0)], NO_VALUE).astype(np.int64)


def match_allocations(
    ts: np.ndarray, nbytes: np.ndarray, addr: np.ndarray, addresses_known: bool
) -> Allocations:
    """Pair each allocation with the next event at its address when that is a free."""
    alloc = np.flatnonzero(nbytes > 0)
    n = len(ts)
    free_of = np.full(n, -1, dtype=np.int64)
    state_of = np.full(n, REUSED if not addresses_known else NEVER_FREED, dtype=np.int8)
    orphan_frees = 0
    if addresses_known and n:
        signed = np.flatnonzero(nbytes != 0)
        by_addr = signed[np.lexsort((signed, addr[signed]))]  # (addr, time order)
        same_next = np.zeros(len(by_addr), dtype=bool)
        same_next[:-1] = addr[by_addr[1:]] == addr[by_addr[:-1]]
        is_alloc = nbytes[by_addr] > 0
        next_is_free = np.zeros(len(by_addr), dtype=bool)
        next_is_free[:-1] = nbytes[by_addr[1:]] < 0
        freed = is_alloc & same_next & next_is_free
        reused = is_alloc & same_next & ~next_is_free
        here = by_addr[freed]
        free_of[here] = by_addr[np.flatnonzero(freed) + 1]
        state_of[here] = FREED
        state_of[by_addr[reused]] = REUSED
        # A free whose previous event at the address is not an allocation (or that has none).
        prev_is_alloc = np.zeros(len(by_addr), dtype=bool)
        prev_is_alloc[1:] = is_alloc[:-1] & same_next[:-1]
        orphan_frees = int((~is_alloc & ~prev_is_alloc).sum())
    free = free_of[alloc]
    lifetime = np.where(free >= 0, ts[np.maximum(free, 0)] - ts[alloc], -1)
    return Allocations(
        event=alloc.astype(np.int64),
        free=free,
        state=state_of[alloc],
        lifetime=lifetime.astype(np.int64),
        frees_without_allocation=orphan_frees,
        addresses_known=addresses_known,
    )


OUTER_BLOCK = 1 << 19  # positions scanned for outermost instances at a time


class _Outermost:
    """The groups of positions and the outermost instances (those with no ancestor of their own
    group), the same for every device. Neither is made for every position at once: at 4 GB a
    group per position and the outermost positions were some 60 MB held through this stage,
    which runs beside others near the summary's peak of memory."""

    def __init__(self, nesting: Nesting, groups: Groups) -> None:
        self.nesting = nesting
        self.groups = groups

    def group(self, positions: np.ndarray) -> np.ndarray:
        """The group (int32) of each position."""
        return self.groups.index[self.nesting.order[positions]]

    def blocks(self) -> Iterator[np.ndarray]:
        """The outermost instances' positions, ascending, OUTER_BLOCK positions at a time."""
        outermost = self.nesting.outermost
        for lo in range(0, len(outermost), OUTER_BLOCK):
            outer = np.flatnonzero(outermost[lo : lo + OUTER_BLOCK])
            if len(outer):
                yield outer + lo


@dataclass
class _DeviceEvents:
    """One device's events as the per-operator columns need them (see _operator_memory)."""

    owner_pos: np.ndarray
    nbytes: np.ndarray
    ts: np.ndarray
    allocated: np.ndarray
    allocations: Allocations
    fits: bool  # every sum of `nbytes` fits int64 (else sums are taken in Python integers)


class _InstanceSums:
    """The inclusive sums and the peaks of one device, gathered a block of outermost instances
    at a time (see `_instance_blocks`): the running state between blocks."""

    def __init__(self, dev: _DeviceEvents, n_groups: int) -> None:
        self.dev = dev
        self.n_groups = n_groups
        self.peak_live = np.full(n_groups, NO_VALUE, dtype=np.int64)
        self.peak_start = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
        self.peak_row = np.full(n_groups, -1, dtype=np.int64)
        ts, allocated = dev.ts, dev.allocated
        self.after = np.append(ts, np.iinfo(np.int64).max)  # the event at or after a start
        # The level entering a start: that of the event before it; NO_VALUE before any.
        self.entering = np.concatenate(([NO_VALUE], allocated))
        # The events inside operators, by position; prefix sums of what the inclusive columns
        # add (allocations, bytes allocated, net bytes).
        owner_pos, nbytes, fits = dev.owner_pos, dev.nbytes, dev.fits
        events = np.flatnonzero(owner_pos >= 0)
        events = events[np.argsort(owner_pos[events], kind="stable")]
        self.at = owner_pos[events]
        # Past the last event: never before a subtree's stop (an instance after every event).
        self.at_padded = np.append(self.at, np.iinfo(np.int64).max)
        nb = nbytes[events]
        is_alloc = nb > 0
        self.sums = [
            cumulative(is_alloc.astype(np.int64), fits),
            cumulative(np.where(is_alloc, nb, 0), fits),
            cumulative(np.where(is_alloc | (nb < 0), nb, 0), fits),
        ]
        self.outs = [np.zeros(n_groups, dtype=np.int64) for _ in self.sums]

    def release(self) -> None:
        """Drop the per-event arrays the blocks were walked with (at 4 GB some 80 MB over both
        devices, which sat under the per-operator columns made after the walk); the per-group
        results stay."""
        empty = np.zeros(0, dtype=np.int64)
        self.after = self.entering = self.at = self.at_padded = empty
        self.sums = []

    def add_block(
        self,
        outer: np.ndarray,
        rows: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        stop: np.ndarray,
        g: np.ndarray,
        backwards: np.ndarray,
        runs: np.ndarray,
    ) -> None:
        self._inclusive(outer, stop, g)
        self._peaks(rows, start, end, g, backwards, runs)

    def _inclusive(self, outer: np.ndarray, stop: np.ndarray, g: np.ndarray) -> None:
        """Per group, the sums over the events inside the subtrees of its outermost instances.
        Subtrees are contiguous position ranges, and outermost instances of one group never
        nest, so this counts each event once per group. Each instance's first event is found
        by counting (the instances' positions ascend: the fewer events are placed among them,
        not a search per instance), the end of its range by bisection for just the instances
        that hold events."""
        at = self.at
        if not len(at):
            return
        placed = np.searchsorted(outer, at, side="right")
        lo = np.cumsum(np.bincount(placed, minlength=len(outer) + 1)[: len(outer)])
        some = np.flatnonzero(self.at_padded[lo] < stop)
        if not len(some):
            return
        lo, group = lo[some], g[some]
        hi = np.searchsorted(at, stop[some], side="left")
        fits = self.dev.fits
        for k, prefix in enumerate(self.sums):
            self.outs[k] = add_at(self.outs[k], group, prefix[hi] - prefix[lo], fits)

    def _peaks(
        self,
        rows: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        g: np.ndarray,
        backwards: np.ndarray,
        runs: np.ndarray,
    ) -> None:
        """Per group: the largest level while one of its outermost instances ran (the level
        entering its start, and every event up to its end), and the instance (row) that saw
        it first in time (then first in position among equals); NO_VALUE and -1 where none did.

        Column-wise and without sorting the instances: most contain no event, and their level
        is the one entering them (one gather); only those that hold events take a range
        maximum. Per group the best is found by `ufunc.at` reductions (highest level, then
        earliest start among those, then first position), each a pass over the instances, not
        a sort of them."""
        ts, allocated, n_groups = self.dev.ts, self.dev.allocated, self.n_groups
        if not len(ts):
            return
        first = _first_at_or_after(ts, start, runs)  # the first event at or after the start
        seen = self.entering[first]
        # Only instances with an event inside reach past it: their end is searched for alone.
        inside = np.flatnonzero(self.after[first] < end)
        if len(inside):
            lo = np.maximum(first[inside] - 1, 0)
            seen[inside] = range_max(allocated, lo, np.searchsorted(ts, end[inside], side="left"))
        if len(backwards):  # no range from the event before the start to before the end
            before_end = np.searchsorted(ts, end[backwards], side="left")
            seen[backwards[before_end < first[backwards]]] = NO_VALUE
        del first
        # Per group the highest value, then the earliest start among those, then the first.
        best = np.full(n_groups, NO_VALUE, dtype=np.int64)
        np.maximum.at(best, g, seen)
        top = np.flatnonzero(seen == best[g])
        top = top[seen[top] != NO_VALUE]
        if not len(top):
            return
        earliest = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(earliest, g[top], start[top])
        top = top[start[top] == earliest[g[top]]]
        chosen = np.full(n_groups, len(rows), dtype=np.int64)
        np.minimum.at(chosen, g[top], top)
        groups_here = np.flatnonzero(chosen < len(rows))
        firsts = chosen[groups_here]
        value, when = seen[firsts], start[firsts]
        peak_live, peak_start = self.peak_live, self.peak_start
        better = (value > peak_live[groups_here]) | (
            (value == peak_live[groups_here]) & (when < peak_start[groups_here])
        )
        winners = groups_here[better]
        peak_live[winners] = value[better]
        peak_start[winners] = when[better]
        self.peak_row[winners] = rows[firsts[better]]


def _first_at_or_after(ts: np.ndarray, start: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """`np.searchsorted(ts, start, side="left")`, where `runs` (ascending, from 0 to
    len(start)) cut `start` into ascending runs. A run much longer than `ts` is answered by
    counting instead: the events placed among its starts (one search per event), each start's
    answer the number placed at or before it (a running sum), not a search per start."""
    lengths = np.diff(runs)
    long = np.flatnonzero(lengths > 4 * len(ts))
    if not len(long):
        return np.searchsorted(ts, start, side="left")
    if int(lengths[long].sum()) < len(start):
        first = np.searchsorted(ts, start, side="left")
    else:
        first = np.empty(len(start), dtype=np.int64)
    for a, b in zip(runs[long].tolist(), runs[long + 1].tolist()):
        placed = np.searchsorted(start[a:b], ts, side="right")  # ts < start[i] iff placed <= i
        first[a:b] = np.cumsum(np.bincount(placed, minlength=b - a + 1)[: b - a])
    return first


def _instance_blocks(
    trace: Trace,
    nesting: Nesting,
    outermost: _Outermost,
    devices: list[_InstanceSums],
) -> None:
    """Walk the outermost instances a block at a time (a 1 GB trace has millions of them, and
    whole-trace temporaries for each would set the peak memory of the summary), gathering each
    block's rows, times, subtree stops and groups once for every device."""
    for outer in outermost.blocks():
        rows = nesting.order[outer]
        start = trace.start[rows]
        end = start + trace.dur[rows]
        stop = nesting.subtree_stop[outer]
        g = outermost.group(outer)
        backwards = np.flatnonzero(end < start)  # none in a parsed trace (counted as 0 there)
        # Where each lane's instances begin in the block: within a lane the starts ascend.
        runs = np.unique(np.searchsorted(outer, nesting.lane_start, side="left"))
        for sums in devices:
            sums.add_block(outer, rows, start, end, stop, g, backwards, runs)


def _operator_memory(
    groups: Groups,
    outermost: _Outermost,
    dev: _DeviceEvents,
    sums: _InstanceSums,
) -> OperatorMemory:
    """A device's per-operator columns: the self ones from each event's owner, the inclusive
    ones and the peaks from the instance blocks already walked (`sums`)."""
    n_groups = len(groups)
    owner_pos, nbytes, fits, allocations = dev.owner_pos, dev.nbytes, dev.fits, dev.allocations
    owned = owner_pos >= 0
    owner_group = outermost.group(owner_pos[owned])

    def per_group(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = np.zeros(n_groups, dtype=np.int64)
        pick = mask[owned]
        return add_at(out, owner_group[pick], values[owned][pick], fits)

    is_alloc = nbytes > 0
    is_free = nbytes < 0
    ones = np.ones(len(nbytes), dtype=np.int64)
    unfreed_mask = np.zeros(len(nbytes), dtype=bool)
    unfreed_mask[allocations.event[allocations.state == NEVER_FREED]] = True
    lifetimes = _lifetimes(outermost.group, owner_pos, nbytes, allocations, n_groups, fits)
    incl_allocations, incl_allocated, incl_net = sums.outs
    return OperatorMemory(
        allocations=per_group(ones, is_alloc),
        allocated=per_group(nbytes, is_alloc),
        frees=per_group(ones, is_free),
        freed=per_group(-nbytes, is_free),
        self_net=per_group(nbytes, is_alloc | is_free),
        incl_allocations=incl_allocations,
        incl_allocated=incl_allocated,
        incl_net=incl_net,
        peak_live=sums.peak_live,
        peak_row=sums.peak_row,
        unfreed=per_group(ones, unfreed_mask),
        unfreed_bytes=per_group(nbytes, unfreed_mask),
        **lifetimes,
    )


def _lifetimes(
    group_at: Callable[[np.ndarray], np.ndarray],
    owner_pos: np.ndarray,
    nbytes: np.ndarray,
    allocations: Allocations,
    n_groups: int,
    fits: bool,
) -> dict[str, np.ndarray]:
    """Per group: its allocations' bytes freed by itself and by others, who freed the most of
    the others', and the most of its allocations live at once (see OperatorMemory). All by
    sorting: allocations by (group, freeing group), their +bytes/-bytes by (group, time)."""
    unknown = np.full(n_groups, NO_VALUE, dtype=np.int64)
    if not allocations.addresses_known:
        return {
            "freed_own": unknown,
            "handed_off": unknown,
            "handed_off_count": unknown.copy(),
            "freer": np.full(n_groups, -1, dtype=np.int64),
            "freer_bytes": unknown.copy(),
            "held_most": unknown.copy(),
        }

    def group_of(positions: np.ndarray) -> np.ndarray:
        owners = owner_pos[positions]
        out = np.full(len(positions), -1, dtype=np.int64)
        inside = owners >= 0
        out[inside] = group_at(owners[inside])
        return out

    event, free = allocations.event, allocations.free
    size = nbytes[event]
    by = group_of(event)  # the allocating group, -1: no operator
    freed = free >= 0
    freer = np.full(len(event), -2, dtype=np.int64)  # -2: never freed, -1: by no operator
    freer[freed] = group_of(free[freed])
    mine = by >= 0
    own = mine & freed & (freer == by)
    elsewhere = mine & freed & (freer != by)

    def per_group(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return add_at(np.zeros(n_groups, dtype=np.int64), by[mask], values[mask], fits)

    freed_own = per_group(size, own)
    handed_off = per_group(size, elsewhere)
    handed_off_count = per_group(np.ones(len(event), dtype=np.int64), elsewhere)

    # Who freed the most of each group's handed-off bytes: sums per (group, freer) pair.
    top = np.full(n_groups, -1, dtype=np.int64)
    top_bytes = np.zeros(n_groups, dtype=np.int64)
    pick = np.flatnonzero(elsewhere)
    if len(pick):
        key = by[pick] * (n_groups + 1) + (freer[pick] + 1)
        order = np.argsort(key, kind="stable")
        key_sorted = key[order]
        starts = np.flatnonzero(np.concatenate(([True], key_sorted[1:] != key_sorted[:-1])))
        sums = np.add.reduceat(size[pick][order].astype(np.float64), starts)  # ranking only
        exact = np.add.reduceat(size[pick][order].astype(object), starts) if not fits else None
        pair = key_sorted[starts]
        group, freeing = pair // (n_groups + 1), pair % (n_groups + 1) - 1
        best = np.lexsort((freeing, -sums, group))
        first = best[np.concatenate(([True], group[best][1:] != group[best][:-1]))]
        top[group[first]] = freeing[first]
        if exact is None:
            top_bytes[group[first]] = np.add.reduceat(size[pick][order], starts)[first]
        else:
            top_bytes = top_bytes.astype(object)
            top_bytes[group[first]] = exact[first]

    # The most of a group's allocations live at once: +bytes at each allocation, -bytes at its
    # free, in time (event position) order within the group; the largest running sum.
    held_most = np.zeros(n_groups, dtype=np.int64)
    alloc_pick = np.flatnonzero(mine)
    free_pick = np.flatnonzero(mine & freed)
    if len(alloc_pick):
        group = np.concatenate((by[alloc_pick], by[free_pick]))
        when = np.concatenate((event[alloc_pick], free[free_pick]))
        delta = np.concatenate((size[alloc_pick], -size[free_pick]))
        order = np.lexsort((when, group))
        group, delta = group[order], delta[order]
        running = cumulative(delta, fits)[1:]
        starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
        before = cumulative(delta, fits)[starts]  # the running sum entering each group
        first_of = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(group))))
        level = running - before[first_of]
        most = np.maximum.reduceat(level, starts) if fits else _object_max(level, starts)
        held_most = held_most.astype(object) if not fits else held_most
        held_most[group[starts]] = most
    return {
        "freed_own": freed_own,
        "handed_off": handed_off,
        "handed_off_count": handed_off_count,
        "freer": top,
        "freer_bytes": top_bytes,
        "held_most": held_most,
    }


def _object_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """np.maximum.reduceat for an array of Python integers."""
    stops = np.append(starts[1:], len(values))
    return np.array([max(values[a:b].tolist()) for a, b in zip(starts, stops)], dtype=object)


def step_holding(trace: Trace, step_rows: np.ndarray, t: int) -> int:
    """The step slice (row) with start <= t < end, the latest-starting one if several; -1."""
    if not len(step_rows):
        return -1
    start = trace.start[step_rows]
    inside = np.flatnonzero((start <= t) & (t < start + trace.dur[step_rows]))
    return int(step_rows[inside[-1]]) if len(inside) else -1


def compute_memory_ops(
    trace: Trace, nesting: Nesting, groups: Groups, step_rows: np.ndarray
) -> MemoryOps:
    """Per device: the curve, peak and owners; per operator group: allocations and net bytes.

    `groups` must be the CPU groups `nesting` was built with; `step_rows` the step slices."""
    memory: MemoryEvents = trace.memory
    groups_memory = compute_memory(memory)
    outermost = _Outermost(nesting, groups)
    prepared = []
    for group in groups_memory:
        idx = group.indices[memory.ts[group.indices] != NO_VALUE]
        idx = idx[np.lexsort((memory.ordinal[idx], memory.ts[idx]))]
        prepared.append((group, idx, memory.ts[idx]))
    # Every device's owners in one search (each event's alone: the answer is the same), so
    # that each lane's starts are gathered once, not once per device.
    lanes = [cpu_lanes_for(trace, nesting, memory.lane[idx]) for _group, idx, _ts in prepared]
    owners = nesting.innermost(
        trace,
        np.concatenate(lanes) if lanes else np.zeros(0, np.int64),
        np.concatenate([ts for *_, ts in prepared]) if prepared else np.zeros(0, np.int64),
    )
    del lanes
    found = []
    taken = 0
    for group, idx, ts in prepared:
        owner_pos = owners[taken : taken + len(idx)]
        taken += len(idx)
        raw_bytes = memory.bytes[idx]
        nbytes = np.where(raw_bytes == NO_VALUE, 0, raw_bytes).astype(np.int64)
        if len(idx):
            allocated, recorded = _forward_fill(memory.total_allocated[idx], nbytes)
        else:
            allocated, recorded = np.zeros(0, np.int64), False
        reserved = _fill_reserved(memory.total_reserved[idx])
        addr = memory.addr[idx]
        addresses_known = bool(len(idx)) and bool((addr[nbytes != 0] != NO_VALUE).all())
        allocations = match_allocations(ts, nbytes, addr, addresses_known)
        # Byte counts near 2**63 are valid: their sums are then taken in Python integers.
        events = _DeviceEvents(owner_pos, nbytes, ts, allocated, allocations, sums_fit(nbytes))
        found.append((group, idx, reserved, recorded, events))
    # The peaks and inclusive sums of every device in one walk over the outermost instances.
    sums = [_InstanceSums(events, len(groups)) for *_, events in found]
    if found:
        _instance_blocks(trace, nesting, outermost, sums)
    for device_sums in sums:  # only the per-group results are read from here on
        device_sums.release()
    devices: list[DeviceMemory] = []
    for (group, idx, reserved, recorded, events), device_sums in zip(found, sums):
        ts, owner_pos, allocated = events.ts, events.owner_pos, events.allocated
        owner = np.full(len(idx), -1, dtype=np.int64)
        owner[owner_pos >= 0] = nesting.order[owner_pos[owner_pos >= 0]]
        peak = int(np.argmax(allocated)) if len(idx) else -1
        has_reserved = np.flatnonzero(reserved != NO_VALUE)
        peak_reserved = (
            int(has_reserved[np.argmax(reserved[has_reserved])]) if len(has_reserved) else -1
        )
        devices.append(
            DeviceMemory(
                device_type=group.device_type,
                device_id=group.device_id,
                events=idx.astype(np.int64),
                ts=ts,
                bytes=events.nbytes,
                allocated=allocated,
                reserved=reserved,
                allocated_recorded=recorded,
                owner=owner,
                owner_pos=owner_pos,
                peak=peak,
                peak_reserved=peak_reserved,
                peak_step=step_holding(trace, step_rows, int(ts[peak])) if peak >= 0 else -1,
                ops=_operator_memory(groups, outermost, events, device_sums),
                allocations=events.allocations,
            )
        )
    return MemoryOps(devices=devices, groups=groups)


# -- the summary's extra keys ------------------------------------------------------------------

TOP_MEMORY_OPS = 50


def _names(trace: Trace, rows: list[int]) -> list[str]:
    return [trace.name_of(r) for r in rows]


def peak_fields(trace: Trace, nesting: Nesting, dev: DeviceMemory | None) -> dict[str, Any]:
    """Extra fields for a `memory` entry: when the peak happened, in which operator and step."""
    if dev is None or dev.peak < 0:
        return {
            "peak_ts_us": None,
            "peak_operator": None,
            "peak_stack": [],
            "peak_step": None,
            "unfreed_allocations": 0,
            "unfreed_bytes": 0,
        }
    owner = int(dev.owner[dev.peak])
    stack = [*nesting.ancestors(owner), owner] if owner >= 0 else []
    never = dev.allocations.never_freed
    return {
        "peak_ts_us": _us(dev.ts[dev.peak]),
        "peak_operator": trace.name_of(owner) if owner >= 0 else None,
        "peak_stack": _names(trace, stack),
        "peak_step": trace.name_of(dev.peak_step) if dev.peak_step >= 0 else None,
        "unfreed_allocations": int(len(never)) if dev.allocations.addresses_known else None,
        "unfreed_bytes": (
            sum(dev.bytes[dev.allocations.event[never]].tolist())  # exact, even near 2**63
            if dev.allocations.addresses_known
            else None
        ),
    }


def memory_ops_section(
    trace: Trace, ops: MemoryOps, limit: int = TOP_MEMORY_OPS
) -> list[dict[str, Any]]:
    """The top allocating operator groups of every device: by self bytes allocated, then by
    inclusive bytes allocated, then (cat, name)."""
    out: list[dict[str, Any]] = []
    groups = ops.groups
    for dev in ops.devices:
        table = dev.ops
        active = table.active()
        cats = [trace.strings[int(groups.cat[g])] for g in active]
        names = [trace.strings[int(groups.name[g])] for g in active]
        ranked = sorted(
            range(len(active)),
            key=lambda i: (
                -int(table.allocated[active[i]]),
                -int(table.incl_allocated[active[i]]),
                cats[i],
                names[i],
            ),
        )[:limit]
        for i in ranked:
            g = int(active[i])
            peak = int(table.peak_live[g])
            out.append(
                {
                    "device_type": dev.device_type,
                    "device_id": dev.device_id,
                    "cat": cats[i],
                    "name": names[i],
                    "allocations": int(table.allocations[g]),
                    "allocated_bytes": int(table.allocated[g]),
                    "frees": int(table.frees[g]),
                    "freed_bytes": int(table.freed[g]),
                    "self_net_bytes": int(table.self_net[g]),
                    "incl_allocated_bytes": int(table.incl_allocated[g]),
                    "incl_net_bytes": int(table.incl_net[g]),
                    "peak_live_bytes": None if peak == NO_VALUE else peak,
                    "unfreed_allocations": int(table.unfreed[g]),
                    "unfreed_bytes": int(table.unfreed_bytes[g]),
                    **lifetime_fields(trace, groups, table, g),
                }
            )
    return out


def lifetime_fields(trace: Trace, groups: Groups, table: OperatorMemory, g: int) -> dict:
    """A group's allocations' lifetimes for the summary: `freed_own_bytes`,
    `freed_by_others_bytes` (and `_allocations`), `mostly_freed_by` ({cat, name, bytes}; name
    null for frees outside any operator) and `held_at_most_bytes`; null without addresses."""
    if table.held_most[g] == NO_VALUE:
        return {
            "freed_own_bytes": None,
            "freed_by_others_bytes": None,
            "freed_by_others_allocations": None,
            "mostly_freed_by": None,
            "held_at_most_bytes": None,
        }
    freer = int(table.freer[g])
    by = None
    if int(table.handed_off_count[g]) > 0:
        by = {
            "cat": trace.strings[int(groups.cat[freer])] if freer >= 0 else None,
            "name": trace.strings[int(groups.name[freer])] if freer >= 0 else None,
            "bytes": int(table.freer_bytes[g]),
        }
    return {
        "freed_own_bytes": int(table.freed_own[g]),
        "freed_by_others_bytes": int(table.handed_off[g]),
        "freed_by_others_allocations": int(table.handed_off_count[g]),
        "mostly_freed_by": by,
        "held_at_most_bytes": int(table.held_most[g]),
    }


def group_columns(ops: MemoryOps, dev: DeviceMemory, groups: Groups) -> dict[str, np.ndarray]:
    """The memory columns of one device aligned to another grouping of the same CPU slices
    (matched by (cat, name) string ids), for tables that group operators themselves.
    Groups without memory activity get 0 (NO_VALUE for `peak_live`)."""
    mine = ops.groups
    width = np.int64(max(int(mine.name.max(initial=0)), int(groups.name.max(initial=0))) + 1)
    my_keys = mine.cat.astype(np.int64) * width + mine.name
    their_keys = groups.cat.astype(np.int64) * width + groups.name
    order = np.argsort(my_keys)
    slot = np.searchsorted(my_keys[order], their_keys)
    slot = np.minimum(slot, max(len(order) - 1, 0))
    found = (
        (my_keys[order][slot] == their_keys) if len(order) else np.zeros(len(groups), dtype=bool)
    )
    source = order[slot] if len(order) else slot
    out: dict[str, np.ndarray] = {}
    for name in (
        "allocations",
        "allocated",
        "frees",
        "freed",
        "self_net",
        "incl_allocated",
        "incl_net",
        "peak_live",
        "unfreed",
        "unfreed_bytes",
    ):
        values = getattr(dev.ops, name)
        empty = NO_VALUE if name == "peak_live" else 0
        out[name] = np.where(found, values[source] if len(values) else empty, empty)
    return out
