"""Bugs found by a user pass over the day's features (serve, diff statistics, job health, CSV,
memory per operator, the API and sql, the viewer's help and tables) on real and synthetic traces:
each test here failed before its fix."""

from __future__ import annotations

from rich.console import Console

from kinetoscope.present.report_summary import NAME, NUMBER, STACK, Column, Section


def _render(section: Section, width: int) -> str:
    console = Console(width=width, force_terminal=False, color_system=None)
    with console.capture() as captured:
        console.print(section)
    return captured.get()


def test_summary_headers_wrap_at_words_never_cut_mid_word() -> None:
    # At 80 columns the kernels table read `launched mostly b` and the gaps table
    # `CPU stack (innermost las`: a name column's header was cut like its cells.
    section = Section(
        "Top GPU kernels",
        [
            Column("kernel", NAME),
            Column("count", NUMBER),
            Column("launched mostly by", NAME),
            Column("CPU stack (innermost last)", STACK),
        ],
    )
    section.add_row("k" * 40, "1", "b" * 40, "c > " * 20)
    text = _render(section, 80)
    header = "".join(line for line in text.splitlines() if "┃" in line)
    words = header.replace("┃", " ").split()
    for word in ["launched", "mostly", "by", "CPU", "stack", "(innermost", "last)"]:
        assert word in words, (word, text)


def test_top_allocating_operators_lists_only_operators_that_allocated(write_trace, capsys):
    # The table listed outer frames and freeing-only operators with 0 allocs and 0 B under
    # "Top allocating operators" (seven such rows on the MI300 BERT trace).
    from test_memory_lifetimes import known_trace

    from kinetoscope.commands.summary import run_summary

    assert run_summary(str(write_trace(known_trace())), width=160) == 0
    out = capsys.readouterr().out
    table = out[out.index("Top allocating operators") :]
    table = table[: table.index("└")]
    operators = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]
    assert "aten::A" in operators and "aten::C" in operators
    assert "aten::B" not in operators  # it only frees (A's allocations)


def test_steps_to_settle_is_the_smallest_count_that_settles_it() -> None:
    # `diff A A` on a 2-step trace said "about 2 steps each would settle it" with 2 steps each
    # and the interval still wide: the count's fixed-point iteration swung between 2 and 5 and
    # stopped on 2. Truth: the smallest n whose interval at the same spread fits in ±tau.
    import math

    import numpy as np
    from kinetoscope.analysis.diff_stats import (
        Interval,
        log_threshold,
        steps_to_settle,
        t_quantile,
        welch_log,
    )

    tau = log_threshold(5.0)
    steps = [607_312_000, 622_928_000]  # the two steps of trace_filter_sampled_rank-0
    same = welch_log(steps, steps)
    assert same is not None and same.high > tau  # wide: the interval reaches past +5 %

    def half(iv: Interval, n: int) -> float:
        return t_quantile(0.975, 2 * n - 2) * math.sqrt((iv.sd_base**2 + iv.sd_new**2) / n)

    def check(iv: Interval) -> None:
        n = steps_to_settle(iv, tau)
        gap = abs(abs(iv.estimate) - tau)
        assert n is not None and half(iv, n) <= gap, (iv, n)
        assert n == 2 or half(iv, n - 1) > gap, (iv, n)

    check(same)
    assert steps_to_settle(same, tau) == 3
    rng = np.random.default_rng(5)
    for _ in range(300):
        sd_b, sd_n = rng.uniform(0.001, 0.2, 2)
        estimate = rng.uniform(-0.2, 0.2)
        if abs(abs(estimate) - tau) < 1e-3:
            continue
        check(Interval(estimate, estimate - 1, estimate + 1, 0.95, 2, 2, sd_b, sd_n, 2.0))


def test_open_job_with_no_readable_rank_raises(tmp_path) -> None:
    # `summary DIR` ends with status 1 when no rank could be read; open_job returned a Job of
    # ranks that were all 'not loaded' (open_job('/etc/passwd') was a 1-rank job).
    import pytest

    import kinetoscope
    from kinetoscope.api import TraceError

    (tmp_path / "rank0.json").write_text("not json at all")
    (tmp_path / "rank1.json").write_text("{}")
    with pytest.raises(TraceError, match=r"no rank could be read \(.*rank0\.json: not a trace"):
        kinetoscope.open_job(tmp_path)
    with pytest.raises(TraceError, match="no rank could be read"):
        kinetoscope.open_job([tmp_path / "rank0.json"])


async def test_job_overview_cell_keeps_its_wait_and_the_table_title_names_hidden_columns():
    # On the DLRM job at 120x40 and 80x24 the cell line ran past its 3 lines: cut mid-phrase
    # ('host time', 'host launch') and its `waited` lost; the per-rank table hid up to ten
    # columns at 80 wide with nothing saying so (other tables' titles do).
    import pytest
    from conftest import CORPUS
    from kinetoscope.tui.job.job_app import JobApp
    from test_tui_job import overview

    job = CORPUS / "multirank" / "dlrm_8rank"
    if not job.is_dir():
        pytest.skip("../shared/corpus is absent")
    for size in [(120, 40), (80, 24)]:
        app = JobApp([str(job)], workers=1)
        async with app.run_test(size=size) as pilot:
            screen = await overview(pilot)
            await pilot.pause()
            cell = screen.query_one("#ranks-cell")
            plain = str(cell.render())
            width = cell.content_region.width
            needed = cell.get_content_height(cell.size, app.size, width)  # past max-height
            assert needed <= 3, (needed, plain)  # the pane's max-height
            assert "step 12.509 ms · waited 1.534 ms" in plain
            assert plain.endswith("Enter opens its timeline")
            assert "smaller phase" in plain
            title = str(screen.query_one("#ranks-breakdown-title").render())
            hidden = screen.breakdown.hidden_columns()
            assert hidden, size
            assert (
                f"hidden at this width: {', '.join(hidden)}" in title
                or f"{len(hidden)} columns hidden" in title
            ), title


def test_sql_reads_a_job_bundle_as_its_job(tmp_path, capsys) -> None:
    # `summary job.zip` and `view job.zip` read a bundle as the job; `sql job.zip` said
    # "not a trace (binary data, not JSON)".
    import json

    from test_job import gloo_rank

    from kinetoscope.commands.cli import main

    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(3):
        (folder / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, late=2)))
    bundle = tmp_path / "job.zip"
    assert main(["export", str(folder), "-o", str(bundle), "--step", "1"]) == 0
    capsys.readouterr()
    query = "SELECT rank, count(*) AS n FROM step GROUP BY rank ORDER BY rank"
    assert main(["sql", str(bundle), query, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == ["rank,n", "0,1", "1,1", "2,1"]
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK\x03\x04" + b"\0" * 40)
    assert main(["sql", str(broken), "SELECT 1"]) == 1
    assert "broken.zip" in capsys.readouterr().err


def test_diff_steps_from_zero_is_refused_not_the_last_pair_twice(capsys) -> None:
    # `diff A A --steps 0-` compared "4 of 3 paired steps": pair 0 became index -1, the last.
    import pytest
    from conftest import SAMPLES
    from kinetoscope.analysis.diff import StepSpecError
    from kinetoscope.analysis.diff import parse_step_pairs as parse_steps

    from kinetoscope.commands.cli import main

    for spec in ["0-", "0", "0-2", "00-"]:
        with pytest.raises(StepSpecError, match="from 1"):
            parse_steps(spec)
    assert parse_steps("1-") == [1, -1]
    sample = str(SAMPLES / "demo_cpu.pt.trace.json.gz")
    assert main(["diff", sample, sample, "--steps", "0-", "--format", "text"]) == 2
    assert "is not a range of step numbers from 1" in capsys.readouterr().err


async def test_a_tables_title_says_its_hidden_columns_within_its_line():
    # The diff viewer's kernels title at 80x24 on two corpus ranks read "… · by Δ ↓ · 7
    # columns": the short form "7 columns hidden" was used without checking that it fits.
    import pytest
    from conftest import CORPUS
    from kinetoscope.tui.diff.diff_app import DiffApp
    from test_tui_diff import diff_screen

    base = CORPUS / "hta" / "trace_filter_sampled_rank-0.json.gz"
    new = CORPUS / "hta" / "trace_filter_sampled_rank-1.json.gz"
    if not (base.is_file() and new.is_file()):
        pytest.skip("../shared/corpus is absent")
    app = DiffApp(str(base), str(new))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await diff_screen(pilot)
        await pilot.pause(0.2)
        title = screen.query_one("#table-title")
        text = str(title.render())
        hidden = screen.table.hidden_columns()
        assert hidden
        assert len(text) <= title.content_region.width, text
        assert text.endswith("hidden"), text
        assert f"{len(hidden)} " in text


async def test_the_diff_viewers_verdict_shows_its_reasons_whole():
    # At 80x24 and 120x40 the verdict pane held 2 lines: on two corpus ranks it ended at
    # "the interval is wide" / "about 4 steps each", the rest of the reason cut off.
    import pytest
    from conftest import CORPUS
    from kinetoscope.tui.diff.diff_app import DiffApp
    from test_tui_diff import diff_screen

    base = CORPUS / "hta" / "trace_filter_sampled_rank-0.json.gz"
    new = CORPUS / "hta" / "trace_filter_sampled_rank-1.json.gz"
    if not (base.is_file() and new.is_file()):
        pytest.skip("../shared/corpus is absent")
    for size in [(80, 24), (120, 40)]:
        app = DiffApp(str(base), str(new))
        async with app.run_test(size=size) as pilot:
            screen = await diff_screen(pilot)
            await pilot.pause(0.2)
            pane = screen.query_one("#diff-verdict")
            text = str(pane.render())
            assert "would settle it (within -4.76 % .. +5 %, at this noise and estimate)" in text
            width = pane.content_region.width
            assert pane.get_content_height(pane.size, app.size, width) <= pane.size.height
            assert screen.table.size.height >= 4  # header and three rows still


async def test_job_overview_with_every_rank_dead_says_why_within_its_title():
    # A real 2-rank gloo job whose rank 1 raised (rank 0 then died on the lost peer): the
    # overview's title was cut at 80 columns mid-phrase ('rank 1 exited with RuntimeError
    # at'), and the line under it said 'fewer than two ranks took part in matched
    # collectives' though both had (the summary: 'fewer than two ranks that did not die').
    from pathlib import Path

    from kinetoscope.tui.job.job_app import JobApp
    from test_job import write_job
    from test_rank_exit import put, record
    from test_tui_job import overview

    folder = Path("job")  # in the tests' scratch folder: the title shows the path as given
    write_job(folder, ranks=(0, 1), world=2)
    for rank in (0, 1):
        put(folder, rank, record(rank, folder / f"rank{rank}.json", world_size=2))
    for size in [(80, 24), (200, 40)]:
        app = JobApp([str(folder)], workers=1)
        async with app.run_test(size=size) as pilot:
            screen = await overview(pilot)
            await pilot.pause()
            line = str(screen.query_one("#ranks-straggler").render())
            assert "no straggler named" in line and "ranks 0, 1 failed" in line, line
            title = screen.query_one("#ranks-title")
            text = str(title.render())
            needed = title.get_content_height(title.size, app.size, title.content_region.width)
            assert needed <= 3, text
            assert "rank 0 exited with RuntimeError at ProfilerStep#1" in text
            assert text.rstrip().endswith(
                "rank 1 failed" if size[0] == 80 else "its trace is partial"
            ), text


async def test_job_timeline_title_keeps_the_clock_offsets():
    # The job timeline's title was one line: on the DLRM job at 120 columns it ended at
    # "clock offsets not applied (c):", the offsets themselves cut off.
    import pytest
    from conftest import CORPUS
    from test_tui_job_timeline import JobHost, job_in, ready

    job = CORPUS / "multirank" / "dlrm_8rank"
    if not job.is_dir():
        pytest.skip("../shared/corpus is absent")
    analysed = job_in(job)
    for size in [(120, 40), (80, 24)]:
        app = JobHost(analysed)
        async with app.run_test(size=size) as pilot:
            screen = await ready(pilot, 8)
            await pilot.pause()
            title = screen.query_one("#job-title")
            text = str(title.render())
            needed = title.get_content_height(title.size, app.size, title.content_region.width)
            assert needed <= title.size.height, text
            assert "clock offsets not applied (c): up to 1.5 µs (rank 3)" in text


async def test_kernel_detail_title_keeps_its_rows_and_sort_on_a_narrow_screen():
    # The kernel detail's title fitted the kernel's name to 70 cells whatever the width: at 80
    # columns the rows count and the sort were cut off the line.
    import pytest
    from conftest import CORPUS
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.kernels import KernelDetailScreen, KernelsScreen
    from kinetoscope.tui.trace.screens import TraceScreen
    from test_tui_drilldown import press, settle

    trace = CORPUS / "hta" / "trace_filter_sampled_rank-0.json.gz"
    if not trace.is_file():
        pytest.skip("../shared/corpus is absent")
    app = KinetoscopeApp(str(trace))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, TraceScreen)
        screen = await press(pilot, "k", until=KernelsScreen)
        await pilot.press("down")  # the second kernel: split_embedding_backward_codegen_…
        screen = await press(pilot, "enter", until=KernelDetailScreen)
        await pilot.pause(0.2)
        title = screen.query_one("#table-title")
        text = str(title.render())
        assert len(text) <= title.content_region.width, text
        assert text.startswith("split_embedding_backward")
        assert text.endswith("· 2 rows · by dur ↓"), text


def test_memory_peaks_share_of_a_hip_devices_memory(write_trace, capsys):
    # The MI300 BERT trace lists device 0 with 191.45 GiB and its [memory] events are HIP
    # (Device Type 6) on device 0, but "of device memory" was '–': only CUDA (1) was matched.
    from test_user_pass_more import _hip_trace

    from kinetoscope.commands.summary import run_summary

    trace = _hip_trace(1 << 30)  # 1 GiB allocated at the peak, 2 GiB reserved
    trace["deviceProperties"] = [
        {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 8 << 30}
    ]
    assert run_summary(str(write_trace(trace)), width=160) == 0
    out = capsys.readouterr().out
    table = out[out.index("Memory peaks ([memory] events)") :]
    # The device by name (Kineto's type 6 is HIP), no longer its raw type and id numbers.
    row = next(line for line in table.splitlines() if line.startswith("│ HIP 0 "))
    assert row.split("│")[4].strip() == "25%", row  # 2 GiB reserved of 8 GiB


def test_diff_repr_reads_as_the_verdict_says_it(write_trace):
    # repr(kinetoscope.diff(...)) read "step time 0.0 %, 1 step pairs" for two whole traces
    # (no steps), and "step time 0.675 %" where the verdict says "+0.67 % (geometric mean)".
    import kinetoscope

    flat = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                             "tid": 1, "ts": 0, "dur": 100}]}  # fmt: skip
    path = str(write_trace(flat))
    assert repr(kinetoscope.diff(path, path)) == (
        "<kinetoscope Diff: neutral, step time +0.00 %, whole traces>"
    )
    from test_user_pass_more import _stepped_trace

    base, new = write_trace(_stepped_trace(1000)), write_trace(_stepped_trace(1100))
    d = kinetoscope.diff(str(base), str(new))
    v = d.verdict()
    shown = v["change_pct"] if v["change_pct"] is not None else v["step_time_delta_pct"]
    assert repr(d) == f"<kinetoscope Diff: {v['verdict']}, step time {shown:+.2f} %, 3 step pairs>"


def test_a_bundles_csv_names_its_members_not_a_temporary_folder(tmp_path, capsys) -> None:
    # `summary job.zip --csv DIR` wrote each rank's file as /tmp/kinetoscope-bundle-…/rank0.json,
    # a folder removed when the command ends; the JSON says job.zip:rank0.json.
    import csv
    import json

    from test_job import gloo_rank

    from kinetoscope.commands.cli import main

    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(2):
        (folder / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, late=1, world=2)))
    bundle = tmp_path / "job.zip"
    assert main(["export", str(folder), "-o", str(bundle), "--step", "1"]) == 0
    out = tmp_path / "csv"
    assert main(["summary", str(bundle), "--csv", str(out)]) == 0
    capsys.readouterr()
    with open(out / "job.zip.ranks.csv", newline="") as handle:
        files = [row["file"] for row in csv.DictReader(handle)]
    assert files == [f"{bundle}:rank0.json", f"{bundle}:rank1.json"]


def test_a_bundles_ranks_are_removed_when_the_terminal_closes(tmp_path) -> None:
    # `kinetoscope job.zip` in a terminal that was closed (SIGHUP; tmux kill-session) left the
    # bundle's ranks in /tmp/kinetoscope-bundle-*: the signal ended it without unwinding.
    import json
    import os
    import signal
    import subprocess
    import sys

    from test_job import gloo_rank

    from kinetoscope.commands.cli import main

    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(2):
        (folder / f"rank{rank}.json").write_text(json.dumps(gloo_rank(rank, late=1, world=2)))
    bundle = tmp_path / "job.zip"
    assert main(["export", str(folder), "-o", str(bundle), "--step", "1"]) == 0
    child = (
        "import os, signal, sys, time\n"
        "import kinetoscope.commands.view as v\n"
        "v.terminal_problem = lambda: None\n"
        "def shown(paths, cycle=None, title=None):\n"
        "    print(paths[0], flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    time.sleep(10)\n"
        "v.run_job_view = shown\n"
        "sys.exit(v.run_bundle_view(sys.argv[1]))\n"
    )
    for number in (signal.SIGHUP, signal.SIGTERM):
        done = subprocess.run(
            [sys.executable, "-c", child.replace("SIGHUP", number.name), str(bundle)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        extracted = done.stdout.strip()
        assert extracted and "kinetoscope-bundle-" in extracted, done
        assert done.returncode == -number  # it still ends as the signal says
        assert not os.path.exists(extracted), extracted


def test_straggler_phases_excess_has_a_tables_three_decimals(capsys) -> None:
    # The DLRM job's "Straggler's phases" table read `+403 µs` and `−1.623 ms` in its excess
    # column beside `915.000 µs` in the others: prose durations in a table.
    import re

    import pytest
    from conftest import CORPUS

    from kinetoscope.commands.cli import main

    job = CORPUS / "multirank" / "dlrm_8rank"
    if not job.is_dir():
        pytest.skip("../shared/corpus is absent")
    assert main(["summary", str(job), "--width", "120", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Straggler's phases against the median rank") :]
    table = table[: table.index("└")]
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    excess = [cells[4].strip() for cells in rows]
    assert "+403.000 µs" in excess and "−1.623 ms" in excess, excess
    assert all(re.fullmatch(r"[+−]?\d+\.\d{3} (ns|µs|ms|s)|0 ns|[+−]\d+ ns", e) for e in excess)
