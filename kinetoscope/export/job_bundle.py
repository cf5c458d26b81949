"""`kinetoscope export DIR` (a job's folder, or several rank files): the same window cut from
every rank of a distributed job, written as one Perfetto bundle or as one merged JSON.

The job is found as `summary DIR` finds it (`parser/ranks.py`: a folder or several files, the
newest complete profiling cycle or `--cycle N`), its ranks are digested in worker processes and
merged (`analysis/job.py`) for their time spans and estimated clock offsets, and each rank is
then cut as a single trace is (`kinetoscope.export.crop`: overlapping events, flow closure, metadata
and top-level keys intact): streamed into its file of the bundle (`open_crop` + `write_crop`,
`write_rank`), or held (`crop_trace`) for the merged JSON, which rewrites the events.

The window:
- `--window A..B`: times from the job's origin, the origin the job timeline shows: the earliest
  start of any rank, as recorded and with the offsets applied (`job_origin`). As recorded (the
  default), every rank is cut from origin+A to origin+B in its own clock; with `--align-clocks`,
  rank r is cut from origin+A+offset_r to origin+B+offset_r, which is the same instants on the
  reference rank's clock.
- `--step N`: each rank's own `ProfilerStep#N` (several: from the first one's start to the last
  one's end), whatever the clocks.

A rank's clock offset is the job analysis's: the median, over the synchronising collectives it
shares with the reference rank (the lowest rank taking part), of (its end − the reference's
end), rounded to whole ns; its own clock runs ahead of the reference's by it.

Outputs (docs/export-ranks.md):
- a zip (`-o OUT.zip`): one JSON per rank (`rank<R>.json`, that rank's crop, times as recorded)
  and `perfetto_manifest.json` in Perfetto's trace-manifest format (version 1): each rank is a
  machine named `rank R`, and every other rank's file is pinned to the reference rank's file
  with `clocks.sync_to` and `offset_ns` (minus the rank's offset when the clocks are aligned, 0
  as recorded). Beside the `perfetto_manifest` key, a `kinetoscope` key records the ranks, their
  source files, offsets and windows (Perfetto ignores it).
- one merged Chrome-trace JSON (`-o OUT.json[.gz]`, or `--merged`): every rank's events, with
  process ids made unique per rank (int pid p of rank r: r·P + p, P the power of ten above every
  pid), process names prefixed `rank R: ` and sort indices in rank order; flow ids (`id`,
  `bind_id`) and the id arguments that link events (`correlation`, `External id`, `Python id`,
  `Python parent id`) made unique the same way (r·I + id); with `--align-clocks` every `ts`
  shifted by minus the rank's offset in integer ns and written as µs with 3 decimals (untouched
  text where nothing moves). Top-level keys come from the reference rank's file, plus
  `kinetoscopeMerged`: which ranks are inside, their pid maps, event counts and shifts.

A rank that cannot be read (or has no such step) is left out and named; the others are written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from kinetoscope.export.crop import (
    ExportError,
    Window,
    crop_trace,
    open_crop,
    parse_window,
    replaced_file,
    write_crop,
)
from kinetoscope.parser.ranks import (
    MERGED_KEY,  # a job's discovery leaves merged files out
    ranges_text,
)

MANIFEST_NAME = "perfetto_manifest.json"
MANIFEST_VERSION = 1  # Perfetto's trace-manifest format version
RECORD_VERSION = 1  # of our own `kinetoscope` / `kinetoscopeMerged` records
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")
ID_FIELDS = ("id", "bind_id")
# Ranks are cropped in worker processes when their files add up to this much (smaller ones:
# here, faster than starting the workers) or when --workers is given.
POOL_BYTES = 32 << 20
MAX_ID = (1 << 53) - 1  # ids stay exact for readers that hold numbers as doubles
OFFSETS_FROM = (
    "median over the synchronising collectives shared with the reference rank of (this "
    "rank's end - the reference's end), rounded to ns; the rank's clock runs ahead of the "
    "reference's by it"
)


# -- what to cut from each rank ------------------------------------------------------------


@dataclass
class RankCut:
    """One rank of the job: its file, its clock offset and the window cut from it."""

    rank: int
    path: str
    offset_ns: int | None = None  # own clock − reference clock (None: not estimated)
    spread_ns: float | None = None
    samples: int = 0
    shift_ns: int = 0  # subtracted from its times in the merged JSON
    window: tuple[int, int] | None = None  # [start, end] ns in its own clock
    span: tuple[int, int] | None = None  # its events' first start and last end (own clock)
    problem: str | None = None  # why it is not exported
    events: int = 0  # events written (its crop's)
    incomplete: str | None = None  # the file was cut off: what was read is exported


@dataclass
class JobCut:
    """The job's ranks and what is cut from each."""

    ranks: list[RankCut]
    reference: int | None  # the clock reference rank
    aligned: bool
    origin_ns: int | None  # the job's time origin (reference clock)
    describe: str  # the window as the user gave it
    missing: list[int] = field(default_factory=list)  # the first ones (MISSING_LISTED)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    cycle: int = 1
    missing_ranges: list[tuple[int, int]] = field(default_factory=list)  # every missing rank
    missing_count: int = 0
    cycles: int = 1
    one_clock_host: str | None = None  # aligning was asked, but the ranks share one host's clock

    @property
    def exported(self) -> list[RankCut]:
        return [r for r in self.ranks if r.problem is None]

    @property
    def failed(self) -> list[RankCut]:
        return [r for r in self.ranks if r.problem is not None]


def _at(ns: int) -> str:
    """A time from the job's origin as the viewer writes it (`+5.544ms`)."""
    from kinetoscope.analysis.units import fmt_duration

    return ("+" if ns >= 0 else "-") + fmt_duration(abs(ns)).replace(" ", "")


def job_origin(starts: Sequence[tuple[int | None, int]]) -> int | None:
    """The job's time origin, as the job timeline draws it: the earliest of every rank's start
    (`start_ns`, own clock) as recorded and with its offset (`offset_ns`, rounded) applied:
    min(start − max(offset, 0)). None without any start."""
    values = [start - max(offset, 0) for start, offset in starts if start is not None]
    return min(values) if values else None


def step_window(
    names: Sequence[str], starts: Sequence[int], durs: Sequence[int], steps: Sequence[int]
) -> tuple[int, int] | str:
    """The span of the rank's `ProfilerStep#N` for N in `steps` (from the first one's start to
    the last one's end), or why there is none."""
    wanted = {f"ProfilerStep#{n}" for n in steps}
    spans = [
        (int(start), int(start) + int(dur))
        for name, start, dur in zip(names, starts, durs)
        if name in wanted
    ]
    found = {name for name in names if name in wanted}
    absent = [f"ProfilerStep#{n}" for n in steps if f"ProfilerStep#{n}" not in found]
    if absent:
        have = _step_range(names)
        return f"no {', '.join(absent)}" + (f" (it has {have})" if have else " (it has no steps)")
    return min(s for s, _ in spans), max(e for _, e in spans)


def _step_range(names: Sequence[str]) -> str:
    numbers = sorted(
        {
            int(name.rpartition("#")[2])
            for name in names
            if name.startswith("ProfilerStep#") and name.rpartition("#")[2].isdigit()
        }
    )
    if not numbers:
        return ""
    if len(numbers) == 1:
        return f"ProfilerStep#{numbers[0]}"
    return f"ProfilerStep#{numbers[0]}..#{numbers[-1]}"


def plan_job(
    inputs: list[str],
    *,
    window: str | None = None,
    steps: Sequence[int] | None = None,
    align_clocks: bool = False,
    cycle: int | None = None,
    workers: int | None = None,
    executor: Any = None,
    force_align: bool = False,
) -> JobCut:
    """Find the job, digest its ranks and decide each rank's window (module docstring).
    `align_clocks` does nothing when the ranks ran on one host (one clock) unless
    `force_align`. Raises ExportError when there is no job, or the window cannot be read."""
    from kinetoscope.analysis.job import analyze_job, map_ranks
    from kinetoscope.parser.ranks import JobError, discover

    if window is not None and not steps:
        parse_window(window, 0, 1 << 62)  # a window that cannot be read: said before any work
    try:
        files = discover(inputs, cycle=cycle)
    except JobError as exc:
        raise ExportError(str(exc)) from None
    digests = map_ranks([f.path for f in files.files], executor=executor, workers=workers)
    job = analyze_job(digests, files, align_clocks=align_clocks, force_align=force_align)
    cut = plan_from_job(job, window=window, steps=steps, align_clocks=job.aligned)
    if job.align_asked and not job.aligned and job.clock.one_host:
        cut.one_clock_host = job.clock.hosts[0] if job.clock.hosts else "?"
    return cut


def plan_from_job(
    job: Any,
    *,
    window: str | None = None,
    steps: Sequence[int] | None = None,
    span_ns: tuple[int, int] | None = None,
    align_clocks: bool | None = None,
) -> JobCut:
    """Each rank's window in a job already analysed (`JobAnalysis`, as the job viewer holds
    it): `window` (`A..B` from the job's origin), `steps` (each rank's own ProfilerStep#N) or
    `span_ns` ([start, end] absolute ns on the job's clock, as the job timeline's marked range:
    each rank's own clock as recorded, the reference's aligned). `align_clocks`: default
    `job.aligned`. Raises ExportError when the window cannot be read."""
    from kinetoscope.analysis.job import clock_reference

    aligned = job.aligned if align_clocks is None else align_clocks
    files = job.files
    cuts: list[RankCut] = []
    for entry in job.ranks:
        offset = round(entry.offset_ns) if entry.offset_ns is not None else None
        cut = RankCut(
            rank=entry.rank,
            path=entry.path,
            offset_ns=offset,
            spread_ns=entry.spread_ns,
            samples=entry.offset_samples,
            shift_ns=offset if (aligned and offset is not None) else 0,
        )
        digest = entry.digest
        if digest.start_ns is not None and digest.end_ns is not None:
            cut.span = (digest.start_ns, digest.end_ns)
        if digest.error is not None:
            cut.problem = digest.error
        elif digest.start_ns is None:
            cut.problem = "no timed events" + (
                f" ({digest.warnings[0]})" if digest.warnings else ""
            )
        elif not digest.complete:
            cut.incomplete = "; ".join(digest.warnings) or "the file is cut off"
        cuts.append(cut)
    loaded = [(c, e) for c, e in zip(cuts, job.ranks) if c.problem is None]
    origin = job_origin([(e.digest.start_ns, c.offset_ns or 0) for c, e in loaded])
    if steps:
        describe = ", ".join(f"ProfilerStep#{n}" for n in steps)
        for cut, entry in loaded:
            digest = entry.digest
            found = step_window(
                digest.step_names,
                digest.step_start.tolist(),
                digest.steps.get("dur", digest.step_start).tolist(),
                steps,
            )
            if isinstance(found, str):
                cut.problem = found
            else:
                cut.window = found
    elif window is not None or span_ns is not None:
        if origin is None:
            raise ExportError("no rank could be read: there is no time to cut the window from")
        if span_ns is not None:
            span = Window(*span_ns)
            describe = f"{_at(span.start_ns - origin)}..{_at(span.end_ns - origin)}"
        else:
            assert window is not None
            describe = window.strip()
            # The job's end as its timeline draws it (every rank, as recorded and aligned).
            end = max(
                e.digest.end_ns - min(c.offset_ns or 0, 0)
                for c, e in loaded
                if e.digest.end_ns is not None
            )
            span = parse_window(window, origin, end)
        for cut, _ in loaded:
            cut.window = (span.start_ns + cut.shift_ns, span.end_ns + cut.shift_ns)
            if cut.span is not None and (
                cut.window[1] < cut.span[0] or cut.window[0] > cut.span[1]
            ):
                first, last = (t - cut.shift_ns - origin for t in cut.span)
                cut.problem = (
                    f"the window is outside its events (they run from {_at(first)} to "
                    f"{_at(last)} from the job's origin"
                    + (", its clock offset applied)" if cut.shift_ns else ")")
                )
    else:
        raise ExportError("choose the window: --window A..B or --step N")
    chosen = (
        next((c for c in files.cycles if c.index == files.chosen), None)
        if files is not None
        else None
    )
    return JobCut(
        ranks=cuts,
        reference=clock_reference(job.matched),
        aligned=aligned,
        origin_ns=origin,
        describe=describe,
        missing=list(job.missing),
        left_out=list(files.left_out) if files is not None else [],
        cycle=chosen.index if chosen is not None else 1,
        cycles=len(files.cycles) if files is not None else 1,
        missing_ranges=list(files.missing_ranges) if files is not None else [],
        missing_count=files.missing_count if files is not None else 0,
    )


# -- the merged JSON ------------------------------------------------------------------------

_RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_VALUE = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()


@dataclass
class RankEvents:
    """One rank's crop as the merge takes it: the raw JSON text of each event."""

    rank: int
    events: Sequence[bytes]
    shift_ns: int = 0  # subtracted from every `ts`


@dataclass
class MergeResult:
    """What the merge wrote, per rank: the pid map (original -> merged, as JSON keys), the
    events from the crop and the metadata events added (process names, sort indices)."""

    pid_stride: int = 10
    id_stride: int = 10
    pids: dict[int, list[list[Any]]] = field(default_factory=dict)  # [original, merged]
    events: dict[int, int] = field(default_factory=dict)
    added: dict[int, int] = field(default_factory=dict)
    sort_stride: int = 10  # rank R's processes sort at R·sort_stride + their place
    processes: dict[int, _Processes] = field(default_factory=dict, repr=False)


def _digits_stride(largest: int) -> int:
    """The power of ten above `largest` (at least 10)."""
    stride = 10
    while stride <= largest:
        stride *= 10
    return stride


def _is_int(value: Any) -> bool:
    return type(value) is int


class _Event:
    """One event being merged: its fields as raw JSON text, the few it may change decoded."""

    __slots__ = ("raw", "fields", "args", "pid", "meta", "ids", "arg_ids")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.fields: dict[str, msgspec.Raw] | None = None
        self.args: dict[str, msgspec.Raw] | None = None
        self.pid: Any = None
        self.meta = False  # a metadata (`M`) event
        self.ids: dict[str, Any] = {}  # ID_FIELDS present, decoded
        self.arg_ids: dict[str, Any] = {}  # ID_ARGS present, decoded
        try:
            fields = self.fields = _RAW_OBJECT.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return  # not an object: written as it was
        if "pid" in fields:
            self.pid = _decoded(fields["pid"])
        ph = fields.get("ph")
        self.meta = ph is not None and _decoded(ph) == "M"
        for key in ID_FIELDS:
            if key in fields:
                self.ids[key] = _decoded(fields[key])
        raw_args = fields.get("args")
        if raw_args is not None:
            text = bytes(raw_args)
            if any(key in text for key in _ID_ARG_BYTES):
                try:
                    self.args = _RAW_OBJECT.decode(text)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    self.args = None
                if self.args is not None:
                    for key in ID_ARGS:
                        if key in self.args:
                            self.arg_ids[key] = _decoded(self.args[key])

    def value(self, key: str) -> Any:
        raw = self.fields.get(key) if self.fields is not None else None
        return None if raw is None else _decoded(raw)

    def all_ids(self) -> Iterable[Any]:
        yield from self.ids.values()
        yield from self.arg_ids.values()


_ID_ARG_BYTES = tuple(key.encode() for key in ID_ARGS)


def _decoded(raw: msgspec.Raw) -> Any:
    try:
        return _VALUE.decode(raw)
    except msgspec.DecodeError:
        return None


def _map_id(value: Any, rank: int, stride: int) -> Any:
    """An id of `rank` made unique across ranks: r·stride + id for ints (negative ones
    downwards), a `@rank R` suffix for strings; other values as they are."""
    if rank == 0:
        return value
    if _is_int(value):
        return value + rank * stride if value >= 0 else value - rank * stride
    if isinstance(value, str):
        return f"{value}@rank{rank}"
    return value


def _map_pid(value: Any, rank: int, stride: int) -> Any:
    """A process id of `rank` made unique across ranks: r·stride + pid for non-negative ints,
    `rank R <pid>` for the others (strings such as Kineto's `Spans`)."""
    if _is_int(value) and value >= 0:
        return value + rank * stride
    if value is None or value == "":
        return f"rank {rank}"
    return f"rank {rank} {value}"


def shift_ts(text: bytes, shift_ns: int) -> bytes | None:
    """A JSON `ts` (µs) moved back by `shift_ns` ns, exactly: integer ns arithmetic, written as
    µs with 3 decimals (more where the original had sub-ns digits). None when `text` is not a
    JSON number."""
    try:
        value = Decimal(text.decode("ascii").strip())
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    if not value.is_finite():
        return None
    ns = value * 1000
    if ns == ns.to_integral_value():
        moved = int(ns) - shift_ns
        sign = "-" if moved < 0 else ""
        whole, part = divmod(abs(moved), 1000)
        return f"{sign}{whole}.{part:03d}".encode()
    moved_us = value - Decimal(shift_ns) / 1000
    return format(moved_us, "f").encode()


def ts_ns(text: bytes | str) -> Decimal:
    """A `ts` text in exact ns (a Decimal: whole for up to 3 decimals)."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    return Decimal(text.strip()) * 1000


def _encode(value: Any) -> msgspec.Raw:
    return msgspec.Raw(_ENCODE.encode(value))


@dataclass
class _Processes:
    """One rank's processes: original pid by key (in order of appearance) and its merged pid,
    those with a name and their original sort indices."""

    original: dict[Any, Any] = field(default_factory=dict)
    pids: dict[Any, Any] = field(default_factory=dict)  # key -> merged pid
    named: set[Any] = field(default_factory=set)
    sort_index: dict[Any, int | None] = field(default_factory=dict)

    def see(self, event: _Event) -> None:
        key = _pid_key(event.pid)
        if key not in self.original:
            self.original[key] = event.pid
        if event.meta:
            name = event.value("name")
            if name == "process_name":
                self.named.add(key)
            elif name == "process_sort_index":
                args = event.value("args")
                index = args.get("sort_index") if isinstance(args, dict) else None
                self.sort_index[key] = index if _is_int(index) else None

    def order(self) -> dict[Any, int]:
        """Each process's place in the rank: by its own sort index (those with one first),
        then by appearance."""
        seen = {key: i for i, key in enumerate(self.original)}

        def place(key: Any) -> tuple[int, int, int]:
            index = self.sort_index.get(key)
            return (0, index, seen[key]) if index is not None else (1, 0, seen[key])

        return {key: i for i, key in enumerate(sorted(self.original, key=place))}


def plan_merge(parts: Sequence[RankEvents]) -> MergeResult:
    """The first pass of the merge: every rank's processes and the strides that make pids and
    ids unique (each event is decoded and let go: only the crops' text stays in memory)."""
    largest_pid = largest_id = 0
    result = MergeResult()
    for part in parts:
        found = result.processes[part.rank] = _Processes()
        for raw in part.events:
            event = _Event(raw)
            if event.fields is None:
                continue
            if _is_int(event.pid):
                largest_pid = max(largest_pid, abs(event.pid))
            for value in event.all_ids():
                if _is_int(value):
                    largest_id = max(largest_id, abs(value))
            found.see(event)
        result.events[part.rank] = len(part.events)
    result.pid_stride = _digits_stride(largest_pid)
    result.id_stride = _digits_stride(largest_id)
    top_rank = max((part.rank for part in parts), default=0)
    if (top_rank + 1) * max(result.id_stride, result.pid_stride) > MAX_ID:
        raise ExportError(
            "the ranks' ids are too large to be made unique as exact JSON integers "
            f"({top_rank + 1} ranks × {max(result.id_stride, result.pid_stride)})"
        )
    most = max((len(p.original) for p in result.processes.values()), default=1)
    result.sort_stride = _digits_stride(most - 1)
    for rank, found in result.processes.items():
        found.pids = {
            k: _map_pid(pid, rank, result.pid_stride) for k, pid in found.original.items()
        }
        result.pids[rank] = [[pid, found.pids[k]] for k, pid in found.original.items()]
        result.added[rank] = sum(
            (k not in found.named) + (k not in found.sort_index) for k in found.original
        )
    return result


def merged_events(parts: list[RankEvents], result: MergeResult) -> Iterator[bytes]:
    """The second pass: every rank's events as raw JSON texts, ranks in order, each rank's
    added process names and sort indices first; a rank's crop is let go once written."""
    for index, part in enumerate(parts):
        found = result.processes[part.rank]
        base = part.rank * result.sort_stride
        place = found.order()
        for key, new in found.pids.items():
            original = found.original[key]
            if key not in found.named:
                label = f": {original}" if original not in (None, "") else ""
                yield _metadata(new, "process_name", {"name": f"rank {part.rank}{label}"})
            if key not in found.sort_index:
                yield _metadata(new, "process_sort_index", {"sort_index": base + place[key]})
        for raw in part.events:
            yield _rewrite(_Event(raw), part, result, found, base, place)
        parts[index] = RankEvents(part.rank, (), part.shift_ns)  # its text is written: let go


def merge_events(parts: Sequence[RankEvents]) -> tuple[list[bytes], MergeResult]:
    """Every rank's events as one list of raw JSON texts (ranks in order, each rank's added
    process names and sort indices first), pids and linking ids made unique across ranks and
    times shifted by each rank's `shift_ns` (module docstring)."""
    result = plan_merge(parts)
    return list(merged_events(list(parts), result)), result


def _pid_key(pid: Any) -> Any:
    # 1 and True, 1 and 1.0 are equal as dict keys; pids are ints or strings in practice
    return (type(pid).__name__, pid if isinstance(pid, (int, str)) or pid is None else repr(pid))


def _metadata(pid: Any, name: str, args: dict[str, Any]) -> bytes:
    return _ENCODE.encode({"name": name, "ph": "M", "pid": pid, "tid": 0, "args": args})


def _rewrite(
    event: _Event,
    part: RankEvents,
    result: MergeResult,
    found: _Processes,
    base: int,
    place: dict[Any, int],
) -> bytes:
    fields = event.fields
    if fields is None:
        return event.raw
    rank = part.rank
    changed = False
    new_pid = found.pids[_pid_key(event.pid)]
    if new_pid != event.pid or type(new_pid) is not type(event.pid) or "pid" not in fields:
        fields["pid"] = _encode(new_pid)
        changed = True
    if rank:
        for key, value in event.ids.items():
            mapped = _map_id(value, rank, result.id_stride)
            if mapped != value or type(mapped) is not type(value):
                fields[key] = _encode(mapped)
                changed = True
        if event.args is not None:
            args_changed = False
            for key, value in event.arg_ids.items():
                mapped = _map_id(value, rank, result.id_stride)
                if mapped != value or type(mapped) is not type(value):
                    event.args[key] = _encode(mapped)
                    args_changed = True
            if args_changed:
                fields["args"] = msgspec.Raw(_ENCODE.encode(event.args))
                changed = True
    if event.meta:
        name = event.value("name")
        if name in ("process_name", "process_sort_index"):
            args = event.value("args")
            args = dict(args) if isinstance(args, dict) else {}
            if name == "process_name":
                original = args.get("name")
                args["name"] = f"rank {rank}: {original}" if original else f"rank {rank}"
            else:
                args["sort_index"] = base + place[_pid_key(event.pid)]
            fields["args"] = _encode(args)
            changed = True
    if part.shift_ns and "ts" in fields:
        moved = shift_ts(bytes(fields["ts"]), part.shift_ns)
        if moved is not None:
            fields["ts"] = msgspec.Raw(moved)
            changed = True
    return _ENCODE.encode(fields) if changed else event.raw


def write_merged(
    out_path: str,
    top: dict[str, bytes],
    events: Iterable[bytes],
    record: dict[str, Any],
) -> int:
    """The merged trace: the reference rank's top-level keys (raw text, in order), the
    `kinetoscopeMerged` record, then `traceEvents` (.json.gz by suffix: gzip). Written to a
    temporary file renamed into place; returns the bytes written (uncompressed)."""
    import gzip

    written = 0
    with replaced_file(out_path) as temp, open(temp, "wb") as raw_file:
        sink: Any = (
            gzip.GzipFile(filename="", fileobj=raw_file, mode="wb", compresslevel=6, mtime=0)
            if out_path.lower().endswith(".gz")
            else raw_file
        )
        try:

            def put(data: bytes) -> None:
                nonlocal written
                sink.write(data)
                written += len(data)

            put(b"{")
            for key, value in top.items():
                if key in ("traceEvents", MERGED_KEY):
                    continue
                put(json.dumps(key).encode() + b": " + bytes(value).strip() + b",\n")
            put(json.dumps(MERGED_KEY).encode() + b": " + json.dumps(record).encode() + b",\n")
            put(b'"traceEvents": [\n')
            first = True
            for event in events:
                put(event if first else b",\n" + event)
                first = False
            put(b"\n]}\n")
        finally:
            if sink is not raw_file:
                sink.close()
    return written


# -- the Perfetto bundle --------------------------------------------------------------------


def member_name(rank: int, width: int) -> str:
    """A rank's file in the bundle: `rank<R>.json`, R zero-padded to `width` digits."""
    return f"rank{rank:0{width}d}.json"


def manifest(cut: JobCut, members: dict[int, str]) -> dict[str, Any]:
    """`perfetto_manifest.json` for the exported ranks (`members`: rank -> file in the zip):
    Perfetto's trace-manifest (version 1) plus our own `kinetoscope` record beside it."""
    exported = [r for r in cut.ranks if r.rank in members]
    reference = cut.reference if cut.reference in members else None
    files: list[dict[str, Any]] = []
    for rank in exported:
        entry: dict[str, Any] = {
            "path": members[rank.rank],
            "machine": {"name": f"rank {rank.rank}"},
        }
        if reference is not None and rank.rank != reference and rank.offset_ns is not None:
            entry["clocks"] = {
                "sync_to": {"file": members[reference]},
                # Perfetto: this file reads T when the reference reads T + offset_ns.
                "offset_ns": -rank.offset_ns if cut.aligned else 0,
            }
        files.append(entry)
    attributes: dict[str, Any] = {
        "kinetoscope.ranks": len(exported),
        "kinetoscope.clocks": "aligned" if cut.aligned else "as recorded",
        "kinetoscope.window": cut.describe,
    }
    if reference is not None:
        attributes["kinetoscope.reference_rank"] = reference
    return {
        "perfetto_manifest": {
            "version": MANIFEST_VERSION,
            "files": files,
            "attributes": attributes,
        },
        "kinetoscope": record(cut, members),
    }


def record(cut: JobCut, members: dict[int, str] | None = None) -> dict[str, Any]:
    """What the bundle or the merged file holds, for people and scripts."""
    ranks = []
    for rank in cut.ranks:
        item: dict[str, Any] = {
            "rank": rank.rank,
            "source": os.path.basename(rank.path),
            "offset_ns": rank.offset_ns,
            "offset_spread_ns": rank.spread_ns,
            "offset_samples": rank.samples,
            "shift_ns": rank.shift_ns,
            "window_ns": list(rank.window) if rank.window is not None else None,
        }
        if members is not None:
            item["file"] = members.get(rank.rank)
        if rank.problem is not None:
            item["left_out"] = rank.problem
        else:
            item["events"] = rank.events
        if rank.incomplete is not None:
            item["incomplete"] = rank.incomplete
        ranks.append(item)
    return {
        "version": RECORD_VERSION,
        "window": cut.describe,
        "origin_ns": cut.origin_ns,
        "clocks": "aligned" if cut.aligned else "as recorded",
        "reference_rank": cut.reference,
        "offsets_from": OFFSETS_FROM,
        "ranks": ranks,
        "missing_ranks": cut.missing,
        "missing_rank_ranges": [
            {"first": a, "last": b, "count": b - a + 1} for a, b in cut.missing_ranges[:1024]
        ],
        "missing_rank_count": cut.missing_count,
        "profiling_cycle": cut.cycle,
    }


# -- the command ----------------------------------------------------------------------------


def output_kind(out_path: str, merged: bool) -> str:
    """'zip' or 'merged' by the output's name (and `--merged`); raises ExportError for a
    name that is neither."""
    lower = out_path.lower()
    if lower.endswith(".zip"):
        if merged:
            raise ExportError(
                "--merged writes one JSON trace: name the output .json or .json.gz, "
                "or leave --merged out for the Perfetto bundle (.zip)"
            )
        return "zip"
    if lower.endswith((".json", ".json.gz")):
        return "merged"
    raise ExportError(
        f"{out_path}: a job is exported as a Perfetto bundle (.zip) or one merged trace "
        "(.json, .json.gz)"
    )


def _size_of(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def crop_rank(path: str, window: tuple[int, int], clip: bool) -> tuple[Any, str | None]:
    """One rank's crop (in a worker process, or here): (crop, None), or (None, why not)."""
    try:
        return crop_trace(path, Window(*window), clip=clip), None
    except ExportError as exc:
        return None, str(exc)
    except MemoryError:
        return None, "out of memory while cropping it"


def write_rank(
    path: str, window: tuple[int, int], clip: bool, out_path: str
) -> tuple[int | None, str | None]:
    """One rank's crop written to `out_path` (in a worker process, or here), streamed: its
    events are read from the rank's file as they are written (`open_crop` + `write_crop`),
    never all held. (events written, None), or (None, why the rank is left out). A file that
    cannot be written raises ExportError (it names `out_path`): the bundle cannot be made."""
    try:
        stream = open_crop(path, Window(*window), clip=clip)
    except ExportError as exc:
        return None, str(exc)
    except MemoryError:
        return None, "out of memory while cropping it"
    try:
        write_crop(stream, out_path)
    except ExportError as exc:
        if str(exc).startswith(out_path):  # writing failed (a full disk): no bundle
            raise
        return None, str(exc)  # the rank's file could not be read again
    except MemoryError:
        return None, "out of memory while cropping it"
    return stream.stats.events, None


def _each_rank(
    cut: JobCut, workers: int | None, task: Any, args: Any
) -> Iterator[tuple[RankCut, Any]]:
    """Each exported rank with `task(*args(rank))`'s value, in rank order; a rank whose task
    says why it fails (value None, problem) gets its `problem` and is skipped. Several ranks
    are done in worker processes (`workers`, default min(ranks, CPUs)), each loading its own
    trace, when their files are big enough (POOL_BYTES) or `workers` is given."""
    from kinetoscope.analysis.job import default_workers, worker_context

    todo = [r for r in cut.ranks if r.problem is None and r.window is not None]
    pool_size = workers or default_workers(len(todo))
    size = sum(_size_of(r.path) for r in todo)
    if len(todo) <= 1 or pool_size <= 1 or (workers is None and size < POOL_BYTES):
        results: Iterable[tuple[Any, str | None]] = (task(*args(r)) for r in todo)
        pool = None
    else:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=pool_size, mp_context=worker_context())
        futures = [pool.submit(task, *args(r)) for r in todo]
        results = (future.result() for future in futures)
    try:
        for rank, (value, problem) in zip(todo, results):
            if value is None:
                rank.problem = problem
                continue
            yield rank, value
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _crops(cut: JobCut, clip: bool, workers: int | None) -> Iterator[tuple[RankCut, Any]]:
    """Each exported rank with its crop held whole (the merged trace needs the events), in
    rank order (`_each_rank`)."""
    for rank, crop in _each_rank(cut, workers, crop_rank, lambda r: (r.path, r.window, clip)):
        rank.events = len(crop.events)
        yield rank, crop


def export_job(
    cut: JobCut,
    out_path: str,
    *,
    merged: bool = False,
    clip: bool = False,
    workers: int | None = None,
) -> tuple[str, int]:
    """Cut every rank and write the bundle or the merged trace; (kind, bytes written). Raises
    ExportError when no rank could be exported."""
    kind = output_kind(out_path, merged)
    for rank in cut.ranks:
        try:
            same = os.path.exists(out_path) and os.path.samefile(rank.path, out_path)
        except OSError:
            same = False
        if same:
            raise ExportError(
                f"{out_path}: is rank {rank.rank}'s trace; write the export elsewhere"
            )
    if kind == "zip":
        written = _write_bundle(cut, out_path, clip, workers)
    else:
        written = _write_merged(cut, out_path, clip, workers)
    return kind, written


def _nothing_left(cut: JobCut) -> ExportError:
    problems = {r.problem for r in cut.failed}
    if len(cut.failed) > 1 and len(problems) == 1:
        named = f"every rank: {problems.pop()}"
    else:
        named = "; ".join(f"rank {r.rank}: {r.problem}" for r in cut.failed)
    text = f"no rank could be exported ({named})" if named else "no ranks"
    if cut.cycles > 1:
        text += (
            f"; the files hold {cut.cycles} profiling cycles, this is cycle {cut.cycle} "
            "(--cycle N picks another)"
        )
    return ExportError(text)


def _write_bundle(cut: JobCut, out_path: str, clip: bool, workers: int | None) -> int:
    """The Perfetto bundle: each rank's crop streamed into its own file (`write_rank`: never
    held whole; in worker processes when `_each_rank` uses them), added to the zip in rank
    order and removed, then the manifest."""
    width = len(str(max((r.rank for r in cut.ranks), default=0)))
    members: dict[int, str] = {}
    folder = os.path.dirname(os.path.abspath(out_path))
    with replaced_file(out_path) as temp:
        with tempfile.TemporaryDirectory(prefix=".kinetoscope-export-", dir=folder) as scratch:

            def args(rank: RankCut) -> tuple[Any, ...]:
                name = member_name(rank.rank, width)
                return rank.path, rank.window, clip, os.path.join(scratch, name)

            with zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
                try:
                    for rank, events in _each_rank(cut, workers, write_rank, args):
                        name = member_name(rank.rank, width)
                        path = os.path.join(scratch, name)
                        rank.events = events
                        bundle.write(path, arcname=name)
                        os.unlink(path)
                        members[rank.rank] = name
                except ExportError as exc:  # it names a scratch file: name the bundle
                    member = re.escape(os.path.join(scratch, "rank")) + r"[0-9]+\.json"
                    text = re.sub(member, lambda _match: out_path, str(exc), count=1)
                    raise ExportError(text) from None
                if not members:
                    raise _nothing_left(cut)
                text = json.dumps(manifest(cut, members), indent=2) + "\n"
                bundle.writestr(MANIFEST_NAME, text)
    return os.path.getsize(out_path)


def _write_merged(cut: JobCut, out_path: str, clip: bool, workers: int | None) -> int:
    parts: list[RankEvents] = []
    tops: dict[int, dict[str, bytes]] = {}
    for rank, crop in _crops(cut, clip, workers):
        parts.append(RankEvents(rank.rank, crop.events, rank.shift_ns))
        tops[rank.rank] = crop.top
    if not parts:
        raise _nothing_left(cut)
    result = plan_merge(parts)
    top = tops.get(cut.reference) if cut.reference in tops else tops[parts[0].rank]
    info = record(cut)
    info["top_level_from_rank"] = cut.reference if cut.reference in tops else parts[0].rank
    info["pid_stride"] = result.pid_stride
    info["id_stride"] = result.id_stride
    info["id_fields"] = [*ID_FIELDS, *(f"args.{key}" for key in ID_ARGS)]
    for item in info["ranks"]:
        rank = item["rank"]
        if rank in result.pids:
            item["pids"] = result.pids[rank]
            item["metadata_added"] = result.added[rank]
    return write_merged(out_path, top, merged_events(parts, result), info)


def summary_line(cut: JobCut, out_path: str, kind: str, written: int) -> str:
    """The one line saying what was written where."""
    from kinetoscope.analysis.units import fmt_bytes, plural

    done = cut.exported
    events = sum(r.events for r in done)
    what = "Perfetto bundle" if kind == "zip" else "merged trace"
    clocks = (
        f"clocks aligned on rank {cut.reference}"
        if cut.aligned and cut.reference is not None
        else "clocks as recorded"
    )
    return (
        f"wrote {out_path}: {what} of {plural(len(done), 'rank')} "
        f"({plural(events, 'event')}, {fmt_bytes(written)}), {cut.describe}, {clocks}"
    )


def problem_lines(cut: JobCut) -> list[str]:
    """The ranks left out, missing or cut off, one line each (as the job summary names them)."""
    lines = [
        f"rank {r.rank} ({os.path.basename(r.path)}): left out: {r.problem}" for r in cut.failed
    ]
    lines += [
        f"rank {r.rank} ({os.path.basename(r.path)}): incomplete: {r.incomplete}"
        for r in cut.exported
        if r.incomplete is not None
    ]
    if cut.missing_ranges:
        lines.append(
            "missing ranks (no file): " + ranges_text(cut.missing_ranges, cut.missing_count)
        )
    lines += [f"{os.path.basename(path)}: not used: {why}" for path, why in cut.left_out]
    if cut.one_clock_host is not None:
        lines.append(
            f"one clock: every rank ran on host {cut.one_clock_host}, so --align-clocks has "
            "nothing to align (--force-align-clocks does): clocks as recorded"
        )
    if cut.aligned and all(r.offset_ns is None for r in cut.exported):
        lines.append("no clock offsets (no synchronising collectives): clocks as recorded")
    elif cut.aligned:
        lines += [
            f"rank {r.rank}: no clock offset (no synchronising collective with rank "
            f"{cut.reference}): as recorded"
            for r in cut.exported
            if r.offset_ns is None
        ]
    return lines


# -- a job's inputs --------------------------------------------------------------------------


def is_job(inputs: Sequence[str]) -> bool:
    """Several files, or a folder: a job's ranks."""
    return len(inputs) > 1 or (len(inputs) == 1 and os.path.isdir(inputs[0]))
