"""Timelines that share one window: the job's timeline (a rank per timeline, two ranks side by
side) and the diff's (the base above the new trace) are `LinkedTimeline`s.

Each has its own trace; its relative time is the shared window's plus its `delta`, and it
stays on the shared span (`job_span`). Every change of its window or cursor is handed to
`on_moved(self)`, which makes the others `follow` it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.widgets.timeline import MIN_NS_PER_CELL, Timeline


class LinkedTimeline(Timeline):
    """A Timeline whose window is the job's: its own relative time is the job's plus `delta`,
    and it stays on the job's span. Every change of its window or cursor is handed to
    `on_moved(self)`; `follow` takes the job's window without handing it back."""

    def __init__(self, data: ViewData | None = None, **kwargs: Any) -> None:
        self.delta = 0.0  # own relative time − job relative time
        self.job_span = 1
        self.on_moved: Callable[[LinkedTimeline], None] | None = None
        self._following = False
        # Until it has a window (fitted, or the job's), its default one is not handed on: the
        # watchers run once at mount with the defaults.
        self.live = False
        super().__init__(data, **kwargs)
        self.cursor_row_shown = False  # until it has the focus

    # The job's window, in job relative time.
    def job_window(self) -> tuple[float, float, int]:
        return self.view_start - self.delta, self.ns_per_cell, int(self.cursor_time - self.delta)

    def follow(self, view_start: float, ns_per_cell: float, cursor: int) -> None:
        self._following = True
        try:
            self.ns_per_cell = ns_per_cell
            self.view_start = view_start + self.delta
            self.cursor_time = int(cursor + self.delta)
        finally:
            self._following = False
        self.live = True
        self.refresh()

    def _moved(self) -> None:
        if self.live and not self._following and self.data is not None and self.on_moved:
            self.on_moved(self)

    def watch_view_start(self) -> None:
        super().watch_view_start()
        self._moved()

    def watch_ns_per_cell(self) -> None:
        super().watch_ns_per_cell()
        self._moved()

    def watch_cursor_time(self) -> None:
        super().watch_cursor_time()
        self._moved()

    def on_focus(self) -> None:
        self.cursor_row_shown = True
        self._strips.clear()
        self.refresh()
        self.focus_changed()

    def on_blur(self) -> None:
        self.cursor_row_shown = False  # one cursor row on the screen: the focused timeline's
        self._strips.clear()
        self.refresh()
        self.focus_changed()

    def focus_changed(self) -> None:
        """Focus came or went (the screen may say which timeline has it)."""

    def _clamp_view(self) -> None:
        if self.data is None:
            return
        visible = self.cells_width * self.ns_per_cell
        low, high = sorted((self.delta, self.delta + self.job_span - visible))
        self.view_start = float(min(max(self.view_start, low), high))

    def _max_ns_per_cell(self) -> float:
        return max(MIN_NS_PER_CELL, 2.0 * self.job_span / self.cells_width)

    def action_fit_all(self) -> None:
        if self.data is None:
            return
        self.live = True
        self.ns_per_cell = max(MIN_NS_PER_CELL, self.job_span / max(self.cells_width - 1, 1))
        self.view_start = self.delta
        if not (self.delta <= self.cursor_time <= self.delta + self.job_span):
            self.cursor_time = int(self.delta)
