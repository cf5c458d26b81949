"""A background computation that raises never closes the viewer: the screen that needed it says
what could not be computed and why, an error notification says the same, and the other screens
keep working."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.details import DetailsPane
from kinetoscope.tui.trace.findings import FindingsScreen
from kinetoscope.tui.trace.kernels import KernelsScreen
from kinetoscope.tui.trace.memory_view import MemoryScreen
from kinetoscope.tui.trace.operators import OperatorsScreen
from kinetoscope.tui.trace.overview import OverviewScreen
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.trace.sync_view import SyncScreen
from kinetoscope.tui.widgets.table import DataView
from textual.widgets import Static

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "sample_traces"
    / "synthetic_gpu_training.pt.trace.json.gz"
)
SIZE = (120, 40)
MESSAGE = "broken on purpose by the test"

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")


def boom(*args, **kwargs):
    raise ValueError(MESSAGE)


async def settle(pilot, kind, timeout: float = 15.0):
    """Wait for a screen of `kind`, then for its workers (whatever their end), and return it."""
    deadline = time.monotonic() + timeout
    while not isinstance(pilot.app.screen, kind):
        assert pilot.app.return_code is None, "the app closed"
        assert time.monotonic() < deadline, f"{kind.__name__} never came: {pilot.app.screen!r}"
        await pilot.pause(0.02)
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()
    return pilot.app.screen


def shown_text(screen) -> str:
    """Everything the screen's text panes say, as one string."""
    return "\n".join(str(static.render()) for static in screen.query(Static))


def still_open(app) -> bool:
    return app.return_code is None and app._exception is None


def error_notes(app) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]


# (what to break, the key that opens the screen needing it, that screen, what it says is
# missing, another key and screen that must keep working)
CASES = [
    (
        "kinetoscope.analysis.session.compute_kernels",
        "k",
        KernelsScreen,
        "kernels: could not be computed",
        "o",
        OperatorsScreen,
    ),
    (
        "kinetoscope.analysis.session.compute_operators",
        "o",
        OperatorsScreen,
        "operators: could not be computed",
        "k",
        KernelsScreen,
    ),
    (
        "kinetoscope.analysis.rules.run_rules",
        "t",
        FindingsScreen,
        "findings: could not be computed",
        "o",
        OperatorsScreen,
    ),
    (
        "kinetoscope.analysis.session.compute_steps",
        "v",
        OverviewScreen,
        "overview: could not be computed (steps: ValueError",
        "k",
        KernelsScreen,
    ),
    (
        "kinetoscope.analysis.sync.compute_sync",
        "b",
        SyncScreen,
        "blocking calls: could not be computed (sync: ValueError",
        "o",
        OperatorsScreen,
    ),
    (
        "kinetoscope.analysis.memory_ops.compute_memory_ops",
        "p",
        MemoryScreen,
        "memory: could not be computed (memory ops: ValueError",
        "k",
        KernelsScreen,
    ),
]


@pytest.mark.parametrize(
    "target, key, kind, says, other_key, other_kind",
    CASES,
    ids=[case[0].rsplit(".", 1)[1] for case in CASES],
)
async def test_a_failed_analysis_is_shown_where_it_was_needed(
    monkeypatch, target, key, kind, says, other_key, other_kind
):
    monkeypatch.setattr(target, boom)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press(key)
        screen = await settle(pilot, kind)
        assert still_open(app)
        assert app.screen is screen
        text = shown_text(screen)
        assert says in text, text
        assert f"ValueError: {MESSAGE}" in text, text
        assert "computing…" not in text, text
        notes = error_notes(app)
        assert any(says in note and MESSAGE in note for note in notes), notes

        # Back to the timeline: the other screens still work.
        await pilot.press("escape")
        await settle(pilot, TraceScreen)
        await pilot.press(other_key)
        other = await settle(pilot, other_kind)
        assert still_open(app)
        assert other.table.model is not None and other.table.row_count > 0

        # The broken screen again: it says the same (the failure is remembered, not retried).
        await pilot.press("escape")
        await settle(pilot, TraceScreen)
        await pilot.press(key)
        again = await settle(pilot, kind)
        assert still_open(app)
        assert says in shown_text(again)


async def test_a_range_table_that_fails_says_so_for_the_range_too(monkeypatch):
    """Kernels of a marked range fail (M switches to the whole trace, which works)."""
    import kinetoscope.tui.trace.kernels as kernels_module

    monkeypatch.setattr(kernels_module, "kernels_in_range", boom)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        data = trace_screen.data
        from kinetoscope.tui.data.places import MarkedRange

        trace_screen.marked = MarkedRange(data.origin, data.origin + data.span // 2)
        await pilot.press("k")
        screen = await settle(pilot, KernelsScreen)
        assert still_open(app)
        assert "kernels: could not be computed" in shown_text(screen)
        assert screen.table.model is None
        pane = screen.query_one("#table-detail", Static)
        assert not pane.has_class("nowrap")  # the whole message, on as many lines as it takes
        await pilot.press("M")  # the whole trace
        await settle(pilot, KernelsScreen)
        assert still_open(app)
        assert screen.table.model is not None and screen.table.row_count > 0
        assert "could not be computed" not in shown_text(screen)
        assert pane.has_class("nowrap")


async def test_event_arguments_that_cannot_be_read_are_said_so(monkeypatch):
    import kinetoscope.tui.trace.details as details_module

    monkeypatch.setattr(details_module, "read_event", boom)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        pane = trace_screen.query_one(DetailsPane)
        pane.show_event(0)
        await settle(pilot, TraceScreen)
        assert still_open(app)
        text = str(pane.body.render())
        assert "event arguments: could not be read" in text and MESSAGE in text, text
        assert "reading…" not in text
        assert any("event arguments" in note for note in error_notes(app))


async def test_a_table_sort_that_fails_is_said_so(monkeypatch):
    import kinetoscope.tui.widgets.table as table_module

    monkeypatch.setattr(table_module, "SORT_IN_WORKER", 0)  # every sort in a worker
    monkeypatch.setattr(table_module, "sort_rows", boom)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        assert still_open(app)
        assert isinstance(screen.table, DataView)
        assert "sorting: could not be done" in shown_text(screen)
        assert any("sorting" in note for note in error_notes(app))


async def test_operators_without_their_memory_columns_when_memory_failed(monkeypatch):
    """The operators table shows its times when only its memory columns could not be made."""
    monkeypatch.setattr("kinetoscope.analysis.memory_ops.compute_memory_ops", boom)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        assert still_open(app)
        assert screen.table.model is not None and screen.table.row_count > 0
        titles = [c.title for c in screen.table.model.columns]
        assert "self" in titles and "alloc'd" not in titles
        text = shown_text(screen)
        assert "memory columns: could not be computed (memory ops: ValueError" in text, text
        assert any("memory columns" in note for note in error_notes(app))


async def test_the_memory_view_without_steps(monkeypatch):
    """The memory view's status line names the step under the cursor; with the steps broken
    it works without them (it asked the session for them on the UI thread, which raised)."""
    monkeypatch.setattr("kinetoscope.analysis.session.compute_steps", boom)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        await pilot.press("right", "right")
        await pilot.pause()
        assert still_open(app)
        assert app.screen is screen
        assert "allocated" in str(screen.query_one("#memory-status", Static).render())
