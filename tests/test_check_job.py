"""`kinetoscope check DIR`: every rank against the single-trace budgets, the job's own budgets
read from `summary DIR --json`'s document, on the corpus's 8-rank DLRM job and on synthetic
jobs with known truth (a late rank, a rank that failed, a missing rank, a file that is no
trace), the TOML [job] table, and hostile input."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import CORPUS, SAMPLES
from test_job import job_of, write_job
from test_rank_exit import put, record

from kinetoscope.commands.cli import main

DLRM = CORPUS / "multirank" / "dlrm_8rank"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def check_json(capsys, *args: str) -> tuple[int, dict]:
    code, out, err = run(capsys, "check", *args, "--json")
    assert code in (0, 3), err
    return code, json.loads(out)


def row(document: dict, budget: str) -> dict:
    return next(r for r in document["budgets"] if r["budget"] == budget)


def ms(us: float) -> str:
    """A limit of exactly `us` microseconds, written in ns (exact)."""
    return f"{round(us * 1000)}ns"


@pytest.fixture(scope="module")
def dlrm() -> dict:
    if not DLRM.is_dir():
        pytest.skip("the corpus's 8-rank DLRM job is absent")
    return job_of([str(DLRM)])


# -- the corpus job: the same numbers as summary DIR --json, both sides of each limit ---------


def test_per_rank_values_are_summary_dirs(capsys, dlrm):
    _, document = check_json(capsys, str(DLRM), "--max-step", "1s", "--max-gpu-idle", "100%")
    assert document["ranks"] == document["ranks_loaded"] == 8 and document["world_size"] == 8
    steps = row(document, "max-step")
    idle = row(document, "max-gpu-idle")
    assert steps["passed"] and idle["passed"]
    for rank in dlrm["ranks"]:
        median = statistics.median(s["dur_us"] for s in rank["steps"]) / 1000
        mine = next(r for r in steps["ranks"] if r["rank"] == rank["rank"])
        assert mine["measured"] == round(median, 3)
        (gpu,) = rank["gpu"]
        pct = 100 * gpu["idle_us"] / (gpu["window_end_us"] - gpu["window_start_us"])
        mine = next(r for r in idle["ranks"] if r["rank"] == rank["rank"])
        assert mine["measured"] == round(pct, 3)
    longest = max(dlrm["ranks"], key=lambda r: r["steps"][0]["dur_us"])
    assert steps["rank"] == longest["rank"] == 1  # the worst rank's value stands for the job
    assert steps["measured"] == longest["steps"][0]["dur_us"] / 1000


def test_rank_budget_just_above_and_below_names_the_rank(capsys, dlrm):
    durs = sorted((r["steps"][0]["dur_us"], r["rank"]) for r in dlrm["ranks"])
    worst_us, worst = durs[-1]
    second_us, second = durs[-2]
    code, document = check_json(capsys, str(DLRM), "--max-step", ms(worst_us))
    assert code == 0 and row(document, "max-step")["broken_ranks"] == []
    code, document = check_json(capsys, str(DLRM), "--max-step", ms(worst_us - 0.001))
    assert code == 3 and row(document, "max-step")["broken_ranks"] == [worst]
    # Two ranks over: both named, the worst first; the text table says so too.
    code, document = check_json(capsys, str(DLRM), "--max-step", ms(second_us - 0.001))
    assert code == 3 and row(document, "max-step")["broken_ranks"] == [worst, second]
    code, out, _ = run(capsys, "check", str(DLRM), "--max-step", ms(second_us - 0.001))
    lines = [line for line in out.splitlines() if "max-step" in line]
    assert len(lines) == 2 and f"│ {worst} " in lines[0] and f"│ {second} " in lines[1]
    assert "FAIL: 1 of 1 budgets broken" in out


def test_job_budgets_are_summary_dirs_numbers_on_both_sides(capsys, dlrm):
    lateness = dlrm["straggler"]["lateness_us"]
    skew = max(c["start_skew_us"] for c in dlrm["collectives"])
    assert (lateness, skew) == (4507.0, 7624.0)  # rank 7 started its one step late
    for budget, value in (("max-straggler", lateness), ("max-collective-skew", skew)):
        code, document = check_json(capsys, str(DLRM), f"--{budget}", ms(value))
        assert code == 0 and row(document, budget)["measured"] == value / 1000
        code, document = check_json(capsys, str(DLRM), f"--{budget}", ms(value - 0.001))
        assert code == 3 and not row(document, budget)["passed"]
        assert row(document, budget)["scope"] == "job"
    assert "rank 7" in row(document, "max-collective-skew")["detail"]
    code, document = check_json(
        capsys, str(DLRM), "--max-failed-ranks", "0", "--max-missing-ranks", "0",
        "--max-incomplete-ranks", "0",
    )  # fmt: skip
    assert code == 0
    assert [row(document, k)["measured"] for k in ("max-failed-ranks", "max-missing-ranks",
                                                   "max-incomplete-ranks")] == [0, 0, 0]  # fmt: skip


def test_findings_per_rank_equal_each_ranks_own_check(capsys, dlrm):
    """The budgets the job's document does not carry are each rank's single-trace check."""
    args = ("--max-findings", "critical", "--max-step", "1s", "--max-gpu-idle", "100%")
    _, document = check_json(capsys, str(DLRM), *args)
    findings = row(document, "max-findings")
    files = {r["rank"]: r["path"] for r in dlrm["ranks"]}
    for rank in (1, 7):
        _, alone = check_json(capsys, files[rank], *args)
        for mine, single in zip(document["budgets"], alone["budgets"]):
            assert mine["budget"] == single["budget"]
            one = next(r for r in mine["ranks"] if r["rank"] == rank)
            assert (one["measured"], one["detail"]) == (single["measured"], single["detail"])
        assert alone["budgets"][0]["measured"] > 0
    assert not findings["passed"] and sorted(findings["broken_ranks"]) == list(range(8))


# -- synthetic jobs with known truth ------------------------------------------------------------


def test_the_late_rank_is_the_straggler_and_its_lateness_the_budget(capsys, tmp_path):
    """Rank 1 has 400 µs more compute than rank 0 (test_job's job): it is the straggler."""
    write_job(tmp_path)
    truth = job_of([str(tmp_path)])
    lateness = truth["straggler"]["lateness_us"]
    assert truth["straggler"]["rank"] == 1 and lateness > 0
    code, document = check_json(capsys, str(tmp_path), "--max-straggler", ms(lateness))
    assert code == 0 and "rank 1" in row(document, "max-straggler")["detail"]
    code, _ = check_json(capsys, str(tmp_path), "--max-straggler", ms(lateness - 0.001))
    assert code == 3
    # The rank with the most idle GPU (least compute in its window) is the one named.
    code, document = check_json(capsys, str(tmp_path), "--max-gpu-idle", "50%")
    idle = row(document, "max-gpu-idle")
    values = {r["rank"]: r["measured"] for r in idle["ranks"]}
    assert idle["broken_ranks"] == sorted(values, key=lambda r: -values[r])


def test_a_single_rank_job_names_no_straggler_and_cannot_pass(capsys, tmp_path):
    write_job(tmp_path, ranks=(0,), world=1)
    code, document = check_json(capsys, str(tmp_path), "--max-straggler", "1s")
    assert code == 3 and row(document, "max-straggler")["measured"] is None
    assert "no straggler" in row(document, "max-straggler")["detail"]


def test_a_failed_rank_from_its_exit_record(capsys, tmp_path):
    write_job(tmp_path)
    code, document = check_json(capsys, str(tmp_path), "--fail-on-failed-rank")
    assert code == 0 and row(document, "max-failed-ranks")["measured"] == 0
    put(tmp_path, 1, record(1, tmp_path / "rank1.json"))
    code, document = check_json(capsys, str(tmp_path), "--fail-on-failed-rank")
    failed = row(document, "max-failed-ranks")
    assert code == 3 and failed["measured"] == 1 and "ranks 1 failed" in failed["detail"]
    assert any("rank 1 exited with RuntimeError" in w for w in document["warnings"])
    code, _ = check_json(capsys, str(tmp_path), "--max-failed-ranks", "1")
    assert code == 0
    code, out, _ = run(capsys, "check", str(tmp_path), "--max-failed-ranks", "0")
    assert code == 3 and "max-failed-ranks" in out and "FAIL" in out


def test_missing_ranks(capsys, tmp_path):
    write_job(tmp_path, ranks=(0, 1), world=4)
    code, document = check_json(capsys, str(tmp_path), "--max-missing-ranks", "1")
    missing = row(document, "max-missing-ranks")
    assert code == 3 and missing["measured"] == 2 and missing["detail"] == "ranks 2-3"
    code, _ = check_json(capsys, str(tmp_path), "--max-missing-ranks", "2")
    assert code == 0
    # Not budgeted: said, so a gate on the ranks present does not hide them.
    code, document = check_json(capsys, str(tmp_path), "--max-step", "1s")
    assert code == 0 and any("2 ranks missing" in w for w in document["warnings"])


def test_a_cut_off_rank_is_measured_on_what_it_holds_and_said(capsys, tmp_path):
    write_job(tmp_path)
    whole = (tmp_path / "rank2.json").read_text()
    cut = whole[: whole.index('"ncclDevKernel')]  # its step and compute kernel kept
    (tmp_path / "rank2.json").write_text(cut)
    code, document = check_json(
        capsys, str(tmp_path), "--max-step", "10ms", "--max-incomplete-ranks", "1"
    )
    assert code == 0 and not document["trace_complete"]
    steps = row(document, "max-step")
    assert next(r for r in steps["ranks"] if r["rank"] == 2)["measured"] == 10.0
    assert row(document, "max-incomplete-ranks")["measured"] == 1
    assert any(w.startswith("rank 2: ") for w in document["warnings"])
    code, _ = check_json(capsys, str(tmp_path), "--max-incomplete-ranks", "0")
    assert code == 3


def test_a_huge_world_size_counts_every_missing_rank(capsys, tmp_path):
    write_job(tmp_path, world=10**12)
    code, document = check_json(capsys, str(tmp_path), "--max-missing-ranks", str(10**9))
    missing = row(document, "max-missing-ranks")
    assert code == 3 and missing["measured"] == 10**12 - 3
    assert missing["detail"] == f"ranks 3-{10**12 - 1}"


def test_a_rank_file_that_is_no_trace_breaks_every_rank_budget(capsys, tmp_path):
    write_job(tmp_path)
    (tmp_path / "rank2.json").write_text("garbage{")
    code, document = check_json(
        capsys, str(tmp_path), "--max-step", "1s", "--max-findings", "critical"
    )
    assert code == 3
    for name in ("max-step", "max-findings"):
        budget = row(document, name)
        assert budget["broken_ranks"] == [2]
        bad = next(r for r in budget["ranks"] if r["rank"] == 2)
        assert bad["measured"] is None and "not a trace" in bad["detail"]
    assert document["ranks_loaded"] == 2 and not document["trace_complete"]
    code, document = check_json(capsys, str(tmp_path), "--max-incomplete-ranks", "0")
    assert code == 3 and row(document, "max-incomplete-ranks")["detail"] == "ranks 2"


def test_several_files_and_a_worker_pool_give_the_same_document(capsys, tmp_path):
    write_job(tmp_path)
    files = sorted(str(p) for p in tmp_path.glob("rank*.json"))
    args = ("--max-step", "1s", "--max-findings", "warning", "--max-straggler", "1s")
    _, folder = check_json(capsys, str(tmp_path), *args)
    _, named = check_json(capsys, *files, *args)
    _, pooled = check_json(capsys, str(tmp_path), *args, "--workers", "2")
    assert folder["budgets"] == named["budgets"] == pooled["budgets"]


# -- the config file ----------------------------------------------------------------------------


def test_config_job_table_and_flag_override(capsys, tmp_path):
    job = tmp_path / "job"
    write_job(job)
    lateness = job_of([str(job)])["straggler"]["lateness_us"]
    config = tmp_path / "check.toml"
    config.write_text(
        f'max-step = "1s"\n[job]\nmax-straggler = "{ms(lateness - 0.001)}"\n'
        "max-failed-ranks = 0\nmax-missing-ranks = 0\n"
    )
    code, document = check_json(capsys, str(job), "--config", str(config))
    assert code == 3
    assert [r["budget"] for r in document["budgets"]] == [
        "max-step", "max-straggler", "max-failed-ranks", "max-missing-ranks",
    ]  # fmt: skip
    code, document = check_json(
        capsys, str(job), "--config", str(config), "--max-straggler", ms(lateness)
    )
    assert code == 0 and row(document, "max-straggler")["limit_text"] == ms(lateness)


@pytest.mark.parametrize(
    "content, message",
    [
        ('[job]\nmax-stragler = "5ms"\n', "unknown job budget 'max-stragler'"),
        ("job = 3\n", "job must be a table"),
        ('[job]\nmax-straggler = "5"\n', "max-straggler: cannot read '5'"),
        ("[job]\nmax-failed-ranks = true\n", "max-failed-ranks must be text"),
        ('[job]\nmax-failed-ranks = "-1"\n', "whole number of ranks"),
        ("[job]\nmax-missing-ranks = 1.5\n", "max-missing-ranks must be text"),
        ('[job]\nmax-step = "1s"\n', "unknown job budget 'max-step'"),
        ('max-step = "120"\n', "max-step: cannot read '120'"),
        ('max-straggler = "5ms"\n', "unknown budget 'max-straggler'"),
    ],
)
def test_bad_job_config_is_one_line_exit_2(capsys, tmp_path, content, message):
    write_job(tmp_path / "job")
    config = tmp_path / "check.toml"
    config.write_text(content)
    code, out, err = run(capsys, "check", str(tmp_path / "job"), "--config", str(config))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_job_budgets_on_one_trace_are_a_usage_error(capsys, tmp_path):
    trace = str(SAMPLES / "synthetic_gpu_training.pt.trace.json.gz")
    for extra in (["--max-straggler", "5ms"], ["--fail-on-failed-rank"], ["--workers", "2"]):
        code, out, err = run(capsys, "check", trace, "--max-step", "1s", *extra)
        assert code == 2 and out == "" and extra[0] in err and "not of one trace" in err
    config = tmp_path / "check.toml"
    config.write_text('max-step = "1s"\n[job]\nmax-straggler = "5ms"\n')
    code, _, err = run(capsys, "check", trace, "--config", str(config))
    assert code == 2 and "[job] holds budgets of a job" in err


# -- hostile input ------------------------------------------------------------------------------


def one_line(err: str) -> None:
    assert err.startswith("kinetoscope: ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_folder_without_traces_exits_1(capsys, tmp_path):
    code, out, err = run(capsys, "check", str(tmp_path), "--max-step", "1s")
    assert code == 1 and out == "" and "no trace files" in err
    one_line(err)


def test_a_job_of_no_readable_rank_exits_1(capsys, tmp_path):
    (tmp_path / "rank0.json").write_bytes(b"\x00\x01 garbage")
    (tmp_path / "rank1.json").write_text("garbage{")
    for budget in (["--max-step", "1s"], ["--max-straggler", "1s"]):
        code, out, err = run(capsys, "check", str(tmp_path), *budget)
        assert code == 1 and out == "" and "no rank could be read" in err
        one_line(err)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-straggler", "5"], "--max-straggler: cannot read '5'"),
        (["--max-collective-skew", "5 parsecs"], "--max-collective-skew"),
        (["--max-failed-ranks", "9" * 5000], "--max-failed-ranks"),
        (["--max-missing-ranks", "1e3"], "whole number of ranks"),
        (["--max-step", "1s", "--max-incomplete-ranks", "two"], "whole number of ranks"),
    ],
)
def test_bad_job_budget_is_one_line_exit_2(capsys, tmp_path, args, message):
    write_job(tmp_path)
    code, out, err = run(capsys, "check", str(tmp_path), *args)
    assert code == 2 and out == "" and message in err
    one_line(err)


def test_no_budget_on_a_job_names_the_job_budgets(capsys, tmp_path):
    write_job(tmp_path)
    code, _, err = run(capsys, "check", str(tmp_path))
    assert code == 2 and "--max-straggler" in err and "--max-step" in err


def test_hostile_file_names_are_shown_cleaned(capsys, tmp_path):
    folder = tmp_path / "job"
    write_job(folder)
    (folder / "rank2.json").unlink()
    (folder / "rank2\x1b[2J\x07.json").write_text("{not json")
    code, out, err = run(capsys, "check", str(folder), "--max-step", "1s")
    assert code == 3 and "\x1b" not in out + err and "\x07" not in out + err
    assert "no data" in out and "rank2" in out  # the file was read, and named
    code, document = check_json(capsys, str(folder), "--max-step", "1s")
    assert row(document, "max-step")["broken_ranks"] == [2]


def test_a_missing_path_with_job_budgets_says_it_is_missing(capsys, tmp_path):
    code, out, err = run(capsys, "check", str(tmp_path / "nope"), "--max-straggler", "1ms")
    assert code == 1 and out == "" and "no such file" in err
    one_line(err)


def test_markdown_table_has_a_rank_column(capsys, tmp_path):
    write_job(tmp_path)
    code, out, _ = run(capsys, "check", str(tmp_path), "--max-step", "1s", "--max-straggler",
                       "1s", "--format", "md")  # fmt: skip
    assert code == 0
    assert "| budget | rank | limit | measured | status | detail |" in out
    assert "| max-step | all 3 |" in out and "| max-straggler | job |" in out
    assert "PASS: 2 of 2 budgets kept on 3 ranks" in out


def test_json_is_stable(capsys, tmp_path):
    write_job(tmp_path)
    args = (str(tmp_path), "--max-step", "1s", "--max-collective-skew", "1s")
    _, first = check_json(capsys, *args)
    _, second = check_json(capsys, *args)
    assert first == second
    assert set(first) == {
        "kinetoscope_check", "job", "world_size", "ranks", "ranks_loaded", "trace_complete",
        "warnings", "passed", "broken", "budgets",
    }  # fmt: skip
    assert set(row(first, "max-step")) == {
        "budget", "scope", "limit", "limit_text", "measured", "rank", "units", "passed",
        "detail", "broken_ranks", "ranks",
    }  # fmt: skip
    assert row(first, "max-collective-skew")["units"] == "ms"


def test_a_bundle_is_checked_as_its_folder(capsys, tmp_path):
    folder = tmp_path / "job"
    write_job(folder)
    bundle = tmp_path / "job.zip"
    assert main(["export", str(folder), "-o", str(bundle), "--step", "1"]) == 0
    capsys.readouterr()
    args = ("--max-step", "1s", "--max-straggler", "1s", "--max-findings", "critical")
    _, from_folder = check_json(capsys, str(folder), *args)
    code, from_bundle = check_json(capsys, str(bundle), *args)
    assert code == 0 and from_bundle["ranks"] == 3 and from_bundle["job"] == [str(bundle)]
    assert [r["measured"] for r in from_bundle["budgets"]] == [
        r["measured"] for r in from_folder["budgets"]
    ]
