"""Findings (`t`): the triage's findings, one per cause (the findings of other rules it
explains inside it), most severe first, each with its advice; Enter shows the evidence on the
timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np
from kinetoscope.analysis.rules import cause_members
from kinetoscope.analysis.units import fmt_duration
from kinetoscope.tui.data.places import Jump
from kinetoscope.tui.widgets.columns import columns_of
from kinetoscope.tui.widgets.table import TableModel, TableScreen
from kinetoscope.tui.widgets.theme import current_palette
from rich.text import Text
from textual import work
from textual.binding import BindingType
from textual.widgets import Static

from kinetoscope.present.safe_text import clean, fit_name
from kinetoscope.present.tables import Table, findings_table

if TYPE_CHECKING:
    from kinetoscope.tui.trace.drilldown import DrilldownActions

SEVERITY_COLOUR = {"critical": "error", "warning": "warning", "info": "info"}  # palette names


class FindingsScreen(TableScreen):
    """One row per finding; the pane below gives the highlighted one's advice and evidence."""

    BINDINGS: ClassVar[list[BindingType]] = []
    HELP_TITLE = "Findings (t)"  # the key help's section (tui/palette.py)
    SHOW_DETAIL = True
    TITLE_TEXT = "Findings"
    FILTER_HINT = "type to filter by rule or message · re:… for a regular expression"
    FAILURE_SUBJECT = "findings"

    def __init__(self, host: DrilldownActions) -> None:
        super().__init__()
        self.host = host
        self.data = host.data
        self.findings: list | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.refresh_heading()
        self._compute()

    def heading(self) -> Text:
        text = Text("Findings", "bold")
        text.append(" one per cause, most severe first · Enter shows the evidence")
        if self.findings is None and self.failure is None:
            text.append(" · computing…")
        return text

    @work(thread=True, exclusive=True, group="findings", exit_on_error=False)
    def _compute(self) -> None:
        findings = list(self.data.session.causes)
        self.app.call_from_thread(self._show, findings)

    def _show(self, findings: list) -> None:
        self.findings = findings
        self.table.set_model(findings_model(findings))
        self.refresh_heading()
        if not findings:
            self.query_one("#table-detail", Static).update(
                Text(
                    "No rule fired: nothing stood out. The operator (o) and kernel (k) tables "
                    "still show where the time goes."
                )
            )

    def csv_table(self) -> Table | None:
        # One row per rule's finding, as `summary --csv` writes it: each cause shown, then the
        # findings it explains (csv_export puts the rows in the order shown).
        return None if self.findings is None else findings_table(cause_members(self.findings))

    def csv_export(self):
        export = super().csv_export()
        if export is None or not self.findings:
            return export
        table, shown = export
        first, at = [], 0
        for cause in self.findings:
            first.append(at)
            at += 1 + len(cause.supports)
        rows = [
            first[int(c)] + k for c in shown for k in range(1 + len(self.findings[int(c)].supports))
        ]
        return table, np.array(rows, dtype=np.int64)

    def describe(self, row: int) -> Text | None:
        return describe_finding(self.data, self.findings[row]) if self.findings else None

    def choose(self, row: int) -> None:
        if not self.findings:
            return
        self.host.show_on_timeline(evidence_jump(self.findings[row]))


def findings_model(findings: list) -> TableModel:
    """One row per cause; its columns are the findings table's (present/tables.py)."""
    texts = [
        " ".join([f.rule, f.message, *(f"{s.rule} {s.message}" for s in f.supports)])
        for f in findings
    ]
    return TableModel(
        columns=columns_of(findings_table(findings)),
        n=len(findings),
        names=np.arange(len(findings)),
        name_text=texts.__getitem__,
        default_sort=0,
    )


def evidence_jump(finding) -> Jump:
    """Select the most telling row and show the evidence range (or the row, if no range)."""
    row = int(finding.rows[0]) if finding.rows else -1
    if finding.dur > 0:
        return Jump(row=row, start=int(finding.start), end=int(finding.start + finding.dur))
    if row >= 0:
        return Jump(row=row)
    # A point in time (e.g. a memory peak): a millisecond around it.
    return Jump(start=int(finding.start) - 500_000, end=int(finding.start) + 500_000)


def describe_finding(data, finding) -> Text:
    text = Text()
    palette = current_palette()
    colour = SEVERITY_COLOUR.get(finding.severity)
    text.append(f"{finding.severity.upper()} ", palette.style(colour, bold=True))
    text.append(finding.rule, "bold")
    if finding.device is not None:
        text.append(f" · GPU {finding.device}")
    text.append("\n")
    text.append(clean(finding.message))
    text.append("\n")
    for support in finding.supports:
        text.append("supporting evidence, ", palette.style("muted", bold=True))
        text.append(f"{support.rule} ({support.severity}): ", "bold")
        text.append(clean(support.message))
        text.append("\n")
    text.append("evidence: ", palette.style("muted", bold=True))
    text.append(
        f"+{fmt_duration(int(finding.start) - data.origin)} for {fmt_duration(int(finding.dur))}"
    )
    if finding.rows:
        names = ", ".join(fit_name(data.trace.name_of(int(r)), 40) for r in finding.rows[:3])
        text.append(f" · {names}")
    text.append(" · Enter shows it on the timeline", "dim")
    return text
