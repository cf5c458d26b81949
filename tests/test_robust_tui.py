"""The viewer under stress: hostile names everywhere, tiny terminals, every key in every state,
empty, failed and changing traces, cancelled loads. The app keeps working, nothing from the
trace reaches the terminal raw, and it quits cleanly."""

from __future__ import annotations

import io
import json
import random
import threading
import time
from pathlib import Path

import pytest
from kinetoscope.tui.data import loader as loader_module
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.screens import ErrorScreen, LoadingScreen, TraceScreen
from kinetoscope.tui.widgets.timeline import Timeline
from rich.cells import cell_len
from rich.console import Console

SIZE = (120, 40)
MARKUP_NAME = "[bold]mm[/bold]\x1b[31m"
LONG_NAME = "void at::native::elementwise_kernel<" + "Functor<float>, " * 200 + ">"


def R(ts, corr, name="cudaLaunchKernel", dur=5):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts,
            "dur": dur, "args": {"correlation": corr}}  # fmt: skip


def K(name, ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": 7}}  # fmt: skip


def hostile_trace() -> dict:
    """Markup, escape sequences, bidi controls and a huge name in every place a name can be."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "[red]proc\x1b[2J"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "[memory]t\r\n"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "s\x1b]0;T\x07"}},
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },  # fmt: skip
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": MARKUP_NAME,
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 700,
            "args": {
                "[k]\x1b[1m": "[v]\x1b]8;;http://x\x07y",
                "Input Dims": [[2]],
                "Call stack": "a\x1b[2J.py(1): f;b[/bold].py(2): g",
            },
        },  # fmt: skip
        R(20, 1, name="\x1b]0;title\x07launch"),
        R(30, 2),
        R(600, 3),
        K(LONG_NAME, 100, 300, 1),
        K("inside[/]", 150, 50, 2),
        K("\u202eevil\u200b", 700, 100, 3),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "[bold]GPU\x07", "totalGlobalMem": 1 << 34}],
        "traceEvents": events,
    }


def screen_text(app) -> str:
    """Render the screen as the terminal gets it; check it and return its visible text.

    Textual's own cursor moves and colours are control segments; every other segment is text
    and must hold no control character (an injected escape sequence would be one)."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        legacy_windows=False,
        safe_box=False,
    )
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    text = []
    for segment in console.render(update):
        if segment.control:
            continue
        bad = [c for c in segment.text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) < 0xA0]
        assert not bad, f"raw control characters reach the terminal: {segment.text!r}"
        assert not any(0xD800 <= ord(c) < 0xE000 for c in segment.text)
        text.append(segment.text)
    return "".join(text)


async def wait_for(pilot, kind, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.02)
        if isinstance(pilot.app.screen, kind):
            await pilot.pause()
            return pilot.app.screen
    raise AssertionError(f"{kind.__name__} never came; at {pilot.app.screen!r}")


async def back_to(pilot, kind, presses=8):
    for _ in range(presses):
        if isinstance(pilot.app.screen, kind):
            return
        await pilot.press("escape")
        await pilot.pause(0.05)
    assert isinstance(pilot.app.screen, kind), pilot.app.screen


async def quit_cleanly(pilot, code=0):
    await pilot.press("q")
    for _ in range(200):
        await pilot.pause(0.02)
        if pilot.app._exit:
            break
    assert pilot.app._exit and pilot.app.return_code == code


@pytest.fixture
def hostile_path(tmp_path):
    path = tmp_path / "evil[bold]\x1b[31m\u202e.json"
    path.write_text(json.dumps(hostile_trace()))
    return path


@pytest.mark.also_no_color
async def test_hostile_names_are_literal_text_on_every_screen(hostile_path):
    app = KinetoscopeApp(str(hostile_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_for(pilot, TraceScreen)
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "evil[bold]␛[31m" in text  # the file name, drawn, not interpreted
        assert "[red]proc␛[2J" in text  # process name in the group header
        assert " ▸[memory]t" in text  # thread name in the lane label (whitespace trimmed)
        timeline = screen.query_one(Timeline)
        trace = timeline.data.trace
        rows = {trace.name_of(r): r for r in range(len(trace))}

        timeline.select(rows[MARKUP_NAME])
        await pilot.pause(0.3)  # args are read back in a thread
        text = screen_text(app)
        assert "[bold]mm[/bold]␛[31m" in text
        assert "[k]␛[1m" in text and "[v]␛]8;;http://x␇y" in text
        assert "b[/bold].py(2): g" in text  # python stack from the Call stack arg

        timeline.select(rows[LONG_NAME])
        await pilot.pause(0.3)
        text = screen_text(app)
        status = str(screen.query_one("#status").render())
        assert "…" in status and cell_len(status) < 200  # elided, not the 3000-cell name
        assert "␛]0;title␇launch" in text  # launched by

        timeline.select(rows["inside[/]"])  # overlapped by the long kernel: its own level
        await pilot.pause(0.2)
        assert "inside[/]" in screen_text(app)

        for key in ("i", "o", "k", "t", "question_mark", "p", "b"):
            await pilot.press(key)
            await pilot.pause(0.3)
            text = screen_text(app)
            if key == "o":
                assert "[bold]mm[/bold]␛[31m" in text
            if key == "t":
                assert "overlapping_gpu_work" in text
            await back_to(pilot, TraceScreen)

        await pilot.press("slash")
        await pilot.pause(0.1)
        for key in "[/x]":
            await pilot.press(key)
        await pilot.press("enter")
        await pilot.pause(0.2)
        screen_text(app)
        await pilot.press("slash")
        await pilot.pause(0.1)
        await pilot.press(*"[bold]", "enter")
        await pilot.pause(0.2)
        screen_text(app)
        await back_to(pilot, TraceScreen)
        await quit_cleanly(pilot)


@pytest.fixture
def sample_path(tmp_path):
    from test_tui_sample import sample_trace

    path = tmp_path / "sample.json"
    path.write_text(json.dumps(sample_trace()))
    return path


async def test_tiny_terminal_and_back(sample_path):
    app = KinetoscopeApp(str(sample_path))
    async with app.run_test(size=(40, 10)) as pilot:
        screen = await wait_for(pilot, TraceScreen)
        timeline = screen.query_one(Timeline)
        for size in ((40, 10), (120, 40), (40, 10), (24, 6), (80, 24), (40, 10)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.1)
            screen_text(app)
            before = timeline.ns_per_cell
            await pilot.press("w")
            assert timeline.ns_per_cell < before or timeline.ns_per_cell == 1.0
            for key in ("right", "down", "g", "enter", "s", "d", "i", "escape", "o", "escape"):
                await pilot.press(key)
            await pilot.pause(0.1)
            screen_text(app)
            await back_to(pilot, TraceScreen)
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.1)
        assert timeline.cells_width > 60
        await quit_cleanly(pilot)


# Every key a user might press, bound or not (q, ctrl+q and ctrl+c quit; tested on their own).
KEYS = [
    *"abcdefghijklmnoprstuvwxyzABCDEFGHIJKLMNOPRSTUVWXYZ0123456789",
    "enter", "escape", "tab", "shift+tab", "space", "backspace", "delete",
    "up", "down", "left", "right", "home", "end", "pageup", "pagedown",
    "shift+left", "shift+right", "ctrl+left", "ctrl+right", "f1", "f5",
    "slash", "question_mark", "plus", "minus", "left_square_bracket", "right_square_bracket",
    "less_than_sign", "greater_than_sign", "comma", "full_stop", "asterisk", "colon",
]  # fmt: skip
SIZES = [(120, 40), (80, 24), (40, 10), (60, 15)]


async def press_everything(pilot, rng: random.Random, count: int) -> None:
    """`count` random keys, with a resize now and then; the app must stay up throughout."""
    for i in range(count):
        if i % 40 == 39:
            await pilot.resize_terminal(*rng.choice(SIZES))
        await pilot.press(rng.choice(KEYS))
        if i % 20 == 0:
            await pilot.pause(0.05)
            assert not pilot.app._exit, "a key made the app exit"
            screen_text(pilot.app)


@pytest.mark.parametrize("seed", [1, 2])
async def test_any_key_in_any_state_then_quit(hostile_path, seed):
    app = KinetoscopeApp(str(hostile_path))
    rng = random.Random(seed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, TraceScreen)
        await press_everything(pilot, rng, 120)
        await back_to(pilot, TraceScreen, presses=12)
        await quit_cleanly(pilot)


@pytest.mark.parametrize(
    "content",
    [
        {"traceEvents": []},
        [],
        {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}]},
        {"traceEvents": [{"ph": "X", "name": "only", "ts": 5, "dur": 0, "pid": 1, "tid": 1}]},
    ],
    ids=["empty", "bare-empty", "metadata-only", "one-zero-slice"],
)
async def test_empty_traces_open_and_every_key_is_harmless(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(content))
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, TraceScreen)
        screen_text(app)
        await press_everything(pilot, random.Random(7), 60)
        await back_to(pilot, TraceScreen, presses=12)
        await quit_cleanly(pilot)


async def test_failed_trace_shows_the_error_whatever_is_pressed(tmp_path, monkeypatch):
    # A relative path, so that the name is not wrapped at a place that depends on tmp_path.
    monkeypatch.chdir(tmp_path)
    path = Path("bad[bold]\x1b[2J.json")
    path.write_bytes(b"\x00\x01 not json at all")
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(40, 10)) as pilot:
        await wait_for(pilot, ErrorScreen)
        assert "bad[bold]␛[2J" in screen_text(app)
        for key in KEYS:
            if key != "escape":
                await pilot.press(key)
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.05)
        assert not app._exit
        if isinstance(app.screen, HelpScreen):  # ? opens the key help, over the error
            await pilot.press("escape")
            await pilot.pause(0.05)
        assert isinstance(app.screen, ErrorScreen) and not app._exit
        screen_text(app)
        await quit_cleanly(pilot, code=1)
    assert "not a trace" in app.exit_message


async def test_an_unexpected_error_while_preparing_the_view_is_shown(sample_path, monkeypatch):
    def broken(trace, **options):
        raise ValueError("boom")

    from kinetoscope.tui.data import viewdata

    monkeypatch.setattr(viewdata, "build_view_data", broken)
    app = KinetoscopeApp(str(sample_path))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, ErrorScreen)
        assert "ValueError: boom" in screen_text(app)
        await quit_cleanly(pilot, code=1)


def _slow_load(started: threading.Event, finished: threading.Event | None = None):
    """A load of 2,000 steps of 5 ms that reports progress at each (the progress callback is
    where a cancelled load stops); `finished` is set if it ever runs to its end."""

    def slow_load(path, progress=None, **options):
        for step in range(2000):
            started.set()
            progress(step, 2000, step * 10)
            time.sleep(0.005)
        if finished is not None:
            finished.set()
        raise AssertionError("the load was not cancelled")

    return slow_load


async def test_keys_and_resizes_while_loading_then_cancel(sample_path, monkeypatch):
    started = threading.Event()
    monkeypatch.setattr(loader_module, "load", _slow_load(started))
    app = KinetoscopeApp(str(sample_path))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, LoadingScreen)
        started.wait(5)
        # ? opens the key help over the loading screen; the first Esc closes it.
        for key in ("w", "s", "g", "i", "o", "enter", "question_mark", "escape", "escape"):
            await pilot.press(key)
            if key == "question_mark":
                await pilot.resize_terminal(40, 10)
                screen_text(app)
        for _ in range(150):
            await pilot.pause(0.02)
            if app._exit:
                break
    assert app.return_code == 1 and app.exit_message == "loading cancelled"


async def test_quit_while_loading_exits_at_once(sample_path, monkeypatch):
    started, finished = threading.Event(), threading.Event()
    monkeypatch.setattr(loader_module, "load", _slow_load(started, finished))
    app = KinetoscopeApp(str(sample_path))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, LoadingScreen)
        started.wait(5)
        await pilot.press("q")
        for _ in range(150):
            await pilot.pause(0.02)
            if app._exit:
                break
        assert app._exit
    # The app ended without waiting for the load to run its course.
    assert not finished.is_set()


async def test_a_trace_that_changes_while_open_is_noticed(sample_path):
    app = KinetoscopeApp(str(sample_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await wait_for(pilot, TraceScreen)
        timeline = screen.query_one(Timeline)
        screen.check_file()
        assert screen.changed_on_disk is None
        with sample_path.open("a") as handle:
            handle.write("\n")
        screen.check_file()
        await pilot.pause(0.1)
        assert "changed on disk" in screen.changed_on_disk
        assert "CHANGED ON DISK" in str(screen.query_one("#title").render())
        timeline.select(0)
        await pilot.pause(0.3)
        assert "the file changed on disk" in screen_text(app)
        await quit_cleanly(pilot)
