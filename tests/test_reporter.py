"""The reporting the viewers' loaders share (tui/data/reporter.py): one sink, a late one replayed
what it missed in order, a later one replacing it, a sink that raises harmless, progress rate
limited; seen through the job's loader (the trace loader's own are in test_loader.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kinetoscope.tui.data.job_loader import JobDone, JobFailed, JobLoad, RankDone
from kinetoscope.tui.data.reporter import Reporter
from test_job import gloo_rank

LIMIT_S = 60


def job_folder(tmp_path: Path, ranks: int = 3) -> str:
    for rank in range(ranks):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, 1, world=ranks)))
    return str(tmp_path)


def test_a_late_sink_gets_each_rank_then_the_job_in_order_and_a_later_one_replaces_it(tmp_path):
    load = JobLoad([job_folder(tmp_path)], workers=1)
    load.join(LIMIT_S)
    assert load.job is not None
    late: list = []
    load.subscribe(late.append)  # everything happened before: it is replayed
    assert [type(r) for r in late] == [RankDone, RankDone, RankDone, JobDone]
    assert sorted(r.index for r in late[:3]) == [0, 1, 2] and late[3].job is load.job
    again: list = []
    load.subscribe(again.append)
    assert again == late
    load._report(JobFailed("said after"))  # sent to the sink subscribed last only
    assert len(late) == 4 and isinstance(again[-1], JobFailed)
    load.unsubscribe()
    load._report(JobFailed("said to no one"))
    assert len(again) == 5


def test_a_sink_that_raises_does_not_stop_the_job(tmp_path):
    def broken(report) -> None:
        raise RuntimeError("the UI went away")

    load = JobLoad([job_folder(tmp_path)], workers=1, start=False)
    load.subscribe(broken)
    load.start()
    load.join(LIMIT_S)
    assert load.job is not None and load.done == 3 and load.error is None


def test_progress_is_due_at_most_so_many_times_a_second():
    reporter: Reporter[int] = Reporter()
    reporter._init_reports()
    began = time.monotonic()
    due = 0
    while time.monotonic() - began < 0.5:
        due += reporter._progress_due(10)
        time.sleep(0.001)
    assert 1 <= due <= 0.5 * 10 + 2  # the first at once, then one each tenth of a second
