"""The compile view (`c`) and the compiled regions marked on the timeline, driven like a user:
the numbers shown are the compile lens's (TraceSession.compiled), Enter goes to the timeline."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import CORPUS
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import load
from kinetoscope.tui.palette import HelpScreen
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.compile_view import CompileScreen
from kinetoscope.tui.trace.screens import TraceScreen
from test_tui_drilldown import column_index, press, settle, shown_rows

SIZE = (120, 40)
CORPUS_COMPILE = CORPUS / "tracelens" / "torch_compile_triton_trace.json.gz"


def X(name, ts, dur, cat="cpu_op", pid=1, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


def compiled_cpu_events() -> list[dict]:
    """Two steps of a CPU-only run: an eager embedding and topk around a compiled region;
    step 2 recompiles frame 0 (compile id 1). Times in µs."""
    return [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("aten::embedding", 10, 50),
        X("TorchDynamo Cache Lookup", 60, 10),
        X("Torch-Compiled Region: 0/0", 70, 430),
        X("CompiledFunction", 80, 410),
        X("cpp_fused_add_relu_0", 100, 200),
        X("cpp_fused_sum_1", 310, 150),
        X("aten::topk", 600, 200),
        X("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
        X("TorchDynamo Cache Lookup", 1010, 10),
        X("Torch-Compiled Region: 0/1", 1020, 380),
        X("CompiledFunction", 1030, 360),
        X("cpp_fused_add_relu_0", 1040, 300),
        X("aten::topk", 1500, 100),
    ]


@pytest.fixture
def compiled_trace(tmp_path: Path) -> Path:
    path = tmp_path / "compiled.pt.trace.json.gz"
    document = {"schemaVersion": 1, "traceEvents": compiled_cpu_events()}
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    return path


async def open_compile_view(pilot) -> CompileScreen:
    await settle(pilot, TraceScreen)
    return await press(pilot, "c", until=CompileScreen)


def summary_of(screen: CompileScreen) -> str:
    return str(screen.query_one("#compile-summary").render())


@pytest.mark.also_no_color
async def test_compile_view_shows_the_lens_numbers_and_jumps(compiled_trace: Path) -> None:
    result = TraceSession(load(str(compiled_trace))).compiled
    # The lens's own numbers, which the view must show.
    assert [i.name for i in result.eager_islands] == ["aten::topk", "aten::embedding"]
    topk = result.eager_islands[0]
    assert (topk.count, topk.cpu_ns) == (2, 300_000)
    app = KinetoscopeApp(str(compiled_trace))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        timeline = trace_screen.timeline
        # Compiled regions marked on the CPU process's header row.
        assert set(timeline.compiled_spans) == {0}
        starts, ends = timeline.compiled_spans[0]
        origin = timeline.data.origin
        assert starts.tolist() == [70_000, 1_020_000]
        assert ends.tolist() == [500_000, 1_400_000]
        header = timeline.render_line(1).text
        assert "━" in header and "compiled" in header

        screen = await press(pilot, "c", until=CompileScreen)
        summary = summary_of(screen)
        share = round(100 * result.compiled_ns / result.total_ns)
        assert f"Compiled code: {share}% of CPU operator self time" in summary
        assert "2 compiled regions" in summary
        assert "Eager islands: 2 operators outside compiled code (3 calls, 350 µs)" in summary
        assert "Recompiles: frame 0: compile ids 0, 1 (1, 1 calls)" in summary
        assert "Guards: TorchDynamo Cache Lookup 2 calls, 20 µs self" in summary
        assert "cpp (CPU) 3 (2 names" in summary

        # The eager islands, as the lens counts them.
        rows = shown_rows(screen)
        calls = column_index(screen, "calls")
        assert [(r[0].strip(), r[calls].strip()) for r in rows] == [
            ("aten::topk", "2"),
            ("aten::embedding", "1"),
        ]
        # Enter on the first island: its longest instance, selected on the timeline.
        back = await press(pilot, "enter", until=TraceScreen)
        assert back is trace_screen
        assert timeline.selected_row == topk.rows[0]
        assert timeline.data.trace.start[topk.rows[0]] - origin == 600_000

        # S: the steps, with the lens's per-step compiled share.
        screen = await press(pilot, "c", until=CompileScreen)
        await press(pilot, "S")
        rows = shown_rows(screen)
        compiled_col = column_index(screen, "compiled")
        assert [r[0].strip() for r in rows] == ["ProfilerStep#1", "ProfilerStep#2"]
        for row, step in zip(rows, result.steps):
            assert row[compiled_col].strip() == f"{100 * step.share:.0f}%"
        await press(pilot, "down")
        back = await press(pilot, "enter", until=TraceScreen)
        assert timeline.selected_row == result.steps[1].row

        # `?` lists the compile view's keys.
        help_screen = await press(pilot, "question_mark", until=HelpScreen)
        rows = [(key, text) for key, text in help_screen.bindings]
        assert (
            "c",
            "torch.compile: compiled share, eager islands, recompiles, launches, fusion",
        ) in rows
        assert ("── Compile (c)", "") in rows
        assert ("S", "Switch between the eager islands and the per-step table") in rows


@pytest.mark.corpus
@pytest.mark.also_no_color
@pytest.mark.skipif(not CORPUS_COMPILE.exists(), reason="corpus trace missing")
async def test_compile_view_on_the_corpus_triton_trace() -> None:
    result = TraceSession(load(str(CORPUS_COMPILE))).compiled
    app = KinetoscopeApp(str(CORPUS_COMPILE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compile_view(pilot)
        summary = summary_of(screen)
        share = round(100 * result.compiled_ns / result.total_ns)
        assert f"Compiled code: {share}% of GPU kernel time" in summary
        assert "1 compiled region" in summary
        assert "Guards: TorchDynamo Cache Lookup 1 call" in summary
        # Two reductions and two pointwise Triton kernels.
        assert "reduction 2" in summary and "pointwise 2" in summary
        assert "Recompiles: none in the window" in summary
        assert result.eager_islands == ()
        assert "Eager islands: none: every top-level operator ran inside compiled code" in summary
        assert shown_rows(screen) == []
        # The compiled region is marked on its process's header row.
        timeline = pilot.app.screen_stack[-2].timeline
        assert len(timeline.compiled_spans) == 1


CORPUS_VLLM = CORPUS_COMPILE.with_name("vllm_decode_full_graph_execution.json.gz")


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_VLLM.exists(), reason="corpus trace missing")
async def test_compile_view_says_what_graph_replay_makes_partial() -> None:
    result = TraceSession(load(str(CORPUS_VLLM))).compiled
    assert result.replay is not None
    app = KinetoscopeApp(str(CORPUS_VLLM))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compile_view(pilot)
        summary = " ".join(summary_of(screen).split())
        assert "Graph replay: 1 graph launch replays 421 GPU activities" in summary
        for note in result.replay.partial:
            assert f"partial: {' '.join(note.split())}" in summary
        assert "1 graph launch replaying 421 (421.0 per launch)" in summary


def test_compiled_band_cells_and_merged_spans() -> None:
    import numpy as np
    from kinetoscope.tui.data.viewdata import merge_spans
    from kinetoscope.tui.widgets.render import band_cells

    # Overlapping and touching spans merge; a nested one disappears into its outer one.
    starts, ends = merge_spans(np.array([50, 0, 10, 30, 90]), np.array([60, 20, 15, 50, 95]))
    assert starts.tolist() == [0, 30, 90] and ends.tolist() == [20, 60, 95]
    # Ten cells of 10 ns from 0: a span reaching into a cell marks it.
    band = band_cells(starts, ends, 0.0, 10.0, 10)
    assert band.tolist() == [1, 1, 0, 1, 1, 1, 0, 0, 0, 1]
    # Off screen: nothing marked; and the cost is per cell, whatever the number of spans.
    assert not band_cells(starts, ends, 1000.0, 10.0, 10).any()
    many = np.arange(0, 10_000_000, 10, dtype=np.int64)
    assert (
        band_cells(many, many + 5, 0.0, 1.0, 20).tolist()
        == [True] * 5 + [False] * 5 + [True] * 5 + [False] * 5
    )


@pytest.mark.also_no_color
async def test_compile_view_says_graph_breaks_and_compiling_in_the_window(tmp_path: Path) -> None:
    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("TorchDynamo Cache Lookup", 5, 5),
        X("Torch-Compiled Region: 0/0", 10, 200),
        X("aten::nonzero", 220, 50),  # the op that breaks the graph
        X("TorchDynamo Cache Lookup", 275, 5),
        X("Torch-Compiled Region: 1/0", 280, 300),
        X("compile_fx_inner (dynamo_timed)", 290, 250),
    ]
    path = tmp_path / "breaks.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    result = TraceSession(load(str(path))).compiled
    assert [b.frames for b in result.likely_graph_breaks] == [(0, 1)]
    assert (result.compiling.count, result.compiling.ns) == (1, 250_000)
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compile_view(pilot)
        summary = " ".join(summary_of(screen).split())
        assert "Likely graph break: ProfilerStep#1 runs compiled regions of frames 0, 1" in summary
        assert "Compiling in the window: 1 event, 250 µs" in summary
        assert "2 compiled regions · 2 frames" in summary
        assert [r[0].strip() for r in shown_rows(screen)] == ["aten::nonzero"]


CORPUS_SGLANG = CORPUS_COMPILE.with_name("sglang_decode_capture_bs_32_rank0.json.gz")


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_SGLANG.exists(), reason="corpus trace missing")
async def test_compile_view_on_a_graph_capture_without_replay() -> None:
    result = TraceSession(load(str(CORPUS_SGLANG))).compiled
    replay = result.replay
    assert replay is not None and replay.launches == 0 and replay.captures >= 1
    app = KinetoscopeApp(str(CORPUS_SGLANG))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compile_view(pilot)
        summary = " ".join(summary_of(screen).split())
        assert "Compiled code: none" in summary
        assert "Graph replay:" not in summary
        assert (
            f"Graph capture: {replay.captures} graph capture"
            f"{'' if replay.captures == 1 else 's'} inside the window "
            f"({replay.captured_launches:,} launch calls recorded, none run)"
        ) in summary
        for note in replay.partial:
            assert f"partial: {' '.join(note.split())}" in summary
