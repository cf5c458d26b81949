"""CPU time of each stage of the summary's analysis, one thread, on one trace.

    python benchmarks/bench_stages.py TRACE [--runs 3] [--scale-mb 1000] [--markdown]

Every run is a fresh Python process: it loads the trace as the summary does (parsed, no model
cache: a memory-mapped model would add its page faults to the first stage that reads each
column), imports the analysis modules (outside the timing), then asks a `TraceSession` for
each result in dependency order on this one thread, timing each with `time.process_time()`
(CPU time, which a busy machine distorts far less than wall time), and last builds the
summary document from the computed results ("total" is the sum: the analysis on one thread).
Then, on a fresh session of the same trace, the whole summary as `summary` runs it (its stages
on two threads where two CPUs may be used): its CPU time, all threads together, and its wall
time, which a busy machine inflates. The table gives each row's median over the runs;
`--scale-mb` adds a column scaled linearly to a trace of that size (the stages grow linearly
with the events). Run it against another checkout of the code by putting that checkout first
on PYTHONPATH (from outside this checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# In the order of their dependencies: each is computed by its own ask, never inside another's.
STAGES = (
    "classes",
    "cpu_groups",
    "gpu_groups",
    "nesting",
    "links",
    "idle",
    "memory",
    "memory_ops",
    "sync",
    "steps",
    "idle_by_cpu",
    "operators",
    "kernels",
    "kernel_launchers",
    "compiled",
    "kernel_efficiency",
    "findings",
    "causes",
)

CHILD = """
import importlib, json, sys, time
from kinetoscope.parser import load
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.present.report_summary import summary_json
for module in ("memory_ops", "sync", "compile", "rules", "oddities", "steps", "summary"):
    importlib.import_module("kinetoscope.analysis." + module)
trace = load(sys.argv[1], use_cache=False, write_cache=False, release=True)
session = TraceSession(trace)
times = {}
for name in json.loads(sys.argv[2]):
    began = time.process_time()
    getattr(session, name)
    times[name] = time.process_time() - began
began = time.process_time()
summary_json(build_summary(session))
times["document"] = time.process_time() - began
# The whole summary again on a fresh session, as `summary` runs it: its stages on two threads
# where the process may use two CPUs. Wall and CPU time (of all threads) of the analysis.
wall, cpu = time.perf_counter(), time.process_time()
summary_json(build_summary(TraceSession(trace)))
times["summary wall"] = time.perf_counter() - wall
times["summary CPU"] = time.process_time() - cpu
print(json.dumps(times))
"""


def one_run(trace: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="kinetoscope-stages-") as cache:
        env = {**os.environ, "KINETOSCOPE_CACHE_DIR": cache}  # nothing shared, nothing kept
        argv = [sys.executable, "-c", CHILD, str(trace), json.dumps(STAGES)]
        out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale-mb", type=float, default=None)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if not args.trace.is_file():
        print(f"bench_stages: no such trace: {args.trace}", file=sys.stderr)
        return 2
    runs = [one_run(args.trace) for _ in range(max(1, args.runs))]
    names = [*STAGES, "document"]
    extra = ["summary CPU", "summary wall"]
    medians = {name: statistics.median(run[name] for run in runs) for name in names + extra}
    total = sum(medians[name] for name in names)
    scale = None
    if args.scale_mb:
        scale = args.scale_mb * 1e6 / args.trace.stat().st_size
    headers = ["stage", f"CPU s (median of {len(runs)})", "runs"]
    if scale:
        headers.append(f"scaled to {args.scale_mb:g} MB")
    rows = []
    for name in [*names, "total", *extra]:
        value = total if name == "total" else medians[name]
        each = (
            ", ".join(f"{sum(run[n] for n in names):.3f}" for run in runs)
            if name == "total"
            else ", ".join(f"{run[name]:.3f}" for run in runs)
        )
        row = [name, f"{value:.3f}", each]
        if scale:
            row.append(f"{value * scale:.2f}")
        rows.append(row)
    if args.markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" * len(headers))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        for row in [headers, *rows]:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
