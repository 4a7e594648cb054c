"""The underflow problem: what fp16 does to real gradients, and why AMP scales the loss
and keeps fp32 master weights.

Notebook 02 uses this module: the gradients of a real network (``backward_demo``,
``collect_gradients``), what a cast to a format does to them at a given loss scale
(``cast_outcome``, ``underflow_fraction``, ``log2_histogram``; the picture is
``amp_lessons.teaching.plots.plot_gradient_histogram``), a tiny model trained entirely
in fp16 that stops learning unless the loss is scaled (``train_pure_fp16``), and the
update that fp16 swallows whole (``swamping``). Every number comes from a real
torch cast or a real fp16 computation.

Not covered here: dynamic loss scaling (notebook 03, ``amp_lessons.core.scaler``),
stochastic rounding, per-tensor scaling for fp8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.core.formats import Format, resolve_format, zones


def _validate_scale(scale: float) -> float:
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    return float(scale)


# ---- real gradients ------------------------------------------------------------


def collect_gradients(model: nn.Module) -> torch.Tensor:
    """Every gradient value of `model`, flattened into one 1-D float32 tensor (CPU).

    Example:
        >>> model = nn.Linear(3, 2)
        >>> model(torch.ones(1, 3)).sum().backward()
        >>> collect_gradients(model)
        tensor([1., 1., 1., 1., 1., 1., 1., 1.])
    """
    grads = [
        p.grad.detach().flatten() for p in model.parameters() if p.grad is not None
    ]
    if not grads:
        raise ValueError(
            "the model has no gradients yet: run loss.backward() first (and do not "
            "zero them before collecting)"
        )
    return torch.cat([g.float().cpu() for g in grads])


def backward_demo(
    seed: int = 0, depth: int = 12, width: int = 32, batch: int = 32
) -> nn.Module:
    """A plain deep MLP after one fp32 forward and backward: its ``.grad`` are set.

    `depth` hidden layers of `width` units with GELU and PyTorch's default init,
    cross-entropy on a random batch of `batch` inputs and 10 classes. Without
    normalization or residual connections the default init shrinks the signal at
    every layer, so the gradients spread over some 30 powers of two, much of it
    below fp16's normal range: what the Mixed Precision Training paper measured for
    SSD's activation gradients. The global RNG is left untouched.

    Example:
        >>> grads = collect_gradients(backward_demo())  # 13_002 values, none 0
        >>> outcome = cast_outcome(grads)  # seed 0: 34% -> 0, 51% subnormal in fp16
        >>> cast_outcome(grads, scale=2.0**16).zero  # 0.0: scaling rescues them all
    """
    if depth < 1 or width < 1 or batch < 1:
        raise ValueError(
            f"depth, width and batch must be >= 1, got {depth, width, batch}"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        size = 32
        for _ in range(depth):
            layers += [nn.Linear(size, width), nn.GELU()]
            size = width
        model = nn.Sequential(*layers, nn.Linear(size, 10))
        x = torch.randn(batch, 32)
        y = torch.randint(0, 10, (batch,))
    F.cross_entropy(model(x), y).backward()
    return model


# ---- what a cast does to them --------------------------------------------------


@dataclass(frozen=True)
class CastOutcome:
    """Fractions of the NONZERO values by what the cast made of them (sum 1, or all
    0 when `nonzero` is 0)."""

    zero: float  # flushed to 0: the value is lost
    subnormal: float  # kept, with fewer significant bits
    normal: float  # kept with the format's full precision
    overflow: float  # inf (or nan / saturated to max where the format has no inf)
    nonzero: int  # how many values were nonzero before the cast


def _scaled(grads: torch.Tensor, scale: float) -> torch.Tensor:
    if not isinstance(grads, torch.Tensor) or not grads.is_floating_point():
        raise ValueError(
            f"grads must be a floating-point tensor, got {type(grads).__name__}"
            + (f" of {grads.dtype}" if isinstance(grads, torch.Tensor) else "")
        )
    grads = grads.detach().flatten().float().cpu()
    if not torch.isfinite(grads).all():
        raise ValueError("grads contain inf or nan: pass finite gradient values")
    # float32 times the scale, as a scaled fp32 backward and lesson 02's grader compute
    return grads[grads != 0] * _validate_scale(scale)


def cast_outcome(
    grads: torch.Tensor, scale: float = 1.0, fmt: str | Format = "fp16"
) -> CastOutcome:
    """What casting ``grads * scale`` to `fmt` does to the nonzero values of `grads`.

    Uses torch's own cast. A value overflows when the cast gives inf or nan; for
    fp8_e4m3, which saturates to +-448 instead, when its magnitude is past 464,
    where rounding would leave the format (``formats.zones``).

    Example:
        >>> g = torch.tensor([1e-9, 1e-6, 1e-3, 0.0])
        >>> cast_outcome(g)
        CastOutcome(zero=0.333..., subnormal=0.333..., normal=0.333..., overflow=0.0,
                    nonzero=3)
        >>> cast_outcome(g, scale=2.0**16).zero  # scaled: 6.6e-5 is normal fp16
        0.0
    """
    f = resolve_format(fmt, castable=True)
    scaled = _scaled(grads, scale)
    n = scaled.numel()
    if n == 0:
        return CastOutcome(0.0, 0.0, 0.0, 0.0, 0)
    stored = scaled.to(f.dtype).float()  # exact: every fmt value is a float32
    zero = stored == 0
    overflow = ~torch.isfinite(stored)
    if f.overflow == "saturate":
        overflow |= scaled.abs() > zones(f)[-1].lo
    subnormal = ~zero & ~overflow & (stored.abs() < f.min_normal)
    normal = ~zero & ~overflow & ~subnormal
    return CastOutcome(
        *(m.sum().item() / n for m in (zero, subnormal, normal, overflow)), n
    )


def underflow_fraction(
    grads: torch.Tensor, scale: float = 1.0, fmt: str | Format = "fp16"
) -> float:
    """The fraction of the nonzero `grads` that ``grads * scale`` cast to `fmt` turns
    into exactly 0 (0.0 when no grad is nonzero).

    Example:
        >>> underflow_fraction(torch.tensor([1e-9, 1e-6, 1e-3, 0.0]))  # 1e-9 < 2**-25
        0.3333333333333333
    """
    return cast_outcome(grads, scale, fmt).zero


class Histogram(NamedTuple):
    counts: torch.Tensor  # int64, one per bin
    edges: torch.Tensor  # float64, len(counts) + 1, in log2 units


def log2_histogram(
    values: torch.Tensor, bins: int | torch.Tensor | None = None
) -> Histogram:
    """Histogram of log2|v| over the nonzero values (zeros have no logarithm).

    `bins` None: one bin per power of two, [k, k+1) for each integer k from the
    smallest to the largest binade present. An int: that many equal bins over the
    range. A 1-D tensor: the edges. Bins are half-open except the last, as in
    ``torch.histogram``.

    Example:
        >>> log2_histogram(torch.tensor([0.5, 0.75, 3.0, 0.0]))
        Histogram(counts=tensor([2, 0, 1]), edges=tensor([-1., 0., 1., 2.], ...))
    """
    if not isinstance(values, torch.Tensor) or not values.is_floating_point():
        raise ValueError("values must be a floating-point tensor")
    v = values.detach().flatten().double().cpu()
    v = v[(v != 0) & torch.isfinite(v)]
    logs = v.abs().log2()  # float64: exact at powers of two, so binades are exact
    if bins is None:
        if logs.numel() == 0:
            return Histogram(torch.zeros(0, dtype=torch.int64), torch.zeros(1).double())
        lo, hi = math.floor(logs.min().item()), math.floor(logs.max().item()) + 1
        bins = torch.arange(lo, hi + 1, dtype=torch.float64)
    elif isinstance(bins, torch.Tensor):
        bins = bins.double()
    elif isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(
            f"bins must be None, a positive int or a tensor of edges, got {bins!r}"
        )
    counts, edges = torch.histogram(logs, bins=bins)
    return Histogram(counts.long(), edges)


# ---- training entirely in fp16 -------------------------------------------------

ROWS, DIM = 8192, 8  # 65_536 outputs: d(mean)/d(output) = 2 * error / 2**16
TARGET_SCALE = 2.0**-14  # target weights ~6e-5: outputs ~1.7e-4


def pure_fp16_task(seed: int = 0) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A linear model in fp16 and its data: ``(model, x, y)``, all float16.

    The targets are small, y = x @ W.T with W ~ N(0, 2**-14) (many of its entries
    are fp16 subnormals), like a small correction a fine-tuned model still has to
    learn. The global RNG is left untouched. With a mean squared error over
    8192 x 8 = 2**16 outputs, each output's gradient is 2 * error / 2**16, about
    2**-27 for errors ~2**-12: below fp16's smallest subnormal 2**-24 (anything
    at or under 2**-25 rounds to 0). The model starts at zero.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, DIM, generator=gen)
    target = torch.randn(DIM, DIM, generator=gen) * TARGET_SCALE
    model = nn.utils.skip_init(nn.Linear, DIM, DIM)  # no draw from the global RNG
    nn.init.zeros_(model.weight)
    nn.init.zeros_(model.bias)
    return model.half(), x.half(), (x @ target.T).half()


def train_pure_fp16(
    scale: float | None = None, num_steps: int = 30, seed: int = 0, lr: float = 1.0
) -> list[float]:
    """Train ``pure_fp16_task(seed)`` with SGD, everything in fp16; return the loss
    before each step.

    Weights, activations and gradients are float16 and there is no autocast. With
    `scale`, the loss is multiplied by it before backward and the step divides it
    out, ``w -= (lr / scale) * grad`` (so no fp16 unscaled gradient is ever formed).
    The losses are the mean squared errors of the fp16 predictions, measured in
    float32: the fp16 loss itself (~1e-8) would round to 0. A scale of 65520 or more
    rounds to inf in fp16 (65504 is the largest finite value), and training turns to
    nan: GradScaler's default 2**16 is one such scale.

    Example (seeds 0-9, 30 steps, 0.2-3 s each on a 2-core CPU):
        >>> losses = train_pure_fp16()  # 89-100% of the grads are exactly 0
        >>> losses[-1] / losses[0]  # seed 0: 0.98 (0.94 to 1.0 over seeds 0-9)
        >>> losses = train_pure_fp16(scale=1024.0)
        >>> losses[-1] / losses[0]  # about 1e-5: it learns

    The loss is written as ``(pred - y).pow(2).mean()``: torch's CPU fp16
    ``mse_loss`` backward multiplies 2/N into the error BEFORE the incoming gradient,
    so it flushes to 0 even with a loss scale.
    """
    if scale is not None:
        scale = _validate_scale(scale)
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
    _validate_scale(lr)
    model, x, y = pure_fp16_task(seed)
    losses = []
    for _ in range(num_steps):
        pred = model(x)
        losses.append((pred.float() - y.float()).pow(2).mean().item())
        loss = (pred - y).pow(2).mean()
        model.zero_grad(set_to_none=True)
        (loss if scale is None else loss * scale).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= (lr / (scale or 1.0)) * p.grad  # an fp16 multiply and subtract
    return losses


# ---- swamping: why master weights are fp32 -------------------------------------


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + b rounded to their dtype: torch's own add, or for fp8 (which torch has no
    arithmetic for) a float32 add rounded back, which is what torch's CPU fp16 add
    does too."""
    if a.dtype.itemsize == 1:
        return (a.float() + b.float()).to(a.dtype)
    return a + b


@dataclass(frozen=True)
class Swamping:
    """`num_steps` additions of `update` to `weight`, in `fmt` and in float32."""

    fmt: str
    weight: float  # the weight as `fmt` stores it
    update: float  # the update as `fmt` stores it
    one_step: float  # fmt(weight) + fmt(update), computed in fmt
    low_precision: float  # after num_steps additions in fmt
    master: float  # after num_steps additions in float32
    exact: float  # weight + num_steps * update, in float64
    num_steps: int

    @property
    def swamped(self) -> bool:
        """True when one addition in `fmt` leaves the weight unchanged."""
        return self.one_step == self.weight


def swamping(
    weight: float = 1.0,
    update: float = 1e-4,
    fmt: str | Format = "fp16",
    num_steps: int = 1000,
) -> Swamping:
    """Add `update` to `weight` `num_steps` times in `fmt` and in float32.

    In fp16, 1 + 1e-4 rounds back to 1 (the gap above 1 is 2**-10 ~ 1e-3, and
    1e-4 is less than half of it), so the fp16 weight never moves while the
    float32 copy gains every update: AMP keeps float32 master weights for this.

    Example:
        >>> s = swamping()
        >>> s.one_step == 1.0, s.low_precision, round(s.master, 4)
        (True, 1.0, 1.1)
    """
    f = resolve_format(fmt, castable=True)
    for name, value in (("weight", weight), ("update", update)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
    w = torch.tensor(float(weight)).to(f.dtype)
    u = torch.tensor(float(update)).to(f.dtype)
    one_step = _add(w, u).float().item()
    low = w
    for _ in range(num_steps):
        low = _add(low, u)  # rounded to fmt after each addition, as a step is
    w32 = torch.tensor(float(weight))
    u32 = torch.tensor(float(update))
    for _ in range(num_steps):
        w32 += u32
    return Swamping(
        fmt=f.name,
        weight=w.float().item(),
        update=u.float().item(),
        one_step=one_step,
        low_precision=low.float().item(),
        master=w32.item(),
        exact=float(weight) + num_steps * float(update),
        num_steps=num_steps,
    )
