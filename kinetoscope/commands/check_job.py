"""`kinetoscope check DIR`: budgets for CI on a distributed job (a folder of rank traces,
several rank files, or a bundle), read as `summary DIR` reads it.

Two scopes of budget:
- per rank: every single-trace budget of `check TRACE` (kinetoscope/commands/check.py), which
  every rank must meet. GPU idle and step times are read from the rank's entry of the job's
  document (`ranks[].gpu`, `ranks[].steps`: the single summary's definitions); findings, a
  kernel's total and the peak memory from each rank's own single-trace summary document (built
  only when such a budget is asked). A rank that could not be read cannot meet them.
- per job: numbers of the `summary DIR --json` document only a job has (JOB_KINDS: the
  straggler's lateness, the largest start skew, failed, missing and incomplete ranks).

docs/check.md (the job section) names each budget's JSON field."""

from __future__ import annotations

import re
from typing import Any

from kinetoscope.analysis.units import plural
from kinetoscope.common.budget import BudgetError, parse_duration
from kinetoscope.common.errors import KinetoscopeError

from .check import (
    CHECK_VERSION,
    Budget,
    Kind,
    Outcome,
    UsageError,
    _number,
    _shown_value,
    emit_check,
    limit_json,
    measure,
)

MAX_COUNT = 10**9
_COUNT = re.compile(r"\s*(\d{1,10})\s*")
TEXT_RANK_ROWS = 20  # broken ranks shown per budget in the text table (the JSON has all)
WARNINGS_SHOWN = 10


def parse_count(text: str, what: str) -> int:
    """A number of ranks: a whole number from 0 to 10^9, digits only."""
    match = _COUNT.fullmatch(text) if isinstance(text, str) and len(text) <= 40 else None
    if match is None or int(match.group(1)) > MAX_COUNT:
        raise BudgetError(f"{what}: write a whole number of ranks, e.g. 0")
    return int(match.group(1))


JOB_KINDS = (
    Kind(
        "max-straggler",
        parse_duration,
        "ms",
        "TIME",
        "a job's straggler's lateness: how much less it waited in matched collectives than the "
        "median other rank (summary DIR's straggler.lateness_us), e.g. 5ms",
    ),
    Kind(
        "max-collective-skew",
        parse_duration,
        "ms",
        "TIME",
        "a job's largest start skew of a matched collective (summary DIR's "
        "collectives[].start_skew_us), e.g. 2ms",
    ),
    Kind(
        "max-failed-ranks",
        parse_count,
        "ranks",
        "N",
        "how many of a job's ranks failed, by capture's exit records (summary DIR's "
        "health.failed), e.g. 0",
    ),
    Kind(
        "max-missing-ranks",
        parse_count,
        "ranks",
        "N",
        "how many of a job's ranks have no trace (summary DIR's missing_count), e.g. 0",
    ),
    Kind(
        "max-incomplete-ranks",
        parse_count,
        "ranks",
        "N",
        "how many of a job's rank files could not be read or end early (summary DIR's "
        "incomplete), e.g. 0",
    ),
)
JOB_KIND_BY_KEY = {kind.key: kind for kind in JOB_KINDS}
# Budgets read from each rank's own single-trace summary (not in the job's document).
FROM_RANK_SUMMARY = ("max-findings", "max-kernel", "max-peak-memory")


def job_dest(kind: Kind) -> str:
    return "job_" + kind.key.replace("-", "_")


def register_job_options(check: Any) -> None:
    """The job's budgets and reading options, on `check`'s parser."""
    group = check.add_argument_group("a distributed job (a folder, several files or a bundle)")
    for kind in JOB_KINDS:
        group.add_argument(
            f"--{kind.key}", metavar=kind.metavar, help=kind.help, dest=job_dest(kind)
        )
    group.add_argument(
        "--fail-on-failed-rank",
        action="store_true",
        help="the same as --max-failed-ranks 0",
    )
    group.add_argument(
        "--align-clocks",
        action="store_true",
        help="subtract each rank's estimated clock offset first, as summary DIR --align-clocks",
    )
    group.add_argument(
        "--force-align-clocks",
        action="store_true",
        help="subtract the estimated offsets even when the ranks ran on one host",
    )
    from .summary import add_cycle_option

    add_cycle_option(group)
    from kinetoscope.common.options import positive

    group.add_argument(
        "--workers",
        type=positive,
        metavar="N",
        help="digest the ranks in N processes (default: min(ranks, CPUs))",
    )


def job_options_given(args: Any) -> list[str]:
    """The job-only options given on the command line, in their help's order."""
    given = [f"--{kind.key}" for kind in JOB_KINDS if getattr(args, job_dest(kind)) is not None]
    for option, on in (
        ("--fail-on-failed-rank", args.fail_on_failed_rank),
        ("--align-clocks", args.align_clocks),
        ("--force-align-clocks", args.force_align_clocks),
        ("--cycle", args.cycle is not None),
        ("--workers", args.workers is not None),
    ):
        if on:
            given.append(option)
    return given


def parse_job_budget(key: str, value: Any, where: str) -> Budget:
    """One job budget from a flag or the config's [job] table; UsageError when unreadable."""
    from kinetoscope.present.safe_text import clean

    kind = JOB_KIND_BY_KEY.get(key)
    if kind is None:
        known = ", ".join(JOB_KIND_BY_KEY)
        raise UsageError(f"{where}: unknown job budget {clean(str(key))[:60]!r} (known: {known})")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f'{where}: {key} must be text such as "5ms" or a whole number')
    if isinstance(value, int):
        if not abs(value) < 10**15:
            raise UsageError(f"{where}: {key}: the number is too large")
        value = str(value)
    try:
        limit = kind.parse(value, where if where == f"--{key}" else f"{where}: {key}")
    except BudgetError as exc:
        raise UsageError(clean(str(exc))) from None
    return Budget(kind, clean(value.strip()), limit)


def collect_job_budgets(args: Any, table: Any, where: str) -> list[Budget]:
    """The job budgets: the config's [job] table's (`table`, None without one), each overridden
    by its flag, in the order of JOB_KINDS."""
    chosen: dict[str, Budget] = {}
    if table is not None:
        if not isinstance(table, dict):
            raise UsageError(f'{where}: job must be a table: [job] max-straggler = "5ms"')
        for key, value in table.items():
            chosen[key] = parse_job_budget(key, value, f"{where}: [job]")
    if args.fail_on_failed_rank:
        chosen["max-failed-ranks"] = parse_job_budget(
            "max-failed-ranks", "0", "--fail-on-failed-rank"
        )
    for kind in JOB_KINDS:
        value = getattr(args, job_dest(kind))
        if value is not None:
            chosen[kind.key] = parse_job_budget(kind.key, value, f"--{kind.key}")
    order = {kind.key: i for i, kind in enumerate(JOB_KINDS)}
    return sorted(chosen.values(), key=lambda b: order[b.kind.key])


# -- measuring the job's budgets ----------------------------------------------------------------


def _ranks_text(ranks: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(r) for r in ranks[:limit])
    return shown + (f", +{len(ranks) - limit} more" if len(ranks) > limit else "")


def measure_job(budget: Budget, document: dict[str, Any]) -> Outcome:
    """One job budget, measured on the `summary DIR --json` document."""
    key = budget.kind.key
    if key == "max-straggler":
        straggler = document.get("straggler")
        if not straggler:
            return Outcome(budget, None, False, "no straggler named (fewer than two ranks in "
                           "matched collectives, or ranks that failed)")  # fmt: skip
        lateness = straggler.get("lateness_us")
        if lateness is None:
            reason = straggler.get("reason") or "no lateness measured"
            return Outcome(budget, None, False, f"rank {straggler['rank']}: {reason}")
        ns = round(lateness * 1000)
        detail = f"rank {straggler['rank']} against the median rank {straggler['reference_rank']}"
        return Outcome(budget, lateness / 1000, ns <= budget.limit, detail)
    if key == "max-collective-skew":
        rows = document.get("collectives") or []
        if not rows:
            return Outcome(budget, None, False, "no collective matched across ranks")
        worst = max(rows, key=lambda c: c["start_skew_us"])  # the first: sorted by skew
        ns = round(worst["start_skew_us"] * 1000)
        detail = (
            f"{worst['kind']} in {worst['step']} (group {worst['group']}), last rank "
            f"{worst['last_rank']}; of {plural(document['matching']['matched'], 'matched collective')}"
        )
        return Outcome(budget, worst["start_skew_us"] / 1000, ns <= budget.limit, detail)
    if key == "max-failed-ranks":
        failed = list(document["health"]["failed"])
        if not failed:
            records = document["health"]["records"]
            detail = "no exit records (not captured by kinetoscope capture)" if not records else (
                f"no rank failed ({plural(records, 'exit record')})")  # fmt: skip
            return Outcome(budget, 0, True, detail)
        first = document["health"]["first_failure"]
        detail = f"ranks {_ranks_text(failed)} failed" + (
            f", rank {first} first" if first is not None else "")  # fmt: skip
        return Outcome(budget, len(failed), len(failed) <= budget.limit, detail)
    if key == "max-missing-ranks":
        count = document["missing_count"]
        ranges = document.get("missing_ranges") or []
        shown = ", ".join(
            str(r["first"]) if r["count"] == 1 else f"{r['first']}-{r['last']}" for r in ranges[:8]
        ) + (", …" if len(ranges) > 8 else "")
        detail = f"ranks {shown}" if count else f"world size {document.get('world_size')}"
        return Outcome(budget, count, count <= budget.limit, detail)
    if key == "max-incomplete-ranks":
        ranks = [row["rank"] for row in document["incomplete"]]
        detail = f"ranks {_ranks_text(ranks)}" if ranks else "every rank read to its end"
        return Outcome(budget, len(ranks), len(ranks) <= budget.limit, detail)
    raise AssertionError(key)


# -- measuring the single-trace budgets on every rank -------------------------------------------


def _rank_summary(path: str, kernels: bool) -> Any:
    """A rank's single-trace summary document (and kernel totals), or a one-line error: run in
    a worker process when the ranks pay for a pool."""
    from .check import summary_document

    try:
        return summary_document(path, kernels)
    except Exception as exc:  # noqa: BLE001 - this rank's problem, said in its row
        return f"{path}: the analysis failed: {type(exc).__name__}: {exc}"


def rank_summaries(paths: list[str], kernels: bool, workers: int | None) -> list[Any]:
    """`_rank_summary` of every path, in order: in a pool of worker processes under the rules
    of `summary DIR`'s digests (min(ranks, CPUs), none for ranks too small to pay for it,
    unless `--workers N` asks), else in this process."""
    from kinetoscope.analysis.job import _pays_for_workers, default_workers, worker_context

    if workers is None and not _pays_for_workers(paths):
        workers = 1
    count = min(workers or default_workers(len(paths)), len(paths))
    if len(paths) <= 1 or count <= 1:
        return [_rank_summary(path, kernels) for path in paths]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=count, mp_context=worker_context()) as pool:
        futures = [pool.submit(_rank_summary, path, kernels) for path in paths]
        results = []
        for path, future in zip(paths, futures):
            try:
                results.append(future.result())
            except Exception as exc:  # noqa: BLE001 - a worker that died
                results.append(f"{path}: the worker checking it failed: {type(exc).__name__}")
        return results


def _worst_first(rows: list[tuple[int, Outcome]]) -> list[tuple[int, Outcome]]:
    """Broken ranks, the largest measured value first, then those without one; by rank."""
    return sorted(
        (row for row in rows if not row[1].passed),
        key=lambda row: (row[1].measured is None, -(row[1].measured or 0), row[0]),
    )


def rank_row(budget: Budget, rows: list[tuple[int, Outcome]]) -> dict[str, Any]:
    """The JSON row of a per-rank budget: the worst rank's value, and every rank's."""
    broken = _worst_first(rows)
    measured = [row for row in rows if row[1].measured is not None]
    if broken:
        worst = broken[0]
    elif measured:
        worst = max(measured, key=lambda row: (row[1].measured, -row[0]))
    else:
        worst = rows[0] if rows else None
    return {
        "budget": budget.kind.key,
        "scope": "ranks",
        **({"kernel": budget.limit[0]} if budget.kind.key == "max-kernel" else {}),
        "limit": limit_json(budget),
        "limit_text": budget.text,
        "measured": _number(worst[1].measured) if worst else None,
        "rank": worst[0] if worst else None,
        "units": budget.kind.units,
        "passed": bool(rows) and not broken,
        "detail": worst[1].detail if worst else "no rank in the job",
        "broken_ranks": [rank for rank, _ in broken],
        "ranks": [
            {"rank": rank, "measured": _number(o.measured), "passed": o.passed, "detail": o.detail}
            for rank, o in rows
        ],
    }


def job_row(outcome: Outcome) -> dict[str, Any]:
    return {
        "budget": outcome.budget.kind.key,
        "scope": "job",
        "limit": limit_json(outcome.budget),
        "limit_text": outcome.budget.text,
        "measured": _number(outcome.measured),
        "rank": None,
        "units": outcome.budget.kind.units,
        "passed": outcome.passed,
        "detail": outcome.detail,
    }


def check_job_document(
    inputs: list[str],
    document: dict[str, Any],
    rank_budgets: list[Budget],
    job_budgets: list[Budget],
    summaries: dict[int, Any],
) -> dict[str, Any]:
    """The `check DIR --json` document: every budget measured, per rank and for the job."""
    from kinetoscope.present.safe_text import clean

    rows: list[dict[str, Any]] = []
    for budget in rank_budgets:
        outcomes = []
        for rank in document["ranks"]:
            if not rank["loaded"]:
                why = clean(rank["error"] or "not read")
                outcomes.append((rank["rank"], Outcome(budget, None, False, why)))
                continue
            if budget.kind.key in FROM_RANK_SUMMARY:
                made = summaries.get(rank["rank"])
                if isinstance(made, str) or made is None:
                    why = clean(made or "not read")
                    outcomes.append((rank["rank"], Outcome(budget, None, False, why)))
                    continue
                outcomes.append((rank["rank"], measure(budget, made[0], made[1])))
            else:  # the rank's entry carries the single summary's `gpu` and `steps`
                outcomes.append((rank["rank"], measure(budget, rank)))
        rows.append(rank_row(budget, outcomes))
    rows.extend(job_row(measure_job(budget, document)) for budget in job_budgets)
    broken = sum(1 for row in rows if not row["passed"])
    warnings = [clean(f"rank {row['rank']}: {row['reason']}") for row in document["incomplete"]]
    warnings += [clean(message) for message in document["health"]["messages"]]
    asked = {b.kind.key for b in job_budgets}
    if document["missing_count"] and "max-missing-ranks" not in asked:
        warnings.append(
            f"{plural(document['missing_count'], 'rank')} missing, not checked "
            "(--max-missing-ranks 0 checks it)"
        )
    return {
        "kinetoscope_check": CHECK_VERSION,
        "job": list(inputs),
        "world_size": document["world_size"],
        "ranks": len(document["ranks"]),
        "ranks_loaded": sum(1 for r in document["ranks"] if r["loaded"]),
        "trace_complete": all(r["complete"] for r in document["ranks"]),
        "warnings": warnings[:WARNINGS_SHOWN],
        "passed": broken == 0,
        "broken": broken,
        "budgets": rows,
    }


# -- output ---------------------------------------------------------------------------------


def _status(row: dict[str, Any]) -> str:
    return "pass" if row["passed"] else ("no data" if row["measured"] is None else "FAIL")


def _measured_text(units: str, value: Any) -> str:
    if units == "ranks":
        return "–" if value is None else str(value)
    if units == "findings" and value is not None:
        return f"{value} at or above"
    return _shown_value(units, value)


def check_job_sections(result: dict[str, Any]) -> list[Any]:
    from kinetoscope.present.report_summary import Note, _table

    table = _table(
        "Budgets", "budget", "rank", "limit", "measured", "status", "detail", right=("measured",)
    )
    for row in result["budgets"]:
        limit = row["limit_text"]
        limit = limit if len(limit) <= 80 else "…" + limit[-79:]
        units = row["units"]
        if row["scope"] == "job":
            table.add_row(row["budget"], "job", limit, _measured_text(units, row["measured"]),
                          _status(row), row["detail"])  # fmt: skip
            continue
        if row["passed"]:
            detail = f"worst: rank {row['rank']}, {row['detail']}"
            table.add_row(row["budget"], f"all {len(row['ranks'])}", limit,
                          _measured_text(units, row["measured"]), "pass", detail)  # fmt: skip
            continue
        by_rank = {r["rank"]: r for r in row["ranks"]}
        broken = row["broken_ranks"]
        for rank in broken[:TEXT_RANK_ROWS]:
            one = by_rank[rank]
            table.add_row(row["budget"], str(rank), limit, _measured_text(units, one["measured"]),
                          _status(one), one["detail"])  # fmt: skip
        if len(broken) > TEXT_RANK_ROWS:
            more = len(broken) - TEXT_RANK_ROWS
            table.add_row(row["budget"], f"+{more}", limit, "", "FAIL",
                          f"{plural(more, 'more rank')} (the JSON lists all)")  # fmt: skip
        if not broken:  # no rank at all
            table.add_row(row["budget"], "–", limit, "–", "no data", row["detail"])
    total = len(result["budgets"])
    if result["passed"]:
        verdict = f"PASS: {total} of {total} budgets kept on {plural(result['ranks'], 'rank')}"
    else:
        verdict = f"FAIL: {result['broken']} of {total} budgets broken"
    notes = [Note(f"warning: {w}") for w in result["warnings"]]
    return [table, *notes, Note(verdict)]


def run_check_job(
    inputs: list[str],
    args: Any,
    rank_budgets: list[Budget],
    job_table: Any,
    where: str,
    output: str,
) -> int:
    """Read the job as `summary DIR` does, measure every budget, print the table."""
    from kinetoscope.parser.bundle import BundleError, is_zip, open_bundle
    from kinetoscope.present.safe_text import clean

    try:
        job_budgets = collect_job_budgets(args, job_table, where)
    except UsageError as exc:
        raise KinetoscopeError(str(exc), 2) from None
    if not rank_budgets and not job_budgets:
        from .check import KINDS

        raise KinetoscopeError(
            "no budget to check: give one of "
            + ", ".join(f"--{k.key}" for k in (*KINDS, *JOB_KINDS))
            + ", or --config FILE",
            2,
        )
    if len(inputs) == 1 and is_zip(inputs[0]):
        try:
            with open_bundle(inputs[0]) as opened:
                result = _measure_job(
                    [opened.folder], inputs, args, rank_budgets, job_budgets, opened
                )
        except BundleError as exc:
            raise KinetoscopeError(clean(str(exc))) from None
    else:
        result = _measure_job(inputs, inputs, args, rank_budgets, job_budgets, None)
    return emit_check(result, check_job_sections, output)


def _measure_job(
    folders: list[str],
    inputs: list[str],
    args: Any,
    rank_budgets: list[Budget],
    job_budgets: list[Budget],
    bundle: Any,
) -> dict[str, Any]:
    from kinetoscope.analysis.job import analyze_job, job_document, map_ranks
    from kinetoscope.parser.ranks import JobError, discover
    from kinetoscope.present.safe_text import clean

    try:
        files = discover(folders, cycle=args.cycle)
    except JobError as exc:
        raise KinetoscopeError(clean(str(exc))) from None
    digests = map_ranks([f.path for f in files.files], workers=args.workers)
    try:
        job = analyze_job(
            digests, files, align_clocks=args.align_clocks, force_align=args.force_align_clocks
        )
        document = job_document(job)
    except MemoryError:
        from kinetoscope.parser.model import out_of_memory_message

        events = sum(d.events for d in digests)
        del digests
        message = out_of_memory_message(clean(inputs[0]), events, "the merge of the ranks")
        raise KinetoscopeError(message) from None
    loaded = [entry for entry in job.ranks if entry.loaded]
    if job.ranks and not loaded:
        first = next((e.digest.error for e in job.ranks if e.digest.error), None) or "not read"
        raise KinetoscopeError(clean(f"no rank could be read ({first})"))
    summaries: dict[int, Any] = {}
    if any(b.kind.key in FROM_RANK_SUMMARY for b in rank_budgets):
        kernels = any(b.kind.key == "max-kernel" for b in rank_budgets)
        made = rank_summaries([e.path for e in loaded], kernels, args.workers)
        summaries = {entry.rank: one for entry, one in zip(loaded, made)}
    if bundle is not None:
        from kinetoscope.present import report_job

        document = report_job._as_in_bundle(document, bundle)
        summaries = {
            rank: (bundle.shown(one) if isinstance(one, str) else one)
            for rank, one in summaries.items()
        }
    return check_job_document(inputs, document, rank_budgets, job_budgets, summaries)
