"""Event names in narrow places: the forms of a name from the fullest to the most compact, and
which end of it to keep when even the most compact one must be cut.

- Python frames (`transformers/models/qwen2/modeling_qwen2.py(150): forward`) drop their
  directories first (`modeling_qwen2.py(150): forward`), then the start of the file name
  (`…qwen2.py(150): forward`): the function and the file's end tell frames apart.
- C++ kernel signatures (`void at::native::vectorized_elementwise_kernel<4,
  at::native::MulFunctor<float>, ...>(int, ...)`) lose their return type, namespaces and
  argument list, and their template arguments fold to the one that tells kernels apart
  (`vectorized_elementwise_kernel<…MulFunctor…>`).
- Itanium C++ mangled names (`_ZN5aiter24add_rmsnorm...`) are demangled first, by the C++
  runtime's own demangler (`abi::__cxa_demangle` in libstdc++, through ctypes; the raw name
  where it is not there or refuses the name), and then fold like any other signature.
- Paths keep their end (`…/qwen2/modeling_qwen2.py`); names ending in a number keep it
  (`ProfilerSt…#12`); other names keep their start.

Only the first (or last) `SCAN_LIMIT` characters of a name are ever looked at, so that a name of
hundreds of megabytes costs what a long ordinary one does. Nothing here measures terminal
cells: `kinetoscope.present.safe_text.fit_name` picks the form that fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

# Characters of a name looked at: far more than any screen shows.
SCAN_LIMIT = 4096

END, FRONT, MIDDLE = "end", "front", "middle"  # which part of a name is cut when it must be

_SIGNATURE = re.compile(r"^(?:(?:static|__global__|void|int|float)\s+)*[\w:~]+\s?[<(]")
_LABEL_LIMIT = 48  # the longest `: label` end kept when a `prefix: label` name is cut
_NUMBERED = re.compile(r"(#\d+|[_ ]\d+|\(\d+\))$")
_IDENT = re.compile(r"(?<!\w)[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")

# Identifiers in template arguments that say nothing about what a kernel does: types, wrappers
# around the functor that does say it, and the plumbing of ATen's elementwise loops.
_PLUMBING = frozenset(
    """
    void bool char short int long unsigned signed float double half float2 float4 size_t
    true false const operator lambda anonymous namespace ul
    Half BFloat16 Float8_e4m3fn Float8_e5m2 complex
    Array array OffsetCalculator TrivialOffsetCalculator IntDivider LoadWithoutCast
    StoreWithoutCast LoadWithCast StoreWithCast TensorIteratorBase TensorIterator
    BinaryFunctor AUnaryFunctor BUnaryFunctor UnaryFunctor gpu_kernel_impl
    gpu_kernel_impl_nocast func_wrapper_t ReduceOp TensorListMetadata OpaqueType
    """.split()
)


@dataclass(frozen=True)
class NameForms:
    """`forms`: the name's forms, fullest first (the first is the name itself, or its start
    when `truncated`); `cut`: which part of the last form to cut when none fits (END, FRONT or
    MIDDLE); `suffix`: for MIDDLE, the end that is kept."""

    forms: tuple[str, ...]
    cut: str = END
    suffix: str = ""
    truncated: bool = False  # the name is longer than what was looked at


def bounded(name: str, limit: int = SCAN_LIMIT) -> tuple[str, bool]:
    """The part of `name` worth looking at (its start), and whether anything was left off."""
    if len(name) <= limit:
        return name, False
    return name[:limit], True


def frame_file_start(name: str) -> int:
    """Where the file name of a Python frame (`path/to/model.py(12): fn`) starts, or -1 for a
    name that is not a frame. (Plain string searches: a regular expression for this backtracks
    badly on long names.)"""
    for marker in (".py(", ".pyx("):
        at = name.find(marker)
        if at < 0:
            continue
        digits = at + len(marker)
        close = name.find("): ", digits)
        if close <= digits or not name[digits:close].isdigit():
            continue
        return max(name.rfind("/", 0, at), name.rfind("\\", 0, at)) + 1
    return -1


def short_frame(name: str) -> str | None:
    """`path/to/model.py(12): fn` -> `model.py(12): fn`; None for a name that is not a frame
    or has no directories."""
    start = frame_file_start(name)
    return name[start:] if start > 0 else None


def is_frame(name: str) -> bool:
    return frame_file_start(name) >= 0


def _split_top(text: str, separator: str = ",") -> list[str]:
    """`text` split at `separator`s outside <>, (), [] and {}."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth = max(depth - 1, 0)
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one at `start` (len(text) when unbalanced)."""
    pairs = {"<": ">", "(": ")", "[": "]", "{": "}"}
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch in pairs:
            depth += 1
        elif ch in ")>]}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _telling(arguments: str) -> str | None:
    """The identifier of template arguments that tells a kernel apart: the first one (last
    part of a qualified name) that is not a type, a number or plumbing."""
    for match in _IDENT.finditer(arguments):
        last = match.group().rsplit("::", 1)[-1]
        if last not in _PLUMBING and not last.isdigit():
            return last
    return None


@lru_cache(maxsize=32768)
def short_kernel(name: str) -> str | None:
    """A C++ kernel signature folded: no return type, namespaces or argument list, template
    arguments folded to the telling one (`vectorized_elementwise_kernel<…MulFunctor…>`). None
    for a name that is not such a signature (`volta_sgemm_128x64_nn`, `aten::mm`)."""
    text, _ = bounded(name)
    if not _SIGNATURE.match(text):
        return None
    opening = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=-1)
    if not (text.startswith("void ") or "::" in text[:opening] or text[opening] == "<"):
        return None  # `forward(x)`: a name with brackets, not a signature
    text = text.replace("(anonymous namespace)::", "")
    text = re.sub(r"^(?:(?:static|__global__|void|int|float)\s+)+", "", text)
    # The qualified name runs to the first bracket outside any other.
    head_end = len(text)
    for i, ch in enumerate(text):
        if ch in "<(":
            head_end = i
            break
    head = text[:head_end].strip()
    base = head.rsplit("::", 1)[-1]
    if not base:
        return None
    rest = text[head_end:]
    if rest.startswith("<"):
        inner = rest[1 : _closing(rest, 0)]
        arguments = [a.strip() for a in _split_top(inner)]
        telling = _telling(inner)
        if len(arguments) == 1 and telling is not None and _IDENT.fullmatch(arguments[0]):
            folded = f"<{telling}>"
        elif telling is not None:
            folded = f"<…{telling}…>"
        else:
            folded = "<…>"
        return base + folded
    if rest.startswith("(") or not rest:
        return base if base != name else None
    return None


# Mangled names longer than this are left mangled: the demangler's time and output grow with
# its input, and no real kernel name comes near (the corpus's longest is about 2,000).
DEMANGLE_LIMIT = SCAN_LIMIT
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]+")
_demangler: Callable[[bytes], str | None] | None = None
_demangler_loaded = False


def _load_demangler() -> Callable[[bytes], str | None] | None:
    """`abi::__cxa_demangle` of the C++ runtime (libstdc++) through ctypes, with the C
    library's `free` for what it returns; None where either cannot be loaded."""
    import ctypes  # here, not with the module: ctypes.util imports subprocess, and only a
    import ctypes.util  # mangled name (a few traces) needs the demangler

    function = free = None
    # libstdc++ (Linux); libc++ (macOS, some Linux) carries the same function.
    for library in ("stdc++", "c++"):
        try:
            found = ctypes.util.find_library(library)
            if found is None:
                continue
            function = ctypes.CDLL(found).__cxa_demangle
            free = ctypes.CDLL(ctypes.util.find_library("c") or None).free
            break
        except (OSError, AttributeError, TypeError):
            function = free = None
    if function is None or free is None:
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = [
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
    ]
    free.restype = None
    free.argtypes = [ctypes.c_void_p]

    def call(mangled: bytes) -> str | None:
        status = ctypes.c_int(-1)
        pointer = function(mangled, None, None, ctypes.byref(status))
        if not pointer:
            return None
        try:
            if status.value != 0:
                return None
            return ctypes.string_at(pointer).decode("utf-8", "replace")
        finally:
            free(pointer)

    return call


@lru_cache(maxsize=4096)
def demangle(name: str) -> str | None:
    """An Itanium C++ mangled name (`_ZN5aiter3fooEv`) demangled (`aiter::foo()`); None for a
    name that is not one, one longer than DEMANGLE_LIMIT, or where the C++ runtime's
    demangler is not there or refuses it."""
    global _demangler, _demangler_loaded
    if not name.startswith("_Z") or len(name) > DEMANGLE_LIMIT or not _MANGLED.fullmatch(name):
        return None
    if not _demangler_loaded:
        _demangler, _demangler_loaded = _load_demangler(), True
    if _demangler is None:
        return None
    text = _demangler(name.encode("ascii"))
    return text if text and text != name else None


def full_form(name: str) -> str:
    """The fullest form of `name` that is shown: demangled when it is a mangled C++ name, its
    first SCAN_LIMIT characters."""
    return bounded(demangle(name) or name)[0]


@lru_cache(maxsize=32768)
def telling_form(name: str) -> str:
    """The form of `name` in which names of one table are told apart (kinetoscope.tui.
    safe_text.fit_names): `full_form`, for a C++ kernel signature from its own name on
    (`elementwise_kernel<128, 4, ...>(...)`, without return type and namespaces)."""
    text = full_form(name)
    kernel = short_kernel(text)
    if kernel is None:
        return text
    base = kernel.split("<", 1)[0]
    text = text.replace("(anonymous namespace)::", "")
    head_end = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))
    at = text.rfind(base, 0, head_end)
    return text[at:] if at >= 0 else text


def is_signature(name: str) -> bool:
    """Whether `name` is a C++ kernel signature (folded for narrow places)."""
    return short_kernel(demangle(name) or name) is not None


def name_forms(name: str) -> NameForms:
    """The forms of `name` for a narrow place, fullest first, and how to cut the last one."""
    demangled = demangle(name)
    if demangled is not None:
        name = demangled
    text, cut_off = bounded(name)
    kernel = short_kernel(name)
    if kernel is not None:
        # Cut the kernel's own name before its telling template argument.
        template = kernel[kernel.index("<") :] if "<" in kernel else ""
        return NameForms(
            (kernel,) if cut_off else (text, kernel),
            MIDDLE if template else END,
            suffix=template,
        )
    if cut_off:
        return NameForms((text,), END, truncated=True)
    start = frame_file_start(text)
    if start >= 0:
        return NameForms((text, text[start:]) if start > 0 else (text,), FRONT)
    if "/" in text and " " not in text:
        return NameForms((text,), FRONT)
    label = text.rfind(": ")
    if 0 < label and len(text) - label <= _LABEL_LIMIT:
        # `autograd::engine::evaluate_function: AddmmBackward0`: rows differ after the colon.
        return NameForms((text,), MIDDLE, suffix=text[label:])
    numbered = _NUMBERED.search(text)
    if numbered is not None and numbered.start() > 0:
        return NameForms((text,), MIDDLE, suffix=numbered.group())
    return NameForms((text,), END)
