"""Choosing fp8 scales: dynamic vs delayed (an amax history), tensorwise vs rowwise.

``amp_lessons.core.fp8`` scales each tensor by its own amax, read just before the cast
("dynamic" or "current" scaling): two passes over the tensor. Transformer Engine's
``DelayedScaling`` recipe instead predicts the scale from the amaxes of the last steps
(its default: the max over a history of 1024), so the cast needs one pass. The price:
a tensor that outgrows its history saturates at the format's max until the history
catches up, and after a spike the scale stays small for a whole history length.

One scale per tensor has its own weakness: one outlier row sets the scale for all
rows, and the others sink into e4m3's subnormals or to zero. One scale per row
(torchao's "rowwise" recipe) gives each row its own range. Notebook 11 measures both.

Not covered: TE's ``interval`` (recompute the scale every N steps) and the amax
all-reduce across ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from amp_lessons.core.fp8 import (
    E4M3,
    Fp8Tensor,
    amax,
    cast_to_fp8,
    scale_from_amax,
    to_fp8,
)

__all__ = [
    "DelayedScaling",
    "capture_linear_tensors",
    "compare_scaling",
    "one_scale_vs_own",
    "outlier_matrix",
    "row_errors",
    "saturated_fraction",
    "zero_fraction",
]


class DelayedScaling:
    """One tensor's delayed scale: ``max / max(history) / 2**margin``, used for this
    step's cast; this step's amax then joins the history for the next one.

    Until the history holds a nonzero amax the scale stays at its start, 1.0, and a
    zero or non-finite amax never replaces it (what TE's default scale update does).

    Example:
        >>> s = DelayedScaling(history_len=2)
        >>> s.cast(torch.tensor([2.0, -4.0])).scale    # nothing recorded yet
        tensor(1.)
        >>> s.scale                                    # 448 / 4, for the next step
        tensor(112.)
        >>> q = s.cast(torch.tensor([10.0]))           # a spike: 10 * 112 > 448
        >>> q.data.float(), s.scale                    # saturated; history max now 10
        (tensor([448.]), tensor(44.8000))
    """

    def __init__(
        self, dtype: torch.dtype = E4M3, history_len: int = 16, margin: int = 0
    ) -> None:
        if history_len < 1:
            raise ValueError(f"history_len must be at least 1, got {history_len}")
        self.dtype = dtype
        self.margin = margin
        self.history = torch.zeros(history_len)
        self.scale = torch.tensor(1.0)

    def cast(self, x: torch.Tensor) -> Fp8Tensor:
        """Cast ``x`` with the scale predicted so far, then record ``amax(x)``."""
        q = Fp8Tensor(cast_to_fp8(x, self.scale, self.dtype), self.scale, x.dtype)
        self.record(amax(x).float())
        return q

    def record(self, current_amax: torch.Tensor) -> None:
        self.history = torch.roll(self.history, 1)
        self.history[0] = current_amax
        predicted = self.history.max()
        if predicted > 0 and torch.isfinite(predicted):
            self.scale = scale_from_amax(predicted, self.dtype) / 2**self.margin


def saturated_fraction(x: torch.Tensor, q: Fp8Tensor) -> float:
    """Fraction of ``x`` that the cast clipped: ``|x * scale|`` beyond the max.

    Example:
        >>> x = torch.tensor([1.0, 2.0, 3.0, 4.0])
        >>> saturated_fraction(x, Fp8Tensor(cast_to_fp8(x, torch.tensor(150.0)),
        ...                                 torch.tensor(150.0), x.dtype))
        0.5
    """
    big = torch.finfo(q.data.dtype).max
    return (x.float().abs() * q.scale > big).float().mean().item()


def zero_fraction(x: torch.Tensor, q: Fp8Tensor) -> float:
    """Fraction of the nonzero values of ``x`` that the cast flushed to zero.

    Example:
        >>> x = torch.tensor([1e-4, 1.0])   # 1e-4 * 448 = 0.045: below e4m3's 2**-9?
        >>> zero_fraction(x, to_fp8(x))     # no: 0.045 > 0.002, it survives
        0.0
    """
    nonzero = x != 0
    if not nonzero.any():
        return 0.0
    return ((q.data.float() == 0) & nonzero).sum().item() / nonzero.sum().item()


def _relative_error(x: torch.Tensor, q: Fp8Tensor, dim: int | None) -> torch.Tensor:
    err = (q.dequantize().float() - x.float()).norm(dim=dim)
    return err / x.float().norm(dim=dim)


def capture_linear_tensors(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable
) -> dict[str, torch.Tensor]:
    """The three operands of every ``nn.Linear`` in one float32 forward and backward:
    ``"<fqn> input"``, ``"<fqn> weight"`` and ``"<fqn> grad_output"``.

    These are the tensors an fp8 recipe casts; their amaxes show why one scale
    cannot serve them all.

    Example::

        tensors = capture_linear_tensors(model, x, y, F.cross_entropy)
        {name: amax(t).item() for name, t in tensors.items()}
    """
    tensors: dict[str, torch.Tensor] = {}
    handles = []
    for fqn, module in model.named_modules():
        if isinstance(module, nn.Linear):

            def forward_hook(module, args, output, fqn=fqn):
                tensors[f"{fqn} input"] = args[0].detach().clone()
                tensors[f"{fqn} weight"] = module.weight.detach().clone()

            def backward_hook(module, grad_input, grad_output, fqn=fqn):
                tensors[f"{fqn} grad_output"] = grad_output[0].detach().clone()

            handles += [
                module.register_forward_hook(forward_hook),
                module.register_full_backward_hook(backward_hook),
            ]
    try:
        loss_fn(model(x), y).backward()
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
    return tensors


def one_scale_vs_own(
    tensors: dict[str, torch.Tensor], dtype: torch.dtype = E4M3
) -> list[dict]:
    """What a cast to fp8 flushes to zero with ONE scale for all ``tensors`` (chosen,
    like a loss scale, so that the largest does not overflow) and with each tensor's
    own scale. One row per tensor: ``name``, ``amax``, ``zeros_one_scale``,
    ``zeros_own_scale``.

    Example:
        >>> t = {"big": torch.tensor([100.0, 1.0]), "small": torch.tensor([1e-5, 3e-6])}
        >>> [(r["name"], r["zeros_one_scale"], r["zeros_own_scale"])
        ...  for r in one_scale_vs_own(t)]
        [('big', 0.0, 0.0), ('small', 1.0, 0.0)]
    """
    amaxes = {name: amax(t).float() for name, t in tensors.items()}
    shared = scale_from_amax(max(amaxes.values()), dtype)
    rows = []
    for name, t in tensors.items():
        one = Fp8Tensor(cast_to_fp8(t, shared, dtype), shared, t.dtype)
        rows.append(
            {
                "name": name,
                "amax": amaxes[name].item(),
                "zeros_one_scale": zero_fraction(t, one),
                "zeros_own_scale": zero_fraction(t, to_fp8(t, dtype)),
            }
        )
    return rows


def compare_scaling(
    amaxes: Sequence[float],
    history_len: int = 4,
    shape: tuple[int, ...] = (64, 64),
    seed: int = 0,
) -> list[dict]:
    """Cast a stream of tensors, tensor i rescaled to ``amaxes[i]``, with dynamic and
    with delayed scaling (e4m3); one row per step.

    Each row: ``step``, ``amax``, and for "dynamic" and "delayed" the ``scale`` used,
    the fraction ``saturated`` and the relative ``error`` of the round trip.

    Example:
        >>> rows = compare_scaling([1.0, 1.0, 8.0, 1.0], history_len=2)
        >>> [r["delayed_saturated"] > 0 for r in rows]   # the spike, one step late
        [False, False, True, False]
        >>> [r["dynamic_saturated"] for r in rows]
        [0.0, 0.0, 0.0, 0.0]
    """
    gen = torch.Generator().manual_seed(seed)
    delayed = DelayedScaling(E4M3, history_len)
    delayed.record(torch.tensor(float(amaxes[0])))  # warmed up: step 1 is not special
    rows = []
    for step, target in enumerate(amaxes, start=1):
        x = torch.randn(shape, generator=gen)
        x = x * (target / amax(x))
        row = {"step": step, "amax": float(target)}
        for name, q in (("dynamic", to_fp8(x)), ("delayed", delayed.cast(x))):
            row[f"{name}_scale"] = q.scale.item()
            row[f"{name}_saturated"] = saturated_fraction(x, q)
            row[f"{name}_error"] = _relative_error(x, q, None).item()
        rows.append(row)
    return rows


def outlier_matrix(
    rows: int = 8,
    cols: int = 256,
    outlier_row: int = 3,
    factor: float = 1e5,
    seed: int = 0,
) -> torch.Tensor:
    """A (rows, cols) matrix of small normal values with one row ``factor`` larger:
    an activation with one outlier token.

    Example:
        >>> x = outlier_matrix(4, 8, outlier_row=1, factor=100.0)
        >>> (amax(x, dim=-1).squeeze() > 0.1).tolist()
        [False, True, False, False]
    """
    if not 0 <= outlier_row < rows:
        raise ValueError(f"outlier_row must be in 0..{rows - 1}, got {outlier_row}")
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * 0.01
    x[outlier_row] *= factor
    return x


def row_errors(x: torch.Tensor, dtype: torch.dtype = E4M3) -> dict[str, list[float]]:
    """Relative round-trip error of each row of ``x`` in fp8, with one scale for the
    whole tensor and with one scale per row; and the fraction flushed to zero.

    Example:
        >>> errors = row_errors(outlier_matrix(factor=1e5))  # row 3 is the outlier
        >>> [round(e, 2) for e in errors["tensorwise"][:4]]
        [0.4, 0.36, 0.38, 0.03]
        >>> [round(e, 2) for e in errors["rowwise"][:4]]
        [0.03, 0.03, 0.03, 0.03]
    """
    out: dict[str, list[float]] = {}
    for name, dim in (("tensorwise", None), ("rowwise", -1)):
        q = to_fp8(x, dtype, dim)
        out[name] = _relative_error(x, q, -1).tolist()
        out[f"{name}_zeros"] = [
            zero_fraction(row, Fp8Tensor(qrow, q.scale, x.dtype))
            for row, qrow in zip(x, q.data, strict=True)
        ]
    return out
