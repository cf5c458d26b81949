"""Argument parsing and handlers for `kinetoscope capture` and `kinetoscope demo`."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from pathlib import Path

from kinetoscope.capture.ranks import (
    DEFAULT_RANK_TIMEOUT,
    RankEnv,
    check_launcher_available,
    clear_exit_record,
    default_run_dir,
    exit_record,
    launch_ranks,
    new_run_dir,
    open_folder_viewer,
    prepare_run_dir,
    rank_trace_name,
    record_lost_ranks,
    report_job,
    wait_for_ranks,
    write_exit_record,
    write_marker,
)
from kinetoscope.capture.runner import CODE, MODULE, SCRIPT, Program
from kinetoscope.capture.session import (
    STEPS_RUN,
    CaptureError,
    CaptureOptions,
    CaptureResult,
    CaptureUsage,
    StepSource,
)
from kinetoscope.common.errors import KinetoscopeError
from kinetoscope.common.numbers import argparse_float, argparse_int
from kinetoscope.parser.rank_exit import record_name

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

Distributed jobs: started by torchrun (`torchrun --nproc-per-node 4 -m kinetoscope capture
train.py`), each rank writes rankR.pt.trace.json.gz into one run folder (-o names it; by default
NAME_YYYYmmdd-HHMMSS, from the launcher's start) and rank 0 reports on the folder once every rank
has finished. `--nproc N` starts N local ranks through torch's own launcher itself.

Examples:
  kinetoscope capture train.py --lr 0.1
  kinetoscope capture --nproc 4 train_ddp.py
  kinetoscope capture --wait 10 --active 5 -o run.pt.trace.json.gz train.py
  kinetoscope capture --steps-from function:train_step -m mypkg.train
  kinetoscope capture --whole-run -c "import torch; torch.randn(512, 512) @ torch.randn(512, 512)"
"""


# Typed numbers, bounded (kinetoscope/common/numbers.py): a 5,000-digit value is a usage error, not
# a traceback; negative counts keep their own message (CaptureOptions.validate).
MAX_STEPS = 1_000_000
MAX_RANKS = 1024  # local ranks --nproc starts on this machine
MAX_SECONDS = 1e7  # some 115 days
STEP_COUNT = argparse_int(-MAX_STEPS, MAX_STEPS, "a number of steps")
RANK_COUNT = argparse_int(-MAX_RANKS, MAX_RANKS, "a number of ranks")
SECONDS = argparse_float(None, MAX_SECONDS, "a number of seconds")


def register(sub: argparse._SubParsersAction) -> None:
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
    _add_output_options(capture, ranks=True)
    window = capture.add_argument_group("which steps to record")
    window.add_argument(
        "--wait", type=STEP_COUNT, default=5, metavar="N", help="steps to skip first (default 5)"
    )
    window.add_argument(
        "--warmup",
        type=STEP_COUNT,
        default=2,
        metavar="N",
        help="steps to warm the profiler up without keeping them (default 2)",
    )
    window.add_argument(
        "--active", type=STEP_COUNT, default=3, metavar="N", help="steps to record (default 3)"
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
    ranks = capture.add_argument_group("distributed jobs (one trace per rank, in one run folder)")
    ranks.add_argument(
        "--nproc",
        type=RANK_COUNT,
        metavar="N",
        help="start N local ranks through torch's launcher (python -m torch.distributed.run "
        "--standalone) and capture each; the program chooses its backend (gloo, nccl)",
    )
    ranks.add_argument(
        "--rank-timeout",
        type=SECONDS,
        default=DEFAULT_RANK_TIMEOUT,
        metavar="SECONDS",
        help="under torchrun: how long rank 0 waits for the other ranks to finish before "
        f"reporting on the folder (default {DEFAULT_RANK_TIMEOUT:g})",
    )
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
    demo.add_argument(
        "--compile",
        action="store_true",
        help="run the workload eager and under torch.compile (CPU: Inductor's C++ backend; "
        "GPU: Triton), write both traces into one folder (-o names it) and open their diff",
    )
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


def _add_output_options(parser: argparse.ArgumentParser, ranks: bool = False) -> None:
    out = parser.add_argument_group("output")
    out.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="trace file to write (default: NAME_YYYYmmdd-HHMMSS.pt.trace.json.gz here)"
        + ("; in a distributed job (torchrun, --nproc), the run folder" if ranks else ""),
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
        raise CaptureUsage("nothing to run: give script.py, -m module or -c code")
    script, *script_args = rest
    if script.startswith("-"):
        raise CaptureUsage(f"unknown option {script} (options go before the script)")
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
        options = _options_from_args(args)  # its mistakes are usage errors: said first
        program = _program_from_args(args)
        env = RankEnv.from_environ()
        if args.nproc is not None:
            if env is not None:
                raise CaptureError(
                    "--nproc starts ranks itself; this is already a rank of a job (RANK is set)"
                )
            return _launch_ranks(args, program)
        if env is not None:
            return _capture_rank(args, program, options, env)
        output = Path(args.output) if args.output else None
        outcome, result = capture_program(program, options, output=output, force=args.force)
    except CaptureError as exc:
        raise _failure(exc, 2 if isinstance(exc, CaptureUsage) else 1) from None
    finish(result, view=not args.no_view)
    return outcome.exit_code


def _failure(exc: Exception, code: int = 1) -> KinetoscopeError:
    """A capture's failure as the command's error (its message may name itself already)."""
    message = str(exc)
    return KinetoscopeError(message.removeprefix("kinetoscope: "), code)


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def _quiet(text: str) -> None:
    pass


def _capture_rank(
    args: argparse.Namespace, program: Program, options: CaptureOptions, env: RankEnv
) -> int:
    """One rank of a distributed job (torchrun set RANK/WORLD_SIZE): its own file in the run
    folder; rank 0 then waits for the others and reports on the folder."""
    from kinetoscope.capture.run import capture_program

    run_dir = Path(args.output) if args.output else default_run_dir(program.label, env)
    prepare_run_dir(run_dir)
    output = run_dir / rank_trace_name(env.rank, env.restart)
    lead = env.rank == 0
    if lead and not env.launched_by_kinetoscope:
        _to_stderr(
            f"kinetoscope: each of the {env.world_size} ranks writes its trace ({output.name}, "
            f"...) into {run_dir}"
        )
    clear_exit_record(run_dir, env)
    try:
        outcome, result = capture_program(
            program,
            options,
            output=output,
            force=args.force,
            announce=_to_stderr if lead else _quiet,
        )
    except CaptureError as exc:  # not started (its file exists, say): rank 0 need not wait
        # The program did not run: no exit record (the marker's reason says why).
        write_marker(run_dir, env, CaptureResult(None, 0, options, str(exc)), 1)
        raise
    # How the program ended, kept beside the trace (summary and the job viewer read it), and
    # told to the reporting rank with the marker.
    record = exit_record(env, result, outcome)
    write_exit_record(run_dir, env, record)
    write_marker(run_dir, env, result, outcome.exit_code, record)
    # Rank 0's report (or --nproc's, for every rank) names the ranks without a trace and why.
    if result.path is None and not lead and not env.launched_by_kinetoscope:
        _to_stderr(f"kinetoscope: {env.describe()}: no trace written: {result.reason}")
    if not lead or env.launched_by_kinetoscope:
        return outcome.exit_code
    # Stopped by Ctrl-C or by the launcher (another rank failed): the others are stopping too,
    # and the launcher will not wait long for this process.
    timeout = min(args.rank_timeout, 10.0) if outcome.interrupted else args.rank_timeout
    job = wait_for_ranks(run_dir, env.world_size, env.token, timeout=timeout, announce=_to_stderr)
    record_lost_ranks(job, env.restart)
    report_job(job, _to_stderr)
    _view_folder(run_dir, view=not args.no_view and bool(job.written))
    return outcome.exit_code


def _launch_ranks(args: argparse.Namespace, program: Program) -> int:
    """`capture --nproc N`: N local ranks through torch's launcher, then the folder's report."""
    if args.nproc < 1:
        raise CaptureUsage(f"--nproc needs 1 or more ranks, got {args.nproc}")
    check_launcher_available()
    run_dir = Path(args.output) if args.output else new_run_dir(program.label)
    created = not run_dir.exists()
    prepare_run_dir(run_dir)
    if not args.force:
        taken = [
            name
            for rank in range(args.nproc)
            if (run_dir / (name := rank_trace_name(rank))).exists()
        ]
        if taken:
            raise CaptureError(f"{run_dir / taken[0]} exists; pass --force to overwrite it")
    _to_stderr(
        f"kinetoscope: starting {args.nproc} ranks (python -m torch.distributed.run); each "
        f"writes rankR.pt.trace.json.gz into {run_dir}"
    )
    code, job = launch_ranks(
        args.nproc,
        _rank_capture_args(args, program, run_dir),
        run_dir,
        announce=_to_stderr,
        timeout=1.0,  # the launcher has ended: every rank has too
    )
    record_lost_ranks(job)
    report_job(job, _to_stderr)
    if created and not job.written:
        # The folder made for the ranks holds no trace: not kept (nor the ranks' exit records,
        # which the report has said).
        for rank in range(args.nproc):
            try:
                (run_dir / record_name(rank)).unlink()
            except OSError:
                pass
        try:
            run_dir.rmdir()
        except OSError:
            pass
    _view_folder(run_dir, view=not args.no_view and bool(job.written))
    return code


def _rank_capture_args(args: argparse.Namespace, program: Program, run_dir: Path) -> list[str]:
    """The `kinetoscope capture` arguments each rank started by --nproc runs with."""
    rank_args = [
        "--wait",
        str(args.wait),
        "--warmup",
        str(args.warmup),
        "--active",
        str(args.active),
        "--steps-from",
        args.steps_from,
    ]
    for flag in ("whole_run", "record_shapes", "profile_memory", "with_stack", "no_cuda", "force"):
        if getattr(args, flag):
            rank_args.append("--" + flag.replace("_", "-"))
    rank_args += ["--no-view", "-o", str(run_dir)]
    if program.kind == MODULE:
        return [*rank_args, "-m", program.target, *program.args]
    if program.kind == CODE:
        return [*rank_args, "-c", program.target, *program.args]
    return [*rank_args, "--", program.target, *program.args]


def _view_folder(run_dir: Path, *, view: bool) -> None:
    """Open the job viewer on the run folder when asked and on a terminal (the commands are
    printed before: the viewer's alternate screen leaves them in place)."""
    if view and sys.stdout.isatty() and sys.stdin.isatty():
        from kinetoscope.commands import view as viewer

        open_folder_viewer(run_dir, viewer.run_job_view)


def handle_demo(args: argparse.Namespace) -> int:
    """`kinetoscope demo`: capture the built-in workload, then open it."""
    from kinetoscope.capture.demo import capture_demo

    if getattr(args, "compile", False):
        return handle_compile_demo(args)
    try:
        output = Path(args.output) if args.output else None
        outcome, result = capture_demo(output=output, force=args.force, cpu_only=args.cpu)
    except CaptureError as exc:
        raise _failure(exc) from None
    finish(result, view=not args.no_view)
    return outcome.exit_code


def handle_compile_demo(args: argparse.Namespace) -> int:
    """`kinetoscope demo --compile`: the workload eager and compiled, then the diff of the two
    (`kinetoscope diff EAGER COMPILED`) on a terminal; where this kinetoscope has no `diff`
    command, the command is printed and the compiled run's trace opened."""
    from kinetoscope.capture.demo import capture_compile_demo

    try:
        folder = Path(args.output) if args.output else None
        outcome, eager, compiled = capture_compile_demo(folder, force=args.force, cpu_only=args.cpu)
    except CaptureError as exc:
        raise _failure(exc) from None
    if eager.path is None or compiled.path is None:
        failed = compiled if eager.path is not None else eager
        which = "compiled" if eager.path is not None else "eager"
        raise KinetoscopeError(f"no {which} trace written: {failed.reason}", outcome.exit_code or 1)
    base, new = shlex.quote(str(eager.path)), shlex.quote(str(compiled.path))
    print(
        f"kinetoscope: wrote {eager.path} (eager) and {compiled.path} (compiled)", file=sys.stderr
    )
    has_diff = "diff" in _subcommands()
    view = not args.no_view and sys.stdout.isatty() and sys.stdin.isatty()
    if view and has_diff:
        from kinetoscope.commands.cli import main as kinetoscope_main

        kinetoscope_main(["diff", str(eager.path), str(compiled.path)])
    elif view:
        try:
            from kinetoscope.commands.view import run_view
        except ImportError:
            pass
        else:
            run_view(str(compiled.path), open_findings=True)
    print(f"compare them with: kinetoscope diff {base} {new}", file=sys.stderr)
    print(f"the compiled run alone (c: compile view): kinetoscope view {new}", file=sys.stderr)
    return outcome.exit_code


def _subcommands() -> tuple[str, ...]:
    from kinetoscope.commands.cli import SUBCOMMANDS

    return tuple(SUBCOMMANDS)


def finish(result: CaptureResult, *, view: bool) -> None:
    """Report the written trace, then open the viewer on it when stdout is a terminal."""
    if result.path is None:
        print(f"kinetoscope: no trace written: {result.reason}", file=sys.stderr)
        return
    command = f"kinetoscope view {shlex.quote(str(result.path))}"
    print(f"kinetoscope: wrote {result.path} ({result.recorded_text()})", file=sys.stderr)
    if view and sys.stdout.isatty() and sys.stdin.isatty():
        try:
            from kinetoscope.commands.view import run_view
        except ImportError:
            pass
        else:
            run_view(str(result.path), open_findings=True)
    print(f"view it with: {command}", file=sys.stderr)
