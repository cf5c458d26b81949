"""Bytes -> Trace: streaming msgspec parser of torch.profiler (Kineto) Chrome-trace JSON.

This module is the parser's way in: `load`, `loads`, `save_cache`, and `prepare_workers` for a
program that must start the decoding workers before a terminal UI takes the standard streams;
`worker_context(*modules)` for another pool of worker processes (the job's digests), which shares
the decoding workers' server and adds the modules it wants preloaded.
Framing and salvage are in reader.py; the worker processes (parallel.py) are started from
`load` alone.
"""

from . import cache
from .access import file_changed, read_event
from .builder import no_hugepage_advice, release_heap
from .model import NO_VALUE, Lane, MemoryEvents, Source, Trace
from .parallel import (
    pays_for_workers,
    prepare_workers,
    read_trace,
    release_workers,
    releasing,
    threads_affordable,
    worker_context,
)
from .reader import Progress, read_bytes
from .source import TraceError


def load(
    path: str,
    progress: Progress | None = None,
    use_cache: bool = True,
    workers: int | None = None,
    write_cache: bool = True,
    release: bool = False,
    verify_cache: bool = True,
) -> Trace:
    """Load a trace file (.json or gzip, by magic bytes). Raises TraceError with a one-line message.

    `progress(bytes_done, bytes_total, events_so_far)` is called as the file is read; an exception
    raised from it cancels the load and propagates. With `use_cache`, a valid cache entry of the
    model is memory-mapped instead of parsing, and (with `write_cache`) a big trace parsed in full
    is cached; a caller that wants its result sooner passes False and calls `save_cache` later.
    `workers` processes decode runs in parallel (default: one per CPU, for big files only); a
    program with a terminal UI calls `prepare_workers(path)` before the UI starts. `release`, for
    a process that loads nothing more: afterwards, stop the workers' server and give the heap
    the decoding freed back to the system (the analysis needs that memory more); a pool of
    workers is stopped in a thread meanwhile (`parallel.wait_released` waits for it).
    `verify_cache=False` maps a cache entry without reading its CRCs (a reopen then costs the
    same at any size); the caller must run `cache.check(trace)` before trusting it further
    (the viewer does, after its first frame: parser/cache.py says the rule).
    """
    try:
        return _load(str(path), progress, use_cache, workers, write_cache, verify_cache, release)
    finally:
        if release:
            try:
                if not releasing():  # else a thread stops them once the load's pool is down
                    release_workers()
                release_heap()
            except (MemoryError, ImportError, OSError):  # out of memory: the load's error stands
                pass


def _load(
    path: str,
    progress: Progress | None,
    use_cache: bool,
    workers: int | None,
    write_cache: bool,
    verify_cache: bool = True,
    release: bool = False,
) -> Trace:
    if use_cache:
        try:
            cached = cache.load(path, verify=verify_cache)
        except OSError:
            cached = None
        if cached is not None:
            if progress is not None:
                progress(cached.source.bytes, cached.source.bytes, cached.n_events)
            return cached
    # The file's identity before the read: a cache entry is written only if it still holds.
    key = cache.identity(path)
    trace = read_trace(path, progress, workers, release)
    trace.cache_key = key
    if use_cache and write_cache:
        save_cache(trace)
    return trace


def save_cache(trace: Trace) -> bool:
    """Cache a freshly parsed, complete, big trace for the next open; True if an entry was written."""
    if trace.from_cache or not trace.complete:
        return False
    if trace.source.bytes < cache.MIN_CACHED_BYTES:
        return False
    return cache.save(trace) is not None


def loads(data: bytes, path: str = "<memory>") -> Trace:
    """Load a trace from bytes (plain or gzip'd JSON)."""
    return read_bytes(data, path)


__all__ = [
    "NO_VALUE",
    "Lane",
    "MemoryEvents",
    "Source",
    "Trace",
    "TraceError",
    "file_changed",
    "load",
    "loads",
    "pays_for_workers",
    "prepare_workers",
    "read_event",
    "save_cache",
    "threads_affordable",
    "worker_context",
]

no_hugepage_advice()  # before any big array is made
