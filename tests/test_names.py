"""Names in narrow places (kinetoscope.analysis.names, tui.safe_text.fit_name) and the cells
they take: the informative end of Python frames, kernel signatures folded, names given the
spare width of the tables, and characters drawn as wide as Rich measures them."""

from __future__ import annotations

import ctypes
import ctypes.util
import locale
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kinetoscope.analysis.names import name_forms, short_frame, short_kernel
from rich.cells import cell_len

from kinetoscope.present.safe_text import cells_of, clean, cut_front, fit, fit_name, shorten

MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::MulFunctor<float>, "
    "at::detail::Array<char*, 3>)"
)
QWEN = "transformers/models/qwen2/modeling_qwen2.py(150): forward"


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (MUL, "vectorized_elementwise_kernel<…MulFunctor…>"),
        (
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, "
            "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::"
            "operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, "
            "4> >(at::native::ReduceOp<float>)",
            "reduce_kernel<…sum_functor…>",
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>"
            "(cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4::Params)",
            "Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>",
        ),
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::"
            "(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(int)",
            "CatArrayBatchedCopy<…>",
        ),
        (
            "void splitKreduce_kernel<float, float, float, float, true, false, false>"
            "(cublasSplitKParams<float>, float const*)",
            "splitKreduce_kernel<…>",
        ),
        (
            "cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)",
            "computeOffsetsKernel",
        ),
        # Not signatures: left alone.
        ("volta_sgemm_128x64_nn", None),
        ("aten::mm", None),
        ("Memcpy HtoD (Pageable -> Device)", None),
        ("forward(x)", None),
        ("ProfilerStep#3", None),
    ],
)
def test_short_kernel(name: str, short: str | None):
    assert short_kernel(name) == short


def test_short_frame():
    assert short_frame(QWEN) == "modeling_qwen2.py(150): forward"
    assert short_frame("modeling_qwen2.py(150): forward") is None  # no directories
    assert short_frame("<built-in method append of list object at 0x7f>") is None
    assert short_frame("torch/_ops.py(x): call") is None  # not a line number


@pytest.mark.parametrize(
    ("name", "width", "shown"),
    [
        (QWEN, 60, QWEN),
        (QWEN, 31, "modeling_qwen2.py(150): forward"),
        (QWEN, 23, "…qwen2.py(150): forward"),
        (MUL, 200, MUL),
        (MUL, 43, "vectorized_elementwise_kernel<…MulFunctor…>"),
        (MUL, 30, "vectorized_elem…<…MulFunctor…>"),
        ("ProfilerStep#1234", 12, "Profil…#1234"),
        ("/data/checkpoints/run7/model.safetensors", 24, "…/run7/model.safetensors"),
        ("aten::scaled_dot_product_attention", 16, "aten::scaled_do…"),
        (
            "autograd::engine::evaluate_function: AddmmBackward0",
            34,
            "autograd::engine:…: AddmmBackward0",
        ),
        ("Torch-Compiled Region: 0/1", 12, "Torch-…: 0/1"),
    ],
)
def test_fit_name_keeps_the_informative_part(name: str, width: int, shown: str):
    assert fit_name(name, width) == shown
    assert cell_len(fit_name(name, width)) <= width


def test_frames_that_read_the_same_when_cut_at_the_end_differ():
    frames = [
        f"transformers/models/qwen2/modeling_qwen2.py({line}): forward"
        for line in (150, 218, 243, 503, 56)
    ]
    for width in (14, 20, 30):
        shown = [fit_name(f, width) for f in frames]
        assert len(set(shown)) == len(frames), shown


TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=120)


@settings(max_examples=300, deadline=None)
@given(TEXT, st.integers(min_value=0, max_value=60))
def test_every_fit_is_within_its_width(text: str, width: int):
    assert cell_len(fit_name(text, width)) <= width
    assert cell_len(fit(text, width)) == width
    assert cell_len(shorten(text, width)) <= width
    assert cell_len(cut_front(clean(text), width)) <= width
    cells = cells_of(text, width)
    assert len(cells) == width
    # Every cell string draws as one cell (or is the second half of a wide character).
    for i, cell in enumerate(cells):
        if cell == "":
            assert i > 0 and cell_len(cells[i - 1]) == 2
        else:
            assert cell_len(cell) in (1, 2)


# -- widths as the terminal draws them ---------------------------------------------------------


def _libc_wcwidth():
    """The C library's wcwidth under a UTF-8 locale (what most terminals use), or None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    saved = locale.setlocale(locale.LC_CTYPE)
    for candidate in ("C.UTF-8", "C.utf8", "en_US.UTF-8"):
        try:
            locale.setlocale(locale.LC_CTYPE, candidate)
            break
        except locale.Error:
            continue
    else:
        return None
    table = {}

    def width(char: str) -> int:
        if char not in table:
            locale.setlocale(locale.LC_CTYPE, candidate)
            try:
                table[char] = libc.wcwidth(ord(char))
            finally:
                locale.setlocale(locale.LC_CTYPE, saved)
        return table[char]

    locale.setlocale(locale.LC_CTYPE, saved)
    if width("中") != 2 or width("a") != 1:
        return None
    return width


TERMINAL = _libc_wcwidth()

HOSTILE_NAMES = [
    "\u3164" * 30 + "filler",  # HANGUL FILLER: 0 cells for Rich, 2 for terminals
    "\uffa0" * 10 + "half filler",
    "नमस्ते दुनिया " * 4,  # Devanagari spacing vowel signs
    "👍🏽 👋🏿 " * 8,  # emoji with skin-tone modifiers
    "❤️ ☺️ " * 6,  # emoji presentation selectors
    "🇩🇪🇫🇷 flags",
    "☰☱ trigrams",
]


@pytest.mark.skipif(TERMINAL is None, reason="no C library wcwidth with a UTF-8 locale")
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_drawn_names_are_as_wide_for_the_terminal_as_for_rich(name: str):
    """What Textual lays out with Rich's measure must take as many cells on the terminal."""
    assert TERMINAL is not None

    def terminal_len(text: str) -> int:
        total = 0
        for char in text:
            w = TERMINAL(char)
            if w < 0 or (w == 0 and unicodedata.category(char) not in ("Mn", "Me")):
                raise AssertionError(f"{char!r} is not drawn as Rich measures it")
            total += w
        return total

    for width in (8, 20, 34):
        for drawn in (fit(name, width), fit_name(name, width), "".join(cells_of(name, width))):
            assert cell_len(drawn) == terminal_len(drawn), (width, drawn)
    assert cell_len(clean(name)) == terminal_len(clean(name))


def test_lane_labels_line_up_with_the_ruler(write_trace):
    """Threads named with width-disputed characters: every line of the timeline has its
    separator in the same column, and the same width for the terminal as for Rich."""
    import asyncio

    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.screens import TraceScreen
    from kinetoscope.tui.widgets.timeline import Timeline

    events = []
    for tid, name in enumerate(HOSTILE_NAMES, start=1):
        events.append(
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": name}}
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": tid,
                "ts": 10 * tid,
                "dur": 500,
            }
        )
    path = write_trace({"traceEvents": events})

    async def run() -> list[str]:
        app = KinetoscopeApp(str(path))
        async with app.run_test(size=(100, 30)) as pilot:
            while not isinstance(app.screen, TraceScreen):
                await pilot.pause(0.05)
            await pilot.pause()
            timeline = app.screen.query_one(Timeline)
            return [timeline.render_line(y).text for y in range(len(HOSTILE_NAMES) + 4)]

    lines = asyncio.run(run())
    label = cell_len(lines[0].split("│")[0])
    for line in lines:
        if "│" not in line:
            continue
        assert cell_len(line.split("│")[0]) == label, line
        if TERMINAL is not None:
            assert sum(max(TERMINAL(c), 0) for c in line) == cell_len(line), line


# -- huge names --------------------------------------------------------------------------------


def test_a_huge_name_costs_what_a_long_one_does():
    """Shortening, splitting and cleaning a 5-million-character name look at its start only:
    no call per character and no copy of it (counted, so the verdict does not depend on the
    machine's speed; a pass over the name would make millions of calls or copy 10 MB)."""
    import tracemalloc

    from work_count import calls_made

    huge = "中" * 5_000_000 + "end"
    tracemalloc.start()
    try:
        fit_calls, shown = calls_made(fit_name, huge, 30)
        forms_calls, forms = calls_made(name_forms, huge)
        clean_calls, cleaned = calls_made(clean, huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cell_len(shown) <= 30 and shown.endswith("…")
    assert forms.truncated
    assert len(cleaned) < 20_000 and cleaned.endswith("more characters)")
    assert max(fit_calls, forms_calls, clean_calls) < 100_000, (fit_calls, forms_calls, clean_calls)
    assert peak < 2_000_000, peak


# -- tables give names the room ----------------------------------------------------------------


def _frames_trace() -> dict:
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    ts = 0
    for line in (150, 218, 243, 503, 56):
        for _ in range(3):
            frame = f"transformers/models/qwen2/modeling_qwen2.py({line}): forward"
            events.append(
                {
                    "ph": "X",
                    "cat": "python_function",
                    "name": frame,
                    "pid": 1,
                    "tid": 1,
                    "ts": ts,
                    "dur": 40 + line,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1,
                    "tid": 1,
                    "ts": ts + 1,
                    "dur": 20,
                }
            )
            ts += 1000
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": MUL,
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": 9000,
            "args": {"device": 0, "stream": 7},
        }
    )
    return {"traceEvents": events}


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_tables_give_names_the_spare_width(write_trace, size):
    import asyncio

    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.kernels import KernelsScreen
    from kinetoscope.tui.trace.operators import OperatorsScreen
    from kinetoscope.tui.trace.screens import TraceScreen

    path = write_trace(_frames_trace())

    async def run():
        app = KinetoscopeApp(str(path))
        async with app.run_test(size=size) as pilot:
            while not isinstance(app.screen, TraceScreen):
                await pilot.pause(0.05)
            screens = []
            for key, kind in (("o", OperatorsScreen), ("k", KernelsScreen)):
                await pilot.press(key)
                while not isinstance(app.screen, kind):
                    await pilot.pause(0.05)
                await app.workers.wait_for_complete()
                await pilot.pause()
                table = app.screen.table
                widths = table._widths(table.scrollable_content_region.width)
                lines = [table.render_line(y).text for y in range(1, table.row_count + 1)]
                screens.append((widths, lines))
                await pilot.press("escape")
                await pilot.pause()
            return screens

    (op_widths, op_lines), (k_widths, k_lines) = asyncio.run(run())
    assert op_widths[0] >= 28 and k_widths[0] >= 28
    frames = [line[: op_widths[0]].strip() for line in op_lines if "forward" in line]
    assert len(frames) == 5 and len(set(frames)) == 5, frames
    assert all("qwen2.py(" in f for f in frames), frames
    assert any("<…MulFunctor…>" in line for line in k_lines), k_lines
    # Numbers (after the name and category columns) are never cut.
    numbers = op_widths[0] + op_widths[1] + 2
    assert not any("…" in line[numbers:] for line in op_lines), op_lines


def _one_event_trace(event: dict) -> dict:
    base = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 50}
    events = [{**base, "name": f"aten::op{i}", "ts": 100 * i} for i in range(20)]
    events.append({**base, **event, "ts": 5})
    return {"traceEvents": events}


async def _key_calls(path, name: str, keys: tuple[str, ...]) -> tuple[list[int], str]:
    """Select the event called `name` and wait for its args to be read back and shown, then
    press `keys`: the Python and C calls the selection and each key took until the screen was
    redrawn (threads the app started included), and the details pane's text."""
    from kinetoscope.tui.trace.app import KinetoscopeApp
    from kinetoscope.tui.trace.details import DetailsPane
    from kinetoscope.tui.trace.screens import TraceScreen
    from work_count import CallCount

    app = KinetoscopeApp(str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        while not isinstance(app.screen, TraceScreen):
            await pilot.pause(0.05)
        await pilot.pause()
        await app.workers.wait_for_complete()
        screen = app.screen
        trace = screen.data.trace
        row = next(r for r in range(len(trace)) if trace.name_of(r).startswith(name[:50]))
        with CallCount() as count:
            screen.timeline.select(row)
            await app.workers.wait_for_complete()
            await pilot.pause()
        calls = [count.calls]
        for key in keys:
            with CallCount() as count:
                await pilot.press(key)
                await pilot.pause()
            calls.append(count.calls)
        details = screen.query_one(DetailsPane)
        return calls, str(details.body.render())


def _baseline_calls(write_trace, keys: tuple[str, ...], args: dict | None = None) -> list[int]:
    """`_key_calls` for an ordinary event called "plain" (with `args`, or one arg)."""
    import asyncio

    event = {"name": "plain", "args": args or {"a": 1}}
    path = write_trace(_one_event_trace(event), name="plain.json")
    calls, _ = asyncio.run(_key_calls(path, "plain", keys))
    return calls


def _answered_as_plainly(calls: list[int], baseline: list[int]) -> None:
    """Selecting the event (its args read back from the file) and each key cost about what
    they cost with an ordinary event: counted in calls, so the machine's speed and load do not
    matter. A pass over the name's characters or the args, one call each, would add millions
    (or 300,000); the margin leaves room for the timers that happen to fire meanwhile."""
    for got, plain in zip(calls, baseline):
        assert got < 2 * plain + 50_000, (calls, baseline)


@pytest.mark.slow
def test_an_event_with_300000_args_keeps_the_keys_answered(write_trace):
    """The details pane shows the first args and a count of the rest: selecting the event and
    the keys after cost what they cost with an event of 1,000 args (shown the same way)."""
    import asyncio

    def args_of(n: int) -> dict:
        return {**{f"key{i}": i for i in range(n)}, "nested": {"list": list(range(100_000))}}

    path = write_trace(_one_event_trace({"name": "many_args", "args": args_of(300_000)}))
    keys = ("w", "s", "w", "s")
    baseline = _baseline_calls(write_trace, keys, args_of(1000))
    calls, details = asyncio.run(_key_calls(path, "many_args", keys))
    assert "more args" in details and "299,801 more args" in details, details[-300:]
    assert len(details) < 100_000
    _answered_as_plainly(calls, baseline)


@pytest.mark.slow
def test_a_50_mb_name_keeps_the_keys_answered(write_trace):
    """The details pane cuts the name: selecting the event and the keys after cost what they
    cost with an event called "plain"."""
    import asyncio

    name = "中" * (50_000_000 // 3)
    path = write_trace(_one_event_trace({"name": name, "dur": 2000}))
    keys = ("w", "s", "w", "s", "right")
    baseline = _baseline_calls(write_trace, keys)
    calls, details = asyncio.run(_key_calls(path, name, keys))
    assert "more characters" in details or "…" in details
    assert len(details) < 100_000
    _answered_as_plainly(calls, baseline)


@pytest.mark.slow
def test_a_50_mb_name_costs_the_summary_little(write_trace):
    """The summary's analysis and tables of a trace with one 50 MB name cost what they cost
    with a 1-million-character one (name tests look at a name's start only; the tables cut
    names first)."""
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import loads

    from kinetoscope.present.report_summary import summary_tables

    def analysis_calls(name: str) -> tuple[int, dict]:
        import json

        from kinetoscope.analysis import TraceSession
        from work_count import CallCount

        trace = loads(json.dumps(_one_event_trace({"name": name, "dur": 2000})).encode())
        with CallCount() as count:
            document = build_summary(trace)
            summary_tables(TraceSession(trace), document)
        return count.calls, document

    analysis_calls("plain")  # imports and caches made once
    long, _ = analysis_calls("中" * 1_000_000)
    huge, document = analysis_calls("中" * (50_000_000 // 3))
    assert document["operators"], document
    # Counted in calls: the same for a 16.7-million-character name as for a 1-million one
    # (past the length names are cut to); a pass over the characters would add millions.
    assert huge < 1.1 * long + 1000, (huge, long)


def test_filtering_a_table_by_name_ignores_how_long_one_name_is():
    import numpy as np
    from kinetoscope.tui.widgets.table import Column, TableModel

    names = ["aten::mm", "x" * 50_000_000 + "tail", "aten::add"]
    model = TableModel(
        columns=[Column("name", names.__getitem__, width=0, numeric=False, name=True)],
        n=3,
        names=np.arange(3),
        name_text=names.__getitem__,
    )
    import tracemalloc

    from work_count import CallCount

    tracemalloc.start()
    try:
        with CallCount() as count:
            for pattern in ("aten", "ATEN::M", "re:^x+", "re:add$", "nothing"):
                model.matching(pattern)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert model.matching("aten").tolist() == [True, False, True]
    assert model.matching("re:^x+").tolist() == [False, True, False]
    # No call per character and no copy of the 50 MB name (counted, not timed).
    assert count.calls < 10_000, count.calls
    assert peak < 5_000_000, peak
