"""The job's timeline: every rank of a distributed job on one time axis, each collapsed to three
rows (GPU compute, communication, the main CPU thread); Enter opens a rank alone, x puts two
ranks side by side.

Each rank is drawn by a `RankTimeline` (rank_timeline.py: a `LinkedTimeline` of the widgets,
timelines sharing one window) over a `CollapsedRank` (tui/data/collapsed_rank.py): a view of
that rank's `ViewData` with three lanes of its own, whose times are relative to the job's
origin (shifted by the rank's clock offset when offsets are applied), so that every rank's
timeline shows the same window with the same numbers.

`JobTimelineScreen` is made of named parts, each in its own module: `RankLoading`
(timeline_loading.py: the ranks asked for from the job's `RankViews` as they come on screen,
collapsed and drawn, forgotten past its bound), `RankOpening` (timeline_opening.py: Enter, x
and X, on the models loaded already) and `JobRangeMarks` (timeline_marks.py: m, M and e); the
screen itself lays the ranks out, keeps one window for all of them (`follow`), says where the
cursor is and applies the clock offsets (c).

Times: a rank's own clock runs ahead of the reference's by its estimated offset (JobAnalysis's
`RankEntry.offset_ns`); with offsets applied (c), an event at own time t is drawn at
t − offset. Without, every rank is drawn as recorded.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kinetoscope.analysis.job import JobAnalysis, RankEntry
from kinetoscope.analysis.units import fmt_duration
from kinetoscope.parser.ranks import ranges_text
from kinetoscope.tui.data.rank_views import RankViews
from kinetoscope.tui.job.rank_timeline import RankTimeline
from kinetoscope.tui.job.timeline_loading import RankLoading
from kinetoscope.tui.job.timeline_marks import JobRangeMarks
from kinetoscope.tui.job.timeline_opening import RankOpening
from kinetoscope.tui.widgets.linked_timeline import LinkedTimeline
from kinetoscope.tui.widgets.timeline import MIN_NS_PER_CELL, Timeline
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from kinetoscope.present.safe_text import clean, fit_name

WINDOW_MARGIN = 0.1  # a window asked for (a collective) gets this share of margin each side


class JobTimelineScreen(RankLoading, RankOpening, JobRangeMarks, Screen):
    """Every rank on one time axis, collapsed to three rows each (see the module docstring)."""

    DEFAULT_CSS = """
    JobTimelineScreen #job-title, JobTimelineScreen #job-status {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    JobTimelineScreen #job-title { height: auto; max-height: 2; }
    JobTimelineScreen #job-ranks {
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "c",
            "toggle_offsets",
            "Clock offsets",
            tooltip="Apply the estimated clock offsets between ranks, or draw them as recorded",
        ),
        Binding(
            "x",
            "side_by_side",
            "Side by side",
            tooltip="The straggler and the fastest rank side by side, all their lanes",
        ),
        Binding(
            "X",
            "side_by_side_current",
            "Side by side with this rank",
            show=False,
            tooltip="This rank and the straggler (or the fastest) side by side",
        ),
        Binding("enter", "open_current", "Open rank", tooltip="Open the rank alone, all its lanes"),
        Binding(
            "m",
            "mark",
            "Mark",
            show=False,
            tooltip="Mark a range start, then its end, on every rank (e exports it)",
        ),
        Binding(
            "M",
            "mark_selection",
            "Mark the selected event",
            show=False,
            tooltip="Mark the selected event (e.g. a ProfilerStep) as the range on every rank; "
            "again clears it (e exports it)",
        ),
        Binding(
            "e",
            "export_range",
            "Export",
            show=False,
            tooltip="Export the marked range of every rank as one Perfetto bundle (.zip)",
        ),
        Binding("q", "back", "Back", tooltip="Back to the screen the timeline was opened from"),
        Binding("escape", "back", "Back", show=False),
    ]
    HELP_TITLE = "Job timeline (t)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        """The single-trace timeline's keys, on every rank at once, and this screen's."""
        return [
            *(
                b
                for b in Timeline.BINDINGS
                if isinstance(b, Binding) and b.key not in ("enter", "P")
            ),
            *JobTimelineScreen.BINDINGS,
        ]

    def __init__(
        self,
        job: JobAnalysis,
        *,
        window: tuple[int, int] | None = None,
        ranks: list[int] | None = None,
        aligned: bool = False,
        name: str = "job",
        select: tuple[int, int] | None = None,
        views: RankViews | None = None,
    ) -> None:
        """`window`: (start, end) ns in the job's clock (as recorded) to show first, else the
        whole job; `ranks`: the ranks to show first (the first one focused); `select`: (rank,
        row) an event to select once that rank is drawn; `views`: the job viewer's rank views
        (None: the screen loads the ranks through its own)."""
        super().__init__()
        self.job = job
        self.title_name = name
        self.entries = [e for e in job.ranks if e.loaded]
        self.failed = [e for e in job.ranks if not e.loaded]
        self.straggler: int | None = job.straggler["rank"] if job.straggler else None
        taking = [e for e in self.entries if e.matched]
        self.fastest: int | None = (
            max(taking, key=lambda e: (e.wait_ns, -e.rank)).rank if len(taking) >= 2 else None
        )
        self.aligned = aligned
        starts = [e.digest.start_ns for e in self.entries if e.digest.start_ns is not None]
        ends = [e.digest.end_ns for e in self.entries if e.digest.end_ns is not None]
        offsets = [self._offset(e) for e in self.entries if e.digest.start_ns is not None]
        # The origin and span hold every rank as recorded and with offsets applied.
        self.origin = min((s - max(o, 0) for s, o in zip(starts, offsets)), default=0)
        end_offsets = [self._offset(e) for e in self.entries if e.digest.end_ns is not None]
        end = max((t - min(o, 0) for t, o in zip(ends, end_offsets)), default=self.origin + 1)
        self.span = max(1, end - self.origin)
        self.window: tuple[float, float, int] | None = None  # view start, ns/cell, cursor (job)
        self.pending_range = window
        self.first_ranks = ranks or []
        self.to_select = select
        self.init_loading(views)
        # The marked range, job relative ns (start, end); end None while only the start is.
        self.marked: tuple[int, int | None] | None = None
        self._shift_armed = False  # `c` once on one host's ranks: the next one shifts anyway

    @staticmethod
    def _offset(entry: RankEntry) -> int:
        return round(entry.offset_ns) if entry.offset_ns is not None else 0

    def shift(self, entry: RankEntry) -> int:
        """What to add to the job's origin to place this rank's events (its offset, if applied)."""
        return self._offset(entry) if self.aligned else 0

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(self.title_text(), id="job-title")
        with VerticalScroll(id="job-ranks"):
            for entry in self.entries:
                yield RankTimeline(entry, self, id=f"rank-{entry.rank}")
        yield Static("", id="job-status")
        yield Footer()

    def on_mount(self) -> None:
        first = next((r for r in self.first_ranks if self.timeline_of(r) is not None), None)
        if first is None and self.entries:
            first = self.straggler if self.straggler is not None else self.entries[0].rank
        for rank in [*self.first_ranks, self.straggler, self.fastest]:
            if rank is not None:
                self.wanted(rank)
        if first is not None:
            timeline = self.timeline_of(first)
            if timeline is not None:
                timeline.focus()
        if self.failed:
            names = ", ".join(f"rank {e.rank}" for e in self.failed)
            self.notify(f"Not loaded: {names} (see the summary)", severity="warning", timeout=8)
        self.update_status()

    def title_text(self) -> Text:
        job = self.job
        # Two lines at most (wrapped at words): the clock offsets come last and are what
        # `c` is about; on one line they were cut off even at 120 columns.
        text = Text(no_wrap=False, overflow="ellipsis")
        text.append("kinetoscope ", "bold")
        text.append(clean(self.title_name))
        text.append(f" · {len(self.entries)} ranks")
        if job.world_size:
            text.append(f" of {job.world_size}")
        text.append(f" · {fmt_duration(self.span)}")
        if self.straggler is not None:
            entry = job.entry(self.straggler)
            wait = fmt_duration(entry.wait_ns) if entry is not None else "?"
            text.append(f" · straggler rank {self.straggler} (waited {wait})", "bold")
        files = job.files
        gaps = list(files.missing_ranges) if files is not None else [(r, r) for r in job.missing]
        count = files.missing_count if files is not None else len(job.missing)
        failed = [(e.rank, e.rank) for e in self.failed]
        if gaps or failed:  # ranges: a world size from a file may be anything
            shown = ranges_text(sorted(gaps + failed), count + len(failed), limit=8)
            text.append(f" · missing: {shown}", "bold")
        forms = self.clock_forms()
        width = self.size.width - 2
        for form in forms[:-1]:
            full = text.copy()
            full.append(form, "bold" if self.aligned else "")
            if width <= 0 or len(full.wrap(self.app.console, width)) <= 2:
                return full
        text.append(forms[-1], "bold" if self.aligned else "")  # the shortest, whatever fits
        return text

    def host_name(self) -> str:
        hosts = self.job.clock.hosts
        return fit_name(clean(hosts[0]), 40) if hosts else "?"

    def clock_forms(self) -> list[str]:
        """The title's word on the clocks, longest first (the title takes the longest that
        fits its two lines): one host's one clock, which needs no alignment, or the estimated
        clock offsets and whether each rank is drawn shifted back by its own."""
        one_host = self.job.clock.one_host
        known = [e for e in self.entries if e.offset_ns is not None]
        if not known:
            if one_host:
                return [
                    f" · one clock: every rank ran on host {self.host_name()}, no alignment needed",
                    f" · one clock (host {self.host_name()}): no alignment needed",
                    " · one clock: no alignment needed",
                ]
            return [" · no clock offsets (no synchronising collectives)"]
        worst = max(known, key=lambda e: abs(e.offset_ns or 0))
        spread = max(e.spread_ns or 0 for e in known)
        up_to = f"up to {fmt_duration(abs(worst.offset_ns or 0))} (rank {worst.rank})"
        if one_host and self.aligned:
            return [
                f" · one clock (host {self.host_name()}), shifted anyway by the ranks' arrival "
                f"differences (c): {up_to}",
                f" · one clock, shifted anyway (c): {up_to}",
                " · one clock, shifted anyway (c)",
            ]
        if one_host:
            return [
                f" · one clock: every rank ran on host {self.host_name()}, no alignment needed; "
                f"arrival differences {up_to}",
                f" · one clock (host {self.host_name()}): no alignment needed",
                " · one clock: no alignment needed",
            ]
        if self.aligned:
            return [
                f" · clock offsets applied (c): {up_to}, spread ≤ {fmt_duration(spread)}; "
                "each rank shifted back by its estimated offset",
                f" · clock offsets applied (c): {up_to}, spread ≤ {fmt_duration(spread)}",
                f" · clock offsets applied (c): {up_to}",
            ]
        return [
            f" · clock offsets not applied (c): {up_to}, spread ≤ {fmt_duration(spread)}; "
            "each rank's clock as recorded",
            f" · clock offsets not applied (c): {up_to}, spread ≤ {fmt_duration(spread)}",
            f" · clock offsets not applied (c): {up_to}",
        ]

    def timelines(self) -> list[RankTimeline]:
        return list(self.query(RankTimeline))

    def timeline_of(self, rank: int) -> RankTimeline | None:
        return next((t for t in self.timelines() if t.rank == rank), None)

    def current(self) -> RankTimeline | None:
        focused = self.focused
        if isinstance(focused, RankTimeline):
            return focused
        return None

    def update_status(self) -> None:
        status = self.query("#job-status")
        if not status:
            return
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.window is not None:
            start, per_cell, cursor = self.window
            text.append(fmt_duration(cursor), "bold")
            text.append(f" · {fmt_duration(per_cell, 2)}/cell")
        timeline = self.current()
        if timeline is not None:
            self.focused_rank = timeline.rank
            text.append(f" · rank {timeline.rank}")
            data = timeline.data
            if data is not None and timeline.selected_row >= 0:
                row = timeline.selected_row
                text.append(" · ")
                text.append(clean(data.trace.name_of(row))[:60], "bold")
                text.append(f" {fmt_duration(int(data.trace.dur[row]))}")
            elif timeline.data is None:
                text.append(f" · {timeline.note}")
        loading = self.loading
        if loading > 0:
            text.append(f" · {loading} loading", "dim")
        text.append(" · ? keys", "dim")
        status.first(Static).update(text)

    def _show_pending(self, timeline: RankTimeline) -> None:
        if self.pending_range is None:  # another rank showed it first: take its window
            if self.window is not None:
                timeline.follow(*self.window)
            else:
                timeline.action_fit_all()
            return
        lo, hi = self.pending_range
        self.pending_range = None
        margin = max((hi - lo) * WINDOW_MARGIN, MIN_NS_PER_CELL)
        timeline.cancel_fit()
        timeline.live = True
        timeline.set_view(lo - self.origin - margin, hi - self.origin + margin)
        timeline.cursor_time = int(lo - self.origin)

    # -- one window for every rank ----------------------------------------------------------

    def follow(self, source: LinkedTimeline) -> None:
        """A rank's window or cursor moved: every other rank takes it."""
        self.window = source.job_window()
        for timeline in self.timelines():
            if timeline is not source and timeline.data is not None:
                timeline.follow(*self.window)
        self.update_status()

    def on_timeline_event_selected(self, message: Timeline.EventSelected) -> None:
        self.update_status()

    def focus_neighbour(self, timeline: RankTimeline, direction: int) -> None:
        timelines = self.timelines()
        index = timelines.index(timeline) + direction
        if not (0 <= index < len(timelines)):
            return
        target = timelines[index]
        if target.data is not None:
            target.cursor_row = 0 if direction > 0 else len(target.rows) - 1
        target.focus()

    # -- keys -------------------------------------------------------------------------------

    def action_toggle_offsets(self) -> None:
        one_host = self.job.clock.one_host
        if not any(e.offset_ns is not None for e in self.entries):
            if one_host:
                self.notify(
                    f"One clock: every rank ran on host {self.host_name()}, so no alignment is "
                    "needed",
                    timeout=4,
                )
            else:
                self.notify(
                    "No clock offsets: the ranks share no synchronising collective", timeout=4
                )
            return
        if one_host and not self.aligned and not self._shift_armed:
            # One host, one clock: the offsets are arrival differences. A second `c` shifts.
            self._shift_armed = True
            self.notify(
                f"One clock: every rank ran on host {self.host_name()}, so no alignment is "
                "needed (the offsets are arrival differences). Press c again to shift by "
                "them anyway.",
                timeout=6,
            )
            return
        self._shift_armed = False
        self.aligned = not self.aligned
        for rank, view in self.views.items():
            entry = self.job.entry(rank)
            if entry is not None:
                view.rebase(self.origin + self.shift(entry), self.span)
        for timeline in self.timelines():
            timeline.rebase()
            if self.window is not None and timeline.data is not None:
                timeline.follow(*self.window)
        self.query_one("#job-title", Static).update(self.title_text())
        if one_host:
            said = (
                "One clock, shifted anyway: each rank drawn back by its arrival difference"
                if self.aligned
                else "One clock: every rank drawn as recorded, no alignment needed"
            )
        elif self.aligned:
            said = "Clock offsets applied: each rank drawn shifted back by its estimated offset"
        else:
            said = "Clock offsets not applied: each rank drawn on its own clock, as recorded"
        self.notify(said, timeout=3)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:  # above the app's default screen, another
            self.app.pop_screen()

    def show_collective(self, index: int) -> None:
        """Show matched collective `index` across every rank (the cursor at its first start)."""
        self.pending_range = collective_window(self.job, index)
        timeline = next((t for t in self.timelines() if t.data is not None), None)
        if timeline is not None:
            self._show_pending(timeline)

    def recolour(self) -> None:
        for timeline in self.timelines():
            timeline.recolour()
        self.query_one("#job-title", Static).update(self.title_text())
        self.update_status()

    def on_resize(self, event: events.Resize) -> None:
        self.query_one("#job-title", Static).update(self.title_text())  # fitted to the width


def collective_window(job: JobAnalysis, index: int) -> tuple[int, int]:
    """(start, end) ns of matched collective `index`, from its first start to its last end
    across the ranks taking part, as recorded."""
    matched = job.matched
    present = matched.present[index]
    return int(matched.start[index][present].min()), int(matched.end[index][present].max())


def open_job_timeline(
    app: Any,
    job: JobAnalysis,
    *,
    window: tuple[int, int] | None = None,
    ranks: list[int] | None = None,
    aligned: bool = False,
    name: str = "job",
    select: tuple[int, int] | None = None,
    views: RankViews | None = None,
) -> JobTimelineScreen:
    """Push the job's timeline on `app`: `window` (start, end ns as recorded) or the whole job,
    `ranks` first in focus, `select` (rank, row) selected, the ranks from `views` (the job
    viewer's; None: the screen's own). Returns the screen."""
    screen = JobTimelineScreen(
        job, window=window, ranks=ranks, aligned=aligned, name=name, select=select, views=views
    )
    app.push_screen(screen)
    return screen
