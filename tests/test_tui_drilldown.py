"""Drill-down screens driven like a user, with the numbers shown checked against the analysis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.drilldown import instances_of, kernels_launched
from kinetoscope.analysis.ranges import operators_in_range
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.findings import FindingsScreen
from kinetoscope.tui.trace.kernels import KernelDetailScreen, KernelsScreen
from kinetoscope.tui.trace.operators import OperatorDetailScreen, OperatorsScreen
from kinetoscope.tui.trace.overview import OverviewScreen
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.widgets.columns import fmt_cell_time
from kinetoscope.tui.widgets.search import SearchScreen
from kinetoscope.tui.widgets.table import DataView, TableModel, name_matcher, sort_rows
from kinetoscope.tui.widgets.timeline import Timeline
from pilot_helpers import settle
from test_tui_sample import EVIL_NAME, sample_trace

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "sample_traces"
    / "synthetic_gpu_training.pt.trace.json.gz"
)
SIZE = (120, 40)

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")


async def press(pilot, *keys: str, until=None):
    for key in keys:
        await pilot.press(key)
    if until is not None:
        return await settle(pilot, until)
    await pilot.pause()
    return pilot.app.screen


async def type_text(pilot, text: str) -> None:
    for ch in text:
        await pilot.press(ch)
    await pilot.pause()


def shown_rows(screen) -> list[list[str]]:
    return screen.table.visible_texts()


def column_index(screen, title: str) -> int:
    titles = [c.title for c in screen.table.model.columns]
    return titles.index(title)


def in_view(timeline: Timeline, row: int) -> bool:
    data = timeline.data
    return timeline.view_start <= data.rel_start(row) and data.rel_end(row) <= timeline.view_end + 1


@pytest.mark.also_no_color
async def test_operator_table_drill_down_instance_to_timeline():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        analysis = TraceSession(trace_screen.data.trace)
        trace = analysis.trace
        ops = analysis.operators

        screen = await press(pilot, "o", until=OperatorsScreen)
        rows = shown_rows(screen)
        assert len(rows) == len(ops)
        # Default order: self time, largest first; every number equals the analysis'.
        expected = np.argsort(-ops.excl, kind="stable")
        for shown, group in zip(rows, expected.tolist()):
            assert shown[0] == trace.strings[ops.groups.name[group]]
            assert shown[column_index(screen, "count")] == f"{int(ops.count[group]):,}"
            for title, values in (
                ("total", ops.incl),
                ("self", ops.excl),
                ("GPU self", ops.gpu_self),
                ("GPU total", ops.gpu_total),
            ):
                assert shown[column_index(screen, title)] == fmt_cell_time(values[group]), title

        # Typing filters; Enter drills into the highlighted row at once.
        await type_text(pilot, "aten::mm")
        assert [r[0] for r in shown_rows(screen)] == ["aten::mm"]
        detail = await press(pilot, "enter", until=OperatorDetailScreen)
        mm = detail.name_group
        longest = instances_of(trace, analysis.cpu_groups, mm)
        assert detail.rows.tolist() == longest.tolist()
        durations = [r[column_index(detail, "dur")] for r in shown_rows(detail)]
        assert durations == [fmt_cell_time(d) for d in trace.dur[longest]]

        # The split adds up to the inclusive time, and the kernels it launched are its GPU total.
        split = detail.split
        assert split.inclusive == ops.incl[mm]
        assert split.self_time + int(split.child_time.sum()) == split.inclusive
        launched = kernels_launched(
            trace, analysis.nesting, analysis.links, analysis.cpu_groups, analysis.gpu_groups, mm
        )
        assert launched.total_time == ops.gpu_total[mm] == detail.kernels.total_time
        await press(pilot, "K")
        kernel_rows = shown_rows(detail)
        assert [r[0] for r in kernel_rows] == [
            trace.strings[analysis.gpu_groups.name[g]] for g in launched.kernel_group
        ]
        await press(pilot, "C")
        assert shown_rows(detail)[0][0] == "(self)"
        await press(pilot, "I", "tab")
        assert detail.current == "children"
        await press(pilot, "I")

        # Enter on the first instance: the timeline selects the longest one and fits it.
        screen = await press(pilot, "enter", until=TraceScreen)
        assert screen is trace_screen
        timeline = screen.timeline
        assert timeline.selected_row == int(longest[0])
        assert in_view(timeline, int(longest[0]))
        assert timeline.view_end - timeline.view_start < 2 * int(trace.dur[longest[0]])

        # o again comes back to the same table, filter and all.
        screen = await press(pilot, "o", until=OperatorsScreen)
        assert screen.table.pattern == "aten::mm"


async def test_escape_clears_the_filter_then_goes_back():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        screen = await press(pilot, "o", until=OperatorsScreen)
        total = screen.table.row_count
        await type_text(pilot, "re:^aten::(mm|addmm)$")
        assert sorted(r[0] for r in shown_rows(screen)) == ["aten::addmm", "aten::mm"]
        await press(pilot, "escape")  # in the filter box: clears it
        assert screen.table.row_count == total
        assert screen.table.has_focus
        await type_text(pilot, "re:(")
        assert screen.table.filter_error is not None
        await press(pilot, "enter")  # a broken pattern: back to the table, nothing opened
        assert screen.table.has_focus and isinstance(app.screen, OperatorsScreen)
        await press(pilot, "escape")  # then clear
        assert screen.table.pattern == ""
        # Enter on a filter that matches opens the row; Enter with the box empty only goes back.
        await press(pilot, "slash", "enter")
        assert screen.table.has_focus and isinstance(app.screen, OperatorsScreen)
        await press(pilot, "escape", until=TraceScreen)


async def test_sorting_by_keys():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        ops = TraceSession(trace_screen.data.trace).operators
        screen = await press(pilot, "o", until=OperatorsScreen)
        table = screen.table
        count = column_index(screen, "count")
        await press(pilot, str(count + 1))
        assert table.sort_column == count and table.sort_descending
        assert table.current_row == int(np.argmax(ops.count))
        await press(pilot, "R")
        assert not table.sort_descending
        assert int(ops.count[table.current_row]) == int(ops.count.min())
        await press(pilot, "greater_than_sign")
        assert table.sort_column == count + 1

        # C picks a category (all first, then cpu_op), and all again.
        cat = column_index(screen, "cat")
        await press(pilot, "C", "down", "enter")
        await pilot.pause()
        shown = shown_rows(screen)
        assert {r[cat] for r in shown} == {"cpu_op"}
        cpu_op = TraceSession(trace_screen.data.trace).trace.string_id("cpu_op")
        assert len(shown) == int((ops.groups.cat == cpu_op).sum())
        await press(pilot, "C", "home", "enter")
        await pilot.pause()
        assert table.row_count == len(ops)


@pytest.mark.also_no_color
async def test_kernels_table_instances_and_jump():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        analysis = TraceSession(trace_screen.data.trace)
        trace, kernels = analysis.trace, analysis.kernels
        screen = await press(pilot, "k", until=KernelsScreen)
        rows = shown_rows(screen)
        top = int(np.argmax(kernels.total))
        assert rows[0][0] == trace.strings[kernels.groups.name[top]]
        for title, value in (
            ("total", kernels.total[top]),
            ("mean", kernels.mean()[top]),
            ("min", kernels.min[top]),
            ("max", kernels.max[top]),
        ):
            assert rows[0][column_index(screen, title)] == fmt_cell_time(value), title
        assert rows[0][column_index(screen, "count")] == f"{int(kernels.count[top]):,}"
        assert rows[0][column_index(screen, "launched by")] == "aten::addmm"

        detail = await press(pilot, "enter", until=KernelDetailScreen)
        assert detail.table.row_count == kernels.count[top]
        longest = int(detail.rows[0])
        assert trace.dur[longest] == kernels.max[top]
        screen = await press(pilot, "enter", until=TraceScreen)
        assert screen.timeline.selected_row == longest
        assert in_view(screen.timeline, longest)


@pytest.mark.also_no_color
async def test_findings_enter_shows_the_evidence():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        # One row per cause: the findings of other rules it explains are inside it.
        findings = TraceSession(trace_screen.data.trace).causes
        assert findings, "the sample trace is built to trigger rules"
        screen = await press(pilot, "t", until=FindingsScreen)
        rows = shown_rows(screen)
        assert [r[2] for r in rows] == [f.rule for f in findings]
        ranks = {"critical": 0, "warning": 1, "info": 2}
        assert [ranks[r[1]] for r in rows] == sorted(ranks[r[1]] for r in rows)
        await press(pilot, "down")
        second = findings[1]
        detail = str(screen.query_one("#table-detail").render())
        assert second.rule in detail
        screen = await press(pilot, "enter", until=TraceScreen)
        timeline = screen.timeline
        data = screen.data
        if second.rows:
            assert timeline.selected_row == second.rows[0]
        start = second.start - data.origin
        assert timeline.view_start <= start
        assert start + second.dur <= timeline.view_end


@pytest.mark.also_no_color
async def test_search_highlights_and_steps_through_matches():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        trace = screen.data.trace
        timeline = screen.timeline
        expected = np.flatnonzero(trace.name == trace.string_id("aten::mm"))
        expected = expected[np.lexsort((expected, trace.start[expected]))]

        await press(pilot, "slash", until=SearchScreen)
        await type_text(pilot, "ATEN::MM")
        screen = await press(pilot, "enter", until=TraceScreen)
        state = screen.search
        assert state.rows.tolist() == expected.tolist()
        assert timeline.highlight_names is not None
        assert timeline.highlight_names[trace.string_id("aten::mm")]
        assert timeline.selected_row == int(expected[0])
        await press(pilot, "n", "n")
        assert timeline.selected_row == int(expected[2])
        await press(pilot, "N")
        assert timeline.selected_row == int(expected[1])
        await press(pilot, "N", "N")  # wraps to the last
        assert timeline.selected_row == int(expected[-1])

        # A regular expression, then an empty search clears the highlight.
        await press(pilot, "slash", until=SearchScreen)
        await press(pilot, *["backspace"] * 12)
        await type_text(pilot, "re:^aten::(mm|addmm)$")
        await press(pilot, "enter", until=TraceScreen)
        names = {trace.name_of(int(r)) for r in screen.search.rows}
        assert names == {"aten::mm", "aten::addmm"}
        await press(pilot, "slash", until=SearchScreen)
        await press(pilot, *["backspace"] * 40, "enter")
        await settle(pilot, TraceScreen)
        assert timeline.highlight_names is None


async def test_search_highlight_is_drawn_on_matching_cells():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        timeline = screen.timeline
        step_row = next(i for i, r in enumerate(timeline.rows) if not r.is_header)
        before = timeline._row_strip(step_row, timeline.content_width)
        await press(pilot, "slash", until=SearchScreen)
        await type_text(pilot, "ProfilerStep")
        await press(pilot, "enter", until=TraceScreen)
        await press(pilot, "escape")  # deselect, so only the highlight differs
        after = timeline._row_strip(step_row, timeline.content_width)
        colours = {str(s.style.bgcolor) for s in after if s.style and s.style.bgcolor}
        assert any("d7a0ff" in c for c in colours)
        assert before.text == after.text


async def test_marked_range_restricts_the_tables():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        data = screen.data
        analysis = TraceSession(data.trace)
        timeline = screen.timeline
        timeline.cursor_time = 2_000_000
        await press(pilot, "m")
        timeline.cursor_time = 9_000_000
        await press(pilot, "m")
        bounds = (data.origin + 2_000_000, data.origin + 9_000_000)
        assert screen.range_bounds() == bounds
        assert timeline.marked_range == (2_000_000, 9_000_000)

        ops_screen = await press(pilot, "o", until=OperatorsScreen)
        assert ops_screen.shown_range == bounds
        ranged = operators_in_range(
            data.trace, analysis.nesting, analysis.cpu_groups, analysis.links, *bounds
        )
        rows = shown_rows(ops_screen)
        top = int(np.argmax(ranged.excl))
        assert rows[0][0] == data.trace.strings[ranged.groups.name[top]]
        assert rows[0][column_index(ops_screen, "self")] == fmt_cell_time(ranged.excl[top])
        assert rows[0][column_index(ops_screen, "count")] == f"{int(ranged.count[top]):,}"
        assert len(rows) == int(
            ((ranged.count > 0) | (ranged.gpu_total > 0) | (ranged.gpu_self > 0)).sum()
        )
        # M switches to the whole trace and back.
        await press(pilot, "M")
        await settle(pilot, OperatorsScreen)
        assert ops_screen.shown_range is None
        assert len(shown_rows(ops_screen)) == len(analysis.operators)
        await press(pilot, "M")
        await settle(pilot, OperatorsScreen)
        assert ops_screen.shown_range == bounds

        kernels = await press(pilot, "escape", "k", until=KernelsScreen)
        assert kernels.shown_range == bounds
        assert all(r[column_index(kernels, "count")] != "0" for r in shown_rows(kernels))


@pytest.mark.also_no_color
async def test_overview_steps_and_marking_a_step():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        steps = TraceSession(screen.data.trace).steps
        overview = await press(pilot, "v", until=OverviewScreen)
        rows = shown_rows(overview)
        assert [r[0] for r in rows] == [screen.data.trace.name_of(int(r)) for r in steps.rows]
        assert rows[1][column_index(overview, "wall")] == fmt_cell_time(steps.dur[1])
        devices = str(overview.query_one("#overview-devices").render())
        assert "GPU 0" in devices and "busy" in devices
        await press(pilot, "down", "M")
        assert screen.range_bounds() == (int(steps.start[1]), int(steps.end[1]))
        assert "marked range" in str(overview.query_one("#overview-devices").render())
        screen = await press(pilot, "enter", until=TraceScreen)
        assert screen.timeline.selected_row == int(steps.rows[1])


async def test_mark_selection_uses_the_selected_event():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        await press(pilot, "right")  # selects the first event of the lane: a ProfilerStep
        row = screen.timeline.selected_row
        start = int(screen.data.trace.start[row])
        await press(pilot, "M")
        assert screen.range_bounds() == (start, start + int(screen.data.trace.dur[row]))
        await press(pilot, "M")  # the same event again clears it
        assert screen.range_bounds() is None


async def test_help_lists_every_drilldown_binding():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        help_screen = await press(pilot, "question_mark", until=HelpScreen)
        texts = [str(d) for _, d in help_screen.bindings]
        for wanted in (
            "Operators by self time",
            "Kernels, memcpys and memsets",
            "Triage findings",
            "Per-step breakdown",
            "Mark a range start",
            "Search event names",
            "Next search match",
            "Group by name + input shape",
            "Reverse the sort order",
            "Instances, longest first",
        ):
            assert any(wanted in t for t in texts), wanted


async def test_command_palette_opens_the_operators():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await press(pilot, "ctrl+p")
        await pilot.pause(0.2)
        await type_text(pilot, "Operators by self")
        await pilot.pause(0.5)
        await press(pilot, "enter")
        await settle(pilot, OperatorsScreen)


async def test_shapes_grouping_and_hostile_names(write_trace):
    path = write_trace(sample_trace(), name="shapes.json")
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        screen = await press(pilot, "o", until=OperatorsScreen)
        names = [r[0] for r in shown_rows(screen)]
        assert any("EVIL" in n for n in names)
        # Drawn lines hold no escape or bell bytes, and markup stays literal.
        view = screen.query_one(DataView)
        for y in range(view.row_count + 1):
            text = view.render_line(y).text
            assert "\x1b" not in text and "\x07" not in text
        assert any("[bold]not markup[/bold]" in n for n in names)
        assert all(EVIL_NAME not in n for n in names)

        await press(pilot, "S")
        await settle(pilot, OperatorsScreen)
        shape = column_index(screen, "input shape")
        linear = [r for r in shown_rows(screen) if r[0] == "aten::linear"]
        assert [r[shape] for r in linear] == ["[[4,8]]"]
        await type_text(pilot, "aten::linear")
        detail = await press(pilot, "enter", until=OperatorDetailScreen)
        assert detail.op_name == "aten::linear" and detail.shape >= 0
        await press(pilot, "S")
        assert [r[0] for r in shown_rows(detail)] == ["[[4,8]]"]


def test_big_table_sorts_and_filters_without_work_per_row():
    n = 400_000
    rng = np.random.default_rng(1)
    values = rng.integers(0, 10**9, n)
    names = rng.integers(0, 5000, n)
    texts = [f"kernel_{i}" for i in range(5000)]
    model = TableModel(
        columns=[_text_column(texts, names), _number_column(values)],
        n=n,
        names=names,
        name_text=texts.__getitem__,
        default_sort=1,
    )
    from work_count import CallCount

    with CallCount() as count:
        order = sort_rows(model, 1, True)
        keep = model.matching("kernel_12")
    assert np.all(np.diff(values[order]) <= 0)
    assert keep.sum() == np.isin(names, [12, *range(120, 130), *range(1200, 1300)]).sum()
    # A few calls per distinct name (5,000 of them), never one per row (400,000): counted,
    # not timed.
    assert count.calls < 200_000, count.calls


def _text_column(texts, names):
    from kinetoscope.tui.widgets.table import Column

    return Column("name", lambda r: texts[names[r]], width=0, numeric=False)


def _number_column(values):
    from kinetoscope.tui.widgets.table import Column

    return Column("value", lambda r: str(values[r]), key=values)


def test_name_matcher():
    assert name_matcher("MM")("aten::mm")
    assert not name_matcher("re:^mm")("aten::mm")
    with pytest.raises(ValueError):
        name_matcher("re:(")


async def test_search_notifications_show_the_pattern_literally():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await press(pilot, "slash", until=SearchScreen)
        await type_text(pilot, "[bold]nothing")
        await press(pilot, "enter", until=TraceScreen)
        messages = [n.message for n in app._notifications]
        assert any("[bold]nothing" in m for m in messages), messages
        assert all(not n.markup for n in app._notifications if "[bold]" in n.message)
