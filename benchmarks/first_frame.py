"""Seconds from process start to the viewer's first drawn timeline frame, as a user waits for it.

    python benchmarks/first_frame.py TRACE [--size 200x50]

Runs the real app headless (loading screen, worker-thread load, view data, first frame) and
prints one number: the time since this process started, read from /proc (so Python's own start
and every import count), when the timeline has drawn every line of its first frame.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys


def process_age() -> float:
    """Seconds since this process started (Linux)."""
    with open("/proc/self/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as handle:
        uptime = float(handle.read().split()[0])
    return uptime - started


async def first_frame(path: str, width: int, height: int) -> float:
    from kinetoscope.tui.app import KinetoscopeApp
    from kinetoscope.tui.screens import TraceScreen
    from kinetoscope.tui.timeline import Timeline

    app = KinetoscopeApp(path)
    async with app.run_test(size=(width, height)) as pilot:
        while not isinstance(app.screen, TraceScreen):
            await pilot.pause(0.01)
        await pilot.pause()
        timeline = app.screen.query_one(Timeline)
        for y in range(timeline.size.height):
            timeline.render_line(y)
        elapsed = process_age()
        app.exit()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--size", default="200x50")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    print(f"{asyncio.run(first_frame(args.trace, width, height)):.2f}")
    sys.stdout.flush()
    os._exit(0)  # do not wait for the background cache write: the frame is what was measured


if __name__ == "__main__":
    sys.exit(main())
