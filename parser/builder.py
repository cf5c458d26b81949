"""Merges converted runs of events into the columns of one Trace."""

from __future__ import annotations

from typing import Any

import numpy as np

from .convert import MEMORY_FIELDS, STRING_FLOW_BASE, RunColumns, convert_run
from .events import Event
from .model import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    ROW_COLUMNS,
    ChunkIndex,
    Lane,
    MemoryEvents,
    Source,
    Trace,
)

GPU_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)
CONSOLIDATE_ROWS = 1 << 18
COLUMNS = ROW_COLUMNS
DTYPES = {
    "ph": np.uint8,
    "name": np.int32,
    "cat": np.int32,
    "lane": np.int32,
    "flow_bp": np.uint8,
    "shape": np.int32,
}


def _load_trim() -> Any:
    """glibc's malloc_trim, or None elsewhere."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _load_trim()


def release_heap() -> None:
    """Give freed heap memory back to the OS (glibc keeps it otherwise); a no-op elsewhere."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def lane_key(value: Any) -> Any:
    """pid/tid as a dict key that keeps int 1 and str "1" apart."""
    return (type(value) is str, value)


class TraceBuilder:
    """Collects runs; `finish` turns them into a Trace."""

    def __init__(self) -> None:
        self.strings: list[str] = [""]
        self.string_ids: dict[str, int] = {"": 0}
        self.lanes: list[Lane] = []
        self.lane_ids: dict[tuple, int] = {}
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
        self.consolidated: dict[str, int] = {c: 0 for c in COLUMNS}
        self.small_rows = 0
        self.mem_parts: dict[str, list[np.ndarray]] = {
            c: [] for c in ("ordinal", "lane", "ts", *MEMORY_FIELDS)
        }
        self.process_meta: dict[Any, dict[str, Any]] = {}
        self.thread_meta: dict[tuple, dict[str, Any]] = {}
        self.n_events = 0
        self.by_phase: dict[str, int] = {}
        self.by_category: dict[str, int] = {}
        self.slice_start_min: int | None = None
        self.slice_end_max: int | None = None
        self.negative_durations = 0
        self.chunk_offset: list[int] = []
        self.chunk_length: list[int] = []
        self.chunk_first: list[int] = []

    def intern(self, text: str) -> int:
        sid = self.string_ids.get(text)
        if sid is None:
            sid = self.string_ids[text] = len(self.strings)
            self.strings.append(text)
        return sid

    def lane_id(self, pid: Any, tid: Any) -> int:
        key = (lane_key(pid), lane_key(tid))
        lid = self.lane_ids.get(key)
        if lid is None:
            lid = self.lane_ids[key] = len(self.lanes)
            self.lanes.append(Lane(id=lid, pid=pid, tid=tid))
        return lid

    def add_events(self, events: list[Event], offset: int, length: int) -> None:
        """Convert and merge one run of decoded events found at [offset, offset + length)."""
        self.add_run(convert_run(events), offset, length)

    def add_run(self, run: RunColumns, offset: int, length: int) -> None:
        base = self.n_events
        self.chunk_offset.append(offset)
        self.chunk_length.append(length)
        self.chunk_first.append(base)
        string_map = np.array([self.intern(s) for s in run.strings], dtype=np.int32)
        lane_map = np.array([self.lane_id(p, t) for p, t in run.lane_keys], dtype=np.int32)
        parts = self.parts
        parts["ph"].append(run.ph)
        parts["name"].append(string_map[run.name])
        parts["cat"].append(string_map[run.cat])
        parts["lane"].append(lane_map[run.lane] if len(run.lane) else run.lane)
        for column in ("start", "dur", "corr", "ext_id", "device", "stream", "flow_bp"):
            parts[column].append(getattr(run, column))
        shape = run.shape.copy()
        has_shape = shape >= 0
        shape[has_shape] = string_map[shape[has_shape]]
        parts["shape"].append(shape)
        flow = run.flow_id.copy()
        string_flow = flow >= STRING_FLOW_BASE
        if string_flow.any():
            local = flow[string_flow] - STRING_FLOW_BASE
            flow[string_flow] = STRING_FLOW_BASE + string_map[local].astype(np.int64)
        parts["flow_id"].append(flow)
        parts["ordinal"].append(run.ordinal + base)
        self.small_rows += len(run.ordinal)
        if self.small_rows >= CONSOLIDATE_ROWS:
            self._consolidate()
        mem = run.memory
        if mem.get("ordinal"):
            self.mem_parts["ordinal"].append(np.array(mem["ordinal"], dtype=np.int64) + base)
            lanes = np.array(mem["lane"], dtype=np.int64)
            lanes[lanes >= 0] = lane_map[lanes[lanes >= 0]]
            self.mem_parts["lane"].append(lanes)
            for key in ("ts", *MEMORY_FIELDS):
                self.mem_parts[key].append(np.array(mem[key], dtype=np.int64))
        for name, pid, tid, args in run.metadata:
            self._metadata(name, pid, tid, args)
        self.n_events += run.n_events
        for key, count in run.by_phase.items():
            self.by_phase[key] = self.by_phase.get(key, 0) + count
        for key, count in run.by_category.items():
            self.by_category[key] = self.by_category.get(key, 0) + count
        if run.slice_start_min is not None:
            if self.slice_start_min is None or run.slice_start_min < self.slice_start_min:
                self.slice_start_min = run.slice_start_min
            if self.slice_end_max is None or run.slice_end_max > self.slice_end_max:
                self.slice_end_max = run.slice_end_max
        self.negative_durations += run.negative_durations

    def _consolidate(self) -> None:
        """Join the runs' small column pieces into one large piece per column.

        Small arrays live on the allocator's heap, which keeps freed space; large ones are
        mapped and given back when freed. Joining every few hundred thousand rows keeps the heap
        small, so the final join does not leave a heap the size of the model behind.
        """
        for column, pieces in self.parts.items():
            start = self.consolidated[column]
            if len(pieces) - start > 1:
                pieces[start:] = [np.concatenate(pieces[start:])]
            self.consolidated[column] = len(pieces)
        self.small_rows = 0
        release_heap()

    def _metadata(self, name: Any, pid: Any, tid: Any, args: Any) -> None:
        if args is None:
            return
        pkey, tkey = lane_key(pid), (lane_key(pid), lane_key(tid))
        value = args.name
        if name == "process_name" and type(value) is str:
            self.process_meta.setdefault(pkey, {})["name"] = value
        elif name == "thread_name" and type(value) is str:
            self.thread_meta.setdefault(tkey, {})["name"] = value
        elif name == "process_sort_index" and type(args.sort_index) is int:
            self.process_meta.setdefault(pkey, {})["sort"] = args.sort_index
        elif name == "thread_sort_index" and type(args.sort_index) is int:
            self.thread_meta.setdefault(tkey, {})["sort"] = args.sort_index
        elif name == "process_labels" and type(args.labels) is str:
            self.process_meta.setdefault(pkey, {})["labels"] = args.labels

    def finish(self, source: Source, header: dict[str, Any]) -> Trace:
        def joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            if not parts:
                return np.zeros(0, dtype=dtype)
            return np.concatenate(parts).astype(dtype, copy=False)

        release_heap()
        # Column by column, dropping each column's parts at once, so that the peak is the
        # model plus one column rather than twice the model.
        columns = {}
        for c in COLUMNS:
            columns[c] = joined(self.parts[c], DTYPES.get(c, np.int64))
            self.parts[c].clear()
            self.consolidated[c] = 0
            # glibc raises its mmap threshold as large blocks are freed, so the freed pieces
            # may sit in the heap: hand them back before the next column is joined.
            release_heap()
        from .model import category_kind

        kinds = np.array([category_kind(s) for s in self.strings], dtype=np.int8)
        is_gpu_row = (columns["ph"] == ord("X")) & np.isin(kinds[columns["cat"]], GPU_KINDS)
        gpu_lanes = set(np.unique(columns["lane"][is_gpu_row]).tolist())
        for lane in self.lanes:
            lane.is_gpu = lane.id in gpu_lanes
            pmeta = self.process_meta.get(lane_key(lane.pid), {})
            tmeta = self.thread_meta.get((lane_key(lane.pid), lane_key(lane.tid)), {})
            lane.process_name = pmeta.get("name")
            lane.process_sort = pmeta.get("sort")
            lane.process_labels = pmeta.get("labels")
            lane.thread_name = tmeta.get("name")
            lane.thread_sort = tmeta.get("sort")
        memory = MemoryEvents(**{k: joined(v, np.int64) for k, v in self.mem_parts.items()})
        trace = Trace(
            source=source,
            header=header,
            strings=self.strings,
            **columns,
            lanes=self.lanes,
            memory=memory,
            n_events=self.n_events,
            by_phase=dict(self.by_phase),
            by_category=dict(self.by_category),
            slice_start_min=self.slice_start_min,
            slice_end_max=self.slice_end_max,
            chunks=ChunkIndex(
                offset=np.array(self.chunk_offset, dtype=np.int64),
                length=np.array(self.chunk_length, dtype=np.int64),
                first_ordinal=np.array(self.chunk_first, dtype=np.int64),
            ),
        )
        if self.negative_durations:
            trace.warnings.append(
                f"{self.negative_durations} events have a negative duration (counted as 0)"
            )
        return trace
