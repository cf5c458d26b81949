"""`kinetoscope export`: a window of one trace, checked against the original independently.

Every check reads the original file again with a plain whole-file decode (not the export's
run-by-run re-read) and computes the expected events from the original model with its own
code: the overlap test, the correlation closure by correlation value, the enclosing slices by
the spec's nesting, the flows by the slice each flow event lies in. docs/export.md.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tracemalloc
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import CORPUS, SAMPLES
from kinetoscope.analysis.ranges import kernels_in_range, operators_in_range
from kinetoscope.analysis.session import TraceSession
from kinetoscope.parser import reader as reader_module
from kinetoscope.parser import source as source_module
from kinetoscope.parser.convert import to_ns
from kinetoscope.parser.model import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_RUNTIME,
    NO_VALUE,
    PH_COMPLETE,
)

from kinetoscope import parser
from kinetoscope.export.crop import (
    BASELINE_NOTE,
    Crop,
    CropStats,
    ExportError,
    Window,
    crop_trace,
    describe,
    export_trace,
    gap_window,
    parse_time,
    parse_window,
    step_window,
    write_crop,
)
from kinetoscope.export.crop import (
    parse_step_numbers as parse_steps,
)
from kinetoscope.export.crop import (
    us_bytes as us_text,
)

SYNTHETIC = SAMPLES / "synthetic_gpu_training.pt.trace.json.gz"
DEMO_CPU = SAMPLES / "demo_cpu.pt.trace.json.gz"

RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
FLOW_PHASES = ("s", "t", "f")
RESTAMPED = ("Iteration Start", "Record Window End")


# -- the original, read independently ----------------------------------------------------------


def read_original(path: Path) -> tuple[dict[str, bytes], list[bytes]]:
    """(top-level keys but traceEvents as raw text, every event's raw text in file order)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    data = data.lstrip(b"\xef\xbb\xbf").strip()
    if data.startswith(b"["):
        return {}, [bytes(e) for e in RAW_LIST.decode(data)]
    top = RAW_OBJECT.decode(data)
    events = [bytes(e) for e in RAW_LIST.decode(bytes(top.pop("traceEvents")))]
    return {k: bytes(v) for k, v in top.items()}, events


def ns_of(text: bytes | Any) -> int:
    """A JSON number of µs -> exact ns (as Decimal: no float)."""
    value = Decimal(bytes(text).decode() if isinstance(text, (bytes, msgspec.Raw)) else str(text))
    ns = value * 1000
    return int(ns.to_integral_value())


def read_ns(text: Any) -> int:
    """A JSON number of µs -> ns as a reader gets it: an integer exactly, any other number
    decoded as a double, then rounded."""
    return to_ns(json.loads(bytes(text)))


def fields(raw: bytes) -> dict[str, Any]:
    return json.loads(raw)


def without_times(raw: bytes) -> bytes:
    """The event's text with ts and dur left out (what clipping must not touch)."""
    obj = RAW_OBJECT.decode(raw)
    obj.pop("ts", None)
    obj.pop("dur", None)
    return msgspec.json.encode(obj)


class Expected:
    """What a crop of `path` to `window` must hold, computed from the original."""

    def __init__(self, path: Path, window: Window) -> None:
        self.path = path
        self.window = window
        self.top, self.raw = read_original(path)
        self.trace = parser.load(str(path), use_cache=False)
        self.session = TraceSession(self.trace)
        trace = self.trace
        t0, t1 = window.start_ns, window.end_ns
        kind = trace.row_kind()
        start, dur = trace.start, trace.dur
        end = start + dur
        is_x = trace.ph == PH_COMPLETE
        kept = set()
        for row in np.flatnonzero(is_x).tolist():
            s, e = int(start[row]), int(end[row])
            if min(e, t1) - max(s, t0) > 0 or (s == e and t0 <= s <= t1):
                kept.add(row)
        self.in_window = set(kept)
        # The correlation closure, by correlation value: the first runtime call carrying a
        # correlation is its launch; the GPU activities carrying it are what it launched.
        first_runtime: dict[int, int] = {}
        gpu_by_corr: dict[int, list[int]] = {}
        for row in np.flatnonzero(trace.corr != NO_VALUE).tolist():
            corr = int(trace.corr[row])
            if kind[row] == KIND_RUNTIME:
                first_runtime.setdefault(corr, row)
            elif kind[row] in (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET):
                gpu_by_corr.setdefault(corr, []).append(row)
        launch_corr = {row: corr for corr, row in first_runtime.items()}
        nesting = self.session.nesting
        todo = list(kept)
        while todo:
            row = todo.pop()
            partners = []
            corr = int(trace.corr[row])
            if row in launch_corr:
                partners += gpu_by_corr.get(launch_corr[row], [])
            if kind[row] in (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET) and corr in first_runtime:
                partners.append(first_runtime[corr])
            partners += nesting.ancestors(row)
            for other in partners:
                if other not in kept:
                    kept.add(other)
                    todo.append(other)
        self.slices = kept
        # Flows: every event must lie in a kept slice of its thread, the innermost one there.
        # Its thread: its own lane, or where no slice there holds it, the lanes of the same pid
        # and tid written as text ("24572" and 24572, as Perfetto reads them), in lane order.
        lanes: dict[int, np.ndarray] = {}
        x_rows = np.flatnonzero(is_x)
        for lane in np.unique(trace.lane[x_rows]).tolist():
            lanes[lane] = x_rows[trace.lane[x_rows] == lane]
        same_thread = thread_lanes(trace)
        depth = nesting.depth

        def innermost(rows: np.ndarray, ts: int) -> int | None:
            holders = rows[(start[rows] <= ts) & (end[rows] >= ts)]
            if not len(holders):
                return None
            return max(holders.tolist(), key=lambda x: (int(depth[x]), int(start[x]), -int(end[x])))

        groups: dict[tuple[int, int], list[int]] = {}
        flow_rows = np.flatnonzero(np.isin(trace.ph, [ord(p) for p in FLOW_PHASES]))
        for row in flow_rows.tolist():
            if trace.flow_id[row] != NO_VALUE:
                groups.setdefault((int(trace.cat[row]), int(trace.flow_id[row])), []).append(row)
        self.flows: set[int] = set()
        self.flow_groups = 0
        empty = np.zeros(0, dtype=np.int64)
        for rows in groups.values():
            phases = {chr(trace.ph[r]) for r in rows}
            if "s" not in phases or "f" not in phases:
                continue
            bound = True
            for r in rows:
                ts = int(start[r])
                holders = (innermost(lanes.get(n, empty), ts) for n in same_thread[trace.lane[r]])
                holder = next((h for h in holders if h is not None), None)
                if holder is None or holder not in kept:
                    bound = False
                    break
            if bound:
                self.flows.update(rows)
                self.flow_groups += 1
        # Instants and everything else that is not X or a flow: inside the closed window.
        self.others: set[int] = set()
        self.restamped: set[int] = set()
        for row in np.flatnonzero(~is_x & ~np.isin(trace.ph, [ord(p) for p in FLOW_PHASES])):
            name = trace.name_of(int(row))
            if chr(trace.ph[row]) in "iI" and (
                name.startswith(RESTAMPED[0]) or name == RESTAMPED[1]
            ):
                self.restamped.add(int(row))
            elif t0 <= start[row] <= t1:
                self.others.add(int(row))

    def raw_of(self, rows: set[int]) -> Counter:
        return Counter(self.raw[int(self.trace.ordinal[r])] for r in rows)

    def metadata(self) -> Counter:
        return Counter(e for e in self.raw if fields(e).get("ph") == "M")

    def memory_before(self) -> dict[tuple[Any, Any], tuple[Any, Any]]:
        """Per (Device Type, Device Id): the totals as they stood at the window's start."""
        last: dict[tuple[Any, Any], tuple[int, int, Any, Any]] = {}
        for index, raw in enumerate(self.raw):
            event = fields(raw)
            if event.get("name") != "[memory]" or event.get("ph") not in ("i", "I"):
                continue
            if not isinstance(event.get("ts"), (int, float)):
                continue
            ts = ns_of(RAW_OBJECT.decode(raw)["ts"])
            if ts >= self.window.start_ns:
                continue
            args = event.get("args", {})
            key = (args.get("Device Type"), args.get("Device Id"))
            if key not in last or (ts, index) > last[key][:2]:
                was = last.get(key, (0, 0, None, None))
                alloc = args.get("Total Allocated", was[2])
                reserved = args.get("Total Reserved", was[3])
                last[key] = (ts, index, alloc, reserved)
        return {key: (v[2], v[3]) for key, v in last.items()}


def range_tables(trace: parser.Trace, window: Window) -> tuple[dict, dict]:
    """The operator and kernel tables over the window, keyed by (cat, name), non-empty rows."""
    session = TraceSession(trace)
    t0, t1 = window.start_ns, window.end_ns
    ops = operators_in_range(trace, session.nesting, session.cpu_groups, session.links, t0, t1)
    kernels = kernels_in_range(trace, session.kernels, session.links, t0, t1)

    def keyed(table: Any, columns: tuple[str, ...]) -> dict:
        out = {}
        for g in range(len(table.groups)):
            values = tuple(int(getattr(table, c)[g]) for c in columns)
            if any(values):
                key = (trace.strings[table.groups.cat[g]], trace.strings[table.groups.name[g]])
                out[key] = values
        return out

    return (
        keyed(ops, ("count", "incl", "excl", "gpu_self", "gpu_total")),
        keyed(kernels, ("count", "total", "min", "max")),
    )


def check_crop(path: Path, window: Window, tmp_path: Path, clip: bool, gz: bool = False) -> Any:
    """Crop, write, re-load, and check everything the crop must hold. Returns the crop."""
    expected = Expected(path, window)
    crop = crop_trace(str(path), window, clip=clip)
    out = tmp_path / ("crop.json.gz" if gz else "crop.json")
    write_crop(crop, str(out))
    top, events = read_original(out)  # the crop is JSON, decoded whole
    reloaded = parser.load(str(out), use_cache=False)
    assert reloaded.complete and not [w for w in reloaded.warnings if "skipped" in w]

    # Top-level keys and metadata: byte for byte.
    assert top == expected.top and list(top) == list(expected.top)
    crop_meta = Counter(e for e in events if fields(e).get("ph") == "M")
    assert crop_meta == expected.metadata()

    baseline = [e for e in events if fields(e).get("args", {}).get("Export") == BASELINE_NOTE]
    restamped = [
        e
        for e in events
        if fields(e).get("ph") in ("i", "I")
        and str(fields(e).get("name", "")).startswith(RESTAMPED)
    ]
    rest = Counter(events) - crop_meta - Counter(baseline) - Counter(restamped)
    t0, t1 = window.start_ns, window.end_ns
    # The times written at the window's edges: the edges, or the nearest times just outside
    # the window that a reader reads back exactly.
    e0, e1 = crop.edges.start_ns, crop.edges.end_ns
    assert e0 <= t0 < e0 + 4096 and e1 - 4096 < t1 <= e1
    assert reread(e0) == e0 and reread(e1) == e1
    if round_trips(window):
        assert (e0, e1) == (t0, t1)

    # The events: exactly the expected ones.
    if not clip:
        want = expected.raw_of(expected.slices | expected.flows | expected.others)
        assert rest == want
    else:
        # Slices in the window are clipped to it, except on a side where they enclose a slice
        # kept outside the window. Times are compared as a reader reads them (JSON numbers as
        # doubles, as kinetoscope's parser and Perfetto do): the crop's clipped slice starts
        # or ends at the window's edge and ends or starts where the original did for a reader;
        # what changed is written with exactly three decimals.
        trace = expected.trace
        nesting = expected.session.nesting
        # text -> the (starts, ends) each kept slice of that text may have in the crop.
        want_x: dict[bytes, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {}
        for row in expected.slices:
            raw = expected.raw[int(trace.ordinal[row])]
            event = RAW_OBJECT.decode(raw)
            s = read_ns(event["ts"])
            e = s + read_ns(event.get("dur", b"0"))
            starts, ends = (s,), (e,)
            if row in expected.in_window:
                # Slices it encloses that are kept although outside the window.
                inner = [
                    d
                    for d in nesting.descendants(row).tolist()
                    if d in expected.slices and d not in expected.in_window
                ]
                # Clipped, or (where clipping would nest it differently) as written.
                if s < t0 and all(trace.start[d] >= t0 for d in inner):
                    starts = (e0, s)
                if e > t1 and all(trace.start[d] + trace.dur[d] <= t1 for d in inner):
                    ends = (e1, e)
            want_x.setdefault(without_times(raw), []).append((starts, ends))
        got_x: Counter = Counter()
        got_other: Counter = Counter()
        originals = set(expected.raw)
        times_as_written = {
            without_times(raw): RAW_OBJECT.decode(raw)
            for raw in expected.raw_of(expected.slices | expected.flows)
        }
        for raw, count in rest.items():
            event = RAW_OBJECT.decode(raw)
            if raw not in originals:  # a time written again has exactly three decimals
                original = times_as_written[without_times(raw)]
                for key in ("ts", "dur"):
                    text = bytes(event.get(key, b""))
                    if text != bytes(original.get(key, b"")):
                        assert re.fullmatch(rb"-?\d+\.\d{3}", text), raw[:200]
            if bytes(event.get("ph", b"")) == b'"X"':
                s = read_ns(event["ts"])
                got_x[(without_times(raw), s, s + read_ns(event.get("dur", b"0")))] += count
            else:
                got_other[without_times(raw)] += count
        clipped = 0
        for (text, s, e), count in got_x.items():
            options = want_x.get(text, [])
            for _ in range(count):
                match = [i for i, (ss, es) in enumerate(options) if s in ss and e in es]
                assert match, f"a slice not expected, or clipped wrongly: {text[:150]!r} {s} {e}"
                starts, ends = options.pop(match[0])
                clipped += (s != starts[-1]) or (e != ends[-1])
        assert not any(want_x.values()), "slices missing from the crop"
        assert clipped == crop.stats.clipped
        want_other = Counter(
            without_times(expected.raw[int(trace.ordinal[r])])
            for r in expected.flows | expected.others
        )
        assert got_other == want_other
    # Re-stamped markers at the window's start / end.
    assert len(restamped) == len(expected.restamped)
    for raw in restamped:
        event = RAW_OBJECT.decode(raw)
        name = json.loads(bytes(event["name"]))
        # Exactly on the window's bounds (not the readable edges the clipped slices use).
        assert ns_of(event["ts"]) == (t0 if name.startswith(RESTAMPED[0]) else t1)

    # No flow end or start orphaned: each flow has both, and each of its events lies in a slice
    # of its lane in the crop.
    check_no_orphan_flows(reloaded)

    # The memory baseline: one per device with events before the window, at its start.
    before = expected.memory_before()
    got = {}
    for raw in baseline:
        event = fields(raw)
        assert ns_of(RAW_OBJECT.decode(raw)["ts"]) == t0
        args = event["args"]
        assert args["Bytes"] == 0
        got[(args.get("Device Type"), args.get("Device Id"))] = (
            args.get("Total Allocated"),
            args.get("Total Reserved"),
        )
    assert got == before

    # Range statistics over the window: the crop's equal the original's.
    assert range_tables(reloaded, window) == range_tables(expected.trace, window)
    return crop, expected, reloaded, out


def thread_lanes(trace: parser.Trace) -> dict[int, list[int]]:
    """Per lane, the lanes a flow event on it is bound in, in the order tried: its own, then
    the others of the same pid and tid written as text (`24572` and `"24572"`) that hold
    slices, in lane order."""
    with_slices = set(np.unique(trace.lane[trace.ph == PH_COMPLETE]).tolist())
    by_text: dict[tuple[str, str], list[int]] = {}
    for lane in trace.lanes:
        by_text.setdefault((str(lane.pid), str(lane.tid)), []).append(lane.id)
    return {
        lane.id: [lane.id]
        + [
            other
            for other in by_text[(str(lane.pid), str(lane.tid))]
            if other != lane.id and other in with_slices
        ]
        for lane in trace.lanes
    }


def check_no_orphan_flows(trace: parser.Trace) -> None:
    """Each flow has a start and an end, and each of its events lies in a slice of its thread
    (its lane, or a lane of the same pid and tid as text: `thread_lanes`)."""
    flows: dict[tuple[int, int], list[int]] = {}
    for row in np.flatnonzero(np.isin(trace.ph, [ord(p) for p in FLOW_PHASES])).tolist():
        flows.setdefault((int(trace.cat[row]), int(trace.flow_id[row])), []).append(row)
    is_x = np.flatnonzero(trace.ph == PH_COMPLETE)
    end = trace.start + trace.dur
    same_thread = thread_lanes(trace)
    for rows in flows.values():
        phases = {chr(trace.ph[r]) for r in rows}
        assert "s" in phases and "f" in phases, "an orphan flow event"
        for r in rows:
            mine = is_x[np.isin(trace.lane[is_x], same_thread[int(trace.lane[r])])]
            ts = trace.start[r]
            assert ((trace.start[mine] <= ts) & (end[mine] >= ts)).any()


# -- the cases ---------------------------------------------------------------------------------


def corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.skip("../shared/corpus is absent")
    return path


def reread(ns: int) -> int:
    """What the parser reads back for a time written as `us_text(ns)`: JSON numbers are
    decoded as floats, which cannot hold every ns of epoch-based times (~1.7e18 ns)."""
    return to_ns(float(us_text(ns).decode()))


def round_trips(window: Window) -> bool:
    return all(reread(v) == v for v in (window.start_ns, window.end_ns))


def middle_window(path: Path, lo: float = 0.4, hi: float = 0.6) -> Window:
    """A window over the middle of the trace, its ends at times the parser reads back exactly
    (so the crop's clipped slices can be compared with the original's clipped times)."""
    trace = parser.load(str(path), use_cache=False)
    first, last = int(trace.slice_start_min), int(trace.slice_end_max)
    span = last - first
    ends = []
    for value in (first + int(span * lo), first + int(span * hi)):
        for _ in range(4):
            value = reread(value)
        ends.append(value)
    window = Window(*ends)
    assert round_trips(window)
    return window


CORPUS_WINDOWS = [
    "hta/ns_resolution_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    "hta/amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/nccl_parser_config_nccl_data.json.gz",
    "hta/critical_path_alexnet_trace.json.gz",
    "tracelens/mi210_gpu_only_trace.json.gz",
    "kineto/2021-05_tb_test_gpu_metrics_input.json.gz",
    "kineto/2026-04_libkineto_test_before_fix_trace.json.gz",
    "tracelens/vllm_decode_full_graph_execution.json.gz",
]


@pytest.mark.corpus
@pytest.mark.parametrize("clip", [False, True], ids=["whole", "clip"])
@pytest.mark.parametrize("name", CORPUS_WINDOWS)
def test_corpus_window(name, clip, tmp_path):
    path = corpus(name)
    check_crop(path, middle_window(path), tmp_path, clip)


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name",
    [
        "hta/nccl_parser_config_nccl_data.json.gz",
        "hta/amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    ],
)
def test_corpus_step(name, tmp_path):
    path = corpus(name)
    session = TraceSession(parser.load(str(path), use_cache=False))
    names = sorted({session.trace.name_of(r) for r in session.steps.rows.tolist()})
    number = int(names[-1].split("#")[1])
    window = step_window(session, [number])
    row = session.steps.rows[
        [session.trace.name_of(r) for r in session.steps.rows].index(names[-1])
    ]
    assert window.start_ns == int(session.trace.start[row])
    check_crop(path, window, tmp_path, clip=False, gz=True)
    check_crop(path, window, tmp_path, clip=True)


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name",
    [
        "hta/nccl_parser_config_nccl_data.json.gz",
        "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    ],
)
def test_corpus_around_gap(name, tmp_path):
    path = corpus(name)
    session = TraceSession(parser.load(str(path), use_cache=False))
    gaps = session.idle.gaps
    longest = int(np.argmax(gaps.length))
    window = gap_window(session, 1)
    assert window.start_ns <= gaps.start[longest] and gaps.end[longest] <= window.end_ns
    check_crop(path, window, tmp_path, clip=False)


@pytest.mark.corpus
def test_corpus_clip_edges_a_reader_reads_back(tmp_path):
    """Epoch-based times (~1.7e18 ns) are read as doubles, to some 256 ns: the edges of a gap's
    window are not times a reader reads back exactly, so clipped slices are cut at the nearest
    times outside the window that it does, and the crop still covers the whole window."""
    path = corpus("hta/critical_path_alexnet_trace.json.gz")
    session = TraceSession(parser.load(str(path), use_cache=False))
    window = gap_window(session, 1)
    assert not round_trips(window)
    crop, *_ = check_crop(path, window, tmp_path, clip=True)
    assert crop.stats.clipped > 0 and crop.edges != window


@pytest.mark.corpus
def test_corpus_bare_array(tmp_path):
    """The oldest format (a bare array, string tids): the crop is a bare array too."""
    path = corpus("kineto/2021-01_resnet50_nw0_worker0.pt.trace.json.gz")
    crop, *_ = check_crop(path, middle_window(path, 0.5, 0.52), tmp_path, clip=False)
    assert crop.array_form and crop.top == {}


@pytest.mark.corpus
def test_corpus_memory_baseline(tmp_path):
    """A trace with [memory] events on several devices: one baseline per device."""
    path = corpus("kineto/2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz")
    crop, expected, reloaded, _out = check_crop(
        path, middle_window(path, 0.5, 0.51), tmp_path, clip=True
    )
    assert crop.stats.baseline >= 1 and crop.stats.memory >= 1
    # The crop's memory curve starts at the totals the original had at the window's start.
    session = TraceSession(reloaded)
    original = TraceSession(expected.trace)
    for group in session.memory:
        ts, alloc, _reserved = group.curve(reloaded.memory)
        mine = [
            g
            for g in original.memory
            if (g.device_type, g.device_id) == (group.device_type, group.device_id)
        ][0]
        ots, oalloc, _ = mine.curve(expected.trace.memory)
        before = np.flatnonzero(ots < crop.window.start_ns)
        assert ts[0] == crop.window.start_ns and alloc[0] == oalloc[before[-1]]


def test_sample_window_and_clip(tmp_path):
    window = middle_window(SYNTHETIC, 0.3, 0.5)
    for clip in (False, True):
        crop, *_ = check_crop(SYNTHETIC, window, tmp_path, clip)
        assert crop.stats.closure > 0 and crop.stats.flows > 0 and crop.stats.baseline == 1
    crop, *_ = check_crop(DEMO_CPU, middle_window(DEMO_CPU), tmp_path, clip=True)


def test_sample_steps(tmp_path):
    session = TraceSession(parser.load(str(SYNTHETIC), use_cache=False))
    window = step_window(session, parse_steps(["11-12"]))
    rows = [
        r for r in session.steps.rows.tolist() if session.trace.name_of(r).endswith(("#11", "#12"))
    ]
    assert window.start_ns == min(int(session.trace.start[r]) for r in rows)
    assert window.end_ns == max(int(session.trace.start[r] + session.trace.dur[r]) for r in rows)
    check_crop(SYNTHETIC, window, tmp_path, clip=True, gz=True)
    with pytest.raises(ExportError, match="no ProfilerStep#99"):
        step_window(session, [99])


def test_step_crop_holds_part_of_the_step_before(tmp_path):
    """docs/export.md's trap: `--step 11` also holds `ProfilerStep#10`, brought (whole, but
    with only some of its slices) by a launch in step 10 of a kernel that runs in step 11; so
    `diff` of step crops pairs partial steps. The original compared with `--steps` does not."""
    session = TraceSession(parser.load(str(SYNTHETIC), use_cache=False))
    out = tmp_path / "s11.json"
    export_trace(str(SYNTHETIC), str(out), steps=[11], session=session)
    crop = TraceSession(parser.load(str(out), use_cache=False))
    names = [crop.trace.name_of(r) for r in crop.steps.rows.tolist()]
    assert names == ["ProfilerStep#10", "ProfilerStep#11"]

    def inside(s: TraceSession, name: str) -> int:
        row = [r for r in s.steps.rows.tolist() if s.trace.name_of(r) == name][0]
        return len(s.nesting.descendants(row))

    assert inside(crop, "ProfilerStep#10") < inside(session, "ProfilerStep#10")
    assert inside(crop, "ProfilerStep#11") == inside(session, "ProfilerStep#11")


def test_sample_around_gap(tmp_path):
    session = TraceSession(parser.load(str(SYNTHETIC), use_cache=False))
    gaps = session.idle.gaps
    third = int(gaps.longest()[2])
    window = gap_window(session, 3, context_ns=1000)
    assert (window.start_ns, window.end_ns) == (gaps.start[third] - 1000, gaps.end[third] + 1000)
    check_crop(SYNTHETIC, window, tmp_path, clip=False)
    with pytest.raises(ExportError, match="GPU idle gaps"):
        gap_window(session, len(gaps) + 1)


def test_window_marks_sit_exactly_on_the_bounds_at_epoch_times(tmp_path):
    """At epoch-sized times (ts ~1.7e15 µs, beyond a double's ns) the re-stamped `Iteration
    Start` / `Record Window End` marks and the `[memory]` baseline are written exactly at the
    window's bounds, from the integer ns (they were ~0.2 µs outside, at the readable edges)."""
    base = 1_700_000_000_000_000  # µs
    events = [
        {"ph": "X", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": base + 100, "dur": 800},
        {"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": base + 200, "dur": 500},
        {
            "ph": "i",
            "name": "Iteration Start: PyTorch Profiler",
            "s": "g",
            "pid": "Traces",
            "tid": "PyTorch Profiler",
            "ts": base + 100,
        },
        {
            "ph": "i",
            "name": "Record Window End",
            "s": "g",
            "pid": "Traces",
            "tid": "PyTorch Profiler",
            "ts": base + 950,
        },
        {
            "ph": "i",
            "name": "[memory]",
            "cat": "cpu_instant_event",
            "s": "t",
            "pid": 1,
            "tid": 1,
            "ts": base + 150,
            "args": {
                "Total Reserved": 4096,
                "Total Allocated": 2048,
                "Bytes": 2048,
                "Addr": 1,
                "Device Type": 0,
                "Device Id": -1,
            },
        },
    ]
    path = tmp_path / "epoch.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t0 = (base + 300) * 1000 + 123  # ns: neither bound is a double a reader reads back exactly
    t1 = (base + 600) * 1000 + 877
    window = Window(t0, t1)
    assert not round_trips(window)
    for clip in (False, True):
        out = tmp_path / f"out{clip}.json"
        crop = crop_trace(str(path), window, clip=clip)
        assert crop.edges != window  # the clipped slices' edges lie outside, where they read back
        write_crop(crop, str(out))
        raw = out.read_bytes()
        marks = {}
        for event in RAW_LIST.decode(bytes(RAW_OBJECT.decode(raw)["traceEvents"])):
            fields_ = RAW_OBJECT.decode(bytes(event))
            if bytes(fields_.get("ph", b"")) == b'"i"':
                marks[json.loads(bytes(fields_["name"]))] = bytes(fields_["ts"])
        # The written text is the bound itself, digit for digit.
        assert marks == {
            "Iteration Start: PyTorch Profiler": us_text(t0),
            "Record Window End": us_text(t1),
            "[memory]": us_text(t0),
        }


# -- small pieces -------------------------------------------------------------------------------


def test_us_text_is_exact():
    assert us_text(1_750_000_000_123_456_789) == b"1750000000123456.789"
    assert us_text(5) == b"0.005" and us_text(-1500) == b"-1.500" and us_text(0) == b"0.000"
    # A float would round this one: 2**53 + 1 ns.
    assert us_text(2**53 + 1) == b"9007199254740.993"


def test_parse_window_forms():
    origin = 1_000_000_000
    assert parse_window("+12.5ms..+40ms", origin) == Window(
        origin + 12_500_000, origin + 40_000_000
    )
    assert parse_window("12.5 ms..40ms", origin) == Window(origin + 12_500_000, origin + 40_000_000)
    assert parse_window("+1us..+2µs", origin) == Window(origin + 1000, origin + 2000)
    assert parse_window("..+3ns", origin) == Window(origin, origin + 3)
    assert parse_window("+1s..", origin, origin + 5_000_000_000).end_ns == origin + 5_000_000_000
    assert parse_time("0.000000001s") == 1
    for bad in ("+12.5ms", "+3ms..+1ms", "1..2", "+1ms..+1ms", "+0.5ns..+1ns", "x..+1ms"):
        with pytest.raises(ExportError):
            parse_window(bad, origin)


def test_parse_steps():
    assert parse_steps(["3"]) == [3]
    assert parse_steps(["3,5", "7-9"]) == [3, 5, 7, 8, 9]
    for bad in (["x"], ["5-3"], ["3,,4"]):
        with pytest.raises(ExportError):
            parse_steps(bad)


def test_describe_counts_one_in_the_singular():
    """The message says `1 slice`, `1 flow`, `1 of 1 event`, never `1 flows`."""
    stats = CropStats(events=1, source_events=1, slices=1, flows=1, memory=1, baseline=1)
    crop = Crop(top={}, events=[b"{}"], window=Window(0, 1_000), stats=stats)
    line = describe(crop, "out.json", 10, 0)
    for said in ("1 of 1 event,", "1 slice (0 outside", "1 flow,", "1 [memory] instant +"):
        assert said in line, line
    assert not re.search(r"\b1 (events|slices|flows|\[memory\] instants)\b", line), line
    stats = CropStats(events=2, source_events=3, slices=2, closure=1, flows=2, memory=2)
    line = describe(Crop(top={}, events=[], window=Window(0, 1_000), stats=stats), "o", 10, 0)
    for said in ("2 of 3 events,", "2 slices (1 outside", "2 flows,", "2 [memory] instants +"):
        assert said in line, line


# -- the command ------------------------------------------------------------------------------


def kinetoscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", *args], capture_output=True, text=True, timeout=120
    )


def test_command_writes_and_summary_reads_it(tmp_path):
    out = tmp_path / "steps.json.gz"
    result = kinetoscope("export", str(SYNTHETIC), "-o", str(out), "--step", "11", "--clip")
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert "\n" not in line and line.startswith(f"wrote {out}") and "events" in line
    summary = kinetoscope("summary", "--json", str(out))
    assert summary.returncode == 0, summary.stderr
    assert json.loads(summary.stdout)["trace"]["events"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step", "99"], "no ProfilerStep#99"),
        (["--around-gap", "100000"], "GPU idle gaps"),
        (["--window", "+3ms..+1ms"], "is empty"),
        (["--window", "+10s..+20s"], "outside the trace"),
        (["--window", "1..2"], "unit"),
    ],
)
def test_command_bad_input(tmp_path, args, message):
    out = tmp_path / "out.json"
    result = kinetoscope("export", str(SYNTHETIC), "-o", str(out), *args)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.parametrize("name", ["crop.JSON.GZ", "crop.json.Gz"])
def test_gz_suffix_in_any_case_is_gzipped(tmp_path, name):
    """`-o X.JSON.GZ` is written gzip'd, as `.json.gz` is (the check was case-sensitive)."""
    out = tmp_path / name
    result = kinetoscope("export", str(SYNTHETIC), "-o", str(out), "--window", "+1ms..+2ms")
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]


@pytest.mark.parametrize("name", ["crop.zip", "crop.ZIP", "crop.json.zip", "crop.json.xz"])
def test_single_trace_to_an_archive_name_is_refused(tmp_path, name):
    """One trace is written as .json or .json.gz: a .zip (the bundle a job is written as) or
    another archive's name would get plain JSON that no tool opens by its name; refused in
    one line, nothing written."""
    out = tmp_path / name
    result = kinetoscope("export", str(SYNTHETIC), "-o", str(out), "--window", "+1ms..+2ms")
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "a single trace is written as .json or .json.gz" in result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


def test_command_unwritable_output(tmp_path):
    """Where the export cannot be written: one line, and no file left behind."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    targets = [(blocker / "x.json", "no such folder"), (tmp_path, "is a directory")]
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        targets.append((folder / "x.json", "cannot write"))
    for target, message in targets:
        result = kinetoscope("export", str(SYNTHETIC), "-o", str(target), "--window", "+1ms..+2ms")
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a-file"] + (["ro"] if os.geteuid() != 0 else [])
    )


def test_write_failure_leaves_no_file(tmp_path, monkeypatch):
    """A write that fails midway (a full disk) raises ExportError and leaves no file."""
    crop = crop_trace(str(SYNTHETIC), middle_window(SYNTHETIC))
    out = tmp_path / "out.json"

    class Full(io.FileIO):
        def write(self, data):
            super().write(bytes(data)[:10])
            raise OSError(28, "No space left on device")

    import kinetoscope.export.crop as export_module

    monkeypatch.setattr(export_module, "open", Full, raising=False)
    with pytest.raises(ExportError, match="No space left"):
        write_crop(crop, str(out))
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_truncated_trace_crops_what_was_read(tmp_path):
    """A trace cut off in the middle: the crop holds what was read, and says where it stopped."""
    data = gzip.decompress(SYNTHETIC.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) * 2 // 3])
    trace = parser.load(str(cut), use_cache=False)
    assert not trace.complete
    out = tmp_path / "out.json"
    result = kinetoscope("export", str(cut), "-o", str(out), "--window", "+1ms..+4ms")
    assert result.returncode == 0, result.stderr
    assert f"stops being readable at byte {trace.stopped_at:,}" in result.stderr
    reloaded = parser.load(str(out), use_cache=False)
    assert reloaded.complete and len(reloaded) > 0
    check_no_orphan_flows(reloaded)


def test_damaged_events_crop_to_valid_json(tmp_path):
    """A NaN in an event's args (repaired at load) and a malformed event (skipped at load): the
    crop is valid JSON (the repaired event written from its decoded value) and loses nothing
    that was read."""
    data = gzip.decompress(SYNTHETIC.read_bytes())
    at = data.index(b'"args":{', len(data) // 2) + len(b'"args":{')
    data = data[:at] + b'"weird":NaN,' + data[at:]
    at = data.index(b'{"ph":"X"', len(data) * 2 // 3)
    data = data[:at] + b'{"ph":"X","name":broken},' + data[at:]
    damaged = tmp_path / "damaged.json"
    damaged.write_bytes(data)
    trace = parser.load(str(damaged), use_cache=False)
    assert any("malformed" in w for w in trace.warnings)
    window = Window(int(trace.start.min()), int((trace.start + trace.dur).max()))
    crop = crop_trace(str(damaged), window)
    assert crop.stats.reencoded >= 1
    out = tmp_path / "crop.json"
    write_crop(crop, str(out))

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in the crop: not JSON")

    json.loads(out.read_text(), parse_constant=no_constants)  # strict JSON: no NaN left
    reloaded = parser.load(str(out), use_cache=False)
    assert reloaded.warnings == [] and len(reloaded) == len(trace)


def test_clipped_slices_with_equal_times_nest_as_before(tmp_path):
    """A window inside an operator: the step, the operator and whatever encloses the window
    all clip to the window's exact times; they are written outermost first, so the crop nests
    them as the original does, and every one of them is clipped."""
    trace = parser.load(str(SYNTHETIC), use_cache=False)
    session = TraceSession(trace)
    nesting = session.nesting
    # The longest slice two levels down (under a step and its child).
    deep = np.flatnonzero(nesting.depth == 2)
    row = int(deep[np.argmax(trace.dur[deep])])
    start, dur = int(trace.start[row]), int(trace.dur[row])
    window = Window(start + dur // 4, start + dur // 2)
    crossing = np.flatnonzero(
        (trace.ph == PH_COMPLETE)
        & (trace.start < window.start_ns)
        & (trace.start + trace.dur > window.end_ns)
    )
    assert {row, *nesting.ancestors(row)} <= set(crossing.tolist())
    crop, _expected, reloaded, _out = check_crop(SYNTHETIC, window, tmp_path, clip=True)
    assert crop.stats.clipped >= len(crossing)
    clipped = np.flatnonzero(
        (reloaded.ph == PH_COMPLETE)
        & (reloaded.start == window.start_ns)
        & (reloaded.start + reloaded.dur == window.end_ns)
    )
    assert len(clipped) == len(crossing)
    depths = sorted(TraceSession(reloaded).nesting.depth[clipped].tolist())
    assert depths == sorted(nesting.depth[crossing].tolist())


def test_flows_of_a_string_tid_thread_with_int_tid_flows(tmp_path):
    """2021 Kineto traces write CPU slices with tid "2" (a string) and their flow starts with
    tid 2 (an int): two lanes for the parser, one thread for Perfetto, which draws the arrows.
    A flow event whose lane holds no slice is bound on the lane of the same pid and tid as
    text, so the launches keep their flows (they were all dropped), and only whole ones."""
    path = tmp_path / "tids.json"
    path.write_text(many_events_trace(40, slice_tid="2"))
    trace = parser.load(str(path), use_cache=False)
    x_lanes = set(trace.lane[trace.ph == PH_COMPLETE].tolist())
    assert set(trace.lane[trace.ph == ord("s")].tolist()).isdisjoint(x_lanes)
    window = middle_window(path, 0.3, 0.6)
    for clip in (False, True):
        crop, expected, reloaded, _out = check_crop(path, window, tmp_path, clip)
        assert crop.stats.flows == expected.flow_groups >= 10
        assert int(np.isin(reloaded.ph, [ord("s"), ord("f")]).sum()) == 2 * crop.stats.flows


@pytest.mark.corpus
def test_corpus_2021_flows_kept(tmp_path):
    """The 2021 trace of the issue (CPU slices with string tids, flow starts with int tids):
    a window keeps its launches' flows, and the crop re-loads with them."""
    path = corpus("kineto/2021-06_resnet50_nw0_worker0.1623143089861.pt.trace.json.gz")
    trace = parser.load(str(path), use_cache=False)
    origin = int(trace.slice_start_min)
    window = Window(origin + 100_000_000, origin + 200_000_000)
    crop, expected, reloaded, _out = check_crop(path, window, tmp_path, clip=False)
    assert crop.stats.flows == expected.flow_groups > 1000
    assert int(np.isin(reloaded.ph, [ord("s"), ord("f")]).sum()) == 2 * crop.stats.flows
    whole = tmp_path / "whole.json.gz"
    result = kinetoscope("export", str(path), "-o", str(whole), "--window", "..")
    assert result.returncode == 0, result.stderr
    flows = int(np.isin(trace.ph, [ord("s")]).sum())
    assert flows > 9000 and f" {flows:,} flows" in result.stdout, result.stdout


# -- memory: the export streams --------------------------------------------------------------


def many_events_trace(steps: int, slice_tid: Any = 2) -> str:
    """A trace of `steps` iterations, each an operator with a runtime launch inside, its
    kernel, the launch's flow (start and end), a [memory] instant and a counter: 7 events of
    some 150 bytes each per iteration. `slice_tid`: the tid of the CPU slices (the flow
    starts' is 2: `"2"` makes the 2021 Kineto traces' mix of a string and an int tid)."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
    ]
    for i in range(steps):
        ts = 1000.0 + i * 10
        events += [
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1,
             "tid": slice_tid, "ts": ts, "dur": 8,
             "args": {"External id": i, "Sequence number": i}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
             "tid": slice_tid, "ts": ts + 1, "dur": 2,
             "args": {"correlation": i, "External id": i}},
            {"ph": "X", "cat": "kernel", "name": f"kernel_{i % 5}", "pid": 0, "tid": 7,
             "ts": ts + 4, "dur": 5, "args": {"correlation": i, "stream": 7, "device": 0}},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 1, "tid": 2,
             "ts": ts + 1},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 0, "tid": 7,
             "ts": ts + 4, "bp": "e"},
            {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2,
             "ts": ts + 0.5, "s": "t", "args": {"Device Type": 1, "Device Id": 0,
             "Bytes": 512, "Addr": i, "Total Allocated": 512 * i, "Total Reserved": 1 << 20}},
            {"ph": "C", "name": "queue", "pid": 1, "tid": 2, "ts": ts, "args": {"depth": i % 3}},
        ]  # fmt: skip
    return json.dumps({"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"})


@pytest.mark.slow
def test_export_memory_does_not_grow_with_the_events_kept(tmp_path, monkeypatch):
    """The kept events are written as their runs of the file are read, never all held: with
    the trace loaded, exporting the whole trace (every event kept, a crop of some 16 MB)
    allocates at its peak hardly more than exporting a window of one iteration of it (a few
    events kept) does. Both crops are of the same model, so what differs is only what the
    number of kept events costs. Runs of 128 KB: a bounded working set is small against 16 MB."""
    monkeypatch.setattr(reader_module, "RUN_BYTES", 1 << 17)
    monkeypatch.setattr(source_module, "READ_BLOCK", 1 << 15)
    path = tmp_path / "many.json"
    path.write_text(many_events_trace(16_000))
    trace = parser.load(str(path), use_cache=False, write_cache=False)
    assert len(trace.chunks.first_ordinal) > 50  # many runs
    session = TraceSession(trace)
    session.nesting, session.links  # noqa: B018 (computed here, not counted below)
    first, last = int(trace.start.min()), int((trace.start + trace.dur).max())
    middle = first + (last - first) // 2

    def peak_of(window: Window, out: Path) -> tuple[int, str]:
        tracemalloc.start()
        try:
            line, _notes = export_trace(str(path), str(out), window=window, session=session)
            return tracemalloc.get_traced_memory()[1], line
        finally:
            tracemalloc.stop()

    narrow, narrow_line = peak_of(Window(middle, middle + 5_000), tmp_path / "narrow.json")
    whole, whole_line = peak_of(Window(first, last), tmp_path / "whole.json")
    kept = (tmp_path / "whole.json").stat().st_size
    assert kept > 14 << 20 and f"{len(trace) + 2:,} of" in whole_line, whole_line
    assert (tmp_path / "narrow.json").stat().st_size < 20_000, narrow_line
    # What the 16 MB of kept text adds to the peak: the writer's blocks and one run's pieces.
    assert whole - narrow < 4 << 20, (whole, narrow, kept)


def test_read_failure_while_streaming_leaves_no_file(tmp_path, monkeypatch):
    """The export reads the trace again while it writes: a read that fails midway (the disk,
    the file's folder gone) is one line that says so, and no half file is left."""
    import kinetoscope.export.crop as export_module

    read_ranges = export_module.read_ranges

    def failing(trace, ranges):
        pieces = read_ranges(trace, ranges)
        yield next(pieces)  # the text before the events
        yield next(pieces)  # the first run
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(export_module, "read_ranges", failing)
    out = tmp_path / "out.json.gz"
    with pytest.raises(ExportError, match="cannot read it again .Input/output error"):
        export_trace(str(SYNTHETIC), str(out), window=middle_window(SYNTHETIC, 0.0, 0.9))
    assert list(tmp_path.iterdir()) == []
