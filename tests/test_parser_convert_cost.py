"""The conversion of decoded events to columns does its work column by column, not event by event:
the number of Python-level calls it makes does not grow with the number of events (counted with a
profile hook, so the tests do not depend on the machine's speed). And what the column-wise paths
give is what the per-event rules say."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from kinetoscope.parser import NO_VALUE, loads
from kinetoscope.parser.convert import convert_run
from kinetoscope.parser.events import EVENTS_DECODER
from kinetoscope.parser.model import ROW_COLUMNS
from work_count import CallCount


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
    with CallCount(python_only=True) as count:
        convert_run(events)
    return count.calls


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


def _builder_calls(runs: list) -> int:
    """Python functions called while the last of `runs` is merged (the others first)."""
    from kinetoscope.parser.builder import TraceBuilder

    builder = TraceBuilder()
    for run in runs[:-1]:
        builder.add_run(run, 0, 1)
    with CallCount(python_only=True) as count:
        builder.add_run(runs[-1], 0, 1)
    return count.calls


def test_merging_a_run_makes_no_call_per_known_string():
    """Each run brings its own table of strings (hundreds, nearly all seen in earlier runs):
    the loading process maps the known ones to the trace's ids without a call per string."""
    events = [{**_python_event(i), "name": f"f{i}"} for i in range(2000)]
    run = convert_run(_decoded(events))
    assert len(run.strings) > 2000
    calls = _builder_calls([run, convert_run(_decoded(events))])
    assert calls < 100, calls


def test_merged_runs_map_every_local_id():
    """Names, categories, lanes, shapes (-1: none) and string flow ids of runs merged in order,
    whole columns or one value per run (as workers send them), against the per-row mapping."""
    from kinetoscope.parser.builder import TraceBuilder
    from kinetoscope.parser.convert import STRING_FLOW_BASE
    from kinetoscope.parser.model import ROW_COLUMNS
    from kinetoscope.parser.parallel import constant_columns_as_values

    def flows(first: int) -> list[dict[str, Any]]:
        return [
            {"ph": "sf"[i % 2], "id": f"k{i // 2}", "pid": 7, "tid": 9, "ts": 1.0 + i, "cat": "c"}
            for i in range(first, first + 6)
        ]

    batches = [
        [_python_event(i) for i in range(40)],
        flows(0),
        [{**_python_event(i), "args": {}} for i in range(8)],  # one name... no shape at all
        [{**_python_event(3), "tid": 99} for _ in range(5)],  # every column one value
        flows(4),
        [],
    ]
    runs = [convert_run(_decoded(batch)) for batch in batches]
    for sent in (runs, [constant_columns_as_values(run) for run in runs]):
        builder = TraceBuilder()
        for run in sent:
            builder.add_run(run, 0, 1)
        merged = {c: builder.columns[c][: builder.n_rows].tolist() for c in ROW_COLUMNS}
        expected: dict[str, list] = {c: [] for c in ROW_COLUMNS}
        base = 0
        for run in runs:  # the whole columns, mapped row by row
            ids = [builder.string_ids[text] for text in run.strings]
            lanes = [builder.lane_ids[builder_key(p, t)] for p, t in run.lane_keys]
            expected["name"] += [ids[i] for i in run.name.tolist()]
            expected["cat"] += [ids[i] for i in run.cat.tolist()]
            expected["lane"] += [lanes[i] for i in run.lane.tolist()]
            expected["shape"] += [ids[i] if i >= 0 else -1 for i in run.shape.tolist()]
            expected["flow_id"] += [
                STRING_FLOW_BASE + ids[f - STRING_FLOW_BASE] if f >= STRING_FLOW_BASE else f
                for f in run.flow_id.tolist()
            ]
            expected["ordinal"] += [base + o for o in run.ordinal.tolist()]
            for column in set(ROW_COLUMNS) - {"name", "cat", "lane", "shape", "flow_id", "ordinal"}:
                expected[column] += getattr(run, column).tolist()
            base += run.n_events
        assert merged == expected
        assert any(f >= STRING_FLOW_BASE for f in merged["flow_id"])
        assert -1 in merged["shape"] and max(merged["shape"]) > 0


def builder_key(pid: Any, tid: Any) -> tuple:
    from kinetoscope.parser.builder import lane_key

    return (lane_key(pid), lane_key(tid))


def test_a_worker_returns_its_columns_in_shared_memory(tmp_path):
    """A worker writes a run's whole columns into the loading process's shared memory block:
    what crosses the pipe is a small fraction of the run, and the columns read back from the
    block are the run's. Columns too large for the block take the pipe as before."""
    import pickle

    from kinetoscope.parser.parallel import (
        Placed,
        _SharedBlocks,
        decode_file_run,
        identity_of,
    )
    from kinetoscope.parser.source import open_source

    events = [_python_event(i) for i in range(3000)] + [_flow_event(i) for i in range(40)]
    text = json.dumps(events).encode()
    path = tmp_path / "run.json"
    path.write_bytes(text)
    state = open_source(str(path))
    identity = identity_of(state)
    assert identity is not None
    whole = decode_file_run(identity, 1, len(text) - 2)
    assert whole is not None and not isinstance(whole, (str, Placed))
    for size, placed_expected in ((1 << 22, True), (1 << 10, False)):
        blocks = _SharedBlocks(1, size)
        block = blocks.take()
        if block is None:
            blocks.close()
            pytest.skip("no shared memory here")
        try:
            sent = decode_file_run(identity, 1, len(text) - 2, block.name)
            assert isinstance(sent, Placed) == placed_expected
            if isinstance(sent, Placed):
                assert len(pickle.dumps(sent)) < 0.2 * len(pickle.dumps(whole))
                run = pickle.loads(pickle.dumps(sent)).unpacked(block.buf)
            else:
                run = sent
            for column in ROW_COLUMNS:
                assert np.array_equal(getattr(run, column), getattr(whole, column)), column
            del run
        finally:
            blocks.close()
    state.close()


def _kernel_event(i: int, pid: Any = 0) -> dict[str, Any]:
    # Kernels of old traces (and of some tools) say no "device" in their args: the pid does.
    return {
        "ph": "X",
        "cat": "Kernel",
        "name": f"k{i % 7}",
        "pid": pid,
        "tid": 7 + i % 2,
        "ts": 10.0 + i,
        "dur": 0.5,
        "args": {"correlation": i, "stream": 7},
    }


def test_gpu_events_without_a_device_convert_without_a_call_per_event():
    """The device of a GPU event without one in its args is read from its pid once per
    distinct pid (it was a call per event)."""
    few = _python_calls(_decoded([_kernel_event(i, pid=i % 3) for i in range(20)]))
    many = _python_calls(_decoded([_kernel_event(i, pid=i % 3) for i in range(2000)]))
    assert many - few < 50, (few, many)


def test_gpu_events_without_a_device_take_their_pids():
    pids = [3, "5", "x", None, -4, 1 << 70, "0012", "99999999999999999999"]
    events = [_kernel_event(i, pid=pid) for i, pid in enumerate(pids)]
    events.append({**_kernel_event(9, pid=2), "args": {"device": 6}})
    run = convert_run(_decoded(events))
    assert run.device.tolist() == [3, 5, -1, -1, -4, -1, 12, -1, 6]


def _metadata_events(count: int, tids: int = 3) -> list[dict[str, Any]]:
    events = []
    for i in range(count):
        tid = i % tids
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": 9,
                "tid": tid,
                "args": {"name": f"process {i}"},
            }
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": 9,
                "tid": tid,
                "args": {"name": f"thread {tid}.{i}"},
            }
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": 9,
                "tid": tid,
                "args": {"sort_index": i},
            }
        )
    events.extend(
        {"ph": "X", "name": "a", "pid": 9, "tid": t, "ts": 1, "dur": 1} for t in range(tids)
    )
    return events


def test_metadata_events_load_without_a_call_per_event():
    """A trace may repeat its metadata events by the hundred thousand (an MTIA trace: 310,000
    for 10 threads): converted and merged, they cost no call per event."""
    from kinetoscope.parser.builder import TraceBuilder

    def calls(count: int) -> int:
        events = _decoded(_metadata_events(count))
        builder = TraceBuilder()
        with CallCount(python_only=True) as count_calls:
            builder.add_run(convert_run(events), 0, 1)
        return count_calls.calls

    few, many = calls(10), calls(3000)
    assert many - few < 50, (few, many)


def test_metadata_keeps_the_last_value_each_event_sets():
    """Per process (any tid) and per thread, the last value of the right type wins, across
    runs too; values of another type (a number for a name, a bool or float for a sort index)
    or no args set nothing; pid 1 and pid "1" are different processes."""
    from kinetoscope.parser.builder import TraceBuilder

    def meta(name: str, pid: Any, tid: Any, args: Any = None) -> dict[str, Any]:
        event: dict[str, Any] = {"ph": "M", "name": name, "pid": pid, "tid": tid}
        if args is not None:
            event["args"] = args
        return event

    first = [
        meta("process_name", 1, 0, {"name": "one"}),
        meta("process_name", 1, 5, {"name": "one later"}),  # another tid, the same process
        meta("process_name", 1, 0, {"name": 7}),  # not a name: sets nothing
        meta("process_name", "1", 0, {"name": "text one"}),
        meta("thread_sort_index", 1, 2, {"sort_index": 4}),
        meta("thread_sort_index", 1, 2, {"sort_index": True}),  # a bool: nothing
        meta("thread_sort_index", 1, 2, {"sort_index": 2.0}),  # a float: nothing
        meta("thread_name", 1, 2, {"name": "worker"}),
        meta("thread_name", 1, 3, {"name": "other"}),
        meta("process_labels", 1, 0, {"labels": "GPU 0"}),
        meta("process_sort_index", 1, 0),  # no args: nothing
        meta("process_sort_index", 1, 0, {"sort_index": 11}),
        meta("something_else", 1, 2, {"name": "ignored"}),
    ]
    second = [
        meta("thread_name", 1, 2, {"name": "worker, renamed"}),
        meta("process_sort_index", 1, 0, {"sort_index": None}),
        {"ph": "X", "name": "a", "pid": 1, "tid": 2, "ts": 1, "dur": 1},
        {"ph": "X", "name": "a", "pid": "1", "tid": 3, "ts": 1, "dur": 1},
    ]
    builder = TraceBuilder()
    for run in (first, second):
        builder.add_run(convert_run(_decoded(run)), 0, 1)
    from kinetoscope.parser.model import Source

    trace = builder.finish(Source(path="x", bytes=1, compressed=False), {})
    lanes = {(lane.pid, lane.tid): lane for lane in trace.lanes}
    lane = lanes[(1, 2)]
    assert (lane.process_name, lane.process_labels, lane.process_sort) == ("one later", "GPU 0", 11)
    assert (lane.thread_name, lane.thread_sort) == ("worker, renamed", 4)
    other = lanes[("1", 3)]
    assert (other.process_name, other.thread_name, other.process_sort) == ("text one", None, None)


def _mixed_run(n: int) -> list[dict[str, Any]]:
    """A run with a bit of everything: Python functions, operators with shapes, kernels without
    a device, string flow ids, memory events, metadata, an event without a time, instants."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}}
    ]
    for i in range(n):
        kind = i % 6
        if kind == 0:
            events.append(_python_event(i))
        elif kind == 1:
            events.append(_kernel_event(i, pid=i % 2))
        elif kind == 2:
            events.append(_memory_event(i))
        elif kind == 3:
            events.append(
                {
                    "ph": "sf"[i % 2],
                    "id": f"k{i // 2}",
                    "bp": "e",
                    "cat": "ac2g",
                    "pid": 7,
                    "tid": 7,
                    "ts": 5.0 + i,
                }
            )
        elif kind == 4:
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": f"aten::op{i % 9}",
                    "pid": 7,
                    "tid": 8,
                    "ts": 3 + i,
                    "dur": 2,
                    "args": {"External id": i, "Input Dims": [[i % 3, 4]]},
                }
            )
        else:
            events.append(
                {
                    "ph": "i",
                    "cat": "cpu_instant_event",
                    "name": "mark",
                    "pid": 7,
                    "tid": 9,
                    **({"ts": 4.5 + i} if i % 12 else {}),
                }
            )
    return events


def test_a_mixed_run_decodes_and_converts_without_a_call_per_event():
    """A worker's whole task (decode, convert, columns of one value made values) on a run
    that takes every path of the conversion."""
    from kinetoscope.parser.parallel import decode_array

    def calls(n: int) -> int:
        text = json.dumps(_mixed_run(n)).encode()
        with CallCount(python_only=True) as count:
            run = decode_array(text)
        assert run is not None and run.n_events == n + 1
        return count.calls

    few, many = calls(120), calls(6000)
    assert many - few < 80, (few, many)


def test_an_event_without_args_shares_the_one_empty_args():
    """Absent args are the decoder's default instance, not a new one per event, and read as
    absent (no shape, no ids); `"args": null` still reads as absent."""
    from kinetoscope.parser.events import EMPTY_ARGS

    events = EVENTS_DECODER.decode(
        json.dumps(
            [
                {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
                {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": None},
                {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 3, "dur": 1,
                 "args": {"Input Dims": [[2, 3]], "correlation": 5}},
            ]
        ).encode()
    )
    assert events[0].args is EMPTY_ARGS and events[1].args is None
    run = convert_run(events)
    assert run.shape[:2].tolist() == [-1, -1] and run.strings[run.shape[2]] == "[[2,3]]"
    assert run.corr.tolist() == [NO_VALUE, NO_VALUE, 5]


def test_shapes_turn_to_text_once_each_and_absent_ones_are_none():
    """The shapes' raw texts are split out of one joined buffer; absent (no key) and null are
    both -1, and only the distinct texts are turned into text."""
    objects = [
        {"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 1,
         "args": ({"Input Dims": [[i % 3, 4], []]} if i % 4 else {"Input Dims": None})
         if i % 5 else {}}
        for i in range(400)
    ]
    run = convert_run(_decoded(objects))
    want = [
        -1 if i % 5 == 0 or i % 4 == 0 else run.strings.index(f"[[{i % 3},4],[]]")
        for i in range(400)
    ]
    assert run.shape.tolist() == want
    assert _python_calls(_decoded(objects)) == _python_calls(_decoded(objects[:40] * 10))


def test_a_raw_shape_holding_the_separator_takes_the_careful_path():
    """Were a raw shape ever to hold a NUL byte, the joined texts would not split back into
    one piece per row: the conversion then reads them one by one, as the joined path would
    (a raw NUL is no valid JSON text, so that shape is odd)."""
    import msgspec
    from kinetoscope.parser.convert import _raw_keys, _shape_ids

    values = [msgspec.Raw(b"[[1, 2]]"), msgspec.Raw(b'["a\x00b"]'), msgspec.Raw(b"")]
    assert _raw_keys(values) is None
    table: list[str] = []
    ids, odd = _shape_ids(values, lambda text: table.append(text) or len(table) - 1)
    assert odd == 1 and ids.tolist() == [0, -1, -1] and table == ["[[1,2]]"]
