"""The memory and synchronisation sections of `kinetoscope summary` (text), built from the
summary document's `memory`, `memory_ops`, `sync` and `steps[].sync_us` keys."""

from __future__ import annotations

from typing import Any

from kinetoscope.analysis.units import fmt_duration, fmt_percent
from kinetoscope.present.report_summary import STACK_SEPARATOR, Note, _bytes, _data, _dur, _table

TOP_OPERATORS = 15
TOP_SITES = 10


def _device(entry: dict[str, Any]) -> str:
    from kinetoscope.analysis.memory_ops import device_label

    return device_label(entry["device_type"], entry["device_id"])


def memory_sync_tables(document: dict[str, Any]) -> list[Any]:
    """Rich renderables: the memory peaks' context, the top allocating operators, and the
    call sites that blocked the host."""
    allocators = allocators_table(document)
    if not isinstance(allocators, list):
        allocators = [allocators]
    sections = [peak_table(document), *allocators, sync_table(document)]
    return [s for s in sections if s is not None]


def peak_table(document: dict[str, Any]) -> Any:
    from kinetoscope.analysis.memory_ops import HOW_TO_RECORD

    if not document["memory"]:
        return Note(HOW_TO_RECORD)
    origin = document["trace"]["start_us"] or 0.0
    table = _table(
        "Memory peaks: when, in which operator and step",
        "device",
        "peak allocated",
        "at",
        "operator",
        "step",
        "never freed",
        right=("peak allocated", "at", "never freed"),
        names=("operator", "step"),
    )
    for entry in document["memory"]:
        if entry.get("peak_ts_us") is None:
            continue
        unfreed = entry.get("unfreed_allocations")
        never = (
            "unknown (no addresses)"
            if unfreed is None
            else f"{unfreed:,} ({_bytes(entry.get('unfreed_bytes'))})"
        )
        table.add_row(
            _device(entry),
            _bytes(entry["peak_allocated_bytes"]),
            "+" + _dur(entry["peak_ts_us"] - origin),
            _data(entry.get("peak_operator") or "–"),
            _data(entry.get("peak_step") or "–"),
            never,
        )
    return table


def allocators_table(document: dict[str, Any], limit: int = TOP_OPERATORS) -> Any:
    rows = document.get("memory_ops") or []
    if not rows:
        return None
    # The accelerator first: that is the memory people run out of.
    devices = sorted({(r["device_type"], r["device_id"]) for r in rows}, key=lambda d: d[0] == 0)
    main = devices[0]
    # Operators that allocated nothing (outer frames, listed for their peak live) are no
    # allocators: the JSON keeps them, this table does not.
    shown = [
        r for r in rows if (r["device_type"], r["device_id"]) == main and r["allocations"] > 0
    ][:limit]
    if not shown:
        return None
    matched = any(r.get("held_at_most_bytes") is not None for r in shown)
    peak = next(
        (
            m.get("peak_allocated_bytes")
            for m in document.get("memory") or []
            if (m["device_type"], m["device_id"]) == main
        ),
        None,
    )
    never = any(r["unfreed_allocations"] for r in shown)
    if matched:
        numbers = ("allocs", "allocated", "freed own", "by others", "at once")
        title = (
            f"Top allocating operators on {_device(shown[0])} (its allocations, each matched "
            "by address to its free: bytes freed by the operator itself (own) or left for "
            "others to free (by others, with who freed the most), summed over the trace; at "
            "once: the most of them live at one time)"
        )
    else:
        numbers = ("allocs", "allocated")
        title = (
            f"Top allocating operators on {_device(shown[0])} (its allocations, summed over "
            "the trace: this trace records no addresses, so which operator freed them and how "
            "much was held at once are unknown)"
        )
    numbers = (*numbers, *(("never freed",) if never else ()), "peak live")
    table = _table(
        title,
        "operator",
        *numbers,
        *(("mostly freed by",) if matched else ()),
        right=numbers,
        names=("operator", "mostly freed by"),
    )
    over: list[str] = []
    for row in shown:
        held = row.get("held_at_most_bytes")
        by = row.get("mostly_freed_by")
        if by is None:
            freer = "–"
        else:
            freer = by["name"] if by["name"] is not None else "(no operator)"
        if held is not None and peak is not None and held > peak:
            over.append(row["name"])
        cells = [_data(row["name"]), f"{row['allocations']:,}", _bytes(row["allocated_bytes"])]
        if matched:
            cells += [
                _bytes(row.get("freed_own_bytes")),
                _bytes(row.get("freed_by_others_bytes")),
                _bytes(held),
            ]
        if never:
            cells.append(_bytes(row["unfreed_bytes"]) if row["unfreed_allocations"] else "")
        cells.append(_bytes(row["peak_live_bytes"]))
        if matched:
            cells.append(_data(freer))
        table.add_row(*cells)
    if not over:
        return table
    return [
        table,
        Note(
            f"{', '.join(over[:3])}: held at once more than the device's peak: the trace's "
            "allocated total leaves out memory allocated before it began and freed during it"
        ),
    ]


def sync_table(document: dict[str, Any], limit: int = TOP_SITES) -> Any:
    from kinetoscope.analysis.sync import short_frame

    sites = document.get("sync") or []
    if not sites:
        return None
    steps = [s for s in document["steps"] if "sync_us" in s]
    per_step = ", ".join(
        f"{s['name']} {fmt_duration(s['sync_us'] * 1000)}"
        + (f" ({fmt_percent(s['sync_us'] / s['dur_us'])})" if s["dur_us"] else "")
        for s in steps[:8]
    )
    title = "Where the CPU blocked on the GPU (call sites, most time first)"
    if per_step:
        title += f"; per step: {per_step}"
    numbers = ("count", "total", "max", "GPU idle")
    table = _table(
        title,
        "call",
        "cause",
        *numbers,
        "call site",
        right=numbers,
        names=("call", "cause"),
        stacks=("call site",),
    )
    for site in sites[:limit]:
        table.add_row(
            _data(site["call"]),
            _data(site["cause"] or "explicit"),
            f"{site['count']:,}",
            _dur(site["total_us"]),
            _dur(site["max_us"]),
            _dur(site["gpu_idle_us"]),
            _data(STACK_SEPARATOR.join(short_frame(n) for n in site["site"]) or "(top level)"),
        )
    return table
