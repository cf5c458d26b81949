"""Capturing a distributed job: one trace per rank in one run folder.

Two ways in:

* `torchrun ... -m kinetoscope capture [options] train.py` (or any launcher that sets `RANK` and
  `WORLD_SIZE`): every rank profiles itself and writes `rank{R}.pt.trace.json.gz` into the run
  folder; rank 0 waits until every rank has finished, then opens the viewer on the folder (or
  prints the commands that open it).
* `kinetoscope capture --nproc N train.py`: kinetoscope starts N local ranks itself through
  torch's own launcher (`python -m torch.distributed.run --standalone`), each as above, and
  reports on the folder once the launcher is done.

Each rank leaves a small marker (`.rank{R}.kinetoscope-done`, JSON) when its program has ended,
saying which trace it wrote or why it wrote none; the reporting process reads and removes them.
A marker carries the job's token, so markers of an earlier run in the same folder are ignored.

torch is not imported here: the launcher runs in a child process.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kinetoscope.capture.runner import Outcome
from kinetoscope.capture.session import TRACE_SUFFIX, CaptureError, CaptureResult
from kinetoscope.parser.rank_exit import (
    EXCEPTION,
    EXIT,
    LOST,
    OK,
    STOPPED,
    RankExit,
    knock_ons,
    make_record,
    parse_record,
    record_name,
)

# Set by `capture --nproc` for its ranks: the job's token. Its presence tells rank 0 that the
# launching process reports on the folder, so rank 0 itself neither waits nor opens the viewer.
JOB_ENV = "KINETOSCOPE_CAPTURE_JOB"
MARKER_SUFFIX = ".kinetoscope-done"
DEFAULT_RANK_TIMEOUT = 120.0


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in a distributed job, from the launcher's environment."""

    rank: int
    world_size: int
    local_rank: int = 0
    nodes: int = 1  # GROUP_WORLD_SIZE: machines (agents) in the job
    run_id: str = ""  # TORCHELASTIC_RUN_ID ("none" when the launcher was not given one)
    restart: int = 0  # TORCHELASTIC_RESTART_COUNT
    master: str = ""  # MASTER_ADDR:MASTER_PORT
    job_token: str = ""  # JOB_ENV, when started by `capture --nproc`

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RankEnv | None:
        """The rank's place, or None when this is not a rank of a job (no RANK/WORLD_SIZE)."""
        env = os.environ if environ is None else environ
        rank = _int_or_none(env.get("RANK"))
        world = _int_or_none(env.get("WORLD_SIZE"))
        if rank is None or world is None:
            return None
        if world < 1 or not 0 <= rank < world:
            raise CaptureError(f"RANK={rank} and WORLD_SIZE={world} do not fit together")
        return cls(
            rank=rank,
            world_size=world,
            local_rank=_int_or_none(env.get("LOCAL_RANK")) or 0,
            nodes=max(1, _int_or_none(env.get("GROUP_WORLD_SIZE")) or 1),
            run_id=env.get("TORCHELASTIC_RUN_ID", ""),
            restart=max(0, _int_or_none(env.get("TORCHELASTIC_RESTART_COUNT")) or 0),
            master=f"{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}",
            job_token=env.get(JOB_ENV, ""),
        )

    @property
    def launched_by_kinetoscope(self) -> bool:
        return bool(self.job_token)

    @property
    def token(self) -> str:
        """Tells this job's markers from an earlier run's in the same folder."""
        if self.job_token:
            return self.job_token
        return f"{self.run_id}|{self.restart}|{self.master}|{self.world_size}"

    def describe(self) -> str:
        return f"rank {self.rank} of {self.world_size}"


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


# names -------------------------------------------------------------------------------------


def _stem(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._-") or "trace"


def rank_trace_name(rank: int, restart: int = 0) -> str:
    """`rank3.pt.trace.json.gz`; a restarted job (torchrun --max-restarts) adds `.restart1`."""
    extra = f".restart{restart}" if restart else ""
    return f"rank{rank}{extra}{TRACE_SUFFIX}"


def next_rank_trace(run_dir: Path, env: RankEnv) -> Path:
    """This rank's next unused file in the run folder: `rank3.pt.trace.json.gz`, then
    `rank3.2.pt.trace.json.gz`... (several profiled blocks of one program). Only this rank
    writes names that start with its rank, so the ranks never race for a name."""
    first = run_dir / rank_trace_name(env.rank, env.restart)
    stem = first.name[: -len(TRACE_SUFFIX)]
    candidate, counter = first, 2
    while candidate.exists():
        candidate = run_dir / f"{stem}.{counter}{TRACE_SUFFIX}"
        counter += 1
    return candidate


def new_run_dir(label: str, directory: Path | None = None) -> Path:
    """An unused folder name `<label>_<YYYYmmdd-HHMMSS>` (with `_2`... on a clash)."""
    directory = Path.cwd() if directory is None else directory
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = directory / f"{_stem(label)}_{stamp}"
    counter = 2
    while candidate.exists():
        candidate = directory / f"{_stem(label)}_{stamp}_{counter}"
        counter += 1
    return candidate


def default_run_dir(label: str, env: RankEnv, directory: Path | None = None) -> Path:
    """The folder every rank of this job agrees on, without talking to the others.

    On one machine the ranks share their parent, torch's launcher: the folder is named after
    its start time, `<label>_<YYYYmmdd-HHMMSS>`. Across machines the launcher's run id
    (`--rdzv-id`, the same on every node) names it; without one, `-o DIR` must.
    """
    directory = Path.cwd() if directory is None else directory
    if env.nodes > 1:
        if env.run_id and env.run_id != "none":
            return directory / f"{_stem(label)}_{_stem(env.run_id)}"
        raise CaptureError(
            "a job on several machines needs -o DIR (a folder every machine writes to, at the "
            "same path) or torchrun --rdzv-id ID"
        )
    started = process_start_time(os.getppid())
    if started is not None:
        stamp = _dt.datetime.fromtimestamp(started).strftime("%Y%m%d-%H%M%S")
        return directory / f"{_stem(label)}_{stamp}"
    if env.run_id and env.run_id != "none":
        return directory / f"{_stem(label)}_{_stem(env.run_id)[:8]}"
    raise CaptureError("cannot name a run folder all ranks agree on here: give -o DIR")


def process_start_time(pid: int) -> float | None:
    """When process `pid` started, as a Unix time (Linux /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read().decode("ascii", "replace")
        with open("/proc/stat", "rb") as system_file:
            system = system_file.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields start after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    boot = re.search(r"^btime (\d+)", system, re.MULTILINE)
    try:
        ticks = int(fields[19])  # field 22, starttime, in clock ticks since boot
        hertz = os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None
    if boot is None or hertz <= 0:
        return None
    return int(boot.group(1)) + ticks / hertz


def prepare_run_dir(run_dir: Path) -> None:
    """Create the run folder (every rank may try at once); its parent must exist."""
    if run_dir.name.endswith((".json", ".json.gz")):
        raise CaptureError(
            f"-o {run_dir}: in a multi-rank capture -o names the run folder, not a trace file"
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise CaptureError(f"{run_dir} exists and is not a folder")
    if not run_dir.parent.is_dir():
        raise CaptureError(f"folder {run_dir.parent} does not exist")
    try:
        run_dir.mkdir(exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"cannot create {run_dir}: {exc.strerror or exc}") from None


# markers -----------------------------------------------------------------------------------


def marker_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f".rank{rank}{MARKER_SUFFIX}"


def write_marker(
    run_dir: Path,
    env: RankEnv,
    result: CaptureResult,
    exit_code: int,
    exit_record: dict | None = None,
) -> None:
    """Say that this rank is done: the trace it wrote, or why none, and how its program ended
    (best effort)."""
    record = {
        "token": env.token,
        "rank": env.rank,
        "world_size": env.world_size,
        "trace": result.path.name if result.path is not None else None,
        "reason": result.reason,
        "exit_code": exit_code,
        "exit": exit_record,
    }
    _write_json(marker_path(run_dir, env.rank), record)


def _write_json(final: Path, record: dict) -> None:
    """Write `record` to `final` whole or not at all (a temporary file renamed into place)."""
    partial = final.with_name(f"{final.name}.{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(record))
        os.replace(partial, final)
    except (OSError, TypeError, ValueError):
        try:
            partial.unlink()
        except OSError:
            pass


# exit records: how each rank ended, kept beside its trace ------------------------------------


def exit_record_path(run_dir: Path, env: RankEnv) -> Path:
    return run_dir / record_name(env.rank, env.restart)


def clear_exit_record(run_dir: Path, env: RankEnv) -> None:
    """Remove this rank's record of an earlier run, before the program starts."""
    try:
        exit_record_path(run_dir, env).unlink()
    except OSError:
        pass


def exit_record(env: RankEnv, result: CaptureResult, outcome: Outcome) -> dict:
    """How this rank's program ended (parser/rank_exit.py reads it back): the ending, the
    exception's type and message, the ProfilerStep#N it was in, whether its trace is partial."""
    import socket

    opts = result.options
    last = opts.first_recorded_step + opts.active - 1
    after_window = opts.windowed and result.steps_seen > last
    if outcome.crashed:
        ended, code = EXCEPTION, outcome.exit_code
    elif outcome.interrupted:
        ended, code = STOPPED, outcome.exit_code
    else:
        ended, code = (OK if outcome.exit_code == 0 else EXIT), outcome.exit_code
    written = result.path is not None
    trace_bytes = None
    if written:
        try:
            trace_bytes = result.path.stat().st_size  # type: ignore[union-attr]
        except OSError:
            trace_bytes = None
    try:
        host = socket.gethostname()
    except OSError:
        host = None
    return make_record(
        rank=env.rank,
        world_size=env.world_size,
        restart=env.restart,
        ended=ended,
        exit_code=code,
        exception=outcome.exception,
        message=outcome.message,
        step=None if after_window else result.steps_seen,
        partial=written and not after_window,
        trace=result.path.name if written else None,  # type: ignore[union-attr]
        trace_bytes=trace_bytes,
        host=host,
        ended_unix=outcome.ended_unix or time.time(),
    )


def write_exit_record(run_dir: Path, env: RankEnv, record: dict) -> None:
    """Keep this rank's exit record in the run folder, beside its trace (best effort)."""
    _write_json(exit_record_path(run_dir, env), record)


def record_lost_ranks(job: JobOutcome, restart: int = 0) -> None:
    """For each rank that never said it was done (killed outright: SIGKILL, the OOM killer), an
    exit record `lost`, written by the reporting process, beside the trace it may have left
    (the rank's own record, should it still come, replaces it)."""
    for outcome in job.ranks:
        if outcome.finished:
            continue
        trace = outcome.trace
        size = None
        if trace is not None:
            try:
                size = trace.stat().st_size
            except OSError:
                trace = None
        record = make_record(
            rank=outcome.rank,
            world_size=job.world_size,
            restart=restart,
            ended=LOST,
            exit_code=-1,
            exception=None,
            message=outcome.reason or None,
            step=None,
            partial=trace is not None,
            trace=trace.name if trace is not None else None,
            trace_bytes=size,
            host=None,
            ended_unix=None,
        )
        outcome.exit = parse_record(record)
        _write_json(job.run_dir / record_name(outcome.rank, restart), record)


@dataclass
class RankOutcome:
    """What one rank left in the run folder."""

    rank: int
    trace: Path | None = None
    reason: str = ""  # why there is no trace
    finished: bool = False  # its marker was found
    exit_code: int | None = None
    exit: RankExit | None = None  # how its program ended (its exit record)


@dataclass
class JobOutcome:
    """What the ranks of a job left in the run folder."""

    run_dir: Path
    world_size: int
    ranks: list[RankOutcome] = field(default_factory=list)

    @property
    def written(self) -> list[RankOutcome]:
        return [r for r in self.ranks if r.trace is not None]

    @property
    def unfinished(self) -> list[int]:
        return [r.rank for r in self.ranks if not r.finished]


def read_marker(path: Path, token: str) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("token") != token:
        return None
    return record


def wait_for_ranks(
    run_dir: Path,
    world_size: int,
    token: str,
    *,
    timeout: float,
    announce: Callable[[str], None] | None = None,
    poll: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobOutcome:
    """Wait (up to `timeout` seconds) until every rank's marker is in `run_dir`; collect them.

    Markers read are removed. A rank whose marker names no trace, or that left none in time,
    is reported with its reason.
    """
    outcomes = {rank: RankOutcome(rank) for rank in range(world_size)}
    deadline = clock() + max(0.0, timeout)
    said_waiting = False
    started = clock()
    while True:
        for rank, outcome in outcomes.items():
            if outcome.finished:
                continue
            marker = marker_path(run_dir, rank)
            record = read_marker(marker, token)
            if record is None:
                continue
            outcome.finished = True
            name = record.get("trace")
            if isinstance(name, str) and name and (run_dir / name).is_file():
                outcome.trace = run_dir / name
            else:
                outcome.reason = str(record.get("reason") or "no trace written")
            code = record.get("exit_code")
            outcome.exit_code = code if isinstance(code, int) else None
            outcome.exit = parse_record(record.get("exit"))
            try:
                marker.unlink()
            except OSError:
                pass
        missing = [rank for rank, outcome in outcomes.items() if not outcome.finished]
        now = clock()
        if not missing or now >= deadline:
            break
        if not said_waiting and announce is not None and now - started >= 2.0:
            said_waiting = True
            announce(
                f"kinetoscope: waiting for {_rank_list(missing)} to finish "
                f"(up to {timeout:g} s; --rank-timeout)"
            )
        sleep(min(poll, max(0.0, deadline - now)))
    for rank in missing:
        outcome = outcomes[rank]
        # No marker: the rank may have been killed after writing its window.
        candidate = run_dir / rank_trace_name(rank)
        outcome.reason = f"not finished after {timeout:g} s"
        if candidate.is_file():
            outcome.trace = candidate
    return JobOutcome(run_dir, world_size, [outcomes[rank] for rank in range(world_size)])


def _rank_list(ranks: list[int]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[:8]) + (", ..." if len(ranks) > 8 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def open_commands(run_dir: Path) -> list[str]:
    """The commands that look at a run folder."""
    import shlex

    quoted = shlex.quote(str(run_dir))
    return [f"kinetoscope summary {quoted}", f"kinetoscope {quoted}"]


def exit_line(outcome: RankOutcome, first: bool = False) -> str:
    """`rank 2 exited with RuntimeError at ProfilerStep#8; its trace is partial: why`."""
    ended = outcome.exit
    assert ended is not None
    text = f"rank {outcome.rank} {ended.describe()}"
    if ended.trace is None and outcome.reason and outcome.reason != ended.message:
        text += f" ({outcome.reason})"
    if ended.message:
        text += f": {ended.message}"
    return text + (" (the first rank to fail)" if first else "")


def report_job(job: JobOutcome, announce: Callable[[str], None]) -> None:
    """Say what the ranks wrote, which failed or did not write, and how to look at the folder."""
    written = len(job.written)
    ended_badly = sorted(
        (o for o in job.ranks if o.exit is not None and not o.exit.clean),
        key=lambda o: (o.exit.ended_unix or float("inf"), o.rank),  # type: ignore[union-attr]
    )
    failed = [o for o in ended_badly if o.exit.failed]  # type: ignore[union-attr]
    # The ranks that failed on a peer error after another failed (knock-on failures) are said
    # in one line, after the failure they followed.
    knocked = knock_ons([o.exit for o in failed if o.exit is not None])
    knock_ranks = {r.rank for r in knocked.ranks}
    if failed:
        own = [o.rank for o in sorted(failed, key=lambda o: o.rank) if o.rank not in knock_ranks]
        names = _rank_list(own) + " failed"
        if knock_ranks and knocked.cause is not None:
            after = "it" if len(own) == 1 else f"rank {knocked.cause.rank}"
            names += f" ({_rank_list(sorted(knock_ranks))} stopped after {after}: knock-on)"
        announce(
            f"kinetoscope: {names}; {written} of {job.world_size} ranks wrote "
            f"{'a trace' if written == 1 else 'traces'} into {job.run_dir}"
        )
    elif written == job.world_size == 1:
        announce(f"kinetoscope: the one rank wrote its trace into {job.run_dir}")
    elif written == job.world_size:
        announce(f"kinetoscope: all {job.world_size} ranks wrote their traces into {job.run_dir}")
    else:
        announce(
            f"kinetoscope: {written} of {job.world_size} ranks wrote their traces into "
            f"{job.run_dir}"
        )
    timed = [o for o in failed if o.exit.ended_unix is not None]  # type: ignore[union-attr]
    for outcome in ended_badly:
        if outcome.rank in knock_ranks:
            continue
        first = len(failed) > 1 and bool(timed) and outcome is timed[0]
        announce(f"kinetoscope: {exit_line(outcome, first)}")
        if knocked.cause is not None and outcome.rank == knocked.cause.rank:
            announce(f"kinetoscope: {knocked.sentence()}")
    said = {o.rank for o in ended_badly}
    for outcome in job.ranks:
        if outcome.rank in said:
            continue
        if outcome.trace is None:
            announce(f"kinetoscope: rank {outcome.rank}: no trace: {outcome.reason}")
        elif not outcome.finished:
            announce(f"kinetoscope: rank {outcome.rank}: {outcome.reason} (its trace is kept)")
    if written:
        summary, view = open_commands(job.run_dir)
        announce(f"summary: {summary}")
        announce(f"view it with: {view}")


def open_folder_viewer(run_dir: Path, run_job_view: Callable[[list[str]], int]) -> bool:
    """Open the job viewer on a run folder (as `kinetoscope RUN_DIR` does) with `run_job_view`
    (the command's, handed down: the capture library imports no command); False when it could
    not be opened (it said why in one line)."""
    return run_job_view([str(run_dir)]) == 0


# --nproc: starting the ranks ---------------------------------------------------------------


def launcher_command(nproc: int, capture_args: list[str]) -> list[str]:
    """torch's own launcher, starting `nproc` ranks of `kinetoscope capture capture_args`."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "kinetoscope",
        "capture",
        *capture_args,
    ]


def check_launcher_available() -> None:
    """torch and torch.distributed must be importable for --nproc (checked without importing)."""
    import importlib.util

    from kinetoscope.capture.session import INSTALL_HINT, TorchMissing

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise TorchMissing(INSTALL_HINT)
    try:
        run_found = importlib.util.find_spec("torch.distributed.run") is not None
    except (ImportError, ValueError):
        run_found = False
    if not run_found:
        raise CaptureError("--nproc needs torch.distributed (this torch build has none)")


def launch_ranks(
    nproc: int,
    capture_args: list[str],
    run_dir: Path,
    *,
    announce: Callable[[str], None],
    timeout: float = 10.0,
) -> tuple[int, JobOutcome]:
    """Run `nproc` local ranks through torch's launcher; wait; collect the ranks' markers.

    A Ctrl-C reaches the ranks (they write what they recorded) and the launcher, a SIGTERM is
    passed on to the launcher; this process keeps waiting for them, so the folder is still
    reported.
    """
    token = uuid.uuid4().hex
    env = dict(os.environ)
    env[JOB_ENV] = token
    command = launcher_command(nproc, capture_args)
    try:
        process = subprocess.Popen(command, env=env)
    except OSError as exc:
        raise CaptureError(f"cannot start torch's launcher: {exc.strerror or exc}") from None
    # A SIGTERM (a job scheduler's stop) is passed on to the launcher, which stops the ranks;
    # they write what they recorded, and this process still reports on the folder.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(
            signal.SIGTERM, lambda signum, frame: process.send_signal(signal.SIGTERM)
        )
    try:
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:
                announce("kinetoscope: stopping the ranks; their traces are being written...")
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    job = wait_for_ranks(run_dir, nproc, token, timeout=timeout, announce=announce)
    return code, job
