"""The straggler's phases partition each step (issue 26): disjoint, adding up to the step's time,
so that a slow DataLoader, extra compute, a sleeping annotation and unprofiled host time each
get their own phase, on CPU-only ranks as on GPU ranks; checked on rank traces built here with
known truth, and on real 4-rank gloo jobs."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kinetoscope.analysis.job import (
    PHASES,
    analyze_job,
    job_document,
    map_ranks,
    phase_breakdown,
    straggler_reason,
)
from kinetoscope.analysis.phases import step_partition
from kinetoscope.analysis.session import TraceSession
from kinetoscope.parser import load
from kinetoscope.parser.ranks import discover

STEP = 20_000  # µs
EXTRA = 3_000  # µs the slow rank spends more in its phase, every step
STEPS = 3


def cpu_rank(
    rank: int, slow: int | None, kind: str, world: int = 4, jitter: random.Random | None = None
) -> dict:
    """A CPU-only gloo rank's trace. Each step: a DataLoader iteration (1 ms), an aten::mm
    (2 ms), then an all-reduce whose gloo thread runs until every rank has arrived (all ranks
    leave it together at 15 ms into the step). The slow rank spends EXTRA µs more before the
    all-reduce: in its DataLoader (`data_loading`), in aten::mm (`compute`), in a `## data ##`
    annotation with no op inside (`annotation`), or outside any op (`host_other`). `jitter`
    moves every phase of every rank by up to ±100 µs."""

    def noise() -> int:
        return jitter.randint(-100, 100) if jitter else 0

    extra = EXTRA if rank == slow else 0
    events: list[dict[str, Any]] = []
    for step in range(STEPS):
        t0 = step * STEP
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1,
             "tid": 1, "ts": t0, "dur": STEP}
        )  # fmt: skip
        t = t0 + 100
        loader = 1_000 + noise() + (extra if kind == "data_loading" else 0)
        events.append(
            {"ph": "X", "cat": "user_annotation",
             "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
             "pid": 1, "tid": 1, "ts": t, "dur": loader}
        )  # fmt: skip
        # An op under the DataLoader (collating): the DataLoader's time, not compute.
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::stack", "pid": 1, "tid": 1,
             "ts": t + 10, "dur": loader // 2}
        )  # fmt: skip
        t += loader + 50
        mm = 2_000 + noise() + (extra if kind == "compute" else 0)
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t,
             "dur": mm}
        )  # fmt: skip
        t += mm + 50
        if kind == "annotation" and rank == slow:
            events.append(
                {"ph": "X", "cat": "user_annotation", "name": "## data ##", "pid": 1, "tid": 1,
                 "ts": t, "dur": extra}
            )  # fmt: skip
        if kind in ("annotation", "host_other"):
            t += extra
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1,
             "ts": t, "dur": 20},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2,
             "ts": t + 10, "dur": t0 + 15_000 - (t + 10),
             "args": {"Input Dims": [[1000]], "Input type": ["float"]}},
        ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
        "traceEvents": events,
    }


def write(folder: Path, slow: int | None, kind: str, seed: int | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    jitter = random.Random(seed) if seed is not None else None
    for rank in range(4):
        trace = cpu_rank(rank, slow, kind, jitter=jitter)
        (folder / f"rank{rank}.json").write_text(json.dumps(trace))
    return folder


def analysis_of(folder: Path):  # type: ignore[no-untyped-def]
    files = discover([str(folder)])
    return analyze_job(map_ranks([f.path for f in files.files], workers=1), files)


def assert_partition(document: dict) -> None:
    """Every step of every rank: the phases and annotations add up to its duration."""
    for rank in document["ranks"]:
        for step in rank["steps"]:
            parts = [*step["phases_us"].values(), *step["annotations_us"].values()]
            assert all(v >= 0 for v in parts), step
            assert sum(parts) == pytest.approx(step["dur_us"], abs=1e-3), step


TRUTH = {  # the slow rank's kind -> the phase the straggler gets, and its key in the JSON
    "data_loading": ("data_loading", None),
    "compute": ("compute", None),
    "annotation": ("annotation", "## data ##"),
    "host_other": ("host_other", None),
}


@pytest.mark.parametrize("kind", list(TRUTH))
def test_each_cause_gets_its_own_phase_on_cpu_only_ranks(tmp_path, kind):
    job = analysis_of(write(tmp_path, slow=3, kind=kind))
    document = job_document(job)
    assert_partition(document)
    straggler = document["straggler"]
    phase, annotation = TRUTH[kind]
    assert straggler["rank"] == 3
    assert (straggler["phase"], straggler["phase_annotation"]) == (phase, annotation)
    # Exactly its extra time, against the median rank, in that phase and no other.
    excess = straggler["excess_us"]
    own = straggler["annotation_excess_us"].get("## data ##") if annotation else excess[phase]
    assert own == EXTRA * STEPS
    for other in PHASES:
        if other not in (phase, "communication"):
            assert excess[other] == 0.0, (other, excess)
    # The others waited for it in the all-reduce: communication, the mirror of its lateness.
    assert excess["communication"] == -EXTRA * STEPS
    assert straggler["lateness_us"] == EXTRA * STEPS and straggler["phase_share"] == 1.0
    reason = straggler_reason(straggler)
    words = {"data_loading": "data loading", "compute": "compute",
             "annotation": "'## data ##'", "host_other": "host time outside profiled ops"}  # fmt: skip
    assert reason == f"{words[kind]} 9 ms more than the median rank"


def test_the_excess_splits_the_step_time_exactly(tmp_path):
    """Phases and annotations of the straggler against the median rank add up to the
    difference of their step times, on noisy ranks too; the phase still found."""
    for seed in range(5):
        job = analysis_of(write(tmp_path / str(seed), slow=1, kind="data_loading", seed=seed))
        document = job_document(job)
        assert_partition(document)
        straggler = document["straggler"]
        assert straggler["rank"] == 1 and straggler["phase"] == "data_loading", straggler
        ranks = {r["rank"]: r for r in document["ranks"]}
        mine = sum(s["dur_us"] for s in ranks[1]["steps"])
        ref = sum(s["dur_us"] for s in ranks[straggler["reference_rank"]]["steps"])
        total = sum(straggler["excess_us"].values()) + sum(
            straggler["annotation_excess_us"].values()
        )
        assert total == pytest.approx(mine - ref, abs=1e-3)
        assert straggler["excess_us"]["data_loading"] == pytest.approx(EXTRA * STEPS, abs=700)


def test_no_slow_rank_no_phase(tmp_path):
    """The null case: every rank alike; no rank is late, so no phase is named."""
    document = job_document(analysis_of(write(tmp_path, slow=None, kind="data_loading")))
    assert_partition(document)
    straggler = document["straggler"]
    assert straggler["lateness_us"] == 0.0 and straggler["phase"] is None
    assert all(v == 0.0 for v in straggler["excess_us"].values())


def test_the_breakdown_of_every_rank_against_the_median_rank(tmp_path):
    job = analysis_of(write(tmp_path, slow=2, kind="host_other"))
    breakdown = phase_breakdown(job)
    assert breakdown is not None and breakdown["steps"] == STEPS
    reference = breakdown["reference"]
    assert reference == job.straggler["reference_rank"] and reference != 2
    slow = breakdown["ranks"][2]
    assert slow["excess"]["host_other"] == EXTRA * STEPS * 1000
    assert slow["excess"]["communication"] == -EXTRA * STEPS * 1000
    assert all(v == 0 for v in breakdown["ranks"][reference]["excess"].values())
    for entry in breakdown["ranks"].values():
        assert sum(entry["phases"].values()) == entry["total"] == STEPS * STEP * 1000


def _session(tmp_path: Path, events: list[dict]) -> TraceSession:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return TraceSession(load(str(path), use_cache=False, workers=1))


def test_partition_by_hand_nested_annotations_and_gpu_layers(tmp_path):
    """One step of 1,000 µs on a GPU rank: a compute kernel (100-300) hides the DataLoader
    under it (150-350: only 300-350 is data loading); an exposed NCCL kernel (400-500);
    `## outer ##` (500-900) holds `## inner ##` (600-700) and an op (800-850): the inner's
    100 µs are its own, the outer's 250 µs left are its; a sleep (900-1000) is host_other."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 100, "dur": 200,
         "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#x", "pid": 1,
         "tid": 1, "ts": 150, "dur": 200},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 8,
         "ts": 400, "dur": 100, "args": {"device": 0, "stream": 8}},
        {"ph": "X", "cat": "user_annotation", "name": "## outer ##", "pid": 1, "tid": 1,
         "ts": 500, "dur": 400},
        {"ph": "X", "cat": "user_annotation", "name": "## inner ##", "pid": 1, "tid": 1,
         "ts": 600, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 800,
         "dur": 50},
    ]  # fmt: skip
    fixed, named = step_partition(_session(tmp_path, events))
    got = {k: int(v[0]) // 1000 for k, v in fixed.items()}
    assert got == {"compute": 250, "communication": 100, "data_loading": 50,
                   "synchronisation": 0, "host_launch": 0, "host_other": 250}  # fmt: skip
    assert {k: int(v[0]) // 1000 for k, v in named.items()} == {
        "## outer ##": 250,
        "## inner ##": 100,
    }
    total = sum(int(v[0]) for v in fixed.values()) + sum(int(v[0]) for v in named.values())
    assert total == 1_000_000


def test_many_annotation_names_are_bounded_and_still_add_up(tmp_path):
    from kinetoscope.analysis.phases import MAX_ANNOTATIONS, OTHER_ANNOTATIONS

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 10_000}
    ]  # fmt: skip
    events += [
        {"ph": "X", "cat": "user_annotation", "name": f"## a{i} ##", "pid": 1, "tid": 1,
         "ts": i * 100, "dur": 50 + i}
        for i in range(40)
    ]  # fmt: skip
    fixed, named = step_partition(_session(tmp_path, events))
    assert len(named) == MAX_ANNOTATIONS and OTHER_ANNOTATIONS in named
    assert "## a39 ##" in named and "## a0 ##" not in named  # the longest are kept
    total = sum(int(v.sum()) for v in [*fixed.values(), *named.values()])
    assert total == 10_000_000


# -- real gloo jobs ------------------------------------------------------------------------------

JOB = textwrap.dedent(
    """
    import sys, time
    import torch
    import torch.distributed as dist
    from torch.profiler import record_function

    mode, slow = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            if mode == "loader" and rank == slow:
                time.sleep(0.01)  # 4 items a batch: 40 ms a step
            return torch.randn(64)

    loader = torch.utils.data.DataLoader(Data(), batch_size=4)
    for step, batch in enumerate(loader):
        if step >= 7:
            break
        out = model(batch)
        if mode == "annotation" and rank == slow:
            with record_function("## data ##"):
                time.sleep(0.04)
        if mode == "host" and rank == slow:
            time.sleep(0.04)
        if mode == "compute" and rank == slow:
            a = torch.randn(300, 300)
            for _ in range(30):
                a = a @ a / 300
        out.sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, phase, annotation",
    [
        ("loader", "data_loading", None),
        ("annotation", "annotation", "## data ##"),
        ("host", "host_other", None),
        ("compute", "compute", None),
    ],
)
def test_real_gloo_job_each_cause_its_phase(tmp_path, mode, phase, annotation):
    """4 real gloo ranks on the CPU; rank 3's Dataset sleeps 40 ms a step, or rank 3 sleeps
    40 ms inside `record_function("## data ##")`, or outside any op, or multiplies matrices:
    rank 3 is the straggler, and the phase is the DataLoader's, the annotation's, unprofiled
    host time's or compute's, its excess most of the lateness (the others' wait for it is
    communication); the DataLoader and the sleeps are never compute."""
    pytest.importorskip("torch.distributed")
    (tmp_path / "job.py").write_text(JOB)
    run = tmp_path / "run"
    capture = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "capture", "--nproc", "4", "--wait", "1",
         "--warmup", "1", "--active", "4", "--no-view", "-o", str(run), "job.py", mode, "3"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert capture.returncode == 0, capture.stderr
    document = job_document(analysis_of(run))
    assert_partition(document)
    straggler = document["straggler"]
    assert straggler["rank"] == 3, straggler
    assert (straggler["phase"], straggler["phase_annotation"]) == (phase, annotation), straggler
    own = (
        straggler["annotation_excess_us"][annotation]
        if annotation
        else straggler["excess_us"][phase]
    )
    # Most of the lateness: on a 2-core machine busy with the other test process, the other
    # ranks' own noise takes up to about a fifth of it (a full run once measured 0.79).
    assert own > 0.7 * straggler["lateness_us"] > 0, straggler
    assert straggler["excess_us"]["communication"] < -0.8 * own, straggler
    if mode != "compute":
        assert 4 * 35_000 < own < 4 * 80_000, straggler
        assert straggler["excess_us"]["compute"] < 0.05 * own, straggler
    steps = np.array([len(r["steps"]) for r in document["ranks"]])
    assert (steps == 4).all()


def test_a_huge_annotation_name_is_bounded(tmp_path):
    """A name of a megabyte (a trace is written by anyone): kept cut to NAME_LIMIT characters
    in the digest, and cut shorter still in words, the time still all there."""
    from kinetoscope.analysis.job import phase_label
    from kinetoscope.analysis.phases import NAME_LIMIT

    huge = "## " + "x" * 1_000_000 + " ##"
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "user_annotation", "name": huge, "pid": 1, "tid": 1, "ts": 100,
         "dur": 500},
        {"ph": "X", "cat": "user_annotation", "name": huge[:-1], "pid": 1, "tid": 1, "ts": 700,
         "dur": 100},
    ]  # fmt: skip
    fixed, named = step_partition(_session(tmp_path, events))
    assert list(named) == [huge[:NAME_LIMIT]]
    assert int(named[huge[:NAME_LIMIT]][0]) == 600_000  # both names, cut alike, summed
    assert int(fixed["host_other"][0]) == 400_000
    label = phase_label(f"annotation:{huge[:NAME_LIMIT]}")
    assert len(label) == 50 and label.endswith("…'")


def gpu_rank(rank: int, slow: int, kind: str) -> dict:
    """A GPU rank (NCCL): each 10 ms step, a DataLoader iteration on the host (400 µs), then a
    compute kernel (1 ms), then an all-reduce kernel that every rank leaves at 6 ms into the
    step. The slow rank's DataLoader, or its kernel, takes EXTRA µs more."""
    extra = EXTRA if rank == slow else 0
    events: list[dict[str, Any]] = []
    for step in range(STEPS):
        t0 = step * 10_000
        loader = 400 + (extra if kind == "data_loading" else 0)
        kernel = 1_000 + (extra if kind == "compute" else 0)
        begin = t0 + 100 + loader + 50
        arrive = begin + kernel + 20
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1,
             "tid": 1, "ts": t0, "dur": 10_000},
            {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#x", "pid": 1,
             "tid": 1, "ts": t0 + 100, "dur": loader},
            {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": begin,
             "dur": kernel, "args": {"device": 0, "stream": 7, "correlation": 1}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
             "pid": 0, "tid": 20, "ts": arrive, "dur": t0 + 6_000 - arrive,
             "args": {"device": 0, "stream": 20, "correlation": 2, "Collective name": "allreduce",
                      "Group size": 4, "Process Group Name": "0", "In msg nelems": 1024,
                      "Out msg nelems": 1024, "dtype": "Float"}},
        ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4},
        "traceEvents": events,
    }


@pytest.mark.parametrize("kind", ["data_loading", "compute"])
def test_on_gpu_ranks_too_each_cause_its_phase(tmp_path, kind):
    """GPU ranks: a host DataLoader while the GPU idles is data loading; a longer kernel is
    compute; either way exactly its extra time, the partition adding up."""
    for rank in range(4):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(gpu_rank(rank, 2, kind)))
    document = job_document(analysis_of(tmp_path))
    assert document["matching"]["source"] == "gpu"
    assert_partition(document)
    straggler = document["straggler"]
    assert straggler["rank"] == 2 and straggler["phase"] == kind, straggler
    assert straggler["excess_us"][kind] == EXTRA * STEPS
    assert straggler["excess_us"]["communication"] == -EXTRA * STEPS
    assert straggler["lateness_us"] == EXTRA * STEPS and straggler["phase_share"] == 1.0


def test_the_report_tables_the_stragglers_phases(tmp_path):
    """`summary DIR`: the straggler's phases against the median rank, the explaining one first,
    the others' wait last; in words above it."""
    write(tmp_path, slow=3, kind="data_loading")
    result = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", str(tmp_path), "--format", "md"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "data loading explains it: 9 ms more than the median rank (rank 1) over 3 steps" in text
    table = text[text.index("## Straggler's phases against the median rank, over 3 steps") :]
    table = table[: table.index("## Steps by rank")]
    rows = [line for line in table.splitlines()[1:] if line.startswith("| ")]
    assert rows[0] == "| phase | rank 3 | rank 1 (median) | excess |"
    assert rows[1] == "| data loading | 12.000 ms | 3.000 ms | +9.000 ms |"
    assert rows[-1].startswith("| communication |") and rows[-1].endswith("| −9.000 ms |")
