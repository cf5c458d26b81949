"""Parser unit tests: every format quirk on small inline traces, truncation, bad input."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import CORPUS
from kinetoscope.parser import NO_VALUE, TraceError, load, loads, read_event
from kinetoscope.parser.model import PH_COMPLETE, ROW_COLUMNS


def X(name="op", ts=0, dur=1, cat="cpu_op", pid=1, tid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def doc(*events, **header):
    return {"schemaVersion": 1, "traceEvents": list(events), **header}


def test_object_and_bare_array_give_the_same_rows():
    events = [X("a", 10, 5), X("b", 12, 1)]
    t1 = loads(json.dumps(doc(*events)).encode())
    t2 = loads(json.dumps(events).encode())
    assert t1.n_events == t2.n_events == 2
    assert [t1.name_of(i) for i in range(2)] == [t2.name_of(i) for i in range(2)] == ["a", "b"]
    assert t2.header == {}


def test_trace_events_key_anywhere_and_header_kept():
    text = (
        '{"deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 1024}],'
        ' "traceEvents": [' + json.dumps(X("a", 1, 2)) + "],"
        ' "distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 1700000000000000000,'
        ' "displayTimeUnit": "ms", "traceName": "t.json", "with_stack": 1}'
    )
    trace = loads(text.encode())
    assert trace.n_events == 1
    assert trace.header["distributedInfo"] == {"rank": 3}
    assert trace.header["baseTimeNanoseconds"] == 1700000000000000000
    assert trace.header["deviceProperties"][0]["totalGlobalMem"] == 1024
    assert trace.header["traceName"] == "t.json"
    assert trace.header["with_stack"] == 1
    assert "traceEvents" not in trace.header


def test_timestamps_are_exact_integer_nanoseconds():
    events = [X("f", 5112278067155.952, 0.5), X("i", 1606910596297023, 13), X("h", 0.0005, 0.0015)]
    trace = loads(json.dumps(events).encode())
    assert trace.start.tolist() == [5112278067155952, 1606910596297023000, 0]  # 0.5 rounds to even
    assert trace.dur.tolist() == [500, 13000, 2]
    assert trace.start.dtype == np.int64


def test_string_pids_and_tids_are_distinct_lanes():
    events = [
        X("a", 1, 1, pid=1, tid=1),
        X("b", 1, 1, pid="1", tid=1),
        X("c", 1, 1, pid="Spans", tid="PyTorch Profiler"),
        X("k", 1, 1, cat="Kernel", pid=0, tid="stream 7"),
        X("d", 1, 1, pid=-1, tid="4093687616"),
    ]
    trace = loads(json.dumps(events).encode())
    assert len(trace.lanes) == 5
    assert [(lane.pid, lane.tid) for lane in trace.lanes] == [
        (1, 1),
        ("1", 1),
        ("Spans", "PyTorch Profiler"),
        (0, "stream 7"),
        (-1, "4093687616"),
    ]
    assert trace.lanes[3].is_gpu and not trace.lanes[0].is_gpu


def test_events_without_cat_dur_or_ts():
    events = [
        {"ph": "X", "name": "nocat", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "X", "name": "nots", "pid": 1, "tid": 1, "dur": 3},
        {"ph": "X", "name": "neg", "pid": 1, "tid": 1, "ts": 7, "dur": -4},
        {"ph": "X", "name": "boolts", "pid": 1, "tid": 1, "ts": True, "dur": 1},
        {"name": "nophase", "ts": 1},
        17,
    ]
    trace = loads(json.dumps(events).encode())
    assert trace.n_events == 6
    assert trace.by_phase == {"X": 4, "?": 2}
    assert trace.by_category == {"": 4}
    assert [trace.name_of(i) for i in range(len(trace))] == ["nocat", "neg", "nophase"]
    assert trace.dur.tolist()[:2] == [0, 0]
    assert any("negative" in w for w in trace.warnings)


def test_huge_integers_in_args_do_not_break_loading():
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "c", "pid": 0, "tid": 1, "ts": 2,'
        ' "dur": 1, "args": {"Comms Id": 10159970886766084423, "correlation": 99999999999999999999}}]}'
    )
    trace = loads(text.encode())
    assert len(trace) == 1 and trace.corr[0] == NO_VALUE


def test_correlation_device_stream_and_flow_columns():
    events = [
        X("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=7),
        X("k", 20, 5, cat="kernel", pid=0, tid=7, correlation=7, device=3, stream=7),
        X("m", 30, 5, cat="gpu_memcpy", pid="2", tid=7),
        X("s", 40, 5, cat="Memset", pid="Spans", tid=7),
        {"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 10, "cat": "ac2g", "name": "ac2g"},
        {
            "ph": "f",
            "id": "x7",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "cat": "ac2g",
            "name": "ac2g",
            "bp": "e",
        },
    ]
    trace = loads(json.dumps(doc(*events)).encode())
    assert trace.corr[:2].tolist() == [7, 7]
    assert trace.device.tolist()[:4] == [-1, 3, 2, -1]
    assert trace.stream[1] == 7 and trace.stream[0] == NO_VALUE
    assert trace.flow_id[4] == 7 and trace.flow_id[5] != NO_VALUE
    assert chr(trace.flow_bp[5]) == "e"
    assert trace.ph[0] == PH_COMPLETE and chr(trace.ph[4]) == "s"


def test_duplicated_metadata_names_lanes_and_sorts():
    meta = [
        {"ph": "M", "name": "process_name", "pid": 5, "tid": 0, "args": {"name": "python"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 5,
            "tid": 9,
            "args": {"name": "thread 9 (python)"},
        },
        {"ph": "M", "name": "process_sort_index", "pid": 5, "tid": 0, "args": {"sort_index": 3}},
        {"ph": "M", "name": "thread_sort_index", "pid": 5, "tid": 9, "args": {"sort_index": 2}},
    ]
    trace = loads(json.dumps(doc(*(meta * 50), X("a", 1, 1, pid=5, tid=9))).encode())
    lane = trace.lanes[0]
    assert (lane.process_name, lane.thread_name, lane.process_sort, lane.thread_sort) == (
        "python",
        "thread 9 (python)",
        3,
        2,
    )
    assert lane.label == "python 5 / thread 9 (python)"
    assert trace.by_phase["M"] == 200


def test_memory_events_with_and_without_ts():
    events = [
        {
            "ph": "i",
            "s": "t",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "args": {
                "Addr": 100,
                "Bytes": 512,
                "Total Allocated": 512,
                "Total Reserved": 2048,
                "Device Id": 0,
                "Device Type": 1,
            },
        },
        {
            "ph": "i",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "args": {"Bytes": -512, "Device Id": 0},
        },
    ]
    trace = loads(json.dumps(events).encode())
    mem = trace.memory
    assert len(mem) == 2
    assert mem.bytes.tolist() == [512, -512]
    assert mem.total_reserved.tolist() == [2048, NO_VALUE]
    assert mem.ts.tolist() == [5000, NO_VALUE]
    assert mem.device_type.tolist() == [1, NO_VALUE]


def test_input_shapes_kept_in_both_spellings():
    events = [X("a", 1, 1, **{"Input Dims": [[2, 3], []]}), X("b", 1, 1, **{"Input dims": [[4]]})]
    trace = loads(json.dumps(events).encode())
    assert [trace.strings[i] for i in trace.shape] == ["[[2,3],[]]", "[[4]]"]


def test_input_shapes_normalised_null_and_unusual_values():
    text = (
        b'[{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1,"args":{"Input Dims":[[2, 3],\n []]}},'
        b'{"ph":"X","name":"b","ts":2,"dur":1,"pid":1,"tid":1,"args":{"Input Dims":[[2,3],[]]}},'
        b'{"ph":"X","name":"c","ts":3,"dur":1,"pid":1,"tid":1,"args":{"Input Dims":null}},'
        b'{"ph":"X","name":"d","ts":4,"dur":1,"pid":1,"tid":1,"args":{"Input Dims":[[-1], ["x y"], 1.5]}},'
        b'{"ph":"X","name":"e","ts":5,"dur":1,"pid":1,"tid":1,"args":{"Input Dims":null,"Input dims":[[7]]}}]'
    )
    trace = loads(text)
    texts = [trace.strings[i] if i >= 0 else None for i in trace.shape]
    assert texts == ["[[2,3],[]]", "[[2,3],[]]", None, '[[-1],["x y"],1.5]', "[[7]]"]
    assert trace.shape[0] == trace.shape[1]


def test_historic_kineto_defects_are_tolerated():
    text = (
        b'{"traceEvents": [\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "ok1", "pid": 1, "tid": 1, "ts": 1, "dur": 1},\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "na", "pid": 1, "tid": 1, "ts": 2, "dur": 1,'
        b' "args": {"Input type": N/A}},\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "ctl\x01\tname", "pid": 1, "tid": 1, "ts": 3, "dur": 1},\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "nan", "pid": 1, "tid": 1, "ts": NaN, "dur": 1},\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "bad\xff", "pid": 1, "tid": 1, "ts": 4, "dur": 1},\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "ok2", "pid": 1, "tid": 1, "ts": 5, "dur": 1}\n'
        b"]}"
    )
    trace = loads(text)
    assert trace.complete
    assert trace.n_events == 6
    names = [trace.name_of(i) for i in range(len(trace))]
    assert names == ["ok1", "na", "ctl\x01\tname", "bad\ufffd", "ok2"]  # NaN ts: counted, no row


def test_wrong_types_in_fields_do_not_lose_the_run():
    events = [
        X("a", 1, 1),
        {"ph": "X", "name": "b", "ts": 2, "args": "not an object"},
        {"ph": 7, "name": ["x"], "ts": "3"},
        X("c", 4, 1),
    ]
    trace = loads(json.dumps(events).encode())
    assert trace.n_events == 4
    assert [trace.name_of(i) for i in range(len(trace))] == ["a", "b", "c"]
    assert trace.by_phase == {"X": 3, "?": 1}


def _element_ends(text: str) -> list[int]:
    """Byte offsets just past each element of the traceEvents array (independent of our parser)."""
    start = (
        text.index("[", text.index('"traceEvents"'))
        if text.lstrip().startswith("{")
        else text.index("[")
    )
    decoder = json.JSONDecoder()
    pos = start + 1
    ends = []
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            return ends
        _, pos = decoder.raw_decode(text, pos)
        ends.append(pos)


def _truncation_source():
    path = CORPUS / "hta" / "amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if path.exists():
        return gzip.decompress(path.read_bytes())
    events = [X(f"op{i}", i * 10, 5, **{"Input Dims": [[i, 2]]}) for i in range(300)]
    return json.dumps(doc(*events), indent=1).encode()


def test_truncation_at_many_cut_points_recovers_every_complete_event():
    data = _truncation_source()
    text = data.decode()
    assert text.isascii()
    ends = _element_ends(text)
    full = loads(data)
    assert full.complete and full.n_events == len(ends)
    cuts = sorted(
        set(np.linspace(1, len(data) - 1, 120).astype(int).tolist()) | {e for e in ends[:5]}
    )
    for cut in cuts:
        if cut <= text.index("[", text.index('"traceEvents"')):
            continue
        trace = loads(data[:cut])
        expected = sum(1 for end in ends if end <= cut)
        assert trace.n_events == expected, cut
        assert not trace.complete or cut >= len(data.rstrip())
        # Every recovered row is the same event as in the full load, in order.
        assert np.array_equal(trace.start, full.start[: len(trace)])
        assert trace.ordinal.tolist() == full.ordinal[: len(trace)].tolist()
        if not trace.complete:
            assert any("ends at byte" in w for w in trace.warnings)
            assert trace.stopped_at is not None and trace.stopped_at <= cut


def test_truncated_gzip_stream_keeps_what_was_decompressed(write_trace):
    data = _truncation_source()
    packed = gzip.compress(data)
    path = write_trace(packed[: len(packed) * 2 // 3], name="cut.json.gz")
    trace = load(str(path))
    full = loads(data)
    assert not trace.complete
    assert 0 < trace.n_events < full.n_events
    assert np.array_equal(trace.start, full.start[: len(trace)])
    assert any("gzip" in w or "ends at byte" in w for w in trace.warnings)


def test_gzip_detected_by_magic_not_suffix(write_trace):
    events = [X("a", 1, 1)]
    path = write_trace(events, name="plain_named.json.gz")
    assert not load(str(path)).source.compressed
    path = write_trace(events, name="packed.json", compress=True)
    trace = load(str(path))
    assert trace.source.compressed and trace.n_events == 1


def test_multi_member_gzip(write_trace):
    text = json.dumps([X("a", 1, 1), X("b", 2, 1)]).encode()
    half = len(text) // 2
    path = write_trace(gzip.compress(text[:half]) + gzip.compress(text[half:]), name="m.json.gz")
    trace = load(str(path))
    assert trace.complete and trace.n_events == 2


def test_large_trace_is_read_in_many_runs_with_progress(write_trace):
    events = [X(f"op{i % 50}", i, 1, **{"Input Dims": [[i]]}) for i in range(60000)]
    path = write_trace(doc(*events))
    calls = []
    trace = load(str(path), progress=lambda done, total, n: calls.append((done, total, n)))
    assert trace.n_events == 60000 and len(trace.chunks.offset) > 1
    assert len(calls) > 1
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    assert calls[-1][0] == calls[-1][1] == path.stat().st_size


@pytest.mark.parametrize("expected_bytes", [1, 10_000, 1 << 40])
def test_model_columns_grow_past_a_short_estimate(write_trace, expected_bytes, monkeypatch):
    """The columns are sized from the first run and grown when that estimate was short: the
    model is the same whatever the estimate."""
    from kinetoscope.parser import builder as builder_module

    events = [X(f"op{i % 7}", i, 1, cat="kernel" if i % 3 else "cpu_op") for i in range(30000)]
    path = write_trace(doc(*events))
    reference = load(str(path), use_cache=False, workers=1)
    made = builder_module.TraceBuilder
    monkeypatch.setattr(
        "kinetoscope.parser.reader.TraceBuilder", lambda **_: made(expected_bytes=expected_bytes)
    )
    trace = load(str(path), use_cache=False, workers=1)
    for column in ROW_COLUMNS:
        assert np.array_equal(getattr(trace, column), getattr(reference, column)), column
    assert trace.strings == reference.strings


def test_gzip_expected_size_comes_from_the_trailer(write_trace):
    from kinetoscope.parser.source import open_source

    text = json.dumps(doc(*[X("a", i, 1) for i in range(2000)])).encode()
    path = write_trace(gzip.compress(text), name="t.json.gz")
    assert open_source(str(path)).expected_bytes == len(text)


@pytest.mark.parametrize("compress", [False, True])
def test_progress_callback_can_cancel(write_trace, compress, monkeypatch):
    import threading

    # Inflated ahead in a thread even at this size (small files are inflated inline).
    monkeypatch.setattr("kinetoscope.parser.source.INLINE_GZIP_MAX", 0)
    path = write_trace(doc(*[X("a", i, 1) for i in range(60000)]), compress=compress)

    class Cancelled(Exception):
        pass

    def cancel(done, total, n):
        raise Cancelled

    with pytest.raises(Cancelled):
        load(str(path), progress=cancel)
    # The thread that inflates gzip ahead of the parser stops with it.
    assert not [t for t in threading.enumerate() if t.name == "kinetoscope-gunzip"]


@pytest.mark.parametrize("compress", [False, True])
def test_read_event_returns_the_full_json_object(write_trace, compress):
    events = [
        X(f"op{i}", i, 1, **{"Input Dims": [[i]], "Call stack": f"f{i}.py(1): g"})
        for i in range(60000)
    ]
    path = write_trace(doc(*events), compress=compress)
    trace = load(str(path))
    for row in (0, 1, 31000, 59999):
        assert read_event(trace, row) == events[row]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (bytes(range(256)) * 4, "binary"),
        (b"hello world", "not JSON"),
        (b'{"a": 1}', "no traceEvents"),
        (b"42", "not a trace"),
        (b'{"traceEvents": 5}', "no traceEvents"),
    ],
)
def test_bad_input_raises_one_line_trace_error(write_trace, content, message):
    path = write_trace(content)
    with pytest.raises(TraceError) as info:
        load(str(path))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        load(str(tmp_path / "nope.json"))
    with pytest.raises(TraceError, match="directory"):
        load(str(tmp_path))


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02garbage", b"{not json", b'{"x": 1}'])
def test_cli_bad_input_is_one_stderr_line_and_exit_1(write_trace, content):
    path = write_trace(content)
    result = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kinetoscope: ")
    assert "Traceback" not in result.stderr


def test_cli_missing_file():
    result = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", "/nonexistent/trace.json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "no such file" in result.stderr


def test_parser_and_analysis_do_not_import_textual_or_torch():
    code = (
        "import sys, kinetoscope.parser, kinetoscope.analysis, kinetoscope.analysis.summary;"
        "bad = [m for m in ('textual', 'torch') if m in sys.modules];"
        "print(','.join(bad))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.parametrize("setting", [None, "1"])
def test_numpy_huge_page_advice_is_off_unless_asked_for(setting):
    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if setting is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = setting
    code = (
        "import numpy as np, kinetoscope.parser\nprint(np._core.multiarray._get_madvise_hugepage())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == ("True" if setting == "1" else "False"), out.stderr


_RELEASE = """
import os, sys
from kinetoscope.parser import load, parallel

def children():
    mine = str(os.getpid())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[1] == mine:
                    found.append(pid)
        except OSError:
            pass
    return found

trace = load(sys.argv[1], use_cache=False, workers=2, release=sys.argv[2] == "release")
parallel.wait_released()  # a released load's pool stops in a thread: its end waited for here
print(trace.workers, len(children()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("release", [False, True])
def test_a_load_with_release_leaves_no_worker_processes(write_trace, release):
    """`load(release=True)` (kinetoscope summary) stops the worker server and multiprocessing's
    resource tracker once the trace is read; a plain load keeps them for the next load."""
    path = write_trace(doc(*[X(f"op{i % 9}", i, 1) for i in range(40000)]))
    result = subprocess.run(
        [sys.executable, "-c", _RELEASE, str(path), "release" if release else "keep"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KINETOSCOPE_PARALLEL_MIN_BYTES": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    workers, children = map(int, result.stdout.split())
    assert workers == 2  # decoded by worker processes, not the one-process fallback
    assert (children == 0) if release else (children > 0)


_RELEASE_LATER = (
    _RELEASE.split("trace = load")[0]
    + """
import threading
gate = threading.Event()
stop_pool = parallel._stop_pool

def held(pool, starting):  # the pool's stop held until the load has returned
    gate.wait()
    stop_pool(pool, starting)

parallel._stop_pool = held
trace = load(sys.argv[1], use_cache=False, workers=2, release=True)
print(trace.workers, parallel.releasing(), ",".join(children()))
if sys.argv[2] == "wait":
    gate.set()
    parallel.wait_released()
    print(parallel.releasing(), len(children()))
else:  # the process ends with the stop still held: its exit waits for the stop
    threading.Timer(0.5, gate.set).start()
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["wait", "exit"])
def test_a_released_load_returns_before_its_workers_are_stopped(write_trace, how):
    """`load(release=True)` does not wait for its pool's shutdown nor for the worker server's
    exit (on a busy machine, seconds for workers still starting that would decode nothing):
    a thread does both while the caller analyses; a wait, or the process's exit, sees them
    stopped, no worker left and nothing said."""
    path = write_trace(doc(*[X(f"op{i % 9}", i, 1) for i in range(40000)]))
    result = subprocess.run(
        [sys.executable, "-c", _RELEASE_LATER, str(path), how],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KINETOSCOPE_PARALLEL_MIN_BYTES": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == ""
    lines = result.stdout.split("\n")
    workers, stopping, children = lines[0].split()
    assert (workers, stopping) == ("2", "True") and children  # the server, still running
    if how == "wait":
        assert lines[1].split() == ["False", "0"]
    for pid in children.split(","):  # stopped and reaped before the process ended
        assert not os.path.exists(f"/proc/{pid}")


_SERVER_EXIT = """
import atexit, gc, sys
from kinetoscope.parser import load, parallel

if sys.argv[1] == "import":  # as the worker server does
    atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0))
    import kinetoscope.parser.server_exit
else:
    trace = load(sys.argv[2], use_cache=False, workers=2, release=True)
    parallel.wait_released()
    print(trace.workers, "kinetoscope.parser.server_exit" in sys.modules)
"""


def test_the_worker_server_alone_skips_the_collections_at_its_exit(write_trace):
    """The worker server preloads `server_exit`, whose exit handler freezes its objects (its
    exit, which a released load's stop waits for, then skips the full collections); the
    loading process never imports it (its own collections go on as before)."""
    import multiprocessing.forkserver

    from kinetoscope.parser import parallel

    parallel.worker_context()
    assert (
        "kinetoscope.parser.server_exit" in multiprocessing.forkserver._forkserver._preload_modules
    )
    path = write_trace(doc(*[X(f"op{i % 9}", i, 1) for i in range(40000)]))
    env = {**os.environ, "KINETOSCOPE_PARALLEL_MIN_BYTES": "1"}
    run = [sys.executable, "-c", _SERVER_EXIT]
    imported = subprocess.run([*run, "import"], capture_output=True, text=True, timeout=60)
    assert imported.stdout.split() == ["frozen", "True"], imported.stderr[-2000:]
    loaded = subprocess.run(
        [*run, "load", str(path)], capture_output=True, text=True, timeout=120, env=env
    )
    assert loaded.stdout.split() == ["2", "False"], loaded.stderr[-2000:]
