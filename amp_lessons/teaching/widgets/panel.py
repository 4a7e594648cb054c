"""What the course's widgets share: a panel whose picture is PNG bytes, redrawn
and timed on each change."""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence

import ipywidgets as widgets


class Panel(widgets.VBox):
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
