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

Not covered here: fused optimizers that take the scale themselves, learning-rate
schedules.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
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
from amp_lessons.core.device import resolve_device
from amp_lessons.core.distributed import (
    META_FILE,
    MODES,
    World,
    load_sharded,
    read_meta,
    save_sharded,
    start_world,
    wrap_model,
)
from amp_lessons.core.errors import SettingError
from amp_lessons.core.models import GPT, MLP, make_spirals, make_tokens
from amp_lessons.core.output_files import validate_output_path
from amp_lessons.core.precision import (
    Precision,
    SlowOnThisDeviceWarning,
    autocast_context,
    make_scaler,
    resolve_precision,
    slow_note,
    tf32_mode,
    validate_scaler_choice,
)
from amp_lessons.core.scaler import round_to_float32
from amp_lessons.i18n import _

TASKS = ("spirals", "gpt")


# ---------------------------------------------------------------------------
# Configuration and results
# ---------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Everything one run depends on. ``TrainConfig()`` trains the spirals in bf16.

    Example: ``train(TrainConfig(precision="fp16", num_steps=100, device="cpu"))``.
    """

    task: str = "spirals"  # "spirals" (MLP classifier) or "gpt" (small transformer)
    device: str = "auto"
    precision: str = "bf16"
    scaler: str = "auto"  # auto | torch | ours | none
    num_steps: int = 200  # optimizer steps
    batch_size: int = 128  # per micro-batch, all processes together (the global batch)
    accum_steps: int = 1  # micro-batches per optimizer step
    lr: float | None = None  # None: 1e-2 for spirals, 3e-3 for gpt
    weight_decay: float = 0.0
    clip: float | None = 1.0  # max gradient norm (after unscale_); None: no clipping
    init_scale: float = 2.0**16
    growth_interval: int = 2000
    seed: int = 0
    hidden: int = 64  # spirals: MLP width
    num_classes: int = 3
    n_layer: int = 2  # gpt sizes
    n_head: int = 2
    n_embd: int = 64
    block_size: int = 32
    vocab_size: int = 64
    log_every: int = 0  # print a line every N steps (0: silent)
    checkpoint_path: str | None = None
    checkpoint_every: int = 0  # 0: save only at the end (when a path is given)
    resume: bool = False  # continue from checkpoint_path
    distributed: str = "none"  # none | ddp | fsdp2 (see amp_lessons.core.distributed)


# Changing these between a checkpoint and its resume changes what the saved state
# means (shapes, scaler state, data stream), so a resume refuses to mix them.
RESUME_MUST_MATCH = (
    "task",
    "precision",
    "scaler",
    "seed",
    "hidden",
    "num_classes",
    "n_layer",
    "n_head",
    "n_embd",
    "block_size",
    "vocab_size",
    "batch_size",
    "accum_steps",
)


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


@dataclass(frozen=True)
class TrainPlan:
    """A ``TrainConfig`` that passed every check, with what the checks found out.

    ``plan_training`` makes it; ``train`` accepts one in place of a config, so a caller
    that shows the device or precision first (the command line's header) checks once.
    """

    config: TrainConfig
    device: torch.device  # resolved: "auto" became cuda, mps or cpu
    precision: Precision
    model: nn.Module | None  # the caller's own model, checked against the precision
    saved: dict | None  # the checkpoint a resume continues from, read once


def plan_training(config: TrainConfig, model: nn.Module | None = None) -> TrainPlan:
    """Every check a run needs, made once, before anything is built or written.

    The fields (``validate_config``), the device and precision this machine must run,
    the scaler, ``model`` (when given), the global batch against torchrun's process
    count, the checkpoint path, and for ``resume=True`` the checkpoint itself, read
    here and kept in the plan so the run does not read it again.

    Example: ``plan_training(TrainConfig(device="cpu")).precision.name`` -> ``'bf16'``;
    ``plan_training(TrainConfig(num_steps=0))`` raises "num_steps must be a positive
    integer, got 0".
    """
    config = replace(config)  # the plan's own copy: a later edit cannot skip a check
    validate_config(config)
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device, warn=False)
    validate_scaler_choice(precision, config.scaler)
    if model is not None:
        validate_model(
            model, precision, precision.needs_scaler and config.scaler != "none"
        )
    # under torchrun every rank takes an equal slice of the global batch
    processes = (
        int(os.environ.get("WORLD_SIZE", "1")) if config.distributed != "none" else 1
    )
    World(config.distributed, world_size=processes).check_batch(config.batch_size)
    validate_checkpoint_path(config)
    return TrainPlan(config, device, precision, model, validate_resume(config))


def _is_integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)  # True is an int to Python


def _is_real(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _is_scale(x: Any) -> bool:
    # what a float32 scale tensor holds: 1e39 would become inf, 1e-46 zero
    return _is_real(x) and 0 < round_to_float32(x) < math.inf


# Each numeric field, the test its value must pass, and what it must be: the one rule
# for each number, whoever builds the config (the command line only converts text).
_NUMBER_RULES = (
    (
        (
            "num_steps",
            "batch_size",
            "accum_steps",
            "growth_interval",
            "hidden",
            "num_classes",
            "n_layer",
            "n_head",
            "n_embd",
            "block_size",
            "vocab_size",
        ),
        lambda x: _is_integer(x) and x >= 1,
        "a positive integer",
    ),
    (
        ("log_every", "checkpoint_every"),
        lambda x: _is_integer(x) and x >= 0,
        "an integer >= 0 (0 turns it off)",
    ),
    (
        ("lr",),
        lambda x: x is None or (_is_real(x) and x > 0),
        "a finite number > 0 (an infinite or NaN learning rate makes every weight NaN)",
    ),
    (
        ("clip",),
        lambda x: x is None or (_is_real(x) and x > 0),
        "a finite number > 0, or `clip=None` for no clipping",
    ),
    (("weight_decay",), lambda x: _is_real(x) and x >= 0, "a finite number >= 0"),
    (
        ("init_scale",),
        _is_scale,
        "a finite number > 0 that float32 can hold (up to about 3.4e38)",
    ),
    (
        ("seed",),
        lambda x: _is_integer(x) and 0 <= x < 2**63,
        "an integer in [0, 2**63), the seeds torch's generators take",
    ),
)


def validate_config(config: TrainConfig) -> None:
    """Check every field on its own, before anything is built (``plan_training`` calls
    it, with the checks that need the machine or the files).

    Example: ``validate_config(TrainConfig(accum_steps=0))`` raises "accum_steps must
    be a positive integer, got 0".
    """
    if config.task not in TASKS:
        raise SettingError(
            f"unknown `task` {config.task!r}; use one of: {', '.join(TASKS)}"
        )
    for names, ok, what in _NUMBER_RULES:
        for name in names:
            if not ok(value := getattr(config, name)):
                raise SettingError(f"`{name}` must be {what}, got {value!r}")
    if config.resume and not config.checkpoint_path:
        raise SettingError(
            "`resume=True` needs `checkpoint_path`, the checkpoint to continue from"
        )
    if config.checkpoint_every and not config.checkpoint_path:
        raise SettingError(
            "`checkpoint_every` needs `checkpoint_path`, the file to save to"
        )
    if config.distributed not in MODES:
        raise SettingError(
            f"unknown `distributed` mode {config.distributed!r}; use "
            f"one of: {', '.join(MODES)}"
        )
    if config.distributed == "fsdp2" and config.scaler == "ours":
        raise SettingError(
            "`scaler='ours'` checks plain tensors, and FSDP2's gradients are DTensor "
            "shards (its inf check would have to be reduced over the ranks). Fix: "
            "`scaler='auto'` (torch's GradScaler) with fsdp2, or 'ours' with "
            "`distributed='ddp'` or 'none'."
        )


def validate_checkpoint_path(config: TrainConfig) -> None:
    """Refuse, before any training, a checkpoint path the run could not write at the
    end (a directory, a folder without write permission, ...).

    Example: ``validate_checkpoint_path(TrainConfig(checkpoint_path="/tmp"))`` raises
    "checkpoint_path /tmp is a directory; give a file name inside it, e.g.
    /tmp/run.pt".
    """
    if not config.checkpoint_path:
        return
    path = Path(config.checkpoint_path).expanduser()
    if config.distributed == "none" and (
        (path / META_FILE).is_file() or (path / ".metadata").is_file()
    ):
        raise SettingError(  # a DCP folder is no mistake: it needs the sharded path
            f"`checkpoint_path` {path} is a sharded checkpoint (a torch.distributed."
            "checkpoint folder written by `distributed='ddp'` or "
            "`distributed='fsdp2'`), not a `distributed='none'` file. Fix: "
            f"{'resume' if config.resume else 'run'} with `distributed='fsdp2'` (or "
            "`distributed='ddp'`), which also works in one process."
        )
    # one process writes a file; a distributed run a DCP folder with its metadata
    target = path if config.distributed == "none" else path / META_FILE
    validate_output_path(target, "`checkpoint_path`")


def validate_resume(config: TrainConfig) -> dict | None:
    """The checkpoint a ``resume=True`` run continues from, once it is known to fit:
    ours, written with the same settings, and at a step below ``num_steps``.

    Example: resuming a 150-step checkpoint with ``num_steps=100`` raises "... is
    already at step 150 ... nothing to train".
    """
    if not config.resume:
        return None
    path = config.checkpoint_path
    saved = (
        load_checkpoint(path) if config.distributed == "none" else read_meta(path)
    )  # a DCP folder: its shards are read by _restore
    _refuse_incompatible_resume(saved["config"], config, path)
    if saved["step"] >= config.num_steps:
        raise SettingError(
            f"{path} is already at step {saved['step']}, and "
            f"`num_steps={config.num_steps}` is the total to reach: nothing to "
            f"train. Set `num_steps` above {saved['step']} to continue."
        )
    return saved


def validate_model(
    model: nn.Module, precision: Precision, scaler_enabled: bool
) -> None:
    """Refuse a model whose weights cannot train in this precision, before any step.

    Example: ``validate_model(nn.Linear(2, 2).half(), PRECISIONS["fp16"], True)`` raises
    (torch's GradScaler would fail later with "Attempting to unscale FP16 gradients").
    """
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    low = sorted(str(d).removeprefix("torch.") for d in dtypes - {torch.float32})
    if not low:
        return
    if scaler_enabled:
        raise SettingError(
            _(
                "the model's parameters are {dtypes} (model.half()?), but loss "
                "scaling needs float32 weights: torch's GradScaler stops with "
                "'Attempting to unscale FP16 gradients', and fp16 weights lose small "
                "updates anyway. Fix: keep the model in float32 (drop .half()) and let "
                "autocast cast each op to fp16; the fp32 weights are the master copy."
            ).format(dtypes=", ".join(low))
        )
    if not precision.autocast:
        raise SettingError(
            _(
                "the model's parameters are {dtypes}, but `precision={precision}` "
                "computes in float32. Fix: model.float(), or pick `precision='fp16'` "
                "or `precision='bf16'` and keep the weights in float32."
            ).format(dtypes=", ".join(low), precision=repr(precision.name))
        )


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


def _refuse_incompatible_resume(saved: dict, config: TrainConfig, path) -> None:
    now = asdict(config)
    diff = [
        f"{k}: checkpoint {saved.get(k)!r} vs now {now[k]!r}"
        for k in RESUME_MUST_MATCH
        if saved.get(k) != now[k]
    ]
    if diff:
        raise SettingError(
            f"cannot resume from {path}: the run's settings differ ("
            + "; ".join(diff)
            + "). Fix: resume with the same "
            "settings, or start a new run with another "
            "`checkpoint_path`."
        )


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
