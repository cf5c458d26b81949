"""Parallel decoding: big files' runs of events decoded in worker processes.

Everything about the worker processes is here and nowhere else: when a load uses them
(`workers_for`), starting their server before a terminal UI takes the standard streams
(`prepare_workers`) and stopping it (`release_workers`), what a worker runs (a run read by
offset from the loading process's open file through /proc/PID/fd, or handed over in shared
memory), and the scheduling of runs ahead of the serial reader. Callers go through
`kinetoscope.parser` (`load`, `prepare_workers`), never this module.

The framing is `reader.py`'s: the main process cuts runs after a `}` followed by `,` and `{`, and
the worker's decoder confirms the cut. A run that fails (a cut inside a string, malformed data,
or the end of the array) hands over to the reader's serial loop at that run's start; it retries
cuts and salvages from there. The last run is always read serially.

Where the time goes (the owlv2 benchmark trace, `benchmarks/bench_load_cpu.py`): a worker's
decoding takes about 1.8 ms of CPU per MB and the conversion to columns about 3.5 (no Python
call per event: one comprehension per field, 20-40 ns an event each, and the string lookups).
The columns come back in shared memory blocks, not pickled through the pipe (that took about 4 %
of the workers' CPU time), a column that holds one value throughout a run travels as that value,
and a run's metadata events as the few values they set. The loading process finds cuts and
merges runs (about 0.25 ms per MB, while the workers decode the next runs), decodes the first
runs itself while the worker server starts (its imports take about half a second), and reads
the last run (at most RUN_BYTES) itself.

A load with `release` (a process that loads nothing more: `summary`) does not wait for its pool
to shut down nor for the worker server and resource tracker to exit: a thread does both while
the caller analyses (`releasing`, `wait_released`; the next pool and the process's exit wait
for it), and the server's own exit skips its full garbage collections (server_exit.py).
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import sys
import threading
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import reader
from .convert import RunColumns, convert_run
from .events import Repair, decode_events
from .model import ROW_COLUMNS, Trace, out_of_memory_message
from .reader import Progress, Reader, gc_paused
from .source import (
    GZIP_MAGIC,
    READ_BLOCK,
    SourceState,
    TraceError,
    is_regular_file,
    iter_blocks,
    open_source,
)

if TYPE_CHECKING:  # imported where a pool is used: concurrent.futures brings logging (~8 ms)
    from concurrent.futures import Future

# Below these sizes worker processes cost more to start than they save.
PARALLEL_MIN_PLAIN = 48 << 20
PARALLEL_MIN_GZIP = 6 << 20
# Under an address-space limit (`ulimit -v`, RLIMIT_AS) with less room than this left, a file is
# decoded in this process: the worker server, its threads and their malloc arenas reserve
# address space the limit counts, and a thread that cannot get it dies before it starts, which
# left the load waiting for it forever (a summary under a 40 MB margin hung, never said "out of
# memory"); in this process the MemoryError is the one-line error.
PARALLEL_MIN_HEADROOM = 2 << 30


def address_space_headroom() -> int | None:
    """Bytes of address space this process may still map under RLIMIT_AS; None: no limit (or
    no way to know)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = 0
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return soft - used


def threads_affordable() -> bool:
    """Whether a helper thread may be started: not under an address-space limit with less room
    than PARALLEL_MIN_HEADROOM (there, glibc can abort the whole process for want of a thread's
    stack or thread-local data, which no exception reports)."""
    headroom = address_space_headroom()
    return headroom is None or headroom >= PARALLEL_MIN_HEADROOM


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
    if state.size < threshold:
        return 1
    headroom = address_space_headroom()
    if headroom is not None and headroom < PARALLEL_MIN_HEADROOM:
        return 1
    return default_workers()


def pays_for_workers(paths: list[str]) -> bool:
    """Whether reading these files (a job's ranks) in a pool of worker processes can pay for
    the pool's start: together at least one of the sizes above (each gzip file counted against
    PARALLEL_MIN_GZIP, each plain one against PARALLEL_MIN_PLAIN; KINETOSCOPE_PARALLEL_MIN_BYTES
    replaces both). A file that is not a regular file, or cannot be read, counts as big (the
    pool's digest then says what is wrong with it)."""
    explicit = os.environ.get("KINETOSCOPE_PARALLEL_MIN_BYTES", "")
    share = 0.0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC)
        except (OSError, ValueError):
            return True
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return True
            compressed = os.pread(fd, 2, 0) == GZIP_MAGIC
        except OSError:
            return True
        finally:
            os.close(fd)
        if explicit.isdigit():
            threshold = max(1, int(explicit))
        else:
            threshold = PARALLEL_MIN_GZIP if compressed else PARALLEL_MIN_PLAIN
        share += st.st_size / threshold
        if share >= 1:
            return True
    return False


# The modules the worker server imports once, before it forks any worker. Every pool of
# kinetoscope's worker processes (this parser's decoding, the job's digests) shares one
# forkserver and so one list: it is kept here, the union of what every user asked for.
_PRELOAD = ["kinetoscope.parser.parallel", "kinetoscope.parser.server_exit"]
_PRELOAD_LOCK = threading.Lock()


def worker_context(*preload: str) -> Any:
    """The multiprocessing context of every pool of worker processes: forkserver, not fork (the
    viewer loads from a thread, and forking a threaded process is unsafe), its server preloading
    this module, `preload` and whatever earlier callers asked for. The list is read when the
    server starts: a module added once it runs is imported by each worker when first used."""
    import multiprocessing

    wait_released()  # a released load's server still stopping: gone before another starts
    context = multiprocessing.get_context("forkserver")
    with _PRELOAD_LOCK:
        _PRELOAD.extend(name for name in dict.fromkeys(preload) if name not in _PRELOAD)
        context.set_forkserver_preload(list(_PRELOAD))
    return context


def prepare_workers(path: str, workers: int | None = None) -> None:
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
            if workers_for(state, workers) <= 1:
                return
        finally:
            state.close()
        from . import cache

        if cache.has_entry(path):
            return  # it will be read from the model cache, not decoded
        from multiprocessing import forkserver

        worker_context()
        forkserver.ensure_running()
    except (TraceError, OSError, ValueError):
        pass  # the load itself will report the problem, or read in one process


def release_workers() -> None:
    """Stop the worker server and multiprocessing's resource tracker, if they run (about 50 MB
    between them); a later parallel load starts them again. For processes done loading. Neither
    is imported when no load used it (an import can fail for memory after a load that did)."""
    wait_released()
    _stop_helpers()


# The pools that loads with `release` left stopping in threads (`_stop_in_background`).
_RELEASING: list[threading.Thread] = []
_RELEASING_LOCK = threading.Lock()


def releasing() -> bool:
    """Whether a load's pool and the worker server are being stopped in the background."""
    with _RELEASING_LOCK:
        return any(thread.is_alive() for thread in _RELEASING)


def wait_released() -> None:
    """Wait until the pools that loads with `release` left stopping (and the worker server
    and resource tracker they stop) are gone."""
    with _RELEASING_LOCK:
        threads = list(_RELEASING)
        _RELEASING.clear()
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join()


def _stop_pool(pool: Any, starting: _Starting | None) -> None:
    """Shut a load's pool down: its workers started (if they were starting), then stopped."""
    if starting is not None:
        starting.thread.join()  # before the pool shuts down
    pool.shutdown(wait=True)


def _stop_in_background(pool: Any, starting: _Starting | None) -> None:
    """For a load with `release`, done with its pool: the pool shut down, then the worker server
    and the resource tracker stopped (`_stop_helpers`), in a thread, while the caller goes on
    (to its analysis). Neither wait does anything for the caller: workers still starting when
    the read ended (a busy machine: seconds) decode nothing, and a helper's stop waits for the
    helper's own exit. The thread is not a daemon: the process's exit waits for it, so no
    worker is left behind. The next pool (`worker_context`) waits for it too."""

    def stop() -> None:
        try:
            _stop_pool(pool, starting)
        except Exception:  # noqa: BLE001 - a pool that could not be shut down: its workers end
            pass  # with this process, as after any other failed shutdown
        finally:
            _stop_helpers()

    thread = threading.Thread(target=stop, name="kinetoscope-workers-stop")
    try:
        thread.start()
    except RuntimeError:  # no thread to be had: stopped here, as before
        stop()
        return
    with _RELEASING_LOCK:
        _RELEASING.append(thread)


def _stop_helpers() -> None:
    """Stop the worker server and the resource tracker, if they run (each stop waits for the
    helper's exit)."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    resource_tracker = sys.modules.get("multiprocessing.resource_tracker")
    for helper in (
        getattr(forkserver, "_forkserver", None),
        getattr(resource_tracker, "_resource_tracker", None),
    ):
        stop = getattr(helper, "_stop", None)
        if stop is not None:
            try:
                stop()
            # TypeError: a tracker never started in this process (a worker re-running a script).
            except (OSError, ValueError, AttributeError, TypeError):
                pass


def read_trace(
    path: str, progress: Progress | None = None, workers: int | None = None, release: bool = False
) -> Trace:
    """Read the trace file at `path`, with `workers` processes (None: as `workers_for` says).
    `release`: this process loads nothing more; a pool of workers is then stopped, with the
    worker server and the resource tracker, in the background (`releasing`, `wait_released`)."""
    seen = [0, 0, 0]  # the last progress: bytes done, bytes in all, events

    def track(done: int, total: int, events: int) -> None:
        seen[:] = done, total, events
        if progress is not None:
            progress(done, total, events)

    with gc_paused():
        try:
            return _read_trace(path, track, workers, release)
        except MemoryError:
            # One line that says what the load needs, estimated from the events read so far.
            done, total, events = seen
            estimate = events * max(total, done) // done if done else 0
            raise TraceError(out_of_memory_message(path, estimate)) from None


def _read_trace(
    path: str, progress: Progress | None, workers: int | None, release: bool = False
) -> Trace:
    # Opened once: every byte of the load, the workers' included, comes from this open file.
    state = open_source(path)
    try:
        return _read_source(state, progress, workers, release)
    finally:
        state.close()


def _read_source(
    state: SourceState, progress: Progress | None, workers: int | None, release: bool = False
) -> Trace:
    workers = workers_for(state, workers)
    if workers <= 1:
        return reader.read_source(state, iter_blocks(state), progress)
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = None
    starting = None
    try:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=worker_context())
        if _main_file_to_hide() is None and not state.compressed:
            # Started in a thread: this process decodes the first runs meanwhile (the worker
            # server's start, its imports included, takes about half a second).
            starting = _Starting(pool, workers)
        else:
            _start_workers(pool, workers)
    except (BrokenProcessPool, OSError, ValueError):
        # Workers cannot start here (no usable standard streams, no /dev/shm, ...).
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        return reader.read_source(state, iter_blocks(state), progress)
    try:
        try:
            ahead = RunsAhead(pool, workers, starting)
            trace = reader.read_source(state, iter_blocks(state), progress, ahead)
        except BaseException:
            _stop_pool(pool, starting)
            raise
        trace.workers = workers
        if release:
            _stop_in_background(pool, starting)
        else:
            _stop_pool(pool, starting)
        return trace
    except BrokenProcessPool:
        # A worker died: read again (the same open file) in this process alone.
        state.restart()
        return reader.read_source(state, iter_blocks(state), progress)


def _start_workers(pool: Any, workers: int) -> None:
    """Start every worker now, so that none re-imports a `__main__` it cannot find.

    A new worker imports the parent's main script by its path; a program read from stdin has
    no such file, and its workers would die with a traceback on the terminal. While the workers
    start, such a main module's `__file__` is hidden (workers never need the main module).
    """
    main = sys.modules.get("__main__")
    path = _main_file_to_hide()
    if path is not None:
        del main.__file__
    try:
        for future in [pool.submit(int) for _ in range(workers)]:
            future.result()
    finally:
        if path is not None:
            main.__file__ = path


def _main_file_to_hide() -> str | None:
    """The main module's `__file__` when it names no file (a program read from stdin)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is not None and not os.path.isfile(path):
        return path
    return None


class _Starting:
    """The workers starting in a thread (`_start_workers`); `done` is set when they have,
    or when they could not (`error`)."""

    def __init__(self, pool: Any, workers: int) -> None:
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(pool, workers), name="kinetoscope-workers", daemon=True
        )
        self.thread.start()

    def _run(self, pool: Any, workers: int) -> None:
        try:
            _start_workers(pool, workers)
        except BaseException as error:  # reported to the load, which reads on without workers
            self.error = error
        finally:
            self.done.set()


CUT_WINDOW = 1 << 16  # the bytes before a run's target end searched for its cut
# A shared memory block for one run's columns coming back from a worker: room for a run of
# small events (a 4 MB run of 200-byte events is about 1.4 MB of columns); a larger one takes
# the pipe.
RESULT_BYTES = 2 * reader.RUN_BYTES
_NEXT_EVENT = re.compile(rb"\}\s*,\s*\{")


class RunsAhead:
    """Decodes the events array's runs in worker processes, merging their columns into the
    reader's builder in file order, until a run fails or only the last run is left; the reader's
    serial loop goes on from there. Called by `Reader.read_events`."""

    def __init__(self, pool: Any, workers: int, starting: _Starting | None = None) -> None:
        self.pool = pool
        self.workers = workers
        self.starting = starting  # None: the workers have started

    def __call__(self, into: Reader) -> None:
        if into.state.compressed:
            self._by_shared_blocks(into)
        else:
            self._by_offset(into)

    def _by_shared_blocks(self, into: Reader) -> None:
        """Hand runs of the uncompressed stream to the workers; merge their columns in order.

        Runs travel in shared memory blocks (one copy, then the worker decodes in place), not
        through the pool's pipe, where every run was copied four times and the transfers, one
        after another, left the workers waiting. Without shared memory they take the pipe.
        A run that fails puts it and every later run back in the reader's buffer.
        """
        buf = into.buf
        run_bytes = reader.RUN_BYTES
        pending: deque[_Handed] = deque()
        limit = 2 * self.workers + 1
        blocks = _SharedBlocks(limit + 1, run_bytes + 2)
        try:
            while True:
                c = buf.skip_ws()
                if c is None or c == ord("]"):
                    break
                if c == ord(","):
                    buf.pos += 1
                    continue
                buf.fill(run_bytes)
                data, pos = buf.data, buf.pos
                if buf.eof and len(data) - pos < run_bytes:
                    break
                # Cut near RUN_BYTES from here (the buffer may hold several runs' worth): tasks
                # of even size keep the workers equally busy and their memory small.
                end = min(len(data), pos + run_bytes)
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
                pending.append(_Handed(future, buf.base + pos, segment, separator, block))
                buf.pos = next_event
                while pending and (len(pending) >= limit or pending[0].future.done()):
                    if not self._merge_oldest(into, pending, blocks):
                        return
            while pending:
                if not self._merge_oldest(into, pending, blocks):
                    return
        finally:
            for handed in pending:
                handed.future.cancel()
            blocks.close()

    def _merge_oldest(self, into: Reader, pending: deque[_Handed], blocks: _SharedBlocks) -> bool:
        """Merge the oldest run; on failure put it and the later ones back in the buffer."""
        oldest = pending.popleft()
        run = oldest.future.result()
        blocks.give_back(oldest.block)
        if run is None:
            for later in pending:
                later.future.cancel()  # their blocks are released when the loop ends
            rest = b"".join(bytes(h.segment) + h.separator for h in pending)
            into.buf.put_back(oldest.offset, bytes(oldest.segment) + oldest.separator + rest)
            pending.clear()
            return False
        into.accept_run(run, oldest.offset, len(oldest.segment))
        return True

    def _by_offset(self, into: Reader) -> None:
        """Plain files: workers read their own runs from the file, by offset and length.

        The main process reads only a small window at the end of each run to find the cut, so
        it is nearly idle and the workers do all of the decoding. Their columns come back in
        shared memory blocks (one per run in flight, reused once merged; the pipe without
        them). A run that fails, or the last run, hands over to the serial loop from that
        run's start (reading from there).
        """
        buf = into.buf
        state = into.state
        identity = identity_of(state)
        if identity is None or state.fd is None:
            return
        run_bytes = reader.RUN_BYTES
        size = state.size
        position = buf.offset
        pending: deque[_ByOffset] = deque()
        limit = 2 * self.workers + 1
        failed_at: int | None = None
        blocks = _SharedBlocks(limit + 1, RESULT_BYTES) if size > run_bytes else None
        try:
            while position + run_bytes < size:
                window_start = position + run_bytes - CUT_WINDOW
                window = os.pread(state.fd, CUT_WINDOW, window_start)
                matches = list(_NEXT_EVENT.finditer(window))
                if not matches:
                    break
                cut = window_start + matches[-1].start()
                length = cut + 1 - position
                starting = self.starting
                if starting is not None and not starting.done.is_set():
                    # The workers are still starting: this run is decoded here meanwhile.
                    from concurrent.futures import Future

                    here: Future = Future()
                    here.set_result(decode_file_run(identity, position, length))
                    pending.append(_ByOffset(here, position, length, None))
                elif starting is not None and starting.error is not None:
                    break  # no workers after all: the serial loop reads on from this run
                else:
                    block = blocks.take() if blocks is not None else None
                    name = block.name if block is not None else None
                    future = self.pool.submit(decode_file_run, identity, position, length, name)
                    pending.append(_ByOffset(future, position, length, block))
                position = window_start + matches[-1].end() - 1
                while pending and (len(pending) >= limit or pending[0].future.done()):
                    failed_at = self._merge_oldest_by_offset(into, pending, blocks)
                    if failed_at is not None:
                        break
                if failed_at is not None:
                    break
            while pending and failed_at is None:
                failed_at = self._merge_oldest_by_offset(into, pending, blocks)
        finally:
            for later in pending:
                later.future.cancel()
            if blocks is not None:
                if pending and not all(h.future.done() for h in pending):
                    # A worker may still write into a block: wait for the runs in flight.
                    for later in pending:
                        if not later.future.cancelled():
                            later.future.exception()
                blocks.close()
        resume = failed_at if failed_at is not None else position
        if resume != buf.offset:
            buf.restart_at(resume, _plain_blocks_from(state, resume))

    def _merge_oldest_by_offset(
        self, into: Reader, pending: deque[_ByOffset], blocks: _SharedBlocks | None
    ) -> int | None:
        """Merge the oldest run; on failure return its offset (where the serial loop resumes)."""
        future, offset, length, block = pending.popleft()
        try:
            run = future.result()
            if run is None or isinstance(run, str):
                # Undecodable, or (FILE_CHANGED) the worker did not find the file as it was
                # opened: this process reads on from its own open file, and says at the end
                # what changed.
                return offset
            if isinstance(run, Placed):
                run = run.unpacked(block.buf)
            into.state.bytes_read = max(into.state.bytes_read, offset + length)
            into.accept_run(run, offset, length)
            del run  # its views of the block: gone before the block is reused
            return None
        finally:
            if blocks is not None:
                blocks.give_back(block)


class _ByOffset(NamedTuple):
    """A run of a plain file handed to a worker (or decoded here)."""

    future: Future
    offset: int
    length: int
    block: Any  # the shared memory block its columns come back in (None: the pipe)


class _Handed(NamedTuple):
    """A run of the uncompressed stream handed to a worker."""

    future: Future
    offset: int  # of the run in the uncompressed stream
    segment: memoryview  # the run's bytes
    separator: bytes  # between the run and the next one
    block: Any  # the shared memory block it travels in (None: the pipe)


def _plain_blocks_from(state: SourceState, offset: int) -> Iterator[bytes]:
    """The plain file's bytes from `offset` on, read from the load's open file."""
    assert state.fd is not None
    while block := os.pread(state.fd, READ_BLOCK, offset):
        offset += len(block)
        state.bytes_read = max(state.bytes_read, offset)
        yield block


class FileIdentity(NamedTuple):
    """What a worker process needs to read the loading process's open file, and to check that
    what it opened is that file, unchanged."""

    path: str
    pid: int  # the loading process
    fd: int  # its descriptor of the file
    dev: int
    ino: int
    size: int
    mtime_ns: int


class FileChanged(Exception):
    """The file is not (or no longer) the one the load opened."""


def identity_of(state: SourceState) -> FileIdentity | None:
    """The load's open file, for a worker to read (None: a stream, or not opened here)."""
    if state.fd is None or state.stream or state.dev is None or state.mtime_ns is None:
        return None
    return FileIdentity(
        state.path, os.getpid(), state.fd, state.dev, state.ino or 0, state.size, state.mtime_ns
    )


def open_identical(identity: FileIdentity) -> int:
    """Worker side: open the loading process's file again, and check it is that file, unchanged.

    Through /proc/PID/fd/N (Linux) this is the very file the loading process opened, even if
    its path names another file by now; elsewhere the path is opened and must be that file.
    Raises FileChanged when it is not (or not as it was), OSError when it cannot be opened."""
    fd = None
    for candidate in (f"/proc/{identity.pid}/fd/{identity.fd}", identity.path):
        try:
            fd = os.open(candidate, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC)
        except OSError:
            continue
        if same_file(fd, identity):
            return fd
        os.close(fd)
        if candidate == identity.path:
            raise FileChanged(identity.path)
    if fd is None:
        raise OSError(f"{identity.path}: cannot be opened again")
    raise FileChanged(identity.path)


def same_file(fd: int, identity: FileIdentity) -> bool:
    """Is `fd` the identified file, with the size and mtime it had when the load opened it?"""
    try:
        now = os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (
        identity.dev,
        identity.ino,
        identity.size,
        identity.mtime_ns,
    )


FILE_CHANGED = "file changed"  # a worker's answer when the file is not the one the load opened


def decode_file_run(
    identity: FileIdentity, offset: int, length: int, block: str | None = None
) -> RunColumns | Placed | str | None:
    """Worker side: read one run of whole events from a plain file, decode and convert it.

    The file is the loading process's open file (see `open_identical`), checked again after
    the read: FILE_CHANGED if it is not that file, as it was when the load opened it. With a
    shared memory `block`, the run's columns are written there (`place_columns`)."""
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
    run = decode_array(array)
    if run is None or block is None:
        return run
    return place_columns(run, block)


class Placed(NamedTuple):
    """A worker's run whose whole columns wait in a shared memory block: `run` holds them
    empty, `columns` says where each is (name, dtype, offset, count)."""

    run: RunColumns
    columns: tuple[tuple[str, str, int, int], ...]

    def unpacked(self, buffer: memoryview) -> RunColumns:
        """The run with its columns read in place from the block's buffer (views, no copy:
        merge them before the block is reused)."""
        views = {
            column: np.frombuffer(buffer, dtype=np.dtype(dtype), count=count, offset=offset)
            for column, dtype, offset, count in self.columns
        }
        return dataclasses.replace(self.run, **views)


def place_columns(run: RunColumns, name: str) -> RunColumns | Placed:
    """Worker side: write the run's whole columns into the shared memory block `name`, for the
    loading process to merge from there: no pickling, no pipe, no copy but the merge's own.
    The run unchanged if they do not fit (it takes the pipe)."""
    shared = _attached(name).buf
    assert shared is not None
    columns = []
    end = 0
    for column in ROW_COLUMNS:
        values = getattr(run, column)
        if values.ndim == 1 and len(values):
            columns.append((column, values, end))
            end += -(-values.nbytes // 8) * 8  # each column 8-byte aligned
    if end > len(shared) or not columns:
        return run
    layout = []
    empty = {}
    for column, values, offset in columns:
        np.ndarray(len(values), values.dtype, buffer=shared, offset=offset)[:] = values
        layout.append((column, values.dtype.str, offset, len(values)))
        empty[column] = values[:0]
    return Placed(dataclasses.replace(run, **empty), tuple(layout))


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
            for step in (block.unlink, block.close):  # unlinked even if a view outlives it
                try:
                    step()
                except (OSError, BufferError):
                    pass
        self.all, self.free = [], []


_ATTACHED: dict[str, Any] = {}


def _attached(name: str) -> Any:
    """Worker side: the shared memory block `name`, attached once per block."""
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
    return block


def decode_shared(name: str, length: int) -> RunColumns | None:
    """Worker side: decode the run a shared memory block holds (attached once per block)."""
    shared = _attached(name).buf
    assert shared is not None  # an attached block has its buffer until it is closed
    view = shared[:length]
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
    return constant_columns_as_values(convert_run(events, repair.out_of_range))


def constant_columns_as_values(run: RunColumns) -> RunColumns:
    """The run with each column that holds one value throughout (ids and flows of a run of
    Python functions, the phase, the lane of one thread) as that value alone (a 0-d array), for
    the trip back to the loading process: about half the bytes to pickle, send and copy. The
    builder's assignments broadcast it. (`ordinal` stays whole: it says how many rows.)"""
    if len(run.ordinal) < 2:
        return run
    constant = {}
    for column in ROW_COLUMNS:
        values = getattr(run, column)
        if column != "ordinal" and values.ndim == 1 and (values == values[0]).all():
            constant[column] = np.array(values[0], dtype=values.dtype)
    return dataclasses.replace(run, **constant) if constant else run
