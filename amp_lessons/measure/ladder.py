"""AMP at full speed: the bench's transformer climbed one switch at a time, from eager
fp32 to everything a user can turn on from Python (no custom kernels).

Each rung keeps the ones below it: strict fp32 -> TF32 -> bf16 autocast -> fused
AdamW (one kernel for the whole optimizer step) -> ``torch.compile`` (fused
elementwise kernels, fewer launches) -> a larger batch, where the memory bf16 saved
allows it. Each row records the step time, tokens a second, TFLOP/s, the model FLOPs
utilisation (MFU) against the GPU's dense peak for the rung's precision and against
the dense bf16 peak, and the peak memory. ``make gpu-check`` runs it on the GPU;
lesson 06 reads the record.

Example (a tiny transformer on the CPU: mechanics only, ratios are not a GPU's)::

    rows = climb("cpu", sizes=TINY, warmup=1, iters=2)
    [r["rung"] for r in rows]  # ['eager fp32', 'TF32', 'bf16 autocast', ...]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from amp_lessons.core.precision import resolve_precision, tf32_mode
from amp_lessons.i18n import N_, _
from amp_lessons.measure.bench import (
    _release,
    bench_step,
    build,
    device_name,
    merge_sizes,
    peak_tflops,
    time_with_peak,
    train_flops,
)

CONFIG = "transformer"
# A transformer small enough for a CPU test, compile included
TINY = {
    "n_layer": 1,
    "n_head": 2,
    "n_embd": 32,
    "block_size": 16,
    "batch": 2,
    "vocab_size": 64,
}
MEMORY_HEADROOM = 0.85  # the larger batch must be predicted to fit in this share


@dataclass(frozen=True)
class Rung:
    """One row of the ladder: the switches on at this rung."""

    name: str
    precision: str
    fused: bool = False
    compiled: bool = False
    batch_scale: int = 1


# Names are recorded in English (N_ marks them for the catalogue) and shown with
# _(name) in the reader's language.
RUNGS = (
    Rung(N_("eager fp32"), "fp32"),
    Rung("TF32", "tf32"),
    Rung(N_("bf16 autocast"), "bf16"),
    Rung(N_("+ fused AdamW"), "bf16", fused=True),
    Rung("+ torch.compile", "bf16", fused=True, compiled=True),
    Rung(N_("+ 2x batch"), "bf16", fused=True, compiled=True, batch_scale=2),
)


def rung_step(rung: Rung, device: torch.device, sizes: dict, seed: int = 0):
    """The training step of one rung (a closure) and the model it trains."""
    p = resolve_precision(rung.precision, device, warn=False)
    model, x, y, loss_fn, _ = build(CONFIG, sizes, device, seed)
    # the bench's AdamW, fused (one kernel for every parameter) where the rung says
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=rung.fused)
    if rung.compiled:
        # a fresh compile, as a run at this batch gets: otherwise the 2x-batch rung
        # would recompile the forward the rung below compiled, with its batch
        # dimension dynamic (dynamo's automatic dynamic shapes)
        torch._dynamo.reset()
    run = torch.compile(model) if rung.compiled else model
    return bench_step(run, optimizer, p, device, (x, y), loss_fn), p


def _fits(rows: list[dict], rung: Rung, device: torch.device) -> str:
    """Why a larger batch is not tried ("" to try it): predicted from the rung
    below's peak, as resident + batch_scale x the rest, against the GPU's memory."""
    if rung.batch_scale == 1 or device.type != "cuda" or not rows:
        return ""
    below = rows[-1]
    if below.get("peak_mem_bytes") is None:
        return "the rung below has no memory measured"
    resident = below["resident_bytes"] or 0
    need = resident + rung.batch_scale * (below["peak_mem_bytes"] - resident)
    total = torch.cuda.get_device_properties(device).total_memory
    if need > MEMORY_HEADROOM * total:
        return f"predicted {need / 2**30:.1f} GiB, over {MEMORY_HEADROOM:.0%} of memory"
    return ""


def measure_rung(
    rung: Rung, device: torch.device, sizes: dict, warmup: int, iters: int
) -> dict:
    """Time one rung; its row (see the module's docstring)."""
    sizes = {**sizes, "batch": sizes["batch"] * rung.batch_scale}
    _release(device)
    try:
        step, p = rung_step(rung, device, sizes)
        with tf32_mode(p.tf32, device.type):
            times, resident, peak = time_with_peak(step, device, warmup, iters)
    finally:
        _release(device)
    step_ms = statistics.median(times)
    flops = train_flops(CONFIG, sizes)
    tflops = flops / (step_ms * 1e-3) / 1e12
    peaks = peak_tflops(device_name(device)) if device.type == "cuda" else None
    return {
        **asdict(rung),
        "rung": rung.name,
        "batch": sizes["batch"],
        "sizes": sizes,  # the model's, this rung's batch included (the estimate's)
        "step_ms": step_ms,
        "times_ms": times,
        "tokens_per_s": sizes["batch"] * sizes["block_size"] / (step_ms * 1e-3),
        "tflops": tflops,
        "mfu": tflops / peaks[rung.precision] if peaks else None,
        "mfu_vs_bf16_peak": tflops / peaks["bf16"] if peaks else None,
        "peak_mem_bytes": peak,
        "resident_bytes": resident,
    }


def climb(
    device: torch.device | str = "cuda",
    sizes: dict | None = None,
    warmup: int = 5,
    iters: int = 20,
    rungs: tuple[Rung, ...] = RUNGS,
    deadline: float | None = None,
    on_row: Callable[[list[dict]], None] | None = None,
) -> list[dict]:
    """Measure each rung in turn (see the module's docstring); a rung that cannot
    run (out of memory, no time left before ``deadline``, epoch seconds) is a row
    with ``skipped`` saying why, and the climb goes on. ``on_row(rows)`` after each
    (gpu-check saves them: a killed climb keeps its rows)."""
    device = torch.device(device)
    sizes = dict(sizes if sizes is not None else merge_sizes(device)[CONFIG])
    rows: list[dict] = []
    for rung in rungs:
        why = _fits(rows, rung, device)
        if not why and deadline is not None and time.time() > deadline:
            why = "no time left"
        row = None
        if not why:
            try:
                row = measure_rung(rung, device, sizes, warmup, iters)
            except torch.OutOfMemoryError as e:
                why = "CUDA out of memory: " + str(e).splitlines()[0]
        rows.append(row or _skipped_row(rung, sizes, why))
        if on_row is not None:
            on_row(rows)
    return rows


def _skipped_row(rung: Rung, sizes: dict, why: str) -> dict:
    """The row of a rung not measured, saying why; its sizes those it would have
    had (its batch scaled), which the estimate prices."""
    scaled = {**sizes, "batch": sizes["batch"] * rung.batch_scale}
    return {**asdict(rung), "rung": rung.name, "sizes": scaled, "skipped": why}


def rows_not_reached(
    rows: list[dict], why: str, rungs: tuple[Rung, ...] = RUNGS
) -> list[dict]:
    """A row for each rung a climb never got to write (its process killed at its
    time limit, say), saying ``why``: the record then lists every rung. Sizes come
    from the first row; none without one."""
    if not rows:
        return []
    first = rows[0]
    sizes = {**first["sizes"], "batch": first["sizes"]["batch"] // first["batch_scale"]}
    written = {r["rung"] for r in rows}
    return [_skipped_row(r, sizes, why) for r in rungs if r.name not in written]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def format_ladder(rows: list[dict], estimated_ms: list | None = None) -> str:
    """The ladder as a Markdown table, each rung's speed-up over the first in tokens
    a second (a rung with a larger batch takes longer a step, and does more; in the
    reader's language: ``amp_lessons.set_language``), with the estimate's time of
    each rung in a last column where ``estimated_ms`` gives it (None: not priced)."""
    base = next((r["tokens_per_s"] for r in rows if "step_ms" in r), None)
    headers = [
        N_("rung"),
        N_("batch"),
        N_("step ms"),
        N_("vs eager fp32"),
        "tokens/s",
        "TFLOP/s",
        "MFU",
        N_("MFU vs bf16 peak"),
        N_("peak MiB"),
    ]
    if estimated_ms is not None:
        headers.append(N_("estimated ms"))
    lines = [
        "| " + " | ".join(_(h) for h in headers) + " |",
        "|---" + "|---:" * (len(headers) - 1) + "|",
    ]
    for i, r in enumerate(rows):
        if "step_ms" not in r:
            why = _("not measured: {why}").format(why=r["skipped"])
            cells = [_(r["rung"]), "", why] + [""] * (len(headers) - 3)
        else:
            mib = r["peak_mem_bytes"] / 2**20 if r["peak_mem_bytes"] else None
            cells = [
                _(r["rung"]),
                str(r["batch"]),
                f"{r['step_ms']:.2f}",
                f"{r['tokens_per_s'] / base:.2f}x",
                f"{r['tokens_per_s']:,.0f}",
                f"{r['tflops']:.1f}",
                _percent(r["mfu"]),
                _percent(r["mfu_vs_bf16_peak"]),
                f"{mib:,.0f}" if mib else "-",
            ]
            if estimated_ms is not None:
                cells.append("-")
        if estimated_ms is not None and estimated_ms[i] is not None:
            cells[-1] = f"{estimated_ms[i]:.2f}"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
