"""The analysis stages made column-wise (issue 30) do their Python work per distinct thing (a
call chain, a site), not per event: the Python calls they make, counted with a profile hook
(tests/work_count.py, no timing), do not grow with the number of events. And what they give is
what the plain per-event rules give."""

from __future__ import annotations

import json

import numpy as np
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.sync import (
    PRINTING_FRAME,
    PYTHON_CATEGORY,
    _category_mask,
    _cause_of,
    _causes_and_sites,
    _site_of,
    compute_sync,
)
from kinetoscope.parser import loads
from test_sync import gpu, known_trace, rt, x
from work_count import CallCount

STEP_US = 2000


def repeated(copies: int, same_stack: bool = True) -> bytes:
    """The known sync trace's two steps, `copies` times over (each copy 2 ms later, its own
    correlations); `same_stack=False` gives every copy its own Python frame name."""
    base = known_trace()["traceEvents"]
    events = []
    for k in range(copies):
        for event in base:
            e = json.loads(json.dumps(event))
            e["ts"] += k * STEP_US
            args = e.get("args")
            if args and "correlation" in args:
                args["correlation"] += k * 1000
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{2 * k + int(e['name'][-1])}"
            if not same_stack and e["name"] == "train.py(10): step":
                e["name"] = f"train.py({10 + k}): step"
            events.append(e)
    # Calls under one operator share their parent, others nest deeper: every shape of chain.
    events += [
        x("aten::copy_", copies * STEP_US, 50),
        rt("cudaMemcpy", copies * STEP_US + 1, 10, 900_001),
        rt("cudaStreamSynchronize", copies * STEP_US + 20, 10, 900_002),
        rt("cudaDeviceSynchronize", copies * STEP_US + 100, 5, 900_003),
        gpu("Memcpy DtoH", copies * STEP_US + 2, 8, 900_001, cat="gpu_memcpy"),
    ]
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def _ready(data: bytes):
    trace = loads(data)
    session = TraceSession(trace)
    for name in ("classes", "nesting", "links", "idle"):
        getattr(session, name)
    return trace, session


def _grouping_calls(data: bytes) -> tuple[int, int]:
    """Python calls made finding the causes, prints and sites of a trace's blocking calls (the
    part that ran per call), and how many calls there are."""
    trace, session = _ready(data)
    rows = session.sync.rows
    python = _category_mask(trace, PYTHON_CATEGORY)
    with CallCount(python_only=True) as count:
        _causes_and_sites(trace, session.nesting, rows, python)
    return count.calls, len(rows)


def test_sync_python_calls_do_not_grow_with_the_calls():
    few, small = _grouping_calls(repeated(5))
    many, big = _grouping_calls(repeated(200))
    assert big > 30 * small  # 40x the steps, 40x the calls
    # The per-call rules ran once per distinct chain (every step's name counts as one): the
    # same Python calls at any number of calls.
    assert many == few, (few, many, big)


def test_sync_as_a_whole_stays_column_wise():
    """compute_sync over 40x the calls: what grows is per string (each step has its own
    name), a handful of Python calls per step, never the per-call rules."""
    counts = []
    for copies in (5, 200):
        trace, session = _ready(repeated(copies))
        with CallCount(python_only=True) as count:
            calls = compute_sync(
                trace, session.classes, session.nesting, session.links, session.idle.gaps
            )
        counts.append((count.calls, len(calls.rows), len(trace.strings)))
    (few, _, strings_few), (many, rows, strings_many) = counts
    assert many - few < 3 * (strings_many - strings_few) < rows, counts


def _per_call_reference(trace, nesting, rows):
    """The rules applied call by call, as the specification reads."""
    python = _category_mask(trace, PYTHON_CATEGORY)
    cause, printing, site, index = [], [], [], {}
    for row in rows.tolist():
        parent = int(nesting.parent[row])
        chain = [*nesting.ancestors(parent), parent] if parent >= 0 else []
        cause.append(_cause_of(trace, chain))
        printing.append(any(PRINTING_FRAME.search(trace.name_of(r)) for r in chain))
        site.append(index.setdefault(_site_of(trace, chain, python), len(index)))
    return cause, printing, site, list(index)


def test_sync_chains_grouped_give_the_per_call_results():
    for data in (repeated(3), repeated(7, same_stack=False), repeated(1)):
        trace, session = _ready(data)
        calls = session.sync
        cause, printing, site, sites = _per_call_reference(trace, session.nesting, calls.rows)
        assert calls.cause.tolist() == cause
        assert calls.printing.tolist() == printing
        assert calls.site.tolist() == site
        assert calls.sites == sites
        assert (calls.cause >= 0).any() and calls.printing.any() and len(sites) >= 3
        # Every GPU-side sync record linked to its call, the first in file order.
        assert (calls.gpu_sync >= 0).sum() == data.count(b'"Stream Sync"')


def test_sync_of_a_trace_without_calls():
    trace, session = _ready(json.dumps({"traceEvents": [x("aten::add", 0, 5)]}).encode())
    calls = session.sync
    assert len(calls.rows) == 0 and calls.sites == []
    assert calls.cause.dtype == np.int64 and calls.site.dtype == np.int64


def test_the_summary_runs_independent_stages_on_a_second_thread(monkeypatch):
    """build_summary computes the stages that need no nesting beside it (and the sync chain
    beside the operators'), when the process may use two CPUs; the document is the serial one."""
    import threading

    import kinetoscope.analysis.session as session_module
    from kinetoscope.analysis.summary import build_summary

    data = repeated(20)
    serial_trace = loads(data)
    monkeypatch.setattr(session_module, "_cpus", lambda: 1)
    serial = build_summary(serial_trace)

    monkeypatch.setattr(session_module, "_cpus", lambda: 2)
    threads: dict[str, int] = {}
    for name in ("compute_memory",):
        original = getattr(session_module, name)

        def recorded(*args, _original=original, _name=name):
            threads[_name] = threading.get_ident()
            return _original(*args)

        monkeypatch.setattr(session_module, name, recorded)
    trace = loads(data)
    assert build_summary(trace) == serial
    # Whoever asks first computes a result; the memory stage is asked by the second plan alone.
    assert threads["compute_memory"] != threading.get_ident()


def test_a_stage_failing_on_the_second_thread_fails_where_it_is_used(monkeypatch):
    import kinetoscope.analysis.session as session_module
    import pytest
    from kinetoscope.analysis import AnalysisFailed

    def broken(*args):
        raise ValueError("broken on purpose")

    monkeypatch.setattr(session_module, "_cpus", lambda: 2)
    monkeypatch.setattr(session_module, "compute_memory", broken)
    session = TraceSession(loads(repeated(2)))
    session.compute_concurrently(("classes", "nesting"), ("memory",))
    assert session.nesting_ready and session.failure("memory") is not None
    with pytest.raises(AnalysisFailed, match="broken on purpose"):
        _ = session.memory


def test_memory_groups_by_one_sort_match_their_definition():
    """compute_memory's groups (one stable sort by device type and id) against the plain
    definition: the events of each (type, id), keys ascending with a missing one first, in file
    order, and each group's peaks, on random memory events with missing keys and values."""
    from kinetoscope.analysis.memory import compute_memory
    from kinetoscope.parser import NO_VALUE
    from kinetoscope.parser.model import MEMORY_COLUMNS, MemoryEvents

    rng = np.random.default_rng(30)
    for _ in range(100):
        n = int(rng.integers(1, 80))
        cols = {c: rng.integers(0, 1 << 40, n).astype(np.int64) for c in MEMORY_COLUMNS}
        for c in ("device_type", "device_id"):
            cols[c] = rng.integers(-1, 3, n).astype(np.int64)
            cols[c][rng.random(n) < 0.2] = NO_VALUE
        for c in ("total_allocated", "total_reserved"):
            cols[c][rng.random(n) < 0.2] = NO_VALUE
        groups = compute_memory(MemoryEvents(**cols))
        keys = sorted({(int(t), int(d)) for t, d in zip(cols["device_type"], cols["device_id"])})
        assert len(groups) == len(keys)
        for group, (t, d) in zip(groups, keys):
            members = [
                i for i in range(n) if (cols["device_type"][i], cols["device_id"][i]) == (t, d)
            ]
            assert group.device_type == (None if t == NO_VALUE else t)
            assert group.device_id == (None if d == NO_VALUE else d)
            assert group.indices.tolist() == members
            allocated = [(int(cols["total_allocated"][i]), i) for i in members]
            allocated = [(v, i) for v, i in allocated if v != NO_VALUE]
            if allocated:
                peak = max(v for v, _ in allocated)
                assert group.peak_allocated == peak
                assert group.peak_allocated_index == next(i for v, i in allocated if v == peak)
            else:
                assert group.peak_allocated is None and group.peak_allocated_index == -1


def _memory_steps(copies: int) -> bytes:
    """`copies` training steps on two threads, each a nest four deep (the same operators every
    step, inner ones repeated) with allocations, frees and a leak in it and between steps on
    CUDA 0 and the CPU."""
    events, total, cpu_total = [], 0, 0

    def op(name, ts, dur, tid=1, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    def mem(ts, nbytes, total, addr, device_type=1, tid=1):
        args = {"Bytes": nbytes, "Addr": addr, "Total Allocated": total}
        args |= {"Device Type": device_type, "Device Id": 0 if device_type else -1}
        return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                "tid": tid, "ts": ts, "args": args}  # fmt: skip

    for k in range(copies):
        t = k * STEP_US
        events.append(op(f"ProfilerStep#{k}", t, STEP_US - 10, cat="user_annotation"))
        for j in range(3):
            base = t + 10 + j * 600
            events += [op("aten::linear", base, 500), op("aten::matmul", base + 10, 300)]
            events += [op("aten::empty", base + 20 + 50 * i, 20) for i in range(4)]
            for i in range(4):
                addr = 0x10_0000 * (k + 1) + 0x100 * (4 * j + i)
                total += 256
                events.append(mem(base + 25 + 50 * i, 256, total, addr))
            for i in range(3):  # one of the four is kept: a leak per nest
                total -= 256
                addr = 0x10_0000 * (k + 1) + 0x100 * (4 * j + i)
                events.append(mem(base + 400 + i, -256, total, addr))
            events.append(op("aten::add", base + 5, 100, tid=2))
            cpu_total += 64
            events.append(mem(base + 50, 64, cpu_total, 0x9000 + k * 8 + j, 0, tid=2))
        events.append(mem(t + STEP_US - 5, 16, total + 16, 0x7000_0000 + k))  # between ops
        total += 16
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def _stage_calls(data: bytes, stage) -> tuple[int, int]:
    """Python calls made by one stage (its inputs computed before, the step slices among them:
    finding those tests each distinct name, and every step has its own), and the trace's rows."""
    from kinetoscope.analysis.steps import step_rows

    trace = loads(data)
    session = TraceSession(trace)
    for name in ("classes", "cpu_groups", "nesting", "links", "idle"):
        getattr(session, name)
    steps = step_rows(trace, session.classes.cpu)
    with CallCount(python_only=True) as count:
        stage(trace, session, steps)
    return count.calls, len(trace)


def test_memory_per_operator_python_calls_do_not_grow_with_the_events():
    """compute_memory_ops over 40x the steps (40x the slices, instances and [memory] events):
    the same Python calls."""
    from kinetoscope.analysis.memory_ops import compute_memory_ops

    def stage(trace, session, steps):
        ops = compute_memory_ops(trace, session.nesting, session.cpu_groups, steps)
        assert len(ops.devices) == 2 and all(len(d.ops.peak_live) for d in ops.devices)

    few, rows_few = _stage_calls(_memory_steps(5), stage)
    many, rows_many = _stage_calls(_memory_steps(200), stage)
    assert rows_many > 30 * rows_few
    assert many == few, (few, many)


class _CountedGathers(np.ndarray):
    """A column that counts how often it is indexed (each gather gives a plain array)."""

    gathers = 0

    def __getitem__(self, index):
        type(self).gathers += 1
        return np.asarray(super().__getitem__(index))


def test_memory_per_operator_walks_the_instances_once_for_all_devices(monkeypatch):
    """The outermost instances' start times are gathered once per block of instances, however
    many devices hold [memory] events (here two): halving the block size adds exactly one
    gather per added block, not one per block and device."""
    import kinetoscope.analysis.memory_ops as memory_ops
    from kinetoscope.analysis.steps import step_rows

    trace = loads(_memory_steps(20))
    session = TraceSession(trace)
    for name in ("classes", "cpu_groups", "nesting"):
        getattr(session, name)
    steps = step_rows(trace, session.classes.cpu)
    outermost = session.nesting.outermost

    def blocks(block: int) -> int:  # the position blocks that hold an outermost instance
        return sum(bool(outermost[lo : lo + block].any()) for lo in range(0, len(outermost), block))

    trace.start = trace.start.view(_CountedGathers)
    counts = {}
    for block in (64, 16, 4):
        monkeypatch.setattr(memory_ops, "OUTER_BLOCK", block)
        _CountedGathers.gathers = 0
        ops = memory_ops.compute_memory_ops(trace, session.nesting, session.cpu_groups, steps)
        assert len(ops.devices) == 2
        counts[block] = (_CountedGathers.gathers, blocks(block))
    (g64, b64), (g16, b16), (g4, b4) = counts[64], counts[16], counts[4]
    assert b4 > b16 > b64 > 1
    assert g16 - g64 == b16 - b64 and g4 - g16 == b4 - b16, counts


def test_nesting_python_calls_do_not_grow_with_the_slices():
    """compute_nesting over 40x the steps: the same Python calls (the nearest-greater search
    and the subtrees' pointer doubling take rounds in the depth, not in the slices)."""
    from kinetoscope.analysis.nesting import compute_nesting

    def stage(trace, session, _steps):
        compute_nesting(trace, session.classes.cpu, session.cpu_groups.index)

    few, rows_few = _stage_calls(_memory_steps(5), stage)
    many, rows_many = _stage_calls(_memory_steps(200), stage)
    assert rows_many > 30 * rows_few
    assert many == few, (few, many)


def _compiled_step(copies: int) -> bytes:
    """One step holding a compiled region that launches `copies` x 3 Inductor kernels (three
    names, each with its CPU launch slice, and a CPU `cpp_fused_*` kernel) and, outside the
    region, `copies` x 2 eager operators (two names) that launch a kernel each."""

    def op(name, ts, dur, cat="cpu_op", **args):
        event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        return event | ({"args": args} if args else {})

    def kernel(name, ts, corr):
        args = {"device": 0, "stream": 7, "correlation": corr}
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts,
                "dur": 3, "args": args}  # fmt: skip

    span = 100 * copies
    events = [
        op("ProfilerStep#1", 0, 3 * span, cat="user_annotation"),
        op("Torch-Compiled Region: 0/0", 1, span - 2),
    ]
    corr = 0
    for k in range(copies):
        for j, name in enumerate(("triton_poi_fused_add_0", "triton_red_fused_sum_1")):
            t = 100 * k + 5 + 30 * j
            corr += 1
            events += [op(name, t, 20), op("cudaLaunchKernel", t + 2, 5, cat="cuda_runtime",
                                           correlation=corr)]  # fmt: skip
            events.append(kernel(name, 3 * span + t, corr))
        events.append(op("cpp_fused_mul_2", 100 * k + 70, 10))
        for j, name in enumerate(("aten::add_", "aten::mul")):
            t = span + 100 * k + 10 + 40 * j
            corr += 1
            events += [op(name, t, 30), op("cudaLaunchKernel", t + 5, 5, cat="cuda_runtime",
                                           correlation=corr)]  # fmt: skip
            events.append(kernel("vectorized_elementwise", 3 * span + t, corr))
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def test_compile_python_calls_do_not_grow_with_the_kernels():
    """compute_compile over 40x the Inductor kernels and eager operators (one region, the same
    names): the same Python calls; Inductor kinds and eager islands are found per name."""
    from kinetoscope.analysis.compile import compute_compile

    def stage(trace, session, _steps):
        session.steps  # noqa: B018 (an input, asked before counting)
        with CallCount(python_only=True) as count:
            compiled = compute_compile(session)
        return count.calls, compiled

    counts = []
    for copies in (5, 200):
        trace = loads(_compiled_step(copies))
        session = TraceSession(trace)
        for name in ("classes", "cpu_groups", "nesting", "links", "idle", "steps", "operators"):
            getattr(session, name)
        calls, compiled = stage(trace, session, None)
        assert {k.name: k.count for k in compiled.inductor} == {
            "triton_poi_fused_add_0": copies,
            "triton_red_fused_sum_1": copies,
            "cpp_fused_mul_2": copies,
        }
        assert {e.name: e.count for e in compiled.eager_islands} == {
            "aten::add_": copies,
            "aten::mul": copies,
        }
        counts.append(calls)
    assert counts[0] == counts[1], counts


def _sites_per_call(trace, calls):
    """group_sites as the definition reads: one bucket per (call name, cause, site) in words,
    filled call by call."""
    from kinetoscope.analysis.sync import cause_label

    buckets: dict = {}
    for i in range(len(calls)):
        key = (trace.name_of(int(calls.rows[i])), cause_label(trace, calls, i))
        buckets.setdefault(key + (calls.sites[int(calls.site[i])],), []).append(i)
    out = []
    for (call, cause, site), members in buckets.items():
        durations = calls.dur[members]
        worst = members[int(np.argmax(durations))]
        out.append((call, cause, site, members, int(durations.sum()), int(durations.max()),
                    int(calls.idle_after[members].sum()), int(calls.idle[members].sum()), worst))  # fmt: skip
    out.sort(key=lambda s: (-s[4], -len(s[3]), s[3][0]))
    return out


def test_sync_sites_grouped_per_key_match_the_per_call_grouping_and_do_not_grow():
    """group_sites over 40x the calls: the same sites as bucketing call by call, and the same
    Python calls (its work is per distinct key)."""
    from kinetoscope.analysis.sync import group_sites

    counts = []
    for copies, same_stack in ((5, True), (200, True), (30, False)):
        trace, session = _ready(repeated(copies, same_stack))
        calls = session.sync
        with CallCount(python_only=True) as count:
            sites = group_sites(trace, calls)
        got = [(s.call, s.cause, s.site, s.calls.tolist(), s.total, s.max, s.idle_after, s.idle,
                s.worst) for s in sites]  # fmt: skip
        assert got == _sites_per_call(trace, calls)
        counts.append((count.calls, len(calls.rows)))
    (few, n_few), (many, n_many), _ = counts
    assert n_many > 30 * n_few and many == few, counts


def test_latest_window_holding_each_time_against_brute_force():
    """Steps nested and overlapping and back to back, times on their edges: the last window
    (by start) holding each time, as the per-window loop finds it."""
    from kinetoscope.analysis.sync import latest_holding

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(0, 12))
        starts = np.sort(rng.integers(0, 50, n)).astype(np.int64)
        ends = starts + rng.integers(0, 30, n)
        times = rng.integers(-5, 90, 40).astype(np.int64)
        times[: min(n, 20)] = np.concatenate((starts, ends))[: min(n, 20)]
        want = np.full(len(times), -1)
        for s in range(n):
            want[(times >= starts[s]) & (times < ends[s])] = s
        assert latest_holding(starts, ends, times).tolist() == want.tolist()


def test_the_findings_run_beside_memory_per_operator(monkeypatch):
    """The findings need no memory per operator: with two CPUs the second thread computes
    them while the first is still in memory per operator (which here waits until they are
    made; in the serial order it would wait in vain), and the document is the serial one."""
    import threading

    import kinetoscope.analysis.memory_ops as memory_ops_module
    import kinetoscope.analysis.rules as rules_module
    import kinetoscope.analysis.session as session_module
    from kinetoscope.analysis.summary import build_summary

    data = _memory_steps(3)
    monkeypatch.setattr(session_module, "_cpus", lambda: 1)
    serial = build_summary(loads(data))

    monkeypatch.setattr(session_module, "_cpus", lambda: 2)
    made = threading.Event()
    seen_during: list[bool] = []
    original_rules, original_ops = rules_module.run_rules, memory_ops_module.compute_memory_ops

    def rules(*args):
        found = original_rules(*args)
        made.set()
        return found

    def memory_ops(*args):
        seen_during.append(made.wait(timeout=30))
        return original_ops(*args)

    monkeypatch.setattr(rules_module, "run_rules", rules)
    monkeypatch.setattr(memory_ops_module, "compute_memory_ops", memory_ops)
    assert build_summary(loads(data)) == serial
    assert seen_during == [True]


def test_the_steps_come_before_memory_per_operator_beside_the_sync(monkeypatch):
    """The findings' chain is split over the two threads: the first makes the steps (with the
    nesting at hand: they never sort the slices themselves), then memory per operator, while
    the second makes the sync (which here waits until memory per operator has begun: the steps
    are made by then only when the first thread made them), and the document is the serial
    one."""
    import threading

    import kinetoscope.analysis.memory_ops as memory_ops_module
    import kinetoscope.analysis.session as session_module
    import kinetoscope.analysis.sync as sync_module
    from kinetoscope.analysis.summary import build_summary

    data = _memory_steps(3)
    monkeypatch.setattr(session_module, "_cpus", lambda: 1)
    serial = build_summary(loads(data))

    monkeypatch.setattr(session_module, "_cpus", lambda: 2)
    steps_made, ops_begun = threading.Event(), threading.Event()
    seen: list[tuple[str, bool]] = []
    original_steps, original_sync = session_module.compute_steps, sync_module.compute_sync
    original_ops = memory_ops_module.compute_memory_ops

    def steps(*args):
        seen.append(("steps with the nesting", args[-1] is not None))
        result = original_steps(*args)
        steps_made.set()
        return result

    def memory_ops(*args):
        seen.append(("memory per operator after the steps", steps_made.is_set()))
        ops_begun.set()
        return original_ops(*args)

    def sync(*args):
        seen.append(("sync beside memory per operator", ops_begun.wait(timeout=30)))
        return original_sync(*args)

    monkeypatch.setattr(session_module, "compute_steps", steps)
    monkeypatch.setattr(memory_ops_module, "compute_memory_ops", memory_ops)
    monkeypatch.setattr(sync_module, "compute_sync", sync)
    assert build_summary(loads(data)) == serial
    assert sorted(seen) == [
        ("memory per operator after the steps", True),
        ("steps with the nesting", True),
        ("sync beside memory per operator", True),
    ]
