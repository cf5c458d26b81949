"""The conversion of decoded events to columns, this checkout against another, in one process.

    python benchmarks/bench_convert_ab.py OTHER_CHECKOUT [TRACE] [--mb 150] [--runs 3]

Both checkouts' parser packages are copied into a temporary folder under two names and imported
side by side, so that both run on the same machine state: every run of about 4 MB of events
from the first `--mb` MB of TRACE (by default the 1 GB trace benchmarks/run.py makes) is decoded
by each version's decoder and converted by its `convert_run`, the two alternating, garbage
collection off; for each run the best of `--runs` times is kept. Prints decode and convert time
per MB for both. On a busy machine the ratio is still fair (both suffer alike); the absolute
numbers are not.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT = HERE / "data" / "h100_google_owlv2-large-patch14-ensemble_1000mb.json"


def runs_of(path: Path, mb: int) -> list[bytes]:
    """The events of the first `mb` MB, cut after an event about every 4 MB, each as an array."""
    with open(path, "rb") as handle:
        data = handle.read(mb << 20)
    pos = data.index(b"{", data.find(b"traceEvents"))
    runs = []
    while True:
        end = data.find(b"},", pos + (4 << 20))
        if end < 0:
            return runs
        runs.append(b"[" + data[pos : end + 1] + b"]")
        pos = data.index(b"{", end + 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (its parser/ folder)")
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--mb", type=int, default=150)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kinetoscope-convert-ab-"))
    try:
        for name, checkout in (("other_parser", args.other), ("this_parser", HERE.parent)):
            shutil.copytree(
                checkout / "parser", folder / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        sys.path.insert(0, str(folder))
        versions = {
            name: (
                importlib.import_module(f"{name}.convert"),
                importlib.import_module(f"{name}.events"),
            )
            for name in ("other_parser", "this_parser")
        }
        runs = runs_of(args.trace, args.mb)
        gc.disable()
        totals = {name: [0.0, 0.0] for name in versions}
        for text in runs:
            events = {name: ev.EVENTS_DECODER.decode(text) for name, (_, ev) in versions.items()}
            best = {name: [float("inf"), float("inf")] for name in versions}
            for turn in range(args.runs):
                order = list(versions) if turn % 2 else list(reversed(versions))
                for name in order:
                    convert, ev = versions[name]
                    t0 = time.perf_counter()
                    decoded = ev.EVENTS_DECODER.decode(text)
                    t1 = time.perf_counter()
                    del decoded
                    convert.convert_run(events[name])
                    t2 = time.perf_counter()
                    best[name][0] = min(best[name][0], t1 - t0)
                    best[name][1] = min(best[name][1], t2 - t1)
            for name in versions:
                totals[name][0] += best[name][0]
                totals[name][1] += best[name][1]
        mb = sum(map(len, runs)) / 1e6
        print(f"{args.trace.name}: the first {mb:.0f} MB in {len(runs)} runs, best of {args.runs}")
        for name, label in (("other_parser", str(args.other)), ("this_parser", "this checkout")):
            decode, convert = totals[name]
            print(
                f"  {label}: decode {decode / mb * 1e3:.3f} ms per MB, "
                f"convert {convert / mb * 1e3:.3f} ms per MB"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
