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
    knock_ons,
    make_record,
    parse_record,
    peer_error,
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


# -- knock-on failures: a rank that died because its peer died first ----------------------------

# What gloo raised on the three peers of a real 4-rank CPU job whose rank 2 raised at step 8.
GLOO = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
    "peer [127.0.0.1]:55222. This is typically caused by a remote worker crashing. Check the "
    "logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f"
)
T0 = 1_796_157_039.0


def ended(rank: int, when: float | None, message: str | None = "boom", **over):
    """A parsed exit record of a rank that raised (RuntimeError at step 8) at `when`."""
    fields = dict(ended_unix=when, message=message, step=8, trace="r.json", trace_bytes=1)
    fields.update(over)
    made = parse_record(record(rank, None, **fields))
    assert made is not None
    return made


def test_peer_errors_are_recognised_by_type_and_narrow_patterns():
    def kind(exception: str, message: str) -> str | None:
        return peer_error(ended(0, T0, message, exception=exception))

    assert kind("RuntimeError", GLOO) == "gloo: connection closed by peer"
    assert kind("RuntimeError", "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Read "
                "error [10.0.0.2]:5123: Connection reset by peer") == (
        "gloo: connection reset by peer")  # fmt: skip
    assert kind("RuntimeError", "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                "Timed out waiting 1800000ms for recv operation to complete") == (
        "gloo: timed out waiting for a peer")  # fmt: skip
    assert kind("DistBackendError", "NCCL error in: ProcessGroupNCCL.cpp:1970, remote process "
                "exited or there was a network error, NCCL version 2.19.3") == "NCCL: remote error"  # fmt: skip
    assert kind("DistBackendError", "[Rank 1] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 ms") == (
        "NCCL: collective timed out")  # fmt: skip
    assert kind("DistNetworkError", "Connection reset by peer") == (
        "DistNetworkError: connection lost")
    # Not a peer error: the words without the backend in an ordinary RuntimeError (a user's own
    # HTTP client, say), another type with gloo's words, another gloo error, no message.
    assert kind("RuntimeError", "Connection reset by peer") is None
    assert kind("ValueError", GLOO) is None
    assert kind("RuntimeError", "[../third_party/gloo/gloo/allreduce.cc:12] bad size") is None
    assert kind("RuntimeError", "CUDA out of memory") is None
    assert peer_error(ended(0, T0, None)) is None
    # Only a rank that raised: a non-zero exit, a stop or a lost rank has no peer error.
    for how in ("exit", "stopped", "lost", "ok"):
        assert peer_error(ended(0, T0, GLOO, ended=how)) is None


def test_the_peers_that_failed_after_the_cause_are_its_knock_ons():
    """Rank 2 raised first; ranks 1, 3, 0 then failed on gloo's closed connection, in that
    order: they are rank 2's knock-on failures, said in one sentence."""
    records = [
        ended(0, T0 + 2.4, GLOO),
        ended(1, T0 + 0.9, GLOO),
        ended(2, T0, "boom at step 8"),
        ended(3, T0 + 0.95, GLOO),
    ]
    found = knock_ons(records)
    assert found.cause is not None and found.cause.rank == 2
    assert [r.rank for r in found.ranks] == [1, 3, 0]
    assert [found.of(r) for r in range(4)] == [2, 2, None, 2]
    assert found.sentence() == (
        "ranks 1, 3, 0 stopped because their peer rank 2 failed first (knock-on failures, not "
        "failures of their own): RuntimeError at ProfilerStep#8 (gloo: connection closed by peer)"
    )
    # A big job: one line still, its names cut after eight, every knock-on known by rank.
    many = knock_ons([ended(2, T0, "boom")] + [ended(r, T0 + r, GLOO) for r in range(3, 3003)])
    assert len(many.ranks) == 3000 and many.of(3002) == 2 and many.of(2) is None
    assert many.sentence().startswith("ranks 3, 4, 5, 6, 7, 8, 9, 10 and 2992 more stopped")
    one = knock_ons(records[1:3])
    assert one.sentence() == (
        "rank 1 stopped because its peer rank 2 failed first (a knock-on failure, not one of its "
        "own): RuntimeError at ProfilerStep#8 (gloo: connection closed by peer)"
    )


def test_what_is_not_a_knock_on_stays_failed():
    # Two failures of their own: both failed, no knock-on.
    assert knock_ons([ended(1, T0, "bad batch", exception="ValueError"),
                      ended(2, T0 + 1, "bad batch", exception="ValueError")]).ranks == ()  # fmt: skip
    # After the cause, but not a peer error (it ran out of memory): failed on its own.
    late = knock_ons([ended(2, T0, "boom"), ended(1, T0 + 1, "CUDA out of memory")])
    assert late.ranks == () and late.cause is None
    # A peer error that ended BEFORE the first failure of its own: not its knock-on.
    early = knock_ons([ended(0, T0 - 1, GLOO), ended(2, T0, "boom"), ended(1, T0 + 1, GLOO)])
    assert [r.rank for r in early.ranks] == [1] and early.cause.rank == 2
    assert early.of(0) is None
    # ... nor one with no end time to compare (a record that lost it), nor at the same instant.
    assert knock_ons([ended(2, T0, "boom"), ended(1, None, GLOO)]).ranks == ()
    assert knock_ons([ended(2, T0, "boom"), ended(1, T0, GLOO)]).ranks == ()
    # Every failure a peer error: no rank to blame, none is called a knock-on.
    assert knock_ons([ended(0, T0, GLOO), ended(1, T0 + 1, GLOO)]).ranks == ()
    # A rank stopped (SIGTERM) or ended ok is no cause.
    stop = ended(2, T0, None, ended="stopped", exception=None, exit_code=143)
    assert knock_ons([stop, ended(1, T0 + 1, GLOO)]).ranks == ()
    assert knock_ons([]).cause is None and knock_ons([]).sentence() is None


def test_a_rank_killed_outright_is_the_cause_of_its_peers_errors():
    """A rank killed outright (`lost`: written for it, no end time) is the cause when no rank
    failed on its own with an end time; the lost rank stays failed. Beside a timed cause, a
    lost rank is a failure of its own."""
    lost = ended(1, None, "not finished after 30 s", ended="lost", exception=None, step=None)
    found = knock_ons([lost, ended(0, T0, GLOO)])
    assert found.cause is not None and found.cause.rank == 1
    assert [r.rank for r in found.ranks] == [0] and found.of(1) is None
    beside = knock_ons([lost, ended(2, T0, "boom"), ended(0, T0 + 1, GLOO)])
    assert beside.cause.rank == 2 and [r.rank for r in beside.ranks] == [0]
    assert beside.of(1) is None


def test_a_job_says_the_cause_first_and_its_knock_ons_in_one_line(tmp_path):
    """Rank 1 (the straggler of the synthetic job) raises first; rank 2 then fails on gloo's
    closed connection (its knock-on); rank 0 ends ok. JSON, text, Markdown and TSV say rank 1
    first and rank 2 in one line as its knock-on; neither is named the straggler."""
    write_job(tmp_path)
    ok = dict(ended="ok", exit_code=0, exception=None, message=None, step=None, partial=False)
    put(tmp_path, 0, record(0, tmp_path / "rank0.json", ended_unix=T0 + 5, **ok))
    put(tmp_path, 1, record(1, tmp_path / "rank1.json", ended_unix=T0, message="boom"))
    put(tmp_path, 2, record(2, tmp_path / "rank2.json", ended_unix=T0 + 1, message=GLOO))
    document = job_of([str(tmp_path)], align=True)
    health = document["health"]
    assert health["failed"] == [1, 2] and health["first_failure"] == 1  # meanings kept
    assert health["cause"] == 1 and health["knock_on"] == [2]
    assert health["knock_on_message"] == (
        "rank 2 stopped because its peer rank 1 failed first (a knock-on failure, not one of its "
        "own): RuntimeError at ProfilerStep#1 (gloo: connection closed by peer)"
    )
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert [ranks[r]["exit"]["knock_on_of"] for r in (0, 1, 2)] == [None, None, 1]
    assert document["straggler"] is None  # rank 0 alone is left: no straggler, not 1 or 2

    text = summary(str(tmp_path), "--width", "250").stdout
    lines = text.splitlines()
    said = [n for n, line in enumerate(lines) if line.startswith("Rank ")]
    assert len(said) == 2, text  # the cause, then one line for its knock-on
    assert lines[said[0]].startswith("Rank 1 exited with RuntimeError at ProfilerStep#1")
    assert lines[said[1]].startswith("Rank 2 stopped because its peer rank 1 failed first")
    assert "Connection closed by peer [127" not in text  # the knock-on's own message: JSON only
    rows: dict[str, str] = {}  # the ranks table's rows: the first table with a row per rank
    for line in lines:
        if line.startswith("│ ") and "│" in line[2:]:
            rows.setdefault(line.split()[1], line)
    assert "knock-on" in rows["2"] and "failed" in rows["1"] and "ok" in rows["0"]
    assert "rank 1 failed and rank 2 stopped after it" in text
    for form, prefix in (("md", ""), ("tsv", "# ")):
        out = summary(str(tmp_path), "--format", form).stdout
        told = [line for line in out.splitlines() if line.startswith(prefix + "Rank ")]
        assert [line[len(prefix):][:6] for line in told] == ["Rank 1", "Rank 2"], out
        assert "stopped because its peer rank 1 failed first" in told[1]

    # Rank 2's error is another of its own (not a peer's): both failed, no knock-on.
    put(tmp_path, 2, record(2, tmp_path / "rank2.json", ended_unix=T0 + 1,
                            exception="ValueError", message="bad batch"))  # fmt: skip
    document = job_of([str(tmp_path)], align=True)
    assert document["health"]["knock_on"] == [] and document["health"]["cause"] is None
    assert document["health"]["failed"] == [1, 2]
    assert "knock-on" not in summary(str(tmp_path), "--width", "250").stdout

    # The straggler (rank 1) as the knock-on of rank 0: it is not named for arriving late.
    put(tmp_path, 0, record(0, tmp_path / "rank0.json", ended_unix=T0 - 1, message="boom"))
    put(tmp_path, 1, record(1, tmp_path / "rank1.json", ended_unix=T0, message=GLOO))
    put(tmp_path, 2, record(2, tmp_path / "rank2.json", ended_unix=T0 + 5, **ok))
    document = job_of([str(tmp_path)], align=True)
    assert document["health"]["cause"] == 0 and document["health"]["knock_on"] == [1]
    assert document["straggler"] is None


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


def test_captures_report_says_the_knock_ons_in_one_line_after_the_cause(tmp_path):
    def outcome(rank: int, when: float, message: str) -> RankOutcome:
        trace = tmp_path / f"rank{rank}.pt.trace.json.gz"
        trace.write_bytes(b"x")
        fields = record(rank, trace, ended_unix=when, message=message, step=8)
        return RankOutcome(rank, trace, finished=True, exit_code=1, exit=parse_record(fields))

    ranks = [outcome(0, 3.0, GLOO), outcome(1, 2.0, GLOO), outcome(2, 1.0, "boom"),
             outcome(3, 2.5, GLOO)]  # fmt: skip
    lines: list[str] = []
    report_job(JobOutcome(tmp_path, 4, ranks), lines.append)
    assert lines[:3] == [
        f"kinetoscope: rank 2 failed (ranks 0, 1, 3 stopped after it: knock-on); 4 of 4 ranks "
        f"wrote traces into {tmp_path}",
        "kinetoscope: rank 2 exited with RuntimeError at ProfilerStep#8; its trace is partial: "
        "boom (the first rank to fail)",
        "kinetoscope: ranks 1, 3, 0 stopped because their peer rank 2 failed first (knock-on "
        "failures, not failures of their own): RuntimeError at ProfilerStep#8 (gloo: "
        "connection closed by peer)",
    ]
    assert not any("Connection closed by peer" in line for line in lines)


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
    document = json.loads(_kinetoscope(["summary", "run", "--json"], tmp_path).stdout)
    if document["ranks"][0]["exit"]["ended"] == "stopped":
        # The race the knock-on rule cannot win: torch's launcher stopped rank 0 (SIGTERM)
        # before gloo's error reached it. Then rank 1 is the one failure and nothing is a
        # knock-on.
        _only_rank_1_failed(result.stderr, document, tmp_path)
        return
    assert (
        "kinetoscope: rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial: "
        "boom at step 8 (the first rank to fail)" in result.stderr
    )
    lines = [line for line in result.stderr.splitlines() if line.startswith("kinetoscope: rank ")]
    # Rank 0 then failed inside its all_reduce on gloo's closed connection: rank 1's knock-on.
    assert lines[0].startswith("kinetoscope: rank 1 failed (rank 0 stopped after it: knock-on)")
    assert lines[1].startswith("kinetoscope: rank 1 exited with RuntimeError at ProfilerStep#8")
    assert lines[2].startswith(
        "kinetoscope: rank 0 stopped because its peer rank 1 failed first (a knock-on failure"
    ), result.stderr
    assert len(lines) == 3
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
    assert ranks[0]["exit"]["exception"] == "RuntimeError"
    assert "gloo" in ranks[0]["exit"]["message"], ranks[0]["exit"]
    health = document["health"]
    assert health["failed"] == [0, 1] and health["cause"] == 1 and health["knock_on"] == [0]
    assert ranks[0]["exit"]["knock_on_of"] == 1 and ranks[1]["exit"]["knock_on_of"] is None
    assert health["knock_on_message"].startswith(
        "rank 0 stopped because its peer rank 1 failed first"
    )
    text = _kinetoscope(["summary", "run", "--width", "200"], tmp_path).stdout
    assert "Rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial" in text
    assert "Rank 0 stopped because its peer rank 1 failed first" in text
    assert "Rank 0 exited" not in text


def _only_rank_1_failed(stderr: str, document: dict, tmp_path) -> None:
    """The job of `test_a_real_job_whose_rank_raises_at_a_step` when rank 0 was stopped by the
    launcher: rank 1 is named as the failure, rank 0 as stopped, no knock-on is claimed."""
    assert (
        "kinetoscope: rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial: "
        "boom at step 8" in stderr
    ), stderr
    assert "knock-on" not in stderr, stderr
    health = document["health"]
    assert health["failed"] == [1] and health["knock_on"] == [], health
    assert health["first_failure"] == 1, health
    assert (document["straggler"] or {}).get("rank") != 1
    text = _kinetoscope(["summary", "run", "--width", "200"], tmp_path).stdout
    assert "Rank 1 exited with RuntimeError at ProfilerStep#8; its trace is partial" in text


async def test_the_job_viewer_says_the_cause_first_and_its_knock_ons_in_one_phrase(tmp_path):
    from kinetoscope.tui.job.job_app import JobApp
    from test_tui_job import SIZE, overview

    write_job(tmp_path)
    put(tmp_path, 1, record(1, tmp_path / "rank1.json", ended_unix=T0 + 1, message=GLOO))
    put(tmp_path, 2, record(2, tmp_path / "rank2.json", ended_unix=T0, message="boom"))
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        title = " ".join(str(screen.query_one("#ranks-title").render()).split())
        cause = "rank 2 exited with RuntimeError at ProfilerStep#1; its trace is partial"
        knock = "rank 1 stopped after it (knock-on: its peer rank 2 failed first)"
        assert cause in title and knock in title
        assert title.index(cause) < title.index(knock)
        assert "rank 1 exited" not in title
        straggler = " ".join(str(screen.query_one("#ranks-straggler").render()).split())
        assert "straggler: rank" not in straggler  # rank 0 alone is left
        assert "rank 2 failed, rank 1 knock-on" in straggler
        assert [(r.rank, r.status) for r in screen.matrix.rows] == [
            (0, "ok"),
            (1, "knock-on"),
            (2, "failed"),
        ]
        assert [r[1] for r in screen.breakdown.visible_texts()] == ["ok", "knock-on", "failed"]
        row = screen.matrix.rows[1]
        assert row.problem == (
            "stopped because its peer rank 2 failed first (RuntimeError at ProfilerStep#1: "
            "gloo: connection closed by peer); its trace is partial"
        )


async def test_the_job_viewer_names_a_killed_ranks_knock_on(tmp_path):
    """Rank 2 was killed (lost, no trace); rank 1 then failed on gloo's connection: the title
    says rank 2 first, rank 1 after it; the straggler line names rank 1 as a knock-on."""
    from kinetoscope.tui.job.job_app import JobApp
    from test_tui_job import SIZE, overview

    write_job(tmp_path, ranks=(0, 1), world=3)
    put(tmp_path, 1, record(1, tmp_path / "rank1.json", ended_unix=T0, message=GLOO))
    put(tmp_path, 2, record(2, None, ended="lost", exception=None, message=None, step=None,
                            partial=False, ended_unix=None))  # fmt: skip
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        title = " ".join(str(screen.query_one("#ranks-title").render()).split())
        assert "rank 2 missing, rank 1 stopped after it (knock-on: its peer rank 2" in title
        straggler = " ".join(str(screen.query_one("#ranks-straggler").render()).split())
        assert straggler.endswith("(rank 1 knock-on)"), straggler


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
    # Rank 0 then fails in its all_reduce on gloo's lost connection: the killed rank's knock-on
    # (the killed rank has no end time; it is the only failure of its own). Unless torch's
    # launcher, which stops the other ranks once one has died, stopped it first.
    zero = next(r for r in document["ranks"] if r["rank"] == 0)["exit"]
    if zero["ended"] == "exception":
        assert "gloo" in zero["message"], zero
        assert document["health"]["cause"] == 1 and document["health"]["knock_on"] == [0]
        assert "kinetoscope: rank 0 stopped because its peer rank 1 failed first" in result.stderr
    elif zero["ended"] == "stopped":
        assert document["health"]["cause"] is None and document["health"]["knock_on"] == []
    else:
        # On a loaded machine the launcher may kill rank 0 outright too (SIGKILL after its
        # SIGTERM went unanswered): no word from it either, and no knock-on is claimed.
        assert zero["ended"] == "lost", zero
        assert document["health"]["knock_on"] == [], document["health"]
