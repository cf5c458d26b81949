"""The diff table: the verdict and the step comparison above a table of kernels or operators
(T switches), base and new side by side, sorted by |Δ|; Enter opens both timelines stacked on
the row's instances (diff_timeline.py).

The screen reads analysis/diff.py's `TraceDiff`: its verdict, its metrics (`overall`), its
`kernels` and `operators` (`GroupDiff`s, whose groups name each row's instances in each trace)
and its first step pair's alignment (the kernels added and removed, marked on the timelines).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from kinetoscope.analysis.diff import ADDED as ADDED_OP
from kinetoscope.analysis.diff import CHANGED as CHANGED_OP
from kinetoscope.analysis.diff import (
    IMPROVEMENT,
    NEUTRAL,
    REGRESSION,
    GroupDiff,
    TraceDiff,
    metric_label,
    metric_unit,
)
from kinetoscope.analysis.diff import REMOVED as REMOVED_OP
from kinetoscope.analysis.session import TraceSession
from kinetoscope.analysis.units import fmt_bytes, fmt_duration, fmt_table_time, plural
from kinetoscope.tui.data.viewdata import ViewData
from kinetoscope.tui.diff.diff_timeline import REMOVED_ROLE, DiffPairScreen, Half
from kinetoscope.tui.widgets.columns import count_column, time_column
from kinetoscope.tui.widgets.table import Column, DataView, TableModel, TableScreen
from kinetoscope.tui.widgets.theme import Palette, palette_of
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Input, Static

from kinetoscope.present.safe_text import clean, shorten
from kinetoscope.present.tables import Table, diff_source, diff_table

ADDED, REMOVED, BOTH = 1, -1, 0  # a row's status: only in the new trace, only in the base, both
DELTA_COLUMN = 6  # the Δ column, sorted by first
NAME_ROOM = 20  # cells the names keep before optional columns are hidden
ORDERS = ("|Δ|", "Δ ↓ regressions first", "Δ ↑ improvements first")


@dataclass
class NameRows:
    """One table of the diff (operators or kernels) as columns: a row per `GroupDiff` (a
    normalised (category, name)), in the diff's order."""

    what: str  # "operators" or "kernels"
    groups: list[GroupDiff]
    names: list[str] = field(init=False)
    kinds: list[str] = field(init=False)  # the category: kernel, memcpy, cpu_op, ...
    base_count: np.ndarray = field(init=False)
    base_total: np.ndarray = field(init=False)  # ns
    new_count: np.ndarray = field(init=False)
    new_total: np.ndarray = field(init=False)
    more_calls: np.ndarray = field(init=False)  # ns: count Δ × base mean
    slower_calls: np.ndarray = field(init=False)  # ns: new count × mean Δ

    def __post_init__(self) -> None:
        groups = self.groups
        self.names = [g.name for g in groups]
        self.kinds = [g.cat for g in groups]

        def column(values: list[float], dtype: Any = np.int64) -> np.ndarray:
            return np.array(values, dtype=dtype)

        self.base_count = column([g.base_count for g in groups])
        self.base_total = column([g.base_total for g in groups])
        self.new_count = column([g.new_count for g in groups])
        self.new_total = column([g.new_total for g in groups])
        self.more_calls = column([g.more_calls for g in groups], np.float64)
        self.slower_calls = column([g.slower_calls for g in groups], np.float64)

    def __len__(self) -> int:
        return len(self.groups)

    @property
    def delta(self) -> np.ndarray:
        return self.new_total.astype(np.float64) - self.base_total

    @property
    def delta_pct(self) -> np.ndarray:
        base = self.base_total.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(base > 0, 100 * self.delta / np.where(base > 0, base, 1), np.nan)

    @property
    def status(self) -> np.ndarray:
        status = np.full(len(self), BOTH, np.int8)
        status[self.base_count == 0] = ADDED
        status[self.new_count == 0] = REMOVED
        return status

    @staticmethod
    def mean(total: np.ndarray, count: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def group_name_mask(session: TraceSession, kind: str, groups: tuple[int, ...]) -> np.ndarray:
    """A bool per string id of the session's trace: the names of `groups` (indices into its
    `gpu_groups` for kernels, `cpu_groups` for operators), for the timeline's highlight."""
    table = session.gpu_groups if kind == "kernel" else session.cpu_groups
    mask = np.zeros(len(session.trace.strings), bool)
    if groups:
        mask[table.name[np.asarray(groups, np.int64)]] = True
    return mask


def group_instances(session: TraceSession, kind: str, groups: tuple[int, ...]) -> np.ndarray:
    """The trace rows of `groups` (see `group_name_mask`), in time order."""
    table = session.gpu_groups if kind == "kernel" else session.cpu_groups
    if not groups:
        return np.zeros(0, np.int64)
    rows = np.flatnonzero(np.isin(table.index, np.asarray(groups, table.index.dtype)))
    return rows[np.lexsort((rows, session.trace.start[rows]))]


def aligned_changes(diff: TraceDiff, pair: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(removed base rows, added new rows, how many of those pairs replaced one another) of
    pair `pair`'s alignment, every stream: a kernel the alignment calls changed (another
    kernel in the same place) counts as removed from the base and added to the new trace."""
    removed: list[int] = []
    added: list[int] = []
    replaced = 0
    for stream in diff.alignment(pair):
        for i, j, op in stream.ops:
            if op in (ADDED_OP, CHANGED_OP):
                added.append(int(stream.new_rows[j]))
            if op in (REMOVED_OP, CHANGED_OP):
                removed.append(int(stream.base_rows[i]))
            replaced += op == CHANGED_OP
    return np.array(removed, np.int64), np.array(added, np.int64), replaced


def table_model(rows: NameRows, order: int = 0) -> TableModel:
    """The table of `rows`: name, kind, base and new count/total/mean, Δ (sorted as `order`
    says: by |Δ|, regressions first or improvements first), Δ %, the more-calls and
    slower-calls parts, and ± (added, removed)."""
    n = len(rows)
    delta = rows.delta
    pct = rows.delta_pct
    status = rows.status
    base_mean = NameRows.mean(rows.base_total, rows.base_count)
    new_mean = NameRows.mean(rows.new_total, rows.new_count)
    delta_key = (np.abs(delta), delta, -delta)[order]
    names = np.arange(n)

    def signed_time(values: np.ndarray) -> Callable[[int], str]:
        def cell(r: int) -> str:
            value = float(values[r])
            return ("+" if value > 0 else "") + fmt_table_time(value)

        return cell

    def pct_cell(r: int) -> str:
        if status[r] == ADDED:
            return "new"
        value = float(pct[r])
        return "?" if np.isnan(value) else pct_text(value)

    def mean_cell(values: np.ndarray) -> Callable[[int], str]:
        return lambda r: "–" if np.isnan(values[r]) else fmt_table_time(float(values[r]))

    marks = {ADDED: "added", REMOVED: "removed", BOTH: ""}
    widest_kind = max((len(k) for k in rows.kinds), default=4)
    kinds = sorted(set(rows.kinds))
    name_order = np.empty(n, np.int64)
    name_order[sorted(range(n), key=lambda r: rows.names[r].lower())] = np.arange(n)
    # Optional columns are hidden from the right as the terminal narrows: the kind and the
    # means first, the counts last.
    columns = [
        Column("name", lambda r: rows.names[r], key=name_order, width=0, numeric=False, name=True),
        Column(
            "±",
            lambda r: marks[int(status[r])],
            key=status.astype(np.int64),
            width=8,
            numeric=False,
            largest_first=True,
        ),
        dataclasses.replace(count_column("base #", rows.base_count), optional=True),
        time_column("base total", rows.base_total),
        dataclasses.replace(count_column("new #", rows.new_count), optional=True),
        time_column("new total", rows.new_total),
        Column("Δ", signed_time(delta), key=delta_key, width=12),
        Column("Δ %", pct_cell, key=np.nan_to_num(pct, nan=np.inf), width=8),
        Column(
            "more calls",
            signed_time(rows.more_calls),
            key=rows.more_calls.astype(np.float64),
            width=12,
            optional=True,
        ),
        Column(
            "slower calls",
            signed_time(rows.slower_calls),
            key=rows.slower_calls.astype(np.float64),
            width=13,
            optional=True,
        ),
        Column(
            "base mean",
            mean_cell(base_mean),
            key=np.nan_to_num(base_mean, nan=-1),
            width=11,
            optional=True,
        ),
        Column(
            "new mean",
            mean_cell(new_mean),
            key=np.nan_to_num(new_mean, nan=-1),
            width=11,
            optional=True,
        ),
        Column(
            "kind",
            lambda r: rows.kinds[r],
            key=np.array([kinds.index(k) for k in rows.kinds], dtype=np.int64),
            width=max(5, min(widest_kind + 1, 14)),
            numeric=False,
            optional=True,
        ),
    ]
    return TableModel(
        columns=columns,
        n=n,
        names=names,
        name_text=lambda r: (rows.names[r], rows.kinds[r], marks[int(status[r])]),
        default_sort=DELTA_COLUMN,
        keys=names,
        name_room=NAME_ROOM,
    )


def pct_text(pct: float | None) -> str:
    """A Δ % for a narrow column: one decimal, none from 10,000 % on (`+75,803`)."""
    if pct is None:
        return ""
    return f"{pct:+,.0f}" if abs(pct) >= 10_000 else f"{pct:+.1f}"


def verdict_text(diff: TraceDiff, palette: Palette) -> Text:
    """The verdict in a coloured box, then why, and which windows were compared."""
    verdict = diff.verdict
    role = {REGRESSION: "error", IMPROVEMENT: "info", NEUTRAL: "muted"}.get(verdict.kind, "warning")
    text = Text(overflow="ellipsis")  # the reasons may take up to four lines
    text.append(f" {verdict.kind.upper()} ", palette.style("ink", role, bold=True))
    text.append(" " + "; ".join(clean(r) for r in verdict.reasons))
    if diff.whole:
        text.append(" · whole traces compared", "dim")
    # (the step pairs: the reasons count them, and the line of pairs below lists them)
    return text


def pairs_text(diff: TraceDiff, chosen: int, palette: Palette, limit: int = 12) -> Text:
    """Each step pair's step-time Δ % (`#3 +10.2 %`), the pair the timelines open at (S) in
    brackets; past `limit` pairs, those around it."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if diff.whole or not diff.pairs:
        return text
    text.append("step time by pair (S: the timelines' pair): ", palette.style("heading"))
    first = max(0, min(chosen - limit // 2, len(diff.pairs) - limit))
    shown = range(first, min(len(diff.pairs), first + limit))
    if first:
        text.append("… ")
    for index in shown:
        pair, metrics = diff.pairs[index], diff.per_step[index]
        step = next((m for m in metrics if m.key == "step_time"), None)
        pct = step.delta_pct if step is not None else None
        label = f"#{pair.number} {pct_text(pct) or '?'}"
        style = palette.style("ink", "cursor", bold=True) if index == chosen else ""
        text.append(f"[{label}]" if index == chosen else label, style)
        text.append(" ")
    if shown.stop < len(diff.pairs):
        text.append("…")
    return text


def metrics_text(diff: TraceDiff, palette: Palette) -> Text:
    """The step comparison (per step, the mean of the pairs; whole traces without steps): a
    line per metric that either trace has, base, new, Δ and Δ % in columns."""
    text = Text(no_wrap=True, overflow="ellipsis")
    what = "whole trace" if diff.whole else "per step (mean)"
    # `diff.overall` sums the compared pairs (memory: the highest peak); shown per step here
    pairs = 1 if diff.whole else max(1, len(diff.pairs))
    heading = f"{what:<24}{'base':>12}{'new':>12}{'Δ':>12} {'Δ %':>9}"
    text.append(heading, palette.style("heading"))
    for metric in diff.overall:
        if not metric.base and not metric.new and metric.key != "step_time":
            continue
        unit = metric_unit(metric.key)

        def shown(value: float | None, signed: bool = False, unit: str = unit) -> str:
            if value is None:
                return "–"
            if unit == "bytes":
                return fmt_bytes(value, signed=signed)
            value = value / pairs
            # A table's three decimals, zeros kept, so a column's decimals line up
            # (`615.120 ms` over `619.271 ms`, not `615.12 ms`).
            return ("+" if signed and value > 0 else "") + fmt_table_time(value, False)

        text.append("\n")
        text.append(f"{shorten(metric_label(metric.key), 23):<24}")
        text.append(f"{shown(metric.base):>12}{shown(metric.new):>12}")
        delta, pct = metric.delta, metric.delta_pct
        style = ""
        if delta and pct is not None and abs(pct) >= 1:
            style = palette.style("error" if delta > 0 else "info")
        text.append(f"{shown(delta, signed=True):>12}", style)
        text.append(f" {pct_text(pct):>9}", style)
    return text


class DiffScreen(TableScreen):
    """The diff: verdict, step comparison, and the kernels' or operators' table (T)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Clear the filter", show=False),
        Binding("q", "app.quit", "Quit"),
        Binding("T", "switch_table", "Kernels/ops", tooltip="Kernels or operators"),
        Binding(
            "D", "cycle_order", "Δ order", tooltip="Δ by |Δ|, regressions or improvements first"
        ),
        Binding("B", "both", "Both timelines", tooltip="Both timelines, no row highlighted"),
        Binding("S", "next_pair", "Step pair", tooltip="The step pair the timelines open at"),
        Binding("question_mark", "app.help", "Keys"),
    ]
    HELP_TITLE = "Diff table"  # the key help's section (tui/palette.py)

    @classmethod
    def help_bindings(cls) -> list[BindingType]:
        return [
            Binding(
                "enter", "choose", "Both timelines at the paired step, the row's instances lit"
            ),
            *DataView.BINDINGS,  # Enter's line above is the table's (the same action)
            *(b for b in TableScreen.BINDINGS if isinstance(b, Binding) and b.key != "escape"),
            *DiffScreen.BINDINGS,
        ]

    DEFAULT_CSS = """
    #diff-verdict { height: auto; max-height: 4; padding: 0 1; }  /* the reasons whole */
    #diff-metrics {
        height: auto; max-height: 12; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis;
    }
    #diff-pairs { height: auto; max-height: 1; padding: 0 1; }
    """
    SHOW_DETAIL = True
    DETAIL_CLASSES = "table-detail nowrap"
    FILTER_HINT = "type to filter by name, category, added or removed · re:… for a regex"

    def __init__(
        self, diff: TraceDiff, base: ViewData, new: ViewData, names: tuple[str, str] = ("", "")
    ) -> None:
        super().__init__()
        self.diff = diff
        self.views = (base, new)
        self.names = names
        self.tables = {
            "kernels": NameRows("kernels", diff.kernels),
            "operators": NameRows("operators", diff.operators),
        }
        # Neither trace ran a kernel (CPU-only runs): the operators are what changed.
        self.shown = "kernels" if diff.kernels or not diff.operators else "operators"
        self.order = 0
        self.pair = 0  # the step pair the timelines show

    def compose(self) -> ComposeResult:
        yield Static(Text(), id="diff-verdict")
        yield Static(Text(), id="diff-metrics")
        yield Static(Text(), id="diff-pairs")
        yield from super().compose()

    @property
    def rows(self) -> NameRows:
        return self.tables[self.shown]

    def on_mount(self) -> None:
        super().on_mount()
        self.table.set_model(table_model(self.rows, self.order))
        self.recolour()

    def recolour(self) -> None:
        palette = palette_of(self)
        self.query_one("#diff-verdict", Static).update(verdict_text(self.diff, palette))
        self.query_one("#diff-metrics", Static).update(metrics_text(self.diff, palette))
        self.query_one("#diff-pairs", Static).update(pairs_text(self.diff, self.pair, palette))
        super().recolour()

    def heading(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(self.shown.capitalize(), "bold")
        other = "operators" if self.shown == "kernels" else "kernels"
        text.append(f" (T: {other})", "dim")
        status = self.rows.status
        added, removed = int((status == ADDED).sum()), int((status == REMOVED).sum())
        text.append(f" · {added:,} added · {removed:,} removed")
        return text

    def csv_table(self) -> Table:
        return diff_table(self.rows.groups, self.shown)

    def csv_source(self) -> str:
        base, new = self.views
        return diff_source(base.trace.source.path, new.trace.source.path)

    def action_switch_table(self) -> None:
        self.shown = "operators" if self.shown == "kernels" else "kernels"
        self.table.set_model(table_model(self.rows, self.order))
        self.refresh_heading()

    def action_cycle_order(self) -> None:
        self.order = (self.order + 1) % len(ORDERS)
        self.table.set_model(table_model(self.rows, self.order), keep_state=True)
        self.table.sort_by(DELTA_COLUMN, True)
        self.notify(f"Δ column: {ORDERS[self.order]}", timeout=2)

    def action_back(self) -> None:
        """Esc clears the filter (this is the app's first screen: nothing to go back to)."""
        if self.table.pattern or self.query_one("#table-filter", Input).value:
            super().action_back()

    def describe(self, row: int) -> Text | None:
        rows = self.rows
        group = rows.groups[row]
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(shorten(group.name, 200), "bold")
        text.append(f" · {clean(group.cat)}", "dim")
        text.append("\n")
        if group.status == ADDED_OP:
            text.append(f"only in the new trace: {plural(group.new_count, 'call')}, ")
            text.append(fmt_duration(group.new_total))
        elif group.status == REMOVED_OP:
            text.append(f"only in the base: {plural(group.base_count, 'call')}, ")
            text.append(fmt_duration(group.base_total))
        else:
            base_mean = group.base_mean or 0.0
            new_mean = group.new_mean or 0.0
            count_delta = group.new_count - group.base_count
            text.append(f"Δ {_signed(group.delta)} = more calls {_signed(group.more_calls)}")
            text.append(f" ({count_delta:+,} × {fmt_duration(base_mean)})")
            text.append(f" + slower calls {_signed(group.slower_calls)}")
            text.append(f" ({group.new_count:,} × {_signed(new_mean - base_mean)})")
        if group.merged:
            merged = sorted(set(group.base_names) | set(group.new_names))
            text.append(f"\nnormalised: {len(merged)} names merged: ")
            text.append(", ".join(shorten(n, 40) for n in merged[:3]))
            if len(merged) > 3:
                text.append(f" … +{len(merged) - 3}")
        text.append("\nEnter: both timelines at the paired step, its instances highlighted", "dim")
        return text

    def choose(self, row: int) -> None:
        self.open_pair(row)

    def action_both(self) -> None:
        self.open_pair(None)

    def action_next_pair(self) -> None:
        """The next step pair (after the last, the first) for the timelines."""
        pairs = self.diff.pairs
        if len(pairs) < 2:
            self.notify("One window compared: no other step pair", timeout=3)
            return
        self.pair = (self.pair + 1) % len(pairs)
        pair = pairs[self.pair]
        self.query_one("#diff-pairs", Static).update(
            pairs_text(self.diff, self.pair, palette_of(self))
        )
        self.notify(
            f"Timelines open at pair #{pair.number}: {pair.base_name} · {pair.new_name}",
            timeout=3,
            markup=False,
        )

    def open_pair(self, row: int | None) -> DiffPairScreen:
        """Both timelines stacked at the paired step, row `row`'s instances highlighted (None:
        nothing highlighted), the kernels the alignment added and removed marked."""
        diff = self.diff
        base_view, new_view = self.views
        if diff.pairs:
            pair = diff.pairs[self.pair]
            removed, added, replaced = aligned_changes(diff, self.pair)
            (b0, b1), (n0, n1) = pair.base_window, pair.new_window
            names = pair.base_name, pair.new_name
        else:  # --steps picked none: the whole traces, nothing aligned
            removed = added = np.zeros(0, np.int64)
            replaced = 0
            b0, b1 = base_view.origin, base_view.origin + base_view.span
            n0, n1 = new_view.origin, new_view.origin + new_view.span
            names = "whole trace", "whole trace"
        base = Half(base_view, b0, b1 - b0, _label(self.names[0], names[0]), removed)
        base.role, base.replaced = REMOVED_ROLE, replaced
        new = Half(new_view, n0, n1 - n0, _label(self.names[1], names[1]), added)
        new.replaced = replaced
        masks: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        instances: tuple[np.ndarray, np.ndarray] | None = None
        title = ""
        if row is not None:
            group = self.rows.groups[row]
            kind = group.kind
            masks = (
                group_name_mask(diff.base, kind, group.base_groups),
                group_name_mask(diff.new, kind, group.new_groups),
            )
            instances = (
                group_instances(diff.base, kind, group.base_groups),
                group_instances(diff.new, kind, group.new_groups),
            )
            pct = group.delta_pct
            title = f"{group.name} · Δ {_signed(group.delta)}"
            title += f" ({pct_text(pct)} %)" if pct is not None else f" ({group.status})"
        screen = DiffPairScreen(base, new, title=title, name_masks=masks, instances=instances)
        self.app.push_screen(screen)
        return screen


def _label(file: str, step: str) -> str:
    return f"{file} · {step}" if file else step


def _signed(ns: float) -> str:
    if np.isnan(ns):
        return "?"
    return ("+" if ns > 0 else "−" if ns < 0 else "") + fmt_duration(abs(ns))
