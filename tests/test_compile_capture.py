"""A tiny model under torch.compile, captured on the CPU with our own capture code: its compiled
region and its Inductor (C++) kernels are found in the trace; and `kinetoscope demo --compile`.

torch.compile runs in a subprocess (its caches and settings stay out of the test process) with
Inductor's cache in tmp_path, never in the user's home. Compiling takes tens of seconds the first
time on a small machine: the tests are marked slow.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import load

REPO = Path(__file__).resolve().parents[1]
# Inductor's C++ kernels as the profiler records them (torch 2.x names them graph_<g>_cpp_...).
CPP_KERNEL = re.compile(r"(graph_\d+_)?cpp_fused_\w+")

torch = pytest.importorskip("torch")

TINY = textwrap.dedent(
    """
    import sys
    import torch
    from kinetoscope.capture import profile

    # Inductor's C++ kernels show in the profiler only with this (a record_function each).
    torch._inductor.config.cpp.enable_kernel_profile = True
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4), torch.nn.Tanh()
    )
    compiled = torch.compile(model)
    x = torch.randn(8, 16)
    with torch.no_grad():
        compiled(x)  # compiles here, before the window
        compiled(x)
        with profile(sys.argv[1], quiet=True, force=True):
            for _ in range(3):
                compiled(x)
    """
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor-cache")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    env.pop("KINETO_USE_DAEMON", None)
    return env


def _rows_named(trace, predicate) -> np.ndarray:
    ids = np.array([i for i, s in enumerate(trace.strings) if predicate(s)], dtype=np.int64)
    return np.flatnonzero(np.isin(trace.name, ids))


def compiled_regions_and_kernels(path: Path) -> tuple[list[str], list[str], bool]:
    """(compiled region names, Inductor kernel names by instance, every kernel inside compiled
    code), from the compile lens (TraceSession.compiled); the kernels are also checked by name
    and time against the regions."""
    from kinetoscope.analysis.compile import REGION_DYNAMO

    trace = load(str(path))
    lens = TraceSession(trace).compiled
    regions = [r for r in lens.regions if r.kind == REGION_DYNAMO]
    names = [trace.name_of(r.row) for r in regions]
    kernels = _rows_named(trace, CPP_KERNEL.fullmatch)
    # The lens counts the same kernels as Inductor's (on the CPU).
    cpu_inductor = [k for k in lens.inductor if not k.on_gpu]
    assert sum(k.count for k in cpu_inductor) == len(kernels)
    assert all(k.kind == "cpp" for k in cpu_inductor)
    inside = all(
        bool(lens.in_compiled[k])
        and any(
            r.start <= trace.start[k] and trace.start[k] + trace.dur[k] <= r.end
            for r in lens.regions  # the backward's kernels run in CompiledFunctionBackward
        )
        for k in kernels.tolist()
    )
    return names, [trace.name_of(int(k)) for k in kernels], inside


@pytest.mark.slow
def test_tiny_compiled_model_on_cpu(tmp_path: Path) -> None:
    script = tmp_path / "tiny_compiled.py"
    script.write_text(TINY)
    out = tmp_path / "tiny.pt.trace.json.gz"
    result = subprocess.run(
        [sys.executable, str(script), str(out)],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    regions, kernels, inside = compiled_regions_and_kernels(out)
    # Three calls of one compiled frame: one region each, compile id 0 (no recompile).
    assert len(regions) == 3
    assert set(regions) == {"Torch-Compiled Region: 0/0"}
    # relu and tanh, each its own C++ kernel (the matmuls are extern addmm calls), per call.
    assert sorted(kernels) == sorted(["graph_0_cpp_fused_relu_0", "graph_0_cpp_fused_tanh_1"] * 3)
    assert inside
    # Inductor wrote its cache where it was told, not into the home folder.
    assert any((tmp_path / "inductor-cache").iterdir())


@pytest.mark.slow
def test_demo_compile_writes_both_traces(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "demo", "--compile", "--cpu", "--no-view"]
        + ["-o", str(folder)],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    eager, compiled = folder / "eager.pt.trace.json.gz", folder / "compiled.pt.trace.json.gz"
    assert eager.is_file() and compiled.is_file()
    assert f"kinetoscope diff {eager} {compiled}" in result.stderr
    eager_regions, eager_kernels, _ = compiled_regions_and_kernels(eager)
    assert eager_regions == [] and eager_kernels == []
    regions, kernels, inside = compiled_regions_and_kernels(compiled)
    # Three recorded steps, each with its compiled forward (and backward) region(s).
    assert len(regions) >= 3
    assert all(r.startswith("Torch-Compiled Region: ") for r in regions)
    assert kernels and inside
    # Compiled in the first step, outside the window: no compilation inside it, no recompile.
    lens = TraceSession(load(str(compiled))).compiled
    assert lens.compiling.count == 0
    assert lens.recompiled_frames() == ()
    assert lens.share is not None and 0 < lens.share < 1
    # The model's matmuls all ran in compiled code; the optimizer and the loss stayed eager.
    islands = {island.name for island in lens.eager_islands}
    assert not islands & {"aten::linear", "aten::addmm", "aten::mm", "aten::relu"}
    assert {"aten::add_", "aten::cross_entropy_loss"} <= islands
    # The diff the command opens on a terminal runs on the two traces.
    diff = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "diff", str(eager), str(compiled)],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert diff.returncode == 0, diff.stderr[-2000:]
    assert "cpp_fused_" in diff.stdout
    # Both runs recorded the same steps.
    for path in (eager, compiled):
        trace = load(str(path))
        steps = _rows_named(trace, lambda s: s.startswith("ProfilerStep#"))
        assert sorted({trace.name_of(int(r)) for r in steps}) == [
            "ProfilerStep#2",
            "ProfilerStep#3",
            "ProfilerStep#4",
        ]


def test_demo_compile_refuses_a_file_as_its_folder(tmp_path: Path) -> None:
    taken = tmp_path / "taken.pt.trace.json.gz"
    taken.write_text("x")
    result = subprocess.run(
        [sys.executable, "-m", "kinetoscope", "demo", "--compile", "--cpu", "--no-view"]
        + ["-o", str(taken)],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1
    assert "is not a folder" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("has_diff", [True, False])
def test_demo_compile_opens_the_diff_on_a_terminal(tmp_path: Path, monkeypatch, has_diff) -> None:
    """On a terminal: `kinetoscope diff EAGER COMPILED`; without a diff command, the compiled
    run's trace in the viewer. (The runs themselves are replaced: the slow test makes them.)"""
    import argparse

    import kinetoscope.capture.demo as demo
    from kinetoscope.capture.runner import Outcome
    from kinetoscope.capture.session import CaptureOptions, CaptureResult

    import kinetoscope.commands.capture as capture_cli
    import kinetoscope.commands.cli as cli
    import kinetoscope.commands.view as viewer

    options = CaptureOptions()
    eager, compiled = tmp_path / "eager.pt.trace.json.gz", tmp_path / "compiled.pt.trace.json.gz"
    done = Outcome(exit_code=0)
    monkeypatch.setattr(
        demo,
        "capture_compile_demo",
        lambda folder, force, cpu_only: (
            done,
            CaptureResult(eager, 3, options),
            CaptureResult(compiled, 3, options),
        ),
    )
    opened: list[object] = []
    monkeypatch.setattr(cli, "main", lambda argv: opened.append(("main", argv)) or 0)
    monkeypatch.setattr(
        viewer,
        "run_view",
        lambda path, open_findings=False: opened.append(("view", path, open_findings)) or 0,
    )
    commands = ("view", "summary", "diff", "capture", "demo") if has_diff else ("view", "demo")
    monkeypatch.setattr(capture_cli, "_subcommands", lambda: commands)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    args = argparse.Namespace(output=None, force=False, cpu=True, no_view=False, compile=True)
    assert capture_cli.handle_demo(args) == 0
    if has_diff:
        assert opened == [("main", ["diff", str(eager), str(compiled)])]
    else:
        assert opened == [("view", str(compiled), True)]  # opened on the findings
