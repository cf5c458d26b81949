"""`kinetoscope summary`: the analysis as JSON, or as tables read top to bottom (text for a
terminal or a pipe, Markdown, tab-separated values). The command (loading, the cache, the
errors) is kinetoscope/commands/summary.py."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from kinetoscope.analysis.units import fmt_bytes, fmt_percent, fmt_table_time, plural

# Rich-only helpers (no Textual): the viewer's cutting, measured in the same cells.
from kinetoscope.present.safe_text import cut_end, cut_front, fit_names

if TYPE_CHECKING:
    from kinetoscope.present import tables

NATURAL_WIDTH = 10_000  # "no width": every table at its natural width (standard output a pipe)


def merged_export_note(header: dict[str, Any]) -> str | None:
    """What to say of a trace that is a job's merged export (`kinetoscope export DIR -o X.json`),
    None for any other: its ranks are summarised together as one trace."""
    from kinetoscope.parser.ranks import MERGED_KEY

    record = header.get(MERGED_KEY)
    if record is None:
        return None
    ranks = record.get("ranks") if isinstance(record, dict) else None
    count = f"{len(ranks)} ranks" if isinstance(ranks, list) else "a job's ranks"
    return (
        f"a merged export of {count} (kinetoscope export): summarised together as one trace, "
        "steps and GPU totals mixing the ranks; for numbers per rank, summarise the job's "
        "folder or rank files"
    )


def emit_sections(sections: list[Any], output: str, width: int | None) -> None:
    """Print report sections as Markdown (`md`), TSV (`tsv`) or text tables `width` wide."""
    if output == "md":
        emit(markdown(sections))
    elif output == "tsv":
        emit(tsv(sections))
    else:
        emit(render_text(sections, width))


def emit(text: str) -> None:
    """Write `text` to standard output and flush it. A closed pipe raises BrokenPipeError (the
    command then ends quietly); any other write error becomes one line (OutputError)."""
    from kinetoscope.common.errors import OutputError, output_error_message

    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(output_error_message(exc)) from None


def render_text(sections: list[Any], width: int | None = None) -> str:
    """The sections as text tables for `width` columns: the terminal's width on a terminal,
    else $COLUMNS, else each table's natural width. Colour only on a terminal."""
    import io

    from rich.console import Console

    try:
        is_terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):
        is_terminal = False
    if width is None and not is_terminal:
        width = _columns_env() or NATURAL_WIDTH
    console = Console(file=sys.stdout if is_terminal else io.StringIO(), width=width)
    with console.capture() as captured:
        for section in sections:
            console.print(section)
    text = captured.get()
    if not is_terminal:  # no colour codes: the padding after the last cell only costs bytes
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def _columns_env() -> int | None:
    import os

    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return columns if columns > 0 else None


def summary_json(document: dict[str, Any]) -> str:
    """The document as indented JSON text. NaN and Infinity (possible in header values copied
    through) become null; lone surrogates (a trace may spell `\\ud800`) stay JSON escapes."""
    try:
        return msgspec.json.format(msgspec.json.encode(document), indent=2).decode()
    except UnicodeEncodeError:
        return json.dumps(_finite(document), indent=2, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


# -- sections: tables that lay themselves out -----------------------------------------------

NUMBER, NAME, STACK, TEXT = "number", "name", "stack", "text"
CAP = {NAME: 48, STACK: 80, TEXT: 100}  # the widest a column is drawn, even with room to spare
FLOOR = {NAME: 16, STACK: 24, TEXT: 16}  # the narrowest before a table is split in two
# = tables.STACK_SEPARATOR. present/tables.py is imported by the functions that draw its tables,
# not with this module: a job's JSON summary needs `summary_json` and `emit` only, and the
# tables module's typed rows cost ~20 ms to define (tests/test_startup_imports.py).
STACK_SEPARATOR = " > "
NAME_WIDTH = CAP[NAME]


@dataclass
class Column:
    """A column. `number`: never cut nor wrapped; `name`: one line, cut with `…` (at the front
    for file paths and Python frames, whose end is what tells them apart); `stack`: frames
    joined by ` > `, outermost first, cut at the front; `text`: wrapped."""

    header: str
    kind: str

    def widths(self, cells: list[str]) -> tuple[int, int]:
        """(narrowest, natural) width in cells."""
        from rich.cells import cell_len

        longest_word = max((cell_len(w) for w in self.header.split()), default=0)
        natural = max([cell_len(self.header), *(cell_len(c) for c in cells)])
        if self.kind == NUMBER:
            return natural, natural
        natural = min(natural, max(CAP[self.kind], longest_word))
        return min(natural, max(FLOOR[self.kind], longest_word)), natural


class Section:
    """One table of the report: title, columns and rows of plain text (already cleaned of
    control characters), drawn by Rich for the width it is given, as Markdown or as TSV.

    Numbers are never cut: when the width cannot hold every column with the names at their
    narrowest, the table is split into tables that each repeat the `key` leading columns."""

    def __init__(
        self, title: str, columns: list[Column], show_header: bool = True, key: int = 1
    ) -> None:
        self.title = title
        self.columns = columns
        self.show_header = show_header
        self.key = key
        self.rows: list[list[tuple[str, Any]]] = []

    def add_row(self, *cells: Any) -> None:
        """Cells: str, or rich Text (its plain text and whole-cell style are kept)."""
        from rich.text import Text

        from kinetoscope.present.safe_text import clean

        row = []
        for cell in cells:
            if isinstance(cell, Text):
                row.append((clean(cell.plain), cell.style or None))
            else:
                row.append((clean("–" if cell is None else str(cell)), None))
        self.rows.append(row)

    @property
    def short_title(self) -> str:
        """The title up to its first explanation: `Steps`, `Longest GPU idle gaps`."""
        return re.split(r"[:;,(]", self.title, maxsplit=1)[0].strip()

    def column_cells(self, index: int) -> list[str]:
        return [row[index][0] for row in self.rows]

    # -- layout

    def layout(self, indices: list[int], max_width: int) -> list[int] | None:
        """Column widths for `indices` within `max_width`, or None when they do not fit."""
        bounds = [self.columns[i].widths(self.column_cells(i)) for i in indices]
        overhead = 3 * len(indices) + 1  # borders and one cell of padding on each side
        widths = [natural for _, natural in bounds]
        excess = sum(widths) + overhead - max_width
        if excess <= 0:
            return widths
        slack = [natural - narrowest for narrowest, natural in bounds]
        if sum(slack) < excess:
            return None
        # Take the excess from the flexible columns, in proportion to what each can give.
        total_slack = sum(slack)
        for position, give in enumerate(slack):
            cut = min(give, -(-excess * give // total_slack))
            widths[position] -= cut
        overshoot = sum(widths) + overhead - max_width
        position = 0
        while overshoot > 0:  # rounding: take the last cells one at a time
            if widths[position] > bounds[position][0]:
                widths[position] -= 1
                overshoot -= 1
            position = (position + 1) % len(widths)
        return widths

    def groups(self, max_width: int) -> list[tuple[list[int], list[int]]]:
        """The tables to draw: (column indices, widths) each."""
        every = list(range(len(self.columns)))
        widths = self.layout(every, max_width)
        if widths is not None:
            return [(every, widths)]
        key, rest = every[: self.key], every[self.key :]
        # As few tables as fit (found greedily), then the columns spread evenly over them.
        chunks: list[list[int]] = [[]]
        for index in rest:
            if not chunks[-1] or self.layout([*key, *chunks[-1], index], max_width) is not None:
                chunks[-1].append(index)
            else:
                chunks.append([index])
        count = len(chunks)
        size, extra = divmod(len(rest), count)
        even, start = [], 0
        for part in range(count):
            end = start + size + (1 if part < extra else 0)
            even.append(rest[start:end])
            start = end
        if all(self.layout([*key, *chunk], max_width) is not None for chunk in even):
            chunks = even
        return [
            ([*key, *chunk], self._widths_at_least([*key, *chunk], max_width)) for chunk in chunks
        ]

    def _widths_at_least(self, indices: list[int], max_width: int) -> list[int]:
        fitted = self.layout(indices, max_width)
        if fitted is not None:
            return fitted
        # Even one column beside the key does not fit: draw it wider than asked, numbers whole.
        return [self.columns[i].widths(self.column_cells(i))[0] for i in indices]

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.table import Table
        from rich.text import Text

        groups = self.groups(options.max_width)
        for part, (indices, widths) in enumerate(groups):
            title = self.title if part == 0 else f"{self.short_title} (continued)"
            table = Table(
                title=Text(title) if title else None,
                title_justify="left",
                title_style="bold",
                show_header=self.show_header,
                expand=False,
            )
            for index, width in zip(indices, widths):
                column = self.columns[index]
                table.add_column(
                    # Headers wrap at spaces (a column is never narrower than the header's
                    # longest word), even in columns whose cells stay on one line.
                    Text(column.header, no_wrap=False),
                    justify="right" if column.kind == NUMBER else "left",
                    width=width,
                    no_wrap=column.kind != TEXT,
                    overflow="fold",
                )
            # Name columns as the viewer shows them: folded, and told apart from each other.
            names = {
                i: fit_names(self.column_cells(i), w)
                for i, w in zip(indices, widths)
                if self.columns[i].kind == NAME
            }
            for number, row in enumerate(self.rows):
                table.add_row(
                    *(
                        Text(
                            names[i][number]
                            if i in names
                            else fit_cell(row[i][0], self.columns[i].kind, w),
                            style=row[i][1] or "",
                        )
                        for i, w in zip(indices, widths)
                    )
                )
            needed = sum(widths) + 3 * len(widths) + 1
            yield from console.render(table, options.update_width(max(needed, options.max_width)))

    # -- plain formats

    def markdown(self) -> str:
        def escape(text: str) -> str:
            return _MD_SPECIAL.sub(r"\\\g<0>", text)

        lines = [f"## {escape(self.title)}", ""] if self.title else []
        lines.append("| " + " | ".join(escape(c.header) for c in self.columns) + " |")
        lines.append(
            "|" + "|".join("---:" if c.kind == NUMBER else "---" for c in self.columns) + "|"
        )
        for row in self.rows:
            lines.append("| " + " | ".join(escape(text) for text, _ in row) + " |")
        return "\n".join(lines) + "\n"

    def tsv(self) -> str:
        lines = [f"# {self.title}"] if self.title else []
        lines.append("\t".join(c.header for c in self.columns))
        lines.extend("\t".join(text for text, _ in row) for row in self.rows)
        return "\n".join(lines) + "\n"


class Note:
    """A line of advice between the tables (dim on a terminal, a paragraph in Markdown)."""

    def __init__(self, text: str) -> None:
        from kinetoscope.present.safe_text import clean

        self.text = clean(text)

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text, style="dim")

    def markdown(self) -> str:
        return _MD_SPECIAL.sub(r"\\\g<0>", self.text) + "\n"

    def tsv(self) -> str:
        return f"# {self.text}\n"


# Characters that Markdown (GitHub's included) would read as markup or HTML inside a table cell.
_MD_SPECIAL = re.compile(r"[\\`*_\[\]<>|~]")


def markdown(sections: list[Any]) -> str:
    return "\n".join(_plain(section).markdown() for section in sections)


def tsv(sections: list[Any]) -> str:
    """One table per section: a `# title` line, the header row, the rows, a blank line."""
    return "\n".join(_plain(section).tsv() for section in sections)


def _plain(section: Any) -> Any:
    """A section, or any other Rich renderable as a Note of its plain text."""
    if hasattr(section, "markdown") and hasattr(section, "tsv"):
        return section
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=NATURAL_WIDTH, color_system=None)
    with console.capture() as captured:
        console.print(section)
    return Note(" ".join(captured.get().split()))


_FRAME = re.compile(r"\.py\(\d+\)|^[A-Za-z]:\\|^/|^\.\.?/")


def fit_cell(text: str, kind: str, width: int) -> str:
    """`text` cut to `width` cells as its column kind wants (numbers and text are never cut)."""
    from rich.cells import cell_len

    if kind in (NUMBER, TEXT) or cell_len(text) <= width:
        return text
    if kind == STACK:
        return cut_stack(text, width)
    if _FRAME.search(text):
        return cut_front(text, width)
    return cut_end(text, width)


def cut_stack(text: str, width: int) -> str:
    """Frames joined by ` > ` in at most `width` cells: the outermost frames give way first
    (`… > aten::linear > aten::addmm`); where not even the innermost fits so, the text is cut
    at the front as one string."""
    from rich.cells import cell_len

    if cell_len(text) <= width:
        return text
    frames = text.split(STACK_SEPARATOR)
    for start in range(1, len(frames)):
        shown = "…" + STACK_SEPARATOR + STACK_SEPARATOR.join(frames[start:])
        if cell_len(shown) <= width:
            return shown
    return cut_front(text, width)


def summary_tables(analysis: Any, document: dict[str, Any], answer_first: bool = True) -> list[Any]:
    """The report's sections, in reading order (Rich renderables; also `markdown()`, `tsv()`).
    `answer_first`: open with "What to fix" and give the findings one row per cause (else no
    "What to fix", and one row per rule's finding)."""
    from kinetoscope.present.report_memory_sync import memory_sync_tables

    sections = [
        what_to_fix_table(document) if answer_first else None,
        trace_facts(analysis, document),
        steps_section(analysis),
        gpu_section(document),
        device_names_note(document),
        gaps_section(document),
        idle_by_cpu_section(document),
        operators_section(document),
        kernels_section(analysis, document),
        memory_section(document),
        *memory_sync_tables(document),
        *compile_tables(document),
        findings_section(document, grouped=answer_first),
    ]
    return [s for s in sections if s is not None]


def _data(text: Any) -> Any:
    """Text from the trace, shown literally: no markup, no terminal control characters."""
    from rich.text import Text

    from kinetoscope.present.safe_text import clean

    return Text(clean(str(text)))


def _dur(us: float | None) -> str:
    """A duration (µs, as in the document) for a table cell: three decimals, zeros kept."""
    return "–" if us is None else fmt_table_time(us * 1000, align_units=False)


def _bytes(value: int | None, signed: bool = False) -> str:
    return "–" if value is None else fmt_bytes(value, signed=signed)


def _pct(part: float, whole: float) -> str:
    return "–" if whole <= 0 else fmt_percent(part / whole)


def _table(
    title: str,
    *columns: str,
    right: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
    stacks: tuple[str, ...] = (),
    key: int = 1,
) -> Section:
    """A section; `right` columns are numbers, `names` columns hold event names and `stacks`
    columns call stacks (both cut to fit); the others are text that wraps."""

    def kind(column: str) -> str:
        if column in right:
            return NUMBER
        if column in stacks:
            return STACK
        return NAME if column in names else TEXT

    return Section(title, [Column(c, kind(c)) for c in columns], key=key)


def section(
    table: tables.Table, rows: Iterable[int] | None = None, title: str | None = None
) -> Section:
    """The report's section of a table (present/tables.py): its report fields under their
    titles, laid out as their kinds say, over `rows` (None: all, in row order). Text from the
    trace is shown literally (`_data`); a field's `text` gives its own cell."""
    fields = table.report_fields
    out = Section(
        table.title if title is None else title,
        [Column(f.title or f.header, f.kind.layout) for f in fields],
        key=table.key,
    )
    for row in range(table.n) if rows is None else rows:
        out.add_row(*(_report_cell(f, row) for f in fields))
    return out


def _report_cell(field: tables.Field, row: int) -> Any:
    from rich.text import Text

    from kinetoscope.present import tables

    if field.text is not None:
        return field.text(row)
    value = field.value(row)
    if value is None:
        return field.missing
    if field.kind is tables.SEVERITY:
        return Text(str(value), style=SEVERITY_COLOURS.get(value, ""))
    if field.kind.csv == "text":
        return _data(value)
    return field.kind.shown(value)


def trace_facts(analysis: Any, document: dict[str, Any]) -> Any:
    source, trace = document["source"], document["trace"]
    table = _table("Trace", "fact", "value")
    table.show_header = False
    size = f"{source['bytes']:,} bytes" + (" (gzip)" if source["compressed"] else "")
    table.add_row("file", _data(source["path"]))
    table.add_row("size", size)
    phases = ", ".join(f"{ph} {n:,}" for ph, n in sorted(trace["by_phase"].items()))
    table.add_row("events", _data(f"{trace['events']:,} ({phases})"))
    cats = sorted(trace["by_category"].items(), key=lambda kv: -kv[1])
    table.add_row("slices", _data(", ".join(f"{c or '(none)'} {n:,}" for c, n in cats[:8])))
    if trace["start_us"] is not None:
        span = trace["end_us"] - trace["start_us"]
        table.add_row("span", f"{_dur(span)} from ts {trace['start_us']:.3f} µs")
    schema = trace["schema_version"]
    table.add_row(
        "schema", "none (no schemaVersion: an early format)" if schema is None else _data(schema)
    )
    for device in document["devices"]:
        memory = device["total_memory_bytes"]
        mem = f", {fmt_bytes(memory)}" if isinstance(memory, int) else ""
        table.add_row(_data(f"device {device['id']}"), _data(f"{device['name']}{mem}"))
    if not trace["complete"]:
        table.add_row("incomplete", "the file ended before the JSON did")
    for warning in trace["warnings"]:
        table.add_row("warning", _data(warning))
    return table


def steps_section(analysis: Any) -> Any:
    from kinetoscope.present import tables

    steps = analysis.steps
    if len(steps) == 0:
        return None
    return section(tables.steps_table(analysis.trace, steps, bool(analysis.classes.gpu.any())))


def gpu_section(document: dict[str, Any]) -> Any:
    from kinetoscope.present import tables

    if not document["gpu"]:
        return None
    return section(tables.devices_table(tables.DeviceRows.of_document(document)))


def gpu_device_names(document: dict[str, Any]) -> dict[int, Any]:
    """The document's GPUs named from its `devices` (analysis/devices.py): `GPU 2 (listed as
    device 0: AMD Instinct MI300X)` where the kernels' id and the listed one differ."""
    from kinetoscope.analysis.devices import listed_devices, name_devices

    return name_devices(
        listed_devices(document["devices"]), [gpu["device"] for gpu in document["gpu"]]
    )


def device_names_note(document: dict[str, Any]) -> Any:
    """Which device each GPU of the statistics is: `GPU 2 (listed as device 0: AMD Instinct
    MI300X)`, said wherever the trace's header does not list the kernels' device ids as they
    are (or names a GPU)."""
    if not document["gpu"]:
        return None
    names = gpu_device_names(document).values()
    if not any(name.name or name.how != "none" for name in names):
        return None  # no deviceProperties: nothing to match
    text = "; ".join(name.label for name in names)
    remapped = [name for name in names if name.how in ("paired", "unknown")]
    if remapped:
        text += (
            " (the kernels' device ids differ from the ids the header lists, as with visible-"
            "device remapping; a GPU is paired with a listed one only when each is the only one)"
        )
    return Note(f"GPUs: {text}")


def gaps_section(document: dict[str, Any]) -> Any:
    from kinetoscope.present import tables

    if not document["idle_gaps"]:
        return None
    return section(tables.gaps_table(tables.GapRows.of_document(document)))


def idle_by_cpu_section(document: dict[str, Any], limit: int = 10) -> Any:
    """GPU idle totalled by the CPU operator running during the gaps (extension section): the
    `limit` most, then the gaps with no CPU slice there."""
    from kinetoscope.present import tables

    entries = document.get("idle_by_cpu") or []
    if not entries:
        return None
    named = [i for i, e in enumerate(entries) if e["name"] is not None][:limit]
    rows = named + [i for i, e in enumerate(entries) if e["name"] is None]
    return section(tables.idle_by_cpu_table(tables.IdleByCpuRows.of_document(entries)), rows)


def operators_section(document: dict[str, Any], limit: int = 20) -> Any:
    from kinetoscope.present import tables

    ops = document["operators"]
    if not ops:
        return None
    table = tables.operators_table(tables.OperatorRows.of_document(ops))
    return section(
        table, range(min(limit, len(ops))), f"{table.title} (of {len(ops)} listed in --json)"
    )


def kernels_section(analysis: Any, document: dict[str, Any], limit: int = 20) -> Any:
    from kinetoscope.present import tables

    kernels = document["kernels"]
    if not kernels:
        return None
    from kinetoscope.analysis.kernels import top_launcher

    rows = tables.KernelRows.of_document(
        kernels, lambda cat, name: top_launcher(analysis, cat, name)
    )
    table = tables.kernels_table(rows)
    shown = range(min(limit, len(kernels)))
    return section(table, shown, f"{table.title} (of {len(kernels)} in --json)")


def memory_section(document: dict[str, Any]) -> Any:
    from kinetoscope.present import tables

    if not document["memory"]:
        return None
    return section(tables.memory_peaks_table(tables.MemoryPeakRows.of_document(document)))


def compile_tables(document: dict[str, Any]) -> list[Any]:
    """The `compile` section (docs/compile.md): facts, eager islands, per step; nothing for a
    trace without compiled code or graph replay."""
    from kinetoscope.present import tables

    c = document.get("compile")
    if not c or not (c["has_compiled"] or c["graph_replay"]):
        return []
    facts = _table("Compiled code and graph replay (docs/compile.md)", "fact", "value")
    facts.show_header = False
    measured = "kernel time" if c["measured_on"] == "kernels" else "operator self time"
    facts.add_row(
        f"compiled share of {measured}",
        f"{_dur(c['compiled_us'])} of {_dur(c['total_us'])} {_pct(c['compiled_us'], c['total_us'])}",
    )
    regions = c["regions"]
    if regions:
        facts.add_row("regions", ", ".join(f"{kind} {n:,}" for kind, n in regions.items()))
    for frame in c["frames"]:
        ids = ", ".join(
            f"{i} ({plural(n, 'call')})" for i, n in zip(frame["compile_ids"], frame["calls"])
        )
        facts.add_row(f"frame {frame['frame']}", f"compile ids {ids}")
    for brk in c["likely_graph_breaks"][:5]:
        where = brk["step"] or "the trace"
        facts.add_row("likely graph breaks", _data(f"{where}: frames {brk['frames']}"))
    if c["compiling"]["events"]:
        facts.add_row(
            "compiling in the window",
            f"{plural(c['compiling']['events'], 'event')}, {_dur(c['compiling']['us'])}",
        )
    guard = c["guard"]
    if guard["calls"]:
        facts.add_row(
            "guards (TorchDynamo Cache Lookup)",
            f"{plural(guard['calls'], 'call')}, {_dur(guard['self_us'])} self, "
            f"{_dur(guard['mean_us'])} each",
        )
    launch = c["launch"]
    per_graph = launch["kernels_per_graph_launch"]
    facts.add_row(
        "launch calls",
        f"{launch['launch_calls']:,} ({plural(launch['graph_launches'], 'graph launch', 'graph launches')}"
        + (f", {per_graph:,.1f} kernels each" if per_graph is not None else "")
        + f"), {_dur(launch['cpu_us'])} on the CPU, for {launch['kernels']:,} kernels",
    )
    fusion = c["fusion"]
    if fusion["kernels"]:
        facts.add_row(
            "kernels under 10 µs",
            f"{fusion['short_kernels']:,} of {fusion['kernels']:,} "
            f"{_pct(fusion['short_kernels'], fusion['kernels'])}",
        )
    for kind in fusion["by_kind"]:
        facts.add_row(
            f"Inductor {kind['label']}",
            f"{plural(kind['count'], 'run')} of {plural(kind['names'], 'kernel')}, "
            f"{_dur(kind['total_us'])}, "
            f"{kind['fused_mean']:.1f} fused names each, {kind['short']:,} under 10 µs",
        )
    replay = c["graph_replay"]
    if replay:
        facts.add_row(
            "graph replay",
            f"{plural(replay['launches'], 'launch', 'launches')}, "
            f"{plural(replay['kernels'], 'GPU activity', 'GPU activities')}, "
            f"{_dur(replay['gpu_us'])}; idle inside replays {_dur(replay['idle_inside_us'])} "
            f"({_dur(replay['host_wait_inside_us'])} of it counted host_wait)"
            + (
                f"; {plural(replay['captures'], 'capture')} in the window"
                if replay["captures"]
                else ""
            ),
        )
        for note in replay["partial"]:
            facts.add_row("partial", _data(note))
    made = [facts]
    if c["eager_islands"]:
        listed = len(c["eager_islands"])
        shown = f" (10 of {listed} in --json)" if listed > 10 else ""
        islands = tables.islands_table(tables.IslandRows.of_document(c["eager_islands"]))
        made.append(section(islands, range(min(10, listed)), islands.title + shown))
    efficiency = c["efficiency"]["kernels"]
    if efficiency:
        numbers = ("count", "time", "TFLOP/s", "GB/s", "of peak GB/s")
        eff = _table(
            "Kernel efficiency (kernel_flop, kernel_num_gb)",
            "kernel",
            *numbers,
            right=numbers,
            names=("kernel",),
        )
        for entry in efficiency[:10]:
            share = entry["bandwidth_share"]
            eff.add_row(
                _data(entry["name"]),
                f"{entry['count']:,}",
                _dur(entry["dur_us"]),
                "–" if entry["tflops"] is None else f"{entry['tflops']:.2f}",
                "–" if entry["gbs"] is None else f"{entry['gbs']:.1f}",
                "–" if share is None else fmt_percent(share),
            )
        made.append(eff)
    if c["steps"] and c["has_compiled"]:
        made.append(
            section(tables.compile_steps_table(tables.CompileStepRows.of_document(c["steps"])))
        )
    return made


SEVERITY_COLOURS = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
WHAT_TO_FIX_ROWS = 5  # causes above info shown in "What to fix" (info ones only when no other)
WHAT_TO_FIX_INFO_ROWS = 3


def _causes(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's causes; a document without them (older) has one per finding."""
    if "causes" in document:
        return document["causes"]
    return [
        {
            "rule": f["rule"],
            "severity": f["severity"],
            "title": f["message"],
            "stake_us": 0,
            "finding": i,
            "supports": [],
        }
        for i, f in enumerate(document["findings"])
    ]


def what_to_fix_table(document: dict[str, Any]) -> Any:
    """The answer first: the top causes, one line each, with the time at stake and where to
    look (the evidence's time from the trace start, and its first event)."""
    from rich.text import Text

    causes = _causes(document)
    shown = [c for c in causes if c["severity"] != "info"][:WHAT_TO_FIX_ROWS]
    if not shown:
        shown = causes[:WHAT_TO_FIX_INFO_ROWS]
    table = _table(
        "What to fix (most severe first; details under Findings, at the end)",
        "severity",
        "rule",
        "at stake",
        "what",
        "from",
        "evidence",
        right=("at stake", "from"),
        names=("evidence",),
    )
    start = document["trace"]["start_us"] or 0
    for cause in shown:
        finding = document["findings"][cause["finding"]]
        evidence = finding["evidence"]
        at = f"+{_dur(max(evidence['start_us'] - start, 0))}"
        where = evidence["events"][0]["name"] if evidence.get("events") else ""
        also = [document["findings"][i]["rule"] for i in cause["supports"]]
        what = cause["title"] + (f" (with {', '.join(also)})" if also else "")
        table.add_row(
            Text(cause["severity"], style=SEVERITY_COLOURS.get(cause["severity"], "")),
            cause["rule"],
            _dur(cause["stake_us"]) if cause["stake_us"] else "–",
            _data(what),
            at,
            _data(where),
        )
    if not causes:
        table.add_row("", "", "", "No rule fired: nothing stood out.", "", "")
    elif len(causes) > len(shown):
        rest = len(causes) - len(shown)
        table.add_row("", "", "", f"{plural(rest, 'more finding')} under Findings", "", "")
    return table


def findings_section(document: dict[str, Any], grouped: bool = True) -> Any:
    """One row per cause, the findings of other rules it explains inside its row (`grouped`),
    or one row per rule's finding."""
    from kinetoscope.present import tables

    findings = document["findings"]
    causes = _causes(document) if grouped else _causes({"findings": findings})
    rows = []
    for cause in causes:
        finding = findings[cause["finding"]]
        message = finding["message"]
        for i in cause["supports"]:
            support = findings[i]
            message += f" Supporting evidence, {support['rule']} ({support['severity']}): "
            message += support["message"]
        evidence = finding["evidence"]
        rows.append(
            tables.FindingRow(
                cause["severity"],
                cause["rule"],
                message,
                tables.us_ns(evidence["start_us"]),
                tables.us_ns(evidence["dur_us"]),
                evidence.get("device"),
            )
        )
    table = section(tables.findings_table(rows))
    if not findings:
        table.add_row("", "", "No rule fired.")
    return table
