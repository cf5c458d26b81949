"""`kinetoscope TRACE` / `kinetoscope view TRACE`: open the terminal viewer on a trace file."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

CACHE_WRITE_WAIT_S = 60.0


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
    from kinetoscope.commands.cli import trace_path_problem
    from kinetoscope.present.safe_text import clean  # file names are shown, never obeyed

    problem = trace_path_problem(path)
    if problem is not None:
        print(f"kinetoscope: {problem}", file=sys.stderr)
        return 1
    not_a_terminal = terminal_problem()
    if not_a_terminal is not None:
        print(
            f"kinetoscope: the viewer needs a terminal ({not_a_terminal} is not one); "
            f"for a text report run: kinetoscope summary {clean(_quoted(path))}",
            file=sys.stderr,
        )
        return 1
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
    if app.exit_message:
        print(f"kinetoscope: {clean(app.exit_message)}", file=sys.stderr)
    return int(app.return_code or 0)


def run_job_view(inputs: list[str], cycle: int | None = None, title: str | None = None) -> int:
    """The job viewer on a folder of rank files or several files; 0 on a normal quit, 1 (with
    a one-line message on stderr) when there is no job to show or no terminal."""
    from kinetoscope.present.safe_text import clean
    from kinetoscope.tui.data.job_loader import JobLoad

    # The job's files found first: a folder that holds no job gets summary's line.
    load = JobLoad(inputs, cycle=cycle, start=False)
    if load.error is not None:
        print(f"kinetoscope: {clean(load.error)}", file=sys.stderr)
        return 1
    not_a_terminal = terminal_problem()
    if not_a_terminal is not None:
        shown = " ".join(clean(_quoted(p)) for p in inputs)
        print(
            f"kinetoscope: the viewer needs a terminal ({not_a_terminal} is not one); "
            f"for a text report run: kinetoscope summary {shown}",
            file=sys.stderr,
        )
        return 1
    # The digesting workers started before Textual takes over the terminal.
    load.start()
    from kinetoscope.tui.job.job_app import JobApp

    app = JobApp(inputs, staged=True, load=load, title=title)
    app.run()
    if app.exit_message:
        print(f"kinetoscope: {clean(app.exit_message)}", file=sys.stderr)
    return int(app.return_code or 0)


def run_bundle_view(path: str, cycle: int | None = None) -> int:
    """The job viewer on a job bundle kinetoscope wrote (`export RUN_DIR -o job.zip`): its
    ranks streamed into a temporary folder for as long as the viewer runs."""
    from kinetoscope.parser.bundle import BundleError, open_bundle
    from kinetoscope.present.safe_text import clean

    not_a_terminal = terminal_problem()
    if not_a_terminal is not None:
        print(
            f"kinetoscope: the viewer needs a terminal ({not_a_terminal} is not one); "
            f"for a text report run: kinetoscope summary {clean(_quoted(path))}",
            file=sys.stderr,
        )
        return 1
    try:
        with open_bundle(path) as bundle, _removed_on_hangup(bundle.folder):
            return run_job_view([bundle.folder], cycle=cycle, title=path)
    except BundleError as exc:
        print(f"kinetoscope: {clean(str(exc))}", file=sys.stderr)
        return 1


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
    from kinetoscope.present.report_diff import checked_options
    from kinetoscope.present.safe_text import clean

    options = checked_options(base, new, threshold_pct, steps, templates, streams=False)
    if isinstance(options, int):
        return options
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
    if app.exit_message:
        print(f"kinetoscope: {clean(app.exit_message)}", file=sys.stderr)
    return int(app.return_code or 0)


def _quoted(path: str) -> str:
    """The path as a shell would need it, so the suggested command can be pasted."""
    import shlex

    return shlex.quote(path)
