"""Loading a trace for the viewer, in a thread started before the terminal UI is.

`TraceLoad(path, staged=...)` starts at once: the decoding workers begin while Textual is still
being imported and set up. The thread reads the trace, makes its `TraceSession` and lays a
`ViewData` over it, and reports to one sink that the UI subscribes (`subscribe`): progress while
it reads (at most `PROGRESS_PER_S` reports a second), then each stage as it is reached. A sink
subscribed late first gets what it missed, in order. This module does not import Textual.

Stages, in order: READING, LAYOUT, TOP_LEVELS (the view can be shown), COMPLETE (every slice is
placed); or FAILED or CANCELLED in place of the view. Staged (`staged=True`, as the command
runs), TOP_LEVELS holds only each lane's top level: enough for the first frame, where every lane
is collapsed, and sooner on big traces. The thread then waits for the UI's
`first_frame_shown()` (or `FIRST_FRAME_WAIT_S`), nests every slice and reports COMPLETE
(unless `nest=False`: the job's timeline draws the top levels only, and has a rank nested when
it is opened). Not staged, or from a cached view, COMPLETE follows TOP_LEVELS at once. The
reporting (one sink, a late one replayed, progress rate limited) is reporter.py's, which
`JobLoad` shares. Last, after the first frame
either way, the model and view caches are written for the next open. A failure after
TOP_LEVELS (the nesting, a cache write) is a `BackgroundFailure` report: the view stays.

A model read from the cache is mapped without its CRCs read (the reopen costs the same at any
size); they are read first thing after the first frame (`parser.cache.check`). If one does not
match, the entry is removed and a `Reloading` report says so: the view built on it is dropped,
and the trace is read again from its file (READING, then TOP_LEVELS with the new view).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kinetoscope.parser import TraceError, load, prepare_workers, save_cache

from .reporter import Reporter

if TYPE_CHECKING:
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.tui.data.viewdata import ViewData

FIRST_FRAME_WAIT_S = 1.0  # the work after the first view waits this long for the first frame
PROGRESS_PER_S = 10  # progress reports a sink gets per second, at most


class Stage(enum.Enum):
    READING = "reading"
    LAYOUT = "layout"
    TOP_LEVELS = "top levels"  # the view can be shown: each lane's top level, maybe more
    COMPLETE = "complete"  # every slice is placed
    FAILED = "failed"  # nothing to show: `Failed.message` says why
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Progress:
    """Reading (bytes done of total, events so far, bytes per second), or laying out."""

    stage: Stage
    done: int
    total: int
    events: int
    rate: float


@dataclass(frozen=True)
class Ready:
    """TOP_LEVELS: the view can be shown (`data.complete` says whether its deeper levels are
    there already)."""

    data: ViewData


@dataclass(frozen=True)
class Complete:
    """COMPLETE: every slice of `data` is placed."""

    data: ViewData


@dataclass(frozen=True)
class Failed:
    """FAILED: the trace cannot be shown; a one-line message."""

    message: str


@dataclass(frozen=True)
class Cancelled:
    """CANCELLED: the load stopped at the user's request."""


@dataclass(frozen=True)
class BackgroundFailure:
    """Work after the view was shown failed (a one-line message); the view stays."""

    message: str


@dataclass(frozen=True)
class Reloading:
    """The cached model failed its check after the view was shown (`message`, one line): that
    view must not be used any more; the trace is being read again from its file."""

    message: str


Report = Progress | Ready | Complete | Failed | Cancelled | BackgroundFailure | Reloading
Sink = Callable[[Report], None]
"""Called with each report, from the loader's thread (or, replaying, from the subscriber's):
it must not block and must not call back into the loader. The app posts a message."""

_ENDS = (Stage.TOP_LEVELS, Stage.COMPLETE, Stage.FAILED, Stage.CANCELLED)


class _Cancel(Exception):
    """Raised from the progress callback to stop a load the user cancelled."""


class TraceLoad(Reporter[Report]):
    """One trace being loaded (see the module docstring). `stage`, `progress`, `data`,
    `session` and `error` may be read from any thread; `cancel()` stops the load at its next
    progress report."""

    def __init__(
        self, path: str, *, staged: bool, nest: bool = True, workers: int | None = None
    ) -> None:
        """Start loading `path`. `staged`: show the lanes' top levels first (see the module
        docstring); tests that step through the UI key by key use False. `nest` False: a
        staged view's deeper levels are left to the caller (the job's timeline draws the top
        levels only; no COMPLETE follows then). `workers`: the decoding processes (None: as
        the file's size pays for; 1: this process alone)."""
        self._setup(path, staged)
        self.nest = nest
        self.workers = workers
        self._thread = threading.Thread(target=self._run, name="kinetoscope-load", daemon=True)
        # Before a UI takes over the standard streams, which decoding workers need to start.
        prepare_workers(path, workers)
        self._thread.start()

    @classmethod
    def finished(cls, data: ViewData) -> TraceLoad:
        """A load that is done already: the view `data` a caller built (nothing is read). Its
        deeper levels are placed in the thread if they are not yet; no cache is written."""
        load = cls.__new__(cls)
        load._setup(data.trace.source.path, staged=not data.complete)
        load.nest, load.workers = True, None
        load.progress = (data.trace.source.bytes, data.trace.source.bytes, data.trace.n_events)
        load._thread = threading.Thread(
            target=load._after_first_frame, args=(data, False), name="kinetoscope-load", daemon=True
        )
        load._ready(data)
        load._thread.start()
        return load

    def _setup(self, path: str, staged: bool) -> None:
        self.path = path
        self.staged = staged
        self.began = time.monotonic()
        self.progress: tuple[int, int, int] = (0, 0, 0)  # bytes done, bytes total, events
        self.stage = Stage.READING
        self.data: ViewData | None = None
        self.error: str | None = None  # why the load failed (FAILED)
        self.background_error: str | None = None  # why work after the view failed, if it did
        self._cancelled = threading.Event()
        self._first_frame = threading.Event()
        self._init_reports()  # every report but progress is kept for a late subscriber

    @property
    def session(self) -> TraceSession | None:
        """The trace's session, once the view is ready."""
        return self.data.session if self.data is not None else None

    # -- what the UI calls --------------------------------------------------------------------

    def first_frame_shown(self) -> None:
        """The UI drew its first frame of the view: the work after it may start."""
        self._first_frame.set()

    def cancel(self) -> None:
        """Stop the load (a CANCELLED report follows); no effect once the view is ready."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait(self, timeout: float | None = None) -> Stage:
        """Wait until the view is ready or the load ended without one; the stage then (or
        now, after `timeout` seconds)."""
        with self._lock:
            self._lock.wait_for(lambda: self.stage in _ENDS, timeout)
            return self.stage

    def join(self, timeout: float | None = None) -> None:
        """Wait for the work after the first frame (the nesting, the caches) to finish."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        """The thread still works (reading, or the work after the first frame)."""
        return self._thread.is_alive()

    @property
    def rate(self) -> float:
        """Bytes per second so far."""
        return self.progress[0] / max(time.monotonic() - self.began, 1e-6)

    # -- reporting ----------------------------------------------------------------------------

    def _progress_report(self) -> Progress:
        done, total, events = self.progress
        return Progress(self.stage, done, total, events, self.rate)

    def _replay(self) -> list[Report]:
        """A late subscriber's first reports: the latest progress while still loading, then
        each stage reached, in order."""
        latest = [self._progress_report()] if self.stage in (Stage.READING, Stage.LAYOUT) else []
        return latest + self._reported

    def _report(self, report: Report, stage: Stage | None = None) -> None:
        """Record `report` (and the stage it reaches) and send it to the sink."""
        with self._lock:
            if stage is not None:
                self.stage = stage
                self._lock.notify_all()
            self._send(report, keep=not isinstance(report, Progress))

    def _progress(self, done: int, total: int, events: int) -> None:
        if self._cancelled.is_set():
            raise _Cancel
        self.progress = (done, total, events)
        if self._progress_due(PROGRESS_PER_S):
            self._report(self._progress_report())

    def _ready(self, data: ViewData) -> None:
        self.data = data
        self._report(Ready(data), Stage.TOP_LEVELS)
        if data.complete:
            self._report(Complete(data), Stage.COMPLETE)

    def _fail(self, message: str) -> None:
        self.error = message
        self._report(Failed(message), Stage.FAILED)

    def _background_failure(self, message: str) -> None:
        self.background_error = message
        self._report(BackgroundFailure(message))

    # -- the thread ---------------------------------------------------------------------------

    def _run(self, use_cache: bool = True) -> None:
        # Imported here, by this thread: the analysis modules load while the workers decode.
        from kinetoscope.analysis.session import TraceSession

        from . import viewdata

        trace = None
        try:
            # The model cache is written after the first frame, not before it; a cached one is
            # mapped unchecked, and checked after the first frame (`_cache_checked`).
            # Read again after a failed check (`use_cache` False): in this process, as the
            # decoding workers were not started before the UI took the standard streams.
            trace = load(
                self.path,
                progress=self._progress,
                use_cache=use_cache,
                write_cache=False,
                verify_cache=False,
                workers=self.workers if use_cache else 1,
            )
            if self._cancelled.is_set():
                raise _Cancel
            with self._lock:  # the progress report says LAYOUT
                self.stage = Stage.LAYOUT
                self._report(self._progress_report())
            data = viewdata.build_view_data(TraceSession(trace), staged=self.staged)
            if self._cancelled.is_set():
                raise _Cancel
        except _Cancel:
            self._report(Cancelled(), Stage.CANCELLED)
            return
        except TraceError as error:
            self._fail(str(error))
            return
        except OSError as error:
            self._fail(f"{self.path}: {error.strerror or error}")
            return
        except MemoryError:  # laying out the view (a load's own says so as a TraceError)
            from kinetoscope.parser.model import out_of_memory_message

            events = trace.n_events if trace is not None else 0
            trace = None  # frees the model before anything else is made
            self._fail(out_of_memory_message(self.path, events))
            return
        except Exception as error:  # a trace we cannot handle still gets the error screen
            from kinetoscope.analysis.session import memory_failure
            from kinetoscope.parser.model import out_of_memory_message

            stage = memory_failure(error)  # an analysis of the layout ran out (AnalysisFailed)
            if stage is not None:
                events = trace.n_events if trace is not None else 0
                trace = None
                self._fail(out_of_memory_message(self.path, events, stage))
                return
            self._fail(f"{self.path}: could not be shown ({type(error).__name__}: {error})")
            return
        self._ready(data)
        self._after_first_frame(data, write_caches=True)

    def _cache_checked(self, data: ViewData) -> bool:
        """Read the CRCs the cached model (and view) were mapped without. False if one failed:
        the entry is gone, and the trace is read again from its file (in this thread)."""
        from kinetoscope.parser import cache

        if not data.trace.cache_unchecked or cache.check(data.trace):
            return True
        with self._lock:
            self.data = None
            self._report(
                Reloading(
                    f"{self.path}: the model cache failed its check and was removed; "
                    "reading the trace again"
                ),
                Stage.READING,
            )
        self._run(use_cache=False)
        return False

    def _after_first_frame(self, data: ViewData, write_caches: bool) -> None:
        """Once the first frame is drawn: the cache's check, the deeper levels, then the caches
        for the next open."""
        self._first_frame.wait(FIRST_FRAME_WAIT_S)
        if not self._cache_checked(data):
            return
        if not data.complete and self.nest:
            try:
                data.complete_levels()
            except Exception as error:  # the first frame stays; say what is missing
                self._background_failure(
                    f"could not nest the slices ({type(error).__name__}: {error})"
                )
                return
            self._report(Complete(data), Stage.COMPLETE)
        if not write_caches:
            return
        from . import viewdata

        try:
            if (save_cache(data.trace) or data.trace.from_cache) and not data.levels_from_cache:
                viewdata.save_view_cache(data)
        except Exception as error:  # the next open is slower; this one is unharmed
            self._background_failure(
                f"could not write the cache for the next open ({type(error).__name__}: {error})"
            )
