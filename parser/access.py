"""Reading one event's full JSON again, on demand (the model keeps no args)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .events import lenient_loads
from .model import Trace
from .source import SourceState, iter_blocks


def read_event(trace: Trace, row: int) -> dict[str, Any] | None:
    """The complete JSON object of the event at `row`, read back from the file; None if unavailable.

    Only the run of events holding it is decoded. A gzip'd file is decompressed from its start up
    to that run (the format has no index), so on big .gz files call this off the UI thread.
    """
    chunks = trace.chunks
    if chunks is None or not len(chunks.first_ordinal):
        return None
    ordinal = int(trace.ordinal[row])
    index = int(np.searchsorted(chunks.first_ordinal, ordinal, side="right")) - 1
    if index < 0:
        return None
    offset = int(chunks.offset[index])
    length = int(chunks.length[index])
    raw = _read_range(trace, offset, length)
    if raw is None:
        return None
    try:
        events = lenient_loads(b"[" + raw + b"]")
    except ValueError:
        return None
    position = ordinal - int(chunks.first_ordinal[index])
    if not isinstance(events, list) or not 0 <= position < len(events):
        return None
    event = events[position]
    return event if isinstance(event, dict) else None


def _read_range(trace: Trace, offset: int, length: int) -> bytes | None:
    source = trace.source
    payload = trace.__dict__.get("_payload")
    if payload is not None:
        return payload[offset : offset + length]
    try:
        if not source.compressed:
            with open(source.path, "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        state = SourceState(path=source.path, size=source.bytes, compressed=True)
        pieces: list[bytes] = []
        position = 0
        for block in iter_blocks(state):
            block_end = position + len(block)
            if block_end > offset:
                pieces.append(block[max(0, offset - position) : offset + length - position])
            position = block_end
            if position >= offset + length:
                break
        return b"".join(pieces)
    except OSError:
        return None
