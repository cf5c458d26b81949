"""Event names and args are data: make them safe to draw as literal terminal text, in the cells
the terminal will really give them.

Nothing read from a trace is ever parsed as Rich markup (callers build `Text`/`Segment`
objects directly), and every character that could act on the terminal or reorder the line is
replaced by a visible stand-in here.

Widths: Textual lays lines out with Rich's measure (`rich.cells.cell_len`), and the terminal
draws with its own tables. Where the two disagree on a character, a line drawn with it comes out
wider or narrower than its place (a lane label pushing the timeline 40 columns right). Such
characters are replaced (or, when they only choose a presentation, dropped), so that what Rich
measures is what the terminal draws; padding and cutting then use Rich's measure throughout.

Size: only the first `CLEAN_LIMIT` characters of a text are cleaned and drawn (the rest is
said to be there), so a name of hundreds of megabytes costs what a long ordinary one does.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from kinetoscope.analysis.names import END, FRONT, MIDDLE, name_forms
from rich.cells import cell_len, get_character_cell_size

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


def fit(text: str, width: int) -> str:
    """`clean(text)` cut or padded to exactly `width` terminal cells, with an ellipsis if cut."""
    if width <= 0:
        return ""
    return pad(cut_end(clean(text), width), width)


def pad(text: str, width: int, *, right: bool = False) -> str:
    """`text` (already clean, at most `width` cells) padded with spaces to exactly `width`
    cells: after it, or before it when `right`."""
    room = width - cell_len(text)
    if room <= 0:
        return text
    return " " * room + text if right else text + " " * room


def shorten(text: str, width: int) -> str:
    """`clean(text)` cut to at most `width` cells (ellipsis if cut), not padded."""
    return cut_end(clean(text), width)


def _head(text: str, width: int) -> tuple[str, bool]:
    """The longest start of `text` in at most `width` cells (with the zero-width characters
    that follow it), and whether that is all of `text`. Looks at no more of `text` than that."""
    used = 0
    for i, char in enumerate(text):
        size = get_character_cell_size(char)
        if used + size > width:
            return text[:i], False
        used += size
    return text, True


def cut_end(text: str, width: int, *, force: bool = False) -> str:
    """`text` (already clean) in at most `width` cells; when it does not fit (or `force`), its
    end is replaced by an ellipsis."""
    if width <= 0:
        return ""
    whole, fits = _head(text, width)
    if fits and not force:
        return whole
    if width == 1:
        return ELLIPSIS
    return _head(text, width - 1)[0] + ELLIPSIS


def cut_front(text: str, width: int) -> str:
    """`text` (already clean) in at most `width` cells, its start replaced by an ellipsis when
    it does not fit."""
    if width <= 0:
        return ""
    if _head(text, width)[1]:
        return text
    if width == 1:
        return ELLIPSIS
    kept: list[str] = []
    used = 0
    for char in reversed(text):
        size = get_character_cell_size(char)
        if used + size > width - 1:
            break
        kept.append(char)
        used += size
    return ELLIPSIS + "".join(reversed(kept))


def cut_middle(text: str, width: int, suffix: str) -> str:
    """`text` (already clean, ending in `suffix`) in at most `width` cells, keeping `suffix`
    (`ProfilerSt…#12`, `Prof…#12`: the number tells the rows of a column apart); its end is
    cut when the suffix leaves no room for two cells of its start."""
    if _head(text, width)[1]:
        return text
    room = width - cell_len(suffix) - 1
    if room < min(2, cell_len(text) - cell_len(suffix)):
        return cut_end(text, width)
    return _head(text[: len(text) - len(suffix)], room)[0] + ELLIPSIS + suffix


@lru_cache(maxsize=16384)
def fit_name(name: str, width: int) -> str:
    """An event name, clean, in at most `width` cells (not padded), in its most informative
    form: whole when it fits, else its compact form (a Python frame without directories, a
    kernel signature folded, see kinetoscope.analysis.names), cut where the name is least
    informative (the start of paths and frames, the middle of numbered names, else the end)."""
    if width <= 0:
        return ""
    forms = name_forms(name)
    for form in forms.forms:
        safe = clean(form)
        if _head(safe, width)[1] and not (forms.truncated and form == forms.forms[-1]):
            return safe
    last = clean(forms.forms[-1])
    if forms.truncated:
        return cut_end(last, width, force=True)
    if forms.cut == FRONT:
        return cut_front(last, width)
    if forms.cut == MIDDLE:
        return cut_middle(last, width, clean(forms.suffix))
    assert forms.cut == END
    return cut_end(last, width)


def cells_of(text: str, width: int) -> list[str]:
    """Clean `text` in exactly `width` cells, as one string per cell: a double-width character
    is followed by '' for its second cell, and zero-width characters stay with the character
    they combine with (so that slicing the list slices the drawn cells)."""
    fitted = fit(text, width)
    if fitted.isascii():
        return list(fitted)
    out: list[str] = []
    leading = ""  # zero-width characters before any other: they go with the first cell
    for char in fitted:
        size = get_character_cell_size(char)
        if size == 0:
            if not out:
                leading += char
            elif out[-1] == "" and len(out) >= 2:
                out[-2] += char
            else:
                out[-1] += char
            continue
        out.append(leading + char)
        leading = ""
        if size == 2:
            out.append("")
    return out[:width]


class _Full(Exception):
    """The text being written reached its limit."""


def bounded_json(value: object, limit: int) -> str:
    """`value` as compact JSON, written only up to about `limit` characters (then `…`): a list
    of millions of numbers costs what its first few do."""
    parts: list[str] = []
    size = 0

    def put(text: str) -> None:
        nonlocal size
        parts.append(text)
        size += len(text)
        if size > limit:
            raise _Full

    def write(item: object) -> None:
        if isinstance(item, dict):
            put("{")
            for i, (key, inner) in enumerate(item.items()):
                put(("," if i else "") + _json_scalar(str(key), limit) + ":")
                write(inner)
            put("}")
        elif isinstance(item, (list, tuple)):
            put("[")
            for i, inner in enumerate(item):
                if i:
                    put(",")
                write(inner)
            put("]")
        else:
            put(_json_scalar(item, limit))

    try:
        write(value)
    except _Full:
        return "".join(parts)[:limit] + ELLIPSIS
    return "".join(parts)


def _json_scalar(item: object, limit: int) -> str:
    import json

    if isinstance(item, str) and len(item) > limit:
        item = item[:limit]  # cut before it is escaped: the whole would never show
    try:
        return json.dumps(item, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(item)[:limit]


def bounded_args(
    args: dict, max_items: int, max_chars: int, skip: tuple[str, ...] = ()
) -> tuple[list[tuple[str, str]], int]:
    """The first `max_items` args of an event as (key, value text), each value at most about
    `max_chars` characters (strings as they are, other values as compact JSON), and how many
    args were left out. Only what is shown is ever looked at."""
    shown: list[tuple[str, str]] = []
    left = len(args) - sum(1 for key in skip if key in args)
    for key, value in args.items():
        if key in skip:
            continue
        if len(shown) == max_items:
            break
        left -= 1
        text = value[: max_chars + 1] if isinstance(value, str) else bounded_json(value, max_chars)
        shown.append((str(key)[: max_chars + 1], text))
    return shown, left
