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
    Report,
    TraceLoad,
)
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.palette import HelpSection
from kinetoscope.tui.trace.drilldown import viewer_help_sections
from kinetoscope.tui.trace.screens import ErrorScreen, LoadingScreen, TraceScreen
from kinetoscope.tui.widgets.timeline import Timeline
from textual.message import Message


class TraceReady(Message):
    """The loader's view can be shown (its deeper levels may follow: `ViewComplete`)."""

    def __init__(self, data: ViewData) -> None:
        super().__init__()
        self.data = data


class ViewComplete(Message):
    """Every slice of `data` is placed now."""

    def __init__(self, data: ViewData) -> None:
        super().__init__()
        self.data = data


class LoadFailed(Message):
    """The trace cannot be shown; `reason` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class LoadCancelled(Message):
    """The load stopped, as the user asked."""


class BackgroundFailed(Message):
    """Work after the view was shown failed (`reason`, one line); the view stays."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class CacheRejected(Message):
    """The cached model failed its check after it was shown: drop its view and show the
    loading screen while the trace is read again (`reason`, one line)."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


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
        self.loader.subscribe(self._from_loader)

    def _from_loader(self, report: Report) -> None:
        """The loader's sink (called from its thread, or from this one replaying): each report
        becomes a message; progress goes to the loading screen, the rest to the app."""
        if isinstance(report, Progress):
            if self._loading is not None:
                self._loading.post_message(LoadingScreen.Progress(report))
        elif isinstance(report, Ready):
            self.post_message(TraceReady(report.data))
        elif isinstance(report, Complete):
            self.post_message(ViewComplete(report.data))
        elif isinstance(report, Failed):
            self.post_message(LoadFailed(report.message))
        elif isinstance(report, Cancelled):
            self.post_message(LoadCancelled())
        elif isinstance(report, BackgroundFailure):
            self.post_message(BackgroundFailed(report.message))
        elif isinstance(report, Reloading):
            self.post_message(CacheRejected(report.message))

    def on_trace_ready(self, message: TraceReady) -> None:
        self.data = message.data
        screen = TraceScreen(message.data)
        self.switch_screen(screen)
        if self.gap_threshold_ns is not None:
            self.call_after_refresh(self._apply_threshold)
        if self.open_findings:
            self.open_findings = False  # once: a reload after a rejected cache stays put
            self.call_after_refresh(screen.action_findings)

    def on_view_complete(self, message: ViewComplete) -> None:
        """Every slice is placed now (the first frame may have shown the top levels only)."""
        for screen in self.screen_stack:
            if isinstance(screen, TraceScreen) and screen.data is message.data:
                screen.levels_complete()

    def on_load_failed(self, message: LoadFailed) -> None:
        self.exit_message = message.reason
        self.switch_screen(ErrorScreen(message.reason))

    def on_load_cancelled(self, message: LoadCancelled) -> None:
        self.exit_message = "loading cancelled"
        self.exit(return_code=1)

    def on_background_failed(self, message: BackgroundFailed) -> None:
        self.notify(message.reason, severity="error", markup=False, timeout=15)

    def on_cache_rejected(self, message: CacheRejected) -> None:
        """No screen keeps the rejected view: back to the loading screen until the new one."""
        self.notify(message.reason, severity="warning", markup=False, timeout=15)
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
