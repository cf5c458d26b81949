"""The one home of "open a screen" in the single-trace viewer, and what the screens opened from
the timeline share.

`NAVIGATION` maps each action of the trace screen that opens a screen to that screen: how it is
made (with what arguments), whether it is kept, and what the trace screen does with its answer.
`DrilldownActions` is mixed into the trace screen: it opens those screens (`open_screen`), owns
the marked range and the search state, and puts rows chosen in them back on the timeline
(selected and fitted). `viewer_help_sections` lists the viewer's screens in the order `?`
shows their keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kinetoscope.tui.data.places import Jump, MarkedRange, range_label
from kinetoscope.tui.palette import HelpSection, help_sections
from kinetoscope.tui.trace.exporting import EXPORT_BINDING, export_stem, start_export
from textual.binding import Binding, BindingType

if TYPE_CHECKING:
    from kinetoscope.tui.data.viewdata import ViewData
    from kinetoscope.tui.widgets.search import SearchState
    from kinetoscope.tui.widgets.timeline import Timeline
    from textual.screen import Screen


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


@dataclass(frozen=True)
class Route:
    """What an action of the trace screen opens. `screen(host)` makes the screen for the trace
    screen `host` (its module is imported then: the viewer starts without the drill-down
    modules). `kept`: made once per trace screen and shown again as it was left (its sort,
    filter and cursor), else made anew each time. `answer(host)`, when given, makes the
    callback that gets what the screen answers when it closes."""

    screen: Callable[[DrilldownActions], Screen]
    kept: bool = False
    answer: Callable[[DrilldownActions], Callable[[Any], None]] | None = None


def _operators(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.trace.operators import OperatorsScreen

    return OperatorsScreen(host)


def _kernels(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.trace.kernels import KernelsScreen

    return KernelsScreen(host)


def _findings(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.trace.findings import FindingsScreen

    return FindingsScreen(host)


def _overview(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.trace.overview import OverviewScreen

    return OverviewScreen(host)


def _compile(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.trace.compile_view import CompileScreen

    return CompileScreen(host)


def _search_prompt(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.widgets.search import SearchScreen

    return SearchScreen(host.search.pattern if host.search is not None else "")


def _gap_list(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.trace.screens import GapListScreen

    return GapListScreen(host.data, host.timeline.gap_threshold)


def _memory(host: DrilldownActions) -> Screen:
    """The memory view, on the timeline's time axis."""
    from kinetoscope.tui.trace.memory_view import MemoryScreen

    timeline = host.timeline
    return MemoryScreen(
        host.data,
        view_start=timeline.view_start,
        ns_per_cell=timeline.ns_per_cell,
        cursor_time=timeline.cursor_time,
        label_width=timeline.label_width,
    )


def _syncs(host: DrilldownActions) -> Screen:
    from kinetoscope.tui.trace.sync_view import SyncScreen

    return SyncScreen(host.data)


def _to_gap(host: DrilldownActions) -> Callable[[Any], None]:
    """The gap list answers the gap chosen (-1 or None: none): the timeline goes to it."""

    def jump(gap: int | None) -> None:
        if gap is not None and gap >= 0:
            host.timeline.go_to_gap(gap)

    return jump


def _to_target(host: DrilldownActions) -> Callable[[Any], None]:
    """The memory and sync views answer where the timeline should go (or None)."""
    from kinetoscope.tui.trace.memory_view import apply_target

    timeline, data = host.timeline, host.data
    return lambda target: apply_target(timeline, data, target)


def _searched(host: DrilldownActions) -> Callable[[Any], None]:
    return host.run_search


# action of the trace screen (its key: DRILLDOWN_BINDINGS, TraceScreen.BINDINGS) -> what it opens
NAVIGATION: dict[str, Route] = {
    "operators": Route(_operators, kept=True),
    "kernels": Route(_kernels, kept=True),
    "findings": Route(_findings, kept=True),
    "overview": Route(_overview),
    "compile": Route(_compile, kept=True),
    "search": Route(_search_prompt, answer=_searched),
    "gap_list": Route(_gap_list, answer=_to_gap),
    "memory": Route(_memory, answer=_to_target),
    "syncs": Route(_syncs, answer=_to_target),
}


def viewer_help_sections() -> list[HelpSection]:
    """(title, screen class, bindings) of every screen of the single-trace viewer, in the order
    `?` lists them: the timeline, the drill-down tables, the lists, the memory and sync views.
    Each screen declares its own (tui/palette.py)."""
    from kinetoscope.tui.trace.compile_view import CompileScreen
    from kinetoscope.tui.trace.findings import FindingsScreen
    from kinetoscope.tui.trace.kernels import KernelDetailScreen, KernelsScreen
    from kinetoscope.tui.trace.memory_view import MemoryScreen
    from kinetoscope.tui.trace.operators import (
        CategoryPicker,
        OperatorDetailScreen,
        OperatorsScreen,
    )
    from kinetoscope.tui.trace.overview import OverviewScreen
    from kinetoscope.tui.trace.screens import GapListScreen, TraceScreen
    from kinetoscope.tui.trace.sync_view import SyncScreen
    from kinetoscope.tui.widgets.search import SearchScreen
    from kinetoscope.tui.widgets.table import TableScreen

    return help_sections(
        [
            TraceScreen,
            TableScreen,
            OperatorsScreen,
            OperatorDetailScreen,
            KernelsScreen,
            KernelDetailScreen,
            FindingsScreen,
            OverviewScreen,
            CompileScreen,
            SearchScreen,
            GapListScreen,
            CategoryPicker,
            MemoryScreen,
            SyncScreen,
        ]
    )


class DrilldownActions:
    """Mixed into the trace screen (which has `data`, `timeline`, `app`, `notify`).

    The screens it opens get it as their `host` (a `places.RangeHost`): they read the trace's
    results from `host.data.session`, the marked range from `host.range_bounds()`, and go back
    to the timeline with `host.show_on_timeline(Jump(...))`. A new screen opened from the
    timeline gets a route in NAVIGATION and an `action_*` here that opens it (and a key in
    DRILLDOWN_BINDINGS); it declares its own HELP_TITLE and is named in viewer_help_sections.
    A table over the whole trace or the marked range subclasses rangetable.RangeTableScreen.
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

    # -- opening screens (NAVIGATION) ----------------------------------------------------------

    def open_screen(self, action: str) -> None:
        """Open the screen `action` names in NAVIGATION."""
        route = NAVIGATION[action]
        app = self.app
        if route.kept:
            key = f"drilldown-{action}-{id(self)}"
            if not app.is_screen_installed(key):
                app.install_screen(route.screen(self), key)
            app.push_screen(key)
            return
        app.push_screen(route.screen(self), route.answer(self) if route.answer else None)

    def action_operators(self) -> None:
        self.open_screen("operators")

    def action_kernels(self) -> None:
        self.open_screen("kernels")

    def action_findings(self) -> None:
        self.open_screen("findings")

    def action_overview(self) -> None:
        self.open_screen("overview")

    def action_compile(self) -> None:
        self.open_screen("compile")

    def action_search(self) -> None:
        self.open_screen("search")

    def action_gap_list(self) -> None:
        self.open_screen("gap_list")

    def action_memory(self) -> None:
        self.open_screen("memory")

    def action_syncs(self) -> None:
        self.open_screen("syncs")

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

    def run_search(self, pattern: str | None) -> None:
        """The search screen's answer: search for `pattern` (None: cancelled; "": clear)."""
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
