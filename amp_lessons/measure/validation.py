"""How well the estimate predicts published rows it was never fitted on.

The fit (``amp_lessons.measure.published``) sees only the ``fit`` rows of the data
file; every other row is a ``check`` row. A fit's own rows flatter it, so the report
here is on the rows it never saw, beside what a guess with no model at all scores:

* **check rows**: median error of the predicted AMP speed-up, and the share within
  35%;
* **the naive guess**: one speed-up per GPU generation, the median of that
  generation's fit rows (what a reader could guess from the fit rows alone);
* **per generation** (Volta: V100, Ampere: A100): both medians, and the rank
  correlation (Spearman) between published and predicted speed-ups, which says
  whether the estimate can tell which model gains more;
* **leave one family out**: each model family's rows predicted by a fit that saw
  none of that family's rows.

``python -m amp_lessons.measure.validation`` prints the report.

Example:
    >>> GENERATIONS["A100-SXM4-80GB"]
    'Ampere'
"""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass

import torch

from amp_lessons.i18n import _
from amp_lessons.measure import published

GENERATIONS = {
    "V100-SXM2-16GB": "Volta",
    "V100-SXM2-32GB": "Volta",
    "T4": "Turing",
    "A100-SXM4-40GB": "Ampere",
    "A100-SXM4-80GB": "Ampere",
    "L4": "Ada",
    "RTX-4090": "Ada",
    "H100-SXM5-80GB": "Hopper",
    "H200-SXM-141GB": "Hopper",
}


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation: ``spearman([1, 2, 3], [10, 30, 20])`` -> 0.5."""

    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):  # ties share their mean rank
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    var = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / var if var else float("nan")


@dataclass(frozen=True)
class Generation:
    """One GPU generation's check rows."""

    name: str
    rows: int
    median_error: float
    naive_median_error: float
    spearman: float


@dataclass(frozen=True)
class Validation:
    check_rows: int
    median_error: float
    within_35: float  # share of check rows within 35% of the published speed-up
    naive_median_error: float
    generations: list[Generation]
    family_out: dict[str, float]  # family -> median error with the family unseen

    def summary(self) -> str:
        """The figures the lesson and the README state."""
        per = "; ".join(
            _(
                "{generation} ({rows} rows): median {median:.0%}, naive {naive:.0%}, "
                "rank correlation {rho:.2f}"
            ).format(
                generation=g.name,
                rows=g.rows,
                median=g.median_error,
                naive=g.naive_median_error,
                rho=g.spearman,
            )
            for g in self.generations
        )
        text = _(
            "{rows} check rows, never fitted: median error {median:.0%}, "
            "{within:.0%} within 35%; the naive per-generation guess: median "
            "{naive:.0%}. {per}."
        ).format(
            rows=self.check_rows,
            median=self.median_error,
            within=self.within_35,
            naive=self.naive_median_error,
            per=per,
        )
        if self.family_out:
            families = ", ".join(f"{f} {e:.0%}" for f, e in self.family_out.items())
            text += " " + _("Leave one family out, median error: {families}").format(
                families=families
            )
        return text


def _family(row: published.Row) -> str:
    return row.model.split()[0]


def naive_guess(fit: published.Fit) -> dict[str, float]:
    """Per generation, the median published speed-up of its fit rows."""
    by_gen: dict[str, list[float]] = {}
    for r in fit.rows:
        if r.role == "fit":
            by_gen.setdefault(GENERATIONS[r.gpu], []).append(r.published)
    return {g: statistics.median(v) for g, v in by_gen.items()}


def family_out_errors(rows: list[published.Row]) -> dict[str, float]:
    """Each family's median |error| when the fit saw none of its rows."""
    speedup_err, absolute_err = published._log_errors(
        [published.traced(r) for r in rows]
    )
    is_fit = torch.tensor([r.role == "fit" for r in rows])
    families = sorted({_family(r) for r in rows})
    out = {}
    for family in families:
        mine = torch.tensor([_family(r) == family for r in rows])
        keep = is_fit & ~mine
        j = published._best(speedup_err, absolute_err, keep)
        errors = [
            abs(math.expm1(float(speedup_err[i, j])))
            for i in range(len(rows))
            if mine[i]
        ]
        out[family] = statistics.median(errors)
    return out


def validate(
    fit: published.Fit | None = None, rows=None, family_out: bool = True
) -> Validation:
    """The report on the check rows (see the module's docstring). The
    leave-one-family-out fits trace every row (minutes); ``family_out=False`` skips
    them and reads the rest from ``fit`` alone (a recorded fit: instant)."""
    rows = published.load_rows() if rows is None else rows
    fit = published.fit(rows) if fit is None else fit
    guess = naive_guess(fit)
    check = [r for r in fit.rows if r.role == "check"]

    def naive_error(r):
        return abs(guess[GENERATIONS[r.gpu]] / r.published - 1)

    generations = []
    for name in ("Volta", "Ampere"):
        mine = [r for r in check if GENERATIONS[r.gpu] == name]
        if len(mine) < 2:
            continue
        generations.append(
            Generation(
                name,
                len(mine),
                statistics.median(abs(r.error) for r in mine),
                statistics.median(naive_error(r) for r in mine),
                spearman([r.published for r in mine], [r.predicted for r in mine]),
            )
        )
    return Validation(
        len(check),
        statistics.median(abs(r.error) for r in check),
        sum(abs(r.error) <= 0.35 for r in check) / len(check),
        statistics.median(naive_error(r) for r in check),
        generations,
        family_out_errors(rows) if family_out else {},
    )


if __name__ == "__main__":
    print(validate().summary())
    sys.exit(0)
