"""Step time and memory, part by part, per precision (notebook 06): the picture of
``speed_memory.measure_speed_memory`` rows and of recorded bench reports.

The speed/memory explorer (``amp_lessons.teaching.widgets``) reuses one figure per
layout and redraws its data with ``_clear_data`` and ``_draw_speed_memory``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from amp_lessons.core.memory import byte_unit
from amp_lessons.i18n import N_, _
from amp_lessons.teaching.plots._render import _figure

# MemoryBreakdown field -> legend label (translated where it is shown), colour
MEMORY_PARTS = {
    "weights": (N_("weights (fp32)"), "#4c72b0"),
    "gradients": (N_("gradients (fp32)"), "#55a868"),
    "optimizer_state": (N_("optimizer state (fp32)"), "#8172b2"),
    "buffers": (N_("buffers"), "#937860"),
    "activations": (N_("activations kept for backward"), "#dd8452"),
    "weight_copies": (N_("autocast weight copies"), "#c44e52"),
}


def _rows_of(results) -> list[dict]:
    rows = results["results"] if isinstance(results, dict) else list(results)
    if not rows:
        raise ValueError(
            "no results to plot: pass measure_speed_memory() rows, "
            "bench rows, or a bench report"
        )
    for r in rows:
        if not isinstance(r, dict) or "precision" not in r:
            raise ValueError(
                "each result must be a dict with at least 'precision' "
                "(rows of measure_speed_memory or bench)"
            )
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


_PART_LABELS = {
    **{k: v[0] for k, v in MEMORY_PARTS.items()},
    "saved": N_("saved for backward (activations + weight copies)"),
    "peak": N_("allocator peak (CUDA)"),
}
_PART_COLORS = {**{k: v[1] for k, v in MEMORY_PARTS.items()}, "saved": "#dd8452"}


def _speed_layout(
    bars: Sequence[int], words: bool = True
) -> tuple[Figure, list[tuple]]:
    """A figure with a (time, memory) pair of axes per config, `bars` rows each;
    with `words`, room for the titles and the legend (see `_draw_speed_memory`)."""
    body = sum(0.45 * n + 0.95 for n in bars)
    top, bottom = (0.45, 1.05) if words else (0.15, 0.55)
    fig = _figure(body + top + bottom, left=0.6, right=0.25, top=top, bottom=bottom)
    grid = fig.add_gridspec(
        len(bars),
        2,
        width_ratios=(1, 1.5),
        wspace=0.06,
        hspace=0.95 / (body / len(bars)),
        height_ratios=bars,
    )
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


def _time_panel(ax, group: list[dict], words: bool = True) -> str:
    """Bars of step time; returns what bars and dots are (in the x label with
    `words`, else for the caller to say)."""
    ys = list(range(len(group)))
    timed = [r for r in group if r.get("step_ms") is not None]
    for y, r in zip(ys, group, strict=True):
        if r.get("step_ms") is None:
            ax.text(
                0.03,
                y,
                _("not timed"),
                va="center",
                fontsize=9,
                color="0.4",
                transform=ax.get_yaxis_transform(),
            )
            continue
        times = r.get("times_ms") or []
        ax.barh(y, r["step_ms"], color="#4c72b0", height=0.6)
        ax.plot(times, [y] * len(times), "o", color="black", ms=3)
        ax.text(
            max([r["step_ms"], *times]),
            y,
            f"  {r['step_ms']:.3g} ms",
            va="center",
            fontsize=9,
        )
    top = max(
        (max([r["step_ms"], *(r.get("times_ms") or [])]) for r in timed), default=1.0
    )
    ax.set_xlim(0, top * 1.5)
    ax.tick_params(axis="x", bottom=bool(timed), labelbottom=bool(timed))
    counts = sorted({len(r.get("times_ms") or []) for r in timed})
    steps = (
        _(" of {counts} step") if counts == [1] else _(" of {counts} steps")
    ).format(counts="/".join(map(str, counts)))
    note = _("bar: median{steps}; dots: each step").format(
        steps=steps if counts else ""
    )
    ax.set_xlabel(
        _("step time, ms ({note})").format(note=note) if words else _("step time (ms)"),
        fontsize=9,
    )
    ax.set_yticks(ys, [r["precision"] for r in group])
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
    return note


def _memory_panel(ax, group: list[dict]) -> dict[str, object]:
    parts = [_parts_of(r) for r in group]
    peak = max(
        [sum(p.values()) for p in parts] + [r.get("peak_mem_bytes") or 0 for r in group]
    )
    unit, size = byte_unit(peak)
    handles: dict[str, object] = {}
    lefts = [0.0] * len(group)
    for part in dict.fromkeys(k for p in parts for k in p):  # one barh per part
        widths = [p.get(part, 0) / size for p in parts]
        handles[part] = ax.barh(
            range(len(group)), widths, left=lefts, height=0.6, color=_PART_COLORS[part]
        )
        lefts = [a + b for a, b in zip(lefts, widths, strict=True)]
    for y, (r, left) in enumerate(zip(group, lefts, strict=True)):
        ax.text(left, y, f" {left:.3g} {unit}", va="center", fontsize=9)
        if r.get("peak_mem_bytes"):
            (handles["peak"],) = ax.plot(
                [r["peak_mem_bytes"] / size], [y], "|", color="black", ms=18, mew=2
            )
    ax.set_xlim(0, peak / size * 1.25 if peak else 1)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.set_xlabel(_("memory ({unit})").format(unit=unit), fontsize=9)
    ax.tick_params(axis="y", labelleft=False)
    return handles


def _draw_speed_memory(
    fig: Figure,
    pairs: list[tuple],
    rows: list[dict],
    title: str | None = None,
    words: bool = True,
) -> dict:
    """Draw `rows` into `_speed_layout`'s axes.

    Without `words` the figure holds the data only (bars, their values, the axes):
    no titles, no legend, a short time label. Text is most of what matplotlib
    spends drawing, so the panel says these in HTML instead (~35 -> ~20 ms a
    redraw). Returns them either way: ``{"titles": [...], "notes": [...], "parts":
    [memory parts drawn, the legend's order]}``.
    """
    configs = list(dict.fromkeys(r.get("config", "mlp") for r in rows))
    handles: dict[str, object] = {}
    titles, notes = [], []
    for i, (config, (t_ax, m_ax)) in enumerate(zip(configs, pairs, strict=True)):
        group = [r for r in rows if r.get("config", "mlp") == config]
        notes.append(_time_panel(t_ax, group, words))
        handles.update(_memory_panel(m_ax, group))
        t_ax.set_ylim(len(group) - 0.5, -0.5)  # first row on top, no autoscaling
        first = group[0]
        what = (
            _(
                "MLP {layers} x Linear({width}), batch {batch}, {optimizer}, "
                "measured on {device}"
            ).format(
                layers=first["layers"],
                width=first["width"],
                batch=first["batch"],
                optimizer=first["optimizer"],
                device=first["device"],
            )
            if "width" in first
            else _("{config}: recorded bench").format(config=config)
        )
        titles.append(title if title and i == 0 else what)
        if words:
            t_ax.set_title(titles[-1], loc="left", fontsize=11)
    if words:
        fig.legend(
            list(handles.values()),
            [_(_PART_LABELS[k]) for k in handles],
            loc="lower center",
            ncol=3,
            fontsize=8,
            frameon=False,
        )
    return {"titles": titles, "notes": notes, "parts": list(handles)}


def legend_html(parts: Sequence[str], note: str = "") -> str:
    """The legend of the memory parts `_draw_speed_memory` drew, as HTML (the panel
    shows it under its picture): a coloured square per part, a tick for the
    allocator's peak; `note` (what the time bars are) on the line above.

    Example: ``"weights (fp32)" in legend_html(["weights"])``.
    """
    items = []
    for part in parts:
        color = _PART_COLORS.get(part)
        mark = (
            f'<span style="display:inline-block;width:12px;height:12px;'
            f'background:{color};margin-right:5px;vertical-align:-1px"></span>'
            if color
            else '<b style="margin-right:5px">|</b>'
        )
        items.append(
            f'<span style="margin-right:16px;white-space:nowrap">{mark}'
            f"{html.escape(_(_PART_LABELS[part]))}</span>"
        )
    head = (
        f'<div style="color:#555">{_("time:")} {html.escape(note)}</div>'
        if note
        else ""
    )
    return (
        f'<div style="font-size:12px;padding-left:60px">{head}'
        f"{_('memory:')} {''.join(items)}</div>"
    )


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
