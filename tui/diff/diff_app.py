"""The diff viewer: `kinetoscope diff BASE NEW` on a terminal.

`DiffApp(base, new)` loads both traces at once (two `TraceLoad`s, loader.py, each in its own
thread), showing both loads' progress; once both views are ready it computes the diff
(analysis/diff.py) from the two traces' sessions in a worker thread and shows the diff table
(diff_table.py: the verdict and the step comparison above the operators' or kernels' table).
Enter on a row opens both timelines stacked (diff_timeline.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from kinetoscope.tui.appbase import ViewerApp
from kinetoscope.tui.data.failures import ReportsWorkerFailures, failure_message
from kinetoscope.tui.data.loader import (
    BackgroundFailure,
    Complete,
    Failed,
    Progress,
    Ready,
    TraceLoad,
)
from kinetoscope.tui.data.loader import Cancelled as LoadCancelledReport
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.palette import HelpSection, help_sections
from kinetoscope.tui.trace.drilldown import viewer_help_sections
from kinetoscope.tui.trace.load_report import LoadReported, reports_to
from kinetoscope.tui.trace.screens import ErrorScreen, TraceScreen
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import ProgressBar, Static

from kinetoscope.present.safe_text import clean

if TYPE_CHECKING:
    from kinetoscope.analysis.diff import DiffOptions

SIDES = ("base", "new")


def diff_help_sections() -> list[HelpSection]:
    """(title, screen class, bindings) of the diff viewer's own screens (`kinetoscope diff`),
    listed before the single-trace viewer's (a trace opened alone)."""
    from kinetoscope.tui.diff.diff_table import DiffScreen
    from kinetoscope.tui.diff.diff_timeline import DiffPairScreen, HalfTraceScreen

    return help_sections([DiffScreen, DiffPairScreen, HalfTraceScreen])


class DiffLoadingScreen(ReportsWorkerFailures, Screen):
    """Both loads' progress, then "comparing…" while the diff is computed; Esc quits."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.cancel_diff", "Cancel")]
    FAILURE_SUBJECT = "the diff"

    def __init__(self, paths: tuple[str, str]) -> None:
        super().__init__()
        self.paths = paths

    def compose(self) -> ComposeResult:
        with Vertical(id="loading-box"):
            yield Static(Text("Comparing two traces: both loaded at once"), id="loading-title")
            for side, path in zip(SIDES, self.paths):
                yield Static(Text(f"{side}: {clean(path)}", no_wrap=True), id=f"diff-path-{side}")
                yield ProgressBar(total=100, show_eta=False, id=f"diff-bar-{side}")
            yield Static("", id="loading-stats")
            yield Static(Text("Esc cancels", style="dim"), id="loading-hint")

    def on_mount(self) -> None:
        # Reports that came before the screen was composed.
        for side, view in enumerate(getattr(self.app, "views", [])):
            if view is not None:
                self.loaded(side)

    def _bar(self, side: int) -> ProgressBar | None:
        bars = self.query(f"#diff-bar-{SIDES[side]}")
        return bars.first(ProgressBar) if bars else None

    def progress(self, side: int, report: Progress) -> None:
        bar = self._bar(side)
        if bar is not None:
            bar.update(total=max(report.total, 1), progress=report.done)

    def loaded(self, side: int) -> None:
        bar = self._bar(side)
        if bar is not None:
            bar.update(total=1, progress=1)

    def comparing(self) -> None:
        stats = self.query("#loading-stats")
        if stats:
            stats.first(Static).update(Text("comparing the two traces…"))

    def show_failure(self, message: str) -> None:
        self.app.fail(message)  # type: ignore[attr-defined]


class DiffApp(ViewerApp):
    """`DiffApp(base, new)` compares two trace files (see the module docstring);
    `exit_message` holds the reason it failed. `options`: the diff's (analysis/diff.py's
    DiffOptions: threshold, steps, template folding); `loads`: the two loads, when the caller
    started them (before importing Textual)."""

    TITLE = "kinetoscope diff"

    def __init__(
        self,
        base: str,
        new: str,
        *,
        loads: tuple[TraceLoad, TraceLoad] | None = None,
        options: DiffOptions | None = None,
    ) -> None:
        super().__init__()
        self.paths = (base, new)
        # Started before the app takes over the standard streams, both at once.
        self.loads = loads or (TraceLoad(base, staged=False), TraceLoad(new, staged=False))
        self.options = options
        self.views: list[ViewData | None] = [None, None]
        self.diff: Any = None
        self.exit_message: str | None = None
        self._loading: DiffLoadingScreen | None = None

    # -- theme, help --------------------------------------------------------------------------

    def help_sections(self) -> list[HelpSection]:
        """The diff's screens, before the single-trace viewer's (a trace opened alone)."""
        return [*diff_help_sections(), *viewer_help_sections()]

    def action_quit_error(self) -> None:
        self.exit(return_code=1)

    def action_cancel_diff(self) -> None:
        for load in self.loads:
            load.cancel()
        self.exit_message = "loading cancelled"
        self.exit(return_code=1)

    # -- loading ------------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.follow_theme()
        self._loading = DiffLoadingScreen(self.paths)
        self.push_screen(self._loading)
        for side, load in enumerate(self.loads):
            load.subscribe(reports_to(self, load, side))

    def on_load_reported(self, message: LoadReported) -> None:
        report, side = message.report, message.key
        if side not in (0, 1) or message.source is not self.loads[side]:
            return
        loading = self._loading
        if isinstance(report, Progress):
            if loading is not None and loading.is_mounted:
                loading.progress(side, report)
        elif isinstance(report, Ready):
            self.views[side] = report.data
            if loading is not None and loading.is_mounted:
                loading.loaded(side)
            if all(v is not None for v in self.views) and self.diff is None:
                self._compare()
        elif isinstance(report, Complete):
            for screen in self.screen_stack:
                if isinstance(screen, TraceScreen) and screen.data is report.data:
                    screen.levels_complete()
        elif isinstance(report, Failed):
            self.fail(f"{SIDES[side]}: {report.message}")
        elif isinstance(report, LoadCancelledReport):
            if self.exit_message is None:
                self.exit_message = "loading cancelled"
                self.exit(return_code=1)
        elif isinstance(report, BackgroundFailure):
            self.notify(report.message, severity="error", markup=False, timeout=10)

    def fail(self, message: str) -> None:
        if self.exit_message is not None:
            return  # the first failure is the one said
        self.exit_message = message
        for load in self.loads:
            load.cancel()
        if self._loading is not None and self.screen is self._loading:
            self.switch_screen(ErrorScreen(message))
        else:
            self.push_screen(ErrorScreen(message))

    def _compare(self) -> None:
        loading = self._loading
        if loading is not None and loading.is_mounted:
            loading.comparing()
        base, new = self.views
        assert base is not None and new is not None

        def work() -> None:
            from kinetoscope.analysis.diff import diff_sessions

            try:
                diff = diff_sessions(base.session, new.session, self.options)
                if diff.pairs:
                    diff.alignment(0)  # what the timelines mark: made here, not on Enter
            except Exception as error:  # said on the error screen, the app stays
                message = failure_message("the diff", error)
                self.call_from_thread(self.fail, message)
                return
            self.call_from_thread(self._show, diff)

        self.run_worker(work, thread=True, name="diff", exit_on_error=False)

    def _show(self, diff: Any) -> None:
        from kinetoscope.tui.diff.diff_table import DiffScreen

        base, new = self.views
        assert base is not None and new is not None
        self.diff = diff
        screen = DiffScreen(diff, base, new, names=tuple(os.path.basename(p) for p in self.paths))
        if self._loading is not None and self.screen is self._loading:
            self.switch_screen(screen)
        else:
            self.push_screen(screen)
        self._loading = None

    def on_unmount(self) -> None:
        for load in self.loads:
            load.unsubscribe()
            load.cancel()
