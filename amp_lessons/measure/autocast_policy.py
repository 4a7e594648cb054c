"""CUDA autocast's op policy, applied where CUDA applies it, to tensors it ignores.

``torch.autocast`` does nothing to meta tensors (a Linear under it returns float32
there), so the estimate applies CUDA autocast's policy itself. It does so at the
same level as CUDA: on aten ops, above autograd. ``AutocastPolicy`` is a dispatch
mode at PyTorch's pre-dispatch key, which sits just below the Autocast key and
above Autograd: it sees ``aten.linear``, ``aten.conv2d`` and
``aten.scaled_dot_product_attention`` before they are decomposed, however deep in
Python they are called (inside ``F.multi_head_attention_forward`` too), and its
casts are recorded by autograd, so
the backward pass runs in the forward's dtypes and keeps the low-precision copies,
as under CUDA's autocast.

The op lists are CUDA's own: ``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``,
``AT_FORALL_FP32_SET_OPT_DTYPE``, ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` and
``AT_FORALL_PROMOTE`` in PyTorch's aten/src/ATen/autocast_mode.h (registered for
the Autocast key by autocast_mode.cpp), plus ``cudnn_convolution`` and cuDNN's RNN
(aten/src/ATen/cudnn/AutocastRNN.cpp). An op on no list runs in its inputs' dtypes;
if it is a composite op (``cross_entropy_loss``), its parts meet the policy, as
they meet autocast.

Example:
    >>> x = torch.randn(4, 8)
    >>> with AutocastPolicy(torch.bfloat16):
    ...     y = torch.nn.functional.linear(x, torch.randn(2, 8))
    >>> y.dtype
    torch.bfloat16
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.schema_check_mode import SchemaCheckMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from amp_lessons.measure.fused_kernels import Fp8Linear, fused_attention, fused_rnn
from amp_lessons.measure.kernels import KernelRecorder, _tensors

# "name" is the op's default overload, "name.overload" another one
LOWER_PRECISION_OPS = frozenset(
    "_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc "
    "conv_transpose1d conv_transpose2d.input conv_transpose3d.input convolution "
    "prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm "
    "bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell "
    "lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
    "_scaled_dot_product_flash_attention scaled_dot_product_attention "
    "cudnn_convolution cudnn_convolution_transpose".split()
)
FP32_OPS = frozenset(
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan "
    "pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar softplus layer_norm "
    "native_layer_norm group_norm frobenius_norm.dim nuclear_norm nuclear_norm.dim "
    "cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d "
    "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss "
    "margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
    "multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm "
    "logsumexp upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d "
    "_upsample_nearest_exact2d upsample_nearest3d _upsample_nearest_exact3d "
    "upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa "
    "upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa".split()
)
# run in fp32 by passing dtype=float32 (if the caller gave none), not by a cast
SET_OPT_DTYPE_OPS = frozenset(
    "prod prod.dim_int prod.dim_Dimname softmax.int softmax.Dimname log_softmax.int "
    "log_softmax.Dimname cumprod cumprod.dimname cumsum cumsum.dimname "
    "linalg_vector_norm linalg_matrix_norm linalg_matrix_norm.str_ord sum "
    "sum.dim_IntList sum.dim_DimnameList".split()
)
# norm without a dtype is redispatched to the overload that takes one, in fp32
APPEND_DTYPE_OPS = {
    "norm.Scalar": "ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "ScalarOpt_dim_dtype",
}
PROMOTE_OPS = frozenset(
    "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot "
    "scatter_add".split()
)
RNN_OPS = {
    "lstm.input": "lstm",
    "gru.input": "gru",
    "rnn_tanh.input": "rnn_tanh",
    "rnn_relu.input": "rnn_relu",
}
BANNED = "binary_cross_entropy"  # CUDA autocast refuses it (see lesson 04)

LOW_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


def op_name(func) -> str:
    """``aten.pow.Tensor_Scalar`` -> ``"pow.Tensor_Scalar"``; a default overload
    by its bare name (``"mm"``)."""
    name, overload = func._overloadpacket.__name__, func._overloadname
    return name if overload == "default" else f"{name}.{overload}"


def _eligible(t) -> bool:
    # autocast_mode.h's is_eligible: a defined floating tensor, not double
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.dtype != torch.float64
    )


class AutocastPolicy(SchemaCheckMode):
    """CUDA autocast's policy for ``low`` (float16 or bfloat16) as a pre-dispatch
    mode; ``low=None`` (fp32, tf32) casts nothing. With a ``recorder``, attention
    and RNNs are priced as the fused kernels a GPU runs, and ``fp8_linears`` runs
    Linears as lesson 11's fp8 training does, but for those whose weight is in
    ``fp8_kept`` (by ``id``: torchao's filter keeps a network's ends in bf16).

    Each fp32 weight (a leaf that requires grad, not a view) is cast once per
    forward, as autocast's cast cache does. (The class derives from
    ``SchemaCheckMode`` only because PyTorch lets three kinds of mode sit at the
    pre-dispatch key; none of that class's checks run.)
    """

    def __init__(
        self,
        low: torch.dtype | None,
        recorder: KernelRecorder | None = None,
        fp8_linears: bool = False,
        fp8_kept: frozenset[int] = frozenset(),
    ):
        TorchDispatchMode.__init__(self, _dispatch_key=torch._C.DispatchKey.PreDispatch)
        self.low, self.recorder, self.fp8_linears = low, recorder, fp8_linears
        self.fp8_kept = fp8_kept
        self.cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._stack = ExitStack()

    def __enter__(self):
        self._stack.enter_context(enable_python_dispatcher())
        self._stack.enter_context(torch._C._EnablePreDispatch())
        return TorchDispatchMode.__enter__(self)

    def __exit__(self, *exc):
        try:
            return TorchDispatchMode.__exit__(self, *exc)
        finally:
            self._stack.close()
            self.cache.clear()

    def cast(self, t, dtype: torch.dtype):
        """autocast_mode.cpp's cached_cast."""
        if not _eligible(t) or t.dtype == dtype:
            return t
        if (
            dtype == self.low
            and t.dtype == torch.float32
            and t.requires_grad
            and t.is_leaf
            and not t._is_view()
        ):
            if id(t) not in self.cache:
                self.cache[id(t)] = (t, t.to(dtype))
            return self.cache[id(t)][1]
        return t.to(dtype)

    def cast_all(self, tree, dtype: torch.dtype):
        return tree_map(lambda t: self.cast(t, dtype), tree)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        fused = self.fused(name, args, kwargs)
        if fused is not NotImplemented:
            return fused
        if self.low is None:
            return self.run(func, args, kwargs)
        if name in LOWER_PRECISION_OPS:
            return _call(func, *self.cast_all((args, kwargs), self.low))
        if name in FP32_OPS:
            return _call(func, *self.cast_all((args, kwargs), torch.float32))
        if name in SET_OPT_DTYPE_OPS:
            if _eligible(args[0]):
                args, kwargs = _set_dtype(func, args, kwargs)
            return _call(func, args, kwargs)
        if name in APPEND_DTYPE_OPS:
            overload = getattr(func._overloadpacket, APPEND_DTYPE_OPS[name])
            dtype = torch.float32 if _eligible(args[0]) else args[0].dtype
            return _call(overload, args, {**kwargs, "dtype": dtype})
        if name in PROMOTE_OPS:
            floats = [t.dtype for t in _tensors((args, kwargs)) if _eligible(t)]
            widest = torch.float32 if torch.float32 in floats else self.low
            return _call(func, *self.cast_all((args, kwargs), widest))
        if name == BANNED:
            raise RuntimeError(
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are "
                "unsafe to autocast: use binary_cross_entropy_with_logits"
            )
        return self.run(func, args, kwargs)

    def fused(self, name: str, args, kwargs):
        """The ops priced as fused kernels (attention, RNNs, fp8 Linears), cast as
        CUDA's autocast casts them; NotImplemented for the rest."""
        if self.recorder is None:
            return NotImplemented
        low = self.low
        if name == "scaled_dot_product_attention":
            if low is not None:
                args, kwargs = self.cast_all((args, kwargs), low)
            return fused_attention(self.recorder, *args, **kwargs)
        if name in RNN_OPS:
            if low is not None:
                args, kwargs = self.cast_all((args, kwargs), low)
            out = fused_rnn(self.recorder, RNN_OPS[name], *args, **kwargs)
            return NotImplemented if out is None else out
        if name == "linear" and self.fp8_linears and low is not None:
            # the fp32 master weight is cast to fp8 directly; the input and bias
            # as autocast casts them
            x, weight, bias = (*args, *kwargs.values(), None)[:3]
            if id(weight) in self.fp8_kept:  # a Linear left in bf16
                return NotImplemented
            return Fp8Linear.apply(
                self.recorder, self.cast(x, low), weight, self.cast(bias, low)
            )
        return NotImplemented

    def run(self, func, args, kwargs):
        """An op on no list: a composite op is decomposed with the policy still on
        (its parts may be on a list, as ``cross_entropy_loss``'s log_softmax and
        nll_loss are), any other runs as it is."""
        if not _is_composite(func):
            return func(*args, **kwargs)
        TorchDispatchMode.__enter__(self)
        try:
            return func.decompose(*args, **kwargs)
        finally:
            TorchDispatchMode.__exit__(self, None, None, None)


def _is_composite(func) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _COMPOSITE)


def _call(func, args, kwargs):
    """Run an op below the policy, as autocast's wrappers redispatch: a composite
    op through its decomposition (called from here, the op itself would skip the
    autograd kernel its parts have)."""
    if _is_composite(func):
        return func.decompose(*args, **kwargs)
    return func(*args, **kwargs)


def _set_dtype(func, args, kwargs):
    """``dtype=torch.float32`` unless the caller gave a dtype."""
    names = [a.name for a in func._schema.arguments]
    i = names.index("dtype")
    if i < len(args):
        if args[i] is None:
            args = (*args[:i], torch.float32, *args[i + 1 :])
        return args, kwargs
    if kwargs.get("dtype") is None:
        kwargs = {**kwargs, "dtype": torch.float32}
    return args, kwargs
