"""Accumulates decoded events into the columns of a Trace."""

from __future__ import annotations

import math
from array import array
from typing import Any

import msgspec
import numpy as np

from .events import Event
from .model import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    NO_VALUE,
    ChunkIndex,
    Lane,
    MemoryEvents,
    Source,
    Trace,
    category_kind,
)

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
GPU_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)
STRING_FLOW_BASE = 1 << 62


def _int_or_none(value: Any) -> int | None:
    """A JSON integer (not a bool) that fits int64, else None."""
    if type(value) is int and INT64_MIN < value <= INT64_MAX:
        return value
    return None


def to_ns(value: Any) -> int | None:
    """Microseconds as written -> integer ns (spec: exact for ints, round-half-even for floats)."""
    kind = type(value)
    if kind is int:
        ns = value * 1000
    elif kind is float:
        if not math.isfinite(value):
            return None
        ns = round(value * 1000)
    else:
        return None
    if INT64_MIN < ns <= INT64_MAX:
        return ns
    return None


def _lane_key(value: Any) -> Any:
    """pid/tid as a dict key that keeps int 1 and str "1" apart (and floats, bools from ints)."""
    kind = type(value)
    if kind is int or kind is str:
        return value
    if value is None:
        return ("none",)
    return ("repr", repr(value))


class TraceBuilder:
    """Collects rows batch by batch; `finish` turns them into a Trace."""

    def __init__(self) -> None:
        self.strings: list[str] = [""]
        self.string_ids: dict[str, int] = {"": 0}
        self.string_kinds: list[int] = [category_kind("")]
        self.lanes: list[Lane] = []
        self.lane_ids: dict[tuple, int] = {}
        self.col_ph = array("B")
        self.col_name = array("i")
        self.col_cat = array("i")
        self.col_lane = array("i")
        self.col_start = array("q")
        self.col_dur = array("q")
        self.col_corr = array("q")
        self.col_ext = array("q")
        self.col_device = array("q")
        self.col_stream = array("q")
        self.col_flow = array("q")
        self.col_bp = array("B")
        self.col_shape = array("i")
        self.col_ordinal = array("q")
        self.mem: dict[str, array] = {
            k: array("q")
            for k in (
                "ordinal", "lane", "ts", "addr", "bytes", "total_allocated",
                "total_reserved", "device_type", "device_id",
            )
        }
        self.process_meta: dict[Any, dict[str, Any]] = {}
        self.thread_meta: dict[tuple, dict[str, Any]] = {}
        self.n_events = 0
        self.by_phase: dict[str, int] = {}
        self.by_category: dict[str, int] = {}
        self.slice_start_min: int | None = None
        self.slice_end_max: int | None = None
        self.negative_durations = 0
        self.chunk_offset = array("q")
        self.chunk_length = array("q")
        self.chunk_first = array("q")

    # -- strings and lanes -------------------------------------------------------------------

    def intern(self, text: str) -> int:
        sid = self.string_ids.get(text)
        if sid is None:
            sid = len(self.strings)
            self.strings.append(text)
            self.string_ids[text] = sid
            self.string_kinds.append(category_kind(text))
        return sid

    def lane_id(self, pid: Any, tid: Any) -> int:
        key = (_lane_key(pid), _lane_key(tid))
        lid = self.lane_ids.get(key)
        if lid is None:
            lid = len(self.lanes)
            self.lanes.append(Lane(id=lid, pid=pid, tid=tid))
            self.lane_ids[key] = lid
        return lid

    # -- events ------------------------------------------------------------------------------

    def add_chunk(self, offset: int, length: int) -> None:
        self.chunk_offset.append(offset)
        self.chunk_length.append(length)
        self.chunk_first.append(self.n_events)

    def add_non_object(self, count: int = 1) -> None:
        """Elements of traceEvents that are not objects still count, under phase `?`."""
        self.n_events += count
        self.by_phase["?"] = self.by_phase.get("?", 0) + count

    def add_events(self, events: list[Event | None]) -> None:
        """Add a run of decoded events (None for elements that were not objects)."""
        intern = self.intern
        string_ids = self.string_ids
        kinds = self.string_kinds
        by_phase = self.by_phase
        by_category = self.by_category
        lane_id = self.lane_id
        lane_ids = self.lane_ids
        ph_col, name_col, cat_col, lane_col = self.col_ph, self.col_name, self.col_cat, self.col_lane
        start_col, dur_col, corr_col, ext_col = self.col_start, self.col_dur, self.col_corr, self.col_ext
        dev_col, stream_col, flow_col, bp_col = self.col_device, self.col_stream, self.col_flow, self.col_bp
        shape_col, ord_col = self.col_shape, self.col_ordinal
        smin, emax = self.slice_start_min, self.slice_end_max
        ordinal = self.n_events
        for ev in events:
            if ev is None:
                by_phase["?"] = by_phase.get("?", 0) + 1
                ordinal += 1
                continue
            ph = ev.ph
            if type(ph) is str:
                by_phase[ph] = by_phase.get(ph, 0) + 1
            else:
                by_phase["?"] = by_phase.get("?", 0) + 1
                ph = "?"
            cat = ev.cat
            if type(cat) is not str:
                cat = ""
            if ph == "X":
                by_category[cat] = by_category.get(cat, 0) + 1
            elif ph == "M":
                self._metadata(ev)
                ordinal += 1
                continue
            name = ev.name
            if type(name) is not str:
                name = ""
            args = ev.args
            if ph == "i" and name == "[memory]":
                self._memory(ev, ordinal)
            ts = ev.ts
            if type(ts) is int and -9223372036854775 <= ts <= 9223372036854775:
                start = ts * 1000
            else:
                start = to_ns(ts)
                if start is None:
                    ordinal += 1
                    continue
            dur = ev.dur
            if type(dur) is int and 0 <= dur <= 9223372036854775:
                dur = dur * 1000
            else:
                if dur is not None and ((type(dur) is int and dur < 0) or (type(dur) is float and dur < 0)):
                    self.negative_durations += 1
                dur = to_ns(dur)
                if dur is None or dur < 0:
                    dur = 0
            if start + dur > INT64_MAX:
                dur = INT64_MAX - start
            sid = string_ids.get(name)
            name_id = sid if sid is not None else intern(name)
            sid = string_ids.get(cat)
            cat_id = sid if sid is not None else intern(cat)
            pid, tid = ev.pid, ev.tid
            lid = lane_ids.get((pid, tid)) if type(pid) in (int, str) and type(tid) in (int, str) else None
            if lid is None:
                lid = lane_id(pid, tid)
            ph_col.append(ord(ph) if len(ph) == 1 and ord(ph) < 128 else 0)
            name_col.append(name_id)
            cat_col.append(cat_id)
            lane_col.append(lid)
            start_col.append(start)
            dur_col.append(dur)
            ord_col.append(ordinal)
            corr = ext = stream = NO_VALUE
            device = -1
            shape = -1
            if args is not None:
                value = args.correlation
                if type(value) is int and INT64_MIN < value <= INT64_MAX:
                    corr = value
                value = args.external_id
                if type(value) is int and INT64_MIN < value <= INT64_MAX:
                    ext = value
                value = args.stream
                if type(value) is int and INT64_MIN < value <= INT64_MAX:
                    stream = value
                dims = args.input_dims if args.input_dims is not None else args.input_dims_old
                if dims is not None:
                    shape = intern(msgspec.json.encode(dims).decode())
            if ph == "X":
                if smin is None or start < smin:
                    smin = start
                end = start + dur
                if emax is None or end > emax:
                    emax = end
                if kinds[cat_id] in GPU_KINDS:
                    device = self._device(ev, args)
            corr_col.append(corr)
            ext_col.append(ext)
            stream_col.append(stream)
            dev_col.append(device)
            shape_col.append(shape)
            if ph in ("s", "t", "f"):
                flow = ev.id
                if type(flow) is int and INT64_MIN < flow <= INT64_MAX:
                    flow_col.append(flow)
                elif type(flow) is str:
                    flow_col.append(STRING_FLOW_BASE + intern(flow))
                else:
                    flow_col.append(NO_VALUE)
                bp = ev.bp
                bp_col.append(ord(bp[0]) if type(bp) is str and bp and ord(bp[0]) < 128 else 0)
            else:
                flow_col.append(NO_VALUE)
                bp_col.append(0)
            ordinal += 1
        self.n_events = ordinal
        self.slice_start_min, self.slice_end_max = smin, emax

    @staticmethod
    def _device(ev: Event, args: Any) -> int:
        if args is not None:
            value = args.device
            if type(value) is int and INT64_MIN < value <= INT64_MAX:
                return value
        pid = ev.pid
        if type(pid) is int and INT64_MIN < pid <= INT64_MAX:
            return pid
        if type(pid) is str and pid and pid.isascii() and pid.isdigit():
            value = int(pid)
            if value <= INT64_MAX:
                return value
        return -1

    def _memory(self, ev: Event, ordinal: int) -> None:
        args = ev.args
        mem = self.mem
        mem["ordinal"].append(ordinal)
        start = to_ns(ev.ts)
        mem["ts"].append(NO_VALUE if start is None else start)
        mem["lane"].append(-1 if start is None else self.lane_id(ev.pid, ev.tid))
        for key in ("addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id"):
            value = getattr(args, key) if args is not None else None
            if type(value) is float and value.is_integer():
                value = int(value)
            mem[key].append(value if type(value) is int and INT64_MIN < value <= INT64_MAX else NO_VALUE)

    def _metadata(self, ev: Event) -> None:
        name = ev.name
        args = ev.args
        value = args.name if args is not None else None
        if name == "process_name" and type(value) is str:
            self.process_meta.setdefault(_lane_key(ev.pid), {})["name"] = value
        elif name == "thread_name" and type(value) is str:
            self.thread_meta.setdefault((_lane_key(ev.pid), _lane_key(ev.tid)), {})["name"] = value
        elif name == "process_sort_index" and args is not None:
            index = _int_or_none(args.sort_index)
            if index is not None:
                self.process_meta.setdefault(_lane_key(ev.pid), {})["sort"] = index
        elif name == "thread_sort_index" and args is not None:
            index = _int_or_none(args.sort_index)
            if index is not None:
                self.thread_meta.setdefault((_lane_key(ev.pid), _lane_key(ev.tid)), {})["sort"] = index
        elif name == "process_labels" and args is not None and type(args.labels) is str:
            self.process_meta.setdefault(_lane_key(ev.pid), {})["labels"] = args.labels

    # -- result ------------------------------------------------------------------------------

    def finish(self, source: Source, header: dict[str, Any]) -> Trace:
        def col(values: array, dtype: Any) -> np.ndarray:
            return np.frombuffer(values, dtype=dtype).copy() if len(values) else np.zeros(0, dtype)

        kinds = np.asarray(self.string_kinds, dtype=np.int8)
        device_col = col(self.col_device, np.int64)
        cat_col = col(self.col_cat, np.int32)
        lane_col = col(self.col_lane, np.int32)
        ph_col = col(self.col_ph, np.uint8)
        is_gpu_row = (ph_col == ord("X")) & np.isin(kinds[cat_col], GPU_KINDS)
        gpu_lanes = set(np.unique(lane_col[is_gpu_row]).tolist())
        for lane in self.lanes:
            lane.is_gpu = lane.id in gpu_lanes
            pmeta = self.process_meta.get(_lane_key(lane.pid), {})
            tmeta = self.thread_meta.get((_lane_key(lane.pid), _lane_key(lane.tid)), {})
            lane.process_name = pmeta.get("name")
            lane.process_sort = pmeta.get("sort")
            lane.process_labels = pmeta.get("labels")
            lane.thread_name = tmeta.get("name")
            lane.thread_sort = tmeta.get("sort")
        mem = self.mem
        memory = MemoryEvents(**{k: col(v, np.int64) for k, v in mem.items()})
        trace = Trace(
            source=source,
            header=header,
            strings=self.strings,
            ph=ph_col,
            name=col(self.col_name, np.int32),
            cat=cat_col,
            lane=lane_col,
            start=col(self.col_start, np.int64),
            dur=col(self.col_dur, np.int64),
            corr=col(self.col_corr, np.int64),
            ext_id=col(self.col_ext, np.int64),
            device=device_col,
            stream=col(self.col_stream, np.int64),
            flow_id=col(self.col_flow, np.int64),
            flow_bp=col(self.col_bp, np.uint8),
            shape=col(self.col_shape, np.int32),
            ordinal=col(self.col_ordinal, np.int64),
            lanes=self.lanes,
            memory=memory,
            n_events=self.n_events,
            by_phase=dict(self.by_phase),
            by_category=dict(self.by_category),
            slice_start_min=self.slice_start_min,
            slice_end_max=self.slice_end_max,
            chunks=ChunkIndex(
                offset=col(self.chunk_offset, np.int64),
                length=col(self.chunk_length, np.int64),
                first_ordinal=col(self.chunk_first, np.int64),
            ),
        )
        if self.negative_durations:
            trace.warnings.append(
                f"{self.negative_durations} events have a negative duration (counted as 0)"
            )
        return trace
