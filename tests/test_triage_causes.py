"""Triage that names the cause: device frees and blocking allocations, pageable copies, GPU idle
credited to the call that ran while the GPU idled, syncs weighed by the idle they cause, idle
totals per CPU operator, CPU-only traces and accelerator events kinetoscope cannot read.

Every trace here is built in the test, with times in µs."""

from __future__ import annotations

import json

from kinetoscope.analysis import analyze
from kinetoscope.analysis.summary import build_summary
from kinetoscope.analysis.sync import KINDS, sync_of
from kinetoscope.parser import loads

PID, TID = 1, 1


def X(name, ts, dur, cat="cpu_op", pid=PID, tid=TID, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def R(name, ts, dur, corr):
    """A runtime call."""
    return X(name, ts, dur, cat="cuda_runtime", correlation=corr)


def G(name, ts, dur, corr, cat="kernel", device=0):
    """A GPU activity launched by the runtime call with the same correlation."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": device,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": 7, "correlation": corr},
    }


def load(events, **header):
    return loads(json.dumps({"schemaVersion": 1, "traceEvents": events, **header}).encode())


def kinds(calls):
    return [KINDS[int(k)] for k in calls.kind]


def by_rule(trace):
    return {f.rule: f for f in analyze(trace).findings}


# -- 1. frees and allocations that synchronise the device -------------------------------------


def free_bound_trace(n=40):
    """A step loop in which each iteration launches a 20 µs kernel, then calls hipFree for
    80 µs: the GPU is idle during every free (it waits for the host), 80 % of the window."""
    events = [X("ProfilerStep#1", 0, n * 100 + 50, cat="user_annotation")]
    for i in range(n):
        t = i * 100
        events += [
            X("aten::conv2d", t, 10),
            R("hipLaunchKernel", t + 1, 3, corr=i + 1),
            G("conv_kernel", t + 5, 20, corr=i + 1),
            X("aten::empty", t + 15, 85),
            R("hipFree", t + 18, 80, corr=10_000 + i),
        ]
    return load(events)


def test_device_frees_are_blocking_calls_with_their_own_kind():
    trace = free_bound_trace()
    calls = sync_of(analyze(trace))
    assert len(calls) == 40
    assert set(kinds(calls)) == {"free"}
    # The GPU went idle at 25 µs into each iteration and stays idle until the next kernel at
    # 105: 73 µs of it while the free ran (25..98), 7 µs after it returned.
    assert int(calls.idle_during[0]) == 73_000
    assert int(calls.idle[0]) == 80_000
    entry = build_summary(trace)["sync"][0]
    assert (entry["call"], entry["kind"], entry["count"]) == ("hipFree", "free", 40)


def test_host_sync_fires_on_device_frees_and_says_why():
    finding = by_rule(free_bound_trace())["host_sync"]
    assert finding.severity == "critical"  # the frees cost the GPU 80 % of its window
    assert "hipFree ×40" in finding.message
    assert "cudaFree/hipFree synchronise" in finding.message
    assert "empty_cache" in finding.message


def test_an_allocation_counts_only_when_the_gpu_went_idle_during_it():
    events = [
        # The GPU runs 0..500; this hipMalloc runs while it stays busy: not a wait.
        R("hipLaunchKernel", 0, 2, corr=1),
        G("long_kernel", 5, 500, corr=1),
        R("hipMalloc", 100, 50, corr=2),
        # This one runs 490..900: the GPU drains at 505 and idles until the host launches.
        R("hipMalloc", 490, 410, corr=3),
        R("hipLaunchKernel", 905, 2, corr=4),
        G("next_kernel", 910, 100, corr=4),
    ]
    trace = load(events)
    calls = sync_of(analyze(trace))
    assert [int(trace.start[r]) // 1000 for r in calls.rows] == [490]
    assert kinds(calls) == ["malloc"]
    assert int(calls.idle[0]) == (910 - 505) * 1000


# -- 2. pageable copies ----------------------------------------------------------------------


def pageable_trace():
    events = [X("ProfilerStep#1", 0, 2000, cat="user_annotation")]
    for i in range(3):
        t = i * 600
        events += [
            X("aten::to", t, 400),
            X("aten::copy_", t + 5, 390),
            # Issued as an async copy, but from pageable memory: the host waits 380 µs.
            R("cudaMemcpyAsync", t + 10, 380, corr=i + 1),
            G("Memcpy HtoD (Pageable -> Device)", t + 300, 80, corr=i + 1, cat="gpu_memcpy"),
            # A pinned async copy returns at once and is not a wait.
            R("cudaMemcpyAsync", t + 400, 5, corr=100 + i),
            G("Memcpy HtoD (Pinned -> Device)", t + 410, 50, corr=100 + i, cat="gpu_memcpy"),
            R("cudaLaunchKernel", t + 450, 5, corr=200 + i),
            G("gemm", t + 460, 100, corr=200 + i),
        ]
    return load(events)


def test_async_copies_of_pageable_memory_are_blocking_calls():
    trace = pageable_trace()
    calls = sync_of(analyze(trace))
    assert kinds(calls) == ["pageable_memcpy"] * 3
    assert [int(trace.dur[r]) // 1000 for r in calls.rows] == [380] * 3


def test_pageable_memcpy_finding_names_the_calls_and_the_fix():
    trace = pageable_trace()
    finding = by_rule(trace)["pageable_memcpy"]
    assert finding.severity == "warning"  # 1.14 ms of host time blocked
    assert "3 copies between the GPU and pageable host memory" in finding.message
    assert "3 Memcpy HtoD (Pageable -> Device)" in finding.message
    assert "1.14 ms" in finding.message
    assert "pin_memory" in finding.message
    assert trace.name_of(finding.rows[0]) == "cudaMemcpyAsync"
    assert trace.name_of(finding.rows[-1]) == "Memcpy HtoD (Pageable -> Device)"
    document = build_summary(trace)
    assert any(f["rule"] == "pageable_memcpy" for f in document["findings"])


# -- 3. idle credited to the call that ran while the GPU idled ------------------------------


def test_gpu_idle_goes_to_the_call_running_while_the_gpu_idled():
    """A 4.93 ms synchronous memcpy with the GPU idle throughout, then a 10 µs stream wait and
    the next kernel: the wait does not get the credit for the memcpy's idle time."""
    events = [
        R("hipLaunchKernel", 0, 5, corr=1),
        G("kernel_a", 10, 90, corr=1),  # GPU idle from 100
        R("hipMemcpyWithStream", 100, 4930, corr=2),
        R("hipStreamWaitEvent", 5040, 10, corr=3),
        R("hipLaunchKernel", 5055, 5, corr=4),
        G("kernel_b", 5070, 50, corr=4),  # until 5070
    ]
    trace = load(events)
    calls = sync_of(analyze(trace))
    assert [trace.name_of(int(r)) for r in calls.rows] == [
        "hipMemcpyWithStream",
        "hipStreamWaitEvent",
    ]
    assert kinds(calls) == ["memcpy", "stream_wait"]
    # The memcpy: idle the whole 4930 µs it ran, and the 10 µs until the wait began.
    assert int(calls.idle[0]) == (4930 + 10) * 1000
    # The wait: its own 10 µs and the 20 µs until the kernel began.
    assert int(calls.idle[1]) == (10 + 20) * 1000
    sites = {s["call"]: s for s in build_summary(trace)["sync"]}
    assert sites["hipMemcpyWithStream"]["gpu_idle_us"] == 4940.0
    assert sites["hipStreamWaitEvent"]["gpu_idle_us"] == 30.0


# -- 4. syncs weighed by the idle they cause -------------------------------------------------


def test_host_sync_does_not_fire_when_the_gpu_stayed_busy():
    """A 14 ms device synchronize in the harness while the GPU runs back-to-back kernels."""
    events = [R("cudaLaunchKernel", i * 10, 5, corr=i + 1) for i in range(150)]
    events += [G("gemm", 20 + i * 100, 100, corr=i + 1) for i in range(150)]
    events.append(R("cudaDeviceSynchronize", 1500, 14_000, corr=999))
    trace = load(events)
    calls = sync_of(analyze(trace))
    assert len(calls) == 1 and int(calls.dur[0]) == 14_000_000
    assert "host_sync" not in by_rule(trace)


def test_host_sync_weighs_the_idle_a_short_sync_causes():
    """A 50 µs stream synchronize after which the GPU idles 2 ms before the next launch."""
    events = [
        R("cudaLaunchKernel", 0, 5, corr=1),
        G("gemm", 10, 1000, corr=1),
        X("aten::item", 960, 60),
        R("cudaStreamSynchronize", 965, 50, corr=2),  # returns at 1015, GPU idle from 1010
        X("python work", 1020, 1990),
        R("cudaLaunchKernel", 3010, 5, corr=3),
        G("gemm", 3020, 1000, corr=3),
    ]
    finding = by_rule(load(events))["host_sync"]
    # 2010 µs of the 4010 µs window idle after the sync (5 during it): 50 %, critical.
    assert finding.severity == "critical"
    assert "idle 2.01 ms (50% of its window)" in finding.message
    assert "from aten::item" in finding.message
