"""Regression tests for crashes and hangs the fuzzer found in the parser and the summary output.
Each input is the smallest form of a failure; the fuzz seeds themselves are in tests/fuzz/."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

from fuzz.harness import check_analysis, check_report, check_trace, time_limit
from kinetoscope.parser import loads


def test_finite_floats_too_big_for_nanoseconds_are_not_numbers():
    # 1e308 µs is finite, but 1e308 * 1000 is not: it used to raise OverflowError.
    text = b"""[
        {"ph": "X", "name": "far", "ts": 1e308, "dur": 1},
        {"ph": "X", "name": "long", "ts": 1, "dur": 1.7976931348623157e308},
        {"ph": "X", "name": "ok", "ts": 2, "dur": 3}
    ]"""
    trace = loads(text)
    assert trace.n_events == 3
    assert [trace.name_of(r) for r in range(len(trace))] == ["long", "ok"]
    assert trace.dur.tolist() == [0, 3000]
    check_analysis(trace)


def test_lone_surrogate_keys_in_args_keep_the_known_fields():
    # The run is decoded generically (ph 7 has the wrong type); a key spelled \ud800 used to
    # make msgspec.convert raise UnicodeEncodeError.
    text = (
        b'[{"ph": 7},'
        b' {"ph": "X", "cat": "cuda_runtime", "name": "launch", "ts": 1, "dur": 1,'
        b' "pid": 1, "tid": 1, "args": {"\\ud800": 1, "correlation": 42}}]'
    )
    trace = loads(text)
    assert trace.n_events == 2
    assert trace.corr.tolist() == [42]


def test_lone_surrogate_in_input_dims_is_kept():
    text = b'[{"ph": "X", "name": "op", "ts": 1, "dur": 1, "args": {"Input Dims": ["\\ud800"]}}]'
    trace = loads(text)
    assert trace.strings[int(trace.shape[0])] == '["\ud800"]'


def test_deeply_nested_args_skip_that_event_only():
    deep = b"[" * 100_000 + b"]" * 100_000
    text = (
        b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1},'
        b' {"ph": "X", "name": "deep", "ts": 2, "dur": 1, "args": {"x": ' + deep + b"}},"
        b' {"ph": "X", "name": "b", "ts": 3, "dur": 1}]'
    )
    with time_limit(60):
        trace = loads(text)
    assert [trace.name_of(r) for r in range(len(trace))] == ["a", "b"]
    assert any("malformed event" in w for w in trace.warnings)
    check_trace(trace)


def test_stray_closing_brace_does_not_loop_forever():
    # Salvage took the `}` for the array's end and went back to it again and again.
    with time_limit(20):
        trace = loads(b'[{"a": 1}}, {"ph": "X", "name": "after", "ts": 1}]')
    assert [trace.name_of(r) for r in range(len(trace))] == ["after"]
    assert any("malformed" in w for w in trace.warnings)


def test_loads_keeps_what_a_damaged_gzip_held():
    events = [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1} for i in range(2000)]
    packed = gzip.compress(json.dumps(events).encode())
    cut = loads(packed[: len(packed) // 2])  # used to raise EOFError
    assert not cut.complete and 0 < cut.n_events < 2000
    assert any("gzip" in w or "ends at byte" in w for w in cut.warnings)
    broken = bytearray(packed)
    broken[-6] ^= 0xFF  # the CRC
    damaged = loads(bytes(broken))  # used to raise BadGzipFile
    assert damaged.n_events == 2000 and not damaged.complete
    assert any("gzip" in w for w in damaged.warnings)


def _cli(path, *extra):
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", str(path), *extra],
        capture_output=True,
        timeout=120,
    )


def test_summary_json_with_lone_surrogates_and_nan_header_is_valid_json(write_trace):
    text = (
        b'{"deviceProperties": [{"id": 0, "name": "\\ud800", "totalGlobalMem": NaN}],'
        b' "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k\\udcff", "pid": 0,'
        b' "tid": 7, "ts": 1, "dur": 2}]}'
    )
    path = write_trace(text)
    result = _cli(path, "--json")
    assert result.returncode == 0, result.stderr.decode()

    def no_constants(name):
        raise AssertionError(name)

    document = json.loads(result.stdout, parse_constant=no_constants)
    assert document["kernels"][0]["name"] == "k\udcff"
    assert document["devices"] == [{"id": 0, "name": "\ud800", "total_memory_bytes": None}]
    check_report(loads(text))


def test_summary_text_treats_header_values_as_text(write_trace):
    # A device id is header data: as a table cell it was parsed as Rich markup ("[/x]" raised).
    doc = {
        "deviceProperties": [{"id": "[/x]\x1b[2J", "name": "[bold]gpu"}],
        "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}],
    }
    path = write_trace(doc)
    result = _cli(path)
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert "device [/x]" in out and "[bold]gpu" in out
    assert "\x1b[2J" not in out
    check_report(loads(json.dumps(doc).encode()))


def test_error_messages_show_file_names_as_text(tmp_path):
    # A file name is data: its escape sequences and line breaks must not reach the terminal.
    path = tmp_path / "x\x1b[2J\nline[bold].json"
    path.write_bytes(b"garbage")
    result = _cli(path)
    assert result.returncode == 1
    err = result.stderr.decode()
    assert "\x1b" not in err and err.count("\n") == 1
    assert "x␛[2J␊line[bold].json" in err


def test_view_of_a_missing_file_shows_its_name_as_text(capsys, tmp_path):
    from kinetoscope.commands.view import run_view

    assert run_view(str(tmp_path / "nope\x1b]0;T\x07.json")) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "nope␛]0;T␇.json" in err


def test_odd_scalars_in_the_header_do_not_lose_the_events():
    # A header value that msgspec refuses (NaN, a string with invalid UTF-8) had no brackets
    # for the salvage scan to count: the load stopped there and every event was lost.
    text = (
        b'{"distributedInfo": NaN, "displayTimeUnit": "ms\xed\xa0\x80", "deviceProperties": [],'
        b' "traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}],'
        b' "traceName": "x\\"\xff", "baseTimeNanoseconds": -Infinity}'
    )
    trace = loads(text)
    assert trace.complete and trace.n_events == 1 and len(trace) == 1
    assert trace.header["displayTimeUnit"] == "ms\ufffd\ufffd\ufffd"
    assert trace.header["traceName"] == 'x"\ufffd'
    # NaN and -Infinity are no values of those keys: dropped, each with a warning.
    assert "distributedInfo" not in trace.header and "baseTimeNanoseconds" not in trace.header
    assert trace.warnings == [
        "ignored the header value distributedInfo (not a finite number)",
        "ignored the header value baseTimeNanoseconds (not a finite number)",
    ]
    check_analysis(trace)


def test_a_lone_surrogate_escape_in_the_header_is_not_a_cut_off_file():
    # msgspec calls "\ud800" truncated input; after traceEvents it made a whole file incomplete.
    for text in (
        b'{"traceEvents": [], "deviceProperties": [], "displayTimeUnit": "\\ud800"}',
        b'{"displayTimeUnit": "\\ud800", "traceEvents": [{"ph": "X", "ts": 1}]}',
    ):
        trace = loads(text)
        assert trace.complete and trace.warnings == []
        assert trace.header["displayTimeUnit"] == "\ud800"
