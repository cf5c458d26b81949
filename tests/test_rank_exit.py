"""Job health: how each rank of a captured job ended (capture's exit records), read back as
untrusted input, in `summary DIR` (text and JSON) and the job viewer; a rank that died is never
the straggler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kinetoscope.capture.ranks import JobOutcome, RankOutcome, report_job
from kinetoscope.parser.rank_exit import (
    MAX_RECORD_BYTES,
    MAX_TEXT,
    folder_records,
    make_record,
    parse_record,
    read_record,
    record_name,
)
from test_job import job_of, summary, write_job


def record(rank: int, path: Path | None, **over) -> dict:
    """An exit record as capture writes it for the trace at `path` (None: no trace)."""
    fields = dict(
        rank=rank,
        world_size=3,
        restart=0,
        ended="exception",
        exit_code=1,
        exception="RuntimeError",
        message="boom at step 1",
        step=1,
        partial=True,
        trace=path.name if path is not None else None,
        trace_bytes=path.stat().st_size if path is not None else None,
        host="node-a",
        ended_unix=1_700_000_000.5,
    )
    fields.update(over)
    return make_record(**fields)


def put(folder: Path, rank: int, content: dict | bytes) -> Path:
    target = folder / record_name(rank)
    target.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return target


# -- the straggler, with known truth ------------------------------------------------------------


def test_a_rank_that_died_is_never_named_the_straggler(tmp_path):
    """The synthetic job's straggler is rank 1 (350 µs more compute). When capture's record
    says rank 1 died, it is not named; rank 2, the next to arrive last, is. A record left by
    an earlier run (its trace's size differs) is ignored, as is a folder without records."""
    write_job(tmp_path)
    plain = job_of([str(tmp_path)], align=True)
    assert plain["straggler"]["rank"] == 1
    assert plain["health"] == {
        "records": 0,
        "ended_badly": [],
        "failed": [],
        "first_failure": None,
        "messages": [],
        "cause": None,
        "knock_on": [],
        "knock_on_message": None,
    }
    assert all(r["exit"] is None for r in plain["ranks"])

    trace = tmp_path / "rank1.json"
    put(tmp_path, 1, record(1, trace, trace_bytes=trace.stat().st_size + 1))  # stale
    assert job_of([str(tmp_path)], align=True)["straggler"]["rank"] == 1

    put(tmp_path, 1, record(1, trace))
    for rank in (0, 2):
        put(tmp_path, rank, record(rank, tmp_path / f"rank{rank}.json", ended="ok", exit_code=0,
                                   exception=None, message=None, step=None, partial=False))  # fmt: skip
    document = job_of([str(tmp_path)], align=True)
    assert document["straggler"]["rank"] == 2
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert ranks[1]["exit"] == {
        "ended": "exception",
        "exit_code": 1,
        "exception": "RuntimeError",
        "message": "boom at step 1",
        "step": 1,
        "partial": True,
        "host": "node-a",
        "text": "exited with RuntimeError at ProfilerStep#1; its trace is partial",
        "knock_on_of": None,
    }
    assert ranks[0]["exit"]["ended"] == "ok" and ranks[0]["exit"]["text"] == "ended normally"
    assert document["health"] == {
        "records": 3,
        "ended_badly": [1],
        "failed": [1],
        "first_failure": 1,
        "messages": ["rank 1 exited with RuntimeError at ProfilerStep#1; its trace is partial"],
        "cause": None,
        "knock_on": [],
        "knock_on_message": None,
    }
    text = summary(str(tmp_path), "--width", "200").stdout
    assert (
        "Rank 1 exited with RuntimeError at ProfilerStep#1; its trace is partial: boom at step 1"
        in text
    )
    row = next(line for line in text.splitlines() if line.startswith("│ 1 "))
    assert "failed" in row and "straggler" not in row
    assert "straggler" in next(line for line in text.splitlines() if line.startswith("│ 2 "))


def test_every_rank_dead_names_no_straggler_and_says_why(tmp_path):
    write_job(tmp_path, ranks=(0, 1))
    for rank in (0, 1):
        put(tmp_path, rank, record(rank, tmp_path / f"rank{rank}.json",
                                   ended_unix=1_700_000_000.0 + (1 - rank)))  # fmt: skip
    document = job_of([str(tmp_path)])
    assert document["straggler"] is None
    assert document["health"]["ended_badly"] == [1, 0]  # in the order they ended
    assert document["health"]["first_failure"] == 1
    text = summary(str(tmp_path), "--width", "200").stdout
    assert "No straggler named" in text and "ranks 0, 1 failed" in text
    assert "(the first rank to fail)" in text.split("Rank 1 exited", 1)[1].splitlines()[0]


def test_a_rank_that_wrote_no_trace_is_said_among_the_missing(tmp_path):
    write_job(tmp_path, ranks=(0, 1), world=3)
    put(tmp_path, 2, record(2, None, step=3, exception="ValueError", message="bad batch"))
    document = job_of([str(tmp_path)])
    assert document["missing"] == [2]
    assert document["health"]["messages"] == [
        "rank 2 exited with ValueError at ProfilerStep#3; it wrote no trace"
    ]


# -- the records are untrusted -------------------------------------------------------------------


def test_records_are_read_as_untrusted_input(tmp_path):
    trace = tmp_path / "rank0.json"
    trace.write_text("{}")
    good = record(0, trace)
    assert parse_record(good) is not None
    # Wrong version, types, ranges, endings: not a record.
    for bad in (
        {**good, "kinetoscope_rank_exit": 2},
        {**good, "rank": "0"},
        {**good, "rank": True},
        {**good, "rank": -1},
        {**good, "ended": "exploded"},
        {**good, "trace": "../../etc/passwd"},
        {**good, "trace": "sub/rank0.json"},
        {**good, "trace": ".."},
        {**good, "trace": 7},
        [good],
        "x",
    ):
        assert parse_record(bad) is None, bad
    # Fields of the wrong type are dropped, texts cleaned and cut.
    odd = parse_record(
        {**good, "exit_code": "1", "step": -3, "partial": "yes", "ended_unix": float("nan"),
         "message": "\x1b[2Jwipe\nthe screen" + "x" * 10_000, "exception": ["RuntimeError"]}
    )  # fmt: skip
    assert odd is not None
    assert odd.exit_code is None and odd.step is None and odd.partial is False
    assert odd.ended_unix is None and odd.exception is None
    assert odd.message.startswith("[2Jwipe the screen") and len(odd.message) == MAX_TEXT
    assert "\x1b" not in odd.message and "\n" not in odd.message
    assert odd.describe() == "exited with an exception"  # no step, not said partial

    # Files: too big, a link, a FIFO, not JSON, nested too deep, a rank other than its name's.
    assert read_record(str(put(tmp_path, 0, good))) is not None
    big = dict(good, message="x" * (MAX_RECORD_BYTES + 10))
    assert read_record(str(put(tmp_path, 0, big))) is None
    assert read_record(str(put(tmp_path, 0, b"\xff\xfe not json"))) is None
    assert read_record(str(put(tmp_path, 0, b"[" * 5000 + b"]" * 5000))) is None
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(good))
    link = tmp_path / record_name(0)
    link.unlink()
    link.symlink_to(elsewhere)
    assert read_record(str(link)) is None
    link.unlink()
    os.mkfifo(link)
    assert read_record(str(link)) is None  # not opened for reading blocked on a writer
    link.unlink()
    put(tmp_path, 1, good)  # the file says rank 1, the record rank 0
    put(tmp_path, 0, good)
    assert [r.rank for r in folder_records(str(tmp_path))] == [0]


# -- capture's own report ------------------------------------------------------------------------


def test_captures_report_names_the_failed_ranks_first_failure_first(tmp_path):
    def outcome(rank: int, ended: str, when: float, **over) -> RankOutcome:
        trace = tmp_path / f"rank{rank}.pt.trace.json.gz"
        trace.write_bytes(b"x")
        fields = record(rank, trace, ended=ended, ended_unix=when, **over)
        return RankOutcome(rank, trace, finished=True, exit_code=1, exit=parse_record(fields))

    ok = dict(exception=None, message=None, step=None, partial=False, exit_code=0)
    ranks = [
        outcome(0, "ok", 5.0, **ok),
        outcome(1, "exception", 3.0, message="Connection closed by peer", step=8),
        outcome(2, "exception", 1.0, message="boom", step=8),
        outcome(3, "stopped", 4.0, exception=None, message=None, step=8, exit_code=143),
    ]
    lines: list[str] = []
    report_job(JobOutcome(tmp_path, 4, ranks), lines.append)
    assert lines[:4] == [
        f"kinetoscope: ranks 1, 2 failed; 4 of 4 ranks wrote traces into {tmp_path}",
        "kinetoscope: rank 2 exited with RuntimeError at ProfilerStep#8; its trace is partial: "
        "boom (the first rank to fail)",
        "kinetoscope: rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial: "
        "Connection closed by peer",
        "kinetoscope: rank 3 was stopped (SIGTERM) at ProfilerStep#8; its trace is partial",
    ]
    assert not any("all 4 ranks" in line for line in lines)


# -- a real job ------------------------------------------------------------------------------------

CRASH = textwrap.dedent(
    """
    import sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(12):
        model(torch.randn(4, 8)).sum().backward()
        if rank == 1 and step == 8:
            raise RuntimeError("boom at step 8")
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
    """
)


def _kinetoscope(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_real_job_whose_rank_raises_at_a_step(tmp_path):
    """`capture --nproc 2` of a gloo script whose rank 1 raises RuntimeError at step 8 (inside
    the window ProfilerStep#7..#9): capture exits 1 and names the failure; `summary DIR` (text
    and JSON) says how each rank ended, and the rank that died is not the straggler."""
    pytest.importorskip("torch.distributed")
    (tmp_path / "crash.py").write_text(CRASH)
    run_dir = tmp_path / "run"
    result = _kinetoscope(
        ["capture", "--nproc", "2", "-o", "run", "--no-view", "crash.py"], tmp_path
    )
    assert result.returncode == 1, result.stderr
    assert "ranks wrote their traces" not in result.stderr
    assert (
        "kinetoscope: rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial: "
        "boom at step 8 (the first rank to fail)" in result.stderr
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("kinetoscope: rank ")]
    assert lines[0].startswith("kinetoscope: rank 1 exited with RuntimeError at ProfilerStep#8")
    assert sorted(p.name for p in run_dir.iterdir()) == [
        record_name(0),
        record_name(1),
        "rank0.pt.trace.json.gz",
        "rank1.pt.trace.json.gz",
    ]
    document = json.loads(_kinetoscope(["summary", "run", "--json"], tmp_path).stdout)
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert ranks[1]["exit"]["exception"] == "RuntimeError"
    assert ranks[1]["exit"]["message"] == "boom at step 8"
    assert ranks[1]["exit"]["step"] == 8 and ranks[1]["exit"]["partial"] is True
    assert document["health"]["first_failure"] == 1
    assert document["health"]["messages"][0] == (
        "rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial"
    )
    assert (document["straggler"] or {}).get("rank") not in document["health"]["failed"]
    text = _kinetoscope(["summary", "run", "--width", "200"], tmp_path).stdout
    assert "Rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial" in text


async def test_the_job_viewer_says_how_a_rank_ended(tmp_path):
    from kinetoscope.tui.job.job_app import JobApp
    from test_tui_job import SIZE, overview

    write_job(tmp_path)
    put(tmp_path, 1, record(1, tmp_path / "rank1.json"))
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        title = str(screen.query_one("#ranks-title").render())
        assert "rank 1 exited with RuntimeError at ProfilerStep#1; its trace is partial" in title
        # The straggler and its reason have their own line under the title.
        straggler = str(screen.query_one("#ranks-straggler").render())
        assert "straggler: rank 2" in straggler
        assert [(r.rank, r.status) for r in screen.matrix.rows] == [
            (0, "ok"),
            (1, "failed"),
            (2, "ok"),
        ]
        statuses = [r[1] for r in screen.breakdown.visible_texts()]
        assert statuses == ["ok", "failed", "ok"]


def test_a_rank_that_never_said_it_was_done_gets_a_lost_record(tmp_path):
    """A rank killed outright writes no record; the reporting process writes one for it."""
    from kinetoscope.capture.ranks import record_lost_ranks

    trace = tmp_path / "rank1.pt.trace.json.gz"
    trace.write_bytes(b"partial")
    job = JobOutcome(
        tmp_path,
        3,
        [
            RankOutcome(0, tmp_path / "rank0.pt.trace.json.gz", finished=True),
            RankOutcome(1, trace, reason="not finished after 30 s"),
            RankOutcome(2, None, reason="not finished after 30 s"),
        ],
    )
    record_lost_ranks(job)
    one = read_record(str(tmp_path / record_name(1)))
    assert one is not None and one.ended == "lost" and one.failed
    assert one.trace == trace.name and one.trace_bytes == len(b"partial")
    two = read_record(str(tmp_path / record_name(2)))
    assert two is not None and two.trace is None
    assert not (tmp_path / record_name(0)).exists()  # it finished: its own record stands
    lines: list[str] = []
    report_job(job, lines.append)
    assert lines[0].startswith("kinetoscope: ranks 1, 2 failed; 2 of 3 ranks wrote traces")
    assert (
        "kinetoscope: rank 1 ended without a word (killed: SIGKILL, the OOM killer?); its trace "
        "may be partial: not finished after 30 s" in lines
    )
    assert any(line.startswith("kinetoscope: rank 2 ended without a word") for line in lines)


@pytest.mark.slow
def test_a_real_rank_killed_outright_is_named(tmp_path):
    """`capture --nproc 2` of a job whose rank 1 is SIGKILLed at step 8 (it can write nothing):
    capture's report and `summary DIR` say it ended without a word and wrote no trace."""
    pytest.importorskip("torch.distributed")
    script = CRASH.replace(
        'raise RuntimeError("boom at step 8")', "os.kill(os.getpid(), signal.SIGKILL)"
    ).replace("import sys", "import os, signal, sys")
    (tmp_path / "killed.py").write_text(script)
    result = _kinetoscope(
        ["capture", "--nproc", "2", "-o", "run", "--no-view", "killed.py"], tmp_path
    )
    assert result.returncode != 0
    assert "kinetoscope: rank 1 ended without a word" in result.stderr, result.stderr
    document = json.loads(_kinetoscope(["summary", "run", "--json"], tmp_path).stdout)
    assert document["missing"] == [1]
    assert (
        "rank 1 ended without a word (killed: SIGKILL, the OOM killer?); it wrote no trace"
        in (document["health"]["messages"])
    )
