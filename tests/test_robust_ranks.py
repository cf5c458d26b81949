"""Rank numbers, world sizes and the paths of a job's files as untrusted input (issue 25): a
`world_size` or a rank number from a file never makes anything proportional to it (missing ranks
are ranges), a number in a file name that is no plausible rank is not taken for one, and a named
pipe, a device or a socket named among the files is refused at once, by every command."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kinetoscope.parser.ranks import (
    MISSING_LISTED,
    discover,
    first_ranks,
    missing_ranges,
    name_rank_problem,
    ranges_text,
    rank_from_name,
)

# Peak memory allowed to one command on these inputs (a regression needed 1.5 to 7.3 GB).
PEAK_MB = 300
# The child runs under this address-space limit, so that a regression fails fast with a
# MemoryError instead of taking the machine's memory.
ADDRESS_SPACE = 3 << 30


def write_rank(path: Path, info: dict[str, Any] | None = None) -> Path:
    doc: dict[str, Any] = {"schemaVersion": 1}
    if info is not None:
        doc["distributedInfo"] = info
    doc["traceEvents"] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 10, "dur": 100},
    ]  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


# A child that runs `kinetoscope ARGS` (its own child) and reports the peak memory of it and
# its worker processes, as RUSAGE_CHILDREN sees them.
_MEASURE = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
    done = subprocess.run(
        [sys.executable, "-m", "kinetoscope", *sys.argv[2:]],
        stdin=subprocess.DEVNULL, capture_output=True, preexec_fn=limit,
    )
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"rc": done.returncode, "peak_kb": peak_kb,
                      "out": done.stdout.decode(), "err": done.stderr.decode()}))
    """
)


def measured(*args: str) -> dict[str, Any]:
    """`kinetoscope ARGS`: exit status, output and peak memory (MB); a hang fails the test."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(ADDRESS_SPACE), *args],
        capture_output=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout)
    result["peak_mb"] = result["peak_kb"] / 1024
    assert "Traceback" not in result["err"], result["err"]
    return result


def job_json(*paths: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    run = measured("summary", *map(str, paths), "--json", "--workers", "1")
    assert run["rc"] == 0, run["err"]
    assert run["peak_mb"] < PEAK_MB, run["peak_mb"]
    return json.loads(run["out"]), run


# -- the cases of the issue, end to end ------------------------------------------------------


def test_a_huge_world_size_gives_one_range_of_missing_ranks(tmp_path):
    world = 10**12
    a = write_rank(tmp_path / "a.json", {"rank": 0, "world_size": world})
    b = write_rank(tmp_path / "b.json", {"rank": 1, "world_size": world})
    doc, _ = job_json(a, b)
    assert doc["world_size"] == world
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["missing_count"] == world - 2
    assert doc["missing_ranges"] == [{"first": 2, "last": world - 1, "count": world - 2}]
    assert doc["missing"] == list(range(2, 2 + MISSING_LISTED))  # the first ones, bounded
    assert doc["cycles"][0]["complete"] is False
    text = measured("summary", str(a), str(b), "--workers", "1")
    assert text["rc"] == 0 and text["peak_mb"] < PEAK_MB
    assert "2-999999999999 (999,999,999,998 ranks)" in text["out"]


def test_a_huge_rank_in_a_file_name_is_no_rank(tmp_path):
    a = write_rank(tmp_path / "rank0.json")
    b = write_rank(tmp_path / "rank999999999999.json")
    doc, _ = job_json(a, b)
    assert [(r["rank"], r["rank_rule"]) for r in doc["ranks"]] == [(0, "name"), (1, "order")]
    assert doc["missing"] == [] and doc["missing_count"] == 0
    (note,) = doc["notes"]
    assert note["path"] == str(b)
    assert "999999999999" in note["note"] and "no rank" in note["note"]


def test_a_huge_distributed_rank_without_world_size_is_a_range(tmp_path):
    huge = 10**15
    a = write_rank(tmp_path / "a.json", {"rank": huge})
    b = write_rank(tmp_path / "b.json", {"rank": 0})
    doc, _ = job_json(a, b)
    assert [r["rank"] for r in doc["ranks"]] == [0, huge]
    assert doc["missing_ranges"] == [{"first": 1, "last": huge - 1, "count": huge - 1}]
    assert doc["missing_count"] == huge - 1 and len(doc["missing"]) == MISSING_LISTED


def test_a_date_in_a_file_name_is_no_rank_and_the_output_stays_small(tmp_path):
    a = write_rank(tmp_path / "rank0.json")
    b = write_rank(tmp_path / "rank_20240101.json")
    doc, run = job_json(a, b)
    assert len(run["out"]) < 20_000  # it wrote 272 MB of missing ranks
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["missing"] == [] and doc["missing_ranges"] == []
    assert "looks like a date" in doc["notes"][0]["note"]
    text = measured("summary", str(tmp_path), "--workers", "1")
    assert text["rc"] == 0 and "Rank numbers not taken" in text["out"]


def test_an_export_of_a_job_with_a_huge_world_size_is_bounded(tmp_path):
    world = 10**12
    a = write_rank(tmp_path / "a.json", {"rank": 0, "world_size": world})
    b = write_rank(tmp_path / "b.json", {"rank": 1, "world_size": world})
    out = tmp_path / "out.json"
    run = measured("export", str(a), str(b), "-o", str(out), "--window", "..+1ms")
    assert run["rc"] == 0, run["err"]
    assert run["peak_mb"] < PEAK_MB
    assert "missing ranks (no file): 2-999999999999 (999,999,999,998 ranks)" in run["err"]
    assert out.stat().st_size < 100_000


# -- the rules, on their own -----------------------------------------------------------------


def test_missing_ranks_are_ranges_whatever_the_world_size():
    assert missing_ranges([0, 1, 3], 4) == [(2, 2)]
    assert missing_ranges([0, 5, 6, 9], 12) == [(1, 4), (7, 8), (10, 11)]
    assert missing_ranges([], 3) == [(0, 2)]
    assert missing_ranges([2, 7], 2) == [(0, 1)]  # ranks beyond the end are not counted
    assert missing_ranges([0, 1], 2) == []
    assert missing_ranges([0], 10**18) == [(1, 10**18 - 1)]
    assert first_ranks([(1, 3), (7, 10**18)], limit=6) == [1, 2, 3, 7, 8, 9]
    assert first_ranks([(5, 5)]) == [5]
    assert ranges_text([(2, 15), (20, 20)], 15) == "2-15, 20 (15 ranks)"
    assert ranges_text([(4, 4)], 1) == "4"
    many = [(k * 2, k * 2) for k in range(30)]
    assert ranges_text(many, 30).endswith("and 10 more ranges (30 ranks)")


def test_which_numbers_in_a_file_name_are_ranks():
    assert rank_from_name("/run/rank_3.json") == 3
    assert rank_from_name("/run/rank_20240101.json") is None  # a date
    assert rank_from_name("/run/worker1700000000123.json") is None  # a timestamp
    assert rank_from_name("/run/rank" + "9" * 5000 + ".json") is None  # never converted
    assert name_rank_problem(1023) is None
    assert "beyond the job's world_size 8" in (name_rank_problem(8, world_size=8) or "")
    assert name_rank_problem(7, world_size=8) is None
    assert "far beyond" in (name_rank_problem(99_999, highest_other=0) or "")
    assert name_rank_problem(1023, highest_other=0) is None  # two ranks of a big job
    assert name_rank_problem(20240101) is not None and name_rank_problem(20241301) is not None


def test_a_name_beyond_the_world_size_is_ranked_by_order(tmp_path):
    write_rank(tmp_path / "rank0.json", {"rank": 0, "world_size": 2})
    write_rank(tmp_path / "rank_40.json", {"world_size": 2})
    files = discover([str(tmp_path)])
    assert [(f.rank, f.rank_rule) for f in files.files] == [(0, "distributedInfo"), (1, "order")]
    assert files.missing == [] and files.missing_count == 0
    assert "beyond the job's world_size 2" in files.notes[0][1]


def test_ranks_of_a_plain_job_are_as_before(tmp_path):
    for rank in (0, 1, 3):
        write_rank(tmp_path / f"rank{rank}.json", {"rank": rank, "world_size": 6})
    files = discover([str(tmp_path)])
    assert [f.rank for f in files.files] == [0, 1, 3]
    assert files.missing == [2, 4, 5] and files.missing_ranges == [(2, 2), (4, 5)]
    assert files.missing_count == 3 and files.notes == []
    # Two ranks of a big job named by file, no world size: both taken as they are.
    other = tmp_path / "named"
    other.mkdir()
    write_rank(other / "rank0.json")
    write_rank(other / "rank1023.json")
    files = discover([str(other)])
    assert [(f.rank, f.rank_rule) for f in files.files] == [(0, "name"), (1023, "name")]
    assert files.missing_ranges == [(1, 1022)] and len(files.missing) == MISSING_LISTED - 2


# -- a named pipe, a device or a socket among the files -----------------------------------------


def _special(tmp_path: Path, kind: str) -> str:
    if kind == "fifo":
        path = tmp_path / "pipe.json"
        os.mkfifo(path)
        return str(path)
    if kind == "device":
        return os.devnull
    path = tmp_path / "sock.json"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    _SOCKETS.append(server)
    return str(path)


_SOCKETS: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_sockets():
    yield
    while _SOCKETS:
        _SOCKETS.pop().close()


def _refused(args: list[str], special: str) -> str:
    """`kinetoscope ARGS` must refuse `special` at once, in one line, status 1 (a hang fails)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-m", "kinetoscope", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        env=env,
    )
    err = done.stderr.decode()
    assert done.returncode == 1, (done.returncode, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"kinetoscope: {special}: not a regular file ("), err
    return err


@pytest.mark.parametrize("kind", ["fifo", "device", "socket"])
def test_a_special_file_among_a_jobs_files_is_refused_by_summary(tmp_path, kind):
    trace = write_rank(tmp_path / "rank0.json")
    special = _special(tmp_path, kind)
    err = _refused(["summary", str(trace), special], special)
    assert {"fifo": "a named pipe", "device": "a device", "socket": "a socket"}[kind] in err


def test_a_named_pipe_is_refused_by_every_command_taking_traces(tmp_path):
    trace = write_rank(tmp_path / "rank0.json")
    fifo = _special(tmp_path, "fifo")
    out = str(tmp_path / "out.json")
    _refused(["summary", str(trace), fifo, "--json"], fifo)
    _refused(["view", str(trace), fifo], fifo)  # the job viewer: before it needs a terminal
    _refused([str(trace), fifo], fifo)
    _refused(["diff", str(trace), fifo], fifo)
    _refused(["diff", fifo, str(trace), "--json"], fifo)
    _refused(["export", str(trace), fifo, "-o", out, "--window", "..+1ms"], fifo)
    _refused(["export", fifo, "-o", out, "--window", "..+1ms"], fifo)
    _refused(["view", fifo], fifo)
    assert not os.path.exists(out)


def test_serve_checks_a_named_pipe_among_files_before_serving(tmp_path):
    trace = write_rank(tmp_path / "rank0.json")
    fifo = _special(tmp_path, "fifo")
    code = textwrap.dedent(
        """
        import sys
        from kinetoscope.commands.serve import ServeError, viewer_command
        trace, fifo = sys.argv[1:]
        for paths, diff in (([trace, fifo], False), ([trace, fifo], True), ([fifo], False)):
            try:
                viewer_command(paths, diff=diff)
            except ServeError as exc:
                print(exc)
        """
    )
    done = subprocess.run(  # in a child: a regression would block in open(), forever
        [sys.executable, "-c", code, str(trace), fifo], capture_output=True, timeout=30
    )
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0 and len(lines) == 3, done.stderr.decode()
    assert all(line.startswith(f"{fifo}: not a regular file (a named pipe)") for line in lines)
