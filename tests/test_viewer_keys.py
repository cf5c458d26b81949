"""The viewer's keys and drawing details found by using it as a new user would (issue 13):
NO_COLOR, the ruler's cursor mark, the header's gap count, the details pane's height, hiding
Python frames, Home/End, panning at the trace's end, keys pressed while loading, stack order."""

from __future__ import annotations

import pytest
from kinetoscope.tui.app import KinetoscopeApp
from kinetoscope.tui.timeline import Timeline
from test_tui_app import loaded
from test_tui_sample import sample_trace
from textual.filter import Monochrome

SIZE = (120, 40)


@pytest.fixture
def trace_path(write_trace):
    return str(write_trace(sample_trace(), name="sample.json"))


def all_lines(timeline: Timeline) -> list:
    return [timeline.render_line(y) for y in range(timeline.size.height)]


@pytest.mark.also_no_color
async def test_every_segment_of_the_timeline_has_a_style(no_color, trace_path):
    """Textual's NO_COLOR filter reads every segment's style: None crashed the first frame."""
    app = KinetoscopeApp(trace_path)
    assert app.no_color is no_color
    monochrome = any(isinstance(f, Monochrome) for f in app.get_line_filters())
    assert monochrome is no_color
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        timeline.scroll_to(y=len(timeline.rows), animate=False, immediate=True)
        await pilot.pause()
        for strip in all_lines(timeline):  # the ruler, lanes and the blank lines below them
            assert all(segment.style is not None for segment in strip)
        assert str(app.screen.query_one("#status").render())
