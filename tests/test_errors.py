"""One error path (kinetoscope/common/errors.py): a command raises KinetoscopeError with its
message and exit status; `cli.main` alone prints it, cleaned, as one `kinetoscope: ` line and
returns the status. The commands are a registry (cli.COMMANDS): one module per command."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kinetoscope.commands import cli
from kinetoscope.common.errors import (
    KinetoscopeError,
    OutputError,
    UsageError,
    exit_status,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "demo_cpu.pt.trace.json.gz"


def test_main_prints_a_commands_error_once_cleaned_and_returns_its_status(monkeypatch, capsys):
    from kinetoscope.commands import summary

    def fails(*args, **kwargs):
        raise KinetoscopeError("a name with \x1b]0;title\x07 in it", 7)

    monkeypatch.setattr(summary, "summarise", fails)
    assert cli.main(["summary", str(SAMPLE)]) == 7
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "kinetoscope: a name with \u241b]0;title\u2407 in it\n"  # controls made visible


def test_a_usage_error_after_parsing_is_status_2(capsys):
    assert cli.main(["summary", str(SAMPLE), "--csv-raw"]) == 2
    assert capsys.readouterr().err == "kinetoscope: --csv-raw goes with --csv DIR\n"


def test_the_exit_statuses():
    assert KinetoscopeError("m").exit_code == 1 and UsageError("u").exit_code == 2
    assert KinetoscopeError("m", 4).exit_code == 4 and OutputError("o").exit_code == 1


def test_exit_status_says_the_error_and_returns_its_status_but_leaves_output_errors_to_main(
    capsys,
):
    def usage() -> int:
        raise UsageError("--steps 9-: the traces have steps 1-6 in common")

    assert exit_status(usage) == 2
    assert capsys.readouterr().err == (
        "kinetoscope: --steps 9-: the traces have steps 1-6 in common\n"
    )
    assert exit_status(lambda: 3) == 3 and exit_status(lambda: None) == 0

    def closed() -> int:
        raise OutputError("standard output was closed")

    with pytest.raises(OutputError):  # main silences standard output first
        exit_status(closed)


def test_a_long_line_is_cleaned_not_cut_again(capsys):
    """The parts a message quotes were cut where they are long; the line itself keeps its end
    (what went wrong)."""

    def missing() -> int:
        raise KinetoscopeError("x" * 20_000 + ": no such file")

    assert exit_status(missing) == 1
    err = capsys.readouterr().err
    assert err.startswith("kinetoscope: xxx") and err.endswith(": no such file\n")


def test_every_command_is_a_module_with_its_registration_in_the_order_of_the_help():
    import importlib

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == list(cli.COMMANDS) == list(cli.SUBCOMMANDS)
    for name, module in cli.COMMANDS.items():
        registered = importlib.import_module(f"kinetoscope.commands.{module}")
        assert callable(registered.register)
        handler = sub.choices[name].get_default("handler")
        assert callable(handler), name
        assert handler.__module__ == f"kinetoscope.commands.{module}", name


def _prints_an_error_line(node: ast.AST) -> bool:
    """`print("kinetoscope: ...", file=sys.stderr)` (a literal or an f-string)."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"):
        return False
    if not node.args or not any(k.arg == "file" for k in node.keywords):
        return False
    first = node.args[0]
    if isinstance(first, ast.JoinedStr):
        first = first.values[0] if first.values else None
    return isinstance(first, ast.Constant) and str(first.value).startswith("kinetoscope: ")


@pytest.mark.parametrize(
    "folder",
    ["kinetoscope/present", "kinetoscope/export", "kinetoscope/commands", "kinetoscope"],
)
def test_no_command_prints_its_own_error_line(folder):
    """The error lines are the error path's: no `print("kinetoscope: ...")` is left in the
    commands and the layers below them (capture's and serve's progress lines are notes, not
    errors; they stay theirs)."""
    notes = {"capture.py", "serve.py"}  # progress: "wrote ...", "serving ... on ..."
    found = []
    for path in sorted((ROOT / folder).glob("*.py")):
        if path.name in notes:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _prints_an_error_line(node):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_trace_path_problem_lives_beside_the_sources():
    from kinetoscope.parser.source import trace_path_problem

    assert trace_path_problem(str(SAMPLE)) is None
    assert trace_path_problem(str(ROOT / "no such\x1b.json")) == (
        f"{ROOT}/no such\u241b.json: no such file"
    )
    assert trace_path_problem(str(ROOT)) == f"{ROOT}: is a directory, not a trace file"
    assert not hasattr(cli, "trace_path_problem")
