"""Tables as CSV: the viewer's `W` on every table screen and `kinetoscope summary --csv DIR`
write the same headless tables (kinetoscope/tables.py); each file is read back with the csv
module and compared cell by cell with the analysis's own numbers (exact: integer ns as µs with
3 decimals), in the order the screen shows its rows."""

from __future__ import annotations

import csv
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import load

from kinetoscope import tables
from kinetoscope.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"
CORPUS = ROOT.parent / "shared" / "corpus"
SIZE = (120, 40)
# Commas, quotes, a line break, a carriage return, a tab, a NUL and non-ASCII: csv must quote.
HOSTILE = 'aten::evil,"name"\nline two\r\tµ\x00 end'

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


def us(ns) -> str:
    """What a duration cell must hold: exact decimal µs of integer (or rounded mean) ns."""
    ns = round(Fraction(ns)) if not isinstance(ns, int) else ns
    return f"{'-' if ns < 0 else ''}{abs(ns) // 1000}.{abs(ns) % 1000:03d}"


def column(header: list[str], rows: list[list[str]], name: str) -> list[str]:
    index = header.index(name)
    return [r[index] for r in rows]


# -- the cells themselves ------------------------------------------------------------------------


def test_us_text_is_exact_at_any_size():
    assert tables.us_text(0) == "0.000"
    assert tables.us_text(1) == "0.001"
    assert tables.us_text(-1) == "-0.001"
    assert tables.us_text(-1500) == "-1.500"
    # 2^62 ns: a float of µs would lose the last digits.
    assert tables.us_text(2**62) == "4611686018427387.904"
    assert tables.us_text(np.int64(123456789)) == "123456.789"
    assert tables.us_text(2.5) == "0.002"  # a mean: nearest ns, halves to even
    assert tables.us_text(Fraction(7, 2)) == "0.004"
    assert tables.cell_text(tables.US, float("nan")) == ""
    assert tables.cell_text(tables.INT, tables.NO_VALUE) == ""
    assert tables.cell_text(tables.FLOAT, 0.1) == "0.1"


# -- the viewer: W on each table screen ----------------------------------------------------------


async def settle(pilot, kind, timeout: float = 20.0):
    """Wait for a screen of `kind`, then for its workers; the screen."""
    deadline = time.monotonic() + timeout
    while not isinstance(pilot.app.screen, kind):
        assert time.monotonic() < deadline, f"{kind.__name__} never came: {pilot.app.screen!r}"
        await pilot.pause(0.02)
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    return pilot.app.screen


async def save(pilot, folder: Path, timeout: float = 20.0) -> Path:
    """Press W on the screen in front; the CSV file it wrote (the one new file in `folder`)."""
    before = set(folder.glob("*.csv"))
    await pilot.press("W")
    deadline = time.monotonic() + timeout
    while True:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        new = set(folder.glob("*.csv")) - before
        if new and any("Saved" in str(n.message) for n in pilot.app._notifications):
            break
        assert time.monotonic() < deadline, "W wrote no file"
        await pilot.pause(0.05)
    assert len(new) == 1, new
    path = new.pop()
    said = [str(n.message) for n in pilot.app._notifications]
    assert any(str(path) in m for m in said), said  # the notification names the file
    return path


def view_rows(screen) -> list[int]:
    """The whole-table row ids of the rows the screen shows, in its order."""
    model = screen.table.model
    view = screen.table.view
    return [int(r) for r in (view if model.source_rows is None else model.source_rows[view])]


def shown_texts(screen, title: str) -> list[str]:
    index = [c.title for c in screen.table.model.columns].index(title)
    return [row[index] for row in screen.table.visible_texts()]


def session_of(path: Path) -> TraceSession:
    return TraceSession(load(str(path), write_cache=False))


@pytest.fixture
def summary_dir(tmp_path_factory) -> Path:
    """`kinetoscope summary SAMPLE --csv DIR` once for the module's tests."""
    folder = tmp_path_factory.mktemp("summary") / "csv"
    assert main(["summary", str(SAMPLE), "--csv", str(folder)]) == 0
    return folder


def summary_file(folder: Path, table: str) -> Path:
    return folder / f"{tables.trace_stem(str(SAMPLE))}.{table}.csv"


async def test_operators_saved_as_shown_and_as_the_summary(tmp_path, monkeypatch, summary_dir):
    from kinetoscope.tui.app import KinetoscopeApp
    from kinetoscope.tui.operators import OperatorsScreen
    from kinetoscope.tui.screens import TraceScreen

    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        # As first shown: the same file as the summary's, byte for byte.
        first = await save(pilot, tmp_path)
        assert first.name == f"{tables.trace_stem(str(SAMPLE))}.operators.csv"
        assert first.read_bytes() == summary_file(summary_dir, "operators").read_bytes()
        # Filtered and sorted by count, smallest first: those rows, in that order.
        for key in "aten":
            await pilot.press(key)
        await pilot.press("enter")
        screen.table.sort_by(2, descending=False)
        await pilot.pause()
        second = await save(pilot, tmp_path)
        assert second.name.endswith(".operators-2.csv")  # the first one is not overwritten
        header, rows = read_csv(second)
        shown = view_rows(screen)
        assert 0 < len(rows) == len(shown) < screen.result.table.count.size
        table = screen.result.table
        strings = screen.data.trace.strings
        assert header[:8] == [
            "name",
            "cat",
            "count",
            "total_us",
            "self_us",
            "gpu_self_us",
            "gpu_total_us",
            "self_share",
        ]
        for cells, g in zip(rows, shown):
            assert cells[0] == strings[int(table.groups.name[g])]
            assert cells[1] == strings[int(table.groups.cat[g])]
            assert cells[2:7] == [
                str(int(table.count[g])),
                us(int(table.incl[g])),
                us(int(table.excl[g])),
                us(int(table.gpu_self[g])),
                us(int(table.gpu_total[g])),
            ]
            assert float(cells[7]) == float(table.excl[g]) / float(table.excl.sum())
            assert "aten" in cells[0].lower() or "aten" in cells[1].lower()
        assert column(header, rows, "name") == shown_texts(screen, "operator")
        counts = [int(c) for c in column(header, rows, "count")]
        assert counts == sorted(counts)
