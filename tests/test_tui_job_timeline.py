"""The job's timeline (issue 15): every rank collapsed on one time axis, one window for all,
clock offsets applied on request, a rank opened alone, two ranks side by side; on a job made
here (rank 1 the straggler, clocks 100 µs ahead and 50 µs behind) and on the real 8-rank job."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kinetoscope.analysis.job import analyze_job, map_ranks
from kinetoscope.parser.ranks import discover
from kinetoscope.tui.job.job_timeline import (
    JobTimelineScreen,
    RankTimeline,
    collective_window,
    open_job_timeline,
)
from kinetoscope.tui.job.rank_pair import RankPairScreen
from kinetoscope.tui.job.timeline_rank import TimelineRankScreen as RankTraceScreen
from kinetoscope.tui.widgets.theme import variables_for
from test_job import DLRM, OFFSET, write_job
from textual.app import App

SIZE = (120, 40)
TCSS = Path(__file__).resolve().parents[1] / "tui" / "kinetoscope.tcss"


class JobHost(App):
    """An app that shows a job's timeline, as the job viewer does."""

    CSS_PATH = str(TCSS)

    def __init__(self, job: Any, **options: Any) -> None:
        super().__init__()
        self.job = job
        self.options = options

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variables_for(self.current_theme)

    def on_mount(self) -> None:
        open_job_timeline(self, self.job, **self.options)


def job_in(folder: Path) -> Any:
    files = discover([str(folder)])
    return analyze_job(map_ranks([f.path for f in files.files], workers=1), files)


@pytest.fixture
def synthetic_job(tmp_path: Path) -> Any:
    write_job(tmp_path)
    return job_in(tmp_path)


async def ready(pilot: Any, ranks: int) -> JobTimelineScreen:
    """The job screen once every rank is drawn."""
    for _ in range(600):
        await pilot.pause(0.05)
        screen = pilot.app.screen
        if (
            isinstance(screen, JobTimelineScreen)
            and len(screen.views) + len(screen.errors) == ranks
        ):
            await pilot.pause()
            return screen
    raise AssertionError("the ranks did not load")


def windows(screen: JobTimelineScreen) -> set[tuple[float, float]]:
    return {(t.view_start - t.delta, t.ns_per_cell) for t in screen.timelines()}


def line_text(timeline: Any, y: int) -> str:
    return "".join(segment.text for segment in timeline.render_line(y))


def said(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_one_hosts_ranks_say_one_clock_and_c_shifts_only_when_pressed_twice(tmp_path, size):
    # The title said "clock offsets not applied (c)" and c applied them at once, though ranks
    # on one host read one clock (their offsets are arrival differences, nothing to align).
    from test_job_clocks import with_hosts

    with_hosts(tmp_path, {0: "node-a", 1: "node-a", 2: "node-a"})
    job = job_in(tmp_path)
    assert job.clock.one_host
    app = JobHost(job)
    async with app.run_test(size=size) as pilot:
        screen = await ready(pilot, 3)
        title = screen.query_one("#job-title")
        text = str(title.render())
        assert "one clock" in text and "no alignment needed" in text, text
        assert "host node-a" in text and "offsets not applied" not in text, text
        assert title.get_content_height(title.size, app.size, title.content_region.width) <= 2
        starts = {r: int(v.lanes[0].levels[0].start[0]) for r, v in screen.views.items()}
        await pilot.press("c")
        assert not screen.aligned
        assert any("One clock" in m and "no alignment is needed" in m for m in said(app))
        assert {r: int(v.lanes[0].levels[0].start[0]) for r, v in screen.views.items()} == starts
        await pilot.press("c")  # again: shifted anyway, by the arrival differences
        assert screen.aligned
        text = str(title.render())
        assert "one clock" in text and "shifted anyway" in text and "(rank 1)" in text, text
        shifted = {r: int(v.lanes[0].levels[0].start[0]) for r, v in screen.views.items()}
        assert starts[1] - shifted[1] == OFFSET[1] * 1000
        await pilot.press("c")  # and back, at once
        assert not screen.aligned
        assert "no alignment needed" in str(title.render())
        assert any("drawn as recorded" in m for m in said(app))


async def test_ranks_not_known_on_one_host_say_what_c_applies(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        title = str(screen.query_one("#job-title").render())
        assert "offsets not applied (c): up to 100 µs (rank 1)" in title, title
        assert "each rank's clock as recorded" in title, title
        assert "one clock" not in title
        await pilot.press("c")
        title = str(screen.query_one("#job-title").render())
        assert "offsets applied (c): up to 100 µs (rank 1)" in title, title
        assert "each rank shifted back by its estimated offset" in title, title
        assert any("shifted back by its estimated offset" in m for m in said(app))
        await pilot.press("c")
        assert any("on its own clock, as recorded" in m for m in said(app))


@pytest.mark.also_no_color
async def test_every_rank_collapsed_on_one_axis(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        timelines = screen.timelines()
        assert [t.rank for t in timelines] == [0, 1, 2]
        for timeline in timelines:
            assert [timeline.data.lanes[r.lane].short_label for r in timeline.rows] == [
                "GPU compute",
                "communication",
                "CPU main thread",
            ]
        # One window: the whole job, the same on every rank.
        assert len(windows(screen)) == 1
        assert screen.window is not None and screen.window[0] == 0
        # Each rank's rows: its compute kernel, its three collectives, its step.
        view = screen.views[1]
        assert [len(lane.levels[0]) for lane in view.lanes] == [1, 3, 1]
        # As recorded: rank 1's kernel at 8,200 µs of its clock; the job starts at −50 µs.
        assert screen.origin == -50_000
        assert int(view.lanes[0].levels[0].start[0]) == 8_250_000
        # The straggler is named on its block; the fastest (waits most) too.
        assert screen.straggler == 1 and screen.fastest == 0
        assert "rank 1 ◀ straggler" in line_text(timelines[1], 0)
        assert "rank 0 · fastest" in line_text(timelines[0], 0)
        assert "straggler rank 1" in str(screen.query_one("#job-title").render())
        # One cursor row on the screen: the focused rank's (rank 1's, the straggler's).
        assert screen.focused is timelines[1]
        assert [list(t.render_line(1))[0].style.bgcolor is not None for t in timelines] == [
            False,
            True,
            False,
        ]


@pytest.mark.also_no_color
async def test_zoom_and_pan_move_every_rank_together(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        before = screen.window
        await pilot.press("w")
        await pilot.press("w")
        (start, per_cell), *rest = windows(screen)
        assert not rest
        assert per_cell == pytest.approx(before[1] / 4)
        await pilot.press("d")
        (moved, _), *rest = windows(screen)
        assert not rest and moved > start
        await pilot.press("down", "down", "down")  # from rank 1's rows to rank 2's
        assert screen.focused.rank == 2
        await pilot.press("s")
        assert windows(screen) == {(screen.window[0], per_cell * 2)}
        await pilot.press("0")
        assert windows(screen) == {(0.0, before[1])}


@pytest.mark.also_no_color
async def test_offsets_shift_each_rank_by_its_offset(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        starts = {r: int(v.lanes[0].levels[0].start[0]) for r, v in screen.views.items()}
        window = screen.window
        assert "offsets not applied" in str(screen.query_one("#job-title").render())
        await pilot.press("c")
        assert screen.aligned
        title = str(screen.query_one("#job-title").render())
        assert "offsets applied" in title and "up to 100 µs (rank 1)" in title
        shifted = {r: int(v.lanes[0].levels[0].start[0]) for r, v in screen.views.items()}
        for rank in (0, 1, 2):
            assert starts[rank] - shifted[rank] == OFFSET[rank] * 1000
        # The window stays; every rank still shows it.
        assert screen.window == window and len(windows(screen)) == 1
        await pilot.press("c")
        again = {r: int(v.lanes[0].levels[0].start[0]) for r, v in screen.views.items()}
        assert again == starts


@pytest.mark.also_no_color
async def test_enter_opens_the_rank_alone_in_the_same_window(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        await pilot.press("w", "w")
        await pilot.press("down", "down", "down")  # rank 2
        assert screen.focused.rank == 2
        window = screen.window
        # Loaded with its lanes' top levels only; the rest is nested once the rank is opened.
        assert not screen.views[2].inner.complete
        await pilot.press("enter")
        await pilot.pause()
        alone = app.screen
        assert isinstance(alone, RankTraceScreen) and alone.rank == 2
        assert alone.data is screen.views[2].inner  # no second load
        for _ in range(100):
            await pilot.pause(0.02)
            if alone.data.complete:
                break
        assert alone.data.complete
        timeline = alone.timeline
        assert timeline.ns_per_cell == window[1]
        # The same instant: rank 2's own relative time is the job's plus the origins' gap.
        delta = screen.views[2].origin - alone.data.origin
        assert timeline.view_start == pytest.approx(window[0] + delta)
        assert "rank 2 · kinetoscope" in str(alone.query_one("#title").render())
        # Every lane of the rank (its streams by name, group headers), and its keys: g goes to
        # a GPU idle gap.
        labels = [lane.label for lane in timeline.data.lanes]
        assert labels[:2] == ["GPU 0 / stream 7", "GPU 0 / stream 20"]
        assert any(row.is_header for row in timeline.rows)
        await pilot.press("g")
        assert timeline.current_gap >= 0
        await pilot.press("escape")  # Esc clears the gap and selection first, as on one trace
        assert app.screen is alone and timeline.current_gap == -1
        await pilot.press("escape")  # then goes back to the job
        assert app.screen is screen
        await pilot.press("enter")  # and q too
        await pilot.pause()
        assert isinstance(app.screen, RankTraceScreen)
        await pilot.press("q")
        assert app.screen is screen


@pytest.mark.also_no_color
async def test_side_by_side_straggler_and_fastest_zoom_together(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        await pilot.press("x")
        await pilot.pause()
        pair = app.screen
        assert isinstance(pair, RankPairScreen)
        assert [rank for rank, _ in pair.ranks] == [1, 0]  # the straggler, then the fastest
        top, bottom = pair.pair_timelines()
        assert top.data is screen.views[1].inner and bottom.data is screen.views[0].inner
        assert top.job_window()[:2] == bottom.job_window()[:2] == screen.window[:2]
        # Both rulers count the job's time (the two traces start at different times).
        assert top.data.origin != bottom.data.origin
        ruler = line_text(top, 0)[top.label_width :]
        assert "╵0" in ruler and ruler == line_text(bottom, 0)[bottom.label_width :]
        await pilot.press("w", "d")
        assert top.job_window()[:2] == bottom.job_window()[:2]
        assert top.ns_per_cell == screen.window[1]
        zoomed = screen.window
        await pilot.press("escape")
        assert app.screen is screen
        assert windows(screen) == {zoomed[:2]}
        # X: the focused rank beside the straggler.
        screen.timeline_of(2).focus()
        await pilot.press("X")
        await pilot.pause()
        assert [rank for rank, _ in app.screen.ranks] == [2, 1]


async def test_a_window_asked_for_shows_a_collective_on_every_rank(synthetic_job):
    job = synthetic_job
    lo, hi = collective_window(job, 0)  # the all-reduce: 1,000 to 2,096 µs as recorded
    assert (lo, hi) == (1_000_000, 2_096_000)
    app = JobHost(job, window=(lo, hi), ranks=[2])
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        await pilot.pause(0.2)
        assert screen.focused.rank == 2
        start, per_cell, cursor = screen.window
        end = start + per_cell * screen.focused.cells_width
        assert start <= lo - screen.origin and hi - screen.origin <= end
        assert end - start < 2 * (hi - lo)
        assert len(windows(screen)) == 1


async def test_a_rank_that_cannot_be_read_says_so_on_its_rows(tmp_path):
    write_job(tmp_path)
    job = job_in(tmp_path)
    (tmp_path / "rank2.json").write_text("{ not json")
    app = JobHost(job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        assert set(screen.views) == {0, 1} and 2 in screen.errors
        block = screen.timeline_of(2)
        assert block.data is None and "rank2.json" in line_text(block, 0)
        await pilot.press("down", "down", "down", "down", "down", "down")
        assert screen.focused.rank == 2
        await pilot.press("enter")
        assert app.screen is screen  # nothing to open; said in a notification


@pytest.mark.corpus
@pytest.mark.also_no_color
async def test_dlrm_eight_ranks_on_one_axis():
    if not DLRM.is_dir():
        pytest.skip("../shared/corpus is absent")
    job = await asyncio.to_thread(job_in, DLRM)
    app = JobHost(job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 8)
        timelines = screen.timelines()
        assert [t.rank for t in timelines] == list(range(8))
        assert all(isinstance(t, RankTimeline) and t.data is not None for t in timelines)
        assert screen.straggler == 7 and screen.focused.rank == 7
        assert len(windows(screen)) == 1
        # Every rank's communication row holds its NCCL kernels.
        for view in screen.views.values():
            names = {view.trace.name_of(int(r)) for r in view.lanes[1].levels[0].rows}
            assert names and all("nccl" in n.lower() for n in names)
        await pilot.press("w")
        assert len(windows(screen)) == 1
        await pilot.press("x")
        await pilot.pause()
        pair = app.screen
        assert isinstance(pair, RankPairScreen)
        assert [rank for rank, _ in pair.ranks] == [7, screen.fastest]
        await pilot.press("escape", "enter")
        await pilot.pause()
        assert isinstance(app.screen, RankTraceScreen) and app.screen.rank == 7


# -- from the job viewer ------------------------------------------------------------------------


@pytest.mark.also_no_color
async def test_from_the_overview_to_the_straggler_beside_the_fastest_in_a_few_keys(tmp_path):
    from kinetoscope.tui.job.job_app import JobApp
    from kinetoscope.tui.job.job_ranks import RanksScreen, slowest_step, step_window
    from kinetoscope.tui.palette import HelpScreen

    write_job(tmp_path)
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(600):
            await pilot.pause(0.05)
            if isinstance(app.screen, RanksScreen):
                break
        overview = app.screen
        assert isinstance(overview, RanksScreen)
        overview.matrix.go_to(1, slowest_step(app.job, 1))  # where s leaves the cursor
        await pilot.press("t")
        screen = await ready(pilot, 3)
        assert screen.focused.rank == 1 == screen.straggler
        lo, hi = step_window(app.job.entry(1), slowest_step(app.job, 1))
        start, per_cell, _ = screen.window
        assert start <= lo - screen.origin
        assert hi - screen.origin <= start + per_cell * screen.focused.cells_width
        await pilot.press("question_mark")
        await pilot.pause()
        rows = app.screen.bindings
        assert isinstance(app.screen, HelpScreen)
        assert rows[0] == ("── Job timeline (t) · this screen", "")
        keys = {k for row, _ in rows[: rows.index(("── Everywhere", ""))] for k in row.split()}
        assert {"c", "x", "w", "a", "g", "m", "M", "e"} <= keys
        assert any("Open the rank alone" in text for _, text in rows)
        await pilot.press("escape")
        await pilot.press("x")
        await pilot.pause()
        pair = app.screen
        assert isinstance(pair, RankPairScreen) and [r for r, _ in pair.ranks] == [1, 0]
        await pilot.press("escape")
        assert app.screen is screen
        await pilot.press("q")
        assert app.screen is overview


async def test_a_collective_from_the_table_across_every_rank(tmp_path):
    from kinetoscope.tui.job.job_app import JobApp
    from kinetoscope.tui.job.job_ranks import RanksScreen

    write_job(tmp_path)
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(600):
            await pilot.pause(0.05)
            if isinstance(app.screen, RanksScreen):
                break
        job = app.job
        index = next(i for i, kind in enumerate(job.matched.kind) if kind == "all_reduce")
        j = job.matched.ranks.index(0)
        row = int(job.entry(0).digest.collectives["gpu"].row[int(job.matched.position[index, j])])
        app.open_collective(0, (0, 0), row, index)
        screen = await ready(pilot, 3)
        await pilot.pause(0.2)
        timeline = screen.focused
        assert timeline.rank == 0 and timeline.selected_row == row
        assert timeline.data.lanes[timeline.rows[timeline.cursor_row].lane].short_label == (
            "communication"
        )
        lo, hi = collective_window(job, index)
        start, per_cell, _ = screen.window
        assert (
            start
            <= lo - screen.origin
            <= hi - screen.origin
            <= (start + per_cell * timeline.cells_width)
        )


async def test_ranks_drawn_at_once_keep_the_window_asked_for(synthetic_job, monkeypatch):
    """Two ranks ready in the same moment: the second must not fit the whole job over the
    window the first is about to show."""
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.parser import load
    from kinetoscope.tui.data.collapsed_rank import CollapsedRank, collapsed_rows
    from kinetoscope.tui.data.viewdata import build_view_data

    monkeypatch.setattr(JobTimelineScreen, "wanted", lambda self, rank: None)
    job = synthetic_job
    lo, hi = collective_window(job, 0)
    app = JobHost(job, window=(lo, hi), ranks=[1])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        views = []
        for rank in (1, 0, 2):
            data = build_view_data(TraceSession(load(job.entry(rank).path)))
            rows = collapsed_rows(data, "gpu")
            views.append((rank, CollapsedRank(data, rank, rows, screen.origin, screen.span)))
        for rank, view in views:
            screen._ready(rank, view)
        for _ in range(5):
            await pilot.pause()
        start, per_cell, _ = screen.window
        assert start <= lo - screen.origin
        assert start + per_cell * screen.focused.cells_width < 2 * (hi - lo) + start
        assert len(windows(screen)) == 1


async def test_a_big_job_loads_the_ranks_on_screen_and_keeps_a_bounded_number(
    tmp_path, monkeypatch
):
    import json

    from kinetoscope.tui.data import rank_views
    from test_job import gloo_rank

    monkeypatch.setattr(rank_views, "RESIDENT_RANKS", 6)
    for rank in range(24):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, 20, world=24)))
    job = job_in(tmp_path)
    app = JobHost(job, ranks=[0])
    async with app.run_test(size=(120, 24)) as pilot:
        screen = None
        for _ in range(200):
            await pilot.pause(0.05)
            screen = app.screen
            if isinstance(screen, JobTimelineScreen) and {0, 1, 2, 3, 20} <= set(screen.views):
                break
        assert screen.straggler == 20 and screen.fastest == 0
        # The ranks on screen and the straggler, not the others.
        assert not {8, 12, 16} & set(screen.views)
        await pilot.press("end")
        for _ in range(80):  # down through every rank's rows, to the last rank
            await pilot.press("down")
        await pilot.pause(0.5)
        assert screen.focused.rank == 23
        for _ in range(200):
            await pilot.pause(0.05)
            if {21, 22, 23} <= set(screen.views):
                break
        assert {21, 22, 23} <= set(screen.views)
        # At most RESIDENT_RANKS models, besides the ones on screen; the first ranks went.
        assert len(screen.views) <= 6 + 1 and 1 not in screen.views
        assert "loading" in line_text(screen.timeline_of(1), 0)


async def test_the_collapsed_rows_come_from_the_digest_when_it_names_the_same_events(
    synthetic_job, monkeypatch
):
    from kinetoscope.analysis import collectives
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.parser import load
    from kinetoscope.tui.data.collapsed_rank import collapsed_rows
    from kinetoscope.tui.data.viewdata import build_view_data

    entry = synthetic_job.entry(1)
    data = build_view_data(TraceSession(load(entry.path)), staged=True)
    calls = []
    real = collectives.find_collectives
    monkeypatch.setattr(
        collectives, "find_collectives", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    rows = collapsed_rows(data, "gpu", entry.digest.collectives)
    assert not calls and not data.session.nesting_ready  # nothing needed the nesting
    expected = collapsed_rows(data, "gpu")  # found again, from the trace
    assert calls and all(map(np.array_equal, rows, expected))
    assert [len(r) for r in rows] == [1, 3, 1]
    calls.clear()
    # A digest that names other events (another version of the file) is not trusted.
    other = {k: dataclasses.replace(v, row=v.row[::-1].copy()) for k, v in
             entry.digest.collectives.items()}  # fmt: skip
    rows = collapsed_rows(data, "gpu", other)
    assert calls and all(map(np.array_equal, rows, expected))


@pytest.mark.also_no_color
async def test_a_cpu_only_rank_says_no_gpu_instead_of_an_empty_gpu_row(tmp_path):
    import json

    from test_job import gloo_rank

    for rank in range(3):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, late=2)))
    job = job_in(tmp_path)
    app = JobHost(job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        for timeline in screen.timelines():
            assert [timeline.data.lanes[r.lane].short_label for r in timeline.rows] == [
                "no GPU",
                "communication",
                "CPU main thread",
            ]
            assert "no GPU" in line_text(timeline, 1)
        # Before a rank is drawn, its rows say the same (from its digest).
        block = screen.timeline_of(0)
        block.unload("loading…")
        assert "no GPU" in line_text(block, 1) and "GPU compute" not in line_text(block, 1)


# -- M: the selected event as every rank's marked range -------------------------------------------


def notes(app: Any) -> list[str]:
    return [str(note.message) for note in app._notifications]


async def select_on_row(pilot: Any, screen: JobTimelineScreen, name: str, presses: int = 1):
    """Up or down the focused rank's block to its row `name`, then → `presses` times (the
    events from the cursor on, as a user selects them); the focused timeline."""
    timeline = screen.current()
    assert timeline is not None
    labels = [timeline.data.lanes[row.lane].short_label for row in timeline.rows]
    target = labels.index(name)
    while timeline.cursor_row != target:
        await pilot.press("down" if timeline.cursor_row < target else "up")
    assert screen.current() is timeline
    for _ in range(presses):
        await pilot.press("right")
    await pilot.pause()
    return timeline


@pytest.mark.also_no_color
async def test_M_marks_the_selected_event_on_every_rank_and_again_clears_it(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        timeline = screen.current()
        assert timeline.rank == 1  # the straggler, focused
        # Its ProfilerStep#1 on the CPU main thread: 100..10,100 µs of rank 1's clock; the
        # job's origin is −50 µs.
        await select_on_row(pilot, screen, "CPU main thread")
        row = timeline.selected_row
        assert timeline.data.trace.name_of(row) == "ProfilerStep#1"
        await pilot.press("M")
        assert screen.marked_bounds() == (150_000, 10_150_000)
        assert all(t.marked_range == (150_000, 10_150_000) for t in screen.timelines())
        assert any(
            n.startswith("ProfilerStep#1 of rank 1: +150 µs … +10.15 ms (10 ms) marked on every")
            and "e exports it" in n
            for n in notes(app)
        ), notes(app)
        # Another event selected: M marks that one instead.
        await select_on_row(pilot, screen, "communication")  # the allreduce: 1,400..1,996 µs
        assert timeline.data.trace.name_of(timeline.selected_row).startswith("nccl")
        await pilot.press("M")
        assert screen.marked_bounds() == (1_550_000, 2_146_000)
        assert all(t.marked_range == (1_550_000, 2_146_000) for t in screen.timelines())
        # Again on the same event: cleared on every rank.
        await pilot.press("M")
        assert screen.marked is None and screen.marked_bounds() is None
        assert all(t.marked_range is None for t in screen.timelines())
        assert any("Range cleared" in n for n in notes(app))
        # With the clock offsets applied, the same event's span in the job's clock (rank 1
        # drawn 100 µs earlier).
        await pilot.press("c")
        await pilot.press("M")
        assert screen.marked_bounds() == (1_450_000, 2_046_000)


async def test_M_with_nothing_selected_says_so(synthetic_job):
    app = JobHost(synthetic_job)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        assert screen.current().selected_row < 0
        await pilot.press("M")
        await pilot.pause()
        assert screen.marked is None
        assert any("Select an event" in n for n in notes(app)), notes(app)
        # A range marked with m is cleared by M with nothing selected (as on one trace).
        focused = screen.current()
        focused.cursor_time = 1_000_000
        await pilot.press("m")
        focused.cursor_time = 2_000_000
        await pilot.press("m")
        assert screen.marked_bounds() == (1_000_000, 2_000_000)
        await pilot.press("M")
        assert screen.marked is None
        assert all(t.marked_range is None for t in screen.timelines())


async def test_M_then_e_exports_the_selected_event_of_every_rank(tmp_path, monkeypatch):
    import json
    import zipfile

    from test_tui_export import said

    folder = tmp_path / "job"
    write_job(folder)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    app = JobHost(job_in(folder), name="job")
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        await pilot.press("c")  # the clock offsets applied: one instant on every rank
        timeline = await select_on_row(pilot, screen, "CPU main thread")
        assert timeline.rank == 1
        assert timeline.data.trace.name_of(timeline.selected_row) == "ProfilerStep#1"
        await pilot.press("M")
        await pilot.press("e")
        message = await said(pilot, "Exported the marked range of every rank")
        await pilot.app.workers.wait_for_complete()
    written = out / "job.window.zip"
    assert f"wrote {written}: Perfetto bundle of 3 ranks" in message
    with zipfile.ZipFile(written) as bundle:
        record = json.loads(bundle.read("perfetto_manifest.json"))["kinetoscope"]
        crops = {r: json.loads(bundle.read(f"rank{r}.json")) for r in (0, 1, 2)}
    assert record["clocks"] == "aligned"
    # Each rank's step ran at the same true instant, 10 ms long (its clock OFFSET µs ahead):
    # the window cut from each is exactly its own ProfilerStep#1, as its clock recorded it.
    windows_ns = {r["rank"]: r["window_ns"] for r in record["ranks"]}
    for rank in (0, 1, 2):
        start = round(OFFSET[rank] * 1000)
        assert windows_ns[rank] == [start, start + 10_000_000]
        steps = [e for e in crops[rank]["traceEvents"] if e.get("name") == "ProfilerStep#1"]
        assert len(steps) == 1 and steps[0]["dur"] == 10_000


async def test_a_huge_world_size_is_written_as_ranges_in_both_titles(tmp_path):
    """A world size of 10^12 from the files: the titles count the missing ranks, as ranges,
    and the overview lists only the first ones (issue 25)."""
    import json

    from kinetoscope.parser.ranks import MISSING_LISTED
    from kinetoscope.tui.job.job_app import JobApp
    from kinetoscope.tui.job.job_ranks import RanksScreen

    world = 10**12
    for rank in (0, 1):
        (tmp_path / f"r{rank}.json").write_text(
            json.dumps(
                {
                    "distributedInfo": {"rank": rank, "world_size": world},
                    "traceEvents": [
                        {
                            "ph": "X",
                            "cat": "user_annotation",
                            "name": "ProfilerStep#1",
                            "pid": 1,
                            "tid": 1,
                            "ts": 1,
                            "dur": 10,
                        }
                    ],
                }  # fmt: skip
            )
        )
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(600):
            await pilot.pause(0.05)
            if isinstance(app.screen, RanksScreen):
                break
        overview = app.screen
        assert isinstance(overview, RanksScreen)
        title = str(overview.query_one("#ranks-title").render())
        assert "and 999,999,999,992 more" in title  # 6 shown of the 999,999,999,998
        assert len(overview.matrix.rows) == 2 + MISSING_LISTED
        await pilot.press("t")
        screen = await ready(pilot, 2)
        assert "missing: 2-999999999999 (999,999,999,998 ranks)" in screen.title_text().plain
