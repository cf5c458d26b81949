"""Profile a block of code or a window of training steps from Python.

    from kinetoscope.capture import profile

    with profile():                 # the whole block; optimizer steps marked as ProfilerStep#N
        train(epochs=1)

    with profile(steps=3) as prof:  # skip 5 steps, warm up 2, record 3 (as `kinetoscope capture`)
        for batch in loader:
            ...
            optimizer.step()        # counted automatically; or steps_from="manual" + prof.step()

    @profile(steps=3, output="train.pt.trace.json.gz", force=True)
    def train(): ...

The trace is written when the window closes or the block ends (also on Ctrl-C or an exception,
which still propagate), then `prof.path` holds its path. torch is imported on entering the block.
In a rank of a distributed job (torchrun), the default file is the rank's own in the job's run
folder (`NAME_YYYYmmdd-HHMMSS/rank3.pt.trace.json.gz`), as `kinetoscope capture` names it.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kinetoscope.capture.session import (
    STEPS_MANUAL,
    STEPS_OPTIMIZER,
    STEPS_RUN,
    CaptureOptions,
    CaptureResult,
    CaptureSession,
    StepSource,
    default_output_path,
)

F = TypeVar("F", bound=Callable[..., Any])


class profile:
    """Context manager and decorator that profiles a block, or `steps` steps of it."""

    def __init__(
        self,
        output: str | os.PathLike[str] | None = None,
        *,
        steps: int | None = None,
        wait: int = 5,
        warmup: int = 2,
        steps_from: str = STEPS_OPTIMIZER,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        cuda: bool | None = None,
        force: bool = False,
        name: str | None = None,
        quiet: bool = False,
    ) -> None:
        source = StepSource.parse(steps_from)
        if source.kind == STEPS_RUN:
            steps = None
        if steps is None and source.kind == STEPS_OPTIMIZER:
            source = StepSource(kind=STEPS_RUN)
        if steps is None and source.kind != STEPS_RUN:
            # A whole block with manual/function/time steps: mark them, keep everything.
            raise ValueError("steps_from other than 'optimizer' needs steps=N")
        self._options = CaptureOptions(
            wait=wait,
            warmup=warmup,
            active=steps if steps is not None else 1,
            steps=source,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            cuda=cuda,
        )
        self._options.validate()
        self._output = Path(output) if output is not None else None
        self._force = force
        self._name = name
        self._quiet = quiet
        self._session: CaptureSession | None = None
        self.result: CaptureResult | None = None

    @property
    def path(self) -> Path | None:
        """The trace written by the last block, or None (not finished, or nothing recorded)."""
        return self.result.path if self.result is not None else None

    def step(self) -> None:
        """End one step (needed only with steps_from='manual')."""
        if self._session is not None:
            self._session.step()

    def _announce(self, text: str) -> None:
        if not self._quiet:
            print(text, file=sys.stderr)

    def __enter__(self) -> profile:
        if self._session is not None:
            raise RuntimeError("this profile() block is already running")
        label = self._name or _program_label()
        output = self._output or _default_output(label)
        self.result = None
        self._session = CaptureSession(
            output, self._options, force=self._force, announce=self._announce
        )
        self._session.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        self.result = session.stop()
        if self.result.path is not None:
            self._announce(
                f"kinetoscope: wrote {self.result.path}; view it with: "
                f"kinetoscope view {self.result.path}"
            )
        else:
            self._announce(f"kinetoscope: no trace written: {self.result.reason}")

    def __call__(self, function: F) -> F:
        """Use as a decorator: each call of `function` is profiled as one block."""
        settings = self

        @functools.wraps(function)
        def profiled(*args: Any, **kwargs: Any) -> Any:
            block = settings._fresh(default_name=function.__name__)
            with block:
                return function(*args, **kwargs)

        return profiled  # type: ignore[return-value]

    def _fresh(self, default_name: str) -> profile:
        """A copy with the same settings, so that each decorated call writes its own file."""
        block = copy.copy(self)
        block._name = self._name or default_name
        block._session = None
        block.result = None
        return block


def _default_output(label: str) -> Path:
    """`<label>_<YYYYmmdd-HHMMSS>.pt.trace.json.gz` here; in a rank of a distributed job
    (torchrun: RANK and WORLD_SIZE set), this rank's file in the job's run folder, as
    `kinetoscope capture` names them, so that the ranks never race for one name."""
    from kinetoscope.capture.ranks import (
        RankEnv,
        default_run_dir,
        next_rank_trace,
        prepare_run_dir,
    )

    env = RankEnv.from_environ()
    if env is None:
        return default_output_path(label)
    run_dir = default_run_dir(label, env)
    prepare_run_dir(run_dir)
    return next_rank_trace(run_dir, env)


def _program_label() -> str:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    base = os.path.basename(argv0)
    if base.endswith(".py"):
        base = base[:-3]
    if not base or base in ("-c", "-m", "__main__") or base.startswith("pytest"):
        return "profile"
    return base


__all__ = ["profile", "STEPS_MANUAL"]
