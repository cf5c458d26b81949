"""Oddities that run at the summary's peak of memory, worked without whole-trace temporaries,
against their definitions walked slice by slice: `slices_outliving_parent` (a slice that starts
inside another on its lane and ends after it; whatever block of positions it works in) and
`far_from_the_rest` (slices set apart by most of the trace's span)."""

from __future__ import annotations

import json

import kinetoscope.analysis.oddities as oddities
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import loads
from kinetoscope.parser.model import PH_COMPLETE

SLICES = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 40), st.integers(0, 25)), min_size=2, max_size=40
)


def trace_of(slices):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"s{i}", "pid": 1, "tid": tid, "ts": ts, "dur": dur}
        for i, (tid, ts, dur) in enumerate(slices)
    ]
    return loads(json.dumps({"traceEvents": events}).encode())


def walked(trace, nesting):
    """Each slice and the sibling just before it on its lane, where the earlier one ends after
    the later one starts; by sibling group (parent position, or lane for the roots: the roots
    first, lanes descending), then by position."""
    order = nesting.order.tolist()
    last_of_family: dict[int, int] = {}
    pairs = []
    for pos, row in enumerate(order):
        parent = int(nesting.parent_pos[pos])
        family = parent if parent >= 0 else -1 - int(nesting.lane_of[pos])
        before = last_of_family.get(family)
        last_of_family[family] = pos
        if before is None:
            continue
        earlier = order[before]
        if trace.start[earlier] + trace.dur[earlier] > trace.start[row]:
            pairs.append((family, pos, row, earlier))
    pairs.sort()
    return [p[2] for p in pairs], [p[3] for p in pairs]


@settings(max_examples=200, deadline=None)
@given(SLICES, st.sampled_from([1, 2, 3, 1 << 20]))
def test_outliving_slices_match_their_definition(slices, block):
    trace = trace_of(slices)
    session = TraceSession(trace)
    expected = walked(trace, session.nesting)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(oddities, "OUTLIVING_BLOCK", block)
        later, earlier = oddities.slices_outliving_parent(trace, session)
    assert (later.tolist(), earlier.tolist()) == expected
    assert later.dtype == earlier.dtype == "int64"


def far_walked(trace):
    """`far_from_the_rest` by its definition: the slices by start, the widest hole between
    one and everything before it; the side of it that holds at most FAR_SHARE of them."""
    rows = sorted(
        (r for r in range(len(trace)) if trace.ph[r] == PH_COMPLETE), key=lambda r: trace.start[r]
    )
    if len(rows) < 2:
        return [], 0
    reach, holes = [], []
    for k, r in enumerate(rows):
        end = int(trace.start[r] + trace.dur[r])
        if k:
            holes.append(int(trace.start[r]) - reach[-1])
        reach.append(max(end, reach[-1]) if reach else end)
    span = reach[-1] - int(trace.start[rows[0]])
    if span <= 0:
        return [], 0
    widest = max(range(len(holes)), key=lambda k: (holes[k], -k))
    gap = holes[widest]
    if gap < oddities.FAR_GAP_SHARE * span:
        return [], 0
    few = max(1, int(oddities.FAR_SHARE * len(rows)))
    before, after = rows[: widest + 1], rows[widest + 1 :]
    if len(after) <= few:
        return after, gap
    if len(before) <= few:
        return before, gap
    return [], 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(-5, 60)), max_size=60),
    st.lists(st.integers(10**6, 10**7), max_size=2),
)
def test_far_slices_match_their_definition(near, far):
    events = [
        {"ph": "X", "cat": "c", "name": f"s{i}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        for i, (ts, dur) in enumerate(near)
    ]
    events += [
        {"ph": "X", "cat": "c", "name": "far", "pid": 1, "tid": 2, "ts": ts, "dur": 3} for ts in far
    ]
    trace = loads(json.dumps({"traceEvents": events}).encode())
    rows, gap = oddities.far_from_the_rest(trace)
    expected_rows, expected_gap = far_walked(trace)
    assert (rows.tolist(), gap) == (expected_rows, expected_gap)
    assert rows.dtype == "int64"


@settings(max_examples=200, deadline=None)
@given(SLICES, st.integers(-2, 70).map(lambda us: us * 1000), st.sampled_from([0, 1, 2, 4096]))
def test_slices_at_a_time_match_their_definition(slices, t, walk):
    """The slices of a lane holding a time, outermost first: walked with subtrees skipped, for
    any length of walk before the one-pass filter."""
    import kinetoscope.analysis.nesting as nesting_module

    trace = trace_of(slices)
    nesting = TraceSession(trace).nesting
    for lane in sorted(set(trace.lane.tolist())):
        on_lane = [int(r) for r in nesting.order if trace.lane[r] == lane]
        expected = [r for r in on_lane if trace.start[r] <= t < trace.start[r] + trace.dur[r]]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(nesting_module, "SLICES_AT_WALK", walk)
            got = nesting.slices_at(trace, lane, t)
        assert got.tolist() == expected
