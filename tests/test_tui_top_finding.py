"""The viewer's first screen gives the answer: the top finding in the details pane and the
status line, `t` in the footer; capture and demo open on the findings."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import load
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.findings import FindingsScreen
from kinetoscope.tui.trace.screens import TraceScreen
from pilot_helpers import settle

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "sample_traces"
    / "synthetic_gpu_training.pt.trace.json.gz"
)
SIZE = (120, 40)


def rendered(screen, selector: str) -> str:
    return str(screen.query_one(selector).render())


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")
async def test_first_screen_names_the_top_finding_and_t():
    top = TraceSession(load(str(SAMPLE))).causes[0]
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        assert screen.top_finding.rule == top.rule
        details = rendered(screen, "#details Static")
        assert f"Top finding {top.severity.upper()} {top.rule}" in details
        assert top.headline[:40] in details
        status = rendered(screen, "#status")
        assert f"top: {top.severity.upper()} {top.rule}" in status
        shown = [key for key, active in screen.active_bindings.items() if active.binding.show]
        assert "t" in shown  # in the footer
        # Selecting an event replaces the line; Esc brings it back.
        await pilot.press("right")
        await pilot.pause()
        assert "Top finding" not in rendered(screen, "#details Static")
        assert "top:" not in rendered(screen, "#status")


async def test_a_trace_where_no_rule_fires_says_so(tmp_path):
    path = tmp_path / "quiet.json"
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": t,
            "dur": 100,
            "args": {"device": 0, "stream": 7},
        }
        for t in range(0, 2000, 100)
    ]
    events.append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 2000,
        }
    )
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    assert not TraceSession(load(str(path))).causes
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        assert screen.top_finding is False
        assert "No triage rule fired" in rendered(screen, "#details Static")


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")
async def test_capture_and_demo_open_on_the_findings():
    app = KinetoscopeApp(str(SAMPLE), open_findings=True)
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + 60
        while not isinstance(app.screen, FindingsScreen):
            assert time.monotonic() < deadline, "the findings never opened"
            await pilot.pause(0.05)
        screen = await settle(pilot, FindingsScreen)
        assert screen.findings and screen.findings[0].rule == screen.host.top_finding.rule
        await pilot.press("escape")
        await settle(pilot, TraceScreen)  # the timeline is under it


async def test_findings_screen_shows_rule_ids_whole(tmp_path):
    """`unknown_accelerator_events` read `unknown_accelerator_e…` in a 22-cell column."""
    path = tmp_path / "mtia.json"
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },
        {
            "ph": "X",
            "cat": "mtia_runtime",
            "name": "runFunction",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 50,
        },
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("t")
        await settle(pilot, FindingsScreen)
        from test_robust_tui import screen_text

        text = screen_text(app)
        assert "unknown_accelerator_events " in text and "unknown_accelerator_e…" not in text
        assert "1 slice of categories" in text  # singular
