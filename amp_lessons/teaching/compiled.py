"""torch.compile with autocast: what compiling costs, when it pays, where it differs.

Notebook 09 uses this module on the CPU (inductor generates and compiles C++, so the
first call takes seconds). ``time_compile`` measures the first call and the steady
call of eager and compiled code, the break-even number of calls, and how their
results differ (``amp_step``: a forward under bf16 autocast and a backward);
``disabled_region_grads`` reproduces a real bug: a compiled region with
``autocast(enabled=False)`` inside, called under autocast, gets different gradients
from eager (pytorch/pytorch#179804), and shows the setting that fixes it.

Not covered here: CUDA graphs (``mode="reduce-overhead"``), dynamic shapes, and
compiling the optimizer step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

__all__ = [
    "CompileTiming",
    "amp_step",
    "disabled_region_grads",
    "gelu_chain",
    "small_mlp",
    "time_compile",
]


def small_mlp(seed: int = 0, width: int = 64) -> nn.Sequential:
    """Linear(32, width) -> GELU -> Linear(width, 8), seeded."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(32, width), nn.GELU(), nn.Linear(width, 8))


def gelu_chain(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh form written out: eight elementwise ops that eager runs as eight
    passes over memory and inductor fuses into one loop."""
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    return (0.5 * x * (1 + torch.tanh(inner))).sum()


def amp_step(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Forward under bf16 autocast, a loss, backward: ``[loss, *weight grads]``.

    No optimizer step, so calling it again gives the same result: eager and compiled
    runs of it can be compared and timed on the same weights.
    """
    for p in model.parameters():
        p.grad = None
    with torch.amp.autocast(x.device.type, dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    return [loss.detach(), *(p.grad for p in model.parameters())]


@dataclass(frozen=True)
class CompileTiming:
    """One function, eager and compiled: seconds per call, and how the results of
    the two first calls compare."""

    first_call_s: float  # the first compiled call: tracing and compiling included
    eager_s: float
    compiled_s: float
    max_diff: float  # the largest |eager - compiled| over every returned tensor
    bit_identical: bool

    @property
    def speedup(self) -> float:
        return self.eager_s / self.compiled_s

    @property
    def break_even_calls(self) -> float:
        """Calls after which compiling has paid for itself (inf: never)."""
        saved = self.eager_s - self.compiled_s
        return math.inf if saved <= 0 else (self.first_call_s - self.compiled_s) / saved


def _fastest(fn: Callable[[], Any], repeats: int, number: int) -> float:
    """The fastest of ``repeats`` timings of ``number`` calls, per call: noise only
    ever adds time, so the minimum is the best estimate on a busy machine."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def _flat(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result.detach().clone()]
    return [t.detach().clone() for t in result]


def time_compile(
    fn: Callable[..., Any],
    *args: Any,
    backend: str = "inductor",
    repeats: int = 5,
    number: int = 10,
) -> CompileTiming:
    """Run ``fn(*args)`` eager and compiled (``torch.compile(fn, backend=backend)``):
    time both, and compare what the first calls returned (a tensor or a list).

    Dynamo's caches are reset first, so the first call really compiles (inductor's
    on-disk cache can still make a later run of the same code compile faster).

    Example::

        timing = time_compile(gelu_chain, torch.randn(2**18))
        timing.first_call_s, timing.speedup, timing.break_even_calls
    """
    torch._dynamo.reset()
    eager_out = _flat(fn(*args))
    compiled = torch.compile(fn, backend=backend)
    start = time.perf_counter()
    compiled_out = _flat(compiled(*args))
    first = time.perf_counter() - start
    eager_s = _fastest(lambda: fn(*args), repeats, number)
    compiled_s = _fastest(lambda: compiled(*args), repeats, number)
    pairs = list(zip(eager_out, compiled_out, strict=True))
    diff = max((a.float() - b.float()).abs().max().item() for a, b in pairs)
    same = all(a.dtype == b.dtype and torch.equal(a, b) for a, b in pairs)
    return CompileTiming(first, eager_s, compiled_s, diff, same)


def disabled_region_grads(backward_pass_autocast: str | None = None) -> bool:
    """Are the gradients of a compiled function with an ``autocast(enabled=False)``
    region inside, called under bf16 autocast, equal to eager's? (pytorch#179804)

    Eager runs backward outside autocast, as autocast is meant to be used. Compiled
    code traces its backward under the forward's autocast state when
    ``torch._functorch.config.backward_pass_autocast`` is ``"same_as_forward"`` (the
    default in this torch), and the backward matmul is then done in bf16. Setting it
    to ``"off"`` (the default from the fix on) gives eager's gradients. ``None``
    keeps the installed default. Uses the ``aot_eager`` backend: the bug is in
    autograd tracing, not in inductor, and it compiles in about a second.

    Example::

        disabled_region_grads()       # False in torch 2.13: the bug
        disabled_region_grads("off")  # True: the fix
    """
    import torch._functorch.config as functorch_config

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = nn.Linear(64, 64)
        h = torch.randn(4, 64, dtype=torch.bfloat16, requires_grad=True)

    def region(x: torch.Tensor) -> torch.Tensor:
        with torch.amp.autocast(x.device.type, enabled=False):
            return x.float() @ layer.weight.float().T  # fp32 on purpose

    patch = ({} if backward_pass_autocast is None
             else {"backward_pass_autocast": backward_pass_autocast})  # fmt: skip
    grads = []
    with functorch_config.patch(**patch):
        for fn in (region, torch.compile(region, backend="aot_eager")):
            torch._dynamo.reset()
            layer.weight.grad = None
            with torch.amp.autocast(h.device.type, dtype=torch.bfloat16):
                out = fn(h)
            out.sum().backward()
            grads.append(layer.weight.grad.clone())
    return torch.equal(*grads)
