"""The viewer's keys and drawing details found by using it as a new user would (issue 13):
NO_COLOR, the ruler's cursor mark, the header's gap count, the details pane's height, hiding
Python frames, Home/End, panning at the trace's end, keys pressed while loading, stack order."""

from __future__ import annotations

import math
import threading

import pytest
from kinetoscope.tui import loader as loader_module
from kinetoscope.tui.app import KinetoscopeApp
from kinetoscope.tui.memory_view import MemoryChart, MemoryScreen
from kinetoscope.tui.render import CURSOR_COLOUR
from kinetoscope.tui.screens import GapListScreen, LoadingScreen, TraceScreen
from kinetoscope.tui.timefmt import fmt_tick, tick_step
from kinetoscope.tui.timeline import Timeline
from rich.color import Color
from test_memory_ops import known_trace as memory_trace
from test_tui_app import loaded, wait_for_screen
from test_tui_sample import sample_trace
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
            assert [s.style.bgcolor for s in at_cursor] == [Color.parse(CURSOR_COLOUR)]
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
        step = tick_step(chart.ns_per_cell)
        marks_on_labels = 0
        # Slide the view a cell at a time over one tick step: the peak's mark and the cursor
        # (kept on the peak's next cell) pass over every character of a label.
        for shift in range(int(step / chart.ns_per_cell) + 2):
            chart.view_start = peak - 20 * chart.ns_per_cell - shift * chart.ns_per_cell
            chart.cursor_time = peak + int(chart.ns_per_cell)
            ruler = chart.render_line(0).text[chart.label_width + 1 :]
            for label in ruler_labels(chart):
                assert label in ruler, (shift, label)
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
        for _ in range(3):
            await pilot.press("w")
        for _ in range(40):
            await pilot.press("d")
        assert timeline.view_end == pytest.approx(span)
        assert 0 <= timeline.cursor_time <= span
        for _ in range(40):
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
