"""Time ``unscale_ + step + update``: our LossScaler against torch's GradScaler.

Run ``python -m amp_lessons.measure.scaler_bench``. Both scalers drive the same MLP (64
gradient tensors) on the CPU. For each optimizer the two are timed turn about, on
fresh copies of the same scaled gradients, after a warm-up, and the medians are
compared. The ratio is what our plain-tensor ``unscale_`` (``torch.aminmax`` then
``torch._foreach_mul_``: two passes) costs next to torch's fused C++ kernel (one
pass), with the optimizer step included as in a real loop.

Two clocks: the process's CPU time, which a busy neighbour on a shared machine does
not inflate, and wall time. Not a test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from amp_lessons.core.scaler import LossScaler
from amp_lessons.measure import bench

OPTIMIZERS: dict[str, Callable[[list[nn.Parameter]], torch.optim.Optimizer]] = {
    label: partial(bench.make_optimizer, name, lr=1e-6)
    for label, name in (
        ("SGD", "sgd"),
        ("SGD(momentum=0.9)", "sgd_momentum"),
        ("Adam", "adam"),
        ("AdamW", "adamw"),
    )
}


def make_model(num_layers: int = 32, width: int = 128) -> nn.Module:
    """An MLP of ``num_layers`` Linear layers: 2 gradient tensors (weight, bias) each.

    Example:
        >>> len(list(make_model().parameters()))
        64
    """
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(num_layers)])


def time_update(
    scaler: torch.amp.GradScaler | LossScaler,
    optimizer: torch.optim.Optimizer,
    grads: list[torch.Tensor],
    scaled_grads: list[torch.Tensor],
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one ``unscale_ + step + update``."""
    torch._foreach_copy_(grads, scaled_grads)  # untimed: undo the last unscale_
    cpu, wall = time.process_time(), time.perf_counter()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return time.process_time() - cpu, time.perf_counter() - wall


def compare(
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    num_layers: int = 32,
    width: int = 128,
    repeats: int = 300,
    warmup: int = 30,
) -> dict[str, tuple[float, float]]:
    """Median (CPU, wall) seconds per iteration, for "torch" and for "ours".

    Example:
        >>> medians = compare(OPTIMIZERS["SGD"], repeats=20, warmup=2)
        >>> sorted(medians)
        ['ours', 'torch']
    """
    torch.manual_seed(0)
    runs = {}
    for name, scaler in [
        ("torch", torch.amp.GradScaler("cpu")),
        ("ours", LossScaler("cpu")),
    ]:
        model = make_model(num_layers, width)
        optimizer = make_optimizer(list(model.parameters()))
        scaler.scale(torch.zeros(()))  # creates the scale tensor, as a loss would
        # Gradients of a typical size (1e-2), scaled by 2**16. A real backward()
        # through 32 untrained layers gives ~1e-10, whose squares in Adam or momentum
        # are subnormal and slow the CPU's float unit 100x: we would time that.
        grads = []
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-2 * scaler.get_scale()
            grads.append(p.grad)
        runs[name] = (scaler, optimizer, grads, [g.clone() for g in grads])
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for i in range(warmup + repeats):
        # Turn about, each going first every other time, so that anything else on the
        # machine (and its scheduler's rhythm) slows both alike.
        for name in ("torch", "ours") if i % 2 else ("ours", "torch"):
            seconds = time_update(*runs[name])
            if i >= warmup:
                times[name].append(seconds)
    return {
        name: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t))
        for name, t in times.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32, help="2 gradients each")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads (default 1: these tensors are below torch's parallel "
        "grain, and spare OpenMP threads on a busy machine only add noise)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = make_model(args.layers, args.width)
    num_values = sum(p.numel() for p in model.parameters())
    print(
        f"unscale_ + step + update on the CPU: {2 * args.layers} gradient tensors, "
        f"{num_values:,} values; median of {args.repeats} after {args.warmup} "
        f"warm-up; torch {torch.__version__}, {args.threads} thread(s)"
    )
    print(
        f"{'optimizer':<19}{'GradScaler':>12}{'LossScaler':>12}{'ratio':>8}"
        f"{'wall: GradScaler':>18}{'LossScaler':>12}{'ratio':>8}"
    )
    for name, make_optimizer in OPTIMIZERS.items():
        medians = compare(
            make_optimizer, args.layers, args.width, args.repeats, args.warmup
        )
        (torch_cpu, torch_wall), (ours_cpu, ours_wall) = (
            medians["torch"],
            medians["ours"],
        )
        print(
            f"{name:<19}{torch_cpu * 1e6:>10.0f}us{ours_cpu * 1e6:>10.0f}us"
            f"{ours_cpu / torch_cpu:>7.2f}x{torch_wall * 1e6:>16.0f}us"
            f"{ours_wall * 1e6:>10.0f}us{ours_wall / torch_wall:>7.2f}x"
        )
    print("ratio = LossScaler / GradScaler; the first three columns are CPU time")


if __name__ == "__main__":
    main()
