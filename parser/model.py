"""The columnar trace model: one numpy row per timed event, lanes, header and load facts."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

# Sentinel for "no value" in int64 columns (correlation, stream, memory fields...).
NO_VALUE = np.iinfo(np.int64).min

# Phase codes stored in the `ph` column: the ASCII code of a one-letter `ph`, 0 for anything else.
PH_COMPLETE = ord("X")
PH_INSTANT = ord("i")
PH_INSTANT_OLD = ord("I")
PH_FLOW_START = ord("s")
PH_FLOW_STEP = ord("t")
PH_FLOW_END = ord("f")
PH_COUNTER = ord("C")

# Bytes of one row in the model: MODEL_BYTES_PER_EVENT, the sum of the columns' item sizes (82).
# The summary's analyses add their own per-event arrays (nesting order, parents, self times,
# links, ...): the whole `summary` peaks at about SUMMARY_BYTES_PER_EVENT (BENCHMARKS.md: 587 MB
# for 2.9 M events, interpreter included).
SUMMARY_BYTES_PER_EVENT = 200


def out_of_memory_message(path: str, events: int, stage: str | None = None) -> str:
    """One line for a load or an analysis that ran out of memory, with what it needs; `stage`
    names the work that ran out (`nesting (for idle by cpu)`, `the export`), None or "":
    unknown, or the load."""

    def size(n: float) -> str:
        return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"

    where = f" computing {stage}" if stage else ""
    if events <= 0:
        return (
            f"{path}: out of memory{where or ' while loading'} (free memory, or raise the "
            "limit: ulimit -v)"
        )
    return (
        f"{path}: out of memory{where}: about {events:,} events need about "
        f"{size(events * MODEL_BYTES_PER_EVENT)} for the model ({MODEL_BYTES_PER_EVENT} bytes "
        f"per event) and {size(events * SUMMARY_BYTES_PER_EVENT)} for a summary; free memory, "
        "or raise the limit (ulimit -v)"
    )


# Lowercased categories with a meaning in the spec.
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
MEMCPY_CATEGORIES = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATEGORIES = frozenset({"gpu_memset", "memset"})
NOT_CPU_CATEGORIES = frozenset({"gpu_user_annotation", "cuda_sync", "trace"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime"})

# Values of the per-category `cat_kind` table.
KIND_OTHER = 0  # a CPU slice when ph == X
KIND_KERNEL = 1
KIND_MEMCPY = 2
KIND_MEMSET = 3
KIND_RUNTIME = 4  # CPU slice, and a runtime call
KIND_NOT_CPU = 5  # gpu_user_annotation, cuda_sync, trace: neither GPU activity nor CPU work


def category_kind(cat: str) -> int:
    """Classify a category string as the spec does (case-insensitive)."""
    low = cat[:64].lower()  # longer strings are no known category (and may be megabytes)
    if low == "kernel":
        return KIND_KERNEL
    if low in MEMCPY_CATEGORIES:
        return KIND_MEMCPY
    if low in MEMSET_CATEGORIES:
        return KIND_MEMSET
    if low in RUNTIME_CATEGORIES:
        return KIND_RUNTIME
    if low in NOT_CPU_CATEGORIES:
        return KIND_NOT_CPU
    return KIND_OTHER


@dataclass
class Lane:
    """One (pid, tid) pair exactly as written in the trace: a CPU thread or a GPU stream."""

    id: int
    pid: Any  # int or str, as written
    tid: Any
    is_gpu: bool = False  # holds at least one GPU activity
    process_name: str | None = None
    thread_name: str | None = None
    process_sort: int | None = None
    thread_sort: int | None = None
    process_labels: str | None = None

    @property
    def label(self) -> str:
        """A readable lane name, e.g. `python 4887 / thread 4887 (python)` or `GPU 0 / stream 7`."""
        if self.is_gpu:
            tid = str(self.tid)
            if self.thread_name and self.thread_name.strip():
                stream = self.thread_name.strip()
            else:
                stream = tid if tid.startswith("stream") else f"stream {tid}"
            return f"GPU {self.pid} / {stream}"
        proc = f"{self.process_name} {self.pid}" if self.process_name else f"process {self.pid}"
        if self.process_name and self.process_name.split()[-1:] == [str(self.pid)]:
            proc = self.process_name  # `MTIA 9` (pid 9): the pid once
        thread = self.thread_name.strip() if self.thread_name else f"thread {self.tid}"
        return f"{proc} / {thread}"

    @property
    def sort_key(self) -> tuple:
        """Order of lanes: processes by sort index then pid, threads by sort index then tid."""

        def ident(v: Any) -> tuple:
            return (0, v, "") if isinstance(v, int) else (1, 0, str(v))

        psort = self.process_sort if self.process_sort is not None else 1 << 40
        tsort = self.thread_sort if self.thread_sort is not None else 1 << 40
        return (psort, ident(self.pid), tsort, ident(self.tid))


@dataclass
class Source:
    path: str
    bytes: int
    compressed: bool
    mtime_ns: int | None = None  # the file's mtime when it was opened (None: not from a file)


def _dtype(kind: type[np.generic]) -> dict[str, np.dtype]:
    return {"dtype": np.dtype(kind)}


@dataclass
class RowColumns:
    """One row per timed event, in columns: numpy arrays of equal length. Declared here once,
    with their dtypes, for a whole `Trace` and for one converted run of it (`RunColumns`); the
    builder, the cache and the tests read the list and the dtypes from `ROW_DTYPES`.

    - ``ph`` uint8: ASCII code of the phase letter (0 for multi-letter or missing phases).
    - ``name``, ``cat`` int32: ids into ``strings`` (missing/null is the empty string).
    - ``lane`` int32: index into ``lanes``.
    - ``start``, ``dur`` int64 ns: ``dur`` is 0 when missing, negative or not a number.
    - ``corr`` int64: ``args.correlation`` when a JSON integer, else NO_VALUE.
    - ``ext_id`` int64: ``args["External id"]`` when an integer, else NO_VALUE.
    - ``device`` int64: for GPU activity the device of the spec, else -1.
    - ``stream`` int64: ``args.stream`` when an integer, else NO_VALUE.
    - ``flow_id`` int64: for s/t/f events the flow id (strings mapped above 2**62), else NO_VALUE.
    - ``flow_bp`` uint8: ASCII code of ``bp`` for flow events ("e" binds to the enclosing slice).
    - ``shape`` int32: id of the JSON text of ``args["Input Dims"]`` when recorded, else -1.
    - ``ordinal`` int64: index of the event in ``traceEvents`` (file order, all phases counted).
    """

    ph: np.ndarray = field(metadata=_dtype(np.uint8))
    name: np.ndarray = field(metadata=_dtype(np.int32))
    cat: np.ndarray = field(metadata=_dtype(np.int32))
    lane: np.ndarray = field(metadata=_dtype(np.int32))
    start: np.ndarray = field(metadata=_dtype(np.int64))
    dur: np.ndarray = field(metadata=_dtype(np.int64))
    corr: np.ndarray = field(metadata=_dtype(np.int64))
    ext_id: np.ndarray = field(metadata=_dtype(np.int64))
    device: np.ndarray = field(metadata=_dtype(np.int64))
    stream: np.ndarray = field(metadata=_dtype(np.int64))
    flow_id: np.ndarray = field(metadata=_dtype(np.int64))
    flow_bp: np.ndarray = field(metadata=_dtype(np.uint8))
    shape: np.ndarray = field(metadata=_dtype(np.int32))
    ordinal: np.ndarray = field(metadata=_dtype(np.int64))


# The per-row columns by name, with their dtypes (builder, cache, tests).
ROW_DTYPES: dict[str, np.dtype] = {f.name: f.metadata["dtype"] for f in fields(RowColumns)}
ROW_COLUMNS = tuple(ROW_DTYPES)
MODEL_BYTES_PER_EVENT = sum(dtype.itemsize for dtype in ROW_DTYPES.values())


@dataclass
class Trace(RowColumns):
    """A loaded trace. Rows are the timed events (numeric `ts`, `ph` other than `M`), in file order,
    in the columns of `RowColumns`.

    ``cat_kind`` maps a category id to one of the KIND_* values, so
    ``cat_kind[trace.cat]`` classifies every row at once.
    """

    source: Source
    header: dict[str, Any]
    strings: list[str]
    lanes: list[Lane]
    memory: MemoryEvents
    n_events: int
    by_phase: dict[str, int]
    by_category: dict[str, int]
    slice_start_min: int | None  # ns, over every X event with numeric ts
    slice_end_max: int | None
    complete: bool = True
    warnings: list[str] = field(default_factory=list)
    stopped_at: int | None = None  # uncompressed byte offset where reading stopped early
    chunks: ChunkIndex | None = None  # where to find each event again, for args on demand
    workers: int = 1  # decoding processes the load used (1: this process alone)
    from_cache: bool = False  # read back from the model cache, not decoded from the file
    cache_key: Any = None  # the file's parser.cache.Key when it was read (None: not from a file)
    # Cache files mapped with their CRCs not read yet (parser.cache.check reads them), or None.
    cache_unchecked: Any = None
    # Tables derived from `strings`, made on first use and made again when the table has grown
    # (a string table is only ever appended to, so its length tells whether they are current).
    _cat_kind: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _string_index: dict[str, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.start)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.dur

    @property
    def cat_kind(self) -> np.ndarray:
        """KIND_* of every string id, so that `trace.cat_kind[trace.cat]` classifies the rows."""
        kinds = self._cat_kind
        if kinds is None or len(kinds) != len(self.strings):
            kinds = np.fromiter(
                (category_kind(s) for s in self.strings), dtype=np.int8, count=len(self.strings)
            )
            self._cat_kind = kinds
        return kinds

    def row_kind(self) -> np.ndarray:
        """KIND_* per row, for slices (ph X); -1 for rows that are not slices."""
        kind = self.cat_kind[self.cat].astype(np.int8)
        kind[self.ph != PH_COMPLETE] = -1
        return kind

    def string_id(self, text: str) -> int:
        """Id of `text` in the string table, or -1."""
        index = self._string_index
        if index is None or len(index) != len(self.strings):
            index = {s: i for i, s in enumerate(self.strings)}
            self._string_index = index
        return index.get(text, -1)

    def name_of(self, row: int) -> str:
        return self.strings[int(self.name[row])]

    def cat_of(self, row: int) -> str:
        return self.strings[int(self.cat[row])]


@dataclass
class MemoryEvents:
    """The `[memory]` instant events (with or without ts), in file order; int64 with NO_VALUE."""

    ordinal: np.ndarray
    lane: np.ndarray  # -1 when the event has no ts (it is then not a row)
    ts: np.ndarray  # ns, NO_VALUE when missing
    addr: np.ndarray
    bytes: np.ndarray
    total_allocated: np.ndarray
    total_reserved: np.ndarray
    device_type: np.ndarray
    device_id: np.ndarray

    def __len__(self) -> int:
        return len(self.ordinal)


MEMORY_COLUMNS = tuple(f.name for f in fields(MemoryEvents))


@dataclass
class ChunkIndex:
    """Decoded runs of events: uncompressed byte range and the ordinal of their first event."""

    offset: np.ndarray  # int64, offset of the run's first byte in the uncompressed stream
    length: np.ndarray  # int64
    first_ordinal: np.ndarray  # int64
