"""Memory: peaks per device from `[memory]` events, and the allocated/reserved curve over time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from kinetoscope.parser.model import NO_VALUE, MemoryEvents, Trace

CPU_DEVICE_TYPE = 0  # c10::DeviceType::CPU: host memory, not a device's
CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA (some ROCm builds write HIP, 6, instead)
HIP_DEVICE_TYPE = 6  # c10::DeviceType::HIP
GPU_DEVICE_TYPES = (CUDA_DEVICE_TYPE, HIP_DEVICE_TYPE)  # a GPU's memory, whichever is written


def device_properties(trace: Trace) -> list[dict[str, Any]]:
    """`deviceProperties` of the header, or the older `computeProperties` when that is absent."""
    return header_device_properties(trace.header)


def header_device_properties(header: dict[str, Any]) -> list[dict[str, Any]]:
    """`device_properties` of a trace header."""
    key = "deviceProperties" if "deviceProperties" in header else "computeProperties"
    props = header.get(key)
    if not isinstance(props, list):
        return []
    return [_typed_device(entry) if isinstance(entry, dict) else {} for entry in props]


def _typed_device(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry without an `id`, `name` or `totalGlobalMem` of the wrong type or range (the
    load drops those with a warning; a header from elsewhere, such as a cache, may hold them)."""
    fine = {
        "id": lambda v: type(v) is str or (type(v) is int and abs(v) < 1 << 63),
        "name": lambda v: type(v) is str,
        "totalGlobalMem": lambda v: type(v) is int and 0 <= v < 1 << 63,
    }
    if all(check(entry[key]) for key, check in fine.items() if key in entry):
        return entry
    return {k: v for k, v in entry.items() if k not in fine or fine[k](v)}


@dataclass(frozen=True)
class MemoryGroup:
    """The `[memory]` events of one (device type, device id); None stands for a missing key."""

    device_type: int | None
    device_id: int | None
    indices: np.ndarray  # into MemoryEvents, file order
    peak_allocated: int | None
    peak_reserved: int | None
    peak_allocated_index: int  # into MemoryEvents, -1 when there is no value

    def curve(self, memory: MemoryEvents) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ts ns, total allocated, total reserved) for the events with a ts, by time.

        Missing values are NO_VALUE."""
        idx = self.indices[memory.ts[self.indices] != NO_VALUE]
        idx = idx[np.argsort(memory.ts[idx], kind="stable")]
        return memory.ts[idx], memory.total_allocated[idx], memory.total_reserved[idx]


def _peak(values: np.ndarray) -> tuple[int | None, int]:
    present = np.flatnonzero(values != NO_VALUE)
    if len(present) == 0:
        return None, -1
    best = present[int(np.argmax(values[present]))]
    return int(values[best]), int(best)


def compute_memory(memory: MemoryEvents) -> list[MemoryGroup]:
    """Groups ascending by (device type, device id), a missing key first."""
    if len(memory) == 0:
        return []
    # NO_VALUE is int64's minimum, so a plain ascending sort puts missing keys first. One
    # stable sort by (type, id) gives each group's events as a run, in file order.
    types = np.asarray(memory.device_type, dtype=np.int64)
    ids = np.asarray(memory.device_id, dtype=np.int64)
    order = np.lexsort((ids, types))
    sorted_types, sorted_ids = types[order], ids[order]
    bounds = np.flatnonzero(
        (sorted_types[1:] != sorted_types[:-1]) | (sorted_ids[1:] != sorted_ids[:-1])
    )
    starts = np.concatenate(([0], bounds + 1)).tolist()
    ends = [*starts[1:], len(order)]
    groups = []
    for first, end in zip(starts, ends):
        device_type, device_id = int(sorted_types[first]), int(sorted_ids[first])
        indices = order[first:end]
        alloc, alloc_index = _peak(memory.total_allocated[indices])
        reserved, _ = _peak(memory.total_reserved[indices])
        groups.append(
            MemoryGroup(
                device_type=None if device_type == NO_VALUE else device_type,
                device_id=None if device_id == NO_VALUE else device_id,
                indices=indices,
                peak_allocated=alloc,
                peak_reserved=reserved,
                peak_allocated_index=int(indices[alloc_index]) if alloc_index >= 0 else -1,
            )
        )
    return groups
