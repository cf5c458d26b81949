"""The viewer's export key (issue 18): mark a range, press `e`, and the range is written as a
trace of its own next to the current directory, that kinetoscope opens again, with a
notification that names the file and what it kept; `e` in the idle-gap list exports around the
selected gap."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from kinetoscope.parser import load
from kinetoscope.parser.model import PH_COMPLETE
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.exporting import reserve
from kinetoscope.tui.trace.screens import GapListScreen, TraceScreen
from pilot_helpers import settle

from kinetoscope.export.crop import gap_window

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "sample_traces"
    / "synthetic_gpu_training.pt.trace.json.gz"
)
STEM = "synthetic_gpu_training.pt.trace"
SIZE = (120, 40)


async def said(pilot, text: str, timeout: float = 60.0) -> str:
    """The first notification holding `text`, waited for (the export runs in a worker)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for note in pilot.app._notifications:
            if text in str(note.message):
                return str(note.message)
        await pilot.pause(0.05)
    notes = [str(n.message) for n in pilot.app._notifications]
    raise AssertionError(f"no notification with {text!r}: {notes}")


def slices_overlapping(trace, start: int, end: int) -> int:
    """X events with time inside [start, end] (analysis/ranges.py's overlap)."""
    ends = trace.start + trace.dur
    inside = (trace.start < end) & (ends > start)
    return int(np.count_nonzero((trace.ph == PH_COMPLETE) & inside))


async def mark(pilot, screen, start_ns: int, end_ns: int) -> None:
    timeline = screen.timeline
    timeline.cursor_time = start_ns
    await pilot.press("m")
    timeline.cursor_time = end_ns
    await pilot.press("m")
    await pilot.pause()


async def test_e_exports_the_marked_range_as_a_trace_that_reloads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{STEM}.window.json.gz").write_bytes(b"keep me")  # never overwritten
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        data = screen.data
        await mark(pilot, screen, 2_000_000, 9_000_000)
        bounds = (data.origin + 2_000_000, data.origin + 9_000_000)
        assert screen.range_bounds() == bounds
        await pilot.press("e")
        message = await said(pilot, "Exported the marked range")
        await pilot.app.workers.wait_for_complete()
    written = tmp_path / f"{STEM}.window-2.json.gz"
    assert written.is_file()
    assert (tmp_path / f"{STEM}.window.json.gz").read_bytes() == b"keep me"
    # The notification names the file and what it kept.
    assert f"wrote {written} (" in message
    assert "window +2ms..+9ms (7 ms)" in message and "slices" in message and "flows" in message
    crop = load(str(written), use_cache=False)
    original = data.trace
    assert crop.complete and crop.n_events > 0
    assert slices_overlapping(crop, *bounds) == slices_overlapping(original, *bounds)
    assert crop.n_events < original.n_events


async def test_e_without_a_range_says_how_to_mark_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        await pilot.press("e")
        message = await said(pilot, "Nothing marked to export")
        assert "m at a range's start and m at its end" in message and "M on" in message
        screen.timeline.cursor_time = 1_000_000
        await pilot.press("m", "e")
        await said(pilot, "Press m again at the range's end, then e exports it")
        await pilot.app.workers.wait_for_complete()
    assert list(tmp_path.iterdir()) == []


async def test_e_in_the_gap_list_exports_around_the_selected_gap(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        session = screen.data.session
        await pilot.press("i")
        await settle(pilot, GapListScreen)
        await pilot.press("down", "e")  # the second longest gap
        message = await said(pilot, "Exported gap #2")
        await pilot.app.workers.wait_for_complete()
        window = gap_window(session, 2)
    written = tmp_path / f"{STEM}.gap2.json.gz"
    assert f"wrote {written} (" in message
    crop = load(str(written), use_cache=False)
    assert slices_overlapping(crop, window.start_ns, window.end_ns) == slices_overlapping(
        session.trace, window.start_ns, window.end_ns
    )


async def test_help_lists_the_export_key():
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("question_mark")
        help_screen = await settle(pilot, HelpScreen)
        assert any(
            key == "e" and "Export the marked range" in text for key, text in help_screen.bindings
        )


def test_the_name_is_taken_exclusively_and_falls_back(tmp_path):
    first = reserve("t.window", [str(tmp_path)])
    second = reserve("t.window", [str(tmp_path)])
    assert (Path(first).name, Path(second).name) == ("t.window.json.gz", "t.window-2.json.gz")
    other = tmp_path / "other"
    other.mkdir()
    gone = tmp_path / "gone"  # a place that cannot be written: the next one is used
    assert Path(reserve("t.window", [str(gone), str(other)])).parent == other
    with pytest.raises(OSError):
        reserve("t.window", [str(gone)])


async def test_e_in_the_job_timeline_exports_every_ranks_marked_range(tmp_path, monkeypatch):
    import json
    import zipfile

    from kinetoscope.tui.job.job_timeline import JobTimelineScreen
    from test_tui_job_timeline import JobHost, job_in, ready, write_job

    folder = tmp_path / "job"
    write_job(folder)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    app = JobHost(job_in(folder), name="job")
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot, 3)
        assert isinstance(screen, JobTimelineScreen)
        await pilot.press("e")
        await said(pilot, "Nothing marked to export")
        focused = screen.current()
        # From the job's origin (−50 µs): 990..2,010 µs as recorded, each rank's allreduce.
        focused.cursor_time = 1_040_000 + int(focused.delta)
        await pilot.press("m")
        focused.cursor_time = 2_060_000 + int(focused.delta)
        await pilot.press("m")
        assert screen.marked_bounds() == (1_040_000, 2_060_000)
        assert all(t.marked_range == (1_040_000, 2_060_000) for t in screen.timelines())
        await pilot.press("e")
        message = await said(pilot, "Exported the marked range of every rank")
        await pilot.app.workers.wait_for_complete()
    written = out / "job.window.zip"
    assert f"wrote {written}: Perfetto bundle of 3 ranks" in message
    with zipfile.ZipFile(written) as bundle:
        names = sorted(bundle.namelist())
        assert names == ["perfetto_manifest.json", "rank0.json", "rank1.json", "rank2.json"]
        manifest = json.loads(bundle.read("perfetto_manifest.json"))
        assert "perfetto_manifest" in manifest
        for rank in (0, 1, 2):
            crop = json.loads(bundle.read(f"rank{rank}.json"))
            kernels = [e for e in crop["traceEvents"] if e.get("cat") == "kernel"]
            # Each rank's allreduce is inside the window, as its own clock recorded it.
            assert any(e["args"].get("Collective name") == "allreduce" for e in kernels)
            assert not any(e["args"].get("Collective name") == "barrier" for e in kernels)
