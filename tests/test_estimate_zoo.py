"""The estimate prices a model the same whether it is built from stock modules or
from functional calls: CUDA autocast's policy reaches every op, however deep, and the
fused kernels (attention, cuDNN's RNN) are priced for both.

Each twin below computes what its stock module computes, with the module's own
parameters and layout, through ``torch.nn.functional`` (or ``torch.lstm``/
``torch.gru``, the functions ``nn.LSTM``/``nn.GRU`` call): the same FLOPs in the
same dtypes, and the same estimate within 2%. (A twin in another layout, such as
batch-first attention without nn.MultiheadAttention's sequence-first copies, has
the same FLOPs in the same dtypes but moves fewer bytes, and is estimated faster.)
"""

from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.measure.autocast_policy import AutocastPolicy
from amp_lessons.measure.estimate import estimate_step
from amp_lessons.measure.trace import trace_step

META = torch.device("meta")
B, T, E, H, FF = 16, 512, 1024, 16, 4096


def _packed(z, n, e):
    # the packed projection split as F.multi_head_attention_forward splits it
    return (
        z.unflatten(-1, (n, e)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
    )


def _attention(m: nn.MultiheadAttention, x, memory=None):
    """nn.MultiheadAttention (batch first, need_weights=False) in functional calls,
    in the module's own layout (sequence first inside, one packed projection), so
    that its copies are the module's too."""
    b, t, e = x.shape
    w, bias = m.in_proj_weight, m.in_proj_bias
    x = x.transpose(0, 1)
    if memory is None:
        qkv = _packed(F.linear(x, w, bias), 3, e)
        q, k, v = qkv[0], qkv[1], qkv[2]
    else:
        memory = memory.transpose(0, 1)
        (w_q, w_kv), (b_q, b_kv) = w.split([e, 2 * e]), bias.split([e, 2 * e])
        q = F.linear(x, w_q, b_q)
        kv = _packed(F.linear(memory, w_kv, b_kv), 2, e)
        k, v = kv[0], kv[1]
    heads, d = m.num_heads, e // m.num_heads

    def split(z):
        return z.view(z.shape[0], b * heads, d).transpose(0, 1).view(b, heads, -1, d)

    p = m.dropout if m.training else 0.0
    out = F.scaled_dot_product_attention(split(q), split(k), split(v), dropout_p=p)
    out = out.permute(2, 0, 1, 3).contiguous().view(b * t, e)
    out = F.linear(out, m.out_proj.weight, m.out_proj.bias)
    return out.view(t, b, e).transpose(0, 1)


def _norm(m: nn.LayerNorm, x):
    return F.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps)


def _drop(x, p=0.1):
    return F.dropout(x, p, training=True)


def _feed_forward(m, x):
    h = _drop(F.relu(F.linear(x, m.linear1.weight, m.linear1.bias)))
    return F.linear(h, m.linear2.weight, m.linear2.bias)


def _encoder_layer(m: nn.TransformerEncoderLayer, x):
    x = _norm(m.norm1, x + _drop(_attention(m.self_attn, x)))
    return _norm(m.norm2, x + _drop(_feed_forward(m, x)))


def _decoder_layer(m: nn.TransformerDecoderLayer, x, memory):
    x = _norm(m.norm1, x + _drop(_attention(m.self_attn, x)))
    x = _norm(m.norm2, x + _drop(_attention(m.multihead_attn, x, memory)))
    return _norm(m.norm3, x + _drop(_feed_forward(m, x)))


def _transformer(m: nn.Transformer, src, tgt):
    memory = src
    for layer in m.encoder.layers:
        memory = _encoder_layer(layer, memory)
    memory = _norm(m.encoder.norm, memory)
    out = tgt
    for layer in m.decoder.layers:
        out = _decoder_layer(layer, out, memory)
    return _norm(m.decoder.norm, out)


def _rnn(m, x):
    directions = 2 if m.bidirectional else 1
    h = torch.zeros(m.num_layers * directions, x.shape[0], m.hidden_size, device=META)
    args = (m._flat_weights, m.bias, m.num_layers, m.dropout, m.training)
    if isinstance(m, nn.LSTM):
        return torch.lstm(x, (h, h.clone()), *args, m.bidirectional, True)[0]
    return torch.gru(x, h, *args, m.bidirectional, True)[0]


def _conv(m, x):
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[x.dim() - 2]
    return fn(x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)


def _batch_norm(m: nn.BatchNorm2d, x):
    m.num_batches_tracked.add_(1)  # as nn.BatchNorm2d counts its batches
    return F.batch_norm(
        x, m.running_mean, m.running_var, m.weight, m.bias, True, m.momentum, m.eps
    )


class ResNetBlock(nn.Module):
    """torchvision's Bottleneck (v1.5: the stride on the 3x3), with a downsample."""

    def __init__(self, c_in=256, width=128, c_out=512, stride=2, groups=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.down = nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        h = self.relu(self.bn1(self.conv1(x)))
        h = self.relu(self.bn2(self.conv2(h)))
        return self.relu(self.bn3(self.conv3(h)) + self.down(x))


def _resnet_block(m: ResNetBlock, x):
    h = F.relu(_batch_norm(m.bn1, _conv(m.conv1, x)), inplace=True)
    h = F.relu(_batch_norm(m.bn2, _conv(m.conv2, h)), inplace=True)
    h = _batch_norm(m.bn3, _conv(m.conv3, h))
    return F.relu(h + _batch_norm(m.down[1], _conv(m.down[0], x)), inplace=True)


class MBConv(nn.Module):
    """torchvision's EfficientNet block: expand, depthwise, squeeze-excite, project."""

    def __init__(self, c=96, expand=6, kernel=3):
        super().__init__()
        w, s = c * expand, c // 4
        self.expand = nn.Sequential(nn.Conv2d(c, w, 1, bias=False), nn.BatchNorm2d(w))
        self.depthwise = nn.Sequential(
            nn.Conv2d(w, w, kernel, 1, kernel // 2, groups=w, bias=False),
            nn.BatchNorm2d(w),
        )
        self.squeeze = nn.Conv2d(w, s, 1)
        self.excite = nn.Conv2d(s, w, 1)
        self.project = nn.Sequential(nn.Conv2d(w, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        h = F.silu(self.expand(x))
        h = F.silu(self.depthwise(h))
        scale = self.excite(F.silu(self.squeeze(F.adaptive_avg_pool2d(h, 1))))
        return x + self.project(h * torch.sigmoid(scale))


def _mbconv(m: MBConv, x):
    h = F.silu(_batch_norm(m.expand[1], _conv(m.expand[0], x)))
    h = F.silu(_batch_norm(m.depthwise[1], _conv(m.depthwise[0], h)))
    pooled = h.mean((2, 3), keepdim=True)  # what adaptive_avg_pool2d(h, 1) computes
    scale = _conv(m.excite, F.silu(_conv(m.squeeze, pooled)))
    return x + _batch_norm(m.project[1], _conv(m.project[0], h * torch.sigmoid(scale)))


class Twin(nn.Module):
    """The stock module's parameters, run through ``fn``."""

    def __init__(self, stock: nn.Module, fn):
        super().__init__()
        self.stock, self.fn = stock, fn

    def forward(self, *inputs):
        return self.fn(self.stock, *inputs)


def _x(*shape, dtype=torch.float32):
    return torch.empty(
        *shape, device=META, dtype=dtype, requires_grad=dtype.is_floating_point
    )


def _ids(*shape, n):
    return torch.zeros(*shape, dtype=torch.long, device=META).clamp_(max=n - 1)


def _zoo():
    """name -> (stock module, functional twin's fn, inputs, stock's call)."""
    with META:
        return {
            "MultiheadAttention": (
                nn.MultiheadAttention(E, H, batch_first=True),
                _attention,
                (_x(B, T, E),),
                lambda m, x: m(x, x, x, need_weights=False)[0],
            ),
            "TransformerEncoderLayer": (
                nn.TransformerEncoderLayer(E, H, FF, batch_first=True),
                _encoder_layer,
                (_x(B, T, E),),
                None,
            ),
            "TransformerDecoderLayer": (
                nn.TransformerDecoderLayer(E, H, FF, batch_first=True),
                _decoder_layer,
                (_x(B, T, E), _x(B, T, E)),
                None,
            ),
            "Transformer": (
                nn.Transformer(E, H, 2, 2, FF, batch_first=True),
                _transformer,
                (_x(B, T, E), _x(B, T, E)),
                None,
            ),
            "LSTM": (
                nn.LSTM(E, E, 2, batch_first=True, bidirectional=True),
                _rnn,
                (_x(B, 64, E),),
                lambda m, x: m(x)[0],
            ),
            "GRU": (
                nn.GRU(E, E, 2, batch_first=True),
                _rnn,
                (_x(B, 64, E),),
                lambda m, x: m(x)[0],
            ),
            "Conv1d": (
                nn.Conv1d(256, 256, 5, padding=2, groups=4),
                _conv,
                (_x(B, 256, 1024),),
                None,
            ),
            "Conv2d": (
                nn.Conv2d(128, 256, 3, padding=1),
                _conv,
                (_x(B, 128, 56, 56),),
                None,
            ),
            "Conv2d grouped": (
                nn.Conv2d(256, 256, 3, padding=1, groups=32),
                _conv,
                (_x(B, 256, 56, 56),),
                None,
            ),
            "Conv2d depthwise": (
                nn.Conv2d(256, 256, 3, padding=1, groups=256),
                _conv,
                (_x(B, 256, 56, 56),),
                None,
            ),
            "Conv3d": (
                nn.Conv3d(32, 64, 3, padding=1),
                _conv,
                (_x(2, 32, 16, 64, 64),),
                None,
            ),
            "ConvTranspose2d": (
                nn.ConvTranspose2d(256, 128, 4, 2, 1),
                lambda m, x: F.conv_transpose2d(
                    x, m.weight, m.bias, m.stride, m.padding
                ),
                (_x(B, 256, 28, 28),),
                None,
            ),
            "BatchNorm2d": (
                nn.BatchNorm2d(256),
                _batch_norm,
                (_x(B, 256, 56, 56),),
                None,
            ),
            "GroupNorm": (
                nn.GroupNorm(32, 256),
                lambda m, x: F.group_norm(x, 32, m.weight, m.bias, m.eps),
                (_x(B, 256, 56, 56),),
                None,
            ),
            "LayerNorm": (nn.LayerNorm(E), _norm, (_x(B, T, E),), None),
            "Embedding": (
                nn.Embedding(30000, E),
                lambda m, ids: F.embedding(ids, m.weight),
                (_ids(B, T, n=30000),),
                None,
            ),
            "EmbeddingBag": (
                nn.EmbeddingBag(30000, E, mode="sum"),
                lambda m, ids: F.embedding_bag(ids, m.weight, mode="sum"),
                (_ids(B, 32, n=30000),),
                None,
            ),
            "ResNet block": (ResNetBlock(), _resnet_block, (_x(B, 256, 56, 56),), None),
            "EfficientNet block": (MBConv(), _mbconv, (_x(B, 96, 56, 56),), None),
        }


ZOO = list(_zoo())


def _pair(name):
    stock, fn, inputs, call = _zoo()[name]
    twin = Twin(stock, fn)
    stock_model = Twin(stock, call) if call else stock
    return stock_model, twin, inputs


def _flops_by_math(trace):
    counts = Counter()
    for k in trace.kernels:
        if k.flops:
            counts[k.math] += k.flops
    return counts


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_stock_module_and_functional_twin_get_the_same_estimate(name, precision):
    stock, twin, inputs = _pair(name)
    gpu = "A100-SXM4-80GB"
    # op by op: the same arithmetic in the same dtypes (the low-precision ones
    # under AMP: nothing in fp32 left behind by a nested call)
    flops = _flops_by_math(trace_step(stock, inputs, precision))
    assert flops == _flops_by_math(trace_step(twin, inputs, precision))
    if precision != "fp32" and flops:  # norms and lookups have no FLOPs
        assert set(flops) == {precision}, flops
    ours, theirs = (
        estimate_step(m, inputs, gpu, precision).seconds for m in (stock, twin)
    )
    assert ours == pytest.approx(theirs, rel=0.02)


def test_nested_calls_meet_the_policy_as_under_cpu_autocast():
    """F.multi_head_attention_forward calls F.linear and
    F.scaled_dot_product_attention from inside itself: torch.autocast("cpu") lowers
    both (the CPU's and CUDA's lists agree on them), and so does the policy, op by
    op, on real tensors."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 8, 32)

    def ops(ctx):
        log = _Log()
        with log, ctx:
            out = mha(x, x, x, need_weights=False)[0]
        return out.dtype, log.ops

    real = ops(torch.autocast("cpu", dtype=torch.bfloat16))
    assert real[0] == torch.bfloat16
    assert ops(AutocastPolicy(torch.bfloat16)) == real


class _Log(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        dtypes = tuple(
            t.dtype
            for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)
        )
        self.ops.append((func._overloadpacket.__name__, dtypes))
        return out
