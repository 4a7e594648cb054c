"""The train command: ``python -m amp_lessons train``, the course's real AMP loop
(``amp_lessons.core.train``) on a built-in synthetic task, printing loss, scale and
skipped steps.

Example: ``python -m amp_lessons train --device cpu --precision fp16 --steps 50``;
under ``torchrun --standalone --nproc_per_node=2 -m amp_lessons train --distributed
ddp`` it runs one process per device (lesson 10).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Sequence

from amp_lessons.cli.flags import TRAIN_FLAGS, add_device_option, positive_int
from amp_lessons.core.distributed import MODES
from amp_lessons.core.precision import PRECISIONS, SCALERS
from amp_lessons.core.train import TASKS, TrainConfig
from amp_lessons.i18n import _


def add_command(commands) -> argparse.ArgumentParser:
    """The train command's parser, its options in the order the help lists them."""
    p = commands.add_parser(
        "train",
        help=_(
            "train a synthetic task with the AMP loop, printing loss, "
            "scale and skipped steps"
        ),
        description=_(
            "The real AMP loop (amp_lessons.core.train) on a built-in "
            "synthetic task: nothing is downloaded."
        ),
    )
    _add_task_options(p)
    _add_optimization_options(p)
    _add_scaler_options(p)
    _add_checkpoint_options(p)
    _add_run_options(p)
    return p


def _add_task_options(p: argparse.ArgumentParser) -> None:
    """What is trained, on which device, in which precision."""
    p.add_argument(
        "--task",
        choices=TASKS,
        default="spirals",
        help=_(
            "spirals: 3-class MLP (seconds on a CPU); gpt: small "
            "transformer (default: %(default)s)"
        ),
    )
    add_device_option(p)
    p.add_argument(
        "--precision",
        default="bf16",
        help=_("{precisions} (default: %(default)s)").format(
            precisions=", ".join(PRECISIONS)
        ),
    )


def _add_optimization_options(p: argparse.ArgumentParser) -> None:
    """Steps, batches, learning rate and clipping."""
    # numbers are only converted here: TrainConfig's checks (plan_training) own them
    p.add_argument(
        "--steps",
        type=int,
        default=200,
        help=_(
            "optimizer steps in all, a resumed run's included (default: %(default)s)"
        ),
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=128,
        help=_(
            "examples (or sequences) per micro-batch, all processes "
            "together: the global batch, split evenly over them "
            "(default: %(default)s)"
        ),
    )
    p.add_argument(
        "--accum",
        type=int,
        default=1,
        help=_("micro-batches per optimizer step (default: %(default)s)"),
    )
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help=_("AdamW learning rate (default: 1e-2 spirals, 3e-3 gpt)"),
    )
    p.add_argument(
        "--clip",
        type=float,
        default=1.0,
        help=_(
            "max gradient norm, applied after unscale_; 0 turns "
            "clipping off (default: %(default)s)"
        ),
    )


def _add_scaler_options(p: argparse.ArgumentParser) -> None:
    """Which loss scaler, and how it starts and grows."""
    p.add_argument(
        "--scaler",
        choices=SCALERS,
        default="auto",
        help=_(
            "auto: torch.amp.GradScaler for fp16 only; ours: "
            "amp_lessons.core.scaler.LossScaler; none: fp16 unscaled "
            "(default: %(default)s)"
        ),
    )
    p.add_argument(
        "--init-scale",
        type=float,
        default=2.0**16,
        help=_("initial loss scale (default: %(default)g)"),
    )
    p.add_argument(
        "--growth-interval",
        type=int,
        default=2000,
        help=_("clean steps before the scale doubles (default: %(default)s)"),
    )


def _add_checkpoint_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=None,
        help=_(
            "save model, optimizer, scaler, step and RNG states here "
            "(atomically) at the end"
        ),
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="N",
        help=_("also save every N steps"),
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help=_(
            "continue from --checkpoint (bit-exact on a CPU; a "
            "ddp/fsdp2 checkpoint resumes with any number of "
            "processes)"
        ),
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """Over how many processes, with which seed and threads; what it logs and writes."""
    p.add_argument(
        "--distributed",
        choices=MODES,
        default="none",
        help=_(
            "none: one process; ddp or fsdp2: one process per device, "
            "launched by torchrun --standalone --nproc_per_node=N -m "
            "amp_lessons train ... (gloo on a CPU, nccl on CUDA; "
            "default: %(default)s)"
        ),
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help=_(
            "rank 0 writes {world_size, distributed, precision, losses: "
            "[[step, loss], ...], skipped_steps, final_scale} here"
        ),
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--log-every",
        type=int,
        default=10,
        metavar="N",
        help=_("print every N steps (default: %(default)s)"),
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help=_(
            "CPU threads for torch (default: 1 for the tiny spirals "
            "model on a CPU, where thread hand-offs cost more than the "
            "math; torch's own default otherwise)"
        ),
    )


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the train command's flags ask for, unchecked (its checks are
    the core's: ``plan_training``)."""
    values = {
        field: getattr(args, flag[2:].replace("-", "_"))
        for field, flag in TRAIN_FLAGS.items()
    }
    values["clip"] = values["clip"] or None  # --clip 0: no clipping, clip=None
    return TrainConfig(**values)


def run_train(args: argparse.Namespace) -> int:
    import torch

    from amp_lessons.core.output_files import validate_output_path, write_atomically
    from amp_lessons.core.train import plan_training, train

    # every check of the run, once, before the header: a mistake prints nothing else
    plan = plan_training(train_config(args))
    config, device, p = plan.config, plan.device, plan.precision
    if args.json:
        validate_output_path(args.json, "--json")
    threads = args.threads
    if threads is None and config.task == "spirals" and device.type == "cpu":
        threads = 1
    if threads is not None:
        torch.set_num_threads(threads)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        across = (
            _(" | {mode} over {world} process(es), {each} examples each").format(
                mode=config.distributed,
                world=world_size,
                each=config.batch_size // world_size,
            )
            if config.distributed != "none"
            else ""
        )
        if config.distributed == "fsdp2" and p.autocast:
            across += _(" | FSDP2 casts with MixedPrecisionPolicy instead of autocast")
        print(
            _(
                "train {task} on {device} | {precision}: {summary} | {steps} steps of "
                "{batch} x {accum} micro-batch(es){across}"
            ).format(
                task=config.task,
                device=device,
                precision=p.name,
                summary=_(p.summary),
                steps=config.num_steps,
                batch=config.batch_size,
                accum=config.accum_steps,
                across=across,
            ),
            flush=True,
        )
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(plan, log=lambda line: print(line, flush=True))
    if result.rank:
        return 0  # rank 0 reports for all
    for w in caught:
        print(_("note: {message}").format(message=w.message), file=sys.stderr)
    if args.json:
        text = json.dumps(run_summary(result))
        write_atomically(args.json, lambda f: f.write(text.encode()))
    _print_done(result, time.perf_counter() - t0)
    return 0


def _print_done(result, seconds: float) -> None:
    losses = result.losses
    # up to 10 steps each end, never overlapping: a 10-step run compares 5 and 5
    window = max(1, min(10, len(losses) // 2))
    first, last = _mean(losses[:window]), _mean(losses[-window:])
    span = (
        _("first and last step")
        if window == 1
        else _("mean of the first/last {window} steps").format(window=window)
    )
    print(
        _(
            "done in {seconds} s on {device}: loss {first} -> {last} ({span}), "
            "eval loss {eval_loss}, accuracy {accuracy}%, "
            "skipped {skipped} of {steps} steps, final scale {scale}"
        ).format(
            seconds=f"{seconds:.1f}",
            device=result.device,
            first=f"{first:.3f}",
            last=f"{last:.3f}",
            span=span,
            eval_loss=f"{result.eval_loss:.3f}",
            accuracy=f"{100 * result.eval_accuracy:.1f}",
            skipped=result.num_skipped,
            steps=len(result.records),
            scale=f"{result.scaler.get_scale():g}",
        )
    )
    if result.config.checkpoint_path:
        print(
            _("checkpoint: {path} (step {step})").format(
                path=result.config.checkpoint_path, step=len(result.records)
            )
        )


def run_summary(result) -> dict:
    """What ``--json`` writes: the run as plain data, the same in every mode.

    ``losses`` are ``[step, loss]`` pairs, each the mean over the global batch;
    ``skipped_steps`` the steps whose update the scaler skipped; ``final_scale`` is
    None without a scaler. Example: ``{"world_size": 2, "distributed": "ddp",
    "precision": "fp16", "losses": [[1, 1.09], ...], "skipped_steps": [1],
    "final_scale": 32768.0}``.
    """
    scaler = result.scaler
    return {
        "world_size": result.world_size,
        "distributed": result.config.distributed,
        "precision": result.config.precision,
        "losses": [[r.step, r.loss] for r in result.records],
        "skipped_steps": [r.step for r in result.records if r.skipped],
        "final_scale": scaler.get_scale() if scaler.is_enabled() else None,
    }


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")
