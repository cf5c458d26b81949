"""What the drill-down screens share, and the keys that open them from the trace screen.

`DrilldownActions` is mixed into the trace screen: it owns the marked range and the search
state, opens the operator, kernel, findings and overview screens, and puts rows chosen there
back on the timeline (selected and fitted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kinetoscope.analysis.units import fmt_duration
from kinetoscope.tui.trace.exporting import EXPORT_BINDING, export_stem, start_export
from kinetoscope.tui.widgets.columns import (
    fmt_cell_time as fmt_cell_time,  # the tables' duration format, re-exported
)
from textual.binding import Binding, BindingType

if TYPE_CHECKING:
    from kinetoscope.tui.data.viewdata import ViewData
    from kinetoscope.tui.widgets.search import SearchState
    from kinetoscope.tui.widgets.timeline import Timeline


@dataclass(frozen=True)
class Jump:
    """Where to put the timeline: select `row` (-1: none); show [start, end) (absolute ns)
    when given, else fit the selected row."""

    row: int = -1
    start: int | None = None
    end: int | None = None


@dataclass
class MarkedRange:
    """A time range marked on the timeline, absolute ns; `end` is None while only the start is."""

    start: int
    end: int | None = None

    @property
    def complete(self) -> bool:
        return self.end is not None

    def bounds(self) -> tuple[int, int]:
        assert self.end is not None
        return (min(self.start, self.end), max(self.start, self.end))


def range_label(data: ViewData, bounds: tuple[int, int]) -> str:
    start, end = bounds
    return (
        f"+{fmt_duration(start - data.origin)} … +{fmt_duration(end - data.origin)} "
        f"({fmt_duration(end - start)})"
    )


# Hidden from the trace screen's footer (kept as the timeline's own keys); `?` and the
# command palette list them.
DRILLDOWN_BINDINGS: list[BindingType] = [
    Binding(
        "o",
        "operators",
        "Operators",
        show=False,
        tooltip="Operators by self time (drill down with Enter)",
    ),
    Binding(
        "k", "kernels", "Kernels", show=False, tooltip="Kernels, memcpys and memsets by total time"
    ),
    # Shown: the findings are the answer most users open a trace for.
    Binding("t", "findings", "Findings", tooltip="Triage findings, most severe first"),
    Binding(
        "v", "overview", "Overview", show=False, tooltip="Per-step breakdown and GPU utilisation"
    ),
    Binding(
        "c",
        "compile",
        "Compile",
        show=False,
        tooltip="torch.compile: compiled share, eager islands, recompiles, launches, fusion",
    ),
    Binding(
        "m", "mark", "Mark", show=False, tooltip="Mark a range start, then its end (tables use it)"
    ),
    Binding(
        "M",
        "mark_selection",
        "Mark the selected event",
        show=False,
        tooltip="Mark the selected event (e.g. a ProfilerStep) as the range; again clears it",
    ),
    EXPORT_BINDING,
    Binding(
        "slash", "search", "Search", show=False, tooltip="Search event names (re: for a regex)"
    ),
    Binding("n", "next_match", "Next match", show=False, tooltip="Next search match in time"),
    Binding("N", "prev_match", "Previous match", show=False, tooltip="Previous search match"),
]


class DrilldownActions:
    """Mixed into the trace screen (which has `data`, `timeline`, `app`, `notify`).

    The screens it opens get it as their `host`: they read the trace's results from
    `host.data.session`, the marked range from `host.range_bounds()`, and go back to the
    timeline with `host.show_on_timeline(Jump(...))`. A new screen opened from the timeline
    gets an `action_*` here (and a key in DRILLDOWN_BINDINGS, and a section in
    palette.viewer_help_sections); a table over the whole trace or the marked range
    subclasses rangetable.RangeTableScreen.
    """

    data: ViewData
    app: Any
    notify: Callable[..., None]
    timeline: Timeline
    _marked: MarkedRange | None = None
    _search: SearchState | None = None

    # -- state ----------------------------------------------------------------------------------

    @property
    def marked(self) -> MarkedRange | None:
        return self._marked

    @marked.setter
    def marked(self, value: MarkedRange | None) -> None:
        self._marked = value
        bounds = None
        if value is not None:
            end = value.end if value.end is not None else value.start
            bounds = (min(value.start, end), max(value.start, end))
        self.timeline.marked_range = (
            None if bounds is None else (bounds[0] - self.data.origin, bounds[1] - self.data.origin)
        )
        self.timeline.refresh()

    def range_bounds(self) -> tuple[int, int] | None:
        """The complete marked range (absolute ns), or None."""
        marked = self.marked
        return marked.bounds() if marked is not None and marked.complete else None

    @property
    def search(self) -> SearchState | None:
        return self._search

    # -- opening screens --------------------------------------------------------------------

    def _open(self, name: str, make: Callable[[], Any]) -> None:
        app = self.app
        key = f"drilldown-{name}-{id(self)}"
        if not app.is_screen_installed(key):
            app.install_screen(make(), key)
        app.push_screen(key)

    def action_operators(self) -> None:
        from kinetoscope.tui.trace.operators import OperatorsScreen

        self._open("operators", lambda: OperatorsScreen(self))

    def action_kernels(self) -> None:
        from kinetoscope.tui.trace.kernels import KernelsScreen

        self._open("kernels", lambda: KernelsScreen(self))

    def action_findings(self) -> None:
        from kinetoscope.tui.trace.findings import FindingsScreen

        self._open("findings", lambda: FindingsScreen(self))

    def action_overview(self) -> None:
        from kinetoscope.tui.trace.overview import OverviewScreen

        self.app.push_screen(OverviewScreen(self))

    def action_compile(self) -> None:
        from kinetoscope.tui.trace.compile_view import CompileScreen

        self._open("compile", lambda: CompileScreen(self))

    def mark_compiled_regions(self) -> None:
        """Find the trace's compiled regions in a worker, then mark them on the timeline."""
        from kinetoscope.tui.trace.compile_view import mark_compiled_regions

        mark_compiled_regions(self)

    # -- jumping back -----------------------------------------------------------------------

    def show_on_timeline(self, jump: Jump) -> None:
        """Close the screens above this one and show `jump` on the timeline."""
        app = self.app
        while app.screen is not self and len(app.screen_stack) > 1:
            app.pop_screen()
        timeline = self.timeline
        data = self.data
        timeline.current_gap = -1
        if jump.row >= 0:
            timeline.select(jump.row)
        if jump.start is not None and jump.end is not None:
            start, end = jump.start - data.origin, jump.end - data.origin
            margin = max((end - start) * 0.05, 1000)
            timeline.set_view(start - margin, end + margin)
            if jump.row < 0:
                timeline.cursor_time = start
        elif jump.row >= 0:
            timeline.action_fit_selection()
        timeline.focus()

    # -- range marking ------------------------------------------------------------------------

    def action_mark(self) -> None:
        now = int(self.timeline.cursor_time) + self.data.origin
        marked = self.marked
        if marked is None or marked.complete:
            self.marked = MarkedRange(start=now)
            self.notify(
                "Range start marked; move and press m again for its end", timeout=3, markup=False
            )
            return
        if now == marked.start:
            self.notify("The end is the start: move the cursor first", timeout=3, markup=False)
            return
        self.marked = MarkedRange(marked.start, now)
        self._announce_range()

    def action_mark_selection(self) -> None:
        row = self.timeline.selected_row
        if row < 0:
            if self.marked is not None:
                self.marked = None
                self.notify("Range cleared", timeout=2, markup=False)
            else:
                self.notify("Select an event (e.g. a ProfilerStep) first", timeout=3, markup=False)
            return
        start = int(self.data.trace.start[row])
        end = start + int(self.data.trace.dur[row])
        if self.range_bounds() == (start, end):
            self.marked = None
            self.notify("Range cleared", timeout=2, markup=False)
            return
        if end == start:
            self.notify("The selected event has no duration", timeout=3, markup=False)
            return
        self.marked = MarkedRange(start, end)
        self._announce_range()

    def action_clear_range(self) -> None:
        self.marked = None

    def action_export_range(self) -> None:
        """`e`: the marked range as a trace of its own (tui/trace/exporting.py)."""
        marked = self.marked
        bounds = self.range_bounds()
        if bounds is None:
            self.notify(
                "Press m again at the range's end, then e exports it"
                if marked is not None
                else "Nothing marked to export: m at a range's start and m at its end (or M on "
                "a selected event, such as a ProfilerStep), then e",
                timeout=5,
                markup=False,
            )
            return
        from kinetoscope.export.crop import Window

        session = self.data.session
        stem = export_stem(session.trace.source.path, "window")
        start_export(self, session, Window(*bounds), "the marked range", stem)

    def _announce_range(self) -> None:
        bounds = self.range_bounds()
        if bounds is not None:
            self.notify(
                f"Range {range_label(self.data, bounds)}: o, k and v now show it "
                "(M in a table switches to the whole trace); e exports it",
                timeout=4,
                markup=False,
            )

    # -- search -------------------------------------------------------------------------------

    def action_search(self) -> None:
        from kinetoscope.tui.widgets.search import SearchScreen

        current = self.search.pattern if self.search is not None else ""
        self.app.push_screen(SearchScreen(current), self._run_search)

    def _run_search(self, pattern: str | None) -> None:
        from kinetoscope.tui.widgets.search import find_matches

        if pattern is None:
            return
        if not pattern:
            self.clear_search()
            self.notify("Search cleared", timeout=2, markup=False)
            return
        try:
            state = find_matches(self.data, pattern)
        except ValueError as error:
            self.notify(str(error), severity="error", timeout=4, markup=False)
            return
        self._search = state
        self.timeline.highlight_names = state.name_mask
        if not len(state.rows):
            self.notify(f"No event name matches {pattern!r}", timeout=3, markup=False)
            return
        self._step_match(1, first=True)

    def clear_search(self) -> None:
        self._search = None
        self.timeline.highlight_names = None

    def action_next_match(self) -> None:
        self._step_match(1)

    def action_prev_match(self) -> None:
        self._step_match(-1)

    def _step_match(self, direction: int, first: bool = False) -> None:
        state = self.search
        if state is None or not len(state.rows):
            self.notify("No search: press / to search event names", timeout=2, markup=False)
            return
        timeline = self.timeline
        now = int(timeline.cursor_time) + self.data.origin
        index = state.step(timeline.selected_row, now, direction, inclusive=first)
        wrapped = state.wrapped
        row = int(state.rows[index])
        timeline.current_gap = -1
        timeline.select(row)
        self.app.clear_notifications()
        note = " (wrapped)" if wrapped else ""
        self.notify(
            f"match {index + 1:,} of {len(state.rows):,}{note}: {state.pattern}",
            timeout=3,
            markup=False,
        )
