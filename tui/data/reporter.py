"""What every loader of the viewers shares: one sink subscribed at any time, a late subscriber
replayed what it missed, progress rate limited.

A `Reporter` is a loader that works in a thread of its own (`TraceLoad`: one trace;
`JobLoad`: a job's ranks digested) and tells the UI how far it got through reports: small
frozen dataclasses handed to one sink, from the loader's thread. The UI subscribes when it is
ready for them, which may be after the loader began: the reports it missed are replayed
first, in order (progress is not kept: only the latest counts, and a loader says what that
is in `_replay`). This module does not import Textual.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

R = TypeVar("R")


class Reporter(Generic[R]):
    """The reporting half of a loader (see the module docstring). `_lock` guards the sink and
    the reports kept; a loader may wait on it (it is a condition) for its own state."""

    def _init_reports(self) -> None:
        self._lock = threading.Condition(threading.RLock())
        self._sink: Callable[[R], None] | None = None
        self._reported: list[R] = []  # every report kept, in order (for the replay)
        self._last_progress = -float("inf")  # monotonic time progress was last reported

    # -- what the UI calls ----------------------------------------------------------------------

    def subscribe(self, sink: Callable[[R], None]) -> None:
        """Send every report to `sink` from now on (a later subscriber replaces it), first
        replaying what it missed, in order."""
        with self._lock:
            self._sink = sink
            for report in self._replay():
                self._deliver(sink, report)

    def unsubscribe(self) -> None:
        with self._lock:
            self._sink = None

    # -- what the loader calls ------------------------------------------------------------------

    def _replay(self) -> list[R]:
        """What a sink subscribing now is told first: the reports kept (a loader adds its
        latest progress)."""
        return list(self._reported)

    @staticmethod
    def _deliver(sink: Callable[[R], None], report: R) -> None:
        try:
            sink(report)
        except Exception:  # the UI went away: the load's state can still be read
            pass

    def _send(self, report: R, keep: bool = True) -> None:
        """Hand `report` to the sink; `keep`: also replay it to a later subscriber."""
        with self._lock:
            if keep:
                self._reported.append(report)
            if self._sink is not None:
                self._deliver(self._sink, report)

    def _progress_due(self, per_second: float) -> bool:
        """True at most `per_second` times a second: a progress report may be sent now."""
        now = time.monotonic()
        if now - self._last_progress >= 1 / per_second:
            self._last_progress = now
            return True
        return False
