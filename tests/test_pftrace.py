"""A Perfetto protobuf trace (`.pftrace`, which newer torch.profiler versions can write) is
recognised by its bytes wherever a trace is opened, and refused with one line that says how to
have torch write Chrome trace JSON instead (issue 18).

The protobuf files are built here, field by field: a `Trace` is `TracePacket`s as repeated
field 1; the packets hold a track descriptor and a slice's begin and end, as Perfetto's
TrackEvent writes them."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES
from kinetoscope.parser import TraceError, load, loads
from kinetoscope.parser.ranks import JobError, discover
from kinetoscope.parser.source import PERFETTO_REASON, looks_like_perfetto

from kinetoscope.commands.cli import main

SAMPLE = SAMPLES / "demo_cpu.pt.trace.json.gz"


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def number(field: int, value: int) -> bytes:  # wire type 0
    return varint(field << 3) + varint(value)


def nested(field: int, data: bytes) -> bytes:  # wire type 2
    return varint(field << 3 | 2) + varint(len(data)) + data


def perfetto_trace() -> bytes:
    """A real protobuf `Trace`: three `TracePacket`s (field 1 of `Trace`)."""
    sequence = number(10, 1)  # TracePacket.trusted_packet_sequence_id
    descriptor = nested(60, number(1, 1234) + nested(2, b"python"))  # track_descriptor: uuid, name
    # TracePacket.timestamp (8), track_event (11): type (9: 1 begin, 2 end), track_uuid (11),
    # name (23).
    begin = number(8, 1_700_000_000_000_000) + nested(
        11, number(9, 1) + number(11, 1234) + nested(23, b"aten::mm")
    )
    end = number(8, 1_700_000_000_500_000) + nested(11, number(9, 2) + number(11, 1234))
    return b"".join(nested(1, packet + sequence) for packet in (descriptor, begin, end))


@pytest.fixture
def pftraces(tmp_path: Path) -> dict[str, Path]:
    """The same protobuf trace as .pftrace, gzip'd, and under a .json name."""
    data = perfetto_trace()
    files = {
        "pftrace": tmp_path / "trace.pftrace",
        "gzip": tmp_path / "trace.pftrace.gz",
        "json_name": tmp_path / "worker0.pt.trace.json",
    }
    files["pftrace"].write_bytes(data)
    files["gzip"].write_bytes(gzip.compress(data))
    files["json_name"].write_bytes(data)
    return files


def refused(line: str, path: Path) -> None:
    """`line` is the one-line refusal for `path`, with the torch calls that write JSON."""
    assert line.count("\n") == 0 and "Traceback" not in line
    assert f"{path}: a Perfetto protobuf trace" in line
    assert 'export_chrome_trace("trace.json")' in line
    assert "tensorboard_trace_handler" in line


def test_recognised_by_its_bytes_not_json_that_starts_alike():
    data = perfetto_trace()
    assert data[0] == 0x0A  # field 1, length-delimited
    assert looks_like_perfetto(data)
    assert looks_like_perfetto(data[:7])  # cut off inside the first packet
    assert looks_like_perfetto(nested(1, b"\x40\x01"))  # a single packet: timestamp 1
    # JSON that starts with a newline: 0x0a then `{` (123) or `[` (91) reads as a varint length.
    for text in (b'\n{"traceEvents": []}', b'\n[{"ph": "X"}]', b'\n\n  {\n "schemaVersion": 1'):
        assert not looks_like_perfetto(text), text
    assert not looks_like_perfetto(b"\x0a\x00")  # an empty packet is no evidence
    assert not looks_like_perfetto(b"\x0a\x05\x00\x00\x00\x00\x00")  # field 0: malformed
    assert not looks_like_perfetto(b"\x0a\x02\x08\x01XYZ")  # no packet after the first


def test_every_corpus_and_sample_trace_is_still_json():
    from conftest import corpus_files
    from kinetoscope.parser.source import perfetto_problem

    files = [*corpus_files(), *SAMPLES.glob("*.json*")]
    assert files
    assert [f for f in files if perfetto_problem(str(f)) is not None] == []


@pytest.mark.parametrize("kind", ["pftrace", "gzip", "json_name"])
def test_summary_refuses_it_in_one_line(pftraces, kind, capsys):
    path = pftraces[kind]
    assert main(["summary", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    refused(err.strip(), path)


def test_the_parser_refuses_it_from_a_file_bytes_and_a_stream(pftraces):
    for path in pftraces.values():
        with pytest.raises(TraceError) as raised:
            load(str(path), use_cache=False)
        refused(str(raised.value), path)
    with pytest.raises(TraceError, match="a Perfetto protobuf trace"):
        loads(perfetto_trace(), "piped")
    with pytest.raises(TraceError, match="a Perfetto protobuf trace"):
        loads(gzip.compress(perfetto_trace()), "piped.gz")
    # A stream (`summary /dev/stdin < trace.pftrace`): recognised by the reader, not the name.
    with open(pftraces["gzip"], "rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "kinetoscope", "summary", "/dev/stdin"],
            stdin=stdin, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 1 and done.stdout == ""
    refused(done.stderr.strip(), Path("/dev/stdin"))


def test_the_viewer_shows_the_refusal(pftraces, capsys):
    from kinetoscope.commands.view import run_view

    # Without a terminal, the file is refused before the missing terminal is mentioned.
    assert run_view(str(pftraces["pftrace"])) == 1
    refused(capsys.readouterr().err.strip(), pftraces["pftrace"])


async def test_the_viewer_app_shows_the_refusal(pftraces):
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.screens import ErrorScreen

    app = KinetoscopeApp(str(pftraces["gzip"]))
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(500):
            await pilot.pause(0.02)
            if isinstance(app.screen, ErrorScreen):
                break
        assert isinstance(app.screen, ErrorScreen)
        assert "Perfetto protobuf" in app.screen.message
        await pilot.press("q")
    refused(app.exit_message, pftraces["gzip"])


def test_diff_refuses_either_side(pftraces, capsys):
    assert main(["diff", str(SAMPLE), str(pftraces["gzip"]), "--format", "text"]) == 1
    out, err = capsys.readouterr()
    refused(err.strip(), pftraces["gzip"])
    assert main(["diff", str(pftraces["json_name"]), str(SAMPLE), "--json"]) == 1
    refused(capsys.readouterr().err.strip(), pftraces["json_name"])


def rank(rank: int) -> dict:
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
             "ts": 0, "dur": 1000},
            {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 100,
             "dur": 500, "args": {"device": 0, "stream": 7, "correlation": 1}},
        ],
    }  # fmt: skip


def test_a_job_folder_leaves_it_out_with_the_reason(tmp_path, pftraces, capsys):
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        (job / f"rank{r}.pt.trace.json").write_text(json.dumps(rank(r)))
    shutil.copy(pftraces["pftrace"], job / "rank2.pftrace")
    shutil.copy(pftraces["json_name"], job / "rank3.pt.trace.json")
    files = discover([str(job)])
    assert [Path(f.path).name for f in files.files] == [
        "rank0.pt.trace.json",
        "rank1.pt.trace.json",
    ]
    assert sorted((Path(p).name, why) for p, why in files.left_out) == [
        ("rank2.pftrace", PERFETTO_REASON),
        ("rank3.pt.trace.json", PERFETTO_REASON),
    ]
    assert main(["summary", str(job), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {item["reason"] for item in document["left_out"]} == {PERFETTO_REASON}


def test_a_job_folder_of_only_pftrace_is_refused(tmp_path, pftraces, capsys):
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(pftraces["pftrace"], job / "rank0.pftrace")
    shutil.copy(pftraces["gzip"], job / "rank1.pftrace.gz")
    with pytest.raises(JobError) as raised:
        discover([str(job)])
    refused(str(raised.value), job / "rank0.pftrace")
    assert "(and 1 more such files)" in str(raised.value)
    assert main(["summary", str(job)]) == 1
    refused(capsys.readouterr().err.strip(), job / "rank0.pftrace")
    bundle = tmp_path / "job.zip"  # the job's export finds the job the same way
    assert main(["export", str(job), "-o", str(bundle), "--step", "1"]) == 1
    refused(capsys.readouterr().err.strip(), job / "rank0.pftrace")
    assert not bundle.exists()


def test_export_refuses_it(tmp_path, pftraces, capsys):
    out = tmp_path / "crop.json"
    assert main(["export", str(pftraces["pftrace"]), "-o", str(out), "--window", "+0ms..+1ms"]) == 1
    err = capsys.readouterr().err.strip()
    assert "a Perfetto protobuf trace" in err and "export_chrome_trace" in err
    assert "\n" not in err and "Traceback" not in err
    assert not out.exists()


def test_json_under_a_pftrace_name_is_read_as_json(tmp_path, capsys):
    # torch 2.13's export_chrome_trace("x.pftrace") without the CUPTI monitor writes JSON.
    path = tmp_path / "trace.pftrace"
    shutil.copy(SAMPLE, path)
    assert load(str(path), use_cache=False).n_events > 0
    assert main(["summary", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
