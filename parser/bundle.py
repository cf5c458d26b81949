"""A job bundle kinetoscope wrote (`kinetoscope export RUN_DIR -o job.zip`), read back as a job.

The bundle (docs/export-ranks.md) is a zip holding `perfetto_manifest.json` and one Chrome-trace
JSON per exported rank; the manifest's `kinetoscope` record lists the ranks and the member that
holds each. `open_bundle(path)` checks the archive and streams each rank's member into a
private temporary folder, under a name of our own choosing, so that the job's usual discovery
and digests read it as a run folder; the folder is removed when the context ends.

The archive is untrusted: at most `MAX_MEMBERS` members, names unique, the manifest at most
`MAX_MANIFEST_BYTES`, every field of its record type-checked, only members the record names are
read, encrypted members refused, and each member is streamed (never extracted by its own name,
so no path in the archive can reach outside the folder) with a cap on the bytes it expands to
and on the whole (`expand_limit`: a zip bomb stops at the cap with a one-line error). zipfile
checks each member's CRC as it is read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a member first, or an empty archive
MANIFEST_NAME = "perfetto_manifest.json"
MANIFEST_START = b'{"perfetto_manifest"'
MAX_MEMBERS = 1 << 16
MAX_MANIFEST_BYTES = 16 << 20
MAX_RANK = 1 << 24
EXPAND_FLOOR = 1 << 30  # the whole may always expand to 1 GiB ...
EXPAND_RATIO = 100  # ... else to 100 times the archive's size
EXPAND_CEILING = 256 << 30
_CHUNK = 1 << 20
_SAFE_NAME = re.compile(r"^(?!\.)[A-Za-z0-9._-]{1,128}\.json(?:\.gz)?$")
RECORD_VERSION = 1


class BundleError(Exception):
    """The archive is not a bundle kinetoscope wrote, or cannot be read; one line."""


def is_zip(path: str) -> bool:
    """A plain file that starts as a zip archive does."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return False
        with open(path, "rb") as handle:
            return handle.read(4) in ZIP_MAGIC
    except OSError:
        return False


def expand_limit(archive_bytes: int) -> int:
    """How many bytes the members read from an archive of this size may expand to in all."""
    return min(EXPAND_CEILING, max(EXPAND_FLOOR, EXPAND_RATIO * archive_bytes))


@dataclass
class Bundle:
    """A bundle's ranks streamed into `folder` (member name -> path there)."""

    archive: str
    folder: str
    members: dict[str, str] = field(default_factory=dict)  # member -> extracted path
    left_out: list[tuple[int, str]] = field(default_factory=list)  # (rank, why) from the record

    def shown(self, text: str) -> str:
        """A path in the folder as the user knows it: `job.zip:rank3.json`."""
        prefix = self.folder + os.sep
        if text.startswith(prefix):
            return f"{self.archive}:{text[len(prefix) :]}"
        return text.replace(prefix, f"{self.archive}:")


def _record(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], path: str) -> dict:
    """The manifest's `kinetoscope` record (the manifest: `perfetto_manifest.json`, else the
    member whose text starts with `{"perfetto_manifest"`)."""
    by_name = {info.filename: info for info in infos}
    candidates = [by_name[MANIFEST_NAME]] if MANIFEST_NAME in by_name else []
    if not candidates:
        for info in infos:
            if info.is_dir() or info.flag_bits & 0x1:
                continue
            with archive.open(info) as member:
                head = member.read(64)
            if b"".join(head.split()).startswith(MANIFEST_START):
                candidates.append(info)
                break
    if not candidates:
        raise BundleError(f"{path}: a zip without a Perfetto manifest: not a job bundle")
    info = candidates[0]
    if info.flag_bits & 0x1:
        raise BundleError(f"{path}: its manifest is encrypted")
    with archive.open(info) as member:
        data = member.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{path}: its manifest is larger than {MAX_MANIFEST_BYTES >> 20} MiB")
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BundleError(f"{path}: its manifest is not JSON") from None
    if not isinstance(manifest, dict) or "perfetto_manifest" not in manifest:
        raise BundleError(f"{path}: its manifest is not a Perfetto manifest")
    record = manifest.get("kinetoscope")
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        raise BundleError(
            f"{path}: a Perfetto bundle that kinetoscope did not write (its manifest has no "
            "kinetoscope record of version 1)"
        )
    if not isinstance(record.get("ranks"), list):
        raise BundleError(f"{path}: its manifest's kinetoscope record lists no ranks")
    return record


def _ranks(
    record: dict, names: set[str], path: str
) -> tuple[dict[int, str], list[tuple[int, str]]]:
    """rank -> member from the record (checked), and the ranks it says were left out."""
    members: dict[int, str] = {}
    left_out: list[tuple[int, str]] = []
    for item in record["ranks"][:MAX_MEMBERS]:
        if not isinstance(item, dict):
            raise BundleError(f"{path}: its manifest lists a rank that is not an object")
        rank = item.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < MAX_RANK:
            raise BundleError(f"{path}: its manifest lists a rank that is not a rank number")
        if rank in members or any(r == rank for r, _ in left_out):
            raise BundleError(f"{path}: its manifest lists rank {rank} twice")
        member = item.get("file")
        if member is None:
            why = item.get("left_out")
            left_out.append((rank, why[:300] if isinstance(why, str) else "left out"))
            continue
        if not isinstance(member, str) or member not in names:
            raise BundleError(f"{path}: rank {rank}'s file is not in the archive")
        if member in members.values():
            raise BundleError(f"{path}: two ranks in one member ({member[:100]})")
        members[rank] = member
    return members, left_out


def _stream(archive: zipfile.ZipFile, info: zipfile.ZipInfo, target: str, budget: int) -> int:
    """Copy one member to `target` (created, never followed), at most `budget` bytes; the bytes
    written. BundleError past the budget."""
    written = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out, archive.open(info) as member:
        while True:
            chunk = member.read(_CHUNK)
            if not chunk:
                return written
            written += len(chunk)
            if written > budget:
                raise BundleError(
                    f"{info.filename[:100]} expands past the limit of what this archive may "
                    "hold (a zip bomb?)"
                )
            out.write(chunk)


_READ_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    OSError,
    EOFError,
    ValueError,
    NotImplementedError,
    RuntimeError,
)


def _extract(path: str, archive: zipfile.ZipFile, size: int, folder: str) -> Bundle:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise BundleError(f"{path}: more than {MAX_MEMBERS} members: not a job bundle")
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        raise BundleError(f"{path}: two members of one name: not a job bundle")
    record = _record(archive, infos, path)
    by_name = {info.filename: info for info in infos}
    members, left_out = _ranks(record, set(names), path)
    if not members:
        raise BundleError(f"{path}: the bundle holds no rank's trace")
    bundle = Bundle(path, folder, left_out=left_out)
    budget = expand_limit(size)
    taken: set[str] = set()
    for rank, member in sorted(members.items()):
        info = by_name[member]
        if info.is_dir() or info.flag_bits & 0x1:
            raise BundleError(f"{path}: rank {rank}'s member is a folder or encrypted")
        # Written under a name of our own: the member's when it is a plain file name.
        base = member if _SAFE_NAME.match(member) else f"rank{rank}.json"
        if base.lower() in taken:
            base = f"rank{rank}.json"
        taken.add(base.lower())
        target = os.path.join(folder, base)
        try:
            budget -= _stream(archive, info, target, budget)
        except BundleError as exc:
            raise BundleError(f"{path}: {exc}") from None
        except _READ_ERRORS as exc:
            raise BundleError(f"{path}: rank {rank}'s member cannot be read ({exc})") from None
        bundle.members[member] = target
    return bundle


@contextmanager
def open_bundle(path: str, scratch: str | None = None) -> Iterator[Bundle]:
    """Check the bundle at `path` and stream its ranks into a new temporary folder (under
    `scratch`, else the system's); the folder is removed afterwards. BundleError (one line)
    when it is not a bundle kinetoscope wrote or cannot be read."""
    try:
        size = os.stat(path).st_size
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file") from None
    except _READ_ERRORS as exc:
        raise BundleError(f"{path}: not a readable zip archive ({exc})") from None
    folder = tempfile.mkdtemp(prefix="kinetoscope-bundle-", dir=scratch)
    try:
        try:
            with archive:
                bundle = _extract(path, archive, size, folder)
        except BundleError:
            raise
        except _READ_ERRORS as exc:
            raise BundleError(f"{path}: cannot be read as a job bundle ({exc})") from None
        yield bundle
    finally:
        shutil.rmtree(folder, ignore_errors=True)
