"""The job viewer (a folder of rank files, or several files) driven like a user: the ranks
overview with its straggler, the collectives table, a rank's own timeline at a step, a damaged
or missing rank; on jobs built here (tests/test_job.py's ranks) and on the corpus's real
8-rank NCCL job."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable

import pytest
from conftest import CORPUS
from kinetoscope.tui.job.job_app import JobApp, JobLoadingScreen, RankTraceScreen
from kinetoscope.tui.job.job_collectives import CollectivesScreen, arrival_levels
from kinetoscope.tui.job.job_ranks import RankMatrix, RanksScreen, slowest_step, step_window
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.screens import ErrorScreen
from kinetoscope.tui.widgets.timeline import Timeline
from test_job import gloo_rank, write_job

SIZE = (120, 40)
DLRM = CORPUS / "multirank" / "dlrm_8rank"


async def wait_until(pilot, done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        if done():
            await pilot.pause()
            return
    raise AssertionError(f"{what} never happened; at {pilot.app.screen!r}")


async def overview(pilot) -> RanksScreen:
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, RanksScreen), "the overview")
    return pilot.app.screen


async def rank_view(pilot, rank: int) -> RankTraceScreen:
    def shown() -> bool:
        screen = pilot.app.screen
        return isinstance(screen, RankTraceScreen) and screen.rank == rank

    await wait_until(pilot, shown, f"rank {rank}'s timeline")
    screen = pilot.app.screen
    # The view asked for is set once the timeline has drawn its first (fitted) frame.
    await wait_until(pilot, lambda: screen.pending_jump is None, "the jump")
    await pilot.pause()
    return screen


def matrix_lines(matrix: RankMatrix) -> list[str]:
    return [matrix.render_line(y).text for y in range(len(matrix.rows) + 1)]


def covers(screen: RankTraceScreen, window: tuple[int, int]) -> bool:
    timeline = screen.query_one(Timeline)
    origin = screen.data.origin
    start, end = window[0] - origin, window[1] - origin
    # The step fills the view (a margin either side), not the whole trace.
    return timeline.view_start <= start and timeline.view_end >= end


@pytest.fixture
def gloo_job(tmp_path):
    """Three CPU-only gloo ranks, two steps each; rank 2 sleeps 2.9 ms before each all-reduce."""
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(3):
        (folder / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, late=2)))
    return folder


@pytest.mark.also_no_color
async def test_the_overview_lists_the_ranks_and_marks_the_straggler(gloo_job):
    app = JobApp([str(gloo_job)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        matrix = screen.matrix
        assert [r.rank for r in matrix.rows] == [0, 1, 2]
        assert matrix.steps == ["ProfilerStep#1", "ProfilerStep#2"]
        lines = matrix_lines(matrix)
        assert "step 1" in lines[0] and "step 2" in lines[0]
        assert "◀ straggler" in lines[3] and "straggler" not in "".join(lines[1:3])
        # The cursor starts on the straggler's slowest step.
        row, step = matrix.current
        assert row.rank == 2 and step == slowest_step(app.job, 2)
        # w: the cells show the collective waits instead (rank 2 waited for nobody).
        await pilot.press("w")
        assert matrix.mode == "wait"
        assert "0 ns" in matrix_lines(matrix)[3]
        assert "2.900 ms" in matrix_lines(matrix)[1]
        breakdown = screen.breakdown.visible_texts()
        assert [r[0] for r in breakdown] == ["0 median", "1", "2 ◀ straggler"]
        assert breakdown[2][1] == "ok" and breakdown[2][3] == "0 ns"  # waited
        # The phases against the median rank (rank 0), the explaining one first: rank 2's
        # 2 x 2.9 ms sleep is host time, the others' wait for it communication.
        titles = [c.title for c in screen.breakdown.model.columns]
        assert titles[4:6] == ["Δ host", "Δ comm"]
        assert [r[4] for r in breakdown] == ["0", "0", "+5.8 ms"]
        assert [r[5] for r in breakdown] == ["0", "0", "−5.8 ms"]
        line = str(screen.query_one("#ranks-straggler").render())
        assert "straggler: rank 2 waited 0 ns" in line
        assert "host time outside profiled ops 5.8 ms more than the median rank (rank 0)" in line
        # Tab: the per-rank table; it sorts, Enter opens that rank's slowest step.
        await pilot.press("tab")
        assert screen.focused is screen.breakdown
        await pilot.press("4")  # by waited, largest first
        assert [r[0] for r in screen.breakdown.visible_texts()][-1] == "2 ◀ straggler"
        await pilot.press("w")  # the screen's keys still work from the table
        assert matrix.mode == "dur"


async def test_from_the_overview_to_the_stragglers_slowest_step_in_one_key(gloo_job):
    app = JobApp([str(gloo_job)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        await overview(pilot)
        await pilot.press("s")
        screen = await rank_view(pilot, 2)
        step = slowest_step(app.job, 2)
        window = step_window(app.job.entry(2), step)
        assert covers(screen, window)
        timeline = screen.query_one(Timeline)
        assert screen.data.trace.name_of(timeline.selected_row) == step
        # q goes back to the overview; the rank's view was kept for a quick reopen.
        await pilot.press("q")
        await overview(pilot)
        # Arrows and Enter: rank 0's other step.
        await pilot.press("up", "up", "left" if step.endswith("2") else "right", "enter")
        screen = await rank_view(pilot, 0)
        other = next(s for s in app.job.entry(0).digest.step_names if s != step)
        assert covers(screen, step_window(app.job.entry(0), other))
        assert not covers(screen, step_window(app.job.entry(0), step))
        await pilot.press("escape")  # clears the selection first
        assert isinstance(app.screen, RankTraceScreen)
        await pilot.press("escape")
        await overview(pilot)


@pytest.mark.also_no_color
async def test_the_collectives_table_lists_sorts_and_opens_the_longest_waiter(gloo_job):
    app = JobApp([str(gloo_job)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        await overview(pilot)
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, CollectivesScreen), "collectives")
        screen = app.screen
        table = screen.table
        job = app.job
        assert table.row_count == len(job.matched) == 4
        rows = table.visible_texts()
        # Numbered in order within their group and step.
        assert sorted((r[3], r[1]) for r in rows) == [
            ("step 1", "all_gather #1"),
            ("step 1", "all_reduce #0"),
            ("step 2", "all_gather #1"),
            ("step 2", "all_reduce #0"),
        ]
        # By start skew, largest first: the all-reduces (rank 2 came 2.9 ms late).
        assert [r[1].split()[0] for r in rows[:2]] == ["all_reduce", "all_reduce"]
        assert rows[0][5] == "2.900 ms"
        # Rank 2 is the last to arrive: a full strip cell, the others low.
        assert arrival_levels(job, int(table.current_row), 3) == [0, 0, 7]
        await pilot.press("R")  # reversed: smallest skew first
        assert table.visible_texts()[-1][5] == "2.900 ms"
        await pilot.press("1")  # by number
        assert [r[0] for r in table.visible_texts()] == ["1", "2", "3", "4"]
        # Filter by kind.
        await pilot.press("slash", *"gather", "down")  # back to the table, nothing opened
        assert table.row_count == 2
        await pilot.press("escape")  # clears the filter
        assert table.row_count == 4
        # The all-reduce: on the timeline of a rank that waited for it.
        await pilot.press("R")  # descending by number: rows 4, 3, …
        await pilot.press("6")  # by start skew, largest first
        row = table.current_row
        assert job.matched.kind[row] == "all_reduce"
        rank, window, event = screen.target(row)
        assert rank in (0, 1)  # both waited 2.9 ms; rank 2 not at all
        j = job.matched.ranks.index(rank)
        assert window == (int(job.matched.start[row, j]), int(job.matched.end[row, j]))
        await pilot.press("enter")  # the job's timeline, or the rank's own where there is none
        await wait_until(pilot, lambda: app.screen is not screen, "a timeline")
        if importlib.util.find_spec("kinetoscope.tui.job.job_timeline") is not None:
            from kinetoscope.tui.job.job_timeline import JobTimelineScreen

            assert isinstance(app.screen, JobTimelineScreen)
            app.pop_screen()
        # The rank's own timeline, with the collective's event selected.
        app.open_rank(rank, window=window, row=event)
        view = await rank_view(pilot, rank)
        assert covers(view, window)
        selected = view.query_one(Timeline).selected_row
        assert view.data.trace.name_of(selected) == "gloo:all_reduce"


async def test_a_damaged_and_a_missing_rank_are_shown_without_a_crash(tmp_path):
    write_job(tmp_path, world=5)
    text = (tmp_path / "rank2.json").read_text()
    (tmp_path / "rank2.json").write_text(text[: len(text) * 3 // 5])  # cut off
    (tmp_path / "rank3.json").write_bytes(b"\x00garbage")  # not a trace at all
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        matrix = screen.matrix
        assert [(r.rank, r.status) for r in matrix.rows] == [
            (0, "ok"),
            (1, "ok"),
            (2, "incomplete"),
            (3, "not loaded"),
            (4, "missing"),
        ]
        lines = matrix_lines(matrix)
        assert "not loaded" in lines[4] and "missing" in lines[5]
        title = str(screen.query_one("#ranks-title").render())
        assert "rank 2 incomplete" in title and "rank 3 not loaded" in title
        assert "rank 4 missing" in title
        statuses = [r[1] for r in screen.breakdown.visible_texts()]
        assert statuses == ["ok", "ok", "incomplete", "not loaded", "missing"]
        # Enter on the rank that could not be loaded: said, and the overview stays.
        matrix.go_to(3, None)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RanksScreen)
        assert "not a trace" in str(screen.query_one("#ranks-cell").render())
        # The incomplete rank opens, as far as it was read.
        matrix.go_to(2, None)
        await pilot.press("enter")
        view = await rank_view(pilot, 2)
        assert not view.data.trace.complete


async def test_help_lists_the_job_keys_and_a_job_that_cannot_be_read_is_an_error(tmp_path):
    write_job(tmp_path / "job")
    app = JobApp([str(tmp_path / "job")], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        await overview(pilot)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        rows = app.screen.bindings
        assert rows[0] == ("── Ranks overview · this screen", "")
        keys = {k for k, _ in rows[: rows.index(("── Everywhere", ""))]}
        assert {"s", "c", "w", "a"} <= keys
        assert ("── Collectives (c)", "") in rows
        await pilot.press("escape")
        await overview(pilot)
        # a: the clocks aligned (the same ranks merged again).
        await pilot.press("a")
        assert app.job.aligned and app.screen.job is app.job
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "rank0.json").write_bytes(b"\x00")
    app = JobApp([str(tmp_path / "bad" / "rank0.json"), str(tmp_path / "nope.json")], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        assert [r.status for r in screen.matrix.rows] == ["not loaded", "not loaded"]
    (tmp_path / "empty").mkdir()
    app = JobApp([str(tmp_path / "empty")], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), "the error")
        assert app.exit_message == f"{tmp_path / 'empty'}: no trace files (*.json, *.json.gz)"


@pytest.mark.corpus
async def test_dlrm_8_ranks_straggler_and_collectives():
    if not DLRM.is_dir():
        pytest.skip("../shared/corpus is absent")
    app = JobApp([str(DLRM)], workers=2)  # digested in worker processes
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot,
            lambda: isinstance(app.screen, (JobLoadingScreen, RanksScreen)),
            "the loading screen",
        )
        screen = await overview(pilot)
        matrix = screen.matrix
        assert [r.rank for r in matrix.rows] == list(range(8))
        assert matrix.straggler == 7
        assert "7 ◀ straggler" in matrix_lines(matrix)[8]
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, CollectivesScreen), "collectives")
        rows = app.screen.table.visible_texts()
        assert len(rows) == 8
        assert rows[0][1] == "all_to_all #0" and rows[0][5] == "7.624 ms"
        await pilot.press("escape")
        await overview(pilot)
        await pilot.press("s")
        view = await rank_view(pilot, 7)
        assert covers(view, step_window(app.job.entry(7), "ProfilerStep#10"))


async def test_the_loading_screen_shows_each_rank_as_its_digest_arrives(gloo_job):
    from kinetoscope.tui.data.job_loader import JobLoad

    load = JobLoad([str(gloo_job)], workers=1, start=False)
    app = JobApp([str(gloo_job)], load=load)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, JobLoadingScreen), "loading")
        listed = str(app.screen.query_one("#job-loading-list").render())
        assert [line.split()[:2] for line in listed.splitlines()] == [
            ["rank", "0"],
            ["rank", "1"],
            ["rank", "2"],
        ]
        assert listed.count("waiting…") == 3
        loading = app.screen
        load.start()
        await overview(pilot)
        listed = str(loading.ranks_text())
        assert "waiting…" not in listed and listed.count(" events · ") == 3


async def test_the_command_palette_runs_the_overviews_keys(gloo_job):
    app = JobApp([str(gloo_job)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        await overview(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause(0.3)
        await pilot.press(*"matched collectives")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, CollectivesScreen), "collectives")


async def test_two_profiling_cycles_the_newest_complete_and_another_by_choice(tmp_path):
    write_job(tmp_path, name="host_{rank}.1700000000000.pt.trace.json", step="ProfilerStep#1")
    write_job(
        tmp_path,
        name="host_{rank}.1700000060000.pt.trace.json",
        ranks=(0, 1),
        step="ProfilerStep#9",
    )
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        assert screen.matrix.steps == ["ProfilerStep#1"]
        title = str(screen.query_one("#ranks-title").render())
        assert "profiling cycle 1 of 2 (--cycle N picks another)" in title
    app = JobApp([str(tmp_path)], workers=1, cycle=2)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        assert screen.matrix.steps == ["ProfilerStep#9"]
        assert [(r.rank, r.status) for r in screen.matrix.rows] == [
            (0, "ok"),
            (1, "ok"),
            (2, "missing"),
        ]


def test_cycle_is_an_option_of_a_jobs_viewer_only(tmp_path):
    import subprocess
    import sys

    (tmp_path / "one.json").write_text(json.dumps({"traceEvents": []}))
    run = subprocess.run(
        [sys.executable, "-m", "kinetoscope", str(tmp_path / "one.json"), "--cycle", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert run.stderr == (
        "kinetoscope: --cycle picks a profiling cycle of a job (a folder or several files)\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "kinetoscope", str(tmp_path), "--cycle", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert run.stderr == "kinetoscope: no profiling cycle 3: the files hold 1 (1)\n"


async def test_ranks_without_steps_open_on_their_whole_trace(tmp_path):
    for rank in range(2):
        trace = gloo_rank(rank, late=1, world=2)
        trace["traceEvents"] = [
            e for e in trace["traceEvents"] if not e["name"].startswith("ProfilerStep")
        ]
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(trace))
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await overview(pilot)
        assert screen.matrix.steps == [] and screen.matrix.straggler == 1
        assert "Enter opens the rank's whole trace" in str(screen.query_one("#ranks-cell").render())
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RankTraceScreen), "rank 1")
        assert app.screen.rank == 1


def test_summary_options_on_several_files_point_to_the_jobs_summary(tmp_path):
    import subprocess
    import sys

    first, second = str(tmp_path / "r0.json"), str(tmp_path / "r1.json")
    run = subprocess.run(
        [sys.executable, "-m", "kinetoscope", first, second, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr == (
        "kinetoscope: the viewer has no --json option; for the analysis as text or JSON run: "
        f"kinetoscope summary {first} {second} --json\n"
    )


class _StuckExecutor:
    """Digests that never arrive (ranks on a stalled file system): futures no one completes."""

    def __init__(self) -> None:
        self.futures: list = []

    def submit(self, function, *args):
        from concurrent.futures import Future

        future: Future = Future()
        self.futures.append(future)
        return future


async def test_quitting_while_ranks_are_digested_cancels_the_digests(gloo_job):
    from kinetoscope.tui.data.job_loader import JobLoad

    executor = _StuckExecutor()
    load = JobLoad([str(gloo_job)], executor=executor)
    app = JobApp([str(gloo_job)], load=load)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(executor.futures) == 3, "the digests submitted")
        await pilot.press("q")
    # The digests never end: a load that waited for them would still be running.
    load.join(10.0)
    assert not load.running and load.cancelled
    assert all(future.cancelled() for future in executor.futures)
    assert load.job is None and load.error is None  # cancelled, not failed


def test_quitting_the_job_viewer_stops_its_digesting_processes_at_once(gloo_job):
    import os
    import subprocess
    import sys

    # Every rank file becomes a named pipe whose writer (this program) never writes: each
    # worker process waits in its digest for as long as the program lives (a slow producer).
    # Quitting must not wait for them.
    code = (
        "import asyncio, os, sys, time\n"
        "from kinetoscope.tui.job.job_app import JobApp\n"
        "from kinetoscope.tui.data.job_loader import JobLoad\n"
        "load = JobLoad([sys.argv[1]], workers=2, start=False)\n"
        "writers = []\n"
        "for path in load.paths:\n"
        "    os.remove(path)\n"
        "    os.mkfifo(path)\n"
        "    writers.append(os.open(path, os.O_RDWR))\n"
        "load.start()\n"
        "async def main():\n"
        "    app = JobApp([sys.argv[1]], load=load)\n"
        "    async with app.run_test(size=(100, 30)) as pilot:\n"
        "        await pilot.pause(1.5)\n"
        "        await pilot.press('q')\n"
        "asyncio.run(main())\n"
        "print(time.monotonic(), flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(gloo_job)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KINETOSCOPE_CACHE_DIR": str(gloo_job.parent / "cache")},
        start_new_session=True,  # its worker processes too, to be stopped together
    )
    try:
        stdout, stderr = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, 9)
        child.communicate()
        raise AssertionError(
            "the viewer did not exit: it waited for its worker processes"
        ) from None
    ended = time.monotonic()
    run = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    assert run.returncode == 0, run.stderr
    # Exit follows the app's end (the pipes' readers are stopped, not waited for: waiting would
    # last as long as the program above, and end in the timeout).
    assert ended - float(run.stdout.split()[-1]) < 5.0


def shown_titles(table) -> list[str]:  # type: ignore[no-untyped-def]
    """The titles of the columns a DataView draws at its width."""
    widths = table._widths(table.scrollable_content_region.width)
    return [c.title for c, w in zip(table.model.columns, widths) if w]


@pytest.mark.corpus
async def test_at_80x24_the_reason_reads_whole_and_the_waits_stay():
    """At 80x24 on the DLRM job: the straggler's reason is in words on a line of its own, not
    cut; the collectives table keeps start skew, last rank and the arrival strip (group, end
    skew, size and bandwidths give way); `s` is named for what it opens."""
    if not DLRM.is_dir():
        pytest.skip("../shared/corpus is absent")
    app = JobApp([str(DLRM)], workers=1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await overview(pilot)
        line = screen.query_one("#ranks-straggler")
        text = str(line.render())
        assert "straggler: rank 7 waited 1.534 ms" in text
        assert "started its step 4.5 ms after the others" in text
        assert line.size.height == 1 and len(text) <= 78  # whole, within the line
        footer = [
            b.binding.description for b in screen.active_bindings.values() if b.binding.key == "s"
        ]
        assert footer == ["Most excess"]
        titles = shown_titles(screen.breakdown)
        assert titles[:5] == ["rank", "status", "step", "waited", "Δ comm"]
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, CollectivesScreen), "collectives")
        await pilot.pause()
        titles = shown_titles(app.screen.table)
        assert {"start skew", "last", "arrival"} <= set(titles), titles
        assert "busbw" not in titles


async def test_the_reason_wraps_at_words_on_a_narrow_screen(tmp_path):
    """A CPU-only job whose straggler sleeps in an annotation: the reason names it and, at 80
    columns, wraps between words."""
    from test_job_phases import write

    write(tmp_path / "job", slow=1, kind="annotation")
    app = JobApp([str(tmp_path / "job")], workers=1)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await overview(pilot)
        line = screen.query_one("#ranks-straggler")
        reference = app.job.straggler["reference_rank"]
        reason = f"'## data ##' 9 ms more than the median rank (rank {reference})"
        text = str(line.render())
        assert reason in text
        # As drawn: every word whole on its line.
        drawn = [
            "".join(s.text for s in line.render_line(y)).strip() for y in range(line.size.height)
        ]
        words = set("straggler: rank 1 waited 0 ns ·".split() + reason.split())
        assert len(drawn) == 2 and all(w in words for row in drawn for w in row.split()), drawn
        titles = shown_titles(screen.breakdown)
        assert "Δ ## data ##" in titles
