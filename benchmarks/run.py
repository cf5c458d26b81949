"""Load, analysis and reopen benchmarks on a 1 GB trace, with the baselines, in one run.

    python benchmarks/run.py [--runs 3] [--source CORPUS_TRACE] [--target-mb 1000] [--markdown]

Makes the big trace with the shared `scale_trace.py` tool if it is missing (under
benchmarks/data/, not tracked), plus a gzip'd copy. Every measurement runs in a fresh Python
process; the table gives the median wall time over the runs and the peak resident memory of the
whole process tree (the process, its forkserver and its worker processes, summed, sampled every
20 ms). The viewer rows give the time from process start to the first drawn timeline frame
(benchmarks/first_frame.py), with an empty cache and with the model cached. The render benchmark (benchmarks/bench_render.py) is run last when it exists.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
DEFAULT_SOURCE = (
    REPO.parent
    / "shared"
    / "corpus"
    / "tracelens"
    / "h100_google_owlv2-large-patch14-ensemble__1016001.json.gz"
)
SCALER = REPO.parent / "shared" / "tools" / "scale_trace.py"
PACKAGE_DIRS = ("kinetoscope", "parser", "analysis", "tui", "capture")

TASKS = {
    "json.load": ("import json; json.load(open({path!r}, 'rb'))"),
    "msgspec one-shot (typed structs)": (
        # The same fields the parser decodes, in one decode of the whole file.
        "import msgspec\n"
        "from kinetoscope.parser.events import Event\n"
        "class D(msgspec.Struct):\n"
        "    traceEvents: list[Event] = []\n"
        "msgspec.json.decode(open({path!r}, 'rb').read(), type=D)"
    ),
    "kinetoscope load, 1 process": (
        "from kinetoscope.parser import load; load({path!r}, use_cache=False, workers=1)"
    ),
    "kinetoscope load": ("from kinetoscope.parser import load; load({path!r}, use_cache=False)"),
    "kinetoscope load .json.gz": (
        "from kinetoscope.parser import load; load({gz!r}, use_cache=False)"
    ),
    "kinetoscope summary --json": "CLI",
    "kinetoscope reopen (cached model)": (
        "from kinetoscope.parser import load; t = load({path!r}); "
        "assert getattr(t, 'from_cache', False), 'cache was not used'"
    ),
    "viewer: first frame, cold": "FIRST_FRAME",
    "viewer: first frame, reopen": "FIRST_FRAME",
}


def tree_rss_kb(pid: int) -> int:
    """Resident memory of `pid` and all its descendants, in KiB."""
    total = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            with open(f"/proc/{current}/task/{current}/children") as handle:
                stack.extend(int(c) for c in handle.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def measure(argv: list[str], env: dict[str, str], reported: bool = False) -> tuple[float, int]:
    """(seconds, peak tree RSS in MiB) of one command: its wall time, or with `reported` the
    number it prints (the first-frame script reports its own time to the first frame)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.PIPE)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss_kb(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"{argv} failed: {err[-2000:]}")
        out.seek(0)
        if reported:
            wall = float(out.read().split()[-1])
    return wall, peak // 1024


def ensure_trace(source: Path, target_mb: float) -> tuple[Path, Path]:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{source.name.split('.')[0][:40]}_{int(target_mb)}mb.json"
    if not path.exists():
        print(f"making {path.name} from {source.name} ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, str(SCALER), str(source), str(path), "--target-mb", str(target_mb)],
            check=True,
        )
    gz = path.with_suffix(".json.gz")
    if not gz.exists():
        print(f"compressing to {gz.name} ...", file=sys.stderr)
        with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
    return path, gz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--target-mb", type=float, default=1000)
    parser.add_argument("--only", nargs="*", help="names of tasks to run (default: all)")
    parser.add_argument("--skip-baselines", action="store_true")
    args = parser.parse_args()

    path, gz = ensure_trace(args.source, args.target_mb)
    cache_dir = Path(tempfile.mkdtemp(prefix="kinetoscope-bench-cache-"))
    env = dict(os.environ, KINETOSCOPE_CACHE_DIR=str(cache_dir))
    # Python's bytecode as an installed package has it: compiled once here, then used (an
    # environment that forbids writing it would otherwise recompile every module each run).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *(str(REPO / d) for d in PACKAGE_DIRS)],
        env=env,
        check=False,
    )
    rows = []
    try:
        for name, code in TASKS.items():
            if args.only and name not in args.only:
                continue
            if args.skip_baselines and not name.startswith("kinetoscope"):
                continue
            walls, peaks = [], []
            for _ in range(args.runs):
                if name == "kinetoscope summary --json" or name.endswith("cold"):
                    shutil.rmtree(cache_dir, ignore_errors=True)
                if name == "kinetoscope summary --json":
                    argv = [sys.executable, "-m", "kinetoscope", "summary", str(path), "--json"]
                elif code == "FIRST_FRAME":
                    argv = [sys.executable, str(HERE / "first_frame.py"), str(path)]
                else:
                    argv = [sys.executable, "-c", code.format(path=str(path), gz=str(gz))]
                if name.startswith("kinetoscope reopen"):
                    # Make sure the cache entry exists (a cold load writes it), then time reopen.
                    subprocess.run(
                        [
                            sys.executable,
                            "-c",
                            f"from kinetoscope.parser import load; load({str(path)!r})",
                        ],
                        env=env,
                        check=True,
                    )
                elif name.endswith("reopen"):
                    # As after a first session in the viewer: the model and the view cached.
                    subprocess.run(
                        [sys.executable, str(HERE / "first_frame.py"), str(path), "--write-caches"],
                        env=env,
                        check=True,
                        stdout=subprocess.DEVNULL,
                    )
                wall, peak = measure(argv, env, reported=code == "FIRST_FRAME")
                walls.append(wall)
                peaks.append(peak)
            rows.append((name, statistics.median(walls), max(peaks), walls))
            print(
                f"{name:40s} {statistics.median(walls):7.2f} s  {max(peaks):6d} MiB  "
                f"runs {' '.join(f'{w:.2f}' for w in walls)}",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)

    size_mb = path.stat().st_size / 1e6
    gz_mb = gz.stat().st_size / 1e6
    print(
        f"Trace: `{path.name}`, {size_mb:.0f} MB JSON ({gz_mb:.0f} MB gzip'd), made by "
        f"`scale_trace.py` from `{args.source.name}`."
    )
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}."
    )
    print()
    print("| what | median time | peak RSS (process tree) |")
    print("|---|---:|---:|")
    for name, wall, peak, _walls in rows:
        print(f"| {name} | {wall:.2f} s | {peak} MiB |")
    render = HERE / "bench_render.py"
    if render.exists() and not args.only:
        print()
        sys.stdout.flush()
        subprocess.run([sys.executable, str(render), str(path)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
