"""Memory per operator that cannot be misread (analysis/memory_ops.py `_lifetimes`): each
allocation (matched by address to its free) counts for the operator that allocated it, as
freed by itself, left for others to free (and who freed the most), or never freed; `held at
once` is the most of its allocations live at one time, which no sum over the trace can exceed
the device's peak by."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import load, loads

MB = 1 << 20


def op(name: str, ts: int, dur: int) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def mem(ts: int, addr: int | None, nbytes: int, total: int) -> dict:
    args = {"Device Type": 1, "Device Id": 0, "Bytes": nbytes, "Total Allocated": total}
    if addr is not None:
        args["Addr"] = addr
    return {
        "ph": "i",
        "s": "t",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "args": args,
    }


def known_trace(addresses: bool = True) -> dict:
    """Truth: aten::A allocates a1, a2 (100 MB each), aten::B frees a1, A allocates a3 and frees
    it itself, B frees a2; aten::C allocates 50 MB that nothing frees; aten::D allocates 30 MB
    that is freed outside any operator. A holds at most 200 MB at once, as does the device."""
    a = (lambda x: x) if addresses else (lambda x: None)
    events = [
        op("aten::A", 0, 10),
        mem(1, a(0x1000), 100 * MB, 100 * MB),
        mem(2, a(0x2000), 100 * MB, 200 * MB),
        op("aten::B", 20, 10),
        mem(21, a(0x1000), -100 * MB, 100 * MB),
        op("aten::A", 40, 10),
        mem(41, a(0x3000), 100 * MB, 200 * MB),
        mem(42, a(0x3000), -100 * MB, 100 * MB),
        op("aten::B", 60, 10),
        mem(61, a(0x2000), -100 * MB, 0),
        op("aten::C", 80, 10),
        mem(81, a(0x4000), 50 * MB, 50 * MB),
        op("aten::D", 100, 10),
        mem(101, a(0x5000), 30 * MB, 80 * MB),
        mem(200, a(0x5000), -30 * MB, 50 * MB),  # outside any operator
    ]
    return {"schemaVersion": 1, "traceEvents": events}


def rows_by_name(document: dict) -> dict[str, dict]:
    return {r["name"]: r for r in document["memory_ops"] if r["device_type"] == 1}


def test_allocations_freed_by_another_operator_are_its_own_row_and_named():
    rows = rows_by_name(build_summary(loads(json.dumps(known_trace()).encode())))
    a = rows["aten::A"]
    assert a["allocated_bytes"] == 300 * MB
    assert a["freed_own_bytes"] == 100 * MB  # a3
    assert a["freed_by_others_bytes"] == 200 * MB  # a1, a2
    assert a["freed_by_others_allocations"] == 2
    assert a["mostly_freed_by"] == {"cat": "cpu_op", "name": "aten::B", "bytes": 200 * MB}
    assert a["held_at_most_bytes"] == 200 * MB
    assert a["unfreed_bytes"] == 0
    # The old self net read as a gain: +300 MB allocated, 100 MB freed, while the peak is 200.
    assert a["self_net_bytes"] == 200 * MB
    b = rows.get("aten::B")
    assert b is None or (b["allocated_bytes"] == 0 and b["held_at_most_bytes"] == 0)
    c = rows["aten::C"]
    assert (c["freed_own_bytes"], c["freed_by_others_bytes"]) == (0, 0)
    assert c["unfreed_bytes"] == 50 * MB and c["held_at_most_bytes"] == 50 * MB
    assert c["mostly_freed_by"] is None
    d = rows["aten::D"]
    assert d["freed_by_others_bytes"] == 30 * MB
    assert d["mostly_freed_by"] == {"cat": None, "name": None, "bytes": 30 * MB}


def test_an_operator_that_frees_what_it_allocates_left_nothing_for_others():
    events = [op("aten::X", 0, 20)]
    for i in range(5):
        events += [mem(1 + 2 * i, 0x10, 10 * MB, 10 * MB), mem(2 + 2 * i, 0x10, -10 * MB, 0)]
    rows = rows_by_name(build_summary(loads(json.dumps({"traceEvents": events}).encode())))
    x = rows["aten::X"]
    assert x["allocated_bytes"] == 50 * MB and x["freed_own_bytes"] == 50 * MB
    assert x["freed_by_others_bytes"] == 0 and x["mostly_freed_by"] is None
    assert x["held_at_most_bytes"] == 10 * MB  # five times 10 MB, one at a time


def test_without_addresses_nothing_is_claimed():
    rows = rows_by_name(build_summary(loads(json.dumps(known_trace(False)).encode())))
    for row in rows.values():
        assert row["held_at_most_bytes"] is None and row["freed_own_bytes"] is None
        assert row["freed_by_others_bytes"] is None and row["mostly_freed_by"] is None


def _summary_text(path, capsys) -> str:
    from kinetoscope.commands.summary import run_summary

    assert run_summary(str(path), width=140) == 0
    return capsys.readouterr().out


def test_summary_text_shows_lifetimes_not_net(write_trace, capsys):
    out = _summary_text(write_trace(known_trace()), capsys)
    table = out[out.index("Top allocating operators") :]
    assert "self net" not in table and "total net" not in table
    assert "mostly freed by" in table and "at once" in table
    line = next(row for row in table.splitlines() if "aten::A" in row)
    cells = [c.strip() for c in line.strip("│").split("│")]
    # operator, allocs, allocated, freed own, by others, at once, peak live, mostly freed by
    assert cells[:6] == ["aten::A", "3", "300.00 MiB", "100.00 MiB", "200.00 MiB", "200.00 MiB"]
    assert cells[-1] == "aten::B"
    out = _summary_text(write_trace(known_trace(False)), capsys)
    table = out[out.index("Top allocating operators") :]
    assert "records no addresses" in " ".join(table.split())
    assert "self net" not in table and "by others" not in table


def test_lifetimes_are_vectorised_over_many_allocations():
    """A million events: no Python loop per allocation (it would take minutes)."""
    import numpy as np
    from kinetoscope.analysis import memory_ops

    n = 500_000
    owner_pos = np.repeat(np.arange(4), n // 2)  # four slices, each of its own group
    group_of_pos = np.arange(4, dtype=np.int32)
    nbytes = np.tile([64, -64], n)
    event = np.arange(0, 2 * n, 2, dtype=np.int64)
    allocations = memory_ops.Allocations(
        event=event,
        free=event + 1,
        state=np.zeros(n, dtype=np.int8),
        lifetime=np.ones(n, dtype=np.int64),
        frees_without_allocation=0,
        addresses_known=True,
    )
    out = memory_ops._lifetimes(group_of_pos.__getitem__, owner_pos, nbytes, allocations, 4, True)
    # Each slice's events: its allocations freed by itself, except where a pair straddles two.
    assert int(out["freed_own"].sum()) + int(out["handed_off"].sum()) == 64 * n
    assert out["held_most"].tolist() == [64, 64, 64, 64]


@pytest.mark.corpus
def test_v100_corpus_trace_claims_no_lifetimes_it_cannot_know():
    path = CORPUS / "kineto" / "2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    document = build_summary(load(str(path), write_cache=False))
    rows = [r for r in document["memory_ops"] if r["device_type"] == 1]
    assert rows  # aten::empty allocates 31.67 GiB over the trace; the curve peaks at 2.60
    for row in rows:
        assert row["held_at_most_bytes"] is None  # no addresses: not matched, not claimed


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name",
    [
        "tracelens/mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    ],
)
def test_corpus_rows_add_up_and_never_hold_more_than_the_peak(name):
    path = CORPUS / name
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    session = TraceSession(load(str(path), write_cache=False))
    for dev in session.memory_ops.devices:
        if not dev.allocations.addresses_known or dev.peak < 0:
            continue
        peak = int(dev.allocated[dev.peak])
        ops = dev.ops
        for g in ops.active().tolist():
            assert int(ops.held_most[g]) <= peak
            parts = int(ops.freed_own[g]) + int(ops.handed_off[g]) + int(ops.unfreed_bytes[g])
            assert parts <= int(ops.allocated[g])
        # Every matched free is counted once: on the allocating operator's row.
        assert int(ops.freed_own.sum()) + int(ops.handed_off.sum()) <= int(ops.allocated.sum())
