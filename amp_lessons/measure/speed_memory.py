"""The speed/memory panel's measurement (notebook 06's widget): one small MLP trained
for a few steps in each precision, with its exact memory breakdown and, when asked, its
step time; the numbers the panel draws are these rows. The bench itself (configs,
timing, FLOPs) is ``amp_lessons.measure.bench``'s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from amp_lessons.core.device import resolve_device
from amp_lessons.core.models import MLP
from amp_lessons.core.precision import resolve_precision, tf32_mode
from amp_lessons.measure.bench import (
    OPTIMIZERS,
    bench_step,
    make_optimizer,
    time_with_peak,
)


def measure_speed_memory(
    width: int = 64,
    batch: int = 16,
    precisions: Sequence[str] = ("fp32", "bf16"),
    device: str | torch.device = "cpu",
    optimizer: str = "adam",
    layers: int = 3,
    warmup: int = 1,
    iters: int = 3,
    time_steps: bool = True,
    budget_ms: float | None = None,
    seed: int = 0,
) -> list[dict]:
    """Train an MLP of `layers` x Linear(width) for a few steps in each precision.

    Per precision: the exact memory breakdown (``memory.memory_breakdown``: weights,
    gradients, optimizer state, activations and autocast weight copies kept for
    backward), then, with `time_steps`, `warmup` steps and up to `iters` timed
    steps of the course's loop (``train.train_step``: autocast, GradScaler for fp16).
    `budget_ms` caps the timing: once that much wall time has passed, each
    remaining precision gets its warm-up and ONE timed step. On CUDA the rows also
    hold the allocator's peak over the timed steps, less what was allocated before
    (the notebook's own tensors). The global RNG is untouched.

    Rows follow the bench's schema (config, precision, step_ms, times_ms,
    peak_mem_bytes, activation_bytes, param_bytes) plus ``memory`` (the breakdown's
    ``as_dict()``) and the sizes; ``step_ms`` is None when not timed.

    Example:
        >>> rows = measure_speed_memory(64, 16, ("fp32", "bf16"))
        >>> rows[1]["memory"]["weight_copies"] > 0  # bf16 copies of the weights
        True
    """
    _check_panel_args(width, batch, layers, iters, warmup, precisions, optimizer)
    dev = resolve_device(str(device))
    deadline = None if budget_ms is None else time.perf_counter() + budget_ms / 1e3
    run = _PanelRun(
        width, batch, layers, optimizer, warmup, iters, time_steps, seed, deadline
    )
    # one precision at a time: each row's model and optimizer are freed when
    # _panel_row returns, before the next precision's `base` is read (or that base
    # would count them and the peak shrink)
    return [_panel_row(run, name, dev) for name in precisions]


@dataclass(frozen=True)
class _PanelRun:
    """What measure_speed_memory measures, the same for every precision."""

    width: int
    batch: int
    layers: int
    optimizer: str
    warmup: int
    iters: int
    time_steps: bool
    seed: int
    deadline: float | None  # time.perf_counter() past which one timed step is left


def _check_panel_args(width, batch, layers, iters, warmup, precisions, optimizer):
    """measure_speed_memory's arguments, or ValueError saying which is wrong."""
    for name, v in (
        ("width", width),
        ("batch", batch),
        ("layers", layers),
        ("iters", iters),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if not precisions:
        raise ValueError("no precision chosen: pass e.g. ('fp32', 'bf16')")
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}"
        )


def _panel_row(run: _PanelRun, name: str, dev: torch.device) -> dict:
    """One precision's row: its memory breakdown, then (``run.time_steps``) its timed
    steps and, on CUDA, the allocator's peak over them less what was there before."""
    from amp_lessons.core.memory import memory_breakdown

    p = resolve_precision(name, dev, warn=False)
    # CUDA: count only this run's tensors, not what the notebook already holds
    base = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(run.seed)
        model = MLP((run.width,) * (run.layers + 1)).to(dev)
        x = torch.randn(run.batch, run.width).to(dev)
        y = torch.randn(run.batch, run.width).to(dev)
    opt = make_optimizer(run.optimizer, model.parameters())
    mem = memory_breakdown(model, x, p.dtype if p.autocast else None, run.optimizer)
    times, peak = [], None
    if run.time_steps:
        times, peak = _timed_panel_steps(run, p, dev, model, opt, (x, y))
    return {
        "config": "mlp",
        "precision": name,
        "device": dev.type,
        "width": run.width,
        "batch": run.batch,
        "layers": run.layers,
        "optimizer": run.optimizer,
        "step_ms": statistics.median(times) if times else None,
        "times_ms": times,
        "warmup": run.warmup if run.time_steps else 0,
        "peak_mem_bytes": None if peak is None else peak - base,
        "activation_bytes": mem.activations + mem.weight_copies,
        "param_bytes": mem.weights,
        "memory": mem.as_dict(),
    }


def _timed_panel_steps(
    run: _PanelRun, p, dev: torch.device, model, opt, batch
) -> tuple[list[float], int | None]:
    """(times in ms, allocator peak or None) of the course's training step
    (``train.train_step``: autocast, GradScaler for fp16), warm-up first."""
    step = bench_step(model, opt, p, dev, batch, F.mse_loss)
    with tf32_mode(p.tf32, dev.type):
        times, _resident, peak = time_with_peak(
            step, dev, run.warmup, run.iters, run.deadline
        )
    return times, peak
