"""The GPU estimate panel of notebook 06: pick a GPU and a model's size, see the
predicted step time per precision and what dominates it.

Nothing runs on a GPU: ``amp_lessons.measure.estimate`` traces the model on the meta
device and prices it from the GPU's datasheet.
"""

from __future__ import annotations

from dataclasses import replace

import ipywidgets as widgets

from amp_lessons.i18n import _
from amp_lessons.measure.estimate import GPUS, Estimate, price, step_kernels
from amp_lessons.measure.gpus import PRECISIONS
from amp_lessons.measure.model_zoo import build
from amp_lessons.measure.trace import Trace, trace_step
from amp_lessons.teaching.plots._render import _figure, figure_png
from amp_lessons.teaching.plots.estimate import REGIME_COLORS, REGIME_LABELS


class EstimateExplorer(widgets.VBox):
    """Dropdowns for the GPU and the model family, sliders for width, depth and
    batch; a bar per precision split into compute, memory and overhead."""

    def __init__(self, gpu: str = "A100-SXM4-80GB"):
        def width(px):
            return widgets.Layout(width=f"{px}px")

        self.gpu = widgets.Dropdown(
            options=list(GPUS), value=gpu, description="GPU", layout=width(330)
        )
        self.model = widgets.Dropdown(
            options=["transformer", "gpt", "mlp"],
            value="transformer",
            description=_("model"),
            layout=width(250),
        )
        self.width = widgets.SelectionSlider(
            options=[256, 512, 768, 1024, 2048, 4096],
            value=1024,
            description=_("width"),
            continuous_update=False,
            layout=width(285),
        )
        self.layers = widgets.IntSlider(
            value=12,
            min=1,
            max=48,
            description=_("depth"),
            continuous_update=False,
            layout=width(285),
        )
        self.batch = widgets.SelectionSlider(
            options=[1, 2, 4, 8, 16, 32, 64, 128, 256],
            value=32,
            description=_("batch"),
            continuous_update=False,
            layout=width(285),
        )
        self.image = widgets.Image(
            format="png", layout=widgets.Layout(max_width="100%", height="auto")
        )
        self.message = widgets.HTML()
        self.estimates: list[Estimate] = []
        self._traces: dict[tuple, tuple] = {}
        for w in (self.gpu, self.model, self.width, self.layers, self.batch):
            w.observe(lambda _change: self.update(), names="value")
        super().__init__(
            [
                widgets.HBox([self.gpu, self.model]),
                widgets.HBox([self.width, self.layers, self.batch]),
                self.message,
                self.image,
            ],
            layout=widgets.Layout(max_width="900px"),
        )
        self.update()

    def sizes(self) -> dict:
        sizes = {
            "layers": self.layers.value,
            "width": self.width.value,
            "batch": self.batch.value,
        }
        if self.model.value != "mlp":
            sizes["seq"] = 512
        return sizes

    def estimate(self, precision: str) -> Estimate:
        """One precision's estimate, tracing the model only when its size changed:
        tf32 prices fp32's trace, fp16 bf16's (the same kernels, other tensor-core
        rates), so a new GPU only re-prices."""
        traced_as = {"tf32": "fp32", "fp16": "bf16"}.get(precision, precision)
        key = (self.model.value, *self.sizes().values(), traced_as)
        if key not in self._traces:
            w = build(self.model.value, **self.sizes())
            self._traces[key] = (trace_step(w.model, w.inputs, traced_as, w.loss_fn), w)
        trace, w = self._traces[key]
        # fp32 attention runs on CUDA cores with TF32 on too (see fused_kernels)
        kernels = [
            replace(k, math=precision)
            if k.math == traced_as
            and not (traced_as == "fp32" and k.kind == "attention")
            else k
            for k in trace.kernels
        ]
        return price(
            Trace(kernels, trace.dispatched_ops),
            GPUS[self.gpu.value],
            precision,
            extra=step_kernels(w.model, precision, w.optimizer),
        )

    def update(self) -> None:
        gpu = GPUS[self.gpu.value]
        self.estimates = [self.estimate(p) for p in PRECISIONS if gpu.supports(p)]
        fastest = min(self.estimates, key=lambda e: e.seconds)
        self.message.value = _(
            "<b>{gpu}</b>: fp32 {fp32_ms} ms a step; fastest {precision}, {ms} ms "
            "({ratio}x), dominated by <b>{regime}</b>. Estimated, not measured."
        ).format(
            gpu=gpu.name,
            fp32_ms=f"{self.estimates[0].seconds * 1e3:.1f}",
            precision=fastest.precision,
            ms=f"{fastest.seconds * 1e3:.1f}",
            ratio=f"{self.estimates[0].seconds / fastest.seconds:.1f}",
            regime=_(REGIME_LABELS[fastest.regime]),
        )
        self.image.value = figure_png(self.figure())

    def figure(self):
        fig = _figure(2.6, left=0.8, bottom=0.6)
        ax = fig.add_subplot()
        for i, e in enumerate(self.estimates):
            left = 0.0
            for regime, color in REGIME_COLORS.items():
                width = getattr(e, f"{regime}_s") * 1e3
                ax.barh(
                    i,
                    width,
                    left=left,
                    color=color,
                    label=_(REGIME_LABELS[regime]) if i == 0 else None,
                )
                left += width
        ax.set_yticks(range(len(self.estimates)), [e.precision for e in self.estimates])
        ax.invert_yaxis()
        ax.set(xlabel=_("estimated step time (ms)"))
        ax.legend(loc="lower right", fontsize=8)
        return fig


def estimate_explorer(gpu: str = "A100-SXM4-80GB") -> EstimateExplorer:
    """The panel: ``w = estimate_explorer(); w.gpu.value = "V100-SXM2-16GB"`` redraws
    with fp32 and fp16 only (a V100 has no bf16 or TF32 tensor cores)."""
    return EstimateExplorer(gpu)
