"""The published rows' other models, on the meta device: Transformer big, nnU-Net,
FastPitch and DLRM, rebuilt from their repositories' configurations (see
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
