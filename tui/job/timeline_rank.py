"""A rank alone, opened from the job's timeline (Enter): the job viewer's screen for one rank,
on the model the timeline loaded already, in the timeline's window."""

from __future__ import annotations

from typing import ClassVar

from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.job.job_app import RankTraceScreen
from textual.binding import Binding, BindingType


class TimelineRankScreen(RankTraceScreen):
    """A rank alone, opened from the job's timeline: the job viewer's screen for one rank (the
    single-trace screen, every view it has), with the rank's model the timeline loaded already;
    q, and Esc with nothing selected, go back to the job's timeline."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "back", "Back to the job", tooltip="Back to the job's timeline"),
    ]

    def __init__(self, data: ViewData, rank: int) -> None:
        super().__init__(data, rank, None)

    def show_window(self, start: float, per_cell: float, cursor: float) -> None:
        timeline = self.timeline
        timeline.cancel_fit()
        timeline.ns_per_cell = per_cell
        timeline.view_start = start
        timeline.cursor_time = int(cursor)

    def action_back(self) -> None:
        self.app.pop_screen()
