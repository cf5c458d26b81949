"""The model's columns are declared once (`RowColumns`, with their dtypes) for a whole trace, for
one converted run of it and for the cache; the trace's derived tables are declared fields."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
from kinetoscope.parser import cache, load, loads
from kinetoscope.parser.convert import RunColumns, convert_run
from kinetoscope.parser.events import EVENTS_DECODER
from kinetoscope.parser.model import (
    KIND_KERNEL,
    KIND_OTHER,
    MODEL_BYTES_PER_EVENT,
    ROW_COLUMNS,
    ROW_DTYPES,
    RowColumns,
    Trace,
)


def _events() -> list[dict]:
    return [
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 5,
         "args": {"External id": 3, "Input Dims": [[2, 3]]}},
        {"ph": "X", "name": "gemm", "cat": "kernel", "pid": 0, "tid": 7, "ts": 3, "dur": 2,
         "args": {"correlation": 9, "device": 0, "stream": 7}},
        {"ph": "s", "name": "ac2g", "cat": "ac2g", "pid": 1, "tid": 1, "ts": 2, "id": "x"},
    ]  # fmt: skip


def test_a_trace_and_a_run_share_one_declaration_of_the_row_columns():
    for model in (Trace, RunColumns):
        assert issubclass(model, RowColumns)
        names = [f.name for f in fields(model)]
        assert [n for n in names if n in ROW_DTYPES] == list(ROW_COLUMNS), model
    assert MODEL_BYTES_PER_EVENT == sum(np.dtype(d).itemsize for d in ROW_DTYPES.values())


def test_converted_loaded_and_cached_columns_have_the_declared_dtypes(tmp_path):
    text = json.dumps({"traceEvents": _events()}).encode()
    run = convert_run(EVENTS_DECODER.decode(json.dumps(_events()).encode()))
    path = tmp_path / "t.json"
    path.write_bytes(text)
    loaded = load(str(path), use_cache=False, workers=1)
    assert cache.save(loaded) is not None
    cached = cache.load(str(path))
    assert cached is not None and cached.from_cache
    for model in (run, loads(text), loaded, cached):
        for column, dtype in ROW_DTYPES.items():
            assert getattr(model, column).dtype == dtype, (type(model).__name__, column)


def test_a_cache_entry_with_other_column_dtypes_is_not_used(tmp_path):
    """An entry written by a model whose columns had other dtypes (say, before a column was
    narrowed) is another model: it is parsed again, never handed to the analysis as it is."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events()}))
    trace = load(str(path), use_cache=False, workers=1)
    trace.ph = trace.ph.astype(np.int64)
    assert cache.save(trace) is not None
    assert cache.load(str(path)) is None
    reloaded = load(str(path))
    assert not reloaded.from_cache and reloaded.ph.dtype == ROW_DTYPES["ph"]


def test_the_derived_tables_follow_a_grown_string_table():
    trace = loads(json.dumps({"traceEvents": _events()}).encode())
    kinds = trace.cat_kind
    assert len(kinds) == len(trace.strings)
    assert kinds[trace.string_id("kernel")] == KIND_KERNEL
    assert trace.string_id("Kernel") == -1
    trace.strings.append("Kernel")  # the table only ever grows
    assert len(trace.cat_kind) == len(trace.strings)
    assert trace.cat_kind[-1] == KIND_KERNEL and trace.cat_kind[0] == KIND_OTHER
    assert trace.string_id("Kernel") == len(trace.strings) - 1
    # They are the trace's own declared fields, not in its repr.
    assert "_cat_kind" not in repr(trace) and "_string_index" not in repr(trace)
    assert {"_cat_kind", "_string_index"} <= {f.name for f in fields(Trace)}
