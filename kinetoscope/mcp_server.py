"""`kinetoscope mcp`: an MCP server (stdio) with the tools a coding agent needs to triage a trace
without reading megabytes of it: open a trace or a job (a handle), its findings, top operators
and kernels, GPU idle gaps with their CPU stacks, a window's statistics, one event's details, a
diff with its verdict, a job's straggler. docs/mcp.md is the reference.

Two layers: `TriageTools` (no MCP import: plain methods that take the tool's arguments and return
a JSON-ready dict, or raise `ToolProblem` with one line) and `build_server`, which registers each
method as a tool of the official SDK's `MCPServer` (imported only here, only when the command
runs: the `mcp` extra). Every answer is JSON text of at most `max_answer_bytes` (UTF-8): a list
that does not fit is cut, and the answer's `page` says how many items it holds, how many were
left out and the `offset` to ask for next. Times are microseconds in the trace's own time base
(the numbers of `summary --json`), keys end in their unit (`_us`, `_pct`, `_bytes`)."""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SERVER_NAME = "kinetoscope"
MAX_ANSWER_BYTES = 16 * 1024
MAX_OPEN = 4  # traces and jobs held at once; the least recently used is closed beyond it
DEFAULT_LIMIT = 20
MAX_LIMIT = 500
MAX_OFFSET = 10**9
MAX_PATH = 4096
MAX_PATHS = 1024  # rank files of one job
NAME_CHARS = 300  # an event name is cut after this many characters
MESSAGE_CHARS = 1200
STACK_FRAMES = 24  # innermost frames kept of a CPU stack
ARG_KEYS = 40
ARG_CHARS = 300
TIME_LIMIT_US = float(1 << 62) / 1000  # the model's times lie within ±2^62 ns

# The query hook: a read-only SQL (or other) query over an open trace. Nothing is registered by
# this module; a backend (the `sql` command's engine, say) registers itself with
# `register_query_backend`, and `build_server` then adds the `query` tool.
QueryBackend = Callable[[Any, str, int], dict[str, Any]]
_QUERY_BACKEND: QueryBackend | None = None


def register_query_backend(backend: QueryBackend | None) -> None:
    """Install `backend(session, query, limit) -> {"columns": [...], "rows": [[...], ...]}`
    (read-only; raise ValueError with one line for a bad query), or remove it with None."""
    global _QUERY_BACKEND
    _QUERY_BACKEND = backend


class ToolProblem(Exception):
    """A tool's error, said to the client in one line (an MCP error result)."""


def one_line(text: str, limit: int = 400) -> str:
    from kinetoscope.present.safe_text import clean

    line = " ".join(clean(str(text)).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _cut(text: str, limit: int = NAME_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _us(ns: int | float | None) -> float | None:
    """µs as summary --json writes them: integer ns divided exactly, then rounded."""
    if ns is None:
        return None
    return round(int(ns) / 1000, 3) if float(ns).is_integer() else round(float(ns) / 1000, 3)


def encode(answer: dict[str, Any]) -> str:
    """Compact, deterministic JSON (non-finite numbers become null)."""
    return json.dumps(_finite(answer), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _size(answer: Any) -> int:
    return len(encode(answer).encode("utf-8", "surrogatepass"))


@dataclass
class Page:
    """offset/limit of a listing, checked."""

    offset: int
    limit: int

    @staticmethod
    def of(offset: Any, limit: Any, default: int = DEFAULT_LIMIT) -> Page:
        offset = 0 if offset is None else offset
        limit = default if limit is None else limit
        for name, value in (("offset", offset), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ToolProblem(f"{name} must be a whole number")
        if not 0 <= offset <= MAX_OFFSET:
            raise ToolProblem(f"offset must be 0 or more (at most {MAX_OFFSET})")
        if not 1 <= limit <= MAX_LIMIT:
            raise ToolProblem(f"limit must be from 1 to {MAX_LIMIT}")
        return Page(offset, limit)


def fit(build: Callable[[int], dict[str, Any]], wanted: int, cap: int) -> dict[str, Any]:
    """The answer `build(n)` for the largest n ≤ wanted that encodes within `cap` bytes (build
    puts n items in each of its lists and fills its `page`)."""
    answer = build(wanted)
    if _size(answer) <= cap:
        return answer
    low, high = 0, wanted  # build(low) fits (assumed for 0), build(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        if _size(build(middle)) <= cap:
            low = middle
        else:
            high = middle
    answer = build(low)
    if _size(answer) > cap:  # nothing but the frame: should not happen with the cuts above
        raise ToolProblem(f"the answer does not fit in {cap} bytes even without its items")
    return answer


def paged(
    items: Any, total: int, page: Page, key: str, extra: dict[str, Any], cap: int
) -> dict[str, Any]:
    """An answer listing `items` (the page's items from `page.offset` on: a list, or an
    iterable made lazily, at most `page.limit` are taken) under `key`, as many as fit."""
    taken: list[Any] = []

    def build(n: int) -> dict[str, Any]:
        shown = taken[:n]
        after = page.offset + len(shown)
        return {
            **extra,
            key: shown,
            "page": {
                "offset": page.offset,
                "returned": len(shown),
                "total": total,
                "left_out": max(total - after, 0),  # after this page
                "next_offset": after if after < total else None,
            },
        }

    # Each item costs its own JSON and a comma: take items while they fit (the page's numbers
    # are given room for their widest), then check the whole once.
    room = cap - _size(build(0)) - 48
    for item in items:
        if len(taken) >= page.limit:
            break
        room -= _size(item) + 1
        if room < 0:
            break
        taken.append(item)
    else:
        item = None
    if not taken and item is not None and page.limit:
        # Not even the first item fits: it comes shortened (strings and lists cut), so that
        # paging always moves on; the page says so.
        for chars, length in ((80, 8), (24, 4), (8, 2)):
            taken[:] = [_shrink(item, chars, length)]
            if _size(build(1)) <= cap:
                answer = build(1)
                answer["page"]["shortened"] = True
                return answer
        taken.clear()
    return fit(build, len(taken), cap)


def _shrink(value: Any, chars: int, length: int) -> Any:
    """`value` with every string cut to `chars` and every list to `length` items."""
    if isinstance(value, str):
        return _cut(value, chars)
    if isinstance(value, list):
        return [_shrink(v, chars, length) for v in value[:length]]
    if isinstance(value, dict):
        return {k: _shrink(v, chars, length) for k, v in value.items()}
    return value


@dataclass
class Entry:
    """One open trace or job."""

    handle: str
    kind: str  # "trace" or "job"
    path: str
    identity: tuple
    session: Any = None  # TraceSession (traces)
    document: dict[str, Any] | None = None  # the job document (jobs)


def _identity(paths: list[str]) -> tuple:
    out = []
    for path in paths:
        try:
            info = os.stat(path)
            out.append((os.path.realpath(path), info.st_size, info.st_mtime_ns, info.st_ino))
        except OSError:
            out.append((os.path.realpath(path), None, None, None))
    return tuple(out)


class TriageTools:
    """The tools, as plain methods (the server wraps each; tests may call them directly)."""

    def __init__(self, max_open: int = MAX_OPEN, max_answer_bytes: int = MAX_ANSWER_BYTES):
        self.max_open = max_open
        self.cap = max_answer_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._counter = 0
        self.closed_lru: dict[str, str] = {}  # handle -> path, for the message on later use

    # -- handles -------------------------------------------------------------------------

    def _store(self, kind: str, path: str, identity: tuple, **values: Any) -> tuple[Entry, list]:
        with self._lock:
            self._counter += 1
            handle = f"{kind[0]}{self._counter}"
            entry = Entry(handle, kind, path, identity, **values)
            self._entries[handle] = entry
            evicted = []
            while len(self._entries) > self.max_open:
                old, gone = self._entries.popitem(last=False)
                self.closed_lru[old] = gone.path
                if len(self.closed_lru) > 1000:  # remembered for the message, not forever
                    del self.closed_lru[next(iter(self.closed_lru))]
                evicted.append(old)
            return entry, evicted

    def _existing(self, identity: tuple, kind: str) -> Entry | None:
        with self._lock:
            for entry in self._entries.values():
                if entry.kind == kind and entry.identity == identity:
                    self._entries.move_to_end(entry.handle)
                    return entry
        return None

    def _get(self, handle: Any, kind: str | None = "trace") -> Entry:
        if not isinstance(handle, str) or not handle or len(handle) > 32:
            raise ToolProblem("handle must be the string an open tool returned, e.g. t1")
        with self._lock:
            entry = self._entries.get(handle)
            if entry is not None:
                self._entries.move_to_end(handle)
        if entry is None:
            shown = one_line(handle, 40)
            if handle in self.closed_lru:
                raise ToolProblem(
                    f"handle {shown} was closed to make room (at most {self.max_open} open at "
                    "once, least recently used first): open it again"
                )
            raise ToolProblem(f"no open trace or job has the handle {shown}")
        if kind is not None and entry.kind != kind:
            what = "a trace (open_trace)" if kind == "trace" else "a job (open_job)"
            raise ToolProblem(f"handle {handle} is a {entry.kind}; this tool needs {what}")
        return entry

    def handles(self) -> dict[str, Any]:
        with self._lock:
            entries = list(self._entries.values())
        return {
            "open": [{"handle": e.handle, "kind": e.kind, "path": e.path} for e in entries],
            "max_open": self.max_open,
        }

    def close(self, handle: str) -> dict[str, Any]:
        entry = self._get(handle, kind=None)
        with self._lock:
            self._entries.pop(entry.handle, None)
        return {"closed": entry.handle, "path": entry.path}

    # -- opening -------------------------------------------------------------------------

    @staticmethod
    def _checked_path(path: Any) -> str:
        if not isinstance(path, str) or not path:
            raise ToolProblem("path must be a file name")
        if len(path) > MAX_PATH or "\x00" in path:
            raise ToolProblem("path is too long or holds a NUL character")
        return os.path.expanduser(path)

    def open_trace(self, path: str) -> dict[str, Any]:
        from kinetoscope.analysis import TraceSession
        from kinetoscope.parser import TraceError, load
        from kinetoscope.parser.source import trace_path_problem

        path = self._checked_path(path)
        if os.path.isdir(path):
            raise ToolProblem(
                f"{one_line(path)}: is a directory: a job's folder opens with open_job"
            )
        problem = trace_path_problem(path)  # FIFOs, devices, sockets refused: no streams
        if problem is not None:
            raise ToolProblem(problem)
        identity = _identity([path])
        entry = self._existing(identity, "trace")
        evicted: list[str] = []
        if entry is None:
            try:
                trace = load(path, write_cache=False, release=True)
            except TraceError as exc:
                raise ToolProblem(str(exc)) from None
            except MemoryError:
                raise ToolProblem(f"{one_line(path)}: out of memory reading the trace") from None
            entry, evicted = self._store("trace", path, identity, session=TraceSession(trace))
        answer = self._trace_facts(entry)
        if evicted:
            answer["closed_to_make_room"] = evicted
        return answer

    def _trace_facts(self, entry: Entry) -> dict[str, Any]:
        from kinetoscope.analysis.summary import devices_section, gpu_section

        session = entry.session
        trace = session.trace
        start, end = trace.slice_start_min, trace.slice_end_max
        gpu = []
        for g in gpu_section(session):
            window = (
                None if g["window_start_us"] is None else g["window_end_us"] - g["window_start_us"]
            )
            gpu.append(
                {
                    "device": g["device"],
                    "kernels": g["kernels"],
                    "memcpys": g["memcpys"],
                    "memsets": g["memsets"],
                    "window_us": None if window is None else round(window, 3),
                    "busy_us": g["busy_us"],
                    "idle_us": g["idle_us"],
                    "idle_pct": round(100 * g["idle_us"] / window, 2) if window else None,
                    "idle_by_cause_us": g["idle_by_cause"],
                }
            )
        steps = session.steps
        return {
            "handle": entry.handle,
            "kind": "trace",
            "path": entry.path,
            "events": trace.n_events,
            "rows": len(trace),
            "complete": trace.complete,
            "warnings": [_cut(w, 300) for w in trace.warnings[:5]],
            "warnings_left_out": max(len(trace.warnings) - 5, 0),
            "start_us": _us(start),
            "end_us": _us(end),
            "dur_us": _us(end - start) if start is not None and end is not None else None,
            "devices": [
                {**d, "name": _cut(str(d["name"]), 120) if d["name"] is not None else None}
                for d in devices_section(trace)[:16]
            ],
            "gpu": gpu[:16],
            "steps": len(steps),
            "step_dur_us": {
                "median": _us(float(_median(steps.dur))) if len(steps) else None,
                "max": _us(int(steps.dur.max())) if len(steps) else None,
            },
            "units": "times in µs in the trace's own time base (as summary --json)",
            "next": "findings, top_operators, top_kernels, gaps, window_stats, event, diff",
        }

    def open_job(self, paths: list[str], cycle: int | None = None) -> dict[str, Any]:
        from kinetoscope.analysis.job import analyze_job, job_document, map_ranks
        from kinetoscope.parser.ranks import JobError, discover

        if isinstance(paths, str):
            paths = [paths]
        if not isinstance(paths, list) or not paths or len(paths) > MAX_PATHS:
            raise ToolProblem(f"paths must be a job's folder or 1 to {MAX_PATHS} rank files")
        checked = [self._checked_path(p) for p in paths]
        if cycle is not None and (
            isinstance(cycle, bool) or not isinstance(cycle, int) or cycle < 1
        ):
            raise ToolProblem("cycle must be 1 or more (1 = the oldest)")
        from kinetoscope.parser.source import trace_path_problem

        for path in checked:  # before discover reads them: a FIFO would block it
            if not os.path.isdir(path):
                problem = trace_path_problem(path)
                if problem is not None:
                    raise ToolProblem(problem)
        try:
            files = discover(checked, cycle=cycle)
        except JobError as exc:
            raise ToolProblem(str(exc)) from None
        for f in files.files:
            problem = trace_path_problem(f.path)
            if problem is not None:
                raise ToolProblem(problem)
        identity = (_identity([f.path for f in files.files]), cycle)
        entry = self._existing(identity, "job")
        evicted: list[str] = []
        if entry is None:
            digests = map_ranks([f.path for f in files.files])
            document = job_document(analyze_job(digests, files))
            label = checked[0] if len(checked) == 1 else f"{checked[0]} (+{len(checked) - 1})"
            entry, evicted = self._store("job", label, identity, document=document)
        answer = self._job_facts(entry)
        if evicted:
            answer["closed_to_make_room"] = evicted
        return answer

    def _job_facts(self, entry: Entry) -> dict[str, Any]:
        doc = entry.document or {}
        ranks = doc.get("ranks", [])
        straggler = doc.get("straggler")
        return {
            "handle": entry.handle,
            "kind": "job",
            "path": entry.path,
            "world_size": doc.get("world_size"),
            "ranks": len(ranks),
            "ranks_loaded": sum(1 for r in ranks if r.get("loaded")),
            "missing_ranks": doc.get("missing", [])[:50],
            "matched_collectives": doc.get("matching", {}).get("matched"),
            "straggler_rank": straggler.get("rank") if straggler else None,
            "units": "times in µs",
            "next": "straggler",
        }

    # -- one trace -----------------------------------------------------------------------

    def findings(
        self, handle: str, min_severity: str = "info", offset: int = 0, limit: int = 20
    ) -> dict[str, Any]:
        from kinetoscope.common.budget import BudgetError, parse_severity, severity_rank

        entry = self._get(handle)
        page = Page.of(offset, limit)
        try:
            floor = severity_rank(parse_severity(min_severity, "min_severity"))
        except BudgetError as exc:
            raise ToolProblem(str(exc)) from None
        session = entry.session
        trace = session.trace
        chosen = [f for f in session.findings if severity_rank(f.severity) >= floor]
        items = []
        for finding in chosen[page.offset : page.offset + page.limit]:
            doc = finding.to_json(trace)
            doc["message"] = _cut(doc["message"], MESSAGE_CHARS)
            events = doc["evidence"].get("events", [])
            for event, row in zip(events, finding.rows):
                event["row"] = int(row)
                event["name"] = _cut(event["name"])
            doc["evidence"]["events"] = events[:10]
            if len(events) > 10:
                doc["evidence"]["events_left_out"] = len(events) - 10
            items.append(doc)
        counts = {s: 0 for s in ("critical", "warning", "info")}
        for f in session.findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        extra = {
            "handle": entry.handle,
            "by_severity": counts,
            "units": "evidence times in µs; rows are for the event tool",
        }
        return paged(items, len(chosen), page, "findings", extra, self.cap)

    def top_operators(self, handle: str, offset: int = 0, limit: int = 20) -> dict[str, Any]:
        from kinetoscope.analysis.summary import operators_section

        return self._top(
            handle, offset, limit, operators_section, lambda s: len(s.operators.groups),
            "operators", "excl_us",
            "µs; incl = outermost instances' total, excl = self time, gpu_* = GPU "
            "time launched (summary --json's operators)",
        )  # fmt: skip

    def top_kernels(self, handle: str, offset: int = 0, limit: int = 20) -> dict[str, Any]:
        from kinetoscope.analysis.summary import kernels_section

        return self._top(
            handle, offset, limit, kernels_section, lambda s: len(s.kernels.groups),
            "kernels", "total_us",
            "µs (summary --json's kernels: GPU kernels, memcpys, memsets)",
        )  # fmt: skip

    def _top(
        self,
        handle: str,
        offset: int,
        limit: int,
        section: Callable[..., list[dict[str, Any]]],
        total: Callable[[Any], int],
        key: str,
        sorted_by: str,
        units: str,
    ) -> dict[str, Any]:
        """A page of one of the summary's ranked sections (its rows as `summary --json` has them,
        names cut), with the number of groups in all."""
        entry = self._get(handle)
        page = Page.of(offset, limit)
        session = entry.session
        rows = section(session, limit=page.offset + page.limit)[page.offset :]
        for row in rows:
            row["name"] = _cut(row["name"])
        extra = {"handle": entry.handle, "sorted_by": sorted_by, "units": units}
        return paged(rows, total(session), page, key, extra, self.cap)

    def gaps(self, handle: str, offset: int = 0, limit: int = 10) -> dict[str, Any]:
        from kinetoscope.analysis.idle import CAUSES

        entry = self._get(handle)
        page = Page.of(offset, limit)
        session = entry.session
        trace = session.trace
        gaps = session.idle.gaps
        order = gaps.longest(page.offset + page.limit).tolist()[page.offset :]

        def items() -> Any:  # made as they are taken: a small cap takes few
            for i in order:
                yield gap_item(i)

        def gap_item(i: int) -> dict[str, Any]:
            stack = [int(r) for r in session.gap_cpu_stack(i)]
            kept = stack[-STACK_FRAMES:]
            next_row = int(gaps.next_row[i])
            item = {
                "device": int(gaps.device[i]),
                "start_us": _us(int(gaps.start[i])),
                "dur_us": _us(int(gaps.end[i] - gaps.start[i])),
                "cause": CAUSES[int(gaps.cause[i])],
                "next_gpu_event": _cut(trace.name_of(next_row)) if next_row >= 0 else None,
                "next_gpu_event_row": next_row if next_row >= 0 else None,
                "cpu_stack": [_cut(trace.name_of(r), 160) for r in kept],
                "cpu_stack_rows": kept,
            }
            if len(stack) > len(kept):
                item["cpu_stack_outer_frames_left_out"] = len(stack) - len(kept)
            return item

        total_idle = sum(int(d.idle_ns) for d in session.idle.devices)
        extra = {
            "handle": entry.handle,
            "sorted_by": "dur_us (longest first)",
            "total_idle_us": _us(total_idle),
            "units": "µs; cause host_wait = the CPU asked for the next work only after the GPU "
            "went idle; cpu_stack = CPU slices at the gap's midpoint, outermost first",
        }
        return paged(items(), len(gaps), page, "gaps", extra, self.cap)

    def window_stats(
        self, handle: str, start_us: float, end_us: float, limit: int = 10
    ) -> dict[str, Any]:
        from kinetoscope.analysis.classify import ranked_groups
        from kinetoscope.analysis.idle import CAUSES
        from kinetoscope.analysis.ranges import idle_in_range, kernels_in_range, operators_in_range

        entry = self._get(handle)
        page = Page.of(0, limit, default=10)
        t0, t1 = _window(start_us, end_us)
        session = entry.session
        trace = session.trace
        ops = operators_in_range(
            trace, session.nesting, session.operators.groups, session.links, t0, t1
        )
        kernels = kernels_in_range(trace, session.kernels, session.links, t0, t1)
        op_order = [g for g in ranked_groups(trace, ops.groups, ops.excl).tolist() if ops.count[g]]
        k_order = [
            g
            for g in ranked_groups(trace, kernels.groups, kernels.total).tolist()
            if kernels.count[g]
        ]
        gpu = []
        for r in idle_in_range(session.idle, t0, t1):
            gpu.append(
                {
                    "device": r.device,
                    "window_us": _us(r.window),
                    "busy_us": _us(r.busy),
                    "idle_us": _us(r.idle),
                    "busy_pct": round(100 * r.busy / r.window, 2) if r.window else None,
                    "idle_by_cause_us": {c: _us(v) for c, v in zip(CAUSES, r.idle_by_cause)},
                    "gaps": r.gaps,
                }
            )
        steps = session.steps
        overlapping = [
            i
            for i in range(len(steps))
            if steps.start[i] < t1 and steps.start[i] + steps.dur[i] > t0
        ]

        def label(groups: Any, g: int) -> tuple[str, str]:
            return trace.strings[int(groups.cat[g])], _cut(trace.strings[int(groups.name[g])])

        def build(n: int) -> dict[str, Any]:
            operators = []
            for g in op_order[:n]:
                cat, name = label(ops.groups, g)
                operators.append(
                    {
                        "cat": cat,
                        "name": name,
                        "count": int(ops.count[g]),
                        "incl_us": _us(int(ops.incl[g])),
                        "excl_us": _us(int(ops.excl[g])),
                        "gpu_self_us": _us(int(ops.gpu_self[g])),
                        "gpu_total_us": _us(int(ops.gpu_total[g])),
                    }
                )
            kernel_rows = []
            for g in k_order[:n]:
                cat, name = label(kernels.groups, g)
                kernel_rows.append(
                    {
                        "cat": cat,
                        "name": name,
                        "count": int(kernels.count[g]),
                        "total_us": _us(int(kernels.total[g])),
                        "max_us": _us(int(kernels.max[g])),
                    }
                )
            return {
                "handle": entry.handle,
                "window": {"start_us": _us(t0), "end_us": _us(t1), "dur_us": _us(t1 - t0)},
                "gpu": gpu[:16],
                "steps": [
                    {
                        "name": _cut(trace.name_of(int(steps.rows[i]))),
                        "start_us": _us(int(steps.start[i])),
                        "dur_us": _us(int(steps.dur[i])),
                    }
                    for i in overlapping[:n]
                ],
                "steps_overlapping": len(overlapping),
                "operators": operators,
                "operators_in_window": len(op_order),
                "kernels": kernel_rows,
                "kernels_in_window": len(k_order),
                "returned_per_list": min(n, max(len(op_order), len(k_order), len(overlapping))),
                "units": "µs; everything clipped to the window (docs/analysis.md, ranges); "
                "operators by excl_us, kernels by total_us",
            }

        return fit(build, page.limit, self.cap)

    def event(self, handle: str, row: int) -> dict[str, Any]:
        from kinetoscope.parser.access import read_event
        from kinetoscope.parser.model import NO_VALUE

        entry = self._get(handle)
        session = entry.session
        trace = session.trace
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < len(trace):
            raise ToolProblem(
                f"row must be from 0 to {len(trace) - 1} (rows come from other tools)"
            )
        lane = trace.lanes[int(trace.lane[row])]
        start, dur = int(trace.start[row]), int(trace.dur[row])
        answer: dict[str, Any] = {
            "handle": entry.handle,
            "row": row,
            "name": _cut(trace.name_of(row), 2000),
            "cat": _cut(trace.cat_of(row)),
            "ph": chr(int(trace.ph[row])) if int(trace.ph[row]) else None,
            "start_us": _us(start),
            "dur_us": _us(dur),
            "end_us": _us(start + dur),
            "lane": _cut(lane.label, 200),
            "pid": lane.pid if isinstance(lane.pid, int) else _cut(str(lane.pid), 80),
            "tid": lane.tid if isinstance(lane.tid, int) else _cut(str(lane.tid), 80),
        }
        for key, column in (
            ("correlation", trace.corr),
            ("external_id", trace.ext_id),
            ("stream", trace.stream),
        ):
            value = int(column[row])
            if value != NO_VALUE:
                answer[key] = value
        if int(trace.device[row]) >= 0:
            answer["device"] = int(trace.device[row])
        shape = int(trace.shape[row])
        if shape >= 0:
            answer["input_shapes"] = _cut(trace.strings[shape], 1000)
        nesting = session.nesting
        position = int(nesting.position[row])
        if position >= 0:  # a CPU slice
            instance = session.instance(row)
            ancestors = []
            p = int(nesting.parent_pos[position])
            while p >= 0:
                ancestors.append(int(nesting.order[p]))
                p = int(nesting.parent_pos[p])
            ancestors.reverse()
            kept = ancestors[-STACK_FRAMES:]
            answer["kind"] = "cpu"
            answer["self_us"] = _us(instance.self_time)
            answer["parents"] = [{"row": r, "name": _cut(trace.name_of(r), 160)} for r in kept]
            if len(ancestors) > len(kept):
                answer["outer_parents_left_out"] = len(ancestors) - len(kept)
            children = [int(r) for r in instance.children]
            answer["children"] = len(children)
            answer["children_first"] = [
                {"row": r, "name": _cut(trace.name_of(r), 160), "dur_us": _us(int(trace.dur[r]))}
                for r in children[:10]
            ]
            launched = instance.launched
            answer["gpu_launched"] = int(len(launched))
            answer["gpu_launched_us"] = (
                _us(int(trace.dur[launched].sum())) if len(launched) else 0.0
            )
            answer["gpu_launched_first_rows"] = [int(r) for r in launched[:10]]
        elif _is_gpu_row(session, row):
            runtime = session.runtime_of(row)
            answer["kind"] = "gpu"
            if runtime >= 0:
                answer["launched_by"] = {"row": runtime, "name": _cut(trace.name_of(runtime), 160)}
        else:
            answer["kind"] = "other"
        try:
            raw = read_event(trace, row)
        except (OSError, ValueError, MemoryError):
            raw = None
        args = raw.get("args") if isinstance(raw, dict) else None
        if isinstance(args, dict):
            keys = list(args)[:ARG_KEYS]
            answer["args"] = {_cut(str(k), 100): _arg(args[k]) for k in keys}
            if len(args) > len(keys):
                answer["args_left_out"] = len(args) - len(keys)
        elif raw is None:
            answer["args"] = None
            answer["args_note"] = "not readable from the file (changed, or not kept)"
        answer["units"] = "µs"
        return self._fit_event(answer)

    def _fit_event(self, answer: dict[str, Any]) -> dict[str, Any]:
        """The event's answer within the cap: its args shortened, then dropped, then its
        children and parents, each step said in the answer."""
        if _size(answer) <= self.cap and isinstance(answer, dict):
            return answer
        if isinstance(answer.get("args"), dict):
            answer["args"] = {k: _arg(v, 60) for k, v in answer["args"].items()}
            answer["args_note"] = "values cut to 60 characters to fit the answer"
        if _size(answer) > self.cap:
            answer.pop("args", None)
            answer["args_note"] = "left out: too large for one answer"
        for key in ("children_first", "parents", "input_shapes"):
            if _size(answer) > self.cap and key in answer:
                answer.pop(key)
                answer[f"{key}_note"] = "left out: too large for one answer"
        if _size(answer) > self.cap:
            answer["name"] = _cut(answer["name"], 200)
        return answer

    def instances(self, handle: str, name: str, offset: int = 0, limit: int = 20) -> dict[str, Any]:
        import numpy as np

        from kinetoscope.parser.model import PH_COMPLETE

        entry = self._get(handle)
        page = Page.of(offset, limit)
        if not isinstance(name, str) or not name or len(name) > 100_000:
            raise ToolProblem("name must be an event's exact name, as the other tools give it")
        trace = entry.session.trace
        sid = trace.string_id(name)
        rows = (
            np.flatnonzero((trace.name == sid) & (trace.ph == PH_COMPLETE))
            if sid >= 0
            else np.zeros(0, np.int64)
        )
        # Longest first; ties by start, then row: deterministic.
        order = np.lexsort((rows, trace.start[rows], -trace.dur[rows])) if len(rows) else rows
        chosen = rows[order][page.offset : page.offset + page.limit]
        items = [
            {
                "row": int(r),
                "start_us": _us(int(trace.start[r])),
                "dur_us": _us(int(trace.dur[r])),
                "lane": _cut(trace.lanes[int(trace.lane[r])].label, 120),
            }
            for r in chosen.tolist()
        ]
        extra = {
            "handle": entry.handle,
            "name": _cut(name),
            "total_us": _us(int(trace.dur[rows].sum())) if len(rows) else 0.0,
            "sorted_by": "dur_us (longest first)",
            "units": "µs",
        }
        if sid < 0:
            extra["note"] = "no event has this exact name"
        return paged(items, int(len(rows)), page, "instances", extra, self.cap)

    # -- several traces ------------------------------------------------------------------

    def diff(
        self, base: str, new: str, threshold_pct: float | None = None, limit: int = 10
    ) -> dict[str, Any]:
        from kinetoscope.analysis.diff import (
            DEFAULT_THRESHOLD_PCT,
            DiffOptions,
            diff_sessions,
            metric_unit,
        )
        from kinetoscope.present.report_diff import diff_document

        a, b = self._get(base), self._get(new)
        page = Page.of(0, limit, default=10)
        if threshold_pct is None:
            threshold_pct = DEFAULT_THRESHOLD_PCT
        if (
            isinstance(threshold_pct, bool)
            or not isinstance(threshold_pct, (int, float))
            or not 0 <= threshold_pct <= 1000
        ):
            raise ToolProblem("threshold_pct must be a percentage from 0 to 1000")
        options = DiffOptions(threshold_pct=float(threshold_pct))
        result = diff_sessions(a.session, b.session, options)
        doc = diff_document(result, a.path, b.path)
        overall = {
            key: {**value, "unit": "bytes" if metric_unit(key) == "bytes" else "us"}
            for key, value in doc["overall"].items()
        }

        def groups(section: dict[str, Any], n: int) -> dict[str, Any]:
            rows = []
            for row in section["rows"][:n]:
                row = dict(row)
                row["name"] = _cut(row["name"])
                row["merged_base_names"] = [_cut(x, 120) for x in row["merged_base_names"][:5]]
                row["merged_new_names"] = [_cut(x, 120) for x in row["merged_new_names"][:5]]
                rows.append(row)
            return {
                "overlap": section["overlap"],
                "rows": rows,
                "rows_left_out": len(section["rows"]) - len(rows),
                "added": len(section["added"]),
                "removed": len(section["removed"]),
            }

        verdict = dict(doc["verdict"])
        verdict["reasons"] = [_cut(r, MESSAGE_CHARS) for r in verdict.get("reasons", [])[:10]]

        def build(n: int) -> dict[str, Any]:
            return {
                "base": a.handle,
                "new": b.handle,
                "verdict": verdict,
                "whole_traces": doc["whole_traces"],
                "common_steps": doc["common_steps"],
                "steps_base": doc["base"]["steps"],
                "steps_new": doc["new"]["steps"],
                "overall": overall,
                "kernels": groups(doc["kernels"], n),
                "operators": groups(doc["operators"], n),
                "units": "µs unless a metric's unit says bytes; *_pct are percentages; rows "
                "sorted by |delta_us| (docs/diff.md)",
            }

        return fit(build, page.limit, self.cap)

    def straggler(self, handle: str, offset: int = 0, limit: int = 20) -> dict[str, Any]:
        entry = self._get(handle, kind="job")
        page = Page.of(offset, limit)
        doc = entry.document or {}
        straggler = doc.get("straggler")
        if straggler is not None:
            straggler = dict(straggler)
            steps = straggler.get("steps") or []
            straggler["steps"] = [_cut(s, 120) for s in steps[:20]]
            if len(steps) > 20:
                straggler["steps_left_out"] = len(steps) - 20
        ranks = doc.get("ranks", [])
        rows = [
            {
                "rank": r.get("rank"),
                "loaded": r.get("loaded"),
                "wait_us": r.get("wait_us"),
                "collective_us": r.get("collective_us"),
                "busy_us": r.get("busy_us"),
                "idle_us": r.get("idle_us"),
                "steps": len(r.get("steps") or []),
                "clock_offset_us": r.get("clock_offset_us"),
                "error": _cut(r["error"], 300) if r.get("error") else None,
            }
            for r in ranks[page.offset : page.offset + page.limit]
        ]
        extra = {
            "handle": entry.handle,
            "world_size": doc.get("world_size"),
            "straggler": straggler,
            "note": None
            if straggler is not None
            else "no straggler: fewer than two ranks took part in matched collectives",
            "units": "µs; the straggler waits least in collectives (the others wait for it)",
        }
        return paged(rows, len(ranks), page, "ranks", extra, self.cap)

    def query(self, handle: str, query: str, limit: int = 100) -> dict[str, Any]:
        backend = _QUERY_BACKEND
        if backend is None:
            raise ToolProblem("no query engine is installed in this kinetoscope")
        entry = self._get(handle)
        page = Page.of(0, limit, default=100)
        if not isinstance(query, str) or not query.strip() or len(query) > 20_000:
            raise ToolProblem("query must be text of at most 20000 characters")
        try:
            result = backend(entry.session, query, page.limit)
        except ValueError as exc:
            raise ToolProblem(str(exc)) from None
        rows = list(result.get("rows", []))
        extra = {"handle": entry.handle, "columns": result.get("columns", [])}
        return paged(rows, len(rows), page, "rows", extra, self.cap)


def _arg(value: Any, limit: int = ARG_CHARS) -> Any:
    if isinstance(value, str):
        return _cut(value, limit)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_gpu_row(session: Any, row: int) -> bool:
    import numpy as np

    rows = session.links.gpu_rows
    i = int(np.searchsorted(rows, row))
    return i < len(rows) and int(rows[i]) == row


def _median(values: Any) -> float:
    import numpy as np

    return float(np.median(values))


def _window(start_us: Any, end_us: Any) -> tuple[int, int]:
    for name, value in (("start_us", start_us), ("end_us", end_us)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToolProblem(f"{name} must be a number of µs (the trace's own times)")
        if not math.isfinite(value) or abs(value) > TIME_LIMIT_US:
            raise ToolProblem(f"{name} is out of range")
    t0, t1 = round(start_us * 1000), round(end_us * 1000)
    if t1 <= t0:
        raise ToolProblem("the window is empty: end_us must be after start_us")
    return t0, t1


# -- the MCP server -----------------------------------------------------------------------------

INSTRUCTIONS = (
    "Triage PyTorch profiler traces. open_trace(path) gives a handle (t1, ...); then findings, "
    "top_operators, top_kernels, gaps (GPU idle with CPU stacks), window_stats, event(row), "
    "instances(name); diff(base, new) compares two open traces with a verdict; open_job(paths) "
    "and straggler(handle) for a distributed job. Answers are JSON of at most {cap} bytes; a "
    "listing's page says what was left out and the next offset. Times are µs in the trace's "
    "own time base; keys name their unit."
)


def tool_call(tools: TriageTools, name: str, error: type[Exception]) -> Callable[..., Any]:
    """The tool method as the SDK calls it: in a worker thread (the analysis is CPU work), its
    answer as JSON text, every failure turned into `error` with one line (the SDK's ToolError:
    an error result, never a traceback)."""
    import anyio

    method = getattr(tools, name)

    def call(kwargs: dict[str, Any]) -> str:
        try:
            return encode(method(**kwargs))
        except ToolProblem as exc:
            raise error(one_line(str(exc))) from None
        except MemoryError:
            raise error(f"{name}: out of memory") from None
        except Exception as exc:  # noqa: BLE001 — an error result, never a traceback
            from kinetoscope.analysis.session import AnalysisFailed

            if isinstance(exc, AnalysisFailed):
                raise error(one_line(str(exc))) from None
            raise error(one_line(f"{name} failed: {type(exc).__name__}: {exc}")) from None

    async def run(kwargs: dict[str, Any]) -> str:
        return await anyio.to_thread.run_sync(call, kwargs)

    return run


def build_server(tools: TriageTools) -> Any:
    """The MCPServer with the tools registered (needs the `mcp` extra)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from kinetoscope import __version__

    class Server(MCPServer):
        """The SDK's server, except that arguments failing the tool's schema are said in one
        line (pydantic's message spans several)."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            from pydantic import ValidationError

            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if not isinstance(cause, ValidationError):
                    raise
                problems = [
                    f"{'.'.join(str(p) for p in e['loc'] if p != 'arguments') or 'arguments'}: "
                    f"{e['msg']}"
                    for e in cause.errors()[:5]
                ]
                raise ToolError(
                    one_line(f"{name}: bad arguments: " + "; ".join(problems))
                ) from cause

    server = Server(
        SERVER_NAME,
        instructions=INSTRUCTIONS.format(cap=tools.cap),
        version=__version__,
        log_level="WARNING",
    )
    t = {name: tool_call(tools, name, ToolError) for name in TOOL_NAMES}

    @server.tool(structured_output=False)
    async def open_trace(path: str) -> str:
        """Open a .json or .json.gz torch.profiler trace (the user's file). Returns its handle
        (use it in the other tools), its span, GPUs (busy/idle) and step count."""
        return await t["open_trace"]({"path": path})

    @server.tool(structured_output=False)
    async def open_job(paths: list[str], cycle: int | None = None) -> str:
        """Open a distributed job: its folder, or its rank files. Returns a job handle for
        `straggler`."""
        return await t["open_job"]({"paths": paths, "cycle": cycle})

    @server.tool(structured_output=False)
    async def findings(
        handle: str, min_severity: str = "info", offset: int = 0, limit: int = 20
    ) -> str:
        """The triage rules' findings (critical first): what was seen, what to try, evidence
        times and event rows."""
        return await t["findings"](
            {"handle": handle, "min_severity": min_severity, "offset": offset, "limit": limit}
        )

    @server.tool(structured_output=False)
    async def top_operators(handle: str, offset: int = 0, limit: int = 20) -> str:
        """CPU operators by self time (count, inclusive, exclusive, GPU time launched)."""
        return await t["top_operators"]({"handle": handle, "offset": offset, "limit": limit})

    @server.tool(structured_output=False)
    async def top_kernels(handle: str, offset: int = 0, limit: int = 20) -> str:
        """GPU kernels, memcpys and memsets by total time (count, mean, min, max)."""
        return await t["top_kernels"]({"handle": handle, "offset": offset, "limit": limit})

    @server.tool(structured_output=False)
    async def gaps(handle: str, offset: int = 0, limit: int = 10) -> str:
        """GPU idle gaps, longest first, with their cause, the next GPU event and the CPU stack
        running in the gap."""
        return await t["gaps"]({"handle": handle, "offset": offset, "limit": limit})

    @server.tool(structured_output=False)
    async def window_stats(handle: str, start_us: float, end_us: float, limit: int = 10) -> str:
        """Statistics of the window [start_us, end_us] (the trace's own µs): GPU busy/idle per
        device, steps overlapping, top operators and kernels, all clipped to the window."""
        return await t["window_stats"](
            {"handle": handle, "start_us": start_us, "end_us": end_us, "limit": limit}
        )

    @server.tool(structured_output=False)
    async def event(handle: str, row: int) -> str:
        """One event's details by row (rows come from findings, gaps, instances): times, lane,
        parents, children, GPU work launched or the launching call, args."""
        return await t["event"]({"handle": handle, "row": row})

    @server.tool(structured_output=False)
    async def instances(handle: str, name: str, offset: int = 0, limit: int = 20) -> str:
        """The events with this exact name, longest first (row, start, duration, lane)."""
        return await t["instances"](
            {"handle": handle, "name": name, "offset": offset, "limit": limit}
        )

    @server.tool(structured_output=False)
    async def diff(base: str, new: str, threshold_pct: float | None = None, limit: int = 10) -> str:
        """Compare two open traces (BASE, NEW): the verdict (regression, improvement, neutral,
        inconclusive) with its interval, overall metrics, kernels and operators that changed."""
        return await t["diff"](
            {"base": base, "new": new, "threshold_pct": threshold_pct, "limit": limit}
        )

    @server.tool(structured_output=False)
    async def straggler(handle: str, offset: int = 0, limit: int = 20) -> str:
        """A job's straggler (the rank the others wait for) and the phase that explains it,
        with the ranks' waits."""
        return await t["straggler"]({"handle": handle, "offset": offset, "limit": limit})

    @server.tool(structured_output=False)
    async def handles() -> str:
        """The open traces and jobs."""
        return await t["handles"]({})

    @server.tool(structured_output=False)
    async def close(handle: str) -> str:
        """Close an open trace or job (frees its memory)."""
        return await t["close"]({"handle": handle})

    if _QUERY_BACKEND is not None:

        @server.tool(structured_output=False)
        async def query(handle: str, query: str, limit: int = 100) -> str:
            """A read-only query over an open trace."""
            return await t["query"]({"handle": handle, "query": query, "limit": limit})

    return server


TOOL_NAMES = (
    "open_trace",
    "open_job",
    "findings",
    "top_operators",
    "top_kernels",
    "gaps",
    "window_stats",
    "event",
    "instances",
    "diff",
    "straggler",
    "handles",
    "close",
    "query",
)
