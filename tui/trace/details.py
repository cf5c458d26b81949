"""The details pane: everything about the selected event, or about the idle gap just reached.

Texts are built from `rich.text.Text` pieces (never markup), with every trace string cleaned.
"""

from __future__ import annotations

import json
from typing import Any

from kinetoscope.analysis.units import fmt_duration
from kinetoscope.parser import file_changed, read_event
from kinetoscope.parser.model import KIND_NOT_CPU, KIND_RUNTIME
from kinetoscope.tui.data.failures import ReportsWorkerFailures
from kinetoscope.tui.data.viewdata import GPU_KINDS, ViewData
from kinetoscope.tui.widgets.theme import current_palette
from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import work
from textual.containers import VerticalScroll
from textual.widgets import Static

from kinetoscope.present.safe_text import bounded_args, clean, shorten

MAX_ARG_CHARS = 240
MAX_NAME_CHARS = 320  # a few lines of a C++ template name; longer ones are elided
MAX_LIST = 12
MAX_ARGS = 200  # args shown; the rest are counted
NOTHING_SELECTED = (
    "Nothing selected: ←/→ walk events, g jumps to a GPU idle gap.\n"
    "This pane: { } resize it, Tab focuses it to scroll it. ? lists every key."
)


def key_style() -> Style:
    """Keys of the details (`name:`), in the current theme."""
    return current_palette().style("muted", bold=True)


def name_style() -> Style:
    """The event's or gap's name, in the current theme."""
    return current_palette().style("heading", bold=True)


def _when(data: ViewData, ns_abs: int) -> str:
    """`+12.3 ms (ts 1712195495406752.800)`: from the trace start, and in the file's µs."""
    return f"+{fmt_duration(ns_abs - data.origin)} (ts {ns_abs / 1000:.3f})"


def _line(text: Text, key: str, value: str, style: str = "") -> None:
    text.append(f"{key}: ", key_style())
    text.append(value, style)
    text.append("\n")


def python_stack(data: ViewData, row: int, event: dict[str, Any] | None) -> list[str]:
    """The Python frames above `row`, outermost first (innermost last, as a call stack reads):
    python_function ancestors, else the `Call stack` arg (';'-separated, innermost first)."""
    trace = data.trace
    frames = [
        trace.name_of(ancestor)
        for ancestor in data.ancestors(row)  # a kernel's ancestors start at its launch
        if trace.cat_of(ancestor).lower() == "python_function"
    ]
    if frames:
        return frames[::-1]
    args = (event or {}).get("args")
    if isinstance(args, dict) and isinstance(args.get("Call stack"), str):
        return [f for f in args["Call stack"].split(";") if f.strip()][::-1]
    return []


def stack_lines(text: Text, frames: list[str]) -> None:
    """A stack given outermost first, one frame a line, innermost last: the innermost
    MAX_LIST frames, under a line counting the outer ones left out."""
    if len(frames) > MAX_LIST:
        text.append(f"  … {len(frames) - MAX_LIST} outer frames\n", "dim")
    for frame in frames[-MAX_LIST:]:
        text.append(f"  {shorten(frame, 120)}\n")


def stack_tail(frames: list[str], count: int, width: int, room: int | None = None) -> str:
    """The innermost `count` frames of a stack (outermost first) on one line, innermost last
    and cut at the front, as the summary writes them: `… > aten::linear > aten::addmm`; each
    frame cut to `width` cells, and fewer frames where the line must fit in `room` cells."""
    for shown in range(min(count, len(frames)), 0, -1):
        line = " > ".join(shorten(frame, width) for frame in frames[-shown:])
        line = ("… > " if len(frames) > shown else "") + line
        if room is None or cell_len(line) <= room:
            return line
    # Not even the innermost frame fits with the ellipsis: it alone, cut if it must be.
    return shorten(frames[-1], max(8, min(width, room or 0)))


def operator_above(data: ViewData, row: int) -> int:
    """The innermost operator-like CPU slice above a launch (not runtime, not python), or -1."""
    trace = data.trace
    for ancestor in data.ancestors(row):
        if data.kind[ancestor] == KIND_RUNTIME:
            continue
        if trace.cat_of(ancestor).lower() == "python_function":
            continue
        return ancestor
    return -1


def _nesting_facts(text: Text, data: ViewData, row: int, event: dict[str, Any] | None) -> None:
    """Self time, launch links, the operator above and the Python stack: need the nesting."""
    trace = data.trace
    start = int(trace.start[row])
    position = int(data.nesting.position[row])
    if position >= 0:
        _line(text, "self time", fmt_duration(int(data.nesting.self_time[position])))

    kind = int(data.kind[row])
    if kind in GPU_KINDS:
        launch = data.launch_of(row)
        if launch >= 0:
            gap = start - int(trace.start[launch])
            _line(
                text,
                "launched by",
                f"{shorten(trace.name_of(launch), 160)} at {_when(data, int(trace.start[launch]))}, "
                f"{fmt_duration(gap)} before it ran",
            )
            op = operator_above(data, launch)
            if op >= 0:
                _line(text, "operator", shorten(trace.name_of(op), 160))
        else:
            _line(text, "launched by", "(no linked runtime call)")
    elif kind == KIND_RUNTIME:
        kernels = data.kernels_of(row)
        if len(kernels):
            text.append(f"launched {len(kernels)} GPU event(s):\n", key_style())
            for k in kernels[:MAX_LIST].tolist():
                k_lane = data.row_lane[k]
                where = data.lanes[k_lane].label if k_lane >= 0 else "?"
                text.append(
                    f"  {shorten(trace.name_of(k), 80)}  {fmt_duration(int(trace.dur[k]))}"
                    f"  {clean(where)}\n"
                )
        op = operator_above(data, row)
        if op >= 0:
            _line(text, "operator", shorten(trace.name_of(op), 160))
    elif kind != KIND_NOT_CPU:
        launch = data.first_launch_below(row)
        if launch >= 0:
            kernels = data.kernels_of(launch)
            _line(text, "first GPU work", f"{shorten(trace.name_of(int(kernels[0])), 80)} (])")

    frames = python_stack(data, row, event)
    if frames:
        text.append("python stack (innermost last):\n", key_style())
        stack_lines(text, frames)


def describe_event(
    data: ViewData,
    row: int,
    event: dict[str, Any] | None,
    loading: bool,
    failure: str | None = None,
) -> Text:
    """The details text of one event; `event` is its full JSON when already read back, and
    `failure` says why it could not be."""
    trace = data.trace
    text = Text(no_wrap=False, overflow="fold")
    text.append(shorten(trace.name_of(row), MAX_NAME_CHARS) or "(no name)", name_style())
    text.append("\n")
    lane_index, level, _ = data.level_of_row(row)
    lane = data.lanes[lane_index].label if lane_index >= 0 else "?"
    _line(text, "category", clean(trace.cat_of(row)) or "(none)")
    _line(text, "lane", clean(lane) + (f" · depth {level}" if level > 0 else ""))
    start = int(trace.start[row])
    dur = int(trace.dur[row])
    _line(text, "start", _when(data, start))
    _line(text, "duration", fmt_duration(dur))
    if data.complete:
        _nesting_facts(text, data, row, event)
    else:
        text.append("self time, launches and stack: still being computed…\n", "dim")

    text.append("args:", key_style())
    if event is None:
        if failure is not None:
            text.append(f" {failure}\n", current_palette().style("error", bold=True))
        elif loading:
            text.append(" reading…\n")
        elif file_changed(trace) is not None:
            text.append(" (not read: the file changed on disk after it was loaded)\n")
        else:
            text.append(" (not available)\n")
    else:
        args = event.get("args")
        if not isinstance(args, dict) or not args:
            text.append(" (none)\n")
        else:
            text.append("\n")
            # Only what can be shown is looked at (an event may hold 300,000 args).
            shown, more = bounded_args(args, MAX_ARGS, MAX_ARG_CHARS, skip=("Call stack",))
            for key, rendered in shown:
                text.append(f"  {shorten(key, 40)}: ", key_style())
                text.append(shorten(rendered, MAX_ARG_CHARS) + "\n")
            if more:
                text.append(f"  … {more:,} more {'arg' if more == 1 else 'args'}\n", "dim")
    return text


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def describe_gap(data: ViewData, gap: int) -> Text:
    """The details text of an idle gap: length, cause, the work after it and the CPU stack."""
    trace = data.trace
    gaps = data.gaps
    start, end = int(gaps.start[gap]), int(gaps.end[gap])
    text = Text(no_wrap=False, overflow="fold")
    text.append(f"GPU {int(gaps.device[gap])} idle for {fmt_duration(end - start)}", name_style())
    text.append("\n")
    _line(text, "cause", data.gap_cause(gap))
    _line(text, "from", _when(data, start))
    _line(text, "to", _when(data, end))
    next_row = int(gaps.next_row[gap])
    stack = cpu_stack_for_gap(data, gap) if data.complete else []
    if not data.complete:
        text.append("CPU stack at the gap: still being computed…\n", "dim")
    if stack:
        text.append("CPU at the gap's midpoint (innermost last):\n", key_style())
        stack_lines(text, stack)
    _line(text, "next GPU event", shorten(trace.name_of(next_row), 160))
    runtime = int(gaps.runtime_row[gap])
    if runtime >= 0:
        late = int(trace.start[runtime]) - start
        when = f"{fmt_duration(abs(late))} {'after' if late > 0 else 'before'} the GPU went idle"
        _line(text, "launched by", f"{shorten(trace.name_of(runtime), 160)}, {when}")
    return text


def cpu_stack_for_gap(data: ViewData, gap: int) -> list[str]:
    """Names of the CPU slices on the launching thread that contain the gap's midpoint."""
    runtime = int(data.gaps.runtime_row[gap])
    if runtime < 0:
        return []
    lane_index = int(data.row_lane[runtime])
    if lane_index < 0:
        return []
    middle = data.gaps.midpoint(gap) - data.origin
    return [data.trace.name_of(r) for r in data.stack_at(lane_index, middle)]


class DetailsPane(ReportsWorkerFailures, VerticalScroll):
    """Shows the selected event (args read back from the file in a thread) or the current gap."""

    FAILURE_SUBJECT = "event arguments"
    FAILURE_VERB = "read"

    def __init__(self, data: ViewData, **kwargs) -> None:
        super().__init__(**kwargs)
        self.data = data
        self.row = -1
        self.gap = -1
        self.event: dict[str, Any] | None = None
        self.args_failure: str | None = None  # why the event's args could not be read
        self.top_finding: Text | None = None  # shown when nothing is selected (the answer)
        self.body = Static(self.nothing_selected())

    def compose(self):
        yield self.body

    def show_event(self, row: int) -> None:
        self.row = row
        self.gap = -1
        self.event = None
        self.args_failure = None
        if row < 0:
            self.body.update(self.nothing_selected())
            return
        self._refresh_body(loading=True)
        self.scroll_home(animate=False)
        self._read_args(row)

    def nothing_selected(self) -> Text:
        """The top finding first (when known), then what the keys do."""
        text = Text()
        if self.top_finding is not None:
            text.append_text(self.top_finding)
        text.append(NOTHING_SELECTED)
        return text

    def show_top_finding(self, text: Text) -> None:
        """The triage's top finding, shown while nothing is selected."""
        self.top_finding = text
        if self.row < 0 and self.gap < 0:
            self.body.update(self.nothing_selected())

    def show_gap(self, gap: int) -> None:
        """Show an idle gap above the details of the event selected with it."""
        self.gap = gap
        self._refresh_body(loading=self.event is None)
        self.scroll_home(animate=False)

    def levels_complete(self) -> None:
        """Redraw with what needed the nesting (self time, stacks)."""
        if self.row >= 0 or self.gap >= 0:
            self._refresh_body(loading=self.row >= 0 and self.event is None)

    def recolour(self) -> None:
        """The theme changed (the app calls this): the details again, in its colours."""
        self.levels_complete()

    def _refresh_body(self, loading: bool) -> None:
        text = Text()
        if self.gap >= 0:
            text.append_text(describe_gap(self.data, self.gap))
            text.append("\n")
        if self.row >= 0:
            text.append_text(
                describe_event(self.data, self.row, self.event, loading, self.args_failure)
            )
        self.body.update(text)

    def show_failure(self, message: str) -> None:
        """The selected event's args could not be read back: its details say why."""
        self.args_failure = message
        self._refresh_body(loading=False)

    @work(thread=True, exclusive=True, group="details-args", exit_on_error=False)
    def _read_args(self, row: int) -> None:
        event = read_event(self.data.trace, row)
        self.app.call_from_thread(self._show_args, row, event)

    def _show_args(self, row: int, event: dict[str, Any] | None) -> None:
        if row == self.row:
            self.event = event
            self._refresh_body(loading=False)
