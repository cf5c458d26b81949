"""The conversion of decoded events to columns does its work column by column, not event by event:
the number of Python-level calls it makes does not grow with the number of events (counted with a
profile hook, so the tests do not depend on the machine's speed). And what the column-wise paths
give is what the per-event rules say."""

from __future__ import annotations

import json
import sys
from typing import Any

from kinetoscope.parser import NO_VALUE, loads
from kinetoscope.parser.convert import convert_run
from kinetoscope.parser.events import EVENTS_DECODER


def _memory_event(i: int) -> dict[str, Any]:
    return {
        "ph": "i",
        "s": "t",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": 7,
        "tid": 7 + i % 3,
        "ts": 1000.5 + i,
        "args": {
            "Addr": 94_000_000_000 + i,
            "Bytes": 512 * (i % 5 + 1),
            "Total Allocated": 1 << 29,
            "Total Reserved": 1 << 30,
            "Device Id": 0,
            "Device Type": 1,
        },
    }


def _python_event(i: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "python_function",
        "name": f"module.py({i % 50}): f{i % 50}",
        "pid": 7,
        "tid": 7 + i % 3,
        "ts": 1000.25 + i,
        "dur": 0.5,
        "args": {"Python id": i, "Python parent id": i - 1, "Input Dims": [[i % 4, 3], []]},
    }


def _python_calls(events: list) -> int:
    """Python functions called while `events` are converted."""
    calls = 0

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(hook)
    try:
        convert_run(events)
    finally:
        sys.setprofile(None)
    return calls


def _decoded(objects: list[dict[str, Any]]) -> list:
    return EVENTS_DECODER.decode(json.dumps(objects).encode())


def test_memory_events_convert_without_a_call_per_event():
    # A profile_memory trace holds about as many memory events as others: each used to take
    # six calls (one per field) in a per-event loop, the conversion's costliest part.
    few = _python_calls(_decoded([_memory_event(i) for i in range(20)]))
    many = _python_calls(_decoded([_memory_event(i) for i in range(2000)]))
    assert many - few < 50, (few, many)


def test_rows_convert_without_a_call_per_event():
    few = _python_calls(_decoded([_python_event(i) for i in range(100)]))
    many = _python_calls(_decoded([_python_event(i) for i in range(5000)]))
    # Each distinct string (name, shape) is numbered once: 50 names and 4 shapes in both runs.
    assert many - few < 50, (few, many)


def test_memory_fields_keep_the_per_event_rules():
    """Whole-number floats are integers; bools, other floats, strings, null and integers beyond
    int64 are missing; a memory event without args or without a time is kept."""
    values = [3, 3.0, 2.5, True, "5", None, 1 << 63, -(1 << 63), -(1 << 63) + 1, 1e300]
    expected = [3, 3, NO_VALUE, NO_VALUE, NO_VALUE, NO_VALUE, NO_VALUE, NO_VALUE]
    expected += [-(1 << 63) + 1, NO_VALUE]
    events = [
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": i, "args": {"Bytes": value}}
        for i, value in enumerate(values)
    ]
    events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 2, "ts": 20})
    events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 3, "args": {"Bytes": 8}})
    trace = loads(json.dumps(events).encode())
    mem = trace.memory
    assert mem.bytes.tolist() == [*expected, NO_VALUE, 8]
    assert mem.addr.tolist() == [NO_VALUE] * len(events)
    lanes = mem.lane.tolist()
    assert lanes[-1] == -1 and lanes[-2] >= 0  # no time: no lane
    assert mem.ts.tolist()[-1] == NO_VALUE and mem.ts.tolist()[0] == 0


def test_all_integer_memory_fields_take_the_one_conversion():
    events = [_memory_event(i) for i in range(30)]
    events[7]["args"]["Addr"] = 1 << 64  # beyond int64: this run takes the per-field path
    for batch in (events[:7], events):
        trace = loads(json.dumps(batch).encode())
        assert trace.memory.bytes.tolist() == [512 * (i % 5 + 1) for i in range(len(batch))]
        addr = trace.memory.addr.tolist()
        assert addr[:7] == [94_000_000_000 + i for i in range(7)]
    assert addr[7] == NO_VALUE


def test_a_worker_sends_constant_columns_as_one_value():
    """A run of Python functions has no correlation, flow, stream or device: those columns (and
    the phase) go back from a worker as one value each, and merge into the same model."""
    import pickle

    from kinetoscope.parser.builder import TraceBuilder
    from kinetoscope.parser.model import ROW_COLUMNS
    from kinetoscope.parser.parallel import decode_array

    text = json.dumps([_python_event(i) for i in range(5000)]).encode()
    sent = decode_array(text)
    whole = convert_run(_decoded([_python_event(i) for i in range(5000)]))
    assert sent is not None
    assert len(pickle.dumps(sent)) < 0.6 * len(pickle.dumps(whole))
    merged = []
    for run in (pickle.loads(pickle.dumps(sent)), whole):
        builder = TraceBuilder()
        builder.add_run(run, 0, len(text))
        merged.append({c: builder.columns[c][: builder.n_rows].tolist() for c in ROW_COLUMNS})
    assert merged[0] == merged[1]


def _flow_event(i: int, bp: Any = "e") -> dict[str, Any]:
    return {"ph": "sf"[i % 2], "id": i // 2, "pid": 7, "tid": 7, "ts": 5.0 + i, "bp": bp}


def test_flow_binding_points_convert_without_a_call_per_event():
    few = _python_calls(_decoded([_flow_event(i) for i in range(20)]))
    many = _python_calls(_decoded([_flow_event(i) for i in range(2000)]))
    assert many - few < 50, (few, many)


def test_flow_binding_points_keep_their_codes():
    """ "e" and other one-letter ASCII points are their byte; anything else (a list, a number,
    a non-ASCII letter) is 0, and one unhashable point does not change the others' codes."""
    points = ["e", "s", None, 1, "é", "", ["e"]]
    for batch in (points[:-1], points):
        run = convert_run(_decoded([_flow_event(i, bp) for i, bp in enumerate(batch)]))
        expected = [ord("e"), ord("s"), 0, 0, 0, 0, 0][: len(batch)]
        assert run.flow_bp.tolist() == expected
