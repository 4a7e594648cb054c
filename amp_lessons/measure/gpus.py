"""The GPUs the estimate knows: datasheet peaks (dense, no sparsity) and bandwidth.

Each number is NVIDIA's own, from the document named in the GPU's ``source``; the SM
counts (``SMS``) from NVIDIA's architecture whitepapers (Volta: V100 SXM2 80 SMs;
Turing: T4 40; Ampere: A100 108; Ada: L4 58, RTX 4090 128; Hopper: H100 SXM5 132,
H200 the same die). Tensor
core peaks are with float32 accumulation, which is what PyTorch's matmuls use (a
GeForce card's datasheet also lists twice that, with float16 accumulation).

Example:
    >>> GPUS["A100-SXM4-80GB"].peak("bf16") / GPUS["A100-SXM4-80GB"].peak("fp32")
    16.0
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from amp_lessons.i18n import _

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class GPU:
    """One GPU: peaks in TFLOP/s (None where its tensor cores lack the dtype)."""

    name: str
    fp32: float  # CUDA cores, no tensor cores
    tf32: float | None
    fp16: float
    bf16: float | None
    fp8: float | None
    bandwidth_gbs: float
    memory_gb: float
    capability: str
    source: str
    sms: int = 0  # streaming multiprocessors: one wave of GEMM tiles (gemm_model)

    def peak(self, math: str) -> float:
        """Peak FLOP/s for arithmetic in ``math``: ``peak("fp16")`` -> 3.12e14."""
        tflops = getattr(self, math)
        if tflops is None:
            raise ValueError(self.refusal(math))
        return tflops * 1e12

    def refusal(self, precision: str) -> str:
        """Why this GPU cannot run ``precision`` fast, and what to pick instead."""
        needs = {
            "tf32": "8.0 (Ampere)",
            "bf16": "8.0 (Ampere)",
            "fp8": "8.9 (Ada, Hopper)",
        }
        have = ", ".join(p for p in PRECISIONS if getattr(self, p) is not None)
        return _(
            "{gpu} (compute capability {capability}) has no {precision} tensor "
            "cores: {precision} needs {needs} or newer. Choose one of: {choices}"
        ).format(
            gpu=self.name,
            capability=self.capability,
            precision=precision,
            needs=needs.get(precision, "?"),
            choices=have,
        )

    def supports(self, precision: str) -> bool:
        return precision in PRECISIONS and getattr(self, precision) is not None


_V100 = (
    "NVIDIA Tesla V100 datasheet (SXM2 column: fp32 15.7, tensor 125 TFLOP/s, 900 GB/s)"
)
_A100 = (
    "NVIDIA A100 Tensor Core GPU datasheet (A100 SXM columns; dense, without sparsity)"
)
_HALF = "dense = half the 'with sparsity' figures"
_H100 = f"NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column; {_HALF})"
_H200 = f"NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column; {_HALF})"

GPUS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("V100-SXM2-16GB", 15.7, None, 125.0, None, None, 900.0, 16, "7.0", _V100),
        GPU("V100-SXM2-32GB", 15.7, None, 125.0, None, None, 900.0, 32, "7.0", _V100),
        GPU(
            "T4",
            8.1,
            None,
            65.0,
            None,
            None,
            320.0,
            16,
            "7.5",
            "NVIDIA T4 datasheet (fp32 8.1, mixed-precision fp16/fp32 65 TFLOP/s, "
            "320 GB/s)",
        ),
        GPU(
            "A100-SXM4-40GB", 19.5, 156.0, 312.0, 312.0, None, 1555.0, 40, "8.0", _A100
        ),
        GPU(
            "A100-SXM4-80GB", 19.5, 156.0, 312.0, 312.0, None, 2039.0, 80, "8.0", _A100
        ),
        GPU(
            "L4",
            30.3,
            60.0,
            121.0,
            121.0,
            242.0,
            300.0,
            24,
            "8.9",
            "NVIDIA L4 datasheet (dense = half the 'with sparsity' figures)",
        ),
        GPU(
            "RTX-4090",
            82.6,
            82.6,
            165.2,
            165.2,
            330.3,
            1008.0,
            24,
            "8.9",
            "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix A (GeForce "
            "RTX 4090, float32 accumulation)",
        ),
        GPU(
            "H100-SXM5-80GB",
            67.0,
            494.7,
            989.4,
            989.4,
            1978.9,
            3350.0,
            80,
            "9.0",
            _H100,
        ),
        GPU(
            "H200-SXM-141GB",
            67.0,
            494.7,
            989.4,
            989.4,
            1978.9,
            4800.0,
            141,
            "9.0",
            _H200,
        ),
    )
}


# SMs per GPU: NVIDIA Tesla V100 GPU Architecture whitepaper (V100: 80 SMs); NVIDIA
# Turing GPU Architecture whitepaper, appendix (Tesla T4: 40 SMs); NVIDIA A100 Tensor
# Core GPU Architecture whitepaper, table 1 (108 SMs); NVIDIA Ada GPU Architecture
# whitepaper, appendix A (RTX 4090: 128 SMs; L4: 58 SMs); NVIDIA H100 Tensor Core GPU
# Architecture whitepaper, table (H100 SXM5: 132 SMs), and the H200 datasheet (the
# H100's GPU with more memory)
SMS = {
    "V100-SXM2-16GB": 80,
    "V100-SXM2-32GB": 80,
    "T4": 40,
    "A100-SXM4-40GB": 108,
    "A100-SXM4-80GB": 108,
    "L4": 58,
    "RTX-4090": 128,
    "H100-SXM5-80GB": 132,
    "H200-SXM-141GB": 132,
}
GPUS = {name: replace(g, sms=SMS[name]) for name, g in GPUS.items()}


def find_gpu(name: str) -> GPU:
    """``find_gpu("A100-SXM4-80GB")``; an unknown name gets the list of choices."""
    if name not in GPUS:
        raise ValueError(f"unknown gpu {name!r}; choose one of: {', '.join(GPUS)}")
    return GPUS[name]
