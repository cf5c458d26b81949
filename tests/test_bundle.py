"""`kinetoscope summary job.zip` (and `view job.zip`): a bundle kinetoscope wrote with `export
RUN_DIR -o job.zip` is read as the job of its ranks; any other zip, and a hostile one, gets a
one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import CORPUS
from kinetoscope.parser import bundle as bundle_module
from kinetoscope.parser.bundle import MANIFEST_NAME, BundleError, open_bundle
from test_export_job import export, write_job

from kinetoscope.commands.summary import run_job_summary

DLRM = CORPUS / "multirank" / "dlrm_8rank"


def kinetoscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def unzipped_document(out: Path, folder: Path) -> dict:
    """The job document of the bundle's rank files extracted by hand into `folder`, with its
    paths written as the bundle's (`job.zip:rank0.json`)."""
    with zipfile.ZipFile(out) as archive:
        for name in archive.namelist():
            if name != MANIFEST_NAME:
                archive.extract(name, folder)
    result = kinetoscope("summary", folder, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.replace(f"{folder}{os.sep}", f"{out}:"))


def same_but_timings(a: dict, b: dict) -> None:
    for document in (a, b):
        for rank in document["ranks"]:
            rank.pop("digest_seconds")
    assert a == b


def test_summary_of_a_synthetic_jobs_bundle_is_the_summary_of_its_ranks(tmp_path):
    job = write_job(tmp_path / "job")
    out = tmp_path / "job.zip"
    assert export(job, "-o", out, "--step", "1").returncode == 0
    result = kinetoscope("summary", out, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [r["rank"] for r in document["ranks"]] == [0, 1, 2]
    assert [r["path"] for r in document["ranks"]] == [f"{out}:rank{r}.json" for r in range(3)]
    assert document["matching"]["matched"] > 0
    same_but_timings(document, unzipped_document(out, tmp_path / "by_hand"))
    text = kinetoscope("summary", out, "--width", "200")
    assert text.returncode == 0 and "3 files, 3 loaded" in text.stdout
    # Nothing is left in the temporary folder's place.
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("kinetoscope-bundle-")
                and (Path(tempfile.gettempdir()) / p).stat().st_mtime > out.stat().st_mtime]  # fmt: skip


@pytest.mark.corpus
def test_summary_of_the_corpus_dlrm_bundle_names_the_same_straggler(tmp_path):
    if not DLRM.is_dir():
        pytest.skip("../shared/corpus is absent")
    out = tmp_path / "dlrm.zip"
    assert export(DLRM, "-o", out, "--step", "10").returncode == 0
    document = json.loads(kinetoscope("summary", out, "--json").stdout)
    assert [r["rank"] for r in document["ranks"]] == list(range(8))
    assert document["world_size"] == 8 and document["missing"] == []
    folder = json.loads(kinetoscope("summary", DLRM, "--json").stdout)
    assert document["straggler"]["rank"] == folder["straggler"]["rank"] == 7
    assert document["matching"]["matched"] == folder["matching"]["matched"]
    same_but_timings(document, unzipped_document(out, tmp_path / "by_hand"))


def test_view_of_a_bundle_off_a_terminal_says_how_to_read_it(tmp_path):
    job = write_job(tmp_path / "job")
    out = tmp_path / "job.zip"
    assert export(job, "-o", out, "--step", "1").returncode == 0
    result = kinetoscope("view", out)
    assert result.returncode == 1
    assert result.stderr.strip().endswith(f"for a text report run: kinetoscope summary {out}")


# -- hostile archives ------------------------------------------------------------------------------


def make_zip(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def manifest(ranks: list[dict], **record) -> bytes:
    body = {"perfetto_manifest": {"version": 1, "files": []},
            "kinetoscope": {"version": 1, "ranks": ranks, **record}}  # fmt: skip
    return json.dumps(body).encode()


TRACE = json.dumps(
    {"distributedInfo": {"rank": 0, "world_size": 1},
     "traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}
).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ({"a.json": TRACE}, "without a Perfetto manifest"),
        ({MANIFEST_NAME: b'{"perfetto_manifest": {"version": 1, "files": []}}'},
         "that kinetoscope did not write"),
        ({MANIFEST_NAME: b"{not json"}, "its manifest is not JSON"),
        ({MANIFEST_NAME: manifest([{"rank": 0, "file": "gone.json"}])}, "not in the archive"),
        ({MANIFEST_NAME: manifest([{"rank": "0", "file": "a.json"}]), "a.json": TRACE},
         "not a rank number"),
        ({MANIFEST_NAME: manifest([{"rank": 0, "file": "a.json"}, {"rank": 0, "file": "b.json"}]),
          "a.json": TRACE, "b.json": TRACE}, "rank 0 twice"),
        ({MANIFEST_NAME: manifest([{"rank": 0, "file": None, "left_out": "x"}])},
         "holds no rank's trace"),
    ],
)  # fmt: skip
def test_a_zip_that_is_not_our_bundle_gets_one_line(tmp_path, members, says):
    out = make_zip(tmp_path / "x.zip", members)
    result = kinetoscope("summary", out)
    assert result.returncode == 1
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_damaged_archives_get_one_line(tmp_path):
    good = make_zip(tmp_path / "good.zip",
                    {MANIFEST_NAME: manifest([{"rank": 0, "file": "r0.json"}]), "r0.json": TRACE})  # fmt: skip
    data = good.read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    start = data.index(b"r0.json") + len(b"r0.json")  # the member's bytes follow its name
    flipped[start + 5] ^= 0xFF
    (tmp_path / "flipped.zip").write_bytes(bytes(flipped))
    for name in ("cut.zip", "flipped.zip"):
        result = kinetoscope("summary", tmp_path / name)
        assert result.returncode == 1, name
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_member_names_never_reach_outside_the_folder(tmp_path):
    """A member named `../../escape.json` is read under a name of our own, inside the private
    folder, never by its own path."""
    evil = "../../escape.json"
    out = make_zip(tmp_path / "evil.zip",
                   {MANIFEST_NAME: manifest([{"rank": 0, "file": evil}]), evil: TRACE})  # fmt: skip
    with open_bundle(str(out), scratch=str(tmp_path)) as opened:
        target = opened.members[evil]
        assert os.path.dirname(target) == opened.folder
        assert os.path.basename(target) == "rank0.json"
    assert not (tmp_path.parent / "escape.json").exists()
    assert not (tmp_path / "escape.json").exists()
    assert not any(p.name.startswith("kinetoscope-bundle-") for p in tmp_path.iterdir())


def test_a_zip_bomb_stops_at_the_cap_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    bomb = b"[" + b" " * (8 << 20) + b"]"  # 8 MiB of spaces: deflates to a few KiB
    out = make_zip(tmp_path / "bomb.zip",
                   {MANIFEST_NAME: manifest([{"rank": 0, "file": "r0.json"}]), "r0.json": bomb})  # fmt: skip
    assert out.stat().st_size < 100_000
    monkeypatch.setattr(bundle_module, "EXPAND_FLOOR", 1 << 20)
    monkeypatch.setattr(bundle_module, "EXPAND_RATIO", 10)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(BundleError, match="expands past the limit"):
        with open_bundle(str(out)):
            pass
    assert not any(p.name.startswith("kinetoscope-bundle-") for p in tmp_path.iterdir())
    assert run_job_summary([str(out)]) == 1
    assert "expands past the limit" in capsys.readouterr().err
    # Too many members, and two of one name.
    monkeypatch.setattr(bundle_module, "MAX_MEMBERS", 2)
    many = make_zip(tmp_path / "many.zip", {MANIFEST_NAME: b"{}", "a": b"", "b": b""})
    with pytest.raises(BundleError, match="more than 2 members"):
        with open_bundle(str(many)):
            pass
    monkeypatch.setattr(bundle_module, "MAX_MEMBERS", 1 << 16)
    twice = tmp_path / "twice.zip"
    with zipfile.ZipFile(twice, "w") as archive:
        archive.writestr(MANIFEST_NAME, manifest([{"rank": 0, "file": "a.json"}]))
        with pytest.warns(UserWarning):
            archive.writestr("a.json", TRACE)
            archive.writestr("a.json", TRACE)
    with pytest.raises(BundleError, match="two members of one name"):
        with open_bundle(str(twice)):
            pass


def test_random_damage_to_a_bundle_is_a_bundle_error_or_a_bundle(tmp_path):
    """Bytes of a real bundle flipped, cut or repeated at random: `open_bundle` either reads it
    or raises BundleError (one line), never anything else, and leaves no folder behind."""
    import random

    job = write_job(tmp_path / "job")
    out = tmp_path / "job.zip"
    assert export(job, "-o", out, "--step", "1").returncode == 0
    data = out.read_bytes()
    rng = random.Random(26)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outcomes = {"read": 0, "refused": 0}
    for trial in range(60):
        damaged = bytearray(data)
        kind = trial % 3
        if kind == 0:
            for _ in range(rng.randint(1, 8)):
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            damaged = damaged[: rng.randrange(len(damaged))]
        else:
            at = rng.randrange(len(damaged))
            damaged[at:at] = damaged[max(0, at - 200) : at]
        path = tmp_path / f"d{trial}.zip"
        path.write_bytes(bytes(damaged))
        try:
            with open_bundle(str(path), scratch=str(scratch)) as opened:
                assert all(os.path.dirname(p) == opened.folder for p in opened.members.values())
            outcomes["read"] += 1
        except BundleError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0
    assert list(scratch.iterdir()) == []
