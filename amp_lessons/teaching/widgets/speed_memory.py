"""Widget 3 (notebook 06): a tiny MLP trained for a few steps per precision, its step
time and its memory, part by part, measured on each change."""

from __future__ import annotations

import html

import ipywidgets as widgets
import torch

from amp_lessons.core.memory import byte_unit
from amp_lessons.i18n import _
from amp_lessons.measure.speed_memory import measure_speed_memory
from amp_lessons.teaching.plots._render import _encode_png
from amp_lessons.teaching.plots.speed_memory import (
    _clear_data,
    _draw_speed_memory,
    _speed_groups,
    _speed_layout,
    legend_html,
)
from amp_lessons.teaching.widgets.panel import Panel

EXPLORER_OPTIMIZERS = ("adam", "sgd")


CPU_WIDTHS = (16, 32, 64, 128)
CPU_BATCHES = (4, 8, 16, 32, 64)
GPU_WIDTHS = (256, 512, 1024, 2048, 4096)
GPU_BATCHES = (16, 64, 256, 1024, 4096)


class SpeedMemoryExplorer(Panel):
    """Train a tiny MLP in each chosen precision; bars of its step time and memory.

    Controls: ``width`` and ``batch`` (SelectionSliders), ``precision_boxes`` (a
    dict precision -> Checkbox), ``optimizer`` (Dropdown: adam, sgd), ``time_box``
    (Checkbox: time steps on each change; memory is always measured). Outputs:
    ``stats`` (HTML table), ``image`` (PNG of ``plot_speed_memory``'s bars and axes),
    with its title in ``caption`` and its legend in ``legend`` (HTML). ``results``
    holds the rows of ``measure_speed_memory`` behind the picture: every number is
    measured in this redraw. `budget_ms` bounds the timing (see
    ``measure_speed_memory``).

    Example:
        >>> w = speed_memory_explorer()
        >>> w.batch.value = 64
        >>> [r["batch"] for r in w.results]
        [64, 64, 64]
    """

    def __init__(
        self, device: str | torch.device | None = None, budget_ms: float | None = None
    ) -> None:
        from amp_lessons.core.device import resolve_device

        self.device = resolve_device("auto" if device is None else str(device))
        gpu = self.device.type == "cuda"
        self.budget_ms = budget_ms if budget_ms is not None else (1000 if gpu else 150)
        self.iters = 5 if gpu else 3
        self.warmup = 2 if gpu else 1
        self.width, self.batch = _size_sliders(gpu)
        self.optimizer = widgets.Dropdown(
            options=list(EXPLORER_OPTIMIZERS),
            value="adam",
            description=_("optimizer"),
            layout=widgets.Layout(width="190px"),
        )
        self.precision_boxes, self.unavailable = _precision_boxes(self.device)
        self.time_box = widgets.Checkbox(
            value=True,
            description=_("time steps"),
            indent=False,
            layout=widgets.Layout(width="110px"),
        )
        self.stats = widgets.HTML()
        # the picture's words, drawn by the browser (see _draw_speed_memory)
        self.caption, self.legend = widgets.HTML(), widgets.HTML()
        self.results: list[dict] = []
        self._figures: dict[tuple, tuple] = {}
        super().__init__(self._control_rows())
        # Panel puts the image last: its caption goes above it, its legend below
        *controls, image = self.children
        self.children = (*controls, self.caption, image, self.legend)
        for control in (
            self.width,
            self.batch,
            self.optimizer,
            self.time_box,
            *self.precision_boxes.values(),
        ):
            control.observe(lambda _: self.redraw(), "value")
        self.redraw()

    def _control_rows(self) -> list[widgets.Widget]:
        """Sizes and optimizer on one row, precisions and timing on the next, then
        the table."""
        return [
            widgets.HBox([self.width, self.batch, self.optimizer]),
            widgets.HBox(
                [
                    widgets.Label(_("precisions:")),
                    *self.precision_boxes.values(),
                    self.time_box,
                ]
            ),
            self.stats,
        ]

    @property
    def precisions(self) -> list[str]:
        return [n for n, box in self.precision_boxes.items() if box.value]

    def _draw(self) -> None:
        chosen = self.precisions
        if not chosen:
            self._say(_("Tick at least one precision to measure."), error=True)
            return
        self.results = measure_speed_memory(
            self.width.value,
            self.batch.value,
            chosen,
            self.device,
            self.optimizer.value,
            warmup=self.warmup,
            iters=self.iters,
            time_steps=self.time_box.value,
            budget_ms=self.budget_ms,
        )
        self.stats.value = self._table()
        note = ""
        if self.device.type == "cpu" and ({"fp16", "bf16"} & set(chosen)):
            note = _(
                "CPU: no tensor cores, so fp16/bf16 do not get the GPU's "
                "speed-up (most CPUs emulate them, slower than fp32); tiny steps "
                "time noisily, the dots show each one. The memory bars are exact "
                "on every device."
            )
        self._say(note)
        self.image.value = self._render(self.results)

    def _render(self, rows: list[dict]) -> bytes:
        # one figure per number of bars, reused: new axes would cost ~100 ms a redraw
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        key = tuple(_speed_groups(rows))
        if key not in self._figures:
            fig, pairs = _speed_layout(key, words=False)
            self._figures[key] = (fig, pairs, FigureCanvasAgg(fig))
        fig, pairs, canvas = self._figures[key]
        _clear_data(fig, pairs)
        words = _draw_speed_memory(fig, pairs, rows, words=False)
        title = html.escape(words["titles"][0])
        self.caption.value = f'<b style="font-size:13px">{title}</b>'

        self.legend.value = legend_html(words["parts"], words["notes"][0])
        canvas.draw()
        return _encode_png(canvas.buffer_rgba(), canvas.get_width_height())

    def _table(self) -> str:
        base = next((r for r in self.results if r["precision"] == "fp32"), None)
        unit, size = byte_unit(max(r["memory"]["total"] for r in self.results))
        cols = [
            _("precision"),
            _("step ms"),
            _("speed vs fp32"),
            _("weights"),
            _("grads"),
            _("optimizer"),
            _("activations"),
            _("weight copies"),
            _("total"),
        ]
        cell = "padding:1px 9px;text-align:right"
        out = [
            '<table style="font-size:12px;border-collapse:collapse"><tr>'
            + "".join(f'<th style="{cell}">{c}</th>' for c in cols)
            + "</tr>"
        ]
        for r in self.results:
            m, ms = r["memory"], r["step_ms"]
            speed = (
                f"{base['step_ms'] / ms:.2f}x"
                if ms and base and base["step_ms"]
                else "-"
            )
            cells = [
                r["precision"],
                "-" if ms is None else f"{ms:.3g}",
                speed,
                *(
                    f"{m[k] / size:.3g}"
                    for k in (
                        "weights",
                        "gradients",
                        "optimizer_state",
                        "activations",
                        "weight_copies",
                        "total",
                    )
                ),
            ]
            out.append(
                "<tr>"
                + "".join(f'<td style="{cell}">{c}</td>' for c in cells)
                + "</tr>"
            )
        return "".join(out) + (
            "</table><small>"
            + _(
                "memory in {unit}, exact (saved-tensor hooks); step "
                "time: median of the steps timed after warm-up, in "
                "this redraw"
            ).format(unit=unit)
            + "</small>"
        )


def _size_sliders(
    gpu: bool,
) -> tuple[widgets.SelectionSlider, widgets.SelectionSlider]:
    """The width and batch sliders, over the GPU's sizes or the CPU's tiny ones."""
    widths, batches = (GPU_WIDTHS, GPU_BATCHES) if gpu else (CPU_WIDTHS, CPU_BATCHES)
    width = widgets.SelectionSlider(
        options=list(widths),
        value=widths[-2 if gpu else 2],
        description=_("width"),
        continuous_update=False,
        layout=widgets.Layout(width="330px"),
    )
    batch = widgets.SelectionSlider(
        options=list(batches),
        value=batches[1 if gpu else 2],
        description=_("batch"),
        continuous_update=False,
        layout=widgets.Layout(width="330px"),
    )
    return width, batch


def _precision_boxes(
    device: torch.device,
) -> tuple[dict[str, widgets.Checkbox], dict[str, str]]:
    """A ticked Checkbox for each precision `device` can run, and why each other
    one cannot (``{precision: reason}``)."""
    from amp_lessons.core.precision import PRECISIONS, resolve_precision

    boxes: dict[str, widgets.Checkbox] = {}
    unavailable: dict[str, str] = {}
    for name in PRECISIONS:
        if name == "tf32" and device.type != "cuda":
            unavailable[name] = _("TF32 exists on NVIDIA GPUs only")
            continue
        try:
            resolve_precision(name, device, warn=False)
        except RuntimeError as e:
            unavailable[name] = str(e)
            continue
        boxes[name] = widgets.Checkbox(
            value=True,
            description=name,
            indent=False,
            layout=widgets.Layout(width="70px"),
        )
    return boxes, unavailable


def speed_memory_explorer(
    device: str | torch.device | None = None,
) -> SpeedMemoryExplorer:
    """The speed/memory panel of notebook 06 (see ``SpeedMemoryExplorer``).

    `device` None picks CUDA when present, else the CPU (tiny sizes there).

    Example:
        >>> w = speed_memory_explorer("cpu")
        >>> w.width.value = 128      # measures again: memory exact, time in ms
        >>> w.results[0]["memory"]["weights"]   # 3 x (128*128 + 128) float32
        198144
    """
    return SpeedMemoryExplorer(device)
