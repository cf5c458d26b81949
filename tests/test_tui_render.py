"""Timeline drawing without an app: cells, shading, names, safe text, time formats."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kinetoscope.analysis.units import fmt_duration, fmt_tick, tick_step
from kinetoscope.parser import loads
from kinetoscope.tui.data.viewdata import Level, build_view_data
from kinetoscope.tui.widgets.render import (
    SHADE_EMPTY,
    SHADE_FULL,
    SHADE_LIGHT,
    cells_to_segments,
    compute_cells,
    shades,
)
from test_tui_sample import EVIL_NAME, MARKUP_NAME, sample_trace

from kinetoscope.present.safe_text import clean, fit


def make_level(starts, ends) -> Level:
    start = np.asarray(starts, dtype=np.int64)
    end = np.asarray(ends, dtype=np.int64)
    return Level(
        rows=np.arange(len(start), dtype=np.int64),
        start=start,
        end=end,
        end_max=np.maximum.accumulate(end) if len(end) else end,
        cum_dur=np.concatenate(([0], np.cumsum(end - start))),
        slot=np.ones(len(start), dtype=np.uint8),
    )


def brute_force(level: Level, t0: float, npc: float, width: int):
    edges = np.floor(t0 + np.arange(width + 1) * npc).astype(np.int64)
    busy = []
    for c in range(width):
        lo, hi = edges[c], edges[c + 1]
        cover = np.clip(np.minimum(level.end, hi) - np.maximum(level.start, lo), 0, None)
        busy.append(cover.sum() / max(hi - lo, 1))
    return np.clip(np.array(busy), 0, 1)


def test_single_span_fills_its_cells_and_nothing_else():
    level = make_level([100], [500])
    cells = compute_cells(level, 0, 100, 8)
    assert cells.entry.tolist() == [-1, 0, 0, 0, 0, -1, -1, -1]
    assert shades(cells).tolist()[1:5] == [SHADE_FULL] * 4
    assert shades(cells)[0] == SHADE_EMPTY


def test_busy_fraction_matches_brute_force_on_random_slices():
    rng = np.random.default_rng(5)
    gaps = rng.integers(0, 50, 3000)
    durs = rng.integers(1, 40, 3000)
    starts = np.cumsum(gaps + np.concatenate(([0], durs[:-1])))
    level = make_level(starts, starts + durs)
    for t0, npc, width in ((0, 7.3, 200), (1234.5, 300.0, 120), (-500, 1000.0, 80), (9e4, 2.0, 50)):
        cells = compute_cells(level, t0, npc, width)
        assert np.allclose(cells.busy, brute_force(level, t0, npc, width))


def test_dominant_slice_is_the_one_covering_most_of_the_cell():
    # Cell [0, 100): slice 0 covers 10, slice 1 covers 60, slice 2 covers 20.
    level = make_level([0, 20, 80], [10, 80, 120])
    cells = compute_cells(level, 0, 100, 1)
    assert cells.entry[0] == 1
    assert cells.count[0] == 3


def test_dense_cell_is_shaded_light_not_full():
    starts = np.arange(0, 1000, 10)
    level = make_level(starts, starts + 1)  # 10 % busy
    cells = compute_cells(level, 0, 1000, 1)
    assert cells.busy[0] == pytest.approx(0.1)
    assert shades(cells)[0] == SHADE_LIGHT


def test_names_are_drawn_inside_wide_spans_only():
    level = make_level([0, 1000], [900, 1010])
    cells = compute_cells(level, 0, 50, 24)
    names = {0: "aten::mm", 1: "tiny"}
    text = "".join(s.text for s in cells_to_segments(cells, level, names.__getitem__))
    assert " aten::mm" in text
    assert "tiny" not in text
    assert len(text) == 24


def test_control_characters_and_markup_stay_literal():
    assert "\x1b" not in clean(EVIL_NAME)
    assert "\x07" not in clean(EVIL_NAME)
    assert clean(EVIL_NAME).startswith("␛[31mEVIL")
    assert clean(MARKUP_NAME) == MARKUP_NAME
    assert clean("a\u202eb\x85c") == "a\ufffdb\ufffdc"
    assert fit("abcdef", 4) == "abc…"
    assert fit("ab", 4) == "ab  "


def test_segments_of_hostile_names_hold_no_escape_bytes():
    trace = loads(json.dumps(sample_trace()).encode())
    data = build_view_data(trace)
    loader = next(lane for lane in data.lanes if "loader" in lane.label)
    level = loader.levels[0]
    cells = compute_cells(level, 0, 5_000, 200)  # 5 µs per cell: both names fit
    segments = cells_to_segments(cells, level, trace.name_of)
    text = "".join(s.text for s in segments)
    assert "\x1b" not in text and "\x07" not in text
    assert "␛[31mEVIL" in text
    assert "[bold]not markup[/bold] [memory]" in text


def test_time_formats():
    assert fmt_duration(0) == "0 ns"
    assert fmt_duration(1500) == "1.5 µs"
    assert fmt_duration(2_500_000_000) == "2.5 s"
    assert tick_step(1000) == 20_000
    assert fmt_tick(40_000, 20_000) == "40µs"
    assert fmt_tick(12_340_000_000, 10_000_000) == "12.34s"


def test_view_data_lanes_levels_and_gaps():
    trace = loads(json.dumps(sample_trace()).encode())
    data = build_view_data(trace)
    labels = [g.label for g in data.groups]
    assert labels == ["python 100", "GPU 0 · Test GPU"]
    main = data.lanes[data.groups[0].lanes[0]]
    assert main.label == "python 100 / thread 100 (python)"
    # ProfilerStep > python > aten::linear > aten::mm > cudaLaunchKernel
    assert len(main.levels) == 5
    gpu_labels = [data.lanes[i].label for i in data.groups[1].lanes]
    assert gpu_labels == ["GPU 0 / stream 7", "GPU 0 / stream 13"]
    lengths = (data.gaps.end - data.gaps.start).tolist()
    assert lengths == [500_000, 40_000, 5, 19_995]
    assert [data.gap_cause(i) for i in range(4)] == [
        "host_wait",
        "host_wait",
        "kernel_wait",
        "kernel_wait",
    ]
