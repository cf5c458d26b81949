"""The budget vocabulary: the limits a user types for a CI gate, read as exact numbers.

`kinetoscope check` reads every budget with these functions, and `diff --fail-above PCT` /
`--threshold PCT` read their percentages with `parse_percent` too (docs/check.md says how the
two gates relate). Every function takes the
user's text and returns a number, or raises `BudgetError` with one line that says what was
wrong. Nothing here trusts its input: the text is bounded in length (a 5000-digit number is
refused before it is converted), decimals are read as text (no float rounding, no exponent, no
NaN or Infinity), and each kind has a largest value it accepts.

- a **percentage**: `20%`, `20 %` or `20`, from 0 to 100 (`parse_percent`);
- a **duration**: a number and a unit, `120ms`, `1.5s`, `250us`, `250µs`, `800ns`, exact to the
  nanosecond, at most 10^6 s (`parse_duration`, integer ns);
- a **size**: a number and a unit, binary `KiB`, `MiB`, `GiB`, `TiB` or decimal `kB`, `MB`,
  `GB`, `TB`, or `B`, exact to the byte, at most 2^60 bytes (`parse_size`, integer bytes);
- a **severity**: `info`, `warning` or `critical` (`parse_severity`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from kinetoscope.common.numbers import MAX_NUMBER_TEXT

MAX_TEXT = MAX_NUMBER_TEXT  # characters: longer is not a number anyone means (numbers.py)
MAX_PERCENT = 100
MAX_DURATION_NS = 10**6 * 10**9  # a million seconds
MAX_SIZE = 1 << 60
SEVERITIES = ("info", "warning", "critical")

DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
}
SIZE_UNITS = {
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}

_NUMBER = r"(\d{1,15}(?:\.\d{0,12})?|\.\d{1,12})"
_PERCENT = re.compile(rf"\s*{_NUMBER}\s*%?\s*")
_WITH_UNIT = re.compile(rf"\s*{_NUMBER}\s*([A-Za-zµμ]*)\s*")


class BudgetError(ValueError):
    """A budget the user typed that cannot be read: the message is one line."""


def _shown(text: str) -> str:
    """The user's text for an error message: cut, one line, control characters escaped."""
    cut = text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"
    return repr(cut)


def _bounded(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise BudgetError(f"{what}: expected text such as a number with its unit, not {text!r}")
    if len(text) > MAX_TEXT:
        raise BudgetError(
            f"{what}: {_shown(text)} is too long for a number ({len(text)} characters)"
        )
    return text


def parse_percent(text: str, what: str = "percentage", most: int = MAX_PERCENT) -> Fraction:
    """`20%`, `20`, `12.5 %` -> the exact value (0 to `most`: 100 for a share such as GPU idle;
    `diff`'s thresholds, a change in step time, may be larger)."""
    text = _bounded(text, what)
    match = _PERCENT.fullmatch(text)
    if match is None:
        raise BudgetError(f"{what}: cannot read {_shown(text)}: write a percentage such as 20%")
    value = Fraction(match.group(1))
    if value > most:
        raise BudgetError(f"{what}: {_shown(text)} is more than {most:,}%")
    return value


def parse_duration(text: str, what: str = "duration") -> int:
    """`120ms`, `1.5s`, `250us` -> integer ns (exact; finer than a nanosecond is refused)."""
    text = _bounded(text, what)
    match = _WITH_UNIT.fullmatch(text)
    if match is None or match.group(2) not in DURATION_UNITS:
        raise BudgetError(
            f"{what}: cannot read {_shown(text)}: write a number and a unit "
            "(ns, us, µs, ms or s), e.g. 120ms"
        )
    value = Fraction(match.group(1)) * DURATION_UNITS[match.group(2)]
    if value.denominator != 1:
        raise BudgetError(f"{what}: {_shown(text)} is finer than a nanosecond")
    if value > MAX_DURATION_NS:
        raise BudgetError(f"{what}: {_shown(text)} is too long (at most 1000000 s)")
    return int(value)


def parse_size(text: str, what: str = "size") -> int:
    """`60GiB`, `512 MiB`, `2GB`, `4096B` -> integer bytes (exact; a fraction of a byte is
    refused)."""
    text = _bounded(text, what)
    match = _WITH_UNIT.fullmatch(text)
    unit = match.group(2).lower() if match is not None else ""
    if match is None or unit not in SIZE_UNITS:
        raise BudgetError(
            f"{what}: cannot read {_shown(text)}: write a number and a unit "
            "(B, KiB, MiB, GiB, TiB, kB, MB, GB or TB), e.g. 60GiB"
        )
    value = Fraction(match.group(1)) * SIZE_UNITS[unit]
    if value.denominator != 1:
        raise BudgetError(f"{what}: {_shown(text)} is not a whole number of bytes")
    if value > MAX_SIZE:
        raise BudgetError(f"{what}: {_shown(text)} is too large (at most 1 EiB)")
    return int(value)


def parse_severity(text: str, what: str = "severity") -> str:
    """`info`, `warning`, `critical` (any case) -> the severity's name."""
    text = _bounded(text, what)
    name = text.strip().lower()
    if name not in SEVERITIES:
        raise BudgetError(
            f"{what}: {_shown(text)} is not a severity: write info, warning or critical"
        )
    return name


def severity_rank(name: str) -> int:
    """info 0, warning 1, critical 2; an unknown severity ranks below info."""
    return SEVERITIES.index(name) if name in SEVERITIES else -1
