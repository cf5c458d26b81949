"""Analysis results kept in the trace's model cache entry, so that a second `summary` of the
same file skips the analysis (issue 30).

The summary's JSON text is kept as an extra of the model's entry (`parser.cache.save_extra`):
plain `.npy` byte arrays, never pickle, under the same rules as the model itself: written only
into a valid entry of this very file, in a folder renamed into place; read back only if the
entry's key is the trace file as it is now, the extra's version is this code's, and every
file's identity, header and CRC-32 are as recorded (`parser.cache.load_extra`, with its CRCs
always read). Anything else, a damaged, foreign or stale result included, is not used: the
analysis runs again and its result replaces it.

The version is a hash of the code that makes the document (the parser and the analysis
packages, the module of the caller's JSON encoder, `kinetoscope summary`'s, and the versions of
msgspec, numpy and Python): a result made by other code, even one edit away, is never taken
for this code's. The document names the trace by the path it was
given; a result made under another spelling of the same file's path is given this one's.
The text, Markdown and TSV formats use the stored document too (their tables still read the
session for steps and launchers), when decoding the text gives back the very document.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np
from kinetoscope.parser import cache
from kinetoscope.parser.model import Trace

SUMMARY_EXTRA = "summary"
STORE_FORMAT = 2  # of what the extra holds: the text, the path it was made for, `exact`
_TEXT, _PATH, _EXACT = "text", "path", "exact"

Encode = Callable[[dict[str, Any]], str]  # the summary document -> its JSON text
_versions: dict[Any, int | None] = {}


def code_version(encode: Encode) -> int | None:
    """A hash of the code that makes the summary document and of `encode`'s module (None when
    their files cannot be read: nothing is stored then)."""
    if encode not in _versions:
        _versions[encode] = _hash_code(encode)
    return _versions[encode]


def _hash_code(encode: Encode) -> int | None:
    import kinetoscope.analysis
    import kinetoscope.parser

    from .summary import SUMMARY_VERSION

    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{STORE_FORMAT}:{SUMMARY_VERSION}:{cache.FORMAT_VERSION}".encode())
    # The libraries whose arithmetic and encoding the document is made of, and this Python.
    digest.update(f"{msgspec.__version__}:{np.__version__}:{sys.version}".encode())
    files: list[Path] = []
    for package in (kinetoscope.parser, kinetoscope.analysis):
        modules = sorted(Path(str(package.__file__)).parent.glob("*.py"))
        if not modules:
            return None  # no source to tell this code from another's: nothing is stored
        files.extend(modules)
    try:
        encoder_file = inspect.getsourcefile(encode)
    except TypeError:
        encoder_file = None
    if encoder_file is None:
        return None
    files.append(Path(encoder_file))
    try:
        for file in files:
            data = file.read_bytes()
            digest.update(f"{file.name}:{len(data)}:".encode())
            digest.update(data)
    except OSError:
        return None
    return int.from_bytes(digest.digest(), "little") >> 2  # a positive int64


class Stored(NamedTuple):
    """A stored summary: its JSON text for the path the trace was opened by, and the document
    decoded from it when that is the document itself (`document == decoded`, checked when it
    was stored: no NaN, no tuple), for the other formats' tables; else None."""

    text: str
    document: dict[str, Any] | None


def load_summary(trace: Trace, encode: Encode) -> Stored | None:
    """The summary stored for this trace file as it is now (its JSON text as `encode` makes
    it); None: not stored, stale, damaged, or made by other code."""
    version = code_version(encode)
    if version is None or not trace.from_cache:
        return None
    arrays = cache.load_extra(trace, SUMMARY_EXTRA, version, verify=True)
    if arrays is None or set(arrays) != {_TEXT, _PATH, _EXACT}:
        return None
    try:
        text = arrays[_TEXT].tobytes().decode("utf-8")
        made_for = arrays[_PATH].tobytes().decode("utf-8", "surrogatepass")
        document = msgspec.json.decode(text)
    except (UnicodeDecodeError, msgspec.DecodeError):
        return None
    exact = arrays[_EXACT].tolist()
    if not _is_summary(document) or exact not in ([0], [1]):
        return None
    if made_for != trace.source.path:
        document["source"]["path"] = trace.source.path
        text = encode(document)
    return Stored(text, document if exact == [1] else None)


def load_summary_text(trace: Trace, encode: Encode) -> str | None:
    """The stored summary's JSON text (`load_summary`), or None."""
    stored = load_summary(trace, encode)
    return None if stored is None else stored.text


def save_summary_text(
    trace: Trace, text: str, encode: Encode, document: dict[str, Any] | None = None
) -> bool:
    """Keep the summary JSON `text` (made by `encode`, from `document` if given) of `trace` in
    its model cache entry (which must exist and be of this very file); True if it was written.
    Not kept when decoding the text and encoding it again would not give it back byte for byte
    (then another path could not be put in). Whether the decoded text is `document` itself is
    kept with it (`Stored.document`)."""
    version = code_version(encode)
    if version is None:
        return False
    try:
        decoded = msgspec.json.decode(text)
        if not _is_summary(decoded) or encode(decoded) != text:
            return False
        exact = document is not None and decoded == document
        arrays = {
            _TEXT: np.frombuffer(text.encode("utf-8"), np.uint8),
            _PATH: np.frombuffer(trace.source.path.encode("utf-8", "surrogatepass"), np.uint8),
            _EXACT: np.array([int(exact)], np.uint8),
        }
    except (UnicodeError, msgspec.DecodeError):
        return False
    return cache.save_extra(trace, SUMMARY_EXTRA, version, arrays)


def _is_summary(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and "kinetoscope_summary" in document
        and isinstance(document.get("source"), dict)
        and "path" in document["source"]
    )
