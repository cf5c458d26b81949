"""`kinetoscope sql` (kinetoscope/sql.py, docs/sql.md): queries return what the API returns, on
one trace and on the 8-rank job; every query of docs/sql.md runs; the database reaches no file;
errors are one line; hostile names come out cleaned; --parquet; the prompt; a missing extra."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, REPO, SAMPLES
from test_api import HOSTILE, write_trace

import kinetoscope
from kinetoscope.commands import cli
from kinetoscope.commands.sql import prompt
from kinetoscope.sql import Database, QueryError

pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")

SAMPLE = SAMPLES / "synthetic_gpu_training.pt.trace.json.gz"
RESNET = CORPUS / "kineto" / "2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz"
JOB = CORPUS / "multirank" / "dlrm_8rank"
DOC_QUERIES = re.findall(r"```sql\n(.*?)```", (REPO / "docs" / "sql.md").read_text(), re.S)


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sql_rows(db: Database, query: str) -> list[dict]:
    return list(db.query(query).rows())


def test_kernel_and_operator_sums_equal_the_api() -> None:
    trace = kinetoscope.open(SAMPLE)
    with Database.of_trace(trace) as db:
        got = {
            (r["category"], r["name"]): (r["n"], r["total"], r["lo"], r["hi"])
            for r in sql_rows(
                db,
                "SELECT category, name, count(*) n, sum(dur) total, min(dur) lo, max(dur) hi "
                "FROM kernel GROUP BY category, name",
            )
        }
        want = {
            (r["category"], r["name"]): (r["count"], r["total_dur"], r["min_dur"], r["max_dur"])
            for r in trace.kernels().rows()
        }
        assert got == want and len(got) > 3
        ops = {
            (r["category"], r["name"]): (r["n"], r["total"] or 0, r["self"])
            for r in sql_rows(
                db,
                "SELECT category, name, count(*) n, sum(dur) FILTER (WHERE outermost) total, "
                "sum(self_dur) self FROM operator GROUP BY ALL",
            )
        }
        assert ops == {
            (r["category"], r["name"]): (r["count"], r["total_dur"], r["self_dur"])
            for r in trace.operators().rows()
        }
        # Perfetto's names: slices by track, joined to the tracks.
        lanes = sql_rows(
            db,
            "SELECT t.name, count(*) n FROM slice s JOIN thread_track t ON t.id = s.track "
            "GROUP BY t.name",
        )
        assert sum(r["n"] for r in lanes) == len(trace.slices())
        assert {r["name"] for r in lanes} <= {lane.label for lane in trace.model.lanes}


@pytest.mark.corpus
def test_the_job_has_a_rank_column_and_each_rank_is_its_trace() -> None:
    if not JOB.is_dir():
        pytest.skip("the 8-rank job is not in the corpus")
    job = kinetoscope.open_job(JOB)
    with Database.of_job(job) as db:
        rows = sql_rows(
            db, "SELECT rank, name, sum(dur) total, count(*) n FROM kernel GROUP BY rank, name"
        )
        assert {r["rank"] for r in rows} == set(range(8))
        for rank in (0, 5):
            want = {
                r["name"]: (r["total_dur"], r["count"]) for r in job.rank(rank).kernels().rows()
            }
            assert {r["name"]: (r["total"], r["n"]) for r in rows if r["rank"] == rank} == want
        summary = sql_rows(db, "SELECT rank, busy_us FROM rank_summary ORDER BY rank")
        assert [r["busy_us"] for r in summary] == [r["busy_us"] for r in job.document()["ranks"]]
        matched = sql_rows(db, "SELECT count(*) n FROM matched_collective")
        assert matched[0]["n"] == job.document()["matching"]["matched"]
        # args(rank, id): the event of that rank.
        row = sql_rows(db, "SELECT rank, id, correlation, args(rank, id) a FROM kernel LIMIT 1")[0]
        assert json.loads(row["a"])["correlation"] == row["correlation"]


@pytest.mark.corpus
@pytest.mark.parametrize("number", range(len(DOC_QUERIES)))
def test_every_query_in_the_docs_runs(number: int) -> None:
    query = DOC_QUERIES[number]
    if "rank" in query:
        if not JOB.is_dir():
            pytest.skip("the 8-rank job is not in the corpus")
        db = Database.of_job(kinetoscope.open_job(JOB))
    else:
        if not RESNET.is_file():
            pytest.skip("the resnet trace is not in the corpus")
        db = Database.of_trace(kinetoscope.open(RESNET))
    with db:
        rows = sql_rows(db, query)
    assert rows, query
    assert all(v is not None for v in rows[0].values()) or "LEFT JOIN" in query


@pytest.mark.corpus
def test_the_gap_query_finds_the_summarys_cpu_stack() -> None:
    """The docs' gap query gives, for each of the summary's longest gaps, the innermost slice
    of its `cpu_stack`."""
    if not RESNET.is_file():
        pytest.skip("the resnet trace is not in the corpus")
    trace = kinetoscope.open(RESNET)
    query = next(q for q in DOC_QUERIES if "FROM gap g" in q).replace("g.dur > 100000", "true")
    with Database.of_trace(trace) as db:
        found = {(r["ts"], r["dur"]): r["cpu_op"] for r in sql_rows(db, query)}
    gaps = trace.summary()["idle_gaps"]
    assert len(gaps) == 20
    for gap in gaps:
        key = next(k for k in found if round(k[0] / 1000, 3) == gap["start_us"])
        assert found[key] == (gap["cpu_stack"][-1] if gap["cpu_stack"] else None)


REFUSED = [
    "COPY kernel TO '{tmp}/out.csv'",
    "COPY (SELECT 1) TO '{tmp}/out.parquet' (FORMAT parquet)",
    "ATTACH '{tmp}/other.db' AS other",
    "EXPORT DATABASE '{tmp}/export'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM read_parquet('{tmp}/*.parquet')",
    "SELECT * FROM glob('/etc/*')",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "SELECT * FROM read_json_auto('https://example.com/x.json')",
]


@pytest.mark.parametrize("template", REFUSED)
def test_no_query_reaches_a_file(template: str, tmp_path: Path, capsys) -> None:
    query = template.format(tmp=tmp_path)
    before = sorted(tmp_path.iterdir())
    code, out, err = run(capsys, "sql", str(SAMPLE), query)
    assert code == 1
    assert err.startswith("kinetoscope: SQL: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def test_errors_in_the_users_sql_are_one_line(capsys) -> None:
    for query in ("SELEC 1", "SELECT nope FROM kernel", "SELECT * FROM no_such_table", ""):
        code, out, err = run(capsys, "sql", str(SAMPLE), query)
        assert code == 1, query
        assert err.count("\n") == 1 and err.startswith("kinetoscope: SQL: "), (query, err)
    code, _, err = run(capsys, "sql", str(SAMPLE) + ".missing", "SELECT 1")
    assert code == 1 and "no such file" in err and err.count("\n") == 1


def test_hostile_names_come_out_clean(tmp_path: Path, capsys) -> None:
    path = write_trace(tmp_path / "t.json", HOSTILE, op_name='op\x1b[31m\r,"x')
    for fmt in ("table", "csv", "json", "md"):
        code, out, err = run(
            capsys,
            "sql",
            str(path),
            "SELECT name, count(*) FROM slice GROUP BY name",
            "--format",
            fmt,
        )
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\u202e" not in out
        assert "evil" in out
    code, out, _ = run(capsys, "sql", str(path), "SELECT name, dur FROM kernel", "--format", "csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["name", "dur"] and len(rows) == 3  # the newline in the name is cleaned
    code, out, _ = run(capsys, "sql", str(path), "SELECT name, dur FROM kernel", "--format", "json")
    assert [r["dur"] for r in json.loads(out)] == [20000, 30000]
    code, out, _ = run(capsys, "sql", str(path), "SELECT sum(dur) s FROM kernel", "--format", "md")
    assert out.splitlines() == ["| s |", "|---:|", "| 50000 |"]


def test_parquet_writes_every_table_once(tmp_path: Path, capsys) -> None:
    import pyarrow.parquet as pq

    out_dir = tmp_path / "tables"
    code, out, err = run(capsys, "sql", str(SAMPLE), "--parquet", str(out_dir))
    assert code == 0, err
    trace = kinetoscope.open(SAMPLE)
    names = {p.stem for p in out_dir.iterdir()}
    assert names == set(trace.tables()) - {"track"}
    assert pq.read_table(out_dir / "kernel.parquet").num_rows == len(trace.kernel_events())
    assert pq.read_table(out_dir / "slice.parquet").column("ts").to_pylist() == list(
        trace.slices().column("ts")
    )
    code, _, err = run(capsys, "sql", str(SAMPLE), "--parquet", str(out_dir))
    assert code == 1 and "already exists" in err
    code, _, err = run(capsys, "sql", str(SAMPLE), "SELECT 1", "--parquet", str(tmp_path / "x"))
    assert code == 2


def test_without_a_query_or_a_terminal_it_says_what_to_give(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, _, err = run(capsys, "sql", str(SAMPLE))
    assert code == 2 and "give a query" in err


def test_the_prompt_runs_each_line_and_keeps_history(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path))
    lines = iter(["SELECT count(*) AS n \\", "FROM kernel", "SELEC", ".tables", ".quit"])
    monkeypatch.setattr("builtins.input", lambda _prompt="": next(lines))
    trace = kinetoscope.open(SAMPLE)
    with Database.of_trace(trace) as db:
        assert prompt(db, "csv") == 0
    out = capsys.readouterr().out
    assert f"n\n{len(trace.kernel_events())}\n" in out
    assert "error: Parser Error" in out
    assert "memory_event" in out
    try:
        import readline  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "sql_history").is_file()


def test_a_missing_extra_names_the_extra(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)  # import duckdb now fails
    code, out, err = run(capsys, "sql", str(SAMPLE), "SELECT 1")
    assert code == 1
    assert err.strip() == (
        "kinetoscope: kinetoscope sql needs duckdb, which is not installed: "
        "pip install 'kinetoscope[sql]'"
    )
    with pytest.raises(ImportError, match=r"kinetoscope\[sql\]"):
        kinetoscope.open(SAMPLE).sql("SELECT 1")


def test_the_api_runs_sql_too() -> None:
    trace = kinetoscope.open(SAMPLE)
    result = trace.sql("SELECT count(*) AS n FROM slice")
    assert list(result.rows()) == [{"n": len(trace.slices())}]
    with pytest.raises(QueryError):
        trace.sql("COPY slice TO 'x.csv'")


@pytest.mark.parametrize("template", [t for t in REFUSED if not t.startswith("EXPORT")])
def test_the_database_itself_refuses_files(template: str, tmp_path: Path) -> None:
    """Behind the statement check, DuckDB's own configuration refuses the same (EXPORT makes its
    folder before it fails: the statement check is what stops it)."""
    import duckdb

    query = template.format(tmp=tmp_path)
    with Database.of_trace(kinetoscope.open(SAMPLE)) as db:
        db.register("kernel")
        with pytest.raises(duckdb.Error):
            db.con.execute(query).fetchall()
    assert list(tmp_path.iterdir()) == []


def test_the_table_fits_a_terminals_width() -> None:
    from kinetoscope.sql import render

    trace = kinetoscope.open(SAMPLE)
    with Database.of_trace(trace) as db:
        result = db.query("SELECT name, category, count(*) n FROM kernel GROUP BY ALL")
    wide = render(result, "table")
    assert max(len(line) for line in wide.splitlines()) > 80
    fitted = render(result, "table", 80)
    assert max(len(line) for line in fitted.splitlines()) <= 80
    assert len(fitted.splitlines()) == len(wide.splitlines())
    counts = [line.split()[-1] for line in fitted.splitlines()[2:-1]]
    assert counts == [str(r["n"]) for r in result.rows()]  # numbers are never cut


@pytest.mark.corpus
def test_the_command_reads_a_jobs_folder(tmp_path: Path, capsys) -> None:
    if not JOB.is_dir():
        pytest.skip("the 8-rank job is not in the corpus")
    code, out, err = run(
        capsys,
        "sql",
        str(JOB),
        "SELECT rank, count(*) AS n FROM step GROUP BY rank ORDER BY rank",
        "--format",
        "json",
    )
    assert code == 0, err
    assert [r["rank"] for r in json.loads(out)] == list(range(8))
    code, out, err = run(capsys, "sql", str(JOB), "--parquet", str(tmp_path / "job"))
    assert code == 0, err
    names = {p.stem for p in (tmp_path / "job").iterdir()}
    assert {"slice", "kernel", "rank_summary", "matched_collective"} <= names
    code, _, err = run(capsys, "sql", str(SAMPLE), "SELECT 1", "--cycle", "2")
    assert code == 1 and "--cycle" in err


# -- the slice table read in place (issue 29: SQL's memory) ----------------------------------


def _allocated_by(action) -> int:
    """Bytes numpy (tracemalloc sees its arrays) and Arrow's pool allocated at their peak while
    `action` ran, over what was held before."""
    import tracemalloc

    arrow_before = pa.total_allocated_bytes()
    tracemalloc.start()
    try:
        action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak + max(0, pa.total_allocated_bytes() - arrow_before)


def test_the_slice_table_reads_the_model_in_place() -> None:
    """Handing `slice` to DuckDB and grouping it gathers no column: numpy and Arrow allocate
    under 6 bytes per row of the model (the row number, 4; the API's table allocates some 90
    per row), and the nesting, which only `depth` and `parent` need, is made when a query
    reads one of them."""
    trace = kinetoscope.open(RESNET if RESNET.exists() else SAMPLE, use_cache=False)
    rows = len(trace.model)
    query = "SELECT name, count(*), sum(dur) FROM slice GROUP BY name"
    with Database.of_trace(trace) as db:  # the imports and the session's row kinds, once
        db.query(query)
    with Database.of_trace(trace) as db:
        assert _allocated_by(lambda: db.query(query)) < 6 * rows + (1 << 16)
        assert not trace.session.nesting_ready
        got = sql_rows(db, "SELECT count(depth) AS n, sum(parent) AS p FROM slice")
        assert trace.session.nesting_ready
    slices = trace.slices()
    depth, parent = slices.column("depth"), slices.column("parent")
    assert got == [
        {
            "n": sum(d is not None for d in depth),
            "p": sum(p for p in parent if p is not None),
        }
    ]


@pytest.mark.parametrize("table, method", [("slice", "slices"), ("kernel", "kernel_events")])
@pytest.mark.parametrize("nesting_first", [False, True])
def test_the_tables_read_in_place_are_the_apis(table: str, method: str, nesting_first) -> None:
    """The rows, values, nulls and column types of `slice` and `kernel` are the API's tables',
    whether the nesting was made before the table (its arrays) or after (on demand)."""
    trace = kinetoscope.open(SAMPLE, use_cache=False)
    if nesting_first:
        _ = trace.session.nesting
    want = list(getattr(trace, method)().rows())
    with Database.of_trace(trace) as db:
        got = sql_rows(db, f"SELECT * FROM {table}")
        types = db.con.sql(f"DESCRIBE {table}").fetchall()
    assert got == want and len(want) > 50
    with Database(trace.tables(), lambda ids: ids, 1) as db:  # the API's Table, as Arrow
        db.register(table)
        assert db.con.sql(f"DESCRIBE {table}").fetchall() == types
    if table == "slice":
        assert len(got) == int((trace.model.ph == ord("X")).sum()) < len(trace.model)
        assert any(r["parent"] is None and r["depth"] == 0 for r in got)
        assert any(r["depth"] is None and r["device"] is not None for r in got)  # GPU activity
    else:
        assert all(r["launch"] is not None for r in got) and any(r["operator"] for r in got)


def test_the_kernel_table_needs_no_nesting_for_its_sums() -> None:
    trace = kinetoscope.open(SAMPLE, use_cache=False)
    with Database.of_trace(trace) as db:
        got = sql_rows(
            db, "SELECT name, count(*) AS n, sum(dur) AS total FROM kernel GROUP BY name"
        )
        assert not trace.session.nesting_ready
        sql_rows(db, "SELECT count(operator) FROM kernel")
        assert trace.session.nesting_ready
    want = {(r["name"], r["count"], r["total_dur"]) for r in trace.kernels().rows()}
    assert {(r["name"], r["n"], r["total"]) for r in got} == want


def test_the_on_demand_columns_refuse_rows_that_are_not_there() -> None:
    trace = kinetoscope.open(SAMPLE, use_cache=False)
    with Database.of_trace(trace) as db:
        db.register("slice")
        db.register("kernel")
        got = sql_rows(
            db,
            "SELECT kinetoscope_slice_depth(-1) a, kinetoscope_slice_parent(1099511627776) b, "
            "kinetoscope_slice_depth(NULL) c, kinetoscope_slice_depth(-9223372036854775808) d, "
            "kinetoscope_kernel_launch(-1) e, kinetoscope_kernel_operator(1099511627776) f, "
            "kinetoscope_kernel_launch(0) g",  # row 0: not a GPU activity
        )
    assert got == [dict.fromkeys("abcdefg")]
    assert trace.model.ph[0] != ord("X") or trace.session.classes.kind[0] in (0, 4, 5)
