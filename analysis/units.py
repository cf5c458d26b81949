"""Units: durations and byte counts as numbers for the summary document and as text for people.

This is the one place where kinetoscope writes a duration or a size; the summary (text,
Markdown, TSV and JSON) and the viewer both use it. It imports neither Textual nor Rich, so the
headless path (`kinetoscope summary`) stays free of both.

Durations (every input is in ns, the model's unit):

- **Unit**: the largest of s, ms, µs and ns that keeps the magnitude at least 1 (zero is
  `0 ns`). Nanoseconds are whole numbers; the other units get three decimals, so a value is
  shown to 1/1000 of its unit (1 ns in µs: the trace's own resolution).
- **Table cells** (`fmt_table_time`; the viewer's tables and every table of `kinetoscope
  summary`): the three decimals are always written, trailing zeros included (`1.500 µs`), so a
  column reads at one precision and its decimal points line up. The viewer also gives the unit
  two cells (`3.393 s `), so units line up down a right-aligned column; the summary does not
  (its Markdown and TSV cells carry no padding).
- **Prose** (`fmt_duration`; sentences, status lines, titles, notices): the same unit and
  decimals with trailing zeros dropped (`1.5 µs`, `10 µs`, `2 s`). Prose is not aligned, and a
  setting (a gap threshold, a zoom step) reads as the round number it is.
- **Ruler ticks** (`fmt_tick`): just enough decimals to tell ticks `step` apart, no space.
- **Findings' messages** (`fmt_ms`): milliseconds with two decimals and thousands separators
  (`12.34 ms`, `15,942.42 ms`), whatever the size; counts in them get separators too. The messages are part of the summary document, which scripts compare from run to run.
- **Summary document** (`us`): numbers, not text: microseconds rounded to 3 decimals.

Bytes (`fmt_bytes`): binary units (B, KiB, MiB, GiB), two decimals above B (`1.50 GiB`,
`512 B`), a `-` for negative values and, when asked, a `+` for positive ones.
"""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import Any, overload

_UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))
_BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


@overload
def us(ns: int) -> float: ...


@overload
def us(ns: None) -> None: ...


@overload
def us(ns: int | None) -> float | None: ...


def us_text(ns: Any) -> str:
    """Integer ns as µs with exactly 3 decimals, computed on integers (exact at any size): the
    CSV files' times. A mean (a Fraction of ns) is divided and rounded to 3 decimals as the
    summary JSON's `mean_us` is (so both files say the same); a float of ns is rounded to the
    nearest ns. (The export writes the same digits as bytes: export/crop.py's `us_bytes`.)"""
    if isinstance(ns, Fraction):
        return f"{round(ns.numerator / (1000 * ns.denominator), 3):.3f}"
    try:
        ns = operator.index(ns)  # int, numpy's integers
    except TypeError:
        ns = round(float(ns))  # float, numpy's floats
    sign = "-" if ns < 0 else ""
    whole, part = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{part:03d}"


def us(ns: int | None) -> float | None:
    """Integer ns -> µs rounded to 3 decimals, in the trace's own time base (None stays None).

    Python's int / int division is correctly rounded, so the result does not depend on how
    large the timestamps are (numpy would round the int64 to a float first)."""
    if ns is None:
        return None
    return round(int(ns) / 1000, 3)


def _unit(magnitude: float) -> tuple[float, str]:
    """(ns per unit, unit name) of the largest unit that keeps `magnitude` ns at least 1."""
    return next((scale, unit) for scale, unit in _UNITS if magnitude >= scale or scale == 1.0)


def fmt_duration(ns: float, digits: int = 3) -> str:
    """A duration in prose: `12.5 µs`, `3.21 ms`, `10 µs` (`digits` decimals at most)."""
    if math.isnan(ns):
        return "?"
    scale, unit = _unit(abs(ns))
    if unit == "ns":
        return f"{ns:.0f} ns"
    text = f"{ns / scale:.{digits}f}".rstrip("0").rstrip(".")
    return f"{text} {unit}"


def fmt_table_time(ns: float, align_units: bool = True) -> str:
    """A duration for a table cell: always three decimals (`1.500 µs`, `845.123 ms`). With
    `align_units` the unit takes two cells (`3.393 s `), so that in a right-aligned column units
    and decimal points line up whatever the unit: 10 cells up to 9,999 s (then one decimal)."""
    if math.isnan(ns):
        return "?"
    magnitude = abs(ns)
    seconds = " s " if align_units else " s"
    if magnitude >= 1e12:
        return f"{ns / 1e9:,.1f}{seconds}"
    scale, unit = _unit(magnitude)
    if unit == "ns":
        return f"{ns:.0f} ns"
    return f"{ns / scale:.3f}{seconds if unit == 's' else ' ' + unit}"


def fmt_ms(ns: float) -> str:
    """A duration in a finding's message: milliseconds with two decimals and thousands
    separators, `12.34 ms`, `15,942.42 ms`."""
    return f"{ns / 1e6:,.2f} ms"


def tick_step(ns_per_cell: float, min_cells: int = 12) -> int:
    """A 1-2-5 step in ns so that ruler ticks are at least `min_cells` cells apart."""
    want = max(1.0, ns_per_cell * min_cells)
    exponent = math.floor(math.log10(want))
    for mantissa in (1, 2, 5, 10):
        step = mantissa * 10**exponent
        if step >= want:
            return int(step)
    return int(10 ** (exponent + 1))


def fmt_tick(ns: int, step: int) -> str:
    """A ruler label for time `ns`, with just enough decimals to tell ticks `step` apart."""
    scale, unit = _unit(max(abs(ns), step))
    decimals = max(0, math.ceil(math.log10(scale / step) - 1e-9)) if unit != "ns" else 0
    return f"{ns / scale:.{decimals}f}{unit}"


def fmt_bytes(value: int | float, signed: bool = False) -> str:
    """`1.50 GiB`, `512 B`, `-3.00 MiB`; a `+` in front of positive values when `signed`."""
    sign = "-" if value < 0 else ("+" if signed and value > 0 else "")
    magnitude = abs(float(value))
    for unit, scale in _BYTE_UNITS:
        if magnitude >= scale:
            return f"{sign}{magnitude / scale:.2f} {unit}"
    return f"{sign}{magnitude:.0f} B"


def fmt_percent(share: float) -> str:
    """A share (0.45) as a whole percentage: `45%`."""
    return f"{100 * share:.0f}%"


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 step`, `2 steps`, `1,234 rows`: the count with thousands separators and the word in
    the number it needs (`many` for irregular plurals)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"
