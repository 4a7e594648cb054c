"""Frequently reported AMP problems from public trackers, reproduced on the CPU.

Each ``reproduce_*`` function runs one problem small, with or without its fix, and
returns an ``Outcome``: whether the symptom appeared and the evidence (torch's own
message, the numbers; our words around them in the student's language).
``REPRODUCTIONS`` maps a problem's key in ``amp_lessons.teaching.clinic.REAL_WORLD``
(the table with the sources) to its function;
the problems that need a GPU or an old torch are explained there and not run here.
Notebook 09 runs them all.

Not covered here: problems that only appear across processes (lesson 10).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.core import nan_hunt
from amp_lessons.i18n import _
from amp_lessons.teaching import clinic, compiled, practice

__all__ = ["REPRODUCTIONS", "Outcome"]


@dataclass(frozen=True)
class Outcome:
    """One run of a reproduction: did the symptom appear, and what showed it."""

    broken: bool
    evidence: str


def _error(fn: Callable[[], object]) -> str:
    """``"TypeName: message"`` of what ``fn()`` raised, or "" if it returned."""
    try:
        fn()
    except Exception as exc:  # the message is the evidence
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return ""


def reproduce_t5_overflow(fixed: bool) -> Outcome:
    """fp16 NaN loss from a model whose activations pass 65504 (T5, trained in bf16).
    Fix: keep ``wo`` in fp32, as transformers does for T5 (bf16 works too)."""
    model = nan_hunt.t5_like_model(keep_wo_fp32=fixed)
    x = nan_hunt.t5_like_inputs()
    target = torch.zeros(2, 8, dtype=torch.long)
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), target.flatten())
    found = nan_hunt.find_first_overflow(model, x)
    return Outcome(not math.isfinite(loss.item()),
                   _("loss {loss}; first overflow: {found}").format(
                       loss=f"{loss.item():.4g}", found=found))  # fmt: skip


def reproduce_mask_nan(fixed: bool) -> Outcome:
    """softmax NaN from an additive mask of ``finfo(float32).min`` cast to fp16 (-inf)
    on a padding row. Fix: ``masked_fill`` with ``finfo(scores.dtype).min``."""
    scores, keep = nan_hunt.attention_scores(torch.float16)
    if fixed:
        fill = torch.finfo(scores.dtype).min
        weights = nan_hunt.masked_softmax(scores, keep, fill, how="fill")
    else:
        fill = torch.finfo(torch.float32).min
        weights = nan_hunt.masked_softmax(scores, keep, fill, how="add")
    rows = int(weights.isnan().any(-1).sum())
    return Outcome(
        rows > 0, _("{rows} of 3 rows of attention weights are nan").format(rows=rows)
    )


def reproduce_half_model(fixed: bool) -> Outcome:
    """ "Attempting to unscale FP16 gradients" after ``model.half()``. Fix: keep the
    model fp32; autocast makes the fp16 copies."""
    calls = clinic.MISUSES["model.half() with a GradScaler"][0]
    with torch.random.fork_rng(devices=[]):  # run_calls draws its model's weights
        result = clinic.run_calls(calls, half=not fixed)
    return Outcome(bool(result.error), result.error or _("no error"))


def _tiny_regression(seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        x = torch.randn(32, 8)
    return model, x, x.sum(dim=1, keepdim=True)


def reproduce_accumulation_unscale(fixed: bool) -> Outcome:
    """ "unscale_() has already been called" with gradient accumulation: unscale_ and
    clip after every micro-batch. Fix: only once, before the step."""
    model, x, y = _tiny_regression()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(x.device.type)

    def loop() -> None:
        for micro in range(4):  # accumulate 4 micro-batches per step
            with torch.amp.autocast(x.device.type, dtype=torch.float16):
                loss = F.mse_loss(model(x[micro::4]), y[micro::4]) / 4
            scaler.scale(loss).backward()
            if not fixed or micro == 3:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    error = _error(loop)
    return Outcome(bool(error), error or _("one step of 4 micro-batches, no error"))


def reproduce_clip_scaled(fixed: bool) -> Outcome:
    """Clipping before ``unscale_``: it measures the scaled gradients, so the clip
    acts on a norm 65536 times too large. Fix: ``scaler.unscale_`` first."""
    x, y = clinic.clinic_data()
    fp32 = clinic.train_amp(clinic.clinic_model(), x, y, num_steps=1, clip=1.0)
    run = clinic.train_amp(clinic.clinic_model(), x, y, torch.float16, num_steps=1,
                           scaler=torch.amp.GradScaler("cpu"), clip=1.0,
                           clip_before_unscale=not fixed)  # fmt: skip
    ratio = run.grad_norms[0] / fp32.grad_norms[0]
    evidence = _("clip_grad_norm_ measured {ratio} x the fp32 gradient norm")
    return Outcome(ratio > 100, evidence.format(ratio=f"{ratio:.4g}"))


def reproduce_scheduler_warning(fixed: bool) -> Outcome:
    """The ``lr_scheduler.step()`` before ``optimizer.step()`` warning after skipped
    first steps. Harmless; fix: step the scheduler only after a real step."""
    run = practice.scheduled_run(torch.amp.GradScaler("cpu", init_scale=2.0**17),
                                 only_after_real_steps=fixed)  # fmt: skip
    warned = [w for w in run.warnings if "lr_scheduler.step()" in w]
    return Outcome(
        bool(warned),
        _("{skipped} skipped steps; {warning}").format(
            skipped=run.num_skipped,
            warning=warned[0][:70] + "..." if warned else _("no warning"),
        ),
    )


def reproduce_gan_two_updates(fixed: bool) -> Outcome:
    """Two losses and two optimizers, with ``update()`` after each step: the scale's
    clock runs twice as fast. Fix: one scaler, ``update()`` once per iteration."""
    step = practice.gan_step if fixed else practice.wrong_gan_step("two_updates")
    run = practice.train_gan(torch.amp.GradScaler("cpu", init_scale=2.0**10,
                                                  growth_interval=4),
                             num_steps=5, step_fn=step)  # fmt: skip
    grew = sum(b > a for a, b in zip(run.scales, run.scales[1:], strict=False))
    return Outcome(grew > 1, _("scales {scales}: grew {grew} times in 5 iterations "
                               "with growth_interval=4").format(
                                   scales=run.scales, grew=grew))  # fmt: skip


class _MatMul(torch.autograd.Function):
    """A custom op with its own backward, the kind fused CUDA extensions define."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return grad.mm(b.t()), a.t().mm(grad)


class _MatMulAmp(_MatMul):
    """The same op made autocast-aware: backward runs under forward's autocast."""

    forward = staticmethod(torch.amp.custom_fwd(_MatMul.forward, device_type="cpu"))
    backward = staticmethod(torch.amp.custom_bwd(_MatMul.backward, device_type="cpu"))


def reproduce_custom_function(fixed: bool) -> Outcome:
    """A dtype mismatch in a custom autograd Function's backward under autocast: the
    backward runs outside autocast, with an fp16 grad and an fp32 saved weight.
    Fix: ``torch.amp.custom_fwd`` and ``torch.amp.custom_bwd``."""
    op = _MatMulAmp if fixed else _MatMul
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4, 5, generator=gen, requires_grad=True)
    weight = torch.randn(5, 3, generator=gen, requires_grad=True)

    def step() -> None:
        with torch.amp.autocast("cpu", dtype=torch.float16):
            h = a.mm(torch.eye(5))  # an fp16 activation from an earlier layer
            out = op.apply(h, weight)
        out.float().sum().backward()

    error = _error(step)
    ran = _("backward ran; weight.grad is {dtype}")
    return Outcome(bool(error), error or ran.format(dtype=weight.grad.dtype))


def reproduce_autocast_thread(fixed: bool) -> Outcome:
    """Outputs in fp32 under autocast: the forward ran in another thread, and
    autocast's state is per thread (DataParallel runs each replica in one). Fix:
    enter autocast inside the thread (DataParallel's workers now do)."""
    model, x, _y = _tiny_regression()
    seen: dict[str, torch.dtype] = {}

    def worker() -> None:
        if fixed:
            with torch.amp.autocast("cpu", dtype=torch.float16):
                seen["thread"] = model(x).dtype
        else:
            seen["thread"] = model(x).dtype

    with torch.amp.autocast("cpu", dtype=torch.float16):
        seen["main"] = model(x).dtype
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    return Outcome(
        seen["thread"] != torch.float16,
        _("main thread: {main}, worker thread: {worker}").format(
            main=seen["main"], worker=seen["thread"]
        ),
    )


def _steps_skipped(scalers: Iterable[torch.amp.GradScaler]) -> int:
    """Train the tiny regression (inputs x4: any scale above 2**11 overflows), one
    step per scaler given; return how many steps were skipped."""
    model, x, y = _tiny_regression()
    x, y = x * 4, y * 4
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-5)
    skipped = 0
    for scaler in scalers:
        optimizer.zero_grad(set_to_none=True)
        with torch.amp.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        skipped += scaler.get_scale() < scale  # a backoff: this step was skipped
    return skipped


def reproduce_resume_without_scaler(fixed: bool) -> Outcome:
    """Skipped steps after a resume: the scale had settled at 2**11, the checkpoint
    had no scaler state, and the new scaler starts again at 65536. Fix: save and
    load ``scaler.state_dict()``."""
    scaler = torch.amp.GradScaler("cpu")
    _steps_skipped([scaler] * 8)  # settles after 5 backoffs
    checkpoint = {"scaler": scaler.state_dict()} if fixed else {}  # + model, optim
    resumed = torch.amp.GradScaler("cpu")
    if "scaler" in checkpoint:
        resumed.load_state_dict(checkpoint["scaler"])
    skipped = _steps_skipped([resumed] * 4)
    return Outcome(skipped > 0, _("scale before the checkpoint {scale}; {skipped} of 4 "
                                  "steps skipped after resuming").format(
                                      scale=f"{scaler.get_scale():g}",
                                      skipped=skipped))  # fmt: skip


def reproduce_compiled_disabled_region(fixed: bool) -> Outcome:
    """Different gradients from a compiled region holding ``autocast(enabled=False)``
    (pytorch#179804). Fix: ``torch._functorch.config.backward_pass_autocast="off"``;
    without it, this torch's own setting (``compiled.backward_pass_autocast()``)."""
    setting = "off" if fixed else compiled.backward_pass_autocast()
    same = compiled.disabled_region_grads(setting)
    if same:
        evidence = _(
            "compiled gradients equal eager's (backward_pass_autocast={value})"
        )
    else:
        evidence = _(
            "compiled gradients differ from eager's (backward_pass_autocast={value})"
        )
    return Outcome(not same, evidence.format(value=repr(setting)))


def reproduce_scaler_in_loop(fixed: bool) -> Outcome:
    """A GradScaler created inside the loop: every iteration starts again at 65536,
    so a loss that overflows there skips every step, forever. Fix: create it once."""
    once = torch.amp.GradScaler("cpu")
    scalers = (once if fixed else torch.amp.GradScaler("cpu") for _i in range(8))
    skipped = _steps_skipped(scalers)
    # the fixed scaler also skips while it comes down to 2**11; then it trains
    evidence = _("{skipped} of 8 steps skipped, {trained} taken").format(
        skipped=skipped, trained=8 - skipped
    )
    return Outcome(skipped == 8, evidence)


def reproduce_bce_hazard(fixed: bool) -> Outcome:
    """Why CUDA autocast refuses BCELoss: an fp16 sigmoid rounds to exactly 1.0 and
    BCELoss's gradient divides by 1 - p = 0. Fix: ``BCEWithLogitsLoss`` on logits.
    (The refusal itself is CUDA-only; the CPU runs BCE in fp32.)"""
    logits = torch.tensor([12.0, -3.0], dtype=torch.float16, requires_grad=True)
    target = torch.tensor([0.0, 0.0], dtype=torch.float16)
    if fixed:
        loss = F.binary_cross_entropy_with_logits(logits.float(), target.float())
    else:
        loss = F.binary_cross_entropy(torch.sigmoid(logits).float(), target.float())
    loss.backward()
    finite = bool(torch.isfinite(logits.grad).all())
    return Outcome(not finite, _("loss {loss}, gradient {gradient}").format(
                       loss=f"{loss.item():.4g}",
                       gradient=logits.grad.tolist()))  # fmt: skip


REPRODUCTIONS: dict[str, Callable[[bool], Outcome]] = {
    "t5_fp16_nan": reproduce_t5_overflow,
    "mask_softmax_nan": reproduce_mask_nan,
    "unscale_fp16_gradients": reproduce_half_model,
    "unscale_twice_accumulation": reproduce_accumulation_unscale,
    "clip_without_unscale": reproduce_clip_scaled,
    "scheduler_warning": reproduce_scheduler_warning,
    "gan_scalers": reproduce_gan_two_updates,
    "custom_function_dtype": reproduce_custom_function,
    "autocast_threads": reproduce_autocast_thread,
    "resume_without_scaler": reproduce_resume_without_scaler,
    "bce_under_autocast": reproduce_bce_hazard,
    "compile_disabled_region": reproduce_compiled_disabled_region,
    "scaler_in_loop": reproduce_scaler_in_loop,
}
"""Problem key (as in ``clinic.REAL_WORLD``) -> its reproduction."""
