"""The viewer's staged view: the first frame from the lanes' top levels, the rest after it, and
the finished view kept with the model cache so that a reopen skips the nesting."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from conftest import SAMPLES, corpus_files
from hypothesis import given, settings
from kinetoscope.parser import cache, load, loads, save_cache
from kinetoscope.tui.data.viewdata import ViewData, build_view_data, save_view_cache
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.widgets.timeline import Timeline
from test_analysis_property import EVENTS


def traces():
    paths = sorted(SAMPLES.glob("*.json.gz"))
    picked = corpus_files()[::6]  # a spread of formats, not every file
    return [str(p) for p in paths + picked]


def assert_same_levels(first: ViewData, full: ViewData, top_only: bool) -> None:
    assert [v.lane.id for v in first.lanes] == [v.lane.id for v in full.lanes]
    assert [(g.label, g.lanes) for g in first.groups] == [(g.label, g.lanes) for g in full.groups]
    for a, b in zip(first.lanes, full.lanes):
        assert a.device == b.device and a.short_label == b.short_label
        assert a.expandable == (len(b.levels) > 1)
        levels = a.levels[:1] if top_only else a.levels
        assert len(levels) == (1 if top_only else len(b.levels))
        for la, lb in zip(levels, b.levels):
            for field in ("rows", "start", "end", "end_max", "cum_dur", "slot"):
                assert np.array_equal(getattr(la, field), getattr(lb, field)), field
    placed = first.row_level >= 0
    assert np.array_equal(first.row_lane[placed], full.row_lane[placed])
    assert np.array_equal(first.row_entry[placed], full.row_entry[placed])
    if not top_only:
        assert np.array_equal(first.row_level, full.row_level)
        assert np.array_equal(first.row_lane, full.row_lane)


@pytest.mark.parametrize("path", traces(), ids=lambda p: p.rsplit("/", 2)[-1])
def test_top_levels_first_then_the_same_view_as_at_once(path):
    trace = load(path, use_cache=False)
    full = build_view_data(trace)
    staged = build_view_data(trace, staged=True)
    assert full.complete and not staged.complete
    assert_same_levels(staged, full, top_only=True)
    assert set(np.unique(staged.row_level)) <= {-1, 0}
    staged.complete_levels()
    assert staged.complete
    assert_same_levels(staged, full, top_only=False)
    assert np.array_equal(staged.nesting.parent, full.nesting.parent)


@settings(max_examples=40, deadline=None)
@given(EVENTS)
def test_top_levels_match_on_random_traces(events):
    trace = loads(json.dumps(events).encode())
    full = build_view_data(trace)
    staged = build_view_data(trace, staged=True)
    assert_same_levels(staged, full, top_only=True)
    staged.complete_levels()
    assert_same_levels(staged, full, top_only=False)


def cached_sample(monkeypatch):
    """The sample trace loaded, cached (whatever its size) and loaded back from the cache."""
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)
    path = str(sorted(SAMPLES.glob("synthetic_gpu*.json.gz"))[0])
    trace = load(path, write_cache=False)
    assert save_cache(trace)
    return path, trace


def test_view_cache_round_trip_and_damage(monkeypatch):
    path, trace = cached_sample(monkeypatch)
    full = build_view_data(trace)
    assert not full.levels_from_cache
    assert save_view_cache(full)
    reopened = load(path)
    assert reopened.from_cache
    again = build_view_data(reopened, staged=True)
    # The first frame's top levels from the cache (no sort, no nesting), the rest rebuilt
    # from it after the first frame.
    assert again.levels_from_cache and not again.complete
    assert_same_levels(again, full, top_only=True)
    again.complete_levels()
    assert again.levels_from_cache and again.complete
    assert_same_levels(again, full, top_only=False)
    for name in ("order", "parent", "depth", "self_time", "subtree_stop", "outermost"):
        assert np.array_equal(getattr(again.nesting, name), getattr(full.nesting, name)), name

    # A damaged array is detected by its CRC and the view is computed again, never trusted.
    folder = cache.entry_dir(path) / "extra-view"
    victim = folder / "placement.rows.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    damaged = build_view_data(load(path), staged=True)
    assert not damaged.levels_from_cache
    damaged.complete_levels()
    assert_same_levels(damaged, full, top_only=False)


def test_view_cache_of_another_file_state_is_ignored(monkeypatch, tmp_path):
    path, trace = cached_sample(monkeypatch)
    assert save_view_cache(build_view_data(trace))
    # Touching the trace changes its key: the model and the view entries are both stale.
    later = time.time() + 5
    import os

    os.utime(path, (later, later))
    try:
        reopened = load(path, write_cache=False)
        assert not reopened.from_cache
        assert cache.load_extra(trace, "view", 1) is None
    finally:
        os.utime(path, None)


@pytest.mark.deferred_levels
async def test_keys_that_need_deeper_levels_wait_for_them(monkeypatch):
    """Until every slice is placed, expanding a lane and going to a parent say they are on
    their way; once placed, they work, and the open view is kept."""
    import threading

    release = threading.Event()
    original = ViewData.complete_levels

    def held(self):
        if threading.current_thread() is not threading.main_thread():
            release.wait(20)
        original(self)

    monkeypatch.setattr(ViewData, "complete_levels", held)
    path = str(sorted(SAMPLES.glob("synthetic_gpu*.json.gz"))[0])
    app = KinetoscopeApp(path, staged=True)
    notes: list[str] = []
    monkeypatch.setattr(app, "notify", lambda message, **_: notes.append(str(message)))
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 20
        # The screen is switched to before its widgets are mounted: wait for the timeline.
        while time.monotonic() < deadline and not (
            isinstance(app.screen, TraceScreen) and app.screen.query(Timeline)
        ):
            await pilot.pause(0.02)
        timeline = app.screen.query_one(Timeline)
        timeline.notify = lambda message, **_: notes.append(str(message))
        await pilot.pause(0.1)
        data = timeline.data
        assert not data.complete
        lane = next(i for i, v in enumerate(data.lanes) if v.expandable)
        timeline.cursor_row = timeline._display_index(lane, 0)
        rows_before = len(timeline.rows)
        await pilot.press("enter")
        assert any("Still nesting" in n for n in notes)
        assert len(timeline.rows) == rows_before
        release.set()
        while not data.complete and time.monotonic() < deadline:
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        assert data.complete
        timeline.cursor_row = timeline._display_index(lane, 0)
        await pilot.press("enter")
        assert len(timeline.rows) == rows_before + len(data.lanes[lane].levels) - 1
        await pilot.press("q")
