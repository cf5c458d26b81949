"""Collective communication: found in one rank's trace, then matched across the ranks of a job.

Per rank (`find_collectives`, run where the rank's trace is loaded) two lists are made:
- `gpu`: the NCCL/RCCL kernels (any kernel whose name holds `nccl` or `rccl`, any case:
  `ncclKernel_*`, `ncclDevKernel_*`, ...), in each stream's order. What each one is (the
  collective, its process group, sizes, dtype, group size) comes from the kernel's own args
  when the trace records them (`Collective name`, `Process Group Name`, `In msg nelems`,
  `Out msg nelems`, `dtype`, `Group size`), else from the `record_param_comms` CPU op that
  launched it, else from the backend annotation around the launch (`nccl:all_to_all`), else
  from the kernel's name (`ncclKernel_AllReduce_...`).
- `cpu`: backend annotations that run the collective on the CPU (`gloo:all_reduce` and
  friends, on the backend's own threads), with sizes from their `Input Dims` and `Input type`.
Each rank's args are read back from the file for these few rows only (`parser.access.read_events`).

Across ranks (`match_collectives`), the same collective is found by process group and order:
the i-th collective of a group within a step (`ProfilerStep#N`) on every rank. Where no group
is recorded, a GPU stream stands for one (the rank's k-th communication stream, by stream id);
CPU collectives of one backend form one sequence (gloo runs them on a pool of threads). Where
the ranks disagree (another collective, another size, fewer collectives), matching stops in
that group and step, and the place and reason are kept in `stops`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .steps import COMM_NAME

if TYPE_CHECKING:
    from .session import TraceSession

UNKNOWN = "unknown"
POINT_TO_POINT = frozenset({"send", "recv"})
# Collectives after which every rank has had every other rank's data: their ends are (nearly)
# simultaneous, which makes them the clock-offset probes and gives them meaningful waits.
SYNCHRONISING = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
# Bus bandwidth factor over algorithm bandwidth for n ranks (as nccl-tests define it).
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
# Backend annotations of collectives run by the CPU (`gloo:all_reduce`), and around launches.
BACKEND_ANNOTATION = re.compile(r"(gloo|nccl|rccl|mpi|ucc|xccl|hccl):([A-Za-z_]\w*)$", re.I)
CPU_BACKENDS = ("gloo", "mpi", "ucc")
RECORD_PARAM_COMMS = "record_param_comms"
MAX_ARG_READS = 200_000  # rows whose args are read back per rank; beyond, sizes are unknown
_ANCESTORS = 32  # how far up the CPU nesting a launch's collective op is looked for

_KIND_WORDS = (
    ("allreduce", "all_reduce"),
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("bcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "send_recv"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("send", "send"),
    ("recv", "recv"),
)

DTYPE_BYTES = {
    "float": 4, "float32": 4, "f32": 4, "int": 4, "int32": 4, "uint32": 4, "i32": 4,
    "double": 8, "float64": 8, "long": 8, "longint": 8, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "int16": 2, "uint16": 2,
    "byte": 1, "unsignedchar": 1, "uint8": 1, "char": 1, "signedchar": 1, "int8": 1,
    "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16,
}  # fmt: skip


def kind_of(name: str) -> str:
    """The collective a name stands for (`all_reduce`, `all_gather`, ...), or `unknown`:
    `nccl:all_reduce`, `allreduce`, `_allgather_base`, `ncclKernel_AllReduce_RING_LL_Sum_float`,
    `ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL`, `c10d::alltoall_base_`."""
    text = name.split("(", 1)[0]
    text = re.sub(r"^(nccl|rccl)(dev)?kernel_?", "", text, flags=re.I)
    text = re.sub(r"^[A-Za-z0-9_]*::?", "", text) if ":" in text else text
    word = re.sub(r"[^a-z]", "", text.lower())
    for key, kind in _KIND_WORDS:
        if word.startswith(key) or (key in word and not word.startswith("generic")):
            return kind
    return UNKNOWN


def dtype_bytes(dtype: Any) -> int | None:
    """Bytes per element of a dtype as traces spell it (`Float`, `BFloat16`, `c10::Half`,
    `unsigned char`), or None."""
    if not isinstance(dtype, str):
        return None
    key = dtype.lower().replace("c10::", "").replace(" ", "").replace("torch.", "")
    return DTYPE_BYTES.get(key)


def payload_bytes(kind: str, nelems_in: int, nelems_out: int, elem: int | None, n: int) -> int:
    """Bytes a collective moves, as nccl-tests count them for its bandwidth: the larger of the
    input and output buffers (the whole buffer for all-reduce and broadcast, the gathered output
    for all-gather, the full input for reduce-scatter, all that is sent for all-to-all); -1 when
    unknown. With only an all-gather's input known, its output is input × group size."""
    if elem is None or (nelems_in < 0 and nelems_out < 0):
        return -1
    count = max(nelems_in, nelems_out)
    if kind == "all_gather" and nelems_out < 0 and n > 0:
        count = nelems_in * n
    return count * elem


@dataclass(frozen=True)
class RankCollectives:
    """One rank's collectives from one source, in order of (group, start). Times int64 ns."""

    source: str  # "gpu" (communication kernels) or "cpu" (backend annotations)
    start: np.ndarray
    end: np.ndarray
    kind: list[str]
    name: list[str]  # the event's own name (kernel or annotation)
    group: list[str]  # process group name, `stream k`, or the CPU backend
    nelems_in: np.ndarray  # int64, -1 unknown
    nelems_out: np.ndarray
    dtype: list[str | None]
    bytes: np.ndarray  # int64 payload (see payload_bytes), -1 unknown
    group_size: np.ndarray  # int64, -1 unknown
    step: np.ndarray  # int64 index into the rank's steps, -1 outside every step
    row: np.ndarray  # int64 the event's row in the rank's trace (to find it again in a view)

    def __len__(self) -> int:
        return len(self.start)

    @staticmethod
    def empty(source: str) -> RankCollectives:
        none = np.zeros(0, np.int64)
        return RankCollectives(
            source, none, none, [], [], [], none, none, [], none, none, none, none
        )

    def busy_ns(self) -> int:
        """Wall time covered by at least one of these collectives."""
        if not len(self):
            return 0
        order = np.argsort(self.start, kind="stable")
        start, end = self.start[order], self.end[order]
        reach = np.maximum.accumulate(end)
        # A new run starts where a start lies beyond everything before it.
        new = np.ones(len(start), bool)
        new[1:] = start[1:] > reach[:-1]
        run = np.cumsum(new) - 1
        run_start = start[new]
        run_end = np.zeros(len(run_start), np.int64)
        np.maximum.at(run_end, run, end)
        return int((run_end - run_start).sum())


# -- one rank ---------------------------------------------------------------------------------


def find_collectives(session: TraceSession, read_args: bool = True) -> dict[str, RankCollectives]:
    """The rank's collectives: `gpu` (communication kernels) and `cpu` (backend annotations
    of CPU collectives, or of launches when `gpu` is empty)."""
    trace = session.trace
    classes = session.classes
    steps = session.steps
    names = np.asarray(trace.strings, dtype=object)
    comm_name = np.fromiter(
        (bool(COMM_NAME.search(s[:4096])) for s in trace.strings), bool, len(trace.strings)
    )
    annotation = np.fromiter(
        (bool(BACKEND_ANNOTATION.match(s[:4096])) for s in trace.strings), bool, len(trace.strings)
    )
    kernels = np.flatnonzero(classes.kernel & comm_name[trace.name])
    cpu_rows = np.flatnonzero(classes.cpu & annotation[trace.name])
    backends = [names[trace.name[r]].split(":", 1)[0].lower() for r in cpu_rows.tolist()]
    cpu_backend = np.array([b in CPU_BACKENDS for b in backends], bool).reshape(-1)
    # Annotations of a CPU backend are CPU collectives; those of a GPU backend (`nccl:`) only
    # stand in when the rank recorded no kernels (a trace cut before its GPU events).
    if cpu_backend.any():
        cpu_rows = cpu_rows[cpu_backend]
    elif len(kernels):
        cpu_rows = cpu_rows[:0]

    record, name_op = _launch_ops(session, kernels)
    args: dict[int, dict[str, Any]] = {}
    if read_args:
        from kinetoscope.parser.access import read_events

        # Kernels and record_param_comms matter only when they name the collective: runs
        # without the key (older traces) are not decoded.
        launched = np.concatenate([kernels, record[record >= 0]])[:MAX_ARG_READS]
        try:
            events = (
                read_events(trace, launched, needle=b'"Collective name"') if len(launched) else {}
            )
            if len(cpu_rows):
                events.update(read_events(trace, cpu_rows[:MAX_ARG_READS]))
            args = {row: event.get("args") or {} for row, event in events.items()}
        except (OSError, ValueError, MemoryError):
            args = {}
    step_start, step_end = steps.start, steps.end

    def step_of(times: np.ndarray) -> np.ndarray:
        if not len(step_start):
            return np.full(len(times), -1, np.int64)
        index = np.searchsorted(step_start, times, side="right") - 1
        inside = (index >= 0) & (times < step_end[np.maximum(index, 0)])
        return np.where(inside, index, -1).astype(np.int64)

    # GPU: streams stand for groups where no group is recorded.
    stream_key = np.where(
        trace.stream[kernels] >= 0, trace.stream[kernels], -1 - trace.lane[kernels]
    )
    stream_rank = {s: k for k, s in enumerate(sorted(set(stream_key.tolist())))}
    gpu_items = []
    links = session.links
    for i, row in enumerate(kernels.tolist()):
        own = args.get(row, {})
        op_name = names[trace.name[name_op[i]]] if name_op[i] >= 0 else ""
        op_args = args.get(int(record[i]), {}) if record[i] >= 0 else {}
        info = own if "Collective name" in own else op_args if "Collective name" in op_args else own
        cname = info.get("Collective name")
        kind = kind_of(cname) if isinstance(cname, str) else UNKNOWN
        if kind == UNKNOWN and op_name:
            kind = kind_of(op_name)
        if kind == UNKNOWN:
            kind = kind_of(names[trace.name[row]])
        group = info.get("Process Group Name")
        launch_row = links.runtime_of(row)
        gpu_items.append(
            (
                str(group) if group is not None else f"stream {stream_rank[int(stream_key[i])]}",
                int(trace.start[launch_row] if launch_row >= 0 else trace.start[row]),
                row,
                kind,
                info,
            )
        )
    gpu = _columns("gpu", trace, gpu_items, step_of)

    cpu_items = []
    for row in cpu_rows.tolist():
        own = args.get(row, {})
        name = names[trace.name[row]]
        info = dict(own)
        dims, types = own.get("Input Dims"), own.get("Input type")
        if "In msg nelems" not in own and isinstance(dims, list) and dims:
            nelems = _nelems(dims[0])
            if nelems is not None:
                info["In msg nelems"] = nelems
            if isinstance(types, list) and types and "dtype" not in own:
                info["dtype"] = types[0]
        group = own.get("Process Group Name")
        backend = name.split(":", 1)[0].lower()
        cpu_items.append(
            (
                str(group) if group is not None else backend,
                int(trace.start[row]),
                row,
                kind_of(name),
                info,
            )
        )
    info = trace.header.get("distributedInfo")
    world = info.get("world_size") if isinstance(info, dict) else None
    cpu = _columns("cpu", trace, cpu_items, step_of, world if isinstance(world, int) else -1)
    return {"gpu": gpu, "cpu": cpu}


def _nelems(dims: Any) -> int | None:
    """Elements of one `Input Dims` entry (a shape, or a list of shapes for a TensorList)."""
    if isinstance(dims, list) and all(isinstance(d, int) for d in dims):
        count = 1
        for d in dims:
            count *= d
        return count if dims else None
    if isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims):
        parts = [_nelems(d) for d in dims]
        return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    return None


def _int_arg(info: dict[str, Any], key: str) -> int:
    value = info.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else -1


def _columns(
    source: str,
    trace: Any,
    items: list[tuple],
    step_of: Any,
    default_size: int = -1,  # type: ignore[type-arg]
) -> RankCollectives:
    """Columns of (group, issue time, row, kind, args) items, ordered by group then start.
    `default_size`: the group size where none is recorded (the world size, for a backend's
    collectives that name no process group)."""
    if not items:
        return RankCollectives.empty(source)
    items.sort(key=lambda item: (item[0], int(trace.start[item[2]]), item[2]))
    rows = np.array([item[2] for item in items], np.int64)
    issued = np.array([item[1] for item in items], np.int64)
    infos = [item[4] for item in items]
    kinds = [item[3] for item in items]
    nin = np.array([_int_arg(i, "In msg nelems") for i in infos], np.int64)
    nout = np.array([_int_arg(i, "Out msg nelems") for i in infos], np.int64)
    size = np.array([_int_arg(i, "Group size") for i in infos], np.int64)
    size[size < 0] = default_size
    dtypes = [i.get("dtype") if isinstance(i.get("dtype"), str) else None for i in infos]
    payload = np.array(
        [
            payload_bytes(k, int(a), int(b), dtype_bytes(d), int(n))
            for k, a, b, d, n in zip(kinds, nin, nout, dtypes, size)
        ],
        np.int64,
    )
    return RankCollectives(
        source=source,
        start=trace.start[rows].astype(np.int64),
        end=(trace.start[rows] + trace.dur[rows]).astype(np.int64),
        kind=kinds,
        name=[trace.strings[int(trace.name[r])] for r in rows.tolist()],
        group=[item[0] for item in items],
        nelems_in=nin,
        nelems_out=nout,
        dtype=dtypes,
        bytes=payload,
        group_size=size,
        step=step_of(issued),
        row=rows,
    )


def _launch_ops(session: TraceSession, kernels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel, from the ancestors of the runtime call that launched it: the nearest
    `record_param_comms` (whose args say what the collective is, in newer traces) and the
    nearest backend annotation or `c10d::` op (whose name says it); -1 where there is none."""
    trace = session.trace
    links = session.links
    nesting = session.nesting
    runtime = np.full(len(kernels), -1, np.int64)
    if len(links.gpu_rows):
        slot = np.minimum(np.searchsorted(links.gpu_rows, kernels), len(links.gpu_rows) - 1)
        runtime = np.where(links.gpu_rows[slot] == kernels, links.gpu_runtime[slot], -1)
    named = np.fromiter(
        (
            t.startswith("c10d::") or bool(BACKEND_ANNOTATION.match(t))
            for t in (s[:200] for s in trace.strings)
        ),
        bool,
        len(trace.strings),
    )
    record_id = trace.string_id(RECORD_PARAM_COMMS)
    record = np.full(len(kernels), -1, np.int64)
    name_op = np.full(len(kernels), -1, np.int64)
    current = runtime.astype(np.int64)
    for _ in range(_ANCESTORS):
        alive = current >= 0
        if not alive.any():
            break
        ids = np.full(len(current), -2, np.int64)
        ids[alive] = trace.name[current[alive]]
        hit = alive & (name_op < 0)
        hit[alive] &= named[ids[alive]]
        name_op[hit] = current[hit]
        is_record = alive & (record < 0) & (ids == record_id)
        record[is_record] = current[is_record]
        parent = np.full(len(current), -1, np.int64)
        parent[alive] = nesting.parent[current[alive]]
        current = parent
    return record, name_op


# -- across ranks -----------------------------------------------------------------------------


@dataclass
class Matched:
    """Collectives matched across ranks: row i is one collective, column j the j-th rank of
    `ranks`. Times int64 ns in each rank's own clock; `present[i, j]` says whether rank j took
    part (the others' entries are 0)."""

    ranks: list[int]
    source: str
    group: list[str]
    step: list[str | None]  # step name, None outside steps
    index: list[int]  # position within (group, step)
    kind: list[str]
    name: list[str]  # the name on the lowest rank taking part
    bytes: np.ndarray  # int64, -1 unknown
    group_size: np.ndarray  # int64: recorded, else the ranks taking part
    start: np.ndarray  # (n, ranks) int64
    end: np.ndarray
    present: np.ndarray  # (n, ranks) bool
    position: np.ndarray  # (n, ranks) int64: index into the rank's RankCollectives, -1 absent
    stops: list[dict[str, Any]] = field(default_factory=list)
    unmatched: dict[int, int] = field(default_factory=dict)  # per rank: collectives not matched

    def __len__(self) -> int:
        return len(self.kind)


def choose_source(per_rank: dict[int, dict[str, RankCollectives]]) -> str:
    """`gpu` when the ranks recorded communication kernels, else `cpu`: the source most ranks
    hold (GPU first on a tie)."""
    gpu = sum(1 for lists in per_rank.values() if len(lists["gpu"]))
    cpu = sum(1 for lists in per_rank.values() if len(lists["cpu"]))
    return "gpu" if gpu >= cpu and gpu else "cpu"


def match_collectives(
    per_rank: dict[int, dict[str, RankCollectives]],
    step_names: dict[int, list[str]],
    cut_short: frozenset[int] | set[int] = frozenset(),
) -> Matched:
    """Match the ranks' collectives by (group, step, position); see the module docstring.
    Ranks in `cut_short` (their files end early) take part as far as they go; a rank that
    recorded no collective of the chosen source is left out of the matching (and said so)."""
    source = choose_source(per_rank)
    ranks = sorted(per_rank)
    lists = {r: per_rank[r][source] for r in ranks}
    silent = [r for r in ranks if not len(lists[r])]
    if silent and len(silent) < len(ranks):
        where = "GPU (communication kernels)" if source == "gpu" else "CPU (backend annotations)"
        initial_stops = [
            {
                "group": None,
                "step": None,
                "index": 0,
                "reason": f"{_ranks_text(silent)} recorded no {where} collectives: left out "
                "of the matching",
            }
        ]
    else:
        initial_stops = []
    column = {r: j for j, r in enumerate(ranks)}
    # Sequences per (group, step name) per rank: positions into the rank's list.
    sequences: dict[tuple[str, str | None], dict[int, list[int]]] = {}
    for r in ranks:
        coll = lists[r]
        names = step_names.get(r, [])
        for i in range(len(coll)):
            if coll.kind[i] in POINT_TO_POINT:
                continue  # between two ranks, in an order of their own: not matched here
            s = int(coll.step[i])
            key = (coll.group[i], names[s] if 0 <= s < len(names) else None)
            sequences.setdefault(key, {}).setdefault(r, []).append(i)
    # A group's members: the ranks that recorded any collective of it (a subgroup's
    # collectives are not expected on ranks outside it).
    members: dict[str, set[int]] = {}
    for r in ranks:
        for group in set(lists[r].group):
            members.setdefault(group, set()).add(r)
    has_step = {r: set(step_names.get(r, [])) for r in ranks}
    any_steps = any(has_step.values())
    out: dict[str, list[Any]] = {k: [] for k in ("group", "step", "index", "kind", "name")}
    sizes: list[int] = []
    nbytes: list[int] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    present: list[np.ndarray] = []
    positions: list[np.ndarray] = []
    stops: list[dict[str, Any]] = initial_stops
    matched_count = dict.fromkeys(ranks, 0)

    def stop(group: str, step: str | None, index: int, reason: str) -> None:
        stops.append({"group": group, "step": step, "index": index, "reason": reason})

    for (group, step), by_rank in sorted(
        sequences.items(), key=lambda kv: (kv[0][0], _step_number(kv[0][1]))
    ):
        # The ranks that should hold this sequence: the group's members that recorded the step
        # (all members for collectives outside steps, or when no rank has steps).
        if step is None or not any_steps:
            expected = [r for r in ranks if r in members[group]]
        else:
            expected = [r for r in ranks if step in has_step[r] and r in members[group]]
        # A rank whose file ends early may lack the step's last collectives.
        expected = [r for r in expected if r in by_rank or r not in cut_short]
        taking = [r for r in expected if r in by_rank]
        if len(expected) < 2:
            continue
        absent = [r for r in expected if r not in by_rank]
        if absent:
            stop(
                group,
                step,
                0,
                f"{_ranks_text(absent)} recorded no collective of group "
                f"{group!r} in this step; rank {taking[0]} recorded {len(by_rank[taking[0]])}",
            )
            continue
        counts = {r: len(by_rank[r]) for r in taking}
        longest = max(counts.values())
        for position in range(longest):
            ended = [r for r in taking if counts[r] <= position and r in cut_short]
            taking = [r for r in taking if r not in ended]
            if len(taking) < 2:
                break
            short = [r for r in taking if counts[r] <= position]
            if short:
                full = [r for r in taking if counts[r] > position]
                stop(
                    group,
                    step,
                    position,
                    f"{_ranks_text(short)} recorded {counts[short[0]]} "
                    f"collectives of this group in this step, rank {full[0]} {counts[full[0]]}",
                )
                break
            entries = {r: by_rank[r][position] for r in taking}
            kinds = {r: lists[r].kind[i] for r, i in entries.items()}
            known = {k for k in kinds.values() if k != UNKNOWN}
            if len(known) > 1:
                first = taking[0]
                other = next(r for r in taking if kinds[r] != kinds[first])
                stop(
                    group,
                    step,
                    position,
                    f"rank {first} has {kinds[first]} where rank {other} has {kinds[other]}",
                )
                break
            sizes_known = {
                r: int(lists[r].bytes[i]) for r, i in entries.items() if lists[r].bytes[i] >= 0
            }
            if len(set(sizes_known.values())) > 1:
                (a, sa), (b, sb) = _two_different(sizes_known)
                stop(
                    group,
                    step,
                    position,
                    f"{kinds[taking[0]]} of {sa:,} bytes on rank {a} but {sb:,} bytes on rank {b}",
                )
                break
            row_start = np.zeros(len(ranks), np.int64)
            row_end = np.zeros(len(ranks), np.int64)
            row_present = np.zeros(len(ranks), bool)
            row_position = np.full(len(ranks), -1, np.int64)
            group_sizes = []
            for r, i in entries.items():
                j = column[r]
                row_start[j], row_end[j], row_present[j] = lists[r].start[i], lists[r].end[i], True
                row_position[j] = i
                if lists[r].group_size[i] > 0:
                    group_sizes.append(int(lists[r].group_size[i]))
                matched_count[r] += 1
            kind = next(iter(known)) if known else UNKNOWN
            out["group"].append(group)
            out["step"].append(step)
            out["index"].append(position)
            out["kind"].append(kind)
            out["name"].append(lists[taking[0]].name[entries[taking[0]]])
            sizes.append(max(group_sizes) if group_sizes else len(taking))
            nbytes.append(next(iter(sizes_known.values())) if sizes_known else -1)
            starts.append(row_start)
            ends.append(row_end)
            present.append(row_present)
            positions.append(row_position)
    n_ranks = len(ranks)

    def stack(rows: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.array(rows, dtype).reshape(len(rows), n_ranks)

    return Matched(
        ranks=ranks,
        source=source,
        group=out["group"],
        step=out["step"],
        index=out["index"],
        kind=out["kind"],
        name=out["name"],
        bytes=np.array(nbytes, np.int64),
        group_size=np.array(sizes, np.int64),
        start=stack(starts, np.int64),
        end=stack(ends, np.int64),
        present=stack(present, bool),
        position=stack(positions, np.int64),
        stops=stops,
        unmatched={r: len(lists[r]) - matched_count[r] for r in ranks},
    )


def _step_number(step: str | None) -> tuple[int, str]:
    if step is None:
        return (-1, "")
    digits = step.rsplit("#", 1)[-1]
    return (int(digits), step) if digits.isdigit() else (0, step)


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks)


def _two_different(values: dict[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    items = list(values.items())
    first = items[0]
    other = next(item for item in items if item[1] != first[1])
    return first, other
