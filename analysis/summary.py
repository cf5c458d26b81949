"""The `summary --json` document of the spec, built from a Trace and its analyses."""

from __future__ import annotations

from typing import Any

from kinetoscope.parser.model import Trace

SUMMARY_VERSION = 1


def us(ns: int | None) -> float | None:
    """Integer ns -> µs rounded to 3 decimals, in the trace's own time base."""
    if ns is None:
        return None
    return round(ns / 1000, 3)


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


def source_section(trace: Trace) -> dict[str, Any]:
    src = trace.source
    return {"path": src.path, "bytes": src.bytes, "compressed": src.compressed}


def trace_section(trace: Trace) -> dict[str, Any]:
    header = trace.header
    return {
        "schema_version": _int_or_none(header.get("schemaVersion")),
        "base_time_ns": _int_or_none(header.get("baseTimeNanoseconds")),
        "events": trace.n_events,
        "by_phase": dict(trace.by_phase),
        "by_category": dict(trace.by_category),
        "start_us": us(trace.slice_start_min),
        "end_us": us(trace.slice_end_max),
        "complete": trace.complete,
        "warnings": list(trace.warnings),
    }


def devices_section(trace: Trace) -> list[dict[str, Any]]:
    header = trace.header
    props = header.get("deviceProperties")
    if props is None:
        props = header.get("computeProperties")
    if not isinstance(props, list):
        return []
    devices = []
    for entry in props:
        if not isinstance(entry, dict):
            entry = {}
        devices.append(
            {
                "id": entry.get("id"),
                "name": entry.get("name"),
                "total_memory_bytes": entry.get("totalGlobalMem"),
            }
        )
    return devices


def build_summary(trace: Trace) -> dict[str, Any]:
    """The whole document; analysis sections are filled by the analysis modules."""
    return {
        "kinetoscope_summary": SUMMARY_VERSION,
        "source": source_section(trace),
        "trace": trace_section(trace),
        "devices": devices_section(trace),
        "gpu": [],
        "idle_gaps": [],
        "operators": [],
        "kernels": [],
        "steps": [],
        "memory": [],
        "findings": [],
    }
