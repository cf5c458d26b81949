"""Traces that are valid JSON but odd: each oddity at the parser, analysis and view levels.

Nothing is hidden: odd events are loaded, counted and drawn, the summary keeps its invariants
(and agrees with the plain reference), and the oddities that could mislead become findings."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fuzz.harness import check_analysis, check_report, check_trace, check_view
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import loads
from spec_reference import contract_view, summarize


def X(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def K(name, ts, dur, corr=None, stream=7):
    args = {"device": 0, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
            "dur": dur, "args": args}  # fmt: skip


def R(ts, corr, name="cudaLaunchKernel", dur=2):
    return X(name, ts, dur, cat="cuda_runtime", correlation=corr)


def everything(events, **header):
    """Load, check every level, compare with the reference; returns (trace, summary)."""
    doc = {"schemaVersion": 1, "traceEvents": events, **header}
    trace = loads(json.dumps(doc).encode())
    check_trace(trace)
    summary = check_analysis(trace)
    check_view(trace)
    check_report(trace)
    reference = summarize(json.loads(json.dumps(doc)))
    assert json.dumps(contract_view(summary, reference), sort_keys=True) == json.dumps(
        reference, sort_keys=True
    )
    return trace, summary


def rules_of(trace):
    return {f.rule: f for f in TraceSession(trace).findings}


def test_overlapping_kernels_on_one_stream_are_counted_merged_and_flagged():
    events = [
        R(0, 1),
        R(5, 2),
        R(8, 3),
        K("long", 10, 100, corr=1),
        K("inside", 30, 20, corr=2),  # wholly inside "long"
        K("straddling", 90, 40, corr=3),  # starts inside, ends after
    ]
    trace, summary = everything(events)
    (gpu,) = summary["gpu"]
    assert gpu["kernels"] == 3
    assert gpu["busy_us"] == 120.0 and gpu["idle_us"] == 0.0
    assert {k["name"]: k["count"] for k in summary["kernels"]} == {
        "long": 1,
        "inside": 1,
        "straddling": 1,
    }
    finding = rules_of(trace)["overlapping_gpu_work"]
    assert finding.severity == "info" and finding.message.startswith("2 GPU activities")
    names = [trace.name_of(r) for r in finding.rows]
    assert names[:2] == ["inside", "long"] and "straddling" in names
    assert any(f["rule"] == "overlapping_gpu_work" for f in summary["findings"])


def test_kernels_back_to_back_are_not_flagged():
    trace, _ = everything([K("a", 0, 10), K("b", 10, 10), K("c", 25, 5), K("d", 25, 0)])
    assert "overlapping_gpu_work" not in rules_of(trace)


def test_child_that_outlives_its_parent_becomes_a_sibling_and_is_flagged():
    events = [X("parent", 0, 10), X("child", 2, 3), X("outliver", 5, 20), X("inner", 6, 1)]
    trace, summary = everything(events)
    nesting = TraceSession(trace).nesting
    row = {trace.name_of(r): r for r in range(len(trace))}
    assert nesting.parent[row["outliver"]] == -1  # a sibling of "parent", not its child
    assert nesting.parent[row["child"]] == row["parent"]
    assert nesting.parent[row["inner"]] == row["outliver"]
    finding = rules_of(trace)["slice_outlives_parent"]
    assert [trace.name_of(r) for r in finding.rows[:2]] == ["outliver", "parent"]
    assert finding.message.startswith("1 CPU slices")


def test_self_time_of_a_group_can_exceed_its_total_only_with_outliving_slices():
    # The contract's definitions, followed exactly: G's nested instances overlap each other,
    # each becomes a child of the outer G, and their self times add up to more than G's total.
    events = [X("G", 0, 10)] + [X("G", i, 6) for i in range(3)]
    trace, summary = everything(events)
    (op,) = summary["operators"]
    assert (op["incl_us"], op["excl_us"]) == (10.0, 18.0)
    assert "slice_outlives_parent" in rules_of(trace)
    # Properly nested, the same slices keep excl <= incl.
    trace, summary = everything([X("G", 0, 10), X("G", 1, 6), X("G", 2, 3)])
    (op,) = summary["operators"]
    assert op["excl_us"] <= op["incl_us"]
    assert "slice_outlives_parent" not in rules_of(trace)


def test_negative_durations_count_as_zero_with_a_warning():
    trace, summary = everything([X("neg", 10, -5), X("ok", 20, 5), K("kneg", 30, -1.5)])
    assert trace.dur.tolist() == [0, 5000, 0]
    assert any("negative duration" in w for w in summary["trace"]["warnings"])
    assert summary["gpu"][0]["window_start_us"] is None  # only a zero-length kernel


def test_events_before_the_profiler_window_are_kept_and_flagged():
    window = X("PyTorch Profiler (0)", 100, 1000, cat="Trace", pid="Spans", tid="PyTorch Profiler")
    events = [window, X("early", 40, 80), X("inside", 200, 10)]
    trace, summary = everything(events)
    assert summary["trace"]["start_us"] == 40.0
    finding = rules_of(trace)["events_before_window"]
    assert [trace.name_of(r) for r in finding.rows] == ["early"]
    # The window span itself is not work: not an operator.
    assert {o["name"] for o in summary["operators"]} == {"early", "inside"}


def test_timestamps_far_in_the_future_are_kept_and_flagged():
    events = [X(f"op{i}", i * 10, 5) for i in range(20)]
    events.append({"ph": "i", "s": "g", "name": "Record Window End", "ts": 9e12, "pid": "",
                   "tid": ""})  # fmt: skip
    events.append(X("stray", 5e12, 1))
    trace, summary = everything(events)
    assert summary["trace"]["end_us"] == 5e12 + 1
    finding = rules_of(trace)["events_far_from_the_rest"]
    assert [trace.name_of(r) for r in finding.rows] == ["stray"]
    # An instant far away (Kineto's Record Window End) is a row but not part of the span.
    assert "Record Window End" in {trace.name_of(r) for r in range(len(trace))}
    trace, _ = everything(events[:-1])
    assert "events_far_from_the_rest" not in rules_of(trace)


def test_a_slice_a_century_long_is_drawn_and_summarised():
    # A century in ns still fits the parser's time range (±2**62 ns, about 146 years); times
    # beyond it are cut there with a warning (tests/test_robust_values.py).
    trace, summary = everything([X("early", -2696.058, 1), X("huge", 0, 3.1e15)])
    assert summary["trace"]["end_us"] == 3.1e15
    assert {o["name"]: o["incl_us"] for o in summary["operators"]}["huge"] == 3.1e15


def test_unmatched_flows_are_harmless():
    events = [
        R(0, 1),
        K("k", 5, 5, corr=1),
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 0},
        {
            "ph": "f",
            "id": 99,
            "cat": "ac2g",
            "name": "ac2g",
            "pid": 0,
            "tid": 7,
            "ts": 5,
            "bp": "e",
        },  # fmt: skip
        {"ph": "t", "id": "x", "cat": "ac2g", "pid": 0, "tid": 7, "ts": 6},
    ]
    trace, summary = everything(events)
    assert summary["trace"]["by_phase"] == {"X": 2, "s": 1, "f": 1, "t": 1}
    kernel = int(np.flatnonzero(trace.name == trace.string_id("k"))[0])
    assert TraceSession(trace).runtime_of(kernel) == 0  # linked by correlation, flows or not


def test_duplicate_correlation_ids_link_the_first_call_and_are_flagged():
    events = [R(0, 7, "first"), R(3, 7, "second"), K("k", 10, 5, corr=7)]
    trace, summary = everything(events)
    row = {trace.name_of(r): r for r in range(len(trace))}
    assert TraceSession(trace).runtime_of(row["k"]) == row["first"]
    assert len(TraceSession(trace).gpu_of(row["second"])) == 0
    finding = rules_of(trace)["duplicate_correlation"]
    assert [trace.name_of(r) for r in finding.rows] == ["second"]
    (gap,) = summary["idle_gaps"] or [None]
    assert gap is None  # one kernel: no gap


@pytest.mark.parametrize(
    "events, expect",
    [
        ([X("a", 0, 10), X("ProfilerStep#1", 0, 20)], "no GPU"),
        ([K("a", 0, 10), K("b", 50, 10)], "only GPU"),
        ([R(0, 1), K("a", 5, 10, corr=1), R(20, 2), K("b", 40, 5, corr=2)], "no steps"),
        ([], "empty"),
        ([{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}], "metadata"),
    ],
)
def test_traces_missing_whole_kinds_of_events_still_summarise(events, expect):
    trace, summary = everything(events)
    if expect == "no GPU":
        assert summary["gpu"] == [] and summary["idle_gaps"] == [] and summary["kernels"] == []
        assert len(summary["steps"]) == 1
    elif expect == "only GPU":
        assert summary["operators"] == [] and summary["steps"] == []
        assert summary["idle_gaps"][0]["cause"] == "other"
        assert summary["idle_gaps"][0]["cpu_stack"] == []
    elif expect == "no steps":
        assert summary["steps"] == [] and summary["idle_gaps"][0]["cause"] == "host_wait"
    else:
        assert summary["trace"]["start_us"] is None and summary["gpu"] == []
        assert summary["operators"] == [] and summary["findings"] == []


# -- the same oddities in the viewer ------------------------------------------------------------

WINDOW = X("PyTorch Profiler (0)", 100, 1000, cat="Trace", pid="Spans", tid="PyTorch Profiler")
ODD_TRACES = {
    "overlapping-kernels": [
        R(0, 1),
        R(5, 2),
        K("long", 10, 100, corr=1),
        K("inside", 30, 20, corr=2),
        K("after", 200, 10),
    ],
    "outliving-child": [X("parent", 0, 10), X("child", 2, 3), X("outliver", 5, 20)],
    "negative-durations": [X("neg", 10, -5), X("ok", 20, 5), K("kneg", 30, -1.5)],
    "before-window": [WINDOW, X("early", 40, 80), X("inside", 200, 10)],
    "far-future": [X(f"op{i}", i * 10, 5) for i in range(20)] + [X("stray", 5e12, 1)],
    "unmatched-flows": [
        R(0, 1),
        K("k", 5, 5, corr=1),
        {"ph": "f", "id": 99, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 5},
    ],
    "duplicate-correlation": [R(0, 7, "first"), R(3, 7, "second"), K("k", 10, 5, corr=7)],
    "no-gpu": [X("ProfilerStep#1", 0, 20), X("a", 0, 10)],
    "only-gpu": [K("a", 0, 10), K("b", 50, 10)],
    "no-steps": [R(0, 1), K("a", 5, 10, corr=1), R(20, 2), K("b", 40, 5, corr=2)],
}
EXPECTED_FINDING = {
    "overlapping-kernels": "overlapping_gpu_work",
    "outliving-child": "slice_outlives_parent",
    "before-window": "events_before_window",
    "far-future": "events_far_from_the_rest",
    "duplicate-correlation": "duplicate_correlation",
}


@pytest.mark.parametrize("name", sorted(ODD_TRACES))
async def test_odd_traces_are_shown_in_the_viewer(tmp_path, name):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.screens import TraceScreen
    from kinetoscope.tui.widgets.timeline import Timeline
    from test_robust_tui import quit_cleanly, screen_text, wait_for

    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"traceEvents": ODD_TRACES[name]}))
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await wait_for(pilot, TraceScreen)
        timeline = screen.query_one(Timeline)
        data = timeline.data
        # Every slice has its place on the timeline and can be selected there.
        for row in np.flatnonzero(data.trace.ph == ord("X")).tolist():
            lane, level, _entry = data.level_of_row(row)
            assert lane >= 0 and level >= 0, data.trace.name_of(row)
            timeline.select(row)
            await pilot.press("f")
            assert timeline.selected_row == row
            shown = timeline.rows[timeline.cursor_row]
            assert (shown.group, shown.lane, shown.level) == (data.lanes[lane].group, lane, level)
        text = screen_text(app)
        if name == "negative-durations":
            assert any("negative duration" in n.message for n in app._notifications)
        for key in ("0", "g", "G", "right", "left", "u", "right_square_bracket", "i", "escape"):
            await pilot.press(key)
        await pilot.press("t")
        await pilot.pause(0.3)
        text = screen_text(app)
        if name in EXPECTED_FINDING:
            assert EXPECTED_FINDING[name] in text
        await pilot.press("escape")
        await pilot.pause(0.05)
        await quit_cleanly(pilot)
