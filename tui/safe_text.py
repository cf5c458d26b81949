"""Event names and args are data: make them safe to draw as literal terminal text.

Nothing read from a trace is ever parsed as Rich markup (callers build `Text`/`Segment`
objects directly), and every character that could act on the terminal or reorder the line is
replaced by a visible stand-in here.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from rich.cells import cell_len, set_cell_size

# C0 controls become their Unicode "control picture" (ESC -> U+241B), DEL becomes U+2421;
# C1 controls, bidi overrides and other invisible format characters become U+FFFD.
_TABLE: dict[int, str] = {code: chr(0x2400 + code) for code in range(0x20)}
_TABLE[0x7F] = "\u2421"
for _code in range(0x80, 0xA0):
    _TABLE[_code] = "\ufffd"
for _code in (0x2028, 0x2029):  # line and paragraph separators
    _TABLE[_code] = "\ufffd"

REPLACEMENT = "\ufffd"


@lru_cache(maxsize=65536)
def clean(text: str) -> str:
    """Return `text` with control, format and separator characters replaced by visible ones."""
    out = text.translate(_TABLE)
    if out.isascii():
        return out
    # Bidi overrides, zero-width joiners and the like (category Cf), surrogates and
    # unassigned code points would make the drawn width differ from what we computed.
    return "".join(
        REPLACEMENT if unicodedata.category(ch) in ("Cf", "Cs", "Co", "Cn") else ch for ch in out
    )


def fit(text: str, width: int) -> str:
    """`clean(text)` cut or padded to exactly `width` terminal cells, with an ellipsis if cut."""
    if width <= 0:
        return ""
    safe = clean(text)
    if cell_len(safe) <= width:
        return set_cell_size(safe, width)
    if width == 1:
        return "…"
    return set_cell_size(set_cell_size(safe, width - 1) + "…", width)


def shorten(text: str, width: int) -> str:
    """`clean(text)` cut to at most `width` cells (ellipsis if cut), not padded."""
    safe = clean(text)
    if cell_len(safe) <= width:
        return safe
    return fit(safe, width)
