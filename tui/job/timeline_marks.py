"""The job's timeline, its marked range: m at a range's start and m at its end (or M on a selected
event, such as a ProfilerStep) mark one range on every rank, in the job's clock as drawn; e
exports it from every rank as one Perfetto bundle.

`JobRangeMarks` is that part of `JobTimelineScreen` (job_timeline.py): its keys and the range
they keep (`marked`: job relative ns, (start, end), end None while only the start is marked).
"""

from __future__ import annotations

from kinetoscope.analysis.units import fmt_duration

from kinetoscope.present.safe_text import clean


class JobRangeMarks:
    """The marked range of the job's timeline (see the module docstring); a part of
    `JobTimelineScreen`, which has `window`, `timelines()`, `current()`, `job`, `origin`,
    `aligned` and `title_name`."""

    marked: tuple[int, int | None] | None = None

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
