"""msgspec structs naming only the event fields the model uses, and the decoders built on them."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec


class Args(msgspec.Struct, gc=False):
    """The few `args` fields used for links, memory and metadata; the rest is skipped at C speed."""

    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    device: Any = None
    stream: Any = None
    # Shapes stay JSON text (no lists built, then encoded again); the generic path of
    # `event_from_object` stores decoded values here instead.
    # (a JSON null arrives as Raw(b"null")).
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=None)
    input_dims_old: msgspec.Raw = msgspec.field(name="Input dims", default=None)
    addr: Any = msgspec.field(name="Addr", default=None)
    bytes: Any = msgspec.field(name="Bytes", default=None)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=None)
    device_type: Any = msgspec.field(name="Device Type", default=None)
    device_id: Any = msgspec.field(name="Device Id", default=None)
    name: Any = None  # process_name / thread_name metadata
    sort_index: Any = None
    labels: Any = None


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
    args: Args | None = None


class _Decoder:
    """A msgspec JSON decoder whose only error is DecodeError: JSON nested deeper than the
    interpreter's recursion limit (hostile or broken data) is malformed, not a crash."""

    def __init__(self, kind: Any = Any):
        self._decoder = msgspec.json.Decoder(kind)

    def decode(self, data: bytes) -> Any:
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
            event.args = msgspec.convert(known, Args, str_keys=True)
        except (ValueError, TypeError):
            event.args = None
        else:
            for attr, value in dims.items():
                setattr(event.args, attr, value)  # decoded values: _dims_text takes both
    return event


ARG_KEYS = Args.__struct_encode_fields__
DIMS_KEYS = {"Input Dims": "input_dims", "Input dims": "input_dims_old"}
