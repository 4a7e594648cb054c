"""How the course renders a picture: a fixed-size Figure without pyplot, its PNG
bytes, and blitting, which repaints only what moves over a static background.

A widget shows PNG bytes in an ``ipywidgets.Image``; ``_Blit`` keeps its redraws
cheap (the static part, ticks, zones and labels, is drawn once).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence

from matplotlib.figure import Figure

# One colour per zone in every picture (the same as underflow.py's histogram).
ZONE_COLORS = {"zero": "tab:red", "subnormal": "tab:orange", "normal": "tab:green",
               "overflow": "tab:purple"}  # fmt: skip
WIDTH_IN = 8.6  # inches at DPI: 860 px, inside a notebook cell at 1280 x 800
DPI = 100


def _figure(
    height_in: float,
    left: float = 0.75,
    right: float = 0.25,
    top: float = 0.45,
    bottom: float = 0.55,
) -> Figure:
    """A Figure WIDTH_IN wide with fixed margins in inches.

    Fixed margins rather than constrained layout: the layout pass measures every
    text twice and would double each widget redraw (~150 ms more on 2 cores).
    """
    fig = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI)
    fig.subplots_adjust(
        left=left / WIDTH_IN,
        right=1 - right / WIDTH_IN,
        top=1 - top / height_in,
        bottom=bottom / height_in,
    )
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
        buf, format="png", compress_level=1
    )
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
