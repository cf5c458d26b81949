"""The tiny job's start (issue 30, item 4): `summary DIR --json` of the corpus's 8-rank DLRM job
(8 x 50 KB of gzip), each run a fresh process, against the floor under it.

    python benchmarks/bench_tiny_job.py [--runs 7] [--other-checkout PATH]

Each round runs, one after another: `python -m kinetoscope summary DIR --json` (this checkout),
the same with `--other-checkout` first on PYTHONPATH (a copy of the package's tree laid out as
installed, for before/after on the same machine at the same load), `python -c pass` and
`python -c "import numpy"`. Reported: the median and the best of the wall time and of the CPU
time (user + system, from the child's rusage), and the median peak resident memory. The
interpreter is this one (`sys.executable`): run it with the real interpreter, not a shim that
starts another. Bytecode caches are used and written (as an installed package has them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TINY_JOB = REPO.parent / "shared" / "corpus" / "multirank" / "dlrm_8rank"


def run_once(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one child process."""
    began = time.perf_counter()
    child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit status {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--job", default=str(TINY_JOB))
    parser.add_argument("--other-checkout", metavar="PATH")
    options = parser.parse_args()
    if not Path(options.job).is_dir():
        raise SystemExit(f"no job folder at {options.job}")
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["KINETOSCOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="kinetoscope-bench-")
    cwd = tempfile.gettempdir()  # not the checkout: `-m` puts the working folder first
    summary = [sys.executable, "-m", "kinetoscope", "summary", options.job, "--json"]
    cases: dict[str, tuple[list[str], dict[str, str]]] = {"summary (this checkout)": (summary, env)}
    if options.other_checkout:
        other = dict(env, PYTHONPATH=options.other_checkout)
        cases["summary (other checkout)"] = (summary, other)
    cases["python -c pass"] = ([sys.executable, "-c", "pass"], env)
    cases['python -c "import numpy"'] = ([sys.executable, "-c", "import numpy"], env)
    for argv, case_env in cases.values():  # bytecode written, caches warm
        run_once(argv, case_env, cwd)
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    for _ in range(options.runs):
        for name, (argv, case_env) in cases.items():
            results[name].append(run_once(argv, case_env, cwd))
    print(f"{options.runs} rounds, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print("| what | wall median (best) | CPU median (best) | peak RSS |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        wall, cpu, rss = zip(*rows)
        print(
            f"| {name} | {statistics.median(wall):.3f} s ({min(wall):.3f}) | "
            f"{statistics.median(cpu):.3f} s ({min(cpu):.3f}) | {statistics.median(rss):.0f} MiB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
