"""`kinetoscope mcp`: the MCP server, driven by the SDK's own client over stdio (a real server
process, as an agent starts it), and its tools called directly for paging and limits."""

from __future__ import annotations

import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from conftest import CORPUS, SAMPLES

from kinetoscope.sql import sql_available

pytest.importorskip("mcp")

from kinetoscope.analysis import TraceSession  # noqa: E402
from kinetoscope.analysis.summary import build_summary  # noqa: E402
from kinetoscope.parser import load  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from kinetoscope.mcp_server import MAX_ANSWER_BYTES, TriageTools, encode  # noqa: E402

H100 = CORPUS / "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz"
MI300 = CORPUS / "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz"
RESNET = CORPUS / "kineto/2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz"
ALEXNET = CORPUS / "hta/critical_path_alexnet_trace.json.gz"  # 95 GPU idle gaps
JOB = CORPUS / "multirank/dlrm_8rank"
SAMPLE = SAMPLES / "synthetic_gpu_training.pt.trace.json.gz"


def needs(*paths: Path) -> None:
    if not all(p.exists() for p in paths):
        pytest.skip("corpus not present")


@asynccontextmanager
async def server(*options: str):
    """A `kinetoscope mcp` process and an initialised client session on it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kinetoscope", "mcp", *options],
        env={"KINETOSCOPE_CACHE_DIR": os.environ["KINETOSCOPE_CACHE_DIR"]},
    )
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def call(session: ClientSession, tool: str, cap: int = MAX_ANSWER_BYTES, **arguments):
    """The tool's answer as JSON (checked to be one text within the cap), or the error's line."""
    result = await session.call_tool(tool, arguments)
    assert len(result.content) == 1
    text = result.content[0].text
    if result.is_error:
        return text
    assert len(text.encode()) <= cap, (tool, len(text.encode()))
    return json.loads(text)


async def error(session: ClientSession, tool: str, **arguments) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.content
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text and len(text) < 600
    return text


@pytest.mark.corpus
async def test_session_findings_window_and_diff_over_stdio():
    needs(H100, MI300)
    summary = build_summary(load(str(H100), write_cache=False))
    async with server() as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert {"open_trace", "findings", "window_stats", "diff", "gaps", "event"} <= names
        # The SQL engine of `kinetoscope sql` answers `query` when its extra is installed.
        assert ("query" in names) == sql_available()

        opened = await call(session, "open_trace", path=str(H100))
        handle = opened["handle"]
        assert opened["events"] == summary["trace"]["events"]
        assert opened["start_us"] == summary["trace"]["start_us"]
        assert opened["gpu"][0]["idle_us"] == summary["gpu"][0]["idle_us"]

        findings = await call(session, "findings", handle=handle)
        assert [(f["rule"], f["severity"]) for f in findings["findings"]] == [
            (f["rule"], f["severity"]) for f in summary["findings"]
        ]
        assert findings["page"]["total"] == len(summary["findings"])
        critical = await call(session, "findings", handle=handle, min_severity="critical")
        assert {f["severity"] for f in critical["findings"]} == {"critical"}

        kernels = await call(session, "top_kernels", handle=handle, limit=5)
        assert kernels["kernels"] == summary["kernels"][:5]
        operators = await call(session, "top_operators", handle=handle, limit=5, offset=5)
        assert operators["operators"] == summary["operators"][5:10]

        gaps = await call(session, "gaps", handle=handle, limit=3)
        assert [g["dur_us"] for g in gaps["gaps"]] == [
            g["dur_us"] for g in summary["idle_gaps"][:3]
        ]
        assert gaps["gaps"][0]["cpu_stack"][-1] == summary["idle_gaps"][0]["cpu_stack"][-1]

        # The whole trace as a window: the GPU's busy time is the summary's.
        whole = await call(
            session,
            "window_stats",
            handle=handle,
            start_us=summary["trace"]["start_us"],
            end_us=summary["trace"]["end_us"],
        )
        assert whole["gpu"][0]["busy_us"] == summary["gpu"][0]["busy_us"]
        assert whole["kernels"][0]["total_us"] == summary["kernels"][0]["total_us"]
        # A window around the longest gap: idle there, and the gap touches it.
        gap = summary["idle_gaps"][0]
        inside = await call(
            session,
            "window_stats",
            handle=handle,
            start_us=gap["start_us"],
            end_us=gap["start_us"] + gap["dur_us"],
        )
        assert inside["gpu"][0]["busy_us"] == 0.0 and inside["gpu"][0]["gaps"] == 1

        detail = await call(
            session, "event", handle=handle, row=gaps["gaps"][0]["next_gpu_event_row"]
        )
        assert detail["name"] == gap["next_gpu_event"] and detail["kind"] == "gpu"
        assert detail["launched_by"]["name"]

        other = await call(session, "open_trace", path=str(MI300))
        diff = await call(session, "diff", base=handle, new=other["handle"])
        # BASE an H100, NEW an MI300: not comparable, and the verdict says why.
        assert diff["verdict"]["verdict"] == "inconclusive"
        assert any("GPU type" in reason for reason in diff["verdict"]["reasons"])
        assert diff["overall"]["step_time"]["unit"] == "us"
        same = await call(session, "diff", base=handle, new=handle)
        assert same["verdict"]["verdict"] == "neutral"


async def test_bad_input_gives_one_line_errors(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    (tmp_path / "sub").mkdir()  # a folder without traces
    async with server() as session:
        assert "no such file" in await error(session, "open_trace", path=str(tmp_path / "x.json"))
        assert "not a regular file" in await error(session, "open_trace", path=str(fifo))
        assert "open_job" in await error(session, "open_trace", path=str(tmp_path))
        assert "not a regular file" in await error(session, "open_job", paths=[str(fifo)])
        assert "no trace files" in await error(session, "open_job", paths=[str(tmp_path / "sub")])
        await error(session, "open_trace", path=str(bad))
        await error(session, "open_trace", path="x" * 10_000)
        assert "no open trace" in await error(session, "findings", handle="t9")
        handle = (await call(session, "open_trace", path=str(SAMPLE)))["handle"]
        await error(session, "window_stats", handle=handle, start_us=5.0, end_us=1.0)
        await error(session, "window_stats", handle=handle, start_us=0, end_us=1e300)
        await error(session, "event", handle=handle, row=10**12)
        await error(session, "findings", handle=handle, min_severity="loud")
        await error(session, "gaps", handle=handle, limit=0)
        await error(session, "gaps", handle=handle, offset=-1)
        await error(session, "straggler", handle=handle)  # a trace, not a job
        await error(session, "gaps", handle=handle, limit="many")  # the SDK's validation
        # After all that, the server still answers.
        assert (await call(session, "handles"))["open"][0]["handle"] == handle


async def test_least_recently_used_trace_is_closed(tmp_path):
    copies = []
    for i in range(3):
        copy = tmp_path / f"copy{i}.json.gz"
        copy.write_bytes(SAMPLE.read_bytes())
        copies.append(copy)
    async with server("--max-open", "2") as session:
        first = (await call(session, "open_trace", path=str(copies[0])))["handle"]
        second = (await call(session, "open_trace", path=str(copies[1])))["handle"]
        await call(session, "findings", handle=first)  # first is now the most recently used
        third = await call(session, "open_trace", path=str(copies[2]))
        assert third["closed_to_make_room"] == [second]
        assert "closed to make room" in await error(session, "gaps", handle=second)
        assert (await call(session, "gaps", handle=first))["handle"] == first
        again = await call(session, "open_trace", path=str(copies[0]))
        assert again["handle"] == first  # the same file is not opened twice
        assert [h["handle"] for h in (await call(session, "handles"))["open"]] == [
            third["handle"],
            first,
        ]


@pytest.mark.corpus
async def test_small_cap_pages_through_every_gap():
    needs(ALEXNET)
    cap = 4096
    expected = TraceSession(load(str(ALEXNET), write_cache=False))
    gaps = expected.idle.gaps
    longest = [
        (round(int(gaps.start[i]) / 1000, 3), int(gaps.device[i])) for i in gaps.longest(len(gaps))
    ]
    async with server("--max-answer-bytes", str(cap)) as session:
        handle = (await call(session, "open_trace", cap=cap, path=str(ALEXNET)))["handle"]
        seen, offset, answers = [], 0, 0
        while offset is not None and answers < 200:
            answer = await call(session, "gaps", cap=cap, handle=handle, offset=offset, limit=500)
            page = answer["page"]
            assert page["offset"] == offset and page["total"] == len(gaps)
            assert page["returned"] > 0
            assert page["left_out"] == len(gaps) - offset - page["returned"]
            seen += [(g["start_us"], g["device"]) for g in answer["gaps"]]
            offset = page["next_offset"]
            answers += 1
    assert answers > 3  # the cap cut the listing into pages
    assert seen == longest  # every gap once, longest first, as the analysis orders them


@pytest.mark.corpus
async def test_job_straggler_over_stdio(capsys):
    needs(JOB)
    from kinetoscope.commands.cli import main

    assert main(["summary", str(JOB), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    async with server() as session:
        job = await call(session, "open_job", paths=[str(JOB)])
        assert job["kind"] == "job" and job["ranks"] == len(document["ranks"])
        answer = await call(session, "straggler", handle=job["handle"], limit=4)
        assert answer["straggler"]["rank"] == document["straggler"]["rank"]
        assert answer["straggler"]["phase"] == document["straggler"]["phase"]
        assert [r["rank"] for r in answer["ranks"]] == [r["rank"] for r in document["ranks"][:4]]
        assert answer["page"]["next_offset"] == 4
        assert "a job" in await error(session, "findings", handle=job["handle"])


# -- the tools called directly -------------------------------------------------------------------


def test_every_answer_fits_the_cap_and_is_deterministic():
    """Each tool on the sample trace, with a cap small enough to cut: the answer fits, says what
    it left out, and two calls give the same bytes."""
    for cap in (4096, MAX_ANSWER_BYTES):
        tools = TriageTools(max_answer_bytes=cap)
        opened = tools.open_trace(str(SAMPLE))
        handle = opened["handle"]
        calls = [
            ("findings", {"limit": 500}),
            ("top_operators", {"limit": 500}),
            ("top_kernels", {"limit": 500}),
            ("gaps", {"limit": 500}),
            (
                "window_stats",
                {"start_us": opened["start_us"], "end_us": opened["end_us"], "limit": 500},
            ),
            ("event", {"row": 0}),
        ]
        for name, arguments in calls:
            first = encode(getattr(tools, name)(handle, **arguments))
            assert len(first.encode()) <= cap, (cap, name)
            assert encode(getattr(tools, name)(handle, **arguments)) == first
            answer = json.loads(first)
            if "page" in answer and cap == 4096:
                page = answer["page"]
                assert page["returned"] + page["left_out"] == page["total"]


def test_query_hook_adds_a_tool_when_a_backend_registers():
    import anyio

    from kinetoscope import mcp_server

    def backend(session, query, limit):
        if query != "select count(*)":
            raise ValueError("only counting is supported here")
        return {"columns": ["count"], "rows": [[len(session.trace)]]}

    mcp_server.register_query_backend(backend)
    try:
        tools = TriageTools()
        handle = tools.open_trace(str(SAMPLE))["handle"]
        server_ = mcp_server.build_server(tools)
        names = {t.name for t in anyio.run(server_.list_tools)}
        assert "query" in names
        answer = tools.query(handle, "select count(*)")
        assert answer["rows"][0][0] == len(tools._get(handle).session.trace)
        with pytest.raises(mcp_server.ToolProblem, match="only counting"):
            tools.query(handle, "drop table x")
    finally:
        mcp_server.register_query_backend(None)
    assert "query" not in {
        t.name for t in anyio.run(mcp_server.build_server(TriageTools()).list_tools)
    }


def hostile_trace() -> dict:
    """Names of 50,000 characters, deep stacks, an event with 500 big args: what an attacker's
    trace may hold. Three steps, each a deep CPU stack launching a kernel after an idle gap."""
    big = "N" * 50_000
    events = []
    for step in range(3):
        base = step * 10_000
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": base,
                "dur": 9_000,
            }
        )
        for depth in range(60):  # a stack deeper than any answer keeps
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": f"{big}{depth}",
                    "pid": 1,
                    "tid": 1,
                    "ts": base + 1 + depth,
                    "dur": 8_000 - 2 * depth,
                }
            )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": base + 5_000,
                "dur": 10,
                "args": {"correlation": step + 1, **{f"{big[:5000]}{k}": big for k in range(500)}},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": big + "kernel",
                "pid": 0,
                "tid": 7,
                "ts": base + 5_100,
                "dur": 2_000,
                "args": {"correlation": step + 1, "device": 0, "stream": 7},
            }
        )
    return {"traceEvents": events}


def test_hostile_trace_answers_stay_within_the_cap(write_trace):
    path = write_trace(hostile_trace())
    cap = 4096
    tools = TriageTools(max_answer_bytes=cap)
    opened = tools.open_trace(str(path))
    handle = opened["handle"]
    session = tools._get(handle).session
    runtime_rows = [
        r for r in range(len(session.trace)) if session.trace.name_of(r) == "cudaLaunchKernel"
    ]
    answers = {
        "gaps": tools.gaps(handle, limit=500),
        "operators": tools.top_operators(handle, limit=500),
        "kernels": tools.top_kernels(handle, limit=500),
        "findings": tools.findings(handle, limit=500),
        "window": tools.window_stats(handle, opened["start_us"], opened["end_us"], limit=500),
        "event": tools.event(handle, runtime_rows[0]),
        "deep": tools.event(handle, runtime_rows[0] - 1),
        "instances": tools.instances(handle, "cudaLaunchKernel", limit=500),
        "diff": tools.diff(handle, handle, limit=500),
    }
    for name, answer in answers.items():
        assert len(encode(answer).encode()) <= cap, name
    # One gap's stack alone is over 4 KiB: it comes shortened, and paging still moves on.
    page = answers["gaps"]["page"]
    assert page["returned"] == 1 and page["shortened"] and page["next_offset"] == 1
    roomy = TriageTools()
    roomy_handle = roomy.open_trace(str(path))["handle"]
    gap = roomy.gaps(roomy_handle)["gaps"][0]
    assert len(gap["cpu_stack"]) == 24 and gap["cpu_stack_outer_frames_left_out"] == 61 - 24
    innermost = session.trace.name_of(gap["cpu_stack_rows"][-1])
    assert innermost.endswith("N59") and len(gap["cpu_stack"][-1]) == 160  # kept, name cut
    assert answers["operators"]["page"]["returned"] < answers["operators"]["page"]["total"]
    assert "args_note" in answers["event"]  # its args were shortened or left out, and it says so


@pytest.mark.corpus
async def test_query_runs_kinetoscope_sql_read_only_over_stdio():
    needs(H100)
    if not sql_available():
        pytest.skip("the sql extra (duckdb, pyarrow) is not installed")
    summary = build_summary(load(str(H100), write_cache=False))
    async with server() as session:
        handle = (await call(session, "open_trace", path=str(H100)))["handle"]
        answer = await call(
            session,
            "query",
            handle=handle,
            query="SELECT name, count(*) AS n, sum(dur) AS ns FROM kernel GROUP BY name "
            "ORDER BY ns DESC, name LIMIT 5",
        )
        assert answer["columns"] == ["name", "n", "ns"]
        top = summary["kernels"][0]
        assert answer["rows"][0][1] == top["count"]
        assert abs(answer["rows"][0][2] / 1000 - top["total_us"]) < 1
        line = await error(session, "query", handle=handle, query="COPY kernel TO '/tmp/x.csv'")
        assert "read-only" in line
