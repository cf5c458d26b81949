"""The model cache's write pass (issue 30): each array file is written from the array's own
buffer, block by block, its CRC-32 computed from those blocks as they go out, and no file is
read back. The files stay exactly what `np.save` writes, the CRCs exactly the files', and an
entry damaged afterwards is still refused."""

from __future__ import annotations

import builtins
import zlib
from pathlib import Path

import msgspec
import numpy as np
import pytest
from kinetoscope.parser import cache, load
from test_cache_lazy import _flip_last_byte, _rerecord, _write_trace
from test_robust_cache import assert_same_model


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 96 bytes: every array of the test traces spans several (and most end in a
    partial one), as the big arrays of a real trace do with the real block size."""
    monkeypatch.setattr(cache, "_WRITE_BLOCK", 96)


def _manifest(entry: Path) -> dict:
    return msgspec.json.decode(cache.manifest_body((entry / "manifest.json").read_bytes()))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(1000, dtype=np.int64),
        np.arange(0, dtype=np.int32),
        np.array([True, False, True]),
        np.arange(77, dtype=">u2"),
        np.arange(3001, dtype=np.uint8),
    ],
    ids=["int64", "empty", "bool", "big-endian", "odd-length"],
)
def test_a_written_array_is_what_np_save_writes(tmp_path, small_blocks, array):
    np.save(tmp_path / "numpy.npy", array, allow_pickle=False)
    crc = cache._write_npy(tmp_path / "ours.npy", array)
    ours = (tmp_path / "ours.npy").read_bytes()
    assert ours == (tmp_path / "numpy.npy").read_bytes()
    assert crc == zlib.crc32(ours)
    assert (tmp_path / "ours.npy").stat().st_mode & 0o777 == 0o600
    np.testing.assert_array_equal(np.load(tmp_path / "ours.npy"), array)


@pytest.mark.parametrize("block", [96, 4 << 20])
def test_every_file_of_an_entry_has_the_crc_of_its_bytes(tmp_path, monkeypatch, block):
    monkeypatch.setattr(cache, "_WRITE_BLOCK", block)
    path = _write_trace(tmp_path, 300)
    fresh = load(str(path), use_cache=False, workers=1)
    entry = cache.save(fresh)
    assert entry is not None
    for name, facts in _manifest(entry)["files"].items():
        data = (entry / f"{name}.npy").read_bytes()
        assert facts["crc32"] == zlib.crc32(data), name
        assert facts["bytes"] == len(data)
        np.save(tmp_path / "numpy.npy", np.asarray(getattr_column(fresh, name)))
        assert data == (tmp_path / "numpy.npy").read_bytes(), name
    reopened = cache.load(str(path))  # every CRC read and matched
    assert reopened is not None
    assert_same_model(reopened, fresh)


def getattr_column(trace, name: str) -> np.ndarray:
    """The model's array that the entry file `name` holds."""
    if name.startswith("memory."):
        return getattr(trace.memory, name.split(".", 1)[1])
    if name.startswith("chunks."):
        return getattr(trace.chunks, name.split(".", 1)[1])
    if name.startswith("strings."):
        encoded = [s.encode("utf-8", "surrogatepass") for s in trace.strings]
        if name == "strings.blob":
            return np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return np.cumsum([0] + [len(b) for b in encoded], dtype=np.int64)
    return getattr(trace, name)


@pytest.mark.parametrize("name", ["start", "dur", "strings.blob", "memory.ts"])
def test_an_entry_damaged_after_the_write_is_refused(tmp_path, small_blocks, name):
    path = _write_trace(tmp_path, 300)
    fresh = load(str(path), use_cache=False, workers=1)
    entry = cache.save(fresh)
    assert entry is not None
    _flip_last_byte(entry / f"{name}.npy")
    _rerecord(entry, name)  # the identity as it is now: only the CRC can tell
    assert cache.load(str(path)) is None
    lazy = cache.load(str(path), verify=False)
    assert lazy is not None and not cache.check(lazy)
    trace = load(str(path), write_cache=False)
    assert not trace.from_cache
    assert_same_model(trace, fresh)


def test_the_write_reads_no_array_file_back(tmp_path, monkeypatch):
    """The CRCs come from the bytes written, not from a second pass over the files (which
    cost as much again as the write: 248 MB read back for a 1 GB trace)."""
    path = _write_trace(tmp_path, 300)
    fresh = load(str(path), use_cache=False, workers=1)
    opened: list[tuple[str, str]] = []
    real_open = builtins.open

    def spying_open(file, mode="r", *args, **kwargs):
        opened.append((str(file), mode))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(cache, "open", spying_open, raising=False)
    read_bytes: list[int] = []
    real_pread = cache.os.pread

    def spying_pread(fd, length, offset):
        data = real_pread(fd, length, offset)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(cache.os, "pread", spying_pread)
    entry = cache.save(fresh)
    assert entry is not None
    arrays = [name for name, mode in opened if name.endswith(".npy")]
    assert len(arrays) == len(_manifest(entry)["files"])
    assert all(mode == "wb" for name, mode in opened if name.endswith(".npy"))
    assert sum(read_bytes) == 0
