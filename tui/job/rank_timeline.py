"""One rank of the job's timeline: a `LinkedTimeline` over the rank's `CollapsedRank` (three
rows), with a line naming the rank over its ruler; until the rank is loaded, its rows say so
(and drawing them asks the screen to load it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from kinetoscope.analysis.job import RankEntry
from kinetoscope.analysis.units import fmt_duration
from kinetoscope.tui.data.collapsed_rank import ROW_NAMES, CollapsedRank, row_names
from kinetoscope.tui.data.viewdata import DisplayRow
from kinetoscope.tui.widgets.linked_timeline import LinkedTimeline
from kinetoscope.tui.widgets.render import PLAIN
from kinetoscope.tui.widgets.theme import palette_of
from rich.segment import Segment
from textual.binding import Binding, BindingType
from textual.strip import Strip

from kinetoscope.present.safe_text import clean, fit

if TYPE_CHECKING:
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen


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
            self.cancel_fit()
            self.follow(*window)

    def rebase(self) -> None:
        """The view's origin moved (offsets applied or not): draw it again, same window."""
        if self.data is None:
            return
        cursor_row, selected = self.cursor_row, self.selected_row
        self._following = True
        try:
            super().set_data(self.data)
            self.cancel_fit()
            self.cursor_row = cursor_row
            self.selected_row = selected
        finally:
            self._following = False
