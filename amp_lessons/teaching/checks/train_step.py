"""Lesson 05's second grader: one full AMP step with clipping, run on a tiny model
next to the reference step with a real `torch.amp.GradScaler` and compared bit for
bit; a wrong run is matched against known mistakes to name the one made."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lessons.core.formats import same_bits
from amp_lessons.i18n import N_, _
from amp_lessons.measure.bench import make_optimizer
from amp_lessons.teaching.checks._engine import (
    Raised,
    Row,
    as_float,
    call_student,
    grade,
    show_value,
)

__all__ = ["check_amp_train_step"]


@dataclass(frozen=True)
class _StepCase:
    name: str
    layers: tuple[int, ...]
    optimizer: str
    init_scale: float
    growth_interval: int
    steps: tuple[tuple[float, float], ...]  # (target size, max_norm) per step


_TRAIN_CASES = (
    _StepCase(N_("1 step, clipping active"), (4, 8, 2), "sgd", 2.0**10, 2000,
              ((1.0, 0.05),)),
    _StepCase(N_("1 step, overflow (scale 2**40)"), (4, 8, 2), "sgd", 2.0**40, 2000,
              ((1.0, 1.0),)),
    _StepCase(N_("3 steps, growth_interval 2"), (4, 8, 2), "sgd", 2.0**10, 2,
              ((1.0, 10.0), (1.0, 10.0), (1.0, 10.0))),
)  # fmt: skip
_TRAIN_HIDDEN = (
    _StepCase(N_("Adam, overflow at step 2 of 3"), (3, 6, 6, 2), "adam", 2.0**16, 2000,
              ((1.0, 0.5), (1e6, 0.5), (1.0, 0.5))),
    _StepCase(N_("momentum, 2 steps, no clipping"), (5, 4, 3), "momentum", 2.0**16, 1,
              ((1.0, 1e9), (2.0, 1e9))),
    _StepCase(N_("tight clip 1e-3, scale 2**20"), (4, 8, 2), "sgd", 2.0**20, 2000,
              ((1.0, 1e-3), (1.0, 1e-3))),
)  # fmt: skip


def _reference_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def _wrong_step(mistake: str) -> Callable:
    """The reference step with one known mistake, to recognise it in a student's run."""

    def step(model, optimizer, scaler, x, y, max_norm):
        if mistake != "no_zero_grad":
            optimizer.zero_grad(set_to_none=True)
        with torch.amp.autocast(
            "cpu", dtype=torch.float16, enabled=mistake != "no_autocast"
        ):
            loss = F.mse_loss(model(x), y)
        if mistake == "unscaled_backward":
            scaler.scale(loss)  # scaled, but the result is thrown away
            loss.backward()
        else:
            scaler.scale(loss).backward()
        if mistake != "no_unscale":
            scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if mistake == "optimizer_step":
            optimizer.step()
        else:
            scaler.step(optimizer)
        if mistake != "no_update":
            scaler.update()
        return scaler.scale(loss).item() if mistake == "scaled_loss" else loss.item()

    return step


_TRAIN_MISTAKES = {
    "no_unscale": N_(
        "clip_grad_norm_ ran on the SCALED grads: call "
        "scaler.unscale_(optimizer) right before clipping"
    ),
    "optimizer_step": N_(
        "optimizer.step() ran on inf/nan grads: call "
        "scaler.step(optimizer), which skips the step when an inf/nan was found"
    ),
    "no_update": N_(
        "the scale never changed: call scaler.update() at the end of the step"
    ),
    "unscaled_backward": N_(
        "call backward on the SCALED loss, "
        "scaler.scale(loss).backward(); unscale_ then divides unscaled grads by the "
        "scale"
    ),
    "no_autocast": N_(
        "run the forward pass (model and loss) inside "
        "torch.amp.autocast(x.device.type, dtype=torch.float16)"
    ),
    "no_zero_grad": N_(
        "grads accumulated across steps: call "
        "optimizer.zero_grad(set_to_none=True) each step"
    ),
    "scaled_loss": N_("return the loss itself (loss.item()), not the scaled loss"),
}
_TRAIN_ERRORS = {
    "has already been called on this optimizer since the last update": N_(
        "unscale_ "
        "ran twice before update(): call scaler.update() once at the end of every step"
    ),
    "is being called after step": N_(
        "the previous step's scaler.step() was never "
        "followed by scaler.update(): call it at the end of every step (and unscale_ "
        "before step)"
    ),
    "No inf checks were recorded": N_(
        "call scaler.step(optimizer) before scaler.update()"
    ),
    "_scale is None": N_(
        "call backward on the SCALED loss, "
        "scaler.scale(loss).backward(); the scaler is set up by its first scale() call"
    ),
    "Attempting to unscale FP16 gradients": N_(
        "keep the model in float32 (no model.half()): autocast makes the fp16 copies"
    ),
}


def _run_train_case(amp_train_step: Callable, case: _StepCase) -> Any:
    """(params, scale, tracker, losses) after running the steps, or Raised."""
    torch.manual_seed(9)
    layers: list[nn.Module] = []
    for n_in, n_out in zip(case.layers, case.layers[1:], strict=False):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    name = {"momentum": "sgd_momentum"}.get(case.optimizer, case.optimizer)
    optimizer = make_optimizer(
        name, model.parameters(), lr=1e-2 if name == "adam" else 0.1
    )
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=case.init_scale, growth_interval=case.growth_interval
    )
    gen = torch.Generator().manual_seed(10)
    losses = []
    for size, max_norm in case.steps:
        x = torch.randn(8, case.layers[0], generator=gen)
        y = torch.randn(8, case.layers[-1], generator=gen) * size
        got = call_student(amp_train_step, model, optimizer, scaler, x, y, max_norm)
        if isinstance(got, Raised):
            return got
        losses.append(as_float(got))
    params = [p.detach().clone() for p in model.parameters()]
    return params, scaler.get_scale(), scaler.state_dict()["_growth_tracker"], losses


def _same_run(a: Any, b: Any) -> bool:
    if isinstance(a, Raised) or isinstance(b, Raised):
        return False
    (pa, sa, ta, la), (pb, sb, tb, lb) = a, b
    same_loss = len(la) == len(lb) and all(
        x is not None
        and y is not None
        and (math.isclose(x, y, rel_tol=1e-6) or (math.isnan(x) and math.isnan(y)))
        for x, y in zip(la, lb, strict=True)
    )
    params = len(pa) == len(pb) and all(
        same_bits(x, y) for x, y in zip(pa, pb, strict=True)
    )
    return params and sa == sb and ta == tb and same_loss


def _train_hint(case: _StepCase, got: Any) -> str:
    if isinstance(got, Raised):
        for fragment, hint in _TRAIN_ERRORS.items():
            if fragment in got.message:
                hint = _(hint)
                return f"{got.hint.rstrip('.')}. {hint[0].upper()}{hint[1:]}"
        return got.hint
    if any(loss is None for loss in got[3]):
        return _("return the loss as a Python float: loss.item()")
    for mistake, hint in _TRAIN_MISTAKES.items():
        if _same_run(got, _run_train_case(_wrong_step(mistake), case)):
            return _(hint)
    return _(
        "the reference order: zero_grad, forward + mse_loss under autocast (fp16), "
        "scaler.scale(loss).backward(), scaler.unscale_(optimizer), "
        "clip_grad_norm_(model.parameters(), max_norm), scaler.step(optimizer), "
        "scaler.update(); return loss.item()"
    )


def _describe_run(run: Any) -> str:
    if isinstance(run, Raised):
        return str(run)
    loss = run[3][-1]
    return _("scale {scale}").format(scale=show_value(run[1])) + (
        _(", loss {loss}").format(loss=f"{loss:.3g}") if loss is not None else ""
    )


def _train_rows(amp_train_step: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case in _TRAIN_HIDDEN if hidden else _TRAIN_CASES:
        expected = _run_train_case(_reference_step, case)
        got = _run_train_case(amp_train_step, case)
        ok = _same_run(got, expected)
        if not ok and not isinstance(got, Raised) and got[1:] == expected[1:]:
            shown = _("params differ")
        else:
            shown = _describe_run(got)
        hint = "" if ok else _train_hint(case, got)
        rows.append(Row(_(case.name), _describe_run(expected), shown, ok, hint))
    return rows


def check_amp_train_step(
    amp_train_step: Callable[..., float], hidden: bool = False
) -> None:
    """Check `amp_train_step(model, optimizer, scaler, x, y, max_norm) -> float`.

    One full AMP step with clipping: mse_loss under fp16 autocast, scaled backward,
    unscale_, clip_grad_norm_, step, update; it returns the (unscaled) loss. The
    reference runs on an identical tiny model with a real
    `torch.amp.GradScaler("cpu")`; parameters must match bit for bit, and the scale,
    growth tracker and losses too, including cases with an overflow.

    Example:
        >>> check_amp_train_step(amp_train_step)
    """
    grade("check_amp_train_step", amp_train_step, hidden, _train_rows)
