"""The compile view (`c`): did torch.compile do anything useful in this trace?

At the top, the trace's numbers from the compile lens (analysis/compile.py, the session's
`compiled` result; docs/compile.md defines them): the share of GPU kernel time (CPU-only
traces: operator self time) spent in compiled code, recompiles, compilation inside the window,
guard overhead, launch economy, the fusion mix, likely graph breaks and what graph replay makes
partial. Below, one of two tables (`S` switches): the eager islands (operators outside compiled
code, Enter shows the longest instance on the timeline) or the steps (compiled share, regions,
guards, launches per ProfilerStep; Enter shows the step).

`mark_compiled_regions` (run when the trace screen opens) finds the compiled regions in a worker
and hands them to the timeline, which marks them on the CPU processes' header rows.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from kinetoscope.analysis.units import fmt_duration, plural
from kinetoscope.tui.data.failures import failure_message
from kinetoscope.tui.data.places import Jump
from kinetoscope.tui.widgets.columns import columns_of
from kinetoscope.tui.widgets.table import DataView, FilterBox, TableModel, TableScreen
from kinetoscope.tui.widgets.theme import palette_of
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Static

from kinetoscope.present.safe_text import clean
from kinetoscope.present.tables import (
    CompileStepRows,
    IslandRows,
    Table,
    compile_steps_table,
    islands_table,
)

if TYPE_CHECKING:
    from kinetoscope.analysis.compile import CompileAnalysis
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.tui.trace.drilldown import DrilldownActions

ISLANDS = "islands"
STEPS = "steps"


class CompileScreen(TableScreen):
    """The compile lens's numbers at the top; the eager islands or the steps below."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "S",
            "switch_table",
            "Steps/islands",
            tooltip="Switch between the eager islands and the per-step table",
        ),
    ]
    HELP_TITLE = "Compile (c)"  # the key help's section (tui/palette.py)
    TITLE_TEXT = "Compile"
    FILTER_HINT = "type to filter by operator or step name · re:… for a regular expression"
    FAILURE_SUBJECT = "compile analysis"

    def __init__(self, host: DrilldownActions) -> None:
        super().__init__()
        self.host = host
        self.data = host.data
        self.result: CompileAnalysis | None = None
        self.shown = ISLANDS

    def compose(self) -> ComposeResult:
        yield Static(Text("Compile"), id="table-title", classes="table-title")
        yield Static("", id="compile-summary", classes="table-detail")
        yield FilterBox(placeholder=self.FILTER_HINT, id="table-filter", select_on_focus=False)
        yield DataView(id="table-view")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.refresh_heading()
        self._compute()

    @work(thread=True, exclusive=True, group="compile", exit_on_error=False)
    def _compute(self) -> None:
        result = self.data.session.compiled
        self.app.call_from_thread(self._show, result)

    def _show(self, result: CompileAnalysis) -> None:
        self.result = result
        if not result.eager_islands and result.steps:
            self.shown = STEPS
        self._show_table()
        self.query_one("#compile-summary", Static).update(self.summary_text())

    def _show_table(self) -> None:
        result = self.result
        if result is None:
            return
        trace = self.data.trace
        model = (
            islands_model(trace, result) if self.shown == ISLANDS else steps_model(trace, result)
        )
        self.table.set_model(model)
        self.refresh_heading()

    def summary_text(self) -> Text:
        assert self.result is not None
        return describe_compile(self.data.trace, self.result, palette_of(self))

    def recolour(self) -> None:
        super().recolour()
        if self.result is not None:
            self.query_one("#compile-summary", Static).update(self.summary_text())
        elif self.failure is not None:
            self.query_one("#compile-summary", Static).update(self.failure_text())

    def show_failure(self, message: str) -> None:
        super().show_failure(message)
        self.query_one("#compile-summary", Static).update(self.failure_text())

    def heading(self) -> Text:
        data = self.data
        text = Text("Compile", "bold")
        text.append(f" · {clean(os.path.basename(data.trace.source.path))}")
        result = self.result
        if result is None:
            if self.failure is None:
                text.append(" · computing…")
            return text
        text.append(
            " · eager islands (S: steps)"
            if self.shown == ISLANDS
            else " · steps (S: eager islands)"
        )
        if self.shown == STEPS and not result.steps:
            text.append(" · no ProfilerStep# annotations in the trace", "dim")
        return text

    def csv_table(self) -> Table | None:
        result = self.result
        if result is None:
            return None
        trace = self.data.trace
        if self.shown == ISLANDS:
            return islands_table(IslandRows.of(trace, result))
        return compile_steps_table(CompileStepRows.of(trace, result))

    def action_switch_table(self) -> None:
        if self.result is None:
            return
        self.shown = STEPS if self.shown == ISLANDS else ISLANDS
        self._show_table()

    def choose(self, row: int) -> None:
        result = self.result
        if result is None:
            return
        if self.shown == ISLANDS:
            island = result.eager_islands[row]
            if island.rows:
                self.host.show_on_timeline(Jump(row=int(island.rows[0])))
        else:
            self.host.show_on_timeline(Jump(row=int(result.steps[row].row)))


# -- the numbers, as text ------------------------------------------------------------------------


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


def describe_compile(trace: Any, result: CompileAnalysis, palette: Any) -> Text:
    """The compile lens's trace-wide numbers, a line each."""
    from kinetoscope.analysis.compile import INDUCTOR_KINDS, SHORT_KERNEL_NS

    key = palette.style("heading", bold=True)
    warn = palette.style("warning", bold=True)
    text = Text()

    def line(label: str, body: str | Text, style: Any = None) -> None:
        if text:
            text.append("\n")
        text.append(f"{label}: ", key)
        if isinstance(body, Text):
            text.append_text(body)
        else:
            text.append(body, style)

    if not result.has_compiled:
        line(
            "Compiled code",
            "none: no compiled regions, Inductor kernels or compilation in this trace "
            "(torch.compile was not used, or ran outside the window)",
        )
    of = "GPU kernel time" if result.on_gpu else "CPU operator self time"
    dynamo = [r for r in result.regions if r.frame is not None]
    if result.has_compiled:
        regions = (
            f"{plural(len(dynamo), 'compiled region')} · {plural(len(result.frames), 'frame')}"
            if dynamo
            else "no Torch-Compiled Region spans (Inductor kernels only)"
        )
        line(
            "Compiled code",
            f"{_pct(result.compiled_ns, result.total_ns)} of {of} "
            f"({fmt_duration(result.compiled_ns)} of {fmt_duration(result.total_ns)}) · " + regions,
        )
    islands = result.eager_islands
    if islands:
        cpu = sum(i.cpu_ns for i in islands)
        gpu = sum(i.gpu_ns for i in islands)
        calls = sum(i.count for i in islands)
        launched = f", launching {fmt_duration(gpu)} of GPU work" if result.on_gpu else ""
        line(
            "Eager islands",
            f"{plural(len(islands), 'operator')} outside compiled code ({plural(calls, 'call')}, "
            f"{fmt_duration(cpu)}{launched}): the table below",
        )
    elif result.regions:
        line("Eager islands", "none: every top-level operator ran inside compiled code")
    recompiled = result.recompiled_frames()
    if recompiled:
        body = "; ".join(
            f"frame {f.frame}: compile ids {', '.join(map(str, f.compile_ids))} "
            f"({', '.join(map(str, f.calls))} calls)"
            for f in recompiled
        )
        line("Recompiles", body, warn)
    elif result.frames:
        line("Recompiles", "none in the window")
    if result.compiling.count:
        line(
            "Compiling in the window",
            f"{plural(result.compiling.count, 'event')}, {fmt_duration(result.compiling.ns)} "
            "(the warm-up was too short: compile before profiling)",
            warn,
        )
    if result.guard_calls:
        per_call = result.guard_ns / result.guard_calls
        line(
            "Guards",
            f"TorchDynamo Cache Lookup {plural(result.guard_calls, 'call')}, "
            f"{fmt_duration(result.guard_ns)} self ({fmt_duration(per_call)} a call)",
        )
    launch = result.launch
    if launch.launch_calls or launch.kernels:
        body = (
            f"{plural(launch.launch_calls, 'launch call')} for {plural(launch.kernels, 'kernel')}, "
            f"{fmt_duration(launch.cpu_ns)} of CPU launching"
        )
        if launch.graph_launches:
            per = launch.kernels_per_graph_launch or 0.0
            body += (
                f" · {plural(launch.graph_launches, 'graph launch', 'graph launches')} "
                f"replaying {launch.graph_kernels:,} ({per:.1f} per launch)"
            )
        line("Launches", body)
    mix = result.fusion_mix()
    if mix:
        parts = ", ".join(
            f"{INDUCTOR_KINDS.get(k.kind, k.kind)} {k.count:,} ({plural(k.names, 'name')}, "
            f"{k.fused_mean:.1f} ops fused)"
            for k in mix
        )
        short = ""
        if result.kernels:
            short = (
                f" · {_pct(result.short_kernels, result.kernels)} of the "
                f"{result.kernels:,} kernels under {fmt_duration(SHORT_KERNEL_NS)}"
            )
        line("Fusion", parts + short)
    for brk in result.likely_graph_breaks:
        where = trace.name_of(brk.step_row) if brk.step_row >= 0 else "the trace"
        line(
            "Likely graph break",
            f"{clean(where)} runs compiled regions of frames "
            f"{', '.join(map(str, brk.frames))} (one forward pass, several graphs?)",
            warn,
        )
    replay = result.replay
    if replay is not None:
        verb = "replays" if replay.launches == 1 else "replay"
        if replay.launches:
            line(
                "Graph replay",
                f"{plural(replay.launches, 'graph launch', 'graph launches')} {verb} "
                f"{plural(replay.kernels, 'GPU activity', 'GPU activities')} "
                f"({fmt_duration(replay.gpu_ns)}); "
                f"{fmt_duration(replay.gap_ns)} idle inside replays is not the host's doing",
            )
        else:
            line(
                "Graph capture",
                f"{plural(replay.captures, 'graph capture')} inside the window "
                f"({plural(replay.captured_launches, 'launch call')} recorded, none run); "
                "no graph launch replays",
            )
        for note in replay.partial:
            text.append("\n  partial: ", key)
            text.append(note)
    return text


# -- the tables ----------------------------------------------------------------------------------


def islands_model(trace: Any, result: CompileAnalysis) -> TableModel:
    """The eager islands: operators outside compiled code, by name. Its columns are the eager
    islands table's (present/tables.py)."""
    islands = result.eager_islands
    n = len(islands)
    names = [i.name for i in islands]
    return TableModel(
        columns=columns_of(islands_table(IslandRows.of(trace, result))),
        n=n,
        names=np.arange(n, dtype=np.int64),
        name_text=names.__getitem__,
        default_sort=3 if result.on_gpu else 2,
    )


def steps_model(trace: Any, result: CompileAnalysis) -> TableModel:
    """Per ProfilerStep: the compiled share and the compile lens's other numbers. Its columns
    are the compile steps table's (present/tables.py)."""
    steps = result.steps
    names = np.array([trace.name[s.row] for s in steps], dtype=np.int64)
    return TableModel(
        columns=columns_of(compile_steps_table(CompileStepRows.of(trace, result))),
        n=len(steps),
        names=names,
        name_text=trace.strings.__getitem__,
        default_sort=0,
    )


# -- the timeline's marks ------------------------------------------------------------------------


def compiled_region_spans(data: Any) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per CPU group of the timeline: the time its compiled regions cover (merged, relative
    ns). Nothing is computed when no event name is a compiled region's."""
    from kinetoscope.analysis.compile import region_kind
    from kinetoscope.analysis.steps import names_matching

    session: TraceSession = data.session
    if not names_matching(data.trace, lambda s: region_kind(s) is not None).any():
        return {}
    rows = np.array([r.row for r in session.compiled.outer_regions()], dtype=np.int64)
    return data.spans_by_group(rows) if len(rows) else {}


def mark_compiled_regions(host: DrilldownActions) -> None:
    """Find the compiled regions in a worker thread, then mark them on the host's timeline;
    a failure is said in a notification (the timeline stays unmarked)."""
    screen: Any = host

    def find() -> None:
        try:
            spans = compiled_region_spans(host.data)
        except Exception as error:  # said, never raised into the app
            message = failure_message("compiled regions", error)
            screen.app.call_from_thread(
                screen.notify, message, severity="error", timeout=8, markup=False
            )
            return
        if spans:
            screen.app.call_from_thread(host.timeline.set_compiled_spans, spans)

    screen.run_worker(
        find, name="compiled-regions", group="compiled-regions", thread=True, exit_on_error=False
    )
