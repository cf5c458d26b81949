"""The synthetic trace generator: valid Kineto-shaped JSON with gaps exactly where they were put."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from kinetoscope.capture.synthetic import (
    DATALOADER_NEXT,
    SAMPLE_NAME,
    TraceBuilder,
    build_training_trace,
    write_trace,
)

REPO = Path(__file__).resolve().parents[1]
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def ns(us: float) -> int:
    return round(us * 1000)


def gpu_events(document: dict) -> list[dict]:
    return [e for e in document["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]


def idle_gaps_ns(document: dict) -> list[tuple[int, int]]:
    """Holes in the union of GPU activity intervals, computed from the file alone."""
    spans = sorted(
        (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in gpu_events(document) if e["dur"] > 0
    )
    gaps = []
    busy_end = spans[0][1]
    for start, end in spans[1:]:
        if start > busy_end:
            gaps.append((busy_end, start))
        busy_end = max(busy_end, end)
    return gaps


# the builder --------------------------------------------------------------------------------


def test_builder_places_gaps_and_links_exactly() -> None:
    b = TraceBuilder(origin_us=1_000_000)
    b.add_step(1, start=0, dur=1000)
    launch = b.add_runtime("cudaLaunchKernel", start=10, dur=5)
    b.add_kernel(7, start=20, dur=100, name="gemm", launched_by=launch)
    b.add_kernel(8, start=60, dur=90.5, name="side")  # overlaps on another stream
    b.add_kernel(7, start=300.25, dur=50, name="relu")
    copy = b.add_runtime("cudaMemcpyAsync", start=400, dur=3)
    b.add_memcpy(7, start=410.001, dur=2, kind="DtoH", bytes_=4, launched_by=copy)
    document = b.to_dict()

    origin = 1_000_000_000
    assert idle_gaps_ns(document) == [
        (origin + 150_500, origin + 300_250),
        (origin + 350_250, origin + 410_001),
    ]
    assert [(g.start_ns, g.end_ns) for g in b.idle_gaps()] == [
        (150_500, 300_250),
        (350_250, 410_001),
    ]
    assert b.gap_at(200).start == 150.5
    assert b.gap_at(10) is None

    by_name = {e["name"]: e for e in document["traceEvents"] if e.get("ph") == "X"}
    gemm, launch_event = by_name["gemm"], by_name["cudaLaunchKernel"]
    assert gemm["args"]["correlation"] == launch_event["args"]["correlation"] == launch
    assert gemm["args"]["External id"] == launch_event["args"]["External id"]
    assert (gemm["pid"], gemm["tid"], gemm["args"]["stream"], gemm["args"]["device"]) == (
        0,
        7,
        7,
        0,
    )
    assert "correlation" in by_name["side"]["args"]  # unlinked, but still has an id
    assert by_name["side"]["args"]["correlation"] not in (launch, copy)
    flows = [e for e in document["traceEvents"] if e.get("cat") == "ac2g"]
    assert len(flows) == 4  # one s/f pair per linked activity
    start = next(e for e in flows if e["ph"] == "s" and e["id"] == launch)
    finish = next(e for e in flows if e["ph"] == "f" and e["id"] == launch)
    assert (start["pid"], start["tid"], start["ts"]) == (
        launch_event["pid"],
        launch_event["tid"],
        launch_event["ts"],
    )
    assert (finish["pid"], finish["tid"], finish["ts"], finish["bp"]) == (0, 7, gemm["ts"], "e")
    with pytest.raises(ValueError):
        b.add_kernel(7, start=0, dur=1, launched_by=999_999)


def test_builder_times_round_trip_to_the_nanosecond() -> None:
    b = TraceBuilder()
    starts = [0, 0.001, 1.5, 123.456, 99_999.999, 3_600_000_000.123]
    for index, start in enumerate(starts):
        b.add_cpu(f"op{index}", start, 0.001)
    text = json.dumps(b.to_dict())
    events = [e for e in json.loads(text)["traceEvents"] if e.get("cat") == "cpu_op"]
    origin_ns = b.origin_us * 1000
    assert [ns(e["ts"]) - origin_ns for e in events] == [ns(s) for s in starts]
    assert all(ns(e["dur"]) == 1 for e in events)


def test_builder_memory_and_metadata() -> None:
    b = TraceBuilder(pid=77)
    worker = b.add_thread("worker")
    b.add_cpu("aten::stack", 5, 10, tid=worker)
    b.add_memory(7, 4096, total_allocated=8192, total_reserved=1 << 20, addr=1234)
    b.add_kernel(3, 1, 1)
    document = b.to_dict()
    memory = [e for e in document["traceEvents"] if e.get("name") == "[memory]"]
    assert memory[0]["ph"] == "i" and memory[0]["cat"] == "cpu_instant_event"
    assert memory[0]["args"] == {
        "Total Reserved": 1 << 20,
        "Total Allocated": 8192,
        "Bytes": 4096,
        "Addr": 1234,
        "Device Id": 0,
        "Device Type": 1,
    }
    names = {
        (e["name"], e["pid"], e["tid"]): e["args"]
        for e in document["traceEvents"]
        if e.get("ph") == "M"
    }
    assert names[("thread_name", 77, worker)] == {"name": f"thread {worker} (worker)"}
    assert names[("thread_name", 77, 77)] == {"name": "thread 77 (pt_main_thread)"}
    assert names[("thread_name", 0, 3)] == {"name": "stream 3 "}
    assert names[("process_labels", 0, 0)] == {"labels": "GPU 0"}


# the training trace -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace() -> dict:
    return build_training_trace(seed=3, steps=4)


def test_training_trace_is_deterministic_json(trace: dict) -> None:
    assert json.loads(json.dumps(trace)) == trace
    assert build_training_trace(seed=3, steps=4) == trace
    assert build_training_trace(seed=4, steps=4) != trace


def test_training_trace_has_the_kineto_shape(trace: dict) -> None:
    keys = list(trace)
    assert (
        keys.index("schemaVersion") < keys.index("traceEvents") < keys.index("baseTimeNanoseconds")
    )
    assert isinstance(trace["baseTimeNanoseconds"], int)
    assert trace["deviceProperties"][0]["id"] == 0
    assert "ynthetic" in trace["deviceProperties"][0]["name"]
    events = trace["traceEvents"]
    by_cat = Counter((e.get("ph"), e.get("cat")) for e in events)
    assert by_cat[("X", "kernel")] > 40
    assert by_cat[("X", "gpu_memcpy")] >= 4
    assert by_cat[("X", "gpu_memset")] >= 1
    assert by_cat[("X", "cuda_runtime")] > 40
    assert by_cat[("i", "cpu_instant_event")] >= 3
    assert by_cat[("s", "ac2g")] == by_cat[("f", "ac2g")] > 40
    steps = [
        e["name"]
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    assert steps == [f"ProfilerStep#{n}" for n in range(10, 14)]
    assert sum(e.get("name") == DATALOADER_NEXT for e in events) == 4
    assert {e["args"]["stream"] for e in gpu_events(trace)} == {7, 13}
    cpu_threads = {e["tid"] for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"}
    assert len(cpu_threads) == 2  # the main thread and the DataLoader pin-memory thread
    named = {
        (e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    lanes = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("ph") == "X" and e.get("cat") not in ("Trace",)
    }
    assert lanes <= named
    names = {e.get("name") for e in events}
    assert {"aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize"} <= names
    memcpy_kinds = {e["name"] for e in events if e.get("cat") == "gpu_memcpy"}
    assert memcpy_kinds == {"Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pinned)"}


def test_every_gpu_activity_links_to_one_launch(trace: dict) -> None:
    runtime = Counter(
        e["args"]["correlation"] for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime"
    )
    assert all(count == 1 for count in runtime.values())
    flows = {(e["ph"], e["id"]) for e in trace["traceEvents"] if e.get("cat") == "ac2g"}
    for event in gpu_events(trace):
        correlation = event["args"]["correlation"]
        assert runtime[correlation] == 1, event["name"]
        assert ("s", correlation) in flows and ("f", correlation) in flows
    launch_starts = {
        e["args"]["correlation"]: e["ts"]
        for e in trace["traceEvents"]
        if e.get("cat") == "cuda_runtime"
    }
    # A kernel never starts before the call that launched it.
    assert all(e["ts"] >= launch_starts[e["args"]["correlation"]] for e in gpu_events(trace))
    # Per stream, activities run one at a time.
    for stream in (7, 13):
        spans = sorted(
            (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
            for e in gpu_events(trace)
            if e["args"]["stream"] == stream
        )
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_stalls_are_where_the_truth_says(trace: dict) -> None:
    truth = trace["kinetoscopeSynthetic"]
    assert truth["seed"] == 3 and truth["steps"] == 4
    stalls = {s["kind"]: s for s in truth["stalls"]}
    assert set(stalls) == {"dataloader", "sync", "launch_bound"}
    gaps = idle_gaps_ns(trace)
    longest = sorted(gaps, key=lambda g: g[0] - g[1])[:2]

    loader = stalls["dataloader"]
    loader_gap = (
        ns(loader["gpu_idle_start_us"]),
        ns(loader["gpu_idle_start_us"]) + ns(loader["gpu_idle_dur_us"]),
    )
    assert loader_gap == longest[0]
    assert loader["cpu_dur_us"] > 6000
    assert (
        ns(loader["cpu_start_us"])
        < loader_gap[0]
        < loader_gap[1]
        < (ns(loader["cpu_start_us"]) + ns(loader["cpu_dur_us"]) + 100_000)
    )

    sync = stalls["sync"]
    sync_gap = (
        ns(sync["gpu_idle_start_us"]),
        ns(sync["gpu_idle_start_us"]) + ns(sync["gpu_idle_dur_us"]),
    )
    assert sync_gap == longest[1]
    sync_call = next(e for e in trace["traceEvents"] if e.get("name") == "cudaStreamSynchronize")
    assert ns(sync_call["ts"]) == ns(sync["cpu_start_us"])
    # The GPU goes idle just before the blocked CPU call returns.
    assert ns(sync_call["ts"]) < sync_gap[0] < ns(sync_call["ts"]) + ns(sync_call["dur"])

    stretch = stalls["launch_bound"]
    lo = ns(stretch["gpu_start_us"])
    hi = lo + ns(stretch["gpu_dur_us"])
    inside = [g for g in gaps if lo <= g[0] and g[1] <= hi]
    assert len(inside) == stretch["idle_gaps"] >= 30
    assert all(0 < g[1] - g[0] < 30_000 for g in inside)  # short gaps between tiny kernels
    tiny = [e for e in gpu_events(trace) if lo <= ns(e["ts"]) < hi]
    assert len(tiny) == stretch["kernels"] and all(e["dur"] < 3 for e in tiny)


def test_agrees_with_the_spec_reference(trace: dict) -> None:
    reference = pytest.importorskip("spec_reference")
    summary = reference.summarize(trace)
    truth = {s["kind"]: s for s in trace["kinetoscopeSynthetic"]["stalls"]}
    top = summary["idle_gaps"][:2]
    assert [(g["start_us"], g["dur_us"]) for g in top] == [
        (truth["dataloader"]["gpu_idle_start_us"], truth["dataloader"]["gpu_idle_dur_us"]),
        (truth["sync"]["gpu_idle_start_us"], truth["sync"]["gpu_idle_dur_us"]),
    ]
    assert top[0]["cause"] == "host_wait"
    assert top[0]["cpu_stack"] == ["ProfilerStep#11", DATALOADER_NEXT]
    assert top[1]["cpu_stack"] == ["ProfilerStep#12", "log_metrics"]
    causes = summary["gpu"][0]["idle_by_cause"]
    assert causes["host_wait"] > 0 and causes["kernel_wait"] > 0
    assert [s["name"] for s in summary["steps"]] == [f"ProfilerStep#{n}" for n in range(10, 14)]
    assert summary["steps"][1]["dataloader_us"] == truth["dataloader"]["cpu_dur_us"]
    assert summary["memory"][0]["peak_allocated_bytes"] > 0


@pytest.mark.parametrize("steps", [1, 2, 7])
def test_other_step_counts(steps: int) -> None:
    document = build_training_trace(seed=0, steps=steps)
    names = [
        e["name"]
        for e in document["traceEvents"]
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    assert len(names) == steps
    kinds = [s["kind"] for s in document["kinetoscopeSynthetic"]["stalls"]]
    expected = [("normal", "dataloader", "sync", "launch_bound")[i % 4] for i in range(steps)]
    assert kinds == [k for k in expected if k != "normal"]
    with pytest.raises(ValueError):
        build_training_trace(steps=0)


# files, the sample, and the command ---------------------------------------------------------


def test_write_gzip_and_plain(tmp_path: Path, trace: dict) -> None:
    gz = write_trace(trace, tmp_path / "t.pt.trace.json.gz")
    plain = write_trace(trace, tmp_path / "t.json")
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(gz.read_bytes())) == trace
    assert json.loads(plain.read_text()) == trace
    again = write_trace(trace, tmp_path / "u.pt.trace.json.gz")
    assert again.read_bytes() == gz.read_bytes()  # no timestamp in the gzip header


def test_sample_is_current_and_small() -> None:
    sample = REPO / "sample_traces" / SAMPLE_NAME
    assert sample.stat().st_size < 300_000
    assert json.loads(gzip.decompress(sample.read_bytes())) == build_training_trace()


def test_module_command_and_no_torch(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    out = tmp_path / "synthetic.pt.trace.json.gz"
    code = (
        "import sys, runpy\n"
        "sys.modules['torch'] = None\n"
        "sys.argv = ['synthetic', sys.argv[1], '--seed', '5', '--steps', '3']\n"
        "runpy.run_module('kinetoscope.capture.synthetic', run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(gzip.decompress(out.read_bytes())) == build_training_trace(seed=5, steps=3)
