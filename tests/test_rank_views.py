"""One owner of a job's ranks' view data (tui/data/rank_views.py): the background loads a few at a
time, one load per rank whoever asks, the resident bound and the few kept after, the nesting
on request, a rank that cannot be read; and the job viewer opening a rank the job's timeline
loaded without loading it again."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kinetoscope.tui.data import loader as loader_module
from kinetoscope.tui.data import rank_views
from kinetoscope.tui.data.loader import Complete, Failed, Ready
from kinetoscope.tui.data.rank_views import RankViews
from test_job import gloo_rank, write_job

LIMIT_S = 60


class Asker:
    """A sink that keeps each report, from any thread."""

    def __init__(self) -> None:
        self.reports: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, report: Any) -> None:
        with self.lock:
            self.reports.append(report)

    def of(self, kind: type) -> list[Any]:
        with self.lock:
            return [r for r in self.reports if isinstance(r, kind)]


def until(condition, what: str, timeout: float = LIMIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out: {what}")


@pytest.fixture
def job_paths(tmp_path: Path) -> dict[int, str]:
    for rank in range(5):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, 4, world=5)))
    return {rank: str(tmp_path / f"rank{rank}.json") for rank in range(5)}


@pytest.fixture
def started(monkeypatch) -> list[Any]:
    """Every TraceLoad the rank views start, in order."""
    made: list[Any] = []
    real = rank_views.TraceLoad

    def counted(*args: Any, **kwargs: Any) -> Any:
        load = real(*args, **kwargs)
        made.append(load)
        return load

    monkeypatch.setattr(rank_views, "TraceLoad", counted)
    return made


def test_background_loads_run_a_few_at_a_time_in_the_order_asked(job_paths, started, monkeypatch):
    gate = threading.Event()
    real_load = loader_module.load

    def held_load(path: str, **options: Any) -> Any:
        gate.wait(LIMIT_S)
        return real_load(path, **options)

    monkeypatch.setattr(loader_module, "load", held_load)
    views = RankViews(job_paths)
    sink = Asker()
    for rank in (3, 0, 4, 1):
        views.want(rank, sink, sink)
    time.sleep(0.2)
    assert len(started) == rank_views.LOAD_THREADS == 2  # the others wait for a slot
    assert [load.path for load in started] == [job_paths[3], job_paths[0]]
    assert all(views.loading(rank) for rank in (3, 0, 4, 1)) and not views.loading(2)
    # Top levels only, in this process, no nesting of their own: the timeline draws those.
    assert all(load.staged and not load.nest and load.workers == 1 for load in started)
    gate.set()
    until(lambda: len(sink.of(Ready)) == 4, "four ranks ready")
    assert [load.path for load in started] == [job_paths[r] for r in (3, 0, 4, 1)]
    assert views.held == {0, 1, 3, 4}
    until(lambda: not views.busy, "the loads' cache writes done")
    assert not views.loading(3)
    assert all(views.view(rank) is not None for rank in (3, 0, 4, 1))
    # Their loads are done and nested nothing: the deeper levels wait until a rank is opened.
    assert not any(views.view(rank).complete for rank in (3, 0, 4, 1))
    assert not sink.of(Complete)


def test_one_load_per_rank_whoever_asks(job_paths, started):
    views = RankViews(job_paths)
    timeline, app = Asker(), Asker()
    views.want(1, timeline, timeline)
    views.want(1, timeline, timeline)  # asked again: still one load
    until(lambda: timeline.of(Ready), "rank 1 ready")
    data = views.view(1)
    load = views.open(1, app, app, staged=True)  # the user opens it: the same load
    assert len(started) == 1 and load is started[0] and load.data is data
    # Nested on request, told to whoever asked.
    views.nest(1, data, app, app)
    until(lambda: app.of(Complete), "rank 1 nested")
    assert data.complete and app.of(Complete)[0].data is data
    assert views.view(1) is data and len(started) == 1


def test_past_the_resident_bound_the_ranks_named_go_and_a_few_stay_after(
    job_paths, started, monkeypatch
):
    monkeypatch.setattr(rank_views, "RESIDENT_RANKS", 3)
    views = RankViews(job_paths)
    sink = Asker()
    for rank in range(5):
        views.want(rank, sink, sink)
    until(lambda: len(sink.of(Ready)) == 5, "five ranks ready")
    assert views.over_bound()
    # The screen names the ranks off screen, the farthest first; only two must go.
    assert views.trim([4, 0, 2]) == [4, 0]
    assert views.view(4) is None and views.view(0) is None and views.held == {1, 2, 3}
    assert not views.over_bound() and views.trim([1]) == []
    # Wanted again: loaded again.
    views.want(4, sink, sink)
    until(lambda: len(sink.of(Ready)) == 6, "rank 4 again")
    assert len(started) == 6 and views.view(4) is not None
    # The screen closes: of the views no one holds, the ones used last are kept.
    views.view(2)
    views.release([1, 2, 3, 4], sink)
    assert views.held == set()
    assert views.resident == [4, 2][-rank_views.RANK_VIEWS_KEPT :]
    assert views.view(1) is None and views.view(3) is None


def test_a_rank_that_cannot_be_read_says_why_and_is_not_read_again(job_paths, started):
    Path(job_paths[2]).write_text("{ not json")
    views = RankViews(job_paths)
    sink = Asker()
    views.want(2, sink, sink)
    until(lambda: sink.of(Failed), "rank 2 failed")
    assert "rank2.json" in views.error(2) and views.view(2) is None
    views.want(2, sink, sink)
    time.sleep(0.1)
    assert len(started) == 1  # asked again in the background: the failure stands
    views.open(2, sink, sink, staged=False)  # the user asks: read again
    until(lambda: len(sink.of(Failed)) == 2, "rank 2 failed again")
    assert len(started) == 2


async def test_a_rank_the_timeline_loaded_opens_from_the_overview_without_a_second_load(
    tmp_path, started
):
    from kinetoscope.tui.job.job_app import JobApp, RankTraceScreen
    from kinetoscope.tui.job.job_ranks import RanksScreen
    from kinetoscope.tui.job.job_timeline import JobTimelineScreen

    write_job(tmp_path)
    app = JobApp([str(tmp_path)], workers=1)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(600):
            await pilot.pause(0.05)
            if isinstance(app.screen, RanksScreen):
                break
        overview = app.screen
        assert isinstance(overview, RanksScreen)
        await pilot.press("t")
        for _ in range(600):
            await pilot.pause(0.05)
            screen = app.screen
            if isinstance(screen, JobTimelineScreen) and len(screen.views) == 3:
                break
        assert isinstance(screen, JobTimelineScreen) and len(screen.views) == 3
        drawn = screen.views[2].inner
        assert len(started) == 3
        screen.timeline_of(2).focus()  # the rank looked at last
        await pilot.pause()
        await pilot.press("q")
        assert app.screen is overview
        app.open_rank(2)
        await pilot.pause()
        alone = app.screen
        assert isinstance(alone, RankTraceScreen) and alone.rank == 2
        assert alone.data is drawn and len(started) == 3  # the timeline's model, not a new one
        for _ in range(200):  # its deeper levels follow, and the screen is redrawn with them
            await pilot.pause(0.02)
            if drawn.complete:
                break
        assert drawn.complete
        # Of the ranks the closed timeline held, the ones used last are kept.
        assert len(app.ranks.resident) == rank_views.RANK_VIEWS_KEPT and not app.ranks.held
