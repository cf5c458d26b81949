"""A deliberately plain reference implementation of the summary contract (spec/summary-json.md).

Everything here works on the output of `json.load` with ordinary Python loops and Python ints, so
that each rule of the contract can be read off the code. The test suite compares the real,
vectorised analysis against it on real traces. `findings` and `trace.warnings` are not computed.

Choices where the contract is silent (the real implementation must make the same ones):
- a `cat` or `name` that is present but not a string counts as the empty string;
- in `[memory]` events, a group key (`Device Type`, `Device Id`) or a `Total Allocated` /
  `Total Reserved` value counts when it is a JSON integer or a float with an integral value
  (taken as that integer); anything else counts as missing (a null key, no value).
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import os
import re
from typing import Any

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
NOT_CPU_CATS = {"gpu_user_annotation", "cuda_sync", "trace"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
STEP_NAME = re.compile(r"ProfilerStep#[0-9]+")
KERNEL_WAIT_LIMIT_NS = 30_000
TOP_GAPS = 20
TOP_GROUPS = 50


def is_int(value: Any) -> bool:
    """A JSON integer (booleans are not numbers)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A JSON number: an int, or a finite float; NaN, Infinity and booleans are not numbers."""
    if is_int(value):
        return True
    return isinstance(value, float) and math.isfinite(value)


def to_ns(value: float) -> int:
    """Microseconds to integer nanoseconds as the contract says."""
    if is_int(value):
        return value * 1000
    return round(value * 1000)


def us(ns: int) -> float:
    """Integer nanoseconds to output microseconds (3 decimals)."""
    return round(ns / 1000, 3)


def memory_int(value: Any) -> int | None:
    if is_int(value):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def digits_only(value: str) -> bool:
    return value != "" and all(c in "0123456789" for c in value)


def lane_key(pid: Any, tid: Any) -> str:
    """(pid, tid) exactly as written: the JSON text keeps 1, "1" and true apart."""
    return json.dumps([pid, tid], sort_keys=True)


class Slice:
    """One `ph == "X"` event with a numeric `ts`."""

    def __init__(self, ordinal: int, event: dict) -> None:
        self.ordinal = ordinal
        self.cat = text(event.get("cat"))
        self.name = text(event.get("name"))
        self.start = to_ns(event["ts"])
        dur = event.get("dur")
        self.dur = max(0, to_ns(dur)) if is_number(dur) else 0
        self.end = self.start + self.dur
        self.pid = event.get("pid")
        self.tid = event.get("tid")
        args = event.get("args")
        self.args = args if isinstance(args, dict) else {}
        low = self.cat.lower()
        self.is_gpu = low in GPU_CATS
        self.is_cpu = not self.is_gpu and low not in NOT_CPU_CATS
        self.is_runtime = self.is_cpu and low in RUNTIME_CATS
        self.kind = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy"}.get(
            low, "memset"
        )
        corr = self.args.get("correlation")
        self.corr = corr if is_int(corr) else None
        self.lane = lane_key(self.pid, self.tid)
        # Filled by the nesting walk (CPU slices only).
        self.parent: Slice | None = None
        self.children_dur = 0
        self.outermost = False
        self.ancestor_groups: set[tuple[str, str]] = set()

    @property
    def group(self) -> tuple[str, str]:
        return (self.cat, self.name)

    @property
    def device(self) -> int:
        device = self.args.get("device")
        if is_int(device):
            return device
        if is_int(self.pid):
            return self.pid
        if isinstance(self.pid, str) and digits_only(self.pid):
            return int(self.pid)
        return -1


def nest(cpu_slices: list[Slice]) -> None:
    """The contract's stack walk, per lane."""
    lanes: dict[str, list[Slice]] = {}
    for s in cpu_slices:
        lanes.setdefault(s.lane, []).append(s)
    for members in lanes.values():
        members.sort(key=lambda s: (s.start, -s.end, s.ordinal))
        stack: list[Slice] = []
        for s in members:
            while stack and stack[-1].end < s.end:
                stack.pop()
            if stack:
                s.parent = stack[-1]
                stack[-1].children_dur += s.dur
            # The stack is exactly the chain of ancestors of s.
            s.ancestor_groups = {a.group for a in stack}
            s.outermost = s.group not in s.ancestor_groups
            stack.append(s)


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge half-open intervals of positive length; touching intervals merge."""
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def clipped_length(merged: list[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(hi, b) - max(lo, a)) for a, b in merged)


def load_json(path: str) -> tuple[Any, int, bool]:
    with open(path, "rb") as f:
        raw = f.read()
    compressed = raw[:2] == b"\x1f\x8b"
    data = gzip.decompress(raw) if compressed else raw
    return json.loads(data), os.path.getsize(path), compressed


def reference_summary(path: str) -> dict:
    doc, size, compressed = load_json(path)
    result = summarize(doc)
    result["source"] = {"path": path, "bytes": size, "compressed": compressed}
    return result


def summarize(doc: Any) -> dict:
    """The summary document of an already decoded trace (without `findings` and `warnings`)."""
    if isinstance(doc, list):
        events, header = doc, {}
    elif isinstance(doc, dict):
        events = doc.get("traceEvents")
        events = events if isinstance(events, list) else []
        header = doc
    else:
        events, header = [], {}

    by_phase: dict[str, int] = {}
    by_category: dict[str, int] = {}
    slices: list[Slice] = []
    memory_events: list[dict] = []
    for ordinal, event in enumerate(events):
        ph = event.get("ph") if isinstance(event, dict) else None
        ph = ph if isinstance(ph, str) else "?"
        by_phase[ph] = by_phase.get(ph, 0) + 1
        if not isinstance(event, dict):
            continue
        if ph == "X":
            cat = text(event.get("cat"))
            by_category[cat] = by_category.get(cat, 0) + 1
        if ph == "i" and event.get("name") == "[memory]":
            memory_events.append(event)
        if ph == "X" and is_number(event.get("ts")):
            slices.append(Slice(ordinal, event))

    cpu = [s for s in slices if s.is_cpu]
    gpu = [s for s in slices if s.is_gpu]
    nest(cpu)

    runtime_by_corr: dict[int, Slice] = {}
    for s in cpu:  # file order: `slices` keeps it
        if s.is_runtime and s.corr is not None and s.corr not in runtime_by_corr:
            runtime_by_corr[s.corr] = s

    def linked_runtime(g: Slice) -> Slice | None:
        return runtime_by_corr.get(g.corr) if g.corr is not None else None

    cpu_by_lane: dict[str, list[Slice]] = {}
    for s in cpu:
        cpu_by_lane.setdefault(s.lane, []).append(s)
    gpu_entries, idle_gaps = gpu_section(gpu, linked_runtime, cpu_by_lane)

    return {
        "kinetoscope_summary": 1,
        "trace": trace_section(events, header, by_phase, by_category, slices),
        "devices": devices_section(header),
        "gpu": gpu_entries,
        "idle_gaps": idle_gaps,
        "operators": operators_section(cpu, gpu, linked_runtime),
        "kernels": kernels_section(gpu),
        "steps": steps_section(cpu, gpu),
        "memory": memory_section(memory_events),
    }


def trace_section(
    events: list, header: dict, by_phase: dict, by_category: dict, slices: list[Slice]
) -> dict:
    return {
        "schema_version": header.get("schemaVersion"),
        "base_time_ns": header.get("baseTimeNanoseconds"),
        "events": len(events),
        "by_phase": by_phase,
        "by_category": by_category,
        "start_us": us(min(s.start for s in slices)) if slices else None,
        "end_us": us(max(s.end for s in slices)) if slices else None,
        "complete": True,
    }


def devices_section(header: dict) -> list[dict]:
    if "deviceProperties" in header:
        props = header["deviceProperties"]
    else:
        props = header.get("computeProperties")
    if not isinstance(props, list):
        return []
    out = []
    for p in props:
        p = p if isinstance(p, dict) else {}
        out.append(
            {
                "id": p.get("id"),
                "name": p.get("name"),
                "total_memory_bytes": p.get("totalGlobalMem"),
            }
        )
    return out


def gpu_section(
    gpu: list[Slice], linked_runtime, cpu_by_lane: dict[str, list[Slice]]
) -> tuple[list[dict], list[dict]]:
    devices: dict[int, list[Slice]] = {}
    for g in gpu:
        devices.setdefault(g.device, []).append(g)
    entries = []
    gaps = []  # (length, start, device, next event, runtime)
    for device in sorted(devices):
        acts = devices[device]
        merged = union([(g.start, g.end) for g in acts])
        # First activity in file order (with dur > 0) starting at each instant.
        first_at: dict[int, Slice] = {}
        for g in acts:
            if g.dur > 0 and g.start not in first_at:
                first_at[g.start] = g
        causes = {"host_wait": 0, "kernel_wait": 0, "other": 0}
        busy = sum(b - a for a, b in merged)
        for (_, gap_start), (gap_end, _) in itertools.pairwise(merged):
            length = gap_end - gap_start
            nxt = first_at[gap_end]
            runtime = linked_runtime(nxt)
            if runtime is not None and runtime.start > gap_start:
                cause = "host_wait"
            elif length < KERNEL_WAIT_LIMIT_NS:
                cause = "kernel_wait"
            else:
                cause = "other"
            causes[cause] += length
            gaps.append((length, gap_start, device, cause, nxt, runtime))
        window = (merged[0][0], merged[-1][1]) if merged else None
        entries.append(
            {
                "device": device,
                "kernels": sum(1 for g in acts if g.kind == "kernel"),
                "memcpys": sum(1 for g in acts if g.kind == "memcpy"),
                "memsets": sum(1 for g in acts if g.kind == "memset"),
                "window_start_us": us(window[0]) if window else None,
                "window_end_us": us(window[1]) if window else None,
                "busy_us": us(busy),
                "idle_us": us(window[1] - window[0] - busy) if window else 0.0,
                "idle_by_cause": {k: us(v) for k, v in causes.items()},
            }
        )
    gaps.sort(key=lambda g: (-g[0], g[1], g[2]))
    top = []
    for length, start, device, cause, nxt, runtime in gaps[:TOP_GAPS]:
        top.append(
            {
                "device": device,
                "start_us": us(start),
                "dur_us": us(length),
                "cause": cause,
                "next_gpu_event": nxt.name,
                "cpu_stack": cpu_stack(runtime, start + length // 2, cpu_by_lane),
            }
        )
    return entries, top


def cpu_stack(
    runtime: Slice | None, midpoint: int, cpu_by_lane: dict[str, list[Slice]]
) -> list[str]:
    """Names of the CPU slices on the runtime event's lane that contain the midpoint."""
    if runtime is None:
        return []
    hits = [s for s in cpu_by_lane[runtime.lane] if s.start <= midpoint < s.end]
    hits.sort(key=lambda s: (s.start, -s.end, s.ordinal))
    return [s.name for s in hits]


def operators_section(cpu: list[Slice], gpu: list[Slice], linked_runtime) -> list[dict]:
    groups: dict[tuple[str, str], dict[str, int]] = {}

    def group(key: tuple[str, str]) -> dict[str, int]:
        if key not in groups:
            groups[key] = {"count": 0, "incl": 0, "excl": 0, "gpu_self": 0, "gpu_total": 0}
        return groups[key]

    for s in cpu:
        g = group(s.group)
        g["count"] += 1
        g["excl"] += max(0, s.dur - s.children_dur)
        if s.outermost:
            g["incl"] += s.dur
    for act in gpu:
        runtime = linked_runtime(act)
        if runtime is None:
            continue
        if runtime.parent is not None:
            group(runtime.parent.group)["gpu_self"] += act.dur
        for key in runtime.ancestor_groups:
            group(key)["gpu_total"] += act.dur
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1]["excl"], kv[0][0], kv[0][1]))
    return [
        {
            "cat": cat,
            "name": name,
            "count": g["count"],
            "incl_us": us(g["incl"]),
            "excl_us": us(g["excl"]),
            "gpu_self_us": us(g["gpu_self"]),
            "gpu_total_us": us(g["gpu_total"]),
        }
        for (cat, name), g in ranked[:TOP_GROUPS]
    ]


def kernels_section(gpu: list[Slice]) -> list[dict]:
    groups: dict[tuple[str, str], list[int]] = {}
    for g in gpu:
        groups.setdefault(g.group, []).append(g.dur)
    ranked = sorted(groups.items(), key=lambda kv: (-sum(kv[1]), kv[0][0], kv[0][1]))
    return [
        {
            "cat": cat,
            "name": name,
            "count": len(durs),
            "total_us": us(sum(durs)),
            "mean_us": round(sum(durs) / (1000 * len(durs)), 3),
            "min_us": us(min(durs)),
            "max_us": us(max(durs)),
        }
        for (cat, name), durs in ranked[:TOP_GROUPS]
    ]


def steps_section(cpu: list[Slice], gpu: list[Slice]) -> list[dict]:
    busy = union([(g.start, g.end) for g in gpu])
    loading = union([(s.start, s.end) for s in cpu if s.name.startswith("enumerate(DataLoader)")])
    steps = [s for s in cpu if STEP_NAME.fullmatch(s.name)]
    steps.sort(key=lambda s: (s.start, s.ordinal))
    return [
        {
            "name": s.name,
            "start_us": us(s.start),
            "dur_us": us(s.dur),
            "gpu_busy_us": us(clipped_length(busy, s.start, s.end)),
            "dataloader_us": us(clipped_length(loading, s.start, s.end)),
        }
        for s in steps
    ]


def memory_section(memory_events: list[dict]) -> list[dict]:
    groups: dict[tuple, dict[str, int | None]] = {}
    for event in memory_events:
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        key = (memory_int(args.get("Device Type")), memory_int(args.get("Device Id")))
        peaks = groups.setdefault(key, {"alloc": None, "reserved": None})
        for field, arg in (("alloc", "Total Allocated"), ("reserved", "Total Reserved")):
            value = memory_int(args.get(arg))
            if value is not None:
                current = peaks[field]
                peaks[field] = value if current is None else max(current, value)

    def null_first(key: tuple) -> tuple:
        return tuple((0, 0) if k is None else (1, k) for k in key)

    return [
        {
            "device_type": key[0],
            "device_id": key[1],
            "peak_allocated_bytes": groups[key]["alloc"],
            "peak_reserved_bytes": groups[key]["reserved"],
        }
        for key in sorted(groups, key=null_first)
    ]


def contract_view(got: Any, reference: Any) -> Any:
    """`got` with only the keys the reference has, at every level (the document may carry more
    keys than the contract; those are not compared). Missing keys and list items stay missing,
    so a comparison with the reference still fails on them."""
    if isinstance(got, dict) and isinstance(reference, dict):
        return {k: contract_view(got[k], reference[k]) for k in reference if k in got}
    if isinstance(got, list) and isinstance(reference, list):
        return [contract_view(g, r) for g, r in zip(got, reference)] + got[len(reference) :]
    return got
