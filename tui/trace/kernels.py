"""Kernels (`k`): GPU kernels, memcpys and memsets by (cat, name) with their statistics and the
operators that launched them; Enter lists a group's instances, Enter on one jumps to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from kinetoscope.analysis.drilldown import kernel_launchers, longest_first
from kinetoscope.analysis.kernels import KernelTable, launchers
from kinetoscope.analysis.ranges import kernels_in_range
from kinetoscope.analysis.units import fmt_duration
from kinetoscope.parser.model import NO_VALUE
from kinetoscope.tui.data.places import Jump, range_label
from kinetoscope.tui.widgets.columns import (
    columns_of,
    instance_columns,
    restrict,
)
from kinetoscope.tui.widgets.rangetable import RangeTableScreen
from kinetoscope.tui.widgets.table import Column, TableModel, TableScreen, string_ranks
from kinetoscope.tui.widgets.theme import palette_of
from rich.text import Text
from textual import events
from textual.binding import BindingType
from textual.widgets import Static

from kinetoscope.present.safe_text import clean, fit_name
from kinetoscope.present.tables import (
    INT,
    TEXT,
    Field,
    KernelRows,
    Table,
    instances_table,
    kernel_launcher_groups,
    kernels_table,
)

if TYPE_CHECKING:
    from kinetoscope.tui.trace.drilldown import DrilldownActions


class KernelsScreen(RangeTableScreen[KernelTable]):
    """Every GPU (cat, name) group, most total time first."""

    BINDINGS: ClassVar[list[BindingType]] = [RangeTableScreen.RANGE_BINDING]
    HELP_TITLE = "Kernels (k)"  # the key help's section (tui/palette.py)
    TITLE_TEXT = "Kernels"
    FAILURE_SUBJECT = "kernels"

    @property
    def kernel_table(self) -> KernelTable | None:
        return self.result

    def table_title(self) -> Text:
        text = Text("Kernels", "bold")
        text.append(" (kernels, memcpys, memsets)")
        return text

    def compute(self, bounds: tuple[int, int] | None) -> tuple[KernelTable, TableModel]:
        session = self.data.session
        trace = session.trace
        table = session.kernels
        if bounds is not None:
            table = kernels_in_range(trace, table, session.links, *bounds)
        top = kernel_launchers(
            table.launcher_row,
            session.links.gpu_rows,
            trace,
            session.gpu_groups,
            session.cpu_groups,
        )
        model = kernel_model(trace, table, top, session.cpu_groups.name)
        if bounds is not None:
            model = restrict(model, table.count > 0)
        return table, model

    def csv_table(self) -> Callable[[], Table] | None:
        table = self.kernel_table
        if table is None:
            return None
        session = self.data.session

        def make() -> Table:  # in the save's worker: the launchers walk every GPU activity
            top = kernel_launcher_groups(session, table)
            return kernels_table(KernelRows.of(session.trace, table, top, session.cpu_groups.name))

        return make

    def describe_row(self, group: int) -> Text | None:
        table = self.kernel_table
        assert table is not None
        session = self.data.session
        trace = session.trace
        text = Text()
        text.append(clean(trace.strings[int(table.groups.name[group])]) or "(no name)", "bold")
        text.append(f" · {clean(trace.strings[int(table.groups.cat[group])])}\n")
        found = launchers(trace, session.kernels, session.links, session.cpu_groups, group)
        text.append("launched by: ", palette_of(self).style("muted", bold=True))
        if not found:
            text.append("-")
        for _cat, name, count, total in found[:3]:
            text.append(f"{fit_name(name, 40)} ×{count:,} {fmt_duration(total)}  ")
        if len(found) > 3:
            text.append(f"(+{len(found) - 3} more)")
        text.append(" · Enter: instances", "dim")
        return text

    def choose_row(self, group: int) -> None:
        self.app.push_screen(KernelDetailScreen(self.host, group, bounds=self.shown_range))


def kernel_model(trace, table: KernelTable, top, op_names: np.ndarray) -> TableModel:
    """The kernels table's model: its columns are the kernels table's (present/tables.py)."""
    groups = table.groups
    strings = trace.strings
    names = groups.name.astype(np.int64)
    return TableModel(
        columns=columns_of(kernels_table(KernelRows.of(trace, table, top, op_names))),
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
    HELP_TITLE = "Kernel details"
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
        session = host.data.session
        trace = session.trace
        self.trace = trace
        gpu_rows = session.links.gpu_rows
        if rows is None:
            rows = gpu_rows[session.gpu_groups.index[gpu_rows] == group]
            if bounds is not None:
                end = trace.start[rows] + trace.dur[rows]
                inside = (trace.start[rows] < bounds[1]) & (end > bounds[0])
                inside |= (trace.dur[rows] == 0) & (trace.start[rows] >= bounds[0])
                inside &= trace.start[rows] <= bounds[1]
                rows = rows[inside]
        self.rows = longest_first(trace, rows)
        self.bounds = bounds
        self.kernel_name = trace.strings[int(session.gpu_groups.name[group])]

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#table-detail", Static).update(self.summary())
        self.table.set_model(self.make_model())
        self.refresh_heading()

    def on_resize(self, event: events.Resize) -> None:
        self.refresh_heading()  # the name is fitted to the width

    def recolour(self) -> None:
        """The theme changed (the app calls this): the title and the summary again."""
        super().recolour()
        self.query_one("#table-detail", Static).update(self.summary())

    def heading(self) -> Text:
        text = Text()
        palette = palette_of(self)
        # The name gives way first, so that the rest of the line (rows, sort, range, hidden
        # columns) still shows on a narrow screen: 70 cells at most, 50 left for the rest.
        room = 70 if self.size.width <= 0 else max(16, min(70, self.size.width - 2 - 50))
        text.append(
            fit_name(self.kernel_name, room) or "(no name)", palette.style("gpu", bold=True)
        )
        text.append(" · instances, longest first")
        if self.bounds is not None:
            marked = palette.style("marked", bold=True)
            text.append(f" · range {range_label(self.data, self.bounds)}", marked)
        return text

    def summary(self) -> Text:
        session = self.data.session
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
        found = launchers(trace, session.kernels, session.links, session.cpu_groups, self.group)
        if not found:
            text.append("-")
        for _cat, name, count, total in found[:4]:
            text.append(f"{fit_name(name, 36)} ×{count:,} {fmt_duration(total)}  ")
        if len(found) > 4:
            text.append(f"(+{len(found) - 4} more)")
        return text

    def make_model(self) -> TableModel:
        session = self.data.session
        trace = self.trace
        data = self.data
        rows = self.rows
        strings = trace.strings
        device = trace.device[rows]
        stream = trace.stream[rows]
        # The launching operator: parent of the linked runtime call (vectorised lookup).
        slot = np.searchsorted(session.links.gpu_rows, rows)
        runtime = session.links.gpu_runtime[slot]
        launch = np.where(runtime >= 0, session.nesting.parent[np.maximum(runtime, 0)], -1)
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

    def csv_table(self) -> Table:
        session = self.data.session
        trace = self.trace
        rows = self.rows
        slot = np.searchsorted(session.links.gpu_rows, rows)
        runtime = session.links.gpu_runtime[slot]
        launch = np.where(runtime >= 0, session.nesting.parent[np.maximum(runtime, 0)], -1)
        return instances_table(
            trace,
            rows,
            "kernel-instances",
            [
                Field("device", INT, lambda i: trace.device[rows[i]]),
                Field("stream", INT, lambda i: trace.stream[rows[i]]),
                Field(
                    "launched_by",
                    TEXT,
                    lambda i: trace.name_of(int(launch[i])) if launch[i] >= 0 else None,
                ),
            ],
        )

    def choose(self, row: int) -> None:
        self.host.show_on_timeline(Jump(row=int(self.rows[row])))
