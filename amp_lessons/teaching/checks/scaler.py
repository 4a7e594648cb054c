"""Lesson 03's graders: the dynamic loss-scale update rule and unscaling gradients in
place, each checked against a real `torch.amp.GradScaler`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from amp_lessons.core.formats import same_bits, tensor_bits
from amp_lessons.core.scaler import next_scale, round_to_float32
from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    Raised,
    Row,
    as_float,
    call_student,
    grade,
    show_value,
    type_hint,
)

__all__ = ["check_update_rule", "check_unscale"]


_DEFAULTS = {"growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
_UPDATE_CASES = (
    (65536.0, 0, False, {}),
    (65536.0, 1998, False, {}),
    (65536.0, 1999, False, {}),
    (65536.0, 1500, True, {}),
    (1.0, 1999, True, {}),
    (2.0**127, 1999, False, {}),  # grown, 2**128 is inf in float32: refused
    (16.0, 4, False, {"growth_factor": 3.0, "growth_interval": 5}),
    (16.0, 3, True, {"backoff_factor": 0.125}),
)
_UPDATE_HIDDEN = (
    (1024.0, 0, False, {"growth_interval": 1}),
    (
        8.0,
        2,
        False,
        {"growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 3},
    ),
    (8.0, 1, False, {"growth_interval": 3}),
    (8.0, 0, True, {"growth_factor": 4.0, "backoff_factor": 0.25}),
    (3.0 * 2**126, 2, False, {"growth_interval": 3}),
    (3.0, 7, True, {"backoff_factor": 0.3}),
    # a tracker past the interval (a state loaded under a longer one): torch grows
    # only at tracker + 1 == growth_interval, so `>=` grows here and torch does not
    (1024.0, 7, False, {"growth_interval": 5}),
)


def _torch_update(
    scale: float, tracker: int, found_inf: bool, **factors: Any
) -> tuple[float, int]:
    """(new scale, new growth tracker) from a real `torch.amp.GradScaler.update()`."""
    settings = {**_DEFAULTS, **factors}
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict({"scale": scale, "_growth_tracker": tracker, **settings})
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.0)
    scaler.scale(torch.ones(()))  # creates the scale and tracker tensors
    param.grad = torch.full((1,), math.inf if found_inf else 1.0)
    scaler.step(optimizer)  # records found_inf for update()
    scaler.update()
    return scaler.get_scale(), scaler.state_dict()["_growth_tracker"]


def _update_hint(case: tuple, got_scale: float, got_tracker: int) -> str:
    scale, tracker, found_inf, factors = case
    settings = {**_DEFAULTS, **factors}
    gf, bf, gi = (settings[k] for k in _DEFAULTS)
    got = (round_to_float32(got_scale), got_tracker)
    # the defaults explain a scale that moved by the wrong factor; an unmoved scale
    # on a clean step is a growth-count mistake, told below (a walk's `>` was told
    # to use the arguments it did use)
    moved = found_inf or got[0] != scale
    if factors and moved and got == next_scale(scale, tracker, found_inf, **_DEFAULTS):
        return _(
            "use the growth_factor, backoff_factor and growth_interval arguments, "
            "not the default values"
        )
    if found_inf:
        if got[0] != round_to_float32(scale * bf):
            return _(
                "an inf/nan was found: multiply the scale by backoff_factor ({bf}); "
                "never grow on an overflow step"
            ).format(bf=bf)
        return _(
            "an inf/nan was found: growth_tracker goes back to 0 (the streak broke)"
        )
    grows = tracker + 1 == gi
    if grows and math.isinf(round_to_float32(scale * gf)):
        if got[0] == scale:
            return _("even when growth is refused, the tracker restarts from 0")
        return _(
            "the scale is stored in float32: {scale} * {gf} is inf "
            "there, so torch keeps the old scale (it grows only when the result is "
            "finite)"
        ).format(scale=show_value(scale), gf=gf)
    if grows and got[0] == scale and got_tracker == 0:
        return _(
            "this step completes a streak of growth_interval clean steps: the "
            "tracker restarts from 0, as you have it, and the scale grows by "
            "growth_factor ({gf})"
        ).format(gf=gf)
    if grows and got[0] == scale:
        return _(
            "torch counts this step: it grows when tracker + 1 == growth_interval "
            "(here {tracker} + 1 == {gi})"
        ).format(tracker=tracker, gi=gi)
    if not grows and got[0] != scale:
        return _(
            "grew too early: growth happens only when tracker + 1 == "
            "growth_interval (here {tracker} + 1 != {gi})"
        ).format(tracker=tracker, gi=gi)
    if grows and got_tracker != 0:
        return _("after growing, reset growth_tracker to 0 to count a new streak")
    if not grows and got_tracker != tracker + 1:
        return _("a step without inf/nan adds 1 to growth_tracker")
    return _(
        "on inf: scale *= backoff_factor, tracker = 0; otherwise tracker += 1, and "
        "when it reaches growth_interval: scale *= growth_factor, tracker = 0"
    )


def _as_pair(got: Any) -> tuple[float, int] | None:
    """(scale, tracker) from a tuple or list of two numbers, the tracker a whole
    number; None for anything else."""
    if not isinstance(got, tuple | list):
        return None
    items = list(list.__iter__(got) if isinstance(got, list) else tuple.__iter__(got))
    if len(items) != 2:
        return None
    if any(isinstance(item, torch.Tensor) for item in items):
        return None  # "a float, an int", the exercise says: tensors passed before
    scale, tracker = as_float(items[0]), as_float(items[1])
    if scale is None or tracker is None or not tracker.is_integer():
        return None
    return scale, int(tracker)


def _tensor_in(got: Any) -> torch.Tensor | None:
    """The first tensor in a returned tuple or list, or None."""
    if not isinstance(got, tuple | list):
        return None
    items = list.__iter__(got) if isinstance(got, list) else tuple.__iter__(got)
    return next((item for item in items if isinstance(item, torch.Tensor)), None)


def _as_found(got: Any) -> bool | None:
    """found_inf as a bool: a Python bool, as the exercise says (a one-element tensor
    passed before, though the text asks for True or False); None for anything else."""
    if isinstance(got, bool):
        return bool.__bool__(got)
    return None


def _update_rows(update_scale: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case in _UPDATE_HIDDEN if hidden else _UPDATE_CASES:
        scale, tracker, found_inf, factors = case
        expected = _torch_update(scale, tracker, found_inf, **factors)
        # default factors are left to the student's own defaults on purpose
        got = call_student(update_scale, scale, tracker, found_inf, **factors)
        # growth_factor -> gf, backoff_factor -> bf, growth_interval -> gi
        extra = "".join(
            f" {k[0]}{k.split('_')[1][0]}={v:g}" for k, v in factors.items()
        )
        label = f"{show_value(scale)}, {tracker}, {'inf' if found_inf else 'ok'}{extra}"
        shown = f"({show_value(expected[0])}, {expected[1]})"
        pair = _as_pair(got)
        if pair is None:
            tensor = _tensor_in(got)
            hint = (
                type_hint(tensor, N_("Python numbers in the tuple: a float, an int"))
                if tensor is not None
                else type_hint(
                    got, N_("a tuple (new_scale, new_tracker): a float, an int")
                )
            )
            rows.append(Row(label, shown, show_value(got, 24), False, hint))
            continue
        got_scale, got_tracker = pair
        # the scale lives in a float32 tensor: compare in float32
        ok = round_to_float32(got_scale) == expected[0] and got_tracker == expected[1]
        hint = "" if ok else _update_hint(case, got_scale, got_tracker)
        rows.append(
            Row(
                label,
                shown,
                f"({show_value(got_scale)}, {got_tracker})",  # as returned
                ok,
                hint,
            )
        )
    return rows


def check_update_rule(
    update_scale: Callable[..., tuple[float, int]], hidden: bool = False
) -> None:
    """Check `update_scale(scale, growth_tracker, found_inf, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000) -> (new_scale, new_tracker)`.

    Expected from a real `torch.amp.GradScaler("cpu")`: its state is loaded, one step
    with (or without) an inf gradient is taken, and `update()` is called.

    Example:
        >>> check_update_rule(update_scale)  # (65536.0, 1999, False) -> (131072.0, 0)
    """
    grade("check_update_rule", update_scale, hidden, _update_rows)


def _unscale_cases(hidden: bool) -> list[tuple[str, list[torch.Tensor], float]]:
    gen = torch.Generator().manual_seed(5)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 100

    inf, nan = math.inf, math.nan
    if not hidden:
        return [
            (_("1 tensor, scale 2**16"), [rand(6)], 2.0**16),
            (_("2 tensors, scale 3.0"), [rand(64), rand(4, 4)], 3.0),
            (
                _("inf in 2nd, scale 1024"),
                [rand(5), torch.tensor([1.0, inf, -3])],
                1024.0,
            ),
            (
                _("nan only, scale 2**16"),
                [torch.tensor([2.0, nan, 7.0]), rand(3)],
                2.0**16,
            ),
        ]
    return [
        (_("3 tensors, scale 1000"), [rand(50), rand(7), rand(2, 3)], 1000.0),
        (_("-inf, scale 7.0"), [rand(30), torch.tensor([-inf, 5.0, 6.0])], 7.0),
        (_("nan and inf, scale 0.1"), [torch.tensor([nan, 0.5, inf]), rand(9)], 0.1),
        (_("2-D, scale 3 * 2**16"), [rand(8, 8)], 3.0 * 2**16),
    ]


def _torch_unscale(
    grads: list[torch.Tensor], scale: float
) -> tuple[list[torch.Tensor], bool]:
    """Grads after `GradScaler.unscale_`, and whether it found an inf/nan."""
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=10**9)
    params = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad.clone()
    optimizer = torch.optim.SGD(params, lr=0.0)
    scaler.scale(torch.ones(()))
    scaler.unscale_(optimizer)
    unscaled = [param.grad.clone() for param in params]
    scaler.step(optimizer)
    scaler.update()  # backs off exactly when unscale_ found an inf/nan
    return unscaled, scaler.get_scale() < scale


_BIT_IDENTITY = N_(
    "Bit-identity is the point of this exercise: LossScaler is a drop-in for "
    "GradScaler that must train to the very same bits, and one differing last bit "
    "in a gradient changes every later step."
)


def _unscale_hint(
    grads: list[torch.Tensor], scale: float, expected: tuple, after: list, found: Any
) -> str:
    ref, ref_found = expected
    if all(same_bits(a, r) for a, r in zip(after, ref, strict=True)):
        # the grads are right: the found_inf answer is wrong
        nans = any(torch.isnan(g).any() for g in grads)
        if ref_found and nans and not any(torch.isinf(g).any() for g in grads):
            return _(
                "nan counts too: check with torch.isfinite (false for inf and nan)"
            )
        if ref_found:
            return _("found_inf must be True if ANY grad tensor has an inf or nan")
        return _("found_inf is True only when some grad is inf or nan")
    # each grad either left as it came or unscaled right: with an inf/nan found,
    # some left (all of them, or those after the inf) is an early return
    left_or_right = [
        (same_bits(a, g), same_bits(a, r))
        for a, g, r in zip(after, grads, ref, strict=True)
    ]
    unchanged = [left for left, _right in left_or_right]
    if ref_found and any(unchanged) and all(map(any, left_or_right)):
        return _(
            "unscale the grads in place even when an inf/nan is found: torch "
            "multiplies every grad and only skips the optimizer step"
        )
    if all(unchanged):
        return _(
            "the grads did not change: unscale IN PLACE, with a method that "
            "changes the tensor itself; g = g * inv_scale only rebinds a local name"
        )
    if all(
        same_bits(a, g / round_to_float32(scale))
        for a, g in zip(after, grads, strict=True)
    ):
        return _(
            "you divided by scale: the right unscaling, rounded differently. "
            "{bit_identity} torch multiplies by inv_scale (1/scale in float64, "
            "rounded to float32): x / s and x * (1/s) differ in the last bit for "
            "many x when s is not a power of two"
        ).format(bit_identity=_(_BIT_IDENTITY))
    if all(
        same_bits(a, (g.double() / scale).float())
        for a, g in zip(after, grads, strict=True)
    ):
        return _(
            "you divided in float64: the right unscaling, rounded differently. "
            "{bit_identity} torch multiplies the float32 grads by the "
            "float32-rounded reciprocal of scale"
        ).format(bit_identity=_(_BIT_IDENTITY))
    return _("multiply every grad in place by inv_scale = float32(1 / scale)")


def _count_differences(a: torch.Tensor, ref: torch.Tensor) -> int:
    """How many values of `a` differ from `ref` (all of them if the student's code
    changed the tensor's shape or dtype)."""
    if a.shape != ref.shape or a.dtype != ref.dtype:
        return ref.numel()
    return int((tensor_bits(a) != tensor_bits(ref)).sum())


def _unscale_rows(unscale_grads: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case, grads, scale in _unscale_cases(hidden):
        ref, ref_found = _torch_unscale(grads, scale)
        mine = [g.clone() for g in grads]
        got = call_student(unscale_grads, list(mine), scale)
        shown = _("found_inf={found}, exact").format(found=ref_found)
        if isinstance(got, Raised):
            rows.append(Row(case, shown, str(got), False, got.hint))
            continue
        same = [same_bits(a, r) for a, r in zip(mine, ref, strict=True)]
        differ = sum(
            _count_differences(a, r)
            for a, r, s in zip(mine, ref, same, strict=True)
            if not s
        )
        found = _as_found(got)
        ok_type = found is not None
        ok = ok_type and found == ref_found and all(same)
        got_text = (
            _("found_inf={found}, exact")
            if all(same)
            else _("found_inf={found}, {differ} differ")
        ).format(found=found if ok_type else show_value(got, 16), differ=differ)
        if not ok_type:
            hint = type_hint(got, N_("a bool (True if any inf/nan)"))
        else:
            hint = (
                "" if ok else _unscale_hint(grads, scale, (ref, ref_found), mine, got)
            )
        rows.append(Row(case, shown, got_text, ok, hint))
    return rows


def check_unscale(
    unscale_grads: Callable[[list[torch.Tensor], float], bool], hidden: bool = False
) -> None:
    """Check `unscale_grads(grads, scale) -> bool`: unscale in place, report inf/nan.

    The float32 tensors in `grads` must end up bit-identical to what
    `torch.amp.GradScaler.unscale_` leaves in `param.grad` (bit-identity is the point:
    LossScaler must match GradScaler bit for bit, so dividing, one last bit off, is
    rejected with a hint saying why), and the result must say whether any value is
    inf or nan.

    Example:
        >>> check_unscale(unscale_grads)  # ([tensor([2., inf])], 2.0) -> True
    """
    grade("check_unscale", unscale_grads, hidden, _unscale_rows)
