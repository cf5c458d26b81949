"""`kinetoscope capture` in a distributed job: under torchrun, and starting its own ranks (--nproc).

The first tests need no torch (the rank environment, the run folder's name, the ranks' markers,
the arguments handed to the ranks); the last ones run real gloo jobs on the CPU through torch's
own launcher, which is what most of their time goes into (a torch import per rank).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kinetoscope.capture.ranks import (
    JOB_ENV,
    JobOutcome,
    RankEnv,
    RankOutcome,
    default_run_dir,
    marker_path,
    prepare_run_dir,
    process_start_time,
    rank_trace_name,
    report_job,
    wait_for_ranks,
    write_marker,
)
from kinetoscope.capture.session import CaptureError, CaptureOptions, CaptureResult
from kinetoscope.parser.rank_exit import read_record, record_name

from kinetoscope.commands.cli import build_parser

REPO = Path(__file__).resolve().parents[1]

TORCHRUN_ENV = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "GROUP_WORLD_SIZE": "2",
    "TORCHELASTIC_RUN_ID": "job-77",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
}


# the rank's environment and the run folder -------------------------------------------------


def test_rank_env_from_torchrun_variables() -> None:
    env = RankEnv.from_environ(TORCHRUN_ENV)
    assert env is not None
    assert (env.rank, env.world_size, env.local_rank, env.nodes) == (3, 4, 1, 2)
    assert env.run_id == "job-77" and not env.launched_by_kinetoscope
    assert RankEnv.from_environ({}) is None
    assert RankEnv.from_environ({"RANK": "0"}) is None  # no WORLD_SIZE: not a job
    with pytest.raises(CaptureError, match="do not fit"):
        RankEnv.from_environ({"RANK": "4", "WORLD_SIZE": "4"})
    # The token tells this job's markers from another run's in the same folder.
    other = RankEnv.from_environ({**TORCHRUN_ENV, "TORCHELASTIC_RESTART_COUNT": "1"})
    assert other is not None and other.token != env.token
    launched = RankEnv.from_environ({**TORCHRUN_ENV, JOB_ENV: "abc"})
    assert launched is not None and launched.launched_by_kinetoscope and launched.token == "abc"


def test_run_folder_names(tmp_path: Path) -> None:
    one_machine = RankEnv(rank=1, world_size=2, run_id="3f2a-uuid")
    folder = default_run_dir("my train", one_machine, tmp_path)
    # Named after the launcher's (this process's parent's) start, so every rank agrees.
    started = process_start_time(os.getppid())
    assert started is not None
    assert folder.parent == tmp_path
    assert folder.name.startswith("my_train_")
    assert folder == default_run_dir("my train", RankEnv(rank=0, world_size=2), tmp_path)
    # Across machines the launcher's run id names it, and without one -o must.
    several = RankEnv(rank=5, world_size=8, nodes=2, run_id="job-77")
    assert default_run_dir("train", several, tmp_path) == tmp_path / "train_job-77"
    with pytest.raises(CaptureError, match="-o DIR"):
        default_run_dir("train", RankEnv(rank=5, world_size=8, nodes=2, run_id="none"), tmp_path)
    assert rank_trace_name(12) == "rank12.pt.trace.json.gz"
    assert rank_trace_name(2, restart=1) == "rank2.restart1.pt.trace.json.gz"


def test_prepare_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    prepare_run_dir(run_dir)
    prepare_run_dir(run_dir)  # every rank creates it; the second is fine
    assert run_dir.is_dir()
    with pytest.raises(CaptureError, match="names the run folder"):
        prepare_run_dir(tmp_path / "out.pt.trace.json.gz")
    with pytest.raises(CaptureError, match="does not exist"):
        prepare_run_dir(tmp_path / "missing" / "run")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CaptureError, match="not a folder"):
        prepare_run_dir(tmp_path / "file")


# rank 0 waiting for the others ---------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


def _result(path: Path | None, reason: str = "") -> CaptureResult:
    return CaptureResult(path, 3, CaptureOptions(), reason)


def test_wait_for_ranks_collects_markers_and_names_what_is_missing(tmp_path: Path) -> None:
    env = RankEnv(rank=0, world_size=4, run_id="r")
    for rank in (0, 1):
        trace = tmp_path / rank_trace_name(rank)
        trace.write_bytes(b"x")
        write_marker(tmp_path, RankEnv(rank=rank, world_size=4, run_id="r"), _result(trace), 0)
    write_marker(
        tmp_path,
        RankEnv(rank=2, world_size=4, run_id="r"),
        _result(None, "only 2 steps were seen"),
        4,
    )
    # Rank 3's marker is from an earlier run (another token): ignored. Its trace of that run
    # is there too, and is reported as not finished.
    write_marker(tmp_path, RankEnv(rank=3, world_size=4, run_id="old"), _result(None), 0)
    (tmp_path / rank_trace_name(3)).write_bytes(b"old")
    clock = FakeClock()
    said: list[str] = []
    job = wait_for_ranks(
        tmp_path, 4, env.token, timeout=30, announce=said.append, clock=clock, sleep=clock.sleep
    )
    assert 30 <= clock.now < 31  # waited the whole timeout for rank 3
    assert [r.finished for r in job.ranks] == [True, True, True, False]
    assert [r.trace is not None for r in job.ranks] == [True, True, False, True]
    assert job.ranks[2].reason == "only 2 steps were seen" and job.ranks[2].exit_code == 4
    assert job.unfinished == [3]
    assert said == ["kinetoscope: waiting for rank 3 to finish (up to 30 s; --rank-timeout)"]
    # The markers read are removed; the stale one stays.
    assert not marker_path(tmp_path, 0).exists() and marker_path(tmp_path, 3).exists()
    lines: list[str] = []
    report_job(job, lines.append)
    assert lines[0] == f"kinetoscope: 3 of 4 ranks wrote their traces into {tmp_path}"
    assert "kinetoscope: rank 2: no trace: only 2 steps were seen" in lines
    assert any(line.startswith("kinetoscope: rank 3: not finished after 30 s") for line in lines)
    assert lines[-2:] == [
        f"summary: kinetoscope summary {tmp_path}",
        f"view it with: kinetoscope {tmp_path}",
    ]


def test_wait_for_ranks_returns_as_soon_as_all_are_done(tmp_path: Path) -> None:
    env = RankEnv(rank=0, world_size=2, run_id="r")
    for rank in (0, 1):
        trace = tmp_path / rank_trace_name(rank)
        trace.write_bytes(b"x")
        write_marker(tmp_path, RankEnv(rank=rank, world_size=2, run_id="r"), _result(trace), 0)
    clock = FakeClock()
    job = wait_for_ranks(tmp_path, 2, env.token, timeout=120, clock=clock, sleep=clock.sleep)
    assert clock.now == 0 and len(job.written) == 2
    lines: list[str] = []
    report_job(job, lines.append)
    assert lines[0] == f"kinetoscope: all 2 ranks wrote their traces into {tmp_path}"


def test_a_rank_that_cannot_start_says_so_to_rank_0(tmp_path: Path, monkeypatch, capsys) -> None:
    """A rank whose file exists (no --force) stops before its program runs; its marker tells
    rank 0 why, so rank 0 does not wait for it."""
    from kinetoscope.commands.cli import main

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / rank_trace_name(1)).write_bytes(b"precious")
    (tmp_path / "train.py").write_text("raise SystemExit('the program must not run')")
    monkeypatch.chdir(tmp_path)
    for key, value in {**TORCHRUN_ENV, "RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    assert main(["capture", "-o", "run", "train.py"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"kinetoscope: {Path('run') / rank_trace_name(1)} exists; pass --force to overwrite it"
    )
    assert (run_dir / rank_trace_name(1)).read_bytes() == b"precious"
    env = RankEnv.from_environ()
    assert env is not None
    clock = FakeClock()
    job = wait_for_ranks(run_dir, 2, env.token, timeout=0, clock=clock, sleep=clock.sleep)
    assert job.ranks[1].finished and job.ranks[1].trace is None
    assert job.ranks[1].reason.endswith("exists; pass --force to overwrite it")
    lines: list[str] = []
    report_job(job, lines.append)
    assert lines[0] == f"kinetoscope: 0 of 2 ranks wrote their traces into {run_dir}"
    assert lines[1].startswith("kinetoscope: rank 0: no trace: not finished after 0 s")
    assert lines[2].startswith("kinetoscope: rank 1: no trace: ")
    one = JobOutcome(run_dir, 1, [RankOutcome(0, run_dir / rank_trace_name(0), finished=True)])
    lines.clear()
    report_job(one, lines.append)
    assert lines[0] == f"kinetoscope: the one rank wrote its trace into {run_dir}"


def test_python_api_in_a_rank_writes_the_rank_file(tmp_path: Path, monkeypatch) -> None:
    """`with profile(...)` in every rank of a torchrun job: each rank's own file in one run
    folder (by default every rank would pick NAME_<second>.pt.trace.json.gz in the same folder
    and race for it); a second block of the same rank gets the next name."""
    torch = pytest.importorskip("torch")
    from kinetoscope.capture import profile

    monkeypatch.chdir(tmp_path)
    for key, value in {**TORCHRUN_ENV, "RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    paths = []
    for _ in range(2):
        with profile(steps=1, wait=0, warmup=1, name="fit", quiet=True) as prof:
            for _ in range(3):
                model(torch.randn(2, 4)).sum().backward()
                optimizer.step()
        paths.append(prof.path)
    assert tmp_path.joinpath("fit_job-77").is_dir()  # two machines: named after --rdzv-id
    run_dir = tmp_path / "fit_job-77"
    assert paths == [run_dir / "rank1.pt.trace.json.gz", run_dir / "rank1.2.pt.trace.json.gz"]
    assert _job_files(run_dir) == ["rank1.2.pt.trace.json.gz", "rank1.pt.trace.json.gz"]


def test_on_a_terminal_the_job_viewer_opens_on_the_folder(tmp_path: Path, monkeypatch) -> None:
    import kinetoscope.commands.view
    from kinetoscope.commands import capture as cli

    opened: list[list[str]] = []

    def fake_job_view(inputs: list[str], cycle: int | None = None) -> int:
        opened.append(inputs)
        return 0

    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(kinetoscope.commands.view, "run_job_view", fake_job_view)
    cli._view_folder(tmp_path, view=True)  # not a terminal here: nothing opens
    assert opened == []
    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr(sys, "stdout", Terminal())
    cli._view_folder(tmp_path, view=False)  # --no-view
    assert opened == []
    cli._view_folder(tmp_path, view=True)
    assert opened == [[str(tmp_path)]]


# the arguments the ranks get from --nproc ----------------------------------------------------


@pytest.mark.parametrize(
    "program",
    [
        ["train.py", "--lr", "0.1", "-o", "x"],
        ["-m", "pkg.train", "--wait", "9"],
        ["-c", "print(1)", "a"],
    ],
)
def test_rank_arguments_parse_back_to_the_same_capture(
    tmp_path: Path, program, monkeypatch
) -> None:
    from kinetoscope.commands.capture import _program_from_args, _rank_capture_args

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    argv = ["capture", "--nproc", "4", "--wait", "1", "--warmup", "0", "--active", "2"]
    argv += ["--record-shapes", "--steps-from", "time:0.5", "--force", *program]
    args = build_parser().parse_args(argv)
    rank_args = _rank_capture_args(args, _program_from_args(args), tmp_path / "run")
    again = build_parser().parse_args(["capture", *rank_args])
    assert again.nproc is None and again.no_view and again.output == str(tmp_path / "run")
    for key in ("wait", "warmup", "active", "steps_from", "record_shapes", "force", "module"):
        assert getattr(again, key) == getattr(args, key), key
    assert _program_from_args(again) == _program_from_args(args)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV and k != JOB_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def run_kinetoscope(
    args: list[str], cwd: Path, timeout: float = 240, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_nproc_refused_inside_a_rank_and_when_not_positive(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    inside = run_kinetoscope(
        ["capture", "--nproc", "2", "train.py"], tmp_path, RANK="0", WORLD_SIZE="2"
    )
    assert inside.returncode == 1
    assert inside.stderr.strip() == (
        "kinetoscope: --nproc starts ranks itself; this is already a rank of a job (RANK is set)"
    )
    zero = run_kinetoscope(["capture", "--nproc", "0", "train.py"], tmp_path)
    assert zero.returncode == 2  # a usage error
    assert zero.stderr.strip() == "kinetoscope: --nproc needs 1 or more ranks, got 0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


# real jobs (gloo on the CPU) -----------------------------------------------------------------

# Each rank runs STEPS optimizer steps; rank SLOW sleeps SLEEP seconds in every step before the
# all_reduce of the gradients, so every other rank waits for it there.
DDP = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    steps, slow, sleep = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        if rank == slow:
            time.sleep(sleep)
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
    """
)


def _trace(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _job_files(run_dir: Path) -> list[str]:
    """The run folder's files but the ranks' hidden exit records (tests/test_rank_exit.py)."""
    return sorted(
        p.name for p in run_dir.iterdir() if not p.name.endswith(".kinetoscope-exit.json")
    )


@pytest.fixture
def ddp(tmp_path: Path) -> Path:
    pytest.importorskip("torch.distributed")
    (tmp_path / "ddp.py").write_text(DDP)
    return tmp_path


@pytest.mark.slow
def test_under_torchrun_each_rank_writes_into_one_folder(ddp: Path) -> None:
    """torchrun starts the ranks; no -o: they agree on one folder; rank 0 reports it once.
    With --whole-run the recording starts before the program sets up its process group, and
    the trace still says which rank wrote it (distributedInfo)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "kinetoscope",
            "capture",
            "--whole-run",
            "ddp.py",
            "4",
            "1",
            "0.0",
        ],
        cwd=ddp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    folders = [p for p in ddp.iterdir() if p.is_dir()]
    assert len(folders) == 1 and folders[0].name.startswith("ddp_"), folders
    run_dir = folders[0]
    assert _job_files(run_dir) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    for rank in (0, 1):
        info = _trace(run_dir / rank_trace_name(rank))["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, 2, "gloo")
    # Only rank 0 speaks, once every rank is done.
    assert result.stderr.count("kinetoscope: all 2 ranks wrote their traces into") == 1
    assert result.stderr.count("kinetoscope: profiling ddp.py") == 1
    assert f"summary: kinetoscope summary {run_dir}" in result.stderr


@pytest.mark.slow
def test_nproc_one_command_and_the_straggler_is_named(ddp: Path) -> None:
    """`capture --nproc 4`: a real 4-rank gloo job in which rank 2 sleeps 0.1 s before every
    all_reduce; the job's summary names rank 2 as the straggler (it arrives last, so it waits
    least)."""
    run_dir = ddp / "run"
    result = run_kinetoscope(
        [
            "capture",
            "--nproc",
            "4",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "3",
            "-o",
            str(run_dir),
            "ddp.py",
            "6",
            "2",
            "0.1",
        ],
        ddp,
    )
    assert result.returncode == 0, result.stderr
    assert _job_files(run_dir) == [rank_trace_name(rank) for rank in range(4)]
    # Each rank's exit record beside its trace: every one ended normally.
    for rank in range(4):
        ended = read_record(str(run_dir / record_name(rank)))
        assert ended is not None and ended.clean and ended.trace == rank_trace_name(rank)
    assert f"kinetoscope: all 4 ranks wrote their traces into {run_dir}" in result.stderr
    assert f"summary: kinetoscope summary {run_dir}" in result.stderr
    assert result.stderr.count("kinetoscope: profiling ddp.py") == 1
    # The same -o again is refused (before any rank starts), and --force overwrites.
    again = run_kinetoscope(["capture", "--nproc", "4", "-o", str(run_dir), "ddp.py"], ddp)
    assert again.returncode == 1
    assert (
        again.stderr.strip()
        == f"kinetoscope: {run_dir / 'rank0.pt.trace.json.gz'} exists; pass --force to overwrite it"
    )

    summary = run_kinetoscope(["summary", str(run_dir), "--json"], ddp)
    assert summary.returncode == 0, summary.stderr
    document = json.loads(summary.stdout)
    assert document["world_size"] == 4
    assert sorted(rank["rank"] for rank in document["ranks"]) == [0, 1, 2, 3]
    straggler = document["straggler"]
    assert straggler["rank"] == 2
    # It is late by its sleeps (3 recorded steps x 0.1 s), spent outside any profiled op.
    assert 0.25e6 < straggler["lateness_us"] < 1.5e6, straggler
    assert straggler["phase"] == "host_other", straggler


FOREVER = textwrap.dedent(
    """
    import time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    while step < 5000:  # about a minute: stopped long before, unless something is wrong
        model(torch.randn(2, 4)).sum().backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step == 4:
            open(f"started{dist.get_rank()}", "w").close()
        time.sleep(0.01)
    """
)


@pytest.mark.slow
def test_nproc_stopped_by_sigterm_still_writes_and_reports(tmp_path: Path) -> None:
    """A job scheduler's SIGTERM to `capture --nproc` reaches the ranks through the launcher:
    each writes what it recorded, and the folder is reported."""
    import signal
    import time

    pytest.importorskip("torch.distributed")
    (tmp_path / "forever.py").write_text(FOREVER)
    command = [sys.executable, "-m", "kinetoscope", "capture", "--nproc", "2", "--wait", "0"]
    command += ["--warmup", "1", "--active", "100000", "-o", "run", "forever.py"]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not all((tmp_path / f"started{rank}").exists() for rank in (0, 1)):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the ranks never reached step 4"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    run_dir = tmp_path / "run"
    assert _job_files(run_dir) == [rank_trace_name(0), rank_trace_name(1)]
    for rank in (0, 1):
        assert _trace(run_dir / rank_trace_name(rank))["distributedInfo"]["rank"] == rank
    assert "kinetoscope: all 2 ranks wrote their traces into run" in stderr
    # Stopped, not failed: each rank's record says so, and the report too.
    for rank in (0, 1):
        ended = read_record(str(run_dir / record_name(rank)))
        assert ended is not None and ended.ended == "stopped" and ended.exit_code == 143
    assert "kinetoscope: rank 0 was stopped (SIGTERM) at ProfilerStep#" in stderr
