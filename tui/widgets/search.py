"""Search event names: the matches in time order, n/N stepping, and their highlight on the
timeline (a test per distinct name, then one vectorised lookup per row)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from kinetoscope.tui.data.viewdata import Level, ViewData
from kinetoscope.tui.widgets.render import CellRow
from kinetoscope.tui.widgets.table import name_matcher
from kinetoscope.tui.widgets.theme import DEFAULT, Palette
from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widgets import Input, Static


@dataclass
class SearchState:
    """Rows whose name matches, by (start, file order); `name_mask` is per string id."""

    pattern: str
    name_mask: np.ndarray
    rows: np.ndarray
    starts: np.ndarray  # absolute ns, ascending
    index: int = -1
    wrapped: bool = False

    def step(self, selected: int, now: int, direction: int, inclusive: bool = False) -> int:
        """Index of the next (direction 1) or previous (-1) match from the current one, or from
        time `now` when the selected row is not the current match; wraps at either end."""
        n = len(self.rows)
        self.wrapped = False
        if 0 <= self.index < n and int(self.rows[self.index]) == selected and not inclusive:
            target = self.index + direction
        elif direction > 0:
            side = "left" if inclusive else "right"
            target = int(np.searchsorted(self.starts, now, side=side))
        else:
            target = int(np.searchsorted(self.starts, now, side="left")) - 1
        if target >= n or target < 0:
            self.wrapped = True
            target %= n
        self.index = target
        return target


def find_matches(data: ViewData, pattern: str) -> SearchState:
    """Every event drawn on the timeline whose name matches `pattern` (substring, case-insensitive;
    `re:` for a regular expression). Raises ValueError for a bad regular expression."""
    trace = data.trace
    test = name_matcher(pattern)
    used = np.unique(trace.name)
    hits = np.fromiter((test(trace.strings[int(i)]) for i in used), dtype=bool, count=len(used))
    mask = np.zeros(len(trace.strings), dtype=bool)
    mask[used[hits]] = True
    rows = np.flatnonzero(mask[trace.name] & (data.row_lane >= 0))
    starts = trace.start[rows]
    order = np.lexsort((rows, starts))
    return SearchState(pattern=pattern, name_mask=mask, rows=rows[order], starts=starts[order])


def highlight_segments(
    segments: list[Segment],
    cells: CellRow,
    level: Level,
    names: np.ndarray,
    name_mask: np.ndarray,
    keep_entry: int = -1,
    palette: Palette = DEFAULT,
    role: str = "match",
) -> list[Segment]:
    """Restyle the cells of one lane row whose drawn event matches (all but `keep_entry`, the
    selected one, which keeps its own style): ink on the palette's `role` colour."""
    entry = cells.entry
    if not len(entry) or not len(level):
        return segments
    drawn = entry >= 0
    rows = level.rows[np.maximum(entry, 0)]
    hit = drawn & (entry != keep_entry)
    hit[hit] = name_mask[names[rows[hit]]]
    if not hit.any():
        return segments
    change = np.flatnonzero(np.diff(hit.astype(np.int8))) + 1
    strip = Strip(segments)
    bounds = [0, *change.tolist(), len(hit)]
    pieces = strip.divide(bounds[1:])
    out: list[Segment] = []
    for piece, first in zip(pieces, bounds[:-1]):
        if hit[first]:
            highlight = palette.style("ink", role, bold=True)
            out.extend(Segment.apply_style(list(piece), post_style=highlight))
        else:
            out.extend(piece)
    return out


class SearchScreen(ModalScreen[str | None]):
    """A one-line prompt at the bottom: Enter searches, Esc cancels, an empty search clears."""

    CSS_PATH = str(
        Path(__file__).with_name("drilldown.tcss")
    )  # beside this module, wherever a subclass lives
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel the search"),
    ]
    HELP_TITLE = "Search (/)"

    def __init__(self, initial: str = "") -> None:
        super().__init__()
        self.initial = initial

    def compose(self) -> ComposeResult:
        with Vertical(id="search-box"):
            yield Input(
                value=self.initial,
                placeholder="event name (substring, case-insensitive; re:… for a regex)",
                id="search-input",
            )
            yield Static(
                Text("Enter: search · n/N: next/previous match · empty: clear · Esc: cancel"),
                id="search-hint",
            )

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        message.stop()
        self.dismiss(message.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
