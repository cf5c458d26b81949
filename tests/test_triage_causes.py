"""Triage that names the cause: device frees and blocking allocations, pageable copies, GPU idle
credited to the call that ran while the GPU idled, syncs weighed by the idle they cause, idle
totals per CPU operator, CPU-only traces and accelerator events kinetoscope cannot read.

Every trace here is built in the test, with times in µs."""

from __future__ import annotations

import json

import pytest
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.analysis.sync import KINDS
from kinetoscope.parser import loads

PID, TID = 1, 1


def X(name, ts, dur, cat="cpu_op", pid=PID, tid=TID, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def R(name, ts, dur, corr):
    """A runtime call."""
    return X(name, ts, dur, cat="cuda_runtime", correlation=corr)


def G(name, ts, dur, corr, cat="kernel", device=0):
    """A GPU activity launched by the runtime call with the same correlation."""
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


def load(events, **header):
    return loads(json.dumps({"schemaVersion": 1, "traceEvents": events, **header}).encode())


def kinds(calls):
    return [KINDS[int(k)] for k in calls.kind]


def by_rule(trace):
    return {f.rule: f for f in TraceSession(trace).findings}


# -- 1. frees and allocations that synchronise the device -------------------------------------


def free_bound_trace(n=40):
    """A step loop in which each iteration launches a 20 µs kernel, then calls hipFree for
    80 µs: the GPU is idle during every free (it waits for the host), 80 % of the window."""
    return load(free_bound_trace_events(n))


def free_bound_trace_events(n=40):
    events = [X("ProfilerStep#1", 0, n * 100 + 50, cat="user_annotation")]
    for i in range(n):
        t = i * 100
        events += [
            X("aten::conv2d", t, 10),
            R("hipLaunchKernel", t + 1, 3, corr=i + 1),
            G("conv_kernel", t + 5, 20, corr=i + 1),
            X("aten::empty", t + 15, 85),
            R("hipFree", t + 18, 80, corr=10_000 + i),
        ]
    return events


def test_device_frees_are_blocking_calls_with_their_own_kind():
    trace = free_bound_trace()
    calls = TraceSession(trace).sync
    assert len(calls) == 40
    assert set(kinds(calls)) == {"free"}
    # The GPU went idle at 25 µs into each iteration and stays idle until the next kernel at
    # 105: 73 µs of it while the free ran (25..98), 7 µs after it returned.
    assert int(calls.idle_during[0]) == 73_000
    assert int(calls.idle[0]) == 80_000
    entry = build_summary(trace)["sync"][0]
    assert (entry["call"], entry["kind"], entry["count"]) == ("hipFree", "free", 40)


def test_host_sync_fires_on_device_frees_and_says_why():
    finding = by_rule(free_bound_trace())["host_sync"]
    assert finding.severity == "critical"  # the frees cost the GPU 80 % of its window
    assert "hipFree ×40" in finding.message
    assert "cudaFree/hipFree synchronise" in finding.message
    assert "empty_cache" in finding.message


def test_an_allocation_counts_only_when_the_gpu_went_idle_during_it():
    events = [
        # The GPU runs 0..500; this hipMalloc runs while it stays busy: not a wait.
        R("hipLaunchKernel", 0, 2, corr=1),
        G("long_kernel", 5, 500, corr=1),
        R("hipMalloc", 100, 50, corr=2),
        # This one runs 490..900: the GPU drains at 505 and idles until the host launches.
        R("hipMalloc", 490, 410, corr=3),
        R("hipLaunchKernel", 905, 2, corr=4),
        G("next_kernel", 910, 100, corr=4),
    ]
    trace = load(events)
    calls = TraceSession(trace).sync
    assert [int(trace.start[r]) // 1000 for r in calls.rows] == [490]
    assert kinds(calls) == ["malloc"]
    assert int(calls.idle[0]) == (910 - 505) * 1000


# -- 2. pageable copies ----------------------------------------------------------------------


def pageable_trace():
    events = [X("ProfilerStep#1", 0, 2000, cat="user_annotation")]
    for i in range(3):
        t = i * 600
        events += [
            X("aten::to", t, 400),
            X("aten::copy_", t + 5, 390),
            # Issued as an async copy, but from pageable memory: the host waits 380 µs.
            R("cudaMemcpyAsync", t + 10, 380, corr=i + 1),
            G("Memcpy HtoD (Pageable -> Device)", t + 300, 80, corr=i + 1, cat="gpu_memcpy"),
            # A pinned async copy returns at once and is not a wait.
            R("cudaMemcpyAsync", t + 400, 5, corr=100 + i),
            G("Memcpy HtoD (Pinned -> Device)", t + 410, 50, corr=100 + i, cat="gpu_memcpy"),
            R("cudaLaunchKernel", t + 450, 5, corr=200 + i),
            G("gemm", t + 460, 100, corr=200 + i),
        ]
    return load(events)


def test_async_copies_of_pageable_memory_are_blocking_calls():
    trace = pageable_trace()
    calls = TraceSession(trace).sync
    assert kinds(calls) == ["pageable_memcpy"] * 3
    assert [int(trace.dur[r]) // 1000 for r in calls.rows] == [380] * 3


def test_pageable_memcpy_finding_names_the_calls_and_the_fix():
    trace = pageable_trace()
    finding = by_rule(trace)["pageable_memcpy"]
    assert finding.severity == "warning"  # 1.14 ms of host time blocked
    assert "3 copies between the GPU and pageable host memory" in finding.message
    assert "3 Memcpy HtoD (Pageable -> Device)" in finding.message
    assert "1.14 ms" in finding.message
    assert "pin_memory" in finding.message
    assert trace.name_of(finding.rows[0]) == "cudaMemcpyAsync"
    assert trace.name_of(finding.rows[-1]) == "Memcpy HtoD (Pageable -> Device)"
    document = build_summary(trace)
    assert any(f["rule"] == "pageable_memcpy" for f in document["findings"])


# -- 3. idle credited to the call that ran while the GPU idled ------------------------------


def test_gpu_idle_goes_to_the_call_running_while_the_gpu_idled():
    """A 4.93 ms synchronous memcpy with the GPU idle throughout, then a 10 µs stream wait and
    the next kernel: the wait does not get the credit for the memcpy's idle time."""
    events = [
        R("hipLaunchKernel", 0, 5, corr=1),
        G("kernel_a", 10, 90, corr=1),  # GPU idle from 100
        R("hipMemcpyWithStream", 100, 4930, corr=2),
        R("hipStreamWaitEvent", 5040, 10, corr=3),
        R("hipLaunchKernel", 5055, 5, corr=4),
        G("kernel_b", 5070, 50, corr=4),  # until 5070
    ]
    trace = load(events)
    calls = TraceSession(trace).sync
    assert [trace.name_of(int(r)) for r in calls.rows] == [
        "hipMemcpyWithStream",
        "hipStreamWaitEvent",
    ]
    assert kinds(calls) == ["memcpy", "stream_wait"]
    # The memcpy: idle the whole 4930 µs it ran, and the 10 µs until the wait began.
    assert int(calls.idle[0]) == (4930 + 10) * 1000
    # The wait: its own 10 µs and the 20 µs until the kernel began.
    assert int(calls.idle[1]) == (10 + 20) * 1000
    sites = {s["call"]: s for s in build_summary(trace)["sync"]}
    assert sites["hipMemcpyWithStream"]["gpu_idle_us"] == 4940.0
    assert sites["hipStreamWaitEvent"]["gpu_idle_us"] == 30.0


# -- 4. syncs weighed by the idle they cause -------------------------------------------------


def test_host_sync_does_not_fire_when_the_gpu_stayed_busy():
    """A 14 ms device synchronize in the harness while the GPU runs back-to-back kernels."""
    events = [R("cudaLaunchKernel", i * 10, 5, corr=i + 1) for i in range(150)]
    events += [G("gemm", 20 + i * 100, 100, corr=i + 1) for i in range(150)]
    events.append(R("cudaDeviceSynchronize", 1500, 14_000, corr=999))
    trace = load(events)
    calls = TraceSession(trace).sync
    assert len(calls) == 1 and int(calls.dur[0]) == 14_000_000
    assert "host_sync" not in by_rule(trace)


def test_host_sync_weighs_the_idle_a_short_sync_causes():
    """A 50 µs stream synchronize after which the GPU idles 2 ms before the next launch."""
    events = [
        R("cudaLaunchKernel", 0, 5, corr=1),
        G("gemm", 10, 1000, corr=1),
        X("aten::item", 960, 60),
        R("cudaStreamSynchronize", 965, 50, corr=2),  # returns at 1015, GPU idle from 1010
        X("python work", 1020, 1990),
        R("cudaLaunchKernel", 3010, 5, corr=3),
        G("gemm", 3020, 1000, corr=3),
    ]
    finding = by_rule(load(events))["host_sync"]
    # 2010 µs of the 4010 µs window idle after the sync (5 during it): 50 %, critical.
    assert finding.severity == "critical"
    assert "idle 2.01 ms (50% of its window)" in finding.message
    assert "from aten::item" in finding.message


# -- 5. idle totalled by the CPU operator running during the gaps -----------------------------


def test_idle_spread_over_short_gaps_is_totalled_by_cpu_operator():
    """39 gaps of 80 µs, each while the host sits in hipFree: no single gap is long, the total
    is 3.12 ms, and it belongs to hipFree."""
    trace = free_bound_trace()
    entries = build_summary(trace)["idle_by_cpu"]
    assert entries[0] == {
        "cat": "cuda_runtime",
        "name": "hipFree",
        "gaps": 39,
        "idle_us": 3120.0,
        "longest_us": 80.0,
    }
    assert len(entries) == 1  # every gap is attributed


def test_low_gpu_utilization_names_the_cpu_operator_behind_most_idle():
    finding = by_rule(free_bound_trace())["low_gpu_utilization"]
    assert "the CPU was mostly in hipFree (3.12 ms in 39 gaps)" in finding.message


def test_idle_by_cpu_operator_agrees_with_the_gap_stacks():

    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("aten::linear", 10, 200),
        R("cudaLaunchKernel", 20, 5, corr=1),
        G("k1", 30, 50, corr=1),  # gap 80..300: midpoint 190 inside aten::linear (10..210)
        X("python_work", 250, 200, cat="python_function"),
        R("cudaLaunchKernel", 290, 5, corr=2),
        G("k2", 300, 50, corr=2),  # gap 350..700: midpoint 525, nothing on the thread
        R("cudaLaunchKernel", 690, 5, corr=3),
        G("k3", 700, 10, corr=3),
        G("orphan", 800, 10, corr=99),  # gap 710..800, no launch: the launching thread's slice
    ]
    trace = load(events)
    analysis = TraceSession(trace)
    table = analysis.idle_by_cpu
    gaps = analysis.idle.gaps
    for i in range(len(gaps)):
        stack = analysis.gap_cpu_stack(i)
        if len(stack):
            assert int(table.gap_row[i]) == int(stack[-1])
    named = {trace.strings[int(n)]: int(v) // 1000 for n, v in zip(table.name, table.idle)}
    # 710..800 midpoint 755: ProfilerStep#1 is the innermost slice there.
    assert named == {"aten::linear": 220, "ProfilerStep#1": 350 + 90}


def test_text_summary_and_gap_list_show_idle_by_cpu_operator(write_trace, capsys, monkeypatch):
    from kinetoscope.commands.summary import run_summary

    monkeypatch.setenv("COLUMNS", "200")
    events = json.loads(json.dumps(free_bound_trace_events()))
    path = write_trace({"schemaVersion": 1, "traceEvents": events})
    assert run_summary(str(path)) == 0
    out = capsys.readouterr().out
    assert "GPU idle by what the CPU was running" in out
    table = out[out.index("GPU idle by what the CPU was running") :]  # not "What to fix"
    line = next(text for text in table.splitlines() if "hipFree" in text and "3.120 ms" in text)
    assert "39" in line


async def test_gap_list_screen_totals_idle_by_cpu_operator(write_trace):
    import time

    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.screens import GapListScreen, TraceScreen

    path = write_trace({"schemaVersion": 1, "traceEvents": free_bound_trace_events()})
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(140, 30)) as pilot:
        for kind, key in ((TraceScreen, "i"), (GapListScreen, None)):
            deadline = time.monotonic() + 10
            while not isinstance(pilot.app.screen, kind) and time.monotonic() < deadline:
                await pilot.pause(0.02)
            assert isinstance(pilot.app.screen, kind)
            if key:
                await pilot.pause()
                await pilot.press(key)
        await pilot.pause()
        text = str(pilot.app.screen.query_one("#gap-by-cpu").render())
        assert "All idle by CPU op running: " in text
        assert "hipFree 3.12 ms (100%, 39 gaps)" in text


# -- 6. CPU-only traces ----------------------------------------------------------------------


def cpu_only_trace():
    """A gloo rank: the step's thread runs one operator, then waits while two collectives run
    on the communication thread."""
    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("aten::mm", 10, 100),
        X("gloo:all_reduce", 120, 500, cat="user_annotation", tid=2),
        X("gloo:all_reduce", 600, 200, cat="user_annotation", tid=2),
    ]
    return load(events)


def test_cpu_only_steps_have_cpu_columns():
    trace = cpu_only_trace()
    steps = TraceSession(trace).steps
    assert int(steps.cpu_busy[0]) == 100_000
    assert int(steps.uninstrumented[0]) == 900_000
    assert int(steps.collective[0]) == 680_000
    (step,) = build_summary(trace)["steps"]
    assert (step["cpu_busy_us"], step["uninstrumented_us"], step["collective_us"]) == (
        100.0,
        900.0,
        680.0,
    )


def test_cpu_only_rules_say_collective_wait_and_uninstrumented_time():
    found = by_rule(cpu_only_trace())
    wait = found["collective_wait"]
    assert wait.severity == "critical"  # 68 % of the step
    assert "gloo:all_reduce" in wait.message and "68%" in wait.message
    dark = found["uninstrumented_step_time"]
    assert dark.severity == "warning" and "90%" in dark.message
    assert "record_function" in dark.message
    assert "no_gpu_activity" in found
    assert "host_sync" not in found and "low_gpu_utilization" not in found


def test_cpu_only_text_summary_shows_cpu_columns_not_gpu_idle(write_trace, capsys, monkeypatch):
    from kinetoscope.commands.summary import run_summary

    monkeypatch.setenv("COLUMNS", "200")
    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("aten::mm", 10, 100),
        X("gloo:all_reduce", 120, 500, cat="user_annotation", tid=2),
    ]
    path = write_trace({"schemaVersion": 1, "traceEvents": events})
    assert run_summary(str(path)) == 0
    out = capsys.readouterr().out
    steps = out[out.index("Steps") : out.index("Top operators")]
    assert "GPU idle" not in steps and "uninstrumented" in steps
    assert "900.000 µs 90%" in steps and "500.000 µs 50%" in steps


async def test_cpu_only_overview_steps_table_has_cpu_columns(write_trace):
    import time

    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.overview import OverviewScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("aten::mm", 10, 100),
        X("gloo:all_reduce", 120, 500, cat="user_annotation", tid=2),
    ]
    path = write_trace({"schemaVersion": 1, "traceEvents": events})
    app = KinetoscopeApp(str(path))

    async def until(kind, test=lambda screen: True):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            await pilot.pause(0.02)
            screen = pilot.app.screen
            if isinstance(screen, kind) and test(screen):
                return screen
        raise AssertionError(f"no {kind.__name__}")

    async with app.run_test(size=(140, 30)) as pilot:
        await until(TraceScreen)
        await pilot.pause()
        await pilot.press("v")
        overview = await until(OverviewScreen, lambda screen: screen.steps is not None)
        titles = [c.title for c in overview.table.model.columns]
        assert "ops%" in titles and "uninstr." in titles and "collect." in titles
        assert not any("GPU" in t or "idle" in t or "busy" in t for t in titles)
        (row,) = overview.table.visible_texts()
        assert row[titles.index("ops%")] == "10"
        devices = str(overview.query_one("#overview-devices").render())
        assert "No GPU activity" in devices and "uninstrumented" in devices


# -- 7. what the analysis does not understand, said in info findings -------------------------


@pytest.mark.parametrize("block", [None, 1, 2])
def test_accelerator_events_it_cannot_read_are_named(block, monkeypatch):
    """Also when the rows are counted a few at a time (as a 4 GB trace's are)."""
    if block is not None:
        from kinetoscope.analysis import oddities

        monkeypatch.setattr(oddities, "ROW_BLOCK", block)
    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        X("runFunction - job_prep", 10, 50, cat="mtia_runtime"),
        X("dma_request", 20, 30, cat="mtia_ccp_events", pid=9, tid=1),
        X("dma_request", 60, 30, cat="mtia_ccp_events", pid=9, tid=1),
    ]
    trace = load(events)
    finding = by_rule(trace)["unknown_accelerator_events"]
    assert finding.severity == "info"
    assert "mtia_ccp_events (2)" in finding.message and "mtia_runtime (1)" in finding.message
    assert "counted as CPU work" in finding.message
    assert {trace.cat_of(r) for r in finding.rows} == {"mtia_runtime", "mtia_ccp_events"}


def test_no_gpu_no_steps_and_unmatched_flows_are_info_findings():
    events = [
        R("cudaLaunchKernel", 0, 5, corr=1),
        X("aten::mm", 10, 100),
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 0},
        {
            "ph": "f",
            "id": 7,
            "cat": "ac2g",
            "name": "ac2g",
            "pid": 1,
            "tid": 1,
            "ts": 50,
            "bp": "e",
        },
    ]
    found = by_rule(load(events))
    assert all(
        found[r].severity == "info" for r in ("no_gpu_activity", "no_steps", "unmatched_flows")
    )
    assert "1 runtime calls whose GPU side was not recorded" in found["no_gpu_activity"].message
    assert "prof.step()" in found["no_steps"].message
    flows = found["unmatched_flows"].message
    assert "1 flow end without a start and 1 flow start without an end" in flows


def test_a_complete_gpu_trace_has_none_of_those_findings():
    events = [
        X("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        R("cudaLaunchKernel", 10, 5, corr=1),
        G("gemm", 20, 900, corr=1),
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 10},
        {
            "ph": "f",
            "id": 1,
            "cat": "ac2g",
            "name": "ac2g",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "bp": "e",
        },
    ]
    found = by_rule(load(events))
    for rule in (
        "no_gpu_activity",
        "no_steps",
        "unmatched_flows",
        "unknown_accelerator_events",
        "collective_wait",
        "uninstrumented_step_time",
    ):
        assert rule not in found, rule
