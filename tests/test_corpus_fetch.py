"""tests/corpus/fetch.py: the corpus rebuilt from its sources, offline against a local folder that
stands in for the repositories; and the source table agrees with the corpus the tests read."""

import gzip
import hashlib
import io
import json
import sys
import tarfile

import pytest
from conftest import CORPUS, REPO

sys.path.insert(0, str(REPO / "tests" / "corpus"))
import fetch  # noqa: E402


def _trace(n: int) -> bytes:
    events = [
        {"ph": "X", "name": f"op{i}", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(n)
    ]
    return json.dumps({"traceEvents": events}).encode()


def _source(local, path, form, data, repo="owner/repo", commit="c" * 40):
    return fetch.Source(
        local, repo, path, commit, form, len(data), hashlib.sha256(data).hexdigest()
    )


@pytest.fixture
def mirror(tmp_path):
    """A folder laid out as OWNER/REPO/COMMIT/PATH with a plain, a gzip'd and a tarred trace."""
    root = tmp_path / "mirror"
    base = root / "owner" / "repo" / ("c" * 40)
    base.mkdir(parents=True)
    plain, zipped, member = _trace(3), _trace(5), _trace(7)
    (base / "plain.json").write_bytes(plain)
    (base / "zipped.json.gz").write_bytes(gzip.compress(zipped))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("bundle/worker0.json")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    (base / "bundle.tar.gz").write_bytes(buf.getvalue())
    sources = [
        _source("a/plain.json.gz", "plain.json", "json", plain),
        _source("a/zipped.json.gz", "zipped.json.gz", "gzip", zipped),
        _source("job/worker0.json.gz", "bundle.tar.gz", "tar:bundle/worker0.json", member),
    ]
    return root, sources, {"plain": plain, "zipped": zipped, "member": member}


def test_every_form_is_fetched_checked_and_written_gzipd(mirror, tmp_path):
    root, sources, data = mirror
    dest = tmp_path / "corpus"
    out = io.StringIO()
    assert fetch.fetch_all(dest, root, out=out, sources=sources) == 0
    assert gzip.decompress((dest / "a/plain.json.gz").read_bytes()) == data["plain"]
    assert gzip.decompress((dest / "a/zipped.json.gz").read_bytes()) == data["zipped"]
    assert gzip.decompress((dest / "job/worker0.json.gz").read_bytes()) == data["member"]
    assert out.getvalue().count("fetched") == 3
    # A second run finds everything in place and fetches nothing.
    again = io.StringIO()
    assert fetch.fetch_all(dest, root, out=again, sources=sources) == 0
    assert again.getvalue().count("ok") == 3 and "fetched" not in again.getvalue()


def test_a_file_that_does_not_match_its_hash_is_not_written(mirror, tmp_path):
    root, sources, _ = mirror
    wrong = fetch.Source(**{**sources[0].__dict__, "sha256": "0" * 64})
    dest = tmp_path / "corpus"
    out = io.StringIO()
    assert fetch.fetch_all(dest, root, out=out, sources=[wrong, sources[1]]) == 1
    assert "FAILED  a/plain.json.gz: content differs" in out.getvalue()
    assert not (dest / "a/plain.json.gz").exists()
    assert (dest / "a/zipped.json.gz").exists()
    assert not list(dest.rglob(".fetch-*"))


def test_a_damaged_local_copy_is_fetched_again(mirror, tmp_path):
    root, sources, data = mirror
    dest = tmp_path / "corpus"
    (dest / "a").mkdir(parents=True)
    (dest / "a/plain.json.gz").write_bytes(b"not gzip")
    assert fetch.fetch_all(dest, root, out=io.StringIO(), sources=sources[:1]) == 0
    assert gzip.decompress((dest / "a/plain.json.gz").read_bytes()) == data["plain"]


def test_missing_sources_and_members_fail_in_one_line_each(mirror, tmp_path):
    root, sources, _ = mirror
    gone = fetch.Source(**{**sources[0].__dict__, "path": "nowhere.json"})
    no_member = fetch.Source(**{**sources[2].__dict__, "form": "tar:bundle/worker9.json"})
    out = io.StringIO()
    assert fetch.fetch_all(tmp_path / "c", root, out=out, sources=[gone, no_member]) == 2
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(line.startswith("FAILED") for line in lines)
    assert "holds no bundle/worker9.json" in lines[1]


def test_an_oversized_download_is_refused(mirror, tmp_path, monkeypatch):
    root, sources, _ = mirror
    monkeypatch.setattr(fetch, "MAX_DOWNLOAD", 10)
    out = io.StringIO()
    assert fetch.fetch_all(tmp_path / "c", root, out=out, sources=sources[:1]) == 1
    assert "larger than 10 bytes" in out.getvalue()


def test_the_table_lists_every_corpus_file_with_its_content():
    if not CORPUS.is_dir():
        pytest.skip("the corpus is absent (tests/corpus/fetch.py fetches it)")
    sources = fetch.read_sources()
    on_disk = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.json.gz"))
    assert sorted(s.local for s in sources) == on_disk
    assert all(fetch.present(s, CORPUS) for s in sources)
