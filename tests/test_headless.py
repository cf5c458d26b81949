"""The headless path: `kinetoscope summary` (every output format) and the formatting module it
shares with the viewer import no Textual and no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces"
# Memory events, GPU kernels and sync calls: every section of the report is drawn.
TRACE = SAMPLE / "synthetic_gpu_training.pt.trace.json.gz"
FORBIDDEN = ("textual", "torch", "mcp")  # mcp: only `kinetoscope mcp` needs the SDK

# Runs `kinetoscope ARGS...` as `python -m kinetoscope` does, and when the interpreter exits
# writes the top-level names of the modules it imported (as JSON) to the file named first.
WRAPPER = """
import atexit, json, runpy, sys
report = sys.argv[1]
def _modules():
    with open(report, "w") as handle:
        json.dump(sorted(sys.modules), handle)
atexit.register(_modules)
sys.argv = ["kinetoscope", *sys.argv[2:]]
runpy.run_module("kinetoscope", run_name="__main__")
"""


def modules_imported_by(
    tmp_path: Path, *args: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the command in a fresh interpreter; its result and every module it imported."""
    report = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(report), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.exists(), result.stderr
    return result, json.loads(report.read_text())


def imported_by(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run the command in a fresh interpreter; its result and the top-level modules it imported."""
    result, modules = modules_imported_by(tmp_path, *args)
    return result, {name.split(".")[0] for name in modules}


@pytest.mark.parametrize("output", ["text", "json", "md", "tsv"])
def test_summary_imports_no_textual_or_torch(tmp_path, output):
    result, modules = imported_by(tmp_path, "summary", str(TRACE), "--format", output)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "the summary printed nothing"
    if output != "json":  # the sections that format durations and bytes were drawn
        assert "Top allocating operators" in result.stdout
        assert "Where the CPU blocked" in result.stdout
    assert [m for m in FORBIDDEN if m in modules] == []
    assert "rich" in modules or output == "json"  # the probe sees what was imported


def test_summary_error_path_imports_no_textual(tmp_path):
    """A file that is not a trace: the one-line error comes without Textual too."""
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    result, modules = imported_by(tmp_path, "summary", str(bad))
    assert result.returncode == 1 and result.stderr.startswith("kinetoscope: ")
    assert [m for m in FORBIDDEN if m in modules] == []


@pytest.mark.parametrize("selector", [["--step", "11", "--clip"], ["--around-gap", "1"]])
def test_export_imports_no_textual_or_torch(tmp_path, selector):
    """`kinetoscope export` (a window of one trace) stays headless too."""
    out = tmp_path / "crop.json.gz"
    result, modules = imported_by(tmp_path, "export", str(TRACE), "-o", str(out), *selector)
    assert result.returncode == 0, result.stderr
    assert out.exists() and result.stdout.startswith(f"wrote {out}")
    assert [m for m in FORBIDDEN if m in modules] == []


@pytest.mark.parametrize("output", ["text", "json"])
def test_diff_imports_no_textual_or_torch(tmp_path, output):
    """`kinetoscope diff` in its headless forms (tables, JSON) stays headless too."""
    result, modules = imported_by(tmp_path, "diff", str(TRACE), str(TRACE), "--format", output)
    assert result.returncode == 0, result.stderr
    assert "neutral" in result.stdout.lower()
    assert [m for m in FORBIDDEN if m in modules] == []


@pytest.mark.parametrize("output", ["text", "json"])
def test_check_imports_no_textual_or_torch(tmp_path, output):
    """`kinetoscope check` (budgets for CI) stays headless, and without the MCP SDK."""
    result, modules = imported_by(
        tmp_path, "check", str(TRACE), "--max-step", "1000s", "--format", output
    )
    assert result.returncode == 0, result.stderr
    assert "max-step" in result.stdout
    assert [m for m in FORBIDDEN if m in modules] == []


def test_mcp_without_the_sdk_says_which_extra():
    """`kinetoscope mcp` where the SDK is not installed: one line naming the extra, status 1."""
    code = "import sys; sys.modules['mcp'] = None; from kinetoscope.commands.cli import main; sys.exit(main(['mcp']))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "kinetoscope[mcp]" in result.stderr


def test_formatting_module_imports_no_textual_or_rich():
    """The one formatting module of the report and the viewer is plain Python."""
    code = (
        "import sys, kinetoscope.analysis.units;"
        "print(','.join(m for m in ('textual', 'rich', 'torch') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.parametrize("out", ["job.zip", "job.json.gz"])
def test_job_export_imports_no_textual_or_torch(tmp_path, out):
    """`kinetoscope export DIR` (a job's folder: the Perfetto bundle or the merged trace)."""
    import shutil

    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        shutil.copy(TRACE, job / f"host_rank{rank}.pt.trace.json.gz")
    result, modules = imported_by(
        tmp_path, "export", str(job), "-o", str(tmp_path / out), "--step", "11"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {tmp_path / out}") and "of 2 ranks" in result.stdout
    assert [m for m in FORBIDDEN if m in modules] == []
