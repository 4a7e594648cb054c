"""What this machine means for the course's lessons (00_welcome, 06_speed_memory).

`amp_lessons.core.device` reports what the machine has (device, tensor cores, bf16
support); this module says, in a student's words, what that means for the lessons:
which run here, which show recorded GPU results, why bf16 may be slow on this CPU.
"""

from __future__ import annotations

from amp_lessons.core.device import BF16_CPU_FLAGS, EMULATION_NOTE, MachineReport
from amp_lessons.i18n import _

__all__ = ["what_this_means"]


def what_this_means(report: MachineReport) -> list[str]:
    """Plain-language consequences of the report for the rest of the course.

    Example: on a CPU without AVX-512 BF16 the list says every lesson runs, bf16 is
    emulated and slow, and lesson 06 shows recorded GPU results if there are any.
    """
    if report.device_type == "cuda":
        return _cuda_lines(report)
    if report.device_type == "mps":
        return [
            _(
                "Apple GPU (MPS) found: autocast works on 'mps'; CUDA-only "
                "cells show recorded results instead."
            )
        ]
    return _cpu_lines(report)


def _cuda_lines(report: MachineReport) -> list[str]:
    """The GPU, then what its tensor cores and bf16 support mean for speed."""
    major, minor = report.compute_capability
    lines = [
        _("GPU found: {name}, compute capability {major}.{minor}.").format(
            name=report.device_name, major=major, minor=minor
        )
    ]
    if report.tensor_cores:
        lines.append(
            _(
                "It has tensor cores: fp16 matmuls should run several times "
                "faster than fp32; amp_lessons.measure.bench measures by "
                "how much."
            )
        )
    else:
        lines.append(
            _(
                "No tensor cores (compute capability < 7.0): AMP saves "
                "memory but expect little speed-up."
            )
        )
    if report.bf16_native:
        lines.append(
            _("bf16 is native here: prefer bf16 autocast, no loss scaler needed.")
        )
    else:
        lines.append(
            _(
                "bf16 is not native here (needs compute capability 8.0+): "
                "use fp16 autocast with a GradScaler."
            )
        )
    return lines


def _cpu_lines(report: MachineReport) -> list[str]:
    """No GPU: every lesson runs anyway; then how fast bf16 can be on this CPU."""
    lines = [
        _(
            "No GPU: every lesson runs on the CPU; GPU-only cells say what "
            "they would show, and lesson 06 shows recorded GPU results if "
            "notebooks/results/ has any."
        )
    ]
    if report.bf16_native:
        flags = ", ".join(sorted(report.cpu_flags & set(BF16_CPU_FLAGS)))
        lines.append(
            _(
                "This CPU has bf16 instructions ({flags}): bf16 autocast "
                "can be fast here."
            ).format(flags=flags)
        )
    elif not report.cpu_bf16_emulated:
        lines.append(
            _(
                "This CPU has no bf16 instructions, but torch's oneDNN "
                "kernels run bf16 matmuls with its AVX-512 units: bf16 "
                "works, usually no faster than fp32; "
                "amp_lessons.measure.bench measures it."
            )
        )
    else:
        lines.append(
            _(
                "This CPU has no AVX-512 BF16 / AMX: bf16 and fp16 matmuls "
                "are emulated and much SLOWER than fp32, so CPU demos stay "
                "tiny and measure correctness, not speed. "
            )
            + _(EMULATION_NOTE)
        )
    return lines
