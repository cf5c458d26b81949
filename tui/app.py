"""The kinetoscope Textual app: opens at once, loads the trace in a thread, then shows it."""

from __future__ import annotations

from typing import ClassVar

from kinetoscope.parser.reader import prepare_workers
from textual.app import App
from textual.binding import Binding, BindingType

from .drilldown import ScreenActions, drilldown_key_help
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

    def __init__(self, path: str, *, gap_threshold_ns: int | None = None) -> None:
        super().__init__()
        # Before the app takes over the standard streams, which decoding workers need to start.
        prepare_workers(path)
        self.path = path
        self.gap_threshold_ns = gap_threshold_ns
        self.exit_message: str | None = None
        self.data: ViewData | None = None

    def on_mount(self) -> None:
        self.theme = "textual-dark"
        self.push_screen(LoadingScreen(self.path))

    # Called from the loading worker (through call_from_thread).
    def show_trace(self, data: ViewData) -> None:
        self.data = data
        screen = TraceScreen(data)
        self.switch_screen(screen)
        if self.gap_threshold_ns is not None:
            self.call_after_refresh(self._apply_threshold)

    def _apply_threshold(self) -> None:
        if self.gap_threshold_ns is not None:
            self.screen.query_one(Timeline).gap_threshold = self.gap_threshold_ns

    def show_error(self, message: str) -> None:
        self.exit_message = message
        self.switch_screen(ErrorScreen(message))

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
        """(keys, description) for every binding of the timeline, the trace screen and the app."""
        groups: dict[str, tuple[list[str], str]] = {}
        sources = (Timeline.BINDINGS, TraceScreen.BINDINGS, self.BINDINGS)
        for bindings in sources:
            for binding in bindings:
                if not isinstance(binding, Binding):
                    continue
                for key in binding.key.split(","):
                    shown = self.get_key_display(Binding(key.strip(), binding.action))
                    text = binding.tooltip or binding.description
                    keys, _ = groups.setdefault(binding.action, ([], text))
                    if shown not in keys:
                        keys.append(shown)
        rows = [(" ".join(keys), description) for keys, description in groups.values()]
        return rows + drilldown_key_help(self)
