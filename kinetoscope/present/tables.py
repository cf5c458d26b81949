"""The one description of a table: its fields, each with a kind (name, stack, text, id,
count, duration, bytes, share...), over typed rows. The CSV files (the viewer's save key `W`
and `kinetoscope summary --csv DIR`), summary's text/md/tsv sections (report_summary.section)
and the viewer's columns (tui/widgets/columns.py `columns_of`, from a field's `View`) are made
from it, so a table saved from the viewer, written by the summary and reported by it cannot
disagree. A builder reads its rows from the session (`XRows.of`) or, for summary's report,
from the summary document (`XRows.of_document`). No Textual, no Rich.

A `Table` is a list of `Field`s over `n` rows, row ids being those of the viewer's model of the
same table (a group, a gap, a finding...), plus `order`, the order the viewer first shows them
in (its default sort). The summary writes every row in that order; the viewer writes the rows
it shows (filter, category, range and sort applied), in its order.

Cells (docs/csv.md): durations are integer ns written as microseconds with exactly 3 decimals
(`12.345`: exact, the same numbers as the trace's `ts`/`dur` and the summary JSON), a column
whose header ends in `_us`; a mean is rounded to 3 decimals as the summary JSON's `mean_us`.
Bytes and counts are integers. Shares are fractions of 1 written with Python's shortest
round-trip float text.
Names are written as recorded (the csv module quotes commas, quotes and line breaks), except
that a text cell a spreadsheet would evaluate as a formula (one starting with `=`, `+`, `-`,
`@`, TAB or CR, and not a plain number) gets a `'` in front (`safe_cell`), unless the caller
asks for raw cells (`--csv-raw`, the viewer's raw save) for exact round trips. A value
that does not exist (no shape, no launching operator, a rank not loaded) is an empty cell.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from kinetoscope.analysis.units import fmt_bytes, fmt_percent, fmt_table_time, us_text
from kinetoscope.common.text import clean

NO_VALUE = np.iinfo(np.int64).min  # the parser's "not recorded" (parser.model.NO_VALUE)


@dataclass(frozen=True)
class Kind:
    """What a field's values are, which says how each output writes them: `csv` the CSV cell
    ("text": as recorded, neutralised unless raw; "int"; "us": integer ns as µs with 3 decimals;
    "float": shortest round-trip text), `layout` how summary's text tables lay the column out
    (report_summary.Section: "number" never cut, "name" cut with `…`, "stack" frames cut at the
    front, "text" wrapped) and `shown` a report cell of a value (never None: that is `–`)."""

    name: str
    csv: str
    layout: str
    shown: Callable[[Any], str]


def duration_text(ns: Any) -> str:
    """A duration of `ns` for a report cell: three decimals in an adaptive unit, zeros kept."""
    return fmt_table_time(float(ns), align_units=False)


TEXT = Kind("text", "text", "text", str)  # words that wrap (a cause, a message)
NAME = Kind("name", "text", "name", str)  # an event's name: one line, cut where it says least
STACK = Kind("stack", "text", "stack", str)  # frames joined by ` > `, outermost first
ID = Kind("id", "int", "text", str)  # a number that names something (a device, a rank)
INT = Kind("int", "int", "number", lambda v: str(int(v)))
COUNT = Kind("count", "int", "number", lambda v: f"{int(v):,}")  # shown with separators
DURATION = Kind("duration", "us", "number", duration_text)  # integer (or mean) ns
US = DURATION
BYTES = Kind("bytes", "int", "number", lambda v: fmt_bytes(v))
SHARE = Kind("share", "float", "number", lambda v: fmt_percent(v))  # a fraction of 1
FLOAT = Kind("float", "float", "number", lambda v: repr(float(v)))
SEVERITY = Kind("severity", "text", "text", str)  # critical, warning, info: coloured in a report


@dataclass(frozen=True)
class Field:
    """One column: its CSV header (with its unit: `total_us`, `bytes`), the kind of its values,
    the raw value of a row (None: empty), and for summary's text/md/tsv report its `title`
    there (None: not in the report) and its cell there when it is not the kind's text of the
    value (`text`: a duration beside its share, a coloured severity), or for a value that does
    not exist (`missing`). A `csv=False` field is the report's only."""

    header: str
    kind: Kind
    value: Callable[[int], Any]
    title: str | None = None
    text: Callable[[int], Any] | None = None
    csv: bool = True
    missing: str = "–"
    view: Callable[[], View] | None = None  # how the viewer shows it, made when it asks


@dataclass(frozen=True)
class View:
    """How the viewer's table (tui/widgets/columns.py `columns_of`) shows a field: its title
    there, the values of every row as an array (the cells of a duration, count or share, and
    the sort key), its width in cells (None: as its kind wants; 0: what the fixed columns
    leave), whether it gives way on a narrow terminal (`optional`), its cell when not the
    value (`cell`), the whole a share is of, and its first sort's direction."""

    title: str
    values: np.ndarray | None = None
    width: int | None = None
    optional: bool = False
    cell: Callable[[int], Any] | None = None  # text (a viewer's own column: styled text)
    whole: float = 0.0
    largest_first: bool | None = None  # the first sort's direction (None: numbers' largest)


def string_ranks(strings: Sequence[str], ids: np.ndarray) -> np.ndarray:
    """Sort keys for string ids: the rank of each id's lowercased text among `ids`' texts."""
    distinct, inverse = np.unique(ids, return_inverse=True)
    texts = [strings[int(i)].lower() for i in distinct]
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[sorted(range(len(texts)), key=texts.__getitem__)] = np.arange(len(texts))
    return rank[inverse.reshape(-1)]


def name_view(title: str, strings: Sequence[str], names: np.ndarray) -> View:
    """A column of event names (string ids) taking the room the others leave, sorted by name."""
    return View(
        title, string_ranks(strings, names), 0, cell=lambda g: strings[names[g]] or "(no name)"
    )


def category_view(strings: Sequence[str], cats: np.ndarray, widest: int = 12) -> View:
    """The category of a group, as wide as the longest one needs (at most `widest`)."""
    cats = np.asarray(cats).astype(np.int64)
    longest = max((len(strings[int(c)]) for c in np.unique(cats)), default=3)
    return View(
        "cat",
        string_ranks(strings, cats),
        max(4, min(widest, longest + 1)),
        cell=lambda g: strings[cats[g]],
    )


@dataclass
class Table:
    """A table of `n` rows: `fields` per row, `order` the viewer's first order of the rows.
    `title`, `shown` (the headers of the report's columns in its order; empty: the fields with
    a title, in field order) and `key` (the leading columns a split table repeats) make the
    summary report's section of the same table (report_summary.section); `viewed` orders the
    viewer's columns where that is not the fields' order."""

    name: str  # names the file: `<trace>.<name>.csv`
    fields: list[Field]
    n: int
    order: np.ndarray
    title: str = ""
    shown: tuple[str, ...] = ()
    key: int = 1
    viewed: tuple[str, ...] = ()  # the viewer's columns' headers in its order (empty: fields')

    @property
    def view_fields(self) -> list[Field]:
        if not self.viewed:
            return [f for f in self.fields if f.view is not None]
        by_header = {f.header: f for f in self.fields}
        return [by_header[h] for h in self.viewed if by_header[h].view is not None]

    @property
    def csv_fields(self) -> list[Field]:
        return [f for f in self.fields if f.csv]

    @property
    def report_fields(self) -> list[Field]:
        if not self.shown:
            return [f for f in self.fields if f.title is not None]
        by_header = {f.header: f for f in self.fields}
        return [by_header[h] for h in self.shown]

    @property
    def headers(self) -> list[str]:
        return [f.header for f in self.csv_fields]

    def cells(self, row: int, raw: bool = True) -> list[str]:
        """The cells of a row; with `raw` False, text cells a spreadsheet would evaluate are
        neutralised (`safe_cell`)."""
        fields = self.csv_fields
        if raw:
            return [cell_text(f.kind, f.value(row)) for f in fields]
        return [
            safe_cell(text) if f.kind.csv == "text" else text
            for f in fields
            for text in (cell_text(f.kind, f.value(row)),)
        ]

    def rows(self, order: Iterable[int] | None = None, raw: bool = True) -> Iterable[list[str]]:
        for row in self.order if order is None else order:
            yield self.cells(int(row), raw)


def cell_text(kind: Kind, value: Any) -> str:
    """The CSV text of a value of a kind (None, NaN and NO_VALUE: empty)."""
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
        return ""
    if kind.csv == "text":
        return str(value)
    if isinstance(value, (int, np.integer)) and int(value) == NO_VALUE:
        return ""
    if kind.csv == "us":
        return us_text(value)
    if kind.csv == "int":
        return str(int(value))
    return repr(float(value))


# What a spreadsheet evaluates (OWASP, CSV injection): a cell starting with one of these...
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# ...unless it is a plain number (`-2.5`, `+3`, `-1e-05`), which it reads as that number.
PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def safe_cell(text: str) -> str:
    """`text` as a spreadsheet shows it rather than evaluates it: a `'` in front of a cell that
    starts with `=`, `+`, `-`, `@`, TAB or CR and is not a plain number; any other as it is."""
    if text.startswith(FORMULA_STARTS) and PLAIN_NUMBER.fullmatch(text) is None:
        return "'" + text
    return text


def mean_ns(total: int, count: int) -> Fraction | None:
    """The exact mean of `count` values adding up to `total` ns (None: no values)."""
    return Fraction(int(total), int(count)) if count else None


def largest_first(values: np.ndarray) -> np.ndarray:
    """Rows by `values`, largest first, ties in row order: the viewer's sort (table.sort_rows)."""
    key = np.asarray(values)
    if key.dtype.kind == "f":
        return np.argsort(-key, kind="stable")
    return np.argsort(~key.astype(np.int64), kind="stable")


def smallest_first(values: np.ndarray) -> np.ndarray:
    return np.argsort(np.asarray(values), kind="stable")


def _share(part: np.ndarray, whole: float) -> Callable[[int], float]:
    return lambda r: float(part[r]) / whole if whole else 0.0


# -- writing ---------------------------------------------------------------------------------


def write_csv(
    table: Table, handle: Any, rows: Iterable[int] | None = None, raw: bool = False
) -> int:
    """Write the header and `rows` (None: every row in `table.order`) to an open text file
    (opened with newline=""); the number of rows written. Text cells that a spreadsheet would
    evaluate are neutralised (`safe_cell`) unless `raw`."""
    if rows is not None:
        rows = np.asarray(rows, np.int64)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= table.n):
            raise ValueError(f"{table.name}: rows outside the table's {table.n}")
    writer = csv.writer(handle)
    writer.writerow(table.headers)
    count = 0
    for cells in table.rows(rows, raw):
        writer.writerow(cells)
        count += 1
    return count


def trace_stem(path: str) -> str:
    """A file name's part that names the trace: the base name without .json/.json.gz, and
    without characters that are awkward in file names."""
    name = os.path.basename(os.path.normpath(path)) or "trace"
    for suffix in (".gz", ".json"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    name = re.sub(r"[^\w.+-]+", "_", name).strip("._") or "trace"
    return name[:120]


def create_new(directory: str, stem: str, suffix: str = ".csv") -> tuple[str, Any]:
    """Open `directory/stem.csv` (another `suffix`) for writing, or `stem-2.csv`, `stem-3.csv`...
    the first that does not exist (created exclusively: an existing file is never overwritten)."""
    for number in range(1, 10_000):
        name = f"{stem}{suffix}" if number == 1 else f"{stem}-{number}{suffix}"
        path = os.path.join(directory, name)
        try:
            handle = open(path, "x", newline="", encoding="utf-8")  # noqa: SIM115
        except FileExistsError:
            continue
        return path, handle
    raise FileExistsError(errno.EEXIST, "too many files of that name", directory)


def output_places() -> list[str]:
    """Where the viewer writes what a key saves: the current directory, else (not writable, or
    removed) the temporary directory."""
    places = []
    try:
        places.append(os.getcwd())
    except OSError:  # the current directory was removed
        pass
    places.append(tempfile.gettempdir())
    return places


def save_table(
    table: Table,
    rows: Iterable[int] | None,
    source: str,
    directory: str | None = None,
    raw: bool = False,
) -> tuple[str, int]:
    """The viewer's save: `<trace>.<table>.csv` in `directory` (default: `output_places()`),
    never over an existing file; `raw`: cells as recorded (write_csv). Returns (the path
    written, rows written); raises the last OSError when no place would do."""
    stem = f"{trace_stem(source)}.{table.name}"
    places = [directory] if directory is not None else output_places()
    error: OSError | None = None
    for place in places:
        try:
            path, handle = create_new(place, stem)
        except OSError as exc:  # not writable, gone, full of such names: the next place
            error = exc
            continue
        try:
            with handle:
                count = write_csv(table, handle, rows, raw)
        except BaseException:
            os.unlink(path)  # no half-written file left behind
            raise
        return path, count
    assert error is not None
    raise error


def write_tables(
    tables: Sequence[Table], directory: str, source: str, raw: bool = False
) -> list[tuple[str, int]]:
    """`summary --csv DIR`: every table as `DIR/<trace>.<table>.csv`, the directory made when
    missing; `raw` (`--csv-raw`): cells as recorded (write_csv). Refuses (FileExistsError,
    nothing written) when any of the files exists."""
    os.makedirs(directory, exist_ok=True)
    stem = trace_stem(source)
    paths = [os.path.join(directory, f"{stem}.{t.name}.csv") for t in tables]
    existing = [p for p in paths if os.path.lexists(p)]
    if existing:
        raise FileExistsError(errno.EEXIST, "already exists", existing[0])
    written: list[tuple[str, int]] = []
    made: list[str] = []
    try:
        for table, path in zip(tables, paths):
            with open(path, "x", newline="", encoding="utf-8") as handle:
                made.append(path)
                written.append((path, write_csv(table, handle, raw=raw)))
    except BaseException:  # a full disk, Ctrl-C: no tables half written, none left behind
        for path in made:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    return written


# -- a single trace ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatorRows:
    """CPU operator groups, typed as their table reads them: per row its name, category, input
    shape (None: none; `shapes` False: not grouped by shape), count, and total (inclusive),
    self, GPU self and GPU total ns; `excl` (self ns, an array) orders them and makes the
    shares; `memory` the memory columns (None: none)."""

    n: int
    name: Callable[[int], str]
    cat: Callable[[int], str]
    count: Callable[[int], Any]
    incl: Callable[[int], Any]
    excl: np.ndarray
    gpu_self: Callable[[int], Any]
    gpu_total: Callable[[int], Any]
    shape: Callable[[int], str | None] | None = None
    memory: dict[str, np.ndarray] | None = None
    views: dict[str, Callable[[], View]] = field(default_factory=dict)  # the viewer's, by header

    @classmethod
    def of(
        cls,
        trace: Any,
        table: Any,
        shapes: np.ndarray | None = None,
        memory: dict[str, np.ndarray] | None = None,
    ) -> OperatorRows:
        """A row per CPU (cat, name) group of `table` (an OperatorTable), or per (cat, name,
        input shape) when `shapes` (a string id per group, -1: none) is given; the memory
        columns (`operator_memory`) when given."""
        from kinetoscope.present.safe_text import clean

        strings = trace.strings
        names = table.groups.name.astype(np.int64)
        cats = table.groups.cat.astype(np.int64)
        shape = None
        views: dict[str, Callable[[], View]] = {
            "name": lambda: name_view("operator", strings, names),
            "cat": lambda: category_view(strings, cats),
            "count": lambda: View("count", table.count),
            "total_us": lambda: View("total", table.incl),
            "self_us": lambda: View("self", table.excl),
            # At 80 columns these give way (from the right) so that names keep room.
            "gpu_self_us": lambda: View("GPU self", table.gpu_self, optional=True),
            "gpu_total_us": lambda: View("GPU total", table.gpu_total, optional=True),
            "self_share": lambda: View(
                "self%", table.excl, optional=True, whole=float(table.excl.sum())
            ),
        }
        if shapes is not None:
            shape = lambda g: strings[int(shapes[g])] if shapes[g] >= 0 else None  # noqa: E731
            views["input_shape"] = lambda: View(
                "input shape",
                shapes,
                22,
                cell=lambda g: clean(strings[shapes[g]]) if shapes[g] >= 0 else "-",
            )
        if memory is not None:
            allocated, peak = memory["allocated"], memory["peak_live"]
            views["allocated_bytes"] = lambda: View(
                "alloc'd",
                allocated,
                10,
                True,
                lambda g: fmt_bytes(int(allocated[g])) if allocated[g] else "",
            )
            views["peak_live_bytes"] = lambda: View(
                "peak mem",
                peak,
                10,
                True,
                lambda g: fmt_bytes(int(peak[g])) if peak[g] != NO_VALUE else "",
            )
        return cls(
            len(table),
            lambda g: strings[names[g]],
            lambda g: strings[cats[g]],
            lambda g: table.count[g],
            lambda g: table.incl[g],
            table.excl,
            lambda g: table.gpu_self[g],
            lambda g: table.gpu_total[g],
            shape,
            memory,
            views,
        )

    @classmethod
    def of_document(cls, ops: Sequence[dict[str, Any]]) -> OperatorRows:
        """The rows of a summary document's `operators` (most self time first)."""
        return cls(
            len(ops),
            lambda i: ops[i]["name"],
            lambda i: ops[i]["cat"],
            lambda i: ops[i]["count"],
            lambda i: us_ns(ops[i]["incl_us"]),
            np.array([us_ns(op["excl_us"]) for op in ops], np.float64),
            lambda i: us_ns(ops[i]["gpu_self_us"]),
            lambda i: us_ns(ops[i]["gpu_total_us"]),
        )


def operators_table(rows: OperatorRows) -> Table:
    """The operators table (`o`, and the summary's top operators): a row per CPU group, by
    name or by (name, input shape), most self time first; memory columns when given."""
    excl = rows.excl
    whole = float(excl.sum())
    fields = [
        Field("name", NAME, rows.name, "operator"),
        Field("cat", TEXT, rows.cat, "category"),
    ]
    if rows.shape is not None:
        fields.append(Field("input_shape", TEXT, rows.shape))
    fields += [
        Field("count", COUNT, rows.count, "count"),
        Field("total_us", US, rows.incl, "total"),
        Field("self_us", US, lambda g: excl[g], "self"),
        Field("gpu_self_us", US, rows.gpu_self, "GPU self"),
        Field("gpu_total_us", US, rows.gpu_total, "GPU total"),
        Field("self_share", SHARE, _share(excl, whole)),
    ]
    memory = rows.memory
    if memory is not None:
        allocated, peak = memory["allocated"], memory["peak_live"]
        fields += [
            Field("allocated_bytes", BYTES, lambda g: allocated[g]),
            Field("peak_live_bytes", BYTES, lambda g: peak[g]),
        ]
    fields = [replace(f, view=rows.views.get(f.header)) for f in fields]
    name = "operators" if rows.shape is None else "operators-by-shape"
    shown = ("name", "cat", "count", "self_us", "total_us", "gpu_self_us", "gpu_total_us")
    return Table(name, fields, rows.n, largest_first(excl), "Top operators by self time", shown)


def operator_memory(session: Any, groups: Any) -> dict[str, np.ndarray] | None:
    """The memory columns of an operators table whose rows are `groups`, on the trace's main
    memory device (None: no memory events)."""
    from kinetoscope.analysis.memory_ops import group_columns

    ops = session.memory_ops
    device = ops.primary
    if device is None or not len(device):
        return None
    return group_columns(ops, device, groups)


@dataclass(frozen=True)
class KernelRows:
    """GPU (cat, name) groups, typed as their table reads them: per row its name, category,
    count, total, mean, shortest and longest ns (None: no instances) and the operator that
    launched most of its time (None: not known); `total` (an array) orders them and makes the
    shares."""

    n: int
    name: Callable[[int], str]
    cat: Callable[[int], str]
    count: Callable[[int], Any]
    total: np.ndarray
    mean: Callable[[int], Any]
    min: Callable[[int], Any]
    max: Callable[[int], Any]
    launcher: Callable[[int], str | None]
    views: dict[str, Callable[[], View]] = field(default_factory=dict)  # the viewer's, by header

    @classmethod
    def of(cls, trace: Any, table: Any, top: Any, op_names: np.ndarray) -> KernelRows:
        """A row per group of `table` (a KernelTable); `top` per group the operator group that
        launched most of its time (-1: none), or the KernelLaunchers (analysis/kernels.py)
        that also say how many did (the viewer's column); `op_names` the name of each
        operator group."""
        strings = trace.strings
        names = table.groups.name.astype(np.int64)
        cats = table.groups.cat.astype(np.int64)
        top_group = getattr(top, "top_group", top)

        def launcher(g: int) -> str | None:
            op = int(top_group[g])
            return strings[int(op_names[op])] if op >= 0 else None

        def launched_by(g: int) -> str:  # the viewer's cell: and how many others
            op = int(top.top_group[g])
            if op < 0:
                return "-"
            more = int(top.n_groups[g]) - 1
            return strings[int(op_names[op])] + (f" +{more}" if more > 0 else "")

        views: dict[str, Callable[[], View]] = {
            "name": lambda: name_view("kernel", strings, names),
            "cat": lambda: category_view(strings, cats, widest=10),
            "count": lambda: View("count", table.count),
            "total_us": lambda: View("total", table.total),
            "mean_us": lambda: View("mean", table.mean()),
            # Narrow terminals: these give way (from the right) so that names keep room.
            "total_share": lambda: View(
                "%", table.total, optional=True, whole=float(table.total.sum())
            ),
            "min_us": lambda: View("min", table.min, optional=True),
            "max_us": lambda: View("max", table.max, optional=True),
        }
        if hasattr(top, "n_groups"):
            views["launched_by"] = lambda: View("launched by", None, 22, True, launched_by)
        return cls(
            len(table),
            lambda g: strings[names[g]],
            lambda g: strings[cats[g]],
            lambda g: table.count[g],
            table.total,
            lambda g: mean_ns(table.total[g], table.count[g]),
            lambda g: table.min[g] if table.count[g] else None,
            lambda g: table.max[g] if table.count[g] else None,
            launcher,
            views,
        )

    @classmethod
    def of_document(
        cls, kernels: Sequence[dict[str, Any]], launcher: Callable[[str, str], str | None]
    ) -> KernelRows:
        """The rows of a summary document's `kernels`; `launcher(cat, name)` the operator that
        launched most of a group's time."""
        return cls(
            len(kernels),
            lambda i: kernels[i]["name"],
            lambda i: kernels[i]["cat"],
            lambda i: kernels[i]["count"],
            np.array([us_ns(k["total_us"]) for k in kernels], np.float64),
            lambda i: us_ns(kernels[i]["mean_us"]),
            lambda i: us_ns(kernels[i]["min_us"]),
            lambda i: us_ns(kernels[i]["max_us"]),
            lambda i: launcher(kernels[i]["cat"], kernels[i]["name"]) or None,
        )


def kernels_table(rows: KernelRows) -> Table:
    """The kernels table (`k`, and the summary's top kernels): a row per GPU group, most total
    time first."""
    total = rows.total
    whole = float(total.sum())
    fields = [
        Field("name", NAME, rows.name, "kernel"),
        Field("cat", TEXT, rows.cat),
        Field("count", COUNT, rows.count, "count"),
        Field("total_us", US, lambda g: total[g], "total"),
        Field("mean_us", US, rows.mean, "mean"),
        Field("total_share", SHARE, _share(total, whole)),
        Field("launched_by", NAME, rows.launcher, "launched mostly by"),
        Field("min_us", US, rows.min, "min"),
        Field("max_us", US, rows.max, "max"),
    ]
    fields = [replace(f, view=rows.views.get(f.header)) for f in fields]
    shown = ("name", "count", "total_us", "mean_us", "min_us", "max_us", "launched_by")
    return Table(
        "kernels",
        fields,
        rows.n,
        largest_first(total),
        "Top GPU kernels and copies by total time",
        shown,
    )


def kernel_launcher_groups(session: Any, table: Any) -> np.ndarray:
    """Per group of a KernelTable of the session's trace: the operator group that launched most
    of its GPU time, or -1."""
    from kinetoscope.analysis.kernels import kernel_launchers

    return kernel_launchers(
        table.launcher_row,
        session.links.gpu_rows,
        session.trace,
        session.gpu_groups,
        session.cpu_groups,
    ).top_group


@dataclass(frozen=True)
class GapRows:
    """GPU idle gaps, typed as their table reads them: per row its device, start (the trace's
    clock) and length ns, cause, the next GPU event's name (None: none); for the report also
    its start from the trace's first event (`at`, ns) and the CPU stack at its midpoint
    (`stack`, outermost first)."""

    n: int
    device: Callable[[int], int]
    start: Callable[[int], Any]
    length: Callable[[int], Any]
    cause: Callable[[int], str]
    next_event: Callable[[int], str | None]
    at: Callable[[int], Any] = lambda i: None
    stack: Callable[[int], Sequence[str]] = lambda i: ()

    @classmethod
    def of(cls, trace: Any, gaps: Any, order: np.ndarray) -> GapRows:
        """The gaps `order` (gap ids, e.g. longest first) of an IdleGaps (analysis/idle.py)."""
        from kinetoscope.analysis.idle import CAUSES

        order = np.asarray(order, np.int64)

        def gap(i: int) -> int:
            return int(order[i])

        return cls(
            len(order),
            lambda i: gaps.device[gap(i)],
            lambda i: gaps.start[gap(i)],
            lambda i: int(gaps.end[gap(i)]) - int(gaps.start[gap(i)]),
            lambda i: CAUSES[int(gaps.cause[gap(i)])],
            lambda i: (
                trace.name_of(int(gaps.next_row[gap(i)])) if gaps.next_row[gap(i)] >= 0 else None
            ),
        )

    @classmethod
    def of_document(cls, document: dict[str, Any]) -> GapRows:
        """The rows of a summary document's `idle_gaps` (the longest first)."""
        gaps = document["idle_gaps"]
        origin = document["trace"]["start_us"] or 0.0
        return cls(
            len(gaps),
            lambda i: gaps[i]["device"],
            lambda i: us_ns(gaps[i]["start_us"]),
            lambda i: us_ns(gaps[i]["dur_us"]),
            lambda i: gaps[i]["cause"],
            lambda i: gaps[i]["next_gpu_event"],
            lambda i: us_ns(gaps[i]["start_us"] - origin),
            lambda i: gaps[i]["cpu_stack"],
        )


STACK_SEPARATOR = " > "  # between the frames of a stack cell, outermost first


def gaps_table(rows: GapRows) -> Table:
    """GPU idle gaps (`i`, and the summary's longest gaps) in the order given."""
    fields = [
        Field("rank", INT, lambda i: i + 1),
        Field("device", ID, rows.device, "device"),
        Field("start_us", US, rows.start),
        Field("at", US, rows.at, "at", lambda i: "+" + duration_text(rows.at(i)), csv=False),
        Field("length_us", US, rows.length, "duration"),
        Field("cause", TEXT, rows.cause, "cause"),
        Field("next_gpu_event", NAME, rows.next_event, "next GPU event"),
        Field(
            "cpu_stack",
            STACK,
            lambda i: STACK_SEPARATOR.join(stack) if (stack := rows.stack(i)) else None,
            "CPU stack (innermost last)",
            csv=False,
        ),
    ]
    return Table(
        "gaps",
        fields,
        rows.n,
        np.arange(rows.n),
        "Longest GPU idle gaps, with what the CPU was doing at their midpoint",
        key=2,  # a gap is told apart by its device and time
    )


@dataclass(frozen=True)
class FindingRow:
    """A finding as its table reads it (analysis/rules.py's Finding has these attributes too):
    severity, rule, the message, the evidence's start and length ns and device (None: none)."""

    severity: str
    rule: str
    message: str
    start: Any
    dur: Any
    device: int | None = None


SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}  # most severe first


def seen_text(finding: Any) -> str:
    """A cause's one line (a Finding's headline), with the rules whose findings it explains."""
    also = ", ".join(s.rule for s in finding.supports)
    return finding.headline + (f" (explains {also})" if also else "")


def findings_table(findings: Sequence[Any]) -> Table:
    """The triage findings (`t`, and the summary's Findings), one row per finding (Finding or
    FindingRow) in the order given (the CSV's: cause by cause, analysis/rules.py
    `cause_members`). The viewer's columns (one row per cause, Findings with their supports)
    say each cause's one line."""
    n = len(findings)

    def severity_view() -> View:
        rank = np.array([SEVERITY_RANK.get(f.severity, 3) for f in findings], dtype=np.int64)
        return View("severity", rank, 9, cell=lambda i: findings[i].severity)

    def rule_view() -> View:
        # The rule id whole (a stable id, for grep and the docs): as wide as the longest one.
        width = max([len("rule"), *(len(f.rule) for f in findings)])
        return View("rule", np.arange(n), width, cell=lambda i: findings[i].rule)

    fields = [
        Field(
            "number",
            INT,
            lambda i: i + 1,
            view=lambda: View("#", np.arange(n), 3, cell=lambda i: str(i + 1), largest_first=False),
        ),
        Field("severity", SEVERITY, lambda i: findings[i].severity, "severity", view=severity_view),
        Field("rule", TEXT, lambda i: findings[i].rule, "rule", view=rule_view),
        Field("device", INT, lambda i: findings[i].device),
        Field(
            "message",
            TEXT,
            lambda i: findings[i].message,
            "what we saw, and what to try",
            view=lambda: View(
                "what was seen", None, 0, cell=lambda i: clean(seen_text(findings[i]))
            ),
        ),
        Field("evidence_start_us", US, lambda i: findings[i].start),
        Field("evidence_dur_us", US, lambda i: findings[i].dur),
    ]
    return Table("findings", fields, n, np.arange(n), "Findings")


def with_share(part: Any, whole: Any) -> Callable[[int], str]:
    """A report cell of a row: its duration `part[row]` (ns) and its share of `whole[row]`
    (`–` where that is not positive)."""

    def text(i: int) -> str:
        of = int(whole[i])
        share = "–" if of <= 0 else fmt_percent(int(part[i]) / of)
        return f"{duration_text(int(part[i]))} {share}"

    return text


def steps_table(trace: Any, steps: Any, on_gpu: bool, bar: View | None = None) -> Table:
    """The steps (`v`, and the summary's Steps): per ProfilerStep its wall time and where it
    went on the GPU (`on_gpu`), else on the step's CPU thread. `bar` is the viewer's column of
    what filled each step (drawn by the viewer: neither CSV nor report has it)."""
    names = trace.name[steps.rows].astype(np.int64)
    dur = steps.dur

    def share(part: np.ndarray) -> Callable[[int], float]:
        return lambda i: float(part[i]) / int(dur[i]) if dur[i] > 0 else 0.0

    def spent(header: str, part: np.ndarray, title: str | None = None) -> Field:
        """A duration in the step; in the report beside its share of the step."""
        text = with_share(part, dur) if title else None
        return Field(header, US, lambda i: part[i], title, text)

    def percent(title: str, part: np.ndarray, width: int) -> Callable[[], View]:
        """The viewer's whole percent of the step."""

        def view() -> View:
            of = part / np.maximum(dur, 1)
            return View(title, of, width, cell=lambda i: f"{100 * of[i]:.0f}")

        return view

    def timed(title: str, part: np.ndarray, width: int = 9) -> Callable[[], View]:
        return lambda: View(title, part, width)

    views: dict[str, Callable[[], View]] = {
        "step": lambda: View("step", steps.start, 0, cell=lambda i: trace.strings[names[i]]),
        "wall_us": timed("wall", dur, 10),
        "loader_share": percent("loader%", steps.dataloader, 8),
    }
    if bar is not None:
        views["bar"] = lambda: bar
    fields = [
        Field("step", NAME, lambda i: trace.strings[names[i]], "step"),
        Field("start_us", US, lambda i: steps.start[i]),
        Field("wall_us", US, lambda i: dur[i], "duration"),
        Field("bar", TEXT, lambda i: None, csv=False),  # the viewer's only
    ]
    viewed: tuple[str, ...] = ()
    if on_gpu:
        title = (
            "Steps: where the wall time went (GPU columns add up to the step; CPU columns overlap)"
        )
        fields += [
            spent("gpu_busy_us", steps.gpu_busy),
            Field("busy_share", FLOAT, share(steps.gpu_busy)),
            spent("compute_us", steps.compute, "GPU compute"),
            spent("comm_us", steps.comm, "comm"),
            spent("memory_us", steps.memory, "memcpy/set"),
            spent("idle_us", steps.idle, "GPU idle"),
            spent("dataloader_us", steps.dataloader, "DataLoader (CPU)"),
            Field("loader_share", FLOAT, share(steps.dataloader)),
            replace(spent("runtime_us", steps.runtime, "runtime (CPU)"), csv=False),
        ]
        views["busy_share"] = percent("busy%", steps.gpu_busy, 6)
        views["idle_us"] = timed("idle", steps.idle)
        views["comm_us"] = timed("comm", steps.comm)
        viewed = ("step", "wall_us", "bar", "busy_share", "idle_us", "comm_us", "loader_share")
    else:
        title = (
            "Steps (no GPU activity): CPU ops and uninstrumented time on the step's thread add "
            "up to the step; collectives (any thread) and DataLoader overlap them"
        )
        fields += [
            spent("cpu_busy_us", steps.cpu_busy, "CPU ops"),
            Field("ops_share", FLOAT, share(steps.cpu_busy)),
            spent("uninstrumented_us", steps.uninstrumented, "uninstrumented"),
            spent("collective_us", steps.collective, "collectives"),
            spent("dataloader_us", steps.dataloader, "DataLoader"),
            Field("loader_share", FLOAT, share(steps.dataloader)),
        ]
        views["ops_share"] = percent("ops%", steps.cpu_busy, 6)
        views["uninstrumented_us"] = timed("uninstr.", steps.uninstrumented)
        views["collective_us"] = timed("collect.", steps.collective)
    fields = [replace(f, view=views.get(f.header)) for f in fields]
    return Table("steps", fields, len(steps), smallest_first(steps.start), title, viewed=viewed)


def instances_table(trace: Any, rows: np.ndarray, name: str, extra: Sequence[Field] = ()) -> Table:
    """A table of instances (trace rows, in the order given, as the detail screens list them):
    their number in that order, start (the trace's clock), duration, then `extra`."""
    rows = np.asarray(rows, np.int64)
    fields = [
        Field("number", INT, lambda i: i + 1),
        Field("start_us", US, lambda i: trace.start[rows[i]]),
        Field("dur_us", US, lambda i: trace.dur[rows[i]]),
        *extra,
    ]
    return Table(name, fields, len(rows), largest_first(trace.dur[rows]))


def named_counts_table(
    name: str,
    header: str,
    labels: Sequence[str | None],
    count: np.ndarray,
    total: np.ndarray,
    whole: int | None = None,
) -> Table:
    """A table of named totals (an operator's children, the kernels it launched, its input
    shapes): name, count, total, mean, and the share of `whole` when given."""
    fields = [
        Field(header, TEXT, lambda i: labels[i]),
        Field("count", INT, lambda i: count[i]),
        Field("total_us", US, lambda i: total[i]),
        Field("mean_us", US, lambda i: mean_ns(total[i], count[i])),
    ]
    if whole is not None:
        fields.append(Field("share", FLOAT, lambda i: int(total[i]) / whole if whole else 0.0))
    return Table(name, fields, len(labels), largest_first(np.asarray(total)))


def memory_operators_table(trace: Any, groups: Any, device: Any) -> Table:
    """The memory view's operators (`p`) on one device, by bytes allocated (then by bytes
    allocated below them); a row per group with memory activity."""
    ops = device.ops
    active = ops.active()
    order = active[np.lexsort((-ops.incl_allocated[active], -ops.allocated[active]))]

    def group(i: int) -> int:
        return int(order[i])

    fields = [
        Field("name", TEXT, lambda i: trace.strings[int(groups.name[group(i)])]),
        Field("cat", TEXT, lambda i: trace.strings[int(groups.cat[group(i)])]),
        Field("allocations", INT, lambda i: ops.allocations[group(i)]),
        Field("allocated_bytes", INT, lambda i: ops.allocated[group(i)]),
        Field("self_net_bytes", INT, lambda i: ops.self_net[group(i)]),
        Field("total_net_bytes", INT, lambda i: ops.incl_net[group(i)]),
        Field("peak_live_bytes", INT, lambda i: ops.peak_live[group(i)]),
        Field(
            "not_freed_bytes",
            INT,
            lambda i: ops.unfreed_bytes[group(i)] if ops.unfreed[group(i)] else 0,
        ),
    ]
    return Table("memory-operators", fields, len(order), np.arange(len(order)))


def never_freed_table(trace: Any, device: Any) -> Table:
    """The memory view's allocations never freed on one device (`p`, then `v`), largest first
    (ties: earlier); empty when the trace records no addresses."""
    allocations = device.allocations
    if allocations.addresses_known:
        never = allocations.never_freed
        event = allocations.event[never]
        order = never[np.lexsort((device.ts[event], -device.bytes[event]))]
    else:
        order = np.zeros(0, np.int64)

    def pos(i: int) -> int:
        return int(allocations.event[int(order[i])])

    def owner(i: int) -> str | None:
        row = int(device.owner[pos(i)])
        return trace.name_of(row) if row >= 0 else None

    fields = [
        Field("bytes", INT, lambda i: device.bytes[pos(i)]),
        Field("when_us", US, lambda i: device.ts[pos(i)]),
        Field("owner", TEXT, owner),
        Field("allocated_after_bytes", INT, lambda i: device.allocated[pos(i)]),
    ]
    return Table("never-freed", fields, len(order), np.arange(len(order)))


def sync_calls_table(trace: Any, calls: Any) -> Table:
    """The sync view's blocking calls (`b`), longest blocked first."""
    from kinetoscope.analysis.sync import cause_label

    order = calls.worst()

    def call(i: int) -> int:
        return int(order[i])

    def step(i: int) -> str | None:
        k = int(calls.step[call(i)])
        return trace.name_of(int(calls.step_rows[k])) if k >= 0 else None

    fields = [
        Field("rank", INT, lambda i: i + 1),
        Field("call", TEXT, lambda i: trace.name_of(int(calls.rows[call(i)]))),
        Field("blocked_us", US, lambda i: calls.dur[call(i)]),
        Field("start_us", US, lambda i: trace.start[int(calls.rows[call(i)])]),
        Field("step", TEXT, step),
        Field("cause", TEXT, lambda i: cause_label(trace, calls, call(i))),
        Field("gpu_idle_us", US, lambda i: calls.idle[call(i)]),
        Field("call_site", TEXT, lambda i: " › ".join(calls.sites[int(calls.site[call(i)])])),
    ]
    return Table("sync-calls", fields, len(order), np.arange(len(order)))


def sync_sites_table(sites: Sequence[Any]) -> Table:
    """The sync view's call sites (`b`, then `v`), most time blocked first."""
    fields = [
        Field("call", TEXT, lambda i: sites[i].call),
        Field("cause", TEXT, lambda i: sites[i].cause),
        Field("count", INT, lambda i: sites[i].count),
        Field("blocked_us", US, lambda i: sites[i].total),
        Field("max_us", US, lambda i: sites[i].max),
        Field("gpu_idle_us", US, lambda i: sites[i].idle),
        Field("call_site", TEXT, lambda i: " › ".join(sites[i].site)),
    ]
    return Table("sync-sites", fields, len(sites), np.arange(len(sites)))


@dataclass(frozen=True)
class IslandRows:
    """Eager islands (operators outside compiled code, by name), typed as their table reads
    them: per row its name, calls, CPU and GPU ns and its longest call's ns (None: not known);
    `on_gpu`: the compile lens measured kernels (the CSV then has the GPU time); `key` orders
    the rows (GPU time on a GPU, else CPU time)."""

    n: int
    name: Callable[[int], str]
    count: Callable[[int], int]
    cpu: Callable[[int], Any]
    gpu: Callable[[int], Any]
    longest: Callable[[int], Any]
    on_gpu: bool
    key: np.ndarray
    views: dict[str, Callable[[], View]] = field(default_factory=dict)  # the viewer's, by header

    @classmethod
    def of(cls, trace: Any, result: Any) -> IslandRows:
        """The eager islands of a CompileResult (analysis/compile.py)."""
        islands = result.eager_islands
        n = len(islands)
        key = np.array([i.gpu_ns if result.on_gpu else i.cpu_ns for i in islands], np.int64)

        def ints(values: Iterable[int]) -> np.ndarray:
            return np.array(list(values), dtype=np.int64)

        views: dict[str, Callable[[], View]] = {
            "name": lambda: View(
                "eager operator", np.arange(n, dtype=np.int64), 0, cell=lambda i: islands[i].name
            ),
            "calls": lambda: View("calls", ints(i.count for i in islands), 8),
            "cpu_us": lambda: View("cpu", ints(i.cpu_ns for i in islands)),
            "longest_us": lambda: View(
                "longest",
                ints(int(trace.dur[i.rows[0]]) if i.rows else 0 for i in islands),
                optional=True,
            ),
        }
        if result.on_gpu:
            views["gpu_us"] = lambda: View("gpu", ints(i.gpu_ns for i in islands))
        return cls(
            n,
            lambda i: islands[i].name,
            lambda i: islands[i].count,
            lambda i: islands[i].cpu_ns,
            lambda i: islands[i].gpu_ns,
            lambda i: trace.dur[islands[i].rows[0]] if islands[i].rows else 0,
            bool(result.on_gpu),
            key,
            views,
        )

    @classmethod
    def of_document(cls, islands: Sequence[dict[str, Any]]) -> IslandRows:
        """The rows of a summary document's `compile.eager_islands`."""
        return cls(
            len(islands),
            lambda i: islands[i]["name"],
            lambda i: islands[i]["count"],
            lambda i: us_ns(islands[i]["cpu_us"]),
            lambda i: us_ns(islands[i]["gpu_us"]),
            lambda i: None,
            True,
            np.arange(len(islands))[::-1],
        )


def islands_table(rows: IslandRows) -> Table:
    """The compile view's eager islands (`c`, and the summary's): operators outside compiled
    code, by name."""
    fields = [
        Field("name", NAME, rows.name, "operator"),
        Field("calls", COUNT, rows.count, "count"),
        Field("cpu_us", US, rows.cpu, "CPU time"),
        Field("gpu_us", US, rows.gpu, "GPU time", csv=rows.on_gpu),
        Field("longest_us", US, rows.longest),
    ]
    fields = [replace(f, view=rows.views.get(f.header)) for f in fields]
    return Table(
        "eager-islands",
        fields,
        rows.n,
        largest_first(rows.key),
        "Eager islands: operators outside compiled code",
    )


@dataclass(frozen=True)
class CompileStepRows:
    """The compile lens per ProfilerStep, typed as its table reads it (analysis/compile.py's
    StepCompile has these attributes): name, start, compiled ns and share of the step's
    measured time, eager islands' ns, regions, guard calls and ns, compiling ns, launch calls,
    kernels and launch CPU ns."""

    n: int
    name: Callable[[int], str]
    start: Callable[[int], Any]
    compiled: Callable[[int], Any]
    share: Callable[[int], float | None]
    eager: Callable[[int], Any]
    regions: Callable[[int], int]
    guard_calls: Callable[[int], int]
    guard: Callable[[int], Any]
    compiling: Callable[[int], Any]
    launch_calls: Callable[[int], int]
    kernels: Callable[[int], int]
    launch_cpu: Callable[[int], Any]
    key: np.ndarray  # the order: by start
    views: dict[str, Callable[[], View]] = field(default_factory=dict)  # the viewer's, by header

    @classmethod
    def of(cls, trace: Any, result: Any) -> CompileStepRows:
        """The steps of a CompileResult (analysis/compile.py)."""
        steps = result.steps

        def ints(attr: str) -> np.ndarray:
            return np.array([getattr(s, attr) for s in steps], dtype=np.int64)

        def counted(title: str, attr: str, width: int) -> Callable[[], View]:
            def view() -> View:
                values = ints(attr)
                return View(title, values, width, cell=lambda i: f"{values[i]:,}")

            return view

        def step_view() -> View:
            names = np.array([trace.name[s.row] for s in steps], dtype=np.int64)
            start = ints("start")
            return View(
                "step",
                start,
                0,
                cell=lambda i: trace.strings[names[i]],
                largest_first=False,
            )

        def compiled_view() -> View:
            share = np.array([s.share if s.share is not None else -1.0 for s in steps])
            return View(
                "compiled",
                share,
                9,
                cell=lambda i: f"{100 * share[i]:.0f}%" if share[i] >= 0 else "–",
            )

        views: dict[str, Callable[[], View]] = {
            "step": step_view,
            "compiled_share": compiled_view,
            "eager_us": lambda: View("eager", ints("eager_ns")),
            "regions": counted("regions", "regions", 8),
            "guard_calls": counted("guards", "guard_calls", 7),
            "guard_us": lambda: View("guard", ints("guard_ns"), optional=True),
            "compiling_us": lambda: View("compiling", ints("compiling_ns"), optional=True),
            "launch_calls": counted("launches", "launch_calls", 9),
            "kernels": counted("kernels", "kernels", 8),
            "launch_cpu_us": lambda: View("launch cpu", ints("launch_cpu_ns"), optional=True),
        }
        return cls(
            len(steps),
            lambda i: trace.name_of(steps[i].row),
            lambda i: steps[i].start,
            lambda i: steps[i].compiled_ns,
            lambda i: steps[i].share,
            lambda i: steps[i].eager_ns,
            lambda i: steps[i].regions,
            lambda i: steps[i].guard_calls,
            lambda i: steps[i].guard_ns,
            lambda i: steps[i].compiling_ns,
            lambda i: steps[i].launch_calls,
            lambda i: steps[i].kernels,
            lambda i: steps[i].launch_cpu_ns,
            np.array([s.start for s in steps], np.int64),
            views,
        )

    @classmethod
    def of_document(cls, steps: Sequence[dict[str, Any]]) -> CompileStepRows:
        """The rows of a summary document's `compile.steps` (in step order)."""

        def share(i: int) -> float | None:
            total = steps[i]["total_us"]
            return None if total <= 0 else steps[i]["compiled_us"] / total

        return cls(
            len(steps),
            lambda i: steps[i]["name"],
            lambda i: None,
            lambda i: us_ns(steps[i]["compiled_us"]),
            share,
            lambda i: us_ns(steps[i]["eager_us"]),
            lambda i: steps[i]["regions"],
            lambda i: steps[i]["guard_calls"],
            lambda i: us_ns(steps[i]["guard_us"]),
            lambda i: us_ns(steps[i]["compiling_us"]),
            lambda i: steps[i]["launch_calls"],
            lambda i: steps[i]["kernels"],
            lambda i: us_ns(steps[i]["launch_cpu_us"]),
            np.arange(len(steps)),
        )


def compile_steps_table(rows: CompileStepRows) -> Table:
    """The compile view's steps (`c`, then `S`, and the summary's): per ProfilerStep the
    compiled share and the compile lens's other numbers."""
    fields = [
        Field("step", NAME, rows.name, "step"),
        Field("start_us", US, rows.start),
        Field(
            "compiled_share",
            FLOAT,
            rows.share,
            "compiled",
            lambda i: f"{duration_text(rows.compiled(i))} {share_text(rows.share(i))}",
        ),
        Field("eager_us", US, rows.eager, "eager islands"),
        Field("regions", INT, rows.regions),
        Field("guard_calls", INT, rows.guard_calls),
        Field("guard_us", US, rows.guard, "guards"),
        Field("compiling_us", US, rows.compiling, "compiling"),
        Field("launch_calls", COUNT, rows.launch_calls, "launches"),
        Field("kernels", COUNT, rows.kernels, "kernels"),
        Field("launch_cpu_us", US, rows.launch_cpu),
    ]
    fields = [replace(f, view=rows.views.get(f.header)) for f in fields]
    return Table(
        "compile-steps", fields, rows.n, smallest_first(rows.key), "Compiled code per step"
    )


@dataclass(frozen=True)
class DeviceRows:
    """The GPUs' utilisation, typed as its table reads it: per device with GPU activity its id,
    kernel, memcpy and memset counts, its window's start and end ns (None: no activity), busy
    and idle ns, idle ns by cause (analysis/idle.py CAUSES); for the report the window's length
    and the busy and idle shares of it (None: no window)."""

    n: int
    device: Callable[[int], int]
    kernels: Callable[[int], int]
    memcpys: Callable[[int], int]
    memsets: Callable[[int], int]
    window_start: Callable[[int], Any]
    window_end: Callable[[int], Any]
    busy: Callable[[int], Any]
    idle: Callable[[int], Any]
    idle_by_cause: Callable[[int, int], Any]
    window: Callable[[int], Any] = lambda i: None
    busy_share: Callable[[int], float | None] = lambda i: None
    idle_share: Callable[[int], float | None] = lambda i: None

    @classmethod
    def of(cls, idle: Any) -> DeviceRows:
        """The devices of an IdleResult (analysis/idle.py)."""
        devices = list(idle.devices)

        def window(i: int, end: int) -> int | None:
            span = devices[i].window
            return None if span is None else span[end]

        return cls(
            len(devices),
            lambda i: devices[i].device,
            lambda i: devices[i].kernels,
            lambda i: devices[i].memcpys,
            lambda i: devices[i].memsets,
            lambda i: window(i, 0),
            lambda i: window(i, 1),
            lambda i: devices[i].busy_ns,
            lambda i: devices[i].idle_ns,
            lambda i, k: devices[i].idle_by_cause[k],
        )

    @classmethod
    def of_document(cls, document: dict[str, Any]) -> DeviceRows:
        """The rows of a summary document's `gpu`."""
        from kinetoscope.analysis.idle import CAUSES

        gpus = document["gpu"]

        def window(i: int) -> float | None:  # µs
            start, end = gpus[i]["window_start_us"], gpus[i]["window_end_us"]
            return None if start is None else end - start

        def share(key: str) -> Callable[[int], float | None]:
            def of(i: int) -> float | None:
                whole = window(i) or 0
                return None if whole <= 0 else gpus[i][key] / whole

            return of

        return cls(
            len(gpus),
            lambda i: gpus[i]["device"],
            lambda i: gpus[i]["kernels"],
            lambda i: gpus[i]["memcpys"],
            lambda i: gpus[i]["memsets"],
            lambda i: us_ns(gpus[i]["window_start_us"]),
            lambda i: us_ns(gpus[i]["window_end_us"]),
            lambda i: us_ns(gpus[i]["busy_us"]),
            lambda i: us_ns(gpus[i]["idle_us"]),
            lambda i, k: us_ns(gpus[i]["idle_by_cause"][CAUSES[k]]),
            lambda i: us_ns(window(i)),
            share("busy_us"),
            share("idle_us"),
        )


def share_text(share: float | None) -> str:
    """A share of a report cell: a whole percentage, `–` where there is no whole."""
    return "–" if share is None else fmt_percent(share)


def devices_table(rows: DeviceRows) -> Table:
    """The overview's devices (`v`, and the summary's GPU table): per device with GPU activity
    its counts, its window (first start to last end), busy and idle time, idle by cause."""
    from kinetoscope.analysis.idle import CAUSES

    def by_cause(k: int) -> Callable[[int], Any]:
        return lambda i: rows.idle_by_cause(i, k)

    def beside(time: Callable[[int], Any], share: Callable[[int], Any]) -> Callable[[int], str]:
        return lambda i: f"{duration_text(time(i))} {share_text(share(i))}"

    fields = [
        Field("device", ID, rows.device, "device", lambda i: f"GPU {rows.device(i)}"),
        Field("kernels", COUNT, rows.kernels, "kernels"),
        Field("memcpys", COUNT, rows.memcpys, "memcpy"),
        Field("memsets", COUNT, rows.memsets, "memset"),
        Field("window_start_us", US, rows.window_start),
        Field("window_end_us", US, rows.window_end),
        Field("window", US, rows.window, "window", csv=False),
        Field("busy_us", US, rows.busy, "busy", beside(rows.busy, rows.busy_share)),
        Field("idle_us", US, rows.idle, "idle", beside(rows.idle, rows.idle_share)),
        *(Field(f"{cause}_us", US, by_cause(k), cause) for k, cause in enumerate(CAUSES)),
    ]
    return Table(
        "devices", fields, rows.n, np.arange(rows.n), "GPU utilisation and idle time by cause"
    )


@dataclass(frozen=True)
class IdleByCpuRows:
    """GPU idle by the CPU operator at each gap's midpoint, typed as its table reads it: per
    row the operator's name and category (None: the gaps with no CPU slice there), its gaps,
    their idle ns and the longest one's (None: not known)."""

    n: int
    name: Callable[[int], str | None]
    cat: Callable[[int], str | None]
    gaps: Callable[[int], int]
    idle: Callable[[int], Any]
    longest: Callable[[int], Any]

    @classmethod
    def of(cls, trace: Any, table: Any) -> IdleByCpuRows:
        """Every row of an IdleByCpu table (analysis/idle.py), most idle first, and a last
        row for the gaps with no CPU slice there."""
        named = len(table.idle)

        def named_row(value: Callable[[int], Any]) -> Callable[[int], Any]:
            return lambda i: value(i) if i < named else None

        return cls(
            named + (1 if table.unattributed_gaps else 0),
            named_row(lambda r: trace.strings[int(table.name[r])]),
            named_row(lambda r: trace.strings[int(table.cat[r])]),
            lambda i: table.gaps[i] if i < named else table.unattributed_gaps,
            lambda i: table.idle[i] if i < named else table.unattributed_idle,
            named_row(lambda r: table.longest[r]),
        )

    @classmethod
    def of_document(cls, entries: Sequence[dict[str, Any]]) -> IdleByCpuRows:
        """The rows of a summary document's `idle_by_cpu`."""
        return cls(
            len(entries),
            lambda i: entries[i]["name"],
            lambda i: entries[i]["cat"],
            lambda i: entries[i]["gaps"],
            lambda i: us_ns(entries[i]["idle_us"]),
            lambda i: us_ns(entries[i]["longest_us"]),
        )


def us_ns(us: float | None) -> float | None:
    """A document's µs as the ns a duration field holds (None stays None)."""
    return None if us is None else us * 1000


def idle_by_cpu_table(rows: IdleByCpuRows) -> Table:
    """GPU idle totalled by the CPU operator running at each gap's midpoint (all gaps; the gap
    list's first line), most idle first; a last row, without a name, for the gaps with no CPU
    slice there."""
    fields = [
        Field("name", NAME, rows.name, "CPU operator", missing="(no CPU slice there)"),
        Field("cat", TEXT, rows.cat, "category", missing=""),
        Field("gaps", COUNT, rows.gaps, "gaps"),
        Field("idle_us", US, rows.idle, "GPU idle"),
        Field("longest_us", US, rows.longest, "longest gap"),
    ]
    return Table(
        "idle-by-cpu",
        fields,
        rows.n,
        np.arange(rows.n),
        "GPU idle by what the CPU was running during the gaps (innermost slice at each gap's "
        "midpoint, all gaps)",
    )


@dataclass(frozen=True)
class MemoryPeakRows:
    """Memory peaks per memory device ([memory] events), typed as their table reads them: its
    device type and id, peak allocated and reserved bytes (None: not recorded); for the report
    the peak's share of the device's memory (None: not known)."""

    n: int
    device_type: Callable[[int], int]
    device_id: Callable[[int], int]
    peak_allocated: Callable[[int], int | None]
    peak_reserved: Callable[[int], int | None]
    of_device: Callable[[int], float | None] = lambda i: None

    @classmethod
    def of(cls, groups: Sequence[Any]) -> MemoryPeakRows:
        """The session's memory groups (analysis/memory.py)."""
        return cls(
            len(groups),
            lambda i: groups[i].device_type,
            lambda i: groups[i].device_id,
            lambda i: groups[i].peak_allocated,
            lambda i: groups[i].peak_reserved,
        )

    @classmethod
    def of_document(cls, document: dict[str, Any]) -> MemoryPeakRows:
        """The rows of a summary document's `memory`, with the `devices`' memory sizes."""
        from kinetoscope.analysis.memory import GPU_DEVICE_TYPES

        groups = document["memory"]
        capacity = {d["id"]: d["total_memory_bytes"] for d in document["devices"]}

        def of_device(i: int) -> float | None:
            group = groups[i]
            # A GPU's memory, whether the build writes CUDA (1) or HIP (6) as its device type
            gpu = group["device_type"] in GPU_DEVICE_TYPES
            total = capacity.get(group["device_id"]) if gpu else None
            peak = group["peak_reserved_bytes"] or group["peak_allocated_bytes"]
            if not isinstance(total, int) or peak is None or total <= 0:
                return None
            return peak / total

        return cls(
            len(groups),
            lambda i: groups[i]["device_type"],
            lambda i: groups[i]["device_id"],
            lambda i: groups[i]["peak_allocated_bytes"],
            lambda i: groups[i]["peak_reserved_bytes"],
            of_device,
        )


def memory_peaks_table(rows: MemoryPeakRows) -> Table:
    """The summary's memory peaks: per memory device the peak allocated and reserved bytes.
    The CSV keeps Kineto's device type and id as numbers (like the JSON); the report names the
    device as the memory view does (`CPU`, `CUDA 0`: analysis/memory_ops.device_label)."""
    from kinetoscope.analysis.memory_ops import device_label

    fields = [
        Field(
            "device_type",
            ID,
            rows.device_type,
            "device",
            text=lambda i: device_label(rows.device_type(i), rows.device_id(i)),
        ),
        Field("device_id", ID, rows.device_id),
        Field("peak_allocated_bytes", BYTES, rows.peak_allocated, "peak allocated"),
        Field("peak_reserved_bytes", BYTES, rows.peak_reserved, "peak reserved"),
        Field("of_device", SHARE, rows.of_device, "of device memory", csv=False),
    ]
    return Table(
        "memory-peaks", fields, rows.n, np.arange(rows.n), "Memory peaks ([memory] events)"
    )


def single_trace_tables(session: Any) -> list[Table]:
    """Every table `summary --csv` writes for one trace, computed by the session: operators,
    kernels, GPU idle gaps (all, longest first), findings, steps; when the trace has them, the
    devices' utilisation, the idle by CPU operator, the memory peaks, the memory view's two
    tables (its main device), the sync view's two, the compile view's two."""
    from kinetoscope.analysis.rules import cause_members

    trace = session.trace
    operators = session.operators
    kernels = session.kernels
    gaps = session.idle.gaps
    made = [
        operators_table(
            OperatorRows.of(trace, operators, memory=operator_memory(session, session.cpu_groups))
        ),
        kernels_table(
            KernelRows.of(
                trace, kernels, kernel_launcher_groups(session, kernels), session.cpu_groups.name
            )
        ),
        gaps_table(GapRows.of(trace, gaps, gaps.longest())),
        findings_table(cause_members(session.causes)),  # cause by cause, as `t` shows them
        steps_table(trace, session.steps, bool(session.idle.devices)),
    ]
    if session.idle.devices:
        made.append(devices_table(DeviceRows.of(session.idle)))
    if len(gaps):
        made.append(idle_by_cpu_table(IdleByCpuRows.of(trace, session.idle_by_cpu)))
    if session.memory:
        made.append(memory_peaks_table(MemoryPeakRows.of(session.memory)))
    memory = session.memory_ops
    device = memory.primary
    if device is not None and len(device):  # the main device's, as the memory view opens
        made.append(memory_operators_table(trace, memory.groups, device))
        if device.allocations.addresses_known:
            made.append(never_freed_table(trace, device))
    calls = session.sync
    if len(calls):
        from kinetoscope.analysis.sync import group_sites

        made += [sync_calls_table(trace, calls), sync_sites_table(group_sites(trace, calls))]
    compiled = session.compiled
    if compiled.eager_islands:
        made.append(islands_table(IslandRows.of(trace, compiled)))
    if compiled.steps:
        made.append(compile_steps_table(CompileStepRows.of(trace, compiled)))
    return made


# -- a diff of two traces --------------------------------------------------------------------


def diff_table(groups: Sequence[Any], what: str) -> Table:
    """The diff viewer's table of `what` ("kernels" or "operators"): a row per GroupDiff (a
    normalised (category, name)) in the diff's order, largest |Δ| first."""
    statuses = {"added": "added", "removed": "removed", "common": "common"}
    delta = np.array([g.new_total - g.base_total for g in groups], np.int64)
    fields = [
        Field("name", TEXT, lambda r: groups[r].name),
        Field("status", TEXT, lambda r: statuses.get(groups[r].status, "")),
        Field("base_count", INT, lambda r: groups[r].base_count),
        Field("base_total_us", US, lambda r: groups[r].base_total),
        Field("new_count", INT, lambda r: groups[r].new_count),
        Field("new_total_us", US, lambda r: groups[r].new_total),
        Field("delta_us", US, lambda r: delta[r]),
        Field("delta_pct", FLOAT, lambda r: groups[r].delta_pct),
        Field("more_calls_us", US, lambda r: groups[r].more_calls),
        Field("slower_calls_us", US, lambda r: groups[r].slower_calls),
        Field("base_mean_us", US, lambda r: mean_ns(groups[r].base_total, groups[r].base_count)),
        Field("new_mean_us", US, lambda r: mean_ns(groups[r].new_total, groups[r].new_count)),
        Field("cat", TEXT, lambda r: groups[r].cat),
    ]
    order = largest_first(np.abs(delta).astype(np.float64))
    return Table(f"diff-{what}", fields, len(groups), order)


def diff_tables(diff: Any) -> list[Table]:
    """`diff BASE NEW --csv DIR`: the diff viewer's two tables."""
    return [diff_table(diff.kernels, "kernels"), diff_table(diff.operators, "operators")]


def diff_source(base: str, new: str) -> str:
    """What names a diff's files: `<base>-vs-<new>`."""
    return f"{trace_stem(base)}-vs-{trace_stem(new)}"


# -- summary --csv ------------------------------------------------------------------------------


def emit_written(
    tables_made: Sequence[Table], directory: str, source: str, raw: bool = False
) -> int:
    """Write `tables_made` into `directory` (write_tables; `raw`: cells as recorded) and print
    one line per file; KinetoscopeError (its one line) when the files cannot be written (one
    exists, no space...)."""
    from kinetoscope.common.errors import KinetoscopeError
    from kinetoscope.present.report_summary import emit
    from kinetoscope.present.safe_text import clean

    try:
        written = write_tables(tables_made, directory, source, raw)
    except FileExistsError as exc:
        where = clean(str(exc.filename))
        if not os.path.isdir(directory):  # DIR itself is a file
            raise KinetoscopeError(
                f"{where}: a file, not a folder: give a folder to --csv"
            ) from None
        raise KinetoscopeError(
            f"{where} already exists: remove it or give another folder to --csv"
        ) from None
    except OSError as exc:
        where = clean(str(exc.filename or directory))
        raise KinetoscopeError(f"cannot write {where}: {exc.strerror or exc}") from None
    emit("".join(f"{clean(path)}\t{count} rows\n" for path, count in written))
    return 0


# -- a job (several ranks) --------------------------------------------------------------------


def _job_rows(job: Any) -> list[tuple[int, Any]]:
    """(rank, entry or None when missing) of every rank of the job, in rank order: the rows of
    the ranks overview's per-rank table."""
    rows = [(e.rank, e) for e in job.ranks] + [(r, None) for r in job.missing]
    return sorted(rows, key=lambda r: r[0])


def rank_status(entry: Any) -> str:
    if entry is None:
        return "missing"
    if not entry.loaded:
        return "not loaded"
    ended = getattr(entry, "exit", None)  # capture's exit record
    if ended is not None and not ended.clean:
        if ended.failed and getattr(entry, "knock_on_of", None) is not None:
            return "knock-on"  # it failed because a peer failed first
        return "failed" if ended.failed else "stopped"
    return "ok" if entry.digest.complete else "incomplete"


def _exact_mean(values: Any) -> Fraction | None:
    if values is None or not len(values):
        return None
    return Fraction(int(np.sum(np.asarray(values, np.int64))), len(values))


def ranks_table(job: Any) -> Table:
    """The ranks overview's per-rank table: per rank its means per step (step time, compute,
    exposed communication, idle), the total time it waited in collectives, its clock offset."""
    rows = _job_rows(job)
    straggler = job.straggler["rank"] if job.straggler else None

    def loaded(i: int) -> Any:
        entry = rows[i][1]
        return entry if entry is not None and entry.loaded else None

    def mean(i: int, key: str) -> Fraction | None:
        entry = loaded(i)
        if entry is None:
            return None
        digest = entry.digest
        if key in ("compute", "comm", "idle"):
            # The GPU columns, the means of rank-steps' (empty for a CPU-only rank: its CPU time
            # is rank-steps' cpu_busy_us, its collectives' collective_us).
            return _exact_mean(digest.steps.get(key)) if digest.has_gpu else None
        return _exact_mean(digest.steps.get(key))

    def entry_value(i: int, get: Callable[[Any], Any]) -> Any:
        entry = loaded(i)
        return None if entry is None else get(entry)

    fields = [
        Field("rank", INT, lambda i: rows[i][0]),
        Field("status", TEXT, lambda i: rank_status(rows[i][1])),
        Field("straggler", INT, lambda i: int(rows[i][0] == straggler)),
        Field("steps", INT, lambda i: entry_value(i, lambda e: len(e.digest.step_names))),
        Field("mean_step_us", US, lambda i: mean(i, "dur")),
        Field("mean_compute_us", US, lambda i: mean(i, "compute")),
        Field("mean_exposed_comm_us", US, lambda i: mean(i, "comm")),
        Field("mean_idle_us", US, lambda i: mean(i, "idle")),
        Field("waited_us", US, lambda i: entry_value(i, lambda e: e.wait_ns)),
        Field("clock_offset_us", US, lambda i: entry_value(i, lambda e: e.offset_ns)),
        Field("clock_spread_us", US, lambda i: entry_value(i, lambda e: e.spread_ns)),
        Field("rank_from", TEXT, lambda i: rows[i][1].rank_rule if rows[i][1] else None),
        Field("file", TEXT, lambda i: rows[i][1].path if rows[i][1] else None),
    ]
    ranks = np.array([r for r, _ in rows], np.int64)
    return Table("ranks", fields, len(rows), smallest_first(ranks))


def rank_steps_table(job: Any) -> Table:
    """Every step of every loaded rank (rank order, then the rank's step order): its start (the
    rank's own clock), duration, compute, exposed communication, idle and collective wait."""
    cells: list[tuple[Any, int]] = [
        (entry, k)
        for _, entry in _job_rows(job)
        if entry is not None and entry.loaded
        for k in range(len(entry.digest.step_names))
    ]

    def step(key: str, gpu_only: bool = False) -> Callable[[int], Any]:
        def value(i: int) -> Any:
            entry, k = cells[i]
            digest = entry.digest
            column = digest.steps.get(key)
            if column is None or len(column) <= k or (gpu_only and not digest.has_gpu):
                return None
            return column[k]

        return value

    def wait(i: int) -> int:
        entry, k = cells[i]
        return int(entry.step_wait_ns[k]) if len(entry.step_wait_ns) > k else 0

    fields = [
        Field("rank", INT, lambda i: cells[i][0].rank),
        Field("step", TEXT, lambda i: cells[i][0].digest.step_names[cells[i][1]]),
        Field("start_us", US, lambda i: cells[i][0].digest.step_start[cells[i][1]]),
        Field("dur_us", US, step("dur")),
        Field("compute_us", US, step("compute", gpu_only=True)),
        Field("exposed_comm_us", US, step("comm", gpu_only=True)),
        Field("idle_us", US, step("idle", gpu_only=True)),
        Field("dataloader_us", US, step("dataloader")),
        Field("cpu_busy_us", US, step("cpu_busy")),
        Field("collective_us", US, step("collective")),
        Field("waited_us", US, wait),
    ]
    return Table("rank-steps", fields, len(cells), np.arange(len(cells)))


def collectives_table(job: Any) -> Table:
    """The matched collectives (`c` on the ranks overview), largest start skew first."""
    m = job.matched
    ranks = m.ranks

    def rate(values: np.ndarray) -> Callable[[int], float | None]:
        return lambda i: float(values[i]) / 1e9 if math.isfinite(float(values[i])) else None

    fields = [
        Field("number", INT, lambda i: i + 1),
        Field("kind", TEXT, lambda i: m.kind[i]),
        Field("index", INT, lambda i: m.index[i]),
        Field("group", TEXT, lambda i: m.group[i]),
        Field("step", TEXT, lambda i: m.step[i]),
        Field("name", TEXT, lambda i: m.name[i]),
        Field("ranks", INT, lambda i: int(m.present[i].sum())),
        Field("latency_us", US, lambda i: job.latency[i]),
        Field("start_skew_us", US, lambda i: job.start_skew[i]),
        Field("end_skew_us", US, lambda i: job.end_skew[i]),
        Field("last_rank", INT, lambda i: ranks[int(job.last[i])]),
        Field("bytes", INT, lambda i: m.bytes[i] if m.bytes[i] >= 0 else None),
        Field("algbw_GBps", FLOAT, rate(job.algbw)),
        Field("busbw_GBps", FLOAT, rate(job.busbw)),
    ]
    return Table("collectives", fields, len(m), largest_first(np.asarray(job.start_skew)))


def job_tables(job: Any) -> list[Table]:
    """Every table `summary DIR --csv OUT` writes for a job."""
    return [ranks_table(job), rank_steps_table(job), collectives_table(job)]
