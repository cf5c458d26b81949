"""`kinetoscope mcp`: its arguments, and the MCP server on standard input and output (the
server itself: kinetoscope/mcp_server.py; the `mcp` extra)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kinetoscope import mcp_server
from kinetoscope.common.errors import KinetoscopeError
from kinetoscope.mcp_server import (
    MAX_ANSWER_BYTES,
    MAX_OPEN,
    TriageTools,
    build_server,
    register_query_backend,
)


def register(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve the analysis to a coding agent over MCP (stdio; the mcp extra)",
        description="Run an MCP server on standard input and output for a coding agent: tools "
        "to open traces and jobs and read their findings, top operators and kernels, idle gaps, "
        "windows, events, diffs and stragglers, each answer bounded (docs/mcp.md).",
    )
    mcp.add_argument(
        "--max-open",
        type=_bounded_int(1, 64),
        default=MAX_OPEN,
        metavar="N",
        help=f"traces and jobs held open at once; the least recently used closes beyond it "
        f"(default {MAX_OPEN})",
    )
    mcp.add_argument(
        "--max-answer-bytes",
        type=_bounded_int(4096, 1 << 20),
        default=MAX_ANSWER_BYTES,
        metavar="N",
        help=f"the largest answer, in bytes of JSON (default {MAX_ANSWER_BYTES})",
    )
    mcp.set_defaults(handler=run_mcp_command)


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    import argparse

    def parse(text: str) -> int:
        if len(text) > 12 or not text.strip().isdigit():
            raise argparse.ArgumentTypeError(f"not a whole number: {text[:20]!r}")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"from {low} to {high}, not {value}")
        return value

    return parse


def run_mcp_command(args: Any) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise KinetoscopeError(
            "`kinetoscope mcp` needs the MCP SDK: pip install 'kinetoscope[mcp]'"
        ) from None
    try:
        from mcp.server.mcpserver import MCPServer  # noqa: F401
    except ImportError:
        raise KinetoscopeError(
            "`kinetoscope mcp` needs mcp 2 or newer: pip install -U 'kinetoscope[mcp]'"
        ) from None
    import anyio

    from kinetoscope.sql import mcp_query, sql_available

    if sql_available() and mcp_server._QUERY_BACKEND is None:
        register_query_backend(mcp_query)  # `query`: kinetoscope sql's read-only SQL
    server = build_server(TriageTools(args.max_open, args.max_answer_bytes))
    anyio.run(server.run_stdio_async)
    return 0
