"""The one error path of the commands: a command that cannot do what it was asked raises
`KinetoscopeError(message, exit_code)`; `kinetoscope.commands.cli.main` prints it, once, as
`kinetoscope: MESSAGE` on standard error (cleaned: a message quotes file names and trace text)
and returns its exit code. `UsageError` is a usage error found after parsing (status 2, as
argparse's); `OutputError`, standard output that could not be written.

`exit_status(run, ...)` is the same path for a caller that wants a status instead of an
exception (the run functions kept for notebooks and tests); `warn(message)` prints a line that
is not an error (the command goes on). Standard library only.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from typing import Any

from kinetoscope.common.text import CLEAN_LIMIT, clean


class KinetoscopeError(Exception):
    """A command's failure: the one line to print after `kinetoscope: `, and the exit status."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(KinetoscopeError):
    """A usage error found after parsing: exit status 2, as argparse's."""

    exit_code = 2


class OutputError(KinetoscopeError):
    """Standard output could not be written (a full disk, a closed pipe): one line, not a trace."""


def output_error_message(exc: OSError) -> str:
    """The one line for an error writing standard output."""
    if exc.errno == errno.EPIPE:
        return "standard output was closed"
    reason = exc.strerror or str(exc)
    return f"cannot write the output: {reason}"


def warn(message: str) -> None:
    """Print `kinetoscope: MESSAGE` on standard error; nowhere to say it is no failure."""
    # Cleaned, not cut: the parts a message quotes were cut where they are long.
    shown = "".join(
        clean(message[at : at + CLEAN_LIMIT]) for at in range(0, len(message), CLEAN_LIMIT)
    )
    try:
        print(f"kinetoscope: {shown}", file=sys.stderr)
    except OSError:  # nowhere to say it: the status says it
        pass


def report(error: KinetoscopeError) -> int:
    """Print `error` (its one line) and return its exit status."""
    warn(error.message)
    return error.exit_code


def exit_status(run: Callable[..., int | None], *args: Any, **kwargs: Any) -> int:
    """`run(*args, **kwargs)`'s status, a KinetoscopeError it raises printed and returned as its
    status. An OutputError goes on up: standard output is `main`'s to silence first."""
    try:
        return int(run(*args, **kwargs) or 0)
    except OutputError:
        raise
    except KinetoscopeError as error:
        return report(error)
