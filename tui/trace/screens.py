"""Screens: loading (progress, Esc cancels), the trace view, the idle-gap list, errors."""

from __future__ import annotations

import math
import os
import time
from typing import ClassVar

import numpy as np
from kinetoscope.analysis.units import fmt_duration, plural
from kinetoscope.parser import file_changed
from kinetoscope.tui.data.loader import Progress as LoadProgress
from kinetoscope.tui.data.loader import Stage
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.trace.details import DetailsPane, cpu_stack_for_gap, stack_tail
from kinetoscope.tui.trace.drilldown import DRILLDOWN_BINDINGS, DrilldownActions
from kinetoscope.tui.widgets.table import SAVE_CSV_BINDING, SavesCsv
from kinetoscope.tui.widgets.theme import palette_of
from kinetoscope.tui.widgets.timefmt import time_cell
from kinetoscope.tui.widgets.timeline import DEFAULT_GAP_THRESHOLD, Timeline
from rich.cells import cell_len
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, ProgressBar, Static

from kinetoscope.present.safe_text import clean, fit_name, shorten
from kinetoscope.present.tables import GapRows, Table, gaps_table

# Steps of the idle-gap threshold that > and < walk through (ns).
GAP_THRESHOLDS = (
    0,
    1_000,
    5_000,
    10_000,
    50_000,
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
)
LOADING_NOTICE_INTERVAL_S = 3.0  # keys pressed while loading: said at most this often
WARNINGS_SHOWN = 6  # parser warnings listed when a trace opens
FILE_CHECK_INTERVAL_S = 2.0  # how often the trace screen checks the file is still the one shown
GAP_LIST_LIMIT = 2000
# The details pane: usually this share of the screen, at most DETAILS_USUAL_MAX rows, more where
# the timeline leaves rows empty; { } set it between DETAILS_MIN rows and all but TIMELINE_MIN.
DETAILS_SHARE = 0.35
DETAILS_USUAL_MAX = 20
DETAILS_MIN = 3
TIMELINE_MIN = 5


class LoadingScreen(Screen):
    """Shows the load's bytes, events and rate from the `Progress` messages it is sent; Esc
    posts `CancelRequested` (the app cancels the load)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel loading")]

    class Progress(Message):
        """How far the load is (from the loader's coalesced progress reports)."""

        bubble = False

        def __init__(self, progress: LoadProgress) -> None:
            super().__init__()
            self.progress = progress

    class CancelRequested(Message):
        """The user asked to stop the load."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._cancelling = False
        self._said_loading = -math.inf  # when keys pressed while loading were last answered

    def compose(self) -> ComposeResult:
        with Vertical(id="loading-box"):
            yield Static(Text(f"Loading {clean(self.path)}"), id="loading-title")
            yield ProgressBar(total=100, show_eta=False, id="loading-bar")
            yield Static("", id="loading-stats")
            yield Static(Text("Esc cancels", style="dim"), id="loading-hint")

    def action_cancel(self) -> None:
        self._cancelling = True
        self.post_message(self.CancelRequested())
        self.query_one("#loading-stats", Static).update("cancelling…")

    def on_key(self, event: events.Key) -> None:
        """Keys of the trace view pressed before it is there: say so (once a few seconds)
        rather than drop them without a word."""
        if event.key in self.app.active_bindings:  # Esc, q, ? and the like still work
            return
        now = time.monotonic()
        if now - self._said_loading >= LOADING_NOTICE_INTERVAL_S:
            self._said_loading = now
            self.notify("Still loading: keys work once the trace is shown (Esc cancels)", timeout=3)

    def on_loading_screen_progress(self, message: LoadingScreen.Progress) -> None:
        # A report may arrive before the screen is composed or after it was taken down (a key
        # that opened a rank while the app was quitting): nothing to show it on.
        if self._cancelling or not self.query("#loading-bar"):
            return
        report = message.progress
        total = max(report.total, 1)
        self.query_one("#loading-bar", ProgressBar).update(total=total, progress=report.done)
        mb = 1e6
        self.query_one("#loading-stats", Static).update(
            Text(
                f"{report.done / mb:,.1f} / {total / mb:,.1f} MB · "
                f"{plural(report.events, 'event')} · {report.rate / mb:,.1f} MB/s"
            )
        )
        if report.stage is Stage.LAYOUT:
            hint = self.query_one("#loading-hint", Static)
            hint.update(Text("laying out the timeline…", style="dim"))


class ErrorScreen(Screen):
    """A trace that could not be loaded: the parser's one-line message, and how to leave."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "app.quit_error", "Quit"),
        Binding("escape", "app.quit_error", "Quit", show=False),
    ]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box"):
            yield Static(Text("Could not open the trace", style="bold red"))
            yield Static(Text(clean(self.message)), id="error-message")
            yield Static(Text("Press q to quit.", style="dim"))


class TraceScreen(DrilldownActions, Screen):
    """The main view: header, timeline, details pane, status line, footer."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("i", "gap_list", "Idle gaps", tooltip="List GPU idle gaps, longest first"),
        Binding(
            "greater_than_sign", "threshold(1)", "Raise the idle-gap threshold g/G use", show=False
        ),
        Binding("less_than_sign", "threshold(-1)", "Lower the idle-gap threshold", show=False),
        Binding("escape", "clear", "Clear selection", show=False),
        *DRILLDOWN_BINDINGS,
        Binding(
            "p",
            "memory",
            "Memory",
            show=False,
            tooltip="Memory curve per device: peak, live bytes, operators that allocate",
        ),
        Binding("b", "syncs", "Syncs", show=False, tooltip="Where the CPU blocks on the GPU"),
        Binding("W", "save_csv_hint", "Save CSV", show=False, tooltip="Save CSV: in a table"),
        Binding(
            "left_curly_bracket",
            "details_size(-3)",
            "Smaller details pane",
            show=False,
            tooltip="Details pane 3 rows smaller (the timeline gets them)",
        ),
        Binding(
            "right_curly_bracket",
            "details_size(3)",
            "Bigger details pane",
            show=False,
            tooltip="Details pane 3 rows bigger (Tab focuses it to scroll it)",
        ),
    ]
    HELP_TITLE = "Timeline"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        """The timeline's keys, this screen's, and Textual's own focus keys."""
        return [
            *Timeline.BINDINGS,
            *TraceScreen.BINDINGS,
            Binding("tab", "focus_next", "Focus the details pane, to scroll it (↑ ↓ PgUp PgDn)"),
            Binding("shift+tab", "focus_previous", "Back to the timeline"),
        ]

    def __init__(self, data: ViewData) -> None:
        super().__init__()
        self.data = data
        self.changed_on_disk: str | None = None  # why the file is not the one shown any more
        self.shown_threshold = DEFAULT_GAP_THRESHOLD  # the idle-gap threshold the title counts
        self.shown_hide_python = False  # the title says when Python frames are hidden
        self.details_rows: int | None = None  # the details pane's height set with { }, if any
        self.title_prefix = ""  # what a subclass shows before the title ("rank 3", "base")
        # The top finding (analysis/rules.py group_findings), once the worker has it: None
        # while computing, False when no rule fired or it could not be computed.
        self.top_finding = None

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="title")
        yield Timeline(self.data, id="timeline")
        yield DetailsPane(self.data, id="details")
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Timeline).focus()
        self.set_interval(FILE_CHECK_INTERVAL_S, self.check_file)
        self.mark_compiled_regions()
        warnings = self.data.trace.warnings
        if warnings:  # what the parser skipped or could not make sense of: said, not hidden
            shown = [shorten(w, 200) for w in warnings[:WARNINGS_SHOWN]]
            if len(warnings) > WARNINGS_SHOWN:
                shown.append(f"… and {len(warnings) - WARNINGS_SHOWN} more (kinetoscope summary)")
            self.notify(
                "\n".join(shown),
                title="Loaded with warnings",
                severity="warning",
                timeout=15,
                markup=False,
            )

    # Whether this screen works out and shows the top finding (a rank's or a diff side's
    # screen leaves it to its own app's summary views).
    SHOWS_TOP_FINDING = True

    def on_timeline_first_frame(self, message: Timeline.FirstFrame) -> None:
        """After the first frame (not to slow it down): work out the top finding."""
        if self.SHOWS_TOP_FINDING and self.top_finding is None:
            self._find_top()

    @work(thread=True, exclusive=True, group="top-finding", exit_on_error=False)
    def _find_top(self) -> None:
        try:
            causes = list(self.data.session.causes)
        except Exception:  # the findings screen (t) says why; the main view stays as it is
            self.app.call_from_thread(self._show_top, None, -1)
            return
        self.app.call_from_thread(self._show_top, causes[0] if causes else False, len(causes))

    def _show_top(self, top, count: int) -> None:
        """`top`: the top finding, False when no rule fired, None (count -1) when the findings
        could not be computed."""
        self.top_finding = top if top is not None else False
        palette = palette_of(self)
        text = Text()
        if top is None:
            text.append("The findings could not be computed", "bold")
            text.append(" (t says why).\n")
        elif top is False:
            text.append("No triage rule fired", "bold")
            text.append(": nothing stood out (t shows the findings screen anyway).\n")
        else:
            colour = {"critical": "error", "warning": "warning"}.get(top.severity, "info")
            text.append("Top finding ", "bold")
            text.append(f"{top.severity.upper()} ", palette.style(colour, bold=True))
            text.append(f"{top.rule}: ", "bold")
            text.append(clean(top.headline))
            more = f", {count - 1:,} more" if count > 1 else ""
            text.append(f"\n  t lists the findings{more}; Enter on one shows its evidence.\n")
        self.query_one(DetailsPane).show_top_finding(text)
        self.query_one("#status", Static).update(self.status_text())

    def check_file(self) -> None:
        """Say so, once, when the trace's file changes or goes away while it is shown."""
        if self.changed_on_disk is not None:
            return
        reason = file_changed(self.data.trace)
        if reason is None:
            return
        self.changed_on_disk = reason
        self.query_one("#title", Static).update(self._title())
        self.notify(
            f"{clean(reason)}. The view shows the file as it was loaded; args can no longer be "
            "read from it. Reopen it to see the new contents.",
            severity="warning",
            timeout=10,
            markup=False,
        )

    def _title(self) -> Text:
        data = self.data
        trace = data.trace
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.title_prefix:
            text.append(f"{self.title_prefix} · ", "bold")
        text.append("kinetoscope ", "bold")
        text.append(clean(os.path.basename(trace.source.path)))
        # Early in the line, so that a narrow terminal still shows them; the details last.
        if not trace.complete:
            text.append(" · INCOMPLETE", "bold red")
        if self.changed_on_disk is not None:
            text.append(" · CHANGED ON DISK", "bold red")
        if self.shown_hide_python:
            text.append(" · Python frames hidden (P)", "bold")
        text.append(
            f" · {plural(trace.n_events, 'event')} · {plural(len(data.lanes), 'lane')} · "
            f"{fmt_duration(data.span)} · {self._gap_count_text()}"
        )
        if not trace.complete:
            reason = trace.warnings[0] if trace.warnings else "the file ends early"
            text.append(f" · {clean(reason)}", "red")
        return text

    def _gap_count_text(self) -> str:
        """How many GPU idle gaps g, G and i visit: those at least as long as the threshold."""
        threshold = self.shown_threshold
        count = int(np.count_nonzero(self.data.gaps.length >= threshold))
        text = f"{count:,} GPU {'gap' if count == 1 else 'gaps'}"
        return text + (f" ≥ {fmt_duration(threshold)}" if threshold > 0 else "")

    @property
    def timeline(self) -> Timeline:
        return self.query_one(Timeline)

    def fit_split(self) -> None:
        """Size the details pane: its usual height, and the rows the timeline leaves empty
        (the ruler and every row shown get their room first); or the height set with { }."""
        avail = self.size.height - 3  # the header, the status line and the footer
        if avail <= 0:
            return
        if self.details_rows is None:
            usual = min(DETAILS_USUAL_MAX, max(5, round(DETAILS_SHARE * self.size.height)))
            details = max(usual, avail - (len(self.timeline.rows) + 1))
        else:
            details = self.details_rows
        details = max(DETAILS_MIN, min(details, avail - TIMELINE_MIN))
        pane = self.query_one(DetailsPane)
        if pane.styles.height is None or pane.styles.height.value != details:
            pane.styles.height = details

    def on_resize(self) -> None:
        self.fit_split()

    def toggle_python(self) -> None:
        """Hide or show the Python frames (the timeline's P), from a screen above this one."""
        self.timeline.action_toggle_python()

    def action_details_size(self, delta: int) -> None:
        avail = self.size.height - 3
        current = self.query_one(DetailsPane).outer_size.height
        self.details_rows = max(DETAILS_MIN, min(current + delta, avail - TIMELINE_MIN))
        self.fit_split()

    def levels_complete(self) -> None:
        """Every slice is placed now. A screen not composed yet builds its widgets from the
        complete data anyway: nothing to redo then."""
        for timeline in self.query(Timeline):
            timeline.levels_complete()
        for pane in self.query(DetailsPane):
            pane.levels_complete()

    def on_timeline_event_selected(self, message: Timeline.EventSelected) -> None:
        self.query_one(DetailsPane).show_event(message.row)

    def on_timeline_gap_reached(self, message: Timeline.GapReached) -> None:
        self.query_one(DetailsPane).show_gap(message.gap)

    def on_timeline_changed(self, message: Timeline.Changed) -> None:
        self.query_one("#status", Static).update(self.status_text())
        self.fit_split()  # rows shown may have changed (a lane expanded or collapsed)
        shown = (self.timeline.gap_threshold, self.data.hide_python)
        if shown != (self.shown_threshold, self.shown_hide_python):
            self.shown_threshold, self.shown_hide_python = shown
            self.query_one("#title", Static).update(self._title())

    def recolour(self) -> None:
        """The theme changed (the app calls this): the status line again, in its colours."""
        self.query_one("#status", Static).update(self.status_text())

    def status_text(self) -> Text:
        timeline = self.timeline
        data = self.data
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{fmt_duration(timeline.cursor_time)}", "bold")
        text.append(f" · {fmt_duration(timeline.ns_per_cell, 2)}/cell")
        text.append(f" · gaps ≥ {fmt_duration(timeline.gap_threshold)}")
        gap = timeline.current_gap
        if gap >= 0:
            length = int(data.gaps.end[gap] - data.gaps.start[gap])
            gap_style = palette_of(self).style("error", bold=True)
            text.append(f" · GAP {fmt_duration(length)} {data.gap_cause(gap)}", gap_style)
            stack = cpu_stack_for_gap(data, gap)
            if stack:  # innermost last, cut at the front so that the innermost frame shows
                status = self.query("#status")
                width = status.first().content_region.width if status else 120
                room = width - text.cell_len - len(" · CPU: ")
                tail = stack_tail(stack, 3, 48, room=room - len(" · ? keys"))
                fuller = stack_tail(stack, 3, 48, room=room)
                if cell_len(fuller) > cell_len(tail):  # the stack has the room, not the hint
                    text.append(" · CPU: " + fuller)
                    return text
                text.append(" · CPU: " + tail)
        elif timeline.selected_row >= 0:
            row = timeline.selected_row
            text.append(" · ")
            text.append(shorten(data.trace.name_of(row), 60), "bold")
            text.append(f" {fmt_duration(int(data.trace.dur[row]))}")
        elif self.top_finding:
            top = self.top_finding
            colour = {"critical": "error", "warning": "warning"}.get(top.severity, "info")
            text.append(" · top: ")
            text.append(f"{top.severity.upper()} {top.rule}", palette_of(self).style(colour))
            text.append(f" {clean(top.headline)} (t)")
            return text
        text.append(" · ? keys", "dim")
        return text

    def action_threshold(self, direction: int) -> None:
        current = self.timeline.gap_threshold
        if direction > 0:
            bigger = [t for t in GAP_THRESHOLDS if t > current]
            new = bigger[0] if bigger else current
        else:
            smaller = [t for t in GAP_THRESHOLDS if t < current]
            new = smaller[-1] if smaller else current
        self.timeline.gap_threshold = new
        self.notify(f"g/G skip GPU idle gaps shorter than {fmt_duration(new)}", timeout=2)

    def action_save_csv_hint(self) -> None:
        """`W` saves a table; the timeline has none: say where it works."""
        self.notify(
            "W saves a table as CSV: open one first (o operators, k kernels, t findings, "
            "v steps, i idle gaps, p memory, b syncs, c compile)",
            timeout=4,
            markup=False,
        )

    def action_clear(self) -> None:
        self.timeline.selected_row = -1
        self.timeline.current_gap = -1


# Up to this many rows the gap list waits for the nesting (a fraction of a second) rather than
# leaving its idle-by-operator line for later.
IDLE_BY_CPU_WAIT_ROWS = 1_000_000


def idle_by_cpu_text(data: ViewData, limit: int = 4) -> Text:
    """All GPU idle (every gap, however short) totalled by the CPU operator running during
    the gaps: idle spread over many short gaps shows up here, not in the list of the longest."""
    from kinetoscope.analysis.session import AnalysisFailed

    # It wraps (up to four lines, #gap-by-cpu in kinetoscope.tcss) rather than being cut.
    text = Text()
    if not len(data.gaps):
        return text
    text.append("All idle by CPU op running: ", "bold")
    session = data.session
    if not session.nesting_ready and len(data.trace) > IDLE_BY_CPU_WAIT_ROWS:
        # The nesting of a big trace is still being built: do not wait for it here.
        text.append("known once the trace is fully loaded (press i again)", "dim")
        return text
    try:
        table = session.idle_by_cpu
    except AnalysisFailed as error:  # the list of gaps is still useful without it
        text.append(f"could not be computed ({error})", "dim")
        return text
    total = int(data.gaps.length.sum())
    parts = []
    for i in range(min(limit, len(table))):
        name = shorten(data.trace.strings[int(table.name[i])], 30)
        share = 100 * int(table.idle[i]) / max(total, 1)
        idle, count = fmt_duration(int(table.idle[i])), int(table.gaps[i])
        parts.append(f"{name} {idle} ({share:.0f}%, {plural(count, 'gap')})")
    if table.unattributed_gaps:
        parts.append(f"no CPU slice {fmt_duration(table.unattributed_idle)}")
    text.append(" · ".join(parts))
    return text


class GapListScreen(SavesCsv, ModalScreen[int]):
    """GPU idle gaps at least as long as the threshold, longest first; Enter jumps to one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_none", "Close"),
        Binding("i", "dismiss_none", "Close", show=False),
        Binding("q", "dismiss_none", "Close", show=False),
        # A modal screen hides the app's keys: `?` is bound here too, as it works everywhere.
        Binding("question_mark", "app.help", "Keys", show=False),
        SAVE_CSV_BINDING,
        Binding("n", "page(1)", "Next gaps", show=False, tooltip="The next page of gaps"),
        Binding("p", "page(-1)", "Previous gaps", show=False, tooltip="The previous page"),
        Binding(
            "e",
            "export_gap",
            "Export",
            show=False,
            tooltip="Export the selected gap, its length of context on each side, as a trace",
        ),
    ]
    HELP_TITLE = "Idle gaps (i)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            *GapListScreen.BINDINGS,
            Binding("up,down,pageup,pagedown,home,end", "table_move", "Move in the list"),
            Binding("enter", "table_choose", "Jump to the gap on the timeline"),
        ]

    def __init__(self, data: ViewData, threshold: int) -> None:
        super().__init__()
        self.data = data
        self.threshold = threshold
        gaps = data.gaps
        order = gaps.longest()
        # Every gap at least the threshold long (W saves them all); the list shows the first.
        self.all_gaps = order[(gaps.end[order] - gaps.start[order]) >= threshold]
        self.first = 0  # the list shows GAP_LIST_LIMIT of them at a time, from this one
        self.order = self.all_gaps[:GAP_LIST_LIMIT]

    def csv_export(self) -> tuple[Table, np.ndarray]:
        table = gaps_table(GapRows.of(self.data.trace, self.data.gaps, self.all_gaps))
        return table, table.order

    def title_text(self) -> Text:
        total, shown = len(self.all_gaps), len(self.order)
        head = f"GPU idle gaps ≥ {fmt_duration(self.threshold)}, longest first "
        if shown == total:
            return Text(f"{head}({total:,} shown) · Enter jumps · Esc closes")
        # More than one page: which ones are shown, and the keys to the others.
        first, last = self.first + 1, self.first + shown
        keys = []
        if last < total:
            keys.append("n next")
        if self.first:
            keys.append("p previous")
        return Text(
            f"{head}(#{first:,}-{last:,} of {total:,}; {' · '.join(keys)}; W saves all) "
            "· Enter jumps · Esc closes"
        )

    def compose(self) -> ComposeResult:
        with Vertical(id="gap-box"):
            yield Static(self.title_text(), id="gap-title")
            yield Static(idle_by_cpu_text(self.data), id="gap-by-cpu")
            yield DataTable(id="gap-table", cursor_type="row", zebra_stripes=True)

    def action_page(self, step: int) -> None:
        """`n` / `p`: the next or previous GAP_LIST_LIMIT gaps."""
        first = self.first + step * GAP_LIST_LIMIT
        if not 0 <= first < len(self.all_gaps):
            self.notify(
                "No more gaps this way"
                if len(self.all_gaps) > GAP_LIST_LIMIT
                else "Every gap is shown",
                timeout=3,
                markup=False,
            )
            return
        self.first = first
        self.order = self.all_gaps[first : first + GAP_LIST_LIMIT]
        table = self.query_one(DataTable)
        table.clear()
        self._fill(table)
        table.move_cursor(row=0)
        self.query_one("#gap-title", Static).update(self.title_text())

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("#", "GPU", "start", "length", "cause", "next GPU event")
        self._fill(table)
        table.focus()

    def _fill(self, table: DataTable) -> None:
        titles = ("#", "GPU", "start", "length", "cause", "next GPU event")
        data = self.data
        gaps = data.gaps
        rows = [
            (
                str(rank),
                str(int(gaps.device[gap])),
                time_cell(int(gaps.start[gap]) - data.origin, "+"),
                time_cell(int(gaps.end[gap] - gaps.start[gap])),
                data.gap_cause(gap),
            )
            for rank, gap in enumerate(self.order.tolist(), start=self.first + 1)
        ]
        # The names take the room the other columns leave in the box (90% of the screen, its
        # border, the scrollbar; each column has a cell of padding on both sides).
        widths = [cell_len(title) for title in titles[:-1]]
        for cells in rows:
            lengths = [c.cell_len if isinstance(c, Text) else cell_len(c) for c in cells]
            widths = [max(w, n) for w, n in zip(widths, lengths, strict=True)]
        room = int(self.app.size.width * 0.9) - 2 - 2 - sum(w + 2 for w in widths) - 2
        name_width = max(16, room)
        for cells, gap in zip(rows, self.order.tolist(), strict=True):
            name = fit_name(data.trace.name_of(int(gaps.next_row[gap])), name_width)
            table.add_row(*cells, Text(name), key=str(gap))

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        self.dismiss(int(message.row_key.value))

    def action_dismiss_none(self) -> None:
        self.dismiss(-1)

    def action_export_gap(self) -> None:
        """`e`: the selected gap with its own length on each side, as `kinetoscope export
        --around-gap K` cuts it (tui/trace/exporting.py)."""
        from kinetoscope.tui.trace.exporting import export_stem, start_export

        from kinetoscope.export.crop import ExportError, gap_window

        table = self.query_one(DataTable)
        if not len(self.order) or not 0 <= table.cursor_row < len(self.order):
            self.notify("No gap to export", timeout=3, markup=False)
            return
        gap = int(self.order[table.cursor_row])
        rank = int(np.flatnonzero(self.data.gaps.longest() == gap)[0]) + 1
        session = self.data.session
        try:
            window = gap_window(session, rank)
        except ExportError as error:
            self.notify(str(error), severity="error", timeout=6, markup=False)
            return
        stem = export_stem(session.trace.source.path, f"gap{rank}")
        start_export(self, session, window, f"gap #{rank} with its context", stem)
