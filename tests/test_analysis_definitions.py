"""Each definition of the summary contract on a tiny hand-built trace, with hand-computed values.

Every trace goes through both the vectorised analysis and the plain reference implementation,
so a wrong reading of the contract in either shows up here, not only a disagreement.
"""

import json

import numpy as np
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import loads
from spec_reference import contract_view, summarize


def X(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def K(name, ts, dur, corr=None, device=0, stream=7, cat="kernel"):
    args = {"device": device, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def R(name, ts, dur, corr, pid=1, tid=1):
    return X(name, ts, dur, cat="cuda_runtime", pid=pid, tid=tid, correlation=corr)


def check(events, **header):
    """Summary of a trace by both implementations; they must agree exactly on every key of the
    contract. Returns the contract's part of ours (keys the document adds are not compared)."""
    doc = {"schemaVersion": 1, "traceEvents": events, **header}
    ours = build_summary(loads(json.dumps(doc).encode()))
    reference = summarize(json.loads(json.dumps(doc)))
    compared = contract_view(ours, reference)
    assert json.dumps(compared, sort_keys=True) == json.dumps(reference, sort_keys=True)
    return compared


def ops(summary):
    return {(o["cat"], o["name"]): o for o in summary["operators"]}


# -- conventions ----------------------------------------------------------------------------


def test_time_conversion_rounds_floats_half_even_and_keeps_ints_exact():
    s = check([X("a", 0.0025, 0.0035), X("b", 1700000000000001, 2)])
    # 0.0025 µs -> 2.5 ns -> 2 (half to even); 0.0035 µs -> 3.5 ns -> 4; int µs exact.
    a = ops(s)[("cpu_op", "a")]
    assert a["excl_us"] == 0.004
    assert s["trace"]["start_us"] == 0.002
    assert s["trace"]["end_us"] == 1700000000000003.0


def test_bad_durations_count_as_zero_and_events_without_ts_take_no_part():
    events = [
        X("neg", 10, -5),
        X("bool", 10, True),
        X("text", 10, "7"),
        {"ph": "X", "cat": "cpu_op", "name": "missing", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "X", "cat": "cpu_op", "name": "nots", "pid": 1, "tid": 1, "dur": 5},
        {"ph": "X", "name": "nocat", "pid": 1, "tid": 1, "ts": 12, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "boolts", "pid": 1, "tid": 1, "ts": True, "dur": 1},
        7,
        {"name": "no phase"},
    ]
    s = check(events)
    assert s["trace"]["events"] == 9
    assert s["trace"]["by_phase"] == {"X": 7, "?": 2}
    assert s["trace"]["by_category"] == {"cpu_op": 6, "": 1}
    names = {o["name"]: o for o in s["operators"]}
    assert "nots" not in names and "boolts" not in names
    for name in ("neg", "bool", "text", "missing"):
        assert names[name]["incl_us"] == 0.0
    assert names["nocat"]["cat"] == ""
    assert s["trace"]["start_us"] == 10.0 and s["trace"]["end_us"] == 13.0


def test_lanes_keep_int_and_string_ids_apart():
    # Same numbers, but pid 1 vs "1": two lanes, so no nesting and both are outermost.
    s = check([X("outer", 0, 10), X("inner", 2, 3, pid="1")])
    o = ops(s)
    assert o[("cpu_op", "outer")]["excl_us"] == 10.0
    assert o[("cpu_op", "inner")]["excl_us"] == 3.0


def test_gpu_device_from_args_then_digit_pid_then_minus_one():
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "007", "tid": 1, "ts": 0, "dur": 1},
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "k",
            "pid": 3,
            "tid": 1,
            "ts": 0,
            "dur": 1,
            "args": {"device": 5},
        },
        {"ph": "X", "cat": "MEMCPY", "name": "m", "pid": "GPU 1", "tid": 1, "ts": 0, "dur": 1},
        {"ph": "X", "cat": "gpu_memset", "name": "z", "pid": "", "tid": 1, "ts": 0, "dur": 1},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 2,
            "tid": 1,
            "ts": 0,
            "dur": 1,
            "args": {"device": "2"},
        },
    ]
    s = check(events)
    assert [g["device"] for g in s["gpu"]] == [-1, 2, 5, 7]
    minus_one = s["gpu"][0]
    assert (minus_one["kernels"], minus_one["memcpys"], minus_one["memsets"]) == (0, 1, 1)


def test_trace_category_and_gpu_annotations_are_not_cpu_slices():
    events = [
        X("whole", 0, 100, cat="Trace"),
        X("ann", 0, 50, cat="gpu_user_annotation"),
        X("sync", 0, 50, cat="cuda_sync"),
        X("op", 10, 5),
    ]
    s = check(events)
    assert [o["name"] for o in s["operators"]] == ["op"]
    assert s["operators"][0]["incl_us"] == 5.0


def test_first_runtime_event_in_file_order_wins_a_correlation():
    events = [
        X("late_op", 50, 20),
        R("cudaLaunchKernel", 55, 2, corr=1),  # first in file order, inside late_op
        X("early_op", 0, 20),
        R("cudaLaunchKernel", 5, 2, corr=1),  # earlier in time, second in file
        K("k", 60, 4, corr=1),
    ]
    o = ops(check(events))
    assert o[("cpu_op", "late_op")]["gpu_self_us"] == 4.0
    assert o[("cpu_op", "early_op")]["gpu_self_us"] == 0.0


def test_correlation_must_be_a_json_integer_on_both_sides():
    events = [
        X("op", 0, 20),
        R("cudaLaunchKernel", 1, 2, corr="1"),
        K("k", 5, 4, corr=1),
        X("op2", 30, 20),
        R("cudaLaunchKernel", 31, 2, corr=2),
        K("k", 40, 4, corr=True),
    ]
    o = ops(check(events))
    assert o[("cpu_op", "op")]["gpu_self_us"] == 0.0
    assert o[("cpu_op", "op2")]["gpu_self_us"] == 0.0


# -- nesting --------------------------------------------------------------------------------


def nest(events):
    trace = loads(json.dumps({"traceEvents": events}).encode())
    nesting = TraceSession(trace).nesting
    parents = {}
    for row in range(len(trace)):
        parent = int(nesting.parent[row])
        parents[trace.name_of(row)] = trace.name_of(parent) if parent >= 0 else None
    return parents, trace, nesting


def test_partial_overlap_makes_a_sibling_not_a_child():
    events = [X("A", 0, 10), X("B", 5, 10), X("C", 6, 2)]
    parents, _, _ = nest(events)
    assert parents == {"A": None, "B": None, "C": "B"}
    o = ops(check(events))
    # A has no children: its self time is its whole duration.
    assert o[("cpu_op", "A")]["excl_us"] == 10.0
    assert o[("cpu_op", "B")]["excl_us"] == 8.0


def test_zero_duration_slice_at_parent_end_is_a_child():
    events = [X("P", 0, 10), X("Z", 10, 0), X("after", 11, 3), X("same_start", 11, 0)]
    parents, _, _ = nest(events)
    # Z starts where P ends; its end (10) is not before P's end, so P stays on the stack.
    assert parents["Z"] == "P"
    # `after` ends at 14 > 10: Z and P are popped, it is a root.
    assert parents["after"] is None
    # Equal starts: the longer slice comes first, so the zero-duration one is its child.
    assert parents["same_start"] == "after"
    o = ops(check(events))
    assert o[("cpu_op", "P")]["excl_us"] == 10.0


def test_equal_starts_longer_first_then_file_order():
    events = [X("short", 0, 4), X("long", 0, 10), X("twin1", 20, 5), X("twin2", 20, 5)]
    parents, trace, nesting = nest(events)
    assert parents["short"] == "long"
    assert parents["twin2"] == "twin1"
    depth = {trace.name_of(r): int(nesting.depth[r]) for r in range(len(trace))}
    assert depth == {"short": 1, "long": 0, "twin1": 0, "twin2": 1}
    o = ops(check(events))
    assert o[("cpu_op", "long")]["excl_us"] == 6.0
    assert o[("cpu_op", "twin1")]["excl_us"] == 0.0


def test_self_time_never_negative_and_children_are_direct_only():
    # Children overlap each other (partial overlap siblings), their sum exceeds the parent.
    events = [X("P", 0, 10), X("c1", 0, 7), X("c2", 5, 5), X("g", 1, 2)]
    parents, _, _ = nest(events)
    assert parents == {"P": None, "c1": "P", "c2": "P", "g": "c1"}
    o = ops(check(events))
    assert o[("cpu_op", "P")]["excl_us"] == 0.0  # max(0, 10 - 12)
    assert o[("cpu_op", "c1")]["excl_us"] == 5.0


def test_exclusive_can_exceed_inclusive_with_overlapping_siblings_of_one_group():
    # P = c1 = c2 by name; c1 and c2 overlap (siblings), so P's self time floors at 0 while the
    # children's self times add up to more than P's duration.
    events = [X("f", 0, 10), X("f", 0, 7), X("f", 5, 5)]
    f = ops(check(events))[("cpu_op", "f")]
    assert (f["incl_us"], f["excl_us"]) == (10.0, 12.0)


def test_outermost_instances_with_recursion():
    events = [X("f", 0, 100), X("g", 10, 50), X("f", 20, 10), X("f", 200, 7)]
    o = ops(check(events))
    f = o[("cpu_op", "f")]
    assert f["count"] == 3
    assert f["incl_us"] == 107.0  # the inner f is not outermost
    assert f["excl_us"] == 50.0 + 10.0 + 7.0


def test_same_name_other_category_is_another_group():
    events = [X("f", 0, 100), X("f", 10, 20, cat="user_annotation")]
    o = ops(check(events))
    assert o[("cpu_op", "f")]["incl_us"] == 100.0
    assert o[("user_annotation", "f")]["incl_us"] == 20.0


# -- GPU time of operators ------------------------------------------------------------------


def test_gpu_self_versus_gpu_total():
    events = [
        X("step", 0, 100, cat="user_annotation"),
        X("linear", 10, 50),
        X("mm", 20, 20),
        R("cudaLaunchKernel", 22, 2, corr=1),
        R("cudaLaunchKernel", 50, 2, corr=2),  # direct child of linear
        K("gemm", 30, 8, corr=1),
        K("add", 60, 3, corr=2),
        K("orphan", 80, 5, corr=99),
    ]
    o = ops(check(events))
    assert o[("cpu_op", "mm")]["gpu_self_us"] == 8.0
    assert o[("cpu_op", "mm")]["gpu_total_us"] == 8.0
    assert o[("cpu_op", "linear")]["gpu_self_us"] == 3.0
    assert o[("cpu_op", "linear")]["gpu_total_us"] == 11.0
    assert o[("user_annotation", "step")]["gpu_self_us"] == 0.0
    assert o[("user_annotation", "step")]["gpu_total_us"] == 11.0
    # The runtime call itself is never its own descendant.
    launch = o[("cuda_runtime", "cudaLaunchKernel")]
    assert launch["gpu_self_us"] == 0.0 and launch["gpu_total_us"] == 0.0


def test_gpu_total_counts_each_launch_once_under_recursion():
    events = [
        X("f", 0, 100),
        X("f", 10, 50),
        R("cudaLaunchKernel", 20, 2, corr=1),
        K("k", 30, 6, corr=1),
        K("k", 40, 4, corr=1),  # two activities on one correlation both count
    ]
    o = ops(check(events))
    assert o[("cpu_op", "f")]["gpu_self_us"] == 10.0
    assert o[("cpu_op", "f")]["gpu_total_us"] == 10.0


def test_runtime_nested_in_runtime():
    events = [
        R("cudaGraphLaunch", 0, 20, corr=5),
        R("cuLaunchKernel", 2, 3, corr=6),
        K("a", 30, 4, corr=5),
        K("b", 40, 2, corr=6),
    ]
    o = ops(check(events))
    graph = o[("cuda_runtime", "cudaGraphLaunch")]
    assert graph["gpu_self_us"] == 2.0  # b's launcher is its child
    assert graph["gpu_total_us"] == 2.0


# -- GPU busy, idle, gaps -------------------------------------------------------------------


def test_busy_union_over_streams_and_window():
    events = [
        K("a", 0, 10, stream=7),
        K("b", 5, 10, stream=8),  # overlaps a on another stream
        K("c", 15, 5, stream=7),  # touches b: no gap
        K("d", 100, 0),  # dur 0 is not busy and does not extend the window
        K("e", 50, 10),
    ]
    g = check(events)["gpu"][0]
    assert g["kernels"] == 5
    assert (g["window_start_us"], g["window_end_us"]) == (0.0, 60.0)
    assert g["busy_us"] == 30.0
    assert g["idle_us"] == 30.0
    assert sum(g["idle_by_cause"].values()) == 30.0


def test_device_with_only_zero_duration_activity():
    s = check([K("a", 5, 0), K("b", 9, 0, cat="gpu_memset")])
    assert s["gpu"] == [
        {
            "device": 0,
            "kernels": 1,
            "memcpys": 0,
            "memsets": 1,
            "window_start_us": None,
            "window_end_us": None,
            "busy_us": 0.0,
            "idle_us": 0.0,
            "idle_by_cause": {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0},
        }
    ]
    assert s["idle_gaps"] == []


def test_gap_causes_at_the_30_microsecond_boundary():
    events = [
        K("a", 0, 10),
        K("b", 39.999, 10),  # gap 29.999 µs, no runtime: kernel_wait
        K("c", 79.999, 10),  # gap 30.000 µs exactly: other
        K("d", 200, 10),
    ]
    s = check(events)
    causes = {g["next_gpu_event"]: (g["dur_us"], g["cause"]) for g in s["idle_gaps"]}
    assert causes["b"] == (29.999, "kernel_wait")
    assert causes["c"] == (30.0, "other")
    assert causes["d"] == (110.001, "other")
    assert s["gpu"][0]["idle_by_cause"] == {
        "host_wait": 0.0,
        "kernel_wait": 29.999,
        "other": 140.001,
    }


def test_host_wait_needs_the_launch_strictly_after_the_gap_start():
    events = [
        K("a", 0, 10, corr=1),
        R("cudaLaunchKernel", 11, 1, corr=2),  # asked after the GPU went idle at 10
        K("b", 15, 10, corr=2),  # gap [10, 15): short but host_wait wins
        R("cudaLaunchKernel", 25, 1, corr=3),  # asked exactly when the GPU went idle
        K("c", 30, 10, corr=3),  # gap [25, 30): not host_wait, < 30 µs: kernel_wait
        R("cudaLaunchKernel", 20, 1, corr=4),  # asked before the gap
        K("d", 100, 10, corr=4),  # gap [40, 100): other
    ]
    s = check(events)
    causes = {g["next_gpu_event"]: g["cause"] for g in s["idle_gaps"]}
    assert causes == {"b": "host_wait", "c": "kernel_wait", "d": "other"}


def test_next_gpu_event_is_first_in_file_order_among_equal_starts():
    events = [
        K("a", 0, 10),
        K("late_in_file_long", 20, 30, stream=8),
        K("other_device", 20, 5, device=1),
        K("zero", 20, 0),
        K("first_positive", 20, 5),
    ]
    # File order: late_in_file_long is the first dur>0 activity of device 0 starting at 20.
    s = check(events)
    assert [g["next_gpu_event"] for g in s["idle_gaps"]] == ["late_in_file_long"]


def test_cpu_stack_at_the_gap_midpoint_on_the_runtime_lane():
    events = [
        K("a", 0, 10),
        X("step", 0, 100, cat="user_annotation"),
        X("fwd", 5, 12),  # ends at 17: contains m = 10 + 11 // 2 = 15
        X("ends_at_mid", 12, 3),  # [12, 15): does not contain 15
        X("starts_at_mid", 15, 1),  # [15, 16): contains 15
        X("partial", 14, 20),  # [14, 34): a sibling of fwd, contains 15
        X("other_lane", 0, 100, tid=2),
        R("cudaLaunchKernel", 18, 1, corr=1),
        K("b", 21, 5, corr=1),
    ]
    s = check(events)
    (gap,) = s["idle_gaps"]
    assert (gap["start_us"], gap["dur_us"], gap["cause"]) == (10.0, 11.0, "host_wait")
    assert gap["cpu_stack"] == ["step", "fwd", "partial", "starts_at_mid"]


def test_cpu_stack_empty_without_a_linked_runtime_call():
    s = check([X("op", 0, 100), K("a", 0, 10), K("b", 50, 5)])
    assert s["idle_gaps"][0]["cpu_stack"] == []


def test_top_gaps_are_the_20_longest_with_ties_by_start_then_device():
    events = []
    for i in range(25):  # device 0: gaps of 5 µs except one of 9
        events.append(K("k", i * 20, 15 if i != 3 else 11))
    for i in range(5):  # device 1: gaps of 5 µs at the same starts as device 0's
        events.append(K("k", i * 20, 15, device=1))
    s = check(events)
    gaps = s["idle_gaps"]
    assert len(gaps) == 20
    assert (gaps[0]["device"], gaps[0]["start_us"], gaps[0]["dur_us"]) == (0, 71.0, 9.0)
    rest = [(g["start_us"], g["device"]) for g in gaps[1:5]]
    assert rest == [(15.0, 0), (15.0, 1), (35.0, 0), (35.0, 1)]


# -- operators and kernels tables ------------------------------------------------------------


def test_top_50_operators_ties_by_cat_then_name():
    events = [X(f"op{i:02d}", i * 10, 5, cat="cpu_op" if i % 2 else "a_cat") for i in range(55)]
    events.append(X("big", 1000, 6))
    s = check(events)
    names = [(o["cat"], o["name"]) for o in s["operators"]]
    assert len(names) == 50
    assert names[0] == ("cpu_op", "big")
    assert names[1:4] == [("a_cat", "op00"), ("a_cat", "op02"), ("a_cat", "op04")]
    assert ("cpu_op", "op53") not in names


def test_kernel_statistics_and_exact_mean():
    events = [K("k", 0, 1), K("k", 10, 1), K("k", 20, 0.001), K("m", 30, 2, cat="gpu_memcpy")]
    s = check(events)
    k = {(x["cat"], x["name"]): x for x in s["kernels"]}
    assert k[("kernel", "k")] == {
        "cat": "kernel",
        "name": "k",
        "count": 3,
        "total_us": 2.001,
        "mean_us": 0.667,
        "min_us": 0.001,
        "max_us": 1.0,
    }
    assert [x["name"] for x in s["kernels"]] == ["k", "m"]


# -- steps ----------------------------------------------------------------------------------


def test_steps_clip_gpu_busy_and_dataloader_to_the_step():
    events = [
        X("ProfilerStep#2", 100, 100, cat="user_annotation"),
        X("ProfilerStep#1", 0, 100, cat="user_annotation"),
        X("ProfilerStep#1x", 0, 100),  # not a step: whole name must match
        X("ProfilerStep#9", 0, 100, cat="gpu_user_annotation"),  # not a CPU slice
        X("enumerate(DataLoader)#It.__next__", 90, 20),
        X("enumerate(DataLoader)#It.__next__", 95, 10, tid=2),  # inside the union
        X("enumerate(DataLoader)#ann", 0, 50, cat="gpu_user_annotation"),  # not CPU
        K("a", 80, 40),  # crosses the step boundary at 100
        K("b", 110, 20, device=1),  # other device, overlapping a
        K("c", 190, 30),
    ]
    s = check(events)
    assert s["steps"] == [
        {
            "name": "ProfilerStep#1",
            "start_us": 0.0,
            "dur_us": 100.0,
            "gpu_busy_us": 20.0,
            "dataloader_us": 10.0,
        },
        {
            "name": "ProfilerStep#2",
            "start_us": 100.0,
            "dur_us": 100.0,
            "gpu_busy_us": 40.0,
            "dataloader_us": 10.0,
        },
    ]


def test_steps_with_equal_starts_keep_file_order():
    s = check([X("ProfilerStep#5", 0, 10), X("ProfilerStep#4", 0, 10)])
    assert [x["name"] for x in s["steps"]] == ["ProfilerStep#5", "ProfilerStep#4"]


# -- memory and devices ---------------------------------------------------------------------


def mem(ts, **args):
    event = {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "args": args}
    if ts is not None:
        event["ts"] = ts
    return event


def test_memory_groups_sort_null_keys_first_and_take_maxima():
    events = [
        mem(1, **{"Device Type": 1, "Device Id": 0, "Total Allocated": 100, "Total Reserved": 200}),
        mem(2, **{"Device Type": 1, "Device Id": 0, "Total Allocated": 300, "Total Reserved": 150}),
        mem(None, **{"Device Type": 1, "Device Id": 0, "Total Allocated": 500}),  # no ts: counts
        mem(3, **{"Device Type": 0, "Device Id": -1, "Bytes": 8}),
        mem(4, **{"Device Id": 2, "Total Reserved": 7}),
        {"ph": "I", "name": "[memory]", "ts": 5, "args": {"Total Allocated": 9999}},  # not "i"
    ]
    s = check(events)
    assert s["memory"] == [
        {
            "device_type": None,
            "device_id": 2,
            "peak_allocated_bytes": None,
            "peak_reserved_bytes": 7,
        },
        {
            "device_type": 0,
            "device_id": -1,
            "peak_allocated_bytes": None,
            "peak_reserved_bytes": None,
        },
        {"device_type": 1, "device_id": 0, "peak_allocated_bytes": 500, "peak_reserved_bytes": 200},
    ]


def test_devices_from_device_properties_or_compute_properties():
    props = [{"id": 0, "name": "GPU", "totalGlobalMem": 1024}, {"name": "other"}]
    s = check([], deviceProperties=props, computeProperties=[{"id": 9}])
    assert s["devices"] == [
        {"id": 0, "name": "GPU", "total_memory_bytes": 1024},
        {"id": None, "name": "other", "total_memory_bytes": None},
    ]
    s = check([], computeProperties=[{"id": 9, "name": "V100", "totalGlobalMem": 5}])
    assert s["devices"] == [{"id": 9, "name": "V100", "total_memory_bytes": 5}]
    assert check([])["devices"] == []


def test_empty_trace_has_null_span_and_empty_sections():
    s = check([])
    assert s["trace"]["start_us"] is None and s["trace"]["end_us"] is None
    for key in ("gpu", "idle_gaps", "operators", "kernels", "steps", "memory"):
        assert s[key] == []


def test_large_timestamps_keep_three_decimals_exactly():
    base = 1712195495406752.8  # fractional epoch µs, beyond float64's exact µs/1000 grid
    s = check([X("op", base, 1.25), K("k", base, 2)])
    assert s["trace"]["start_us"] == round(round(base * 1000) / 1000, 3)
    assert s["operators"][0]["excl_us"] == 1.25


def test_numpy_results_are_consistent_for_the_viewer():
    events = [
        X("A", 0, 10),
        X("B", 2, 3),
        R("cudaLaunchKernel", 3, 1, corr=1),
        K("k", 6, 2, corr=1),
    ]
    trace = loads(json.dumps({"traceEvents": events}).encode())
    a = TraceSession(trace)
    assert a.links is a.links, "computed once, then kept"
    launch = 2
    assert a.runtime_of(3) == launch
    assert a.gpu_of(launch).tolist() == [3]
    inst = a.instance(0)
    assert inst.self_time == 7000
    assert inst.children.tolist() == [1]
    assert inst.launched.tolist() == [3]
    assert np.array_equal(a.nesting.depth, [0, 1, 2, -1])
