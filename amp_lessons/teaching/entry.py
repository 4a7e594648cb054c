"""The entry lesson's demo material (notebooks/00_amp_in_10_minutes).

`tiny_gradient_layer` builds a layer whose output gradients are all exactly 2^-25,
so that fp16 loses every one of them and bf16 keeps them; `GPU_ROWS` names the
published runs the lesson's table quotes (`amp_lessons.measure.published`).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["GPU_ROWS", "RUNS", "tiny_gradient_layer"]

GPU_ROWS = (
    "bert_large_seq128_v100_32gb",
    "resnet50_a100_80gb",
    "bert_large_seq128_a100_80gb",
    "fastpitch_a100_80gb",
)
"""Ids of the published rows (measure/data/published_speedups.csv) the lesson shows:
the largest and the smallest AMP speed-ups of the fit, on V100 and A100."""


def tiny_gradient_layer(
    seed: int = 0,
) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """(layer, x, target) such that ``F.mse_loss(layer(x), target)`` gives every
    output a gradient of exactly -2^-25.

    Weights and inputs are small integers, so fp32, fp16 and bf16 compute the same
    outputs; the target sits 2^-12 above each output, and the mean over 4096 x 4
    outputs turns the error's 2 * 2^-12 into 2^-13 / 2^14 = 2^-25 per output.

    Example:
        >>> layer, x, target = tiny_gradient_layer()
        >>> x.shape, target.shape
        (torch.Size([4096, 16]), torch.Size([4096, 4]))
    """
    gen = torch.Generator().manual_seed(seed)
    layer = nn.Linear(16, 4, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randint(-3, 4, (4, 16), generator=gen))
    x = torch.randint(-3, 4, (4096, 16), generator=gen).float()
    target = layer(x).detach() + 2**-12
    return layer, x, target


RUNS = (
    ("fp32", torch.float32, 1),
    ("fp16", torch.float16, 1),
    ("bf16", torch.bfloat16, 1),
    ("fp16, x 2^16", torch.float16, 2**16),
)
"""(name, autocast dtype, loss scale) of each run of the lesson's gradient demo: the
last multiplies the loss by 2^16, `torch.amp.GradScaler`'s first scale."""
