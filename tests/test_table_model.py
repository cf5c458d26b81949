"""One description of a table (kinetoscope/present/tables.py): a field's kind writes its CSV
cell and its report cell; the report's section and the CSV come from the same fields; the rows
read from the summary document and from the session say the same things."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import load

from kinetoscope.present import tables
from kinetoscope.present.report_summary import NAME, NUMBER, TEXT, section

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"


def test_a_kind_writes_the_csv_cell_and_the_report_cell():
    values = {"name": "=cmd", "count": 1234, "dur": 1500, "bytes": 1536, "share": 0.25}
    table = tables.Table(
        "t",
        [
            tables.Field("name", tables.NAME, lambda r: values["name"], "op"),
            tables.Field("count", tables.COUNT, lambda r: values["count"], "calls"),
            tables.Field("dur_us", tables.DURATION, lambda r: values["dur"], "time"),
            tables.Field("bytes", tables.BYTES, lambda r: values["bytes"], "memory"),
            tables.Field("share", tables.SHARE, lambda r: values["share"], "of all"),
            tables.Field("csv_only", tables.INT, lambda r: 7),
            tables.Field("gone", tables.TEXT, lambda r: None, "gone", missing="(none)"),
            tables.Field("shown", tables.TEXT, lambda r: "x", "report only", csv=False),
        ],
        1,
        np.arange(1),
        "A table",
    )
    assert table.headers == ["name", "count", "dur_us", "bytes", "share", "csv_only", "gone"]
    assert table.cells(0, raw=False) == ["'=cmd", "1234", "1.500", "1536", "0.25", "7", ""]
    report = section(table)
    assert report.title == "A table"
    assert [c.header for c in report.columns] == [
        "op",
        "calls",
        "time",
        "memory",
        "of all",
        "gone",
        "report only",
    ]
    assert [c.kind for c in report.columns] == [NAME, NUMBER, NUMBER, NUMBER, NUMBER, TEXT, TEXT]
    assert [text for text, _ in report.rows[0]] == [
        "=cmd",
        "1,234",
        "1.500 µs",
        "1.50 KiB",
        "25%",
        "(none)",
        "x",
    ]


def test_shown_orders_the_report_columns_not_the_csv():
    table = tables.Table(
        "t",
        [
            tables.Field("a", tables.INT, lambda r: 1, "A"),
            tables.Field("b", tables.INT, lambda r: 2, "B"),
        ],
        1,
        np.arange(1),
        shown=("b", "a"),
    )
    assert table.headers == ["a", "b"]
    assert [c.header for c in section(table).columns] == ["B", "A"]


@pytest.fixture(scope="module")
def sample():
    session = TraceSession(load(str(SAMPLE), write_cache=False))
    return session, build_summary(session)


def _report_rows(table: tables.Table, rows) -> list[list[str]]:
    return [[text for text, _ in row] for row in section(table, rows).rows]


def _by_key(table: tables.Table, key: int = 2) -> dict[tuple[str, ...], list[str]]:
    """Report rows by their first `key` cells."""
    return {tuple(row[:key]): row for row in _report_rows(table, None)}


def test_operators_of_the_session_and_of_the_document_agree(sample):
    session, document = sample
    of_session = _by_key(
        tables.operators_table(tables.OperatorRows.of(session.trace, session.operators))
    )
    of_document = _by_key(
        tables.operators_table(tables.OperatorRows.of_document(document["operators"]))
    )
    assert len(of_document) >= 5
    for key, row in of_document.items():
        assert of_session[key] == row, key


def test_kernels_of_the_session_and_of_the_document_agree(sample):
    from kinetoscope.analysis.kernels import top_launcher

    session, document = sample
    kernels = session.kernels
    top = tables.kernel_launcher_groups(session, kernels)
    rows = tables.KernelRows.of(session.trace, kernels, top, session.cpu_groups.name)
    of_session = _by_key(tables.kernels_table(rows), 1)
    of_document = _by_key(
        tables.kernels_table(
            tables.KernelRows.of_document(
                document["kernels"], lambda cat, name: top_launcher(session, cat, name)
            )
        ),
        1,
    )
    assert len(of_document) >= 3
    assert any(row[-1] != "–" for row in of_document.values())  # a launcher is named
    for key, row in of_document.items():
        assert of_session[key] == row, key


def test_gaps_idle_by_cpu_and_devices_of_the_session_and_of_the_document_agree(sample):
    session, document = sample
    trace = session.trace
    gaps = session.idle.gaps
    longest = gaps.longest(len(document["idle_gaps"]))
    from_session = tables.gaps_table(tables.GapRows.of(trace, gaps, longest))
    from_document = tables.gaps_table(tables.GapRows.of_document(document))
    assert from_document.n > 0
    # The CSV cells the document can give (its start and length are µs of 3 decimals: exact).
    assert [from_session.cells(i)[1:5] for i in range(from_session.n)] == [
        from_document.cells(i)[1:5] for i in range(from_document.n)
    ]
    idle = tables.idle_by_cpu_table(tables.IdleByCpuRows.of(trace, session.idle_by_cpu))
    idle_doc = tables.idle_by_cpu_table(tables.IdleByCpuRows.of_document(document["idle_by_cpu"]))
    assert idle_doc.n > 0
    shown = _report_rows(idle_doc, None)
    assert _report_rows(idle, range(idle_doc.n - 1)) == shown[:-1]
    assert _report_rows(idle, [idle.n - 1])[-1][1:4] == shown[-1][1:4]  # no CPU slice there
    devices = tables.devices_table(tables.DeviceRows.of(session.idle))
    devices_doc = tables.devices_table(tables.DeviceRows.of_document(document))
    assert devices_doc.n == devices.n > 0
    assert [devices.cells(i) for i in range(devices.n)] == [
        devices_doc.cells(i) for i in range(devices.n)
    ]


def test_the_viewer_columns_are_the_tables_fields_with_a_view(sample):
    from kinetoscope.tui.widgets.columns import columns_of

    session, _ = sample
    kernels = session.kernels
    top = tables.kernel_launcher_groups(session, kernels)
    table = tables.kernels_table(
        tables.KernelRows.of(session.trace, kernels, top, session.cpu_groups.name)
    )
    # Without the launchers' counts there is no viewer's launcher column; the others are.
    titles = [c.title for c in columns_of(table)]
    assert titles == ["kernel", "cat", "count", "total", "mean", "%", "min", "max"]
    operators = tables.operators_table(tables.OperatorRows.of(session.trace, session.operators))
    columns = columns_of(operators)
    assert [c.title for c in columns] == [
        "operator",
        "cat",
        "count",
        "total",
        "self",
        "GPU self",
        "GPU total",
        "self%",
    ]
    excl = session.operators.excl
    self_column = columns[4]
    assert np.array_equal(self_column.key, excl)
    biggest = int(np.argmax(excl))
    assert self_column.cell(biggest).strip()  # a duration text
    assert columns[0].cell(biggest) == operators.fields[0].value(biggest)


def _layout(columns) -> list[tuple]:
    """What the viewer lays out and sorts by, per column."""
    return [(c.title, c.width, c.numeric, c.optional, c.descending, c.name) for c in columns]


def test_the_compile_steps_screen_is_the_compile_steps_table(tmp_path):
    import gzip
    import json

    from kinetoscope.analysis.units import fmt_table_time
    from kinetoscope.tui.trace.compile_view import steps_model
    from test_tui_compile import compiled_cpu_events

    path = tmp_path / "compiled.pt.trace.json.gz"
    document = {"schemaVersion": 1, "traceEvents": compiled_cpu_events()}
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    session = TraceSession(load(str(path), write_cache=False))
    trace, result = session.trace, session.compiled
    steps = result.steps
    assert len(steps) == 2
    table = tables.compile_steps_table(tables.CompileStepRows.of(trace, result))
    model = steps_model(trace, result)
    assert [c.title for c in model.columns] == [f.view().title for f in table.view_fields]
    assert _layout(model.columns) == [
        ("step", 0, False, False, False, True),
        ("compiled", 9, True, False, True, False),
        ("eager", 10, True, False, True, False),
        ("regions", 8, True, False, True, False),
        ("guards", 7, True, False, True, False),
        ("guard", 10, True, True, True, False),
        ("compiling", 10, True, True, True, False),
        ("launches", 9, True, False, True, False),
        ("kernels", 8, True, False, True, False),
        ("launch cpu", 11, True, True, True, False),
    ]
    assert model.default_sort == 0
    by_title = {c.title: c for c in model.columns}
    assert [by_title["step"].cell(i) for i in range(2)] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert list(by_title["step"].key) == [s.start for s in steps]  # step order, not by name
    for title, attr in [
        ("regions", "regions"),
        ("guards", "guard_calls"),
        ("launches", "launch_calls"),
        ("kernels", "kernels"),
    ]:
        assert [by_title[title].cell(i) for i in range(2)] == [
            f"{getattr(s, attr):,}" for s in steps
        ], title
        assert list(by_title[title].key) == [getattr(s, attr) for s in steps]
    for title, attr in [
        ("eager", "eager_ns"),
        ("guard", "guard_ns"),
        ("compiling", "compiling_ns"),
        ("launch cpu", "launch_cpu_ns"),
    ]:
        assert [by_title[title].cell(i) for i in range(2)] == [
            fmt_table_time(float(getattr(s, attr))) for s in steps
        ], title
    assert [by_title["compiled"].cell(i) for i in range(2)] == [
        f"{100 * s.share:.0f}%" if s.share is not None else "–" for s in steps
    ]
    assert all(s.share is not None for s in steps)


def test_the_steps_screen_is_the_steps_table(sample):
    from kinetoscope.tui.trace.overview import STEP_BAR, steps_model

    session, _ = sample
    trace, steps = session.trace, session.steps
    assert len(steps) >= 2
    model = steps_model(trace, steps)
    bar = tables.View("GPU time by kind", steps.dur, STEP_BAR, cell=lambda i: "")
    table = tables.steps_table(trace, steps, True, bar)
    assert [c.title for c in model.columns] == [f.view().title for f in table.view_fields]
    assert _layout(model.columns) == [
        ("step", 0, False, False, False, True),
        ("wall", 10, True, False, True, False),
        ("GPU time by kind", STEP_BAR, False, False, False, False),
        ("busy%", 6, True, False, True, False),
        ("idle", 10, True, False, True, False),
        ("comm", 10, True, False, True, False),
        ("loader%", 8, True, False, True, False),
    ]
    by_title = {c.title: c for c in model.columns}
    n = len(steps)
    assert list(by_title["step"].key) == list(steps.start)  # step order, not by name
    busy = steps.gpu_busy / np.maximum(steps.dur, 1)
    assert [by_title["busy%"].cell(i) for i in range(n)] == [f"{100 * b:.0f}" for b in busy]
    assert np.array_equal(by_title["idle"].key, steps.idle)
    assert len(by_title["GPU time by kind"].cell(0)) == STEP_BAR  # drawn by the viewer
    # The viewer's bar is neither a CSV column nor a report column.
    assert "bar" not in table.headers
    assert table.headers == tables.steps_table(trace, steps, True).headers
    assert all(f.header != "bar" for f in table.report_fields)


def test_the_findings_screen_is_the_findings_table(sample):
    from kinetoscope.tui.trace.findings import findings_model

    session, _ = sample
    causes = list(session.causes)
    assert len(causes) >= 2 and any(c.supports for c in causes)
    model = findings_model(causes)
    table = tables.findings_table(causes)
    assert [c.title for c in model.columns] == [f.view().title for f in table.view_fields]
    widest_rule = max(4, *(len(c.rule) for c in causes))
    assert _layout(model.columns) == [
        ("#", 3, True, False, False, False),
        ("severity", 9, False, False, False, False),
        ("rule", widest_rule, False, False, False, False),
        ("what was seen", 0, False, False, False, False),
    ]
    number, severity, rule, seen = model.columns
    n = len(causes)
    assert [number.cell(i) for i in range(n)] == [str(i + 1) for i in range(n)]
    ranks = {"critical": 0, "warning": 1, "info": 2}
    assert list(severity.key) == [ranks[c.severity] for c in causes]  # most severe first
    assert [rule.cell(i) for i in range(n)] == [c.rule for c in causes]
    assert seen.key is None
    explains = next(i for i, c in enumerate(causes) if c.supports)
    assert seen.cell(explains) == (
        f"{causes[explains].headline} (explains "
        f"{', '.join(s.rule for s in causes[explains].supports)})"
    )
    # The CSV's rows are still every finding, cause by cause.
    from kinetoscope.analysis.rules import cause_members

    members = tables.findings_table(cause_members(causes))
    assert members.n == n + sum(len(c.supports) for c in causes)
