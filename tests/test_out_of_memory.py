"""An analysis that runs out of memory (a MemoryError anywhere, or an AnalysisFailed wrapping
one, as `idle by cpu: AnalysisFailed: nesting: MemoryError` did) is one line naming the stage
and what would help (the trace's events and the memory they need), status 1, never a
traceback: in summary (text, JSON, CSV), diff, export, a job's summary and the viewer (issue
25). The stages are made to fail by a MemoryError put into them; one real case runs a summary
under an address-space limit (RLIMIT_AS) too small for its trace."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from kinetoscope.analysis import session as session_module
from kinetoscope.analysis.session import AnalysisFailed, memory_failure
from pilot_helpers import settle

from kinetoscope.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_training.pt.trace.json.gz"
SIZE = (120, 40)

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace missing")


def no_memory(*args, **kwargs):
    raise MemoryError()


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_memory_failure_names_the_stage():
    assert memory_failure(MemoryError()) == ""
    assert memory_failure(ValueError("x")) is None
    assert memory_failure(AnalysisFailed("steps", ValueError("x"))) is None
    nested = AnalysisFailed("idle_by_cpu", AnalysisFailed("nesting", MemoryError()))
    assert memory_failure(nested) == "nesting (for idle by cpu)"
    deeper = AnalysisFailed("findings", nested)
    assert memory_failure(deeper) == "nesting (for idle by cpu, findings)"


@pytest.mark.parametrize("output", [[], ["--json"], ["--format", "md"], ["--csv", "{out}"]])
def test_summary_out_of_memory_in_the_nesting(tmp_path, capsys, monkeypatch, output):
    from kinetoscope.parser import load

    events = load(str(SAMPLE), write_cache=False).n_events
    monkeypatch.setattr(session_module, "compute_nesting", no_memory)
    argv = ["summary", str(SAMPLE), *(a.format(out=tmp_path / "csv") for a in output)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert line.startswith(f"kinetoscope: {SAMPLE}: out of memory computing nesting"), line
    assert f"about {events:,} events need about" in line and "ulimit -v" in line
    assert captured.out == ""
    folder = tmp_path / "csv"
    assert not folder.exists() or not any(folder.iterdir())  # no CSV file half made


def test_summary_other_analysis_failure_is_one_line_too(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a broken stage")

    monkeypatch.setattr(session_module, "compute_nesting", broken)
    assert main(["summary", str(SAMPLE)]) == 1
    line = one_line(capsys.readouterr().err)
    assert "nesting" in line and "a broken stage" in line


def test_diff_out_of_memory(capsys, monkeypatch):
    monkeypatch.setattr(session_module, "compute_nesting", no_memory)
    assert main(["diff", str(SAMPLE), str(SAMPLE), "--json"]) == 1
    line = one_line(capsys.readouterr().err)
    assert "out of memory computing nesting" in line and "events need about" in line


def test_export_out_of_memory(tmp_path, capsys, monkeypatch):
    from kinetoscope.export import crop as export

    out = tmp_path / "crop.json"
    monkeypatch.setattr(export, "open_crop", no_memory)
    assert main(["export", str(SAMPLE), "-o", str(out), "--window", "+0ms..+1ms"]) == 1
    line = one_line(capsys.readouterr().err)
    assert "out of memory computing the export" in line and "events need about" in line
    assert not out.exists()
    monkeypatch.undo()
    monkeypatch.setattr(session_module, "compute_idle", no_memory)
    assert main(["export", str(SAMPLE), "-o", str(out), "--around-gap", "1"]) == 1
    line = one_line(capsys.readouterr().err)
    assert "out of memory computing idle" in line, line
    assert not out.exists()


def test_job_summary_out_of_memory(tmp_path, capsys, monkeypatch):
    from kinetoscope.analysis import job as job_module
    from test_job import write_job

    folder = tmp_path / "job"
    write_job(folder)
    monkeypatch.setattr(job_module, "analyze_job", no_memory)  # the merge of the digests
    assert main(["summary", str(folder), "--workers", "1"]) == 1
    line = one_line(capsys.readouterr().err)
    assert "out of memory computing the merge of the ranks" in line and "events need" in line
    monkeypatch.undo()
    # a rank's own analysis (in its digest): that rank's error, the others still summarised
    real = job_module._digest

    def rank_1_runs_out(path, trace, options):
        if path.endswith("rank1.json"):
            raise AnalysisFailed("idle_by_cpu", AnalysisFailed("nesting", MemoryError()))
        return real(path, trace, options)

    monkeypatch.setattr(job_module, "_digest", rank_1_runs_out)
    assert main(["summary", str(folder), "--workers", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    document = json.loads(captured.out)
    errors = json.dumps(document)
    assert "rank1.json: out of memory computing nesting (for idle by cpu)" in errors


async def test_viewer_says_out_of_memory_on_screen(monkeypatch):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.kernels import KernelsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    monkeypatch.setattr(session_module, "compute_kernels", no_memory)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        screen = await settle(pilot, TraceScreen)
        events = screen.data.trace.n_events
        await pilot.press("k")
        await settle(pilot, KernelsScreen)
        said = [str(n.message) for n in app._notifications]
        assert any("out of memory computing kernels" in m for m in said), said
        assert any(f"{events:,} events need about" in m for m in said), said
        assert isinstance(app.screen, KernelsScreen)  # still running: said, not crashed


async def test_viewer_layout_out_of_memory_is_the_error_screen(monkeypatch):
    from kinetoscope.tui.data import viewdata
    from kinetoscope.tui.trace.app import KinetoscopeApp

    def layout_runs_out(*args, **kwargs):
        raise AnalysisFailed("idle_by_cpu", AnalysisFailed("nesting", MemoryError()))

    monkeypatch.setattr(viewdata, "build_view_data", layout_runs_out)
    app = KinetoscopeApp(str(SAMPLE))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for _ in range(100):
            texts = " ".join(str(w.render()) for w in app.screen.query("Static"))
            if "out of memory" in texts:
                break
            await pilot.pause(0.05)
        assert "out of memory computing nesting (for idle by cpu)" in texts, texts


def run_capped(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `argv` in a session of its own; one that hangs (120 s) is killed with every process
    it started (a worker server keeps the pipes open), and fails the test."""
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"{argv[-1]} MB: hung (killed after 120 s)")
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # a worker server left behind
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


@pytest.mark.slow  # a 30 MB trace, and a summary per cap
@pytest.mark.parametrize("parallel", [False, True])
def test_a_real_summary_under_an_address_space_limit(tmp_path, parallel):
    """A summary of 300,000 events (some 60 MB for its analysis, 25 MB for the model, 30 MB
    of JSON) in a process allowed only 40 MB more address space than it has after its
    imports: a real MemoryError, said in one line, status 1. Decoded in this one process
    (KINETOSCOPE_WORKERS=1), as a file under the parallel threshold is; and (`parallel`) as a
    big file would be, by worker processes (the threshold lowered), which under so small a
    limit hung for ever starting a thread or stopping the worker server: it is decoded in
    this process then (parser/parallel.py, PARALLEL_MIN_HEADROOM)."""
    resource = pytest.importorskip("resource")
    trace = tmp_path / "big.json"
    events = []
    for k in range(50_000):
        t = k * 10
        events.append(
            f'{{"ph":"X","cat":"cpu_op","name":"aten::op{k % 50}","pid":1,"tid":1,'
            f'"ts":{t},"dur":8}}'
        )
        events.append(
            f'{{"ph":"X","cat":"cpu_op","name":"aten::inner","pid":1,"tid":1,"ts":{t + 1},"dur":5}}'
        )
        events.append(
            f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,'
            f'"ts":{t + 2},"dur":1,"args":{{"correlation":{k}}}}}'
        )
        events.append(
            f'{{"ph":"X","cat":"kernel","name":"k{k % 30}","pid":0,"tid":7,"ts":{t + 3},'
            f'"dur":4,"args":{{"device":0,"stream":7,"correlation":{k}}}}}'
        )
        events.append(
            f'{{"ph":"X","cat":"cpu_op","name":"aten::other","pid":1,"tid":2,"ts":{t + 1},"dur":3}}'
        )
        events.append(
            f'{{"ph":"X","cat":"python_function","name":"f.py(1): f","pid":1,"tid":2,'
            f'"ts":{t},"dur":6}}'
        )
    trace.write_text('{"schemaVersion":1,"traceEvents":[' + ",".join(events) + "]}")
    assert resource.RLIMIT_AS is not None
    script = textwrap.dedent(
        """
        import resource, sys
        import numpy, msgspec
        import kinetoscope.commands.cli, kinetoscope.present.report_summary, kinetoscope.analysis.summary
        import kinetoscope.parser
        def vm_bytes():
            for line in open("/proc/self/status"):
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
        cap = vm_bytes() + int(sys.argv[2]) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        sys.exit(kinetoscope.commands.cli.main(["summary", sys.argv[1]]))
        """
    )
    env = {"KINETOSCOPE_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "KINETOSCOPE_WORKERS": "1"}  # fmt: skip
    if parallel:
        env.update(KINETOSCOPE_WORKERS="2", KINETOSCOPE_PARALLEL_MIN_BYTES="1")
    said = []
    # Caps from too small to load (the parser's own message; stopping the worker server after
    # it was a traceback of its own) to enough for some stages of the analysis but not all
    # (an AnalysisFailed of a MemoryError: a traceback before), to enough.
    for extra_mb in range(40, 121, 20) if parallel else range(40, 121, 8):
        result = run_capped([sys.executable, "-c", script, str(trace), str(extra_mb)], env)
        if result.returncode == 0:
            assert result.stderr == "" and result.stdout.startswith("What to fix")
            continue
        assert result.returncode == 1, (extra_mb, result.returncode, result.stderr[-2000:])
        line = one_line(result.stderr)
        assert "out of memory" in line and "ulimit -v" in line, line
        assert result.stdout == ""
        said.append(line)
    assert said, "no cap was small enough"
    # Where it runs out (the load, a stage of the analysis: "computing findings: about 300,000
    # events need ...") varies from run to run; each is one line (test_summary_out_of_memory_*
    # make each stage fail for certain).
