"""msgspec structs naming only the event fields the model uses, and the decoders built on them."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec
import numpy as np

from kinetoscope.common.text import clean


# Defaults chosen so that the conversion's hot passes need no second pass to replace None
# (parser/convert.py): absent shapes are ABSENT_DIMS (empty: no JSON text is), an event without
# args has EMPTY_ARGS. A JSON null is still None (Raw(b"null") for a shape).
ABSENT_DIMS = msgspec.Raw(b"")


class Args(msgspec.Struct, frozen=True, gc=False):
    """The few `args` fields used for links, memory and metadata; the rest is skipped at C speed.

    Frozen, so that one instance (EMPTY_ARGS) can be every args-less event's default."""

    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    device: Any = None
    stream: Any = None
    # Shapes stay JSON text (no lists built, then encoded again): Raw, a JSON null as
    # Raw(b"null"), ABSENT_DIMS when absent; the generic path of `event_from_object` stores
    # decoded values here instead.
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=ABSENT_DIMS)
    input_dims_old: msgspec.Raw = msgspec.field(name="Input dims", default=ABSENT_DIMS)
    addr: Any = msgspec.field(name="Addr", default=None)
    bytes: Any = msgspec.field(name="Bytes", default=None)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=None)
    device_type: Any = msgspec.field(name="Device Type", default=None)
    device_id: Any = msgspec.field(name="Device Id", default=None)
    name: Any = None  # process_name / thread_name metadata
    sort_index: Any = None
    labels: Any = None


EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event. Every field is optional. A value of another type than these fails the
    typed decode of its run, which is then decoded generically and sanitised by
    `event_from_object` (a rare, slower path), so odd values never lose events."""

    ph: str | None = None
    name: str | None = None
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    id: Any = None
    bp: Any = None
    args: Args | None = EMPTY_ARGS


class _Decoder:
    """A msgspec JSON decoder whose only error is DecodeError: JSON nested deeper than the
    interpreter's recursion limit (hostile or broken data) is malformed, not a crash."""

    def __init__(self, kind: Any = Any):
        self._decoder = msgspec.json.Decoder(kind)

    def decode(self, data: bytes | bytearray | memoryview) -> Any:
        try:
            return self._decoder.decode(data)
        except RecursionError:
            raise msgspec.DecodeError("JSON nested too deeply") from None


EVENTS_DECODER = _Decoder(list[Event])
ANY_DECODER = _Decoder()

_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_NOT_AVAILABLE = re.compile(rb"(?<=[:\[,])(\s*)N/A(?=\s*[,}\]])")


def trailing_at(error: Exception) -> int | None:
    """Index of the first trailing character msgspec complained about, if that was the error.

    msgspec reports the position just past that character, hence the - 1.
    """
    match = _TRAILING.search(str(error))
    return int(match.group(1)) - 1 if match else None


def is_truncated(error: Exception) -> bool:
    return "truncated" in str(error)


def lenient_loads(text: bytes) -> Any:
    """Decode one JSON value, tolerating historic Kineto defects.

    Unquoted `N/A`, raw control characters inside strings, NaN/Infinity and invalid UTF-8 are
    accepted (NaN and Infinity become floats, which the model then treats as "not a number").
    Raises ValueError when the text is not JSON even so.
    """
    try:
        return ANY_DECODER.decode(text)
    except msgspec.DecodeError:
        pass
    fixed = _NOT_AVAILABLE.sub(rb'\1"N/A"', text)
    decoded = fixed.decode("utf-8", errors="replace")
    try:
        return json.loads(decoded, strict=False)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


# -- repairing a run of events, all at once ---------------------------------------------------

_BIG_EXPONENT = re.compile(rb"[eE][+-]?\d{3,}|\d{309}")
_NUMBER_CHARS = frozenset(b"0123456789+-.eE")
_ESCAPES = [b"\\u%04x" % c for c in range(32)]


class Repair:
    """What `repair_json` changed that a user should hear of."""

    __slots__ = ("out_of_range", "tried", "changed")

    def __init__(self) -> None:
        self.out_of_range = 0  # numbers beyond float range (1e400), now missing values
        self.tried = False  # a repair was looked for
        self.changed = False  # and something was repaired


def string_quotes(text: bytes) -> np.ndarray:
    """Positions of the quotes that open or close JSON strings (those not escaped), vectorised.

    A quote is escaped when an odd number of backslashes precede it (in valid JSON backslashes
    occur only inside strings)."""
    raw = np.frombuffer(text, dtype=np.uint8)
    quotes = np.flatnonzero(raw == ord('"'))
    if not len(quotes) or text.find(b"\\") < 0:
        return quotes
    after = quotes[quotes > 0]
    after = after[raw[after - 1] == ord("\\")]
    if not len(after):
        return quotes
    backslashes = np.flatnonzero(raw == ord("\\"))
    # For every backslash, the index of the first backslash of its run of consecutive ones.
    run_first = np.ones(len(backslashes), dtype=bool)
    run_first[1:] = backslashes[1:] != backslashes[:-1] + 1
    first_index = np.maximum.accumulate(np.where(run_first, np.arange(len(backslashes)), 0))
    last = np.searchsorted(backslashes, after - 1)
    run_length = after - backslashes[first_index[last]]
    escaped = after[run_length % 2 == 1]
    return np.setdiff1d(quotes, escaped, assume_unique=True)


def _constants(raw: np.ndarray) -> list[int]:
    """Where `NaN`, `N/A` or `Infinity` may start (to be confirmed), found vectorised."""
    n = np.flatnonzero(raw[:-2] == ord("N"))
    n = n[((raw[n + 1] == ord("a")) & (raw[n + 2] == ord("N"))) | (raw[n + 1] == ord("/"))]
    i = np.flatnonzero(raw[:-2] == ord("I"))
    i = i[(raw[i + 1] == ord("n")) & (raw[i + 2] == ord("f"))]
    return np.concatenate((n, i)).tolist()


def repair_json(text: bytes, repair: Repair | None = None, numbers: bool = False) -> bytes | None:
    """The text with the defects of historic Kineto traces fixed, or None when it has none.

    Works on a whole run at once, at the cost of a few scans, not event by event: invalid
    UTF-8 becomes U+FFFD; outside strings, bare `NaN`, `Infinity` and `-Infinity` and numbers
    beyond float range (`1e400`) become `null`, and a bare `N/A` becomes `"N/A"`; inside
    strings, raw control characters become `\\u00XX` escapes. Decoded, the result holds the
    values that `lenient_loads` and `event_from_object` give one event at a time (NaN,
    Infinity and out-of-range numbers are missing values either way). Numbers are looked at
    only with `numbers` (when the decoder said one is out of range): that scan costs more.
    """
    changed = False
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        text = text.decode("utf-8", errors="replace").encode("utf-8")
        changed = True
    raw = np.frombuffer(text, dtype=np.uint8)
    # (start, end, replacement, counts as out of range): outside strings only.
    tokens: list[tuple[int, int, bytes, bool]] = []
    for at in _constants(raw):
        if text.startswith(b"NaN", at):
            tokens.append((at, at + 3, b"null", False))
        elif text.startswith(b"N/A", at):
            tokens.append((at, at + 3, b'"N/A"', False))
        elif text.startswith(b"Infinity", at):
            minus = at > 0 and text[at - 1] == ord("-")
            tokens.append((at - minus, at + 8, b"null", False))
    for match in _BIG_EXPONENT.finditer(text) if numbers else ():
        start, end = match.start(), match.end()
        while start > 0 and text[start - 1] in _NUMBER_CHARS:
            start -= 1
        while end < len(text) and text[end] in _NUMBER_CHARS:
            end += 1
        try:
            value = float(text[start:end])
        except ValueError:
            continue
        if math.isinf(value):
            tokens.append((start, end, b"null", True))
    controls = np.flatnonzero(raw < 0x20)
    if not tokens and not len(controls):
        return text if changed else None
    quotes = string_quotes(text)
    edits: list[tuple[int, int, bytes, bool]] = []
    if tokens:
        starts = np.array([start for start, *_rest in tokens], dtype=np.int64)
        inside = (np.searchsorted(quotes, starts) % 2 == 1).tolist()
        edits.extend(edit for edit, within in zip(tokens, inside) if not within)
    if len(controls):
        # Outside strings only whitespace may occur: other control characters stay, and the
        # decoder refuses the run as it should.
        controls = controls[np.searchsorted(quotes, controls) % 2 == 1]
        edits.extend((at, at + 1, _ESCAPES[text[at]], False) for at in controls.tolist())
    if not edits:
        return text if changed else None
    edits.sort()
    pieces = []
    done = 0
    for start, end, new, out_of_range in edits:
        if start < done:
            continue  # a match inside one already replaced
        pieces.append(text[done:start])
        pieces.append(new)
        done = end
        if out_of_range and repair is not None:
            repair.out_of_range += 1
    pieces.append(text[done:])
    return b"".join(pieces)


def decode_events(
    text: bytes | bytearray | memoryview, repair: Repair | None = None
) -> tuple[list[Event] | None, bool]:
    """Decode a run given as a JSON array of events: (events, False), or (None, closed_early).

    Fields of unexpected types send the run through the generic decoder; the defects of
    historic Kineto traces (NaN, raw control characters, ...) are repaired in the whole run at
    once (`repair_json`), so a damaged event costs about what a clean one does. `closed_early`
    says that the array ended before the text did (a run holding the end of traceEvents).
    Where the text is not a run of whole events even so, None: the caller tries another cut or
    splits the run.
    """
    repaired = numbers = False
    while True:
        try:
            return EVENTS_DECODER.decode(text), False
        except msgspec.ValidationError:
            try:
                return [event_from_object(o) for o in ANY_DECODER.decode(text)], False
            except msgspec.DecodeError as exc:
                error = exc
        except msgspec.DecodeError as exc:
            error = exc
        if trailing_at(error) is not None:
            return None, True
        if is_truncated(error) or "surrogate" in str(error):
            # A cut inside a string, or a lone surrogate (`"\\ud800"`), which msgspec cannot
            # hold in a str: the run is decoded by Python's json module as a whole.
            return _decode_with_surrogates(text), False
        out_of_range = "out of range" in str(error)
        if repaired and (numbers or not out_of_range):
            return None, False
        if not isinstance(text, bytes):
            text = bytes(text)  # a worker's shared memory or bytearray
        fixed = repair_json(text, repair, numbers=out_of_range)
        if repair is not None:
            repair.tried = True
            repair.changed |= fixed is not None
        if fixed is None:
            return None, False
        text, repaired, numbers = fixed, True, out_of_range


_SURROGATE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def may_hold_surrogates(data: bytes, start: int, stop: int) -> bool:
    """Does data[start:stop] spell a surrogate escape (lone or paired)?"""
    return _SURROGATE.search(data, start, stop) is not None


def _decode_with_surrogates(text: Any) -> list[Event] | None:
    """The events of a run holding lone surrogate escapes, as `lenient_loads` reads them, in
    one call for the whole run; None for any other run."""
    if not isinstance(text, bytes):
        text = bytes(text)
    if _SURROGATE.search(text) is None:
        return None
    try:
        objects = lenient_loads(text)
    except ValueError:
        return None
    if not isinstance(objects, list):
        return None
    return [event_from_object(o) for o in objects]


def _number(value: Any) -> int | float | None:
    kind = type(value)
    if kind is int:
        return value
    if kind is float and math.isfinite(value):
        return value
    return None


def _ident(value: Any) -> int | str | None:
    kind = type(value)
    if kind is int or kind is str or value is None:
        return value
    if kind is float and not math.isfinite(value):
        return None  # NaN and Infinity are missing values, as `repair_json` makes them
    return repr(value)


EMPTY_EVENT = Event()


def event_from_object(obj: Any) -> Event:
    """A generically decoded element -> Event with every field of its declared type.

    Values of other types become None (non-string names and phases, non-numeric or boolean
    times, NaN/Infinity), except pid/tid, which keep a textual form so their lane survives.
    Elements that are not objects become an empty Event: counted, under phase "?", and no row.
    """
    if not isinstance(obj, dict):
        return EMPTY_EVENT
    ph, name, cat = obj.get("ph"), obj.get("name"), obj.get("cat")
    event = Event(
        ph=ph if type(ph) is str else None,
        name=name if type(name) is str else None,
        cat=cat if type(cat) is str else None,
        pid=_ident(obj.get("pid")),
        tid=_ident(obj.get("tid")),
        ts=_number(obj.get("ts")),
        dur=_number(obj.get("dur")),
        id=obj.get("id"),
        bp=obj.get("bp"),
    )
    args = obj.get("args")
    if isinstance(args, dict):
        # Only the keys Args names: others may not even be encodable (lone surrogates).
        known = {key: args[key] for key in ARG_KEYS if key in args}
        dims = {attr: known.pop(key) for key, attr in DIMS_KEYS.items() if key in known}
        try:
            # The shapes are decoded values here, not Raw: _dims_text takes both.
            event.args = msgspec.structs.replace(
                msgspec.convert(known, Args, str_keys=True), **dims
            )
        except (ValueError, TypeError):
            event.args = None
    return event


ARG_KEYS = Args.__struct_encode_fields__
DIMS_KEYS = {"Input Dims": "input_dims", "Input dims": "input_dims_old"}


# -- header values of the types the model reads ------------------------------------------------

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT, _STR, _ID = "an integer", "a string", "an integer or a string"
_DEVICE_FIELDS = {"id": _ID, "name": _STR, "totalGlobalMem": _INT}
HEADER_FIELDS: dict[str, Any] = {
    "schemaVersion": _INT,
    "baseTimeNanoseconds": _INT,
    "displayTimeUnit": _STR,
    "traceName": _STR,
    "deviceProperties": [_DEVICE_FIELDS],
    "computeProperties": [_DEVICE_FIELDS],
    "distributedInfo": {"rank": _INT, "world_size": _INT, "backend": _STR},
}


def _of_type(value: Any, kind: str) -> bool:
    if kind == _STR:
        return type(value) is str
    return type(value) is int or (kind == _ID and type(value) is str)


def clean_header(header: dict[str, Any]) -> list[str]:
    """Drop header values of the wrong type or range, in place; one warning per value dropped.

    Numbers the model cannot hold (NaN, Infinity, integers beyond int64) are dropped anywhere
    in the header; the keys that the analysis reads must have their type (an integer, a
    string, a list of objects, ...). The rest of the header is kept as written."""
    dropped: list[str] = []

    def walk(value: Any, path: str, shape: Any) -> Any:
        """The value, or _DROP; lists and objects are cleaned in place."""
        kind = type(value)
        if kind is float and not math.isfinite(value):
            dropped.append(f"{path} (not a finite number)")
            return _DROP
        if kind is int and not INT64_MIN <= value <= INT64_MAX:
            dropped.append(f"{path} (an integer out of range)")
            return _DROP
        if isinstance(shape, str) and not _of_type(value, shape):
            dropped.append(f"{path} (not {shape})")
            return _DROP
        if isinstance(shape, list) and kind is not list:
            dropped.append(f"{path} (not a list)")
            return _DROP
        if isinstance(shape, dict) and kind is not dict:
            dropped.append(f"{path} (not an object)")
            return {} if path.endswith("]") else _DROP
        if kind is list:
            inner = shape[0] if isinstance(shape, list) else None
            for i, item in enumerate(value):
                cleaned = walk(item, f"{path}[{i}]", inner)
                value[i] = None if cleaned is _DROP else cleaned
        elif kind is dict:
            for key in list(value):
                inner = shape.get(key) if isinstance(shape, dict) else None
                if walk(value[key], f"{path}.{key}", inner) is _DROP:
                    del value[key]
        return value

    for key in list(header):
        try:
            keep = walk(header[key], key, HEADER_FIELDS.get(key)) is not _DROP
        except RecursionError:
            dropped.append(f"{key} (nested too deeply)")
            keep = False
        if not keep:
            del header[key]
    # A key is the trace's text: shown cleaned, never raw (a newline or an escape in a key).
    warnings = [f"ignored the header value {clean(what)}" for what in dropped[:5]]
    if len(dropped) > 5:
        warnings.append(f"ignored {len(dropped) - 5} more header values of the wrong type or range")
    return warnings


_DROP = object()
