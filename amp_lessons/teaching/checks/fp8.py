"""Lesson 11's grader: the tensorwise scale and the saturating fp8 cast, checked
against ``amp_lessons.core.fp8`` (which tests/test_fp8.py checks bit for bit against
torchao's ``Float8Linear``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from amp_lessons.core.formats import same_bits
from amp_lessons.core.fp8 import E4M3, E5M2, amax, cast_to_fp8, scale_from_amax
from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    Raised,
    Row,
    call_student,
    grade,
    let_interrupt_through,
    type_hint,
)

__all__ = ["check_fp8_cast"]

_NAMES = {E4M3: "e4m3", E5M2: "e5m2"}
WRONG_DTYPE = N_(
    "cast to the dtype asked for, {dtype} ({name}): e4m3 for weights and "
    "activations, e5m2 for gradients; got {got}"
)
WRONG_MAX = N_(
    "use the max of the format you cast to: torch.finfo(dtype).max is {big} for "
    "{name}, not {other}"
)


def _cases(hidden: bool) -> list[tuple[str, torch.Tensor, torch.dtype, Any]]:
    """(label, x, dtype, amax or None); the label in English, shown through `_`."""
    gen = torch.Generator().manual_seed(11)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    if not hidden:
        return [
            ("[0.1, -0.3, 1.75], e4m3", torch.tensor([0.1, -0.3, 1.75]), E4M3, None),
            (N_("largest |x| is negative"), torch.tensor([-3.0, 0.5, 1.0]), E4M3, None),
            (N_("all zeros"), torch.zeros(4), E4M3, None),
            (N_("gradients ~1e-4, e5m2"), randn(16) * 1e-4, E5M2, None),
            (
                N_("stale amax 1.0, e5m2"),
                torch.tensor([0.5, -4.0, 2.0]),
                E5M2,
                torch.tensor(1.0),
            ),
        ]
    return [
        ("2-D, ~30, e4m3", randn(4, 8) * 30, E4M3, None),
        (N_("bf16 input, e4m3"), (randn(8) * 0.01).bfloat16(), E4M3, None),
        (N_("negative max, e5m2"), torch.tensor([-100.0, 3.0, 7.0]), E5M2, None),
        (
            N_("stale amax 2.0, e4m3"),
            torch.tensor([10.0, 1.0, -0.5]),
            E4M3,
            torch.tensor(2.0),
        ),
        (N_("stale amax 0.5, e5m2"), randn(6) * 4, E5M2, torch.tensor(0.5)),
        (N_("all zeros, e5m2"), torch.zeros(2, 3), E5M2, None),
    ]


def _show(x_fp8: torch.Tensor, scale: float) -> str:
    values = x_fp8.float().flatten().tolist()
    shown = ", ".join(f"{v:g}" for v in values[:3]) + (
        ", ..." if len(values) > 3 else ""
    )
    return _("scale {scale}, [{values}]").format(scale=f"{scale:.6g}", values=shown)


SCALE_IN_FLOAT64 = N_(
    "return the scale as a float32 tensor, as torchao does: divide in float64, "
    "then .float(); the fp8 matmul divides its result by this scale, and a "
    "{dtype} scale changes the dtype of that result; got a {dtype} tensor"
)
SCALE_NOT_A_TENSOR = N_(
    "return the scale as a float32 tensor, as torchao does, not a Python "
    "{kind}: on a GPU, .item() waits for the GPU to finish (a sync) at every "
    "cast, and the scale is needed on the GPU again by the matmul"
)


def _scale_dtype_hint(scale: Any) -> str:
    """The hint for a scale of the right value that is not a float32 tensor, or ""."""
    if isinstance(scale, torch.Tensor):
        if scale.dtype == torch.float32:
            return ""
        return _(SCALE_IN_FLOAT64).format(dtype=str(scale.dtype).removeprefix("torch."))
    return _(SCALE_NOT_A_TENSOR).format(kind=type(scale).__name__)


def _near(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * abs(b)


def _hint(
    x: torch.Tensor,
    dtype: torch.dtype,
    given: Any,
    data: torch.Tensor,
    scale: float,
    expected_scale: float,
) -> str:
    big, other = torch.finfo(dtype).max, torch.finfo(E5M2 if dtype is E4M3 else E4M3)
    used, name = (
        max(float(given if given is not None else amax(x)), 1e-12),
        _NAMES[dtype],
    )
    if data.dtype != dtype:
        return _(WRONG_DTYPE).format(dtype=dtype, name=name, got=data.dtype)
    if data.float().isnan().any() and not x.float().isnan().any():
        if not x.any():
            return _(
                "an all-zero tensor has amax 0, so max / amax is inf and 0 * inf "
                "is nan: floor amax first, torch.clamp(amax, min=1e-12), as "
                "torchao does"
            )
        return _(
            "x * scale went past the format's max and became nan (e4m3fn in "
            "torch before April 2026): clamp to +-torch.finfo(dtype).max before "
            ".to(dtype)"
        )
    if data.float().isinf().any():
        return _(
            "x * scale went past the format's max and the cast made inf: clamp "
            "it to +-torch.finfo(dtype).max before .to(dtype) (saturate). With a "
            "stale amax, as in delayed scaling, values can exceed it"
        )
    if _near(scale, used / big):
        return _(
            "the scale is inverted: it multiplies x up to the format's range, "
            "max / amax; amax / max is the inverse scale, applied after the matmul"
        )
    if given is None and x.max() > 0 and _near(scale, big / float(x.max())):
        return _(
            "amax is the largest magnitude, x.abs().max(); x.max() misses a large "
            "negative value"
        )
    if _near(scale, other.max / used):
        return _(WRONG_MAX).format(big=f"{big:g}", name=name, other=f"{other.max:g}")
    if given is not None and _near(scale, big / float(amax(x).clamp(min=1e-12))):
        return _(
            "amax was given (delayed scaling: it comes from earlier steps): use "
            "it instead of x's own amax"
        )
    if _near(scale, expected_scale):
        return _(
            "the scale is right but the fp8 values are not: multiply x (as "
            "float32) by the scale, clamp to +-max, then .to(dtype)"
        )
    return _("expected scale {scale} = {big} / amax (amax {amax})").format(
        scale=f"{expected_scale:.6g}", big=f"{big:g}", amax=f"{used:g}"
    )


def _rows(fn: Callable, hidden: bool) -> list[Row]:
    rows = []
    for label, x, dtype, given in _cases(hidden):
        expected_scale = scale_from_amax(given if given is not None else amax(x), dtype)
        expected = cast_to_fp8(x, expected_scale, dtype)
        shown = _show(expected, expected_scale.item())
        stale = None if given is None else given.clone()
        got = call_student(fn, x.clone(), dtype, stale)
        try:
            data, scale = got  # exactly two values
            if not isinstance(data, torch.Tensor):
                raise TypeError
            scale = float(scale)
        except BaseException as exc:  # not two values, or ones that raise (or exit)
            let_interrupt_through(exc)
            hint = type_hint(
                got, N_("a tuple (x_fp8, scale): an fp8 tensor and its scale")
            )
            got_text = str(got) if isinstance(got, Raised) else type(got).__name__
            rows.append(Row(_(label), shown, got_text, False, hint))
            continue
        ok = (
            data.shape == x.shape
            and same_bits(data, expected)
            and _near(scale, expected_scale.item())
        )
        hint = "" if ok else _hint(x, dtype, given, data, scale, expected_scale.item())
        got_text = _show(data, scale)
        if ok and _scale_dtype_hint(got[1]):  # right values, a scale of another kind
            ok, hint = False, _scale_dtype_hint(got[1])
            kind = getattr(got[1], "dtype", type(got[1]).__name__)
            got_text = f"{str(kind).removeprefix('torch.')}: {got_text}"
        rows.append(Row(_(label), shown, got_text, ok, hint))
    return rows


def check_fp8_cast(to_fp8_tensorwise: Callable, hidden: bool = False) -> None:
    """Check ``to_fp8_tensorwise(x, dtype=torch.float8_e4m3fn, amax=None) -> (x_fp8,
    scale)``: scale = finfo(dtype).max / amax (amax = max |x| unless given, floored
    at 1e-12), x_fp8 = (x * scale) clamped to +-max and cast to dtype.

    The fp8 values must match bit for bit; the scale to float32 rounding.

    Example:
        >>> check_fp8_cast(to_fp8_tensorwise)  # [0.1, -0.3, 1.75] -> scale 256
    """
    grade("check_fp8_cast", to_fp8_tensorwise, hidden, _rows)
