"""Bugs found by using every command on real traces as a new user would (a user pass): each test
here failed before its fix. Corpus traces come from ../shared/corpus and are skipped when absent;
synthetic traces are used where they show the bug as well."""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import stat
from pathlib import Path

import pytest
from conftest import SAMPLES

from kinetoscope.commands.cli import main

SAMPLE = SAMPLES / "synthetic_gpu_training.pt.trace.json.gz"


def test_export_refuses_to_replace_a_file_that_is_not_a_regular_one(tmp_path: Path, capsys):
    """`-o /dev/null` (or a named pipe, a device) was replaced by the crop: the crop is written
    beside the output and renamed over it, so as root `-o /dev/full` turned the device into a
    regular file and said `wrote /dev/full`. It is refused in one line and left as it was."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    code = main(["export", str(SAMPLE), "-o", str(fifo), "--window", ".."])
    err = capsys.readouterr().err
    assert code == 1
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert err.count("\n") == 1 and "not a regular file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.json"]


def test_export_window_may_start_with_a_negative_time(tmp_path: Path, capsys):
    """docs/export.md: "a negative time is before the origin"; `--window -1ms..+1ms` gave
    argparse's `argument --window: expected one argument` (a value starting with `-` is read as
    an option), so only `--window=-1ms..+1ms` worked."""
    out = tmp_path / "crop.json"
    code = main(["export", str(SAMPLE), "-o", str(out), "--window", "-1ms..+1ms"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "window -1ms..+1ms" in captured.out
    assert out.is_file()


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_job_summary_with_no_rank_read_exits_with_an_error(tmp_path: Path, capsys, output):
    """`summary A.json B.json` where neither file can be read printed the job report (every
    rank `not loaded`, a straggler heading over nothing) and exited 0, where one unreadable
    trace exits 1 and `export` of the same files says `no rank could be exported` (1). The
    report still says why each rank was not read; the status and one line say nothing was."""
    bad = tmp_path / "rank0.json"
    bad.write_bytes(b"x\n")
    code = main(["summary", str(bad), str(tmp_path / "rank1.json"), *output])
    captured = capsys.readouterr()
    assert code == 1
    assert "no rank could be read" in captured.err and captured.err.count("\n") == 1
    assert "rank1.json: no such file" in captured.out


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"notgzip", "not JSON: starts with b'notgzip'"),
        (b"false alarm, not a trace", "not JSON: starts with"),
        (b"12 monkeys", "not JSON: starts with"),
        (b"null", "JSON, but neither an object with traceEvents nor an array"),
        (b'"a string"', "JSON, but neither an object with traceEvents nor an array"),
        (b"-12.5e3\n", "JSON, but neither an object with traceEvents nor an array"),
    ],
)
def test_text_that_is_not_json_is_not_called_json(tmp_path: Path, capsys, content, said):
    """A text file starting with n, t, f, a digit, `"` or `-` (`notgzip`, `12 monkeys`) was
    said to be `JSON, but neither an object with traceEvents nor an array`: only a JSON value
    (null, true, false, a number, a string) is called JSON."""
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    assert main(["summary", str(path)]) == 1
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1


@pytest.mark.parametrize("content", [b'{"traceEvents": []}', b"[]"])
def test_export_of_a_trace_without_events_says_so(tmp_path: Path, capsys, content):
    """`export --window ..` of a trace with no events said `the window '..' is empty: its end
    is not after its start`, blaming the window; it says the trace holds no events."""
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    code = main(["export", str(path), "-o", str(tmp_path / "out.json"), "--window", ".."])
    err = capsys.readouterr().err
    assert code == 1
    assert "no events" in err and "window" not in err and err.count("\n") == 1
    assert not (tmp_path / "out.json").exists()


def test_csv_dir_that_is_a_file_is_said_to_be_one(tmp_path: Path, capsys):
    """`summary TRACE --csv DIR` with DIR an existing file said `DIR already exists: remove it
    or give another folder`, as if a table's file were in the way; it says DIR is a file."""
    target = tmp_path / "tables"
    target.write_text("notes\n")
    code = main(["summary", str(SAMPLE), "--csv", str(target)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{target}: a file, not a folder" in err and err.count("\n") == 1
    assert target.read_text() == "notes\n"


@pytest.mark.parametrize(
    "window", ["..+99999999999999999999999999s", "-99999999999999999999s..+1ms"]
)
def test_export_window_too_far_is_one_line(tmp_path: Path, capsys, window):
    """`--window ..+99999999999999999999999999s` ended in an OverflowError traceback (numpy's
    int64 arithmetic on a Python int of 1e35 ns); a time that far is refused in one line."""
    out = tmp_path / "crop.json"
    code = main(["export", str(SAMPLE), "-o", str(out), f"--window={window}"])
    err = capsys.readouterr().err
    assert code == 1
    assert "too large" in err and err.count("\n") == 1
    assert not out.exists()


def test_export_open_window_after_the_trace_says_it_is_outside(tmp_path: Path, capsys):
    """`--window +1000s..` (to the end, starting after it) said `the window is empty: its end
    is not after its start`, though the user gave no end; it says the window lies outside the
    trace, with the trace's span, as a closed window after the trace does."""
    code = main(["export", str(SAMPLE), "-o", str(tmp_path / "c.json"), "--window", "+1000s.."])
    err = capsys.readouterr().err
    assert code == 1
    assert "outside the trace" in err and "empty" not in err and err.count("\n") == 1


def test_diff_says_when_a_trace_was_cut_off(tmp_path: Path, capsys):
    """`diff BASE NEW` with BASE cut off (half its events lost) gave its verdict without a word
    about it, where `summary` shows `incomplete` and the load's warning: the diff now says, on
    stderr, which side was read only in part and why; stdout and the status are unchanged."""
    text = gzip.decompress(SAMPLE.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) // 2])
    code = main(["diff", str(cut), str(SAMPLE), "--format", "text"])
    captured = capsys.readouterr()
    assert code in (0, 3)
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kinetoscope: BASE {cut}: ")
    assert "before the JSON does" in lines[0]
    assert "Verdict" in captured.out


def test_summary_csv_that_fails_midway_leaves_no_files(tmp_path: Path, capsys, monkeypatch):
    """`summary --csv DIR` on a disk that filled up (a 64 KiB tmpfs) said `cannot write` but
    left the tables written so far and the one cut mid-way (16,384 bytes of the gaps), so the
    next try said `already exists`. The files it made are removed, as the viewer's W does."""
    from kinetoscope.present import tables

    real = tables.write_csv
    calls = []

    def fills_up(table, handle, rows=None, **options):
        calls.append(table.name)
        if len(calls) == 3:
            handle.write("name,count\r\nhalf")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, handle, rows, **options)

    monkeypatch.setattr(tables, "write_csv", fills_up)
    target = tmp_path / "csv"
    code = main(["summary", str(SAMPLE), "--csv", str(target)])
    err = capsys.readouterr().err
    assert code == 1 and "No space left on device" in err and err.count("\n") == 1
    assert len(calls) == 3 and list(target.iterdir()) == []


def test_job_bundle_write_failure_names_the_bundle(tmp_path: Path, capsys, monkeypatch):
    """A job bundle that could not be written (a full disk) said `/…/.kinetoscope-export-
    ocbo6ps_/rank0.json: cannot write the export (No space left on device)`: a hidden scratch
    folder, already removed. The line names the bundle asked for; nothing is left behind."""
    from kinetoscope.export.crop import ExportError
    from kinetoscope.export import job_bundle as export_job

    def full_disk(crop, path):
        raise ExportError(f"{path}: cannot write the export (No space left on device)")

    monkeypatch.setattr(export_job, "write_crop", full_disk)
    ranks = [tmp_path / "rank0.json.gz", tmp_path / "rank1.json.gz"]
    for rank in ranks:
        shutil.copy(SAMPLE, rank)
    out = tmp_path / "out" / "job.zip"
    out.parent.mkdir()
    code = main(["export", *map(str, ranks), "-o", str(out), "--window", ".."])
    err = capsys.readouterr().err
    assert code == 1
    assert err == f"kinetoscope: {out}: cannot write the export (No space left on device)\n"
    assert list(out.parent.iterdir()) == []


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))


@pytest.mark.parametrize("output", [[], ["--json"]])
def test_summary_of_a_merged_job_export_says_what_it_is(tmp_path: Path, capsys, output):
    """`summary` of the merged JSON that `export DIR -o X.json` writes showed every rank's
    `ProfilerStep#N` as unlabelled rows and GPU totals mixing the ranks' devices, with no word
    that the file holds a whole job. One stderr line says so and where per-rank numbers come
    from; stdout (the JSON) is unchanged."""
    import json

    job = tmp_path / "job"
    job.mkdir()
    base = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 50}
    for rank in range(2):
        events = [
            {**base, "name": "ProfilerStep#3", "cat": "user_annotation", "ts": 0, "dur": 500},
            {**base, "name": "aten::mm", "ts": 10 + rank},
        ]
        info = {"rank": rank, "world_size": 2, "backend": "gloo"}
        trace = {"distributedInfo": info, "traceEvents": events}
        (job / f"rank{rank}.json").write_text(json.dumps(trace))
    merged = tmp_path / "merged.json"
    assert main(["export", str(job), "-o", str(merged), "--window", ".."]) == 0
    capsys.readouterr()
    plain = tmp_path / "plain.json"
    plain.write_text((job / "rank0.json").read_text())

    assert main(["summary", str(merged), *output]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert "merged export of 2 ranks" in captured.err and "per rank" in captured.err
    if output:
        json.loads(captured.out)
    assert main(["summary", str(plain), *output]) == 0
    assert capsys.readouterr().err == ""


def test_byte_offsets_of_a_cut_gzip_trace_say_they_count_the_decompressed_json(
    tmp_path: Path, capsys
):
    """A cut-off .gz said `the file ends at byte 77940 before the JSON does` of a 7 KB file:
    the offsets count the decompressed JSON, and the messages now say so. A plain file's
    messages are unchanged."""
    import json

    raw = gzip.decompress(SAMPLE.read_bytes())
    cut = raw[: len(raw) // 2]
    (tmp_path / "cut.json").write_bytes(cut)
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(cut))
    said = {}
    for name in ("cut.json", "cut.json.gz"):
        assert main(["summary", "--json", str(tmp_path / name)]) == 0
        document = json.loads(capsys.readouterr().out)
        text = json.dumps(document)
        assert "ends at byte" in text
        said[name] = "decompressed" in text
        out = tmp_path / f"crop-{name}"
        assert main(["export", str(tmp_path / name), "-o", str(out), "--window", ".."]) == 0
        err = capsys.readouterr().err
        assert "stops being readable at byte" in err
        assert ("decompressed" in err) == (name == "cut.json.gz"), err
    assert said == {"cut.json": False, "cut.json.gz": True}
