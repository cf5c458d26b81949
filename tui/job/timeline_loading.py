"""The job's timeline, its ranks loaded: a rank is asked for when its block is first drawn (so
a big job loads the ranks on screen, not every rank), the straggler and the fastest rank
first; the job's `RankViews` (tui/data/rank_views.py) loads it (its lanes' top levels only, a
few at a time) and keeps it, and this part collapses it to its three rows (in a thread: its
collectives come from its digest, else are found again) and draws it. Until then its rows
say "loading". Past the rank views' bound, the ranks farthest off screen are forgotten, and
loaded again when scrolled back to.

`RankLoading` is that part of `JobTimelineScreen` (job_timeline.py).
"""

from __future__ import annotations

import threading

from kinetoscope.tui.data.collapsed_rank import CollapsedRank, collapsed_rows
from kinetoscope.tui.data.loader import Cancelled, Complete, Failed, Ready, Reloading
from kinetoscope.tui.data.rank_views import LOAD_THREADS, RankViews
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.trace.load_report import LoadReported, reports_to
from textual.containers import VerticalScroll

LOADING = "loading…"  # a rank's rows until it is drawn


class RankLoading:
    """Asking for the ranks the job's timeline draws, and drawing them once they come (see the
    module docstring); a part of `JobTimelineScreen`, which has `job`, `origin`, `span`,
    `shift()`, `timeline_of()`, `timelines()`, `current()`, `straggler`, `fastest`, `window`
    and `update_status()` (which keeps `focused_rank`)."""

    def init_loading(self, rank_views: RankViews | None) -> None:
        """`rank_views`: the job viewer's (None: the screen's own, for this job's ranks)."""
        self.owns_rank_views = rank_views is None
        self.rank_views = rank_views or RankViews({e.rank: e.path for e in self.entries})
        self.views: dict[int, CollapsedRank] = {}  # the ranks drawn
        self.errors: dict[int, str] = {}  # ranks that could not be drawn: why
        self._requested: set[int] = set()  # asked for and not forgotten since
        self.focused_rank: int | None = None  # the rank focused last
        self._slots = threading.Semaphore(LOAD_THREADS)  # ranks collapsed at once

    @property
    def loading(self) -> int:
        """Ranks asked for and not drawn yet."""
        return len(self._requested - set(self.views) - set(self.errors))

    def wanted(self, rank: int) -> None:
        """Have a rank loaded (once) in the background: its block is on screen, or soon will
        be; drawn when it comes (at once if the rank views have it already)."""
        entry = self.job.entry(rank)
        if entry is None or not entry.loaded or rank in self._requested:
            return
        self._requested.add(rank)
        views = self.rank_views
        views.want(rank, self, reports_to(self, views, rank))
        error = views.error(rank)
        data = views.view(rank)
        if error is not None:
            self._failed(rank, error)
        elif data is not None:
            self._collapse(rank, data)

    def on_load_reported(self, message: LoadReported) -> None:
        """A report of a rank asked for (the rank views' `want` and `nest`)."""
        rank, report = message.key, message.report
        if message.source is not self.rank_views or not isinstance(rank, int):
            return
        if isinstance(report, Complete):
            self._levels_complete(report.data)
        if rank not in self._requested:
            return
        if isinstance(report, Ready):
            self._collapse(rank, report.data)
        elif isinstance(report, Failed):
            self._failed(rank, report.message)
        elif isinstance(report, Cancelled):
            self._requested.discard(rank)  # asked for again when drawn again
        elif isinstance(report, Reloading):
            self._forget(rank)
            self._requested.add(rank)  # the rank views read it again: drawn when it comes

    def _collapse(self, rank: int, data: ViewData) -> None:
        """Collapse a loaded rank to its three rows in a worker thread, then draw it."""
        entry = self.job.entry(rank)
        if entry is None:
            return
        source = self.job.matched.source if len(self.job.matched) else None
        origin = self.origin + self.shift(entry)

        def work() -> None:
            with self._slots:
                try:
                    rows = collapsed_rows(data, source, entry.digest.collectives)
                    view = CollapsedRank(data, rank, rows, origin, self.span)
                except Exception as error:  # this rank's problem: the others are still drawn
                    message = f"could not be shown ({type(error).__name__}: {error})"
                    self.app.call_from_thread(self._failed, rank, message)
                    return
            self.app.call_from_thread(self._collapsed, rank, view)

        self.run_worker(work, thread=True, group="ranks", exit_on_error=False, name=f"rank {rank}")

    def _collapsed(self, rank: int, view: CollapsedRank) -> None:
        """Drawn, unless the rank was forgotten (or read again) meanwhile."""
        if not self.is_mounted:
            return
        drawn = self.views.get(rank)
        if rank in self._requested and (drawn is None or drawn.inner is not view.inner):
            if self.rank_views.view(rank) is view.inner:
                self._ready(rank, view)

    def _failed(self, rank: int, message: str) -> None:
        self.errors[rank] = message
        timeline = self.timeline_of(rank)
        if timeline is not None:
            timeline.note = message
            timeline.refresh()
        self.update_status()

    def _ready(self, rank: int, view: CollapsedRank) -> None:
        entry = self.job.entry(rank)
        if entry is not None:
            view.rebase(self.origin + self.shift(entry), self.span)
        self.views[rank] = view
        timeline = self.timeline_of(rank)
        if timeline is None:
            return
        self._evict(keep=rank)
        window = self.window
        timeline.show(view, window)
        self.draw_marks()
        if window is None and self.pending_range is not None:
            # The window asked for comes first: no rank fits the whole job meanwhile.
            timeline.cancel_fit()
            self.call_after_refresh(self._show_pending, timeline)
        if self.to_select is not None and self.to_select[0] == rank:
            row = self.to_select[1]
            self.to_select = None
            if 0 <= row < len(view.trace) and view.level_of_row(row)[0] >= 0:
                timeline.select(row, move_cursor=False)
        self.update_status()

    def _evict(self, keep: int) -> None:
        """Past the rank views' bound, forget the ranks off screen, the farthest first (never
        the straggler, the fastest, the focused rank or `keep`)."""
        if not self.rank_views.over_bound():
            return
        scroll = self.query_one("#job-ranks", VerticalScroll).region
        current = self.current()
        kept = {keep, self.straggler, self.fastest, current.rank if current else None}
        off_screen = [
            t
            for t in self.timelines()
            if t.data is not None and t.rank not in kept and not scroll.overlaps(t.region)
        ]
        middle = scroll.y + scroll.height // 2
        off_screen.sort(key=lambda t: -abs(t.region.y - middle))  # the farthest first
        for rank in self.rank_views.trim([t.rank for t in off_screen]):
            self._forget(rank)

    def _forget(self, rank: int) -> None:
        """The rank is no longer drawn; its rows say it is loading."""
        self.views.pop(rank, None)
        self._requested.discard(rank)
        timeline = self.timeline_of(rank)
        if timeline is not None and timeline.data is not None:
            timeline.unload(LOADING)

    def on_unmount(self) -> None:
        """Closed: the ranks it drew are no longer held (the rank views keep a few)."""
        if self.owns_rank_views:
            self.rank_views.close()
        else:
            focused = self.focused_rank  # the rank looked at last: kept for a quick open
            self.rank_views.release(self._requested | set(self.views), self, last=focused)
