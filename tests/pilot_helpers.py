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
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    return pilot.app.screen
