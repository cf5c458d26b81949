"""Fetch the real-trace corpus the tests read, from the public repositories it was taken from.

The tests look for real torch.profiler traces in `$KINETOSCOPE_CORPUS` (default: `../shared/corpus`
beside the checkout) and skip the tests that need them when the folder is absent. This script
builds that folder from `sources.tsv` beside it: each file's repository, path and commit, and the
size and SHA-256 of the JSON it holds. Every file is checked against both before it is written, and
written gzip'd under its local name (files kept as gzip upstream are written as they came).

    python tests/corpus/fetch.py                  # into $KINETOSCOPE_CORPUS or ../shared/corpus
    python tests/corpus/fetch.py --dest DIR       # somewhere else (then KINETOSCOPE_CORPUS=DIR)
    python tests/corpus/fetch.py --mirror DIR     # read DIR/OWNER/REPO/COMMIT/PATH, not the web

Files already present with the right content are left alone; a download that is too big, fails
or does not match is reported and nothing is written for it (exit status 1 if any failed).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources.tsv"
DEFAULT_DEST = HERE.parents[2] / "shared" / "corpus"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
# Nothing in the corpus is near this; a source that sends more is not the file we want.
MAX_DOWNLOAD = 256 * 1024 * 1024
MAX_JSON = 512 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    local: str
    repo: str
    path: str
    commit: str
    form: str  # "gzip": stored gzip'd upstream; "json": plain upstream; "tar:MEMBER": in a tarball
    size: int
    sha256: str


def read_sources(table: Path = SOURCES) -> list[Source]:
    rows = []
    for line in table.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        local, repo, path, commit, form, size, digest = line.split("\t")
        rows.append(Source(local, repo, path, commit, form, int(size), digest))
    return rows


def _bounded_read(stream, limit: int, what: str) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{what} is larger than {limit:,} bytes")
    return data


def fetch_bytes(src: Source, mirror: Path | None) -> bytes:
    """The file at the source's repository, path and commit: from a local mirror or the web."""
    if mirror is not None:
        where = mirror / src.repo / src.commit / src.path
        with open(where, "rb") as f:
            return _bounded_read(f, MAX_DOWNLOAD, str(where))
    url = RAW_URL.format(repo=src.repo, commit=src.commit, path=src.path)
    with urllib.request.urlopen(url, timeout=60) as response:
        return _bounded_read(response, MAX_DOWNLOAD, url)


def json_of(src: Source, blob: bytes) -> bytes:
    """The trace's JSON text from what the repository stores."""
    if src.form == "json":
        return blob
    if src.form == "gzip":
        with gzip.GzipFile(fileobj=io.BytesIO(blob)) as g:
            return _bounded_read(g, MAX_JSON, src.path)
    if src.form.startswith("tar:"):
        member = src.form[4:]
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
            names = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
            info = names.get(member)
            if info is None:
                raise ValueError(f"{src.path} holds no {member}")
            extracted = tar.extractfile(info)
            assert extracted is not None  # a regular file always has contents
            return _bounded_read(extracted, MAX_JSON, member)
    raise ValueError(f"unknown form {src.form!r}")


def matches(src: Source, data: bytes) -> bool:
    return len(data) == src.size and hashlib.sha256(data).hexdigest() == src.sha256


def present(src: Source, dest: Path) -> bool:
    target = dest / src.local
    try:
        with gzip.open(target, "rb") as g:
            return matches(src, _bounded_read(g, MAX_JSON, str(target)))
    except (OSError, EOFError, ValueError):
        return False


def write_gzip(target: Path, src: Source, blob: bytes, data: bytes) -> None:
    """Write atomically: a temporary file in the same folder, renamed into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".fetch-", suffix=".gz")
    try:
        with os.fdopen(fd, "wb") as out:
            if src.form == "gzip":
                out.write(blob)
            else:
                out.write(gzip.compress(data, compresslevel=9, mtime=0))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch_all(
    dest: Path, mirror: Path | None, out=sys.stdout, sources: list[Source] | None = None
) -> int:
    """Fetch what is missing; the number of files that could not be had."""
    failed = 0
    blobs: dict[tuple[str, str, str], bytes] = {}  # one tarball serves several files
    for src in read_sources() if sources is None else sources:
        if present(src, dest):
            print(f"ok      {src.local}", file=out)
            continue
        key = (src.repo, src.commit, src.path)
        try:
            if key not in blobs:
                blobs[key] = fetch_bytes(src, mirror)
            data = json_of(src, blobs[key])
            if not matches(src, data):
                raise ValueError(
                    f"content differs from the table ({len(data):,} bytes, "
                    f"sha256 {hashlib.sha256(data).hexdigest()[:12]}...)"
                )
            write_gzip(dest / src.local, src, blobs[key], data)
            print(f"fetched {src.local}", file=out)
        except (OSError, ValueError, tarfile.TarError, EOFError) as exc:
            failed += 1
            print(f"FAILED  {src.local}: {exc}", file=out)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = os.environ.get("KINETOSCOPE_CORPUS") or str(DEFAULT_DEST)
    parser.add_argument("--dest", default=default, help=f"the corpus folder (default: {default})")
    parser.add_argument("--mirror", help="read OWNER/REPO/COMMIT/PATH under this folder instead")
    args = parser.parse_args(argv)
    failed = fetch_all(Path(args.dest), Path(args.mirror) if args.mirror else None)
    if failed:
        print(f"{failed} file(s) could not be fetched", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
