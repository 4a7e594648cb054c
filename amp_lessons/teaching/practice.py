"""AMP in real code: one scaler for several losses and optimizers, a gradient penalty,
fused optimizers, and learning-rate schedulers that meet skipped steps.

Notebook 09 uses this module. A tiny GAN shows the rule of the PyTorch AMP examples
page: ``scale`` each loss, ``step`` each optimizer, ``update`` once per iteration
(``gan_step``), and what two updates or two scalers do instead. ``penalty_step`` is the
gradient penalty of the same page (``autograd.grad`` on the scaled loss, unscaled by
hand; ``penalty_run`` records a few steps of it). ``scheduled_run`` counts skipped
steps and the scheduler warning they cause. Every run works with
``torch.amp.GradScaler`` and with our ``LossScaler``.

Not covered here: torch.compile (``amp_lessons.teaching.compiled``), NaN hunting
(``amp_lessons.core.nan_hunt``), several processes (lesson 10).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.core.formats import tensor_bits
from amp_lessons.i18n import N_

__all__ = [
    "GAN_MISTAKES",
    "GanRun",
    "ScheduledRun",
    "gan_batch",
    "gan_step",
    "make_gan",
    "make_gan_optimizers",
    "mixed_scale_error",
    "penalty_run",
    "penalty_step",
    "scheduled_run",
    "train_gan",
    "wrong_gan_step",
]

NOISE_DIM, DATA_DIM = 4, 2


# ---- a GAN small enough to read -----------------------------------------------------


def make_gan(seed: int = 0, hidden: int = 16) -> tuple[nn.Sequential, nn.Sequential]:
    """``(generator, discriminator)``: noise (4) -> 2-D points, 2-D points -> 1 logit.

    Seeded; the caller's random state is left alone.

    Example:
        >>> generator, discriminator = make_gan()
        >>> discriminator(generator(torch.zeros(3, 4))).shape
        torch.Size([3, 1])
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        generator = nn.Sequential(
            nn.Linear(NOISE_DIM, hidden), nn.ReLU(), nn.Linear(hidden, DATA_DIM)
        )
        discriminator = nn.Sequential(
            nn.Linear(DATA_DIM, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, 1)
        )
    return generator, discriminator


def make_gan_optimizers(
    generator: nn.Module, discriminator: nn.Module, fused: bool = False
) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    """``(opt_g, opt_d)``: Adam with the usual GAN betas (0.5, 0.999).

    ``fused=True`` makes them fused optimizers, which unscale inside their own step.
    """
    kwargs: dict[str, Any] = {"lr": 2e-3, "betas": (0.5, 0.999)}
    if fused:
        kwargs["fused"] = True
    return (torch.optim.Adam(generator.parameters(), **kwargs),
            torch.optim.Adam(discriminator.parameters(), **kwargs))  # fmt: skip


def gan_batch(step: int, batch: int = 32, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``(real, noise)`` for one step: points on a circle of radius 2, and noise.

    The same ``(step, seed)`` always gives the same batch.

    Example:
        >>> real, noise = gan_batch(0)
        >>> real.shape, noise.shape, round(real.norm(dim=1).mean().item(), 1)
        (torch.Size([32, 2]), torch.Size([32, 4]), 2.0)
    """
    gen = torch.Generator().manual_seed(seed * 100_003 + step)
    angle = torch.rand(batch, generator=gen) * 2 * math.pi
    real = 2 * torch.stack([angle.cos(), angle.sin()], dim=1)
    real = real + 0.05 * torch.randn(batch, DATA_DIM, generator=gen)
    return real, torch.randn(batch, NOISE_DIM, generator=gen)


def _bce(logits: torch.Tensor, target: float) -> torch.Tensor:
    # with_logits: the autocast-safe form (CUDA autocast refuses BCELoss outright)
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))


def gan_step(
    generator: nn.Module,
    discriminator: nn.Module,
    opt_g: torch.optim.Optimizer,
    opt_d: torch.optim.Optimizer,
    scaler: Any,
    real: torch.Tensor,
    noise: torch.Tensor,
) -> tuple[float, float]:
    """One GAN iteration under fp16 autocast with ONE scaler: scale each loss, step
    each optimizer, update once. Returns ``(d_loss, g_loss)`` as floats.

    Example::

        scaler = torch.amp.GradScaler("cpu")
        for step in range(num_steps):
            d_loss, g_loss = gan_step(generator, discriminator, opt_g, opt_d,
                                      scaler, *gan_batch(step))
    """
    ctx = torch.amp.autocast(real.device.type, dtype=torch.float16)
    opt_d.zero_grad(set_to_none=True)
    with ctx:
        fake = generator(noise)
        d_real, d_fake = discriminator(real), discriminator(fake.detach())
        d_loss = _bce(d_real, 1.0) + _bce(d_fake, 0.0)
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)  # skipped on its own if D's gradients hold inf/nan
    opt_g.zero_grad(set_to_none=True)
    with ctx:
        g_loss = _bce(discriminator(fake), 1.0)
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()  # once: backs off if either optimizer saw inf/nan
    return d_loss.item(), g_loss.item()


GAN_MISTAKES: dict[str, str] = {
    "two_updates": N_(
        "scaler.update() after each optimizer's step: the growth tracker counts "
        "every iteration twice, so the scale grows twice as often; call update() "
        "once, after both steps"
    ),
    "new_scaler_for_g": N_(
        "a second scaler made inside the step: it starts at 65536 on "
        "every call, never backs off for good and never grows; use the one scaler for "
        "both losses"
    ),
    "two_scalers": N_(
        "a second scaler for the generator: an overflow in G no longer backs off "
        "the scaler you were given, the two scales drift apart, and both must be "
        "saved; use the one scaler for both losses"
    ),
    "optimizer_step": N_(
        "opt_g.step() called directly: it steps on inf/nan gradients "
        "and on gradients still multiplied by the scale; call scaler.step(opt_g)"
    ),
    "no_g_step": N_(
        "the generator never moves: call scaler.step(opt_g) after the "
        "generator's backward"
    ),
    "g_first": N_(
        "the generator was trained first; train the discriminator first, on a "
        "detached fake, then the generator through the updated discriminator"
    ),
    "unscaled_g_backward": N_(
        "the generator's loss went backward unscaled "
        "(g_loss.backward()): scaler.step then divides small true gradients by the "
        "scale; call scaler.scale(g_loss).backward()"
    ),
    "no_update": N_("the scale never changes: call scaler.update() once at the end"),
}
"""Mistakes in a GAN step that ``wrong_gan_step`` can make, with what goes wrong."""


def wrong_gan_step(mistake: str) -> Callable[..., tuple[float, float]]:
    """``gan_step`` with one known mistake (a key of ``GAN_MISTAKES``), to show or to
    recognise what it does.

    Example:
        >>> step = wrong_gan_step("two_updates")
        >>> generator, discriminator = make_gan()
        >>> opt_g, opt_d = make_gan_optimizers(generator, discriminator)
        >>> scaler = torch.amp.GradScaler("cpu", growth_interval=2)
        >>> _ = step(generator, discriminator, opt_g, opt_d, scaler, *gan_batch(0))
        >>> scaler.get_scale()  # one iteration, yet the interval of 2 is reached
        131072.0
    """
    if mistake not in GAN_MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; one of {list(GAN_MISTAKES)}")

    kept: dict[str, Any] = {}  # two_scalers: made on the first call, then kept

    def step(generator, discriminator, opt_g, opt_d, scaler, real, noise):
        ctx = torch.amp.autocast(real.device.type, dtype=torch.float16)
        scaler_g = scaler
        if mistake == "new_scaler_for_g":
            scaler_g = type(scaler)(real.device.type)
        elif mistake == "two_scalers":
            scaler_g = kept.setdefault("g", type(scaler)(real.device.type))
        # g_first swaps the two halves; everything else keeps D then G.
        halves = ["g", "d"] if mistake == "g_first" else ["d", "g"]
        losses = {}
        for half in halves:
            opt, scl = (opt_d, scaler) if half == "d" else (opt_g, scaler_g)
            opt.zero_grad(set_to_none=True)
            with ctx:
                fake = generator(noise)
                if half == "d":
                    d_real, d_fake = discriminator(real), discriminator(fake.detach())
                    loss = _bce(d_real, 1.0) + _bce(d_fake, 0.0)
                else:
                    loss = _bce(discriminator(fake), 1.0)
            if mistake == "unscaled_g_backward" and half == "g":
                loss.backward()
            else:
                scl.scale(loss).backward()
            if mistake == "optimizer_step" and half == "g":
                opt.step()
            elif not (mistake == "no_g_step" and half == "g"):
                scl.step(opt)
            if mistake == "two_updates" or (scl is not scaler):
                scl.update()
            losses[half] = loss.item()
        if mistake not in ("two_updates", "no_update"):
            scaler.update()
        return losses["d"], losses["g"]

    return step


# ---- a whole run, recorded ----------------------------------------------------------


@dataclass
class GanRun:
    """What ``train_gan`` saw, one entry per iteration (iteration 1 first)."""

    d_losses: list[float] = field(default_factory=list)
    g_losses: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)  # the scale the losses used
    history: list[dict[str, Any]] = field(default_factory=list)  # bits, for twins


def train_gan(
    scaler: Any,
    num_steps: int = 6,
    *,
    step_fn: Callable[..., tuple[float, float]] = gan_step,
    fused: bool = False,
    overflow: dict[int, str] | None = None,
    seed: int = 0,
) -> GanRun:
    """Train ``make_gan(seed)`` for ``num_steps`` iterations of ``step_fn``.

    ``overflow`` maps an iteration (from 1) to ``"d"`` or ``"g"``: in that iteration
    the first weight of that network gets an inf gradient, a scripted bad batch for
    one optimizer only. ``history`` holds the bits of every parameter and optimizer
    state tensor after each iteration, so two scalers can be compared bit for bit.

    Example:
        >>> run = train_gan(torch.amp.GradScaler("cpu", growth_interval=2),
        ...                 num_steps=4, overflow={3: "d"})
        >>> run.scales  # grows after 2 clean iterations, halves after the overflow
        [65536.0, 65536.0, 131072.0, 65536.0]
    """
    overflow = overflow or {}
    generator, discriminator = make_gan(seed)
    opt_g, opt_d = make_gan_optimizers(generator, discriminator, fused=fused)
    now = {"step": 0}
    for net, key in ((generator, "g"), (discriminator, "d")):
        weight = net[0].weight
        weight.register_hook(
            lambda g, key=key: g * math.inf if overflow.get(now["step"]) == key else g
        )
    run = GanRun()
    for step in range(1, num_steps + 1):
        now["step"] = step
        run.scales.append(scaler.get_scale())
        d_loss, g_loss = step_fn(generator, discriminator, opt_g, opt_d, scaler,
                                 *gan_batch(step, seed=seed))  # fmt: skip
        run.d_losses.append(d_loss)
        run.g_losses.append(g_loss)
        run.history.append({
            "scale": scaler.get_scale(),
            "state_dict": repr(scaler.state_dict()),
            "params": [tensor_bits(p) for p in [*generator.parameters(),
                                                *discriminator.parameters()]],
            "adam": [tensor_bits(t) for opt in (opt_g, opt_d)
                     for s in opt.state.values() for t in s.values()],
        })  # fmt: skip
    return run


def mixed_scale_error(scale_a: float = 2.0**16, scale_b: float = 2.0**15) -> float:
    """The relative error of a gradient that two losses built with TWO scalers whose
    scales have drifted apart (``scale_b`` backed off once), unscaled by the first.

    One model, two losses (think of a generator's adversarial loss plus an L1 loss):
    the gradient is ``scale_a * g_a + scale_b * g_b`` and unscaling divides both by
    ``scale_a``, so ``g_b`` arrives multiplied by ``scale_b / scale_a``. With equal
    scales the error is fp16 rounding only.

    Example:
        >>> mixed_scale_error(2.0**16, 2.0**16) < 1e-3 < 0.1 < mixed_scale_error()
        True
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Linear(8, 4)
        x, y = torch.randn(16, 8), torch.randn(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    # The true gradient, fp32 and unscaled.
    (F.mse_loss(model(x), y) + F.l1_loss(model(x), y)).backward()
    expected = model.weight.grad.clone()
    optimizer.zero_grad(set_to_none=True)
    scalers = [torch.amp.GradScaler(x.device.type, init_scale=s)
               for s in (scale_a, scale_b)]  # fmt: skip
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        out = model(x)
        losses = (F.mse_loss(out.float(), y), F.l1_loss(out.float(), y))
    for scaler, loss in zip(scalers, losses, strict=True):
        scaler.scale(loss).backward(retain_graph=True)
    scalers[0].unscale_(optimizer)
    got = model.weight.grad
    return ((got - expected).norm() / expected.norm()).item()


# ---- a gradient penalty -------------------------------------------------------------


def penalty_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    weight: float = 0.1,
    unscale: bool = True,
) -> tuple[float, float]:
    """One step of ``mse_loss + weight * ||grad||`` under fp16 autocast, the gradient
    penalty of the PyTorch AMP examples page. Returns ``(loss, penalty)``.

    ``autograd.grad`` runs on the SCALED loss (fp16 gradients would underflow
    otherwise) with ``create_graph=True``; the gradients are unscaled by hand before
    the penalty is formed. ``unscale=False`` is the mistake: the penalty is then
    measured on gradients ``scale`` times too large.

    Example:
        >>> def penalty(unscale):
        ...     torch.manual_seed(0)
        ...     model, x, y = nn.Linear(4, 1), torch.ones(8, 4), torch.zeros(8, 1)
        ...     optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ...     scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        ...     return penalty_step(model, optimizer, scaler, x, y, unscale=unscale)[1]
        >>> round(penalty(unscale=False) / penalty(unscale=True))  # the scale
        1024
    """
    optimizer.zero_grad(set_to_none=True)
    ctx = torch.amp.autocast(x.device.type, dtype=torch.float16)
    with ctx:
        loss = F.mse_loss(model(x), y)
    params = [p for p in model.parameters() if p.requires_grad]
    scaled_grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
    # 1/scale as a Python float: inf/nan in a scaled gradient stays inf/nan here, so
    # the scaler still sees it in backward and skips the step.
    inv_scale = 1.0 / scaler.get_scale() if unscale else 1.0
    grads = [g * inv_scale for g in scaled_grads]
    with ctx:
        penalty = torch.stack([g.float().pow(2).sum() for g in grads]).sum().sqrt()
        total = loss + weight * penalty
    scaler.scale(total).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item(), penalty.item()


def penalty_run(
    scaler: Any,
    num_steps: int = 6,
    *,
    fused: bool = False,
    unscale: bool = True,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """``num_steps`` of ``penalty_step`` on a small Tanh network with AdamW; one
    record per step: ``loss``, ``penalty``, the ``scale`` after the step and the bits
    of every parameter, gradient and optimizer state tensor.

    Example:
        >>> run = penalty_run(torch.amp.GradScaler("cpu", init_scale=2.0**20), 3)
        >>> [r["scale"] for r in run]  # 2**20 overflows: backs off, then steps
        [524288.0, 262144.0, 131072.0]
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused or None)
    gen = torch.Generator().manual_seed(seed + 1)
    records = []
    for _ in range(num_steps):
        x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 2, generator=gen)
        loss, penalty = penalty_step(model, optimizer, scaler, x, y, unscale=unscale)
        records.append({
            "loss": loss, "penalty": penalty, "scale": scaler.get_scale(),
            "params": [tensor_bits(p) for p in model.parameters()],
            "grads": [tensor_bits(p.grad) for p in model.parameters()],
            "state": [tensor_bits(t) for st in optimizer.state.values()
                      for t in st.values()],
        })  # fmt: skip
    return records


# ---- schedulers and skipped steps ---------------------------------------------------


@dataclass
class ScheduledRun:
    """What ``scheduled_run`` saw: the lr each step used, which steps were skipped,
    and the warnings torch raised (``"UserWarning: Detected call of ..."``)."""

    lrs: list[float] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped)


def scheduled_run(
    scaler: Any,
    num_steps: int = 6,
    *,
    fused: bool = False,
    only_after_real_steps: bool = False,
    seed: int = 0,
) -> ScheduledRun:
    """Train a small regression with Adam and a StepLR (lr halves every 2 scheduler
    steps), and count the skipped steps the way any loop can: the scale went down.

    With a large ``init_scale`` the first steps overflow and are skipped; the
    scheduler then warns that ``lr_scheduler.step()`` ran before
    ``optimizer.step()``, although the loop is in the right order.
    ``only_after_real_steps=True`` steps the scheduler only after a real step, so
    the schedule counts updates, not iterations.

    Example:
        >>> run = scheduled_run(torch.amp.GradScaler("cpu", init_scale=2.0**17))
        >>> run.skipped, len(run.warnings)
        ([True, True, True, False, False, False], 1)
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=fused or None)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    gen = torch.Generator().manual_seed(seed + 1)
    run = ScheduledRun()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(num_steps):
            x = torch.randn(32, 8, generator=gen)
            y = x.sum(dim=1, keepdim=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.amp.autocast(x.device.type, dtype=torch.float16):
                loss = F.mse_loss(model(x), y)
            run.lrs.append(optimizer.param_groups[0]["lr"])
            scale = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            skipped = scaler.get_scale() < scale  # backoff happens only on inf/nan
            run.skipped.append(skipped)
            if not (only_after_real_steps and skipped):
                scheduler.step()
    run.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
    return run
