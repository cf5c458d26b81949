"""The kinetoscope Textual app: opens at once, loads the trace in a thread, then shows it."""

from __future__ import annotations

from kinetoscope.tui.appbase import ViewerApp
from kinetoscope.tui.data.loader import (
    BackgroundFailure,
    Cancelled,
    Complete,
    Failed,
    Progress,
    Ready,
    Reloading,
    TraceLoad,
)
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.palette import HelpSection
from kinetoscope.tui.trace.drilldown import viewer_help_sections
from kinetoscope.tui.trace.load_report import LoadReported, reports_to
from kinetoscope.tui.trace.screens import ErrorScreen, LoadingScreen, TraceScreen
from kinetoscope.tui.widgets.timeline import Timeline


class KinetoscopeApp(ViewerApp):
    """`KinetoscopeApp(path)` views one trace file. `exit_message` holds the reason it failed.

    `staged=True` shows each lane's top level first and the rest once it is placed, as the
    `kinetoscope` command does; the default shows the whole view at once, which is what a test
    that steps through the keys wants. A caller may pass the `loader` it started itself
    (before importing Textual), with its own staging."""

    TITLE = "kinetoscope"

    def __init__(
        self,
        path: str,
        *,
        staged: bool = False,
        gap_threshold_ns: int | None = None,
        loader: TraceLoad | None = None,
        open_findings: bool = False,
    ) -> None:
        super().__init__()
        # Started before the app takes over the standard streams (decoding workers need them),
        # and as early as possible: a caller may pass one it started before importing Textual.
        self.loader = loader if loader is not None else TraceLoad(path, staged=staged)
        self.path = path
        self.gap_threshold_ns = gap_threshold_ns
        # Open on the findings (t) once the trace is shown: `capture` and `demo` do, since
        # their user has just run the program to learn what to fix (docs/tui.md).
        self.open_findings = open_findings
        self.exit_message: str | None = None
        self.data: ViewData | None = None
        self.first_frame_time: float | None = None  # wall clock, when the first frame was drawn
        self._loading: LoadingScreen | None = None

    def help_sections(self) -> list[HelpSection]:
        return viewer_help_sections()

    def on_mount(self) -> None:
        # The theme is textual-dark unless TEXTUAL_THEME names another; ctrl+p changes it.
        self.follow_theme()
        self._loading = LoadingScreen(self.path)
        self.push_screen(self._loading)
        self.loader.subscribe(reports_to(self, self.loader))

    def on_load_reported(self, message: LoadReported) -> None:
        """The loader's reports (load_report.py): progress goes to the loading screen; the
        view is shown once ready, redrawn once complete; a failure is said."""
        report = message.report
        if message.source is not self.loader:
            return
        if isinstance(report, Progress):
            if self._loading is not None:
                self._loading.post_message(LoadingScreen.Progress(report))
        elif isinstance(report, Ready):
            self._show(report.data)
        elif isinstance(report, Complete):
            # Every slice is placed now (the first frame may have shown the top levels only).
            for screen in self.screen_stack:
                if isinstance(screen, TraceScreen) and screen.data is report.data:
                    screen.levels_complete()
        elif isinstance(report, Failed):
            self.exit_message = report.message
            self.switch_screen(ErrorScreen(report.message))
        elif isinstance(report, Cancelled):
            self.exit_message = "loading cancelled"
            self.exit(return_code=1)
        elif isinstance(report, BackgroundFailure):
            self.notify(report.message, severity="error", markup=False, timeout=15)
        elif isinstance(report, Reloading):
            self._reloading(report.message)

    def _show(self, data: ViewData) -> None:
        self.data = data
        screen = TraceScreen(data)
        self.switch_screen(screen)
        if self.gap_threshold_ns is not None:
            self.call_after_refresh(self._apply_threshold)
        if self.open_findings:
            self.open_findings = False  # once: a reload after a rejected cache stays put
            self.call_after_refresh(screen.action_findings)

    def _reloading(self, reason: str) -> None:
        """The cached model failed its check after it was shown: no screen keeps the rejected
        view; back to the loading screen until the new one."""
        self.notify(reason, severity="warning", markup=False, timeout=15)
        self.data = None
        while len(self.screen_stack) > 2:
            self.pop_screen()
        self._loading = LoadingScreen(self.path)
        self.switch_screen(self._loading)

    def on_loading_screen_cancel_requested(self, message: LoadingScreen.CancelRequested) -> None:
        self.loader.cancel()

    def on_timeline_first_frame(self, message: Timeline.FirstFrame) -> None:
        """The timeline drew its first full frame: the loader's later work may start."""
        if self.first_frame_time is None:
            self.first_frame_time = message.when
        self.loader.first_frame_shown()

    def _apply_threshold(self) -> None:
        if self.gap_threshold_ns is not None:
            self.screen.query_one(Timeline).gap_threshold = self.gap_threshold_ns

    def on_unmount(self) -> None:
        self.loader.unsubscribe()
        self.loader.cancel()

    def action_quit_error(self) -> None:
        self.exit(return_code=1)
