"""Reading one event's full JSON again, on demand (the model keeps no args)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import msgspec
import numpy as np

from .convert import to_ns
from .events import lenient_loads
from .model import Trace
from .reader import split_elements
from .source import SourceState, iter_blocks


def array_elements(view: bytes, base_depth: int = 0) -> tuple[list[int], list[int], int | None]:
    """The byte ranges of the complete elements of a JSON array body in `view`, and where the
    array closes (None when it does not close in `view`): the parser's own framing, for callers
    that read raw event text again (the export)."""
    return split_elements(view, base_depth)


def file_changed(trace: Trace) -> str | None:
    """Why the trace's file is no longer the one that was loaded, or None while it is (or when
    the trace did not come from a file)."""
    source = trace.source
    if source.mtime_ns is None:
        return None
    try:
        stat = os.stat(source.path)
    except OSError as exc:
        return f"{source.path}: can no longer be read ({exc.strerror or exc})"
    if (stat.st_size, stat.st_mtime_ns) != (source.bytes, source.mtime_ns):
        return f"{source.path}: the file changed on disk after it was loaded"
    return None


def read_event(trace: Trace, row: int) -> dict[str, Any] | None:
    """The complete JSON object of the event at `row`, read back from the file; None if unavailable.

    Only the run of events holding it is decoded. A gzip'd file is decompressed from its start up
    to that run (the format has no index), so on big .gz files call this off the UI thread.
    A file that changed since it was loaded gives None, never another event's data.
    """
    if file_changed(trace) is not None:
        return None
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
    if not isinstance(event, dict) or not _is_row(trace, row, event):
        return None
    return event


def _is_row(trace: Trace, row: int, event: dict[str, Any]) -> bool:
    """Does the event read back have the row's name and start (the file may have changed)?"""
    name = event.get("name")
    if (name if isinstance(name, str) else "") != trace.name_of(row):
        return False
    return to_ns(event.get("ts")) == int(trace.start[row])


def _read_range(trace: Trace, offset: int, length: int) -> bytes | None:
    try:
        with closing(read_ranges(trace, [(offset, offset + length)])) as pieces:
            return next(pieces, None)
    except OSError:
        return None


def read_ranges(trace: Trace, ranges: list[tuple[int, int | None]]) -> Iterator[bytes]:
    """The uncompressed bytes of each [start, end) range (end None: to the end of the stream),
    in order; ranges ascend and do not overlap. A plain file is read by seeks, a gzip'd one in
    one pass of decompression (closed with the generator). Bytes past the end of the stream are
    missing, never an error; a failure to read raises OSError."""
    source = trace.source
    if not source.compressed:
        with open(source.path, "rb") as handle:
            for start, end in ranges:
                handle.seek(start)
                yield handle.read() if end is None else handle.read(end - start)
        return
    state = SourceState(path=source.path, size=source.bytes, compressed=True)
    with closing(iter_blocks(state)) as blocks:
        pieces: list[bytes] = []
        pieces_start = 0  # uncompressed offset of pieces[0]
        have = 0  # uncompressed offset just after the last piece
        eof = False
        for start, end in ranges:
            while not eof and (end is None or have < end):
                block = next(blocks, None)
                if block is None:
                    eof = True
                    break
                if have + len(block) <= start:  # all before the range: dropped
                    pieces, have = [], have + len(block)
                    pieces_start = have
                    continue
                pieces.append(block)
                have += len(block)
            data = b"".join(pieces)
            lo = max(0, start - pieces_start)
            if end is None:
                yield data[lo:]
                pieces, pieces_start = [], have
                continue
            yield data[lo : max(lo, end - pieces_start)]
            rest = data[end - pieces_start :] if end > pieces_start else data
            pieces, pieces_start = [rest], max(end, pieces_start)


def read_events(
    trace: Trace, rows: np.ndarray, needle: bytes | None = None
) -> dict[int, dict[str, Any]]:
    """The complete JSON objects of many events at once, by row; rows that cannot be read back
    are left out. Each run of events holding a wanted row is read and split once, and a gzip'd
    file is decompressed once, in one pass (`read_event` per row would start over each time).
    With `needle`, a run whose bytes do not contain it is not decoded (its rows are left out):
    a quick way to skip runs that cannot hold what the caller looks for."""
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    chunks = trace.chunks
    if not len(rows) or chunks is None or not len(chunks.first_ordinal):
        return {}
    if file_changed(trace) is not None:
        return {}
    ordinals = trace.ordinal[rows]
    index = np.searchsorted(chunks.first_ordinal, ordinals, side="right") - 1
    wanted: dict[int, list[int]] = {}
    for row, chunk in zip(rows.tolist(), index.tolist()):
        if chunk >= 0:
            wanted.setdefault(chunk, []).append(row)
    found: dict[int, dict[str, Any]] = {}
    for chunk, raw in _read_chunks(trace, sorted(wanted)):
        if needle is not None and raw.find(needle) < 0:
            continue
        try:
            events = RAW_LIST.decode(b"[" + raw + b"]")
        except Exception:  # a run that needed repairs at load: decode it the lenient way
            try:
                events = lenient_loads(b"[" + raw + b"]")
            except ValueError:
                continue
        if not isinstance(events, list):
            continue
        first = int(chunks.first_ordinal[chunk])
        for row in wanted[chunk]:
            position = int(trace.ordinal[row]) - first
            if not 0 <= position < len(events):
                continue
            event = events[position]
            if isinstance(event, msgspec.Raw):
                try:
                    event = lenient_loads(bytes(event))
                except ValueError:
                    continue
            if isinstance(event, dict) and _is_row(trace, row, event):
                found[row] = event
    return found


RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])  # a run's events, each as its JSON text


def _read_chunks(trace: Trace, wanted: list[int]) -> Iterator[tuple[int, bytes]]:
    """(chunk, bytes) for the wanted chunks (ascending), in order; a failure to read ends them."""
    chunks = trace.chunks
    assert chunks is not None
    ranges = [(int(chunks.offset[i]), int(chunks.offset[i] + chunks.length[i])) for i in wanted]
    pieces = read_ranges(trace, ranges)
    try:
        yield from zip(wanted, pieces)
    except OSError:
        return
    finally:
        pieces.close()
