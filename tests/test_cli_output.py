"""The command line as scripts, pipes and agents' shells meet it: the viewer without a terminal,
path errors shared by `summary` and the viewer, summaries written to a pipe (numbers whole),
Markdown and TSV, closed pipes and full disks. Each runs the real command in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS
from kinetoscope.analysis.units import fmt_table_time

from kinetoscope import __version__

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"
# Corpus traces with the widest summaries that load in seconds: the deepest CPU stacks at GPU
# idle gaps (45 and 37 levels of python_function), a 5,123-character operator name, and the
# Qwen trace of the issue (MI300, 31 levels). Measured with `kinetoscope summary --json`.
WIDEST = (
    "tracelens/h100_facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    "hta/critical_path_alexnet_trace.json.gz",
    "tracelens/mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
)
TIMEOUT = 120


def kinetoscope(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m kinetoscope ARGS` with no terminal anywhere: stdin /dev/null, output piped."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(kwargs.pop("env", {}))
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", *args],
        timeout=TIMEOUT,
        env=env,
        cwd=ROOT,
        **kwargs,
    )


def one_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert "Traceback" not in text
    return text.strip()


# -- the viewer without a terminal ------------------------------------------------------------


def test_viewer_without_a_terminal_says_so_at_once():
    result = kinetoscope(str(SAMPLE))  # used to run until killed, drawing into the pipe
    assert result.returncode == 1
    assert result.stdout == b""
    line = one_line(result.stderr)
    assert "needs a terminal" in line and f"kinetoscope summary {SAMPLE}" in line


def test_viewer_with_only_stdout_redirected_is_refused(tmp_path):
    with open(tmp_path / "out", "wb") as out:
        result = kinetoscope("view", str(SAMPLE), stdout=out)
    assert result.returncode == 1
    assert (tmp_path / "out").read_bytes() == b""
    assert "needs a terminal" in one_line(result.stderr)


def test_terminal_problem_names_the_stream_that_is_not_one(tmp_path):
    from kinetoscope.commands.view import terminal_problem

    class Tty:
        def isatty(self) -> bool:
            return True

    with open(tmp_path / "f", "w") as plain:
        assert terminal_problem(Tty(), Tty(), Tty()) is None
        assert terminal_problem(plain, Tty(), Tty()) == "stdin"
        assert terminal_problem(Tty(), plain, Tty()) == "stdout"
        assert terminal_problem(Tty(), Tty(), plain) == "stderr"


# -- one path check for summary and the viewer ------------------------------------------------


def _both(path: str) -> tuple[str, str]:
    viewer = kinetoscope(path)
    summary = kinetoscope("summary", path)
    assert viewer.returncode == 1 and summary.returncode == 1
    return one_line(viewer.stderr), one_line(summary.stderr)


def test_a_directory_is_a_job_for_summary_and_for_the_viewer(tmp_path):
    viewer, summary = _both(str(tmp_path))
    assert viewer == summary == f"kinetoscope: {tmp_path}: no trace files (*.json, *.json.gz)"


def test_several_traces_open_the_job_viewer_which_needs_a_terminal(tmp_path):
    run = kinetoscope(str(tmp_path / "r0.json"), str(tmp_path / "r1.json"))
    assert run.returncode == 1
    assert one_line(run.stderr) == (
        "kinetoscope: the viewer needs a terminal (stdin is not one); for a text report run: "
        f"kinetoscope summary {tmp_path / 'r0.json'} {tmp_path / 'r1.json'}"
    )


def test_a_missing_file_is_refused_by_both_with_the_same_line(tmp_path):
    viewer, summary = _both(str(tmp_path / "nope.json"))
    assert viewer == summary == f"kinetoscope: {tmp_path / 'nope.json'}: no such file"


def test_a_named_pipe_is_refused_by_the_viewer_and_read_as_a_stream_by_summary(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)  # a plain open would block until a writer comes: never hang on it
    viewer, summary = _both(str(fifo))
    assert viewer == f"kinetoscope: {fifo}: not a regular file (a named pipe); " + (
        "save the trace to a file first"
    )
    # Summary reads pipes as streams (tests/test_robust_framing.py); no one writes to this one.
    assert summary == f"kinetoscope: {fifo}: nothing to read (a named pipe that is empty or " + (
        "that no one writes to)"
    )


def test_an_unreadable_file_is_refused_by_both_with_the_same_line(tmp_path, monkeypatch, capsys):
    # As root every file is readable, so the refusal is checked in-process.
    from kinetoscope.commands.summary import run_summary
    from kinetoscope.commands.view import run_view

    path = tmp_path / "secret.json"
    path.write_bytes(SAMPLE.read_bytes())
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: p != str(path) and real_access(p, mode))
    assert run_view(str(path)) == 1
    viewer = capsys.readouterr().err
    assert run_summary(str(path)) == 1
    summary = capsys.readouterr().err
    assert viewer == summary == f"kinetoscope: {path}: permission denied\n"


def test_viewer_options_of_summary_point_to_summary():
    result = kinetoscope(str(SAMPLE), "--json")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.endswith(f"kinetoscope summary {SAMPLE} --json")


@pytest.mark.parametrize(
    "option",
    [["--scheduler", "local:2"], ["--workers", "2"], ["--align-clocks"], ["--cycle", "2"]],
)
def test_a_jobs_options_on_one_trace_file_are_a_usage_error(option, capsys):
    from kinetoscope.commands.cli import main

    assert main(["summary", str(SAMPLE), "--json", *option]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"kinetoscope: {option[0]} is an option of a job's summary (a folder or several "
        f"files), not of one trace file\n"
    )


def test_workers_and_scheduler_together_are_a_usage_error(tmp_path, capsys):
    from kinetoscope.commands.cli import main

    (tmp_path / "rank0.json").write_text('{"traceEvents": []}')
    (tmp_path / "rank1.json").write_text('{"traceEvents": []}')
    # Refused before any cluster is looked for (so also without Dask installed).
    assert main(["summary", str(tmp_path), "--workers", "2", "--scheduler", "local:2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "kinetoscope: --workers sets the local worker processes, --scheduler digests the ranks "
        "on a Dask cluster instead: give one of them (local:N for N local Dask workers)\n"
    )


def test_version():
    result = kinetoscope("--version")
    assert result.returncode == 0
    assert result.stdout.decode().strip() == f"kinetoscope {__version__}"


# -- closed pipes and full disks ----------------------------------------------------------------


@pytest.mark.parametrize("options", [(), ("--json",), ("--format", "tsv")])
def test_a_closed_pipe_ends_quietly(options):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte (`| head` that has had enough)
    try:
        result = kinetoscope("summary", str(SAMPLE), *options, stdout=write_end)
    finally:
        os.close(write_end)
    assert result.returncode == 0
    assert result.stderr == b""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("options", [(), ("--json",), ("--format", "md")])
def test_a_full_disk_is_one_line(options):
    with open("/dev/full", "wb") as full:
        result = kinetoscope("summary", str(SAMPLE), *options, stdout=full)
    assert result.returncode == 1
    assert one_line(result.stderr) == (
        "kinetoscope: cannot write the output: No space left on device"
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_help_into_a_full_disk_is_one_line():
    # argparse drops an error writing its help; the user must hear that nothing was written.
    with open("/dev/full", "wb") as full:
        result = kinetoscope("summary", "--help", stdout=full)
    assert result.returncode == 1
    assert one_line(result.stderr).endswith("No space left on device")


def test_help_into_a_closed_pipe_ends_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = kinetoscope("summary", "--help", stdout=write_end)
    finally:
        os.close(write_end)
    assert result.returncode == 0 and result.stderr == b""


# -- summary into a pipe: every number whole ----------------------------------------------------


def _traces() -> list:
    params = [pytest.param(SAMPLE, id="sample")]
    for name in WIDEST:
        params.append(
            pytest.param(
                CORPUS / name,
                id=name.rsplit("/", 1)[-1][:40],
                marks=[
                    pytest.mark.corpus,
                    pytest.mark.skipif(not (CORPUS / name).exists(), reason="corpus absent"),
                ],
            )
        )
    return params


def _key_numbers(document: dict) -> list[str]:
    """The report's key totals, formatted as the tables print them."""

    def dur(us: float) -> str:
        return fmt_table_time(us * 1000, align_units=False)

    numbers: list[str] = []
    for gpu in document["gpu"]:
        numbers += [dur(gpu["busy_us"]), dur(gpu["idle_us"]), f"{gpu['kernels']:,}"]
        numbers += [dur(v) for v in gpu["idle_by_cause"].values()]
    for step in document["steps"]:
        numbers.append(dur(step["dur_us"]))
    for op in document["operators"][:20]:
        numbers += [f"{op['count']:,}", dur(op["excl_us"]), dur(op["incl_us"])]
        numbers += [dur(op["gpu_self_us"]), dur(op["gpu_total_us"])]
    for kernel in document["kernels"][:20]:
        numbers += [f"{kernel['count']:,}", dur(kernel["total_us"]), dur(kernel["max_us"])]
    for gap in document["idle_gaps"]:
        numbers.append(dur(gap["dur_us"]))
    for site in (document.get("sync") or [])[:10]:
        numbers += [dur(site["total_us"]), dur(site["max_us"])]
    return numbers


CELL = re.compile(r"[│┃]")
NUMBER_CELL = re.compile(r"^[+-]?\d")  # names that start with a digit are rare; numbers all do
CUT = re.compile(r"…")


def _cells(text: str) -> list[list[str]]:
    """The table rows of the text report, split into cells (box characters as separators)."""
    rows = []
    for line in text.splitlines():
        if line.startswith(("│", "┃")):
            rows.append([cell.strip() for cell in CELL.split(line)[1:-1]])
    return rows


def _check_piped_report(text: str, document: dict) -> None:
    assert "\x1b" not in text  # no colour codes into a pipe
    for row in _cells(text):
        for cell in row:
            assert not (NUMBER_CELL.match(cell) and CUT.search(cell)), cell
    # No zero-width column: every column between two separators holds at least one cell.
    for line in text.splitlines():
        if line.startswith(("┏", "┌")):
            widths = [len(part) for part in re.split(r"[┏┳┓┌┬┐]", line)[1:-1]]
            assert all(w >= 3 for w in widths), line  # one cell of text and its padding
    flat = " ".join(" ".join(row) for row in _cells(text))
    missing = [n for n in _key_numbers(document) if n not in flat]
    assert not missing, missing[:10]


@pytest.mark.parametrize("trace", _traces())
def test_piped_summary_shows_every_number_in_full(trace, tmp_path):
    document = json.loads(kinetoscope("summary", str(trace), "--json").stdout)
    result = kinetoscope("summary", str(trace))  # stdout is a pipe, as in `| cat`
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    _check_piped_report(text, document)
    # A stack is one line, cut at the front, innermost last.
    for gap in document["idle_gaps"]:
        if len(gap["cpu_stack"]) > 1:
            innermost = gap["cpu_stack"][-1]
            assert any(row[-1].endswith(innermost[-20:]) for row in _cells(text)), innermost
    # And at a width that cannot hold every column: tables split, numbers still whole.
    narrow = kinetoscope("summary", str(trace), "--width", "80").stdout.decode()
    _check_piped_report(narrow, document)
    assert max(len(line) for line in narrow.splitlines()) <= 80


def test_stacks_are_cut_at_the_front():
    from kinetoscope.present.report_summary import cut_stack

    stack = "ProfilerStep#1 > forward > aten::linear > aten::addmm"
    assert cut_stack(stack, 100) == stack
    assert cut_stack(stack, 30) == "… > aten::linear > aten::addmm"
    assert cut_stack(stack, 15) == "… > aten::addmm"
    assert cut_stack(stack, 14) == "…> aten::addmm"
    assert cut_stack(stack, 8) == "…::addmm"


def test_names_are_cut_where_they_say_least():
    from kinetoscope.present.report_summary import NAME, NUMBER, fit_cell

    frame = "transformers/models/qwen2/modeling_qwen2.py(150): forward"
    assert fit_cell(frame, NAME, 32) == "…modeling_qwen2.py(150): forward"
    kernel = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>"
    assert fit_cell(kernel, NAME, 24) == "void at::native::vector…"
    assert fit_cell("C:\\work\\train.py", NAME, 9) == "…train.py"
    assert fit_cell("漢字漢字漢字", NAME, 7) == "漢字漢…"  # cells, not characters
    assert fit_cell("587.036 µs", NUMBER, 4) == "587.036 µs"  # numbers are never cut


def test_columns_env_sets_the_width_of_piped_tables():
    result = kinetoscope("summary", str(SAMPLE), env={"COLUMNS": "100"})
    assert max(len(line) for line in result.stdout.decode().splitlines()) <= 100


def test_markdown_and_tsv_hold_the_same_cells_uncut():
    document = json.loads(kinetoscope("summary", str(SAMPLE), "--json").stdout)
    md = kinetoscope("summary", str(SAMPLE), "--format", "md")
    tsv = kinetoscope("summary", str(SAMPLE), "--format", "tsv")
    assert md.returncode == tsv.returncode == 0
    md_text, tsv_text = md.stdout.decode(), tsv.stdout.decode()
    assert "## Top operators by self time" in md_text
    assert "|---|---|---:|---:|---:|---:|---:|" in md_text  # numbers right-aligned
    assert "…" not in md_text and "…" not in tsv_text
    # Full names, with Markdown's special characters escaped (kernel templates use < >).
    kernel = document["kernels"][0]["name"]
    assert kernel in tsv_text
    escaped = re.sub(r"[\\`*_\[\]<>|~]", lambda m: "\\" + m.group(0), kernel)
    assert escaped in md_text
    lines = tsv_text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("# Top operators"))
    assert lines[header + 1] == "operator\tcategory\tcount\tself\ttotal\tGPU self\tGPU total"
    first = lines[header + 2].split("\t")
    op = document["operators"][0]
    assert first[0] == op["name"]
    assert first[3] == fmt_table_time(op["excl_us"] * 1000, align_units=False)
    for number in _key_numbers(document):
        assert number in tsv_text


def test_plain_formats_take_any_rich_renderable():
    # A section added as a bare Rich Text (not a Section) must not break --format md / tsv.
    from rich.text import Text

    from kinetoscope.present.report_summary import markdown, tsv

    assert markdown([Text("note with [x] and *y*")]) == "note with \\[x\\] and \\*y\\*\n"
    assert tsv([Text("a\tnote")]) == "# a note\n"
