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
  precision (``measure.speed_memory``), its step time and its memory, part by part,
  measured on each change.

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

from amp_lessons.teaching.widgets.histogram import (
    GradientHistogramExplorer,
    gradient_histogram_explorer,
)
from amp_lessons.teaching.widgets.range_explorer import (
    EXPLORER_FORMATS,
    RangeExplorer,
    format_rows,
    fp16_range_explorer,
    parse_value,
    rows_html,
)
from amp_lessons.teaching.widgets.speed_memory import (
    SpeedMemoryExplorer,
    speed_memory_explorer,
)

__all__ = [
    "EXPLORER_FORMATS",
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
