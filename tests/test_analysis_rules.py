"""Triage rules: each fires on a trace built to show its problem, at the documented thresholds."""

import json
from pathlib import Path

from kinetoscope.analysis import TraceSession, rules
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import loads


def X(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def K(name, ts, dur, corr=None, device=0):
    args = {"device": device, "stream": 7}
    if corr is not None:
        args["correlation"] = corr
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def findings(events, **header):
    trace = loads(json.dumps({"traceEvents": events, **header}).encode())
    return {f.rule: f for f in TraceSession(trace).findings}, trace


def busy_gpu(start, end):
    """Back-to-back long kernels: a fully busy GPU, so that only the rule under test fires."""
    return [K("gemm", t, 100) for t in range(start, end, 100)]


def test_dataloader_bound_thresholds():
    def run(loader_us):
        events = [X("ProfilerStep#1", 0, 1000), X("enumerate(DataLoader)#It", 0, loader_us)]
        return findings(events + busy_gpu(0, 1000))[0].get("dataloader_bound")

    assert run(99) is None  # 9.9% < 10%
    warning = run(100)
    assert warning.severity == "warning"
    assert (warning.start, warning.dur) == (0, 1_000_000)
    assert "ProfilerStep#1" in warning.message and "num_workers" in warning.message
    assert run(300).severity == "critical"


def test_low_gpu_utilization_needs_a_long_enough_window():
    events = [K("a", 0, 300), K("b", 1700, 300)]  # busy 600 of 2000 µs: 30%
    found, _ = findings(events)
    low = found["low_gpu_utilization"]
    assert low.severity == "warning" and low.device == 0
    assert (low.start, low.dur) == (0, 2_000_000)
    found, _ = findings([K("a", 0, 100), K("b", 1900, 100)])  # 10%
    assert found["low_gpu_utilization"].severity == "critical"
    found, _ = findings([K("a", 0, 100), K("b", 900, 50)])  # 950 µs window: not judged
    assert "low_gpu_utilization" not in found


def test_host_sync_counts_the_union_of_blocking_runtime_calls():
    events = [
        X("aten::item", 100, 90),
        X("aten::_local_scalar_dense", 105, 80),
        X("cudaStreamSynchronize", 110, 60, cat="cuda_runtime"),  # the wait inside .item()
        X("hipDeviceSynchronize", 500, 50, cat="cuda_runtime"),
        X("cudaMemcpyAsync", 600, 400, cat="cuda_runtime"),  # asynchronous: not blocking
        X("cudaStreamWaitEvent", 650, 100, cat="cuda_runtime"),  # a stream waits, not the host
        X("span", 0, 1000),
    ]
    found, trace = findings(events)
    sync = found["host_sync"]
    # 60 + 50 = 110 µs blocked of a 1000 µs profile: 11%, a warning.
    assert sync.severity == "warning"
    assert "0.11 ms" in sync.message and "(11%" in sync.message
    assert "from aten::item" in sync.message  # the operator that asked for the value
    assert trace.name_of(sync.rows[0]) == "cudaStreamSynchronize"  # longest first
    assert "synchronize()" in sync.message
    found, _ = findings(events + [X("cudaDeviceSynchronize", 700, 200, cat="cuda_runtime")])
    assert found["host_sync"].severity == "critical"
    found, _ = findings([X("cudaDeviceSynchronize", 0, 40, cat="cuda_runtime"), X("span", 0, 1000)])
    assert "host_sync" not in found  # 4%: under the threshold


def test_launch_bound_on_short_kernels_with_small_waits():
    events = [X("forward", 0, 3000)]
    for i in range(100):  # 5 µs kernels every 25 µs, each launched just after the GPU idled
        t = i * 25
        events.append(
            X("cudaLaunchKernel", t - 10 if i else 0, 4, cat="cuda_runtime", correlation=i)
        )
        events.append(K("tiny", t, 5, corr=i))
    found, trace = findings(events)
    launch = found["launch_bound"]
    assert launch.severity == "critical"
    assert "100 of 100" in launch.message and "CUDA graphs" in launch.message
    assert all(trace.name_of(r) == "tiny" for r in launch.rows)
    # The same kernels but long: not launch-bound.
    long_events = [dict(e, dur=24) if e.get("cat") == "kernel" else e for e in events]
    assert "launch_bound" not in findings(long_events)[0]


def test_launch_bound_step_that_the_whole_window_dilutes():
    # Step 1: 10 ms of long kernels; step 2: 30 tiny kernels 4 µs apart, each launched late.
    events = [X("ProfilerStep#1", 0, 10000), X("ProfilerStep#2", 10000, 1000)]
    events += [K("gemm", i * 1000, 1000) for i in range(10)]
    for i in range(30):
        t = 10000 + i * 10
        events.append(X("cudaLaunchKernel", t - 2, 1, cat="cuda_runtime", correlation=100 + i))
        events.append(K("tiny", t, 6, corr=100 + i))
    found, trace = findings(events)
    launch = found["launch_bound"]
    assert launch.severity == "warning"  # 29 waits of 4 µs = 116 µs of the 1000 µs step: 12%
    assert (launch.start, launch.dur) == (10_000_000, 1_000_000)
    assert "1 of 2 steps" in launch.message and "ProfilerStep#2" in launch.message
    assert "30 of 30 kernels" in launch.message
    assert trace.name_of(launch.rows[0]) == "ProfilerStep#2"
    # Fewer than 20 short kernels in the step: not judged.
    few = [e for e in events if not (e.get("name") == "tiny" and e["ts"] >= 10190)]
    assert "launch_bound" not in findings(few)[0]


def test_host_wait_idle_names_the_cpu_context_of_the_longest_gap():
    events = [
        X("ProfilerStep#1", 0, 2000, cat="user_annotation"),
        X("enumerate(DataLoader)#It", 100, 900),
        K("a", 0, 100, corr=1),
        X("cudaLaunchKernel", 50, 2, cat="cuda_runtime", correlation=1),
        X("cudaLaunchKernel", 1010, 2, cat="cuda_runtime", correlation=2),
        K("b", 1020, 980, corr=2),
    ]
    found, trace = findings(events)
    wait = found["host_wait_idle"]
    assert wait.severity == "critical"  # 920 of 2000 µs
    assert (wait.start, wait.dur) == (100_000, 920_000)
    assert "enumerate(DataLoader)#It" in wait.message
    assert [trace.name_of(r) for r in wait.rows] == ["b", "cudaLaunchKernel"]


def test_communication_heavy_steps():
    def run(comm_start):
        events = [
            X("ProfilerStep#1", 0, 1000),
            K("gemm", 0, 500),
            K("ncclDevKernel_AllReduce", comm_start, 300, device=0),
        ]
        return findings(events)[0].get("communication_heavy")

    hidden = run(100)  # overlapped by compute: 30% communication, 0% exposed
    assert hidden.severity == "warning"
    exposed = run(600)  # after compute: 30% exposed
    assert exposed.severity == "critical"
    assert "not overlapped" in exposed.message


def test_memory_near_capacity():
    def run(reserved, device_type=1):
        events = [
            {
                "ph": "i",
                "s": "t",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": 5,
                "args": {
                    "Device Type": device_type,
                    "Device Id": 0,
                    "Total Allocated": 10,
                    "Total Reserved": reserved,
                },
            },
        ]
        props = [{"id": 0, "name": "GPU", "totalGlobalMem": 1000}]
        return findings(events, deviceProperties=props)[0].get("memory_near_capacity")

    assert run(899) is None
    assert run(900).severity == "warning"
    critical = run(975)
    assert critical.severity == "critical" and critical.start == 5000 and critical.device == 0
    assert run(990, device_type=0) is None  # CPU memory is not judged against the GPU's
    # ROCm builds that write HIP (6) for the GPU: judged as CUDA's (it was never judged).
    assert run(975, device_type=6).severity == "critical"


def test_memory_near_capacity_says_the_sizes_as_the_trace_facts_do():
    from kinetoscope.analysis.units import fmt_bytes

    total, reserved = 85_520_809_984, 84_987_740_160  # an H100's 79.65 GiB; 79.15 GiB reserved
    events = [
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5,
         "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 10,
                  "Total Reserved": reserved}},
    ]  # fmt: skip
    props = [{"id": 0, "name": "GPU", "totalGlobalMem": total}]
    finding = findings(events, deviceProperties=props)[0]["memory_near_capacity"]
    # The one bytes format (analysis/units.py), as the devices and memory sections write them.
    assert fmt_bytes(reserved) == "79.15 GiB" and fmt_bytes(total) == "79.65 GiB"
    assert finding.message.startswith("GPU 0 reaches 79.15 GiB of 79.65 GiB (99%) of memory.")


def test_findings_in_the_summary_are_json_with_evidence():
    events = [X("ProfilerStep#1", 0, 1000), X("enumerate(DataLoader)#It", 0, 500)]
    summary = build_summary(loads(json.dumps({"traceEvents": events}).encode()))
    # Without GPU activity the CPU-only findings come too (no_gpu_activity, uninstrumented time).
    (finding,) = [
        f for f in summary["findings"] if f["severity"] != "info" and "DataLoader" in f["message"]
    ]
    assert finding["rule"] == "dataloader_bound"
    assert finding["severity"] in ("info", "warning", "critical")
    assert finding["evidence"]["start_us"] == 0.0 and finding["evidence"]["dur_us"] == 1000.0
    assert finding["evidence"]["events"][0]["name"] == "ProfilerStep#1"
    json.dumps(summary)


def test_every_rule_is_documented():
    text = (Path(__file__).resolve().parents[1] / "docs" / "analysis.md").read_text()
    for rule in rules.RULES:
        assert f"`{rule}`" in text
