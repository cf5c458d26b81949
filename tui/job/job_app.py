"""The job viewer: `kinetoscope DIR` or `kinetoscope view r0.json r1.json ...` (a distributed
job's rank files).

`JobApp(inputs)` finds the job's files, digests every rank in worker processes
(tui/data/job_loader.py) while a loading screen shows each rank's progress, then shows the
ranks overview (job_ranks.py). A rank's full model is loaded only when the user opens that
rank: the app asks the job's `RankViews` (tui/data/rank_views.py, which the job's timeline
asks too: a rank either loaded opens without a second load) and shows the single-trace
viewer's screen for it (`RankTraceScreen`, the `TraceScreen` with q and Esc going back to the
overview), zoomed to the step or collective asked for. Every loader's report comes as one
message (tui/trace/load_report.py). The single-trace app (app.py) is not involved.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from kinetoscope.tui.appbase import ViewerApp
from kinetoscope.tui.data.job_loader import JobDone, JobFailed, JobLoad, JobReport, RankDone
from kinetoscope.tui.data.loader import BackgroundFailure, Complete, Failed, Ready
from kinetoscope.tui.data.loader import Cancelled as LoadCancelledReport
from kinetoscope.tui.data.loader import Progress as LoadProgress
from kinetoscope.tui.data.places import Jump
from kinetoscope.tui.data.rank_views import RankViews
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.palette import HelpSection, help_sections
from kinetoscope.tui.trace.drilldown import viewer_help_sections
from kinetoscope.tui.trace.load_report import LoadReported, reports_to
from kinetoscope.tui.trace.screens import ErrorScreen, LoadingScreen, TraceScreen
from kinetoscope.tui.widgets.theme import palette_of
from kinetoscope.tui.widgets.timeline import Timeline
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import ProgressBar, Static

from kinetoscope.present.safe_text import clean


class JobLoadingScreen(Screen):
    """Each rank's file and how far its digest is; Esc quits."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.cancel_job", "Cancel")]

    def __init__(self, load: JobLoad) -> None:
        super().__init__()
        self.load = load

    def compose(self) -> ComposeResult:
        total = len(self.load.paths)
        with Vertical(id="loading-box"):
            yield Static(
                Text(f"Loading a job of {total} rank files: each rank digested in a worker"),
                id="loading-title",
            )
            yield ProgressBar(total=max(total, 1), show_eta=False, id="loading-bar")
            with VerticalScroll(id="job-loading-ranks"):
                yield Static(self.ranks_text(), id="job-loading-list")
            yield Static(Text("Esc cancels", style="dim"), id="loading-hint")

    def ranks_text(self) -> Text:
        palette = palette_of(self)
        text = Text(no_wrap=True, overflow="ellipsis")
        files = self.load.files.files if self.load.files is not None else []
        for index, file in enumerate(files):
            if index:
                text.append("\n")
            text.append(f"rank {file.rank:>4}  ", "bold")
            digest = self.load.digests[index] if index < len(self.load.digests) else None
            if digest is None:
                text.append(f"{'waiting…':<30}", "dim")
            elif digest.error is not None:
                text.append(f"{'not loaded':<30}", palette.style("error", bold=True))
            elif not digest.complete:
                status = f"incomplete: {digest.events:,} events read"
                text.append(f"{status:<30}", palette.style("warning"))
            else:
                text.append(f"{f'{digest.events:,} events · {digest.seconds:.1f} s':<30}")
            text.append("  " + clean(os.path.basename(file.path)))
            if digest is not None and digest.error is not None:
                text.append(f" ({clean(digest.error)})", palette.style("error"))
        return text

    def rank_done(self) -> None:
        self.query_one(ProgressBar).update(progress=self.load.done)
        self.query_one("#job-loading-list", Static).update(self.ranks_text())


def job_help_sections() -> list[HelpSection]:
    """(title, screen class, bindings) of the job viewer's own screens (a folder or several
    rank files), listed before the single-trace viewer's (a rank opened on its own)."""
    from kinetoscope.tui.job.job_collectives import CollectivesScreen
    from kinetoscope.tui.job.job_ranks import RanksScreen
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen
    from kinetoscope.tui.job.rank_pair import RankPairScreen

    return help_sections(
        [RanksScreen, CollectivesScreen, JobTimelineScreen, RankPairScreen, RankTraceScreen]
    )


class RankLoadingScreen(LoadingScreen):
    """Loading one rank's full trace; Esc goes back to the overview."""


class RankTraceScreen(TraceScreen):
    """One rank of the job in the single-trace viewer; q (and Esc with nothing selected) goes
    back to the ranks overview."""

    SHOWS_TOP_FINDING = False  # the ranks overview and the job's findings come first
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "back", "Back to the ranks", tooltip="Back to the ranks overview"),
        Binding(
            "escape",
            "clear_or_back",
            "Clear / back",
            show=False,
            tooltip="Clear the selection, else go back to the ranks overview",
        ),
    ]
    HELP_TITLE = "A rank's timeline (Enter, s)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [*RankTraceScreen.BINDINGS, *Timeline.BINDINGS, *TraceScreen.BINDINGS]

    def __init__(self, data: ViewData, rank: int, jump: Jump | None) -> None:
        super().__init__(data)
        self.rank = rank
        self.pending_jump = jump
        self.title_prefix = f"rank {rank}"

    def on_timeline_first_frame(self, message: Timeline.FirstFrame) -> None:
        """The timeline fitted the whole trace: now show what was asked for."""
        self.apply_jump()

    def apply_jump(self) -> None:
        jump, self.pending_jump = self.pending_jump, None
        if jump is not None:
            self.show_on_timeline(jump)

    def action_back(self) -> None:
        self.app.close_rank(self)

    def action_clear_or_back(self) -> None:
        timeline = self.timeline
        if timeline.selected_row >= 0 or timeline.current_gap >= 0:
            self.action_clear()
            return
        self.action_back()


@dataclass
class _Opening:
    """A rank being loaded for its own view, and where to put its timeline then."""

    rank: int
    jump: Jump | None
    screen: RankLoadingScreen


class JobApp(ViewerApp):
    """`JobApp(inputs)` views a distributed job (see the module docstring). `exit_message`
    holds the reason it failed. `workers`: digesting processes (None: min(ranks, CPUs)).
    `staged` as KinetoscopeApp's, for the ranks' own views."""

    TITLE = "kinetoscope"
    DEFAULT_CSS = """
    #job-loading-ranks { height: auto; max-height: 20; }
    #job-loading-list { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(
        self,
        inputs: list[str],
        *,
        cycle: int | None = None,
        workers: int | None = None,
        staged: bool = False,
        load: JobLoad | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__()
        self.inputs = list(inputs)
        self.title_text = title  # what the header calls the job (default: its inputs)
        # Started before the app takes over the standard streams (the worker processes' server
        # is started with them).
        self.load = load if load is not None else JobLoad(self.inputs, cycle=cycle, workers=workers)
        self.staged = staged
        self.exit_message: str | None = None
        self.job = None
        self._loading: JobLoadingScreen | None = None
        self._opening: _Opening | None = None
        self._pending = _Pending(step=None, window=None)
        # The ranks' views (once the job is merged): loaded, kept and forgotten there, for
        # this app and the job's timeline both (tui/data/rank_views.py).
        self.ranks: RankViews | None = None

    # -- theme, help --------------------------------------------------------------------------

    def help_sections(self) -> list[HelpSection]:
        """The job's screens, before the single-trace viewer's (a rank opened on its own)."""
        return [*job_help_sections(), *viewer_help_sections()]

    def action_quit_error(self) -> None:
        self.exit(return_code=1)

    def action_cancel_job(self) -> None:
        self.exit_message = "loading cancelled"
        self.exit(return_code=1)

    # -- the job ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.follow_theme()
        if self.load.error is not None and self.load.files is None:
            self._fail(self.load.error)
            return
        self._loading = JobLoadingScreen(self.load)
        self.push_screen(self._loading)
        self.load.subscribe(reports_to(self, self.load))

    def _fail(self, message: str) -> None:
        self.exit_message = message
        if self._loading is not None and self.screen is self._loading:
            self.switch_screen(ErrorScreen(message))
        else:
            self.push_screen(ErrorScreen(message))

    def on_load_reported(self, message: LoadReported) -> None:
        """The job's load reports (its ranks digested, then the job), and a rank's opened alone
        (load_report.py)."""
        if message.source is self.load:
            self._job_report(message.report)
        elif message.source is self.ranks and isinstance(message.key, int):
            self._rank_report(message.key, message.report)

    def _job_report(self, report: JobReport) -> None:
        if isinstance(report, RankDone):
            if self._loading is not None and self._loading.is_mounted:
                self._loading.rank_done()
        elif isinstance(report, JobDone):
            from kinetoscope.tui.job.job_ranks import RanksScreen

            self.job = report.job
            self.ranks = RankViews({e.rank: e.path for e in report.job.ranks if e.loaded})
            title = self.title_text or (
                self.inputs[0] if len(self.inputs) == 1 else f"{len(self.inputs)} files"
            )
            screen = RanksScreen(report.job, title=title)
            if self._loading is not None and self.screen is self._loading:
                self.switch_screen(screen)
            else:
                self.push_screen(screen)
            self._loading = None
        elif isinstance(report, JobFailed):
            self._fail(report.message)

    def align_clocks(self, aligned: bool, force: bool = False) -> None:
        """Merge the ranks again with (or without) the clock offsets subtracted (`force`: even
        when the ranks share one clock)."""
        from kinetoscope.tui.job.job_ranks import RanksScreen

        try:
            job = self.load.reanalyze(aligned, force=force)
        except Exception as exc:  # the shown job stays
            self.notify(f"could not merge the ranks again: {exc}", severity="error", markup=False)
            return
        self.job = job
        for screen in self.screen_stack:
            if isinstance(screen, RanksScreen):
                screen.set_job(job)
        if job.align_forced:
            said = "clocks aligned anyway: the estimated offsets (arrival differences on one host) subtracted"
        elif aligned:
            said = "clocks aligned: estimated offsets subtracted"
        elif job.clock.one_host:
            said = "one clock, as recorded"
        else:
            said = "clocks as recorded (a to align them)"
        self.notify(said, timeout=3)

    # -- a rank on its own --------------------------------------------------------------------

    def open_rank(
        self,
        rank: int,
        window: tuple[int, int] | None = None,
        step: str | None = None,
        row: int = -1,
    ) -> None:
        """Open `rank`'s own timeline (its full model loaded now, or kept from a previous
        open), showing `window` (absolute ns, the rank's clock) and selecting `row` (or the
        step named `step`)."""
        if self.job is None:
            return
        entry = self.job.entry(rank)
        if entry is None or not entry.loaded:
            self.notify(f"rank {rank} has no trace to open", severity="warning")
            return
        jump = None
        if window is not None:
            jump = Jump(row=row, start=window[0], end=window[1])
        elif row >= 0:
            jump = Jump(row=row)
        pending = _Pending(step=step, window=window)
        assert self.ranks is not None
        data = self.ranks.view(rank)
        if data is not None:
            self._show_rank(rank, data, jump, pending)
            return
        if self._opening is not None:
            self.ranks.cancel(self._opening.rank, self)
        screen = RankLoadingScreen(entry.path)
        self._opening = _Opening(rank, jump, screen)
        self._pending = pending
        self.push_screen(screen)
        self.ranks.open(rank, self, reports_to(self, self.ranks, rank), staged=self.staged)

    def open_collective(self, rank: int, window: tuple[int, int], row: int, index: int) -> None:
        """Collective `index` (of the job's matched ones) on the job's timeline, across every
        rank taking part, `rank` in focus with its event (`row`) selected."""
        from kinetoscope.tui.job.job_timeline import collective_window

        if self.job is None:
            return
        select = (rank, row) if row >= 0 else None
        self.open_timeline([rank], collective_window(self.job, index), select=select)

    def open_timeline(
        self,
        ranks: list[int],
        window: tuple[int, int] | None,
        select: tuple[int, int] | None = None,
    ) -> None:
        """The job's timeline (every rank on one time axis, job_timeline.py) over `window`
        (absolute ns, as recorded; None: the whole job), the first of `ranks` in focus and
        `select` (rank, row) selected."""
        from kinetoscope.tui.job.job_timeline import open_job_timeline

        if self.job is None:
            return
        name = os.path.basename(self.inputs[0].rstrip("/")) if len(self.inputs) == 1 else ""
        open_job_timeline(
            self,
            self.job,
            window=window,
            ranks=ranks,
            aligned=self.job.aligned,
            name=name or f"{len(self.inputs)} files",
            select=select,
            views=self.ranks,
        )

    def _rank_report(self, rank: int, report: Any) -> None:
        """A report of a rank this app asked for (opened, or nested): the one being opened
        shows its progress, then its view; any rank's view redraws once complete."""
        opening = self._opening
        if opening is None or rank != opening.rank:
            if isinstance(report, Complete):
                self._levels_complete(report.data)
            elif isinstance(report, BackgroundFailure):
                self.notify(report.message, severity="error", markup=False, timeout=10)
            return
        if isinstance(report, LoadProgress):
            opening.screen.post_message(LoadingScreen.Progress(report))
        elif isinstance(report, Ready):
            if self.screen is opening.screen:
                self.pop_screen()
            self._show_rank(opening.rank, report.data, opening.jump, self._pending)
        elif isinstance(report, Complete):
            self._levels_complete(report.data)
            self._opening = None
        elif isinstance(report, Failed):
            self._opening = None
            if self.screen is opening.screen:
                self.pop_screen()
            self.notify(
                f"rank {opening.rank} could not be opened: {clean(report.message)}",
                severity="error",
                markup=False,
                timeout=10,
            )
        elif isinstance(report, LoadCancelledReport):
            self._opening = None
            if self.screen is opening.screen:
                self.pop_screen()
        elif isinstance(report, BackgroundFailure):
            self.notify(report.message, severity="error", markup=False, timeout=10)

    def _levels_complete(self, data: ViewData) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, TraceScreen) and screen.data is data:
                screen.levels_complete()

    def on_loading_screen_cancel_requested(self, message: LoadingScreen.CancelRequested) -> None:
        opening = self._opening
        if opening is not None and self.ranks is not None:
            self.ranks.cancel(opening.rank, self)

    def _show_rank(self, rank: int, data: ViewData, jump: Jump | None, pending: _Pending) -> None:
        if jump is not None and jump.row < 0 and pending.step is not None and pending.window:
            row = _step_row(data, pending.step, pending.window[0])
            jump = Jump(row=row, start=jump.start, end=jump.end)
        self.push_screen(RankTraceScreen(data, rank, jump))
        if not data.complete and self.ranks is not None:  # loaded by the job's timeline
            self.ranks.nest(rank, data, self, reports_to(self, self.ranks, rank))

    def on_timeline_first_frame(self, message: Timeline.FirstFrame) -> None:
        opening = self._opening
        if opening is not None and self.ranks is not None:
            self.ranks.first_frame_shown(opening.rank)

    def close_rank(self, screen: RankTraceScreen) -> None:
        """Back from a rank's own view to the screen below it (the overview)."""
        while len(self.screen_stack) > 1 and self.screen is not screen:
            self.pop_screen()
        if len(self.screen_stack) > 1:
            self.pop_screen()

    def on_unmount(self) -> None:
        self.load.cancel()  # quitting does not wait for the ranks still being digested
        if self.ranks is not None:
            self.ranks.close()


@dataclass(frozen=True)
class _Pending:
    step: str | None
    window: tuple[int, int] | None


def _step_row(data: ViewData, step: str, start: int) -> int:
    """The row of the step's event (its name, starting at `start`) in the rank's trace, or -1."""
    import numpy as np

    trace = data.trace
    rows = np.flatnonzero(np.asarray(trace.start) == start)
    for row in rows.tolist():
        if trace.name_of(int(row)) == step:
            return int(row)
    return -1
