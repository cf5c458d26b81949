"""A job's summary with the per-rank step on a Dask cluster (`summary DIR --scheduler ...`).

The cluster is a LocalCluster of worker processes, the way a real cluster runs the step: the
function and its arguments are pickled to another process, which reads the trace by path and
sends the digest back; the merge stays in this process. The document must be the one the local
process pool gives. The input is a synthetic 4-rank NCCL job (so the test needs no corpus) in
which rank 2 computes 0.5 ms longer per step and so reaches every all-reduce last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS
from kinetoscope.capture.synthetic import TraceBuilder

REPO = Path(__file__).resolve().parents[1]
CORPUS_JOB = CORPUS / "multirank" / "dlrm_8rank"

RANKS = 4
SLOW_RANK = 2
STEPS = 3
STEP_US = 3000.0
EXTRA_US = 500.0  # the slow rank's longer compute per step


def write_job(folder: Path, ranks: int = RANKS, slow: int = SLOW_RANK) -> Path:
    """One file per rank: per step a compute kernel, then an all-reduce on a NCCL stream that
    starts when the rank arrives and ends at the same time on every rank."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        builder = TraceBuilder()
        builder.add_extra("distributedInfo", {"backend": "nccl", "rank": rank, "world_size": ranks})
        for step in range(STEPS):
            t0 = step * STEP_US
            builder.add_step(step + 1, t0, STEP_US - 10)
            compute = 1000.0 + (EXTRA_US if rank == slow else 0.0) + 7 * rank
            launch = builder.add_runtime("cudaLaunchKernel", t0 + 10, 5)
            builder.add_kernel(7, t0 + 20, compute, name="gemm_kernel", launched_by=launch)
            comm = builder.add_runtime("cudaLaunchKernel", t0 + 40, 5)
            arrive = t0 + 20 + compute
            done = t0 + 20 + 1000.0 + EXTRA_US + 7 * ranks + 200.0
            builder.add_kernel(
                20,
                arrive,
                done - arrive,
                name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                launched_by=comm,
            )
        builder.write(folder / f"rank{rank}.pt.trace.json.gz")
    return folder


def without_timings(value: Any) -> Any:
    """The document less its wall-clock timings (`digest_seconds`), which no two runs share."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not k.endswith("seconds")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def job_document_with(folder: Path, executor: Any = None, workers: int | None = None) -> dict:
    from kinetoscope.analysis.job import analyze_job, job_document, map_ranks
    from kinetoscope.parser.ranks import discover

    files = discover([str(folder)])
    digests = map_ranks([f.path for f in files.files], executor=executor, workers=workers)
    return job_document(analyze_job(digests, files))


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster of two worker processes, one thread each, and its client."""
    distributed = pytest.importorskip("dask.distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as local,
        distributed.Client(local) as client,
    ):
        yield client


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def run_kinetoscope(
    args: list[str], cwd: Path, timeout: float = 180
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_local_cluster_gives_the_local_pool_document(tmp_path: Path, cluster) -> None:
    from kinetoscope.commands.cluster import DaskExecutor

    folder = write_job(tmp_path / "job")
    local = job_document_with(folder, workers=2)
    on_cluster = job_document_with(folder, executor=DaskExecutor(cluster))
    assert without_timings(on_cluster) == without_timings(local)
    # ... and that document is about something: 4 ranks, matched all-reduces, rank 2 last.
    assert [r["rank"] for r in local["ranks"]] == list(range(RANKS))
    assert local["matching"]["matched"] == STEPS
    assert local["straggler"]["rank"] == SLOW_RANK
    # The digests were made in the cluster's worker processes, not here.
    pids = cluster.run(os.getpid)
    assert len(pids) == 2 and os.getpid() not in pids.values()


def test_relative_paths_reach_the_workers_absolute(tmp_path: Path, cluster, monkeypatch) -> None:
    """The workers run in another folder: a relative path is made absolute before it leaves."""
    from kinetoscope.analysis.job import digest_rank

    from kinetoscope.commands.cluster import DaskExecutor

    write_job(tmp_path / "job", ranks=2)
    monkeypatch.chdir(tmp_path)
    executor = DaskExecutor(cluster)
    digest = executor.submit(digest_rank, os.path.join("job", "rank1.pt.trace.json.gz")).result()
    assert digest.error is None and digest.header_rank == 1
    assert digest.path == str(tmp_path / "job" / "rank1.pt.trace.json.gz")
    assert [d.header_rank for d in executor.map(digest_rank, ["job/rank0.pt.trace.json.gz"])] == [0]


def test_worker_processes_decode_in_their_own_process(cluster) -> None:
    """Dask's worker processes are daemonic and may not start processes of their own: a big
    file's parallel decoding (`load_workers` > 1) would fail there, so it is turned off."""
    import dataclasses

    from kinetoscope.analysis.job import DigestOptions

    from kinetoscope.commands.cluster import DaskExecutor

    asked = DigestOptions(load_workers=4, use_cache=False)
    # dataclasses.replace(x) returns a copy of x: what the function on the worker was given.
    given = DaskExecutor(cluster).submit(dataclasses.replace, asked).result()
    assert given == DigestOptions(load_workers=1, use_cache=False)


@pytest.mark.corpus
def test_local_cluster_on_the_8_rank_corpus_job(cluster) -> None:
    if not CORPUS_JOB.is_dir():
        pytest.skip("../shared/corpus is not here")
    from kinetoscope.commands.cluster import DaskExecutor

    local = job_document_with(CORPUS_JOB, workers=2)
    on_cluster = job_document_with(CORPUS_JOB, executor=DaskExecutor(cluster))
    assert without_timings(on_cluster) == without_timings(local)
    assert len(local["ranks"]) == 8 and local["straggler"] is not None


def test_summary_scheduler_local_prints_the_same_json(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    write_job(tmp_path / "job")
    pool = run_kinetoscope(["summary", "job", "--json"], tmp_path)
    assert pool.returncode == 0, pool.stderr
    dask = run_kinetoscope(["summary", "job", "--json", "--scheduler", "local:2"], tmp_path)
    assert dask.returncode == 0, dask.stderr
    assert without_timings(json.loads(dask.stdout)) == without_timings(json.loads(pool.stdout))
    assert json.loads(dask.stdout)["ranks"][0]["path"] == os.path.join(
        "job", "rank0.pt.trace.json.gz"
    )


def test_scheduler_errors_are_one_line(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("dask.distributed")
    import kinetoscope.commands.cluster as cluster_module
    from kinetoscope.commands.cli import main

    write_job(tmp_path / "job", ranks=2)
    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT", "1s")
    for address, said in [
        ("tcp://127.0.0.1:9", "kinetoscope: cannot use the Dask scheduler tcp://127.0.0.1:9: "),
        ("local:0", "kinetoscope: --scheduler local:0: use local or local:N with N 1 or more"),
    ]:
        lines: list[str] = []
        monkeypatch.setattr(sys, "stderr", _Lines(lines))
        assert main(["summary", str(tmp_path / "job"), "--scheduler", address]) == 1
        text = "".join(lines).strip()
        assert "\n" not in text and text.startswith(said), text


class _Lines:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def write(self, text: str) -> int:
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_without_dask_the_scheduler_option_names_the_extra(tmp_path: Path) -> None:
    write_job(tmp_path / "job", ranks=2)
    code = (
        "import sys\n"
        "sys.modules['dask'] = None  # makes `import dask...` fail, as when it is not installed\n"
        "from kinetoscope.commands.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "summary", "job", "--json", "--scheduler", "local"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "kinetoscope: --scheduler needs Dask: pip install 'kinetoscope[distributed]'"
    ]
