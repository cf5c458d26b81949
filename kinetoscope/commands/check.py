"""`kinetoscope check TRACE`: budgets for CI. Each budget is measured on the trace with the
definitions of `summary --json` (the measured values are read from the summary document
itself), compared with its limit, and shown as a pass/fail table (text, Markdown or JSON).

Exit status: 0 every budget is kept, 3 a budget is broken (or cannot be measured), 1 the trace
(or nothing to check it with) could not be read, 2 a usage error (no budget, a value or a
config file that cannot be read). docs/check.md is the reference."""

from __future__ import annotations

import os
import stat
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kinetoscope.analysis.units import plural
from kinetoscope.common.budget import (
    SEVERITIES,
    BudgetError,
    parse_duration,
    parse_percent,
    parse_severity,
    parse_size,
    severity_rank,
)
from kinetoscope.common.errors import KinetoscopeError

CHECK_VERSION = 1
EXIT_BROKEN = 3
MAX_CONFIG_BYTES = 64 * 1024


@dataclass(frozen=True)
class Kind:
    """One kind of budget: its key (the flag without `--`, the TOML key), how its limit is read,
    the unit of its numbers in the JSON, and what it measures (for the help and the docs)."""

    key: str
    parse: Callable[[str, str], Any]
    units: str
    metavar: str
    help: str


KINDS = (
    Kind(
        "max-gpu-idle",
        parse_percent,
        "pct",
        "PCT",
        "the GPU's idle share of its window (idle_us / window length of summary's `gpu`; the "
        "most idle device), e.g. 20%%",
    ),
    Kind(
        "max-step",
        parse_duration,
        "ms",
        "TIME",
        "the median step time (ProfilerStep#N dur_us of summary's `steps`), e.g. 120ms",
    ),
    Kind(
        "max-longest-step",
        parse_duration,
        "ms",
        "TIME",
        "the longest step's time (summary's `steps`), e.g. 1.5s",
    ),
    Kind(
        "max-findings",
        parse_severity,
        "findings",
        "SEVERITY",
        "fail when any finding is at or above SEVERITY (info, warning, critical)",
    ),
    Kind(
        "max-kernel",
        lambda text, what: parse_kernel_budget(text, what),
        "ms",
        "NAME=TIME",
        "the total time of the GPU kernels named NAME exactly (summary's `kernels` total_us, "
        "over every kernel, not only the 50 listed), e.g. 'ampere_sgemm_128x64_tn=5ms'; "
        "repeatable",
    ),
    Kind(
        "max-peak-memory",
        parse_size,
        "bytes",
        "SIZE",
        "the highest peak of allocated memory on any accelerator (summary's `memory`, device "
        "type not 0 = CPU), e.g. 60GiB",
    ),
)
KIND_BY_KEY = {kind.key: kind for kind in KINDS}


MAX_KERNEL_NAME = 10_000


def parse_kernel_budget(text: str, what: str) -> tuple[str, int]:
    """`NAME=TIME` (split at the last `=`: a time holds none) -> (NAME, ns)."""
    if not isinstance(text, str) or "=" not in text:
        raise BudgetError(f"{what}: write NAME=TIME, e.g. my_kernel=5ms")
    name, _, limit = text.rpartition("=")
    if not name or len(name) > MAX_KERNEL_NAME:
        raise BudgetError(f"{what}: the kernel's name is empty or longer than {MAX_KERNEL_NAME}")
    return name, parse_duration(limit, what)


class UsageError(Exception):
    """A usage error: one line, exit status 2."""


@dataclass(frozen=True)
class Budget:
    kind: Kind
    text: str  # as the user wrote it (cleaned for display)
    limit: Any  # Fraction (pct), int ns (durations), int bytes, str severity


@dataclass(frozen=True)
class Outcome:
    budget: Budget
    measured: Any  # in the kind's units (None: cannot be measured on this trace)
    passed: bool
    detail: str


# -- reading the budgets ------------------------------------------------------------------------


def register(sub: Any) -> None:
    """`kinetoscope check`: its arguments."""
    check = sub.add_parser(
        "check",
        help="check a trace against budgets for CI (GPU idle, step time, findings, memory)",
        description="Measure a trace against budgets and print a pass/fail table. Each "
        "budget is measured with the definitions of `summary --json` (docs/check.md). Budgets "
        "come from the options and from --config FILE (TOML, the same keys without `--`); an "
        "option overrides the file's key.",
        epilog="Exit status: 0 every budget kept, 3 a budget broken (or not measurable on the "
        "trace), 1 the trace could not be read, 2 a usage error.",
    )
    check.add_argument(
        "trace",
        metavar="TRACE",
        nargs="+",
        help="a .json or .json.gz torch.profiler trace; or a job's folder, several rank files "
        "or a bundle: every rank is checked, and the job's own budgets (docs/check.md)",
    )
    for kind in KINDS:
        check.add_argument(
            f"--{kind.key}",
            metavar=kind.metavar,
            help=kind.help,
            dest=_dest(kind),
            action="append" if kind.key == "max-kernel" else "store",
        )
    check.add_argument(
        "--config",
        metavar="FILE",
        help='a TOML file of budgets: max-gpu-idle = "20%%", max-step = "120ms", ...',
    )
    check.add_argument(
        "--format", choices=("text", "md", "json"), default="text", help="text (default), md, json"
    )
    check.add_argument("--json", action="store_true", help="the JSON document (= --format json)")
    from .check_job import register_job_options

    register_job_options(check)
    check.set_defaults(handler=run_check_command)


def _dest(kind: Kind) -> str:
    return "budget_" + kind.key.replace("-", "_")


def parse_budget(key: str, value: Any, where: str) -> Budget:
    """One budget from a flag or a TOML key; UsageError when it cannot be read."""
    from kinetoscope.present.safe_text import clean

    kind = KIND_BY_KEY.get(key)
    if kind is None:
        known = ", ".join(KIND_BY_KEY)
        raise UsageError(f"{where}: unknown budget {clean(str(key))[:60]!r} (known: {known})")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError(f'{where}: {key} must be text such as "20%" or a number')
    if isinstance(value, (int, float)):
        if not abs(value) < 10**15:  # NaN and huge numbers (tomllib reads any int) refused
            raise UsageError(f"{where}: {key}: the number is too large")
        value = repr(value)
    try:
        limit = kind.parse(value, where if where == f"--{key}" else f"{where}: {key}")
    except BudgetError as exc:
        raise UsageError(clean(str(exc))) from None
    return Budget(kind, clean(value.strip()), limit)


def read_config(path: str) -> dict[str, Any]:
    """The TOML file's keys; UsageError with one line when it cannot be read."""
    from kinetoscope.present.safe_text import clean

    shown = clean(path)
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise UsageError("--config needs Python 3.11 or newer (tomllib)") from None
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"--config {shown}: not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise UsageError(f"--config {shown}: larger than {MAX_CONFIG_BYTES // 1024} KiB")
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"--config {shown}: no such file") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--config {shown}: cannot read ({clean(str(reason))})") from None
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"--config {shown}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        first = clean(str(exc).splitlines()[0] if str(exc) else "invalid TOML")
        raise UsageError(f"--config {shown}: not valid TOML ({first})") from None
    except (RecursionError, ValueError) as exc:  # nesting too deep, a number too long
        raise UsageError(f"--config {shown}: not valid TOML ({clean(str(exc))[:80]})") from None
    return document


def collect_budgets(
    options: dict[str, Any], config: str | None, job: dict[str, Any] | None = None
) -> list[Budget]:
    """The budgets, in the order of KINDS: the config file's, each overridden by its flag. With
    `job` (a job is checked), the config's [job] table is put in `job["table"]` and no budget
    here is no error; without it, a [job] table is a usage error."""
    chosen: dict[Any, Budget] = {}

    def add(budget: Budget) -> None:
        kernel = budget.kind.key == "max-kernel"
        chosen[(budget.kind.key, budget.limit[0]) if kernel else budget.kind.key] = budget

    if config is not None:
        from kinetoscope.present.safe_text import clean

        where = f"--config {clean(config)}"
        for key, value in read_config(config).items():
            if key == "job":  # the job's own budgets (check_job.py)
                if job is None:
                    raise UsageError(
                        f"{where}: [job] holds budgets of a job (a folder or several files), "
                        "not of one trace file"
                    )
                job["table"] = value
                continue
            if key == "max-kernel":  # a table: "NAME" = "TIME"
                if not isinstance(value, dict):
                    raise UsageError(
                        f'{where}: max-kernel must be a table: [max-kernel] "NAME" = "5ms"'
                    )
                for name, limit in value.items():
                    if not isinstance(limit, str):
                        raise UsageError(
                            f'{where}: max-kernel: each limit must be text such as "5ms"'
                        )
                    add(parse_budget(key, f"{name}={limit}", where))
            else:
                add(parse_budget(key, value, where))
    for key, value in options.items():
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                add(parse_budget(key, item, f"--{key}"))
    if not chosen and job is None:
        raise UsageError(
            "no budget to check: give one of "
            + ", ".join(f"--{k.key}" for k in KINDS)
            + ", or --config FILE"
        )
    order = {kind.key: i for i, kind in enumerate(KINDS)}
    return sorted(chosen.values(), key=lambda b: order[b.kind.key])  # stable: kernels as given


# -- measuring ----------------------------------------------------------------------------------


def gpu_idle_pct(document: dict[str, Any]) -> tuple[float | None, str]:
    """The largest idle share (%) of a device's window, over the devices with a window."""
    best: tuple[float, int] | None = None
    for gpu in document["gpu"]:
        start, end = gpu["window_start_us"], gpu["window_end_us"]
        if start is None or end is None or end <= start:
            continue
        pct = 100 * gpu["idle_us"] / (end - start)
        if best is None or pct > best[0]:
            best = (pct, gpu["device"])
    if best is None:
        return None, "no GPU activity in the trace"
    shown = len([g for g in document["gpu"] if g["window_start_us"] is not None])
    return best[0], f"device {best[1]}" + (f" (the most idle of {shown})" if shown > 1 else "")


def step_ns(document: dict[str, Any]) -> list[int]:
    return [round(step["dur_us"] * 1000) for step in document["steps"]]


def measure(
    budget: Budget, document: dict[str, Any], kernel_totals: dict[str, Any] | None = None
) -> Outcome:
    """Measure one budget on the summary document and compare it with its limit."""
    key = budget.kind.key
    if key == "max-gpu-idle":
        pct, detail = gpu_idle_pct(document)
        if pct is None:
            return Outcome(budget, None, False, detail)
        return Outcome(budget, pct, Fraction(pct) <= budget.limit, detail)
    if key in ("max-step", "max-longest-step"):
        steps = step_ns(document)
        if not steps:
            return Outcome(budget, None, False, "no ProfilerStep#N in the trace")
        value = statistics.median(steps) if key == "max-step" else max(steps)
        what = ("median of " if key == "max-step" else "longest of ") + plural(len(steps), "step")
        return Outcome(budget, value / 1e6, value <= budget.limit, what)
    if key == "max-findings":
        floor = severity_rank(budget.limit)
        over = [f for f in document["findings"] if severity_rank(f["severity"]) >= floor]
        if not over:
            return Outcome(budget, 0, True, f"no finding at {budget.limit} or above")
        worst = max(severity_rank(f["severity"]) for f in over)
        rules = sorted({f["rule"] for f in over})
        shown = ", ".join(rules[:6]) + (f", +{len(rules) - 6} more" if len(rules) > 6 else "")
        return Outcome(budget, len(over), False, f"worst {SEVERITIES[worst]}: {shown}")
    if key == "max-kernel":
        name, limit = budget.limit
        row = kernel_totals.get(name) if kernel_totals is not None else None
        if row is None:
            return Outcome(budget, None, False, "no GPU kernel has this exact name")
        total_ns = round(row["total_us"] * 1000)
        return Outcome(budget, total_ns / 1e6, total_ns <= limit, plural(row["count"], "call"))
    if key == "max-peak-memory":
        peaks = [
            (m["peak_allocated_bytes"], m["device_type"], m["device_id"])
            for m in document["memory"]
            if m["device_type"] not in (None, 0) and m["peak_allocated_bytes"] is not None
        ]
        if not peaks:
            return Outcome(budget, None, False, "no accelerator memory events (profile_memory)")
        peak, dtype, did = max(peaks, key=lambda p: (p[0], -p[1], -(p[2] or 0)))
        return Outcome(budget, peak, peak <= budget.limit, f"device type {dtype}, id {did}")
    raise AssertionError(key)


# -- output -------------------------------------------------------------------------------------


def limit_json(budget: Budget) -> Any:
    units = budget.kind.units
    if units == "pct":
        return float(budget.limit)
    if budget.kind.key == "max-kernel":
        return budget.limit[1] / 1e6
    if units == "ms":
        return budget.limit / 1e6
    return budget.limit


def _number(value: Any) -> Any:
    return round(value, 3) if isinstance(value, float) else value


def check_document(
    path: str, outcomes: list[Outcome], summary: dict[str, Any] | None = None
) -> dict[str, Any]:
    broken = sum(1 for o in outcomes if not o.passed)
    facts = (summary or {}).get("trace", {})
    return {
        "kinetoscope_check": CHECK_VERSION,
        "trace": path,
        # A trace cut off mid-write is measured on what it holds: said, not hidden.
        "trace_complete": facts.get("complete", True),
        "warnings": list(facts.get("warnings", []))[:10],
        "passed": broken == 0,
        "broken": broken,
        "budgets": [
            {
                "budget": o.budget.kind.key,
                **({"kernel": o.budget.limit[0]} if o.budget.kind.key == "max-kernel" else {}),
                "limit": limit_json(o.budget),
                "limit_text": o.budget.text,
                "measured": _number(o.measured),
                "units": o.budget.kind.units,
                "passed": o.passed,
                "detail": o.detail,
            }
            for o in outcomes
        ],
    }


def _shown_value(units: str, value: Any) -> str:
    from kinetoscope.analysis.units import fmt_bytes, fmt_duration

    if value is None:
        return "–"
    if units == "pct":
        return f"{float(value):.1f}%"
    if units == "ms":
        return fmt_duration(value * 1e6)
    if units == "bytes":
        return fmt_bytes(value)
    if units == "findings":
        return str(value)
    return str(value)


def check_sections(document: dict[str, Any]) -> list[Any]:
    from kinetoscope.present.report_summary import Note, _table

    table = _table(
        "Budgets", "budget", "limit", "measured", "status", "detail", right=("measured",)
    )
    for row in document["budgets"]:
        status = "pass" if row["passed"] else ("no data" if row["measured"] is None else "FAIL")
        measured = _shown_value(row["units"], row["measured"])
        if row["units"] == "findings" and row["measured"] is not None:
            measured = f"{row['measured']} at or above"
        limit = row["limit_text"]
        limit = limit if len(limit) <= 80 else "…" + limit[-79:]  # a kernel's long name
        table.add_row(row["budget"], limit, measured, status, row["detail"])
    total = len(document["budgets"])
    if document["passed"]:
        verdict = f"PASS: {total} of {total} budgets kept"
    else:
        verdict = f"FAIL: {document['broken']} of {total} budgets broken"
    notes = [Note(f"warning: {w}") for w in document.get("warnings", [])]
    if not document.get("trace_complete", True):
        notes.append(Note("the trace is incomplete (cut off): measured on the events it holds"))
    return [table, *notes, Note(verdict)]


def run_check_command(args: Any) -> int:
    from kinetoscope.parser.bundle import is_zip

    output = "json" if args.json else args.format
    options = {kind.key: getattr(args, _dest(kind)) for kind in KINDS}
    inputs = args.trace
    if len(inputs) > 1 or os.path.isdir(inputs[0]) or is_zip(inputs[0]):
        from kinetoscope.present.safe_text import clean

        from .check_job import run_check_job

        job: dict[str, Any] = {}
        try:
            budgets = collect_budgets(options, args.config, job)
        except UsageError as exc:
            raise KinetoscopeError(str(exc), 2) from None
        where = f"--config {clean(args.config)}" if args.config is not None else ""
        return run_check_job(inputs, args, budgets, job.get("table"), where, output)
    from .check_job import job_options_given

    given = job_options_given(args)
    if given and not os.path.exists(inputs[0]):  # the missing file is the problem
        from kinetoscope.parser.source import trace_path_problem
        from kinetoscope.present.safe_text import clean

        problem = trace_path_problem(inputs[0], streams=True)
        raise KinetoscopeError(problem or f"{clean(inputs[0])}: no such file")
    if given:
        raise KinetoscopeError(
            f"{given[0]} is an option of a job (a folder or several files), not of one trace file",
            2,
        )
    return run_check(inputs[0], options, args.config, output)


def run_check(path: str, options: dict[str, Any], config: str | None, output: str) -> int:
    from kinetoscope.parser.source import trace_path_problem
    from kinetoscope.present.safe_text import clean

    try:
        budgets = collect_budgets(options, config)
    except UsageError as exc:
        raise KinetoscopeError(str(exc), 2) from None
    problem = trace_path_problem(path, streams=True)
    if problem is not None:
        raise KinetoscopeError(problem)
    kernels = any(b.kind.key == "max-kernel" for b in budgets)
    document = summary_document(path, kernels)
    if isinstance(document, str):
        raise KinetoscopeError(clean(document))
    document, kernel_totals = document
    outcomes = [measure(budget, document, kernel_totals) for budget in budgets]
    return emit_check(check_document(path, outcomes, document), check_sections, output)


def emit_check(result: dict[str, Any], sections: Any, output: str) -> int:
    """Print a check's result (`sections(result)` for text and Markdown); its exit status."""
    from kinetoscope.present.report_summary import emit, markdown, render_text, summary_json

    if output == "json":
        emit(summary_json(result) + "\n")
    elif output == "md":
        emit(markdown(sections(result)))
    else:
        emit(render_text(sections(result)))
    return 0 if result["passed"] else EXIT_BROKEN


def summary_document(
    path: str, kernels: bool = False
) -> tuple[dict[str, Any], dict[str, Any] | None] | str:
    """The summary document of the trace at `path` (as `summary --json` builds it) and, with
    `kernels`, every kernel group's row of its `kernels` section by name (all of them, not only
    the 50 it lists; groups of one name in several categories summed); or the one line that says
    why they could not be made."""
    from kinetoscope.analysis.session import AnalysisFailed
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import TraceError, load

    try:
        trace = load(path, write_cache=False, release=True)
    except TraceError as exc:
        return str(exc)
    try:
        from kinetoscope.analysis import TraceSession
        from kinetoscope.analysis.summary import kernels_section

        session = TraceSession(trace)
        document = build_summary(session)
        if not kernels:
            return document, None
        totals: dict[str, Any] = {}
        for row in kernels_section(session, limit=None):
            if row["cat"].lower() != "kernel":  # memcpys and memsets are no kernels
                continue
            seen = totals.setdefault(row["name"], {"total_us": 0.0, "count": 0})
            seen["total_us"] = round(seen["total_us"] + row["total_us"], 3)
            seen["count"] += row["count"]
        return document, totals
    except AnalysisFailed as exc:
        return str(exc)
    except MemoryError:
        from kinetoscope.parser.model import out_of_memory_message

        events = trace.n_events
        del trace
        return out_of_memory_message(path, events)
