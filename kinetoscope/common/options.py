"""argparse `type=` functions of the commands' count, width and percentage options: a value is
read with the bounds of common/numbers.py, and a bad one is argparse's usage error (one line,
exit status 2)."""

from __future__ import annotations

import argparse

from kinetoscope.common.numbers import MAX_NUMBER_TEXT, shown

# The largest values the count options take: a cycle, a worker count, a gap's rank (more than
# any trace holds; a bigger value is a typing mistake, refused before it reaches a range).
MAX_COUNT = 1_000_000
MAX_WIDTH = 10_000  # columns (present/report_summary.py: NATURAL_WIDTH)
MAX_PERCENT = 10**9


def typed(text: str, what: str) -> str:
    """`text` when it is short enough to be a number (kinetoscope/common/numbers.py), else the usage
    error, before Python converts it (a 5,000-digit int is a ValueError of its own)."""
    if len(text) > MAX_NUMBER_TEXT:
        raise argparse.ArgumentTypeError(f"{shown(text)} is too long {what}")
    return text


def percent(text: str) -> float:
    """`diff`'s `--threshold` and `--fail-above`: a percentage as `check`'s budgets write it
    (`5`, `5%`, `12.5 %`; kinetoscope/common/budget.py), up to MAX_PERCENT."""
    from kinetoscope.common.budget import BudgetError, parse_percent  # fractions: diff alone

    try:
        return float(parse_percent(text, "a percentage", most=MAX_PERCENT))
    except BudgetError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None


def positive(text: str) -> int:
    try:
        value = int(typed(text, "a number"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {shown(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"at most {MAX_COUNT:,}, not {value:,}")
    return value


def gap_rank(text: str) -> int:
    """`--around-gap K`: any int that fits (0 and negatives are the export's own message)."""
    try:
        value = int(typed(text, "a number"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {shown(text)}") from None
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"at most {MAX_COUNT:,}, not {value:,}")
    return value


def columns(text: str) -> int:
    try:
        value = int(typed(text, "a number of columns"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of columns: {shown(text)}") from None
    if value < 20:
        raise argparse.ArgumentTypeError(f"at least 20 columns, not {value}")
    if value > MAX_WIDTH:
        raise argparse.ArgumentTypeError(f"at most {MAX_WIDTH:,} columns, not {value:,}")
    return value
