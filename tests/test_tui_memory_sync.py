"""The memory view (p) and the sync view (b) driven like a user, on the hand-built traces whose
numbers test_memory_ops and test_sync know."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kinetoscope.analysis.memory_ops import HOW_TO_RECORD
from kinetoscope.analysis.units import fmt_bytes
from kinetoscope.parser import loads
from kinetoscope.tui.data.viewdata import SLOT_RUNTIME, SLOT_SYNC, build_view_data
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.memory_view import MemoryChart, MemoryScreen
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.trace.sync_view import SyncScreen
from kinetoscope.tui.widgets.timeline import Timeline
from pilot_helpers import settle
from test_memory_ops import known_trace as memory_trace
from test_memory_ops import mem, x
from test_sync import known_trace as sync_trace
from textual.widgets import DataTable, Static

SIZE = (120, 40)


def text_of(screen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def row_at(trace, name: str, start_us: int) -> int:
    return next(
        r
        for r in range(len(trace))
        if trace.name_of(r) == name and int(trace.start[r]) == start_us * 1000
    )


@pytest.fixture
def memory_path(write_trace):
    return str(write_trace(memory_trace(), name="memory.json"))


@pytest.fixture
def sync_path(write_trace):
    return str(write_trace(sync_trace(), name="sync.json"))


@pytest.mark.also_no_color
async def test_memory_view_opens_on_the_peak_and_names_its_owner(memory_path):
    app = KinetoscopeApp(memory_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        title = text_of(screen, "#memory-title")
        assert "CUDA 0" in title and fmt_bytes(2400) in title
        assert "aten::empty" in title and "ProfilerStep#2" in title
        chart = screen.query_one(MemoryChart)
        origin = screen.data.origin
        assert chart.cursor_time == 113_000 - origin
        status = text_of(screen, "#memory-status")
        assert f"allocated {fmt_bytes(2400)}" in status and "reserved 8.00 KiB" in status

        # Move away and come back with p; [ and ] walk memory events.
        await pilot.press("right_square_bracket")
        assert chart.cursor_time == 120_000 - origin
        assert f"allocated {fmt_bytes(2300)}" in text_of(screen, "#memory-status")
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert chart.cursor_time == 90_000 - origin
        await pilot.press("p")
        assert chart.cursor_time == 113_000 - origin

        # Enter: the timeline at the peak, the allocating operator selected.
        await pilot.press("enter")
        trace_screen = await settle(pilot, TraceScreen)
        timeline = trace_screen.query_one(Timeline)
        assert timeline.selected_row == row_at(screen.data.trace, "aten::empty", 112)
        assert timeline.cursor_time == 113_000 - origin
        assert timeline.ns_per_cell == pytest.approx(chart.ns_per_cell)


def staircase_trace() -> dict:
    """CUDA 0 allocating 256 B every 10 µs up to 8 KiB: a curve through every height."""
    memory = [mem(10 * (k + 1), 256, 256 * (k + 1), 0x1000 + k, reserved=None) for k in range(32)]
    return {"traceEvents": [x("ProfilerStep#1", 0, 400, cat="user_annotation"), *memory]}


def chart_picture(chart: MemoryChart) -> tuple[dict[int, str], list[str]]:
    """The chart's axis labels by curve row, and the curve rows' cells as drawn."""
    rows = chart.size.height - 1
    lines = [chart.render_line(y).text for y in range(1, rows + 1)]
    labels = {r: line[: chart.label_width].strip() for r, line in enumerate(lines)}
    return {r: t for r, t in labels.items() if t}, [line[chart.label_width + 1 :] for line in lines]


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (100, 31)])
async def test_memory_chart_axis_labels_are_the_bytes_at_their_height(write_trace, size):
    # The middle label was the middle of a row's bytes at (rows // 2) (rows - r - 0.5) / rows:
    # 0.44 of the top at 8 rows, 0.5 at 19, not what a full cell there reached; the bottom
    # one was a bare "0". Each label is now the bytes a full cell in its row reaches.
    app = KinetoscopeApp(str(write_trace(staircase_trace(), name="stairs.json")))
    async with app.run_test(size=size) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        chart = screen.query_one(MemoryChart)
        top = chart.scale_top()
        assert top == 8192
        labels, cells = chart_picture(chart)
        rows = len(cells)
        middle = rows // 2
        assert rows >= 5, size
        assert labels == {
            0: fmt_bytes(8192),
            middle: fmt_bytes(round(8192 * (rows - middle) / rows)),
            rows - 1: "0 B",
        }
        if rows % 2 == 0:
            assert labels[middle] == fmt_bytes(4096)
        # The picture agrees: a column at or above the middle label's bytes fills its row,
        # one at or below the next row's top edge leaves it empty; both kinds are on screen.
        allocated, _ = chart.column_values()
        full = empty = 0
        for col, value in enumerate(allocated.tolist()):
            if value < 0:
                continue
            if value * rows >= top * (rows - middle):
                assert cells[middle][col] == "█", (col, value)
                full += 1
            elif value * rows <= top * (rows - middle - 1):
                assert cells[middle][col] == " ", (col, value)
                empty += 1
        assert full and empty
        # The same labels at every zoom and after panning (the scale is the device's).
        for keys in (("w", "w"), ("d",), ("s", "s", "s"), ("0",)):
            await pilot.press(*keys)
            await pilot.pause()
            assert chart_picture(chart)[0] == labels, keys


OPERATOR_COLUMNS = [
    "operator",
    "allocs",
    "allocated",
    "freed own",
    "by others",
    "at once",
    "mostly freed by",
    "peak live",
    "not freed",
]


def table_columns(table: DataTable) -> list[str]:
    return [str(c.label) for c in table.columns.values()]


async def test_memory_table_fits_its_width_and_says_which_columns_are_hidden(memory_path):
    # At 80 columns the operators table showed 4 of its 9 columns, the rest past the edge
    # with no sign of them (and at 120 the last two). Now the columns that fit are shown, the
    # title names the others, and a wider terminal shows them again.
    app = KinetoscopeApp(memory_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        table = screen.query_one(DataTable)
        await pilot.pause()
        shown = table_columns(table)
        hidden = [c for c in OPERATOR_COLUMNS if c not in shown]
        assert shown[:1] == ["operator"] and "allocated" in shown and "peak live" in shown
        assert hidden and shown == [c for c in OPERATOR_COLUMNS if c not in hidden]
        assert table.virtual_size.width <= table.scrollable_content_region.width  # none off
        title = text_of(screen, "#memory-table-title")
        said = f"{len(hidden)} columns hidden at this width: {', '.join(hidden)}"
        assert said in title and "W: CSV" in title, title
        assert table_columns(table) and table.get_row_at(0)[0].plain == "ProfilerStep#1"

        # Never freed: its four columns fit, the owner's name narrowed (it was 60 cells).
        await pilot.press("v")
        await pilot.pause()
        assert table_columns(table) == ["bytes", "when", "owner", "live after"]
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert "hidden" not in text_of(screen, "#memory-table-title")

        # Wider: every column again, nothing said hidden, the cursor on its row.
        await pilot.press("v", "tab", "down")
        assert table.cursor_row == 1
        await pilot.resize_terminal(200, 40)
        await pilot.pause()
        await pilot.pause()
        assert table_columns(table) == OPERATOR_COLUMNS
        assert "hidden" not in text_of(screen, "#memory-table-title")
        assert table.cursor_row == 1
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        assert table_columns(table) == shown


async def test_memory_view_table_devices_and_never_freed(memory_path):
    app = KinetoscopeApp(memory_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        table = screen.query_one(DataTable)
        first = [str(c) for c in table.get_row_at(0)]
        assert first[0] == "ProfilerStep#1" and first[2] == fmt_bytes(2000)
        assert table.row_count == 6  # empty, mm, linear, relu and both steps

        await pilot.press("v")
        assert "never freed" in text_of(screen, "#memory-table-title")
        assert table.row_count == 1
        assert [str(c) for c in table.get_row_at(0)][:3] == [
            fmt_bytes(2000),
            "+90.000 µs",  # table durations: three decimals (analysis/units.fmt_table_time)
            "ProfilerStep#1",
        ]

        await pilot.press("c")
        assert "CPU" in text_of(screen, "#memory-title")
        await pilot.press("c")
        assert "CUDA 0" in text_of(screen, "#memory-title")

        # Enter on the table goes to the operator's instance.
        await pilot.press("v", "tab")
        assert table.has_focus
        await pilot.press("enter")
        trace_screen = await settle(pilot, TraceScreen)
        timeline = trace_screen.query_one(Timeline)
        assert timeline.selected_row == row_at(screen.data.trace, "ProfilerStep#1", 0)


async def test_trace_without_memory_events_says_how_to_record_them(sync_path):
    app = KinetoscopeApp(sync_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        assert "no [memory] events" in text_of(screen, "#memory-title")
        hint = text_of(screen, "#memory-table-title")
        assert "profile_memory=True" in hint and "--profile-memory" in hint
        assert HOW_TO_RECORD in hint
        await pilot.press("enter", "left", "p", "c", "v")  # nothing to show: nothing breaks
        await pilot.press("escape")
        await settle(pilot, TraceScreen)


@pytest.mark.also_no_color
async def test_sync_view_lists_worst_first_and_jumps(sync_path):
    app = KinetoscopeApp(sync_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("b")
        screen = await settle(pilot, SyncScreen)
        title = text_of(screen, "#sync-title")
        assert "6 blocking calls" in title and "407 µs blocked" in title
        steps = text_of(screen, "#sync-steps")
        assert "ProfilerStep#1 295 µs" in steps and "ProfilerStep#2 112 µs" in steps
        table = screen.query_one(DataTable)
        assert table.row_count == 6
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(6)]
        blocked = ["170.000 µs", "75.000 µs", "70.000 µs", "50.000 µs", "40.000 µs", "2.000 µs"]
        assert [r[2] for r in rows] == blocked
        # GPU idle the call caused: 5 µs while it ran, 322 µs after it returned.
        assert rows[0][5] == "aten::item" and rows[0][6] == "327.000 µs"
        assert rows[3][5] == "explicit" and rows[4][5] == "print(tensor)"
        assert "train.py(10): step" in rows[0][7]
        detail = text_of(screen, "#sync-detail")
        assert "Stream Sync" in detail and "GPU idle it caused 327 µs (5 µs while it ran" in detail

        await pilot.press("down")
        assert "aten::to" in text_of(screen, "#sync-detail")

        await pilot.press("v")
        assert table.row_count == 5
        assert [str(c) for c in table.get_row_at(0)][:4] == [
            "cudaStreamSynchronize",
            "aten::item",
            "2",
            "240.000 µs",
        ]
        await pilot.press("v", "enter")
        trace_screen = await settle(pilot, TraceScreen)
        timeline = trace_screen.query_one(Timeline)
        trace = trace_screen.data.trace
        assert timeline.selected_row == row_at(trace, "cudaStreamSynchronize", 20)
        origin = trace_screen.data.origin
        # The view holds the call and the GPU idle gap after it (to 512 µs).
        assert timeline.view_start <= 20_000 - origin
        assert timeline.view_end >= 512_000 - origin


async def test_help_lists_the_memory_and_sync_keys(sync_path):
    app = KinetoscopeApp(sync_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("question_mark")
        screen = await settle(pilot, HelpScreen)
        # The trace screen's own keys come first (other screens give `p` other meanings).
        rows = {}
        for key, text in screen.bindings:
            rows.setdefault(key, text)
        assert "Memory" in rows["p"] and "blocks" in rows["b"]


def test_blocking_calls_get_their_own_colour_on_the_timeline():
    trace = loads(json.dumps(sync_trace()).encode())
    data = build_view_data(trace)
    slot = {}
    for row in range(len(trace)):
        slot.setdefault(trace.name_of(row), set()).add(int(data.slot[row]))
    for name in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy"):
        assert slot[name] == {SLOT_SYNC}, name
    assert slot["cudaStreamWaitEvent"] == {SLOT_SYNC}
    assert slot["cudaMemcpyAsync"] == {SLOT_RUNTIME}
    assert slot["cudaLaunchKernel"] == {SLOT_RUNTIME}
    assert slot["Stream Sync"] == {SLOT_SYNC}  # the GPU-side record
    assert np.count_nonzero(data.slot == SLOT_SYNC) == 8


async def test_operator_table_gains_memory_columns(memory_path, sync_path):
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.widgets.table import DataView

    for path, expect in ((memory_path, True), (sync_path, False)):
        app = KinetoscopeApp(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, TraceScreen)
            await pilot.press("o")
            screen = await settle(pilot, OperatorsScreen)
            view = screen.query_one(DataView)
            titles = [c.title for c in view.model.columns]
            assert ("alloc'd" in titles and "peak mem" in titles) == expect
            if expect:
                rows = {r[0]: r for r in view.visible_texts()}
                alloc, peak = titles.index("alloc'd"), titles.index("peak mem")
                assert rows["aten::empty"][alloc] == fmt_bytes(1600)
                assert rows["aten::empty"][peak] == fmt_bytes(2400)
                assert rows["aten::mm"][alloc] == "" and rows["aten::mm"][peak] == fmt_bytes(1500)
