"""Byte sources: a trace file read in bounded blocks, gunzipped when it starts with the gzip magic."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

GZIP_MAGIC = b"\x1f\x8b"
READ_BLOCK = 4 << 20  # compressed bytes read from disk at a time
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

    @property
    def expected_bytes(self) -> int:
        """About how many uncompressed bytes the file holds (to size the model's columns).

        A gzip file's last four bytes give the uncompressed size modulo 4 GiB, for the last
        member; where that is implausible, JSON's usual ratio of ten is assumed."""
        if not self.compressed:
            return self.size
        try:
            with open(self.path, "rb") as handle:
                handle.seek(max(0, self.size - 4))
                tail = handle.read(4)
        except OSError:
            tail = b""
        stated = int.from_bytes(tail, "little") if len(tail) == 4 else 0
        return stated if stated >= self.size else 10 * self.size


def open_source(path: str) -> SourceState:
    """Check that `path` is a readable file and sniff the gzip magic bytes."""
    try:
        if os.path.isdir(path):
            raise TraceError(f"{path}: is a directory, not a trace file")
        stat = os.stat(path)
        size = stat.st_size
        with open(path, "rb") as handle:
            head = handle.read(2)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except PermissionError:
        raise TraceError(f"{path}: permission denied") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return SourceState(
        path=path, size=size, compressed=head == GZIP_MAGIC, mtime_ns=stat.st_mtime_ns
    )


def iter_blocks(state: SourceState) -> Iterator[bytes]:
    """Yield the uncompressed bytes of the file in blocks, updating `state` as it reads."""
    with open(state.path, "rb") as handle:
        if not state.compressed:
            while block := handle.read(READ_BLOCK):
                state.bytes_read += len(block)
                yield block
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
