"""One finding per cause, advice from the trace's own evidence, and the answer first in the
summary. Every trace here is built in the test, times in µs."""

from __future__ import annotations

import json

import pytest
from conftest import corpus_params
from kinetoscope.analysis import TraceSession, rules
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import loads

PID, TID = 1, 1


def X(name, ts, dur, cat="cpu_op", pid=PID, tid=TID, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def R(name, ts, dur, corr):
    return X(name, ts, dur, cat="cuda_runtime", correlation=corr)


def G(name, ts, dur, corr, cat="kernel", device=0):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": device,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": 7, "correlation": corr},
    }


def load(events):
    return loads(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode())


def burst(start, n=300, corr=1000):
    """n back-to-back 1 ms kernels from `start`, all launched at once ahead of them."""
    events = [X("aten::mm", start, n * 10 + 10)]
    for i in range(n):
        events += [
            R("cudaLaunchKernel", start + 5 + i * 10, 5, corr=corr + i),
            G("gemm", start + 20 + i * 1000, 1000, corr=corr + i),
        ]
    return events


def server_trace(*, steps=False, host_busy=False):
    return load(_server_events(steps=steps, host_busy=host_busy))


def _server_events(*, steps=False, host_busy=False):
    """What an inference server's trace looks like between requests: a kernel, then one
    blocking copy (SGLang's `forward_batch_info.py(443): init_new`), then nothing runs on the
    host for half a second, then a burst of work: GPU busy 300 of 800 ms."""
    events = [
        X("scheduler.py(100): event_loop", 0, 800_100, cat="python_function"),
        R("cudaLaunchKernel", 1, 3, corr=1),
        G("warmup", 5, 5, corr=1),
        X("forward_batch_info.py(443): init_new", 10, 50, cat="python_function"),
        X("aten::to", 12, 38),
        X("aten::copy_", 13, 36),
        R("cudaMemcpy", 15, 30, corr=2),
        G("Memcpy HtoD (Pinned -> Device)", 40, 4, corr=2, cat="gpu_memcpy"),
    ]
    if host_busy:  # the host computes (tokenises) through the gap instead of waiting
        events.append(X("tokenize", 60, 499_000))
    events += burst(500_000)
    if steps:
        events.append(X("ProfilerStep#1", 0, 800_100, cat="user_annotation"))
    return events


def above_info(causes):
    return [c for c in causes if c.severity != "info"]


def test_server_pattern_gives_one_finding_with_the_copy_as_its_evidence():
    trace = server_trace()
    session = TraceSession(trace)
    # Three rules see the same half second of idle...
    flat = {f.rule for f in session.findings if f.severity != "info"}
    assert {"host_sync", "host_wait_idle", "low_gpu_utilization", "waiting_for_work"} <= flat
    # ...and they become one finding: waiting for work, the rest its evidence.
    (cause,) = above_info(session.causes)
    assert cause.rule == "waiting_for_work"
    assert cause.severity == "critical"  # ~500 of 800 ms at stake
    assert {s.rule for s in cause.supports} == {
        "host_sync",
        "host_wait_idle",
        "low_gpu_utilization",
    }
    assert "cudaMemcpy" in [trace.name_of(r) for r in cause.rows]
    assert "waiting for work" in cause.message and "server" in cause.message
    assert "remove .item()" not in cause.message  # no training advice for a server
    assert 499_000_000 <= cause.stake <= 500_000_000


def test_the_same_gap_with_a_busy_host_is_a_sync_not_waiting():
    session = TraceSession(server_trace(host_busy=True))
    assert "waiting_for_work" not in {f.rule for f in session.findings}
    (cause,) = above_info(session.causes)
    assert cause.rule == "host_sync"
    assert {"host_wait_idle", "low_gpu_utilization"} <= {s.rule for s in cause.supports}


def test_a_trace_with_steps_is_never_waiting_for_work():
    session = TraceSession(server_trace(steps=True))
    assert "waiting_for_work" not in {f.rule for f in session.findings}
    assert len(above_info(session.causes)) == 1


def test_findings_of_different_stretches_stay_apart():
    """Two causes on different stretches of GPU time: a blocking copy whose own idle is short,
    and a launch-bound burst; neither explains the other's idle."""
    events = [X("ProfilerStep#1", 0, 20_000, cat="user_annotation")]
    corr = 1
    t = 0
    for _ in range(200):  # 200 short kernels, each launched after the previous one ended
        events += [R("cudaLaunchKernel", t, 25, corr=corr), G("tiny", t + 30, 5, corr=corr)]
        corr, t = corr + 1, t + 40
    events += [
        X("aten::item", 8000, 5000),
        R("cudaStreamSynchronize", 8000, 4990, corr=9000),
    ]
    events += burst(13_000, n=7, corr=5000)
    session = TraceSession(load(events))
    rules_above = [c.rule for c in above_info(session.causes)]
    assert "launch_bound" in rules_above and "host_sync" in rules_above


def test_grouping_keeps_every_finding_once_in_the_json():
    trace = server_trace()
    document = build_summary(trace)
    findings, causes = document["findings"], document["causes"]
    indices = [c["finding"] for c in causes] + [i for c in causes for i in c["supports"]]
    assert sorted(indices) == list(range(len(findings)))
    top = causes[0]
    assert top["rule"] == "waiting_for_work" and findings[top["finding"]]["rule"] == top["rule"]
    assert top["stake_us"] == pytest.approx(499_950, abs=100)
    assert list(document)[-2:] == ["findings", "causes"]  # the old keys keep their order


def test_severity_follows_the_time_at_stake():
    """A warning-level cause that explains a critical symptom's time becomes critical."""
    f_low = rules.Finding("low_gpu_utilization", "critical", "m", 0, 10, 0, stake=8, claim=None)
    cause = rules.Finding("host_sync", "warning", "m", 0, 10, 0, stake=8)
    import numpy as np
    from kinetoscope.analysis.intervals import Union

    claim = (0, Union.of(np.array([0]), np.array([8])))
    f_low = rules.replace(f_low, claim=claim)
    cause = rules.replace(cause, claim=claim)
    (grouped,) = rules.group_findings([f_low, cause])
    assert grouped.rule == "host_sync" and grouped.severity == "critical"
    # Half of the symptom not explained: two findings.
    half = (0, Union.of(np.array([0]), np.array([3])))
    apart = rules.group_findings([f_low, rules.replace(cause, claim=half)])
    assert [g.rule for g in apart] == ["low_gpu_utilization", "host_sync"]


# -- advice from evidence ---------------------------------------------------------------------


def loader_trace(iterator):
    events = [X("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    events.append(X(f"enumerate(DataLoader)#{iterator}.__next__", 0, 400))
    events += [G("gemm", t, 100, corr=t + 1) for t in range(400, 1000, 100)]
    return load(events)


def test_single_process_dataloader_says_num_workers_is_zero():
    finding = TraceSession(loader_trace("_SingleProcessDataLoaderIter")).findings
    (loader,) = [f for f in finding if f.rule == "dataloader_bound"]
    assert "num_workers=0" in loader.message and "_SingleProcessDataLoaderIter" in loader.message
    assert "no worker processes" in loader.message
    assert "num_workers=0" in loader.headline


def test_multi_process_dataloader_says_its_workers_do_not_keep_up():
    finding = TraceSession(loader_trace("_MultiProcessingDataLoaderIter")).findings
    (loader,) = [f for f in finding if f.rule == "dataloader_bound"]
    assert "num_workers=0" not in loader.message
    assert "already uses worker processes" in loader.message


def test_unknown_iterator_keeps_the_general_advice():
    finding = TraceSession(loader_trace("It")).findings
    (loader,) = [f for f in finding if f.rule == "dataloader_bound"]
    assert "Try more DataLoader workers" in loader.message


def blocking_copy_trace(memory):
    events = [X("ProfilerStep#1", 0, 2000, cat="user_annotation")]
    events += [R("cudaLaunchKernel", 0, 5, corr=1), G("gemm", 10, 190, corr=1)]
    events += [
        X("aten::item", 200, 600),
        R("cudaMemcpy", 205, 590, corr=2),
        G(f"Memcpy DtoH (Device -> {memory})", 700, 5, corr=2, cat="gpu_memcpy"),
        R("cudaLaunchKernel", 1000, 5, corr=3),
        G("gemm", 1010, 990, corr=3),
    ]
    return load(events)


def test_a_blocking_copy_to_pinned_memory_is_not_told_to_pin():
    (sync,) = [
        f for f in TraceSession(blocking_copy_trace("Pinned")).findings if f.rule == "host_sync"
    ]
    assert "already use pinned host memory" in sync.message
    assert "from pinned memory" not in sync.message


def test_a_blocking_copy_to_pageable_memory_is_told_to_pin():
    (sync,) = [
        f for f in TraceSession(blocking_copy_trace("Pageable")).findings if f.rule == "host_sync"
    ]
    assert "pageable host memory" in sync.message and "pin the host buffer" in sync.message
    assert "already use pinned" not in sync.message


# -- the answer first ----------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_params())
def test_summary_names_the_top_finding_in_its_first_25_lines(path, capsys, monkeypatch):
    from kinetoscope.parser import load as load_file

    from kinetoscope.commands.summary import run_summary

    monkeypatch.delenv("COLUMNS", raising=False)  # piped, natural width
    causes = build_summary(load_file(str(path)))["causes"]
    assert run_summary(str(path)) == 0
    head = capsys.readouterr().out.splitlines()[:25]
    assert head[0].startswith("What to fix")
    if not causes:
        assert any("No rule fired" in line for line in head)
        return
    top = causes[0]
    line = next((line for line in head if f" {top['rule']} " in line), None)
    assert line is not None, (top["rule"], head)
    assert top["severity"] in line
    assert top["title"].split()[0] in line


def test_markdown_summary_opens_with_what_to_fix(tmp_path, capsys):
    from kinetoscope.commands.summary import run_summary

    path = tmp_path / "server.json"
    events = json.loads(json.dumps(_server_events()))
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    assert run_summary(str(path), output="md") == 0
    out = capsys.readouterr().out
    assert out.startswith("## What to fix")
    first_table = out.split("## ", 2)[1]
    assert "waiting\\_for\\_work" in first_table and "critical" in first_table
    # The supporting rules are named in the line, not as lines of their own.
    assert "host\\_sync" in first_table and first_table.count("| critical |") == 1
    # TSV, read by scripts, keeps its tables as they were.
    assert run_summary(str(path), output="tsv") == 0
    tsv = capsys.readouterr().out
    assert not tsv.startswith("# What to fix") and "# What to fix" not in tsv


def test_real_num_workers_0_trace_is_told_it_has_no_workers():
    """The corpus's ResNet-50 run with num_workers=0 (its iterator is
    `_SingleProcessDataLoaderIter`): the advice says there are no workers."""
    from conftest import CORPUS
    from kinetoscope.parser import load as load_file

    path = CORPUS / "kineto" / "2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("corpus absent")
    (loader,) = [
        f for f in TraceSession(load_file(str(path))).findings if f.rule == "dataloader_bound"
    ]
    assert "num_workers=0" in loader.message and "no worker processes" in loader.message


# -- wording ----------------------------------------------------------------------------------


def test_communication_all_exposed_says_so():
    def comm(comm_start):
        events = [
            X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
            G("gemm", 0, 500, corr=1),
            G("ncclDevKernel_AllReduce", comm_start, 350, corr=2),
        ]
        (f,) = [f for f in TraceSession(load(events)).findings if f.rule == "communication_heavy"]
        return f.message

    exposed = comm(600)  # after compute: 35% of the step, all of it exposed
    assert "35% of the step, all of it exposed" in exposed
    assert "of which" not in exposed
    part = comm(300)  # 200 of 350 µs overlapped by the gemm
    assert "15% of the step exposed" in part
    hidden = comm(100)  # overlapped by compute entirely
    assert "all of it overlapped by compute" in hidden


def test_launch_bound_counts_have_thousands_separators():
    events = []
    corr, t = 1, 0
    for _ in range(1200):  # 1,200 short kernels, each launched after the previous one ended
        events += [R("cudaLaunchKernel", t, 25, corr=corr), G("tiny", t + 30, 5, corr=corr)]
        corr, t = corr + 1, t + 40
    (f,) = [f for f in TraceSession(load(events)).findings if f.rule == "launch_bound"]
    assert "1,200 of 1,200 under 10 µs" in f.message and "in 1,199 gaps" in f.message


def test_one_gpu_activity_is_singular():
    events = [G("a", 0, 100, corr=1), G("b", 50, 100, corr=2)]  # b starts before a ends
    (f,) = [f for f in TraceSession(load(events)).findings if f.rule == "overlapping_gpu_work"]
    assert f.message.startswith("1 GPU activity starts before")
    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        R("cudaGraphLaunch", 10, 10, corr=1),
        G("replayed", 30, 100, corr=1),
    ]
    replay = [f for f in TraceSession(load(events)).findings if f.rule == "graph_replay"]
    assert replay and "replays 1 GPU activity (" in replay[0].message


def test_text_summary_of_a_trace_without_schema_says_none(tmp_path, capsys, monkeypatch):
    from kinetoscope.commands.summary import run_summary

    monkeypatch.delenv("COLUMNS", raising=False)
    path = tmp_path / "old.json"
    path.write_text(json.dumps([G("gemm", 0, 100, corr=1)]))  # the oldest format: a bare array
    assert run_summary(str(path)) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "schema" in line]
    assert "None" not in line and "no schemaVersion" in line


def test_a_mechanism_joins_only_a_cause_it_can_be_part_of():
    import numpy as np
    from kinetoscope.analysis.intervals import Union

    claim = (0, Union.of(np.array([0]), np.array([8])))
    launch = rules.Finding("launch_bound", "warning", "m", 0, 10, 0, stake=8, claim=claim)
    copies = rules.Finding("pageable_memcpy", "warning", "m", 0, 10, stake=8, claim=claim)
    sync = rules.Finding("host_sync", "warning", "m", 0, 10, 0, stake=8, claim=claim)
    # Pageable copies inside a launch-bound stretch: two things to fix.
    assert len(rules.group_findings([launch, copies])) == 2
    # Pageable copies are one way a host sync blocks: one.
    (one,) = rules.group_findings([sync, copies])
    assert one.rule == "host_sync" and [s.rule for s in one.supports] == ["pageable_memcpy"]


def test_host_wait_in_a_single_process_dataloader_says_num_workers_0():
    """The corpus's oldest ResNet-50 run: the GPU waits for the host while the host loads data
    in the training process; the advice says so rather than "remove host synchronisation"."""
    from conftest import CORPUS
    from kinetoscope.parser import load as load_file

    path = CORPUS / "kineto" / "2021-01_resnet50_nw0_worker0.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("corpus absent")
    findings = TraceSession(load_file(str(path))).findings
    (wait,) = [f for f in findings if f.rule == "host_wait_idle"]
    assert "loading data then in the training process (num_workers=0)" in wait.message
    assert "remove host synchronisation" not in wait.message
