"""A small job's `summary DIR --json` imports only what it runs: no other command's module, no
viewer, no optional extra, no table or analysis module the job's JSON does not use, and no
worker pool's machinery (a small job is digested in-process). Most of a tiny job's time is the
interpreter starting and importing (issue 30, item 4; BENCHMARKS.md): a module that creeps
back into this path costs every `summary DIR` run, so the set is pinned here, by name and by
count, without timing anything."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from test_headless import modules_imported_by as modules_of

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces"
TRACE = SAMPLE / "synthetic_gpu_training.pt.trace.json.gz"

# Modules the job's JSON summary must not import, by name or as a package's prefix.
FORBIDDEN = (
    # Optional extras and the viewer's toolkit.
    "textual", "torch", "pyarrow", "duckdb", "pandas", "mcp", "dask", "aiohttp",
    "textual_serve", "http.server", "socket",
    # A worker pool's machinery: the small job is digested in this process.
    "concurrent.futures", "multiprocessing",
    # Other commands and what they stand on.
    "kinetoscope.tui", "kinetoscope.mcp_server", "kinetoscope.sql", "kinetoscope.capture",
    "kinetoscope.export", "kinetoscope.api", "kinetoscope.commands.view",
    "kinetoscope.commands.check", "kinetoscope.commands.serve", "kinetoscope.commands.mcp",
    "kinetoscope.commands.sql", "kinetoscope.commands.capture", "kinetoscope.commands.diff",
    "kinetoscope.commands.export",
    # What the single trace's report needs and a job's digest does not: the CSV/text tables'
    # typed rows, the compile analysis, memory per operator, the rules, the C++ demangler's
    # library search (ctypes.util starts subprocess), check's budgets (fractions of percent).
    "kinetoscope.present.tables", "kinetoscope.analysis.compile",
    "kinetoscope.analysis.memory_ops", "kinetoscope.analysis.rules",
    "kinetoscope.common.budget", "ctypes.util", "subprocess",
)  # fmt: skip

# kinetoscope's own modules on this path: 45 when this test was written (commands/cli,
# summary; common 4; parser 14; analysis 18; present 4), a few to spare for a module split in
# two. More means a new import on the path: make it lazy, or raise this with the reason.
MAX_OWN_MODULES = 50
# Modules beyond those of `import numpy, msgspec` (the floor every load stands on): 22 when
# written (argparse and its locale, dataclasses, hashlib and mmap for the cache, numpy.ma that
# np.unique imports, rich.cells for the cut names; the parser's and analysis's own).
MAX_EXTRA_OTHER_MODULES = 30


def floor_modules() -> set[str]:
    code = "import json, sys, numpy, msgspec; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def small_job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir(parents=True)
    for rank in (0, 1):
        shutil.copy(TRACE, job / f"host_rank{rank}.pt.trace.json.gz")
    return job


def forbidden_in(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


def test_a_small_jobs_json_summary_imports_only_what_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    result, modules = modules_of(tmp_path, "summary", str(small_job(tmp_path)), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [r["loaded"] for r in document["ranks"]] == [True, True]  # the probe saw a real run
    assert forbidden_in(modules) == []
    own = [m for m in modules if m == "kinetoscope" or m.startswith("kinetoscope.")]
    assert "kinetoscope.analysis.job" in own and "kinetoscope.present.report_job" in own
    assert len(own) <= MAX_OWN_MODULES, own
    other = sorted(set(modules) - floor_modules() - set(own))
    assert len(other) <= MAX_EXTRA_OTHER_MODULES, other


def test_the_tables_come_back_for_the_job_text_report(tmp_path, monkeypatch):
    """The probe is not blind: the text report of the same job does import the tables and
    draws them, so the JSON run above left them out, not the wrapper."""
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    result, modules = modules_of(tmp_path, "summary", str(small_job(tmp_path)), "--width", "120")
    assert result.returncode == 0, result.stderr
    assert "Ranks" in result.stdout or "rank" in result.stdout
    assert "kinetoscope.present.report_job" in modules
    assert "textual" not in {m.split(".")[0] for m in modules}


def test_help_still_lists_every_command_and_its_options(tmp_path):
    """Only the command run has its module imported; `--help` still imports every one."""
    from kinetoscope.commands.cli import COMMANDS

    result, modules = modules_of(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    for command in COMMANDS:
        assert command in result.stdout
    for module in set(COMMANDS.values()):
        assert f"kinetoscope.commands.{module}" in modules
    result, _ = modules_of(tmp_path, "summary", "--help")
    assert result.returncode == 0 and "--align-clocks" in result.stdout and "--csv" in result.stdout


def test_the_report_keeps_the_tables_stack_separator():
    """report_summary spells the tables' separator itself (so as not to import the tables)."""
    from kinetoscope.present import report_summary, tables

    assert report_summary.STACK_SEPARATOR == tables.STACK_SEPARATOR


def count_calls(monkeypatch, owner: object, name: str) -> list[int]:
    """Count the calls of `owner.name` (a module's function, a class's method), still made."""
    original = getattr(owner, name)
    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def job_json(tmp_path: Path) -> dict:
    import contextlib
    import io

    from kinetoscope.commands.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summary", str(small_job(tmp_path)), "--json"]) == 0
    return json.loads(out.getvalue())


def test_a_small_jobs_ranks_start_no_thread_and_trim_no_heap(tmp_path, monkeypatch):
    """A small gzip rank is inflated in the reading thread (no read-ahead thread: two per
    rank before), and its small columns are grown without malloc_trim (a walk of the heap)."""
    import threading

    from kinetoscope.parser import builder

    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    started = count_calls(monkeypatch, threading.Thread, "start")
    trims = count_calls(monkeypatch, builder, "release_heap")
    document = job_json(tmp_path)
    assert [r["loaded"] for r in document["ranks"]] == [True, True]
    assert started == [0] and trims == [0]


def test_a_big_gzip_still_reads_ahead_and_big_columns_still_trim(tmp_path, monkeypatch):
    """The other side of both limits: above them the thread and the trim are there, and the
    job's document is the same either way."""
    import threading

    from kinetoscope.parser import builder

    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    small = job_json(tmp_path / "a")
    monkeypatch.setattr("kinetoscope.parser.source.INLINE_GZIP_MAX", 0)
    monkeypatch.setattr("kinetoscope.parser.builder.TRIM_MIN_BYTES", 0)
    started = count_calls(monkeypatch, threading.Thread, "start")
    trims = count_calls(monkeypatch, builder, "release_heap")
    big = job_json(tmp_path / "b")
    assert started[0] >= 2 and trims[0] >= 2  # each rank: its read-ahead thread, its trim
    for document in (small, big):
        for rank in document["ranks"]:
            rank.pop("path"), rank.pop("digest_seconds", None)
        document.pop("cycles")
    assert small == big
