"""Files: nothing is written next to the user's trace, the cache never holds a half-written or
stale entry, and a trace that changes while it is open is noticed instead of read as garbage."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from kinetoscope.parser import cache, file_changed, load, loads, read_event, save_cache

WRITE_EVENTS = {
    "os.mkdir",
    "os.rename",
    "os.replace",
    "os.remove",
    "os.rmdir",
    "os.chmod",
    "os.utime",
    "os.symlink",
    "os.link",
    "os.truncate",
    "shutil.rmtree",
    "shutil.move",
}
_watched: list[tuple[Path, list[str]]] = []


def _audit(event: str, args: tuple) -> None:
    if not _watched:
        return
    folder, seen = _watched[-1]
    paths: list = []
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        )
        if writes:
            paths = [path]
    elif event in WRITE_EVENTS:
        paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
    for path in paths:
        try:
            resolved = Path(os.fsdecode(path)).resolve()
        except (TypeError, ValueError):
            continue
        if resolved == folder or folder in resolved.parents:
            seen.append(f"{event} {resolved}")


sys.addaudithook(_audit)


class watch_writes:
    """Record every attempt to write inside `folder` (files, folders, renames, removals)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.seen: list[str] = []

    def __enter__(self) -> list[str]:
        _watched.append((self.folder, self.seen))
        return self.seen

    def __exit__(self, *exc) -> None:
        _watched.pop()


def _events(n: int, tag: str = "op") -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"{tag}{i % 50}",
            "pid": 1,
            "tid": 1,
            "ts": i * 2,
            "dur": 1,
            "args": {"Input Dims": [[i % 7, 3]], "Call stack": "train.py(12): step"},
        }
        for i in range(n)
    ]


@pytest.fixture
def big_trace(tmp_path) -> Path:
    """A trace big enough to be cached (over cache.MIN_CACHED_BYTES)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "big.json"
    path.write_text(json.dumps({"traceEvents": _events(60000)}, indent=1))
    assert path.stat().st_size > cache.MIN_CACHED_BYTES
    return path


def test_the_watch_sees_writes():
    # The audit hook is what the tests below rely on: it must notice a plain write.
    folder = Path(os.environ["KINETOSCOPE_CACHE_DIR"])
    with watch_writes(folder) as seen:
        (folder / "probe").write_text("x")
        os.rename(folder / "probe", folder / "probe2")
    assert [entry.split()[0] for entry in seen] == ["open", "os.rename", "os.rename"]


def test_read_only_trace_folder_loads_views_and_caches_elsewhere(big_trace, tmp_path):
    folder = big_trace.parent
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    try:
        with watch_writes(folder) as seen:
            trace = load(str(big_trace))
            assert trace.n_events == 60000
            assert read_event(trace, 5)["name"] == "op5"
            assert file_changed(trace) is None
            again = load(str(big_trace))
            from kinetoscope.analysis.summary import build_summary

            build_summary(again)
        assert seen == []
        assert again.from_cache, "the cache went somewhere else and works"
        assert sorted(p.name for p in folder.iterdir()) == ["big.json"]
    finally:
        folder.chmod(0o755)


def test_default_cache_location_is_not_next_to_the_trace(big_trace, tmp_path, monkeypatch):
    monkeypatch.delenv("KINETOSCOPE_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with watch_writes(big_trace.parent) as seen:
        load(str(big_trace))
    assert seen == []
    assert any((tmp_path / "home" / ".cache" / "kinetoscope").iterdir())


def test_interrupted_cache_write_leaves_nothing_behind(big_trace, monkeypatch):
    root = Path(os.environ["KINETOSCOPE_CACHE_DIR"])
    trace = load(str(big_trace), write_cache=False)
    real_write = cache._write_npy  # each array file's write
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_write(*args, **kwargs)

    monkeypatch.setattr(cache, "_write_npy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.save(trace)
    monkeypatch.setattr(cache, "_write_npy", real_write)
    assert [p.name for p in root.iterdir()] == [], "a half-written cache folder was left"
    assert cache.load(str(big_trace)) is None
    assert cache.save(trace) is not None and cache.load(str(big_trace)) is not None


def test_a_file_that_changed_after_loading_is_not_cached_as_it(big_trace):
    old = load(str(big_trace), write_cache=False)  # the viewer caches after the first frame
    big_trace.write_text(json.dumps({"traceEvents": _events(61000, tag="new")}, indent=1))
    assert not save_cache(old)
    fresh = load(str(big_trace))
    assert not fresh.from_cache
    assert fresh.n_events == 61000 and fresh.name_of(0) == "new0"


def test_a_changed_file_is_reported_and_args_are_not_read_from_it(big_trace):
    trace = load(str(big_trace), use_cache=False)
    assert file_changed(trace) is None
    assert read_event(trace, 100)["name"] == "op0"
    before = big_trace.stat()
    # Same size and mtime, other events at the same offsets: only reading back can tell.
    text = big_trace.read_text().replace('"op', '"po')
    big_trace.write_text(text)
    os.utime(big_trace, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert big_trace.stat().st_size == before.st_size
    assert file_changed(trace) is None
    assert read_event(trace, 100) is None
    # A visible change: size and mtime differ.
    with big_trace.open("a") as handle:
        handle.write(" ")
    assert "changed on disk" in file_changed(trace)
    assert read_event(trace, 0) is None
    big_trace.unlink()
    assert "can no longer be read" in file_changed(trace)
    assert read_event(trace, 0) is None


def test_traces_from_memory_have_no_file_to_change():
    trace = loads(json.dumps(_events(3)).encode())
    assert trace.source.mtime_ns is None
    assert file_changed(trace) is None
