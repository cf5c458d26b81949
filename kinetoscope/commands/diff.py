"""`kinetoscope diff BASE NEW`: its options, the diff viewer or the printed diff, and the
verdict's exit status (the document and the tables: kinetoscope/present/report_diff.py)."""

from __future__ import annotations

import argparse
from typing import Any

from kinetoscope.commands.summary import FORMATS
from kinetoscope.common.errors import KinetoscopeError, UsageError, warn
from kinetoscope.common.options import columns, percent

EXIT_REGRESSION = 3  # `--fail-above PCT`: a regression whose interval lies above PCT %
EXIT_UNDECIDED = 4  # `--strict`: a regression of more than PCT % cannot be ruled out


def register(sub: Any) -> None:
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
    diff.add_argument("--width", type=columns, metavar="N", help="as for summary")
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
        type=percent,
        metavar="PCT",
        help="the smallest step-time change, in %%, that is a regression or an improvement "
        "(default 5)",
    )
    diff.add_argument(
        "--fail-above",
        type=percent,
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
    diff.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The command: the diff viewer on a terminal when no output is asked for, else the text,
    Markdown, TSV, JSON or CSV form, and the verdict's exit status."""
    from kinetoscope.commands import view

    if args.strict and args.fail_above is None:
        raise UsageError("--strict needs --fail-above PCT (the regression it rules out)")
    # No output asked for (format, width, exit status) and a terminal: the viewer.
    printed = args.json or args.format or args.width is not None or args.csv is not None
    if not printed and args.fail_above is None and view.terminal_problem() is None:
        return view.run_diff_view(
            args.base,
            args.new,
            threshold_pct=args.threshold,
            steps=args.steps,
            templates=args.fold_templates,
        )
    if args.csv is not None and (args.json or args.format or args.width is not None):
        raise UsageError("--csv writes files instead of printing: drop the output options")
    if args.csv_raw and args.csv is None:
        raise UsageError("--csv-raw goes with --csv DIR")
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


def checked_options(
    base_path: str,
    new_path: str,
    threshold_pct: float | None,
    steps: str | None,
    templates: bool,
    *,
    streams: bool,
) -> Any:
    """The diff's options, once `steps` parses and both paths can be read (the text form and
    the viewer check the same way); else KinetoscopeError: a usage error (2) for a bad `steps`,
    1 for a path that cannot be read. `streams`: a FIFO or stdin is allowed."""
    from kinetoscope.analysis.diff import (
        DEFAULT_THRESHOLD_PCT,
        DiffOptions,
        StepSpecError,
        parse_step_pairs,
    )
    from kinetoscope.parser.source import trace_path_problem

    try:
        selection = parse_step_pairs(steps) if steps is not None else None
    except StepSpecError as exc:
        raise UsageError(str(exc)) from None
    for path in (base_path, new_path):
        problem = trace_path_problem(path, streams=streams)
        if problem is not None:
            raise KinetoscopeError(problem)
    return DiffOptions(
        threshold_pct=DEFAULT_THRESHOLD_PCT if threshold_pct is None else threshold_pct,
        steps=selection,
        templates=templates,
    )


def diff_failure_message(error: BaseException, paths: tuple[str, str], events: int) -> str:
    """The one line for a diff whose analysis failed (`error`: an AnalysisFailed, a
    MemoryError): out of memory, said with the stage and what the two traces' `events` need;
    else the result that failed and why."""
    from kinetoscope.analysis.session import memory_failure
    from kinetoscope.parser.model import out_of_memory_message

    stage = memory_failure(error)
    if stage is None:
        return str(error)
    return out_of_memory_message(f"{paths[0]} and {paths[1]}", events, stage or "the comparison")


def steps_problem(text: str | None, options: Any, base: Any, new: Any) -> str | None:
    """Why `--steps` (its `text`, parsed into `options.steps`) is a usage error for these two
    traces: it picks none of the step pairs they have (`--steps 9-` of 6), said with the
    steps there are; None when it picks some, or when the traces have no common steps (then
    the whole traces are compared, as docs/diff.md says)."""
    from kinetoscope.analysis.diff import _resolve_steps

    if text is None or options.steps is None:
        return None
    steps_b, steps_n = len(base.steps), len(new.steps)
    common = min(steps_b, steps_n)
    if not common or _resolve_steps(options.steps, common):
        return None
    have = "step 1" if common == 1 else f"steps 1-{common}"
    sides = "" if steps_b == steps_n else f" (BASE has {steps_b}, NEW {steps_n})"
    spec = text.strip() if len(text) <= 40 else text.strip()[:36] + "…"  # it parsed: digits, -, ,
    return f"--steps {spec}: the traces have {have} in common{sides}"


def run_diff(
    base_path: str,
    new_path: str,
    output: str = "text",
    width: int | None = None,
    threshold_pct: float | None = None,
    steps: str | None = None,
    templates: bool = False,
    fail_above: float | None = None,
    csv_dir: str | None = None,
    strict: bool = False,
    csv_raw: bool = False,
) -> int:
    """Print the diff; 0, or EXIT_REGRESSION for a regression whose interval lies above
    `fail_above`, or (`strict`) EXIT_UNDECIDED when such a regression cannot be ruled out, or 1
    with one line when a trace cannot be read, or 2 for a bad `--steps` (KinetoscopeError). With `csv_dir`, write
    the diff viewer's tables there as CSV files instead (kinetoscope/present/tables.py; `csv_raw`: cells
    as recorded)."""
    from kinetoscope.analysis.diff import diff_sessions
    from kinetoscope.analysis.session import AnalysisFailed
    from kinetoscope.parser import TraceError
    from kinetoscope.present.report_diff import diff_document, diff_tables, load_sessions
    from kinetoscope.present.report_summary import emit, emit_sections, summary_json
    from kinetoscope.present.safe_text import clean

    # A named pipe or a device is refused at once, as by the viewer (nothing is opened).
    options = checked_options(base_path, new_path, threshold_pct, steps, templates, streams=False)
    try:
        base, new = load_sessions(base_path, new_path)
    except TraceError as exc:
        raise KinetoscopeError(clean(str(exc))) from None
    except MemoryError:
        raise KinetoscopeError(
            f"{clean(base_path)}, {clean(new_path)}: out of memory while "
            "loading (free memory, or raise the limit: ulimit -v)"
        ) from None
    for side, path, session in (("BASE", base_path, base), ("NEW", new_path, new)):
        for warning in session.trace.warnings:  # cut off, damaged: as the summary says
            warn(f"{side} {clean(path)}: {clean(warning)}")
    problem = steps_problem(steps, options, base, new)
    if problem is not None:
        raise UsageError(problem)
    try:
        diff = diff_sessions(base, new, options)
        if csv_dir is not None:
            from kinetoscope.present import tables

            source = tables.diff_source(base_path, new_path)
            written = tables.emit_written(tables.diff_tables(diff), csv_dir, source, raw=csv_raw)
            if written:
                return written
        elif output == "json":
            emit(summary_json(diff_document(diff, base_path, new_path)) + "\n")
        else:
            sections = diff_tables(diff)
            emit_sections(sections, output, width)
    except (AnalysisFailed, MemoryError) as exc:  # one result could not be computed: which
        events = int(base.trace.n_events) + int(new.trace.n_events)
        message = diff_failure_message(exc, (base_path, new_path), events)
        raise KinetoscopeError(clean(message)) from None
    if diff.verdict.fails(fail_above):
        return EXIT_REGRESSION
    if strict and diff.verdict.undecided(fail_above):
        return EXIT_UNDECIDED
    return 0
