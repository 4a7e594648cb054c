"""One training step traced on the meta device: every kernel's FLOPs, bytes and dtypes.

The estimate (``amp_lessons.measure.estimate``) prices a step op by op, so it needs
what each kernel computes and moves, in the dtype it would run in under AMP, without
a GPU and without allocating a byte. Two modes do that:

* ``AutocastPolicy`` (a ``TorchFunctionMode``) applies CUDA autocast's op policy by
  hand, because ``torch.autocast`` does nothing to meta tensors (a Linear under it
  returns float32 there). Its lists are the ``torch.amp`` documentation's CUDA op
  lists (docs/source/amp.rst, "CUDA Ops that can autocast to float16", "... to
  float32", "... that promote to the widest input type"), matched by function name.
  Like autocast, it casts with ``Tensor.to`` (so autograd records the casts and the
  backward pass runs in the forward's dtypes) and casts each weight once per step.
* ``KernelRecorder`` (a ``TorchDispatchMode``, below autograd) sees every aten op of
  the forward, the backward and the loss: FLOPs from ``torch.utils.flop_counter``'s
  own formulas, bytes from the tensors each op reads and writes (views move nothing).

``F.scaled_dot_product_attention`` is priced as the fused kernel a GPU runs (flash or
memory-efficient attention: it reads q, k, v and writes the output, no T x T matrix),
not as the math fallback that meta tensors take.

Example:
    >>> model = torch.nn.Linear(1024, 1024, device="meta")
    >>> trace = trace_step(model, torch.empty(8, 1024, device="meta"), "bf16")
    >>> [k.name for k in trace.kernels if k.flops]
    ['addmm', 'mm']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

# CUDA autocast's op lists (torch.amp documentation), by Python function name.
LOWER_PRECISION_OPS = frozenset(
    {
        "__matmul__",
        "addbmm",
        "addmm",
        "addmv",
        "addr",
        "baddbmm",
        "bmm",
        "chain_matmul",
        "multi_dot",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "GRUCell",
        "linear",
        "LSTMCell",
        "matmul",
        "mm",
        "mv",
        "prelu",
        "RNNCell",
        "scaled_dot_product_attention",
    }
)
FP32_OPS = frozenset(
    {
        "__pow__",
        "__rdiv__",
        "__rpow__",
        "__rtruediv__",
        "acos",
        "asin",
        "binary_cross_entropy_with_logits",
        "cosh",
        "cosine_embedding_loss",
        "cdist",
        "cosine_similarity",
        "cross_entropy",
        "cumprod",
        "cumsum",
        "dist",
        "erfinv",
        "exp",
        "expm1",
        "group_norm",
        "hinge_embedding_loss",
        "kl_div",
        "l1_loss",
        "layer_norm",
        "log",
        "log_softmax",
        "log10",
        "log1p",
        "log2",
        "margin_ranking_loss",
        "mse_loss",
        "multilabel_margin_loss",
        "multi_margin_loss",
        "nll_loss",
        "norm",
        "normalize",
        "pdist",
        "poisson_nll_loss",
        "pow",
        "prod",
        "reciprocal",
        "rsqrt",
        "sinh",
        "smooth_l1_loss",
        "soft_margin_loss",
        "softmax",
        "softmin",
        "softplus",
        "sum",
        "renorm",
        "tan",
        "triplet_margin_loss",
    }
)
# Among them, ops CUDA autocast runs in fp32 by passing dtype=float32 rather than
# casting the input (its fp32_set_opt_dtype policy): a softmax reads fp16 and writes
# fp32 in one kernel (found by comparing with CUDA's own autocast, kernel by kernel).
SET_OPT_DTYPE_OPS = frozenset(
    {"softmax", "log_softmax", "sum", "prod", "cumsum", "cumprod"}
)
PROMOTE_OPS = frozenset(
    {
        "addcdiv",
        "addcmul",
        "atan2",
        "bilinear",
        "cross",
        "dot",
        "grid_sample",
        "index_put",
        "scatter_add",
        "tensordot",
    }
)

LOW_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}
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


@dataclass(frozen=True)
class Trace:
    """What one step runs: its kernels, and every aten op dispatched (views and
    allocations too), which is what the CPU spends its time on in eager mode."""

    kernels: list[Kernel]
    dispatched_ops: int


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


def _tensors(tree) -> list[torch.Tensor]:
    return [
        t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)
    ]


class KernelRecorder(TorchDispatchMode):
    """Records every aten op that launches a kernel, as a ``Kernel``.

    ``math`` of an op with FLOPs is its inputs' dtype (``"tf32"`` for float32 when
    ``tf32`` is set).
    """

    def __init__(self, tf32: bool = False):
        super().__init__()
        self.kernels: list[Kernel] = []
        self.dispatched_ops = 0
        self.tf32 = tf32

    def add(self, kernel: Kernel) -> None:
        self.kernels.append(kernel)

    @staticmethod
    def read_bytes(name: str, inputs: list[torch.Tensor], written: int) -> int:
        """The bytes an op reads: each input once, nothing for an op that only
        writes, the source alone for a copy, and for a gather its indices and the
        rows they pick (as many as it writes)."""
        if name in _WRITE_ONLY_OPS:
            return 0
        if name == "copy_":  # copy_(destination, source): the destination is written
            inputs = inputs[1:]
        if name in _GATHER_OPS:
            indices = [t for t in inputs if not t.is_floating_point()]
            return written + sum(_read_bytes(t) for t in indices)
        return sum(_read_bytes(t) for t in inputs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.dispatched_ops += 1
        name = func._overloadpacket.__name__
        returns = func._schema.returns
        is_view = bool(returns) and all(
            r.alias_info is not None and not r.alias_info.is_write for r in returns
        )
        if is_view or name in _FREE_OPS:
            return out
        packet = func._overloadpacket
        flops = (
            int(flop_registry[packet](*args, **kwargs, out_val=out))
            if packet in flop_registry
            else 0
        )
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        math = None
        if flops:
            dtype = inputs[0].dtype
            math = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(
                dtype, "tf32" if self.tf32 else "fp32"
            )
        written = sum(t.numel() * t.element_size() for t in outputs)
        read = self.read_bytes(name, inputs, written)
        self.add(
            Kernel(
                name,
                kind_of(name, bool(flops)),
                flops,
                read + written,
                math,
                dtype=outputs[0].dtype if outputs else None,
            )
        )
        return out


class AutocastPolicy(TorchFunctionMode):
    """CUDA autocast's op policy applied by hand, for tensors autocast ignores (meta).

    ``low`` is the dtype of the lower-precision ops (float16 or bfloat16). Each
    weight (a leaf that requires grad) is cast once, as autocast's cast cache does.
    With ``low=None`` (fp32, tf32) nothing is cast: the mode only prices attention
    as the fused kernel a GPU runs, in every precision alike.
    """

    def __init__(
        self,
        low: torch.dtype | None,
        recorder: KernelRecorder | None = None,
        fp8_linears: bool = False,
    ):
        super().__init__()
        self.low, self.recorder, self.fp8_linears = low, recorder, fp8_linears
        self.cache: dict[int, torch.Tensor] = {}

    def cast(self, t, dtype: torch.dtype):
        if not (
            isinstance(t, torch.Tensor)
            and t.is_floating_point()
            and t.dtype not in (dtype, torch.float64)
        ):
            return t
        if t.is_leaf and t.requires_grad:  # a weight: cast once per step
            if id(t) not in self.cache:
                self.cache[id(t)] = t.to(dtype)
            return self.cache[id(t)]
        return t.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if self.low is None:
            if name == "scaled_dot_product_attention" and self.recorder is not None:
                return fused_attention(self.recorder, *args, **kwargs)
            return func(*args, **kwargs)
        if name == "linear" and self.fp8_linears and self.recorder is not None:
            # the fp32 master weight is cast to fp8 directly; the input and bias as
            # autocast casts them
            x, weight, bias = (*args, *kwargs.values(), None)[:3]
            return Fp8Linear.apply(
                self.recorder, self.cast(x, self.low), weight, self.cast(bias, self.low)
            )
        if name in LOWER_PRECISION_OPS:
            args, kwargs = torch.utils._pytree.tree_map(
                lambda t: self.cast(t, self.low), (args, kwargs)
            )
            if name == "scaled_dot_product_attention" and self.recorder is not None:
                return fused_attention(self.recorder, *args, **kwargs)
        elif name in SET_OPT_DTYPE_OPS:
            tensors = _tensors((args, kwargs))
            if (
                tensors
                and tensors[0].dtype in (torch.float16, torch.bfloat16)
                and kwargs.get("dtype") is None
            ):
                kwargs = {**kwargs, "dtype": torch.float32}
        elif name in FP32_OPS:
            args, kwargs = torch.utils._pytree.tree_map(
                lambda t: self.cast(t, torch.float32), (args, kwargs)
            )
        elif name in PROMOTE_OPS:
            floats = [
                t.dtype for t in _tensors((args, kwargs)) if t.is_floating_point()
            ]
            if floats:
                widest = max(floats, key=lambda d: torch.finfo(d).bits)
                args, kwargs = torch.utils._pytree.tree_map(
                    lambda t: self.cast(t, widest), (args, kwargs)
                )
        return func(*args, **kwargs)


class _AttentionKernel(torch.autograd.Function):
    """A fused attention kernel's cost: 4*B*H*T*S*D FLOPs forward, 2.5x that backward
    (flash attention recomputes the scores); it reads q, k, v (and the output's
    gradient) and writes the output (and q, k, v's gradients)."""

    @staticmethod
    def forward(ctx, recorder, q, k, v, causal):
        ctx.recorder = recorder
        ctx.save_for_backward(q, k, v)
        flops = 4 * q.shape[:-2].numel() * q.shape[-2] * k.shape[-2] * q.shape[-1]
        if causal:  # flash attention skips the masked half of the scores
            flops //= 2
        ctx.flops = flops
        moved = sum(t.numel() * t.element_size() for t in (q, k, v, q))
        recorder.add(
            Kernel(
                "fused_attention", "attention", flops, moved, _math(recorder, q.dtype)
            )
        )
        return torch.empty_like(q)

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        moved = sum(t.numel() * t.element_size() for t in (q, k, v, q, grad, q, k, v))
        ctx.recorder.add(
            Kernel(
                "fused_attention_backward",
                "attention",
                int(2.5 * ctx.flops),
                moved,
                _math(ctx.recorder, q.dtype),
            )
        )
        grads = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        return None, *grads, None


def _math(recorder: KernelRecorder, dtype: torch.dtype) -> str:
    # float32 attention runs the memory-efficient kernel on CUDA cores, TF32 or not
    # (priced at the TF32 rate, the H200 run's GPT step came out 1.3x too fast)
    return {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, "fp32")


def fused_attention(
    recorder: KernelRecorder,
    q,
    k,
    v,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    """``F.scaled_dot_product_attention`` priced as one fused kernel (see above)."""
    return _AttentionKernel.apply(recorder, q, k, v, is_causal)


def _amax(recorder: KernelRecorder, t: torch.Tensor) -> None:
    # one fused abs-max reduction: reads the tensor, writes one float32 scale
    recorder.add(Kernel("amax", "pointwise", 0, _read_bytes(t) + 4))


def _fp8_matmul(
    recorder: KernelRecorder, m: int, n: int, k: int, out_bytes: int
) -> None:
    # torch._scaled_mm: both operands at 1 byte an element, the result in 16 or 32 bits
    recorder.add(
        Kernel(
            "_scaled_mm",
            "matmul",
            2 * m * n * k,
            m * k + n * k + m * n * out_bytes,
            "fp8",
        )
    )


class Fp8Linear(torch.autograd.Function):
    """A Linear as lesson 11's fp8 training runs it: the input, the fp32 master weight
    and (in backward) the output's gradient each get an amax and a cast to fp8, then
    the three matmuls run on fp8 tensor cores. Meta tensors have no fp8 matmul, so
    the matmuls are recorded by their shapes (``_fp8_matmul``)."""

    @staticmethod
    def forward(ctx, recorder, x, weight, bias=None):
        ctx.recorder = recorder
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        m, k, n = x.shape[:-1].numel(), x.shape[-1], weight.shape[0]
        with torch.no_grad():
            for t in (x, weight):
                _amax(recorder, t)
                t.to(torch.float8_e4m3fn)
            _fp8_matmul(recorder, m, n, k, x.element_size())
            out = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=x.device)
            if bias is not None:
                out = out + bias
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        recorder = ctx.recorder
        m, k, n = x.shape[:-1].numel(), x.shape[-1], weight.shape[0]
        _amax(recorder, grad)
        grad.to(torch.float8_e5m2)
        _fp8_matmul(recorder, m, k, n, x.element_size())  # grad_x = grad @ weight
        _fp8_matmul(recorder, n, k, m, weight.element_size())  # grad_w = grad^T @ x
        grad_b = grad.flatten(0, -2).sum(0) if ctx.has_bias else None
        return None, torch.empty_like(x), torch.empty_like(weight), grad_b


def trace_step(
    model: torch.nn.Module,
    inputs,
    precision: str,
    loss_fn: Callable | None = None,
    autocast: bool = True,
) -> Trace:
    """The kernels of one forward and backward of ``model(*inputs)`` (no optimizer).

    ``precision`` is ``fp32``, ``tf32``, ``fp16``, ``bf16`` or ``fp8`` (bf16 autocast
    with fp8 Linears). The loss is ``loss_fn(output)`` computed under the policy, as
    it would be under autocast, or the output's float sum. ``autocast=False`` runs
    the model in its own dtypes (a model already in fp16, as apex's O2 makes it).
    """
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    recorder = KernelRecorder(tf32=precision == "tf32")
    low = LOW_DTYPES.get(precision) if autocast else None
    with recorder:
        with AutocastPolicy(low, recorder, fp8_linears=precision == "fp8"):
            out = model(*inputs)
            loss = loss_fn(out) if loss_fn else out.float().sum()
        loss.backward()
    for p in model.parameters():
        p.grad = None
    return Trace(recorder.kernels, recorder.dispatched_ops)
