"""Two ranks of the job side by side (x on the job's timeline): every lane of each, one above
the other, zoomed and panned together in the job's window."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from kinetoscope.analysis.units import fmt_duration
from kinetoscope.tui.data.collapsed_rank import CollapsedRank
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.widgets.linked_timeline import LinkedTimeline
from kinetoscope.tui.widgets.timeline import Timeline
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from kinetoscope.present.safe_text import clean

if TYPE_CHECKING:
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen


class RankPairScreen(Screen):
    """Two ranks side by side: every lane of each, one above the other, one window."""

    DEFAULT_CSS = """
    RankPairScreen .pair-title, RankPairScreen #pair-status {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    RankPairScreen LinkedTimeline {
        height: 1fr;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back to the job"),
        Binding("q", "back", "Back to the job", show=False),
        Binding("tab", "switch", "Other rank", show=False),
    ]
    HELP_TITLE = "Two ranks side by side (x)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [*RankPairScreen.BINDINGS, *Timeline.BINDINGS]

    def __init__(self, owner: JobTimelineScreen, ranks: list[tuple[int, CollapsedRank]]) -> None:
        super().__init__()
        self.owner = owner
        self.ranks = ranks

    def compose(self) -> ComposeResult:
        for rank, view in self.ranks:
            yield Static(self._label(rank), classes="pair-title", id=f"pair-title-{rank}")
            timeline = LinkedTimeline(view.inner, id=f"pair-{rank}")
            timeline.delta = float(view.origin - view.inner.origin)
            timeline.ruler_zero = timeline.delta  # both rulers in the job's time
            timeline.job_span = self.owner.span
            timeline.on_moved = self.follow
            yield timeline
        yield Static("", id="pair-status")
        yield Footer()

    def _label(self, rank: int) -> Text:
        owner = self.owner
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"rank {rank}", "bold")
        if rank == owner.straggler:
            text.append(" ◀ straggler", "bold")
        elif rank == owner.fastest:
            text.append(" · fastest (waits most)")
        entry = owner.job.entry(rank)
        if entry is not None:
            text.append(f" · waited {fmt_duration(entry.wait_ns)}")
            text.append(f" · {clean(entry.path.rsplit('/', 1)[-1])}", "dim")
        return text

    def pair_timelines(self) -> list[LinkedTimeline]:
        return list(self.query(LinkedTimeline))

    def levels_complete(self, data: ViewData) -> None:
        """Every slice of `data` is placed now: its timeline lays its rows out again."""
        for timeline in self.pair_timelines():
            if timeline.data is data:
                timeline.levels_complete()

    def on_mount(self) -> None:
        timelines = self.pair_timelines()
        if timelines:
            timelines[0].focus()
        window = self.owner.window
        if window is not None:
            for timeline in timelines:
                timeline.cancel_fit()
            self.call_after_refresh(self._apply, window)

    def _apply(self, window: tuple[float, float, int]) -> None:
        for timeline in self.pair_timelines():
            timeline.cancel_fit()
            timeline.follow(*window)
        self.update_status()

    def follow(self, source: LinkedTimeline) -> None:
        window = source.job_window()
        for timeline in self.pair_timelines():
            if timeline is not source:
                timeline.follow(*window)
        self.owner.window = window  # back on the job's screen, the same window
        self.update_status()

    def update_status(self) -> None:
        status = self.query("#pair-status")
        window = self.owner.window
        if status and window is not None:
            start, per_cell, cursor = window
            text = f"{fmt_duration(cursor)} · {fmt_duration(per_cell, 2)}/cell · Tab: other rank"
            status.first(Static).update(Text(text))

    def action_switch(self) -> None:
        timelines = self.pair_timelines()
        focused = self.focused
        if focused in timelines:
            timelines[1 - timelines.index(focused)].focus()

    def action_back(self) -> None:
        self.app.pop_screen()
        owner = self.owner
        if owner.window is not None:
            for timeline in owner.timelines():
                if timeline.data is not None:
                    timeline.follow(*owner.window)
            owner.update_status()
