"""The ladder of AMP at full speed as the estimate prices it, beside a recorded climb.

``amp_lessons.measure.ladder`` measures the bench's transformer one switch at a time
on a GPU (eager fp32, TF32, bf16 autocast, fused AdamW, ``torch.compile``, a larger
batch); ``make gpu-check`` records it as ``notebooks/results/ladder_<gpu>.json``.
This module prices the same rungs with the estimate (``estimate_step``), on any GPU
of its table, so that lesson 06 can show the climb, and why each switch helps,
before and beside a measured one.

A compiled rung is priced as Inductor runs the model (``measure.inductor_fusion``:
the elementwise kernels between two library kernels fused into one generated kernel
each); the loss and the optimizer stay eager, as ``torch.compile(model)`` leaves
them.

Example::

    rows = estimated_ladder("H200-SXM-141GB")
    [(r["rung"], round(r["estimated_ms"])) for r in rows]
    # [('eager fp32', 426), ('TF32', 116), ('bf16 autocast', 65), ...]
"""

from __future__ import annotations

import json
from pathlib import Path

from amp_lessons.i18n import N_, _
from amp_lessons.measure.bench import GPU_SIZES, train_flops, transformer_batch
from amp_lessons.measure.bench_results import RESULTS_DIR
from amp_lessons.measure.estimate import FITTED, Efficiency, Estimate, estimate_step
from amp_lessons.measure.estimate_check import bench_workload, gpu_key
from amp_lessons.measure.gpus import find_gpu
from amp_lessons.measure.ladder import CONFIG, RUNGS, Rung

DEFAULT_GPU = "H100-SXM5-80GB"
# the GPUs lesson 06's ladder text describes: the GPU check's targets
LADDER_GPUS = ("H100-SXM5-80GB", "H200-SXM-141GB")
RECORD_KEYS = ("gpu", "torch", "date", "command", "rows")


def ladder_gpu(reports: list[dict]) -> str:
    """The GPU to price the ladder on: that of the first recorded bench run on an
    H100 or H200 (so that the estimate sits beside a measurement), else
    ``DEFAULT_GPU``. Other GPUs' records are left out: the lesson's text describes
    these two (a V100 has no bf16 rung at all)."""
    for report in reports:
        gpu = gpu_key(report.get("device_name") or report.get("gpu") or "")
        if gpu in LADDER_GPUS:
            return gpu
    return DEFAULT_GPU


def gpu_sizes(gpu: str) -> dict:
    """The bench transformer's sizes on ``gpu``, as the bench picks them there (its
    batch grows with the GPU's memory: ``bench.transformer_batch``)."""
    sizes = dict(GPU_SIZES[CONFIG])
    sizes["batch"] = transformer_batch(find_gpu(gpu).memory_gb * 1e9 / 2**30)
    return sizes


def estimate_rung(
    rung: Rung, sizes: dict, gpu: str, efficiency: Efficiency = FITTED
) -> Estimate:
    """One rung's step as the estimate prices it: the bench's step (AdamW, clipping
    at 1.0) in the rung's precision, its optimizer fused or torch's default
    (foreach), its model compiled where the rung compiles it, at ``sizes`` with
    the rung's batch."""
    scaled = {**sizes, "batch": sizes["batch"] * rung.batch_scale}
    w = bench_workload(CONFIG, scaled)
    return estimate_step(
        w.model,
        w.inputs,
        gpu,
        rung.precision,
        w.optimizer,
        w.loss_fn,
        efficiency,
        implementation="fused" if rung.fused else "foreach",
        clip=True,
        compiled=rung.compiled,
    )


def estimated_ladder(
    gpu: str = DEFAULT_GPU, sizes: dict | None = None, rungs: tuple = RUNGS
) -> list[dict]:
    """Every rung priced by the estimate on ``gpu`` (default sizes: the bench's on
    that GPU). Each row: ``rung``, ``batch``, ``estimate``, ``estimated_ms``,
    ``regime`` and ``mfu_vs_bf16_peak`` (the bench's FLOP count,
    ``bench.train_flops``, over the estimated time and the dense bf16 peak)."""
    sizes = sizes or gpu_sizes(gpu)
    bf16_peak = find_gpu(gpu).peak("bf16")
    rows = []
    for rung in rungs:
        e = estimate_rung(rung, sizes, gpu)
        batch = sizes["batch"] * rung.batch_scale
        flops = train_flops(CONFIG, {**sizes, "batch": batch})
        rows.append(
            {
                "rung": rung.name,
                "batch": batch,
                "estimate": e,
                "estimated_ms": e.seconds * 1e3,
                "regime": e.regime,
                "mfu_vs_bf16_peak": flops / e.seconds / bf16_peak,
            }
        )
    return rows


def format_estimated_ladder(rows: list[dict]) -> str:
    """The estimated ladder as a table, in the reader's language: milliseconds,
    speed-up over the first rung in tokens a second (a larger batch's step does
    more), the shares of compute, memory and overhead, and the MFU it implies
    against the dense bf16 peak."""
    base = rows[0]["batch"] / rows[0]["estimated_ms"]
    names = [_(r["rung"]) for r in rows]
    width = max(len(n) for n in [*names, _("rung")])
    headers = [
        _(h)
        for h in (
            N_("batch"),
            "ms",
            N_("vs eager fp32"),
            N_("compute"),
            N_("memory"),
            N_("overhead"),
            "MFU",
        )
    ]
    widths = [max(len(h), 5) for h in headers]
    gutter = "  "  # two spaces: the headers must not read as one phrase
    lines = [
        gutter.join(
            [
                f"{_('rung'):<{width}}",
                *(f"{h:>{w}}" for h, w in zip(headers, widths, strict=True)),
            ]
        )
    ]
    for name, r in zip(names, rows, strict=True):
        e = r["estimate"]
        shares = (e.compute_s, e.memory_s, e.overhead_s)
        cells = [
            str(r["batch"]),
            f"{r['estimated_ms']:.1f}",
            f"{r['batch'] / r['estimated_ms'] / base:.2f}x",
            *(f"{part / e.seconds:.0%}" for part in shares),
            f"{r['mfu_vs_bf16_peak']:.1%}",
        ]
        lines.append(
            gutter.join(
                [
                    f"{name:<{width}}",
                    *(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)),
                ]
            )
        )
    return "\n".join(lines)


def record_estimates(record: dict) -> list[float | None]:
    """The estimate's milliseconds for each row of a recorded climb, at the sizes
    that row ran (its batch included), on the record's GPU; None for a precision
    that GPU lacks, and every rung of a GPU the estimate's table lacks."""
    gpu = gpu_key(record["gpu"])
    out = []
    for row in record["rows"]:
        if gpu is None or not find_gpu(gpu).supports(row["precision"]):  # V100: TF32
            out.append(None)
            continue
        # the row's sizes (ladder.climb records them) already hold its batch: price
        # it unscaled
        rung = Rung(row["rung"], row["precision"], row["fused"], row["compiled"])
        out.append(estimate_rung(rung, row["sizes"], gpu).seconds * 1e3)
    return out


def recorded_ladders(results_dir: Path = RESULTS_DIR) -> list[dict]:
    """Every ladder a GPU run recorded (``ladder_<gpu>.json``), each with its
    provenance; a clear error for a file that lacks it."""
    records = []
    for path in sorted(Path(results_dir).glob("ladder_*.json")):
        record = json.loads(path.read_text())
        missing = [k for k in RECORD_KEYS if k not in record]
        if missing:
            raise ValueError(
                f"{path.name} is not a ladder record (no {', '.join(missing)}): "
                "record one with `make gpu-check`"
            )
        records.append(record)
    return records
