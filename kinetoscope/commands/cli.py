"""The `kinetoscope` command: the top of the floors. Each command is one module of
kinetoscope/commands/ with its argparse registration (`register(sub)`, which sets the
`handler` that runs it) and its run function, which alone decides "one trace or a job"; this
module only lists them (COMMANDS), parses, and is the one place a command's error is printed:
a command raises KinetoscopeError (kinetoscope/common/errors.py), `main` prints its line and
returns its exit status. Adding a command is one module plus its line in COMMANDS."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from kinetoscope import __version__
from kinetoscope.common.errors import KinetoscopeError, OutputError, output_error_message, report

# The commands, in the order `--help` lists them: name -> its module in kinetoscope/commands/.
COMMANDS = {
    "view": "view",
    "summary": "summary",
    "diff": "diff",
    "check": "check",
    "export": "export",
    "sql": "sql",
    "serve": "serve",
    "mcp": "mcp",
    "capture": "capture",
    "demo": "capture",  # capture.py registers both
}
SUBCOMMANDS = tuple(COMMANDS)


class _Parser(argparse.ArgumentParser):
    """argparse, except that help and usage that cannot be written are an error, not lost."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with `command` (one of COMMANDS), of that command only: a
    command's module (and what it imports) is imported only when the command is run or `--help`
    lists them all, so that `summary` does not pay for the viewer's, the server's or capture's
    imports."""
    parser = _Parser(
        prog="kinetoscope",
        description="Terminal viewer and analyser for PyTorch profiler traces.",
        epilog="Exit status: 0 done (also when a reader such as `head` closes the pipe early), "
        "1 an error (one line on stderr), 2 a usage error.",
    )
    parser.add_argument("--version", action="version", version=f"kinetoscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module in modules:
        importlib.import_module(f"kinetoscope.commands.{module}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `kinetoscope TRACE` is `kinetoscope view TRACE`.
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "view")
    # `--window -5ms..+1ms`: argparse takes a value starting with `-` for an option; join them.
    for i in range(len(argv) - 1, 0, -1):
        if argv[i - 1] == "--window" and argv[i][:1] == "-" and argv[i][1:2] in " .0123456789":
            argv[i - 1 : i + 1] = [f"--window={argv[i]}"]
    try:
        try:
            # The first word names the command (`view` was put in front of a bare TRACE): only
            # its module is imported; an option first (`--help`, `--version`): every command's.
            args = build_parser(argv[0] if argv else None).parse_args(argv)
            if args.command is None:
                build_parser().print_help()
                _flush_stdout()
                return 0
        except SystemExit as done:  # --help, --version, a usage error: flush before leaving
            _flush_stdout()
            return done.code if isinstance(done.code, int) else 2
        except BrokenPipeError:
            raise
        except OSError as exc:  # help or usage that could not be written
            raise OutputError(output_error_message(exc)) from None
        try:
            code = int(args.handler(args) or 0)
        except OutputError:
            raise
        except KinetoscopeError as error:  # the one place a command's error is said
            code = report(error)
        _flush_stdout()
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`| head`): what it wanted it has; nothing to report.
        _silence_stdout()
        return 0
    except OutputError as error:
        _silence_stdout()
        return report(error)


def _flush_stdout() -> None:
    """Flush standard output now, so that a write error is ours to report, not Python's at exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(output_error_message(exc)) from None


def _silence_stdout() -> None:
    """Point the standard output's descriptor at /dev/null, so that the flush at exit has nowhere
    to fail (else Python prints 'Exception ignored ... BrokenPipeError' and exits 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
