"""`kinetoscope check`: the budget vocabulary (kinetoscope/common/budget.py), the measured values against
`summary --json` on corpus traces, exit codes on both sides of each limit, the TOML config."""

from __future__ import annotations

import json
import os
import statistics
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import CORPUS, SAMPLES

from kinetoscope.commands.cli import main
from kinetoscope.common.budget import (
    BudgetError,
    parse_duration,
    parse_percent,
    parse_severity,
    parse_size,
)

TRACE = SAMPLES / "synthetic_gpu_training.pt.trace.json.gz"
# Steps, GPU activity, memory events and findings of several severities; and a CPU-only one.
CORPUS_TRACES = [
    "kineto/2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz",
    "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    "hta/nccl_parser_config_nccl_data.json.gz",
    "hta/cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta/critical_path_alexnet_trace.json.gz",  # no ProfilerStep#N: step budgets have no data
]
SEVERITIES = ("info", "warning", "critical")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- the vocabulary ---------------------------------------------------------------------------


def test_percent_forms_and_bounds():
    assert parse_percent("20%") == 20
    assert parse_percent(" 12.5 % ") == Fraction(25, 2)
    assert parse_percent("0") == 0 and parse_percent("100%") == 100
    assert parse_percent(".5%") == Fraction(1, 2)
    for bad in ("100.001%", "-1%", "1e1", "nan", "inf", "20%%", "", "%", "twenty"):
        with pytest.raises(BudgetError):
            parse_percent(bad)


def test_duration_is_exact_integer_ns():
    assert parse_duration("120ms") == 120_000_000
    assert parse_duration("1.5s") == 1_500_000_000
    assert parse_duration("250 us") == parse_duration("250µs") == 250_000
    assert parse_duration("0.000000001s") == 1
    assert parse_duration("1000000s") == 10**15
    for bad in ("120", "1.5", "0.5ns", "1000001s", "-3ms", "1e3ms", "3 minutes", "ms"):
        with pytest.raises(BudgetError):
            parse_duration(bad)


def test_size_units():
    assert parse_size("60GiB") == 60 << 30
    assert parse_size("60 GB") == 60 * 10**9
    assert parse_size("1.5KiB") == 1536
    assert parse_size("4096B") == 4096
    assert parse_size("1mib") == 1 << 20
    for bad in ("60", "0.5B", "2EiB", "2000000TiB", "-1GiB", "1 GiBs"):
        with pytest.raises(BudgetError):
            parse_size(bad)


def test_severity():
    assert parse_severity("Warning") == "warning"
    with pytest.raises(BudgetError):
        parse_severity("error")


def test_long_numbers_refused_before_conversion():
    digits = "9" * 5000
    for parse, text in (
        (parse_percent, digits),
        (parse_duration, digits + "ms"),
        (parse_size, digits + "B"),
        (parse_duration, "1." + "0" * 5000 + "s"),
    ):
        with pytest.raises(BudgetError, match="too long") as caught:
            parse(text)
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_long_number_is_one_line_exit_2(capsys):
    code, out, err = run(capsys, "check", str(TRACE), "--max-step", "1" + "0" * 5000 + "ms")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kinetoscope: --max-step: ")


# -- usage --------------------------------------------------------------------------------------


def test_no_budget_is_a_usage_error(capsys):
    code, _, err = run(capsys, "check", str(TRACE))
    assert code == 2 and "no budget to check" in err


def test_unreadable_trace_exits_1(capsys, tmp_path):
    code, _, err = run(capsys, "check", str(tmp_path / "missing.json"), "--max-step", "1ms")
    assert code == 1 and err.strip().endswith("no such file")
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    code, _, err = run(capsys, "check", str(bad), "--max-step", "1ms")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err


def test_usage_error_wins_over_a_missing_trace(capsys, tmp_path):
    code, _, _ = run(capsys, "check", str(tmp_path / "missing.json"), "--max-step", "12")
    assert code == 2


# -- measured values equal the summary document's ------------------------------------------------


def expected_values(summary: dict) -> dict[str, object]:
    """Each budget's value, computed here from `summary --json` as docs/check.md defines it."""
    values: dict[str, object] = {}
    windows = [
        (100 * g["idle_us"] / (g["window_end_us"] - g["window_start_us"]))
        for g in summary["gpu"]
        if g["window_start_us"] is not None and g["window_end_us"] > g["window_start_us"]
    ]
    values["max-gpu-idle"] = max(windows) if windows else None
    steps = [s["dur_us"] for s in summary["steps"]]
    values["max-step"] = statistics.median(steps) / 1000 if steps else None
    values["max-longest-step"] = max(steps) / 1000 if steps else None
    peaks = [
        m["peak_allocated_bytes"]
        for m in summary["memory"]
        if m["device_type"] not in (None, 0) and m["peak_allocated_bytes"] is not None
    ]
    values["max-peak-memory"] = max(peaks) if peaks else None
    return values


def corpus_trace(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.skip("corpus not present")
    return path


@pytest.mark.corpus
@pytest.mark.parametrize("name", CORPUS_TRACES)
def test_measured_values_equal_summary_json(capsys, name):
    path = corpus_trace(name)
    code, out, _ = run(capsys, "summary", str(path), "--json")
    assert code == 0
    summary = json.loads(out)
    code, out, _ = run(
        capsys,
        "check",
        str(path),
        "--json",
        "--max-gpu-idle",
        "100%",
        "--max-step",
        "1000000s",
        "--max-longest-step",
        "1000000s",
        "--max-findings",
        "info",
        "--max-peak-memory",
        "1000TiB",
    )
    document = json.loads(out)
    expected = expected_values(summary)
    measured = {row["budget"]: row for row in document["budgets"]}
    for key, value in expected.items():
        row = measured[key]
        if value is None:
            assert row["measured"] is None and row["passed"] is False, key
        else:
            assert row["measured"] == pytest.approx(value, abs=1e-3), key
            assert row["passed"] is True, key
    assert measured["max-findings"]["measured"] == len(summary["findings"])
    assert measured["max-findings"]["passed"] is (not summary["findings"])
    broken = sum(1 for row in document["budgets"] if not row["passed"])
    assert code == (3 if broken else 0) and document["broken"] == broken


@pytest.mark.corpus
@pytest.mark.parametrize("name", CORPUS_TRACES[:3])
def test_exit_codes_just_above_and_below(capsys, name):
    path = corpus_trace(name)
    code, out, _ = run(capsys, "summary", str(path), "--json")
    summary = json.loads(out)
    values = expected_values(summary)
    limits: dict[str, tuple[str, str]] = {}  # budget: (just kept, just broken)
    if values["max-gpu-idle"] is not None:
        pct = Fraction(values["max-gpu-idle"])
        up = Fraction(int(pct * 10**6) + 1, 10**6)
        down = Fraction(int(pct * 10**6) - 1, 10**6)
        limits["max-gpu-idle"] = (f"{float(up):.6f}%", f"{float(down):.6f}%")
    steps = [round(s["dur_us"] * 1000) for s in summary["steps"]]
    if steps:
        median = statistics.median(steps)
        limits["max-step"] = (f"{int(median) + 1}ns", f"{int(median - 1)}ns")
        limits["max-longest-step"] = (f"{max(steps)}ns", f"{max(steps) - 1}ns")
    if values["max-peak-memory"] is not None:
        peak = values["max-peak-memory"]
        limits["max-peak-memory"] = (f"{peak}B", f"{peak - 1}B")
    present = [SEVERITIES.index(f["severity"]) for f in summary["findings"]]
    if present and max(present) < 2:
        limits["max-findings"] = (SEVERITIES[max(present) + 1], SEVERITIES[max(present)])
    elif present:
        limits["max-findings"] = ("critical", "critical")  # only the broken side exists
    assert len(limits) >= 3
    for key, (kept, broken) in limits.items():
        if key != "max-findings" or kept != broken:
            code, _, err = run(capsys, "check", str(path), f"--{key}", kept)
            assert code == 0, (key, kept, err)
        code, out, _ = run(capsys, "check", str(path), f"--{key}", broken, "--json")
        assert code == 3, (key, broken)
        assert json.loads(out)["budgets"][0]["passed"] is False


@pytest.mark.corpus
def test_cpu_only_trace_cannot_meet_gpu_budgets(capsys):
    path = corpus_trace("hta/cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    code, out, _ = run(capsys, "check", str(path), "--max-gpu-idle", "100%")
    assert code == 3
    assert "no data" in out and "no GPU activity" in out


# -- the config file ----------------------------------------------------------------------------


def test_config_file_gives_the_same_budgets_as_flags(capsys, tmp_path):
    config = tmp_path / "check.toml"
    config.write_text('max-gpu-idle = 95\nmax-step = "1s"\nmax-findings = "critical"\n')
    code_c, out_c, _ = run(capsys, "check", str(TRACE), "--config", str(config), "--json")
    code_f, out_f, _ = run(
        capsys,
        "check",
        str(TRACE),
        "--json",
        "--max-gpu-idle",
        "95",
        "--max-step",
        "1s",
        "--max-findings",
        "critical",
    )
    assert code_c == code_f
    assert json.loads(out_c)["budgets"] == json.loads(out_f)["budgets"]


def test_flag_overrides_config(capsys, tmp_path):
    config = tmp_path / "check.toml"
    config.write_text('max-step = "1ns"\n')
    code, _, _ = run(capsys, "check", str(TRACE), "--config", str(config))
    assert code == 3
    code, out, _ = run(
        capsys, "check", str(TRACE), "--config", str(config), "--max-step", "1000s", "--json"
    )
    assert code == 0 and json.loads(out)["budgets"][0]["limit_text"] == "1000s"


@pytest.mark.parametrize(
    "content, message",
    [
        ('max-stepp = "1s"\n', "unknown budget"),
        ("max-step = [\n", "not valid TOML"),
        ("max-gpu-idle = " + "9" * 5000 + "\n", "not valid TOML"),  # tomllib's own limit
        ("max-gpu-idle = " + "9" * 4000 + "\n", "too large"),
        ("max-gpu-idle = nan\n", "too large"),
        ("max-step = 12\n", "write a number and a unit"),
        ("max-step = true\n", "must be text"),
        ('[max-step]\nx = "1s"\n', "must be text"),
    ],
    ids=["unknown", "toml", "5000-digits", "4000-digits", "nan", "no-unit", "bool", "table"],
)
def test_bad_config_is_one_line_exit_2(capsys, tmp_path, content, message):
    config = tmp_path / "check.toml"
    config.write_text(content)
    code, out, err = run(capsys, "check", str(TRACE), "--config", str(config))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_config_must_be_a_regular_file(capsys, tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "check", str(TRACE), "--config", str(fifo))
    assert code == 2 and "not a regular file" in err
    code, _, err = run(capsys, "check", str(TRACE), "--config", str(tmp_path / "none.toml"))
    assert code == 2 and "no such file" in err


# -- output -------------------------------------------------------------------------------------


def test_text_and_markdown_tables(capsys):
    code, out, _ = run(
        capsys, "check", str(TRACE), "--max-step", "1ns", "--max-findings", "critical"
    )
    assert code == 3
    assert "max-step" in out and "FAIL" in out and "budgets broken" in out
    code, out, _ = run(capsys, "check", str(TRACE), "--max-step", "1000s", "--format", "md")
    assert code == 0
    assert "| budget | limit | measured | status | detail |" in out
    assert "PASS: 1 of 1 budgets kept" in out


def test_a_cut_off_trace_is_measured_and_said(capsys, tmp_path):
    import gzip

    data = gzip.decompress(TRACE.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    code, out, _ = run(capsys, "check", str(cut), "--max-step", "1000s", "--json")
    document = json.loads(out)
    assert code == 0 and document["trace_complete"] is False
    assert document["warnings"] and "ends" in document["warnings"][0]
    code, out, _ = run(capsys, "check", str(cut), "--max-step", "1000s")
    assert "incomplete" in out
    code, out, _ = run(capsys, "check", str(TRACE), "--max-step", "1000s", "--json")
    assert json.loads(out)["trace_complete"] is True


@pytest.mark.corpus
def test_kernel_budget_is_summarys_total_on_both_sides(capsys, tmp_path):
    path = corpus_trace(CORPUS_TRACES[0])
    code, out, _ = run(capsys, "summary", str(path), "--json")
    kernels = [k for k in json.loads(out)["kernels"] if k["cat"].lower() == "kernel"]
    top = kernels[0]
    total_ns = round(top["total_us"] * 1000)
    code, out, _ = run(
        capsys, "check", str(path), "--max-kernel", f"{top['name']}={total_ns}ns", "--json"
    )
    row = json.loads(out)["budgets"][0]
    assert code == 0 and row["passed"] and row["kernel"] == top["name"]
    assert row["measured"] == pytest.approx(top["total_us"] / 1000, abs=1e-6)
    assert row["detail"] == f"{top['count']:,} calls"
    code, _, _ = run(capsys, "check", str(path), "--max-kernel", f"{top['name']}={total_ns - 1}ns")
    assert code == 3
    # A name no kernel has (a renamed kernel) cannot pass unseen.
    code, out, _ = run(capsys, "check", str(path), "--max-kernel", "no_such_kernel=1s", "--json")
    assert code == 3 and json.loads(out)["budgets"][0]["measured"] is None
    # The same from a TOML table, and a kernel the summary's top 50 leaves out is found too.
    from kinetoscope.analysis import TraceSession
    from kinetoscope.analysis.summary import kernels_section
    from kinetoscope.parser import load

    every = kernels_section(TraceSession(load(str(path), write_cache=False)), limit=None)
    last = [k for k in every if k["cat"].lower() == "kernel"][-1]
    assert last["name"] not in {k["name"] for k in kernels}  # beyond the summary's 50
    config = tmp_path / "check.toml"
    lines = [f'{json.dumps(top["name"])} = "{total_ns}ns"', f'{json.dumps(last["name"])} = "1000s"']
    config.write_text("[max-kernel]\n" + "\n".join(lines) + "\n")
    code, out, _ = run(capsys, "check", str(path), "--config", str(config), "--json")
    rows = json.loads(out)["budgets"]
    assert code == 0 and [r["kernel"] for r in rows] == [top["name"], last["name"]]
    assert rows[1]["measured"] == pytest.approx(last["total_us"] / 1000, abs=1e-6)


@pytest.mark.parametrize(
    "args",
    [["--max-kernel", "abc"], ["--max-kernel", "=1ms"], ["--max-kernel", "k=12"]],
)
def test_bad_kernel_budget_is_a_usage_error(capsys, args):
    code, _, err = run(capsys, "check", str(TRACE), *args)
    assert code == 2 and err.count("\n") == 1


def test_kernel_budget_config_must_be_a_table(capsys, tmp_path):
    config = tmp_path / "check.toml"
    config.write_text('max-kernel = "k=1ms"\n')
    code, _, err = run(capsys, "check", str(TRACE), "--config", str(config))
    assert code == 2 and "must be a table" in err


def test_diff_reads_its_percentages_as_check_does(capsys):
    """`diff --fail-above` / `--threshold` and `check` share one percentage reader: the same
    forms are accepted and refused, in one line (a change may pass 100 %, a share may not)."""

    sample = str(TRACE)
    for value in ("5", "5%", "12.5 %", "150"):
        assert main(["diff", sample, sample, "--json", "--fail-above", value]) == 0, value
        capsys.readouterr()
    for value in ("1e3", "-3", "nan", "5" * 5000):
        assert main(["diff", sample, sample, "--json", "--threshold", value]) == 2, value
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("kinetoscope diff: error: argument --threshold:") and len(err) < 200
    assert main(["check", sample, "--max-gpu-idle", "150%"]) == 2
    assert "more than 100%" in capsys.readouterr().err
