"""Run a Python program in this process (script, `-m module` or `-c code`) as `python` would.

The program sees its own `sys.argv`, runs as `__main__`, and its exit status is returned rather
than raised, so that the caller can write the trace afterwards whatever happened.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

SCRIPT = "script"
MODULE = "module"
CODE = "code"


@dataclass
class Program:
    """What to run: a script path, a module name or a code string, and its arguments."""

    kind: str
    target: str
    args: list[str]

    @property
    def label(self) -> str:
        """A short name for output files: the script's or module's name, or `code`."""
        if self.kind == SCRIPT:
            name = os.path.basename(self.target)
            return name[:-3] if name.endswith(".py") else name
        if self.kind == MODULE:
            return self.target or "module"
        return "code"

    @property
    def argv(self) -> list[str]:
        first = {SCRIPT: self.target, MODULE: self.target, CODE: "-c"}[self.kind]
        return [first, *self.args]

    def describe(self) -> str:
        if self.kind == MODULE:
            return f"-m {self.target}"
        if self.kind == CODE:
            return "-c ..."
        return self.target


@dataclass
class Outcome:
    """How the program ended."""

    exit_code: int
    interrupted: bool = False  # ended by Ctrl-C (KeyboardInterrupt)
    crashed: bool = False  # ended by an uncaught exception
    exception: str | None = None  # its type, when crashed (`RuntimeError`)
    message: str | None = None  # its message
    ended_unix: float = 0.0  # when the program ended (time.time())


def exit_code_of(code: object) -> int:
    """The status `sys.exit(code)` gives the process: None is 0, an int itself, else 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


class Terminated(BaseException):
    """SIGTERM (a job scheduler's stop) arrived while the program ran."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def run_program(program: Program) -> Outcome:
    """Run the program to completion and report how it ended; never raises for its errors."""
    return run_callable(lambda: _execute(program), argv=program.argv, path0=_path0(program))


def program_thread_name(program: Program) -> str:
    """What `python PROGRAM` would be called in a trace: the script's or module's name (the
    `kinetoscope` command's own name would otherwise label the program's main thread)."""
    if program.kind == SCRIPT:
        return os.path.basename(program.target) or "python"
    if program.kind == MODULE:
        return program.target.rpartition(".")[2] or "python"
    return "python"


@contextlib.contextmanager
def os_thread_named(name: str) -> Iterator[None]:
    """Give the calling thread this OS-level name (Linux keeps 15 bytes) while the block runs;
    the profiler reads it for the trace's thread names. Elsewhere, or if it fails, a no-op."""
    prctl = _prctl()
    saved = ctypes.create_string_buffer(32)
    if prctl is None or prctl(_PR_GET_NAME, saved, 0, 0, 0) != 0:
        yield
        return
    wanted = name.encode("utf-8", "replace")[:15]
    prctl(_PR_SET_NAME, ctypes.c_char_p(wanted), 0, 0, 0)
    try:
        yield
    finally:
        prctl(_PR_SET_NAME, saved, 0, 0, 0)


_PR_SET_NAME = 15
_PR_GET_NAME = 16


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def run_callable(
    body: Callable[[], object], *, argv: list[str] | None = None, path0: str | None = None
) -> Outcome:
    """Call `body` with `sys.argv`/`sys.path[0]` set, turning its ending into an Outcome."""
    saved_argv = sys.argv[:]
    inserted_path = False
    # SIGTERM ends the program like Ctrl-C does, so the trace so far is still written. (Only the
    # main thread may install handlers; a program that installs its own keeps it.)
    previous_term = None
    if threading.current_thread() is threading.main_thread():
        previous_term = signal.signal(signal.SIGTERM, _raise_terminated)
    if argv is not None:
        sys.argv = list(argv)
    if path0 is not None:
        sys.path.insert(0, path0)
        inserted_path = True
    try:
        body()
        return Outcome(0, ended_unix=time.time())
    except SystemExit as exc:
        return Outcome(exit_code_of(exc.code), ended_unix=time.time())
    except KeyboardInterrupt:
        ended = time.time()
        print("\nKeyboardInterrupt", file=sys.stderr)
        return Outcome(130, interrupted=True, ended_unix=ended)
    except Terminated:
        ended = time.time()
        print("\nTerminated (SIGTERM)", file=sys.stderr)
        return Outcome(128 + signal.SIGTERM, interrupted=True, ended_unix=ended)
    except BaseException as exc:  # noqa: BLE001 - the program's own error, reported like python
        ended = time.time()
        _print_program_traceback(exc)
        return Outcome(
            1,
            crashed=True,
            exception=type(exc).__qualname__,
            message=_exception_message(exc),
            ended_unix=ended,
        )
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
        sys.argv = saved_argv
        if inserted_path:
            try:
                sys.path.remove(path0)  # type: ignore[arg-type]
            except ValueError:
                pass


def _exception_message(exc: BaseException) -> str:
    """The exception's message, its first 300 characters (str() of any object may fail)."""
    try:
        return str(exc)[:300]
    except Exception:  # noqa: BLE001 - a broken __str__ of the program's own exception
        return ""


def _path0(program: Program) -> str:
    if program.kind == SCRIPT:
        return os.path.dirname(os.path.abspath(program.target))
    return os.getcwd()


def _execute(program: Program) -> None:
    if program.kind == SCRIPT:
        runpy.run_path(program.target, run_name="__main__")
    elif program.kind == MODULE:
        runpy.run_module(program.target, run_name="__main__", alter_sys=True)
    else:
        _exec_code(program.target)


def _exec_code(source: str) -> None:
    code = compile(source, "<string>", "exec")
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _print_program_traceback(exc: BaseException) -> None:
    """Print the traceback as python would, without kinetoscope's and runpy's own frames."""
    tb = exc.__traceback__
    own_files = {__file__, runpy.__file__, "<frozen runpy>"}
    while tb is not None and tb.tb_frame.f_code.co_filename in own_files:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)
