"""The load's CPU time, and the conversion's own per MB: what the load's conversion is measured by.

    python benchmarks/bench_load_cpu.py [TRACE] [--runs 3] [--target-mb 150]

By default TRACE is a scaled copy of a corpus trace (benchmarks/run.py's `ensure_trace`,
`--target-mb` MB, plain JSON, made once under benchmarks/data). On a shared machine wall times
are noise; CPU time (user + sys) much less so. Each run, in fresh processes with an empty model
cache:

- `load, 1 process` and `load, 2 workers`: `kinetoscope.parser.load` with `workers=1` and `2`,
  the CPU time of the process and of its children (the worker server and its workers, stopped
  and waited for before it is read), from the call to its return;
- `decode` and `convert_run`: every run of about 4 MB of the events array decoded by the
  parser's decoder and converted at once (as a worker does it), garbage collection off: the CPU
  time of each, per MB.

It prints one line per run and the medians.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import ensure_trace  # noqa: E402

REPO = HERE.parent
SOURCE = (
    REPO.parent
    / "shared"
    / "corpus"
    / "tracelens"
    / "h100_google_owlv2-large-patch14-ensemble__1016001.json.gz"
)

LOAD = """
import json, resource, sys

def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime)

if __name__ == "__main__":
    from kinetoscope.parser import load
    own0, children0 = cpu()
    trace = load(sys.argv[1], use_cache=False, workers=int(sys.argv[2]), release=True)
    own1, children1 = cpu()
    print(json.dumps({"own": own1 - own0, "children": children1 - children0,
                      "events": trace.n_events, "workers": trace.workers}))
"""

CONVERT = """
import gc, json, sys, time
from kinetoscope.parser.convert import convert_run
from kinetoscope.parser.events import EVENTS_DECODER

data = open(sys.argv[1], "rb").read()
start = data.find(b"traceEvents")
pos = data.index(b"{", start if start >= 0 else 0)
runs = []
while True:
    end = data.find(b"},", pos + (4 << 20))
    if end < 0:
        break
    runs.append(b"[" + data[pos : end + 1] + b"]")
    pos = data.index(b"{", end + 1)
gc.disable()
decode = convert = 0.0
for text in runs:
    t0 = time.process_time()
    events = EVENTS_DECODER.decode(text)
    t1 = time.process_time()
    convert_run(events)
    t2 = time.process_time()
    decode += t1 - t0
    convert += t2 - t1
    del events
print(json.dumps({"decode": decode, "convert": convert, "bytes": sum(map(len, runs))}))
"""


def run(script: str, *args: str, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, check=True, capture_output=True
    ).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target-mb", type=float, default=150)
    args = parser.parse_args()
    path = args.trace
    if path is None:
        path, _ = ensure_trace(SOURCE, args.target_mb, gzipped=False)
    mb = path.stat().st_size / 1e6
    rows: dict[str, list[float]] = {}
    events = 0
    for number in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "KINETOSCOPE_CACHE_DIR": cache}
            line = []
            for workers in (1, 2):
                out = run(LOAD, str(path), str(workers), env=env)
                events = out["events"]
                total = out["own"] + out["children"]
                key = "load, 1 process" if workers == 1 else "load, 2 workers"
                rows.setdefault(key, []).append(total)
                line.append(f"{key} {total:.2f} s CPU ({out['own']:.2f} in the loading process)")
            out = run(CONVERT, str(path), env=env)
            run_mb = out["bytes"] / 1e6
            for key in ("decode", "convert"):
                rows.setdefault(f"{key} ms/MB", []).append(out[key] / run_mb * 1e3)
            line.append(
                f"decode {out['decode'] / run_mb * 1e3:.2f} ms/MB, "
                f"convert_run {out['convert'] / run_mb * 1e3:.2f} ms/MB"
            )
            print(f"run {number}: " + "; ".join(line), flush=True)
    print(f"{path.name}: {mb:,.0f} MB, {events:,} events; medians of {args.runs} runs")
    for key, values in rows.items():
        unit = "" if "ms/MB" in key else " s CPU"
        per_mb = "" if "ms/MB" in key else f" ({statistics.median(values) / mb * 1e3:.2f} ms/MB)"
        print(f"  {key:<18}{statistics.median(values):>7.2f}{unit}{per_mb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
