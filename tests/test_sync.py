"""Host-blocking waits on a hand-built trace whose syncs, causes, gaps and steps are known."""

from __future__ import annotations

import json

import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.analysis.sync import (
    DEVICE_SYNC,
    EVENT_SYNC,
    MEMCPY,
    MEMSET,
    STREAM_SYNC,
    STREAM_WAIT,
    blocking_kind_of_name,
    cause_label,
    group_sites,
)
from kinetoscope.parser import loads

PID, TID = 7, 7


def x(name, ts, dur, cat="cpu_op", **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def rt(name, ts, dur, corr):
    return x(name, ts, dur, cat="cuda_runtime", correlation=corr)


def gpu(name, ts, dur, corr, cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr},
    }


def known_trace() -> dict:
    """Step 1: `loss.item()` under a Python frame, `.to("cpu")`, an explicit device sync.
    Step 2: `.item()` again from the same line, a synchronous memcpy while printing a tensor,
    an async memcpy (not blocking) and a stream wait. Times in µs."""
    cpu = [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        x("train.py(10): step", 5, 395, cat="python_function"),
        x("aten::item", 10, 190),
        x("aten::_local_scalar_dense", 12, 186),
        rt("cudaMemcpyAsync", 15, 5, 1),
        rt("cudaStreamSynchronize", 20, 170, 2),
        x("aten::to", 500, 100),
        x("aten::_to_copy", 502, 96),
        x("aten::copy_", 505, 90),
        rt("cudaMemcpyAsync", 510, 5, 3),
        rt("cudaStreamSynchronize", 515, 75, 4),
        rt("cudaDeviceSynchronize", 700, 50, 5),
        rt("cudaLaunchKernel", 760, 5, 6),
        x("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
        x("train.py(10): step", 1005, 195, cat="python_function"),
        x("aten::item", 1010, 90),
        x("aten::_local_scalar_dense", 1012, 86),
        rt("cudaStreamSynchronize", 1020, 70, 7),
        rt("cudaLaunchKernel", 1091, 2, 9),
        x("torch/_tensor_str.py(100): _tensor_str", 1290, 60, cat="python_function"),
        rt("cudaMemcpy", 1300, 40, 8),
        rt("cudaMemcpyAsync", 1400, 5, 10),
        rt("cudaStreamWaitEvent", 1500, 2, 11),
    ]
    device = [
        gpu("Memcpy DtoH", 16, 169, 1, cat="gpu_memcpy"),
        gpu("Memcpy DtoH", 512, 73, 3, cat="gpu_memcpy"),
        gpu("kernel_a", 770, 130, 6),
        gpu("kernel_b", 1095, 55, 9),
        gpu("Memcpy DtoH", 1310, 20, 8, cat="gpu_memcpy"),
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Stream Sync",
            "pid": 0,
            "tid": 7,
            "ts": 25,
            "dur": 160,
            "args": {"correlation": 2, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Event Sync",
            "pid": 0,
            "tid": 7,
            "ts": 1600,
            "dur": 1,
            "args": {"correlation": 999, "device": 0},
        },
    ]
    return {"schemaVersion": 1, "traceEvents": cpu + device}


@pytest.fixture(scope="module")
def known():
    trace = loads(json.dumps(known_trace()).encode())
    return trace, TraceSession(trace).sync


def names(trace, rows):
    return [trace.name_of(int(r)) for r in rows]


def test_finds_every_blocking_call_and_nothing_else(known):
    trace, calls = known
    assert names(trace, calls.rows) == [
        "cudaStreamSynchronize",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaMemcpy",
        "cudaStreamWaitEvent",
    ]
    assert (calls.dur // 1000).tolist() == [170, 75, 50, 70, 40, 2]
    assert calls.kind.tolist() == [
        STREAM_SYNC,
        STREAM_SYNC,
        DEVICE_SYNC,
        STREAM_SYNC,
        MEMCPY,
        STREAM_WAIT,
    ]
    assert names(trace, calls.rows[calls.worst()])[:2] == ["cudaStreamSynchronize"] * 2
    assert (calls.dur[calls.worst()] // 1000).tolist() == [170, 75, 70, 50, 40, 2]


def test_causes_are_the_operators_that_asked_for_the_result(known):
    trace, calls = known
    causes = [cause_label(trace, calls, i) for i in range(len(calls))]
    assert causes == ["aten::item", "aten::to", "", "aten::item", "print(tensor)", ""]


def test_blocked_time_per_step(known):
    _, calls = known
    assert (calls.step_blocked // 1000).tolist() == [170 + 75 + 50, 70 + 40 + 2]
    assert calls.step.tolist() == [0, 0, 0, 1, 1, 1]


def test_gpu_idle_gap_after_each_call(known):
    trace, calls = known
    # After the first sync returns (190) the GPU is idle from 185 until 512.
    assert (calls.idle_after // 1000).tolist() == [
        512 - 190,
        770 - 590,
        770 - 750,
        1095 - 1090,
        0,
        0,
    ]
    assert calls.gap[4] == -1  # nothing ran on the GPU after the last memcpy: no gap
    first_gap = int(calls.gap[0])
    assert int(TraceSession(trace).idle.gaps.start[first_gap]) == 185_000


def test_gpu_side_sync_records_are_linked_by_correlation(known):
    trace, calls = known
    assert trace.name_of(int(calls.gpu_sync[0])) == "Stream Sync"
    assert (calls.gpu_sync[1:] == -1).all()
    assert names(trace, calls.unlinked_gpu_syncs) == ["Event Sync"]


def test_call_sites_group_across_steps(known):
    trace, calls = known
    sites = group_sites(trace, calls)
    summary = [(s.call, s.cause, s.site, s.count, s.total // 1000, s.max // 1000) for s in sites]
    assert summary == [
        (
            "cudaStreamSynchronize",
            "aten::item",
            ("train.py(10): step", "aten::item", "aten::_local_scalar_dense"),
            2,
            240,
            170,
        ),
        (
            "cudaStreamSynchronize",
            "aten::to",
            ("aten::to", "aten::_to_copy", "aten::copy_"),
            1,
            75,
            75,
        ),
        ("cudaDeviceSynchronize", "", (), 1, 50, 50),
        ("cudaMemcpy", "print(tensor)", ("torch/_tensor_str.py(100): _tensor_str",), 1, 40, 40),
        ("cudaStreamWaitEvent", "", (), 1, 2, 2),
    ]
    assert sites[0].idle_after == (322 + 5) * 1000
    assert int(calls.rows[sites[0].worst]) == int(calls.rows[0])


def test_summary_reports_sync_per_step_and_top_sites(known):
    trace, _ = known
    summary = build_summary(trace)
    assert [s["sync_us"] for s in summary["steps"]] == [295.0, 112.0]
    top = summary["sync"][0]
    assert top == {
        "call": "cudaStreamSynchronize",
        "kind": "stream_sync",
        "cause": "aten::item",
        "site": ["train.py(10): step", "aten::item", "aten::_local_scalar_dense"],
        "count": 2,
        "total_us": 240.0,
        "max_us": 170.0,
        "gpu_idle_after_us": 327.0,
        # 5 µs idle while the first call ran, then 322 µs; 70 + 5 around the second.
        "gpu_idle_us": 402.0,
        "worst_start_us": 20.0,
    }
    assert len(summary["sync"]) == 5
    json.dumps(summary)


def test_python_builtin_addresses_do_not_split_sites():
    events = []
    for i, address in enumerate(("0x7f00", "0x7f80")):
        base = i * 100
        events += [
            x("model.py(3): f", base, 50, cat="python_function"),
            x(
                f"<built-in method item of Tensor object at {address}>",
                base + 1,
                40,
                cat="python_function",
            ),
            x("aten::item", base + 2, 30),
            rt("cudaStreamSynchronize", base + 3, 20, i + 1),
        ]
    trace = loads(json.dumps({"traceEvents": events}).encode())
    sites = group_sites(trace, TraceSession(trace).sync)
    assert len(sites) == 1 and sites[0].count == 2
    assert sites[0].site == (
        "model.py(3): f",
        "<built-in method item of Tensor object>",
        "aten::item",
    )


def test_torch_frames_give_way_to_the_users_frame():
    events = [
        x("user.py(5): main", 0, 100, cat="python_function"),
        x("torch/cuda/__init__.py(975): synchronize", 1, 90, cat="python_function"),
        rt("cudaDeviceSynchronize", 2, 80, 1),
    ]
    trace = loads(json.dumps({"traceEvents": events}).encode())
    sites = group_sites(trace, TraceSession(trace).sync)
    assert sites[0].site == ("user.py(5): main", "torch/cuda/__init__.py(975): synchronize")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("cudaDeviceSynchronize", DEVICE_SYNC),
        ("hipDeviceSynchronize", DEVICE_SYNC),
        ("cudaStreamSynchronize", STREAM_SYNC),
        ("hipStreamSynchronize", STREAM_SYNC),
        ("cudaEventSynchronize", EVENT_SYNC),
        ("hipEventSynchronize", EVENT_SYNC),
        ("cudaStreamWaitEvent", STREAM_WAIT),
        ("hipStreamWaitEvent", STREAM_WAIT),
        ("cudaMemcpy", MEMCPY),
        ("cudaMemcpy2D", MEMCPY),
        ("hipMemcpy", MEMCPY),
        ("hipMemcpyWithStream", MEMCPY),
        ("cuMemcpyDtoH_v2", MEMCPY),
        ("cudaMemset", MEMSET),
        ("hipMemset", MEMSET),
        ("cudaMemcpyAsync", -1),
        ("hipMemcpyAsync", -1),
        ("cuMemcpyDtoHAsync_v2", -1),
        ("cudaMemsetAsync", -1),
        ("cudaLaunchKernel", -1),
        ("cudaStreamQuery", -1),
        ("cudaEventRecord", -1),
    ],
)
def test_blocking_names(name, kind):
    assert blocking_kind_of_name(name) == kind


def test_trace_without_syncs():
    trace = loads(json.dumps({"traceEvents": [rt("cudaLaunchKernel", 0, 5, 1)]}).encode())
    calls = TraceSession(trace).sync
    assert len(calls) == 0 and len(calls.step_rows) == 0
    assert build_summary(trace)["sync"] == []


def test_text_report_shows_sites_steps_and_memory_hint(known):
    from rich.console import Console

    from kinetoscope.present.report_memory_sync import memory_sync_tables

    trace, _ = known
    console = Console(record=True, width=220)
    for renderable in memory_sync_tables(build_summary(trace)):
        console.print(renderable)
    text = console.export_text()
    assert "profile_memory=True" in text  # this trace has no [memory] events
    assert "per step: ProfilerStep#1 295 µs (30%), ProfilerStep#2 112 µs (11%)" in text
    assert "train.py(10): step > aten::item > aten::_local_scalar_dense" in text
    assert "print(tensor)" in text and "explicit" in text
