"""The one torch state every check runs in, whatever the notebook set before.

A notebook may have switched grad mode off, made float64 the default dtype, entered
an autocast region, turned on flush-to-zero or strict deterministic mode; a check's
oracle (a real GradScaler, ops under autocast, a tiny model trained for a step) must
give the same answer anyway, and leave the notebook as it found it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["fixed_torch_state"]


def _flushes_denormals() -> bool:
    tiny = torch.tensor([1e-40], dtype=torch.float32, device="cpu")  # a subnormal
    return (tiny * 1.0).item() == 0.0


def _set_deterministic(mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=warn_only)`` without its
    import of ``torch._inductor`` (to set inductor's own flag; no check compiles),
    which imports dynamo: 1.3 s of the first check every kernel runs. The debug mode
    is the same two flags; only "off, but warn" needs the long way."""
    if mode or not warn_only:
        torch.set_deterministic_debug_mode((1 if warn_only else 2) if mode else 0)
    else:
        torch.use_deterministic_algorithms(False, warn_only=True)


@contextlib.contextmanager
def fixed_torch_state(seed: int | None = 0) -> Iterator[None]:
    """Run the block in the one state every check's oracle expects, then restore the
    caller's: grad mode on (and not in inference mode), float32 default dtype, the
    CPU as default device, autocast off, full-precision float32 matmuls, subnormals
    kept, deterministic kernels, and the random state forked (and seeded with
    `seed` unless it is None).

    Example:
        >>> torch.set_default_dtype(torch.float64)
        >>> with fixed_torch_state():
        ...     torch.ones(1).dtype
        torch.float32
    """
    dtype, device = torch.get_default_dtype(), torch.get_default_device()
    matmul = torch.get_float32_matmul_precision()
    deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    flush = _flushes_denormals()
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=cuda))
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.enable_grad())
        stack.enter_context(torch.amp.autocast("cpu", enabled=False))
        if torch.cuda.is_available():
            stack.enter_context(torch.amp.autocast("cuda", enabled=False))
        try:
            torch.set_default_dtype(torch.float32)
            if device.type != "cpu":
                torch.set_default_device(None)
            torch.set_float32_matmul_precision("highest")
            _set_deterministic(True, warn_only=True)
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
            if flush:
                torch.set_flush_denormal(False)
            if seed is not None:
                torch.manual_seed(seed)
            yield
        finally:
            torch.set_default_dtype(dtype)
            if device != torch.get_default_device():
                torch.set_default_device(device)
            torch.set_float32_matmul_precision(matmul)
            _set_deterministic(*deterministic)
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
            torch.set_flush_denormal(flush)
