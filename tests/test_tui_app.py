"""The app driven like a user: every binding pressed, and what it changed asserted."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kinetoscope.tui.data import loader as loader_module
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.screens import (
    ErrorScreen,
    GapListScreen,
    LoadingScreen,
    TraceScreen,
)
from kinetoscope.tui.widgets.timeline import Timeline
from test_tui_sample import sample_trace

from kinetoscope.commands.view import run_view

SIZE = (120, 40)


@pytest.fixture
def trace_path(write_trace):
    return str(write_trace(sample_trace(), name="sample.json"))


async def wait_for_screen(pilot, kind, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.02)
        if isinstance(pilot.app.screen, kind):
            await pilot.pause()
            return pilot.app.screen
    raise AssertionError(f"screen {kind.__name__} never came; at {pilot.app.screen!r}")


async def loaded(pilot) -> Timeline:
    screen = await wait_for_screen(pilot, TraceScreen)
    timeline = screen.query_one(Timeline)
    # Let the initial "fit all" run.
    await pilot.pause()
    return timeline


def row_named(timeline: Timeline, name: str) -> int:
    trace = timeline.data.trace
    return next(r for r in range(len(trace)) if trace.name_of(r) == name)


def column(timeline: Timeline, when: float) -> float:
    return (when - timeline.view_start) / timeline.ns_per_cell


async def test_opens_on_whole_trace_and_zoom_keys_keep_cursor_column(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        assert tl.view_start == 0
        assert tl.view_end >= tl.data.span
        tl.cursor_time = 400_000
        await pilot.pause()
        col = column(tl, tl.cursor_time)
        for key, factor in (("w", 0.5), ("plus", 0.5), ("s", 2.0), ("minus", 2.0)):
            before = tl.ns_per_cell
            await pilot.press(key)
            assert tl.ns_per_cell == pytest.approx(before * factor), key
            assert column(tl, tl.cursor_time) == pytest.approx(col), key


async def test_pan_keys_move_view_and_cursor_by_a_quarter(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        await pilot.press("w", "w", "w")
        quarter = tl.cells_width * tl.ns_per_cell / 4
        for key, sign in (("d", 1), ("l", 1), ("a", -1), ("h", -1)):
            view, cursor = tl.view_start, tl.cursor_time
            await pilot.press(key)
            assert tl.view_start == pytest.approx(view + sign * quarter), key
            assert tl.cursor_time == pytest.approx(cursor + sign * quarter, abs=1), key


async def test_arrows_walk_events_and_lanes(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        name = tl.data.trace.name_of
        assert not tl.rows[tl.cursor_row].is_header
        await pilot.press("right")
        assert name(tl.selected_row) == "ProfilerStep#1"
        await pilot.press("down")  # loader thread, under the cursor at t=0: nothing
        assert tl.data.lanes[tl.rows[tl.cursor_row].lane].label.endswith("(loader)")
        await pilot.press("right")
        assert "EVIL" in name(tl.selected_row)
        await pilot.press("right")
        assert "not markup" in name(tl.selected_row)
        await pilot.press("left")
        assert "EVIL" in name(tl.selected_row)
        await pilot.press("down")  # skips the GPU header, lands on stream 7
        lane = tl.data.lanes[tl.rows[tl.cursor_row].lane]
        assert lane.label == "GPU 0 / stream 7"
        await pilot.press("up")
        assert tl.data.lanes[tl.rows[tl.cursor_row].lane].label.endswith("(loader)")


@pytest.mark.also_no_color
async def test_enter_expands_and_collapses_lane(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        rows = len(tl.rows)
        await pilot.press("enter")
        assert len(tl.rows) == rows + 4  # five nesting levels instead of one
        await pilot.press("enter")
        assert len(tl.rows) == rows


async def test_flow_keys_and_parent_walk_launch_kernel_and_stack(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        name = tl.data.trace.name_of
        tl.select(row_named(tl, "aten::mm"))
        await pilot.pause()
        await pilot.press("right_square_bracket")  # operator -> the kernel it launched
        assert name(tl.selected_row) == "gemm_kernel"
        assert tl.data.lanes[tl.rows[tl.cursor_row].lane].label == "GPU 0 / stream 7"
        await pilot.press("left_square_bracket")  # kernel -> launch
        assert name(tl.selected_row) == "cudaLaunchKernel"
        assert tl.data.trace.corr[tl.selected_row] == 1
        await pilot.press("right_square_bracket")  # launch -> kernel
        assert name(tl.selected_row) == "gemm_kernel"
        chain = []
        for _ in range(6):
            await pilot.press("u")
            chain.append(name(tl.selected_row))
        assert chain == [
            "cudaLaunchKernel",
            "aten::mm",
            "aten::linear",
            "nn.Module: Linear",
            "ProfilerStep#1",
            "ProfilerStep#1",  # already at the top: stays
        ]
        # Selecting a deep event expanded its lane.
        assert tl.rows[tl.cursor_row].level == 0


async def test_fit_selection_and_fit_all(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        row = row_named(tl, "gemm_kernel")
        tl.select(row)
        await pilot.press("f")
        start, end = tl.data.rel_start(row), tl.data.rel_end(row)
        assert tl.view_start <= start and end <= tl.view_end
        assert (end - start) >= 0.7 * (tl.view_end - tl.view_start)
        await pilot.press("0")
        assert tl.view_start == 0 and tl.view_end >= tl.data.span


@pytest.mark.also_no_color
async def test_g_and_G_reach_the_analysis_next_and_previous_gap(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        gaps, origin = tl.data.gaps, tl.data.origin
        assert tl.gap_threshold == 10_000
        reached = []
        for _ in range(3):
            expected = gaps.next_gap(tl.cursor_time + origin, min_len=tl.gap_threshold)
            await pilot.press("g")
            assert tl.current_gap == expected
            assert tl.cursor_time + origin == gaps.start[expected]
            reached.append(int(gaps.end[expected] - gaps.start[expected]))
            # The gap and the GPU work on both sides are on screen.
            assert tl.view_start <= gaps.start[expected] - origin
            assert gaps.end[expected] - origin <= tl.view_end
            assert tl.selected_row == gaps.next_row[expected]
        assert reached == [500_000, 40_000, 19_995]  # the 5 ns gap is under the threshold
        status = str(app.screen.query_one("#status").render())
        assert "GAP 19.995 µs kernel_wait" in status
        await pilot.press("g")  # no more: nothing changes
        assert tl.current_gap == 3
        expected = gaps.prev_gap(tl.cursor_time + origin, min_len=tl.gap_threshold)
        await pilot.press("G")
        assert tl.current_gap == expected == 1
        # host_wait gap: the status line shows the CPU stack at its midpoint.
        await pilot.press("G")
        assert tl.current_gap == 0
        status = str(app.screen.query_one("#status").render())
        assert "GAP 500 µs host_wait" in status
        assert "ProfilerStep#1" in status


async def test_threshold_keys_change_which_gaps_g_visits(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        for _ in range(4):
            await pilot.press("less_than_sign")
        assert tl.gap_threshold == 0
        for _ in range(3):
            await pilot.press("g")
        assert tl.current_gap == 2  # the 5 ns gap now counts
        for _ in range(5):
            await pilot.press("greater_than_sign")
        assert tl.gap_threshold == 100_000
        await pilot.press("0", "G")  # from the end of the trace backwards: only the 500 µs gap
        tl.cursor_time = tl.data.span
        await pilot.press("G")
        assert tl.current_gap == 0


@pytest.mark.also_no_color
async def test_gap_list_is_longest_first_and_enter_jumps(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        await pilot.press("i")
        screen = await wait_for_screen(pilot, GapListScreen)
        gaps = tl.data.gaps
        lengths = [int(gaps.end[g] - gaps.start[g]) for g in screen.order.tolist()]
        assert lengths == [500_000, 40_000, 19_995]
        await pilot.press("down", "enter")
        await wait_for_screen(pilot, TraceScreen)
        assert tl.current_gap == 1
        await pilot.press("i")
        await wait_for_screen(pilot, GapListScreen)
        await pilot.press("escape")
        await wait_for_screen(pilot, TraceScreen)
        assert tl.current_gap == 1


@pytest.mark.also_no_color
async def test_details_show_launch_kernels_stack_and_args(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        details = app.screen.query_one("#details")
        tl.select(row_named(tl, "gemm_kernel"))
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = str(details.body.render())
        assert "launched by: cudaLaunchKernel" in text
        assert "operator: aten::mm" in text
        assert "nn.Module: Linear" in text  # python stack from python_function ancestors
        assert "correlation: 1" in text  # args read back from the file
        tl.select(row_named(tl, "aten::linear"))
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = str(details.body.render())
        assert "Input Dims: [[4,8]]" in text
        assert "self time: 180 µs" in text  # 290 - 100 (aten::mm) - 10 (a launch)


@pytest.mark.also_no_color
async def test_help_lists_every_key_and_closes(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        screen = await wait_for_screen(pilot, HelpScreen)
        keys = " ".join(key for key, _ in screen.bindings)
        for key in ("w", "s", "a", "d", "h", "l", "←", "→", "↑", "↓", "f", "0", "g", "G", "i"):
            assert key in keys.split(), key
        assert "]" in keys and "[" in keys and "u" in keys and "q" in keys
        await pilot.press("escape")
        await wait_for_screen(pilot, TraceScreen)


async def test_q_quits(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("q")
    assert app.return_code == 0


async def test_mouse_click_selects_event_under_it(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        # Row 2 of the widget is the first lane (ruler, header, lane). Click mid-trace.
        x = tl.label_width + 1 + tl.cells_width // 2
        await pilot.click(Timeline, offset=(x, 2))
        assert tl.data.trace.name_of(tl.selected_row) == "ProfilerStep#1"
        assert abs(tl.cursor_time - tl.time_at_column(tl.cells_width // 2)) <= tl.ns_per_cell


async def test_names_with_escapes_and_markup_are_drawn_literally(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        lines = "\n".join(tl.render_line(y).text for y in range(tl.size.height))
        assert "\x1b" not in lines
        assert "␛[31mEVIL" in lines
        assert "[bold]not markup" in lines


async def test_bad_file_shows_error_and_exits_1(write_trace):
    path = str(write_trace(b"this is not json", name="broken.json"))
    app = KinetoscopeApp(path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_for_screen(pilot, ErrorScreen)
        assert "broken.json" in screen.message
        await pilot.press("q")
    assert app.return_code == 1
    assert app.exit_message == screen.message


async def test_incomplete_trace_says_so_in_header(write_trace):
    text = json.dumps(sample_trace())
    cut = text[: text.index('"gemm_kernel"') + 40]
    path = str(write_trace(cut, name="cut.json"))
    app = KinetoscopeApp(path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_for_screen(pilot, TraceScreen)
        assert "INCOMPLETE" in str(screen.query_one("#title").render())


async def test_escape_cancels_loading(trace_path, monkeypatch):
    started = threading.Event()

    def slow_load(path, progress=None, **options):
        for step in range(1000):
            started.set()
            progress(step, 1000, step * 10)
            time.sleep(0.01)
        raise AssertionError("the load was not cancelled")

    monkeypatch.setattr(loader_module, "load", slow_load)
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_screen(pilot, LoadingScreen)
        started.wait(5)
        await pilot.pause(0.2)
        stats = str(app.screen.query_one("#loading-stats").render())
        assert "events" in stats and "MB/s" in stats
        await pilot.press("escape")
        for _ in range(100):
            await pilot.pause(0.02)
            if app._exit:
                break
    assert app.return_code == 1
    assert app.exit_message == "loading cancelled"


def test_run_view_missing_file(capsys, tmp_path):
    assert run_view(str(tmp_path / "nope.json")) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"kinetoscope: {tmp_path / 'nope.json'}: no such file"  # as summary says


async def test_selecting_a_deep_slice_of_a_collapsed_lane_scrolls_it_into_view(write_trace):
    # A 30-deep stack on one thread, and a terminal only a few timeline rows high: selecting
    # the innermost slice expands the lane and must scroll to its row (it once stayed below).
    depth = 30
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"level{i}",
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1000 - 2 * i,
        }
        for i in range(depth)
    ]
    app = KinetoscopeApp(str(write_trace({"traceEvents": events}, name="deep.json")))
    async with app.run_test(size=(80, 24)) as pilot:
        timeline = await loaded(pilot)
        innermost = row_named(timeline, f"level{depth - 1}")
        assert 0 not in timeline.expanded
        timeline.select(innermost)
        await pilot.pause()
        await pilot.pause()
        top = int(timeline.scroll_offset.y)
        visible = timeline.scrollable_content_region.height - 1
        assert top <= timeline.cursor_row < top + visible
        assert timeline.selected_row == innermost


async def test_the_loading_screen_shows_progress_then_the_trace(trace_path, monkeypatch):
    # The load reports progress, then stops until the screen has shown it: what the screen
    # shows came from the loader's messages, and the trace screen follows on its own.
    shown, release = threading.Event(), threading.Event()
    real_load = loader_module.load

    def held_load(path, progress=None, **options):
        progress(3_500_000, 7_000_000, 12_345)
        release.wait(10)
        return real_load(path, progress=progress, **options)

    monkeypatch.setattr(loader_module, "load", held_load)
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_for_screen(pilot, LoadingScreen)
        for _ in range(250):
            stats = str(screen.query_one("#loading-stats").render())
            if "12,345 events" in stats:
                shown.set()
                break
            await pilot.pause(0.02)
        assert shown.is_set(), stats
        assert "3.5 / 7.0 MB" in stats
        assert screen.query_one("#loading-bar").percentage == pytest.approx(0.5)
        release.set()
        await loaded(pilot)
        assert app.data is not None and app.data.complete
        assert app.first_frame_time is not None


async def test_a_failure_after_the_first_frame_is_said_and_the_app_stays(trace_path, monkeypatch):
    from kinetoscope.tui.data.viewdata import ViewData

    def broken(self):
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("nesting exploded")

    monkeypatch.setattr(ViewData, "complete_levels", broken)
    app = KinetoscopeApp(trace_path, staged=True)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        for _ in range(250):
            if app._notifications:
                break
            await pilot.pause(0.02)
        errors = [n for n in app._notifications if n.severity == "error"]
        assert len(errors) == 1 and "could not nest the slices" in errors[0].message
        assert "nesting exploded" in errors[0].message
        assert isinstance(app.screen, TraceScreen) and not app._exit
        await pilot.press("w", "d", "down")  # the view keeps working
        assert tl.ns_per_cell > 0
        await pilot.press("q")
    assert app.return_code == 0


async def test_the_first_frame_starts_the_loaders_later_work(trace_path, monkeypatch):
    # Were the first frame not passed on, the deeper levels would wait the whole minute.
    monkeypatch.setattr(loader_module, "FIRST_FRAME_WAIT_S", 60.0)
    app = KinetoscopeApp(trace_path, staged=True)
    async with app.run_test(size=SIZE) as pilot:
        tl = await loaded(pilot)
        began = time.monotonic()
        while not tl.data.complete and time.monotonic() - began < 20:
            await pilot.pause(0.02)
        assert tl.data.complete
        assert app.first_frame_time is not None and app.first_frame_time <= time.time()
        rows = len(tl.rows)
        await pilot.pause(0.1)
        await pilot.press("enter")  # the lane's levels are there now
        assert len(tl.rows) == rows + 4


async def test_the_timeline_says_its_first_frame_in_a_message(trace_path):
    # The timeline posts a message; it does not call into whatever app it is in.
    from kinetoscope.parser import load
    from kinetoscope.tui.data.viewdata import build_view_data
    from textual.app import App, ComposeResult

    data = build_view_data(load(trace_path))

    class Bare(App):
        def __init__(self) -> None:
            super().__init__()
            self.drawn: list[float] = []

        def compose(self) -> ComposeResult:
            yield Timeline(data)

        def on_timeline_first_frame(self, message: Timeline.FirstFrame) -> None:
            self.drawn.append(message.when)

    app = Bare()
    before = time.time()
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            if app.drawn:
                break
            await pilot.pause(0.02)
        await pilot.press("w", "s")  # later frames are not first frames
        await pilot.pause(0.1)
    assert len(app.drawn) == 1 and before <= app.drawn[0] <= time.time()


def test_the_command_opens_the_viewer_staged(trace_path, monkeypatch):
    from kinetoscope.tui.trace import app as app_module

    import kinetoscope.commands.view as viewer

    opened: list[bool] = []

    def run(self) -> None:
        opened.append(self.loader.staged)

    monkeypatch.setattr(viewer, "terminal_problem", lambda: None)
    monkeypatch.setattr(app_module.KinetoscopeApp, "run", run)
    assert run_view(trace_path) == 0
    assert opened == [True]


def test_the_gap_lists_idle_by_cpu_line_is_the_sessions(trace_path, monkeypatch):
    from kinetoscope.analysis import session as session_module
    from kinetoscope.parser import load
    from kinetoscope.tui.data.viewdata import build_view_data
    from kinetoscope.tui.trace.screens import idle_by_cpu_text

    calls = []
    real = session_module.compute_idle_by_cpu

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(session_module, "compute_idle_by_cpu", counted)
    data = build_view_data(load(trace_path))
    first, again = str(idle_by_cpu_text(data)), str(idle_by_cpu_text(data))
    assert first == again and "All idle by CPU op running" in first
    assert calls == [1] and data.session.has("idle_by_cpu")  # computed once, by the session


def test_the_gap_list_says_when_idle_by_cpu_failed(trace_path, monkeypatch):
    from kinetoscope.analysis import session as session_module
    from kinetoscope.parser import load
    from kinetoscope.tui.data.viewdata import build_view_data
    from kinetoscope.tui.trace.screens import idle_by_cpu_text

    def broken(*args):
        raise ValueError("no idea")

    monkeypatch.setattr(session_module, "compute_idle_by_cpu", broken)
    text = str(idle_by_cpu_text(build_view_data(load(trace_path))))
    assert "could not be computed" in text and "no idea" in text


def test_a_progress_report_to_a_loading_screen_without_its_widgets_is_dropped():
    # A rank's loading screen opened by a key while the app quits gets its first report after
    # it was taken down: it has no bar to move, and must not fail (a traceback on exit).
    screen = LoadingScreen("trace.json")
    report = loader_module.Progress(
        stage=loader_module.Stage.READING, done=0, total=0, events=0, rate=0.0
    )
    screen.on_loading_screen_progress(LoadingScreen.Progress(report))
