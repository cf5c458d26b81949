"""Load time of a trace with scattered Kineto defects against the same trace without them.

    python benchmarks/bench_damaged.py [--events 250000] [--every 50] [--runs 3] [--workers 1]

Writes two traces of `--events` events (CPU operators with shapes, runtime launches, kernels)
under benchmarks/data/ (not tracked): a clean one, and a damaged copy in which every
`--every`-th event holds a defect that real Kineto traces have: a bare `NaN` or `Infinity`, or
a raw control character (a newline, a tab, \\x01) inside a string. Each load runs in a fresh
Python process without the model cache; the table gives the median wall time over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

# Defects of real traces: bare NaN/Infinity in numbers, raw control characters in strings.
DEFECTS = (
    (b'"dur": 3', b'"dur": NaN'),
    (b'"Sequence number": 11', b'"Sequence number": NaN'),
    (b'"name": "aten::', b'"name": "\x01aten::'),
    (b'"name": "aten::', b'"name": "aten::\n'),
    (b'"Fwd thread id": 0', b'"Fwd thread id": Infinity'),
    (b'"Call stack": "', b'"Call stack": "a.py(1)\tb.py(2);'),
)


def event(i: int) -> bytes:
    """The i-th event: a CPU operator, its launch, or its kernel, as a profiler writes them."""
    step = i // 3
    ts = 1_000_000 + step * 20
    kind = i % 3
    if kind == 0:
        doc = {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{step % 97}",
            "pid": 4000,
            "tid": 4000,
            "ts": ts,
            "dur": 3,
            "args": {
                "External id": step,
                "Sequence number": 11,
                "Fwd thread id": 0,
                "Call stack": "",
                "Input Dims": [[64, 128, step % 7 + 1], [128]],
                "Input type": ["float", "float"],
            },
        }
    elif kind == 1:
        doc = {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 4000,
            "tid": 4000,
            "ts": ts + 1,
            "dur": 3,
            "args": {"External id": step, "correlation": step, "cbid": 211},
        }
    else:
        doc = {
            "ph": "X",
            "cat": "kernel",
            "name": f"void gemm_kernel<{step % 13}>(float*, float const*)",
            "pid": 0,
            "tid": 7,
            "ts": ts + 5,
            "dur": 3,
            "args": {
                "External id": step,
                "correlation": step,
                "device": 0,
                "stream": 7,
                "grid": [128, 1, 1],
                "block": [256, 1, 1],
                "registers per thread": 96,
            },
        }
    return json.dumps(doc).encode()


def damage(text: bytes, n: int) -> bytes:
    """One defect into the event, the first of DEFECTS (from the n-th on) that fits it."""
    for k in range(len(DEFECTS)):
        old, new = DEFECTS[(n + k) % len(DEFECTS)]
        if old in text:
            return text.replace(old, new, 1)
    return text


def write_traces(events: int, every: int) -> tuple[Path, Path]:
    DATA.mkdir(parents=True, exist_ok=True)
    clean = DATA / f"kineto_{events}_clean.json"
    damaged = DATA / f"kineto_{events}_damaged_every{every}.json"
    if clean.exists() and damaged.exists():
        return clean, damaged
    head = b'{"schemaVersion": 1, "traceEvents": [\n'
    tail = b'\n], "displayTimeUnit": "ms"}\n'
    with open(clean, "wb") as plain, open(damaged, "wb") as broken:
        plain.write(head)
        broken.write(head)
        for i in range(events):
            text = event(i)
            sep = b",\n" if i else b""
            plain.write(sep + text)
            broken.write(sep + (damage(text, i // every) if i % every == every - 1 else text))
        plain.write(tail)
        broken.write(tail)
    return clean, damaged


def time_load(path: Path, workers: int, env: dict[str, str]) -> tuple[float, int, int]:
    """(seconds, events, warnings) of one load in a fresh process."""
    code = (
        "import sys, time\n"
        "from kinetoscope.parser import load\n"
        "t0 = time.perf_counter()\n"
        f"t = load({str(path)!r}, use_cache=False, workers={workers})\n"
        "print(time.perf_counter() - t0, t.n_events, len(t.warnings))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    seconds, n_events, n_warnings = out.stdout.split()
    return float(seconds), int(n_events), int(n_warnings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=250_000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    clean, damaged = write_traces(args.events, args.every)
    cache_dir = tempfile.mkdtemp(prefix="kinetoscope-bench-cache-")
    env = dict(os.environ, KINETOSCOPE_CACHE_DIR=cache_dir)
    rows = []
    for label, path in (("clean", clean), (f"damaged (every {args.every}th event)", damaged)):
        walls = []
        for _ in range(args.runs):
            start = time.perf_counter()
            seconds, n_events, n_warnings = time_load(path, args.workers, env)
            walls.append(seconds)
            print(
                f"{label}: {seconds:.2f} s ({time.perf_counter() - start:.2f} s with start-up)",
                file=sys.stderr,
            )
        rows.append((label, path, statistics.median(walls), walls, n_events))
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}; "
        f"workers={args.workers}."
    )
    print("| trace | size | events | median load (runs) |")
    print("|---|---:|---:|---:|")
    for label, path, median, walls, n_events in rows:
        runs = " ".join(f"{w:.2f}" for w in walls)
        size = path.stat().st_size / 1e6
        print(f"| {label} | {size:.0f} MB | {n_events:,} | {median:.2f} s ({runs}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
