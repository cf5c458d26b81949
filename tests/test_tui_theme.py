"""Colours come from the theme: a theme change (ctrl+p) redraws every view in the new theme's
colours, and no colour is written anywhere but in the theme module."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.widgets.table import DataView
from kinetoscope.tui.widgets.theme import (
    DEFAULT,
    DESIGNED,
    PART_NAMES,
    SLOT_NAMES,
    palette_from_variables,
    palette_of,
    variables_for,
)
from kinetoscope.tui.widgets.timeline import Timeline
from rich.color import Color
from rich.segment import Segment
from test_tui_app import loaded
from test_tui_sample import sample_trace
from textual.color import Color as TextualColor
from textual.theme import BUILTIN_THEMES

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


TEXT_COLOURS = (
    "label", "muted", "cpu", "gpu", "cursor", "heading", "error", "warning", "info",
    "allocated", "cell", "match", "part-self", *PART_NAMES,
)  # fmt: skip


@pytest.mark.parametrize("name", sorted(BUILTIN_THEMES))
def test_every_builtin_theme_keeps_text_readable(name):
    """Text colours on the theme's background, names on slices, dark text on highlights."""
    theme = BUILTIN_THEMES[name]
    base = theme.to_color_system().generate()
    palette = palette_from_variables({**variables_for(theme), "background": base["background"]})
    background = TextualColor.parse(base["background"])
    if background.ansi == -1:  # the terminal's own background: assume the usual one
        background = TextualColor.parse("#121212" if theme.dark else "#efefef")
    bg = background.rgb

    def c(value: str) -> tuple[int, int, int]:
        return TextualColor.parse(value).rgb

    for colour in TEXT_COLOURS:
        assert contrast(c(palette[colour]), bg) >= 2.3, colour
    for i, slot in enumerate(palette.slots):
        assert contrast(c(palette["slot-text"]), c(slot)) >= 2.3, SLOT_NAMES[i]
    for under in ("cursor", "heading", "marked", "table-cursor", "match", "error"):
        assert contrast(c(palette["ink"]), c(palette[under])) >= 2.5, under
    assert contrast(c(palette["selected-text"]), c(palette["selected"])) >= 4.5


def test_the_default_theme_keeps_the_designed_colours():
    palette = palette_from_variables(variables_for(BUILTIN_THEMES["textual-dark"]))
    assert palette == DEFAULT
    assert palette["cursor"] == DESIGNED["cursor"]


async def test_a_theme_may_set_one_named_colour(trace_path):
    app = KinetoscopeApp(trace_path)
    dark = BUILTIN_THEMES["textual-dark"]
    app.register_theme(replace(dark, name="mine", variables={"ks-label": "#ff0000"}))
    async with app.run_test(size=SIZE) as pilot:
        timeline = await loaded(pilot)
        app.theme = "mine"
        await pilot.pause()
        await pilot.pause()
        assert palette_of(app)["label"] == "#ff0000"
        # The colours it does not set are derived from its own, as in any other theme.
        assert palette_of(app)["cursor"] == variables_for(app.current_theme)["ks-cursor"]
        labels = [list(timeline.render_line(y))[0] for y in range(2, 5)]
        assert Color.parse("#ff0000") in {s.style.color for s in labels}


async def test_a_theme_change_redraws_the_drilldown_tables(trace_path):
    app = KinetoscopeApp(trace_path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("o")
        await pilot.pause()
        table = app.screen.query_one(DataView)
        for _ in range(100):
            if table.model is not None:
                break
            await pilot.pause(0.05)
        header = list(table.render_line(0))[0].style.color
        assert header == Color.parse(palette_of(app)["heading"])
        app.theme = "textual-light"
        await pilot.pause()
        await pilot.pause()
        light = palette_of(app)["heading"]
        assert light != DESIGNED["heading"]
        assert list(table.render_line(0))[0].style.color == Color.parse(light)
