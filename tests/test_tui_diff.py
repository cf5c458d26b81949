"""The diff viewer (issue 16): `kinetoscope diff BASE NEW` on a terminal. Two traces built here
(times in µs) with known changes: a kernel twice as slow, one kernel removed, one added; the
new trace recorded later and with more time before its first step, so that only aligning at
the paired step's start lines the two up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CORPUS as CORPUS_ROOT
from kinetoscope.tui.diff.diff_app import DiffApp
from kinetoscope.tui.diff.diff_table import DiffScreen
from kinetoscope.tui.diff.diff_timeline import DiffPairScreen, HalfTraceScreen
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.widgets.theme import palette_of

SIZE = (120, 40)
STEP_US = 1000  # the base's steps; the new trace's are 10 % longer
STEPS = 2


def X(name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def kernel(name: str, ts: float, dur: float, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": 7, "correlation": corr},
    }


def trace_events(new: bool) -> list[dict]:
    """Two steps; in each, an operator launching a kernel for each of: gemm (100 µs in the base,
    200 in the new trace), relu (50 both), old_kernel (base only), new_kernel (new only)."""
    origin = 5_000_000 if new else 1_000_000
    lead = 500 if new else 100  # before the first step
    events = [X("setup", origin, 20)]
    corr = 0
    for step in range(STEPS):
        t0 = origin + lead + step * 2 * STEP_US
        length = STEP_US * 1.1 if new else STEP_US
        events.append(X(f"ProfilerStep#{step + 1}", t0, length, cat="user_annotation"))
        work = [("aten::mm", "gemm_kernel", 200 if new else 100), ("aten::relu", "relu_kernel", 50)]
        work.append(
            ("aten::new_op", "new_kernel", 40) if new else ("aten::old_op", "old_kernel", 30)
        )
        gpu_at = t0 + 100
        for i, (op, name, dur) in enumerate(work):
            corr += 1
            at = t0 + 10 + 60 * i
            events.append(X(op, at, 50))
            events.append(X("cudaLaunchKernel", at + 5, 10, cat="cuda_runtime", correlation=corr))
            events.append(kernel(name, gpu_at, dur, corr))
            gpu_at += dur + 20
    return events


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, str]:
    paths = []
    for side, new in (("base", False), ("new", True)):
        path = tmp_path / f"{side}.json"
        path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": trace_events(new)}))
        paths.append(str(path))
    return paths[0], paths[1]


async def diff_screen(pilot: Any) -> DiffScreen:
    for _ in range(400):
        await pilot.pause(0.05)
        if isinstance(pilot.app.screen, DiffScreen):
            await pilot.pause()
            return pilot.app.screen
    raise AssertionError(f"no diff screen: {pilot.app.exit_message or pilot.app.screen}")


def column(screen: DiffScreen, title: str) -> list[str]:
    table = screen.table
    index = [c.title for c in table.model.columns].index(title)
    return [row[index] for row in table.visible_texts()]


def windows(screen: DiffPairScreen) -> set[tuple[float, float]]:
    """Each half's window in step time (start since its step's start, ns per cell)."""
    return {(round(t.view_start - t.delta), t.ns_per_cell) for t in screen.timelines()}


@pytest.mark.also_no_color
async def test_the_table_shows_the_kernels_by_largest_change(pair):
    app = DiffApp(*pair)
    async with app.run_test(size=SIZE) as pilot:
        screen = await diff_screen(pilot)
        assert column(screen, "name") == ["gemm_kernel", "new_kernel", "old_kernel", "relu_kernel"]
        assert column(screen, "Δ") == ["+200.000 µs", "+80.000 µs", "-60.000 µs", "0 ns"]
        assert column(screen, "Δ %") == ["+100.0", "new", "-100.0", "+0.0"]
        assert column(screen, "±") == ["", "added", "removed", ""]
        # twice as slow, as often: all of the Δ is slower calls
        assert column(screen, "slower calls")[0] == "+200.000 µs"
        assert column(screen, "more calls")[0] == "0 ns"
        verdict = str(screen.query_one("#diff-verdict").render())
        assert "REGRESSION" in verdict
        # T: the operators
        await pilot.press("T")
        names = column(screen, "name")
        assert names[0] == "ProfilerStep#…"  # +100 µs a step (names normalised)
        assert {"aten::new_op", "aten::old_op", "aten::mm"} <= set(names)
        assert column(screen, "Δ")[0] == "+200.000 µs"
        await pilot.press("T")
        # D: regressions first, then improvements first (the worst regression: D, Enter)
        await pilot.press("D")
        assert column(screen, "name") == ["gemm_kernel", "new_kernel", "relu_kernel", "old_kernel"]
        await pilot.press("D")
        assert column(screen, "name")[0] == "old_kernel"
        await pilot.press("D")
        assert column(screen, "name")[0] == "gemm_kernel"
        # S: the step pair the timelines open at
        pairs = screen.query_one("#diff-pairs")
        assert "[#1 +10.0] #2 +10.0" in str(pairs.render())
        await pilot.press("S")
        assert screen.pair == 1 and "#1 +10.0 [#2 +10.0]" in str(pairs.render())
        await pilot.press("enter")
        await pilot.pause(0.2)
        for timeline in app.screen.timelines():
            assert (
                timeline.delta == int(timeline.data.session.steps.start[1]) - timeline.data.origin
            )
        await pilot.press("escape", "S")
        assert screen.pair == 0
        # typing filters
        await pilot.press("r", "e", "l", "u", "enter")
        assert column(screen, "name") == ["relu_kernel"]
        await pilot.press("escape")


@pytest.mark.also_no_color
async def test_enter_opens_both_timelines_aligned_at_the_step_start(pair):
    app = DiffApp(*pair)
    async with app.run_test(size=SIZE) as pilot:
        screen = await diff_screen(pilot)
        await pilot.press("enter")  # the worst change: gemm_kernel, twice as slow
        await pilot.pause(0.2)
        pair_screen = app.screen
        assert isinstance(pair_screen, DiffPairScreen)
        heading = str(pair_screen.query_one("#diff-pair-heading").render())
        assert "gemm_kernel · Δ +200 µs (+100.0 %)" in heading
        base, new = pair_screen.timelines()
        for timeline, origin, lead in ((base, 1_000_000, 100), (new, 5_000_000, 500)):
            data = timeline.data
            step = int(data.session.steps.start[0])
            assert step == (origin + lead) * 1000
            assert timeline.delta == step - data.origin  # 0 on the ruler: the step's start
            # the first gemm_kernel of the step selected, with the highlight on its name
            row = timeline.selected_row
            assert data.trace.name_of(row) == "gemm_kernel"
            assert int(data.trace.start[row]) == step + 100_000
            assert timeline.highlight_names[data.trace.name[row]]
        # one window, in time since the step started: the step from (just before) its start
        assert len(windows(pair_screen)) == 1
        start, per_cell = windows(pair_screen).pop()
        assert -0.1 * STEP_US * 1000 < start <= 0
        assert per_cell * base.cells_width >= 1.1 * STEP_US * 1000
        # w in the base half zooms the new one too; Tab, then s and d in the new half
        await pilot.press("w")
        await pilot.pause()
        assert len(windows(pair_screen)) == 1
        assert windows(pair_screen).pop()[1] == pytest.approx(per_cell / 2)
        await pilot.press("tab")
        assert pair_screen.focused is new
        await pilot.press("s", "s", "d")
        await pilot.pause()
        assert len(windows(pair_screen)) == 1
        assert windows(pair_screen).pop()[1] == pytest.approx(per_cell * 2)
        # n: the next instance in both (the second step's gemm_kernel)
        await pilot.press("n")
        await pilot.pause()
        for timeline in (base, new):
            step = int(timeline.data.session.steps.start[1])
            assert int(timeline.data.trace.start[timeline.selected_row]) == step + 100_000
        # ? lists the pair's keys first
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = [str(k) for k, _ in app.screen.bindings]
        assert keys[0].startswith("── Both timelines")
        await pilot.press("escape")
        # O: the focused half (new) alone in the single-trace screen; q back; Esc to the table
        await pilot.press("O")
        await pilot.pause()
        assert isinstance(app.screen, HalfTraceScreen)
        assert app.screen.data is new.data
        await pilot.press("q")
        await pilot.press("escape")
        assert app.screen is screen


@pytest.mark.also_no_color
async def test_the_added_kernel_is_marked_on_the_new_timeline(pair):
    app = DiffApp(*pair)
    async with app.run_test(size=SIZE) as pilot:
        await diff_screen(pilot)
        await pilot.press("down", "enter")  # new_kernel, only in the new trace
        await pilot.pause(0.2)
        pair_screen = app.screen
        assert isinstance(pair_screen, DiffPairScreen)
        base, new = pair_screen.timelines()
        trace = new.data.trace
        added = [trace.name_of(int(r)) for r in new.half.marked]
        removed = [base.data.trace.name_of(int(r)) for r in base.half.marked]
        assert added == ["new_kernel"] * STEPS or added == ["new_kernel"]
        assert removed == ["old_kernel"] * len(removed) and removed
        assert "added" in str(pair_screen.query_one("#diff-title-1").render())
        # only the new trace has it: the new half has the focus; the status line says, in
        # words, that its selected instance is an added kernel
        assert pair_screen.focused is new
        status = pair_screen.query_one("#diff-pair-status")
        assert " · new · new_kernel 40 µs ADDED" in str(status.render())
        await pilot.press("tab")  # the base has none: nothing selected there
        await pilot.pause()
        assert pair_screen.focused is base
        assert " · base · Tab" in str(status.render())
        # its cells are drawn in the "added" colour, on the GPU lane's row
        row = int(new.half.marked[0])
        new.selected_row = -1  # a selected slice keeps its own style
        new.highlight_names = None
        await pilot.pause()
        lane = next(
            i
            for i, r in enumerate(new.rows)
            if not r.is_header and r.lane == new.data.row_lane[row]
        )
        column = new.column_of(new.data.rel_start(row) + 1) + new.label_width + 1
        strip = new.render_line(lane + 1 - int(new.scroll_offset.y))
        cells = [(seg.text, seg.style) for seg in strip for _ in seg.text]
        colour = palette_of(new).style("ink", "info", bold=True).bgcolor
        assert cells[column][1].bgcolor == colour


async def test_a_missing_file_says_which_side(pair, tmp_path):
    app = DiffApp(pair[0], str(tmp_path / "nope.json"))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if app.exit_message:
                break
        assert app.exit_message and app.exit_message.startswith("new: ")


def test_instances_are_the_rows_groups(pair):
    """The highlighted instances are those of the row's merged groups, in time order."""
    from kinetoscope.analysis.diff import diff_sessions
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.parser import load
    from kinetoscope.tui.diff.diff_table import group_instances

    base, new = (TraceSession(load(p)) for p in pair)
    diff = diff_sessions(base, new)
    gemm = next(g for g in diff.kernels if g.name == "gemm_kernel")
    rows = group_instances(new, "kernel", gemm.new_groups)
    assert [new.trace.name_of(int(r)) for r in rows] == ["gemm_kernel"] * STEPS
    assert np.all(np.diff(new.trace.start[rows]) > 0)


def test_the_command_opens_the_viewer_on_a_terminal_and_prints_the_text_off_one(
    pair, capsys, monkeypatch
):
    """`kinetoscope diff BASE NEW`: the viewer on a terminal; the text form off one, or when
    an output (--json, --format, --width) or an exit status (--fail-above) is asked for."""
    from kinetoscope.commands import view as viewer
    from kinetoscope.commands.cli import main

    assert main(["diff", *pair]) == 0  # the test's stdout is not a terminal
    assert "REGRESSION" in capsys.readouterr().out
    opened: list[tuple] = []
    monkeypatch.setattr(viewer, "terminal_problem", lambda: None)
    monkeypatch.setattr(viewer, "run_diff_view", lambda *a, **k: opened.append((a, k)) or 0)
    assert main(["diff", *pair, "--threshold", "20"]) == 0
    assert opened == [(pair, {"threshold_pct": 20.0, "steps": None, "templates": False})]
    for printed in (["--json"], ["--format", "md"], ["--width", "100"], ["--fail-above", "50"]):
        assert main(["diff", *pair, *printed]) == 0
        assert capsys.readouterr().out
    assert len(opened) == 1


async def test_with_no_step_pair_the_timelines_show_the_whole_traces(pair):
    """--steps that picks none of the common steps: the timelines start at each trace's
    start, nothing marked."""
    from kinetoscope.analysis.diff import DiffOptions

    app = DiffApp(*pair, options=DiffOptions(steps=[9]))
    async with app.run_test(size=SIZE) as pilot:
        screen = await diff_screen(pilot)
        assert not screen.diff.pairs and not screen.table.row_count
        await pilot.press("B")  # both timelines, no row
        await pilot.pause(0.2)
        assert isinstance(app.screen, DiffPairScreen)
        for timeline in app.screen.timelines():
            assert timeline.delta == 0
            assert not len(timeline.half.marked)


BERT = CORPUS_ROOT / "tracelens"


@pytest.mark.also_no_color
async def test_the_same_model_on_two_gpu_vendors():
    """bert-small on an H100 and on an MI300: the table marks the kernels with no counterpart,
    and Enter on the first shows its instances on the trace that has them."""
    pair = [
        BERT / f"{gpu}_gaunernst_bert-small-uncased__1016001.json.gz" for gpu in ("h100", "mi300")
    ]
    if not all(p.is_file() for p in pair):
        pytest.skip("../shared/corpus is absent")
    app = DiffApp(*(str(p) for p in pair))
    async with app.run_test(size=SIZE) as pilot:
        screen = await diff_screen(pilot)
        assert "INCONCLUSIVE" in str(screen.query_one("#diff-verdict").render())
        marks = column(screen, "±")
        assert "added" in marks and "removed" in marks and "" in marks
        added = marks.index("added")
        await pilot.press(*["down"] * added, "enter")
        await pilot.pause(0.3)
        pair_screen = app.screen
        assert isinstance(pair_screen, DiffPairScreen)
        base, new = pair_screen.timelines()
        assert not len(pair_screen.instances[0]) and len(pair_screen.instances[1])
        assert pair_screen.focused is new and new.selected_row >= 0
        assert len(new.half.marked) and len(base.half.marked)
