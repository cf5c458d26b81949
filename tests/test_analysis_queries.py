"""The queries the viewer uses: gap navigation, drill-down, launchers, memory curve, and the
vectorised building blocks against brute force."""

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.intervals import (
    Union,
    nesting_depth,
    next_greater,
    previous_at_least,
    subtree_stops,
)
from kinetoscope.analysis.kernels import top_launcher
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


def load_events(events, **header):
    return loads(json.dumps({"traceEvents": events, **header}).encode())


def gap_trace():
    # Device 0 gaps: [10,20) 10 µs, [30,100) 70 µs, [110,115) 5 µs; device 1: [5,50) 45 µs.
    events = [
        K("a", 0, 10),
        K("b", 20, 10),
        K("c", 100, 10),
        K("d", 115, 5),
        K("e", 0, 5, device=1),
        K("f", 50, 5, device=1),
    ]
    return TraceSession(load_events(events))


def test_next_and_previous_gap_by_time_device_and_length():
    a = gap_trace()
    gaps = a.idle.gaps
    starts = gaps.start.tolist()
    assert starts == [5000, 10000, 30000, 110000]  # sorted by start, all devices
    assert a.idle.gaps.device.tolist() == [1, 0, 0, 0]
    nxt = gaps.next_gap(10_000)  # strictly after t
    assert gaps.start[nxt] == 30_000
    assert gaps.next_gap(9_999) == 1
    assert gaps.next_gap(0, device=0, min_len=20_000) == 2
    assert gaps.next_gap(30_000, min_len=20_000) == -1
    assert gaps.prev_gap(30_000) == 1
    assert gaps.prev_gap(30_000, device=1) == 0
    assert gaps.prev_gap(5_000) == -1
    assert gaps.gap_at(40_000, device=0) == 2 and gaps.gap_at(40_000) == 0
    assert gaps.gap_at(100_000) == -1
    assert gaps.longest().tolist() == [2, 0, 1, 3]
    assert gaps.longest(2, device=0).tolist() == [2, 1]
    assert gaps.midpoint(2) == 65_000


def test_device_activity_and_union_queries():
    a = gap_trace()
    dev = a.idle.device(0)
    assert dev.window == (0, 120_000)
    assert dev.busy_ns == 35_000 and dev.idle_ns == 85_000
    assert a.idle.device(5) is None
    assert dev.busy.containing(25_000) == 1 and dev.busy.containing(50_000) == -1


def test_instance_drill_down_with_input_shapes():
    events = [
        X("aten::linear", 0, 100, **{"Input Dims": [[8, 16], [32, 16]]}),
        X("aten::mm", 10, 50),
        X("cudaLaunchKernel", 20, 5, cat="cuda_runtime", correlation=3),
        X("aten::add", 70, 10),
        K("gemm", 30, 40, corr=3),
    ]
    trace = load_events(events)
    a = TraceSession(trace)
    linear = a.instance(0)
    assert linear.self_time == 40_000
    assert [trace.name_of(r) for r in linear.children] == ["aten::mm", "aten::add"]
    assert [trace.name_of(r) for r in linear.launched] == ["gemm"]
    assert json.loads(linear.input_shapes) == [[8, 16], [32, 16]]
    assert a.instance(3).input_shapes is None
    assert a.nesting.ancestors(2) == [0, 1]
    assert [trace.name_of(r) for r in a.nesting.descendants(0)] == [
        "aten::mm",
        "cudaLaunchKernel",
        "aten::add",
    ]
    assert top_launcher(a, "kernel", "gemm") == "aten::mm"
    assert top_launcher(a, "kernel", "missing") is None


def test_kernel_launchers_pick_the_operator_with_most_gpu_time():
    events = [
        X("small", 0, 10),
        X("cudaLaunchKernel", 1, 1, cat="cuda_runtime", correlation=1),
        X("small", 20, 10),
        X("cudaLaunchKernel", 21, 1, cat="cuda_runtime", correlation=2),
        X("big", 40, 10),
        X("cudaLaunchKernel", 41, 1, cat="cuda_runtime", correlation=3),
        K("k", 100, 2, corr=1),
        K("k", 110, 2, corr=2),
        K("k", 120, 9, corr=3),
        K("lonely", 200, 1),
    ]
    a = TraceSession(load_events(events))
    assert top_launcher(a, "kernel", "k") == "big"
    assert top_launcher(a, "kernel", "lonely") is None


def test_memory_curve_is_time_ordered_and_skips_events_without_ts():
    def mem(ts, alloc):
        event = {
            "ph": "i",
            "s": "t",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": alloc},
        }
        if ts is not None:
            event["ts"] = ts
        return event

    a = TraceSession(load_events([mem(30, 5), mem(10, 7), mem(None, 99), mem(20, 3)]))
    (group,) = a.memory
    assert group.peak_allocated == 99
    ts, alloc, reserved = group.curve(a.trace.memory)
    assert ts.tolist() == [10_000, 20_000, 30_000]
    assert alloc.tolist() == [7, 3, 5]
    assert group.peak_reserved is None


def test_per_step_breakdown_parts():
    events = [
        X("ProfilerStep#1", 0, 100),
        K("gemm", 0, 40),
        K("ncclKernel_AllReduce", 30, 30),  # 10 µs under gemm, 20 µs exposed
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": 8,
            "ts": 55,
            "dur": 15,
            "args": {"device": 0},
        },  # 5 µs under nccl, 10 exposed
        X("cudaLaunchKernel", 90, 5, cat="cuda_runtime"),
    ]
    steps = TraceSession(load_events(events)).steps
    assert steps.compute.tolist() == [40_000]
    assert steps.comm.tolist() == [20_000]
    assert steps.comm_total.tolist() == [30_000]
    assert steps.memory.tolist() == [10_000]
    assert steps.idle.tolist() == [30_000]
    assert steps.gpu_busy.tolist() == [70_000]
    assert steps.runtime.tolist() == [5_000]


# -- building blocks against brute force ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 8)), max_size=40))
def test_nearest_greater_searches(items):
    items.sort(key=lambda item: item[0])  # segments are contiguous
    segment = np.array([s for s, _ in items], dtype=np.int64)
    values = np.array([v for _, v in items], dtype=np.int64)
    first = np.searchsorted(segment, segment, "left").astype(np.int64)
    stop = np.searchsorted(segment, segment, "right").astype(np.int64)
    prev = previous_at_least(values, first)
    nxt = next_greater(values, stop)
    for i in range(len(items)):
        expect = next((j for j in range(i - 1, first[i] - 1, -1) if values[j] >= values[i]), -1)
        assert prev[i] == expect
        expect = next((j for j in range(i + 1, stop[i]) if values[j] > values[i]), stop[i])
        assert nxt[i] == expect
    # Worked a block at a time (big traces): the same answers, whatever the block size.
    for block in (1, 2, 3, 7):
        assert previous_at_least(values, first, block=block).tolist() == prev.tolist()
        assert next_greater(values, stop, block=block).tolist() == nxt.tolist()
    # The nesting finds the subtrees from the parents alone: the same stops, in either width.
    assert subtree_stops(prev).tolist() == nxt.tolist()
    assert subtree_stops(prev.astype(np.int32)).tolist() == nxt.tolist()
    depth = nesting_depth(nxt)
    for i in range(len(items)):
        count, k = 0, prev[i]
        while k >= 0:
            count, k = count + 1, prev[k]
        assert depth[i] == count


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(-3, 12)), max_size=30),
    st.lists(st.tuples(st.integers(-5, 70), st.integers(-5, 70)), max_size=5),
)
def test_union_lengths_and_clipping(intervals, windows):
    starts = np.array([a for a, _ in intervals], dtype=np.int64)
    ends = np.array([a + d for a, d in intervals], dtype=np.int64)
    union = Union.of(starts, ends)
    covered = {t for a, b in zip(starts.tolist(), ends.tolist()) for t in range(a, b)}
    assert union.total == len(covered)
    assert np.all(union.end > union.start)
    assert np.all(union.start[1:] > union.end[:-1])  # disjoint and not touching
    gap_starts, gap_ends = union.gaps
    assert np.all(gap_ends > gap_starts)
    for lo, hi in windows:
        expected = len([t for t in covered if lo <= t < hi])
        assert union.covered(lo, hi)[0] == expected
    if windows:
        lo = np.array([w[0] for w in windows])
        hi = np.array([w[1] for w in windows])
        expected = [len([t for t in covered if a <= t < b]) for a, b in windows]
        assert union.covered(lo, hi).tolist() == expected


def test_subtree_stops_of_deep_chains():
    """Chains of last children far longer than one pointer-doubling round reaches: a nest 300
    deep, siblings at every level, in two segments."""
    values = np.concatenate(
        (np.repeat(np.arange(300, 0, -1), 2), np.arange(50, 0, -1), [7, 7, 7])
    ).astype(np.int64)
    segment = np.repeat([0, 1], [600, 53])
    first = np.searchsorted(segment, segment, "left").astype(np.int64)
    stop = np.searchsorted(segment, segment, "right").astype(np.int64)
    prev = previous_at_least(values, first)
    assert subtree_stops(prev).tolist() == next_greater(values, stop).tolist()
