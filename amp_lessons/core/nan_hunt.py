"""Hunting NaN and overflow: which module made the first inf, and why.

Notebook 09 uses this module. ``OverflowDetector`` hooks every module of a model and
names the first whose output is non-finite or above a threshold (fp16's 65504 by
default). ``anomaly_report`` asks autograd's anomaly mode which backward op made the
first nan. ``bisect_amp`` turns autocast off, then the scaler, one at a time, to
tell an AMP problem from a model that makes NaN by itself (``amp_trial`` builds the
trial it runs; ``norm_loss`` is a loss whose fp16 backward makes nan).
``t5_like_model`` is a tiny model with the trait that breaks bf16-pretrained models
such as T5 in fp16: activations that grow past 65504 with depth. ``mask_outcomes``
shows which attention-mask fills turn softmax into NaN in fp16.

Not covered here: NaN in distributed runs (one rank's inf skips every rank's step).
"""

from __future__ import annotations

import linecache
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from amp_lessons.i18n import N_, _

__all__ = [
    "FP16_MAX",
    "MASK_FILLS",
    "Bisection",
    "Finding",
    "MaskOutcome",
    "OverflowDetector",
    "T5LikeBlock",
    "amp_trial",
    "anomaly_report",
    "bisect_amp",
    "find_first_overflow",
    "mask_outcomes",
    "masked_softmax",
    "norm_loss",
    "t5_like_inputs",
    "t5_like_model",
]

FP16_MAX = torch.finfo(torch.float16).max  # 65504


# ---- the detector: forward hooks on every module ------------------------------------


@dataclass(frozen=True)
class Finding:
    """A module whose output was non-finite or above the threshold."""

    name: str  # as in model.named_modules(); "" is the model itself
    kind: str  # the module's class name
    dtype: torch.dtype
    max_abs: float  # the largest |value| among the finite ones (0.0 if none)
    finite: bool  # False: the output held inf or nan

    def __str__(self) -> str:
        what = "inf/nan" if not self.finite else f"max |x| {self.max_abs:.4g}"
        return f"{self.name or '(the model)'} ({self.kind}, {self.dtype}): {what}"


def _tensors(output: Any) -> Iterator[torch.Tensor]:
    """The floating-point tensors in a module's output (tuples, lists, dicts)."""
    if isinstance(output, torch.Tensor):
        if output.is_floating_point():
            yield output
    elif isinstance(output, (tuple, list)):
        for item in output:
            yield from _tensors(item)
    elif isinstance(output, dict):
        for item in output.values():
            yield from _tensors(item)


class OverflowDetector:
    """Forward hooks on every module of ``model`` (the model itself included); each
    output that is non-finite, or above ``threshold`` and of ``dtype`` (None: of any
    dtype), is recorded, in the order the modules finish. ``first`` is the culprit:
    a module finishes after its children, so a block whose children were fine but
    whose own residual add overflowed is named, not the next layer that sees the inf.

    Example:
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> with torch.no_grad():
        ...     _ = model[0].weight.fill_(1e5)
        >>> with OverflowDetector(model) as detector:
        ...     _ = model(torch.ones(1, 2))  # fp32: 2e5 is finite, but > 65504
        >>> str(detector.first)
        '0 (Linear, torch.float32): max |x| 2e+05'
    """

    def __init__(
        self,
        model: nn.Module,
        threshold: float = FP16_MAX,
        dtype: torch.dtype | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"OverflowDetector watches an nn.Module, got "
                            f"{type(model).__name__}")  # fmt: skip
        if not (isinstance(threshold, (int, float)) and threshold > 0):
            raise ValueError(f"threshold must be a positive number (e.g. 65504 for "
                             f"fp16), got {threshold!r}")  # fmt: skip
        self.model, self.threshold, self.dtype = model, float(threshold), dtype
        self.findings: list[Finding] = []
        self._handles: list[Any] = []

    @property
    def first(self) -> Finding | None:
        """The first module whose output was bad, or None."""
        return self.findings[0] if self.findings else None

    def _hook(self, name: str) -> Callable:
        def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
            for t in _tensors(output):
                t = t.detach()
                finite = bool(torch.isfinite(t).all())
                values = t[torch.isfinite(t)].float().abs()
                max_abs = values.max().item() if values.numel() else 0.0
                watched = self.dtype is None or t.dtype == self.dtype
                if not finite or (watched and max_abs > self.threshold):
                    kind = type(module).__name__
                    self.findings.append(Finding(name, kind, t.dtype, max_abs, finite))
                    return

        return hook

    def __enter__(self) -> OverflowDetector:
        self.findings = []
        self._handles = [module.register_forward_hook(self._hook(name))
                         for name, module in self.model.named_modules()]  # fmt: skip
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def find_first_overflow(
    model: nn.Module,
    x: torch.Tensor,
    dtype: torch.dtype | None = torch.float16,
    threshold: float | None = None,
) -> Finding | None:
    """The first module whose output is non-finite, or of ``dtype`` and above
    ``threshold`` (default: the largest finite ``dtype``; lower it to be warned
    early), in one forward pass of ``model(x)`` under autocast to ``dtype``.
    ``dtype=None``: plain fp32, every output held against ``threshold`` (default
    65504), to see what WOULD overflow with fp16 activations (``model.half()``).
    None if every output is fine.

    Example:
        >>> model, x = t5_like_model(), t5_like_inputs()
        >>> str(find_first_overflow(model, x))  # under fp16 autocast
        'blocks.3.wo (Linear, torch.float16): inf/nan'
        >>> find_first_overflow(model, x, dtype=None).name  # where fp16 would fail
        'blocks.2'
        >>> find_first_overflow(model, x, torch.bfloat16) is None  # bf16's range
        True
    """
    ctx = (torch.amp.autocast(x.device.type, dtype=dtype) if dtype is not None
           else torch.amp.autocast(x.device.type, enabled=False))  # fmt: skip
    if threshold is None:
        threshold = torch.finfo(dtype).max if dtype is not None else FP16_MAX
    detector = OverflowDetector(model, threshold, dtype)
    with torch.no_grad(), ctx, detector:
        model(x)
    return detector.first


# ---- anomaly mode -------------------------------------------------------------------


def anomaly_report(step: Callable[[], Any]) -> tuple[str, str] | None:
    """Run ``step()`` (a forward and a backward) under
    ``torch.autograd.detect_anomaly()``: ``(backward op, forward line)`` of the first
    backward function that returned nan, or None if none did.

    Anomaly mode checks every backward output and, when one holds nan, raises a
    RuntimeError naming the op, after warning with the traceback of the forward call
    that created it. Slow: for hunting, not for training.

    Example:
        >>> x = torch.zeros(3, requires_grad=True)
        >>> anomaly_report(lambda: x.pow(2).sum().sqrt().backward())[0]
        'PowBackward0'
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                step()
        except RuntimeError as error:
            found = re.search(r"Function '(\w+)' returned nan", str(error))
            if found is None:
                raise
            traces = [
                str(w.message)
                for w in caught
                if "Traceback of forward call" in str(w.message)
            ]
            return found.group(1), (_forward_line(traces[-1]) if traces else "")
    return None


_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in ')


def _forward_line(trace: str) -> str:
    """The source line of the innermost frame outside installed packages (torch,
    IPython, ...) in a traceback text: the user's forward call."""
    lines = trace.splitlines()
    installed = ("site-packages", "dist-packages")
    found = ""
    for i, text in enumerate(lines):
        frame = _FRAME.match(text)
        if (
            frame is None
            or frame["file"].startswith(("<", os.path.dirname(torch.__file__)))
            or any(folder in frame["file"] for folder in installed)
        ):
            continue
        source = lines[i + 1] if i + 1 < len(lines) else ""
        if not source.strip() or _FRAME.match(source) or source.startswith(" ("):
            # the trace has no source text for this frame: read it as Python would
            source = linecache.getline(frame["file"], int(frame["line"]))
        found = source.strip()
    return found


# ---- bisection ----------------------------------------------------------------------


@dataclass
class Bisection:
    """The trials ``bisect_amp`` ran and what they point at."""

    trials: list[tuple[bool, bool, bool]] = field(default_factory=list)
    # (autocast on, scaler on, healthy)
    culprit: str = ""  # "none", "not_amp", "autocast" or "scaler"

    VERDICTS = {  # English; `verdict` says it in the student's language
        "none": N_("healthy with AMP on: nothing to hunt"),
        "autocast": N_(
            "healthy once autocast is off: an fp16 range problem in the forward or "
            "backward pass (find it with the detector or anomaly mode)"
        ),
        "scaler": N_(
            "still broken in fp32, healthy once the scaler is off too: the loss "
            "scaling is misused (unscale_ before touching gradients, one update per "
            "iteration, one scaler)"
        ),
        "not_amp": N_(
            "broken in plain fp32 without a scaler: the model or the data makes it, "
            "not AMP"
        ),
    }

    @property
    def verdict(self) -> str:
        return _(self.VERDICTS[self.culprit])


def bisect_amp(trial: Callable[[bool, bool], bool]) -> Bisection:
    """Find what makes a training run go bad, one switch at a time.

    ``trial(autocast, scaler)`` runs a few steps and returns True if healthy (a
    scaler switched off is ``GradScaler(enabled=False)``). First AMP as it is; if
    bad, autocast off; if still bad, the scaler off too; if still bad, it is not AMP.

    Example:
        >>> bisect_amp(lambda autocast, scaler: not autocast).culprit
        'autocast'
        >>> bisect_amp(lambda autocast, scaler: not scaler).culprit
        'scaler'
        >>> [trial[:2] for trial in bisect_amp(lambda a, s: False).trials]
        [(True, True), (False, True), (False, False)]
    """
    result = Bisection()

    def run(autocast: bool, scaler: bool) -> bool:
        healthy = bool(trial(autocast, scaler))
        result.trials.append((autocast, scaler, healthy))
        return healthy

    if run(True, True):
        result.culprit = "none"
    elif run(False, True):
        result.culprit = "autocast"
    else:
        result.culprit = "scaler" if run(False, False) else "not_amp"
    return result


# ---- a bf16-pretrained model in fp16: T5's overflow ---------------------------------


class RMSNorm(nn.Module):
    """T5's LayerNorm: no mean subtracted, no bias, computed in fp32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * h).to(x.dtype)  # back to fp16 after model.half()


class T5LikeBlock(nn.Module):
    """``x + wo(relu(wi(norm(x))))``: T5's feed-forward sublayer with its residual.

    ``keep_wo_fp32=True`` runs ``wo`` outside autocast (transformers keeps T5's
    ``wo`` in fp32 for this reason): the residual add is then done in fp32.
    """

    def __init__(self, dim: int = 16, hidden: int = 64, keep_wo_fp32: bool = False):
        super().__init__()
        self.norm, self.wi, self.act = RMSNorm(dim), nn.Linear(dim, hidden), nn.ReLU()
        self.wo, self.keep_wo_fp32 = nn.Linear(hidden, dim), keep_wo_fp32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.wi(self.norm(x)))
        if self.keep_wo_fp32:
            with torch.amp.autocast(x.device.type, enabled=False):
                return x + self.wo(h.float())
        return x + self.wo(h)


def t5_like_model(
    seed: int = 0, outlier: float = 1000.0, num_blocks: int = 4,
    keep_wo_fp32: bool = False,
) -> nn.Module:  # fmt: skip
    """A 4-block stack of ``T5LikeBlock`` and a head, with T5's trouble built in:
    every ``wo`` writes ``outlier`` times its input into channel 0, so the residual
    stream grows block after block (pretrained T5 has such channels; in bf16, its
    training format, they never overflow). Each block's own output stays below
    65504; the residual sum of block 3 does not.

    Example:
        >>> model = t5_like_model()
        >>> model(t5_like_inputs()).shape
        torch.Size([2, 8, 8])
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = nn.ModuleList(T5LikeBlock(keep_wo_fp32=keep_wo_fp32)
                               for _ in range(num_blocks))  # fmt: skip
        for depth, block in enumerate(blocks):
            with torch.no_grad():
                block.wo.weight[0].fill_(outlier * 2**depth)
        model = _T5Like(blocks, nn.Linear(16, 8))
    return model


class _T5Like(nn.Module):
    def __init__(self, blocks: nn.ModuleList, head: nn.Linear) -> None:
        super().__init__()
        self.blocks, self.final_norm, self.head = blocks, RMSNorm(16), head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))


def t5_like_inputs(seed: int = 0) -> torch.Tensor:
    """A batch of 2 sequences of 8 embeddings of width 16 for ``t5_like_model``."""
    return torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(seed))


# ---- attention masks in fp16 --------------------------------------------------------

MASK_FILLS: dict[str, float] = {
    "float('-inf')": -math.inf,
    "-1e15": -1e15,
    "torch.finfo(torch.float32).min": torch.finfo(torch.float32).min,
    "torch.finfo(torch.float16).min": torch.finfo(torch.float16).min,
    "-1e4": -1e4,
}
"""Values people add to attention scores to mask them out."""


def masked_softmax(
    scores: torch.Tensor, keep: torch.Tensor, fill: float, how: str = "add"
) -> torch.Tensor:
    """Attention weights: softmax over the last dim of ``scores`` with the positions
    where ``keep`` is False masked by ``fill``.

    ``how="add"``: the additive mask most models build in fp32 and cast to the scores'
    dtype (``scores + mask``), where a fill past fp16's range silently becomes -inf;
    ``how="fill"``: ``scores.masked_fill(~keep, fill)``, no addition, so nothing
    overflows, and torch refuses a fill the dtype cannot hold.

    Example:
        >>> s = torch.tensor([[1.0, -30.0]], dtype=torch.float16)
        >>> masked_softmax(s, torch.tensor([[False, False]]), -math.inf)
        tensor([[nan, nan]], dtype=torch.float16)
    """
    if how == "add":
        mask = torch.where(keep, 0.0, torch.tensor(fill))  # float32, as models do
        return torch.softmax(scores + mask.to(scores.dtype), dim=-1)
    if how == "fill":
        return torch.softmax(scores.masked_fill(~keep, fill), dim=-1)
    raise ValueError(f"how must be 'add' or 'fill', got {how!r}")


@dataclass(frozen=True)
class MaskOutcome:
    """One fill value: what it becomes in the scores' dtype and the NaN it makes."""

    fill: str  # a key of MASK_FILLS
    stored: float  # the fill after the cast to the scores' dtype
    nan_rows: int  # rows of attention weights holding nan (of 3)
    padded_row_finite: bool  # the fully masked row came out finite
    error: str = ""  # what torch raised instead: "RuntimeError: value cannot be ..."


def attention_scores(dtype: torch.dtype = torch.float16) -> tuple[torch.Tensor, ...]:
    """``(scores, keep)``: 3 queries x 4 keys; query 0 sees all keys, query 1 the
    first two, query 2 is padding (sees none, and its scores are all below -16)."""
    scores = torch.tensor([[2.0, 1.0, -1.0, 0.5],
                           [0.3, -2.0, 4.0, 1.0],
                           [-20.0, -18.0, -25.0, -17.0]]).to(dtype)  # fmt: skip
    keep = torch.tensor([[True] * 4, [True, True, False, False], [False] * 4])
    return scores, keep


def mask_outcomes(dtype: torch.dtype = torch.float16, how: str = "add"):
    """``MaskOutcome`` for every fill of ``MASK_FILLS`` on ``attention_scores``.

    Example (fp16, additive masks):
        >>> [(o.fill, o.nan_rows) for o in mask_outcomes()][:2]
        [("float('-inf')", 1), ('-1e15', 1)]
    """
    scores, keep = attention_scores(dtype)
    outcomes = []
    for name, fill in MASK_FILLS.items():
        stored = torch.tensor(fill, dtype=torch.float32).to(dtype).item()
        try:
            weights = masked_softmax(scores, keep, fill, how)
        except RuntimeError as error:  # masked_fill: "cannot be converted ..."
            raised = f"{type(error).__name__}: {error}"
            outcomes.append(MaskOutcome(name, stored, 0, False, raised))
            continue
        outcomes.append(MaskOutcome(name, stored, int(weights.isnan().any(-1).sum()),
                                    bool(weights[2].isfinite().all())))  # fmt: skip
    return outcomes


def norm_loss(out: torch.Tensor, y: Any = None) -> torch.Tensor:
    """The mean of ``sqrt(sum(out**2))`` over rows: a norm without an eps. In fp16,
    squares below 6e-8 flush to 0, the sum is 0, and the backward of sqrt(0) is inf,
    which becomes nan in the matmul before it. (``y`` is ignored.)"""
    return out.pow(2).sum(-1).sqrt().mean()


def amp_trial(
    make_model: Callable[[], nn.Module],
    x: torch.Tensor,
    y: Any = None,
    loss_fn: Callable[[torch.Tensor, Any], torch.Tensor] = norm_loss,
    num_steps: int = 3,
) -> Callable[[bool, bool], bool]:
    """A ``trial(autocast, scaler)`` for ``bisect_amp``: ``num_steps`` SGD steps of a
    fresh ``make_model()`` on ``loss_fn(model(x), y)``, under fp16 autocast if
    ``autocast``, with a GradScaler enabled if ``scaler``. Healthy: every loss and
    gradient finite, and the last step taken (not skipped by the scaler).

    Example:
        >>> trial = amp_trial(t5_like_model, t5_like_inputs(), loss_fn=lambda o, y:
        ...                   o.float().pow(2).mean())
        >>> trial(True, True), trial(False, True)
        (False, True)
    """

    def trial(autocast: bool, scaler: bool) -> bool:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        grad_scaler = torch.amp.GradScaler(x.device.type, enabled=scaler)
        ctx = torch.amp.autocast(x.device.type, dtype=torch.float16, enabled=autocast)
        for _step in range(num_steps):
            optimizer.zero_grad(set_to_none=True)
            with ctx:
                loss = loss_fn(model(x), y)
            if not torch.isfinite(loss):
                return False
            scale = grad_scaler.get_scale()
            grad_scaler.scale(loss).backward()
            grads_finite = all(torch.isfinite(p.grad).all() for p in model.parameters()
                               if p.grad is not None)  # fmt: skip
            grad_scaler.step(optimizer)
            grad_scaler.update()
            skipped = grad_scaler.get_scale() < scale
            if not scaler and not grads_finite:
                return False
        return not skipped

    return trial
