"""`kinetoscope summary TRACE|DIR|FILES...`: its options, the trace loaded (its model cache used
and written as the viewer does, a stored summary reused) and the summary printed or written as
CSV; a job's summary for a folder, several files or a bundle (kinetoscope/present/report_job.py).
The tables and the JSON document: kinetoscope/present/report_summary.py."""

from __future__ import annotations

import argparse
import os
from typing import Any

from kinetoscope.common.errors import KinetoscopeError, UsageError, exit_status, warn
from kinetoscope.common.options import columns, positive

FORMATS = ("text", "md", "tsv", "json")


def register(sub: Any) -> None:
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
        type=columns,
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
    add_cycle_option(job)
    job.add_argument(
        "--workers",
        type=positive,
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
    summary.set_defaults(handler=run)


def add_cycle_option(group: Any) -> None:
    """`--cycle N`, for the commands that read a job (summary, export)."""
    group.add_argument(
        "--cycle",
        type=positive,
        metavar="N",
        help="use profiling cycle N (1 = the oldest) instead of the newest complete one",
    )


def run(args: argparse.Namespace) -> int:
    """The command: one trace's summary, or a job's (a folder, several files, a bundle)."""
    from kinetoscope.parser.bundle import is_zip

    _no_collection_at_exit()

    output = "json" if args.json else args.format
    if args.csv is not None and (args.json or output != "text" or args.width is not None):
        raise UsageError("--csv writes files instead of printing: drop the output options")
    if args.csv_raw and args.csv is None:
        raise UsageError("--csv-raw goes with --csv DIR")
    if len(args.trace) > 1 or os.path.isdir(args.trace[0]) or is_zip(args.trace[0]):
        if args.scheduler is not None and args.workers is not None:
            raise UsageError(
                "--workers sets the local worker processes, --scheduler digests the ranks "
                "on a Dask cluster instead: give one of them (local:N for N local Dask "
                "workers)"
            )
        if args.scheduler is not None:
            return _job_summary_on_cluster(args, output)
        return job_summary(
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
        raise UsageError(
            f"{given[0]} is an option of a job's summary (a folder or several files), "
            "not of one trace file"
        )
    return summarise(
        args.trace[0], output=output, width=args.width, csv_dir=args.csv, csv_raw=args.csv_raw
    )


def _no_collection_at_exit() -> None:
    """Skip the interpreter's full garbage collections at exit over every object the command
    left (after a big summary, more time than writing the output): an exit handler freezes
    the objects first (`gc.freeze`). They are still freed as the modules are cleared, but for
    those in reference cycles, whose memory the system takes back; the command's files are
    closed by then (written in `with` blocks, standard output flushed). Registered before the
    command's work, so that it runs after every exit handler the work registers
    (multiprocessing's, weakref finalizers'); once per process (tests run commands in one)."""
    import atexit
    import gc

    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


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


def _job_summary_on_cluster(args: argparse.Namespace, output: str) -> int:
    """`summary DIR --scheduler ADDRESS`: the ranks digested on a Dask cluster (cluster.py)."""
    from kinetoscope.commands.cluster import SchedulerError, dask_executor

    try:
        with dask_executor(args.scheduler) as executor:
            return job_summary(
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
        raise KinetoscopeError(str(exc)) from None


def run_summary(*args: Any, **kwargs: Any) -> int:
    """`summarise(...)`'s status: load a trace and print its summary (`output`: text, md, tsv or
    json), 1 with a one-line message when it cannot be read. `width` lays the text tables out
    for that many columns. With `csv_dir`, write the viewer's tables there as CSV files instead
    (kinetoscope/present/tables.py; `csv_raw`: cells as recorded, formulas not neutralised)."""
    return exit_status(summarise, *args, **kwargs)


def summarise(
    path: str,
    as_json: bool = False,
    output: str = "text",
    width: int | None = None,
    csv_dir: str | None = None,
    csv_raw: bool = False,
) -> int:
    """`run_summary`, a failure raised (KinetoscopeError)."""
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import TraceError
    from kinetoscope.parser.source import trace_path_problem
    from kinetoscope.present.report_summary import (
        emit,
        emit_sections,
        merged_export_note,
        summary_json,
        summary_tables,
    )

    # The viewer checks the same way (the same one line), but summary also reads a stream.
    problem = trace_path_problem(path, streams=True)
    if problem is not None:
        raise KinetoscopeError(problem)
    as_json = csv_dir is None and (as_json or output == "json")
    try:
        # The model cache is used and written as the viewer does (a big trace's entry, written
        # in a thread while the analysis runs), and a JSON summary keeps its text in the entry:
        # a second summary of the same file reads that instead of analysing (analysis/stored.py).
        # `release`: the analysis needs the memory more than an idle worker server and the
        # heap the decoding freed.
        trace, stored = _open_for_summary(path, as_json)
        events = trace.n_events
    except TraceError as exc:
        from kinetoscope.present.safe_text import clean  # the message holds the file's name

        raise KinetoscopeError(clean(str(exc))) from None
    note = merged_export_note(trace.header)
    if note is not None:
        from kinetoscope.present.safe_text import clean

        warn(f"{clean(path)}: {note}")
    if stored is not None:
        emit(stored + "\n")
        return 0
    saving = _save_cache_meanwhile(trace)
    try:
        if csv_dir is not None:
            from kinetoscope.analysis import TraceSession
            from kinetoscope.present.tables import emit_written, single_trace_tables

            return emit_written(
                single_trace_tables(TraceSession(trace)), csv_dir, path, raw=csv_raw
            )
        if as_json:
            document = build_summary(trace)
            text = summary_json(document)
            emit(text + "\n")
            _keep_summary(trace, saving, text, document)
            return 0
        from kinetoscope.analysis import TraceSession

        session = TraceSession(trace)
        document = _stored_document(trace)
        if document is None:
            document = build_summary(session)
            _keep_summary(trace, saving, summary_json(document), document)
        # TSV is read by scripts (cut, awk): its tables stay as they were, one row per rule's
        # finding; text and Markdown are read by people, who get the answer first.
        sections = summary_tables(session, document, answer_first=output != "tsv")
    except Exception as exc:  # MemoryError, AnalysisFailed (of one): one line, never a trace
        from kinetoscope.analysis.session import AnalysisFailed, memory_failure
        from kinetoscope.parser.model import out_of_memory_message
        from kinetoscope.present.safe_text import clean

        stage = memory_failure(exc)
        if stage is None and not isinstance(exc, AnalysisFailed):
            raise
        del trace  # what the analysis held is freed as the exception unwinds; now the model
        if stage is None:  # an analysis that failed otherwise: which one, and why
            raise KinetoscopeError(f"{clean(path)}: {clean(str(exc))}") from None
        message = out_of_memory_message(path, events, stage)
        raise KinetoscopeError(clean(message)) from None
    finally:
        if saving is not None:
            saving.join()
    emit_sections(sections, output, width)
    return 0


def _open_for_summary(path: str, as_json: bool) -> tuple[Any, str | None]:
    """The trace at `path` and, for a JSON summary, the text stored in its cache entry (None
    if there is none to trust). A JSON summary maps a cache entry without reading its CRCs
    first: a stored text has CRCs of its own, read before it is used; without one, the
    model's are read before the analysis, and a damaged entry means reading the file again."""
    from kinetoscope.parser import cache, load
    from kinetoscope.present.report_summary import summary_json

    trace = load(path, write_cache=False, release=True, verify_cache=not as_json)
    if not trace.from_cache or not as_json:
        return trace, None
    from kinetoscope.analysis.stored import load_summary_text

    stored = load_summary_text(trace, summary_json)
    if stored is not None:
        return trace, stored
    if not cache.check(trace):  # the entry was removed: its data is not used
        trace = load(path, use_cache=False, write_cache=False, release=True)
    return trace, None


def _stored_document(trace: Any) -> dict[str, Any] | None:
    """The summary document stored in the trace's (verified) cache entry, if it is one that
    decodes to exactly the document it was made from; else None."""
    from kinetoscope.present.report_summary import summary_json

    if not trace.from_cache:
        return None
    from kinetoscope.analysis.stored import load_summary

    stored = load_summary(trace, summary_json)
    return None if stored is None else stored.document


def _keep_summary(trace: Any, saving: Any, text: str, document: dict[str, Any]) -> None:
    """Keep the summary in the trace's cache entry, once the entry is written (if it is)."""
    from kinetoscope.present.report_summary import summary_json

    if saving is not None:
        saving.join()
    if trace.from_cache or saving is not None:
        from kinetoscope.analysis.stored import save_summary_text

        save_summary_text(trace, text, summary_json, document)


def _save_cache_meanwhile(trace: Any) -> Any:
    """Start writing the model's cache entry in a thread (a big trace just parsed, as the viewer
    does after its first frame); the thread, or None when there is nothing to write."""
    import threading

    from kinetoscope.parser import cache, save_cache, threads_affordable

    if trace.from_cache or not trace.complete or trace.source.bytes < cache.MIN_CACHED_BYTES:
        return None
    if not threads_affordable():  # little address space left: the analysis needs it more
        return None
    from kinetoscope.parser.source import is_regular_file

    if not is_regular_file(trace.source.path):
        return None  # a stream is read once: nothing to key an entry by

    def save() -> None:
        try:
            save_cache(trace)
        except Exception:  # noqa: BLE001 - no entry is written; the summary itself stands
            pass

    thread = threading.Thread(target=save, name="kinetoscope-cache")
    try:
        thread.start()
    except RuntimeError:  # no thread to be had (an address-space limit): no entry, as with
        return None  # any other failure to write one; the summary itself stands
    return thread


def run_job_summary(*args: Any, **kwargs: Any) -> int:
    """`job_summary(...)`'s status, a failure said in one line (1 when there is no job to
    read)."""
    return exit_status(job_summary, *args, **kwargs)


def job_summary(
    inputs: list[str],
    output: str = "text",
    width: int | None = None,
    align_clocks: bool = False,
    force_align: bool = False,
    cycle: int | None = None,
    workers: int | None = None,
    executor: Any = None,
    csv_dir: str | None = None,
    bundle: Any = None,
    csv_raw: bool = False,
) -> int:
    """Discover the job in `inputs`, digest its ranks in worker processes, merge and print;
    KinetoscopeError when there is no job to read. With `csv_dir`, write the job
    viewer's tables there as CSV files instead (kinetoscope/present/tables.py; `csv_raw`: cells as
    recorded). One input that is a zip: a bundle kinetoscope wrote (`export RUN_DIR -o
    job.zip`), its ranks read as the job."""
    from kinetoscope.analysis.job import analyze_job, job_document, map_ranks
    from kinetoscope.parser.bundle import BundleError, is_zip, open_bundle
    from kinetoscope.parser.ranks import JobError, discover
    from kinetoscope.present import report_job
    from kinetoscope.present.report_summary import emit, emit_sections, summary_json
    from kinetoscope.present.safe_text import clean

    options = dict(
        output=output,
        width=width,
        align_clocks=align_clocks,
        force_align=force_align,
        cycle=cycle,
        workers=workers,
        executor=executor,
        csv_dir=csv_dir,
        csv_raw=csv_raw,
    )
    if len(inputs) == 1 and is_zip(inputs[0]) and bundle is None:
        try:
            with open_bundle(inputs[0]) as opened:
                return job_summary([opened.folder], bundle=opened, **options)  # type: ignore[arg-type]
        except BundleError as exc:
            raise KinetoscopeError(clean(str(exc))) from None
    try:
        files = discover(inputs, cycle=cycle)
    except JobError as exc:
        raise KinetoscopeError(clean(str(exc))) from None
    digests = map_ranks([f.path for f in files.files], executor=executor, workers=workers)
    try:
        job = analyze_job(digests, files, align_clocks=align_clocks, force_align=force_align)
        if csv_dir is not None:
            from kinetoscope.present import tables

            source = bundle.archive if bundle is not None else inputs[0]
            written = tables.job_tables(job)
            if bundle is not None:  # paths as the JSON gives them: `job.zip:rank3.json`
                written = [report_job._table_in_bundle(table, bundle) for table in written]
            return tables.emit_written(written, csv_dir, source, raw=csv_raw)
        document = job_document(job)
    except MemoryError:  # the merge of the ranks' digests (each rank's own: in its digest)
        events = sum(d.events for d in digests)
        del digests
        from kinetoscope.parser.model import out_of_memory_message

        message = out_of_memory_message(clean(inputs[0]), events, "the merge of the ranks")
        raise KinetoscopeError(message) from None
    if bundle is not None:
        document = report_job._as_in_bundle(document, bundle)
    if output == "json":
        emit(summary_json(document) + "\n")
    else:
        emit_sections(report_job.job_tables(document), output, width)
    if job.ranks and not any(entry.loaded for entry in job.ranks):
        raise KinetoscopeError("no rank could be read (the report says why)")
    return 0
