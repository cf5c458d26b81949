"""A rule's finding and the three severities: what the rules (rules.py) and the oddities
(oddities.py) report, what the summary, the viewer's findings screen and `check` read. Its own
module, below both, so that neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .units import us

if TYPE_CHECKING:
    from .intervals import Union

INFO, WARNING, CRITICAL = "info", "warning", "critical"
SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, INFO: 2}


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    message: str  # what was seen, then what to try
    start: int  # ns: the range that shows it
    dur: int
    device: int | None = None
    rows: tuple[int, ...] = field(default=())  # trace rows to jump to, most telling first
    # The time at stake (ns): the GPU idle it explains for the idle rules, else the time the
    # rule measured (DataLoader time, exposed communication, compile time ...); 0 when the
    # finding measures no time (memory, oddities).
    stake: int = 0
    title: str = ""  # one line: what, and where to look (the summary's "What to fix")
    # (device, the GPU idle time on it the finding explains), for grouping findings that
    # explain the same stretch of GPU time into one (group_findings); None for the others.
    claim: tuple[int, Union] | None = field(default=None, compare=False, repr=False)
    # A finding of group_findings: the other rules' findings this one explains, each as the
    # rule gave it (no evidence lost); empty for a rule's own finding.
    supports: tuple[Finding, ...] = field(default=(), compare=False)
    # A finding of group_findings: its primary finding as the rule gave it (own severity and
    # rows); None for a rule's own finding.
    own: Finding | None = field(default=None, compare=False, repr=False)

    @property
    def headline(self) -> str:
        """`title`, else the message's first sentence."""
        if self.title:
            return self.title
        first = self.message.split(". ", 1)[0]
        return first if first.endswith(".") else first + "."

    def to_json(self, trace: Any = None) -> dict[str, Any]:
        evidence: dict[str, Any] = {
            "start_us": us(self.start),
            "dur_us": us(self.dur),
        }
        if self.device is not None:
            evidence["device"] = self.device
        if trace is not None and self.rows:
            evidence["events"] = [
                {
                    "name": trace.name_of(r),
                    "start_us": us(trace.start[r]),
                    "dur_us": us(trace.dur[r]),
                }
                for r in self.rows
            ]
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "evidence": evidence,
        }
