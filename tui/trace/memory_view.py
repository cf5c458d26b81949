"""The memory view (`p`): each device's allocated and reserved bytes over the timeline's time
axis, the peak marked, the live bytes under a cursor, and the operators that allocated most.

Enter on the curve goes back to the timeline at the cursor's time (same zoom), selecting the
innermost operator running there on the thread of the last allocation; Enter on a table row
goes to that operator's instance (or allocation)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from kinetoscope.analysis.memory_ops import (
    FREED,
    HOW_TO_RECORD,
    NEVER_FREED,
    DeviceMemory,
    MemoryOps,
    cpu_lanes_for,
)
from kinetoscope.analysis.session import AnalysisFailed
from kinetoscope.analysis.units import fmt_bytes, fmt_duration, fmt_tick, plural, tick_step
from kinetoscope.parser.model import NO_VALUE
from kinetoscope.tui.data.failures import ReportsWorkerFailures
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.widgets.render import PLAIN
from kinetoscope.tui.widgets.table import SAVE_CSV_BINDING, SavesCsv
from kinetoscope.tui.widgets.theme import palette_of
from kinetoscope.tui.widgets.timefmt import time_cell
from rich.cells import cell_len
from rich.segment import Segment
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Static

from kinetoscope.present.safe_text import fit, fit_name
from kinetoscope.present.tables import Table, memory_operators_table, never_freed_table

ZOOM_FACTOR = 2.0
PAN_FRACTION = 0.25
MIN_NS_PER_CELL = 1.0
TABLE_LIMIT = 500
CELL_PADDING = 2  # a DataTable cell's padding, one cell each side
SCROLLBAR = 2  # the table's vertical scrollbar
NAME_LEAST = 24  # cells a name column keeps before the table's other columns give way

EIGHTHS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class TimelineTarget:
    """Where the timeline should go: select `row` (-1: none), show [view_start, view_end) and
    put the cursor at `cursor` (absolute ns; None leaves them)."""

    row: int = -1
    cursor: int | None = None
    view_start: float | None = None
    view_end: float | None = None


def memory_ops_for(data: ViewData) -> MemoryOps:
    """The trace's MemoryOps, from the TraceSession the drill-down screens share (computed once)."""
    return data.session.memory_ops


def target_at(data: ViewData, device: DeviceMemory, when: int) -> int:
    """The innermost CPU slice running at `when` (absolute ns) on the thread of the last memory
    event at or before it, or -1."""
    last = device.level_at(when)
    if last < 0:
        return -1
    lane = cpu_lanes_for(data.trace, data.nesting, data.trace.memory.lane[device.events[[last]]])
    pos = data.nesting.innermost(data.trace, lane, np.array([when]))
    return int(data.nesting.order[pos[0]]) if pos[0] >= 0 else -1


class MemoryChart(Widget, can_focus=True):
    """The curve of one device: a ruler line, then the allocated bytes as a filled area (in
    eighths of a cell) over the reserved bytes (shaded background), with a cursor column."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "move(-1)", "Cursor left", show=False),
        Binding("right", "move(1)", "Cursor right", show=False),
        Binding("shift+left", "move(-10)", "Cursor 10 cells left", show=False),
        Binding("shift+right", "move(10)", "Cursor 10 cells right", show=False),
        Binding("left_square_bracket", "event(-1)", "Previous memory event", show=False),
        Binding("right_square_bracket", "event(1)", "Next memory event", show=False),
        Binding("w", "zoom(0.5)", "Zoom in", show=False),
        Binding("plus", "zoom(0.5)", "Zoom in", show=False),
        Binding("s", "zoom(2)", "Zoom out", show=False),
        Binding("minus", "zoom(2)", "Zoom out", show=False),
        Binding("a", "pan(-1)", "Pan left", show=False),
        Binding("h", "pan(-1)", "Pan left", show=False),
        Binding("d", "pan(1)", "Pan right", show=False),
        Binding("l", "pan(1)", "Pan right", show=False),
        Binding("0", "fit_all", "All", show=False),
        Binding("p", "peak", "Peak", tooltip="Cursor to the allocated peak"),
        Binding("enter", "jump", "Timeline", tooltip="Go to the timeline at the cursor"),
    ]

    DEFAULT_CSS = """
    MemoryChart { height: 1fr; min-height: 6; }
    """

    view_start: reactive[float] = reactive(0.0)  # ns from the trace origin, like the timeline
    ns_per_cell: reactive[float] = reactive(1000.0)
    cursor_time: reactive[int] = reactive(0)

    class CursorMoved(Message):
        def __init__(self, when: int) -> None:
            super().__init__()
            self.when = when  # relative ns

    class JumpRequested(Message):
        def __init__(self, when: int) -> None:
            super().__init__()
            self.when = when  # relative ns

    def __init__(self, data: ViewData, *, label_width: int = 20, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data = data
        self.device: DeviceMemory | None = None
        self.label_width = label_width
        self._columns: LRUCache[tuple, tuple[np.ndarray, np.ndarray]] = LRUCache(16)

    # -- geometry ---------------------------------------------------------------------------

    @property
    def cells_width(self) -> int:
        return max(1, self.size.width - self.label_width - 1)

    @property
    def view_end(self) -> float:
        return self.view_start + self.cells_width * self.ns_per_cell

    def column_of(self, when: float) -> int:
        return math.floor((when - self.view_start) / self.ns_per_cell)

    def time_at_column(self, column: int) -> int:
        return int(self.view_start + (column + 0.5) * self.ns_per_cell)

    def set_device(self, device: DeviceMemory | None) -> None:
        self.device = device
        self._columns.clear()
        self.refresh()

    def set_view(self, start: float, end: float) -> None:
        span = max(end - start, MIN_NS_PER_CELL * self.cells_width)
        self.ns_per_cell = max(span / self.cells_width, MIN_NS_PER_CELL)
        self.view_start = (start + end) / 2 - self.cells_width * self.ns_per_cell / 2

    # The view stays on the trace: it starts at 0 when the whole trace fits, and never shows
    # time before the trace's start or after its end (the curve has nothing there).

    def _span(self) -> float:
        return float(max(self.data.span, 1))

    def validate_ns_per_cell(self, value: float) -> float:
        largest = max(MIN_NS_PER_CELL, self._span() / self.cells_width)
        return min(max(value, MIN_NS_PER_CELL), largest)

    def validate_view_start(self, value: float) -> float:
        room = self._span() - self.cells_width * self.ns_per_cell
        return float(min(max(value, 0.0), max(room, 0.0)))

    def validate_cursor_time(self, value: int) -> int:
        return int(min(max(value, 0), self.data.span))

    def watch_view_start(self) -> None:
        self.refresh()

    def watch_ns_per_cell(self) -> None:
        self.view_start = self.view_start  # clamped again for the new scale
        self.refresh()

    def on_resize(self) -> None:
        self.ns_per_cell = self.ns_per_cell
        self.view_start = self.view_start

    def watch_cursor_time(self, when: int) -> None:
        self.refresh()
        self.post_message(self.CursorMoved(when))

    def column_values(self) -> tuple[np.ndarray, np.ndarray]:
        """Per cell: the largest allocated and reserved bytes (NO_VALUE: no data yet)."""
        device = self.device
        width = self.cells_width
        if device is None or not len(device):
            empty = np.full(width, NO_VALUE, dtype=np.int64)
            return empty, empty
        key = (id(device), self.view_start, self.ns_per_cell, width)
        cached = self._columns.get(key)
        if cached is None:
            origin = self.data.origin
            edges = np.floor(
                origin + self.view_start + np.arange(width + 1, dtype=np.float64) * self.ns_per_cell
            ).astype(np.int64)
            cached = device.column_max(edges)
            self._columns[key] = cached
        return cached

    def scale_top(self) -> int:
        """Bytes at the top of the chart: the larger peak (allocated or reserved), at least 1."""
        device = self.device
        if device is None or not len(device):
            return 1
        top = int(device.allocated.max())
        if device.peak_reserved >= 0:
            top = max(top, int(device.reserved[device.peak_reserved]))
        return max(top, 1)

    # -- drawing ----------------------------------------------------------------------------

    def recolour(self) -> None:
        """The theme changed (the app calls this): draw again (no strips are kept)."""
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            return self._ruler(width)
        if self.device is None or not len(self.device):
            # The hint, a clause per line so that it fits narrow terminals.
            first, _, rest = HOW_TO_RECORD.partition(" Record")
            how, _, alternative = ("Record" + rest).partition(" or ")
            lines = {2: first, 3: how, 4: "or " + alternative}
            if y in lines:
                muted = palette_of(self).style("muted")
                return Strip([Segment(fit("  " + lines[y], width), muted)])
            return Strip.blank(width, PLAIN)
        rows = max(1, self.size.height - 1)
        return self._curve_row(y - 1, rows, width)

    def _ruler(self, width: int) -> Strip:
        cells_w = self.cells_width
        chars = [" "] * cells_w
        step = tick_step(self.ns_per_cell)
        tick = math.ceil(self.view_start / step) * step
        while tick < self.view_end:
            col = self.column_of(tick)
            if 0 <= col < cells_w:
                for i, ch in enumerate("╵" + fmt_tick(int(tick), step)):
                    if col + i < cells_w:
                        chars[col + i] = ch
            tick += step
        palette = palette_of(self)
        axis = palette.style("muted")
        styles = [axis] * cells_w
        device = self.device
        if device is not None and device.peak >= 0:
            peak_col = self.column_of(int(device.ts[device.peak]) - self.data.origin)
            if 0 <= peak_col < cells_w and chars[peak_col] == " ":
                chars[peak_col], styles[peak_col] = "◆", palette.style("error", bold=True)
            elif 0 <= peak_col < cells_w:  # over a tick label: highlight, never hide it
                styles[peak_col] = palette.style("ink", "error", bold=True)
        cursor_col = self.column_of(self.cursor_time)
        if 0 <= cursor_col < cells_w:
            if chars[cursor_col] == " ":
                chars[cursor_col], styles[cursor_col] = "▼", palette.style("cursor", bold=True)
            else:  # over a tick label: highlight the character, never hide it
                styles[cursor_col] = palette.style("ink", "cursor", bold=True)
        label = fit(fmt_duration(self.ns_per_cell, 2) + "/cell", self.label_width)
        segments = [Segment(label, axis), Segment("│", palette.style("rule"))]
        segments += [Segment(ch, st) for ch, st in zip(chars, styles)]
        return Strip(segments).simplify().adjust_cell_length(width, PLAIN)

    def row_bytes(self, row: int, rows: int) -> int:
        """The bytes at the top edge of chart row `row` (0: the top one) of `rows`: what a
        column reaches when its cell in that row is full (the top row: the scale's top)."""
        return round(self.scale_top() * (rows - row) / rows)

    def axis_rows(self, rows: int) -> dict[int, str]:
        """The axis labels by chart row: the top row's top edge (the scale's top), the middle
        row's (rows // 2; half the top exactly when `rows` is even), and the baseline (0 B) on
        the bottom row; the same at every zoom (the scale is the device's, not the view's)."""
        labels = {0: fmt_bytes(self.row_bytes(0, rows)), rows - 1: fmt_bytes(0)}
        if rows >= 5:
            labels[rows // 2] = fmt_bytes(self.row_bytes(rows // 2, rows))
        return labels

    def _axis_label(self, row: int, rows: int) -> str:
        return self.axis_rows(rows).get(row, "")

    def _curve_row(self, row: int, rows: int, width: int) -> Strip:
        alloc, reserved = self.column_values()
        top = self.scale_top()
        eighths = rows * 8
        level_a = np.where(alloc == NO_VALUE, -1, np.ceil(alloc / top * eighths)).astype(np.int64)
        level_r = np.where(reserved == NO_VALUE, -1, np.ceil(reserved / top * eighths)).astype(
            np.int64
        )
        base = (rows - 1 - row) * 8
        fill = np.clip(level_a - base, 0, 8)
        in_reserved = level_r > base
        cursor_col = self.column_of(self.cursor_time)
        peak_col = -1
        device = self.device
        if device is not None and device.peak >= 0:
            peak_col = self.column_of(int(device.ts[device.peak]) - self.data.origin)
        palette = palette_of(self)
        axis_label = self._axis_label(row, rows).rjust(self.label_width)[-self.label_width :]
        segments = [
            Segment(axis_label, palette.style("muted")),
            Segment("│", palette.style("rule")),
        ]
        for col in range(len(fill)):
            char = EIGHTHS[int(fill[col])]
            colour, bold = ("error", True) if col == peak_col else ("allocated", False)
            if col == cursor_col:
                style = palette.style(colour, "memory-cursor", bold=bold)
            elif in_reserved[col] and fill[col] < 8:
                style = palette.style(colour, "reserved", bold=bold)
            else:
                style = palette.style(colour, bold=bold)
            segments.append(Segment(char, style))
        return Strip(segments).simplify().adjust_cell_length(width, PLAIN)

    # -- actions ----------------------------------------------------------------------------

    def _keep_cursor_visible(self) -> None:
        if not (self.view_start <= self.cursor_time < self.view_end):
            self.view_start = self.cursor_time - self.cells_width * self.ns_per_cell / 2

    def action_move(self, cells: int) -> None:
        column = self.column_of(self.cursor_time) + cells
        self.cursor_time = self.time_at_column(column)
        self._keep_cursor_visible()

    def action_event(self, direction: int) -> None:
        device = self.device
        if device is None or not len(device):
            return
        now = self.cursor_time + self.data.origin
        if direction > 0:
            k = int(np.searchsorted(device.ts, now, side="right"))
        else:
            k = int(np.searchsorted(device.ts, now, side="left")) - 1
        if not (0 <= k < len(device)):
            self.notify("No more memory events that way", timeout=2)
            return
        self.cursor_time = int(device.ts[k]) - self.data.origin
        self._keep_cursor_visible()

    def action_zoom(self, factor: float) -> None:
        anchor = float(self.cursor_time)
        if not (self.view_start <= anchor < self.view_end):
            anchor = self.view_start + self.cells_width * self.ns_per_cell / 2
        column = (anchor - self.view_start) / self.ns_per_cell
        largest = max(MIN_NS_PER_CELL, 2.0 * self.data.span / self.cells_width)
        self.ns_per_cell = min(max(self.ns_per_cell * factor, MIN_NS_PER_CELL), largest)
        self.view_start = anchor - column * self.ns_per_cell

    def action_pan(self, direction: int) -> None:
        before = self.view_start
        self.view_start += direction * self.cells_width * self.ns_per_cell * PAN_FRACTION
        self.cursor_time = int(self.cursor_time + self.view_start - before)

    def action_fit_all(self) -> None:
        self.ns_per_cell = max(MIN_NS_PER_CELL, self.data.span / max(self.cells_width - 1, 1))
        self.view_start = 0.0

    def action_peak(self) -> None:
        device = self.device
        if device is None or device.peak < 0:
            self.notify("No memory events on this device", timeout=2)
            return
        self.cursor_time = int(device.ts[device.peak]) - self.data.origin
        self._keep_cursor_visible()

    def action_jump(self) -> None:
        self.post_message(self.JumpRequested(self.cursor_time))

    def on_click(self, event: events.Click) -> None:
        column = event.x - self.label_width - 1
        if column >= 0:
            self.cursor_time = self.time_at_column(column)
        self.focus()


class MemoryScreen(SavesCsv, ReportsWorkerFailures, Screen[TimelineTarget | None]):
    """Curves per device, the reading under the cursor, and a table of operators (or of
    allocations never freed). Dismisses with where the timeline should go, or None."""

    CSS_PATH = str(
        Path(__file__).with_name("memory_view.tcss")
    )  # beside this module, wherever a subclass lives
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("q", "close", "Back", show=False),
        Binding("c", "next_device", "Device", tooltip="Next memory device (CPU, each GPU)"),
        Binding("v", "cycle_table", "Table", tooltip="Operators by memory / never-freed"),
        SAVE_CSV_BINDING,
    ]
    HELP_TITLE = "Memory (p)"  # the key help's section (tui/palette.py)
    TABLE_MODES = ("operators", "never freed")
    FAILURE_SUBJECT = "memory"
    failure: str | None = None  # what could not be computed, and why
    hidden_columns: tuple[str, ...] = ()  # the table's columns this width left out
    _fitted_room: int = -1  # the room the table was last filled for

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            *MemoryChart.BINDINGS,
            *MemoryScreen.BINDINGS,
            Binding("up,down,pageup,pagedown", "table_move", "Move in the table below"),
            Binding("tab", "focus_next", "Between the curve and the table"),
            Binding("enter", "table_choose", "(in the table) Go to that operator on the timeline"),
        ]

    def __init__(
        self,
        data: ViewData,
        *,
        view_start: float | None = None,
        ns_per_cell: float | None = None,
        cursor_time: int | None = None,
        label_width: int = 20,
    ) -> None:
        super().__init__()
        self.data = data
        self.ops: MemoryOps | None = None
        self.step_rows = np.zeros(0, dtype=np.int64)  # the ProfilerStep slices, once computed
        self.device_index = 0
        self.table_mode = 0
        self.table_rows: list[tuple[int, int, int]] = []  # (row to select, start, end) per line
        self._initial = (view_start, ns_per_cell, cursor_time)
        self._label_width = label_width

    def compose(self) -> ComposeResult:
        yield Static(Text("Memory · computing…"), id="memory-title")
        yield MemoryChart(self.data, label_width=self._label_width, id="memory-chart")
        yield Static("", id="memory-status")
        yield Static("", id="memory-table-title")
        yield DataTable(id="memory-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    @property
    def chart(self) -> MemoryChart:
        return self.query_one(MemoryChart)

    @property
    def device(self) -> DeviceMemory | None:
        if self.ops is None or not self.ops.devices:
            return None
        return self.ops.devices[self.device_index]

    def on_mount(self) -> None:
        self.chart.focus()
        self.compute()

    @work(thread=True, exclusive=True, group="memory-view", exit_on_error=False)
    def compute(self) -> None:
        ops = memory_ops_for(self.data)
        try:
            steps = self.data.session.steps.rows
        except AnalysisFailed:  # the steps' own screen says why; here no step is named
            steps = np.zeros(0, dtype=np.int64)
        self.app.call_from_thread(self.show_ops, ops, steps)

    def show_failure(self, message: str) -> None:
        """The memory per operator could not be computed: the title says why."""
        self.failure = message
        self.query_one("#memory-title", Static).update(self.title_text())

    def show_ops(self, ops: MemoryOps, steps: np.ndarray) -> None:
        self.ops = ops
        self.step_rows = steps
        chart = self.chart
        view_start, ns_per_cell, cursor_time = self._initial
        if ns_per_cell is not None and view_start is not None:
            chart.ns_per_cell = ns_per_cell
            chart.view_start = view_start
        else:
            chart.action_fit_all()
        primary = ops.primary
        self.device_index = ops.devices.index(primary) if primary is not None else 0
        chart.set_device(self.device)
        if cursor_time is not None:
            chart.cursor_time = cursor_time
        if self.device is not None and self.device.peak >= 0:
            # Open on the peak: it is what people come here for.
            chart.action_peak()
        self.refresh_all()

    # -- texts ------------------------------------------------------------------------------

    def title_text(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Memory", "bold")
        device = self.device
        if self.ops is None:
            if self.failure is not None:
                text.append(f" · {self.failure}", palette_of(self).style("error", bold=True))
            else:
                text.append(" · computing…")
            return text
        if device is None:
            text.append(" · no [memory] events")
            return text
        trace = self.data.trace
        count = len(self.ops.devices)
        text.append(f" · {device.label} ({self.device_index + 1}/{count}, c: next)")
        if device.peak >= 0:
            text.append(" · peak ")
            peak = palette_of(self).style("error", bold=True)
            text.append(fmt_bytes(int(device.allocated[device.peak])), peak)
            text.append(f" at +{fmt_duration(int(device.ts[device.peak]) - self.data.origin)}")
            owner = int(device.owner[device.peak])
            text.append(" in ")
            text.append(
                fit_name(trace.name_of(owner), 50) if owner >= 0 else "(no operator)", "bold"
            )
            if device.peak_step >= 0:
                text.append(f" · {fit_name(trace.name_of(device.peak_step), 30)}")
        if device.peak_reserved >= 0:
            text.append(f" · reserved ≤ {fmt_bytes(int(device.reserved[device.peak_reserved]))}")
        if not device.allocated_recorded:
            text.append(" · no totals recorded: bytes since the trace start", "italic")
        return text

    def status_text(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        chart = self.chart
        device = self.device
        text.append(f"+{fmt_duration(chart.cursor_time)}", "bold")
        if device is None or not len(device):
            return text
        when = chart.cursor_time + self.data.origin
        last = device.level_at(when)
        if last < 0:
            text.append(" · before the first memory event")
            return text
        trace = self.data.trace
        text.append(" · allocated ")
        allocated = palette_of(self).style("allocated", bold=True)
        text.append(fmt_bytes(int(device.allocated[last])), allocated)
        if device.reserved[last] != NO_VALUE:
            text.append(f" · reserved {fmt_bytes(int(device.reserved[last]))}")
        step = _step_at(self.data, self.step_rows, when)
        if step >= 0:
            text.append(f" · {fit_name(trace.name_of(step), 24)}")
        nbytes = int(device.bytes[last])
        what = "alloc" if nbytes > 0 else ("free" if nbytes < 0 else "event")
        text.append(f" · last {what} {fmt_bytes(abs(nbytes))}")
        owner = int(device.owner[last])
        if owner >= 0:
            text.append(" by ")
            text.append(fit_name(trace.name_of(owner), 40), "bold")
        ago = when - int(device.ts[last])
        if ago > 0:
            text.append(f", {fmt_duration(ago)} before")
        return text

    def recolour(self) -> None:
        """The theme changed (the app calls this): the title and status again (the chart
        draws every frame afresh)."""
        if self.ops is not None:
            self.refresh_all()
        elif self.failure is not None:
            self.query_one("#memory-title", Static).update(self.title_text())

    def refresh_all(self) -> None:
        self.query_one("#memory-title", Static).update(self.title_text())
        self.query_one("#memory-status", Static).update(self.status_text())
        self.fill_table()

    def on_memory_chart_cursor_moved(self, message: MemoryChart.CursorMoved) -> None:
        if self.ops is not None:
            self.query_one("#memory-status", Static).update(self.status_text())

    # -- the table --------------------------------------------------------------------------

    def fill_table(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        self.table_rows = []
        self.hidden_columns = ()
        self._fitted_room = self.table_room()
        title = self.query_one("#memory-table-title", Static)
        device = self.device
        if self.ops is None:
            return
        if device is None:
            title.update(Text(HOW_TO_RECORD, "bold"))
            return
        mode = self.TABLE_MODES[self.table_mode]
        if mode == "operators":
            self._fill_operators(table, title, device)
        else:
            self._fill_never_freed(table, title, device)

    def table_room(self) -> int:
        """Cells the table's columns may take: its width (the screen's before it is laid out)
        less its vertical scrollbar."""
        table = self.query_one(DataTable)
        width = table.size.width or self.size.width or self.app.size.width
        return max(width - SCROLLBAR, 0)

    def _fill_operators(self, table: DataTable, title: Static, device: DeviceMemory) -> None:
        trace = self.data.trace
        ops = device.ops
        groups = self.ops.groups if self.ops is not None else None
        assert groups is not None
        active = ops.active()
        order = active[np.lexsort((-ops.incl_allocated[active], -ops.allocated[active]))]
        listed = order[:TABLE_LIMIT].tolist()
        matched = device.allocations.addresses_known
        peak = int(device.allocated[device.peak]) if device.peak >= 0 else None
        over = {g for g in listed if matched and peak is not None and int(ops.held_most[g]) > peak}

        def right(values: list[str]) -> list[Text]:
            return [Text(v, justify="right") for v in values]

        # The columns beside the name, in their order on screen, with the order they give way
        # in on a narrow terminal (first to go first): allocated stays.
        columns: dict[str, list[Text]] = {
            "allocs": right([f"{int(ops.allocations[g]):,}" for g in listed]),
            "allocated": right([fmt_bytes(int(ops.allocated[g])) for g in listed]),
        }
        if matched:
            columns["freed own"] = right([fmt_bytes(int(ops.freed_own[g])) for g in listed])
            columns["by others"] = right([fmt_bytes(int(ops.handed_off[g])) for g in listed])
            columns["at once"] = right(
                [fmt_bytes(int(ops.held_most[g])) + (" !" if g in over else "") for g in listed]
            )
            by = []
            for g in listed:
                freer = int(ops.freer[g])
                if int(ops.handed_off_count[g]) == 0:
                    by.append("-")
                elif freer < 0:
                    by.append("(no operator)")
                else:
                    by.append(trace.strings[int(groups.name[freer])])
            columns["mostly freed by"] = [Text(fit_name(b, 26)) for b in by]
            drop = ["mostly freed by", "freed own", "by others", "allocs", "not freed", "at once"]
        else:
            columns["freed"] = right([fmt_bytes(int(ops.freed[g])) for g in listed])
            drop = ["freed", "allocs", "not freed"]
        columns["peak live"] = right(
            [
                fmt_bytes(int(ops.peak_live[g])) if int(ops.peak_live[g]) != NO_VALUE else "-"
                for g in listed
            ]
        )
        columns["not freed"] = right(
            [fmt_bytes(int(ops.unfreed_bytes[g])) if ops.unfreed[g] else "" for g in listed]
        )
        drop.append("peak live")
        widths = {name: column_cells(name, cells) for name, cells in columns.items()}
        names = [trace.strings[int(groups.name[g])] for g in listed]
        least = max((cell_len(fit_name(n, NAME_LEAST)) for n in names), default=0)
        shown, name_width = fit_columns(
            self.table_room(), max(least, len("operator")), 32 if matched else 44, widths, drop
        )
        self.hidden_columns = tuple(name for name in columns if name not in shown)
        if matched:
            freed = " / ".join(c for c in ("freed own", "by others") if c in shown)
            explain = (
                f"{freed}: its allocations' frees, by address, summed over the trace"
                if freed
                else ""
            )
            if "at once" in shown:
                explain += ("; " if explain else "") + "at once: the most live at one time"
        else:
            explain = (
                "sums over the trace; no addresses recorded: who freed what, and how much "
                "was held at once, are unknown"
            )
        if over and "at once" in shown:
            explain += (
                "; ! held at once more than the curve's peak: memory allocated before the "
                "trace began was freed during it"
            )
        text = Text(f"Operators on {device.label} by bytes allocated ({len(order):,})", "bold")
        self._say_hidden(text)
        text.append(" · v: never freed" + (f" · {explain}" if explain else ""), "bold")
        title.update(text)
        table.add_columns("operator", *shown)
        for k, g in enumerate(listed):
            name = Text(fit_name(names[k], name_width))
            table.add_row(name, *(columns[c][k] for c in shown))
            row = int(ops.peak_row[g])
            start = int(trace.start[row]) if row >= 0 else -1
            end = start + int(trace.dur[row]) if row >= 0 else -1
            self.table_rows.append((row, start, end))

    def _say_hidden(self, text: Text) -> None:
        """After the table's name: which columns this width left out, and where they are."""
        hidden = self.hidden_columns
        if hidden:
            text.append(
                f" · {plural(len(hidden), 'column')} hidden at this width: {', '.join(hidden)} "
                "(wider terminal, or W: CSV with all)",
                palette_of(self).style("warning", bold=True),
            )

    def _fill_never_freed(self, table: DataTable, title: Static, device: DeviceMemory) -> None:
        trace = self.data.trace
        allocations = device.allocations
        self.hidden_columns = ()
        if not allocations.addresses_known:
            title.update(
                Text("This trace records no addresses: allocations cannot be matched", "bold")
            )
            return
        never = allocations.never_freed
        event = allocations.event[never]
        order = never[np.lexsort((device.ts[event], -device.bytes[event]))]
        listed = order[:TABLE_LIMIT].tolist()
        freed = allocations.state == FREED
        lifetimes = allocations.lifetime[freed]
        longest = fmt_duration(int(lifetimes.max())) if len(lifetimes) else "-"
        positions = [int(allocations.event[k]) for k in listed]
        for k in listed:
            assert allocations.state[k] == NEVER_FREED
        columns: dict[str, list[Text]] = {
            "bytes": [Text(fmt_bytes(int(device.bytes[p])), justify="right") for p in positions],
            "when": [time_cell(int(device.ts[p]) - self.data.origin, "+") for p in positions],
            "live after": [
                Text(fmt_bytes(int(device.allocated[p])), justify="right") for p in positions
            ],
        }
        widths = {name: column_cells(name, cells) for name, cells in columns.items()}
        owners = [
            trace.name_of(int(device.owner[p])) if int(device.owner[p]) >= 0 else "(no operator)"
            for p in positions
        ]
        least = max([len("owner"), *(cell_len(fit_name(n, NAME_LEAST)) for n in owners)])
        shown, owner_width = fit_columns(
            self.table_room(), least, 60, widths, ["live after", "when"]
        )
        self.hidden_columns = tuple(name for name in columns if name not in shown)
        text = Text(
            f"Allocations on {device.label} never freed in the trace ({len(order):,}, "
            f"{fmt_bytes(int(device.bytes[event].sum()))})",
            "bold",
        )
        self._say_hidden(text)
        text.append(
            f" · {int(freed.sum()):,} freed, longest lifetime {longest} · v: operators", "bold"
        )
        title.update(text)
        # The owner sits third, as before; the numbers around it as they fit.
        before = [c for c in ("bytes", "when") if c in shown]
        after = [c for c in ("live after",) if c in shown]
        table.add_columns(*before, "owner", *after)
        for i, pos in enumerate(positions):
            owner = int(device.owner[pos])
            cells = [columns[c][i] for c in before]
            cells.append(Text(fit_name(owners[i], owner_width)))
            cells += [columns[c][i] for c in after]
            table.add_row(*cells)
            self.table_rows.append((owner, int(device.ts[pos]), int(device.ts[pos])))

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self.refit_table)  # once the table has its new width

    def refit_table(self) -> None:
        """A new width may hold more (or fewer) of the table's columns: fill it again then,
        the cursor on the same row."""
        if self.ops is None or self.device is None:
            return
        if self._fitted_room == self.table_room():
            return
        table = self.query_one(DataTable)
        row = table.cursor_row
        self.fill_table()
        if 0 <= row < table.row_count:
            table.move_cursor(row=row, animate=False)

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        index = message.cursor_row
        if not (0 <= index < len(self.table_rows)):
            return
        row, start, end = self.table_rows[index]
        if row < 0:
            self.notify("No operator to show", timeout=2)
            return
        margin = max((end - start) * 0.1, 1000)
        self.dismiss(
            TimelineTarget(
                row=row,
                cursor=start,
                view_start=start - margin,
                view_end=end + margin,
            )
        )

    # -- actions ----------------------------------------------------------------------------

    def on_memory_chart_jump_requested(self, message: MemoryChart.JumpRequested) -> None:
        chart = self.chart
        origin = self.data.origin
        when = message.when + origin
        device = self.device
        row = target_at(self.data, device, when) if device is not None else -1
        self.dismiss(
            TimelineTarget(
                row=row,
                cursor=when,
                view_start=chart.view_start + origin,
                view_end=chart.view_end + origin,
            )
        )

    def csv_export(self) -> tuple[Table, np.ndarray] | None:
        """The table of the device shown, every row (not only the first TABLE_LIMIT)."""
        device = self.device
        if self.ops is None or device is None:
            return None
        trace = self.data.trace
        if self.TABLE_MODES[self.table_mode] == "operators":
            table = memory_operators_table(trace, self.ops.groups, device)
        else:
            table = never_freed_table(trace, device)
        return table, table.order

    def action_next_device(self) -> None:
        if self.ops is None or len(self.ops.devices) < 2:
            self.notify("Only one memory device in this trace", timeout=2)
            return
        self.device_index = (self.device_index + 1) % len(self.ops.devices)
        self.chart.set_device(self.device)
        self.refresh_all()

    def action_cycle_table(self) -> None:
        self.table_mode = (self.table_mode + 1) % len(self.TABLE_MODES)
        self.fill_table()

    def action_close(self) -> None:
        self.dismiss(None)


def column_cells(title: str, cells: list[Text]) -> int:
    """Cells a DataTable column of these takes: its widest text or title, and its padding."""
    return max([len(title), *(c.cell_len for c in cells)]) + CELL_PADDING


def fit_columns(
    room: int, name_least: int, name_most: int, widths: dict[str, int], drop: list[str]
) -> tuple[list[str], int]:
    """The columns (of `widths`, padding included, in their order) that fit in `room` cells
    beside a name column of at least `name_least` cells, those of `drop` left out in its
    order until they do; and the name's width, what is left up to `name_most`."""
    shown = dict.fromkeys(widths)
    order = list(drop)
    while order and sum(widths[c] for c in shown) + name_least + CELL_PADDING > room:
        shown.pop(order.pop(0), None)
    spare = room - CELL_PADDING - sum(widths[c] for c in shown)
    return list(shown), max(name_least, min(name_most, spare))


def _step_at(data: ViewData, rows: np.ndarray, when: int) -> int:
    """The step slice (of `rows`, the steps') holding `when` (absolute ns), or -1."""
    if not len(rows):
        return -1
    start = data.trace.start[rows]
    inside = np.flatnonzero((start <= when) & (when < start + data.trace.dur[rows]))
    return int(rows[inside[-1]]) if len(inside) else -1


def apply_target(timeline, data: ViewData, target: TimelineTarget | None) -> None:  # noqa: ANN001
    """Put the timeline where a memory or sync view asked (same zoom, same cursor time)."""
    if target is None:
        timeline.focus()
        return
    timeline.current_gap = -1
    if target.view_start is not None and target.view_end is not None:
        timeline.set_view(target.view_start - data.origin, target.view_end - data.origin)
    if target.row >= 0:
        timeline.select(target.row, move_cursor=False)
        # Selecting may expand the lane; scroll to the row again once the new rows are laid out.
        timeline.call_after_refresh(timeline.select, target.row, move_cursor=False)
    if target.cursor is not None:
        timeline.cursor_time = int(target.cursor - data.origin)
    timeline.refresh()
    timeline.focus()
