"""The course's pictures: every ``plot_*`` returns a matplotlib ``Figure`` drawn from
real casts and measurements.

Built without pyplot, a figure works headless and never piles up in pyplot's figure
list; a notebook displays one by leaving it as the cell's last expression. One module
per picture, in lesson order:

* ``number_lines``: ``plot_number_line``, ``plot_format_ranges`` (notebook 01);
* ``gradients``: ``plot_gradient_histogram`` (02), ``plot_scale_trajectory`` (03);
* ``training``: ``plot_losses`` (05);
* ``speed_memory``: ``plot_speed_memory`` (06);
* ``estimate``: ``plot_published_vs_estimate``, ``plot_breakdowns`` (06);
* ``fp8``: ``plot_scaling_stream``, ``plot_row_errors`` (11);
* ``_render``: fixed-size figures, ``figure_png`` and blitting, shared with
  ``amp_lessons.teaching.widgets``, whose explorers redraw these pictures.

Import from here: ``from amp_lessons.teaching.plots import plot_number_line``.
Not covered here: interactive (zoomable) matplotlib backends.
"""

from amp_lessons.teaching.plots._render import DPI, WIDTH_IN, ZONE_COLORS, figure_png
from amp_lessons.teaching.plots.estimate import (
    plot_breakdowns,
    plot_published_vs_estimate,
)
from amp_lessons.teaching.plots.fp8 import plot_row_errors, plot_scaling_stream
from amp_lessons.teaching.plots.gradients import (
    plot_gradient_histogram,
    plot_scale_trajectory,
)
from amp_lessons.teaching.plots.number_lines import plot_format_ranges, plot_number_line
from amp_lessons.teaching.plots.speed_memory import MEMORY_PARTS, plot_speed_memory
from amp_lessons.teaching.plots.training import plot_losses

__all__ = [
    "DPI",
    "MEMORY_PARTS",
    "WIDTH_IN",
    "ZONE_COLORS",
    "figure_png",
    "plot_breakdowns",
    "plot_published_vs_estimate",
    "plot_format_ranges",
    "plot_gradient_histogram",
    "plot_losses",
    "plot_number_line",
    "plot_row_errors",
    "plot_scale_trajectory",
    "plot_scaling_stream",
    "plot_speed_memory",
]
