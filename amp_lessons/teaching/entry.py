"""The entry lesson's demo material (notebooks/00_amp_in_10_minutes).

`tiny_gradient_layer` builds a layer whose output gradients are all exactly 2^-25,
so that fp16 loses every one of them and bf16 keeps them; `note_prediction` and
`reveal_prediction` take the reader's guess of how many survive before the count and
hold it up against the count after (the guess is never graded); `GPU_ROWS` names the
published runs the lesson's table quotes (`amp_lessons.measure.published`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from amp_lessons.i18n import _

__all__ = [
    "GPU_ROWS",
    "PREDICTION_CHOICES",
    "RUNS",
    "measured_choice",
    "note_prediction",
    "reveal_prediction",
    "tiny_gradient_layer",
]

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


PREDICTION_CHOICES = {"a": (64, 64), "b": (0, 64), "c": (0, 0), "d": (32, 64)}
"""The lesson's prediction: how many of the 64 weight gradients are not 0, (fp16,
bf16), for each letter the lesson offers ("d" is "about 32 and 64")."""


def measured_choice(fp16: int, bf16: int) -> str | None:
    """The letter of PREDICTION_CHOICES that counts of (fp16, bf16) gradients not 0
    match, or None where none does ("about 32": 16 to 48).

    Example:
        >>> measured_choice(0, 64)
        'b'
    """
    for letter, (want16, want_bf16) in PREDICTION_CHOICES.items():
        near = abs(fp16 - want16) <= 16 if letter == "d" else fp16 == want16
        if near and bf16 == want_bf16:
            return letter
    return None


def _as_letter(prediction: Any) -> str | None:
    if not isinstance(prediction, str):
        return None
    letter = str.__str__(prediction).strip().strip("()").lower()
    return letter if letter in PREDICTION_CHOICES else None


def note_prediction(prediction: Any) -> None:
    """Print that the reader's prediction is taken, without a word on whether it is
    right (the count after it says that); a blank or odd one gets what to write.

    Example:
        >>> note_prediction("b")
        Your prediction: (b). Run the next cell: it counts.
    """
    letter = _as_letter(prediction)
    if letter:
        print(
            _("Your prediction: ({letter}). Run the next cell: it counts.").format(
                letter=letter
            )
        )
    elif prediction in ("", None):
        print(
            _(
                "No prediction yet: put a letter, a to d, between the quotes and run "
                "this cell again (or run on and just watch)."
            )
        )
    else:
        print(
            _(
                "{value} is not a letter from a to d: put one between the quotes."
            ).format(value=repr(prediction)[:40])
        )


def reveal_prediction(prediction: Any, kept: dict[str, int]) -> None:
    """Print the count of gradients not 0 in fp16 and bf16 (``kept``, as the lesson's
    run measured them), the letter it makes, and the reader's prediction beside it.

    Example:
        >>> reveal_prediction("a", {"fp16": 0, "bf16": 64})
        Measured: fp16 kept 0 of 64, bf16 64 of 64: that is (b).
        You predicted (a): not what happened; the next paragraph says why.
    """
    measured = measured_choice(kept["fp16"], kept["bf16"])
    counted = _("Measured: fp16 kept {fp16} of 64, bf16 {bf16} of 64").format(
        fp16=kept["fp16"], bf16=kept["bf16"]
    )
    if measured:
        print(counted + _(": that is ({letter}).").format(letter=measured))
    else:
        print(counted + _(": none of the four choices."))
    letter = _as_letter(prediction)
    if letter is None:
        print(_("You made no prediction: next time, guess first; it sticks better."))
    elif letter == measured:
        print(_("You predicted ({letter}): right.").format(letter=letter))
    else:
        print(
            _(
                "You predicted ({letter}): not what happened; the next paragraph says "
                "why."
            ).format(letter=letter)
        )
