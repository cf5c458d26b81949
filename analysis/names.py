"""Event names in narrow places: the forms of a name from the fullest to the most compact, and
which end of it to keep when even the most compact one must be cut.

- Python frames (`transformers/models/qwen2/modeling_qwen2.py(150): forward`) drop their
  directories first (`modeling_qwen2.py(150): forward`), then the start of the file name
  (`…qwen2.py(150): forward`): the function and the file's end tell frames apart.
- C++ kernel signatures (`void at::native::vectorized_elementwise_kernel<4,
  at::native::MulFunctor<float>, ...>(int, ...)`) lose their return type, namespaces and
  argument list, and their template arguments fold to the one that tells kernels apart
  (`vectorized_elementwise_kernel<…MulFunctor…>`).
- Paths keep their end (`…/qwen2/modeling_qwen2.py`); names ending in a number keep it
  (`ProfilerSt…#12`); other names keep their start.

Only the first (or last) `SCAN_LIMIT` characters of a name are ever looked at, so that a name of
hundreds of megabytes costs what a long ordinary one does. Nothing here measures terminal
cells: `kinetoscope.tui.safe_text.fit_name` picks the form that fits.
"""

from __future__ import annotations

import re
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


@lru_cache(maxsize=4096)
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


def name_forms(name: str) -> NameForms:
    """The forms of `name` for a narrow place, fullest first, and how to cut the last one."""
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
