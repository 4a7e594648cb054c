"""amp_lessons.core.models: the built-in models and synthetic data, shapes and
content."""

import math

import pytest
import torch

from amp_lessons.core import models


def test_make_spirals_is_balanced_and_on_the_arms():
    x, y = models.make_spirals(300, generator=torch.Generator().manual_seed(0))
    assert x.shape == (300, 2) and y.tolist() == [i % 3 for i in range(300)]
    r = x.norm(dim=1) / 2.0  # inputs are scaled by 2
    assert r.max() < 1.5
    # without noise every point lies on its class's arm: theta = 4.5 r + 2 pi y / 3
    x0, y0 = models.make_spirals(
        30, noise=0.0, generator=torch.Generator().manual_seed(1)
    )
    r0 = x0.norm(dim=1) / 2.0
    theta = 4.5 * r0 + 2 * math.pi * y0 / 3
    expected = 2.0 * torch.stack([r0 * torch.cos(theta), r0 * torch.sin(theta)], 1)
    assert torch.allclose(x0, expected, atol=1e-5)


def test_mlp_and_gpt_shapes():
    mlp = models.MLP((2, 16, 16, 3))
    assert mlp(torch.randn(5, 2)).shape == (5, 3)
    assert sum(isinstance(m, torch.nn.ReLU) for m in mlp.modules()) == 2
    gpt = models.GPT(vocab_size=64, block_size=32, n_layer=2, n_head=2, n_embd=32)
    idx, _ = models.make_tokens(3, 32, 64)
    assert gpt(idx).shape == (3, 32, 64)
    with pytest.raises(ValueError, match="n_embd=30 must be a multiple of n_head=4"):
        models.CausalSelfAttention(30, 4)


def test_make_tokens_is_arithmetic():
    x, y = models.make_tokens(4, 8, 50, torch.Generator().manual_seed(1))
    assert torch.equal(x[:, 1:], y[:, :-1])
    stride = (x[:, 1] - x[:, 0]) % 50
    assert torch.equal((x[:, :1] + stride[:, None] * torch.arange(1, 9)) % 50, y)
