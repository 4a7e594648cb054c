"""The published rows' other models, on the meta device: Transformer big, nnU-Net,
FastPitch, DLRM and Transformer-XL, rebuilt from their repositories' configurations (see
``data/published_speedups.csv``) so that the fit can trace them. The command line's
families, and the blocks these reuse, are in ``amp_lessons.measure.model_zoo``.

Example:
    >>> w = unet(dims=2, patch=64, depth=3, batch=4)
    >>> w.inputs.shape
    torch.Size([4, 4, 64, 64])
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.core.models import MLP
from amp_lessons.measure.model_zoo import (
    META,
    Layer,
    Workload,
    _ids,
    _require,
    _token_loss,
)


class Seq2Seq(nn.Module):
    """An encoder-decoder transformer (Transformer big): shared embeddings, post-LN
    layers, the decoder with causal self-attention and cross-attention."""

    def __init__(
        self, vocab: int, width: int, heads: int, ffn: int, layers: int, explicit: bool
    ):
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.encoder = nn.ModuleList(
            Layer(width, heads, ffn, explicit) for _ in range(layers)
        )
        self.decoder = nn.ModuleList(
            Layer(width, heads, ffn, explicit, causal=True, cross=True)
            for _ in range(layers)
        )

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory = F.dropout(self.emb(src), 0.3, self.training)
        for layer in self.encoder:
            memory = layer(memory)
        x = F.dropout(self.emb(tgt), 0.3, self.training)
        for layer in self.decoder:
            x = layer(x, memory)
        return x @ self.emb.weight.t()  # the output projection shares the embeddings


def seq2seq(
    layers: int = 6,
    width: int = 1024,
    heads: int = 16,
    ffn: int = 4096,
    vocab: int = 33712,
    seq: int = 32,
    batch: int = 10240,
    explicit: bool = True,
    optimizer: str = "adam",
) -> Workload:
    """Transformer big for translation; ``batch`` counts tokens (fairseq's
    --max-tokens), split into sentences of ``seq`` tokens on each side."""
    with META:
        model = Seq2Seq(vocab, width, heads, ffn, layers, explicit)
    sentences = max(1, batch // seq)
    src, tgt = _ids(sentences, seq, vocab), _ids(sentences, seq, vocab)
    return Workload(model, (src, tgt), _token_loss(tgt), sentences * seq, optimizer)


class UNet(nn.Module):
    """nnU-Net's U-Net: per stage two (convolution, instance norm, leaky ReLU)
    blocks, strided convolutions down, transposed convolutions up, skip connections."""

    def __init__(self, dims: int, channels: int, classes: int, filters: list[int]):
        super().__init__()
        conv = nn.Conv3d if dims == 3 else nn.Conv2d
        up = nn.ConvTranspose3d if dims == 3 else nn.ConvTranspose2d
        norm = nn.InstanceNorm3d if dims == 3 else nn.InstanceNorm2d

        def block(c_in, c_out, stride=1):
            return nn.Sequential(
                conv(c_in, c_out, 3, stride, 1),
                norm(c_out, affine=True),
                nn.LeakyReLU(0.01),
                conv(c_out, c_out, 3, 1, 1),
                norm(c_out, affine=True),
                nn.LeakyReLU(0.01),
            )

        self.down = nn.ModuleList(
            block(c_in, c_out, 1 if i == 0 else 2)
            for i, (c_in, c_out) in enumerate(
                zip([channels, *filters[:-1]], filters, strict=True)
            )
        )
        self.up = nn.ModuleList(
            up(c_in, c_out, 2, 2)
            for c_in, c_out in zip(filters[:0:-1], filters[-2::-1], strict=True)
        )
        self.merge = nn.ModuleList(block(2 * c, c) for c in filters[-2::-1])
        self.out = conv(filters[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, skips[-2::-1], strict=True):
            x = merge(torch.cat([up(x), skip], dim=1))
        return self.out(x)


def unet(
    dims: int = 3,
    patch: int | str = 128,
    channels: int = 4,
    classes: int = 4,
    depth: int = 6,
    batch: int = 2,
    optimizer: str = "adam",
) -> Workload:
    """nnU-Net on patches of ``patch`` voxels a side (or ``"192x160"``), in 3D or 2D
    (``dims``); filters 32, 64, ... doubling up to 320 (3D) or 512 (2D), ``depth``
    stages."""
    sides = tuple(int(s) for s in str(patch).split("x"))
    _require(len(sides) in (1, dims), f"patch {patch!r} must give 1 or {dims} sides")
    patch = sides if len(sides) == dims else sides * dims
    step = 2 ** (depth - 1)  # each stage halves the patch, the way up doubles it
    _require(
        all(side % step == 0 for side in patch),
        f"each patch side must be a multiple of 2**(depth - 1) = {step}, got {patch}",
    )
    cap = 320 if dims == 3 else 512
    filters = [min(32 * 2**i, cap) for i in range(depth)]
    with META:
        model = UNet(dims, channels, classes, filters)
    x = torch.empty(batch, channels, *patch, device=META)
    y = torch.zeros(batch, *patch, dtype=torch.long, device=META)
    return Workload(model, x, lambda out: F.cross_entropy(out, y), batch, optimizer)


class FastPitch(nn.Module):
    """FastPitch: a text encoder and a mel decoder of FFT blocks (self-attention and
    a convolutional feed-forward), duration, pitch and energy predictors between
    them; each
    character's encoding is repeated for its frames (``frames_per_symbol``)."""

    def __init__(
        self,
        symbols: int,
        width: int,
        layers: int,
        heads: int,
        ffn: int,
        kernel: int,
        mels: int,
        frames_per_symbol: int,
    ):
        super().__init__()
        self.emb = nn.Embedding(symbols, width)
        self.encoder = nn.ModuleList(
            Layer(width, heads, ffn, explicit=True, conv_kernel=kernel)
            for _ in range(layers)
        )
        self.decoder = nn.ModuleList(
            Layer(width, heads, ffn, explicit=True, conv_kernel=kernel)
            for _ in range(layers)
        )
        self.predictors = nn.ModuleList(
            nn.Sequential(
                nn.Conv1d(width, 256, 3, padding=1),
                nn.ReLU(),
                nn.Conv1d(256, 256, 3, padding=1),
                nn.ReLU(),
                nn.Conv1d(256, 1, 1),
            )
            for _ in range(3)
        )
        self.pitch_emb = nn.Conv1d(1, width, 3, padding=1)
        self.energy_emb = nn.Conv1d(1, width, 3, padding=1)
        self.mel = nn.Linear(width, mels)
        self.repeat = frames_per_symbol

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        x = self.emb(text)
        for layer in self.encoder:
            x = layer(x)
        h = x.transpose(1, 2)
        duration, pitch, energy = (p(h) for p in self.predictors)
        x = x + (self.pitch_emb(pitch) + self.energy_emb(energy)).transpose(1, 2)
        x = x.repeat_interleave(self.repeat, dim=1) + duration.mean() * 0
        for layer in self.decoder:
            x = layer(x)
        return self.mel(x)


def fastpitch(
    symbols: int = 148,
    width: int = 384,
    layers: int = 6,
    heads: int = 1,
    ffn: int = 1536,
    kernel: int = 3,
    mels: int = 80,
    text: int = 100,
    frames_per_symbol: int = 6,
    batch: int = 16,
    optimizer: str = "lamb",
) -> Workload:
    """FastPitch on ``text`` characters a sample; one step's items are mel frames."""
    _require(
        kernel % 2 == 1, f"kernel must be odd (same-length convolutions), got {kernel}"
    )
    with META:
        model = FastPitch(
            symbols, width, layers, heads, ffn, kernel, mels, frames_per_symbol
        )
    ids = _ids(batch, text, symbols)
    target = torch.empty(batch, text * frames_per_symbol, mels, device=META)
    return Workload(
        model,
        ids,
        lambda out: F.mse_loss(out, target),
        batch * text * frames_per_symbol,
        optimizer,
    )


class DLRM(nn.Module):
    """DLRM: a bottom MLP on dense features, one embedding per categorical feature,
    their pairwise dot products, and a top MLP. The tables are updated sparsely (only
    the rows a batch touches), so they are not part of the dense optimizer step."""

    def __init__(
        self,
        dense: int,
        tables: int,
        rows: int,
        dim: int,
        bottom: list[int],
        top: list[int],
    ):
        super().__init__()
        self.bottom = MLP([dense, *bottom])
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(tables))
        for t in self.tables:
            t.weight.requires_grad_(False)
        n = tables + 1
        self.top = MLP([dim + n * (n - 1) // 2, *top, 1])

    def forward(self, dense: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        vectors = [F.relu(self.bottom(dense))]
        vectors += [t(categorical[:, i]) for i, t in enumerate(self.tables)]
        z = torch.stack(vectors, dim=1)
        dots = z @ z.transpose(1, 2)
        i, j = torch.triu_indices(z.shape[1], z.shape[1], 1, device=z.device)
        return self.top(torch.cat([vectors[0], dots[:, i, j]], dim=1)).squeeze(1)


def dlrm(
    dense: int = 13,
    tables: int = 26,
    rows: int = 100_000,
    dim: int = 128,
    bottom: str = "512-256-128",
    top: str = "1024-1024-512-256",
    batch: int = 65536,
    optimizer: str = "sgd",
) -> Workload:
    """DLRM on Criteo-like features; ``bottom`` and ``top`` are hidden widths."""
    _require(
        int(str(bottom).split("-")[-1]) == dim,
        f"the bottom MLP must end at the embedding width dim={dim}, got {bottom}",
    )
    with META:
        model = DLRM(
            dense,
            tables,
            rows,
            dim,
            [int(w) for w in str(bottom).split("-")],
            [int(w) for w in str(top).split("-")],
        )
    x = torch.empty(batch, dense, device=META)
    cat = torch.zeros(batch, tables, dtype=torch.long, device=META)
    y = torch.empty(batch, device=META)
    return Workload(
        model,
        (x, cat),
        lambda out: F.binary_cross_entropy_with_logits(out, y),
        batch,
        optimizer,
    )


class RelAttention(nn.Module):
    """Transformer-XL's attention with relative positions, as NVIDIA/
    DeepLearningExamples' PyTorch/LanguageModeling/Transformer-XL/pytorch/
    mem_transformer.py runs it (``RelPartialLearnableMultiHeadAttn``, sequence
    first): queries, keys and values from one projection of the memory and the
    segment together, a projection of the positional encodings, two score products
    (content and position, each with its learned bias), the position scores shifted
    by a zero column, a reshape and a slice, both added and scaled, the future
    masked, a softmax, dropout on the probabilities, the product with the values, the
    output projection, and a residual with LayerNorm."""

    def __init__(self, width: int, heads: int, dropout: float, dropatt: float):
        super().__init__()
        self.heads, self.dropout, self.dropatt = heads, dropout, dropatt
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.r = nn.Linear(width, width, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.ln = nn.LayerNorm(width)

    def forward(self, x, pos, content_bias, position_bias, mask, memory):
        q_len, batch, width = x.shape
        head = width // self.heads
        q, k, v = self.qkv(torch.cat([memory, x], 0)).chunk(3, dim=-1)
        k_len = k.shape[0]
        q = q[-q_len:].reshape(q_len, batch, self.heads, head)
        k, v = (t.reshape(k_len, batch, self.heads, head) for t in (k, v))
        r = self.r(pos).reshape(k_len, self.heads, head)
        ac = torch.einsum("ibnd,jbnd->bnij", q + content_bias, k)
        bd = torch.einsum("ibnd,jnd->bnij", q + position_bias, r)
        zero = bd.new_zeros(batch, self.heads, q_len, 1)
        bd = torch.cat([zero, bd], 3).view(batch, self.heads, k_len + 1, q_len)
        bd = bd[:, :, 1:].reshape(batch, self.heads, q_len, k_len)
        score = (ac + bd) * head**-0.5  # one TorchScript kernel in the source
        score = score.masked_fill(mask, -float("inf"))
        p = F.dropout(F.softmax(score, dim=3), self.dropatt, self.training)
        y = torch.einsum("bnij,jbnd->ibnd", p, v).reshape(q_len, batch, width)
        y = F.dropout(self.o(y), self.dropout, self.training)
        return self.ln(x + y)


class XLLayer(nn.Module):
    """Relative attention, then a ReLU feed-forward with a residual and LayerNorm
    (post-LN, as the source's ``pre_lnorm: false``)."""

    def __init__(self, width, heads, ffn, dropout, dropatt):
        super().__init__()
        self.attn = RelAttention(width, heads, dropout, dropatt)
        self.ff1, self.ff2 = nn.Linear(width, ffn), nn.Linear(ffn, width)
        self.ln = nn.LayerNorm(width)
        self.dropout = dropout

    def forward(self, x, pos, content_bias, position_bias, mask, memory):
        x = self.attn(x, pos, content_bias, position_bias, mask, memory)
        h = F.dropout(F.relu(self.ff1(x)), self.dropout, self.training)
        h = F.dropout(self.ff2(h), self.dropout, self.training)
        return self.ln(x + h)


class TransformerXL(nn.Module):
    """Transformer-XL (``MemTransformerLM`` of the source above): an adaptive input
    embedding over the whole vocabulary, cut at ``cutoffs`` into clusters whose
    width shrinks by ``div_val`` each (a projection back to the model's width where
    it differs), sinusoidal relative positions, the layers, and the adaptive
    softmax's head: the first cluster's words (its weights tied to the embedding's)
    and one logit per tail cluster.

    Not modelled: the tail clusters' lookups and logits, which run only for the
    tokens that fall in them (how many does not come with the published rows); their
    tables are parameters all the same, stepped by the optimizer every step."""

    def __init__(
        self, vocab, cutoffs, div_val, width, layers, heads, ffn, dropout, dropatt
    ):
        super().__init__()
        ends = [0, *cutoffs, vocab]
        sizes = [b - a for a, b in zip(ends, ends[1:], strict=False)]
        dims = [width // div_val**i for i in range(len(sizes))]
        if div_val == 1:  # one table of the whole vocabulary, one bias, no projection
            self.tables = nn.ModuleList([nn.Embedding(vocab, width)])
            self.biases = nn.ParameterList([nn.Parameter(torch.empty(vocab))])
            self.projs = nn.ParameterList()
        else:  # a table, a bias and a projection per cluster
            self.tables = nn.ModuleList(
                nn.Embedding(n, d) for n, d in zip(sizes, dims, strict=True)
            )
            self.biases = nn.ParameterList(nn.Parameter(torch.empty(n)) for n in sizes)
            self.projs = nn.ParameterList(
                nn.Parameter(torch.empty(width, d)) for d in dims
            )
        # the softmax's own projection of the head cluster (tie_projs: false, true..)
        self.out_proj = (
            nn.Parameter(torch.empty(width, dims[0])) if div_val > 1 else None
        )
        self.shortlist = cutoffs[0]
        self.cluster_weight = nn.Parameter(torch.empty(len(sizes) - 1, dims[0]))
        self.cluster_bias = nn.Parameter(torch.empty(len(sizes) - 1))
        head = width // heads
        self.content_bias = nn.Parameter(torch.empty(heads, head))
        self.position_bias = nn.Parameter(torch.empty(heads, head))
        self.layers = nn.ModuleList(
            XLLayer(width, heads, ffn, dropout, dropatt) for _ in range(layers)
        )
        self.width, self.dropout = width, dropout

    def forward(self, ids: torch.Tensor, *memory: torch.Tensor) -> torch.Tensor:
        q_len = ids.shape[0]
        k_len = q_len + memory[0].shape[0]
        x = self.tables[0](ids)  # the head cluster's words (see the class docstring)
        if len(self.projs):
            x = F.linear(x, self.projs[0])
        x = F.dropout(x * self.width**0.5, self.dropout, self.training)
        steps = torch.arange(k_len - 1, -1, -1.0, device=ids.device)
        freq = 1 / 10000 ** (
            torch.arange(0.0, self.width, 2.0, device=ids.device) / self.width
        )
        angles = torch.outer(steps, freq)
        pos = torch.cat([angles.sin(), angles.cos()], -1)[:, None].to(x.dtype)
        pos = F.dropout(pos, self.dropout, self.training)
        mask = torch.ones(q_len, k_len, device=ids.device).triu_(1 + memory[0].shape[0])
        mask = mask.bool()
        for layer, mem in zip(self.layers, memory, strict=True):
            x = layer(x, pos, self.content_bias, self.position_bias, mask, mem)
        x = F.dropout(x, self.dropout, self.training)
        if self.out_proj is not None:
            x = F.linear(x, self.out_proj.t().contiguous())
        weight = torch.cat(
            [self.tables[0].weight[: self.shortlist], self.cluster_weight]
        )
        bias = torch.cat([self.biases[0][: self.shortlist], self.cluster_bias])
        return F.linear(x, weight, bias)


def transformer_xl(
    layers: int = 16,
    width: int = 512,
    heads: int = 8,
    ffn: int = 2048,
    seq: int = 192,
    memory: int = 192,
    vocab: int = 267735,
    cutoffs: str = "19997-39997-199997",
    div_val: int = 1,
    dropout: float = 0.1,
    dropatt: float = 0.0,
    batch: int = 16,
    optimizer: str = "lamb",
) -> Workload:
    """Transformer-XL on WikiText-103 (the source's wt103_base.yaml / wt103_large
    .yaml), one step on ``batch`` segments of ``seq`` tokens, each layer reading
    ``memory`` cached states; a step's items are its tokens."""
    cuts = [int(c) for c in str(cutoffs).split("-")]
    _require(cuts == sorted(cuts) and cuts[-1] < vocab, f"bad cutoffs {cutoffs!r}")
    with META:
        model = TransformerXL(
            vocab, cuts, div_val, width, layers, heads, ffn, dropout, dropatt
        )
    ids = _ids(seq, batch, cuts[0])
    states = tuple(
        torch.empty(memory, batch, width, device=META) for _ in range(layers)
    )
    targets = _ids(seq, batch, cuts[0] + len(cuts))
    return Workload(model, (ids, *states), _token_loss(targets), seq * batch, optimizer)
