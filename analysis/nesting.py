"""Nesting of CPU slices per lane: parent, depth, subtree, self time, outermost-for-group.

The spec's stack walk sorts a lane's slices by (start asc, end desc, file order asc) and, before
pushing a slice, pops every slice whose end is before the new slice's end. The stack then always
has non-increasing ends from bottom to top, so the walk pops exactly the slices with a smaller
end, and the parent of a slice is the nearest earlier slice (in that order) whose end is at least
its own. Likewise a slice stays on the stack, i.e. is an ancestor of everything pushed, until the
first later slice with a strictly greater end. Both are nearest-greater searches, done here with
vectorised pointer jumping instead of a per-slice Python loop. The sorted order is a preorder, so
every subtree is a contiguous range of positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from kinetoscope.parser.model import Trace

from .intervals import (
    nesting_depth,
    previous_at_least,
    slice_order,
    sorted_unique,
    stable_order,
    subtree_stops,
)

# Steps of `Nesting.slices_at`'s walk before it filters the rest in one numpy pass.
SLICES_AT_WALK = 4096
# Positions of a lane whose starts `Nesting.last_starting_by` reads at a time.
SEARCH_BLOCK = 1 << 20
# Positions `outermost_positions` orders by group at a time.
OUTERMOST_BLOCK = 1 << 20


@dataclass(frozen=True)
class Nesting:
    """The forest of CPU slices. Per-position arrays follow `order`; per-row arrays the trace."""

    order: np.ndarray  # int64 rows of CPU slices by (lane, start, -end, row): a preorder
    parent_pos: np.ndarray  # int64 per position: parent's position, -1 for roots
    subtree_stop: np.ndarray  # int64 per position: one past the subtree's last position
    self_time: np.ndarray  # int64 per position
    outermost: np.ndarray  # bool per position: no ancestor has the same (cat, name)
    position: np.ndarray  # int64 per row: the row's position, -1 for rows that are not CPU slices
    parent: np.ndarray  # int32 per row: the parent row, -1 for roots and non-CPU rows
    lane_ids: np.ndarray  # lanes that hold CPU slices, ascending
    lane_start: np.ndarray  # first position of each of those lanes (plus a final end)
    # `depth` and `lane_of`, made on first use: the summary needs neither, and at 4 GB they are
    # some 80 MB that would sit under its peak of memory.
    _made: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def depth(self) -> np.ndarray:
        """int32 per row: 0 for roots, -1 for rows that are not CPU slices."""
        depth = self._made.get("depth")
        if depth is None:
            depth = np.full(len(self.position), -1, dtype=np.int32)
            depth[self.order] = nesting_depth(self.subtree_stop)
            self._made["depth"] = depth
        return depth

    @property
    def lane_of(self) -> np.ndarray:
        """The lane of each position (the trace's lane dtype)."""
        lane = self._made.get("lane_of")
        if lane is None:
            lane = np.repeat(self.lane_ids, np.diff(self.lane_start))
            self._made["lane_of"] = lane
        return lane

    def lane_range(self, lane: int) -> tuple[int, int]:
        """Positions [lo, hi) of a lane's CPU slices (empty when the lane has none)."""
        i = int(np.searchsorted(self.lane_ids, lane))
        if i >= len(self.lane_ids) or self.lane_ids[i] != lane:
            return 0, 0
        return int(self.lane_start[i]), int(self.lane_start[i + 1])

    def children(self, row: int) -> np.ndarray:
        """Rows of the children of a CPU slice, in order."""
        pos = int(self.position[row])
        if pos < 0:
            return np.zeros(0, np.int64)
        inside = np.arange(pos + 1, int(self.subtree_stop[pos]))
        return self.order[inside[self.parent_pos[inside] == pos]]

    def descendants(self, row: int) -> np.ndarray:
        """Rows of every slice below a CPU slice (never the slice itself), in order."""
        pos = int(self.position[row])
        if pos < 0:
            return np.zeros(0, np.int64)
        return self.order[pos + 1 : int(self.subtree_stop[pos])]

    def ancestors(self, row: int) -> list[int]:
        """Rows of the ancestors of a slice, outermost first."""
        chain = []
        parent = int(self.parent[row])
        while parent >= 0:
            chain.append(parent)
            parent = int(self.parent[parent])
        return chain[::-1]

    def slices_at(self, trace: Trace, lane: int, t: int) -> np.ndarray:
        """Rows of the lane's CPU slices with start <= t < end, outermost first."""
        first, hi = self.lane_range(lane)
        # Within a lane, positions are sorted by start: bisect on them, reading only the
        # starts it visits, then look at the ends of the slices that start by t.
        start, order = trace.start, self.order
        lo = first
        while lo < hi:
            mid = (lo + hi) // 2
            if start[order[mid]] <= t:
                lo = mid + 1
            else:
                hi = mid
        # The slices that start by t, walked in order; a slice that ends by t is skipped with
        # its whole subtree (a descendant never ends after its ancestor), so the walk visits
        # the slices holding t and the siblings along the way, not every slice before t.
        # A lane of many short top-level slices makes the walk long: the rest is then
        # filtered in one pass.
        dur, stop = trace.dur, self.subtree_stop
        found: list[int] = []
        pos, steps = first, 0
        while pos < lo and steps < SLICES_AT_WALK:
            row = int(order[pos])
            if int(start[row]) + int(dur[row]) > t:
                found.append(row)
                pos += 1
            else:
                pos = int(stop[pos])
            steps += 1
        rest = order[min(pos, lo) : lo]
        return np.concatenate(
            (np.array(found, dtype=order.dtype), rest[start[rest] + dur[rest] > t])
        )

    def last_starting_by(self, trace: Trace, lane: int, times: np.ndarray) -> np.ndarray:
        """Per time t: the position of the lane's last CPU slice with start <= t, -1 when
        none. The lane's starts are read SEARCH_BLOCK positions at a time, never gathered
        whole (a lane of a 4 GB trace holds millions: a temporary of tens of MB that sat under
        the summary's peak of memory): each time's block is found first, from the blocks'
        first starts, then its position within the block."""
        lo, hi = self.lane_range(lane)
        out = np.full(len(times), -1, dtype=np.int64)
        if hi <= lo or not len(times):
            return out
        start, rows = trace.start, self.order[lo:hi]
        firsts = start[rows[::SEARCH_BLOCK]]
        block = np.searchsorted(firsts, times, side="right") - 1
        # A time before the block's first start is in no block; within its block, its position
        # is past that first start, and the next block's first start is after the time.
        for b in sorted_unique(block[block >= 0]).tolist():
            mine = np.flatnonzero(block == b)
            first = b * SEARCH_BLOCK
            starts = start[rows[first : first + SEARCH_BLOCK]]
            out[mine] = lo + first + np.searchsorted(starts, times[mine], side="right") - 1
        return out

    def innermost(self, trace: Trace, lanes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Per query, the position of the innermost CPU slice on lane `lanes[i]` with
        start <= times[i] < end, or -1 (the last of `slices_at`, for many queries at once).

        The last slice of the lane starting at or before t is the deepest candidate; when it
        has already ended, its ancestors are the only slices that can still contain t (a slice
        popped off the nesting stack was popped by one that ends later), so climbing parents
        finds the answer. All queries climb together, one parent level per numpy pass."""
        lanes = np.asarray(lanes, dtype=np.int64)
        times = np.asarray(times, dtype=np.int64)
        pos = np.full(len(times), -1, dtype=np.int64)
        if len(times) == 0 or len(self.order) == 0:
            return pos
        for lane in np.unique(lanes).tolist():
            if lane < 0:
                continue
            queries = np.flatnonzero(lanes == lane)
            pos[queries] = self.last_starting_by(trace, lane, times[queries])
        climbing = np.flatnonzero(pos >= 0)
        while len(climbing):
            # Ends of just the slices being climbed: a whole-trace column of ends would cost
            # memory proportional to every CPU slice.
            rows = self.order[pos[climbing]]
            ended = trace.start[rows] + trace.dur[rows] <= times[climbing]
            climbing = climbing[ended]
            if not len(climbing):
                break
            pos[climbing] = self.parent_pos[pos[climbing]]
            climbing = climbing[pos[climbing] >= 0]
        return pos

    def visible(self, trace: Trace, lane: int, t0: int, t1: int) -> np.ndarray:
        """Rows of the lane's CPU slices that start before t1, by position (end is not checked)."""
        lo, hi = self.lane_range(lane)
        starts = trace.start[self.order[lo:hi]]
        upto = int(np.searchsorted(starts, t1, side="left"))
        return self.order[lo : lo + upto]


def outermost_positions(group: np.ndarray, subtree_stop: np.ndarray) -> np.ndarray:
    """Per position of a preorder: does no ancestor have its group (`group`, non-negative, per
    position)?

    A slice has a same-group ancestor when an earlier slice of its group still holds it in its
    subtree. Sorting by (group, position) and taking the running maximum of subtree_stop over
    the earlier members of each group answers that for all slices at once. Slices of other
    lanes never interfere: their subtrees end before this lane's positions begin. Done a block
    of OUTERMOST_BLOCK positions at a time, each group's furthest reach carried from block to
    block: one sort over the whole nesting gathered the stops in an order that, at 4 GB (70 MB
    arrays), missed the caches at nearly every element (0.38 s there against 0.05 s at 1 GB)."""
    n = len(group)
    outermost = np.empty(n, dtype=bool)
    if not n:
        return outermost
    bound = int(group.max()) + 1
    reach = np.zeros(bound, dtype=np.int64)  # per group: the furthest stop of earlier members
    span = np.int64(n + 1)
    for lo in range(0, n, OUTERMOST_BLOCK):
        block_group = group[lo : lo + OUTERMOST_BLOCK]
        by_group = stable_order(block_group, bound)
        sorted_group = block_group[by_group].astype(np.int64)
        last = np.append(np.flatnonzero(sorted_group[1:] != sorted_group[:-1]), len(by_group) - 1)
        # Groups scaled apart: the running maximum never carries a stop into the next group.
        key = sorted_group * span + subtree_stop[lo : lo + OUTERMOST_BLOCK][by_group]
        np.maximum.accumulate(key, out=key)
        # The reach of the earlier members within the block (negative when from an earlier
        # group), then that of the group's members in earlier blocks.
        before = np.empty_like(key)
        before[0] = -1
        np.subtract(key[:-1], sorted_group[1:] * span, out=before[1:])
        np.maximum(before, reach[sorted_group], out=before)
        outermost[by_group + lo] = before <= by_group + lo
        ended = sorted_group[last]  # each group's furthest stop in the block, carried on
        reach[ended] = np.maximum(reach[ended], key[last] - ended * span)
    return outermost


def compute_nesting(trace: Trace, cpu: np.ndarray, group: np.ndarray) -> Nesting:
    """Nest the CPU slices (`cpu` mask over rows); `group` gives each row's (cat, name) group."""
    # Temporaries are dropped as soon as they are used: on a 1 GB trace each of these arrays
    # is some 20 MB, and the peak memory of the whole summary is set here.
    rows = np.flatnonzero(cpu)
    start = trace.start[rows]
    end = start + trace.dur[rows]
    # Stable, and `rows` ascend: equal keys stay in file order.
    sort = slice_order(trace.lane[rows], start, end)
    del start
    order = rows[sort]
    del rows
    lane = trace.lane[order]
    end = end[sort]
    del sort
    n = len(order)

    # Lanes are contiguous runs of positions now.
    new_lane = np.flatnonzero(lane[1:] != lane[:-1]) + 1
    lane_first = np.concatenate(([0], new_lane)) if n else np.zeros(0, np.int64)
    lane_ids = lane[lane_first]
    del lane
    lane_start = np.append(lane_first, n).astype(np.int64)
    counts = np.diff(lane_start)
    first = np.repeat(lane_start[:-1], counts)
    parent_pos = previous_at_least(end, first)
    del first, end
    # Positions fit 32 bits (fewer than 2**31 slices): half the memory of the per-row arrays,
    # narrowed before the work below, where the nesting sets the summary's peak of memory.
    index_type = np.int32 if n < (1 << 31) - 1 else np.int64
    parent_pos = parent_pos.astype(index_type)
    # The subtree of a slice ends at the first later one of its lane with a greater end (the
    # module docstring): found from the parents, a few passes over the positions.
    subtree_stop = subtree_stops(parent_pos)

    dur = trace.dur[order]
    has_parent = parent_pos >= 0
    children_dur = np.zeros(n, dtype=np.int64)
    np.add.at(children_dur, parent_pos[has_parent], dur[has_parent])
    self_time = np.subtract(dur, children_dur, out=dur)
    np.maximum(self_time, 0, out=self_time)
    del children_dur, dur

    outermost = outermost_positions(group[order], subtree_stop)

    position = np.full(len(trace), -1, dtype=index_type)
    position[order] = np.arange(n, dtype=index_type)
    parent = np.full(len(trace), -1, dtype=np.int32)
    parent[order[has_parent]] = order[parent_pos[has_parent]]
    return Nesting(
        order=order,
        parent_pos=parent_pos,
        subtree_stop=subtree_stop,
        self_time=self_time,
        outermost=outermost,
        position=position,
        parent=parent,
        lane_ids=lane_ids,
        lane_start=lane_start,
    )
