"""Loading a trace for the viewer, in a thread started before the terminal UI is.

`TraceLoad(path)` starts at once: the decoding workers begin while Textual is still being
imported and set up. The loading screen polls its progress; once the first view is ready the
app shows it. After the first frame the same thread nests every slice (the first frame needs
only the lanes' top levels), tells the app, and writes the model and view caches for the next
open. This module does not import Textual.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kinetoscope.parser import TraceError, load, save_cache
from kinetoscope.parser.reader import prepare_workers

if TYPE_CHECKING:
    from .viewdata import ViewData

FIRST_FRAME_WAIT_S = 1.0  # the work after the first view waits this long for the first frame


class Cancelled(Exception):
    """Raised from the progress callback to stop a load the user cancelled."""


class TraceLoad:
    """One trace being loaded. Read `done`, `data`, `error`, `progress`, `phase` from any
    thread; `cancel()` stops it at the next progress report."""

    # The first view holds only the lanes' top levels (the rest follows): the first frame comes
    # sooner on big traces. Tests that drive the UI step by step turn it off.
    defer_levels = True

    def __init__(self, path: str, *, data: ViewData | None = None) -> None:
        """Start loading `path`; or, given the `data` a caller already built, a load that is
        done (nothing is read again)."""
        self.path = path
        self.began = time.monotonic()
        self.progress: tuple[int, int, int] = (0, 0, 0)  # bytes done, bytes total, events
        self.phase = "reading"
        self.data: ViewData | None = None
        self.error: str | None = None
        self.cancelled = threading.Event()
        self.done = threading.Event()  # data or error is set (or the load was cancelled)
        self.first_frame = threading.Event()  # the UI sets it once the first frame is drawn
        self.levels_done = threading.Event()
        self.on_done: Callable[[], None] | None = None  # set by the UI: `done` was just set
        self.on_levels: Callable[[ViewData], None] | None = None  # set by the UI
        self.on_failure: Callable[[str], None] | None = None
        self._thread = threading.Thread(target=self._run, name="kinetoscope-load", daemon=True)
        if data is not None:
            self.data = data
            self.done.set()
            if data.complete:
                self.levels_done.set()
            return
        # Before a UI takes over the standard streams, which decoding workers need to start.
        prepare_workers(path)
        self._thread.start()

    def cancel(self) -> None:
        self.cancelled.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the work after the first frame (the caches) to finish."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def rate(self) -> float:
        """Bytes per second so far."""
        return self.progress[0] / max(time.monotonic() - self.began, 1e-6)

    def _progress(self, done: int, total: int, events: int) -> None:
        if self.cancelled.is_set():
            raise Cancelled
        self.progress = (done, total, events)

    def _run(self) -> None:
        # Imported here, by this thread: the analysis modules load while the workers decode.
        from . import viewdata

        trace = None
        try:
            # The model cache is written after the first frame, not before it.
            trace = load(self.path, progress=self._progress, write_cache=False)
            if self.cancelled.is_set():
                raise Cancelled
            self.phase = "laying out the timeline…"
            data = viewdata.build_view_data(trace, defer_levels=self.defer_levels)
        except Cancelled:
            self._finish()
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
            self._fail(f"{self.path}: could not be shown ({type(error).__name__}: {error})")
            return
        if self.cancelled.is_set():
            self._finish()
            return
        self.data = data
        self._finish()
        self.first_frame.wait(FIRST_FRAME_WAIT_S)
        if not data.complete:
            try:
                data.complete_levels()
            except Exception as error:  # the first frame stays; say what is missing
                if self.on_failure is not None:
                    self.on_failure(f"could not nest the slices ({type(error).__name__}: {error})")
                return
        self.levels_done.set()
        if self.on_levels is not None:
            self.on_levels(data)
        if save_cache(trace) or trace.from_cache:
            if not data.levels_from_cache:
                viewdata.save_view_cache(data)

    def _fail(self, message: str) -> None:
        self.error = message
        self._finish()

    def _finish(self) -> None:
        self.done.set()
        callback = self.on_done
        if callback is not None:
            try:
                callback()
            except Exception:  # the UI went away; it polls `done` anyway
                pass
