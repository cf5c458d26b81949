"""Streaming framing: find `traceEvents`, cut the byte stream into runs of whole events, decode them.

A run is cut after a `}` that is followed by a `,` (a cheap guess); the decoder itself confirms the
guess, because a run decodes as a JSON array exactly when the cut fell between two events. A guess
that lands inside a string or inside nested args fails to decode and an earlier one is tried.
Regions that still fail (malformed or cut-off data) are split exactly by a structural scan and each
event is decoded on its own, so nothing that can be read is lost.
"""

from __future__ import annotations

import gc
import os
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import numpy as np

from .builder import TraceBuilder
from .convert import RunColumns, convert_run
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
from .model import Source, Trace, out_of_memory_message
from .source import (
    READ_BLOCK,
    FileChanged,
    FileIdentity,
    SourceState,
    TraceError,
    is_regular_file,
    iter_blocks,
    open_identical,
    open_source,
    same_file,
)

RUN_BYTES = 4 << 20  # target size of one decoded run of events
_CUT = re.compile(rb"\}\s*,")
_NEXT_EVENT = re.compile(rb"\}\s*,\s*\{")
_WS = b" \t\r\n"
_NOT_WS = re.compile(rb"[^ \t\r\n]")  # finds the end of a run of whitespace at C speed
_SCALAR = re.compile(rb'"(?:[^"\\]|\\.)*"|[^\s,:{}\[\]"]+', re.DOTALL)
MAX_CUT_TRIES = 8

Progress = Callable[[int, int, int], None]


class _Buffer:
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


# Below these sizes worker processes cost more to start than they save.
PARALLEL_MIN_PLAIN = 48 << 20
PARALLEL_MIN_GZIP = 6 << 20


def default_workers() -> int:
    """KINETOSCOPE_WORKERS, else the number of CPUs this process may use."""
    explicit = os.environ.get("KINETOSCOPE_WORKERS")
    if explicit and explicit.isdigit():
        return max(1, int(explicit))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def workers_for(state: SourceState, workers: int | None) -> int:
    """How many decoding processes to use for this file (1: decode in this process)."""
    if state.stream:
        return 1  # a pipe is read once, in order, by this process
    if workers is not None:
        return workers
    threshold = PARALLEL_MIN_GZIP if state.compressed else PARALLEL_MIN_PLAIN
    explicit = os.environ.get("KINETOSCOPE_PARALLEL_MIN_BYTES", "")
    if explicit.isdigit():  # for tests and benchmarks
        threshold = int(explicit)
    return default_workers() if state.size >= threshold else 1


def _worker_context() -> Any:
    import multiprocessing

    # forkserver, not fork: the viewer loads from a thread, and forking a threaded process is unsafe.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["kinetoscope.parser.reader"])
    return context


def prepare_workers(path: str) -> None:
    """Start the worker processes' server now, if loading `path` will use workers.

    Call it before a terminal UI takes over stdin/stdout/stderr: the server and multiprocessing's
    resource tracker are started with the process's standard streams, and a UI's replacements
    for them have no usable file descriptors.
    """
    try:
        if not is_regular_file(path):
            return  # a pipe is read in one process; opening it here would take its first bytes
        state = open_source(path)
        try:
            if workers_for(state, None) <= 1:
                return
        finally:
            state.close()
        from . import cache

        if cache.has_entry(path):
            return  # it will be read from the model cache, not decoded
        from multiprocessing import forkserver

        _worker_context()
        forkserver.ensure_running()
    except (TraceError, OSError, ValueError):
        pass  # the load itself will report the problem, or read in one process


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


def release_workers() -> None:
    """Stop the worker server and multiprocessing's resource tracker, if they run (about 50 MB
    between them); a later parallel load starts them again. For processes done loading."""
    from multiprocessing import forkserver, resource_tracker

    for helper in (forkserver._forkserver, resource_tracker._resource_tracker):
        stop = getattr(helper, "_stop", None)
        if stop is not None:
            try:
                stop()
            except (OSError, ValueError, AttributeError):
                pass


def read_trace(path: str, progress: Progress | None = None, workers: int | None = None) -> Trace:
    seen = [0, 0, 0]  # the last progress: bytes done, bytes in all, events

    def track(done: int, total: int, events: int) -> None:
        seen[:] = done, total, events
        if progress is not None:
            progress(done, total, events)

    with gc_paused():
        try:
            return _read_trace(path, track, workers)
        except MemoryError:
            # One line that says what the load needs, estimated from the events read so far.
            done, total, events = seen
            estimate = events * max(total, done) // done if done else 0
            raise TraceError(out_of_memory_message(path, estimate)) from None


def _read_trace(path: str, progress: Progress | None, workers: int | None) -> Trace:
    # Opened once: every byte of the load, the workers' included, comes from this open file.
    state = open_source(path)
    try:
        return _read_source(state, progress, workers)
    finally:
        state.close()


def _read_source(state: SourceState, progress: Progress | None, workers: int | None) -> Trace:
    workers = workers_for(state, workers)
    if workers <= 1:
        return _read(state, iter_blocks(state), progress)
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = None
    try:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=_worker_context())
        _start_workers(pool, workers)
    except (BrokenProcessPool, OSError, ValueError):
        # Workers cannot start here (no usable standard streams, no /dev/shm, ...).
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        return _read(state, iter_blocks(state), progress)
    try:
        with pool:
            trace = _read(state, iter_blocks(state), progress, pool, workers)
            trace.workers = workers
            return trace
    except BrokenProcessPool:
        # A worker died: read again (the same open file) in this process alone.
        state.restart()
        return _read(state, iter_blocks(state), progress)


def _start_workers(pool: Any, workers: int) -> None:
    """Start every worker now, so that none re-imports a `__main__` it cannot find.

    A new worker imports the parent's main script by its path; a program read from stdin has
    no such file, and its workers would die with a traceback on the terminal. While the workers
    start, such a main module's `__file__` is hidden (workers never need the main module).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    hide = main is not None and path is not None and not os.path.isfile(path)
    if hide:
        del main.__file__
    try:
        for future in [pool.submit(int) for _ in range(workers)]:
            future.result()
    finally:
        if hide:
            main.__file__ = path


def read_bytes(data: bytes, path: str = "<memory>") -> Trace:
    import io

    from .source import GZIP_MAGIC, gunzip_blocks

    state = SourceState(path=path, size=len(data), compressed=data[:2] == GZIP_MAGIC)
    if state.compressed:
        # Streamed as a file is, so a damaged or cut-off gzip keeps what did decompress.
        return _read(state, gunzip_blocks(io.BytesIO(data), state), None)

    def blocks() -> Iterator[bytes]:
        for start in range(0, len(data), RUN_BYTES):
            state.bytes_read = min(len(data), start + RUN_BYTES)
            yield data[start : start + RUN_BYTES]

    return _read(state, blocks(), None)


def _read(
    state: SourceState,
    blocks: Iterator[bytes],
    progress: Progress | None,
    pool: Any = None,
    workers: int = 1,
) -> Trace:
    buf = _Buffer(blocks)
    builder = TraceBuilder(expected_bytes=state.expected_bytes)
    header: dict[str, Any] = {}
    warnings: list[str] = []
    reader = _Reader(buf, builder, state, progress, warnings)
    reader.pool, reader.workers = pool, workers
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
    trace.warnings[:0] = warnings
    return trace


def _not_json_message(path: str, head: bytes) -> str:
    printable = sum(32 <= b < 127 or b in b"\t\r\n" for b in head)
    if head and printable < len(head) * 0.8:
        return f"{path}: not a trace (binary data, not JSON)"
    if head[:1].isdigit() or head[:1] in (b'"', b"-", b"t", b"f", b"n"):
        return f"{path}: not a trace (JSON, but neither an object with traceEvents nor an array)"
    return f"{path}: not a trace (not JSON: starts with {head[:12]!r})"


class _Reader:
    def __init__(
        self,
        buf: _Buffer,
        builder: TraceBuilder,
        state: SourceState,
        progress: Progress | None,
        warnings: list[str],
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
        self.pool: Any = None
        self.workers = 1
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
        if self.pool is not None:
            if self.state.compressed:
                self._read_events_parallel()
            else:
                self._read_events_parallel_by_offset()
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
            self._report()

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

    def _read_events_parallel(self) -> None:
        """Hand runs to worker processes and merge their columns in file order.

        The main process only frames: it cuts after a `}` followed by `,` and `{`, and the worker's
        decoder confirms the cut. A run that fails (a cut inside a string, malformed data, or the
        end of the array) rewinds the stream to that run's start, and the serial path, which
        retries cuts and salvages, carries on from there. The last run is always serial.

        Runs travel in shared memory blocks (one copy, then the worker decodes in place), not
        through the pool's pipe, where every run was copied four times and the transfers, one
        after another, left the workers waiting. Without shared memory they take the pipe.
        """
        buf = self.buf
        pending: deque[tuple[Any, int, memoryview, bytes, Any]] = deque()
        limit = 2 * self.workers + 1
        blocks = _SharedBlocks(limit + 1, RUN_BYTES + 2)
        try:
            while True:
                c = buf.skip_ws()
                if c is None or c == ord("]"):
                    break
                if c == ord(","):
                    buf.pos += 1
                    continue
                buf.fill(RUN_BYTES)
                data, pos = buf.data, buf.pos
                if buf.eof and len(data) - pos < RUN_BYTES:
                    break
                # Cut near RUN_BYTES from here (the buffer may hold several runs' worth): tasks
                # of even size keep the workers equally busy and their memory small.
                end = min(len(data), pos + RUN_BYTES)
                matches = list(_NEXT_EVENT.finditer(data, max(pos, end - CUT_WINDOW), end))
                if not matches:
                    break
                cut = matches[-1].start()
                next_event = matches[-1].end() - 1
                segment = memoryview(data)[pos : cut + 1]
                block = blocks.take()
                if block is not None:
                    length = blocks.fill(block, segment)
                    future = self.pool.submit(decode_shared, block.name, length)
                else:  # as a JSON array, made in one copy, through the pipe
                    future = self.pool.submit(decode_array, b"".join((b"[", segment, b"]")))
                separator = data[cut + 1 : next_event]
                pending.append((future, buf.base + pos, segment, separator, block))
                buf.pos = next_event
                while pending and (len(pending) >= limit or pending[0][0].done()):
                    if not self._merge_oldest(pending, blocks):
                        return
            while pending:
                if not self._merge_oldest(pending, blocks):
                    return
        finally:
            for entry in pending:
                entry[0].cancel()
            blocks.close()

    def _read_events_parallel_by_offset(self) -> None:
        """Plain files: workers read their own runs from the file, by offset and length.

        The main process reads only a small window at the end of each run to find the cut, so
        it is nearly idle and the workers do all of the decoding. A run that fails, or the last
        run, hands over to the serial path from that run's start (reading from there).
        """
        buf = self.buf
        state = self.state
        identity = state.identity
        if identity is None or state.fd is None:
            return
        size = state.size
        position = buf.offset
        pending: deque[tuple[Any, int, int]] = deque()
        limit = 2 * self.workers + 1
        failed_at: int | None = None
        while position + RUN_BYTES < size:
            window_start = position + RUN_BYTES - CUT_WINDOW
            window = os.pread(state.fd, CUT_WINDOW, window_start)
            matches = list(_NEXT_EVENT.finditer(window))
            if not matches:
                break
            cut = window_start + matches[-1].start()
            length = cut + 1 - position
            pending.append(
                (self.pool.submit(decode_file_run, identity, position, length), position, length)
            )
            position = window_start + matches[-1].end() - 1
            while pending and (len(pending) >= limit or pending[0][0].done()):
                failed_at = self._merge_oldest_by_offset(pending)
                if failed_at is not None:
                    break
            if failed_at is not None:
                break
        while pending and failed_at is None:
            failed_at = self._merge_oldest_by_offset(pending)
        resume = failed_at if failed_at is not None else position
        for later in pending:
            later[0].cancel()
        if resume != buf.offset:
            buf.restart_at(resume, _plain_blocks_from(state, resume))

    def _merge_oldest_by_offset(self, pending: deque) -> int | None:
        """Merge the oldest run; on failure return its offset (where the serial path resumes)."""
        future, offset, length = pending.popleft()
        run = future.result()
        if run is None or isinstance(run, str):
            # Undecodable, or (FILE_CHANGED) the worker did not find the file as it was opened:
            # this process reads on from its own open file, and says at the end what changed.
            return offset
        self.builder.add_run(run, offset, length)
        self.last_good = offset + length
        self.state.bytes_read = max(self.state.bytes_read, offset + length)
        self._report()
        return None

    def _merge_oldest(self, pending: deque, blocks: _SharedBlocks) -> bool:
        future, offset, segment, separator, block = pending.popleft()
        run = future.result()
        blocks.give_back(block)
        if run is None:
            for later in pending:
                later[0].cancel()  # their blocks are released when the loop ends
            buf = self.buf
            rest = b"".join(bytes(s) + sep for _f, _o, s, sep, _b in pending)
            buf.data = bytes(segment) + separator + rest + buf.data[buf.pos :]
            buf.base = offset
            buf.pos = 0
            pending.clear()
            return False
        self.builder.add_run(run, offset, len(segment))
        self.last_good = offset + len(segment)
        self._report()
        return True

    def _cut_off_message(self) -> str:
        return (
            f"the file ends at byte {self.buf.base + len(self.buf.data)} before the JSON does; "
            f"loaded every complete event up to byte {self.last_good}"
        )

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.state.bytes_read, self.state.size, self.builder.n_events)

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


CUT_WINDOW = 1 << 16


def _plain_blocks_from(state: SourceState, offset: int) -> Iterator[bytes]:
    """The plain file's bytes from `offset` on, read from the load's open file."""
    assert state.fd is not None
    while block := os.pread(state.fd, READ_BLOCK, offset):
        offset += len(block)
        state.bytes_read = max(state.bytes_read, offset)
        yield block


FILE_CHANGED = "file changed"  # a worker's answer when the file is not the one the load opened


def decode_file_run(identity: FileIdentity, offset: int, length: int) -> RunColumns | str | None:
    """Worker side: read one run of whole events from a plain file, decode and convert it.

    The file is the loading process's open file (see `open_identical`), checked again after
    the read: FILE_CHANGED if it is not that file, as it was when the load opened it."""
    try:
        fd = open_identical(identity)
    except FileChanged:
        return FILE_CHANGED
    except OSError:
        return None  # the serial path reads this run from the load's own open file
    try:
        # Read straight between the brackets that make it a JSON array: no copy to add them.
        array = bytearray(length + 2)
        array[0], array[-1] = ord("["), ord("]")
        got = _read_into(fd, memoryview(array)[1:-1], offset)
        unchanged = same_file(fd, identity)
    finally:
        os.close(fd)
    if not unchanged:
        return FILE_CHANGED
    if got != length:
        return None
    return decode_array(array)


def _read_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill `view` from the file at `offset`; the number of bytes read (fewer at its end)."""
    got = 0
    while got < len(view):
        if hasattr(os, "preadv"):
            step = os.preadv(fd, [view[got:]], offset + got)
        else:
            piece = os.pread(fd, len(view) - got, offset + got)
            view[got : got + len(piece)] = piece
            step = len(piece)
        if step <= 0:
            break
        got += step
    return got


class _SharedBlocks:
    """A few shared memory blocks, each holding one run as a JSON array for a worker.

    A block is reused once its run is merged (the worker is done with it then). If shared
    memory cannot be had (no /dev/shm, no space), `take` returns None and runs take the pipe.
    """

    def __init__(self, count: int, size: int) -> None:
        self.size = size
        self.free: list[Any] = []
        self.all: list[Any] = []
        try:
            from multiprocessing import shared_memory

            for _ in range(count):
                block = shared_memory.SharedMemory(create=True, size=size)
                self.all.append(block)
                self.free.append(block)
        except (OSError, ValueError, ImportError):
            self.close()

    def take(self) -> Any:
        return self.free.pop() if self.free else None

    def fill(self, block: Any, segment: memoryview) -> int:
        length = len(segment) + 2
        if length > self.size:
            raise ValueError("run larger than a shared block")
        view = block.buf
        view[0] = ord("[")
        view[1 : length - 1] = segment
        view[length - 1] = ord("]")
        return length

    def give_back(self, block: Any) -> None:
        if block is not None and block in self.all and block not in self.free:
            self.free.append(block)

    def close(self) -> None:
        for block in self.all:
            try:
                block.close()
                block.unlink()
            except (OSError, BufferError):
                pass
        self.all, self.free = [], []


_ATTACHED: dict[str, Any] = {}


def decode_shared(name: str, length: int) -> RunColumns | None:
    """Worker side: decode the run a shared memory block holds (attached once per block)."""
    block = _ATTACHED.get(name)
    if block is None:
        from multiprocessing import shared_memory

        # The main process owns the block and unlinks it. (Workers share its resource
        # tracker, so the registration attaching makes here is the main process's own.)
        block = shared_memory.SharedMemory(name=name)
        _ATTACHED[name] = block
        if len(_ATTACHED) > 64:  # blocks of finished loads: let them go
            for old in list(_ATTACHED)[:-16]:
                try:
                    _ATTACHED.pop(old).close()
                except BufferError:
                    pass
    view = block.buf[:length]
    try:
        return decode_array(view)
    finally:
        view.release()


def decode_array(text: bytes | bytearray | memoryview) -> RunColumns | None:
    """Worker side: decode and convert a run given as a JSON array; None if it is not one."""
    with gc_paused():
        return _decode_array(text)


def _decode_array(text: bytes | bytearray | memoryview) -> RunColumns | None:
    repair = Repair()
    events, _closed_early = decode_events(text, repair)
    if events is None:
        return None
    return convert_run(events, repair.out_of_range)


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
