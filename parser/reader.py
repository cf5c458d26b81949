"""Framing and salvage: find `traceEvents`, cut the byte stream into runs of whole events, decode
them, and read what can be read of damaged or cut-off data.

A run is cut after a `}` that is followed by a `,` (a cheap guess); the decoder itself confirms the
guess, because a run decodes as a JSON array exactly when the cut fell between two events. A guess
that lands inside a string or inside nested args fails to decode and an earlier one is tried.
Regions that still fail (malformed or cut-off data) are split exactly by a structural scan and each
event is decoded on its own, so nothing that can be read is lost.

This module decodes in the calling process. Decoding runs in worker processes is
`parallel.py`'s job: it hands the `Reader` a `DecodeAhead` (parallel.RunsAhead) that decodes
the bulk of the events array before the serial loop here reads the rest.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import numpy as np

from .builder import TraceBuilder
from .convert import RunColumns
from .events import (
    ANY_DECODER,
    EVENTS_DECODER,
    Repair,
    decode_events,
    event_from_object,
    is_truncated,
    lenient_loads,
    may_hold_surrogates,
    string_quotes,
    trailing_at,
)
from .model import Source, Trace
from .source import (
    PERFETTO_HEAD,
    SourceState,
    TraceError,
    looks_like_perfetto,
    perfetto_message,
)

RUN_BYTES = 4 << 20  # target size of one decoded run of events
_CUT = re.compile(rb"\}\s*,")
_WS = b" \t\r\n"
_NOT_WS = re.compile(rb"[^ \t\r\n]")  # finds the end of a run of whitespace at C speed
_SCALAR = re.compile(rb'"(?:[^"\\]|\\.)*"|[^\s,:{}\[\]"]+', re.DOTALL)
MAX_CUT_TRIES = 8

Progress = Callable[[int, int, int], None]
# Decodes runs ahead of the serial loop (in worker processes), leaving the reader's position
# where the serial loop goes on.
DecodeAhead = Callable[["Reader"], None]


class Buffer:
    """A sliding window over the uncompressed stream: `data[pos:]` is unread, `base` its offset."""

    def __init__(self, blocks: Iterator[bytes]):
        self.blocks = blocks
        self.data = b""
        self.base = 0  # uncompressed offset of data[0]
        self.pos = 0
        self.eof = False

    def fill(self, need: int) -> bool:
        """Make at least `need` unread bytes available; False if the stream ends first."""
        if len(self.data) - self.pos >= need:
            return True
        pieces = [self.data[self.pos :]]
        have = len(pieces[0])
        while have < need and not self.eof:
            block = next(self.blocks, None)
            if block is None:
                self.eof = True
                break
            pieces.append(block)
            have += len(block)
        self.base += self.pos
        self.data = b"".join(pieces)
        self.pos = 0
        return have >= need

    def restart_at(self, offset: int, blocks: Iterator[bytes]) -> None:
        """Continue reading at `offset` of the stream, from `blocks` (which start there)."""
        self.blocks = blocks
        self.data = b""
        self.base = offset
        self.pos = 0
        self.eof = False

    def put_back(self, offset: int, data: bytes) -> None:
        """Make `data`, which starts at `offset` of the stream, the next bytes read (before
        the unread ones)."""
        self.data = data + self.data[self.pos :]
        self.base = offset
        self.pos = 0

    def skip_ws(self) -> int | None:
        """Skip whitespace; return the next byte (without consuming it), or None at the end.

        Whitespace is dropped block by block as it is skipped, so gigabytes of it cost time at
        memory speed and no memory."""
        while True:
            data, pos = self.data, self.pos
            n = len(data)
            if pos < n and data[pos] not in _WS:
                return data[pos]
            pos = self.pos = next_non_ws(data, pos)
            if pos < n:
                return data[pos]
            if not self.fill(1):
                return None

    @property
    def offset(self) -> int:
        return self.base + self.pos


WS_PROBE = 4096
WS_SCAN = 1 << 16  # small steps: their temporaries stay in the CPU's cache


def next_non_ws(data: bytes, pos: int) -> int:
    """Index of the first byte at or after `pos` that is not JSON whitespace (len(data): none).

    A few bytes of whitespace (indentation) are found by a regular expression; a long run
    (a whitespace bomb) in vectorised steps, at about a gigabyte per second."""
    end = len(data)
    found = _NOT_WS.search(data, pos, min(end, pos + WS_PROBE))
    if found is not None:
        return found.start()
    pos = min(end, pos + WS_PROBE)
    while pos < end:
        count = min(end - pos, WS_SCAN)
        scan = np.frombuffer(data, np.uint8, count, pos)
        # Bytes above the space are never whitespace; below it only tab, newline, return are.
        stop = int((scan > 32).argmax()) if scan.max() > 32 else count
        low = scan[:stop]
        blank = (low == 32) | (low == 10) | (low == 13) | (low == 9)
        if not blank.all():
            return pos + int((~blank).argmax())
        if stop < count:
            return pos + stop
        pos += count
    return end


class _Stop(Exception):
    """The stream ended (or broke) before the JSON did."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while decoding.

    Decoding allocates millions of objects and makes no reference cycles, so the collector's
    passes over them (triggered by allocation counts) are pure cost: about a fifth of the time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_bytes(data: bytes, path: str = "<memory>") -> Trace:
    import io

    from .source import GZIP_MAGIC, gunzip_blocks

    state = SourceState(path=path, size=len(data), compressed=data[:2] == GZIP_MAGIC)
    if state.compressed:
        # Streamed as a file is, so a damaged or cut-off gzip keeps what did decompress.
        return read_source(state, gunzip_blocks(io.BytesIO(data), state), None)

    def blocks() -> Iterator[bytes]:
        for start in range(0, len(data), RUN_BYTES):
            state.bytes_read = min(len(data), start + RUN_BYTES)
            yield data[start : start + RUN_BYTES]

    return read_source(state, blocks(), None)


def read_source(
    state: SourceState,
    blocks: Iterator[bytes],
    progress: Progress | None,
    ahead: DecodeAhead | None = None,
) -> Trace:
    """Read the trace whose uncompressed bytes `blocks` yields (`state` says what they come
    from). Raises TraceError when nothing of a trace can be read; reads what it can of the rest."""
    buf = Buffer(blocks)
    builder = TraceBuilder(expected_bytes=state.expected_bytes)
    header: dict[str, Any] = {}
    warnings: list[str] = []
    reader = Reader(buf, builder, state, progress, warnings, ahead)
    # A Perfetto protobuf trace, by its bytes (0x0a, its first byte, reads as a space in JSON).
    buf.fill(PERFETTO_HEAD)
    if looks_like_perfetto(buf.data[:PERFETTO_HEAD]):
        raise TraceError(perfetto_message(state.path))
    first = buf.skip_ws()
    if first is None:
        if state.stream_error:
            raise TraceError(f"{state.path}: not a readable gzip file ({state.stream_error})")
        raise TraceError(f"{state.path}: the file is empty")
    if first == 0xEF and buf.data[buf.pos : buf.pos + 3] == b"\xef\xbb\xbf":
        buf.pos += 3
        first = buf.skip_ws()
    complete = True
    found_events = False
    try:
        if first == ord("["):
            buf.pos += 1
            found_events = True
            reader.read_events()
        elif first == ord("{"):
            buf.pos += 1
            found_events = reader.read_object(header)
        else:
            raise TraceError(_not_json_message(state.path, buf.data[buf.pos : buf.pos + 16]))
        tail = buf.skip_ws()
        if tail is not None:
            warnings.append(f"ignored unexpected data after the JSON at byte {buf.offset}")
    except _Stop as stop:
        complete = False
        if not found_events and not reader.events_started:
            if builder.n_events == 0 and not header:
                raise TraceError(f"{state.path}: {stop.args[0]}") from None
        warnings.append(stop.args[0])
    if not found_events and not reader.events_started:
        if complete:
            raise TraceError(f"{state.path}: not a trace (no traceEvents array)")
    if state.stream_error:
        complete = False
        warnings.append(
            f"the gzip stream is damaged after {state.bytes_read} bytes: {state.stream_error}"
        )
    elif state.truncated_stream and complete:
        complete = False
        warnings.append("the gzip stream ends early (no end marker)")
    if reader.dropped > 5:
        warnings.append(f"skipped {reader.dropped} malformed events or stray brackets in all")
    if state.modified():
        # Written to while it was read: what was read may mix the old and the new contents.
        raise TraceError(
            f"{state.path}: the file changed while it was being read (is it still being "
            "written?); load it again when it is complete"
        )
    if state.replaced():
        warnings.append(
            "the file was replaced on disk while it loaded: this is the file as it was "
            "when the load began"
        )
    size = state.bytes_read if state.stream else state.size
    if progress is not None:
        progress(size, size, builder.n_events)
    source = Source(
        path=state.path, bytes=size, compressed=state.compressed, mtime_ns=state.mtime_ns
    )
    trace = builder.finish(source, header)
    trace.complete = complete
    if not complete:
        trace.stopped_at = reader.last_good
    if state.compressed:
        # Offsets are of the decompressed JSON, which a .gz file's size does not show.
        warnings = [w + COMPRESSED_OFFSETS if _BYTE_OFFSET.search(w) else w for w in warnings]
    trace.warnings[:0] = warnings
    return trace


COMPRESSED_OFFSETS = " (bytes of the decompressed JSON)"
_BYTE_OFFSET = re.compile(r"\bbytes? \d")


# A JSON value other than an object or array, as the first bytes of a file show it.
_JSON_SCALAR = re.compile(rb'\s*(?:"|(?:true|false|null|-?\d+(?:\.\d*)?(?:[eE][+-]?\d*)?)\s*\Z)')


def _not_json_message(path: str, head: bytes) -> str:
    printable = sum(32 <= b < 127 or b in b"\t\r\n" for b in head)
    if head and printable < len(head) * 0.8:
        return f"{path}: not a trace (binary data, not JSON)"
    if _JSON_SCALAR.match(head):
        return f"{path}: not a trace (JSON, but neither an object with traceEvents nor an array)"
    return f"{path}: not a trace (not JSON: starts with {head[:12]!r})"


class Reader:
    """Reads one trace's JSON from a `Buffer` into a `TraceBuilder`: the header keys, then the
    events array run by run, with other cuts tried, defects repaired and the rest salvaged."""

    def __init__(
        self,
        buf: Buffer,
        builder: TraceBuilder,
        state: SourceState,
        progress: Progress | None,
        warnings: list[str],
        ahead: DecodeAhead | None = None,
    ):
        self.buf = buf
        self.builder = builder
        self.state = state
        self.progress = progress
        self.warnings = warnings
        self.events_started = False
        self.last_good = 0  # uncompressed offset just after the last complete event
        self.dropped = 0
        self.stray_bytes = 0  # bytes skipped to get past brackets out of place
        self.ahead = ahead  # decodes runs in worker processes before the serial loop
        self._nothing_to_repair = -1  # offset of a run that failed to decode and had no defects

    # -- the top-level object ----------------------------------------------------------------

    def read_object(self, header: dict[str, Any]) -> bool:
        buf = self.buf
        found = False
        while True:
            c = buf.skip_ws()
            if c is None:
                raise _Stop(f"the file ends at byte {buf.offset} before the JSON does")
            if c == ord("}"):
                buf.pos += 1
                return found
            if c == ord(","):
                buf.pos += 1
                continue
            key = self._value()
            if not isinstance(key, str):
                raise _Stop(f"malformed JSON at byte {buf.offset}: expected a key")
            c = buf.skip_ws()
            if c != ord(":"):
                raise _Stop(f"malformed JSON at byte {buf.offset}: expected ':'")
            buf.pos += 1
            c = buf.skip_ws()
            if key == "traceEvents" and c == ord("["):
                buf.pos += 1
                found = True
                self.events_started = True
                self.read_events()
                self.last_good = buf.offset
            else:
                header[key] = self._value()

    def _value(self) -> Any:
        """Decode the single JSON value starting at the read position (header keys and values)."""
        buf = self.buf
        need = 1 << 16
        while True:
            buf.fill(need)
            view = buf.data[buf.pos :]
            end: int | None
            try:
                value = ANY_DECODER.decode(view)
                end = len(view)
            except msgspec.DecodeError as exc:
                end = trailing_at(exc)
                if end is None:
                    truncated = is_truncated(exc)
                    # msgspec also says "truncated" for a lone surrogate (`"\ud800"`): a value
                    # the scan finds whole, with data after it, is decoded leniently instead.
                    end = self._scan_value_end(view)
                    whole = end is not None and (end < len(view) or buf.eof or not truncated)
                    if not whole and truncated and not buf.eof:
                        need = max(need * 4, len(view) * 2)
                        continue
                    if not whole and truncated:
                        raise _Stop(
                            f"the file ends at byte {buf.base + len(buf.data)} before the JSON does"
                        ) from None
                    if end is None:
                        raise _Stop(f"malformed JSON at byte {buf.offset}") from None
                try:
                    value = lenient_loads(view[:end])
                except ValueError:
                    raise _Stop(f"malformed JSON at byte {buf.offset}") from None
            buf.pos += end
            return value

    @staticmethod
    def _scan_value_end(view: bytes) -> int | None:
        if view[:1] not in (b"{", b"["):
            # A string or a bare literal (`NaN`, a number): it has no brackets to count.
            scalar = _SCALAR.match(view)
            return scalar.end() if scalar else None
        starts, ends, _closed = split_elements(view, 0, top_level_value=True)
        return ends[0] if ends else None

    # -- the events array --------------------------------------------------------------------

    def read_events(self) -> None:
        """Decode runs of events until the closing bracket of the array."""
        buf = self.buf
        self.events_started = True
        self.last_good = buf.offset
        if self.ahead is not None:
            self.ahead(self)
        while True:
            c = buf.skip_ws()
            if c is None:
                raise _Stop(self._cut_off_message())
            if c == ord("]"):
                buf.pos += 1
                if self._stray_bracket():
                    continue
                self.last_good = buf.offset
                return
            if c == ord(","):  # stray separator (e.g. a trailing comma before `]`)
                buf.pos += 1
                continue
            buf.fill(RUN_BYTES)
            if self._decode_run():
                return
            self.report()

    def _stray_bracket(self) -> bool:
        """Is the `]` just read a bracket out of place, not the end of the events array?

        It is when an event follows it (`]{` or `],{`), which the JSON after the array's end
        never holds. Then it is skipped (with a warning) and the events go on; else the read
        position is left after the `]` (or after the `,` that follows it, where that is no
        longer in the buffer)."""
        buf = self.buf
        at = buf.offset - 1
        c = buf.skip_ws()
        comma = None
        if c == ord(","):
            comma = buf.offset
            buf.pos += 1
            c = buf.skip_ws()
        if c == ord("{"):
            self.dropped += 1
            self._warn_stray(at, 1, "a stray `]`")
            return True
        if comma is not None and comma >= buf.base:
            buf.pos = comma - buf.base  # the `,` belongs to what follows the array
        return False

    def _cut_off_message(self) -> str:
        return (
            f"the file ends at byte {self.buf.base + len(self.buf.data)} before the JSON does; "
            f"loaded every complete event up to byte {self.last_good}"
        )

    def report(self) -> None:
        """Tell the progress callback how far the read is."""
        if self.progress is not None:
            self.progress(self.state.bytes_read, self.state.size, self.builder.n_events)

    def accept_run(self, run: RunColumns, offset: int, length: int) -> None:
        """Merge a run decoded elsewhere (a worker) that held [offset, offset + length)."""
        self.builder.add_run(run, offset, length)
        self.last_good = offset + length
        self.report()

    def _decode_run(self) -> bool:
        """Decode one run from the read position. True when the events array closed in it."""
        buf = self.buf
        data, pos = buf.data, buf.pos
        end = len(data)
        cuts = self._cut_candidates(data, pos, end)
        if not cuts and not buf.eof:
            if self._before_blank_tail(pos, end):
                return False
            buf.fill((end - pos) * 2)  # one event larger than a run: read more
            return False
        tried = 0
        for cut in cuts:
            if tried >= MAX_CUT_TRIES:
                break
            tried += 1
            outcome = self._try_run(pos, cut + 1)
            if outcome is not None:
                return outcome
        if buf.eof:
            # The last run: the array's closing bracket should be in what is left.
            outcome = self._try_run(pos, end, last=True)
            if outcome is not None:
                return outcome
        return self._salvage(pos, end)

    def _before_blank_tail(self, pos: int, end: int) -> bool:
        """Events followed by a long run of whitespace that fills the rest of the buffer: decode
        them now, so that the whitespace is skipped block by block, not held in memory until
        the next separator (memory stays bounded by the events, not by the bytes between them).
        False (nothing done) when the buffer does not end so, or what precedes is not events."""
        data = self.buf.data
        if end - pos <= WS_PROBE or data[end - WS_PROBE : end].strip(_WS):
            return False
        last = pos + len(data[pos:end].rstrip(_WS))
        if last == pos:
            self.buf.pos = end
            return True
        return self._try_run(pos, last) is not None

    def _cut_candidates(self, data: bytes, pos: int, end: int) -> list[int]:
        """Positions of `}` followed by `,`, latest first (the closing brace's index)."""
        found: list[int] = []
        lo = max(pos, end - 65536)
        while True:
            found = [m.start() for m in _CUT.finditer(data, lo, end)]
            if found or lo == pos:
                break
            lo = pos
        found.reverse()
        return found

    def _try_run(self, pos: int, stop: int, last: bool = False) -> bool | None:
        """Decode data[pos:stop] as events. False: decoded (the position moved on); None: failed.

        With `last`, data[pos:stop] is the rest of the stream and must hold the closing bracket.
        """
        buf = self.buf
        data = buf.data
        # text[i] is data[pos + i - 1] for 1 <= i <= stop - pos.
        text = b"[" + data[pos:stop] + (b"" if last else b"]")
        try:
            events = EVENTS_DECODER.decode(text)
        except msgspec.ValidationError:
            return self._generic_run(pos, stop, last)
        except msgspec.DecodeError as exc:
            at = trailing_at(exc)
            if at is None:
                # Defects of old Kineto traces: repair. (Truncated: a cut inside a string,
                # or lone surrogates, which only the repair's json path reads.)
                if is_truncated(exc) and not may_hold_surrogates(data, pos, stop):
                    return None
                return self._repaired_run(pos, stop, last)
            # The events array closed inside the run: cut at its closing bracket.
            close = at - 1
            while close > 0 and text[close] in _WS:
                close -= 1
            if text[close] != ord("]"):
                return None
            closing = pos + close - 1
            try:
                events = EVENTS_DECODER.decode(text[: close + 1])
            except msgspec.ValidationError:
                return self._generic_run(pos, closing, False, closed_at=closing)
            except msgspec.DecodeError:
                return None
            self._accept(events, pos, closing)
            buf.pos = closing  # read_events sees the bracket and returns
            return False
        if last:
            closing = data.rfind(b"]", pos, stop)
            self._accept(events, pos, closing)
            buf.pos = closing
            return False
        self._accept(events, pos, stop)
        self._step_over_separator(stop)
        return False

    def _step_over_separator(self, at: int) -> None:
        buf = self.buf
        data = buf.data
        n = len(data)
        at = next_non_ws(data, at)
        if at < n and data[at] == ord(","):
            at += 1
        buf.pos = at

    def _generic_run(
        self, pos: int, stop: int, last: bool, closed_at: int | None = None
    ) -> bool | None:
        """A run that is JSON but has fields of unexpected types: decode generically, convert."""
        data = self.buf.data
        text = b"[" + data[pos:stop] + (b"" if last else b"]")
        try:
            objects = ANY_DECODER.decode(text)
        except msgspec.DecodeError:
            return self._repaired_run(pos, stop, last)
        if last:
            stop = data.rfind(b"]", pos, stop)
            closed_at = stop
        self._accept([event_from_object(o) for o in objects], pos, stop)
        if closed_at is not None:
            self.buf.pos = closed_at
        else:
            self._step_over_separator(stop)
        return False

    def _repaired_run(self, pos: int, stop: int, last: bool) -> bool | None:
        """A run with defects of old Kineto traces (NaN, raw control characters, 1e400, ...):
        repaired and decoded in one go (`decode_events`), at about the cost of a clean run.
        None when it does not decode even so (the caller tries another cut, then salvages)."""
        data = self.buf.data
        if self.buf.base + pos == self._nothing_to_repair:
            return None  # a shorter cut of a run that had nothing to repair has nothing either
        repair = Repair()
        text = b"[" + data[pos:stop] + (b"" if last else b"]")
        events, closed_early = decode_events(text, repair)
        if events is None and repair.tried and not repair.changed:
            self._nothing_to_repair = self.buf.base + pos
        if events is None and (closed_early or last):
            # The events array ends inside the run: decode up to its closing bracket.
            _starts, _ends, closed = split_elements(data[pos:stop], 0)
            if closed is None or data[pos + closed] != ord("]"):
                return None
            closing = pos + closed
            events, _closed = decode_events(b"[" + data[pos:closing] + b"]", repair)
            if events is None:
                return None
            self._accept(events, pos, closing, repair.out_of_range)
            self.buf.pos = closing  # read_events sees the bracket and returns
            return False
        if events is None:
            return None
        if last:
            closing = data.rfind(b"]", pos, stop)
            self._accept(events, pos, closing, repair.out_of_range)
            self.buf.pos = closing
            return False
        self._accept(events, pos, stop, repair.out_of_range)
        self._step_over_separator(stop)
        return False

    def _accept(self, events: list, pos: int, stop: int, out_of_range: int = 0) -> None:
        buf = self.buf
        self.builder.add_events(events, buf.base + pos, stop - pos, out_of_range)
        self.last_good = buf.base + stop

    def _salvage(self, pos: int, end: int) -> bool:
        """Split data[pos:end] exactly into events and decode each on its own (slow, rare path)."""
        buf = self.buf
        data = buf.data
        at_eof = buf.eof
        starts, ends, closed = split_elements(data[pos:end], 0, include_tail=at_eof)
        resync = resync_point(data[pos:end])
        if resync is not None and closed is not None and closed < resync[0]:
            resync = None  # a stray closing bracket comes first
        if resync is not None:
            # An event whose brackets do not close: it ends where the next event starts.
            end = pos + resync[0]
            starts, ends, closed = split_elements(data[pos:end], 0, include_tail=True)
            at_eof = False
        if not starts and closed is None and not at_eof and resync is None:
            buf.fill((end - pos) * 2)  # no whole event yet: read more
            return False
        for index, (start, stop) in enumerate(zip(starts, ends)):
            piece = data[pos + start : pos + stop]
            try:
                obj = lenient_loads(piece)
            except ValueError:
                if at_eof and closed is None and index == len(starts) - 1:
                    break  # the event the file stopped in
                self.dropped += 1
                if resync is not None and index == len(starts) - 1:
                    self._warn_stray(
                        buf.base + pos + start,
                        end - pos - start,
                        "an event with a bracket out of place",
                    )
                    continue
                self._warn_dropped(buf.base + pos + start)
                continue
            self.builder.add_events([event_from_object(obj)], buf.base + pos + start, stop - start)
            self.last_good = buf.base + pos + stop
        if closed is not None:
            if data[pos + closed] != ord("]"):
                # A stray `}` where the array's `]` would be: step over it, or this loops.
                self.dropped += 1
                self._warn_stray(buf.base + pos + closed, 1, "a stray `}`")
                closed += 1
            buf.pos = pos + closed
            return False
        if resync is not None:
            buf.pos = pos + resync[1]
            return False
        if at_eof:
            raise _Stop(self._cut_off_message())
        self._step_over_separator(pos + ends[-1])
        return False

    def _warn_stray(self, offset: int, length: int, what: str) -> None:
        """A bracket out of place (counted in `dropped`): what was skipped, and where."""
        self.stray_bytes += length
        if self.dropped <= 5:
            self.warnings.append(
                f"skipped {length} byte{'s' if length != 1 else ''} of malformed data at byte "
                f"{offset} ({what}); reading went on at the next event"
            )
        elif self.dropped == 6:
            self.warnings.append("skipped more malformed events (only the first 5 are listed)")

    def _warn_dropped(self, offset: int) -> None:
        if self.dropped <= 5:
            self.warnings.append(f"skipped a malformed event at byte {offset}")
        elif self.dropped == 6:
            self.warnings.append("skipped more malformed events (only the first 5 are listed)")


def split_elements(
    view: bytes, base_depth: int, top_level_value: bool = False, include_tail: bool = False
) -> tuple[list[int], list[int], int | None]:
    """Find the elements of a JSON array body (or one value) by a string- and depth-aware scan.

    Returns (starts, ends, closed): the byte ranges of the complete elements, and the index of the
    array's closing bracket when it is in `view`. Vectorised with numpy; used where the decoder
    cannot cut a region itself (malformed or cut-off data), so it favours exactness over speed.
    """
    n = len(view)
    if n == 0:
        return [], [], None
    raw, in_string, closes, depth = _structure(view, base_depth)
    starts: list[int] = []
    ends: list[int] = []
    if top_level_value:
        zero = np.flatnonzero(closes & (depth == 0))
        if len(zero):
            starts.append(0)
            ends.append(int(zero[0]) + 1)
        return starts, ends, None
    closed_idx = np.flatnonzero(closes & (depth < 0))
    closed = int(closed_idx[0]) if len(closed_idx) else None
    limit = closed if closed is not None else n
    separators = np.flatnonzero(
        (raw[:limit] == ord(",")) & ~in_string[:limit] & (depth[:limit] == 0)
    )
    bounds = [-1] + separators.tolist()
    if closed is not None:
        bounds.append(closed)
    elif include_tail:
        bounds.append(n)
    for a, b in zip(bounds, bounds[1:]):
        segment = view[a + 1 : b]
        stripped = segment.strip()
        if not stripped:
            continue
        lead = len(segment) - len(segment.lstrip())
        starts.append(a + 1 + lead)
        ends.append(a + 1 + lead + len(stripped))
    return starts, ends, closed


# Where an event starts: `{` and one of the keys events hold (Kineto writes "ph" first).
_EVENT_START = re.compile(rb',\s*(\{)\s*"(?:ph|name|cat|pid|tid|ts|dur|args|id|s|tts|bp)"\s*:')


def resync_point(view: bytes) -> tuple[int, int] | None:
    """Where the events go on after a bracket out of place inside one event, or None.

    `view` starts at an event. Between events, a `,` is at depth 0 of the array; at depth 1 it
    is inside an event, where a key must follow it, never a `{`. So an event start (`,{"ph":`)
    found at depth 1 means that an opening bracket in the event before it was never closed:
    a structural scan would take the rest of the file for that event. Returns the indexes of
    that `,` (the damaged event ends before it) and of the `{` (the next event's start)."""
    candidates = [(m.start(), m.start(1)) for m in _EVENT_START.finditer(view)]
    if not candidates:
        return None
    _raw, in_string, _closes, depth = _structure(view, 0)
    commas = np.array([comma for comma, _brace in candidates], dtype=np.int64)
    deeper = np.flatnonzero((depth[commas] == 1) & ~in_string[commas])
    if not len(deeper):
        return None
    return candidates[int(deeper[0])]


def _structure(view: bytes, base_depth: int) -> tuple[np.ndarray, ...]:
    """The bytes, which of them are inside strings, which close a bracket, and the depth of
    nesting after each (string- and escape-aware, vectorised)."""
    raw = np.frombuffer(view, dtype=np.uint8)
    n = len(raw)
    quote = string_quotes(bytes(view))  # those not escaped, found vectorised
    toggles = np.zeros(n + 1, dtype=np.int8)
    toggles[quote] = 1
    in_string = (np.cumsum(toggles[:n]) % 2).astype(bool)
    # A quote that opens a string is inside it; the closing one is counted outside: fine for braces.
    opens = ((raw == ord("{")) | (raw == ord("["))) & ~in_string
    closes = ((raw == ord("}")) | (raw == ord("]"))) & ~in_string
    depth = np.cumsum(opens.astype(np.int32) - closes.astype(np.int32)) + base_depth
    return raw, in_string, closes, depth
