"""Model families to estimate, built on the meta device: shapes only, no memory.

Each builder returns a ``Workload``: the model, its inputs, the loss, and how many
items (samples, tokens, frames) one step processes, in the unit its published
throughput uses. Here: the command line's families (a BERT-style encoder, the
course's GPT, an MLP, ResNet-50/ResNeXt) and the blocks the published rows' other
models reuse (``published_models``). They are not those repositories' code, and the
differences that matter to a step's time (fused kernels, memory layouts) are named
where they occur.

Example:
    >>> w = transformer(layers=2, width=256, heads=4, seq=128, batch=8)
    >>> w.inputs.device.type, w.items
    ('meta', 8)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.core.models import GPT, MLP

META = torch.device("meta")


@dataclass
class Workload:
    """A model on the meta device, its inputs, its loss and the items of one step."""

    model: nn.Module
    inputs: torch.Tensor | tuple
    loss_fn: Callable | None
    items: int
    optimizer: str = "adam"


def _require(condition: bool, message: str) -> None:
    """A size a model cannot be built with: one clear ValueError, before any layer."""
    if not condition:
        raise ValueError(message)


def _ids(batch: int, seq: int, vocab: int) -> torch.Tensor:
    return torch.zeros(batch, seq, dtype=torch.long, device=META).clamp_(max=vocab - 1)


def _token_loss(targets: torch.Tensor) -> Callable:
    return lambda logits: F.cross_entropy(logits.flatten(0, -2), targets.flatten())


class Attention(nn.Module):
    """Multi-head attention. ``explicit``: scores, softmax, dropout and two batched
    matmuls (BERT's and fairseq's code of 2019-21, a T x T matrix per head);
    otherwise ``F.scaled_dot_product_attention`` (a fused flash kernel)."""

    def __init__(
        self,
        width: int,
        heads: int,
        explicit: bool,
        causal: bool = False,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.heads, self.explicit, self.causal, self.dropout = (
            heads,
            explicit,
            causal,
            dropout,
        )
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None):
        B, T, C = x.shape
        context = x if context is None else context
        q = self.q(x).view(B, T, self.heads, -1).transpose(1, 2)
        k, v = (
            t.view(B, context.shape[1], self.heads, -1).transpose(1, 2)
            for t in self.kv(context).split(C, dim=2)
        )
        if self.explicit:
            scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
            p = F.dropout(F.softmax(scores, dim=-1), self.dropout, self.training)
            y = p @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return F.dropout(
            self.proj(y.transpose(1, 2).reshape(B, T, C)), self.dropout, self.training
        )


class Layer(nn.Module):
    """A post-LN transformer layer (BERT, Transformer big): attention, optional
    cross-attention, and a GELU feed-forward, each with a residual and LayerNorm.
    ``conv_kernel`` > 0 makes the feed-forward two 1-D convolutions (FastPitch's
    FFT block)."""

    def __init__(
        self,
        width: int,
        heads: int,
        ffn: int,
        explicit: bool = True,
        causal: bool = False,
        cross: bool = False,
        conv_kernel: int = 0,
    ):
        super().__init__()
        self.attn = Attention(width, heads, explicit, causal)
        self.ln1 = nn.LayerNorm(width)
        self.cross = Attention(width, heads, explicit) if cross else None
        self.ln_cross = nn.LayerNorm(width) if cross else None
        if conv_kernel:
            pad = conv_kernel // 2
            self.ff1 = nn.Conv1d(width, ffn, conv_kernel, padding=pad)
            self.ff2 = nn.Conv1d(ffn, width, conv_kernel, padding=pad)
        else:
            self.ff1, self.ff2 = nn.Linear(width, ffn), nn.Linear(ffn, width)
        self.conv = bool(conv_kernel)
        self.ln2 = nn.LayerNorm(width)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
    ):
        x = self.ln1(x + self.attn(x))
        if self.cross is not None:
            x = self.ln_cross(x + self.cross(x, context))
        h = x.transpose(1, 2) if self.conv else x
        h = self.ff2(F.gelu(self.ff1(h)))
        h = h.transpose(1, 2) if self.conv else h
        return self.ln2(x + F.dropout(h, 0.1, self.training))


class Encoder(nn.Module):
    """Token embeddings, ``layers`` transformer layers, and a head of ``outputs``."""

    def __init__(
        self,
        vocab: int,
        width: int,
        layers: int,
        heads: int,
        ffn: int,
        outputs: int,
        explicit: bool,
        causal: bool = False,
        seq: int = 512,
        predictions: int = 0,
    ):
        super().__init__()
        self.predictions = predictions
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        self.ln = nn.LayerNorm(width)
        self.layers = nn.ModuleList(
            Layer(width, heads, ffn, explicit, causal) for _ in range(layers)
        )
        self.head = nn.Linear(width, outputs)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = F.dropout(self.ln(self.tok(ids) + self.pos(pos)), 0.1, self.training)
        for layer in self.layers:
            x = layer(x)
        if self.predictions:  # BERT's masked-LM head sees only the masked positions
            x = x[:, : self.predictions].contiguous()
        return self.head(x)


def transformer(
    layers: int = 24,
    width: int = 1024,
    heads: int = 16,
    ffn: int = 0,
    seq: int = 512,
    batch: int = 32,
    vocab: int = 30528,
    outputs: int | None = None,
    explicit: bool = False,
    predictions: int = 0,
    optimizer: str = "adam",
) -> Workload:
    """A BERT-style encoder; ``outputs`` is its head's width (default: the vocab, as
    in masked-LM pre-training; 2 for SQuAD's start/end logits), applied to
    ``predictions`` positions a sequence (default: all). (Transformer-XL, which
    attends over a memory too: ``published_models.transformer_xl``.)"""
    _require(width % heads == 0, f"width {width} must be a multiple of heads {heads}")
    _require(
        predictions <= seq,
        f"predictions ({predictions}) must not exceed seq ({seq})",
    )
    outputs = vocab if outputs is None else outputs
    with META:
        model = Encoder(
            vocab,
            width,
            layers,
            heads,
            ffn or 4 * width,
            outputs,
            explicit,
            seq=seq,
            predictions=predictions,
        )
    ids = _ids(batch, seq, vocab)
    targets = _ids(batch, predictions or seq, outputs)
    return Workload(model, ids, _token_loss(targets), batch, optimizer)


def gpt(
    layers: int = 12,
    width: int = 768,
    heads: int = 12,
    seq: int = 1024,
    batch: int = 32,
    vocab: int = 8192,
    optimizer: str = "adam",
) -> Workload:
    """The course's own GPT (``amp_lessons.core.models.GPT``, the bench's transformer):
    pre-LN blocks, flash attention, a linear head over the vocab."""
    with META:
        model = GPT(vocab, seq, layers, heads, width)
    ids = _ids(batch, seq, vocab)
    return Workload(model, ids, _token_loss(ids), batch, optimizer)


def mlp(
    layers: int = 3, width: int = 4096, batch: int = 512, optimizer: str = "adam"
) -> Workload:
    """``layers`` x Linear(width) with ReLU and an MSE loss: the PyTorch AMP recipe's
    MLP and the bench's ``mlp`` config (``amp_lessons.core.models.MLP``)."""
    with META:
        model = MLP((width,) * (layers + 1))
    x = torch.empty(batch, width, device=META)
    y = torch.empty(batch, width, device=META)
    return Workload(model, x, lambda out: F.mse_loss(out, y), batch, optimizer)


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, c_out: int, stride: int, groups: int = 1):
        super().__init__()
        self.convs = nn.ModuleList(
            [
                nn.Conv2d(c_in, width, 1, bias=False),
                nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False),
                nn.Conv2d(width, c_out, 1, bias=False),
            ]
        )
        self.norms = nn.ModuleList(nn.BatchNorm2d(c) for c in (width, width, c_out))
        self.down = (
            nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            h = norm(conv(h))
            h = F.relu(h) if i < 2 else h
        return F.relu(h + self.down(x))


def resnet50(
    batch: int = 256,
    image: int = 224,
    classes: int = 1000,
    blocks: str = "3-4-6-3",
    groups: int = 1,
    width_per_group: int = 64,
    optimizer: str = "sgd_momentum",
) -> Workload:
    """ResNet-50 v1.5 (stride on the 3x3 convolution), SGD with momentum; other
    ``blocks``, ``groups`` and ``width_per_group`` make ResNet-101 or ResNeXt
    (ResNeXt101-32x4d: ``blocks="3-4-23-3", groups=32, width_per_group=4``)."""
    # the last stage sees image / 32 pixels a side; batch norm needs 2 values a channel
    _require(
        image >= 64 or (batch > 1 and image >= 32),
        f"image {image} px is too small for ResNet-50's 32x downsampling at batch "
        f"{batch}: use at least 64 (or 32 with a batch above 1)",
    )
    layers: list[nn.Module] = []
    with META:
        layers += [
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        c_in = 64
        for stage, n in enumerate(int(b) for b in str(blocks).split("-")):
            width, c_out = groups * width_per_group * 2**stage, 256 * 2**stage
            for i in range(n):
                stride = 2 if i == 0 and stage > 0 else 1
                layers.append(Bottleneck(c_in, width, c_out, stride, groups))
                c_in = c_out
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes)]
        model = nn.Sequential(*layers)
    x = torch.empty(batch, 3, image, image, device=META)
    y = torch.zeros(batch, dtype=torch.long, device=META)
    return Workload(model, x, lambda out: F.cross_entropy(out, y), batch, optimizer)


CLI_FAMILIES = {
    "transformer": transformer,
    "gpt": gpt,
    "mlp": mlp,
    "resnet50": resnet50,
}
_SIZES = {
    "transformer": ("layers", "width", "seq", "batch", "optimizer"),
    "gpt": ("layers", "width", "seq", "batch", "optimizer"),
    "mlp": ("layers", "width", "batch", "optimizer"),
    "resnet50": ("batch", "image", "optimizer"),
}


def build(family: str, **sizes) -> Workload:
    """A command-line family at the sizes given: ``build("gpt", layers=2)``.

    A size the family does not have is refused by name; heads follow the width
    (64 per head), as in BERT and GPT-2.
    """
    if family not in CLI_FAMILIES:
        raise ValueError(
            f"unknown model {family!r}; choose one of: {', '.join(CLI_FAMILIES)}, "
            f"or your own as package.module:function"
        )
    unknown = sorted(set(sizes) - set(_SIZES[family]))
    if unknown:
        raise ValueError(
            f"{family} has no size {', '.join(unknown)}; it takes: "
            f"{', '.join(_SIZES[family])}"
        )
    if family in ("transformer", "gpt") and "width" in sizes:
        if sizes["width"] % 64:
            raise ValueError(
                f"width must be a multiple of 64 (64 per head), got {sizes['width']}"
            )
        sizes["heads"] = sizes["width"] // 64
    return CLI_FAMILIES[family](**sizes)


def from_function(spec: str) -> Workload:
    """A reader's own model: ``"package.module:function"`` names a function that
    builds it on the meta device and returns ``(model, inputs)`` or ``(model,
    inputs, loss_fn)``; a step's items are the inputs' first dimension.

    Example: ``from_function("my_models:vit")`` for ``def vit(): with
    torch.device("meta"): ...; return model, images``.
    """
    module_name, colon, name = spec.partition(":")
    if not (colon and module_name and name):
        raise ValueError(
            f"model {spec!r} is neither a family ({', '.join(CLI_FAMILIES)}) nor "
            f"package.module:function"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import {module_name!r}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{module_name} has no function {name!r}")
    try:
        out = fn()
    except Exception as e:  # the reader's code: its error, in one line
        raise ValueError(f"{spec}() raised {type(e).__name__}: {e}") from None
    if not (
        isinstance(out, tuple) and len(out) in (2, 3) and isinstance(out[0], nn.Module)
    ):
        raise ValueError(
            f"{spec}() must return (model, inputs) or (model, inputs, loss_fn), "
            f"got {type(out).__name__}"
        )
    model, inputs, loss_fn = (*out, None)[:3]
    first = inputs[0] if isinstance(inputs, tuple) else inputs
    items = first.shape[0] if isinstance(first, torch.Tensor) and first.dim() else 1
    return Workload(model, inputs, loss_fn, items)
