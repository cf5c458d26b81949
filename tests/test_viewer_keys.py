"""The viewer's keys and drawing details found by using it as a new user would (issue 13):
NO_COLOR, the ruler's cursor mark, the header's gap count, the details pane's height, hiding
Python frames, Home/End, panning at the trace's end, keys pressed while loading, stack order."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from kinetoscope.analysis.units import fmt_tick, tick_step
from kinetoscope.tui.data import loader as loader_module
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.details import MAX_LIST, DetailsPane, cpu_stack_for_gap
from kinetoscope.tui.trace.memory_view import MemoryChart, MemoryScreen
from kinetoscope.tui.trace.operators import OperatorsScreen
from kinetoscope.tui.trace.screens import GapListScreen, LoadingScreen, TraceScreen
from kinetoscope.tui.trace.sync_view import SyncScreen
from kinetoscope.tui.widgets.theme import palette_of
from kinetoscope.tui.widgets.timeline import Timeline
from rich.color import Color
from test_memory_ops import known_trace as memory_trace
from test_sync import known_trace as sync_trace
from test_tui_app import loaded, row_named, wait_for_screen
from test_tui_sample import _x, sample_trace
from textual.filter import Monochrome

SIZE = (120, 40)


@pytest.fixture
def trace_path(write_trace):
    return str(write_trace(sample_trace(), name="sample.json"))


def all_lines(timeline: Timeline) -> list:
    return [timeline.render_line(y) for y in range(timeline.size.height)]


@pytest.mark.also_no_color
async def test_every_segment_of_the_timeline_has_a_style(no_color, trace_path):
    """Textual's NO_COLOR filter reads every segment's style: None crashed the first frame."""
    app = KinetoscopeApp(trace_path)
    assert app.no_color is no_color
    monochrome = any(isinstance(f, Monochrome) for f in app.get_line_filters())
    assert monochrome is no_color
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        timeline.scroll_to(y=len(timeline.rows), animate=False, immediate=True)
        await pilot.pause()
        for strip in all_lines(timeline):  # the ruler, lanes and the blank lines below them
            assert all(segment.style is not None for segment in strip)
        assert str(app.screen.query_one("#status").render())


async def test_the_cursor_mark_on_the_ruler_never_hides_a_tick_label(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        step = tick_step(timeline.ns_per_cell)
        tick = math.ceil(timeline.view_start / step) * step + step
        column = timeline.column_of(tick)
        label = "╵" + fmt_tick(tick, step)
        for offset in range(len(label)):  # on the tick mark, then on each character after it
            timeline.cursor_time = timeline.time_at_column(column + offset)
            ruler = timeline.render_line(0)
            assert label in ruler.text, offset
            assert "▼" not in ruler.text
            at_cursor = ruler.crop(
                timeline.label_width + 1 + column + offset,
                timeline.label_width + 2 + column + offset,
            )
            cursor = palette_of(app)["cursor"]
            assert [s.style.bgcolor for s in at_cursor] == [Color.parse(cursor)]
        timeline.cursor_time = timeline.time_at_column(column + len(label) + 1)  # a blank cell
        assert "▼" in timeline.render_line(0).text


def ruler_labels(widget) -> list[str]:
    """The tick labels a ruler should show in full (those that fit before its right edge)."""
    step = tick_step(widget.ns_per_cell)
    when = math.ceil(widget.view_start / step) * step
    labels = []
    while when < widget.view_end:
        text = "╵" + fmt_tick(int(when), step)
        if widget.column_of(when) + len(text) <= widget.cells_width:
            labels.append(text)
        when += step
    return labels


async def test_cursor_and_peak_marks_on_the_memory_ruler_never_hide_a_tick_label(write_trace):
    app = KinetoscopeApp(str(write_trace(memory_trace(), name="memory.json")))
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("p")
        screen = await wait_for_screen(pilot, MemoryScreen)
        chart = screen.query_one(MemoryChart)
        peak = int(chart.device.ts[chart.device.peak]) - chart.data.origin
        widest = chart.data.span / chart.cells_width
        marks_on_labels = 0
        # Zoom by small steps: the peak's mark and the cursor (kept on the peak's next cell)
        # fall on every character of a label at one scale or another.
        for per_cell in np.linspace(widest / 8, widest, 200):
            chart.ns_per_cell = float(per_cell)
            chart.view_start = peak - 40 * chart.ns_per_cell
            chart.cursor_time = peak + int(chart.ns_per_cell)
            if not chart.view_start <= peak < chart.view_end:
                continue
            ruler = chart.render_line(0).text[chart.label_width + 1 :]
            for label in ruler_labels(chart):
                assert label in ruler, (per_cell, label)
            column = chart.column_of(peak)
            marks_on_labels += "◆" not in ruler[column : column + 1]
        assert marks_on_labels  # the peak did fall on a label


async def test_the_header_counts_the_gaps_g_and_i_visit(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        title = app.screen.query_one("#title")
        # Four gaps, one of them 5 ns long: under the 10 µs threshold that g and i use.
        assert len(timeline.data.gaps) == 4
        assert "3 GPU gaps ≥ 10 µs" in str(title.render())
        await pilot.press("i")
        gap_list = await wait_for_screen(pilot, GapListScreen)
        assert len(gap_list.order) == 3
        await pilot.press("escape")
        await wait_for_screen(pilot, TraceScreen)
        for _ in range(4):
            await pilot.press("less_than_sign")
        await pilot.pause()
        assert timeline.gap_threshold == 0
        assert str(title.render()).endswith("· 4 GPU gaps")
        for _ in range(6):
            await pilot.press("greater_than_sign")
        await pilot.pause()
        assert timeline.gap_threshold == 500_000
        assert "1 GPU gap ≥ 500 µs" in str(title.render())
        await pilot.press("i")
        gap_list = await wait_for_screen(pilot, GapListScreen)
        assert len(gap_list.order) == 1


async def test_the_header_follows_a_threshold_given_on_the_command_line(trace_path):
    app = KinetoscopeApp(trace_path, gap_threshold_ns=50_000)
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        await pilot.pause()
        assert timeline.gap_threshold == 50_000
        assert "1 GPU gap ≥ 50 µs" in str(app.screen.query_one("#title").render())


async def test_home_and_end_go_to_the_trace_start_and_end(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        span = timeline.data.span
        for _ in range(4):
            await pilot.press("w")
        per_cell = timeline.ns_per_cell
        await pilot.press("end")
        assert timeline.ns_per_cell == per_cell  # the zoom stays
        assert timeline.view_end == pytest.approx(span, abs=per_cell)
        assert timeline.column_of(timeline.cursor_time) == timeline.cells_width - 1
        assert timeline.cursor_time == span - 1
        await pilot.press("home")
        assert timeline.view_start == 0 and timeline.cursor_time == 0
        assert timeline.ns_per_cell == per_cell


async def test_panning_stops_at_the_trace_start_and_end(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        span = timeline.data.span
        await pilot.press("w")  # half the trace on screen: 4 pans reach its end
        for _ in range(8):
            await pilot.press("d")
        assert timeline.view_end == pytest.approx(span)
        assert 0 <= timeline.cursor_time <= span
        for _ in range(8):
            await pilot.press("a")
        assert timeline.view_start == 0
        # Zoomed out past the whole trace, it stays entirely on screen.
        await pilot.press("0", "s")
        for key in ("d", "d", "a", "a", "a"):
            await pilot.press(key)
            assert timeline.view_start <= 0 and timeline.view_end >= span, key


async def test_keys_pressed_while_loading_are_answered(trace_path, monkeypatch):
    started, release = threading.Event(), threading.Event()
    real_load = loader_module.load

    def slow_load(path, progress=None, **options):
        started.set()
        release.wait(10)
        return real_load(path, progress=progress, **options)

    monkeypatch.setattr(loader_module, "load", slow_load)
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_screen(pilot, LoadingScreen)
        started.wait(5)
        await pilot.press("g", "w")
        messages = [n.message for n in app._notifications]
        assert len(messages) == 1 and "Still loading" in messages[0]
        release.set()
        await loaded(pilot)


PYTHON_DEPTH = 20


def deep_python_trace() -> dict:
    """A step, 20 nested python_function frames, then aten::linear > aten::addmm > a launch of
    one kernel; a second thread waits in one long Python frame (it tops self time)."""
    cpu = [_x("ProfilerStep#1", "user_annotation", 0, 1000)]
    cpu += [
        _x(f"model.py({i}): frame{i}", "python_function", 10 + i, 900 - 2 * i)
        for i in range(PYTHON_DEPTH)
    ]
    cpu += [
        _x("aten::linear", "cpu_op", 100, 300),
        _x("aten::addmm", "cpu_op", 110, 200),
        _x("cudaLaunchKernel", "cuda_runtime", 120, 10, correlation=1),
        _x("aten::relu", "cpu_op", 400, 160),  # holds the midpoint of the gap [250, 600)
        _x("cudaLaunchKernel", "cuda_runtime", 540, 10, correlation=2),
        _x("threading.py(359): wait", "python_function", 0, 1000, tid=101),
    ]
    gpu = [
        _x("gemm_kernel", "kernel", 150, 100, pid=0, tid=7, device=0, stream=7, correlation=1),
        _x("relu_kernel", "kernel", 600, 20, pid=0, tid=7, device=0, stream=7, correlation=2),
    ]
    return {"schemaVersion": 1, "traceEvents": cpu + gpu}


async def selected_details(pilot, timeline: Timeline, row: int) -> str:
    timeline.select(row)
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    return str(pilot.app.screen.query_one(DetailsPane).body.render())


async def test_stacks_in_the_viewer_read_outermost_first_innermost_last(write_trace):
    app = KinetoscopeApp(str(write_trace(deep_python_trace(), name="deep.json")))
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        # The Python stack of an operator: the last twelve frames, innermost last.
        text = await selected_details(pilot, timeline, row_named(timeline, "aten::addmm"))
        assert "python stack (innermost last):" in text
        hidden = PYTHON_DEPTH - MAX_LIST
        lines = text.split("python stack (innermost last):\n")[1].splitlines()
        assert lines[0].strip() == f"… {hidden} outer frames"
        frames = [line.strip() for line in lines[1 : MAX_LIST + 1]]
        assert frames == [f"model.py({i}): frame{i}" for i in range(hidden, PYTHON_DEPTH)]
        # The CPU stack at a gap's midpoint: the launching thread, innermost last.
        await pilot.press("home", "g")
        gap = timeline.current_gap
        assert gap >= 0
        stack = cpu_stack_for_gap(timeline.data, gap)
        assert stack[0] == "ProfilerStep#1" and stack[-1] == "aten::relu"
        text = str(app.screen.query_one(DetailsPane).body.render())
        lines = text.split("CPU at the gap's midpoint (innermost last):\n")[1].splitlines()
        assert lines[0].strip() == f"… {len(stack) - MAX_LIST} outer frames"
        assert [line.strip() for line in lines[1 : MAX_LIST + 1]] == stack[-MAX_LIST:]
        # The status line: the innermost frames, cut at the front to fit, innermost last.
        for size in (SIZE, (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            timeline.post_message(Timeline.Changed())
            await pilot.pause()
            status = app.screen.query_one("#status")
            line = str(status.render())
            cpu = line.split(" · CPU: ")[1].removesuffix(" · ? keys")
            assert cpu.endswith("aten::relu"), size  # the innermost frame, whole, last
            assert cpu == "aten::relu" or cpu.startswith("… > "), size
            assert len(line) <= status.content_region.width


async def test_the_sync_view_writes_the_stack_innermost_last(write_trace):
    app = KinetoscopeApp(str(write_trace(sync_trace(), name="sync.json")))
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("b")
        screen = await wait_for_screen(pilot, SyncScreen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        detail = str(screen.query_one("#sync-detail").render())
        stack = detail.split("stack (innermost last): ")[1].split(" > ")
        data = screen.data
        row = int(screen.calls.rows[screen.table_calls[0]])
        names = [data.trace.name_of(r) for r in data.ancestors(row)]  # innermost first
        assert len(names) >= 2 and stack == names[::-1]


def pane_heights(app) -> tuple[int, int]:
    screen = app.screen
    return screen.query_one(Timeline).size.height, screen.query_one(DetailsPane).outer_size.height


async def test_the_details_pane_grows_into_the_rows_the_timeline_does_not_use(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        await pilot.pause()
        rows = len(timeline.rows)
        height, details = pane_heights(app)
        assert height == rows + 1  # the ruler and every row, no empty row below them
        assert height + details == SIZE[1] - 3  # title, status line, footer
        # Expanding a lane takes rows back from the details pane...
        await pilot.press("enter")
        await pilot.pause()
        assert len(timeline.rows) > rows
        assert pane_heights(app) == (len(timeline.rows) + 1, SIZE[1] - 3 - len(timeline.rows) - 1)
        # ...but the pane keeps its usual height when the timeline has more rows than room.
        await pilot.resize_terminal(80, 14)
        await pilot.pause()
        assert pane_heights(app)[1] == 5


async def test_braces_move_the_split_between_timeline_and_details(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.pause()
        _, details = pane_heights(app)
        await pilot.press("left_curly_bracket")
        await pilot.pause()
        assert pane_heights(app)[1] == details - 3
        await pilot.press("right_curly_bracket")
        await pilot.pause()
        assert pane_heights(app)[1] == details
        for _ in range(20):
            await pilot.press("right_curly_bracket")
        await pilot.pause()
        timeline, details = pane_heights(app)
        assert timeline == 5 and details == SIZE[1] - 3 - 5  # the timeline keeps 5 rows
        for _ in range(20):
            await pilot.press("left_curly_bracket")
        await pilot.pause()
        assert pane_heights(app)[1] == 3  # the pane keeps its border and two lines


async def test_tab_moves_the_focus_to_the_details_pane_to_scroll_it(write_trace):
    app = KinetoscopeApp(str(write_trace(deep_python_trace(), name="deep.json")))
    async with app.run_test(size=(80, 24)) as pilot:
        timeline = await loaded(pilot)
        await selected_details(pilot, timeline, row_named(timeline, "aten::addmm"))
        pane = app.screen.query_one(DetailsPane)
        assert pane.max_scroll_y > 0
        await pilot.press("tab")
        assert app.focused is pane
        await pilot.press("down", "down")
        assert pane.scroll_y == 2
        await pilot.press("end")
        assert pane.scroll_y == pane.max_scroll_y
        await pilot.press("shift+tab")
        assert app.focused is timeline


def level_names(timeline: Timeline, lane: int) -> list[list[str]]:
    data = timeline.data
    return [[data.trace.name_of(int(r)) for r in level.rows] for level in data.lanes[lane].levels]


async def test_P_hides_the_python_frames_on_the_timeline_and_shows_them_again(write_trace):
    app = KinetoscopeApp(str(write_trace(deep_python_trace(), name="deep.json")))
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        data = timeline.data
        main = data.row_lane[row_named(timeline, "ProfilerStep#1")]
        waiting = data.row_lane[row_named(timeline, "threading.py(359): wait")]
        shown = level_names(timeline, main)
        assert len(shown) == 1 + PYTHON_DEPTH + 3  # step, the frames, linear/relu, addmm, launch
        addmm = row_named(timeline, "aten::addmm")
        timeline.select(addmm)
        await pilot.pause()
        rows_before = len(timeline.rows)
        await pilot.press("P")
        await pilot.pause()
        assert level_names(timeline, main) == [
            ["ProfilerStep#1"],
            ["aten::linear", "aten::relu"],
            ["aten::addmm", "cudaLaunchKernel"],
            ["cudaLaunchKernel"],
        ]
        assert level_names(timeline, waiting) == [[]]  # only a Python frame there
        assert not data.lanes[waiting].expandable
        # The selection stays, on its new level; the lane shows four rows, not 24.
        assert timeline.selected_row == addmm
        assert timeline.rows[timeline.cursor_row].level == 2
        assert len(timeline.rows) == rows_before - PYTHON_DEPTH
        assert "Python frames hidden" in str(app.screen.query_one("#title").render())
        assert "Python frames hidden" in [n.message for n in app._notifications][-1]
        lines = "\n".join(strip.text for strip in all_lines(timeline))
        assert "model.py" not in lines and "threading.py" not in lines
        # The Python stack is still in the details.
        text = await selected_details(pilot, timeline, addmm)
        assert f"model.py({PYTHON_DEPTH - 1}): frame{PYTHON_DEPTH - 1}" in text
        # Shown again: every level back, the selection on its own level again.
        await pilot.press("P")
        await pilot.pause()
        assert level_names(timeline, main) == shown
        assert timeline.rows[timeline.cursor_row].level == PYTHON_DEPTH + 2
        assert "Python frames hidden" not in str(app.screen.query_one("#title").render())


async def test_hiding_python_drops_a_selected_python_frame(write_trace):
    app = KinetoscopeApp(str(write_trace(deep_python_trace(), name="deep.json")))
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        timeline.select(row_named(timeline, "model.py(5): frame5"))
        await pilot.pause()
        await pilot.press("P")
        await pilot.pause()
        assert timeline.selected_row == -1
        row = timeline.rows[timeline.cursor_row]
        assert not row.is_header and row.level < len(timeline.data.lanes[row.lane].levels)
        for key in ("right", "down", "enter", "u", "g", "end", "home"):
            await pilot.press(key)  # every key still works on the smaller lanes
        await pilot.press("P")


async def test_P_hides_the_python_frames_in_the_operators_table(write_trace):
    app = KinetoscopeApp(str(write_trace(deep_python_trace(), name="deep.json")))
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        await pilot.press("o")
        screen = await wait_for_screen(pilot, OperatorsScreen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        names = [row[0] for row in screen.table.visible_texts()]
        assert names[0] == "threading.py(359): wait"  # the longest self time
        assert len(names) == PYTHON_DEPTH + 6
        await pilot.press("P")
        await pilot.pause()
        names = [row[0] for row in screen.table.visible_texts()]
        assert names[:2] == ["aten::addmm", "aten::relu"]
        assert sorted(names) == sorted(
            ["ProfilerStep#1", "aten::addmm", "aten::relu", "aten::linear", "cudaLaunchKernel"]
        )
        assert "Python frames hidden" in str(screen.query_one("#table-title").render())
        assert timeline.data.hide_python  # the timeline hides them too
        # Back on the timeline, P shows them again, here too.
        await pilot.press("escape")
        await wait_for_screen(pilot, TraceScreen)
        await pilot.press("P", "o")
        screen = await wait_for_screen(pilot, OperatorsScreen)
        await pilot.pause()
        assert len(screen.table.visible_texts()) == PYTHON_DEPTH + 6


async def test_help_lists_the_new_keys(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        screen = await wait_for_screen(pilot, HelpScreen)
        keys = {key: text for key, text in screen.bindings}
        for key in ("home", "end", "P", "{", "}"):
            assert key in keys, key
        assert "python" in keys["P"].lower()


@pytest.mark.deferred_levels
async def test_P_waits_for_the_nesting_then_hides_the_python_frames(write_trace, monkeypatch):
    release = threading.Event()
    original = ViewData.complete_levels

    def held(self):
        if threading.current_thread() is not threading.main_thread():
            release.wait(20)
        original(self)

    monkeypatch.setattr(ViewData, "complete_levels", held)
    app = KinetoscopeApp(str(write_trace(deep_python_trace(), name="deep.json")), staged=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_screen(pilot, TraceScreen)
        timeline = app.screen.query_one(Timeline)
        data = timeline.data
        assert not data.complete
        await pilot.press("P")
        assert not data.hide_python
        assert "Still nesting" in [n.message for n in app._notifications][-1]
        release.set()
        for _ in range(500):
            if data.complete:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        await pilot.press("P")
        assert data.hide_python
