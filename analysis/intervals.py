"""Vectorised building blocks on integer intervals: unions, clipping, nearest-greater searches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Union:
    """A sorted set of disjoint half-open intervals [start, end), with a prefix sum of lengths."""

    start: np.ndarray  # int64, ascending
    end: np.ndarray  # int64, start[i] < end[i] <= start[i + 1]

    @classmethod
    def of(cls, starts: np.ndarray, ends: np.ndarray, *, writable: bool = False) -> Union:
        """Merge intervals; empty ones are dropped and touching ones are joined. `writable`:
        the caller gives `ends` away (an int64 array it no longer reads), and it may be written."""
        given_ends = ends
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        # As few whole-size temporaries as can be: the steps' CPU unions take every slice of a
        # thread, and on a 4 GB trace each such array is some 70 MB.
        keep = ends > starts
        if not keep.all():
            starts, ends = starts[keep], ends[keep]
        del keep
        if len(starts) == 0:
            empty = np.zeros(0, np.int64)
            return cls(empty, empty)
        if (starts[1:] < starts[:-1]).any():
            order = np.argsort(starts, kind="stable")
            starts = starts[order]
            ends = ends[order]  # a copy: the caller's array is never written
            del order
        else:  # sorted already (rows in time order): no sort, no copy of the starts
            ends = ends.copy() if ends is given_ends and not writable else ends
        reach = np.maximum.accumulate(ends, out=ends)
        # A new run begins where an interval starts after everything before it has ended.
        new_run = np.empty(len(starts), dtype=bool)
        new_run[0] = True
        new_run[1:] = starts[1:] > reach[:-1]
        first = np.flatnonzero(new_run)
        last = np.append(first[1:] - 1, len(starts) - 1)
        return cls(starts[first], reach[last])

    def __len__(self) -> int:
        return len(self.start)

    @property
    def total(self) -> int:
        """Total covered length."""
        return int((self.end - self.start).sum())

    @property
    def window(self) -> tuple[int, int] | None:
        """First start and last end, or None when empty."""
        if len(self.start) == 0:
            return None
        return int(self.start[0]), int(self.end[-1])

    @property
    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """The holes between consecutive intervals, as (start, end) arrays; each has length > 0."""
        return self.end[:-1], self.start[1:]

    def covered(self, lo: np.ndarray | int, hi: np.ndarray | int) -> np.ndarray:
        """Covered length inside each [lo, hi) (vectorised over lo/hi; empty ranges give 0)."""
        lo_arr = np.atleast_1d(np.asarray(lo, dtype=np.int64))
        hi_arr = np.atleast_1d(np.asarray(hi, dtype=np.int64))
        hi_arr = np.maximum(hi_arr, lo_arr)
        return self._covered_before(hi_arr) - self._covered_before(lo_arr)

    def _covered_before(self, t: np.ndarray) -> np.ndarray:
        """Covered length in (-inf, t) for each t."""
        if len(self.start) == 0:
            return np.zeros(len(t), dtype=np.int64)
        lengths = self.end - self.start
        prefix = np.concatenate(([0], np.cumsum(lengths)))
        # Intervals starting before t: all of them are fully covered except possibly the last.
        count = np.searchsorted(self.start, t, side="left")
        full = prefix[count]
        last = np.maximum(count - 1, 0)
        overshoot = np.where(count > 0, np.maximum(self.end[last] - t, 0), 0)
        return full - overshoot

    def merge(self, other: Union) -> Union:
        return Union.of(
            np.concatenate((self.start, other.start)), np.concatenate((self.end, other.end))
        )

    def intersect(self, other: Union) -> Union:
        """The time covered by both unions (vectorised: a sweep over both sets of bounds)."""
        if len(self.start) == 0 or len(other.start) == 0:
            empty = np.zeros(0, np.int64)
            return Union(empty, empty)
        points = np.concatenate((self.start, self.end, other.start, other.end))
        n, m = len(self.start), len(other.start)
        delta = np.concatenate(
            (
                np.ones(n, np.int64),
                -np.ones(n, np.int64),
                np.ones(m, np.int64),
                -np.ones(m, np.int64),
            )
        )
        order = np.lexsort((delta, points))  # at one instant ends (-1) before starts: half-open
        points, level = points[order], np.cumsum(delta[order])
        both = np.flatnonzero(level[:-1] == 2)
        return Union.of(points[both], points[both + 1])

    def containing(self, t: int) -> int:
        """Index of the interval that contains t, or -1."""
        i = int(np.searchsorted(self.start, t, side="right")) - 1
        if i >= 0 and t < int(self.end[i]):
            return i
        return -1


# The nearest-greater searches work a block of positions at a time: each pointer-jumping pass
# gathers at scattered positions, and over one block those stay in the CPU's caches, where over
# a 4 GB trace's ten million slices each gather waited on memory (the nesting took 5.6x the
# time of a 1 GB trace's, not 4x). The few searches that leave their block go on afterwards.
NEAREST_BLOCK = 1 << 18


def previous_at_least(
    values: np.ndarray, first: np.ndarray, block: int = NEAREST_BLOCK
) -> np.ndarray:
    """For each i, the largest j < i with values[j] >= values[i] and j >= first[i], else -1.

    `first[i]` bounds the search (the start of i's segment). Pointer jumping: a candidate that
    fails is replaced by the candidate of the candidate, which skips only smaller values.
    Rounds are bounded by the largest drop in nesting depth; each round touches only the
    unresolved positions. Done a block of `block` positions at a time, then across blocks for
    the searches that reached their block's start."""
    n = len(values)
    candidate = np.arange(-1, n - 1, dtype=np.int64)
    candidate[candidate < first] = -1
    if n <= block:
        _jump_back(values, candidate, np.flatnonzero(candidate >= 0))
        return candidate
    pending = []
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        local = candidate[lo:hi] - lo  # -1 where the segment starts at i; else i - 1 - lo
        _jump_back(values[lo:hi], local, np.flatnonzero(local >= 0))
        # Searches that ran out of block with their segment going on: everything in
        # [lo, i) is smaller; the search goes on from lo - 1.
        out = np.flatnonzero((local < 0) & (first[lo:hi] < lo))
        local += lo
        local[out] = lo - 1
        candidate[lo:hi] = local
        pending.append(out + lo)
    _jump_back(values, candidate, np.concatenate(pending))
    return candidate


def _jump_back(values: np.ndarray, candidate: np.ndarray, active: np.ndarray) -> None:
    """`previous_at_least`'s pointer jumping, in place, for the `active` positions."""
    while len(active):
        cand = candidate[active]
        failed = values[cand] < values[active]
        active = active[failed]
        candidate[active] = candidate[cand[failed]]
        active = active[candidate[active] >= 0]


def next_greater(values: np.ndarray, stop: np.ndarray, block: int = NEAREST_BLOCK) -> np.ndarray:
    """For each i, the smallest j > i with values[j] > values[i] and j < stop[i], else stop[i].
    Done a block of `block` positions at a time, then across blocks for the searches that
    reached their block's end."""
    n = len(values)
    candidate = np.arange(1, n + 1, dtype=np.int64)
    done = candidate >= stop
    candidate[done] = stop[done]
    if n <= block:
        _jump_forward(values, candidate, np.flatnonzero(~done), stop)
        return candidate
    del done
    pending = []
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        local_stop = np.minimum(stop[lo:hi], hi) - lo
        local = candidate[lo:hi] - lo
        _jump_forward(values[lo:hi], local, np.flatnonzero(local < local_stop), local_stop)
        # Searches that ran out of block with their segment going on: everything in
        # (i, hi) is no greater; the search goes on from hi.
        out = np.flatnonzero((local >= hi - lo) & (stop[lo:hi] > hi))
        local += lo
        candidate[lo:hi] = local
        pending.append(out + lo)
    _jump_forward(values, candidate, np.concatenate(pending), stop)
    return candidate


def _jump_forward(
    values: np.ndarray, candidate: np.ndarray, active: np.ndarray, stop: np.ndarray
) -> None:
    """`next_greater`'s pointer jumping, in place, for the `active` positions."""
    while len(active):
        cand = candidate[active]
        failed = values[cand] <= values[active]
        active = active[failed]
        cand = cand[failed]
        jumped = candidate[cand]
        candidate[active] = jumped
        # Reaching the segment's end means no greater value: stop there.
        active = active[jumped < stop[active]]


def subtree_stops(parent: np.ndarray) -> np.ndarray:
    """One past the last position of each subtree of a forest in preorder, given each
    position's parent (-1 for roots): `next_greater(values, segment ends)` for the parents
    `previous_at_least(values, segment starts)` gives (a subtree of i is the positions up to
    the first later one with a greater value), found from the parents alone.

    The last position of i's subtree is that of its last child's subtree (itself when it has
    none): each position points at its last child, then the pointers are doubled (each takes
    its target's target) until they stop moving, rounds in the logarithm of the longest chain
    of last children, each over just the positions still moving."""
    n = len(parent)
    index_type = parent.dtype if parent.dtype in (np.int32, np.int64) else np.int64
    last = np.arange(n, dtype=index_type)
    children = np.flatnonzero(parent >= 0).astype(index_type, copy=False)
    np.maximum.at(last, parent[children], children)  # the last child: the largest position
    del children
    moving = np.flatnonzero(last != np.arange(n, dtype=index_type))
    while len(moving):
        target = last[moving]
        further = last[target]
        still = further != target
        last[moving] = further
        moving = moving[still]
    last += 1
    return last


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` (sorted), found by sorting a copy. numpy 2's `np.unique` builds a
    hash table instead, whose probes miss the caches once there are millions of distinct
    values: 10x the time at 4 GB that it took at 1 GB, where a sort is about linear."""
    ordered = np.sort(np.asarray(values).reshape(-1))
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def ids_in_use(ids: np.ndarray, bound: int) -> np.ndarray:
    """The distinct values of `ids` (integers in [0, bound): string ids of a column), ascending:
    `np.unique(ids)` in one counting pass."""
    return np.flatnonzero(np.bincount(ids, minlength=bound))


def stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """Stable argsort of non-negative integer keys below `bound`.

    Keys that fit 16 bits are sorted with numpy's radix sort, several times faster than the
    comparison sorts used for wider integers."""
    if bound <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def nesting_depth(subtree_stop: np.ndarray) -> np.ndarray:
    """Depth of each position of a preorder, given where each subtree stops.

    The ancestors of j are the x < j with subtree_stop[x] > j. Since subtree_stop[x] > x, that
    is j minus the number of subtrees that stopped at or before j."""
    n = len(subtree_stop)
    stopped = np.cumsum(np.bincount(subtree_stop, minlength=n + 1))[:n]
    return np.arange(n, dtype=np.int64) - stopped


def slice_order(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The stable order of slices by (group ascending, start ascending, end descending): the
    same permutation as `np.lexsort((-end, start, group))`, found faster.

    Group and start are packed into one integer key when they fit, and a stable sort on it is
    quick because traces are nearly sorted by start already; only the slices that tie on both
    (few) are then ordered by end. Otherwise it falls back to lexsort."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    group = group.astype(np.int64, copy=False)
    low = int(start.min())
    span = int(start.max()) - low
    top = int(group.max())
    if int(group.min()) < 0 or span.bit_length() + max(top, 1).bit_length() > 62:
        return np.lexsort((-end, start, group))
    key = (group << span.bit_length()) | (start - low)
    order = np.argsort(key, kind="stable")
    key = key[order]
    tied = np.flatnonzero(key[1:] == key[:-1])
    if len(tied):
        members = np.union1d(tied, tied + 1)  # positions of the tie runs, ascending
        rows = order[members]
        order[members] = rows[np.lexsort((rows, -end[rows], key[members]))]
    return order


# Sums of int64 values stay exact: below this bound (with a wide margin for the float64 estimate)
# in int64, above it in Python integers. Times lie within ±2**62 ns (the parser's TIME_LIMIT), so
# differences of two times fit; sums over many events (an operator's total, bytes allocated) may
# not: a hostile trace, not a real one, but a wrapped sum prints a wrong or negative number.
SUM_LIMIT = 2.0**62


def sums_fit(values: np.ndarray) -> bool:
    """Does every sum of these values (each taken at most once) fit in int64?"""
    values = np.asarray(values)
    if len(values) and values.dtype.kind in "iu":
        # Bounded by the largest magnitude times the count, found without the whole-size
        # float64 copies below (two of them, 180 MB at 4 GB, at the summary's peak of memory).
        largest = max(abs(int(values.max())), abs(int(values.min())))
        if largest * len(values) < SUM_LIMIT:
            return True
    return float(np.abs(np.asarray(values, dtype=np.float64)).sum()) < SUM_LIMIT


def add_at(out: np.ndarray, index: np.ndarray, values: np.ndarray, fits: bool) -> np.ndarray:
    """`np.add.at(out, index, values)` on int64 when `fits`, else on a copy of Python integers
    (an object array, exact at any size); returns the array that holds the sums."""
    if fits:
        np.add.at(out, index, values)
        return out
    wide = out.astype(object)
    np.add.at(wide, index, np.asarray(values).astype(object))
    return wide


def cumulative_in_place(values: np.ndarray, fits: bool) -> np.ndarray:
    """[v0, v0 + v1, ...]: the running sums, in `values`' own memory when `fits` (int64),
    else a new array of Python integers. `cumulative` of values[1:] when values[0] is 0."""
    if fits:
        return np.cumsum(values, out=values)
    return np.cumsum(np.asarray(values).astype(object))


def cumulative(values: np.ndarray, fits: bool) -> np.ndarray:
    """[0, v0, v0 + v1, ...] in int64 when `fits`, else in Python integers."""
    prefix = np.zeros(len(values) + 1, dtype=np.int64 if fits else object)
    np.cumsum(values if fits else np.asarray(values).astype(object), out=prefix[1:])
    return prefix
