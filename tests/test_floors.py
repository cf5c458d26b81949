"""Imports point down the floors (issue 27), function-local imports included.

Every module of the five packages belongs to one floor (the README's architecture section draws
them). A module may import a module of its own group or of a lower floor, never one of a higher
floor and never a sibling group on the same floor. Every `import` statement counts wherever it
stands: at module level, inside a function, or under `if TYPE_CHECKING:`, so the real graph
cannot hide inside functions. The check reads the source with `ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Source folder -> the package it is installed as (pyproject.toml's package-dir).
PACKAGES = {
    "parser": "kinetoscope.parser",
    "analysis": "kinetoscope.analysis",
    "tui": "kinetoscope.tui",
    "capture": "kinetoscope.capture",
    "kinetoscope": "kinetoscope",
}

# (module prefix, group, floor): the longest matching prefix decides. Groups on one floor are
# siblings: neither may import the other. Inside tui (floor 5) the viewer has floors of its own,
# written 5.1 to 5.5: they order tui's groups among themselves; to capture and the API every tui
# group is simply floor 5, a sibling.
FLOORS = (
    ("kinetoscope.common", "common", 0),
    ("kinetoscope.parser", "parser", 1),
    ("kinetoscope.analysis", "analysis", 2),
    ("kinetoscope.present", "present", 3),
    ("kinetoscope.export", "export", 4),
    ("kinetoscope.capture", "capture", 5),
    ("kinetoscope", "engine", 5),  # the package itself and the API: api, frames, sql, mcp_server
    ("kinetoscope.tui.data", "tui.data", 5.1),  # no Textual: the loader, the view data
    ("kinetoscope.tui.widgets", "tui.widgets", 5.2),
    # appbase, palette: the base app and the key help every viewer app shares; below the
    # screens, which they know only as the classes an app hands them (help_sections)
    ("kinetoscope.tui", "tui", 5.3),
    ("kinetoscope.tui.trace", "tui.trace", 5.4),
    ("kinetoscope.tui.job", "tui.job", 5.5),
    ("kinetoscope.tui.diff", "tui.diff", 5.5),
    ("kinetoscope.commands", "commands", 6),
    ("kinetoscope.__main__", "commands", 6),
)

# Imports that still point up or sideways, each to be removed; none may be added.
KNOWN: set[tuple[str, str]] = set()


def floor_of(module: str) -> tuple[str, float]:
    best = max(
        (entry for entry in FLOORS if module == entry[0] or module.startswith(entry[0] + ".")),
        key=lambda entry: len(entry[0]),
    )
    return best[1], best[2]


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that `path` imports, anywhere in its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            candidates = [f"{origin}.{alias.name}" for alias in node.names] + [origin]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != module:
                targets.add(candidate)
                break
    return targets


def allowed(module: str, target: str) -> bool:
    (group, floor), (other_group, other_floor) = floor_of(module), floor_of(target)
    if group == other_group:
        return True
    if int(floor) != int(other_floor) or group.split(".")[0] != other_group.split(".")[0]:
        return int(other_floor) < int(floor)  # between families only the whole floors count
    return other_floor < floor


def upward(root: Path = ROOT) -> set[tuple[str, str]]:
    known = modules(root)
    return {
        (module, target)
        for module, path in known.items()
        for target in imported(module, path, known)
        if not allowed(module, target)
    }


def test_every_module_has_a_floor():
    for module in modules():
        assert floor_of(module)


def test_imports_point_down_the_floors():
    wrong = upward()
    new = sorted(wrong - KNOWN)
    assert not new, "an import points up or sideways (README, Architecture):\n" + "\n".join(
        f"{a} imports {b} ({floor_of(a)[0]} -> {floor_of(b)[0]})" for a, b in new
    )
    gone = sorted(KNOWN - wrong)
    assert not gone, "remove from KNOWN, they are fixed:\n" + "\n".join(map(str, gone))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in PACKAGES:
        (tmp_path / folder).mkdir(exist_ok=True)
    return tmp_path


def test_the_check_sees_an_upward_import_inside_a_function(tmp_path):
    root = _tree(
        tmp_path,
        {
            "parser/__init__.py": "",
            "parser/low.py": "def f():\n    from kinetoscope.tui.trace import app\n",
            "tui/__init__.py": "",
            "tui/trace/__init__.py": "",
            "tui/trace/app.py": "from kinetoscope.parser import low\n",
        },
    )
    assert upward(root) == {("kinetoscope.parser.low", "kinetoscope.tui.trace.app")}


def test_the_check_sees_siblings_and_relative_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            "capture/__init__.py": "",
            "capture/run.py": "import kinetoscope.tui.widgets.table\n",
            "capture/demo.py": "from kinetoscope.parser import x\n",
            "tui/__init__.py": "",
            "tui/widgets/__init__.py": "",
            "tui/widgets/table.py": "from kinetoscope.capture import demo\n",
            "tui/widgets/search.py": "from ..trace import screens\n",
            "tui/trace/__init__.py": "",
            "tui/trace/screens.py": "from ..widgets.table import X\n",
        },
    )
    assert upward(root) == {
        ("kinetoscope.capture.run", "kinetoscope.tui.widgets.table"),
        ("kinetoscope.tui.widgets.table", "kinetoscope.capture.demo"),
        ("kinetoscope.tui.widgets.search", "kinetoscope.tui.trace.screens"),
    }
