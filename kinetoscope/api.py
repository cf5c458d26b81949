"""The Python API: `kinetoscope.open(path)`, `open_job(dir_or_files)`, `diff(base, new)`
(docs/api.md is the reference and says what is stable).

Every result is a `kinetoscope.frames.Table` (`.to_pandas()`, `.to_arrow()`), built from the
same `TraceSession` results as `kinetoscope summary`, so its numbers are the summary's (in exact
int64 ns where the JSON has rounded µs). The SQL command (kinetoscope/sql.py) queries these
tables. Nothing here imports pandas, pyarrow or duckdb."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from kinetoscope.frames import Codes, Gathered, MissingExtra, Table, concat, masked

__all__ = [
    "Diff",
    "Job",
    "MissingExtra",
    "Table",
    "Trace",
    "TraceError",
    "Window",
    "diff",
    "open",
    "open_job",
]

NO_VALUE = np.iinfo(np.int64).min
KIND_NAMES = ["cpu", "kernel", "memcpy", "memset", "runtime", "not_cpu"]  # KIND_* order

# The SQL tables of one trace (docs/sql.md) and the `Trace` methods that make them.
TRACE_TABLES = {
    "slice": "slices",
    "thread_track": "tracks",
    "track": "tracks",
    "flow": "flows",
    "kernel": "kernel_events",
    "operator": "operator_events",
    "gap": "gaps",
    "step": "steps",
    "memory_event": "memory_events",
    "collective": "collectives",
}

_hide_lock = threading.Lock()


class TraceError(Exception):
    """A trace (or a job's folder) could not be opened; the message is one line."""


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """While loading: the main module's file and module name hidden from new worker processes.

    A worker process starts by importing the parent's main script; a script that calls the API
    at its top level, without `if __name__ == "__main__":`, would run again in every worker.
    The workers never need the main module, so the API's loads hide it (a notebook has none)."""
    main = sys.modules.get("__main__")
    with _hide_lock:
        file = getattr(main, "__file__", None)
        spec = getattr(main, "__spec__", None)
        if main is not None and file is not None:
            del main.__file__
        if main is not None and spec is not None:
            main.__spec__ = None
        try:
            yield
        finally:
            if main is not None and file is not None:
                main.__file__ = file
            if main is not None and spec is not None:
                main.__spec__ = spec


def _problem(path: str) -> str | None:
    from kinetoscope.parser.source import trace_path_problem

    return trace_path_problem(path, streams=True)


def _clean(text: str) -> str:
    from kinetoscope.present.safe_text import clean

    return clean(text)


def open(path: str | os.PathLike[str], *, use_cache: bool = True) -> Trace:  # noqa: A001
    """Load one trace (.json or .json.gz) for analysis from code. Raises `TraceError` (one
    line) when it cannot be read. `use_cache`: read and write the model cache, as the viewer
    does (a big trace reopens in a fraction of its load time)."""
    from kinetoscope.parser import TraceError as ParserError
    from kinetoscope.parser import load

    path = os.fspath(path)
    problem = _problem(path)
    if problem is not None:
        raise TraceError(problem)
    try:
        with main_module_hidden():
            model = load(path, use_cache=use_cache, write_cache=use_cache)
    except ParserError as exc:
        raise TraceError(_clean(str(exc))) from None
    return Trace(model)


def _from_session(session: Any) -> Trace:
    t = Trace.__new__(Trace)
    t._init(session)
    return t


def _repr_paragraph(obj: Any) -> str:
    """A notebook's view of a Trace, Job or Diff: its (cleaned) repr as one HTML paragraph."""
    import html

    return f"<p>{html.escape(repr(obj))}</p>"


class Trace:
    """One opened trace (`kinetoscope.open`). Methods return `Table`s; each is computed on first
    use and shares the analysis with the others (one `TraceSession`)."""

    def __init__(self, model: Any) -> None:
        from kinetoscope.analysis import TraceSession

        self._init(TraceSession(model))

    @classmethod
    def of_session(cls, session: Any) -> Trace:
        """The API's view of a `TraceSession` already open (the MCP server's, say)."""
        trace = cls.__new__(cls)
        trace._init(session)
        return trace

    def _init(self, session: Any) -> None:
        self.session = session
        self.model = session.trace
        self._unique: bool | None = None
        self._cache: dict[str, Table] = {}
        self._lock = threading.Lock()

    # -- helpers ----------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self.model.source.path

    def _strings_unique(self) -> bool:
        if self._unique is None:
            strings = self.model.strings
            self._unique = len(set(strings)) == len(strings)
        return self._unique

    def _names(self, ids: np.ndarray) -> Codes:
        return Codes(np.asarray(ids, np.int32), self.model.strings, self._strings_unique())

    def _gathered_names(self, ids: np.ndarray, rows: np.ndarray) -> Gathered:
        """`_names(ids[rows])`, gathered when read."""
        return Gathered(
            ids, rows, np.int32, strings=self.model.strings, unique=self._strings_unique()
        )

    def _once(self, name: str, make: Any) -> Table:
        with self._lock:
            table = self._cache.get(name)
        if table is None:
            table = make()
            with self._lock:
                table = self._cache.setdefault(name, table)
        return table

    def __repr__(self) -> str:
        m = self.model
        return (
            f"<kinetoscope Trace {_clean(os.path.basename(self.path))!r}: {m.n_events:,} events, "
            f"{len(m):,} rows, {len(m.lanes)} tracks>"
        )

    def _repr_html_(self) -> str:
        return _repr_paragraph(self)

    def summary(self) -> dict[str, Any]:
        """The `summary --json` document (`spec/summary-json.md`)."""
        from kinetoscope.analysis.summary import build_summary

        return build_summary(self.session)

    # -- raw events -------------------------------------------------------------------------

    def slices(self) -> Table:
        """Every complete event (ph X), one row each, Perfetto's `slice` columns: `id` (the row,
        for `event_args`), `ts`, `dur` (int64 ns), `name`, `category`, `track`, `depth` and
        `parent` (CPU slices; null for GPU activity and roots), `kind`, `correlation`,
        `external_id`, `device`, `stream`."""

        def make() -> Table:
            # One row per slice: the table keeps the rows, each column is gathered when read.
            m = self.model
            rows = np.flatnonzero(m.ph == ord("X")).astype(np.int64, copy=False)
            session = self.session

            def nested(field: str) -> Any:
                return lambda: getattr(session.nesting, field)

            return Table(
                "slice",
                {
                    "id": rows,
                    "ts": Gathered(m.start, rows),
                    "dur": Gathered(m.dur, rows),
                    "name": self._gathered_names(m.name, rows),
                    "category": self._gathered_names(m.cat, rows),
                    "track": Gathered(m.lane, rows, np.int64),
                    "depth": Gathered(nested("depth"), rows, np.int64, null_value=-1),
                    "parent": Gathered(nested("parent"), rows, np.int64, null_value=-1),
                    "kind": Gathered(session.classes.kind, rows, np.int32, strings=KIND_NAMES),
                    "correlation": Gathered(m.corr, rows, null_value=NO_VALUE),
                    "external_id": Gathered(m.ext_id, rows, null_value=NO_VALUE),
                    "device": Gathered(m.device, rows, null_value=-1),
                    "stream": Gathered(m.stream, rows, null_value=NO_VALUE),
                },
            )

        return self._once("slice", make)

    def tracks(self) -> Table:
        """The lanes (Perfetto's `thread_track`): `id` (a slice's `track`), `name` as the viewer
        shows it, `pid`, `tid` (as written, text), `process_name`, `thread_name`, `is_gpu`."""

        def make() -> Table:
            lanes = self.model.lanes
            return Table(
                "track",
                {
                    "id": np.array([lane.id for lane in lanes], np.int64),
                    "name": [lane.label for lane in lanes],
                    "pid": [str(lane.pid) for lane in lanes],
                    "tid": [str(lane.tid) for lane in lanes],
                    "process_name": [lane.process_name for lane in lanes],
                    "thread_name": [lane.thread_name for lane in lanes],
                    "is_gpu": np.array([lane.is_gpu for lane in lanes], bool),
                },
            )

        return self._once("track", make)

    def flows(self) -> Table:
        """Launch links (Perfetto's `flow`): one row per GPU activity linked by its correlation
        id to the runtime call that launched it: `slice_out` (the call), `slice_in` (the GPU
        activity), `correlation`."""

        def make() -> Table:
            links = self.session.links
            linked = links.gpu_runtime >= 0
            gpu = links.gpu_rows[linked]
            return Table(
                "flow",
                {
                    "slice_out": links.gpu_runtime[linked],
                    "slice_in": gpu,
                    "correlation": self.model.corr[gpu],
                },
            )

        return self._once("flow", make)

    def event_args(self, row: int) -> dict[str, Any]:
        """The full `args` of the event with slice id `row`, read back from the file ({} when it
        has none). Raises IndexError for a row the trace does not have, TraceError when the
        file changed or cannot be read again."""
        from kinetoscope.parser import read_event

        row = int(row)
        if not 0 <= row < len(self.model):
            raise IndexError(f"no event {row}: the trace has rows 0..{len(self.model) - 1}")
        event = read_event(self.model, row)
        if event is None:
            raise TraceError(
                f"{_clean(self.path)}: cannot read event {row} back (the file changed?)"
            )
        args = event.get("args")
        return args if isinstance(args, dict) else {}

    # -- the summary's results --------------------------------------------------------------

    def operators(self) -> Table:
        """Operators grouped by (category, name), most self time first (the summary's order, all
        groups): `count`, `total_dur` (outermost instances), `self_dur`, `gpu_self_dur`,
        `gpu_total_dur` (int64 ns)."""

        def make() -> Table:
            from kinetoscope.analysis.classify import ranked_groups

            t = self.session.operators
            g = ranked_groups(self.model, t.groups, t.excl, None)
            return Table(
                "operators",
                {
                    "category": self._names(t.groups.cat[g]),
                    "name": self._names(t.groups.name[g]),
                    "count": t.count[g],
                    "total_dur": t.incl[g],
                    "self_dur": t.excl[g],
                    "gpu_self_dur": t.gpu_self[g],
                    "gpu_total_dur": t.gpu_total[g],
                },
            )

        return self._once("operators", make)

    def kernels(self) -> Table:
        """GPU activities (kernels, memcpys, memsets) grouped by (category, name), most total
        time first: `count`, `total_dur`, `mean_dur` (float), `min_dur`, `max_dur`."""

        def make() -> Table:
            from kinetoscope.analysis.classify import ranked_groups
            from kinetoscope.analysis.kernels import kernel_totals

            session = self.session
            groups = session.gpu_groups
            if session.nesting_ready:  # the session's table, computed already or cheaply
                t = session.kernels
                counts, totals, low, high = t.count, t.total, t.min, t.max
            else:  # these columns need no nesting: do not build it for them
                counts, totals, low, high = kernel_totals(self.model, groups, session.links)
            g = ranked_groups(self.model, groups, totals, None)
            count = counts[g]
            return Table(
                "kernels",
                {
                    "category": self._names(groups.cat[g]),
                    "name": self._names(groups.name[g]),
                    "count": count,
                    "total_dur": totals[g],
                    "mean_dur": totals[g] / np.maximum(count, 1),
                    "min_dur": low[g],
                    "max_dur": high[g],
                },
            )

        return self._once("kernels", make)

    def kernel_events(self) -> Table:
        """Every GPU activity, one row each: `id`, `ts`, `dur`, `name`, `category`, `device`,
        `stream`, `track`, `correlation`, `launch` (the runtime call's slice id) and `operator`
        (the operator that launched it), null when not linked."""

        def make() -> Table:
            m = self.model
            links = self.session.links
            rows = links.gpu_rows
            return Table(
                "kernel",
                {
                    "id": rows,
                    "ts": Gathered(m.start, rows),
                    "dur": Gathered(m.dur, rows),
                    "name": self._gathered_names(m.name, rows),
                    "category": self._gathered_names(m.cat, rows),
                    "device": Gathered(m.device, rows),
                    "stream": Gathered(m.stream, rows, null_value=NO_VALUE),
                    "track": Gathered(m.lane, rows, np.int64),
                    "correlation": Gathered(m.corr, rows, null_value=NO_VALUE),
                    "launch": masked(links.gpu_runtime, -1),
                    "operator": masked(self.session.kernels.launcher_row.astype(np.int64), -1),
                },
            )

        return self._once("kernel", make)

    def operator_events(self) -> Table:
        """Every CPU slice (operators, runtime calls, annotations), one row each: `id`, `ts`,
        `dur`, `self_dur`, `name`, `category`, `track`, `depth`, `parent` (null for roots),
        `outermost` (no ancestor has the same category and name: the instances `total_dur`
        adds up)."""

        def make() -> Table:
            m = self.model
            n = self.session.nesting
            rows = n.order
            return Table(
                "operator",
                {
                    "id": rows,
                    "ts": Gathered(m.start, rows),
                    "dur": Gathered(m.dur, rows),
                    "self_dur": n.self_time,
                    "name": self._gathered_names(m.name, rows),
                    "category": self._gathered_names(m.cat, rows),
                    "track": Gathered(m.lane, rows, np.int64),
                    "depth": Gathered(n.depth, rows, np.int64),
                    "parent": Gathered(n.parent, rows, np.int64, null_value=-1),
                    "outermost": n.outermost,
                },
            )

        return self._once("operator", make)

    def gaps(self) -> Table:
        """Every GPU idle gap: `id`, `device`, `ts`, `dur`, `cause` (host_wait, kernel_wait,
        other), `next_slice` (the GPU activity that ended it), `launch` (its runtime call, null
        when not linked), `launch_track` (that call's track)."""

        def make() -> Table:
            from kinetoscope.analysis.idle import CAUSES

            gaps = self.session.idle.gaps
            launch = gaps.runtime_row
            track = np.where(launch >= 0, self.model.lane[np.maximum(launch, 0)], -1)
            return Table(
                "gap",
                {
                    "id": np.arange(len(gaps), dtype=np.int64),
                    "device": gaps.device,
                    "ts": gaps.start,
                    "dur": gaps.end - gaps.start,
                    "cause": Codes(gaps.cause.astype(np.int32), list(CAUSES)),
                    "next_slice": gaps.next_row,
                    "launch": masked(launch, -1),
                    "launch_track": masked(track.astype(np.int64), -1),
                },
            )

        return self._once("gap", make)

    def steps(self) -> Table:
        """The profiler steps (the summary's `steps`, in ns): `id`, `name`, `ts`, `dur`,
        `gpu_busy`, `dataloader`, `sync`, `cpu_busy`, `uninstrumented`, `collective`, and the
        GPU breakdown `compute`, `comm`, `memory`, `idle`."""

        def make() -> Table:
            s = self.session.steps
            blocked = self.session.sync.step_blocked
            return Table(
                "step",
                {
                    "id": s.rows.astype(np.int64),
                    "name": self._names(self.model.name[s.rows]),
                    "ts": s.start,
                    "dur": s.dur,
                    "gpu_busy": s.gpu_busy,
                    "dataloader": s.dataloader,
                    "sync": blocked.astype(np.int64),
                    "cpu_busy": s.cpu_busy,
                    "uninstrumented": s.uninstrumented,
                    "collective": s.collective,
                    "compute": s.compute,
                    "comm": s.comm,
                    "memory": s.memory,
                    "idle": s.idle,
                },
            )

        return self._once("step", make)

    def findings(self) -> Table:
        """The rules' findings: `rule`, `severity`, `message`, `ts`, `dur`, `device`, `slices`
        (the slice ids that show it, most telling first)."""

        def make() -> Table:
            found = self.session.findings
            return Table(
                "findings",
                {
                    "rule": [f.rule for f in found],
                    "severity": [f.severity for f in found],
                    "message": [f.message for f in found],
                    "ts": np.array([f.start for f in found], np.int64),
                    "dur": np.array([f.dur for f in found], np.int64),
                    "device": [f.device for f in found],
                    "slices": [list(f.rows) for f in found],
                },
            )

        return self._once("findings", make)

    def memory(self) -> Table:
        """Memory per device, the summary's `memory` entries: `device_type`, `device_id`,
        `peak_allocated_bytes`, `peak_reserved_bytes`, `peak_ts_us`, `peak_operator`,
        `peak_stack`, `peak_step`, `unfreed_allocations`, `unfreed_bytes`."""
        from kinetoscope.analysis.summary import memory_section

        keys = (
            "device_type",
            "device_id",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "peak_ts_us",
            "peak_operator",
            "peak_stack",
            "peak_step",
            "unfreed_allocations",
            "unfreed_bytes",
        )
        return self._once(
            "memory", lambda: Table.from_records("memory", memory_section(self.session), keys)
        )

    def memory_events(self) -> Table:
        """Every timed `[memory]` event, by device then time: `id` (its index among the memory
        events), `ts`, `device_type`, `device_id`, `addr`, `bytes` (negative: a free),
        `total_allocated` (continued by `bytes` where not recorded), `total_reserved`,
        `operator` (the innermost CPU slice holding it, null when none)."""

        def make() -> Table:
            mem = self.model.memory
            devices = self.session.memory_ops.devices
            index = [d.events for d in devices]

            def cat(arrays: list[np.ndarray]) -> np.ndarray:
                return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)

            events = cat(index)
            return Table(
                "memory_event",
                {
                    "id": events,
                    "ts": cat([d.ts for d in devices]),
                    "device_type": masked(mem.device_type[events], NO_VALUE),
                    "device_id": masked(mem.device_id[events], NO_VALUE),
                    "addr": masked(mem.addr[events], NO_VALUE),
                    "bytes": cat([d.bytes for d in devices]),
                    "total_allocated": cat([d.allocated for d in devices]),
                    "total_reserved": masked(cat([d.reserved for d in devices]), NO_VALUE),
                    "operator": masked(cat([d.owner for d in devices]), -1),
                },
            )

        return self._once("memory_event", make)

    def sync(self) -> Table:
        """Host calls that block on the GPU, grouped by call site, longest first (the summary's
        `sync`, every site): `call`, `kind`, `cause`, `site`, `count`, `total_us`, `max_us`,
        `gpu_idle_after_us`, `gpu_idle_us`, `worst_start_us`."""
        from kinetoscope.analysis.sync import sync_section

        keys = (
            "call",
            "kind",
            "cause",
            "site",
            "count",
            "total_us",
            "max_us",
            "gpu_idle_after_us",
            "gpu_idle_us",
            "worst_start_us",
        )
        return self._once(
            "sync",
            lambda: Table.from_records(
                "sync", sync_section(self.model, self.session.sync, limit=1 << 62), keys
            ),
        )

    def compile(self) -> dict[str, Any]:
        """The compile and graph-replay lens: the summary's `compile` document (docs/compile.md);
        a dict, since it is several small tables."""
        from kinetoscope.analysis.compile import compile_section

        return compile_section(self.session)

    def collectives(self) -> Table:
        """This trace's collectives (communication kernels, else the CPU backend's
        annotations): `id`, `source` (gpu, cpu), `ts`, `dur`, `kind`, `name`, `group`,
        `nelems_in`, `nelems_out`, `dtype`, `bytes`, `group_size` (null when unknown),
        `step` (index into `steps()`, null outside every step)."""

        def make() -> Table:
            from kinetoscope.analysis.collectives import find_collectives

            found = find_collectives(self.session)
            c = found["gpu"] if len(found["gpu"]) else found["cpu"]
            return Table(
                "collective",
                {
                    "id": c.row,
                    "source": [c.source] * len(c),
                    "ts": c.start,
                    "dur": c.end - c.start,
                    "kind": list(c.kind),
                    "name": list(c.name),
                    "group": list(c.group),
                    "nelems_in": masked(c.nelems_in, -1),
                    "nelems_out": masked(c.nelems_out, -1),
                    "dtype": list(c.dtype),
                    "bytes": masked(c.bytes, -1),
                    "group_size": masked(c.group_size, -1),
                    "step": masked(c.step, -1),
                },
            )

        return self._once("collective", make)

    def window(self, start: int, end: int) -> Window:
        """Statistics of the part of the trace inside [start, end] (int64 ns, on the clock of
        `slices().ts`): every time clipped to the window."""
        start, end = int(start), int(end)
        if end < start:
            raise ValueError(f"window end {end} is before its start {start}")
        return Window(self, start, end)

    # -- SQL --------------------------------------------------------------------------------

    def tables(self) -> dict[str, Any]:
        """The SQL command's tables (docs/sql.md), by name, as zero-argument callables."""
        return {name: getattr(self, method) for name, method in TRACE_TABLES.items()}

    def sql(self, query: str) -> Table:
        """Run a read-only SQL query over `tables()` on DuckDB (the `sql` extra); docs/sql.md."""
        from kinetoscope.sql import Database

        with Database.of_trace(self) as db:
            return db.query(query)


class Window:
    """`Trace.window(start, end)`: operators, kernels and GPU idle clipped to a time window."""

    def __init__(self, trace: Trace, start: int, end: int) -> None:
        self.trace, self.start, self.end = trace, start, end

    def __repr__(self) -> str:
        return f"<kinetoscope Window [{self.start}, {self.end}] ns of {self.trace!r}>"

    def operators(self) -> Table:
        """`Trace.operators()` inside the window (ranked by clipped self time)."""
        from kinetoscope.analysis.classify import ranked_groups
        from kinetoscope.analysis.ranges import operators_in_range

        s, t = self.trace.session, self.trace
        table = operators_in_range(s.trace, s.nesting, s.cpu_groups, s.links, self.start, self.end)
        g = ranked_groups(s.trace, table.groups, table.excl, None)
        g = g[table.count[g] > 0]
        return Table(
            "operators",
            {
                "category": t._names(table.groups.cat[g]),
                "name": t._names(table.groups.name[g]),
                "count": table.count[g],
                "total_dur": table.incl[g],
                "self_dur": table.excl[g],
                "gpu_self_dur": table.gpu_self[g],
                "gpu_total_dur": table.gpu_total[g],
            },
        )

    def kernels(self) -> Table:
        """`Trace.kernels()` inside the window (durations clipped)."""
        from kinetoscope.analysis.classify import ranked_groups
        from kinetoscope.analysis.ranges import kernels_in_range

        s, t = self.trace.session, self.trace
        table = kernels_in_range(s.trace, s.kernels, s.links, self.start, self.end)
        g = ranked_groups(s.trace, table.groups, table.total, None)
        g = g[table.count[g] > 0]
        count = table.count[g]
        return Table(
            "kernels",
            {
                "category": t._names(table.groups.cat[g]),
                "name": t._names(table.groups.name[g]),
                "count": count,
                "total_dur": table.total[g],
                "mean_dur": table.total[g] / np.maximum(count, 1),
                "min_dur": table.min[g],
                "max_dur": table.max[g],
            },
        )

    def idle(self) -> Table:
        """Per device: `window` (its active window clipped), `busy`, `idle`, the idle time by
        cause (`host_wait`, `kernel_wait`, `other`) and `gaps` touching the window."""
        from kinetoscope.analysis.ranges import idle_in_range

        rows = idle_in_range(self.trace.session.idle, self.start, self.end)
        return Table(
            "idle",
            {
                "device": np.array([r.device for r in rows], np.int64),
                "window": np.array([r.window for r in rows], np.int64),
                "busy": np.array([r.busy for r in rows], np.int64),
                "idle": np.array([r.idle for r in rows], np.int64),
                "host_wait": np.array([r.idle_by_cause[0] for r in rows], np.int64),
                "kernel_wait": np.array([r.idle_by_cause[1] for r in rows], np.int64),
                "other": np.array([r.idle_by_cause[2] for r in rows], np.int64),
                "gaps": np.array([r.gaps for r in rows], np.int64),
            },
        )


# -- a job ------------------------------------------------------------------------------------


def open_job(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    cycle: int | None = None,
    align_clocks: bool = False,
    workers: int | None = None,
) -> Job:
    """A distributed job: a folder of rank traces or a list of rank files, as `summary DIR`
    reads it (ranks digested in worker processes). Raises `TraceError` when there is no job."""
    from kinetoscope.analysis.job import analyze_job, job_document, map_ranks
    from kinetoscope.parser.ranks import JobError, discover

    paths = [os.fspath(inputs)] if isinstance(inputs, str | os.PathLike) else list(inputs)
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise TraceError("no job: give a folder of rank traces or the rank files")
    for path in paths:
        if len(paths) == 1 and os.path.isdir(path):
            break
        problem = _problem(path)
        if problem is not None:
            raise TraceError(problem)
    try:
        files = discover(paths, cycle=cycle)
    except JobError as exc:
        raise TraceError(_clean(str(exc))) from None
    with main_module_hidden():
        digests = map_ranks([f.path for f in files.files], workers=workers)
    job = analyze_job(digests, files, align_clocks=align_clocks)
    if job.ranks and not any(entry.loaded for entry in job.ranks):
        # As `summary DIR` ends with status 1: no rank to ask anything of.
        first = next((e.digest.error for e in job.ranks if e.digest.error), None)
        why = f" ({first})" if first else ""
        raise TraceError(_clean(f"no rank could be read{why}"))
    return Job(job, files, job_document(job))


class Job:
    """A distributed job (`kinetoscope.open_job`): the `summary DIR --json` document's tables."""

    def __init__(self, analysis: Any, files: Any, document: dict[str, Any]) -> None:
        self.analysis = analysis
        self.files = files
        self._document = document
        self._traces: dict[int, Trace] = {}

    def __repr__(self) -> str:
        d = self._document
        return (
            f"<kinetoscope Job: {len(d['ranks'])} ranks (world size {d['world_size']}), "
            f"{d['matching']['matched']:,} matched collectives>"
        )

    def _repr_html_(self) -> str:
        return _repr_paragraph(self)

    def document(self) -> dict[str, Any]:
        """The `summary DIR --json` document (docs/summary-ranks.md)."""
        return self._document

    @property
    def rank_numbers(self) -> list[int]:
        return [f.rank for f in self.files.files]

    def ranks(self) -> Table:
        """One row per rank: the document's `ranks` entries (their flat keys)."""
        records = self._document["ranks"]
        keys = [k for k in (records[0] if records else {}) if not isinstance(records[0][k], dict)]
        return Table.from_records("ranks", records, keys)

    def collectives(self) -> Table:
        """Every matched collective, largest skew first (the document's `collectives` entries,
        not cut at 50)."""
        from kinetoscope.analysis.job import collective_json, collectives_by_skew

        records = [
            collective_json(self.analysis, i) for i in collectives_by_skew(self.analysis, None)
        ]
        keys = list(records[0]) if records else ["kind", "group"]
        return Table.from_records("collectives", records, keys)

    def straggler(self) -> dict[str, Any] | None:
        """The straggler verdict (the document's `straggler`), None when there is none."""
        return self._document["straggler"]

    def rank(self, rank: int) -> Trace:
        """One rank's trace, opened for the single-trace API (kept open)."""
        for f in self.files.files:
            if f.rank == rank:
                if rank not in self._traces:
                    self._traces[rank] = open(f.path)
                return self._traces[rank]
        raise KeyError(f"no rank {rank} in this job (ranks {self.rank_numbers})")

    def rank_tables(self, name: str) -> Table:
        """The single-trace table `name` (a SQL table's name) of every rank one after another,
        with a first column `rank`."""
        method = TRACE_TABLES[name]
        parts = [(r, getattr(self.rank(r), method)()) for r in self.rank_numbers]
        return concat(name, parts)

    def tables(self) -> dict[str, Any]:
        """The SQL tables of a job: each single-trace table with a `rank` column, plus
        `rank_summary` (ranks()) and `matched_collective` (collectives())."""
        out: dict[str, Any] = {n: (lambda n=n: self.rank_tables(n)) for n in TRACE_TABLES}
        out["rank_summary"] = self.ranks
        out["matched_collective"] = self.collectives
        return out

    def sql(self, query: str) -> Table:
        from kinetoscope.sql import Database

        with Database.of_job(self) as db:
            return db.query(query)


# -- a diff -----------------------------------------------------------------------------------


def diff(
    base: str | os.PathLike[str],
    new: str | os.PathLike[str],
    *,
    threshold_pct: float | None = None,
    steps: str | None = None,
    templates: bool = False,
) -> Diff:
    """Compare two traces as `kinetoscope diff BASE NEW` does (docs/diff.md). `steps`: which
    paired steps, as `--steps` takes them (e.g. "2-"). Raises `TraceError` or ValueError."""
    from kinetoscope.analysis.diff import (
        DEFAULT_THRESHOLD_PCT,
        DiffOptions,
        diff_sessions,
        parse_step_pairs,
    )
    from kinetoscope.parser import TraceError as ParserError
    from kinetoscope.present.report_diff import diff_document, load_sessions

    base, new = os.fspath(base), os.fspath(new)
    # StepSpecError: a ValueError
    selection = parse_step_pairs(steps) if steps is not None else None
    for path in (base, new):
        problem = _problem(path)
        if problem is not None:
            raise TraceError(problem)
    options = DiffOptions(
        threshold_pct=DEFAULT_THRESHOLD_PCT if threshold_pct is None else threshold_pct,
        steps=selection,
        templates=templates,
    )
    try:
        with main_module_hidden():
            b, n = load_sessions(base, new)
    except ParserError as exc:
        raise TraceError(_clean(str(exc))) from None
    result = diff_sessions(b, n, options)
    return Diff(result, diff_document(result, base, new), _from_session(b), _from_session(n))


class Diff:
    """Two traces compared (`kinetoscope.diff`): the `diff --json` document's tables."""

    def __init__(self, result: Any, document: dict[str, Any], base: Trace, new: Trace) -> None:
        self.result = result
        self._document = document
        self.base = base
        self.new = new

    def __repr__(self) -> str:
        from kinetoscope.analysis.units import plural

        v = self._document["verdict"]
        # The change the verdict's first reason gives: the geometric mean's where there is
        # an interval, else the mean step time's.
        pct = v["change_pct"] if v.get("change_pct") is not None else v["step_time_delta_pct"]
        change = "?" if pct is None else f"{pct:+.2f}"
        compared = (
            "whole traces"
            if self._document.get("whole_traces")
            else plural(len(self._document["steps"]), "step pair")
        )
        return f"<kinetoscope Diff: {v['verdict']}, step time {change} %, {compared}>"

    def _repr_html_(self) -> str:
        return _repr_paragraph(self)

    def document(self) -> dict[str, Any]:
        """The `diff --json` document (docs/diff.md)."""
        return self._document

    def verdict(self) -> dict[str, Any]:
        """The verdict: `verdict` (regression, improvement, ...), `reasons`, the interval."""
        return self._document["verdict"]

    def _groups(self, name: str) -> Table:
        from kinetoscope.present.report_diff import _group

        records = [_group(g) for g in getattr(self.result, name)]
        keys = list(records[0]) if records else ["name", "status"]
        return Table.from_records(name, records, keys)

    def kernels(self) -> Table:
        """Every kernel row of the diff (the document's `kernels.rows`, not cut)."""
        return self._groups("kernels")

    def operators(self) -> Table:
        """Every operator row of the diff (the document's `operators.rows`, not cut)."""
        return self._groups("operators")

    def steps(self) -> Table:
        """One row per step pair: `pair`, `base_name`, `new_name`, and per metric its base, new
        and delta values as `METRIC_base`, `METRIC_new`, `METRIC_delta`."""
        records = []
        for entry in self._document["steps"]:
            flat = {k: v for k, v in entry.items() if not isinstance(v, dict)}
            for key, metric in entry.items():
                if isinstance(metric, dict):
                    for part in ("base", "new", "delta"):
                        flat[f"{key}_{part}"] = metric.get(part)
            records.append(flat)
        keys = list(records[0]) if records else ["pair", "base_name", "new_name"]
        return Table.from_records("steps", records, keys)
