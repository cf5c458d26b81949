"""Time and peak memory of `kinetoscope export` on the big benchmark trace.

    python benchmarks/bench_export.py [TRACE] [--runs 1] [--case whole --case step ...]

Each case is one `kinetoscope export` process, cold (an empty model-cache folder): its wall
time and the peak resident memory of its process tree (sampled every 20 ms, as
benchmarks/run.py measures peak). The cases:

- `whole`: the whole trace (`--window ..`: from the first slice to the last event);
- `step`: `--step 6` (the owlv2 trace's 22 copies of one profiled step are all
  `ProfilerStep#6`, so this is most of the trace too, found by its steps);
- `window`: `--window +12s..+16s --clip` (three of the steps; the window docs/export.md quotes).

The output goes to a temporary folder (plain JSON, or gzip'd with `--gz`) and is removed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import measure_output  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
DEFAULT = DATA / "h100_google_owlv2-large-patch14-ensemble_1000mb.json"
CASES = {
    "whole": ["--window", ".."],
    "step": ["--step", "6"],
    "window": ["--window", "+12s..+16s", "--clip"],
}


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """(wall seconds, peak tree RSS in MiB, the command's output line) of one command."""
    wall, peak, out = measure_output(argv, env)
    return wall, peak, out.decode(errors="replace").strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--gz", action="store_true", help="write the export gzip'd")
    args = parser.parse_args()
    if not Path(args.trace).exists():
        print(f"no trace at {args.trace} (benchmarks/run.py makes it)", file=sys.stderr)
        return 1
    cases = args.case or ["whole", "step"]
    folder = Path(tempfile.mkdtemp(prefix="kinetoscope-bench-export-"))
    env = dict(os.environ, KINETOSCOPE_CACHE_DIR=str(folder / "cache"))
    out = folder / ("crop.json.gz" if args.gz else "crop.json")
    rows = []
    try:
        for case in cases:
            argv = [sys.executable, "-m", "kinetoscope", "export", args.trace, "-o", str(out)]
            argv += CASES[case]
            walls, peaks = [], []
            line = ""
            for _ in range(args.runs):
                shutil.rmtree(folder / "cache", ignore_errors=True)
                wall, peak, line = measure(argv, env)
                walls.append(wall)
                peaks.append(peak)
                print(f"{case:8s} {wall:7.2f} s  {peak:6d} MiB", file=sys.stderr)
            rows.append((case, " ".join(CASES[case]), statistics.median(walls), max(peaks), line))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"trace: {args.trace}, runs: {args.runs}, output: {out.name}")
    print("| case | arguments | median wall | peak RSS (process tree) |")
    print("|---|---|---:|---:|")
    for case, arguments, wall, peak, _line in rows:
        print(f"| {case} | `{arguments}` | {wall:.2f} s | {peak} MiB |")
    for case, _arguments, _wall, _peak, line in rows:
        print(f"{case}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
