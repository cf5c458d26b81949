"""Drill-down screens pinned with pytest-textual-snapshot at 120x40 on the synthetic sample."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.findings import FindingsScreen
from kinetoscope.tui.trace.kernels import KernelsScreen
from kinetoscope.tui.trace.operators import OperatorDetailScreen, OperatorsScreen
from kinetoscope.tui.trace.overview import OverviewScreen
from kinetoscope.tui.trace.screens import TraceScreen
from pilot_helpers import top_finding_shown

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "sample_traces"
    / "synthetic_gpu_training.pt.trace.json.gz"
)
SIZE = (120, 40)

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")


async def settle(pilot, kind) -> None:
    deadline = time.monotonic() + 20
    while not isinstance(pilot.app.screen, kind):
        assert time.monotonic() < deadline, f"{kind.__name__} never came"
        await pilot.pause(0.02)
    await pilot.pause()
    await top_finding_shown(pilot, deadline)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def run_keys(*steps):
    """Steps are (keys, screen to wait for); the frame is taken once the last one settled."""

    async def run_before(pilot) -> None:
        await settle(pilot, TraceScreen)
        for keys, until in steps:
            for key in keys:
                await pilot.press(key)
            await settle(pilot, until)

    return run_before


def test_operators_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(("o", OperatorsScreen)))


def test_operator_detail_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    steps = (
        ("o", OperatorsScreen),
        (["a", "t", "e", "n", ":", ":", "m", "m", "enter"], OperatorDetailScreen),
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(*steps))


def test_operator_kernels_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    steps = (
        ("o", OperatorsScreen),
        (["a", "t", "e", "n", ":", ":", "m", "m", "enter", "K"], OperatorDetailScreen),
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(*steps))


def test_kernels_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(("k", KernelsScreen)))


def test_findings_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(("t", FindingsScreen)))


def test_overview_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(("v", OverviewScreen)))


def test_search_matches_on_timeline_120x40(snap_compare):
    app = KinetoscopeApp(str(SAMPLE))
    steps = (
        (["slash", "a", "t", "e", "n", ":", ":", "m", "m", "enter"], TraceScreen),
        (["0"], TraceScreen),
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(*steps))


def test_marked_step_range_operators_120x40(snap_compare, monkeypatch):
    # The range's toast is in the picture. It lasts 4 s, and on a loaded machine the frame came
    # after it had gone; here every toast lasts until the picture is taken.
    real_notify = KinetoscopeApp.notify

    def lasting(self, *args, **kwargs):
        kwargs["timeout"] = 3600
        return real_notify(self, *args, **kwargs)

    monkeypatch.setattr(KinetoscopeApp, "notify", lasting)
    app = KinetoscopeApp(str(SAMPLE))
    steps = (
        ("v", OverviewScreen),
        (["down", "M", "escape", "o"], OperatorsScreen),
    )
    assert snap_compare(app, terminal_size=SIZE, run_before=run_keys(*steps))
