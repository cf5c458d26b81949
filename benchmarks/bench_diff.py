"""`kinetoscope diff` of two big traces against one `kinetoscope summary`, in the same run.

    python benchmarks/bench_diff.py [BASE [NEW]] [--runs 3] [--variants] [--like-for-like]

By default BASE is benchmarks/data/h100_google_owlv2-large-patch14-ensemble_1000mb.json and NEW
its .json.gz (the same 1 GB trace, once plain and once gzip'd: the two sides cost what two
different 1 GB traces do, since nothing is shared between them). That pair makes the diff pay a
decompression the summary of BASE does not; `--like-for-like` times, each against the summary
of its own BASE, the two pairs whose sides are read alike: BASE and a copy of it (two plain
traces), and the .json.gz and a copy of it (two gzip'd traces, the summary of the gzip'd one),
besides the mixed default pair. The copies are made once under benchmarks/data (a copy is
another file to kinetoscope: its own identity, nothing shared). Every command runs in a fresh
process with an empty model cache; the table gives the median wall time, the median CPU time
(user + system, of the command and every process it waited for: its decoding workers too) and
the peak resident memory of the process tree (benchmarks/run.py's `measure`). The target: the
diff in under 1.5x the time of one summary of BASE. On a machine others are using, wall times
are noise (they follow the load); the CPU times, and their ratio, much less so.

`--variants` also times the other ways of loading the two traces that were considered:
sequential (load BASE, load NEW, then analyse both) and two processes side by side (each loading
and analysing its trace: a lower bound for a diff split over processes, before any result is
sent back).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import measure  # noqa: E402  (benchmarks/run.py: wall time and tree RSS)

DATA = HERE / "data"
DEFAULT = DATA / "h100_google_owlv2-large-patch14-ensemble_1000mb.json"

SEQUENTIAL = """
import sys
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.diff import diff_sessions
from kinetoscope.parser import load
from kinetoscope.present.report_diff import diff_document, summary_json
base = TraceSession(load(sys.argv[1], write_cache=False))
new = TraceSession(load(sys.argv[2], write_cache=False, release=True))
summary_json(diff_document(diff_sessions(base, new), sys.argv[1], sys.argv[2]))
"""

ONE_SIDE = """
import sys
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.diff import prepare
from kinetoscope.parser import load
prepare(TraceSession(load(sys.argv[1], write_cache=False, release=True)))
"""

TWO_PROCESSES = """
import subprocess, sys
procs = [subprocess.Popen([sys.executable, "-c", sys.argv[1], p]) for p in sys.argv[2:]]
sys.exit(max(p.wait() for p in procs))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", nargs="?", default=str(DEFAULT))
    parser.add_argument("new", nargs="?")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--like-for-like", action="store_true")
    args = parser.parse_args()
    new = args.new or (args.base + ".gz" if not args.base.endswith(".gz") else args.base)
    for path in (args.base, new):
        if not Path(path).exists():
            sys.exit(f"missing {path}: run benchmarks/run.py once to make the 1 GB trace")
    if args.like_for_like:
        pairs = [
            (args.base, _copy_of(args.base)),
            (new, _copy_of(new)),
            (args.base, new),
        ]
        for base, other in pairs:
            bench(base, other, args.runs, args.variants)
            print()
        return
    bench(args.base, new, args.runs, args.variants)


def _copy_of(path: str) -> str:
    """A copy of `path` beside it (made once): the same content in another file."""
    source = Path(path)
    name = source.name.replace(".json", ".copy.json", 1)
    copy = source.with_name(name)
    if not copy.exists() or copy.stat().st_size != source.stat().st_size:
        shutil.copyfile(source, copy)
    return str(copy)


def bench(base: str, new: str, runs: int, variants: bool) -> None:
    """Time summary of `base` and diff of `base` and `new`, interleaved, and print the table."""

    py = sys.executable
    tasks = {
        "summary --json (BASE)": [py, "-m", "kinetoscope", "summary", base, "--json"],
        "diff --json (BASE, NEW)": [py, "-m", "kinetoscope", "diff", base, new, "--json"],
    }
    if variants:
        tasks["diff, loads then analyses in sequence"] = [py, "-c", SEQUENTIAL, base, new]
        tasks["two processes, one trace each (no diff)"] = [
            py, "-c", TWO_PROCESSES, ONE_SIDE, base, new,
        ]  # fmt: skip

    cache = Path(tempfile.mkdtemp(prefix="kinetoscope-bench-cache-"))
    env = dict(os.environ, KINETOSCOPE_CACHE_DIR=str(cache))
    times: dict[str, list[float]] = {name: [] for name in tasks}
    cpus: dict[str, list[float]] = {name: [] for name in tasks}
    peaks: dict[str, int] = dict.fromkeys(tasks, 0)
    try:
        for run in range(runs):
            for name, argv in tasks.items():  # interleaved: drift hits every row alike
                shutil.rmtree(cache, ignore_errors=True)
                cache.mkdir()
                before = _children_cpu()
                wall, peak = measure(argv, env)
                cpu = _children_cpu() - before
                times[name].append(wall)
                cpus[name].append(cpu)
                peaks[name] = max(peaks[name], peak)
                print(
                    f"run {run + 1}: {name}: {wall:.2f} s, CPU {cpu:.2f} s, {peak} MiB, "
                    f"load average {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                )
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    print(f"BASE {Path(base).name}\nNEW  {Path(new).name}\n")
    print("| what | median time (runs) | median CPU, user + sys (runs) | peak RSS (process tree) |")
    print("|---|---:|---:|---:|")
    for name in tasks:
        runs = " ".join(f"{t:.2f}" for t in times[name])
        cpu_runs = " ".join(f"{t:.2f}" for t in cpus[name])
        print(
            f"| {name} | {statistics.median(times[name]):.2f} s ({runs}) "
            f"| {statistics.median(cpus[name]):.2f} s ({cpu_runs}) | {peaks[name]} MiB |"
        )
    for label, values in (("time", times), ("CPU", cpus)):
        ratio = statistics.median(values["diff --json (BASE, NEW)"]) / statistics.median(
            values["summary --json (BASE)"]
        )
        verdict = "met" if ratio < 1.5 else "NOT met"
        print(f"\ndiff / summary, {label}: {ratio:.2f}x (target: under 1.5x: {verdict})")


def _children_cpu() -> float:
    """User + system seconds of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
