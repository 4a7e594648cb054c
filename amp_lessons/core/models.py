"""The built-in models and synthetic data of the training lessons, nothing downloaded.

* ``make_spirals`` + ``MLP``: 3 interleaved 2-D spirals classified by a small MLP;
  learns in a few seconds on a CPU in every precision.
* ``make_tokens`` + ``GPT``: a small GPT (causal self-attention through
  ``F.scaled_dot_product_attention``) on arithmetic token sequences
  ``x[t+1] = (x[t] + stride) % vocab``: the stride is per sequence, so the model must
  look back, which is what attention is for. Used by ``bench``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """A plain ReLU MLP: ``sizes=(2, 64, 64, 3)`` is 2 inputs -> 3 class scores."""

    def __init__(self, sizes: Sequence[int]):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers.append(nn.Linear(n_in, n_out))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be a multiple of n_head={n_head}")
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (
            t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            for t in (q, k, v)
        )
        # flash / memory-efficient kernels on CUDA: no T x T matrix is kept
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd, bias=False),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A small GPT: token + position embeddings, pre-LN blocks, a linear head.

    Example: ``GPT(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=64)``
    maps token ids of shape (B, T) to logits of shape (B, T, 64).
    """

    def __init__(
        self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int
    ):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*(Block(n_embd, n_head) for _ in range(n_layer)))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        return self.head(self.ln_f(self.blocks(x)))


def make_spirals(
    n: int,
    num_classes: int = 3,
    noise: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points on ``num_classes`` interleaved spiral arms: x (n, 2), y (n,).

    Example: ``x, y = make_spirals(300)`` -> ``x.shape == (300, 2)``, labels 0, 1, 2.
    """
    y = torch.arange(n) % num_classes
    r = torch.rand(n, generator=generator)
    theta = 4.5 * r + 2 * math.pi * y / num_classes  # 4.5 rad (258 deg) per arm
    x = torch.stack([r * torch.cos(theta), r * torch.sin(theta)], dim=1)
    x = x + noise * r[:, None] * torch.randn(n, 2, generator=generator)
    return x * 2.0, y  # inputs of order 1


def make_tokens(
    batch_size: int,
    block_size: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    max_stride: int = 8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Arithmetic sequences mod ``vocab_size``; y is x shifted by one token.

    Each row has its own start and stride (1..max_stride), so after two tokens the
    rest is predictable, but only by looking back: a bigram cannot do it.

    Example: a row ``[5, 8, 11, 14, ...]`` has targets ``[8, 11, 14, 17, ...]``.
    """
    start = torch.randint(vocab_size, (batch_size, 1), generator=generator)
    stride = torch.randint(1, max_stride + 1, (batch_size, 1), generator=generator)
    seq = (start + stride * torch.arange(block_size + 1)) % vocab_size
    return seq[:, :-1], seq[:, 1:]
