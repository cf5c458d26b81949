"""The timeline: one row per lane (or per nesting level of an expanded lane), drawn with
Textual's Line API so that a frame only touches the rows and time range on screen."""

from __future__ import annotations

import math
import time
from typing import ClassVar

import numpy as np
from kinetoscope.analysis.units import fmt_duration, fmt_tick, tick_step
from kinetoscope.tui.data.viewdata import SLOT_KERNEL, DisplayRow, Level, ViewData
from kinetoscope.tui.widgets.render import (
    PLAIN,
    CellRow,
    band_cells,
    cells_to_segments,
    compute_cells,
)
from kinetoscope.tui.widgets.search import highlight_segments
from kinetoscope.tui.widgets.theme import Palette, palette_of
from rich.segment import Segment
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kinetoscope.present.safe_text import fit

MIN_NS_PER_CELL = 1.0
ZOOM_FACTOR = 2.0
PAN_FRACTION = 0.25
DEFAULT_GAP_THRESHOLD = 10_000  # ns: g, G, i and the header's count skip shorter idle gaps


class Timeline(ScrollView, can_focus=True):
    """Lanes of slices against time. State is in reactive attributes; changes go up as messages."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("w", "zoom_in", "Zoom in", tooltip="Zoom in around the cursor"),
        Binding("plus", "zoom_in", "Zoom in", show=False),
        Binding("s", "zoom_out", "Zoom out"),
        Binding("minus", "zoom_out", "Zoom out", show=False),
        Binding("a", "pan_left", "Pan left", show=False),
        Binding("h", "pan_left", "Pan left", show=False),
        Binding("d", "pan_right", "Pan right", show=False),
        Binding("l", "pan_right", "Pan right", show=False),
        Binding("left", "prev_event", "Previous event on the lane", show=False),
        Binding("right", "next_event", "Next event on the lane", show=False),
        Binding("up", "lane_up", "Lane up", show=False),
        Binding("down", "lane_down", "Lane down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("f", "fit_selection", "Fit", show=False, tooltip="Zoom to fit the selected event"),
        Binding("0", "fit_all", "All", show=False, tooltip="Show the whole trace"),
        Binding(
            "home", "trace_edge(0)", "Trace start", show=False, tooltip="Go to the trace's start"
        ),
        Binding("end", "trace_edge(1)", "Trace end", show=False, tooltip="Go to the trace's end"),
        Binding("enter", "toggle_expand", "Expand/collapse lane", show=False),
        Binding(
            "right_square_bracket",
            "flow_forward",
            "Follow flow: launch (or operator) to kernel",
            show=False,
        ),
        Binding(
            "left_square_bracket", "flow_back", "Follow flow back: kernel to launch", show=False
        ),
        Binding("u", "parent", "Parent: kernel to launch to operator … to step", show=False),
        Binding("g", "next_gap", "Next gap", tooltip="Next GPU idle gap after the cursor"),
        Binding("G", "prev_gap", "Previous GPU idle gap", show=False),
        Binding(
            "P",
            "toggle_python",
            "Hide/show Python frames",
            show=False,
            tooltip="Hide python_function slices (operators move up), or show them again",
        ),
    ]

    # View: time of the left edge and nanoseconds per cell (times are ns from the trace start).
    view_start: reactive[float] = reactive(0.0)
    ns_per_cell: reactive[float] = reactive(1000.0)
    cursor_time: reactive[int] = reactive(0)
    cursor_row: reactive[int] = reactive(0)
    selected_row: reactive[int] = reactive(-1)  # trace row, -1 for none
    current_gap: reactive[int] = reactive(-1)  # index into data.gaps, -1 for none
    gap_threshold: reactive[int] = reactive(DEFAULT_GAP_THRESHOLD)  # ns; g/G skip shorter gaps
    marked_range: reactive[tuple[int, int] | None] = reactive(None)  # relative ns, shaded on ruler

    class EventSelected(Message):
        """The selected event changed (row -1: nothing selected)."""

        def __init__(self, row: int) -> None:
            super().__init__()
            self.row = row

    class GapReached(Message):
        """g/G or the gap list moved to an idle gap (index into ViewData.gaps)."""

        def __init__(self, gap: int) -> None:
            super().__init__()
            self.gap = gap

    class Changed(Message):
        """View, cursor or row changed; the status line redraws."""

    class FirstFrame(Message):
        """The first fitted frame is drawn, to its last line; `when` is the wall clock then."""

        def __init__(self, when: float) -> None:
            super().__init__()
            self.when = when

    def __init__(self, data: ViewData | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data: ViewData | None = None
        self.expanded: set[int] = set()
        self.rows: list[DisplayRow] = []
        self._cells: LRUCache[tuple, CellRow] = LRUCache(2048)
        self._strips: LRUCache[tuple, Strip] = LRUCache(1024)
        self._device_levels: dict[int, Level] = {}
        self._changed_pending = False
        self._needs_fit = False
        self._first_frame_posted = False
        self._geometry_cache: tuple = (None, (0, 12, 1))
        self._resized_cells = 0  # the cells width at the last resize (see on_resize)
        self._highlight: np.ndarray | None = None  # search matches: bool per string id
        self._highlight_version = 0
        # The time the ruler calls 0 (relative ns): another timeline's origin, when several
        # timelines of different traces show one window (the job's timeline).
        self.ruler_zero = 0.0
        # The cursor's row is highlighted (off for the job's timelines without focus).
        self.cursor_row_shown = True
        # torch.compile'd regions per CPU group (relative ns, merged): a band on its header row.
        self.compiled_spans: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if data is not None:
            self.set_data(data)

    # -- data and geometry ----------------------------------------------------------------------

    def set_data(self, data: ViewData) -> None:
        self.data = data
        self.expanded = set()
        self._device_levels = {}
        for device in data.idle.devices:
            union = device.busy
            start = union.start - data.origin
            end = union.end - data.origin
            self._device_levels[device.device] = Level(
                rows=np.full(len(start), -1, dtype=np.int64),
                start=start,
                end=end,
                end_max=end,
                cum_dur=np.concatenate(([0], np.cumsum(end - start))),
                slot=np.full(len(start), SLOT_KERNEL, dtype=np.uint8),
            )
        self._rebuild_rows()
        self._cells.clear()
        self._strips.clear()
        first_lane = next((i for i, r in enumerate(self.rows) if not r.is_header), 0)
        self.cursor_row = first_lane
        self._needs_fit = True
        self.call_after_refresh(self._initial_fit)

    def levels_complete(self) -> None:
        """The data's full levels arrived (see ViewData.complete_levels): lay the rows out again
        and redraw, keeping the view, the cursor's lane and the selection."""
        data = self.data
        if data is None:
            return
        current = self.rows[self.cursor_row] if 0 <= self.cursor_row < len(self.rows) else None
        self._rebuild_rows()
        self._cells.clear()
        if current is not None and not current.is_header:
            self.cursor_row = max(0, self._display_index(current.lane, current.level))
        self.refresh()
        self._schedule_changed()

    def levels_pending(self) -> bool:
        """True (and says so) while the slices below the lanes' first levels are being placed."""
        data = self.data
        if data is None or data.complete:
            return False
        self.notify(
            "Still nesting the slices: levels, parents and stacks follow in a moment", timeout=3
        )
        return True

    def cancel_fit(self) -> None:
        """The caller sets the window itself: the data set last is not fitted whole when it is
        first drawn (nor when the widget is resized before then)."""
        self._needs_fit = False

    def _initial_fit(self) -> None:
        if self._needs_fit and self.scrollable_content_region.width > self.label_width + 2:
            self._needs_fit = False
            self.action_fit_all()

    def _rebuild_rows(self) -> None:
        assert self.data is not None
        self.rows = self.data.display_rows(self.expanded)
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)
        self._strips.clear()
        self._schedule_changed()  # the screen gives the details pane the rows left empty

    def _geometry(self) -> tuple[int, int, int]:
        """(content width, label width, cells width); cached because every line needs it."""
        key = (self.size, self.virtual_size, self.show_vertical_scrollbar)
        if self._geometry_cache[0] != key:
            width = self.scrollable_content_region.width
            label = max(12, min(34, width // 4))
            self._geometry_cache = (key, (width, label, max(1, width - label - 1)))
        return self._geometry_cache[1]

    @property
    def content_width(self) -> int:
        return self._geometry()[0]

    @property
    def label_width(self) -> int:
        return self._geometry()[1]

    @property
    def cells_width(self) -> int:
        return self._geometry()[2]

    @property
    def view_end(self) -> float:
        return self.view_start + self.cells_width * self.ns_per_cell

    def time_at_column(self, column: int) -> int:
        """Time at the middle of cell `column` of the time area."""
        return int(self.view_start + (column + 0.5) * self.ns_per_cell)

    def column_of(self, when: float) -> int:
        return math.floor((when - self.view_start) / self.ns_per_cell)

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, len(self.rows) + 1)
        self._strips.clear()
        # The same time range stays on screen at the new width (a fitted trace stays whole):
        # the cells width as of the previous resize (the geometry cache is already the new one).
        old_cells, cells = self._resized_cells, self.cells_width
        self._resized_cells = cells
        if self._needs_fit or self.data is None:
            self._initial_fit()
        elif 0 < old_cells != cells:
            shown = old_cells * self.ns_per_cell
            self.ns_per_cell = min(max(shown / cells, MIN_NS_PER_CELL), self._max_ns_per_cell())
            self._clamp_view()

    # -- change notifications ---------------------------------------------------------------------

    def _schedule_changed(self) -> None:
        if not self._changed_pending:
            self._changed_pending = True
            self.call_after_refresh(self._emit_changed)

    def _emit_changed(self) -> None:
        self._changed_pending = False
        self.post_message(self.Changed())

    def watch_view_start(self) -> None:
        self._schedule_changed()

    def watch_ns_per_cell(self) -> None:
        self._schedule_changed()

    def watch_cursor_time(self) -> None:
        self._schedule_changed()

    def watch_cursor_row(self) -> None:
        self._schedule_changed()

    def watch_gap_threshold(self) -> None:
        self._schedule_changed()

    def watch_selected_row(self, row: int) -> None:
        self.post_message(self.EventSelected(row))
        self._schedule_changed()

    def watch_current_gap(self) -> None:
        self._schedule_changed()

    @property
    def highlight_names(self) -> np.ndarray | None:
        """Search matches drawn highlighted: a bool per string id (event name), or None."""
        return self._highlight

    @highlight_names.setter
    def highlight_names(self, mask: np.ndarray | None) -> None:
        self._highlight = mask
        self._highlight_version += 1
        self.refresh()

    # -- drawing ------------------------------------------------------------------------------

    def recolour(self) -> None:
        """The theme changed (the app calls this): drop the drawn strips and draw again."""
        self._strips.clear()
        self.refresh()

    def _post_first_frame(self, when: float) -> None:
        self.post_message(self.FirstFrame(when))

    def render_line(self, y: int) -> Strip:
        width = self.content_width
        if self.data is None:
            return Strip.blank(width, PLAIN)
        if not self._first_frame_posted and y >= self.size.height - 1 and not self._needs_fit:
            # The last line of the first fitted frame: say so (the loader's next work waits).
            self._first_frame_posted = True
            # Made and posted in the timeline's own turn: a message made here, while the
            # screen composes, would have the screen as its sender and stop there.
            self.call_later(self._post_first_frame, time.time())
        if y == 0:
            return self._ruler_strip(width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self.rows):
            return Strip.blank(width, PLAIN)
        return self._row_strip(index, width)

    def _gap_columns(self, row: DisplayRow | None) -> tuple[int, int] | None:
        gap = self.current_gap
        data = self.data
        if gap < 0 or data is None:
            return None
        start = int(data.gaps.start[gap]) - data.origin
        end = int(data.gaps.end[gap]) - data.origin
        first = self.column_of(start)
        last = max(first + 1, math.ceil((end - self.view_start) / self.ns_per_cell))
        return first, last

    def _view_key(self) -> tuple:
        return (self.view_start, self.ns_per_cell, self.cells_width)

    def _ruler_strip(self, width: int) -> Strip:
        label_w, cells_w = self.label_width, self.cells_width
        per_cell = fmt_duration(self.ns_per_cell, 2) + "/cell"
        chars = [" "] * cells_w
        step = tick_step(self.ns_per_cell)
        zero = self.ruler_zero
        first_tick = math.ceil((self.view_start - zero) / step) * step + zero
        tick = first_tick
        while tick < self.view_end:
            col = self.column_of(tick)
            if 0 <= col < cells_w:
                text = "╵" + fmt_tick(int(tick - zero), step)
                for i, ch in enumerate(text):
                    if col + i < cells_w:
                        chars[col + i] = ch
            tick += step
        palette = palette_of(self)
        ruler, separator = palette.style("muted"), palette.style("rule")
        segments = [Segment(fit(per_cell, label_w), ruler), Segment("│", separator)]
        cursor_col = self.column_of(self.cursor_time)
        gap_cols = self._gap_columns(None)
        mark = self.marked_range
        mark_cols = None
        if mark is not None:
            mark_cols = (
                self.column_of(mark[0]),
                max(self.column_of(mark[1]), self.column_of(mark[0])) + 1,
            )
        for col in range(cells_w):
            style = ruler
            char = chars[col]
            if col == cursor_col:
                # Over a tick label the cursor shows as a highlighted digit, never hiding it.
                if char == " ":
                    style, char = palette.style("cursor", bold=True), "▼"
                else:
                    style = palette.style("ink", "cursor", bold=True)
            elif gap_cols and gap_cols[0] <= col < gap_cols[1]:
                style = palette.style("muted", "gap")
            elif mark_cols and mark_cols[0] <= col < mark_cols[1]:
                style = palette.style("ink", "marked")
            segments.append(Segment(char, style))
        return Strip(segments, label_w + 1 + cells_w).simplify().adjust_cell_length(width, PLAIN)

    def _cells_for(self, key: tuple, level: Level) -> CellRow:
        cached = self._cells.get(key)
        if cached is None:
            cached = compute_cells(level, self.view_start, self.ns_per_cell, self.cells_width)
            self._cells[key] = cached
        return cached

    def _row_strip(self, index: int, width: int) -> Strip:
        data = self.data
        assert data is not None
        row = self.rows[index]
        current = index == self.cursor_row and self.cursor_row_shown
        cursor_col = self.column_of(self.cursor_time)
        selected = self.selected_row
        sel_lane, sel_level, sel_entry = (
            data.level_of_row(selected) if selected >= 0 else (-1, -1, -1)
        )
        on_row = (sel_lane, sel_level) == (row.lane, row.level) and not row.is_header
        palette = palette_of(self)
        key = (
            row,
            self._view_key(),
            current,
            cursor_col,
            sel_entry if on_row else -1,
            self.current_gap,
            self._highlight_version,
            index in self.expanded,
            self.label_width,
            width,
            palette,
        )
        cached = self._strips.get(key)
        if cached is not None:
            return cached
        label = self._label_segments(row, current)
        if row.is_header:
            group = data.groups[row.group]
            device = data.lanes[group.lanes[0]].device if group.is_gpu else None
            level = self._device_levels.get(device) if device is not None else None
            if level is None and row.group in self.compiled_spans:
                body = self._compiled_band(self.compiled_spans[row.group], palette)
            elif level is None:
                body = [Segment("─" * self.cells_width, palette.style("rule"))]
            else:
                cells = self._cells_for(("device", device) + self._view_key(), level)
                body = cells_to_segments(
                    cells,
                    level,
                    lambda _row: "",
                    cursor_col=cursor_col,
                    gap_cols=self._gap_columns(row),
                    current_row=False,
                    palette=palette,
                )
        else:
            level = data.lanes[row.lane].levels[row.level]
            cells = self._cells_for((row.lane, row.level) + self._view_key(), level)
            entry = sel_entry if on_row else -1
            if entry >= 0:
                cells = self._force_selected(cells, level, entry)
            body = cells_to_segments(
                cells,
                level,
                data.trace.name_of,
                selected_entry=entry,
                cursor_col=cursor_col,
                gap_cols=self._gap_columns(row),
                current_row=current,
                palette=palette,
            )
            body = self.decorate_row(body, cells, level, entry, palette)
        separator = Segment("│", palette.style("rule"))
        strip = Strip(label + [separator] + body).adjust_cell_length(width, PLAIN)
        self._strips[key] = strip
        return strip

    def set_compiled_spans(self, spans: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        """Mark these spans (per group: merged starts, ends, relative ns) on the groups'
        header rows as compiled code, and redraw."""
        self.compiled_spans = spans
        self._strips.clear()
        self.refresh()

    def _compiled_band(
        self, spans: tuple[np.ndarray, np.ndarray], palette: Palette
    ) -> list[Segment]:
        """A CPU group's header: `━` where compiled regions run (named where wide enough),
        the rule elsewhere; O(width) (render.band_cells)."""
        width = self.cells_width
        band = band_cells(spans[0], spans[1], self.view_start, self.ns_per_cell, width)
        compiled, rule = palette.style("compiled", bold=True), palette.style("rule")
        segments: list[Segment] = []
        change = np.flatnonzero(np.diff(band.astype(np.int8))) + 1
        for a, b in zip([0, *change.tolist()], [*change.tolist(), width]):
            if not band[a]:
                segments.append(Segment("─" * (b - a), rule))
            elif b - a >= 12:
                label = " compiled "
                segments.append(Segment("━" + label + "━" * (b - a - 1 - len(label)), compiled))
            else:
                segments.append(Segment("━" * (b - a), compiled))
        return segments

    def decorate_row(
        self, body: list[Segment], cells: CellRow, level: Level, entry: int, palette: Palette
    ) -> list[Segment]:
        """A lane row's drawn cells, restyled: the search matches highlighted (all but the
        selected `entry`). A subclass may mark more (the diff's added and removed kernels);
        what it marks must change `_highlight_version` (the drawn rows are cached by it)."""
        if self._highlight is None or self.data is None:
            return body
        names = self.data.trace.name
        return highlight_segments(body, cells, level, names, self._highlight, entry, palette)

    def _force_selected(self, cells: CellRow, level: Level, entry: int) -> CellRow:
        """Draw the selected slice over every cell it touches, even where others dominate."""
        first = self.column_of(int(level.start[entry]))
        last = max(
            first + 1, math.ceil((int(level.end[entry]) - self.view_start) / self.ns_per_cell)
        )
        first, last = max(first, 0), min(last, len(cells.entry))
        if last <= first:
            return cells
        forced = CellRow(cells.entry.copy(), cells.busy.copy(), cells.count)
        forced.entry[first:last] = entry
        forced.busy[first:last] = 1.0
        return forced

    def _label_segments(self, row: DisplayRow, current: bool) -> list[Segment]:
        data = self.data
        assert data is not None
        width = self.label_width
        if row.is_header:
            group = data.groups[row.group]
            style = palette_of(self).style("gpu" if group.is_gpu else "cpu", bold=True)
            return [Segment(fit(group.label, width), style)]
        lane = data.lanes[row.lane]
        deep = lane.expandable
        if row.level == 0:
            marker = ("▾" if row.lane in self.expanded else "▸") if deep else " "
            text = f" {marker}{lane.short_label}"
        else:
            text = f"   └{row.level}"
        palette = palette_of(self)
        style = palette.style("ink", "cursor", bold=True) if current else palette.style("label")
        return [Segment(fit(text, width), style)]

    # -- navigation helpers -----------------------------------------------------------------------

    def _clamp_view(self) -> None:
        data = self.data
        if data is None:
            return
        # The view stays on the trace: it starts at or after the trace's start and ends at or
        # before its end; zoomed out past the whole trace, the whole trace stays on screen.
        visible = self.cells_width * self.ns_per_cell
        low, high = sorted((0.0, data.span - visible))
        self.view_start = float(min(max(self.view_start, low), high))

    def _max_ns_per_cell(self) -> float:
        assert self.data is not None
        return max(MIN_NS_PER_CELL, 2.0 * self.data.span / self.cells_width)

    def set_view(self, start: float, end: float) -> None:
        """Show the time range [start, end) (relative ns) across the time area."""
        span = max(end - start, MIN_NS_PER_CELL * self.cells_width)
        self.ns_per_cell = min(
            max(span / self.cells_width, MIN_NS_PER_CELL), self._max_ns_per_cell()
        )
        middle = (start + end) / 2
        self.view_start = middle - self.cells_width * self.ns_per_cell / 2
        self._strips.clear()

    def _ensure_time_visible(self, when: int) -> None:
        if not (self.view_start <= when < self.view_end):
            self.view_start = when - self.cells_width * self.ns_per_cell / 3
            self._clamp_view()

    def _ensure_row_visible(self) -> None:
        height = self.scrollable_content_region.height - 1  # the ruler takes one line
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + height:
            self.scroll_to(y=self.cursor_row - height + 1, animate=False, immediate=True)

    def _display_index(self, lane: int, level: int) -> int:
        for index, row in enumerate(self.rows):
            if row.lane == lane and row.level == level:
                return index
        return -1

    def select(self, row: int, *, move_cursor: bool = True) -> None:
        """Select a trace row: expand its lane if needed, move the cursor and scroll to it."""
        data = self.data
        if data is None or row < 0:
            self.selected_row = -1
            return
        lane, level, _ = data.level_of_row(row)
        if lane < 0:
            return
        if level > 0 and lane not in self.expanded:
            self.expanded.add(lane)
            self._rebuild_rows()
        index = self._display_index(lane, level)
        if index >= 0:
            self.cursor_row = index
        self.selected_row = row
        if move_cursor:
            self.cursor_time = data.rel_start(row)
            self._ensure_time_visible(self.cursor_time)
        self._ensure_row_visible()
        # Expanding a lane grows the scrollable height only at the next layout, and a scroll
        # past the old height is clamped: scroll again once the new rows are laid out.
        self.call_after_refresh(self._ensure_row_visible)
        self.refresh()

    def event_under_cursor(self, index: int | None = None) -> int:
        """The trace row drawn at the cursor time on display row `index` (default: cursor row)."""
        data = self.data
        index = self.cursor_row if index is None else index
        if data is None or not (0 <= index < len(self.rows)) or self.rows[index].is_header:
            return -1
        row = self.rows[index]
        level = data.lanes[row.lane].levels[row.level]
        when = self.cursor_time
        k = int(np.searchsorted(level.start, when, "right")) - 1
        while k >= 0 and level.end_max[k] > when:
            if level.start[k] <= when < level.end[k]:
                return int(level.rows[k])
            k -= 1
        return -1

    def _current_level(self) -> Level | None:
        if self.data is None or not self.rows:
            return None
        row = self.rows[self.cursor_row]
        if row.is_header:
            return None
        return self.data.lanes[row.lane].levels[row.level]

    def _leave_gap(self) -> None:
        self.current_gap = -1

    # -- actions ----------------------------------------------------------------------------------

    def _zoom(self, factor: float, around: float | None = None) -> None:
        if self.data is None:
            return
        anchor = float(self.cursor_time if around is None else around)
        if not (self.view_start <= anchor < self.view_end):
            anchor = self.view_start + self.cells_width * self.ns_per_cell / 2
            self.cursor_time = int(anchor)
        column = (anchor - self.view_start) / self.ns_per_cell
        new = min(max(self.ns_per_cell * factor, MIN_NS_PER_CELL), self._max_ns_per_cell())
        self.ns_per_cell = new
        self.view_start = anchor - column * new
        self._clamp_view()

    def action_zoom_in(self) -> None:
        self._zoom(1 / ZOOM_FACTOR)

    def action_zoom_out(self) -> None:
        self._zoom(ZOOM_FACTOR)

    def _pan(self, direction: int) -> None:
        if self.data is None:
            return
        before = self.view_start
        self.view_start = before + direction * self.cells_width * self.ns_per_cell * PAN_FRACTION
        self._clamp_view()
        self.cursor_time = int(self.cursor_time + (self.view_start - before))
        self._leave_gap()

    def action_pan_left(self) -> None:
        self._pan(-1)

    def action_pan_right(self) -> None:
        self._pan(1)

    def _step_event(self, direction: int) -> None:
        level = self._current_level()
        if level is None or not len(level):
            return
        data = self.data
        assert data is not None
        selected = self.selected_row
        lane, lvl, entry = data.level_of_row(selected) if selected >= 0 else (-1, -1, -1)
        row = self.rows[self.cursor_row]
        if (lane, lvl) == (row.lane, row.level) and entry >= 0:
            target = entry + direction
        elif direction > 0:
            target = int(np.searchsorted(level.start, self.cursor_time, "left"))
            under = self.event_under_cursor() if target == len(level) else -1
            if under >= 0:  # none starts after the cursor: the slice under it (`<module>`)
                self._leave_gap()
                self.select(under)
                return
        else:
            target = int(np.searchsorted(level.start, self.cursor_time, "left")) - 1
        if not (0 <= target < len(level)):
            self.notify("No more events on this lane", timeout=2)
            return
        self._leave_gap()
        self.select(int(level.rows[target]))

    def action_prev_event(self) -> None:
        self._step_event(-1)

    def action_next_event(self) -> None:
        self._step_event(1)

    def _move_row(self, direction: int, step: int = 1) -> None:
        if not self.rows:
            return
        index = self.cursor_row
        target = index
        moved = 0
        probe = index
        while moved < step:
            probe += direction
            if not (0 <= probe < len(self.rows)):
                break
            if not self.rows[probe].is_header:
                target = probe
                moved += 1
        if target == index:
            return
        self.cursor_row = target
        self.selected_row = self.event_under_cursor(target)
        self._ensure_row_visible()

    def action_lane_up(self) -> None:
        self._move_row(-1)

    def action_lane_down(self) -> None:
        self._move_row(1)

    def action_page_up(self) -> None:
        self._move_row(-1, max(1, self.scrollable_content_region.height - 2))

    def action_page_down(self) -> None:
        self._move_row(1, max(1, self.scrollable_content_region.height - 2))

    def action_fit_selection(self) -> None:
        data = self.data
        if data is None:
            return
        if self.selected_row < 0:
            self.notify("Nothing selected: ←/→ or a click selects an event", timeout=3)
            return
        start, end = data.rel_start(self.selected_row), data.rel_end(self.selected_row)
        margin = max((end - start) * 0.1, MIN_NS_PER_CELL)
        self.set_view(start - margin, end + margin)
        self.cursor_time = start

    def action_trace_edge(self, end: int) -> None:
        """Home/End: the trace's first (or last) nanosecond under the cursor, at the view's
        left (or right) edge, at the same zoom."""
        data = self.data
        if data is None:
            return
        self._leave_gap()
        if end:
            self.view_start = data.span - (self.cells_width - 1) * self.ns_per_cell
            self.cursor_time = max(0, data.span - 1)
        else:
            self.view_start = 0.0
            self.cursor_time = 0
        self._clamp_view()

    def action_fit_all(self) -> None:
        data = self.data
        if data is None:
            return
        self.ns_per_cell = max(MIN_NS_PER_CELL, data.span / max(self.cells_width - 1, 1))
        self.view_start = 0.0
        if not (0 <= self.cursor_time <= data.span):
            self.cursor_time = 0

    def action_toggle_python(self) -> None:
        """Leave the python_function slices out of the lanes (the operators below them move up
        to the levels they left), or put them back; the cursor stays on its lane."""
        data = self.data
        if data is None or self.levels_pending():
            return
        if not data.hide_python and not data.python_rows().any():
            self.notify(
                "This trace has no Python frames (python_function slices: recorded with "
                "with_stack=True): P has nothing to hide",
                timeout=4,
            )
            return
        current = self.rows[self.cursor_row] if 0 <= self.cursor_row < len(self.rows) else None
        data.set_hide_python(not data.hide_python)
        self.expanded = {lane for lane in self.expanded if data.lanes[lane].expandable}
        self._rebuild_rows()
        self._cells.clear()
        selected = self.selected_row
        if selected >= 0 and data.row_lane[selected] < 0:  # a Python frame: not drawn now
            selected = self.selected_row = -1
        if selected >= 0:
            self.select(selected, move_cursor=False)
        elif current is not None and not current.is_header:
            level = min(current.level, len(data.lanes[current.lane].levels) - 1)
            level = level if current.lane in self.expanded else 0
            self.cursor_row = max(0, self._display_index(current.lane, level))
            self._ensure_row_visible()
        self.refresh()
        self._schedule_changed()
        if data.hide_python:
            self.notify("Python frames hidden (P shows them)", timeout=3)
        else:
            self.notify("Python frames shown", timeout=2)

    def action_toggle_expand(self) -> None:
        data = self.data
        if data is None or not self.rows:
            return
        row = self.rows[self.cursor_row]
        if row.is_header:
            return
        lane = row.lane
        if not data.lanes[lane].expandable:
            self.notify("This lane has a single level", timeout=2)
            return
        if self.levels_pending():
            return
        if lane in self.expanded:
            self.expanded.discard(lane)
            level = 0
        else:
            self.expanded.add(lane)
            level = row.level
        self._rebuild_rows()
        self.cursor_row = self._display_index(lane, level)
        selected = self.selected_row
        hidden = selected >= 0 and data.level_of_row(selected)[1] > 0 and lane not in self.expanded
        if hidden and data.level_of_row(selected)[0] == lane:
            self.selected_row = self.event_under_cursor()
        self._ensure_row_visible()
        self.refresh()

    def action_flow_forward(self) -> None:
        data = self.data
        row = self.selected_row
        if data is None or row < 0:
            self.notify("Select a launch or an operator first", timeout=2)
            return
        if not len(data.kernels_of(row)) and self.levels_pending():
            return
        launch = row if len(data.kernels_of(row)) else data.first_launch_below(row)
        kernels = data.kernels_of(launch) if launch >= 0 else []
        if not len(kernels):
            self.notify("No GPU work launched from here", timeout=2)
            return
        self._leave_gap()
        self.select(int(kernels[0]))

    def action_flow_back(self) -> None:
        data = self.data
        row = self.selected_row
        if data is None or row < 0:
            self.notify("Select a kernel first", timeout=2)
            return
        launch = data.launch_of(row)
        if launch < 0:
            self.notify("No launch linked to this event", timeout=2)
            return
        self._leave_gap()
        self.select(launch)

    def action_parent(self) -> None:
        data = self.data
        row = self.selected_row
        if data is None or row < 0:
            self.notify("Nothing selected", timeout=2)
            return
        if self.levels_pending():
            return
        parent = data.parent_of(row)
        if parent < 0:
            self.notify("Already at the top", timeout=2)
            return
        self._leave_gap()
        self.select(parent)

    def _jump_gap(self, forward: bool) -> None:
        data = self.data
        if data is None:
            return
        when = self.cursor_time + data.origin
        gaps = data.gaps
        if forward:
            gap = gaps.next_gap(when, min_len=self.gap_threshold)
        else:
            gap = gaps.prev_gap(when, min_len=self.gap_threshold)
        if gap < 0:
            word = "after" if forward else "before"
            self.notify(
                f"No GPU idle gap ≥ {fmt_duration(self.gap_threshold)} {word} the cursor",
                timeout=3,
            )
            return
        self.go_to_gap(gap)

    def go_to_gap(self, gap: int) -> None:
        """Centre an idle gap with the GPU work on both sides of it, and select the work after."""
        data = self.data
        assert data is not None
        start = int(data.gaps.start[gap]) - data.origin
        end = int(data.gaps.end[gap]) - data.origin
        length = end - start
        next_row = int(data.gaps.next_row[gap])
        before = start
        device = int(data.gaps.device[gap])
        level = self._device_levels.get(device)
        if level is not None and len(level):
            k = int(np.searchsorted(level.end, start, "left"))
            if 0 <= k < len(level):
                before = int(level.start[k])
        after = data.rel_end(next_row)
        # Neighbours may be long: keep the gap at least a third of the view.
        left = max(before, start - length)
        right = min(after, end + length)
        margin = (right - left) * 0.1
        self.set_view(left - margin, right + margin)
        self.select(next_row, move_cursor=False)
        self.cursor_time = start
        self.current_gap = gap
        self.post_message(self.GapReached(gap))

    def action_next_gap(self) -> None:
        self._jump_gap(True)

    def action_prev_gap(self) -> None:
        self._jump_gap(False)

    # -- mouse --------------------------------------------------------------------------------------

    def _row_at(self, y: int) -> int:
        return int(self.scroll_offset.y) + y - 1

    def on_click(self, event: events.Click) -> None:
        if self.data is None:
            return
        x, y = event.x, event.y
        column = x - self.label_width - 1
        if y > 0:
            index = self._row_at(y)
            if not (0 <= index < len(self.rows)) or self.rows[index].is_header:
                return
            if column < 0:
                self.cursor_row = index
                self.action_toggle_expand()
                return
            self.cursor_row = index
        if column >= 0:
            self.cursor_time = self.time_at_column(column)
            self._leave_gap()
        if y > 0:
            self.selected_row = self.event_under_cursor()
        self.focus()

    def _wheel_zoom(self, event: events.MouseEvent, factor: float) -> bool:
        if self.data is None or not (event.ctrl or event.y == 0):
            return False
        column = event.x - self.label_width - 1
        anchor = self.time_at_column(column) if column >= 0 else None
        if anchor is not None:
            self.cursor_time = anchor
        self._zoom(factor, anchor)
        event.prevent_default()
        event.stop()
        return True

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._wheel_zoom(event, 1 / ZOOM_FACTOR)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._wheel_zoom(event, ZOOM_FACTOR)

    def on_mouse_scroll_left(self, event: events.MouseScrollLeft) -> None:
        event.prevent_default()
        self._pan(-1)

    def on_mouse_scroll_right(self, event: events.MouseScrollRight) -> None:
        event.prevent_default()
        self._pan(1)
