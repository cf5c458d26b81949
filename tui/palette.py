"""The key help (`?`) and the command palette's provider (`ScreenActions`: every described key
of the screen in front), for every viewer app.

Every screen declares its own section of the help: `HELP_TITLE`, the section's heading, and
`help_bindings()`, its rows, when they are not simply its BINDINGS. An app names its screens
in the order `?` lists them (`ViewerApp.help_sections`); this module knows none of them, so a
new screen is listed by declaring its title and naming it in its app's list.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table as RichTable
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HelpSection = tuple[str, type, list[BindingType]]  # (title, screen class, bindings)


def help_section(screen: type) -> HelpSection:
    """The section `screen` declares: its own HELP_TITLE (one inherited from another screen
    would list that screen's keys under its name, so it must be the class's own) and its
    `help_bindings()` or, when it gives none of its own, its BINDINGS."""
    title = _own(screen, "HELP_TITLE")
    if not isinstance(title, str):
        raise TypeError(f"{screen.__name__} declares no HELP_TITLE of its own")
    if _own(screen, "help_bindings") is not None:
        return title, screen, list(screen.help_bindings())
    return title, screen, list(screen.BINDINGS)


def _own(screen: type, name: str) -> Any:
    """`screen`'s attribute `name` when the class itself declares it (no base class holds the
    same value), else None."""
    value = inspect.getattr_static(screen, name, None)
    if value is None:
        return None
    inherited = any(
        inspect.getattr_static(base, name, None) in (value,) for base in screen.__mro__[1:]
    )
    return None if inherited else value


def help_sections(screens: Iterable[type]) -> list[HelpSection]:
    """The sections of `screens`, in their order."""
    return [help_section(screen) for screen in screens]


def binding_rows(app: Any, bindings: Iterable[BindingType]) -> list[tuple[str, str]]:
    """(keys, description) per action, keys merged, in the order given."""
    groups: dict[str, tuple[list[str], str]] = {}
    for binding in bindings:
        if not isinstance(binding, Binding):
            continue
        for key in binding.key.split(","):
            shown = app.get_key_display(Binding(key.strip(), binding.action))
            keys, _ = groups.setdefault(
                binding.action, ([], binding.tooltip or binding.description)
            )
            if shown not in keys:
                keys.append(shown)
    return [(" ".join(keys), text) for keys, text in groups.values()]


def key_help_for(app: Any, front: Any, sections: list[HelpSection]) -> list[tuple[str, str]]:
    """Help rows, a heading row per screen: the keys of the screen `?` was pressed on first
    (marked "this screen"), then the app's own, then every other screen's. `sections`: every
    screen of the app, in the order listed (ViewerApp.help_sections)."""
    # The most specific section for the screen in front (a table screen also has "Any table").
    mine = [i for i, (_, kind, _) in enumerate(sections) if type(front) is kind]
    if not mine:
        mine = [i for i, (_, kind, _) in enumerate(sections) if isinstance(front, kind)]
    order = [*mine[:1], *(i for i in range(len(sections)) if i not in mine[:1])]
    rows: list[tuple[str, str]] = []
    taken: set[str] = set()
    if mine:
        title, _, bindings = sections[mine[0]]
        rows.append((f"── {title} · this screen", ""))
        rows.extend(binding_rows(app, bindings))
        # The app's keys below leave out those this screen gives another meaning (q: back).
        taken = {k.strip() for b in bindings if isinstance(b, Binding) for k in b.key.split(",")}
    rows.append(("── Everywhere", ""))
    own = [b for b in app.BINDINGS if isinstance(b, Binding) and b.key not in taken]
    rows.extend(binding_rows(app, own))
    for index in order[1:] if mine else order:
        title, _, bindings = sections[index]
        rows.append((f"── {title}", ""))
        rows.extend(binding_rows(app, bindings))
    return rows


HELP_KEY_WIDTH = 16  # cells for the keys; a longer one ("ctrl+wheel, wheel on ruler") wraps


def help_renderable(rows: list[tuple[str, str]]) -> Group:
    """The key help as sections: a heading row (description "") on a line of its own, then its
    keys in a column as wide as the longest key (at most HELP_KEY_WIDTH cells) and descriptions
    that wrap at word boundaries to the width there is, never cut."""
    keys = [key for key, description in rows if description]
    width = min(HELP_KEY_WIDTH, max((cell_len(key) for key in keys), default=1))
    parts: list[RenderableType] = []
    table: RichTable | None = None

    def new_table() -> RichTable:
        grid = RichTable.grid(padding=(0, 2), expand=True)
        grid.add_column(width=width, overflow="fold")
        grid.add_column(ratio=1, overflow="fold")
        return grid

    for key, description in rows:
        if not description:  # a section heading
            if table is not None and table.row_count:
                parts.append(table)
            if parts:
                parts.append(Text(""))
            parts.append(Text(key, style="bold"))
            table = None
            continue
        if table is None:
            table = new_table()
        table.add_row(Text(key, style="bold"), Text(description))
    if table is not None and table.row_count:
        parts.append(table)
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    """Every key of the screen below, with what it does."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("question_mark", "close", "Close", show=False),
        Binding("q", "close", "Close", show=False),
    ]

    EXTRA = (
        ("ctrl+wheel, wheel on ruler", "zoom around the mouse"),
        ("click", "move the cursor, select the event under it"),
        ("click on a lane name", "expand/collapse the lane"),
        ("ctrl+p", "command palette"),
    )

    def __init__(self, bindings: list[tuple[str, str]]) -> None:
        super().__init__()
        self.bindings = bindings

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(
                Text("Keys · Esc closes · ↑↓ PgUp PgDn scroll", style="bold"), id="help-title"
            )
            with VerticalScroll(id="help-table"):
                yield Static(
                    help_renderable([*self.bindings, ("── Mouse and palette", ""), *self.EXTRA]),
                    id="help-text",
                )

    def on_mount(self) -> None:
        self.query_one("#help-table", VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)


class ScreenActions(Provider):
    """Command palette: every described binding of the screen in front, by its description."""

    def _commands(self) -> list[tuple[str, str, Any]]:
        """(label, action, node) for the bindings of the focused widget, its screen and the app."""
        screen = self.screen
        focused = screen.focused
        chain = list(focused.ancestors_with_self) if focused is not None else [screen, self.app]
        out = []
        seen = set()
        for node in chain:
            for binding in getattr(node, "BINDINGS", []):
                if not isinstance(binding, Binding) or binding.action in seen:
                    continue
                seen.add(binding.action)
                label = binding.tooltip or binding.description
                if label:
                    out.append((label, binding.action, node))
            for label, action in getattr(node, "PALETTE_COMMANDS", ()):  # no key of their own
                if action not in seen:
                    seen.add(action)
                    out.append((label, action, node))
        return out

    async def discover(self) -> Hits:
        for label, action, node in self._commands():
            yield DiscoveryHit(label, self._runner(action, node))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for label, action, node in self._commands():
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), self._runner(action, node))

    def _runner(self, action: str, node: Any) -> Callable[[], Any]:
        async def run() -> None:
            await self.app.run_action(action, node)

        return run
