"""Kernels (`k`): GPU kernels, memcpys and memsets by (cat, name) with their statistics and the
operators that launched them; Enter lists a group's instances, Enter on one jumps to it."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np
from kinetoscope.analysis.drilldown import kernel_launchers, longest_first
from kinetoscope.analysis.kernels import KernelTable, launchers
from kinetoscope.analysis.ranges import kernels_in_range
from kinetoscope.parser.model import NO_VALUE
from rich.text import Text
from textual import work
from textual.binding import Binding, BindingType
from textual.widgets import Static

from .drilldown import (
    Jump,
    count_column,
    instance_columns,
    percent_column,
    range_label,
    time_column,
)
from .operators import category_column, model_row, restrict
from .safe_text import clean, fit_name
from .table import Column, TableModel, TableScreen, string_ranks
from .timefmt import fmt_duration

if TYPE_CHECKING:
    from .drilldown import DrilldownActions


class KernelsScreen(TableScreen):
    """Every GPU (cat, name) group, most total time first."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("M", "toggle_range", "Range/all", tooltip="Marked range or the whole trace"),
    ]
    TITLE_TEXT = "Kernels"
    SHOW_DETAIL = True
    DETAIL_CLASSES = "table-detail nowrap"

    def __init__(self, host: DrilldownActions) -> None:
        super().__init__()
        self.host = host
        self.data = host.data
        self.use_range = True
        self.shown_range: tuple[int, int] | None = None
        self.kernel_table: KernelTable | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.refresh_heading()
        self.reload()

    def on_screen_resume(self) -> None:
        if self._wanted_range() != self.shown_range:
            self.reload()

    def _wanted_range(self) -> tuple[int, int] | None:
        return self.host.range_bounds() if self.use_range else None

    def heading(self) -> Text:
        text = Text("Kernels", "bold")
        text.append(" (kernels, memcpys, memsets)")
        if self.kernel_table is None:
            text.append(" · computing…")
        if self.shown_range is not None:
            text.append(f" · range {range_label(self.data, self.shown_range)}", "bold #e5c07b")
        elif self.host.range_bounds() is not None:
            text.append(" · whole trace (M: marked range)")
        return text

    def reload(self) -> None:
        self.kernel_table = None
        self.refresh_heading()
        self._compute(self._wanted_range())

    @work(thread=True, exclusive=True, group="kernels")
    def _compute(self, bounds: tuple[int, int] | None) -> None:
        analysis = self.host.analysis
        trace = analysis.trace
        table = analysis.kernels
        if bounds is not None:
            table = kernels_in_range(trace, table, analysis.links, *bounds)
        top = kernel_launchers(
            table.launcher_row,
            analysis.links.gpu_rows,
            trace,
            analysis.gpu_groups,
            analysis.cpu_groups,
        )
        model = kernel_model(trace, table, top, analysis.cpu_groups.name)
        if bounds is not None:
            model = restrict(model, table.count > 0)
        self.app.call_from_thread(self._show, table, bounds, model)

    def _show(self, table: KernelTable, bounds, model: TableModel) -> None:
        self.kernel_table = table
        self.shown_range = bounds
        self.table.set_model(model, keep_state=True)
        self.refresh_heading()

    def describe(self, row: int) -> Text | None:
        table = self.kernel_table
        if table is None:
            return None
        group = model_row(self.table.model, row)
        analysis = self.host.analysis
        trace = analysis.trace
        text = Text()
        text.append(clean(trace.strings[int(table.groups.name[group])]) or "(no name)", "bold")
        text.append(f" · {clean(trace.strings[int(table.groups.cat[group])])}\n")
        found = launchers(trace, analysis.kernels, analysis.links, analysis.cpu_groups, group)
        text.append("launched by: ", "bold #8b919a")
        if not found:
            text.append("-")
        for _cat, name, count, total in found[:3]:
            text.append(f"{fit_name(name, 40)} ×{count:,} {fmt_duration(total)}  ")
        if len(found) > 3:
            text.append(f"(+{len(found) - 3} more)")
        text.append(" · Enter: instances", "dim")
        return text

    def action_toggle_range(self) -> None:
        if self.host.range_bounds() is None:
            self.notify("No range marked: m on the timeline marks one", timeout=3)
            return
        self.use_range = not self.use_range
        self.reload()

    def choose(self, row: int) -> None:
        group = model_row(self.table.model, row)
        self.app.push_screen(KernelDetailScreen(self.host, group, bounds=self.shown_range))


def kernel_model(trace, table: KernelTable, top, op_names: np.ndarray) -> TableModel:
    groups = table.groups
    strings = trace.strings
    names = groups.name.astype(np.int64)
    mean = table.mean()

    def launched_by(g: int) -> str:
        op = int(top.top_group[g])
        if op < 0:
            return "-"
        more = int(top.n_groups[g]) - 1
        return strings[int(op_names[op])] + (f" +{more}" if more > 0 else "")

    return TableModel(
        columns=[
            Column(
                "kernel",
                lambda g: strings[names[g]] or "(no name)",
                key=string_ranks(strings, names),
                width=0,
                numeric=False,
                name=True,
            ),
            category_column(strings, groups.cat, widest=10),
            count_column("count", table.count),
            time_column("total", table.total),
            time_column("mean", mean),
            # Narrow terminals: these give way (from the right) so that names keep room.
            percent_column("%", table.total, float(table.total.sum()), optional=True),
            Column("launched by", launched_by, width=22, numeric=False, name=True, optional=True),
            time_column("min", table.min, optional=True),
            time_column("max", table.max, optional=True),
        ],
        n=len(table),
        names=np.arange(len(names)),  # the filter tests the name and the category
        name_text=lambda g: (strings[names[g]], strings[groups.cat[g]]),
        default_sort=3,
        keys=np.arange(len(names)),  # a row is its GPU group, whatever the range
        name_room=40,  # kernel names tell apart late: min and max give way first
    )


class KernelDetailScreen(TableScreen):
    """The instances of one GPU group, longest first, and the operators that launched them."""

    BINDINGS: ClassVar[list[BindingType]] = []
    SHOW_DETAIL = True
    FILTER_HINT = "type to filter by launching operator · re:… for a regular expression"

    def __init__(
        self,
        host: DrilldownActions,
        group: int,
        rows: np.ndarray | None = None,
        bounds: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.data = host.data
        self.group = group
        analysis = host.analysis
        trace = analysis.trace
        self.trace = trace
        gpu_rows = analysis.links.gpu_rows
        if rows is None:
            rows = gpu_rows[analysis.gpu_groups.index[gpu_rows] == group]
            if bounds is not None:
                end = trace.start[rows] + trace.dur[rows]
                inside = (trace.start[rows] < bounds[1]) & (end > bounds[0])
                inside |= (trace.dur[rows] == 0) & (trace.start[rows] >= bounds[0])
                inside &= trace.start[rows] <= bounds[1]
                rows = rows[inside]
        self.rows = longest_first(trace, rows)
        self.bounds = bounds
        self.kernel_name = trace.strings[int(analysis.gpu_groups.name[group])]

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#table-detail", Static).update(self.summary())
        self.table.set_model(self.make_model())
        self.refresh_heading()

    def heading(self) -> Text:
        text = Text()
        text.append(fit_name(self.kernel_name, 70) or "(no name)", "bold #98c379")
        text.append(" · instances, longest first")
        if self.bounds is not None:
            text.append(f" · range {range_label(self.data, self.bounds)}", "bold #e5c07b")
        return text

    def summary(self) -> Text:
        analysis = self.host.analysis
        trace = self.trace
        dur = trace.dur[self.rows]
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("instances ", "bold")
        if len(dur):
            text.append(
                f"{len(dur):,} · total {fmt_duration(int(dur.sum()))} · mean "
                f"{fmt_duration(float(dur.mean()))} · min {fmt_duration(int(dur.min()))} · max "
                f"{fmt_duration(int(dur.max()))}\n"
            )
        else:
            text.append("none\n")
        text.append("launched by ", "bold")
        found = launchers(trace, analysis.kernels, analysis.links, analysis.cpu_groups, self.group)
        if not found:
            text.append("-")
        for _cat, name, count, total in found[:4]:
            text.append(f"{fit_name(name, 36)} ×{count:,} {fmt_duration(total)}  ")
        if len(found) > 4:
            text.append(f"(+{len(found) - 4} more)")
        return text

    def make_model(self) -> TableModel:
        analysis = self.host.analysis
        trace = self.trace
        data = self.data
        rows = self.rows
        strings = trace.strings
        device = trace.device[rows]
        stream = trace.stream[rows]
        # The launching operator: parent of the linked runtime call (vectorised lookup).
        slot = np.searchsorted(analysis.links.gpu_rows, rows)
        runtime = analysis.links.gpu_runtime[slot]
        launch = np.where(runtime >= 0, analysis.nesting.parent[np.maximum(runtime, 0)], -1)
        launch_name = np.where(launch >= 0, trace.name[np.maximum(launch, 0)], 0).astype(np.int64)
        return TableModel(
            columns=[
                *instance_columns(trace, rows, data.origin),
                Column("GPU", lambda i: str(int(device[i])), key=device, width=4),
                Column(
                    "stream",
                    lambda i: str(int(stream[i])) if stream[i] != NO_VALUE else "-",
                    key=stream,
                    width=7,
                ),
                Column(
                    "launched by",
                    lambda i: strings[launch_name[i]] if launch[i] >= 0 else "-",
                    key=string_ranks(strings, launch_name),
                    width=0,
                    numeric=False,
                    name=True,
                ),
            ],
            n=len(rows),
            names=launch_name,
            name_text=strings.__getitem__,
            default_sort=2,
        )

    def choose(self, row: int) -> None:
        self.host.show_on_timeline(Jump(row=int(self.rows[row])))
