"""What this machine offers mixed precision: which device to use, dtypes, tensor cores,
CPU flags, and why low-precision CPU matmuls are slow here (``EMULATION_NOTE``).

Notebook 00 prints this report and what it means for the rest of the course. Every
field is read from the running torch and the hardware, never assumed. ``resolve_device``
is the one place the package turns a device name into a ``torch.device``.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path

import torch

from amp_lessons.core.errors import SettingUnavailable
from amp_lessons.i18n import N_, _

# CPU instruction-set flags (Linux /proc/cpuinfo names) that make bf16 fast on a CPU.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class MachineReport:
    """One snapshot of the hardware and software the lessons will run on."""

    torch_version: str
    device_type: str  # "cuda", "mps" or "cpu": what the lessons pick by default
    device_name: str
    compute_capability: tuple[int, int] | None  # CUDA only
    cuda_version: str | None
    tensor_cores: bool  # fp16 matrix units: NVIDIA compute capability >= 7.0
    bf16_native: bool  # bf16 runs in hardware on the default device, not emulated
    cpu_name: str
    cpu_capability: str  # the SIMD level torch's CPU kernels were dispatched to
    cpu_bf16_emulated: bool  # CPU bf16 matmuls take torch's slow generic loop
    cpu_flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def cpu_bf16_native(self) -> bool:
        return any(flag in self.cpu_flags for flag in BF16_CPU_FLAGS)


DEVICE_TYPES = ("cpu", "cuda", "mps")


def resolve_device(name: str = "auto") -> torch.device:
    """The one device resolver: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or
    ``"mps"`` into a ``torch.device`` that exists here.

    ``"auto"`` picks what the lessons use by default: CUDA, else MPS, else the CPU.
    Raises a ValueError for a name that is not a device of the course (with the list
    of valid ones) and a RuntimeError when the device is not present, each saying
    what to use instead.

    Example: ``resolve_device("cpu") == torch.device("cpu")``; on a laptop without a
    GPU ``resolve_device().type == "cpu"`` and ``resolve_device("cuda")`` raises
    "CUDA was asked for, but ...".
    """
    valid = "auto, cpu, cuda, cuda:N (a GPU index), mps"
    if not isinstance(name, str):
        raise ValueError(f"device must be a string ({valid}), got {name!r}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use one of: {valid}") from None
    if device.type not in DEVICE_TYPES:
        raise ValueError(f"unknown device {name!r}; use one of: {valid}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = (
                _("this torch ({version}) was built without CUDA").format(
                    version=torch.__version__
                )
                if torch.version.cuda is None
                else _("no NVIDIA GPU is visible to this torch")
            )
            raise SettingUnavailable(
                _(
                    "CUDA was asked for, but torch.cuda.is_available() is False: "
                    "{build}. Fix: use `device='cpu'` (or `device='auto'`), or run on "
                    "a machine with an NVIDIA GPU and a CUDA build of torch."
                ).format(build=build)
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise RuntimeError(
                f"{name!r} asked for, but only {count} CUDA device(s) "
                f"exist: use cuda:0 .. cuda:{count - 1}"
            )
    if device.type == "mps" and not _mps_available():
        raise SettingUnavailable(
            "MPS (Apple GPU) was asked for, but it is not "
            "available here. Fix: use `device='cpu'` (or "
            "`device='auto'`)."
        )
    return device


def device_present(name: str) -> bool:
    """True when ``resolve_device(name)`` succeeds: real tensors can be made there.

    Example: on a laptop without a GPU ``device_present("cuda")`` is False and
    ``device_present("cpu")`` is True; a name outside the course's devices (e.g.
    ``"xpu"``) is False too.
    """
    try:
        resolve_device(name)
    except (ValueError, RuntimeError):
        return False
    return True


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU feature flags the kernel reports (empty where there is no /proc)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def read_cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cuda_bf16_native(capability: tuple[int, int]) -> bool:
    """bf16 tensor-core math arrived with Ampere (compute capability 8.0).

    Example: ``cuda_bf16_native((7, 5))`` is False (a T4: torch emulates bf16 there),
    ``cuda_bf16_native((9, 0))`` is True (H100/H200).
    """
    return capability >= (8, 0)


# The course's one explanation of why low-precision CPU runs are slow; modules and
# notebooks refer to it instead of repeating it.
EMULATION_NOTE = N_(
    "Most CPUs have no bf16/fp16 matrix units: where torch's oneDNN kernels cannot "
    "run the dtype on this CPU (device.cpu_matmul_emulated), a bf16/fp16 matmul "
    "falls back to a generic loop that widens every element to fp32, measured ~150x "
    "slower than fp32 on an AVX2 CPU. CPU runs in these dtypes show the mechanics, "
    "not the speed; measure speed on a GPU."
)
"""Why CPU runs in bf16/fp16 are slow (in English; ``_(EMULATION_NOTE)`` says it in
the language of ``amp_lessons.set_language``)."""


def cpu_matmul_emulated(dtype: torch.dtype) -> bool:
    """True when a CPU matmul in ``dtype`` takes torch's generic fallback loop here.

    torch multiplies bf16/fp16 matrices on a CPU with oneDNN when oneDNN can run that
    dtype on this CPU (x86 bf16: AVX-512 BW/VL/DQ or AVX-NE-CONVERT; fp16: AVX-512
    FP16, AMX-FP16 or AVX-NE-CONVERT; ARM: its bf16/fp16 extensions). Otherwise it
    falls back to a plain loop (``EMULATION_NOTE`` says what that costs). fp32 is
    never emulated.

    Example: on an AVX2-only CPU ``cpu_matmul_emulated(torch.bfloat16)`` is True;
    ``cpu_matmul_emulated(torch.float32)`` is False everywhere.
    """
    if dtype == torch.float32:
        return False
    checks = {
        torch.bfloat16: "_is_mkldnn_bf16_supported",
        torch.float16: "_is_mkldnn_fp16_supported",
    }
    if dtype not in checks:
        raise ValueError(
            f"cpu_matmul_emulated knows float32, bfloat16 and float16, "
            f"not {dtype}; pass one of those"
        )
    if not torch.backends.mkldnn.is_available():  # a build without oneDNN
        return True
    return not getattr(torch.ops.mkldnn, checks[dtype])()


def describe_machine() -> MachineReport:
    """Read the machine. Example: ``describe_machine().device_type`` -> ``"cpu"``."""
    device_type = resolve_device().type
    flags = read_cpu_flags()
    capability = cuda_version = None
    if device_type == "cuda":
        capability = torch.cuda.get_device_capability()
        device_name = torch.cuda.get_device_name()
        cuda_version = torch.version.cuda
        bf16_native = cuda_bf16_native(capability)
    elif device_type == "mps":
        device_name = "Apple GPU (MPS)"
        # Metal has bf16 from macOS 14; torch raises on bf16 MPS tensors before that.
        bf16_native = _mps_accepts_bf16()
    else:
        device_name = read_cpu_name()
        bf16_native = any(flag in flags for flag in BF16_CPU_FLAGS)
    return MachineReport(
        torch_version=torch.__version__,
        device_type=device_type,
        device_name=device_name,
        compute_capability=capability,
        cuda_version=cuda_version,
        tensor_cores=capability is not None and capability >= (7, 0),
        bf16_native=bf16_native,
        cpu_name=read_cpu_name(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_bf16_emulated=cpu_matmul_emulated(torch.bfloat16),
        cpu_flags=flags,
    )


def _mps_accepts_bf16() -> bool:
    try:
        torch.ones(1, dtype=torch.bfloat16, device="mps")
    except (RuntimeError, TypeError):
        return False
    return True
