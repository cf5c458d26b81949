"""What changed between two traces (BASE and NEW), and whether it is a regression.

Headless: numpy only (no Textual, no Rich). `kinetoscope diff` (kinetoscope/present/report_diff.py)
prints it as tables or JSON; the diff viewer lays itself over the same `TraceDiff`.
Every number is defined in docs/diff.md.

API (stable; the viewer builds on it):

- `diff_sessions(base, new, options=DiffOptions()) -> TraceDiff`: two `TraceSession`s, one per
  trace. Nothing is stored on the sessions; everything they compute is theirs to share.
- `TraceDiff`
    - `pairs: list[StepPair]`: the compared windows. With common steps: the selected
      `ProfilerStep#N` pairs (the k-th step of BASE with the k-th of NEW, by start);
      otherwise one pair covering each whole trace (`whole` is True, `base_step == -1`).
    - `overall: list[MetricDiff]` and `per_step: list[list[MetricDiff]]` (one list per pair, in
      `METRICS` order).
    - `operators`, `kernels: list[GroupDiff]`, sorted by |Δ total| (largest first, ties by name).
    - `verdict: Verdict` (kind in VERDICTS, reasons, Δ %, threshold and noise; the step
      time's `interval` (diff_stats.py: Welch's t on log step times), the operators' and
      kernels' per-step `evidence`, `decided_by`, `steps_to_settle`; `fails(pct)` for
      `--fail-above`, `undecided(pct)` for `--strict`).
    - `alignment(pair) -> list[StreamAlignment]`: the GPU activities of each stream in that
      pair's windows, aligned by a Myers diff on normalised names (computed on first ask, then
      kept; thread-safe).
- `GroupDiff`: one normalised (cat, name) of operators (CPU slices) or kernels (GPU
  activities): counts, totals (ns), means, `delta`, `more_calls + slower_calls == delta`,
  `status` (`common`, `added`, `removed`); `base_groups`/`new_groups` are the group indices in
  each session's `cpu_groups`/`gpu_groups` it merges (for highlighting instances), and
  `base_names`/`new_names` the original names (`merged`: normalisation matched several).
- `StreamAlignment`: `(device, stream)` per side, `base_rows`/`new_rows` (trace rows, by start)
  and `ops`: a list of `(base index | -1, new index | -1, op)` with op in ALIGN_OPS, indices
  into `base_rows`/`new_rows` (`row_ops()`: the same with trace rows); `capped` says the work
  cap was hit and the middle was paired by position instead.
- `normalise_name(name, templates=False)`, `parse_step_pairs(spec)`, and `prepare(session)` (what a
  diff asks of one trace, for a thread to compute while the other trace loads;
  `prepare_concurrently` on two threads).

Times are int64 ns throughout; the JSON document (report_diff.diff_document) has µs.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from kinetoscope.parser.model import KIND_KERNEL, NO_VALUE

from .diff_stats import (
    CONFIDENCE,
    MAX_SETTLE,
    Interval,
    implied_step_log_ratio,
    log_threshold,
    pct,
    steps_to_settle,
    welch_log,
)
from .idle import CAUSES
from .intervals import Union
from .memory import CPU_DEVICE_TYPE, device_properties
from .names import SCAN_LIMIT
from .session import TraceSession
from .steps import COMM_NAME, DATALOADER_PREFIX, names_matching

# -- options --------------------------------------------------------------------------------

DEFAULT_THRESHOLD_PCT = 5.0
EVIDENCE_CONFIDENCE = 0.99  # each operator's interval (Bonferroni: several are looked at)
EVIDENCE_PARTS = 3  # the operators (and kernels) with the largest |Δ| looked at per step
MIN_KERNEL_OVERLAP = 0.2  # below this share of common kernel names, the traces are not comparable
ALIGN_MAX_D = 1000  # the most edits the Myers diff looks for per stream
ALIGN_MAX_WORK = 2_000_000  # the most diagonal steps it takes per stream

REGRESSION, IMPROVEMENT, NEUTRAL, INCONCLUSIVE = (
    "regression",
    "improvement",
    "neutral",
    "inconclusive",
)
VERDICTS = (REGRESSION, IMPROVEMENT, NEUTRAL, INCONCLUSIVE)
EQUAL, CHANGED, ADDED, REMOVED = "equal", "changed", "added", "removed"
ALIGN_OPS = (EQUAL, CHANGED, ADDED, REMOVED)

# (key, label, unit): unit "ns" or "bytes".
METRICS: tuple[tuple[str, str, str], ...] = (
    ("step_time", "step time", "ns"),
    ("gpu_busy", "GPU busy", "ns"),
    *((f"idle_{c}", f"GPU idle: {c.replace('_', ' ')}", "ns") for c in CAUSES),
    ("exposed_comm", "exposed communication", "ns"),
    ("sync", "sync (host blocked)", "ns"),
    ("dataloader", "DataLoader", "ns"),
    ("memory_peak", "memory peak (allocated)", "bytes"),
)
METRIC_KEYS = tuple(key for key, _, _ in METRICS)


@dataclass(frozen=True)
class DiffOptions:
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    steps: list[int] | None = None  # 1-based pair numbers to compare; None: all common steps
    templates: bool = False  # also fold C++ template arguments when matching names


class StepSpecError(ValueError):
    """A `--steps` value that cannot be read."""


# The largest pair number `--steps` takes (more steps than any trace holds): a bigger one, or
# a 5,000-digit one, is refused before it becomes a range of that many numbers.
MAX_STEP_NUMBER = 1_000_000


def parse_step_pairs(spec: str) -> list[int]:
    """`1,3-5,8-` -> pair numbers (1-based), each once. `N-` means N and every later pair,
    written as [N, -1] (the end is resolved against the pairs there are)."""
    from kinetoscope.common.numbers import shown

    out: list[int] = []
    seen: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        match = re.fullmatch(r"(\d+)?(-(\d+)?)?", part)
        if match is None or (match.group(1) is None and match.group(3) is None):
            raise StepSpecError(f"--steps: cannot read {shown(part)} (use e.g. 2,4-6,8-)")
        for number in (match.group(1), match.group(3)):
            if number is not None and (
                len(number) > 7 or int(number) > MAX_STEP_NUMBER
            ):  # the length first: int() of 5,000 digits is a ValueError of its own
                raise StepSpecError(
                    f"--steps: {shown(part)}: step pairs are numbered up to {MAX_STEP_NUMBER:,}"
                )
        first = int(match.group(1) or 1)
        if first < 1:  # `0-` too: pair 0 would be the last pair, counted twice
            raise StepSpecError(f"--steps: {shown(part)} is not a range of step numbers from 1")
        if match.group(2) is None:
            last = first
        elif match.group(3) is None:
            out.extend([first, -1])
            continue
        else:
            last = int(match.group(3))
        if first < 1 or last < first:
            raise StepSpecError(f"--steps: {shown(part)} is not a range of step numbers from 1")
        for number in range(first, last + 1):
            if number not in seen:
                seen.add(number)
                out.append(number)
    if not out:
        raise StepSpecError("--steps: no step given")
    return out


def _resolve_steps(selection: list[int], available: int) -> list[int]:
    """0-based pair indices from `parse_step_pairs`' numbers (those past `available` dropped)."""
    picked: set[int] = set()
    i = 0
    while i < len(selection):
        first = selection[i]
        if i + 1 < len(selection) and selection[i + 1] == -1:
            picked.update(range(first - 1, available))
            i += 2
            continue
        if first - 1 < available:
            picked.add(first - 1)
        i += 1
    return sorted(picked)


# -- names ----------------------------------------------------------------------------------

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_PY_LINE = re.compile(r"(\.pyx?)\(\d+\)")
_STEP_NUMBER = re.compile(r"^ProfilerStep#\d+$")
STEP_KEY = "ProfilerStep#…"


def _fold_templates(name: str) -> str:
    """Every outermost `<...>` becomes `<…>` (`operator<<` and `a < b` are left alone when
    nothing closes them)."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "<" and depth == 0:
            close = _matching_angle(name, i)
            if close < 0:
                out.append(ch)
            else:
                out.append("<…>")
                i = close
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _matching_angle(name: str, start: int) -> int:
    depth = 0
    for i in range(start, len(name)):
        if name[i] == "<":
            depth += 1
        elif name[i] == ">":
            depth -= 1
            if depth == 0:
                return i
    return -1


def normalise_name(name: str, templates: bool = False, lines: bool = True) -> str:
    """The name two traces' events are matched by: hex addresses become `0x…`, Python line
    numbers `file.py(…)` (unless not `lines`), `ProfilerStep#N` becomes `ProfilerStep#…`, and
    with `templates` every outermost template argument list `<…>`. Only the first SCAN_LIMIT
    characters are kept."""
    text = name if len(name) <= SCAN_LIMIT else name[:SCAN_LIMIT]
    if _STEP_NUMBER.match(text):
        return STEP_KEY
    if "0x" in text:
        text = _HEX.sub("0x…", text)
    if lines and ".py" in text:
        text = _PY_LINE.sub(r"\1(…)", text)
    if templates and "<" in text:
        text = _fold_templates(text)
    return text


# -- results --------------------------------------------------------------------------------


def _pct(delta: float, base: float) -> float | None:
    return None if base == 0 else 100.0 * delta / base


@dataclass(frozen=True)
class MetricDiff:
    key: str  # one of METRIC_KEYS
    base: int | None  # ns or bytes; None: not in that trace (no memory events)
    new: int | None

    @property
    def delta(self) -> int | None:
        return None if self.base is None or self.new is None else self.new - self.base

    @property
    def delta_pct(self) -> float | None:
        d = self.delta
        return None if d is None or self.base is None else _pct(d, self.base)


@dataclass(frozen=True)
class StepPair:
    """One compared window per trace: a pair of steps, or (whole) each trace's span."""

    base_step: int  # index into base.steps, -1 for the whole trace
    new_step: int
    base_window: tuple[int, int]  # [start, end) ns
    new_window: tuple[int, int]
    base_name: str
    new_name: str
    number: int  # 1-based position among the common steps (what --steps picks); 0 when whole


@dataclass(frozen=True)
class GroupDiff:
    kind: str  # "operator" or "kernel"
    cat: str
    name: str  # normalised
    base_count: int
    new_count: int
    base_total: int  # ns
    new_total: int
    base_groups: tuple[int, ...]
    new_groups: tuple[int, ...]
    base_names: tuple[str, ...]  # the original names (none for the steps' own row)
    new_names: tuple[str, ...]

    @property
    def status(self) -> str:
        if self.base_count == 0:
            return ADDED
        if self.new_count == 0:
            return REMOVED
        return "common"

    @property
    def delta(self) -> int:
        return self.new_total - self.base_total

    @property
    def delta_pct(self) -> float | None:
        return _pct(self.delta, self.base_total)

    @property
    def base_mean(self) -> float | None:
        return self.base_total / self.base_count if self.base_count else None

    @property
    def new_mean(self) -> float | None:
        return self.new_total / self.new_count if self.new_count else None

    @property
    def more_calls(self) -> float:
        """(new count − base count) × base mean; for an added name, its whole new total."""
        if self.base_count == 0:
            return float(self.new_total)
        return (self.new_count - self.base_count) * self.base_total / self.base_count

    @property
    def slower_calls(self) -> float:
        """new count × (new mean − base mean), computed as Δ − more_calls so that the two add
        up to Δ exactly; 0 for an added or removed name."""
        if self.base_count == 0 or self.new_count == 0:
            return 0.0
        return self.delta - self.more_calls

    @property
    def merged(self) -> bool:
        """Normalisation matched more than one original name into this row."""
        return len(set(self.base_names) | set(self.new_names)) > 1


@dataclass(frozen=True)
class Evidence:
    """One operator's or kernel's per-step time in both traces: a part of the step that changed
    (docs/diff.md, "Evidence from the operators")."""

    kind: str  # "operator" or "kernel"
    name: str  # normalised
    base_calls: int  # instances in the compared steps
    new_calls: int
    interval: Interval  # of its per-step time, at EVIDENCE_CONFIDENCE
    slower_pairs: int  # pairs in which NEW's per-step time is the larger
    pairs: int
    # Operators: the step time's log ratio (estimate, low, high) if only this part had changed.
    implied: tuple[float, float, float] | None
    decisive: bool  # this evidence decided the verdict


@dataclass(frozen=True)
class Verdict:
    kind: str  # one of VERDICTS
    reasons: tuple[str, ...]  # why (always at least one line)
    delta_pct: float | None  # mean step time, NEW vs BASE
    threshold_pct: float
    noise_base_pct: float | None  # step-to-step coefficient of variation, None: < 2 steps
    noise_new_pct: float | None
    interval: Interval | None = None  # of the step time's change (log units); None: none
    decided_by: str | None = None  # "step_time", "operator", "threshold" (no interval), None
    steps_to_settle: int | None = None  # steps per side that would settle a wide interval
    evidence: tuple[Evidence, ...] = ()
    # The interval the verdict stands on, in %: the step time's, or the deciding operator's
    # implied one; without an interval, the mean Δ % for both.
    gate_low_pct: float | None = None
    gate_high_pct: float | None = None

    def fails(self, fail_above: float | None) -> bool:
        """A regression whose interval lies above `fail_above` % (`--fail-above`: exit 3)."""
        return (
            fail_above is not None
            and self.kind == REGRESSION
            and self.gate_low_pct is not None
            and self.gate_low_pct > fail_above
        )

    def undecided(self, fail_above: float | None) -> bool:
        """`--strict`: not `fails`, yet a regression of more than `fail_above` % cannot be ruled
        out: the traces are not comparable, there is no interval, or it reaches above."""
        if fail_above is None or self.fails(fail_above):
            return False
        return (
            self.kind == INCONCLUSIVE
            or self.interval is None
            or self.gate_high_pct is None
            or self.gate_high_pct > fail_above
        )


@dataclass(frozen=True)
class StreamAlignment:
    base_key: tuple[int, int] | None  # (device, stream); None: no such stream on that side
    new_key: tuple[int, int] | None
    base_rows: np.ndarray  # int64 trace rows, by start
    new_rows: np.ndarray
    ops: list[tuple[int, int, str]]
    capped: bool

    def row_ops(self) -> list[tuple[int, int, str]]:
        """`ops` with trace rows instead of indices: (base row | -1, new row | -1, op)."""
        b, n = self.base_rows.tolist(), self.new_rows.tolist()
        return [(b[i] if i >= 0 else -1, n[j] if j >= 0 else -1, op) for i, j, op in self.ops]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(ALIGN_OPS, 0)
        for _, _, op in self.ops:
            out[op] += 1
        return out


@dataclass
class TraceDiff:
    base: TraceSession
    new: TraceSession
    options: DiffOptions
    whole: bool
    pairs: list[StepPair]
    steps_base: int  # steps in each trace
    steps_new: int
    common_steps: int  # min of the two: the pairs there are before --steps
    overall: list[MetricDiff]
    per_step: list[list[MetricDiff]]
    operators: list[GroupDiff]
    kernels: list[GroupDiff]
    kernel_overlap: float  # common kernel names / kernel names of either trace
    operator_overlap: float
    verdict: Verdict
    devices_base: list[str] = field(default_factory=list)
    devices_new: list[str] = field(default_factory=list)
    _alignments: dict[int, list[StreamAlignment]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def alignment(self, pair: int) -> list[StreamAlignment]:
        """Per stream, the GPU activities of pair `pair` aligned (see the module docstring)."""
        with self._lock:
            if pair not in self._alignments:
                self._alignments[pair] = align_pair(
                    self.base, self.new, self.pairs[pair], self.options.templates
                )
            return self._alignments[pair]


# -- windows and metrics --------------------------------------------------------------------


def _whole_window(session: TraceSession) -> tuple[int, int]:
    trace = session.trace
    lo = trace.slice_start_min if trace.slice_start_min is not None else 0
    hi = trace.slice_end_max if trace.slice_end_max is not None else lo
    return int(lo), int(hi)


def _union_of(session: TraceSession, mask: np.ndarray) -> Union:
    trace = session.trace
    rows = np.flatnonzero(mask)
    return Union.of(trace.start[rows], trace.start[rows] + trace.dur[rows])


def _idle_by_cause(session: TraceSession, lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """Per cause: Σ over devices of that device's idle gaps of the cause inside each window."""
    gaps = session.idle.gaps
    out = []
    for cause in range(len(CAUSES)):
        total = np.zeros(len(lo), dtype=np.int64)
        of_cause = gaps.cause == cause
        for dev in np.unique(gaps.device[of_cause]).tolist():
            mine = of_cause & (gaps.device == dev)
            total += Union.of(gaps.start[mine], gaps.end[mine]).covered(lo, hi)
        out.append(total)
    return out


def _memory_peak(session: TraceSession, lo: np.ndarray, hi: np.ndarray) -> list[int | None]:
    """Per window: the highest total allocated of GPU memory events inside it (any device)."""
    memory = session.trace.memory
    if len(memory) == 0:
        return [None] * len(lo)
    keep = (
        (memory.ts != NO_VALUE)
        & (memory.total_allocated != NO_VALUE)
        # Any accelerator: CUDA (1), and HIP (6) as ROCm builds of torch write it, XPU, MTIA...
        & (memory.device_type != CPU_DEVICE_TYPE)
        & (memory.device_type != NO_VALUE)
    )
    ts = memory.ts[keep]
    value = memory.total_allocated[keep]
    order = np.argsort(ts, kind="stable")
    ts, value = ts[order], value[order]
    out: list[int | None] = []
    for a, b in zip(lo.tolist(), hi.tolist()):
        i, j = np.searchsorted(ts, a, side="left"), np.searchsorted(ts, b, side="left")
        out.append(int(value[i:j].max()) if j > i else None)
    return out


def _step_metrics(session: TraceSession, steps: list[int]) -> dict[str, list[int | None]]:
    """The metrics of the given steps, from the session's own per-step results."""
    s = session.steps
    idx = np.asarray(steps, dtype=np.int64)
    lo, hi = s.start[idx], s.end[idx]
    idle = _idle_by_cause(session, lo, hi)
    metrics: dict[str, list[int | None]] = {
        "step_time": s.dur[idx].tolist(),
        "gpu_busy": s.gpu_busy[idx].tolist(),
        "exposed_comm": s.comm[idx].tolist(),
        "sync": session.sync.step_blocked[idx].tolist(),
        "dataloader": s.dataloader[idx].tolist(),
        "memory_peak": _memory_peak(session, lo, hi),
    }
    for cause, values in zip(CAUSES, idle):
        metrics[f"idle_{cause}"] = values.tolist()
    return metrics


def _whole_metrics(session: TraceSession) -> dict[str, list[int | None]]:
    """The same metrics over the trace's span, by the steps' definitions (analysis/steps.py)."""
    trace = session.trace
    c = session.classes
    lo_i, hi_i = _whole_window(session)
    lo, hi = np.array([lo_i]), np.array([hi_i])
    kernel = c.gpu & (c.kind == KIND_KERNEL)
    comm_kernel = kernel & names_matching(trace, COMM_NAME.search)[trace.name]
    compute_union = _union_of(session, kernel & ~comm_kernel)
    with_comm = compute_union.merge(_union_of(session, comm_kernel))
    loader = names_matching(trace, lambda t: t.startswith(DATALOADER_PREFIX))[trace.name]
    sync = session.sync
    blocked = Union.of(trace.start[sync.rows], trace.start[sync.rows] + sync.dur)
    idle = _idle_by_cause(session, lo, hi)
    metrics: dict[str, list[int | None]] = {
        "step_time": [hi_i - lo_i],
        "gpu_busy": session.idle.all_busy.covered(lo, hi).tolist(),
        "exposed_comm": (with_comm.covered(lo, hi) - compute_union.covered(lo, hi)).tolist(),
        "sync": blocked.covered(lo, hi).tolist(),
        "dataloader": _union_of(session, c.cpu & loader).covered(lo, hi).tolist(),
        "memory_peak": _memory_peak(session, lo, hi),
    }
    for cause, values in zip(CAUSES, idle):
        metrics[f"idle_{cause}"] = values.tolist()
    return metrics


def _overall(values: list[int | None], key: str) -> int | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return max(present) if key == "memory_peak" else sum(present)


# -- operators and kernels ------------------------------------------------------------------


def _in_windows(t: np.ndarray, windows: list[tuple[int, int]]) -> np.ndarray:
    """Whether each time lies in one of the windows (one binary search per time, however many
    windows; where windows overlap, a time inside either counts)."""
    if not windows:
        return np.zeros(len(t), dtype=bool)
    bounds = np.array(sorted(windows), dtype=np.int64)
    lo = bounds[:, 0]
    hi = np.maximum.accumulate(bounds[:, 1])  # overlapping windows reach as far as any before
    at = np.searchsorted(lo, t, side="right") - 1
    return (at >= 0) & (t < hi[np.maximum(at, 0)])


def _gpu_launch_time(session: TraceSession) -> tuple[np.ndarray, np.ndarray]:
    """(GPU activity rows, the time each belongs to a window by): the launching runtime call's
    start when linked (a kernel runs after its step's CPU side may have ended), else its own."""
    trace, links = session.trace, session.links
    rows = links.gpu_rows
    linked = links.gpu_runtime >= 0
    when = trace.start[rows].copy()
    when[linked] = trace.start[links.gpu_runtime[linked]]
    return rows, when


def _aggregate(
    session: TraceSession, kind: str, windows: list[tuple[int, int]] | None, templates: bool
) -> dict[tuple[str, str], tuple[int, int, list[int], list[str]]]:
    """(cat lower-cased, normalised name) -> (count, total ns, groups, original names)."""
    trace = session.trace
    if kind == "kernel":
        groups = session.gpu_groups
        rows, when = _gpu_launch_time(session)
        if windows is not None:
            rows = rows[_in_windows(when, windows)]
        group = groups.index[rows].astype(np.int64)
        count = np.bincount(group, minlength=len(groups))
        total = np.bincount(group, weights=trace.dur[rows], minlength=len(groups))
    else:
        groups = session.cpu_groups
        nesting = session.nesting
        order = nesting.order
        keep = np.ones(len(order), dtype=bool)
        if windows is not None:
            keep = _in_windows(trace.start[order], windows)
        group = groups.index[order[keep]].astype(np.int64)
        count = np.bincount(group, minlength=len(groups))
        outer = keep & nesting.outermost
        total = np.bincount(
            groups.index[order[outer]].astype(np.int64),
            weights=trace.dur[order[outer]],
            minlength=len(groups),
        )
    out: dict[tuple[str, str], tuple[int, int, list[int], list[str]]] = {}
    strings = trace.strings
    for g in np.flatnonzero(count).tolist():
        original = strings[int(groups.name[g])]
        key = (strings[int(groups.cat[g])].lower(), normalise_name(original, templates, False))
        n, t, gs, names = out.get(key, (0, 0, [], []))
        gs.append(g)
        if original not in names and key[1] != STEP_KEY:  # steps merge by design
            names.append(original)
        out[key] = (n + int(count[g]), t + int(round(total[g])), gs, names)
    return out


def _window_index(t: np.ndarray, windows: list[tuple[int, int]]) -> np.ndarray:
    """For each time, the index of the window (by start) that holds it, −1 for none (one binary
    search per time; the compared steps do not overlap)."""
    bounds = np.asarray(windows, dtype=np.int64).reshape(-1, 2)
    order = np.argsort(bounds[:, 0], kind="stable")
    lo, hi = bounds[order, 0], bounds[order, 1]
    at = np.searchsorted(lo, t, side="right") - 1
    inside = (at >= 0) & (t < hi[np.maximum(at, 0)])
    return np.where(inside, order[np.maximum(at, 0)], -1)


def _part_series(
    session: TraceSession,
    kind: str,
    parts: list[tuple[int, ...]],
    windows: list[tuple[int, int]],
) -> tuple[np.ndarray, np.ndarray]:
    """Per part (a tuple of group indices, as `GroupDiff.base_groups`) and window: the total
    time (ns; operators: outermost instances, as the operators table's totals) and the count
    of instances. Two arrays of shape (parts, windows), from one pass over the trace's arrays."""
    trace = session.trace
    k, w = len(parts), len(windows)
    groups = session.gpu_groups if kind == "kernel" else session.cpu_groups
    lookup = np.full(len(groups) + 1, -1, dtype=np.int64)
    for i, part in enumerate(parts):
        lookup[list(part)] = i
    if kind == "kernel":
        rows, when = _gpu_launch_time(session)
        outer = np.ones(len(rows), dtype=bool)
    else:
        rows = session.nesting.order
        when = trace.start[rows]
        outer = session.nesting.outermost
    part = lookup[groups.index[rows].astype(np.int64)]
    keep = part >= 0
    rows, when, outer, part = rows[keep], when[keep], outer[keep], part[keep]
    window = _window_index(when, windows)
    keep = window >= 0
    cell = part[keep] * w + window[keep]
    counts = np.bincount(cell, minlength=k * w).reshape(k, w)
    timed = keep & outer
    cell = part[timed] * w + window[timed]
    totals = np.bincount(cell, weights=trace.dur[rows[timed]], minlength=k * w)
    return np.rint(totals).astype(np.int64).reshape(k, w), counts.astype(np.int64)


def _parts(
    base: TraceSession,
    new: TraceSession,
    operators: list[GroupDiff],
    kernels: list[GroupDiff],
    pairs: list[StepPair],
) -> list[PartSeries]:
    """The per-step series of the EVIDENCE_PARTS common operators and kernels with the largest
    |Δ| (not the steps' own row)."""
    out: list[PartSeries] = []
    for kind, rows in (("operator", operators), ("kernel", kernels)):
        chosen = [g for g in rows if g.status == "common" and g.name != STEP_KEY]
        chosen = [g for g in chosen if g.delta != 0][:EVIDENCE_PARTS]
        if not chosen:
            continue
        tb, cb = _part_series(
            base, kind, [g.base_groups for g in chosen], [p.base_window for p in pairs]
        )
        tn, cn = _part_series(
            new, kind, [g.new_groups for g in chosen], [p.new_window for p in pairs]
        )
        for i, g in enumerate(chosen):
            out.append(PartSeries(kind, g.name, tb[i], tn[i], int(cb[i].sum()), int(cn[i].sum())))
    return out


Aggregate = dict[tuple[str, str], tuple[int, int, list[int], list[str]]]


def _match_moved_lines(base: Aggregate, new: Aggregate) -> None:
    """Python frames that match nothing on the other side are matched again without their line
    numbers (an edit moved the function): every such unmatched key of BASE and of NEW with the
    same `file.py(…): fn` is merged into one. Frames that match exactly are left alone, so two
    functions of one file that share a name stay apart when their lines did not move."""

    def loose(key: tuple[str, str]) -> tuple[str, str] | None:
        if ".py" not in key[1]:
            return None
        folded = _PY_LINE.sub(r"\1(…)", key[1])
        return (key[0], folded) if folded != key[1] else None

    unmatched: list[dict[tuple[str, str], list[tuple[str, str]]]] = []
    for mine, other in ((base, new), (new, base)):
        by_loose: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for key in mine.keys() - other.keys():
            folded = loose(key)
            if folded is not None:
                by_loose.setdefault(folded, []).append(key)
        unmatched.append(by_loose)
    for folded in unmatched[0].keys() & unmatched[1].keys():
        for side, by_loose in ((base, unmatched[0]), (new, unmatched[1])):
            count, total, groups, names = side.pop(folded, (0, 0, [], []))
            for key in sorted(by_loose[folded]):
                c, t, g, n = side.pop(key)
                count, total = count + c, total + t
                groups = groups + g
                names = names + [name for name in n if name not in names]
            side[folded] = (count, total, groups, names)


def _group_diffs(
    kind: str,
    base: dict[tuple[str, str], tuple[int, int, list[int], list[str]]],
    new: dict[tuple[str, str], tuple[int, int, list[int], list[str]]],
) -> tuple[list[GroupDiff], float]:
    _match_moved_lines(base, new)
    empty: tuple[int, int, list[int], list[str]] = (0, 0, [], [])
    out = []
    for key in base.keys() | new.keys():
        b, n = base.get(key, empty), new.get(key, empty)
        out.append(
            GroupDiff(
                kind=kind,
                cat=key[0],
                name=key[1],
                base_count=b[0],
                new_count=n[0],
                base_total=b[1],
                new_total=n[1],
                base_groups=tuple(b[2]),
                new_groups=tuple(n[2]),
                base_names=tuple(b[3]),
                new_names=tuple(n[3]),
            )
        )
    out.sort(key=lambda d: (-abs(d.delta), d.name, d.cat))
    either = len(base.keys() | new.keys())
    overlap = len(base.keys() & new.keys()) / either if either else 1.0
    return out, overlap


# -- alignment ------------------------------------------------------------------------------


def myers(
    a: list[int], b: list[int], max_d: int = ALIGN_MAX_D, max_work: int = ALIGN_MAX_WORK
) -> list[tuple[int, int, str]] | None:
    """The shortest edit script from `a` to `b` (Myers 1986, O((N+M)·D)) as
    (index in a | -1, index in b | -1, EQUAL/REMOVED/ADDED), in order; None when it needs more
    than `max_d` edits or `max_work` steps."""
    n, m = len(a), len(b)
    limit = min(n + m, max_d)
    offset = limit + 1
    v = [0] * (2 * limit + 3)
    history: list[list[int]] = []
    work = 0
    for d in range(limit + 1):
        # Only the diagonals step d reads, -d-1 .. d+1: O(D²) memory over the whole search.
        history.append(v[offset - d - 1 : offset + d + 2])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            work += 1 + x - start
            v[offset + k] = x
            if x >= n and y >= m:
                return _backtrack(history, n, m)
        if work > max_work:
            return None
    return None


def _backtrack(history: list[list[int]], n: int, m: int) -> list[tuple[int, int, str]]:
    ops: list[tuple[int, int, str]] = []
    x, y = n, m
    for d in range(len(history) - 1, -1, -1):
        v = history[d]  # diagonal k is at k + d + 1
        k = x - y
        if k == -d or (k != d and v[k - 1 + d + 1] < v[k + 1 + d + 1]):
            prev_k = k + 1
        else:
            prev_k = k - 1
        prev_x = v[prev_k + d + 1]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            ops.append((x, y, EQUAL))
        if d > 0:
            if x == prev_x:
                ops.append((-1, y - 1, ADDED))
            else:
                ops.append((x - 1, -1, REMOVED))
        x, y = prev_x, prev_y
    ops.reverse()
    return ops


def _pair_changes(ops: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Within each run of removals and additions between two equal entries, the i-th removed
    and the i-th added become one CHANGED entry (the kernel at that place was replaced)."""
    out: list[tuple[int, int, str]] = []
    i = 0
    while i < len(ops):
        if ops[i][2] == EQUAL:
            out.append(ops[i])
            i += 1
            continue
        j = i
        while j < len(ops) and ops[j][2] != EQUAL:
            j += 1
        removed = [o[0] for o in ops[i:j] if o[2] == REMOVED]
        added = [o[1] for o in ops[i:j] if o[2] == ADDED]
        both = min(len(removed), len(added))
        out.extend((removed[t], added[t], CHANGED) for t in range(both))
        out.extend((r, -1, REMOVED) for r in removed[both:])
        out.extend((-1, a, ADDED) for a in added[both:])
        i = j
    return out


def _common_ends(a: list[int] | np.ndarray, b: list[int] | np.ndarray) -> tuple[int, int]:
    """The lengths of the common start and of the common end (not overlapping the start)."""
    x, y = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    both = min(len(x), len(y))
    differ = np.flatnonzero(x[:both] != y[:both])
    head = int(differ[0]) if len(differ) else both
    rest = both - head
    x_end, y_end = x[len(x) - rest :], y[len(y) - rest :]
    differ = np.flatnonzero(x_end[::-1] != y_end[::-1])
    tail = int(differ[0]) if len(differ) else rest
    return head, tail


def align_sequences(
    a: list[int] | np.ndarray,
    b: list[int] | np.ndarray,
    max_d: int = ALIGN_MAX_D,
    max_work: int = ALIGN_MAX_WORK,
) -> tuple[list[tuple[int, int, str]], bool]:
    """Align two name sequences: common start and end first, Myers on the middle (replaced
    runs paired as CHANGED). When the middle needs more than the caps allow, it is paired by
    position instead (EQUAL where the names agree, CHANGED where not) and `capped` is True."""
    n, m = len(a), len(b)
    head, tail = _common_ends(a, b)
    ops = [(i, i, EQUAL) for i in range(head)]
    mid_a, mid_b = list(a[head : n - tail]), list(b[head : m - tail])
    middle = myers(mid_a, mid_b, max_d, max_work)
    capped = middle is None
    if middle is None:
        both = min(len(mid_a), len(mid_b))
        middle = [(i, i, EQUAL if mid_a[i] == mid_b[i] else CHANGED) for i in range(both)]
        middle += [(i, -1, REMOVED) for i in range(both, len(mid_a))]
        middle += [(-1, i, ADDED) for i in range(both, len(mid_b))]
    else:
        middle = _pair_changes(middle)
    ops += [(i + head if i >= 0 else -1, j + head if j >= 0 else -1, op) for i, j, op in middle]
    ops += [(n - tail + t, m - tail + t, EQUAL) for t in range(tail)]
    return ops, capped


def _streams(session: TraceSession, window: tuple[int, int]) -> dict[tuple[int, int], np.ndarray]:
    trace = session.trace
    rows, when = _gpu_launch_time(session)
    rows = rows[_in_windows(when, [window])]
    rows = rows[np.lexsort((rows, trace.start[rows]))]
    out: dict[tuple[int, int], np.ndarray] = {}
    device, stream = trace.device[rows], trace.stream[rows]
    order = np.lexsort((stream, device))  # stable: each stream's rows stay by start
    device, stream, rows = device[order], stream[order], rows[order]
    cut = np.flatnonzero((device[1:] != device[:-1]) | (stream[1:] != stream[:-1])) + 1
    for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), len(rows)]):
        if hi > lo:
            out[(int(device[lo]), int(stream[lo]))] = rows[lo:hi]
    return out


def align_pair(
    base: TraceSession, new: TraceSession, pair: StepPair, templates: bool = False
) -> list[StreamAlignment]:
    """Each stream's GPU activities in the pair's windows, aligned. Streams are matched by
    (device, stream); those left over on both sides are matched in order of their ids."""
    b_streams = _streams(base, pair.base_window)
    n_streams = _streams(new, pair.new_window)
    matched = [(k, k) for k in sorted(b_streams.keys() & n_streams.keys())]
    b_left = sorted(b_streams.keys() - n_streams.keys())
    n_left = sorted(n_streams.keys() - b_streams.keys())
    both = min(len(b_left), len(n_left))
    matched += list(zip(b_left[:both], n_left[:both]))
    matched += [(k, None) for k in b_left[both:]]
    matched += [(None, k) for k in n_left[both:]]
    ids: dict[str, int] = {}

    def coded(session: TraceSession, rows: np.ndarray) -> np.ndarray:
        """The rows' normalised names as small integers shared by both traces."""
        strings = session.trace.strings
        used, inverse = np.unique(session.trace.name[rows], return_inverse=True)
        codes = [ids.setdefault(normalise_name(strings[s], templates), len(ids)) for s in used]
        return np.asarray(codes, dtype=np.int64)[inverse.reshape(-1)]

    empty = np.zeros(0, dtype=np.int64)
    result = []
    for b_key, n_key in matched:
        b_rows = b_streams[b_key] if b_key is not None else empty
        n_rows = n_streams[n_key] if n_key is not None else empty
        ops, capped = align_sequences(coded(base, b_rows), coded(new, n_rows))
        result.append(StreamAlignment(b_key, n_key, b_rows, n_rows, ops, capped))
    return result


# -- verdict --------------------------------------------------------------------------------


def _noise_pct(durations: list[int]) -> float | None:
    """Step-to-step noise: the sample standard deviation of step times over their mean, in %."""
    if len(durations) < 2:
        return None
    mean = sum(durations) / len(durations)
    if mean <= 0:
        return None
    var = sum((d - mean) ** 2 for d in durations) / (len(durations) - 1)
    return 100.0 * math.sqrt(var) / mean


@dataclass(frozen=True)
class PartSeries:
    """One operator's or kernel's per-step time (ns) and calls, per compared pair."""

    kind: str
    name: str
    base: np.ndarray  # int64, one per pair
    new: np.ndarray
    base_calls: int
    new_calls: int


def _span(interval_pct: tuple[float, float]) -> str:
    return f"{interval_pct[0]:+.1f} % .. {interval_pct[1]:+.1f} %"


def _steps_each(interval: Interval) -> str:
    if interval.n_base == interval.n_new:
        return f"{interval.n_base} steps each"
    return f"{interval.n_base} BASE steps, {interval.n_new} NEW steps"


def _evidence(parts: list[PartSeries], mean_b: float, mean_n: float) -> list[Evidence]:
    out = []
    for part in parts:
        interval = welch_log(part.base, part.new, EVIDENCE_CONFIDENCE)
        if interval is None:  # a step without it: no logarithm
            continue
        implied = None
        pb, pn = float(part.base.mean()), float(part.new.mean())
        # Only an operator that fits in the step (not one summed over threads beside it).
        if part.kind == "operator" and pb <= mean_b and pn <= mean_n:
            implied = tuple(
                implied_step_log_ratio(x, pb, pn, mean_b, mean_n)
                for x in (interval.estimate, interval.low, interval.high)
            )
        out.append(
            Evidence(
                kind=part.kind,
                name=part.name,
                base_calls=part.base_calls,
                new_calls=part.new_calls,
                interval=interval,
                slower_pairs=int(np.count_nonzero(part.new > part.base)),
                pairs=len(part.base),
                implied=implied,  # type: ignore[arg-type]
                decisive=False,
            )
        )
    return out


def _part_text(e: Evidence) -> str:
    calls = (
        "at the same call count"
        if e.base_calls == e.new_calls
        else f"calls {e.base_calls:,} -> {e.new_calls:,}"
    )
    text = (
        f"{e.kind} {e.name} {e.interval.change_pct:+.1f} % per step {calls}, "
        f"{100 * e.interval.confidence:g} % interval "
        f"{_span((e.interval.low_pct, e.interval.high_pct))}, "
        f"{'slower' if e.interval.estimate > 0 else 'faster'} in "
        f"{e.slower_pairs if e.interval.estimate > 0 else e.pairs - e.slower_pairs} of "
        f"{e.pairs} pairs"
    )
    if e.implied is not None:
        text += (
            f": by itself the step time {pct(e.implied[0]):+.1f} % "
            f"({_span((pct(e.implied[1]), pct(e.implied[2])))})"
        )
    return text


def _verdict(
    threshold: float,
    base_times: list[int],
    new_times: list[int],
    not_comparable: list[str],
    parts: list[PartSeries] | None = None,
) -> Verdict:
    """The verdict from the compared step times (and the per-step series of the operators and
    kernels that changed most): docs/diff.md, "The verdict"."""
    noise_b, noise_n = _noise_pct(base_times), _noise_pct(new_times)
    mean_b = sum(base_times) / len(base_times) if base_times else 0.0
    mean_n = sum(new_times) / len(new_times) if new_times else 0.0
    delta_pct = _pct(mean_n - mean_b, mean_b) if base_times and new_times else None
    if delta_pct is None and not not_comparable:
        not_comparable = ["nothing to compare: no step time on a side"]
    if not_comparable:
        return Verdict(INCONCLUSIVE, tuple(not_comparable), delta_pct, threshold, noise_b, noise_n)
    assert delta_pct is not None
    interval = welch_log(base_times, new_times)
    if interval is None:  # one window a side (or a step of no duration): the threshold alone
        size = f"mean step time {delta_pct:+.2f} %"
        if abs(delta_pct) <= threshold:
            kind, why = NEUTRAL, f"{size}, within the ±{threshold:g} % threshold"
        else:
            kind = REGRESSION if delta_pct > 0 else IMPROVEMENT
            why = f"{size}, beyond the ±{threshold:g} % threshold"
        reason = (
            "fewer than two steps on a side: no interval, step-to-step noise unknown; "
            "the verdict is by the threshold alone"
            if len(base_times) < 2 or len(new_times) < 2
            else "a step of no duration: no interval; the verdict is by the threshold alone"
        )
        return Verdict(
            kind,
            (why, reason),
            delta_pct,
            threshold,
            noise_b,
            noise_n,
            decided_by="threshold",
            gate_low_pct=delta_pct,
            gate_high_pct=delta_pct,
        )

    tau = log_threshold(threshold)
    evidence = _evidence(parts or [], mean_b, mean_n)
    est, sign = interval.estimate, interval.significant()
    head = (
        f"step time {interval.change_pct:+.2f} % (geometric mean), "
        f"{100 * CONFIDENCE:g} % interval {_span((interval.low_pct, interval.high_pct))}; "
        f"{_steps_each(interval)}"
    )
    reasons = [head]
    gate = (interval.low_pct, interval.high_pct)
    decided_by = "step_time"
    kind = NEUTRAL
    if sign != 0 and abs(est) > tau:
        kind = REGRESSION if sign > 0 else IMPROVEMENT
        reasons[0] += (
            f": NEW is {'slower' if sign > 0 else 'faster'}, the estimate beyond the "
            f"±{threshold:g} % threshold"
        )
    else:
        # An operator decides when what it alone adds (or saves) is beyond the threshold, the
        # step times point the same way, and their interval does not contradict it.
        decisive = [
            e
            for e in evidence
            if e.implied is not None
            and est != 0.0
            and ((est > 0 and e.implied[1] > tau) or (est < 0 and e.implied[2] < -tau))
            and e.implied[1] <= interval.high
            and e.implied[2] >= interval.low
        ]
        if decisive:
            best = max(decisive, key=lambda e: abs(e.implied[1 if est > 0 else 2]))  # type: ignore[index]
            evidence = [replace(e, decisive=True) if e is best else e for e in evidence]
            kind = REGRESSION if est > 0 else IMPROVEMENT
            assert best.implied is not None
            gate = (pct(best.implied[1]), pct(best.implied[2]))
            decided_by = "operator"
            reasons[0] += ": not decided by the step times alone"
            reasons.append(
                f"decided by {_part_text(best)}; beyond the ±{threshold:g} % threshold even if "
                "the rest of the step did not change"
            )
        elif sign != 0:
            reasons[0] += f": a change, the estimate within the ±{threshold:g} % threshold"
        else:
            reasons[0] += ": no change beyond the step-to-step noise"
    settle = None
    if est > tau:
        wide = interval.low <= tau
    elif est < -tau:
        wide = interval.high >= -tau
    else:
        wide = interval.low < -tau or interval.high > tau
    if decided_by == "step_time" and wide:
        # The interval reaches across a threshold: say so, and how many steps would settle it.
        settle = steps_to_settle(interval, tau)
        if abs(est) <= tau:
            goal = f"within {pct(-tau):+.2f} % .. +{threshold:g} %"
        else:
            goal = f"above +{threshold:g} %" if est > 0 else f"below {pct(-tau):+.2f} %"
        if settle is not None:
            more = (
                f"about {settle:,} steps each would settle it ({goal}, at this noise and estimate)"
            )
        elif abs(abs(est) - tau) < 1e-9:
            more = "more steps alone may not settle it (the estimate is at the threshold)"
        else:
            more = f"more than {MAX_SETTLE:,} steps each would be needed to settle it ({goal})"
        reasons.append(
            f"the interval is wide for the ±{threshold:g} % threshold "
            f"(noise: BASE {noise_b:.1f} %, NEW {noise_n:.1f} %): {more}"
        )
    for e in evidence:  # the strongest other evidence, when the step times could not tell
        if kind == NEUTRAL and e.interval.significant() != 0 and e.kind == "operator":
            reasons.append(f"evidence short of a verdict: {_part_text(e)}")
            break
    return Verdict(
        kind,
        tuple(reasons),
        delta_pct,
        threshold,
        noise_b,
        noise_n,
        interval=interval,
        decided_by=decided_by,
        steps_to_settle=settle,
        evidence=tuple(evidence),
        gate_low_pct=gate[0],
        gate_high_pct=gate[1],
    )


def _device_names(session: TraceSession) -> list[str]:
    names = {str(d.get("name")) for d in device_properties(session.trace) if d.get("name")}
    return sorted(names)  # the types: a trace may list each of its GPUs


# -- the diff -------------------------------------------------------------------------------


# What a diff asks of a session, and nothing more (tests/test_diff.py checks that a diff computes
# no other result): the nesting before the steps, whose per-thread unions then need no sort.
PREPARED = ("nesting", "steps", "idle", "sync", "gpu_groups")
# The same as two plans for `TraceSession.compute_concurrently`: the nesting's chain on one
# thread, what needs no nesting on another.
PREPARE_PLANS = (
    ("classes", "cpu_groups", "nesting", "steps", "sync"),
    ("links", "idle", "gpu_groups"),
)


def prepare(session: TraceSession, names: tuple[str, ...] = PREPARED) -> None:
    """Compute what a diff asks of one trace (for a thread to do while the other trace loads).
    A failure is remembered by the session and reported when the diff asks for that result."""
    for name in names:
        try:
            getattr(session, name)
        except Exception:  # remembered: `diff_sessions` raises AnalysisFailed where it is needed
            pass


def prepare_concurrently(session: TraceSession) -> None:
    """`prepare`, on two threads where there are CPUs for them (PREPARE_PLANS)."""
    session.compute_concurrently(*PREPARE_PLANS)


def diff_sessions(
    base: TraceSession, new: TraceSession, options: DiffOptions | None = None
) -> TraceDiff:
    """Compare two traces (see the module docstring and docs/diff.md)."""
    options = options or DiffOptions()
    steps_b, steps_n = len(base.steps), len(new.steps)
    common = min(steps_b, steps_n)
    reasons: list[str] = []
    if common:
        chosen = (
            list(range(common)) if options.steps is None else _resolve_steps(options.steps, common)
        )
        if not chosen:
            reasons.append(f"--steps picks none of the {common} common steps")
    else:
        chosen = []
        if steps_b or steps_n:
            reasons.append(
                f"no common steps (BASE has {steps_b}, NEW {steps_n}): whole traces compared"
            )
        elif options.steps is not None:
            reasons.append("--steps picks none: neither trace has steps (whole traces compared)")
    whole = not common
    pairs: list[StepPair] = []
    if whole:
        bw, nw = _whole_window(base), _whole_window(new)
        pairs.append(StepPair(-1, -1, bw, nw, "whole trace", "whole trace", 0))
        mb, mn = _whole_metrics(base), _whole_metrics(new)
    else:
        sb, sn = base.steps, new.steps
        for i in chosen:
            pairs.append(
                StepPair(
                    i,
                    i,
                    (int(sb.start[i]), int(sb.end[i])),
                    (int(sn.start[i]), int(sn.end[i])),
                    base.trace.name_of(int(sb.rows[i])),
                    new.trace.name_of(int(sn.rows[i])),
                    i + 1,
                )
            )
        mb, mn = _step_metrics(base, chosen), _step_metrics(new, chosen)
    per_step = [
        [MetricDiff(key, mb[key][p], mn[key][p]) for key in METRIC_KEYS] for p in range(len(pairs))
    ]
    overall = [
        MetricDiff(key, _overall(mb[key], key), _overall(mn[key], key)) for key in METRIC_KEYS
    ]

    windows_b = None if whole else [p.base_window for p in pairs]
    windows_n = None if whole else [p.new_window for p in pairs]
    operators, op_overlap = _group_diffs(
        "operator",
        _aggregate(base, "operator", windows_b, options.templates),
        _aggregate(new, "operator", windows_n, options.templates),
    )
    kernels, k_overlap = _group_diffs(
        "kernel",
        _aggregate(base, "kernel", windows_b, options.templates),
        _aggregate(new, "kernel", windows_n, options.templates),
    )

    # Comparable?
    gpus_b, gpus_n = len(base.idle.devices), len(new.idle.devices)
    names_b, names_n = _device_names(base), _device_names(new)
    if gpus_b != gpus_n:
        reasons.append(f"different GPU count (BASE {gpus_b}, NEW {gpus_n})")
    if names_b and names_n and names_b != names_n:
        reasons.append(f"different GPU type (BASE {', '.join(names_b)}; NEW {', '.join(names_n)})")
    if kernels and k_overlap < MIN_KERNEL_OVERLAP:
        reasons.append(
            f"little kernel-name overlap ({100 * k_overlap:.0f} % of kernel names in both, "
            f"under {100 * MIN_KERNEL_OVERLAP:.0f} %)"
        )
    times_b = [m[0].base for m in per_step if m[0].base is not None]
    times_n = [m[0].new for m in per_step if m[0].new is not None]
    parts = [] if whole or reasons or not pairs else _parts(base, new, operators, kernels, pairs)
    verdict = _verdict(options.threshold_pct, times_b, times_n, reasons, parts)
    return TraceDiff(
        base=base,
        new=new,
        options=options,
        whole=whole,
        pairs=pairs,
        steps_base=steps_b,
        steps_new=steps_n,
        common_steps=common,
        overall=overall,
        per_step=per_step,
        operators=operators,
        kernels=kernels,
        kernel_overlap=k_overlap,
        operator_overlap=op_overlap,
        verdict=verdict,
        devices_base=names_b,
        devices_new=names_n,
    )


def metric_label(key: str) -> str:
    return next(label for k, label, _ in METRICS if k == key)


def metric_unit(key: str) -> str:
    return next(unit for k, _, unit in METRICS if k == key)


__all__: list[Any] = [
    "ALIGN_OPS",
    "METRICS",
    "VERDICTS",
    "DiffOptions",
    "GroupDiff",
    "MetricDiff",
    "StepPair",
    "StreamAlignment",
    "TraceDiff",
    "Evidence",
    "Verdict",
    "align_pair",
    "align_sequences",
    "diff_sessions",
    "myers",
    "normalise_name",
    "parse_step_pairs",
]
