"""`kinetoscope summary`: the analysis as JSON or as Rich tables."""

from __future__ import annotations

import sys

import msgspec


def run_summary(path: str, as_json: bool) -> int:
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import TraceError, load

    try:
        trace = load(path)
    except TraceError as exc:
        print(f"kinetoscope: {exc}", file=sys.stderr)
        return 1
    document = build_summary(trace)
    if as_json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(document), indent=2).decode())
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.pretty import Pretty

    Console().print(Pretty(document))
    return 0
