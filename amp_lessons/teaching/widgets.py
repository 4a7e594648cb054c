"""The course's three widgets: controls a student moves, pictures and tables redrawn
from live measurements on each change.

Widgets (``*_explorer``) are ``ipywidgets.VBox`` subclasses that keep their controls
and outputs as attributes, so a notebook's ``assert`` (or a test) can move a control
and read what it shows:

* ``fp16_range_explorer`` (notebook 01): a value's bits, stored value and relative
  error in each format, and where it falls on a format's number line;
* ``gradient_histogram_explorer`` (notebook 02): real gradients against a format's
  range, with a loss-scale slider;
* ``speed_memory_explorer`` (notebook 06): a tiny MLP trained for a few steps per
  precision (``bench.measure_speed_memory``), its step time and its memory, part by
  part, measured on each change.

The pictures are ``amp_lessons.teaching.plots``'; every redraw renders one to PNG bytes
shown by an ``ipywidgets.Image``: the bytes change when the picture does, which is what
tests and the browser test check. To keep a redraw under ~300 ms on a 2-core CPU, a
widget renders the static part of its figure (zones, ticks, labels) once and then
paints only what moves (matplotlib blitting); the speed panel, whose bars and axes
all move, leaves its words (title, legend) to HTML, since text is most of what
matplotlib spends drawing. Sliders act on release, so a fast drag does not queue up
redraws. Each widget times its own redraw (``last_redraw_ms``,
``last_redraw_cpu_ms``).

Not covered here: interactive (zoomable) matplotlib backends, fp8 training.
"""

from __future__ import annotations

import html
import math
import re
import time
from collections.abc import Iterable, Sequence

import ipywidgets as widgets
import torch

from amp_lessons.core.formats import FORMATS, decompose, relative_error, resolve_format
from amp_lessons.core.memory import byte_unit
from amp_lessons.i18n import _
from amp_lessons.measure.bench import measure_speed_memory
from amp_lessons.teaching.plots._render import ZONE_COLORS, _encode_png, _log2
from amp_lessons.teaching.plots.gradients import _Histogram, _nonzero_float
from amp_lessons.teaching.plots.number_lines import (
    _line_limits,
    _NumberLine,
    _short,
    _zone_note,
)
from amp_lessons.teaching.plots.speed_memory import (
    _clear_data,
    _draw_speed_memory,
    _speed_groups,
    _speed_layout,
    legend_html,
)
from amp_lessons.teaching.underflow import CastOutcome, cast_outcome, log2_histogram

BIT_COLORS = {"sign": "#c0392b", "exponent": "#1f5fa8", "mantissa": "#2e7d32"}
EXPLORER_FORMATS = ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
EXPLORER_OPTIMIZERS = ("adam", "sgd")


class _Panel(widgets.VBox):
    """A VBox whose picture is an Image of PNG bytes, redrawn by ``redraw()``."""

    def __init__(self, children: Sequence[widgets.Widget]) -> None:
        self.image = widgets.Image(
            format="png", layout=widgets.Layout(max_width="100%", height="auto")
        )
        self.message = widgets.HTML()
        self.last_redraw_ms = self.last_redraw_cpu_ms = math.nan
        super().__init__(
            [*children, self.message, self.image],
            layout=widgets.Layout(max_width="900px"),
        )

    def redraw(self) -> None:
        """Recompute what the widget shows and time it.

        ``last_redraw_ms`` is the wall time a student waits; ``last_redraw_cpu_ms``
        the CPU time of this process, which other programs on a busy machine do not
        inflate (torch's threads add theirs up: up to 2x the wall time on 2 cores).
        """
        t0, c0 = time.perf_counter(), time.process_time()
        self._draw()
        self.last_redraw_ms = 1e3 * (time.perf_counter() - t0)
        self.last_redraw_cpu_ms = 1e3 * (time.process_time() - c0)

    def _draw(self) -> None:
        raise NotImplementedError

    def _say(self, text: str, error: bool = False) -> None:
        color = "#b00020" if error else "#555"
        body = html.escape(text, quote=False)
        self.message.value = (
            f'<span style="color:{color}">{body}</span>' if text else ""
        )


# ---- widget 1: the FP16 range explorer ---------------------------------------------

_POWER = re.compile(r"^([+-]?)\s*2\s*(?:\^|\*\*)\s*\(?\s*([+-]?\d+)\s*\)?$")


def parse_value(text: str) -> float:
    """Read a typed number: ``1e-4``, ``-65504``, ``inf``, ``nan`` or ``2^-24``.

    Example:
        >>> parse_value("2^-24"), parse_value(" -1.5e3 ")
        (5.960464477539063e-08, -1500.0)
    """
    s = text.strip().replace("\u2212", "-").replace("_", "")
    power = _POWER.match(s)
    if power:
        return (-1.0 if power.group(1) == "-" else 1.0) * 2.0 ** int(power.group(2))
    try:
        return float(s)
    except ValueError:
        message = _(
            "could not read {text} as a number: type e.g. 1e-4, -3.5, 65504, "
            "2^-24 or inf"
        ).format(text=repr(text))
        raise ValueError(message) from None


def format_rows(value: float, names: Iterable[str] = EXPLORER_FORMATS) -> list[dict]:
    """What each format makes of `value`: bits, stored value, error, kind, zone.

    Example:
        >>> row = format_rows(1e-4, ["fp16"])[0]
        >>> row["exponent"], row["stored"], row["kind"]
        ('00001', 0.00010001659393310547, 'normal')
    """
    rows = []
    for name in names:
        f = resolve_format(name)
        d = decompose(value, f)
        rows.append(
            {
                "format": f.name,
                "sign": d.sign,
                "exponent": d.exponent,
                "mantissa": d.mantissa,
                "stored": d.value,
                "kind": d.kind,
                "rel_error": relative_error(value, f),
                "zone": _zone_note(value, f),
            }
        )
    return rows


def _bits_html(row: dict) -> str:
    return "&nbsp;".join(
        f'<span style="color:{BIT_COLORS[k]}">{row[k]}</span>'
        for k in ("sign", "exponent", "mantissa")
    )


def rows_html(rows: list[dict], highlight: str | None = None) -> str:
    """An HTML table of ``format_rows``: bits coloured sign | exponent | mantissa."""
    pad = "padding:2px 12px 2px 4px;text-align:left"  # columns never touch
    mono = f"{pad};font-family:monospace"
    titles = [
        _("format"),
        _("bits: ")
        + " | ".join(
            f'<span style="color:{c}">{k}</span>' for k, c in BIT_COLORS.items()
        ),
        _("stored value"),
        _("relative error"),
        _("what it is"),
    ]
    head = "<tr>" + "".join(f'<th style="{pad}">{t}</th>' for t in titles) + "</tr>"
    body = []
    for r in rows:
        shade = (
            "font-weight:bold;background:#eef3fb" if r["format"] == highlight else ""
        )
        rel = r["rel_error"]
        rel_text = "-" if math.isnan(rel) else f"{rel:.2e}" if rel else "0 (exact)"
        body.append(
            f'<tr style="{shade}"><td style="{pad}">{r["format"]}</td>'
            f'<td style="{mono}">{_bits_html(r)}</td>'
            f'<td style="{mono}">{r["stored"]:.9g}</td>'
            f'<td style="{pad}">{rel_text}</td>'
            f'<td style="{pad}">{html.escape(r["zone"])}</td></tr>'
        )
    return (
        '<table style="border-collapse:collapse;font-size:13px">'
        + head
        + "".join(body)
        + "</table>"
    )


class RangeExplorer(_Panel):
    """Pick a value; see its bits in each format and its place on a number line.

    Controls: ``slider`` (FloatLogSlider of |value|, 1e-9 to 1e6), ``sign``
    (ToggleButtons "+"/"-"), ``text`` (type a value: ``1e-4``, ``2^-24``, ``inf``;
    Enter applies it), ``fmt`` (Dropdown: the format on the number line).
    Outputs: ``table`` (HTML of ``rows``), ``image`` (PNG of ``plot_number_line``),
    ``message`` (notes and input errors). ``value`` is the value shown, ``rows`` what
    each format makes of it (``format_rows``). Moving the slider rounds the value to
    4 significant digits, so the text box shows exactly the value analysed.

    Example:
        >>> w = fp16_range_explorer(1e-4)
        >>> w.text.value = "2^-24"          # as if typed and Enter pressed
        >>> w.rows[3]["format"], w.rows[3]["kind"]
        ('fp16', 'subnormal')
    """

    def __init__(self, value: float = 1e-4, fmt: str = "fp16") -> None:
        value = float(value)
        resolve_format(fmt)
        self._syncing = False
        self.slider = widgets.FloatLogSlider(
            value=1e-4,
            base=10,
            min=-9,
            max=6,
            step=0.05,
            readout_format=".3g",
            description="|x|",
            continuous_update=False,
            layout=widgets.Layout(width="430px"),
        )
        self.sign = widgets.ToggleButtons(
            options=[("+", 1), ("\u2212", -1)],
            value=1,
            description=_("sign"),
            style={"button_width": "34px", "description_width": "40px"},
            # JupyterLab shows ToggleButtons as a block: label above the buttons
            layout=widgets.Layout(
                display="flex", flex_flow="row", align_items="center"
            ),
        )
        self.text = widgets.Text(
            description=_("type x"),
            continuous_update=False,
            placeholder="1e-4, 65504, 2^-24, inf",
            layout=widgets.Layout(width="230px"),
        )
        self.fmt = widgets.Dropdown(
            options=list(EXPLORER_FORMATS),
            value=fmt,
            description=_("number line"),
            layout=widgets.Layout(width="230px"),
        )
        self.table = widgets.HTML()
        self.value = value
        self.rows: list[dict] = []
        self._lines: dict[tuple, _NumberLine] = {}  # static number lines, rendered
        super().__init__(
            [
                widgets.HBox([self.slider, self.sign]),
                widgets.HBox([self.text, self.fmt]),
                self.table,
            ]
        )
        self.slider.observe(self._on_slider, "value")
        self.sign.observe(self._on_sign, "value")
        self.text.observe(self._on_text, "value")
        self.fmt.observe(lambda _: self.redraw(), "value")
        self.set_value(value)

    @property
    def table_html(self) -> str:
        """The HTML table shown, one row per format."""
        return self.table.value

    def set_value(self, value: float, typed: str | None = None) -> None:
        """Show `value`: moves the slider, sign and text box to it, then redraws.

        `typed`: the text it was read from, left in the box as the student wrote it.
        """
        self.value = float(value)
        note = ""
        self._syncing = True
        try:
            if typed is None:
                self.text.value = _short(self.value)
            if not math.isnan(self.value):
                self.sign.value = -1 if math.copysign(1.0, self.value) < 0 else 1
            size = abs(self.value)
            lo, hi = 10.0**self.slider.min, 10.0**self.slider.max
            if math.isfinite(size) and lo <= size <= hi:
                self.slider.value = size
            elif not math.isnan(size):
                self.slider.value = lo if size < lo else hi
                where = (
                    _("0 has no place on a log scale")
                    if size == 0
                    else _("{value} is beyond the slider's {lo} to {hi}").format(
                        value=f"{self.value:g}", lo=f"{lo:g}", hi=f"{hi:g}"
                    )
                )
                note = _(
                    "{where}: the slider waits at its end; the table and the "
                    "plot show the typed value."
                ).format(where=where)
        finally:
            self._syncing = False
        self._say(note)
        self.redraw()

    def _on_slider(self, change) -> None:
        if self._syncing:
            return
        self.set_value(self.sign.value * float(f"{change['new']:.4g}"))

    def _on_sign(self, change) -> None:
        if self._syncing:
            return
        self.set_value(math.copysign(self.value, change["new"]))

    def _on_text(self, change) -> None:
        if self._syncing:
            return
        try:
            value = parse_value(change["new"])
        except ValueError as e:
            self._say(f"{e}. Still showing {_short(self.value)}.", error=True)
            return
        self.set_value(value, typed=change["new"])

    def _draw(self) -> None:
        self.rows = format_rows(self.value)
        self.table.value = rows_html(self.rows, highlight=self.fmt.value)
        f = FORMATS[self.fmt.value]
        key = (f.name, *_line_limits(f, self.value))
        if key not in self._lines:
            if len(self._lines) >= 12:  # values far off the slider: keep a few
                self._lines.pop(next(iter(self._lines)))
            self._lines[key] = _NumberLine(f, *key[1:])
        line = self._lines[key]
        line.mark(self.value)
        self.image.value = line.blit.png()


def fp16_range_explorer(value: float = 1e-4) -> RangeExplorer:
    """The FP16 range explorer of notebook 01 (see ``RangeExplorer``).

    Example:
        >>> w = fp16_range_explorer(1e-4)
        >>> w.slider.value = 1e-6    # fp16: subnormal, 5 significant bits of 11
        >>> w.rows[3]["kind"], w.text.value
        ('subnormal', '1e-06')
    """
    return RangeExplorer(value)


# ---- widget 2: gradient histogram with a loss-scale slider ---------------------------

SCALE_EXPONENTS = range(-4, 33)  # 2^-4 .. 2^32
HISTOGRAM_FORMATS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


class GradientHistogramExplorer(_Panel):
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
        options = [(f"2^{k} = {2.0**k:g}", 2.0**k) for k in SCALE_EXPONENTS]
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
            layout=widgets.Layout(width="560px"),
        )
        self.fmt = widgets.Dropdown(
            options=list(HISTOGRAM_FORMATS),
            value=fmt,
            description=_("format"),
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
            nonzero=f"{o.nonzero:,}", scale=f"{scale:g}", fmt=fmt
        ) + " &nbsp; ".join(
            f'<span style="color:{ZONE_COLORS[z]}"><b>{p:.1%}</b></span> {name}'
            for name, p, z in cells
        )
        self.image.value = self._plots[fmt].blit.png()


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


# ---- widget 3: the speed/memory panel ------------------------------------------------

# CPU sizes: bf16/fp16 matmuls are usually emulated on CPUs (device.EMULATION_NOTE),
# so the largest choice (128 x 64) keeps a redraw of three precisions near 300 ms.
CPU_WIDTHS = (16, 32, 64, 128)
CPU_BATCHES = (4, 8, 16, 32, 64)
GPU_WIDTHS = (256, 512, 1024, 2048, 4096)
GPU_BATCHES = (16, 64, 256, 1024, 4096)


class SpeedMemoryExplorer(_Panel):
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
        # _Panel puts the image last: its caption goes above it, its legend below
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


__all__ = [
    "GradientHistogramExplorer",
    "RangeExplorer",
    "SpeedMemoryExplorer",
    "format_rows",
    "fp16_range_explorer",
    "gradient_histogram_explorer",
    "parse_value",
    "rows_html",
    "speed_memory_explorer",
]
