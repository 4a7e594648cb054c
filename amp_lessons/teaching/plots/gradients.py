"""Gradients against a format's zones (notebook 02) and the loss scale over training
(notebooks 03, 05, 07): what a cast does to |g x scale|, and how the scale moves.

``_Histogram`` keeps the zones apart from the bars, so the gradient explorer
(``amp_lessons.teaching.widgets``) repaints only the bars when the scale moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from amp_lessons.core.formats import Format, resolve_format
from amp_lessons.i18n import N_, _, number
from amp_lessons.teaching.plots._render import (
    ZONE_COLORS,
    _Blit,
    _figure,
    _log2,
    _power_label,
)
from amp_lessons.teaching.plots.number_lines import _overflow_word, _zone_spans
from amp_lessons.teaching.underflow import CastOutcome, cast_outcome, log2_histogram


def _nonzero_float(grads: torch.Tensor) -> torch.Tensor:
    # cast_outcome has already checked grads; the same float32 product it casts
    g = grads.detach().flatten().float().cpu()
    return g[g != 0]


class _Histogram:
    """The static zones of one format over a fixed axis, and the moving bars."""

    def __init__(
        self, fmt: Format, xlim: tuple[float, float], ymax: float | None = None
    ) -> None:
        self.fmt, (lo, hi) = fmt, xlim
        self.fig = fig = _figure(3.5, left=0.75, right=0.2, top=0.35, bottom=0.95)
        self.ax = ax = fig.add_subplot()
        sub, normal = _power_label(fmt.min_subnormal), _power_label(fmt.min_normal)
        half = _power_label(fmt.min_subnormal / 2)  # ties at it round to even: 0
        words = {
            "zero": _("flush to 0 (up to {half})").format(half=half),
            "subnormal": _("subnormal ({sub} to {normal})").format(
                sub=sub, normal=normal
            ),
            "normal": _("normal ({normal} to {max})").format(
                normal=normal, max=f"{fmt.max:g}"
            ),
            "overflow": f"{_('overflow')} {_overflow_word(fmt)}",
        }
        for name, a, b in _zone_spans(fmt, lo, hi):
            ax.axvspan(
                a, b, color=ZONE_COLORS[name], alpha=0.2, lw=0, label=words[name]
            )
        # the legend names the zones and never changes; the shares go in the title
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncol=4,
            fontsize=8,
            frameon=False,
            title=_("{name} zones").format(name=fmt.name),
            title_fontsize=8,
        )
        self.bars = ax.stairs([0], [lo, lo + 1], fill=True, color="0.3", alpha=0.85)
        self.off = ax.text(
            0.99, 0.97, "", ha="right", va="top", fontsize=8, transform=ax.transAxes
        )
        ax.set_xlim(lo, hi)
        if ymax is not None:
            ax.set_ylim(0, ymax)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=20))
        ax.set_xlabel(_("log2 |gradient x scale|   (one bar per power of two)"))
        ax.set_ylabel(_("gradients per binade"))
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
        self.off.set_text(
            _("{off} values off this axis").format(off=off) if off else ""
        )
        self.title.set_text(
            _(
                "{nonzero} gradients x {scale} cast to {fmt}: {zero} flush to 0 | "
                "{subnormal} subnormal | {normal} normal | {overflow} overflow"
            ).format(
                nonzero=number(outcome.nonzero),
                scale=_power_label(scale),
                fmt=self.fmt.name,
                zero=f"{outcome.zero:.1%}",
                subnormal=f"{outcome.subnormal:.1%}",
                normal=f"{outcome.normal:.1%}",
                overflow=f"{outcome.overflow:.1%}",
            )
        )
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
    f = resolve_format(fmt)
    if xlim is None:
        edges = log2_histogram(_nonzero_float(grads) * float(scale)).edges
        xlim = (_log2(f.min_subnormal) - 4, _log2(f.max) + 4)
        if edges.numel() > 1:
            xlim = (
                min(xlim[0], edges[0].item() - 1),
                max(xlim[1], edges[-1].item() + 1),
            )
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
            raise ValueError(
                f"skipped has {len(items)} flags for {n} scales: pass "
                "one bool per step, or the step numbers (1-based)"
            )
        return items
    mask = [False] * n
    for s in items:
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= n:
            raise ValueError(
                f"skipped step {s!r} is not a step number in 1..{n} "
                "(or pass one bool per step)"
            )
        mask[s - 1] = True
    return mask


def plot_scale_trajectory(
    scales,
    skipped=None,
    *,
    reference: Sequence[float] | None = None,
    label: str = N_("loss scale"),
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
    values, skipped = _scale_values(scales, skipped)
    mask = _skipped_mask(skipped, len(values))
    steps = list(range(1, len(values) + 1))
    fig = _figure(3.0)
    ax = fig.add_subplot()
    ax.step(steps, values, where="post", color="tab:blue", lw=2, label=_(label))
    if reference is not None:
        _draw_reference(ax, reference, reference_label)
    num_skipped = _mark_skipped(ax, steps, values, mask)
    _label_scale_axes(ax, values, num_skipped, title)
    return fig


def _scale_values(scales, skipped) -> tuple[list[float], object]:
    """The scales as floats, checked, and the skipped flags (a ``TrainResult``
    brings its own unless `skipped` is given)."""
    if hasattr(scales, "records"):  # a TrainResult
        if skipped is None:
            skipped = [r.skipped for r in scales.records]
        scales = scales.scales
    values = [
        float(s)
        for s in (scales.tolist() if isinstance(scales, torch.Tensor) else scales)
    ]
    if not values:
        raise ValueError("scales is empty: pass the scale of each step")
    if not all(s > 0 and math.isfinite(s) for s in values):
        raise ValueError("every scale must be positive and finite")
    return values, skipped


def _draw_reference(ax, reference: Sequence[float], label: str) -> None:
    """A second trajectory, thin and dashed so the first shows through it."""
    ref = [float(s) for s in reference]
    ax.step(
        range(1, len(ref) + 1),
        ref,
        where="post",
        color="black",
        lw=1,
        ls="--",
        label=label,
    )


def _mark_skipped(ax, steps: list[int], values: list[float], mask: list[bool]) -> int:
    """A red cross on each skipped step's scale; returns how many there are."""
    bad = [(s, v) for s, v, m in zip(steps, values, mask, strict=True) if m]
    if bad:
        ax.plot(
            *zip(*bad, strict=True),
            "x",
            color="tab:red",
            ms=8,
            mew=2,
            label=_("skipped step (inf/nan gradients): {n}").format(n=len(bad)),
        )
    return len(bad)


def _label_scale_axes(
    ax, values: list[float], num_skipped: int, title: str | None
) -> None:
    """A log2 axis labelled in powers of two, the legend, and a title that sums up
    the run (first and last scale, steps skipped) unless `title` is given."""
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _power_label(y)))
    ax.set_xlabel(_("optimizer step"))
    ax.set_ylabel(_("loss scale (log2 axis)"))
    ax.set_xlim(0.5, len(values) + 0.5)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(
        title
        or _("Loss scale over {n} steps: {first} -> {last}, {skipped} skipped").format(
            n=len(values),
            first=_power_label(values[0]),
            last=_power_label(values[-1]),
            skipped=num_skipped,
        ),
        fontsize=11,
    )
