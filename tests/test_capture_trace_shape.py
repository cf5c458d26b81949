"""What a capture leaves in the trace itself: the profiler's steps close outside the optimizer's
step range (no slice outlives its ProfilerStep), the program's main thread carries the program's
name, and a run too short for its window says how many steps each part of the window needs."""

from pathlib import Path

import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.parser import load
from test_capture import REPO, TRAIN, load_trace, run_kinetoscope  # noqa: F401

torch = pytest.importorskip("torch")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_the_step_hook_leaves_no_slice_outliving_its_profiler_step(workdir: Path) -> None:
    out = workdir / "out.pt.trace.json.gz"
    result = run_kinetoscope(
        [
            "capture",
            "--no-view",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "3",
            "-o",
            str(out),
            "train.py",
            "--steps",
            "8",
        ],
        cwd=workdir,
    )
    assert result.returncode == 0, result.stderr
    document = load_trace(out)
    events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    optimizer = [e for e in events if str(e.get("name", "")).startswith("Optimizer.step#")]
    assert len(steps) == 3 and len(optimizer) >= 3
    for opt in optimizer:
        # Every optimizer step recorded lies wholly inside one ProfilerStep.
        inside = [
            s
            for s in steps
            if s["ts"] <= opt["ts"] and opt["ts"] + opt["dur"] <= s["ts"] + s["dur"]
        ]
        assert len(inside) == 1, opt
    session = TraceSession(load(str(out), use_cache=False))
    assert "slice_outlives_parent" not in {f.rule for f in session.findings}


def test_the_main_thread_is_named_after_the_program(workdir: Path) -> None:
    out = workdir / "out.pt.trace.json.gz"
    result = run_kinetoscope(
        ["capture", "--no-view", "--whole-run", "-o", str(out), "train.py", "--steps", "2"],
        cwd=workdir,
    )
    assert result.returncode == 0, result.stderr
    document = load_trace(out)
    thread_names = {
        str(e.get("args", {}).get("name", ""))
        for e in document["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    assert any("train.py" in name for name in thread_names), thread_names


def test_a_run_too_short_for_the_window_says_what_each_part_needs(workdir: Path) -> None:
    out = workdir / "out.pt.trace.json.gz"
    result = run_kinetoscope(
        ["capture", "--no-view", "-o", str(out), "train.py", "--steps", "3"], cwd=workdir
    )
    assert "only 3 steps were seen" in result.stderr
    # Default window: skip 5, warm up 2, record 3 -> ProfilerStep#7..#9.
    assert "needs 8 steps to record its first step, 10 for all of it" in result.stderr
