"""The model cache trusts only its owner (issue 25): an entry is used only when the cache root,
the entry's folder and every file of it belong to the current user and no one else may write
them. Another user's entry (planted in a shared KINETOSCOPE_CACHE_DIR with a matching key,
manifest and CRCs) is ignored with one warning line, and the trace is read instead."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kinetoscope.parser import Trace, cache, load

NOBODY = 65534
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _document(op: str) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 7, "tid": 8,
         "ts": 0, "dur": 1000},
    ]  # fmt: skip
    for i in range(20):
        events.append(
            {"ph": "X", "name": op, "cat": "cpu_op", "pid": 7, "tid": 8, "ts": 10 + 40 * i,
             "dur": 30}
        )  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": events}


def _write(path: Path, op: str) -> Path:
    path.write_text(json.dumps(_document(op)))
    return path


@pytest.fixture(autouse=True)
def _fresh_warnings():
    cache._WARNED.clear()
    yield
    cache._WARNED.clear()


@pytest.fixture
def trace_path(tmp_path: Path) -> Path:
    return _write(tmp_path / "a.json", "aten::mine")


def _saved(path: Path, root: Path | None = None) -> tuple[Trace, Path]:
    trace = load(str(path), use_cache=False, workers=1)
    entry = cache.save(trace, root)
    assert entry is not None
    return trace, entry


def _root() -> Path:
    return cache.cache_root()


def _one_warning(capsys, *words: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kinetoscope: warning: "), err
    for word in words:
        assert word in err, err
    return err


# -- the owner's own entry ---------------------------------------------------------------------


def test_the_owners_entry_is_used_without_a_word(trace_path, capsys):
    _saved(trace_path)
    cached = cache.load(str(trace_path))
    assert cached is not None and cached.from_cache
    assert cache.has_entry(str(trace_path))
    assert capsys.readouterr().err == ""


def test_entries_are_private_whatever_the_umask(tmp_path, trace_path, monkeypatch):
    monkeypatch.delenv("KINETOSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = os.umask(0)
    try:
        _, entry = _saved(trace_path)
    finally:
        os.umask(old)
    root = tmp_path / "xdg" / "kinetoscope"
    assert entry.parent == root
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.stat().st_mode) == 0o700
    modes = {stat.S_IMODE(f.stat().st_mode) for f in entry.iterdir()}
    assert modes == {0o600}
    assert cache.load(str(trace_path)) is not None  # and it is used


def test_the_default_folder_made_group_writable_before_is_made_private(tmp_path, monkeypatch):
    monkeypatch.delenv("KINETOSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "xdg" / "kinetoscope"
    root.mkdir(parents=True)
    root.chmod(0o775)  # as an older version made it under umask 002
    path = _write(tmp_path / "a.json", "aten::mine")
    _saved(path)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert cache.load(str(path)) is not None


# -- writable by others ----------------------------------------------------------------------------


def test_a_world_writable_entry_folder_is_ignored(trace_path, capsys):
    _, entry = _saved(trace_path)
    entry.chmod(0o777)
    assert cache.load(str(trace_path)) is None
    assert not cache.has_entry(str(trace_path))
    _one_warning(capsys, "writable by other users", "a.json", "not used")
    assert not load(str(trace_path), workers=1).from_cache  # the trace is read


def test_a_group_writable_manifest_is_ignored(trace_path, capsys):
    _, entry = _saved(trace_path)
    (entry / cache.MANIFEST).chmod(0o620)
    assert cache.load(str(trace_path)) is None
    _one_warning(capsys, "writable by other users", "manifest.json")


def test_a_writable_array_file_is_refused_by_the_check_itself(tmp_path):
    file = tmp_path / "names.npy"
    file.write_bytes(b"x")
    file.chmod(0o666)
    problem = cache._trust_problem(file.stat(), "the file")
    assert problem is not None and "writable by other users" in problem
    file.chmod(0o644)
    assert cache._trust_problem(file.stat(), "the file") is None


def test_a_world_writable_cache_root_is_neither_read_nor_written(tmp_path, capsys):
    path = _write(tmp_path / "a.json", "aten::mine")
    _saved(path)
    _root().chmod(0o1777)  # a shared folder, as /tmp is
    assert cache.load(str(path)) is None
    _one_warning(capsys, "model cache folder", "writable by other users")
    other = _write(tmp_path / "b.json", "aten::other")
    trace = load(str(other), use_cache=False, workers=1)
    assert cache.save(trace) is None  # nothing written into a folder not trusted
    assert not cache.entry_dir(str(other)).exists()
    _one_warning(capsys, "no cache entry is written there")
    assert cache.save(trace) is None
    assert capsys.readouterr().err == ""  # said once


# -- owned by another user -------------------------------------------------------------------


_REAL_CHECK = cache._trust_problem


def _foreign(monkeypatch, *paths: Path) -> None:
    """Make the trust check see `paths` (by inode) as owned by another user."""
    inodes = {os.lstat(p).st_ino for p in paths}
    real = _REAL_CHECK

    def check(st: os.stat_result, what: str) -> str | None:
        if st.st_ino in inodes:
            fields = list(st[:10])
            fields[4] = cache._uid() + 1  # st_uid
            st = os.stat_result(fields)
        return real(st, what)

    monkeypatch.setattr(cache, "_trust_problem", check)


@pytest.mark.parametrize("which", ["folder", "manifest", "array", "root"])
def test_an_entry_owned_by_another_user_is_ignored(trace_path, monkeypatch, capsys, which):
    _, entry = _saved(trace_path)
    target = {
        "folder": entry,
        "manifest": entry / cache.MANIFEST,
        "array": entry / "name.npy",
        "root": entry.parent,
    }[which]
    assert target.exists()
    _foreign(monkeypatch, target)
    assert cache.load(str(trace_path)) is None
    _one_warning(capsys, "owned by another user")
    fresh = load(str(trace_path), workers=1)
    assert not fresh.from_cache
    monkeypatch.setattr(cache, "_trust_problem", _REAL_CHECK)  # (undo would drop the cache dir)
    cache._WARNED.clear()
    assert cache.load(str(trace_path)) is not None  # the very same entry, trusted again


def _plant_as(uid: int | None, victim: Path, donor: Path, staging: Path) -> Path:
    """Another process (as `uid`, or as this user for None) writes the entry of `donor` under
    the key of `victim`, with a manifest and CRCs that match, into `staging`; returns the
    entry folder it wrote."""
    donor_trace = load(str(donor), use_cache=False, workers=1)
    victim_key = cache.trace_key(str(victim))
    pid = os.fork()
    if pid == 0:  # the other user
        code = 1
        try:
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            donor_trace.cache_key = None
            entry = cache.save(donor_trace, staging)
            if entry is not None:
                manifest = entry / cache.MANIFEST
                body = json.loads(cache.manifest_body(manifest.read_bytes()))
                body["key"] = msgspec.to_builtins(victim_key)
                body["source"]["path"] = str(victim)
                manifest.write_bytes(cache.manifest_bytes(body))
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    (entry,) = [p for p in staging.iterdir() if not p.name.startswith(".")]
    return entry


@pytest.mark.skipif(not AS_ROOT, reason="switching to another uid needs root (the faked owner "
                    "tests above run everywhere)")  # fmt: skip
def test_another_users_planted_entry_does_not_change_the_summary(tmp_path):
    shared = Path(tempfile.mkdtemp(prefix="kinetoscope-shared-"))
    try:
        shared.chmod(0o755)
        victim = _write(shared / "A.json", "aten::victim")
        donor = _write(shared / "B.json", "aten::donor")
        for path in (victim, donor):
            path.chmod(0o644)
        root = _root()
        target = cache.entry_dir(str(victim))

        # As this user, the planted entry would be used: B's operators for A.
        mine = shared / "mine"
        mine.mkdir()
        planted = _plant_as(None, victim, donor, mine)
        os.rename(planted, target)
        cached = cache.load(str(victim))
        assert cached is not None and "aten::donor" in cached.strings

        # Written by another user (uid 65534): ignored, A's own operators, one warning.
        shutil.rmtree(target)
        theirs = shared / "theirs"
        theirs.mkdir()
        os.chown(theirs, NOBODY, NOBODY)
        planted = _plant_as(NOBODY, victim, donor, theirs)
        assert os.lstat(planted).st_uid == NOBODY
        os.rename(planted, target)  # into the owner's root, as a shared root would let it be
        assert cache.load(str(victim)) is None
        env = {**os.environ, "KINETOSCOPE_CACHE_DIR": str(root)}
        done = subprocess.run(
            [sys.executable, "-m", "kinetoscope", "summary", str(victim), "--json"],
            capture_output=True,
            timeout=120,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr
        document = done.stdout.decode()
        assert "aten::victim" in document and "aten::donor" not in document
        err = done.stderr.decode()
        assert err.count("kinetoscope: warning:") == 1 and "owned by another user" in err, err
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_the_viewer_can_say_it_before_its_ui_starts(trace_path, capsys):
    _, entry = _saved(trace_path)
    cache.warn_if_untrusted(str(trace_path))
    assert capsys.readouterr().err == ""  # the owner's own: nothing said
    entry.chmod(0o770)
    cache.warn_if_untrusted(str(trace_path))
    _one_warning(capsys, "writable by other users")
    assert cache.load(str(trace_path)) is None
    assert capsys.readouterr().err == ""  # the same line is not said twice
    cache.warn_if_untrusted(str(trace_path.parent / "no-entry.json"))
    assert capsys.readouterr().err == ""


def test_a_jobs_ranks_say_an_untrusted_cache_folder_once(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for rank in range(3):
        _saved(_write(job / f"rank{rank}.json", f"aten::rank{rank}"))
    _root().chmod(0o777)
    done = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", str(job), "--workers", "2"],
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode()
    assert err.count("\n") == 1 and "model cache folder" in err, err  # not once per worker
