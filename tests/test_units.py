"""The one module that writes durations and sizes (analysis/units.py), and the summary's tables
following its rules: table cells with three decimals (zeros kept), prose without trailing zeros,
sizes in binary units with two decimals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.analysis.units import (
    fmt_bytes,
    fmt_duration,
    fmt_ms,
    fmt_percent,
    fmt_table_time,
    fmt_tick,
    plural,
    tick_step,
    us,
)
from kinetoscope.parser import load

from kinetoscope.present.report_summary import summary_tables, tsv

TRACE = (
    Path(__file__).resolve().parent.parent
    / "sample_traces"
    / "synthetic_gpu_training.pt.trace.json.gz"
)
DURATION = re.compile(r"[-+]?\d+(?:,\d{3})*(\.\d+)? (s|ms|µs|ns)\b")
SIZE = re.compile(r"[-+]?\d+(?:,\d{3})*(\.\d+)? (B|KiB|MiB|GiB)\b")


@pytest.mark.parametrize(
    ("ns", "prose", "cell", "cell_unaligned"),
    [
        (0, "0 ns", "0 ns", "0 ns"),
        (7, "7 ns", "7 ns", "7 ns"),
        (1_500, "1.5 µs", "1.500 µs", "1.500 µs"),
        (10_000, "10 µs", "10.000 µs", "10.000 µs"),
        (845_123_000, "845.123 ms", "845.123 ms", "845.123 ms"),
        (3_210_000, "3.21 ms", "3.210 ms", "3.210 ms"),
        (2_500_000_000, "2.5 s", "2.500 s ", "2.500 s"),
        (-1_500, "-1.5 µs", "-1.500 µs", "-1.500 µs"),
        (12_345 * 10**9, "12345 s", "12,345.0 s ", "12,345.0 s"),
        (float("nan"), "?", "?", "?"),
    ],
)
def test_durations_in_prose_and_in_table_cells(ns, prose, cell, cell_unaligned):
    assert fmt_duration(ns) == prose
    assert fmt_table_time(ns) == cell
    assert fmt_table_time(ns, align_units=False) == cell_unaligned


def test_other_units():
    assert fmt_duration(1_234_567, 2) == "1.23 ms"  # the per-cell scale: two decimals at most
    assert fmt_ms(12_345_678) == "12.35 ms" and fmt_ms(500) == "0.00 ms"
    assert fmt_ms(15_942_420_000) == "15,942.42 ms"  # was "15942.42 ms" beside "1,760 copies"
    assert fmt_tick(1_500_000, tick_step(10_000)) == "1.5ms"
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 << 30) == "3.00 GiB"
    assert fmt_bytes(-(3 << 20)) == "-3.00 MiB" and fmt_bytes(1536, signed=True) == "+1.50 KiB"
    assert fmt_percent(0.454) == "45%"
    assert plural(1, "step") == "1 step" and plural(1234, "row") == "1,234 rows"
    assert us(1_234_567) == 1234.567 and us(None) is None


@pytest.fixture(scope="module")
def report() -> tuple[dict, dict[str, list[list[str]]]]:
    """The sample's summary document and its tables as {short title: rows of cells}."""
    session = TraceSession(load(str(TRACE), write_cache=False))
    document = build_summary(session)
    tables: dict[str, list[list[str]]] = {}
    for block in tsv(summary_tables(session, document)).split("\n\n"):
        lines = block.strip("\n").splitlines()
        if lines and lines[0].startswith("# ") and len(lines) > 1:
            tables[lines[0][2:]] = [line.split("\t") for line in lines[1:]]
    return document, tables


def test_summary_table_durations_keep_three_decimals(report):
    """`5 µs` above `2.647 ms` read as if measured less precisely: every duration in a table
    cell has three decimals (whole ns excepted), as in the viewer's tables."""
    _, tables = report
    seen = 0
    for title, rows in tables.items():
        if title == "Findings":  # sentences, written as the document's messages (fmt_ms)
            continue
        # "What to fix": its `what` column (3) holds the findings' titles, sentences too.
        skip = {3} if title.startswith("What to fix") else set()
        for row in rows[1:]:
            for cell in (c for i, c in enumerate(row) if i not in skip):
                for match in DURATION.finditer(cell):
                    seen += 1
                    if match.group(2) != "ns":
                        assert match.group(1) and len(match.group(1)) == 4, (title, cell)
    assert seen > 100


def test_summary_sizes_have_one_format(report):
    """Both memory-peak tables write a peak the same way (they used to say `530.0 MiB` and
    `530.00 MiB`, `1,024.0 MiB` for 1 GiB)."""
    document, tables = report
    sizes = [
        match.group(0)
        for rows in tables.values()
        for row in rows[1:]
        for cell in row
        for match in SIZE.finditer(cell)
    ]
    assert sizes and all(fmt_bytes(_value(s)) == s.lstrip("+") for s in sizes), sizes
    peak = document["memory"][0]["peak_allocated_bytes"]
    peaks = [t for t in tables if t.startswith("Memory peaks")]
    assert len(peaks) == 2
    for title in peaks:
        assert any(fmt_bytes(peak) in row for row in tables[title]), title


def test_summary_memory_peaks_name_their_devices(report):
    """The memory peaks table named a device by Kineto's raw numbers (`0`, `-1`; `1`, `0`);
    it now says `CPU`, `CUDA 0` like the table of when the peaks were, row for row."""
    document, tables = report
    peaks = tables["Memory peaks ([memory] events)"]
    when = tables["Memory peaks: when, in which operator and step"]
    assert peaks[0][0] == "device" and "device type" not in peaks[0]
    names = [row[0] for row in peaks[1:]]
    assert names == [row[0] for row in when[1:]]
    assert names == ["CUDA 0"] and [
        (m["device_type"], m["device_id"]) for m in document["memory"]
    ] == [(1, 0)]  # the JSON keeps the numbers (the spec)


def _value(size: str) -> float:
    number, unit = size.split(" ")
    scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
    return float(number.replace(",", "")) * scale
