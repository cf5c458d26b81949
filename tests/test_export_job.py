"""Export of a distributed job (issue 18): the same window from every rank, as a Perfetto bundle
(a JSON per rank and perfetto_manifest.json) or as one merged Chrome-trace JSON; checked on a job
built here with known clock offsets and on the real 8-rank job of the corpus."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import zipfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import CORPUS
from kinetoscope.parser import load

from kinetoscope.export.crop import Window, crop_trace, write_crop
from kinetoscope.export.job_bundle import (
    MANIFEST_NAME,
    MERGED_KEY,
    JobCut,
    RankCut,
    RankEvents,
    job_origin,
    merge_events,
    output_kind,
    shift_ts,
    summary_line,
    ts_ns,
    write_merged,
)

DLRM = CORPUS / "multirank" / "dlrm_8rank"
needs_dlrm = pytest.mark.skipif(not DLRM.is_dir(), reason="../shared/corpus is absent")

# Each rank's clock runs ahead of rank 0's by this much (µs): offsets measured from the ends of
# the collectives below come out exactly so (rank 2: half a µs, so that shifts leave decimals).
OFFSET = {0: Decimal(0), 1: Decimal(100), 2: Decimal("-50.5")}
BASE = 1_000_000  # µs: true time 0
COLLECTIVES = [  # (name, {rank: (start, end)}) in true time, µs
    ("allreduce", {0: (1000, 2000), 1: (1400, 2000), 2: (1200, 2000)}),
    ("barrier", {0: (8000, 8100), 1: (8003, 8100), 2: (8001, 8100)}),
]


def _t(value: Any) -> Any:
    """A time in µs as the JSON number it is written as (decimals kept exact)."""
    return float(value) if isinstance(value, Decimal) and value % 1 else int(value)


def rank_trace(rank: int) -> dict[str, Any]:
    """One rank: metadata, a step, an operator launching a kernel (flow and correlation ids the
    same on every rank) and two collectives, in its own clock."""
    off = OFFSET[rank] + BASE
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_sort_index", "pid": 10, "tid": 0, "args": {"sort_index": 10}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 10, "tid": 10, "args": {"name": "main"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 10,
         "ts": _t(0 + off), "dur": 10000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10,
         "ts": _t(100 + off), "dur": 100, "args": {"External id": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10,
         "ts": _t(150 + off), "dur": 10, "args": {"External id": 5, "correlation": 1}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 10, "tid": 10,
         "ts": _t(150 + off)},
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7,
         "ts": _t(300 + off), "dur": 500,
         "args": {"device": 0, "stream": 7, "correlation": 1, "External id": 5}},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7,
         "ts": _t(300 + off), "bp": "e"},
        {"ph": "i", "s": "t", "name": "Spans marker", "pid": "Spans", "tid": 0,
         "ts": _t(400 + off)},
    ]  # fmt: skip
    for n, (name, times) in enumerate(COLLECTIVES):
        start, end = times[rank]
        events.append(
            {"ph": "X", "cat": "kernel", "pid": 0, "tid": 20,
             "name": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
             "ts": _t(start + off), "dur": end - start,
             "args": {"device": 0, "stream": 20, "correlation": 100 + n, "Collective name": name,
                      "Group size": 3, "Process Group Name": "0", "In msg nelems": 1024,
                      "Out msg nelems": 1024, "dtype": "Float"}}
        )  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 3},
        "traceEvents": events,
        "traceName": f"rank{rank}",
    }


def write_job(folder: Path, ranks=(0, 1, 2)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(rank_trace(rank)))
    return folder


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", "export", *map(str, args)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def read_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def raw_ts(path: Path) -> list[str]:
    """Every event's `ts` as the text written in the file, in order (None: no ts)."""
    import msgspec

    data = path.read_bytes()
    if str(path).endswith(".gz"):
        data = gzip.decompress(data)
    top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    events = msgspec.json.decode(top["traceEvents"], type=list[dict[str, msgspec.Raw]])
    return [bytes(e["ts"]).decode() if "ts" in e else None for e in events]


# -- pieces -------------------------------------------------------------------------------------


def test_shift_is_exact_integer_ns_written_as_us_with_three_decimals():
    assert shift_ts(b"1694128201427784", -500) == b"1694128201427784.500"
    assert shift_ts(b"1694128201427784.25", 1500) == b"1694128201427782.750"
    assert shift_ts(b"0.5", 1000) == b"-0.500"
    assert shift_ts(b"1e3", 1) == b"999.999"
    # Sub-ns digits (not written by Kineto) are kept, not rounded away.
    assert shift_ts(b"10.0004", 1000) == b"9.0004"
    # A float would lose the last digits at this size: the text arithmetic does not.
    assert ts_ns("1694128201427784.501") - ts_ns("1694128201427784") == 501
    assert shift_ts(b'"12"', 5) is None and shift_ts(b"null", 5) is None


def _events(rank: int) -> list[bytes]:
    return [json.dumps(e).encode() for e in rank_trace(rank)["traceEvents"]]


def test_merge_makes_processes_flows_and_correlations_unique_and_labels_ranks():
    parts = [RankEvents(r, _events(r), shift_ns=int(OFFSET[r] * 1000)) for r in (0, 1, 2)]
    events, result = merge_events(parts)
    merged = [json.loads(e) for e in events]
    # Every crop event is there, plus the process names and sort indices that were missing.
    assert len(merged) == sum(len(p.events) for p in parts) + sum(result.added.values())
    assert result.events == {r: len(_events(r)) for r in (0, 1, 2)}
    # pids: r·P + pid for ints (P = 100 above pid 10), `rank R Spans` for the string pid.
    assert result.pid_stride == 100
    assert result.pids[1] == [[10, 110], [0, 100], ["Spans", "rank 1 Spans"]]
    pids_of = {r: {new for _, new in result.pids[r]} for r in (0, 1, 2)}
    assert not (pids_of[0] & pids_of[1]) and not (pids_of[1] & pids_of[2])
    names = {e["pid"]: e["args"]["name"] for e in merged if e["name"] == "process_name"}
    assert names[110] == "rank 1: python3" and names[0] == "rank 0: python3"
    assert names["rank 2 Spans"] == "rank 2: Spans"  # added: it had no name
    order = {e["pid"]: e["args"]["sort_index"] for e in merged if e["name"] == "process_sort_index"}
    assert set(order) == set().union(*pids_of.values())
    ranked = sorted(order, key=order.get)
    rank_of = {pid: r for r, pids in pids_of.items() for pid in pids}
    assert [rank_of[p] for p in ranked] == sorted(rank_of[p] for p in ranked)  # ranks in order
    # Flow and correlation ids: r·I + id (I = 1000 above correlation 101), pairs kept.
    assert result.id_stride == 1000
    flows = {(rank_of[e["pid"]], e["ph"]): e["id"] for e in merged if e["ph"] in "sf"}
    assert flows == {(0, "s"): 1, (0, "f"): 1, (1, "s"): 1001, (1, "f"): 1001, (2, "s"): 2001,
                     (2, "f"): 2001}  # fmt: skip
    kernels = [e for e in merged if e.get("cat") == "kernel" and "sgemm" in e["name"]]
    assert [(k["args"]["correlation"], k["args"]["External id"]) for k in kernels] == [
        (1, 5),
        (1001, 1005),
        (2001, 2005),
    ]
    # Times: moved back by each rank's offset, exactly; the reference's untouched.
    steps = [e for e in merged if e["name"] == "ProfilerStep#1"]
    assert [Decimal(str(e["ts"])) for e in steps] == [BASE, BASE, BASE]
    launch = next(
        i for i, e in enumerate(merged) if e["name"] == "cudaLaunchKernel" and e["pid"] == 110
    )
    assert b'"ts":1000150.000' in events[launch]  # own 1000250 µs, 100 µs ahead
    launch = next(
        i for i, e in enumerate(merged) if e["name"] == "cudaLaunchKernel" and e["pid"] == 210
    )
    assert b'"ts":1000150.000' in events[launch]  # own 1000099.5 µs, 50.5 µs behind


def test_merge_copies_untouched_text_and_moves_only_what_it_must():
    raw = b'{"ph": "X", "name": "a", "pid": 7, "tid": 1, "ts": 12.500, "dur": 1.250, "args": {"x": 1.0}}'
    flow = b'{"ph": "s", "id": 3, "pid": 7, "tid": 1, "ts": 12.500, "cat": "ac2g", "name": "ac2g"}'
    name = b'{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "p"}}'
    sort = (
        b'{"ph": "M", "name": "process_sort_index", "pid": 7, "tid": 0, "args": {"sort_index": 1}}'
    )
    events, result = merge_events(
        [RankEvents(0, [name, sort, raw, flow]), RankEvents(1, [name, sort, raw, flow], 250)]
    )
    assert result.added == {0: 0, 1: 0}
    assert events[2] == raw and events[3] == flow  # rank 0, no shift: byte for byte
    moved = json.loads(events[6])
    assert b'"ts":12.250' in events[6] and b'"dur":1.250' in events[6]  # dur's text kept
    assert b'"args":{"x": 1.0}' in events[6]  # fields untouched: their raw text
    assert moved["pid"] == 17 and json.loads(events[7])["id"] == 13


def test_job_origin_is_the_earliest_start_as_recorded_and_aligned():
    # Offsets of both signs: the origin is min(start − max(offset, 0)).
    assert job_origin([(1000, 100), (900, -50), (None, 0)]) == 900
    assert job_origin([(1000, 200), (950, 0)]) == 800
    assert job_origin([]) is None


def test_job_origin_matches_the_timeline_on_a_job(tmp_path):
    pytest.importorskip("textual")
    from kinetoscope.analysis.job import analyze_job, map_ranks
    from kinetoscope.parser.ranks import discover
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen

    files = discover([str(write_job(tmp_path / "job"))])
    job = analyze_job(map_ranks([f.path for f in files.files], workers=1), files)
    starts = [(e.digest.start_ns, round(e.offset_ns or 0)) for e in job.ranks]
    assert job_origin(starts) == JobTimelineScreen(job).origin
    assert job_origin(starts) == BASE * 1000 - 50_500  # rank 2's start, 50.5 µs behind


# -- the command on a job built here -------------------------------------------------------------


def test_bundle_holds_a_manifest_and_one_file_per_rank(tmp_path):
    job = write_job(tmp_path / "job")
    out = tmp_path / "job.zip"
    result = export(job, "-o", out, "--step", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {out}: Perfetto bundle of 3 ranks")
    with zipfile.ZipFile(out) as bundle:
        names = bundle.namelist()
        assert sorted(names) == [MANIFEST_NAME, "rank0.json", "rank1.json", "rank2.json"]
        text = bundle.read(MANIFEST_NAME).decode()
        for name in names:
            if name != MANIFEST_NAME:
                bundle.extract(name, tmp_path / "unzipped")
    # Perfetto finds a manifest by its first key.
    assert text.lstrip().startswith('{\n  "perfetto_manifest"')
    document = json.loads(text)
    manifest = document["perfetto_manifest"]
    assert manifest["version"] == 1
    files = {f["path"]: f for f in manifest["files"]}
    assert set(files) == {"rank0.json", "rank1.json", "rank2.json"}
    assert files["rank0.json"] == {"path": "rank0.json", "machine": {"name": "rank 0"}}
    # As recorded: pinned to the reference's file without an offset.
    for rank in (1, 2):
        clocks = files[f"rank{rank}.json"]["clocks"]
        assert clocks == {"sync_to": {"file": "rank0.json"}, "offset_ns": 0}
    ours = document["kinetoscope"]
    assert ours["reference_rank"] == 0 and ours["clocks"] == "as recorded"
    assert [r["offset_ns"] for r in ours["ranks"]] == [0, 100_000, -50_500]
    for item in ours["ranks"]:
        path = tmp_path / "unzipped" / item["file"]
        trace = load(str(path), use_cache=False)
        assert trace.complete and trace.n_events == item["events"]
        crop = crop_trace(str(job / item["source"]), Window(*item["window_ns"]))
        assert item["events"] == len(crop.events)
        # Each rank's own step, in its own clock: the file's times are the original text.
        own = read_json(job / item["source"])["traceEvents"]
        step = next(e for e in own if e["name"] == "ProfilerStep#1")
        assert item["window_ns"][0] == int(Decimal(str(step["ts"])) * 1000)


def test_aligned_bundle_pins_with_minus_the_offsets(tmp_path):
    job = write_job(tmp_path / "job")
    out = tmp_path / "job.zip"
    result = export(job, "-o", out, "--window", "+1ms..+2.5ms", "--align-clocks")
    assert result.returncode == 0, result.stderr
    with zipfile.ZipFile(out) as bundle:
        document = json.loads(bundle.read(MANIFEST_NAME))
    files = {f["path"]: f for f in document["perfetto_manifest"]["files"]}
    # Perfetto: the file reads T when the reference reads T + offset_ns; rank 1 runs 100 µs
    # ahead, so its T is the reference's T − 100 µs.
    assert files["rank1.json"]["clocks"]["offset_ns"] == -100_000
    assert files["rank2.json"]["clocks"]["offset_ns"] == 50_500
    ours = document["kinetoscope"]
    origin = ours["origin_ns"]
    assert origin == BASE * 1000 - 50_500  # rank 2's start: 50.5 µs behind
    windows = {r["rank"]: r["window_ns"] for r in ours["ranks"]}
    # The same instants on the reference's clock: origin + 1 ms + offset in each rank's own.
    for rank, offset in ((0, 0), (1, 100_000), (2, -50_500)):
        assert windows[rank] == [origin + 1_000_000 + offset, origin + 2_500_000 + offset]


def test_merged_json_loads_with_unique_ranks_and_exact_shifts(tmp_path):
    job = write_job(tmp_path / "job")
    out = tmp_path / "merged.json.gz"
    result = export(job, "-o", out, "--step", "1", "--align-clocks")
    assert result.returncode == 0, result.stderr
    assert "merged trace of 3 ranks" in result.stdout
    data = read_json(out)
    assert data["schemaVersion"] == 1 and data["distributedInfo"]["rank"] == 0
    record = data[MERGED_KEY]
    assert [r["rank"] for r in record["ranks"]] == [0, 1, 2]
    assert record["clocks"] == "aligned" and record["top_level_from_rank"] == 0
    trace = load(str(out), use_cache=False)
    assert trace.complete and trace.n_events == len(data["traceEvents"])
    texts = raw_ts(out)
    position = 0
    for item in record["ranks"]:
        source = job / item["source"]
        crop = crop_trace(str(source), Window(*item["window_ns"]))
        assert item["events"] == len(crop.events)
        position += item["metadata_added"]
        mine = texts[position : position + item["events"]]
        position += item["events"]
        originals = [json.loads(e) for e in crop.events]
        for original, text in zip(originals, mine):
            if "ts" not in original:
                continue
            moved = ts_ns(text) - ts_ns(json.dumps(original["ts"]))
            assert moved == -item["shift_ns"], (original, text)
    assert position == len(texts)
    # The collectives' ends meet on the reference's clock once shifted (true time 2000 µs).
    ends = [
        Decimal(str(e["ts"])) + e["dur"]
        for e in data["traceEvents"]
        if e.get("args", {}).get("Collective name") == "allreduce"
    ]
    assert ends == [BASE + 2000] * 3


def test_a_damaged_and_a_missing_rank_are_named_and_the_others_exported(tmp_path):
    job = write_job(tmp_path / "job", ranks=(0, 1, 2))
    text = json.dumps(rank_trace(1))
    damaged = text[: text.index('"traceEvents"')] + '"traceEvents": [{"ph": "X", "ts": 1\x00 cut'
    (job / "rank1.pt.trace.json").write_text(damaged)
    out = tmp_path / "job.zip"
    result = export(job, "-o", out, "--step", "1")
    assert result.returncode == 0, result.stderr
    assert "rank 1 (rank1.pt.trace.json): left out:" in result.stderr
    assert "of 2 ranks" in result.stdout
    with zipfile.ZipFile(out) as bundle:
        assert sorted(bundle.namelist()) == [MANIFEST_NAME, "rank0.json", "rank2.json"]
        document = json.loads(bundle.read(MANIFEST_NAME))
    paths = [f["path"] for f in document["perfetto_manifest"]["files"]]
    assert paths == ["rank0.json", "rank2.json"]
    left = {r["rank"]: r for r in document["kinetoscope"]["ranks"]}
    assert "left_out" in left[1] and left[1]["file"] is None
    # A rank with no file: named as missing.
    (job / "rank1.pt.trace.json").unlink()
    result = export(job, "-o", tmp_path / "two.json", "--step", "1")
    assert result.returncode == 0, result.stderr
    assert "missing ranks (no file): 1" in result.stderr
    # A file of another job is not a rank of this one: said so.
    (job / "other.pt.trace.json").write_text('{"traceEvents": []}')
    result = export(job, "-o", tmp_path / "three.json", "--step", "1")
    assert result.returncode == 0, result.stderr
    assert "other.pt.trace.json: not used: another job" in result.stderr


def test_a_rank_without_the_step_is_named(tmp_path):
    job = write_job(tmp_path / "job")
    trace = rank_trace(2)
    for event in trace["traceEvents"]:
        if event["name"] == "ProfilerStep#1":
            event["name"] = "ProfilerStep#2"
    (job / "rank2.pt.trace.json").write_text(json.dumps(trace))
    result = export(job, "-o", tmp_path / "out.zip", "--step", "1")
    assert result.returncode == 0, result.stderr
    assert "rank 2 (rank2.pt.trace.json): left out: no ProfilerStep#1 (it has ProfilerStep#2)" in (
        result.stderr
    )


@pytest.mark.parametrize(
    "args, code, says",
    [
        (["--around-gap", "1"], 2, "--around-gap is for one trace"),
        (["--step", "1", "--merged"], 1, "--merged writes one JSON trace"),
        (["--window", "+5s..+6s"], 1, "no rank could be exported"),
    ],
)
def test_job_usage_errors_are_one_line(tmp_path, args, code, says):
    job = write_job(tmp_path / "job")
    result = export(job, "-o", tmp_path / "out.zip", *args)
    assert result.returncode == code
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.zip").exists()
    assert not list(tmp_path.glob(".kinetoscope-*"))  # no temporary file left behind


def test_a_job_option_with_one_trace_file_is_a_usage_error(tmp_path):
    job = write_job(tmp_path / "job")
    result = export(job / "rank0.pt.trace.json", "-o", tmp_path / "out.json", "--step", "1",
                    "--align-clocks")  # fmt: skip
    assert result.returncode == 2
    assert "--align-clocks is an option of a job's export" in result.stderr
    # The single-trace export still works with one file.
    result = export(job / "rank0.pt.trace.json", "-o", tmp_path / "out.json", "--step", "1")
    assert result.returncode == 0, result.stderr


# -- the 8-rank job of the corpus ------------------------------------------------------------------


@pytest.fixture(scope="module")
def dlrm_exports(tmp_path_factory):
    if not DLRM.is_dir():
        pytest.skip("../shared/corpus is absent")
    folder = tmp_path_factory.mktemp("dlrm")
    bundle, merged = folder / "dlrm.zip", folder / "dlrm.json"
    for out, extra in ((bundle, []), (merged, ["--align-clocks"])):
        result = export(DLRM, "-o", out, "--step", "10", *extra)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
    return folder, bundle, merged


@needs_dlrm
def test_dlrm_bundle_has_a_valid_manifest_and_every_rank(dlrm_exports):
    folder, bundle, _ = dlrm_exports
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        document = json.loads(archive.read(MANIFEST_NAME))
        archive.extractall(folder / "unzipped")
    manifest = document["perfetto_manifest"]
    assert manifest["version"] == 1
    files = manifest["files"]
    assert [f["machine"]["name"] for f in files] == [f"rank {r}" for r in range(8)]
    assert {f["path"] for f in files} | {MANIFEST_NAME} == names and len(names) == 9
    for entry in files[1:]:
        assert entry["clocks"]["sync_to"] == {"file": files[0]["path"]}
        assert type(entry["clocks"]["offset_ns"]) is int
    ours = document["kinetoscope"]
    assert [r["rank"] for r in ours["ranks"]] == list(range(8))
    assert all(type(r["offset_ns"]) is int for r in ours["ranks"])
    assert all(abs(r["offset_ns"]) <= 2000 for r in ours["ranks"])  # one host's clock
    for item in ours["ranks"]:
        trace = load(str(folder / "unzipped" / item["file"]), use_cache=False)
        assert trace.complete and trace.n_events == item["events"] > 0
        crop = crop_trace(str(DLRM / item["source"]), Window(*item["window_ns"]))
        assert len(crop.events) == item["events"]
        names = [trace.name_of(r) for r in range(len(trace))]
        assert "ProfilerStep#10" in names


@needs_dlrm
def test_dlrm_merged_has_eight_ranks_unique_flows_and_exact_shifts(dlrm_exports):
    _, _, merged = dlrm_exports
    data = read_json(merged)
    record = data[MERGED_KEY]
    events = data["traceEvents"]
    trace = load(str(merged), use_cache=False)
    assert trace.complete and trace.n_events == len(events)
    # Eight rank processes, each rank's pids its own.
    rank_of: dict[Any, int] = {}
    for item in record["ranks"]:
        for _, new in item["pids"]:
            assert new not in rank_of
            rank_of[new] = item["rank"]
    labelled = {
        int(e["args"]["name"].split(":")[0].split()[1])
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert labelled == set(range(8)) and set(rank_of.values()) == set(range(8))
    # Flows: no id in two ranks, every end has its start in the same rank.
    starts: dict[Any, set[int]] = {}
    ends: dict[Any, set[int]] = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            (starts if e["ph"] == "s" else ends).setdefault((e.get("cat"), e["id"]), set()).add(
                rank_of[e["pid"]]
            )
    assert ends and all(len(r) == 1 for r in (*starts.values(), *ends.values()))
    assert all(key in starts and starts[key] == ranks for key, ranks in ends.items())
    correlation: dict[int, set[int]] = {}
    for e in events:
        value = e.get("args", {}).get("correlation") if isinstance(e.get("args"), dict) else None
        if isinstance(value, int):
            correlation.setdefault(value, set()).add(rank_of[e["pid"]])
    assert correlation and all(len(r) == 1 for r in correlation.values())
    # Each rank: its crop's events, shifted by exactly minus its offset.
    texts = raw_ts(merged)
    position = 0
    shifts = set()
    for item in record["ranks"]:
        crop = crop_trace(str(DLRM / item["source"]), Window(*item["window_ns"]))
        assert item["events"] == len(crop.events)
        position += item["metadata_added"]
        ours = texts[position : position + item["events"]]
        block = events[position : position + item["events"]]
        position += item["events"]
        for raw, text, event in zip(crop.events, ours, block):
            original = json.loads(raw)
            assert {k: v for k, v in original.items() if k not in ("ts", "pid", "id", "args")} == {
                k: v for k, v in event.items() if k not in ("ts", "pid", "id", "args")
            }
            if "ts" in original:  # the crop's own text: a float would round epoch times
                written = bytes(msgspec.json.decode(raw, type=dict[str, msgspec.Raw])["ts"])
                assert ts_ns(text) - ts_ns(written.decode()) == -item["shift_ns"]
        shifts.add(item["shift_ns"])
    assert position == len(events)
    assert len(shifts) > 1  # the offsets are not all zero: the shift was exercised


@needs_dlrm
def test_dlrm_a_truncated_rank_is_named_and_the_others_exported(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(DLRM, job)
    victim = sorted(job.iterdir())[3]
    victim.write_bytes(b"not gzip, not json")
    result = export(job, "-o", tmp_path / "out.zip", "--step", "10")
    assert result.returncode == 0, result.stderr
    assert f"rank 3 ({victim.name}): left out:" in result.stderr
    with zipfile.ZipFile(tmp_path / "out.zip") as bundle:
        assert len(bundle.namelist()) == 8  # 7 ranks and the manifest


def test_ranks_cropped_in_worker_processes_give_the_same_file(tmp_path):
    job = write_job(tmp_path / "job")
    outputs = []
    for workers in ("1", "2"):
        out = tmp_path / f"merged{workers}.json"
        result = export(job, "-o", out, "--step", "1", "--align-clocks", "--workers", workers)
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


def test_the_viewers_marked_range_cuts_as_the_window_does(tmp_path):
    """`plan_from_job` (the job viewer's export) with a range on the job's clock cuts every rank
    as `--window` does with the same times from the job's origin."""
    from kinetoscope.analysis.job import analyze_job, map_ranks
    from kinetoscope.parser.ranks import discover

    from kinetoscope.export.job_bundle import plan_from_job

    files = discover([str(write_job(tmp_path / "job"))])
    digests = map_ranks([f.path for f in files.files], workers=1)
    for aligned in (False, True):
        job = analyze_job(digests, files, align_clocks=aligned)
        by_text = plan_from_job(job, window="+1ms..+2.5ms")
        origin = by_text.origin_ns
        by_range = plan_from_job(job, span_ns=(origin + 1_000_000, origin + 2_500_000))
        assert [r.window for r in by_range.ranks] == [r.window for r in by_text.ranks]
        assert by_range.describe == "+1ms..+2.5ms" and by_range.aligned is aligned
        shifts = [r.shift_ns for r in by_text.ranks]
        assert shifts == ([0, 100_000, -50_500] if aligned else [0, 0, 0])


def test_the_export_never_overwrites_a_rank(tmp_path):
    job = write_job(tmp_path / "job")
    before = (job / "rank1.pt.trace.json").read_bytes()
    result = export(job, "-o", job / "rank1.pt.trace.json", "--step", "1")
    assert result.returncode == 1 and "is rank 1's trace" in result.stderr
    assert (job / "rank1.pt.trace.json").read_bytes() == before


def test_cycle_picks_the_profiling_cycle(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1, 2):
        for stamp, step in ((1000000, "ProfilerStep#1"), (2000000, "ProfilerStep#2")):
            trace = rank_trace(rank)
            for event in trace["traceEvents"]:
                if event["name"] == "ProfilerStep#1":
                    event["name"] = step
            (job / f"rank{rank}.{stamp}.pt.trace.json").write_text(json.dumps(trace))
    out = tmp_path / "out.zip"
    result = export(job, "-o", out, "--step", "1")  # the newest cycle has ProfilerStep#2 only
    assert result.returncode == 1 and "no rank could be exported" in result.stderr
    assert "2 profiling cycles, this is cycle 2 (--cycle N picks another)" in result.stderr
    assert "(every rank: no ProfilerStep#1 (it has ProfilerStep#2))" in result.stderr
    result = export(job, "-o", out, "--step", "1", "--cycle", "1")
    assert result.returncode == 0, result.stderr
    with zipfile.ZipFile(out) as bundle:
        ours = json.loads(bundle.read(MANIFEST_NAME))["kinetoscope"]
    assert ours["profiling_cycle"] == 1
    assert [r["source"] for r in ours["ranks"]] == [
        f"rank{r}.1000000.pt.trace.json" for r in (0, 1, 2)
    ]


def test_an_unreadable_window_is_said_before_the_ranks_are_read(tmp_path, monkeypatch):
    import kinetoscope.analysis.job as job_module

    from kinetoscope.export.crop import ExportError
    from kinetoscope.export.job_bundle import plan_job

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the ranks were digested")

    monkeypatch.setattr(job_module, "map_ranks", refuse)
    job = write_job(tmp_path / "job")
    with pytest.raises(ExportError, match="cannot read the window"):
        plan_job([str(job)], window="+5ms")
    with pytest.raises(ExportError, match="is empty"):
        plan_job([str(job)], window="+5ms..+1ms")


def test_a_merged_export_left_in_the_job_folder_is_not_taken_for_a_rank(tmp_path):
    job = write_job(tmp_path / "job")
    result = export(job, "-o", job / "merged.json", "--step", "1")
    assert result.returncode == 0, result.stderr
    result = export(job, "-o", tmp_path / "again.zip", "--step", "1")
    assert result.returncode == 0, result.stderr
    assert "merged.json: not used: a merged export of a job's ranks" in result.stderr
    with zipfile.ZipFile(tmp_path / "again.zip") as bundle:
        ours = json.loads(bundle.read(MANIFEST_NAME))["kinetoscope"]
    assert ours["profiling_cycle"] == 1
    assert [r["source"] for r in ours["ranks"]] == [f"rank{r}.pt.trace.json" for r in (0, 1, 2)]


def test_step_window_spans_every_slice_of_the_steps_named():
    from kinetoscope.export.job_bundle import step_window

    names = ["ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#10", "ProfilerStep#12"]
    starts, durs = [0, 10, 20, 40], [10, 10, 5, 10]
    assert step_window(names, starts, durs, [10]) == (0, 25)  # both slices named #10
    assert step_window(names, starts, durs, [11, 12]) == (10, 50)
    assert (
        step_window(names, starts, durs, [3, 11])
        == "no ProfilerStep#3 (it has ProfilerStep#10..#12)"
    )
    assert (
        step_window(names[:1], starts[:1], durs[:1], [3])
        == "no ProfilerStep#3 (it has ProfilerStep#10)"
    )
    assert step_window([], [], [], [3]) == "no ProfilerStep#3 (it has no steps)"


def test_manifest_pins_to_the_reference_rank_and_leaves_ranks_without_offsets_free():
    """The reference is the lowest rank in a synchronising collective, not always rank 0."""
    from kinetoscope.export.job_bundle import JobCut, RankCut, manifest

    ranks = [
        RankCut(0, "a/r0.json", offset_ns=None, window=(0, 10)),
        RankCut(1, "a/r1.json", offset_ns=0, window=(0, 10)),
        RankCut(2, "a/r2.json", offset_ns=-150_000, shift_ns=-150_000, window=(0, 10)),
        RankCut(3, "a/r3.json", problem="cut off"),
    ]
    members = {0: "rank0.json", 1: "rank1.json", 2: "rank2.json"}
    for aligned, pinned in ((True, 150_000), (False, 0)):
        cut = JobCut(ranks, reference=1, aligned=aligned, origin_ns=0, describe="+0ns..+10ns")
        document = manifest(cut, members)
        files = {f["path"]: f for f in document["perfetto_manifest"]["files"]}
        assert list(files) == ["rank0.json", "rank1.json", "rank2.json"]
        assert "clocks" not in files["rank0.json"] and "clocks" not in files["rank1.json"]
        assert files["rank2.json"]["clocks"] == {
            "sync_to": {"file": "rank1.json"},
            "offset_ns": pinned,
        }
        attributes = document["perfetto_manifest"]["attributes"]
        assert attributes["kinetoscope.reference_rank"] == 1
        assert all(isinstance(v, (str, int)) for v in attributes.values())  # Perfetto's rule
        ours = {r["rank"]: r for r in document["kinetoscope"]["ranks"]}
        assert ours[3]["left_out"] == "cut off" and ours[3]["file"] is None
        assert ours[0]["offset_ns"] is None


def test_summary_line_counts_one_in_the_singular():
    """`1 rank (1 event, ...)`, never `1 events`."""
    cut = JobCut(ranks=[RankCut(0, "r0.json", events=1)], reference=0, aligned=False,
                 origin_ns=0, describe="+0ns..+1ms")  # fmt: skip
    line = summary_line(cut, "out.zip", "zip", 100)
    assert "of 1 rank (1 event," in line, line
    cut.ranks.append(RankCut(1, "r1.json", events=2))
    assert "of 2 ranks (3 events," in summary_line(cut, "out.zip", "zip", 100)


def test_output_suffix_in_any_case(tmp_path):
    """`.ZIP` is the bundle and `.JSON.GZ` a gzip'd merged trace, as in lower case."""
    assert output_kind("job.ZIP", False) == "zip"
    assert output_kind("job.JSON.GZ", False) == output_kind("job.Json", False) == "merged"
    out = tmp_path / "job.JSON.GZ"
    write_merged(str(out), {}, [b'{"ph": "M", "name": "x", "pid": 1, "tid": 1}'], {})
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]


@pytest.mark.slow
def test_bundle_streams_each_rank_never_holding_its_crop(tmp_path, monkeypatch):
    """Each rank's file in the bundle is written as its runs are read (open_crop +
    write_crop), never held whole: exporting the whole of a rank (some 8 MB of kept text)
    allocates at its peak hardly more than exporting a sliver of it. The bundle's member is
    the single-trace crop, byte for byte."""
    import tracemalloc

    from kinetoscope.parser import reader as reader_module
    from kinetoscope.parser import source as source_module
    from test_export import many_events_trace

    from kinetoscope.export.job_bundle import export_job, plan_job

    monkeypatch.setattr(reader_module, "RUN_BYTES", 1 << 17)
    monkeypatch.setattr(source_module, "READ_BLOCK", 1 << 15)
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.pt.trace.json").write_text(many_events_trace(8_000))
    out = tmp_path / "out"
    out.mkdir()

    def peak_of(window: str, name: str) -> int:
        cut = plan_job([str(job)], window=window)
        tracemalloc.start()
        try:
            export_job(cut, str(out / name))
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    narrow = peak_of("+40ms..+40.01ms", "narrow.zip")
    whole = peak_of("..", "whole.zip")
    with zipfile.ZipFile(out / "whole.zip") as bundle:
        member = bundle.read("rank0.json")
    assert len(member) > 7 << 20
    source = job / "rank0.pt.trace.json"
    crop = crop_trace(str(source), Window(0, 1 << 60))
    single = tmp_path / "single.json"
    write_crop(crop, str(single))
    assert member == single.read_bytes()
    assert whole - narrow < 4 << 20, (whole, narrow, len(member))


def test_merged_gzip_header_names_no_file(tmp_path):
    """The merged .json.gz's gzip header held the hidden temporary file's name
    (`.job.json.gz.<pid>.<thread>.part`), so two exports of the same job differed: it names
    none now (as the single-trace export), and the same input gives the same bytes."""
    out = tmp_path / "job.json.gz"
    events = [b'{"ph": "M", "name": "x", "pid": 1, "tid": 1}']
    write_merged(str(out), {}, events, {})
    first = out.read_bytes()
    assert first[3] & 0x08 == 0  # FNAME flag: no file name in the header
    write_merged(str(out), {}, events, {})
    assert out.read_bytes() == first
