"""`kinetoscope summary`: JSON and text output, and load errors."""

import json

from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import load

from kinetoscope.commands.summary import run_summary


def X(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


EVENTS = [
    X("ProfilerStep#1", 0, 3000, cat="user_annotation"),
    X("enumerate(DataLoader)#It", 0, 1000),
    X("[bold red]not markup[/bold red]", 1000, 500),
    X("cudaLaunchKernel", 1100, 5, cat="cuda_runtime", correlation=1),
    X("cudaLaunchKernel", 1600, 5, cat="cuda_runtime", correlation=2),
    {
        "ph": "X",
        "cat": "kernel",
        "name": "gemm\x1b[31m",
        "pid": 0,
        "tid": 7,
        "ts": 1200,
        "dur": 300,
        "args": {"device": 0, "correlation": 1},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "[memory]",
        "pid": 0,
        "tid": 7,
        "ts": 1700,
        "dur": 300,
        "args": {"device": 0, "correlation": 2},
    },
    {
        "ph": "i",
        "s": "t",
        "name": "[memory]",
        "pid": 1,
        "tid": 1,
        "ts": 10,
        "args": {
            "Device Type": 1,
            "Device Id": 0,
            "Total Allocated": 2**20,
            "Total Reserved": 2**21,
        },
    },
]


def test_json_output_is_the_summary_document(write_trace, capsys):
    path = write_trace({"traceEvents": EVENTS})
    assert run_summary(str(path), as_json=True) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(build_summary(load(str(path)))))
    assert printed["kinetoscope_summary"] == 1
    assert printed["steps"][0]["dataloader_us"] == 1000.0
    assert {f["rule"] for f in printed["findings"]} >= {"dataloader_bound"}


def test_text_output_shows_every_section_with_names_as_data(write_trace, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path = write_trace({"traceEvents": EVENTS})
    assert run_summary(str(path), as_json=False) == 0
    out = capsys.readouterr().out
    for title in (
        "Trace",
        "Steps",
        "GPU utilisation and idle time by cause",
        "Longest GPU idle gaps",
        "Top operators by self time",
        "Top GPU kernels",
        "Memory peaks ([memory] events)",  # the title is text, not markup
        "Findings",
    ):
        assert title in out, title
    # Names are printed literally: markup-like text stays, escape codes are made visible.
    assert "[bold red]not markup[/bold red]" in out
    assert "[memory]" in out
    assert "\x1b[31m" not in out
    assert "dataloader_bound" in out


def test_load_error_is_one_line_on_stderr(write_trace, capsys):
    path = write_trace(b"this is not json")
    assert run_summary(str(path), as_json=True) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kinetoscope: ")


def test_missing_file(tmp_path, capsys):
    assert run_summary(str(tmp_path / "nope.json"), as_json=False) == 1
    assert capsys.readouterr().err.startswith("kinetoscope: ")
