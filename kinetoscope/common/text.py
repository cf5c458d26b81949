"""Text read from a trace or typed by a user (event names, file names, error reasons) made safe
to print as literal terminal text: every character that could act on the terminal, reorder the
line or be drawn at a width Rich and the terminal disagree on is replaced by a visible stand-in.
Only the first `CLEAN_LIMIT` characters are cleaned (the rest is said to be there).

The floor below everything that prints a name: the parser's messages (`trace_path_problem`),
the error path (common/errors.py) and present/safe_text.py (cutting and padding to cells) use
this one `clean`. Standard library only.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

REPLACEMENT = "\ufffd"
ELLIPSIS = "…"
CLEAN_LIMIT = 16_384  # characters of one text that are ever drawn

# C0 controls become their Unicode "control picture" (ESC -> U+241B), DEL becomes U+2421;
# C1 controls, bidi overrides and other invisible format characters become U+FFFD.
_TABLE: dict[int, str | None] = {code: chr(0x2400 + code) for code in range(0x20)}
_TABLE[0x7F] = "\u2421"
for _code in range(0x80, 0xA0):
    _TABLE[_code] = REPLACEMENT
for _code in (0x2028, 0x2029):  # line and paragraph separators
    _TABLE[_code] = REPLACEMENT

# Characters whose width Rich and terminals (the C library's wcwidth, xterm, VTE) disagree on:
# fillers Rich counts as 0 cells and terminals draw 1 or 2 cells wide (U+3164 HANGUL FILLER,
# U+FFA0 HALFWIDTH HANGUL FILLER), symbols that became wide in a later Unicode than one of the
# two tables knows (trigrams, digrams, counting rods, circled numbers on black squares), and
# regional indicators (flags: one cell for Rich, two for many terminals).
_DISPUTED_RANGES = (
    (0x2630, 0x2637),
    (0x268A, 0x268F),
    (0x3164, 0x3164),
    (0x3248, 0x324F),
    (0xFFA0, 0xFFA0),
    (0x1D300, 0x1D356),
    (0x1D360, 0x1D376),
    (0x1F1E6, 0x1F1FF),
)
for _low, _high in _DISPUTED_RANGES:
    for _code in range(_low, _high + 1):
        _TABLE[_code] = REPLACEMENT
# Presentation only: emoji skin-tone modifiers (0 cells for Rich, 2 for terminals that draw
# them apart from their emoji) and the text/emoji variation selectors (which make some
# terminals draw a 1-cell symbol 2 cells wide). Dropping them loses no information.
for _code in (*range(0x1F3FB, 0x1F400), 0xFE0E, 0xFE0F):
    _TABLE[_code] = None


@lru_cache(maxsize=65536)
def clean(text: str) -> str:
    """`text` with control, format, separator and width-disputed characters replaced by
    visible ones; cut after CLEAN_LIMIT characters (with a note of how many were left off)."""
    more = len(text) - CLEAN_LIMIT
    if more > 0:
        text = text[:CLEAN_LIMIT]
    out = text.translate(_TABLE)
    if not out.isascii():
        # Bidi overrides, zero-width joiners and the like (category Cf), surrogates and
        # unassigned code points would make the drawn width differ from what we computed;
        # spacing combining marks (Mc, e.g. Devanagari vowel signs) are 0 cells for Rich and
        # 1 for most terminals.
        out = "".join(
            REPLACEMENT if unicodedata.category(ch) in ("Cf", "Cs", "Co", "Cn", "Mc") else ch
            for ch in out
        )
    if more > 0:
        out += f"{ELLIPSIS} ({more:,} more {'character' if more == 1 else 'characters'})"
    return out
