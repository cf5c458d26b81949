"""GPUs named: the device ids the GPU events carry matched to the trace header's
`deviceProperties` (or the older `computeProperties`).

The two may disagree: with visible-device remapping (`HIP_VISIBLE_DEVICES`,
`CUDA_VISIBLE_DEVICES`), ROCm traces list the one visible GPU as device 0 while every kernel
carries its physical id (2, 9). A used device whose id is listed takes that entry's name; when
exactly one device is listed and exactly one is used and their ids differ, the two are paired
(`GPU 2 (listed as device 0: AMD Instinct MI300X)`): there is nothing else either could be.
Otherwise an unlisted device's name is unknown, and its label says which ids were listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .memory import header_device_properties

LISTED, PAIRED, UNKNOWN, UNLISTED = "listed", "paired", "unknown", "none"


@dataclass(frozen=True)
class DeviceName:
    """What one used GPU is called. `device`: the id its events carry; `name`: from the
    header, None when unknown; `listed_as`: the header's id for it (None when unknown);
    `how`: LISTED (the same id is listed), PAIRED (one listed, one used, ids differ),
    UNKNOWN (not listed, and no unambiguous pairing; `listed_ids` says what was listed) or
    UNLISTED (the header lists no devices)."""

    device: int
    name: str | None
    listed_as: int | None
    how: str
    listed_ids: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """`GPU 2 (AMD Instinct MI300X)`, `GPU 2 (listed as device 0: AMD Instinct MI300X)`,
        `GPU 9 (name unknown: the trace lists device 0)`, or `GPU 3`."""
        head = f"GPU {self.device}"
        if self.how == LISTED:
            return f"{head} ({self.name})" if self.name else head
        if self.how == PAIRED:
            named = f": {self.name}" if self.name else ""
            return f"{head} (listed as device {self.listed_as}{named})"
        if self.how == UNKNOWN:
            return f"{head} (name unknown: {self.listed_note})"
        return head

    @property
    def listed_note(self) -> str:
        """`the trace lists device 0` / `devices 0, 1`: what the header listed instead."""
        ids = self.listed_ids
        shown = ", ".join(str(i) for i in ids[:8]) + (", …" if len(ids) > 8 else "")
        return f"the trace lists device{'s' if len(ids) > 1 else ''} {shown}"

    def as_json(self) -> dict[str, Any]:
        return {"device_name": self.name, "listed_as": self.listed_as, "device_naming": self.how}


def listed_devices(header_devices: Iterable[dict[str, Any]]) -> dict[int, str | None]:
    """Header device entries by integer id: their names (None where absent or blank)."""
    out: dict[int, str | None] = {}
    for entry in header_devices:
        ident = entry.get("id")
        if type(ident) is not int or ident in out:
            continue
        name = entry.get("name")
        out[ident] = name.strip() if isinstance(name, str) and name.strip() else None
    return out


def name_devices(listed: dict[int, str | None], used: Iterable[int]) -> dict[int, DeviceName]:
    """Each used device id named from `listed` (header id -> name), by the rules above."""
    used = sorted({int(d) for d in used})
    listed_ids = tuple(sorted(listed))
    unlisted = [d for d in used if d not in listed]
    out: dict[int, DeviceName] = {}
    for device in used:
        if device in listed:
            out[device] = DeviceName(device, listed[device], device, LISTED, listed_ids)
        elif not listed:
            out[device] = DeviceName(device, None, None, UNLISTED)
        elif len(listed) == 1 and len(used) == 1 and unlisted == [device]:
            (only,) = listed_ids
            out[device] = DeviceName(device, listed[only], only, PAIRED, listed_ids)
        else:
            out[device] = DeviceName(device, None, None, UNKNOWN, listed_ids)
    return out


def trace_device_names(trace: Any, used: Iterable[int]) -> dict[int, DeviceName]:
    """`name_devices` for a trace's header and the GPU device ids its events use."""
    return header_device_names(trace.header, used)


def header_device_names(header: dict[str, Any], used: Iterable[int]) -> dict[int, DeviceName]:
    """The same from a trace header alone."""
    return name_devices(listed_devices(header_device_properties(header)), used)
