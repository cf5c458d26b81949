"""The idle-gap list (`i`) on a trace with more gaps than one page: every gap can be reached
(`n` / `p` page through them, the title says which are shown), and the idle-by-CPU line wraps
instead of being cut."""

from __future__ import annotations

from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.screens import GAP_LIST_LIMIT, GapListScreen
from test_tui_app import loaded, wait_for_screen

SIZE = (120, 40)
GAPS = GAP_LIST_LIMIT + 500


def many_gaps_trace() -> dict:
    """GAPS kernels, each launched from one of four long-named CPU ops, with a gap of 20 µs and
    up after each (all different, so the longest-first order is known)."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
    ts = 100.0
    kernels = []
    for i in range(GAPS):
        kernels.append(ts)
        ts += 5 + 20 + i * 0.01
    quarter = GAPS // 4
    for part in range(4):
        first, last = kernels[part * quarter], kernels[min(GAPS, (part + 1) * quarter) - 1] + 30
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op_{part}_" + "x" * 40,
                "pid": 1,
                "tid": 1,
                "ts": first - 2,
                "dur": last - first + 2,
            }
        )
    for i, start in enumerate(kernels):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": start - 1,
                "dur": 0.5,
                "args": {"correlation": i + 1},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"kernel_{i}",
                "pid": 0,
                "tid": 7,
                "ts": start,
                "dur": 5,
                "args": {"device": 0, "stream": 7, "correlation": i + 1},
            }
        )
    return {"traceEvents": events}


async def test_every_gap_can_be_paged_to(write_trace):
    app = KinetoscopeApp(str(write_trace(many_gaps_trace(), name="gaps.json")))
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("i")
        screen = await wait_for_screen(pilot, GapListScreen)
        total = len(screen.all_gaps)
        assert total > GAP_LIST_LIMIT
        title = str(screen.query_one("#gap-title").render())
        assert f"#1-{GAP_LIST_LIMIT:,} of {total:,}" in title and "n next" in title
        first_page = screen.order.tolist()
        await pilot.press("n")
        await pilot.pause()
        title = str(screen.query_one("#gap-title").render())
        assert f"#{GAP_LIST_LIMIT + 1:,}-{total:,} of {total:,}" in title and "p previous" in title
        second_page = screen.order.tolist()
        assert len(second_page) == total - GAP_LIST_LIMIT
        # The two pages are every gap, each once, in the longest-first order.
        assert first_page + second_page == screen.all_gaps.tolist()
        table = screen.query_one("#gap-table")
        assert table.row_count == len(second_page)
        assert str(table.get_row_at(0)[0]) == str(GAP_LIST_LIMIT + 1)
        await pilot.press("n")  # no page after the last: stays, says so
        await pilot.pause()
        assert screen.order.tolist() == second_page
        await pilot.press("p")
        await pilot.pause()
        assert screen.order.tolist() == first_page
        # Enter on a row of the first page jumps to that gap.
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, GapListScreen)


async def test_idle_by_cpu_line_wraps_instead_of_being_cut(write_trace):
    app = KinetoscopeApp(str(write_trace(many_gaps_trace(), name="gaps.json")))
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("i")
        screen = await wait_for_screen(pilot, GapListScreen)
        await pilot.pause(0.2)
        line = screen.query_one("#gap-by-cpu")
        text = str(line.render())
        assert text.startswith("All idle by CPU op running:")
        # The entry is longer than the box: it takes a second line, its end is shown.
        assert text.count("gaps)") == 4  # the four ops
        # ... each shown: the box is as tall as the wrapped text (it was one line, cut).
        from rich.text import Text

        wrapped = Text(text).wrap(app.console, line.content_size.width)
        assert line.size.height == len(wrapped) >= 2
        # The title, with its paging keys, wraps too rather than losing its end.
        assert screen.query_one("#gap-title").size.height == 2
