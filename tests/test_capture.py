"""`kinetoscope capture` / `demo` and the Python API, on tiny CPU programs.

Each CLI test runs `python -m kinetoscope` in a subprocess (the program runs in-process there,
as it does for users); most of the time goes into importing torch.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kinetoscope.commands.cli import build_parser

REPO = Path(__file__).resolve().parents[1]

TRAIN = textwrap.dedent(
    """
    import argparse, json, sys, time
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)  # -1: until interrupted
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--record", default="")  # write argv and __name__ here as JSON
    parser.add_argument("--marker", default="")  # created after the 3rd step
    parser.add_argument("--raise-after", type=int, default=-1)
    args, _ = parser.parse_known_args()
    if args.record:
        with open(args.record, "w") as out:
            json.dump({"argv": sys.argv, "name": __name__}, out)

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    while args.steps < 0 or step < args.steps:
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if args.marker and step == 3:
            open(args.marker, "w").close()
        if step == args.raise_after:
            raise RuntimeError(f"boom at step {step}")
        if args.steps < 0:
            time.sleep(0.01)
    sys.exit(args.exit_code)
    """
)

torch = pytest.importorskip("torch")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.pop("KINETO_USE_DAEMON", None)
    return env


def run_kinetoscope(
    args: list[str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def load_trace(path: Path) -> dict:
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b", "trace is not gzip'd"
    document = json.loads(gzip.decompress(raw))
    assert isinstance(document["traceEvents"], list)
    return document


def step_numbers(document: dict) -> list[int]:
    numbers = set()
    for event in document["traceEvents"]:
        match = re.fullmatch(r"ProfilerStep#(\d+)", str(event.get("name", "")))
        if match and event.get("ph") == "X" and event.get("cat") == "user_annotation":
            numbers.add(int(match.group(1)))
    return sorted(numbers)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "tinytrain.py").write_text(TRAIN)
    return tmp_path


# argument parsing (no subprocess) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "program", "module", "code", "active", "wait"),
    [
        (
            ["--active", "3", "train.py", "--lr", "0.1"],
            ["train.py", "--lr", "0.1"],
            None,
            None,
            3,
            5,
        ),
        (
            ["train.py", "--wait", "9", "-m", "x"],
            ["train.py", "--wait", "9", "-m", "x"],
            None,
            None,
            3,
            5,
        ),
        (["--wait=1", "-m", "pkg.train", "--wait", "7"], ["--wait", "7"], "pkg.train", None, 3, 1),
        (["-mpkg.train", "-x"], ["-x"], "pkg.train", None, 3, 5),
        (["--no-view", "-c", "print(1)", "a", "--b"], ["a", "--b"], None, "print(1)", 3, 5),
        (
            ["--active", "2", "--", "-odd.py", "--active", "9"],
            ["-odd.py", "--active", "9"],
            None,
            None,
            2,
            5,
        ),
    ],
)
def test_program_arguments_pass_through_untouched(argv, program, module, code, active, wait):
    args = build_parser().parse_args(["capture", *argv])
    assert args.program == program
    assert args.module == module
    assert args.code == code
    assert (args.active, args.wait) == (active, wait)


# the CLI on real programs -------------------------------------------------------------------


def test_script_window_argv_and_exit_code(workdir: Path) -> None:
    out = workdir / "out.pt.trace.json.gz"
    record = workdir / "record.json"
    result = run_kinetoscope(
        [
            "capture",
            "--no-view",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "2",
            "-o",
            str(out),
            "train.py",
            "--steps",
            "6",
            "--exit-code",
            "3",
            "--record",
            str(record),
            "--lr",
            "0.1",
        ],
        cwd=workdir,
    )
    assert result.returncode == 3, result.stderr
    seen = json.loads(record.read_text())
    assert seen == {
        "argv": [
            "train.py",
            "--steps",
            "6",
            "--exit-code",
            "3",
            "--record",
            str(record),
            "--lr",
            "0.1",
        ],
        "name": "__main__",
    }
    assert step_numbers(load_trace(out)) == [2, 3]
    assert f"kinetoscope view {out}" in result.stderr


def test_module_form(workdir: Path) -> None:
    out = workdir / "module.pt.trace.json.gz"
    record = workdir / "record.json"
    result = run_kinetoscope(
        [
            "capture",
            "--no-view",
            "--wait",
            "2",
            "--warmup",
            "1",
            "--active",
            "1",
            "-o",
            str(out),
            "-m",
            "tinytrain",
            "--record",
            str(record),
            "--exit-code",
            "5",
        ],
        cwd=workdir,
    )
    assert result.returncode == 5, result.stderr
    seen = json.loads(record.read_text())
    assert seen["name"] == "__main__"
    assert Path(seen["argv"][0]).name == "tinytrain.py"  # as `python -m` sets it
    assert seen["argv"][1:] == ["--record", str(record), "--exit-code", "5"]
    assert step_numbers(load_trace(out)) == [3]


def test_code_form_whole_run_default_name(workdir: Path) -> None:
    code = (
        "import sys, json, torch\n"
        "json.dump(sys.argv, open('argv.json', 'w'))\n"
        "m = torch.nn.Linear(4, 4); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    m(torch.randn(2, 4)).sum().backward(); o.step()\n"
    )
    result = run_kinetoscope(
        ["capture", "--no-view", "--whole-run", "-c", code, "a", "--b"], cwd=workdir
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((workdir / "argv.json").read_text()) == ["-c", "a", "--b"]
    written = list(workdir.glob("*.pt.trace.json.gz"))
    assert len(written) == 1
    assert re.fullmatch(r"code_\d{8}-\d{6}\.pt\.trace\.json\.gz", written[0].name)
    # Whole run: every optimizer step is marked, from the start of the run on.
    assert step_numbers(load_trace(written[0]))[:3] == [0, 1, 2]
    assert "kinetoscope view" in result.stderr


def _as_a_terminals_job() -> None:
    """In the child, before it runs: SIGINT and SIGTERM as a shell's foreground job has them
    (default, not held). A process inherits an ignored SIGINT, and Python then raises no
    KeyboardInterrupt at all (as under `nohup`). Two full runs failed here exactly so (no
    KeyboardInterrupt, while SIGTERM, which capture installs itself, still worked); which
    earlier test leaves its process in that state was not found."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@pytest.mark.parametrize(
    "signum, status, said",
    [(signal.SIGINT, 130, "KeyboardInterrupt"), (signal.SIGTERM, 143, "Terminated")],
)
def test_ctrl_c_still_writes_the_trace(workdir: Path, signum, status, said) -> None:
    out = workdir / "interrupted.pt.trace.json.gz"
    marker = workdir / "recording"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kinetoscope",
            "capture",
            "--no-view",
            "--wait",
            "0",
            "--warmup",
            "1",
            "--active",
            "100000",
            "-o",
            str(out),
            "train.py",
            "--steps",
            "-1",
            "--marker",
            str(marker),
        ],
        cwd=workdir,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=_as_a_terminals_job,
    )
    try:
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the program never reached step 3"
            time.sleep(0.05)
        time.sleep(0.1)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == status, stderr
    assert said in stderr
    steps = step_numbers(load_trace(out))
    assert steps and steps[0] == 1  # recording started after one warm-up step
    assert len(steps) >= 2
    assert not list(workdir.glob(".*partial*")), "temporary files left behind"


def test_function_steps_and_crash_after_the_window(workdir: Path) -> None:
    (workdir / "loop.py").write_text(
        textwrap.dedent(
            """
            import torch

            def train_step(x):
                return (x @ x).sum().item()

            for i in range(8):
                train_step(torch.randn(16, 16))
                if i == 6:
                    raise ValueError("crashed on purpose")
            """
        )
    )
    out = workdir / "fn.pt.trace.json.gz"
    result = run_kinetoscope(
        [
            "capture",
            "--no-view",
            "--steps-from",
            "function:train_step",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "2",
            "-o",
            str(out),
            "loop.py",
        ],
        cwd=workdir,
    )
    assert result.returncode == 1
    assert "ValueError: crashed on purpose" in result.stderr
    assert 'loop.py", line' in result.stderr  # the program's own frame is shown
    assert "runpy" not in result.stderr
    assert step_numbers(load_trace(out)) == [2, 3]


def test_time_steps(workdir: Path) -> None:
    (workdir / "spin.py").write_text(
        "import time, torch\n"
        "end = time.monotonic() + 1.0\n"
        "while time.monotonic() < end:\n"
        "    torch.randn(32, 32) @ torch.randn(32, 32)\n"
    )
    out = workdir / "time.pt.trace.json.gz"
    result = run_kinetoscope(
        [
            "capture",
            "--no-view",
            "--steps-from",
            "time:0.1",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "2",
            "-o",
            str(out),
            "spin.py",
        ],
        cwd=workdir,
    )
    assert result.returncode == 0, result.stderr
    document = load_trace(out)
    assert step_numbers(document) == [2, 3]
    assert any(e.get("name") == "aten::mm" for e in document["traceEvents"])


def test_too_few_steps_says_why_and_keeps_exit_code(workdir: Path) -> None:
    out = workdir / "none.pt.trace.json.gz"
    result = run_kinetoscope(
        ["capture", "--no-view", "-o", str(out), "train.py", "--steps", "2", "--exit-code", "4"],
        cwd=workdir,
    )
    assert result.returncode == 4
    assert "no trace written" in result.stderr
    assert "only 2 steps were seen (steps from optimizer steps)" in result.stderr
    assert not out.exists()


def test_existing_output_is_not_overwritten_without_force(workdir: Path) -> None:
    out = workdir / "taken.pt.trace.json.gz"
    out.write_bytes(b"precious")
    result = run_kinetoscope(["capture", "--no-view", "-o", str(out), "train.py"], cwd=workdir)
    assert result.returncode == 1
    assert "--force" in result.stderr
    assert out.read_bytes() == b"precious"
    assert not (workdir / "record.json").exists()


def test_missing_script_is_an_error(workdir: Path) -> None:
    result = run_kinetoscope(["capture", "--no-view", "nope.py"], cwd=workdir)
    assert result.returncode == 1
    assert "nope.py" in result.stderr


def test_without_torch_capture_prints_install_hint(workdir: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # makes `import torch` fail\n"
        "import kinetoscope.capture, kinetoscope.commands.capture, kinetoscope.capture.synthetic\n"
        "from kinetoscope.commands.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    for command in (["capture", "--no-view", "train.py"], ["demo", "--no-view"]):
        result = subprocess.run(
            [sys.executable, "-c", code, *command],
            cwd=workdir,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert lines == ["kinetoscope: capture needs PyTorch: pip install 'kinetoscope[capture]'"]


def test_capture_package_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import kinetoscope.commands.cli, kinetoscope.capture, kinetoscope.commands.capture\n"
        "import kinetoscope.capture.api, kinetoscope.capture.demo, kinetoscope.capture.synthetic\n"
        "kinetoscope.commands.cli.build_parser()\n"
        "assert 'torch' not in sys.modules, 'torch imported eagerly'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_demo(workdir: Path) -> None:
    out = workdir / "demo.pt.trace.json.gz"
    started = time.monotonic()
    result = run_kinetoscope(["demo", "--no-view", "--cpu", "-o", str(out)], cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 60
    document = load_trace(out)
    assert step_numbers(document) == [2, 3, 4]
    names = {e.get("name") for e in document["traceEvents"]}
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in names
    assert {"aten::item", "aten::_local_scalar_dense"} <= names
    loader = [
        e["dur"]
        for e in document["traceEvents"]
        if str(e.get("name", "")).startswith("enumerate(DataLoader)")
    ]
    assert min(loader) > 4000  # the DataLoader is slow on purpose: ~8 ms a batch


# the Python API (in this process) -----------------------------------------------------------


def _train(steps: int, marker=None) -> None:
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if marker is not None:
            marker.step()


def test_api_window_of_optimizer_steps(tmp_path: Path) -> None:
    from kinetoscope.capture import profile

    out = tmp_path / "api.pt.trace.json.gz"
    with profile(out, steps=2, wait=1, warmup=1, quiet=True) as prof:
        _train(6)
    assert prof.path == out
    assert step_numbers(load_trace(out)) == [2, 3]
    with pytest.raises(Exception, match="--force"):
        with profile(out, quiet=True):
            pass


def test_api_whole_block_manual_steps_and_decorator(tmp_path: Path, monkeypatch) -> None:
    from kinetoscope.capture import profile

    block = tmp_path / "block.pt.trace.json.gz"
    with profile(block, quiet=True):
        torch.randn(64, 64) @ torch.randn(64, 64)
    names = {e.get("name") for e in load_trace(block)["traceEvents"]}
    assert "aten::mm" in names

    manual = tmp_path / "manual.pt.trace.json.gz"
    with profile(manual, steps=1, wait=0, warmup=1, steps_from="manual", quiet=True) as prof:
        _train(4, marker=prof)
    assert step_numbers(load_trace(manual)) == [1]

    monkeypatch.chdir(tmp_path)

    @profile(steps=1, wait=0, warmup=1, quiet=True)
    def fit(steps: int) -> str:
        _train(steps)
        return "done"

    assert fit(3) == "done"
    written = sorted(tmp_path.glob("fit_*.pt.trace.json.gz"))
    assert len(written) == 1
    assert step_numbers(load_trace(written[0])) == [1]


def test_api_writes_on_exception(tmp_path: Path) -> None:
    from kinetoscope.capture import profile

    out = tmp_path / "crash.pt.trace.json.gz"
    with pytest.raises(ZeroDivisionError):
        with profile(out, steps=50, wait=0, warmup=1, quiet=True):
            _train(4)
            raise ZeroDivisionError("crash inside the block")
    # Steps 1-3 are complete; step 4 was in progress when the block ended.
    assert step_numbers(load_trace(out)) == [1, 2, 3, 4]


def test_sample_demo_trace_is_small_and_valid() -> None:
    sample = REPO / "sample_traces" / "demo_cpu.pt.trace.json.gz"
    assert sample.stat().st_size < 300_000
    document = load_trace(sample)
    assert step_numbers(document) == [2, 3, 4]
    assert document.get("host_name", "demo-host") == "demo-host"


def test_api_function_steps_by_module_path_and_by_method(tmp_path: Path, monkeypatch) -> None:
    from kinetoscope.capture import profile

    (tmp_path / "steps_helpers.py").write_text(
        textwrap.dedent(
            """
            import torch

            def work():
                return torch.ones(8).sum()

            class Trainer:
                def step(self):
                    return torch.ones(4) * 2
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import steps_helpers

    original_work, original_step = steps_helpers.work, steps_helpers.Trainer.step

    out = tmp_path / "by_path.pt.trace.json.gz"
    with profile(
        out, steps=2, wait=1, warmup=1, steps_from="function:steps_helpers:work", quiet=True
    ):
        for _ in range(5):
            steps_helpers.work()
    assert step_numbers(load_trace(out)) == [2, 3]
    assert steps_helpers.work is original_work  # unwrapped again

    out = tmp_path / "by_method.pt.trace.json.gz"
    trainer = steps_helpers.Trainer()
    with profile(out, steps=1, wait=1, warmup=1, steps_from="function:Trainer.step", quiet=True):
        for _ in range(4):
            trainer.step()
    assert step_numbers(load_trace(out)) == [2]
    assert steps_helpers.Trainer.step is original_step
    assert sys.getprofile() is None
