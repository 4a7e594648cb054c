"""The course's pictures and its three widgets, drawn from live measurements.

Plots (``plot_*``) return a ``matplotlib.figure.Figure`` built without pyplot, so they
work headless and never pile up in pyplot's figure list; a notebook displays one by
leaving it as the cell's last expression. Widgets (``*_explorer``) are
``ipywidgets.VBox`` subclasses that keep their controls and outputs as attributes, so a
notebook's ``assert`` (or a test) can move a control and read what it shows:

* ``fp16_range_explorer`` (notebook 01): a value's bits, stored value and relative
  error in each format, and where it falls on a format's number line;
* ``gradient_histogram_explorer`` (notebook 02): real gradients against a format's
  range, with a loss-scale slider;
* ``speed_memory_explorer`` (notebook 06): a tiny MLP trained for a few steps per
  precision, its step time and its memory, part by part, measured on each change.

Every redraw renders the figure to PNG bytes shown by an ``ipywidgets.Image``: the
bytes change when the picture does, which is what tests and the browser test check.
To keep a redraw under ~300 ms on a 2-core CPU, a widget renders the static part of
its figure (zones, ticks, labels) once and then paints only what moves (matplotlib
blitting); sliders act on release, so a fast drag does not queue up redraws. Each
widget times its own redraw (``last_redraw_ms``, ``last_redraw_cpu_ms``).

Not covered here: interactive (zoomable) matplotlib backends, fp8 training.
"""

from __future__ import annotations

import html
import io
import math
import re
import statistics
import time
from collections.abc import Iterable, Sequence

import ipywidgets as widgets
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from amp_lessons.formats import FORMATS, Format, decompose, relative_error, zones
from amp_lessons.underflow import CastOutcome, cast_outcome, log2_histogram

# One colour per zone in every picture (the same as underflow.py's histogram).
ZONE_COLORS = {"zero": "tab:red", "subnormal": "tab:orange", "normal": "tab:green",
               "overflow": "tab:purple"}  # fmt: skip
BIT_COLORS = {"sign": "#c0392b", "exponent": "#1f5fa8", "mantissa": "#2e7d32"}
EXPLORER_FORMATS = ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
WIDTH_IN = 8.6  # inches at DPI: 860 px, inside a notebook cell at 1280 x 800
DPI = 100


# ---- shared plumbing ----------------------------------------------------------------


def _resolve(fmt: str | Format) -> Format:
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str) and fmt in FORMATS:
        return FORMATS[fmt]
    raise ValueError(f"unknown format {fmt!r}; pass one of {', '.join(FORMATS)}")


def _figure(height_in: float, left: float = 0.75, right: float = 0.25,
            top: float = 0.45, bottom: float = 0.55) -> Figure:
    """A Figure WIDTH_IN wide with fixed margins in inches.

    Fixed margins rather than constrained layout: the layout pass measures every
    text twice and would double each widget redraw (~150 ms more on 2 cores).
    """
    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    fig.subplots_adjust(left=left / WIDTH_IN, right=1 - right / WIDTH_IN,
                        top=1 - top / height_in, bottom=bottom / height_in)
    return fig


def figure_png(fig: Figure) -> bytes:
    """Render `fig` to PNG bytes, as the widgets show their pictures.

    Example:
        >>> figure_png(plot_number_line(1e-4))[:4]
        b'\\x89PNG'
    """
    buf = io.BytesIO()
    # zlib level 1: a third of the encoding time of the default 6, for ~1.5x the bytes
    fig.savefig(buf, format="png", dpi=DPI, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def _encode_png(rgba, size: tuple[int, int]) -> bytes:
    from PIL import Image  # matplotlib's own PNG writer

    buf = io.BytesIO()
    Image.frombuffer("RGBA", size, rgba, "raw", "RGBA", 0, 1).save(
        buf, format="png", compress_level=1)
    return buf.getvalue()


class _Blit:
    """A figure whose static part is rendered once; redraws paint only `moving`.

    What makes a widget redraw cheap: tick labels, zones and axis titles take most
    of a figure's drawing time and do not change when a slider moves.
    """

    def __init__(self, fig: Figure, moving: Iterable) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        self.fig = fig
        self.canvas = FigureCanvasAgg(fig)
        self.moving = list(moving)
        for artist in self.moving:
            artist.set_animated(True)  # left out of the full draw
        self.background = None

    def png(self, extra: Sequence = ()) -> bytes:
        """PNG of the static part with `moving` (and `extra`, new artists) on top."""
        if self.background is None:
            self.canvas.draw()
            self.background = self.canvas.copy_from_bbox(self.fig.bbox)
        else:
            self.canvas.restore_region(self.background)
        for artist in [*self.moving, *extra]:
            self.fig.draw_artist(artist)
        width, height = self.canvas.get_width_height()
        return _encode_png(self.canvas.buffer_rgba(), (width, height))


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -math.inf


def _power_label(x: float) -> str:
    """'2^-24' for a power of two, else a short decimal."""
    if x > 0 and math.isfinite(x) and math.frexp(x)[0] == 0.5:
        return f"2^{math.frexp(x)[1] - 1}"
    return f"{x:.4g}"


def _zone_of(value: float, fmt: Format) -> str:
    """The zone of `fmt`'s number line that `value` falls in, decided by the real cast.

    ``zones()`` gives the edges; the stored kind settles the ties at them. A value
    that e4m3fn saturates to +-448 is in "overflow" although 448 is a normal number.
    """
    d = decompose(value, fmt)
    if d.kind in ("inf", "nan"):
        return "overflow" if not math.isnan(value) else "nan"
    v32 = abs(decompose(value, "fp32").value)
    if fmt.overflow == "saturate" and v32 > zones(fmt)[-1].lo:
        return "overflow"
    return d.kind


def _zone_note(value: float, fmt: Format) -> str:
    zone = _zone_of(value, fmt)
    if zone == "nan":
        return "not a number"
    if zone == "zero":
        return "zero" if value == 0 else "flushed to 0"
    if zone == "overflow":
        return {"inf": "overflow: inf", "nan": "overflow: nan",
                "saturate": f"overflow: saturated to {fmt.max:g}"}[fmt.overflow]
    return zone


class _Panel(widgets.VBox):
    """A VBox whose picture is an Image of PNG bytes, redrawn by ``redraw()``."""

    def __init__(self, children: Sequence[widgets.Widget]) -> None:
        self.image = widgets.Image(format="png", layout=widgets.Layout(
            max_width="100%", height="auto"))
        self.message = widgets.HTML()
        self.last_redraw_ms = self.last_redraw_cpu_ms = math.nan
        super().__init__([*children, self.message, self.image],
                         layout=widgets.Layout(max_width="900px"))

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
        self.message.value = (f'<span style="color:{color}">{body}</span>' if text
                              else "")


# ---- number lines -------------------------------------------------------------------


def _zone_spans(fmt: Format, lo: float, hi: float) -> list[tuple[str, float, float]]:
    """(zone name, left, right) in log2 units, clipped to [lo, hi]."""
    spans = []
    for zone in zones(fmt):
        a = max(_log2(zone.lo), lo)
        b = min(_log2(zone.hi) if math.isfinite(zone.hi) else math.inf, hi)
        if a < b:
            spans.append((zone.name, a, b))
    return spans


def _overflow_word(fmt: Format) -> str:
    return {"inf": "-> inf", "nan": "-> nan", "saturate": f"-> {fmt.max:g}"}[
        fmt.overflow]


def _line_limits(f: Format, value: float) -> tuple[float, float]:
    """The x range of a number line: the format's range with room for the zero and
    overflow zones (both endless on a log axis) to be about a tenth of it each."""
    lo, hi = _log2(f.min_subnormal), _log2(f.max)
    pad = max(3.0, 0.14 * (hi - lo))
    lo, hi = lo - pad, hi + pad
    if math.isfinite(value) and value != 0:
        where = _log2(abs(value))
        lo, hi = min(lo, where - pad / 2), max(hi, where + pad / 2)
    return lo, hi


class _NumberLine:
    """The static number line of one format over [lo, hi], and the value's marker."""

    def __init__(self, fmt: Format, lo: float, hi: float) -> None:
        self.fmt, self.lo, self.hi = fmt, lo, hi
        self.fig = fig = _figure(3.0, left=0.25, right=0.25, top=0.85, bottom=0.5)
        self.ax = ax = fig.add_subplot()
        self._zones()
        self._edges()
        ax.set_xlim(lo, hi)
        ax.set_yticks([])
        ax.set_xlabel("log2 |x|   (the negative half is its mirror image)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=14))
        top = ax.secondary_xaxis("top", functions=(lambda t: t * math.log10(2),
                                                   lambda t: t / math.log10(2)))
        top.set_xlabel("log10 |x|", fontsize=8, labelpad=2)
        top.tick_params(labelsize=8)
        top.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=12))
        # the marker: moved by mark(), redrawn alone in the explorer
        xaxis = ax.get_xaxis_transform()
        self.line = ax.vlines(lo, 0.3, 1, color="black", lw=2.2, transform=xaxis)
        (self.tip,) = ax.plot([lo], [0.34], marker="v", color="black", ms=9,
                              transform=xaxis)
        self.label = ax.text(lo, 0.4, "", fontsize=9, va="bottom", transform=xaxis,
                             bbox={"boxstyle": "round,pad=0.3", "fc": "white",
                                   "ec": "0.5", "alpha": 0.92})
        self.title = ax.set_title(" ", fontsize=11)
        self.blit = _Blit(fig, [self.line, self.tip, self.label, self.title])

    def _zones(self) -> None:
        f, ax, lo, hi = self.fmt, self.ax, self.lo, self.hi
        fig = self.fig
        axes_px = fig.get_figwidth() * DPI * (fig.subplotpars.right
                                              - fig.subplotpars.left)
        for name, a, b in _zone_spans(f, lo, hi):
            ax.axvspan(a, b, color=ZONE_COLORS[name], alpha=0.22, lw=0)
            label = {"zero": "flush to 0", "subnormal": "subnormal",
                     "normal": "normal",
                     "overflow": f"overflow {_overflow_word(f)}"}[name]
            style = {"ha": "center", "fontsize": 9, "color": ZONE_COLORS[name],
                     "fontweight": "bold", "transform": ax.get_xaxis_transform()}
            if (b - a) / (hi - lo) * axes_px > 7.5 * len(label):
                ax.text((a + b) / 2, 0.9, label, va="center", **style)
            else:  # a narrow zone (fp8's subnormals, bf16's): written upright
                ax.text((a + b) / 2, 0.97, label, va="top", rotation=90, **style)

    def _edges(self) -> None:
        f, ax = self.fmt, self.ax
        # each label on the side away from its neighbour, so they never overlap
        edges = [(f.min_subnormal, "right",
                  (_power_label(f.min_subnormal), "min subnormal")),
                 (f.min_normal, "left", (_power_label(f.min_normal), "min normal")),
                 (f.max, "right", (f"{f.max:g}", "max"))]
        for x, side, lines in edges:
            ax.axvline(_log2(x), color="0.3", lw=0.8, ls=":")
            text = "\n".join(f" {t}" if side == "left" else f"{t} " for t in lines)
            ax.text(_log2(x), 0.03, text, fontsize=8, va="bottom", ha=side,
                    color="0.2", transform=ax.get_xaxis_transform())

    def mark(self, value: float) -> None:
        """Move the marker to `value` and say what the format stores for it."""
        f, lo, hi = self.fmt, self.lo, self.hi
        if math.isnan(value):
            where, text = hi, "nan"
        elif value == 0:
            where, text = lo, "x = 0"
        elif math.isinf(value):
            where, text = hi, f"x = {value:g}"
        else:
            where, text = _log2(abs(value)), f"x = {_short(value)}"
        zone = _zone_note(value, f)
        self.line.set_segments([[(where, 0.3), (where, 1.0)]])
        self.tip.set_xdata([where])
        left_half = where < (lo + hi) / 2
        self.label.set_x(where + (1 if left_half else -1) * 0.006 * (hi - lo))
        self.label.set_horizontalalignment("left" if left_half else "right")
        self.label.set_text(f"{text}\nstored {decompose(value, f).value:.6g}\n{zone}")
        self.title.set_text(f"{f.name} ({f.exponent_bits} exponent, "
                            f"{f.mantissa_bits} mantissa bits): {text} is {zone}")


def plot_number_line(value: float, fmt: str | Format = "fp16") -> Figure:
    """A format's number line on a log2 scale, its four zones to scale, `value` marked.

    The zones are ``formats.zones``: magnitudes that flush to 0, that are stored as
    subnormals (fewer significant bits), as normals, and that overflow. The marker's
    label gives the value, what the format stores and the zone. The negative half
    mirrors the positive one, so only |value| is placed; 0 sits at the left edge,
    inf and nan at the right.

    Example:
        >>> fig = plot_number_line(1e-4, "fp16")  # 1e-4 = 2^-13.3: normal, just
        >>> fig.axes[0].get_title()
        'fp16 (5 exponent, 10 mantissa bits): x = 0.0001 is normal'
    """
    f = _resolve(fmt)
    value = float(value)
    line = _NumberLine(f, *_line_limits(f, value))
    line.mark(value)
    for artist in line.blit.moving:
        artist.set_animated(False)  # a plain figure: everything draws
    return line.fig


def plot_format_ranges(
    names: Sequence[str] = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"),
) -> Figure:
    """Each format's subnormal and normal ranges as bars on one log2 axis.

    bf16 spans fp32's range with fewer mantissa bits; fp16 covers only 2^-24 to
    65504, which is why its gradients need a loss scale.

    Example:
        >>> fig = plot_format_ranges()
        >>> [t.get_text() for t in fig.axes[0].get_yticklabels()][1]
        'fp16\\n1+5+10 bits, eps 2^-10'
    """
    formats = [_resolve(n) for n in names]
    if not formats:
        raise ValueError("names is empty: pass format names such as ('fp16', 'bf16')")
    fig = _figure(1.0 + 0.55 * len(formats), left=1.65, right=0.2, top=0.35,
                  bottom=0.5)
    ax = fig.add_subplot()
    for i, f in enumerate(formats):
        sub_lo, normal_lo, top = (_log2(f.min_subnormal), _log2(f.min_normal),
                                  _log2(f.max))
        ax.barh(i, normal_lo - sub_lo, left=sub_lo, color=ZONE_COLORS["subnormal"],
                alpha=0.75, height=0.6, label="subnormal" if i == 0 else None)
        ax.barh(i, top - normal_lo, left=normal_lo, color=ZONE_COLORS["normal"],
                alpha=0.75, height=0.6, label="normal" if i == 0 else None)
        ax.text(sub_lo - 1.5, i, _power_label(f.min_subnormal), ha="right",
                va="center", fontsize=8)
        ax.text(top + 1.5, i, f"{f.max:g}", ha="left", va="center", fontsize=8)
    ax.axvline(0, color="0.3", lw=0.8, ls=":")
    ax.set_yticks(range(len(formats)), [
        f"{f.name}\n1+{f.exponent_bits}+{f.mantissa_bits} bits, eps "
        f"{_power_label(f.eps)}" for f in formats])
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    lo = min(_log2(f.min_subnormal) for f in formats)
    hi = max(_log2(f.max) for f in formats)
    lo, hi = lo - 0.12 * (hi - lo), hi + 0.16 * (hi - lo)  # room for the labels
    ax.set_xlim(lo, hi)
    ax.set_xlabel("log2 |x|   (dotted line: 1.0)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Positive range of each format: subnormals, then normals up to max",
                 fontsize=11)
    return fig


# ---- gradient histograms ------------------------------------------------------------


def _nonzero_float(grads: torch.Tensor) -> torch.Tensor:
    # cast_outcome has already checked grads; the same float32 product it casts
    g = grads.detach().flatten().float().cpu()
    return g[g != 0]


class _Histogram:
    """The static zones of one format over a fixed axis, and the moving bars."""

    def __init__(self, fmt: Format, xlim: tuple[float, float],
                 ymax: float | None = None) -> None:
        self.fmt, (lo, hi) = fmt, xlim
        self.fig = fig = _figure(3.5, left=0.75, right=0.2, top=0.35, bottom=0.95)
        self.ax = ax = fig.add_subplot()
        sub, normal = _power_label(fmt.min_subnormal), _power_label(fmt.min_normal)
        half = _power_label(fmt.min_subnormal / 2)  # ties at it round to even: 0
        words = {"zero": f"flush to 0 (up to {half})",
                 "subnormal": f"subnormal ({sub} to {normal})",
                 "normal": f"normal ({normal} to {fmt.max:g})",
                 "overflow": f"overflow {_overflow_word(fmt)}"}
        for name, a, b in _zone_spans(fmt, lo, hi):
            ax.axvspan(a, b, color=ZONE_COLORS[name], alpha=0.2, lw=0,
                       label=words[name])
        # the legend names the zones and never changes; the shares go in the title
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4,
                  fontsize=8, frameon=False, title=f"{fmt.name} zones",
                  title_fontsize=8)
        self.bars = ax.stairs([0], [lo, lo + 1], fill=True, color="0.3", alpha=0.85)
        self.off = ax.text(0.99, 0.97, "", ha="right", va="top", fontsize=8,
                           transform=ax.transAxes)
        ax.set_xlim(lo, hi)
        if ymax is not None:
            ax.set_ylim(0, ymax)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=20))
        ax.set_xlabel("log2 |gradient x scale|   (one bar per power of two)")
        ax.set_ylabel("gradients per binade")
        self.title = ax.set_title(" ", fontsize=10)
        self.blit = _Blit(fig, [self.bars, self.off, self.title])

    def show(self, grads: torch.Tensor, scale: float) -> CastOutcome:
        """Bars of |grads * scale|; the title gives the real cast's outcome."""
        outcome = cast_outcome(grads, scale, self.fmt)  # checks grads, scale, fmt
        hist = log2_histogram(_nonzero_float(grads) * float(scale))
        counts, edges = hist.counts.numpy(), hist.edges.numpy()
        if counts.size:
            self.bars.set_data(counts, edges)
        self.bars.set_visible(bool(counts.size))
        lo, hi = self.ax.get_xlim()
        off = int(counts[(edges[:-1] < lo) | (edges[1:] > hi)].sum())
        self.off.set_text(f"{off} values off this axis" if off else "")
        self.title.set_text(
            f"{outcome.nonzero:,} gradients x {_power_label(scale)} cast to "
            f"{self.fmt.name}: {outcome.zero:.1%} flush to 0 | {outcome.subnormal:.1%}"
            f" subnormal | {outcome.normal:.1%} normal | {outcome.overflow:.1%} "
            "overflow")
        return outcome


def plot_gradient_histogram(
    grads: torch.Tensor,
    scale: float = 1.0,
    fmt: str | Format = "fp16",
    *,
    xlim: tuple[float, float] | None = None,
) -> Figure:
    """Log2 histogram of |grads * scale| (nonzero values) over `fmt`'s zones.

    One bar per binade: bar k counts the values with 2^k <= |g * scale| < 2^(k+1).
    The title gives the share of the nonzero gradients that the real cast
    (``underflow.cast_outcome``) flushes to 0, keeps as subnormals or normals, and
    overflows; the legend names the zones with their limits. `xlim` fixes the axis
    in log2 units (the explorer keeps it still while the scale moves the bars).

    Example:
        >>> grads = collect_gradients(backward_demo())
        >>> fig = plot_gradient_histogram(grads, 2.0**16)  # title: 0.0% flush to 0
    """
    cast_outcome(grads, scale, fmt)  # checks grads, scale and fmt first
    f = _resolve(fmt)
    if xlim is None:
        edges = log2_histogram(_nonzero_float(grads) * float(scale)).edges
        xlim = (_log2(f.min_subnormal) - 4, _log2(f.max) + 4)
        if edges.numel() > 1:
            xlim = (min(xlim[0], edges[0].item() - 1),
                    max(xlim[1], edges[-1].item() + 1))
    hist = _Histogram(f, xlim)
    hist.show(grads, scale)
    hist.ax.relim()
    hist.ax.autoscale_view(scalex=False)
    for artist in hist.blit.moving:
        artist.set_animated(False)  # a plain figure: everything draws
    return hist.fig


# ---- loss-scale trajectories --------------------------------------------------------


def _skipped_mask(skipped, n: int) -> list[bool]:
    if skipped is None:
        return [False] * n
    if isinstance(skipped, torch.Tensor):
        skipped = skipped.tolist()
    items = list(skipped)
    if items and all(isinstance(s, bool) for s in items):
        if len(items) != n:
            raise ValueError(f"skipped has {len(items)} flags for {n} scales: pass "
                             "one bool per step, or the step numbers (1-based)")
        return items
    mask = [False] * n
    for s in items:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= n:
            raise ValueError(f"skipped step {s!r} is not a step number in 1..{n} "
                             "(or pass one bool per step)")
        mask[s - 1] = True
    return mask


def plot_scale_trajectory(
    scales,
    skipped=None,
    *,
    reference: Sequence[float] | None = None,
    label: str = "loss scale",
    reference_label: str = "torch.amp.GradScaler",
    title: str | None = None,
) -> Figure:
    """The loss scale used at each step on a log2 axis, skipped steps marked.

    `scales`: the scale of each step (step 1 first), or a ``train.TrainResult``,
    whose ``scales`` and skipped flags are used. `skipped`: one bool per step, or
    the 1-based numbers of the skipped steps. `reference`: a second trajectory drawn
    dashed on top, e.g. torch's GradScaler run on the same gradients.

    Example:
        >>> fig = plot_scale_trajectory([2.0**16] * 3 + [2.0**15] * 2,
        ...                             skipped=[False, False, True, False, False])
    """
    if hasattr(scales, "records"):  # a TrainResult
        if skipped is None:
            skipped = [r.skipped for r in scales.records]
        scales = scales.scales
    values = [float(s) for s in (scales.tolist() if isinstance(scales, torch.Tensor)
                                 else scales)]
    if not values:
        raise ValueError("scales is empty: pass the scale of each step")
    if not all(s > 0 and math.isfinite(s) for s in values):
        raise ValueError("every scale must be positive and finite")
    mask = _skipped_mask(skipped, len(values))
    steps = list(range(1, len(values) + 1))
    fig = _figure(3.0)
    ax = fig.add_subplot()
    ax.step(steps, values, where="post", color="tab:blue", lw=2, label=label)
    if reference is not None:
        ref = [float(s) for s in reference]
        ax.step(range(1, len(ref) + 1), ref, where="post", color="black", lw=1,
                ls="--", label=reference_label)
    bad = [(s, v) for s, v, m in zip(steps, values, mask, strict=True) if m]
    if bad:
        ax.plot(*zip(*bad, strict=True), "x", color="tab:red", ms=8, mew=2,
                label=f"skipped step (inf/nan gradients): {len(bad)}")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _power_label(y)))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss scale (log2 axis)")
    ax.set_xlim(0.5, len(values) + 0.5)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title or f"Loss scale over {len(values)} steps: "
                 f"{_power_label(values[0])} -> {_power_label(values[-1])}, "
                 f"{len(bad)} skipped", fontsize=11)
    return fig


# ---- speed and memory ---------------------------------------------------------------

MEMORY_PARTS = {  # MemoryBreakdown field -> legend label, colour
    "weights": ("weights (fp32)", "#4c72b0"),
    "gradients": ("gradients (fp32)", "#55a868"),
    "optimizer_state": ("optimizer state (fp32)", "#8172b2"),
    "buffers": ("buffers", "#937860"),
    "activations": ("activations kept for backward", "#dd8452"),
    "weight_copies": ("autocast weight copies", "#c44e52"),
}
OPTIMIZERS = ("adam", "sgd")


def _make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3)
    raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")


def measure_speed_memory(
    width: int = 64,
    batch: int = 16,
    precisions: Sequence[str] = ("fp32", "bf16"),
    device: str | torch.device = "cpu",
    optimizer: str = "adam",
    layers: int = 3,
    warmup: int = 1,
    iters: int = 3,
    time_steps: bool = True,
    budget_ms: float | None = None,
    seed: int = 0,
) -> list[dict]:
    """Train an MLP of `layers` x Linear(width) for a few steps in each precision.

    Per precision: the exact memory breakdown (``memory.memory_breakdown``: weights,
    gradients, optimizer state, activations and autocast weight copies kept for
    backward), then, with `time_steps`, `warmup` steps and up to `iters` timed
    steps of the course's loop (``train.train_step``: autocast, GradScaler for fp16).
    `budget_ms` caps the timing: once that much wall time has passed, each
    remaining precision gets its warm-up and ONE timed step. On CUDA the rows also
    hold the allocator's peak over the timed steps, less what was allocated before
    (the notebook's own tensors). The global RNG is untouched.

    Rows follow ``bench``'s schema (config, precision, step_ms, times_ms,
    peak_mem_bytes, activation_bytes, param_bytes) plus ``memory`` (the breakdown's
    ``as_dict()``) and the sizes; ``step_ms`` is None when not timed.

    Example:
        >>> rows = measure_speed_memory(64, 16, ("fp32", "bf16"))
        >>> rows[1]["memory"]["weight_copies"] > 0  # bf16 copies of the weights
        True
    """
    from amp_lessons.memory import memory_breakdown
    from amp_lessons.train import MLP, resolve_device, resolve_precision

    for name, v in (("width", width), ("batch", batch), ("layers", layers),
                    ("iters", iters)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if not precisions:
        raise ValueError("no precision chosen: pass e.g. ('fp32', 'bf16')")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of "
                         f"{', '.join(OPTIMIZERS)}")
    dev = resolve_device(str(device))
    deadline = None if budget_ms is None else time.perf_counter() + budget_ms / 1e3
    rows = []
    for name in precisions:
        p = resolve_precision(name, dev, warn=False)
        # CUDA: count only this run's tensors, not what the notebook already holds
        base = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = MLP((width,) * (layers + 1)).to(dev)
            x = torch.randn(batch, width).to(dev)
            y = torch.randn(batch, width).to(dev)
        opt = _make_optimizer(optimizer, model.parameters())
        mem = memory_breakdown(model, x, p.dtype if p.autocast else None, optimizer)
        times, peak = [], None
        if time_steps:
            times, peak = _time_training(model, opt, p, dev, (x, y), warmup, iters,
                                         deadline)
        rows.append({
            "config": "mlp",
            "precision": name,
            "device": dev.type,
            "width": width,
            "batch": batch,
            "layers": layers,
            "optimizer": optimizer,
            "step_ms": statistics.median(times) if times else None,
            "times_ms": times,
            "warmup": warmup if time_steps else 0,
            "peak_mem_bytes": None if peak is None else peak - base,
            "activation_bytes": mem.activations + mem.weight_copies,
            "param_bytes": mem.weights,
            "memory": mem.as_dict(),
        })
        del model, opt, x, y  # before the next precision's peak is measured
    return rows


def _time_training(model, opt, p, dev, batch, warmup: int, iters: int,
                   deadline: float | None) -> tuple[list[float], int | None]:
    """Milliseconds of up to `iters` steps after `warmup` (at least one step, fewer
    once `deadline` has passed), and the CUDA allocator's peak over them."""
    from amp_lessons.bench import synchronize
    from amp_lessons.train import autocast_context, make_scaler, tf32_mode, train_step

    scaler, ctx = make_scaler(p, dev), autocast_context(p, dev)
    times: list[float] = []
    with tf32_mode(p.tf32):
        for _ in range(warmup):
            train_step(model, opt, scaler, ctx, [batch], F.mse_loss, clip=1.0)
        synchronize(dev)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        while len(times) < iters:
            t0 = time.perf_counter()
            train_step(model, opt, scaler, ctx, [batch], F.mse_loss, clip=1.0)
            synchronize(dev)
            times.append(1e3 * (time.perf_counter() - t0))
            if deadline is not None and time.perf_counter() > deadline:
                break
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    return times, peak


def _byte_unit(n: float) -> tuple[str, float]:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return unit, size
    return "bytes", 1


def _rows_of(results) -> list[dict]:
    rows = results["results"] if isinstance(results, dict) else list(results)
    if not rows:
        raise ValueError("no results to plot: pass measure_speed_memory() rows, "
                         "bench rows, or a bench report")
    for r in rows:
        if not isinstance(r, dict) or "precision" not in r:
            raise ValueError("each result must be a dict with at least 'precision' "
                             "(rows of measure_speed_memory or bench)")
    return rows


def _parts_of(row: dict) -> dict[str, int]:
    """Memory parts of a row: the full breakdown, or what a bench row records."""
    if "memory" in row:
        return {k: row["memory"][k] for k in MEMORY_PARTS if row["memory"].get(k)}
    parts = {}
    if row.get("param_bytes") is not None:
        parts["weights"] = row["param_bytes"]
    if row.get("activation_bytes") is not None:
        parts["saved"] = row["activation_bytes"]
    return parts


_PART_LABELS = {**{k: v[0] for k, v in MEMORY_PARTS.items()},
                "saved": "saved for backward (activations + weight copies)",
                "peak": "allocator peak (CUDA)"}
_PART_COLORS = {**{k: v[1] for k, v in MEMORY_PARTS.items()}, "saved": "#dd8452"}


def _speed_layout(bars: Sequence[int]) -> tuple[Figure, list[tuple]]:
    """A figure with a (time, memory) pair of axes per config, `bars` rows each."""
    body = sum(0.45 * n + 0.95 for n in bars)
    fig = _figure(body + 0.45 + 1.05, left=0.6, right=0.25, top=0.45, bottom=1.05)
    grid = fig.add_gridspec(len(bars), 2, width_ratios=(1, 1.5), wspace=0.06,
                            hspace=0.95 / (body / len(bars)), height_ratios=bars)
    pairs = []
    for i in range(len(bars)):
        t_ax = fig.add_subplot(grid[i, 0])
        pairs.append((t_ax, fig.add_subplot(grid[i, 1], sharey=t_ax)))
    return fig, pairs


def _clear_data(fig: Figure, pairs: list[tuple]) -> None:
    """Remove bars, dots and labels, keeping the axes (their ticks are reused)."""
    for pair in pairs:
        for ax in pair:
            for artist in [*ax.patches, *ax.lines, *ax.texts]:
                artist.remove()
            ax.containers.clear()
    for legend in list(fig.legends):
        legend.remove()


def _time_panel(ax, group: list[dict]) -> None:
    ys = list(range(len(group)))
    timed = [r for r in group if r.get("step_ms") is not None]
    for y, r in zip(ys, group, strict=True):
        if r.get("step_ms") is None:
            ax.text(0.03, y, "not timed", va="center", fontsize=9, color="0.4",
                    transform=ax.get_yaxis_transform())
            continue
        times = r.get("times_ms") or []
        ax.barh(y, r["step_ms"], color="#4c72b0", height=0.6)
        ax.plot(times, [y] * len(times), "o", color="black", ms=3)
        ax.text(max([r["step_ms"], *times]), y, f"  {r['step_ms']:.3g} ms",
                va="center", fontsize=9)
    top = max((max([r["step_ms"], *(r.get("times_ms") or [])]) for r in timed),
              default=1.0)
    ax.set_xlim(0, top * 1.5)
    ax.tick_params(axis="x", bottom=bool(timed), labelbottom=bool(timed))
    counts = sorted({len(r.get("times_ms") or []) for r in timed})
    steps = f" of {'/'.join(map(str, counts))} step{'s' * (counts != [1])}"
    ax.set_xlabel(f"step time, ms (bar: median{steps if counts else ''}; dots: each "
                  "step)", fontsize=9)
    ax.set_yticks(ys, [r["precision"] for r in group])
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))


def _memory_panel(ax, group: list[dict]) -> dict[str, object]:
    parts = [_parts_of(r) for r in group]
    peak = max([sum(p.values()) for p in parts]
               + [r.get("peak_mem_bytes") or 0 for r in group])
    unit, size = _byte_unit(peak)
    handles: dict[str, object] = {}
    lefts = [0.0] * len(group)
    for part in dict.fromkeys(k for p in parts for k in p):  # one barh per part
        widths = [p.get(part, 0) / size for p in parts]
        handles[part] = ax.barh(range(len(group)), widths, left=lefts, height=0.6,
                                color=_PART_COLORS[part])
        lefts = [a + b for a, b in zip(lefts, widths, strict=True)]
    for y, (r, left) in enumerate(zip(group, lefts, strict=True)):
        ax.text(left, y, f" {left:.3g} {unit}", va="center", fontsize=9)
        if r.get("peak_mem_bytes"):
            (handles["peak"],) = ax.plot([r["peak_mem_bytes"] / size], [y], "|",
                                         color="black", ms=18, mew=2)
    ax.set_xlim(0, peak / size * 1.25 if peak else 1)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.set_xlabel(f"memory ({unit})", fontsize=9)
    ax.tick_params(axis="y", labelleft=False)
    return handles


def _draw_speed_memory(fig: Figure, pairs: list[tuple], rows: list[dict],
                       title: str | None = None) -> None:
    configs = list(dict.fromkeys(r.get("config", "mlp") for r in rows))
    handles: dict[str, object] = {}
    for i, (config, (t_ax, m_ax)) in enumerate(zip(configs, pairs, strict=True)):
        group = [r for r in rows if r.get("config", "mlp") == config]
        _time_panel(t_ax, group)
        handles.update(_memory_panel(m_ax, group))
        t_ax.set_ylim(len(group) - 0.5, -0.5)  # first row on top, no autoscaling
        first = group[0]
        what = (f"MLP {first['layers']} x Linear({first['width']}), batch "
                f"{first['batch']}, {first['optimizer']}, measured on "
                f"{first['device']}" if "width" in first
                else f"{config}: recorded bench")
        t_ax.set_title(title if title and i == 0 else what, loc="left", fontsize=11)
    fig.legend(list(handles.values()), [_PART_LABELS[k] for k in handles],
               loc="lower center", ncol=3, fontsize=8, frameon=False)


def _speed_groups(rows: list[dict]) -> list[int]:
    configs = list(dict.fromkeys(r.get("config", "mlp") for r in rows))
    return [sum(r.get("config", "mlp") == c for r in rows) for c in configs]


def plot_speed_memory(results, *, title: str | None = None) -> Figure:
    """Bars of measured step time (left) and memory by part (right) per precision.

    `results`: rows of ``measure_speed_memory`` (memory split into weights,
    gradients, optimizer state, activations, autocast weight copies), or the rows
    or the whole report of ``bench`` (a recorded GPU run), whose memory is the
    parameters plus the bytes saved for backward, with the allocator's peak drawn
    as a black tick where recorded. One row of panels per config.

    Example:
        >>> fig = plot_speed_memory(measure_speed_memory(64, 16, ("fp32", "bf16")))
    """
    rows = _rows_of(results)
    fig, pairs = _speed_layout(_speed_groups(rows))
    _draw_speed_memory(fig, pairs, rows, title)
    return fig


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
        raise ValueError(f"could not read {text!r} as a number: type e.g. 1e-4, "
                         "-3.5, 65504, 2^-24 or inf") from None


def _short(value: float) -> str:
    """4 significant digits when they give the value back exactly, else all of them."""
    text = f"{value:.4g}"
    return text if float(text) == value or math.isnan(value) else repr(value)


def format_rows(value: float, names: Iterable[str] = EXPLORER_FORMATS) -> list[dict]:
    """What each format makes of `value`: bits, stored value, error, kind, zone.

    Example:
        >>> row = format_rows(1e-4, ["fp16"])[0]
        >>> row["exponent"], row["stored"], row["kind"]
        ('00001', 0.00010001659393310547, 'normal')
    """
    rows = []
    for name in names:
        f = _resolve(name)
        d = decompose(value, f)
        rows.append({"format": f.name, "sign": d.sign, "exponent": d.exponent,
                     "mantissa": d.mantissa, "stored": d.value, "kind": d.kind,
                     "rel_error": relative_error(value, f),
                     "zone": _zone_note(value, f)})
    return rows


def _bits_html(row: dict) -> str:
    return "&nbsp;".join(
        f'<span style="color:{BIT_COLORS[k]}">{row[k]}</span>'
        for k in ("sign", "exponent", "mantissa"))


def rows_html(rows: list[dict], highlight: str | None = None) -> str:
    """An HTML table of ``format_rows``: bits coloured sign | exponent | mantissa."""
    pad = "padding:2px 12px 2px 4px;text-align:left"  # columns never touch
    mono = f"{pad};font-family:monospace"
    titles = ["format", "bits: " + " | ".join(
        f'<span style="color:{c}">{k}</span>' for k, c in BIT_COLORS.items()),
        "stored value", "relative error", "what it is"]
    head = "<tr>" + "".join(f'<th style="{pad}">{t}</th>' for t in titles) + "</tr>"
    body = []
    for r in rows:
        shade = ("font-weight:bold;background:#eef3fb" if r["format"] == highlight
                 else "")
        rel = r["rel_error"]
        rel_text = "-" if math.isnan(rel) else f"{rel:.2e}" if rel else "0 (exact)"
        body.append(
            f'<tr style="{shade}"><td style="{pad}">{r["format"]}</td>'
            f'<td style="{mono}">{_bits_html(r)}</td>'
            f'<td style="{mono}">{r["stored"]:.9g}</td>'
            f'<td style="{pad}">{rel_text}</td>'
            f'<td style="{pad}">{html.escape(r["zone"])}</td></tr>')
    return ('<table style="border-collapse:collapse;font-size:13px">'
            + head + "".join(body) + "</table>")


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
        _resolve(fmt)
        self._syncing = False
        self.slider = widgets.FloatLogSlider(
            value=1e-4, base=10, min=-9, max=6, step=0.05, readout_format=".3g",
            description="|x|", continuous_update=False,
            layout=widgets.Layout(width="430px"))
        self.sign = widgets.ToggleButtons(
            options=[("+", 1), ("\u2212", -1)], value=1, description="sign",
            style={"button_width": "34px", "description_width": "40px"},
            # JupyterLab shows ToggleButtons as a block: label above the buttons
            layout=widgets.Layout(display="flex", flex_flow="row",
                                  align_items="center"))
        self.text = widgets.Text(
            description="type x", continuous_update=False,
            placeholder="1e-4, 65504, 2^-24, inf",
            layout=widgets.Layout(width="230px"))
        self.fmt = widgets.Dropdown(
            options=list(EXPLORER_FORMATS), value=fmt, description="number line",
            layout=widgets.Layout(width="230px"))
        self.table = widgets.HTML()
        self.value = value
        self.rows: list[dict] = []
        self._lines: dict[tuple, _NumberLine] = {}  # static number lines, rendered
        super().__init__([
            widgets.HBox([self.slider, self.sign]),
            widgets.HBox([self.text, self.fmt]),
            self.table,
        ])
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
                where = ("0 has no place on a log scale" if size == 0 else
                         f"{self.value:g} is beyond the slider's {lo:g} to {hi:g}")
                note = (f"{where}: the slider waits at its end; the table and the "
                        "plot show the typed value.")
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

    def __init__(self, grads: torch.Tensor, fmt: str = "fp16",
                 scale: float = 1.0) -> None:
        cast_outcome(grads, 1.0, fmt)  # checks grads and fmt before building anything
        if fmt not in HISTOGRAM_FORMATS:
            raise ValueError(f"fmt must be one of {', '.join(HISTOGRAM_FORMATS)}, "
                             f"got {fmt!r}")
        self.grads = grads.detach().flatten().float().cpu()
        options = [(f"2^{k} = {2.0**k:g}", 2.0**k) for k in SCALE_EXPONENTS]
        if scale not in [v for _, v in options]:
            raise ValueError(f"scale must be a power of two from 2^"
                             f"{SCALE_EXPONENTS[0]} to 2^{SCALE_EXPONENTS[-1]}, got "
                             f"{scale!r}")
        self.slider = widgets.SelectionSlider(
            options=options, value=scale, description="loss scale",
            continuous_update=False, layout=widgets.Layout(width="560px"))
        self.fmt = widgets.Dropdown(options=list(HISTOGRAM_FORMATS), value=fmt,
                                    description="format",
                                    layout=widgets.Layout(width="200px"))
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
        f = _resolve(self.fmt.value)
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
        cells = [("flush to 0", o.zero, "zero"), ("subnormal", o.subnormal,
                 "subnormal"), ("normal", o.normal, "normal"),
                 ("overflow", o.overflow, "overflow")]
        self.stats.value = (
            f"<b>{o.nonzero:,}</b> nonzero gradients x {scale:g} cast to <b>{fmt}</b>: "
            + " &nbsp; ".join(f'<span style="color:{ZONE_COLORS[z]}"><b>{p:.1%}</b>'
                              f"</span> {name}" for name, p, z in cells))
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

# CPU sizes: a bf16/fp16 matmul is ~150x slower than fp32 on an AVX2 CPU, so the
# largest choice (128 x 64) keeps a redraw of three precisions near 300 ms.
CPU_WIDTHS = (16, 32, 64, 128)
CPU_BATCHES = (4, 8, 16, 32, 64)
GPU_WIDTHS = (256, 512, 1024, 2048, 4096)
GPU_BATCHES = (16, 64, 256, 1024, 4096)


class SpeedMemoryExplorer(_Panel):
    """Train a tiny MLP in each chosen precision; bars of its step time and memory.

    Controls: ``width`` and ``batch`` (SelectionSliders), ``precision_boxes`` (a
    dict precision -> Checkbox), ``optimizer`` (Dropdown: adam, sgd), ``time_box``
    (Checkbox: time steps on each change; memory is always measured). Outputs:
    ``stats`` (HTML table), ``image`` (PNG of ``plot_speed_memory``). ``results``
    holds the rows of ``measure_speed_memory`` behind the picture: every number is
    measured in this redraw. `budget_ms` bounds the timing (see
    ``measure_speed_memory``).

    Example:
        >>> w = speed_memory_explorer()
        >>> w.batch.value = 64
        >>> [r["batch"] for r in w.results]
        [64, 64, 64]
    """

    def __init__(self, device: str | torch.device | None = None,
                 budget_ms: float | None = None) -> None:
        from amp_lessons.train import PRECISIONS, resolve_device, resolve_precision

        self.device = resolve_device("auto" if device is None else str(device))
        gpu = self.device.type == "cuda"
        self.budget_ms = budget_ms if budget_ms is not None else (1000 if gpu else 150)
        self.iters = 5 if gpu else 3
        self.warmup = 2 if gpu else 1
        widths, batches = (GPU_WIDTHS, GPU_BATCHES) if gpu else (CPU_WIDTHS,
                                                                 CPU_BATCHES)
        self.width = widgets.SelectionSlider(
            options=list(widths), value=widths[-2 if gpu else 2], description="width",
            continuous_update=False, layout=widgets.Layout(width="330px"))
        self.batch = widgets.SelectionSlider(
            options=list(batches), value=batches[1 if gpu else 2],
            description="batch", continuous_update=False,
            layout=widgets.Layout(width="330px"))
        self.optimizer = widgets.Dropdown(options=list(OPTIMIZERS), value="adam",
                                          description="optimizer",
                                          layout=widgets.Layout(width="190px"))
        self.precision_boxes: dict[str, widgets.Checkbox] = {}
        self.unavailable: dict[str, str] = {}
        for name in PRECISIONS:
            if name == "tf32" and not gpu:
                self.unavailable[name] = "TF32 exists on NVIDIA GPUs only"
                continue
            try:
                resolve_precision(name, self.device, warn=False)
            except RuntimeError as e:
                self.unavailable[name] = str(e)
                continue
            self.precision_boxes[name] = widgets.Checkbox(
                value=True, description=name, indent=False,
                layout=widgets.Layout(width="70px"))
        self.time_box = widgets.Checkbox(value=True, description="time steps",
                                         indent=False,
                                         layout=widgets.Layout(width="110px"))
        self.stats = widgets.HTML()
        self.results: list[dict] = []
        self._figures: dict[tuple, tuple] = {}
        super().__init__([
            widgets.HBox([self.width, self.batch, self.optimizer]),
            widgets.HBox([widgets.Label("precisions:"),
                          *self.precision_boxes.values(), self.time_box]),
            self.stats,
        ])
        for control in (self.width, self.batch, self.optimizer, self.time_box,
                        *self.precision_boxes.values()):
            control.observe(lambda _: self.redraw(), "value")
        self.redraw()

    @property
    def precisions(self) -> list[str]:
        return [n for n, box in self.precision_boxes.items() if box.value]

    def _draw(self) -> None:
        chosen = self.precisions
        if not chosen:
            self._say("Tick at least one precision to measure.", error=True)
            return
        self.results = measure_speed_memory(
            self.width.value, self.batch.value, chosen, self.device,
            self.optimizer.value, warmup=self.warmup, iters=self.iters,
            time_steps=self.time_box.value, budget_ms=self.budget_ms)
        self.stats.value = self._table()
        note = ""
        if self.device.type == "cpu" and ({"fp16", "bf16"} & set(chosen)):
            note = ("CPU: no tensor cores, so fp16/bf16 do not get the GPU's "
                    "speed-up (most CPUs emulate them, slower than fp32); tiny steps "
                    "time noisily, the dots show each one. The memory bars are exact "
                    "on every device.")
        self._say(note)
        self.image.value = self._render(self.results)

    def _render(self, rows: list[dict]) -> bytes:
        # one figure per number of bars, reused: new axes would cost ~100 ms a redraw
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        key = tuple(_speed_groups(rows))
        if key not in self._figures:
            fig, pairs = _speed_layout(key)
            self._figures[key] = (fig, pairs, FigureCanvasAgg(fig))
        fig, pairs, canvas = self._figures[key]
        _clear_data(fig, pairs)
        _draw_speed_memory(fig, pairs, rows)
        canvas.draw()
        return _encode_png(canvas.buffer_rgba(), canvas.get_width_height())

    def _table(self) -> str:
        base = next((r for r in self.results if r["precision"] == "fp32"), None)
        unit, size = _byte_unit(max(r["memory"]["total"] for r in self.results))
        cols = ["precision", "step ms", "speed vs fp32", "weights", "grads",
                "optimizer", "activations", "weight copies", "total"]
        cell = "padding:1px 9px;text-align:right"
        out = ['<table style="font-size:12px;border-collapse:collapse"><tr>'
               + "".join(f'<th style="{cell}">{c}</th>' for c in cols) + "</tr>"]
        for r in self.results:
            m, ms = r["memory"], r["step_ms"]
            speed = (f"{base['step_ms'] / ms:.2f}x" if ms and base and base["step_ms"]
                     else "-")
            cells = [r["precision"], "-" if ms is None else f"{ms:.3g}", speed,
                     *(f"{m[k] / size:.3g}" for k in ("weights", "gradients",
                       "optimizer_state", "activations", "weight_copies", "total"))]
            out.append("<tr>" + "".join(f'<td style="{cell}">{c}</td>' for c in cells)
                       + "</tr>")
        return "".join(out) + (
            f"</table><small>memory in {unit}, exact (saved-tensor hooks); step time: "
            "median of the steps timed after warm-up, in this redraw</small>")


def speed_memory_explorer(device: str | torch.device | None = None
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
    "GradientHistogramExplorer", "RangeExplorer", "SpeedMemoryExplorer",
    "figure_png", "format_rows", "fp16_range_explorer", "gradient_histogram_explorer",
    "measure_speed_memory", "parse_value", "plot_format_ranges",
    "plot_gradient_histogram", "plot_number_line", "plot_scale_trajectory",
    "plot_speed_memory", "rows_html", "speed_memory_explorer",
]
