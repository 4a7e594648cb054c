"""The kernels of a traced step: what each aten op computes and moves.

``KernelRecorder`` (a ``TorchDispatchMode``, below autograd) sees every aten op of a
step's forward, backward and loss on the meta device and records each one that
launches a kernel as a ``Kernel``: FLOPs from ``torch.utils.flop_counter``'s formulas
(with the convolution backward's corrected, see ``conv_backward_flops``), bytes from
the tensors it reads and writes (views move nothing; an in-place op writes its
destination).

Example:
    >>> x, w = torch.empty(8, 1024, device="meta"), torch.empty(1024, 64, device="meta")
    >>> with KernelRecorder() as recorder:
    ...     y = x @ w
    >>> [(k.name, k.flops) for k in recorder.kernels]
    [('mm', 1048576)]
"""

from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass, field, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import conv_flop_count, flop_registry

from amp_lessons.measure import meta_outputs
from amp_lessons.measure.gemm_model import (
    conv_gemms,
    winograd_eligible,
    winograd_phases,
)

aten = torch.ops.aten

# Ops that only write their output (reading no input), and ops that read only the
# rows their indices pick (an embedding reads a batch's rows, not the whole table)
_WRITE_ONLY_OPS = frozenset(
    {
        "zeros_like",
        "ones_like",
        "full_like",
        "zeros",
        "ones",
        "full",
        "new_zeros",
        "new_ones",
        "new_full",
        "zero_",
        "fill_",
        "arange",
    }
)
_GATHER_OPS = frozenset({"embedding", "index_select", "gather", "index"})
_FREE_OPS = frozenset(
    {
        "_unsafe_view",
        "lift_fresh",
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "scalar_tensor",
        "_local_scalar_dense",
        "_record_function_enter_new",  # the profiler's markers: no kernel
        "_record_function_exit",
    }
)


@dataclass(frozen=True)
class Kernel:
    """One kernel of the step. ``math`` is the arithmetic it runs on: ``"fp32"``,
    ``"tf32"``, ``"fp16"``, ``"bf16"`` or ``"fp8"`` for matmuls, convolutions and
    attention (the ops with FLOPs); None for the rest, which only move bytes."""

    name: str
    kind: str
    flops: int
    bytes: int
    math: str | None = None
    launches: int = 1  # a foreach optimizer step launches one kernel per chunk
    dtype: torch.dtype | None = None  # its (first) output's
    # the GEMMs it runs, (batch, m, n, k) each, for the tile and wave model
    # (``gemm_model``); empty for a kernel that is not a plain GEMM
    gemms: tuple[tuple[int, int, int, int], ...] = ()
    # other ways the library may run it (cuDNN's Winograd for a 3x3 convolution),
    # each a sequence of kernels; ``estimate.price`` takes the cheapest
    alternatives: tuple[tuple[Kernel, ...], ...] = ()
    # the part of the step it ran in (``trace_step`` sets it): ``"forward"`` and
    # ``"backward"`` for the model's own, ``"loss"`` and ``"loss_backward"`` for the
    # loss's; ``torch.compile(model)`` compiles the model's (``compiled``)
    region: str = field(default="", compare=False)
    # where the trace records dataflow (``KernelRecorder(dataflow=True)``): each
    # tensor it reads and writes, as (storage, view, bytes); a storage is named by
    # a number unique within its trace, a view by its offset, shape and strides
    reads: tuple[tuple[int, tuple, int], ...] = field(
        default=(), compare=False, repr=False
    )
    writes: tuple[tuple[int, tuple, int], ...] = field(
        default=(), compare=False, repr=False
    )


@dataclass(frozen=True)
class Trace:
    """What one step runs: its kernels, and every aten op dispatched (views and
    allocations too), which is what the CPU spends its time on in eager mode; with
    dataflow, each storage's size in bytes, by its number."""

    kernels: list[Kernel]
    dispatched_ops: int
    storage_bytes: dict[int, int] = field(default_factory=dict)


def kind_of(name: str, has_flops: bool) -> str:
    """The op kind a breakdown groups by: ``kind_of("addmm", True)`` -> ``"matmul"``."""
    if "attention" in name:
        return "attention"
    if "conv" in name:
        return "convolution"
    if has_flops:
        return "matmul"
    for part, kind in (
        ("_to_copy", "cast"),
        ("copy", "cast"),
        ("norm", "norm"),
        ("softmax", "softmax"),
        ("loss", "loss"),
        ("embedding", "index"),
        ("index", "index"),
        ("gather", "index"),
        ("scatter", "index"),
    ):
        if part in name:
            return kind
    return "pointwise"


def _read_bytes(t: torch.Tensor) -> int:
    # an expanded tensor (stride 0) is read once per distinct element
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        n *= size if stride else 1
    return n * t.element_size()


def _written(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _tensors(tree) -> list[torch.Tensor]:
    return [
        t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)
    ]


class KernelRecorder(TorchDispatchMode):
    """Records every aten op that launches a kernel, as a ``Kernel``.

    ``math`` of an op with FLOPs is its inputs' dtype (``"tf32"`` for float32 when
    ``tf32`` is set). Each kernel is tagged with ``region`` (set it as the step goes
    on); with ``dataflow``, with the tensors it reads and writes too.
    """

    def __init__(self, tf32: bool = False, dataflow: bool = False):
        super().__init__()
        self.kernels: list[Kernel] = []
        self.dispatched_ops = 0
        self.tf32 = tf32
        self.dataflow = dataflow
        self.region = ""
        # each live storage's number; a freed storage's address may be reused by a
        # later one, which gets a new number (holding the tensors instead would
        # change the step: autograd copies a gradient something else holds)
        self._numbers: dict[int, int] = {}
        self._next_number = itertools.count()
        self.storage_bytes: dict[int, int] = {}  # each numbered storage's size

    def add(self, kernel: Kernel, reads=(), writes=()) -> None:
        """Record ``kernel``, which reads and writes the (tensor, bytes) pairs
        ``reads`` and ``writes`` (kept with ``dataflow`` only)."""
        if self.dataflow:
            kernel = replace(
                kernel, reads=self._accesses(reads), writes=self._accesses(writes)
            )
        self.kernels.append(replace(kernel, region=self.region))

    def _accesses(self, pairs) -> tuple[tuple[int, tuple, int], ...]:
        return tuple(
            (
                self._storage_number(t),
                (t.storage_offset(), tuple(t.shape), t.stride()),
                size,
            )
            for t, size in pairs
            if t is not None
        )

    def _storage_number(self, t: torch.Tensor) -> int:
        storage = t.untyped_storage()
        address = storage._cdata
        if address not in self._numbers:
            number = self._numbers[address] = next(self._next_number)
            self.storage_bytes[number] = storage.nbytes()
            weakref.finalize(storage, self._numbers.pop, address, None)
        return self._numbers[address]

    @staticmethod
    def reads(
        name: str, inputs: list[torch.Tensor], written: int
    ) -> list[tuple[torch.Tensor | None, int]]:
        """What an op reads, as (tensor, bytes): each input once, nothing for an op
        that only writes, the source alone for a copy, and for a gather its indices
        and the rows they pick (as many as it writes; None where the table is not
        a float tensor)."""
        if name in _WRITE_ONLY_OPS:
            return []
        if name == "copy_":  # copy_(destination, source): the destination is written
            inputs = inputs[1:]
        if name in _GATHER_OPS:
            indices = [t for t in inputs if not t.is_floating_point()]
            table = next((t for t in inputs if t.is_floating_point()), None)
            return [(t, _read_bytes(t)) for t in indices] + [(table, written)]
        return [(t, _read_bytes(t)) for t in inputs]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = meta_outputs.run(func, args, kwargs)  # a repeated call: from a memo
        self.dispatched_ops += 1
        name = func._overloadpacket.__name__
        returns = func._schema.returns
        is_view = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns
        )
        if is_view or name in _FREE_OPS:
            return out
        packet = func._overloadpacket
        formula = FLOP_FORMULAS.get(packet)
        flops = int(formula(*args, **kwargs, out_val=out)) if formula else 0
        inputs = _tensors((args, kwargs))
        math = None
        if flops:
            dtype = inputs[0].dtype
            math = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(
                dtype, "tf32" if self.tf32 else "fp32"
            )
        written = written_bytes(func, args, kwargs, out)
        reads = self.reads(name, inputs, written)
        mutated = mutated_tensors(func, args, kwargs)
        outputs = _tensors(out) or mutated
        self.add(
            Kernel(
                name,
                kind_of(name, bool(flops)),
                flops,
                sum(size for _, size in reads) + written,
                math,
                launches=_foreach_launches(name, args),
                dtype=outputs[0].dtype if outputs else None,
                gemms=gemm_shapes(name, args, out) if flops else (),
                alternatives=winograd_alternatives(name, args, out, math)
                if flops
                else (),
            ),
            reads=reads,
            writes=[(t, _written(t)) for t in (*_tensors(out), *mutated)],
        )
        return out


def gemm_shapes(name: str, args, out) -> tuple[tuple[int, int, int, int], ...]:
    """The (batch, m, n, k) GEMMs a matmul or convolution runs:
    ``mm(a, b)`` with a of m x k and b of k x n is ``((1, m, n, k),)``."""
    if name in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = args[-2:] if name in ("mm", "bmm") else args[1:3]
        if a.dim() == 2:
            return ((1, a.shape[0], b.shape[1], a.shape[1]),)
        return ((a.shape[0], a.shape[1], b.shape[2], a.shape[2]),)
    if name == "convolution":
        x, w = args[0], args[1]
        return conv_gemms(x.shape, w.shape, out.shape, args[8], args[6], (1, 0, 0))
    if name == "convolution_backward":
        grad_out, x, w = args[0], args[1], args[2]
        mask = args[10]
        return conv_gemms(
            x.shape, w.shape, grad_out.shape, args[9], args[7], (0, *mask[:2])
        )
    return ()


def winograd_alternatives(name: str, args, out, math_: str | None):
    """A 3x3 convolution's Winograd alternatives (``gemm_model.winograd_phases``):
    for the forward, its Winograd pass; for the backward, the data gradient, the
    filter gradient or both by Winograd, the other pass run directly (its implicit
    GEMM, the bytes it reads and writes). Empty where cuDNN has no Winograd."""
    if name == "convolution":
        x, w = args[0], args[1]
        stride, dilation, transposed, groups = args[3], args[5], args[6], args[8]
        if not winograd_eligible(w.shape, stride, dilation, groups, transposed):
            return ()
        phases = winograd_phases(x.shape, out.shape, w.shape[1], w.shape[0])
        return (_phase_kernels(phases, x.element_size(), math_),)
    if name != "convolution_backward":
        return ()
    grad_out, x, w = args[0], args[1], args[2]
    stride, dilation, transposed, groups, mask = (args[i] for i in (4, 6, 7, 9, 10))
    if not winograd_eligible(w.shape, stride, dilation, groups, transposed):
        return ()
    size = grad_out.element_size()
    c_out, c_in = w.shape[0], w.shape[1]
    moved = (x.numel() + grad_out.numel() + w.numel()) * size  # each pass reads
    # two of the three tensors and writes the third
    gemms = conv_gemms(x.shape, w.shape, grad_out.shape, groups, transposed)
    direct = {  # the pass run as an implicit GEMM: its FLOPs and the bytes it moves
        name: Kernel(name, "convolution", 2 * math.prod(g), moved, math_, gemms=(g,))
        for name, g in zip(("dgrad", "wgrad"), gemms[1:], strict=True)
    }
    winograd = {
        "dgrad": _phase_kernels(
            winograd_phases(grad_out.shape, x.shape, c_out, c_in), size, math_
        ),
        "wgrad": _phase_kernels(
            winograd_phases(x.shape, grad_out.shape, c_in, c_out, wgrad=True),
            size,
            math_,
        ),
    }
    wanted = [p for p, on in zip(("dgrad", "wgrad"), mask[:2], strict=True) if on]
    options = []
    for chosen in itertools.product((False, True), repeat=len(wanted)):
        if any(chosen):
            options.append(
                tuple(
                    k
                    for p, by_winograd in zip(wanted, chosen, strict=True)
                    for k in (winograd[p] if by_winograd else (direct[p],))
                )
            )
    return tuple(options)


def _phase_kernels(phases, size: int, math_: str | None) -> tuple[Kernel, ...]:
    return tuple(
        Kernel(
            name,
            "convolution",
            flops,
            elements * size,
            math_ if flops else None,
            gemms=gemms,
        )
        for name, flops, elements, gemms in phases
    )


def mutated_tensors(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an op writes in place (``Tensor(a!)`` in its schema): a fused
    AdamW step writes its parameters, both moments and nothing it returns."""
    mutated = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        mutated += _tensors(value)
    return mutated


def written_bytes(func, args, kwargs, out) -> int:
    """Bytes an op writes: its fresh outputs and every tensor it mutates, once."""
    outs = out if isinstance(out, tuple) else (out,)
    fresh = [
        t
        for r, item in zip(func._schema.returns, outs, strict=False)
        if r.alias_info is None
        for t in _tensors(item)
    ]
    seen, total = set(), 0
    for t in (*fresh, *mutated_tensors(func, args, kwargs)):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def _foreach_launches(name: str, args) -> int:
    """Launches of a multi-tensor (foreach or fused) kernel: CUDA's
    multi_tensor_apply takes at most so many tensors per launch, fewer the more
    lists it walks at once, and at most 320 blocks of 65,536 elements."""
    if not name.startswith(("_foreach", "_fused")):
        return 1
    lists = [a for a in args if isinstance(a, (list, tuple)) and _tensors(a)]
    if not lists:
        return 1
    tensors = lists[0]
    per_launch = MAX_TENSORS_PER_LAUNCH.get(len(lists), 30)
    numel = sum(t.numel() for t in tensors)
    return max(
        math.ceil(len(tensors) / per_launch), math.ceil(numel / (320 * 65536)), 1
    )


def conv_backward_flops(
    grad_out,
    x,
    w,
    bias,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
    out_val=None,
    **kwargs,
) -> int:
    """A convolution's backward: the input's gradient costs what the forward did,
    and so does the weight's. torch.utils.flop_counter (2.13) counts the weight's
    gradient as a dense convolution over all channels, ignoring ``groups``: 33x the
    forward at groups=32. Example: a depthwise 3x3 over 8 x 64 x 56 x 56 costs
    2 * 8*64*56*56 * 9 = 28.9 MFLOP forward, and twice that backward."""
    forward = conv_flop_count(
        list(x.shape), list(w.shape), list(grad_out.shape), transposed
    )
    return forward * (int(output_mask[0]) + int(output_mask[1]))


# depth (tensor lists walked at once) -> tensors per launch: depth_to_max_tensors in
# PyTorch's aten/src/ATen/native/cuda/MultiTensorApply.cuh
MAX_TENSORS_PER_LAUNCH = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}
# torch's own formulas, with the convolution backward's corrected
FLOP_FORMULAS = {**flop_registry, aten.convolution_backward: conv_backward_flops}
