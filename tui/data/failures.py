"""A background worker that fails is said where it failed, and never closes the viewer.

Every worker in the viewer runs with `exit_on_error=False`; the screen or widget that started
it mixes in `ReportsWorkerFailures`, which turns a failed worker into an error notification and
a line in the pane that would have shown the result (`show_failure`). A result that the
`TraceSession` could not compute raises `AnalysisFailed` on every ask, so the message names it.
"""

from __future__ import annotations

from typing import ClassVar

from kinetoscope.analysis.session import AnalysisFailed, memory_failure
from textual.worker import Worker, WorkerState


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def failure_message(
    what: str, error: BaseException, verb: str = "computed", events: int | None = None
) -> str:
    """`kernels: could not be computed (ValueError: …)`. For an `AnalysisFailed`, the session
    result that failed first (a result built on another that failed names that one). Out of
    memory (a MemoryError, or an AnalysisFailed of one) is said so, with the stage and, given
    the trace's `events`, what it would need."""
    stage = memory_failure(error)
    if stage is not None:
        from kinetoscope.parser.model import SUMMARY_BYTES_PER_EVENT

        where = f" computing {stage}" if stage else ""
        need = (
            f"; its {events:,} events need about "
            f"{events * SUMMARY_BYTES_PER_EVENT / 1e9:.1f} GB for the analysis"
            if events
            else ""
        )
        return (
            f"{what}: could not be {verb}: out of memory{where}{need}; free memory, or raise "
            "the limit (ulimit -v)"
        )
    if isinstance(error, AnalysisFailed):
        first = error
        while isinstance(first.error, AnalysisFailed):
            first = first.error
        name = first.name.replace("_", " ")
        cause = _reason(first.error)
        if name != what:
            cause = f"{name}: {cause}"
        return f"{what}: could not be {verb} ({cause})"
    return f"{what}: could not be {verb} ({_reason(error)})"


def _events_of(node: object) -> int | None:
    """The event count of the trace a screen or widget shows (its or its screen's `data`)."""
    for holder in (node, getattr(node, "screen", None)):
        try:
            return int(holder.data.trace.n_events)  # type: ignore[union-attr]
        except Exception:  # no data yet, a diff or job screen: the count is not said
            continue
    return None


class ReportsWorkerFailures:
    """Mixed into a Screen or Widget that starts workers (all with exit_on_error=False): a
    worker of this node that raises is notified as an error and handed to `show_failure`.

    FAILURE_SUBJECT names what the node's workers make ("kernels", "event arguments"), and
    FAILURE_VERB how ("computed", "read"), for `failure_message`.
    """

    FAILURE_SUBJECT: ClassVar[str] = "a background task"
    FAILURE_VERB: ClassVar[str] = "computed"

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        # A worker cancelled (superseded by a newer one, or its screen closed) is no news.
        if event.state != WorkerState.ERROR or worker.error is None or worker.is_cancelled:
            return
        message = failure_message(
            self.FAILURE_SUBJECT, worker.error, self.FAILURE_VERB, _events_of(self)
        )
        self.notify(message, severity="error", timeout=8, markup=False)  # type: ignore[attr-defined]
        self.show_failure(message)

    def show_failure(self, message: str) -> None:
        """Say in the node's own pane that its result is missing, and why (`message`)."""
