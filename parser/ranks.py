"""The files of a distributed job: which trace is which rank, which profiling cycle, which job.

`tensorboard_trace_handler` leaves one file per rank and per profiling cycle in one folder,
named `{worker_name}.{timestamp}.pt.trace.json[.gz]`. This module reads only what it needs to
tell them apart: each file's name and the header keys written before `traceEvents`
(`distributedInfo` among them), never the events.

A file's rank comes from `distributedInfo.rank`, else from its name (`rank3`, `rank-3`,
`rank_3`, `worker3`), else from its place among the files left without one (sorted by path);
`rank_rule` records which. Files of different jobs (another `world_size` or process-group
configuration) are not mixed: the largest consistent set is kept and the others are listed in
`left_out` with the reason. Several files for one rank are several profiling cycles: they are
ordered by the timestamp in their names (else by modification time) and grouped into cycles;
the newest complete cycle is chosen unless one is asked for.

Rank numbers and world sizes come from files, and files may say anything: nothing here is
proportional to them (missing ranks are ranges, only the first `MISSING_LISTED` are listed one
by one), and a number in a file name that is no plausible rank (a date, a timestamp, beyond the
job's world size or far beyond the other files' ranks) is not taken for one (`notes` says why).
"""

from __future__ import annotations

import json
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from .source import (
    PERFETTO_REASON,
    PERFETTO_SUFFIXES,
    not_regular_kind,
    perfetto_message,
    perfetto_problem,
)

TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json")
HEAD_LIMIT = 64 << 20  # uncompressed bytes read at most to find the header keys
_READ = 1 << 16
_HEAD_BLOCK_MAX = 4 << 20  # uncompressed bytes of one block of the header's text, at most

# The record of a job's merged export (kinetoscope/export/job_bundle.py MERGED_KEY): such a file holds
# every rank, written with rank 0's header; it is left out of a job, not taken for rank 0.
MERGED_KEY = "kinetoscopeMerged"
MERGED_REASON = "a merged export of a job's ranks (kinetoscope export), not one rank"

RULE_DISTRIBUTED = "distributedInfo"
RULE_NAME = "name"
RULE_ORDER = "order"

# `rank3`, `rank-3`, `rank_3`, `worker3` (not inside a longer word: `8rank_worker0` is worker 0).
_NAME_RANK = re.compile(r"(?:^|[^a-z0-9])(?:\d+)?(?:rank|worker)[-_]?(\d+)(?![0-9])", re.I)
_STAMP = re.compile(r"^(.*)\.(\d{6,})$")  # `worker.1700000000123`: the writer's timestamp

# A number in a file name at or above this is no rank (a timestamp, an id): far more ranks than
# any job has.
MAX_NAME_RANK = 1 << 20
# With no world size known, a number in a file name this far above every other file's rank is no
# rank either (`rank0.json` beside `rank_99999.json`).
FAR_NAME_RANK = 4096
# Missing ranks listed one by one (JobFiles.missing); all of them are in `missing_ranges`.
MISSING_LISTED = 1024


@dataclass(frozen=True)
class RankFile:
    """One trace file of a job: its rank, how that rank was found, and its cycle."""

    path: str
    rank: int
    rank_rule: str  # RULE_DISTRIBUTED, RULE_NAME or RULE_ORDER
    worker: str  # the file name without timestamp and suffix
    stamp: int | None  # the timestamp in the name, when there is one
    world_size: int | None
    header_problem: str | None = None  # why the header could not be read (the load will say more)


@dataclass(frozen=True)
class Cycle:
    """One profiling cycle: a file per rank (at most), written at about the same time."""

    index: int  # 1 = the oldest
    files: tuple[RankFile, ...]
    complete: bool  # every rank of the job is there
    stamp: int | None  # the newest timestamp among its files

    @property
    def ranks(self) -> list[int]:
        return sorted(f.rank for f in self.files)


@dataclass
class JobFiles:
    """What discovery found: the chosen cycle's files by rank, and what was not used."""

    files: list[RankFile]  # of the chosen cycle, by rank
    world_size: int | None
    cycles: list[Cycle]
    chosen: int  # index of the chosen cycle (Cycle.index)
    # The first MISSING_LISTED ranks of the job with no file in the chosen cycle.
    missing: list[int]
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    # Every missing rank, as (first, last) ranges (inclusive), and how many there are.
    missing_ranges: list[tuple[int, int]] = field(default_factory=list)
    missing_count: int = 0
    # (path, why): a number in the file's name that was not taken for its rank.
    notes: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "cycles": [
                {
                    "index": c.index,
                    "stamp": c.stamp,
                    "ranks": c.ranks,
                    "complete": c.complete,
                    "chosen": c.index == self.chosen,
                    "files": [f.path for f in sorted(c.files, key=lambda f: f.rank)],
                }
                for c in self.cycles
            ],
            "left_out": [{"path": p, "reason": why} for p, why in self.left_out],
            "notes": [{"path": p, "note": why} for p, why in self.notes],
        }


def missing_ranges(present: list[int], end: int) -> list[tuple[int, int]]:
    """The ranks of `0 … end-1` not in `present`, as (first, last) ranges: as many ranges as
    there are present ranks (plus one), whatever `end` is."""
    gaps = []
    expected = 0
    for rank in sorted({r for r in present if 0 <= r < end}):
        if rank > expected:
            gaps.append((expected, rank - 1))
        expected = rank + 1
    if expected < end:
        gaps.append((expected, end - 1))
    return gaps


def first_ranks(ranges: list[tuple[int, int]], limit: int = MISSING_LISTED) -> list[int]:
    """The first `limit` ranks of `ranges`, one by one."""
    listed: list[int] = []
    for first, last in ranges:
        listed.extend(range(first, min(last, first + limit - len(listed) - 1) + 1))
        if len(listed) >= limit:
            break
    return listed


def ranges_text(ranges: list[tuple[int, int]], count: int, limit: int = 20) -> str:
    """`2-15, 20, 22-99 (93 ranks)`: at most `limit` ranges written, the count always."""
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:limit])
    if len(ranges) > limit:
        shown += f" and {len(ranges) - limit} more ranges"
    return shown + (f" ({count:,} ranks)" if count > 1 else "")


class JobError(Exception):
    """No job can be made of the inputs; the message is one line for the user."""


class NotATrace(ValueError):
    """Well-formed JSON without a `traceEvents` array: another kind of file (a config)."""


# -- input files --------------------------------------------------------------------------


def is_trace_name(name: str) -> bool:
    """A file a job folder's listing looks at: JSON, or Perfetto protobuf (newer torch can write
    it), to be left out with how to get JSON instead."""
    lower = name.lower()
    return not name.startswith(".") and lower.endswith((".json", ".json.gz", *PERFETTO_SUFFIXES))


def trace_files(inputs: list[str]) -> list[str]:
    """The trace files named by `inputs`: files as given, folders by their `*.json` and
    `*.json.gz` files (not recursively, hidden files skipped), sorted by path. A file named
    that is not a regular file (a named pipe, a device, a socket) is refused (JobError) before
    anything opens it: opening a named pipe would wait for a writer."""
    found: list[str] = []
    for item in inputs:
        kind = not_regular_kind(item)
        if kind is not None:
            raise JobError(f"{item}: not a regular file ({kind}); save the trace to a file first")
        if os.path.isdir(item):
            try:
                names = os.listdir(item)
            except OSError as exc:
                raise JobError(f"{item}: cannot list the folder ({exc.strerror or exc})") from None
            for name in names:
                path = os.path.join(item, name)
                if is_trace_name(name) and os.path.isfile(path):
                    found.append(path)
        else:
            found.append(item)
    return sorted(dict.fromkeys(found))


def worker_and_stamp(path: str) -> tuple[str, int | None]:
    """The worker name and timestamp in a trace's file name (`host_12.1700000000123.pt.trace
    .json.gz` -> ("host_12", 1700000000123)); no timestamp: (name without suffix, None)."""
    name = os.path.basename(path)
    for suffix in TRACE_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    match = _STAMP.match(name)
    if match:
        return match.group(1), int(match.group(2))
    return name, None


def rank_from_name(path: str) -> int | None:
    """The rank a file's name gives (`rank3`, `rank-3`, `rank_3`, `worker3`), the last one
    named when there are several; None when it gives none, or a number that is no plausible
    rank by itself (`name_rank_problem`)."""
    number = number_in_name(path)
    return number if number is not None and name_rank_problem(number) is None else None


def number_in_name(path: str) -> int | None:
    """The number after `rank`/`worker` in a file's name (the last one), plausible or not."""
    worker, _ = worker_and_stamp(path)
    hits = _NAME_RANK.findall(worker)
    if not hits:
        return None
    # More than 18 digits: never converted (Python refuses 4300), no rank anyway.
    return int(hits[-1]) if len(hits[-1]) <= 18 else _HUGE


_HUGE = 10**18  # stands for a number of 19 digits or more in a file name


def _looks_like_date(number: int) -> bool:
    """YYYYMMDD (1970-2199), as in `rank_20240101`."""
    text = str(number)
    if len(text) != 8:
        return False
    year, month, day = int(text[:4]), int(text[4:6]), int(text[6:])
    return 1970 <= year < 2200 and 1 <= month <= 12 and 1 <= day <= 31


def name_rank_problem(
    number: int, world_size: int | None = None, highest_other: int | None = None
) -> str | None:
    """Why a number in a file name is no rank, or None when it may be one: a date, a number
    of `MAX_NAME_RANK` or more (a timestamp), one beyond the job's world size, or (the world
    size unknown) one more than `FAR_NAME_RANK` above every other file's rank."""
    if _looks_like_date(number):
        return f"the number {number} in its name looks like a date, not a rank"
    if number >= MAX_NAME_RANK:
        shown = f"{number}" if number < _HUGE else "of 19 digits or more"
        return f"the number {shown} in its name is no rank (a timestamp or an id?)"
    if world_size is not None and world_size > 0 and number >= world_size:
        return f"the number {number} in its name is beyond the job's world_size {world_size}"
    if world_size is None and highest_other is not None and number > highest_other + FAR_NAME_RANK:
        return (
            f"the number {number} in its name is far beyond the other files' ranks (the "
            f"highest is {highest_other})"
        )
    return None


# -- the header, read cheaply ------------------------------------------------------------


def _head_blocks(path: str):  # type: ignore[no-untyped-def]
    """Uncompressed blocks from the start of the file (gzip by magic bytes). A gzip file is
    inflated only as far as it is read: _READ bytes first, each block twice the last (up to
    _HEAD_BLOCK_MAX), since the header is usually in the first few KB and a small rank's
    whole file, inflated, is ten times its size."""
    with open(path, "rb") as handle:
        first = handle.read(_READ)
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if first[:2] == b"\x1f\x8b" else None
        data = first
        wanted = _READ
        while data:
            if inflater is None:
                yield data
            else:
                try:
                    out = inflater.decompress(data, wanted)
                except zlib.error:
                    return
                if out:
                    yield out
                if inflater.eof:
                    return
                wanted = min(2 * wanted, _HEAD_BLOCK_MAX)
                data = inflater.unconsumed_tail
                if data:
                    continue
            data = handle.read(_READ)


class _HeadText:
    """The start of a file as text, grown block by block on demand."""

    def __init__(self, path: str, limit: int) -> None:
        self.blocks = _head_blocks(path)
        self.raw = b""
        self.text = ""
        self.limit = limit
        self.done = False
        self.more()

    def more(self) -> bool:
        if self.done or len(self.raw) >= self.limit:
            return False
        block = next(self.blocks, None)
        if block is None:
            self.done = True
            return False
        self.raw += block
        self.text = self.raw.decode("utf-8", errors="replace")
        return True

    def skip(self, pos: int) -> int:
        """The position of the next character that is not whitespace or a comma."""
        while True:
            while pos < len(self.text) and self.text[pos] in " \t\r\n\ufeff,":
                pos += 1
            if pos < len(self.text) or not self.more():
                return pos

    def value(self, decoder: json.JSONDecoder, pos: int) -> tuple[Any, int]:
        """The JSON value at `pos` and the position after it, reading on while it is cut off."""
        while True:
            try:
                return decoder.raw_decode(self.text, pos)
            except json.JSONDecodeError:
                if not self.more():
                    raise ValueError("the header is cut off or malformed") from None


def read_head(path: str, limit: int = HEAD_LIMIT) -> dict[str, Any]:
    """The top-level keys written before `traceEvents`, decoded; `{}` for a bare array of
    events. Raises NotATrace for a JSON object without `traceEvents`, ValueError when the start
    of the file is not such JSON, OSError when it cannot be read. Only the header's bytes are
    read (at most `limit` of them)."""
    decoder = json.JSONDecoder(strict=False)
    head = _HeadText(path, limit)
    pos = head.skip(0)
    if pos >= len(head.text):
        raise ValueError("the file is empty")
    if head.text[pos] == "[":
        return {}
    if head.text[pos] != "{":
        raise ValueError("not a JSON object or array")
    header: dict[str, Any] = {}
    pos += 1
    while True:
        pos = head.skip(pos)
        if pos >= len(head.text):
            raise ValueError("the file ends in the header")
        if head.text[pos] == "}":
            raise NotATrace("not a trace (no traceEvents array)")
        key, pos = head.value(decoder, pos)
        pos = head.skip(pos)
        if pos >= len(head.text) or head.text[pos] != ":":
            raise ValueError("malformed header")
        pos = head.skip(pos + 1)
        if key == "traceEvents":
            return header
        value, pos = head.value(decoder, pos)
        header[str(key)] = value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def default_group(info: dict[str, Any]) -> dict[str, Any] | None:
    """The default process group's entry of `distributedInfo.pg_config` (a list, or the
    Python-literal text older torch writes), or None."""
    pg = info.get("pg_config")
    if isinstance(pg, str):
        import ast

        try:
            pg = ast.literal_eval(pg)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(pg, list):
        return None
    for entry in pg:
        if isinstance(entry, dict) and (
            entry.get("pg_desc") == "default_pg" or str(entry.get("pg_name")) == "0"
        ):
            return entry
    return None


def job_fingerprint(info: dict[str, Any]) -> tuple[Any, ...]:
    """What must agree between the ranks of one job: the world size, and the default process
    group (its size, ranks and backend). Other groups are left out on purpose: a rank lists
    only the groups it belongs to, so a tensor-parallel pair differs from the next one."""
    group = default_group(info) or {}
    ranks = group.get("ranks")
    return (
        _int(info.get("world_size")),
        group.get("pg_size"),
        tuple(ranks) if isinstance(ranks, list) else None,
        group.get("backend_config"),
    )


# -- the job --------------------------------------------------------------------------------


@dataclass
class _Probe:
    path: str
    worker: str
    stamp: int | None
    mtime: float
    info: dict[str, Any] | None  # distributedInfo (a dict) when the header has one
    problem: str | None  # the header could not be read
    not_trace: bool = False  # well-formed JSON of another kind (no traceEvents)

    @property
    def time_key(self) -> tuple[float, str]:
        return (float(self.stamp) if self.stamp is not None else self.mtime, self.path)


def _probe(path: str) -> _Probe:
    worker, stamp = worker_and_stamp(path)
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        mtime = 0.0
    info: dict[str, Any] | None = None
    problem = None
    perfetto = perfetto_problem(path)
    if perfetto is not None:  # no rank of this job: left out, with how to get JSON instead
        return _Probe(path, worker, stamp, mtime, None, PERFETTO_REASON, not_trace=True)
    try:
        header = read_head(path)
        if MERGED_KEY in header:  # `kinetoscope export DIR -o X.json`: every rank, not one
            return _Probe(path, worker, stamp, mtime, None, MERGED_REASON, not_trace=True)
        value = header.get("distributedInfo")
        info = value if isinstance(value, dict) else None
    except NotATrace as exc:
        return _Probe(path, worker, stamp, mtime, None, str(exc), not_trace=True)
    except (OSError, ValueError, RecursionError) as exc:
        problem = getattr(exc, "strerror", None) or str(exc)
    return _Probe(path, worker, stamp, mtime, info, problem)


def discover(inputs: list[str], cycle: int | None = None) -> JobFiles:
    """The job made of `inputs` (folders and files): its files by rank for one cycle (the
    newest complete one, or `cycle`, counted from 1 = the oldest), the other cycles, the
    ranks missing and the files left out. Raises JobError when there is nothing to use."""
    paths = trace_files(inputs)
    if not paths:
        raise JobError(f"{', '.join(inputs)}: no trace files (*.json, *.json.gz)")
    probes = [_probe(p) for p in paths]
    # JSON files of other kinds (a run folder may hold configs) are no ranks.
    left_out = [(p.path, p.problem or "") for p in probes if p.not_trace]
    probes = [p for p in probes if not p.not_trace]
    if not probes:
        perfetto = [path for path, reason in left_out if reason == PERFETTO_REASON]
        if perfetto:
            more = f" (and {len(perfetto) - 1} more such files)" if len(perfetto) > 1 else ""
            raise JobError(f"{perfetto_message(perfetto[0])}{more}")
        raise JobError(f"{', '.join(inputs)}: no trace files (JSON without traceEvents)")

    # One job: the largest set of files that agree on world size and process groups. Files
    # whose header could not be read stay (the load says what is wrong with them).
    readable = [p for p in probes if p.problem is None]
    groups: dict[tuple[Any, ...], list[_Probe]] = {}
    for probe in readable:
        key = job_fingerprint(probe.info) if probe.info is not None else ("no distributedInfo",)
        groups.setdefault(key, []).append(probe)
    kept = probes
    world_size: int | None = None
    if len(groups) > 1:
        best = max(groups, key=lambda k: (len(groups[k]), max(p.time_key for p in groups[k])))
        for key, members in groups.items():
            if key == best:
                continue
            for probe in members:
                left_out.append((probe.path, _other_job(key, best)))
        dropped = {p.path for p, _ in ((p, 0) for k, g in groups.items() if k != best for p in g)}
        kept = [p for p in probes if p.path not in dropped]
    for probe in kept:
        if probe.info is not None and _int(probe.info.get("world_size")) is not None:
            world_size = _int(probe.info.get("world_size"))
            break

    # Ranks: distributedInfo, else the name, else the order among the files left.
    ranked: list[tuple[_Probe, int, str]] = []
    unranked: list[_Probe] = []
    named: list[tuple[_Probe, int]] = []
    notes: list[tuple[str, str]] = []
    for probe in kept:
        rank = _int(probe.info.get("rank")) if probe.info is not None else None
        if rank is not None and rank >= 0:
            ranked.append((probe, rank, RULE_DISTRIBUTED))
            continue
        number = number_in_name(probe.path)
        if number is not None:
            named.append((probe, number))
        else:
            unranked.append(probe)
    # A number in a name is a rank only if it is plausible beside the others (by itself, and
    # against the world size or the other files' ranks).
    candidates = [(r, p.path) for p, r, _ in ranked]
    candidates += [(n, p.path) for p, n in named if name_rank_problem(n) is None]
    top = sorted(candidates, reverse=True)[:2]  # the highest other rank of any file: of these
    for probe, number in named:
        others = [r for r, path in top if path != probe.path]
        problem = name_rank_problem(number, world_size, others[0] if others else None)
        if problem is None:
            ranked.append((probe, number, RULE_NAME))
        else:
            unranked.append(probe)
            notes.append((probe.path, f"{problem}: ranked by its order among the files"))
    if unranked:
        # Files of one worker name are one rank's cycles; each worker name gets the next rank
        # not taken.
        taken = {rank for _, rank, _ in ranked}
        next_rank = 0
        by_worker: dict[str, list[_Probe]] = {}
        for probe in sorted(unranked, key=lambda p: p.path):
            by_worker.setdefault(probe.worker, []).append(probe)
        for members in by_worker.values():
            while next_rank in taken:
                next_rank += 1
            taken.add(next_rank)
            ranked.extend((probe, next_rank, RULE_ORDER) for probe in members)

    files = [
        RankFile(
            path=probe.path,
            rank=rank,
            rank_rule=rule,
            worker=probe.worker,
            stamp=probe.stamp,
            world_size=world_size,
            header_problem=probe.problem,
        )
        for probe, rank, rule in ranked
    ]
    time_key = {probe.path: probe.time_key for probe in kept}
    cycles = _cycles(files, time_key, world_size)
    if cycle is None:
        complete = [c for c in cycles if c.complete]
        # The newest complete cycle; with none complete, the one holding the most ranks.
        chosen = complete[-1] if complete else max(reversed(cycles), key=lambda c: len(c.files))
    else:
        if not 1 <= cycle <= len(cycles):
            raise JobError(
                f"no profiling cycle {cycle}: the files hold {len(cycles)} "
                f"({', '.join(str(c.index) for c in cycles)})"
            )
        chosen = cycles[cycle - 1]
    end = world_size if world_size else max(f.rank for f in files) + 1
    gaps = missing_ranges([f.rank for f in chosen.files], end)
    return JobFiles(
        files=sorted(chosen.files, key=lambda f: f.rank),
        world_size=world_size,
        cycles=cycles,
        chosen=chosen.index,
        missing=first_ranks(gaps),
        left_out=left_out,
        missing_ranges=gaps,
        missing_count=sum(last - first + 1 for first, last in gaps),
        notes=notes,
    )


def _other_job(key: tuple[Any, ...], best: tuple[Any, ...]) -> str:
    if key == ("no distributedInfo",):
        return "another job: no distributedInfo, while the job's files have one"
    if best == ("no distributedInfo",):
        return "another job: it has a distributedInfo, while the job's files have none"
    if key[0] != best[0]:
        return f"another job: world_size {key[0]} (the job's is {best[0]})"
    return "another job: a different default process group (pg_config)"


def _cycles(
    files: list[RankFile], time_key: dict[str, tuple[float, str]], world_size: int | None
) -> list[Cycle]:
    """Group the files into profiling cycles: in time order, a file starts a new cycle when its
    rank is already in the current one."""
    ordered = sorted(files, key=lambda f: time_key[f.path])
    groups: list[list[RankFile]] = []
    for file in ordered:
        if not groups or any(f.rank == file.rank for f in groups[-1]):
            groups.append([])
        groups[-1].append(file)
    all_ranks = {f.rank for f in files}

    def complete(members: list[RankFile]) -> bool:
        ranks = {f.rank for f in members}
        if world_size:  # every rank of 0 … world_size-1 (counted: never a set of world_size)
            return sum(1 for r in ranks if 0 <= r < world_size) == world_size
        return ranks >= all_ranks

    cycles = []
    for index, members in enumerate(groups, start=1):
        stamps = [f.stamp for f in members if f.stamp is not None]
        cycles.append(
            Cycle(
                index=index,
                files=tuple(members),
                complete=complete(members),
                stamp=max(stamps) if stamps else None,
            )
        )
    return cycles
