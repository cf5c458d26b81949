"""Bugs found by a user pass of `diff`, the compile lens, the multi-rank job, `capture` and
`summary` on real and synthetic traces: each test here failed before its fix. Corpus traces come
from ../shared/corpus and are skipped when absent; synthetic traces are used where they show the
bug as well."""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys

import pytest

from kinetoscope.commands.cli import main


def _hip_trace(allocated: int) -> dict:
    """One ProfilerStep on the CPU and `[memory]` events of a HIP device (`Device Type` 6, as a
    ROCm build of torch writes them)."""
    events: list[dict] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 1000,
            "dur": 1000,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::empty",
            "pid": 1,
            "tid": 1,
            "ts": 1100,
            "dur": 100,
        },
    ]
    for i, total in enumerate((allocated // 2, allocated, allocated // 4)):
        events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": 1200 + 100 * i,
                "args": {
                    "Device Type": 6,
                    "Device Id": 0,
                    "Bytes": 1024,
                    "Addr": 1 + i,
                    "Total Allocated": total,
                    "Total Reserved": 2 * allocated,
                },
            }
        )
    return {"schemaVersion": 1, "traceEvents": events}


def test_diff_memory_peak_counts_a_rocm_trace_hip_memory(write_trace, capsys):
    """`diff h100_bert mi300_bert` showed NEW's memory peak as `–` (null): the MI300 trace's 234
    `[memory]` events are `Device Type` 6 (HIP) and the diff kept type 1 (CUDA) only, while
    docs/diff.md says "GPU `[memory]` events, any device" and `summary` lists the HIP device's
    peak (146 MB)."""
    base = write_trace(_hip_trace(4096))
    new = write_trace(_hip_trace(8192))
    code = main(["diff", str(base), str(new), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    peak = json.loads(captured.out)["overall"]["memory_peak"]
    assert (peak["base"], peak["new"], peak["delta"]) == (4096, 8192, 4096)


def test_diff_csv_says_common_for_a_name_in_both_traces(write_trace, tmp_path, capsys):
    """`diff BASE NEW --csv DIR` left the `status` cell empty for a name in both traces, where
    the text report, the Markdown and the JSON say `common`: a spreadsheet filter on `common`
    found nothing, and an empty cell means "nothing to say" (docs/csv.md)."""
    base = write_trace(_hip_trace(4096))
    new = write_trace(_hip_trace(8192))
    out = tmp_path / "csv"
    assert main(["diff", str(base), str(new), "--csv", str(out)]) == 0
    capsys.readouterr()
    (operators,) = out.glob("*.diff-operators.csv")
    with operators.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {r["name"]: r["status"] for r in rows} == {
        "ProfilerStep#…": "common",
        "aten::empty": "common",
    }


def _stepped_trace(step_us: int, steps: int = 3) -> dict:
    """`steps` ProfilerSteps of `step_us` each on the CPU, an operator in each."""
    events = []
    for i in range(steps):
        t0 = 1000 + i * 2 * step_us
        for name, cat, at, dur in (
            (f"ProfilerStep#{i + 1}", "user_annotation", t0, step_us),
            ("aten::mm", "cpu_op", t0 + 10, 50),
        ):
            events.append(
                {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": at, "dur": dur}
            )
    return {"schemaVersion": 1, "traceEvents": events}


def test_diff_viewer_per_step_mean_is_a_mean(write_trace):
    """The diff viewer's step comparison is headed `per step (mean)` (docs/tui.md: "the mean of
    the paired steps"), but it showed the sum over the pairs: two resnet50 runs of 6 steps of
    about 128 ms read `step time 769.484 ms`, where each step is 128 ms (the text report's
    `Overall: sum over the compared steps` has 769.484 ms)."""
    from kinetoscope.analysis.diff import diff_sessions
    from kinetoscope.analysis.session import TraceSession
    from kinetoscope.parser import load
    from kinetoscope.tui.diff.diff_table import metrics_text
    from kinetoscope.tui.widgets.theme import palette_of

    base = TraceSession(load(str(write_trace(_stepped_trace(1000)))))
    new = TraceSession(load(str(write_trace(_stepped_trace(1100)))))
    diff = diff_sessions(base, new)
    assert len(diff.pairs) == 3
    text = metrics_text(diff, palette_of(None)).plain
    line = next(row for row in text.splitlines() if row.startswith("step time"))
    assert line.split()[2:] == ["1.000", "ms", "1.100", "ms", "+100.000", "µs", "+10.0"], line


def test_capture_of_a_program_that_fails_inside_the_window_says_which_steps_it_wrote(tmp_path):
    """A program that raised in its 9th step (default window ProfilerStep#7..#9) wrote a trace
    of ProfilerStep#7 and #8 only, but the report said `wrote PATH (ProfilerStep#7..#9 (skip
    5, warm up 2, record 3))`: the planned window, not what the file holds. It names the steps
    written and says the program ended during the last one."""
    pytest.importorskip("torch")
    script = tmp_path / "fails.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(10):\n"
        "    m(torch.randn(2, 4)).sum().backward()\n"
        "    opt.step()\n"
        "    if i == 7:\n"
        "        raise ValueError('boom')\n"
    )
    out = tmp_path / "fails.pt.trace.json.gz"
    env = dict(os.environ)
    env.pop("KINETO_USE_DAEMON", None)
    run = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "capture", "--no-view", "-o", str(out), "fails.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 1, run.stderr
    document = json.loads(gzip.decompress(out.read_bytes()))
    steps = sorted(
        {
            e["name"]
            for e in document["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
        }
    )
    assert steps == ["ProfilerStep#7", "ProfilerStep#8"]
    wrote = next(line for line in run.stderr.splitlines() if line.startswith("kinetoscope: wrote"))
    assert "(ProfilerStep#7..#8 of the window ProfilerStep#7..#9 " in wrote, wrote
    assert "ended during ProfilerStep#8" in wrote, wrote


def test_diff_gpus_row_says_why_a_trace_names_no_gpu(write_trace, capsys):
    """The diff's verdict table read `GPUs │ BASE ?; NEW ?` for two traces without
    `deviceProperties` (the HTA sampled ranks, the 2021 resnet50 runs): a bare `?` that reads as
    a failure. It says the trace names no GPU, and why."""
    base = write_trace(_stepped_trace(1000))
    new = write_trace(_stepped_trace(1100))
    assert main(["diff", str(base), str(new), "--format", "tsv"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("GPUs\t"))
    assert row == (
        "GPUs\tBASE not named (no deviceProperties); NEW not named (no deviceProperties)"
    )


def test_diff_csv_with_an_output_option_is_a_usage_error(write_trace, tmp_path, capsys):
    """`diff BASE NEW --csv DIR --json` wrote the CSV files and printed no JSON, exit 0: the
    `--json` was dropped without a word, where `summary --csv DIR --json` is a usage error
    (docs/csv.md: `--csv` does not combine with `--json`, `--format` or `--width`)."""
    base = write_trace(_stepped_trace(1000))
    new = write_trace(_stepped_trace(1100))
    for option in (["--json"], ["--format", "md"], ["--width", "80"]):
        out = tmp_path / f"csv{len(option)}{option[-1]}"
        code = main(["diff", str(base), str(new), "--csv", str(out), *option])
        captured = capsys.readouterr()
        assert code == 2, option
        assert captured.err.count("\n") == 1 and "--csv" in captured.err
        assert not out.exists()


def test_summary_eager_islands_table_says_it_shows_the_first_ten(write_trace, capsys):
    """The compile section's eager-island table printed the first 10 islands under the title
    `Eager islands: operators outside compiled code`, with nothing saying there were more: the
    CPU demo's compiled run has 11 (`aten::to` was missing from the summary; the viewer's `c`
    lists all 11). The title says how many of how many, as the operator table does."""
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "Torch-Compiled Region: 0/0",
            "pid": 1,
            "tid": 1,
            "ts": 1000,
            "dur": 10,
        }
    ]
    for i in range(12):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i:02d}",
                "pid": 1,
                "tid": 1,
                "ts": 1020 + 10 * i,
                "dur": 5 + i,
            }
        )
    path = write_trace({"schemaVersion": 1, "traceEvents": events})
    assert main(["summary", str(path), "--format", "tsv"]) == 0
    out = capsys.readouterr().out
    title = next(line for line in out.splitlines() if line.startswith("# Eager islands"))
    assert title == "# Eager islands: operators outside compiled code (10 of 12 in --json)"


async def test_diff_viewer_of_two_cpu_traces_opens_on_the_operators(write_trace):
    """`kinetoscope demo --compile` on a CPU opens the diff of its eager and compiled runs, and
    the diff viewer opened on an empty kernels table (`0 rows`: neither trace has GPU
    activity), the operators one `T` away. With no kernel on either side it opens on the
    operators; `T` still switches."""
    from kinetoscope.tui.diff.diff_app import DiffApp
    from kinetoscope.tui.diff.diff_table import DiffScreen

    base = write_trace(_stepped_trace(1000))
    new = write_trace(_stepped_trace(1100))
    app = DiffApp(str(base), str(new))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(400):
            await pilot.pause(0.05)
            if isinstance(app.screen, DiffScreen):
                break
        screen = app.screen
        assert isinstance(screen, DiffScreen), app.exit_message
        await pilot.pause()
        assert screen.shown == "operators"
        assert screen.table.row_count == 2
        await pilot.press("T")
        assert screen.shown == "kernels"


async def test_diff_viewer_metrics_do_not_wrap_on_a_narrow_terminal(write_trace):
    """On a 70-column terminal each line of the diff viewer's step comparison wrapped in two
    (its `Δ %` alone on the next line), so the block, capped at 12 lines, hid its last
    metrics and pushed the table down. Each metric keeps one line, cut at the edge."""
    from kinetoscope.tui.diff.diff_app import DiffApp
    from kinetoscope.tui.diff.diff_table import DiffScreen

    base = write_trace(_stepped_trace(1000))
    new = write_trace(_stepped_trace(1100))
    app = DiffApp(str(base), str(new))
    async with app.run_test(size=(70, 30)) as pilot:
        for _ in range(400):
            await pilot.pause(0.05)
            if isinstance(app.screen, DiffScreen):
                break
        assert isinstance(app.screen, DiffScreen), app.exit_message
        await pilot.pause()
        metrics = app.screen.query_one("#diff-metrics")
        # the heading and `step time` (the only metric these traces have)
        assert metrics.size.height == 2


def test_diff_steps_option_on_traces_without_steps_is_not_ignored(write_trace, capsys):
    """`diff A B --steps 2` of two traces without ProfilerSteps compared the whole traces and
    gave a verdict (`NEUTRAL`) as if `--steps` had not been given: the pair asked for does not
    exist. docs/diff.md: `--steps` picking none makes the traces not comparable (the verdict
    `inconclusive`, the reason said)."""

    def stepless(dur: int) -> dict:
        events = [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 1000,
                "dur": dur,
            }
        ]
        return {"schemaVersion": 1, "traceEvents": events}

    base, new = write_trace(stepless(100)), write_trace(stepless(100))
    assert main(["diff", str(base), str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["verdict"] == "neutral"
    assert main(["diff", str(base), str(new), "--json", "--steps", "2"]) == 0
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict["verdict"] == "inconclusive"
    assert any(reason.startswith("--steps picks none") for reason in verdict["reasons"])


@pytest.mark.parametrize(
    "argv, said",
    [
        ([], "nothing to run"),
        (["--", "--bogus"], "unknown option --bogus"),
        (["--active", "0", "missing.py"], "--active must be 1 or more"),
        (["--steps-from", "bogus", "missing.py"], "unknown step source"),
        (["--nproc", "0", "train.py"], "--nproc needs 1 or more ranks"),
    ],
)
def test_capture_usage_errors_exit_2(tmp_path, monkeypatch, capsys, argv, said):
    """`kinetoscope --help` says status 2 is a usage error, as for every other command; capture's
    own usage errors (no program, an unknown option, an option's value out of range) exited 1,
    and an option's mistake was hidden behind a missing script's. A missing script is still an
    error (1), not a usage one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    code = main(["capture", "--no-view", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert said in err and err.count("\n") == 1, err
    assert main(["capture", "--no-view", "missing.py"]) == 1
    assert "missing.py" in capsys.readouterr().err


_NO_STEP_RANK = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.ones(4)
dist.all_reduce(x)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_nproc_capture_without_steps_says_each_reason_once_and_leaves_no_folder(tmp_path):
    """`capture --nproc 2` of a program that never steps: each rank's 'no trace' reason was
    printed twice (by the rank and in the report) and the empty run folder was left behind. The
    exit status is the program's, as for a single-process capture (0 here)."""
    (tmp_path / "nostep.py").write_text(_NO_STEP_RANK)
    (tmp_path / "single.py").write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    run_dir = tmp_path / "run"

    def capture(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kinetoscope", "capture", "--no-view", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )

    single = capture("-o", str(tmp_path / "one.pt.trace.json.gz"), "single.py")
    assert "no trace written: no steps were seen" in single.stderr
    job = capture("--nproc", "2", "-o", str(run_dir), "nostep.py")
    assert job.returncode == single.returncode == 0, job.stderr
    assert "0 of 2 ranks wrote their traces" in job.stderr
    for rank in (0, 1):
        said = [line for line in job.stderr.splitlines() if f"rank {rank}" in line]
        assert len([line for line in said if "no steps were seen" in line]) == 1, job.stderr
    assert not run_dir.exists()


async def test_compile_view_steps_table_without_profiler_steps_says_why(tmp_path):
    """The compile view's S table on a trace without ProfilerStep# said only '0 rows'; like the
    viewer's other empty tables, its title now says why."""
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.compile_view import CompileScreen
    from test_tui_compile import X, open_compile_view
    from test_tui_drilldown import press

    events = [
        X("aten::embedding", 10, 50),
        X("Torch-Compiled Region: 0/0", 70, 430),
        X("CompiledFunction", 80, 410),
        X("cpp_fused_add_relu_0", 100, 200),
        X("aten::topk", 600, 200),
    ]
    path = tmp_path / "nosteps.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_compile_view(pilot)
        assert screen.shown == "islands"
        await press(pilot, "S")
        assert isinstance(screen, CompileScreen) and screen.shown == "steps"
        title = str(screen.query_one("#table-title").render())
        assert screen.table.row_count == 0
        assert "no ProfilerStep# annotations in the trace" in title, title


def test_cpu_only_job_ranks_and_rank_steps_agree_on_the_gpu_columns(tmp_path):
    """A gloo (CPU-only) job: ranks.csv and the viewer's per-rank table gave a mean compute (CPU
    ops) and 'exposed comm' (time in collectives) while rank-steps.csv, the steps-by-rank table
    and the job document leave those GPU columns empty for CPU-only ranks (as documented): the
    per-rank means now agree with the per-step columns they are means of."""
    import math

    from kinetoscope.analysis.job import analyze_job, digest_rank
    from kinetoscope.parser.ranks import discover
    from kinetoscope.tui.job.job_ranks import rank_breakdown, rank_rows
    from test_job import gloo_rank

    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(3):
        (folder / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, late=2)))
    out = tmp_path / "out"
    assert main(["summary", str(folder), "--csv", str(out), "--workers", "1"]) == 0

    def table(name: str) -> list[dict[str, str]]:
        with open(out / f"job.{name}.csv", newline="") as handle:
            return list(csv.DictReader(handle))

    steps = table("rank-steps")
    assert len(steps) == 6
    for column in ("compute_us", "exposed_comm_us"):
        assert {row[column] for row in steps} == {""}, column
    assert {row["cpu_busy_us"] for row in steps} != {""}  # what the CPU did is still there
    for row in table("ranks"):
        assert row["mean_compute_us"] == row["mean_exposed_comm_us"] == "", row
    files = discover([str(folder)])
    job = analyze_job([digest_rank(f.path) for f in files.files], files)
    for row in rank_rows(job):
        shown = rank_breakdown(row)
        assert math.isnan(shown["compute"]) and math.isnan(shown["comm"]), shown
