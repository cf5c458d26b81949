"""Where a cold `kinetoscope summary TRACE --json` spends its time, phase by phase (issue 30).

    python benchmarks/bench_cold_summary.py TRACE [--runs 3]

Each run is a fresh process with a fresh, empty KINETOSCOPE_CACHE_DIR. The child wraps the
summary's steps with wall-clock marks (start, imports and options; the load, its pool stop
and release included; the analysis and document; the cache write in its thread, wall and the
thread's CPU; the encoding, output and stored summary; the exit after the last exit handler),
and the parent measures the whole run: wall, user + system CPU of the process tree, peak RSS.
Prints one row per phase: every run and the median. Nothing of the summary is changed: the
marks wrap functions, the output goes to /dev/null. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = (
    ("start, imports, options", "summarise >", None),
    ("load (read, pool stop and release)", "load >", "load <"),
    ("analysis and document", "build_summary >", "build_summary <"),
    ("cache write (its thread, wall)", "save_cache >", "save_cache <"),
    ("encode, output, stored summary", "build_summary <", "keep_summary <"),
)


def child(trace: str, marks_file: str) -> int:
    """One summary with marks (seconds since the process started)."""
    with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
        started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        offset = float(uptime.read().split()[0]) - started - time.perf_counter()
    marks: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def mark(what: str) -> None:
        marks.setdefault(what, time.perf_counter() + offset)
        cpu.setdefault(what, time.thread_time())

    def wrap(module: object, name: str, label: str) -> None:
        function = getattr(module, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            mark(label + " >")
            try:
                return function(*args, **kwargs)
            finally:
                mark(label + " <")

        setattr(module, name, wrapped)

    def last() -> None:  # registered first: runs after every other exit handler
        with open(marks_file, "w") as out:
            json.dump({"marks": marks, "cpu": cpu, "exit_at": time.time()}, out)

    import atexit

    atexit.register(last)
    import kinetoscope.analysis.summary as summary
    import kinetoscope.parser as parser

    import kinetoscope.commands.summary as command
    from kinetoscope.commands.cli import main

    wrap(command, "summarise", "summarise")
    wrap(parser, "load", "load")
    wrap(parser, "save_cache", "save_cache")
    wrap(summary, "build_summary", "build_summary")
    wrap(command, "_keep_summary", "keep_summary")
    return main(["summary", trace, "--json"])


def run_once(trace: str) -> dict[str, float]:
    cache = tempfile.mkdtemp(prefix="kinetoscope-bench-")
    marks_file = os.path.join(cache, "marks.json")
    env = {**os.environ, "KINETOSCOPE_CACHE_DIR": os.path.join(cache, "cache")}
    start = time.perf_counter()
    with open(os.devnull, "w") as devnull:
        process = subprocess.Popen(
            [sys.executable, __file__, "--child", trace, marks_file], env=env, stdout=devnull
        )
        # wait4: the child's CPU with its reaped descendants' (the workers), and the largest RSS
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    ended = time.time()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"the summary failed (status {process.returncode})")
    with open(marks_file) as handle:
        got = json.load(handle)
    shutil.rmtree(cache, ignore_errors=True)
    marks, cpu = got["marks"], got["cpu"]
    row = {}
    for name, first, second in PHASES:
        row[name] = marks[second] - marks[first] if second else marks[first]
    row["cache write (its thread's CPU)"] = cpu["save_cache <"] - cpu["save_cache >"]
    row["exit after the last exit handler"] = ended - got["exit_at"]
    row["whole run: wall"] = wall
    row["whole run: CPU (user + system, all processes)"] = usage.ru_utime + usage.ru_stime
    row["whole run: peak RSS (MiB)"] = usage.ru_maxrss / 1024  # the largest of the processes
    return row


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("trace")
    options.add_argument("--runs", type=int, default=3)
    args = options.parse_args()
    rows = [run_once(args.trace) for _ in range(args.runs)]
    print(f"| phase (s) | {' | '.join(f'run {i + 1}' for i in range(len(rows)))} | median |")
    print("|---|" + "---:|" * (len(rows) + 1))
    for name in rows[0]:
        values = [row[name] for row in rows]
        cells = " | ".join(f"{v:.2f}" for v in values)
        print(f"| {name} | {cells} | {statistics.median(values):.2f} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
