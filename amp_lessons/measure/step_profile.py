"""Where one training step's time goes, measured kernel by kernel, in the groups the
estimate splits its own prediction into.

The estimate says how long a step takes and where the time goes (``Estimate.by_kind``).
Where it misses a measured step, this says which part missed: the bench's step runs
under ``torch.profiler``, and each kernel's time is added to its group by the
kernel's name: ``matmul`` (cuBLAS and CUTLASS GEMMs: ``*gemm*``, Hopper's
``nvjet_*``), ``attention`` (the fused kernels: ``fmha_cutlass*``, ``flash_*``,
cuDNN's ``*sdpa*``), ``optimizer`` (the multi-tensor kernels of the optimizer step
and of gradient clipping) and ``other`` (everything else: elementwise kernels,
norms, casts, the loss, copies). ``make gpu-check`` records the bench transformer's
split in the GPU profile (``microbench``), and its summary sets it beside the
estimate's.

The names draw the groups' edges a little apart from the estimate's: float32's
memory-efficient attention computes part of its backward in separate elementwise
kernels (about 1-2% of its time, read in PyTorch's ``attention_backward.cu``), and
gradient clipping's stack, norm and clamp kernels are small elementwise ones; both
land in ``other`` here, where the estimate counts them as attention and optimizer.

Example (on a GPU; the milliseconds are illustrative, not measured)::

    split = profile_step("transformer", "tf32", "cuda", sizes)
    split["groups"]  # {"matmul": ..., "attention": ..., "optimizer": ..., "other": ...}
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from amp_lessons.core.precision import resolve_precision, tf32_mode

GROUPS = ("matmul", "attention", "optimizer", "other")
# First match wins: a fused attention kernel's name can hold "cutlass" or "gemm".
# The names are CUDA kernels' (what the GPU runs) and, for the CPU run of the tests,
# aten ops' (torch.profiler sees no kernels on a CPU).
_GROUP_PATTERNS = (
    ("attention", re.compile(r"fmha|flash|attention|sdpa", re.IGNORECASE)),
    (
        "matmul",
        re.compile(
            r"gemm|gemv|nvjet|cublaslt|splitkreduce|^aten::(mm|addmm|bmm|baddbmm)$",
            re.IGNORECASE,
        ),
    ),
    (
        "optimizer",
        re.compile(r"multi_tensor_apply|foreach|fused_adam|lpnorm", re.IGNORECASE),
    ),
)
# the estimate's kinds, grouped as above (any other kind is "other")
_ESTIMATE_GROUPS = {
    "matmul": "matmul",
    "attention": "attention",
    "optimizer": "optimizer",
    "clip": "optimizer",
    "scaler": "optimizer",
}


def kernel_group(name: str) -> str:
    """The group of a kernel (or, on a CPU, an aten op) by its name.

    Example: ``kernel_group("fmha_cutlassB_f32_aligned_64x64_k64_sm80")`` ->
    ``"attention"``; ``kernel_group("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN")``
    -> ``"matmul"``.
    """
    for group, pattern in _GROUP_PATTERNS:
        if pattern.search(name):
            return group
    return "other"


def estimate_groups(by_kind: dict[str, float]) -> dict[str, float]:
    """An estimate's seconds by kind (``Estimate.by_kind``) as milliseconds by group."""
    groups = dict.fromkeys(GROUPS, 0.0)
    for kind, seconds in by_kind.items():
        groups[_ESTIMATE_GROUPS.get(kind, "other")] += seconds * 1e3
    return groups


def groups_from_trace(trace: dict) -> dict[str, float]:
    """Milliseconds of GPU time by group in a Chrome trace written by
    ``torch.profiler`` (``export_chrome_trace``): its ``kernel`` events, each
    ``dur`` microseconds long. Copies and memsets go to ``other``."""
    groups = dict.fromkeys(GROUPS, 0.0)
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X":
            continue
        if event.get("cat") == "kernel":
            groups[kernel_group(event.get("name", ""))] += event["dur"] / 1e3
        elif event.get("cat") in ("gpu_memcpy", "gpu_memset"):
            groups["other"] += event["dur"] / 1e3
    return groups


def _cpu_groups(prof) -> dict[str, float]:
    # a CPU has no kernels: each aten op's own time (its children's excluded)
    groups = dict.fromkeys(GROUPS, 0.0)
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            groups[kernel_group(event.key)] += event.self_cpu_time_total / 1e3
    return groups


def profile_step(
    config: str, precision: str, device: str, sizes: dict, warmup: int = 2
) -> dict:
    """One training step of a bench config (``bench.build``: the bench's model,
    batch, loss, optimizer and clipping) in ``precision``, after ``warmup`` steps,
    under ``torch.profiler``: milliseconds by group (``GROUPS``). On a GPU the
    kernels' time; on a CPU the aten ops' own time (the tests' code path)."""
    from torch.profiler import ProfilerActivity, profile

    from amp_lessons.measure.bench import bench_step, build, synchronize

    dev = torch.device(device)
    p = resolve_precision(precision, dev, warn=False)
    model, x, y, loss_fn, optimizer = build(config, sizes, dev)
    step = bench_step(model, optimizer, p, dev, (x, y), loss_fn)

    cuda = dev.type == "cuda"
    # CPU activity on a GPU too: where CUPTI is missing, torch falls back to its
    # legacy profiler, which refuses CUDA without CPU (torch/autograd/profiler.py);
    # the CPU's events are not kernels, so groups_from_trace leaves them out
    activities = (
        [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        if cuda
        else [ProfilerActivity.CPU]
    )
    with tf32_mode(p.tf32, dev.type):
        for _warm in range(warmup):
            step()
        synchronize(dev)
        with profile(activities=activities) as prof:
            step()
            synchronize(dev)
    if not cuda:
        groups = _cpu_groups(prof)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            groups = groups_from_trace(json.loads(path.read_bytes()))
    return {"config": config, "precision": precision, "groups": groups}


# TF32 first: its step is the one the estimate misses most on the H200 record
SPLIT_PRECISIONS = ("tf32", "bf16", "fp32")
# a split is not started with less time than this left (on an H200 the slowest,
# fp32, is three steps of 0.45 s after building the model)
SPLIT_MARGIN_S = 6.0


def bench_splits(
    device: str,
    deadline: float,
    on_split: Callable[[list[dict]], None] | None = None,
    precisions: tuple[str, ...] = SPLIT_PRECISIONS,
) -> list[dict]:
    """The bench transformer's split (``profile_step``) in each of ``precisions``
    at the bench's own sizes for ``device``, stopping before ``deadline`` (epoch
    seconds); a precision the GPU lacks (bf16 before Ampere) is left out.
    ``on_split(splits)`` is called after each one (the worker saves them)."""
    from amp_lessons.core.errors import SettingUnavailable
    from amp_lessons.measure.bench import _release, default_sizes

    sizes = default_sizes(device)["transformer"]
    splits = []
    for precision in precisions:
        if time.time() > deadline - SPLIT_MARGIN_S:
            break
        try:
            splits.append(profile_step("transformer", precision, device, sizes))
        except SettingUnavailable:
            continue
        except (RuntimeError, OSError, ValueError) as e:  # out of memory, CUPTI, ...
            # one precision's failure costs its split only: the profile is saved
            print(f"step split {precision} failed: {type(e).__name__}: {e}")
            continue
        finally:
            _release(torch.device(device))
        if on_split is not None:
            on_split(splits)
    return splits
