"""`kinetoscope sql TRACE|DIR "SELECT ..."`: read-only SQL over the trace's tables on DuckDB
(docs/sql.md; the `sql` extra: duckdb and pyarrow).

The tables are the Python API's (kinetoscope/api.py), handed to an in-memory DuckDB as Arrow
tables (numeric columns without a copy), made only when a query names them. The database can
reach no file: external access is off, extensions can be neither installed nor loaded, Python
objects are not scanned by name, and the configuration is locked before the first query.
The command (its arguments, the prompt, `--parquet`) is kinetoscope/commands/sql.py."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetoscope.frames import Table

FORMATS = ("table", "csv", "json", "md")
HISTORY_FILE = "sql_history"
MAX_CELL = 200  # characters of one cell in the table and Markdown output

LOCKED_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "python_enable_replacements": False,
}


class QueryError(Exception):
    """The user's SQL failed; the message is one line."""


def _one_line(text: str) -> str:
    from kinetoscope.present.safe_text import clean

    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return clean(" ".join(lines[:3]))[:500]


class Database:
    """An in-memory, locked-down DuckDB over a trace's (or a job's) tables."""

    def __init__(
        self,
        tables: dict[str, Any],
        args: Any,
        args_params: int,
        views: dict[str, Any] | None = None,
    ) -> None:
        from kinetoscope.frames import require

        duckdb = require("duckdb", "sql", "SQL over a trace")
        require("pyarrow", "sql", "SQL over a trace")
        self._duckdb = duckdb
        self._tables = tables  # name -> callable giving a Table
        # name -> callable(connection) giving a DuckDB relation: the same rows and columns as
        # the Table, read in place (see `TraceViews`); used for queries, not for --parquet
        self._views = views or {}
        self._kept: list[Any] = []  # what the views read: kept alive with the database
        self._registered: set[str] = set()
        self.con = duckdb.connect(":memory:", config=dict(LOCKED_CONFIG))
        types = [duckdb.sqltype("BIGINT")] * args_params
        self.con.create_function(
            "args", args, types, duckdb.sqltype("VARCHAR"), type="arrow", null_handling="special"
        )
        self.con.execute("SET lock_configuration = true")

    @classmethod
    def of_trace(cls, trace: Any) -> Database:
        def args(ids: Any) -> Any:
            return _args_json([trace] * len(ids), ids.to_pylist())

        return cls(trace.tables(), args, 1, TraceViews(trace).views())

    @classmethod
    def of_job(cls, job: Any) -> Database:
        def args(ranks: Any, ids: Any) -> Any:
            traces = []
            for rank in ranks.to_pylist():
                try:
                    traces.append(job.rank(rank) if rank is not None else None)
                except KeyError:
                    traces.append(None)
            return _args_json(traces, ids.to_pylist())

        return cls(job.tables(), args, 2)

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    @property
    def table_names(self) -> list[str]:
        return list(self._tables)

    def register(self, name: str) -> None:
        if name in self._registered or name not in self._tables:
            return
        view = self._views.get(name)
        if view is not None:
            relation, kept = view(self.con)
            relation.create_view(name)
            self._kept.append(kept)
        else:
            table: Table = self._tables[name]()
            self.con.register(name, table.to_arrow())
        self._registered.add(name)

    def _names_in(self, query: str) -> set[str]:
        try:
            named = self._duckdb.get_table_names(query)
        except Exception:  # a query DuckDB cannot parse: its own error says why, below
            return set()
        return {n.split(".")[-1].strip('"').lower() for n in named}

    def query(self, query: str) -> Table:
        """Run the query (several statements: the last one's rows); its result as a Table.
        Only SELECT (and EXPLAIN) statements run. Raises QueryError (one line)."""
        self._check(query)
        for name in self._names_in(query) & set(self._tables):
            self.register(name)
        try:
            arrow = self._run(query)
        except self._duckdb.CatalogException as exc:
            missing = set(self._tables) - self._registered
            if not missing:
                raise QueryError(_one_line(str(exc))) from None
            for name in missing:  # a table the parser's list did not name: all of them, once
                self.register(name)
            try:
                arrow = self._run(query)
            except self._duckdb.Error as again:
                raise QueryError(_one_line(str(again))) from None
        except self._duckdb.Error as exc:
            raise QueryError(_one_line(str(exc))) from None
        from kinetoscope.frames import Table

        if arrow is None:  # a statement without rows
            return Table("result", {})
        return Table(
            "result", {n: _python(arrow.column(n).to_pylist()) for n in arrow.column_names}
        )

    def _check(self, query: str) -> None:
        """Refuse anything but reading: each statement must be a SELECT or an EXPLAIN (some
        statements touch the file system before the configuration refuses them)."""
        duckdb = self._duckdb
        try:
            statements = duckdb.extract_statements(query)
        except duckdb.Error as exc:
            raise QueryError(_one_line(str(exc))) from None
        if not statements:
            raise QueryError("an empty query")
        allowed = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)
        for statement in statements:
            if statement.type not in allowed:
                kind = statement.type.name.replace("_", " ")
                raise QueryError(f"read-only: only SELECT queries run here, not {kind}")

    def _run(self, query: str) -> Any:
        result = self.con.sql(query)
        if result is None:
            return None
        arrow = result.to_arrow_table() if hasattr(result, "to_arrow_table") else result.arrow()
        return arrow.read_all() if hasattr(arrow, "read_all") else arrow

    def all_tables(self) -> dict[str, Table]:
        return {name: make() for name, make in self._tables.items() if name != "track"}


class TraceViews:
    """The big tables of one trace as DuckDB reads them, `slice` and `kernel`: views over the
    model's own columns (every row, read in place: no gathered copy), filtered to the table's
    rows and converted as the API's tables convert them (NULLIF for their nulls, CAST to their
    BIGINTs) as a query reads them. A column from a later stage of the analysis (a slice's
    `depth` and `parent`: the nesting; a kernel's `launch` and `operator`) is a function of the
    row, made on its first call, so a query that does not read it never computes it. The rows,
    values, nulls and types are the API's tables' (`tests/test_sql.py`)."""

    def __init__(self, trace: Any) -> None:
        self.trace = trace
        self._base: Any = None

    def views(self) -> dict[str, Any]:
        return {"slice": self.slice, "kernel": self.kernel}

    def base(self) -> Any:
        """Every row's columns as one Arrow table over the model's arrays (4 bytes a row made:
        the row number)."""
        if self._base is not None:
            return self._base
        import numpy as np
        import pyarrow as pa

        from kinetoscope.api import KIND_NAMES
        from kinetoscope.frames import arrow_strings

        m = self.trace.model
        n = len(m)
        strings = arrow_strings(m.strings)

        def codes(ids: np.ndarray, dictionary: Any) -> Any:
            null = ids < 0
            indices = pa.array(ids, mask=null) if null.any() else pa.array(ids)
            return pa.DictionaryArray.from_arrays(indices, dictionary)

        columns: dict[str, Any] = {
            "ph": pa.array(m.ph),
            # the row, 4 bytes where that holds it: CAST to BIGINT as the API's id
            "row_index": pa.array(np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)),
            "ts": pa.array(m.start),
            "dur": pa.array(m.dur),
            "name": codes(m.name, strings),
            "category": codes(m.cat, strings),
            "track": pa.array(m.lane),
            "kind": codes(self.trace.session.classes.kind, arrow_strings(KIND_NAMES)),
            "correlation": pa.array(m.corr),
            "external_id": pa.array(m.ext_id),
            "device": pa.array(m.device),
            "stream": pa.array(m.stream),
        }
        self._base = pa.Table.from_arrays(list(columns.values()), names=list(columns))
        return self._base

    def _rows(self, con: Any, table: Any, where: str) -> Any:
        return (
            con.from_arrow(table)
            .filter(where)
            .project("CAST(row_index AS BIGINT) AS id, * EXCLUDE (ph, row_index)")
        )

    def slice(self, con: Any) -> tuple[Any, Any]:
        """The API's `slices()`: the complete events."""
        import pyarrow as pa

        from kinetoscope.api import NO_VALUE
        from kinetoscope.parser.model import PH_COMPLETE

        session = self.trace.session
        table = self.base()
        if session.nesting_ready:  # its arrays (int32 per row), read in place
            nesting = session.nesting
            table = table.append_column("depth", pa.array(nesting.depth))
            table = table.append_column("parent", pa.array(nesting.parent))
            depth = "CAST(NULLIF(depth, -1) AS BIGINT)"
            parent = "CAST(NULLIF(parent, -1) AS BIGINT)"
        else:
            depth = row_function(con, "kinetoscope_slice_depth", lambda: session.nesting.depth)
            parent = row_function(con, "kinetoscope_slice_parent", lambda: session.nesting.parent)
        relation = self._rows(con, table, f"ph = {PH_COMPLETE}").project(
            f"id, ts, dur, name, category, CAST(track AS BIGINT) AS track, {depth} AS depth, "
            f"{parent} AS parent, kind, NULLIF(correlation, {NO_VALUE}) AS correlation, "
            f"NULLIF(external_id, {NO_VALUE}) AS external_id, NULLIF(device, -1) AS device, "
            f"NULLIF(stream, {NO_VALUE}) AS stream"
        )
        return relation, table

    def kernel(self, con: Any) -> tuple[Any, Any]:
        """The API's `kernel_events()`: the GPU activities (the links' `gpu_rows`: kernels,
        memcpys, memsets, in file order); `launch` needs the links, `operator` the kernels'
        launchers (and so the nesting)."""
        from kinetoscope.api import NO_VALUE

        session = self.trace.session
        launch = row_function(
            con,
            "kinetoscope_kernel_launch",
            lambda: (session.links.gpu_rows, session.links.gpu_runtime),
        )
        operator = row_function(
            con,
            "kinetoscope_kernel_operator",
            lambda: (session.links.gpu_rows, session.kernels.launcher_row),
        )
        table = self.base()
        relation = self._rows(con, table, "kind IN ('kernel', 'memcpy', 'memset')").project(
            f"id, ts, dur, name, category, device, NULLIF(stream, {NO_VALUE}) AS stream, "
            f"CAST(track AS BIGINT) AS track, NULLIF(correlation, {NO_VALUE}) AS correlation, "
            f"{launch} AS launch, {operator} AS operator"
        )
        return relation, table


def row_function(con: Any, name: str, make: Any) -> str:
    """A SQL function `name(id)`, a column of a view computed only when a query reads it:
    `make()` gives the values by row, or `(keys, values)` with the rows ascending in `keys`; the
    function gives the value of row `id` as a BIGINT, null where that is -1 or `id` is not a row
    there (any BIGINT or null may be asked). `make` runs on the first call, maybe on several of
    the database's threads at once (the session's results are safe so). Returns the SQL text
    for the column (the function of `id`)."""
    import duckdb
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    def call(ids: Any) -> Any:
        made = make()
        keys, values = made if isinstance(made, tuple) else (None, made)
        x = pc.fill_null(ids, -1).to_numpy()
        if keys is None:
            inside = (x >= 0) & (x < len(values))
            at = np.where(inside, x, 0)
        else:
            at = np.minimum(np.searchsorted(keys, x), max(len(keys) - 1, 0))
            inside = keys[at] == x if len(keys) else np.zeros(len(x), bool)
        got = values[at] if len(values) else np.full(len(x), -1, np.int64)
        return pa.array(got.astype(np.int64), mask=~inside | (got < 0))

    bigint = duckdb.sqltype("BIGINT")
    con.create_function(name, call, [bigint], bigint, type="arrow", null_handling="special")
    return f"{name}(id)"


def _args_json(traces: list[Any], ids: list[int | None]) -> Any:
    """`args(id)` for a batch of rows: each trace's wanted events read back in one pass (a
    gzip'd file decompressed once per batch, not once per row); JSON text, null when the row
    does not exist or cannot be read back."""
    import numpy as np
    import pyarrow as pa

    from kinetoscope.parser.access import read_events

    wanted: dict[int, tuple[Any, list[int]]] = {}
    for trace, row in zip(traces, ids):
        if trace is not None and row is not None and 0 <= row < len(trace.model):
            wanted.setdefault(id(trace), (trace, []))[1].append(row)
    found: dict[tuple[int, int], str] = {}
    for key, (trace, rows) in wanted.items():
        for row, event in read_events(trace.model, np.array(rows, np.int64)).items():
            args = event.get("args")
            args = args if isinstance(args, dict) else {}
            found[(key, row)] = json.dumps(args, ensure_ascii=False, default=str)
    out = [
        found.get((id(trace), row)) if trace is not None and row is not None else None
        for trace, row in zip(traces, ids)
    ]
    return pa.array(out, pa.string())


def _python(values: list) -> list:
    """DuckDB's sums of BIGINT are HUGEINT, Decimals in Python: whole ones become ints."""
    from decimal import Decimal

    if not any(isinstance(v, Decimal) for v in values):
        return values
    return [
        (int(v) if v == v.to_integral_value() else float(v)) if isinstance(v, Decimal) else v
        for v in values
    ]


# -- output -----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    from kinetoscope.present.safe_text import clean  # names in a trace are hostile

    if value is None:
        return ""
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(value)
    if isinstance(value, list | dict):
        return clean(json.dumps(value, ensure_ascii=False, default=str))
    return clean(str(value))


def _json_value(value: Any) -> Any:
    from kinetoscope.present.safe_text import clean

    if isinstance(value, str):
        return clean(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {clean(str(k)): _json_value(v) for k, v in value.items()}
    if isinstance(value, int | bool) or value is None:
        return value
    return clean(str(value))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def render(table: Table, fmt: str, width: int | None = None) -> str:
    """The query's result as text in `fmt` (table, csv, json, md); every cell cleaned. With
    `width` (a terminal's), the table format cuts its widest text columns to fit."""
    names = table.columns
    rows = [[table.value(i, n) for n in names] for i in range(len(table))]
    if fmt == "json":
        return (
            json.dumps(
                [{_cell(n): _json_value(v) for n, v in zip(names, r)} for r in rows],
                ensure_ascii=False,
                indent=1,
            )
            + "\n"
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([_cell(n) for n in names])
        for r in rows:
            writer.writerow([_cell(v) for v in r])
        return out.getvalue()
    header = [_cut(_cell(n)) for n in names]
    body = [[_cut(_cell(v)) for v in r] for r in rows]
    numeric = [
        all(isinstance(r[j], int | float) or r[j] is None for r in rows) and bool(rows)
        for j in range(len(names))
    ]
    if fmt == "md":

        def md(text: str) -> str:
            return text.replace("\\", "\\\\").replace("|", "\\|")

        lines = ["| " + " | ".join(md(h) for h in header) + " |"]
        lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
        lines.extend("| " + " | ".join(md(c) for c in r) + " |" for r in body)
        return "\n".join(lines) + "\n"
    from rich.cells import cell_len

    widths = [max([cell_len(h)] + [cell_len(r[j]) for r in body]) for j, h in enumerate(header)]
    if width is not None:
        _fit(widths, numeric, width)
        from kinetoscope.present.safe_text import cut_end

        header = [cut_end(h, w) for h, w in zip(header, widths)]
        body = [[cut_end(c, w) for c, w in zip(r, widths)] for r in body]

    def line(cells: list[str]) -> str:
        parts = []
        for j, c in enumerate(cells):
            pad = " " * (widths[j] - cell_len(c))
            parts.append(pad + c if numeric[j] else c + pad)
        return "  ".join(parts).rstrip()

    out = [line(header), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in body)
    out.append(f"({len(body):,} {'row' if len(body) == 1 else 'rows'})")
    return "\n".join(out) + "\n"


def _fit(widths: list[int], numeric: list[bool], width: int, least: int = 12) -> None:
    """Narrow the widest text columns (never below `least` cells) until the line fits."""
    while True:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        text = [j for j, n in enumerate(numeric) if not n and widths[j] > least]
        if excess <= 0 or not text:
            return
        j = max(text, key=lambda k: widths[k])
        widths[j] = max(least, widths[j] - excess)


def _terminal_width() -> int | None:
    import shutil

    try:
        return shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    except (OSError, ValueError):
        return None


# -- the command ------------------------------------------------------------------------------


# -- the MCP server's `query` tool -------------------------------------------------------------

_MCP_TRACES: dict[int, Any] = {}  # id(session) -> the API's Trace over it (its tables cached)
_MCP_TRACES_KEPT = 8


def mcp_query(session: Any, query: str, limit: int) -> dict[str, Any]:
    """`kinetoscope mcp`'s read-only `query` tool: the SQL of `kinetoscope sql` over one open
    trace (docs/sql.md), its first `limit` rows; ValueError with one line for a bad query."""
    if session is None:
        raise ValueError("query runs on a trace's handle (open_trace), not a job's")
    from kinetoscope.api import Trace

    trace = _MCP_TRACES.get(id(session))
    if trace is None or trace.session is not session:
        trace = Trace.of_session(session)
        _MCP_TRACES[id(session)] = trace
        while len(_MCP_TRACES) > _MCP_TRACES_KEPT:
            del _MCP_TRACES[next(iter(_MCP_TRACES))]
    try:
        with Database.of_trace(trace) as db:
            table = db.query(query)
    except QueryError as exc:
        raise ValueError(str(exc)) from None
    columns = list(table.columns)
    values = [list(table.column(name)) for name in columns]
    values = [[v.item() if hasattr(v, "item") else v for v in column] for column in values]
    count = len(values[0]) if values else 0
    rows = [[_json_value(column[i]) for column in values] for i in range(min(count, limit))]
    return {"columns": columns, "rows": rows, "total_rows": count}


def sql_available() -> bool:
    """Whether DuckDB and pyarrow (the `sql` extra) can be imported."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("duckdb", "pyarrow"))
