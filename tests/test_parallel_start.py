"""While the worker processes start (their server imports the parser: about half a second), the
loading process decodes the first runs itself instead of waiting; the model is the same."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from kinetoscope.parser import load, parallel
from kinetoscope.parser.cache import COLUMNS, MEMORY_COLUMNS


def _trace(path, n: int = 100000) -> str:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i % 37}",
            "pid": 1,
            "tid": 1 + i % 3,
            "ts": 1700000000000 + i * 3.5,
            "dur": 2.25,
            "args": {"External id": i, "Input Dims": [[i % 5, 2]]},
        }
        for i in range(n)
    ]
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    assert path.stat().st_size > 4 * parallel.reader.RUN_BYTES  # several runs
    return str(path)


def _same(a, b) -> None:
    for column in COLUMNS:
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    for column in MEMORY_COLUMNS:
        assert np.array_equal(getattr(a.memory, column), getattr(b.memory, column)), column
    assert a.strings == b.strings
    assert (a.n_events, a.by_phase) == (b.n_events, b.by_phase)


@pytest.fixture
def slow_start(monkeypatch):
    """Workers that take a second longer to start; the runs decoded in this process, counted."""
    started = parallel._start_workers

    def slow(pool, workers):
        time.sleep(1.0)
        started(pool, workers)

    here: list[int] = []
    decode = parallel.decode_array

    def counted(text):
        here.append(len(text))  # runs the workers decode are not counted: other processes
        return decode(text)

    monkeypatch.setattr(parallel, "_start_workers", slow)
    monkeypatch.setattr(parallel, "decode_array", counted)
    return here


def test_the_loading_process_decodes_while_the_workers_start(tmp_path, slow_start):
    path = _trace(tmp_path / "trace.json")
    serial = load(path, use_cache=False, workers=1)
    decoded_here = len(slow_start)
    both = load(path, use_cache=False, workers=2)
    assert both.workers == 2
    assert len(slow_start) > decoded_here  # runs decoded here while the workers started
    _same(serial, both)


def test_workers_that_cannot_start_leave_the_load_to_this_process(tmp_path, monkeypatch):
    path = _trace(tmp_path / "trace.json")

    def fails(pool, workers):
        time.sleep(0.2)
        raise OSError("no workers here")

    monkeypatch.setattr(parallel, "_start_workers", fails)
    serial = load(path, use_cache=False, workers=1)
    _same(serial, load(path, use_cache=False, workers=2))
