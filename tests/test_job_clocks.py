"""One clock or several: ranks that ran on one host read one clock, so their 'offsets' are
arrival differences and aligning does nothing unless forced; elsewhere each offset comes with
its spread and whether it stands out of it. Known truth: the synthetic job of test_job.py,
whose clocks are set by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_job
from kinetoscope.parser.rank_exit import make_record, record_name
from test_job import job_of, rank_trace, summary, write_job


def with_hosts(folder: Path, hosts: dict[int, str | None]) -> None:
    """The synthetic job with `host_name` in each rank's header (None: no key)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, host in hosts.items():
        trace = rank_trace(rank)
        if host is not None:
            trace = {"host_name": host, **trace}
        (folder / f"rank{rank}.json").write_text(json.dumps(trace))


def waits(document: dict) -> dict:
    return next(c for c in document["collectives"] if c["kind"] == "all_reduce")["wait_us"]


AS_RECORDED = {"0": 500.0, "1": 0.0, "2": 350.0}  # the raw starts 1000, 1500, 1150 µs
ALIGNED = {"0": 400.0, "1": 0.0, "2": 200.0}  # the offsets (0, +100, -50) subtracted


def test_ranks_on_one_host_share_one_clock_and_aligning_is_a_no_op_unless_forced(tmp_path):
    with_hosts(tmp_path, {0: "node-a", 1: "node-a", 2: "node-a"})
    plain = job_of([str(tmp_path)])
    assert plain["clocks"] == {
        "one_clock": True,
        "hosts": ["node-a"],
        "host_source": "trace",
        "alignment": "not asked",
    }
    asked = job_of([str(tmp_path)], align=True)
    assert asked["clocks_aligned"] is False
    assert asked["clocks"]["alignment"] == "not needed: one host"
    assert waits(asked) == waits(plain) == AS_RECORDED
    # One clock: a wait is read on it, not estimated across clocks, so none is "within the
    # clock uncertainty" (rank 1's barrier wait of 103 µs was, with clocks 100 µs apart).
    barrier = next(c for c in asked["collectives"] if c["kind"] == "barrier")
    assert barrier["not_significant"] == []
    text = summary(str(tmp_path), "--align-clocks", "--width", "200").stdout
    assert "one clock: every rank ran on host node-a (said by their traces)" in text
    assert "--align-clocks has nothing to align" in text

    forced = summary(str(tmp_path), "--force-align-clocks", "--json")
    document = json.loads(forced.stdout)
    assert document["clocks_aligned"] is True and document["clocks"]["alignment"] == "forced"
    assert waits(document) == ALIGNED
    # --force-align-clocks is an option of a job, refused with one trace.
    one = summary(str(tmp_path / "rank0.json"), "--force-align-clocks")
    assert one.returncode == 2 and "--force-align-clocks" in one.stderr


def test_ranks_on_several_hosts_or_unknown_hosts_are_aligned_as_asked(tmp_path):
    with_hosts(tmp_path / "two", {0: "node-a", 1: "node-b", 2: "node-a"})
    document = job_of([str(tmp_path / "two")], align=True)
    assert document["clocks"]["one_clock"] is False
    assert document["clocks"]["hosts"] == ["node-a", "node-b"]
    assert document["clocks_aligned"] is True and waits(document) == ALIGNED
    # One rank without a host name: not known to be one host.
    with_hosts(tmp_path / "partial", {0: "node-a", 1: None, 2: "node-a"})
    document = job_of([str(tmp_path / "partial")], align=True)
    assert document["clocks"]["one_clock"] is False and waits(document) == ALIGNED
    # No host anywhere (the corpus's traces): as before.
    write_job(tmp_path / "none")
    document = job_of([str(tmp_path / "none")], align=True)
    assert document["clocks"] == {
        "one_clock": False,
        "hosts": [],
        "host_source": None,
        "alignment": "applied",
    }


def test_capture_records_name_the_host_when_the_traces_do_not(tmp_path):
    write_job(tmp_path)
    for rank in range(3):
        trace = tmp_path / f"rank{rank}.json"
        record = make_record(
            rank=rank, world_size=3, restart=0, ended="ok", exit_code=0, exception=None,
            message=None, step=None, partial=False, trace=trace.name,
            trace_bytes=trace.stat().st_size, host="box", ended_unix=1.0,
        )  # fmt: skip
        (tmp_path / record_name(rank)).write_text(json.dumps(record))
    document = job_of([str(tmp_path)], align=True)
    assert document["clocks"]["one_clock"] is True
    assert document["clocks"]["host_source"] == "capture"
    assert document["clocks_aligned"] is False and waits(document) == AS_RECORDED


def significance(document: dict) -> dict[int, bool | None]:
    return {r["rank"]: r["clock_offset_significant"] for r in document["ranks"]}


def test_an_offset_is_significant_only_against_its_spread(tmp_path, monkeypatch):
    # Skewed clocks (+100 µs with a 4 µs spread, -50 µs exactly): both stand out.
    write_job(tmp_path / "skewed")
    document = job_of([str(tmp_path / "skewed")])
    assert significance(document) == {0: None, 1: True, 2: True}
    text = summary(str(tmp_path / "skewed"), "--width", "200").stdout
    assert "n.s." not in text.split("Steps by rank")[0].replace("n.s.: not significant", "")

    # The null case: one clock for all (offsets 0); rank 1's ends still scatter by ±4 µs.
    monkeypatch.setattr(test_job, "OFFSET", {0: 0.0, 1: 0.0, 2: 0.0})
    write_job(tmp_path / "null")
    document = job_of([str(tmp_path / "null")])
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert ranks[1]["clock_offset_us"] == 0.0 and ranks[1]["clock_spread_us"] == 4.0
    assert significance(document) == {0: None, 1: False, 2: False}

    # Noisy: rank 1's ends scatter by ±50 µs around a 10 µs offset: not significant.
    noisy = [
        (name, args, {**times, 1: (times[1][0], times[1][1] + shift)})
        for (name, args, times), shift in zip(test_job.COLLECTIVES, (-36, 10, 56))
    ]
    monkeypatch.setattr(test_job, "COLLECTIVES", noisy)
    write_job(tmp_path / "noisy")
    document = job_of([str(tmp_path / "noisy")])
    ranks = {r["rank"]: r for r in document["ranks"]}
    assert ranks[1]["clock_offset_us"] == 10.0 and ranks[1]["clock_spread_us"] == 50.0
    assert significance(document)[1] is False
    text = summary(str(tmp_path / "noisy"), "--width", "200").stdout
    row = next(line for line in text.splitlines() if line.startswith("│ 1 "))
    assert "+10.000 µs ± 50.000 µs (n.s.)" in row


@pytest.mark.slow
def test_a_real_two_rank_job_on_this_host_reads_one_clock(tmp_path):
    """A real gloo job captured here: both traces name this host, so the job has one clock,
    however far apart the ranks' collectives end."""
    import socket

    from test_rank_exit import CRASH, _kinetoscope

    pytest.importorskip("torch.distributed")
    (tmp_path / "job.py").write_text(CRASH.replace("rank == 1 and step == 8", "False"))
    result = _kinetoscope(["capture", "--nproc", "2", "-o", "run", "--no-view", "job.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(
        _kinetoscope(["summary", "run", "--json", "--align-clocks"], tmp_path).stdout
    )
    assert document["clocks"]["one_clock"] is True
    assert document["clocks"]["hosts"] == [socket.gethostname()]
    assert document["clocks"]["host_source"] == "trace"
    assert document["clocks_aligned"] is False


async def test_the_viewer_says_one_clock_and_a_forces_alignment_on_the_second_press(tmp_path):
    from kinetoscope.tui.job.job_app import JobApp
    from test_tui_job import SIZE, overview

    with_hosts(tmp_path, {0: "node-a", 1: "node-a", 2: "node-a"})
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        assert "one clock (host node-a)" in str(screen.query_one("#ranks-title").render())
        await pilot.press("a")
        await pilot.pause()
        assert app.job.aligned is False
        assert any("nothing to align" in n.message for n in app._notifications)
        await pilot.press("a")
        await pilot.pause()
        assert app.job.aligned is True and app.job.align_forced
        assert "aligned anyway" in str(screen.query_one("#ranks-title").render())
        await pilot.press("a")
        await pilot.pause()
        assert app.job.aligned is False


def test_export_aligns_one_hosts_ranks_only_when_forced(tmp_path):
    import zipfile

    from test_export_job import export

    with_hosts(tmp_path / "job", {0: "node-a", 1: "node-a", 2: "node-a"})
    out = tmp_path / "job.zip"
    result = export(tmp_path / "job", "-o", out, "--step", "1", "--align-clocks")
    assert result.returncode == 0, result.stderr
    assert "one clock: every rank ran on host node-a" in result.stderr
    assert result.stdout.rstrip().endswith("clocks as recorded")
    with zipfile.ZipFile(out) as archive:
        record = json.loads(archive.read("perfetto_manifest.json"))["kinetoscope"]
    assert record["clocks"] == "as recorded"
    assert all(r["shift_ns"] == 0 for r in record["ranks"])
    forced = export(tmp_path / "job", "-o", tmp_path / "f.zip", "--step", "1",
                    "--force-align-clocks")  # fmt: skip
    assert forced.returncode == 0 and forced.stdout.rstrip().endswith("clocks aligned on rank 0")
    with zipfile.ZipFile(tmp_path / "f.zip") as archive:
        record = json.loads(archive.read("perfetto_manifest.json"))["kinetoscope"]
    assert [r["shift_ns"] for r in record["ranks"]] == [0, 100_000, -50_000]
