"""On every real trace of the corpus: the summary equals the plain reference implementation of
the contract, field by field (keys the document adds are not compared), and the analysis keeps
its invariants (in integer ns).

Floats are compared exactly: both sides turn the same integer nanoseconds into microseconds with
Python's correctly rounded int / int division and round(x, 3), so there is no float noise to
allow for.
"""

import json
import math

import numpy as np
import pytest
from conftest import corpus_params
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import load
from spec_reference import contract_view, reference_summary

pytestmark = pytest.mark.corpus


def differences(expected, got, path=""):
    """Paths where two JSON values differ (ints and floats of equal value count as equal)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(expected) | set(got), key=str):
            if key not in got or key not in expected:
                out.append(f"{path}.{key}: only in {'reference' if key in expected else 'ours'}")
            else:
                out += differences(expected[key], got[key], f"{path}.{key}")
        return out
    if isinstance(expected, list) and isinstance(got, list):
        out = [] if len(expected) == len(got) else [f"{path}: {len(expected)} vs {len(got)} items"]
        for i, (a, b) in enumerate(zip(expected, got)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    if isinstance(expected, bool) != isinstance(got, bool) or expected != got:
        return [f"{path}: reference {expected!r}, ours {got!r}"]
    return []


@pytest.mark.parametrize("path", corpus_params())
def test_summary_matches_reference_and_invariants(path):
    expected = reference_summary(str(path))
    trace = load(str(path))
    summary = build_summary(trace)

    # Every key of the contract is compared; keys the document adds to it are not.
    assert differences(expected, contract_view(summary, expected)) == []
    json.dumps(summary)  # the whole document, findings included, is plain JSON

    check_invariants(trace, summary)


def check_invariants(trace, summary):
    a = TraceSession(trace)

    # Operators: gpu_self <= gpu_total for every group (a launch's parent instance lies under
    # the outermost instance of its group). excl <= incl holds unless partly overlapping
    # siblings of one group sit under another instance of it (see the definitions tests);
    # real traces do not do that.
    ops = a.operators
    assert np.all(ops.gpu_self <= ops.gpu_total)
    assert np.all(ops.excl <= ops.incl)
    assert np.all(ops.excl >= 0) and np.all(ops.incl >= 0)
    assert int(ops.count.sum()) == len(a.nesting.order)

    # Devices: busy + idle = window; idle by cause sums to idle; gaps positive, inside window.
    gaps = a.idle.gaps
    for dev in a.idle.devices:
        mine = gaps.device == dev.device
        if dev.window is None:
            assert dev.busy_ns == 0 and dev.idle_ns == 0 and not mine.any()
            continue
        lo, hi = dev.window
        assert dev.busy_ns + dev.idle_ns == hi - lo
        assert sum(dev.idle_by_cause) == dev.idle_ns
        assert int((gaps.end[mine] - gaps.start[mine]).sum()) == dev.idle_ns
        assert np.all(gaps.end[mine] > gaps.start[mine])
        assert np.all(gaps.start[mine] >= lo) and np.all(gaps.end[mine] <= hi)
        # A gap's end is where its next GPU event starts, on the same device.
        assert np.array_equal(trace.start[gaps.next_row[mine]], gaps.end[mine])
        assert np.all(trace.device[gaps.next_row[mine]] == dev.device)
    for entry in summary["gpu"]:
        if entry["window_start_us"] is not None:
            # Epoch timestamps in µs (~1.7e15) are only representable to 0.25 µs as floats, so
            # in the JSON the window's length is exact only to a couple of ulps of its ends;
            # the exact check is the one on integer ns above.
            slack = 2 * math.ulp(entry["window_end_us"]) + 0.002
            window = entry["window_end_us"] - entry["window_start_us"]
            assert entry["busy_us"] + entry["idle_us"] == pytest.approx(window, abs=slack)

    # The reported gaps are the longest, longest first.
    lengths = [g["dur_us"] for g in summary["idle_gaps"]]
    assert lengths == sorted(lengths, reverse=True)
    if len(gaps) > len(lengths) and lengths:
        assert lengths[-1] * 1000 >= np.sort(gaps.end - gaps.start)[-len(lengths)] - 1

    # Steps: the GPU breakdown adds up to the step; every part fits in it.
    steps = a.steps
    assert np.array_equal(steps.compute + steps.comm + steps.memory + steps.idle, steps.dur)
    for part in (
        steps.gpu_busy,
        steps.dataloader,
        steps.compute,
        steps.comm,
        steps.memory,
        steps.idle,
        steps.runtime,
        steps.comm_total,
    ):
        assert np.all(part >= 0) and np.all(part <= steps.dur)

    # Nesting: a parent starts no later and ends no earlier than its child, on the same lane.
    parent = a.nesting.parent
    child = np.flatnonzero(parent >= 0)
    p = parent[child]
    assert np.all(trace.start[p] <= trace.start[child])
    assert np.all(trace.start[p] + trace.dur[p] >= trace.start[child] + trace.dur[child])
    assert np.array_equal(trace.lane[p], trace.lane[child])
    assert np.array_equal(a.nesting.depth[child], a.nesting.depth[p] + 1)
