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
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
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
RESUME_MUST_MATCH = ("task", "precision", "scaler", "seed", "hidden", "num_classes",
                     "n_layer", "n_head", "n_embd", "block_size", "vocab_size",
                     "batch_size", "accum_steps")


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


def validate_config(config: TrainConfig) -> None:
    """Check every field before anything is built, so a bad run changes nothing.

    Example: ``validate_config(TrainConfig(accum_steps=0))`` raises "accum_steps must
    be a positive integer".
    """
    if config.task not in TASKS:
        raise ValueError(f"unknown task {config.task!r}; use one of: "
                         f"{', '.join(TASKS)}")
    for name in ("num_steps", "batch_size", "accum_steps", "growth_interval",
                 "hidden", "num_classes", "n_layer", "n_head", "n_embd",
                 "block_size", "vocab_size"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for name in ("log_every", "checkpoint_every"):
        value = getattr(config, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if config.lr is not None and not _finite_positive(config.lr):
        raise ValueError(f"lr must be a finite number > 0, got {config.lr!r} (an "
                         "infinite or NaN learning rate makes every weight NaN)")
    if config.clip is not None and not _finite_positive(config.clip):
        raise ValueError(f"clip must be a finite number > 0 (or None for no "
                         f"clipping), got {config.clip!r}")
    if not (isinstance(config.weight_decay, int | float)
            and math.isfinite(config.weight_decay) and config.weight_decay >= 0):
        raise ValueError(f"weight_decay must be a finite number >= 0, got "
                         f"{config.weight_decay!r}")
    if (not isinstance(config.seed, int) or isinstance(config.seed, bool)
            or not 0 <= config.seed < 2**63):
        raise ValueError(f"seed must be an integer in [0, 2**63), got {config.seed!r}")
    if not (config.init_scale > 0 and math.isfinite(config.init_scale)):
        raise ValueError(f"init_scale must be a finite number > 0, got "
                         f"{config.init_scale!r}")
    if config.resume and not config.checkpoint_path:
        raise ValueError("resume=True needs checkpoint_path (--checkpoint PATH)")
    if config.checkpoint_every and not config.checkpoint_path:
        raise ValueError("checkpoint_every needs checkpoint_path (--checkpoint PATH)")
    if config.distributed not in MODES:
        raise ValueError(f"unknown distributed mode {config.distributed!r}; use one "
                         f"of: {', '.join(MODES)}")
    if config.distributed == "fsdp2" and config.scaler == "ours":
        raise ValueError(
            "--scaler ours checks plain tensors, and FSDP2's gradients are DTensor "
            "shards (its inf check would have to be reduced over the ranks). Fix: "
            "--scaler auto (torch's GradScaler) with fsdp2, or ours with ddp/none.")


def _finite_positive(x: Any) -> bool:
    return (isinstance(x, int | float) and not isinstance(x, bool)
            and math.isfinite(x) and x > 0)


def validate_checkpoint_path(config: TrainConfig) -> None:
    """Refuse, before any training, a checkpoint path the run could not write at the
    end (a directory, a folder without write permission, ...).

    Example: ``validate_checkpoint_path(TrainConfig(checkpoint_path="/tmp"))`` raises
    "--checkpoint /tmp is a directory; give a file name inside it, e.g. /tmp/run.pt".
    """
    path = Path(config.checkpoint_path or "").expanduser()
    if config.checkpoint_path and config.distributed == "none" and (
            (path / META_FILE).is_file() or (path / ".metadata").is_file()):
        raise ValueError(  # a DCP folder is no mistake: it needs the sharded path
            f"--checkpoint {path} is a sharded checkpoint (a torch.distributed."
            "checkpoint folder written by --distributed ddp or fsdp2), not a "
            f"--distributed none file. Fix: {'resume' if config.resume else 'run'} "
            "with --distributed fsdp2 (or ddp), which also works in one process.")
    if config.checkpoint_path and config.distributed == "none":
        validate_output_path(config.checkpoint_path, "--checkpoint")
    elif config.checkpoint_path:  # a DCP folder: its metadata file must be writable
        validate_output_path(Path(config.checkpoint_path) / META_FILE, "--checkpoint")


def validate_resume(config: TrainConfig) -> dict | None:
    """The checkpoint a ``resume=True`` run continues from, once it is known to fit:
    ours, written with the same settings, and at a step below ``num_steps``.

    Example: resuming a 150-step checkpoint with ``num_steps=100`` raises "... is
    already at step 150 ... nothing to train".
    """
    if not config.resume:
        return None
    path = config.checkpoint_path
    saved = (load_checkpoint(path) if config.distributed == "none"
             else read_meta(path))  # a DCP folder: its shards are read by _restore
    _refuse_incompatible_resume(saved["config"], config, path)
    if saved["step"] >= config.num_steps:
        raise ValueError(f"{path} is already at step {saved['step']}, and --steps "
                         f"{config.num_steps} is the total to reach: nothing to "
                         f"train. Pass --steps above {saved['step']} to continue.")
    return saved


def validate_model(model: nn.Module, precision: Precision,
                   scaler_enabled: bool) -> None:
    """Refuse a model whose weights cannot train in this precision, before any step.

    Example: ``validate_model(nn.Linear(2, 2).half(), PRECISIONS["fp16"], True)`` raises
    (torch's GradScaler would fail later with "Attempting to unscale FP16 gradients").
    """
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    low = sorted(str(d).removeprefix("torch.") for d in dtypes - {torch.float32})
    if not low:
        return
    if scaler_enabled:
        raise ValueError(
            f"the model's parameters are {', '.join(low)} (model.half()?), but loss "
            "scaling needs float32 weights: torch's GradScaler stops with "
            "'Attempting to unscale FP16 gradients', and fp16 weights lose small "
            "updates anyway. Fix: keep the model in float32 (drop .half()) and let "
            "autocast cast each op to fp16; the fp32 weights are the master copy.")
    if not precision.autocast:
        raise ValueError(
            f"the model's parameters are {', '.join(low)}, but precision "
            f"{precision.name} computes in float32. Fix: model.float(), or pick "
            "--precision fp16/bf16 and keep the weights in float32.")


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
            idx = torch.randint(len(self.train_x), (c.batch_size,),
                                generator=self.generator).to(self.device)
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


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any, ctx,
               micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               clip: float | None = None) -> StepStats:
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
        model.parameters(), clip if clip is not None else math.inf)
    scaler.step(optimizer)  # skips optimizer.step() if any gradient is inf/NaN
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    skipped = scaler.is_enabled() and scaler.get_scale() < scale
    return StepStats(total, grad_norm.detach(), scale, skipped)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx,
             loss_fn: Callable = Task.loss_fn) -> tuple[float, float]:
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
    diff = [f"{k}: checkpoint {saved.get(k)!r} vs now {now[k]!r}"
            for k in RESUME_MUST_MATCH if saved.get(k) != now[k]]
    if diff:
        raise ValueError(f"cannot resume from {path}: the run's settings differ ("
                         + "; ".join(diff) + "). Fix: resume with the same settings, "
                         "or start a new run with another --checkpoint path.")


# ---------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------


def train(config: TrainConfig, model: nn.Module | None = None,
          log: Callable[[str], None] = print) -> TrainResult:
    """Train on a built-in synthetic task and return the per-step records.

    Everything is checked before the model, the optimizer or a checkpoint is touched.
    With ``checkpoint_path`` the state (model, optimizer, scaler, step, RNGs, records)
    is saved atomically; ``resume=True`` continues from it and reproduces the
    uninterrupted run bit for bit on a CPU. Distributed runs save a sharded (DCP)
    checkpoint directory instead, which a run with another number of processes can
    resume. Their result holds the wrapped model (DDP or FSDP2), whose process
    group ended with the run.

    ``model``: your own module for the task (default: the built-in one); it must take
    the task's inputs (spirals: (B, 2) floats; gpt: (B, T) token ids).

    Example::

        result = train(TrainConfig(device="cpu", precision="bf16", num_steps=200))
        result.losses[0], result.losses[-1], result.num_skipped  # 1.1, 0.1, 0
    """
    validate_config(config)
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device, warn=False)
    validate_scaler_choice(precision, config.scaler)
    scaler_enabled = precision.needs_scaler and config.scaler != "none"
    if model is not None:
        validate_model(model, precision, scaler_enabled)
    validate_checkpoint_path(config)
    saved = validate_resume(config)

    # -- nothing was touched above; from here on we build and train --
    notes = [n for n in [slow_note(precision, device)] if n]
    for note in notes:
        warnings.warn(note, SlowOnThisDeviceWarning, stacklevel=2)
    world = start_world(config.distributed, device)  # mode none: a world of one
    try:
        world.check_batch(config.batch_size)
        device = world.device  # under torchrun on CUDA: this rank's own GPU
        torch.manual_seed(config.seed)  # model init; a checkpoint restores the state
        task = Task(config, device)
        if model is None:
            model = task.make_model()
        model, ctx = wrap_model(model, world, precision,
                                autocast_context(precision, device))
        lr = config.lr if config.lr is not None else task.default_lr
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr,
                                      weight_decay=config.weight_decay)
        scaler = make_scaler(precision, device, config.scaler, config.init_scale,
                             config.growth_interval)
        records: list[StepRecord] = []
        if saved is not None:
            try:
                _restore(saved, world, model, optimizer, scaler, task, device,
                         config.checkpoint_path)
            except (RuntimeError, ValueError, KeyError, TypeError) as e:
                reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ValueError(
                    f"{config.checkpoint_path}: its saved state does not fit this run "
                    f"({reason[:120]}); start a new run with another --checkpoint "
                    "path") from None
            records = [StepRecord(**r) for r in saved["records"]]

        def checkpoint() -> None:
            _save(config, world, model, optimizer, scaler, task, records)

        with tf32_mode(precision.tf32, device.type):
            model.train()
            for step in range(len(records) + 1, config.num_steps + 1):
                t0 = time.perf_counter()
                batches = [world.split(*task.batch())
                           for _ in range(config.accum_steps)]
                stats = train_step(model, optimizer, scaler, ctx, batches,
                                   task.loss_fn, config.clip)
                # the mean over the global batch; the same skip on every rank
                loss, skipped = world.combine(stats.loss, stats.skipped)
                grad_norm = stats.grad_norm.item()  # syncs a GPU
                records.append(StepRecord(step, loss, stats.scale, skipped, grad_norm,
                                          1e3 * (time.perf_counter() - t0)))
                if world.rank == 0 and config.log_every and (
                        step % config.log_every == 0 or step in (1, config.num_steps)):
                    log(format_record(records[-1], sum(r.skipped for r in records)))
                if (config.checkpoint_path and config.checkpoint_every
                        and step % config.checkpoint_every == 0):
                    checkpoint()
            if config.checkpoint_path:
                checkpoint()
            eval_loss, eval_accuracy = evaluate(model, task.eval_x, task.eval_y, ctx,
                                                task.loss_fn)
        if world.world_size > 1:
            world.barrier()  # every rank done talking before any ends the group
    finally:
        world.close()
    return TrainResult(config, records, eval_loss, eval_accuracy, model, optimizer,
                       scaler, str(device), notes, world.world_size, world.rank)


def format_record(record: StepRecord, skipped_so_far: int) -> str:
    """One log line. Example: ``step   10 | loss 0.8123 | scale 65536 | skipped 0 |
    grad_norm 1.234 | 2.1 ms``."""
    return (f"step {record.step:4d} | loss {record.loss:.4f} | scale "
            f"{record.scale:g} | skipped {skipped_so_far} | grad_norm "
            f"{record.grad_norm:.3g} | {record.time_ms:.1f} ms")


def _save(config, world: World, model, optimizer, scaler, task, records) -> None:
    """One process: ``save_checkpoint``'s single file. Several (or a distributed
    mode): a DCP directory of shards plus the plain state as JSON."""
    if not world.distributed:
        save_checkpoint(config.checkpoint_path,
                        _snapshot(config, model, optimizer, scaler, task, records))
        return
    meta = {"step": len(records), "config": asdict(config),
            "world_size": world.world_size, "scaler": scaler.state_dict(),
            "records": [asdict(r) for r in records]}
    save_sharded(config.checkpoint_path, world, model, optimizer,
                 {"data_rng": task.generator.get_state(),
                  "torch_rng": torch.get_rng_state()}, meta)


def _snapshot(config, model, optimizer, scaler, task, records) -> dict:
    cuda_rng = (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized()
                else None)
    return {
        "format": CHECKPOINT_FORMAT,
        "step": len(records),
        "config": asdict(config),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "data_rng": task.generator.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": cuda_rng,
        "records": [asdict(r) for r in records],
    }


def _restore(saved, world: World, model, optimizer, scaler, task, device,
             path) -> None:
    if scaler.is_enabled():
        scaler.load_state_dict(saved["scaler"])
    if world.distributed:  # saved is the JSON part; the shards are read here
        rng = {"data_rng": task.generator.get_state(),
               "torch_rng": torch.get_rng_state()}
        load_sharded(path, model, optimizer, rng)
        task.generator.set_state(rng["data_rng"])
        torch.set_rng_state(rng["torch_rng"])
        return
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])  # moves state to the params' device
    task.generator.set_state(saved["data_rng"])
    torch.set_rng_state(saved["torch_rng"])
    if saved["cuda_rng"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
