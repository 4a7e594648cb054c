"""Training curves: the loss of each run per optimizer step, skipped steps marked
(notebook 05)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.figure import Figure

from amp_lessons.core.train import StepRecord
from amp_lessons.i18n import _


def plot_losses(records_by_precision: dict[str, Sequence[StepRecord]], ax=None):
    """Loss per optimizer step, one line per run, skipped steps marked; a Figure.

    The y axis is logarithmic, so a loss falling from 1.1 to 0.1 reads as a steady
    slope. A notebook with ``%matplotlib inline`` shows it by leaving it as a
    cell's last expression.

    Example::

        runs = {p: train(TrainConfig(precision=p, device="cpu")).records
                for p in ("fp32", "bf16", "fp16")}
        fig = plot_losses(runs)  # 3 lines; an "x" on each skipped fp16 step
    """
    if not records_by_precision:
        raise ValueError(
            "plot_losses needs at least one run: pass "
            "{name: result.records}, e.g. {'bf16': result.records}"
        )
    if ax is None:
        fig = Figure(figsize=(7, 3.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    for name, records in records_by_precision.items():
        if not records or not all(isinstance(r, StepRecord) for r in records):
            raise ValueError(
                f"run {name!r}: expected a non-empty list of StepRecord "
                "(TrainResult.records)"
            )
        steps = [r.step for r in records]
        (line,) = ax.plot(steps, [r.loss for r in records], label=name, lw=1.2)
        skipped = [r for r in records if r.skipped]
        if skipped:
            # a skipped step's loss is still the forward pass's: finite or not
            ax.plot(
                [r.step for r in skipped],
                [r.loss if math.isfinite(r.loss) else float("nan") for r in skipped],
                "x",
                color=line.get_color(),
                label=_("{name}: skipped step").format(name=name),
            )
    ax.set_yscale("log")
    ax.set_xlabel(_("optimizer step"))
    ax.set_ylabel(_("training loss"))
    ax.set_title(_("training loss by precision"))
    ax.legend(fontsize="small")
    return fig
