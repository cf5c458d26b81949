"""The job viewer's first screen: a rank × step matrix (step time, or collective wait), shaded by
value, the straggler marked, the cell under the cursor described, and the per-rank breakdown
below it (a sortable table).

Enter on a cell opens that rank's own timeline at that step (the app loads the rank's full
model only then); `s` goes straight to the straggler's step with the most excess over the
median rank; `c` lists the matched
collectives. Other screens that show a time window of some ranks (the multi-rank timeline)
hook in through `RanksScreen.open_timeline`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from kinetoscope.analysis.job import (
    ANNOTATION,
    annotation_values,
    clock_reference,
    offset_significant,
    phase_breakdown,
    phase_label,
    phase_values,
    straggler_reason,
)
from kinetoscope.analysis.units import fmt_duration, fmt_table_time, plural
from kinetoscope.parser.rank_exit import peer_error
from kinetoscope.tui.widgets.render import PLAIN
from kinetoscope.tui.widgets.table import Column, DataView, SavesCsv, TableModel
from kinetoscope.tui.widgets.theme import palette_of
from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Static

from kinetoscope.present.safe_text import clean, cut_end, pad
from kinetoscope.present.tables import Table, rank_steps_table, ranks_table

if TYPE_CHECKING:
    from kinetoscope.analysis.job import JobAnalysis, RankEntry

LABEL_WIDTH = 17  # the rank column of the matrix
CELL_WIDTH = 12  # one step's cell: a shade glyph and a duration
CELL_LINES = 3  # the pane that says the cell under the cursor in words (its max-height)
TITLE_LINES = 3  # the overview's title (its max-height)
# Shades, lowest quarter of the matrix's range first: a glyph (kept under NO_COLOR) and a
# background from the theme (None: the table's own).
SHADE_GLYPHS = (" ", "▂", "▄", "▆")
SHADE_BACKGROUNDS: tuple[str | None, ...] = (None, "idle", "memory-cursor", "gap")
MODES = ("dur", "wait")
STATUS_ORDER = ("ok", "incomplete", "stopped", "knock-on", "failed", "not loaded", "missing")
MODE_TEXT = {"dur": "step time", "wait": "collective wait"}
_STEP_NUMBER = re.compile(r"(\d+)\s*$")


# -- what the screens read of a job ------------------------------------------------------------


@dataclass(frozen=True)
class RankRow:
    """One row of the overview: a rank with its entry, or a rank of the job with no file."""

    rank: int
    entry: RankEntry | None

    @property
    def status(self) -> str:
        entry = self.entry
        if entry is None:
            return "missing"
        if not entry.loaded:
            return "not loaded"
        if entry.exit is not None and not entry.exit.clean:
            if entry.exit.failed and entry.knock_on_of is not None:
                return "knock-on"  # it failed because a peer failed first
            return "failed" if entry.exit.failed else "stopped"
        return "ok" if entry.digest.complete else "incomplete"

    @property
    def problem(self) -> str | None:
        """Why the rank is missing, not loaded or incomplete (one line), or None."""
        entry = self.entry
        if entry is None:
            return "no file for this rank in the chosen profiling cycle"
        if not entry.loaded:
            return entry.digest.error
        if entry.exit is not None and not entry.exit.clean:
            if entry.knock_on_of is not None:
                return _knock_on_said(entry)
            return entry.exit.describe()
        if not entry.digest.complete:
            warnings = entry.digest.warnings
            return warnings[0] if warnings else "the file ends before the JSON does"
        return None


def _knock_on_said(entry: RankEntry) -> str:
    """`stopped because its peer rank 2 failed first (RuntimeError at ProfilerStep#8: gloo:
    connection closed by peer); its trace is partial`."""
    assert entry.exit is not None
    where = f" at ProfilerStep#{entry.exit.step}" if entry.exit.step is not None else ""
    text = f"stopped because its peer rank {entry.knock_on_of} failed first"
    text += f" ({entry.exit.exception}{where}: {peer_error(entry.exit) or 'a peer error'})"
    tail = entry.exit.describe().partition(";")[2]
    return text + (f";{tail}" if tail else "")


def _said(row: RankRow) -> str:
    """A rank's problem in the header: how its program ended when capture recorded it
    (`exited with RuntimeError at ProfilerStep#8; its trace is partial`), else its status."""
    entry = row.entry
    if entry is not None and entry.loaded and entry.exit is not None and not entry.exit.clean:
        return entry.exit.describe()
    return row.status


def clock_words(job: JobAnalysis) -> str:
    """The header's word on the clocks: one host's one clock, aligned, or as recorded."""
    if job.clock.one_host:
        host = clean(job.clock.hosts[0]) if job.clock.hosts else "?"
        return f"one clock (host {host}){', aligned anyway' if job.aligned else ''}"
    return "clocks aligned" if job.aligned else "clocks as recorded"


def rank_rows(job: JobAnalysis) -> list[RankRow]:
    """Every rank of the job, in rank order: those with a file and those missing."""
    rows = [RankRow(e.rank, e) for e in job.ranks]
    rows += [RankRow(r, None) for r in job.missing]
    return sorted(rows, key=lambda r: r.rank)


def step_names(job: JobAnalysis) -> list[str]:
    """The steps any rank recorded, by their number (ProfilerStep#N), else first seen."""
    seen: dict[str, int] = {}
    for entry in job.ranks:
        if entry.loaded:
            for name in entry.digest.step_names:
                seen.setdefault(name, len(seen))

    def key(name: str) -> tuple[int, int]:
        number = _STEP_NUMBER.search(name)
        return (int(number.group(1)) if number else 1 << 62, seen[name])

    return sorted(seen, key=key)


def step_value(entry: RankEntry | None, step: str, mode: str) -> int | None:
    """The rank's step time or collective wait in `step` (ns), None where it has no such step."""
    if entry is None or not entry.loaded:
        return None
    names = entry.digest.step_names
    if step not in names:
        return None
    k = names.index(step)
    if mode == "wait":
        return int(entry.step_wait_ns[k]) if len(entry.step_wait_ns) > k else 0
    column = entry.digest.steps.get("dur")
    return int(column[k]) if column is not None and len(column) > k else None


def step_window(entry: RankEntry, step: str) -> tuple[int, int] | None:
    """The step's start and end (absolute ns, the rank's own clock), or None."""
    names = entry.digest.step_names
    if step not in names:
        return None
    k = names.index(step)
    start = int(entry.digest.step_start[k])
    return start, start + int(entry.digest.steps["dur"][k])


def straggler_rank(job: JobAnalysis) -> int | None:
    return job.straggler["rank"] if job.straggler else None


def slowest_step(job: JobAnalysis, rank: int) -> str | None:
    """The straggler's step that explains most of its lateness (the analysis's `worst_step`);
    for another rank, or without one, the rank's longest step."""
    straggler = job.straggler
    if straggler and straggler.get("rank") == rank and straggler.get("worst_step"):
        return str(straggler["worst_step"])
    entry = job.entry(rank)
    if entry is None or not entry.loaded or not entry.digest.step_names:
        return None
    durations = entry.digest.steps.get("dur")
    if durations is None or not len(durations):
        return entry.digest.step_names[0]
    return entry.digest.step_names[int(np.argmax(durations))]


def _mean(values: np.ndarray | None) -> float:
    return float(np.mean(values)) if values is not None and len(values) else math.nan


def rank_breakdown(row: RankRow) -> dict[str, float]:
    """Per step means of step time, compute, exposed communication and idle; total wait;
    clock offset and its spread (ns; NaN where unknown)."""
    entry = row.entry
    nan = math.nan
    out = dict.fromkeys(("steps", "dur", "compute", "comm", "idle", "wait", "offset"), nan)
    out["spread"] = nan
    if entry is None or not entry.loaded:
        return out
    digest = entry.digest
    steps = digest.steps
    out["steps"] = float(len(digest.step_names))
    out["dur"] = _mean(steps.get("dur"))
    if digest.has_gpu:  # GPU columns, as the steps' (none for a CPU-only rank)
        out["compute"] = _mean(steps.get("compute"))
        out["comm"] = _mean(steps.get("comm"))
        out["idle"] = _mean(steps.get("idle"))
    out["wait"] = float(entry.wait_ns)
    if entry.offset_ns is not None:
        out["offset"] = float(entry.offset_ns)
        out["spread"] = float(entry.spread_ns or 0.0)
    return out


def short_step(name: str) -> str:
    """`ProfilerStep#12` -> `step 12`; other names as they are."""
    number = _STEP_NUMBER.search(name)
    if name.startswith("ProfilerStep") and number:
        return f"step {number.group(1)}"
    return name


def _time(value: float) -> str:
    return "–" if math.isnan(value) else fmt_table_time(value)


# -- the matrix --------------------------------------------------------------------------------


class RankMatrix(ScrollView, can_focus=True):
    """Ranks down, steps across; a cell is the rank's step time (or wait), shaded by its place
    between the matrix's smallest and largest value. Arrows move the cell cursor."""

    DEFAULT_CSS = """
    RankMatrix { height: auto; max-height: 60%; scrollbar-size-vertical: 1; overflow-x: hidden; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(0, -1)", "Up", show=False),
        Binding("down", "move(0, 1)", "Down", show=False),
        Binding("left", "move(-1, 0)", "Previous step", show=False),
        Binding("right", "move(1, 0)", "Next step", show=False),
        Binding("home", "edge(0)", "First rank", show=False),
        Binding("end", "edge(1)", "Last rank", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
    ]

    class Moved(Message):
        """The cursor is on (row, step) now."""

    class Chosen(Message):
        """Enter (or a second click) on the cell (rank, step)."""

        def __init__(self, rank: int, step: str | None) -> None:
            super().__init__()
            self.rank = rank
            self.step = step

    def __init__(self, job: JobAnalysis, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = "dur"
        self.row = 0
        self.step = 0
        self.first_step = 0
        self.set_job(job)

    def set_job(self, job: JobAnalysis) -> None:
        self.job = job
        self.rows = rank_rows(job)
        self.steps = step_names(job)
        self.straggler = straggler_rank(job)
        self.row = min(self.row, max(len(self.rows) - 1, 0))
        self.step = min(self.step, max(len(self.steps) - 1, 0))
        self._rescale()
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)
        self.refresh()

    def _rescale(self) -> None:
        values = [
            v
            for row in self.rows
            for step in self.steps
            if (v := step_value(row.entry, step, self.mode)) is not None
        ]
        self.low = min(values) if values else 0
        self.high = max(values) if values else 0

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self._rescale()
        self.refresh()
        self.post_message(self.Moved())

    # -- where the cursor is ----------------------------------------------------------------

    @property
    def current(self) -> tuple[RankRow | None, str | None]:
        row = self.rows[self.row] if 0 <= self.row < len(self.rows) else None
        step = self.steps[self.step] if 0 <= self.step < len(self.steps) else None
        return row, step

    def go_to(self, rank: int, step: str | None) -> None:
        for index, row in enumerate(self.rows):
            if row.rank == rank:
                self.row = index
        if step in self.steps:
            self.step = self.steps.index(step)
        self._cursor_moved()

    def _visible_steps(self) -> int:
        width = self.scrollable_content_region.width or 80
        return max(1, (width - LABEL_WIDTH) // (CELL_WIDTH + 1))

    def _cursor_moved(self) -> None:
        shown = self._visible_steps()
        if self.step < self.first_step:
            self.first_step = self.step
        elif self.step >= self.first_step + shown:
            self.first_step = self.step - shown + 1
        height = max(1, self.scrollable_content_region.height - 1)
        top = int(self.scroll_offset.y)
        if self.row < top:
            self.scroll_to(y=self.row, animate=False, immediate=True)
        elif self.row >= top + height:
            self.scroll_to(y=self.row - height + 1, animate=False, immediate=True)
        self.refresh()
        self.post_message(self.Moved())

    def action_move(self, across: int, down: int) -> None:
        self.row = max(0, min(self.row + down, len(self.rows) - 1))
        self.step = max(0, min(self.step + across, len(self.steps) - 1))
        self._cursor_moved()

    def action_edge(self, end: int) -> None:
        self.row = len(self.rows) - 1 if end else 0
        self._cursor_moved()

    def action_page(self, direction: int) -> None:
        height = max(1, self.scrollable_content_region.height - 1)
        self.action_move(0, direction * height)

    def choose(self) -> None:
        row, step = self.current
        if row is not None:
            self.post_message(self.Chosen(row.rank, step))

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_offset.y) + event.y - 1
        if event.y == 0 or not (0 <= index < len(self.rows)):
            return
        column = (event.x - LABEL_WIDTH) // (CELL_WIDTH + 1)
        again = index == self.row
        self.row = index
        if column >= 0:
            self.step = min(self.first_step + column, max(len(self.steps) - 1, 0))
        self._cursor_moved()
        self.focus()
        if again and event.chain >= 2:
            self.choose()

    # -- drawing ----------------------------------------------------------------------------

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.rows) + 1

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, len(self.rows) + 1)
        self._cursor_moved()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def recolour(self) -> None:
        self.refresh()

    def shade(self, value: int) -> int:
        """0..3: the value's quarter of the matrix's range."""
        if self.high <= self.low:
            return 0
        return min(3, int(4 * (value - self.low) / (self.high - self.low)))

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        palette = palette_of(self)
        base = palette.style("cell")
        if y == 0:
            return self._header(width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self.rows):
            return Strip.blank(width, PLAIN)
        row = self.rows[index]
        segments = []
        label = f"{row.rank:>3}"
        if row.rank == self.straggler:
            label += " ◀ straggler"
            label_style = palette.style("error", bold=True)
        elif row.status != "ok":
            label += f" {row.status}"
            label_style = palette.style("warning", bold=True)
        else:
            label_style = palette.style("label")
        if index == self.row:
            label_style = palette.style("ink", "heading", bold=True)
        segments.append(Segment(pad(cut_end(label, LABEL_WIDTH - 1), LABEL_WIDTH), label_style))
        shown = self.steps[self.first_step : self.first_step + self._visible_steps()]
        worst = self.job.straggler.get("worst_step") if self.job.straggler else None
        for offset, step in enumerate(shown):
            k = self.first_step + offset
            value = step_value(row.entry, step, self.mode)
            if value is None:
                text = "–" if row.entry is not None and row.entry.loaded else row.status
                glyph, background = " ", None
            else:
                level = self.shade(value)
                text = fmt_table_time(value).rstrip()
                glyph, background = SHADE_GLYPHS[level], SHADE_BACKGROUNDS[level]
            marker = "*" if row.rank == self.straggler and step == worst else " "
            cell = glyph + pad(cut_end(text, CELL_WIDTH - 2), CELL_WIDTH - 2, right=True) + marker
            if index == self.row and k == self.step:
                style = (
                    palette.style("ink", "table-cursor", bold=True)
                    if self.has_focus
                    else palette.style("cell", "table-cursor-dim", bold=True)
                )
            else:
                style = palette.style("cell", background)
            segments.append(Segment(cell, style))
            segments.append(Segment(" ", base))
        return Strip(segments).adjust_cell_length(width, base)

    def _header(self, width: int) -> Strip:
        palette = palette_of(self)
        heading = palette.style("heading", bold=True)
        segments = [Segment(pad("rank", LABEL_WIDTH), heading)]
        shown = self.steps[self.first_step : self.first_step + self._visible_steps()]
        for offset, step in enumerate(shown):
            style = heading
            if self.first_step + offset == self.step:
                style = palette.style("ink", "heading", bold=True)
            title = cut_end(clean(short_step(step)), CELL_WIDTH - 1)
            segments.append(Segment(pad(title, CELL_WIDTH, right=True), style))
            segments.append(Segment(" ", heading))
        if self.first_step + len(shown) < len(self.steps):
            segments.append(Segment(f"… {len(self.steps) - self.first_step - len(shown)} more →"))
        return Strip(segments).adjust_cell_length(width, PLAIN)


# -- the per-rank breakdown --------------------------------------------------------------------


PHASE_TITLE = {
    "compute": "Δ compute",
    "communication": "Δ comm",
    "data_loading": "Δ data",
    "synchronisation": "Δ sync",
    "host_launch": "Δ launch",
    "host_other": "Δ host",
}
DELTA_WIDTH = 10
MAX_ANNOTATION_COLUMNS = 1
MAX_DELTA_COLUMNS = 4


def fmt_delta(ns: float) -> str:
    """A signed duration for a Δ cell: `+207.3 ms`, `−1.2 ms`, `0`; `–` unknown."""
    if math.isnan(ns):
        return "–"
    if ns == 0:
        return "0"
    return ("+" if ns > 0 else "−") + fmt_duration(abs(ns), 1)


def delta_phases(job: JobAnalysis, breakdown: dict[str, Any] | None) -> list[str]:
    """The phase keys shown as Δ columns: the straggler's explaining phase first, then the
    others some rank differs in from the median rank, by the largest difference; at most
    MAX_ANNOTATION_COLUMNS annotations."""
    if breakdown is None:
        return []
    ranks = breakdown["ranks"].values()

    def spread(key: str) -> int:
        return max(abs(r["excess"][key]) for r in ranks)

    keys = [k for k in breakdown["phases"] if spread(k) > 0]
    keys.sort(key=lambda k: -spread(k))
    first = explaining_phase(job)
    if first in keys:
        keys.remove(first)
        keys.insert(0, first)
    named = [k for k in keys if k.startswith(ANNOTATION + ":")]
    dropped = set(named[MAX_ANNOTATION_COLUMNS:]) - {first}
    return [k for k in keys if k not in dropped][:MAX_DELTA_COLUMNS]


def explaining_phase(job: JobAnalysis) -> str | None:
    """The straggler's phase as a breakdown key (`annotation:NAME` for an annotation)."""
    straggler = job.straggler
    if not straggler or not straggler.get("phase"):
        return None
    if straggler["phase"] == ANNOTATION:
        return f"{ANNOTATION}:{straggler.get('phase_annotation') or ''}"
    return str(straggler["phase"])


def delta_title(key: str) -> str:
    if key in PHASE_TITLE:
        return PHASE_TITLE[key]
    return "Δ " + clean(phase_label(key)).strip("'")


def breakdown_model(job: JobAnalysis) -> TableModel:
    rows = rank_rows(job)
    straggler = straggler_rank(job)
    values = [rank_breakdown(r) for r in rows]
    breakdown = phase_breakdown(job)
    deltas = delta_phases(job, breakdown)

    def column(key: str) -> np.ndarray:
        return np.array([v[key] for v in values], float)

    ranks = np.array([r.rank for r in rows], np.int64)
    offset, spread = column("offset"), column("spread")
    reference = breakdown["reference"] if breakdown else None

    def label(i: int) -> str:
        rank = rows[i].rank
        if rank == straggler:
            return f"{rank} ◀ straggler"
        return f"{rank} median" if rank == reference else f"{rank}"

    clock_ref = clock_reference(job.matched)
    quiet = [r.entry is not None and offset_significant(r.entry, clock_ref) is False for r in rows]

    def clock(i: int) -> str:
        if math.isnan(offset[i]):
            return "–"
        text = f"{fmt_duration(offset[i], 1)} ± {fmt_duration(spread[i], 1)}"
        return text + (" n.s." if quiet[i] else "")

    def time_col(title: str, key: str, optional: bool = False) -> Column:
        data = column(key)
        return Column(
            title,
            lambda i: _time(float(data[i])),
            key=data,
            width=max(10, len(title)),
            optional=optional,
        )

    def delta_col(key: str, optional: bool) -> Column:
        data = np.array(
            [
                breakdown["ranks"][r.rank]["excess"][key]
                if breakdown and r.rank in breakdown["ranks"]
                else math.nan
                for r in rows
            ],
            float,
        )
        width = DELTA_WIDTH if key in PHASE_TITLE else DELTA_WIDTH + 4
        return Column(
            cut_end(delta_title(key), width),
            lambda i: fmt_delta(float(data[i])),
            key=data,
            width=width,
            optional=optional,
        )

    steps = column("steps")
    statuses = [r.status for r in rows]
    status_key = np.array([STATUS_ORDER.index(s) for s in statuses])
    rules = [r.entry.rank_rule if r.entry is not None else "–" for r in rows]
    files = [os.path.basename(r.entry.path) if r.entry is not None else "–" for r in rows]
    gpu = any(r.entry is not None and r.entry.loaded and r.entry.digest.has_gpu for r in rows)
    columns = [
        Column("rank", label, key=ranks, width=13, numeric=False, largest_first=False),
        Column("status", lambda i: statuses[i], key=status_key, width=10, numeric=False),
        time_col("step", "dur"),
        time_col("waited", "wait"),
        *(delta_col(key, optional=k > 0) for k, key in enumerate(deltas)),
    ]
    if gpu:  # the GPU's own columns, as the steps' (none for CPU-only ranks)
        columns += [
            time_col("compute", "compute", optional=True),
            time_col("exp. comm", "comm", optional=True),
            time_col("idle", "idle", optional=True),
        ]
    columns += [
        Column(
            "steps",
            lambda i: "–" if math.isnan(steps[i]) else f"{int(steps[i])}",
            key=steps,
            width=5,
            optional=True,
        ),
        Column("clock offset", clock, key=offset, width=22, optional=True),
        Column("rank from", lambda i: rules[i], width=15, numeric=False, optional=True),
        Column("file", lambda i: files[i], width=0, numeric=False, name=True, optional=True),
    ]
    return TableModel(
        columns=columns,
        n=len(rows),
        names=np.arange(len(rows)),
        name_text=lambda i: (str(rows[i].rank), files[i], statuses[i]),
        default_sort=0,
        keys=ranks,
        name_room=8,
    )


def breakdown_title(job: JobAnalysis) -> str:
    """The per-rank table's title: what its numbers are."""
    breakdown = phase_breakdown(job)
    text = "Per rank · step: mean · waited: total"
    if breakdown is not None:
        text += (
            f" · Δ: the step's phases against the median rank ({breakdown['reference']}), "
            f"over {plural(breakdown['steps'], 'step')}"
        )
    return text + " · Tab moves here · < > sort"


# -- the screen --------------------------------------------------------------------------------


class RanksScreen(SavesCsv, Screen):
    """The ranks overview (see the module docstring)."""

    DEFAULT_CSS = """
    RanksScreen #ranks-title, RanksScreen #ranks-cell { height: auto; max-height: 3; padding: 0 1; }
    RanksScreen #ranks-title { background: $panel; }
    RanksScreen #ranks-straggler { height: auto; max-height: 2; padding: 0 1; background: $panel; }
    RanksScreen #ranks-breakdown-title { height: auto; max-height: 2; padding: 0 1; background: $panel; }
    RanksScreen DataView { height: 1fr; min-height: 3; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "enter", "open_cell", "Open rank", tooltip="Open this rank's timeline at this step"
        ),
        Binding(
            "s",
            "straggler",
            "Most excess",
            tooltip="Straggler's step with most excess",
        ),
        Binding("c", "collectives", "Collectives", tooltip="Matched collectives: skew, waits"),
        Binding(
            "t",
            "timeline",
            "Timeline",
            tooltip="Every rank on one time axis, at this step (x there: two ranks side by side)",
        ),
        Binding("w", "toggle_mode", "Time/wait", tooltip="Cells: step time or collective wait"),
        Binding(
            "a",
            "toggle_clocks",
            "Align clocks",
            show=False,
            tooltip="Subtract (or not) each rank's estimated clock offset from waits and skews",
        ),
        Binding("tab", "app.focus_next", "Matrix/table", show=False),
        Binding(
            "W",
            "save_csv",
            "Save CSV",
            show=False,
            tooltip="Save the per-rank table (from the matrix: every rank's steps) as CSV",
        ),
        Binding("question_mark", "app.help", "Keys"),
    ]
    HELP_TITLE = "Ranks overview"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            Binding("up,down,left,right", "matrix_move", "Move over ranks and steps"),
            *(b for b in RanksScreen.BINDINGS if isinstance(b, Binding) and b.key != "tab"),
            Binding("tab", "focus_next", "Between the matrix and the per-rank table (< > sort it)"),
        ]

    def __init__(self, job: JobAnalysis, title: str = "") -> None:
        super().__init__()
        self.job = job
        self.title_text = title
        self._force_align_armed = False  # `a` once on a job on one host: the next one forces

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="ranks-title")
        yield Static(self._straggler_line(), id="ranks-straggler")
        yield RankMatrix(self.job, id="ranks-matrix")
        yield Static("", id="ranks-cell")
        yield Static(self._breakdown_heading(), id="ranks-breakdown-title")
        yield DataView(breakdown_model(self.job), id="ranks-breakdown")
        yield Footer()

    @property
    def matrix(self) -> RankMatrix:
        return self.query_one(RankMatrix)

    @property
    def breakdown(self) -> DataView:
        return self.query_one(DataView)

    def on_mount(self) -> None:
        matrix = self.matrix
        matrix.focus()
        straggler = straggler_rank(self.job)
        if straggler is not None:
            matrix.go_to(straggler, slowest_step(self.job, straggler))
        self._describe()

    def csv_export(self) -> tuple[Table, np.ndarray]:
        """The per-rank table as sorted when it has the focus; else every rank's steps."""
        if self.focused is self.breakdown:
            return ranks_table(self.job), np.array(self.breakdown.view, np.int64)
        table = rank_steps_table(self.job)
        return table, table.order

    def csv_source(self) -> str:
        return getattr(self.app, "inputs", ["job"])[0]

    def set_job(self, job: JobAnalysis) -> None:
        """Show `job` (the same ranks merged again, e.g. with the clocks aligned)."""
        self.job = job
        row, step = self.matrix.current
        self.matrix.set_job(job)
        if row is not None:
            self.matrix.go_to(row.rank, step)
        self.breakdown.set_model(breakdown_model(job), keep_state=True)
        self.query_one("#ranks-title", Static).update(self._title())
        self.query_one("#ranks-straggler", Static).update(self._straggler_line())
        self.query_one("#ranks-breakdown-title", Static).update(self._breakdown_heading())
        self._describe()

    def _title(self) -> Text:
        job = self.job
        text = Text(no_wrap=False)
        text.append("kinetoscope job ", "bold")
        if self.title_text:
            text.append(clean(self.title_text) + " · ")
        loaded = sum(1 for e in job.ranks if e.loaded)
        world = job.world_size
        text.append(f"{plural(len(job.ranks), 'rank file')}, {loaded} loaded")
        if world:
            text.append(f" · world size {world}")
        text.append(f" · {plural(len(job.matched), 'collective')} matched")
        text.append(" · " + clock_words(job))
        palette = palette_of(self)
        files = job.files
        if files is not None and len(files.cycles) > 1:
            text.append(
                f" · profiling cycle {files.chosen} of {len(files.cycles)} (--cycle N picks another)"
            )
        if files is not None and files.left_out:
            first = clean(os.path.basename(files.left_out[0][0]))
            text.append(
                f" · {plural(len(files.left_out), 'file')} left out ({first}: "
                f"{clean(files.left_out[0][1])})",
                palette.style("warning"),
            )
        rows = rank_rows(job)
        # The ranks that failed because a peer failed first are said in one phrase, after the
        # failure they followed (which comes first).
        knocked = [r.rank for r in rows if r.status == "knock-on"]
        cause = job.knock_on.cause.rank if knocked and job.knock_on.cause is not None else None
        problems = [r for r in rows if r.status not in ("ok", "knock-on")]
        problems.sort(key=lambda r: r.rank != cause)
        # Missing ranks beyond those listed (a world size from a file may be anything).
        unlisted = max(0, files.missing_count - len(job.missing)) if files is not None else 0
        if problems:
            total = len(problems) + unlisted
            more = f" and {total - 6:,} more" if total > 6 else ""
            first, rest = problems[0], problems[1:6]
            knock = []
            if cause is not None:
                shown = ", ".join(str(r) for r in knocked[:8]) + (", …" if len(knocked) > 8 else "")
                one = len(knocked) == 1
                knock = [
                    f"{'rank' if one else 'ranks'} {shown} stopped after it (knock-on: "
                    f"{'its' if one else 'their'} peer rank {cause} failed first)"
                ]
            # The longest that fits the title's lines: how each rank ended, else how the
            # first did and the others' status, else every status (each row says the rest).
            forms = [
                [f"rank {r.rank} {_said(r)}" for r in problems[:1]] + knock
                + [f"rank {r.rank} {_said(r)}" for r in rest],
                [f"rank {first.rank} {_said(first)}", *knock,
                 *(f"rank {r.rank} {r.status}" for r in rest)],
                [f"rank {first.rank} {first.status}", *knock,
                 *(f"rank {r.rank} {r.status}" for r in rest)],
                [f"rank {r.rank} {r.status}" for r in problems[:6]]
                + ([f"{len(knocked)} knock-on"] if knocked else []),
            ]  # fmt: skip
            for form in forms:
                line = text.copy()
                line.append(" · " + ", ".join(form) + more, palette.style("error", bold=True))
                if self._cell_lines(line) <= TITLE_LINES:
                    break
            text = line
        return text

    def _straggler_line(self) -> Text:
        """The straggler and its reason in words, on a line of its own (wrapped at words)."""
        straggler = self.job.straggler
        palette = palette_of(self)
        text = Text(no_wrap=False, overflow="fold")
        if not straggler:
            rows = rank_rows(self.job)
            failed = [r.rank for r in rows if r.status == "failed"]
            knocked = [r.rank for r in rows if r.status == "knock-on"]
            if failed or knocked:  # as the summary says it: the dead may have taken part
                said = ", ".join(
                    f"{'rank' if len(ranks) == 1 else 'ranks'} "
                    + ", ".join(str(rank) for rank in ranks[:8])
                    + (", …" if len(ranks) > 8 else "")
                    + f" {word}"
                    for ranks, word in ((failed, "failed"), (knocked, "knock-on"))
                    if ranks
                )
                text.append(
                    "no straggler named: fewer than two ranks that did not die took part in "
                    f"matched collectives ({said})"
                )
                return text
            text.append("no straggler: fewer than two ranks took part in matched collectives")
            return text
        text.append("straggler: ")
        text.append(f"rank {straggler['rank']}", palette.style("error", bold=True))
        text.append(f" waited {fmt_duration(straggler['wait_us'] * 1000)}")
        reason = straggler_reason(straggler)
        if reason:
            text.append(" · ")
            text.append(clean(reason), palette.style("warning", bold=True))
            if straggler.get("phase"):
                text.append(f" (rank {straggler['reference_rank']})")
        elif straggler.get("lateness_us"):
            text.append(" · no phase of the recorded steps explains it")
        return text

    def recolour(self) -> None:
        self.query_one("#ranks-title", Static).update(self._title())
        self.query_one("#ranks-straggler", Static).update(self._straggler_line())
        self._describe()

    def on_rank_matrix_moved(self, message: RankMatrix.Moved) -> None:
        self._describe()

    def _describe(self) -> None:
        """The cell under the cursor, in words: what the step holds on that rank."""
        matrix = self.matrix
        row, step = matrix.current
        palette = palette_of(self)
        text = Text(no_wrap=False)
        text.append(f"cells: {MODE_TEXT[matrix.mode]} (w switches) · ", "dim")
        if row is None:
            self.query_one("#ranks-cell", Static).update(text)
            return
        text.append(f"rank {row.rank}", "bold")
        problem = row.problem
        if problem is not None:
            text.append(f" {row.status}: {clean(problem)}", palette.style("error", bold=True))
        entry = row.entry
        if step is None and entry is not None and entry.loaded:
            text.append(
                " · no rank recorded a ProfilerStep: Enter opens the rank's whole trace", "dim"
            )
        if step is not None and entry is not None and entry.loaded:
            names = entry.digest.step_names
            text.append(f" · {clean(step)}", "bold")
            if step in names:
                k = names.index(step)
                steps = entry.digest.steps
                parts = [f"step {fmt_duration(int(steps['dur'][k]))}"]
                if len(entry.step_wait_ns) > k:
                    parts.append(f"waited {fmt_duration(int(entry.step_wait_ns[k]))}")
                shares = {**phase_values(entry.digest)}
                shares.update(
                    {f"{ANNOTATION}:{n}": v for n, v in annotation_values(entry.digest).items()}
                )
                phases = [
                    f"{clean(phase_label(key))} {fmt_duration(int(value[k]))}"
                    for key, value in sorted(shares.items(), key=lambda kv: -int(kv[1][k]))
                    if int(value[k]) > 0
                ]
                # The pane holds 3 lines: the smallest phases give way (counted), never the
                # step's time or its wait, and no phrase is cut off at the pane's edge.
                for shown in range(len(phases), -1, -1):
                    line = text.copy()
                    line.append(" · " + " · ".join([*parts, *phases[:shown]]))
                    if shown < len(phases):
                        line.append(f" · {plural(len(phases) - shown, 'smaller phase')}", "dim")
                    line.append(" · Enter opens its timeline", "dim")
                    if self._cell_lines(line) <= CELL_LINES:
                        break
                text = line
            else:
                text.append(" · not recorded by this rank", "dim")
        self.query_one("#ranks-cell", Static).update(text)

    def _cell_lines(self, text: Text) -> int:
        """Lines `text` takes in the cell pane at this width (its padding left out)."""
        width = self.size.width - 2
        if width <= 0:
            return 0
        return len(text.wrap(self.app.console, width))

    def on_resize(self, event: events.Resize) -> None:
        self.query_one("#ranks-title", Static).update(self._title())
        self._describe()

    # -- keys ---------------------------------------------------------------------------------

    def action_open_cell(self) -> None:
        if self.focused is self.breakdown:
            row = self.breakdown.current_row
            rows = rank_rows(self.job)
            if 0 <= row < len(rows):
                self.open_rank(rows[row].rank, slowest_step(self.job, rows[row].rank))
            return
        self.matrix.choose()

    def on_rank_matrix_chosen(self, message: RankMatrix.Chosen) -> None:
        self.open_rank(message.rank, message.step)

    def on_data_view_chosen(self, message: DataView.Chosen) -> None:
        rows = rank_rows(self.job)
        if 0 <= message.row < len(rows):
            rank = rows[message.row].rank
            self.matrix.go_to(rank, slowest_step(self.job, rank))
            self.open_rank(rank, slowest_step(self.job, rank))

    def _breakdown_heading(self) -> Text:
        """The per-rank table's title, naming the columns this width leaves out (as other
        tables' titles do): nothing else shows that they exist."""
        text = Text(breakdown_title(self.job))
        views = self.query(DataView)
        hidden = views.first().hidden_columns() if views else ()
        if hidden:
            named = f" · hidden at this width: {', '.join(hidden)}"
            if text.cell_len + len(named) > 2 * (self.size.width - 1):  # two lines at most
                named = f" · {plural(len(hidden), 'column')} hidden"
            text.append(named)
        return text

    def on_data_view_view_changed(self, message: DataView.ViewChanged) -> None:
        self.query_one("#ranks-breakdown-title", Static).update(self._breakdown_heading())

    def on_data_view_type_ahead(self, message: DataView.TypeAhead) -> None:
        """The breakdown table has no filter: a letter is this screen's key."""
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and binding.key == message.character:
                self.call_next(self.run_action, binding.action)
                return

    def open_rank(self, rank: int, step: str | None) -> None:
        """Open `rank`'s own timeline, zoomed to `step` (the whole trace when None)."""
        entry = self.job.entry(rank)
        if entry is None:
            self.notify(f"rank {rank}: no file for it in this job", severity="warning")
            return
        if not entry.loaded:
            self.notify(
                f"rank {rank} could not be loaded: {clean(entry.digest.error or '')}",
                severity="error",
                markup=False,
            )
            return
        window = step_window(entry, step) if step is not None else None
        self.app.open_rank(rank, window=window, step=step)

    def open_timeline(self, ranks: list[int], window: tuple[int, int] | None) -> None:
        """Show `ranks` over `window` (absolute ns in the first rank's clock; None: all): the
        app's timeline of several ranks when it has one, else the first rank's own."""
        self.app.open_timeline(ranks, window)

    def action_straggler(self) -> None:
        rank = straggler_rank(self.job)
        if rank is None:
            self.notify("No straggler: fewer than two ranks took part in matched collectives")
            return
        step = slowest_step(self.job, rank)
        self.matrix.go_to(rank, step)
        self.open_rank(rank, step)

    def action_timeline(self) -> None:
        """The job's timeline, at the cursor's step (as its rank recorded it), that rank in focus."""
        row, step = self.matrix.current
        if row is None:
            return
        window = step_window(row.entry, step) if row.entry is not None and step else None
        self.open_timeline([row.rank], window)

    def action_collectives(self) -> None:
        from kinetoscope.tui.job.job_collectives import CollectivesScreen

        self.app.push_screen(CollectivesScreen(self.job))

    def action_toggle_mode(self) -> None:
        matrix = self.matrix
        matrix.set_mode(MODES[(MODES.index(matrix.mode) + 1) % len(MODES)])
        self.notify(f"cells: {MODE_TEXT[matrix.mode]}", timeout=2)

    def action_toggle_clocks(self) -> None:
        job = self.job
        if job.clock.one_host and not job.aligned:
            # One host, one clock: nothing to align. A second `a` forces it.
            if not self._force_align_armed:
                self._force_align_armed = True
                host = job.clock.hosts[0] if job.clock.hosts else "?"
                self.notify(
                    f"One clock: every rank ran on host {clean(host)}, so there is nothing to "
                    "align (the offsets are arrival differences). Press a again to subtract "
                    "them anyway.",
                    timeout=6,
                )
                return
            self._force_align_armed = False
            self.app.align_clocks(True, force=True)
            return
        self._force_align_armed = False
        self.app.align_clocks(not job.aligned)
