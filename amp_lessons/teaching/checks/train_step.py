"""Lesson 05's second grader: one full AMP step with clipping, run on a tiny model
next to the reference step with a real `torch.amp.GradScaler` and compared bit for
bit. A wrong run's hint comes from what the step did (the calls `RecordingScaler`
saw, in order, with each forward's autocast and each backward's leftover gradients):
it names the fault and why it is one, and leaves the line to the reader."""

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
from amp_lessons.teaching.checks._recording import RecordingScaler
from amp_lessons.teaching.checks._step_faults import STEP_FAULTS, with_the_error

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


# What each fault did wrong and why, named from the calls the step made; never the
# line to write: that is the exercise.
_FAULTS = {
    **STEP_FAULTS,  # the faults every step grader names
    "no_unscale": N_(
        "nothing unscaled the gradients before the scaler's step, so clip_grad_norm_ "
        "measured gradients still multiplied by the scale and cut them to max_norm "
        "/ scale. Clipping needs the true gradients, unscaled first."),
    "unscale_after_step": N_(
        "unscale_ ran after the scaler's step: the step has already unscaled and "
        "used these gradients, so torch refuses it. Unscaling serves what runs "
        "between backward and the step: the clipping."),
    "no_step": N_(
        "the optimizer never stepped, so the weights did not move; and the scaler's "
        "update acts on the inf check that only the scaler's step makes."),
    "update_twice": N_(
        "the scaler's update ran twice in one step: the second finds no inf check "
        "left (the step's check is used up), so torch refuses it. Once per step."),
    "no_update": N_(
        "the scaler's update never ran: the scale never changes (no back-off after "
        "an overflow, no growth), and the next step's unscale_ is refused because "
        "this step's is still recorded. Each step ends with the update."),
    "clip_before_unscale": N_(
        "clip_grad_norm_ ran before unscale_: it clipped the SCALED gradients (their "
        "norm is the scale times the true one) down to max_norm, so unscale_ then "
        "leaves them at max_norm / scale and the step all but vanishes. Clipping "
        "needs the true gradients: it goes between unscale_ and the scaler's step."),
    "no_autocast": N_(
        "the forward pass ran outside fp16 autocast: the model computed in float32, "
        "so the loss, the gradients and any overflow differ from the AMP step's."),
    "autocast_dtype": N_(
        "autocast ran the forward pass in a dtype other than float16 (bfloat16?): "
        "this step is fp16 AMP, the case the GradScaler exists for, so the loss, "
        "the gradients and any overflow differ from it."),
    "accumulated": N_(
        "backward added this step's gradients to the last step's: nothing cleared "
        "them at the start of the step, so every step moves by the sum of all the "
        "gradients so far."),
    "returned_scaled": N_(
        "the step returned the scaled loss (loss times the scale): the loss the "
        "step reports is the one before scaling."),
    "half_model": N_(
        "the model's weights are float16: the scaler refuses to unscale fp16 "
        "gradients, and fp16 weights lose small updates. Autocast runs the forward "
        "pass in fp16 from float32 weights."),
}  # fmt: skip


def _backward_faults(calls: list[str], reached_end: bool) -> list[str]:
    backward = [i for i, c in enumerate(calls) if c.startswith("backward")]
    faults = []
    if "backward_unscaled" in calls:
        faults.append("scaled_unused" if "scale" in calls else "unscaled")
    elif len(backward) > 1:
        faults.append("backward_twice")
    elif "accumulated" in calls:
        faults.append("accumulated")
    if "step" in calls and (not backward or calls.index("step") < backward[0]):
        faults.append("step_before_backward")
    elif not backward and reached_end:
        faults.append("no_backward")
    return faults


def _step_faults(calls: list[str], reached_end: bool) -> list[str]:
    if "optimizer.step" in calls:
        before = calls[: calls.index("optimizer.step")]
        return ["unscale_then_direct_step" if "unscale_" in before else "direct_step"]
    if "step" not in calls:
        return ["no_step"] if reached_end else []
    step = calls.index("step")
    if "unscale_" in calls[step:]:
        return ["unscale_after_step"]
    if "unscale_" not in calls[:step] and "backward" in calls[:step]:
        return ["no_unscale"]
    return []


def _faults(calls: list[str], finished: bool) -> list[str]:
    """The faults (keys of `_FAULTS`) one step's `calls` show. `finished`: the step
    returned; when it raised, what it never reached is not called missing."""
    reached_end = finished or "update" in calls
    faults = []
    if "forward_no_fp16" in calls:
        faults.append("no_autocast")
    elif "forward_other_dtype" in calls:
        faults.append("autocast_dtype")
    faults += _backward_faults(calls, reached_end)
    faults += _step_faults(calls, reached_end)
    for call in ("step", "unscale_", "update"):
        if calls.count(call) > 1:
            faults.append(f"{call.rstrip('_')}_twice")
    if finished and not calls.count("update"):
        faults.append("no_update")
    if "returned_scaled" in calls:
        faults.append("returned_scaled")
    if "clipped_scaled" in calls:
        faults.append("clip_before_unscale")
    return faults


def _fault_hint(run: _Run) -> str:
    """The hint for the first step of the run that shows a fault (at most two of its
    faults, each with why), or "" when every step did what it should."""
    finished = not isinstance(run.result, Raised)
    if run.half:
        return _(_FAULTS["half_model"])
    for i, calls in enumerate(run.trace):
        faults = _faults(calls, finished or i < len(run.trace) - 1)
        if faults:
            count = len([c for c in calls if c.startswith("backward")])
            first, *second = [_(_FAULTS[f]).format(count=count) for f in faults[:2]]
            # two faults read as two sentences: the second one capitalised
            return " ".join([first, *(t[:1].upper() + t[1:] for t in second)])
    return ""


@dataclass
class _Run:
    """What a case's run left: (params, scale, tracker, losses), or Raised; the calls
    each step made, up to the one that raised; whether the weights became fp16."""

    result: Any
    trace: list[list[str]]
    half: bool = False


def _watch(model: nn.Module, scaler: RecordingScaler) -> None:
    """Note a forward run without fp16 autocast, and a backward that lands on the
    last step's gradients (nothing cleared them)."""

    def note(name: str) -> None:
        if type(scaler.calls) is list:
            scaler.calls.append(name)

    def forward(module: nn.Module, args: Any, output: Any) -> None:
        device = "cpu"
        if not torch.is_autocast_enabled(device):
            note("forward_no_fp16")
        elif torch.get_autocast_dtype(device) != torch.float16:
            note("forward_other_dtype")  # autocast on, in bf16: a fault of its own

    first = next(model.parameters())

    def landed(grad: torch.Tensor) -> None:
        if first.grad is not None and bool(first.grad.ne(0).any()):
            note("accumulated")

    model.register_forward_hook(forward)
    first.register_hook(landed)


def _returned_scaled(got: Any, scaler: RecordingScaler) -> bool:
    """Whether the step returned a loss that the scaler's scale returned."""
    value, scaled = as_float(got), scaler.scaled  # the step can reach `scaled`
    if value is None or type(scaled) is not list:
        return False
    return any(
        type(t) is torch.Tensor and t.numel() == 1 and value == t.float().item()
        and value != 0.0
        for t in scaled
    )  # fmt: skip


def _run_train(amp_train_step: Callable, case: _StepCase) -> _Run:
    torch.manual_seed(9)
    layers: list[nn.Module] = []
    for n_in, n_out in zip(case.layers, case.layers[1:], strict=False):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    name = {"momentum": "sgd_momentum"}.get(case.optimizer, case.optimizer)
    optimizer = make_optimizer(
        name, model.parameters(), lr=1e-2 if name == "adam" else 0.1
    )
    scaler = RecordingScaler(
        "cpu", init_scale=case.init_scale, growth_interval=case.growth_interval
    )
    scaler.watch(model, optimizer)
    _watch(model, scaler)
    gen = torch.Generator().manual_seed(10)
    losses, trace = [], []
    for size, max_norm in case.steps:
        x = torch.randn(8, case.layers[0], generator=gen)
        y = torch.randn(8, case.layers[-1], generator=gen) * size
        scaler.calls, scaler.scaled, scaler.max_norm = [], [], max_norm
        got = call_student(amp_train_step, model, optimizer, scaler, x, y, max_norm)
        calls = scaler.calls  # the reader's code can reach it: take only names
        calls = [c for c in calls if type(c) is str] if type(calls) is list else []
        if not isinstance(got, Raised) and _returned_scaled(got, scaler):
            calls.append("returned_scaled")
        trace.append(calls)
        half = any(p.dtype == torch.float16 for p in model.parameters())
        if isinstance(got, Raised):
            return _Run(got, trace, half)
        # a Python float, as the exercise says: a returned loss tensor passed before
        losses.append(None if isinstance(got, torch.Tensor) else as_float(got))
    params = [p.detach().clone() for p in model.parameters()]
    result = params, scaler.get_scale(), scaler.state_dict()["_growth_tracker"], losses
    return _Run(result, trace, half)


def _run_train_case(amp_train_step: Callable, case: _StepCase) -> Any:
    """(params, scale, tracker, losses) after running the steps, or Raised."""
    return _run_train(amp_train_step, case).result


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


def _train_hint(run: _Run) -> str:
    got = run.result
    raised = isinstance(got, Raised)
    hint = _fault_hint(run)
    if hint and raised:  # the error's own words too, its first sentence
        return with_the_error(hint, got)
    if hint:
        return hint
    if raised:
        return got.hint
    if any(loss is None for loss in got[3]):
        return _(
            "the step returned something that is not one Python number (a tensor "
            "keeps its graph and the step's activations alive): return the loss as "
            "a Python float, e.g. with .item()"
        )
    return _(
        "your step calls the scaler as it should, yet the weights, the scale or the "
        "loss differ from torch's: compare what it computes with the lesson's "
        "(mse_loss under fp16 autocast, clipping to the given max_norm) and what it "
        "returns (the loss before scaling)"
    )


def _describe_run(run: Any) -> str:
    if isinstance(run, Raised):
        return str(run)
    loss = run[3][-1]
    return _("scale {scale}").format(scale=show_value(run[1])) + (
        _(", loss {loss}").format(loss=f"{loss:.3g}") if loss is not None else ""
    )


def _train_rows(amp_train_step: Callable, hidden: bool) -> list[Row]:
    rows, said = [], ""
    for case in _TRAIN_HIDDEN if hidden else _TRAIN_CASES:
        expected = _run_train_case(_reference_step, case)
        run = _run_train(amp_train_step, case)
        got = run.result
        ok = _same_run(got, expected)
        if not ok and not isinstance(got, Raised) and got[1:] == expected[1:]:
            shown = _("params differ")
        else:
            shown = _describe_run(got)
        hint = "" if ok else _train_hint(run)
        # the same hint in the next case: said once, the table stays short
        shown_hint = _("the same as above") if hint and hint == said else hint
        said = hint or said
        rows.append(Row(_(case.name), _describe_run(expected), shown, ok, shown_hint))
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
