"""Byte sources: a trace file read in bounded blocks, gunzipped when it starts with the gzip magic.

The file is opened once, and every byte of the load comes from that one open file: a file
replaced on disk while it loads (`mv new.json trace.json`) is not mixed into it. Decoding workers
(parallel.py) open the same file again through the loading process's descriptor where the system
allows it, else by its path, and check that it is the same file (device, inode, size, mtime)
before and after they read.

Named pipes, `/dev/stdin` and `<(...)` are read as streams: in one pass, in one process, with
nothing read twice (the bytes sniffed for the gzip magic are handed on, not lost).
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from kinetoscope.common.text import clean  # a file name is data, never obeyed

GZIP_MAGIC = b"\x1f\x8b"
READ_BLOCK = 4 << 20  # compressed bytes read from disk at a time
# A gzip file up to this size (one read) is inflated in the reading thread: starting the
# read-ahead thread (`ahead`) and handing it blocks costs more than overlapping saves (a job's
# 50 KB ranks: two thread starts each).
INLINE_GZIP_MAX = 1 << 20
MAX_OUTPUT = 16 << 20  # uncompressed bytes produced per decompress call


class TraceError(Exception):
    """A trace that cannot be loaded at all; the message is one line for the user."""


@dataclass
class SourceState:
    """What the reader knows about the file as it goes."""

    path: str
    size: int
    compressed: bool
    bytes_read: int = 0  # bytes of the file consumed so far
    truncated_stream: bool = False  # the gzip stream ended before its end marker
    stream_error: str | None = None  # a corrupt gzip stream: what zlib said
    mtime_ns: int | None = None  # the file's mtime when it was opened
    fd: int | None = None  # the open file every byte is read from (None: opened by path)
    stream: bool = False  # a pipe or device: read once, in order; its size is unknown
    dev: int | None = None
    ino: int | None = None
    ctime_ns: int | None = None
    head: bytes = field(default=b"", repr=False)  # a stream's first bytes, read to sniff it

    @property
    def expected_bytes(self) -> int:
        """About how many uncompressed bytes the file holds (to size the model's columns).

        A gzip file's last four bytes give the uncompressed size modulo 4 GiB, for the last
        member; where that is implausible, JSON's usual ratio of ten is assumed. A stream's
        size is unknown (0): the columns grow as it is read."""
        if self.stream:
            return 0
        if not self.compressed:
            return self.size
        tail = b""
        try:
            if self.fd is not None:
                tail = os.pread(self.fd, 4, max(0, self.size - 4))
            else:
                with open(self.path, "rb") as handle:
                    handle.seek(max(0, self.size - 4))
                    tail = handle.read(4)
        except OSError:
            pass
        stated = int.from_bytes(tail, "little") if len(tail) == 4 else 0
        return stated if stated >= self.size else 10 * self.size

    def restart(self) -> None:
        """Read again from the start of the same open file (a regular file only)."""
        self.bytes_read = 0
        self.truncated_stream = False
        self.stream_error = None

    def modified(self) -> bool:
        """Was the open file itself written since it was opened (its size or mtime moved)?"""
        if self.fd is None or self.stream:
            return False
        try:
            now = os.fstat(self.fd)
        except OSError:
            return True
        return (now.st_size, now.st_mtime_ns) != (self.size, self.mtime_ns)

    def replaced(self) -> bool:
        """Does the path name another file now (renamed over, deleted) than the one opened?"""
        if self.fd is None or self.stream:
            return False
        try:
            now = os.stat(self.path)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != (self.dev, self.ino)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def not_regular_kind(path: str) -> str | None:
    """What `path` is when it exists and is neither a regular file nor a folder ("a named
    pipe", "a device", "a socket"), found by `os.stat` alone (nothing is opened: a named pipe
    would block); None otherwise (a missing file is for the reader to say)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return _kind(mode)


def open_source(path: str) -> SourceState:
    """Open `path` (once, for the whole load) and sniff the gzip magic bytes.

    A regular file is read by position; anything else (a pipe, `/dev/stdin`, `<(...)`) as a
    stream. Opening never blocks: a named pipe that no one writes to reads as empty, and a
    terminal is refused."""
    fd = None
    try:
        # O_NONBLOCK: opening a named pipe would otherwise wait for a writer, forever.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC)
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise TraceError(f"{path}: is a directory, not a trace file")
        regular = stat.S_ISREG(info.st_mode)
        if not regular and os.isatty(fd):
            raise TraceError(f"{path}: is a terminal, not a trace file")
        if regular:
            head = os.pread(fd, 2, 0)
        elif stat.S_ISFIFO(info.st_mode):
            head = _pipe_head(fd, 2)
        else:
            _set_blocking(fd)
            head = _read_head(fd, 2)
    except FileNotFoundError:
        _close(fd)
        raise TraceError(f"{path}: no such file") from None
    except PermissionError:
        _close(fd)
        raise TraceError(f"{path}: permission denied") from None
    except TraceError:
        _close(fd)
        raise
    except OSError as exc:
        _close(fd)
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not regular and not head:
        _close(fd)
        raise TraceError(
            f"{path}: nothing to read ({_kind(info.st_mode)} that is empty or that no one writes to)"
        )
    if regular and _perfetto_at(fd, path):
        _close(fd)
        raise TraceError(perfetto_message(path))
    return SourceState(
        path=path,
        size=info.st_size if regular else 0,
        compressed=head == GZIP_MAGIC,
        mtime_ns=info.st_mtime_ns,
        fd=fd,
        stream=not regular,
        dev=info.st_dev,
        ino=info.st_ino,
        ctime_ns=info.st_ctime_ns,
        head=b"" if regular else head,
    )


# -- Perfetto protobuf ---------------------------------------------------------------------
# Newer torch.profiler versions can write a Perfetto-native trace (`export_chrome_trace` given
# a `.pftrace` path): a protobuf `Trace`, i.e. `TracePacket`s as repeated field 1 (tag byte
# 0x0a, a varint length, the packet). It is recognised by its bytes and refused with a way out.

PERFETTO_HEAD = 1 << 16  # bytes looked at to recognise a protobuf trace
PERFETTO_SUFFIXES = (".pftrace", ".pftrace.gz", ".perfetto-trace", ".perfetto-trace.gz")


PERFETTO_REASON = (
    "a Perfetto protobuf trace (.pftrace), which kinetoscope cannot read yet; have "
    'torch.profiler write Chrome trace JSON instead: prof.export_chrome_trace("trace.json") '
    '(or "trace.json.gz"; not a .pftrace name), or on_trace_ready='
    'torch.profiler.tensorboard_trace_handler("DIR")'
)


def perfetto_message(path: str) -> str:
    """The one line that refuses a Perfetto protobuf trace, with the torch calls that write JSON."""
    return f"{path}: {PERFETTO_REASON}"


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    """The varint at `pos` and the position after it; None where it is cut off or too long."""
    value = shift = 0
    for at in range(pos, min(len(data), pos + 10)):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + 1
        shift += 7
    return None


def _json_start(head: bytes) -> bool:
    """Does `head` start the way a JSON trace does (`{"`, `{}`, `[{`, `[]`, spaces allowed)?"""
    text = head[3:] if head.startswith(b"\xef\xbb\xbf") else head
    text = text.lstrip(b" \t\r\n")
    if text[:1] not in (b"{", b"["):
        return False
    after = text[1:].lstrip(b" \t\r\n")[:1]
    return after in ((b'"', b"}") if text[:1] == b"{" else (b"{", b"]"))


def _packet_fields(data: bytes, pos: int, end: int) -> int | None:
    """How many well-formed protobuf fields run from `pos` to `end` (the end of `data` may cut
    the last one off); None at a malformed one (field 0, a group or an unknown wire type)."""
    count = 0
    while pos < end:
        key = _varint(data, pos)
        if key is None:
            return count if len(data) < pos + 10 else None
        tag, pos = key
        field, wire = tag >> 3, tag & 7
        if field == 0 or wire not in (0, 1, 2, 5):
            return None
        if wire == 0:
            value = _varint(data, pos)
            if value is None:
                return count if len(data) < pos + 10 else None
            pos = value[1]
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            size = _varint(data, pos)
            if size is None:
                return count if len(data) < pos + 10 else None
            pos = size[1] + size[0]
        count += 1
    return count if pos == end or end > len(data) else None


def looks_like_perfetto(head: bytes) -> bool:
    """Is `head` (the first uncompressed bytes of a file) the start of a Perfetto protobuf
    trace: a `packet` field (0x0a, a varint length) holding well-formed protobuf fields, and
    another packet after it where `head` reaches that far? The start of JSON never is."""
    if head[:1] != b"\x0a" or _json_start(head):
        return False
    size = _varint(head, 1)
    if size is None or size[0] == 0:
        return False
    length, start = size
    end = start + length
    fields = _packet_fields(head, start, end)
    if not fields:
        return False
    return end >= len(head) or head[end : end + 1] == b"\x0a"


def _head(data: bytes) -> bytes:
    """The first uncompressed bytes of a file whose first bytes are `data` (gunzipped by the
    magic; b"" for a gzip stream broken that early)."""
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, PERFETTO_HEAD)
    except zlib.error:
        return b""


def _is_perfetto(path: str, head: bytes) -> bool:
    """By its first uncompressed bytes `head`: a Perfetto protobuf trace; so is a file named
    `.pftrace` whose bytes are not JSON (damaged, or a packet this reader does not expect)."""
    if looks_like_perfetto(head):
        return True
    return path.lower().endswith(PERFETTO_SUFFIXES) and bool(head) and not _json_start(head)


def _perfetto_at(fd: int, path: str) -> bool:
    """Does the regular file open at `fd` hold a Perfetto protobuf trace (read by position)?"""
    try:
        data = os.pread(fd, PERFETTO_HEAD, 0)
    except OSError:
        return False
    return _is_perfetto(path, _head(data))


def perfetto_problem(path: str) -> str | None:
    """`perfetto_message(path)` if the regular file at `path` is a Perfetto protobuf trace
    (see `_is_perfetto`), else None. A file that cannot be read, or that is not a regular file,
    is left to the caller to report."""
    if not is_regular_file(path):
        return None
    try:
        with open(path, "rb") as handle:
            head = _head(handle.read(PERFETTO_HEAD))
    except OSError:
        return None
    return perfetto_message(path) if _is_perfetto(path, head) else None


def is_regular_file(path: str) -> bool:
    """Is `path` a regular file (found without opening it: opening a named pipe can block)?"""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _set_blocking(fd: int) -> None:
    """Reads wait for a writer's data (opened without blocking only so that `open` returns)."""
    try:
        os.set_blocking(fd, True)
    except (OSError, AttributeError):
        pass


WRITER_WAIT_S = 2.0  # how long a named pipe that no one writes to is waited on


def _pipe_head(fd: int, count: int) -> bytes:
    """The first bytes of a pipe opened without blocking; the descriptor blocks afterwards.

    A pipe with a writer and no data yet is waited on as long as it takes (a slow producer).
    A pipe without a writer (a named pipe whose writer has not opened it yet, or that no one
    will write to) is waited on for WRITER_WAIT_S at most: never forever."""
    import select
    import time

    deadline = time.monotonic() + WRITER_WAIT_S
    head = b""
    writer = False
    while True:
        try:
            head = os.read(fd, count)
        except BlockingIOError:  # a writer is there, its data is not yet
            writer = True
            break
        remaining = deadline - time.monotonic()
        if head or remaining <= 0:
            break
        # No writer now: wait for one to come and write (or close), for a while.
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(max(1, int(remaining * 1000)))
        time.sleep(0.01)  # a pipe whose writer left says so at once: do not spin
    _set_blocking(fd)
    if writer or 0 < len(head) < count:
        head += _read_head(fd, count - len(head))
    return head


def _read_head(fd: int, count: int) -> bytes:
    """The first `count` bytes of a stream (fewer at its end); a pipe may hand them one by one."""
    head = b""
    while len(head) < count:
        piece = os.read(fd, count - len(head))
        if not piece:
            break
        head += piece
    return head


class _FileReader:
    """`read(n)` over the open file: by position for a regular file (the descriptor's own
    offset is never used, so nothing else that reads it interferes), in order for a stream,
    whose sniffed first bytes come first."""

    def __init__(self, state: SourceState, offset: int = 0) -> None:
        assert state.fd is not None
        self.fd = state.fd
        self.stream = state.stream
        self.offset = offset
        self.pending = state.head if state.stream else b""

    def read(self, count: int) -> bytes:
        if self.stream:
            pending, self.pending = self.pending, b""
            if len(pending) >= count:
                self.pending = pending[count:]
                return pending[:count]
            more = os.read(self.fd, count - len(pending))
            return pending + more
        block = os.pread(self.fd, count, self.offset)
        self.offset += len(block)
        return block


def iter_blocks(state: SourceState, offset: int = 0) -> Iterator[bytes]:
    """Yield the uncompressed bytes of the file in blocks, updating `state` as it reads.

    With `offset` (a plain regular file only), start there."""
    if state.fd is None:  # a state made without opening (reading an event back)
        with open(state.path, "rb") as handle:
            handle.seek(offset)
            yield from _blocks(handle, state)
        return
    yield from _blocks(_FileReader(state, offset), state)


def _blocks(handle, state: SourceState) -> Iterator[bytes]:
    if not state.compressed:
        while block := handle.read(READ_BLOCK):
            state.bytes_read += len(block)
            yield block
        return
    if not state.stream and state.size <= INLINE_GZIP_MAX:
        yield from gunzip_blocks(handle, state)  # a small file: a thread would cost more
        return
    yield from ahead(gunzip_blocks(handle, state))


def ahead(blocks: Iterator[bytes], depth: int = 3) -> Iterator[bytes]:
    """Run `blocks` in a thread, up to `depth` blocks ahead of the consumer.

    zlib releases the GIL while it inflates, so the thread decompresses the next blocks while
    the caller frames and decodes the current one. Errors are raised in the consumer; a consumer
    that stops early stops the thread.
    """
    import queue
    import threading

    pipe: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                pipe.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for block in blocks:
                if not put(block):
                    return
            put(done)
        except BaseException as error:  # handed to the consumer, raised there
            put(error)

    worker = threading.Thread(target=produce, name="kinetoscope-gunzip", daemon=True)
    worker.start()
    try:
        while True:
            item = pipe.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def gunzip_blocks(handle, state: SourceState) -> Iterator[bytes]:
    """Inflate a gzip stream read from `handle`; stops (noting why in `state`) where it breaks."""
    # One inflater per gzip member; concatenated members are decoded one after another.
    inflater = None
    data = b""
    while True:
        if len(data) < 2:
            block = handle.read(READ_BLOCK)
            if block:
                state.bytes_read += len(block)
                data += block
            elif not data:
                break
        if inflater is None:
            if not data.startswith(GZIP_MAGIC):
                if data.strip(b"\x00"):
                    state.stream_error = "unexpected bytes after the gzip stream"
                return
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        before = inflater.copy()
        try:
            out = inflater.decompress(data, MAX_OUTPUT)
        except zlib.error as exc:
            # The failed call's output is lost with it: inflate again in small steps and keep
            # what comes before the damage (a bad CRC leaves the whole member readable).
            yield from _inflate_until_error(before, data)
            state.stream_error = str(exc)
            return
        if out:
            yield out
        if inflater.eof:
            data = inflater.unused_data
            inflater = None
        else:
            data = inflater.unconsumed_tail
    if inflater is not None:
        try:
            tail = inflater.flush()
        except zlib.error:
            tail = b""
        if tail:
            yield tail
        state.truncated_stream = True


def _inflate_until_error(inflater, data: bytes) -> Iterator[bytes]:
    """Feed `data` in pieces that halve around the damage, yielding everything before it."""
    step, at = 1 << 14, 0
    while at < len(data) and step:
        before = inflater.copy()
        try:
            out = inflater.decompress(data[at : at + step])
        except zlib.error:
            inflater, step = before, step // 2
            continue
        if out:
            yield out
        if inflater.eof:
            return
        at += step


def trace_path_problem(path: str, streams: bool = False) -> str | None:
    """Why `path` cannot be opened as a trace file, as the one line both `summary` and the
    viewer print (after `kinetoscope: `), or None. Nothing is opened: a named pipe would block.
    With `streams` (summary), a pipe or a device (`/dev/stdin`, `<(...)`) is read as a stream."""
    shown = clean(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"{shown}: no such file"
    except PermissionError:
        return f"{shown}: permission denied"
    except (OSError, ValueError) as exc:  # a loop of links, a name too long, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{shown}: cannot read ({clean(reason)})"
    if stat.S_ISDIR(info.st_mode):
        return f"{shown}: is a directory, not a trace file"
    readable_stream = stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode)
    if not stat.S_ISREG(info.st_mode) and not (streams and readable_stream):
        kind = (
            "a named pipe"
            if stat.S_ISFIFO(info.st_mode)
            else "a device"
            if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            else "a socket"
            if stat.S_ISSOCK(info.st_mode)
            else "not a plain file"
        )
        return f"{shown}: not a regular file ({kind}); save the trace to a file first"
    if not os.access(path, os.R_OK):
        return f"{shown}: permission denied"
    if stat.S_ISREG(info.st_mode) and perfetto_problem(path) is not None:  # a .pftrace
        return perfetto_message(shown)
    return None
