"""Lesson 02's graders: the fraction of gradients fp16 flushes to zero at a loss scale,
and the largest static loss scale that keeps every gradient finite in fp16."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch

from amp_lessons.i18n import _
from amp_lessons.teaching.checks._engine import (
    Row,
    call_student,
    float_row,
    grade,
)
from amp_lessons.teaching.underflow import cast_outcome, underflow_fraction

__all__ = ["check_underflow_fraction", "check_choose_loss_scale"]


def _grad_sample(
    seed: int, n: int = 400, lo: float = -45, hi: float = -4
) -> torch.Tensor:
    """Gradient-like values: random signs, log2|g| uniform in [lo, hi], 10% zeros."""
    gen = torch.Generator().manual_seed(seed)
    log2 = torch.empty(n).uniform_(lo, hi, generator=gen)
    sign = torch.randint(0, 2, (n,), generator=gen) * 2 - 1
    grads = sign * torch.exp2(log2)
    return grads.masked_fill(torch.rand(n, generator=gen) < 0.1, 0.0)


_TIES = torch.tensor(
    [0.0, 2.0**-25, -1.5 * 2.0**-25, 2.0**-24, 3e-8, 1e-3, -(2.0**-30)]
)


def _underflow_cases(hidden: bool) -> list[tuple[str, torch.Tensor, float]]:
    if not hidden:
        a = _grad_sample(0)
        return [
            (_("400 grads, scale 1"), a, 1.0),
            (_("same, scale 2**10"), a, 2.0**10),
            (_("same, scale 2**16"), a, 2.0**16),
            (_("other 400, scale 2**8"), _grad_sample(1, lo=-40, hi=-2), 2.0**8),
            (_("all zeros, scale 2**10"), torch.zeros(3), 2.0**10),
        ]
    c = _grad_sample(2, n=300, lo=-55, hi=-10)
    return [
        (_("300 tiny grads, scale 2**24"), c, 2.0**24),
        (_("same, scale 1000"), c, 1000.0),
        (_("7 hand-picked, scale 1"), _TIES, 1.0),
        (_("all zeros, scale 2**16"), torch.zeros(5), 2.0**16),
    ]


def _underflow_hint(
    grads: torch.Tensor, scale: float, expected: float, got: float
) -> str:
    nz = grads != 0
    n_nz = max(int(nz.sum()), 1)
    scaled = (grads * scale).abs()
    lost = (grads * scale).to(torch.float16) == 0
    known = [
        (lost.float().mean().item(), _("you counted grads that were already zero: "
         "count only NONZERO grads that the fp16 cast turns into 0")),
        ((lost & nz).sum().item() / grads.numel(), _("divide by the number of nonzero "
         "grads, not by all grads")),
        (underflow_fraction(grads, 1.0), _("multiply the grads by scale before "
         "casting: that is what loss scaling does")),
        ((scaled[nz] < 2**-14).sum().item() / n_nz, _("values below 2^-14 (fp16's "
         "min normal) do not vanish: they become subnormals with fewer bits; only "
         "values below 2^-25 (and 2^-25 itself) round to 0")),
        ((scaled[nz] < 2**-24).sum().item() / n_nz, _("values in [2^-25, 2^-24) round "
         "UP to 2^-24 (and exactly 2^-25 ties down to 0): use the real cast, "
         "(grads * scale).to(torch.float16) == 0")),
        (100 * expected, _("return a fraction in [0, 1], not a percentage")),
        (1 - expected, _("you returned the fraction that SURVIVED the cast")),
    ]  # fmt: skip
    for value, hint in known:
        if not math.isclose(value, expected, abs_tol=1e-6) and math.isclose(
            got, value, abs_tol=1e-6
        ):
            return hint
    if not nz.any():
        return _("no grad is nonzero, so none can underflow: the fraction is 0.0")
    return _(
        "fraction = (number of nonzero g with fp16(g * scale) == 0) / "
        "(number of nonzero g)"
    )


def _underflow_rows(student: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case, grads, scale in _underflow_cases(hidden):
        expected = underflow_fraction(grads, scale)
        rows.append(
            float_row(
                case,
                expected,
                # the package's own answer (cast_outcome(...).zero is the same
                # number) may not be called: that case fails with its hint
                call_student(
                    student,
                    grads.clone(),
                    scale,
                    answers=(underflow_fraction, cast_outcome),
                ),
                lambda a, b: math.isclose(a, b, abs_tol=1e-6),
                lambda got, g=grads, s=scale, want=expected: _underflow_hint(
                    g, s, want, got
                ),
                show=lambda v: f"{v:.4f}",
            )
        )
    return rows


def check_underflow_fraction(
    underflow_fraction: Callable[[torch.Tensor, float], float], hidden: bool = False
) -> None:
    """Check `underflow_fraction(grads, scale) -> float`.

    The fraction of the NONZERO float32 `grads` that become 0 when `grads * scale`
    is cast to fp16 (0.0 if no grad is nonzero). Expected from torch's cast. A
    function that calls the package's own `underflow_fraction` or `cast_outcome`
    fails.

    Example:
        >>> check_underflow_fraction(lambda grads, scale: ...)
    """
    grade("check_underflow_fraction", underflow_fraction, hidden, _underflow_rows)


def _largest_safe_scale(grads: torch.Tensor) -> float:
    for k in range(127, -150, -1):
        if torch.isfinite((grads * 2.0**k).to(torch.float16)).all():
            return 2.0**k
    raise ValueError("no power of two keeps these grads finite in fp16")


def _loss_scale_cases(hidden: bool) -> list[tuple[str, torch.Tensor]]:
    if not hidden:
        return [
            ("max |g| = 1e-3", torch.tensor([1e-3, -2e-4, 5e-7, 0.0])),
            ("max |g| = 3.0", torch.tensor([0.5, 3.0, -1e-6])),
            ("max |g| = 65504", torch.tensor([65504.0, 1.0])),
            ("max |g| = 1e5", torch.tensor([1e5, -2.0])),
            # 65508 rounds DOWN to fp16's 65504: the cast, not a threshold, decides
            ("max |g| = 65508 * 2**-12", torch.tensor([65508 * 2.0**-12, 1e-3])),
            (_("largest |g| negative"), torch.tensor([1e-2, -40.0, 3.0])),
            # a power of two: S = 2**floor(log2(65536 / max|g|)) gives 65536 here
            ("max |g| = 2.0", torch.tensor([2.0, -0.5, 1e-4])),
            (_("400 gradient-like"), _grad_sample(3)),
        ]
    return [
        ("max |g| = 65510 * 2**-20", torch.tensor([0.01, 65510 * 2.0**-20, 0.03])),
        ("max |g| = 65520 * 2**-20", torch.tensor([65520 * 2.0**-20, 1e-9])),
        (_("largest |g| negative, below 1"), torch.tensor([2e-3, -0.9, 0.3])),
        ("max |g| = 1e-8", torch.tensor([1e-8, 3e-9, -1e-12])),
        ("max |g| = 2**-10", torch.tensor([-(2.0**-10), 2.0**-12])),
        (_("300 tiny gradient-like"), _grad_sample(4, n=300, lo=-45, hi=-20)),
    ]


def _loss_scale_hint(grads: torch.Tensor, expected: float, got: float) -> str:
    peak = grads.abs().max().item()
    if got <= 0 or not math.isfinite(got) or math.frexp(got)[0] != 0.5:
        return _(
            "S must be a power of two (2**k): multiplying by a power of two is "
            "exact, "
            "so scaling changes no bits except the exponent"
        )
    if got == expected / 2 and 65504 < peak * expected < 65520:
        return _(
            "max|g| * S = {value} is above 65504 but below 65520, so "
            "fp16 rounds it DOWN to 65504: still finite. Test the cast, not <= 65504"
        ).format(value=repr(peak * expected))
    if got == _largest_safe_scale(grads.clamp(min=0)) and got != expected:
        return _("the largest MAGNITUDE here is negative: use grads.abs().max()")
    if got > expected:
        return _(
            "too big: max|g| * S = {value} overflows fp16 (from 65520 up, "
            "a cast gives inf)"
        ).format(value=f"{peak * got:.6g}")
    if got == expected / 2:
        return _("off by one power: twice your S is still finite in fp16")
    if got < expected:
        return _(
            "too small: the largest safe S is the 2**k with max|g| * 2**k < 65520; "
            "max|g| = {peak}"
        ).format(peak=f"{peak:.6g}")
    return _("S = 2**k with the largest k for which fp16(g * 2**k) is finite for all g")


def _loss_scale_rows(choose_loss_scale: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case, grads in _loss_scale_cases(hidden):
        expected = _largest_safe_scale(grads)
        rows.append(
            float_row(
                case,
                expected,
                call_student(choose_loss_scale, grads.clone()),
                operator.eq,
                lambda got, g=grads, want=expected: _loss_scale_hint(g, want, got),
            )
        )
    return rows


def check_choose_loss_scale(
    choose_loss_scale: Callable[[torch.Tensor], float], hidden: bool = False
) -> None:
    """Check `choose_loss_scale(grads) -> float`: the largest safe static loss scale.

    The largest power of two S = 2**k (k may be negative) such that fp16(g * S) is
    finite for every g in `grads` (float32; not all zero). Expected by trying every
    k with torch's cast.

    Example:
        >>> check_choose_loss_scale(lambda grads: ...)  # [1e-3, ...] -> 2**25
    """
    grade("check_choose_loss_scale", choose_loss_scale, hidden, _loss_scale_rows)
