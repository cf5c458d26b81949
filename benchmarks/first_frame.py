"""Seconds from process start to the viewer's first drawn timeline frame, as a user waits for it.

    python benchmarks/first_frame.py TRACE [--size 200x50]

Runs the real app headless, started as the `kinetoscope` command starts it (the load begins
before Textual is imported), and prints one number: the time from this process's start, read
from /proc (so Python's own start and every import count), to when the timeline has drawn the
last line of its first fitted frame.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time


def process_age() -> float:
    """Seconds since this process started (Linux)."""
    with open("/proc/self/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as handle:
        uptime = float(handle.read().split()[0])
    return uptime - started


async def first_frame(path: str, width: int, height: int, write_caches: bool = False) -> float:
    """As `kinetoscope TRACE` does it: the load starts before Textual is imported; the frame
    counts as drawn when the timeline has rendered the last line of its first fitted frame."""
    started = time.time() - process_age()
    from kinetoscope.tui.data.loader import TraceLoad

    loader = TraceLoad(path, staged=True)
    from kinetoscope.tui.trace.app import KinetoscopeApp

    app = KinetoscopeApp(path, loader=loader)
    async with app.run_test(size=(width, height)) as pilot:
        while app.first_frame_time is None:
            if loader.error is not None:
                raise SystemExit(f"first_frame: {loader.error}")
            await pilot.pause(0.01)
        elapsed = app.first_frame_time - started
        if write_caches:
            while loader.running:
                await pilot.pause(0.05)
        app.exit()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--size", default="200x50")
    parser.add_argument(
        "--write-caches",
        action="store_true",
        help="after the frame, wait for the model and view caches to be written (to prime a reopen)",
    )
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    print(f"{asyncio.run(first_frame(args.trace, width, height, args.write_caches)):.2f}")
    sys.stdout.flush()
    os._exit(0)  # do not wait for anything else: the frame is what was measured


if __name__ == "__main__":
    sys.exit(main())
