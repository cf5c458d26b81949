"""`kinetoscope TRACE` / `kinetoscope view TRACE`: open the terminal viewer on a trace file."""

from __future__ import annotations

import os
import sys

CACHE_WRITE_WAIT_S = 60.0


def run_view(path: str) -> int:
    """Run the viewer; 0 on a normal quit, 1 (with a one-line message on stderr) on failure."""
    from kinetoscope.tui.safe_text import clean  # file names are shown, never obeyed

    if not os.path.exists(path):
        print(f"kinetoscope: no such file: {clean(path)}", file=sys.stderr)
        return 1
    # Start reading before Textual is even imported: the decoding runs while the UI starts.
    from kinetoscope.tui.loader import TraceLoad

    loader = TraceLoad(path)
    from kinetoscope.tui.app import KinetoscopeApp

    app = KinetoscopeApp(path, loader=loader)
    app.run()
    loader.cancel()  # a load still running is of no use now
    loader.join(CACHE_WRITE_WAIT_S)  # let a cache being written finish, for the next open
    if app.exit_message:
        print(f"kinetoscope: {clean(app.exit_message)}", file=sys.stderr)
    return int(app.return_code or 0)
