"""Range-restricted statistics and drill-down queries, against whole-trace analyses and brute force."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.drilldown import (
    child_split,
    group_by_shape,
    instances_of,
    kernel_launchers,
    kernels_launched,
    shape_split,
    subtree_gpu,
)
from kinetoscope.analysis.operators import compute_operators
from kinetoscope.analysis.ranges import (
    clip,
    idle_in_range,
    kernels_in_range,
    operators_in_range,
)
from kinetoscope.parser import loads
from test_analysis_property import EVENTS


def X(name, ts, dur, cat="cpu_op", tid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def K(name, ts, dur, corr):
    args = {"device": 0, "stream": 7, "correlation": corr}
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def small_trace():
    """Two linear instances (one with shapes), their mm children, launches and kernels."""
    events = [
        X("aten::linear", 0, 100, **{"Input Dims": [[4, 8]]}),
        X("aten::mm", 10, 50),
        X("cudaLaunchKernel", 20, 5, cat="cuda_runtime", correlation=1),
        X("aten::add", 70, 20),
        X("cudaLaunchKernel", 75, 5, cat="cuda_runtime", correlation=2),
        X("aten::linear", 200, 60, **{"Input Dims": [[2, 8]]}),
        X("aten::mm", 210, 30),
        X("cudaLaunchKernel", 215, 5, cat="cuda_runtime", correlation=3),
        X("aten::linear", 300, 10),  # no shape, nothing below
        K("gemm", 30, 40, 1),
        K("add_k", 80, 10, 2),
        K("gemm", 230, 20, 3),
    ]
    return loads(json.dumps({"traceEvents": events}).encode())


def group_of(a, name):
    trace, groups = a.trace, a.cpu_groups
    return next(g for g in range(len(groups)) if trace.strings[groups.name[g]] == name)


def names(trace, groups, ids):
    return [trace.strings[groups.name[int(g)]] for g in ids]


def test_drilldown_of_one_operator_by_hand():
    trace = small_trace()
    a = TraceSession(trace)
    linear = group_of(a, "aten::linear")
    rows = instances_of(trace, a.cpu_groups, linear)
    assert trace.dur[rows].tolist() == [100_000, 60_000, 10_000]

    split = child_split(trace, a.nesting, a.cpu_groups, linear)
    assert split.inclusive == 170_000 == a.operators.incl[linear]
    assert split.self_time == 100_000 - 70_000 + 60_000 - 30_000 + 10_000
    assert names(trace, a.cpu_groups, split.child_group) == ["aten::mm", "aten::add"]
    assert split.child_count.tolist() == [2, 1]
    assert split.child_time.tolist() == [80_000, 20_000]
    assert split.self_time + int(split.child_time.sum()) == split.inclusive

    launched = kernels_launched(trace, a.nesting, a.links, a.cpu_groups, a.gpu_groups, linear)
    assert names(trace, a.gpu_groups, launched.kernel_group) == ["gemm", "add_k"]
    assert launched.count.tolist() == [2, 1]
    assert launched.total.tolist() == [60_000, 10_000]
    assert launched.total_time == a.operators.gpu_total[linear]

    assert subtree_gpu(trace, a.nesting, a.links, rows).tolist() == [50_000, 20_000, 0]
    shapes = shape_split(trace, rows)
    shown = [trace.strings[s] if s >= 0 else None for s in shapes.shape]
    assert shown == ["[[4,8]]", "[[2,8]]", None]
    assert shapes.count.tolist() == [1, 1, 1]


def test_runtime_groups_own_launches_count_in_their_kernels():
    trace = small_trace()
    a = TraceSession(trace)
    launch = group_of(a, "cudaLaunchKernel")
    launched = kernels_launched(trace, a.nesting, a.links, a.cpu_groups, a.gpu_groups, launch)
    assert launched.count.sum() == 3
    assert launched.total_time == 70_000


def test_kernel_launchers_pick_the_operator_with_most_time():
    trace = small_trace()
    a = TraceSession(trace)
    k = a.kernels
    top = kernel_launchers(k.launcher_row, a.links.gpu_rows, trace, a.gpu_groups, a.cpu_groups)
    by_name = {
        trace.strings[a.gpu_groups.name[g]]: (
            trace.strings[a.cpu_groups.name[top.top_group[g]]],
            int(top.n_groups[g]),
        )
        for g in range(len(a.gpu_groups))
    }
    assert by_name == {"gemm": ("aten::mm", 1), "add_k": ("aten::add", 1)}


def test_group_by_shape_splits_groups_and_keeps_totals():
    trace = small_trace()
    a = TraceSession(trace)
    shaped = group_by_shape(trace, a.classes.cpu, a.cpu_groups)
    table = compute_operators(trace, shaped.nesting, shaped.groups, a.links)
    linear = [
        g
        for g in range(len(shaped.groups))
        if trace.strings[shaped.groups.name[g]] == "aten::linear"
    ]
    assert len(linear) == 3
    assert sorted(table.count[linear].tolist()) == [1, 1, 1]
    assert sorted(table.incl[linear].tolist()) == [10_000, 60_000, 100_000]
    assert int(table.excl.sum()) == int(a.operators.excl.sum())
    assert int(table.gpu_self.sum()) == int(a.operators.gpu_self.sum())


def test_range_clips_operators_kernels_and_idle():
    trace = small_trace()
    a = TraceSession(trace)
    t0, t1 = 50_000, 220_000  # mid first linear .. inside the second mm
    ops = operators_in_range(trace, a.nesting, a.cpu_groups, a.links, t0, t1)
    linear, mm = group_of(a, "aten::linear"), group_of(a, "aten::mm")
    assert ops.count[linear] == 2  # the one at 300 µs is outside
    assert ops.incl[linear] == 50_000 + 20_000
    # mm: [10,60) clipped to [50,60) and [210,240) clipped to [210,220).
    assert ops.incl[mm] == 20_000
    # linear self: first: 50 clipped - (10 mm + 20 add) = 20; second: 20 - 10 = 10.
    assert ops.excl[linear] == 30_000
    # gemm [30,70) clipped to 20, launched under mm; gemm [230,250) is outside the range.
    assert ops.gpu_self[mm] == 20_000
    kernels = kernels_in_range(trace, a.kernels, a.links, t0, t1)
    totals = {trace.strings[a.gpu_groups.name[g]]: int(kernels.total[g]) for g in range(2)}
    assert totals == {"gemm": 20_000, "add_k": 10_000}
    (idle,) = idle_in_range(a.idle, t0, t1)
    # GPU window [30, 250); range part [50, 220): busy [50,70) and [80,90).
    assert (idle.window, idle.busy, idle.idle) == (170_000, 30_000, 140_000)
    assert sum(idle.idle_by_cause) == idle.idle
    assert idle.gaps == 2


def test_clip_keeps_zero_length_events_on_the_closed_range():
    start = np.array([0, 10, 10, 20, 5])
    dur = np.array([10, 0, 5, 0, 0])
    length, inside = clip(start, dur, 10, 20)
    assert length.tolist() == [0, 0, 5, 0, 0]
    assert inside.tolist() == [False, True, True, True, False]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVENTS, st.integers(0, 70), st.integers(0, 70))
def test_whole_range_equals_whole_trace_and_parts_add_up(events, x, y):
    trace = loads(json.dumps({"traceEvents": events}).encode())
    if trace.slice_start_min is None:
        return
    a = TraceSession(trace)
    lo, hi = trace.slice_start_min, trace.slice_end_max
    whole = operators_in_range(trace, a.nesting, a.cpu_groups, a.links, lo, hi)
    ops = a.operators
    for field in ("count", "incl", "excl", "gpu_self", "gpu_total"):
        assert getattr(whole, field).tolist() == getattr(ops, field).tolist(), field
    kernels = kernels_in_range(trace, a.kernels, a.links, lo, hi)
    for field in ("count", "total", "min", "max"):
        assert getattr(kernels, field).tolist() == getattr(a.kernels, field).tolist(), field
    for got, dev in zip(idle_in_range(a.idle, lo, hi), a.idle.devices):
        assert (got.busy, got.idle, got.idle_by_cause) == (
            dev.busy_ns,
            dev.idle_ns,
            dev.idle_by_cause,
        )

    # Two adjacent ranges split clipped times exactly (counts may count a slice in both).
    t0, t1 = sorted((x * 1000, y * 1000))
    left = operators_in_range(trace, a.nesting, a.cpu_groups, a.links, lo, t0)
    mid = operators_in_range(trace, a.nesting, a.cpu_groups, a.links, t0, t1)
    right = operators_in_range(trace, a.nesting, a.cpu_groups, a.links, t1, hi)
    # Self time is clamped at 0 where overlapping siblings outgrow their parent, so it is not
    # additive in general; the hand-built test above checks it.
    fields = ("incl", "gpu_self", "gpu_total")
    if lo <= t0 <= t1 <= hi:
        for field in fields:
            parts = getattr(left, field) + getattr(mid, field) + getattr(right, field)
            assert parts.tolist() == getattr(ops, field).tolist(), field
