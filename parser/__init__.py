"""Bytes -> Trace: streaming msgspec parser of torch.profiler (Kineto) Chrome-trace JSON."""

from .access import read_event
from .model import NO_VALUE, Lane, MemoryEvents, Source, Trace
from .reader import read_bytes, read_trace
from .source import TraceError


def load(path: str, progress=None) -> Trace:
    """Load a trace file (.json or gzip, by magic bytes). Raises TraceError with a one-line message.

    `progress(bytes_done, bytes_total, events_so_far)` is called as the file is read; an exception
    raised from it cancels the load and propagates.
    """
    return read_trace(str(path), progress)


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
    "load",
    "loads",
    "read_event",
]
