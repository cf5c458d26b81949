"""No module writes into another object's `__dict__` (issue 14).

What an object keeps is a declared field of its own, and derived data has one owner (the
analysis's TraceSession). So the code never reaches into an object's namespace: no `__dict__`,
no `vars(...)`, no `setattr(...)` / `__setattr__`, outside the few places listed below with the
reason they must. Only code counts: comments and strings are skipped (the check tokenizes).
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("parser", "analysis", "tui", "kinetoscope", "capture")

# (file, the line's code, stripped): why it must reach into another object.
ALLOWED = {
    ("capture/runner.py", 'main.__dict__["__builtins__"] = __builtins__'):
        "`capture -c CODE` runs the code in a fresh __main__ module of its own making",
    ("capture/runner.py", "exec(code, main.__dict__)"):
        "exec takes the namespace of that module as a dict",
    ("capture/session.py",
     'original = owner.__dict__.get(name) if hasattr(owner, "__dict__") else None'):
        "--steps-from wraps a function of the user's program: a staticmethod or classmethod "
        "is found as declared, not bound",
    ("capture/session.py", "setattr(owner, name, self._stepping_wrapper(original))"):
        "--steps-from: the step marker is installed on the user's class or module",
    ("capture/session.py", "self._undo.append(lambda: setattr(owner, name, original))"):
        "and the user's function is put back when the capture ends",
    ("capture/session.py", "container = vars(owner)"):
        "--steps-from found by a frame: the user's function is looked up as declared",
    ("capture/session.py", "setattr(owner, parts[-1], wrapped)"):
        "--steps-from: the step marker is installed on the user's class",
    ("capture/session.py", "self._undo.append(lambda: setattr(owner, parts[-1], target))"):
        "and the user's function is put back when the capture ends",
}  # fmt: skip

REACHING = {"__dict__", "__setattr__"}  # any use
CALLS = {"setattr", "vars"}  # when called


def _reaches(path: Path) -> list[int]:
    """Lines of `path` whose code reaches into an object's namespace."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    lines = []
    for index, token in enumerate(tokens):
        if token.type != tokenize.NAME:
            continue
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        called = following is not None and following.string == "("
        previous = tokens[index - 1].string if index else ""
        if token.string in REACHING or (token.string in CALLS and called and previous != "."):
            lines.append(token.start[0])
    return sorted(set(lines))


def _found() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text().splitlines()
            relative = path.relative_to(ROOT).as_posix()
            for line in _reaches(path):
                found.setdefault((relative, text[line - 1].strip()), []).append(line)
    return found


def test_no_module_reaches_into_another_objects_namespace():
    found = _found()
    unexplained = [
        f"{path}:{line}: {code}"
        for (path, code), lines in sorted(found.items())
        if (path, code) not in ALLOWED
        for line in lines
    ]
    assert not unexplained, (
        "declare a field, or let the owner (e.g. TraceSession) keep it:\n" + "\n".join(unexplained)
    )


def test_every_allowance_is_still_needed():
    found = _found()
    assert [key for key in ALLOWED if key not in found] == []


def test_the_check_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docs may say __dict__ and setattr(x)."""\n'
        "# so may comments: obj.__dict__, vars(obj)\n"
        "x = obj.__dict__\n"
        "setattr(obj, 'a', 1)\n"
        "object.__setattr__(obj, 'a', 1)\n"
        "names = vars(obj)\n"
        "mock.setattr(obj, 'a', 1)\n"  # a method of that name is not the builtin
        "settings = 1\n"
    )
    assert _reaches(sample) == [3, 4, 5, 6]


# -- the parser's way in ------------------------------------------------------------------------

INTERNAL = {"kinetoscope.parser.reader", "kinetoscope.parser.parallel"}


def _internal_imports(path: Path) -> list[str]:
    """`line: module` for each import of the parser's framing or worker machinery in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if name in INTERNAL]
    return found


def test_the_parsers_workers_are_started_through_kinetoscope_parser_only():
    """Framing (reader.py) and worker processes (parallel.py) are the parser's own business:
    everything else loads through `kinetoscope.parser` (load, loads, prepare_workers)."""
    outside = [
        f"{path.relative_to(ROOT).as_posix()}:{found}"
        for package in (*PACKAGES, "benchmarks")
        if package != "parser"
        for path in sorted((ROOT / package).rglob("*.py"))
        for found in _internal_imports(path)
    ]
    assert outside == []


def test_the_import_check_sees_every_spelling(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from kinetoscope.parser.reader import read_bytes\n"
        "from kinetoscope.parser import parallel\n"
        "import kinetoscope.parser.parallel as p\n"
        "from kinetoscope.parser import load, prepare_workers\n"
        "from .reader import read_bytes\n"
    )
    assert _internal_imports(sample) == [
        "1: kinetoscope.parser.reader",
        "2: kinetoscope.parser.parallel",
        "3: kinetoscope.parser.parallel",
    ]
