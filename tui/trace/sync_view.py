"""The synchronisation view (`b`): every call where the CPU blocked on the GPU, worst first (or
grouped by call site), the time blocked per step, and Enter to see one on the timeline."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
from kinetoscope.analysis.sync import (
    KIND_TEXT,
    SyncCalls,
    SyncSite,
    cause_label,
    group_sites,
    short_frame,
)
from kinetoscope.analysis.units import fmt_duration, plural
from kinetoscope.tui.data.failures import ReportsWorkerFailures
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.trace.details import stack_tail
from kinetoscope.tui.trace.memory_view import TimelineTarget
from kinetoscope.tui.widgets.table import SAVE_CSV_BINDING, SavesCsv
from kinetoscope.tui.widgets.theme import current_palette
from kinetoscope.tui.widgets.timefmt import time_cell
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from kinetoscope.present.safe_text import fit_name, shorten
from kinetoscope.present.tables import Table, sync_calls_table, sync_sites_table

TABLE_LIMIT = 2000
NO_SYNCS = (
    "No blocking CUDA/HIP calls in this trace (cudaDeviceSynchronize, cudaStreamSynchronize, "
    "cudaEventSynchronize, cudaStreamWaitEvent, synchronous cudaMemcpy/cudaMemset)."
)


def sync_calls_for(data: ViewData) -> SyncCalls:
    """The trace's blocking calls, from the TraceSession the drill-down screens share."""
    return data.session.sync


def _site_text(site: tuple[str, ...], width: int = 70) -> str:
    return shorten(" › ".join(short_frame(n) for n in site), width) if site else "(top level)"


class SyncScreen(SavesCsv, ReportsWorkerFailures, Screen[TimelineTarget | None]):
    """Blocking calls, worst first; `v` groups them by call site. Dismisses with a target."""

    CSS_PATH = str(
        Path(__file__).with_name("memory_view.tcss")
    )  # beside this module, wherever a subclass lives
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("q", "close", "Back", show=False),
        Binding("v", "toggle_view", "Calls/sites", tooltip="Each call, or grouped by call site"),
        SAVE_CSV_BINDING,
    ]
    HELP_TITLE = "Sync (b)"  # the key help's section (tui/palette.py)
    FAILURE_SUBJECT = "blocking calls"
    failure: str | None = None  # what could not be computed, and why

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            *SyncScreen.BINDINGS,
            Binding("up,down,pageup,pagedown,home,end", "table_move", "Move in the table"),
            Binding(
                "enter", "table_choose", "Show the call on the timeline, and the GPU idle after it"
            ),
        ]

    def __init__(self, data: ViewData) -> None:
        super().__init__()
        self.data = data
        self.calls: SyncCalls | None = None
        self.sites: list[SyncSite] = []
        self.by_site = False
        self.table_calls: list[int] = []  # per table line: the position of the call it shows

    def compose(self) -> ComposeResult:
        yield Static(Text("Host waits on the GPU · computing…"), id="sync-title")
        yield Static("", id="sync-steps")
        yield DataTable(id="sync-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="sync-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.compute()

    @work(thread=True, exclusive=True, group="sync-view", exit_on_error=False)
    def compute(self) -> None:
        calls = sync_calls_for(self.data)
        sites = group_sites(self.data.trace, calls)
        self.app.call_from_thread(self.show_calls, calls, sites)

    def csv_export(self) -> tuple[Table, np.ndarray] | None:
        """Every call (or call site) of the table, not only the first TABLE_LIMIT shown."""
        if self.calls is None:
            return None
        trace = self.data.trace
        if self.by_site:
            table = sync_sites_table(self.sites)
        else:
            table = sync_calls_table(trace, self.calls)
        return table, table.order

    def show_failure(self, message: str) -> None:
        """The blocking calls could not be computed: the title says why."""
        self.failure = message
        self.query_one("#sync-title", Static).update(self.title_text())

    def show_calls(self, calls: SyncCalls, sites: list[SyncSite]) -> None:
        self.calls = calls
        self.sites = sites
        self.query_one("#sync-title", Static).update(self.title_text())
        self.query_one("#sync-steps", Static).update(self.steps_text())
        self.fill_table()

    # -- texts ------------------------------------------------------------------------------

    def title_text(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Host waits on the GPU", "bold")
        calls = self.calls
        if calls is None:
            if self.failure is not None:
                text.append(f" · {self.failure}", current_palette().style("error", bold=True))
            return text
        if not len(calls):
            text.append(" · none")
            return text
        total = int(calls.dur.sum())
        worst = int(calls.dur.max())
        text.append(f" · {plural(len(calls), 'blocking call')} · ")
        text.append(fmt_duration(total), current_palette().style("error", bold=True))
        text.append(
            f" blocked · worst {fmt_duration(worst)} · {plural(len(self.sites), 'call site')}"
        )
        linked = int((calls.gpu_sync >= 0).sum())
        if linked:
            text.append(f" · {linked:,} with a GPU-side cuda_sync record")
        text.append(" · v: " + ("each call" if self.by_site else "by call site"), "dim")
        return text

    def steps_text(self) -> Text:
        calls = self.calls
        if calls is None:
            return Text("")
        if not len(calls):
            text = Text(NO_SYNCS)
            if len(calls.unlinked_gpu_syncs):
                text.append(
                    f" {plural(len(calls.unlinked_gpu_syncs), 'GPU-side cuda_sync record')}."
                )
            return text
        trace = self.data.trace
        if not len(calls.step_rows):
            return Text("No ProfilerStep slices: blocked time per step is not available.", "dim")
        text = Text("blocked per step: ", "bold")
        for i, row in enumerate(calls.step_rows.tolist()):
            blocked = int(calls.step_blocked[i])
            dur = int(trace.dur[row])
            share = 100 * blocked / dur if dur else 0.0
            text.append(f"{fit_name(trace.name_of(row), 24)} ")
            text.append(fmt_duration(blocked), "bold" if share >= 10 else "")
            text.append(f" ({share:.0f}%)  ")
        return text

    def detail_text(self, position: int) -> Text:
        calls = self.calls
        assert calls is not None
        data = self.data
        trace = data.trace
        row = int(calls.rows[position])
        text = Text()
        text.append(fit_name(trace.name_of(row), 60), current_palette().style("heading", bold=True))
        text.append(f" · {KIND_TEXT[int(calls.kind[position])]} · blocked ")
        text.append(fmt_duration(int(calls.dur[position])), "bold")
        text.append(f" at +{fmt_duration(int(trace.start[row]) - data.origin)}")
        step = int(calls.step[position])
        if step >= 0:
            text.append(f" in {fit_name(trace.name_of(int(calls.step_rows[step])), 24)}")
        text.append("\n")
        cause = cause_label(trace, calls, position)
        text.append("cause: ", current_palette().style("muted", bold=True))
        text.append(shorten(cause, 60) if cause else "an explicit synchronisation")
        gap = int(calls.gap[position])
        text.append(" · GPU idle it caused ", "")
        text.append(fmt_duration(int(calls.idle[position])), "bold")
        text.append(f" ({fmt_duration(int(calls.idle_during[position]))} while it ran")
        if gap >= 0:
            text.append(f", then in a gap of {fmt_duration(int(data.gaps.length[gap]))}")
        text.append(")")
        record = int(calls.gpu_sync[position])
        if record >= 0:
            text.append(
                f" · GPU record: {fit_name(trace.name_of(record), 30)} "
                f"{fmt_duration(int(trace.dur[record]))}"
            )
        text.append("\n")
        chain = [trace.name_of(r) for r in data.ancestors(row)[::-1]]  # outermost first
        text.append("stack (innermost last): ", current_palette().style("muted", bold=True))
        text.append(stack_tail(chain, 6, 50) if chain else "-")
        return text

    # -- the table --------------------------------------------------------------------------

    def fill_table(self) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        self.table_calls = []
        calls = self.calls
        if calls is None or not len(calls):
            return
        if self.by_site:
            self._fill_sites(table)
        else:
            self._fill_calls(table, calls)
        if self.table_calls:
            self.query_one("#sync-detail", Static).update(self.detail_text(self.table_calls[0]))

    def _fill_calls(self, table: DataTable, calls: SyncCalls) -> None:
        trace = self.data.trace
        table.add_columns("#", "call", "blocked", "when", "step", "cause", "GPU idle", "call site")
        for rank, i in enumerate(calls.worst()[:TABLE_LIMIT].tolist(), start=1):
            row = int(calls.rows[i])
            step = int(calls.step[i])
            table.add_row(
                str(rank),
                Text(fit_name(trace.name_of(row), 26)),
                time_cell(int(calls.dur[i])),
                time_cell(int(trace.start[row]) - self.data.origin, "+"),
                Text(fit_name(trace.name_of(int(calls.step_rows[step])), 18) if step >= 0 else "-"),
                Text(shorten(cause_label(trace, calls, i), 26) or "explicit"),
                time_cell(int(calls.idle[i])) if calls.idle[i] > 0 else Text("-", justify="right"),
                Text(_site_text(calls.sites[int(calls.site[i])])),
            )
            self.table_calls.append(i)

    def _fill_sites(self, table: DataTable) -> None:
        table.add_columns("call", "cause", "count", "total", "max", "GPU idle", "call site")
        for site in self.sites[:TABLE_LIMIT]:
            table.add_row(
                Text(fit_name(site.call, 26)),
                Text(shorten(site.cause, 26) or "explicit"),
                Text(f"{site.count:,}", justify="right"),
                time_cell(site.total),
                time_cell(site.max),
                time_cell(site.idle),
                Text(_site_text(site.site)),
            )
            self.table_calls.append(site.worst)

    def recolour(self) -> None:
        """The theme changed (the app calls this): the title and the detail again."""
        if self.failure is not None:
            self.query_one("#sync-title", Static).update(self.title_text())
        if self.calls is not None:
            self.query_one("#sync-title", Static).update(self.title_text())
            index = self.query_one(DataTable).cursor_row
            if 0 <= index < len(self.table_calls):
                detail = self.detail_text(self.table_calls[index])
                self.query_one("#sync-detail", Static).update(detail)

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        index = message.cursor_row
        if self.calls is not None and 0 <= index < len(self.table_calls):
            detail = self.detail_text(self.table_calls[index])
            self.query_one("#sync-detail", Static).update(detail)

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        index = message.cursor_row
        if self.calls is None or not (0 <= index < len(self.table_calls)):
            return
        self.dismiss(target_for_call(self.data, self.calls, self.table_calls[index]))

    # -- actions ----------------------------------------------------------------------------

    def action_toggle_view(self) -> None:
        self.by_site = not self.by_site
        if self.calls is not None:
            self.query_one("#sync-title", Static).update(self.title_text())
        self.fill_table()

    def action_close(self) -> None:
        self.dismiss(None)


def target_for_call(data: ViewData, calls: SyncCalls, position: int) -> TimelineTarget:
    """Select the call, and show it with the GPU idle gap that followed it (if any)."""
    row = int(calls.rows[position])
    start = int(data.trace.start[row])
    end = start + int(calls.dur[position])
    gap = int(calls.gap[position])
    if gap >= 0:
        end = max(end, int(data.gaps.end[gap]))
    margin = max((end - start) * 0.1, 1000)
    return TimelineTarget(row=row, cursor=start, view_start=start - margin, view_end=end + margin)
