"""What a training run is asked to do, and the one place it is checked.

``TrainConfig`` holds every setting of a run; ``plan_training`` checks all of them
once, before anything is built or written (the fields, the device and precision, the
scaler, a caller's model, the global batch against the processes, the checkpoint path,
and a resumed checkpoint, read here once), and returns the ``TrainPlan`` that
``amp_lessons.core.train.train`` runs. Errors name the config field, never a
command-line flag (the command line words them as flags: ``amp_lessons.cli.flags``).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from amp_lessons.core.checkpoints import load_checkpoint
from amp_lessons.core.device import resolve_device
from amp_lessons.core.distributed import (
    META_FILE,
    MODES,
    World,
    read_meta,
)
from amp_lessons.core.errors import SettingError
from amp_lessons.core.output_files import validate_output_path
from amp_lessons.core.precision import (
    Precision,
    resolve_precision,
    validate_scaler_choice,
)
from amp_lessons.core.scaler import round_to_float32
from amp_lessons.i18n import N_, _

TASKS = ("spirals", "gpt")


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
        N_("a positive integer"),
    ),
    (
        ("log_every", "checkpoint_every"),
        lambda x: _is_integer(x) and x >= 0,
        N_("an integer >= 0 (0 turns it off)"),
    ),
    (
        ("lr",),
        lambda x: x is None or (_is_real(x) and x > 0),
        N_(
            "a finite number > 0 (an infinite or NaN learning rate makes every "
            "weight NaN)"
        ),
    ),
    (
        ("clip",),
        lambda x: x is None or (_is_real(x) and x > 0),
        N_("a finite number > 0, or `clip=None` for no clipping"),
    ),
    (("weight_decay",), lambda x: _is_real(x) and x >= 0, N_("a finite number >= 0")),
    (
        ("init_scale",),
        _is_scale,
        N_("a finite number > 0 that float32 can hold (up to about 3.4e38)"),
    ),
    (
        ("seed",),
        lambda x: _is_integer(x) and 0 <= x < 2**63,
        N_("an integer in [0, 2**63), the seeds torch's generators take"),
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
            _("unknown `task` {value}; use one of: {choices}").format(
                value=repr(config.task), choices=", ".join(TASKS)
            )
        )
    for names, ok, what in _NUMBER_RULES:
        for name in names:
            if not ok(value := getattr(config, name)):
                raise SettingError(
                    _("`{name}` must be {what}, got {value}").format(
                        name=name, what=_(what), value=repr(value)
                    )
                )
    if config.resume and not config.checkpoint_path:
        raise SettingError(
            _("`resume=True` needs `checkpoint_path`, the checkpoint to continue from")
        )
    if config.checkpoint_every and not config.checkpoint_path:
        raise SettingError(
            _("`checkpoint_every` needs `checkpoint_path`, the file to save to")
        )
    if config.distributed not in MODES:
        raise SettingError(
            _("unknown `distributed` mode {value}; use one of: {choices}").format(
                value=repr(config.distributed), choices=", ".join(MODES)
            )
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


def _refuse_incompatible_resume(saved: dict, config: TrainConfig, path) -> None:
    now = asdict(config)
    diff = [
        _("{key}: checkpoint {saved} vs now {now}").format(
            key=k, saved=repr(saved.get(k)), now=repr(now[k])
        )
        for k in RESUME_MUST_MATCH
        if saved.get(k) != now[k]
    ]
    if diff:  # in the learner's language: lesson 05 invites this error
        raise SettingError(
            _(
                "cannot resume from {path}: the run's settings differ ({diff}). Fix: "
                "resume with the same settings, or start a new run with another "
                "`checkpoint_path`."
            ).format(path=path, diff="; ".join(diff))
        )
