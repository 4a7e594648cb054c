"""How autocast behaves around the op table: dtypes through a model's forward and
backward, nested and disabled regions, custom autograd functions, and the casts it
inserts.

Notebook 04's second half: ``trace_dtypes`` (dtypes flowing through forward and
backward), ``nested_regions`` (nested and disabled regions), ``custom_function_demo``
(``torch.amp.custom_fwd`` / ``custom_bwd``) and ``record_casts`` (the casts autocast
inserts, with its weight-copy cache). The per-op table is
``amp_lessons.teaching.autocast_table``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.i18n import _
from amp_lessons.teaching.autocast_table import (
    error_line,
    short_dtype,
    validate_autocast_args,
)

# ---------------------------------------------------------------------------
# Forward only: dtypes through a model, forward and backward
# ---------------------------------------------------------------------------


def tiny_model(seed: int = 0) -> nn.Sequential:
    """Linear -> LayerNorm -> ReLU -> Linear, 8 -> 16 -> 4: one op of each kind."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4)
    )


@dataclass
class DtypeTrace:
    """Dtypes seen in one forward (under autocast) and backward (outside it).

    ``forward``: (module name, output dtype) in call order; ``backward``: (module
    name, dtype of the gradient arriving at its output) in backward order;
    ``params`` / ``grads``: parameter dtypes and their ``.grad`` dtypes.
    """

    forward: list[tuple[str, torch.dtype]] = field(default_factory=list)
    loss: torch.dtype | None = None
    backward: list[tuple[str, torch.dtype]] = field(default_factory=list)
    params: dict[str, torch.dtype] = field(default_factory=dict)
    grads: dict[str, torch.dtype] = field(default_factory=dict)


def trace_dtypes(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    dtype: torch.dtype = torch.bfloat16,
    loss_fn: Callable = F.cross_entropy,
) -> DtypeTrace:
    """Forward ``model(x)`` and the loss under autocast, backward outside it, and
    record every leaf module's output dtype (forward hooks), the dtype of the
    gradient reaching that output (tensor hooks) and the parameter gradients' dtypes.

    Example: ``trace_dtypes(tiny_model(), torch.randn(2, 8), torch.tensor([0, 1]))``
    on CPU: forward ``0`` (Linear) -> bf16, loss -> fp32, every ``.grad`` -> fp32.
    """
    device_type = x.device.type
    validate_autocast_args(device_type, dtype)
    trace = DtypeTrace()
    handles = []
    for name, module in model.named_modules():
        if list(module.children()):
            continue  # containers: their leaves are recorded

        def on_forward(mod, args, out, name=name):
            trace.forward.append((name, out.dtype))
            # a tensor hook sees the gradient arriving at this output in backward
            out.register_hook(lambda grad: trace.backward.append((name, grad.dtype)))

        handles.append(module.register_forward_hook(on_forward))
    try:
        model.zero_grad(set_to_none=True)
        with torch.amp.autocast(device_type, dtype=dtype):
            loss = loss_fn(model(x), y)
        trace.loss = loss.dtype
        loss.backward()  # outside autocast, as the recipe says
    finally:
        for handle in handles:
            handle.remove()
    for name, param in model.named_parameters():
        trace.params[name] = param.dtype
        trace.grads[name] = param.grad.dtype
    return trace


# ---------------------------------------------------------------------------
# Nested and disabled regions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RegionState:
    """What the query functions say at one point, and what a matmul gives there."""

    where: str
    enabled: bool  # torch.is_autocast_enabled(device_type)
    dtype: torch.dtype  # torch.get_autocast_dtype(device_type)
    matmul: torch.dtype | None  # output dtype of the matmul run there (None: raised)
    error: str = ""


def nested_regions(
    device_type: str = "cpu", dtype: torch.dtype = torch.bfloat16
) -> list[RegionState]:
    """Walk through nested autocast regions, reading the query functions and running
    a matmul in each.

    The disabled region is the pattern for a numerically sensitive block: autocast
    off, inputs cast back with ``.float()``. Without the cast the matmul gets a
    low-precision activation and an fp32 weight, and raises.

    Example (CPU): the matmul gives bf16 in ``autocast(bf16)``, fp32 in the disabled
    region, fp16 in a nested ``autocast(fp16)``.
    """
    validate_autocast_args(device_type, dtype)
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    w = torch.rand(4, 4, device=device_type)
    x = torch.rand(2, 4, device=device_type)
    states = []

    def note(where, fn):
        try:
            out, error = fn().dtype, ""
        except RuntimeError as exc:
            out, error = None, error_line(exc)
        states.append(
            RegionState(
                where,
                torch.is_autocast_enabled(device_type),
                torch.get_autocast_dtype(device_type),
                out,
                error,
            )
        )

    note(_("outside"), lambda: x @ w)  # the labels a reader sees, in their language
    with torch.amp.autocast(device_type, dtype=dtype):
        h = x @ w  # low precision: the activation the inner regions receive
        note(f"autocast({short_dtype(dtype)})", lambda: h @ w)
        with torch.amp.autocast(device_type, enabled=False):
            note("  autocast(enabled=False), h.float() @ w", lambda: h.float() @ w)
            note("  autocast(enabled=False), h @ w", lambda: h @ w)
        with torch.amp.autocast(device_type, dtype=other):
            inside = _("autocast({dtype}) inside").format(dtype=short_dtype(other))
            note("  " + inside, lambda: h @ w)
        again = _("autocast({dtype}) again").format(dtype=short_dtype(dtype))
        note(again, lambda: h @ w)
    note(_("outside again"), lambda: x @ w)
    return states


# ---------------------------------------------------------------------------
# Custom autograd functions: custom_fwd / custom_bwd
# ---------------------------------------------------------------------------

CUSTOM_VARIANTS = ("plain", "custom_fwd", "custom_fwd(cast_inputs=float32)")


class FunctionLog:
    """Where a Function writes what it saw. Not a list on purpose: custom_fwd's
    cast_inputs rebuilds list and tuple arguments, so appends would be lost."""

    def __init__(self):
        self.records: list[tuple[str, tuple[torch.dtype, ...], bool]] = []


def make_matmul_function(device_type: str, variant: str) -> type:
    """A ``torch.autograd.Function`` computing ``x @ w`` that logs, in forward and
    backward, the dtypes it receives and whether autocast is on.

    ``variant``: ``"plain"`` (no decorators), ``"custom_fwd"`` (``custom_fwd`` +
    ``custom_bwd``: backward runs with forward's autocast state) or
    ``"custom_fwd(cast_inputs=float32)"`` (forward gets fp32 inputs, autocast off).
    Call as ``Fn.apply(x, w, log)`` with ``log = FunctionLog()``.
    """
    if variant not in CUSTOM_VARIANTS:
        raise ValueError(f"variant must be one of {CUSTOM_VARIANTS}, got {variant!r}")

    def keep(fn):
        return fn

    fwd, bwd = keep, keep
    if variant == "custom_fwd":
        fwd = torch.amp.custom_fwd(device_type=device_type)
        bwd = torch.amp.custom_bwd(device_type=device_type)
    elif variant == "custom_fwd(cast_inputs=float32)":
        fwd = torch.amp.custom_fwd(device_type=device_type, cast_inputs=torch.float32)
        bwd = torch.amp.custom_bwd(device_type=device_type)

    class MatmulFn(torch.autograd.Function):
        @staticmethod
        @fwd
        def forward(ctx, x, w, log):
            log.records.append(
                ("forward", (x.dtype, w.dtype), torch.is_autocast_enabled(device_type))
            )
            ctx.save_for_backward(x, w)
            ctx.log = log
            return x @ w

        @staticmethod
        @bwd
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            ctx.log.records.append(
                (
                    "backward",
                    (grad.dtype, x.dtype, w.dtype),
                    torch.is_autocast_enabled(device_type),
                )
            )
            return grad @ w.T, x.T @ grad, None

    MatmulFn.__name__ = MatmulFn.__qualname__ = f"MatmulFn[{variant}]"
    return MatmulFn


@dataclass(frozen=True)
class CustomFunctionResult:
    """One variant run under autocast: what forward and backward saw."""

    variant: str
    forward_inputs: tuple[torch.dtype, ...]  # dtypes forward received (x, w)
    forward_autocast: bool  # autocast on inside forward?
    output: torch.dtype
    backward_inputs: tuple[torch.dtype, ...]  # (grad, saved x, saved w)
    backward_autocast: bool | None  # autocast on inside backward?
    x_grad: torch.dtype | None
    w_grad: torch.dtype | None
    error: str = ""


def custom_function_demo(
    device_type: str = "cpu", dtype: torch.dtype = torch.bfloat16
) -> list[CustomFunctionResult]:
    """Run each ``make_matmul_function`` variant on a low-precision activation ``x``
    and an fp32 weight ``w`` under autocast, then backward outside autocast.

    Example (CPU, bf16): "plain" forward gets (bf16, fp32) and autocast multiplies in
    bf16, but its backward runs without autocast and raises on bf16 @ fp32;
    "custom_fwd" replays forward's autocast state in backward and works;
    "custom_fwd(cast_inputs=float32)" sees (fp32, fp32) with autocast off and
    returns fp32.
    """
    validate_autocast_args(device_type, dtype)
    results = []
    for variant in CUSTOM_VARIANTS:
        torch.manual_seed(0)
        x = torch.rand(2, 3, device=device_type).to(dtype).requires_grad_()
        w = torch.rand(3, 4, device=device_type, requires_grad=True)
        log = FunctionLog()
        fn = make_matmul_function(device_type, variant)
        with torch.amp.autocast(device_type, dtype=dtype):
            out = fn.apply(x, w, log)
        error = ""
        try:
            out.float().sum().backward()
        except RuntimeError as exc:
            error = error_line(exc)
        (_, fwd_in, fwd_ac), *back = log.records
        bwd_in, bwd_ac = (back[0][1], back[0][2]) if back else ((), None)
        results.append(
            CustomFunctionResult(
                variant,
                fwd_in,
                fwd_ac,
                out.dtype,
                bwd_in,
                bwd_ac,
                None if x.grad is None else x.grad.dtype,
                None if w.grad is None else w.grad.dtype,
                error,
            )
        )
    return results


# ---------------------------------------------------------------------------
# The casts autocast inserts (and its weight cache)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cast:
    """One cast autocast made: the source tensor's shape and dtypes."""

    shape: tuple[int, ...]
    source: torch.dtype
    target: torch.dtype


def record_casts(fn: Callable[[], object]) -> list[Cast]:
    """Run ``fn()`` and list every dtype cast (``aten._to_copy``) that happened
    below the Python API, which under autocast are the casts autocast inserted.

    Example: a ``nn.Linear(4, 3)`` called twice in one ``autocast(bf16)`` region on
    a (2, 4) input casts the weight (3, 4) and bias (3,) once (autocast caches casts
    of leaf tensors that require grad, until the outermost region exits) and the
    input (2, 4) twice.
    """
    # a TorchDispatchMode sees the ops the autocast kernels issue; private module,
    # but torch's own autocast tests use it the same way
    from torch.utils._python_dispatch import TorchDispatchMode

    casts: list[Cast] = []

    class CastLog(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func is torch.ops.aten._to_copy.default and "dtype" in kwargs:
                src = args[0]
                if kwargs["dtype"] != src.dtype:
                    casts.append(Cast(tuple(src.shape), src.dtype, kwargs["dtype"]))
            return out

    with CastLog():
        fn()
    return casts
