"""One odd value must not lose a file, nor make a number wrong (issue 20).

Out-of-range numbers in events and in the header, extreme but valid integers, running out of
memory, and runs of events with the defects of old Kineto traces (NaN, raw control characters),
which are repaired as a whole and must decode to what the event-by-event salvage gives."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from fuzz.harness import check_analysis, check_report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kinetoscope.parser import NO_VALUE, builder, loads, parallel, reader
from kinetoscope.parser.events import repair_json, string_quotes
from kinetoscope.parser.model import MEMORY_COLUMNS, MODEL_BYTES_PER_EVENT, ROW_COLUMNS


def _cli(path, *extra, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", str(path), *extra],
        capture_output=True,
        timeout=300,
        **kwargs,
    )


def _op(name, ts, dims="[[2, 3]]", **args):
    args_text = ", ".join(f'"{k}": {v}' for k, v in args.items())
    extra = f", {args_text}" if args_text else ""
    return (
        f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts},'
        f' "dur": 1, "args": {{"Input Dims": {dims}{extra}}}}}'
    )


# -- 1. an out-of-range number inside an event -------------------------------------------------


@pytest.mark.parametrize("number", ["1e400", "-1e999", "NaN", "Infinity"])
def test_a_number_out_of_range_in_input_dims_is_a_missing_shape(number):
    text = f"[{_op('a', 1)}, {_op('odd', 2, f'[[2, {number}], []]')}, {_op('b', 3)}]"
    trace = loads(text.encode())
    assert trace.n_events == 3 and len(trace) == 3
    shapes = [trace.strings[s] if s >= 0 else None for s in trace.shape.tolist()]
    assert shapes == ["[[2,3]]", None, "[[2,3]]"]
    assert any("1 input shapes hold a number out of range" in w for w in trace.warnings)
    check_analysis(trace)


def test_summary_of_a_trace_with_an_out_of_range_shape_succeeds(write_trace):
    text = f'{{"traceEvents": [{_op("a", 1)}, {_op("odd", 2, "[[1e400]]")}]}}'
    path = write_trace(text)
    for extra in ((), ("--json",)):
        result = _cli(path, *extra)
        assert result.returncode == 0, result.stderr.decode()
        assert b"Traceback" not in result.stderr
    document = json.loads(_cli(path, "--json").stdout)
    assert document["trace"]["events"] == 2
    assert any("input shapes" in w for w in document["trace"]["warnings"])


def test_numbers_out_of_range_in_any_decoded_field_are_missing_values():
    events = [
        '{"ph": "X", "name": "ts", "pid": 1, "tid": 1, "ts": 1e400, "dur": 1}',
        '{"ph": "X", "name": "dur", "pid": 1, "tid": 1, "ts": 2, "dur": -1e999}',
        '{"ph": "X", "cat": "cuda_runtime", "name": "corr", "pid": 1, "tid": 1, "ts": 3,'
        ' "dur": 1, "args": {"correlation": 1e400, "External id": 7}}',
        '{"ph": "X", "name": "pid", "pid": 1e400, "tid": 1, "ts": 4, "dur": 1}',
        '{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5,'
        ' "args": {"Bytes": 1e400, "Total Allocated": 10, "Device Type": 1, "Device Id": 0}}',
        '{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 6, "dur": 1}',
    ]
    trace = loads(("[" + ",".join(events) + "]").encode())
    assert trace.n_events == 6
    names = [trace.name_of(r) for r in range(len(trace))]
    assert names == ["dur", "corr", "pid", "[memory]", "ok"]  # ts 1e400: counted, no row
    assert trace.dur[0] == 0
    assert trace.corr[1] == NO_VALUE and trace.ext_id[1] == 7
    assert trace.lanes[int(trace.lane[2])].pid is None
    assert trace.memory.bytes.tolist() == [NO_VALUE]
    assert trace.memory.total_allocated.tolist() == [10]
    assert any("5 numbers beyond float range" in w for w in trace.warnings)
    check_analysis(trace)


# -- 2. header values of the wrong type or range -----------------------------------------------

WRONG_HEADERS = [
    ('"deviceProperties": [{"id": 0, "name": "H100", "totalGlobalMem": 1e400}]', "totalGlobalMem"),
    ('"deviceProperties": [{"id": 0, "totalGlobalMem": ' + "9" * 400 + "}]", "totalGlobalMem"),
    ('"deviceProperties": [{"id": [0], "totalGlobalMem": 85000000000}]', "[0].id"),
    ('"deviceProperties": [{"id": {"a": 1}, "totalGlobalMem": 85000000000}]', "[0].id"),
    ('"deviceProperties": [{"id": 0, "name": 7, "totalGlobalMem": "80GB"}]', "[0].name"),
    ('"deviceProperties": [5, "x", {"id": 1}]', "deviceProperties[0]"),
    ('"deviceProperties": {"id": 0}', "deviceProperties"),
    ('"computeProperties": [{"id": true, "totalGlobalMem": -Infinity}]', "computeProperties"),
    ('"schemaVersion": "one"', "schemaVersion"),
    ('"baseTimeNanoseconds": 1.5e400', "baseTimeNanoseconds"),
    ('"distributedInfo": {"rank": [0], "world_size": 1e999}', "distributedInfo.rank"),
    ('"displayTimeUnit": {"ms": 1}', "displayTimeUnit"),
]


def _header_trace(header: str) -> bytes:
    memory = ", ".join(
        f'{{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": {10 + i}, "args": '
        f'{{"Addr": {100 + i}, "Bytes": 1000, "Total Allocated": {1000 * (i + 1)}, '
        f'"Total Reserved": 8000, "Device Type": 1, "Device Id": 0}}}}'
        for i in range(3)
    )
    return (
        f'{{{header}, "traceEvents": [{_op("a", 1)}, {memory},'
        ' {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": 3,'
        ' "args": {"device": 0, "stream": 7}}]}'
    ).encode()


@pytest.mark.parametrize("header, where", WRONG_HEADERS)
def test_a_header_value_of_the_wrong_type_or_range_is_ignored_with_a_warning(header, where):
    trace = loads(_header_trace(header))
    assert trace.n_events == 5
    assert any("ignored the header value" in w and where in w for w in trace.warnings)
    document = check_analysis(trace)
    for device in document["devices"]:
        assert device["id"] is None or type(device["id"]) in (int, str)
        total = device["total_memory_bytes"]
        assert total is None or (type(total) is int and total >= 0)
    check_report(trace)


def test_summary_with_odd_header_values_exits_0(write_trace):
    for header, _where in WRONG_HEADERS[:4]:
        result = _cli(write_trace(_header_trace(header)))
        assert result.returncode == 0, result.stderr.decode()
        assert b"ignored the header value" in result.stdout


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
DEVICE_KEYS = st.sampled_from(["id", "name", "totalGlobalMem", "numSms", "computeMajor"])
HEADER_VALUES = {
    "deviceProperties": st.lists(
        st.dictionaries(DEVICE_KEYS, JSON_VALUES) | JSON_VALUES, max_size=3
    )
    | JSON_VALUES,
    "computeProperties": st.lists(st.dictionaries(DEVICE_KEYS, JSON_VALUES), max_size=2),
    "distributedInfo": st.dictionaries(st.sampled_from(["rank", "world_size"]), JSON_VALUES)
    | JSON_VALUES,
    "schemaVersion": JSON_VALUES,
    "baseTimeNanoseconds": JSON_VALUES,
    "displayTimeUnit": JSON_VALUES,
    "traceName": JSON_VALUES,
}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.fixed_dictionaries({}, optional=HEADER_VALUES))
def test_header_fields_of_any_type_never_stop_the_load(header):
    # Python's json writes NaN and Infinity as bare words, as a broken writer may.
    text = json.dumps(header)[1:-1] or '"x": 0'
    trace = loads(_header_trace(text))
    assert trace.n_events == 5
    document = check_analysis(trace)
    assert len(document["devices"]) <= 3
    check_report(trace)


# -- 3. extreme but valid integers -------------------------------------------------------------

NEAR = (1 << 62) // 1000 - 1000  # µs: within the time limit, and far apart


def _kernel(name, ts, dur, tid=7, device=0):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": tid},
    }


def test_times_near_the_int64_limit_give_no_negative_or_wrapped_numbers(write_trace):
    events = [
        _kernel("k1", -NEAR, 2),
        _kernel("k2", NEAR, 2),
        _kernel("long", -NEAR, 2 * NEAR, tid=8, device=1),
        _kernel("long", -NEAR, 2 * NEAR, tid=9, device=1),
        *(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "op",
                "pid": 1,
                "tid": t,
                "ts": -NEAR,
                "dur": 2 * NEAR,
            }
            for t in (1, 2, 3)
        ),
    ]
    result = _cli(write_trace({"traceEvents": events}), "--json")
    assert result.returncode == 0, result.stderr.decode()
    assert b"overflow" not in result.stderr
    document = json.loads(result.stdout)
    gap = 2 * NEAR * 1000 - 2000  # ns, from the end of k1 to the start of k2
    (one_gap,) = document["idle_gaps"]
    assert one_gap["dur_us"] == round(gap / 1000, 3) > 0
    gpu0 = document["gpu"][0]
    assert gpu0["idle_us"] == one_gap["dur_us"]
    assert sum(gpu0["idle_by_cause"].values()) == gpu0["idle_us"]
    assert all(v >= 0 for g in document["gpu"] for v in g["idle_by_cause"].values())
    (op,) = document["operators"]
    # Three durations of about 2**63 ns: their sum is past int64.
    assert op["incl_us"] == round(3 * 2 * NEAR * 1000 / 1000, 3) > 0
    long_kernels = next(k for k in document["kernels"] if k["name"] == "long")
    assert long_kernels["total_us"] == round(2 * 2 * NEAR * 1000 / 1000, 3) > 0


def test_times_beyond_the_limit_are_not_placed_with_a_warning():
    far = (1 << 63) // 1000 - 1000  # fits in int64 ns, but no difference with -far does
    text = json.dumps(
        {"traceEvents": [_kernel("a", -far, 2), _kernel("b", far, 2), _kernel("c", 5, far)]}
    )
    trace = loads(text.encode())
    assert trace.n_events == 3
    assert [trace.name_of(r) for r in range(len(trace))] == ["c"]
    assert int(trace.end[0]) == 1 << 62  # cut at the limit
    assert any("2 events have a time more than 2^62 ns" in w for w in trace.warnings)
    assert any("1 events end more than 2^62 ns" in w for w in trace.warnings)
    check_analysis(trace)


def test_memory_bytes_near_2_to_the_63_sum_exactly(write_trace):
    big = 1 << 62
    memory = [
        {
            "ph": "i",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": 10 + i,
            "args": {
                "Addr": 1000 + i,
                "Bytes": big,
                "Total Allocated": big * (i + 1) // 4,
                "Total Reserved": big,
                "Device Type": 1,
                "Device Id": 0,
            },
        }
        for i in range(4)
    ]
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 5, "dur": 20}
    result = _cli(write_trace({"traceEvents": [op, *memory]}), "--json")
    assert result.returncode == 0, result.stderr.decode()
    document = json.loads(result.stdout)
    (row,) = document["memory_ops"]
    assert row["allocations"] == 4
    assert row["allocated_bytes"] == 4 * big == row["unfreed_bytes"] == row["incl_allocated_bytes"]
    assert document["memory"][0]["unfreed_bytes"] == 4 * big


# -- 4. out of memory --------------------------------------------------------------------------


def test_the_model_bytes_per_event_are_those_of_its_columns():
    trace = loads(f"[{_op('a', 1)}, {_op('b', 2)}]".encode())
    assert sum(getattr(trace, c).itemsize for c in ROW_COLUMNS) == MODEL_BYTES_PER_EVENT == 82
    assert len(MEMORY_COLUMNS) == 9


def _limit_address_space(megabytes: int):
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))

    return limit


def _many_tiny_events(path) -> None:
    """3 million tiny events: about 250 MB of model."""
    event = b'{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1}'
    with open(path, "wb") as handle:
        handle.write(b'{"traceEvents":[')
        block = b",".join([event] * 10_000)
        handle.write(b",".join([block] * 300))
        handle.write(b"]}")


@pytest.mark.slow
def test_running_out_of_memory_is_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "many.json"
    _many_tiny_events(path)  # more than the process may map
    env = dict(os.environ, KINETOSCOPE_WORKERS="1", OPENBLAS_NUM_THREADS="1")
    result = _cli(path, "--json", env=env, preexec_fn=_limit_address_space(360))
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert "Traceback" not in err and "MemoryError" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "out of memory" in lines[0], err
    assert "bytes per event" in lines[0] and "events need" in lines[0]


@pytest.mark.parametrize("where", ["load", "view"])
def test_the_viewer_says_out_of_memory_in_one_line(where, write_trace, monkeypatch):
    pytest.importorskip("textual")
    from kinetoscope.tui.data import loader, viewdata

    def no_memory(*args, **kwargs):
        raise MemoryError

    if where == "load":
        monkeypatch.setattr(builder, "convert_run", no_memory)  # where the rows are made
    else:
        monkeypatch.setattr(viewdata, "build_view_data", no_memory)
    path = write_trace(f"[{_op('a', 1)}, {_op('b', 2)}]")
    load = loader.TraceLoad(str(path), staged=True)
    assert load.wait(60) is loader.Stage.FAILED
    assert load.data is None and load.error is not None
    assert "out of memory" in load.error and "\n" not in load.error
    assert "could not be shown" not in load.error


@pytest.mark.slow
def test_the_model_fits_a_capped_address_space(tmp_path):
    # The columns were first mapped at 2.5 times the rows estimated for the file, then, if
    # that could not be mapped, at one run's rows and grown by half at a time: copies at the
    # top of the growth needed 600 MB here. A tighter estimate comes before that now.
    path = tmp_path / "many.json"
    _many_tiny_events(path)
    code = (
        "from kinetoscope.parser import load; "
        f"t = load({str(path)!r}, use_cache=False, workers=1); print(t.n_events)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        timeout=300,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
        preexec_fn=_limit_address_space(500),
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.split() == [b"3000000"]


# -- 5. damaged runs are repaired whole, as the salvage would read them -----------------------

DEFECTS = [
    (b'"dur": 1', b'"dur": NaN'),
    (b'"dur": 1', b'"dur": Infinity'),
    (b'"ts": ', b'"ts": -Infinity, "x": '),
    (b'"pid": 1', b'"pid": NaN'),
    (b'"name": "', b'"name": "\x01ctl\n'),
    (b'"name": "', b'"name": "tab\there'),
    (b'"correlation": 5', b'"correlation": NaN'),
    (b'"Bytes": 64', b'"Bytes": -Infinity'),
    (b'"Input Dims": [[', b'"Input Dims": [[NaN, '),
    (b'"Input Dims": [[', b'"Input Dims": [[1e400, '),
    (b'"extra": 0', b'"extra": N/A'),
    (b'"extra": 0', b'"extra": "x\xffy"'),
    (b'"name": "', b'"name": "caf\xc3\xa9 \xed\xa0\x80'),
    (b'"extra": 0', b'"extra": "a\\"NaN, \\\\"'),  # escaped quotes around a NaN in a string
    (b'"name": "', b'"name": "N/A NaN Infinity'),  # the words inside a string stay
    (b'"name": "', b'"name": "lone \\ud800 '),  # which msgspec cannot hold in a str
    (b'"extra": 0', b'"extra": "\\udcff", "ts2": NaN'),
]


def _events(count: int, seed: int, every: int) -> bytes:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            text = _op(f"aten::op{i % 7}", 10 + i, f"[[{i % 5}, 3]]", extra=0).encode()
        elif kind == 1:
            text = (
                f'{{"ph": "X", "cat": "cuda_runtime", "name": "launch", "pid": 1, "tid": 1, '
                f'"ts": {10 + i}, "dur": 1, "args": {{"correlation": 5, "extra": 0}}}}'
            ).encode()
        else:
            text = (
                f'{{"ph": "i", "name": "[memory]", "pid": 1, "tid": 2, "ts": {10 + i}, "args": '
                f'{{"Addr": {i}, "Bytes": 64, "Total Allocated": {i}, "Device Type": 1, '
                f'"Device Id": 0, "extra": 0}}}}'
            ).encode()
        if i % every == every - 1:
            old, new = rng.choice([d for d in DEFECTS if d[0] in text])
            text = text.replace(old, new, 1)
        out.append(text)
    return b'{"traceEvents": [\n' + b",\n".join(out) + b'\n], "displayTimeUnit": "ms"}'


def _same_model(a, b) -> None:
    """The same values; string ids and lane numbers (orders of first appearance) may differ."""
    assert (a.n_events, a.by_phase, a.by_category) == (b.n_events, b.by_phase, b.by_category)

    def lanes(trace, ids):
        return [(trace.lanes[i].pid, trace.lanes[i].tid) if i >= 0 else None for i in ids]

    for column in ROW_COLUMNS:
        x, y = getattr(a, column), getattr(b, column)
        if column in ("name", "cat", "shape"):
            x = [a.strings[i] if i >= 0 else None for i in x.tolist()]
            y = [b.strings[i] if i >= 0 else None for i in y.tolist()]
            assert x == y, column
        elif column == "lane":
            assert lanes(a, x.tolist()) == lanes(b, y.tolist())
        else:
            assert np.array_equal(x, y), column
    for column in MEMORY_COLUMNS:
        x, y = getattr(a.memory, column), getattr(b.memory, column)
        if column == "lane":
            assert lanes(a, x.tolist()) == lanes(b, y.tolist())
        else:
            assert np.array_equal(x, y), column
    assert a.warnings == b.warnings


def _salvaged(data: bytes, monkeypatch):
    """The model as the event-by-event salvage reads it (the repair switched off)."""
    with monkeypatch.context() as patch:
        patch.setattr(reader.Reader, "_repaired_run", lambda self, *args: None)
        return loads(data)


@pytest.mark.parametrize("seed", range(6))
def test_repaired_runs_decode_to_what_the_salvage_gives(seed, monkeypatch):
    data = _events(3000, seed, every=7)
    repaired = loads(data)
    _same_model(repaired, _salvaged(data, monkeypatch))
    assert repaired.n_events == 3000
    check_analysis(repaired)


def test_damaged_runs_are_decoded_whole_not_event_by_event(monkeypatch):
    salvaged = []
    original = reader.Reader._salvage

    def counting(self, pos, end):
        salvaged.append(end - pos)
        return original(self, pos, end)

    monkeypatch.setattr(reader.Reader, "_salvage", counting)
    trace = loads(_events(5000, 1, every=50))
    assert trace.n_events == 5000
    assert salvaged == []  # the salvage decodes the run one event at a time


def test_a_worker_decodes_a_damaged_run(monkeypatch):
    body = _events(600, 2, every=10)
    run = body[body.index(b"[") : body.rindex(b"]") + 1]
    columns = parallel.decode_array(run)
    assert columns is not None and columns.n_events == 600
    expected = _salvaged(body, monkeypatch)
    assert columns.start.tolist() == expected.start.tolist()


def test_repair_leaves_words_inside_strings_and_fixes_those_outside():
    text = b'[{"name": "NaN N/A \\"Infinity", "a": NaN, "b": -Infinity, "c": N/A, "d": "x\ty"}]'
    fixed = repair_json(text)
    assert json.loads(fixed) == [
        {"name": 'NaN N/A "Infinity', "a": None, "b": None, "c": "N/A", "d": "x\ty"}
    ]
    assert repair_json(b'[{"a": 1}]') is None


def test_string_quotes_are_the_unescaped_ones():
    def reference(text: bytes) -> list[int]:
        out = []
        for i, byte in enumerate(text):
            if byte == ord('"'):
                k = i - 1
                while k >= 0 and text[k] == ord("\\"):
                    k -= 1
                if (i - 1 - k) % 2 == 0:
                    out.append(i)
        return out

    rng = random.Random(7)
    for _ in range(2000):
        text = bytes(rng.choice(b'"\\ab') for _ in range(rng.randint(0, 40)))
        assert string_quotes(text).tolist() == reference(text), text
