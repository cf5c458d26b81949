"""The kinetoscope Textual app: opens at once, loads the trace in a thread, then shows it."""

from __future__ import annotations

import time
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from .drilldown import ScreenActions, key_help_for
from .loader import TraceLoad
from .screens import ErrorScreen, HelpScreen, LoadingScreen, TraceScreen
from .timeline import Timeline
from .viewdata import ViewData


class KinetoscopeApp(App[int]):
    """`KinetoscopeApp(path)` views one trace file. `exit_message` holds the reason it failed."""

    CSS_PATH = "kinetoscope.tcss"
    TITLE = "kinetoscope"
    COMMANDS = App.COMMANDS | {ScreenActions}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Keys"),
    ]

    def __init__(
        self,
        path: str,
        *,
        gap_threshold_ns: int | None = None,
        loader: TraceLoad | None = None,
    ) -> None:
        super().__init__()
        # Started before the app takes over the standard streams (decoding workers need them),
        # and as early as possible: a caller may pass one it started before importing Textual.
        self.loader = loader if loader is not None else TraceLoad(path)
        self.path = path
        self.gap_threshold_ns = gap_threshold_ns
        self.exit_message: str | None = None
        self.data: ViewData | None = None
        self.first_frame_time: float | None = None  # wall clock, when the first frame was drawn

    def on_mount(self) -> None:
        self.theme = "textual-dark"
        self.push_screen(LoadingScreen(self.loader))

    def show_trace(self, data: ViewData) -> None:
        self.data = data
        screen = TraceScreen(data)
        self.switch_screen(screen)
        loader = self.loader
        loader.on_levels = lambda done: self.from_loader(self.levels_complete, done)
        loader.on_failure = lambda message: self.from_loader(self._notify_failure, message)
        if loader.levels_done.is_set():  # finished before the callback was in place
            self.call_later(self.levels_complete, data)
        if self.gap_threshold_ns is not None:
            self.call_after_refresh(self._apply_threshold)

    def from_loader(self, callback, *args) -> None:
        """Run `callback` on the UI thread, from the loader's thread; nothing once the app is
        closing (the loader may finish its work after the user quit)."""
        if not self.is_running or self._exit:
            return
        try:
            self.call_from_thread(callback, *args)
        except RuntimeError:  # the event loop closed in between
            pass

    def _notify_failure(self, message: str) -> None:
        self.notify(message, severity="error", markup=False)

    def first_frame_drawn(self) -> None:
        """The timeline drew its first full frame: the loader's later work may start."""
        if self.first_frame_time is None:
            self.first_frame_time = time.time()
        self.loader.first_frame.set()

    def levels_complete(self, data: ViewData) -> None:
        """Every slice is placed now (the first frame showed the top levels only)."""
        for screen in self.screen_stack:
            if isinstance(screen, TraceScreen) and screen.data is data:
                screen.levels_complete()

    def _apply_threshold(self) -> None:
        if self.gap_threshold_ns is not None:
            self.screen.query_one(Timeline).gap_threshold = self.gap_threshold_ns

    def show_error(self, message: str) -> None:
        self.exit_message = message
        self.switch_screen(ErrorScreen(message))

    def on_unmount(self) -> None:
        self.loader.cancel()

    def cancel_load(self) -> None:
        self.exit_message = "loading cancelled"
        self.exit(return_code=1)

    def action_quit_error(self) -> None:
        self.exit(return_code=1)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self.key_help()))

    def key_help(self) -> list[tuple[str, str]]:
        """(keys, description) of every screen, a heading row each: the screen `?` was pressed
        on first (its keys may mean something else elsewhere, as `[` and `]` do), then the
        keys of the app."""
        return key_help_for(self, self.screen)
