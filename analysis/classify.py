"""Which rows are CPU slices, GPU activities and runtime calls, and their (cat, name) groups."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from kinetoscope.parser.model import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    KIND_OTHER,
    KIND_RUNTIME,
    Trace,
)

from .intervals import ids_in_use


@dataclass(frozen=True)
class RowClasses:
    """Boolean masks over the rows of a trace, as the spec defines the classes."""

    kind: np.ndarray  # int8 KIND_* for slices (ph X), -1 for other rows
    cpu: np.ndarray  # CPU slices (runtime calls included)
    gpu: np.ndarray  # GPU activities: kernels, memcpys, memsets
    runtime: np.ndarray  # runtime calls (CPU slices of category cuda_runtime/cuda_driver/runtime)

    @property
    def kernel(self) -> np.ndarray:
        return self.kind == KIND_KERNEL

    @property
    def memcpy(self) -> np.ndarray:
        return self.kind == KIND_MEMCPY

    @property
    def memset(self) -> np.ndarray:
        return self.kind == KIND_MEMSET


def classify(trace: Trace) -> RowClasses:
    kind = trace.row_kind()
    cpu = (kind == KIND_OTHER) | (kind == KIND_RUNTIME)
    gpu = (kind == KIND_KERNEL) | (kind == KIND_MEMCPY) | (kind == KIND_MEMSET)
    runtime = kind == KIND_RUNTIME
    return RowClasses(kind=kind, cpu=cpu, gpu=gpu, runtime=runtime)


@dataclass(frozen=True)
class Groups:
    """Rows grouped by (cat, name) string ids: `index[row]` is the row's group, -1 if unused."""

    cat: np.ndarray  # int32 string id per group
    name: np.ndarray  # int32 string id per group
    index: np.ndarray  # int32 per row of the trace

    def __len__(self) -> int:
        return len(self.cat)


def _dense_rank(ids: np.ndarray, n_ids: int) -> tuple[np.ndarray, np.ndarray]:
    """(used ids ascending, rank of every possible id among the used ones)."""
    used = ids_in_use(ids, n_ids)
    rank = np.zeros(n_ids, dtype=np.int64)
    rank[used] = np.arange(len(used))
    return used, rank


def group_rows(trace: Trace, mask: np.ndarray) -> Groups:
    """Group the rows selected by `mask` by (cat, name); groups ascend by (cat id, name id)."""
    rows = np.flatnonzero(mask)
    n_strings = max(len(trace.strings), 1)
    cat, name = trace.cat[rows], trace.name[rows]
    # Number the categories and names in use densely, so that (cat, name) keys stay small
    # enough to be grouped with a lookup table instead of a sort.
    used_cats, cat_rank = _dense_rank(cat, n_strings)
    used_names, name_rank = _dense_rank(name, n_strings)
    width = max(len(used_names), 1)
    key = cat_rank[cat] * width + name_rank[name]
    key_range = len(used_cats) * width
    index = np.full(len(trace), -1, dtype=np.int32)
    if key_range <= max(4 * len(rows), 1 << 20):
        present = np.zeros(key_range, dtype=bool)
        present[key] = True
        keys = np.flatnonzero(present)
        dense = np.zeros(key_range, dtype=np.int32)
        dense[keys] = np.arange(len(keys), dtype=np.int32)
        index[rows] = dense[key]
    else:
        keys, inverse = np.unique(key, return_inverse=True)
        index[rows] = inverse.reshape(-1).astype(np.int32)
    return Groups(
        cat=used_cats[keys // width].astype(np.int32),
        name=used_names[keys % width].astype(np.int32),
        index=index,
    )


def ranked_groups(
    trace: Trace, groups: Groups, value: np.ndarray, limit: int | None = None
) -> np.ndarray:
    """Group indices by value descending, ties by cat then name ascending (as strings)."""
    cats = np.array([trace.strings[i] for i in groups.cat], dtype=object)
    names = np.array([trace.strings[i] for i in groups.name], dtype=object)
    # Candidates first: all groups whose value reaches the limit-th largest value.
    candidates = np.arange(len(groups))
    if limit is not None and len(groups) > limit:
        threshold = np.partition(value, len(value) - limit)[len(value) - limit]
        candidates = np.flatnonzero(value >= threshold)
    ordered = sorted(candidates.tolist(), key=lambda g: (-int(value[g]), cats[g], names[g]))
    return np.asarray(ordered[:limit] if limit is not None else ordered, dtype=np.int64)
