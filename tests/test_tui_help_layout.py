"""The `?` help: keys in a narrow column, descriptions wrapped at word boundaries, never cut."""

import re

import pytest
from kinetoscope.tui.palette import HELP_KEY_WIDTH, help_renderable
from rich.console import Console

ROWS = [
    ("── Timeline · this screen", ""),
    ("w +", "Zoom in around the cursor"),
    ("P", "Hide python_function slices (operators move up), or show them again " * 3),
    ("── Operators (o)", ""),
    ("↑ ↓ pgup pgdn home end", "Move in the table"),
    ("ctrl+wheel, wheel on ruler", "zoom around the mouse"),
]


def render(width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None, legacy_windows=False)
    console.print(help_renderable(ROWS))
    return console.export_text().splitlines()


def words(text: str) -> list[str]:
    return re.findall(r"\S+", text)


def test_descriptions_wrap_whole_and_keys_keep_a_narrow_column():
    for width in (120, 80, 50):
        lines = render(width)
        assert all(len(line) <= width for line in lines)
        shown = " ".join(lines)
        for _key, description in ROWS:
            # Every word of every description is shown, none cut (no ellipsis anywhere).
            for word in words(description):
                assert word in shown, (width, word)
        assert "…" not in shown
        # Descriptions start in one column, just past the key column (not 33 cells in).
        starts: set[int] = set()
        for line in lines:
            for text in ("Zoom in around", "Move in the table", "zoom around the mouse"):
                if text in line:
                    starts.add(line.index(text))
        assert len(starts) == 1 and starts.pop() <= HELP_KEY_WIDTH + 2


def test_headings_stand_on_their_own_line():
    lines = [line.rstrip() for line in render(80)]
    assert "── Timeline · this screen" in lines and "── Operators (o)" in lines


async def test_a_table_says_which_columns_its_width_hides():
    from conftest import SAMPLES
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.trace.screens import TraceScreen
    from test_tui_drilldown import press, settle

    sample = str(SAMPLES / "synthetic_gpu_training.pt.trace.json.gz")
    for size, hidden in (((80, 24), "columns hidden"), ((200, 40), None)):
        app = KinetoscopeApp(sample)
        async with app.run_test(size=size) as pilot:
            await settle(pilot, TraceScreen)
            screen = await press(pilot, "o", until=OperatorsScreen)
            await pilot.pause(0.2)
            title = str(screen.query_one("#table-title").render())
            left_out = screen.table.hidden_columns()
            if hidden is None:
                assert left_out == () and "hidden" not in title
            else:
                assert "GPU self" in left_out and hidden in title
                assert f"{len(left_out)} columns hidden" in title


def test_every_screen_of_the_help_declares_its_own_section():
    """`?` lists what the screens declare: each section's title is its screen's own HELP_TITLE
    (one inherited would list a screen's keys under another's name), once per app."""
    from kinetoscope.tui.diff.diff_app import diff_help_sections
    from kinetoscope.tui.job.job_app import job_help_sections
    from kinetoscope.tui.trace.drilldown import viewer_help_sections

    for sections in (viewer_help_sections(), job_help_sections(), diff_help_sections()):
        titles = [title for title, _, _ in sections]
        assert len(set(titles)) == len(titles)
        for title, kind, _ in sections:
            assert vars(kind)["HELP_TITLE"] == title


def test_a_screen_without_a_help_title_of_its_own_is_refused():
    from kinetoscope.tui.palette import help_section
    from kinetoscope.tui.trace.operators import OperatorsScreen

    class Unlisted(OperatorsScreen):
        pass

    with pytest.raises(TypeError, match="Unlisted declares no HELP_TITLE of its own"):
        help_section(Unlisted)
    title, kind, bindings = help_section(OperatorsScreen)
    assert (title, kind, bindings) == ("Operators (o)", OperatorsScreen, OperatorsScreen.BINDINGS)


def test_every_screen_the_trace_screen_opens_has_a_key_and_an_action():
    """NAVIGATION is the one map of what the trace screen opens: each of its actions is bound
    to a key there and has the action method that opens it."""
    from kinetoscope.tui.trace.drilldown import NAVIGATION
    from kinetoscope.tui.trace.screens import TraceScreen

    bound = {binding.action for binding in TraceScreen.BINDINGS}
    assert set(NAVIGATION) <= bound
    for action in NAVIGATION:
        assert callable(getattr(TraceScreen, f"action_{action}"))
