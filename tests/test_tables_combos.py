"""The table keys in combination: category, shape grouping, range, text filter, sort and cursor
moves, in sequences that cover every ordered pair of them, on a few traces. After every step the
table must be consistent: its rows are exactly those the filter, the category and the range
keep, in the sorted order, the cursor is on one of them, and every line draws.

The sequences call the screens' actions directly (a key press would do the same through
Textual's bindings, at many times the cost on a small machine); a few real key sequences check
the bindings themselves."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.kernels import KernelsScreen
from kinetoscope.tui.trace.operators import CategoryPicker, OperatorsScreen, model_row
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.widgets.table import DataView
from pilot_helpers import settle

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"
SMALL_CORPUS = (
    "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    "hta/amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
)
SIZE = (100, 30)

# Operations on the operators table; every ordered pair of them is tried.
OPS = (
    "category",  # the next category (C)
    "all",  # back to every category
    "shapes",  # S
    "range",  # M
    "filter",  # a substring filter
    "regex",  # a bad regular expression (shows every row and an error)
    "clear",  # empty filter
    "sort",  # the next column to the right (>)
    "reverse",  # R
    "down",  # cursor moves
    "end",
)


def pair_walk(ops: tuple[str, ...]) -> list[str]:
    """A sequence holding every ordered pair (a, b) of `ops` as neighbours (an Euler circuit
    of the complete graph with loops)."""
    n = len(ops)
    unused = {a: list(range(n)) for a in range(n)}
    stack, circuit = [0], []
    while stack:
        here = stack[-1]
        if unused[here]:
            stack.append(unused[here].pop())
        else:
            circuit.append(stack.pop())
    return [ops[i] for i in reversed(circuit)]


def trace_params():
    params = [pytest.param(SAMPLE, id="sample")]
    for name in SMALL_CORPUS:
        path = CORPUS / name
        marks = [] if path.exists() else [pytest.mark.skip(reason=f"{name} not in the corpus")]
        params.append(pytest.param(path, id=name.split("/")[-1][:24], marks=marks))
    return params


async def step_done(pilot, op: str) -> None:
    """Let an operation finish: S and M recompute the table in a worker, the others are
    synchronous (one pause delivers the table's messages to the heading)."""
    if op in ("shapes", "range"):
        await settle(pilot)
    else:
        await pilot.pause()


def expected_rows(screen: OperatorsScreen) -> np.ndarray:
    """Model rows the table should show, computed from the model and the screen's state."""
    table = screen.table
    model = table.model
    keep = np.ones(model.n, dtype=bool)
    if table.pattern and table.filter_error is None:
        keep &= model.matching(table.pattern)
    category = getattr(screen, "category", None)
    if category is not None:
        groups = np.array([model_row(model, r) for r in range(model.n)], dtype=np.int64)
        keep &= screen.table_data.groups.cat[groups] == category
    return np.flatnonzero(keep)


def check_table(screen, where: str) -> None:
    table: DataView = screen.table
    model = table.model
    assert model is not None, where
    view = np.asarray(table.view)
    assert ((view >= 0) & (view < model.n)).all(), where
    assert len(np.unique(view)) == len(view), where
    assert np.array_equal(np.sort(view), expected_rows(screen)), where
    if len(view):
        assert 0 <= table.cursor < len(view), where
        assert table.current_row == int(view[table.cursor]), where
    else:
        assert table.cursor in (-1, 0) and table.current_row == -1, where
    key = model.columns[table.sort_column].key
    if key is not None and len(view) > 1:
        keys = np.asarray(key)[view].astype(np.float64)
        steps = np.diff(keys)
        assert (steps <= 0).all() if table.sort_descending else (steps >= 0).all(), where
    # The heading counts what is shown; every line of the first page draws.
    title = str(screen.query_one("#table-title").render())
    assert f"{len(view):,}" in title, (where, title)
    for y in range(min(len(view), 40) + 1):
        table.render_line(y)
    if len(view):
        screen.describe(table.current_row)


def current_key(table: DataView) -> int | None:
    row = table.current_row
    return None if row < 0 else int(np.asarray(table.model.keys)[row])


def apply(screen, op: str) -> None:
    table = screen.table
    if op == "category":
        # The next category after the one shown (C, then ↓ Enter in its picker).
        order = [None, *screen.categories()]
        here = order.index(screen.category) if screen.category in order else 0
        screen.set_category(order[(here + 1) % len(order)])
    elif op == "all":
        screen.set_category(None)
    elif op == "shapes":
        screen.action_toggle_shapes()
    elif op == "range":
        screen.action_toggle_range()
    elif op == "filter":
        table.set_filter("a")
    elif op == "regex":
        table.set_filter("re:(")
    elif op == "clear":
        table.set_filter("")
    elif op == "sort":
        table.action_sort_step(1)
    elif op == "reverse":
        table.action_reverse()
    elif op == "down":
        table.action_move(3)
    elif op == "end":
        table.action_edge(1)
    else:
        raise AssertionError(op)


@pytest.mark.parametrize("path", trace_params())
async def test_operator_table_key_pairs(path: Path):
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        data = trace_screen.data
        # A marked range (the middle half of the trace), so that M has something to switch.
        start = data.origin + data.span // 4
        trace_screen.marked = None
        from kinetoscope.tui.data.places import MarkedRange

        trace_screen.marked = MarkedRange(start, start + data.span // 2)
        trace_screen.action_operators()
        screen = await settle(pilot, OperatorsScreen)
        check_table(screen, "opened")
        walk = pair_walk(OPS)
        assert len(walk) == len(OPS) ** 2 + 1
        # Then some longer random sequences: states that pairs do not reach.
        rng = random.Random(13)
        walk += [rng.choice(OPS) for _ in range(40)]
        done: list[str] = []
        for op in walk:
            before = current_key(screen.table)
            apply(screen, op)
            done.append(op)
            await step_done(pilot, op)
            where = " ".join(done[-6:])
            check_table(screen, where)
            if op in ("shapes", "range"):
                # Regrouped or another range: the cursor stays on the operator it was on (the
                # first row of it in the new order), or goes to the top when it is not shown.
                table = screen.table
                keys = np.asarray(table.model.keys)[table.view]
                if before is not None and (keys == before).any():
                    assert table.cursor == int(np.flatnonzero(keys == before)[0]), where
                else:
                    assert table.cursor == 0, where


async def test_the_reported_sequences_by_key():
    """The keys of the report: `/ProfilerStep` Enter, `M`, `o`, `C`, `M`; and `o` `C` `S`."""
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        for key in "/ProfilerStep":
            await pilot.press(key)
        await pilot.press("enter")
        await settle(pilot, TraceScreen)
        await pilot.press("M")
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        assert screen.shown_range is not None
        # C opens the category picker: ↓ Enter shows the first category.
        await pilot.press("C")
        await settle(pilot, CategoryPicker)
        await pilot.press("down", "enter")
        await settle(pilot, OperatorsScreen)
        assert screen.category == screen.categories()[0]
        check_table(screen, "C")
        await pilot.press("M")
        await settle(pilot, OperatorsScreen)
        assert screen.shown_range is None
        check_table(screen, "C M")
        await pilot.press("S")
        await settle(pilot, OperatorsScreen)
        check_table(screen, "C M S")
        await pilot.press("M")
        await settle(pilot, OperatorsScreen)
        check_table(screen, "C M S M")


@pytest.mark.parametrize("path", trace_params()[:2])
async def test_kernel_table_key_pairs(path: Path):
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        data = trace_screen.data
        from kinetoscope.tui.data.places import MarkedRange

        start = data.origin + data.span // 4
        trace_screen.marked = MarkedRange(start, start + data.span // 2)
        trace_screen.action_kernels()
        screen = await settle(pilot, KernelsScreen)
        ops = ("range", "filter", "regex", "clear", "sort", "reverse", "down", "end")
        done: list[str] = []
        for op in pair_walk(ops):
            apply(screen, op)
            done.append(op)
            await step_done(pilot, op)
            check_table(screen, " ".join(done[-6:]))


async def test_category_picker_returns_to_all_in_two_keys():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        trace_screen.action_operators()
        screen = await settle(pilot, OperatorsScreen)
        everything = screen.table.row_count
        categories = screen.categories()
        assert len(categories) >= 2
        # C ↓ ↓ Enter: the second category; C Home Enter: all again; C Esc changes nothing.
        await pilot.press("C")
        await settle(pilot, CategoryPicker)
        await pilot.press("down", "down", "enter")
        await settle(pilot, OperatorsScreen)
        assert screen.category == categories[1]
        assert screen.table.row_count < everything
        assert "category" in str(screen.query_one("#table-title").render())
        await pilot.press("C")
        picker = await settle(pilot, CategoryPicker)
        labels = [str(o.prompt) for o in picker.query_one("OptionList").options]
        assert labels[0] == "all categories" and len(labels) == len(categories) + 1
        await pilot.press("home", "enter")
        await settle(pilot, OperatorsScreen)
        assert screen.category is None and screen.table.row_count == everything
        await pilot.press("C")
        await settle(pilot, CategoryPicker)
        await pilot.press("escape")
        await settle(pilot, OperatorsScreen)
        assert screen.category is None


def test_missing_values_sort_last_largest_first():
    from kinetoscope.parser.model import NO_VALUE
    from kinetoscope.tui.widgets.table import Column, TableModel, sort_rows

    values = np.array([5, NO_VALUE, 7, 0, NO_VALUE, 7], dtype=np.int64)
    model = TableModel(columns=[Column("v", str, key=values)], n=len(values))
    assert sort_rows(model, 0, descending=True).tolist() == [2, 5, 0, 3, 1, 4]
    assert sort_rows(model, 0, descending=False).tolist() == [1, 4, 3, 0, 2, 5]


def test_a_mask_made_for_another_model_is_refused():
    from kinetoscope.tui.widgets.table import Column, TableModel, check_mask

    model = TableModel(columns=[Column("v", str)], n=3)
    check_mask(np.ones(3, dtype=bool), model, "scope")
    with pytest.raises(ValueError, match="3 rows"):
        check_mask(np.ones(4, dtype=bool), model, "scope")
