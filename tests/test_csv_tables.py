"""Tables as CSV: the viewer's `W` on every table screen and `kinetoscope summary --csv DIR`
write the same headless tables (kinetoscope/present/tables.py); each file is read back with the csv
module and compared cell by cell with the analysis's own numbers (exact: integer ns as µs with
3 decimals), in the order the screen shows its rows."""

from __future__ import annotations

import csv
import json
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.idle import CAUSES
from kinetoscope.analysis.rules import cause_members
from kinetoscope.parser import load
from pilot_helpers import settle

from kinetoscope.commands.cli import main
from kinetoscope.present import tables

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"
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
    if isinstance(ns, Fraction):  # a mean: as the summary JSON's mean_us
        return f"{round(ns.numerator / (1000 * ns.denominator), 3):.3f}"
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
    assert tables.us_text(2.5) == "0.002"  # a float of ns: the nearest ns, halves to even
    # A mean: as the summary JSON's mean_us, round(total / (1000 * count), 3).
    assert tables.us_text(Fraction(2749960, 16)) == f"{round(2749960 / 16000, 3):.3f}"
    assert tables.us_text(Fraction(7, 2)) == "0.004"
    assert tables.cell_text(tables.US, float("nan")) == ""
    assert tables.cell_text(tables.INT, tables.NO_VALUE) == ""
    assert tables.cell_text(tables.FLOAT, 0.1) == "0.1"


# -- the viewer: W on each table screen ----------------------------------------------------------


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


@pytest.fixture(scope="module")
def summary_dir(tmp_path_factory) -> Path:
    """`kinetoscope summary SAMPLE --csv DIR` once for the module's tests."""
    folder = tmp_path_factory.mktemp("summary") / "csv"
    assert main(["summary", str(SAMPLE), "--csv", str(folder)]) == 0
    return folder


def summary_file(folder: Path, table: str) -> Path:
    return folder / f"{tables.trace_stem(str(SAMPLE))}.{table}.csv"


async def test_operators_saved_as_shown_and_as_the_summary(tmp_path, monkeypatch, summary_dir):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

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
        await pilot.press("down")  # back to the table (Enter would open the row)
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
        # No filter, one category (C): only its rows.
        await pilot.press("escape")  # clears the filter
        screen.set_category(strings.index("cpu_op"))
        await pilot.pause()
        assert not screen.table.pattern
        third = await save(pilot, tmp_path)
        header, rows = read_csv(third)
        assert 0 < len(rows) == len(view_rows(screen)) < len(table)
        assert set(column(header, rows, "cat")) == {"cpu_op"}
        assert column(header, rows, "name") == shown_texts(screen, "operator")


async def back_to_trace(pilot, trace_screen_kind) -> None:
    while not isinstance(pilot.app.screen, trace_screen_kind):
        await pilot.press("escape")
        await pilot.pause()


async def test_kernels_findings_steps_gaps_saved_as_the_summary(tmp_path, monkeypatch, summary_dir):
    """k, t, v and i: each file equals the summary's (the gap list: its first rows, those at
    least the threshold long) and holds the analysis's numbers in the screen's order."""
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.findings import FindingsScreen
    from kinetoscope.tui.trace.kernels import KernelsScreen
    from kinetoscope.tui.trace.overview import OverviewScreen
    from kinetoscope.tui.trace.screens import GapListScreen, TraceScreen

    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        session = trace_screen.data.session
        trace = session.trace
        strings = trace.strings

        await pilot.press("k")
        screen = await settle(pilot, KernelsScreen)
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "kernels").read_bytes()
        header, rows = read_csv(path)
        table = session.kernels
        shown = view_rows(screen)
        assert len(rows) == len(shown) == len(table)
        for cells, g in zip(rows, shown):
            got = dict(zip(header, cells))
            assert got["name"] == strings[int(table.groups.name[g])]
            assert got["count"] == str(int(table.count[g]))
            assert got["total_us"] == us(int(table.total[g]))
            assert got["mean_us"] == us(Fraction(int(table.total[g]), int(table.count[g])))
            assert (got["min_us"], got["max_us"]) == (us(int(table.min[g])), us(int(table.max[g])))
        await back_to_trace(pilot, TraceScreen)

        await pilot.press("t")
        screen = await settle(pilot, FindingsScreen)
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "findings").read_bytes()
        header, rows = read_csv(path)
        # Cause by cause, as the screen shows them: each primary, then what it explains.
        findings = cause_members(session.causes)
        assert sorted(map(id, findings)) == sorted(map(id, session.findings))
        assert len(rows) == len(findings) > 0
        for cells, finding in zip(rows, findings):
            got = dict(zip(header, cells))
            assert (got["rule"], got["severity"], got["message"]) == (
                finding.rule,
                finding.severity,
                finding.message,
            )
            assert got["evidence_start_us"] == us(int(finding.start))
            assert got["evidence_dur_us"] == us(int(finding.dur))
        await back_to_trace(pilot, TraceScreen)

        await pilot.press("v")
        screen = await settle(pilot, OverviewScreen)
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "steps").read_bytes()
        header, rows = read_csv(path)
        steps = session.steps
        assert column(header, rows, "step") == shown_texts(screen, "step")
        assert column(header, rows, "wall_us") == [us(int(d)) for d in steps.dur]
        assert column(header, rows, "idle_us") == [us(int(d)) for d in steps.idle]
        assert column(header, rows, "start_us") == [us(int(d)) for d in steps.start]
        await back_to_trace(pilot, TraceScreen)

        await pilot.press("i")
        screen = await settle(pilot, GapListScreen)
        path = await save(pilot, tmp_path)
        header, rows = read_csv(path)
        gaps = session.idle.gaps
        length = gaps.end - gaps.start
        long_enough = np.flatnonzero(length >= screen.threshold)
        assert len(rows) == len(long_enough) > 0
        assert [int(c) for c in column(header, rows, "rank")] == list(range(1, len(rows) + 1))
        lengths = [Fraction(c) for c in column(header, rows, "length_us")]
        assert lengths == sorted(lengths, reverse=True)
        assert sorted(column(header, rows, "length_us")) == sorted(
            us(int(length[g])) for g in long_enough
        )
        assert set(column(header, rows, "cause")) <= set(CAUSES)
        _, summary_rows = read_csv(summary_file(summary_dir, "gaps"))
        assert rows == summary_rows[: len(rows)]


async def test_memory_sync_and_compile_views_saved_as_the_summary(
    tmp_path, monkeypatch, summary_dir
):
    """p (operators, then v: never freed), b (calls, then v: call sites), c (steps here: the
    trace has no eager islands): every row, not only those the view lists, as the summary."""
    from kinetoscope.analysis.memory_ops import NEVER_FREED
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.compile_view import CompileScreen
    from kinetoscope.tui.trace.memory_view import MemoryScreen
    from kinetoscope.tui.trace.screens import TraceScreen
    from kinetoscope.tui.trace.sync_view import SyncScreen

    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        session = trace_screen.data.session
        trace = session.trace

        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "memory-operators").read_bytes()
        header, rows = read_csv(path)
        device = session.memory_ops.primary
        ops = device.ops
        active = ops.active()
        assert len(rows) == len(active) > 0
        by_name = {
            trace.strings[int(session.memory_ops.groups.name[g])]: g for g in active.tolist()
        }
        for cells in rows:
            got = dict(zip(header, cells))
            g = by_name[got["name"]]
            assert got["allocated_bytes"] == str(int(ops.allocated[g]))
            assert got["total_net_bytes"] == str(int(ops.incl_net[g]))
        allocated = [int(c) for c in column(header, rows, "allocated_bytes")]
        assert allocated == sorted(allocated, reverse=True)
        await pilot.press("v")
        await pilot.pause()
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "never-freed").read_bytes()
        header, rows = read_csv(path)
        never = int((device.allocations.state == NEVER_FREED).sum())
        assert len(rows) == never > 0
        assert sum(int(b) for b in column(header, rows, "bytes")) == int(
            device.bytes[device.allocations.event[device.allocations.never_freed]].sum()
        )
        await back_to_trace(pilot, TraceScreen)

        await pilot.press("b")
        screen = await settle(pilot, SyncScreen)
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "sync-calls").read_bytes()
        header, rows = read_csv(path)
        calls = session.sync
        order = calls.worst()
        assert len(rows) == len(calls) > 0
        assert column(header, rows, "blocked_us") == [us(int(calls.dur[i])) for i in order]
        assert column(header, rows, "call") == [trace.name_of(int(calls.rows[i])) for i in order]
        await pilot.press("v")
        await pilot.pause()
        assert screen.by_site
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "sync-sites").read_bytes()
        header, rows = read_csv(path)
        assert len(rows) == len(screen.sites)
        assert column(header, rows, "blocked_us") == [us(s.total) for s in screen.sites]
        await back_to_trace(pilot, TraceScreen)

        await pilot.press("c")
        screen = await settle(pilot, CompileScreen)
        path = await save(pilot, tmp_path)
        assert path.read_bytes() == summary_file(summary_dir, "compile-steps").read_bytes()
        header, rows = read_csv(path)
        assert column(header, rows, "step") == shown_texts(screen, "step")
        steps = session.compiled.steps
        assert column(header, rows, "launch_calls") == [str(s.launch_calls) for s in steps]


async def test_detail_tables_saved_as_shown(tmp_path, monkeypatch):
    """An operator's instances, children, kernels and shapes, and a kernel's instances."""
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.kernels import KernelDetailScreen, KernelsScreen
    from kinetoscope.tui.trace.operators import OperatorDetailScreen, OperatorsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        trace = trace_screen.data.trace
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        # The operator that launched most GPU work: all four views have rows.
        gpu = screen.result.table.gpu_total
        screen.table.cursor = int(np.flatnonzero(screen.table.view == int(np.argmax(gpu)))[0])
        await pilot.press("enter")
        detail = await settle(pilot, OperatorDetailScreen)
        for key, view in (("I", "instances"), ("C", "children"), ("K", "kernels"), ("S", "shapes")):
            await pilot.press(key)
            await pilot.pause()
            assert detail.current == view
            path = await save(pilot, tmp_path)
            assert path.name.endswith(f".operator-{view}.csv")
            header, rows = read_csv(path)
            shown = view_rows(detail)
            assert len(rows) == len(shown) > 0
            if view == "instances":
                assert column(header, rows, "dur_us") == [
                    us(int(trace.dur[detail.rows[i]])) for i in shown
                ]
                assert column(header, rows, "start_us") == [
                    us(int(trace.start[detail.rows[i]])) for i in shown
                ]
            elif view == "kernels":
                assert column(header, rows, "total_us") == [
                    us(int(detail.kernels.total[i])) for i in shown
                ]
                assert column(header, rows, "kernel") == shown_texts(detail, "kernel")
            elif view == "children":
                times = [detail.split.self_time, *detail.split.child_time.tolist()]
                assert column(header, rows, "total_us") == [us(int(times[i])) for i in shown]
            else:
                assert column(header, rows, "count") == [
                    str(int(detail.shapes.count[i])) for i in shown
                ]
        await back_to_trace(pilot, TraceScreen)
        await pilot.press("k")
        await settle(pilot, KernelsScreen)
        await pilot.press("enter")
        detail = await settle(pilot, KernelDetailScreen)
        path = await save(pilot, tmp_path)
        header, rows = read_csv(path)
        assert len(rows) == len(detail.rows) > 0
        assert column(header, rows, "dur_us") == [us(int(trace.dur[r])) for r in detail.rows]
        assert column(header, rows, "launched_by") == shown_texts(detail, "launched by")


def hostile_trace(folder: Path) -> Path:
    """The UI tests' small trace with an operator and a kernel named HOSTILE."""
    from test_tui_sample import EVIL_NAME, sample_trace

    document = sample_trace()
    for event in document["traceEvents"]:
        if event.get("name") in (EVIL_NAME, "gemm_kernel"):
            event["name"] = HOSTILE
    path = folder / 'evil, "name".json'
    path.write_text(json.dumps(document))
    return path


async def test_a_hostile_name_round_trips_from_the_viewer_and_the_summary(tmp_path, monkeypatch):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.kernels import KernelsScreen
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    path = hostile_trace(tmp_path)
    assert HOSTILE in load(str(path), write_cache=False).strings  # the parser keeps it as is
    out = tmp_path / "out"
    assert main(["summary", str(path), "--csv", str(out)]) == 0
    stem = tables.trace_stem(str(path))
    assert "/" not in stem and '"' not in stem and "," not in stem
    for table in ("operators", "kernels"):
        header, rows = read_csv(out / f"{stem}.{table}.csv")
        assert HOSTILE in column(header, rows, "name"), table
        assert all(len(r) == len(header) for r in rows)
    header, rows = read_csv(out / f"{stem}.kernels.csv")
    (hostile,) = [r for r in rows if r[0] == HOSTILE]
    assert dict(zip(header, hostile))["total_us"] == "100.000"  # dur 100 µs, exactly

    viewer = tmp_path / "viewer"
    viewer.mkdir()
    monkeypatch.chdir(viewer)
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        for key, kind, table in (
            ("o", OperatorsScreen, "operators"),
            ("k", KernelsScreen, "kernels"),
        ):
            await pilot.press(key)
            await settle(pilot, kind)
            saved = await save(pilot, viewer)
            assert saved.read_bytes() == (out / f"{stem}.{table}.csv").read_bytes()
            await back_to_trace(pilot, TraceScreen)


# -- a job, a diff ------------------------------------------------------------------------------


async def test_job_tables_saved_from_the_viewer_equal_the_summarys(tmp_path, monkeypatch):
    """Ranks (the per-rank table), every rank's steps (from the matrix) and the collectives."""
    from kinetoscope.analysis.job import analyze_job, digest_rank
    from kinetoscope.parser.ranks import discover
    from kinetoscope.tui.job.job_app import JobApp
    from kinetoscope.tui.job.job_collectives import CollectivesScreen
    from kinetoscope.tui.job.job_ranks import RanksScreen
    from test_job import write_job

    folder = tmp_path / "job"
    write_job(folder)  # three GPU ranks, rank 2 late
    out = tmp_path / "out"
    assert main(["summary", str(folder), "--csv", str(out), "--workers", "1"]) == 0
    files = discover([str(folder)])
    job = analyze_job([digest_rank(f.path) for f in files.files], files)

    header, rows = read_csv(out / "job.ranks.csv")
    assert column(header, rows, "rank") == ["0", "1", "2"]
    assert column(header, rows, "waited_us") == [us(e.wait_ns) for e in job.ranks]
    assert column(header, rows, "straggler") == [
        str(int(e.rank == job.straggler["rank"])) for e in job.ranks
    ]
    header, rows = read_csv(out / "job.rank-steps.csv")
    expected = [
        (str(e.rank), name, us(int(e.digest.steps["dur"][k])))
        for e in job.ranks
        for k, name in enumerate(e.digest.step_names)
    ]
    assert [(r[0], r[1], dict(zip(header, r))["dur_us"]) for r in rows] == expected
    header, rows = read_csv(out / "job.collectives.csv")
    order = sorted(range(len(job.matched)), key=lambda i: (-int(job.start_skew[i]), i))
    assert len(rows) == len(job.matched) > 0
    assert column(header, rows, "start_skew_us") == [us(int(job.start_skew[i])) for i in order]
    assert column(header, rows, "latency_us") == [us(int(job.latency[i])) for i in order]

    viewer = tmp_path / "viewer"
    viewer.mkdir()
    monkeypatch.chdir(viewer)
    app = JobApp([str(folder)], workers=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, RanksScreen, timeout=60)
        saved = await save(pilot, viewer)  # the matrix has the focus: every rank's steps
        assert saved.read_bytes() == (out / "job.rank-steps.csv").read_bytes()
        await pilot.press("tab")
        assert screen.focused is screen.breakdown
        saved = await save(pilot, viewer)
        assert saved.read_bytes() == (out / "job.ranks.csv").read_bytes()
        await pilot.press("greater_than_sign")  # sorted by the next column: the file follows
        await pilot.pause()
        saved = await save(pilot, viewer)
        _, rows = read_csv(saved)
        assert [int(r[0]) for r in rows] == [
            int(job.ranks[int(i)].rank) for i in screen.breakdown.view
        ]
        await pilot.press("c")
        await settle(pilot, CollectivesScreen)
        saved = await save(pilot, viewer)
        assert saved.read_bytes() == (out / "job.collectives.csv").read_bytes()


async def test_diff_tables_saved_from_the_viewer_equal_diff_csv(tmp_path, monkeypatch):
    from kinetoscope.tui.diff.diff_app import DiffApp
    from kinetoscope.tui.diff.diff_table import DiffScreen

    out = tmp_path / "out"
    assert main(["diff", str(SAMPLE), str(SAMPLE), "--csv", str(out)]) == 0
    stem = tables.diff_source(str(SAMPLE), str(SAMPLE))
    viewer = tmp_path / "viewer"
    viewer.mkdir()
    monkeypatch.chdir(viewer)
    app = DiffApp(str(SAMPLE), str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, DiffScreen, timeout=60)
        for what in ("kernels", "operators"):
            assert screen.shown == what
            saved = await save(pilot, viewer)
            assert saved.read_bytes() == (out / f"{stem}.diff-{what}.csv").read_bytes()
            header, rows = read_csv(saved)
            groups = [screen.rows.groups[i] for i in view_rows(screen)]
            assert column(header, rows, "name") == [g.name for g in groups]
            assert column(header, rows, "base_total_us") == [us(g.base_total) for g in groups]
            assert column(header, rows, "delta_us") == [us(g.delta) for g in groups]
            await pilot.press("T")
            await pilot.pause()


# -- where the files go, and when they cannot --------------------------------------------------


def test_summary_csv_never_overwrites_and_says_why_in_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    stem = tables.trace_stem(str(SAMPLE))
    taken = out / f"{stem}.kernels.csv"
    taken.write_text("mine\n")
    assert main(["summary", str(SAMPLE), "--csv", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kinetoscope: ") and err.count("\n") == 1 and "already exists" in err
    assert taken.read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir()) == [taken.name]  # nothing else written
    assert main(["summary", str(SAMPLE), "--csv", str(out), "--json"]) == 2
    # A folder that cannot be made: one line too.
    assert main(["summary", str(SAMPLE), "--csv", str(taken / "sub")]) == 1
    assert capsys.readouterr().err.count("\n") == 2  # the usage error's line, then this one


def test_summary_csv_prints_the_files_written(tmp_path, capsys):
    out = tmp_path / "new" / "folder"
    assert main(["summary", str(SAMPLE), "--csv", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    written = sorted(p.name for p in out.iterdir())
    assert sorted(Path(line.split("\t")[0]).name for line in lines) == written
    assert {"operators", "kernels", "gaps", "findings", "steps"} <= {
        name.split(".")[-2] for name in written
    }
    for line in lines:
        path, count = line.split("\t")
        assert count == f"{len(read_csv(Path(path))[1])} rows"


@pytest.mark.parametrize("command", ["summary", "diff"])
def test_summary_and_diff_csv_import_no_textual(tmp_path, command):
    from test_headless import FORBIDDEN, imported_by

    traces = [str(SAMPLE)] * (2 if command == "diff" else 1)
    result, modules = imported_by(tmp_path, command, *traces, "--csv", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "o").glob("*.csv"))) >= 2
    assert [m for m in FORBIDDEN if m in modules] == []


@pytest.mark.corpus
def test_the_corpus_8_rank_job_as_csv(tmp_path):
    """The real NCCL job: a row per rank, every matched collective, each rank's steps."""
    from kinetoscope.analysis.job import analyze_job, digest_rank
    from kinetoscope.parser.ranks import discover

    folder = CORPUS / "multirank" / "dlrm_8rank"
    if not folder.exists():
        pytest.skip("the corpus job is absent")
    out = tmp_path / "out"
    assert main(["summary", str(folder), "--csv", str(out), "--workers", "2"]) == 0
    files = discover([str(folder)])
    job = analyze_job([digest_rank(f.path) for f in files.files], files)
    header, rows = read_csv(out / "dlrm_8rank.ranks.csv")
    assert column(header, rows, "rank") == [str(r) for r in range(8)]
    assert set(column(header, rows, "status")) == {"ok"}
    assert column(header, rows, "straggler").count("1") == 1
    header, rows = read_csv(out / "dlrm_8rank.collectives.csv")
    assert len(rows) == len(job.matched) > 0
    assert sorted(column(header, rows, "latency_us")) == sorted(us(int(v)) for v in job.latency)
    header, rows = read_csv(out / "dlrm_8rank.rank-steps.csv")
    assert len(rows) == sum(len(e.digest.step_names) for e in job.ranks)


def test_save_falls_back_to_the_temporary_directory(tmp_path, monkeypatch):
    session = session_of(SAMPLE)
    table = tables.findings_table(list(session.findings))
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # the current directory no longer exists
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr(tables.tempfile, "tempdir", str(spare))
    path, count = tables.save_table(table, None, str(SAMPLE))
    assert Path(path).parent == spare and count == len(table.order)
    again, _ = tables.save_table(table, None, str(SAMPLE))
    assert again.endswith(".findings-2.csv") and Path(path).exists()
    monkeypatch.setattr(tables.tempfile, "tempdir", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError):
        tables.save_table(table, None, str(SAMPLE))


async def test_a_save_that_fails_is_a_notification_and_the_table_stays(tmp_path, monkeypatch):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.findings import FindingsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    monkeypatch.setattr(tables.tempfile, "tempdir", str(tmp_path / "nowhere"))
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("t")
        screen = await settle(pilot, FindingsScreen)
        rows = screen.table.row_count
        await pilot.press("W")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        errors = [n for n in pilot.app._notifications if n.severity == "error"]
        assert errors and "could not be written" in str(errors[-1].message)
        assert pilot.app.screen is screen and screen.table.row_count == rows
        assert screen.failure is None  # the table itself is fine


async def test_kernels_of_a_marked_range_saved_as_shown(tmp_path, monkeypatch):
    """A range (m … m): the rows with something in it, with the range's numbers."""
    from kinetoscope.analysis.ranges import kernels_in_range
    from kinetoscope.tui.data.places import MarkedRange
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.kernels import KernelsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        trace_screen = await settle(pilot, TraceScreen)
        data = trace_screen.data
        start = data.origin + data.span // 3
        end = start + data.span // 3
        trace_screen.marked = MarkedRange(start, end)
        await pilot.press("k")
        screen = await settle(pilot, KernelsScreen)
        assert screen.shown_range == (start, end)
        path = await save(pilot, tmp_path)
        header, rows = read_csv(path)
        session = data.session
        table = kernels_in_range(session.trace, session.kernels, session.links, start, end)
        inside = np.flatnonzero(table.count > 0)
        assert 0 < len(rows) == len(inside) < len(session.kernels)
        shown = view_rows(screen)
        assert sorted(shown) == inside.tolist()
        assert column(header, rows, "count") == [str(int(table.count[g])) for g in shown]
        assert column(header, rows, "total_us") == [us(int(table.total[g])) for g in shown]
        assert column(header, rows, "name") == shown_texts(screen, "kernel")


def test_every_table_screen_has_the_key_and_the_help_lists_it():
    """W on every screen that shows a table (one binding, the same key), and in `?`."""
    from kinetoscope.tui.diff.diff_app import diff_help_sections
    from kinetoscope.tui.job.job_app import job_help_sections
    from kinetoscope.tui.trace.drilldown import viewer_help_sections
    from kinetoscope.tui.trace.screens import GapListScreen
    from kinetoscope.tui.widgets.table import SavesCsv, TableScreen

    sections = [*viewer_help_sections(), *job_help_sections(), *diff_help_sections()]
    with_tables = {
        "Any table", "Operators (o)", "Operator details", "Kernels (k)", "Kernel details",
        "Findings (t)", "Overview (v)", "Compile (c)", "Memory (p)", "Sync (b)",
        "Ranks overview", "Collectives (c)", "Diff table",
    }  # fmt: skip
    listed = {title for title, _, _ in sections}
    assert with_tables <= listed
    for title, kind, bindings in sections:
        if title not in with_tables:
            continue
        assert issubclass(kind, SavesCsv), title
        keys = {b.key: b.action for b in bindings if hasattr(b, "key")}
        inherited = {b.key: b.action for b in getattr(kind, "BINDINGS", [])}
        if issubclass(kind, TableScreen):  # the help's "Any table" section lists it for them
            inherited.update({b.key: b.action for b in TableScreen.BINDINGS})
        assert {**inherited, **keys}.get("W") == "save_csv", title
    assert any(b.key == "W" and b.action == "save_csv" for b in GapListScreen.BINDINGS)


@pytest.mark.corpus
async def test_eager_islands_of_a_compiled_corpus_trace(tmp_path, monkeypatch):
    """vLLM piecewise capture: the compile view's eager islands, from W and from the summary."""
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.compile_view import CompileScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    path = (
        CORPUS
        / "tracelens"
        / "vllm_piecewise_graph_capture_rank_0.1773709679453551615.pt.trace.json.gz"
    )
    if not path.exists():
        pytest.skip("the corpus trace is absent")
    out = tmp_path / "out"
    assert main(["summary", str(path), "--csv", str(out)]) == 0
    summary = out / f"{tables.trace_stem(str(path))}.eager-islands.csv"
    header, rows = read_csv(summary)
    islands = session_of(path).compiled.eager_islands
    ranked = sorted(islands, key=lambda i: -i.gpu_ns)  # stable: ties keep the lens's order
    assert len(rows) == len(islands) > 0
    assert column(header, rows, "name") == [i.name for i in ranked]
    assert column(header, rows, "gpu_us") == [us(i.gpu_ns) for i in ranked]
    assert column(header, rows, "calls") == [str(i.count) for i in ranked]

    viewer = tmp_path / "viewer"
    viewer.mkdir()
    monkeypatch.chdir(viewer)
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen, timeout=60)
        await pilot.press("c")
        screen = await settle(pilot, CompileScreen, timeout=60)
        saved = await save(pilot, viewer)
        assert saved.read_bytes() == summary.read_bytes()
        assert column(*read_csv(saved), "name") == shown_texts(screen, "eager operator")


async def test_operators_by_shape_saved_with_their_shapes(tmp_path, monkeypatch):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    monkeypatch.chdir(tmp_path)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("o")
        screen = await settle(pilot, OperatorsScreen)
        await pilot.press("S")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.by_shape and screen.result.shapes is not None
        path = await save(pilot, tmp_path)
        assert path.name.endswith(".operators-by-shape.csv")
        header, rows = read_csv(path)
        shown = view_rows(screen)
        strings = screen.data.trace.strings
        shapes = screen.result.shapes
        table = screen.result.table
        assert len(rows) == len(shown) == len(table)
        assert column(header, rows, "input_shape") == [
            strings[int(shapes[g])] if shapes[g] >= 0 else "" for g in shown
        ]
        assert column(header, rows, "self_us") == [us(int(table.excl[g])) for g in shown]
        assert "allocated_bytes" not in header  # the table shows no memory columns by shape


def test_the_summarys_csv_agrees_with_its_json(summary_dir):
    """An independent path to the same numbers: the summary JSON (spec: µs rounded to 3
    decimals from integer ns) against the CSV files of the same trace."""
    from kinetoscope.analysis.summary import build_summary

    document = build_summary(session_of(SAMPLE))

    def rows_of(table: str) -> list[dict[str, str]]:
        header, rows = read_csv(summary_file(summary_dir, table))
        return [dict(zip(header, r)) for r in rows]

    def same(cell: str, value) -> bool:
        return (cell == "" and value is None) or float(cell) == value

    devices = rows_of("devices")
    assert len(devices) == len(document["gpu"]) > 0
    for row, gpu in zip(devices, document["gpu"]):
        assert int(row["device"]) == gpu["device"] and int(row["kernels"]) == gpu["kernels"]
        for key in ("window_start_us", "window_end_us", "busy_us", "idle_us"):
            assert same(row[key], gpu[key]), key
        for cause, value in gpu["idle_by_cause"].items():
            assert same(row[f"{cause}_us"], value), cause
    idle = rows_of("idle-by-cpu")
    for row, entry in zip(idle, document["idle_by_cpu"]):
        assert (row["name"] or None, row["cat"] or None) == (entry["name"], entry["cat"])
        assert int(row["gaps"]) == entry["gaps"] and same(row["idle_us"], entry["idle_us"])
    assert len(idle) == len(document["idle_by_cpu"])
    peaks = rows_of("memory-peaks")
    assert [(int(r["peak_allocated_bytes"]), int(r["peak_reserved_bytes"])) for r in peaks] == [
        (m["peak_allocated_bytes"], m["peak_reserved_bytes"]) for m in document["memory"]
    ]
    operators = {(r["cat"], r["name"]): r for r in rows_of("operators")}
    for op in document["operators"]:
        row = operators[(op["cat"], op["name"])]
        assert int(row["count"]) == op["count"]
        for csv_key, json_key in (("total_us", "incl_us"), ("self_us", "excl_us")):
            assert same(row[csv_key], op[json_key])
    kernels = rows_of("kernels")
    for row, kernel in zip(kernels, document["kernels"]):
        assert (row["cat"], row["name"]) == (kernel["cat"], kernel["name"])
        for key in ("total_us", "mean_us", "min_us", "max_us"):
            assert same(row[key], kernel[key]), key
    steps = rows_of("steps")
    assert [(s["step"], float(s["wall_us"])) for s in steps] == [
        (s["name"], s["dur_us"]) for s in document["steps"]
    ]
