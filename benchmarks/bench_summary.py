"""Time each analysis of one trace (best of N, the trace loaded once), then the whole summary.

    python benchmarks/bench_summary.py TRACE [--runs 3]

The load itself is timed by benchmarks/run.py; this isolates the analysis layer.
"""

from __future__ import annotations

import argparse
import time

PARTS = (
    "classes",
    "cpu_groups",
    "gpu_groups",
    "nesting",
    "links",
    "operators",
    "kernels",
    "kernel_launchers",
    "idle",
    "steps",
    "memory",
    "findings",
)


def main() -> None:
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    started = time.perf_counter()
    trace = load(args.trace)
    print(f"load: {time.perf_counter() - started:.2f} s, {len(trace):,} rows")
    best = {part: float("inf") for part in PARTS}
    best_summary = float("inf")
    for _ in range(args.runs):
        analysis = TraceSession(trace)
        for part in PARTS:
            started = time.perf_counter()
            getattr(analysis, part)
            best[part] = min(best[part], time.perf_counter() - started)
        trace.__dict__.pop("_analysis", None)
        started = time.perf_counter()
        build_summary(trace)
        best_summary = min(best_summary, time.perf_counter() - started)
    for part in PARTS:
        print(f"{part:18s} {best[part] * 1000:9.1f} ms")
    print(f"{'analyses, summed':18s} {sum(best.values()) * 1000:9.1f} ms")
    print(f"{'build_summary':18s} {best_summary * 1000:9.1f} ms  (all analyses + document)")


if __name__ == "__main__":
    main()
