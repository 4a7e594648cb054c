"""A format's number line (its four zones to scale, a value marked) and every
format's range on one axis: the pictures of notebook 01.

``_NumberLine`` keeps the static line apart from the marker, so the range explorer
(``amp_lessons.teaching.widgets``) repaints only the marker when the value moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from amp_lessons.core.formats import Format, decompose, resolve_format, zones
from amp_lessons.i18n import _
from amp_lessons.teaching.plots._render import (
    DPI,
    ZONE_COLORS,
    _Blit,
    _figure,
    _log2,
    _power_label,
)


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
        return _("not a number")
    if zone == "zero":
        return _("zero") if value == 0 else _("flushed to 0")
    if zone == "overflow":
        return {
            "inf": _("overflow: inf"),
            "nan": _("overflow: nan"),
            "saturate": _("overflow: saturated to {max}").format(max=f"{fmt.max:g}"),
        }[fmt.overflow]
    return {"subnormal": _("subnormal"), "normal": _("normal")}.get(zone, zone)


def _short(value: float) -> str:
    """4 significant digits when they give the value back exactly, else all of them."""
    text = f"{value:.4g}"
    return text if float(text) == value or math.isnan(value) else repr(value)


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
        fmt.overflow
    ]


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
        ax.set_xlabel(_("log2 |x|   (the negative half is its mirror image)"))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=14))
        top = ax.secondary_xaxis(
            "top", functions=(lambda t: t * math.log10(2), lambda t: t / math.log10(2))
        )
        top.set_xlabel("log10 |x|", fontsize=8, labelpad=2)
        top.tick_params(labelsize=8)
        top.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=12))
        # the marker: moved by mark(), redrawn alone in the explorer
        xaxis = ax.get_xaxis_transform()
        self.line = ax.vlines(lo, 0.3, 1, color="black", lw=2.2, transform=xaxis)
        (self.tip,) = ax.plot(
            [lo], [0.34], marker="v", color="black", ms=9, transform=xaxis
        )
        self.label = ax.text(
            lo,
            0.4,
            "",
            fontsize=9,
            va="bottom",
            transform=xaxis,
            bbox={
                "boxstyle": "round,pad=0.3",
                "fc": "white",
                "ec": "0.5",
                "alpha": 0.92,
            },
        )
        self.title = ax.set_title(" ", fontsize=11)
        self.blit = _Blit(fig, [self.line, self.tip, self.label, self.title])

    def _zones(self) -> None:
        f, ax, lo, hi = self.fmt, self.ax, self.lo, self.hi
        fig = self.fig
        axes_px = (
            fig.get_figwidth() * DPI * (fig.subplotpars.right - fig.subplotpars.left)
        )
        for name, a, b in _zone_spans(f, lo, hi):
            ax.axvspan(a, b, color=ZONE_COLORS[name], alpha=0.22, lw=0)
            label = {
                "zero": _("flush to 0"),
                "subnormal": _("subnormal"),
                "normal": _("normal"),
                "overflow": f"{_('overflow')} {_overflow_word(f)}",
            }[name]
            style = {
                "ha": "center",
                "fontsize": 9,
                "color": ZONE_COLORS[name],
                "fontweight": "bold",
                "transform": ax.get_xaxis_transform(),
            }
            if (b - a) / (hi - lo) * axes_px > 7.5 * len(label):
                ax.text((a + b) / 2, 0.9, label, va="center", **style)
            else:  # a narrow zone (fp8's subnormals, bf16's): written upright
                ax.text((a + b) / 2, 0.97, label, va="top", rotation=90, **style)

    def _edges(self) -> None:
        f, ax = self.fmt, self.ax
        # each label on the side away from its neighbour, so they never overlap
        edges = [
            (
                f.min_subnormal,
                "right",
                (_power_label(f.min_subnormal), _("min subnormal")),
            ),
            (f.min_normal, "left", (_power_label(f.min_normal), _("min normal"))),
            (f.max, "right", (f"{f.max:g}", _("max"))),
        ]
        for x, side, lines in edges:
            ax.axvline(_log2(x), color="0.3", lw=0.8, ls=":")
            text = "\n".join(f" {t}" if side == "left" else f"{t} " for t in lines)
            ax.text(
                _log2(x),
                0.03,
                text,
                fontsize=8,
                va="bottom",
                ha=side,
                color="0.2",
                transform=ax.get_xaxis_transform(),
            )

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
        stored = _("stored {value}").format(value=f"{decompose(value, f).value:.6g}")
        self.label.set_text(f"{text}\n{stored}\n{zone}")
        self.title.set_text(
            _(
                "{name} ({exponent} exponent, {mantissa} mantissa bits): {x} is {zone}"
            ).format(
                name=f.name,
                exponent=f.exponent_bits,
                mantissa=f.mantissa_bits,
                x=text,
                zone=zone,
            )
        )


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
    f = resolve_format(fmt)
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
    formats = [resolve_format(n) for n in names]
    if not formats:
        raise ValueError("names is empty: pass format names such as ('fp16', 'bf16')")
    fig = _figure(1.0 + 0.55 * len(formats), left=1.65, right=0.2, top=0.35, bottom=0.5)
    ax = fig.add_subplot()
    for row, f in enumerate(formats):
        _draw_range_bar(ax, row, f)
    _label_range_axes(ax, formats)
    return fig


def _draw_range_bar(ax, row: int, f: Format) -> None:
    """Row `row`: `f`'s subnormal then normal range, its smallest subnormal written
    left of the bar and its max right of it."""
    sub_lo, normal_lo, top = (
        _log2(f.min_subnormal),
        _log2(f.min_normal),
        _log2(f.max),
    )
    ax.barh(
        row,
        normal_lo - sub_lo,
        left=sub_lo,
        color=ZONE_COLORS["subnormal"],
        alpha=0.75,
        height=0.6,
        label=_("subnormal") if row == 0 else None,  # one legend entry per zone
    )
    ax.barh(
        row,
        top - normal_lo,
        left=normal_lo,
        color=ZONE_COLORS["normal"],
        alpha=0.75,
        height=0.6,
        label=_("normal") if row == 0 else None,
    )
    ax.text(
        sub_lo - 1.5,
        row,
        _power_label(f.min_subnormal),
        ha="right",
        va="center",
        fontsize=8,
    )
    ax.text(top + 1.5, row, f"{f.max:g}", ha="left", va="center", fontsize=8)


def _label_range_axes(ax, formats: list[Format]) -> None:
    """One tick per format (name, bit layout, eps), top to bottom, and an x axis
    wide enough for the limits written beside the bars."""
    ax.axvline(0, color="0.3", lw=0.8, ls=":")
    ax.set_yticks(
        range(len(formats)),
        [
            f"{f.name}\n1+{f.exponent_bits}+{f.mantissa_bits} {_('bits')}, eps "
            f"{_power_label(f.eps)}"
            for f in formats
        ],
    )
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    lo = min(_log2(f.min_subnormal) for f in formats)
    hi = max(_log2(f.max) for f in formats)
    lo, hi = lo - 0.12 * (hi - lo), hi + 0.16 * (hi - lo)  # room for the labels
    ax.set_xlim(lo, hi)
    ax.set_xlabel(_("log2 |x|   (dotted line: 1.0)"))
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(
        _("Positive range of each format: subnormals, then normals up to max"),
        fontsize=11,
    )
