"""`kinetoscope TRACE` / `kinetoscope view TRACE`: open the terminal viewer on a trace file, a
job's folder or rank files (the job viewer), or a job bundle; and the diff viewer for `diff`.

The `run_*` functions return the exit status, a failure said on stderr (for callers outside the
command line: notebooks, tests); the command itself raises KinetoscopeError to `cli.main`."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from kinetoscope.common.errors import KinetoscopeError, UsageError, exit_status, warn
from kinetoscope.common.options import positive

CACHE_WRITE_WAIT_S = 60.0

# Options of `summary` that people also try on the viewer: they get pointed at `summary`.
SUMMARY_ONLY_OPTIONS = ("--json", "--format", "--width")


def register(sub: Any) -> None:
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
        type=positive,
        metavar="N",
        help="a job's folder: view profiling cycle N (1 = the oldest) instead of the newest "
        "complete one",
    )
    for option in SUMMARY_ONLY_OPTIONS:  # accepted only to point at `summary`
        view.add_argument(
            option, nargs="?", const=True, dest=f"summary_{option[2:]}", help=argparse.SUPPRESS
        )
    view.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The command: one trace, a job (a folder or several files) or a bundle, in its viewer."""
    from kinetoscope.parser.bundle import is_zip
    from kinetoscope.present.safe_text import clean

    paths = args.trace
    used = [o for o in SUMMARY_ONLY_OPTIONS if getattr(args, f"summary_{o[2:]}") is not None]
    if used:
        shown = " ".join(clean(_quoted(p)) for p in paths)
        raise UsageError(
            f"the viewer has no {used[0]} option; for the analysis as text or "
            f"JSON run: kinetoscope summary {shown} {used[0]}"
            + ("" if used[0] == "--json" else " ...")
        )
    if len(paths) > 1:  # a job's rank files: the job viewer
        return job_view(paths, cycle=args.cycle)
    if os.path.isdir(paths[0]):  # a job's folder: the job viewer
        return job_view([paths[0]], cycle=args.cycle)
    if is_zip(paths[0]):  # a job bundle kinetoscope wrote: its ranks, as a job
        return bundle_view(paths[0], cycle=args.cycle)
    if args.cycle is not None:
        raise KinetoscopeError(
            "--cycle picks a profiling cycle of a job (a folder or several files)"
        )
    return view(paths[0])


def terminal_problem(
    stdin: TextIO | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> str | None:
    """Why the viewer cannot run here, or None. It reads keys from stdin and draws on the
    terminal behind stdout and stderr; without one it would wait for keys that never come.
    Under Textual's web driver (`kinetoscope serve`) the browser is the terminal."""
    if "web_driver" in os.environ.get("TEXTUAL_DRIVER", ""):
        return None
    streams = (
        ("stdin", stdin or sys.stdin),
        ("stdout", stdout or sys.stdout),
        ("stderr", stderr or sys.stderr),
    )
    for name, stream in streams:
        try:
            is_terminal = stream is not None and stream.isatty()
        except (AttributeError, ValueError, OSError):  # closed, or not a real stream
            is_terminal = False
        if not is_terminal:
            return name
    return None


def run_view(path: str, open_findings: bool = False) -> int:
    """Run the viewer; 0 on a normal quit, 1 (with a one-line message on stderr) on failure.
    `open_findings`: open on the findings screen (capture and demo do)."""
    return exit_status(view, path, open_findings)


def view(path: str, open_findings: bool = False) -> int:
    """`run_view`, a failure raised (KinetoscopeError)."""
    from kinetoscope.parser.source import trace_path_problem
    from kinetoscope.present.safe_text import clean  # file names are shown, never obeyed

    problem = trace_path_problem(path)
    if problem is not None:
        raise KinetoscopeError(problem)
    not_a_terminal = terminal_problem()
    if not_a_terminal is not None:
        raise KinetoscopeError(
            f"the viewer needs a terminal ({not_a_terminal} is not one); "
            f"for a text report run: kinetoscope summary {clean(_quoted(path))}"
        )
    # Start reading before Textual is even imported: the decoding runs while the UI starts.
    from kinetoscope.parser import cache
    from kinetoscope.tui.data.loader import TraceLoad

    cache.warn_if_untrusted(path)  # said before the UI takes the terminal
    # Staged: each lane's top level is drawn first, the rest follows (sooner on big traces).
    loader = TraceLoad(path, staged=True)
    from kinetoscope.tui.trace.app import KinetoscopeApp

    app = KinetoscopeApp(path, loader=loader, open_findings=open_findings)
    app.run()
    loader.cancel()  # a load still running is of no use now
    loader.join(CACHE_WRITE_WAIT_S)  # let a cache being written finish, for the next open
    return _ended(app)


def _ended(app: Any) -> int:
    """A viewer app's exit status; its exit message raised with it (said, when it is 0)."""
    from kinetoscope.present.safe_text import clean

    code = int(app.return_code or 0)
    if app.exit_message:
        if code:
            raise KinetoscopeError(clean(app.exit_message), code)
        warn(clean(app.exit_message))
    return code


def run_job_view(inputs: list[str], cycle: int | None = None, title: str | None = None) -> int:
    """The job viewer on a folder of rank files or several files; 0 on a normal quit, 1 (with
    a one-line message on stderr) when there is no job to show or no terminal."""
    return exit_status(job_view, inputs, cycle=cycle, title=title)


def job_view(inputs: list[str], cycle: int | None = None, title: str | None = None) -> int:
    """`run_job_view`, a failure raised (KinetoscopeError)."""
    from kinetoscope.present.safe_text import clean
    from kinetoscope.tui.data.job_loader import JobLoad

    # The job's files found first: a folder that holds no job gets summary's line.
    load = JobLoad(inputs, cycle=cycle, start=False)
    if load.error is not None:
        raise KinetoscopeError(clean(load.error))
    not_a_terminal = terminal_problem()
    if not_a_terminal is not None:
        shown = " ".join(clean(_quoted(p)) for p in inputs)
        raise KinetoscopeError(
            f"the viewer needs a terminal ({not_a_terminal} is not one); "
            f"for a text report run: kinetoscope summary {shown}"
        )
    # The digesting workers started before Textual takes over the terminal.
    load.start()
    from kinetoscope.tui.job.job_app import JobApp

    app = JobApp(inputs, staged=True, load=load, title=title)
    app.run()
    return _ended(app)


def run_bundle_view(path: str, cycle: int | None = None) -> int:
    """The job viewer on a job bundle kinetoscope wrote (`export RUN_DIR -o job.zip`): its
    ranks streamed into a temporary folder for as long as the viewer runs."""
    return exit_status(bundle_view, path, cycle=cycle)


def bundle_view(path: str, cycle: int | None = None) -> int:
    """`run_bundle_view`, a failure raised (KinetoscopeError)."""
    from kinetoscope.parser.bundle import BundleError, open_bundle
    from kinetoscope.present.safe_text import clean

    not_a_terminal = terminal_problem()
    if not_a_terminal is not None:
        raise KinetoscopeError(
            f"the viewer needs a terminal ({not_a_terminal} is not one); "
            f"for a text report run: kinetoscope summary {clean(_quoted(path))}"
        )
    try:
        with open_bundle(path) as bundle, _removed_on_hangup(bundle.folder):
            return run_job_view([bundle.folder], cycle=cycle, title=path)
    except BundleError as exc:
        raise KinetoscopeError(clean(str(exc))) from None


@contextlib.contextmanager
def _removed_on_hangup(folder: str) -> Iterator[None]:
    """A closed terminal (SIGHUP) or a SIGTERM ends the viewer without unwinding, so the
    bundle's ranks would stay in the temporary folder: remove it first, then end as the
    signal would have."""
    import shutil
    import signal

    def remove_then_die(number: int, frame: Any) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)

    wanted = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    before = {}
    for number in wanted:
        try:
            before[number] = signal.signal(number, remove_then_die)
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def run_diff_view(
    base: str,
    new: str,
    *,
    threshold_pct: float | None = None,
    steps: str | None = None,
    templates: bool = False,
) -> int:
    """The diff viewer on BASE and NEW (both loaded at once); 0 on a normal quit, 1 (with a
    one-line message on stderr) when a trace cannot be shown, 2 for a bad `steps`. Off a
    terminal the caller prints the text form instead (`diff_view_wanted`)."""
    return exit_status(
        diff_view, base, new, threshold_pct=threshold_pct, steps=steps, templates=templates
    )


def diff_view(
    base: str,
    new: str,
    *,
    threshold_pct: float | None = None,
    steps: str | None = None,
    templates: bool = False,
) -> int:
    """`run_diff_view`, a failure raised (KinetoscopeError)."""
    from kinetoscope.commands.diff import checked_options

    options = checked_options(base, new, threshold_pct, steps, templates, streams=False)
    # Both reads start before Textual is imported, each in its own thread.
    from kinetoscope.parser import cache
    from kinetoscope.tui.data.loader import TraceLoad

    for path in (base, new):
        cache.warn_if_untrusted(path)  # said before the UI takes the terminal

    loads = (TraceLoad(base, staged=False), TraceLoad(new, staged=False))
    from kinetoscope.tui.diff.diff_app import DiffApp

    app = DiffApp(base, new, loads=loads, options=options)
    app.run()
    for load in loads:
        load.cancel()  # a load still running is of no use now
    for load in loads:
        load.join(CACHE_WRITE_WAIT_S)  # let a cache being written finish, for the next open
    return _ended(app)


def _quoted(path: str) -> str:
    """The path as a shell would need it, so the suggested command can be pasted."""
    import shlex

    return shlex.quote(path)
