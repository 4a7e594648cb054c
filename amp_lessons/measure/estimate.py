"""What AMP would buy on a GPU you do not have: a training step's time, from first
principles.

A step's time has three parts (Horace He, "Making Deep Learning Go Brrrr From First
Principles"): **compute** (matmuls and convolutions on tensor cores, where 16-bit pays
by the ratio of the peaks), **memory** (pointwise ops, norms, casts: bytes over
bandwidth, so 16-bit gains at most 2x) and **overhead** (kernel launches and the
CPU's Python and dispatch time: no gain at all). Each kernel of the step, traced on
the meta device (``amp_lessons.measure.trace``), takes the longest of its compute
time, its memory time and a launch floor; the CPU's time runs beside the GPU's, and
the step waits for whichever is longer.

Six numbers (``Efficiency``) turn datasheet peaks into achieved speed; they are
fitted once on published measurements (``amp_lessons.measure.published``), with the
leave-one-out error of every row reported there.

Example:
    >>> with torch.device("meta"):
    ...     model = torch.nn.Sequential(*(torch.nn.Linear(4096, 4096) for _ in "abc"))
    >>> x = torch.empty(512, 4096, device="meta")
    >>> e = estimate_step(model, x, "H100-SXM5-80GB", "bf16")
    >>> e.regime in ("compute", "memory", "overhead")
    True
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from amp_lessons.i18n import _
from amp_lessons.measure.gemm_model import gemm_efficiency
from amp_lessons.measure.gpus import GPU, GPUS, PRECISIONS, find_gpu
from amp_lessons.measure.inductor_fusion import inductor_fusion
from amp_lessons.measure.optimizer_step import clip_kernels, optimizer_kernels
from amp_lessons.measure.trace import Kernel, Trace, trace_step

__all__ = [
    "GPUS",
    "OPTIMIZERS",
    "Efficiency",
    "Estimate",
    "FITTED",
    "estimate_step",
    "price",
    "step_kernels",
]

# Bytes an optimizer step moves per fp32 parameter, as one fused kernel (apex's and
# torch's fused=True): Adam reads p, g, m, v and writes p, m, v (7 x 4 B); LAMB adds a
# second pass for its trust ratio (reads p and the update, writes p); SGD with
# momentum reads p, g, buf and writes p, buf; plain SGD reads p, g and writes p.
OPTIMIZERS = {"adam": 28, "lamb": 40, "sgd_momentum": 20, "sgd": 12, "none": 0}
SCALER_BYTES = 8  # GradScaler's unscale_: reads and writes every gradient (fp16 only)
TENSORS_PER_LAUNCH = 64  # a multi-tensor kernel takes a list of tensors per launch


@dataclass(frozen=True)
class Efficiency:
    """What fraction of a datasheet's peaks real kernels reach, and the fixed costs.

    ``tensor``: of the 16-bit (and fp8) tensor-core peak; ``tf32``: of the TF32
    tensor-core peak, apart (its operands are twice as wide, so a tile moves twice
    the bytes per FLOP); ``fp32``: of the CUDA-core peak; each for a large GEMM,
    smaller and skinnier ones losing more by tile and wave quantization
    (``gemm_model``); ``memory``: of the bandwidth; ``kernel_us``: the shortest a
    kernel takes, launch included; ``cpu_us``: the CPU's time per launched kernel in
    eager mode (Python, dispatch and the launch call).

    ``attention_tensor`` and ``attention_fp32``: a fused attention kernel's own
    fraction of the peak it is priced at (16-bit: the tensor-core peak; float32: the
    CUDA-core peak, which the memory-efficient kernel can pass, doing its products
    on tensor cores as three TF32 MMAs). None, as fitted: priced as a large GEMM of
    its arithmetic. A GPU profile measures them (``microbench``).
    """

    tensor: float = 0.6
    tf32: float = 0.6
    fp32: float = 0.8
    memory: float = 0.75
    kernel_us: float = 4.0
    cpu_us: float = 6.0
    attention_tensor: float | None = None
    attention_fp32: float | None = None


# Fitted on data/published_speedups.csv by
# `python -m amp_lessons.measure.published --write` (tests/test_estimate.py refits it),
# within physical ranges (published.GRID): a kernel launch takes 2-8 us on a
# data-centre GPU and the CPU's Python and dispatch work 3-12 us a launched kernel
# in eager PyTorch. The fit puts memory at 40% of the bandwidth: the eager trace
# counts every pointwise op as its own kernel, where the published code fuses them
# (LayerNorm, bias + GELU, softmax + dropout), so it moves fewer bytes than traced.
FITTED = Efficiency(
    tensor=0.7, tf32=0.9, fp32=0.9, memory=0.5, kernel_us=8.0, cpu_us=3.0
)


@dataclass(frozen=True)
class Estimate:
    """The predicted time of one training step, and where it goes.

    ``compute_s + memory_s + overhead_s == seconds``; ``by_kind`` splits the GPU's
    kernels by op kind (matmul, attention, convolution, norm, cast, pointwise, ...,
    optimizer), and ``overhead_s`` holds the launch floors plus the time the GPU
    waits for the CPU.
    """

    gpu: str
    precision: str
    seconds: float
    compute_s: float
    memory_s: float
    overhead_s: float
    flops: int
    bytes: int
    kernels: int
    by_kind: dict[str, float] = field(default_factory=dict)

    @property
    def regime(self) -> str:
        """``"compute"``, ``"memory"`` or ``"overhead"``: the largest of the three."""
        parts = {
            "compute": self.compute_s,
            "memory": self.memory_s,
            "overhead": self.overhead_s,
        }
        return max(parts, key=parts.get)

    def tflops(self) -> float:
        """Achieved TFLOP/s: the step's FLOPs over its predicted time."""
        return self.flops / self.seconds / 1e12


def step_kernels(
    model: torch.nn.Module,
    precision: str,
    optimizer: str,
    implementation: str = "fused",
    clip: bool = False,
) -> list[Kernel]:
    """The kernels after backward: GradScaler's unscale_ (fp16 only), gradient
    clipping where the step clips, and the optimizer step over the fp32 master
    weights, as ``implementation`` runs it: ``fused`` (one kernel, ``OPTIMIZERS``'
    bytes), or torch's ``foreach`` or ``loop`` step, traced (``optimizer_step``);
    LAMB's ``loop`` is Transformer-XL's jitlamb, 5 kernels a parameter."""
    check_optimizer(optimizer)
    params = [p for p in model.parameters() if p.requires_grad]
    numel = sum(p.numel() for p in params)
    launches = max(1, math.ceil(len(params) / TENSORS_PER_LAUNCH))
    kernels = []
    if precision == "fp16":
        kernels.append(
            Kernel("unscale_", "scaler", 0, SCALER_BYTES * numel, launches=launches)
        )
    if clip:
        kernels += [
            replace(k, kind="clip") for k in clip_kernels(params, implementation)
        ]
    if not OPTIMIZERS[optimizer]:
        return kernels
    if implementation != "fused":
        traced = optimizer_kernels(params, optimizer, implementation)
        return kernels + [replace(k, kind="optimizer") for k in traced]
    kernels.append(
        Kernel(
            optimizer,
            "optimizer",
            0,
            OPTIMIZERS[optimizer] * numel,
            launches=launches * (2 if optimizer == "lamb" else 1),
        )
    )
    return kernels


def layout_kernels(kernels: list[Kernel]) -> list[Kernel]:
    """The transposes a convolution on tensor cores costs when its tensors are in
    PyTorch's default NCHW layout: tensor cores take NHWC, so the library transposes
    the activations in and out (NVIDIA, "Convolutional Layers User's Guide",
    "Tensor Layouts In Memory: NCHW vs NHWC": "choose tensor layouts in memory to
    avoid transposing input and output data"). Priced as one read and one write of
    every tensor the convolution moves, in two launches; none for a convolution on
    CUDA cores (fp32), which runs NCHW as it is."""
    return [
        Kernel(f"{k.name}_nchw_transpose", "layout", 0, 2 * k.bytes, launches=2)
        for k in kernels
        if k.kind == "convolution" and k.flops and k.math not in (None, "fp32")
    ]


def price(
    trace: Trace,
    gpu: GPU,
    precision: str,
    eff: Efficiency = FITTED,
    extra: list[Kernel] = (),
) -> Estimate:
    """Price a traced step on ``gpu``: each kernel takes the longest of its compute
    time, its memory time and its launch floor; the step takes the longer of the
    GPU's sum and the CPU's dispatch time. A kernel with ``alternatives`` (a 3x3
    convolution cuDNN can run by Winograd) costs its cheapest way."""
    parts = defaultdict(float)
    by_kind = defaultdict(float)
    kernels = [*trace.kernels, *extra]
    for k in kernels:
        timed = _timed(k, gpu, eff)
        for option in k.alternatives:  # cuDNN's Winograd: the cheaper way is run
            phases = [_timed(p, gpu, eff)[0] for p in option]
            if sum(s for s, _ in phases) < sum(s for s, _ in timed):
                timed = phases
        for seconds, regime in timed:
            parts[regime] += seconds
            by_kind[k.kind] += seconds
    gpu_s = sum(parts.values())
    cpu_s = cpu_launches(kernels) * eff.cpu_us * 1e-6
    waiting = max(0.0, cpu_s - gpu_s)  # the GPU idles while Python launches kernels
    return Estimate(
        gpu.name,
        precision,
        gpu_s + waiting,
        parts["compute"],
        parts["memory"],
        parts["overhead"] + waiting,
        sum(k.flops for k in kernels),
        sum(k.bytes for k in kernels),
        sum(k.launches for k in kernels),
        dict(by_kind),
    )


def _timed(k: Kernel, gpu: GPU, eff: Efficiency) -> list[tuple[float, str]]:
    """A kernel's seconds on ``gpu``, the longest of its compute time, its memory
    time and its launch floor, and the regime that set it (one item, a list so that
    an alternative's kernels can stand in its place)."""
    compute = (
        k.flops
        / (gpu.peak(k.math) * kernel_efficiency(eff, k) * shape_efficiency(k, gpu))
        if k.flops
        else 0.0
    )
    memory = k.bytes / (gpu.bandwidth_gbs * 1e9 * eff.memory)
    floor = k.launches * eff.kernel_us * 1e-6
    regime = (
        "overhead"
        if floor >= max(compute, memory)
        else "compute"
        if compute >= memory
        else "memory"
    )
    return [(max(compute, memory, floor), regime)]


def math_efficiency(eff: Efficiency, math_: str) -> float:
    """The fraction of ``math_``'s peak a large GEMM reaches under ``eff``."""
    return {"fp32": eff.fp32, "tf32": eff.tf32}.get(math_, eff.tensor)


def kernel_efficiency(eff: Efficiency, kernel: Kernel) -> float:
    """The fraction of its arithmetic's peak ``kernel`` reaches: a fused attention
    kernel's own where ``eff`` has one (a GPU profile), a large GEMM's otherwise."""
    if kernel.kind == "attention":
        own = eff.attention_fp32 if kernel.math == "fp32" else eff.attention_tensor
        if own is not None:
            return own
    return math_efficiency(eff, kernel.math)


def shape_efficiency(kernel: Kernel, gpu: GPU) -> float:
    """What the kernel's GEMM shapes keep of a large GEMM's speed on ``gpu`` (tile
    and wave quantization, ``gemm_model``), FLOP-weighted over its GEMMs; 1 for a
    kernel with none recorded (fused attention, grouped convolutions)."""
    if not kernel.gemms or not gpu.sms:
        return 1.0
    work = [b * m * n * k for b, m, n, k in kernel.gemms]
    time = sum(
        w / gemm_efficiency(g, gpu.sms) for w, g in zip(work, kernel.gemms, strict=True)
    )
    return sum(work) / time if time else 1.0


def cpu_launches(kernels: list[Kernel]) -> int:
    """Kernels the CPU launches, each after its Python and dispatch work; a view or
    an allocation launches nothing and costs the CPU far less (under a microsecond
    in C++), so it is not counted."""
    return sum(k.launches for k in kernels)


def fp8_kept_weights(
    model: torch.nn.Module, fp8_filter: Callable[[torch.nn.Module, str], bool] | None
) -> frozenset[int]:
    """The ``id`` of each Linear weight ``fp8_filter`` leaves in bf16 (none without
    a filter)."""
    if fp8_filter is None:
        return frozenset()
    return frozenset(
        id(module.weight)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and not fp8_filter(module, name)
    )


def check_on_meta(model: torch.nn.Module, inputs) -> None:
    """A clear error for a model or input that is not on the meta device."""
    tensors = inputs if isinstance(inputs, tuple) else (inputs,)
    off_meta = [
        t.device
        for t in (*tensors, *model.parameters())
        if isinstance(t, torch.Tensor) and t.device.type != "meta"
    ]
    if off_meta:
        raise ValueError(
            f"model and inputs must be on the meta device, found "
            f"{off_meta[0]}: build them under `with torch.device('meta'):`"
        )


def check_optimizer(optimizer: str) -> None:
    """A clear error for an optimizer the estimate does not price."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}"
        )


def check_precision(gpu: GPU, precision: str) -> None:
    """A clear error for a precision that does not exist or that this GPU lacks."""
    if precision not in PRECISIONS:
        raise ValueError(
            _("unknown precision {value}; choose one of: {choices}").format(
                value=repr(precision), choices=", ".join(PRECISIONS)
            )
        )
    if not gpu.supports(precision):
        raise ValueError(gpu.refusal(precision))


def estimate_step(
    model: torch.nn.Module,
    inputs,
    gpu: str,
    precision: str,
    optimizer: str = "adam",
    loss_fn: Callable | None = None,
    efficiency: Efficiency = FITTED,
    *,
    implementation: str = "fused",
    clip: bool = False,
    channels_last: bool = False,
    compiled: bool = False,
    fp8_filter: Callable[[torch.nn.Module, str], bool] | None = None,
) -> Estimate:
    """Predict one training step's time on ``gpu`` in ``precision``.

    ``model`` and ``inputs`` (a tensor or a tuple) live on the meta device, so
    nothing is allocated and no GPU is needed. The step is the forward, the backward
    of ``loss_fn(output)`` (default: the output's float sum), GradScaler's unscale_
    for fp16, ``clip_grad_norm_`` where ``clip``, and ``optimizer``'s step (``adam``,
    ``lamb``, ``sgd_momentum``, ``sgd`` or ``none``) as ``implementation`` runs it
    (``fused``, or torch's ``foreach`` or ``loop``). Convolutions on tensor cores
    pay NCHW <-> NHWC transposes unless ``channels_last`` (``layout_kernels``) or
    ``compiled``: the model wrapped in ``torch.compile`` (its forward and backward
    fused as Inductor fuses them, ``measure.inductor_fusion``, convolutions
    channels-last as Inductor's layout optimization runs them; the loss and the
    optimizer eager).
    ``precision``: ``fp32``, ``tf32``, ``fp16``, ``bf16`` (CUDA autocast's policy)
    or ``fp8`` (bf16 autocast with fp8 Linears, as lesson 11 converts them: every
    Linear, or those ``fp8_filter(module, name)`` accepts, torchao's
    ``module_filter_fn``).

    Example: BERT-large on an A100, seq 128, batch 256 in bf16 ->
    ``estimate_step(bert, ids, "A100-SXM4-80GB", "bf16").seconds`` about 0.6 s.
    """
    device = find_gpu(gpu)
    check_precision(device, precision)
    check_optimizer(optimizer)
    check_on_meta(model, inputs)
    trace = trace_step(
        model,
        inputs,
        precision,
        loss_fn,
        dataflow=compiled,
        fp8_kept=fp8_kept_weights(model, fp8_filter),
    )
    if compiled:
        trace = inductor_fusion(trace)
    extra = step_kernels(model, precision, optimizer, implementation, clip)
    if not (channels_last or compiled):  # Inductor lays convolutions out NHWC
        extra += layout_kernels(trace.kernels)
    return price(trace, device, precision, efficiency, extra)
