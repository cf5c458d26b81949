"""`kinetoscope sql TRACE [QUERY]`: its arguments, the query run and printed, `--parquet`, the
interactive prompt (the database itself: kinetoscope/sql.py)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kinetoscope.common.errors import KinetoscopeError, UsageError
from kinetoscope.common.options import positive
from kinetoscope.sql import (
    FORMATS,
    HISTORY_FILE,
    Database,
    QueryError,
    _one_line,
    _terminal_width,
    render,
)


def register(sub: Any) -> None:
    sql = sub.add_parser(
        "sql",
        help="query a trace (or a job's folder) with SQL on DuckDB (needs the sql extra)",
        description="Run read-only SQL over the trace's tables: slice, thread_track (track), "
        "flow, kernel, operator, gap, step, memory_event, collective, and args(id) for one "
        "event's args as JSON; for a job, each with a rank column (docs/sql.md). Without a "
        "query, and with a terminal, an interactive prompt.",
    )
    sql.add_argument(
        "trace",
        metavar="TRACE",
        help="a .json or .json.gz trace, or a job's folder (its ranks together)",
    )
    sql.add_argument("query", metavar="QUERY", nargs="?", help='e.g. "SELECT * FROM kernel"')
    sql.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default), csv, json or md (Markdown)",
    )
    sql.add_argument(
        "--parquet",
        metavar="DIR",
        help="write every table as DIR/<table>.parquet (DIR made when missing; an existing "
        "file is an error) instead of running a query",
    )
    sql.add_argument(
        "--cycle",
        type=positive,
        metavar="N",
        help="a job's folder: use profiling cycle N (1 = the oldest) instead of the newest",
    )
    sql.set_defaults(handler=run_sql_command)


def _open(path: str, cycle: int | None) -> Any:
    from kinetoscope import api

    if os.path.isdir(path):
        return api.open_job(path, cycle=cycle)
    if cycle is not None:
        raise api.TraceError("--cycle picks a profiling cycle of a job (a folder)")
    return api.open(path)


def run_sql_command(args: argparse.Namespace) -> int:
    from kinetoscope.frames import MissingExtra, require

    try:
        require("duckdb", "sql", "kinetoscope sql")
        require("pyarrow", "sql", "kinetoscope sql")
    except MissingExtra as exc:
        raise KinetoscopeError(str(exc)) from None
    if args.parquet is not None and args.query is not None:
        raise UsageError(
            "--parquet writes every table instead of running a query: drop one of them"
        )
    interactive = args.query is None and args.parquet is None
    if interactive and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(
            'give a query (kinetoscope sql TRACE "SELECT ..."), or run it in a terminal '
            "for the interactive prompt"
        )
    from kinetoscope.parser.bundle import BundleError, is_zip, open_bundle

    if is_zip(args.trace):  # a job bundle (`export RUN_DIR -o job.zip`), read as its job
        try:
            with open_bundle(args.trace) as bundle:
                return _run(args, bundle.folder, interactive)
        except BundleError as exc:
            raise KinetoscopeError(str(exc)) from None
    return _run(args, args.trace, interactive)


def _run(args: argparse.Namespace, path: str, interactive: bool) -> int:
    from kinetoscope import api

    try:
        opened = _open(path, args.cycle)
    except api.TraceError as exc:
        raise KinetoscopeError(str(exc)) from None
    except MemoryError:
        raise KinetoscopeError("out of memory while loading the trace") from None
    db = Database.of_job(opened) if isinstance(opened, api.Job) else Database.of_trace(opened)
    with db:
        if args.parquet is not None:
            return write_parquet(db, args.parquet)
        if interactive:
            return prompt(db, args.format)
        try:
            result = db.query(args.query)
        except QueryError as exc:
            raise KinetoscopeError(f"SQL: {exc}") from None
        except Exception as exc:  # an analysis the query needed failed
            raise KinetoscopeError(_one_line(f"{type(exc).__name__}: {exc}")) from None
        sys.stdout.write(render(result, args.format, _terminal_width()))
    return 0


def write_parquet(db: Database, directory: str) -> int:
    """Every table as DIR/<name>.parquet, none over an existing file."""
    import pyarrow.parquet as pq

    from kinetoscope.present.safe_text import clean

    tables = db.all_tables()
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise KinetoscopeError(
            f"{clean(directory)}: cannot make the folder ({exc.strerror or exc})"
        ) from None
    paths = {name: os.path.join(directory, f"{name}.parquet") for name in tables}
    existing = [p for p in paths.values() if os.path.lexists(p)]
    if existing:
        raise KinetoscopeError(f"{clean(existing[0])}: already exists (nothing written)")
    made = []
    try:
        for name, table in tables.items():
            with open(paths[name], "xb") as handle:
                made.append(paths[name])
                pq.write_table(table.to_arrow(), handle)
            print(f"{clean(paths[name])}: {len(table):,} rows")
    except OSError as exc:
        for path in made:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise KinetoscopeError(
            f"{clean(directory)}: cannot write ({exc.strerror or exc})"
        ) from None
    return 0


def prompt(db: Database, fmt: str) -> int:
    """The interactive prompt: one statement per line (a line ending in `\\` continues),
    history in the cache folder, `.tables` lists the tables, `.quit` or Ctrl-D leaves."""
    history = _history_path()
    try:
        import readline
    except ImportError:  # no readline on this platform: a plain prompt
        readline = None  # type: ignore[assignment]
    if readline is not None and history is not None:
        try:
            readline.read_history_file(history)
        except OSError:
            pass
    print(f"tables: {', '.join(db.table_names)}; .tables, .quit (or Ctrl-D)")
    pending = ""
    try:
        while True:
            try:
                line = input("sql> " if not pending else "...> ")
            except EOFError:
                print()
                break
            except KeyboardInterrupt:
                print()
                pending = ""
                continue
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + "\n"
                continue
            text = (pending + line).strip()
            pending = ""
            if not text:
                continue
            if text in (".quit", ".exit"):
                break
            if text == ".tables":
                print(", ".join(db.table_names))
                continue
            try:
                sys.stdout.write(render(db.query(text), fmt, _terminal_width()))
            except QueryError as exc:
                print(f"error: {exc}")
            except Exception as exc:
                print(f"error: {_one_line(f'{type(exc).__name__}: {exc}')}")
    finally:
        if readline is not None and history is not None:
            try:
                readline.set_history_length(1000)
                readline.write_history_file(history)
            except OSError:
                pass
    return 0


def _history_path() -> str | None:
    base = os.environ.get("KINETOSCOPE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kinetoscope"
    )
    try:
        os.makedirs(base, exist_ok=True)
    except OSError:
        return None
    return os.path.join(base, HISTORY_FILE)
