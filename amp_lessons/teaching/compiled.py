"""torch.compile with autocast: what compiling costs, when it pays, where it differs.

Notebook 09 uses this module on the CPU (inductor generates and compiles C++, so the
first call takes seconds). ``time_compile`` measures the first call and the steady
call of eager and compiled code, the break-even number of calls, and how their
results differ (``amp_step``: a forward under bf16 autocast and a backward);
``backward_pass_autocast`` reads the setting that decides which autocast state a
compiled backward is traced under; ``disabled_region_grad`` and
``disabled_region_grads`` reproduce what it does: a compiled region with
``autocast(enabled=False)`` inside, called under autocast, gets different gradients
from eager (pytorch/pytorch#179804), and the setting that gives eager's.

Not covered here: CUDA graphs (``mode="reduce-overhead"``), dynamic shapes, and
compiling the optimizer step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

__all__ = [
    "CompileTiming",
    "amp_step",
    "backward_pass_autocast",
    "disabled_region_grad",
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


def _fastest(
    fns: Sequence[Callable[[], Any]], repeats: int, number: int
) -> list[float]:
    """Each function's fastest of ``repeats`` timings of ``number`` calls, per call.
    The functions take turns within each repeat, so a burst of load slows them alike
    instead of landing on one; noise only ever adds time, so the minimum is the best
    estimate on a busy machine."""
    best = [math.inf] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / number)
    return best


def _flat(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result.detach().clone()]
    return [t.detach().clone() for t in result]


def time_compile(
    fn: Callable[..., Any],
    *args: Any,
    backend: str = "inductor",
    repeats: int = 15,
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
    eager_s, compiled_s = _fastest(
        [lambda: fn(*args), lambda: compiled(*args)], repeats, number
    )
    pairs = list(zip(eager_out, compiled_out, strict=True))
    diff = max((a.float() - b.float()).abs().max().item() for a, b in pairs)
    same = all(a.dtype == b.dtype and torch.equal(a, b) for a, b in pairs)
    return CompileTiming(first, eager_s, compiled_s, diff, same)


def backward_pass_autocast() -> Any:
    """``torch._functorch.config.backward_pass_autocast`` as this torch has it now: the
    autocast state a compiled region's backward graph is traced under.

    ``torch.compile`` traces a region's forward and backward graphs together, at the
    forward call, so it must assume how the backward will run. ``"same_as_forward"``:
    under the autocast the forward ran under, as if ``backward()`` were called inside
    the ``with autocast`` block. ``"off"``: without autocast, as eager AMP code runs
    it (autocast wraps the forward only). A list of autocast kwargs dicts: under that
    autocast. torch 2.13 ships ``"same_as_forward"`` (its ``_functorch/config.py``);
    pytorch#177287, which would have made ``"off"`` the default, was closed, and the
    docs warn instead (pytorch#184839).

    Example::

        backward_pass_autocast()  # 'same_as_forward' in torch 2.13
    """
    import torch._functorch.config as functorch_config

    return functorch_config.backward_pass_autocast


def disabled_region_grad(
    compiled: bool = False,
    backward_pass_autocast: str | None = None,
    backward_under_autocast: bool = False,
) -> torch.Tensor:
    """The weight gradient of a region with an ``autocast(enabled=False)`` matmul
    inside (fp32 on purpose), called under bf16 autocast (pytorch#179804).

    ``compiled``: through ``torch.compile`` (the ``aot_eager`` backend: the behaviour
    is AOTAutograd's tracing, not inductor's, and it skips inductor's C++ build),
    with ``torch._functorch.config.backward_pass_autocast`` set to
    ``backward_pass_autocast`` for the call (None: this torch's setting).
    ``backward_under_autocast``: call ``backward()`` inside the ``with autocast``
    block instead of after it, which autocast's docs advise against. Eager runs each
    backward op in the dtypes its forward op saved; under autocast the backward of
    the fp32 matmul is autocast to bf16 like any matmul.

    Example::

        eager = disabled_region_grad()
        torch.equal(disabled_region_grad(True, "off"), eager)  # True
        torch.equal(disabled_region_grad(True, "same_as_forward"),
                    disabled_region_grad(backward_under_autocast=True))  # True
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
    with functorch_config.patch(**patch):
        fn = region
        if compiled:
            torch._dynamo.reset()
            fn = torch.compile(region, backend="aot_eager")
        with torch.amp.autocast(h.device.type, dtype=torch.bfloat16):
            out = fn(h)
            if backward_under_autocast:
                out.sum().backward()
        if not backward_under_autocast:
            out.sum().backward()
    return layer.weight.grad.clone()


def disabled_region_grads(backward_pass_autocast: str | None = None) -> bool:
    """Are the compiled gradients of ``disabled_region_grad``'s region equal to
    eager's (backward outside autocast, as autocast is meant to be used)? With
    ``backward_pass_autocast`` ``"same_as_forward"`` (this torch's default: see
    ``backward_pass_autocast()``) they are not; with ``"off"`` they are. ``None``
    keeps the installed setting.

    Example::

        disabled_region_grads()       # False in torch 2.13: its default
        disabled_region_grads("off")  # True
    """
    eager = disabled_region_grad()
    return torch.equal(eager, disabled_region_grad(True, backward_pass_autocast))
