"""Argument parsing and handlers for `kinetoscope capture` and `kinetoscope demo`."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from pathlib import Path

from kinetoscope.capture.runner import CODE, MODULE, SCRIPT, Program
from kinetoscope.capture.session import (
    STEPS_RUN,
    CaptureError,
    CaptureOptions,
    CaptureResult,
    StepSource,
)

OVERHEAD_NOTE = (
    "The profiler itself costs time: with --record-shapes, --profile-memory and --with-stack all "
    "on, steps commonly run 10-30% slower, so they are off by default."
)

CAPTURE_EPILOG = f"""\
Steps: by default a step ends at each optimizer.step() (any torch.optim optimizer; no code
changes). The first --wait steps are skipped, the next --warmup run the profiler without keeping
the data, and the next --active are recorded and written as ProfilerStep#N.
Without an optimizer use --steps-from function:NAME (a step ends when NAME returns; NAME is a
function or Class.method of the program, or pkg.module:qualname), --steps-from time:SECONDS (a
step every SECONDS of wall time), or --whole-run.

{textwrap.fill(OVERHEAD_NOTE, 96)}

Examples:
  kinetoscope capture train.py --lr 0.1
  kinetoscope capture --wait 10 --active 5 -o run.pt.trace.json.gz train.py
  kinetoscope capture --steps-from function:train_step -m mypkg.train
  kinetoscope capture --whole-run -c "import torch; torch.randn(512, 512) @ torch.randn(512, 512)"
"""


def add_capture_commands(sub: argparse._SubParsersAction) -> None:
    """Register `capture` and `demo` on the `kinetoscope` subcommand parser."""
    capture = sub.add_parser(
        "capture",
        help="run a Python program under torch.profiler and view the trace",
        description="Run a Python program in-process under torch.profiler, write a gzip'd "
        ".pt.trace.json.gz trace, then open it in the viewer.",
        epilog=CAPTURE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="kinetoscope capture [options] (script.py | -m module | -c code) [args ...]",
    )
    target = capture.add_mutually_exclusive_group()
    target.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m")
    target.add_argument("-c", dest="code", metavar="CODE", help="run a code string, as python -c")
    _add_output_options(capture)
    window = capture.add_argument_group("which steps to record")
    window.add_argument(
        "--wait", type=int, default=5, metavar="N", help="steps to skip first (default 5)"
    )
    window.add_argument(
        "--warmup",
        type=int,
        default=2,
        metavar="N",
        help="steps to warm the profiler up without keeping them (default 2)",
    )
    window.add_argument(
        "--active", type=int, default=3, metavar="N", help="steps to record (default 3)"
    )
    window.add_argument(
        "--steps-from",
        default="optimizer",
        metavar="SOURCE",
        help="what ends a step: optimizer (default), function:NAME, time:SECONDS, or run "
        "(= --whole-run)",
    )
    window.add_argument(
        "--whole-run",
        action="store_true",
        help="record the whole run instead of a window of steps (large traces for long runs)",
    )
    _add_detail_options(capture)
    # Everything from the script (or from -m/-c's value) on belongs to the program.
    capture.__class__ = _CaptureParser
    capture.set_defaults(program=[])
    capture.set_defaults(handler=handle_capture)

    demo = sub.add_parser(
        "demo",
        help="capture a small built-in training run and view it",
        description="Train a tiny model for a few steps with a DataLoader that is slow on purpose "
        "and an avoidable .item() sync, capture it (on the GPU when there is one) and open the "
        "trace: a first look at a dataloader stall and a sync stall.",
    )
    _add_output_options(demo)
    demo.add_argument("--cpu", action="store_true", help="stay on the CPU even with a GPU")
    demo.set_defaults(handler=handle_demo)


class _CaptureParser(argparse.ArgumentParser):
    """Parses kinetoscope's options only up to the program; the rest is passed through as is.

    argparse.REMAINDER would stop at the first unknown option-looking argument after `-m mod`,
    so the split is done here: options (and their values) first, then the script with its
    arguments, or `-m`/`-c` with its value and the program's arguments.
    """

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        arg_list = list(sys.argv[1:] if args is None else args)
        takes_value = {
            option
            for action in self._actions
            if action.nargs != 0
            for option in action.option_strings
        }
        ends_options = {
            option
            for action in self._actions
            if action.dest in ("module", "code")
            for option in action.option_strings
        }
        index = 0
        program: list[str] = []
        while index < len(arg_list):
            arg = arg_list[index]
            if arg == "--":
                program = arg_list[index + 1 :]
                arg_list = arg_list[:index]
                break
            if not arg.startswith("-") or arg == "-":
                program = arg_list[index:]
                arg_list = arg_list[:index]
                break
            name = arg.split("=", 1)[0]
            attached = "=" in arg or (arg[:2] in ends_options and len(arg) > 2)
            if name in ends_options or arg[:2] in ends_options:
                stop = index + (1 if attached else 2)
                program = arg_list[stop:]
                arg_list = arg_list[:stop]
                break
            index += 1 if (attached or name not in takes_value) else 2
        namespace, extras = super().parse_known_args(arg_list, namespace)
        namespace.program = program
        return namespace, extras


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output")
    out.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="trace file to write (default: NAME_YYYYmmdd-HHMMSS.pt.trace.json.gz here)",
    )
    out.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    out.add_argument(
        "--no-view", action="store_true", help="do not open the viewer after writing the trace"
    )


def _add_detail_options(parser: argparse.ArgumentParser) -> None:
    detail = parser.add_argument_group(
        "detail (each adds profiler overhead, 10-30% with all three on; off by default)"
    )
    detail.add_argument("--record-shapes", action="store_true", help="record operator input shapes")
    detail.add_argument(
        "--profile-memory",
        action="store_true",
        help="record allocations ([memory] events)",
    )
    detail.add_argument("--with-stack", action="store_true", help="record Python call stacks")
    detail.add_argument(
        "--no-cuda", action="store_true", help="record CPU activity only, even with a GPU"
    )


def _program_from_args(args: argparse.Namespace) -> Program:
    rest = list(args.program or [])
    if rest and rest[0] == "--":
        rest = rest[1:]
    if args.module:
        return Program(MODULE, args.module, rest)
    if args.code is not None:
        return Program(CODE, args.code, rest)
    if not rest:
        raise CaptureError("nothing to run: give script.py, -m module or -c code")
    script, *script_args = rest
    if script.startswith("-"):
        raise CaptureError(f"unknown option {script} (options go before the script)")
    if not os.path.isfile(script):
        raise CaptureError(f"can't open file {script!r}: no such file")
    return Program(SCRIPT, script, script_args)


def _options_from_args(args: argparse.Namespace) -> CaptureOptions:
    steps = StepSource.parse(args.steps_from)
    if args.whole_run:
        steps = StepSource(kind=STEPS_RUN)
    options = CaptureOptions(
        wait=args.wait,
        warmup=args.warmup,
        active=args.active,
        steps=steps,
        record_shapes=args.record_shapes,
        profile_memory=args.profile_memory,
        with_stack=args.with_stack,
        cuda=False if args.no_cuda else None,
    )
    options.validate()
    return options


def handle_capture(args: argparse.Namespace) -> int:
    """`kinetoscope capture`: run the program, write the trace, open the viewer."""
    from kinetoscope.capture.run import capture_program

    try:
        program = _program_from_args(args)
        options = _options_from_args(args)
        output = Path(args.output) if args.output else None
        outcome, result = capture_program(program, options, output=output, force=args.force)
    except CaptureError as exc:
        message = str(exc)
        print(
            message if message.startswith("kinetoscope:") else f"kinetoscope: {message}",
            file=sys.stderr,
        )
        return 1
    finish(result, view=not args.no_view)
    return outcome.exit_code


def handle_demo(args: argparse.Namespace) -> int:
    """`kinetoscope demo`: capture the built-in workload, then open it."""
    from kinetoscope.capture.demo import capture_demo

    try:
        output = Path(args.output) if args.output else None
        outcome, result = capture_demo(output=output, force=args.force, cpu_only=args.cpu)
    except CaptureError as exc:
        message = str(exc)
        print(
            message if message.startswith("kinetoscope:") else f"kinetoscope: {message}",
            file=sys.stderr,
        )
        return 1
    finish(result, view=not args.no_view)
    return outcome.exit_code


def finish(result: CaptureResult, *, view: bool) -> None:
    """Report the written trace, then open the viewer on it when stdout is a terminal."""
    if result.path is None:
        print(f"kinetoscope: no trace written: {result.reason}", file=sys.stderr)
        return
    command = f"kinetoscope view {shlex.quote(str(result.path))}"
    print(f"kinetoscope: wrote {result.path} ({result.options.window_text()})", file=sys.stderr)
    if view and sys.stdout.isatty() and sys.stdin.isatty():
        try:
            from kinetoscope.viewer import run_view
        except ImportError:
            pass
        else:
            run_view(str(result.path))
    print(f"view it with: {command}", file=sys.stderr)
