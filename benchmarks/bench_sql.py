"""The Python API and `kinetoscope sql` on a big trace: what opening for SQL costs over a load.

    python benchmarks/bench_sql.py [TRACE] [--runs 3] [--target-mb 1000]

By default TRACE is a scaled copy of a corpus trace (benchmarks/run.py's `ensure_trace`,
`--target-mb` MB, made once under benchmarks/data). Each run is a fresh process with an empty
model cache that times, one after another:

- `load`: `kinetoscope.parser.load` alone (the model, no analysis), in a process of its own;
- `open`: `kinetoscope.open(path)` (the same load, through the API);
- `kernels_df`: `t.kernels().to_pandas()` (the kernel analysis and the DataFrame);
- `sql_ready`: the `slice` table handed to DuckDB (the nesting, the Arrow table, registration);
- `group_by`: `SELECT name, count(*), sum(dur) FROM slice GROUP BY name` on it;
- `kernel_sum`: `SELECT name, sum(dur) FROM kernel GROUP BY name` (the kernel table made too);

and, in a third process, `slices_df`: `kinetoscope.open(path)` then `t.slices().to_pandas()`
(the nesting and the raw table as a DataFrame: every column gathered, as pandas needs).

The table gives the median of each and the peak resident memory of each process tree (the
API's process, workers included). Needs the sql and pandas extras.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import ensure_trace, measure_output  # noqa: E402  (wall time and tree RSS)

REPO = HERE.parent
SOURCE = (
    REPO.parent
    / "shared"
    / "corpus"
    / "tracelens"
    / "h100_google_owlv2-large-patch14-ensemble__1016001.json.gz"
)

LOAD_ONLY = """
import json, sys, time
from kinetoscope.parser import load
t0 = time.perf_counter()
trace = load(sys.argv[1], write_cache=False)
print(json.dumps({"load": time.perf_counter() - t0, "events": trace.n_events}))
"""

API = """
import json, sys, time
import kinetoscope
from kinetoscope.sql import Database
times = {}
t0 = time.perf_counter()
t = kinetoscope.open(sys.argv[1], use_cache=False)
times["open"] = time.perf_counter() - t0
t0 = time.perf_counter()
df = t.kernels().to_pandas()
times["kernels_df"] = time.perf_counter() - t0
db = Database.of_trace(t)
t0 = time.perf_counter()
db.register("slice")
times["sql_ready"] = time.perf_counter() - t0
t0 = time.perf_counter()
rows = db.query("SELECT name, count(*), sum(dur) FROM slice GROUP BY name")
times["group_by"] = time.perf_counter() - t0
t0 = time.perf_counter()
db.query("SELECT name, sum(dur) FROM kernel GROUP BY name")
times["kernel_sum"] = time.perf_counter() - t0
times["groups"] = len(rows)
times["slices"] = db.query("SELECT count(*) AS n FROM slice").value(0, "n")
print(json.dumps(times))
"""


SLICES_DF = """
import json, sys, time
import kinetoscope
t = kinetoscope.open(sys.argv[1], use_cache=False)
t0 = time.perf_counter()
df = t.slices().to_pandas()
print(json.dumps({"slices_df": time.perf_counter() - t0, "rows": len(df)}))
"""


def run(script: str, path: Path, env: dict[str, str]) -> tuple[dict, float, int]:
    wall, peak, out = measure_output([sys.executable, "-c", script, str(path)], env)
    return json.loads(out.decode().strip().splitlines()[-1]), wall, peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target-mb", type=float, default=1000)
    args = parser.parse_args()
    path = args.trace
    if path is None:
        path, _ = ensure_trace(SOURCE, args.target_mb, gzipped=False)
    size = path.stat().st_size / 1e6
    samples: dict[str, list[float]] = {}
    peaks: dict[str, list[int]] = {"load": [], "api": [], "slices_df": []}
    facts: dict = {}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "KINETOSCOPE_CACHE_DIR": cache}
            out, _, peak = run(LOAD_ONLY, path, env)
            samples.setdefault("load", []).append(out["load"])
            peaks["load"].append(peak)
            facts["events"] = out["events"]
            out, wall, peak = run(API, path, env)
            for key in ("open", "kernels_df", "sql_ready", "group_by", "kernel_sum"):
                samples.setdefault(key, []).append(out[key])
            samples.setdefault("api_process", []).append(wall)
            peaks["api"].append(peak)
            facts.update(groups=out["groups"], slices=out["slices"])
            out, _, peak = run(SLICES_DF, path, env)
            samples.setdefault("slices_df", []).append(out["slices_df"])
            peaks["slices_df"].append(peak)
    print(
        f"{path.name}: {size:,.0f} MB, {facts['events']:,} events, {facts['slices']:,} slices, "
        f"{facts['groups']:,} names; median of {args.runs} runs"
    )
    print(f"{'step':<14}{'seconds':>9}")
    for key, values in samples.items():
        print(f"{key:<14}{statistics.median(values):>9.2f}")
    load = statistics.median(peaks["load"])
    api = statistics.median(peaks["api"])
    frame = statistics.median(peaks["slices_df"])
    print(
        f"peak RSS: load alone {load} MiB, open + kernels() + SQL {api} MiB ({api / load:.2f}x), "
        f"open + slices().to_pandas() {frame} MiB ({frame / load:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
