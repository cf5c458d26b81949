"""Overview (`v`): GPU utilisation per device, and one compact bar per ProfilerStep saying where
the step's wall time went on the GPU (compute, communication, memory, idle)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from kinetoscope.analysis.idle import CAUSES
from kinetoscope.analysis.ranges import idle_in_range
from kinetoscope.analysis.units import fmt_duration, plural
from kinetoscope.tui.data.places import Jump, MarkedRange, range_label
from kinetoscope.tui.widgets.columns import columns_of, share_bar
from kinetoscope.tui.widgets.table import DataView, TableModel, TableScreen
from kinetoscope.tui.widgets.theme import current_palette
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static

from kinetoscope.present.safe_text import clean
from kinetoscope.present.tables import Table, View, steps_table

if TYPE_CHECKING:
    from kinetoscope.tui.trace.drilldown import DrilldownActions

# Names of the palette's colours (theme.py) of the bars' parts.
BUSY_COLOUR = "slot-kernel"
COMPUTE_COLOUR = "slot-kernel"
COMM_COLOUR = "slot-communication"
MEMORY_COLOUR = "slot-memcpy"
IDLE_COLOUR = "idle"
CAUSE_COLOURS = {"host_wait": "error", "kernel_wait": "warning", "other": "slot-other"}
DEVICE_BAR = 32
STEP_BAR = 30


class OverviewScreen(TableScreen):
    """Device utilisation at the top, the steps table below; Enter shows a step."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("M", "mark_step", "Mark step", tooltip="Mark the step as the range"),
    ]
    HELP_TITLE = "Overview (v)"  # the key help's section (tui/palette.py)
    TITLE_TEXT = "Overview"
    FILTER_HINT = "type to filter steps by name"
    FAILURE_SUBJECT = "overview"

    def __init__(self, host: DrilldownActions) -> None:
        super().__init__()
        self.host = host
        self.data = host.data
        self.steps = None

    def compose(self) -> ComposeResult:
        yield Static(Text("Overview"), id="table-title", classes="table-title")
        yield Static("", id="overview-devices", classes="table-detail nowrap")
        yield from self._table_parts()
        yield Footer()

    def _table_parts(self) -> ComposeResult:
        from kinetoscope.tui.widgets.table import FilterBox

        yield FilterBox(placeholder=self.FILTER_HINT, id="table-filter", select_on_focus=False)
        yield DataView(id="table-view")

    def on_mount(self) -> None:
        super().on_mount()
        self.refresh_heading()
        self._compute()

    def recolour(self) -> None:
        """The theme changed (the app calls this): the devices' bars again."""
        super().recolour()
        if self.steps is not None:
            self.query_one("#overview-devices", Static).update(describe_devices(self.host))
        elif self.failure is not None:
            self.query_one("#overview-devices", Static).update(self.failure_text())

    def show_failure(self, message: str) -> None:
        super().show_failure(message)
        self.query_one("#overview-devices", Static).update(self.failure_text())

    def heading(self) -> Text:
        data = self.data
        text = Text("Overview", "bold")
        text.append(f" · {clean(os.path.basename(data.trace.source.path))}")
        text.append(f" · {fmt_duration(data.span)}")
        if self.steps is not None:
            text.append(f" · {plural(len(self.steps), 'step')}")
        elif self.failure is None:
            text.append(" · computing…")
        return text

    @work(thread=True, exclusive=True, group="overview", exit_on_error=False)
    def _compute(self) -> None:
        steps = self.data.session.steps
        devices = describe_devices(self.host)
        self.app.call_from_thread(self._show, steps, devices)

    def _show(self, steps, devices: Text) -> None:
        self.steps = steps
        self.query_one("#overview-devices", Static).update(devices)
        cpu_only = not self.data.idle.devices
        model = cpu_steps_model if cpu_only else steps_model
        self.table.set_model(model(self.data.trace, steps))
        self.refresh_heading()

    def csv_table(self) -> Table | None:
        if self.steps is None:
            return None
        return steps_table(self.data.trace, self.steps, bool(self.data.idle.devices))

    def choose(self, row: int) -> None:
        if self.steps is not None:
            self.host.show_on_timeline(Jump(row=int(self.steps.rows[row])))

    def action_mark_step(self) -> None:
        row = self.table.current_row
        if self.steps is None or row < 0:
            return
        start = int(self.steps.start[row])
        self.host.marked = MarkedRange(start, start + int(self.steps.dur[row]))
        self.query_one("#overview-devices", Static).update(describe_devices(self.host))
        self.notify(
            f"Range: {clean(self.data.trace.name_of(int(self.steps.rows[row])))}",
            timeout=2,
            markup=False,
        )


def device_bar(busy: int, idle_by_cause: tuple[int, int, int], width: int) -> Text:
    palette = current_palette()
    parts = [(busy, palette[BUSY_COLOUR])]
    parts += [(t, palette[CAUSE_COLOURS[c]]) for c, t in zip(CAUSES, idle_by_cause)]
    return share_bar(parts, width)


def describe_devices(host: DrilldownActions) -> Text:
    """Per device: busy share of its window as a bar, idle time by cause; same for the range."""
    data = host.data
    idle = data.idle
    text = Text(no_wrap=True, overflow="ellipsis")
    if not idle.devices:
        text.append(
            "No GPU activity in this trace: steps show the CPU time on the step's thread "
            "(█ operators, █ uninstrumented) and collectives; the CPU operators (o) tell the rest."
        )
        return text
    palette = current_palette()
    text.append("GPU utilisation ", "bold")
    text.append("█ busy ", palette[BUSY_COLOUR])
    for cause in CAUSES:
        text.append(f"█ {cause} ", palette[CAUSE_COLOURS[cause]])
    text.append("(idle by cause) · steps: ")
    for label, colour in (
        ("compute", COMPUTE_COLOUR),
        ("comm", COMM_COLOUR),
        ("memory", MEMORY_COLOUR),
        ("idle", IDLE_COLOUR),
    ):
        text.append(f"█ {label} ", palette[colour])
    text.append("\n")
    for dev in idle.devices:
        window = dev.window
        length = 0 if window is None else window[1] - window[0]
        _device_line(text, data, dev.device, length, dev.busy_ns, dev.idle_by_cause)
    bounds = host.range_bounds()
    if bounds is not None:
        marked = palette.style("marked", bold=True)
        text.append(f"marked range {range_label(data, bounds)}\n", marked)
        for entry in idle_in_range(idle, *bounds):
            _device_line(text, data, entry.device, entry.window, entry.busy, entry.idle_by_cause)
    return text


def _device_line(text: Text, data, device: int, window: int, busy: int, by_cause) -> None:
    named = data.gpu_names.get(int(device))
    name = named.name if named is not None else data.device_names.get(device)
    label = f"GPU {device}" + (f" {clean(name)}" if name else "")
    text.append(f"{label[:18]:<18} ")
    text.append_text(device_bar(busy, by_cause, DEVICE_BAR))
    share = busy / window if window else 0.0
    text.append(f" {share:4.0%} busy of {fmt_duration(window)}", "bold")
    if named is not None and named.how == "paired":
        text.append(f" · listed as device {named.listed_as}")
    elif named is not None and named.how == "unknown":
        text.append(f" · name unknown ({clean(named.listed_note)})")
    if sum(by_cause):
        idle = ", ".join(f"{c} {fmt_duration(t)}" for c, t in zip(CAUSES, by_cause) if t)
        text.append(f" · idle: {idle}")
    text.append("\n")


def step_bar(steps, i: int, longest: int, width: int) -> Text:
    """The step's wall time as a bar scaled to the longest step, split by GPU activity."""
    parts = [
        (int(steps.compute[i]), COMPUTE_COLOUR),
        (int(steps.comm[i]), COMM_COLOUR),
        (int(steps.memory[i]), MEMORY_COLOUR),
        (int(steps.idle[i]), IDLE_COLOUR),
    ]
    return _scaled_bar(parts, int(steps.dur[i]), longest, width)


CPU_OPS_COLOUR = "slot-kernel"


def cpu_step_bar(steps, i: int, longest: int, width: int) -> Text:
    """A step of a trace without GPU activity: its thread's profiled and uninstrumented time."""
    parts = [(int(steps.cpu_busy[i]), CPU_OPS_COLOUR), (int(steps.uninstrumented[i]), IDLE_COLOUR)]
    return _scaled_bar(parts, int(steps.dur[i]), longest, width)


def _scaled_bar(parts: list[tuple[int, str]], dur: int, longest: int, width: int) -> Text:
    """`parts` (time, palette colour name) as a bar `dur / longest` of `width` cells, padded
    to `width`."""
    cells = max(1, round(dur / max(longest, 1) * width))
    palette = current_palette()
    bar = share_bar([(t, palette[colour]) for t, colour in parts], cells)
    bar.append(" " * (width - cells))
    return bar


def steps_model(trace, steps) -> TableModel:
    return _steps_model(trace, steps, True, "GPU time by kind", step_bar)


def cpu_steps_model(trace, steps) -> TableModel:
    """The steps table of a trace without GPU activity (a CPU-only rank): CPU columns only."""
    return _steps_model(trace, steps, False, "CPU time on the step's thread", cpu_step_bar)


def _steps_model(trace, steps, on_gpu: bool, bar_title: str, bar) -> TableModel:
    """Step name, wall time, a bar of what filled the step, the step's split, then the loader
    share: the steps table's columns (present/tables.py) with the bar drawn here."""
    n = len(steps)
    longest = int(steps.dur.max()) if n else 0
    names = trace.name[steps.rows].astype(np.int64)
    bar_view = View(bar_title, steps.dur, STEP_BAR, cell=lambda i: bar(steps, i, longest, STEP_BAR))
    return TableModel(
        columns=columns_of(steps_table(trace, steps, on_gpu, bar_view)),
        n=n,
        names=names,
        name_text=trace.strings.__getitem__,
        default_sort=0,
    )
