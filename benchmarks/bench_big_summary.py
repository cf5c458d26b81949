"""Cold `summary --json` of one trace, run after run: wall time and the process tree's peak RSS,
optionally alternating with another checkout's interpreter (before and after on the same
machine at the same time).

    python benchmarks/bench_big_summary.py TRACE [--runs 3] [--other PYTHON]

Each run: the trace read through the page cache, an empty model cache, then `PYTHON -m
kinetoscope summary TRACE --json` in a fresh process, measured as benchmarks/run.py measures
(`measure`: wall time, and the peak resident memory of the process and every descendant,
sampled every 20 ms). `--other` is the interpreter of another checkout (a virtual environment
with that checkout installed editable); its runs alternate with this one's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import Sample, read_through, sampled  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--other", help="another checkout's Python, run alternately")
    args = parser.parse_args()
    pythons = [("this", sys.executable)] + ([("other", args.other)] if args.other else [])
    cache = Path(tempfile.mkdtemp(prefix="kinetoscope-bench-"))
    env = dict(os.environ, KINETOSCOPE_CACHE_DIR=str(cache))

    def before() -> None:
        shutil.rmtree(cache, ignore_errors=True)
        read_through(args.trace)

    runs: dict[str, list[Sample]] = {label: [] for label, _ in pythons}
    try:
        for _ in range(max(1, args.runs)):
            for label, python in pythons:
                argv = [python, "-m", "kinetoscope", "summary", str(args.trace), "--json"]
                runs[label].append(sampled(label, argv, env, 1, before=before))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for label, samples in runs.items():
        sample = Sample.merged(samples)
        print(
            f"{label}: median {sample.median:.2f} s (runs "
            + " ".join(f"{w:.2f}" for w in sample.walls)
            + f"), peaks {' '.join(str(s.peak_mib) for s in samples)} MiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
