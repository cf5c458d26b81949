"""The compile and graph-replay lens (analysis/compile.py, docs/compile.md): every number on
hand-built traces (times in µs), the summary's `compile` section, its triage rules and report
table, and the real traces of the corpus that hold compiled code and graph replay."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.compile import (
    EFFICIENCY_SAMPLE,
    PEAK_BANDWIDTH_GBS,
    REGION_AOT_FORWARD,
    REGION_DYNAMO,
    REGION_FX_GRAPH,
    _number,
    inductor_kind,
    region_kind,
)
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import load as load_file
from kinetoscope.parser import loads

PID, TID = 1, 1


def X(name, ts, dur, cat="cpu_op", pid=PID, tid=TID, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def R(name, ts, dur, corr):
    return X(name, ts, dur, cat="cuda_runtime", correlation=corr)


def G(name, ts, dur, corr, device=0, **args):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": 7, "correlation": corr, **args},
    }


def load(events, **header):
    return loads(json.dumps({"schemaVersion": 1, "traceEvents": events, **header}).encode())


def gpu_events():
    """One step: a guard, frame 0 compiled (an Inductor kernel and an mm inside), an eager
    add_, frame 1 (a graph break), frame 0 recompiled while compiling inside the window, and a
    graph replay of two kernels with a 5 µs gap between them."""
    return [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("TorchDynamo Cache Lookup", 10, 5),
        X("Torch-Compiled Region: 0/0", 20, 200),
        X("CompiledFunction", 25, 190),
        X("## Call CompiledFxGraph abc ##", 30, 180, cat="user_annotation"),
        X("triton_poi_fused_add_mul_0", 40, 20, kernel_file="/x.py", grid="grid(1)"),
        R("cudaLaunchKernel", 45, 5, corr=1),
        G("triton_poi_fused_add_mul_0", 300, 8, corr=1),
        X("aten::mm", 70, 20),
        R("cudaLaunchKernel", 75, 5, corr=2),
        G("ampere_sgemm", 308, 50, corr=2),
        X("aten::add_", 230, 20),
        R("cudaLaunchKernel", 235, 5, corr=3),
        G("vectorized_elementwise", 360, 20, corr=3),
        X("Torch-Compiled Region: 1/0", 260, 40),
        X("triton_red_fused_sum_1", 265, 15),
        R("cudaLaunchKernel", 268, 4, corr=4),
        G("triton_red_fused_sum_1", 400, 30, corr=4),
        X("Torch-Compiled Region: 0/1", 500, 60),
        X("compile_fx_inner (dynamo_timed)", 505, 50),
        X("replay", 595, 25),
        R("cudaGraphLaunch", 600, 10, corr=5),
        G("graph_a", 700, 10, corr=5),
        G("graph_b", 715, 30, corr=5),
    ]


def test_compiled_regions_and_the_share_of_kernel_time_in_compiled_code():
    c = TraceSession(load(gpu_events())).compiled
    assert [(r.kind, r.label) for r in c.regions] == [
        (REGION_DYNAMO, "0/0"),
        (REGION_AOT_FORWARD, "aot_forward"),
        (REGION_FX_GRAPH, "fx_graph"),
        (REGION_DYNAMO, "1/0"),
        (REGION_DYNAMO, "0/1"),
    ]
    assert [r.label for r in c.outer_regions()] == ["0/0", "1/0", "0/1"]
    assert c.on_gpu
    # Kernels: 8 + 50 + 20 + 30 + 10 + 30; compiled: the Inductor kernel (8), the mm inside
    # region 0/0 (50) and the Inductor kernel of region 1/0 (30).
    assert (c.total_ns, c.compiled_ns) == (148_000, 88_000)
    assert c.share == pytest.approx(88 / 148)
    assert c.has_compiled


def test_recompiles_graph_breaks_compilation_and_guards():
    c = TraceSession(load(gpu_events())).compiled
    assert [(f.frame, f.compile_ids, f.calls) for f in c.frames] == [
        (0, (0, 1), (1, 1)),
        (1, (0,), (1,)),
    ]
    assert [f.frame for f in c.recompiled_frames()] == [0]
    (brk,) = c.likely_graph_breaks
    assert brk.frames == (0, 1) and (brk.start, brk.end) == (0, 1_000_000)
    assert (c.compiling.count, c.compiling.ns) == (1, 50_000)
    assert (c.guard_calls, c.guard_ns) == (1, 5_000)


def test_eager_islands_are_outermost_operators_outside_compiled_code():
    c = TraceSession(load(gpu_events())).compiled
    # The guard and the compile event are dynamo's own machinery, never islands.
    assert [(e.name, e.count, e.cpu_ns, e.gpu_ns) for e in c.eager_islands] == [
        ("replay", 1, 25_000, 40_000),
        ("aten::add_", 1, 20_000, 20_000),
    ]


def test_launch_economy_and_fusion_mix():
    c = TraceSession(load(gpu_events())).compiled
    launch = c.launch
    assert (launch.launch_calls, launch.graph_launches, launch.kernels, launch.graph_kernels) == (
        5,
        1,
        6,
        2,
    )
    assert launch.kernels_per_graph_launch == 2.0
    assert launch.cpu_ns == 29_000  # 5 + 5 + 5 + 4 + 10
    assert (c.kernels, c.short_kernels) == (6, 1)  # only the 8 µs kernel is under 10 µs
    mix = {m.kind: (m.names, m.count, m.total_ns, m.short, m.fused_mean) for m in c.fusion_mix()}
    assert mix == {"poi": (1, 1, 8_000, 1, 2.0), "red": (1, 1, 30_000, 0, 1.0)}
    assert {k.name: k.fused for k in c.inductor} == {
        "triton_poi_fused_add_mul_0": ("add", "mul"),
        "triton_red_fused_sum_1": ("sum",),
    }


def test_graph_replay_is_attributed_to_the_launch_and_its_gaps_are_not_the_hosts():
    session = TraceSession(load(gpu_events()))
    c = session.compiled
    (graph,) = c.graphs
    trace = session.trace
    assert trace.name_of(graph.operator_row) == "replay"
    assert trace.name_of(graph.caller_row) == "replay" and graph.region_row == -1
    assert (graph.kernels, graph.gpu_ns, graph.busy_ns, graph.gap_ns) == (2, 40_000, 40_000, 5_000)
    assert (graph.span_start, graph.span_end) == (700_000, 745_000)
    replay = c.replay
    assert replay is not None
    assert (replay.launches, replay.kernels, replay.gpu_ns, replay.gap_ns) == (1, 2, 40_000, 5_000)
    # The spec's idle gap [710, 715) lies inside the replay; it is kernel_wait, not host_wait.
    assert (replay.idle_inside_ns, replay.host_wait_inside_ns) == (5_000, 0)
    assert any(note.startswith("operators:") for note in replay.partial)
    assert any(note.startswith("gpu.idle_by_cause") for note in replay.partial)
    # The launch is outside compiled code: its replayed kernels (40 of 148 µs) are not named
    # by Inductor, so the compiled share says it cannot count them.
    (note,) = [n for n in replay.partial if n.startswith("compiled share")]
    assert "1 of 1 graph launch ran outside any compiled region" in note and "27%" in note


def test_graph_capture_in_the_window_is_noted():
    events = [
        R("cudaStreamBeginCapture", 0, 2, corr=1),
        R("cudaLaunchKernel", 5, 2, corr=2),
        R("cudaLaunchKernel", 8, 2, corr=3),
        R("cudaStreamEndCapture", 12, 2, corr=4),
        R("cudaGraphInstantiate", 15, 2, corr=5),
        R("cudaLaunchKernel", 20, 2, corr=6),
        G("after_capture", 25, 5, corr=6),
        R("cudaStreamBeginCapture", 40, 2, corr=7),  # never ended inside the window
        R("cudaLaunchKernel", 45, 2, corr=8),
    ]
    c = TraceSession(load(events)).compiled
    replay = c.replay
    assert replay is not None
    assert (replay.launches, replay.captures, replay.captured_launches) == (0, 1, 2)
    (note,) = replay.partial
    assert note.startswith("graph capture inside the window (1 capture): the 2 launch calls")
    # Only the launch that ran a kernel is a launch call of the launch economy.
    assert (c.launch.launch_calls, c.launch.kernels) == (1, 1)


def test_per_step_numbers():
    c = TraceSession(load(gpu_events())).compiled
    (step,) = c.steps
    assert (step.total_ns, step.compiled_ns, step.eager_ns) == (148_000, 88_000, 45_000)
    assert (step.regions, step.frames) == (3, (0, 1))
    assert (step.guard_calls, step.guard_ns, step.compiling_ns) == (1, 5_000, 50_000)
    assert (step.launch_calls, step.graph_launches, step.kernels, step.launch_cpu_ns) == (
        5,
        1,
        6,
        29_000,
    )
    assert (step.graph_kernels, step.kernels_per_graph_launch) == (2, 2.0)
    # The fusion mix of the step: the 8 µs Inductor kernel is its one kernel under 10 µs (the
    # 10 µs graph_a is not under); one pointwise and one reduction Inductor kernel (their CPU
    # launch events of the same names are not counted).
    assert step.short_kernels == 1
    assert step.inductor_by_kind == (("poi", 1), ("red", 1))


def test_the_fusion_mix_per_step_splits_kernels_by_their_step():
    events = [
        X("ProfilerStep#1", 0, 100, cat="user_annotation"),
        X("cpp_fused_add_0", 10, 5),
        X("cpp_fused_mul_relu_1", 20, 30),
        X("ProfilerStep#2", 100, 100, cat="user_annotation"),
        X("cpp_fused_add_0", 110, 5),
        X("triton_red_fused_sum_0", 120, 5),
    ]
    c = TraceSession(load(events)).compiled
    first, second = c.steps
    assert first.inductor_by_kind == (("cpp", 2),)
    assert second.inductor_by_kind == (("cpp", 1),), "a CPU triton_* slice is a launch event"
    section = build_summary(TraceSession(load(events)))["compile"]["steps"]
    assert [s["inductor_by_kind"] for s in section] == [{"cpp": 2}, {"cpp": 1}]


def test_cpu_only_trace_measures_operator_self_time():
    events = [
        X("ProfilerStep#1", 0, 100, cat="user_annotation"),
        X("Torch-Compiled Region: 0/0", 10, 50),
        X("cpp_fused_add_relu_0", 20, 10),
        X("aten::mm", 35, 20),
        X("aten::sum", 70, 10),
    ]
    c = TraceSession(load(events)).compiled
    assert not c.on_gpu
    # Self times: region 50 - 10 - 20 = 20, cpp 10, mm 20 (compiled); sum 10 (eager).
    assert (c.total_ns, c.compiled_ns) == (60_000, 50_000)
    assert [(k.name, k.kind, k.fused, k.on_gpu) for k in c.inductor] == [
        ("cpp_fused_add_relu_0", "cpp", ("add", "relu"), False)
    ]
    assert [(e.name, e.cpu_ns, e.gpu_ns) for e in c.eager_islands] == [("aten::sum", 10_000, 0)]
    (step,) = c.steps
    assert (step.total_ns, step.compiled_ns, step.eager_ns) == (60_000, 50_000, 10_000)
    assert c.likely_graph_breaks == ()


def test_graph_breaks_over_the_whole_trace_without_steps():
    events = [X("Torch-Compiled Region: 0/0", 0, 10), X("Torch-Compiled Region: 2/0", 20, 10)]
    c = TraceSession(load(events)).compiled
    (brk,) = c.likely_graph_breaks
    assert (brk.step_row, brk.frames, brk.start, brk.end) == (-1, (0, 2), 0, 30_000)
    # One frame called many times is no graph break.
    events = [X("Torch-Compiled Region: 0/0", t, 10) for t in (0, 20, 40)]
    assert TraceSession(load(events)).compiled.likely_graph_breaks == ()


def test_eager_trace_has_nothing_compiled():
    events = [
        X("aten::mm", 0, 20),
        R("cudaLaunchKernel", 5, 5, corr=1),
        G("ampere_sgemm", 30, 50, corr=1),
    ]
    c = TraceSession(load(events)).compiled
    assert not c.has_compiled
    assert (c.total_ns, c.compiled_ns, c.eager_islands, c.replay) == (50_000, 0, (), None)


def test_names():
    assert region_kind("Torch-Compiled Region: 12/3") == (REGION_DYNAMO, 12, 3)
    assert region_kind("Torch-Compiled Region: x/3") is None
    assert region_kind("CompiledFunctionBackward") == ("aot_backward", None, None)
    assert inductor_kind("triton_per_fused__softmax_2") == ("per", ("softmax",))
    assert inductor_kind("triton_tem_fused_mm_0") == ("tem", ("mm",))
    assert inductor_kind("triton_poi_fused_0") == ("poi", ())
    assert inductor_kind("cpp_fused_mul_3") == ("cpp", ("mul",))
    assert inductor_kind("triton_kernel") is None
    assert inductor_kind("cpp_something_1") is None


def efficiency_trace(device_name):
    events = [
        X("Torch-Compiled Region: 0/0", 0, 100),
        X("triton_poi_fused_add_0", 10, 20, kernel_flop=2_000_000_000, kernel_num_gb=0.5),
        R("cudaLaunchKernel", 12, 5, corr=1),
        G("triton_poi_fused_add_0", 200, 1000, corr=1),
        X("triton_red_fused_sum_1", 40, 20, kernel_num_gb=0.25),
        R("cudaLaunchKernel", 42, 5, corr=2),
        G("triton_red_fused_sum_1", 1300, 500, corr=2),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": device_name, "totalGlobalMem": 1 << 30}],
        "traceEvents": events,
    }


def test_kernel_efficiency_from_kernel_flop_and_num_gb(write_trace):
    session = TraceSession(load_file(str(write_trace(efficiency_trace("NVIDIA H100 80GB HBM3")))))
    eff = session.kernel_efficiency
    by_name = {a.name: a for a in eff.kernels}
    add = by_name["triton_poi_fused_add_0"]
    # 2e9 FLOP in 1 ms: 2 TFLOP/s; 0.5 GB in 1 ms: 500 GB/s, of the H100 SXM's 3350 GB/s.
    assert add.tflops == pytest.approx(2.0)
    assert add.gbs == pytest.approx(500.0)
    assert add.bandwidth_share == pytest.approx(500 / PEAK_BANDWIDTH_GBS["NVIDIA H100 80GB HBM3"])
    red = by_name["triton_red_fused_sum_1"]
    assert red.tflops is None and red.gbs == pytest.approx(500.0)
    # Per operator: both launch events sit in the compiled region.
    (op,) = eff.operators
    assert (op.name, op.count, op.dur_ns) == ("Torch-Compiled Region: 0/0", 2, 1_500_000)
    assert op.gbs == pytest.approx(0.75 / 1.5e-3)


def test_kernel_efficiency_never_guesses_a_peak(write_trace):
    session = TraceSession(load_file(str(write_trace(efficiency_trace("Some Future GPU")))))
    (add, _red) = session.kernel_efficiency.kernels
    assert add.gbs == pytest.approx(500.0)
    assert add.peak_gbs is None and add.bandwidth_share is None


def test_kernel_efficiency_reads_past_the_sample_and_shares_a_launch_events_args(write_trace):
    """More kernels than EFFICIENCY_SAMPLE, all with args: every one is read. A launch event
    that launched two kernels gives both its args."""
    n = EFFICIENCY_SAMPLE + 44
    events = [X("Torch-Compiled Region: 0/0", 0, 100 * n + 100)]
    for i in range(n):
        t = 10 + 100 * i
        events += [
            X("triton_poi_fused_add_0", t, 20, kernel_num_gb=0.001),
            R("cudaLaunchKernel", t + 2, 5, corr=i + 1),
            G("triton_poi_fused_add_0", t + 10, 2, corr=i + 1),
        ]
    events += [G("triton_poi_fused_add_0", 100 * n + 50, 2, corr=n)]  # a second kernel
    doc = {"schemaVersion": 1, "traceEvents": events}
    session = TraceSession(load_file(str(write_trace(doc))))
    (add,) = session.kernel_efficiency.kernels
    assert add.count == n + 1
    assert add.gb == pytest.approx(0.001 * (n + 1))
    assert add.gbs == pytest.approx(0.001 / 2e-6)  # 0.001 GB in 2 µs: 500 GB/s


def test_kernel_efficiency_ignores_args_that_are_not_numbers(write_trace):
    doc = efficiency_trace("NVIDIA H100 80GB HBM3")
    doc["traceEvents"][1]["args"] = {"kernel_flop": "many", "kernel_num_gb": True}
    doc["traceEvents"][4]["args"] = {"kernel_flop": 10**400, "kernel_num_gb": -1.0}
    session = TraceSession(load_file(str(write_trace(doc))))
    eff = session.kernel_efficiency
    assert eff.kernels == () and eff.operators == ()
    # An integer too large for a float is no number (numpy's isfinite raises on it).
    assert _number(10**400) is None and _number(float("inf")) is None and _number(2) == 2.0


def test_summary_compile_section():
    doc = build_summary(load(gpu_events()))
    section = doc["compile"]
    assert section["measured_on"] == "kernels"
    assert (section["total_us"], section["compiled_us"]) == (148.0, 88.0)
    assert section["compiled_share"] == round(88 / 148, 4)
    assert section["recompiled_frames"] == [0]
    assert section["likely_graph_breaks"][0]["frames"] == [0, 1]
    assert section["guard"] == {"calls": 1, "self_us": 5.0, "mean_us": 5.0}
    assert section["launch"]["kernels_per_graph_launch"] == 2.0
    assert section["graph_replay"]["idle_inside_us"] == 5.0
    assert section["graph_replay"]["partial"]
    assert section["steps"][0]["compiled_us"] == 88.0
    # The spec's own numbers keep their meaning: the replay's launch still holds its kernels.
    replay = next(op for op in doc["operators"] if op["name"] == "replay")
    assert replay["gpu_total_us"] == 40.0


# -- triage rules ----------------------------------------------------------------------------


def test_compile_rules_fire_with_evidence():
    session = TraceSession(load(gpu_events()))
    found = {f.rule: f for f in session.findings}
    trace = session.trace
    recompile = found["recompiles"]
    assert recompile.severity == "warning" and "frame 0: ids 0, 1" in recompile.message
    assert [trace.name_of(r) for r in recompile.rows] == [
        "Torch-Compiled Region: 0/0",
        "Torch-Compiled Region: 0/1",
    ]
    compiling = found["compile_in_window"]
    # 50 µs of a 1000 µs trace: a warning, not critical (under 20 %).
    assert compiling.severity == "warning"
    assert (compiling.start, compiling.dur) == (505_000, 50_000)
    brk = found["likely_graph_breaks"]
    assert [trace.name_of(r) for r in brk.rows] == [
        "ProfilerStep#1",
        "Torch-Compiled Region: 0/0",
        "Torch-Compiled Region: 1/0",
    ]
    replay = found["graph_replay"]
    assert replay.severity == "info" and "Partial because of it" in replay.message
    assert [trace.name_of(r) for r in replay.rows] == ["cudaGraphLaunch"]
    # 5 µs of guards in a 1 ms step: under the threshold.
    assert "guard_overhead" not in found


def test_guard_overhead_fires_from_five_percent_of_a_step():
    def trace(guard_us):
        events = [X("ProfilerStep#1", 0, 1000, cat="user_annotation")]
        for i in range(10):
            events += [
                X("TorchDynamo Cache Lookup", i * 100, guard_us),
                X("Torch-Compiled Region: 0/0", i * 100 + 50, 20),
            ]
        return load(events)

    rules = {f.rule: f for f in TraceSession(trace(20)).findings}
    assert "guard_overhead" in rules  # 200 µs of 1000
    assert "10 calls" in rules["guard_overhead"].message
    assert "guard_overhead" not in {f.rule for f in TraceSession(trace(4)).findings}  # 4 %


def test_compile_rules_stay_silent_on_an_eager_trace():
    events = [
        X("aten::mm", 0, 20),
        R("cudaLaunchKernel", 5, 5, corr=1),
        G("ampere_sgemm", 30, 50, corr=1),
    ]
    rules = {f.rule for f in TraceSession(load(events)).findings}
    assert not rules & {
        "recompiles",
        "compile_in_window",
        "likely_graph_breaks",
        "guard_overhead",
        "graph_replay",
    }


# -- the corpus ------------------------------------------------------------------------------

TRACELENS = CORPUS / "tracelens"


def corpus_session(name):
    path = TRACELENS / name
    if not path.exists():
        pytest.skip(f"{name} is not in the corpus")
    return TraceSession(load_file(str(path)))


@pytest.mark.corpus
def test_corpus_torch_compile_triton_trace():
    """One compiled frame (0/0) with its FX graph, four Inductor kernels, one guard call."""
    session = corpus_session("torch_compile_triton_trace.json.gz")
    c = session.compiled
    assert [r.label for r in c.outer_regions()] == ["0/0"]
    assert [(f.frame, f.compile_ids) for f in c.frames] == [(0, (0,))]
    assert c.guard_calls == 1 and c.guard_ns > 0
    mix = {m.kind: m.count for m in c.fusion_mix()}
    assert mix == {"poi": 2, "red": 2}
    # Every kernel is launched from inside the compiled region.
    assert c.total_ns > 0 and c.compiled_ns == c.total_ns
    assert c.replay is None and c.likely_graph_breaks == () and not c.recompiled_frames()
    section = build_summary(session)["compile"]
    assert section["compiled_share"] == 1.0 and section["graph_replay"] is None


@pytest.mark.corpus
def test_corpus_vllm_full_graph_replay_is_noted():
    """One hipGraphLaunch replays 421 of the trace's 425 kernels."""
    session = corpus_session("vllm_decode_full_graph_execution.json.gz")
    c = session.compiled
    assert (c.launch.graph_launches, c.launch.graph_kernels) == (1, 421)
    (graph,) = c.graphs
    assert graph.kernels == 421 and session.trace.name_of(graph.row) == "hipGraphLaunch"
    replay = c.replay
    assert replay is not None and replay.gap_ns == graph.gap_ns
    assert replay.gpu_ns == graph.gpu_ns > 0.9 * c.total_ns
    # The Inductor kernels replayed are compiled code; the rest of the graph is not named so.
    assert 0 < c.compiled_ns < c.total_ns
    rules = {f.rule: f for f in session.findings}
    assert rules["graph_replay"].severity == "info"
    section = build_summary(session)["compile"]
    assert section["graph_replay"]["kernels"] == 421 and section["graph_replay"]["partial"]
    assert section["launch"]["kernels_per_graph_launch"] == 421.0
    # The GPU is ~99.8 % busy, and no idle inside the replay is blamed on the host (TraceLens
    # reported 26 % idle here).
    (gpu,) = build_summary(session)["gpu"]
    window = gpu["window_end_us"] - gpu["window_start_us"]
    assert gpu["idle_us"] < 0.01 * window and gpu["idle_by_cause"]["host_wait"] == 0.0


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name",
    [
        "vllm_piecewise_graph_capture_rank_0.1773709679453551615.pt.trace.json.gz",
        "sglang_decode_capture_bs_32_rank0.json.gz",
    ],
)
def test_corpus_graph_capture_traces(name):
    """Capture-phase traces: graph capture in the window, sensible compile sections."""
    session = corpus_session(name)
    c = session.compiled
    section = build_summary(session)["compile"]
    assert 0 <= c.compiled_ns <= c.total_ns
    assert section["launch"]["kernels"] == c.kernels == int(session.classes.kernel.sum())
    # Launch calls made while capturing ran nothing: the note says so.
    replay = c.replay
    assert replay is not None and replay.captures >= 1 and replay.captured_launches > 0
    assert replay.launches == 0
    assert section["graph_replay"]["captures"] == replay.captures
    assert any(note.startswith("graph capture inside the window") for note in replay.partial)
    assert "graph_replay" in {f.rule for f in session.findings}
    json.dumps(section)


@pytest.mark.corpus
def test_corpus_vllm_piecewise_capture_runs_attention_eager():
    """vLLM's piecewise compilation: 25 compiled FX graphs, each captured into a graph (their
    kernels never ran in the window); the attention ops between the pieces run eager."""
    session = corpus_session(
        "vllm_piecewise_graph_capture_rank_0.1773709679453551615.pt.trace.json.gz"
    )
    c = session.compiled
    assert {r.kind for r in c.regions} == {REGION_FX_GRAPH} and len(c.regions) == 25
    assert c.replay is not None and c.replay.captures == 25
    islands = [e.name for e in c.eager_islands]
    assert "vllm::unified_attention_with_output" in islands[:3]
    assert c.compiled_ns == 0


# -- the text report ---------------------------------------------------------------------------


def report_text(trace):
    from kinetoscope.present.report_summary import render_text, summary_tables

    session = TraceSession(trace)
    return render_text(summary_tables(session, build_summary(session)), 120)


def test_report_shows_the_compile_tables():
    text = report_text(load(gpu_events()))
    assert "Compiled code and graph replay" in text
    assert "88.000 µs of 148.000 µs 59%" in text
    assert "compile ids 0 (1 call), 1 (1 call)" in text
    assert "Eager islands: operators outside compiled code" in text
    assert "Compiled code per step" in text
    assert "1 graph launch, 2.0 kernels each" in text


def test_report_has_no_compile_tables_for_an_eager_trace():
    events = [X("aten::mm", 0, 20), R("cudaLaunchKernel", 5, 5, corr=1), G("k", 30, 50, corr=1)]
    assert "Compiled code" not in report_text(load(events))


def test_compile_work_is_neither_compiled_nor_eager():
    """A first call compiles inside the window: the compile events (and an autotuning kernel
    launched below them) count as compiling only; a `dynamo` slice holding them, and an op
    holding a compiled region, are containers, not eager islands (their eager children are)."""
    events = [
        X("dynamo", 0, 100),
        X("compile_fx_inner (dynamo_timed)", 10, 80),
        X("triton_poi_fused_add_0", 20, 10),
        R("cudaLaunchKernel", 22, 2, corr=1),
        G("triton_poi_fused_add_0", 30, 5, corr=1),  # autotuning: compile work
        X("wrapper", 200, 100),
        X("aten::zeros", 205, 10),
        R("cudaLaunchKernel", 207, 2, corr=2),
        G("fill_kernel", 210, 4, corr=2),
        X("Torch-Compiled Region: 0/0", 220, 60),
        X("triton_poi_fused_add_0", 230, 10),
        R("cudaLaunchKernel", 232, 2, corr=3),
        G("triton_poi_fused_add_0", 240, 6, corr=3),
    ]
    c = TraceSession(load(events)).compiled
    assert (c.total_ns, c.compiled_ns) == (10_000, 6_000)  # the autotuning kernel left out
    assert (c.kernels, c.launch.kernels, c.launch.launch_calls) == (2, 2, 2)
    assert [(k.name, k.count) for k in c.inductor] == [("triton_poi_fused_add_0", 1)]
    assert [(e.name, e.cpu_ns, e.gpu_ns) for e in c.eager_islands] == [
        ("aten::zeros", 10_000, 4_000)
    ]
    assert (c.compiling.count, c.compiling.ns) == (1, 80_000)


def test_cpu_only_operator_time_leaves_compile_work_out():
    events = [
        X("compile_fx_inner (dynamo_timed)", 0, 50),
        X("aten::empty", 10, 5),
        X("Torch-Compiled Region: 0/0", 100, 20),
        X("cpp_fused_mul_0", 105, 10),
        X("aten::add", 130, 10),
    ]
    c = TraceSession(load(events)).compiled
    # Operator self time: region 10 + cpp 10 (compiled) + add 10; the compile event and the
    # op below it are compile work.
    assert (c.total_ns, c.compiled_ns) == (30_000, 20_000)


@pytest.mark.corpus
def test_corpus_xdit_flux_compiled_and_replayed():
    """Flux under torch.compile with HIP graphs: frame 0 called four times, each call one
    hipGraphLaunch replaying ~1,566 kernels; the eager linear layers outside are islands."""
    session = corpus_session("xdit_flux.1_aiter_sage_profile_trace_rank_0.json.gz")
    c = session.compiled
    assert [(f.frame, f.compile_ids, f.calls) for f in c.frames] == [(0, (0,), (4,))]
    assert c.launch.graph_launches == 4 and c.replay is not None
    assert c.replay.kernels == c.launch.graph_kernels == 6_264
    # Replayed kernels are launched inside the compiled region: all compiled.
    assert c.compiled_ns == c.replay.gpu_ns and c.share > 0.8
    assert all(session.trace.name_of(g.row) == "hipGraphLaunch" for g in c.graphs)
    assert all(c.in_compiled[g.row] for g in c.graphs)
    trace = session.trace
    # The innermost region above each launch: the compiled FX graph the graph was captured in.
    assert all(trace.name_of(g.region_row).startswith("## Call CompiledFxGraph") for g in c.graphs)
    assert all(g.caller_row >= 0 for g in c.graphs)
    assert c.eager_islands[0].name == "aten::linear"
    assert {m.kind for m in c.fusion_mix()} == {"poi", "red", "per"}
    assert c.likely_graph_breaks == () and not c.recompiled_frames()
    rules = {f.rule for f in session.findings}
    assert "graph_replay" in rules and "recompiles" not in rules


@pytest.mark.corpus
def test_corpus_b200_compiles_inside_the_window():
    session = corpus_session("b200_eager_trace.json.gz")
    c = session.compiled
    assert c.compiling.count > 0 and c.compiling.ns > 0
    found = {f.rule: f for f in session.findings}
    assert found["compile_in_window"].rows == c.compiling.rows


# -- any mix of markers ------------------------------------------------------------------------

MARKER_NAMES = [
    "Torch-Compiled Region: 0/0",
    "Torch-Compiled Region: 0/1",
    "Torch-Compiled Region: 3/0",
    "Torch-Compiled Region: 99999999999999999999/0",
    "CompiledFunction",
    "## Call CompiledFxGraph x ##",
    "TorchDynamo Cache Lookup",
    "compile_fx_inner (dynamo_timed)",
    "Lazy Function Loading",
    "triton_red_fused_sum_1",
    "cpp_fused_add_0",
    "aten::mm",
    "ProfilerStep#1",
]
RUNTIME_NAMES = [
    "cudaLaunchKernel",
    "cudaGraphLaunch",
    "hipStreamBeginCapture",
    "hipStreamEndCapture",
]


def test_any_mix_of_markers_gives_consistent_numbers():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    cpu = st.tuples(st.sampled_from(MARKER_NAMES), st.integers(0, 200), st.integers(-5, 120)).map(
        lambda e: X(e[0], e[1], e[2], cat="user_annotation" if "Step" in e[0] else "cpu_op")
    )
    runtime = st.tuples(
        st.sampled_from(RUNTIME_NAMES), st.integers(0, 200), st.integers(0, 10), st.integers(1, 6)
    ).map(lambda e: R(e[0], e[1], e[2], corr=e[3]))
    gpu = st.tuples(
        st.sampled_from(["triton_poi_fused_add_0", "k", "cpp_fused_x_1"]),
        st.integers(0, 400),
        st.integers(0, 30),
        st.integers(1, 8),
        st.integers(-1, 1),
    ).map(lambda e: G(e[0], e[1], e[2], corr=e[3], device=e[4]))

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.one_of(cpu, runtime, gpu), max_size=30))
    def check(events):
        session = TraceSession(load(events))
        c = session.compiled
        assert 0 <= c.compiled_ns <= c.total_ns
        assert c.short_kernels <= c.kernels == c.launch.kernels
        assert c.launch.graph_kernels <= c.launch.kernels
        assert sum(s.total_ns for s in c.steps) <= c.total_ns
        for step in c.steps:
            assert 0 <= step.compiled_ns <= step.total_ns
        if c.replay is not None:
            assert 0 <= c.replay.host_wait_inside_ns <= c.replay.idle_inside_ns
        json.dumps(build_summary(session)["compile"])
        assert isinstance(session.findings, list)  # every rule runs

    check()


def test_report_shows_kernel_efficiency(write_trace):
    path = write_trace(efficiency_trace("NVIDIA H100 80GB HBM3"))
    text = report_text(load_file(str(path)))
    assert "Kernel efficiency (kernel_flop, kernel_num_gb)" in text
    # 2 TFLOP/s, 500 GB/s, 15% of the H100's 3350 GB/s.
    assert "2.00" in text and "500.0" in text and "15%" in text
