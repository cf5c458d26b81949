"""Fuzzing the parser: random, hostile and mutated traces either load (with warnings) or raise the
one-line TraceError, never anything else and never hang; whatever loads also analyses, summarises
to a valid document and draws. Bounded for CI; KINETOSCOPE_FUZZ_EXAMPLES=50 for a long run."""

from __future__ import annotations

import functools
import gzip
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from fuzz.harness import (
    check_analysis,
    check_report,
    check_trace,
    check_view,
    documents,
    encode,
    fuzz_settings,
    load_bytes,
    mutated,
    regression_files,
    time_limit,
)
from hypothesis import given
from hypothesis import strategies as st
from kinetoscope.parser import TraceError, load, loads

LIMIT_S = 30.0  # per example; generous, because CI machines are shared


def _body(doc):
    return doc if isinstance(doc, list) else doc["traceEvents"]


@fuzz_settings(200)
@given(documents(), st.booleans(), st.sampled_from([None, None, 0, 1]))
def test_random_documents_load_analyse_and_draw(doc, ascii_only, indent):
    data = encode(doc, ascii_only, indent)
    with tempfile.TemporaryDirectory() as tmp, time_limit(LIMIT_S):
        trace = load_bytes(data, Path(tmp))
        # The text is valid JSON apart from NaN/Infinity and lone surrogates, which are
        # tolerated: every element of traceEvents is counted.
        assert trace is not None
        assert trace.n_events == len(_body(doc))
        assert trace.complete
        check_trace(trace)
        check_analysis(trace)
        check_view(trace)
        check_report(trace)


@st.composite
def mutated_documents(draw):
    data = encode(draw(documents()), draw(st.booleans()), draw(st.sampled_from([None, 1])))
    return draw(mutated(data))


@fuzz_settings(400)
@given(mutated_documents())
def test_mutated_documents_load_or_fail_cleanly(data):
    with tempfile.TemporaryDirectory() as tmp, time_limit(LIMIT_S):
        trace = load_bytes(data, Path(tmp))
        if trace is not None:
            check_trace(trace)
            check_analysis(trace)


@st.composite
def mutated_gzip(draw):
    data = encode(draw(documents()), True, None)
    packed = gzip.compress(data)
    return draw(mutated(packed))


@fuzz_settings(150)
@given(mutated_gzip())
def test_mutated_gzip_loads_or_fails_cleanly(data):
    with tempfile.TemporaryDirectory() as tmp, time_limit(LIMIT_S):
        trace = load_bytes(data, Path(tmp), name="fuzz.json.gz")
        if trace is not None:
            check_trace(trace)
            check_analysis(trace)


@fuzz_settings(200)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_load_or_fail_cleanly(data):
    with tempfile.TemporaryDirectory() as tmp, time_limit(LIMIT_S):
        trace = load_bytes(data, Path(tmp))
        if trace is not None:
            check_trace(trace)
            check_analysis(trace)


def _small_trace() -> bytes:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 12.5,
            "dur": 3,
            "args": {"correlation": 5, "Call stack": 'f("}, {")'},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm [bold]",
            "pid": 0,
            "tid": 7,
            "ts": 40,
            "dur": 8,
            "args": {"correlation": 5, "device": 0, "stream": 7},
        },
        {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 12.5, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 5, "pid": 0, "tid": 7, "ts": 40, "cat": "ac2g", "bp": "e"},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 11, "args": {"Bytes": 512}},
    ]
    doc = {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": 0}]}
    return json.dumps(doc, indent=1).encode()


def test_cut_at_every_byte_recovers_every_complete_event():
    data = _small_trace()
    full = loads(data)
    assert full.complete and full.n_events == 7
    counts = []
    with time_limit(120):
        for cut in range(len(data) + 1):
            try:
                trace = loads(data[:cut])
            except TraceError as error:
                assert "\n" not in str(error)
                counts.append(-1)
                continue
            check_trace(trace)
            check_analysis(trace)
            assert trace.complete == (cut >= len(data.rstrip())), cut
            counts.append(trace.n_events)
    # A longer prefix never yields fewer events, and the whole file yields all of them.
    loaded = [c for c in counts if c >= 0]
    assert loaded == sorted(loaded)
    assert counts[-1] == 7
    # Once the events array has started, a cut never makes the load fail.
    first_ok = counts.index(next(c for c in counts if c >= 0))
    assert all(c >= 0 for c in counts[first_ok:])


def test_gzip_cut_at_every_byte_fails_cleanly_or_loads_a_prefix(tmp_path):
    data = _small_trace()
    packed = gzip.compress(data)
    full = loads(data)
    with time_limit(120):
        for cut in range(len(packed) + 1):
            path = tmp_path / "cut.json.gz"
            path.write_bytes(packed[:cut])
            trace = load_bytes(packed[:cut], tmp_path, name="cut.json.gz")
            if trace is not None:
                check_trace(trace)
                assert trace.n_events <= full.n_events
                assert trace.start.tolist() == full.start[: len(trace)].tolist()


def test_regression_seeds_load_or_fail_cleanly(tmp_path):
    files = regression_files()
    assert files, "the regression seeds are missing"
    for path in files:
        with time_limit(LIMIT_S):
            trace = load_bytes(path.read_bytes(), tmp_path, name=path.name)
            if trace is not None:
                check_trace(trace)
                check_analysis(trace)
                check_view(trace)
                check_report(trace)


@functools.lru_cache(maxsize=1)
def _big_trace() -> bytes:
    """About 10 MB: several runs, so worker processes decode some of them."""
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i % 37}",
            "pid": 1,
            "tid": 1 + i % 3,
            "ts": 1e12 + i * 3.5,
            "dur": 2.25,
            "args": {
                "External id": i,
                "Input Dims": [[i % 5, 2]],
                "Call stack": 'f("}, {")' if i % 501 == 0 else "train.py(3): step",
            },
        }
        for i in range(40000)
    ]
    return json.dumps({"traceEvents": events}, indent=1).encode()


@st.composite
def damaged_big_traces(draw):
    data = bytearray(_big_trace())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data) - 1))
        piece = draw(st.sampled_from([b"}", b"{", b'"', b"]", b"}, {", b"\\", b"\xff", b""]))
        data[at : at + draw(st.integers(0, 8))] = piece
    if draw(st.booleans()):
        del data[draw(st.integers(len(data) // 2, len(data))) :]
    return bytes(data)


@fuzz_settings(4)
@given(damaged_big_traces())
def test_worker_processes_and_one_process_agree_on_damaged_traces(data):
    with tempfile.TemporaryDirectory() as tmp, time_limit(240):
        path = Path(tmp) / "big.json"
        path.write_bytes(data)
        results = []
        for workers in (1, 2):
            try:
                results.append(load(str(path), use_cache=False, workers=workers))
            except TraceError as error:
                results.append(str(error))
        serial, parallel = results
        if isinstance(serial, str) or isinstance(parallel, str):
            assert serial == parallel
            return
        assert (serial.n_events, serial.complete) == (parallel.n_events, parallel.complete)
        assert np.array_equal(serial.start, parallel.start)
        assert np.array_equal(serial.ordinal, parallel.ordinal)
        # The string table's order is an accident of which path interned a string first (the
        # one process salvages a damaged run event by event, a worker converts it whole): the
        # strings each row names must agree, not their ids.
        for column in ("name", "cat"):
            assert [serial.strings[i] for i in getattr(serial, column)] == [
                parallel.strings[i] for i in getattr(parallel, column)
            ], column
        assert [serial.strings[i] if i >= 0 else None for i in serial.shape] == [
            parallel.strings[i] if i >= 0 else None for i in parallel.shape
        ]
        assert set(serial.strings) == set(parallel.strings)
        check_trace(parallel)


@pytest.mark.parametrize("count", [1_000_000])
def test_a_million_tiny_events_load_quickly(count):
    data = b'{"traceEvents": [' + b"{}," * (count - 1) + b'{"ph": "X", "ts": 1}]}'
    began = time.monotonic()
    with time_limit(120):
        trace = loads(data)
    assert trace.n_events == count and len(trace) == 1
    assert trace.by_phase == {"?": count - 1, "X": 1}
    assert time.monotonic() - began < 60
