"""Durations as Rich cells of the viewer's tables. The text itself, and the rules it follows,
come from `kinetoscope.analysis.units`, which the summary uses too."""

from __future__ import annotations

from kinetoscope.analysis.units import fmt_table_time
from rich.text import Text


def time_cell(ns: float, prefix: str = "") -> Text:
    """A duration for a cell of a Textual DataTable: fmt_table_time, right-aligned."""
    return Text(prefix + fmt_table_time(ns), justify="right")
