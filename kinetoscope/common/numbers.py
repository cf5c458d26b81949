"""Numbers a user types (option values: `--steps`, `--width`, `--port`, `--active`...), read
with a bound on their length and their size, so that a value such as 5,000 nines is refused in
one line (a usage error) instead of reaching Python's int limit (`ValueError: Exceeds the limit
(4300 digits)`), a range of 10^20 steps, or an overflow in numpy or a timer.

`read_int(text, what, low, high)` and `read_float(...)` raise `NumberError` (a ValueError) with
the line to print; `argparse_int(...)` and `argparse_float(...)` make argparse `type=`
functions of them. `shown(text)` is the text of a value as a message quotes it: at most a few
dozen characters, control characters made visible. No Textual, no numpy.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

# Longer than this, a number is refused before Python converts it: every bound below has at
# most 19 digits (int64), so 40 characters leave room for signs, zeros, decimals and spaces.
MAX_NUMBER_TEXT = 40
SHOWN_CHARACTERS = 24

_INT = re.compile(r"\s*[+]?\d+\s*")
_SIGNED_INT = re.compile(r"\s*[+-]?\d+\s*")
_FLOAT = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*")


class NumberError(ValueError):
    """A typed number that cannot be used: its message is the one line to print."""


def shown(text: str) -> str:
    """`text` quoted for a message: control characters escaped, and a long value cut (the
    number of characters said), so a 5,000-digit value makes a line of normal length."""
    cleaned = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(cleaned) <= SHOWN_CHARACTERS:
        return repr(cleaned)
    return repr(cleaned[: SHOWN_CHARACTERS - 4] + "…") + f" ({len(text):,} characters)"


def _too_long(text: str, what: str) -> NumberError:
    return NumberError(f"{what}: {shown(text)} is too long a number")


def read_int(
    text: str,
    what: str,
    low: int | None = None,
    high: int | None = None,
    *,
    signed: bool = False,
    kind: str = "a whole number",
) -> int:
    """`text` as an int from `low` to `high` (None: no bound that side; the length is bounded
    always); else NumberError naming `what` (e.g. `--width`)."""
    if len(text) > MAX_NUMBER_TEXT:
        raise _too_long(text, what)
    if (_SIGNED_INT if signed else _INT).fullmatch(text) is None:
        raise NumberError(f"{what}: not {kind}: {shown(text)}")
    value = int(text)
    if low is not None and value < low:
        raise NumberError(f"{what}: at least {low:,}, not {value:,}")
    if high is not None and value > high:
        raise NumberError(f"{what}: at most {high:,}, not {value:,}")
    return value


def read_float(
    text: str,
    what: str,
    low: float | None = None,
    high: float | None = None,
    *,
    kind: str = "a number",
) -> float:
    """`text` as a finite float from `low` to `high` (None: that side unbounded but finite)."""
    if len(text) > MAX_NUMBER_TEXT:
        raise _too_long(text, what)
    if _FLOAT.fullmatch(text) is None:
        raise NumberError(f"{what}: not {kind}: {shown(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise NumberError(f"{what}: {shown(text)} is too large")
    if low is not None and value < low:
        raise NumberError(f"{what}: at least {low:g}, not {value:g}")
    if high is not None and value > high:
        raise NumberError(f"{what}: at most {high:g}, not {value:g}")
    return value


def _argparse(read: Callable[[str], object]) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            return read(text)
        except NumberError as exc:  # argparse says "argument --x: ..." before it: drop ours
            message = str(exc)
            raise argparse.ArgumentTypeError(message.split(": ", 1)[-1]) from None

    return parse


def argparse_int(
    low: int | None = None, high: int | None = None, kind: str = "a whole number"
) -> Callable[[str], object]:
    """An argparse `type=` reading an int from `low` to `high` (read_int; signed when `low`
    is negative)."""
    signed = low is None or low < 0
    return _argparse(lambda text: read_int(text, "value", low, high, signed=signed, kind=kind))


def argparse_float(
    low: float | None = None, high: float | None = None, kind: str = "a number"
) -> Callable[[str], object]:
    """An argparse `type=` reading a finite float from `low` to `high` (read_float)."""
    return _argparse(lambda text: read_float(text, "value", low, high, kind=kind))
