"""On-disk cache of a loaded Trace: plain .npy arrays, memory-mapped on reopen, never pickle.

A cache entry lives in its own folder under the user's cache directory (never next to the trace),
named by a hash of the trace's absolute path. Its manifest records the trace's key (path, size,
mtime, and what a user cannot set: device, inode, ctime) and the cache format version, plus, for
every array file, its size, CRC-32, dtype and shape and its identity as written (inode, mtime,
ctime), and carries a hash of itself. Nothing in an entry is trusted: the manifest must have its
exact shape and types and match its hash, every file must be a regular file (opened without
blocking) with the identity recorded, every .npy header must be well formed and agree with the
manifest; an entry that fails any check is ignored (and rebuilt by whoever writes caches).
Entries are written to a temporary folder and renamed into place, so a crash leaves no half
entry. Each array file is written from the array's own buffer, and its CRC-32 is computed from
the blocks as they are written (the file is never read back to checksum it).

The rule of the checks: opening an entry costs the same at any size. Before anything is mapped,
each array file's identity is compared with the one recorded after it was written (size, inode,
mtime, ctime: no write, truncation, copy or replacement keeps all four, and no user can set a
ctime back), and its .npy header is read (a few hundred bytes): so a file written to after the
entry was made is refused before any of its data is used. The CRC-32 of every byte is the check
that reads everything: `load(verify=True)` (the default: `summary`, whose own work reads every
row anyway) checks it before returning; `load(verify=False)` (the viewer) leaves it to
`check(trace)`, which the viewer runs in the background after its first frame; a failure there
removes the entry, and the viewer says so and reads the trace again from its JSON, so that no
data of a rejected entry is used from then on. Extras (`save_extra`) follow the same rule.

Only the cache's owner is trusted, as ssh and git trust their files: an entry is used only when
the cache root, the entry's folder and every file of it are owned by the current user and are
not writable by group or others (a shared or world-writable KINETOSCOPE_CACHE_DIR would let
another user plant an entry with a matching key, manifest and CRCs). Anything else is ignored
with one warning line on stderr, and the trace is read; a cache root that is not trusted is
never written into either (said once). A root the cache makes is private (0700), and so are the
entries and files it writes (0700 folders, 0600 files, whatever the umask).
"""

from __future__ import annotations

import ast
import hashlib
import mmap
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np

from .model import (
    MEMORY_COLUMNS,
    ROW_COLUMNS,
    ROW_DTYPES,
    ChunkIndex,
    Lane,
    MemoryEvents,
    Source,
    Trace,
)

FORMAT_VERSION = 3
COLUMNS = ROW_COLUMNS
CHUNK_COLUMNS = ("offset", "length", "first_ordinal")
STRING_FILES = ("strings.offsets", "strings.blob")
# Traces smaller than this load faster than the cache pays back; they are not cached.
MIN_CACHED_BYTES = 8 << 20
MANIFEST = "manifest.json"
# A manifest holds the header, lanes and warnings: far less than this even for huge traces.
MAX_MANIFEST_BYTES = 256 << 20
MAX_NPY_HEADER = 1 << 16
_HEADER_READ = 512  # bytes read first for a .npy header (more only if its length says so)
# Never block on a FIFO or a device, never follow a link planted in an entry.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_CHECK_PREFIX = b'{"check":"'
_CHECK_INFIX = b'","body":'
_CHECK_HEX = 32  # blake2b, 16 bytes
_BODY_START = len(_CHECK_PREFIX) + _CHECK_HEX + len(_CHECK_INFIX)

_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]*")  # no folder, no hidden file
_LANE_ID_TYPES = {int, str, type(None)}  # pid and tid as the parser gives them

Count = Annotated[int, msgspec.Meta(ge=0)]


class Key(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """What a cache entry must match: the trace file as it is now."""

    path: str
    size: Count
    mtime_ns: int
    ctime_ns: int  # changed by every write, utime and rename; no user can set it back
    ino: Count
    dev: Count
    format: int


class FileFacts(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One array file as written: its size and CRC-32, the dtype and shape of its header, and its
    identity once written (inode, mtime, ctime: any later write changes one of them)."""

    bytes: Count
    crc32: Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
    dtype: str
    shape: tuple[Count, ...]
    ino: Count
    mtime_ns: int
    ctime_ns: int

    def same_file(self, st: os.stat_result) -> bool:
        """Whether `st` is this file as it was written (a constant-time check: no byte read)."""
        return (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns) == (
            self.bytes,
            self.ino,
            self.mtime_ns,
            self.ctime_ns,
        )


class Unchecked(msgspec.Struct, frozen=True):
    """Array files mapped without their CRCs read (`load(verify=False)`): `check` reads them,
    and removes `entry` (the trace's entry folder) if one does not match."""

    folder: str
    files: dict[str, FileFacts]
    entry: str


class Manifest(msgspec.Struct, forbid_unknown_fields=True):
    key: Key
    files: dict[str, FileFacts]
    header: dict[str, Any]
    lanes: list[Lane]
    n_events: Count
    by_phase: dict[str, Count]
    by_category: dict[str, Count]
    slice_start_min: int | None
    slice_end_max: int | None
    complete: bool
    warnings: list[str]
    stopped_at: Count | None
    source: Source
    has_chunks: bool


class ExtraManifest(msgspec.Struct, forbid_unknown_fields=True):
    key: Key
    version: int
    files: dict[str, FileFacts]


class Untrusted(OSError):
    """A cache file or folder that another user owns or may write: never used."""


_WARNED: set[str] = set()


def _uid() -> int:
    """The user whose cache entries are trusted (the tests fake another one)."""
    return os.geteuid() if hasattr(os, "geteuid") else -1


def _shown(path: Path | str) -> str:
    """A path fit for one line of stderr: unprintable characters as `?`."""
    return "".join(c if c.isprintable() else "?" for c in str(path))


def _warn_once(message: str) -> None:
    """One warning line on stderr, once per process and message; not from worker processes
    (a job's digests): the process that started them says it (`warn_if_untrusted`), once."""
    if message in _WARNED:
        return
    _WARNED.add(message)
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        return
    try:
        print(f"kinetoscope: warning: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):  # nowhere to say it
        pass


def _trust_problem(st: os.stat_result, what: str) -> str | None:
    """Why a cache file or folder with this status is not to be trusted, or None."""
    if _uid() >= 0 and st.st_uid != _uid():
        return f"{what} is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _check_root(root: Path) -> bool:
    """Whether the cache root exists; Untrusted when it is not the user's own and private
    from writers (FileNotFoundError never: a missing root just holds no entry)."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"the model cache folder {_shown(root)} is not a folder")
    problem = _trust_problem(st, f"the model cache folder {_shown(root)}")
    if problem is not None and st.st_uid == _uid() and root == _default_root():
        try:  # the default folder, the user's own, made by an older version: made private
            os.chmod(root, 0o700)
            problem = None
        except OSError:
            pass
    if problem is not None:
        raise Untrusted(problem)
    return True


def _check_folder(folder: Path, what: str) -> None:
    """An entry's folder (or its extra's) must be a folder, no link, the user's own and not
    writable by others; Untrusted otherwise (FileNotFoundError: there is none)."""
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{what} is not a folder")
    problem = _trust_problem(st, what)
    if problem is not None:
        raise Untrusted(problem)


def _entry_folder(path: str, root: Path | None) -> Path:
    """The entry folder of `path`, checked (the root, then the folder) before anything in it
    is opened: Untrusted, or FileNotFoundError when there is no entry."""
    root = root or cache_root()
    if not _check_root(root):
        raise FileNotFoundError(str(root))
    folder = entry_dir(path, root)
    _check_folder(folder, f"the model cache entry of {_shown(os.path.basename(path))}")
    return folder


def _ignored(error: Untrusted) -> None:
    _warn_once(f"{error}: the cache entry is not used, the trace is read")


def warn_if_untrusted(path: str) -> None:
    """Say now (one line on stderr) if the cache folder or the entry folder of `path` is not
    to be trusted: for a program about to hand the terminal to a UI, which would hide the
    line the load says. Costs two `stat` calls; nothing is read."""
    try:
        _entry_folder(path, None)
    except Untrusted as error:
        _ignored(error)
    except (OSError, ValueError):
        pass


def cache_root() -> Path:
    """KINETOSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/kinetoscope, else ~/.cache/kinetoscope."""
    explicit = os.environ.get("KINETOSCOPE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return _default_root()


def _default_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kinetoscope"


def trace_key(path: str) -> Key:
    """What a cache entry must match: the trace file as it is now."""
    st = os.stat(path)
    return Key(
        path=os.path.abspath(path),
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        ino=st.st_ino,
        dev=st.st_dev,
        format=FORMAT_VERSION,
    )


def identity(path: str) -> Key | None:
    """The key of `path` before it is read (None if it cannot be stat'ed): a cache entry is
    written only if the file still has it afterwards."""
    try:
        return trace_key(path)
    except (OSError, ValueError):
        return None


def entry_dir(path: str, root: Path | None = None) -> Path:
    digest = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogatepass")).hexdigest()
    return (root or cache_root()) / digest[:32]


def _fd_crc(fd: int, size: int) -> int:
    """CRC-32 of a descriptor's first `size` bytes (read, not mapped: no pages stay resident)."""
    crc = 0
    offset = 0
    while offset < size:
        block = os.pread(fd, min(8 << 20, size - offset), offset)
        if not block:
            raise OSError("the file is shorter than its size")
        crc = zlib.crc32(block, crc)
        offset += len(block)
    return crc


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """A descriptor of `path` if it is a regular file: opened without blocking (a FIFO or a
    device never hangs the load), a link never followed."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path.name}: not a regular file")
        problem = _trust_problem(st, f"the model cache file {_shown(path)}")
        if problem is not None:
            raise Untrusted(problem)
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def _read_small(path: Path, limit: int) -> bytes:
    """The whole content of a regular file of at most `limit` bytes."""
    fd, st = _open_regular(path)
    try:
        if st.st_size > limit:
            raise OSError(f"{path.name}: too big")
        parts = []
        remaining = st.st_size + 1  # one byte more: a file that grew is noticed
        while remaining > 0 and (part := os.read(fd, remaining)):
            parts.append(part)
            remaining -= len(part)
        data = b"".join(parts)
        if len(data) != st.st_size:
            raise OSError(f"{path.name}: changed while read")
        return data
    finally:
        os.close(fd)


def manifest_bytes(body: Any) -> bytes:
    """The manifest file for `body`: `{"check":"<hash of body>","body":<body>}`, the hash over
    the body's exact bytes, so that no edit of any field goes unnoticed."""
    encoded = msgspec.json.encode(body)
    check = hashlib.blake2b(encoded, digest_size=_CHECK_HEX // 2).hexdigest().encode()
    return _CHECK_PREFIX + check + _CHECK_INFIX + encoded + b"}"


def manifest_body(data: bytes) -> bytes | None:
    """The body of a manifest file's bytes if its hash matches, else None."""
    if not (data.startswith(_CHECK_PREFIX) and data.endswith(b"}")) or len(data) <= _BODY_START:
        return None
    if data[len(_CHECK_PREFIX) + _CHECK_HEX : _BODY_START] != _CHECK_INFIX:
        return None
    body = data[_BODY_START:-1]
    check = hashlib.blake2b(body, digest_size=_CHECK_HEX // 2).hexdigest().encode()
    return body if check == data[len(_CHECK_PREFIX) : len(_CHECK_PREFIX) + _CHECK_HEX] else None


def _read_manifest(folder: Path, kind: type[Any]) -> Any:
    """The folder's manifest, decoded into `kind` (strict: every field, every type), or None."""
    body = manifest_body(_read_small(folder / MANIFEST, MAX_MANIFEST_BYTES))
    if body is None:
        return None
    return msgspec.json.decode(body, type=kind)


def _remove_abandoned(folder: Path, age_s: float = 3600) -> None:
    """Delete half-written entries that a killed process left behind (never valid anyway)."""
    now = time.time()
    for child in folder.iterdir():
        if child.name.startswith((".tmp-", ".old-")):
            try:
                if now - child.lstat().st_mtime > age_s:
                    shutil.rmtree(child, ignore_errors=True)
            except OSError:
                continue


def _key_of_loaded(trace: Trace) -> Key | None:
    """The cache key of the trace's file, or None if the file changed after it was read (the
    model is not of it any more): the key taken before the read (`cache_key`, set by
    `parser.load`) must still hold, and the size and mtime the reader saw."""
    key = trace_key(trace.source.path)
    if (key.size, key.mtime_ns) != (trace.source.bytes, trace.source.mtime_ns):
        return None
    before = trace.cache_key
    if before is not None and before != key:
        return None
    return key


def _publish(target: Path, arrays: dict[str, np.ndarray], manifest: dict[str, Any]) -> bool:
    """Write the arrays and their manifest to a temporary folder next to `target`, then rename
    it into place (replacing an older one): never a half-written folder, not even on Ctrl-C.
    False when it could not be written."""
    parent = target.parent
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
    try:
        encoded = manifest_bytes({**manifest, "files": _write_arrays(work, arrays)})
        if len(encoded) > MAX_MANIFEST_BYTES:
            raise ValueError("manifest too big to be read back")
        (work / MANIFEST).write_bytes(encoded)
        os.chmod(work / MANIFEST, 0o600)
        old = None
        if os.path.lexists(target):
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
        try:
            if not _check_root(target.parent):
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                _check_root(target.parent)  # made by another user just now: not written into
        except Untrusted as error:
            _warn_once(f"{error}: no cache entry is written there")
            return None
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


def _write_arrays(folder: Path, arrays: dict[str, np.ndarray]) -> dict[str, FileFacts]:
    files = {}
    for name, array in arrays.items():
        file = folder / f"{name}.npy"
        crc = _write_npy(file, np.ascontiguousarray(array))
        st = file.stat()
        files[name] = FileFacts(
            st.st_size,
            crc,
            array.dtype.str,
            array.shape,
            ino=st.st_ino,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
        )
    return files


_WRITE_BLOCK = 4 << 20  # bytes written (and checksummed, still in the CPU's cache) at a time


def _npy_header_bytes(array: np.ndarray) -> bytes:
    """The .npy header `np.save` writes for `array` (format 1.0, which every 1-D array of
    ours fits; numpy raises otherwise)."""
    from io import BytesIO

    from numpy.lib import format as npy_format

    head = BytesIO()
    npy_format.write_array_header_1_0(head, npy_format.header_data_from_array_1_0(array))
    return head.getvalue()


def _write_npy(file: Path, array: np.ndarray) -> int:
    """Write the C-contiguous `array` to a new `file`, byte for byte as `np.save` does, the
    owner's alone (0600, whatever the umask); its CRC-32. The CRC is computed from the bytes as
    they are written, block by block from the array's own buffer (no copy, no second pass
    reading the file back)."""
    header = _npy_header_bytes(array)
    crc = zlib.crc32(header)
    data = memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")
    with open(file, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(header)
        for start in range(0, len(data), _WRITE_BLOCK):
            block = data[start : start + _WRITE_BLOCK]
            crc = zlib.crc32(block, crc)
            handle.write(block)
    return crc


def _npy_header(head: bytes) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, offset of the data) from the start of a .npy file, checked as strictly
    as numpy writes it (any version); ValueError for anything else."""
    if head[:6] != b"\x93NUMPY" or len(head) < 10 or head[7] != 0 or head[6] not in (1, 2, 3):
        raise ValueError("not a .npy header")
    major = head[6]
    start = 10 if major == 1 else 12
    length = int.from_bytes(head[8:start], "little")
    if len(head) < start + length:
        raise ValueError("the .npy header is cut short")
    text = head[start : start + length].decode("latin1" if major < 3 else "utf-8")
    fields = ast.literal_eval(text)
    if not isinstance(fields, dict) or set(fields) != {"descr", "fortran_order", "shape"}:
        raise ValueError("not a .npy header")
    descr, fortran, shape = fields["descr"], fields["fortran_order"], fields["shape"]
    if type(descr) is not str or type(fortran) is not bool or type(shape) is not tuple:
        raise ValueError("not a .npy header")
    if not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("a .npy shape of something else than sizes")
    return np.dtype(descr), shape, start + length


def _map_array(folder: Path, name: str, facts: FileFacts) -> tuple[int, np.ndarray]:
    """One array file memory-mapped read-only, and its open descriptor (the caller closes it),
    if it is a regular file of the recorded size whose header gives the recorded 1-D integer
    array and exactly its bytes; ValueError or OSError otherwise."""
    if not _FILE_NAME.fullmatch(name):
        raise ValueError(f"{name!r}: not a cache file name")
    fd, st = _open_regular(folder / f"{name}.npy")
    try:
        if not facts.same_file(st):
            raise ValueError(f"{name}: not the file recorded (written to since)")
        dtype, shape, offset = _npy_header(_read_header(fd, st.st_size))
        if dtype.str != facts.dtype or shape != facts.shape or len(shape) != 1:
            raise ValueError(f"{name}: not the array recorded")
        if dtype.kind not in "biu" or offset + dtype.itemsize * shape[0] != st.st_size:
            raise ValueError(f"{name}: not the array recorded")
        if shape[0] == 0:
            return fd, np.zeros(0, dtype=dtype)
        # A plain read-only ndarray over the mapping (numpy's memmap subclass is slower to index).
        mapping = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
        return fd, np.frombuffer(mapping, dtype=dtype, count=shape[0], offset=offset)
    except BaseException:
        os.close(fd)
        raise


def _read_header(fd: int, size: int) -> bytes:
    """The first bytes of a .npy file, enough for its header (numpy writes a few hundred)."""
    head = os.pread(fd, min(size, _HEADER_READ), 0)
    if len(head) >= 12 and head[:6] == b"\x93NUMPY":
        start = 10 if head[6] == 1 else 12
        need = start + int.from_bytes(head[8:start], "little")
        if len(head) < need <= min(size, MAX_NPY_HEADER):
            head = os.pread(fd, need, 0)
    return head


def _crcs_match(opened: list[tuple[int, FileFacts]]) -> bool:
    """Every file's CRC-32 as recorded, read from the descriptors that were mapped: two threads
    share the reading (zlib's CRC releases the interpreter's lock), the biggest files first."""
    from concurrent.futures import ThreadPoolExecutor

    ordered = sorted(opened, key=lambda item: -item[1].bytes)
    with ThreadPoolExecutor(max_workers=2) as pool:
        crcs = list(pool.map(lambda item: _fd_crc(item[0], item[1].bytes), ordered))
    return all(crc == facts.crc32 for crc, (_, facts) in zip(crcs, ordered))


def _map_arrays(
    folder: Path, files: dict[str, FileFacts], verify: bool = True
) -> dict[str, np.ndarray] | None:
    """The arrays a manifest lists, memory-mapped; None if any is missing, short, corrupt or not
    what the manifest says. Each file is checked on its own (its header, and its CRC when
    `verify`), through the descriptor it is mapped from."""
    opened: list[tuple[int, FileFacts]] = []
    arrays = {}
    try:
        for name, facts in files.items():
            fd, arrays[name] = _map_array(folder, name, facts)
            opened.append((fd, facts))
        if verify and not _crcs_match(opened):
            return None
        return arrays
    finally:
        for fd, _ in opened:
            os.close(fd)


def _expected_files(has_chunks: bool) -> set[str]:
    names = {*COLUMNS, *(f"memory.{c}" for c in MEMORY_COLUMNS), *STRING_FILES}
    if has_chunks:
        names.update(f"chunks.{c}" for c in CHUNK_COLUMNS)
    return names


def _entry(
    path: str, root: Path | None, verify: bool
) -> tuple[Key, Manifest, dict[str, np.ndarray]] | None:
    """The entry of `path` as it is now, every file checked, or None; raises on damage too."""
    key = trace_key(path)
    folder = _entry_folder(path, root)
    manifest = _read_manifest(folder, Manifest)
    if manifest is None or manifest.key != key:
        return None
    if set(manifest.files) != _expected_files(manifest.has_chunks):
        return None
    for index, lane in enumerate(manifest.lanes):
        if lane.id != index or not {type(lane.pid), type(lane.tid)} <= _LANE_ID_TYPES:
            return None
    arrays = _map_arrays(folder, manifest.files, verify)
    if arrays is None:
        return None
    groups = [COLUMNS, [f"memory.{c}" for c in MEMORY_COLUMNS]]
    if manifest.has_chunks:
        groups.append([f"chunks.{c}" for c in CHUNK_COLUMNS])
    if any(len({len(arrays[name]) for name in group}) != 1 for group in groups):
        return None
    if any(arrays[column].dtype != dtype for column, dtype in ROW_DTYPES.items()):
        return None  # written by a model whose columns had other types
    offsets, blob = arrays["strings.offsets"], arrays["strings.blob"]
    if offsets.dtype.kind not in "iu" or blob.dtype != np.uint8 or len(offsets) == 0:
        return None
    if offsets[0] != 0 or offsets[-1] != len(blob) or np.any(offsets[1:] < offsets[:-1]):
        return None
    return key, manifest, arrays


def has_entry(path: str, root: Path | None = None) -> bool:
    """Whether a valid cache entry with this file's key exists (every file checked but for the
    CRCs of the arrays, which its load reads)."""
    try:
        return _entry(path, root, verify=False) is not None
    except Untrusted as error:
        _ignored(error)
        return False
    except Exception:  # noqa: BLE001 - whatever a damaged entry raises, it is not an entry
        return False


def save_extra(trace: Trace, name: str, version: int, arrays: dict[str, np.ndarray]) -> bool:
    """Keep arrays derived from the model (e.g. the viewer's nesting) in the trace's entry.

    Written only into a valid entry of this very file, in a folder of its own that is renamed
    into place; `load_extra` checks the same key, its version and every file."""
    try:
        target = _entry_folder(trace.source.path, None)
        key = _key_of_loaded(trace)
        manifest = _read_manifest(target, Manifest)
        if key is None or manifest is None or manifest.key != key:
            return False
        _remove_abandoned(target)
        return _publish(target / f"extra-{name}", arrays, {"key": key, "version": version})
    except Untrusted as error:
        _warn_once(f"{error}: nothing is written into it")
        return False
    except (OSError, ValueError, msgspec.MsgspecError):
        return False


def load_extra(
    trace: Trace, name: str, version: int, verify: bool | None = None
) -> dict[str, np.ndarray] | None:
    """The arrays `save_extra` kept for this trace file as it is now, or None. `verify`: read
    their CRCs now; by default, only if the trace's own were (a trace loaded with
    `verify=False` gets the extra's files added to what `check` reads)."""
    lazy = trace.cache_unchecked is not None if verify is None else not verify
    try:
        folder = _entry_folder(trace.source.path, None) / f"extra-{name}"
        _check_folder(folder, f"the view cache of {_shown(os.path.basename(trace.source.path))}")
        extra = _read_manifest(folder, ExtraManifest)
        if extra is None or extra.key != trace_key(trace.source.path) or extra.version != version:
            return None
        arrays = _map_arrays(folder, extra.files, verify=not lazy)
        if arrays is not None and lazy:
            trace.cache_unchecked = [
                *(trace.cache_unchecked or []),
                Unchecked(str(folder), extra.files, entry=str(folder.parent)),
            ]
        return arrays
    except Untrusted as error:
        _ignored(error)
        return None
    except Exception:  # noqa: BLE001 - whatever a damaged entry raises, it is computed again
        return None


def load(path: str, root: Path | None = None, verify: bool = True) -> Trace | None:
    """The cached Trace for `path`, memory-mapped, or None when there is no valid entry.
    `verify=False`: every check but the CRCs, which `check(trace)` reads later (see the module
    docstring): the cost of the load then does not grow with the trace."""
    try:
        return _load(path, root, verify)
    except Untrusted as error:
        _ignored(error)
        return None
    except Exception:  # noqa: BLE001 - whatever a damaged entry raises, the trace is parsed
        return None


def _load(path: str, root: Path | None, verify: bool) -> Trace | None:
    found = _entry(path, root, verify)
    if found is None:
        return None
    key, manifest, arrays = found
    offsets = arrays.pop("strings.offsets").tolist()
    blob = bytes(arrays.pop("strings.blob"))
    strings = [
        blob[a:b].decode("utf-8", "surrogatepass") for a, b in zip(offsets[:-1], offsets[1:])
    ]
    memory = MemoryEvents(**{c: arrays[f"memory.{c}"] for c in MEMORY_COLUMNS})
    chunks = None
    if manifest.has_chunks:
        chunks = ChunkIndex(**{c: arrays[f"chunks.{c}"] for c in CHUNK_COLUMNS})
    source = manifest.source
    source.path = path
    columns: dict[str, Any] = {c: arrays[c] for c in COLUMNS}
    trace = Trace(
        source=source,
        header=manifest.header,
        strings=strings,
        **columns,
        lanes=manifest.lanes,
        memory=memory,
        n_events=manifest.n_events,
        by_phase=manifest.by_phase,
        by_category=manifest.by_category,
        slice_start_min=manifest.slice_start_min,
        slice_end_max=manifest.slice_end_max,
        complete=manifest.complete,
        warnings=manifest.warnings,
        stopped_at=manifest.stopped_at,
        chunks=chunks,
    )
    trace.from_cache = True
    trace.cache_key = key
    if not verify:  # mapped on the identity and header checks; `check` reads the CRCs
        folder = str(entry_dir(path, root))
        trace.cache_unchecked = [Unchecked(folder, manifest.files, entry=folder)]
    return trace


def check(trace: Trace) -> bool:
    """Read the CRC-32 of every array file that `load(verify=False)` and `load_extra` mapped
    unchecked for `trace` (each file opened again and required to be the very file mapped: same
    inode, size, mtime and ctime). True if all match (or none was left unchecked). False if any
    does not: the trace's entry is then removed, and its data must not be used any more (the
    viewer reads the trace again). Meant for a background thread once the view is shown."""
    unchecked = trace.cache_unchecked
    if not unchecked:
        return True
    for item in unchecked:
        try:
            good = _files_match(Path(item.folder), item.files)
        except (OSError, ValueError):
            good = False
        if not good:
            for entry in dict.fromkeys(other.entry for other in unchecked):
                _remove_entry(Path(entry))
            return False
    trace.cache_unchecked = None
    return True


def _files_match(folder: Path, files: dict[str, FileFacts]) -> bool:
    for name, facts in sorted(files.items(), key=lambda item: -item[1].bytes):
        if not _FILE_NAME.fullmatch(name):
            return False
        fd, st = _open_regular(folder / f"{name}.npy")
        try:
            if not facts.same_file(st) or _fd_crc(fd, facts.bytes) != facts.crc32:
                return False
        finally:
            os.close(fd)
    return True


def drop(path: str, root: Path | None = None) -> None:
    """Remove the cache entry of `path` (and its extras)."""
    _remove_entry(entry_dir(path, root))


def _remove_entry(target: Path) -> None:
    """Remove an entry folder (renamed out of the way at once, then deleted)."""
    try:
        if not target.is_symlink() and target.is_dir():
            gone = Path(tempfile.mkdtemp(prefix=".old-", dir=target.parent))
            os.rename(target, gone / "entry")
            shutil.rmtree(gone, ignore_errors=True)
        elif os.path.lexists(target):
            os.unlink(target)
    except OSError:
        pass
