"""Operators (`o`): CPU (cat, name) groups with self and total times on CPU and GPU, and the
drill-down of one group: instances, child split, launched kernels and input shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import numpy as np
from kinetoscope.analysis.drilldown import (
    ShapeGroups,
    child_split,
    group_by_shape,
    instances_of,
    kernels_launched,
    shape_split,
    subtree_gpu,
)
from kinetoscope.analysis.operators import OperatorTable, compute_operators
from kinetoscope.analysis.ranges import operators_in_range
from kinetoscope.analysis.session import AnalysisFailed
from kinetoscope.analysis.units import fmt_duration, plural
from kinetoscope.tui.data.failures import failure_message
from kinetoscope.tui.data.places import Jump
from kinetoscope.tui.widgets.columns import (
    columns_of,
    count_column,
    instance_columns,
    percent_column,
    restrict,
    share_bar,
    time_column,
)
from kinetoscope.tui.widgets.columns import (
    model_row as model_row,  # re-exported: the row of the whole table
)
from kinetoscope.tui.widgets.rangetable import RangeTableScreen
from kinetoscope.tui.widgets.table import Column, DataView, TableModel, TableScreen
from kinetoscope.tui.widgets.theme import PART_NAMES, palette_of
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from kinetoscope.present.safe_text import clean, fit_name, shorten
from kinetoscope.present.tables import (
    TEXT,
    US,
    Field,
    OperatorRows,
    Table,
    instances_table,
    named_counts_table,
    operator_memory,
    operators_table,
)

if TYPE_CHECKING:
    from kinetoscope.tui.trace.drilldown import DrilldownActions
    from textual.worker import Worker

# Names of the palette's colours (theme.py) of an operator's self time and children.
SELF_COLOUR = "part-self"
CHILD_COLOURS = PART_NAMES
OTHER_COLOUR = "part-other"


class ShownOperators(NamedTuple):
    """What the operators table shows: its groups' times, per group its input shape (a string
    id, -1: none recorded) when grouped by shape, and why the memory columns are missing when
    they could not be computed (the table is shown without them)."""

    table: OperatorTable
    shapes: np.ndarray | None
    memory_failure: str | None = None


class OperatorsScreen(RangeTableScreen[ShownOperators]):
    """Every CPU (cat, name) group; Enter drills into one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("S", "toggle_shapes", "By shape", tooltip="Group by name + input shape, or not"),
        RangeTableScreen.RANGE_BINDING,
        Binding(
            "C",
            "pick_category",
            "Category",
            tooltip="Pick a category to show (cpu_op, …) or all of them",
        ),
        Binding("P", "toggle_python", "Python", tooltip="Hide/show python_function frames"),
    ]
    HELP_TITLE = "Operators (o)"  # the key help's section (tui/palette.py)
    TITLE_TEXT = "Operators"
    FAILURE_SUBJECT = "operators"

    def __init__(self, host: DrilldownActions) -> None:
        super().__init__(host)
        self.by_shape = False
        self._shaped: ShapeGroups | None = None  # computed on first use
        self.category: int | None = None  # string id of the category shown, None for all
        self.hiding_python = False  # python_function rows left out (the timeline's P)
        self._noted: str | None = None  # the memory columns' failure, once notified

    @property
    def table_data(self) -> OperatorTable | None:
        return None if self.result is None else self.result.table

    @property
    def shape_ids(self) -> np.ndarray | None:
        return None if self.result is None else self.result.shapes

    def resumed(self) -> None:
        if self.data.hide_python != self.hiding_python:  # P pressed on the timeline
            self.set_category(self.category)

    def table_title(self) -> Text:
        text = Text("Operators", "bold")
        text.append(" by name + input shape" if self.by_shape else " (CPU cat, name)")
        return text

    def table_state(self) -> Text:
        text = Text()
        if self.category is not None:
            text.append(f" · category {clean(self.data.trace.strings[self.category])}", "bold")
        if self.data.hide_python:
            text.append(" · Python frames hidden (P)", "bold")
        if self.result is not None and self.result.memory_failure is not None:
            error = palette_of(self).style("error", bold=True)
            text.append(f" · {self.result.memory_failure}", error)
        return text

    def compute(self, bounds: tuple[int, int] | None) -> tuple[ShownOperators, TableModel]:
        session = self.data.session
        trace = session.trace
        if self.by_shape:
            shaped = self._shaped
            if shaped is None:
                shaped = group_by_shape(trace, session.classes.cpu, session.cpu_groups)
                self._shaped = shaped
            nesting, groups, shapes = shaped.nesting, shaped.groups, shaped.shape
        else:
            nesting, groups, shapes = session.nesting, session.cpu_groups, None
        if bounds is not None:
            table = operators_in_range(trace, nesting, groups, session.links, *bounds)
        elif self.by_shape:
            table = compute_operators(trace, nesting, groups, session.links)
        else:
            table = session.operators
        # Memory columns (whole trace, by name) when the trace recorded allocations.
        memory = None
        memory_failure = None
        if shapes is None and bounds is None:
            try:
                memory = operator_memory(session, groups)
            except AnalysisFailed as error:  # the times still show; the title says what is not
                memory_failure = failure_message("memory columns", error)
        model = operator_model(trace, table, shapes, bounds is not None, memory)
        return ShownOperators(table, shapes, memory_failure), model

    def show_result(
        self,
        worker: Worker | None,
        result: ShownOperators,
        bounds: tuple[int, int] | None,
        model: TableModel,
    ) -> None:
        super().show_result(worker, result, bounds, model)
        failure = result.memory_failure
        if self.result is result and failure is not None and failure != self._noted:
            self._noted = failure
            self.notify(failure, severity="error", timeout=8, markup=False)

    def csv_table(self) -> Callable[[], Table] | None:
        result = self.result
        if result is None:
            return None
        session = self.data.session
        # The memory columns when the table shows them (whole trace, by name).
        with_memory = (
            result.shapes is None and self.shown_range is None and result.memory_failure is None
        )

        def make() -> Table:  # in the save's worker
            memory = operator_memory(session, session.cpu_groups) if with_memory else None
            return operators_table(
                OperatorRows.of(session.trace, result.table, result.shapes, memory)
            )

        return make

    def scope(self, result: ShownOperators, model: TableModel) -> np.ndarray | None:
        # The category's mask is made for this model (another grouping or range has other rows).
        return self._category_scope(result.table, model)

    def categories(self) -> list[int]:
        """Category string ids of the table, cpu_op first, then by self time."""
        table = self.table_data
        if table is None:
            return []
        cats = table.groups.cat.astype(np.int64)
        strings = self.data.trace.strings
        excl = {int(c): int(table.excl[cats == c].sum()) for c in np.unique(cats)}
        return sorted(excl, key=lambda c: (strings[c].lower() != "cpu_op", -excl[c], strings[c]))

    def action_pick_category(self) -> None:
        """A list of the categories, "all" first, the one shown highlighted: Enter shows one."""
        table = self.table_data
        if table is None:
            return
        strings = self.data.trace.strings
        cats = table.groups.cat.astype(np.int64)
        choices: list[tuple[int | None, str]] = [(None, "all categories")]
        for cat in self.categories():
            mine = cats == cat
            count = int(mine.sum())
            label = (
                f"{clean(strings[cat]) or '(no category)'} · {plural(count, 'operator')} · "
                f"self {fmt_duration(int(table.excl[mine].sum()))}"
            )
            choices.append((cat, label))
        self.app.push_screen(CategoryPicker(choices, self.category), self._picked)

    def _picked(self, choice: tuple[int | None] | None) -> None:
        if choice is not None:
            self.set_category(choice[0])

    def set_category(self, category: int | None) -> None:
        """Show only the operators of one category (a string id; None: all)."""
        self.category = category
        table, model = self.table_data, self.table.model
        if table is not None and model is not None:
            self.table.set_scope(self._category_scope(table, model))
        self.refresh_heading()

    def _category_scope(self, table: OperatorTable, model: TableModel) -> np.ndarray | None:
        """The rows of `model` (made from `table`) in the category shown, less the
        python_function ones while Python frames are hidden (P); None: all."""
        hide_python = self.data.hide_python
        self.hiding_python = hide_python
        if self.category is None and not hide_python:
            return None
        rows = model.source_rows
        groups = np.arange(model.n) if rows is None else rows
        cats = table.groups.cat[groups].astype(np.int64)
        keep = np.ones(len(groups), dtype=bool) if self.category is None else cats == self.category
        if hide_python:
            keep &= ~self.data.python_category[cats]
        return np.asarray(keep, dtype=bool)

    def action_toggle_python(self) -> None:
        """Hide the python_function frames here and on the timeline (its P), or show them."""
        toggle = getattr(self.host, "toggle_python", None)
        if toggle is not None:
            toggle()
        self.set_category(self.category)

    def describe_row(self, group: int) -> Text | None:
        table = self.table_data
        assert table is not None
        trace = self.data.trace
        text = Text()
        text.append(clean(trace.strings[int(table.groups.name[group])]) or "(no name)", "bold")
        text.append(f" · {clean(trace.strings[int(table.groups.cat[group])])}")
        if self.shape_ids is not None and self.shape_ids[group] >= 0:
            text.append(f" · shape {clean(trace.strings[int(self.shape_ids[group])])}")
        text.append("\n")
        text.append(
            f"{plural(int(table.count[group]), 'call')} · total {fmt_duration(int(table.incl[group]))} · "
            f"self {fmt_duration(int(table.excl[group]))} · GPU self "
            f"{fmt_duration(int(table.gpu_self[group]))} · GPU total "
            f"{fmt_duration(int(table.gpu_total[group]))}"
        )
        text.append(" · Enter: instances, children, kernels, shapes", "dim")
        return text

    def action_toggle_shapes(self) -> None:
        self.by_shape = not self.by_shape
        self.reload()

    def choose_row(self, group: int) -> None:
        assert self.table_data is not None
        shape = int(self.shape_ids[group]) if self.shape_ids is not None else None
        self.app.push_screen(OperatorDetailScreen(self.host, self.table_data, group, shape))


class CategoryPicker(ModalScreen[tuple[int | None] | None]):
    """The categories of the operators table, "all" first: Enter shows the highlighted one,
    Esc leaves the table as it is. Dismisses with (category,) or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("q", "cancel", "Cancel", show=False),
        Binding("C", "cancel", "Cancel", show=False),
        Binding("question_mark", "app.help", "Keys", show=False),  # modal: the app's is hidden
    ]
    HELP_TITLE = "Operator categories (C in o)"
    DEFAULT_CSS = """
    CategoryPicker { align: center middle; }
    #category-box {
        width: 70; max-width: 90%; height: auto; max-height: 80%;
        border: round $primary; background: $surface;
    }
    #category-title { height: 1; padding: 0 1; }
    #category-list { height: auto; max-height: 20; border: none; }
    """

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            *CategoryPicker.BINDINGS,
            Binding("up,down,home,end", "table_move", "Move in the list"),
            Binding("enter", "table_choose", "Show the highlighted category"),
        ]

    def __init__(self, choices: list[tuple[int | None, str]], current: int | None) -> None:
        super().__init__()
        self.choices = choices
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="category-box"):
            yield Static(
                Text("Show the operators of one category · Enter picks · Esc cancels", "bold"),
                id="category-title",
            )
            yield OptionList(
                *(Option(Text(label), id=str(i)) for i, (_, label) in enumerate(self.choices)),
                id="category-list",
            )

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        wanted = [cat for cat, _ in self.choices]
        options.highlighted = wanted.index(self.current) if self.current in wanted else 0
        options.focus()

    def on_option_list_option_selected(self, message: OptionList.OptionSelected) -> None:
        message.stop()
        self.dismiss((self.choices[message.option_index][0],))

    def action_cancel(self) -> None:
        self.dismiss(None)


def operator_model(
    trace,
    table: OperatorTable,
    shapes: np.ndarray | None,
    in_range: bool,
    memory: dict[str, np.ndarray] | None = None,
) -> TableModel:
    """Rows are groups; groups with nothing in a range are left out of it. Its columns are
    the operators table's (present/tables.py), with its memory columns when given."""
    groups = table.groups
    names = groups.name.astype(np.int64)
    strings = trace.strings
    columns = columns_of(operators_table(OperatorRows.of(trace, table, shapes, memory)))
    self_column = 5 if shapes is not None else 4
    model = TableModel(
        columns=columns,
        n=len(table),
        names=np.arange(len(names)),  # the filter tests the name and the category
        name_text=lambda g: (strings[names[g]], strings[groups.cat[g]]),
        default_sort=self_column,
        # A row is its (cat, name): grouping by shape or a range keeps the cursor on it.
        keys=(groups.cat.astype(np.int64) << 32) | names,
    )
    if in_range:
        model = restrict(model, (table.count > 0) | (table.gpu_self > 0) | (table.gpu_total > 0))
    return model


class OperatorDetailScreen(TableScreen):
    """One operator group: a summary of where its time goes, and a table that shows its
    instances, its children by name, the kernels it launched or its input shapes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("I", "show('instances')", "Instances", tooltip="Instances, longest first"),
        Binding("C", "show('children')", "Children", tooltip="Children by name (time split)"),
        Binding("K", "show('kernels')", "Kernels", tooltip="Kernels it launched"),
        Binding("S", "show('shapes')", "Shapes", tooltip="Input shapes recorded"),
        Binding("tab", "cycle", "Next view", show=False, tooltip="Next view"),
    ]
    HELP_TITLE = "Operator details"
    SHOW_DETAIL = True
    DETAIL_CLASSES = "table-detail nowrap"
    FILTER_HINT = "type to filter (instances and shapes: by input shape; else by name)"
    VIEWS = ("instances", "children", "kernels", "shapes")

    def __init__(
        self, host: DrilldownActions, table: OperatorTable, group: int, shape: int | None
    ) -> None:
        super().__init__()
        self.host = host
        self.data = host.data
        self.op_table = table
        self.group = group
        self.shape = shape
        self.current = "instances"
        session = host.data.session
        trace = session.trace
        self.trace = trace
        self.op_name = trace.strings[int(table.groups.name[group])]
        self.cat = trace.strings[int(table.groups.cat[group])]
        # The drill-down is of the (cat, name) group; a shape group narrows its instances.
        by_name = session.cpu_groups
        name_group = int(
            np.flatnonzero(
                (by_name.name == table.groups.name[group])
                & (by_name.cat == table.groups.cat[group])
            )[0]
        )
        self.name_group = name_group
        rows = instances_of(trace, by_name, name_group)
        if shape is not None:
            rows = rows[trace.shape[rows] == shape]
        self.rows = rows
        self.split = child_split(trace, session.nesting, by_name, name_group)
        self.kernels = kernels_launched(
            trace, session.nesting, session.links, by_name, session.gpu_groups, name_group
        )
        self.shapes = shape_split(trace, rows)
        self.models: dict[str, TableModel] = {}

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#table-detail", Static).update(self.summary())
        self.action_show("instances")

    def recolour(self) -> None:
        """The theme changed (the app calls this): the title and the summary again."""
        super().recolour()
        self.query_one("#table-detail", Static).update(self.summary())

    def heading(self) -> Text:
        text = Text()
        name_style = palette_of(self).style("heading", bold=True)
        text.append(fit_name(self.op_name, 44) or "(no name)", name_style)
        if self.shape is not None:
            shape = self.trace.strings[self.shape] if self.shape >= 0 else "no shape recorded"
            text.append(f" [{shorten(shape, 30)}]")
        text.append(f" · {clean(self.cat)} · ")
        for view in self.VIEWS:
            style = "bold reverse" if view == self.current else "dim"
            text.append(f" {view[0].upper()} {view} ", style)
        return text

    def summary(self) -> Text:
        """Self/children split, launched kernels and shapes, a few lines each."""
        trace = self.trace
        session = self.data.session
        split = self.split
        text = Text(no_wrap=True, overflow="ellipsis")
        inclusive = max(split.inclusive, 1)
        top = list(zip(split.child_group[:5].tolist(), split.child_time[:5].tolist()))
        rest = int(split.child_time[5:].sum())
        palette = palette_of(self)
        child_colours = [palette[name] for name in CHILD_COLOURS]
        parts = [(split.self_time, palette[SELF_COLOUR])]
        parts += [(t, child_colours[i % len(child_colours)]) for i, (_, t) in enumerate(top)]
        parts.append((rest, palette[OTHER_COLOUR]))
        text.append("total ", "bold")
        text.append(f"{fmt_duration(split.inclusive)} = ")
        text.append_text(share_bar(parts, 40))
        text.append("\n")
        text.append("  ■ ", palette[SELF_COLOUR])
        text.append(f"self {fmt_duration(split.self_time)} ({split.self_time / inclusive:.0%})")
        for i, (child, t) in enumerate(top):
            name = trace.strings[int(session.cpu_groups.name[child])]
            text.append("  ■ ", child_colours[i % len(child_colours)])
            text.append(f"{fit_name(name, 28)} {fmt_duration(t)} ({t / inclusive:.0%})")
        if rest:
            text.append("  ■ ", palette[OTHER_COLOUR])
            text.append(f"other {fmt_duration(rest)}")
        text.append("\n")
        kernels = self.kernels
        text.append("kernels ", "bold")
        if not len(kernels.kernel_group):
            text.append("none launched")
        else:
            text.append(
                f"{int(kernels.count.sum()):,} launched, {fmt_duration(kernels.total_time)}"
            )
            for g, t in zip(kernels.kernel_group[:3].tolist(), kernels.total[:3].tolist()):
                name = trace.strings[int(session.gpu_groups.name[g])]
                text.append(f" · {fit_name(name, 34)} {fmt_duration(t)}")
        text.append("\n")
        text.append("shapes ", "bold")
        recorded = self.shapes.shape >= 0
        if not recorded.any():
            text.append("none recorded")
        else:
            for s, c in list(zip(self.shapes.shape[recorded], self.shapes.count[recorded]))[:4]:
                text.append(f"{shorten(trace.strings[int(s)], 30)} ×{int(c):,}  ")
        return text

    def action_show(self, view: str) -> None:
        self.current = view
        model = self.models.get(view)
        if model is None:
            model = self.models[view] = self.make_model(view)
        self.table.set_model(model)
        self.query_one(DataView).set_filter(self.table.pattern)
        self.refresh_heading()

    def action_cycle(self) -> None:
        self.action_show(self.VIEWS[(self.VIEWS.index(self.current) + 1) % len(self.VIEWS)])

    def make_model(self, view: str) -> TableModel:
        trace = self.trace
        session = self.data.session
        strings = trace.strings
        data = self.data
        if view == "instances":
            rows = self.rows
            own = session.nesting.self_time[session.nesting.position[rows]]
            gpu = subtree_gpu(trace, session.nesting, session.links, rows)
            shapes = trace.shape[rows].astype(np.int64)
            lanes = [data.lanes[i].short_label if i >= 0 else "?" for i in data.row_lane[rows]]
            return TableModel(
                columns=[
                    *instance_columns(trace, rows, data.origin),
                    time_column("self", own),
                    time_column("GPU", gpu),
                    Column("lane", lambda i: lanes[i], width=18, numeric=False, optional=True),
                    Column(
                        "input shape",
                        lambda i: clean(strings[shapes[i]]) if shapes[i] >= 0 else "-",
                        key=shapes,
                        width=0,
                        numeric=False,
                    ),
                ],
                n=len(rows),
                names=np.maximum(shapes, 0),
                name_text=strings.__getitem__,
                default_sort=2,
            )
        if view == "children":
            split = self.split
            names = session.cpu_groups.name[split.child_group].astype(np.int64)
            inclusive = max(split.inclusive, 1)
            # Row 0 is the operator's own self time; the children follow.
            labels = ["(self)"] + [strings[n] for n in names]
            count = np.concatenate(([len(self.rows)], split.child_count))
            times = np.concatenate(([split.self_time], split.child_time))
            return TableModel(
                columns=[
                    Column("child", lambda i: labels[i], width=0, numeric=False, name=True),
                    count_column("count", count),
                    time_column("time", times),
                    percent_column("% of total", times, inclusive, width=10),
                ],
                n=len(labels),
                names=np.concatenate(([0], names)),
                name_text=lambda i: strings[i] if i else "(self)",
                default_sort=2,
            )
        if view == "kernels":
            kernels = self.kernels
            names = session.gpu_groups.name[kernels.kernel_group].astype(np.int64)
            mean = kernels.total / np.maximum(kernels.count, 1)
            return TableModel(
                columns=[
                    Column(
                        "kernel", lambda i: strings[names[i]], width=0, numeric=False, name=True
                    ),
                    count_column("count", kernels.count),
                    time_column("total", kernels.total),
                    time_column("mean", mean),
                    percent_column("% of GPU", kernels.total, max(kernels.total_time, 1), width=9),
                ],
                n=len(names),
                names=names,
                name_text=strings.__getitem__,
                default_sort=2,
            )
        shapes = self.shapes
        return TableModel(
            columns=[
                Column(
                    "input shape",
                    lambda i: clean(strings[shapes.shape[i]]) if shapes.shape[i] >= 0 else "-",
                    width=0,
                    numeric=False,
                ),
                count_column("count", shapes.count),
                time_column("total", shapes.total),
                time_column("mean", shapes.total / np.maximum(shapes.count, 1)),
            ],
            n=len(shapes.shape),
            names=np.maximum(shapes.shape, 0),
            name_text=strings.__getitem__,
            default_sort=2,
        )

    def csv_table(self) -> Table:
        """The view shown (instances, children, kernels or shapes) as a headless table."""
        trace = self.trace
        session = self.data.session
        strings = trace.strings
        name = f"operator-{self.current}"
        if self.current == "instances":
            rows = self.rows
            own = session.nesting.self_time[session.nesting.position[rows]]
            gpu = subtree_gpu(trace, session.nesting, session.links, rows)
            lanes = [
                self.data.lanes[i].short_label if i >= 0 else None for i in self.data.row_lane[rows]
            ]
            shapes = trace.shape[rows].astype(np.int64)
            return instances_table(
                trace,
                rows,
                name,
                [
                    Field("self_us", US, lambda i: own[i]),
                    Field("gpu_us", US, lambda i: gpu[i]),
                    Field("lane", TEXT, lambda i: lanes[i]),
                    Field(
                        "input_shape",
                        TEXT,
                        lambda i: strings[shapes[i]] if shapes[i] >= 0 else None,
                    ),
                ],
            )
        if self.current == "children":
            split = self.split
            names = session.cpu_groups.name[split.child_group].astype(np.int64)
            labels = ["(self)"] + [strings[n] for n in names]
            count = np.concatenate(([len(self.rows)], split.child_count))
            times = np.concatenate(([split.self_time], split.child_time))
            return named_counts_table(name, "child", labels, count, times, max(split.inclusive, 1))
        if self.current == "kernels":
            kernels = self.kernels
            names = session.gpu_groups.name[kernels.kernel_group].astype(np.int64)
            labels = [strings[n] for n in names]
            whole = max(kernels.total_time, 1)
            return named_counts_table(name, "kernel", labels, kernels.count, kernels.total, whole)
        shapes = self.shapes
        labels = [strings[int(s)] if s >= 0 else None for s in shapes.shape]
        return named_counts_table(name, "input_shape", labels, shapes.count, shapes.total)

    def choose(self, row: int) -> None:
        session = self.data.session
        if self.current == "instances":
            self.host.show_on_timeline(Jump(row=int(self.rows[row])))
        elif self.current == "children":
            if row == 0:
                return
            child = int(self.split.child_group[row - 1])
            table = session.operators
            self.app.push_screen(OperatorDetailScreen(self.host, table, child, None))
        elif self.current == "kernels":
            from kinetoscope.tui.trace.kernels import KernelDetailScreen

            group = int(self.kernels.kernel_group[row])
            launched = self.kernels.rows
            mine = launched[session.gpu_groups.index[launched] == group]
            self.app.push_screen(KernelDetailScreen(self.host, group, rows=mine))
        else:
            # The instances with exactly this shape (-1: those without one).
            shape = int(self.shapes.shape[row])
            table = session.operators
            self.app.push_screen(OperatorDetailScreen(self.host, table, self.name_group, shape))
