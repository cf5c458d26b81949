"""The viewer's export key: `e` writes a time window of the trace as a trace of its own
(kinetoscope/export/crop.py: what Perfetto and kinetoscope need, and nothing else), in a worker
thread, and a notification says where it went and what it kept. In the job viewer's timeline,
`e` writes the marked range of every rank as one Perfetto bundle (kinetoscope/export/job_bundle.py),
`<job>.window.zip`.

From the timeline, the window is the marked range (`m` twice, or `M` on a selected event); from
the idle-gap list, the selected gap with its own length on each side (as `kinetoscope export
--around-gap K`). The file is `<trace>.window.json.gz` (`<trace>.gap<K>.json.gz`) in the current
directory, or in the temporary directory when that cannot be written; `-2`, `-3`... rather than
over an existing file (the name is taken exclusively before anything is written).
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from kinetoscope.tui.data.failures import failure_message
from textual.binding import Binding

from kinetoscope.present.safe_text import clean

EXPORT_BINDING = Binding(
    "e",
    "export_range",
    "Export",
    show=False,  # in the ? help and the command palette; the footer keeps its room
    tooltip="Export the marked range (m/M) as a small trace for Perfetto, in the current directory",
)
SUFFIX = ".json.gz"  # gzip'd: Perfetto and kinetoscope open it as it is


def reserve(stem: str, places: list[str] | None = None, suffix: str = SUFFIX) -> str:
    """Take the name `stem.json.gz` (or `stem-2.json.gz`...; another `suffix`) in the current
    directory, else in the temporary directory (other `places`), by creating it empty and
    exclusively; its path. Raises the last OSError when no place can be written."""
    from kinetoscope.present.tables import create_new, output_places

    error: OSError | None = None
    for place in output_places() if places is None else places:
        try:
            path, handle = create_new(place, stem, suffix)
        except OSError as exc:  # not writable, gone, full of such names: the next place
            error = exc
            continue
        handle.close()
        return path
    assert error is not None
    raise error


def export_stem(source: str, what: str) -> str:
    """`<trace>.<what>`: the trace's name without .json/.json.gz, as the CSV files are named."""
    from kinetoscope.present.tables import trace_stem

    return f"{trace_stem(source)}.{what}"


def start_export(screen: Any, session: Any, window: Any, what: str, stem: str) -> None:
    """Write `window` of `session`'s trace in a worker thread, to a new file named after
    `stem`; `what` says what it is in the notifications ("the marked range")."""
    from kinetoscope.export.crop import export_trace

    def write(path: str) -> tuple[str, list[str]]:
        return export_trace(session.trace.source.path, path, window=window, session=session)

    _start(screen, write, what, stem, SUFFIX)


def start_job_export(screen: Any, cut: Any, what: str, stem: str) -> None:
    """Write the job's `cut` (kinetoscope/export/job_bundle.py: every rank's window) as one Perfetto
    bundle, `stem.zip`, in a worker thread."""
    from kinetoscope.export.job_bundle import export_job, problem_lines, summary_line

    def write(path: str) -> tuple[str, list[str]]:
        # The ranks are cut one after another here: no worker processes from inside the app.
        kind, written = export_job(cut, path, workers=1)
        return summary_line(cut, path, kind, written), problem_lines(cut)

    _start(screen, write, what, stem, ".zip")


def _start(screen: Any, write: Any, what: str, stem: str, suffix: str) -> None:
    app = screen.app
    # The app's worker: it runs on when the screen that started it is closed.
    if any(worker.name == "export" and not worker.is_finished for worker in app.workers):
        app.notify("An export is being written: wait for it", timeout=3, markup=False)
        return
    app.notify(f"Exporting {what}…", timeout=3, markup=False)
    app.run_worker(
        partial(_export, app, write, what, stem, suffix),
        name="export",
        group="export",
        thread=True,
        exit_on_error=False,
    )


def _export(app: Any, write: Any, what: str, stem: str, suffix: str) -> None:
    from kinetoscope.export.crop import ExportError

    try:
        path = reserve(stem, suffix=suffix)
    except OSError as error:
        message = failure_message("the export", error, "written")
    else:
        try:
            line, notes = write(path)
        except BaseException as error:
            _remove(path)  # the name taken, and nothing written in it
            if not isinstance(error, Exception):
                raise
            message = (
                str(error)
                if isinstance(error, ExportError)
                else failure_message("the export", error, "written")
            )
        else:
            text = "\n".join(clean(part) for part in [f"Exported {what}: {line}", *notes])
            app.call_from_thread(app.notify, text, timeout=12, markup=False)
            return
    app.call_from_thread(app.notify, clean(message), severity="error", timeout=10, markup=False)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
