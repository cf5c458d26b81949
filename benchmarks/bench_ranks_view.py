"""First frame of the job viewer's ranks overview: seconds from process start to the overview
drawn with every rank's row, cold and reopened.

    python benchmarks/bench_ranks_view.py                  # 8 x 125 MB and the corpus's 8 ranks
    python benchmarks/bench_ranks_view.py --runs 3 --jobs corpus
    python benchmarks/bench_ranks_view.py --child DIR      # one measurement, its seconds printed

Each measurement is a fresh Python process that starts the job viewer as `kinetoscope DIR`
does (kinetoscope/commands/view.py:run_job_view: the job's files found, the digesting worker
processes started, then Textual imported and `JobApp` run, here headless at `--size`), and
prints the time from its own start, read from /proc (so Python's start and every import
count), to when the ranks overview's matrix has drawn the row of every rank. The parent
samples the summed resident memory of the child's process tree (the viewer and its worker
processes) every 20 ms.

- cold: an empty model-cache folder (KINETOSCOPE_CACHE_DIR);
- reopened after the overview: the same folder after one earlier open that quit at the
  overview (which writes no cache: the files and Python's own files are warm, nothing else);
- reopened after the timeline: after one earlier open that also showed the job's timeline (`t`)
  until every rank was drawn, which writes each rank's model cache; the digests then read it.
  (The corpus's ranks are too small to be cached: this is the same as the one above.)

The operating system's file cache is not dropped: the rank files are read from memory in every
run when the machine has room for them. Inputs: benchmarks/bench_ranks.py's (made on demand
under benchmarks/data/ranks/), and ../shared/corpus/multirank/dlrm_8rank as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_ranks import CORPUS_JOB, big_job, run_sampled  # noqa: E402
from first_frame import process_age  # noqa: E402

# -- one measurement, in a fresh process --------------------------------------------------------


async def ranks_frame(folder: str, width: int, height: int, earlier: str | None) -> float:
    """Seconds from this process's start to the overview drawn with every rank's row; with
    `earlier` "timeline", then also open the job's timeline and wait until every rank is drawn
    and its model cache written (a session to reopen after)."""
    started = time.time() - process_age()
    # As run_job_view: the job's files found and the workers started before Textual.
    from kinetoscope.tui.data.job_loader import JobLoad

    load = JobLoad([folder], start=False)
    if load.error is not None:
        raise SystemExit(f"bench_ranks_view: {load.error}")
    load.start()
    from kinetoscope.tui.job.job_app import JobApp
    from kinetoscope.tui.job.job_ranks import RankMatrix, RanksScreen

    drawn: dict[int, float] = {}
    ranks = len(load.paths)
    render_line = RankMatrix.render_line

    def recording(matrix: RankMatrix, y: int):  # type: ignore[no-untyped-def]
        strip = render_line(matrix, y)
        index = int(matrix.scroll_offset.y) + y - 1
        if y > 0 and 0 <= index < len(matrix.rows) and index not in drawn:
            drawn[index] = time.time()
        return strip

    RankMatrix.render_line = recording  # type: ignore[method-assign]
    app = JobApp([folder], staged=True, load=load)
    async with app.run_test(size=(width, height)) as pilot:
        while len(drawn) < ranks:
            if app.exit_message is not None:
                raise SystemExit(f"bench_ranks_view: {app.exit_message}")
            await pilot.pause(0.005)
        elapsed = max(drawn.values()) - started
        assert isinstance(app.screen, RanksScreen)
        if earlier == "timeline":
            await timeline_shown(pilot, ranks)
        app.exit()
    return elapsed


async def timeline_shown(pilot, ranks: int) -> None:  # type: ignore[no-untyped-def]
    """`t`, then wait until every rank is drawn and the rank loads are done (each writes its
    rank's model cache after the rank's view is made)."""
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen

    app = pilot.app
    await pilot.press("t")
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        screen = app.screen
        if not isinstance(screen, JobTimelineScreen):
            continue
        loading = [w for w in app.workers if w.group == "ranks" and w.is_running]
        drawn = len(screen.views) + len(screen.errors) >= ranks
        if drawn and not loading and not screen.rank_views.busy:
            return
    raise SystemExit("bench_ranks_view: the job's timeline did not finish loading")


def child(args: argparse.Namespace) -> int:
    width, height = (int(v) for v in args.size.lower().split("x"))
    seconds = asyncio.run(ranks_frame(args.child, width, height, args.earlier))
    print(f"{seconds:.3f}")
    sys.stdout.flush()
    os._exit(0)  # the frame is what was measured; leave the workers' ends to the system


# -- the parent: runs and their numbers ---------------------------------------------------------


def measure(folder: Path, cache: str, size: str, earlier: str | None = None) -> tuple[float, int]:
    """(seconds to the overview, peak tree RSS bytes) of one child run with `cache`."""
    env = dict(os.environ, KINETOSCOPE_CACHE_DIR=cache)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(folder)]
    command += ["--size", size] + (["--earlier", earlier] if earlier else [])
    _seconds, peak, out, err, status = run_sampled(command, env)
    if status != 0:
        sys.exit(f"bench_ranks_view: {folder}: {err.decode(errors='replace')[-2000:]}")
    return float(out.split()[-1]), peak


def report(name: str, results: list[tuple[float, int]]) -> None:
    """A row: median, runs, peak memory, and the load average after them (a shared machine)."""
    times = [t for t, _ in results]
    peak = max(p for _, p in results) / 2**20
    runs = " ".join(f"{t:.2f}" for t in times)
    load = os.getloadavg()[0]
    print(
        f"  {name:28s} {statistics.median(times):6.2f} s  ({runs})  peak {peak:,.0f} MiB  "
        f"load {load:.2f}",
        flush=True,
    )


def bench(folder: Path, runs: int, size: str) -> None:
    files = [p for p in folder.iterdir() if p.is_file()]
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    print(f"{folder.name}: {len(files)} files, {megabytes:,.1f} MB", flush=True)
    cold = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            cold.append(measure(folder, cache, size))
    report("cold", cold)
    with tempfile.TemporaryDirectory() as cache:
        measure(folder, cache, size)  # the earlier open, quit at the overview
        report("reopened after the overview", [measure(folder, cache, size) for _ in range(runs)])
    with tempfile.TemporaryDirectory() as cache:
        measure(folder, cache, size, earlier="timeline")
        report("reopened after the timeline", [measure(folder, cache, size) for _ in range(runs)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (default 3)")
    parser.add_argument(
        "--jobs",
        default="big,corpus",
        help="big: 8 ranks x --rank-mb MB (bench_ranks.py's); corpus: the corpus's 8-rank job",
    )
    parser.add_argument("--rank-mb", type=float, default=125)
    parser.add_argument("--size", default="200x50", help="terminal size (default 200x50)")
    parser.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--earlier", choices=("timeline",), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    print(
        f"CPUs: {len(os.sched_getaffinity(0))}; median of {args.runs}; size {args.size}; "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for job in args.jobs.split(","):
        if job == "big":
            bench(big_job(8, args.rank_mb), args.runs, args.size)
        elif job == "corpus":
            if not CORPUS_JOB.is_dir():
                sys.exit(f"bench_ranks_view: no {CORPUS_JOB}")
            bench(CORPUS_JOB, args.runs, args.size)
        else:
            sys.exit(f"bench_ranks_view: unknown job {job!r} (big, corpus)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
