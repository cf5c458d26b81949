"""A trace repeated N times end to end (the shared `scale_trace.py --copies N`, as the 4 GB
benchmark trace is made) must summarise as N times one copy: every count and every total that
adds up over events is exactly N x the one-copy summary's, and what describes one copy (names,
per-step times, kernel means, extremes) is unchanged. Skipped when the tool or the corpus is
absent."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS

REPO = Path(__file__).resolve().parents[1]
SCALER = REPO.parent / "shared" / "tools" / "scale_trace.py"
SOURCES = (
    CORPUS / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz",
    CORPUS / "hta" / "critical_path_alexnet_trace.json.gz",
)
COPIES = (2, 4)

pytestmark = pytest.mark.corpus


def summary_of(path: Path) -> dict[str, Any]:
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import load

    from kinetoscope.present.report_summary import summary_json

    return json.loads(summary_json(build_summary(load(str(path), use_cache=False))))


def rebase(source: Path, target: Path) -> None:
    """The trace with every time moved back by the same whole number of µs, to start near 0.
    At the epoch-sized times real traces carry (1.4e12 µs and more) a float64 holds only a few
    digits past the µs, so the scaler's shifted copies would move some events by a ns or more
    against their neighbours (a child then ends after its parent, and nests elsewhere): the
    copies would not be copies. Near 0 every ns is exact."""
    with gzip.open(source, "rt") as stream:
        document = json.load(stream)
    events = document["traceEvents"] if isinstance(document, dict) else document
    times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    base = math.floor(min(times)) - 1
    for event in events:
        if isinstance(event.get("ts"), (int, float)):
            event["ts"] = round(event["ts"] - base, 3)
    with open(target, "w") as stream:
        json.dump(document, stream)


@pytest.fixture(scope="module", params=SOURCES, ids=lambda p: p.name.split(".")[0])
def scaled(request, tmp_path_factory) -> dict[int, dict[str, Any]]:
    """{copies: the summary of the source repeated that many times} for 1 and every COPIES."""
    source: Path = request.param
    if not SCALER.is_file():
        pytest.skip("../shared/tools/scale_trace.py is absent")
    if not source.is_file():
        pytest.skip(f"{source.name} is absent from ../shared/corpus")
    folder = tmp_path_factory.mktemp("scaled")
    rebased = folder / "rebased.json"
    rebase(source, rebased)
    out: dict[int, dict[str, Any]] = {}
    for copies in (1, *COPIES):
        target = folder / f"x{copies}.json"
        subprocess.run(
            [sys.executable, str(SCALER), str(rebased), str(target), "--copies", str(copies)],
            check=True,
            capture_output=True,
        )
        out[copies] = summary_of(target)
    return out


def times(n: int, value: float) -> Any:
    """n x value, as the summary rounds it (µs to the ns: 3 decimals)."""
    return pytest.approx(round(n * value, 3), rel=1e-12, abs=1e-9)


def by_key(rows: list[dict[str, Any]], *keys: str) -> dict[tuple, dict[str, Any]]:
    table = {tuple(json.dumps(row[k]) for k in keys): row for row in rows}
    assert len(table) == len(rows), f"rows not unique by {keys}"
    return table


def check_scaled_rows(
    one: list[dict], many: list[dict], n: int, keys: tuple[str, ...], summed: tuple, same: tuple
) -> None:
    a, b = by_key(one, *keys), by_key(many, *keys)
    assert a.keys() == b.keys()
    for key, row in a.items():
        for field in summed:
            if row.get(field) is not None:
                assert b[key][field] == times(n, row[field]), (key, field)
        for field in same:
            assert b[key][field] == row[field], (key, field)


@pytest.mark.parametrize("n", COPIES)
def test_event_counts_scale_exactly(scaled, n):
    one, many = scaled[1]["trace"], scaled[n]["trace"]
    metadata = one["by_phase"].get("M", 0)  # written once, not per copy
    assert one["events"] > metadata > 0
    assert many["events"] - metadata == n * (one["events"] - metadata)
    assert many["by_phase"].get("M", 0) == metadata
    assert {p: c for p, c in many["by_phase"].items() if p != "M"} == {
        p: n * c for p, c in one["by_phase"].items() if p != "M"
    }
    assert many["by_category"] == {cat: n * c for cat, c in one["by_category"].items()}


@pytest.mark.parametrize("n", COPIES)
def test_gpu_totals_scale(scaled, n):
    one, many = scaled[1]["gpu"], scaled[n]["gpu"]
    assert [g["device"] for g in many] == [g["device"] for g in one]
    for a, b in zip(one, many):
        for field in ("kernels", "memcpys", "memsets"):
            assert b[field] == n * a[field], field
        assert b["busy_us"] == times(n, a["busy_us"])


@pytest.mark.parametrize("n", COPIES)
def test_operator_and_kernel_tables_scale(scaled, n):
    one, many = scaled[1], scaled[n]
    assert one["operators"] and one["kernels"]
    check_scaled_rows(
        one["operators"],
        many["operators"],
        n,
        ("cat", "name"),
        ("count", "incl_us", "excl_us", "gpu_self_us", "gpu_total_us"),
        (),
    )
    check_scaled_rows(
        one["kernels"],
        many["kernels"],
        n,
        ("cat", "name"),
        ("count", "total_us"),
        ("mean_us", "min_us", "max_us"),
    )
    check_scaled_rows(
        one["memory_ops"],
        many["memory_ops"],
        n,
        ("device_type", "device_id", "cat", "name"),
        ("allocations", "allocated_bytes", "frees", "freed_bytes", "self_net_bytes"),
        (),
    )


@pytest.mark.parametrize("n", COPIES)
def test_per_copy_quantities_unchanged(scaled, n):
    one, many = scaled[1], scaled[n]
    # Each copy's steps, in order: the same names and times, n times over.
    fields = [k for k in (one["steps"] or [{}])[0] if k != "start_us"]
    per_copy = [{k: s[k] for k in fields} for s in one["steps"]]
    assert [{k: s[k] for k in fields} for s in many["steps"]] == per_copy * n
    # Sync sites: the same calls at the same sites, n times as many.
    check_scaled_rows(
        one["sync"], many["sync"], n, ("call", "cause", "site"), ("count", "total_us"), ("max_us",)
    )
    # The compile lens: totals add up over the copies.
    a, b = one["compile"], many["compile"]
    assert b["total_us"] == times(n, a["total_us"])
    for field in ("launch_calls", "kernels", "graph_launches", "graph_kernels"):
        assert b["launch"][field] == n * a["launch"][field], field
    assert b["launch"]["cpu_us"] == times(n, a["launch"]["cpu_us"])
    assert b["fusion"]["kernels"] == n * a["fusion"]["kernels"]
    assert b["fusion"]["short_kernels"] == n * a["fusion"]["short_kernels"]
