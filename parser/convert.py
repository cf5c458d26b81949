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
from typing import Any

import msgspec
import numpy as np

from .events import Event
from .model import KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, NO_VALUE, category_kind

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
STRING_FLOW_BASE = 1 << 62
# |µs| below this: float64(x) * 1000 is exact for integers, so ints may take the float path.
EXACT_FLOAT_US = 9.0e12
# |µs| below this: x * 1000 ns fits in int64.
MAX_US = 9.2e15
MEMORY_FIELDS = ("addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id")
GPU_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)
_EMPTY_I64 = np.zeros(0, np.int64)


@dataclass
class RunColumns:
    """One run's rows; `name`, `cat`, `shape` index `strings`, `lane` indexes `lane_keys`."""

    strings: list[str]
    lane_keys: list[tuple[Any, Any]]
    ph: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    lane: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    corr: np.ndarray
    ext_id: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    flow_id: np.ndarray  # string flow ids are local string ids + STRING_FLOW_BASE
    flow_bp: np.ndarray
    shape: np.ndarray
    ordinal: np.ndarray  # run-local element index
    n_events: int
    by_phase: dict[str, int]
    by_category: dict[str, int]
    slice_start_min: int | None
    slice_end_max: int | None
    negative_durations: int
    memory: dict[str, list[int]] = field(default_factory=dict)  # lane is a local lane index
    metadata: list[tuple[str, Any, Any, Any]] = field(default_factory=list)


def _ns_column(values: list, n: int) -> tuple[np.ndarray, np.ndarray]:
    """µs values (int, float or None) -> (ns int64, valid mask), exactly as the spec converts.

    Integers are multiplied exactly; floats are rounded half to even after the float product.
    """
    try:
        arr = np.array(values)
    except (OverflowError, ValueError):
        return _ns_slow(values, n)
    valid = None
    if arr.dtype == object:
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
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
            is_int = np.fromiter((type(v) is int for v in values), dtype=bool, count=n)
            if is_int.any():
                out[is_int] = np.array([v for v in values if type(v) is int], dtype=np.int64) * 1000
        return out, valid
    return _ns_slow(values, n, valid)


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


def _int64_or_none(value: Any) -> int:
    return value if type(value) is int and INT64_MIN < value <= INT64_MAX else NO_VALUE


def _int_column(values: list) -> np.ndarray:
    """Values already mapped to int or NO_VALUE; big or odd values fall back to a checked path."""
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        return np.array([_int64_or_none(v) for v in values], dtype=np.int64)


def convert_run(events: list[Event]) -> RunColumns:
    """Convert the decoded events of one run (every element, in file order)."""
    n = len(events)
    phs = [e.ph for e in events]
    by_phase = Counter(phs)
    if None in by_phase:
        by_phase["?"] = by_phase.get("?", 0) + by_phase.pop(None)

    strings: list[str] = [""]
    string_ids: dict[str, int] = {"": 0}

    def intern(text: str) -> int:
        sid = string_ids.get(text)
        if sid is None:
            sid = string_ids[text] = len(strings)
            strings.append(text)
        return sid

    get = string_ids.get
    names = [e.name for e in events]
    cats = [e.cat for e in events]
    cat_ids = [
        (sid if (sid := get(c)) is not None else intern(c)) if c is not None else 0 for c in cats
    ]
    ph_x = np.fromiter((p == "X" for p in phs), dtype=bool, count=n)
    cat_arr = np.array(cat_ids, dtype=np.int32)
    by_category: dict[str, int] = {}
    if ph_x.any():
        counts = np.bincount(cat_arr[ph_x], minlength=len(strings))
        by_category = {strings[i]: int(c) for i, c in enumerate(counts) if c}

    starts, valid = _ns_column([e.ts for e in events], n)
    is_meta = np.fromiter((p == "M" for p in phs), dtype=bool, count=n)
    rows = valid & ~is_meta
    metadata: list[tuple[str, Any, Any, Any]] = []
    if is_meta.any():
        for i in np.flatnonzero(is_meta).tolist():
            e = events[i]
            metadata.append((e.name, e.pid, e.tid, e.args))

    memory: dict[str, list[int]] = {k: [] for k in ("ordinal", "lane", "ts", *MEMORY_FIELDS)}
    lane_keys: list[tuple[Any, Any]] = []
    lane_ids: dict[tuple[Any, Any], int] = {}

    def lane_of(pid: Any, tid: Any) -> int:
        key = (pid, tid)
        lid = lane_ids.get(key)
        if lid is None:
            lid = lane_ids[key] = len(lane_keys)
            lane_keys.append(key)
        return lid

    mem_rows = [i for i, name in enumerate(names) if name == "[memory]" and phs[i] == "i"]
    for i in mem_rows:
        e = events[i]
        args = e.args
        memory["ordinal"].append(i)
        memory["ts"].append(int(starts[i]) if valid[i] else NO_VALUE)
        memory["lane"].append(lane_of(e.pid, e.tid) if valid[i] else -1)
        for key in MEMORY_FIELDS:
            value = getattr(args, key) if args is not None else None
            if type(value) is float and value.is_integer():
                value = int(value)
            memory[key].append(_int64_or_none(value))

    index = np.flatnonzero(rows)
    m = len(index)
    idx = index.tolist()
    sub = [events[i] for i in idx] if m != n else events
    row_names = [names[i] for i in idx] if m != n else names
    name_ids = [
        (sid if (sid := get(nm)) is not None else intern(nm)) if nm is not None else 0
        for nm in row_names
    ]
    lane_get = lane_ids.get
    lanes = [
        lid if (lid := lane_get(key := (e.pid, e.tid))) is not None else lane_of(*key) for e in sub
    ]
    start = starts[index]
    durs, dur_valid = _ns_column([e.dur or 0 for e in sub], m)
    negative = int(np.count_nonzero(durs < 0))
    dur = np.where(dur_valid & (durs > 0), durs, 0)
    overflow = start > INT64_MAX - dur
    if overflow.any():
        dur[overflow] = INT64_MAX - start[overflow]
    row_ph = [phs[i] for i in idx] if m != n else phs
    code_of = {p: (ord(p) if len(p) == 1 and p < "\x80" else 0) for p in by_phase if p != "?"}
    ph_codes = np.array([code_of.get(p, 0) for p in row_ph], dtype=np.uint8)
    row_cat = cat_arr[index]
    args_list = [e.args for e in sub]
    # Only JSON integers count (not bools or floats); out-of-range ones are dropped by _int_column.
    corr = _int_column(
        [
            v if type(v := (a.correlation if a is not None else None)) is int else NO_VALUE
            for a in args_list
        ]
    )
    ext = _int_column(
        [
            v if type(v := (a.external_id if a is not None else None)) is int else NO_VALUE
            for a in args_list
        ]
    )
    stream = _int_column(
        [
            v if type(v := (a.stream if a is not None else None)) is int else NO_VALUE
            for a in args_list
        ]
    )
    shape = np.full(m, -1, dtype=np.int32)
    dims_list = [
        (a.input_dims if a.input_dims is not None else a.input_dims_old) if a is not None else None
        for a in args_list
    ]
    for j, dims in enumerate(dims_list):
        if dims is not None:
            shape[j] = intern(_dims_text(dims))

    kinds = np.array([category_kind(s) for s in strings], dtype=np.int8)
    row_x = ph_codes == ord("X")
    device = np.full(m, -1, dtype=np.int64)
    for j in np.flatnonzero(row_x & np.isin(kinds[row_cat], GPU_KINDS)).tolist():
        device[j] = _device(sub[j])

    flow_id = np.full(m, NO_VALUE, dtype=np.int64)
    flow_bp = np.zeros(m, dtype=np.uint8)
    flow_rows = np.flatnonzero(
        (ph_codes == ord("s")) | (ph_codes == ord("f")) | (ph_codes == ord("t"))
    )
    for j in flow_rows.tolist():
        e = sub[j]
        fid = e.id
        if type(fid) is int and INT64_MIN < fid <= INT64_MAX:
            flow_id[j] = fid
        elif type(fid) is str:
            flow_id[j] = STRING_FLOW_BASE + intern(fid)
        bp = e.bp
        if type(bp) is str and bp and bp[0] < "\x80":
            flow_bp[j] = ord(bp[0])

    smin = emax = None
    if row_x.any():
        xs = start[row_x]
        smin = int(xs.min())
        emax = int((xs + dur[row_x]).max())
    return RunColumns(
        strings=strings,
        lane_keys=lane_keys,
        ph=ph_codes,
        name=np.array(name_ids, dtype=np.int32),
        cat=row_cat,
        lane=np.array(lanes, dtype=np.int32),
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
        by_phase=dict(by_phase),
        by_category=by_category,
        slice_start_min=smin,
        slice_end_max=emax,
        negative_durations=negative,
        memory=memory,
        metadata=metadata,
    )


def _dims_text(dims: Any) -> str:
    """Compact JSON text of an `Input Dims` value (lone surrogates in strings survive)."""
    try:
        return msgspec.json.encode(dims).decode()
    except UnicodeEncodeError:
        return json.dumps(dims, ensure_ascii=False, separators=(",", ":"))


def _device(e: Event) -> int:
    args = e.args
    if args is not None:
        value = args.device
        if type(value) is int and INT64_MIN < value <= INT64_MAX:
            return value
    pid = e.pid
    if type(pid) is int and INT64_MIN < pid <= INT64_MAX:
        return pid
    if type(pid) is str and pid and pid.isascii() and pid.isdigit():
        value = int(pid)
        if value <= INT64_MAX:
            return value
    return -1
