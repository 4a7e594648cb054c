"""The real AMP training loop: one code path for fp32, tf32, fp16 and bf16, with
checkpoints that resume bit for bit.

Notebook 05 walks through it. The loop is nanoGPT's, written with the current API:

    ctx = torch.amp.autocast(device_type, dtype=dtype, enabled=precision.autocast)
    scaler = torch.amp.GradScaler(device_type, enabled=precision.needs_scaler)
    scale -> backward -> unscale_ -> clip -> step -> update -> zero_grad(set_to_none)

The precisions are ``amp_lessons.core.precision``'s; the models and data of the two
built-in tasks (``"spirals"``, ``"gpt"``) are ``amp_lessons.core.models``'.

Across processes (lesson 10, ``distributed="ddp"`` or ``"fsdp2"`` under torchrun) it is
the same loop: an ``amp_lessons.core.distributed.World`` wraps the model, gives each
rank its slice of the global batch, averages the loss and checks that every rank skipped
the same steps; with ``distributed="none"`` all of that is the identity.

A run's settings and the one place they are checked (``TrainConfig``,
``plan_training``) are ``amp_lessons.core.train_config``'s, named here too.

Not covered here: fused optimizers that take the scale themselves, learning-rate
schedules.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

# StepRecord: what a checkpoint keeps per step
from amp_lessons.core.checkpoints import (
    CHECKPOINT_FORMAT,
    StepRecord,
    load_checkpoint,
    save_checkpoint,
)
from amp_lessons.core.distributed import (
    World,
    load_sharded,
    save_sharded,
    start_world,
    wrap_model,
)
from amp_lessons.core.errors import SettingError
from amp_lessons.core.models import GPT, MLP, make_spirals, make_tokens
from amp_lessons.core.precision import (
    SlowOnThisDeviceWarning,
    autocast_context,
    make_scaler,
    slow_note,
    tf32_mode,
)
from amp_lessons.core.train_config import (
    RESUME_MUST_MATCH,
    TASKS,
    TrainConfig,
    TrainPlan,
    plan_training,
    validate_checkpoint_path,
    validate_config,
    validate_model,
    validate_resume,
)
from amp_lessons.i18n import _

# The run's settings and their checks live in train_config; they are named here too,
# where notebooks and callers import them with the loop (and load_checkpoint, to read
# back what a run saved).
__all__ = [
    "RESUME_MUST_MATCH",
    "TASKS",
    "Task",
    "TrainConfig",
    "TrainPlan",
    "TrainResult",
    "StepRecord",
    "StepStats",
    "evaluate",
    "format_record",
    "load_checkpoint",
    "plan_training",
    "train",
    "train_step",
    "validate_checkpoint_path",
    "validate_config",
    "validate_model",
    "validate_resume",
]


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What ``train`` returns: per-step records, final evaluation, the objects."""

    config: TrainConfig
    records: list[StepRecord]
    eval_loss: float
    eval_accuracy: float
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Any
    device: str
    notes: list[str] = field(default_factory=list)
    world_size: int = 1  # processes that trained together
    rank: int = 0  # this process among them

    @property
    def losses(self) -> list[float]:
        return [r.loss for r in self.records]

    @property
    def scales(self) -> list[float]:
        return [r.scale for r in self.records]

    @property
    def num_skipped(self) -> int:
        return sum(r.skipped for r in self.records)


# ---------------------------------------------------------------------------
# Tasks: data, model and loss for each built-in problem
# ---------------------------------------------------------------------------


class Task:
    """A synthetic problem: a model factory, a batch stream and a loss.

    The batch stream draws from its own generator (``self.generator``), whose state a
    checkpoint saves, so a resumed run sees the same batches as an unbroken one.
    """

    def __init__(self, config: TrainConfig, device: torch.device):
        self.config = config
        self.device = device
        self.generator = torch.Generator().manual_seed(config.seed + 1)
        fixed = torch.Generator().manual_seed(config.seed + 2)
        if config.task == "spirals":
            x, y = make_spirals(4096, config.num_classes, generator=fixed)
            self.train_x, self.train_y = x[:3072].to(device), y[:3072].to(device)
            self.eval_x, self.eval_y = x[3072:].to(device), y[3072:].to(device)
        else:
            x, y = make_tokens(64, config.block_size, config.vocab_size, fixed)
            self.eval_x, self.eval_y = x.to(device), y.to(device)

    @property
    def default_lr(self) -> float:
        return 1e-2 if self.config.task == "spirals" else 3e-3

    def make_model(self) -> nn.Module:
        c = self.config
        if c.task == "spirals":
            return MLP((2, c.hidden, c.hidden, c.num_classes))
        return GPT(c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        if c.task == "spirals":
            idx = torch.randint(
                len(self.train_x), (c.batch_size,), generator=self.generator
            ).to(self.device)
            return self.train_x[idx], self.train_y[idx]
        x, y = make_tokens(c.batch_size, c.block_size, c.vocab_size, self.generator)
        return x.to(self.device), y.to(self.device)

    @staticmethod
    def loss_fn(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), y.reshape(-1))


# ---------------------------------------------------------------------------
# The step, evaluation, checkpoints
# ---------------------------------------------------------------------------


@dataclass
class StepStats:
    loss: torch.Tensor  # 0-d, detached
    grad_norm: torch.Tensor
    scale: float
    skipped: bool


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    ctx,
    micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    clip: float | None = None,
) -> StepStats:
    """One optimizer step over ``len(micro_batches)`` accumulated micro-batches.

    The order is the one that works for every precision: scale -> backward (per
    micro-batch) -> unscale_ -> clip -> step -> update -> zero_grad(set_to_none).
    A step is "skipped" when the scale went down in ``update()``: the scaler found
    inf/NaN gradients and did not call ``optimizer.step()``.

    Example::

        stats = train_step(model, optimizer, scaler, ctx, [(x, y)], F.cross_entropy)
        stats.loss.item(), stats.skipped
    """
    scale = scaler.get_scale()
    total = torch.zeros((), device=micro_batches[0][0].device)
    for x, y in micro_batches:
        with ctx:
            # divide so the accumulated gradient is that of the mean loss
            loss = loss_fn(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
        total += loss.detach().float()
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    grad_norm = torch.nn.utils.clip_grad_norm_(
        model.parameters(), clip if clip is not None else math.inf
    )
    scaler.step(optimizer)  # skips optimizer.step() if any gradient is inf/NaN
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    skipped = scaler.is_enabled() and scaler.get_scale() < scale
    return StepStats(total, grad_norm.detach(), scale, skipped)


def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ctx,
    loss_fn: Callable = Task.loss_fn,
) -> tuple[float, float]:
    """Loss and accuracy under autocast, without a scaler and without autograd.

    Example: ``evaluate(model, x, y, ctx)`` -> ``(0.08, 0.98)``.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), ctx:
            output = model(x)
            loss = loss_fn(output, y)
            accuracy = (output.argmax(-1) == y).float().mean()
    finally:
        model.train(was_training)
    return loss.item(), accuracy.item()


# ---------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------


def train(
    config: TrainConfig | TrainPlan,
    model: nn.Module | None = None,
    log: Callable[[str], None] = print,
) -> TrainResult:
    """Train on a built-in synthetic task and return the per-step records.

    Everything is checked (``plan_training``; a ``TrainPlan`` is taken as checked)
    before the model, the optimizer or a checkpoint is touched. With ``checkpoint_path``
    the state (model, optimizer, scaler, step, RNGs, records) is saved atomically;
    ``resume=True`` continues from it, bit for bit on a CPU. Distributed runs save a
    sharded (DCP) checkpoint directory, which any number of processes can resume;
    their result holds the wrapped model (DDP or FSDP2), whose process group ended.

    ``model``: your own module for the task (default: the built-in one); it must take
    the task's inputs (spirals: (B, 2) floats; gpt: (B, T) token ids).

    Example::

        result = train(TrainConfig(device="cpu", precision="bf16", num_steps=200))
        result.losses[0], result.losses[-1], result.num_skipped  # 1.1, 0.1, 0
    """
    plan = _the_plan(config, model)
    config = plan.config
    # -- nothing was touched so far; from here on we build and train --
    notes = _warn_if_slow(plan)
    world = start_world(config.distributed, plan.device)  # mode none: a world of one
    try:
        device = world.device  # under torchrun on CUDA: this rank's own GPU
        run = _build(plan, world, device)
        task, model, ctx = run.task, run.model, run.ctx
        optimizer, scaler, records = run.optimizer, run.scaler, run.records
        with tf32_mode(plan.precision.tf32, device.type):
            model.train()
            for step in range(len(records) + 1, config.num_steps + 1):
                t0 = time.perf_counter()
                batches = [
                    world.split(*task.batch()) for _ in range(config.accum_steps)
                ]
                stats = train_step(
                    model, optimizer, scaler, ctx, batches, task.loss_fn, config.clip
                )
                # the mean over the global batch; the same skip on every rank
                loss, skipped = world.combine(stats.loss, stats.skipped)
                records.append(_record(step, stats, loss, skipped, t0))
                if world.rank == 0 and _log_due(config, step):
                    log(format_record(records[-1], sum(r.skipped for r in records)))
                if _checkpoint_due(config, step):
                    _save(run)
            eval_loss, eval_accuracy = _save_and_evaluate(run)
        if world.world_size > 1:
            world.barrier()  # every rank done talking before any ends the group
    finally:
        world.close()
    return _result(run, eval_loss, eval_accuracy, notes)


def _warn_if_slow(plan: TrainPlan) -> list[str]:
    """Warn when the precision is slow on the plan's device; the notes it warned."""
    notes = [n for n in [slow_note(plan.precision, plan.device)] if n]
    for note in notes:
        warnings.warn(note, SlowOnThisDeviceWarning, stacklevel=3)  # train's caller
    return notes


def _record(
    step: int, stats: StepStats, loss: float, skipped: bool, t0: float
) -> StepRecord:
    """What the step's record keeps: ``loss`` and ``skipped`` as the ranks agreed."""
    grad_norm = stats.grad_norm.item()  # syncs a GPU: the time below includes the step
    return StepRecord(
        step, loss, stats.scale, skipped, grad_norm, 1e3 * (time.perf_counter() - t0)
    )


def _log_due(config: TrainConfig, step: int) -> bool:
    # every log_every steps, and the first and last step (0: never)
    return bool(
        config.log_every
        and (step % config.log_every == 0 or step in (1, config.num_steps))
    )


def _checkpoint_due(config: TrainConfig, step: int) -> bool:
    # every checkpoint_every steps (0: only at the end)
    return bool(
        config.checkpoint_path
        and config.checkpoint_every
        and step % config.checkpoint_every == 0
    )


def _save_and_evaluate(run: _Run) -> tuple[float, float]:
    """The end of the loop: the last checkpoint, then the held-out loss and accuracy."""
    if run.config.checkpoint_path:
        _save(run)
    task = run.task
    return evaluate(run.model, task.eval_x, task.eval_y, run.ctx, task.loss_fn)


def _result(
    run: _Run, eval_loss: float, eval_accuracy: float, notes: list[str]
) -> TrainResult:
    return TrainResult(
        run.config,
        run.records,
        eval_loss,
        eval_accuracy,
        run.model,
        run.optimizer,
        run.scaler,
        str(run.device),
        notes,
        run.world.world_size,
        run.world.rank,
    )


def _the_plan(config: TrainConfig | TrainPlan, model: nn.Module | None) -> TrainPlan:
    if not isinstance(config, TrainPlan):
        return plan_training(config, model)
    if model is not None:  # the plan checked its own model (or none) already
        raise TypeError(
            "a TrainPlan carries its model: pass it to plan_training "
            "(train(plan_training(config, model))), not to train"
        )
    return config


@dataclass
class _Run:
    """What a training run carries from step to step, and what its checkpoint saves
    and restores: the objects ``_build`` makes, as ``train`` uses them."""

    config: TrainConfig
    world: World
    device: torch.device
    task: Task
    model: nn.Module  # wrapped (DDP or FSDP2) in a distributed run
    ctx: Any  # the autocast context
    optimizer: torch.optim.Optimizer
    scaler: Any
    records: list[StepRecord]


def _build(plan: TrainPlan, world: World, device: torch.device) -> _Run:
    """The task, model, autocast context, optimizer, scaler and step records a run
    starts from: new, or as its checkpoint left them."""
    config = plan.config
    torch.manual_seed(config.seed)  # model init; a checkpoint restores the state
    task = Task(config, device)
    model = plan.model if plan.model is not None else task.make_model()
    model, ctx = wrap_model(
        model, world, plan.precision, autocast_context(plan.precision, device)
    )
    lr = config.lr if config.lr is not None else task.default_lr
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr, weight_decay=config.weight_decay
    )
    scaler = make_scaler(
        plan.precision, device, config.scaler, config.init_scale, config.growth_interval
    )
    run = _Run(config, world, device, task, model, ctx, optimizer, scaler, [])
    if plan.saved is not None:
        try:
            _restore(plan.saved, run)
        except (RuntimeError, ValueError, KeyError, TypeError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise SettingError(
                f"{config.checkpoint_path}: its saved state does not fit this run "
                f"({reason[:120]}); start a new run with another `checkpoint_path`"
            ) from None
        run.records = [StepRecord(**r) for r in plan.saved["records"]]
    return run


def format_record(record: StepRecord, skipped_so_far: int) -> str:
    """One log line. Example: ``step   10 | loss 0.8123 | scale 65536 | skipped 0 |
    grad_norm 1.234 | 2.1 ms``."""
    return _(
        "step {step:4d} | loss {loss:.4f} | scale {scale:g} | skipped {skipped} "
        "| grad_norm {grad_norm:.3g} | {ms:.1f} ms"
    ).format(
        step=record.step,
        loss=record.loss,
        scale=record.scale,
        skipped=skipped_so_far,
        grad_norm=record.grad_norm,
        ms=record.time_ms,
    )


def _save(run: _Run) -> None:
    """One process: ``save_checkpoint``'s single file. Several (or a distributed
    mode): a DCP directory of shards plus the plain state as JSON."""
    if not run.world.distributed:
        save_checkpoint(run.config.checkpoint_path, _snapshot(run))
        return
    meta = {
        "step": len(run.records),
        "config": asdict(run.config),
        "world_size": run.world.world_size,
        "scaler": run.scaler.state_dict(),
        "records": [asdict(r) for r in run.records],
    }
    save_sharded(
        run.config.checkpoint_path,
        run.world,
        run.model,
        run.optimizer,
        {
            "data_rng": run.task.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
        },
        meta,
    )


def _snapshot(run: _Run) -> dict:
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return {
        "format": CHECKPOINT_FORMAT,
        "step": len(run.records),
        "config": asdict(run.config),
        "model": run.model.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "scaler": run.scaler.state_dict(),
        "data_rng": run.task.generator.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": cuda_rng,
        "records": [asdict(r) for r in run.records],
    }


def _restore(saved, run: _Run) -> None:
    """Load ``saved`` (a checkpoint's state) into ``run``'s model, optimizer, scaler
    and random generators; a distributed run reads its shards from its checkpoint."""
    if run.scaler.is_enabled():
        run.scaler.load_state_dict(saved["scaler"])
    generator = run.task.generator
    if run.world.distributed:  # saved is the JSON part; the shards are read here
        rng = {"data_rng": generator.get_state(), "torch_rng": torch.get_rng_state()}
        load_sharded(run.config.checkpoint_path, run.model, run.optimizer, rng)
        generator.set_state(rng["data_rng"])
        torch.set_rng_state(rng["torch_rng"])
        return
    run.model.load_state_dict(saved["model"])
    run.optimizer.load_state_dict(saved["optimizer"])  # moves state to params' device
    generator.set_state(saved["data_rng"])
    torch.set_rng_state(saved["torch_rng"])
    if saved["cuda_rng"] is not None and run.device.type == "cuda":
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
