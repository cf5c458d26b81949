"""Places on the timeline, without Textual: the range marked on it (`MarkedRange`) and its label,
and where a screen opened from the timeline puts it when it goes back (`Jump`); `RangeHost` is
what such a screen knows of the trace screen that opened it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kinetoscope.analysis.units import fmt_duration

if TYPE_CHECKING:
    from kinetoscope.tui.data.viewdata import ViewData


@dataclass(frozen=True)
class Jump:
    """Where to put the timeline: select `row` (-1: none); show [start, end) (absolute ns)
    when given, else fit the selected row."""

    row: int = -1
    start: int | None = None
    end: int | None = None


@dataclass
class MarkedRange:
    """A time range marked on the timeline, absolute ns; `end` is None while only the start is."""

    start: int
    end: int | None = None

    @property
    def complete(self) -> bool:
        return self.end is not None

    def bounds(self) -> tuple[int, int]:
        assert self.end is not None
        return (min(self.start, self.end), max(self.start, self.end))


def range_label(data: ViewData, bounds: tuple[int, int]) -> str:
    start, end = bounds
    return (
        f"+{fmt_duration(start - data.origin)} … +{fmt_duration(end - data.origin)} "
        f"({fmt_duration(end - start)})"
    )


class RangeHost(Protocol):
    """The trace screen, as the screens it opens see it (tui/trace/drilldown.py's
    `DrilldownActions`): its view data, the complete marked range (absolute ns) or None, and
    the way back to the timeline."""

    data: ViewData

    def range_bounds(self) -> tuple[int, int] | None: ...

    def show_on_timeline(self, jump: Jump) -> None: ...
