"""Memory per operator and host syncs on the real traces: invariants on every corpus file, and
the memory and sync views opened on a few of them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CORPUS, corpus_params
from kinetoscope.analysis import TraceSession
from kinetoscope.analysis.memory_ops import FREED
from kinetoscope.analysis.sync import group_sites
from kinetoscope.parser import load
from kinetoscope.parser.model import NO_VALUE
from kinetoscope.tui.trace.app import KinetoscopeApp
from kinetoscope.tui.trace.memory_view import MemoryChart, MemoryScreen
from kinetoscope.tui.trace.screens import TraceScreen
from kinetoscope.tui.trace.sync_view import SyncScreen
from kinetoscope.tui.widgets.timeline import Timeline
from pilot_helpers import settle
from textual.widgets import DataTable, Static

pytestmark = pytest.mark.corpus


@pytest.mark.parametrize("path", corpus_params())
def test_memory_and_sync_invariants(path):
    trace = load(str(path))
    analysis = TraceSession(trace)
    ops = analysis.memory_ops
    for dev in ops.devices:
        if not len(dev):
            continue
        # Each event moves the curve by its bytes (the totals agree with the event order).
        if dev.allocated_recorded:
            assert (np.diff(dev.allocated) == dev.bytes[1:]).all()
        assert int(dev.allocated[dev.peak]) == int(dev.allocated.max())
        owned = dev.owner >= 0
        table = dev.ops
        allocs = dev.bytes > 0
        assert int(table.allocated.sum()) == int(dev.bytes[owned & allocs].sum())
        assert int(table.allocations.sum()) == int((owned & allocs).sum())
        assert int(table.self_net.sum()) == int(dev.bytes[owned].sum())
        assert (table.incl_allocated >= table.allocated).all()
        known = table.peak_live != NO_VALUE
        assert (table.peak_live[known] <= dev.allocated.max()).all()
        allocations = dev.allocations
        freed = allocations.state == FREED
        assert (allocations.lifetime[freed] >= 0).all()
        assert (allocations.free[freed] > allocations.event[freed]).all()
        assert (allocations.lifetime[~freed] == -1).all()

    calls = analysis.sync
    assert analysis.classes.runtime[calls.rows].all()
    assert (calls.idle_after >= 0).all()
    if len(calls.step_rows):
        assert (calls.step_blocked <= trace.dur[calls.step_rows]).all()
    sites = group_sites(trace, calls)
    assert sum(s.total for s in sites) == int(calls.dur.sum())
    assert sum(s.count for s in sites) == len(calls)


OWLV2 = CORPUS / "tracelens" / "h100_google_owlv2-large-patch14-ensemble__1016001.json.gz"
BERT = CORPUS / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
ALEXNET = CORPUS / "hta" / "critical_path_alexnet_trace.json.gz"


@pytest.mark.skipif(not BERT.exists(), reason="corpus absent")
@pytest.mark.parametrize("path", [BERT, OWLV2], ids=["bert-small", "owlv2"])
async def test_memory_view_finds_the_peak_and_its_operator(path):
    trace = load(str(path))
    dev = TraceSession(trace).memory_ops.primary
    owner = trace.name_of(int(dev.owner[dev.peak]))
    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("p")
        screen = await settle(pilot, MemoryScreen)
        title = str(screen.query_one("#memory-title", Static).render())
        assert "CUDA 0" in title and owner[:20] in title
        chart = screen.query_one(MemoryChart)
        assert chart.cursor_time == int(dev.ts[dev.peak]) - screen.data.origin
        assert screen.query_one(DataTable).row_count > 0
        await pilot.press("enter")
        trace_screen = await settle(pilot, TraceScreen)
        selected = trace_screen.query_one(Timeline).selected_row
        assert trace.name_of(selected) == owner


@pytest.mark.skipif(not ALEXNET.exists(), reason="corpus absent")
async def test_sync_view_shows_the_syncs_of_a_real_trace():
    app = KinetoscopeApp(str(ALEXNET))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, TraceScreen)
        await pilot.press("b")
        screen = await settle(pilot, SyncScreen)
        calls = screen.calls
        # 55 syncs, memcpys and stream waits, 15 cudaFree, 16 async copies of pageable memory
        # and 5 cudaMalloc the GPU idled through.
        assert len(calls) == 91 and int((calls.gpu_sync >= 0).sum()) == 41
        assert screen.query_one(DataTable).row_count == 91
        title = str(screen.query_one("#sync-title", Static).render())
        assert "91 blocking calls" in title and "41 with a GPU-side cuda_sync record" in title
        await pilot.press("enter")
        trace_screen = await settle(pilot, TraceScreen)
        worst = int(calls.rows[calls.worst()[0]])
        assert trace_screen.query_one(Timeline).selected_row == worst
