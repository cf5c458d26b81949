"""A distributed job as one (issue 15): rank files, collectives matched, waits, skews, bandwidths,
clock offsets, the straggler; checked number by number on traces built here, and on the real
8-rank NCCL job of the corpus."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS
from kinetoscope.analysis.collectives import kind_of, payload_bytes
from kinetoscope.analysis.job import analyze_job, job_document, map_ranks
from kinetoscope.parser.ranks import discover, rank_from_name, read_head, worker_and_stamp

DLRM = CORPUS / "multirank" / "dlrm_8rank"

# Each rank's clock runs ahead of rank 0's by this much (µs).
OFFSET = {0: 0.0, 1: 100.0, 2: -50.0}
# The job in true time (µs): (collective, args, {rank: (start, end)}).
COLLECTIVES = [
    (
        "allreduce",
        {"In msg nelems": 1048576, "Out msg nelems": 1048576, "dtype": "Float"},
        {0: (1000, 2000), 1: (1400, 1996), 2: (1200, 2000)},
    ),
    (
        "_allgather_base",
        {"In msg nelems": 1024, "Out msg nelems": 3072, "dtype": "Float"},
        {0: (5000, 5500), 1: (5300, 5500), 2: (5100, 5500)},
    ),
    ("barrier", {}, {0: (8000, 8100), 1: (8003, 8104), 2: (8001, 8100)}),
]
COMPUTE = {0: 500, 1: 900, 2: 600}  # µs of compute kernel per rank: rank 1 is late


def rank_trace(rank: int, world: int = 3, step: str = "ProfilerStep#1", **info: Any) -> dict:
    """One rank's trace: a step, a compute kernel and the three collectives, in its own clock."""
    off = OFFSET[rank]
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": step, "pid": 10, "tid": 10,
         "ts": 0 + off, "dur": 10000},
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7,
         "ts": 9000 - COMPUTE[rank] + off, "dur": COMPUTE[rank],
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]  # fmt: skip
    for n, (name, args, times) in enumerate(COLLECTIVES):
        start, end = times[rank]
        kernel = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
        events.append(
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 20,
             "ts": start + off, "dur": end - start,
             "args": {"device": 0, "stream": 20, "correlation": 100 + n,
                      "Collective name": name, "Group size": world,
                      "Process Group Name": "0", **args}}
        )  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, **info},
        "traceEvents": events,
    }


def write_job(folder: Path, name: str = "rank{rank}.json", ranks=(0, 1, 2), **kw: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        (folder / name.format(rank=rank)).write_text(json.dumps(rank_trace(rank, **kw)))


def job_of(inputs: list[str], align: bool = False, cycle: int | None = None) -> dict:
    files = discover(inputs, cycle=cycle)
    digests = map_ranks([f.path for f in files.files], workers=1)
    return job_document(analyze_job(digests, files, align_clocks=align))


def summary(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


# -- names and sizes ----------------------------------------------------------------------------


def test_collective_kinds_from_every_spelling():
    assert kind_of("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)") == "all_reduce"
    assert kind_of("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce_scatter"
    assert kind_of("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == (
        "all_gather"
    )
    assert kind_of("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "send_recv"
    assert kind_of("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") == "unknown"
    assert kind_of("nccl:all_to_all") == kind_of("c10d::alltoall_base_") == "all_to_all"
    assert kind_of("gloo:all_reduce") == kind_of("allreduce") == "all_reduce"
    assert kind_of("nccl:_all_gather_base") == kind_of("_allgather_base") == "all_gather"
    assert kind_of("gloo:barrier") == "barrier"
    assert kind_of("ncclKernel_Broadcast_RING_LL_Sum_int8_t") == "broadcast"


def test_payload_is_the_larger_buffer_and_a_gathers_output():
    assert payload_bytes("all_reduce", 100, 100, 4, 8) == 400
    assert payload_bytes("all_gather", 100, 800, 2, 8) == 1600
    assert payload_bytes("all_gather", 100, -1, 4, 8) == 3200  # gloo: input only
    assert payload_bytes("reduce_scatter", 800, 100, 4, 8) == 3200
    assert payload_bytes("all_reduce", 100, 100, None, 8) == -1


# -- discovery ----------------------------------------------------------------------------------


def test_rank_and_worker_from_file_names():
    assert rank_from_name("x/rank3.json") == 3
    assert rank_from_name("rank-3.json.gz") == 3
    assert rank_from_name("job_rank_12.pt.trace.json") == 12
    assert rank_from_name("dlrm_8rank_worker5_step_12.1694128201549.pt.trace.json.gz") == 5
    assert rank_from_name("host_1234.1700000000123.pt.trace.json") is None
    assert worker_and_stamp("a/host_12.1700000000123.pt.trace.json.gz") == (
        "host_12",
        1700000000123,
    )
    assert worker_and_stamp("rank0.json") == ("rank0", None)


def test_the_header_is_read_without_the_events(tmp_path):
    path = tmp_path / "cut.json"
    text = json.dumps(rank_trace(1))
    path.write_text(text[: text.index('"traceEvents"') + 40])  # cut inside the events
    assert read_head(str(path))["distributedInfo"]["rank"] == 1


def test_rank_rules_distributed_info_then_name_then_order(tmp_path):
    write_job(tmp_path, ranks=(0, 1))
    plain = rank_trace(2)
    del plain["distributedInfo"]
    (tmp_path / "other.json").write_text(json.dumps(plain))
    files = discover([str(tmp_path)])
    assert [(f.rank, f.rank_rule) for f in files.files] == [
        (0, "distributedInfo"),
        (1, "distributedInfo"),
    ]
    assert files.left_out == [
        (
            str(tmp_path / "other.json"),
            "another job: no distributedInfo, while the job's files have one",
        )
    ]
    assert files.missing == [2]
    # Without distributedInfo anywhere: the name, else the first rank no name took.
    alone = tmp_path / "plain"
    alone.mkdir()
    (alone / "worker-1.json").write_text(json.dumps(plain))
    (alone / "other.json").write_text(json.dumps(plain))
    files = discover([str(alone)])
    assert [(f.rank, Path(f.path).name, f.rank_rule) for f in files.files] == [
        (0, "other.json", "order"),
        (1, "worker-1.json", "name"),
    ]


def test_json_files_that_are_not_traces_are_left_out(tmp_path):
    write_job(tmp_path)
    (tmp_path / "config.json").write_text('{"lr": 0.1, "ranks": 3}')
    files = discover([str(tmp_path)])
    assert [f.rank for f in files.files] == [0, 1, 2]
    assert files.left_out == [(str(tmp_path / "config.json"), "not a trace (no traceEvents array)")]


def test_two_cycles_newest_complete_by_default_and_a_flag_picks_another(tmp_path):
    write_job(tmp_path, name="host_{rank}.1700000000000.pt.trace.json", step="ProfilerStep#1")
    write_job(
        tmp_path,
        name="host_{rank}.1700000060000.pt.trace.json",
        ranks=(0, 1),
        step="ProfilerStep#9",
    )
    document = job_of([str(tmp_path)])
    assert [(c["index"], c["ranks"], c["complete"], c["chosen"]) for c in document["cycles"]] == [
        (1, [0, 1, 2], True, True),
        (2, [0, 1], False, False),
    ]
    assert [s["name"] for r in document["ranks"] for s in r["steps"]] == ["ProfilerStep#1"] * 3
    newer = job_of([str(tmp_path)], cycle=2)
    assert newer["missing"] == [2]
    assert [s["name"] for r in newer["ranks"] for s in r["steps"]] == ["ProfilerStep#9"] * 2
    run = summary(str(tmp_path), "--cycle", "3")
    assert run.returncode == 1
    assert run.stderr.strip() == "kinetoscope: no profiling cycle 3: the files hold 2 (1, 2)"


def test_ranks_listing_different_subgroups_are_one_job(tmp_path):
    def groups(rank: int, backend: str = "cuda:nccl") -> list[dict]:
        default = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": backend,
                   "pg_size": 3, "ranks": [0, 1, 2]}  # fmt: skip
        # Each rank lists the groups it belongs to: a subgroup of its own here.
        mine = {"pg_name": f"{rank + 1}", "pg_desc": "undefined", "backend_config": backend,
                "pg_size": 1, "ranks": [rank]}  # fmt: skip
        return [default, mine]

    for rank in range(3):
        document = rank_trace(rank, pg_config=groups(rank))
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(document))
    stray = rank_trace(0, pg_config=str(groups(0, backend="cpu:gloo")))  # older torch: a str
    (tmp_path / "old_rank0.json").write_text(json.dumps(stray))
    files = discover([str(tmp_path)])
    assert [Path(f.path).name for f in files.files] == ["rank0.json", "rank1.json", "rank2.json"]
    assert files.left_out == [
        (
            str(tmp_path / "old_rank0.json"),
            "another job: a different default process group (pg_config)",
        )
    ]


def test_a_mixed_folder_keeps_the_largest_job_and_names_the_files_left_out(tmp_path):
    write_job(tmp_path)
    other = rank_trace(0, world=2)
    (tmp_path / "stray_rank0.json").write_text(json.dumps(other))
    document = job_of([str(tmp_path)])
    assert document["world_size"] == 3
    assert [r["rank"] for r in document["ranks"]] == [0, 1, 2]
    assert document["left_out"] == [
        {
            "path": str(tmp_path / "stray_rank0.json"),
            "reason": "another job: world_size 2 (the job's is 3)",
        }
    ]


# -- the numbers, by hand ----------------------------------------------------------------------


def test_waits_skews_bandwidths_offsets_and_straggler_by_hand(tmp_path):
    write_job(tmp_path)
    document = job_of([str(tmp_path)], align=True)
    assert document["kinetoscope_ranks"] == 1 and document["world_size"] == 3
    assert document["clock_reference"] == 0
    assert document["matching"]["matched"] == 3 and document["matching"]["stopped"] == []
    by_kind = {c["kind"]: c for c in document["collectives"]}
    # all_reduce of 1,048,576 floats: 4 MiB. Aligned starts 1000, 1400, 1200 µs: rank 1 last.
    reduce = by_kind["all_reduce"]
    assert reduce["bytes"] == 4 * 1048576
    assert reduce["wait_us"] == {"0": 400.0, "1": 0.0, "2": 200.0}
    assert reduce["latency_us"] == 596.0  # rank 1: 1400 -> 1996
    assert reduce["start_skew_us"] == 400.0 and reduce["end_skew_us"] == 4.0
    assert reduce["last_rank"] == 1
    assert reduce["algbw_GBps"] == round(4 * 1048576 / 596e-6 / 1e9, 3) == 7.037
    assert reduce["busbw_GBps"] == round(4 * 1048576 / 596e-6 / 1e9 * 4 / 3, 3) == 9.383
    # all_gather: 3,072 floats gathered, 200 µs at best, bus factor (n-1)/n.
    gather = by_kind["all_gather"]
    assert gather["bytes"] == 12288 and gather["latency_us"] == 200.0
    assert gather["algbw_GBps"] == 0.061 and gather["busbw_GBps"] == 0.041
    assert gather["wait_us"] == {"0": 300.0, "1": 0.0, "2": 200.0}
    # Offsets from the ends: rank 1 ends 96, 100 and 104 µs after rank 0, rank 2 50 µs before.
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert [ranks[r]["clock_offset_us"] for r in (0, 1, 2)] == [0.0, 100.0, -50.0]
    assert [ranks[r]["clock_spread_us"] for r in (0, 1, 2)] == [0.0, 4.0, 0.0]
    assert ranks[1]["clock_samples"] == 3
    # The barrier's waits (3 and 2 µs) are within rank 1's clock uncertainty (4 µs).
    barrier = by_kind["barrier"]
    assert barrier["wait_us"] == {"0": 3.0, "1": 0.0, "2": 2.0}
    assert barrier["not_significant"] == [0, 2] and barrier["bytes"] is None
    assert [ranks[r]["wait_us"] for r in (0, 1, 2)] == [703.0, 0.0, 402.0]
    assert ranks[0]["steps"][0]["wait_us"] == 703.0
    # Rank 1 waited least; the median rank (of waits 703 and 402, the lower middle) is rank 2,
    # whose compute kernel is 300 µs shorter: 54 % of rank 1's lateness (552.5 µs, the median
    # of 703 and 402).
    straggler = document["straggler"]
    assert straggler["rank"] == 1 and straggler["wait_us"] == 0.0
    assert straggler["lateness_us"] == 552.5 and straggler["reference_rank"] == 2
    assert straggler["excess_us"]["compute"] == 300.0
    assert straggler["phase"] == "compute" and straggler["phase_share"] == 0.543


def test_without_alignment_the_waits_hold_the_clock_offsets(tmp_path):
    write_job(tmp_path)
    document = job_of([str(tmp_path)])
    reduce = next(c for c in document["collectives"] if c["kind"] == "all_reduce")
    # Recorded starts 1000, 1500, 1150 µs; recorded ends 2000, 2096, 1950.
    assert reduce["wait_us"] == {"0": 500.0, "1": 0.0, "2": 350.0}
    assert reduce["start_skew_us"] == 500.0 and reduce["end_skew_us"] == 146.0
    assert document["clocks_aligned"] is False
    # The barrier's raw waits (103 and 152 µs) are within the uncertainty of comparing clocks
    # 100 and 150 µs apart (plus rank 1's spread: 104 and 154 µs).
    barrier = next(c for c in document["collectives"] if c["kind"] == "barrier")
    assert barrier["wait_us"] == {"0": 103.0, "1": 0.0, "2": 152.0}
    assert barrier["not_significant"] == [0, 2]


def test_offsets_are_measured_against_the_lowest_rank_with_collectives(tmp_path):
    write_job(tmp_path)
    cut = rank_trace(0)
    cut["traceEvents"] = cut["traceEvents"][:1]  # rank 0 recorded its step, no kernels
    (tmp_path / "rank0.json").write_text(json.dumps(cut))
    document = job_of([str(tmp_path)])
    assert document["clock_reference"] == 1
    ranks = {r["rank"]: r for r in document["ranks"]}
    # Rank 2 ends 146, 150 and 154 µs before rank 1.
    assert [ranks[r]["clock_offset_us"] for r in (0, 1, 2)] == [None, 0.0, -150.0]
    assert ranks[2]["clock_spread_us"] == 4.0
    assert document["matching"]["stopped"][0]["reason"] == (
        "rank 0 recorded no GPU (communication kernels) collectives: left out of the matching"
    )
    assert document["straggler"]["rank"] == 1


def test_a_subgroups_collectives_are_matched_among_its_members(tmp_path):
    write_job(tmp_path)
    for rank in (0, 1):  # ranks 0 and 1 also all-reduce in their own group "1"
        document = rank_trace(rank)
        pair = dict(document["traceEvents"][2], ts=9500 + OFFSET[rank], dur=100)
        pair["args"] = dict(pair["args"], **{"Process Group Name": "1", "Group size": 2})
        document["traceEvents"].append(pair)
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(document))
    document = rank_trace(2)  # and rank 2 sends something to nobody in the job
    send = dict(document["traceEvents"][2], ts=9600 + OFFSET[2], dur=50)
    send["args"] = dict(send["args"], **{"Collective name": "send"})
    document["traceEvents"].append(send)
    (tmp_path / "rank2.json").write_text(json.dumps(document))
    document = job_of([str(tmp_path)])
    assert document["matching"]["stopped"] == []
    assert document["matching"]["unmatched"] == {"0": 0, "1": 0, "2": 1}
    pair = [c for c in document["collectives"] if c["group"] == "1"]
    assert len(pair) == 1 and pair[0]["ranks"] == 2 and set(pair[0]["wait_us"]) == {"0", "1"}
    assert pair[0]["busbw_GBps"] == round(4 * 1048576 / 100e-6 / 1e9 * 2 * 1 / 2, 3)


def test_where_ranks_disagree_matching_stops_and_says_where(tmp_path):
    write_job(tmp_path)
    odd = rank_trace(2)
    odd["traceEvents"][2]["args"]["In msg nelems"] = 2048  # rank 2's first all_reduce differs
    odd["traceEvents"][2]["args"]["Out msg nelems"] = 2048
    (tmp_path / "rank2.json").write_text(json.dumps(odd))
    document = job_of([str(tmp_path)])
    assert document["matching"]["matched"] == 0
    assert document["matching"]["stopped"] == [
        {
            "group": "0",
            "step": "ProfilerStep#1",
            "index": 0,
            "reason": "all_reduce of 4,194,304 bytes on rank 0 but 8,192 bytes on rank 2",
        }
    ]


def test_a_damaged_rank_leaves_the_others_loaded_and_is_named(tmp_path):
    write_job(tmp_path)
    text = (tmp_path / "rank2.json").read_text()
    (tmp_path / "rank2.json").write_text(text[: len(text) * 3 // 5])  # cut off
    (tmp_path / "rank3.json").write_bytes(b"\x00garbage")  # not a trace at all
    document = job_of([str(tmp_path)])
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert ranks[0]["loaded"] and ranks[1]["loaded"] and ranks[0]["complete"]
    assert ranks[2]["loaded"] and not ranks[2]["complete"]
    assert not ranks[3]["loaded"] and "not a trace" in ranks[3]["error"]
    assert [i["rank"] for i in document["incomplete"]] == [2, 3]
    assert document["matching"]["matched"] >= 1  # ranks 0 and 1 still match (and 2 where read)
    run = summary(str(tmp_path), "--width", "200")
    assert run.returncode == 0
    assert "incomplete" in run.stdout and "not loaded" in run.stdout


def test_the_worker_pool_gives_the_same_document_as_one_process(tmp_path):
    write_job(tmp_path)
    files = discover([str(tmp_path)])
    paths = [f.path for f in files.files]
    alone = job_document(analyze_job(map_ranks(paths, workers=1), files))
    pooled = job_document(analyze_job(map_ranks(paths, workers=2), files))
    for document in (alone, pooled):
        for rank in document["ranks"]:
            rank.pop("digest_seconds")
    assert alone == pooled


def test_summary_of_several_files_and_of_a_folder_agree(tmp_path):
    write_job(tmp_path)
    folder = json.loads(summary(str(tmp_path), "--json").stdout)
    named = json.loads(
        summary(*(str(tmp_path / f"rank{r}.json") for r in (2, 0, 1)), "--json").stdout
    )
    for document in (folder, named):
        for rank in document["ranks"]:
            rank.pop("digest_seconds")
    assert folder == named


# -- the real 8-rank NCCL job ------------------------------------------------------------------


@pytest.mark.corpus
def test_dlrm_8_ranks_matched_nccl_collectives_and_a_straggler():
    if not DLRM.is_dir():
        pytest.skip("../shared/corpus is absent")
    run = summary(str(DLRM), "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["world_size"] == 8
    assert [r["rank"] for r in document["ranks"]] == list(range(8))
    assert {r["rank_rule"] for r in document["ranks"]} == {"distributedInfo"}
    # 2023 format: no collective args; SendRecv kernels launched under nccl:all_to_all.
    assert document["matching"]["source"] == "gpu"
    assert document["matching"]["by_kind"] == {"all_to_all": 5, "all_reduce": 3}
    assert document["matching"]["stopped"] == []
    first = document["collectives"][0]
    assert first["kind"] == "all_to_all" and first["last_rank"] == 7
    assert first["start_skew_us"] == 7624.0 and first["latency_us"] == 10.0
    assert first["wait_us"]["1"] == 7624.0 and first["wait_us"]["7"] == 0.0
    assert document["straggler"]["rank"] == 7
    assert document["straggler"]["wait_us"] == 1534.0
    # One host's clock: the offsets are within a few µs.
    assert all(abs(r["clock_offset_us"]) <= 2 for r in document["ranks"])
    text = summary(str(DLRM), "--width", "160").stdout
    assert "7 ◀ straggler" in text
    assert "Collectives by start skew" in text and "Steps by rank" in text
    assert "Straggler: rank 7 waited 1.534 ms" in text


@pytest.mark.corpus
def test_a_truncated_copy_of_one_real_rank(tmp_path):
    if not DLRM.is_dir():
        pytest.skip("../shared/corpus is absent")
    import gzip

    for path in DLRM.iterdir():
        shutil.copy(path, tmp_path / path.name)
    victim = next(tmp_path.glob("*worker5_*"))
    data = gzip.decompress(victim.read_bytes())
    victim.write_bytes(gzip.compress(data[: len(data) // 2]))
    document = json.loads(summary(str(tmp_path), "--json").stdout)
    assert [i["rank"] for i in document["incomplete"]] == [5]
    assert len(document["ranks"]) == 8 and document["straggler"]["rank"] == 7


@pytest.mark.slow
def test_many_events_read_back_in_one_pass_of_a_gzip_file(tmp_path):
    import gzip

    from kinetoscope.parser import load, read_event
    from kinetoscope.parser.access import read_events

    document = rank_trace(0)
    filler = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 10, "tid": 11, "ts": i, "dur": 1,
         "args": {"External id": i, "pad": "x" * 100}}
        for i in range(60_000)
    ]  # fmt: skip
    document["traceEvents"] = filler[:30_000] + document["traceEvents"] + filler[30_000:]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode(), compresslevel=1))
    trace = load(str(path), use_cache=False, workers=1)
    assert trace.chunks is not None and len(trace.chunks.offset) > 1  # several runs
    rows = [0, 1, 29_999, *range(30_000, 30_005), 45_000, len(trace) - 1]
    together = read_events(trace, rows)
    assert together == {row: read_event(trace, row) for row in rows}
    assert together[30_004]["args"]["Collective name"] == "barrier"


def gloo_rank(rank: int, late: int | None, world: int = 3) -> dict:
    """A CPU-only gloo rank: two steps, each 1 ms of compute, an all-reduce of 1,000 floats and
    an all-gather of 256 floats per rank, run by gloo on threads 2 and 3; the rank `late`
    spends 2.9 ms outside any profiled op (a sleep) before its all-reduce."""
    events: list[dict[str, Any]] = []
    for step in range(2):
        t0 = step * 10_000
        mine = 2_900 if rank == late else 0
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1,
             "tid": 1, "ts": t0, "dur": 10_000},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 100,
             "dur": 1_000},
            {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1,
             "ts": t0 + 1_200 + mine, "dur": 20},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2,
             "ts": t0 + 1_210 + mine, "dur": 3_090 - mine,
             "args": {"Input Dims": [[1000]], "Input type": ["float"]}},
            {"ph": "X", "cat": "cpu_op", "name": "c10d::_allgather_base_", "pid": 1, "tid": 1,
             "ts": t0 + 4_990, "dur": 10},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_gather", "pid": 1, "tid": 3,
             "ts": t0 + 5_000, "dur": 100,
             "args": {"Input Dims": [[256]], "Input type": ["float"]}},
        ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
        "traceEvents": events,
    }


def test_a_cpu_only_gloo_job_by_hand(tmp_path):
    for rank in range(3):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, late=2)))
    document = job_of([str(tmp_path)])
    assert document["matching"]["source"] == "cpu"
    assert document["matching"]["by_kind"] == {"all_reduce": 2, "all_gather": 2}
    reduce = next(c for c in document["collectives"] if c["kind"] == "all_reduce")
    assert reduce["group"] == "gloo" and reduce["group_size"] == 3
    assert reduce["bytes"] == 4000 and reduce["latency_us"] == 190.0
    assert reduce["wait_us"] == {"0": 2900.0, "1": 2900.0, "2": 0.0}
    assert reduce["algbw_GBps"] == 0.021 and reduce["busbw_GBps"] == 0.028  # × 2(n−1)/n
    gather = next(c for c in document["collectives"] if c["kind"] == "all_gather")
    assert gather["bytes"] == 256 * 3 * 4  # its output: input × group size
    assert gather["algbw_GBps"] == 0.031 and gather["busbw_GBps"] == 0.02  # × (n−1)/n
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert ranks[0]["steps"][0]["compute_us"] is None  # no GPU
    assert [ranks[r]["wait_us"] for r in range(3)] == [5800.0, 5800.0, 0.0]
    # The others wait for the collective outside any profiled op too: that time is the
    # collective's (3,210 µs of the step), so rank 2's own unprofiled time exceeds theirs by
    # its 2.9 ms sleep in each step.
    straggler = document["straggler"]
    assert straggler["rank"] == 2 and straggler["lateness_us"] == 5800.0
    assert straggler["excess_us"]["host_other"] == 5800.0
    assert straggler["excess_us"]["compute"] == 0.0
    assert straggler["phase"] == "host_other" and straggler["phase_share"] == 1.0
    text = summary(str(tmp_path), "--width", "200").stdout
    assert "host time outside profiled ops explains it" in text


def test_a_jobs_summary_imports_no_textual(tmp_path):
    write_job(tmp_path)
    code = (
        "import contextlib, io, sys\n"
        "from kinetoscope.commands.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['summary', {str(tmp_path)!r}])\n"
        f"    main(['summary', {str(tmp_path)!r}, '--json'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "[]", run.stderr


def test_a_matched_collective_leads_back_to_each_ranks_event(tmp_path):
    from kinetoscope.parser import load

    write_job(tmp_path)
    files = discover([str(tmp_path)])
    job = analyze_job(map_ranks([f.path for f in files.files], workers=1), files)
    matched = job.matched
    for j, rank in enumerate(matched.ranks):
        trace = load(files.files[j].path)
        coll = job.entry(rank).digest.collectives[matched.source]
        rows = coll.row[matched.position[:, j]]
        assert [trace.start[r] for r in rows] == matched.start[:, j].tolist()
        assert {trace.name_of(int(r)) for r in rows} == {
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
        }


def test_any_executor_with_submit_digests_the_ranks(tmp_path):
    from concurrent.futures import Future, ThreadPoolExecutor

    write_job(tmp_path)
    files = discover([str(tmp_path)])
    paths = [f.path for f in files.files]
    with ThreadPoolExecutor(2) as pool:
        threaded = job_document(analyze_job(map_ranks(paths, executor=pool), files))
    alone = job_document(analyze_job(map_ranks(paths, workers=1), files))
    for document in (threaded, alone):
        for rank in document["ranks"]:
            rank.pop("digest_seconds")
    assert threaded == alone

    class Broken:
        """An executor whose worker dies on rank 1's file."""

        def submit(self, fn, path, options):
            future: Future = Future()
            if path.endswith("rank1.json"):
                future.set_exception(MemoryError("worker killed"))
            else:
                future.set_result(fn(path, options))
            return future

    document = job_document(analyze_job(map_ranks(paths, executor=Broken()), files))
    assert [i["rank"] for i in document["incomplete"]] == [1]
    assert document["incomplete"][0]["reason"].endswith(
        "rank1.json: the worker digesting it failed: MemoryError: worker killed"
    )
    assert document["matching"]["matched"] == 3  # ranks 0 and 2


@pytest.mark.parametrize("first", ["parser", "job"])
def test_the_worker_server_preloads_what_the_parser_and_the_job_need(tmp_path, first):
    # The parser's decoding pool and the job's digesting pool share one forkserver; whichever
    # is used first, afterwards its preload list holds both modules (kept by the parser).
    write_job(tmp_path)
    code = (
        "import json, sys\n"
        "from multiprocessing import forkserver\n"
        "from kinetoscope.analysis.job import map_ranks\n"
        "from kinetoscope.parser import prepare_workers\n"
        "paths = sys.argv[2:]\n"
        "steps = [lambda: prepare_workers(paths[0], workers=2),\n"
        "         lambda: map_ranks(paths, workers=2)]\n"
        "for step in steps if sys.argv[1] == 'parser' else steps[::-1]:\n"
        "    step()\n"
        "print(json.dumps(forkserver._forkserver._preload_modules))\n"
    )
    paths = [str(p) for p in sorted(tmp_path.glob("rank*.json"))]
    run = subprocess.run(
        [sys.executable, "-c", code, first, *paths], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    preload = json.loads(run.stdout)
    assert {"kinetoscope.parser.parallel", "kinetoscope.analysis.job"} <= set(preload), preload
