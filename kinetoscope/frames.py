"""`Table`: the Python API's result, columns of equal length that become a pandas DataFrame or an
Arrow table on request (docs/api.md). Integer columns stay the numpy arrays the analysis made
(exact int64 ns; Arrow gets them without a copy), names stay ids into the trace's string table
(a categorical / dictionary column). A column of a table with one row per event is `Gathered`:
the model's column and the rows, gathered when it is read (a DataFrame gets it gathered, not a
copy of a copy the table keeps). pandas and pyarrow are optional extras, imported only by
`to_pandas` / `to_arrow`."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PREVIEW_ROWS = 5  # rows shown by repr()
HTML_ROWS = 10  # rows shown in a notebook
CELL_WIDTH = 40  # characters of one shown cell


class MissingExtra(ImportError):
    """An optional package is not installed; the message says which extra to install."""


def require(module: str, extra: str, what: str) -> Any:
    """Import `module` or raise MissingExtra naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(
            f"{what} needs {module}, which is not installed: pip install 'kinetoscope[{extra}]'"
        ) from None


@dataclass(frozen=True)
class Codes:
    """A string column as ids into a table of strings (the trace's); -1 is a null."""

    ids: np.ndarray
    strings: Sequence[str]
    unique: bool = True  # every string of `strings` differs (a categorical needs that)

    def __len__(self) -> int:
        return len(self.ids)

    def value(self, i: int) -> str | None:
        k = int(self.ids[i])
        return self.strings[k] if k >= 0 else None

    def decoded(self) -> list[str | None]:
        strings = self.strings
        return [strings[k] if k >= 0 else None for k in self.ids.tolist()]


@dataclass(frozen=True)
class Masked:
    """An integer column with nulls: `values` where `null` is False."""

    values: np.ndarray
    null: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def value(self, i: int) -> int | None:
        return None if self.null[i] else int(self.values[i])


@dataclass(frozen=True, eq=False)
class Gathered:
    """A column made when it is read: `source[rows]` (`source` an array, or a callable giving
    it, when it comes from a later stage of the analysis), cast to `dtype`, as a `Codes` over
    `strings` or with `null_value` marked as null (`masked`). The table keeps only the rows,
    which its columns share. `make()` always returns new arrays, no one else's."""

    source: np.ndarray | Callable[[], np.ndarray]
    rows: np.ndarray
    dtype: Any = None
    null_value: int | None = None
    strings: Sequence[str] | None = None
    unique: bool = True

    def __len__(self) -> int:
        return len(self.rows)

    def _gather(self, rows: np.ndarray) -> Codes | Masked | np.ndarray:
        source = self.source() if callable(self.source) else self.source
        values = np.asarray(source[rows])
        if self.dtype is not None:
            values = values.astype(self.dtype, copy=False)
        if self.strings is not None:
            return Codes(values, self.strings, self.unique)
        if self.null_value is not None:
            return masked(values, self.null_value)
        return values

    def make(self) -> Codes | Masked | np.ndarray:
        return self._gather(self.rows)

    def value(self, i: int) -> Any:
        one = self._gather(self.rows[[i]])
        if isinstance(one, Codes | Masked):
            return one.value(0)
        return one[0].item()


Column = np.ndarray | Codes | Masked | Gathered | list


def masked(values: np.ndarray, null_value: int) -> Masked | np.ndarray:
    """`values` with `null_value` marked as null (the plain array when there is none)."""
    null = values == null_value
    return Masked(values, null) if null.any() else values


def arrow_strings(strings: Sequence[str]) -> Any:
    """An Arrow string array of `strings`; text Arrow cannot hold (a lone surrogate from a JSON
    escape) has the character replaced."""
    pa = require("pyarrow", "arrow", "an Arrow table")
    try:
        return pa.array(strings, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        return pa.array(
            [s.encode("utf-8", "replace").decode("utf-8") for s in strings], pa.string()
        )


class Table:
    """A result of the API: named columns of equal length (docs/api.md).

    `to_pandas()` and `to_arrow()` convert it (extras `pandas`, `arrow`); `column(name)` gives
    one column as numpy (numbers) or a list (text); `rows()` the rows as dicts; `len()` the
    number of rows. Times and durations are int64 ns unless a column's name says otherwise."""

    def __init__(self, name: str, columns: dict[str, Column]) -> None:
        lengths = {len(c) for c in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"{name}: columns of different lengths {sorted(lengths)}")
        self.name = name
        self._columns = columns
        self._rows = lengths.pop() if lengths else 0
        self._arrow_dictionaries: dict[int, Any] = {}

    @classmethod
    def from_records(cls, name: str, records: list[dict[str, Any]], keys: Sequence[str]) -> Table:
        """A table of JSON-like records (one dict a row) with the columns `keys`."""
        return cls(name, {k: [r.get(k) for r in records] for k in keys})

    # -- reading ----------------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    def __len__(self) -> int:
        return self._rows

    def _resolved(self, name: str, keep: bool = True) -> np.ndarray | Codes | Masked | list:
        """The column `name` made (a `Gathered` one gathered now, and kept when `keep`)."""
        col = self._columns[name]
        if isinstance(col, Gathered):
            made = col.make()
            if keep:
                self._columns[name] = made
            return made
        return col

    def column(self, name: str) -> np.ndarray | list:
        """One column: a numpy array for numbers (a float array with NaN for a nullable integer
        column that holds nulls), a list for text and other values."""
        col = self._resolved(name)
        if isinstance(col, Codes):
            return col.decoded()
        if isinstance(col, Masked):
            return [None if n else v for v, n in zip(col.values.tolist(), col.null.tolist())]
        return col

    def value(self, row: int, name: str) -> Any:
        col = self._columns[name]
        if isinstance(col, Codes | Masked | Gathered):
            return col.value(row)
        value = col[row]
        return value.item() if isinstance(value, np.generic) else value

    def rows(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts (Python values), in order."""
        names = self.columns
        for i in range(self._rows):
            yield {n: self.value(i, n) for n in names}

    # -- conversions ------------------------------------------------------------------------

    def to_arrow(self) -> Any:
        """A `pyarrow.Table`; numeric columns share the numpy arrays' memory (no copy), text
        columns are dictionary-encoded over the trace's string table. Needs the `arrow` extra."""
        pa = require("pyarrow", "arrow", "Table.to_arrow()")
        arrays = []
        for name in self.columns:
            col = self._resolved(name)  # kept: the Arrow table shares it with column()
            if isinstance(col, Codes):
                dictionary = self._arrow_dictionaries.get(id(col.strings))
                if dictionary is None:
                    dictionary = arrow_strings(col.strings)
                    self._arrow_dictionaries[id(col.strings)] = dictionary
                ids = col.ids.astype(np.int32, copy=False)
                indices = pa.array(ids, mask=ids < 0) if (ids < 0).any() else pa.array(ids)
                arrays.append(pa.DictionaryArray.from_arrays(indices, dictionary))
            elif isinstance(col, Masked):
                arrays.append(pa.array(col.values, mask=col.null))
            elif isinstance(col, np.ndarray):
                arrays.append(pa.array(col))
            else:
                arrays.append(_arrow_list(pa, col))
        return pa.Table.from_arrays(arrays, names=self.columns)

    def to_pandas(self) -> Any:
        """A `pandas.DataFrame`: numeric columns as numpy dtypes (nullable `Int64` where a
        column has nulls), text as categoricals over the trace's strings. Needs the `pandas`
        extra."""
        pd = require("pandas", "pandas", "Table.to_pandas()")
        data: dict[str, Any] = {}
        for name in self.columns:
            # The DataFrame owns its arrays (pandas writes into them): a column gathered now is
            # handed over as it is, one the table holds is copied.
            fresh = isinstance(self._columns[name], Gathered)
            col = self._resolved(name, keep=False)
            if isinstance(col, Codes):
                if col.unique:
                    data[name] = _categorical(pd, col)
                else:
                    data[name] = _text_series(pd, col.decoded())
            elif isinstance(col, Masked):
                values = col.values if fresh else col.values.copy()
                data[name] = pd.arrays.IntegerArray(values, col.null if fresh else col.null.copy())
            elif isinstance(col, np.ndarray):
                data[name] = col if fresh else col.copy()
            else:
                data[name] = pd.Series(col, dtype=object) if _nested(col) else _text_series(pd, col)
            del col
        if not data:
            return pd.DataFrame()
        return pd.DataFrame(data, columns=self.columns, copy=False)

    # -- showing ----------------------------------------------------------------------------

    def _cell(self, row: int, name: str) -> str:
        from kinetoscope.present.safe_text import clean  # names from a trace are hostile

        value = self.value(row, name)
        text = "" if value is None else clean(str(value))
        return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 1] + "…"

    def __repr__(self) -> str:
        head = f"<kinetoscope Table {self.name!r}: {self._rows:,} rows × {len(self._columns)} "
        head += f"columns: {', '.join(self.columns)}>"
        shown = min(self._rows, PREVIEW_ROWS)
        lines = [head]
        for i in range(shown):
            lines.append("  " + " | ".join(self._cell(i, n) for n in self.columns))
        if self._rows > shown:
            lines.append(f"  … {self._rows - shown:,} more rows")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        shown = min(self._rows, HTML_ROWS)
        esc = html.escape
        out = [
            f"<p><b>{esc(self.name)}</b>: {self._rows:,} rows × {len(self._columns)} columns"
            " (<code>.to_pandas()</code>, <code>.to_arrow()</code>)</p>",
            "<table><thead><tr>",
            *(f"<th>{esc(n)}</th>" for n in self.columns),
            "</tr></thead><tbody>",
        ]
        for i in range(shown):
            out.append("<tr>" + "".join(f"<td>{esc(self._cell(i, n))}</td>" for n in self.columns))
            out.append("</tr>")
        out.append("</tbody></table>")
        if self._rows > shown:
            out.append(f"<p>… {self._rows - shown:,} more rows</p>")
        return "".join(out)


def _categorical(pd: Any, col: Codes) -> Any:
    """A categorical over the string table; object categories when pandas' own string type
    cannot hold a string (a lone surrogate from a JSON escape): the text stays as written."""
    codes = col.ids.astype(np.int64, copy=False)
    try:
        return pd.Categorical.from_codes(codes, categories=list(col.strings))
    except UnicodeError:
        return pd.Categorical.from_codes(codes, categories=pd.Index(col.strings, dtype=object))


def _text_series(pd: Any, values: list) -> Any:
    try:
        return pd.Series(values)
    except UnicodeError:  # pandas' string type cannot hold a lone surrogate
        return pd.Series(values, dtype=object)


def _nested(values: list) -> bool:
    return any(isinstance(v, list | dict) for v in values)


def _arrow_list(pa: Any, values: list) -> Any:
    """An Arrow array of Python values (text, numbers, None, lists); text Arrow cannot hold is
    cleaned as `arrow_strings` does."""
    try:
        return pa.array(values)
    except (UnicodeEncodeError, pa.ArrowException):

        def fix(v: Any) -> Any:
            if isinstance(v, str):
                return v.encode("utf-8", "replace").decode("utf-8")
            if isinstance(v, list):
                return [fix(x) for x in v]
            return v

        return pa.array([fix(v) for v in values])


def concat(name: str, parts: list[tuple[int, Table]], key: str = "rank") -> Table:
    """One table of several (a job's ranks): the parts' rows one after another, with a first
    column `key` holding each part's number."""
    if not parts:
        return Table(name, {key: np.zeros(0, np.int64)})
    names = parts[0][1].columns
    columns: dict[str, Column] = {
        key: np.concatenate([np.full(len(t), n, np.int64) for n, t in parts])
    }
    for col in names:
        pieces = [t._resolved(col, keep=False) for _, t in parts]
        if all(isinstance(p, np.ndarray) and p.dtype.kind in "iufb" for p in pieces):
            columns[col] = np.concatenate(pieces)
        elif all(isinstance(p, np.ndarray | Masked) for p in pieces):
            values = np.concatenate([p.values if isinstance(p, Masked) else p for p in pieces])
            null = np.concatenate(
                [p.null if isinstance(p, Masked) else np.zeros(len(p), bool) for p in pieces]
            )
            columns[col] = Masked(values, null)
        elif all(isinstance(p, Codes) for p in pieces):
            strings: list[str] = []
            ids = []
            for p in pieces:  # each part's ids shifted past the tables before it
                ids.append(np.where(p.ids >= 0, p.ids.astype(np.int64) + len(strings), -1))
                strings.extend(p.strings)
            columns[col] = Codes(np.concatenate(ids), strings, unique=False)
        else:
            merged: list = []
            for _, t in parts:
                merged.extend(t.column(col))
            columns[col] = merged
    return Table(name, columns)
