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

The cleaning itself (`clean`) is common/text.py's, below the parser, which names files with it.

Size: only the first `CLEAN_LIMIT` characters of a text are cleaned and drawn (the rest is
said to be there), so a name of hundreds of megabytes costs what a long ordinary one does.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from rich.cells import cell_len, get_character_cell_size

from kinetoscope.analysis.names import END, FRONT, MIDDLE, is_signature, name_forms, telling_form
from kinetoscope.common.text import CLEAN_LIMIT, ELLIPSIS, REPLACEMENT, clean  # noqa: F401


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


# Characters of one token of a name (what a difference is shown with): `MT320x224x64`,
# `c10::Half`, `3.5`.
_TOKEN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:.")
_TOKEN_BACK = 12  # the most characters of a token kept before the first one that differs
_TOKEN_LONG = 40  # the most characters of a token shown as a whole
_SHORT_TOKEN = 6  # a token shorter than this is shown with the one before it (`128, 8`)


def fit_names(names: Sequence[str], width: int) -> list[str]:
    """`fit_name` of each of `names` (one column of a table), except where that would hide
    what tells a name from the others: names that would read the same while they differ, and
    names cut before the point where they part from their nearest neighbour (in sorted order
    of their fullest forms) show a short start and then the parts that tell them apart
    (`Cijk_Alik_…MT320x224x64_MI16x16x1…`, see `_telling_apart`). Names that are the same
    read the same."""
    fitted = [fit_name(name, width) for name in names]
    if width <= 2:
        return fitted
    forms = {name: clean(telling_form(name)) for name in set(names)}
    distinct = sorted(forms, key=forms.__getitem__)
    if len(distinct) < 2:
        return fitted
    full = [forms[name] for name in distinct]
    text_of = dict(zip(names, fitted))
    groups: dict[str, list[int]] = {}
    for index, name in enumerate(distinct):
        groups.setdefault(text_of[name], []).append(index)
    chosen = {i for members in groups.values() if len(members) > 1 for i in members}
    for index, name in enumerate(distinct):
        if index in chosen or is_signature(name):
            continue
        text = text_of[name]
        if text == full[index]:
            continue
        start = text.split(ELLIPSIS, 1)[0]
        if not start or not full[index].startswith(start):
            continue  # cut at the front (paths, frames): their ends differ
        tail = text.rsplit(ELLIPSIS, 1)[1] if ELLIPSIS in text else ""
        shown_from = len(full[index]) - len(tail) if tail and full[index].endswith(tail) else None
        points = [
            _common_prefix(full[index], full[j])
            for j in (index - 1, index + 1)
            if 0 <= j < len(distinct) and full[j] != full[index]
        ]
        if any(
            point >= len(start) and (shown_from is None or point < shown_from) for point in points
        ):
            chosen.add(index)  # cut where it parts from a neighbour: the difference is hidden
    if not chosen:
        return fitted
    shown = _telling_apart(distinct, full, width, sorted(chosen))
    # Names that still read the same (far apart in sorted order): told apart among themselves.
    again: dict[str, list[int]] = {}
    for index in chosen:
        name = distinct[index]
        again.setdefault(shown.get(name, text_of[name]), []).append(index)
    for members in again.values():
        if len(members) > 1:
            members.sort()
            shown.update(
                _telling_apart(
                    [distinct[i] for i in members],
                    [full[i] for i in members],
                    width,
                    list(range(len(members))),
                )
            )
    if not shown:
        return fitted
    return [shown.get(name, text) for name, text in zip(names, fitted)]


def _common_prefix(a: str, b: str) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # the longest common start, by halves (slicing compares at C speed)
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _token_around(text: str, at: int) -> tuple[int, int]:
    """The span of the token of `text` holding position `at` (a few characters before it at
    most), with the token before it when it is short."""
    start = at
    while start > 0 and text[start - 1] in _TOKEN and at - start < _TOKEN_BACK:
        start -= 1
    end = max(at + 1, start + 1)
    while end < len(text) and text[end] in _TOKEN and end - start < _TOKEN_LONG:
        end += 1
    if end - start < _SHORT_TOKEN and start > 0:
        before = start
        while before > 0 and text[before - 1] not in _TOKEN and start - before < 3:
            before -= 1
        while before > 0 and text[before - 1] in _TOKEN and start - before < _TOKEN_BACK:
            before -= 1
        start = before
    return start, end


_FAMILY_SCAN = 64  # names looked at on each side for where a name's family parts from others


def _family_point(full: list[str], index: int, near: int) -> int:
    """Where `full[index]` parts from the nearest names beyond those it shares `near`
    characters with (its family: `…MT128x64x128…` of two kernels that differ later); 0 when
    there are none."""
    best = 0
    text = full[index]
    for step in (-1, 1):
        j = index + step
        for _ in range(_FAMILY_SCAN):
            if not 0 <= j < len(full):
                break
            shared = _common_prefix(text, full[j])
            if shared < near:
                best = max(best, shared)
                break
            j += step
    return best


def _draw_apart(text: str, points: set[int], width: int) -> str:
    """`text` in at most `width` cells as a start and the tokens at `points`, `…` between;
    when they do not all fit, the start gives way first, then each token's ends around its
    point."""
    spans: list[list[int]] = []  # [start, point, end]
    for point in sorted(points):
        if point >= len(text):  # a start of its neighbour: what tells it apart is its end
            start, end = max(0, len(text) - _SHORT_TOKEN), len(text)
            point = start
        else:
            start, end = _token_around(text, point)
        if spans and start <= spans[-1][2]:
            spans[-1][2] = max(end, spans[-1][2])
        else:
            spans.append([start, point, end])

    def needed() -> int:
        return sum(1 + cell_len(text[start:end]) for start, _, end in spans)

    least = 4  # cells of the start kept at least
    # Differences the start shows need no token of their own.
    spans = [span for span in spans if span[1] >= least] or spans[-1:]
    for _ in range(2):
        for keep_before, keep_after in ((8, 12), (3, 6), (1, 3)):
            if needed() + least + 1 <= width:
                break
            for span in spans:
                span[0] = max(span[0], span[1] - keep_before)
                span[2] = min(span[2], max(span[1] + keep_after, span[0] + 1))
        room = max(width - needed() - 1, least)
        first = spans[0][0]
        if first <= room:
            label_end = first  # the whole start fits: no `…` before the first difference
        else:
            cut = max(text.rfind(mark, 0, room) for mark in "_ <")
            label_end = cut + 1 if cut >= room // 2 else room
        covered = [span for span in spans if span[1] < label_end]
        if not covered or len(covered) == len(spans):
            break
        spans = [span for span in spans if span[1] >= label_end]
    parts = [text[:label_end]]
    for start, _, end in spans:
        start = max(start, label_end)
        if start > label_end or len(parts) > 1:
            parts.append(ELLIPSIS)
        parts.append(text[start:end])
        label_end = end
    drawn = "".join(parts)
    last_end = spans[-1][2]
    room = width - cell_len(drawn)
    if last_end < len(text) and room > 0:
        more, whole = _head(text[last_end:], room)
        drawn += more
        if not whole:
            drawn = cut_end(drawn, width, force=True)
    elif cell_len(drawn) > width:
        drawn = cut_end(drawn, width)
    return drawn


def _shows_all(drawn: str, text: str, points: set[int]) -> bool:
    """Whether `drawn` holds the token of `text` at every one of `points` whole."""
    for point in points:
        if point < len(text):
            start, end = _token_around(text, point)
            if text[start:end] not in drawn:
                return False
    return True


def _telling_apart(
    names: list[str], full: list[str], width: int, which: list[int]
) -> dict[str, str]:
    """Texts in at most `width` cells for `names` (sorted by `full`, their fullest forms,
    cleaned), each told apart from its neighbours: after a start (a C++ kernel's own name, or
    as much of the name as the rest leaves, at least a few cells), `…` and the
    tokens where it first differs from the name before and the one after it, the last one
    followed by as much of the name as fits. Only the names at indices `which` are drawn."""
    out: dict[str, str] = {}
    for index in which:
        name = names[index]
        text = full[index]
        points = {
            _common_prefix(text, full[j])
            for j in (index - 1, index + 1)
            if 0 <= j < len(names) and full[j] != text
        }
        if not points:
            continue  # the same as its neighbours as far as anything is ever shown
        family = _family_point(full, index, min(points))
        drawn = _draw_apart(text, points, width)
        if family > len(drawn.split(ELLIPSIS, 1)[0]):  # beyond the start shown anyway
            # The family's difference too (`…MT128x64x128…AFC0…`), where it leaves the
            # differences from the neighbours whole.
            richer = _draw_apart(text, {*points, family}, width)
            if _shows_all(richer, text, points):
                drawn = richer
        out[name] = drawn
    return out


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
