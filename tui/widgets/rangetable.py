"""`RangeTableScreen`: the lifecycle every table over "the whole trace or the marked range"
shares (operators, kernels; later ranks, collectives, diff tables)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from kinetoscope.tui.data.places import RangeHost, range_label
from kinetoscope.tui.widgets.columns import model_row
from kinetoscope.tui.widgets.table import TableModel, TableScreen
from kinetoscope.tui.widgets.theme import palette_of
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.worker import Worker, get_current_worker

if TYPE_CHECKING:
    import numpy as np

R = TypeVar("R")


class RangeTableScreen(TableScreen, Generic[R]):
    """A table computed in a worker thread, over the range marked on the trace screen (`m … m`,
    `M`) or, with none marked or after `M` here, over the whole trace.

    The lifecycle, all of it here:
    - On mount, and when the screen comes back to the front with another range wanted than the
      one shown (one was marked or cleared on the timeline meanwhile), `reload()` runs: the
      shown result is forgotten, the heading says "computing…", and `compute(bounds)` starts
      in a worker thread. A later `reload()` supersedes a computation still running: only the
      latest one's table is shown.
    - `compute(bounds)` runs in that thread. `bounds` is the range (absolute ns) or None for
      the whole trace. It reads the trace's results from `self.data.session` and the screen's
      options (set on the UI thread before `reload()`), touches no widget, and returns
      `(result, model)`: the table's data (what `describe_row`/`choose_row` read) and its
      `TableModel`. A range table usually leaves out the rows with nothing in the range
      (`columns.restrict`); its model rows then map back to the whole table's by `model_row`.
    - Back on the UI thread, `show_result()` keeps `result` and `shown_range`, and shows the model
      keeping the sort, the filter, and the cursor on the row with the same key (`keys` of the
      model), restricted to `scope(result, model)` (None: all rows).
    - If `compute` raises, the heading and the detail pane say what could not be computed
      (FAILURE_SUBJECT) and why, and an error notification says it too
      (TableScreen.show_failure); the table stays empty until a later `reload()` succeeds.
      The app stays open and the other screens keep working.
    - `M` switches between the marked range and the whole trace (`use_range`).
    - The detail pane shows `describe_row(group)` of the highlighted row, Enter calls
      `choose_row(group)`; `group` is the row of the whole-trace table (`model_row`), and
      neither is called before a result is shown.

    The host (the trace screen's DrilldownActions, a `RangeHost`) gives the marked range
    (`range_bounds()`) and the way back to the timeline (`show_on_timeline`); `self.data` is
    its ViewData, whose origin the range is labelled from.

    Subclasses set TITLE_TEXT and FAILURE_SUBJECT and give `compute`, `table_title()` (the
    heading's start: what the table is), optionally `table_state()` (what restricts it, after
    the "computing…"), `describe_row`, `choose_row`, `scope` and `resumed`; and put "M" in
    their BINDINGS (RANGE_BINDING) so that the help and the footer list it.
    """

    RANGE_BINDING: ClassVar[BindingType] = Binding(
        "M", "toggle_range", "Range/all", tooltip="Marked range or the whole trace"
    )
    SHOW_DETAIL = True
    DETAIL_CLASSES = "table-detail nowrap"

    def __init__(self, host: RangeHost) -> None:
        super().__init__()
        self.host = host
        self.data = host.data
        self.use_range = True  # the marked range when there is one; False: the whole trace
        self.shown_range: tuple[int, int] | None = None
        self.result: R | None = None
        self.computing: tuple[int, int] | None = None  # the bounds asked of the last reload()

    # -- what subclasses give ---------------------------------------------------------------

    def compute(self, bounds: tuple[int, int] | None) -> tuple[R, TableModel]:
        """(In a worker thread.) The table's data and model, for `bounds` or the whole trace."""
        raise NotImplementedError

    def table_title(self) -> Text:
        """The heading's start: what the table shows."""
        return Text(self.TITLE_TEXT, "bold")

    def table_state(self) -> Text:
        """What restricts the rows shown besides the range (e.g. a category), for the heading."""
        return Text()

    def scope(self, result: R, model: TableModel) -> np.ndarray | None:
        """The rows of `model` to show (a mask made for it), or None for all of them."""
        return None

    def describe_row(self, group: int) -> Text | None:
        """The detail pane's text for a row of the whole-trace table."""
        return None

    def choose_row(self, group: int) -> None:
        """Enter on a row of the whole-trace table."""

    # -- the lifecycle ----------------------------------------------------------------------

    def on_mount(self) -> None:
        super().on_mount()
        self.refresh_heading()
        self.reload()

    def on_screen_resume(self) -> None:
        # A range marked (or cleared) since the table was built: show it.
        if self.wanted_range() != self.shown_range:
            self.reload()
        else:
            self.resumed()

    def resumed(self) -> None:
        """Back in front with the same range: catch up with what else may have changed on the
        trace screen meanwhile (e.g. Python frames hidden)."""

    def wanted_range(self) -> tuple[int, int] | None:
        return self.host.range_bounds() if self.use_range else None

    def reload(self) -> None:
        """Forget the table shown and compute it again (options or range changed)."""
        self.result = None
        self.clear_failure()
        self.computing = self.wanted_range()
        self.refresh_heading()
        self.run_worker(
            partial(self._compute, self.computing),
            name=f"{type(self).__name__}.compute",
            group="range-table",
            thread=True,
            exclusive=True,
            exit_on_error=False,  # a failure is said on this screen (TableScreen.show_failure)
        )

    def _compute(self, bounds: tuple[int, int] | None) -> None:
        result, model = self.compute(bounds)
        self.app.call_from_thread(self.show_result, get_current_worker(), result, bounds, model)

    def show_result(
        self, worker: Worker | None, result: R, bounds: tuple[int, int] | None, model: TableModel
    ) -> None:
        if worker is not None and worker.is_cancelled:
            return  # a reload() since: its own computation will answer
        self.result = result
        self.shown_range = bounds
        self.table.set_model(model, keep_state=True, scope=self.scope(result, model))
        self.refresh_heading()

    def show_failure(self, message: str) -> None:
        # No table rather than the one of another range or options, under this title.
        self.result = None
        self.shown_range = self.computing
        self.table.clear()
        super().show_failure(message)

    def heading(self) -> Text:
        text = self.table_title()
        if self.result is None and self.failure is None:
            text.append(" · computing…")
        text.append_text(self.table_state())
        if self.shown_range is not None:
            marked = palette_of(self).style("marked", bold=True)
            text.append(f" · range {range_label(self.data, self.shown_range)}", marked)
        elif self.host.range_bounds() is not None:
            text.append(" · whole trace (M: marked range)")
        return text

    def action_toggle_range(self) -> None:
        if self.host.range_bounds() is None:
            self.notify("No range marked: m on the timeline marks one", timeout=3)
            return
        self.use_range = not self.use_range
        self.reload()

    def describe(self, row: int) -> Text | None:
        if self.result is None or self.table.model is None:
            return None
        return self.describe_row(model_row(self.table.model, row))

    def choose(self, row: int) -> None:
        if self.result is None or self.table.model is None:
            return
        self.choose_row(model_row(self.table.model, row))
