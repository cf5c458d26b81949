"""`kinetoscope export TRACE|DIR|FILES... -o OUT`: its options, and which export runs: one
trace's window (kinetoscope/export/crop.py) or every rank's window of a job in one bundle or one
merged trace (kinetoscope/export/job_bundle.py)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

from kinetoscope.commands.summary import add_cycle_option
from kinetoscope.common.errors import KinetoscopeError, UsageError, warn
from kinetoscope.common.options import gap_rank, positive


def register(sub: Any) -> None:
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
        type=gap_rank,
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
    _add_job_options(export)
    export.set_defaults(handler=run)


def _add_job_options(export: Any) -> None:
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
    add_cycle_option(job)
    job.add_argument(
        "--merged",
        action="store_true",
        help="write one merged trace (OUT.json or OUT.json.gz; the default for those names) "
        "instead of the Perfetto bundle (OUT.zip)",
    )
    job.add_argument(
        "--workers",
        type=positive,
        metavar="N",
        help="digest and crop the ranks in N processes (default: min(ranks, CPUs); ranks "
        "adding up to less than 32 MiB are cropped in this one)",
    )


def run(args: argparse.Namespace) -> int:
    """The command: a job's inputs (a folder, several files) exported as a job, one trace
    file as one trace; 0 written, KinetoscopeError otherwise (2: a usage error)."""
    from kinetoscope.export.job_bundle import is_job

    inputs = list(args.trace)
    if is_job(inputs):
        return _export_job(args, inputs)
    given = _job_options_given(args)
    if given and os.path.exists(inputs[0]):  # else: the missing file is the problem
        raise UsageError(
            f"{given[0]} is an option of a job's export (a folder or several "
            "rank files), not of one trace file"
        )
    return _export_trace(args, inputs[0])


def _job_options_given(args: argparse.Namespace) -> list[str]:
    """The options of a job's export given on the command line, in their help's order."""
    return [
        option
        for option, on in (
            ("--align-clocks", args.align_clocks),
            ("--force-align-clocks", args.force_align_clocks),
            ("--cycle", args.cycle is not None),
            ("--merged", args.merged),
            ("--workers", args.workers is not None),
        )
        if on
    ]


def _export_trace(args: argparse.Namespace, path: str) -> int:
    """One trace's window, cropped and written; the line that says what was kept."""
    from kinetoscope.export.crop import ExportError, export_trace, parse_step_numbers, parse_time
    from kinetoscope.present.safe_text import clean

    if args.context is not None and args.around_gap is None:
        raise UsageError("--context goes with --around-gap")
    try:
        context = None if args.context is None else parse_time(args.context)
        if context is not None and context < 0:
            raise ExportError("--context: a time of 0 or more")
        steps = parse_step_numbers(args.step) if args.step else None
        if args.around_gap is not None and args.around_gap < 1:
            raise ExportError(f"--around-gap {args.around_gap}: 1 is the longest gap")
        line, notes = export_trace(
            path,
            args.output,
            window=args.window,
            steps=steps,
            around_gap=args.around_gap,
            context_ns=context,
            clip=args.clip,
        )
    except ExportError as exc:
        raise KinetoscopeError(clean(str(exc))) from None
    except MemoryError:
        raise KinetoscopeError(clean(f"{path}: out of memory while exporting")) from None
    for note in notes:
        warn(clean(note))
    print(clean(line))
    return 0


def _export_job(args: argparse.Namespace, inputs: list[str]) -> int:
    """Every rank's window of a job, in one bundle or one merged trace (ranks left out named
    on stderr)."""
    from kinetoscope.export.crop import ExportError, parse_step_numbers
    from kinetoscope.present.safe_text import clean

    for option, value in (("--around-gap", args.around_gap), ("--context", args.context)):
        if value is not None:
            raise UsageError(
                f"{option} is for one trace: each rank has its own gaps; for a "
                "job give --window A..B (from the job's origin) or --step N (each rank's own)"
            )
    steps = None
    if args.step:
        try:
            steps = parse_step_numbers(args.step)
        except ExportError as exc:
            raise KinetoscopeError(clean(str(exc))) from None
    return export_job(
        inputs,
        args.output,
        window=args.window,
        steps=steps,
        align_clocks=args.align_clocks,
        cycle=args.cycle,
        merged=args.merged,
        clip=args.clip,
        workers=args.workers,
        force_align=args.force_align_clocks,
    )


def export_job(
    inputs: list[str],
    out_path: str,
    *,
    window: str | None = None,
    steps: Sequence[int] | None = None,
    align_clocks: bool = False,
    cycle: int | None = None,
    merged: bool = False,
    clip: bool = False,
    workers: int | None = None,
    force_align: bool = False,
) -> int:
    """`kinetoscope export DIR|FILES... -o OUT`: 0 when written (ranks left out named on
    stderr), KinetoscopeError when nothing could be written."""
    from kinetoscope.export import job_bundle
    from kinetoscope.export.crop import ExportError, check_output
    from kinetoscope.present.safe_text import clean

    try:
        kind = job_bundle.output_kind(out_path, merged)
        for path in inputs:
            check_output(path, out_path)
        cut = job_bundle.plan_job(
            inputs,
            window=window,
            steps=steps,
            align_clocks=align_clocks,
            cycle=cycle,
            workers=workers,
            force_align=force_align,
        )
        kind, written = job_bundle.export_job(
            cut, out_path, merged=kind == "merged", clip=clip, workers=workers
        )
    except ExportError as exc:
        raise KinetoscopeError(clean(str(exc))) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise KinetoscopeError(f"{clean(out_path)}: cannot write ({clean(reason)})") from None
    except MemoryError:
        raise KinetoscopeError("out of memory while exporting the job") from None
    for line in job_bundle.problem_lines(cut):
        warn(clean(line))
    print(clean(job_bundle.summary_line(cut, out_path, kind, written)))
    return 0
