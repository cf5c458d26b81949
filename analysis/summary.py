"""The `summary --json` document of the spec, built from a Trace and its analyses."""

from __future__ import annotations

from typing import Any

from kinetoscope.parser.model import Trace

from .classify import Groups, ranked_groups
from .devices import trace_device_names
from .idle import CAUSES
from .memory import device_properties
from .session import TraceSession
from .sync import step_sync_us, sync_section
from .units import us  # noqa: F401 (used here and by importers)

SUMMARY_VERSION = 1
TOP_GROUPS = 50
TOP_GAPS = 20


def source_section(trace: Trace) -> dict[str, Any]:
    src = trace.source
    return {"path": src.path, "bytes": src.bytes, "compressed": src.compressed}


def trace_section(trace: Trace) -> dict[str, Any]:
    header = trace.header
    return {
        "schema_version": header.get("schemaVersion"),
        "base_time_ns": header.get("baseTimeNanoseconds"),
        "events": trace.n_events,
        "by_phase": dict(trace.by_phase),
        "by_category": dict(trace.by_category),
        "start_us": us(trace.slice_start_min),
        "end_us": us(trace.slice_end_max),
        "complete": trace.complete,
        "warnings": list(trace.warnings),
    }


def devices_section(trace: Trace) -> list[dict[str, Any]]:
    return [
        {
            "id": entry.get("id"),
            "name": entry.get("name"),
            "total_memory_bytes": entry.get("totalGlobalMem"),
        }
        for entry in device_properties(trace)
    ]


def gpu_section(analysis: TraceSession) -> list[dict[str, Any]]:
    out = []
    names = trace_device_names(analysis.trace, [dev.device for dev in analysis.idle.devices])
    for dev in analysis.idle.devices:
        window = dev.window
        out.append(
            {
                "device": dev.device,
                **names[dev.device].as_json(),
                "kernels": dev.kernels,
                "memcpys": dev.memcpys,
                "memsets": dev.memsets,
                "window_start_us": us(window[0]) if window else None,
                "window_end_us": us(window[1]) if window else None,
                "busy_us": us(dev.busy_ns),
                "idle_us": us(dev.idle_ns),
                "idle_by_cause": {c: us(v) for c, v in zip(CAUSES, dev.idle_by_cause)},
            }
        )
    return out


def idle_gaps_section(analysis: TraceSession, limit: int = TOP_GAPS) -> list[dict[str, Any]]:
    trace = analysis.trace
    gaps = analysis.idle.gaps
    out = []
    for i in analysis.idle.gaps.longest(limit).tolist():
        stack = analysis.gap_cpu_stack(i)
        out.append(
            {
                "device": int(gaps.device[i]),
                "start_us": us(gaps.start[i]),
                "dur_us": us(gaps.end[i] - gaps.start[i]),
                "cause": CAUSES[int(gaps.cause[i])],
                "next_gpu_event": trace.name_of(int(gaps.next_row[i])),
                "cpu_stack": [trace.name_of(int(r)) for r in stack],
            }
        )
    return out


def idle_by_cpu_section(analysis: TraceSession, limit: int = TOP_GAPS) -> list[dict[str, Any]]:
    """Extension: GPU idle totalled by the CPU operator running during the gaps (all gaps of
    all devices), most first; gaps with no CPU slice at their midpoint last, `cat`/`name` null."""
    trace = analysis.trace
    table = analysis.idle_by_cpu
    out: list[dict[str, Any]] = [
        {
            "cat": trace.strings[int(table.cat[i])],
            "name": trace.strings[int(table.name[i])],
            "gaps": int(table.gaps[i]),
            "idle_us": us(table.idle[i]),
            "longest_us": us(table.longest[i]),
        }
        for i in range(min(limit, len(table)))
    ]
    if table.unattributed_gaps:
        out.append(
            {
                "cat": None,
                "name": None,
                "gaps": table.unattributed_gaps,
                "idle_us": us(table.unattributed_idle),
                "longest_us": None,
            }
        )
    return out


def _group_label(trace: Trace, groups: Groups, g: int) -> tuple[str, str]:
    return trace.strings[int(groups.cat[g])], trace.strings[int(groups.name[g])]


def operators_section(analysis: TraceSession, limit: int = TOP_GROUPS) -> list[dict[str, Any]]:
    trace = analysis.trace
    table = analysis.operators
    out = []
    for g in ranked_groups(trace, table.groups, table.excl, limit).tolist():
        cat, name = _group_label(trace, table.groups, g)
        out.append(
            {
                "cat": cat,
                "name": name,
                "count": int(table.count[g]),
                "incl_us": us(table.incl[g]),
                "excl_us": us(table.excl[g]),
                "gpu_self_us": us(table.gpu_self[g]),
                "gpu_total_us": us(table.gpu_total[g]),
            }
        )
    return out


def kernels_section(analysis: TraceSession, limit: int = TOP_GROUPS) -> list[dict[str, Any]]:
    trace = analysis.trace
    table = analysis.kernels
    out = []
    for g in ranked_groups(trace, table.groups, table.total, limit).tolist():
        cat, name = _group_label(trace, table.groups, g)
        total, count = int(table.total[g]), int(table.count[g])
        out.append(
            {
                "cat": cat,
                "name": name,
                "count": count,
                "total_us": us(total),
                "mean_us": round(total / (1000 * count), 3),
                "min_us": us(table.min[g]),
                "max_us": us(table.max[g]),
            }
        )
    return out


def steps_section(analysis: TraceSession) -> list[dict[str, Any]]:
    trace = analysis.trace
    steps = analysis.steps
    sync_us = step_sync_us(analysis.sync)  # extension: host time blocked on the GPU
    return [
        {
            "name": trace.name_of(int(steps.rows[i])),
            "start_us": us(steps.start[i]),
            "dur_us": us(steps.dur[i]),
            "gpu_busy_us": us(steps.gpu_busy[i]),
            "dataloader_us": us(steps.dataloader[i]),
            "sync_us": sync_us[i],
            # Extensions for CPU-side time: see docs/analysis.md.
            "cpu_busy_us": us(steps.cpu_busy[i]),
            "uninstrumented_us": us(steps.uninstrumented[i]),
            "collective_us": us(steps.collective[i]),
        }
        for i in range(len(steps))
    ]


def memory_section(analysis: TraceSession) -> list[dict[str, Any]]:
    from .memory_ops import peak_fields

    ops = analysis.memory_ops
    return [
        {
            "device_type": group.device_type,
            "device_id": group.device_id,
            "peak_allocated_bytes": group.peak_allocated,
            "peak_reserved_bytes": group.peak_reserved,
            # Extension: when and where the peak happened, allocations never freed.
            **peak_fields(
                analysis.trace, analysis.nesting, ops.device(group.device_type, group.device_id)
            ),
        }
        for group in analysis.memory
    ]


def findings_section(analysis: TraceSession) -> list[dict[str, Any]]:
    return [finding.to_json(analysis.trace) for finding in analysis.findings]


def causes_section(analysis: TraceSession) -> list[dict[str, Any]]:
    """Extension: the findings grouped one per cause (docs/analysis.md), most severe first;
    `finding` and `supports` are indices into `findings`, which keeps every rule's evidence."""
    index = {id(f): i for i, f in enumerate(analysis.findings)}
    out = []
    for cause in analysis.causes:
        primary = index[id(cause.own or cause)]
        out.append(
            {
                "rule": cause.rule,
                "severity": cause.severity,
                "title": cause.headline,
                "stake_us": us(cause.stake),
                "device": cause.device,
                "finding": primary,
                "supports": [index[id(s)] for s in cause.supports],
            }
        )
    return out


def build_summary(of: Trace | TraceSession) -> dict[str, Any]:
    """The whole document of the spec, for a trace or for an open session on one (whose
    results are then shared with the caller's other views)."""
    # Imported here, not with the module: a job's rank digest (analysis/job.py) needs only the
    # sections above, not the compile analysis or memory per operator (their import is ~25 ms).
    from .compile import compile_section
    from .memory_ops import memory_ops_section

    analysis = of if isinstance(of, TraceSession) else TraceSession(of)
    trace = analysis.trace
    # The stages that need no nesting run beside it; the second thread then waits for the
    # nesting (so that the steps never sort the slices themselves beside it, at the peak of
    # memory). After it the findings' chain, steps -> compiled -> findings with the sync beside
    # the steps, is split so that neither thread waits on the other: this thread makes the
    # steps, then memory per operator (the longest stage) and the tables only the document
    # reads; the other the sync, the compile lens and the findings. Each result is made once,
    # whoever asks first; both plans end with the rest of the document's results, so a thread
    # done early takes what the other has not reached yet, except the operators table: taken
    # by the other thread while memory per operator finished here, the two stages' temporaries
    # made the peak of a 4 GB trace's summary (some 120 MB above it otherwise).
    analysis.compute_concurrently(
        (
            "classes", "cpu_groups", "nesting", "steps", "memory_ops", "operators", "kernels",
            "idle_by_cpu", "kernel_efficiency", "findings", "causes",
        ),
        (
            "links", "idle", "memory", "nesting", "sync", "compiled", "findings", "causes",
            "idle_by_cpu", "kernel_efficiency",
        ),
    )  # fmt: skip
    return {
        "kinetoscope_summary": SUMMARY_VERSION,
        "source": source_section(trace),
        "trace": trace_section(trace),
        "devices": devices_section(trace),
        "gpu": gpu_section(analysis),
        "idle_gaps": idle_gaps_section(analysis),
        "idle_by_cpu": idle_by_cpu_section(analysis),
        "operators": operators_section(analysis),
        "kernels": kernels_section(analysis),
        "steps": steps_section(analysis),
        "memory": memory_section(analysis),
        "memory_ops": memory_ops_section(trace, analysis.memory_ops),
        "sync": sync_section(trace, analysis.sync),
        "compile": compile_section(analysis),  # extension: docs/compile.md
        "findings": findings_section(analysis),
        "causes": causes_section(analysis),  # extension: docs/analysis.md
    }
