"""The job viewer: `kinetoscope DIR` or `kinetoscope view r0.json r1.json ...` (a distributed
job's rank files).

`JobApp(inputs)` finds the job's files, digests every rank in worker processes (job_loader.py)
while a loading screen shows each rank's progress, then shows the ranks overview
(job_ranks.py). A rank's full model is loaded only when the user opens that rank: the app
then loads it (loader.py:TraceLoad) and shows the single-trace viewer's screen for it
(`RankTraceScreen`, the `TraceScreen` with q and Esc going back to the overview), zoomed to
the step or collective asked for. The single-trace app (app.py) is not involved.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from kinetoscope.tui.appbase import ViewerApp
from kinetoscope.tui.data.loader import BackgroundFailure, Complete, Failed, Ready, TraceLoad
from kinetoscope.tui.data.loader import Cancelled as LoadCancelledReport
from kinetoscope.tui.data.loader import Progress as LoadProgress
from kinetoscope.tui.data.places import Jump
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.job.job_loader import JobDone, JobFailed, JobLoad, JobReport, RankDone
from kinetoscope.tui.palette import HelpSection, help_sections
from kinetoscope.tui.trace.drilldown import viewer_help_sections
from kinetoscope.tui.trace.screens import ErrorScreen, LoadingScreen, TraceScreen
from kinetoscope.tui.widgets.theme import palette_of
from kinetoscope.tui.widgets.timeline import Timeline
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import ProgressBar, Static

from kinetoscope.present.safe_text import clean

RANK_VIEWS_KEPT = 2  # ranks' views kept after they are closed, for a quick reopen


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
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen, RankPairScreen

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


# -- messages from the loaders' threads ----------------------------------------------------------


class JobReportMessage(Message):
    def __init__(self, report: JobReport) -> None:
        super().__init__()
        self.report = report


class RankLoadMessage(Message):
    def __init__(self, load: TraceLoad, report: Any) -> None:
        super().__init__()
        self.load = load
        self.report = report


@dataclass
class _Opening:
    """A rank being loaded for its own view, and where to put its timeline then."""

    rank: int
    load: TraceLoad
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
        self._views: dict[int, ViewData] = {}  # ranks' views, most recently opened last

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
        self.load.subscribe(lambda report: self.post_message(JobReportMessage(report)))

    def _fail(self, message: str) -> None:
        self.exit_message = message
        if self._loading is not None and self.screen is self._loading:
            self.switch_screen(ErrorScreen(message))
        else:
            self.push_screen(ErrorScreen(message))

    def on_job_report_message(self, message: JobReportMessage) -> None:
        report = message.report
        if isinstance(report, RankDone):
            if self._loading is not None and self._loading.is_mounted:
                self._loading.rank_done()
        elif isinstance(report, JobDone):
            from kinetoscope.tui.job.job_ranks import RanksScreen

            self.job = report.job
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
        data = self._views.get(rank)
        if data is not None:
            self._show_rank(rank, data, jump, pending)
            return
        if self._opening is not None:
            self._opening.load.unsubscribe()
            self._opening.load.cancel()
        load = TraceLoad(entry.path, staged=self.staged)
        screen = RankLoadingScreen(entry.path)
        self._opening = _Opening(rank, load, jump, screen)
        self._pending = pending
        self.push_screen(screen)
        load.subscribe(lambda report: self.post_message(RankLoadMessage(load, report)))

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
        )

    def on_rank_load_message(self, message: RankLoadMessage) -> None:
        opening = self._opening
        report = message.report
        if opening is None or message.load is not opening.load:
            if isinstance(report, Complete):
                self._levels_complete(report.data)
            return
        if isinstance(report, LoadProgress):
            opening.screen.post_message(LoadingScreen.Progress(report))
        elif isinstance(report, Ready):
            self._views[opening.rank] = report.data
            while len(self._views) > RANK_VIEWS_KEPT:
                del self._views[next(iter(self._views))]
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
        if opening is not None:
            opening.load.cancel()

    def _show_rank(self, rank: int, data: ViewData, jump: Jump | None, pending: _Pending) -> None:
        if jump is not None and jump.row < 0 and pending.step is not None and pending.window:
            row = _step_row(data, pending.step, pending.window[0])
            jump = Jump(row=row, start=jump.start, end=jump.end)
        # Reopened: most recently used last.
        self._views.pop(rank, None)
        self._views[rank] = data
        self.push_screen(RankTraceScreen(data, rank, jump))

    def on_timeline_first_frame(self, message: Timeline.FirstFrame) -> None:
        opening = self._opening
        if opening is not None:
            opening.load.first_frame_shown()

    def close_rank(self, screen: RankTraceScreen) -> None:
        """Back from a rank's own view to the screen below it (the overview)."""
        while len(self.screen_stack) > 1 and self.screen is not screen:
            self.pop_screen()
        if len(self.screen_stack) > 1:
            self.pop_screen()

    def on_unmount(self) -> None:
        self.load.cancel()  # quitting does not wait for the ranks still being digested
        if self._opening is not None:
            self._opening.load.unsubscribe()
            self._opening.load.cancel()


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
