"""Where each step's wall time went, as a partition: every instant of a step in one phase.

The step's window [start, end) is claimed layer by layer, each layer taking only the time no
earlier layer took, so the phases are disjoint and add up to the step's duration:

1. `compute`: a compute kernel runs on any GPU;
2. `communication`: a communication kernel runs (and no compute kernel);
3. `data_loading`: the step's thread is in a DataLoader iteration (`enumerate(DataLoader)...`);
4. `synchronisation`: the step's thread is blocked on the GPU (a blocking runtime call);
5. `communication`: the step's thread is in a collective op (`c10d::`, `record_param_comms`,
   `gloo:` ... annotations);
6. `host_launch`: the step's thread is in another runtime call (kernel launches and the like);
7. `compute`: the step's thread is in any other profiled operator (not a user annotation, not a
   `python_function` of a stack trace);
8. `communication`: no operator on the step's thread, but a collective runs on another thread
   (a gloo rank waits for its backend's thread outside any op);
9. an annotation: the step's thread is inside a user annotation (`record_function`) and nothing
   above: the time is named by the innermost such annotation (`## data ##`);
10. `host_other`: the rest, host time outside any profiled operator (Python, sleeps).

On a CPU-only rank layers 1 and 2 are empty. Everything is interval arithmetic on sorted
intervals (`Union`), a few whole-array passes per layer, no loop over events.
"""

from __future__ import annotations

import numpy as np

from .intervals import Union, previous_at_least
from .steps import COLLECTIVE_NAME, COMM_NAME, DATALOADER_PREFIX, names_matching

PARTITION = (
    "compute",
    "communication",
    "data_loading",
    "synchronisation",
    "host_launch",
    "host_other",
)
MAX_ANNOTATIONS = 12  # annotation names kept per rank (by time); the rest are summed as one
OTHER_ANNOTATIONS = "(other annotations)"
NAME_LIMIT = 200  # characters of an annotation's name kept (a trace may hold names of megabytes)
NOT_OPERATOR_CATEGORIES = frozenset({"user_annotation", "python_function"})


def _union(trace, rows: np.ndarray) -> Union:  # type: ignore[no-untyped-def]
    start = trace.start[rows]
    return Union.of(start, start + trace.dur[rows])


def step_partition(session) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:  # type: ignore[no-untyped-def]
    """Per step (in `session.steps` order), ns in each phase of PARTITION, and ns per
    annotation name (layer 9); together they add up to each step's duration."""
    trace = session.trace
    steps = session.steps
    n = len(steps)
    fixed = {p: np.zeros(n, np.int64) for p in PARTITION}
    if not n:
        return fixed, {}
    classes = session.classes
    cpu, gpu, runtime = classes.cpu, classes.gpu, classes.runtime
    kernel = classes.kernel
    is_comm = names_matching(trace, COMM_NAME.search)[trace.name]
    is_loader = names_matching(trace, lambda s: s.startswith(DATALOADER_PREFIX))[trace.name]
    is_collective = names_matching(trace, COLLECTIVE_NAME.match)[trace.name]
    not_operator = np.fromiter(
        (s in NOT_OPERATOR_CATEGORIES for s in trace.strings), bool, count=len(trace.strings)
    )[trace.cat]
    is_annotation = np.fromiter(
        (s == "user_annotation" for s in trace.strings), bool, count=len(trace.strings)
    )[trace.cat]
    cpu_steps = cpu.copy()
    cpu_steps[steps.rows] = False  # the step slices themselves claim nothing
    sync_calls = session.sync if bool(runtime.any()) else None
    sync_start = trace.start[sync_calls.rows] if sync_calls is not None else np.zeros(0, np.int64)
    sync_end = sync_start + (sync_calls.dur if sync_calls is not None else 0)
    sync_lane = trace.lane[sync_calls.rows] if sync_calls is not None else np.zeros(0, np.int32)

    gpu_layers = [
        ("compute", _union(trace, np.flatnonzero(kernel & ~is_comm))),
        ("communication", _union(trace, np.flatnonzero(kernel & is_comm))),
    ]
    del gpu
    any_collective = _union(trace, np.flatnonzero(cpu_steps & is_collective))
    names: dict[int, np.ndarray] = {}
    step_lane = trace.lane[steps.rows]
    for lane in np.unique(step_lane).tolist():
        mine = np.flatnonzero(step_lane == lane)
        lo, hi = steps.start[mine], steps.end[mine]
        on_lane = cpu_steps & (trace.lane == lane)
        layers = [
            *gpu_layers,
            ("data_loading", _union(trace, np.flatnonzero(on_lane & is_loader))),
            (
                "synchronisation",
                Union.of(sync_start[sync_lane == lane], sync_end[sync_lane == lane]),
            ),
            ("communication", _union(trace, np.flatnonzero(on_lane & is_collective))),
            ("host_launch", _union(trace, np.flatnonzero(on_lane & runtime))),
            ("compute", _union(trace, np.flatnonzero(on_lane & ~not_operator))),
            ("communication", any_collective),
        ]
        claimed = Union.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
        before = np.zeros(len(mine), np.int64)
        for phase, layer in layers:
            claimed = claimed.merge(layer)
            after = claimed.covered(lo, hi)
            fixed[phase][mine] += after - before
            before = after
        rows = np.flatnonzero(on_lane & is_annotation & ~is_loader & ~is_collective)
        _annotation_time(trace, rows, claimed, lo, hi, mine, names, n)
        named = sum((v[mine] for v in names.values()), np.zeros(len(mine), np.int64))
        fixed["host_other"][mine] += (hi - lo) - before - named
    annotations: dict[str, np.ndarray] = {}
    for k, v in names.items():  # names cut to NAME_LIMIT characters; the same cut name: summed
        name = trace.strings[k][:NAME_LIMIT]
        annotations[name] = annotations[name] + v if name in annotations else v
    if len(annotations) > MAX_ANNOTATIONS:
        order = sorted(annotations, key=lambda k: (-int(annotations[k].sum()), k))
        rest = sum(
            (annotations.pop(k) for k in order[MAX_ANNOTATIONS - 1 :]), np.zeros(n, np.int64)
        )
        annotations[OTHER_ANNOTATIONS] = annotations.get(OTHER_ANNOTATIONS, 0) + rest
    return fixed, annotations


def _annotation_time(
    trace,  # type: ignore[no-untyped-def]
    rows: np.ndarray,
    claimed: Union,
    lo: np.ndarray,
    hi: np.ndarray,
    mine: np.ndarray,
    names: dict[int, np.ndarray],
    n: int,
) -> None:
    """Add, per annotation name id, the time of the steps [lo, hi) that no layer `claimed`
    and that lies inside an annotation of `rows`, to the innermost (latest-starting) one."""
    if not len(rows):
        return
    a_start = trace.start[rows]
    order = np.argsort(a_start, kind="stable")
    rows, a_start = rows[order], a_start[order]
    a_end = a_start + trace.dur[rows]
    # The free time of the steps: each step's window less what is claimed.
    points = np.unique(np.concatenate((lo, hi, claimed.start, claimed.end, a_start, a_end)))
    seg_lo, seg_hi = points[:-1], points[1:]
    window = Union.of(lo, hi)
    free = (window.covered(seg_lo, seg_hi) > 0) & (claimed.covered(seg_lo, seg_hi) == 0)
    seg_lo, seg_hi = seg_lo[free], seg_hi[free]
    if not len(seg_lo):
        return
    # The latest-starting annotation holding each segment: the last one started by then,
    # else up the chain of earlier ones ending no earlier (previous_at_least on the ends).
    parent = previous_at_least(a_end, np.zeros(len(a_end), np.int64))
    holder = np.searchsorted(a_start, seg_lo, side="right") - 1
    active = np.flatnonzero(holder >= 0)
    while len(active):
        out = a_end[holder[active]] <= seg_lo[active]
        active = active[out]
        holder[active] = parent[holder[active]]
        active = active[holder[active] >= 0]
    inside = holder >= 0
    holder, seg_lo, seg_hi = holder[inside], seg_lo[inside], seg_hi[inside]
    if not len(holder):
        return
    step = np.searchsorted(lo, seg_lo, side="right") - 1  # steps on a lane do not overlap
    ids, which = np.unique(trace.name[rows[holder]], return_inverse=True)
    per = np.bincount(
        which * len(lo) + step, weights=seg_hi - seg_lo, minlength=len(ids) * len(lo)
    ).reshape(len(ids), len(lo))
    for k, name_id in enumerate(ids.tolist()):
        total = names.setdefault(int(name_id), np.zeros(n, np.int64))
        total[mine] += np.rint(per[k]).astype(np.int64)
