"""Memory per operator on hand-built traces whose allocations, owners and peaks are known."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis import nesting as nesting_module
from kinetoscope.analysis.classify import classify, group_rows
from kinetoscope.analysis.idle import innermost_at
from kinetoscope.analysis.memory_ops import (
    FREED,
    HOW_TO_RECORD,
    NEVER_FREED,
    REUSED,
    device_label,
    range_max,
)
from kinetoscope.analysis.nesting import compute_nesting
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import loads
from kinetoscope.parser.model import NO_VALUE

PID, TID = 1, 1


def x(name, ts, dur, cat="cpu_op", tid=TID):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur}


def mem(ts, nbytes, total, addr, reserved=4096, device_type=1, device_id=0, tid=TID):
    args = {"Bytes": nbytes, "Addr": addr, "Device Type": device_type, "Device Id": device_id}
    if total is not None:
        args["Total Allocated"] = total
    if reserved is not None:
        args["Total Reserved"] = reserved
    return {
        "ph": "i",
        "s": "t",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": PID,
        "tid": tid,
        "ts": ts,
        "args": args,
    }


A, B, C, E = 0x100, 0x200, 0x300, 0x400


def known_trace() -> dict:
    """Two steps on one thread; CUDA 0 allocations A, B, C, D (A's address again), E; one CPU
    allocation. Times in µs."""
    cpu = [
        x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        x("aten::linear", 10, 40),
        x("aten::empty", 12, 2),
        x("aten::mm", 20, 20),
        x("aten::empty", 22, 2),
        x("aten::relu", 60, 20),
        x("ProfilerStep#2", 100, 100, cat="user_annotation"),
        x("aten::linear", 110, 40),
        x("aten::empty", 112, 2),
    ]
    memory = [
        mem(13, 1000, 1000, A),  # 0: aten::empty in linear#1
        mem(23, 500, 1500, B),  # 1: aten::empty in mm
        mem(30, -1000, 500, A),  # 2: aten::mm
        mem(45, 300, 800, C),  # 3: aten::linear#1 itself
        mem(70, -500, 300, B),  # 4: aten::relu
        mem(65, 64, 64, 0x9000, reserved=None, device_type=0, device_id=-1),  # CPU, in relu
        mem(90, 2000, 2300, A),  # 5: ProfilerStep#1 itself; never freed
        mem(113, 100, 2400, E, reserved=8192),  # 6: aten::empty in linear#2: the peak
        mem(120, -100, 2300, E),  # 7: aten::linear#2
        mem(250, -300, 2000, C),  # 8: outside every slice
    ]
    return {"schemaVersion": 1, "traceEvents": cpu + memory}


def load_dict(document: dict):
    return loads(json.dumps(document).encode())


@pytest.fixture(scope="module")
def known():
    trace = load_dict(known_trace())
    analysis = TraceSession(trace)
    ops = analysis.memory_ops
    return trace, analysis, ops


def group_of(trace, ops, name: str) -> int:
    groups = ops.groups
    names = [trace.strings[int(i)] for i in groups.name]
    return names.index(name)


def test_devices_and_curve(known):
    trace, _, ops = known
    assert [(d.device_type, d.device_id) for d in ops.devices] == [(0, -1), (1, 0)]
    cuda = ops.device(1, 0)
    assert ops.primary is cuda
    assert cuda.label == "CUDA 0" and ops.device(0, -1).label == "CPU"
    assert (cuda.ts // 1000).tolist() == [13, 23, 30, 45, 70, 90, 113, 120, 250]
    assert cuda.allocated.tolist() == [1000, 1500, 500, 800, 300, 2300, 2400, 2300, 2000]
    assert cuda.allocated_recorded
    assert int(cuda.reserved[cuda.peak_reserved]) == 8192


def test_each_event_belongs_to_the_innermost_slice_on_its_thread(known):
    trace, _, ops = known
    cuda = ops.device(1, 0)
    owners = [trace.name_of(int(r)) if r >= 0 else None for r in cuda.owner]
    assert owners == [
        "aten::empty",
        "aten::empty",
        "aten::mm",
        "aten::linear",
        "aten::relu",
        "ProfilerStep#1",
        "aten::empty",
        "aten::linear",
        None,
    ]
    # The two aten::linear events are owned by different instances.
    assert cuda.owner[3] != cuda.owner[7]


def test_self_and_inclusive_net_per_operator(known):
    trace, _, ops = known
    table = ops.device(1, 0).ops

    def row(name):
        g = group_of(trace, ops, name)
        return {
            "allocs": int(table.allocations[g]),
            "allocated": int(table.allocated[g]),
            "frees": int(table.frees[g]),
            "freed": int(table.freed[g]),
            "self_net": int(table.self_net[g]),
            "incl_allocated": int(table.incl_allocated[g]),
            "incl_net": int(table.incl_net[g]),
        }

    assert row("aten::empty") == {
        "allocs": 3,
        "allocated": 1600,
        "frees": 0,
        "freed": 0,
        "self_net": 1600,
        "incl_allocated": 1600,
        "incl_net": 1600,
    }
    assert row("aten::mm") == {
        "allocs": 0,
        "allocated": 0,
        "frees": 1,
        "freed": 1000,
        "self_net": -1000,
        "incl_allocated": 500,
        "incl_net": -500,
    }
    # linear#1: +1000 +500 -1000 +300 below/in it; linear#2: +100 -100.
    assert row("aten::linear") == {
        "allocs": 1,
        "allocated": 300,
        "frees": 1,
        "freed": 100,
        "self_net": 200,
        "incl_allocated": 1900,
        "incl_net": 800,
    }
    assert row("aten::relu")["self_net"] == -500
    assert row("ProfilerStep#1")["incl_net"] == 2300
    assert row("ProfilerStep#2")["incl_net"] == 0


def test_largest_live_memory_while_each_operator_ran(known):
    trace, _, ops = known
    table = ops.device(1, 0).ops

    def peak(name):
        g = group_of(trace, ops, name)
        return int(table.peak_live[g]), int(table.peak_row[g])

    # linear#2 starts at a level of 2300 (set at 90 µs) and sees 2400 inside.
    value, row = peak("aten::linear")
    assert value == 2400 and int(trace.start[row]) == 110_000
    assert peak("aten::mm")[0] == 1500  # entering 1000, then 1500 and 500
    assert peak("aten::relu")[0] == 800  # the level entering it counts
    assert peak("aten::empty")[0] == 2400
    assert peak("ProfilerStep#1")[0] == 2300


def test_peak_owner_and_step(known):
    trace, analysis, ops = known
    cuda = ops.device(1, 0)
    assert int(cuda.allocated[cuda.peak]) == 2400
    assert int(cuda.ts[cuda.peak]) == 113_000
    assert trace.name_of(int(cuda.owner[cuda.peak])) == "aten::empty"
    assert trace.name_of(cuda.peak_step) == "ProfilerStep#2"


def test_lifetimes_and_never_freed(known):
    trace, _, ops = known
    cuda = ops.device(1, 0)
    allocations = cuda.allocations
    assert allocations.addresses_known
    assert (cuda.ts[allocations.event] // 1000).tolist() == [13, 23, 45, 90, 113]
    assert allocations.state.tolist() == [FREED, FREED, FREED, NEVER_FREED, FREED]
    assert (allocations.lifetime // 1000).tolist() == [17, 47, 205, -1, 7]
    assert allocations.frees_without_allocation == 0
    never = allocations.never_freed
    assert len(never) == 1
    pos = int(allocations.event[never[0]])
    assert int(cuda.bytes[pos]) == 2000
    assert trace.name_of(int(cuda.owner[pos])) == "ProfilerStep#1"
    g = group_of(trace, ops, "ProfilerStep#1")
    assert int(cuda.ops.unfreed[g]) == 1 and int(cuda.ops.unfreed_bytes[g]) == 2000


def test_cpu_device_is_kept_apart(known):
    trace, _, ops = known
    cpu = ops.device(0, -1)
    assert cpu.allocated.tolist() == [64]
    assert trace.name_of(int(cpu.owner[0])) == "aten::relu"
    g = group_of(trace, ops, "aten::relu")
    assert int(cpu.ops.allocated[g]) == 64
    assert int(ops.device(1, 0).ops.allocated[g]) == 0
    assert cpu.peak_reserved == -1  # no Total Reserved recorded


def test_summary_reports_peak_owner_and_top_allocators(known):
    trace, _, _ = known
    summary = build_summary(trace)
    cuda = next(m for m in summary["memory"] if m["device_type"] == 1)
    # The contract's fields are as the spec says; the extension adds the peak's context.
    assert cuda["peak_allocated_bytes"] == 2400 and cuda["peak_reserved_bytes"] == 8192
    assert cuda["peak_operator"] == "aten::empty"
    assert cuda["peak_step"] == "ProfilerStep#2"
    assert cuda["peak_ts_us"] == 113.0
    assert cuda["peak_stack"] == ["ProfilerStep#2", "aten::linear", "aten::empty"]
    assert cuda["unfreed_allocations"] == 1 and cuda["unfreed_bytes"] == 2000
    top = [
        (m["name"], m["allocated_bytes"]) for m in summary["memory_ops"] if m["device_type"] == 1
    ]
    assert top[:3] == [("ProfilerStep#1", 2000), ("aten::empty", 1600), ("aten::linear", 300)]
    linear = next(
        m for m in summary["memory_ops"] if m["name"] == "aten::linear" and m["device_type"] == 1
    )
    assert linear["incl_net_bytes"] == 800 and linear["peak_live_bytes"] == 2400
    json.dumps(summary)


def test_old_traces_without_totals_or_addresses():
    """2021 traces: only Bytes; the curve is relative to the start, nothing can be matched."""
    events = [x("op", 0, 100)]
    for ts, nbytes in ((10, 100), (20, 50), (30, -100)):
        event = mem(ts, nbytes, None, A, reserved=None)
        del event["args"]["Addr"]
        del event["cat"]
        events.append(event)
    ops = TraceSession(load_dict({"traceEvents": events})).memory_ops
    dev = ops.devices[0]
    assert not dev.allocated_recorded
    assert dev.allocated.tolist() == [100, 150, 50]
    assert not dev.allocations.addresses_known
    assert dev.allocations.state.tolist() == [REUSED, REUSED]
    assert (dev.allocations.lifetime == -1).all()
    summary = build_summary(load_dict({"traceEvents": events}))
    assert summary["memory"][0]["unfreed_allocations"] is None


def test_partial_totals_continue_from_the_last_recorded_value():
    events = [x("op", 0, 100)]
    events += [mem(10, 100, None, A), mem(20, 50, 1050, B), mem(30, 10, None, C)]
    dev = TraceSession(load_dict({"traceEvents": events})).memory_ops.devices[0]
    assert dev.allocated.tolist() == [1000, 1050, 1060]


def test_reused_address_and_frees_of_earlier_memory():
    events = [x("op", 0, 100)]
    events += [
        mem(10, 100, 100, A),
        mem(20, 200, 300, A),  # A again, no free in between
        mem(30, -200, 100, A),
        mem(40, -50, 50, B),  # B was allocated before the trace
    ]
    allocations = TraceSession(load_dict({"traceEvents": events})).memory_ops.devices[0].allocations
    assert allocations.state.tolist() == [REUSED, FREED]
    assert allocations.lifetime.tolist() == [-1, 10_000]
    assert allocations.frees_without_allocation == 1


def test_same_timestamp_keeps_file_order():
    events = [x("op", 0, 100), mem(10, 100, 100, A), mem(10, -100, 0, A)]
    dev = TraceSession(load_dict({"traceEvents": events})).memory_ops.devices[0]
    assert dev.allocated.tolist() == [100, 0]
    assert dev.allocations.state.tolist() == [FREED]
    assert dev.allocations.lifetime.tolist() == [0]


def test_trace_without_memory_events():
    trace = load_dict({"traceEvents": [x("op", 0, 10)]})
    ops = TraceSession(trace).memory_ops
    assert not ops and ops.primary is None
    summary = build_summary(trace)
    assert summary["memory"] == [] and summary["memory_ops"] == []
    assert "profile_memory=True" in HOW_TO_RECORD and "--profile-memory" in HOW_TO_RECORD


def test_column_max_counts_the_level_entering_each_window(known):
    _, _, ops = known
    cuda = ops.device(1, 0)
    us = 1000
    edges = np.array([0, 20, 40, 80, 100, 112, 300, 400]) * us
    alloc, reserved = cuda.column_max(edges)
    assert alloc.tolist() == [1000, 1500, 800, 2300, 2300, 2400, 2000]
    assert reserved.tolist() == [4096, 4096, 4096, 4096, 4096, 8192, 4096]
    before = cuda.column_max(np.array([0, 5]) * us)[0]
    assert before.tolist() == [NO_VALUE]


def test_range_max_with_empty_ranges():
    values = np.array([3, 1, 4, 1, 5], dtype=np.int64)
    lo = np.array([0, 2, 3, 4, 5])
    hi = np.array([2, 5, 3, 5, 5])
    assert range_max(values, lo, hi).tolist() == [3, 5, NO_VALUE, 5, NO_VALUE]


def test_device_labels():
    assert device_label(1, 3) == "CUDA 3"
    assert device_label(0, -1) == "CPU"
    assert device_label(None, None) == "unknown device"
    assert device_label(42, 1) == "device type 42 1"


@pytest.mark.parametrize("block", [None, 1, 3])
@pytest.mark.parametrize("seed", range(8))
def test_innermost_slice_is_the_last_container_in_nesting_order(seed, block, monkeypatch):
    """Against brute force on random slices (nested, partly overlapping, zero-length); with
    `block`, a lane's starts are searched a few positions at a time (as a 4 GB trace's are)."""
    if block is not None:
        monkeypatch.setattr(nesting_module, "SEARCH_BLOCK", block)
    rng = random.Random(seed)
    events = []
    for _ in range(60):
        start = rng.randrange(0, 500)
        dur = rng.choice([0, 1, 5, 20, 80, 300])
        events.append(x(f"s{rng.randrange(5)}", start, dur, tid=rng.choice([1, 2])))
    trace = load_dict({"traceEvents": events})
    classes = classify(trace)
    nesting = compute_nesting(trace, classes.cpu, group_rows(trace, classes.cpu).index)
    lanes = np.array([rng.randrange(len(trace.lanes)) for _ in range(300)])
    times = np.array([rng.randrange(-10, 900) * 1000 for _ in range(300)])
    got = nesting.innermost(trace, lanes, times)
    # The idle-by-operator search asks the same of the nesting, answered in rows.
    rows = innermost_at(trace, nesting, lanes, times)
    assert rows.tolist() == [int(nesting.order[p]) if p >= 0 else -1 for p in got.tolist()]
    ends = trace.start + trace.dur
    for lane, t, pos in zip(lanes.tolist(), times.tolist(), got.tolist()):
        lo, hi = nesting.lane_range(lane)
        containing = [
            p for p in range(lo, hi) if trace.start[nesting.order[p]] <= t < ends[nesting.order[p]]
        ]
        assert pos == (containing[-1] if containing else -1)


def test_memory_events_without_any_cpu_slice():
    trace = load_dict({"traceEvents": [mem(10, 100, 100, A), mem(20, -100, 0, A)]})
    dev = TraceSession(trace).memory_ops.devices[0]
    assert dev.owner.tolist() == [-1, -1]
    assert dev.allocations.state.tolist() == [FREED]
    assert build_summary(trace)["memory"][0]["peak_operator"] is None


def test_events_on_an_int_tid_belong_to_operators_on_the_same_tid_as_a_string():
    """Old traces write operator tids as strings and `[memory]` tids as ints."""
    op = x("aten::empty", 0, 100, tid="5")
    event = mem(10, 64, 64, A, tid=5)
    dev = TraceSession(load_dict({"traceEvents": [op, event]})).memory_ops.devices[0]
    assert dev.owner.tolist() == [0]


def test_text_report_shows_peak_owner_and_top_allocators(known):
    from rich.console import Console

    from kinetoscope.present.report_memory_sync import memory_sync_tables

    trace, _, _ = known
    console = Console(record=True, width=220)
    for renderable in memory_sync_tables(build_summary(trace)):
        console.print(renderable)
    text = console.export_text()
    peak_line = next(line for line in text.splitlines() if "CUDA 0" in line and "2.34 KiB" in line)
    assert "aten::empty" in peak_line and "ProfilerStep#2" in peak_line
    assert "+113.000 µs" in peak_line
    assert "1 (1.95 KiB)" in peak_line  # never freed
    rows = [line for line in text.splitlines() if "ProfilerStep#1" in line and "2.25 KiB" in line]
    assert rows, text  # the top allocator row: 2000 B allocated, never freed; peak live 2300 B
    cells = [c.strip() for c in rows[0].strip("│ ").split("│")]
    # allocs, allocated, freed own, by others, at once, never freed, peak live, mostly freed by
    assert cells[1:] == ["1", "1.95 KiB", "0 B", "0 B", "1.95 KiB", "1.95 KiB", "2.25 KiB", "–"]
    assert "self net" not in text and "total net" not in text


def _operator_memory_by_brute_force(trace, analysis, dev):
    """Per group, looping over every instance and event as the definitions read: the largest
    level while an instance ran (entering its start, and every event up to its end; the first
    in time, then in position, among equals) and the inclusive sums (each event once per group
    among its owner and the owner's ancestors)."""
    nesting, groups = analysis.nesting, analysis.cpu_groups
    ts, allocated = dev.ts.tolist(), dev.allocated.tolist()
    peak: dict[int, tuple[int, int, int]] = {}  # group: (value, start, row)
    for pos in range(len(nesting.order)):
        row = int(nesting.order[pos])
        start, end = int(trace.start[row]), int(trace.start[row] + trace.dur[row])
        lo = max(sum(t < start for t in ts) - 1, 0)
        hi = sum(t < end for t in ts)
        if hi <= lo:
            continue
        value, g = max(allocated[lo:hi]), int(groups.index[row])
        best = peak.get(g)
        if best is None or value > best[0] or (value == best[0] and start < best[1]):
            peak[g] = (value, start, row)
    incl = {}
    for k, owner in enumerate(dev.owner.tolist()):
        if owner < 0:
            continue
        nbytes = int(dev.bytes[k])
        for g in {int(groups.index[r]) for r in [*nesting.ancestors(owner), owner]}:
            counts = incl.setdefault(g, [0, 0, 0])
            counts[0] += nbytes > 0
            counts[1] += nbytes if nbytes > 0 else 0
            counts[2] += nbytes
    return peak, incl


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block", [3, 1 << 18])
def test_operator_memory_against_brute_force(seed, block, monkeypatch):
    """Random nests on two threads with allocations and frees in and between them (zero-length
    slices, events at the slices' very starts and ends), worked a few instances at a time or
    all at once: the peaks and inclusive sums per group are the brute force's."""
    import kinetoscope.analysis.memory_ops as memory_ops

    monkeypatch.setattr(memory_ops, "OUTER_BLOCK", block)
    rng = random.Random(seed)
    events = []
    for _ in range(50):
        start = rng.randrange(0, 400) * 5
        dur = rng.choice([0, 5, 10, 50, 200, 900])
        events.append(x(f"op{rng.randrange(6)}", start, dur, tid=rng.choice([1, 2])))
    live, total = [], 0
    for _ in range(80):
        t = rng.randrange(-20, 2200)
        if live and rng.random() < 0.4:
            addr, size = live.pop(rng.randrange(len(live)))
            total -= size
            events.append(mem(t, -size, total, addr, tid=rng.choice([1, 2])))
        else:
            size = rng.choice([16, 64, 512, 4096])
            addr = 0x1000 + len(events)
            live.append((addr, size))
            total += size
            events.append(mem(t, size, total, addr, tid=rng.choice([1, 2])))
    trace = load_dict({"traceEvents": events})
    analysis = TraceSession(trace)
    _assert_as_brute_force(trace, analysis, analysis.memory_ops.devices[0])


def _assert_as_brute_force(trace, analysis, dev) -> None:
    """Every group's peak (value and row) and inclusive sums on `dev` are the brute force's."""
    peak, incl = _operator_memory_by_brute_force(trace, analysis, dev)
    table = dev.ops
    for g in range(len(analysis.cpu_groups)):
        value, _start, row = peak.get(g, (NO_VALUE, 0, -1))
        assert (int(table.peak_live[g]), int(table.peak_row[g])) == (value, row), g
        want = incl.get(g, [0, 0, 0])
        got = [int(table.incl_allocations[g]), int(table.incl_allocated[g])]
        assert got + [int(table.incl_net[g])] == want, g


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block", [3, 1 << 18])
def test_operator_memory_of_several_devices_against_brute_force(seed, block, monkeypatch):
    """The instances are walked once for every device together: random events spread over
    three devices (one of them holding a single event), each device's peaks and inclusive
    sums are still the brute force's over that device's events alone."""
    import kinetoscope.analysis.memory_ops as memory_ops

    monkeypatch.setattr(memory_ops, "OUTER_BLOCK", block)
    rng = random.Random(100 + seed)
    events = []
    for _ in range(40):
        start = rng.randrange(0, 300) * 5
        dur = rng.choice([0, 5, 10, 50, 200, 700])
        events.append(x(f"op{rng.randrange(5)}", start, dur, tid=rng.choice([1, 2])))
    totals = {0: 0, 1: 0}
    for k in range(90):
        device = rng.choice([0, 1])
        size = rng.choice([16, 64, -16, 512])
        totals[device] += size
        t = rng.randrange(-20, 1600)
        events.append(mem(t, size, totals[device], 0x1000 + k, device_id=device, tid=1))
    events.append(mem(700, 32, 32, 0x9_0000, device_type=0, device_id=-1, tid=2))
    trace = load_dict({"traceEvents": events})
    analysis = TraceSession(trace)
    devices = analysis.memory_ops.devices
    assert len(devices) == 3
    for dev in devices:
        _assert_as_brute_force(trace, analysis, dev)


@pytest.mark.parametrize("seed", range(30))
def test_first_event_at_or_after_each_start_by_counting_is_the_search(seed):
    """Each instance's first event at or after its start, counted for runs of ascending starts
    much longer than the events and searched for the rest: np.searchsorted's answer, ties of
    starts with each other and with event times included."""
    from kinetoscope.analysis.memory_ops import _first_at_or_after

    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 200, int(rng.integers(1, 12))))
    lengths = rng.choice([1, 3, 60, 200], size=int(rng.integers(1, 6)))
    start = np.concatenate([np.sort(rng.integers(-5, 210, n)) for n in lengths])
    runs = np.concatenate(([0], np.cumsum(lengths)))
    got = _first_at_or_after(ts, start, runs)
    assert got.tolist() == np.searchsorted(ts, start, side="left").tolist()
