"""Viewer details (issue 13): the memory view's axis never runs before the trace, `?` describes
the keys of the screen it is pressed on (memory, sync), table durations use one format, and
counts agree with their nouns."""

from __future__ import annotations

import pytest
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.memory_view import MemoryChart, MemoryScreen
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.trace.sync_view import SyncScreen
from kinetoscope.tui.widgets.timeline import Timeline
from pilot_helpers import settle

SIZE = (100, 30)


def cpu_memory_trace(seconds: float = 3.0, n: int = 30) -> dict:
    """CPU operators and CPU-only [memory] events over a few seconds (no GPU at all)."""
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    step = int(seconds * 1e6 / n)
    for i in range(n):
        ts = i * step
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::empty",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": step // 2,
            }
        )
        events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": ts + 10,
                "args": {
                    "Device Type": 0,
                    "Device Id": -1,
                    "Addr": 1000 + i,
                    "Bytes": 4096 * (i + 1),
                    "Total Allocated": 4096 * (i + 1),
                    "Total Reserved": 0,
                },
            }
        )
    return {"traceEvents": events}


async def test_memory_axis_starts_at_the_trace_start_when_zoomed_out(write_trace):
    path = write_trace(cpu_memory_trace())
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        timeline = screen.query_one(Timeline)
        for _ in range(6):
            await pilot.press("s")  # zoomed out past the trace: the timeline centres it
        await pilot.pause()
        memory = None
        for key in ("p", "s", "s", "a", "a", "a", "0", "left", "d", "d", "d", "d"):
            if memory is None:
                await pilot.press(key)
                memory = await settle(pilot, MemoryScreen)
            else:
                await pilot.press(key)
                await pilot.pause()
            chart = memory.query_one(MemoryChart)
            ruler = chart.render_line(0).text.split("│", 1)[1]
            assert chart.view_start >= 0, (key, chart.view_start)
            assert "-" not in ruler, (key, ruler)
            assert chart.view_start < timeline.data.span, key


def first_section(rows: list[tuple[str, str]]) -> tuple[str, dict[str, str]]:
    """The heading and (keys -> text) of the first section of the help."""
    assert rows[0][0].startswith("── ")
    keys: dict[str, str] = {}
    for key, text in rows[1:]:
        if key.startswith("── "):
            break
        keys[key] = str(text)
    return rows[0][0], keys


@pytest.fixture
def sync_path(write_trace):
    from test_sync import known_trace

    return str(write_trace(known_trace(), name="sync.json"))


async def test_help_describes_the_memory_screen_keys_there(write_trace):
    app = KinetoscopeApp(str(write_trace(cpu_memory_trace())))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("question_mark")
        help_screen = await settle(pilot, HelpScreen)
        heading, keys = first_section(help_screen.bindings)
        assert heading == "── Timeline · this screen"
        assert "Follow flow" in keys["]"] and "Memory" in keys["p"]
        await pilot.press("escape")
        await pilot.press("p")
        await settle(pilot, MemoryScreen)
        await pilot.press("question_mark")
        help_screen = await settle(pilot, HelpScreen)
        heading, keys = first_section(help_screen.bindings)
        assert heading == "── Memory (p) · this screen"
        assert keys["["] == "Previous memory event" and keys["]"] == "Next memory event"
        assert "peak" in keys["p"] and "Device" in keys["c"] or "device" in keys["c"]
        assert "never-freed" in keys["v"] and "Zoom in" in keys["w +"]
        assert not any("flow" in text.lower() for text in keys.values())
        # The app's own keys come next; every other screen's after, under its heading.
        headings = [key for key, _ in help_screen.bindings if key.startswith("── ")]
        assert headings[1] == "── Everywhere" and "── Timeline" in headings
        assert "── Sync (b)" in headings


async def test_help_describes_the_sync_screen_keys_there(sync_path):
    app = KinetoscopeApp(sync_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("b")
        await settle(pilot, SyncScreen)
        await pilot.press("question_mark")
        help_screen = await settle(pilot, HelpScreen)
        heading, keys = first_section(help_screen.bindings)
        assert heading == "── Sync (b) · this screen"
        assert "call site" in keys["v"] and "Back" in keys["esc q"]
        assert "q" not in dict(help_screen.bindings[: len(keys) + 4])  # q is Back here, not Quit
        assert any("timeline" in text for text in keys.values())


def test_table_durations_have_fixed_decimals_and_aligned_units():
    from kinetoscope.analysis.units import fmt_table_time, plural

    cells = [fmt_table_time(v) for v in (3_393_000_000, 845_123_000, 3_391_350_000, 12_000, 7)]
    assert cells == ["3.393 s ", "845.123 ms", "3.391 s ", "12.000 µs", "7 ns"]
    # Right-aligned in a column, the units (and the decimal points of the same width) line up.
    assert {len(c) - c.index(" ") for c in cells[:4]} == {3}
    assert fmt_table_time(4_000_000_000_000) == "4,000.0 s "
    assert plural(1, "step") == "1 step" and plural(2, "step") == "2 steps"
    assert plural(1_000, "row") == "1,000 rows" and plural(0, "call") == "0 calls"


async def test_one_of_a_kind_is_singular(write_trace):
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.trace.overview import OverviewScreen

    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
    ]
    app = KinetoscopeApp(str(write_trace({"traceEvents": events})))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, TraceScreen)
        header = str(app.screen._title())
        assert "2 events" in header and "1 lane " in header
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        await pilot.press("slash")
        for key in "aten":
            await pilot.press(key)
        await pilot.press("down")  # back to the table (Enter would open the row)
        await pilot.pause()
        title = str(screen.query_one("#table-title").render())
        assert "1 of 2 rows" in title, title
        detail = str(screen.query_one("#table-detail").render())
        assert "1 call ·" in detail, detail
        await pilot.press("escape", "escape", "v")
        overview = await settle(pilot, OverviewScreen)
        title = str(overview.query_one("#table-title").render())
        assert "1 step" in title and "1 steps" not in title and "· 1 row" in title, title
