"""Names in one table told apart (tui.safe_text.fit_names): names that share a long start show
the part where they differ (tile sizes, suffixes), in the viewer's tables and in `summary`;
Itanium C++ names are demangled by the C++ runtime (analysis.names.demangle)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import corpus_params
from kinetoscope.analysis import names as names_module
from kinetoscope.analysis.names import demangle, full_form, name_forms
from rich.cells import cell_len

from kinetoscope.present.safe_text import ELLIPSIS, fit_name, fit_names

TAIL = "_MI16x16x1_SN_LDSB1_AFC1_AG0_AFEM1_AFEM1_ASEM1_CB0_CD1_1_CLR1_CADS0_DTLA0_DTLB0_WG16_16_1"
CIJK = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_"
AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIN3c108BFloat16ELi256ELi8ELb0EEEvPT_"


def family() -> list[str]:
    tiles = ["MT320x224x64", "MT256x224x64", "MT256x256x64", "MT64x96x128", "MT128x64x128"]
    names = [CIJK + tile + TAIL for tile in tiles]
    # Two kernels with the same tiles that differ far into the name.
    names.append(CIJK + "MT128x64x128" + TAIL.replace("AFC1", "AFC0"))
    return names


@pytest.mark.parametrize("width", [24, 30, 40, 48, 60, 100])
def test_a_family_sharing_a_long_start_reads_apart_at_every_width(width):
    names = family()
    plain = [fit_name(n, width) for n in names]
    if width < 100:
        assert len(set(plain)) < len(names)  # each name alone: some read the same
    shown = fit_names(names, width)
    assert len(set(shown)) == len(names), shown
    assert all(cell_len(text) <= width for text in shown)
    if width >= 30:
        # The tile size is what differs first: every row shows its own.
        for name, text in zip(names, shown):
            tile = name[len(CIJK) :].split("_", 1)[0]
            assert tile in text, (tile, text)


def test_the_issue_rows_show_their_tiles():
    names = family()[:2]
    shown = fit_names(names, 48)
    assert "MT320x224x64" in shown[0] and "MT256x224x64" in shown[1]
    assert shown[0].startswith("Cijk_") and ELLIPSIS in shown[0]


def test_names_that_differ_late_show_the_late_difference():
    names = family()[-2:]  # same tiles, AFC1 / AFC0
    shown = fit_names(names, 40)
    assert "AFC1" in shown[0] and "AFC0" in shown[1]


def test_same_names_read_the_same_and_lone_names_are_left_alone():
    names = [CIJK + "MT320x224x64" + TAIL] * 3 + ["aten::mm", "sage_fwd"]
    shown = fit_names(names, 30)
    assert shown[0] == shown[1] == shown[2] == fit_name(names[0], 30)
    assert shown[3:] == ["aten::mm", "sage_fwd"]


def test_a_name_that_is_the_start_of_another_shows_its_end():
    a = "triton_poi_fused_add_mul_cat_clone_gelu_transpose_view"
    b = a + "_34"
    shown = fit_names([a, b], 24)
    assert shown[0] != shown[1]
    assert shown[1].endswith("_34") or "_34" in shown[1]


def test_folded_kernels_that_read_the_same_show_their_template_arguments():
    float_add = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3>)"
    )
    half_add = float_add.replace("<float>", "<c10::Half>")
    assert fit_name(float_add, 60) == fit_name(half_add, 60)  # folded alike
    shown = fit_names([float_add, half_add], 60)
    assert shown[0] != shown[1]
    assert shown[0].startswith("vectorized_elementwise_kernel")
    assert "float" in shown[0] and "Half" in shown[1]


def test_demangle_uses_the_cpp_runtime():
    if names_module._load_demangler() is None:
        pytest.skip("no C++ runtime (libstdc++) on this machine: names stay mangled")
    assert demangle(AITER) == (
        "void aiter::add_rmsnorm_quant_kernel<c10::BFloat16, 256, 8, false>(c10::BFloat16*)"
    )
    assert full_form(AITER).startswith("void aiter::add_rmsnorm_quant_kernel<")
    # Then folded as any signature: the kernel's own name, namespaces and arguments gone.
    assert name_forms(AITER).forms[-1] == "add_rmsnorm_quant_kernel<…>"
    assert fit_name(AITER, 30) == "add_rmsnorm_quant_kernel<…>"


@pytest.mark.parametrize(
    "name",
    [
        "aten::mm",
        "_Z",  # nothing after the prefix
        "_Zfoo bar",  # not the characters of a mangled name
        "_ZN5aiter" + "x" * 5000,  # longer than DEMANGLE_LIMIT: never handed over
        "_ZN3foo3barE\x00",
        "_ZNnotmangledatall",  # refused by the demangler
    ],
)
def test_what_is_not_a_mangled_name_stays_as_it_is(name):
    assert demangle(name) is None
    assert full_form(name) == name[: names_module.SCAN_LIMIT]


def test_without_a_cpp_runtime_names_stay_raw(monkeypatch):
    monkeypatch.setattr(names_module, "_load_demangler", lambda: None)
    monkeypatch.setattr(names_module, "_demangler_loaded", False)
    demangle.cache_clear()
    try:
        assert demangle(AITER) is None
        assert fit_name(AITER, 200) == AITER
    finally:
        demangle.cache_clear()
        names_module._demangler_loaded = False


def test_demangling_is_cached():
    calls = []
    real = names_module._load_demangler()
    if real is None:
        pytest.skip("no C++ runtime (libstdc++) on this machine")

    def counting(mangled: bytes) -> str | None:
        calls.append(mangled)
        return real(mangled)

    demangle.cache_clear()
    saved = names_module._demangler, names_module._demangler_loaded
    names_module._demangler, names_module._demangler_loaded = counting, True
    try:
        for _ in range(50):
            assert demangle(AITER) is not None
        assert len(calls) == 1
    finally:
        names_module._demangler, names_module._demangler_loaded = saved
        demangle.cache_clear()


# -- the corpus: the top 20 kernels of every trace read apart at 120 columns ----------------


def _summary_kernel_rows(session, document, width: int) -> list[str]:
    from rich.console import Console

    from kinetoscope.present.report_summary import kernels_section as kernels_table

    table = kernels_table(session, document)
    console = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    console.print(table)
    lines = console.file.getvalue().splitlines()
    rows = [line for line in lines if line.startswith("│")]
    return [row.split("│")[1].strip() for row in rows]


def _viewer_kernel_rows(session, width: int) -> tuple[list[str], list[str]]:
    """The kernels table (`k`) as the viewer draws it `width` cells wide: the full names and
    the drawn names of its 20 longest-running rows."""
    from kinetoscope.analysis.kernels import kernel_launchers
    from kinetoscope.tui.trace.kernels import kernel_model
    from kinetoscope.tui.widgets.table import column_widths, names_drawn

    trace = session.trace
    table = session.kernels
    top = kernel_launchers(
        table.launcher_row, session.links.gpu_rows, trace, session.gpu_groups, session.cpu_groups
    )
    model = kernel_model(trace, table, top, session.cpu_groups.name)
    widths = column_widths(model, width, model.default_sort)
    order = np.argsort(-table.total, kind="stable")[:20]
    column = model.columns[0]
    full = [column.cell(int(g)) for g in order]
    drawn_names = names_drawn(model, 0, widths[0])
    assert drawn_names is not None
    drawn = [drawn_names[name] for name in full]
    return full, drawn


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params())
def test_top_kernels_read_apart_at_120_columns(path):
    from kinetoscope.analysis import TraceSession
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import load

    trace = load(str(path), write_cache=False)
    session = TraceSession(trace)
    summary = build_summary(session)
    full = [k["name"] for k in summary["kernels"][:20]]
    drawn = _summary_kernel_rows(session, summary, 120)
    assert len(drawn) == len(full)
    _assert_apart(full, drawn, "summary")

    full_viewer, drawn_viewer = _viewer_kernel_rows(session, 119)
    _assert_apart(full_viewer, drawn_viewer, "viewer")


def _assert_apart(full: list[str], drawn: list[str], where: str) -> None:
    for i in range(len(full)):
        for j in range(i + 1, len(full)):
            if full[i] != full[j]:
                assert drawn[i] != drawn[j], (where, full[i][:200], full[j][:200], drawn[i])
