"""The summary's peak of memory at 4 GB (issue 19): the stages that set it hold fewer and
narrower temporaries, with the same results. Memory is measured with tracemalloc (numpy reports
its arrays to it) per CPU slice of a generated trace, stage by stage, the stages before it
computed first; the bounds sit between what each stage took before the change and after it.
The results are checked against their definitions and against the wide paths."""

from __future__ import annotations

import json
import tracemalloc

# Imported here, not by the session's first ask: tracemalloc would count the import itself
# (some 2.7 MB, 37 bytes per slice of the trace) when this file runs alone.
import kinetoscope.analysis.memory_ops  # noqa: F401
import kinetoscope.analysis.operators as operators
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.intervals import Union, ids_in_use, sorted_unique, sums_fit
from kinetoscope.analysis.steps import compute_steps
from kinetoscope.parser import loads


def steps_trace(steps: int = 100, ops: int = 250) -> list[dict]:
    """ProfilerStep slices, each over `ops` operators holding an inner one and a kernel launch."""
    events: list[dict] = []
    corr = 0
    cpu = {"ph": "X", "pid": 1, "tid": 1}
    for s in range(steps):
        t0 = s * ops * 20
        events.append(
            {**cpu, "cat": "cpu_op", "name": f"ProfilerStep#{s}", "ts": t0, "dur": ops * 20 - 1}
        )
        for i in range(ops):
            t = t0 + i * 20
            corr += 1
            events += [
                {**cpu, "cat": "cpu_op", "name": f"aten::op{i % 7}", "ts": t + 1, "dur": 15},
                {**cpu, "cat": "cpu_op", "name": "aten::inner", "ts": t + 2, "dur": 10},
                {
                    **cpu,
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "ts": t + 3,
                    "dur": 4,
                    "args": {"correlation": corr},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"k{i % 5}",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 9,
                    "dur": 6,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                },
            ]
    return events


def peak_per_slice(session: TraceSession, stage: str) -> float:
    """tracemalloc's peak while `stage` is computed, per CPU slice of the trace."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        getattr(session, stage)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak / len(session.nesting.order)


@pytest.fixture(scope="module")
def big_trace():
    return loads(json.dumps({"traceEvents": steps_trace()}).encode())


def ready(trace, *stages: str) -> TraceSession:
    session = TraceSession(trace)
    for stage in ("classes", "cpu_groups", "gpu_groups", "links", *stages):
        getattr(session, stage)
    return session


@pytest.mark.slow
def test_nesting_peak(big_trace):
    # 85 bytes per slice before (positions narrowed at the end, the groups' reach in copies).
    assert peak_per_slice(ready(big_trace), "nesting") < 80


@pytest.mark.slow
def test_operators_peak(big_trace, monkeypatch):
    # As on a 4 GB trace, where the nesting is many blocks long: 44 bytes per slice before the
    # issue-19 round, 20.4 before the groups were gathered a block at a time (16.3 since).
    monkeypatch.setattr(operators, "OPERATOR_BLOCK", 4096, raising=False)
    assert peak_per_slice(ready(big_trace, "nesting"), "operators") < 18


@pytest.mark.slow
def test_steps_peak(big_trace):
    # 65 bytes per slice before (the thread's slices sorted and copied for its union).
    assert peak_per_slice(ready(big_trace, "nesting"), "steps") < 56


@pytest.mark.slow
def test_memory_ops_peak(big_trace):
    # 25 bytes per slice before: `sums_fit` took two float64 copies of the values.
    assert peak_per_slice(ready(big_trace, "nesting"), "memory_ops") < 12


SLICES = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 40), st.integers(0, 25), st.booleans()),
    min_size=1,
    max_size=40,
)


def trace_of(slices):
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"ProfilerStep#{i}" if step else f"s{i % 4}",
            "pid": 1,
            "tid": tid,
            "ts": ts,
            "dur": dur,
        }
        for i, (tid, ts, dur, step) in enumerate(slices)
    ]
    return loads(json.dumps({"traceEvents": events}).encode())


def same_steps(a, b) -> None:
    for name in a.__dataclass_fields__:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@settings(max_examples=150, deadline=None)
@given(SLICES)
def test_steps_through_the_nesting_are_the_same(slices):
    trace = trace_of(slices)
    session = TraceSession(trace)
    c = session.classes
    plain = compute_steps(trace, c.cpu, c.gpu, c.kind, c.runtime)
    nested = compute_steps(trace, c.cpu, c.gpu, c.kind, c.runtime, session.nesting)
    same_steps(plain, nested)
    same_steps(session.steps, nested)  # the session's, with its nesting there first


@settings(max_examples=150, deadline=None)
@given(SLICES, st.sampled_from([1, 2, 3, 1 << 20]))
def test_operators_match_their_definition(slices, block):
    trace = trace_of(slices)
    session = TraceSession(trace)
    nesting, groups = session.nesting, session.cpu_groups
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(operators, "OPERATOR_BLOCK", block)
        table = operators.compute_operators(trace, nesting, groups, session.links)
    incl = np.zeros(len(groups), dtype=np.int64)
    for pos, row in enumerate(nesting.order.tolist()):
        group = int(groups.index[row])
        ancestors = nesting.ancestors(row)
        if all(int(groups.index[a]) != group for a in ancestors):
            assert nesting.outermost[pos]
            incl[group] += int(trace.dur[row])
        else:
            assert not nesting.outermost[pos]
    assert np.array_equal(table.incl, incl)
    assert np.array_equal(table.gpu_total, np.zeros(len(groups), dtype=np.int64))


def test_lazy_depth_and_lane_match_their_definitions():
    trace = trace_of([(1, 0, 20, False), (1, 2, 5, False), (1, 3, 1, False), (2, 0, 4, True)])
    nesting = TraceSession(trace).nesting
    for row in range(len(trace)):
        assert nesting.depth[row] == len(nesting.ancestors(row))
    assert np.array_equal(nesting.lane_of, trace.lane[nesting.order])
    assert nesting.depth is nesting.depth  # made once


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=30), st.booleans())
def test_union_of_sorted_or_not(pairs, writable):
    starts = np.array([s for s, _ in pairs], dtype=np.int64)
    ends = np.array([s + d for s, d in pairs], dtype=np.int64)
    given_starts, given_ends = starts.copy(), ends.copy()
    union = Union.of(starts, ends, writable=writable)
    if not writable:
        assert np.array_equal(ends, given_ends)
    assert np.array_equal(starts, given_starts)
    covered = set()
    for s, e in zip(given_starts.tolist(), given_ends.tolist()):
        covered.update(range(s, e))
    got = set()
    for s, e in zip(union.start.tolist(), union.end.tolist()):
        assert not got & set(range(s, e))
        got.update(range(s, e))
    assert got == covered
    assert all(union.end[:-1] < union.start[1:])  # touching ones joined


def test_sums_fit_at_the_limit():
    assert sums_fit(np.array([1, 2, -3], dtype=np.int64))
    assert not sums_fit(np.array([2**61, 2**61, 2**61], dtype=np.int64))
    assert not sums_fit(np.array([-(2**62), 1], dtype=np.int64))
    assert sums_fit(np.zeros(0, dtype=np.int64))


GAPPY = st.lists(
    st.tuples(st.integers(1, 2), st.integers(0, 1000), st.sampled_from([0, 0, 1, 3, 50, 400])),
    min_size=1,
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(GAPPY, st.sampled_from([1, 2, 3, 1 << 20]))
def test_far_from_the_rest_bound_changes_nothing(slices, block):
    """The bound found a block of rows at a time only answers 'no wide hole' early: the answer
    is the one the whole-trace pass gives, points (zero-length slices) included."""
    import kinetoscope.analysis.oddities as oddities

    trace = trace_of([(tid, ts, dur, False) for tid, ts, dur in slices])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oddities, "FAR_BLOCK", block)
        rows, gap = oddities.far_from_the_rest(trace)
        patch.setattr(oddities, "_widest_gap_bound", lambda _trace: None)
        whole_rows, whole_gap = oddities.far_from_the_rest(trace)
    assert gap == whole_gap
    assert np.array_equal(rows, whole_rows)


@settings(max_examples=150, deadline=None)
@given(SLICES, st.sampled_from([1, 2, 3, 5, 1 << 20]))
def test_outermost_matches_its_definition_in_blocks(slices, block):
    """A slice is outermost when no ancestor has its (cat, name) group, whether the positions
    are ordered by group all at once or a few at a time (as a 4 GB trace's are)."""
    from kinetoscope.analysis import nesting as nesting_module

    trace = trace_of(slices)
    session = TraceSession(trace)
    nesting, groups = session.nesting, session.cpu_groups
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nesting_module, "OUTERMOST_BLOCK", block)
        got = nesting_module.outermost_positions(
            groups.index[nesting.order], nesting.subtree_stop
        )
    want = [
        all(int(groups.index[a]) != int(groups.index[row]) for a in nesting.ancestors(row))
        for row in nesting.order.tolist()
    ]
    assert got.tolist() == want
    assert nesting.outermost.tolist() == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=60))
def test_the_sorting_unique_is_numpys(values):
    """The analysis's unique values (by sorting, or by counting string ids) are np.unique's."""
    array = np.array(values, dtype=np.int64)
    want = np.unique(array)
    assert sorted_unique(array).tolist() == want.tolist()
    assert sorted_unique(array).dtype == want.dtype
    assert ids_in_use(array.astype(np.int32), 51).tolist() == want.tolist()
