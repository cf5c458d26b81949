"""TraceSession: each derived result computed once, safely from many threads at once; a
failure is remembered and named; the staged nesting is part of the API."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import msgspec
import numpy as np
import pytest
from kinetoscope.analysis import session as session_module
from kinetoscope.analysis.session import AnalysisFailed, TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import load, loads

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
SAMPLE = SAMPLES / "synthetic_gpu_training.pt.trace.json.gz"

# Every result a view, the summary, the memory view or the sync view asks for.
RESULTS = (
    "classes",
    "cpu_groups",
    "gpu_groups",
    "nesting",
    "links",
    "operators",
    "kernels",
    "kernel_launchers",
    "idle",
    "idle_by_cpu",
    "steps",
    "memory",
    "memory_ops",
    "sync",
    "findings",
)


def _fingerprint(value) -> bytes:
    """Bytes that differ when two results differ (arrays by content, the rest by repr)."""
    parts: list[bytes] = []

    def walk(item) -> None:
        if isinstance(item, np.ndarray):
            parts.append(str(item.dtype).encode() + item.tobytes())
        elif isinstance(item, (list, tuple)):
            for entry in item:
                walk(entry)
        elif hasattr(item, "__dataclass_fields__"):
            for name in item.__dataclass_fields__:
                walk(getattr(item, name))
        elif isinstance(item, dict):
            for key in sorted(item, key=repr):
                parts.append(repr(key).encode())
                walk(item[key])
        else:
            parts.append(repr(item).encode())

    walk(value)
    return b"\x00".join(parts)


def test_many_threads_get_what_one_thread_gets(monkeypatch):
    """Views, summary, memory and sync asked for at the same instant from 12 threads, each in
    its own order: the same results as a single-threaded run, and each computed once."""
    alone = TraceSession(load(str(SAMPLE)))
    expected = {name: _fingerprint(getattr(alone, name)) for name in RESULTS}
    expected_summary = msgspec.json.encode(build_summary(alone))

    calls: dict[str, int] = {}
    count_lock = threading.Lock()
    for name in ("compute_nesting", "compute_operators", "compute_kernels", "compute_idle"):
        original = getattr(session_module, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            with count_lock:
                calls[_name] = calls.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(session_module, name, counted)

    shared = TraceSession(load(str(SAMPLE)))
    rng = np.random.default_rng(7)
    orders = [list(rng.permutation(RESULTS)) for _ in range(10)]
    barrier = threading.Barrier(12)
    got: list[dict[str, bytes]] = [{} for _ in orders]
    summaries: list[bytes] = []
    errors: list[BaseException] = []

    def ask(index: int) -> None:
        try:
            barrier.wait()
            for name in orders[index]:
                got[index][name] = _fingerprint(getattr(shared, name))
        except BaseException as error:  # reported below, with the thread's order
            errors.append(error)

    def summary() -> None:
        try:
            barrier.wait()
            summaries.append(msgspec.json.encode(build_summary(shared)))
        except BaseException as error:
            errors.append(error)

    def viewer_queries() -> None:
        try:
            barrier.wait()
            for gap in range(min(len(shared.idle.gaps), 20)):
                shared.gap_cpu_stack(gap)
            for row in np.flatnonzero(shared.classes.cpu)[:50].tolist():
                shared.instance(row)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(orders))]
    threads += [threading.Thread(target=summary), threading.Thread(target=viewer_queries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert summaries == [expected_summary]
    for index, results in enumerate(got):
        assert results == expected, f"thread {index} (order {orders[index]}) differs"
    # The nesting feeds operators, kernels, memory, sync and the viewer queries: once.
    assert calls == {
        "compute_nesting": 1,
        "compute_operators": 1,
        "compute_kernels": 1,
        "compute_idle": 1,
    }


def _small_trace():
    events = [
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": "aten::add", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
    ]
    return loads(json.dumps({"traceEvents": events}).encode())


def test_a_failure_is_remembered_and_named(monkeypatch):
    session = TraceSession(_small_trace())
    tries = []

    def broken(*args, **kwargs):
        tries.append(1)
        raise ValueError("no kernels today")

    monkeypatch.setattr(session_module, "compute_kernels", broken)
    for _ in range(3):
        with pytest.raises(AnalysisFailed) as caught:
            session.kernels  # noqa: B018 (the property is what is tested)
        assert caught.value.name == "kernels"
        assert "no kernels today" in str(caught.value)
        assert isinstance(caught.value.__cause__, ValueError)
    assert len(tries) == 1, "a failed result is not computed again on every ask"
    assert isinstance(session.failure("kernels"), ValueError)
    assert not session.has("kernels")
    # What does not depend on it still works.
    assert len(session.operators) == 2


def test_a_result_that_depends_on_a_failed_one_fails_too(monkeypatch):
    session = TraceSession(_small_trace())

    def broken(*args, **kwargs):
        raise RuntimeError("nesting broke")

    monkeypatch.setattr(session_module, "compute_nesting", broken)
    with pytest.raises(AnalysisFailed) as caught:
        session.operators  # noqa: B018
    assert caught.value.name == "operators"
    assert "nesting broke" in str(caught.value)


def test_the_staged_nesting():
    trace = _small_trace()
    session = TraceSession(trace)
    assert not session.nesting_ready
    session.classes  # noqa: B018 (other results do not nest)
    session.links  # noqa: B018
    assert not session.nesting_ready
    computed = TraceSession(trace).nesting
    assert session.provide_nesting(computed) is computed
    assert session.nesting_ready
    assert session.nesting is computed
    # Once there, a second nesting (say, a late cache read) does not replace it.
    other = TraceSession(trace).nesting
    assert session.provide_nesting(other) is computed
    assert session.nesting is computed


def test_waiting_threads_share_the_first_computation(monkeypatch):
    """A thread that asks while another computes waits for that result; it never starts a
    second computation, and never sees a half-made one."""
    session = TraceSession(_small_trace())
    started = threading.Event()
    release = threading.Event()
    original = session_module.compute_links
    made = []

    def slow(*args, **kwargs):
        started.set()
        release.wait(10)
        result = original(*args, **kwargs)
        made.append(result)
        return result

    monkeypatch.setattr(session_module, "compute_links", slow)
    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(session.links))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: results.append(session.links))
    second.start()
    second.join(0.2)
    assert second.is_alive(), "the second asker waits for the first computation"
    release.set()
    first.join(10)
    second.join(10)
    assert len(made) == 1
    assert results[0] is results[1] is made[0]
