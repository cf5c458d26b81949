"""Frame time of the timeline for zoom, pan and idle-gap jumps on a big trace.

    python /path/to/scale_trace.py SOME_TRACE.json.gz benchmarks/data/big.json --target-mb 200
    python benchmarks/bench_render.py benchmarks/data/big.json [--size 200x50] [--json]

A frame is one key's action plus drawing every line of the timeline from cold strip caches
(each action moves the view, so nothing drawn before can be reused). Prints median and p95 per
operation, in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from kinetoscope.parser import load
from kinetoscope.tui.data.loader import TraceLoad
from kinetoscope.tui.data.viewdata import build_view_data
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.widgets.timeline import Timeline


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def draw(timeline: Timeline) -> None:
    for y in range(timeline.size.height):
        timeline.render_line(y)


def frame(timeline: Timeline, action) -> float:
    timeline._strips.clear()
    timeline._cells.clear()
    began = time.perf_counter()
    action()
    draw(timeline)
    return (time.perf_counter() - began) * 1000


async def run(path: str, width: int, height: int, repeats: int) -> dict[str, list[float]]:
    began = time.perf_counter()
    trace = load(path)
    loaded = time.perf_counter()
    data = build_view_data(trace)
    built = time.perf_counter()
    print(
        f"{path}: {len(trace):,} rows, load {loaded - began:.2f} s, "
        f"view data {built - loaded:.2f} s, {len(data.gaps):,} GPU gaps"
    )
    # The view built above, handed over as a finished load: the load was timed above.
    app = KinetoscopeApp(path, loader=TraceLoad.finished(data))
    results: dict[str, list[float]] = {
        "zoom": [],
        "pan": [],
        "gap jump": [],
        "lane expand": [],
        "first frame": [],
    }
    async with app.run_test(size=(width, height)) as pilot:
        while not isinstance(app.screen, TraceScreen):
            await pilot.pause(0.01)
        await pilot.pause()
        timeline = app.screen.query_one(Timeline)
        # Expand the busiest CPU lane so that every row of the screen has slices to draw.
        busiest = max(
            range(len(data.lanes)),
            key=lambda i: sum(len(level) for level in data.lanes[i].levels),
        )
        timeline.expanded.add(busiest)
        timeline._rebuild_rows()
        print(
            f"timeline {timeline.size.width}x{timeline.size.height} "
            f"({timeline.cells_width} time cells), {len(timeline.rows)} rows"
        )
        timeline.action_fit_all()
        results["first frame"].append(frame(timeline, lambda: None))
        for _ in range(repeats):
            timeline.action_fit_all()
            timeline.cursor_time = data.span // 3
            for _ in range(14):
                results["zoom"].append(frame(timeline, timeline.action_zoom_in))
            for _ in range(14):
                results["zoom"].append(frame(timeline, timeline.action_zoom_out))
        for zoom_steps in (3, 6, 10):
            timeline.action_fit_all()
            timeline.cursor_time = 0
            for _ in range(zoom_steps):
                timeline.action_zoom_in()
            for _ in range(10 * repeats):
                results["pan"].append(frame(timeline, timeline.action_pan_right))
        timeline.action_fit_all()
        timeline.cursor_time = 0
        timeline.gap_threshold = 0
        for _ in range(30 * repeats):
            results["gap jump"].append(frame(timeline, timeline.action_next_gap))
        # Expand and collapse the busiest lane (Enter on its row), at a mid zoom.
        timeline.action_fit_all()
        for _ in range(4):
            timeline.action_zoom_in()
        timeline.expanded.discard(busiest)
        timeline._rebuild_rows()
        timeline.cursor_row = timeline._display_index(busiest, 0)
        for _ in range(10 * repeats):
            results["lane expand"].append(frame(timeline, timeline.action_toggle_expand))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--size", default="200x50", help="terminal size, WxH (default 200x50)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--json", action="store_true", help="also print the results as one last line of JSON"
    )
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    results = asyncio.run(run(args.trace, width, height, args.repeats))
    print(f"{'operation':<12} {'frames':>6} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    for name, values in results.items():
        print(
            f"{name:<12} {len(values):>6} {statistics.median(values):>10.2f} "
            f"{percentile(values, 0.95):>8.2f} {max(values):>8.2f}"
        )
    if args.json:
        summary = {
            name: {
                "frames": len(values),
                "median_ms": statistics.median(values),
                "p95_ms": percentile(values, 0.95),
                "max_ms": max(values),
            }
            for name, values in results.items()
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
