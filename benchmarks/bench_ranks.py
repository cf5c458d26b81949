"""Multi-rank summary: N ranks x M MB against one file of N x M MB, and time per rank by count.

    python benchmarks/bench_ranks.py                      # 8 x 125 MB vs 1000 MB; 8, 32, 128 ranks
    python benchmarks/bench_ranks.py --rank-mb 10 --counts 8,32   # a small first try

Inputs are made on demand under benchmarks/data/ranks/ (gitignored) and reused:
- `big_{ranks}x{mb}mb/`: rank r of the corpus's 8-rank job (../shared/corpus/multirank/
  dlrm_8rank) scaled with ../shared/tools/scale_trace.py to `--rank-mb` MB of plain JSON (as
  torch writes it), for r < `--ranks` (ranks past 8 reuse rank r mod 8's file, renumbered);
- `single_{mb}mb.json`: rank 0's file scaled to the job's total size (the same source, one
  file);
- `count_{n}/`: n small ranks (the corpus job's files as they are, renumbered 0..n-1 with
  world_size n), for each n of `--counts`.
Each measurement runs `python -m kinetoscope summary PATH --json` in a child process with an
empty model-cache folder (a cold start) and reports its wall time and the peak of the summed
resident memory of its process tree (the summary and its worker processes), sampled every 20 ms.
The best of `--runs` runs is shown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data" / "ranks"
CORPUS_JOB = REPO.parent / "shared" / "corpus" / "multirank" / "dlrm_8rank"
SCALE = REPO.parent / "shared" / "tools" / "scale_trace.py"
PAGE = os.sysconf("SC_PAGE_SIZE")


# inputs ----------------------------------------------------------------------------------------


def corpus_ranks() -> list[Path]:
    """The corpus job's files, by the worker number in their names."""
    files = sorted(CORPUS_JOB.glob("*.json.gz"))
    if not files:
        sys.exit(f"bench_ranks: no traces in {CORPUS_JOB}")

    def worker(path: Path) -> int:
        match = re.search(r"worker(\d+)", path.name)
        return int(match.group(1)) if match else 0

    return sorted(files, key=worker)


def renumbered(source: Path, target: Path, rank: int, world_size: int) -> None:
    """Copy a rank's trace with distributedInfo saying `rank` of `world_size`."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rt") as stream:
        document = json.load(stream)
    info = dict(document.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world_size)
    document["distributedInfo"] = info
    partial = target.with_name(target.name + ".partial")
    writer = gzip.open if target.name.endswith(".gz") else open
    with writer(partial, "wt") as stream:
        json.dump(document, stream)
    os.replace(partial, target)


def scaled(source: Path, target: Path, megabytes: float) -> None:
    """`scale_trace.py source target --target-mb megabytes`, unless target is there already."""
    if target.exists():
        return
    partial = target.with_name(target.name + ".partial.json")
    print(f"making {target.relative_to(REPO)} ({megabytes:g} MB)...", flush=True)
    subprocess.run(
        [sys.executable, str(SCALE), str(source), str(partial), "--target-mb", str(megabytes)],
        check=True,
    )
    os.replace(partial, target)


def big_job(ranks: int, rank_mb: float) -> Path:
    folder = DATA / f"big_{ranks}x{rank_mb:g}mb"
    folder.mkdir(parents=True, exist_ok=True)
    sources = corpus_ranks()
    with tempfile.TemporaryDirectory() as scratch:
        for rank in range(ranks):
            target = folder / f"rank{rank}.pt.trace.json"
            if target.exists():
                continue
            source = sources[rank % len(sources)]
            if rank >= len(sources) or ranks != len(sources):
                renamed = Path(scratch) / f"rank{rank}.json.gz"
                renumbered(source, renamed, rank, ranks)
                source = renamed
            scaled(source, target, rank_mb)
    return folder


def single_file(megabytes: float) -> Path:
    target = DATA / f"single_{megabytes:g}mb.json"
    DATA.mkdir(parents=True, exist_ok=True)
    scaled(corpus_ranks()[0], target, megabytes)
    return target


def small_job(count: int) -> Path:
    folder = DATA / f"count_{count}"
    folder.mkdir(parents=True, exist_ok=True)
    sources = corpus_ranks()
    for rank in range(count):
        target = folder / f"rank{rank}.pt.trace.json.gz"
        if not target.exists():
            renumbered(sources[rank % len(sources)], target, rank, count)
    return folder


# measuring -------------------------------------------------------------------------------------


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of `root` and all its descendants now (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        try:
            pid, ppid, pages = int(entry), int(fields[1]), int(fields[21])
        except (IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(pid)
        rss[pid] = pages * PAGE
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def run_sampled(command: list[str], env: dict[str, str]) -> tuple[float, int, bytes, bytes, int]:
    """(wall seconds, peak tree RSS bytes sampled every 20 ms, stdout, stderr, exit status) of
    one command."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss_bytes(process.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    return seconds, peak, out, err, process.returncode


def measure(path: Path, extra: list[str] | None = None) -> tuple[float, int, dict]:
    """(wall seconds, peak tree RSS bytes, the JSON document) of one cold `summary --json`."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, KINETOSCOPE_CACHE_DIR=cache)
        command = [sys.executable, "-m", "kinetoscope", "summary", str(path), "--json"]
        seconds, peak, out, err, status = run_sampled([*command, *(extra or [])], env)
    if status != 0:
        sys.exit(f"bench_ranks: summary {path} failed: {err.decode(errors='replace')[-2000:]}")
    return seconds, peak, json.loads(out)


def best_of(runs: int, path: Path, extra: list[str] | None = None) -> tuple[float, int, dict]:
    results = [measure(path, extra) for _ in range(max(1, runs))]
    seconds = min(r[0] for r in results)
    peak = max(r[1] for r in results)
    return seconds, peak, results[-1][2]


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8, help="ranks of the big job (default 8)")
    parser.add_argument("--rank-mb", type=float, default=125, help="MB per rank (default 125)")
    parser.add_argument(
        "--counts", default="8,32,128", help="small jobs' rank counts (default 8,32,128)"
    )
    parser.add_argument("--runs", type=int, default=1, help="runs per measurement (best shown)")
    parser.add_argument("--only", choices=("big", "counts"), help="run one part only")
    parser.add_argument("--workers", type=int, help="pass --workers N to summary")
    parser.add_argument("--clean", action="store_true", help="delete benchmarks/data/ranks first")
    parser.add_argument(
        "--prepare", action="store_true", help="only make the inputs (e.g. niced, ahead of time)"
    )
    args = parser.parse_args()
    if args.clean and DATA.exists():
        shutil.rmtree(DATA)
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    if args.prepare:
        if args.only in (None, "big"):
            single_file(round(_size(big_job(args.ranks, args.rank_mb)) / 1e6))
        if args.only in (None, "counts"):
            for count in counts:
                small_job(count)
        return
    extra = ["--workers", str(args.workers)] if args.workers else []
    print(f"CPUs: {len(os.sched_getaffinity(0))}; cold model cache; best of {args.runs}")

    if args.only in (None, "big"):
        job = big_job(args.ranks, args.rank_mb)
        single = single_file(round(_size(job) / 1e6))
        job_s, job_peak, document = best_of(args.runs, job, extra)
        one_s, one_peak, _ = best_of(args.runs, single)
        print(
            f"{args.ranks} ranks x {args.rank_mb:g} MB ({_size(job) / 1e6:,.0f} MB): "
            f"{job_s:7.2f} s, peak {job_peak / 2**20:,.0f} MiB (process tree); "
            f"{len(document['ranks'])} ranks, {document['matching']['matched']} collectives matched"
        )
        print(
            f"one file of {_size(single) / 1e6:,.0f} MB:          {one_s:7.2f} s, "
            f"peak {one_peak / 2**20:,.0f} MiB"
        )
        print(f"ratio job / one file: {job_s / one_s:.2f}x time, {job_peak / one_peak:.2f}x memory")

    if args.only in (None, "counts"):
        # ms/rank includes the fixed start (interpreter, imports, worker pool); the marginal
        # column, (this time - the previous count's) / (the ranks added), is what each rank adds;
        # digest ms is the median of the ranks' own digest times (in the document), which a busy
        # machine disturbs less than the wall time.
        print(
            f"{'ranks':>6} {'MB':>7} {'total s':>8} {'ms/rank':>8} {'marginal':>9} "
            f"{'digest ms':>10} {'peak MiB':>9} {'matched':>8}"
        )
        previous: tuple[int, float] | None = None
        for count in counts:
            folder = small_job(count)
            seconds, peak, document = best_of(args.runs, folder, extra)
            marginal = (
                f"{(seconds - previous[1]) / (count - previous[0]) * 1000:9.1f}"
                if previous is not None and count > previous[0]
                else f"{'':9}"
            )
            digests = sorted(r.get("digest_seconds") or 0.0 for r in document["ranks"])
            print(
                f"{count:6d} {_size(folder) / 1e6:7.1f} {seconds:8.2f} "
                f"{seconds / count * 1000:8.1f} {marginal} "
                f"{digests[len(digests) // 2] * 1000:10.1f} {peak / 2**20:9,.0f} "
                f"{document['matching']['matched']:8d}"
            )
            previous = (count, seconds)


if __name__ == "__main__":
    main()
