"""A distributed job as one: every rank's digest, the collectives matched, the straggler named.

The work is split in two so that it scales past one process and one machine:
- `digest_rank(path, options)` loads one rank's trace, runs the single-trace analysis on it
  (`TraceSession`) and keeps only a small, picklable `RankDigest`: per-step numbers, GPU busy
  and idle by cause, and the rank's collectives with their times, groups and sizes. It runs in
  worker processes (`map_ranks`: a local process pool by default, or any executor with
  `submit`, such as a `dask.distributed.Client`), so no process ever holds every rank's model.
- `analyze_job(digests, files)` merges the digests locally: collectives matched across ranks,
  waits, skews and bandwidths, clock offsets, the straggler and the phase that makes it late.
  `job_document` turns the result into the `summary --json` document of docs/summary-ranks.md.

Definitions (docs/summary-ranks.md says the same with examples):
- latency: the shortest duration of the collective across the ranks taking part;
- a rank's wait: the latest start across ranks minus this rank's start;
- start skew / end skew: latest minus earliest start / end;
- algbw: payload bytes / latency; busbw: algbw × 2(n−1)/n for all-reduce, × (n−1)/n for
  all-gather, reduce-scatter and all-to-all, × 1 for broadcast and reduce;
- clock offset of a rank: the median, over synchronising collectives shared with the reference
  rank (the lowest rank), of (this rank's end − the reference's end); its spread is the median
  absolute deviation of those differences. Offsets are subtracted from every time only when
  asked (`align_clocks`); a wait smaller than its uncertainty is marked not significant;
- one clock: ranks whose traces (`host_name`) or capture exit records name one host share one
  clock; aligning them does nothing unless forced, and their waits are read, not estimated;
- health: capture's exit records (parser/rank_exit.py) say how each rank ended; a rank that
  died is left out of the straggler's choice;
- straggler: the rank with the least total wait (it arrives last); the median rank: the other
  rank whose total wait is the median (the lower middle of an even count); the straggler's
  phase: the one of the step partition (analysis/phases.py: compute, communication, data
  loading, synchronisation, host launch overhead, unprofiled host time, or a user annotation
  holding no operator work) whose excess over the median rank, summed over the steps every
  rank recorded, is the largest and at least half of the straggler's lateness. The partition's
  phases are disjoint and add up to each step's time, so the excesses add up to the
  straggler's step time less the median rank's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .collectives import (
    BUS_FACTOR,
    SYNCHRONISING,
    Matched,
    RankCollectives,
    choose_source,
    match_collectives,
)
from .phases import PARTITION, step_partition
from .units import us

if TYPE_CHECKING:
    from kinetoscope.parser.rank_exit import KnockOn, RankExit
    from kinetoscope.parser.ranks import JobFiles

JOB_VERSION = 1
TOP_COLLECTIVES = 50
MISSING_RANGES_LISTED = 1024  # ranges of missing ranks in the document (all are counted)
CANCEL_POLL_S = 0.05  # how often map_ranks looks at its `cancel` event while it waits
PHASES = PARTITION
PHASE_TEXT = {
    "compute": "compute",
    "communication": "communication",
    "data_loading": "data loading",
    "host_launch": "host launch overhead",
    "synchronisation": "synchronisation",
    "host_other": "host time outside profiled ops",
}
STEP_FIELDS = (
    "dur",
    "gpu_busy",
    "compute",
    "comm",
    "comm_total",
    "memory",
    "idle",
    "dataloader",
    "runtime",
    "sync",
    "cpu_busy",
    "uninstrumented",
    "collective",
)


# -- one rank, in a worker ------------------------------------------------------------------


@dataclass(frozen=True)
class DigestOptions:
    """How `digest_rank` loads a trace: decoding processes per file (1: the worker alone;
    None: the parser decides by the file's size, as for one trace), whether the model cache
    may be read, whether collective args are read back."""

    load_workers: int | None = 1
    use_cache: bool = True
    read_args: bool = True


@dataclass
class RankDigest:
    """What the cross-rank analysis needs of one rank: plain data, small, picklable."""

    path: str
    error: str | None = None  # the trace could not be loaded or analysed (one line)
    complete: bool = True  # False: the file was cut off or damaged; what was read is here
    warnings: list[str] = field(default_factory=list)
    header_rank: int | None = None  # distributedInfo.rank
    world_size: int | None = None
    events: int = 0
    start_ns: int | None = None  # the trace's span (own clock)
    end_ns: int | None = None
    has_gpu: bool = False
    host: str | None = None  # the header's host name (`host_name`), when the trace has one
    step_names: list[str] = field(default_factory=list)
    step_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    steps: dict[str, np.ndarray] = field(default_factory=dict)  # STEP_FIELDS, int64 ns each
    gpu: list[dict[str, Any]] = field(default_factory=list)  # as the single summary's `gpu`
    collectives: dict[str, RankCollectives] = field(default_factory=dict)  # "gpu", "cpu"
    # The step partition (analysis/phases.py): per phase of PARTITION, and per annotation
    # name, ns in each step; together they add up to each step's `dur`.
    phases: dict[str, np.ndarray] = field(default_factory=dict)
    annotations: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: float = 0.0  # wall time of the digest


def digest_rank(path: str, options: DigestOptions | None = None) -> RankDigest:
    """Load one rank's trace and digest it. Never raises for a bad file: the digest's `error`
    says what went wrong, and a file cut off gives what could be read (`complete` False)."""
    began = time.perf_counter()
    options = options or DigestOptions()
    from kinetoscope.parser import TraceError, load

    try:
        trace = load(
            path, use_cache=options.use_cache, workers=options.load_workers, write_cache=False
        )
    except TraceError as exc:
        return RankDigest(
            path=path, error=str(exc), complete=False, seconds=time.perf_counter() - began
        )
    except (OSError, MemoryError) as exc:
        from kinetoscope.parser.model import out_of_memory_message

        error = out_of_memory_message(path, 0) if isinstance(exc, MemoryError) else f"{path}: {exc}"
        return RankDigest(
            path=path, error=error, complete=False, seconds=time.perf_counter() - began
        )
    try:
        digest = _digest(path, trace, options)
    except Exception as exc:  # an analysis failure is this rank's problem, not the job's
        from kinetoscope.parser.model import out_of_memory_message

        from .session import memory_failure

        stage = memory_failure(exc)
        error = (
            f"{path}: the analysis failed: {exc}"
            if stage is None
            else out_of_memory_message(path, trace.n_events, stage or "the rank's digest")
        )
        del trace
        return RankDigest(
            path=path, error=error, complete=False, seconds=time.perf_counter() - began
        )
    digest.seconds = time.perf_counter() - began
    return digest


def _digest(path: str, trace: Any, options: DigestOptions) -> RankDigest:
    from .collectives import find_collectives
    from .session import TraceSession
    from .summary import gpu_section
    from .sync import step_sync_us

    session = TraceSession(trace)
    steps = session.steps
    info = trace.header.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    sync_ns = np.array([round(v * 1000) for v in step_sync_us(session.sync)], np.int64)
    columns = {
        name: np.asarray(getattr(steps, name), np.int64) for name in STEP_FIELDS if name != "sync"
    }
    columns["sync"] = sync_ns.reshape(len(steps))
    phases, annotations = step_partition(session)
    return RankDigest(
        path=path,
        complete=trace.complete,
        warnings=list(trace.warnings),
        header_rank=_int(info.get("rank")),
        world_size=_int(info.get("world_size")),
        events=trace.n_events,
        start_ns=trace.slice_start_min,
        end_ns=trace.slice_end_max,
        has_gpu=bool(session.classes.gpu.any()),
        host=_host(trace.header),
        step_names=[trace.name_of(int(r)) for r in steps.rows.tolist()],
        step_start=np.asarray(steps.start, np.int64),
        steps=columns,
        gpu=gpu_section(session),
        collectives=find_collectives(session, read_args=options.read_args),
        phases=phases,
        annotations=annotations,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


HOST_KEYS = ("host_name", "hostname", "hostName")  # torch >= 2.4 writes `host_name`


def _host(header: dict[str, Any]) -> str | None:
    """The trace's host name from its header: a short printable string, else None."""
    for key in HOST_KEYS:
        value = header.get(key)
        if isinstance(value, str) and 0 < len(value) <= 255 and value.isprintable():
            return value
    return None


@dataclass(frozen=True)
class ClockDomain:
    """Where the ranks' clocks come from: `one_host` when every rank is known to have run on
    the same host (so they read one clock, and their offsets are arrival differences, not
    skew), with the hosts seen and what said so (`source`)."""

    one_host: bool = False
    hosts: tuple[str, ...] = ()
    source: str | None = None  # "trace" (header host_name), "capture" (exit records), None


def clock_domain(entries: Sequence[RankEntry]) -> ClockDomain:
    """One host when every loaded rank's trace names the same host (`host_name` in its header),
    else when every rank's capture exit record does; the hosts seen either way."""
    loaded = [e for e in entries if e.loaded]
    if not loaded:
        return ClockDomain()
    for source, hosts in (
        ("trace", [e.digest.host for e in loaded]),
        ("capture", [e.exit.host if e.exit is not None else None for e in loaded]),
    ):
        seen = tuple(sorted({h for h in hosts if h is not None}))
        if not seen:
            continue
        complete = all(h is not None for h in hosts)
        return ClockDomain(one_host=complete and len(seen) == 1, hosts=seen, source=source)
    return ClockDomain()


OFFSET_SAMPLES_MIN = 3  # shared synchronising collectives before an offset can be significant
OFFSET_SPREADS = 3  # |offset| must exceed this many spreads (MADs) to be significant


def offset_significant(entry: RankEntry, reference: int | None) -> bool | None:
    """Whether a rank's clock offset stands out of its own spread: at least OFFSET_SAMPLES_MIN
    samples and |offset| > OFFSET_SPREADS × spread. None for the reference rank and for a rank
    without an offset."""
    if entry.offset_ns is None or entry.rank == reference:
        return None
    spread = entry.spread_ns or 0.0
    return entry.offset_samples >= OFFSET_SAMPLES_MIN and abs(entry.offset_ns) > (
        OFFSET_SPREADS * spread
    )


class DigestsCancelled(Exception):
    """`map_ranks` was cancelled before every digest arrived."""


def default_workers(ranks: int) -> int:
    """min(ranks, the CPUs this process may use)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(ranks, cpus))


def worker_context() -> Any:
    """The context of the local pool digesting ranks: the parser's (one forkserver for every
    pool; forkserver, not fork, since the caller may run threads: the viewer loads from one),
    its server also preloading this module."""
    from kinetoscope.parser import worker_context as parser_context

    return parser_context(__name__)


def map_ranks(
    paths: Sequence[str],
    executor: Any = None,
    workers: int | None = None,
    options: DigestOptions | None = None,
    on_done: Callable[[int, RankDigest], None] | None = None,
    cancel: threading.Event | None = None,
) -> list[RankDigest]:
    """`digest_rank` of every path, in the paths' order. `executor`: anything with
    `submit(fn, *args)` returning futures with `result()` (a `concurrent.futures` executor, a
    `dask.distributed.Client`); by default a local process pool of `workers` processes
    (default min(ranks, CPUs)); with one worker or one path, or ranks too small together to pay
    for a pool's start (`parser.parallel.pays_for_workers`), this process does the work.
    `on_done(index, digest)` is called as each digest arrives (in this process). Once `cancel`
    is set, the digests not arrived are abandoned: pending ones cancelled, the local pool's
    worker processes ended at once, and `DigestsCancelled` raised."""
    paths = list(paths)
    from kinetoscope.parser import cache

    for path in paths:  # said here, once: the worker processes that load the ranks do not
        cache.warn_if_untrusted(path)
    if executor is None and workers is None and not _pays_for_workers(paths):
        workers = 1  # tiny ranks: digested here, no pool started (it costs more than it saves)
    if options is None:
        # Ranks are the parallelism when there are as many as CPUs; with fewer (or with one
        # process), a big file is decoded in parallel as `summary` of one trace does.
        pool = 1 if executor is None and len(paths) <= 1 else workers or default_workers(len(paths))
        spare = executor is None and pool < default_workers(1 << 30)
        options = DigestOptions(load_workers=None if spare else 1)
    if executor is None and (len(paths) <= 1 or (workers or default_workers(len(paths))) <= 1):
        digests = []
        for index, path in enumerate(paths):
            if cancel is not None and cancel.is_set():
                raise DigestsCancelled
            digests.append(digest_rank(path, options))
            if on_done is not None:
                on_done(index, digests[-1])
        return digests
    own_pool = None
    if executor is None:
        from concurrent.futures import ProcessPoolExecutor

        own_pool = executor = ProcessPoolExecutor(
            max_workers=workers or default_workers(len(paths)), mp_context=worker_context()
        )
    futures: list[Any] = []
    finished = False
    try:
        futures = [executor.submit(digest_rank, path, options) for path in paths]
        results: list[RankDigest] = []
        for index, future in enumerate(futures):
            if cancel is not None:
                while not future.done():
                    if cancel.wait(CANCEL_POLL_S):
                        raise DigestsCancelled
            try:
                digest = future.result()
            except Exception as exc:  # a worker that died (killed, out of memory)
                digest = RankDigest(
                    path=paths[index],
                    error=f"{paths[index]}: the worker "
                    f"digesting it failed: {type(exc).__name__}: {exc}",
                    complete=False,
                )
            results.append(digest)
            if on_done is not None:
                on_done(index, digest)
        finished = True
        return results
    finally:
        if not finished:  # cancelled (or failed): nothing more is waited for
            for future in futures:
                future.cancel()
            if own_pool is not None:
                _stop_workers(own_pool)
        if own_pool is not None:
            own_pool.shutdown(wait=finished, cancel_futures=True)


def _pays_for_workers(paths: Sequence[str]) -> bool:
    from kinetoscope.parser import pays_for_workers

    return pays_for_workers(list(paths))


def _stop_workers(pool: Any) -> None:
    """End a local pool's worker processes now, their digests abandoned: its shutdown (and the
    interpreter's exit) would otherwise wait for every digest running."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if callable(terminate):
        terminate()
        return
    processes = getattr(pool, "_processes", None) or {}
    for process in list(processes.values()):
        try:
            process.terminate()
        except (OSError, ValueError, AttributeError):
            pass  # already gone


# -- across ranks, locally ------------------------------------------------------------------


@dataclass
class RankEntry:
    """One rank of the job: its file, digest and what the cross-rank analysis says of it."""

    rank: int
    path: str
    rank_rule: str
    worker: str | None
    digest: RankDigest
    wait_ns: int = 0
    step_wait_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    collectives: int = 0  # of the chosen source
    collective_ns: int = 0  # wall time inside them
    matched: int = 0
    offset_ns: float | None = None
    spread_ns: float | None = None
    offset_samples: int = 0
    exit: RankExit | None = None  # how its program ended, when capture left a record
    knock_on_of: int | None = None  # it failed because this rank failed first (a peer error)

    @property
    def loaded(self) -> bool:
        return self.digest.error is None

    @property
    def failed(self) -> bool:
        """Its program died (an uncaught exception, a non-zero exit, killed outright), as its
        exit record says."""
        return self.exit is not None and self.exit.failed


@dataclass
class JobAnalysis:
    """The merged result: ranks, matched collectives with their numbers, straggler, clocks."""

    ranks: list[RankEntry]
    world_size: int | None
    matched: Matched
    aligned: bool
    latency: np.ndarray  # per matched collective, ns
    wait: np.ndarray  # (n, ranks) ns, 0 where absent
    start_skew: np.ndarray
    end_skew: np.ndarray
    last: np.ndarray  # column of the rank that started last
    significant: np.ndarray  # (n, ranks) bool: the wait exceeds its clock uncertainty
    algbw: np.ndarray  # bytes/s, NaN unknown
    busbw: np.ndarray
    straggler: dict[str, Any] | None
    missing: list[int]
    files: JobFiles | None = None
    seconds: float = 0.0
    exits: dict[int, RankExit] = field(default_factory=dict)  # capture's exit records, by rank
    knock_on: KnockOn = field(default_factory=lambda: _knock_ons([]))  # failures that followed a peer's
    clock: ClockDomain = field(default_factory=ClockDomain)
    align_asked: bool = False  # aligning was asked for (`aligned`: the offsets were subtracted)
    align_forced: bool = False  # ... and forced, though the ranks share one clock

    def entry(self, rank: int) -> RankEntry | None:
        return next((e for e in self.ranks if e.rank == rank), None)


def analyze_job(
    digests: Sequence[RankDigest],
    files: JobFiles | None = None,
    align_clocks: bool = False,
    force_align: bool = False,
) -> JobAnalysis:
    """Merge the ranks' digests (in the order of `files.files`, whose ranks they get; without
    `files`, ranks come from the digests' distributedInfo, else their order). `align_clocks`
    subtracts the clock offsets, unless the ranks ran on one host (one clock: nothing to
    align) and `force_align` is not given."""
    began = time.perf_counter()
    entries = _entries(digests, files)
    exits = _exits(entries, files)
    knocked = _knock_ons(list(exits.values()))
    for entry in entries:
        entry.exit = exits.get(entry.rank)
        entry.knock_on_of = knocked.of(entry.rank)
    domain = clock_domain(entries)
    asked = align_clocks or force_align
    align_clocks = asked and (force_align or not domain.one_host)
    loaded = [e for e in entries if e.loaded]
    per_rank = {e.rank: e.digest.collectives for e in loaded if e.digest.collectives}
    step_names = {e.rank: e.digest.step_names for e in loaded}
    if len(per_rank) >= 2:
        cut_short = {e.rank for e in loaded if not e.digest.complete}
        matched = match_collectives(per_rank, step_names, cut_short)
    else:
        matched = match_collectives({}, {})
    source = matched.source if len(per_rank) >= 2 else choose_source(per_rank or {})
    column = {r: j for j, r in enumerate(matched.ranks)}
    for entry in loaded:
        coll = entry.digest.collectives.get(source)
        if coll is not None:
            entry.collectives = len(coll)
            entry.collective_ns = coll.busy_ns()

    n, width = len(matched), len(matched.ranks)
    present = matched.present
    offsets = _clock_offsets(matched)
    for entry in loaded:
        if entry.rank in offsets:
            entry.offset_ns, entry.spread_ns, entry.offset_samples = offsets[entry.rank]
    offset = np.array([offsets.get(r, (0.0, 0.0, 0))[0] for r in matched.ranks], float)
    spread = np.array([offsets.get(r, (0.0, 0.0, 0))[1] for r in matched.ranks], float)
    known = np.array([r in offsets for r in matched.ranks], bool)
    shift = np.rint(offset).astype(np.int64) if align_clocks else np.zeros(width, np.int64)
    start = matched.start - shift
    end = matched.end - shift
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    if n:
        latest = np.where(present, start, small).max(axis=1)
        earliest = np.where(present, start, big).min(axis=1)
        latest_end = np.where(present, end, small).max(axis=1)
        earliest_end = np.where(present, end, big).min(axis=1)
        latency = np.where(present, matched.end - matched.start, big).min(axis=1)
        wait = np.where(present, latest[:, None] - start, 0)
        last = np.where(present, start, small).argmax(axis=1)
        start_skew = latest - earliest
        end_skew = latest_end - earliest_end
        # A wait compares the last rank's clock with this rank's: uncertain by both spreads,
        # and by the offset between them when the clocks are not aligned.
        unc = spread[last][:, None] + spread[None, :]
        if not align_clocks:
            unc = unc + np.abs(offset[last][:, None] - offset[None, :])
        if domain.one_host and not align_clocks:
            unc = np.zeros_like(unc)  # one clock: the waits are read on it, not estimated
        certain = known[last][:, None] & known[None, :]
        significant = present & ((wait > unc) | ~certain)
        significant[np.arange(n), last] = False
    else:
        latency = wait = last = start_skew = end_skew = np.zeros(0, np.int64)
        wait = np.zeros((0, width), np.int64)
        significant = np.zeros((0, width), bool)
    algbw, busbw = _bandwidths(matched, latency)
    for entry in loaded:
        j = column.get(entry.rank)
        names = entry.digest.step_names
        entry.step_wait_ns = np.zeros(len(names), np.int64)
        if j is None:
            continue
        mine = present[:, j]
        entry.matched = int(mine.sum())
        entry.wait_ns = int(wait[mine, j].sum())
        position = {name: k for k, name in enumerate(names)}
        for i in np.flatnonzero(mine).tolist():
            step = matched.step[i]
            k = position.get(step) if step is not None else None
            if k is not None:
                entry.step_wait_ns[k] += int(wait[i, j])
    world = files.world_size if files is not None else None
    if world is None:
        world = next((e.digest.world_size for e in loaded if e.digest.world_size), None)
    missing = list(files.missing) if files is not None else []
    return JobAnalysis(
        ranks=entries,
        world_size=world,
        matched=matched,
        aligned=align_clocks,
        latency=latency,
        wait=wait,
        start_skew=start_skew,
        end_skew=end_skew,
        last=last,
        significant=significant,
        algbw=algbw,
        busbw=busbw,
        # A rank that died is not late: it is left out of the straggler's choice.
        straggler=_straggler([e for e in entries if not e.failed], align_clocks),
        missing=missing,
        files=files,
        seconds=time.perf_counter() - began,
        exits=exits,
        knock_on=knocked,
        clock=domain,
        align_asked=asked,
        align_forced=force_align and domain.one_host,
    )


def _exits(entries: list[RankEntry], files: JobFiles | None) -> dict[int, RankExit]:
    """The exit records capture left beside the ranks' traces (parser/rank_exit.py)."""
    from kinetoscope.parser.rank_exit import exits_of

    missing = list(files.missing) if files is not None else []
    return exits_of({e.rank: e.path for e in entries}, missing)


def _knock_ons(exits: list[RankExit]) -> KnockOn:
    """Which failures followed a peer's (parser/rank_exit.knock_ons)."""
    from kinetoscope.parser.rank_exit import knock_ons

    return knock_ons(exits)


def _entries(digests: Sequence[RankDigest], files: JobFiles | None) -> list[RankEntry]:
    if files is not None:
        if len(files.files) != len(digests):
            raise ValueError("one digest per file of the job, in its order")
        return [
            RankEntry(rank=f.rank, path=f.path, rank_rule=f.rank_rule, worker=f.worker, digest=d)
            for f, d in zip(files.files, digests)
        ]
    entries = []
    taken = {d.header_rank for d in digests if d.header_rank is not None}
    next_rank = 0
    for digest in digests:
        if digest.header_rank is not None:
            entries.append(
                RankEntry(digest.header_rank, digest.path, "distributedInfo", None, digest)
            )
            continue
        while next_rank in taken:
            next_rank += 1
        taken.add(next_rank)
        entries.append(RankEntry(next_rank, digest.path, "order", None, digest))
    return sorted(entries, key=lambda e: e.rank)


def clock_reference(matched: Matched) -> int | None:
    """The rank the clock offsets are measured against: the lowest in a synchronising
    collective, or None."""
    sync = np.array([k in SYNCHRONISING for k in matched.kind], bool)
    if not len(matched):
        return None
    taking = np.flatnonzero((matched.present & sync[:, None]).any(axis=0))
    return matched.ranks[int(taking[0])] if len(taking) else None


def _clock_offsets(matched: Matched) -> dict[int, tuple[float, float, int]]:
    """Per rank: (offset ns, spread ns, samples) against the lowest rank taking part, from the
    ends of the synchronising collectives both took part in. The reference gets (0, 0, n)."""
    if not len(matched):
        return {}
    sync = np.array([k in SYNCHRONISING for k in matched.kind], bool)
    present = matched.present & sync[:, None]
    # The reference: the lowest rank in any synchronising collective.
    taking = np.flatnonzero(present.any(axis=0))
    if not len(taking):
        return {}
    ref = int(taking[0])
    out: dict[int, tuple[float, float, int]] = {}
    for j, rank in enumerate(matched.ranks):
        both = present[:, ref] & present[:, j]
        if not both.any():
            continue
        diff = (matched.end[both, j] - matched.end[both, ref]).astype(float)
        offset = float(np.median(diff))
        spread = float(np.median(np.abs(diff - offset)))
        out[rank] = (offset, spread, int(both.sum()))
    return out


def _bandwidths(matched: Matched, latency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm and bus bandwidth in bytes per second (NaN where size or latency is unknown)."""
    n = len(matched)
    algbw = np.full(n, np.nan)
    busbw = np.full(n, np.nan)
    for i in range(n):
        size = int(matched.bytes[i])
        if size < 0 or latency[i] <= 0:
            continue
        algbw[i] = size / (int(latency[i]) / 1e9)
        factor = BUS_FACTOR.get(matched.kind[i])
        ranks = int(matched.group_size[i])
        if factor is not None and ranks >= 1:
            busbw[i] = algbw[i] * factor(ranks)
    return algbw, busbw


LABEL_LIMIT = 48  # characters of an annotation's name in words
ANNOTATION = "annotation"  # the phase of time in a user annotation holding no operator work


def phase_values(digest: RankDigest) -> dict[str, np.ndarray]:
    """Per step of a rank, ns in each phase of PHASES (the step partition; the annotations'
    time is in `annotation_values`)."""
    zero = np.zeros(len(digest.step_names), np.int64)
    return {p: digest.phases.get(p, zero) for p in PHASES}


def annotation_values(digest: RankDigest) -> dict[str, np.ndarray]:
    """Per step of a rank, ns in each user annotation's own time (layer 9 of the partition)."""
    return dict(digest.annotations)


def common_steps(entries: Sequence[RankEntry], first: RankEntry) -> list[str]:
    """The steps every loaded rank recorded, in `first`'s order."""
    common = set(first.digest.step_names)
    for entry in entries:
        if entry.loaded:
            common &= set(entry.digest.step_names)
    return [s for s in first.digest.step_names if s in common]


def _totals(entry: RankEntry, steps: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    """A rank's partition summed over `steps`: per phase, per annotation name (ns)."""
    position = {name: k for k, name in enumerate(entry.digest.step_names)}
    picks = np.array([position[s] for s in steps], np.int64)
    fixed = {p: int(v[picks].sum()) for p, v in phase_values(entry.digest).items()}
    named = {a: int(v[picks].sum()) for a, v in annotation_values(entry.digest).items()}
    return fixed, named


def median_rank(taking: Sequence[RankEntry], straggler: RankEntry) -> RankEntry:
    """The other rank whose total wait is the median (ties and even counts: the lower middle,
    by wait then rank)."""
    others = sorted((e for e in taking if e is not straggler), key=lambda e: (e.wait_ns, e.rank))
    return others[(len(others) - 1) // 2]


def phase_breakdown(job: JobAnalysis) -> dict[str, Any] | None:
    """Every loaded rank's partition against the median rank, over the steps every rank
    recorded: {"reference": rank, "steps": n, "phases": [...], "ranks": {rank: {"total": ns,
    "phases": {phase: ns}, "excess": {phase: ns}}}}, annotations as phases named by the
    annotation. The reference is the straggler's median rank, else the rank with the median
    total step time. None without a step every rank recorded."""
    loaded = [e for e in job.ranks if e.loaded and e.digest.step_names]
    if not loaded or len(loaded) < len([e for e in job.ranks if e.loaded]):
        return None
    steps = common_steps(loaded, loaded[0])
    if not steps:
        return None
    totals = {e.rank: _totals(e, steps) for e in loaded}
    merged = {
        r: {**f, **{_annotation_key(a): v for a, v in n.items()}} for r, (f, n) in totals.items()
    }
    reference = job.straggler.get("reference_rank") if job.straggler else None
    if reference not in merged:
        order = sorted(loaded, key=lambda e: (sum(totals[e.rank][0].values()), e.rank))
        reference = order[(len(order) - 1) // 2].rank
    names = list(PHASES) + sorted(
        {k for m in merged.values() for k in m if k not in PHASES},
        key=lambda k: -max(m.get(k, 0) for m in merged.values()),
    )
    ref = merged[reference]
    return {
        "reference": reference,
        "steps": len(steps),
        "phases": names,
        "ranks": {
            r: {
                "total": sum(m.values()),
                "phases": {k: m.get(k, 0) for k in names},
                "excess": {k: m.get(k, 0) - ref.get(k, 0) for k in names},
            }
            for r, m in merged.items()
        },
    }


def _annotation_key(name: str) -> str:
    return f"{ANNOTATION}:{name}"


def phase_label(key: str) -> str:
    """Words for a phase key: PHASE_TEXT, or an annotation's name in quotes."""
    if key.startswith(ANNOTATION + ":"):
        name = key[len(ANNOTATION) + 1 :]
        return f"'{name if len(name) <= LABEL_LIMIT else name[: LABEL_LIMIT - 1] + '…'}'"
    return PHASE_TEXT.get(key, key)


def _straggler(entries: list[RankEntry], aligned: bool = False) -> dict[str, Any] | None:
    """The rank with the least total wait among those in matched collectives, and the phase
    that explains its lateness (module docstring)."""
    taking = [e for e in entries if e.loaded and e.matched]
    if len(taking) < 2:
        return None
    straggler = min(taking, key=lambda e: (e.wait_ns, e.rank))
    waits = [e.wait_ns for e in taking if e is not straggler]
    reference = median_rank(taking, straggler)
    result: dict[str, Any] = {
        "rank": straggler.rank,
        "wait_us": us(straggler.wait_ns),
        "median_wait_us": us(int(np.median(waits))) if waits else None,
        "reference_rank": reference.rank,
        "phase": None,
        "phase_annotation": None,
        "phase_share": None,
        "excess_us": {},
        "annotation_excess_us": {},
        "steps": [],
        "worst_step": None,
        "start_delay_us": None,
    }
    loaded = [e for e in entries if e.loaded]
    ordered = common_steps(loaded, straggler)
    if not ordered:
        result["reason"] = "no ProfilerStep recorded by every rank"
        return result
    mine_fixed, mine_named = _totals(straggler, ordered)
    ref_fixed, ref_named = _totals(reference, ordered)
    excess = {p: mine_fixed[p] - ref_fixed[p] for p in PHASES}
    named = {
        a: mine_named.get(a, 0) - ref_named.get(a, 0) for a in sorted({*mine_named, *ref_named})
    }
    # The step with the largest positive excess, phase by phase, over the median rank.
    at_mine = {n: k for k, n in enumerate(straggler.digest.step_names)}
    at_ref = {n: k for k, n in enumerate(reference.digest.step_names)}
    mine_k = np.array([at_mine[s] for s in ordered], np.int64)
    ref_k = np.array([at_ref[s] for s in ordered], np.int64)
    per_step = np.zeros(len(ordered), np.int64)
    for values, other in (
        (phase_values(straggler.digest), phase_values(reference.digest)),
        (annotation_values(straggler.digest), annotation_values(reference.digest)),
    ):
        for key in {*values, *other}:
            a = values[key][mine_k] if key in values else 0
            b = other[key][ref_k] if key in other else 0
            per_step += np.maximum(a - b, 0)
    worst = int(np.argmax(per_step))
    result["steps"] = ordered
    result["worst_step"] = ordered[worst] if per_step[worst] > 0 else None
    result["excess_us"] = {p: us(v) for p, v in excess.items()}
    result["annotation_excess_us"] = {a: us(v) for a, v in named.items()}
    # When it began its first common step, against the median of the others' starts.
    first = ordered[0]
    starts = [
        int(e.digest.step_start[e.digest.step_names.index(first)])
        - (round(e.offset_ns or 0) if aligned else 0)
        for e in loaded
    ]
    others = [s for e, s in zip(loaded, starts) if e is not straggler]
    if others:
        own = starts[loaded.index(straggler)]
        result["start_delay_us"] = _us_float(own - float(np.median(others)))
    # Its lateness: how much less it waited than the median other rank.
    lateness = (float(np.median(waits)) if waits else 0.0) - straggler.wait_ns
    result["lateness_us"] = _us_float(lateness)
    candidates = {**excess, **{_annotation_key(a): v for a, v in named.items()}}
    phase = max(candidates, key=lambda p: (candidates[p], p in PHASES))
    if candidates[phase] > 0 and lateness > 0:
        share = candidates[phase] / lateness
        result["phase_share"] = round(share, 3)
        if share >= 0.5:
            if phase in PHASES:
                result["phase"] = phase
            else:
                result["phase"] = ANNOTATION
                result["phase_annotation"] = phase[len(ANNOTATION) + 1 :]
    if result["phase"] is None:
        result["reason"] = (
            "no phase of the steps every rank recorded explains at least half of its lateness "
            "(it may have started late before them)"
        )
    return result


def straggler_reason(straggler: dict[str, Any] | None) -> str | None:
    """The straggler's reason in words ("data loading 212 ms more than the median rank",
    "started its step 7.6 ms after the others"), or None."""
    if not straggler:
        return None
    if straggler.get("phase"):
        if straggler["phase"] == ANNOTATION:
            name = straggler.get("phase_annotation") or ""
            key = _annotation_key(name)
            amount = straggler["annotation_excess_us"].get(name)
        else:
            key = straggler["phase"]
            amount = straggler["excess_us"].get(key)
        return f"{phase_label(key)} {_duration(amount)} more than the median rank"
    delay = straggler.get("start_delay_us")
    if delay is not None and delay > 0:
        return f"started its step {_duration(delay)} after the others"
    return None


def _duration(value_us: float | None) -> str:
    from .units import fmt_duration

    return "?" if value_us is None else fmt_duration(abs(float(value_us)) * 1000, 1)


# -- the document ---------------------------------------------------------------------------


def _us_float(ns: float | None) -> float | None:
    return None if ns is None else round(float(ns) / 1000, 3)


def _rank_json(entry: RankEntry, aligned: bool, reference: int | None = None) -> dict[str, Any]:
    digest = entry.digest
    steps = digest.steps
    step_rows = []
    for k, name in enumerate(digest.step_names):

        def value(key: str, k: int = k) -> float | None:
            return us(int(steps[key][k])) if key in steps else None

        step_rows.append(
            {
                "name": name,
                "start_us": us(int(digest.step_start[k])),
                "dur_us": value("dur"),
                "compute_us": value("compute") if digest.has_gpu else None,
                "comm_us": value("comm") if digest.has_gpu else None,
                "idle_us": value("idle") if digest.has_gpu else None,
                "dataloader_us": value("dataloader"),
                "launch_us": us(max(int(steps["runtime"][k]) - int(steps["sync"][k]), 0))
                if digest.has_gpu
                else 0.0,
                "sync_us": value("sync"),
                "cpu_busy_us": value("cpu_busy"),
                "uninstrumented_us": value("uninstrumented"),
                "collective_us": value("collective"),
                "wait_us": us(int(entry.step_wait_ns[k])) if len(entry.step_wait_ns) > k else 0.0,
                "phases_us": {p: us(int(v[k])) for p, v in digest.phases.items()},
                "annotations_us": {a: us(int(v[k])) for a, v in digest.annotations.items()},
            }
        )
    busy = sum(g["busy_us"] or 0 for g in digest.gpu)
    idle = sum(g["idle_us"] or 0 for g in digest.gpu)
    causes: dict[str, float] = {}
    for gpu in digest.gpu:
        for cause, amount in gpu["idle_by_cause"].items():
            causes[cause] = round(causes.get(cause, 0.0) + (amount or 0.0), 3)
    return {
        "rank": entry.rank,
        "path": entry.path,
        "rank_rule": entry.rank_rule,
        "worker": entry.worker,
        "loaded": entry.loaded,
        "complete": digest.complete and entry.loaded,
        "error": digest.error,
        "warnings": digest.warnings,
        "events": digest.events,
        "start_us": us(digest.start_ns),
        "end_us": us(digest.end_ns),
        "steps": step_rows,
        "gpu": digest.gpu,
        "busy_us": round(busy, 3) if digest.gpu else None,
        "idle_us": round(idle, 3) if digest.gpu else None,
        "idle_by_cause": causes,
        "collectives": entry.collectives,
        "collective_us": us(entry.collective_ns),
        "matched_collectives": entry.matched,
        "wait_us": us(entry.wait_ns),
        "clock_offset_us": _us_float(entry.offset_ns),
        "clock_spread_us": _us_float(entry.spread_ns),
        "clock_samples": entry.offset_samples,
        "clock_offset_significant": offset_significant(entry, reference),
        "exit": _exit_json(entry),
        "digest_seconds": round(digest.seconds, 3),
    }


def _rate(value: float) -> float | None:
    """Bytes/s -> GB/s (10^9), 3 decimals; None when unknown."""
    return None if not np.isfinite(value) else round(float(value) / 1e9, 3)


def collective_json(job: JobAnalysis, i: int) -> dict[str, Any]:
    m = job.matched
    ranks = m.ranks
    present = m.present[i]
    waits = {str(r): us(int(job.wait[i, j])) for j, r in enumerate(ranks) if present[j]}
    starts = {str(r): us(int(m.start[i, j])) for j, r in enumerate(ranks) if present[j]}
    durs = {str(r): us(int(m.end[i, j] - m.start[i, j])) for j, r in enumerate(ranks) if present[j]}
    return {
        "group": m.group[i],
        "step": m.step[i],
        "index": m.index[i],
        "kind": m.kind[i],
        "name": m.name[i],
        "ranks": int(present.sum()),
        "group_size": int(m.group_size[i]),
        "bytes": int(m.bytes[i]) if m.bytes[i] >= 0 else None,
        "latency_us": us(int(job.latency[i])),
        "start_skew_us": us(int(job.start_skew[i])),
        "end_skew_us": us(int(job.end_skew[i])),
        "last_rank": ranks[int(job.last[i])],
        "algbw_GBps": _rate(job.algbw[i]),
        "busbw_GBps": _rate(job.busbw[i]),
        "start_us": starts,
        "dur_us": durs,
        "wait_us": waits,
        "not_significant": [
            r
            for j, r in enumerate(ranks)
            if present[j] and not job.significant[i, j] and j != int(job.last[i])
        ],
    }


def collectives_by_skew(job: JobAnalysis, limit: int | None = TOP_COLLECTIVES) -> list[int]:
    """Matched collectives by start skew, largest first (ties: in matching order)."""
    order = sorted(range(len(job.matched)), key=lambda i: (-int(job.start_skew[i]), i))
    return order if limit is None else order[:limit]


def clocks_json(job: JobAnalysis) -> dict[str, Any]:
    """One clock or several, and what aligning did (docs/summary-ranks.md, Clock offsets)."""
    domain = job.clock
    if job.align_forced:
        alignment = "forced"
    elif job.aligned:
        alignment = "applied"
    elif job.align_asked:
        alignment = "not needed: one host"
    else:
        alignment = "not asked"
    return {
        "one_clock": domain.one_host,
        "hosts": list(domain.hosts),
        "host_source": domain.source,
        "alignment": alignment,
    }


def _exit_json(entry: RankEntry) -> dict[str, Any] | None:
    if entry.exit is None:
        return None
    return {**entry.exit.to_json(), "knock_on_of": entry.knock_on_of}


def health_json(job: JobAnalysis) -> dict[str, Any]:
    """How the ranks ended, from capture's exit records (docs/summary-ranks.md, Health)."""
    ended_badly = sorted(
        (x for x in job.exits.values() if not x.clean),
        key=lambda x: (x.ended_unix if x.ended_unix is not None else float("inf"), x.rank),
    )
    failed = [x for x in ended_badly if x.failed]
    return {
        "records": len(job.exits),
        "ended_badly": [x.rank for x in ended_badly],
        "failed": sorted(x.rank for x in failed),
        # The first to fail, by the ranks' end times (a rank `lost` has none).
        "first_failure": next((x.rank for x in failed if x.ended_unix is not None), None),
        "messages": [f"rank {x.rank} {x.describe()}" for x in ended_badly],
        # Failures that followed a peer's: the first failure of its own, and the ranks that
        # then failed on a peer error, in the order they ended (parser/rank_exit.knock_ons).
        "cause": job.knock_on.cause.rank if job.knock_on.cause is not None else None,
        "knock_on": [x.rank for x in job.knock_on.ranks],
        "knock_on_message": job.knock_on.sentence(),
    }


def job_document(job: JobAnalysis) -> dict[str, Any]:
    """The `summary DIR --json` document (docs/summary-ranks.md)."""
    m = job.matched
    files = job.files
    incomplete = [
        {
            "rank": e.rank,
            "path": e.path,
            "reason": e.digest.error
            or next((w for w in e.digest.warnings), "the file ends before the JSON does"),
        }
        for e in job.ranks
        if not e.loaded or not e.digest.complete
    ]
    kinds: dict[str, int] = {}
    for kind in m.kind:
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "kinetoscope_ranks": JOB_VERSION,
        "world_size": job.world_size,
        "clocks_aligned": job.aligned,
        "clock_reference": clock_reference(m),
        "clocks": clocks_json(job),
        "ranks": [_rank_json(e, job.aligned, clock_reference(m)) for e in job.ranks],
        "missing": job.missing,
        "missing_count": files.missing_count if files is not None else len(job.missing),
        "missing_ranges": [
            {"first": a, "last": b, "count": b - a + 1}
            for a, b in (files.missing_ranges[:MISSING_RANGES_LISTED] if files is not None else [])
        ],
        "incomplete": incomplete,
        "matching": {
            "source": m.source,
            "matched": len(m),
            "by_kind": kinds,
            "unmatched": {str(r): n for r, n in m.unmatched.items()},
            "stopped": m.stops,
        },
        "collectives": [collective_json(job, i) for i in collectives_by_skew(job)],
        "straggler": job.straggler,
        "health": health_json(job),
        **(files.to_json() if files is not None else {"cycles": [], "left_out": [], "notes": []}),
    }
