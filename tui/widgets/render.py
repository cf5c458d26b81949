"""Turning one level of one lane into terminal cells, without touching events off screen.

`compute_cells` is pure numpy: a handful of `searchsorted` calls over the W+1 cell edges plus a
fixed number of samples per cell, so its cost depends on the width, not on the trace.
`cells_to_segments` turns the result into Rich segments (no markup is ever parsed).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from kinetoscope.tui.data.viewdata import Level
from kinetoscope.tui.widgets.theme import DEFAULT, Palette
from rich.segment import Segment
from rich.style import Style

from kinetoscope.present.safe_text import cells_of, fit_name

# How many slices per cell are compared to find the one covering most of it. Cells holding more
# slices than this are dense: they are shaded by busy fraction, and the sampled winner only
# picks the colour.
SAMPLES_PER_CELL = 16

SHADE_EMPTY = 0
SHADE_TICK = 1  # zero-length slices only
SHADE_LIGHT = 2
SHADE_MEDIUM = 3
SHADE_DARK = 4
SHADE_FULL = 5
SHADE_CHARS = ("", "▏", "░", "▒", "▓", " ")

# The style of padding and blank lines. Every segment drawn gets a Style, never None: with
# NO_COLOR set, Textual's monochrome filter reads the colours of each segment's style.
PLAIN = Style()


@dataclass
class CellRow:
    """Per cell: the level entry drawn there (-1: nothing), busy fraction and slice count."""

    entry: np.ndarray
    busy: np.ndarray
    count: np.ndarray


# The largest float below 2**63: edges past it (a view panned beyond centuries) are clipped,
# because casting a float outside int64 to int64 gives garbage.
EDGE_LIMIT = float(np.nextafter(2.0**63, 0))


def cell_edges(t0: float, ns_per_cell: float, width: int) -> np.ndarray:
    """Integer ns edges of `width` cells starting at `t0` (relative time)."""
    edges = np.floor(t0 + np.arange(width + 1, dtype=np.float64) * ns_per_cell)
    return np.clip(edges, -EDGE_LIMIT, EDGE_LIMIT).astype(np.int64)


def compute_cells(level: Level, t0: float, ns_per_cell: float, width: int) -> CellRow:
    """The cells of `level` in the window of `width` cells from `t0`."""
    entry = np.full(width, -1, dtype=np.int64)
    busy = np.zeros(width, dtype=np.float64)
    count = np.zeros(width, dtype=np.int64)
    n = len(level)
    if n == 0 or width <= 0:
        return CellRow(entry, busy, count)
    edges = cell_edges(t0, ns_per_cell, width)
    if level.end_max[-1] <= edges[0] or level.start[0] >= edges[-1]:
        return CellRow(entry, busy, count)
    left, right = edges[:-1], edges[1:]
    hi = np.searchsorted(level.start, right, "left")  # slices starting before the cell's end
    lo = np.searchsorted(level.end_max, left, "right")  # first slice that may reach into it
    count = np.maximum(hi - lo, 0)

    # Busy time up to each edge from prefix sums: every slice before the last one started is
    # over (slices of one level do not nest), the last one counts up to the edge.
    started = np.searchsorted(level.start, edges, "left")
    last = np.maximum(started - 1, 0)
    partial = np.clip(edges - level.start[last], 0, level.end[last] - level.start[last])
    covered = np.where(started > 0, level.cum_dur[last] + partial, 0)
    widths = np.maximum(right - left, 1)
    busy = np.clip((covered[1:] - covered[:-1]) / widths, 0.0, 1.0)

    occupied = np.flatnonzero(count > 0)
    if len(occupied):
        lo_o, count_o = lo[occupied], count[occupied]
        steps = np.arange(SAMPLES_PER_CELL, dtype=np.int64)
        samples = lo_o[:, None] + (steps[None, :] * count_o[:, None]) // SAMPLES_PER_CELL
        samples = np.concatenate((samples, (lo_o + count_o - 1)[:, None]), axis=1)
        np.clip(samples, 0, n - 1, out=samples)
        cover = np.minimum(level.end[samples], right[occupied, None]) - np.maximum(
            level.start[samples], left[occupied, None]
        )
        best = np.argmax(cover, axis=1)
        entry[occupied] = samples[np.arange(len(occupied)), best]
    return CellRow(entry, busy, count)


def shades(cells: CellRow) -> np.ndarray:
    """Shade code per cell from its busy fraction."""
    shade = np.full(len(cells.entry), SHADE_EMPTY, dtype=np.int8)
    has = cells.entry >= 0
    shade[has] = SHADE_TICK
    shade[has & (cells.busy > 0)] = SHADE_LIGHT
    shade[has & (cells.busy >= 0.375)] = SHADE_MEDIUM
    shade[has & (cells.busy >= 0.625)] = SHADE_DARK
    shade[has & (cells.busy >= 0.875)] = SHADE_FULL
    return shade


@lru_cache(maxsize=1024)
def cell_style(
    palette: Palette,
    slot: int,
    shade: int,
    selected: bool,
    cursor: bool,
    gap: bool,
    current_row: bool,
) -> Style:
    """The style of a run of cells in `palette`'s colours (slices take the slot colours: the
    background of full cells, the foreground of shaded ones); cached because there are few
    combinations."""
    row_bg = palette["current-row"] if current_row else None
    if shade == SHADE_EMPTY:
        bg = palette["gap"] if gap else row_bg
        colour = palette["cursor"] if cursor else None
        return Style(color=colour, bgcolor=bg)
    colour = palette.slots[slot % len(palette.slots)]
    if selected:
        style = Style(color=palette["selected-text"], bgcolor=palette["selected"], bold=True)
    elif shade == SHADE_FULL:
        style = Style(color=palette["slot-text"], bgcolor=colour)
    else:
        style = Style(color=colour, bgcolor=row_bg)
    if cursor:
        style += Style(reverse=True)
    return style


def _name_cells(name: str, width: int) -> list[str]:
    """An event name after a space, in its most informative form for `width` cells (see
    safe_text.fit_name), as one string per cell (safe_text.cells_of)."""
    return cells_of(" " + fit_name(name, width - 1), width)


def cells_to_segments(
    cells: CellRow,
    level: Level,
    name_of_row,
    *,
    selected_entry: int = -1,
    cursor_col: int = -1,
    gap_cols: tuple[int, int] | None = None,
    current_row: bool = False,
    palette: Palette = DEFAULT,
) -> list[Segment]:
    """Segments for one lane row, in `palette`'s colours. `name_of_row(row) -> str` gives an
    event's (raw) name."""
    width = len(cells.entry)
    entry = cells.entry
    shade = shades(cells)
    selected = np.zeros(width, dtype=bool)
    if selected_entry >= 0:
        selected = entry == selected_entry
    slot = np.where(entry >= 0, level.slot[np.maximum(entry, 0)] if len(level) else 0, 0)
    gap = np.zeros(width, dtype=bool)
    if gap_cols is not None:
        g0, g1 = max(0, gap_cols[0]), min(width, gap_cols[1])
        if g1 > g0:
            gap[g0:g1] = True
    cursor = np.zeros(width, dtype=bool)
    if 0 <= cursor_col < width:
        cursor[cursor_col] = True

    # A run is a stretch of cells drawn alike; full cells of one slice keep their slice apart
    # so that its name can be written across them.
    ident = np.where(shade == SHADE_FULL, entry, -2 - slot.astype(np.int64))
    change = np.zeros(width, dtype=bool)
    change[0] = True
    if width > 1:
        change[1:] = (
            (ident[1:] != ident[:-1])
            | (shade[1:] != shade[:-1])
            | (selected[1:] != selected[:-1])
            | (gap[1:] != gap[:-1])
            | (cursor[1:] != cursor[:-1])
        )
    starts = np.flatnonzero(change).tolist()
    ends = starts[1:] + [width]

    # Names go over maximal stretches of full cells of one slice (cursor/selection ignored).
    name_cells: dict[int, tuple[int, list[str]]] = {}
    full_ident = np.where(shade == SHADE_FULL, entry, -1)
    if width and (full_ident >= 0).any():
        brk = np.ones(width, dtype=bool)
        brk[1:] = full_ident[1:] != full_ident[:-1]
        span_starts = np.flatnonzero(brk).tolist()
        span_ends = span_starts[1:] + [width]
        for a, b in zip(span_starts, span_ends):
            e = int(full_ident[a])
            if e >= 0 and b - a >= 3:
                name_cells[a] = (b, _name_cells(name_of_row(int(level.rows[e])), b - a))

    segments: list[Segment] = []
    span_start = -1
    span_text: list[str] = []
    span_end = -1
    for a, b in zip(starts, ends):
        sh = int(shade[a])
        style = cell_style(
            palette,
            int(slot[a]),
            sh,
            bool(selected[a]),
            bool(cursor[a]),
            bool(gap[a]),
            current_row,
        )
        if a in name_cells:
            span_end, span_text = name_cells[a]
            span_start = a
        if sh == SHADE_FULL and span_start <= a < span_end:
            piece = span_text[a - span_start : b - span_start]
            if piece and piece[0] == "":
                piece[0] = " "
            if b < span_end and b - span_start < len(span_text) and span_text[b - span_start] == "":
                piece[-1] = " "
            text = "".join(piece)
        elif sh == SHADE_EMPTY:
            text = ("│" if cursor[a] else " ") * (b - a)
        else:
            text = SHADE_CHARS[sh] * (b - a)
        segments.append(Segment(text, style))
    return segments


def band_cells(starts: np.ndarray, ends: np.ndarray, t0: float, ns_per_cell: float, width: int):
    """Per cell of the window of `width` cells from `t0`: whether one of the intervals
    [starts, ends) (relative ns, sorted and disjoint, as `viewdata.merge_spans` makes them)
    reaches into it. Two `searchsorted` over the cell edges: the cost depends on the width."""
    if not len(starts) or width <= 0:
        return np.zeros(max(width, 0), dtype=bool)
    edges = cell_edges(t0, ns_per_cell, width)
    left, right = edges[:-1], edges[1:]
    first = np.searchsorted(ends, left, "right")  # the first interval ending after the cell starts
    inside = first < len(starts)
    inside[inside] = starts[first[inside]] < right[inside]
    return inside
