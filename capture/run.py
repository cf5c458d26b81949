"""Glue: run a program under a CaptureSession and always stop the session afterwards."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from kinetoscope.capture.runner import Outcome, Program, run_callable, run_program
from kinetoscope.capture.session import (
    CaptureOptions,
    CaptureResult,
    CaptureSession,
    default_output_path,
)


def capture_program(
    program: Program,
    options: CaptureOptions,
    *,
    output: Path | None = None,
    force: bool = False,
) -> tuple[Outcome, CaptureResult]:
    """Run `program` in this process under the profiler; the trace is written even on Ctrl-C."""
    return _capture(
        lambda: run_program(program),
        options,
        output=output or default_output_path(program.label),
        force=force,
        what=program.describe(),
    )


def capture_callable(
    body: Callable[[], object],
    options: CaptureOptions,
    *,
    output: Path,
    force: bool = False,
    what: str = "",
) -> tuple[Outcome, CaptureResult]:
    """Like capture_program, for a Python callable (the demo)."""
    return _capture(lambda: run_callable(body), options, output=output, force=force, what=what)


def _capture(
    run: Callable[[], Outcome],
    options: CaptureOptions,
    *,
    output: Path,
    force: bool,
    what: str,
) -> tuple[Outcome, CaptureResult]:
    session = CaptureSession(output, options, force=force)
    session.start()
    print(
        f"kinetoscope: profiling {what or 'the program'}; recording {options.window_text()} "
        f"into {output}",
        file=sys.stderr,
    )
    try:
        outcome = run()
    finally:
        # Also reached when a second Ctrl-C lands outside the program, so whatever was
        # recorded is still written.
        result = session.stop()
    return outcome, result
