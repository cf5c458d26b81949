"""The compile lens: did torch.compile (and CUDA/HIP graphs) do anything useful in this trace?

Everything here is read from event names and the existing analyses (nesting, links, idle,
steps); no Textual. docs/compile.md defines every number. The public API, stable for the
viewer and the summary:

- `compute_compile(session) -> CompileAnalysis` (the session's `compiled` result):
  - `regions`: every compiled-region CPU slice (`Region`: row, lane, start, end, kind, frame,
    compile_id, `label`), by start. Kinds: REGION_DYNAMO (`Torch-Compiled Region: F/C`),
    REGION_AOT_FORWARD (`CompiledFunction`), REGION_AOT_BACKWARD (`CompiledFunctionBackward`),
    REGION_FX_GRAPH (`## Call CompiledFxGraph ... ##`). `outer_regions()`: those not inside
    another region on their lane (what the timeline marks).
  - `on_gpu`, `total_ns`, `compiled_ns`, `share`: the share of kernel time (CPU-only traces:
    operator time) spent in compiled code.
  - `frames`: `FrameCompiles` per frame F (compile ids seen, calls); `recompiled_frames()`.
  - `eager_islands`: `EagerIsland` per operator name outside compiled code, most GPU time first.
  - `compiling`: `Compiling` (events inside the window that compile: `(dynamo_timed)`,
    `Lazy Function Loading`).
  - `guard_calls`, `guard_ns`: `TorchDynamo Cache Lookup` calls and their self time.
  - `launch`: `LaunchEconomy` (launch calls, graph launches, kernels, CPU time launching).
  - `inductor`: `InductorKernel` per distinct Inductor kernel name; `fusion_mix()` per kind.
  - `kernels`, `short_kernels`: all kernels and those under SHORT_KERNEL_NS.
  - `graphs`: `GraphLaunch` per graph launch call (its `operator_row`, kernels, span, gaps);
    `replay`: `Replay` (totals, graph captures inside the window and the `partial` notes:
    which numbers replay and capture make partial), None without graph launches or captures.
  - `steps`: `StepCompile` per ProfilerStep (the same numbers per step).
  - `likely_graph_breaks`: `GraphBreak` per step (or for the whole trace without steps)
    whose compiled regions come from more than one frame.
  - `in_compiled`: per trace row, the CPU slice is a region or inside one.
  Compile work (compile events and all below them) is left out of every kernel and operator
  number: it counts under `compiling` only.
- `compute_efficiency(session) -> Efficiency` (the session's `kernel_efficiency` result):
  achieved TFLOP/s and GB/s from `kernel_flop` / `kernel_num_gb` args, per kernel name and
  per operator, and the share of the device's peak memory bandwidth where PEAK_BANDWIDTH_GBS
  knows the device. It reads those args back from the file (only Inductor kernels' rows).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from kinetoscope.parser.model import Trace

from .intervals import Union, sorted_unique
from .steps import names_matching
from .units import fmt_duration, fmt_percent, plural, us

if TYPE_CHECKING:
    from .session import TraceSession

REGION_DYNAMO = "dynamo"
REGION_AOT_FORWARD = "aot_forward"
REGION_AOT_BACKWARD = "aot_backward"
REGION_FX_GRAPH = "fx_graph"

DYNAMO_REGION = re.compile(r"Torch-Compiled Region: (\d+)/(\d+)")
GUARD_NAME = "TorchDynamo Cache Lookup"
COMPILING_NAME = re.compile(r".*\(dynamo_timed\)|Lazy Function Loading")
# Inductor kernels: triton_<kind>_<fused ops>_<n> on the GPU, cpp_fused_<ops>_<n> on the CPU
# (recorded as graph_<g>_cpp_fused_<ops>_<n> with torch._inductor.config.cpp.enable_kernel_profile).
INDUCTOR_NAME = re.compile(
    r"triton_(poi|red|per|tem|for|spl|unk)_(\w*?)_?(\d+)|(?:graph_\d+_)?cpp_(\w*?)_?(\d+)"
)
INDUCTOR_KINDS = {
    "poi": "pointwise",
    "red": "reduction",
    "per": "persistent reduction",
    "tem": "template",
    "for": "foreach",
    "spl": "split scan",
    "unk": "unknown",
    "cpp": "cpp (CPU)",
}
GRAPH_LAUNCH = re.compile(r"(cuda|cu|hip)GraphLaunch")
SHORT_KERNEL_NS = 10_000
# Categories whose self time is "operator time" on CPU-only traces.
OPERATOR_CATEGORIES = frozenset({"cpu_op", "user_annotation"})

# Peak memory bandwidth in GB/s (10^9 bytes/s) by the exact `deviceProperties` name; the
# sources are named in docs/compile.md. Devices not listed get no share of peak.
PEAK_BANDWIDTH_GBS: dict[str, float] = {
    "NVIDIA H100 80GB HBM3": 3350.0,
    "NVIDIA H100 PCIe": 2000.0,
    "NVIDIA H200": 4800.0,
    "NVIDIA A100-SXM4-80GB": 2039.0,
    "NVIDIA A100-SXM4-40GB": 1555.0,
    "NVIDIA A100-PCIE-40GB": 1555.0,
    "NVIDIA A100 80GB PCIe": 1935.0,
    "Tesla V100-SXM2-16GB": 900.0,
    "Tesla V100-SXM2-32GB": 900.0,
    "NVIDIA L4": 300.0,
    "Tesla T4": 320.0,
    "AMD Instinct MI300X": 5300.0,
    "AMD Instinct MI250X": 3276.8,
}


@dataclass(frozen=True)
class Region:
    """One compiled-region CPU slice."""

    row: int
    lane: int
    start: int
    end: int
    kind: str  # REGION_*
    frame: int | None  # F of `Torch-Compiled Region: F/C`, else None
    compile_id: int | None  # C of it, else None

    @property
    def label(self) -> str:
        if self.frame is not None:
            return f"{self.frame}/{self.compile_id}"
        return self.kind


@dataclass(frozen=True)
class FrameCompiles:
    """One dynamo frame F: the compile ids C seen for it, and its region calls per id."""

    frame: int
    compile_ids: tuple[int, ...]  # ascending
    calls: tuple[int, ...]  # regions per compile id, same order
    first_rows: tuple[int, ...]  # the first region of each compile id

    @property
    def recompiled_here(self) -> bool:
        """More than one compile id inside the window: it recompiled while profiled."""
        return len(self.compile_ids) > 1


@dataclass(frozen=True)
class EagerIsland:
    """Operators of one name running outside compiled code (outermost `cpu_op` slices)."""

    name: str
    count: int
    cpu_ns: int  # Σ dur
    gpu_ns: int  # Σ dur of the GPU activities launched below them
    rows: tuple[int, ...]  # the longest instances first (at most 5)


@dataclass(frozen=True)
class Compiling:
    """Compilation inside the profiled window."""

    count: int
    ns: int  # union of the events' spans
    rows: tuple[int, ...]  # longest first (at most 5)


@dataclass(frozen=True)
class LaunchEconomy:
    launch_calls: int  # runtime calls linked to at least one kernel, plus every graph launch
    graph_launches: int
    kernels: int
    graph_kernels: int  # kernels linked to graph launches
    cpu_ns: int  # Σ dur of the launch calls

    @property
    def kernels_per_graph_launch(self) -> float | None:
        return self.graph_kernels / self.graph_launches if self.graph_launches else None


@dataclass(frozen=True)
class InductorKernel:
    """One distinct Inductor kernel name."""

    name: str
    kind: str  # key of INDUCTOR_KINDS
    fused: tuple[str, ...]  # the `_`-separated words between the kind and the number
    count: int
    total_ns: int
    short: int  # instances under SHORT_KERNEL_NS
    on_gpu: bool  # a GPU kernel (else a CPU slice: cpp_fused_*)


@dataclass(frozen=True)
class KindMix:
    kind: str
    names: int
    count: int
    total_ns: int
    short: int
    fused_mean: float  # mean fused words per distinct name


@dataclass(frozen=True)
class GraphLaunch:
    """One graph launch call and the GPU work that shares its correlation id."""

    row: int
    operator_row: int  # the CPU slice holding the launch call, -1 for none
    caller_row: int  # the nearest `cpu_op` / `user_annotation` slice above the call, -1: none
    region_row: int  # the innermost compiled region above the call, -1 for none
    device: int | None
    kernels: int  # GPU activities linked to it (kernels, memcpys, memsets)
    gpu_ns: int  # Σ their dur
    span_start: int | None
    span_end: int | None
    busy_ns: int  # union of their spans
    gap_ns: int  # span - busy: idle inside the replay, not the host's doing


@dataclass(frozen=True)
class Replay:
    launches: int
    kernels: int
    gpu_ns: int
    gap_ns: int  # Σ idle inside replays (GraphLaunch.gap_ns)
    host_wait_inside_ns: int  # of the spec's host_wait idle, the part inside replay spans
    idle_inside_ns: int  # of the spec's idle (any cause), the part inside replay spans
    captures: int  # graph captures inside the window (begin/end capture pairs)
    captured_launches: int  # launch calls inside those captures: nothing ran for them
    partial: tuple[str, ...]


@dataclass(frozen=True)
class StepCompile:
    row: int
    start: int
    end: int
    total_ns: int  # kernel (CPU-only: operator) time in the step
    compiled_ns: int
    eager_ns: int  # Σ dur of eager islands starting in the step
    regions: int
    frames: tuple[int, ...]
    guard_calls: int
    guard_ns: int
    compiling_ns: int
    launch_calls: int
    graph_launches: int
    kernels: int
    launch_cpu_ns: int
    graph_kernels: int = 0  # kernels of the step linked to a graph launch
    short_kernels: int = 0  # kernels of the step under SHORT_KERNEL_NS
    inductor_by_kind: tuple[tuple[str, int], ...] = ()  # (kind, Inductor kernels), kinds present

    @property
    def share(self) -> float | None:
        return self.compiled_ns / self.total_ns if self.total_ns else None

    @property
    def kernels_per_graph_launch(self) -> float | None:
        return self.graph_kernels / self.graph_launches if self.graph_launches else None


@dataclass(frozen=True)
class GraphBreak:
    """A step (or the whole trace, step_row -1) whose regions come from several frames."""

    step_row: int
    start: int
    end: int
    frames: tuple[int, ...]
    rows: tuple[int, ...]  # the first region of each frame


@dataclass(frozen=True)
class CompileAnalysis:
    regions: tuple[Region, ...]
    on_gpu: bool
    total_ns: int
    compiled_ns: int
    frames: tuple[FrameCompiles, ...]
    eager_islands: tuple[EagerIsland, ...]
    compiling: Compiling
    guard_calls: int
    guard_ns: int
    launch: LaunchEconomy
    inductor: tuple[InductorKernel, ...]
    kernels: int
    short_kernels: int
    graphs: tuple[GraphLaunch, ...]
    replay: Replay | None
    steps: tuple[StepCompile, ...]
    likely_graph_breaks: tuple[GraphBreak, ...]
    # Per row of the trace: the CPU slice is a compiled region or inside one.
    in_compiled: np.ndarray = field(repr=False)

    @property
    def share(self) -> float | None:
        return self.compiled_ns / self.total_ns if self.total_ns else None

    @property
    def has_compiled(self) -> bool:
        """Any compiled code at all: regions, Inductor kernels or compilation."""
        return bool(self.regions or self.inductor or self.compiling.count)

    def outer_regions(self) -> tuple[Region, ...]:
        """Regions not inside another region (on their lane)."""
        out: list[Region] = []
        reach: dict[int, int] = {}
        for region in self.regions:
            if region.start < reach.get(region.lane, -1) or (out and out[-1].row == region.row):
                continue
            reach[region.lane] = max(reach.get(region.lane, -1), region.end)
            out.append(region)
        return tuple(out)

    def recompiled_frames(self) -> tuple[FrameCompiles, ...]:
        return tuple(f for f in self.frames if f.recompiled_here)

    def fusion_mix(self) -> tuple[KindMix, ...]:
        """Inductor kernels by kind, in INDUCTOR_KINDS order (kinds present only)."""
        out = []
        for kind in INDUCTOR_KINDS:
            mine = [k for k in self.inductor if k.kind == kind]
            if not mine:
                continue
            out.append(
                KindMix(
                    kind=kind,
                    names=len(mine),
                    count=sum(k.count for k in mine),
                    total_ns=sum(k.total_ns for k in mine),
                    short=sum(k.short for k in mine),
                    fused_mean=sum(len(k.fused) for k in mine) / len(mine),
                )
            )
        return tuple(out)


def region_kind(name: str) -> tuple[str, int | None, int | None] | None:
    """(kind, frame, compile id) of a compiled-region name, or None."""
    match = DYNAMO_REGION.fullmatch(name)
    if match:
        return REGION_DYNAMO, int(match.group(1)), int(match.group(2))
    if name == "CompiledFunction":
        return REGION_AOT_FORWARD, None, None
    if name == "CompiledFunctionBackward":
        return REGION_AOT_BACKWARD, None, None
    if name.startswith("## Call CompiledFxGraph"):
        return REGION_FX_GRAPH, None, None
    return None


def inductor_kind(name: str) -> tuple[str, tuple[str, ...]] | None:
    """(kind, fused words) of an Inductor kernel name, or None."""
    match = INDUCTOR_NAME.fullmatch(name)
    if not match:
        return None
    if match.group(1):
        kind, body = match.group(1), match.group(2)
    else:
        kind, body = "cpp", match.group(4)
        if not body.startswith("fused"):
            return None
    body = body[len("fused") :] if body.startswith("fused") else body
    return kind, tuple(word for word in body.split("_") if word)


def _cat_mask(trace: Trace, cats: frozenset[str]) -> np.ndarray:
    return np.fromiter(
        (s[:64].lower() in cats for s in trace.strings), dtype=bool, count=len(trace.strings)
    )


def _in_window(times: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per time: the index of the window [start, end) holding it (windows by start, the last
    one that starts by it), or -1."""
    if not len(start):
        return np.full(len(times), -1, np.int64)
    slot = np.searchsorted(start, times, side="right") - 1
    ok = slot >= 0
    ok[ok] &= times[ok] < end[slot[ok]]
    return np.where(ok, slot, -1)


def _per_window(slot: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    keep = slot >= 0
    return np.bincount(slot[keep], weights=values[keep], minlength=n).astype(np.int64)


def compute_compile(session: TraceSession) -> CompileAnalysis:
    """The compile lens of the trace (the module docstring lists what it holds), made of the
    parts below in order: where compiled code and compile work are, the kernels that count,
    the compiled share, frames and recompiles, guards and compile events, eager islands,
    launches and graph replay, Inductor kernels, and the same numbers per step."""
    marks = _compiled_marks(session)
    kernels = _counted_kernels(session, marks)
    on_gpu = bool(session.classes.gpu.any())
    op_cats = _cat_mask(session.trace, OPERATOR_CATEGORIES)
    op_pos = _operator_positions(session, marks, op_cats)
    total_ns, compiled_ns = _compiled_share(session, marks, kernels, op_pos, on_gpu)
    guard_rows, guard_self = _guards(session)
    compiling_union, compiling = _compile_work(session.trace, marks.compiling_rows)
    eager_rows, eager_islands = _islands(session, marks, guard_rows)
    launches = _launches(session, marks, kernels, op_cats)
    inductor = _inductor(
        session.trace, session.classes, kernels.inductor_names, kernels.rows, on_gpu
    )
    steps, breaks = _per_step(
        session,
        marks,
        kernels,
        launches,
        _StepInputs(op_pos, on_gpu, eager_rows, guard_rows, guard_self, compiling_union),
    )
    return CompileAnalysis(
        regions=tuple(marks.regions),
        on_gpu=on_gpu,
        total_ns=total_ns,
        compiled_ns=compiled_ns,
        frames=_frame_compiles(marks.regions),
        eager_islands=eager_islands,
        compiling=compiling,
        guard_calls=len(guard_rows),
        guard_ns=int(guard_self.sum()),
        launch=launches.economy,
        inductor=inductor,
        kernels=len(kernels.rows),
        short_kernels=int((kernels.dur < SHORT_KERNEL_NS).sum()),
        graphs=launches.graphs,
        replay=launches.replay,
        steps=steps,
        likely_graph_breaks=breaks,
        in_compiled=marks.in_compiled,
    )


@dataclass(frozen=True)
class _Marks:
    """Where compiled code and compile work are. `regions` (by start) are the compiled-region
    CPU slices `region_rows`, at nesting positions `region_pos`; `inside_pos` (per nesting
    position) and `in_compiled` (per row): a region or below one. The compile events
    `compiling_rows` at `compiling_pos`, and what lies at or below them: `in_compiling_pos`
    (per position) and `in_compiling` (per row)."""

    regions: list[Region]
    region_rows: np.ndarray
    region_pos: np.ndarray
    inside_pos: np.ndarray
    in_compiled: np.ndarray
    compiling_rows: np.ndarray
    compiling_pos: np.ndarray
    in_compiling_pos: np.ndarray
    in_compiling: np.ndarray


def _compiled_marks(session: TraceSession) -> _Marks:
    """The compiled regions and what lies inside them; the compile events inside the window
    and everything below them (autotuning runs kernels there): compile work, neither compiled
    nor eager code."""
    trace = session.trace
    classes = session.classes
    nesting = session.nesting
    names = trace.name
    n_rows = len(trace)
    region_names = names_matching(trace, lambda s: region_kind(s) is not None)
    region_rows = np.flatnonzero(classes.cpu & region_names[names])
    region_rows = region_rows[np.argsort(trace.start[region_rows], kind="stable")]
    regions = []
    for row in region_rows.tolist():
        kind, frame, compile_id = region_kind(trace.name_of(row)) or ("", None, None)
        start = int(trace.start[row])
        regions.append(
            Region(
                row,
                int(trace.lane[row]),
                start,
                start + int(trace.dur[row]),
                kind,
                frame,
                compile_id,
            )
        )
    region_pos = nesting.position[region_rows].astype(np.int64)
    inside_pos = _covered(nesting, region_pos)
    in_compiled = np.zeros(n_rows, dtype=bool)
    in_compiled[nesting.order[inside_pos]] = True
    compiling_names = names_matching(trace, COMPILING_NAME.fullmatch)
    compiling_rows = np.flatnonzero(classes.cpu & compiling_names[names])
    compiling_pos = nesting.position[compiling_rows].astype(np.int64)
    in_compiling_pos = _covered(nesting, compiling_pos)
    in_compiling = np.zeros(n_rows, dtype=bool)
    in_compiling[nesting.order[in_compiling_pos]] = True
    return _Marks(
        regions,
        region_rows,
        region_pos,
        inside_pos,
        in_compiled,
        compiling_rows,
        compiling_pos,
        in_compiling_pos,
        in_compiling,
    )


@dataclass(frozen=True)
class _Kernels:
    """The kernels that count (those launched by compile work left out): their `rows`, the
    runtime call that launched each (`runtime`, where `linked`), `dur`, whether each is
    `compiled` (an Inductor name or launched from compiled code); `inductor_names`: per
    string id, an Inductor kernel name."""

    rows: np.ndarray
    runtime: np.ndarray
    linked: np.ndarray
    dur: np.ndarray
    compiled: np.ndarray
    inductor_names: np.ndarray


def _counted_kernels(session: TraceSession, marks: _Marks) -> _Kernels:
    trace = session.trace
    names = trace.name
    inductor_names = names_matching(trace, lambda s: inductor_kind(s) is not None)
    kernel_rows = np.flatnonzero(session.classes.kernel)
    k_runtime = _runtime_of(session.links, kernel_rows)
    linked = k_runtime >= 0
    # Kernels launched by compile work (autotuning) are left out of everything below.
    k_work = np.ones(len(kernel_rows), dtype=bool)
    k_work[linked] = ~marks.in_compiling[k_runtime[linked]]
    kernel_rows, k_runtime, linked = kernel_rows[k_work], k_runtime[k_work], linked[k_work]
    k_compiled = inductor_names[names[kernel_rows]].copy()
    k_compiled[linked] |= marks.in_compiled[k_runtime[linked]]
    return _Kernels(
        kernel_rows, k_runtime, linked, trace.dur[kernel_rows], k_compiled, inductor_names
    )


def _operator_positions(session: TraceSession, marks: _Marks, op_cats: np.ndarray) -> np.ndarray:
    """The nesting positions of the operators that count on a CPU-only trace: operator
    categories, no ProfilerStep, no compile work."""
    trace = session.trace
    order = session.nesting.order
    is_step = np.zeros(len(trace), dtype=bool)
    is_step[session.steps.rows] = True
    return np.flatnonzero(op_cats[trace.cat[order]] & ~is_step[order] & ~marks.in_compiling_pos)


def _compiled_share(
    session: TraceSession, marks: _Marks, kernels: _Kernels, op_pos: np.ndarray, on_gpu: bool
) -> tuple[int, int]:
    """(total, compiled) ns: kernel time, or without GPU work the operators' self time."""
    if on_gpu:
        return int(kernels.dur.sum()), int(kernels.dur[kernels.compiled].sum())
    self_time = session.nesting.self_time[op_pos]
    return int(self_time.sum()), int(self_time[marks.inside_pos[op_pos]].sum())


def _frame_compiles(regions: list[Region]) -> tuple[FrameCompiles, ...]:
    """Frames and their recompiles: the compile ids each frame's regions name."""
    by_frame: dict[int, dict[int, list[int]]] = {}
    for region in regions:
        if region.frame is not None and region.compile_id is not None:
            by_frame.setdefault(region.frame, {}).setdefault(region.compile_id, []).append(
                region.row
            )
    return tuple(
        FrameCompiles(
            frame=f,
            compile_ids=tuple(sorted(ids)),
            calls=tuple(len(ids[c]) for c in sorted(ids)),
            first_rows=tuple(ids[c][0] for c in sorted(ids)),
        )
        for f, ids in sorted(by_frame.items())
    )


def _guards(session: TraceSession) -> tuple[np.ndarray, np.ndarray]:
    """The guard (cache lookup) CPU slices and their self time."""
    trace = session.trace
    nesting = session.nesting
    guard_id = trace.string_id(GUARD_NAME)
    guard_rows = (
        np.flatnonzero(session.classes.cpu & (trace.name == guard_id))
        if guard_id >= 0
        else np.zeros(0, np.int64)
    )
    return guard_rows, nesting.self_time[nesting.position[guard_rows]].astype(np.int64)


def _compile_work(trace: Trace, compiling_rows: np.ndarray) -> tuple[Union, Compiling]:
    """Compilation in the window: the union of the compile events' spans, and the totals."""
    union = Union.of(
        trace.start[compiling_rows], trace.start[compiling_rows] + trace.dur[compiling_rows]
    )
    return union, Compiling(
        count=len(compiling_rows), ns=union.total, rows=_longest(trace, compiling_rows, 5)
    )


def _islands(
    session: TraceSession, marks: _Marks, guard_rows: np.ndarray
) -> tuple[np.ndarray, tuple[EagerIsland, ...]]:
    """The eager islands' rows and the islands by name; none without compiled regions."""
    if not marks.regions:
        return np.zeros(0, np.int64), ()
    markers = np.concatenate(
        (
            marks.region_pos,
            marks.compiling_pos,
            session.nesting.position[guard_rows].astype(np.int64),
        )
    )
    return _eager_islands(session, marks.in_compiled | marks.in_compiling, np.unique(markers))


@dataclass(frozen=True)
class _Launches:
    """The launch calls (`rows`: each kernel's launcher and every graph launch), the graph
    launch calls (`graph_rows`), which counted kernels a graph launched (`is_graph_kernel`),
    and what they add up to."""

    rows: np.ndarray
    graph_rows: np.ndarray
    is_graph_kernel: np.ndarray
    economy: LaunchEconomy
    graphs: tuple[GraphLaunch, ...]
    replay: Replay | None


def _launches(
    session: TraceSession, marks: _Marks, kernels: _Kernels, op_cats: np.ndarray
) -> _Launches:
    """Launches and graph replay."""
    trace = session.trace
    graph_names = names_matching(trace, GRAPH_LAUNCH.match)
    graph_rows = np.flatnonzero(session.classes.runtime & graph_names[trace.name])
    launch_rows = sorted_unique(
        np.concatenate((kernels.runtime[kernels.linked], graph_rows))
    ).astype(np.int64)
    is_graph_kernel = np.isin(kernels.runtime, graph_rows) & kernels.linked
    economy = LaunchEconomy(
        launch_calls=len(launch_rows),
        graph_launches=len(graph_rows),
        kernels=len(kernels.rows),
        graph_kernels=int(is_graph_kernel.sum()),
        cpu_ns=int(trace.dur[launch_rows].sum()),
    )
    is_region = np.zeros(len(trace), dtype=bool)
    is_region[marks.region_rows] = True
    graphs = tuple(
        _graph_launch(session, int(row), is_region, op_cats) for row in graph_rows.tolist()
    )
    replay = _replay(session, graphs, marks.in_compiled, int(kernels.dur.sum()))
    return _Launches(launch_rows, graph_rows, is_graph_kernel, economy, graphs, replay)


@dataclass(frozen=True)
class _StepInputs:
    """What the per-step numbers need besides the marks, the kernels and the launches."""

    op_pos: np.ndarray
    on_gpu: bool
    eager_rows: np.ndarray
    guard_rows: np.ndarray
    guard_self: np.ndarray
    compiling_union: Union


def _per_step(
    session: TraceSession,
    marks: _Marks,
    kernels: _Kernels,
    launches: _Launches,
    inputs: _StepInputs,
) -> tuple[tuple[StepCompile, ...], tuple[GraphBreak, ...]]:
    """The whole trace's numbers per ProfilerStep, and the likely graph breaks: the steps (or,
    without steps, the whole trace) whose compiled regions come from more than one frame."""
    steps = session.steps
    n_steps = len(steps)
    s_start, s_end = steps.start, steps.end
    numbers = _step_numbers(session, marks, kernels, launches, inputs)
    kinds, step_kinds = _inductor_kinds_per_step(session, kernels)
    r_slot = _in_window(session.trace.start[marks.region_rows], s_start, s_end)
    step_list = []
    breaks = []
    for i in range(n_steps):
        mine = [marks.regions[j] for j in np.flatnonzero(r_slot == i).tolist()]
        step_frames = _frames_of(mine)
        step_list.append(
            StepCompile(
                row=int(steps.rows[i]),
                start=int(s_start[i]),
                end=int(s_end[i]),
                regions=sum(1 for r in mine if r.kind == REGION_DYNAMO),
                frames=tuple(step_frames),
                inductor_by_kind=tuple(
                    (kinds[k], int(step_kinds[i, k])) for k in np.flatnonzero(step_kinds[i])
                ),
                **{name: int(values[i]) for name, values in numbers.items()},
            )
        )
        if len(step_frames) > 1:
            breaks.append(
                GraphBreak(
                    int(steps.rows[i]),
                    int(s_start[i]),
                    int(s_end[i]),
                    tuple(step_frames),
                    tuple(step_frames.values()),
                )
            )
    if not n_steps:
        whole = _frames_of(marks.regions)
        if len(whole) > 1:
            start = min(r.start for r in marks.regions)
            end = max(r.end for r in marks.regions)
            breaks.append(GraphBreak(-1, start, end, tuple(whole), tuple(whole.values())))
    return tuple(step_list), tuple(breaks)


def _step_numbers(
    session: TraceSession,
    marks: _Marks,
    kernels: _Kernels,
    launches: _Launches,
    inputs: _StepInputs,
) -> dict[str, np.ndarray]:
    """StepCompile's counts and times, one array each (a value per step), by field name."""
    trace = session.trace
    nesting = session.nesting
    steps = session.steps
    n_steps = len(steps)

    def slot_of(rows: np.ndarray) -> np.ndarray:
        return _in_window(trace.start[rows], steps.start, steps.end)

    def per_step(slot: np.ndarray, values: np.ndarray) -> np.ndarray:
        return _per_window(slot, values, n_steps)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.int64)

    k_slot = slot_of(kernels.rows)
    k_dur = kernels.dur
    if inputs.on_gpu:
        total = per_step(k_slot, k_dur)
        compiled = per_step(k_slot, np.where(kernels.compiled, k_dur, 0))
    else:
        op_pos = inputs.op_pos
        o_slot = slot_of(nesting.order[op_pos])
        self_time = nesting.self_time[op_pos]
        total = per_step(o_slot, self_time)
        compiled = per_step(o_slot, np.where(marks.inside_pos[op_pos], self_time, 0))
    g_slot = slot_of(inputs.guard_rows)
    l_slot = slot_of(launches.rows)
    return {
        "total_ns": total,
        "compiled_ns": compiled,
        "eager_ns": per_step(slot_of(inputs.eager_rows), trace.dur[inputs.eager_rows]),
        "guard_calls": per_step(g_slot, ones(len(inputs.guard_rows))),
        "guard_ns": per_step(g_slot, inputs.guard_self),
        "compiling_ns": (
            inputs.compiling_union.covered(steps.start, steps.end)
            if n_steps
            else np.zeros(0, np.int64)
        ),
        "launch_calls": per_step(l_slot, ones(len(launches.rows))),
        "graph_launches": per_step(slot_of(launches.graph_rows), ones(len(launches.graph_rows))),
        "graph_kernels": per_step(k_slot, launches.is_graph_kernel.astype(np.int64)),
        "kernels": per_step(k_slot, ones(len(kernels.rows))),
        "launch_cpu_ns": per_step(l_slot, trace.dur[launches.rows]),
        # The fusion mix per step: kernels under SHORT_KERNEL_NS (and Inductor kernels by
        # kind: _inductor_kinds_per_step).
        "short_kernels": per_step(k_slot, (k_dur < SHORT_KERNEL_NS).astype(np.int64)),
    }


def _inductor_kinds_per_step(
    session: TraceSession, kernels: _Kernels
) -> tuple[list[str], np.ndarray]:
    """The fusion mix per step: Inductor kernels by kind (GPU kernels named triton_*, CPU
    cpp_fused_* slices; as `_inductor` counts them), a count per (step, kind)."""
    trace = session.trace
    names = trace.name
    inductor_names = kernels.inductor_names
    kinds = list(INDUCTOR_KINDS)
    ind_cpu = np.flatnonzero(session.classes.cpu & inductor_names[names])
    ind_rows = np.concatenate([kernels.rows[inductor_names[names[kernels.rows]]], ind_cpu])
    # Per distinct name, then looked up per row: Python works per name, not per kernel.
    name_ids, inverse = np.unique(names[ind_rows], return_inverse=True)
    inverse = inverse.reshape(-1)
    kind_of_name = np.array(
        [
            kinds.index((inductor_kind(trace.strings[name_id]) or ("unk", ()))[0])
            for name_id in name_ids.tolist()
        ],
        dtype=np.int64,
    )
    launch_name = np.array(
        [trace.strings[name_id].startswith("triton_") for name_id in name_ids.tolist()],
        dtype=bool,
    )
    launch_event = np.zeros(len(ind_rows), dtype=bool)  # CPU slices named triton_*: launches
    launch_event[len(ind_rows) - len(ind_cpu) :] = launch_name[
        inverse[len(ind_rows) - len(ind_cpu) :]
    ]
    ind_rows = ind_rows[~launch_event]
    ind_kind = kind_of_name[inverse[~launch_event]]
    steps = session.steps
    ind_slot = _in_window(trace.start[ind_rows], steps.start, steps.end)
    step_kinds = np.zeros((len(steps), len(kinds)), dtype=np.int64)
    placed = ind_slot >= 0
    np.add.at(step_kinds, (ind_slot[placed], ind_kind[placed]), 1)
    return kinds, step_kinds


def _runtime_of(links: Any, rows: np.ndarray) -> np.ndarray:
    """The linked runtime call of each GPU activity row (ascending rows), -1 for none."""
    return links.gpu_runtime[np.searchsorted(links.gpu_rows, rows)].astype(np.int64)


def _frames_of(regions: list[Region]) -> dict[int, int]:
    """Frame -> its first region's row, for the dynamo regions given (by start)."""
    out: dict[int, int] = {}
    for region in regions:
        if region.frame is not None and region.frame not in out:
            out[region.frame] = region.row
    return dict(sorted(out.items()))


def _longest(trace: Trace, rows: np.ndarray, limit: int) -> tuple[int, ...]:
    """The `limit` longest of `rows`, longest first (ties: lower row first), in one sort."""
    rows = np.asarray(rows, dtype=np.int64)
    ranked = rows[np.lexsort((rows, -trace.dur[rows].astype(np.int64)))[:limit]]
    return tuple(ranked.tolist())


def _covered(nesting: Any, positions: np.ndarray) -> np.ndarray:
    """Per position of the nesting: is it one of `positions` or below one of them."""
    mark = np.zeros(len(nesting.order) + 1, dtype=np.int64)
    np.add.at(mark, positions, 1)
    np.add.at(mark, nesting.subtree_stop[positions].astype(np.int64), -1)
    return np.cumsum(mark[:-1]) > 0


def _eager_islands(
    session: TraceSession, excluded: np.ndarray, markers: np.ndarray
) -> tuple[np.ndarray, tuple[EagerIsland, ...]]:
    """Eager islands by name: the `cpu_op` slices that are not `excluded` (compiled code or
    compile work, per row), are no marker (a region, compile event or guard: positions,
    ascending) and hold none below them, and have no such slice above them."""
    from .operators import gpu_launched_per_position

    trace = session.trace
    nesting = session.nesting
    order = nesting.order
    cpu_op = _cat_mask(trace, frozenset({"cpu_op"}))
    positions = np.arange(len(order))
    stop = nesting.subtree_stop.astype(np.int64)
    holds_marker = np.searchsorted(markers, stop, side="left") > np.searchsorted(
        markers, positions, side="left"
    )
    candidate = cpu_op[trace.cat[order]] & ~excluded[order] & ~holds_marker
    candidate_pos = np.flatnonzero(candidate)
    below = np.zeros(len(order) + 1, dtype=np.int64)
    np.add.at(below, candidate_pos + 1, 1)
    np.add.at(below, stop[candidate_pos], -1)
    under_candidate = np.cumsum(below[:-1]) > 0
    island_pos = np.flatnonzero(candidate & ~under_candidate)
    rows = order[island_pos]
    if not len(rows):
        return rows, ()
    launched = gpu_launched_per_position(nesting, session.links, trace)
    prefix = np.concatenate(([0], np.cumsum(launched)))
    gpu = prefix[nesting.subtree_stop[island_pos].astype(np.int64)] - prefix[island_pos]
    # Grouped by name with one sort (names in order of first appearance, each one's islands
    # in order): Python works per name, not per island.
    names, first, inverse = np.unique(trace.name[rows], return_index=True, return_inverse=True)
    by_name = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.searchsorted(inverse.reshape(-1)[by_name], np.arange(len(names) + 1))
    islands = []
    for k in np.argsort(first, kind="stable").tolist():
        idx = by_name[bounds[k] : bounds[k + 1]]
        islands.append(
            EagerIsland(
                name=trace.strings[int(names[k])],
                count=len(idx),
                cpu_ns=int(trace.dur[rows[idx]].sum()),
                gpu_ns=int(gpu[idx].sum()),
                rows=_longest(trace, rows[idx], 5),
            )
        )
    islands.sort(key=lambda e: (-e.gpu_ns, -e.cpu_ns, e.name))
    return rows, tuple(islands)


def _graph_launch(
    session: TraceSession, row: int, is_region: np.ndarray, op_cats: np.ndarray
) -> GraphLaunch:
    trace = session.trace
    caller = region = -1
    above = int(session.nesting.parent[row])
    while above >= 0 and (caller < 0 or region < 0):
        if caller < 0 and op_cats[trace.cat[above]]:
            caller = above
        if region < 0 and is_region[above]:
            region = above
        above = int(session.nesting.parent[above])
    gpu = session.links.gpu_of(row)
    starts, ends = trace.start[gpu], trace.start[gpu] + trace.dur[gpu]
    union = Union.of(starts, ends)
    window = union.window if len(gpu) else None
    devices = np.unique(trace.device[gpu])
    busy = union.total
    return GraphLaunch(
        row=row,
        operator_row=int(session.nesting.parent[row]),
        caller_row=caller,
        region_row=region,
        device=int(devices[0]) if len(devices) == 1 else None,
        kernels=len(gpu),
        gpu_ns=int(trace.dur[gpu].sum()),
        span_start=int(window[0]) if window else None,
        span_end=int(window[1]) if window else None,
        busy_ns=busy,
        gap_ns=(window[1] - window[0] - busy) if window else 0,
    )


CAPTURE_BEGIN = re.compile(r"(cuda|cu|hip)StreamBeginCapture")
CAPTURE_END = re.compile(r"(cuda|cu|hip)StreamEndCapture")
LAUNCH_NAME = re.compile(r"(cuda|cu|hip)\w*Launch")


def _captures(session: TraceSession) -> tuple[int, int]:
    """(captures, launch calls inside them): per lane, each begin-capture call is paired with
    the next end-capture call; launch calls (runtime calls named `…Launch…`) between the two
    were recorded into a graph, not run."""
    trace = session.trace
    runtime = np.flatnonzero(session.classes.runtime)
    names = trace.name[runtime]
    begin = names_matching(trace, CAPTURE_BEGIN.match)[names]
    end = names_matching(trace, CAPTURE_END.match)[names]
    if not begin.any():
        return 0, 0
    launch = names_matching(trace, LAUNCH_NAME.match)[names]
    captures = captured = 0
    for lane in np.unique(trace.lane[runtime[begin]]).tolist():
        mask = trace.lane[runtime] == lane
        order = np.argsort(trace.start[runtime[mask]], kind="stable")
        b, e, ln = begin[mask][order], end[mask][order], launch[mask][order]
        open_at = -1
        for i in np.flatnonzero(b | e).tolist():
            if b[i] and open_at < 0:
                open_at = i
            elif e[i] and open_at >= 0:
                captures += 1
                captured += int(ln[open_at + 1 : i].sum())
                open_at = -1
    return captures, captured


def _replay(
    session: TraceSession,
    graphs: tuple[GraphLaunch, ...],
    in_compiled: np.ndarray,
    kernel_ns: int,
) -> Replay | None:
    """Graph replay and capture inside the window, with the notes on what they make partial;
    None when there is neither."""
    from .idle import HOST_WAIT

    captures, captured = _captures(session)
    if not graphs and not captures:
        return None
    gaps = session.idle.gaps
    host_wait_inside = idle_inside = 0
    for device in sorted({g.device for g in graphs if g.device is not None}):
        spans = [g for g in graphs if g.device == device and g.span_start is not None]
        union = Union.of(
            np.array([g.span_start for g in spans], np.int64),
            np.array([g.span_end for g in spans], np.int64),
        )
        mine = gaps.device == device
        covered = union.covered(gaps.start[mine], gaps.end[mine])
        idle_inside += int(covered.sum())
        host_wait_inside += int(covered[gaps.cause[mine] == HOST_WAIT].sum())
    launches = len(graphs)
    kernels = sum(g.kernels for g in graphs)
    gpu_ns = sum(g.gpu_ns for g in graphs)
    gap_ns = sum(g.gap_ns for g in graphs)
    partial = []
    if launches:
        partial += [
            f"operators: the {plural(kernels, 'GPU activity', 'GPU activities')} of "
            f"{plural(launches, 'graph launch', 'graph launches')} count under the operator "
            "holding each launch call (gpu_self_us / gpu_total_us), not under the operators "
            "that were captured",
            "kernels: a replayed kernel has no CPU operator, input shapes or stack of its own",
            "launch economy: one graph launch call stands for all the kernels it replays",
        ]
    if idle_inside:
        partial.append(
            "gpu.idle_by_cause / idle_gaps: idle inside graph replays counts as "
            f"{'host_wait' if host_wait_inside else 'kernel_wait or other'} although no host "
            f"call is involved ({fmt_duration(idle_inside)} inside replays, "
            f"{fmt_duration(host_wait_inside)} of it host_wait)"
        )
    outside = [g for g in graphs if not in_compiled[g.row]]
    if outside and kernel_ns:
        replayed = sum(g.gpu_ns for g in outside)
        partial.append(
            f"compiled share: {len(outside):,} of {plural(launches, 'graph launch', 'graph launches')} "
            "ran outside any compiled region, so their replayed kernels count as compiled only "
            f"where Inductor named them ({fmt_percent(replayed / kernel_ns)} of kernel time is "
            "replayed there; a graph may hold compiled code the trace cannot name)"
        )
    if captures:
        partial.append(
            f"graph capture inside the window ({plural(captures, 'capture')}): the "
            f"{plural(captured, 'launch call')} made while capturing recorded kernels into a "
            "graph and ran nothing, so the kernels, compiled share, GPU busy time and launch "
            "economy miss them"
        )
    return Replay(
        launches=launches,
        kernels=kernels,
        gpu_ns=gpu_ns,
        gap_ns=gap_ns,
        host_wait_inside_ns=host_wait_inside,
        idle_inside_ns=idle_inside,
        captures=captures,
        captured_launches=captured,
        partial=tuple(partial),
    )


def _inductor(
    trace: Trace,
    classes: Any,
    inductor_names: np.ndarray,
    kernel_rows: np.ndarray,
    on_gpu: bool,
) -> tuple[InductorKernel, ...]:
    """Inductor kernels by name: GPU kernels named triton_*, and on the CPU the cpp_fused_*
    slices (CPU slices named triton_* are the GPU kernels' launch events, not counted)."""
    gpu_rows = kernel_rows[inductor_names[trace.name[kernel_rows]]]
    cpu_rows = np.flatnonzero(classes.cpu & inductor_names[trace.name])
    name_ids, inverse = np.unique(trace.name[cpu_rows], return_inverse=True)
    cpp = np.array(
        [not trace.strings[n].startswith("triton_") for n in name_ids.tolist()], dtype=bool
    )
    cpu_rows = cpu_rows[cpp[inverse.reshape(-1)]]
    out = []
    for rows, gpu in ((gpu_rows, True), (cpu_rows, False)):
        names, inverse = np.unique(trace.name[rows], return_inverse=True)
        inverse = inverse.reshape(-1)
        by_name = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[by_name], np.arange(len(names) + 1))
        dur = trace.dur[rows][by_name]
        for i, name_id in enumerate(names.tolist()):
            mine = dur[bounds[i] : bounds[i + 1]]
            name = trace.strings[name_id]
            kind, fused = inductor_kind(name) or ("unk", ())
            out.append(
                InductorKernel(
                    name=name,
                    kind=kind,
                    fused=fused,
                    count=len(mine),
                    total_ns=int(mine.sum()),
                    short=int((mine < SHORT_KERNEL_NS).sum()),
                    on_gpu=gpu,
                )
            )
    out.sort(key=lambda k: (-k.total_ns, k.name))
    del on_gpu
    return tuple(out)


# -- kernel efficiency --------------------------------------------------------------------------


@dataclass(frozen=True)
class Achieved:
    """Kernels (by name or by operator) that carry kernel_flop / kernel_num_gb."""

    name: str
    count: int
    dur_ns: int  # Σ dur of the instances with the args
    flop: float | None  # Σ kernel_flop (None: no instance had it)
    gb: float | None  # Σ kernel_num_gb
    peak_gbs: float | None  # the device's peak bandwidth when known

    @property
    def tflops(self) -> float | None:
        return self.flop / self.dur_ns / 1e3 if self.flop is not None and self.dur_ns else None

    @property
    def gbs(self) -> float | None:
        return self.gb / (self.dur_ns * 1e-9) if self.gb is not None and self.dur_ns else None

    @property
    def bandwidth_share(self) -> float | None:
        gbs = self.gbs
        return gbs / self.peak_gbs if gbs is not None and self.peak_gbs else None


@dataclass(frozen=True)
class Efficiency:
    kernels: tuple[Achieved, ...]  # per kernel name, most time first
    operators: tuple[Achieved, ...]  # per operator (the CPU slice holding the launch call)
    rows_read: int  # events whose args were read back
    readable: bool  # the file could be read back (False: no numbers could be had)


def device_peak_gbs(trace: Trace, device: int) -> float | None:
    from .memory import device_properties

    for entry in device_properties(trace):
        if entry.get("id") == device:
            return PEAK_BANDWIDTH_GBS.get(str(entry.get("name")))
    return None


def _number(value: Any) -> float | None:
    """A finite, non-negative JSON number as a float; None for anything else (booleans,
    strings, NaN, numbers too large for a float)."""
    if type(value) not in (int, float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


EFFICIENCY_SAMPLE = 256


def compute_efficiency(session: TraceSession) -> Efficiency:
    """Achieved throughput from `kernel_flop` / `kernel_num_gb`, read from each Inductor GPU
    kernel's launch event (the CPU slice of the kernel's name above its launch call), or from
    the kernel itself when it has none. Inductor sets those args for a whole process
    (config.benchmark_kernel, profile_bandwidth): when none of the first EFFICIENCY_SAMPLE
    events read carry either, the rest are not read."""
    from kinetoscope.parser.access import read_events

    trace = session.trace
    classes = session.classes
    nesting = session.nesting
    links = session.links
    inductor_names = names_matching(trace, lambda s: inductor_kind(s) is not None)
    kernel_rows = np.flatnonzero(classes.kernel)
    gpu = kernel_rows[inductor_names[trace.name[kernel_rows]]]
    runtime = _runtime_of(links, gpu)
    # The launch event: the nearest ancestor of the launch call with the kernel's name (a few
    # levels up at most: the launch call sits right below it).
    launch = np.full(len(gpu), -1, dtype=np.int64)
    cursor = np.where(runtime >= 0, nesting.parent[np.maximum(runtime, 0)], -1).astype(np.int64)
    for _ in range(8):
        open_ = (launch < 0) & (cursor >= 0)
        if not open_.any():
            break
        same = open_.copy()
        same[open_] = trace.name[cursor[open_]] == trace.name[gpu[open_]]
        launch[same] = cursor[same]
        step = open_ & ~same
        cursor[step] = nesting.parent[cursor[step]]
        cursor[~step] = -1
    source = np.where(launch >= 0, launch, gpu)
    # Inductor writes kernel_num_gb whenever it writes kernel_flop: runs without it are skipped.
    by_file = np.sort(source)
    events = read_events(trace, by_file[:EFFICIENCY_SAMPLE], needle=b"kernel_num_gb")
    flop = np.full(len(gpu), np.nan)
    gb = np.full(len(gpu), np.nan)

    def fill(found: dict[int, dict[str, Any]]) -> None:
        """Each kernel's numbers from its source's args (a launch event that launched several
        kernels gives each of them its args)."""
        if not found:
            return
        for i, row in enumerate(source.tolist()):
            event = found.get(row)
            args = event.get("args") if event is not None else None
            if not isinstance(args, dict):
                continue
            f, g = _number(args.get("kernel_flop")), _number(args.get("kernel_num_gb"))
            flop[i] = np.nan if f is None else f
            gb[i] = np.nan if g is None else g

    fill(events)
    if len(by_file) > EFFICIENCY_SAMPLE and (~np.isnan(flop) | ~np.isnan(gb)).any():
        rest = read_events(trace, by_file[EFFICIENCY_SAMPLE:], needle=b"kernel_num_gb")
        fill(rest)
        events = {**events, **rest}
    has = ~np.isnan(flop) | ~np.isnan(gb)
    below = np.where(launch >= 0, launch, runtime)
    holder = np.where(below >= 0, nesting.parent[np.maximum(below, 0)], -1)
    holder_name = np.where(holder >= 0, trace.name[np.maximum(holder, 0)], -1)
    peaks: dict[int, float | None] = {}

    def peak(device: int) -> float | None:
        if device not in peaks:
            peaks[device] = device_peak_gbs(trace, device)
        return peaks[device]

    def table(keys: np.ndarray) -> tuple[Achieved, ...]:
        rows = np.flatnonzero(has)
        if not len(rows):
            return ()
        ids, inverse = np.unique(keys[rows], return_inverse=True)
        inverse = inverse.reshape(-1)
        n = len(ids)
        dur = np.bincount(inverse, weights=trace.dur[gpu[rows]], minlength=n)
        f, g = flop[rows], gb[rows]
        flop_sum = np.bincount(inverse, weights=np.nan_to_num(f), minlength=n)
        gb_sum = np.bincount(inverse, weights=np.nan_to_num(g), minlength=n)
        flop_n = np.bincount(inverse, weights=~np.isnan(f), minlength=n)
        gb_n = np.bincount(inverse, weights=~np.isnan(g), minlength=n)
        count = np.bincount(inverse, minlength=n)
        first = np.full(n, len(rows), dtype=np.int64)
        np.minimum.at(first, inverse, np.arange(len(rows)))
        out = [
            Achieved(
                name=trace.strings[int(key)] if key >= 0 else "(no operator)",
                count=int(count[i]),
                dur_ns=int(dur[i]),
                flop=float(flop_sum[i]) if flop_n[i] else None,
                gb=float(gb_sum[i]) if gb_n[i] else None,
                peak_gbs=peak(int(trace.device[gpu[rows[first[i]]]])),
            )
            for i, key in enumerate(ids.tolist())
        ]
        out.sort(key=lambda a: (-a.dur_ns, a.name))
        return tuple(out)

    return Efficiency(
        kernels=table(trace.name[gpu].astype(np.int64)),
        operators=table(holder_name.astype(np.int64)),
        rows_read=len(events),
        readable=trace.chunks is not None,
    )


# -- the summary's `compile` section ------------------------------------------------------------

TOP_ISLANDS = 20
TOP_INDUCTOR = 20
TOP_GRAPHS = 10
TOP_EFFICIENCY = 20


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _achieved_json(entry: Achieved) -> dict[str, Any]:
    return {
        "name": entry.name,
        "count": entry.count,
        "dur_us": us(entry.dur_ns),
        "tflops": _round(entry.tflops),
        "gbs": _round(entry.gbs),
        "peak_gbs": entry.peak_gbs,
        "bandwidth_share": _round(entry.bandwidth_share, 4),
    }


def compile_section(session: TraceSession) -> dict[str, Any]:
    """Extension key `compile` of the summary (docs/compile.md defines every field)."""
    trace = session.trace
    c = session.compiled
    eff = session.kernel_efficiency
    kinds: dict[str, int] = {}
    for region in c.regions:
        kinds[region.kind] = kinds.get(region.kind, 0) + 1
    replay = c.replay
    return {
        "has_compiled": c.has_compiled,
        "measured_on": "kernels" if c.on_gpu else "operators",
        "total_us": us(c.total_ns),
        "compiled_us": us(c.compiled_ns),
        "compiled_share": _share(c.compiled_ns, c.total_ns),
        "regions": kinds,
        "frames": [
            {"frame": f.frame, "compile_ids": list(f.compile_ids), "calls": list(f.calls)}
            for f in c.frames
        ],
        "recompiled_frames": [f.frame for f in c.recompiled_frames()],
        "likely_graph_breaks": [
            {
                "step": trace.name_of(b.step_row) if b.step_row >= 0 else None,
                "start_us": us(b.start),
                "dur_us": us(b.end - b.start),
                "frames": list(b.frames),
            }
            for b in c.likely_graph_breaks
        ],
        "compiling": {
            "events": c.compiling.count,
            "us": us(c.compiling.ns),
            "longest": [trace.name_of(r) for r in c.compiling.rows],
        },
        "guard": {
            "calls": c.guard_calls,
            "self_us": us(c.guard_ns),
            "mean_us": round(c.guard_ns / c.guard_calls / 1000, 3) if c.guard_calls else None,
        },
        "eager_islands": [
            {"name": e.name, "count": e.count, "cpu_us": us(e.cpu_ns), "gpu_us": us(e.gpu_ns)}
            for e in c.eager_islands[:TOP_ISLANDS]
        ],
        "launch": {
            "launch_calls": c.launch.launch_calls,
            "graph_launches": c.launch.graph_launches,
            "kernels": c.launch.kernels,
            "graph_kernels": c.launch.graph_kernels,
            "kernels_per_graph_launch": _round(c.launch.kernels_per_graph_launch),
            "cpu_us": us(c.launch.cpu_ns),
        },
        "fusion": {
            "kernels": c.kernels,
            "short_kernels": c.short_kernels,
            "short_share": _share(c.short_kernels, c.kernels),
            "by_kind": [
                {
                    "kind": m.kind,
                    "label": INDUCTOR_KINDS[m.kind],
                    "names": m.names,
                    "count": m.count,
                    "total_us": us(m.total_ns),
                    "short": m.short,
                    "fused_mean": round(m.fused_mean, 3),
                }
                for m in c.fusion_mix()
            ],
            "inductor_kernels": [
                {
                    "name": k.name,
                    "kind": k.kind,
                    "fused": list(k.fused),
                    "count": k.count,
                    "total_us": us(k.total_ns),
                    "short": k.short,
                }
                for k in c.inductor[:TOP_INDUCTOR]
            ],
        },
        "graph_replay": None
        if replay is None
        else {
            "launches": replay.launches,
            "kernels": replay.kernels,
            "gpu_us": us(replay.gpu_ns),
            "gap_us": us(replay.gap_ns),
            "idle_inside_us": us(replay.idle_inside_ns),
            "host_wait_inside_us": us(replay.host_wait_inside_ns),
            "captures": replay.captures,
            "captured_launches": replay.captured_launches,
            "longest": [
                {
                    "operator": trace.name_of(g.operator_row) if g.operator_row >= 0 else None,
                    "caller": trace.name_of(g.caller_row) if g.caller_row >= 0 else None,
                    "region": trace.name_of(g.region_row) if g.region_row >= 0 else None,
                    "start_us": us(trace.start[g.row]),
                    "kernels": g.kernels,
                    "gpu_us": us(g.gpu_ns),
                    "span_us": us(g.span_end - g.span_start)
                    if g.span_start is not None and g.span_end is not None
                    else None,
                    "gap_us": us(g.gap_ns),
                }
                for g in sorted(c.graphs, key=lambda g: (-g.gpu_ns, g.row))[:TOP_GRAPHS]
            ],
            "partial": list(replay.partial),
        },
        "efficiency": {
            "kernels": [_achieved_json(a) for a in eff.kernels[:TOP_EFFICIENCY]],
            "operators": [_achieved_json(a) for a in eff.operators[:TOP_EFFICIENCY]],
        },
        "steps": [
            {
                "name": trace.name_of(s.row),
                "total_us": us(s.total_ns),
                "compiled_us": us(s.compiled_ns),
                "compiled_share": _share(s.compiled_ns, s.total_ns),
                "eager_us": us(s.eager_ns),
                "regions": s.regions,
                "frames": list(s.frames),
                "guard_calls": s.guard_calls,
                "guard_us": us(s.guard_ns),
                "compiling_us": us(s.compiling_ns),
                "launch_calls": s.launch_calls,
                "graph_launches": s.graph_launches,
                "kernels_per_graph_launch": _round(s.kernels_per_graph_launch),
                "kernels": s.kernels,
                "launch_cpu_us": us(s.launch_cpu_ns),
                "short_kernels": s.short_kernels,
                "short_share": _share(s.short_kernels, s.kernels),
                "inductor_by_kind": dict(s.inductor_by_kind),
            }
            for s in c.steps
        ],
    }
