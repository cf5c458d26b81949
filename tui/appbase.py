"""What every kinetoscope app shares (one trace, a job's ranks, a diff): the viewer's named
colours in the current theme, redrawing on a theme change, and the `?` key help."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from kinetoscope.tui.palette import HelpScreen, HelpSection, ScreenActions, key_help_for
from kinetoscope.tui.widgets.theme import variables_for
from textual.app import App
from textual.binding import Binding, BindingType


class ViewerApp(App[int]):
    """Base of the apps. Subclasses call `follow_theme()` when mounted and name the key help's
    sections of their screens (`help_sections`)."""

    CSS_PATH = str(
        Path(__file__).with_name("kinetoscope.tcss")
    )  # beside this module, wherever a subclass lives
    COMMANDS = App.COMMANDS | {ScreenActions}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Keys"),
    ]

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """The viewer's named colours (`$ks-*`, see theme.py) in the current theme."""
        return variables_for(self.current_theme)

    def follow_theme(self) -> None:
        """Redraw on every theme change (ctrl+p, TEXTUAL_THEME)."""
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: object) -> None:
        """Every screen and widget that draws with the palette drops what it drew and draws
        again."""
        for screen in self.screen_stack:
            for node in (screen, *screen.query("*")):
                recolour = getattr(node, "recolour", None)
                if callable(recolour):
                    recolour()

    def help_sections(self) -> list[HelpSection]:
        """(title, screen class, bindings) of every screen of this app, in the order `?` lists
        them: each screen declares its own (palette.help_section)."""
        return []

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(self.key_help()))

    def key_help(self) -> list[tuple[str, str]]:
        """(keys, description) of every screen, a heading row each: the screen `?` was pressed
        on first (its keys may mean something else elsewhere, as `[` and `]` do), then this
        app's other screens, then the keys of the app."""
        return key_help_for(self, self.screen, self.help_sections())
