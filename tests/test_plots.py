"""The course's pictures, headless: each one shows what torch computes (casts,
finfo), and none is left in pyplot's figure list."""

import math

import matplotlib
import pytest
import torch

from amp_lessons.core.formats import FORMATS
from amp_lessons.measure.speed_memory import measure_speed_memory
from amp_lessons.teaching import plots as P

pytestmark = pytest.mark.usefixtures("no_pyplot_figures")  # see conftest.py


# ---- static plots -----------------------------------------------------------------


@pytest.mark.parametrize(
    "value, zone",
    [
        (1e-9, "flushed to 0"),
        (1e-6, "subnormal"),
        (1e-4, "normal"),
        (7e4, "overflow: inf"),
        (0.0, "zero"),
    ],
)
def test_number_line_names_the_zone_the_fp16_cast_gives(value, zone):
    stored = torch.tensor(value, dtype=torch.float32).half().item()
    expected = (
        "zero"
        if value == 0
        else "flushed to 0"
        if stored == 0
        else "overflow: inf"
        if math.isinf(stored)
        else "subnormal"
        if abs(stored) < torch.finfo(torch.float16).tiny
        else "normal"
    )
    assert zone == expected  # the parametrization itself is checked against torch
    fig = P.plot_number_line(value, "fp16")
    ax = fig.axes[0]
    assert ax.get_title().endswith(f"is {zone}")
    assert ax.get_xlabel().startswith("log2 |x|")
    # the marker sits at log2|value| (or the left edge for 0)
    marker = [line for line in ax.lines if line.get_marker() == "v"][0]
    x = marker.get_xdata()[0]
    assert x == (ax.get_xlim()[0] if value == 0 else math.log2(value))


def test_number_line_zone_edges_are_the_formats_limits():
    for name in ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2"):
        fig = P.plot_number_line(1.0, name)
        edges = sorted(
            {
                line.get_xdata()[0]
                for line in fig.axes[0].lines
                if line.get_linestyle() == ":"
            }
        )
        info = torch.finfo(FORMATS[name].dtype)
        assert edges == [
            math.log2(info.smallest_normal * info.eps),
            math.log2(info.smallest_normal),
            math.log2(info.max),
        ]
    texts = " ".join(
        t.get_text() for t in P.plot_number_line(1e3, "fp8_e4m3").axes[0].texts
    )
    assert "saturated to 448" in texts


def test_format_ranges_bars_match_torch_finfo():
    names = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
    ax = P.plot_format_ranges(names).axes[0]
    normal = [
        p
        for p in ax.patches
        if p.get_facecolor()[:3] == matplotlib.colors.to_rgb(P.ZONE_COLORS["normal"])
    ]
    assert len(normal) == len(names)
    for bar, name in zip(normal, names, strict=True):
        info = torch.finfo(FORMATS[name].dtype)
        assert bar.get_x() == math.log2(info.smallest_normal)
        assert bar.get_x() + bar.get_width() == pytest.approx(math.log2(info.max))
    assert ax.get_xlabel().startswith("log2 |x|")
    with pytest.raises(ValueError, match="unknown format"):
        P.plot_format_ranges(["fp12"])


def test_gradient_histogram_counts_and_fractions_are_the_casts(grads):
    scale = 2.0**10
    fig = P.plot_gradient_histogram(grads, scale, "fp16")
    ax = fig.axes[0]
    (stairs,) = [p for p in ax.patches if type(p).__name__ == "StepPatch"]
    counts, edges = stairs.get_data()[:2]
    scaled = grads[grads != 0].abs() * scale
    binade = torch.floor(torch.log2(scaled)).long()
    direct = torch.bincount(binade - binade.min())
    assert counts.tolist() == direct.tolist()
    assert edges[0] == binade.min().item()
    # title: each zone's share, from torch's own cast
    half = (grads[grads != 0] * scale).half()
    zero = (half == 0).sum().item() / half.numel()
    inf = torch.isinf(half).sum().item() / half.numel()
    assert f": {zero:.1%} flush to 0 |" in ax.get_title()
    assert f"| {inf:.1%} overflow" in ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[1] == "subnormal (2^-24 to 2^-14)"
    assert ax.get_xlabel().startswith("log2 |gradient x scale|")
    assert ax.get_ylabel() == "gradients per binade"


def test_scale_trajectory_marks_skipped_steps():
    scales = [2.0**16] * 3 + [2.0**15] * 2
    for skipped in ([False, False, True, False, False], [3]):
        ax = P.plot_scale_trajectory(scales, skipped).axes[0]
        (marks,) = [line for line in ax.lines if line.get_marker() == "x"]
        assert list(marks.get_xdata()) == [3]
        assert list(marks.get_ydata()) == [2.0**16]
        assert ax.get_yscale() == "log"
        assert ax.get_ylabel().startswith("loss scale")
    with pytest.raises(ValueError, match="3 flags for 5 scales"):
        P.plot_scale_trajectory(scales, [True, False, False])
    with pytest.raises(ValueError, match="not a step number"):
        P.plot_scale_trajectory(scales, [0])
    with pytest.raises(ValueError, match="positive and finite"):
        P.plot_scale_trajectory([1.0, math.inf])


# ---- speed and memory --------------------------------------------------------------


def test_plot_speed_memory_bars_are_the_rows():
    rows = measure_speed_memory(16, 4, ("fp32", "bf16"), iters=2)
    fig = P.plot_speed_memory(rows)
    t_ax, m_ax = fig.axes
    time_bars = [p.get_width() for p in t_ax.patches]
    assert time_bars == [r["step_ms"] for r in rows]
    fp32_parts = [
        p.get_width() for p in m_ax.patches if p.get_y() < 0.5 and p.get_width()
    ]
    expected = [
        v / 2**10 for k, v in rows[0]["memory"].items() if k in P.MEMORY_PARTS and v
    ]
    assert fp32_parts == pytest.approx(expected)
    assert m_ax.get_xlabel() == "memory (KiB)"
    assert t_ax.get_xlabel().startswith("step time, ms")
    # a recorded bench report draws too: parameters + bytes saved for backward
    report = {
        "results": [
            {
                "config": "mlp",
                "precision": "fp32",
                "step_ms": 2.0,
                "times_ms": [2.0],
                "peak_mem_bytes": 3 * 2**20,
                "activation_bytes": 2**20,
                "param_bytes": 2**20,
            }
        ]
    }
    fig = P.plot_speed_memory(report)
    assert [p.get_width() for p in fig.axes[1].patches] == [1.0, 1.0]
    with pytest.raises(ValueError, match="no results"):
        P.plot_speed_memory([])


def test_speed_memory_words_can_be_left_to_the_caller():
    from amp_lessons.teaching.plots import speed_memory as S

    rows = measure_speed_memory(16, 4, ("fp32", "bf16"), iters=2)
    full = P.plot_speed_memory(rows)
    assert full.legends and full.axes[0].get_title(loc="left").startswith("MLP 3 x")
    fig, pairs = S._speed_layout([2], words=False)
    words = S._draw_speed_memory(fig, pairs, rows, words=False)
    ((t_ax, m_ax),) = pairs
    assert not fig.legends and t_ax.get_title(loc="left") == ""
    assert t_ax.get_xlabel() == "step time (ms)"
    # what the figure leaves out comes back, for the panel's HTML
    assert words["titles"] == [full.axes[0].get_title(loc="left")]
    assert words["notes"] == ["bar: median of 2 steps; dots: each step"]
    assert words["parts"] == [
        k for k in P.MEMORY_PARTS if any(r["memory"][k] for r in rows)
    ]  # bf16's weight copies included
    key = S.legend_html(words["parts"], words["notes"][0])
    labels = [t.get_text() for t in full.legends[0].get_texts()]
    assert [label for label in labels if label in key] == labels
    assert "bar: median of 2 steps" in key
    # the same bars either way
    assert [p.get_width() for p in t_ax.patches] == [
        p.get_width() for p in full.axes[0].patches
    ]
