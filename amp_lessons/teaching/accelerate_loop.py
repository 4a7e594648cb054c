"""The course's loop run by Hugging Face Accelerate, and what ``mixed_precision`` does
under the hood.

Lesson 10. ``Accelerator(mixed_precision="bf16")`` is the lesson-05 loop with the AMP
lines moved inside the library:

* ``prepare(model)`` wraps ``model.forward`` in ``torch.autocast`` and converts its
  outputs to fp32 (so the loss is computed in fp32 outside the autocast region);
* ``accelerator.backward(loss)`` is ``scaler.scale(loss).backward()`` when there is a
  scaler, and ``clip_grad_norm_`` unscales first;
* for fp16 it creates a ``GradScaler``, but on GPUs only: on a CPU, fp16 gets neither
  autocast nor a scaler, so the run is plain fp32;
* the prepared optimizer's ``step`` runs ``scaler.step`` + ``scaler.update`` and sets
  ``accelerator.optimizer_step_was_skipped`` when the scaler skipped the step.

On one process ``train_with_accelerate`` gives exactly the losses of
``amp_lessons.core.train.train``. Not covered here: Accelerate's DeepSpeed and FSDP
plugins, its data loaders, ``accelerate launch`` (torchrun works the same way).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from amp_lessons.core.device import resolve_device
from amp_lessons.core.train import Task, TrainConfig

# the course's precisions -> Accelerate's mixed_precision values
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def _require_accelerate():
    try:
        import accelerate
    except ImportError:
        raise ImportError(
            "Hugging Face Accelerate is not installed: pip install "
            "accelerate (it is in requirements.txt)"
        ) from None
    return accelerate


@contextmanager
def accelerator_for(precision: str, device: torch.device) -> Iterator:
    """An ``Accelerator`` for a course precision; forgotten again on exit.

    Accelerate keeps one process-wide state and refuses a second ``Accelerator``
    with another ``mixed_precision`` ("AcceleratorState has already been
    initialized"), so this resets that state afterwards, the way Accelerate's own
    test suite does: a notebook can then try bf16 after fp16.

    Example::

        with accelerator_for("bf16", torch.device("cpu")) as accelerator:
            model, optimizer = accelerator.prepare(model, optimizer)
    """
    _require_accelerate()
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    if precision not in MIXED_PRECISION:
        raise ValueError(
            f"Accelerate runs fp32, bf16 or fp16 (its mixed_precision "
            f"'no', 'bf16', 'fp16'), not {precision!r}"
        )
    accelerator = Accelerator(
        mixed_precision=MIXED_PRECISION[precision], cpu=device.type == "cpu"
    )
    try:
        yield accelerator
    finally:
        accelerator.free_memory()
        AcceleratorState._reset_state(reset_partial_state=True)


@dataclass
class AccelerateResult:
    """Per-step losses and skip flags of ``train_with_accelerate``."""

    losses: list[float]
    skipped: list[bool]
    final_scale: float | None  # None: Accelerate made no scaler
    facts: dict = field(default_factory=dict)


def train_with_accelerate(config: TrainConfig) -> AccelerateResult:
    """The course's task and loop, with Accelerate doing the AMP parts.

    Same seed, data, model, AdamW and clipping as ``amp_lessons.core.train.train``;
    under torchrun each process takes its slice of the global batch and the loss is
    averaged over processes, as in ``amp_lessons.core.distributed``.

    Example::

        result = train_with_accelerate(TrainConfig(device="cpu", num_steps=20))
        result.losses == [r.loss for r in train(config).records]  # True on one process
    """
    if config.accum_steps != 1:
        raise ValueError(
            "train_with_accelerate runs one micro-batch per step "
            "(accum_steps=1); Accelerate's own accumulate() is not "
            "covered here"
        )
    device = resolve_device(config.device)
    with accelerator_for(config.precision, device) as accelerator:
        n, rank = accelerator.num_processes, accelerator.process_index
        if config.batch_size % n:
            raise ValueError(
                f"--batch-size {config.batch_size} (the global batch) "
                f"must be a multiple of the {n} processes"
            )
        torch.manual_seed(config.seed)  # the same order as train(): data, then model
        task = Task(config, accelerator.device)
        model = task.make_model().to(accelerator.device)
        lr = config.lr if config.lr is not None else task.default_lr
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=lr, weight_decay=config.weight_decay
        )
        model, optimizer = accelerator.prepare(model, optimizer)
        model.train()
        losses, skipped = [], []
        b = config.batch_size // n
        for _ in range(config.num_steps):
            x, y = task.batch()
            x, y = x[rank * b : (rank + 1) * b], y[rank * b : (rank + 1) * b]
            output = model(x)  # autocast inside; output converted to fp32
            loss = task.loss_fn(output, y)
            accelerator.backward(loss)  # scaler.scale(loss).backward() for fp16 (GPU)
            accelerator.clip_grad_norm_(
                model.parameters(), config.clip if config.clip else float("inf")
            )
            optimizer.step()  # scaler.step + update when there is a scaler
            optimizer.zero_grad(set_to_none=True)
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
            skipped.append(accelerator.optimizer_step_was_skipped)
        scaler = accelerator.scaler
        return AccelerateResult(
            losses,
            skipped,
            scaler.get_scale() if scaler is not None else None,
            {"processes": n, **_facts(accelerator, model)},
        )


def _facts(accelerator, model: nn.Module) -> dict:
    return {
        "mixed_precision": accelerator.mixed_precision,
        "autocast": bool(accelerator.native_amp),
        "scaler": type(accelerator.scaler).__name__
        if accelerator.scaler is not None
        else None,
        "forward_wrapped": hasattr(
            accelerator.unwrap_model(model), "_original_forward"
        ),
    }


def under_the_hood(precision: str = "bf16", device: str = "cpu") -> dict:
    """What ``prepare`` did to a small model, observed rather than read in the docs.

    Returns the dtype of the last layer's output *inside* the forward (autocast's),
    the dtype ``model(x)`` returns (after Accelerate's fp32 conversion), whether it
    made autocast and a scaler, and whether ``forward`` was replaced.

    Example: ``under_the_hood("bf16")`` -> ``{'inside': torch.bfloat16, 'returned':
    torch.float32, 'autocast': True, 'scaler': None, ...}`` on a CPU;
    ``under_the_hood("fp16")`` on a CPU -> inside float32, autocast False, no scaler.
    """
    device = resolve_device(device)
    with accelerator_for(precision, device) as accelerator:
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
        seen = {}

        def record(module, args, output) -> None:  # returning None keeps the output
            seen["inside"] = output.dtype

        handle = accelerator.unwrap_model(model)[-1].register_forward_hook(record)
        try:
            returned = model(torch.randn(2, 4, device=accelerator.device)).dtype
        finally:
            handle.remove()
        return {
            "precision": precision,
            "inside": seen["inside"],
            "returned": returned,
            "parameters": next(model.parameters()).dtype,
            "optimizer": type(optimizer).__name__,
            **_facts(accelerator, model),
        }


def skipped_step_demo(init_scale: float = 4.0) -> dict:
    """Accelerate's skip bookkeeping with a real GradScaler, on any machine.

    On a GPU, ``Accelerator(mixed_precision="fp16")`` pairs its prepared optimizer
    (an ``AcceleratedOptimizer``) with a ``GradScaler``; here the same pair is built
    by hand with a CPU GradScaler, one gradient is set to inf, and the step is taken.
    Returns whether the step was skipped, whether the weights stayed as they were,
    and the scale before and after (halved).

    Example: ``skipped_step_demo()`` -> ``{'skipped': True, 'weights_unchanged': True,
    'scale_before': 4.0, 'scale_after': 2.0}``.
    """
    with accelerator_for("bf16", torch.device("cpu")):
        from accelerate.optimizer import AcceleratedOptimizer

        model = nn.Linear(2, 3)
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
        optimizer = AcceleratedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), scaler=scaler
        )
        before = model.weight.detach().clone()
        scaler.scale(model(torch.randn(4, 2)).sum()).backward()
        model.weight.grad[0, 0] = float("inf")  # an overflow in one gradient
        optimizer.step()  # scaler.step (skips) + scaler.update (halves the scale)
        return {
            "skipped": optimizer.step_was_skipped,
            "weights_unchanged": torch.equal(before, model.weight),
            "scale_before": init_scale,
            "scale_after": scaler.get_scale(),
        }
