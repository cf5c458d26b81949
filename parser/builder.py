"""Merges converted runs of events into the columns of one Trace."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .convert import MEMORY_FIELDS, STRING_FLOW_BASE, RunColumns, convert_run
from .events import Event, clean_header
from .model import (
    ROW_COLUMNS,
    ROW_DTYPES,
    ChunkIndex,
    Lane,
    MemoryEvents,
    Source,
    Trace,
)

# The columns that hold a run's local ids, remapped as a run is merged; the others are copied.
REMAPPED = frozenset({"name", "cat", "lane", "shape", "flow_id", "ordinal"})


def _load_trim() -> Any:
    """glibc's malloc_trim, or None elsewhere."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _load_trim()
ROW_BYTES = sum(np.dtype(dtype).itemsize for dtype in ROW_DTYPES.values())  # one row, all columns
TRIM_MIN_BYTES = 8 << 20  # columns below this are grown without trimming the heap afterwards


def release_heap() -> None:
    """Give freed heap memory back to the OS (glibc keeps it otherwise); a no-op elsewhere."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def no_hugepage_advice() -> None:
    """Stop numpy asking the kernel for transparent huge pages on big arrays.

    The model and the analysis write each big array once, soon after allocating it. Where the
    kernel compacts memory to find huge pages at fault time (THP "defrag=madvise"), that advice
    made a 1 GB trace's load and first view a fifth slower; without it the pages are plain.
    NUMPY_MADVISE_HUGEPAGE, when set, still decides."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    setter = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if setter is not None:
        setter(False)


NOTES = {
    "out_of_range": "{} numbers beyond float range (such as 1e400) read as missing values",
    "odd_shapes": "{} input shapes hold a number out of range, NaN, Infinity or null: no shape",
    "far_times": "{} events have a time more than 2^62 ns (146 years) from 0: not placed",
    "long_durations": "{} events end more than 2^62 ns (146 years) from 0: cut there",
}


def note_warnings(notes: dict[str, int]) -> list[str]:
    """The load's warnings for the values it made missing or cut."""
    return [NOTES[key].format(count) for key, count in notes.items() if count]


# What each metadata event's value is kept as (the run's `metadata`, see convert._metadata).
META_KEYS = {
    "process_name": "name",
    "thread_name": "name",
    "process_sort_index": "sort",
    "thread_sort_index": "sort",
    "process_labels": "labels",
}


def lane_key(value: Any) -> Any:
    """pid/tid as a dict key that keeps int 1 and str "1" apart."""
    return (type(value) is str, value)


def _remap(mapping: np.ndarray, local: np.ndarray, out: np.ndarray) -> None:
    """Write `mapping[local]` into `out`; a 0-d `local` (one value for the run) broadcasts."""
    if local.ndim == 0 or not len(out):
        out[:] = mapping[local] if len(mapping) else local
    else:
        np.take(mapping, local, out=out)


class TraceBuilder:
    """Collects runs; `finish` turns them into a Trace."""

    def __init__(self, expected_bytes: int | None = None) -> None:
        self.strings: list[str] = [""]
        self.string_ids: dict[str, int] = {"": 0}
        self.lanes: list[Lane] = []
        self.lane_ids: dict[tuple, int] = {}
        # Rows are written straight into columns allocated for the whole file (estimated from
        # the first run's rows per byte) and grown by doubling when the estimate is short. The
        # allocation is virtual until written, so an overestimate costs no memory, and the
        # model is never copied again: no joining of per-run pieces at the end.
        self.expected_bytes = expected_bytes
        self.columns: dict[str, np.ndarray] = {}
        self.n_rows = 0
        self.mem_parts: dict[str, list[np.ndarray]] = {
            c: [] for c in ("ordinal", "lane", "ts", *MEMORY_FIELDS)
        }
        self.gpu_lanes: set[int] = set()  # lanes holding a GPU activity
        self.process_meta: dict[Any, dict[str, Any]] = {}
        self.thread_meta: dict[tuple, dict[str, Any]] = {}
        self.n_events = 0
        self.by_phase: dict[str, int] = {}
        self.by_category: dict[str, int] = {}
        self.slice_start_min: int | None = None
        self.slice_end_max: int | None = None
        self.negative_durations = 0
        self.notes: dict[str, int] = {}
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

    def add_events(
        self, events: list[Event], offset: int, length: int, out_of_range: int = 0
    ) -> None:
        """Convert and merge one run of decoded events found at [offset, offset + length)."""
        self.add_run(convert_run(events, out_of_range), offset, length)

    def add_run(self, run: RunColumns, offset: int, length: int) -> None:
        base = self.n_events
        self.chunk_offset.append(offset)
        self.chunk_length.append(length)
        self.chunk_first.append(base)
        string_map = self._string_map(run.strings)
        lane_map = np.array([self.lane_id(p, t) for p, t in run.lane_keys], dtype=np.int32)
        m = len(run.ordinal)
        self._reserve(m, length)
        lo, hi = self.n_rows, self.n_rows + m
        cols = self.columns
        for column in ROW_COLUMNS:
            if column not in REMAPPED:
                cols[column][lo:hi] = getattr(run, column)
        # Local ids become the trace's, gathered straight into place (no temporary per column).
        # A shape's -1 (none) picks the -1 appended to the map.
        _remap(string_map, run.name, cols["name"][lo:hi])
        _remap(string_map, run.cat, cols["cat"][lo:hi])
        _remap(lane_map, run.lane, cols["lane"][lo:hi])
        _remap(np.append(string_map, np.int32(-1)), run.shape, cols["shape"][lo:hi])
        flow = cols["flow_id"][lo:hi]
        flow[:] = run.flow_id
        if m and flow.max() >= STRING_FLOW_BASE:
            string_flow = flow >= STRING_FLOW_BASE
            local = flow[string_flow] - STRING_FLOW_BASE
            flow[string_flow] = STRING_FLOW_BASE + string_map[local].astype(np.int64)
        np.add(run.ordinal, base, out=cols["ordinal"][lo:hi])
        self.n_rows = hi
        mem = run.memory
        if len(mem.get("ordinal", ())):
            self.mem_parts["ordinal"].append(np.asarray(mem["ordinal"], dtype=np.int64) + base)
            lanes = np.array(mem["lane"], dtype=np.int64)  # a copy: remapped in place
            placed = lanes >= 0
            lanes[placed] = lane_map[lanes[placed]]
            self.mem_parts["lane"].append(lanes)
            for key in ("ts", *MEMORY_FIELDS):
                self.mem_parts[key].append(np.asarray(mem[key], dtype=np.int64))
        if run.gpu_lanes:
            self.gpu_lanes.update(lane_map[run.gpu_lanes].tolist())
        for name, pid, tid, value in run.metadata:
            if name.startswith("thread"):
                key = (lane_key(pid), lane_key(tid))
                self.thread_meta.setdefault(key, {})[META_KEYS[name]] = value
            else:
                self.process_meta.setdefault(lane_key(pid), {})[META_KEYS[name]] = value
        self.n_events += run.n_events
        for key, count in run.by_phase.items():
            self.by_phase[key] = self.by_phase.get(key, 0) + count
        for key, count in run.by_category.items():
            self.by_category[key] = self.by_category.get(key, 0) + count
        if run.slice_start_min is not None and run.slice_end_max is not None:
            if self.slice_start_min is None or run.slice_start_min < self.slice_start_min:
                self.slice_start_min = run.slice_start_min
            if self.slice_end_max is None or run.slice_end_max > self.slice_end_max:
                self.slice_end_max = run.slice_end_max
        self.negative_durations += run.negative_durations
        for key, count in run.notes.items():
            self.notes[key] = self.notes.get(key, 0) + count

    def _string_map(self, strings: list[str]) -> np.ndarray:
        """The trace's ids of a run's strings, interning the new ones (in the run's order)."""
        ids = list(map(self.string_ids.get, strings))
        if None in ids:
            ids = [self.intern(text) if sid is None else sid for text, sid in zip(strings, ids)]
        return np.array(ids, dtype=np.int32)

    def _reserve(self, rows: int, run_bytes: int) -> None:
        """Make room for `rows` more rows."""
        need = self.n_rows + rows
        capacity = len(self.columns["ph"]) if self.columns else 0
        if self.columns and need <= capacity:
            return
        if not self.columns and self.expected_bytes and rows and run_bytes > 0:
            # Rows per byte of this run, over the whole file, with a wide margin: runs differ
            # (the first often holds larger events), and unwritten capacity costs no memory.
            rows_in_file = rows / run_bytes * self.expected_bytes
            # No row takes less than 16 bytes of JSON.
            most = self.expected_bytes // 16 + 4096
            estimates = [min(int(rows_in_file * f) + 4096, most) for f in (2.5, 1.1)]
        else:
            estimates = [capacity + capacity // 2, capacity + capacity // 8]
        # An estimate too large to map even unwritten (a capped address space: ulimit -v) falls
        # back to a tighter one, then to what is needed.
        tries = dict.fromkeys([*(max(need, e, 4096) for e in estimates), need])
        for capacity in tries:
            try:
                for column, dtype in ROW_DTYPES.items():
                    array = np.empty(capacity, dtype=dtype)
                    old = self.columns.get(column)
                    if old is not None:
                        array[: self.n_rows] = old[: self.n_rows]
                    self.columns[column] = array  # the old array is freed here, one by one
                break
            except MemoryError:
                if capacity == need:
                    raise
        # The old columns are freed as they are copied: their heap memory goes back to the
        # system, unless the columns are small (malloc_trim walks the whole heap, some ms each
        # time, for a job's small ranks more than their load's conversion costs).
        if capacity * ROW_BYTES >= TRIM_MIN_BYTES:
            release_heap()

    def finish(self, source: Source, header: dict[str, Any]) -> Trace:
        def joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            if not parts:
                return np.zeros(0, dtype=dtype)
            return np.concatenate(parts).astype(dtype, copy=False)

        n = self.n_rows
        columns: dict[str, Any] = {}
        for c, dtype in ROW_DTYPES.items():
            array = self.columns.get(c)
            if array is None:
                array = np.zeros(0, dtype=dtype)
            # A view of the first n rows: the unused tail was never written, so never resident.
            columns[c] = array[:n]
        self.columns = {}
        for lane in self.lanes:
            lane.is_gpu = lane.id in self.gpu_lanes  # as each run found them
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
        trace.warnings.extend(clean_header(header))
        trace.warnings.extend(note_warnings(self.notes))
        return trace
