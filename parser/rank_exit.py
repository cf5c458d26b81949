"""How each rank of a captured job ended: the exit records `kinetoscope capture` leaves.

Every rank that `kinetoscope capture` runs in a distributed job (under torchrun, or started by
`capture --nproc`) writes, when its program has ended, one small JSON record beside its trace:
`.rank{R}.kinetoscope-exit.json` (`.rank{R}.restart{K}.…` for a rank restarted by torchrun),
hidden, so that a folder's listing of traces never takes it for one. It says how the program
ended (`ok`, an uncaught `exception`, a non-zero `exit`, `stopped` by Ctrl-C or SIGTERM), with
the exception's type and message and the `ProfilerStep#N` it was in, and whether the trace it
wrote holds the whole recording window (`partial`). It is written even when the program
raised: the rank's own process writes it after the program has ended. A rank killed outright
(SIGKILL, the OOM killer) cannot; the process that reports on the job (rank 0, or `capture
--nproc`) then writes one for it, `lost`, once it has waited for the rank in vain.

The records are read back from a folder written by anyone: each is at most `MAX_RECORD_BYTES`,
a plain file (no link, FIFO or device), every field is type-checked, texts are cut to
`MAX_TEXT` characters, and at most `MAX_RECORDS` are read per folder. A record that fails any
check is ignored, as is one whose trace is not the file it names (its size differs: a record
left by an earlier run). A folder without records (not written by capture) reads as no
records, and everything else behaves as before.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from functools import cached_property
from typing import Any

RECORD_KEY = "kinetoscope_rank_exit"
RECORD_VERSION = 1
EXIT_SUFFIX = ".kinetoscope-exit.json"
MAX_RECORD_BYTES = 16 << 10
MAX_TEXT = 300
MAX_RECORDS = 1 << 16
_NAME = re.compile(r"^\.rank(\d{1,7})(?:\.restart(\d{1,4}))?\.kinetoscope-exit\.json$")

OK = "ok"
EXCEPTION = "exception"
EXIT = "exit"
STOPPED = "stopped"
LOST = "lost"  # no word from the rank: written for it by the reporting process (killed?)
ENDINGS = (OK, EXCEPTION, EXIT, STOPPED, LOST)
_SIGNALS = {130: "Ctrl-C", 143: "SIGTERM"}


def record_name(rank: int, restart: int = 0) -> str:
    """`.rank3.kinetoscope-exit.json`; a restarted rank adds `.restart1`."""
    extra = f".restart{restart}" if restart else ""
    return f".rank{rank}{extra}{EXIT_SUFFIX}"


@dataclass(frozen=True)
class RankExit:
    """How one rank's program ended, as its exit record says."""

    rank: int
    ended: str  # one of ENDINGS
    exit_code: int | None = None
    exception: str | None = None  # the exception's type (`RuntimeError`)
    message: str | None = None  # its message, cut to MAX_TEXT
    step: int | None = None  # the ProfilerStep#N it ended in (None: after the window, unknown)
    partial: bool = False  # its trace stops inside the recording window
    trace: str | None = None  # the trace's file name (None: it wrote none)
    trace_bytes: int | None = None
    world_size: int | None = None
    host: str | None = None
    ended_unix: float | None = None  # when the program ended (the rank's wall clock)

    @property
    def failed(self) -> bool:
        """It ended with an uncaught exception or a non-zero exit status."""
        return self.ended in (EXCEPTION, EXIT, LOST)

    @property
    def clean(self) -> bool:
        return self.ended == OK

    def describe(self) -> str:
        """`exited with RuntimeError at ProfilerStep#8; its trace is partial`."""
        where = f" at ProfilerStep#{self.step}" if self.step is not None else ""
        if self.ended == EXCEPTION:
            text = f"exited with {self.exception or 'an exception'}{where}"
        elif self.ended == EXIT:
            text = f"exited with status {self.exit_code}{where}"
        elif self.ended == STOPPED:
            how = _SIGNALS.get(self.exit_code or 0, f"status {self.exit_code}")
            text = f"was stopped ({how}){where}"
        elif self.ended == LOST:
            text = "ended without a word (killed: SIGKILL, the OOM killer?)"
            if self.trace is not None:
                return text + "; its trace may be partial"
        else:
            text = "ended normally"
        if self.trace is None:
            return text + "; it wrote no trace"
        if self.partial and not self.clean:
            return text + "; its trace is partial"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "ended": self.ended,
            "exit_code": self.exit_code,
            "exception": self.exception,
            "message": self.message,
            "step": self.step,
            "partial": self.partial,
            "host": self.host,
            "text": self.describe(),
        }


def make_record(
    *,
    rank: int,
    world_size: int,
    restart: int,
    ended: str,
    exit_code: int,
    exception: str | None,
    message: str | None,
    step: int | None,
    partial: bool,
    trace: str | None,
    trace_bytes: int | None,
    host: str | None,
    ended_unix: float | None,
) -> dict[str, Any]:
    """The record a rank writes (capture/ranks.py), as a JSON-ready dict."""
    return {
        RECORD_KEY: RECORD_VERSION,
        "rank": rank,
        "world_size": world_size,
        "restart": restart,
        "ended": ended,
        "exit_code": exit_code,
        "exception": _text(exception),
        "message": _text(message),
        "step": step,
        "partial": partial,
        "trace": trace,
        "trace_bytes": trace_bytes,
        "host": _text(host),
        "ended_unix": ended_unix,
    }


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    # One line, printable: control characters (terminal escapes among them) become spaces.
    value = "".join(c if c.isprintable() else " " for c in value[: MAX_TEXT * 2])
    value = " ".join(value.split())
    return value[:MAX_TEXT] if len(value) > MAX_TEXT else value


def _int(value: Any, low: int, high: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


def parse_record(record: Any) -> RankExit | None:
    """A record's dict as a RankExit, or None when it is not a valid record."""
    if not isinstance(record, dict) or record.get(RECORD_KEY) != RECORD_VERSION:
        return None
    rank = _int(record.get("rank"), 0, 1 << 24)
    ended = record.get("ended")
    if rank is None or ended not in ENDINGS:
        return None
    trace = record.get("trace")
    if trace is not None and (
        not isinstance(trace, str)
        or not trace
        or len(trace) > 255
        or "/" in trace
        or "\\" in trace
        or trace in (".", "..")
        or "\x00" in trace
    ):
        return None
    partial = record.get("partial")
    ended_unix = record.get("ended_unix")
    if not isinstance(ended_unix, (int, float)) or isinstance(ended_unix, bool):
        ended_unix = None
    elif not 0 <= ended_unix < 1e11:
        ended_unix = None
    return RankExit(
        rank=rank,
        ended=ended,
        exit_code=_int(record.get("exit_code"), -(1 << 16), 1 << 16),
        exception=_text(record.get("exception")),
        message=_text(record.get("message")),
        step=_int(record.get("step"), 0, 1 << 40),
        partial=partial if isinstance(partial, bool) else False,
        trace=trace,
        trace_bytes=_int(record.get("trace_bytes"), 0, 1 << 50),
        world_size=_int(record.get("world_size"), 1, 1 << 24),
        host=_text(record.get("host")),
        ended_unix=float(ended_unix) if ended_unix is not None else None,
    )


def read_record(path: str) -> RankExit | None:
    """One record file, or None when it is not a plain, small, valid record."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            return None
        data = os.read(fd, MAX_RECORD_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD_BYTES:
        return None
    try:
        return parse_record(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def folder_records(folder: str) -> list[RankExit]:
    """The valid exit records in `folder` (not recursively), by rank."""
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    found = []
    for name in sorted(names):
        match = _NAME.match(name)
        if match is None:
            continue
        if len(found) >= MAX_RECORDS:
            break
        record = read_record(os.path.join(folder, name))
        if record is not None and record.rank == int(match.group(1)):
            found.append(record)
    return sorted(found, key=lambda r: r.rank)


def exits_of(
    paths_by_rank: dict[int, str], missing: list[int] | None = None
) -> dict[int, RankExit]:
    """Per rank of a job, its exit record: for each rank's trace (rank -> path), the record in
    the trace's folder that names this file, is this rank's, and matches the file's size; for
    each rank in `missing`, a record of that rank in the job's folders that wrote no trace.
    Ranks without such a record are absent."""
    by_folder: dict[str, dict[int, list[RankExit]]] = {}
    out: dict[int, RankExit] = {}
    for rank, path in paths_by_rank.items():
        folder = os.path.dirname(path)
        if folder not in by_folder:
            by_rank: dict[int, list[RankExit]] = {}
            for record in folder_records(folder):
                by_rank.setdefault(record.rank, []).append(record)
            by_folder[folder] = by_rank
        name = os.path.basename(path)
        try:
            size = os.stat(path).st_size
        except OSError:
            size = None
        for record in by_folder[folder].get(rank, []):
            if record.trace == name and record.trace_bytes == size:
                out[rank] = record
    for rank in missing or []:
        for records in by_folder.values():
            for record in records.get(rank, []):
                if record.trace is None:
                    out[rank] = record
    return out


# -- knock-on failures: a rank that died because a peer died first ------------------------------

# When one rank of a job dies, its peers fail too, inside the collective they were in: gloo
# raises `RuntimeError: [.../gloo/transport/tcp/pair.cc:553] Connection closed by peer ...`,
# NCCL `ncclRemoteError` or a watchdog timeout, c10d's store a `DistNetworkError`. Such a rank
# did not fail on its own. Its exception is recognised by its type (one of PEER_ERROR_TYPES:
# what torch raises from a collective or its store) and its message (PEER_ERROR_PATTERNS, each
# narrow: it names the backend, or the type is torch.distributed's own, so that a user's own
# `RuntimeError("connection reset by peer")` from, say, an HTTP client is not taken for one).
PEER_ERROR_TYPES = frozenset(
    {"RuntimeError", "DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}
)
_DIST_TYPES = frozenset({"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"})
_CONNECTION = (
    r"connection closed by peer|connection reset by peer|broken pipe|connection refused"
    r"|timed out waiting|socket timeout|failed to recv|connection was closed"
)
# (pattern, what the rank ran into), tried in order; matched case-insensitively.
PEER_ERROR_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # gloo's errors start with the source file that raised them: [.../gloo/transport/...].
    (re.compile(r"gloo.*connection closed by peer", re.I), "gloo: connection closed by peer"),
    (re.compile(r"gloo.*connection reset by peer", re.I), "gloo: connection reset by peer"),
    (re.compile(r"gloo.*broken pipe", re.I), "gloo: broken pipe"),
    (re.compile(r"gloo.*timed out waiting", re.I), "gloo: timed out waiting for a peer"),
    (re.compile(r"gloo.*connection refused", re.I), "gloo: connection refused"),
    (re.compile(r"ncclRemoteError|NCCL error.*remote process", re.I), "NCCL: remote error"),
    (re.compile(r"NCCL communicator was aborted", re.I), "NCCL: communicator aborted"),
    (re.compile(r"watchdog caught collective operation timeout", re.I),
     "NCCL: collective timed out"),  # fmt: skip
    (re.compile(rf"(c10d|TCPStore).*({_CONNECTION})", re.I), "c10d store: connection lost"),
)
# torch.distributed's own exception types need only the connection's words.
_DIST_PATTERN = re.compile(_CONNECTION, re.I)


def peer_error(record: RankExit) -> str | None:
    """What a rank that raised ran into when its exception is a peer's connection or collective
    failing (`gloo: connection closed by peer`), else None (it raised something else, exited
    without an exception, was stopped or lost)."""
    if record.ended != EXCEPTION or record.exception not in PEER_ERROR_TYPES:
        return None
    message = record.message or ""
    for pattern, kind in PEER_ERROR_PATTERNS:
        if pattern.search(message):
            return kind
    if record.exception in _DIST_TYPES and _DIST_PATTERN.search(message):
        return f"{record.exception}: connection lost"
    return None


@dataclass(frozen=True)
class KnockOn:
    """The job's first failure of its own (`cause`) and the ranks that failed because of it
    (`ranks`, in the order they ended), each with the peer error it ran into (`kinds`)."""

    cause: RankExit | None = None
    ranks: tuple[RankExit, ...] = ()
    kinds: tuple[str, ...] = ()

    @cached_property
    def _knocked(self) -> frozenset[int]:
        return frozenset(r.rank for r in self.ranks)

    def of(self, rank: int) -> int | None:
        """The cause's rank when `rank` is a knock-on failure, else None."""
        if self.cause is None:
            return None
        return self.cause.rank if rank in self._knocked else None

    def sentence(self) -> str | None:
        """`ranks 0, 1, 3 stopped because their peer rank 2 failed first (knock-on failures,
        not failures of their own): RuntimeError at ProfilerStep#8 (gloo: connection closed by
        peer)`; None without knock-ons."""
        if self.cause is None or not self.ranks:
            return None
        names = ", ".join(str(r.rank) for r in self.ranks[:8])
        if len(self.ranks) > 8:
            names += f" and {len(self.ranks) - 8} more"
        one = len(self.ranks) == 1
        what: list[str] = []
        for record, kind in zip(self.ranks, self.kinds):
            where = f" at ProfilerStep#{record.step}" if record.step is not None else ""
            said = f"{record.exception}{where} ({kind})"
            if said not in what:
                what.append(said)
        shown = "; ".join(what[:3]) + ("; ..." if len(what) > 3 else "")
        return (
            f"{'rank' if one else 'ranks'} {names} stopped because {'its' if one else 'their'} "
            f"peer rank {self.cause.rank} failed first ("
            f"{'a knock-on failure, not one of its own' if one else 'knock-on failures, not failures of their own'}"
            f"): {shown}"
        )


def _end(record: RankExit) -> float:
    return record.ended_unix if record.ended_unix is not None else float("inf")


def knock_ons(records: list[RankExit] | tuple[RankExit, ...]) -> KnockOn:
    """Which failed ranks are knock-on failures of another's (docs/summary-ranks.md, Health).

    The cause is the first rank to fail on its own: of the failed ranks whose exception is not a
    peer error (`peer_error`), the one that ended first by its own clock; when none has an end
    time, a rank killed outright (`lost`, which never has one). A knock-on failure is a rank
    whose exception is a peer error and that ended after the cause (a `lost` cause: whenever,
    since it cannot say when it died). Everything else stays as it is: a second failure of its
    own, a peer error that ended before the cause or without an end time, a job where every
    failure is a peer error (no rank to blame: no knock-ons)."""
    failed = [r for r in records if r.failed]
    own = sorted((r for r in failed if peer_error(r) is None), key=lambda r: (_end(r), r.rank))
    timed = [r for r in own if r.ended_unix is not None]
    lost = [r for r in own if r.ended == LOST]
    cause = timed[0] if timed else (lost[0] if lost else None)
    if cause is None:
        return KnockOn()
    found = []
    for record in sorted(failed, key=lambda r: (_end(r), r.rank)):
        kind = peer_error(record)
        if kind is None or record.rank == cause.rank:
            continue
        if cause.ended_unix is not None:
            if record.ended_unix is None or record.ended_unix <= cause.ended_unix:
                continue
        found.append((record, kind))
    if not found:
        return KnockOn()
    return KnockOn(cause, tuple(r for r, _ in found), tuple(k for _, k in found))
