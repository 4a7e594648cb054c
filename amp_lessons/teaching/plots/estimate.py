"""What AMP buys on a GPU (notebook 06): published speed-ups against the estimate,
and where each step's time goes.

Both pictures take ``amp_lessons.measure.published.Fit`` (``load_fit()``: the fit as
recorded from the published data file).
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from amp_lessons.i18n import N_, _
from amp_lessons.teaching.plots._render import _figure

REGIME_COLORS = {"compute": "#4c72b0", "memory": "#dd8452", "overhead": "#8c8c8c"}
# what the legend calls each regime, in the reader's language (the keys are code)
REGIME_LABELS = {
    "compute": N_("compute"),
    "memory": N_("memory"),
    "overhead": N_("overhead"),
}


def plot_published_vs_estimate(fit) -> Figure:
    """One labelled point per published row: its speed-up (x) against the
    estimate's (y); the diagonal is a perfect estimate, the band +/-35%."""
    fig = _figure(5.2, left=0.8, bottom=0.65)
    ax = fig.add_subplot()
    top = max(max(r.published, r.predicted) for r in fit.rows) * 1.15
    line = [0.9, top]
    ax.plot(line, line, color="black", lw=1)
    ax.fill_between(
        line,
        [v / 1.35 for v in line],
        [v * 1.35 for v in line],
        color="#dddddd",
        label=_("within 35%"),
    )
    ax.set(xscale="log", yscale="log", xlim=line, ylim=line)
    for role, marker in (("fit", "o"), ("check", "s")):
        rows = [r for r in fit.rows if r.role == role]
        ax.scatter(
            [r.published for r in rows],
            [r.predicted for r in rows],
            marker=marker,
            zorder=3,
            label=_("fitted row") if role == "fit" else _("check row (not fitted)"),
        )
    _label_points(
        ax, [(r.id.replace("_", " "), r.published, r.predicted) for r in fit.rows]
    )
    ax.set(
        xlabel=_("published AMP speed-up (NVIDIA, Hugging Face)"),
        ylabel=_("estimated speed-up"),
        title=_("AMP speed-up on one GPU: published vs first-principles estimate"),
    )
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    ax.set_xticks([1, 1.5, 2, 3, 4, 5, 6])
    ax.set_yticks([1, 1.5, 2, 3, 4, 5, 6])
    ax.legend(loc="upper left", fontsize=8)
    return fig


def _label_points(ax, points: list[tuple[str, float, float]]) -> None:
    """Label each point beside it, moving a label up or down (in steps of a line)
    until it overlaps no label placed before: dense clusters stay readable."""
    placed: list[tuple[float, float, float, float]] = []
    for text, x, y in sorted(points, key=lambda p: (-p[2], p[1])):
        px, py = ax.transData.transform((x, y))
        width, height = 3.6 * len(text), 8.0  # pixels of 6-point text at 100 dpi
        for dy in (2, -9, 11, -18, 20, -27, 29, -36, 38, -45):
            box = (px + 5, py + dy, px + 5 + width, py + dy + height)
            if not any(
                box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                for b in placed
            ):
                break
        placed.append(box)
        ax.annotate(
            text,
            (x, y),
            fontsize=6,
            xytext=(5, box[1] - py),
            textcoords="offset pixels",
            annotation_clip=False,
        )


def plot_breakdowns(fit) -> Figure:
    """Each row's estimated time per sample, full precision and AMP, split into
    compute, memory and overhead, as fractions of full precision's (AMP runs often
    take twice the batch: per sample is what the speed-up compares)."""
    rows = fit.rows
    fig = _figure(0.32 * len(rows) + 1.2, left=2.6, bottom=0.6)
    ax = fig.add_subplot()
    labels = []
    for i, r in enumerate(rows):
        amp_share = 1 / r.predicted / r.amp["seconds"]  # AMP's bar ends at 1/speed-up
        for j, (parts, scale) in enumerate(
            ((r.full, 1 / r.full["seconds"]), (r.amp, amp_share))
        ):
            y, left = 2 * i + j * 0.8, 0.0
            for regime, color in REGIME_COLORS.items():
                width = parts[f"{regime}_s"] * scale
                ax.barh(
                    y,
                    width,
                    left=left,
                    height=0.75,
                    color=color,
                    label=_(REGIME_LABELS[regime]) if i == 0 and j == 0 else None,
                )
                left += width
        labels.append((2 * i + 0.4, f"{r.id.replace('_', ' ')}  {r.predicted:.2f}x"))
    ax.set_yticks([y for y, _text in labels], [t for _y, t in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(
        _(
            "estimated time per sample, full precision's = 1 "
            "(upper bar: full precision, lower: AMP)"
        )
    )
    ax.set_title(_("Where a step's time goes"), loc="left")
    # above the bars, right of the title: inside, it would hide the last row
    ax.legend(
        loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, fontsize=8, frameon=False
    )
    return fig
