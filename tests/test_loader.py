"""The viewer's loader without a UI: the stages it reports, in order, to one sink subscribed at
any time; progress coalesced; failures and cancels as reports, never as exceptions."""

from __future__ import annotations

import threading
import time

from conftest import SAMPLES
from kinetoscope.tui.data import loader as loader_module
from kinetoscope.tui.data.loader import (
    BackgroundFailure,
    Cancelled,
    Complete,
    Failed,
    Progress,
    Ready,
    Stage,
    TraceLoad,
)

LIMIT_S = 60


def sample() -> str:
    return str(sorted(SAMPLES.glob("synthetic_gpu*.json.gz"))[0])


def kinds(reports: list) -> list[str]:
    """The reports' types in order, runs of progress as one."""
    names: list[str] = []
    for report in reports:
        name = type(report).__name__
        if not (name == "Progress" and names and names[-1] == "Progress"):
            names.append(name)
    return names


class Recorder:
    """A sink that keeps what it is given, from any thread."""

    def __init__(self) -> None:
        self.reports: list = []
        self.lock = threading.Lock()

    def __call__(self, report) -> None:
        with self.lock:
            self.reports.append(report)

    def wait_for(self, kind: type, timeout: float = LIMIT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if any(isinstance(r, kind) for r in self.reports):
                    return
            time.sleep(0.01)
        raise AssertionError(f"no {kind.__name__} in {kinds(self.reports)}")


def test_a_sink_subscribed_late_gets_every_stage_in_order():
    load = TraceLoad(sample(), staged=True)
    assert load.wait(LIMIT_S) is Stage.TOP_LEVELS  # the top levels: the first frame can come
    assert load.data is not None and not load.data.complete
    load.first_frame_shown()
    load.join(LIMIT_S)
    assert load.stage is Stage.COMPLETE and load.data.complete
    late = Recorder()
    load.subscribe(late)  # everything happened before: it is replayed
    assert kinds(late.reports) == ["Ready", "Complete"]
    assert late.reports[0].data is late.reports[1].data is load.data
    assert load.session is load.data.session
    again = Recorder()
    load.subscribe(again)  # a later subscriber gets the same
    assert kinds(again.reports) == ["Ready", "Complete"]


def test_a_sink_subscribed_while_reading_gets_progress_then_each_stage(monkeypatch):
    started, release = threading.Event(), threading.Event()
    real_load = loader_module.load

    def held_load(path, progress=None, **options):
        progress(10, 100, 1)
        started.set()
        release.wait(LIMIT_S)
        return real_load(path, progress=progress, **options)

    monkeypatch.setattr(loader_module, "load", held_load)
    load = TraceLoad(sample(), staged=True)
    assert started.wait(LIMIT_S)
    sink = Recorder()
    load.subscribe(sink)
    assert sink.reports == [Progress(Stage.READING, 10, 100, 1, sink.reports[0].rate)]
    release.set()
    sink.wait_for(Ready)
    load.first_frame_shown()
    sink.wait_for(Complete)
    load.join(LIMIT_S)
    assert kinds(sink.reports) == ["Progress", "Ready", "Complete"]
    stages = [r.stage for r in sink.reports if isinstance(r, Progress)]
    assert stages[-1] is Stage.LAYOUT and Stage.READING in stages  # laying out is said too


def test_not_staged_the_view_is_complete_at_once():
    sink = Recorder()
    load = TraceLoad(sample(), staged=False)
    load.subscribe(sink)
    assert load.wait(LIMIT_S) in (Stage.TOP_LEVELS, Stage.COMPLETE)
    assert load.data is not None and load.data.complete
    sink.wait_for(Complete)
    assert kinds(sink.reports)[-2:] == ["Ready", "Complete"]
    load.join(LIMIT_S)


def test_the_first_frame_starts_the_work_after_it(monkeypatch):
    # Without first_frame_shown() the deeper levels wait FIRST_FRAME_WAIT_S (made long here).
    monkeypatch.setattr(loader_module, "FIRST_FRAME_WAIT_S", LIMIT_S)
    load = TraceLoad(sample(), staged=True)
    assert load.wait(LIMIT_S) is Stage.TOP_LEVELS
    time.sleep(0.3)
    assert load.stage is Stage.TOP_LEVELS and not load.data.complete
    load.first_frame_shown()
    load.join(LIMIT_S)
    assert load.stage is Stage.COMPLETE


def test_progress_is_coalesced(monkeypatch):
    real_load = loader_module.load
    calls = 3000

    def chatty_load(path, progress=None, **options):
        began = time.monotonic()
        for step in range(calls):  # about 0.6 s of reports, far more than 10 a second
            progress(step, calls, step)
            time.sleep(0.0002)
        trace = real_load(path, progress=progress, **options)
        chatty_load.seconds = time.monotonic() - began
        return trace

    monkeypatch.setattr(loader_module, "load", chatty_load)
    sink = Recorder()
    load = TraceLoad(sample(), staged=False)
    load.subscribe(sink)
    load.wait(LIMIT_S)
    load.join(LIMIT_S)
    progress = [r for r in sink.reports if isinstance(r, Progress)]
    allowed = chatty_load.seconds * loader_module.PROGRESS_PER_S + 3  # the replay, LAYOUT, edges
    assert 2 <= len(progress) <= allowed, (len(progress), chatty_load.seconds)
    assert [r.done for r in progress] == sorted(r.done for r in progress)


def test_a_failed_load_is_a_report(write_trace):
    path = write_trace(b'{"traceEvents": 7}')
    sink = Recorder()
    load = TraceLoad(str(path), staged=True)
    load.subscribe(sink)
    assert load.wait(LIMIT_S) is Stage.FAILED
    sink.wait_for(Failed)
    assert kinds(sink.reports)[-1] == "Failed"
    assert sink.reports[-1].message == load.error and "\n" not in load.error
    assert load.data is None


def test_cancel_while_reading_is_a_report(monkeypatch):
    started = threading.Event()

    def endless_load(path, progress=None, **options):
        while True:
            started.set()
            progress(1, 2, 3)
            time.sleep(0.005)

    monkeypatch.setattr(loader_module, "load", endless_load)
    load = TraceLoad(sample(), staged=True)
    assert started.wait(LIMIT_S)
    load.cancel()
    assert load.wait(LIMIT_S) is Stage.CANCELLED
    sink = Recorder()
    load.subscribe(sink)
    assert kinds(sink.reports) == ["Cancelled"] and isinstance(sink.reports[0], Cancelled)


def test_a_failure_after_the_first_frame_is_a_background_failure(monkeypatch):
    from kinetoscope.tui.data.viewdata import ViewData

    def broken(self):
        raise ValueError("boom")

    monkeypatch.setattr(ViewData, "complete_levels", broken)
    sink = Recorder()
    load = TraceLoad(sample(), staged=True)
    load.subscribe(sink)
    load.first_frame_shown()
    load.join(LIMIT_S)
    assert kinds(sink.reports)[-2:] == ["Ready", "BackgroundFailure"]
    failure = sink.reports[-1]
    assert isinstance(failure, BackgroundFailure)
    assert "could not nest the slices" in failure.message and "boom" in failure.message
    assert load.stage is Stage.TOP_LEVELS and load.background_error == failure.message


def test_a_sink_that_raises_does_not_stop_the_load():
    def rude(report):
        raise RuntimeError("the UI is gone")

    load = TraceLoad(sample(), staged=False)
    load.subscribe(rude)
    assert load.wait(LIMIT_S) in (Stage.TOP_LEVELS, Stage.COMPLETE)
    load.join(LIMIT_S)
    assert load.stage is Stage.COMPLETE


def test_a_finished_load_reports_what_it_was_given():
    from kinetoscope.parser import load as load_trace
    from kinetoscope.tui.data.viewdata import build_view_data

    data = build_view_data(load_trace(sample()))
    done = TraceLoad.finished(data)
    sink = Recorder()
    done.subscribe(sink)
    assert kinds(sink.reports) == ["Ready", "Complete"] and sink.reports[0].data is data
    staged = build_view_data(load_trace(sample()), staged=True)
    later = TraceLoad.finished(staged)
    later.first_frame_shown()
    later.join(LIMIT_S)
    assert later.stage is Stage.COMPLETE and staged.complete


def test_the_loader_imports_no_textual():
    # It starts before Textual is imported, so that the decoding begins while Textual loads.
    import subprocess
    import sys

    code = (
        "import sys; from kinetoscope.tui.data.loader import TraceLoad; "
        f"load = TraceLoad({sample()!r}, staged=True); load.wait(60); "
        "load.first_frame_shown(); load.join(60); "
        "print(load.stage.name, sorted(m for m in sys.modules if m.startswith('textual')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["COMPLETE", "[]"]
