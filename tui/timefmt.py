"""Durations and timestamps in adaptive units (ns, µs, ms, s) and the ruler's tick spacing."""

from __future__ import annotations

import math

from rich.text import Text

_UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def fmt_duration(ns: float, digits: int = 3) -> str:
    """A duration in the largest unit that keeps it >= 1, e.g. `12.5 µs`, `3.210 ms`."""
    if math.isnan(ns):
        return "?"
    magnitude = abs(ns)
    for scale, unit in _UNITS:
        if magnitude >= scale or scale == 1.0:
            value = ns / scale
            if unit == "ns":
                return f"{value:.0f} ns"
            text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    raise AssertionError("unreachable")


def fmt_table_time(ns: float) -> str:
    """A duration for a table cell: three decimals, the unit in a two-cell field, so that in a
    right-aligned column the decimal points and units line up whatever the unit
    (`845.123 ms` above `3.393 s `). 10 cells up to 9,999 s (then one decimal)."""
    if math.isnan(ns):
        return "?"
    magnitude = abs(ns)
    if magnitude >= 1e12:
        return f"{ns / 1e9:,.1f} s "
    if magnitude >= 1e9:
        return f"{ns / 1e9:.3f} s "
    if magnitude >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if magnitude >= 1e3:
        return f"{ns / 1e3:.3f} µs"
    return f"{ns:.0f} ns"


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
    magnitude = max(abs(ns), step)
    scale, unit = next((s, u) for s, u in _UNITS if magnitude >= s or s == 1.0)
    decimals = max(0, math.ceil(math.log10(scale / step) - 1e-9)) if unit != "ns" else 0
    return f"{ns / scale:.{decimals}f}{unit}"


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 step`, `2 steps`, `1,234 rows`: the count with thousands separators and the word in
    the number it needs (`many` for irregular plurals)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


def time_cell(ns: float, prefix: str = "") -> Text:
    """A duration for a cell of a Textual DataTable: fmt_table_time, right-aligned."""
    return Text(prefix + fmt_table_time(ns), justify="right")
