"""Argument parsing for `kinetoscope capture` and `kinetoscope demo` (placeholder until capture lands)."""

from __future__ import annotations

import argparse
import sys


def add_capture_commands(sub: argparse._SubParsersAction) -> None:
    for name in ("capture", "demo"):
        p = sub.add_parser(name, help=f"{name} (not yet available)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(handler=_unavailable)


def _unavailable(args: argparse.Namespace) -> int:
    print(f"kinetoscope: {args.command} is not available yet", file=sys.stderr)
    return 1
