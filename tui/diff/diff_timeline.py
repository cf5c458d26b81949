"""The diff's two timelines: the base trace above, the new one below, on one relative axis
whose 0 is the paired step's start in each, zoomed and panned together; a diff table row's
instances highlighted in both, the kernels the alignment found added (in the new trace) or
removed (from the base) marked.

Each half is a `LinkedTimeline` (tui/widgets/linked_timeline.py: timelines sharing one
window) over its own trace's `ViewData`; its `delta` is its step's start from its trace's
origin, so that the shared window, in "time since the step started", means the same moment of
the step in both. Every single-trace timeline key works in the focused half; Tab switches
halves; O opens the focused half alone in the single-trace screen (every view: operators,
kernels, search ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from kinetoscope.analysis.units import fmt_duration, plural
from kinetoscope.tui.data.viewdata import Level, ViewData
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.widgets.linked_timeline import LinkedTimeline
from kinetoscope.tui.widgets.render import CellRow
from kinetoscope.tui.widgets.search import highlight_segments
from kinetoscope.tui.widgets.theme import Palette, palette_of
from kinetoscope.tui.widgets.timeline import MIN_NS_PER_CELL, Timeline
from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from kinetoscope.present.safe_text import clean, shorten

FIT_MARGIN = 0.03  # share of the step shown before its start and after its end
ADDED_ROLE = "info"  # the palette colour of kernels the new trace added
REMOVED_ROLE = "error"  # ... and of those it removed (drawn on the base)


@dataclass
class Half:
    """One side of the diff on the timeline: its view, where its paired step starts and how
    long it is (absolute ns; the trace's start and span when it has no steps), a label, and the
    trace rows to mark (added kernels on the new side, removed ones on the base)."""

    data: ViewData
    step_start: int
    step_len: int
    label: str
    marked: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    role: str = ADDED_ROLE
    replaced: int = 0  # of the marked, how many took the place of another kernel


class DiffTimeline(LinkedTimeline):
    """A half of the diff: a LinkedTimeline whose shared window is "time since the paired step
    started" and may show the trace before the step too (the shared range runs from the earlier
    of the two traces' starts to the later of their ends, in that time)."""

    def __init__(self, half: Half, low: float, high: float, fit_len: int, **kwargs: Any) -> None:
        super().__init__(half.data, **kwargs)
        self.half = half
        self.delta = float(half.step_start - half.data.origin)
        self.ruler_zero = self.delta  # 0 on the ruler: the step's start
        self.low, self.high = low, high  # the shared range, in step time
        self.job_span = max(1, int(high - low))
        self.fit_len = max(1, fit_len)
        self._marked = np.zeros(len(half.data.trace), bool)
        self._marked[half.marked] = True
        self._row_ids = np.arange(len(half.data.trace))

    def decorate_row(
        self, body: list[Segment], cells: CellRow, level: Level, entry: int, palette: Palette
    ) -> list[Segment]:
        body = super().decorate_row(body, cells, level, entry, palette)
        if not len(self.half.marked):
            return body
        return highlight_segments(
            body, cells, level, self._row_ids, self._marked, entry, palette, role=self.half.role
        )

    def focus_changed(self) -> None:
        screen = self.screen if self.is_attached else None
        if isinstance(screen, DiffPairScreen):
            screen.update_status()  # it speaks of the focused half

    def is_marked(self, row: int) -> bool:
        """The alignment found trace row `row` added (new half) or removed (base half)."""
        return 0 <= row < len(self._marked) and bool(self._marked[row])

    def _clamp_view(self) -> None:
        if self.data is None:
            return
        visible = self.cells_width * self.ns_per_cell
        low, high = sorted((self.delta + self.low, self.delta + self.high - visible))
        self.view_start = float(min(max(self.view_start, low), high))

    def action_fit_all(self) -> None:
        """0: the paired step, whole (the longer of the two), from just before its start."""
        if self.data is None:
            return
        self.live = True
        margin = self.fit_len * FIT_MARGIN
        self.set_view(self.delta - margin, self.delta + self.fit_len + margin)
        self._clamp_view()
        if not (self.view_start <= self.cursor_time < self.view_end):
            self.cursor_time = int(self.delta)


class DiffPairScreen(Screen):
    """Base above, new below: one window in step time, the chosen row's instances highlighted
    in both, n/N stepping through them pairwise (the k-th instance of each)."""

    DEFAULT_CSS = """
    DiffPairScreen .pair-title, DiffPairScreen #diff-pair-status {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    DiffPairScreen DiffTimeline {
        height: 1fr;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back to the diff table"),
        Binding("q", "back", "Back to the diff table", show=False),
        Binding("tab", "switch", "Other trace", tooltip="Focus the other trace (base / new)"),
        Binding("n", "step_instance(1)", "Next instance", tooltip="The next instance in both"),
        Binding("N", "step_instance(-1)", "Previous instance", show=False),
        Binding("O", "open_alone", "Open alone", tooltip="The focused trace alone, every view"),
    ]
    HELP_TITLE = "Both timelines (Enter)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            *DiffPairScreen.BINDINGS,
            Binding("0", "fit_all", "The paired step, whole (the longer of the two)"),
            *Timeline.BINDINGS,  # 0's line above is the timeline's (the same action)
        ]

    def __init__(
        self,
        base: Half,
        new: Half,
        *,
        title: str = "",
        name_masks: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
        instances: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """`name_masks`: per trace, the names drawn highlighted (a bool per string id);
        `instances`: per trace, the chosen row's instances (trace rows in time order)."""
        super().__init__()
        self.halves = (base, new)
        self.title_text = title
        empty = np.zeros(0, np.int64)
        drawn = [
            rows[h.data.row_lane[rows] >= 0] if len(rows) else empty
            for h, rows in zip(self.halves, instances or (empty, empty))
        ]
        self.instances = drawn  # the first in the step, then one by one with n/N
        self.name_masks = name_masks
        self.first = [
            int(np.searchsorted(h.data.trace.start[rows], h.step_start))
            for h, rows in zip(self.halves, self.instances)
        ]
        self.index = 0  # instance shown: first[side] + index in each
        self.window: tuple[float, float, int] | None = None

    def compose(self) -> ComposeResult:
        low = min(h.data.origin - h.step_start for h in self.halves)
        high = max(h.data.origin + h.data.span - h.step_start for h in self.halves)
        fit_len = max(h.step_len for h in self.halves)
        heading = Text(no_wrap=True, overflow="ellipsis")
        heading.append("Diff · ", "bold")
        heading.append(clean(self.title_text) if self.title_text else "both traces")
        heading.append(" · 0 = the paired step's start in each", "dim")
        yield Static(heading, classes="pair-title", id="diff-pair-heading")
        for side, (half, mask) in enumerate(zip(self.halves, self.name_masks)):
            yield Static(self._label(side), classes="pair-title", id=f"diff-title-{side}")
            timeline = DiffTimeline(half, float(low), float(high), fit_len, id=f"diff-half-{side}")
            timeline.on_moved = self.follow
            if mask is not None:
                timeline.highlight_names = mask
            yield timeline
        yield Static("", id="diff-pair-status")
        yield Footer()

    def _label(self, side: int) -> Text:
        """`base · 4 instances · 47 removed (47 replaced) · ProfilerStep#6 · file`: the counts
        first, where a narrow terminal keeps them."""
        half = self.halves[side]
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("base" if side == 0 else "new", "bold")
        if self.name_masks[side] is not None:
            text.append(f" · {plural(len(self.instances[side]), 'instance')}")
        marked = len(half.marked)
        if marked:
            word = "added" if half.role == ADDED_ROLE else "removed"
            role = palette_of(self).style("ink", half.role, bold=True)
            text.append(" · ")
            text.append(f"{marked:,} {word}", role)
            if half.replaced:
                which = "in place of others" if half.role == ADDED_ROLE else "replaced"
                text.append(f" ({half.replaced:,} {which})")
        text.append(f" · {clean(half.label)}")
        return text

    def timelines(self) -> list[DiffTimeline]:
        return list(self.query(DiffTimeline))

    def on_mount(self) -> None:
        timelines = self.timelines()
        for timeline in timelines:
            timeline.cancel_fit()  # the pair's window comes from _show_first
        timelines[0].focus()
        self.call_after_refresh(self._show_first)

    def _show_first(self) -> None:
        timelines = self.timelines()
        for timeline in timelines:
            timeline.cancel_fit()
            timeline.live = True
        timelines[0].action_fit_all()  # the step, shared with the other half
        if not len(self.instances[0]) and len(self.instances[1]):
            timelines[1].focus()  # only the new trace has the row (an added kernel)
        self._select(0, move=False)
        self.update_status()

    def _select(self, index: int, move: bool) -> bool:
        """Select instance `first + index` in both halves (those that have it); the cursor on
        the focused half's (or the base's) start; `move`: bring it into view. False when
        neither half has it."""
        timelines = self.timelines()
        wanted = [self.first[s] + index for s in range(2)]
        has = [0 <= wanted[s] < len(self.instances[s]) for s in range(2)]
        if not any(has):
            return False
        focused = self.focused
        lead = timelines.index(focused) if focused in timelines else 0
        if not has[lead]:
            lead = 1 - lead
        other = 1 - lead
        self.index = index
        lead_row = int(self.instances[lead][wanted[lead]])
        lead_timeline = timelines[lead]
        if move:
            lead_timeline.select(lead_row)  # its window moves the other's
        else:
            lead_timeline.select(lead_row, move_cursor=False)
            lead_timeline.cursor_time = lead_timeline.data.rel_start(lead_row)
        if has[other]:
            timelines[other].select(int(self.instances[other][wanted[other]]), move_cursor=False)
        else:
            timelines[other].selected_row = -1
        return True

    def follow(self, source: LinkedTimeline) -> None:
        window = source.job_window()
        self.window = window
        for timeline in self.timelines():
            if timeline is not source:
                timeline.follow(*window)
        self.update_status()

    def on_timeline_event_selected(self, message: Any) -> None:
        self.update_status()

    def update_status(self) -> None:
        status = self.query("#diff-pair-status")
        if not status:
            return
        timelines = self.timelines()
        focused = self.focused if self.focused in timelines else timelines[0]
        side = timelines.index(focused)
        when = focused.cursor_time - focused.delta
        text = Text(no_wrap=True, overflow="ellipsis")
        sign = "−" if when < 0 else "+"
        text.append(f"step {sign}{fmt_duration(abs(when))}", "bold")
        text.append(f" · {fmt_duration(focused.ns_per_cell, 2)}/cell")
        text.append(f" · {'base' if side == 0 else 'new'}")
        row = focused.selected_row
        if row >= 0:
            trace = focused.data.trace
            text.append(" · ")
            text.append(shorten(trace.name_of(row), 50), "bold")
            text.append(f" {fmt_duration(int(trace.dur[row]))}")
            if focused.is_marked(row):  # said in words too: NO_COLOR greys the mark's colour
                word = "ADDED" if focused.half.role == ADDED_ROLE else "REMOVED"
                text.append(f" {word}", palette_of(self).style("ink", focused.half.role, bold=True))
            other = timelines[1 - side]
            if other.selected_row >= 0:
                dur = int(other.data.trace.dur[other.selected_row])
                text.append(f" ({'new' if side == 0 else 'base'} {fmt_duration(dur)})")
        text.append(" · Tab: other trace · ? keys", "dim")
        status.first(Static).update(text)

    def recolour(self) -> None:
        for timeline in self.timelines():
            timeline.recolour()
        for side in range(2):
            self.query_one(f"#diff-title-{side}", Static).update(self._label(side))
        self.update_status()

    # -- keys -------------------------------------------------------------------------------

    def action_switch(self) -> None:
        timelines = self.timelines()
        focused = self.focused
        if focused in timelines:
            timelines[1 - timelines.index(focused)].focus()

    def action_step_instance(self, direction: int) -> None:
        if not any(len(rows) for rows in self.instances):
            self.notify("No instances to step through: Enter on a table row picks them", timeout=3)
            return
        if not self._select(self.index + direction, move=True):
            self.notify("No more instances this way", timeout=2)

    def action_open_alone(self) -> None:
        timelines = self.timelines()
        focused = self.focused if self.focused in timelines else timelines[0]
        side = timelines.index(focused)
        screen = HalfTraceScreen(focused.data, "base" if side == 0 else "new")
        self.app.push_screen(screen)
        screen.call_after_refresh(
            screen.show_window, focused.view_start, focused.ns_per_cell, focused.cursor_time
        )

    def action_back(self) -> None:
        self.app.pop_screen()


class HalfTraceScreen(TraceScreen):
    """One side of the diff alone in the single-trace screen (every view it has), in the
    window the pair showed; q goes back to the pair."""

    SHOWS_TOP_FINDING = False  # the diff's verdict is the answer here
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "back", "Back to the two traces"),
    ]
    HELP_TITLE = "A trace alone (O)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [*HalfTraceScreen.BINDINGS, *Timeline.BINDINGS, *TraceScreen.BINDINGS]

    def __init__(self, data: ViewData, side: str) -> None:
        super().__init__(data)
        self.title_prefix = side

    def show_window(self, start: float, per_cell: float, cursor: float) -> None:
        timeline = self.timeline
        timeline.cancel_fit()
        timeline.ns_per_cell = max(per_cell, MIN_NS_PER_CELL)
        timeline.view_start = start
        timeline.cursor_time = int(cursor)

    def action_back(self) -> None:
        self.app.pop_screen()
