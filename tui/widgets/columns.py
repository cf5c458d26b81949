"""Building blocks of the drill-down tables: column factories (durations, counts, shares, a
table of instances), the columns of a table's description (`columns_of`: present/tables.py),
a model restricted to some of its rows, and share bars.

Any table screen (operators, kernels, and later ranks, collectives or a diff) builds its
`TableModel` from these, so that the same kind of value looks and sorts the same everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from kinetoscope.analysis.units import fmt_table_time
from kinetoscope.tui.widgets.table import Column, TableModel
from rich.text import Text

from kinetoscope.present.tables import COUNT, DURATION, NAME, SHARE, Field, Table

if TYPE_CHECKING:
    from kinetoscope.parser.model import Trace

fmt_cell_time = fmt_table_time  # the one duration format of the tables


def time_column(
    title: str, values: np.ndarray, width: int = 10, *, optional: bool = False
) -> Column:
    """A column of ns durations (sorted by value, three decimals in an adaptive unit whose
    field lines up down the column), wide enough for its title and its widest value."""
    values = np.asarray(values)
    widest = 10
    if len(values) and float(np.nanmax(np.abs(values))) >= 1e13:
        widest = len(fmt_table_time(float(np.nanmax(np.abs(values))))) + 1
    return Column(
        title,
        lambda r: fmt_table_time(float(values[r])),
        key=values,
        width=max(width, widest, len(title) + 1),
        optional=optional,
    )


def instance_columns(trace: Trace, rows: np.ndarray, origin: int) -> list[Column]:
    """The first columns of a table of instances (trace rows): their number in file order,
    start (relative to the view's origin) and duration."""
    start = trace.start[rows]
    return [
        Column("#", lambda i: f"{i + 1:,}", key=np.arange(len(rows)), width=7, largest_first=False),
        Column("start", lambda i: "+" + fmt_cell_time(int(start[i]) - origin), key=start, width=13),
        time_column("dur", trace.dur[rows]),
    ]


def count_column(title: str, values: np.ndarray, width: int = 6) -> Column:
    """Counts with thousands separators, never cut: as wide as the largest needs."""
    values = np.asarray(values)
    largest = len(f"{int(values.max()):,}") if len(values) else 1
    return Column(
        title,
        lambda r: f"{int(values[r]):,}",
        key=values,
        width=max(width, largest + 1, len(title) + 1),
    )


def percent_column(
    title: str, values: np.ndarray, whole: float, width: int = 6, *, optional: bool = False
) -> Column:
    share = values / whole if whole else np.zeros(len(values))
    return Column(
        title,
        lambda r: f"{100 * share[r]:.1f}",
        key=share,
        width=max(width, len(title) + 1),
        optional=optional,
    )


def column_of(field: Field) -> Column:
    """The viewer's column of a table's field (present/tables.py): durations, counts and
    shares through the factories above, whatever the table; text and names as the field's
    view says (names cut where they say least)."""
    assert field.view is not None
    view = field.view()
    if field.kind is DURATION:
        width = 10 if view.width is None else view.width
        return time_column(view.title, view.values, width, optional=view.optional)
    if field.kind is COUNT and view.width is None:  # as wide as the largest count needs
        return count_column(view.title, view.values)
    if field.kind is COUNT:
        values = np.asarray(view.values)
        return Column(view.title, lambda r: f"{int(values[r]):,}", key=values, width=view.width)
    if field.kind is SHARE:
        return percent_column(view.title, view.values, view.whole, optional=view.optional)
    return Column(
        view.title,
        view.cell or field.value,
        key=view.values,
        width=10 if view.width is None else view.width,
        numeric=field.kind.layout == "number",  # bytes, say: right-aligned
        optional=view.optional,
        name=field.kind is NAME,
        largest_first=view.largest_first,
    )


def columns_of(table: Table) -> list[Column]:
    """The viewer's columns of a table: a column per field that has a view, in field order."""
    return [column_of(f) for f in table.view_fields]


def restrict(model: TableModel, keep: np.ndarray) -> TableModel:
    """The same table over only the rows where `keep` holds (row ids stay the model's)."""
    rows = np.flatnonzero(keep)
    columns = [
        dataclasses.replace(
            c,
            cell=(lambda cell: lambda i: cell(int(rows[i])))(c.cell),
            key=None if c.key is None else np.asarray(c.key)[rows],
        )
        for c in model.columns
    ]
    return dataclasses.replace(
        model,
        columns=columns,
        n=len(rows),
        names=None if model.names is None else model.names[rows],
        keys=None if model.keys is None else np.asarray(model.keys)[rows],
        source_rows=rows,
        _distinct=None,
    )


def model_row(model: TableModel, row: int) -> int:
    """The original row id of a row of a (possibly restricted) model."""
    rows = model.source_rows
    return int(rows[row]) if rows is not None else row


def share_bar(parts: Iterable[tuple[float, str]], width: int) -> Text:
    """A bar of `width` cells split between parts (value, colour) in proportion."""
    parts = [(max(float(v), 0.0), c) for v, c in parts]
    total = sum(v for v, _ in parts)
    text = Text()
    if total <= 0 or width <= 0:
        return Text("·" * max(width, 0), "dim")
    # Largest remainder: cells add up to `width` exactly.
    exact = [v / total * width for v, _ in parts]
    cells = [int(x) for x in exact]
    for i in sorted(range(len(parts)), key=lambda i: exact[i] - cells[i], reverse=True)[
        : width - sum(cells)
    ]:
        cells[i] += 1
    for (_, colour), n in zip(parts, cells):
        text.append("█" * n, colour)
    return text
