"""The fused kernels a GPU runs where meta tensors take a slower path.

On the meta device ``F.scaled_dot_product_attention`` takes the math fallback (a
T x T score matrix, upcast to float32), ``nn.LSTM`` and ``nn.GRU`` run one set of
small kernels per time step, and fp8 has no matmul at all. A CUDA GPU runs a fused
attention kernel (flash or memory-efficient), cuDNN's fused RNN and
``torch._scaled_mm``. Each is an ``autograd.Function`` that records the kernel's
cost (``Kernel``) and returns empty tensors of the right shapes, so autograd records
its backward too.

Example:
    >>> recorder = KernelRecorder()
    >>> q = torch.empty(2, 4, 128, 64, device="meta", dtype=torch.bfloat16)
    >>> out = fused_attention(recorder, q, q, q, is_causal=True)
    >>> [(k.name, k.flops) for k in recorder.kernels]
    [('fused_attention', 16777216)]
"""

from __future__ import annotations

import torch

from amp_lessons.measure.kernels import Kernel, KernelRecorder, _read_bytes

ATTENTION_BACKWARD = 2.5  # backward FLOPs over forward (the scores recomputed)


def attention_flops(q_shape, keys: int, causal: bool) -> int:
    """A fused attention kernel's forward FLOPs: QK^T and AV, 2 x 2 x B*H*T*S*D for
    ``q_shape`` (..., T, D) against ``keys`` (S); a causal kernel skips the masked
    half of the scores. Backward takes ``ATTENTION_BACKWARD`` times as many."""
    *heads, t, d = q_shape
    flops = 4 * torch.Size(heads).numel() * t * keys * d
    return flops // 2 if causal else flops


class _AttentionKernel(torch.autograd.Function):
    """A fused attention kernel's cost: 4*B*H*T*S*D FLOPs forward, 2.5x that backward
    (flash attention recomputes the scores); it reads q, k, v (and the output's
    gradient) and writes the output (and q, k, v's gradients)."""

    @staticmethod
    def forward(ctx, recorder, q, k, v, causal, mask_bytes):
        ctx.recorder, ctx.mask_bytes = recorder, mask_bytes
        ctx.save_for_backward(q, k, v)
        flops = attention_flops(q.shape, k.shape[-2], causal)
        ctx.flops = flops
        moved = sum(t.numel() * t.element_size() for t in (q, k, v, q)) + mask_bytes
        out = torch.empty_like(q)
        recorder.add(
            Kernel(
                "fused_attention", "attention", flops, moved, _math(recorder, q.dtype)
            ),
            reads=_whole(q, k, v),
            writes=_whole(out),
        )
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved_tensors
        moved = ctx.mask_bytes + sum(
            t.numel() * t.element_size() for t in (q, k, v, q, grad, q, k, v)
        )
        grads = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        ctx.recorder.add(
            Kernel(
                "fused_attention_backward",
                "attention",
                int(ATTENTION_BACKWARD * ctx.flops),
                moved,
                _math(ctx.recorder, q.dtype),
            ),
            reads=_whole(q, k, v, grad),
            writes=_whole(*grads),
        )
        return None, *grads, None, None


def _whole(*tensors: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
    """Each tensor with its bytes, as ``KernelRecorder.add`` takes them."""
    return [(t, t.numel() * t.element_size()) for t in tensors]


def _math(recorder: KernelRecorder, dtype: torch.dtype) -> str:
    # float32 attention runs the memory-efficient kernel, TF32 or not. Priced at the
    # CUDA-core rate, an open question: from compute capability 8.0 that kernel does
    # its float32 products on tensor cores as three TF32 MMAs each (pytorch/pytorch,
    # aten/src/ATen/native/transformers/cuda/mem_eff_attention/gemm_kernel_utils.h:
    # DefaultGemmType<ArchTag >= 80, float> uses OpMultiplyAddFastF32), an Sm80
    # mma.sync kernel on Hopper too, whose speed there no source here gives. Priced
    # at a third of the TF32 rate the H200 record's TF32 step, already 29% too fast,
    # would come out faster still (the README states that miss). A GPU profile
    # measures this kernel's own rate (microbench.attention_rows), which replaces
    # the CUDA-core GEMM efficiency for it (estimate.kernel_efficiency).
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
    """``F.scaled_dot_product_attention`` priced as one fused kernel (see above);
    a mask, where given, is read once each way (memory-efficient attention)."""
    mask_bytes = 0 if attn_mask is None else _read_bytes(attn_mask)
    return _AttentionKernel.apply(recorder, q, k, v, is_causal, mask_bytes)


def _amax(recorder: KernelRecorder, t: torch.Tensor) -> None:
    # one fused abs-max reduction: reads the tensor, writes one float32 scale (too
    # small to follow: compiled, it fuses with the cast that reads the same tensor)
    recorder.add(
        Kernel("amax", "pointwise", 0, _read_bytes(t) + 4),
        reads=[(t, _read_bytes(t))],
    )


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


# gates per cell: LSTM i, f, g, o; GRU r, z, n; a plain RNN one
RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _rnn_kernels(recorder, spec, dtype, backward: bool) -> None:
    """cuDNN's RNN, per layer and direction: one GEMM over all time steps for the
    input's share of the gates, then one launch per step (a small GEMM with the
    hidden state and the gates' pointwise math fused). Backward runs the steps in
    reverse, then one GEMM for the inputs' gradient and one for the weights'."""
    gates, layers, directions, steps, batch, size, hidden = spec
    e = torch.empty((), dtype=dtype).element_size()
    math_ = (
        _math(recorder, dtype)
        if dtype != torch.float32
        else ("tf32" if recorder.tf32 else "fp32")
    )
    n, gh = steps * batch, gates * hidden
    for layer in range(layers):
        width = size if layer == 0 else directions * hidden
        for _ in range(directions):
            step = (2 * n * hidden * gh, (gh * hidden + n * (gh + 3 * hidden)) * e)
            if not backward:
                recorder.add(
                    Kernel(
                        "rnn_input_gemm",
                        "rnn",
                        2 * n * width * gh,
                        (n * width + gh * width + n * gh) * e,
                        math_,
                    )
                )
                recorder.add(Kernel("rnn_steps", "rnn", *step, math_, launches=steps))
                continue
            recorder.add(
                Kernel("rnn_steps_backward", "rnn", *step, math_, launches=steps)
            )
            recorder.add(
                Kernel(
                    "rnn_input_grad",
                    "rnn",
                    2 * n * gh * width,
                    (n * gh + gh * width + n * width) * e,
                    math_,
                )
            )
            recorder.add(
                Kernel(
                    "rnn_weight_grad",
                    "rnn",
                    2 * n * gh * (width + hidden),
                    (n * gh + n * (width + hidden) + gh * (width + hidden)) * e,
                    math_,
                )
            )


class FusedRNN(torch.autograd.Function):
    """``nn.LSTM``/``nn.GRU``/``nn.RNN`` as cuDNN runs them (``_rnn_kernels``).
    ``hidden`` is the list of initial states, ``params`` the flat weights."""

    @staticmethod
    def forward(ctx, recorder, spec, n_hidden, x, *tensors):
        ctx.recorder, ctx.spec, ctx.n_hidden = recorder, spec, n_hidden
        ctx.save_for_backward(x, *tensors)
        _rnn_kernels(recorder, spec, x.dtype, backward=False)
        gates, layers, directions, steps, batch, size, hidden = spec
        # cuDNN's reserve space: every step's gates, kept for backward
        ctx.reserve = x.new_empty(layers * directions * steps * batch * gates * hidden)
        out = x.new_empty(*x.shape[:-1], directions * hidden)
        states = [t.new_empty(t.shape) for t in tensors[:n_hidden]]
        return (out, *states)

    @staticmethod
    def backward(ctx, *grads):
        x, *tensors = ctx.saved_tensors
        _rnn_kernels(ctx.recorder, ctx.spec, x.dtype, backward=True)
        return None, None, None, torch.empty_like(x), *map(torch.empty_like, tensors)


def fused_rnn(
    recorder,
    mode: str,
    x,
    hidden,
    params,
    has_biases,
    num_layers,
    dropout,
    train,
    bidirectional,
    batch_first,
):
    """``aten.lstm/gru/rnn_*.input`` as one ``FusedRNN``; None where cuDNN's RNN
    does not fit (an LSTM with a projection): the caller then runs the op as is."""
    directions = 2 if bidirectional else 1
    per_cell = 2 + 2 * bool(has_biases)
    if len(params) != per_cell * num_layers * directions:
        return None
    hidden = list(hidden) if isinstance(hidden, (list, tuple)) else [hidden]
    steps, batch = (x.shape[0], 1) if x.dim() == 2 else x.shape[:2]
    if batch_first and x.dim() == 3:
        steps, batch = batch, steps
    size, width = x.shape[-1], params[1].shape[-1]
    spec = (RNN_GATES[mode], num_layers, directions, steps, batch, size, width)
    out = FusedRNN.apply(recorder, spec, len(hidden), x, *hidden, *params)
    return out if mode == "lstm" else (out[0], out[1])
