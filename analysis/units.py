"""Units of the summary document."""

from __future__ import annotations


def us(ns: int | None) -> float | None:
    """Integer ns -> µs rounded to 3 decimals, in the trace's own time base (None stays None).

    Python's int / int division is correctly rounded, so the result does not depend on how
    large the timestamps are (numpy would round the int64 to a float first)."""
    if ns is None:
        return None
    return round(int(ns) / 1000, 3)
