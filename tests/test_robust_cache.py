"""A damaged or stale model cache is never trusted, and never blocks (issue 20).

Every test here puts a cache entry next to nothing the user owns (KINETOSCOPE_CACHE_DIR points
at a temporary folder, tests/conftest.py), damages it the way disks, tools and people do, and
checks that the trace still loads, in the parser, in `kinetoscope summary` and in the viewer, as
if there were no cache at all: the same model, the same summary, no traceback, no hang.
"""

from __future__ import annotations

import ast
import json
import os
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from fuzz.harness import time_limit
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import Trace, cache, load
from kinetoscope.parser.cache import CHUNK_COLUMNS, COLUMNS, MEMORY_COLUMNS

LIMIT_S = 20.0  # a load that takes longer is hanging (the tests' loads take milliseconds)


def _events(n: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}},
        {"ph": "M", "name": "process_sort_index", "pid": 7, "tid": 0, "args": {"sort_index": 3}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 7, "tid": 8,
         "ts": 0, "dur": 10 * n + 50},
    ]  # fmt: skip
    for i in range(n):
        ts = 10 * i + 1
        events += [
            {"ph": "X", "name": f"aten::op{i % 5}", "cat": "cpu_op", "pid": 7, "tid": 8,
             "ts": ts, "dur": 6, "args": {"Input Dims": [[i % 3, 4]], "External id": i}},
            {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 7, "tid": 8,
             "ts": ts + 1, "dur": 2, "args": {"correlation": 100 + i, "External id": i}},
            {"ph": "X", "name": f"kernel_{i % 4}", "cat": "kernel", "pid": 0, "tid": "stream 7",
             "ts": ts + 4, "dur": 5, "args": {"correlation": 100 + i, "device": 0, "stream": 7}},
            {"ph": "i", "name": "[memory]", "pid": 7, "tid": 8, "ts": ts + 2, "s": "t",
             "args": {"Addr": 4096 * i, "Bytes": 512, "Total Allocated": 512 * (i + 1),
                      "Total Reserved": 1 << 20, "Device Type": 1, "Device Id": 0}},
        ]  # fmt: skip
    events.append({"ph": "i", "name": "[memory]", "pid": 7, "tid": 8, "args": {"Bytes": 1}})
    return events


def _document(n: int = 40) -> dict[str, Any]:
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 1 << 34}],
        "traceEvents": _events(n),
    }


@pytest.fixture
def trace_path(tmp_path: Path) -> Path:
    path = tmp_path / "traces" / "small.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_document(), indent=1))
    return path


@pytest.fixture
def fresh(trace_path: Path) -> Trace:
    return load(str(trace_path), use_cache=False, workers=1)


@pytest.fixture
def entry(trace_path: Path, fresh: Trace) -> Path:
    """A valid model cache entry of the trace (written as the viewer writes it)."""
    folder = cache.save(fresh)
    assert folder is not None
    assert getattr(cache.load(str(trace_path)), "from_cache", False)
    return folder


def assert_same_model(a: Trace, b: Trace) -> None:
    for column in COLUMNS:
        x, y = getattr(a, column), getattr(b, column)
        assert x.dtype == y.dtype and np.array_equal(x, y), column
    for column in MEMORY_COLUMNS:
        x, y = getattr(a.memory, column), getattr(b.memory, column)
        assert x.dtype == y.dtype and np.array_equal(x, y), f"memory.{column}"
    assert (a.chunks is None) == (b.chunks is None)
    if a.chunks is not None and b.chunks is not None:
        for column in CHUNK_COLUMNS:
            assert np.array_equal(getattr(a.chunks, column), getattr(b.chunks, column)), column
    assert a.strings == b.strings
    assert a.lanes == b.lanes
    assert a.header == b.header
    assert a.source == b.source
    assert (a.n_events, a.by_phase, a.by_category) == (b.n_events, b.by_phase, b.by_category)
    assert (a.slice_start_min, a.slice_end_max) == (b.slice_start_min, b.slice_end_max)
    assert (a.complete, a.warnings, a.stopped_at) == (b.complete, b.warnings, b.stopped_at)


def summary_of(trace: Trace) -> bytes:
    return msgspec.json.encode(build_summary(trace))


def load_checked(path: Path, fresh: Trace) -> Trace:
    """Load through the parser (the viewer's and summary's path): never an exception, never a
    hang, and exactly the model (and summary) of a fresh load."""
    with time_limit(LIMIT_S):
        trace = load(str(path), write_cache=False)
    assert_same_model(trace, fresh)
    assert summary_of(trace) == summary_of(fresh)
    return trace


def _manifest(folder: Path) -> Path:
    return folder / "manifest.json"


def _edit_body(folder: Path, edit: Callable[[Any], Any], recheck: bool) -> None:
    """Change the manifest's content (what `edit` returns replaces it); keep its check as it was
    unless `recheck`, which makes the entry consistent again (a writer's bug, not damage)."""
    data = _manifest(folder).read_bytes()
    body = cache.manifest_body(data)
    assert body is not None
    changed = edit(msgspec.json.decode(body))
    if recheck:
        _manifest(folder).write_bytes(cache.manifest_bytes(changed))
    else:
        doc = msgspec.json.decode(data)
        doc["body"] = changed
        _manifest(folder).write_bytes(msgspec.json.encode(doc))


# -- 1. A manifest of the wrong shape ------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"[]", b"null", b'"manifest"', b"0", b"{}", b'{"files": []}', b'{"key": {}, "files": []}'],
)
def test_a_manifest_of_the_wrong_shape_is_ignored(trace_path, fresh, entry, content):
    _manifest(entry).write_bytes(content)
    assert cache.load(str(trace_path)) is None
    assert not cache.has_entry(str(trace_path))
    trace = load_checked(trace_path, fresh)
    assert not trace.from_cache


WRONG_VALUES = [None, [], {}, "x", -1, 1 << 70, 1.5, True, [[]], {"files": []}]

# The JSON types each field of the manifest may hold (anything else must be refused).
NULLABLE_INT, NULLABLE_STR, INT_OR_STR = (
    (int, type(None)),
    (str, type(None)),
    (int, str, type(None)),
)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(["key", "header", "by_phase", "by_category", "source", "files"], (dict,)),
    **dict.fromkeys(["lanes", "warnings", "shape"], (list,)),
    **dict.fromkeys(["n_events", "size", "mtime_ns", "ctime_ns", "ino", "dev", "format"], (int,)),
    **dict.fromkeys(["bytes", "crc32", "id", "lane_count"], (int,)),
    **dict.fromkeys(["complete", "has_chunks", "compressed", "is_gpu"], (bool,)),
    **dict.fromkeys(["slice_start_min", "slice_end_max", "stopped_at"], NULLABLE_INT),
    **dict.fromkeys(["process_sort", "thread_sort"], NULLABLE_INT),
    **dict.fromkeys(["process_name", "thread_name", "process_labels"], NULLABLE_STR),
    "pid": INT_OR_STR,
    "tid": INT_OR_STR,
    "path": (str,),
    "dtype": (str,),
}


def _allowed(path: tuple[str, ...], value: Any) -> bool:
    """Whether `value` has a type the field at `path` may hold (bool is not an int here)."""
    if path[0] == "lanes" and len(path) == 2 or path[0] == "files" and len(path) == 2:
        return False  # a whole lane or file record replaced by a scalar, list or {"files": []}
    if path == ("source", "mtime_ns"):
        return type(value) in NULLABLE_INT
    return type(value) in FIELD_TYPES.get(path[-1], (object,))


def _fields(body: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every field of the manifest, nested ones included, as paths of keys."""
    paths: list[tuple[str, ...]] = [(k,) for k in body]
    paths += [("key", k) for k in body["key"]]
    paths += [("source", k) for k in body["source"]]
    paths += [("lanes", "0", k) for k in body["lanes"][0]]
    paths += [("lanes", "0")]
    name = next(iter(body["files"]))
    paths += [("files", name), *[("files", name, k) for k in body["files"][name]]]
    return paths


def _replace(body: Any, path: tuple[str, ...], value: Any) -> Any:
    node = body
    for step in path[:-1]:
        node = node[int(step)] if isinstance(node, list) else node[step]
    last = path[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return body


def test_every_field_of_the_wrong_type_is_ignored(trace_path, fresh, entry):
    """Each field of the manifest given each wrong type, with a check that matches (so that only
    the shape validation can catch it): refused, never an exception."""
    original = _manifest(entry).read_bytes()
    body = msgspec.json.decode(cache.manifest_body(original))
    refused = 0
    for path in _fields(body):
        for value in WRONG_VALUES:
            _edit_body(entry, lambda b, p=path, v=value: _replace(b, p, v), recheck=True)
            with time_limit(LIMIT_S):
                cached = cache.load(str(trace_path))
            if cached is None:
                refused += 1
            else:
                assert _allowed(path, value), f"{path} = {value!r} was served"
            _manifest(entry).write_bytes(original)
    assert refused > 200
    assert getattr(cache.load(str(trace_path)), "from_cache", False)


def test_summary_ignores_a_broken_cache(trace_path, fresh, entry, capsys):
    from kinetoscope.commands.cli import main

    expected = summary_of(fresh)
    _manifest(entry).write_bytes(b"[]")
    assert main(["summary", str(trace_path), "--json"]) == 0
    out = capsys.readouterr()
    assert msgspec.json.encode(msgspec.json.decode(out.out)) == expected
    assert "Traceback" not in out.err


def test_the_viewer_ignores_a_broken_cache_and_rebuilds_it(trace_path, fresh, entry, monkeypatch):
    from kinetoscope.tui.data.loader import TraceLoad

    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)  # the small trace is cached as a big one
    _manifest(entry).write_bytes(b"[]")
    job = TraceLoad(str(trace_path), staged=True)
    job.wait(LIMIT_S)
    assert job.error is None, job.error
    assert job.data is not None
    assert_same_model(job.data.trace, fresh)
    job.first_frame_shown()
    job.join(LIMIT_S)
    rebuilt = cache.load(str(trace_path))
    assert rebuilt is not None, "the viewer wrote the entry again"
    assert_same_model(rebuilt, fresh)


# -- 2. The manifest is checked like the arrays --------------------------------------------------


def _bump_gpu(body: dict[str, Any]) -> dict[str, Any]:
    lane = next(lane for lane in body["lanes"] if lane["is_gpu"])
    lane["is_gpu"] = False
    return body


EDITS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "n_events": lambda b: {**b, "n_events": b["n_events"] + 1},
    "slice_start_min": lambda b: {**b, "slice_start_min": b["slice_start_min"] + 1000},
    "slice_end_max": lambda b: {**b, "slice_end_max": b["slice_end_max"] - 1},
    "complete": lambda b: {**b, "complete": not b["complete"]},
    "X count": lambda b: {**b, "by_phase": {**b["by_phase"], "X": b["by_phase"]["X"] + 1}},
    "category count": lambda b: {**b, "by_category": {**b["by_category"], "kernel": 1}},
    "is_gpu": _bump_gpu,
    "thread name": lambda b: {**b, "lanes": [{**ln, "thread_name": "x"} for ln in b["lanes"]]},
    "header": lambda b: {**b, "header": {**b["header"], "schemaVersion": 2}},
    "warnings": lambda b: {**b, "warnings": ["an old warning"]},
    "stopped_at": lambda b: {**b, "stopped_at": 17},
    "source": lambda b: {**b, "source": {**b["source"], "compressed": True}},
}


@pytest.mark.parametrize("field", list(EDITS))
def test_an_edit_that_stays_valid_json_is_caught(trace_path, fresh, entry, field):
    _edit_body(entry, EDITS[field], recheck=False)
    assert cache.load(str(trace_path)) is None
    assert not cache.has_entry(str(trace_path))
    load_checked(trace_path, fresh)


@pytest.mark.parametrize("field", ["n_events", "X count", "is_gpu"])
def test_an_edited_manifest_does_not_change_the_summary(trace_path, fresh, entry, field, capsys):
    from kinetoscope.commands.cli import main

    _edit_body(entry, EDITS[field], recheck=False)
    assert main(["summary", str(trace_path), "--json"]) == 0
    assert msgspec.json.encode(msgspec.json.decode(capsys.readouterr().out)) == summary_of(fresh)


# -- 3. The key holds what a user cannot set -----------------------------------------------------


def _renamed_op(path: Path) -> tuple[bytes, tuple[int, int], int]:
    """Rewrite the trace with one operator renamed (same length), keeping size and mtime."""
    st = path.stat()
    data = path.read_bytes()
    assert b"aten::op1" in data
    return data.replace(b"aten::op1", b"aten::opX"), (st.st_atime_ns, st.st_mtime_ns), st.st_size


def test_a_rewrite_in_place_with_the_same_size_and_mtime_is_not_served_stale(trace_path, entry):
    data, times, size = _renamed_op(trace_path)
    time.sleep(0.05)  # past the file system's timestamp granularity
    trace_path.write_bytes(data)  # cp -p onto the file: same inode, new content
    os.utime(trace_path, ns=times)  # touch -r, rsync -t
    assert trace_path.stat().st_size == size
    trace = load(str(trace_path), write_cache=False)
    assert not trace.from_cache
    assert "aten::opX" in trace.strings and "aten::op1" not in trace.strings


def test_a_file_replaced_with_the_same_size_and_mtime_is_not_served_stale(trace_path, entry):
    data, times, size = _renamed_op(trace_path)
    other = trace_path.with_name("other.json")
    other.write_bytes(data)
    os.utime(other, ns=times)
    os.replace(other, trace_path)  # rsync -t, mv: a new inode with the old size and mtime
    trace = load(str(trace_path), write_cache=False)
    assert not trace.from_cache
    assert "aten::opX" in trace.strings


def test_a_trace_changed_while_it_loads_is_not_cached(trace_path, monkeypatch):
    """The key is taken before the file is read: a rewrite that keeps size and mtime between
    the read and the save leaves no entry under the new file's key."""
    trace = load(str(trace_path), use_cache=False, workers=1)
    data, times, _ = _renamed_op(trace_path)
    time.sleep(0.05)
    trace_path.write_bytes(data)
    os.utime(trace_path, ns=times)
    assert cache.save(trace) is None
    assert cache.load(str(trace_path)) is None


# -- 4. Never block on what is not a regular file ------------------------------------------------


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("name", ["manifest.json", "start.npy", "strings.blob.npy"])
def test_a_fifo_in_the_cache_does_not_hang(trace_path, fresh, entry, name):
    _fifo(entry / name)
    trace = load_checked(trace_path, fresh)
    assert not trace.from_cache
    with time_limit(LIMIT_S):
        assert not cache.has_entry(str(trace_path))


@pytest.mark.parametrize("kind", ["directory", "symlink to /dev/zero", "symlink to a fifo"])
def test_a_cache_file_that_is_not_a_regular_file_is_ignored(trace_path, fresh, entry, kind):
    target = entry / "dur.npy"
    target.unlink()
    if kind == "directory":
        target.mkdir()
    elif kind == "symlink to /dev/zero":
        target.symlink_to("/dev/zero")
    else:
        os.mkfifo(entry.parent / "fifo")
        target.symlink_to(entry.parent / "fifo")
    trace = load_checked(trace_path, fresh)
    assert not trace.from_cache


@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_an_entry_that_is_not_a_folder_is_ignored_and_replaced(trace_path, fresh, entry, kind):
    import shutil

    shutil.rmtree(entry)
    if kind == "fifo":
        os.mkfifo(entry)
    else:
        entry.write_bytes(b"[]")
    trace = load_checked(trace_path, fresh)
    with time_limit(LIMIT_S):
        assert not cache.has_entry(str(trace_path))
        assert cache.save(trace) == entry
    assert getattr(cache.load(str(trace_path)), "from_cache", False)


def test_a_fifo_view_cache_does_not_hang(trace_path, fresh, entry):
    from kinetoscope.tui.data import viewdata

    data = viewdata.build_view_data(cache.load(str(trace_path)))
    assert viewdata.save_view_cache(data)
    for name in ("manifest.json", "placement.rows.npy"):
        extra = entry / "extra-view"
        reopened = cache.load(str(trace_path))
        assert viewdata.load_view_cache(reopened) is not None
        _fifo(extra / name)
        with time_limit(LIMIT_S):
            assert viewdata.load_view_cache(reopened) is None
            viewdata.build_view_data(reopened)  # and the view is computed instead
        assert viewdata.save_view_cache(data)  # which replaces the broken one


# -- 5. Fuzzing the manifest and the .npy headers, not only their bytes --------------------------


def _npy_parts(data: bytes) -> tuple[bytes, dict[str, Any], bytes]:
    """(magic and version, header dict, array bytes) of a .npy file's bytes."""
    major = data[6]
    size_bytes = 2 if major == 1 else 4
    (header_len,) = struct.unpack("<H" if size_bytes == 2 else "<I", data[8 : 8 + size_bytes])
    start = 8 + size_bytes
    header = ast.literal_eval(data[start : start + header_len].decode("latin1"))
    return data[:6], header, data[start + header_len :]


def _npy(header: Any, payload: bytes, version: int = 1, literal: str | None = None) -> bytes:
    text = literal if literal is not None else repr(header)
    raw = text.encode("latin1")
    size_bytes = 2 if version == 1 else 4
    pad = -(10 + size_bytes - 2 + len(raw) + 1) % 64
    raw = raw + b" " * pad + b"\n"
    length = struct.pack("<H" if size_bytes == 2 else "<I", len(raw))
    return b"\x93NUMPY" + bytes([version, 0]) + length + raw + payload


def _header_mutations(data: bytes) -> list[tuple[str, bytes]]:
    """Systematic changes to one .npy file: its header's shape, dtype and order, its version,
    its length and its layout (each also gets a matching CRC in one of the runs)."""
    _, header, payload = _npy_parts(data)
    (n,) = header["shape"]
    descr = header["descr"]
    out: list[tuple[str, bytes]] = []
    for shape in [(n + 1,), (max(n - 1, 0),), (0,), (n, 1), (1, n), (), (1 << 62,), (1 << 40, 1 << 40),
                  (-1,), (n // 2 or 1, 2), ("x",)]:  # fmt: skip
        out.append((f"shape {shape}", _npy({**header, "shape": shape}, payload)))
    for other in ["<i1", "<u1", "<i2", "<i4", "<u4", "<i8", "<u8", ">i8", ">i4", "<f8", "<f4",
                  "|b1", "<U1", "|S8", "|V8", "<c16", "<M8[ns]", "O", "[('a', '<i4')]"]:  # fmt: skip
        if other != descr:
            literal = None
            if other.startswith("["):
                literal = repr({**header, "descr": "X"}).replace("'X'", other)
            out.append((f"dtype {other}", _npy({**header, "descr": other}, payload, 1, literal)))
    out.append(("fortran_order", _npy({**header, "fortran_order": True}, payload)))
    out.append(("version 2", _npy(header, payload, version=2)))
    out.append(("version 3", _npy(header, payload, version=3)))
    out.append(("version 9", data[:6] + b"\x09" + data[7:]))
    out.append(("no magic", b"\x93NUMPX" + data[6:]))
    out.append(("extra key", _npy({**header, "extra": 1}, payload)))
    out.append(("missing key", _npy({k: v for k, v in header.items() if k != "shape"}, payload)))
    out.append(("not a dict", _npy(None, payload, literal="[1, 2, 3]")))
    out.append(("not a literal", _npy(None, payload, literal="{'descr': __import__('os')}")))
    out.append(("header length past the end", data[:8] + b"\xff\xff" + data[10:]))
    for cut in sorted({0, 5, 9, 20, len(data) - len(payload) - 1, len(data) - 1}):
        if 0 <= cut < len(data):
            out.append((f"cut at {cut}", data[:cut]))
    out.append(("one byte more", data + b"\0"))
    out.append(("one item more", data + b"\0" * 8))
    return out


def _recheck_file(folder: Path, name: str, crc: bool = True) -> None:
    """Make the entry's records of one array file (its identity; with `crc`, its size and CRC)
    match what the file now holds, and the manifest's own check match the manifest: damage that
    the file's identity does not show (bit rot, a tool that keeps it), so that what is left to
    catch it is the header validation (and, without `crc`, the size and CRC)."""
    file = folder / f"{name}.npy"
    content = file.read_bytes()
    st = file.stat()

    def fix(body: dict[str, Any]) -> dict[str, Any]:
        facts = body["files"][name]
        facts.update(ino=st.st_ino, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
        if crc:
            facts["bytes"] = len(content)
            facts["crc32"] = zlib.crc32(content)
        return body

    _edit_body(folder, fix, recheck=True)


@pytest.mark.parametrize("recheck", [False, True], ids=["stale CRC", "matching CRC"])
def test_fuzz_npy_headers(trace_path, fresh, entry, recheck):
    """Every array file of the entry, each header mutation: the load gives exactly the model of
    a fresh load (from the cache or not), never an exception, never a hang."""
    manifest = _manifest(entry).read_bytes()
    # One file of each dtype and of each part of the model.
    names = ["ph", "name", "start", "strings.blob", "strings.offsets", "memory.ts", "chunks.offset"]
    assert all((entry / f"{name}.npy").is_file() for name in names)
    served = rebuilt = 0
    for name in names:
        file = entry / f"{name}.npy"
        original = file.read_bytes()
        for label, mutated in _header_mutations(original):
            file.write_bytes(mutated)
            _recheck_file(entry, name, crc=recheck)
            for verify in (True, False):
                try:
                    with time_limit(LIMIT_S):
                        cached = cache.load(str(trace_path), verify=verify)
                except Exception as error:  # noqa: BLE001 - the point is that there is none
                    pytest.fail(
                        f"{name}, {label}, verify={verify}: {type(error).__name__}: {error}"
                    )
                if cached is None:
                    rebuilt += 1
                    continue
                served += 1
                try:
                    assert_same_model(cached, fresh)
                except AssertionError as error:
                    pytest.fail(f"{name}, {label}, verify={verify}: a different model ({error})")
            file.write_bytes(original)
            _manifest(entry).write_bytes(manifest)
            _recheck_file(entry, name, crc=False)  # the original bytes, rewritten
            manifest = _manifest(entry).read_bytes()
    assert rebuilt > 400
    # Changes that keep the data (fortran order of a 1-D array, version 2/3 headers) may serve.
    assert getattr(cache.load(str(trace_path)), "from_cache", False)
    load_checked(trace_path, fresh)


MANIFEST_VALUES = [None, True, 0, -1, 1 << 63, 1 << 64, 1.5, float("inf"), "", "x", [], [1], {},
                   {"a": 1}, "\ud800"]  # fmt: skip


def test_fuzz_manifest_values(trace_path, fresh, entry):
    """Every field (nested ones too), every kind of value. With the manifest's check left as it
    was, a changed manifest is never served; with a check made to match, a value of the wrong
    type is never served; and never an exception."""
    original = _manifest(entry).read_bytes()
    body = msgspec.json.decode(cache.manifest_body(original))
    unchanged = msgspec.json.encode(body)
    for path in _fields(body):
        for value in MANIFEST_VALUES:
            try:
                edited = msgspec.json.encode(_replace(msgspec.json.decode(unchanged), path, value))
            except (msgspec.EncodeError, UnicodeEncodeError, OverflowError):
                continue  # a value JSON cannot hold
            for recheck in (False, True):
                _edit_body(entry, lambda b, p=path, v=value: _replace(b, p, v), recheck)
                with time_limit(LIMIT_S):
                    cached = cache.load(str(trace_path))
                if edited == unchanged:
                    assert cached is not None
                    assert_same_model(cached, fresh)
                elif cached is not None:
                    assert recheck, f"{path} = {value!r} served with a stale check"
                    as_json = msgspec.json.decode(msgspec.json.encode(value))  # inf is null
                    assert _allowed(path, as_json), f"{path} = {value!r} was served"
                _manifest(entry).write_bytes(original)
    # Cut at every byte, and every single byte changed: never served, never an exception.
    step = max(1, len(original) // 300)
    for cut in range(0, len(original), step):
        _manifest(entry).write_bytes(original[:cut])
        assert cache.load(str(trace_path)) is None
    for at in range(0, len(original), step):
        _manifest(entry).write_bytes(original[:at] + bytes([original[at] ^ 1]) + original[at + 1 :])
        assert cache.load(str(trace_path)) is None
    _manifest(entry).write_bytes(original)
    assert getattr(cache.load(str(trace_path)), "from_cache", False)
