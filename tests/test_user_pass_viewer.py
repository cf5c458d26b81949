"""Bugs found by using the single-trace viewer on real traces as a demanding user would (a user
pass of `kinetoscope TRACE`): each test here failed before its fix. Synthetic traces are used
where they show the bug as well as a corpus trace."""

from __future__ import annotations

import json

import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import loads
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.screens import GapListScreen, TraceScreen
from test_tui_app import loaded, wait_for_screen
from test_tui_sample import sample_trace

from kinetoscope.present.safe_text import fit_name

SIZE = (120, 40)


@pytest.fixture
def trace_path(write_trace):
    return str(write_trace(sample_trace(), name="sample.json"))


async def test_question_mark_in_the_idle_gap_list_shows_the_keys(trace_path):
    """`?` in the idle-gap list (`i`) did nothing, though the help says `?` works everywhere;
    the list's own keys (`Enter`, `e`, `W`) were in no section of the help."""
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("i")
        await wait_for_screen(pilot, GapListScreen)
        await pilot.press("question_mark")
        help_screen = await wait_for_screen(pilot, HelpScreen)
        rows = help_screen.bindings
        assert rows[0][0].startswith("── Idle gaps") and "this screen" in rows[0][0]
        keys = dict(rows[1 : next(i for i, r in enumerate(rows) if r[0] == "── Everywhere")])
        assert {"e", "W", "⏎"} <= set(keys), keys
        await pilot.press("escape")
        await wait_for_screen(pilot, GapListScreen)
        await pilot.press("escape")
        await wait_for_screen(pilot, TraceScreen)


async def test_help_on_the_timeline_lists_tab_for_the_details_pane(trace_path):
    """README and docs/tui.md: `Tab` / `shift+Tab` focus the details pane to scroll it and go
    back; `?` on the timeline did not list them (only `}`'s text hinted at Tab)."""
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        help_screen = await wait_for_screen(pilot, HelpScreen)
        rows = help_screen.bindings
        mine = dict(rows[1 : next(i for i, r in enumerate(rows) if r[0] == "── Everywhere")])
        assert "tab" in mine and "details" in mine["tab"].lower(), mine
        assert "shift+tab" in mine, mine


def test_a_process_named_with_its_pid_is_not_named_twice():
    """MTIA traces name the device's process `MTIA 9` (pid 9): its group row on the timeline
    read `MTIA 9 9` and its lanes `MTIA 9 9 / Stream 1 FW`. A name that already ends with the
    pid keeps it once; other names still get it (`python3 19392`)."""
    meta = [
        {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "MTIA 9"}},
        {"ph": "M", "name": "thread_name", "pid": 9, "tid": 1, "args": {"name": "Stream 1 FW"}},
        {"ph": "M", "name": "process_name", "pid": 19, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "worker 71"}},
    ]
    slices = [
        {"ph": "X", "cat": "mtia_ccp_events", "name": "k", "pid": p, "tid": 1, "ts": 1, "dur": 1}
        for p in (9, 19, 7)
    ]
    trace = loads(json.dumps({"traceEvents": meta + slices}).encode())
    labels = sorted(lane.label for lane in trace.lanes)
    assert labels == ["MTIA 9 / Stream 1 FW", "python3 19 / thread 1", "worker 71 7 / thread 1"]


def test_findings_count_thousands_with_separators():
    """The findings table (`t`) on the MTIA trace read `3551 CPU slices start inside another
    slice…` one row above `29,267 slices of categories…`: the trace-oddity counts had no
    thousands separator where every other count has one."""
    events = []
    for i in range(1200):  # each "late" starts inside "early" and ends after it
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "early",
                "pid": 1,
                "tid": 1,
                "ts": 100 * i,
                "dur": 10,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "late",
                "pid": 1,
                "tid": 1,
                "ts": 100 * i + 5,
                "dur": 10,
            }
        )
    trace = loads(json.dumps({"traceEvents": events}).encode())
    finding = next(f for f in TraceSession(trace).findings if f.rule == "slice_outlives_parent")
    assert finding.message.startswith("1,200 CPU slices"), finding.message


async def test_resizing_the_terminal_keeps_the_time_range_on_screen(trace_path):
    """Widening the terminal (tmux resize-window 80x24 -> 120x40) left the whole trace in
    the left two thirds of the timeline, an empty stretch past its end; narrowing it cut the
    trace's end off. The window shows the same time range at any width: the whole trace stays
    whole, a zoomed view keeps its range."""
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=(80, 24)) as pilot:
        timeline = await loaded(pilot)
        span = timeline.data.span
        assert timeline.view_start == 0 and timeline.view_end >= span
        narrow = timeline.ns_per_cell
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        await pilot.pause()
        assert timeline.ns_per_cell < narrow
        assert timeline.view_start == 0 and span <= timeline.view_end <= span + 2 * narrow
        await pilot.press("w", "w", "d")
        await pilot.pause()
        shown = (timeline.view_start, timeline.view_end)
        assert shown[1] < span
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        assert timeline.view_start == pytest.approx(shown[0])
        assert timeline.view_end == pytest.approx(shown[1], abs=timeline.ns_per_cell)


def test_a_numbered_name_keeps_its_number_in_a_narrow_column():
    """At 80x24 the overview's (`v`) step column is 8 cells: its rows read `Profile…`,
    `Profile…`, `Profile…` (ProfilerStep#4, #5, #6): a numbered name lost its number, the one
    part that tells the rows apart, as soon as fewer than six characters of its start were
    left (docs/tui-drilldown.md: numbered names keep their number)."""
    assert fit_name("ProfilerStep#4", 8) == "Profi…#4"
    assert fit_name("ProfilerStep#12", 8) == "Prof…#12"
    assert fit_name("ProfilerStep#1234", 8) == "Pr…#1234"
    assert len({fit_name(f"ProfilerStep#{n}", 7) for n in (4, 5, 6)}) == 3
    assert fit_name("ProfilerStep#1234", 6) == "Profi…"  # no room for a start and the number


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_idle_gap_list_fits_its_box(write_trace, size):
    """At 80x24 the idle-gap list's `next GPU event` column ran past the box's right edge, cut
    with no ellipsis (`Memcpy DtoD (Device`), the rest only by scrolling sideways; at 120x40
    it was cut at 40 cells with half the box empty. The names take the room the box has."""
    doc = sample_trace()
    for i, event in enumerate(doc["traceEvents"]):
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            event["name"] = f"a_plain_kernel_name_that_is_rather_long_number_{i:04d}"
    app = KinetoscopeApp(str(write_trace(doc, name="long.json")))
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        await pilot.press("i")
        screen = await wait_for_screen(pilot, GapListScreen)
        await pilot.pause()
        table = screen.query_one("#gap-table")
        assert table.virtual_size.width <= table.scrollable_content_region.width
        names = [str(table.get_row_at(i)[-1]) for i in range(table.row_count)]
        if size[0] >= 120:  # room for the whole 51-cell name
            assert all(n.startswith("a_plain_kernel_name_that_is_rather_long") for n in names)
            assert all(len(n) == 51 for n in names), names


async def test_W_on_the_timeline_says_where_it_works(trace_path):
    """README lists `W` among the viewer's keys (save a table as CSV); on the timeline, where
    there is no table, it did nothing and said nothing. It says which screens have tables."""
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("W")
        await pilot.pause()
        notes = [str(n.message) for n in app._notifications]
        assert any("W saves a table" in note and "o operators" in note for note in notes), notes
        assert isinstance(app.screen, TraceScreen)


async def test_right_arrow_inside_the_only_slice_of_a_row_selects_it(write_trace):
    """On a Python-stack trace the top row of the main thread is one slice covering the whole
    trace (`<string>(1): <module>`). After panning, `→` with nothing selected said "No more
    events on this lane" with that slice under the cursor, while the details pane says
    "←/→ walk events". It selects the slice under the cursor when none starts after it."""
    events = [
        {
            "ph": "X",
            "cat": "python_function",
            "name": "<module>",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
    ]
    app = KinetoscopeApp(str(write_trace({"traceEvents": events}, name="module.json")))
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        trace = timeline.data.trace
        module = next(r for r in range(len(trace)) if trace.name_of(r) == "<module>")
        row = next(i for i, r in enumerate(timeline.rows) if not r.is_header and r.level == 0)
        timeline.cursor_row = row
        timeline.cursor_time = 500_000  # ns: mid-slice, after every start on the row
        await pilot.press("right")
        await pilot.pause()
        assert timeline.selected_row == module
        notes = [str(n.message) for n in app._notifications]
        assert not any("No more events" in note for note in notes), notes


async def test_help_in_the_category_picker_lists_its_own_keys(trace_path):
    """`?` in the operators' category picker (`o`, `C`) listed `q Quit` under "Everywhere",
    where `q` closes the picker; the picker's keys were in no section."""
    from kinetoscope.tui.trace.operators import CategoryPicker, OperatorsScreen

    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("o")
        await wait_for_screen(pilot, OperatorsScreen)
        await app.workers.wait_for_complete()
        await pilot.press("C")
        await wait_for_screen(pilot, CategoryPicker)
        await pilot.press("question_mark")
        rows = (await wait_for_screen(pilot, HelpScreen)).bindings
        assert "this screen" in rows[0][0], rows[0]
        end = next(i for i, r in enumerate(rows) if r[0] == "── Everywhere")
        mine = dict(rows[1:end])
        assert "⏎" in mine and "esc q C" in mine, mine
        everywhere = rows[
            end + 1 : next(i for i, r in enumerate(rows) if i > end and r[0].startswith("──"))
        ]
        assert "q" not in dict(everywhere), everywhere


async def test_incomplete_shows_in_the_title_of_an_80_column_terminal(write_trace):
    """A trace cut off mid-write: the title ends with `INCOMPLETE: the file ends at byte …`,
    after the counts, so at 80 columns it was cut away (`… 28 GPU gaps ≥ 10 µs …`) and
    nothing on screen said the trace was incomplete. `INCOMPLETE` now comes right after the
    file name (as `Python frames hidden` does); where the file stops stays at the end."""
    text = json.dumps(sample_trace())
    cut = text[: text.index('"gemm_kernel"') + 40]
    app = KinetoscopeApp(str(write_trace(cut, name="a_rather_long_trace_file_name.json")))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await wait_for_screen(pilot, TraceScreen)
        title = screen.query_one("#title")
        line = str(title.render())
        shown = title.content_region.width
        assert 0 <= line.index("INCOMPLETE") <= shown - len("INCOMPLETE") - 1, line
        assert "the file ends" in line.split("INCOMPLETE", 1)[1], line


async def test_P_on_a_trace_without_python_frames_says_so(write_trace):
    """`P` on a trace recorded without `with_stack` (no python_function slice, e.g. the 2021
    Kineto traces) said "Python frames hidden (P shows them)" and the title kept "Python
    frames hidden (P)", though nothing was or could be hidden. It says there are none."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 9},
        {"ph": "X", "cat": "cpu_op", "name": "aten::t", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
    ]
    app = KinetoscopeApp(str(write_trace({"traceEvents": events}, name="nostack.json")))
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        await app.workers.wait_for_complete()
        await pilot.press("P")
        await pilot.pause()
        assert not timeline.data.hide_python
        assert "Python frames hidden" not in str(app.screen.query_one("#title").render())
        notes = [str(n.message) for n in app._notifications]
        assert notes and "no Python frames" in notes[-1], notes
