"""Layout pinned with pytest-textual-snapshot on the synthetic GPU training sample."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.screens import GapListScreen, TraceScreen
from pilot_helpers import top_finding_shown

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "sample_traces"
    / "synthetic_gpu_training.pt.trace.json.gz"
)

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")


async def settle(pilot, kind=TraceScreen) -> None:
    """Wait for the screen, then for the args reader, so the frame is the same every run."""
    deadline = time.monotonic() + 20
    while not isinstance(pilot.app.screen, kind):
        assert time.monotonic() < deadline, "screen never came"
        await pilot.pause(0.02)
    await pilot.pause()
    await top_finding_shown(pilot, deadline)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def run_keys(*keys: str, until=TraceScreen):
    async def run_before(pilot) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
        await settle(pilot, until)

    return run_before


def test_whole_trace_80x24(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_keys())


def test_whole_trace_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_keys())


def test_first_gap_expanded_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    run_before = run_keys("g", "up", "up", "up", "enter")
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_gap_list_80x24(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_keys("i", until=GapListScreen))
