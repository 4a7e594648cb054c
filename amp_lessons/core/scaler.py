"""Loss scaling from scratch: a bit-exact twin of ``torch.amp.GradScaler``.

fp16 gradients smaller than 2**-24 flush to zero. Multiplying the loss by a scale S
before ``backward()`` lifts every gradient by S; dividing them by S again before the
optimizer step gives back the true update. *Dynamic* scaling picks S by itself: when
a gradient overflows to inf or nan, skip that step and shrink S (``backoff_factor``);
after ``growth_interval`` clean steps in a row, try a larger S (``growth_factor``).

Each optimizer moves through three stages in every iteration::

    READY --unscale_()--> UNSCALED --step()--> STEPPED --update()--> READY

``step()`` calls ``unscale_()`` itself when you did not; ``update()`` ends the
iteration for all optimizers at once.

Everything here is plain tensor code (``torch._foreach_mul_`` and ``torch.aminmax``);
no torch scaler code and no private ``torch._amp_*`` kernel is used. tests/
test_scaler.py checks that parameters, optimizer state, scale and ``state_dict`` come
out bit-identical to ``torch.amp.GradScaler``; notebook 03 builds the same ideas step by
step.

Fused optimizers (``fused=True``) unscale and skip in their own kernel: ``step()`` only
looks for inf/nan and sets ``optimizer.grad_scale`` and ``optimizer.found_inf`` for the
call, as torch does (its look "unscales" by 1, which rewrites fp16 and bf16 NaNs; so
does ours). Not covered: a ``step(grad_scaler=...)`` optimizer (a deprecated
contract that calls torch's private scaler methods) and, like torch, closures.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections import abc, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

__all__ = ["LossScaler", "OptState", "next_scale", "round_to_float32", "unscale_grads_"]


# ---- The arithmetic: the update rule and the check-and-unscale pass ----------------


def round_to_float32(x: float) -> float:
    """Round a Python float (a float64) to the nearest float32, overflowing to inf.

    The scale is stored as a float32 tensor, so every new scale goes through this.

    Example:
        >>> round_to_float32(0.1)
        0.10000000149011612
        >>> round_to_float32(1e39)
        inf
    """
    # A C++ static_cast<float>(double), the cast torch's kernel does; a Python float
    # passed to fill_() would raise on overflow instead of giving inf.
    return torch.tensor(x, dtype=torch.float32).item()


def next_scale(
    scale: float,
    growth_tracker: int,
    found_inf: bool,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> tuple[float, int]:
    """The dynamic loss-scale rule: returns the new ``(scale, growth_tracker)``.

    ``growth_tracker`` counts the clean steps since the last change of scale. Like
    torch's int32 tensor it wraps from 2**31 - 1 to -2**31, so a ``growth_interval``
    of 2**31 or more never grows the scale.

    Example:
        >>> next_scale(65536.0, 7, found_inf=True)   # overflow: halve, restart count
        (32768.0, 0)
        >>> next_scale(65536.0, 7, found_inf=False)  # one more clean step
        (65536.0, 8)
        >>> next_scale(65536.0, 1999, found_inf=False)  # the 2000th: grow
        (131072.0, 0)
    """
    if found_inf:
        # float32 * double is computed in double, then stored back as float32.
        return round_to_float32(scale * backoff_factor), 0
    successful = _wrap_int32(growth_tracker + 1)
    # `==`, not `>=`: torch's kernel compares for equality, so a tracker loaded past
    # the interval (from a state_dict) never triggers growth. We copy that.
    if successful == growth_interval:
        grown = round_to_float32(scale * growth_factor)
        # Never grow the scale past float32's range to inf; the count restarts anyway.
        return (grown if math.isfinite(grown) else scale), 0
    return scale, successful


def _wrap_int32(n: int) -> int:
    # The two's-complement wrap of torch's int32 count (its kernel adds 1 in C++).
    return (n + 2**31) % 2**32 - 2**31


def _int32_count(value: Any) -> int:
    # What torch's int32 tracker tensor holds once filled with `value`: an int, or
    # torch's own RuntimeError when the value is outside int32's range.
    return torch.full((), value, dtype=torch.int32).item()


def unscale_grads_(grads: list[torch.Tensor], inv_scale: torch.Tensor) -> torch.Tensor:
    """Multiply ``grads`` in place by ``inv_scale``; return True if any held inf or nan.

    The plain-tensor twin of torch's private fused kernel. All tensors must share one
    device and one dtype. The check looks at the values *before* they are multiplied,
    and the gradients are unscaled even when an inf is found, both as torch does.
    ``inv_scale`` is read on the host (keep it on the CPU to spare a GPU sync): like
    torch's kernel, an ``inv_scale`` of exactly 1 leaves float32 and float64 gradients
    untouched, NaN payloads included, and still rewrites fp16 and bf16 NaNs.

    A deliberate difference: with a NaN ``inv_scale`` (a scale forced to NaN), a
    gradient that already holds a NaN may come out with ``inv_scale``'s NaN where the
    kernel keeps the gradient's; which operand's NaN a multiply returns depends on the
    operand order in torch's vectorized loops, which no public op lets us choose.

    Example:
        >>> grads = [torch.tensor([512.0, -1024.0]), torch.tensor([-float("inf")])]
        >>> unscale_grads_(grads, torch.tensor(1 / 512))
        tensor(True)
        >>> grads
        [tensor([ 1., -2.]), tensor([-inf])]
    """
    # Before the multiply: with a scale below 1, a finite value can grow to inf.
    found_inf = _any_non_finite(grads)
    # torch's kernel returns a value unchanged when inv_scale is 1, where a multiply
    # would quiet a signalling NaN. It computes in float32, so fp16 and bf16 values
    # make a round trip that rewrites their NaNs exactly as a multiply does: those are
    # multiplied even by 1.
    if inv_scale.item() != 1 or grads[0].dtype in (torch.float16, torch.bfloat16):
        # One batched call, not a Python loop of mul_(): per-call overhead dominates
        # for small tensors on the CPU. By a tensor: a Python number would be rounded
        # to bf16 first for bf16 gradients. (non_blocking: no wait for the GPU.)
        device = grads[0].device
        torch._foreach_mul_(grads, inv_scale.to(device, non_blocking=True))
    return found_inf


def _any_non_finite(grads: list[torch.Tensor]) -> torch.Tensor:
    # The smallest and largest value of each gradient: +inf shows in the max, -inf in
    # the min, and nan propagates into both. One read per tensor, two numbers out, and
    # no overflow as with a norm or a sum.
    pairs = [torch.aminmax(g) for g in grads if g.numel() > 0]  # empty: nothing to see
    if not pairs:
        return torch.zeros((), dtype=torch.bool, device=grads[0].device)
    lows, highs = zip(*pairs, strict=True)
    return torch.stack(lows + highs).isfinite().all().logical_not()


# ---- The per-optimizer state machine -------------------------------------------------


class OptState(Enum):
    """Where one optimizer is in the current iteration."""

    READY = 0
    UNSCALED = 1
    STEPPED = 2


@dataclass
class _OptimizerRecord:
    """What the scaler remembers about one optimizer until the next ``update()``."""

    stage: OptState = OptState.READY
    # How many devices held an inf or nan in its gradients (float32 0.0 = none, on
    # the scale's device: a fused optimizer's found_inf); None: nothing checked yet.
    found_inf: torch.Tensor | None = None
    # The same flag read to the host by step(), so update() need not sync again.
    skipped: bool | None = None


class LossScaler:
    """Dynamic loss scaling, a drop-in replacement for ``torch.amp.GradScaler``.

    Same arguments, defaults, methods, errors and results, bit for bit. Stricter in one
    place: bad constructor arguments raise ``ValueError``.

    Example:
        >>> model = torch.nn.Linear(4, 1)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> scaler = LossScaler("cpu", init_scale=1024.0, growth_interval=1)
        >>> loss = model(torch.ones(2, 4)).sum()
        >>> scaler.scale(loss).backward()   # gradients are 1024x too large
        >>> scaler.step(optimizer)          # divides by 1024, then steps
        >>> scaler.update()                 # one clean step; the interval is 1: grow
        >>> scaler.get_scale()
        2048.0
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        _validate_arguments(init_scale, growth_factor, backoff_factor, growth_interval)
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled and not torch.cuda.is_available():
            # torch.amp.GradScaler does the same (with this warning) rather than fail.
            warnings.warn(
                "LossScaler(device='cuda') is enabled, but CUDA is not available. "
                "Disabling: scale() and step() pass through unchanged. Use "
                "LossScaler('cpu') to scale on the CPU.",
                stacklevel=2,
            )
            self._enabled = False
        # Python numbers, exactly as given: get_scale() and state_dict() return them
        # unchanged until the first scale() call.
        self._init_scale = init_scale
        self._init_growth_tracker = 0
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        # Made by the first scale() call, on the loss's device (as torch does): the
        # float32 scale, its value as a Python float (update() needs no GPU sync)
        # and the count of clean steps.
        self._scale: torch.Tensor | None = None
        self._scale_value = 0.0
        self._growth_tracker: int | None = None
        self._per_optimizer_states: defaultdict[int, _OptimizerRecord] = defaultdict(
            _OptimizerRecord
        )

    # ---- scale(): multiply the loss ------------------------------------------------

    def scale(
        self, outputs: torch.Tensor | Iterable[torch.Tensor]
    ) -> torch.Tensor | Iterable[torch.Tensor]:
        """Multiply a tensor, or (nested) lists and tuples of tensors, by the scale.

        Example:
            >>> LossScaler("cpu", init_scale=8.0).scale([torch.tensor(2.0)])
            [tensor(16.)]
        """
        if not self._enabled:
            return outputs

        def apply_scale(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                if self._scale is None:
                    self._create_scale(value.device)
                # By a float32 tensor, as torch does: an fp16 output stays fp16, and
                # a changed scale needs no new graph under torch.compile. (.to() is
                # a no-op on the scale's own device.)
                return value * self._scale.to(value.device, non_blocking=True)
            if isinstance(value, abc.Iterable):
                scaled = map(apply_scale, value)
                # Lists and tuples keep their type; other iterables come back lazy.
                return (
                    type(value)(scaled) if isinstance(value, (list, tuple)) else scaled
                )
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    def _create_scale(self, device: torch.device) -> None:
        self._scale = torch.full(
            (), self._init_scale, dtype=torch.float32, device=device
        )
        self._scale_value = round_to_float32(self._init_scale)
        self._growth_tracker = _int32_count(self._init_growth_tracker)

    def _require_scale(self, funcname: str) -> torch.Tensor:
        # torch's AssertionError and words, for code that relies on them.
        if self._scale is None:
            raise AssertionError(
                f"Attempted {funcname} but _scale is None.  This may indicate your "
                "script did not use scaler.scale(loss or outputs) earlier in the "
                "iteration."
            )
        return self._scale

    # ---- unscale_(): divide the gradients, look for inf/nan ------------------------

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place; note inf/nan.

        Call it before touching gradients, e.g. clipping; ``step()`` calls it otherwise.

        Example::

            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # true gradients from here on
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            scaler.step(optimizer)
            scaler.update()
        """
        if not self._enabled:
            return
        self._require_scale("unscale_")
        record = self._per_optimizer_states[id(optimizer)]
        if record.stage is OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last "
                "update()."
            )
        if record.stage is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # 1/scale in float64, rounded to float32: the number torch multiplies by.
        # A float32 division can be off by an ulp under some compiler flags. Made on
        # the CPU from the scale's value, so unscale_grads_ reads it without a GPU sync.
        inv_scale = torch.tensor(self._scale_value, dtype=torch.float64).reciprocal()
        record.found_inf = self._check_grads(optimizer, inv_scale.float())
        record.stage = OptState.UNSCALED

    def _check_grads(
        self, optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor | None
    ) -> torch.Tensor | None:
        """How many devices' gradients hold inf/nan (None: no gradients); unscales
        them by ``inv_scale``. None: a fused step, which allows fp16 and, as torch's,
        "unscales" by 1: float32 stays as it is, fp16 and bf16 NaNs are rewritten."""
        scale = self._require_scale("unscale_")
        fused = inv_scale is None
        inv_scale = torch.ones(()) if fused else inv_scale
        flags: defaultdict[torch.device, list[torch.Tensor]] = defaultdict(list)
        # no_grad: after backward(create_graph=True) the gradients require grad.
        with torch.no_grad():
            batches = _gradients_by_device_and_dtype(optimizer, allow_fp16=fused)
            for (device, _), grads in batches.items():
                flags[device].append(unscale_grads_(grads, inv_scale))
        if not flags:
            return None
        # One 0/1 per device, summed in float32 as torch sums them.
        per_device = [torch.stack(f).any().to(scale.device) for f in flags.values()]
        return torch.stack(per_device).float().sum()

    # ---- step(): the optimizer step, skipped on inf/nan ----------------------------

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Unscale if not done yet, then ``optimizer.step(*args, **kwargs)`` unless an
        inf or nan was found. Returns what ``optimizer.step`` returned, or None if the
        step was skipped.

        Example::

            scaler.scale(loss).backward()
            scaler.step(optimizer)  # skipped if a gradient is inf or nan
            scaler.update()
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError(
                "Closure use is not currently supported if GradScaler is enabled."
            )
        self._require_scale("step")
        record = self._per_optimizer_states[id(optimizer)]
        if record.stage is OptState.STEPPED:
            raise RuntimeError(
                "step() has already been called since the last update()."
            )
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            return self._fused_step(optimizer, record, *args, **kwargs)
        if record.stage is OptState.READY:
            self.unscale_(optimizer)
        if record.found_inf is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        # A host sync (torch has it too): Python must know whether to call step().
        record.skipped = bool(record.found_inf.item())
        retval = None if record.skipped else optimizer.step(*args, **kwargs)
        record.stage = OptState.STEPPED
        return retval

    def _fused_step(self, optimizer, record, *args: Any, **kwargs: Any) -> Any:
        """The step of an optimizer that unscales and skips in its own kernel: it is
        always called, with ``grad_scale`` (None if ``unscale_`` already ran) and
        ``found_inf`` set on it for the call, as torch does."""
        if "grad_scaler" in inspect.signature(optimizer.step).parameters:
            raise NotImplementedError(
                f"{type(optimizer).__name__}.step takes grad_scaler=, a deprecated "
                "contract calling GradScaler's private methods. Read self.grad_scale "
                "and self.found_inf in step() instead, as torch's fused optimizers do."
            )
        if record.stage is OptState.READY:
            # Only look: the fused kernel divides by grad_scale itself.
            record.found_inf = self._check_grads(optimizer, None)
        if record.found_inf is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        previous = getattr(optimizer, "grad_scale", None)  # the caller's: multiplied in
        if record.stage is OptState.READY:
            previous = self._scale * (1 if previous is None else previous)
        optimizer.grad_scale, optimizer.found_inf = previous, record.found_inf
        try:
            retval = optimizer.step(*args, **kwargs)
        finally:
            del optimizer.grad_scale, optimizer.found_inf
        record.stage = OptState.STEPPED
        return retval

    # ---- update(): the next scale --------------------------------------------------

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """End the iteration: back off if any optimizer saw inf/nan, else maybe grow.

        ``new_scale`` (a float or a one-element tensor) sets the scale instead; the
        growth tracker is then left as it is.

        Example::

            scaler.update()        # the usual call, after every step()
            scaler.update(1024.0)  # or force a value
        """
        if not self._enabled:
            return
        scale = self._require_scale("update")
        if new_scale is not None:
            self._set_scale(scale, new_scale)
        else:
            old_value = self._scale_value
            self._scale_value, self._growth_tracker = next_scale(
                self._scale_value,
                self._growth_tracker,
                self._found_inf_in_any_optimizer(),
                self._growth_factor,
                self._backoff_factor,
                self._growth_interval,
            )
            if self._scale_value != old_value:  # spares a kernel launch on GPUs
                scale.fill_(self._scale_value)
        self._per_optimizer_states = defaultdict(_OptimizerRecord)

    def _found_inf_in_any_optimizer(self) -> bool:
        # One skip anywhere backs off the shared scale; each optimizer has already
        # stepped or skipped on its own flag (a fused one: inside its kernel).
        found = [
            r.skipped if r.skipped is not None else bool(r.found_inf.item())
            for r in self._per_optimizer_states.values()
            if r.found_inf is not None
        ]
        if not found:
            raise AssertionError("No inf checks were recorded prior to update.")
        return any(found)

    def _set_scale(self, scale: torch.Tensor, new_scale: float | torch.Tensor) -> None:
        if isinstance(new_scale, float):
            scale.fill_(new_scale)  # raises, like torch, past float32's range
            self._scale_value = round_to_float32(new_scale)
            return
        reason = (
            "new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
            "torch.FloatTensor with requires_grad=False."
        )
        if not isinstance(new_scale, torch.Tensor):
            raise TypeError(f"{reason} Got {type(new_scale).__name__}.")
        if (
            new_scale.device.type != self._device
            or new_scale.numel() != 1
            or new_scale.requires_grad
        ):
            raise AssertionError(reason)
        scale.copy_(new_scale)  # converts any dtype, as torch's copy_ does
        self._scale_value = scale.item()

    # ---- getters, setters, state_dict ----------------------------------------------

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale_value

    def get_growth_tracker(self) -> int:
        """The number of clean steps since the scale last changed (0 when disabled)."""
        if not self._enabled:
            return 0
        return (
            self._init_growth_tracker if self._scale is None else self._growth_tracker
        )

    _get_growth_tracker = get_growth_tracker  # torch's (private) name for it

    def get_growth_factor(self) -> float:
        """The factor the scale grows by after ``growth_interval`` clean steps."""
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Set the growth factor (not checked, as in torch)."""
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        """The factor the scale shrinks by after an inf or nan."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Set the backoff factor (not checked, as in torch)."""
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        """How many clean steps in a row before the scale grows."""
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Set the growth interval (not checked, as in torch)."""
        self._growth_interval = new_interval

    def is_enabled(self) -> bool:
        """False when constructed with ``enabled=False`` (or CUDA was missing)."""
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state, with the same keys and values as torch's.

        Save it after ``update()``; an empty dict when disabled.

        Example:
            >>> state = LossScaler("cpu", init_scale=1024.0).state_dict()
            >>> state["scale"], state["growth_interval"], state["_growth_tracker"]
            (1024.0, 2000, 0)
        """
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self.get_growth_tracker(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict()`` saved by a LossScaler or a torch GradScaler."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved "
                "from a disabled instance of GradScaler."
            )
        self._init_scale = state_dict["scale"]
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
            self._scale_value = round_to_float32(state_dict["scale"])
            self._growth_tracker = _int32_count(state_dict["_growth_tracker"])

    def __getstate__(self) -> dict[str, Any]:
        # Pickle (torch.save, deepcopy) only between iterations, and without the
        # tensor: the copy re-creates it lazily on its first scale(), like torch's.
        state = self.__dict__.copy()
        if self._enabled:
            if self._per_optimizer_states:
                raise AssertionError(
                    "A GradScaler instance may only be pickled at the beginning "
                    "of an iteration, or at the end after scaler.update()."
                )
            state["_init_scale"] = self.get_scale()
            state["_init_growth_tracker"] = self.get_growth_tracker()
            state["_scale"] = None
            state["_growth_tracker"] = None
        return state


# ---- Helpers: argument checks and gathering gradients --------------------------------


def _validate_arguments(
    init_scale: float, growth_factor: float, backoff_factor: float, growth_interval: int
) -> None:
    # torch only asserts growth_factor > 1 and backoff_factor < 1; a scale of nan or 0
    # would otherwise fail silently, many steps later.
    def real(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    rules = [
        (real(init_scale) and 0 < round_to_float32(init_scale) < math.inf,
         f"init_scale must be a positive number that float32 can hold (up to about "
         f"3.4e38), got {init_scale!r}; 2.0**16 is the usual start."),
        (real(growth_factor) and 1 < growth_factor < math.inf,
         f"growth_factor must be a finite number > 1, got {growth_factor!r}; 2.0 is "
         "the usual choice."),
        (real(backoff_factor) and 0 < backoff_factor < 1,
         f"backoff_factor must be a number strictly between 0 and 1, got "
         f"{backoff_factor!r}; 0.5 is the usual choice."),
        (isinstance(growth_interval, int) and not isinstance(growth_interval, bool),
         f"growth_interval must be an int (a number of steps), got "
         f"{growth_interval!r}."),
        (not isinstance(growth_interval, int) or growth_interval >= 1,
         f"growth_interval must be at least 1 step, got {growth_interval}; 2000 is "
         "the usual choice."),
    ]  # fmt: skip
    for ok, message in rules:
        if not ok:
            raise ValueError(message)


def _gradients_by_device_and_dtype(
    optimizer: torch.optim.Optimizer, allow_fp16: bool = False
) -> dict[tuple[torch.device, torch.dtype], list[torch.Tensor]]:
    """The optimizer's gradients, one list per (device, dtype) batch for the foreach
    calls. A sparse gradient is represented by its stored values."""
    by_kind: defaultdict[tuple, list[torch.Tensor]] = defaultdict(list)
    for group in optimizer.param_groups:
        for param in group["params"]:
            if (grad := param.grad) is not None:
                by_kind[grad.device, grad.dtype, grad.layout].append(grad)
    # Checked per kind rather than per gradient: the loop above runs for every
    # parameter at every step.
    batches: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for (device, dtype, layout), grads in by_kind.items():
        if dtype == torch.float16 and not allow_fp16:
            # torch's words. The fp32 master weights hold the update; fp16 weights
            # would round small updates away (see notebook 02).
            raise ValueError("Attempting to unscale FP16 gradients.")
        if layout == torch.sparse_coo:
            grads = [grad._values() for grad in grads]  # what was scaled
        elif layout != torch.strided:
            raise ValueError(
                f"LossScaler unscales dense and sparse COO gradients only; got "
                f"{layout} gradients. Use torch.amp.GradScaler for these."
            )
        batches.setdefault((device, dtype), []).extend(grads)
    return batches
