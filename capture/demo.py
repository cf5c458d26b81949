"""`kinetoscope demo`: a tiny training run with two classic stalls, captured and opened.

The workload trains a small MLP for a few steps. Two things in it are slow on purpose, the way
they are in real training scripts:

* the Dataset sleeps in `__getitem__` and the DataLoader has no worker processes, so every step
  starts with the main thread waiting in `enumerate(DataLoader)#_SingleProcessDataLoaderIter
  .__next__` while the GPU has nothing to do;
* the loss is checked with `.item()` between forward and backward, which makes the CPU wait for
  the GPU (`aten::item` -> `aten::_local_scalar_dense` -> `cudaStreamSynchronize` on CUDA) before it
  can launch the backward pass.

On a CUDA machine the model runs on the GPU; on CPU the whole demo takes a few seconds.
Regenerate the CPU sample trace with `python -m kinetoscope.capture.demo OUT`.

`kinetoscope demo --compile` runs the same workload twice, eager and with the model under
`torch.compile` (Inductor: C++ kernels on the CPU, Triton on a GPU), and writes one trace of
each into one folder (`capture_compile_demo`). The compilation happens in the first step, which
the recorded window skips; its kernels are `cpp_fused_*` (CPU) or `triton_*` (GPU) inside
`Torch-Compiled Region` spans.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

from kinetoscope.capture.run import capture_callable
from kinetoscope.capture.runner import Outcome
from kinetoscope.capture.session import (
    TRACE_SUFFIX,
    CaptureError,
    CaptureOptions,
    CaptureResult,
    check_output,
    default_output_path,
    import_torch,
)

# The recorded window: skip 1 step, warm up 1, record 3 (ProfilerStep#2..#4).
DEMO_WAIT = 1
DEMO_WARMUP = 1
DEMO_ACTIVE = 3
BATCH_SIZE = 16
SAMPLE_DELAY_S = 0.0005  # per sample, so about 8 ms of loading per batch


def train(
    device: str = "cpu",
    steps: int = DEMO_WAIT + DEMO_WARMUP + DEMO_ACTIVE + 1,
    compiled: bool = False,
) -> float:
    """Train a small MLP for `steps` optimizer steps; returns the mean loss. `compiled`: the
    model runs under `torch.compile` (compiled in the first step, forward and backward)."""
    torch = import_torch()
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    torch.manual_seed(0)
    features, classes = 128, 10

    class SlowDataset(Dataset):  # type: ignore[type-arg]
        """Random samples that take a while to 'decode'."""

        def __init__(self, length: int) -> None:
            generator = torch.Generator().manual_seed(1)
            self.inputs = torch.randn(length, features, generator=generator)
            self.labels = torch.randint(0, classes, (length,), generator=generator)

        def __len__(self) -> int:
            return len(self.labels)

        def __getitem__(self, index: int) -> Any:
            time.sleep(SAMPLE_DELAY_S)  # stands in for JPEG decoding, tokenising, ...
            return self.inputs[index], self.labels[index]

    loader = DataLoader(SlowDataset(steps * BATCH_SIZE), batch_size=BATCH_SIZE, num_workers=0)
    model = nn.Sequential(
        nn.Linear(features, 256),
        nn.ReLU(),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, classes),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if compiled and device == "cpu":
        # Inductor's C++ kernels (cpp_fused_*) show in the trace only with this.
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True
    forward = torch.compile(model) if compiled else model
    loss_fn = nn.CrossEntropyLoss()
    total = 0.0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        loss = loss_fn(forward(inputs), labels)
        # The avoidable sync: reading the loss on the host before backward() stalls the CPU
        # until the GPU has finished the forward pass.
        value = loss.item()
        if value != value:
            raise FloatingPointError("loss is NaN")
        total += value
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return total / max(1, len(loader))


def demo_options(cpu_only: bool = False) -> CaptureOptions:
    return CaptureOptions(
        wait=DEMO_WAIT,
        warmup=DEMO_WARMUP,
        active=DEMO_ACTIVE,
        cuda=False if cpu_only else None,
    )


def capture_demo(
    output: Path | None = None, *, force: bool = False, cpu_only: bool = False
) -> tuple[Outcome, CaptureResult]:
    """Capture the demo workload; returns how it ended and what was written."""
    torch = import_torch()
    device = "cuda" if (not cpu_only and torch.cuda.is_available()) else "cpu"
    output = output or default_output_path(f"demo_{device}")
    check_output(output, force)
    return capture_callable(
        lambda: train(device),
        demo_options(cpu_only=device == "cpu"),
        output=output,
        force=force,
        what=f"the demo training run on {device}",
    )


EAGER_NAME = "eager" + TRACE_SUFFIX
COMPILED_NAME = "compiled" + TRACE_SUFFIX


def default_compile_folder(device: str) -> Path:
    """`demo_compile_<device>_<YYYYmmdd-HHMMSS>` here (`_2`... when taken)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = Path.cwd() / f"demo_compile_{device}_{stamp}"
    counter = 2
    while candidate.exists():
        candidate = Path.cwd() / f"demo_compile_{device}_{stamp}_{counter}"
        counter += 1
    return candidate


def capture_compile_demo(
    folder: Path | None = None, *, force: bool = False, cpu_only: bool = False
) -> tuple[Outcome, CaptureResult, CaptureResult]:
    """Capture the demo workload eager, then compiled, into `folder` (created; the two traces
    are `eager.pt.trace.json.gz` and `compiled.pt.trace.json.gz`). Returns how the compiled run
    ended (or the eager one, when that failed) and the two results, eager first."""
    torch = import_torch()
    device = "cuda" if (not cpu_only and torch.cuda.is_available()) else "cpu"
    folder = folder or default_compile_folder(device)
    if folder.exists() and not folder.is_dir():
        raise CaptureError(f"{folder} is not a folder (-o names the folder of the two traces)")
    if not folder.parent.is_dir():
        raise CaptureError(f"folder {folder.parent} does not exist")
    eager_path, compiled_path = folder / EAGER_NAME, folder / COMPILED_NAME
    for path in (eager_path, compiled_path):
        if path.exists() and not force:
            raise CaptureError(f"{path} exists; pass --force to overwrite it")
    folder.mkdir(exist_ok=True)
    options = demo_options(cpu_only=device == "cpu")
    backend = "Triton" if device == "cuda" else "Inductor's C++ backend"
    threads = torch.get_num_threads()
    if device == "cpu":
        # One thread for both runs: with several, Inductor's OpenMP kernels and the eager
        # operators around them contend for the cores (on a busy 2-core machine the compiled run
        # measured 17x slower), which measures the machine more than the compiler.
        torch.set_num_threads(1)
    try:
        return _capture_both(device, options, backend, force, eager_path, compiled_path)
    finally:
        torch.set_num_threads(threads)


def _capture_both(
    device: str,
    options: CaptureOptions,
    backend: str,
    force: bool,
    eager_path: Path,
    compiled_path: Path,
) -> tuple[Outcome, CaptureResult, CaptureResult]:
    outcome, eager = capture_callable(
        lambda: train(device),
        options,
        output=eager_path,
        force=force,
        what=f"the demo training run on {device}, eager",
    )
    if outcome.exit_code != 0 or eager.path is None:
        return outcome, eager, CaptureResult(None, 0, options, "the eager run did not finish")
    outcome, compiled = capture_callable(
        lambda: train(device, compiled=True),
        options,
        output=compiled_path,
        force=force,
        what=f"the demo training run on {device}, under torch.compile ({backend}; compiling "
        "takes a while the first time)",
    )
    return outcome, eager, compiled


def scrub_machine_details(path: Path) -> None:
    """Replace the host name and the temporary file name Kineto writes into a small trace."""
    with gzip.open(path, "rt", encoding="utf-8") as source:
        document = json.load(source)
    if isinstance(document, dict):
        if "host_name" in document:
            document["host_name"] = "demo-host"
        if "traceName" in document:
            document["traceName"] = path.name
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as sink:
        json.dump(document, sink, separators=(",", ":"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kinetoscope.capture.demo",
        description="Write the CPU demo trace (the sample in sample_traces/).",
    )
    parser.add_argument("output", type=Path)
    args = parser.parse_args(argv)
    outcome, result = capture_demo(args.output, force=True, cpu_only=True)
    if result.path is None:
        print(f"no trace written: {result.reason}", file=sys.stderr)
        return 1
    scrub_machine_details(result.path)
    print(result.path)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
