"""Decoded events of one run -> numpy columns, with run-local string and lane tables.

A run is converted on its own (so worker processes can do it) and merged into the Trace by
remapping its local ids. The work is done field by field with list comprehensions and numpy,
not event by event, because this is the parser's hot path.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, cast

import msgspec
import numpy as np

from .events import ABSENT_DIMS, EMPTY_ARGS, Args, Event
from .model import KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, NO_VALUE, RowColumns, category_kind

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
STRING_FLOW_BASE = 1 << 62
# |µs| below this: float64(x) * 1000 is exact for integers, so ints may take the float path.
EXACT_FLOAT_US = 9.0e12
# |µs| below this: x * 1000 ns fits in int64.
MAX_US = 9.2e15
# Times (start and end, ns) lie within ±TIME_LIMIT (about 146 years around 1970), so that the
# difference of any two fits in int64: gaps, windows and spans never overflow.
TIME_LIMIT = 1 << 62
MEMORY_FIELDS = ("addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id")
GPU_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)
_EMPTY_I64 = np.zeros(0, np.int64)


@dataclass
class RunColumns(RowColumns):
    """One run's rows, in the trace's columns but with run-local ids: `name`, `cat`, `shape`
    index `strings`, `lane` indexes `lane_keys`, string flow ids are local string ids +
    STRING_FLOW_BASE, and `ordinal` is the event's index in the run."""

    strings: list[str]
    lane_keys: list[tuple[Any, Any]]
    n_events: int
    by_phase: dict[str, int]
    by_category: dict[str, int]
    slice_start_min: int | None
    slice_end_max: int | None
    negative_durations: int
    # int64 columns (ordinal in the run, lane a local lane index, ts, MEMORY_FIELDS)
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    # What the metadata events set, the last value per process (thread) and name: (name, pid,
    # tid, value), in the order of each name's first appearance (`_metadata`).
    metadata: list[tuple[str, Any, Any, Any]] = field(default_factory=list)
    # The run's lanes (local indices) that hold a GPU activity (an X event of a kernel, memcpy
    # or memset category), for the Lane's is_gpu.
    gpu_lanes: list[int] = field(default_factory=list)
    # Counts of values made missing or cut, for the load's warnings: "far_times" (a ts beyond
    # ±TIME_LIMIT), "long_durations" (an end beyond it), "odd_shapes", "out_of_range" (numbers
    # beyond float range, such as 1e400, read as missing).
    notes: dict[str, int] = field(default_factory=dict)


def _ns_column(values: list, n: int) -> tuple[np.ndarray, np.ndarray]:
    """µs values (int, float or None) -> (ns int64, valid mask), exactly as the spec converts.

    Integers are multiplied exactly; floats are rounded half to even after the float product.
    Missing values are 0 (and not valid).
    """
    fast = _ns_small(values, n)
    if fast is not None:
        return fast
    try:
        arr = np.array(values)
    except (OverflowError, ValueError):
        return _ns_slow(values, n)
    valid = None
    if arr.dtype == object:
        valid = np.array([v is not None for v in values], dtype=bool)
        values = [v if v is not None else 0 for v in values]
        try:
            arr = np.array(values)
        except (OverflowError, ValueError):
            return _ns_slow(values, n)
    if valid is None:
        valid = np.ones(n, dtype=bool)
    if arr.dtype == np.int64:
        if n and (arr.max() >= MAX_US or arr.min() <= -MAX_US):
            return _ns_slow(values, n, valid)
        return arr * 1000, valid
    if arr.dtype == np.float64:
        top = np.abs(arr).max() if n else 0.0
        if not np.isfinite(top) or top >= MAX_US:
            return _ns_slow(values, n, valid)
        out = np.rint(arr * 1000).astype(np.int64)
        if top >= EXACT_FLOAT_US:
            # Integers this large lose exactness through float64: take them exactly.
            is_int = np.array([type(v) is int for v in values], dtype=bool)
            if is_int.any():
                out[is_int] = np.array([v for v in values if type(v) is int], dtype=np.int64) * 1000
        return out, valid
    return _ns_slow(values, n, valid)


def _ns_small(values: list, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """`_ns_column` in one conversion when every value is below EXACT_FLOAT_US µs (nearly
    always): there an integer's float product is exact, so ints and floats take one path, and
    None (the only value that becomes NaN: times are finite numbers) is missing. None when
    some value is larger: `_ns_column`'s general path decides."""
    if not n:
        return None
    try:
        arr = np.array(values, dtype=np.float64)
    except (OverflowError, ValueError, TypeError):
        return None
    valid = ~np.isnan(arr)
    top = np.fmax.reduce(np.abs(arr))  # NaN only when every value is missing
    if top != top:
        return np.zeros(n, dtype=np.int64), valid
    if not top < EXACT_FLOAT_US:
        return None
    if not valid.all():
        arr[~valid] = 0.0
    return np.rint(arr * 1000).astype(np.int64), valid


def _ns_slow(
    values: list, n: int, present: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    for i, value in enumerate(values):
        ns = to_ns(value)
        if ns is not None and (present is None or present[i]):
            out[i] = ns
            valid[i] = True
    return out, valid


def to_ns(value: Any) -> int | None:
    """Microseconds as written -> integer ns (exact for ints, round-half-even for floats)."""
    kind = type(value)
    if kind is int:
        ns = value * 1000
    elif kind is float:
        scaled = value * 1000  # inf when value is finite but near the float maximum
        if not math.isfinite(scaled):
            return None
        ns = round(scaled)
    else:
        return None
    return ns if INT64_MIN < ns <= INT64_MAX else None


def convert_run(events: list[Event], out_of_range: int = 0) -> RunColumns:
    """Convert the decoded events of one run (every element, in file order).

    `out_of_range`: numbers beyond float range that decoding turned into missing values.

    Every pass over the events is one attribute fetch in a comprehension or a C-level `map`;
    per-event Python work is left to the rare cases (memory events, odd value types). The parts
    run in a fixed order, because the string table's order is part of the model (groups are
    ordered by string id): categories, names, shapes, then string flow ids.
    """
    n = len(events)
    phs = [e.ph for e in events]
    codes, by_phase = _phases(phs, n)
    strings = _RunStrings()

    cat_all = strings.intern_all([e.cat for e in events])
    by_category = _category_counts(cat_all, codes == ord("X"), strings.table)
    starts, valid, far_times = _start_times(events, n)
    is_meta = codes == ord("M")
    rows = valid & ~is_meta
    metadata: list[tuple[str, Any, Any, Any]] = []
    if is_meta.any():
        metadata = _metadata([events[i] for i in np.flatnonzero(is_meta).tolist()])

    index = np.flatnonzero(rows)
    m = len(index)
    sub = events if m == n else [events[i] for i in index.tolist()]
    lane_keys, lanes = _lanes(sub)
    row_name = strings.intern_all([e.name for e in sub])
    ph_codes = codes[index]

    memory, lanes, lane_keys = _memory_columns(
        events, phs, rows, valid, starts, index, row_name, ph_codes, lanes, lane_keys, strings
    )
    start = starts[index]
    dur, negative, long_durations = _durations(sub, start, m)
    row_cat = cat_all[index]
    args_list = _row_args(sub)
    # Only JSON integers count (not bools or floats); out-of-range ones are dropped.
    corr = _int_only([a.correlation for a in args_list])
    ext = _int_only([a.external_id for a in args_list])
    stream = _int_only([a.stream for a in args_list])
    shape, odd_shapes = _shapes(args_list, m, strings.intern)
    row_x = ph_codes == ord("X")
    device, gpu_lanes = _devices(sub, args_list, row_x, row_cat, lanes, strings.table)
    flow_id, flow_bp = _flows(sub, ph_codes, strings)
    smin, emax = _slice_bounds(start, dur, row_x)
    return RunColumns(
        strings=strings.table,
        lane_keys=lane_keys,
        ph=ph_codes,
        name=row_name,
        cat=row_cat,
        lane=lanes,
        start=start,
        dur=dur,
        corr=corr,
        ext_id=ext,
        device=device,
        stream=stream,
        flow_id=flow_id,
        flow_bp=flow_bp,
        shape=shape,
        ordinal=index.astype(np.int64),
        n_events=n,
        by_phase=by_phase,
        by_category=by_category,
        slice_start_min=smin,
        slice_end_max=emax,
        negative_durations=negative,
        memory=memory,
        metadata=metadata,
        gpu_lanes=gpu_lanes,
        notes={
            key: count
            for key, count in (
                ("far_times", far_times),
                ("long_durations", long_durations),
                ("odd_shapes", odd_shapes),
                ("out_of_range", out_of_range),
            )
            if count
        },
    )


class _RunStrings:
    """A run's string table: `table[id]` is the string, "" (and a missing value) is 0."""

    def __init__(self) -> None:
        self.table: list[str] = [""]
        self.ids = _Numbering(self.table)
        self.ids[""] = self.ids[None] = 0
        self.intern = self.ids.__getitem__

    def intern_all(self, values: list) -> np.ndarray:
        """Ids of `values`. One lookup per value: a string not seen before is numbered by the
        lookup itself (a call per distinct string, the fastest way for names and categories,
        which repeat)."""
        return np.fromiter(map(self.intern, values), dtype=np.int32, count=len(values))

    def intern_new_first(self, values: list) -> np.ndarray:
        """Ids of values that rarely repeat (string flow ids): the new ones numbered all at
        once, in order of first appearance, so that there is no call per value."""
        ids, table = self.ids, self.table
        new = [value for value in dict.fromkeys(values) if value not in ids]
        if new:
            ids.update(zip(new, range(len(table), len(table) + len(new))))
            table.extend(new)
        return np.fromiter(map(self.intern, values), dtype=np.int32, count=len(values))


def _category_counts(cat_all: np.ndarray, ph_x: np.ndarray, strings: list[str]) -> dict[str, int]:
    """X events per category (by the string table's order)."""
    if not ph_x.any():
        return {}
    counts = np.bincount(cat_all[ph_x], minlength=len(strings))
    return {strings[i]: int(c) for i in np.flatnonzero(counts).tolist() for c in (counts[i],)}


def _start_times(events: list[Event], n: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Every event's start (ns), whether it is usable, and how many lie beyond ±TIME_LIMIT
    (made unusable)."""
    starts, valid = _ns_column([e.ts for e in events], n)
    far = valid & ((starts > TIME_LIMIT) | (starts <= -TIME_LIMIT))
    far_times = int(np.count_nonzero(far))
    if far_times:
        valid &= ~far
    return starts, valid, far_times


def _memory_columns(
    events: list[Event],
    phs: list,
    rows: np.ndarray,
    valid: np.ndarray,
    starts: np.ndarray,
    index: np.ndarray,
    row_name: np.ndarray,
    ph_codes: np.ndarray,
    lanes: np.ndarray,
    lane_keys: list[tuple[Any, Any]],
    strings: _RunStrings,
) -> tuple[dict[str, Any], np.ndarray, list[tuple[Any, Any]]]:
    """The run's memory events as RunColumns.memory, and the lanes (and their keys) renumbered
    so that memory events' lanes come first, as when they were numbered first."""
    n, m = len(events), len(index)
    memory: dict[str, Any] = {k: _EMPTY_I64 for k in ("ordinal", "lane", "ts", *MEMORY_FIELDS)}
    memory_id = strings.ids.get("[memory]")
    mem_rows = []
    if memory_id is not None:
        mem_rows = index[(row_name == memory_id) & (ph_codes == ord("i"))].tolist()
    if m != n:  # memory events without a usable time are kept too, with no lane
        unplaced = np.flatnonzero(~rows).tolist()
        mem_rows = sorted(
            mem_rows + [i for i in unplaced if events[i].name == "[memory]" and phs[i] == "i"]
        )
    if not mem_rows:
        return memory, lanes, lane_keys
    # Column by column, as the rows are (a profile_memory trace has as many memory events as
    # others): a placed memory event is a row, an unplaced one (no valid time) is not.
    mem_index = np.array(mem_rows, dtype=np.int64)
    placed = valid[mem_index]
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[index] = np.arange(m)
    first_lanes = dict.fromkeys(lanes[row_of[mem_index[placed]]].tolist())
    order = [*first_lanes, *(k for k in range(len(lane_keys)) if k not in first_lanes)]
    if order != list(range(len(lane_keys))):
        renumber = np.empty(len(order), dtype=np.int32)
        renumber[order] = np.arange(len(order), dtype=np.int32)
        lanes = renumber[lanes]
        lane_keys = [lane_keys[k] for k in order]
    memory["ordinal"] = mem_index
    memory["ts"] = np.where(placed, starts[mem_index], NO_VALUE)
    mem_lanes = np.full(len(mem_rows), -1, dtype=np.int64)
    mem_lanes[placed] = lanes[row_of[mem_index[placed]]]
    memory["lane"] = mem_lanes
    mem_args = [events[i].args for i in mem_rows]
    if None in mem_args:
        mem_args = [a if a is not None else EMPTY_ARGS for a in mem_args]
    columns = (
        [a.addr for a in mem_args],
        [a.bytes for a in mem_args],
        [a.total_allocated for a in mem_args],
        [a.total_reserved for a in mem_args],
        [a.device_type for a in mem_args],
        [a.device_id for a in mem_args],
    )
    for key, values in zip(MEMORY_FIELDS, columns):
        memory[key] = _memory_field(values)
    return memory, lanes, lane_keys


def _durations(sub: list[Event], start: np.ndarray, m: int) -> tuple[np.ndarray, int, int]:
    """The rows' durations (ns; missing or not positive: 0, cut so that the end stays within
    TIME_LIMIT), how many were negative, and how many were cut."""
    durs, dur_valid = _ns_column([e.dur for e in sub], m)
    negative = int(np.count_nonzero(durs < 0))
    dur = np.where(dur_valid & (durs > 0), durs, 0)
    beyond = dur > TIME_LIMIT - start
    long_durations = int(np.count_nonzero(beyond))
    if long_durations:
        dur[beyond] = TIME_LIMIT - start[beyond]
    return dur, negative, long_durations


def _row_args(sub: list[Event]) -> list[Args]:
    """Each row's args, EMPTY_ARGS where it has none (the decoder's default: None only where
    the trace wrote `"args": null`)."""
    found_args = [e.args for e in sub]
    if None in found_args:
        return [a if a is not None else EMPTY_ARGS for a in found_args]
    return cast(list[Args], found_args)


def _shapes(args_list: list[Args], m: int, intern: Any) -> tuple[np.ndarray, int]:
    """The rows' shape string ids (`Input Dims`, else the older `Input dims`; -1 for none),
    and how many were odd."""
    shape, odd_shapes = _shape_ids([a.input_dims for a in args_list], intern)
    old_dims: list[Any] = [a.input_dims_old for a in args_list]
    if old_dims.count(ABSENT_DIMS) != m:  # traces before 2021 say "Input dims"
        older, odd_older = _shape_ids(old_dims, intern)
        shape = np.where(shape >= 0, shape, older)
        odd_shapes += odd_older
    return shape, odd_shapes


def _devices(
    sub: list[Event],
    args_list: list[Args],
    row_x: np.ndarray,
    row_cat: np.ndarray,
    lanes: np.ndarray,
    strings: list[str],
) -> tuple[np.ndarray, list[int]]:
    """The device of each GPU activity (an X row of a kernel, memcpy or memset category; -1
    elsewhere), and the lanes that hold one."""
    m = len(sub)
    # The kinds of the run's categories only (the string table holds every name too).
    cats = np.flatnonzero(np.bincount(row_cat, minlength=len(strings))).tolist() if m else []
    kinds = np.zeros(len(strings), dtype=np.int8)
    kinds[cats] = [category_kind(strings[c]) for c in cats]
    device = np.full(m, -1, dtype=np.int64)
    gpu_rows = np.flatnonzero(row_x & np.isin(kinds[row_cat], GPU_KINDS))
    if not len(gpu_rows):
        return device, []
    gpu_lanes = np.unique(lanes[gpu_rows]).tolist()
    gpu_idx = gpu_rows.tolist()
    values = _int_only([args_list[j].device for j in gpu_idx])
    device[gpu_rows] = values
    missing = np.flatnonzero(values == NO_VALUE)
    if len(missing):  # no device in args: the pid says it (each distinct pid read once)
        pids = [sub[gpu_idx[k]].pid for k in missing.tolist()]
        of_pid = {pid: _pid_device(pid) for pid in dict.fromkeys(pids)}
        device[gpu_rows[missing]] = np.fromiter(
            map(of_pid.__getitem__, pids), dtype=np.int64, count=len(pids)
        )
    return device, gpu_lanes


def _flows(
    sub: list[Event], ph_codes: np.ndarray, strings: _RunStrings
) -> tuple[np.ndarray, np.ndarray]:
    """The flow rows' (s, f, t) ids (string ids as local string ids + STRING_FLOW_BASE;
    NO_VALUE elsewhere) and binding point codes (0 elsewhere)."""
    m = len(sub)
    flow_id = np.full(m, NO_VALUE, dtype=np.int64)
    flow_bp = np.zeros(m, dtype=np.uint8)
    flow_rows = np.flatnonzero(
        (ph_codes == ord("s")) | (ph_codes == ord("f")) | (ph_codes == ord("t"))
    )
    if not len(flow_rows):
        return flow_id, flow_bp
    flow_idx = flow_rows.tolist()
    ids = [sub[j].id for j in flow_idx]
    flow_id[flow_rows] = _int_only(ids)
    if str in set(map(type, ids)):
        is_str = np.array([type(fid) is str for fid in ids], dtype=bool)
        named = strings.intern_new_first([fid for fid in ids if type(fid) is str])
        flow_id[flow_rows[is_str]] = STRING_FLOW_BASE + named.astype(np.int64)
    bps = [sub[j].bp for j in flow_idx]
    if set(map(type, bps)) != {type(None)}:
        try:  # a few distinct binding points ("e"): each coded once
            codes_of = {bp: _bp_code(bp) for bp in dict.fromkeys(bps)}
        except TypeError:  # one that is not hashable (a list): coded one by one
            flow_bp[flow_rows] = [_bp_code(bp) for bp in bps]
        else:
            flow_bp[flow_rows] = np.fromiter(
                map(codes_of.__getitem__, bps), dtype=np.uint8, count=len(bps)
            )
    return flow_id, flow_bp


def _slice_bounds(
    start: np.ndarray, dur: np.ndarray, row_x: np.ndarray
) -> tuple[int | None, int | None]:
    """The earliest start and the latest end of the run's X rows (None without one)."""
    if not row_x.any():
        return None, None
    xs = start[row_x]
    return int(xs.min()), int((xs + dur[row_x]).max())


_INT_TYPES = {int, type(None)}


def _bp_code(bp: Any) -> int:
    """A flow event's binding point as its first ASCII byte, else 0."""
    return ord(bp[0]) if type(bp) is str and bp and bp[0] < "\x80" else 0


def _phase_code(ph: str | None) -> int:
    """The byte a phase is stored as: its one ASCII character, else 0."""
    return ord(ph) if type(ph) is str and len(ph) == 1 and ph < "\x80" else 0


def _phases(phs: list, n: int) -> tuple[np.ndarray, dict[str, int]]:
    """Each event's phase byte, and the events per phase in order of first appearance.

    When every phase is one ASCII character other than NUL (nearly always), the phases joined
    are the bytes themselves: no lookup per event."""
    if n and "" not in phs:
        try:
            joined = "".join(phs)
        except TypeError:  # a missing phase (None)
            joined = ""
        # No phase empty and n characters in all: each phase is one character.
        if len(joined) == n and joined.isascii():
            codes = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).copy()
            seen, first = np.unique(codes, return_index=True)
            if seen[0]:  # NUL is no phase byte: the general path counts it by its text
                counts = np.bincount(codes, minlength=256)
                ordered = seen[np.argsort(first)].tolist()
                return codes, {chr(code): int(counts[code]) for code in ordered}
    code_of = _PhaseCodes()  # in order of first appearance
    codes = np.fromiter(map(code_of.__getitem__, phs), dtype=np.uint8, count=n)
    return codes, _phase_counts(phs, code_of, codes)


def _phase_counts(phs: list, code_of: dict, codes: np.ndarray) -> dict[str, int]:
    """Events per phase, in order of first appearance; a missing phase counts as "?"."""
    counts = np.bincount(codes, minlength=256)
    by_phase: dict[str, int] = {}
    odd = None
    for ph, code in code_of.items():
        if code:
            by_phase[ph] = int(counts[code])
        elif odd is None:
            odd = Counter(p for p in phs if not code_of[p])
    if odd:
        missing = odd.pop(None, 0)
        for ph, count in odd.items():
            by_phase[ph] = count
        if missing:
            by_phase["?"] = by_phase.get("?", 0) + missing
    return by_phase


def _lanes(events: list[Event]) -> tuple[list[tuple[Any, Any]], np.ndarray]:
    """(pid, tid) keys in order of first appearance, and each event's index into them.

    pids and tids are numbered apart (few of each, so cheap to hash), the pair becomes one
    integer, and the pairs are numbered by a sort, not by a lookup per event."""
    n = len(events)
    pids = [e.pid for e in events]
    tids = [e.tid for e in events]
    pid_list: list[Any] = []
    tid_list: list[Any] = []
    tid_of = _numbered(tids, _Numbering(tid_list))
    pid_of = _numbered(pids, _Numbering(pid_list))
    width = len(tid_list)
    pair = tid_of
    if len(pid_list) > 1:
        pair += pid_of * width
    order, lanes = _first_seen(pair)
    keys = [(pid_list[p // width], tid_list[p % width]) for p in order.tolist()]
    return keys, lanes.astype(np.int32) if n else np.zeros(0, dtype=np.int32)


def _first_seen(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values in order of first appearance, and each value's index into them."""
    if not len(values):
        return values[:0], values[:0]
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    by_first = np.argsort(first)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[by_first] = np.arange(len(distinct), dtype=np.int64)
    return distinct[by_first], rank[inverse.reshape(-1)]


def _numbered(values: list, numbering: _Numbering) -> np.ndarray:
    """Each value's number (int64); one value throughout (a run of one thread) is found by a
    comparison at C speed, without a lookup per value."""
    n = len(values)
    if n and values.count(values[0]) == n:
        return np.full(n, numbering[values[0]], dtype=np.int64)
    return np.fromiter(map(numbering.__getitem__, values), dtype=np.int64, count=n)


class _PhaseCodes(dict):
    """Phase -> the byte it is stored as, computed once per distinct phase as it is looked up."""

    def __missing__(self, ph: Any) -> int:
        code = self[ph] = _phase_code(ph)
        return code


class _Numbering(dict):
    """Key -> number: a key not seen before gets the next number as it is first looked up, and
    is appended to `table` (so that table[number] is the key)."""

    def __init__(self, table: list) -> None:
        super().__init__()
        self.table = table

    def __missing__(self, key: Any) -> int:
        number = self[key] = len(self.table)
        self.table.append(key)
        return number


def _int_only(values: list) -> np.ndarray:
    """JSON integers within int64 -> int64; None, bools, floats, strings, ... -> NO_VALUE."""
    nones = values.count(None)
    if nones == len(values):  # an args key this run never has: the common case
        return np.full(nones, NO_VALUE, dtype=np.int64)
    types = set(map(type, values))
    if types <= _INT_TYPES:
        if nones:
            values = [NO_VALUE if v is None else v for v in values]
        try:
            out = np.array(values, dtype=np.int64)
        except OverflowError:
            pass
        else:
            return out
    # (type() is no Python call: no call per value here either.)
    return np.array(
        [v if type(v) is int and INT64_MIN < v <= INT64_MAX else NO_VALUE for v in values],
        dtype=np.int64,
    )


def _memory_field(values: list) -> np.ndarray:
    """One memory field of a run's memory events: one conversion when every value is an
    integer (nearly always), else by `_whole_int_only`'s rules."""
    if set(map(type, values)) == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return _whole_int_only(values)


def _whole_int_only(values: list) -> np.ndarray:
    """As `_int_only`, but floats that are whole numbers count as integers (memory fields)."""
    if float in set(map(type, values)):
        values = [int(v) if type(v) is float and v.is_integer() else v for v in values]
    return _int_only(values)


_NOT_PLAIN_DIMS = bytes(range(256)).translate(None, b"0123456789[], \t\r\n")


ODD_SHAPE = -2


def _shape_ids(values: list, intern: Any) -> tuple[np.ndarray, int]:
    """String ids of the shapes' texts, -1 where there is none; and how many were odd.

    Decoded as Raw JSON, the few distinct shapes of a run are turned into text once each."""
    n = len(values)
    if values.count(ABSENT_DIMS) == n:
        return np.full(n, -1, dtype=np.int32), 0
    kinds = set(map(type, values))
    keys = _raw_keys(values) if kinds == {msgspec.Raw} else None
    if keys is not None:
        # One lookup each; the absent shape (empty) is -1.
        ids: dict[bytes, int] = {b"": -1}
        for raw in dict.fromkeys(keys):
            if raw in ids:
                continue
            try:
                text = _dims_text(raw)
            except OddShape:
                ids[raw] = ODD_SHAPE
                continue
            ids[raw] = intern(text) if text is not None else -1
        out = np.fromiter(map(ids.__getitem__, keys), dtype=np.int32, count=n)
        odd = int(np.count_nonzero(out == ODD_SHAPE))
        if odd:
            out[out == ODD_SHAPE] = -1
        return out, odd
    out = np.full(n, -1, dtype=np.int32)
    present = [j for j, v in enumerate(values) if v is not None and v is not ABSENT_DIMS]
    odd = 0
    for j in present:
        try:
            text = _dims_text(values[j])
        except OddShape:
            odd += 1
            continue
        if text is not None:
            out[j] = intern(text)
    return out, odd


def _raw_keys(values: list[msgspec.Raw]) -> list[bytes] | None:
    """Each Raw's bytes (hashable), all at once: joined at C speed with a byte that valid JSON
    text never holds raw (NUL), then split again. None if a value holds one all the same (the
    pieces would not line up), or the text is not bytes."""
    try:
        keys = b"\x00".join(values).split(b"\x00")
    except TypeError:
        return None
    return keys if len(keys) == len(values) else None


class OddShape(ValueError):
    """An `Input Dims` value holding a number out of float range, NaN, Infinity or null."""


def _dims_text(dims: Any) -> str | None:
    """Compact JSON text of an `Input Dims` value, given decoded or as its raw JSON (bytes or
    msgspec.Raw); lone surrogates in strings survive. None for a missing or null value.

    Raw JSON of lists of non-negative integers (nearly every shape) only loses its whitespace;
    anything else is decoded and encoded compactly. A shape holding a number that is not one
    (`1e400`, NaN, Infinity, or null, which stands for them once repaired) raises OddShape:
    it is no shape at all."""
    if type(dims) is msgspec.Raw or type(dims) is bytes:
        raw = bytes(dims)
        if raw == b"null" or not raw:  # null, or ABSENT_DIMS
            return None
        if len(raw.translate(None, _NOT_PLAIN_DIMS)) == len(raw):
            return raw.translate(None, b" \t\r\n").decode("ascii")
        try:
            dims = msgspec.json.decode(raw)
        except msgspec.DecodeError:  # "Number out of range"
            raise OddShape from None
    if dims is None:
        return None
    if not _plain_values(dims):
        raise OddShape
    try:
        return msgspec.json.encode(dims).decode()
    except UnicodeEncodeError:
        return json.dumps(dims, ensure_ascii=False, separators=(",", ":"))


def _plain_values(value: Any) -> bool:
    """No null, NaN or Infinity anywhere in a decoded shape."""
    kind = type(value)
    if kind is list:
        return all(map(_plain_values, value))
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(map(_plain_values, value.values()))
    return value is not None


def _pid_device(pid: Any) -> int:
    """The device a GPU event without a device in its args is on: its pid when that is an
    integer (or a string of digits) within int64, else -1."""
    if type(pid) is int and INT64_MIN < pid <= INT64_MAX:
        return pid
    if type(pid) is str and pid and pid.isascii() and pid.isdigit():
        value = int(pid)
        if value <= INT64_MAX:
            return value
    return -1


# Metadata event name -> (the args field it sets, the type that field must have, per thread).
_META_FIELDS: dict[str, tuple[str, type, bool]] = {
    "process_name": ("name", str, False),
    "thread_name": ("name", str, True),
    "process_sort_index": ("sort_index", int, False),
    "thread_sort_index": ("sort_index", int, True),
    "process_labels": ("labels", str, False),
}


def _metadata(meta: list[Event]) -> list[tuple[str, Any, Any, Any]]:
    """What a run's metadata events set: for each name the model reads, the value of the last
    event that sets one of its type, per process (per thread for thread_*): (name, pid, tid,
    value), tid None for a process. A trace may repeat them by the hundred thousand (an MTIA
    trace: 310,000 of them for 10 threads): reduced here, field by field, so the loading process
    applies a handful per run."""
    names = [e.name for e in meta]
    found: list[tuple[str, Any, Any, Any]] = []
    for name in dict.fromkeys(names):
        spec = _META_FIELDS.get(name) if type(name) is str else None
        if spec is None:
            continue
        attr, kind, per_thread = spec
        chosen = [e for e, other in zip(meta, names) if other == name]
        args = [EMPTY_ARGS if e.args is None else e.args for e in chosen]
        values = list(map(attrgetter(attr), args))
        ok = [type(value) is kind for value in values]
        if per_thread:
            keys: list[Any] = [(e.pid, e.tid) for e, good in zip(chosen, ok) if good]
        else:
            keys = [(e.pid, None) for e, good in zip(chosen, ok) if good]
        # The last value per key wins, as when each event was applied in turn. (A pid's dict key
        # is its lane key: an int never equals a str.)
        last = dict(zip(keys, [value for value, good in zip(values, ok) if good]))
        found.extend((name, pid, tid, value) for (pid, tid), value in last.items())
    return found
