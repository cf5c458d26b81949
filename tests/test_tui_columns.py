"""The drill-down tables' building blocks (tui/widgets/columns.py): a model restricted to some of its
rows is the same table over fewer rows."""

from __future__ import annotations

import numpy as np
from kinetoscope.tui.widgets.columns import count_column, model_row, restrict, time_column
from kinetoscope.tui.widgets.table import Column, TableModel, sort_rows


def model() -> TableModel:
    names = ["a", "bb", "ccc", "dddd", "eeeee"]
    total = np.array([50, 10, 40, 30, 20], dtype=np.int64)
    count = np.array([1, 2, 3, 4, 5], dtype=np.int64)
    return TableModel(
        columns=[
            Column("name", lambda r: names[r], width=0, numeric=False, name=True),
            count_column("count", count),
            time_column("total", total),
        ],
        n=len(names),
        names=np.arange(len(names)),
        name_text=names.__getitem__,
        default_sort=2,
        keys=np.arange(len(names)) * 7,
        name_room=40,
    )


def test_a_restricted_model_is_the_same_table_over_fewer_rows():
    whole = model()
    keep = np.array([True, False, True, False, True])
    part = restrict(whole, keep)
    assert part.n == 3
    assert [model_row(part, r) for r in range(part.n)] == [0, 2, 4]
    assert [model_row(whole, r) for r in range(whole.n)] == list(range(5))
    for column, original in zip(part.columns, whole.columns):
        assert [column.cell(r) for r in range(3)] == [original.cell(g) for g in (0, 2, 4)]
        assert column.width == original.width and column.optional == original.optional
    assert part.keys.tolist() == [0, 14, 28]
    # What the table does with its rows carries over: sorting, filtering, and how much room the
    # names keep before optional columns give way (a range's kernels table kept 28, not 40).
    assert [model_row(part, int(r)) for r in sort_rows(part, 2, True)] == [0, 2, 4]
    assert part.matching("ccc").tolist() == [False, True, False]
    assert part.name_room == whole.name_room == 40
    assert part.default_sort == whole.default_sort
