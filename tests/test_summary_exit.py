"""`kinetoscope summary` ends without the interpreter's full garbage collections over every
object left (issue 30: after a big summary they took longer than writing the output): an exit
handler freezes the objects (`gc.freeze`) after every other exit handler has run, and what the
command wrote is complete."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).parent.parent / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"

# The handler registered first runs last: it sees what the command's exit handler left.
_RUN = """
import atexit, gc, sys
from kinetoscope.commands.cli import main

def last():
    print(f"frozen={gc.get_freeze_count()} unfrozen={len(gc.get_objects())}", file=sys.stderr)

atexit.register(last)
sys.exit(main(sys.argv[1:]))
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"KINETOSCOPE_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
    )


def _exit_counts(stderr: str) -> tuple[int, int]:
    line = [line for line in stderr.splitlines() if line.startswith("frozen=")][-1]
    frozen, unfrozen = (int(part.split("=")[1]) for part in line.split())
    return frozen, unfrozen


@pytest.mark.skipif(not TRACE.exists(), reason="the sample trace is part of the repository")
def test_summary_json_exits_with_its_objects_frozen_and_its_output_whole(tmp_path):
    done = _run(tmp_path, "summary", str(TRACE), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(done.stdout)  # the whole document, flushed
    assert document["source"]["path"] == str(TRACE)
    frozen, unfrozen = _exit_counts(done.stderr)
    # Everything the run left is frozen: the exit's collections have next to nothing to visit.
    assert frozen > 10_000
    assert unfrozen < frozen // 20


def test_summary_csv_files_are_complete_at_exit(tmp_path):
    out = tmp_path / "tables"
    done = _run(tmp_path, "summary", str(TRACE), "--csv", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _exit_counts(done.stderr)[0] > 10_000
    files = sorted(out.glob("*.csv"))
    assert files
    for file in files:
        text = file.read_text(encoding="utf-8")
        assert text.endswith("\n")
        rows = list(csv.reader(text.splitlines()))
        assert rows and all(len(row) == len(rows[0]) for row in rows), file.name
