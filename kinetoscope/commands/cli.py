"""The `kinetoscope` command: subcommands wire parser, analysis, TUI and capture together."""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from typing import Any

from kinetoscope import __version__

SUBCOMMANDS = (
    "view",
    "summary",
    "diff",
    "check",
    "export",
    "sql",
    "serve",
    "mcp",
    "capture",
    "demo",
)
FORMATS = ("text", "md", "tsv", "json")

# Options of `summary` that people also try on the viewer: they get pointed at `summary`.
SUMMARY_ONLY_OPTIONS = ("--json", "--format", "--width")


class OutputError(Exception):
    """Standard output could not be written (a full disk, a closed pipe): one line, not a trace."""


def _error(message: str) -> int:
    try:
        print(f"kinetoscope: {message}", file=sys.stderr)
    except OSError:  # nowhere to say it: the status says it
        pass
    return 1


def trace_path_problem(path: str, streams: bool = False) -> str | None:
    """Why `path` cannot be opened as a trace file, as the one line both `summary` and the
    viewer print (after `kinetoscope: `), or None. Nothing is opened: a named pipe would block.
    With `streams` (summary), a pipe or a device (`/dev/stdin`, `<(...)`) is read as a stream."""
    from kinetoscope.present.safe_text import clean  # a file name is data, never obeyed

    shown = clean(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"{shown}: no such file"
    except PermissionError:
        return f"{shown}: permission denied"
    except (OSError, ValueError) as exc:  # a loop of links, a name too long, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{shown}: cannot read ({clean(reason)})"
    if stat.S_ISDIR(info.st_mode):
        return f"{shown}: is a directory, not a trace file"
    readable_stream = stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode)
    if not stat.S_ISREG(info.st_mode) and not (streams and readable_stream):
        kind = (
            "a named pipe"
            if stat.S_ISFIFO(info.st_mode)
            else "a device"
            if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            else "a socket"
            if stat.S_ISSOCK(info.st_mode)
            else "not a plain file"
        )
        return f"{shown}: not a regular file ({kind}); save the trace to a file first"
    if not os.access(path, os.R_OK):
        return f"{shown}: permission denied"
    from kinetoscope.parser.source import perfetto_message, perfetto_problem

    if stat.S_ISREG(info.st_mode) and perfetto_problem(path) is not None:  # a .pftrace
        return perfetto_message(shown)
    return None


class _Parser(argparse.ArgumentParser):
    """argparse, except that help and usage that cannot be written are an error, not lost."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kinetoscope",
        description="Terminal viewer and analyser for PyTorch profiler traces.",
        epilog="Exit status: 0 done (also when a reader such as `head` closes the pipe early), "
        "1 an error (one line on stderr), 2 a usage error.",
    )
    parser.add_argument("--version", action="version", version=f"kinetoscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    view = sub.add_parser(
        "view",
        help="open a trace in the terminal viewer (the default)",
        description="Open a trace in the terminal viewer. It needs a terminal: for text or "
        "JSON output use `kinetoscope summary`.",
    )
    view.add_argument(
        "trace",
        nargs="+",
        help="a .json or .json.gz torch.profiler trace; or a job's folder, or several rank "
        "files, for the job viewer (ranks overview, collectives)",
    )
    view.add_argument(
        "--cycle",
        type=_positive,
        metavar="N",
        help="a job's folder: view profiling cycle N (1 = the oldest) instead of the newest "
        "complete one",
    )
    for option in SUMMARY_ONLY_OPTIONS:  # accepted only to point at `summary`
        view.add_argument(
            option, nargs="?", const=True, dest=f"summary_{option[2:]}", help=argparse.SUPPRESS
        )

    summary = sub.add_parser(
        "summary",
        help="print the trace's analysis as tables, Markdown, TSV or JSON",
        description="Print the trace's analysis: tables (text), Markdown (md), tab-separated "
        "values (tsv) or the JSON document (json). Numbers are never cut; long names are.",
    )
    summary.add_argument(
        "trace",
        nargs="+",
        help="a .json or .json.gz torch.profiler trace; or a job's folder, or several rank "
        "files, for the job's summary (docs/summary-ranks.md)",
    )
    summary.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text: tables for reading (default); md: Markdown tables; tsv: one tab-separated "
        "table per section; json: the JSON document",
    )
    summary.add_argument("--json", action="store_true", help="the JSON document (= --format json)")
    summary.add_argument(
        "--width",
        type=_width,
        metavar="N",
        help="lay the text tables out for N columns (default: the terminal's width; when "
        "standard output is not a terminal, $COLUMNS or each table's natural width)",
    )
    summary.add_argument(
        "--csv",
        metavar="DIR",
        help="write the viewer's tables as CSV files into DIR instead (made when missing; an "
        "existing file is an error): operators, kernels, gaps, findings, steps; a job: ranks, "
        "steps by rank, collectives (docs/csv.md)",
    )
    summary.add_argument(
        "--csv-raw",
        action="store_true",
        help="with --csv: write names exactly as recorded, for exact round trips (by default a "
        "cell that starts with =, +, -, @, TAB or CR and is not a number gets a ' in front, so "
        "that a spreadsheet does not run it as a formula)",
    )

    job = summary.add_argument_group("a distributed job (a folder or several files)")
    job.add_argument(
        "--align-clocks",
        action="store_true",
        help="subtract each rank's estimated clock offset (from the ends of synchronising "
        "collectives) before computing waits and skews; nothing to do when the ranks ran on "
        "one host (one clock)",
    )
    job.add_argument(
        "--force-align-clocks",
        action="store_true",
        help="subtract the estimated offsets even when the ranks ran on one host",
    )
    _add_cycle_option(job)
    job.add_argument(
        "--workers",
        type=_positive,
        metavar="N",
        help="digest the ranks in N processes (default: min(ranks, CPUs))",
    )
    job.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="digest the ranks on a Dask cluster instead: tcp://HOST:8786, a scheduler file, "
        "or local[:N] for a LocalCluster of N processes; the merge stays here (needs the "
        "distributed extra)",
    )

    _add_diff_command(sub)

    from kinetoscope.commands.check import add_check_command

    add_check_command(sub)

    _add_export_command(sub)

    from kinetoscope.sql import add_sql_command

    add_sql_command(sub)

    from kinetoscope.commands.serve import add_serve_command

    add_serve_command(sub)

    from kinetoscope.mcp_server import add_mcp_command

    add_mcp_command(sub)

    from kinetoscope.commands.capture import add_capture_commands

    add_capture_commands(sub)
    return parser


def _add_export_command(sub: Any) -> None:
    """`kinetoscope export`: its arguments (the work: kinetoscope/export/crop.py, export_job.py,
    imported when the command runs)."""
    export = sub.add_parser(
        "export",
        help="write a time window of a trace as a smaller trace (Perfetto, kinetoscope)",
        description="Write the part of a trace inside a time window as a trace of its own: "
        "every slice that overlaps the window, the runtime calls and GPU activities linked to "
        "them, whole flows, metadata and top-level keys, memory totals at the window's start "
        "(docs/export.md). Choose the window with one of --window, --step, --around-gap.",
    )
    export.add_argument(
        "trace",
        metavar="TRACE",
        nargs="+",
        help="a .json or .json.gz torch.profiler trace; or a job's folder, or several rank "
        "files, for every rank's window in one bundle (docs/export.md)",
    )
    export.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="the file to write: OUT.json, or OUT.json.gz for a gzip'd one; for a job, OUT.zip "
        "(a Perfetto bundle: a file per rank and perfetto_manifest.json) or one merged OUT.json",
    )
    choice = export.add_mutually_exclusive_group(required=True)
    choice.add_argument(
        "--window",
        metavar="A..B",
        help="times as the viewer shows them, from the trace's first slice: e.g. "
        "+12.5ms..+40ms (units ns, us, µs, ms, s; A.. to the end, ..B from the start)",
    )
    choice.add_argument(
        "--step",
        action="append",
        metavar="N",
        help="ProfilerStep#N: the window spans the steps named; repeatable, or N,M or N-M",
    )
    choice.add_argument(
        "--around-gap",
        type=_gap_rank,
        metavar="K",
        help="the K-th longest GPU idle gap (1 = the longest, as in the viewer's gap list) "
        "with --context on each side",
    )
    export.add_argument(
        "--context",
        metavar="TIME",
        help="with --around-gap: time shown on each side of the gap (default: the gap's "
        "length), e.g. 2ms",
    )
    export.add_argument(
        "--clip",
        action="store_true",
        help="clip slices to the window (times computed in integer ns); slices kept outside "
        "the window by correlation stay whole",
    )
    _add_export_job_options(export)
    export.set_defaults(handler=_run_export)


def _add_cycle_option(group: Any) -> None:
    """`--cycle N`, for the commands that read a job (summary, export)."""
    group.add_argument(
        "--cycle",
        type=_positive,
        metavar="N",
        help="use profiling cycle N (1 = the oldest) instead of the newest complete one",
    )


def _add_export_job_options(export: Any) -> None:
    """The options of `export` for a job's folder or several rank files."""
    job = export.add_argument_group(
        "a distributed job (a folder or several rank files: the same window from every rank; "
        "--window counts from the job's origin as the job timeline shows times, --step takes "
        "each rank's own ProfilerStep#N; docs/export-ranks.md)"
    )
    job.add_argument(
        "--align-clocks",
        action="store_true",
        help="cut each rank at the same instants on the reference rank's clock (the estimated "
        "clock offsets applied) instead of the same times on its own clock; the manifest pins "
        "the ranks with the offsets and the merged trace shifts their times; nothing to do "
        "when the ranks ran on one host (one clock)",
    )
    job.add_argument(
        "--force-align-clocks",
        action="store_true",
        help="apply the estimated offsets even when the ranks ran on one host",
    )
    _add_cycle_option(job)
    job.add_argument(
        "--merged",
        action="store_true",
        help="write one merged trace (OUT.json or OUT.json.gz; the default for those names) "
        "instead of the Perfetto bundle (OUT.zip)",
    )
    job.add_argument(
        "--workers",
        type=_positive,
        metavar="N",
        help="digest and crop the ranks in N processes (default: min(ranks, CPUs); ranks "
        "adding up to less than 32 MiB are cropped in this one)",
    )


def _run_export(args: argparse.Namespace) -> int:
    from kinetoscope.export.crop import run_export_command

    return run_export_command(args)


def _add_diff_command(sub: Any) -> None:
    diff = sub.add_parser(
        "diff",
        help="compare two traces (BASE, then NEW): what changed, and is it a regression",
        description="Compare two traces: steps paired in order, operators and kernels by "
        "normalised name, GPU sequences aligned per stream, and a verdict (docs/diff.md).",
        epilog="Exit status: 0 done, 1 an error, 2 a usage error, 3 (with --fail-above) a "
        "regression whose 95 % interval lies above PCT %, 4 (with --strict) one of more than "
        "PCT % cannot be ruled out.",
    )
    diff.add_argument("base", metavar="BASE", help="the trace before the change")
    diff.add_argument("new", metavar="NEW", help="the trace after it")
    diff.add_argument(
        "--format", choices=FORMATS, help="text (default), md, tsv or json, as for summary"
    )
    diff.add_argument("--json", action="store_true", help="the JSON document (= --format json)")
    diff.add_argument("--width", type=_width, metavar="N", help="as for summary")
    diff.add_argument(
        "--csv",
        metavar="DIR",
        help="write the diff's kernels and operators tables as CSV files into DIR instead "
        "(docs/csv.md)",
    )
    diff.add_argument(
        "--csv-raw",
        action="store_true",
        help="with --csv: write names exactly as recorded, for exact round trips (by default a "
        "cell that starts with =, +, -, @, TAB or CR and is not a number gets a ' in front, so "
        "that a spreadsheet does not run it as a formula)",
    )
    diff.add_argument(
        "--steps",
        metavar="LIST",
        help="which paired steps to compare, 1 = the first of each trace: e.g. 2-, 1,3-5 "
        "(default: every step both traces have)",
    )
    diff.add_argument(
        "--threshold",
        type=_percent,
        metavar="PCT",
        help="the smallest step-time change, in %%, that is a regression or an improvement "
        "(default 5)",
    )
    diff.add_argument(
        "--fail-above",
        type=_percent,
        metavar="PCT",
        help="exit with status 3 when the verdict is a regression whose 95 %% interval lies "
        "above PCT %%",
    )
    diff.add_argument(
        "--strict",
        action="store_true",
        help="with --fail-above: also exit with status 4 when a regression of more than PCT %% "
        "cannot be ruled out (an interval reaching above it, too few steps, not comparable)",
    )
    diff.add_argument(
        "--fold-templates",
        action="store_true",
        help="also match C++ kernel names without their template arguments",
    )


# The largest values the count options take: a cycle, a worker count, a gap's rank (more than
# any trace holds; a bigger value is a typing mistake, refused before it reaches a range).
MAX_COUNT = 1_000_000
MAX_WIDTH = 10_000  # columns (report.NATURAL_WIDTH)
MAX_PERCENT = 10**9


def _typed(text: str, what: str) -> str:
    """`text` when it is short enough to be a number (kinetoscope/common/numbers.py), else the usage
    error, before Python converts it (a 5,000-digit int is a ValueError of its own)."""
    from kinetoscope.common.numbers import MAX_NUMBER_TEXT, shown

    if len(text) > MAX_NUMBER_TEXT:
        raise argparse.ArgumentTypeError(f"{shown(text)} is too long {what}")
    return text


def _percent(text: str) -> float:
    """`diff`'s `--threshold` and `--fail-above`: a percentage as `check`'s budgets write it
    (`5`, `5%`, `12.5 %`; kinetoscope/common/budget.py), up to MAX_PERCENT."""
    from kinetoscope.common.budget import BudgetError, parse_percent

    try:
        return float(parse_percent(text, "a percentage", most=MAX_PERCENT))
    except BudgetError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def _positive(text: str) -> int:
    from kinetoscope.common.numbers import shown

    try:
        value = int(_typed(text, "a number"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {shown(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"at most {MAX_COUNT:,}, not {value:,}")
    return value


def _gap_rank(text: str) -> int:
    """`--around-gap K`: any int that fits (0 and negatives are the export's own message)."""
    from kinetoscope.common.numbers import shown

    try:
        value = int(_typed(text, "a number"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {shown(text)}") from None
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"at most {MAX_COUNT:,}, not {value:,}")
    return value


def _width(text: str) -> int:
    from kinetoscope.common.numbers import shown

    try:
        value = int(_typed(text, "a number of columns"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of columns: {shown(text)}") from None
    if value < 20:
        raise argparse.ArgumentTypeError(f"at least 20 columns, not {value}")
    if value > MAX_WIDTH:
        raise argparse.ArgumentTypeError(f"at most {MAX_WIDTH:,} columns, not {value:,}")
    return value


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
            args = build_parser().parse_args(argv)
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
        else:
            code = int(args.handler(args) if hasattr(args, "handler") else _dispatch(args) or 0)
        _flush_stdout()
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`| head`): what it wanted it has; nothing to report.
        _silence_stdout()
        return 0
    except OutputError as exc:
        _silence_stdout()
        return _error(str(exc))


def _flush_stdout() -> None:
    """Flush standard output now, so that a write error is ours to report, not Python's at exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(output_error_message(exc)) from None


def output_error_message(exc: OSError) -> str:
    """The one line for an error writing standard output."""
    if exc.errno == errno.EPIPE:
        return "standard output was closed"
    reason = exc.strerror or str(exc)
    return f"cannot write the output: {reason}"


def _silence_stdout() -> None:
    """Point the standard output's descriptor at /dev/null, so that the flush at exit has nowhere
    to fail (else Python prints 'Exception ignored ... BrokenPipeError' and exits 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _job_summary_on_cluster(args: argparse.Namespace, output: str) -> int:
    """`summary DIR --scheduler ADDRESS`: the ranks digested on a Dask cluster (cluster.py)."""
    from kinetoscope.commands.cluster import SchedulerError, dask_executor
    from kinetoscope.present.report_job import run_job_summary

    try:
        with dask_executor(args.scheduler) as executor:
            return run_job_summary(
                args.trace,
                output=output,
                width=args.width,
                align_clocks=args.align_clocks,
                force_align=args.force_align_clocks,
                cycle=args.cycle,
                executor=executor,
                csv_dir=args.csv,
                csv_raw=args.csv_raw,
            )
    except SchedulerError as exc:
        return _error(str(exc))


def _usage_error(message: str) -> int:
    """A usage error found after parsing: one line, exit status 2 (as argparse's)."""
    _error(message)
    return 2


def _is_zip(path: str) -> bool:
    """A zip archive: a job bundle that `export RUN_DIR -o job.zip` wrote, read as a job."""
    from kinetoscope.parser.bundle import is_zip

    return is_zip(path)


def _job_options_given(args: argparse.Namespace) -> list[str]:
    """The options of a job's summary given on the command line, in their help's order."""
    given = [
        ("--align-clocks", args.align_clocks),
        ("--force-align-clocks", args.force_align_clocks),
        ("--cycle", args.cycle is not None),
        ("--workers", args.workers is not None),
        ("--scheduler", args.scheduler is not None),
    ]
    return [option for option, on in given if on]


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "diff":
        from kinetoscope.commands.view import terminal_problem
        from kinetoscope.present.report_diff import run_diff

        if args.strict and args.fail_above is None:
            return _usage_error("--strict needs --fail-above PCT (the regression it rules out)")
        # No output asked for (format, width, exit status) and a terminal: the viewer.
        printed = args.json or args.format or args.width is not None or args.csv is not None
        if not printed and args.fail_above is None and terminal_problem() is None:
            from kinetoscope.commands.view import run_diff_view

            return run_diff_view(
                args.base,
                args.new,
                threshold_pct=args.threshold,
                steps=args.steps,
                templates=args.fold_templates,
            )
        if args.csv is not None and (args.json or args.format or args.width is not None):
            return _usage_error("--csv writes files instead of printing: drop the output options")
        if args.csv_raw and args.csv is None:
            return _usage_error("--csv-raw goes with --csv DIR")
        return run_diff(
            args.base,
            args.new,
            output="json" if args.json else args.format or "text",
            width=args.width,
            threshold_pct=args.threshold,
            steps=args.steps,
            templates=args.fold_templates,
            fail_above=args.fail_above,
            csv_dir=args.csv,
            strict=args.strict,
            csv_raw=args.csv_raw,
        )
    if args.command == "summary":
        from kinetoscope.present.report_summary import run_summary

        output = "json" if args.json else args.format
        if args.csv is not None and (args.json or output != "text" or args.width is not None):
            return _usage_error("--csv writes files instead of printing: drop the output options")
        if args.csv_raw and args.csv is None:
            return _usage_error("--csv-raw goes with --csv DIR")
        if len(args.trace) > 1 or os.path.isdir(args.trace[0]) or _is_zip(args.trace[0]):
            from kinetoscope.present.report_job import run_job_summary

            if args.scheduler is not None and args.workers is not None:
                return _usage_error(
                    "--workers sets the local worker processes, --scheduler digests the ranks "
                    "on a Dask cluster instead: give one of them (local:N for N local Dask "
                    "workers)"
                )
            if args.scheduler is not None:
                return _job_summary_on_cluster(args, output)
            return run_job_summary(
                args.trace,
                output=output,
                width=args.width,
                align_clocks=args.align_clocks,
                force_align=args.force_align_clocks,
                cycle=args.cycle,
                workers=args.workers,
                csv_dir=args.csv,
                csv_raw=args.csv_raw,
            )
        given = _job_options_given(args)
        if given and os.path.exists(args.trace[0]):  # else: the missing file is the problem
            return _usage_error(
                f"{given[0]} is an option of a job's summary (a folder or several files), "
                "not of one trace file"
            )
        return run_summary(
            args.trace[0], output=output, width=args.width, csv_dir=args.csv, csv_raw=args.csv_raw
        )
    if args.command == "view":
        paths, args.trace = args.trace, args.trace[0]
        used = [o for o in SUMMARY_ONLY_OPTIONS if getattr(args, f"summary_{o[2:]}") is not None]
        if used:
            from kinetoscope.commands.view import _quoted
            from kinetoscope.present.safe_text import clean

            shown = " ".join(clean(_quoted(p)) for p in paths)
            print(
                f"kinetoscope: the viewer has no {used[0]} option; for the analysis as text or "
                f"JSON run: kinetoscope summary {shown} {used[0]}"
                + ("" if used[0] == "--json" else " ..."),
                file=sys.stderr,
            )
            return 2
        if len(paths) > 1:  # a job's rank files: the job viewer
            from kinetoscope.commands.view import run_job_view

            return run_job_view(paths, cycle=args.cycle)
        if os.path.isdir(args.trace):  # a job's folder: the job viewer
            from kinetoscope.commands.view import run_job_view

            return run_job_view([args.trace], cycle=args.cycle)
        if _is_zip(args.trace):  # a job bundle kinetoscope wrote: its ranks, as a job
            from kinetoscope.commands.view import run_bundle_view

            return run_bundle_view(args.trace, cycle=args.cycle)
        if args.cycle is not None:
            return _error("--cycle picks a profiling cycle of a job (a folder or several files)")
        from kinetoscope.commands.view import run_view

        return run_view(args.trace)
    return _error(f"unknown command {args.command}")
