"""`kinetoscope TRACE` / `kinetoscope view TRACE`: open the terminal viewer on a trace file."""

from __future__ import annotations

import os
import sys


def run_view(path: str) -> int:
    """Run the viewer; 0 on a normal quit, 1 (with a one-line message on stderr) on failure."""
    from kinetoscope.tui.safe_text import clean  # file names are shown, never obeyed

    if not os.path.exists(path):
        print(f"kinetoscope: no such file: {clean(path)}", file=sys.stderr)
        return 1
    from kinetoscope.tui.app import KinetoscopeApp

    app = KinetoscopeApp(path)
    app.run()
    if app.exit_message:
        print(f"kinetoscope: {clean(app.exit_message)}", file=sys.stderr)
    return int(app.return_code or 0)
