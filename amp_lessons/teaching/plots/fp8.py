"""fp8 scales over time and across rows (notebook 11): what delayed scaling does on a
spike, and what one outlier row does to a single tensorwise scale.

Both pictures are drawn from ``amp_lessons.core.fp8_scaling``'s measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from amp_lessons.i18n import N_, _
from amp_lessons.teaching.plots._render import _figure

# the methods' names, as the legends show them
METHODS = {"dynamic": N_("dynamic"), "delayed": N_("delayed")}
FITS = N_("{method}: amax the scale fits (448 / scale)")
STREAM_TITLE = N_(
    "Dynamic scaling reads each tensor; delayed scaling predicts from its history"
)
COLORS = {"dynamic": "tab:blue", "delayed": "tab:orange",
          "tensorwise": "tab:red", "rowwise": "tab:green"}  # fmt: skip


def plot_scaling_stream(rows: Sequence[dict]) -> Figure:
    """Dynamic vs delayed scaling over a stream of tensors (``compare_scaling`` rows):
    top, each tensor's amax and the amax each scale was made for (max / scale);
    bottom, the relative error of the fp8 round trip, saturated steps marked.

    Example:
        >>> from amp_lessons.core.fp8_scaling import compare_scaling
        >>> fig = plot_scaling_stream(compare_scaling([1.0, 1.0, 100.0, 1.0]))
        >>> [ax.get_ylabel() for ax in fig.axes]
        ['amax (log scale)', 'relative error']
    """
    if not rows:
        raise ValueError("rows is empty: pass compare_scaling(...)'s list of steps")
    steps = [r["step"] for r in rows]
    fig = _figure(5.2, left=0.9, right=0.25, top=0.4, bottom=0.55)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(steps, [r["amax"] for r in rows], "k.-", lw=1, label=_("tensor's amax"))
    for name in ("dynamic", "delayed"):
        method = _(METHODS[name])
        planned = [448.0 / r[f"{name}_scale"] for r in rows]  # e4m3's max / scale
        top.step(
            steps,
            planned,
            where="mid",
            color=COLORS[name],
            lw=1.2,
            label=_(FITS).format(method=method),
        )
        bottom.plot(
            steps,
            [r[f"{name}_error"] for r in rows],
            ".-",
            lw=1.2,
            color=COLORS[name],
            label=method,
        )
        hit = [r for r in rows if r[f"{name}_saturated"] > 0]
        if hit:
            bottom.plot(
                [r["step"] for r in hit],
                [r[f"{name}_error"] for r in hit],
                "x",
                ms=9,
                color=COLORS[name],
                label=_("{method}: saturated").format(method=method),
            )
    top.set_yscale("log")
    top.set_ylabel(_("amax (log scale)"))
    top.legend(fontsize=8, loc="upper right")
    top.set_title(_(STREAM_TITLE), fontsize=11)
    bottom.set_yscale("log")
    bottom.set_ylabel(_("relative error"))
    bottom.set_xlabel(_("step"))
    bottom.legend(fontsize=8, loc="upper right")
    return fig


def plot_row_errors(
    errors: dict[str, list[float]], outlier_row: int | None = None
) -> Figure:
    """Round-trip error per row with one scale per tensor and one per row
    (``row_errors``), on a log axis; ``outlier_row`` is labelled.

    Example:
        >>> from amp_lessons.core.fp8_scaling import outlier_matrix, row_errors
        >>> fig = plot_row_errors(row_errors(outlier_matrix()), outlier_row=3)
        >>> fig.axes[0].get_xlabel()
        'row of the matrix'
    """
    if "tensorwise" not in errors or "rowwise" not in errors:
        raise ValueError(
            "errors must be row_errors(...)'s dict, with 'tensorwise' "
            "and 'rowwise' lists"
        )
    n = len(errors["tensorwise"])
    fig = _figure(3.2, left=0.9, right=0.25, top=0.4, bottom=0.6)
    ax = fig.add_subplot()
    width = 0.4
    for offset, name, what in (
        (-width / 2, "tensorwise", _("one scale")),
        (width / 2, "rowwise", _("a scale per row")),
    ):
        ax.bar(
            [i + offset for i in range(n)],
            errors[name],
            width,
            color=COLORS[name],
            label=f"{name}: {what}",
        )
    ax.set_yscale("log")
    top = max(errors["tensorwise"] + errors["rowwise"])
    ax.set_ylim(top=top * 4)  # room above the bars for the legend
    outlier = _("(outlier)")
    labels = [f"{i}\n{outlier}" if i == outlier_row else str(i) for i in range(n)]
    ax.set_xticks(range(n), labels)
    ax.set_xlabel(_("row of the matrix"))
    ax.set_ylabel(_("relative error"))
    ax.legend(fontsize=8, loc="upper center", ncols=2)
    ax.set_title(_("e4m3 round trip of each row"), fontsize=11)
    return fig
