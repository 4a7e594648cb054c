"""The widgets, headless: move each control, check the picture changed and the
numbers shown are the ones torch computes (casts, finfo, optimizer state)."""

import math
import struct

import pytest
import torch

from amp_lessons.core.formats import FORMATS, decompose
from amp_lessons.core.memory import activation_bytes
from amp_lessons.core.models import MLP
from amp_lessons.teaching import widgets as W
from amp_lessons.teaching.plots import plot_speed_memory
from amp_lessons.teaching.underflow import cast_outcome

# Generous: the goal is 300 ms on an idle 2-core CPU. Checked on the redraw's CPU
# time, which a busy machine (tests run side by side) does not stretch.
MAX_REDRAW_MS = 1500
DTYPE_FORMATS = [n for n, f in FORMATS.items() if f.dtype is not None]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def torch_stored(value: float, fmt: str) -> float:
    stored = torch.tensor(value, dtype=torch.float32).to(FORMATS[fmt].dtype)
    return stored.float().item()


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


pytestmark = pytest.mark.usefixtures("no_pyplot_figures")  # see conftest.py


# ---- widget 1: range explorer ------------------------------------------------------


def check_rows(w):
    """Every row shown is what decompose says, and what torch's cast stores."""
    assert [r["format"] for r in w.rows] == list(W.EXPLORER_FORMATS)
    for row in w.rows:
        d = decompose(w.value, row["format"])
        assert (row["sign"], row["exponent"], row["mantissa"], row["kind"]) == (
            d.sign,
            d.exponent,
            d.mantissa,
            d.kind,
        )
        assert same(row["stored"], d.value)
        if row["format"] in DTYPE_FORMATS:
            assert same(row["stored"], torch_stored(w.value, row["format"]))
        if math.isfinite(w.value) and w.value and math.isfinite(row["stored"]):
            assert row["rel_error"] == abs(row["stored"] - w.value) / abs(w.value)
        assert f"{d.exponent}</span>" in w.table_html


@pytest.fixture(scope="module")
def explorer():
    return W.fp16_range_explorer(1e-4)


def test_range_explorer_slider_moves_text_table_and_picture(explorer):
    w = explorer
    before = w.image.value
    w.slider.value = 10**-7.3  # as a student drags: rounded to 4 digits
    assert w.value == 5.012e-8
    assert w.text.value == "5.012e-08" and float(w.text.value) == w.value
    assert w.image.value != before
    check_rows(w)
    fp16 = w.rows[W.EXPLORER_FORMATS.index("fp16")]
    assert fp16["kind"] == "subnormal"
    assert "subnormal" in w.table_html
    assert png_size(w.image.value)[0] <= 900  # fits a notebook cell unscaled
    assert w.last_redraw_cpu_ms < MAX_REDRAW_MS


def test_range_explorer_redraws_leave_no_trace():
    """Redraws paint the marker over a cached background: moving away and back must
    give the picture a fresh explorer draws, with nothing left from the old marker."""
    fresh = W.RangeExplorer(3e-6).image.value
    w = W.RangeExplorer(1e-4)
    w.slider.value = 3e-6
    assert w.image.value == fresh
    w.text.value = "1e-12"  # off the usual axis: a wider number line
    w.text.value = "3e-6"
    assert w.image.value == fresh


def test_range_explorer_typed_values_sync_the_slider(explorer):
    w = explorer
    w.text.value = "2^-24"
    assert w.value == 2.0**-24 and w.slider.value == 2.0**-24 and w.sign.value == 1
    check_rows(w)
    assert w.rows[W.EXPLORER_FORMATS.index("fp16")]["stored"] == 2.0**-24
    w.text.value = "-65520"  # rounds up past 65504: inf in fp16, finite in bf16
    assert w.sign.value == -1 and w.slider.value == 65520
    check_rows(w)
    assert w.rows[W.EXPLORER_FORMATS.index("fp16")]["stored"] == -math.inf
    assert w.text.value == "-65520"  # left as typed
    w.text.value = "1.23456789e-5"
    assert w.value == 1.23456789e-5 and w.text.value == "1.23456789e-5"
    check_rows(w)


def test_range_explorer_sign_and_format_redraw(explorer):
    w = explorer
    w.text.value = "0.1"
    first = w.image.value
    w.sign.value = -1
    assert w.value == -0.1 and w.text.value == "-0.1"
    assert all(r["sign"] == 1 for r in w.rows)
    assert w.image.value != first
    second = w.image.value
    w.fmt.value = "fp8_e4m3"
    assert w.image.value != second
    assert "background" in w.table_html.split("fp8_e4m3")[0].rsplit("<tr", 1)[1]
    w.fmt.value = "fp16"


def test_range_explorer_invalid_and_edge_input(explorer):
    w = explorer
    w.text.value = "1e-3"
    shown, picture = w.value, w.image.value
    w.text.value = "one thousand"
    assert "could not read 'one thousand' as a number" in w.message.value
    assert w.value == shown and w.image.value == picture  # nothing else moved
    w.text.value = "1e-12"  # below the slider: the slider waits at its end
    assert w.value == 1e-12 and w.slider.value == pytest.approx(1e-9)
    assert "beyond the slider" in w.message.value
    assert "could not read" not in w.message.value
    assert w.rows[W.EXPLORER_FORMATS.index("fp16")]["zone"] == "flushed to 0"
    for text in ("0", "inf", "nan", "-0"):
        w.text.value = text
        check_rows(w)
    assert w.sign.value == -1  # -0 has its sign bit set
    assert W.parse_value(" \u22122^3 ") == -8.0
    with pytest.raises(ValueError, match="type e.g. 1e-4"):
        W.parse_value("2^")


# ---- widget 2: gradient histogram --------------------------------------------------


def test_histogram_explorer_scale_slider_updates_the_real_cast(grads):
    w = W.gradient_histogram_explorer(grads)
    assert w.outcome == cast_outcome(grads, 1.0, "fp16")
    xlim = w.xlim
    pictures = {w.image.value}
    for k in (8, 16, 30):
        w.slider.value = 2.0**k
        scaled = grads[grads != 0] * 2.0**k
        half = scaled.half()
        assert w.outcome.zero == (half == 0).sum().item() / half.numel()
        assert w.outcome.overflow == torch.isinf(half).sum().item() / half.numel()
        assert f"{w.outcome.zero:.1%}" in w.stats.value
        assert w.xlim == xlim  # the axis stays, the bars move
        assert w.last_redraw_cpu_ms < MAX_REDRAW_MS
        pictures.add(w.image.value)
    assert len(pictures) == 4
    assert w.outcome.overflow > 0  # 2^30 pushes the largest past 65504
    w.fmt.value = "bf16"  # fp32's range: nothing flushes, nothing overflows
    assert w.outcome.zero == 0 and w.outcome.overflow == 0
    assert "<b>bf16</b>" in w.stats.value


def test_histogram_explorer_redraws_leave_no_trace(grads):
    fresh = W.GradientHistogramExplorer(grads, scale=2.0**16).image.value
    w = W.GradientHistogramExplorer(grads)
    w.slider.value = 2.0**16
    assert w.image.value == fresh  # the old bars and title are gone
    assert png_size(fresh) == (860, 350)


def test_histogram_explorer_refuses_bad_input(grads):
    with pytest.raises(ValueError, match="no torch storage dtype"):
        W.gradient_histogram_explorer(grads, "tf32")
    with pytest.raises(ValueError, match="power of two"):
        W.GradientHistogramExplorer(grads, scale=3.0)
    with pytest.raises(ValueError, match="inf or nan"):
        W.gradient_histogram_explorer(torch.tensor([1.0, math.nan]))


# ---- widget 3: speed and memory ----------------------------------------------------


@pytest.fixture(scope="module")
def panel():
    return W.speed_memory_explorer("cpu")


def test_speed_panel_memory_is_measured_exactly(panel):
    w = panel
    w.batch.value = 8
    rows = {r["precision"]: r for r in w.results}
    assert set(rows) == {"fp32", "fp16", "bf16"}
    width = w.width.value
    model = MLP((width,) * 4)
    weights = sum(p.nbytes for p in model.parameters())
    x = torch.randn(8, width)
    # Adam's state after a real step: exp_avg, exp_avg_sq, step per parameter
    opt = torch.optim.Adam(model.parameters())
    model(x).sum().backward()
    opt.step()
    state = sum(t.nbytes for s in opt.state.values() for t in s.values())
    for name, dtype in (
        ("fp32", None),
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
    ):
        m = rows[name]["memory"]
        assert m["weights"] == m["gradients"] == weights
        assert m["optimizer_state"] == state
        assert m["activations"] + m["weight_copies"] == activation_bytes(
            model, x, dtype
        )
        assert (m["weight_copies"] > 0) == (dtype is not None)
        assert 1 <= len(rows[name]["times_ms"]) <= w.iters
        assert rows[name]["step_ms"] > 0
    assert "fp32" in w.stats.value and "weight copies" in w.stats.value
    # the picture's words are HTML: its title and the key of every part it drew
    assert f"Linear({width}), batch 8" in w.caption.value
    assert "autocast weight copies" in w.legend.value
    assert "median of" in w.legend.value


def test_speed_panel_table_shows_what_was_measured():
    """The panel's table is the measured rows, and dragging the batch slider moves
    only what the batch changes: weights stay, activations scale with it."""
    import re

    from amp_lessons.core.memory import byte_unit, memory_breakdown

    w = W.speed_memory_explorer("cpu")
    first = w.results
    old, new = w.batch.value, w.batch.options[-1]
    w.batch.value = new  # as if the slider were dragged to its end
    for before, after in zip(first, w.results, strict=True):
        assert after["batch"] == new
        dtype = (
            None
            if after["precision"] == "fp32"
            else {"bf16": torch.bfloat16, "fp16": torch.float16}[after["precision"]]
        )
        model = MLP((after["width"],) * 4)
        direct = memory_breakdown(
            model, torch.randn(new, after["width"]), dtype, after["optimizer"]
        ).as_dict()
        assert after["memory"] == direct  # the panel's numbers: a direct count
        assert after["memory"]["weights"] == before["memory"]["weights"]
        assert (
            after["memory"]["activations"] * old
            == before["memory"]["activations"] * new
        )  # linear in the batch
    unit, size = byte_unit(max(r["memory"]["total"] for r in w.results))
    assert f"memory in {unit}," in w.stats.value
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", w.stats.value)
    shown = [cells[i : i + 9] for i in range(0, len(cells), 9)]
    assert [row[0] for row in shown] == [r["precision"] for r in w.results]
    for row, result in zip(shown, w.results, strict=True):
        assert row[-1] == f"{result['memory']['total'] / size:.3g}"


def test_speed_panel_controls_redraw(panel):
    w = panel
    picture = w.image.value
    w.width.value = 32
    assert {r["width"] for r in w.results} == {32}
    assert w.image.value != picture
    assert w.last_redraw_cpu_ms < MAX_REDRAW_MS * 2  # it trains 3 models
    w.optimizer.value = "sgd"
    assert all(r["memory"]["optimizer_state"] == 0 for r in w.results)
    assert "optimizer state" not in w.legend.value  # no state: not in the key
    w.precision_boxes["fp16"].value = False
    assert [r["precision"] for r in w.results] == ["fp32", "bf16"]
    w.time_box.value = False
    assert all(r["step_ms"] is None for r in w.results)
    assert "not timed" in [
        t.get_text() for t in plot_speed_memory(w.results).axes[0].texts
    ]
    for box in w.precision_boxes.values():
        box.value = False
    assert "Tick at least one precision" in w.message.value
    assert "tf32" in w.unavailable  # no TF32 on a CPU: not offered


@pytest.mark.gpu
def test_speed_panel_on_cuda_measures_the_allocator_peak():
    w = W.speed_memory_explorer("cuda")
    assert "tf32" in w.precision_boxes
    for r in w.results:
        m = r["memory"]
        # the peak holds at least the fp32 weights, gradients and Adam state
        assert (
            r["peak_mem_bytes"] >= m["weights"] + m["gradients"] + m["optimizer_state"]
        )
        assert r["step_ms"] > 0 and len(r["times_ms"]) >= 1
    picture = w.image.value
    w.batch.value = w.batch.options[-1]
    assert w.image.value != picture


def test_a_small_share_of_gradients_never_reads_as_none():
    # a learner's walk: at 2^20 the widget read "0.0% overflow" where the lesson's
    # table printed 0.02%, and one overflow is enough to skip a step
    from amp_lessons.teaching.widgets.histogram import share_text

    assert [share_text(s) for s in (0.0, 0.0002, 0.00002, 0.0312, 1.0)] == [
        "0.0%",
        "0.02%",
        "<0.01%",
        "3.1%",
        "100.0%",
    ]


def test_the_loss_scale_labels_are_exact(grads):
    from amp_lessons.teaching.widgets.histogram import GradientHistogramExplorer

    labels = [label for label, _ in GradientHistogramExplorer(grads).slider.options]
    assert "2^20 = 1048576" in labels and "2^32 = 4294967296" in labels
    assert "2^-4 = 0.0625" in labels


def test_spanish_widget_labels_are_never_cut(grads):
    """ipywidgets gives a description 80px and cuts what is longer with an ellipsis
    ("escala de …", "recta num…" in a walk): a label longer than English's shortest
    takes its own width. The histogram's title fits the figure laid out for English."""
    from amp_lessons import i18n
    from amp_lessons.i18n import _

    i18n.set_language("es")
    try:
        made = [W.fp16_range_explorer(1e-4), W.gradient_histogram_explorer(grads)]
        title = _(
            "{nonzero} gradients x {scale} cast to {fmt}: {zero} flush to 0 | "
            "{subnormal} subnormal | {normal} normal | {overflow} overflow"
        )
    finally:
        i18n.set_language("en")
    described = [
        child
        for widget in made
        for box in widget.children
        for child in getattr(box, "children", (box,))
        if getattr(child, "description", "")
    ]
    long = [w for w in described if len(w.description) > 8]
    assert {w.description for w in long} >= {"escala de la pérdida", "recta numérica"}
    for widget in long:
        assert widget.style.description_width == "initial", widget.description
    english = (
        "{nonzero} gradients x {scale} cast to {fmt}: {zero} flush to 0 | "
        "{subnormal} subnormal | {normal} normal | {overflow} overflow"
    )
    assert len(title) <= len(english)
