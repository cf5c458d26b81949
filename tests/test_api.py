"""The Python API (kinetoscope/api.py, docs/api.md): its tables hold the summary JSON's numbers
on real traces, convert to pandas and Arrow (numeric columns without a copy), show small and
clean, load from a script without a main guard, and say which extra is missing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, SAMPLES
from kinetoscope.analysis.units import us

import kinetoscope
from kinetoscope import api
from kinetoscope.frames import MissingExtra

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")

# A few real traces of different kinds: CPU+GPU training with memory, an 8-rank job's rank,
# MTIA, vLLM graph capture, AMD, a CPU-only one.
CORPUS_TRACES = [
    "kineto/2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz",
    "hta/mtia_rank_0.json.gz",
    "tracelens/vllm_decode_full_graph_execution.json.gz",
    "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz",
    "hta/cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "zoology/a100_trace.json.gz",
]
JOB = CORPUS / "multirank" / "dlrm_8rank"
SAMPLE = SAMPLES / "synthetic_gpu_training.pt.trace.json.gz"


def corpus_trace(name: str) -> Path:
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"{name} is not in the corpus")
    return path


def by_key(table: api.Table, *keys: str) -> dict[tuple, dict]:
    return {tuple(row[k] for k in keys): row for row in table.rows()}


@pytest.mark.corpus
@pytest.mark.parametrize("name", CORPUS_TRACES)
def test_tables_hold_the_summary_numbers(name: str) -> None:
    trace = kinetoscope.open(corpus_trace(name))
    doc = trace.summary()

    kernels = by_key(trace.kernels(), "category", "name")
    assert len(kernels) == len(trace.session.kernels)
    for entry in doc["kernels"]:
        row = kernels[(entry["cat"], entry["name"])]
        assert row["count"] == entry["count"]
        assert us(row["total_dur"]) == entry["total_us"]
        assert us(row["min_dur"]) == entry["min_us"]
        assert us(row["max_dur"]) == entry["max_us"]
        assert round(row["mean_dur"] / 1000, 3) == entry["mean_us"]
    # The same order as the summary's (its first 50 are the table's first 50).
    top = [(e["cat"], e["name"]) for e in doc["kernels"]]
    assert list(kernels)[: len(top)] == top

    operators = by_key(trace.operators(), "category", "name")
    for entry in doc["operators"]:
        row = operators[(entry["cat"], entry["name"])]
        assert row["count"] == entry["count"]
        assert us(row["total_dur"]) == entry["incl_us"]
        assert us(row["self_dur"]) == entry["excl_us"]
        assert us(row["gpu_self_dur"]) == entry["gpu_self_us"]
        assert us(row["gpu_total_dur"]) == entry["gpu_total_us"]
    assert list(operators)[: len(doc["operators"])] == [
        (e["cat"], e["name"]) for e in doc["operators"]
    ]

    steps = list(trace.steps().rows())
    assert len(steps) == len(doc["steps"])
    for row, entry in zip(steps, doc["steps"]):
        assert row["name"] == entry["name"]
        assert us(row["ts"]) == entry["start_us"]
        for col, key in (
            ("dur", "dur_us"),
            ("gpu_busy", "gpu_busy_us"),
            ("dataloader", "dataloader_us"),
            ("sync", "sync_us"),
            ("cpu_busy", "cpu_busy_us"),
            ("uninstrumented", "uninstrumented_us"),
            ("collective", "collective_us"),
        ):
            assert us(row[col]) == entry[key], col

    # The summary's longest gaps are the table's longest (ties by the summary's order).
    gaps = trace.gaps()
    assert len(gaps) == len(trace.session.idle.gaps)
    every = {(us(r["dur"]), us(r["ts"]), r["cause"]) for r in gaps.rows()}
    want = [(g["dur_us"], g["start_us"], g["cause"]) for g in doc["idle_gaps"]]
    assert set(want) <= every
    longest = sorted((us(r["dur"]) for r in gaps.rows()), reverse=True)
    assert longest[: len(want)] == [w[0] for w in want]
    total_idle = sum(int(d) for d in gaps.column("dur"))
    assert us(total_idle) == pytest.approx(sum(g["idle_us"] for g in doc["gpu"]), abs=0.01)

    memory = list(trace.memory().rows())
    assert [(m["device_type"], m["device_id"], m["peak_allocated_bytes"]) for m in memory] == [
        (m["device_type"], m["device_id"], m["peak_allocated_bytes"]) for m in doc["memory"]
    ]
    assert [r["rule"] for r in trace.findings().rows()] == [f["rule"] for f in doc["findings"]]
    assert [r["message"] for r in trace.findings().rows()] == [
        f["message"] for f in doc["findings"]
    ]
    sync = list(trace.sync().rows())
    assert sync[: len(doc["sync"])] == doc["sync"]
    assert trace.compile() == doc["compile"]


@pytest.mark.corpus
@pytest.mark.parametrize("name", CORPUS_TRACES[:3])
def test_per_event_tables_add_up_to_the_grouped_ones(name: str) -> None:
    trace = kinetoscope.open(corpus_trace(name))
    kd = trace.kernel_events().to_pandas()
    sums = kd.groupby(["category", "name"], observed=True)["dur"].agg(["count", "sum", "min"])
    for row in trace.kernels().rows():
        got = sums.loc[(row["category"], row["name"])]
        assert (got["count"], got["sum"], got["min"]) == (
            row["count"],
            row["total_dur"],
            row["min_dur"],
        )
    od = trace.operator_events().to_pandas()
    self_sum = od.groupby(["category", "name"], observed=True)["self_dur"].sum()
    total = od[od.outermost].groupby(["category", "name"], observed=True)["dur"].sum()
    for row in trace.operators().rows():
        key = (row["category"], row["name"])
        assert self_sum.loc[key] == row["self_dur"]
        assert total.get(key, 0) == row["total_dur"]

    # Slices: every complete event once, parents one level up and containing their children.
    m = trace.model
    sl = trace.slices().to_pandas()
    assert len(sl) == int((m.ph == ord("X")).sum())
    assert (sl["ts"].to_numpy() == m.start[sl["id"].to_numpy()]).all()
    child = sl.dropna(subset=["parent"])
    parents = sl.set_index("id").loc[child["parent"].astype("int64")]
    assert (parents["depth"].to_numpy() == child["depth"].to_numpy() - 1).all()
    assert (parents["ts"].to_numpy() <= child["ts"].to_numpy()).all()
    # A flow joins a runtime call to a GPU activity with the same correlation id.
    flows = trace.flows().to_pandas()
    assert (m.corr[flows.slice_out] == m.corr[flows.slice_in]).all()
    assert (m.corr[flows.slice_in] == flows.correlation).all()


def test_window_over_the_whole_trace_is_the_whole_table() -> None:
    trace = kinetoscope.open(SAMPLE)
    m = trace.model
    whole = trace.window(m.slice_start_min, m.slice_end_max)
    assert list(whole.kernels().rows()) == list(trace.kernels().rows())
    assert list(whole.operators().rows()) == [r for r in trace.operators().rows() if r["count"]]
    # The first half: clipped times, never more than the whole.
    mid = (m.slice_start_min + m.slice_end_max) // 2
    half = trace.window(m.slice_start_min, mid).kernels()
    total = sum(int(v) for v in trace.kernels().column("total_dur"))
    assert 0 < sum(int(v) for v in half.column("total_dur")) < total
    idle = trace.window(m.slice_start_min, m.slice_end_max).idle()
    assert [int(v) for v in idle.column("idle")] == [d.idle_ns for d in trace.session.idle.devices]
    with pytest.raises(ValueError, match="before its start"):
        trace.window(10, 5)


def test_event_args_reads_one_events_args_back() -> None:
    trace = kinetoscope.open(SAMPLE)
    kernel = trace.kernel_events()
    row = int(kernel.column("id")[0])
    args = trace.event_args(row)
    assert args["correlation"] == kernel.value(0, "correlation")
    with pytest.raises(IndexError, match="no event"):
        trace.event_args(len(trace.model) + 5)


def test_arrow_shares_the_numpy_columns() -> None:
    trace = kinetoscope.open(SAMPLE)
    slices = trace.slices()
    table = slices.to_arrow()
    ts = slices.column("ts")
    buffer = table.column("ts").chunks[0].buffers()[1]
    assert buffer.address == ts.ctypes.data  # the same memory, not a copy
    assert table.column("name").type == pa.dictionary(pa.int32(), pa.string())
    assert table.column("name").to_pylist() == [trace.model.name_of(r) for r in slices.column("id")]
    # Nulls where nothing is recorded, not the model's sentinel.
    parent = table.column("parent").to_pylist()
    assert None in parent and min(p for p in parent if p is not None) >= 0
    df = slices.to_pandas()
    assert str(df["parent"].dtype) == "Int64" and df["parent"].isna().any()
    assert df["ts"].dtype == np.int64


def write_trace(path: Path, kernel_name: str, op_name: str = "aten::mm") -> Path:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": op_name, "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 5,
            "args": {"correlation": 7},
        },
        {
            "ph": "i",
            "s": "t",
            "cat": "[memory]",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "args": {
                "Addr": 4096,
                "Bytes": 1024,
                "Total Allocated": 1024,
                "Total Reserved": 2048,
                "Device Type": 1,
                "Device Id": 0,
            },
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": kernel_name,
            "pid": 0,
            "tid": 7,
            "ts": 50,
            "dur": 20,
            "args": {"correlation": 7, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": kernel_name,
            "pid": 0,
            "tid": 7,
            "ts": 120,
            "dur": 30,
            "args": {"correlation": 8, "device": 0, "stream": 7},
        },
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


HOSTILE = "\x1b]0;pwned\x07\x1b[2Jevil\nkernel\u202e"


def test_repr_is_small_and_clean(tmp_path: Path) -> None:
    trace = kinetoscope.open(write_trace(tmp_path / "t.json", HOSTILE))
    table = trace.kernel_events()
    assert table.value(0, "name") == HOSTILE  # the data is the data
    for text in (repr(table), table._repr_html_(), repr(trace), trace._repr_html_()):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "<th>name</th>" in table._repr_html_()
    big = kinetoscope.open(SAMPLE).slices()
    assert len(big) > 100
    assert len(repr(big).splitlines()) <= 8
    assert len(big._repr_html_()) < 20_000
    assert big._repr_html_().count("<tr>") == 1 + 10  # the header and ten rows


def test_memory_events_and_their_operator(tmp_path: Path) -> None:
    trace = kinetoscope.open(write_trace(tmp_path / "t.json", "k"))
    rows = list(trace.memory_events().rows())
    assert len(rows) == 1
    assert rows[0]["bytes"] == 1024 and rows[0]["total_reserved"] == 2048
    assert trace.model.name_of(rows[0]["operator"]) == "aten::mm"
    kernels = list(trace.kernel_events().rows())
    assert kernels[0]["launch"] is not None and kernels[1]["launch"] is None  # corr 8: no call


def test_open_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(api.TraceError, match="no such file"):
        kinetoscope.open(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    with pytest.raises(api.TraceError) as info:
        kinetoscope.open(bad)
    assert "\n" not in str(info.value)
    with pytest.raises(api.TraceError, match="is a directory"):
        kinetoscope.open(tmp_path)


def test_a_missing_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = kinetoscope.open(SAMPLE)
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    with pytest.raises(MissingExtra, match=r"pip install 'kinetoscope\[pandas\]'"):
        trace.kernels().to_pandas()
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(MissingExtra, match=r"pip install 'kinetoscope\[arrow\]'"):
        trace.kernels().to_arrow()
    # Without either, the API still answers with numpy columns.
    assert int(trace.kernels().column("count").sum()) == len(trace.session.links.gpu_rows)


def run_python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, **env},
    )


def test_a_script_without_a_main_guard_loads_with_workers(tmp_path: Path) -> None:
    """Worker processes import the main script: one with no `if __name__ == "__main__":` would
    run again in each of them. The API's loads hide it, so it runs once."""
    result = run_python(
        f"""
        import kinetoscope
        t = kinetoscope.open({str(SAMPLE)!r}, use_cache=False)
        print("LOADED", t.model.workers, len(t.kernels()))
        """,
        tmp_path,
        KINETOSCOPE_PARALLEL_MIN_BYTES="0",
        KINETOSCOPE_WORKERS="2",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("LOADED") == 1
    assert result.stdout.split()[1] == "2"  # decoded by two worker processes
    assert "Traceback" not in result.stderr


def test_importing_kinetoscope_and_the_api_imports_no_extra(tmp_path: Path) -> None:
    result = run_python(
        f"""
        import sys, kinetoscope
        t = kinetoscope.open({str(SAMPLE)!r})
        t.kernels(); t.slices(); t.summary()
        import kinetoscope.sql
        print(sorted(m for m in ("pandas", "pyarrow", "duckdb") if m in sys.modules))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.corpus
def test_open_job_gives_the_job_documents_tables() -> None:
    if not JOB.is_dir():
        pytest.skip("the 8-rank job is not in the corpus")
    job = kinetoscope.open_job(JOB)
    doc = job.document()
    ranks = list(job.ranks().rows())
    assert [r["rank"] for r in ranks] == [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert [r["busy_us"] for r in ranks] == [r["busy_us"] for r in doc["ranks"]]
    collectives = list(job.collectives().rows())
    assert len(collectives) == doc["matching"]["matched"]
    assert collectives[: len(doc["collectives"])] == doc["collectives"]
    assert job.straggler() == doc["straggler"]
    # One rank's trace through the single-trace API: its GPU busy time is the rank's.
    rank3 = job.rank(3)
    assert [us(d.busy_ns) for d in rank3.session.idle.devices] == [
        g["busy_us"] for g in doc["ranks"][3]["gpu"]
    ]
    with pytest.raises(KeyError, match="no rank 9"):
        job.rank(9)
    with pytest.raises(api.TraceError):
        kinetoscope.open_job(JOB / "missing")


@pytest.mark.corpus
def test_diff_gives_the_diff_documents_rows_and_verdict(tmp_path: Path) -> None:
    base = corpus_trace("kineto/2021-01_resnet50_nw0_worker0.pt.trace.json.gz")
    new = corpus_trace("kineto/2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz")
    d = kinetoscope.diff(base, new)
    cli = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "diff", str(base), str(new), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    doc = json.loads(cli.stdout)
    assert d.verdict() == doc["verdict"]
    kernels = list(d.kernels().rows())
    assert kernels[: len(doc["kernels"]["rows"])] == doc["kernels"]["rows"]
    operators = list(d.operators().rows())
    assert operators[: len(doc["operators"]["rows"])] == doc["operators"]["rows"]
    steps = list(d.steps().rows())
    assert [s["pair"] for s in steps] == [s["pair"] for s in doc["steps"]]
    for row, entry in zip(steps, doc["steps"]):
        for key, metric in entry.items():
            if isinstance(metric, dict):
                assert row[f"{key}_delta"] == metric["delta"]
    assert d.base.kernels().to_pandas().shape[0] == len(d.base.session.kernels)
    with pytest.raises(ValueError):
        kinetoscope.diff(base, new, steps="x-y")


def test_names_arrow_and_pandas_cannot_encode_still_convert(tmp_path: Path) -> None:
    """A JSON escape of a lone surrogate (`\\ud800`) is a valid trace string but not UTF-8:
    Arrow gets the character replaced, pandas keeps the text as written."""
    path = write_trace(tmp_path / "t.json", "placeholder")
    path.write_text(path.read_text().replace("placeholder", "bad\\ud800name"))
    trace = kinetoscope.open(path)
    assert trace.kernels().value(0, "name") == "bad\ud800name"
    assert trace.kernels().to_arrow().column("name").to_pylist() == ["bad?name"]
    assert list(trace.kernel_events().to_pandas()["name"]) == ["bad\ud800name"] * 2
    assert trace.slices().to_pandas().shape[0] == 4
    assert "\ud800" not in repr(trace.kernels())


def test_kernels_need_no_nesting():
    """`kernels()` (count, total, min, max per group) is the session's kernel table's numbers, and
    asking it first builds no nesting (the slow stage on big traces)."""
    trace = kinetoscope.open(str(SAMPLE))
    first = trace.kernels()
    assert not trace.session.nesting_ready
    table = trace.session.kernels  # builds the nesting, for the launchers
    assert trace.session.nesting_ready
    again = kinetoscope.open(str(SAMPLE)).kernels()
    for table_ in (first, again):
        assert sorted(table_.column("total_dur").tolist()) == sorted(
            table.total[table.count > 0].tolist()
        )
    assert first.column("total_dur").tolist() == again.column("total_dur").tolist()


# -- the per-event tables' memory (issue 29) -------------------------------------------------


def _traced(action) -> tuple[object, int, int]:
    """`action()`, with the bytes numpy and Python held after it and at their peak during it,
    over what was held before (tracemalloc sees numpy's arrays)."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = action()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, held, peak


def test_the_slice_table_holds_its_rows_and_a_dataframe_one_copy() -> None:
    """`slices()` keeps the rows (8 bytes a slice), not 13 gathered columns (some 100), and its
    DataFrame gets each column gathered once, not a copy of the table's copy: its peak is about
    the DataFrame's own size (some 95 bytes a slice; the table and a copy made 200)."""
    path = CORPUS / CORPUS_TRACES[0]
    trace = kinetoscope.open(path if path.exists() else SAMPLE, use_cache=False)
    session = trace.session
    _ = session.classes, session.nesting.depth, session.nesting.parent  # the analysis's own
    trace.kernels().to_pandas()  # pandas' imports and caches
    n = int((trace.model.ph == ord("X")).sum())
    fixed = 1 << 16  # the objects themselves: what a small trace's bytes per slice hide
    slices, held, peak = _traced(trace.slices)
    assert held < 12 * n + fixed and peak < 12 * n + fixed
    frame, held, peak = _traced(slices.to_pandas)
    assert peak < 130 * n + fixed
    assert len(frame) == n and frame["ts"].dtype == np.int64


def test_a_dataframe_owns_its_columns() -> None:
    """A DataFrame handed a gathered column writes into it; the table, its Arrow table and its
    next DataFrame stay as they were, whichever was made first."""
    trace = kinetoscope.open(SAMPLE, use_cache=False)
    for first in ("pandas", "column", "arrow"):
        table = trace.operator_events() if first == "column" else trace.slices()
        if first == "column":
            before = table.column("ts").copy()
        elif first == "arrow":
            arrow = table.to_arrow()
        frame = table.to_pandas()
        want = frame.copy()
        frame.loc[:, "ts"] = -5
        frame.loc[:, "parent"] = 7
        frame.loc[:, "id"] = 0
        again = table.to_pandas()
        pd.testing.assert_frame_equal(again, want)
        if first == "column":
            assert (table.column("ts") == before).all()
        if first == "arrow":
            assert arrow.column("ts").to_pylist() == want["ts"].tolist()
            assert arrow.column("id").to_pylist() == want["id"].tolist()
