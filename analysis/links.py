"""Correlation links between GPU activities and the runtime calls that launched them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import NO_VALUE, Trace


@dataclass(frozen=True)
class Links:
    """GPU activity <-> runtime call. A correlation links to the first runtime call carrying it."""

    corr_values: np.ndarray  # int64 correlations that have a runtime call, ascending
    corr_runtime: np.ndarray  # int64 the runtime row for each of corr_values
    gpu_rows: np.ndarray  # int64 rows of all GPU activities, file order
    gpu_runtime: np.ndarray  # int64 linked runtime row per gpu_rows entry, -1 when none
    by_runtime: np.ndarray  # positions into gpu_rows, sorted by linked runtime row
    by_runtime_key: np.ndarray  # gpu_runtime[by_runtime]

    def runtime_of(self, row: int) -> int:
        """The runtime row linked to a GPU activity row, or -1."""
        i = int(np.searchsorted(self.gpu_rows, row))
        if i < len(self.gpu_rows) and self.gpu_rows[i] == row:
            return int(self.gpu_runtime[i])
        return -1

    def runtime_for_corr(self, corr: int) -> int:
        i = int(np.searchsorted(self.corr_values, corr))
        if i < len(self.corr_values) and self.corr_values[i] == corr:
            return int(self.corr_runtime[i])
        return -1

    def gpu_of(self, runtime_row: int) -> np.ndarray:
        """Rows of the GPU activities a runtime call launched, file order."""
        lo = int(np.searchsorted(self.by_runtime_key, runtime_row, side="left"))
        hi = int(np.searchsorted(self.by_runtime_key, runtime_row, side="right"))
        return self.gpu_rows[self.by_runtime[lo:hi]]


def compute_links(trace: Trace, gpu: np.ndarray, runtime: np.ndarray) -> Links:
    runtime_rows = np.flatnonzero(runtime & (trace.corr != NO_VALUE))
    corr_values, first = np.unique(trace.corr[runtime_rows], return_index=True)
    # np.unique's index is the first occurrence, and rows are in file order.
    corr_runtime = runtime_rows[first].astype(np.int64)

    gpu_rows = np.flatnonzero(gpu).astype(np.int64)
    corr = trace.corr[gpu_rows]
    slot = np.searchsorted(corr_values, corr)
    slot_clipped = np.minimum(slot, max(len(corr_values) - 1, 0))
    found = (corr != NO_VALUE) & (slot < len(corr_values))
    if len(corr_values):
        found &= corr_values[slot_clipped] == corr
    gpu_runtime = np.full(len(gpu_rows), -1, dtype=np.int64)
    if len(corr_values):
        gpu_runtime[found] = corr_runtime[slot_clipped[found]]
    by_runtime = np.argsort(gpu_runtime, kind="stable")
    return Links(
        corr_values=corr_values.astype(np.int64),
        corr_runtime=corr_runtime,
        gpu_rows=gpu_rows,
        gpu_runtime=gpu_runtime,
        by_runtime=by_runtime,
        by_runtime_key=gpu_runtime[by_runtime],
    )
