"""The package speaks Spanish when the notebook asks (``amp_lessons.set_language``):
the catalogue matches what the package wraps, every entry is translated, the compiled
.mo is the .po's, and a check, a widget and a plot really print and draw in Spanish,
then English again."""

import ast
import subprocess
import sys
from pathlib import Path

import polib
import pytest
from paths import ROOT

import amp_lessons
from amp_lessons import i18n

PO = i18n.catalogue_path("es")
MO = i18n.catalogue_path("es", ".mo")


@pytest.fixture
def spanish():
    amp_lessons.set_language("es")
    yield
    amp_lessons.set_language("en")


def _catalogue() -> polib.POFile:
    return polib.pofile(str(PO), wrapwidth=0)


@pytest.mark.parametrize("lang", ["fr", "ES", "", None, "english"])
def test_set_language_rejects_an_unknown_language(lang):
    with pytest.raises(ValueError, match=r"set_language accepts 'en' or 'es'"):
        amp_lessons.set_language(lang)
    assert amp_lessons.language() == "en"


def test_package_import_stays_light():
    code = (
        "import sys, amp_lessons; assert 'torch' not in sys.modules; "
        "amp_lessons.set_language('es'); assert amp_lessons.language() == 'es'; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_wrapped_string_is_in_the_catalogue_and_nothing_else():
    wrapped = i18n.wrapped_strings()
    msgids = {e.msgid for e in _catalogue() if not e.obsolete}
    missing = sorted(set(wrapped) - msgids)
    stale = sorted(msgids - set(wrapped))
    assert not missing, (
        f"wrapped but not in {PO.name} (run python -m "
        f"amp_lessons.i18n extract): {missing[:5]}"
    )
    assert not stale, f"in {PO.name} but wrapped nowhere any more: {stale[:5]}"


def test_every_entry_has_a_spanish_translation():
    untranslated = [
        e.msgid for e in _catalogue() if not e.msgstr.strip() or "fuzzy" in e.flags
    ]
    assert not untranslated, f"no Spanish (or fuzzy) for: {untranslated[:5]}"


def test_placeholders_are_the_same_in_both_languages():
    differ = [
        (e.msgid, e.msgstr)
        for e in _catalogue()
        if sorted(i18n.PLACEHOLDER.findall(e.msgid))
        != sorted(i18n.PLACEHOLDER.findall(e.msgstr))
    ]
    assert not differ, f"placeholders differ: {differ[:3]}"


def test_the_mo_is_compiled_from_the_po():
    compiled = {e.msgid: e.msgstr for e in polib.mofile(str(MO)) if e.msgid}
    source = {
        e.msgid: e.msgstr for e in _catalogue() if e.msgstr and "fuzzy" not in e.flags
    }
    assert compiled == source, (
        "the .mo is stale: run python -m amp_lessons.i18n compile"
    )


def test_the_catalogue_ships_with_the_package():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "locale/*/LC_MESSAGES/*.mo" in pyproject


def test_no_function_shadows_the_translation_function():
    # `_ = ...` or `for _, x in ...` in a function that also calls _("...") would
    # call a tuple item instead of gettext
    root = Path(i18n.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if "tooling" in path.parts:
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.Lambda):
                continue
            names = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == "_"]
            if any(isinstance(n.ctx, ast.Store) for n in names) and any(
                isinstance(n.ctx, ast.Load) for n in names
            ):
                found.append(f"{path.name}:{fn.lineno}")
    assert not found, f"_ rebound where it translates: {found}"


def test_english_is_the_source_text():
    assert amp_lessons.language() == "en"
    assert (
        i18n._("{failed} of {total} cases failed — see hints above")
        == "{failed} of {total} cases failed — see hints above"
    )


def test_a_check_prints_in_spanish_then_english_again(capsys):
    from amp_lessons.teaching.checks import check_quick_check

    def wrong():
        return {"autocast_scope": "a"}  # wraps backward too: wrong

    amp_lessons.set_language("es")
    try:
        with pytest.raises(
            AssertionError, match="el caso falló — vea la pista de arriba"
        ):
            check_quick_check(wrong, "autocast_scope")
    finally:
        amp_lessons.set_language("en")
    out = capsys.readouterr().out
    assert "  caso " in out and "resultado" in out and "FALLO" in out
    assert "pista: (a) El paso completo" in out
    assert "(no se muestra)" in out
    with pytest.raises(AssertionError, match="the case failed — see the hint above"):
        check_quick_check(wrong, "autocast_scope")
    out = capsys.readouterr().out
    assert "hint: (a) The whole step" in out and "FAIL" in out and "pista" not in out


def test_not_attempted_in_spanish(spanish, capsys):
    from amp_lessons.teaching.checks import check_decode_fp16

    def decode_fp16(bits):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="sin intentar: decode_fp16"):
        check_decode_fp16(decode_fp16)


def test_a_passing_check_in_spanish(spanish, capsys):
    from amp_lessons.teaching.checks import check_quick_check
    from amp_lessons.teaching.quiz import QUESTIONS

    right = next(k for k, (_, why) in QUESTIONS["why_scale"][1].items() if not why)
    check_quick_check(lambda: {"why_scale": right}, "why_scale")
    out = capsys.readouterr().out  # one case, said in the singular
    assert "[why_scale]: 1 caso\n" in out and out.endswith("\npasó el caso\n")


def test_a_widget_labels_itself_in_spanish(spanish):
    from amp_lessons.teaching.widgets import fp16_range_explorer

    w = fp16_range_explorer(1e-4)
    assert (w.sign.description, w.text.description) == ("signo", "escriba x")
    assert w.fmt.description == "recta numérica"
    assert "valor guardado" in w.table.value and "error relativo" in w.table.value


def test_a_plot_is_titled_in_spanish_then_english(no_pyplot_figures):
    from amp_lessons.teaching.plots import plot_format_ranges, plot_scale_trajectory

    amp_lessons.set_language("es")
    try:
        fig = plot_format_ranges()
        ax = fig.axes[0]
        assert ax.get_title().startswith("Rango positivo de cada formato")
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [
            "subnormal",
            "normal",
        ]
        fig = plot_scale_trajectory(
            [2.0**16] * 2 + [2.0**15], skipped=[False, True, False]
        )
        ax = fig.axes[0]
        assert ax.get_xlabel() == "paso del optimizador"
        assert "1 omitidos" in ax.get_title()
        assert any(
            t.get_text().startswith("paso omitido") for t in ax.get_legend().get_texts()
        )
    finally:
        amp_lessons.set_language("en")
    fig = plot_format_ranges()
    assert fig.axes[0].get_title().startswith("Positive range of each format")


def test_numbers_follow_the_editions_convention(spanish):
    """No comma thousands separator in Spanish (a reader takes 131,072 for 131 point
    072); the decimal point stays, as in the code."""
    assert i18n.number(131072) == "131072" and i18n.number(1234.5, ".2f") == "1234.50"
    amp_lessons.set_language("en")
    assert i18n.number(131072) == "131,072" and i18n.number(1234.5, ".2f") == "1,234.50"


def test_the_rank_memory_table_in_spanish(spanish):
    """Lesson 10's table: its header, its «cabe» column, sí/no and its numbers."""
    from amp_lessons.teaching import rank_memory

    rows = rank_memory.paper_table(rank_memory.llama_7b_shapes())
    lines = rank_memory.format_table(rows, 1e9, budget=80).splitlines()
    assert lines[0].split() == [
        "modo", "precisión", "ranks", "rank", "parámetros", "gradientes",
        "optimizador", "total", "cabe",
    ]  # fmt: skip
    assert {line.split()[-1] for line in lines[1:]} == {"sí", "no"}
    exact = rank_memory.format_table(rows[:1]).splitlines()[1]
    assert "," not in exact and str(rows[0].total) in exact.split()
    amp_lessons.set_language("en")
    english = rank_memory.format_table(rows[:1]).splitlines()
    assert english[0].split()[0] == "mode" and f"{rows[0].total:,}" in english[1]


def test_the_estimate_panel_and_breakdowns_speak_spanish(spanish, no_pyplot_figures):
    """Lesson 06's GPU panel (its labels, message, axis and legend) and the legend
    of plot_breakdowns: regime names are code in English, words in Spanish."""
    from amp_lessons.measure import published
    from amp_lessons.teaching.estimate_widget import estimate_explorer
    from amp_lessons.teaching.plots.estimate import plot_breakdowns

    panel = estimate_explorer()
    assert [panel.model.description, panel.width.description] == ["modelo", "ancho"]
    assert "Estimado, no medido" in panel.message.value
    assert "dominated" not in panel.message.value
    fig = panel.figure()
    ax = fig.axes[0]
    assert ax.get_xlabel() == "tiempo estimado por paso (ms)"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["cómputo", "memoria", "sobrecoste"]
    fig = plot_breakdowns(published.load_fit())
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["cómputo", "memoria", "sobrecoste"]


def test_the_memory_breakdown_table_in_spanish(spanish):
    """Lesson 06's table of what training holds: its columns are words, not the
    attribute names (``optimizer_state``), in the reader's language."""
    import torch

    from amp_lessons.core import memory

    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    table = memory.format_breakdowns(
        {2: memory.compare_precisions(mlp, torch.randn(2, 8), (None,), "adam")}
    )
    header, row = table.splitlines()
    assert "estado del optimizador" in header and "copias de pesos" in header
    assert "optimizer_state" not in header and row.startswith("lote    2 fp32")
    amp_lessons.set_language("en")
    english = memory.format_breakdowns(
        {2: memory.compare_precisions(mlp, torch.randn(2, 8), (None,), "adam")}
    )
    assert "optimizer state" in english and english.splitlines()[1].startswith("batch")


def test_the_estimate_panels_picture_differs_by_language(no_pyplot_figures):
    """The figure that was byte-identical in both editions of lesson 06 (its site
    page failed `make site`'s chrome check by the shared file name) was the GPU
    panel's, drawn with English words: each edition now draws its own."""
    from amp_lessons.teaching.estimate_widget import estimate_explorer

    english = estimate_explorer().image.value
    amp_lessons.set_language("es")
    try:
        spanish = estimate_explorer().image.value
    finally:
        amp_lessons.set_language("en")
    assert english and spanish and english != spanish
