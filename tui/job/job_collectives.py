"""The job's matched collectives as a table (key `c` on the ranks overview): per collective its
kind, group, step, latency, start and end skew, the rank that came last, the longest wait,
the payload, algorithm and bus bandwidth, and each rank's arrival as a strip: one character
per rank (or per few ranks when there are many), its height the rank's start within the
collective's start skew (low: early, and waiting; full: the last to arrive).

Sortable and filterable as every table; Enter shows the collective on the timeline of the rank
that waited longest for it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from kinetoscope.analysis.units import fmt_bytes, fmt_duration, fmt_table_time, plural
from kinetoscope.tui.job.job_ranks import short_step
from kinetoscope.tui.widgets.table import Column, DataView, TableModel, TableScreen
from kinetoscope.tui.widgets.theme import current_palette, palette_of
from rich.text import Text
from textual.binding import Binding, BindingType

from kinetoscope.present.safe_text import clean
from kinetoscope.present.tables import Table, collectives_table

if TYPE_CHECKING:
    from kinetoscope.analysis.job import JobAnalysis

STRIP_GLYPHS = "▁▂▃▄▅▆▇█"
STRIP_MAX = 32  # cells of the arrival strip, at most


def arrival_levels(job: JobAnalysis, i: int, width: int) -> list[int | None]:
    """Per strip cell (`width` cells over the job's ranks in order): 0..7, the latest start in
    that cell's ranks within collective i's start window (None: no rank of the cell took part)."""
    m = job.matched
    present = m.present[i]
    starts = m.start[i]
    taking = starts[present]
    if not len(taking):
        return [None] * width
    low, high = int(taking.min()), int(taking.max())
    ranks = len(m.ranks)
    cells: list[int | None] = []
    for c in range(width):
        lo, hi = c * ranks // width, max((c + 1) * ranks // width, c * ranks // width + 1)
        chosen = [int(starts[j]) for j in range(lo, min(hi, ranks)) if present[j]]
        if not chosen:
            cells.append(None)
            continue
        share = 1.0 if high == low else (max(chosen) - low) / (high - low)
        # The full glyph only for the last to arrive.
        cells.append(int(share * (len(STRIP_GLYPHS) - 1)))
    return cells


def arrival_strip(job: JobAnalysis, i: int) -> Text:
    width = min(len(job.matched.ranks), STRIP_MAX)
    palette = current_palette()
    text = Text(no_wrap=True)
    for level in arrival_levels(job, i, width):
        if level is None:
            text.append("·", palette.style("muted"))
        elif level == len(STRIP_GLYPHS) - 1:
            text.append(STRIP_GLYPHS[level], palette.style("error"))
        else:
            text.append(STRIP_GLYPHS[level], palette.style("gpu"))
    return text


def collectives_model(job: JobAnalysis) -> TableModel:
    m = job.matched
    n = len(m)
    labels = [f"{m.kind[i]} #{m.index[i]}" for i in range(n)]
    steps = [m.step[i] or "–" for i in range(n)]
    latency = np.asarray(job.latency, float)
    start_skew = np.asarray(job.start_skew, float)
    end_skew = np.asarray(job.end_skew, float)
    last = np.array([m.ranks[int(job.last[i])] for i in range(n)], np.int64)
    size = np.where(m.bytes >= 0, m.bytes, -1).astype(np.int64) if n else np.zeros(0, np.int64)
    algbw = np.asarray(job.algbw, float)
    busbw = np.asarray(job.busbw, float)
    order = np.arange(n)

    def time_col(title: str, values: np.ndarray, width: int = 10, optional: bool = False) -> Column:
        return Column(
            title,
            lambda i: fmt_table_time(float(values[i])),
            key=values,
            width=width,
            optional=optional,
        )

    def rate(values: np.ndarray, i: int) -> str:  # GB/s (10^9 bytes)
        return "–" if math.isnan(values[i]) else f"{values[i] / 1e9:.2f}G"

    def keyed(texts: list[str]) -> np.ndarray:
        distinct = sorted(set(texts), key=str.lower)
        rank = {t: k for k, t in enumerate(distinct)}
        return np.array([rank[t] for t in texts], np.int64)

    strip_width = max(8, min(len(m.ranks), STRIP_MAX))
    columns = [
        Column("#", lambda i: f"{i + 1:,}", key=order, width=4, largest_first=False),
        Column("collective", lambda i: labels[i], key=keyed(labels), width=0, numeric=False),
        Column(
            "group", lambda i: m.group[i], key=keyed(m.group), width=9, numeric=False, optional=True
        ),
        Column("step", lambda i: short_step(steps[i]), key=keyed(steps), width=10, numeric=False),
        time_col("latency", latency),
        time_col("start skew", start_skew, 11),
        time_col("end skew", end_skew, optional=True),
        Column("last", lambda i: str(last[i]), key=last, width=5),
        Column(
            "size",
            lambda i: "–" if size[i] < 0 else fmt_bytes(int(size[i])),
            key=size,
            width=10,
            optional=True,
        ),
        Column("algbw", lambda i: rate(algbw, i), key=algbw, width=8, optional=True),
        Column("busbw", lambda i: rate(busbw, i), key=busbw, width=8, optional=True),
        # The waits stay at 80 columns (start skew, last rank, the arrival strip): the optional
        # columns are hidden first, the rightmost first.
        Column(
            "arrival",
            lambda i: arrival_strip(job, i),
            key=start_skew,
            width=strip_width,
            numeric=False,
        ),
    ]
    return TableModel(
        columns=columns,
        n=n,
        names=order,
        name_text=lambda i: (labels[i], m.name[i], m.group[i], steps[i]),
        default_sort=5,  # by start skew, largest first, as the summary lists them
        keys=order,
        name_room=16,
    )


class CollectivesScreen(TableScreen):
    """The matched collectives (see the module docstring)."""

    TITLE_TEXT = "Collectives"
    SHOW_DETAIL = True
    DETAIL_CLASSES = "table-detail"
    FILTER_HINT = "type to filter by kind, kernel name, group or step · re:… for a regex"
    FAILURE_SUBJECT = "the collectives"
    BINDINGS: ClassVar[list[BindingType]] = []
    HELP_TITLE = "Collectives (c)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            Binding("enter", "choose", "Show it on the timeline of the rank that waited longest"),
            *DataView.BINDINGS,  # Enter's line above is the table's (the same action)
            *TableScreen.BINDINGS,
        ]

    def __init__(self, job: JobAnalysis) -> None:
        super().__init__()
        self.job = job

    def on_mount(self) -> None:
        super().on_mount()
        self.table.set_model(collectives_model(self.job))
        if not len(self.job.matched):
            reasons = [s.get("reason", "") for s in self.job.matched.stops]
            self.query_one("#table-detail").update(
                Text(
                    "No collective matched across ranks"
                    + (f": {clean(reasons[0])}" if reasons else ""),
                    palette_of(self).style("warning", bold=True),
                )
            )

    def heading(self) -> Text:
        job = self.job
        text = Text()
        text.append("Collectives", "bold")
        source = "GPU kernels" if job.matched.source == "gpu" else "CPU backend annotations"
        text.append(f" matched across ranks, from {source}")
        text.append(" · clocks aligned" if job.aligned else " · clocks as recorded")
        text.append(" · Enter: on the timeline of the rank that waited longest", "dim")
        return text

    def csv_table(self) -> Table:
        return collectives_table(self.job)

    def csv_source(self) -> str:
        return getattr(self.app, "inputs", ["job"])[0]

    def longest_waiter(self, i: int) -> int:
        """Column (in matched.ranks) of the rank that waited longest for collective i."""
        waits = np.where(self.job.matched.present[i], self.job.wait[i], -1)
        return int(np.argmax(waits))

    def describe(self, row: int) -> Text | None:
        job = self.job
        m = job.matched
        palette = palette_of(self)
        text = Text(no_wrap=False)
        text.append(f"{m.kind[row]} #{m.index[row]}", "bold")
        text.append(f" · {clean(m.name[row])} · group {clean(m.group[row])}")
        text.append(f" · {plural(int(m.present[row].sum()), 'rank')}")
        if m.bytes[row] >= 0:
            text.append(f" · {fmt_bytes(int(m.bytes[row]))}")
        for title, values in (("algbw", job.algbw), ("busbw", job.busbw)):
            if not math.isnan(values[row]):
                text.append(f" · {title} {values[row] / 1e9:.3f} GB/s")
        text.append(
            f" · latency {fmt_duration(int(job.latency[row]))}"
            f" · start skew {fmt_duration(int(job.start_skew[row]))}"
            f" · end skew {fmt_duration(int(job.end_skew[row]))}"
        )
        text.append("\nwaits: ", "bold")
        last = int(job.last[row])
        parts = []
        for j, rank in enumerate(m.ranks):
            if not m.present[row, j]:
                continue
            mark = "" if j == last or job.significant[row, j] else "*"
            parts.append((rank, f"{rank}: {fmt_duration(int(job.wait[row, j]))}{mark}", j == last))
        for k, (_rank, part, is_last) in enumerate(parts):
            if k:
                text.append(", ")
            text.append(part, palette.style("error", bold=True) if is_last else None)
        if any(p[1].endswith("*") for p in parts):
            text.append("  (* within the clock uncertainty)", "dim")
        waiter = m.ranks[self.longest_waiter(row)]
        text.append(f"\nEnter: rank {waiter}'s timeline (it waited longest)", "dim")
        return text

    def target(self, row: int) -> tuple[int, tuple[int, int], int]:
        """Where collective `row` is shown: (the rank that waited longest for it, the
        collective's start and end on that rank (its clock), its event's row there or -1)."""
        job = self.job
        m = job.matched
        j = self.longest_waiter(row)
        rank = m.ranks[j]
        event = -1
        entry = job.entry(rank)
        position = int(m.position[row, j])
        if entry is not None and position >= 0:
            found = entry.digest.collectives.get(m.source)
            if found is not None and position < len(found):
                event = int(found.row[position])
        return rank, (int(m.start[row, j]), int(m.end[row, j])), event

    def choose(self, row: int) -> None:
        rank, window, event = self.target(row)
        self.app.open_collective(rank, window, event, row)
