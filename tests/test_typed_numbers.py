"""Numbers a user types are read with a bound on their length and size (kinetoscope/common/numbers.py):
a 5,000-digit value (past Python's 4,300-digit int limit) or a merely huge one is refused in one
line, never a traceback; and `diff --steps 9-` on traces of 6 steps is a usage error naming the
steps there are (issue 25)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_diff import base_events, new_events, write

from kinetoscope.commands.cli import main
from kinetoscope.common.numbers import NumberError, read_float, read_int, shown

NINES = "9" * 5000  # int(NINES) raises "Exceeds the limit (4300 digits)"
ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exceeds the limit" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
    assert len(lines) == 1, err  # argparse's usage lines aside: one line of error
    assert len(lines[0]) < 300, lines[0]  # the 5,000 digits are not echoed
    return lines[0]


def test_read_int_and_float_bounds():
    assert read_int("42", "--x", 1, 100) == 42
    assert read_int(" +7 ", "--x") == 7
    assert read_int("-3", "--x", signed=True) == -3
    for text, low, high, said in [
        (NINES, None, None, "too long"),
        ("1" * 41, None, None, "too long"),
        ("0", 1, None, "at least 1"),
        ("101", 1, 100, "at most 100"),
        ("x", None, None, "not a whole number"),
        ("-3", None, None, "not a whole number"),
        ("1.5", None, None, "not a whole number"),
    ]:
        with pytest.raises(NumberError, match=said):
            read_int(text, "--x", low, high)
    assert read_float("2.5", "--x") == 2.5
    for text, said in [(NINES, "too long"), ("1e999", "too large"), ("nan", "not a number")]:
        with pytest.raises(NumberError, match=said):
            read_float(text, "--x")
    assert len(shown(NINES)) < 60 and "5,000 characters" in shown(NINES)
    assert shown("\x1b[31m") == repr("\\x1b[31m")


def trace_pair(tmp_path: Path, steps: int = 6) -> tuple[str, str]:
    base = write(tmp_path / "base.json", base_events(steps=steps))
    new = write(tmp_path / "new.json", new_events(steps=steps))
    return base, new


@pytest.mark.parametrize(
    "steps", [f"1-{NINES}", NINES, f"{NINES}-", "1-99999999999", "1-1000001", "2,1-1000001"]
)
def test_diff_steps_too_long_or_large_is_a_usage_error(tmp_path, capsys, steps):
    base, new = trace_pair(tmp_path)
    assert main(["diff", base, new, "--json", "--steps", steps]) == 2
    line = one_line_error(capsys)
    assert "--steps" in line and "up to 1,000,000" in line


def test_diff_steps_past_the_traces_is_a_usage_error_naming_the_steps(tmp_path, capsys):
    base, new = trace_pair(tmp_path, steps=6)
    assert main(["diff", base, new, "--json", "--steps", "9-"]) == 2
    assert one_line_error(capsys) == "kinetoscope: --steps 9-: the traces have steps 1-6 in common"
    assert main(["diff", base, new, "--steps", "7,9", "--csv", str(tmp_path / "out")]) == 2
    assert "steps 1-6" in one_line_error(capsys) and not (tmp_path / "out").exists()
    # traces of different lengths: both counts said
    longer = write(tmp_path / "longer.json", new_events(steps=8))
    assert main(["diff", base, longer, "--json", "--steps", "7-"]) == 2
    assert one_line_error(capsys).endswith("steps 1-6 in common (BASE has 6, NEW 8)")
    # some picked (past the end dropped), and no --steps at all: compared as before
    assert main(["diff", base, new, "--json", "--steps", "5-9"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["options"]["steps"] == [5, 6]
    assert main(["diff", base, new, "--json"]) == 0
    capsys.readouterr()


def test_diff_steps_on_traces_without_steps_stays_a_whole_trace_comparison(tmp_path, capsys):
    """docs/diff.md: with no steps in either trace the whole traces are compared, inconclusive."""
    plain = [e for e in base_events() if not e["name"].startswith("ProfilerStep")]
    base = write(tmp_path / "a.json", plain)
    new = write(tmp_path / "b.json", plain)
    assert main(["diff", base, new, "--json", "--steps", "9-"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["whole_traces"] is True
    assert document["verdict"]["verdict"] == "inconclusive"


@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "{trace}", "--width", NINES],
        ["summary", "{trace}", "--width", "99999999999"],
        ["diff", "{trace}", "{trace}", "--width", NINES],
        ["diff", "{trace}", "{trace}", "--fail-above", NINES],
        ["diff", "{trace}", "{trace}", "--threshold", "1" + "0" * 400],
        ["diff", "{trace}", "{trace}", "--threshold", NINES + "%"],
        ["summary", "{trace}", "--cycle", NINES],
        ["summary", "{trace}", "--workers", NINES],
        ["summary", "{trace}", "--workers", "99999999999"],
        ["view", "{trace}", "--cycle", NINES],
        ["export", "{trace}", "-o", "{out}", "--around-gap", NINES],
        ["export", "{trace}", "-o", "{out}", "--around-gap", "99999999999"],
        ["export", "{trace}", "-o", "{out}", "--cycle", NINES],
        ["export", "{trace}", "-o", "{out}", "--workers", NINES],
        ["serve", "{trace}", "--port", NINES],
        ["serve", "{trace}", "--cycle", NINES],
        ["capture", "--active", NINES, "-c", "pass"],
        ["capture", "--wait", NINES, "-c", "pass"],
        ["capture", "--warmup", "99999999999", "-c", "pass"],
        ["capture", "--nproc", NINES, "-c", "pass"],
        ["capture", "--nproc", "100000", "-c", "pass"],
        ["capture", "--rank-timeout", NINES, "-c", "pass"],
        ["capture", "--rank-timeout", "1e999", "-c", "pass"],
    ],
)
def test_a_long_or_huge_number_is_a_usage_error(tmp_path, capsys, argv):
    trace, out = str(SAMPLE), str(tmp_path / "out.json")
    argv = [a.format(trace=trace, out=out) for a in argv]
    assert main(argv) == 2
    line = one_line_error(capsys)
    assert "argument --" in line, line
    assert not Path(out).exists()


def test_capture_steps_from_time_too_long_is_a_usage_error(capsys):
    assert main(["capture", "--steps-from", f"time:{NINES}", "--no-view", "-c", "pass"]) == 2
    line = one_line_error(capsys)
    assert "--steps-from time:SECONDS" in line and "too long" in line
    assert main(["capture", "--steps-from", "time:1e999", "--no-view", "-c", "pass"]) == 2
    assert "too large" in one_line_error(capsys)


@pytest.mark.parametrize(
    "args, said",
    [
        (["--window", f"+0ms..+{NINES}ms"], "too large"),
        (["--window", f"{NINES}ms.."], "too large"),
        (["--step", f"1-{NINES}"], "too large a number"),
        (["--step", NINES], "too large a number"),
        (["--step", "1-999999999"], "too many"),
        (["--step", "1-600000,600001-1200000"], "too many"),
        (["--context", f"{NINES}ms", "--around-gap", "1"], "too large"),
    ],
)
def test_export_long_times_and_steps_are_one_line(tmp_path, capsys, args, said):
    """The export's own values keep its status for a value it cannot use (1, one line: as
    `--window 1..2` and `--step 99`); a 5,000-digit one is no traceback."""
    out = tmp_path / "out.json"
    assert main(["export", str(SAMPLE), "-o", str(out), *args]) == 1
    line = one_line_error(capsys)
    assert said in line, line
    assert not out.exists()


def test_export_job_step_too_long_is_one_line(tmp_path, capsys):
    from test_job import write_job

    folder = tmp_path / "job"
    write_job(folder)
    out = tmp_path / "out.zip"
    assert main(["export", str(folder), "-o", str(out), "--step", f"1-{NINES}"]) == 1
    assert "too large a number" in one_line_error(capsys)
    assert main(["export", str(folder), "-o", str(out), "--window", f"+0ms..+{NINES}ms"]) == 1
    assert "too large" in one_line_error(capsys)
    assert not out.exists()


def test_the_int_limit_is_what_was_hit():
    """The guard matters: without it Python itself refuses these digits."""
    with pytest.raises(ValueError, match="Exceeds the limit"):
        int(NINES)
    assert sys.get_int_max_str_digits() < len(NINES)


def test_capture_negative_counts_keep_their_own_message(capsys):
    """The bounds leave room for the capture's own checks (its messages, status 2)."""
    assert main(["capture", "--wait", "-1", "--no-view", "-c", "pass"]) == 2
    assert "--wait and --warmup must be 0 or more" in one_line_error(capsys)
    assert main(["capture", "--nproc", "-2", "--no-view", "-c", "pass"]) == 2
    assert "--nproc needs 1 or more ranks" in one_line_error(capsys)
