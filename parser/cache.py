"""On-disk cache of a loaded Trace: plain .npy arrays, memory-mapped on reopen, never pickle.

A cache entry lives in its own folder under the user's cache directory (never next to the trace),
named by a hash of the trace's absolute path. Its manifest records the trace's path, size, mtime
and the cache format version, plus the size and CRC-32 of every array file; an entry whose key
does not match the trace, or whose files are missing, short or corrupt, is ignored and rebuilt.
Entries are written to a temporary folder and renamed into place, so a crash leaves no half entry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from .model import MEMORY_COLUMNS, ROW_COLUMNS, ChunkIndex, Lane, MemoryEvents, Source, Trace

FORMAT_VERSION = 1
COLUMNS = ROW_COLUMNS
CHUNK_COLUMNS = ("offset", "length", "first_ordinal")
# Traces smaller than this load faster than the cache pays back; they are not cached.
MIN_CACHED_BYTES = 8 << 20


def cache_root() -> Path:
    """KINETOSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/kinetoscope, else ~/.cache/kinetoscope."""
    explicit = os.environ.get("KINETOSCOPE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kinetoscope"


def trace_key(path: str) -> dict[str, Any]:
    """What a cache entry must match: the trace file as it is now."""
    st = os.stat(path)
    return {
        "path": os.path.abspath(path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "format": FORMAT_VERSION,
    }


def entry_dir(path: str, root: Path | None = None) -> Path:
    digest = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogatepass")).hexdigest()
    return (root or cache_root()) / digest[:32]


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while block := handle.read(8 << 20):
            crc = zlib.crc32(block, crc)
    return crc


def _remove_abandoned(folder: Path, age_s: float = 3600) -> None:
    """Delete half-written entries that a killed process left behind (never valid anyway)."""
    now = time.time()
    for child in folder.iterdir():
        if child.name.startswith((".tmp-", ".old-")):
            try:
                if now - child.stat().st_mtime > age_s:
                    shutil.rmtree(child, ignore_errors=True)
            except OSError:
                continue


def _key_of_loaded(trace: Trace) -> dict[str, Any] | None:
    """The cache key of the trace's file, or None if the file changed after it was read (the
    model is not of it any more)."""
    key = trace_key(trace.source.path)
    if (key["size"], key["mtime_ns"]) != (trace.source.bytes, trace.source.mtime_ns):
        return None
    return key


def _publish(target: Path, arrays: dict[str, np.ndarray], manifest: dict[str, Any]) -> bool:
    """Write the arrays and their manifest to a temporary folder next to `target`, then rename
    it into place (replacing an older one): never a half-written folder, not even on Ctrl-C.
    False when it could not be written."""
    parent = target.parent
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
    try:
        manifest = {**manifest, "files": _write_arrays(work, arrays)}
        (work / "manifest.json").write_bytes(msgspec.json.encode(manifest))
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=".old-", dir=parent))
            os.rename(target, old / "entry")
        os.rename(work, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return True
    except BaseException as error:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(error, (OSError, ValueError, TypeError, msgspec.EncodeError)):
            return False
        raise


def save(trace: Trace, root: Path | None = None) -> Path | None:
    """Write the trace's cache entry; returns its folder, or None if it could not be written."""
    try:
        key = _key_of_loaded(trace)
        if key is None:
            return None
        target = entry_dir(trace.source.path, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(target.parent)
    except OSError:
        return None
    arrays: dict[str, np.ndarray] = {c: getattr(trace, c) for c in COLUMNS}
    arrays.update({f"memory.{c}": getattr(trace.memory, c) for c in MEMORY_COLUMNS})
    if trace.chunks is not None:
        arrays.update({f"chunks.{c}": getattr(trace.chunks, c) for c in CHUNK_COLUMNS})
    encoded = [s.encode("utf-8", "surrogatepass") for s in trace.strings]
    arrays["strings.offsets"] = np.cumsum([0] + [len(b) for b in encoded], dtype=np.int64)
    arrays["strings.blob"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    manifest = {
        "key": key,
        "header": trace.header,
        "lanes": [asdict(lane) for lane in trace.lanes],
        "n_events": trace.n_events,
        "by_phase": trace.by_phase,
        "by_category": trace.by_category,
        "slice_start_min": trace.slice_start_min,
        "slice_end_max": trace.slice_end_max,
        "complete": trace.complete,
        "warnings": trace.warnings,
        "stopped_at": trace.stopped_at,
        "source": asdict(trace.source),
        "has_chunks": trace.chunks is not None,
    }
    try:
        return target if _publish(target, arrays, manifest) else None
    except OSError:
        return None


def _write_arrays(folder: Path, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    files = {}
    for name, array in arrays.items():
        file = folder / f"{name}.npy"
        np.save(file, np.ascontiguousarray(array), allow_pickle=False)
        files[name] = {"bytes": file.stat().st_size, "crc32": _crc(file)}
    return files


def has_entry(path: str, root: Path | None = None) -> bool:
    """Whether a cache entry with this file's key exists (its arrays are not checked here)."""
    try:
        manifest = msgspec.json.decode((entry_dir(path, root) / "manifest.json").read_bytes())
        return manifest.get("key") == trace_key(path)
    except (OSError, ValueError, AttributeError, msgspec.DecodeError):
        return False


def _crcs_match(folder: Path, files: dict[str, Any]) -> bool:
    """Every file's CRC-32 as recorded: two threads share the reading (zlib's CRC releases the
    interpreter's lock), the biggest files first."""
    from concurrent.futures import ThreadPoolExecutor

    names = sorted(files, key=lambda name: -files[name]["bytes"])
    with ThreadPoolExecutor(max_workers=2) as pool:
        crcs = list(pool.map(lambda name: _crc(folder / f"{name}.npy"), names))
    return all(crc == files[name]["crc32"] for name, crc in zip(names, crcs))


def _map_arrays(
    folder: Path, files: dict[str, Any], verify: bool = True
) -> dict[str, np.ndarray] | None:
    """The arrays a manifest lists, memory-mapped; None if any is missing, short or corrupt."""
    for name, facts in files.items():
        if (folder / f"{name}.npy").stat().st_size != facts["bytes"]:
            return None
    if verify and not _crcs_match(folder, files):
        return None
    arrays = {}
    for name in files:
        file = folder / f"{name}.npy"
        try:
            # A plain ndarray view of the mapping: numpy's memmap subclass is slower to index.
            arrays[name] = np.load(file, mmap_mode="r", allow_pickle=False).view(np.ndarray)
        except ValueError:  # numpy cannot map an empty array
            arrays[name] = np.load(file, allow_pickle=False)
    return arrays


def save_extra(trace: Trace, name: str, version: int, arrays: dict[str, np.ndarray]) -> bool:
    """Keep arrays derived from the model (e.g. the viewer's nesting) in the trace's entry.

    Written only into a valid entry of this very file, in a folder of its own that is renamed
    into place; `load_extra` checks the same key, its version and every CRC."""
    target = entry_dir(trace.source.path)
    try:
        key = _key_of_loaded(trace)
        manifest = msgspec.json.decode((target / "manifest.json").read_bytes())
        if key is None or manifest.get("key") != key:
            return False
        _remove_abandoned(target)
        return _publish(target / f"extra-{name}", arrays, {"key": key, "version": version})
    except (OSError, AttributeError, msgspec.DecodeError):
        return False


def load_extra(
    trace: Trace, name: str, version: int, verify: bool = True
) -> dict[str, np.ndarray] | None:
    """The arrays `save_extra` kept for this trace file as it is now, or None."""
    folder = entry_dir(trace.source.path) / f"extra-{name}"
    try:
        extra = msgspec.json.decode((folder / "manifest.json").read_bytes())
        if extra.get("key") != trace_key(trace.source.path) or extra.get("version") != version:
            return None
        return _map_arrays(folder, extra["files"], verify)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, msgspec.DecodeError):
        return None


def load(path: str, root: Path | None = None, verify: bool = True) -> Trace | None:
    """The cached Trace for `path`, memory-mapped, or None when there is no valid entry."""
    target = entry_dir(path, root)
    try:
        manifest = msgspec.json.decode((target / "manifest.json").read_bytes())
        if manifest.get("key") != trace_key(path):
            return None
        arrays = _map_arrays(target, manifest["files"], verify)
        if arrays is None:
            return None
        offsets = np.asarray(arrays.pop("strings.offsets"))
        blob = bytes(arrays.pop("strings.blob"))
        strings = [
            blob[a:b].decode("utf-8", "surrogatepass")
            for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())
        ]
        memory = MemoryEvents(**{c: arrays[f"memory.{c}"] for c in MEMORY_COLUMNS})
        chunks = None
        if manifest["has_chunks"]:
            chunks = ChunkIndex(**{c: arrays[f"chunks.{c}"] for c in CHUNK_COLUMNS})
        source = Source(**manifest["source"])
        source.path = path
        lengths = {len(arrays[c]) for c in COLUMNS}
        if len(lengths) != 1:
            return None
        trace = Trace(
            source=source,
            header=manifest["header"],
            strings=strings,
            **{c: arrays[c] for c in COLUMNS},
            lanes=[Lane(**lane) for lane in manifest["lanes"]],
            memory=memory,
            n_events=manifest["n_events"],
            by_phase=manifest["by_phase"],
            by_category=manifest["by_category"],
            slice_start_min=manifest["slice_start_min"],
            slice_end_max=manifest["slice_end_max"],
            complete=manifest["complete"],
            warnings=list(manifest["warnings"]),
            stopped_at=manifest["stopped_at"],
            chunks=chunks,
        )
        trace.from_cache = True  # type: ignore[attr-defined]
        return trace
    except (OSError, ValueError, KeyError, TypeError, msgspec.DecodeError):
        return None
