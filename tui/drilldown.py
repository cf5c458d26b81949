"""What the drill-down screens share, and the keys that open them from the trace screen.

`DrilldownActions` is mixed into the trace screen: it owns the marked range and the search
state, opens the operator, kernel, findings and overview screens, and puts rows chosen there
back on the timeline (selected and fitted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from kinetoscope.analysis.session import TraceSession
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider

from .table import Column
from .timefmt import fmt_duration, fmt_table_time

if TYPE_CHECKING:
    from kinetoscope.parser.model import Trace

    from .timeline import Timeline
    from .viewdata import ViewData


def analysis_for(data: ViewData) -> TraceSession:
    """The session the timeline is laid out over: the drill-down screens share its results."""
    return data.session


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


fmt_cell_time = fmt_table_time  # the one duration format of the tables


def time_column(
    title: str, values: np.ndarray, width: int = 10, *, optional: bool = False
) -> Column:
    """A column of ns durations (sorted by value, three decimals in an adaptive unit whose
    field lines up down the column), wide enough for its title and its widest value."""
    values = np.asarray(values)
    widest = 10
    if len(values) and float(np.nanmax(np.abs(values))) >= 1e13:
        widest = len(fmt_table_time(float(np.nanmax(np.abs(values))))) + 1
    return Column(
        title,
        lambda r: fmt_table_time(float(values[r])),
        key=values,
        width=max(width, widest, len(title) + 1),
        optional=optional,
    )


def instance_columns(trace: Trace, rows: np.ndarray, origin: int) -> list[Column]:
    """The first columns of a table of instances (trace rows): their number in file order,
    start (relative to the view's origin) and duration."""
    start = trace.start[rows]
    return [
        Column("#", lambda i: f"{i + 1:,}", key=np.arange(len(rows)), width=7, largest_first=False),
        Column("start", lambda i: "+" + fmt_cell_time(int(start[i]) - origin), key=start, width=13),
        time_column("dur", trace.dur[rows]),
    ]


def count_column(title: str, values: np.ndarray, width: int = 6) -> Column:
    """Counts with thousands separators, never cut: as wide as the largest needs."""
    values = np.asarray(values)
    largest = len(f"{int(values.max()):,}") if len(values) else 1
    return Column(
        title,
        lambda r: f"{int(values[r]):,}",
        key=values,
        width=max(width, largest + 1, len(title) + 1),
    )


def percent_column(
    title: str, values: np.ndarray, whole: float, width: int = 6, *, optional: bool = False
) -> Column:
    share = values / whole if whole else np.zeros(len(values))
    return Column(
        title,
        lambda r: f"{100 * share[r]:.1f}",
        key=share,
        width=max(width, len(title) + 1),
        optional=optional,
    )


def share_bar(parts: Iterable[tuple[float, str]], width: int) -> Text:
    """A bar of `width` cells split between parts (value, colour) in proportion."""
    parts = [(max(float(v), 0.0), c) for v, c in parts]
    total = sum(v for v, _ in parts)
    text = Text()
    if total <= 0 or width <= 0:
        return Text("·" * max(width, 0), "dim")
    # Largest remainder: cells add up to `width` exactly.
    exact = [v / total * width for v, _ in parts]
    cells = [int(x) for x in exact]
    for i in sorted(range(len(parts)), key=lambda i: exact[i] - cells[i], reverse=True)[
        : width - sum(cells)
    ]:
        cells[i] += 1
    for (_, colour), n in zip(parts, cells):
        text.append("█" * n, colour)
    return text


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
    Binding("t", "findings", "Findings", show=False, tooltip="Triage findings, most severe first"),
    Binding(
        "v", "overview", "Overview", show=False, tooltip="Per-step breakdown and GPU utilisation"
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
    Binding(
        "slash", "search", "Search", show=False, tooltip="Search event names (re: for a regex)"
    ),
    Binding("n", "next_match", "Next match", show=False, tooltip="Next search match in time"),
    Binding("N", "prev_match", "Previous match", show=False, tooltip="Previous search match"),
]


class DrilldownActions:
    """Mixed into the trace screen (which has `data`, `timeline`, `app`, `notify`)."""

    data: ViewData
    app: Any
    notify: Callable[..., None]
    timeline: Timeline

    # -- state ----------------------------------------------------------------------------------

    @property
    def analysis(self) -> TraceSession:
        return analysis_for(self.data)

    @property
    def marked(self) -> MarkedRange | None:
        return self.__dict__.get("_marked")

    @marked.setter
    def marked(self, value: MarkedRange | None) -> None:
        self.__dict__["_marked"] = value
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
    def search(self):  # -> SearchState | None
        return self.__dict__.get("_search")

    # -- opening screens --------------------------------------------------------------------

    def _open(self, name: str, make: Callable[[], Any]) -> None:
        app = self.app
        key = f"drilldown-{name}-{id(self)}"
        if not app.is_screen_installed(key):
            app.install_screen(make(), key)
        app.push_screen(key)

    def action_operators(self) -> None:
        from .operators import OperatorsScreen

        self._open("operators", lambda: OperatorsScreen(self))

    def action_kernels(self) -> None:
        from .kernels import KernelsScreen

        self._open("kernels", lambda: KernelsScreen(self))

    def action_findings(self) -> None:
        from .findings import FindingsScreen

        self._open("findings", lambda: FindingsScreen(self))

    def action_overview(self) -> None:
        from .overview import OverviewScreen

        self.app.push_screen(OverviewScreen(self))

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

    def _announce_range(self) -> None:
        bounds = self.range_bounds()
        if bounds is not None:
            self.notify(
                f"Range {range_label(self.data, bounds)}: o, k and v now show it "
                "(M in a table switches to the whole trace)",
                timeout=4,
                markup=False,
            )

    # -- search -------------------------------------------------------------------------------

    def action_search(self) -> None:
        from .search import SearchScreen

        current = self.search.pattern if self.search is not None else ""
        self.app.push_screen(SearchScreen(current), self._run_search)

    def _run_search(self, pattern: str | None) -> None:
        from .search import find_matches

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
        self.__dict__["_search"] = state
        self.timeline.highlight_names = state.name_mask
        if not len(state.rows):
            self.notify(f"No event name matches {pattern!r}", timeout=3, markup=False)
            return
        self._step_match(1, first=True)

    def clear_search(self) -> None:
        self.__dict__["_search"] = None
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


def drilldown_help_sections() -> list[tuple[str, list[BindingType]]]:
    """(screen title, bindings) of every drill-down screen, for the help screen."""
    from .findings import FindingsScreen
    from .kernels import KernelDetailScreen, KernelsScreen
    from .operators import OperatorDetailScreen, OperatorsScreen
    from .overview import OverviewScreen
    from .search import SearchScreen
    from .table import DataView, TableScreen

    table = list(DataView.BINDINGS) + list(TableScreen.BINDINGS)
    return [
        ("Any table", table),
        ("Operators (o)", list(OperatorsScreen.BINDINGS)),
        ("Operator details", list(OperatorDetailScreen.BINDINGS)),
        ("Kernels (k)", list(KernelsScreen.BINDINGS)),
        ("Kernel details", list(KernelDetailScreen.BINDINGS)),
        ("Findings (t)", list(FindingsScreen.BINDINGS)),
        ("Overview (v)", list(OverviewScreen.BINDINGS)),
        ("Search (/)", list(SearchScreen.BINDINGS)),
    ]


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


def drilldown_key_help(app: Any) -> list[tuple[str, str]]:
    """Help rows for the drill-down screens: a heading row per screen, then its keys."""
    rows: list[tuple[str, str]] = []
    for title, bindings in drilldown_help_sections():
        rows.append((f"── {title}", ""))
        rows.extend(binding_rows(app, bindings))
    return rows


def viewer_help_sections() -> list[tuple[str, type, list[BindingType]]]:
    """(title, screen class, bindings) of every screen of the viewer: the timeline, the
    drill-down tables, the memory view and the sync view."""
    from .findings import FindingsScreen
    from .kernels import KernelDetailScreen, KernelsScreen
    from .memory_view import MemoryChart, MemoryScreen
    from .operators import OperatorDetailScreen, OperatorsScreen
    from .overview import OverviewScreen
    from .screens import TraceScreen
    from .search import SearchScreen
    from .sync_view import SyncScreen
    from .table import TableScreen
    from .timeline import Timeline

    rows_keys: list[BindingType] = [
        Binding("up,down,pageup,pagedown", "table_move", "Move in the table below"),
        Binding("tab", "focus_next", "Between the curve and the table"),
    ]
    memory = [
        *MemoryChart.BINDINGS,
        *MemoryScreen.BINDINGS,
        *rows_keys,
        Binding("enter", "table_choose", "(in the table) Go to that operator on the timeline"),
    ]
    sync = [
        *SyncScreen.BINDINGS,
        Binding("up,down,pageup,pagedown,home,end", "table_move", "Move in the table"),
        Binding(
            "enter", "table_choose", "Show the call on the timeline, and the GPU idle after it"
        ),
    ]
    by_title = {title: bindings for title, bindings in drilldown_help_sections()}
    classes = {
        "Operators (o)": OperatorsScreen,
        "Operator details": OperatorDetailScreen,
        "Kernels (k)": KernelsScreen,
        "Kernel details": KernelDetailScreen,
        "Findings (t)": FindingsScreen,
        "Overview (v)": OverviewScreen,
        "Search (/)": SearchScreen,
        "Any table": TableScreen,
    }
    return [
        ("Timeline", TraceScreen, [*Timeline.BINDINGS, *TraceScreen.BINDINGS]),
        *((title, classes[title], bindings) for title, bindings in by_title.items()),
        ("Memory (p)", MemoryScreen, memory),
        ("Sync (b)", SyncScreen, sync),
    ]


def key_help_for(app: Any, front: Any) -> list[tuple[str, str]]:
    """Help rows, a heading row per screen: the keys of the screen `?` was pressed on first
    (marked "this screen"), then the app's own, then every other screen's."""
    sections = viewer_help_sections()
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
