"""Widget 2 (notebook 02): real gradients against a format's range, with a
loss-scale slider."""

from __future__ import annotations

import math

import ipywidgets as widgets
import torch

from amp_lessons.core.formats import FORMATS, resolve_format
from amp_lessons.i18n import _, number
from amp_lessons.teaching.plots._render import ZONE_COLORS, _log2
from amp_lessons.teaching.plots.gradients import _Histogram, _nonzero_float
from amp_lessons.teaching.underflow import CastOutcome, cast_outcome, log2_histogram
from amp_lessons.teaching.widgets.panel import Panel

SCALE_EXPONENTS = range(-4, 33)  # 2^-4 .. 2^32
HISTOGRAM_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


class GradientHistogramExplorer(Panel):
    """Real gradients against a format's range, with a loss-scale slider.

    Controls: ``slider`` (SelectionSlider of powers of two, 2^-4 to 2^32; its
    ``value`` is the scale as a float), ``fmt`` (Dropdown: fp16, bf16, fp8s).
    Outputs: ``stats`` (HTML of the fractions), ``image`` (PNG of
    ``plot_gradient_histogram``). ``outcome`` is ``underflow.cast_outcome`` at the
    current scale and format: the real cast's counts, not an estimate. The x axis
    stays still while the scale moves the bars across it.

    Example:
        >>> w = gradient_histogram_explorer(collect_gradients(backward_demo()))
        >>> w.slider.value = 2.0**16
        >>> w.outcome.zero
        0.0
    """

    def __init__(
        self, grads: torch.Tensor, fmt: str = "fp16", scale: float = 1.0
    ) -> None:
        cast_outcome(grads, 1.0, fmt)  # checks grads and fmt before building anything
        if fmt not in HISTOGRAM_FORMATS:
            raise ValueError(
                f"fmt must be one of {', '.join(HISTOGRAM_FORMATS)}, got {fmt!r}"
            )
        self.grads = grads.detach().flatten().float().cpu()
        # exact: 2^20 = 1048576 (":g" printed 1.04858e+06)
        options = [(f"2^{k} = {2.0**k:.10g}", 2.0**k) for k in SCALE_EXPONENTS]
        if scale not in [v for _label, v in options]:
            raise ValueError(
                f"scale must be a power of two from 2^"
                f"{SCALE_EXPONENTS[0]} to 2^{SCALE_EXPONENTS[-1]}, got "
                f"{scale!r}"
            )
        self.slider = widgets.SelectionSlider(
            options=options,
            value=scale,
            description=_("loss scale"),
            continuous_update=False,
            # the label's own width: the default 80px cut "escala de la pérdida"
            style={"description_width": "initial"},
            layout=widgets.Layout(width="560px"),
        )
        self.fmt = widgets.Dropdown(
            options=list(HISTOGRAM_FORMATS),
            value=fmt,
            description=_("format"),
            style={"description_width": "initial"},
            layout=widgets.Layout(width="200px"),
        )
        self.stats = widgets.HTML()
        self.outcome: CastOutcome | None = None
        # a power-of-two scale shifts the binades and keeps their counts: one y axis
        counts = log2_histogram(self.grads).counts
        self._ymax = 1.1 * max(1, counts.max().item() if counts.numel() else 1)
        self._plots: dict[str, _Histogram] = {}
        super().__init__([widgets.HBox([self.slider, self.fmt]), self.stats])
        self.xlim = self._fixed_xlim()
        self.slider.observe(lambda _: self.redraw(), "value")
        self.fmt.observe(self._on_fmt, "value")
        self.redraw()

    def _fixed_xlim(self) -> tuple[float, float]:
        # every scale on the slider keeps its bars on the axis
        g = _nonzero_float(self.grads).abs()
        f = resolve_format(self.fmt.value)
        lo, hi = _log2(f.min_subnormal) - 4, _log2(f.max) + 4
        if g.numel():
            lo = min(lo, math.floor(g.min().log2().item()) + SCALE_EXPONENTS[0] - 1)
            hi = max(hi, math.floor(g.max().log2().item()) + SCALE_EXPONENTS[-1] + 2)
        return lo, hi

    def _on_fmt(self, _change) -> None:
        self.xlim = self._fixed_xlim()
        self.redraw()

    def _draw(self) -> None:
        scale, fmt = self.slider.value, self.fmt.value
        if fmt not in self._plots:
            self._plots[fmt] = _Histogram(FORMATS[fmt], self.xlim, self._ymax)
        self.outcome = o = self._plots[fmt].show(self.grads, scale)
        cells = [
            (_("flush to 0"), o.zero, "zero"),
            (_("subnormal"), o.subnormal, "subnormal"),
            (_("normal"), o.normal, "normal"),
            (_("overflow"), o.overflow, "overflow"),
        ]
        self.stats.value = _(
            "<b>{nonzero}</b> nonzero gradients x {scale} cast to <b>{fmt}</b>: "
        ).format(
            nonzero=number(o.nonzero), scale=f"{scale:.10g}", fmt=fmt
        ) + " &nbsp; ".join(
            f'<span style="color:{ZONE_COLORS[z]}"><b>{share_text(p)}</b></span> {name}'
            for name, p, z in cells
        )
        self.image.value = self._plots[fmt].blit.png()


def share_text(share: float) -> str:
    """A share of the gradients as a percent that reads 0.0% only when it is 0: one
    overflow among thousands skips the step, so 0.02% must not show as none.

    Example: ``share_text(0.0002) == "0.02%"``, ``share_text(0.5) == "50.0%"``.
    """
    if share == 0 or share >= 0.001:
        return f"{share:.1%}"
    return f"{share:.2%}" if share >= 0.0001 else "<0.01%"


def gradient_histogram_explorer(
    grads: torch.Tensor, fmt: str = "fp16"
) -> GradientHistogramExplorer:
    """The gradient histogram of notebook 02 with a loss-scale slider.

    See ``GradientHistogramExplorer``.

    Example:
        >>> w = gradient_histogram_explorer(collect_gradients(backward_demo()))
        >>> round(w.outcome.zero, 3)  # seed 0, scale 1: a third flush to 0
        0.338
    """
    return GradientHistogramExplorer(grads, fmt)
