"""The command palette's provider (`ScreenActions`: every described key of the screen in front)
and the key help (`?`): the keys of every screen of the viewer, the one in front first.

A new screen is listed in the help by adding its section to `viewer_help_sections`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider


def drilldown_help_sections() -> list[tuple[str, list[BindingType]]]:
    """(screen title, bindings) of every drill-down screen, for the help screen."""
    from kinetoscope.tui.trace.compile_view import CompileScreen
    from kinetoscope.tui.trace.findings import FindingsScreen
    from kinetoscope.tui.trace.kernels import KernelDetailScreen, KernelsScreen
    from kinetoscope.tui.trace.operators import OperatorDetailScreen, OperatorsScreen
    from kinetoscope.tui.trace.overview import OverviewScreen
    from kinetoscope.tui.widgets.search import SearchScreen
    from kinetoscope.tui.widgets.table import DataView, TableScreen

    table = list(DataView.BINDINGS) + list(TableScreen.BINDINGS)
    return [
        ("Any table", table),
        ("Operators (o)", list(OperatorsScreen.BINDINGS)),
        ("Operator details", list(OperatorDetailScreen.BINDINGS)),
        ("Kernels (k)", list(KernelsScreen.BINDINGS)),
        ("Kernel details", list(KernelDetailScreen.BINDINGS)),
        ("Findings (t)", list(FindingsScreen.BINDINGS)),
        ("Overview (v)", list(OverviewScreen.BINDINGS)),
        ("Compile (c)", list(CompileScreen.BINDINGS)),
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


def viewer_help_sections() -> list[tuple[str, type, list[BindingType]]]:
    """(title, screen class, bindings) of every screen of the viewer: the timeline, the
    drill-down tables, the memory view and the sync view."""
    from kinetoscope.tui.trace.compile_view import CompileScreen
    from kinetoscope.tui.trace.findings import FindingsScreen
    from kinetoscope.tui.trace.kernels import KernelDetailScreen, KernelsScreen
    from kinetoscope.tui.trace.memory_view import MemoryChart, MemoryScreen
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
    from kinetoscope.tui.widgets.timeline import Timeline

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
    categories = [
        *CategoryPicker.BINDINGS,
        Binding("up,down,home,end", "table_move", "Move in the list"),
        Binding("enter", "table_choose", "Show the highlighted category"),
    ]
    details_keys: list[BindingType] = [  # Textual's own focus keys, on every screen
        Binding("tab", "focus_next", "Focus the details pane, to scroll it (↑ ↓ PgUp PgDn)"),
        Binding("shift+tab", "focus_previous", "Back to the timeline"),
    ]
    gaps = [
        *GapListScreen.BINDINGS,
        Binding("up,down,pageup,pagedown,home,end", "table_move", "Move in the list"),
        Binding("enter", "table_choose", "Jump to the gap on the timeline"),
    ]
    by_title = {title: bindings for title, bindings in drilldown_help_sections()}
    classes = {
        "Operators (o)": OperatorsScreen,
        "Operator details": OperatorDetailScreen,
        "Kernels (k)": KernelsScreen,
        "Kernel details": KernelDetailScreen,
        "Findings (t)": FindingsScreen,
        "Overview (v)": OverviewScreen,
        "Compile (c)": CompileScreen,
        "Search (/)": SearchScreen,
        "Any table": TableScreen,
    }
    return [
        ("Timeline", TraceScreen, [*Timeline.BINDINGS, *TraceScreen.BINDINGS, *details_keys]),
        *((title, classes[title], bindings) for title, bindings in by_title.items()),
        ("Idle gaps (i)", GapListScreen, gaps),
        ("Operator categories (C in o)", CategoryPicker, categories),
        ("Memory (p)", MemoryScreen, memory),
        ("Sync (b)", SyncScreen, sync),
    ]


def job_help_sections() -> list[tuple[str, type, list[BindingType]]]:
    """(title, screen class, bindings) of the job viewer's own screens (a folder or several
    rank files), listed before the single-trace viewer's (a rank opened on its own)."""
    from kinetoscope.tui.job.job_app import RankTraceScreen
    from kinetoscope.tui.job.job_collectives import CollectivesScreen
    from kinetoscope.tui.job.job_ranks import RanksScreen
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen, RankPairScreen
    from kinetoscope.tui.trace.screens import TraceScreen
    from kinetoscope.tui.widgets.table import DataView, TableScreen
    from kinetoscope.tui.widgets.timeline import Timeline

    ranks: list[BindingType] = [
        Binding("up,down,left,right", "matrix_move", "Move over ranks and steps"),
        *(b for b in RanksScreen.BINDINGS if isinstance(b, Binding) and b.key != "tab"),
        Binding("tab", "focus_next", "Between the matrix and the per-rank table (< > sort it)"),
    ]
    table = list(DataView.BINDINGS) + list(TableScreen.BINDINGS)
    collectives: list[BindingType] = [
        Binding("enter", "choose", "Show it on the timeline of the rank that waited longest"),
        *table,  # Enter's line above is the table's (the same action)
    ]
    rank: list[BindingType] = [*RankTraceScreen.BINDINGS, *Timeline.BINDINGS, *TraceScreen.BINDINGS]
    # The job's timeline: the single-trace timeline's keys, on every rank at once.
    job_timeline: list[BindingType] = [
        *(b for b in Timeline.BINDINGS if isinstance(b, Binding) and b.key not in ("enter", "P")),
        *JobTimelineScreen.BINDINGS,
    ]
    pair: list[BindingType] = [*RankPairScreen.BINDINGS, *Timeline.BINDINGS]
    return [
        ("Ranks overview", RanksScreen, ranks),
        ("Collectives (c)", CollectivesScreen, collectives),
        ("Job timeline (t)", JobTimelineScreen, job_timeline),
        ("Two ranks side by side (x)", RankPairScreen, pair),
        ("A rank's timeline (Enter, s)", RankTraceScreen, rank),
    ]


def diff_help_sections() -> list[tuple[str, type, list[BindingType]]]:
    """(title, screen class, bindings) of the diff viewer's own screens (`kinetoscope diff`),
    listed before the single-trace viewer's (a trace opened alone)."""
    from kinetoscope.tui.diff.diff_table import DiffScreen
    from kinetoscope.tui.diff.diff_timeline import DiffPairScreen, HalfTraceScreen
    from kinetoscope.tui.trace.screens import TraceScreen
    from kinetoscope.tui.widgets.table import DataView, TableScreen
    from kinetoscope.tui.widgets.timeline import Timeline

    table: list[BindingType] = [
        Binding("enter", "choose", "Both timelines at the paired step, the row's instances lit"),
        *DataView.BINDINGS,  # Enter's line above is the table's (the same action)
        *(b for b in TableScreen.BINDINGS if isinstance(b, Binding) and b.key != "escape"),
        *DiffScreen.BINDINGS,
    ]
    pair: list[BindingType] = [
        *DiffPairScreen.BINDINGS,
        Binding("0", "fit_all", "The paired step, whole (the longer of the two)"),
        *Timeline.BINDINGS,  # 0's line above is the timeline's (the same action)
    ]
    alone: list[BindingType] = [
        *HalfTraceScreen.BINDINGS,
        *Timeline.BINDINGS,
        *TraceScreen.BINDINGS,
    ]
    return [
        ("Diff table", DiffScreen, table),
        ("Both timelines (Enter)", DiffPairScreen, pair),
        ("A trace alone (O)", HalfTraceScreen, alone),
    ]


def key_help_for(
    app: Any, front: Any, extra: list[tuple[str, type, list[BindingType]]] | None = None
) -> list[tuple[str, str]]:
    """Help rows, a heading row per screen: the keys of the screen `?` was pressed on first
    (marked "this screen"), then the app's own, then every other screen's. `extra`: sections
    listed before the viewer's (the job viewer's screens)."""
    sections = [*(extra or []), *viewer_help_sections()]
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
            for label, action in getattr(node, "PALETTE_COMMANDS", ()):  # no key of their own
                if action not in seen:
                    seen.add(action)
                    out.append((label, action, node))
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
