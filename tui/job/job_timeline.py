"""The job's timeline: every rank of a distributed job on one time axis, each collapsed to three
rows (GPU compute, communication, the main CPU thread); Enter opens a rank alone, x puts two
ranks side by side.

Each rank is drawn by a `Timeline` (the single-trace widget) over a `CollapsedRank`: a view of
that rank's `ViewData` with three lanes of its own, whose times are relative to the job's
origin (shifted by the rank's clock offset when offsets are applied), so that every rank's
timeline shows the same window with the same numbers. The ranks' models are loaded lazily, in
background threads (`LOAD_THREADS` at a time): a rank is loaded when its block is first drawn
(so a big job loads the ranks on screen, not every rank), the straggler and the fastest rank
first. Until then its rows say "loading". A rank is laid out with its lanes' top levels only,
and its collectives come from its digest (no nesting needed); its `ViewData` is kept for Enter
(the single-trace screen) and x (side by side), which need no second load and nest the rest in
the background. Past RESIDENT_RANKS ranks loaded, those farthest off screen are forgotten.

Times: a rank's own clock runs ahead of the reference's by its estimated offset (JobAnalysis's
`RankEntry.offset_ns`); with offsets applied (c), an event at own time t is drawn at
t − offset. Without, every rank is drawn as recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from kinetoscope.analysis.collectives import RankCollectives
from kinetoscope.analysis.job import JobAnalysis, RankEntry
from kinetoscope.analysis.units import fmt_duration
from kinetoscope.parser.model import KIND_OTHER, KIND_RUNTIME, Lane
from kinetoscope.parser.ranks import ranges_text
from kinetoscope.tui.data.viewdata import (
    GPU_KINDS,
    SLOT_COMM,
    DisplayRow,
    Group,
    LaneView,
    Level,
    ViewData,
)
from kinetoscope.tui.job.job_app import RankTraceScreen as JobRankScreen
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.widgets.render import PLAIN
from kinetoscope.tui.widgets.theme import palette_of
from kinetoscope.tui.widgets.timeline import MIN_NS_PER_CELL, Timeline
from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Footer, Static

from kinetoscope.present.safe_text import clean, fit

ROW_NAMES = ("GPU compute", "communication", "CPU main thread")
NO_GPU = "no GPU"  # the first row's name on a rank that recorded no GPU work (CPU only)
LOAD_THREADS = 2  # ranks loaded at once
# Ranks' models kept: past this, those of ranks farthest off screen go (loaded again when
# scrolled back to), so that scrolling through a big job does not hold every rank's model.
RESIDENT_RANKS = 32
WINDOW_MARGIN = 0.1  # a window asked for (a collective) gets this share of margin each side


# -- a rank, collapsed ------------------------------------------------------------------------


def _level(trace: Any, rows: np.ndarray, origin: int, slot: np.ndarray) -> Level:
    """A level of `rows` (any lanes), sorted by (start, end descending), times from `origin`."""
    if not len(rows):
        return Level.empty()
    start = trace.start[rows].astype(np.int64) - origin
    end = start + trace.dur[rows].astype(np.int64)
    order = np.lexsort((-end, start))
    rows, start, end = rows[order], start[order], end[order]
    return Level(
        rows=rows,
        start=start,
        end=end,
        end_max=np.maximum.accumulate(end),
        cum_dur=np.concatenate(([0], np.cumsum(end - start))),
        slot=slot[rows],
    )


def _same_events(trace: Any, found: dict[str, RankCollectives]) -> bool:
    """The collectives (a rank's digest, made in another process) name this trace's rows."""
    for coll in found.values():
        rows = coll.row
        if not len(rows):
            continue
        if int(rows.min()) < 0 or int(rows.max()) >= len(trace):
            return False
        if not np.array_equal(trace.start[rows], coll.start):
            return False
        if [trace.name_of(int(r)) for r in rows[:64].tolist()] != coll.name[:64]:
            return False
    return True


def collapsed_rows(
    data: ViewData, source: str | None = None, found: dict[str, RankCollectives] | None = None
) -> list[np.ndarray]:
    """The trace rows of a rank's three collapsed rows (ROW_NAMES): its GPU work other than
    communication, every stream together; its collectives (communication kernels, or the CPU
    backend's annotations; `source` "gpu" or "cpu" as the job's matching chose, else whichever
    it has); the top-level slices of the CPU thread with the most CPU time. `found`: the rank's
    collectives from its digest, used when they name this trace's rows (else found again,
    which needs the trace's nesting)."""
    from kinetoscope.analysis.collectives import find_collectives

    trace = data.trace
    kind = data.kind
    gpu = np.isin(kind, GPU_KINDS)
    if not found or not {"gpu", "cpu"} <= set(found) or not _same_events(trace, found):
        found = find_collectives(data.session, read_args=False)
    if source not in found or not len(found[source]):
        source = "gpu" if len(found["gpu"]) else "cpu"
    comm = np.unique(found[source].row.astype(np.int64))
    is_comm = np.zeros(len(trace), bool)
    is_comm[comm] = True
    compute = np.flatnonzero(gpu & ~is_comm & (data.slot != SLOT_COMM))
    best, best_time = None, -1
    for view in data.lanes:
        if view.is_gpu:
            continue
        level = view.levels[0]
        cpu = (kind[level.rows] == KIND_OTHER) | (kind[level.rows] == KIND_RUNTIME)
        busy = int((level.end[cpu] - level.start[cpu]).sum())
        if cpu.any() and busy > best_time:
            best, best_time = view, busy
    main = np.zeros(0, np.int64)
    if best is not None:
        rows = best.levels[0].rows
        main = rows[(kind[rows] == KIND_OTHER) | (kind[rows] == KIND_RUNTIME)].astype(np.int64)
    return [compute, comm, main]


def row_names(has_gpu: bool) -> tuple[str, ...]:
    """ROW_NAMES, with the GPU row named NO_GPU on a rank without GPU work (an empty "GPU
    compute" row would read as a GPU left idle)."""
    return ROW_NAMES if has_gpu else (NO_GPU, *ROW_NAMES[1:])


class CollapsedRank:
    """A rank's `ViewData` seen as three lanes (ROW_NAMES) for the `Timeline`, with times
    relative to `origin` (the job's origin, plus the rank's offset when applied). Everything
    else (the trace, gaps, links, nesting) is the rank's own `ViewData`'s."""

    def __init__(self, data: ViewData, rank: int, rows: list[np.ndarray], origin: int, span: int):
        self.inner = data
        self.rank = rank
        self.groups = [Group(label=f"rank {rank}", is_gpu=False, lanes=[0, 1, 2])]
        self._rows = rows
        self.row_names = row_names(has_gpu=bool(np.isin(data.kind, GPU_KINDS).any()))
        self._lane_of = [self._model_lane(r) for r in rows]
        self.lanes: list[LaneView] = []
        self.rebase(origin, span)

    def __getattr__(self, name: str) -> Any:
        # Only for names this view does not define; `inner` itself is looked up plainly, so a
        # half-built instance raises AttributeError instead of recursing.
        return getattr(object.__getattribute__(self, "inner"), name)

    def _model_lane(self, rows: np.ndarray) -> Lane:
        trace = self.inner.trace
        if len(rows):
            return trace.lanes[int(trace.lane[rows[0]])]
        return Lane(id=-1, pid="-", tid="-")

    def rebase(self, origin: int, span: int) -> None:
        """Times from `origin` now (the job's span from there: `span`)."""
        self.origin = origin
        self.span = max(1, span)
        trace, slot = self.inner.trace, self.inner.slot
        self.lanes = [
            LaneView(
                lane=lane, group=0, short_label=name, levels=[_level(trace, rows, origin, slot)]
            )
            for lane, name, rows in zip(self._lane_of, self.row_names, self._rows)
        ]
        placed = [(i, level.rows) for i, view in enumerate(self.lanes) for level in view.levels]
        rows = np.concatenate([r for _, r in placed]) if placed else np.zeros(0, np.int64)
        lane = np.concatenate([np.full(len(r), i, np.int64) for i, r in placed])
        entry = np.concatenate([np.arange(len(r)) for _, r in placed])
        order = np.argsort(rows, kind="stable")
        self._placed_rows, self._placed_lane, self._placed_entry = (
            rows[order],
            lane[order],
            entry[order],
        )

    @property
    def complete(self) -> bool:
        """Its three rows are all there (the rank's own deeper levels may not be)."""
        return True

    def display_rows(self, expanded: set[int]) -> list[DisplayRow]:
        return [DisplayRow(0, i, 0) for i in range(len(self.lanes))]

    def level_of_row(self, row: int) -> tuple[int, int, int]:
        k = int(np.searchsorted(self._placed_rows, row))
        if k < len(self._placed_rows) and int(self._placed_rows[k]) == row:
            return int(self._placed_lane[k]), 0, int(self._placed_entry[k])
        return -1, -1, -1

    def rel_start(self, row: int) -> int:
        return int(self.inner.trace.start[row]) - self.origin

    def rel_end(self, row: int) -> int:
        trace = self.inner.trace
        return int(trace.start[row] + trace.dur[row]) - self.origin

    def first_launch_below(self, row: int) -> int:
        return -1  # the operators below the thread's top level are not drawn here

    def set_hide_python(self, hide: bool) -> None:
        pass


# -- timelines that share one window ----------------------------------------------------------


class LinkedTimeline(Timeline):
    """A Timeline whose window is the job's: its own relative time is the job's plus `delta`,
    and it stays on the job's span. Every change of its window or cursor is handed to
    `on_moved(self)`; `follow` takes the job's window without handing it back."""

    def __init__(self, data: ViewData | None = None, **kwargs: Any) -> None:
        self.delta = 0.0  # own relative time − job relative time
        self.job_span = 1
        self.on_moved: Callable[[LinkedTimeline], None] | None = None
        self._following = False
        # Until it has a window (fitted, or the job's), its default one is not handed on: the
        # watchers run once at mount with the defaults.
        self.live = False
        super().__init__(data, **kwargs)
        self.cursor_row_shown = False  # until it has the focus

    # The job's window, in job relative time.
    def job_window(self) -> tuple[float, float, int]:
        return self.view_start - self.delta, self.ns_per_cell, int(self.cursor_time - self.delta)

    def follow(self, view_start: float, ns_per_cell: float, cursor: int) -> None:
        self._following = True
        try:
            self.ns_per_cell = ns_per_cell
            self.view_start = view_start + self.delta
            self.cursor_time = int(cursor + self.delta)
        finally:
            self._following = False
        self.live = True
        self.refresh()

    def _moved(self) -> None:
        if self.live and not self._following and self.data is not None and self.on_moved:
            self.on_moved(self)

    def watch_view_start(self) -> None:
        super().watch_view_start()
        self._moved()

    def watch_ns_per_cell(self) -> None:
        super().watch_ns_per_cell()
        self._moved()

    def watch_cursor_time(self) -> None:
        super().watch_cursor_time()
        self._moved()

    def on_focus(self) -> None:
        self.cursor_row_shown = True
        self._strips.clear()
        self.refresh()
        self.focus_changed()

    def on_blur(self) -> None:
        self.cursor_row_shown = False  # one cursor row on the screen: the focused timeline's
        self._strips.clear()
        self.refresh()
        self.focus_changed()

    def focus_changed(self) -> None:
        """Focus came or went (the screen may say which timeline has it)."""

    def _clamp_view(self) -> None:
        if self.data is None:
            return
        visible = self.cells_width * self.ns_per_cell
        low, high = sorted((self.delta, self.delta + self.job_span - visible))
        self.view_start = float(min(max(self.view_start, low), high))

    def _max_ns_per_cell(self) -> float:
        return max(MIN_NS_PER_CELL, 2.0 * self.job_span / self.cells_width)

    def action_fit_all(self) -> None:
        if self.data is None:
            return
        self.live = True
        self.ns_per_cell = max(MIN_NS_PER_CELL, self.job_span / max(self.cells_width - 1, 1))
        self.view_start = self.delta
        if not (self.delta <= self.cursor_time <= self.delta + self.job_span):
            self.cursor_time = int(self.delta)


class RankTimeline(LinkedTimeline):
    """One rank collapsed: a line naming the rank (over the ruler), then its three rows."""

    DEFAULT_CSS = """
    RankTimeline {
        height: 4;
        overflow: hidden hidden;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_rank", "Open the rank alone", show=False),
        Binding("P", "toggle_python", "Python frames: inside a rank (Enter)", show=False),
    ]

    def __init__(self, entry: RankEntry, owner: JobTimelineScreen, **kwargs: Any) -> None:
        super().__init__(None, **kwargs)
        self.entry = entry
        self.rank = entry.rank
        self.owner = owner
        self.note = "loading…"  # said on its rows until it is drawn
        self.on_moved = owner.follow

    @property
    def is_straggler(self) -> bool:
        return self.owner.straggler == self.rank

    def header_text(self) -> str:
        text = f"rank {self.rank}"
        if self.is_straggler:
            text += " ◀ straggler"
        elif self.owner.fastest == self.rank:
            text += " · fastest"
        offset = self.entry.offset_ns
        if self.owner.aligned and offset:
            text += f" {'+' if offset > 0 else '−'}{fmt_duration(abs(offset))}"
        return text

    def _header_segments(self) -> list[Segment]:
        palette = palette_of(self)
        if self.has_focus:
            style = palette.style("ink", "cursor", bold=True)
        elif self.is_straggler:
            style = palette.style("error", bold=True)
        else:
            style = palette.style("heading", bold=True)
        return [Segment(fit(self.header_text(), self.label_width), style)]

    def _ruler_strip(self, width: int) -> Strip:
        ruler = super()._ruler_strip(width)
        rest = ruler.crop(self.label_width, width)
        return Strip.join([Strip(self._header_segments(), self.label_width), rest])

    def _label_segments(self, row: DisplayRow, current: bool) -> list[Segment]:
        label = super()._label_segments(row, current)
        if not self.is_straggler or current:
            return label
        text = "".join(segment.text for segment in label)
        return [Segment(text, palette_of(self).style("error"))]

    def render_line(self, y: int) -> Strip:
        if self.data is not None:
            return super().render_line(y)
        self.call_later(self.owner.wanted, self.rank)
        width = self.content_width
        palette = palette_of(self)
        label_w = self.label_width
        if y == 0:
            head = self._header_segments()
            note = Segment(" " + clean(self.note), palette.style("muted"))
            return Strip([*head, Segment("│", palette.style("rule")), note]).adjust_cell_length(
                width, PLAIN
            )
        if y > len(ROW_NAMES):
            return Strip.blank(width, PLAIN)
        digest = self.entry.digest
        names = row_names(has_gpu=digest.has_gpu or digest.error is not None)
        label = Segment(fit(f"   {names[y - 1]}", label_w), palette.style("label"))
        return Strip([label, Segment("│", palette.style("rule"))]).adjust_cell_length(width, PLAIN)

    def unload(self, note: str) -> None:
        """Forget the rank's model (it is off screen); `note` says so on its rows."""
        self.data = None
        self.rows = []
        self.live = False
        self._cells.clear()
        self._strips.clear()
        self.note = note
        self.refresh()

    def focus_changed(self) -> None:
        self.owner.update_status()

    def _move_row(self, direction: int, step: int = 1) -> None:
        if self.data is not None and 0 <= self.cursor_row + direction < len(self.rows):
            super()._move_row(direction, step)
            return
        self.owner.focus_neighbour(self, direction)

    def action_open_rank(self) -> None:
        self.owner.open_rank(self.rank)

    def action_toggle_python(self) -> None:
        self.notify("Enter opens the rank alone, where P hides its Python frames", timeout=3)

    def action_toggle_expand(self) -> None:
        self.action_open_rank()

    def show(self, view: CollapsedRank, window: tuple[float, float, int] | None) -> None:
        """Draw the rank from `view`; in the job's `window` (else fitted to the job)."""
        self.job_span = view.span
        super().set_data(view)
        if window is not None:
            self._needs_fit = False
            self.follow(*window)

    def rebase(self) -> None:
        """The view's origin moved (offsets applied or not): draw it again, same window."""
        if self.data is None:
            return
        cursor_row, selected = self.cursor_row, self.selected_row
        self._following = True
        try:
            super().set_data(self.data)
            self._needs_fit = False
            self.cursor_row = cursor_row
            self.selected_row = selected
        finally:
            self._following = False


# -- the screens ------------------------------------------------------------------------------


class JobTimelineScreen(Screen):
    """Every rank on one time axis, collapsed to three rows each (see the module docstring)."""

    DEFAULT_CSS = """
    JobTimelineScreen #job-title, JobTimelineScreen #job-status {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    JobTimelineScreen #job-title { height: auto; max-height: 2; }
    JobTimelineScreen #job-ranks {
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "c",
            "toggle_offsets",
            "Clock offsets",
            tooltip="Apply the estimated clock offsets between ranks, or draw them as recorded",
        ),
        Binding(
            "x",
            "side_by_side",
            "Side by side",
            tooltip="The straggler and the fastest rank side by side, all their lanes",
        ),
        Binding(
            "X",
            "side_by_side_current",
            "Side by side with this rank",
            show=False,
            tooltip="This rank and the straggler (or the fastest) side by side",
        ),
        Binding("enter", "open_current", "Open rank", tooltip="Open the rank alone, all its lanes"),
        Binding(
            "m",
            "mark",
            "Mark",
            show=False,
            tooltip="Mark a range start, then its end, on every rank (e exports it)",
        ),
        Binding(
            "M",
            "mark_selection",
            "Mark the selected event",
            show=False,
            tooltip="Mark the selected event (e.g. a ProfilerStep) as the range on every rank; "
            "again clears it (e exports it)",
        ),
        Binding(
            "e",
            "export_range",
            "Export",
            show=False,
            tooltip="Export the marked range of every rank as one Perfetto bundle (.zip)",
        ),
        Binding("q", "back", "Back", tooltip="Back to the screen the timeline was opened from"),
        Binding("escape", "back", "Back", show=False),
    ]
    HELP_TITLE = "Job timeline (t)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        """The single-trace timeline's keys, on every rank at once, and this screen's."""
        return [
            *(
                b
                for b in Timeline.BINDINGS
                if isinstance(b, Binding) and b.key not in ("enter", "P")
            ),
            *JobTimelineScreen.BINDINGS,
        ]

    def __init__(
        self,
        job: JobAnalysis,
        *,
        window: tuple[int, int] | None = None,
        ranks: list[int] | None = None,
        aligned: bool = False,
        name: str = "job",
        select: tuple[int, int] | None = None,
    ) -> None:
        """`window`: (start, end) ns in the job's clock (as recorded) to show first, else the
        whole job; `ranks`: the ranks to show first (the first one focused); `select`: (rank,
        row) an event to select once that rank is drawn."""
        super().__init__()
        self.job = job
        self.title_name = name
        self.entries = [e for e in job.ranks if e.loaded]
        self.failed = [e for e in job.ranks if not e.loaded]
        self.straggler: int | None = job.straggler["rank"] if job.straggler else None
        taking = [e for e in self.entries if e.matched]
        self.fastest: int | None = (
            max(taking, key=lambda e: (e.wait_ns, -e.rank)).rank if len(taking) >= 2 else None
        )
        self.aligned = aligned
        starts = [e.digest.start_ns for e in self.entries if e.digest.start_ns is not None]
        ends = [e.digest.end_ns for e in self.entries if e.digest.end_ns is not None]
        offsets = [self._offset(e) for e in self.entries if e.digest.start_ns is not None]
        # The origin and span hold every rank as recorded and with offsets applied.
        self.origin = min((s - max(o, 0) for s, o in zip(starts, offsets)), default=0)
        end_offsets = [self._offset(e) for e in self.entries if e.digest.end_ns is not None]
        end = max((t - min(o, 0) for t, o in zip(ends, end_offsets)), default=self.origin + 1)
        self.span = max(1, end - self.origin)
        self.window: tuple[float, float, int] | None = None  # view start, ns/cell, cursor (job)
        self.pending_range = window
        self.first_ranks = ranks or []
        self.to_select = select
        self.views: dict[int, CollapsedRank] = {}
        self.errors: dict[int, str] = {}
        self._requested: set[int] = set()
        self._slots = threading.Semaphore(LOAD_THREADS)
        self._lock = threading.Lock()
        # The marked range, job relative ns (start, end); end None while only the start is.
        self.marked: tuple[int, int | None] | None = None

    @staticmethod
    def _offset(entry: RankEntry) -> int:
        return round(entry.offset_ns) if entry.offset_ns is not None else 0

    def shift(self, entry: RankEntry) -> int:
        """What to add to the job's origin to place this rank's events (its offset, if applied)."""
        return self._offset(entry) if self.aligned else 0

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(self.title_text(), id="job-title")
        with VerticalScroll(id="job-ranks"):
            for entry in self.entries:
                yield RankTimeline(entry, self, id=f"rank-{entry.rank}")
        yield Static("", id="job-status")
        yield Footer()

    def on_mount(self) -> None:
        first = next((r for r in self.first_ranks if self.timeline_of(r) is not None), None)
        if first is None and self.entries:
            first = self.straggler if self.straggler is not None else self.entries[0].rank
        for rank in [*self.first_ranks, self.straggler, self.fastest]:
            if rank is not None:
                self.wanted(rank)
        if first is not None:
            timeline = self.timeline_of(first)
            if timeline is not None:
                timeline.focus()
        if self.failed:
            names = ", ".join(f"rank {e.rank}" for e in self.failed)
            self.notify(f"Not loaded: {names} (see the summary)", severity="warning", timeout=8)
        self.update_status()

    def title_text(self) -> Text:
        job = self.job
        # Two lines at most (wrapped at words): the clock offsets come last and are what
        # `c` is about; on one line they were cut off even at 120 columns.
        text = Text(no_wrap=False, overflow="ellipsis")
        text.append("kinetoscope ", "bold")
        text.append(clean(self.title_name))
        text.append(f" · {len(self.entries)} ranks")
        if job.world_size:
            text.append(f" of {job.world_size}")
        text.append(f" · {fmt_duration(self.span)}")
        if self.straggler is not None:
            entry = job.entry(self.straggler)
            wait = fmt_duration(entry.wait_ns) if entry is not None else "?"
            text.append(f" · straggler rank {self.straggler} (waited {wait})", "bold")
        files = job.files
        gaps = list(files.missing_ranges) if files is not None else [(r, r) for r in job.missing]
        count = files.missing_count if files is not None else len(job.missing)
        failed = [(e.rank, e.rank) for e in self.failed]
        if gaps or failed:  # ranges: a world size from a file may be anything
            shown = ranges_text(sorted(gaps + failed), count + len(failed), limit=8)
            text.append(f" · missing: {shown}", "bold")
        known = [e for e in self.entries if e.offset_ns is not None]
        if known:
            worst = max(known, key=lambda e: abs(e.offset_ns or 0))
            spread = max(e.spread_ns or 0 for e in known)
            state = "applied" if self.aligned else "not applied"
            offsets = (
                f" · clock offsets {state} (c): up to {fmt_duration(abs(worst.offset_ns or 0))} "
                f"(rank {worst.rank})"
            )
            full = text.copy()
            full.append(
                f"{offsets}, spread ≤ {fmt_duration(spread)}", "bold" if self.aligned else ""
            )
            width = self.size.width - 2
            if width <= 0 or len(full.wrap(self.app.console, width)) <= 2:
                return full
            text.append(offsets, "bold" if self.aligned else "")  # the spread gives way
        else:
            text.append(" · no clock offsets (no synchronising collectives)")
        return text

    def timelines(self) -> list[RankTimeline]:
        return list(self.query(RankTimeline))

    def timeline_of(self, rank: int) -> RankTimeline | None:
        return next((t for t in self.timelines() if t.rank == rank), None)

    def current(self) -> RankTimeline | None:
        focused = self.focused
        if isinstance(focused, RankTimeline):
            return focused
        return None

    def update_status(self) -> None:
        status = self.query("#job-status")
        if not status:
            return
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.window is not None:
            start, per_cell, cursor = self.window
            text.append(fmt_duration(cursor), "bold")
            text.append(f" · {fmt_duration(per_cell, 2)}/cell")
        timeline = self.current()
        if timeline is not None:
            text.append(f" · rank {timeline.rank}")
            data = timeline.data
            if data is not None and timeline.selected_row >= 0:
                row = timeline.selected_row
                text.append(" · ")
                text.append(clean(data.trace.name_of(row))[:60], "bold")
                text.append(f" {fmt_duration(int(data.trace.dur[row]))}")
            elif timeline.data is None:
                text.append(f" · {timeline.note}")
        with self._lock:
            loading = len(self._requested - set(self.views) - set(self.errors))
        if loading > 0:
            text.append(f" · {loading} loading", "dim")
        text.append(" · ? keys", "dim")
        status.first(Static).update(text)

    # -- loading ----------------------------------------------------------------------------

    def wanted(self, rank: int) -> None:
        """Load a rank (once) in the background: its block is on screen, or soon will be."""
        entry = self.job.entry(rank)
        if entry is None or not entry.loaded:
            return
        with self._lock:
            if rank in self._requested:
                return
            self._requested.add(rank)
        source = self.job.matched.source if len(self.job.matched) else None
        self.run_worker(
            lambda: self._load(entry, source),
            thread=True,
            group="ranks",
            exit_on_error=False,
            name=f"rank {rank}",
        )

    def _load(self, entry: RankEntry, source: str | None) -> None:
        """In a worker thread: read the rank, lay it out and collapse it."""
        from kinetoscope.analysis.session import TraceSession
        from kinetoscope.parser import TraceError, load, save_cache
        from kinetoscope.tui.data.viewdata import build_view_data

        with self._slots:
            try:
                trace = load(entry.path, workers=1, write_cache=False)
                # Staged: the collapsed rows need the lanes' top levels only; the rest is
                # nested when the rank is opened (`complete`).
                data = build_view_data(TraceSession(trace), staged=True)
                rows = collapsed_rows(data, source, entry.digest.collectives)
                origin = self.origin + self.shift(entry)
                view = CollapsedRank(data, entry.rank, rows, origin, self.span)
            except TraceError as error:
                self.app.call_from_thread(self._failed, entry.rank, str(error))
                return
            except Exception as error:  # this rank's problem: the others are still drawn
                message = f"could not be shown ({type(error).__name__}: {error})"
                self.app.call_from_thread(self._failed, entry.rank, message)
                return
        self.app.call_from_thread(self._ready, entry.rank, view)
        try:  # the model cache, for the next open (after the rank is drawn)
            save_cache(trace)
        except Exception:  # the next open is slower; this one is unharmed
            pass

    def _failed(self, rank: int, message: str) -> None:
        self.errors[rank] = message
        timeline = self.timeline_of(rank)
        if timeline is not None:
            timeline.note = message
            timeline.refresh()
        self.update_status()

    def _ready(self, rank: int, view: CollapsedRank) -> None:
        entry = self.job.entry(rank)
        if entry is not None:
            view.rebase(self.origin + self.shift(entry), self.span)
        self.views[rank] = view
        timeline = self.timeline_of(rank)
        if timeline is None:
            return
        self._evict(keep=rank)
        window = self.window
        timeline.show(view, window)
        self.draw_marks()
        if window is None and self.pending_range is not None:
            # The window asked for comes first: no rank fits the whole job meanwhile.
            timeline._needs_fit = False
            self.call_after_refresh(self._show_pending, timeline)
        if self.to_select is not None and self.to_select[0] == rank:
            row = self.to_select[1]
            self.to_select = None
            if 0 <= row < len(view.trace) and view.level_of_row(row)[0] >= 0:
                timeline.select(row, move_cursor=False)
        self.update_status()

    def _evict(self, keep: int) -> None:
        """Past RESIDENT_RANKS models, forget those of ranks off screen (never the straggler,
        the fastest, the focused rank or `keep`)."""
        extra = len(self.views) - RESIDENT_RANKS
        if extra <= 0:
            return
        scroll = self.query_one("#job-ranks", VerticalScroll).region
        current = self.current()
        kept = {keep, self.straggler, self.fastest, current.rank if current else None}
        off_screen = [
            t
            for t in self.timelines()
            if t.data is not None and t.rank not in kept and not scroll.overlaps(t.region)
        ]
        middle = scroll.y + scroll.height // 2
        off_screen.sort(key=lambda t: -abs(t.region.y - middle))  # the farthest first
        for timeline in off_screen[:extra]:
            del self.views[timeline.rank]
            with self._lock:
                self._requested.discard(timeline.rank)
            timeline.unload("loading…")

    def _show_pending(self, timeline: RankTimeline) -> None:
        if self.pending_range is None:  # another rank showed it first: take its window
            if self.window is not None:
                timeline.follow(*self.window)
            else:
                timeline.action_fit_all()
            return
        lo, hi = self.pending_range
        self.pending_range = None
        margin = max((hi - lo) * WINDOW_MARGIN, MIN_NS_PER_CELL)
        timeline._needs_fit = False
        timeline.live = True
        timeline.set_view(lo - self.origin - margin, hi - self.origin + margin)
        timeline.cursor_time = int(lo - self.origin)

    # -- one window for every rank ----------------------------------------------------------

    def follow(self, source: LinkedTimeline) -> None:
        """A rank's window or cursor moved: every other rank takes it."""
        self.window = source.job_window()
        for timeline in self.timelines():
            if timeline is not source and timeline.data is not None:
                timeline.follow(*self.window)
        self.update_status()

    def on_timeline_event_selected(self, message: Timeline.EventSelected) -> None:
        self.update_status()

    def focus_neighbour(self, timeline: RankTimeline, direction: int) -> None:
        timelines = self.timelines()
        index = timelines.index(timeline) + direction
        if not (0 <= index < len(timelines)):
            return
        target = timelines[index]
        if target.data is not None:
            target.cursor_row = 0 if direction > 0 else len(target.rows) - 1
        target.focus()

    # -- keys -------------------------------------------------------------------------------

    def action_toggle_offsets(self) -> None:
        if not any(e.offset_ns is not None for e in self.entries):
            self.notify("No clock offsets: the ranks share no synchronising collective", timeout=4)
            return
        self.aligned = not self.aligned
        for rank, view in self.views.items():
            entry = self.job.entry(rank)
            if entry is not None:
                view.rebase(self.origin + self.shift(entry), self.span)
        for timeline in self.timelines():
            timeline.rebase()
            if self.window is not None and timeline.data is not None:
                timeline.follow(*self.window)
        self.query_one("#job-title", Static).update(self.title_text())
        word = "applied" if self.aligned else "not applied: clocks as recorded"
        self.notify(f"Clock offsets {word}", timeout=2)

    def cursor_ns(self) -> int | None:
        """The cursor in job relative ns (None until a rank is drawn)."""
        if self.window is not None:
            return int(self.window[2])
        timeline = self.current()
        if timeline is not None and timeline.data is not None:
            return int(timeline.job_window()[2])
        return None

    def marked_bounds(self) -> tuple[int, int] | None:
        """The complete marked range, job relative ns, or None."""
        if self.marked is None or self.marked[1] is None:
            return None
        return min(self.marked[0], self.marked[1]), max(self.marked[0], self.marked[1])

    def draw_marks(self) -> None:
        """The marked range (or its start) shaded on every rank's ruler."""
        marked = self.marked
        for timeline in self.timelines():
            if marked is None:
                timeline.marked_range = None
            else:
                end = marked[1] if marked[1] is not None else marked[0]
                lo, hi = min(marked[0], end), max(marked[0], end)
                timeline.marked_range = (lo + int(timeline.delta), hi + int(timeline.delta))
            timeline.refresh()

    def action_mark(self) -> None:
        now = self.cursor_ns()
        if now is None:
            self.notify("Wait for a rank to be drawn, then mark", timeout=3, markup=False)
            return
        if self.marked is None or self.marked[1] is not None:
            self.marked = (now, None)
            self.notify(
                "Range start marked on every rank; move and press m again for its end",
                timeout=3,
                markup=False,
            )
        elif now == self.marked[0]:
            self.notify("The end is the start: move the cursor first", timeout=3, markup=False)
            return
        else:
            self.marked = (self.marked[0], now)
            self._announce_range()
        self.draw_marks()

    def action_mark_selection(self) -> None:
        """`M`: the focused rank's selected event (its span, in the job's clock as drawn) is
        the marked range on every rank; M on the same event again, or with nothing selected,
        clears it."""
        timeline = self.current()
        row = timeline.selected_row if timeline is not None and timeline.data is not None else -1
        if row < 0:
            if self.marked is not None:
                self.marked = None
                self.draw_marks()
                self.notify("Range cleared", timeout=2, markup=False)
            elif timeline is not None and timeline.data is None:
                self.notify(
                    f"Rank {timeline.rank} is {self._not_ready(timeline.rank)}",
                    timeout=3,
                    markup=False,
                )
            else:
                self.notify(
                    "Select an event first (←/→ or a click; e.g. a ProfilerStep on the CPU "
                    "main thread), then M marks it on every rank",
                    timeout=4,
                    markup=False,
                )
            return
        assert timeline is not None and timeline.data is not None
        view = timeline.data
        # The rank's relative time is the job's plus the timeline's delta (0 here).
        start = view.rel_start(row) - int(timeline.delta)
        end = view.rel_end(row) - int(timeline.delta)
        if self.marked_bounds() == (start, end):
            self.marked = None
            self.draw_marks()
            self.notify("Range cleared", timeout=2, markup=False)
            return
        if end == start:
            self.notify("The selected event has no duration", timeout=3, markup=False)
            return
        self.marked = (start, end)
        name = clean(view.trace.name_of(row))
        self._announce_range(f"{name[:60]} of rank {timeline.rank}:")
        self.draw_marks()

    def _announce_range(self, what: str = "Range") -> None:
        """Say the marked range (`what`: the event it is, else "Range")."""
        bounds = self.marked_bounds()
        if bounds is None:
            return
        lo, hi = bounds
        self.notify(
            f"{what} +{fmt_duration(lo)} … +{fmt_duration(hi)} ({fmt_duration(hi - lo)}) marked "
            "on every rank: e exports it",
            timeout=4,
            markup=False,
        )

    def action_export_range(self) -> None:
        """`e`: the marked range of every rank as one Perfetto bundle (tui/trace/exporting.py)."""
        bounds = self.marked_bounds()
        if bounds is None:
            self.notify(
                "Press m again at the range's end, then e exports it"
                if self.marked is not None
                else "Nothing marked to export: m at a range's start and m at its end (or M on "
                "a selected event, such as a ProfilerStep), then e",
                timeout=5,
                markup=False,
            )
            return
        from kinetoscope.tui.trace.exporting import export_stem, start_job_export

        from kinetoscope.export.crop import ExportError
        from kinetoscope.export.job_bundle import plan_from_job

        span = (self.origin + bounds[0], self.origin + bounds[1])
        try:
            cut = plan_from_job(self.job, span_ns=span, align_clocks=self.aligned)
        except ExportError as error:
            self.notify(clean(str(error)), severity="error", timeout=8, markup=False)
            return
        what = "the marked range of every rank"
        start_job_export(self, cut, what, export_stem(self.title_name, "window"))

    def action_open_current(self) -> None:
        timeline = self.current()
        if timeline is not None:
            self.open_rank(timeline.rank)

    def open_rank(self, rank: int) -> None:
        """The rank alone, every lane, in the job's window."""
        view = self.views.get(rank)
        if view is None:
            self.notify(f"Rank {rank} is {self._not_ready(rank)}", timeout=3)
            return
        screen = RankTraceScreen(view.inner, rank)
        self.app.push_screen(screen)
        self.complete_levels(view.inner)
        if self.window is not None:
            delta = view.origin - view.inner.origin
            start, per_cell, cursor = self.window
            screen.call_after_refresh(screen.show_window, start + delta, per_cell, cursor + delta)

    def _not_ready(self, rank: int) -> str:
        if rank in self.errors:
            return f"not loaded: {self.errors[rank]}"
        self.wanted(rank)
        return "still loading"

    def pair(self) -> tuple[int, int] | None:
        """The straggler and the fastest rank, else the first two."""
        ranks = [e.rank for e in self.entries]
        if self.straggler is not None and self.fastest is not None:
            return self.straggler, self.fastest
        return (ranks[0], ranks[1]) if len(ranks) >= 2 else None

    def action_side_by_side(self) -> None:
        pair = self.pair()
        if pair is None:
            self.notify("Side by side needs two ranks", timeout=3)
            return
        self.side_by_side(*pair)

    def action_side_by_side_current(self) -> None:
        timeline = self.current()
        if timeline is None:
            return
        other = self.straggler if timeline.rank != self.straggler else self.fastest
        if other is None or other == timeline.rank:
            self.action_side_by_side()
            return
        self.side_by_side(timeline.rank, other)

    def side_by_side(self, first: int, second: int) -> None:
        """Two ranks, all their lanes, one above the other, zoomed and panned together."""
        views = [self.views.get(first), self.views.get(second)]
        if views[0] is None or views[1] is None:
            waiting = [r for r, v in zip((first, second), views) if v is None]
            self.notify("; ".join(f"Rank {r} is {self._not_ready(r)}" for r in waiting), timeout=3)
            return
        self.app.push_screen(RankPairScreen(self, [(first, views[0]), (second, views[1])]))
        for view in views:
            self.complete_levels(view.inner)

    def complete_levels(self, data: ViewData) -> None:
        """Nest every slice of a rank opened on its own (loaded with its top levels only), in
        the background; the screens showing it redraw then."""
        if data.complete:
            return

        def work() -> None:
            data.complete_levels()
            self.app.call_from_thread(self._levels_complete, data)

        self.run_worker(work, thread=True, group="levels", exit_on_error=False)

    def _levels_complete(self, data: ViewData) -> None:
        for screen in self.app.screen_stack:
            if isinstance(screen, TraceScreen) and screen.data is data:
                screen.levels_complete()
            elif isinstance(screen, RankPairScreen):
                screen.levels_complete(data)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:  # above the app's default screen, another
            self.app.pop_screen()

    def show_collective(self, index: int) -> None:
        """Show matched collective `index` across every rank (the cursor at its first start)."""
        self.pending_range = collective_window(self.job, index)
        timeline = next((t for t in self.timelines() if t.data is not None), None)
        if timeline is not None:
            self._show_pending(timeline)

    def recolour(self) -> None:
        for timeline in self.timelines():
            timeline.recolour()
        self.query_one("#job-title", Static).update(self.title_text())
        self.update_status()

    def on_resize(self, event: events.Resize) -> None:
        self.query_one("#job-title", Static).update(self.title_text())  # fitted to the width


def collective_window(job: JobAnalysis, index: int) -> tuple[int, int]:
    """(start, end) ns of matched collective `index`, from its first start to its last end
    across the ranks taking part, as recorded."""
    matched = job.matched
    present = matched.present[index]
    return int(matched.start[index][present].min()), int(matched.end[index][present].max())


class RankTraceScreen(JobRankScreen):
    """A rank alone, opened from the job's timeline: the job viewer's screen for one rank (the
    single-trace screen, every view it has), with the rank's model the timeline loaded already;
    q, and Esc with nothing selected, go back to the job's timeline."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "back", "Back to the job", tooltip="Back to the job's timeline"),
    ]

    def __init__(self, data: ViewData, rank: int) -> None:
        super().__init__(data, rank, None)

    def show_window(self, start: float, per_cell: float, cursor: float) -> None:
        timeline = self.timeline
        timeline._needs_fit = False
        timeline.ns_per_cell = per_cell
        timeline.view_start = start
        timeline.cursor_time = int(cursor)

    def action_back(self) -> None:
        self.app.pop_screen()


class RankPairScreen(Screen):
    """Two ranks side by side: every lane of each, one above the other, one window."""

    DEFAULT_CSS = """
    RankPairScreen .pair-title, RankPairScreen #pair-status {
        height: 1;
        background: $panel;
        padding: 0 1;
    }
    RankPairScreen LinkedTimeline {
        height: 1fr;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back to the job"),
        Binding("q", "back", "Back to the job", show=False),
        Binding("tab", "switch", "Other rank", show=False),
    ]
    HELP_TITLE = "Two ranks side by side (x)"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [*RankPairScreen.BINDINGS, *Timeline.BINDINGS]

    def __init__(self, owner: JobTimelineScreen, ranks: list[tuple[int, CollapsedRank]]) -> None:
        super().__init__()
        self.owner = owner
        self.ranks = ranks

    def compose(self) -> ComposeResult:
        for rank, view in self.ranks:
            yield Static(self._label(rank), classes="pair-title", id=f"pair-title-{rank}")
            timeline = LinkedTimeline(view.inner, id=f"pair-{rank}")
            timeline.delta = float(view.origin - view.inner.origin)
            timeline.ruler_zero = timeline.delta  # both rulers in the job's time
            timeline.job_span = self.owner.span
            timeline.on_moved = self.follow
            yield timeline
        yield Static("", id="pair-status")
        yield Footer()

    def _label(self, rank: int) -> Text:
        owner = self.owner
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"rank {rank}", "bold")
        if rank == owner.straggler:
            text.append(" ◀ straggler", "bold")
        elif rank == owner.fastest:
            text.append(" · fastest (waits most)")
        entry = owner.job.entry(rank)
        if entry is not None:
            text.append(f" · waited {fmt_duration(entry.wait_ns)}")
            text.append(f" · {clean(entry.path.rsplit('/', 1)[-1])}", "dim")
        return text

    def pair_timelines(self) -> list[LinkedTimeline]:
        return list(self.query(LinkedTimeline))

    def levels_complete(self, data: ViewData) -> None:
        """Every slice of `data` is placed now: its timeline lays its rows out again."""
        for timeline in self.pair_timelines():
            if timeline.data is data:
                timeline.levels_complete()

    def on_mount(self) -> None:
        timelines = self.pair_timelines()
        if timelines:
            timelines[0].focus()
        window = self.owner.window
        if window is not None:
            for timeline in timelines:
                timeline._needs_fit = False
            self.call_after_refresh(self._apply, window)

    def _apply(self, window: tuple[float, float, int]) -> None:
        for timeline in self.pair_timelines():
            timeline._needs_fit = False
            timeline.follow(*window)
        self.update_status()

    def follow(self, source: LinkedTimeline) -> None:
        window = source.job_window()
        for timeline in self.pair_timelines():
            if timeline is not source:
                timeline.follow(*window)
        self.owner.window = window  # back on the job's screen, the same window
        self.update_status()

    def update_status(self) -> None:
        status = self.query("#pair-status")
        window = self.owner.window
        if status and window is not None:
            start, per_cell, cursor = window
            text = f"{fmt_duration(cursor)} · {fmt_duration(per_cell, 2)}/cell · Tab: other rank"
            status.first(Static).update(Text(text))

    def action_switch(self) -> None:
        timelines = self.pair_timelines()
        focused = self.focused
        if focused in timelines:
            timelines[1 - timelines.index(focused)].focus()

    def action_back(self) -> None:
        self.app.pop_screen()
        owner = self.owner
        if owner.window is not None:
            for timeline in owner.timelines():
                if timeline.data is not None:
                    timeline.follow(*owner.window)
            owner.update_status()


def open_job_timeline(
    app: Any,
    job: JobAnalysis,
    *,
    window: tuple[int, int] | None = None,
    ranks: list[int] | None = None,
    aligned: bool = False,
    name: str = "job",
    select: tuple[int, int] | None = None,
) -> JobTimelineScreen:
    """Push the job's timeline on `app`: `window` (start, end ns as recorded) or the whole job,
    `ranks` first in focus, `select` (rank, row) selected. Returns the screen."""
    screen = JobTimelineScreen(
        job, window=window, ranks=ranks, aligned=aligned, name=name, select=select
    )
    app.push_screen(screen)
    return screen
