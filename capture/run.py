"""Glue: run a program under a CaptureSession and always stop the session afterwards."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from kinetoscope.capture.runner import (
    Outcome,
    Program,
    os_thread_named,
    program_thread_name,
    run_callable,
    run_program,
)
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
    announce: Callable[[str], None] | None = None,
) -> tuple[Outcome, CaptureResult]:
    """Run `program` in this process under the profiler; the trace is written even on Ctrl-C.

    `announce` receives kinetoscope's own progress lines (default: printed to stderr)."""
    # The profiler names threads as it first sees them, so the name is set before it starts.
    with os_thread_named(program_thread_name(program)):
        return _capture(
            lambda: run_program(program),
            options,
            output=output or default_output_path(program.label),
            force=force,
            what=program.describe(),
            announce=announce,
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
    announce: Callable[[str], None] | None = None,
) -> tuple[Outcome, CaptureResult]:
    say = announce or _to_stderr
    session = CaptureSession(output, options, force=force, announce=say)
    session.start()
    say(
        f"kinetoscope: profiling {what or 'the program'}; recording {options.window_text()} "
        f"into {output}"
    )
    try:
        outcome = run()
    finally:
        # Also reached when a second Ctrl-C lands outside the program, so whatever was
        # recorded is still written.
        result = session.stop()
    return outcome, result


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)
