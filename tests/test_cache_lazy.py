"""A reopen from the model cache costs the same at any size (issue 19): each array file's
identity is checked before it is mapped, its CRC after the first frame, in the background.

- A file written to since the entry was made is refused before anything is shown.
- Damage its identity does not show (bit rot, a tool that keeps the times) passes the open but
  fails the background check: the entry is removed and the viewer reads the trace again, and the
  view built on the damaged entry is not used afterwards.
- The open reads O(1) bytes of the arrays: their headers, never their data.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from kinetoscope.parser import Trace, cache, load
from test_robust_cache import LIMIT_S, _document, assert_same_model


def _write_trace(folder: Path, n: int) -> Path:
    path = folder / f"trace{n}.json"
    path.write_text(json.dumps(_document(n)))
    return path


@pytest.fixture
def trace_path(tmp_path: Path) -> Path:
    return _write_trace(tmp_path, 40)


@pytest.fixture
def fresh(trace_path: Path) -> Trace:
    return load(str(trace_path), use_cache=False, workers=1)


@pytest.fixture
def entry(fresh: Trace) -> Path:
    folder = cache.save(fresh)
    assert folder is not None
    return folder


def _rerecord(folder: Path, name: str) -> None:
    """Record one file's identity as it is now, keeping its CRC: the entry then looks as if the
    file had been damaged without a write the file system shows (what only the CRC catches)."""
    manifest = folder / "manifest.json"
    body = msgspec.json.decode(cache.manifest_body(manifest.read_bytes()))
    st = (folder / f"{name}.npy").stat()
    body["files"][name].update(ino=st.st_ino, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
    manifest.write_bytes(cache.manifest_bytes(body))


def _flip_last_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[-1] ^= 0x01
    file.write_bytes(bytes(data))


def test_the_entry_records_each_file_as_written(trace_path, entry):
    body = msgspec.json.decode(cache.manifest_body((entry / "manifest.json").read_bytes()))
    assert body["key"]["format"] == cache.FORMAT_VERSION
    for name, facts in body["files"].items():
        st = (entry / f"{name}.npy").stat()
        assert (facts["ino"], facts["mtime_ns"], facts["ctime_ns"], facts["bytes"]) == (
            st.st_ino,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_size,
        )
        assert facts["crc32"] == zlib.crc32((entry / f"{name}.npy").read_bytes())


@pytest.mark.parametrize("name", ["start", "name", "memory.ts", "strings.blob"])
@pytest.mark.parametrize("how", ["same bytes", "one byte flipped", "replaced"])
def test_a_rewritten_file_is_refused_before_anything_is_shown(trace_path, fresh, entry, name, how):
    file = entry / f"{name}.npy"
    data = file.read_bytes()
    if how == "same bytes":
        file.write_bytes(data)  # even the same content: any write is refused
    elif how == "one byte flipped":
        _flip_last_byte(file)
    else:
        other = file.with_name("other")
        other.write_bytes(data)
        os.replace(other, file)  # a new inode
    assert cache.load(str(trace_path), verify=False) is None
    assert not cache.has_entry(str(trace_path))
    trace = load(str(trace_path), write_cache=False, verify_cache=False)
    assert not trace.from_cache
    assert_same_model(trace, fresh)


@pytest.mark.parametrize("name", ["start", "dur", "ordinal", "memory.bytes"])
def test_a_flipped_byte_is_caught_by_the_background_check(trace_path, fresh, entry, name):
    _flip_last_byte(entry / f"{name}.npy")
    _rerecord(entry, name)
    # The open does not read the data: it is served, unchecked...
    lazy = cache.load(str(trace_path), verify=False)
    assert lazy is not None and lazy.cache_unchecked
    # ...and the check reads it: it fails, and the entry is gone.
    assert not cache.check(lazy)
    assert not entry.exists()
    assert cache.load(str(trace_path), verify=False) is None


def test_verify_reads_the_crcs_up_front(trace_path, fresh, entry):
    """`summary` (parser.load's default) checks every byte before it uses the entry."""
    _flip_last_byte(entry / "dur.npy")
    _rerecord(entry, "dur")
    assert cache.load(str(trace_path)) is None
    trace = load(str(trace_path), write_cache=False)
    assert not trace.from_cache
    assert_same_model(trace, fresh)


def test_a_good_entry_passes_the_check(trace_path, fresh, entry):
    lazy = cache.load(str(trace_path), verify=False)
    assert lazy is not None and lazy.cache_unchecked
    assert cache.check(lazy)
    assert lazy.cache_unchecked is None
    assert cache.check(lazy)  # nothing left to read
    assert_same_model(lazy, fresh)
    assert cache.load(str(trace_path)) is not None


def test_a_file_changed_after_the_open_fails_the_check(trace_path, entry):
    lazy = cache.load(str(trace_path), verify=False)
    assert lazy is not None
    (entry / "lane.npy").write_bytes((entry / "lane.npy").read_bytes())
    assert not cache.check(lazy)
    assert not entry.exists()


class _Reads:
    """Bytes read through os.read and os.pread while it is installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.total = 0
        pread, read = os.pread, os.read

        def counting_pread(fd: int, n: int, offset: int) -> bytes:
            data = pread(fd, n, offset)
            self.total += len(data)
            return data

        def counting_read(fd: int, n: int) -> bytes:
            data = read(fd, n)
            self.total += len(data)
            return data

        monkeypatch.setattr(os, "pread", counting_pread)
        monkeypatch.setattr(os, "read", counting_read)


def _array_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.npy"))


def test_the_reopen_reads_o1_bytes_of_the_arrays(tmp_path, monkeypatch):
    """A 50x bigger trace: opening its entry reads the manifest and at most 512 bytes of each
    array file (its header), none of its arrays' data; `check` then reads every byte."""
    read: dict[int, int] = {}
    arrays: dict[int, int] = {}
    for n in (40, 2000):
        path = _write_trace(tmp_path, n)
        folder = cache.save(load(str(path), use_cache=False, workers=1))
        assert folder is not None
        arrays[n] = _array_bytes(folder)
        manifest = (folder / "manifest.json").stat().st_size
        with monkeypatch.context() as patch:
            reads = _Reads(patch)
            lazy = cache.load(str(path), verify=False)
            assert lazy is not None and lazy.from_cache
            read[n] = reads.total - manifest
            assert read[n] <= 512 * len(list(folder.glob("*.npy")))
            before = reads.total
            assert cache.check(lazy)
            assert reads.total - before >= arrays[n]  # the check reads them all
    # At most a header's first 512 bytes per file, whatever the size: a fraction of the arrays.
    assert arrays[2000] > 20 * arrays[40]
    assert read[2000] < arrays[2000] / 20


def test_the_view_cache_is_checked_with_the_model(trace_path, fresh, entry):
    from kinetoscope.tui.data import viewdata

    data = viewdata.build_view_data(cache.load(str(trace_path)))
    assert viewdata.save_view_cache(data)
    extra = entry / "extra-view"
    name = "nesting.outermost"
    _flip_last_byte(extra / f"{name}.npy")
    _rerecord(extra, name)
    lazy = cache.load(str(trace_path), verify=False)
    assert lazy is not None
    assert viewdata.load_view_cache(lazy) is not None  # mapped unchecked, with the model
    assert len(lazy.cache_unchecked) == 2
    assert not cache.check(lazy)
    assert not entry.exists()


def _reports(loader: Any) -> list[Any]:
    return list(loader._reported)


def test_the_viewer_reloads_from_the_json_when_the_check_fails(trace_path, fresh, entry):
    from kinetoscope.tui.data.loader import Ready, Reloading, TraceLoad

    _flip_last_byte(entry / "dur.npy")
    _rerecord(entry, "dur")
    loader = TraceLoad(str(trace_path), staged=True)
    loader.wait(LIMIT_S)
    first = loader.data
    assert first is not None and first.trace.from_cache  # shown before the check
    loader.first_frame_shown()
    loader.join(LIMIT_S)
    assert not loader.running
    reports = _reports(loader)
    reloading = [r for r in reports if isinstance(r, Reloading)]
    assert len(reloading) == 1 and "cache" in reloading[0].message
    ready = [r for r in reports if isinstance(r, Ready)]
    assert len(ready) == 2 and ready[0].data is first
    # After the failed check: a new view, from the file, and the entry written again.
    assert reports.index(reloading[0]) < reports.index(ready[1])
    again = loader.data
    assert again is not first and again is ready[1].data
    assert not again.trace.from_cache
    assert_same_model(again.trace, fresh)
    assert loader.error is None and loader.background_error is None


def test_the_viewer_keeps_a_good_cached_view(trace_path, fresh, entry):
    from kinetoscope.tui.data.loader import Ready, Reloading, TraceLoad

    loader = TraceLoad(str(trace_path), staged=True)
    loader.wait(LIMIT_S)
    loader.first_frame_shown()
    loader.join(LIMIT_S)
    reports = _reports(loader)
    assert not [r for r in reports if isinstance(r, Reloading)]
    assert len([r for r in reports if isinstance(r, Ready)]) == 1
    assert loader.data is not None and loader.data.trace.from_cache
    assert loader.data.trace.cache_unchecked is None  # checked


async def test_the_app_drops_the_rejected_view(trace_path, fresh, entry):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.screens import TraceScreen

    _flip_last_byte(entry / "start.npy")
    _rerecord(entry, "start")
    app = KinetoscopeApp(str(trace_path), staged=True)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(400):
            await pilot.pause(0.05)
            if not app.loader.running and isinstance(app.screen, TraceScreen):
                if not app.screen.data.trace.from_cache:
                    break
        screens = [s for s in app.screen_stack if isinstance(s, TraceScreen)]
        assert len(screens) == 1
        assert not screens[0].data.trace.from_cache
        assert app.data is screens[0].data
        assert_same_model(app.data.trace, fresh)
        assert np.array_equal(app.data.trace.start, fresh.start)


def _cached_view(trace_path: Path) -> Any:
    from kinetoscope.tui.data import viewdata

    full = viewdata.build_view_data(cache.load(str(trace_path)))
    assert viewdata.save_view_cache(full)
    return full


def test_a_reopened_view_shows_its_top_levels_without_sorting_or_nesting(
    trace_path, entry, monkeypatch
):
    """The first frame of a cached view: each lane's top level from the cache, no sort and no
    nesting (those cost more with every event); the rest rebuilt from the cache after it."""
    from kinetoscope.tui.data import viewdata
    from test_view_staged import assert_same_levels

    full = _cached_view(trace_path)
    lazy = cache.load(str(trace_path), verify=False)
    assert lazy is not None

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("computed on the first frame's path")

    with monkeypatch.context() as patch:
        patch.setattr(viewdata, "slice_order", refused)
        patch.setattr(viewdata, "compute_nesting", refused)
        patch.setattr(viewdata.ViewData, "_root_placement", refused)
        first = viewdata.build_view_data(lazy, staged=True)
        assert first.levels_from_cache and not first.complete
        assert not first.session.nesting_ready
        assert_same_levels(first, full, top_only=True)
        assert cache.check(lazy)
        first.complete_levels()  # from the cache: still no sort, no nesting
    assert first.complete and first.levels_from_cache
    assert_same_levels(first, full, top_only=False)
    for name in ("order", "position", "parent", "depth", "self_time", "subtree_stop", "outermost",
                 "lane_of", "parent_pos", "lane_ids", "lane_start"):  # fmt: skip
        a, b = getattr(first.nesting, name), getattr(full.nesting, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


def test_the_view_cache_is_small(trace_path, entry):
    """The nesting's forest and the placed rows as int32, the keys as runs: about 17 bytes per
    slice, where the whole nesting and placement took 46."""
    full = _cached_view(trace_path)
    extra = entry / "extra-view"
    slices = len(full.placement.rows)
    arrays = sum(f.stat().st_size - 128 for f in extra.glob("*.npy"))
    assert arrays <= 18 * slices + 8 * 2 * (len(full.lanes) * 8)


@pytest.mark.parametrize("value", [-5, 10**6])
def test_a_cached_view_with_rows_out_of_range_is_computed_instead(trace_path, entry, value):
    from kinetoscope.tui.data import viewdata
    from test_view_staged import assert_same_levels

    full = _cached_view(trace_path)
    extra = entry / "extra-view"
    for name in ("placement.rows", "nesting.order"):
        file = extra / f"{name}.npy"
        original = file.read_bytes()
        array = np.load(file)
        array[len(array) // 2] = value
        np.save(file, array)
        body = msgspec.json.decode(cache.manifest_body((extra / "manifest.json").read_bytes()))
        st = file.stat()
        body["files"][name].update(
            ino=st.st_ino, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns,
            crc32=zlib.crc32(file.read_bytes()), bytes=st.st_size,
        )  # fmt: skip
        (extra / "manifest.json").write_bytes(cache.manifest_bytes(body))
        view = viewdata.build_view_data(cache.load(str(trace_path)), staged=True)
        view.complete_levels()
        assert not view.levels_from_cache
        assert_same_levels(view, full, top_only=False)
        file.write_bytes(original)
        _rerecord(extra, name)


def test_a_failed_check_removes_the_entry_it_was_read_from(tmp_path, trace_path, fresh):
    root = tmp_path / "another-root"
    folder = cache.save(fresh, root)
    assert folder is not None and folder.parent == root
    _flip_last_byte(folder / "start.npy")
    _rerecord(folder, "start")
    lazy = cache.load(str(trace_path), root, verify=False)
    assert lazy is not None
    assert not cache.check(lazy)
    assert not folder.exists()
