"""Our scaler against torch's: one scripted run per scaler, compared bit for bit.

Notebook 03 trains the same tiny fp16-autocast model twice, with
``torch.amp.GradScaler`` and with ``amp_lessons.core.scaler.LossScaler``, pokes an inf
or nan into a gradient on cue, and compares what each step left behind. This is that
harness, small enough to read in the lesson; tests/test_scaler.py holds the wider one
(several optimizers, clipping, accumulation, resume, misuse). Bits are read with the
course's one bit-equality oracle, ``amp_lessons.core.formats.tensor_bits``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lessons.core.formats import tensor_bits
from amp_lessons.core.scaler import LossScaler  # noqa: F401  (used in the examples)

__all__ = ["first_difference", "scripted_run"]


def scripted_run(
    scaler: Any,
    data: Sequence[tuple[torch.Tensor, torch.Tensor]],
    inject: dict[int, float] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Train a small MLP with Adam under fp16 autocast, one step per ``(x, y)`` in
    ``data``, and return a snapshot of everything that moves after each step.

    ``scaler`` is a fresh ``torch.amp.GradScaler`` or ``LossScaler`` on ``x``'s device.
    ``inject`` maps a step (counted from 1) to a value written into one weight
    gradient after ``backward()``: a scripted "bad batch". The model is
    ``x.shape[1] -> 16 -> y.shape[1]``, initialised from ``seed`` (the caller's random
    state is left alone). Each snapshot holds ``scale`` (the scale used),
    ``skipped`` (the weights did not move), ``state_dict`` (as a string), and the
    ``tensor_bits`` of every gradient after unscaling, weight and Adam state tensor.

    Example:
        >>> gen = torch.Generator().manual_seed(0)
        >>> data = [(torch.randn(4, 8, generator=gen), torch.randn(4, 2, generator=gen))
        ...         for _ in range(3)]
        >>> kwargs = dict(init_scale=1024.0, growth_interval=1)
        >>> inject = {2: float("inf")}  # step 2: an inf in one gradient
        >>> theirs = scripted_run(torch.amp.GradScaler("cpu", **kwargs), data, inject)
        >>> ours = scripted_run(LossScaler("cpu", **kwargs), data, inject)
        >>> [(h["scale"], h["skipped"]) for h in ours]  # grow, overflow, back off
        [(1024.0, False), (2048.0, True), (1024.0, False)]
        >>> first_difference(theirs, ours) is None  # every bit the same
        True
    """
    inject = {} if inject is None else inject
    _check_script(data, inject)
    model = _seeded_model(*data[0], seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return [
        _scripted_step(scaler, model, optimizer, x, y, inject.get(step))
        for step, (x, y) in enumerate(data, start=1)
    ]


def _check_script(data: Sequence, inject: dict[int, float]) -> None:
    """ValueError unless ``data`` has a batch and every injected step is one of its."""
    if not data:
        raise ValueError("data is empty: pass a list of (x, y) batches, one per step.")
    if bad := sorted(step for step in inject if not 1 <= step <= len(data)):
        raise ValueError(
            f"inject has steps {bad} outside this run's steps 1..{len(data)}; steps "
            "are counted from 1, one per (x, y) batch in data."
        )


def _seeded_model(x: torch.Tensor, y: torch.Tensor, seed: int) -> nn.Sequential:
    """``x.shape[1] -> 16 -> y.shape[1]`` on ``x``'s device, the same every call."""
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(x.shape[1], 16), nn.ReLU(), nn.Linear(16, y.shape[1])
        ).to(x.device)


def _scripted_step(
    scaler: Any,
    model: nn.Sequential,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    bad: float | None,
) -> dict[str, Any]:
    """One fp16-autocast step through ``scaler`` (``bad``, when given, written into a
    weight gradient after ``backward()``) and the snapshot scripted_run keeps."""
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    if bad is not None:
        model[0].weight.grad[0, 0] = bad
    used = scaler.get_scale()
    before = [tensor_bits(p) for p in model.parameters()]
    scaler.step(optimizer)
    scaler.update()
    after = [tensor_bits(p) for p in model.parameters()]
    adam = [t for state in optimizer.state.values() for t in state.values()]
    snapshot = {
        "scale": used,
        "skipped": all(map(torch.equal, before, after)),
        "state_dict": repr(scaler.state_dict()),
        "grads": [tensor_bits(p.grad) for p in model.parameters()],
        "params": after,
        "adam": [tensor_bits(t) for t in adam],
    }
    optimizer.zero_grad(set_to_none=True)
    return snapshot


def first_difference(
    theirs: list[dict[str, Any]], ours: list[dict[str, Any]]
) -> tuple[int, str] | None:
    """``(step, key)`` where two ``scripted_run`` histories first differ; None if every
    snapshot is identical (tensors compared with ``torch.equal``: snapshot them with
    ``tensor_bits``).

    Example:
        >>> same = [{"scale": 8.0, "params": [torch.tensor([1, 2])]}]
        >>> first_difference(same, same)
        >>> planted = [{"scale": 8.0, "params": [torch.tensor([1, 3])]}]
        >>> first_difference(same, planted)
        (1, 'params')
    """
    if len(theirs) != len(ours):
        raise ValueError(
            f"the histories have {len(theirs)} and {len(ours)} steps; compare runs "
            "over the same data."
        )
    for step, (a, b) in enumerate(zip(theirs, ours, strict=True), start=1):
        if a.keys() != b.keys():
            raise ValueError(f"step {step}: snapshot keys {a.keys()} vs {b.keys()}")
        for key, value in a.items():
            if isinstance(value, list):
                other = b[key]
                same = len(value) == len(other) and all(map(torch.equal, value, other))
            else:
                same = value == b[key]
            if not same:
                return step, key
    return None
