"""The parallel, cached and single-process load paths give the same Trace."""

import json
import os

import numpy as np
import pytest
from kinetoscope.parser import cache, load
from kinetoscope.parser.cache import COLUMNS, MEMORY_COLUMNS


def _events(n):
    events = []
    for i in range(n):
        events.append(
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
        )
        if i % 4 == 0:
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"k{i % 11}",
                    "pid": 0,
                    "tid": 7,
                    "ts": 1700000000000 + i * 3.5 + 1,
                    "dur": 1,
                    "args": {"correlation": i},
                }
            )
        if i % 10 == 0:
            events.append(
                {
                    "ph": "i",
                    "s": "t",
                    "name": "[memory]",
                    "pid": 1,
                    "tid": 1,
                    "ts": 1700000000000 + i * 3.5,
                    "args": {"Bytes": i, "Addr": i},
                }
            )
    return events


def assert_same(a, b):
    for column in COLUMNS:
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    for column in MEMORY_COLUMNS:
        assert np.array_equal(getattr(a.memory, column), getattr(b.memory, column)), column
    assert a.strings == b.strings
    assert (a.n_events, a.by_phase, a.by_category) == (b.n_events, b.by_phase, b.by_category)
    assert (a.slice_start_min, a.slice_end_max) == (b.slice_start_min, b.slice_end_max)
    assert [lane.label for lane in a.lanes] == [lane.label for lane in b.lanes]
    assert a.header == b.header


@pytest.fixture
def big_trace(tmp_path):
    (tmp_path / "traces").mkdir()
    path = tmp_path / "traces" / "big.json"
    doc = {"schemaVersion": 1, "traceEvents": _events(120000), "deviceProperties": [{"id": 0}]}
    path.write_text(json.dumps(doc, indent=1))
    assert path.stat().st_size > 8 << 20  # several runs of events
    return path


def gzipped(path):
    """A gzip'd copy of the file: its runs go through the other parallel path (bytes sent to
    the workers instead of read by them)."""
    import gzip

    target = path.with_name(path.name + ".gz")
    target.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    return target


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_parallel_load_equals_single_process(big_trace, compress):
    if compress:
        big_trace = gzipped(big_trace)
    serial = load(str(big_trace), use_cache=False, workers=1)
    parallel = load(str(big_trace), use_cache=False, workers=2)
    assert (serial.workers, parallel.workers) == (1, 2)
    assert serial.n_events == 120000 + 30000 + 12000
    assert len(serial.chunks.offset) > 2
    assert_same(serial, parallel)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_parallel_load_recovers_from_a_bad_cut(tmp_path, compress):
    # A string holding "}, {" would make a wrong cut; the worker fails and the serial path resumes.
    events = _events(60000)
    for i in range(0, len(events), 997):
        events[i]["args"]["Call stack"] = 'f("}, {")'
    path = tmp_path / "tricky.json"
    path.write_text(json.dumps(events, indent=1))
    if compress:
        path = gzipped(path)
    assert_same(
        load(str(path), use_cache=False, workers=1), load(str(path), use_cache=False, workers=2)
    )


def test_cache_roundtrip_and_invalidation(big_trace, tmp_path, monkeypatch):
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    cold = load(str(big_trace))
    assert not cold.from_cache
    entry = cache.entry_dir(str(big_trace))
    assert (entry / "manifest.json").exists()
    assert not any(p.name.startswith(".tmp-") for p in entry.parent.iterdir())
    warm = load(str(big_trace))
    assert warm.from_cache
    assert_same(cold, warm)

    # A damaged array file is detected and the trace parsed again (and re-cached).
    victim = entry / "start.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    again = load(str(big_trace))
    assert not again.from_cache
    assert_same(cold, again)
    assert getattr(load(str(big_trace)), "from_cache", False)

    # A changed trace (new mtime) is never served from the old entry.
    os.utime(big_trace, ns=(1, 1))
    assert not getattr(load(str(big_trace)), "from_cache", False)


def test_cache_is_not_written_next_to_the_trace(big_trace, tmp_path, monkeypatch):
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path / "elsewhere"))
    before = sorted(os.listdir(big_trace.parent))
    load(str(big_trace))
    assert sorted(os.listdir(big_trace.parent)) == before


def test_unwritable_cache_dir_still_loads(big_trace, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(blocker / "cache"))
    assert load(str(big_trace)).n_events > 0


async def test_viewer_loads_with_worker_processes(big_trace, monkeypatch):
    """The app replaces the standard streams, which worker processes need to start: the viewer
    must still load a big trace with workers (it once failed with "bad value(s) in
    fds_to_keep")."""
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.screens import TraceScreen

    monkeypatch.setenv("KINETOSCOPE_PARALLEL_MIN_BYTES", "1")
    monkeypatch.setenv("KINETOSCOPE_WORKERS", "2")
    app = KinetoscopeApp(str(big_trace))
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(600):
            if not type(app.screen).__name__ == "LoadingScreen":
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, TraceScreen), app.exit_message
        assert app.data.trace.n_events == 120000 + 30000 + 12000
        assert app.data.trace.workers == 2  # not the one-process fallback


def test_gzip_runs_take_the_pipe_without_shared_memory(big_trace, monkeypatch):
    """Runs of a gzip'd trace go to the workers in shared memory; where none can be had (no
    /dev/shm, no space) they go through the pool's pipe, with the same result."""
    from multiprocessing import shared_memory

    path = gzipped(big_trace)
    shared = load(str(path), use_cache=False, workers=2)

    def unavailable(*args, **kwargs):
        raise OSError("no shared memory here")

    monkeypatch.setattr(shared_memory, "SharedMemory", unavailable)
    piped = load(str(path), use_cache=False, workers=2)
    assert_same(shared, piped)
    assert_same(shared, load(str(path), use_cache=False, workers=1))
