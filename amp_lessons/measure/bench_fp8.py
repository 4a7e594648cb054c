"""The bench's fp8 row: torchao's fp8 training, compiled, where fp8 tensor cores exist.

``python -m amp_lessons bench --precision fp8`` (or ``fp8`` among ``--precisions``)
times the same models and loop as the other rows, with every ``nn.Linear`` except the
first and last (and any whose sizes are not multiples of 16: Hugging Face Accelerate's
rule, ``fp8.filter_first_and_last``) swapped for torchao's ``Float8Linear``
(tensorwise dynamic scaling, real ``torch._scaled_mm`` kernels), everything else under
bf16 autocast, and the model under ``torch.compile``: torchao's published speed-ups are
measured compiled, where the amax, scale and cast kernels fuse. On a GPU with compute
capability 8.9 or newer (Ada, Hopper, Blackwell) and torchao installed, the bench adds
this row by default; anywhere else, asking for it ends with the reason.

Lesson 11 runs the same numerics emulated on a CPU (``amp_lessons.core.fp8``).
"""

from __future__ import annotations

import torch
from torch import nn

from amp_lessons.core.fp8 import filter_first_and_last
from amp_lessons.core.precision import PRECISIONS
from amp_lessons.i18n import N_, _
from amp_lessons.measure.fp8_vs_torchao import INSTALL_HINT, import_torchao_float8

__all__ = [
    "BASE_PRECISION",
    "BENCH_PRECISIONS",
    "FP8",
    "FP8_NOTE",
    "MIN_CAPABILITY",
    "base_precision",
    "default_precisions",
    "fp8_unavailable",
    "prepare_fp8",
    "scaled_mm_shape_error",
]

FP8 = "fp8"
BENCH_PRECISIONS = (*PRECISIONS, FP8)
BASE_PRECISION = "bf16"  # what the layers torchao leaves alone run in
MIN_CAPABILITY = (8, 9)  # the first GPUs with fp8 tensor cores: Ada (sm_89), Hopper
FP8_NOTE = N_(
    "torchao Float8Linear (tensorwise, dynamic), first/last Linear and the "
    "rest in bf16, torch.compile; no MFU: PEAK_TFLOPS lists no fp8 peak"
)


def fp8_unavailable(device: torch.device | str) -> str | None:
    """Why the fp8 row cannot run on ``device``, or None when it can.

    Example: ``fp8_unavailable("cpu")`` -> ``"fp8 training needs an NVIDIA GPU with
    compute capability 8.9 or newer ... this run is on cpu ..."``.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return _(
            "fp8 training needs an NVIDIA GPU with compute capability {capability} "
            "or newer (Ada such as L4 or RTX 4090, Hopper H100/H200, Blackwell); this "
            "run is on {device}. Lesson 11 runs the same numerics emulated on a CPU "
            "(amp_lessons.core.fp8)."
        ).format(capability="{}.{}".format(*MIN_CAPABILITY), device=device.type)
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        return _(
            "{gpu} has compute capability {capability}; fp8 tensor cores start at "
            "{minimum} (Ada, Hopper, Blackwell)"
        ).format(
            gpu=torch.cuda.get_device_name(device),
            capability="{}.{}".format(*capability),
            minimum="{}.{}".format(*MIN_CAPABILITY),
        )
    if import_torchao_float8() is None:
        return _("the fp8 row uses torchao, which is not installed: {hint}").format(
            hint=INSTALL_HINT
        )
    return None


def scaled_mm_shape_error(m: int, k: int, n: int) -> str | None:
    """What torch's fp8 matmul says about an (M, K) @ (K, N) shape: None if it runs.

    Asked of ``torch._scaled_mm`` on *meta* tensors (shapes, no data), which get the
    same shape checks as CUDA ones (``_check_scaled_mm_sizes`` in
    ``torch/_meta_registrations.py``), so any machine can ask. K and N must be
    multiples of 16; M is free.

    Example:
        >>> scaled_mm_shape_error(30, 64, 128) is None
        True
        >>> scaled_mm_shape_error(32, 40, 128)
        'Expected self.size(1) to be divisible by 16, but got self.size(1)=40'
    """
    a = torch.empty(m, k, device="meta", dtype=torch.float8_e4m3fn)
    b = torch.empty(n, k, device="meta", dtype=torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device="meta")
    try:
        torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
    except RuntimeError as error:
        return str(error)
    return None


def base_precision(name: str) -> str:
    """The precision table entry a bench row runs under: bf16's for fp8."""
    return BASE_PRECISION if name == FP8 else name


def default_precisions(device: torch.device | str) -> tuple[str, ...]:
    """The bench's default: fp32, tf32, fp16 and bf16, plus fp8 where it can run."""
    return BENCH_PRECISIONS if fp8_unavailable(device) is None else tuple(PRECISIONS)


def prepare_fp8(
    model: nn.Module, *, emulate: bool = False, compile: bool = True
) -> nn.Module:
    """Convert ``model``'s Linears (the ends kept) with torchao, then compile it.

    ``emulate=True`` and ``compile=False`` give torchao's CPU emulation, eager: what
    the tests use to check the plumbing on a machine without fp8 tensor cores.
    """
    float8 = import_torchao_float8()
    if float8 is None:
        raise ModuleNotFoundError(f"the fp8 row needs torchao: {INSTALL_HINT}")
    float8.convert_to_float8_training(
        model,
        module_filter_fn=filter_first_and_last(model),
        config=float8.Float8LinearConfig(emulate=emulate),
    )
    return torch.compile(model) if compile else model
