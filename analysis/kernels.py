"""Kernel statistics: GPU activities grouped by (cat, name), and the operators that launched them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import Trace

from .classify import Groups
from .intervals import add_at, sums_fit
from .links import Links
from .nesting import Nesting


@dataclass(frozen=True)
class KernelTable:
    """Per (cat, name) group of GPU activities; int64 ns. `mean` is total / count."""

    groups: Groups
    count: np.ndarray
    total: np.ndarray
    min: np.ndarray
    max: np.ndarray
    launcher_row: np.ndarray  # per GPU activity (Links.gpu_rows order): operator row or -1

    def __len__(self) -> int:
        return len(self.count)

    def mean(self) -> np.ndarray:
        return self.total / np.maximum(self.count, 1)


def kernel_totals(
    trace: Trace, groups: Groups, links: Links
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per GPU group: count, total, shortest and longest duration (no nesting needed: what a
    caller that wants only these, as the Python API's `kernels()`, asks before the nesting)."""
    rows = links.gpu_rows
    group = groups.index[rows].astype(np.int64)
    dur = trace.dur[rows]
    n = len(groups)
    count = np.bincount(group, minlength=n).astype(np.int64)
    total = add_at(np.zeros(n, dtype=np.int64), group, dur, sums_fit(dur))  # exact at any size
    low = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(low, group, dur)
    high = np.zeros(n, dtype=np.int64)
    np.maximum.at(high, group, dur)
    return count, total, low, high


def compute_kernels(trace: Trace, groups: Groups, links: Links, nesting: Nesting) -> KernelTable:
    rows = links.gpu_rows
    count, total, low, high = kernel_totals(trace, groups, links)
    # The launching operator is the runtime call's parent slice.
    launcher = np.full(len(rows), -1, dtype=np.int64)
    linked = links.gpu_runtime >= 0
    launcher[linked] = nesting.parent[links.gpu_runtime[linked]]
    return KernelTable(
        groups=groups, count=count, total=total, min=low, max=high, launcher_row=launcher
    )


def launchers(
    trace: Trace, table: KernelTable, links: Links, op_groups: Groups, kernel_group: int
) -> list[tuple[str, str, int, int]]:
    """Operators that launched a kernel group: (cat, name, count, Σ kernel dur), most time first."""
    rows = links.gpu_rows
    mine = np.flatnonzero(table.groups.index[rows] == kernel_group)
    launcher = table.launcher_row[mine]
    known = launcher >= 0
    op = op_groups.index[launcher[known]]
    durs = trace.dur[rows[mine[known]]]
    result: list[tuple[str, str, int, int]] = []
    for g in np.unique(op):
        sel = op == g
        result.append(
            (
                trace.strings[int(op_groups.cat[g])],
                trace.strings[int(op_groups.name[g])],
                int(sel.sum()),
                int(durs[sel].sum()),
            )
        )
    unknown = int((~known).sum())
    if unknown:
        result.append(
            ("", "(no launching operator)", unknown, int(trace.dur[rows[mine[~known]]].sum()))
        )
    result.sort(key=lambda item: (-item[3], item[0], item[1]))
    return result


@dataclass(frozen=True)
class KernelLaunchers:
    """Per GPU group: the operator group that launched most of its time, and how many did."""

    top_group: np.ndarray  # CPU group id, -1 when no activity of the group has a launcher
    n_groups: np.ndarray  # distinct launching operator groups


def kernel_launchers(
    launcher_row: np.ndarray,
    gpu_rows: np.ndarray,
    trace: Trace,
    gpu_groups: Groups,
    cpu_groups: Groups,
) -> KernelLaunchers:
    """`launcher_row` is KernelTable.launcher_row (per entry of `gpu_rows`)."""
    n = len(gpu_groups)
    known = launcher_row >= 0
    kernel = gpu_groups.index[gpu_rows[known]].astype(np.int64)
    op = cpu_groups.index[launcher_row[known]].astype(np.int64)
    dur = trace.dur[gpu_rows[known]]
    top = np.full(n, -1, dtype=np.int64)
    distinct = np.zeros(n, dtype=np.int64)
    if len(kernel):
        key = kernel * (len(cpu_groups) + 1) + op
        pairs, inverse = np.unique(key, return_inverse=True)
        totals = np.zeros(len(pairs), dtype=np.int64)
        np.add.at(totals, inverse.reshape(-1), dur)
        pair_kernel = pairs // (len(cpu_groups) + 1)
        pair_op = pairs % (len(cpu_groups) + 1)
        np.add.at(distinct, pair_kernel, 1)
        # Per kernel group, the pair with the most time (ties: lower operator group id).
        order = np.lexsort((pair_op, -totals, pair_kernel))
        first = np.ones(len(order), dtype=bool)
        first[1:] = pair_kernel[order][1:] != pair_kernel[order][:-1]
        best = order[first]
        top[pair_kernel[best]] = pair_op[best]
    return KernelLaunchers(top_group=top, n_groups=distinct)


def main_launchers(trace: Trace, table: KernelTable, links: Links, op_groups: Groups) -> np.ndarray:
    """Per kernel group, the operator group whose launches took the most GPU time (-1: none)."""
    launchers = kernel_launchers(table.launcher_row, links.gpu_rows, trace, table.groups, op_groups)
    return launchers.top_group


def top_launcher(analysis, cat: str, name: str) -> str | None:  # type: ignore[no-untyped-def]
    """Name of the operator that launched most of a kernel group's GPU time, if known."""
    trace = analysis.trace
    groups = analysis.kernels.groups
    cat_id, name_id = trace.string_id(cat), trace.string_id(name)
    match = np.flatnonzero((groups.cat == cat_id) & (groups.name == name_id))
    if len(match) == 0:
        return None
    op = int(analysis.kernel_launchers[int(match[0])])
    if op < 0:
        return None
    return trace.strings[int(analysis.cpu_groups.name[op])]
