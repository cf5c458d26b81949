"""Helpers the viewer's Pilot tests share."""

from __future__ import annotations

import time


async def settle(pilot, kind=None, timeout: float = 60.0):
    """Wait for a screen of `kind` (None: the one in front), then for the app's workers; the
    screen. `timeout` bounds only a failing wait."""
    deadline = time.monotonic() + timeout
    while kind is not None and not isinstance(pilot.app.screen, kind):
        assert time.monotonic() < deadline, f"{kind.__name__} never came: {pilot.app.screen!r}"
        await pilot.pause(0.02)
    await pilot.pause()
    await top_finding_shown(pilot, deadline)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    return pilot.app.screen


async def top_finding_shown(pilot, deadline: float) -> None:
    """Wait until every trace screen that shows the top finding has it (its worker starts
    after the first frame), so that a frame is the same on every run."""
    from kinetoscope.tui.trace.screens import TraceScreen

    for screen in list(pilot.app.screen_stack):
        if isinstance(screen, TraceScreen) and screen.SHOWS_TOP_FINDING:
            while screen.top_finding is None:
                assert time.monotonic() < deadline, "the top finding never came"
                await pilot.pause(0.02)
