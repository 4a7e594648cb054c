"""Measure what AMP buys: step time, peak memory and saved activations per precision.

Notebook 06 runs a small bench live, drives the speed/memory panel with
``amp_lessons.measure.speed_memory``'s rows, and reads recorded GPU results
(``amp_lessons.measure.bench_results``: ``notebooks/results/bench_<gpu>.json``, written
by ``python -m amp_lessons bench --device cuda --json ...``).

Each row trains the same model with the same loop as ``amp_lessons.core.train``
(``train_step``), in fp32 (TF32 off), tf32, fp16 (+ GradScaler) and bf16:

* time: ``warmup`` steps first (allocator, cuBLAS heuristics, autocast caches), then
  ``iters`` steps, each closed by ``torch.cuda.synchronize()`` on a GPU (kernels run
  asynchronously: without it we would time the launches), reported as the median;
* peak memory: ``torch.cuda.max_memory_allocated`` over the timed steps (after
  ``reset_peak_memory_stats``); CUDA only, since torch does not track CPU allocations;
* ``activation_bytes``: the exact bytes autograd keeps for backward
  (``amp_lessons.core.memory``), on every device;
* TFLOP/s from the matmul FLOPs counted analytically (``train_flops``) and MFU against
  the GPU's datasheet peak where it is known (``PEAK_TFLOPS``).

Two configurations: ``"mlp"``, the PyTorch AMP recipe's model (3 x Linear 4096, batch
512, SGD, MSE): weight-heavy, where AMP has been reported to use MORE memory; and
``"transformer"``, a GPT where activations dominate.

Not covered here: multi-GPU. The fp8 row (torchao, compiled) is ``bench_fp8``'s.
"""

from __future__ import annotations

import gc
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from amp_lessons.core.device import cpu_matmul_emulated, read_cpu_name, resolve_device
from amp_lessons.core.memory import format_bytes
from amp_lessons.core.models import GPT, MLP, make_tokens
from amp_lessons.core.precision import (
    autocast_context,
    make_scaler,
    resolve_precision,
    tf32_mode,
)
from amp_lessons.core.train import StepStats, Task, train_step
from amp_lessons.i18n import N_, gettext
from amp_lessons.measure import bench_fp8
from amp_lessons.measure.bench_fp8 import BENCH_PRECISIONS, FP8, default_precisions

CONFIGS = ("mlp", "transformer")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd_momentum")  # memory.OPTIMIZER_STATE's names


# Small enough that the whole CPU bench takes seconds: CPU bf16/fp16 matmuls are
# usually emulated (device.EMULATION_NOTE), so these sizes measure mechanics only.
CPU_SIZES = {
    "mlp": {"width": 256, "layers": 3, "batch": 32},
    "transformer": {
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 64,
        "block_size": 32,
        "batch": 4,
        "vocab_size": 128,
    },
}
# The recipe's MLP as published; a GPT-2-small body (12 x 768, T=1024, vocab 8192 of
# synthetic tokens). The transformer's batch grows with GPU memory (see default_sizes).
GPU_SIZES = {
    "mlp": {"width": 4096, "layers": 3, "batch": 512},
    "transformer": {
        "n_layer": 12,
        "n_head": 12,
        "n_embd": 768,
        "block_size": 1024,
        "batch": 8,
        "vocab_size": 8192,
    },
}
DEFAULT_STEPS = {"cpu": (3, 8), "cuda": (5, 20), "mps": (3, 10)}  # (warmup, iters)

# Dense (no sparsity) peak TFLOP/s from NVIDIA datasheets, by precision. First pattern
# matching torch.cuda.get_device_name() wins. A GPU without TF32 (before Ampere) runs
# the tf32 setting as fp32, so its fp32 peak is used there.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"H100.*PCIe", {"fp32": 51, "tf32": 378, "fp16": 756, "bf16": 756}),
    (r"H100.*NVL", {"fp32": 60, "tf32": 418, "fp16": 835, "bf16": 835}),
    (r"H100|H200", {"fp32": 67, "tf32": 495, "fp16": 989, "bf16": 989}),  # SXM
    (r"A100", {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312}),
    (r"RTX 4090", {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2}),
    (r"\bL4\b", {"fp32": 30.3, "tf32": 60, "fp16": 121, "bf16": 121}),
    (r"V100", {"fp32": 15.7, "tf32": 15.7, "fp16": 125}),  # SXM2
    (r"\bT4\b", {"fp32": 8.1, "tf32": 8.1, "fp16": 65}),
)


# ---- Sizes, FLOPs, peaks -------------------------------------------------------------


def _unknown_config(config: object) -> ValueError:
    return ValueError(
        f"unknown bench config {config!r}; use one of: {', '.join(CONFIGS)}"
    )


def default_sizes(device: torch.device | str) -> dict[str, dict[str, int]]:
    """The sizes a bench uses on a device unless told otherwise.

    Example: ``default_sizes("cpu")["mlp"] == {"width": 256, "layers": 3,
    "batch": 64}``; on a GPU the MLP is the recipe's 4096-wide one.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return {k: dict(v) for k, v in CPU_SIZES.items()}
    sizes = {k: dict(v) for k, v in GPU_SIZES.items()}
    gib = torch.cuda.get_device_properties(device).total_memory / 2**30
    sizes["transformer"]["batch"] = transformer_batch(gib)
    return sizes


def transformer_batch(memory_gib: float) -> int:
    """The bench transformer's batch on a GPU of ``memory_gib``: a larger batch lets
    activations dominate the fixed fp32 weights, gradients and Adam state
    (``transformer_batch(80)`` -> 32, as on an H100 or H200)."""
    return 32 if memory_gib >= 70 else 16 if memory_gib >= 35 else 8


def merge_sizes(
    device: torch.device | str, overrides: dict[str, dict[str, int]] | None = None
) -> dict[str, dict[str, int]]:
    """Default sizes with some values replaced; unknown names are refused.

    Example: ``merge_sizes("cpu", {"mlp": {"width": 512}})["mlp"]["width"] == 512``.
    """
    sizes = default_sizes(device)
    for config, values in (overrides or {}).items():
        if config not in sizes:
            raise _unknown_config(config)
        for key, value in values.items():
            if key not in sizes[config]:
                raise ValueError(
                    f"unknown size {key!r} for {config}; sizes are: "
                    f"{', '.join(sizes[config])}"
                )
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"{config} {key} must be a positive integer, got {value!r}"
                )
            sizes[config][key] = value
    t = sizes["transformer"]
    if t["n_embd"] % t["n_head"]:
        raise ValueError(
            f"transformer n_embd={t['n_embd']} must be a multiple of "
            f"n_head={t['n_head']}"
        )
    return sizes


def train_flops(config: str, sizes: dict[str, int]) -> int:
    """Matmul FLOPs of one training step (forward + backward), from the shapes.

    Example: the recipe's MLP, 3 x Linear(4096, 4096) at batch 512, does
    ``2*512*4096**2`` FLOPs per matmul: 3 forward, 3 weight-gradient and 2
    input-gradient matmuls (the first layer's input needs no gradient), so
    ``train_flops("mlp", GPU_SIZES["mlp"]) == 8 * 2 * 512 * 4096**2`` (137 GFLOP).
    """
    if config == "mlp":
        per_matmul = 2 * sizes["batch"] * sizes["width"] ** 2
        return per_matmul * (3 * sizes["layers"] - 1)
    if config == "transformer":
        L, C, T = sizes["n_layer"], sizes["n_embd"], sizes["block_size"]
        tokens = sizes["batch"] * T
        # per block: qkv 3C^2 + proj C^2 + MLP 8C^2 weights; then the C x vocab head
        weights = 12 * L * C * C + C * sizes["vocab_size"]
        attention = 4 * T * C * L  # QK^T and AV: 2 matmuls of 2*T*C per token
        return 3 * tokens * (2 * weights + attention)
    raise _unknown_config(config)


def peak_tflops(device_name: str) -> dict[str, float] | None:
    """Datasheet dense peak TFLOP/s per precision for a GPU name, or None if unknown.

    Example: ``peak_tflops("NVIDIA H200")["bf16"] == 989``;
    ``peak_tflops("NVIDIA A100-SXM4-80GB")["tf32"] == 156``.
    """
    for pattern, peaks in PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return dict(peaks)
    return None


# ---- Timing and one measurement ------------------------------------------------------


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels: GPU work is asynchronous, host timers are not."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_steps(
    step: Callable[[], object],
    device: torch.device | str,
    warmup: int = 2,
    iters: int = 5,
    deadline: float | None = None,
) -> list[float]:
    """Milliseconds of each of ``iters`` calls of ``step``, after ``warmup`` calls.

    ``deadline``, a ``time.perf_counter()`` reading: once it has passed, stop after
    the call being timed (so at least one call is timed when ``iters >= 1``).

    Example: ``statistics.median(time_steps(lambda: a @ a, "cpu"))`` -> ``0.8``.
    """
    device = torch.device(device)
    for _ in range(warmup):
        step()
    synchronize(device)
    times: list[float] = []
    while len(times) < iters:
        t0 = time.perf_counter()
        step()
        synchronize(device)
        times.append(1e3 * (time.perf_counter() - t0))
        if deadline is not None and time.perf_counter() > deadline:
            break
    return times


def time_with_peak(
    step: Callable[[], object],
    device: torch.device,
    warmup: int,
    iters: int,
    deadline: float | None = None,
) -> tuple[list[float], int | None, int | None]:
    """``time_steps`` after warm-up, with the CUDA allocator's view of the timed steps:
    (times in ms, bytes allocated before them, their peak); None, None off CUDA."""
    time_steps(step, device, warmup=warmup, iters=0)
    resident = peak = None  # CUDA only: torch does not track CPU allocations
    if device.type == "cuda":
        # after warm-up: optimizer state exists, so the peak is a steady step's
        torch.cuda.reset_peak_memory_stats(device)
        resident = torch.cuda.memory_allocated(device)
    times = time_steps(step, device, warmup=0, iters=iters, deadline=deadline)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    return times, resident, peak


def make_optimizer(name: str, params, lr: float = 1e-3) -> torch.optim.Optimizer:
    """The optimizer called `name` (one of ``OPTIMIZERS``) over `params`.

    The names are ``memory.optimizer_state_bytes``', so the state it keeps can be
    counted: ``make_optimizer("sgd_momentum", model.parameters(), lr=0.1)`` is
    ``SGD(momentum=0.9)`` with one momentum buffer per parameter.
    """
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name in ("sgd", "sgd_momentum"):
        return torch.optim.SGD(
            params, lr=lr, momentum=0.9 if name == "sgd_momentum" else 0.0
        )
    raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")


def build(config: str, sizes: dict[str, int], device: torch.device, seed: int = 0):
    """Model, one fixed batch, loss function and optimizer for a bench config.

    The batch is fixed so that data generation is not timed.
    Example: ``model, x, y, loss_fn, optimizer = build("mlp", CPU_SIZES["mlp"], cpu)``.
    """
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    if config == "mlp":
        width, batch = sizes["width"], sizes["batch"]
        model = MLP((width,) * (sizes["layers"] + 1)).to(device)
        x = torch.randn(batch, width, generator=g).to(device)
        y = torch.randn(batch, width, generator=g).to(device)
        # the recipe's choices: MSE against noise, plain SGD (no optimizer state)
        return model, x, y, F.mse_loss, make_optimizer("sgd", model.parameters())
    if config == "transformer":
        s = sizes
        model = GPT(
            s["vocab_size"], s["block_size"], s["n_layer"], s["n_head"], s["n_embd"]
        ).to(device)
        x, y = make_tokens(s["batch"], s["block_size"], s["vocab_size"], g)
        optimizer = make_optimizer("adamw", model.parameters(), lr=3e-4)
        return model, x.to(device), y.to(device), Task.loss_fn, optimizer
    raise _unknown_config(config)


def bench_one(
    config: str,
    precision: str,
    device: torch.device | str = "cpu",
    sizes: dict[str, int] | None = None,
    warmup: int = 2,
    iters: int = 5,
    seed: int = 0,
) -> dict:
    """Time and measure training steps of one config in one precision.

    Example::

        row = bench_one("mlp", "bf16", "cpu", {"width": 64, "layers": 3, "batch": 8})
        row["step_ms"], row["activation_bytes"], row["peak_mem_bytes"]  # 1.2, ..., None
    """
    device = resolve_device(str(device))
    fp8 = precision == FP8  # bf16 autocast around torchao's fp8 Linears
    p = resolve_precision(bench_fp8.base_precision(precision), device, warn=False)
    sizes = sizes if sizes is not None else merge_sizes(device)[config]
    if warmup < 0 or iters < 1:
        raise ValueError(f"need warmup >= 0 and iters >= 1, got {warmup}, {iters}")
    _release(device)
    try:
        times, peak, resident, act, param_bytes = _measure(
            config, p, device, sizes, warmup, iters, seed, fp8
        )
    finally:
        _release(device)  # the model is gone: give its memory back before the next
    step_ms = statistics.median(times)
    flops = train_flops(config, sizes)
    tflops = flops / (step_ms * 1e-3) / 1e12
    peaks = peak_tflops(device_name(device)) if device.type == "cuda" else None
    peak_value = peaks.get(precision) if peaks else None
    return {
        "config": config,
        "precision": precision,
        "step_ms": step_ms,
        "times_ms": times,
        "peak_mem_bytes": peak,
        "resident_bytes": resident,
        "activation_bytes": act,
        "param_bytes": param_bytes,
        "flops_per_step": flops,
        "tflops": tflops,
        "mfu": tflops / peak_value if peak_value else None,
        "note": bench_fp8.FP8_NOTE if fp8 else _row_note(p, device),
    }


def bench_step(model, optimizer, p, device, batch, loss_fn) -> Callable[[], StepStats]:
    """The bench's training step as a closure (``train_step`` on one fixed ``batch``,
    an (x, y) pair, with the scaler and autocast of precision ``p``, clipping at
    1.0): what the bench, the ladder and the step profile each time."""
    scaler, ctx = make_scaler(p, device), autocast_context(p, device)

    def step() -> StepStats:
        return train_step(model, optimizer, scaler, ctx, [batch], loss_fn, clip=1.0)

    return step


def _measure(config, p, device, sizes, warmup, iters, seed, fp8=False):
    from amp_lessons.core.memory import activation_bytes  # the exact saved-tensor count

    eager, x, y, loss_fn, optimizer = build(config, sizes, device, seed)
    model = bench_fp8.prepare_fp8(eager) if fp8 else eager  # the same Parameters
    step = bench_step(model, optimizer, p, device, (x, y), loss_fn)
    with tf32_mode(p.tf32, device.type):
        times, resident, peak = time_with_peak(step, device, warmup, iters)
        act = activation_bytes(eager, x, p.dtype if p.autocast else None)
    param_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    return times, peak, resident, act, param_bytes


def _release(device: torch.device) -> None:
    # CUDA only: the next row's peak must not include this row's cached blocks. (A
    # full gc.collect() costs ~0.3 s once torch is imported: too slow for CPU rows.)
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


# A row's note, recorded in English (results files keep it so); `format_table` shows
# it in the student's language (`translated_note`).
NOTES = (
    N_(
        "TF32 is an NVIDIA GPU mode: on {device} this is fp32 again, so its time "
        "differs from fp32's only by measurement noise"
    ),
    N_("no TF32 before compute capability 8.0: fp32 again"),
    N_("{precision} on a CPU: {how}; says nothing about GPU speed"),
)
NOTE_HOWS = (N_("emulated (slow, device.EMULATION_NOTE)"), N_("native oneDNN kernels"))


def _row_note(p, device: torch.device) -> str:
    if p.name == "tf32" and device.type != "cuda":
        return NOTES[0].format(device=device.type)
    if p.name == "tf32" and torch.cuda.get_device_capability(device) < (8, 0):
        return NOTES[1]
    if p.autocast and device.type == "cpu":
        how = NOTE_HOWS[0] if cpu_matmul_emulated(p.dtype) else NOTE_HOWS[1]
        return NOTES[2].format(precision=p.name, how=how)
    return ""


def translated_note(note: str, templates: Sequence[str] = NOTES) -> str:
    """A row's recorded (English) note in the current language: it is matched against
    the note templates (a report's own: ``bench_results.REPORT_NOTES``), and its
    values put back in the translation.

    Example: ``translated_note("no TF32 before compute capability 8.0: fp32 again")``
    is the same text in English, and "sin TF32 antes de ..." after set_language("es").
    """
    for template in templates:
        pattern = "".join(
            f"(?P<{part[1:-1]}>.+?)" if part.startswith("{") else re.escape(part)
            for part in re.split(r"(\{\w+\})", template)
        )
        found = re.fullmatch(pattern, note)
        if found:
            return gettext(template).format(
                **{  # a device or precision stays as is
                    key: gettext(value) if value in NOTE_HOWS else value
                    for key, value in found.groupdict().items()
                }
            )
    return gettext(note)


def device_name(device: torch.device) -> str:
    """What a results file records as the machine: ``"NVIDIA H200"``, a CPU's model."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple GPU (MPS)"
    return read_cpu_name()


# ---- The whole bench -----------------------------------------------------------------


def run_bench(
    device: str = "auto",
    configs: Sequence[str] = CONFIGS,
    precisions: Sequence[str] | None = None,
    sizes: dict[str, dict[str, int]] | None = None,
    warmup: int | None = None,
    iters: int | None = None,
    skipped: list[dict] | None = None,
    progress: Callable[[str], None] | None = None,
    threads: int | None = None,
) -> list[dict]:
    """Bench every config in every precision on one device; rows with ratios vs fp32.

    Precisions (default: ``default_precisions``) the device cannot run (bf16 before
    Ampere, fp8 before 8.9) are left out and listed in ``skipped`` when a list is
    passed. ``sizes`` overrides the defaults per config.
    ``threads``: CPU threads for torch while measuring; default 1 on a CPU, where the
    tiny default models spend longer handing work between threads than computing
    (on a busy 2-core machine 2 threads measured ~10x slower), untouched otherwise.

    Example (a notebook, seconds on a CPU)::

        rows = run_bench("cpu", configs=["mlp"], sizes={"mlp": {"width": 128}})
        {r["precision"]: r["speedup_vs_fp32"] for r in rows}  # {"fp32": 1.0, ...}
    """
    dev = resolve_device(device)
    precisions = default_precisions(dev) if precisions is None else precisions
    _refuse_unknown(precisions, configs)
    all_sizes = merge_sizes(dev, sizes)
    default_warmup, default_iters = DEFAULT_STEPS[dev.type]
    warmup = default_warmup if warmup is None else warmup
    iters = default_iters if iters is None else iters
    usable = _runnable(precisions, dev, skipped)
    if threads is None and dev.type == "cpu":
        threads = 1
    rows = []
    with cpu_threads(threads):
        for config in configs:
            for name in usable:
                if progress:
                    progress(f"{config} {name} ...")
                rows.append(
                    bench_one(config, name, dev, all_sizes[config], warmup, iters)
                )
    return add_ratios(rows)


def _refuse_unknown(precisions: Sequence[str], configs: Sequence[str]) -> None:
    for name in precisions:
        if name not in BENCH_PRECISIONS:
            raise ValueError(
                gettext("unknown precision {value}; use one of: {choices}").format(
                    value=repr(name), choices=", ".join(BENCH_PRECISIONS)
                )
            )
    for config in configs:
        if config not in CONFIGS:
            raise _unknown_config(config)


def _runnable(
    precisions: Sequence[str], dev: torch.device, skipped: list[dict] | None
) -> list[str]:
    """The precisions ``dev`` can run; each other one goes to ``skipped`` (when it is
    a list) with its reason."""
    usable = []
    for name in precisions:
        try:  # RuntimeError: e.g. bf16 on a pre-Ampere GPU, fp8 on a CPU
            if name == FP8 and (reason := bench_fp8.fp8_unavailable(dev)):
                raise RuntimeError(reason)
            resolve_precision(bench_fp8.base_precision(name), dev, warn=False)
            usable.append(name)
        except RuntimeError as e:
            if skipped is not None:
                skipped.append({"precision": name, "reason": str(e)})
    return usable


@contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """Run with ``torch.set_num_threads(n)``, then restore (``None``: leave as is).

    Example: ``with cpu_threads(1): bench_one("mlp", "fp32", "cpu")``.
    """
    if n is None:
        yield
        return
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def add_ratios(rows: list[dict]) -> list[dict]:
    """Add speedup, peak-memory and activation ratios against each config's fp32 row.

    Example: fp32 at 10 ms and bf16 at 4 ms give bf16 ``speedup_vs_fp32 == 2.5``.
    """
    base = {r["config"]: r for r in rows if r["precision"] == "fp32"}
    for row in rows:
        ref = base.get(row["config"])
        row["speedup_vs_fp32"] = ref["step_ms"] / row["step_ms"] if ref else None
        row["peak_mem_ratio_vs_fp32"] = _ratio(
            row["peak_mem_bytes"], ref and ref["peak_mem_bytes"]
        )
        row["activation_ratio_vs_fp32"] = _ratio(
            row["activation_bytes"], ref and ref["activation_bytes"]
        )
    return rows


def _ratio(a, b):
    return a / b if a is not None and b else None


# ---- Showing results (saving and reading them: amp_lessons.measure.bench_results)
# ------------


def _bytes(n) -> str:
    return "-" if n is None else format_bytes(n)


def _tflops(t: float) -> str:
    return f"{t:.1f}" if t >= 1 else f"{t:.2g}"  # CPUs: small but not zero


def _times(r) -> str:
    """A ratio as the table shows it: ``2.50x``, or ``-`` where there is none."""
    return "-" if r is None else f"{r:.2f}x"


def format_table(results: Iterable[dict]) -> str:
    """A fixed-width table of bench rows, ratios against fp32 of the same config.

    Row notes become numbered footnotes. Example first lines::

        config       prec      step ms  speedup       peak peak/fp32         act ...
        mlp          fp32         1.92    1.00x          -         -   224.0 KiB ...
    """
    header = (  # the column names through the catalogue: `bench` prints this table
        f"{gettext('config'):<12} {'prec':<5} {gettext('step ms'):>11} "
        f"{gettext('speedup'):>8} {gettext('peak'):>10} {gettext('peak/fp32'):>9} "
        f"{gettext('act'):>11} {gettext('act/fp32'):>8} {'TFLOP/s':>8} {'MFU':>6}"
    )
    lines = [header, "-" * len(header)]
    notes: list[str] = []
    for r in results:
        mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        mark = ""
        if r.get("note"):
            if r["note"] not in notes:
                notes.append(r["note"])
            mark = f" [{notes.index(r['note']) + 1}]"
        lines.append(
            f"{r['config']:<12} {r['precision']:<5} {r['step_ms']:>11.2f} "
            f"{_times(r.get('speedup_vs_fp32')):>8} {_bytes(r['peak_mem_bytes']):>10} "
            f"{_times(r.get('peak_mem_ratio_vs_fp32')):>9} "
            f"{_bytes(r['activation_bytes']):>11} "
            f"{_times(r.get('activation_ratio_vs_fp32')):>8} "
            f"{_tflops(r['tflops']):>8} {mfu:>6}{mark}"
        )
    lines += [f"[{i}] {translated_note(note)}" for i, note in enumerate(notes, 1)]
    return "\n".join(lines)
