"""Colours come from the theme: a theme change (ctrl+p) redraws every view in the new theme's
colours, and no colour is written anywhere but in the theme module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kinetoscope.tui.app import KinetoscopeApp
from kinetoscope.tui.timeline import Timeline
from rich.color import Color
from rich.segment import Segment
from test_tui_app import loaded
from test_tui_sample import sample_trace
from textual.color import Color as TextualColor

SIZE = (120, 40)
TUI = Path(__file__).resolve().parent.parent / "tui"


@pytest.fixture
def trace_path(write_trace):
    return str(write_trace(sample_trace(), name="sample.json"))


def luminance(rgb: tuple[int, int, int]) -> float:
    """WCAG relative luminance."""

    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def rgb(color: Color | None, default: tuple[int, int, int]) -> tuple[int, int, int]:
    if color is None or color.is_default:
        return default
    triplet = color.get_truecolor()
    return (triplet.red, triplet.green, triplet.blue)


def timeline_segments(timeline: Timeline) -> list[Segment]:
    return [s for y in range(timeline.size.height) for s in timeline.render_line(y)]


def unreadable(app: KinetoscopeApp, segments: list[Segment]) -> list[str]:
    """Segments whose text (letters, digits, marks) is hard to read on what is behind it."""
    background = TextualColor.parse(app.theme_variables["background"]).rgb
    foreground = TextualColor.parse(app.theme_variables["foreground"]).rgb
    bad = []
    for segment in segments:
        if not segment.text.strip(" ─│"):
            continue
        style = segment.style
        assert style is not None
        fg = rgb(style.color, foreground)
        bg = rgb(style.bgcolor, background)
        if style.reverse:
            fg, bg = bg, fg
        if contrast(fg, bg) < 2.0:
            bad.append(f"{segment.text!r} {fg} on {bg}")
    return bad


def colours(segments: list[Segment]) -> set:
    return {(s.style.color, s.style.bgcolor) for s in segments if s.style is not None}


async def test_a_theme_change_redraws_the_timeline_in_the_new_themes_colours(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        assert app.theme == "textual-dark"
        dark = timeline_segments(timeline)
        assert not unreadable(app, dark)

        app.theme = "textual-light"
        await pilot.pause()
        await pilot.pause()
        light = timeline_segments(timeline)
        # Every label, name and tick is readable on the light background, and the slices are
        # drawn in other colours than the dark theme's (the strip cache was cleared).
        assert not unreadable(app, light)
        assert not colours(light) & colours(dark) - {(None, None)}

        app.theme = "textual-dark"  # and back: the same frame as before
        await pilot.pause()
        await pilot.pause()
        assert timeline_segments(timeline) == dark


def test_no_colour_is_written_outside_the_theme_module():
    hex_colour = re.compile(r"#[0-9a-fA-F]{6}\b")
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(TUI.glob("*.py"))
        if path.name != "theme.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if hex_colour.search(line)
    ]
    assert not found, "\n".join(found)
