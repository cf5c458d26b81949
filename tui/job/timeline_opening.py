"""The job's timeline, its ranks opened: Enter opens the focused rank alone (every lane, the
single-trace screen: timeline_rank.py), x the straggler beside the fastest rank, X the focused
rank beside the straggler (rank_pair.py), each in the timeline's window, on the models the
timeline loaded (no second load); the rest of their nesting follows in the background.

`RankOpening` is that part of `JobTimelineScreen` (job_timeline.py).
"""

from __future__ import annotations

from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.job.rank_pair import RankPairScreen
from kinetoscope.tui.job.timeline_rank import TimelineRankScreen
from kinetoscope.tui.trace.load_report import reports_to
from kinetoscope.tui.trace.screens import TraceScreen


class RankOpening:
    """Opening ranks from the job's timeline (see the module docstring); a part of
    `JobTimelineScreen`, which has `views`, `errors`, `wanted()`, `rank_views`, `window`,
    `entries`, `straggler`, `fastest` and `current()`."""

    def action_open_current(self) -> None:
        timeline = self.current()
        if timeline is not None:
            self.open_rank(timeline.rank)

    def open_rank(self, rank: int) -> None:
        """The rank alone, every lane, in the job's window."""
        view = self.views.get(rank)
        if view is None:
            self.notify(f"Rank {rank} is {self._not_ready(rank)}", timeout=3)
            return
        screen = TimelineRankScreen(view.inner, rank)
        self.app.push_screen(screen)
        self.complete_levels(rank, view.inner)
        if self.window is not None:
            delta = view.origin - view.inner.origin
            start, per_cell, cursor = self.window
            screen.call_after_refresh(screen.show_window, start + delta, per_cell, cursor + delta)

    def _not_ready(self, rank: int) -> str:
        if rank in self.errors:
            return f"not loaded: {self.errors[rank]}"
        self.wanted(rank)
        return "still loading"

    def pair(self) -> tuple[int, int] | None:
        """The straggler and the fastest rank, else the first two."""
        ranks = [e.rank for e in self.entries]
        if self.straggler is not None and self.fastest is not None:
            return self.straggler, self.fastest
        return (ranks[0], ranks[1]) if len(ranks) >= 2 else None

    def action_side_by_side(self) -> None:
        pair = self.pair()
        if pair is None:
            self.notify("Side by side needs two ranks", timeout=3)
            return
        self.side_by_side(*pair)

    def action_side_by_side_current(self) -> None:
        timeline = self.current()
        if timeline is None:
            return
        other = self.straggler if timeline.rank != self.straggler else self.fastest
        if other is None or other == timeline.rank:
            self.action_side_by_side()
            return
        self.side_by_side(timeline.rank, other)

    def side_by_side(self, first: int, second: int) -> None:
        """Two ranks, all their lanes, one above the other, zoomed and panned together."""
        views = [self.views.get(first), self.views.get(second)]
        if views[0] is None or views[1] is None:
            waiting = [r for r, v in zip((first, second), views) if v is None]
            self.notify("; ".join(f"Rank {r} is {self._not_ready(r)}" for r in waiting), timeout=3)
            return
        self.app.push_screen(RankPairScreen(self, [(first, views[0]), (second, views[1])]))
        for rank, view in ((first, views[0]), (second, views[1])):
            self.complete_levels(rank, view.inner)

    def complete_levels(self, rank: int, data: ViewData) -> None:
        """Nest every slice of a rank opened on its own (loaded with its top levels only), in
        the background (the rank views' `nest`); the screens showing it redraw then."""
        if not data.complete:
            self.rank_views.nest(rank, data, self, reports_to(self, self.rank_views, rank))

    def _levels_complete(self, data: ViewData) -> None:
        for screen in self.app.screen_stack:
            if isinstance(screen, TraceScreen) and screen.data is data:
                screen.levels_complete()
            elif isinstance(screen, RankPairScreen):
                screen.levels_complete(data)
