"""A table over numpy columns that draws only the rows on screen (Line API), sorts with argsort
and filters names with one test per distinct string, so hundreds of thousands of rows page,
sort and filter without freezing the UI. `TableScreen` puts one under a title and a filter box.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from kinetoscope.analysis.names import SCAN_LIMIT
from kinetoscope.analysis.units import plural
from kinetoscope.tui.data.failures import ReportsWorkerFailures, failure_message
from kinetoscope.tui.widgets.render import PLAIN
from kinetoscope.tui.widgets.theme import palette_of
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Input, Static

from kinetoscope.present.safe_text import clean, cut_end, fit_name, fit_names, pad
from kinetoscope.present.tables import Table, save_table, string_ranks  # noqa: F401

# Above this many rows, sorting runs in a worker thread.
SORT_IN_WORKER = 200_000

SEPARATOR = " "


def name_matcher(pattern: str) -> Callable[[str], bool]:
    """A case-insensitive test of names: substring, or a regular expression after `re:`. It
    looks at a name's first SCAN_LIMIT characters (a name of megabytes costs no more).

    Raises ValueError with a readable message for a bad regular expression."""
    if pattern.startswith("re:"):
        try:
            regex = re.compile(pattern[3:], re.IGNORECASE)
        except re.error as error:
            raise ValueError(f"bad regular expression: {error}") from None
        return lambda text: regex.search(text[:SCAN_LIMIT]) is not None
    needle = pattern.lower()
    return lambda text: needle in text[:SCAN_LIMIT].lower()


# Name columns of tables up to this many rows tell their names apart (safe_text.fit_names);
# longer ones fit each name alone.
NAMES_TOLD_APART = 2_000
MIN_FLEXIBLE = 28  # cells a name column should keep before optional columns are hidden


@dataclass
class Column:
    """One column. `cell(row)` gives the text of a model row; `key` sorts (numeric or ranks)."""

    title: str
    cell: Callable[[int], str | Text]  # Text only for styled cells such as bars
    key: np.ndarray | None = None
    width: int = 10  # cells; 0 takes what the fixed columns leave
    numeric: bool = True  # right-aligned
    largest_first: bool | None = None  # the first sort's direction; None: numeric columns do
    optional: bool = False  # hidden when the flexible columns would get under MIN_FLEXIBLE
    name: bool = False  # event names: cut where they say least (safe_text.fit_name)

    @property
    def descending(self) -> bool:
        return self.numeric if self.largest_first is None else self.largest_first


@dataclass
class TableModel:
    """Columns over `n` rows; rows are filtered by `names[row]`: `name_text` gives its text, or
    several texts of which one must match (e.g. a name and a category). `keys` says what a row
    is (e.g. its (cat, name) packed in an int): when a table shows a new model of the same
    things (another grouping, a range), the cursor stays on a row with the same key."""

    columns: list[Column]
    n: int
    names: np.ndarray | None = None  # int per row: id of the text the filter tests
    name_text: Callable[[int], str | tuple[str, ...]] = str
    default_sort: int = 0
    keys: np.ndarray | None = None  # int per row: what the row is, across models
    name_room: int = MIN_FLEXIBLE  # cells the flexible columns keep before optional ones go
    # When the model is another's restricted to some rows (columns.restrict): per row, the
    # row id in that model (e.g. the group of a range table's row); None: rows are their own.
    source_rows: np.ndarray | None = None
    _distinct: np.ndarray | None = field(default=None, repr=False)

    def matching(self, pattern: str) -> np.ndarray:
        """Boolean per row: does its name match the filter pattern (empty: all)."""
        if not pattern or self.names is None:
            return np.ones(self.n, dtype=bool)
        test = name_matcher(pattern)
        if self._distinct is None:
            self._distinct = np.unique(self.names)
        distinct = self._distinct

        def passes(i: int) -> bool:
            text = self.name_text(i)
            return test(text) if isinstance(text, str) else any(test(t) for t in text)

        hits = np.fromiter((passes(int(i)) for i in distinct), dtype=bool, count=len(distinct))
        keep = distinct[hits]
        return np.isin(self.names, keep)


def column_widths(model: TableModel, total: int, sort_column: int) -> list[int]:
    """Cells per column of `model` in `total` cells; 0 for an optional column hidden to leave
    the names enough room (the rightmost optional columns go first; the column sorted by
    stays)."""
    columns = model.columns
    shown = [True] * len(columns)
    optional = [i for i, c in enumerate(columns) if c.optional and i != sort_column]
    flexible = [c for c in columns if not c.width]
    while True:
        visible = [c for c, keep in zip(columns, shown) if keep]
        fixed = sum(c.width for c in visible if c.width) + len(SEPARATOR) * (len(visible) - 1)
        spare = total - fixed
        if not flexible or spare >= model.name_room * len(flexible) or not optional:
            break
        shown[optional.pop()] = False
    each = max(spare, 8 * len(flexible)) // max(len(flexible), 1)
    return [(c.width or each) if keep else 0 for c, keep in zip(columns, shown)]


def names_drawn(model: TableModel, column: int, width: int) -> dict[str, str] | None:
    """Each name of a name column of `model` as drawn `width` cells wide, told apart from the
    column's other names (safe_text.fit_names over all the model's rows); None where the model
    has more than NAMES_TOLD_APART rows (each name is then fitted alone)."""
    if model.n > NAMES_TOLD_APART:
        return None
    cell = model.columns[column].cell
    texts = [value for value in (cell(r) for r in range(model.n)) if isinstance(value, str)]
    return dict(zip(texts, fit_names(texts, width)))


class DataView(ReportsWorkerFailures, ScrollView, can_focus=True):
    """The table body: a header line and one line per row of the current view."""

    DEFAULT_CSS = """
    DataView { height: 1fr; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "edge(0)", "First row", show=False),
        Binding("end", "edge(1)", "Last row", show=False),
        Binding("enter", "choose", "Open", tooltip="Drill into the row / jump to it"),
        Binding("less_than_sign", "sort_step(-1)", "Sort ←", tooltip="Sort by the column left"),
        Binding("greater_than_sign", "sort_step(1)", "Sort →", tooltip="Sort by the column right"),
        Binding("R", "reverse", "Reverse", tooltip="Reverse the sort order"),
        *(
            Binding(str(i), f"sort_column({i - 1})", f"Sort by column {i}", show=False)
            for i in range(1, 10)
        ),
    ]

    cursor: reactive[int] = reactive(0)
    FAILURE_SUBJECT = "sorting"
    FAILURE_VERB = "done"

    class Chosen(Message):
        """Enter (or a click on the current row) on model row `row`."""

        def __init__(self, view: DataView, row: int) -> None:
            super().__init__()
            self.view = view
            self.row = row

    class Highlighted(Message):
        """The cursor moved to model row `row` (-1: the view is empty)."""

        def __init__(self, view: DataView, row: int) -> None:
            super().__init__()
            self.view = view
            self.row = row

    class TypeAhead(Message):
        """A printable key the table does not use: the start of a filter."""

        def __init__(self, character: str) -> None:
            super().__init__()
            self.character = character

    class ViewChanged(Message):
        """Sort order or filter changed (the screen redraws its title)."""

    def __init__(self, model: TableModel | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model: TableModel | None = None
        self.view = np.zeros(0, dtype=np.int64)  # model rows in display order
        self.sort_column = 0
        self.sort_descending = True
        self.pattern = ""
        self.filter_error: str | None = None
        self._hidden_said: tuple[str, ...] = ()
        # Masks over the rows of `model`, made for it and dropped with it: rows passing the
        # filter, and rows a screen restricts the view to (e.g. a category).
        self._keep: np.ndarray | None = None
        self.scope: np.ndarray | None = None
        self._order: np.ndarray | None = None  # all rows sorted, before filtering
        self._select_key: int | None = None  # key of the row to select once the order is ready
        self._lines: LRUCache[tuple, Strip] = LRUCache(512)
        # Per (model, column, width): each name of a name column as drawn (safe_text.fit_names).
        self._names_drawn: dict[tuple[int, int], dict[str, str] | None] = {}
        self._names_model: TableModel | None = None
        if model is not None:
            self.set_model(model)

    # -- model, sorting, filtering --------------------------------------------------------------

    def set_model(
        self, model: TableModel, *, keep_state: bool = False, scope: np.ndarray | None = None
    ) -> None:
        """Show `model`, restricted to the rows where `scope` holds (None: all; a mask made for
        this model: whatever restricted the previous model does not carry over). With
        keep_state the sort column, direction and filter carry over, and the cursor stays on a
        row with the key of the row it was on (when both models have keys), else goes to the top.
        """
        check_mask(scope, model, "scope")
        previous_key = self._current_key() if keep_state else None
        if keep_state and previous_key is None:
            previous_key = self._select_key  # still waiting for a sort in a worker
        first = self.model is None
        self.model = model
        if first or not keep_state or self.sort_column >= len(model.columns):
            self.sort_column = model.default_sort
            self.sort_descending = model.columns[model.default_sort].descending
        self.scope = scope
        self._keep = None
        self._order = None
        # Until the new order is ready, no rows: the old model's rows mean nothing in this one.
        self.view = np.zeros(0, dtype=np.int64)
        self._lines.clear()
        self.filter_error = None
        try:
            self._keep = model.matching(self.pattern) if self.pattern else None
        except ValueError as error:
            self.filter_error = str(error)
            self._keep = None
        self._select_key = previous_key if model.keys is not None else None
        self._resort()

    def clear(self) -> None:
        """Show no model (an empty table), e.g. when what it would show could not be made."""
        self.model = None
        self.scope = None
        self._keep = None
        self._order = None
        self._select_key = None
        self.view = np.zeros(0, dtype=np.int64)
        self._lines.clear()
        self.virtual_size = Size(self.size.width, 1)
        self.cursor = 0
        self.refresh()
        self.post_message(self.ViewChanged())

    def _current_key(self) -> int | None:
        row = self.current_row
        model = self.model
        if row < 0 or model is None or model.keys is None:
            return None
        return int(model.keys[row])

    def _resort(self, select: int = -1) -> None:
        model = self.model
        if model is None:
            return
        if model.n > SORT_IN_WORKER:
            self._sort_worker(model, self.sort_column, self.sort_descending, select)
        else:
            self._apply_order(
                model, sort_rows(model, self.sort_column, self.sort_descending), select
            )

    def show_failure(self, message: str) -> None:
        """A sort in a worker failed: the screen says why."""
        if isinstance(self.screen, TableScreen):
            self.screen.show_failure(message)

    @work(thread=True, exclusive=True, group="table-sort", exit_on_error=False)
    def _sort_worker(self, model: TableModel, column: int, descending: bool, select: int) -> None:
        order = sort_rows(model, column, descending)
        self.app.call_from_thread(self._apply_order, model, order, select, (column, descending))

    def _apply_order(
        self,
        model: TableModel,
        order: np.ndarray,
        select: int = -1,
        sorted_by: tuple[int, bool] | None = None,
    ) -> None:
        # A late answer from a worker for another model or another order is dropped.
        if model is not self.model:
            return
        if sorted_by is not None and sorted_by != (self.sort_column, self.sort_descending):
            return
        self._order = order
        self._refilter(select)

    def _refilter(self, select: int = -1) -> None:
        model = self.model
        if self._order is None or model is None:
            return
        order = self._order
        keep = self._keep
        if self.scope is not None:
            keep = self.scope if keep is None else keep & self.scope
        self.view = order if keep is None else order[keep[order]]
        self._lines.clear()
        self.virtual_size = Size(self.size.width, len(self.view) + 1)
        target = 0
        key, self._select_key = self._select_key, None
        if select >= 0:
            hits = np.flatnonzero(self.view == select)
            target = int(hits[0]) if len(hits) else 0
        elif key is not None and model.keys is not None:
            hits = np.flatnonzero(np.asarray(model.keys)[self.view] == key)
            target = int(hits[0]) if len(hits) else 0
        self.cursor = -1  # force the watcher: the row under the same index changed
        self.cursor = min(target, max(len(self.view) - 1, 0))
        self.refresh()
        self.post_message(self.ViewChanged())

    def set_filter(self, pattern: str) -> None:
        """Keep only rows whose name matches `pattern` (substring; `re:` for a regex)."""
        model = self.model
        self.pattern = pattern
        self.filter_error = None
        if model is None:
            return
        try:
            self._keep = model.matching(pattern) if pattern else None
        except ValueError as error:
            self.filter_error = str(error)
            self._keep = None
        self._refilter(self.current_row)

    def set_scope(self, scope: np.ndarray | None) -> None:
        """Show only the rows where `scope` (a mask over the current model's rows; None: all)
        holds, on top of the filter."""
        if self.model is None:
            return
        check_mask(scope, self.model, "scope")
        self.scope = scope
        self._refilter(self.current_row)

    def sort_by(self, column: int, descending: bool | None = None) -> None:
        model = self.model
        if model is None or not (0 <= column < len(model.columns)):
            return
        if descending is None:
            if column == self.sort_column:
                descending = not self.sort_descending
            else:
                descending = model.columns[column].descending
        self.sort_column, self.sort_descending = column, descending
        self._resort()  # a new order starts at its top

    @property
    def current_row(self) -> int:
        """The model row under the cursor, or -1."""
        if 0 <= self.cursor < len(self.view):
            return int(self.view[self.cursor])
        return -1

    @property
    def row_count(self) -> int:
        return len(self.view)

    # -- cursor -----------------------------------------------------------------------------

    def validate_cursor(self, value: int) -> int:
        return max(-1, min(value, len(self.view) - 1))

    def watch_cursor(self, value: int) -> None:
        if value < 0 and len(self.view):
            return
        self._scroll_to_cursor()
        self.refresh()
        self.post_message(self.Highlighted(self, self.current_row))

    def _body_height(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def _scroll_to_cursor(self) -> None:
        top = int(self.scroll_offset.y)
        height = self._body_height()
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.cursor = max(0, self.cursor + direction * self._body_height())

    def action_edge(self, end: int) -> None:
        self.cursor = len(self.view) - 1 if end else 0

    def action_choose(self) -> None:
        row = self.current_row
        if row >= 0:
            self.post_message(self.Chosen(self, row))

    def action_sort_step(self, step: int) -> None:
        if self.model is not None:
            self.sort_by((self.sort_column + step) % len(self.model.columns))

    def action_sort_column(self, column: int) -> None:
        self.sort_by(column)

    def action_reverse(self) -> None:
        self.sort_by(self.sort_column, not self.sort_descending)

    def on_key(self, event: events.Key) -> None:
        character = event.character
        if (
            character
            and event.is_printable
            and (character.islower() or character in " _:.-*()#@")
            and character != "q"  # q quits, as everywhere
            and not character.isdigit()
        ):
            event.stop()
            event.prevent_default()
            self.post_message(self.TypeAhead(character))

    # -- mouse ------------------------------------------------------------------------------

    def on_click(self, event: events.Click) -> None:
        if self.model is None:
            return
        if event.y == 0:
            column = self._column_at(event.x)
            if column >= 0:
                self.sort_by(column)
            return
        index = int(self.scroll_offset.y) + event.y - 1
        if 0 <= index < len(self.view):
            if index == self.cursor and event.chain >= 2:
                self.action_choose()
            self.cursor = index
        self.focus()

    # -- drawing ----------------------------------------------------------------------------

    def _widths(self, total: int) -> list[int]:
        assert self.model is not None
        return column_widths(self.model, total, self.sort_column)

    def _column_at(self, x: int) -> int:
        edge = 0
        for i, width in enumerate(self._widths(self.scrollable_content_region.width)):
            if not width:
                continue
            edge += width + len(SEPARATOR)
            if x < edge:
                return i
        return -1

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if self.model is None:
            return Strip.blank(width, PLAIN)
        if y == 0:
            return self._header(width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self.view):
            return Strip.blank(width, PLAIN)
        row = int(self.view[index])
        palette = palette_of(self)
        if index == self.cursor:
            if self.has_focus:
                style = palette.style("ink", "table-cursor", bold=True)
            else:
                style = palette.style("cell", "table-cursor-dim")
        else:
            style = palette.style("cell", "zebra") if index % 2 else palette.style("cell")
        key = (row, style, width, id(self.model))
        strip = self._lines.get(key)
        if strip is None:
            strip = self._row_strip(row, style, width)
            self._lines[key] = strip
        return strip

    def _header(self, width: int) -> Strip:
        assert self.model is not None
        segments = []
        palette = palette_of(self)
        header = palette.style("heading", bold=True)
        for i, (column, w) in enumerate(zip(self.model.columns, self._widths(width))):
            if not w:
                continue
            title = column.title
            style = header
            if i == self.sort_column:
                title = title + ("↓" if self.sort_descending else "↑")
                style = palette.style("ink", "heading", bold=True)
            segments.append(Segment(fit_cell(title, w, column.numeric), style))
            segments.append(Segment(SEPARATOR, header))
        return Strip(segments[:-1]).adjust_cell_length(width, PLAIN)

    def _row_strip(self, row: int, style: Style, width: int) -> Strip:
        assert self.model is not None
        segments: list[Segment] = []
        for index, (column, w) in enumerate(zip(self.model.columns, self._widths(width))):
            if not w:
                continue
            value = column.cell(row)
            if isinstance(value, Text):
                # Styled cells (bars): their colours over the row's style, cut to the column.
                drawn = Segment.adjust_line_length(list(value.render(self.app.console)), w)
                segments.extend(Segment.apply_style(drawn, style=style))
            else:
                text = (
                    pad(self._name_drawn(index, value, w), w)
                    if column.name
                    else fit_cell(value, w, column.numeric)
                )
                segments.append(Segment(text, style))
            segments.append(Segment(SEPARATOR, style))
        return Strip(segments[:-1]).adjust_cell_length(width, style)

    def _name_drawn(self, column: int, name: str, width: int) -> str:
        """A name of a name column in `width` cells, told apart from the column's other names
        (names_drawn, once per column and width)."""
        model = self.model
        assert model is not None
        if self._names_model is not model:
            self._names_model, self._names_drawn = model, {}
        key = (column, width)
        if key not in self._names_drawn:
            self._names_drawn[key] = names_drawn(model, column, width)
        drawn = self._names_drawn[key]
        if drawn is None or name not in drawn:
            return fit_name(name, width)
        return drawn[name]

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, len(self.view) + 1)
        self._lines.clear()
        hidden = self.hidden_columns()
        if hidden != self._hidden_said:
            self._hidden_said = hidden
            self.post_message(self.ViewChanged())  # the screen's title names them

    def hidden_columns(self) -> tuple[str, ...]:
        """Titles of the optional columns left out at this width to give the names room."""
        if self.model is None or self.scrollable_content_region.width <= 0:
            return ()
        widths = self._widths(self.scrollable_content_region.width)
        return tuple(c.title for c, w in zip(self.model.columns, widths) if not w)

    def recolour(self) -> None:
        """The theme changed (the app calls this): draw the rows again, and the screen's detail
        of the highlighted one."""
        self._lines.clear()
        self.refresh()
        if self.cursor >= 0:
            self.post_message(self.Highlighted(self, self.current_row))

    def on_focus(self) -> None:
        self._lines.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._lines.clear()
        self.refresh()

    def visible_texts(self) -> list[list[str]]:
        """The cell texts of every row of the current view, as drawn (for tests and export)."""
        assert self.model is not None
        return [[clean(str(c.cell(int(r)))) for c in self.model.columns] for r in self.view]


def check_mask(mask: np.ndarray | None, model: TableModel, what: str) -> None:
    """A row mask must be made for the model it restricts."""
    if mask is not None and (mask.dtype != bool or mask.shape != (model.n,)):
        raise ValueError(
            f"{what} has shape {mask.shape} ({mask.dtype}); the model has {model.n} rows"
        )


def fit_cell(text: str, width: int, right: bool) -> str:
    """Cleaned text in exactly `width` cells: cut with an ellipsis, and padded (before it when
    `right`)."""
    return pad(cut_end(clean(text), width), width, right=right)


def sort_rows(model: TableModel, column: int, descending: bool) -> np.ndarray:
    """All model rows ordered by a column; ties keep the model's own order."""
    key = model.columns[column].key
    if key is None:
        key = np.arange(model.n)
    key = np.asarray(key)
    if descending:
        if key.dtype.kind == "f":
            key = -key
        else:
            # ~k = -k - 1 reverses every int64 without overflow (-k turns the smallest, used
            # for "no value", into itself and would sort it first).
            key = ~key.astype(np.int64)
    return np.argsort(key, kind="stable")


class FilterBox(Input):
    """The filter line above a table: Esc clears it, ↓ goes back to the table, Enter goes back
    and opens the highlighted row (as Enter in the table does: typing a name and pressing Enter
    drills into it)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "clear_filter", "Clear the filter", show=False),
        Binding("down", "to_table", "To the table", show=False),
    ]

    class Leave(Message):
        def __init__(self, clear: bool, choose: bool = False) -> None:
            super().__init__()
            self.clear = clear
            self.choose = choose  # open the highlighted row too

    def action_clear_filter(self) -> None:
        self.value = ""
        self.post_message(self.Leave(clear=True))

    def action_to_table(self) -> None:
        self.post_message(self.Leave(clear=False))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Leave(clear=False, choose=True))


CsvTable = Table | Callable[[], Table]  # a table to save, or what makes it (in the worker)

SAVE_CSV_BINDING = Binding(
    "W",
    "save_csv",
    "Save CSV",
    show=False,  # in the ? help and the command palette; the footers keep their room
    tooltip="Save the table as shown (filter, sort, every row) as CSV in the current directory",
)


class SavesCsv:
    """Mixed into a screen that shows a table: `W` (SAVE_CSV_BINDING, in its BINDINGS) writes
    the table as shown, every row, to `<trace>.<table>.csv` in the current directory (the
    temporary directory when that cannot be written; `-2`, `-3`... rather than over an
    existing file), in a worker thread, and says where in a notification. A failure is an
    error notification; the screen stays as it is.

    The screen gives `csv_export()`: the headless table (kinetoscope/present/tables.py), or a function
    that makes it (called in the worker: for a table whose columns take a while), and its rows
    in the order shown, or None when there is nothing to save yet; and `csv_source()`, the path
    that names the file."""

    # The command palette's extra commands (no key: palette.ScreenActions lists them).
    PALETTE_COMMANDS: ClassVar[list[tuple[str, str]]] = [
        (
            "Save CSV raw: the table as shown, names exactly as recorded (no ' before a cell "
            "starting with = + - @)",
            "save_csv_raw",
        )
    ]

    def csv_export(self) -> tuple[CsvTable, np.ndarray] | None:
        return None

    def csv_source(self) -> str:
        data = getattr(self, "data", None)
        return data.trace.source.path if data is not None else "trace"

    def action_save_csv(self) -> None:
        """W: cells a spreadsheet would evaluate as a formula get a ' in front (docs/csv.md)."""
        self._start_save(raw=False)

    def action_save_csv_raw(self) -> None:
        """The palette's raw save: every cell exactly as recorded."""
        self._start_save(raw=True)

    def _start_save(self, raw: bool) -> None:
        screen: Any = self
        try:
            export = self.csv_export()
            source = self.csv_source()
        except Exception as error:  # said, never raised into the app
            screen.notify(failure_message("the CSV table", error), severity="error", markup=False)
            return
        if export is None:
            screen.notify("Nothing to save yet: no table is shown", timeout=3)
            return
        table, rows = export
        screen.run_worker(
            partial(self._save_csv, table, rows, source, raw),
            name="save-csv",
            group="save-csv",
            thread=True,
            exit_on_error=False,
        )

    def _save_csv(self, table: CsvTable, rows: np.ndarray, source: str, raw: bool = False) -> None:
        screen: Any = self
        try:
            made = table() if callable(table) else table
            path, count = save_table(made, rows, source, raw=raw)
        except Exception as error:  # a full disk, a read-only place: said, the table stays
            message = failure_message("the CSV file", error, "written")
            screen.app.call_from_thread(
                screen.notify, message, severity="error", timeout=8, markup=False
            )
            return
        screen.app.call_from_thread(
            screen.notify,
            f"Saved {plural(count, 'row')} to {clean(path)}"
            + (" (raw: names exactly as recorded)" if raw else ""),
            timeout=6,
            markup=False,
        )


class TableScreen(SavesCsv, ReportsWorkerFailures, Screen):
    """A title line, a filter box, one DataView, an optional detail pane and the footer.

    Subclasses fill the table in a worker (exit_on_error=False: one that fails is said in the
    title and the detail pane, see `show_failure`) and say what Enter does in `choose()`."""

    CSS_PATH = str(
        Path(__file__).with_name("drilldown.tcss")
    )  # beside this module, wherever a subclass lives
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", tooltip="Clear the filter, else go back"),
        Binding("slash", "focus_filter", "Filter", tooltip="Filter rows by name (re: for regex)"),
        SAVE_CSV_BINDING,
        Binding("question_mark", "app.help", "Keys", show=False),
    ]
    HELP_TITLE = "Any table"  # the key help's section (tui/palette.py): the table's own keys
    TITLE_TEXT = ""
    SHOW_DETAIL = False
    DETAIL_CLASSES = "table-detail"
    FILTER_HINT = "type to filter by name or category · re:… for a regular expression"
    FAILURE_SUBJECT = "the table"
    failure: str | None = None  # what could not be computed, and why (see show_failure)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [*DataView.BINDINGS, *TableScreen.BINDINGS]

    def compose(self) -> ComposeResult:
        yield Static(Text(self.TITLE_TEXT), id="table-title", classes="table-title")
        yield FilterBox(placeholder=self.FILTER_HINT, id="table-filter", select_on_focus=False)
        yield DataView(id="table-view")
        if self.SHOW_DETAIL:
            yield Static("", id="table-detail", classes=self.DETAIL_CLASSES)
        yield Footer()

    @property
    def table(self) -> DataView:
        return self.query_one(DataView)

    def on_mount(self) -> None:
        self.table.focus()

    def heading(self) -> Text:
        """The title line; subclasses describe the table and its state."""
        return Text(self.TITLE_TEXT)

    def recolour(self) -> None:
        """The theme changed (the app calls this): the title again (the table redraws itself)."""
        self.refresh_heading()
        if self.failure is not None and self.SHOW_DETAIL:
            self.query_one("#table-detail", Static).update(self.failure_text())

    def show_failure(self, message: str) -> None:
        """The table's data could not be made: the title says what is missing and why, and so
        does the detail pane (where there is one)."""
        self.failure = message
        self.refresh_heading()
        if self.SHOW_DETAIL:
            pane = self.query_one("#table-detail", Static)
            pane.remove_class("nowrap")  # the whole message, however long
            pane.update(self.failure_text())

    def clear_failure(self) -> None:
        """Computing again: the failure said before no longer holds."""
        if self.failure is None:
            return
        self.failure = None
        if self.SHOW_DETAIL:
            pane = self.query_one("#table-detail", Static)
            pane.set_classes(self.DETAIL_CLASSES)
            pane.update("")

    def failure_text(self) -> Text:
        return Text(self.failure or "", palette_of(self).style("error", bold=True))

    def refresh_heading(self) -> None:
        text = self.heading()
        table = self.table
        if table.model is not None:
            model = table.model
            shown = table.row_count
            text.append(
                " · "
                + (
                    f"{shown:,} of {plural(model.n, 'row')}"
                    if shown != model.n
                    else plural(shown, "row")
                )
            )
            column = model.columns[table.sort_column].title
            text.append(f" · by {column} {'↓' if table.sort_descending else '↑'}")
            hidden = table.hidden_columns()
            if hidden:
                # Say what the width left out: nothing else shows that these columns exist.
                # The longest form that fits the title's line (its padding left out).
                room = self.size.width - 2 - text.cell_len
                forms = [
                    f" · hidden at this width: {', '.join(hidden)}",
                    f" · {plural(len(hidden), 'column')} hidden",
                ]
                text.append(next((f for f in forms if len(f) <= room), f" · {len(hidden)} hidden"))
        if table.pattern:
            text.append(" · filter ")
            text.append(clean(table.pattern), "bold")
        if table.filter_error:
            text.append(f" · {table.filter_error}", palette_of(self).style("error", bold=True))
        if self.failure is not None:
            text.append(" · ")
            text.append_text(self.failure_text())
        self.query_one("#table-title", Static).update(text)

    def csv_table(self) -> CsvTable | None:
        """The headless table of what the screen shows (or a function that makes it), its row
        ids the model's (before any `columns.restrict`), or None when there is none (yet)."""
        return None

    def csv_export(self) -> tuple[CsvTable, np.ndarray] | None:
        model = self.table.model
        if model is None:
            return None
        table = self.csv_table()
        if table is None:
            return None
        view = self.table.view
        rows = view if model.source_rows is None else np.asarray(model.source_rows)[view]
        return table, np.array(rows, dtype=np.int64)

    def on_data_view_view_changed(self, message: DataView.ViewChanged) -> None:
        self.refresh_heading()

    def on_data_view_type_ahead(self, message: DataView.TypeAhead) -> None:
        box = self.query_one(FilterBox)
        box.focus()
        box.insert_text_at_cursor(message.character)

    def on_input_changed(self, message: Input.Changed) -> None:
        if message.input.id == "table-filter":
            self.table.set_filter(message.value)

    def on_filter_box_leave(self, message: FilterBox.Leave) -> None:
        self.table.focus()
        box = self.query_one(FilterBox)
        if message.choose and box.value and self.table.filter_error is None:
            self.table.action_choose()

    def action_focus_filter(self) -> None:
        self.query_one(FilterBox).focus()

    def action_back(self) -> None:
        box = self.query_one(FilterBox)
        if box.value:
            box.value = ""
            self.table.focus()
            return
        self.app.pop_screen()

    def on_data_view_highlighted(self, message: DataView.Highlighted) -> None:
        if not self.SHOW_DETAIL or message.row < 0:
            return
        text = self.describe(message.row)
        if text is not None:
            self.query_one("#table-detail", Static).update(text)

    def describe(self, row: int) -> Text | None:
        """The detail pane's text for the highlighted model row (None: leave it as it is)."""
        return None

    def on_data_view_chosen(self, message: DataView.Chosen) -> None:
        self.choose(message.row)

    def choose(self, row: int) -> None:
        """Enter on a model row."""
