"""The GPU's own numbers for the estimate: GEMMs by size and precision, a bandwidth
sweep and the cost of a tiny kernel, measured in seconds and recorded as a profile
that the estimate can price with instead of its fitted constants.

The estimate (``amp_lessons.measure.estimate``) turns datasheet peaks into achieved
speed with six numbers, ``Efficiency``. ``FITTED`` takes them from published
end-to-end rows; on a GPU at hand they can be measured instead
(``efficiency_of``):

- ``tensor``, ``tf32``, ``fp32``: the largest GEMM's achieved FLOP/s over the
  datasheet peak of its arithmetic, divided by the wave model's efficiency for that
  shape (``gemm_model``), so that smaller and skinnier GEMMs keep losing by tiles and
  waves as before. ``tensor`` is the better of fp16 and bf16.
- ``attention_tensor``, ``attention_fp32``: ``F.scaled_dot_product_attention``'s
  forward and backward (the fused kernel torch picks: flash or cuDNN in 16 bits, the
  memory-efficient one in float32) at GPT-2 small's heads, FLOPs counted as the
  estimate counts them, over the peak the estimate prices that kernel at.
  ``attention_tensor`` is the better of fp16 and bf16.
- ``memory``: a device-to-device copy's bytes per second (read + write) over the
  datasheet bandwidth, the best of a sweep of sizes.
- ``kernel_us``: the GPU's time for a one-element kernel, replayed from a CUDA
  graph, so that no CPU time is in it.
- ``cpu_us``: the CPU's time to issue one such op in eager mode (Python, dispatch,
  the launch call), the GPU left to run behind it.

A number the profile lacks (a GPU without bf16, a quick run) keeps ``FITTED``'s.
``make gpu-check`` records the profile (``gpu_profile_<gpu>.json`` under
``notebooks/results/``) and prices its bench configs with it beside the fitted
estimate; ``python -m amp_lessons estimate --profile FILE`` prices any model with it.

Example (on a GPU)::

    profile = measure_profile("cuda")
    eff = efficiency_of(profile, find_gpu("H200-SXM-141GB"))
    estimate_step(model, x, "H200-SXM-141GB", "tf32", efficiency=eff)
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from math import isfinite
from pathlib import Path

import torch
import torch.nn.functional as F

from amp_lessons.core.precision import tf32_mode
from amp_lessons.i18n import _
from amp_lessons.measure.estimate import FITTED, Efficiency
from amp_lessons.measure.fused_kernels import ATTENTION_BACKWARD, attention_flops
from amp_lessons.measure.gemm_model import gemm_efficiency
from amp_lessons.measure.gpus import GPU
from amp_lessons.measure.step_profile import GROUPS, SPLIT_PRECISIONS

SCHEMA = 1
GEMM_MATHS = ("fp32", "tf32", "fp16", "bf16")
DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
# Square GEMM sides and copy sizes: a GPU's largest GEMM fills every SM for many
# waves (8192: 2 TFLOP a product); a CPU run (the tests) only proves the code path.
GEMM_SIDES = {"cuda": (1024, 2048, 4096, 8192), "cpu": (64, 128)}
# (batch, heads, tokens, head size): GPT-2 small's 12 heads of 64 over 1024 tokens,
# causal, as nanoGPT and the bench's transformer run them
ATTENTION_SHAPE = {"cuda": (16, 12, 1024, 64), "cpu": (1, 2, 64, 16)}
ATTENTION_MATHS = ("fp32", "fp16", "bf16")
ATTENTION_CALLS = 10  # forward and backward calls per timing (see _seconds)
# copies far larger than L2 (50 MB on an H100), so that the warm-up call leaves
# nothing to read from it: HBM's rate, not L2's
COPY_MIB = {"cuda": (256, 1024), "cpu": (1, 4)}
TINY_OPS = 200  # one-element kernels per timing of kernel_us and cpu_us


def _seconds(
    fn: Callable[[], object], device: str, repeats: int = 5, calls: int = 1
) -> float:
    """The median seconds of one call of ``fn`` after a warm-up call: CUDA events on
    a GPU (the GPU's time), the wall clock on a CPU. Each timing runs ``calls``
    calls back to back, so that a call shorter than its own CPU work (a fused
    attention of half a millisecond) keeps the GPU busy between the events."""
    fn()
    times = []
    for _repeat in range(repeats):
        if device == "cuda":
            start, end = (torch.cuda.Event(enable_timing=True) for _event in "ab")
            start.record()
            for _call in range(calls):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / calls)
        else:
            t0 = time.perf_counter()
            for _call in range(calls):
                fn()
            times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def _math_available(math: str, device: str) -> bool:
    """TF32 and bf16 tensor cores need compute capability 8.0 (Ampere) or newer."""
    if device != "cuda" or math in ("fp32", "fp16"):
        return True
    return torch.cuda.get_device_capability() >= (8, 0)


def gemm_rows(device: str, sides: tuple[int, ...]) -> list[dict]:
    """``a @ b`` for square sides in each arithmetic: seconds and TFLOP/s. ``tf32``
    is fp32 with TF32 matmuls allowed, ``fp32`` with them forbidden (the course's
    ``tf32_mode``, which puts torch's settings back after)."""
    rows = []
    for math in GEMM_MATHS:
        if not _math_available(math, device):
            continue
        with tf32_mode(math == "tf32", device):
            for n in sides:
                a, b = (
                    torch.randn(n, n, device=device, dtype=DTYPES[math])
                    for _side in "ab"
                )
                seconds = _seconds(lambda a=a, b=b: a @ b, device)
                rows.append(
                    {
                        "math": math,
                        "n": n,
                        "seconds": seconds,
                        "tflops": 2 * n**3 / seconds / 1e12,
                    }
                )
                del a, b
    return rows


def attention_rows(device: str, shape: tuple[int, int, int, int]) -> list[dict]:
    """Causal ``F.scaled_dot_product_attention`` of ``shape`` (batch, heads, tokens,
    head size), forward and backward, in each arithmetic: seconds and TFLOP/s, the
    FLOPs counted as the estimate counts a fused attention kernel's."""
    forward = attention_flops(shape, shape[2], causal=True)
    flops = forward * (1 + ATTENTION_BACKWARD)
    rows = []
    for math in ATTENTION_MATHS:
        if not _math_available(math, device):
            continue
        q, k, v = (
            torch.randn(shape, device=device, dtype=DTYPES[math], requires_grad=True)
            for _tensor in "qkv"
        )
        grad = torch.randn(shape, device=device, dtype=DTYPES[math])

        def step(q=q, k=k, v=v, grad=grad):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return torch.autograd.grad(out, (q, k, v), grad)

        seconds = _seconds(step, device, calls=ATTENTION_CALLS)
        rows.append(
            {
                "math": math,
                "shape": list(shape),
                "seconds": seconds,
                "tflops": flops / seconds / 1e12,
            }
        )
        del q, k, v, grad
    return rows


def copy_rows(device: str, sizes_mib: tuple[int, ...]) -> list[dict]:
    """``y.copy_(x)`` for each size: it reads and writes every byte once."""
    rows = []
    for mib in sizes_mib:
        x = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
        y = torch.empty_like(x)
        seconds = _seconds(lambda x=x, y=y: y.copy_(x), device)
        rows.append(
            {"mib": mib, "seconds": seconds, "gbs": 2 * x.numel() / seconds / 1e9}
        )
        del x, y
    return rows


def tiny_kernel_us(device: str) -> float:
    """Microseconds of GPU time for a one-element ``add_``: TINY_OPS of them
    captured in a CUDA graph and replayed, so that no launch from Python is timed.
    On a CPU, the wall time of one such op."""
    x = torch.zeros(1, device=device)
    if device != "cuda":
        return (
            _seconds(lambda: [x.add_(1) for _op in range(TINY_OPS)], device)
            * 1e6
            / TINY_OPS
        )
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        x.add_(1)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _op in range(TINY_OPS):
            x.add_(1)
    return _seconds(graph.replay, device) * 1e6 / TINY_OPS


def issue_us(device: str) -> float:
    """Microseconds of CPU time to issue one one-element ``add_`` in eager mode: the
    loop's wall time, the GPU left to run behind it (synchronized before and after,
    outside the timing)."""
    x = torch.zeros(1, device=device)
    times = []
    for _repeat in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _op in range(TINY_OPS):
            x.add_(1)
        times.append(time.perf_counter() - t0)
        if device == "cuda":
            torch.cuda.synchronize()
    return statistics.median(times) * 1e6 / TINY_OPS


def device_name(device: str) -> str:
    """``torch.cuda.get_device_name()`` on a GPU, ``"cpu"`` otherwise."""
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def measure_profile(device: str = "cuda", command: str = "") -> dict:
    """Every measurement of this module on ``device`` (``"cuda"``: the whole sweep,
    about 10 s on an H100; ``"cpu"``: tiny sizes that only prove the code), with its
    provenance: device, torch version, date and the command that ran it."""
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA GPU here: measure_profile('cpu') runs the code path"
        )
    if device not in GEMM_SIDES:
        raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
    return {
        "schema": SCHEMA,
        "device_name": device_name(device),
        "torch": torch.__version__,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "gemm": gemm_rows(device, GEMM_SIDES[device]),
        "attention": attention_rows(device, ATTENTION_SHAPE[device]),
        "copy": copy_rows(device, COPY_MIB[device]),
        "kernel_us": tiny_kernel_us(device),
        "cpu_us": issue_us(device),
    }


# ---------------------------------------------------------------------------------
# From a profile to the estimate's Efficiency


def _gemm_efficiency(profile: dict, maths: tuple[str, ...], gpu: GPU) -> float | None:
    """The best of ``maths`` at its largest side: achieved over peak, over what the
    wave model says that shape reaches on this GPU; None if none was measured."""
    found = []
    for math in maths:
        rows = [r for r in profile["gemm"] if r["math"] == math]
        if not rows or not gpu.supports(math):
            continue
        row = max(rows, key=lambda r: r["n"])
        n = row["n"]
        wave = gemm_efficiency((1, n, n, n), gpu.sms)
        found.append(row["tflops"] * 1e12 / gpu.peak(math) / wave)
    return max(found) if found else None


def _attention_efficiency(
    profile: dict, maths: tuple[str, ...], gpu: GPU
) -> float | None:
    """The best of ``maths``' attention rates over the peak the estimate prices
    that kernel at (its own arithmetic's); None if none was measured."""
    found = [
        r["tflops"] * 1e12 / gpu.peak(r["math"])
        for r in profile.get("attention", [])
        if r["math"] in maths and gpu.supports(r["math"])
    ]
    return max(found) if found else None


def efficiency_of(profile: dict, gpu: GPU) -> Efficiency:
    """The estimate's ``Efficiency`` from a profile measured on ``gpu``; a number
    the profile lacks keeps ``FITTED``'s (module doc)."""
    check_profile(profile)
    measured = {
        "tensor": _gemm_efficiency(profile, ("fp16", "bf16"), gpu),
        "tf32": _gemm_efficiency(profile, ("tf32",), gpu),
        "fp32": _gemm_efficiency(profile, ("fp32",), gpu),
        "attention_tensor": _attention_efficiency(profile, ("fp16", "bf16"), gpu),
        "attention_fp32": _attention_efficiency(profile, ("fp32",), gpu),
        "memory": (
            max(r["gbs"] for r in profile["copy"]) / gpu.bandwidth_gbs
            if profile["copy"]
            else None
        ),
        "kernel_us": profile["kernel_us"],
        "cpu_us": profile["cpu_us"],
    }
    return replace(FITTED, **{k: v for k, v in measured.items() if v is not None})


def _is_rate(value) -> bool:
    """A finite positive number (not a bool, a string or infinity)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and isfinite(value)
        and value > 0
    )


def _is_size(value) -> bool:
    """A positive int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_time(value) -> bool:
    """A finite number, zero or more (not a bool or a string)."""
    return (value == 0 and type(value) in (int, float)) or _is_rate(value)


def _is_split(split) -> bool:
    """A step split as ``step_profile.profile_step`` writes it: a precision the
    split measures and milliseconds, zero or more, for each kernel group."""
    if not isinstance(split, dict) or not isinstance(split.get("groups"), dict):
        return False
    groups = split["groups"]
    return (
        split.get("precision") in SPLIT_PRECISIONS
        and set(groups) == set(GROUPS)
        and all(_is_time(v) for v in groups.values())
    )


def _is_attention_row(row) -> bool:
    """An attention row as ``attention_rows`` writes it."""
    return (
        isinstance(row, dict)
        and row.get("math") in ATTENTION_MATHS
        and isinstance(row.get("shape"), list)
        and len(row["shape"]) == 4
        and all(_is_size(n) for n in row["shape"])
        and _is_rate(row.get("tflops"))
    )


def _rows_problem(profile: dict) -> str | None:
    """What is wrong with a profile's rows, in one sentence, or None: a GEMM, copy,
    attention or step-split row that is not a measurement this module writes (a
    profile from before attention and the split were measured is read without
    them)."""
    attention = profile.get("attention", [])
    splits = profile.get("step_split", [])
    if not isinstance(attention, list) or not all(map(_is_attention_row, attention)):
        return _(
            "a GPU profile's attention rows each need fp32, fp16 or bf16, a shape of "
            "4 sizes and a positive rate"
        )
    if not isinstance(splits, list) or not all(map(_is_split, splits)):
        return _(
            "a GPU profile's step splits each need a precision and milliseconds, zero "
            "or more, for matmul, attention, optimizer and other"
        )
    gemm, copy = profile["gemm"], profile["copy"]
    sound = (
        isinstance(gemm, list)
        and isinstance(copy, list)
        and all(isinstance(r, dict) for r in [*gemm, *copy])
        and all(
            r.get("math") in GEMM_MATHS
            and _is_size(r.get("n"))
            and _is_rate(r.get("tflops"))
            for r in gemm
        )
        and all(_is_rate(r.get("gbs")) for r in copy)
        and _is_rate(profile["kernel_us"])
        and _is_rate(profile["cpu_us"])
    )
    return None if sound else _("a GPU profile's rates and times must all be positive")


def check_profile(profile: dict) -> None:
    """Refuse, in one sentence, anything that is not a profile this module wrote."""
    needed = ("schema", "device_name", "date", "gemm", "copy", "kernel_us", "cpu_us")
    missing = [k for k in needed if not isinstance(profile, dict) or k not in profile]
    if missing:
        raise ValueError(
            _(
                "not a GPU profile (no {keys}): write one with `make gpu-check` "
                "(gpu_profile_<gpu>.json under notebooks/results/)"
            ).format(keys=", ".join(missing))
        )
    if profile["schema"] != SCHEMA:
        raise ValueError(
            _(
                "GPU profile schema {found!r}, this course reads {schema}: record it "
                "again with `make gpu-check`"
            ).format(found=profile["schema"], schema=SCHEMA)
        )
    problem = _rows_problem(profile)
    if problem:
        raise ValueError(problem)


def load_profile(path: str | Path) -> dict:
    """A recorded profile, checked (``check_profile``); a clear error otherwise."""
    try:
        profile = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(
            _("cannot read the GPU profile {path}: {why}").format(
                path=path, why=e.strerror
            )
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(
            _("the GPU profile {path} is not JSON: {why}").format(path=path, why=e)
        ) from None
    check_profile(profile)
    return profile


def profile_filename(device_name_: str) -> str:
    """``"gpu_profile_h200.json"`` for ``"NVIDIA H200"``, beside ``bench_h200.json``."""
    from amp_lessons.measure.bench_results import results_filename

    return results_filename(device_name_).replace("bench_", "gpu_profile_", 1)
