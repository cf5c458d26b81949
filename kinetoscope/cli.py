"""The `kinetoscope` command: subcommands wire parser, analysis, TUI and capture together."""

from __future__ import annotations

import argparse
import sys

SUBCOMMANDS = ("view", "summary", "capture", "demo")


def _error(message: str) -> int:
    print(f"kinetoscope: {message}", file=sys.stderr)
    return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinetoscope",
        description="Terminal viewer and analyser for PyTorch profiler traces.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    view = sub.add_parser("view", help="open a trace in the terminal viewer (the default)")
    view.add_argument("trace", help="a .json or .json.gz torch.profiler trace")

    summary = sub.add_parser("summary", help="print the trace's analysis as tables or JSON")
    summary.add_argument("trace", help="a .json or .json.gz torch.profiler trace")
    summary.add_argument("--json", action="store_true", help="print the JSON document")

    from kinetoscope.capture.cli import add_capture_commands

    add_capture_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `kinetoscope TRACE` is `kinetoscope view TRACE`.
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "view")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.handler(args) if hasattr(args, "handler") else _dispatch(args) or 0)
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "summary":
        from kinetoscope.report import run_summary

        return run_summary(args.trace, as_json=args.json)
    if args.command == "view":
        from kinetoscope.viewer import run_view

        return run_view(args.trace)
    return _error(f"unknown command {args.command}")
