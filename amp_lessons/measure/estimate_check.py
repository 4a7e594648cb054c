"""The estimate beside a real GPU run: the bench's own configs, measured and predicted.

``make gpu-check`` writes ``bench_<gpu>.json``; this module estimates the same two
configs (the recipe's MLP and the course's GPT, at the bench's sizes) on the same GPU
and sets each precision's measured and estimated step time side by side. The summary
page of the check and lesson 06 show that table.

Example:
    >>> from amp_lessons.measure.bench_results import load_results
    >>> rows = measured_vs_estimated(load_results("notebooks/results/bench_h200.json"))
    >>> rows[0]["config"], rows[0]["precision"]
    ('mlp', 'fp32')
"""

from __future__ import annotations

import json

from amp_lessons.core.fp8 import filter_first_and_last
from amp_lessons.measure import model_zoo
from amp_lessons.measure.bench_fp8 import FP8
from amp_lessons.measure.estimate import FITTED, Efficiency, estimate_step
from amp_lessons.measure.gpus import GPUS
from amp_lessons.measure.published import FIT_FILE
from amp_lessons.measure.step_profile import GROUPS, estimate_groups

# torch.cuda.get_device_name() -> the estimate's GPU table
DEVICE_NAMES = {
    "NVIDIA H200": "H200-SXM-141GB",
    "NVIDIA H100 80GB HBM3": "H100-SXM5-80GB",
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB",
    "Tesla V100-SXM2-16GB": "V100-SXM2-16GB",
    "Tesla V100-SXM2-32GB": "V100-SXM2-32GB",
    "Tesla T4": "T4",
    "NVIDIA L4": "L4",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
}


def gpu_key(device_name: str) -> str | None:
    """``gpu_key("NVIDIA H200")`` -> ``"H200-SXM-141GB"``; None for a GPU not in
    the table."""
    return DEVICE_NAMES.get(device_name)


def bench_workload(config: str, sizes: dict) -> model_zoo.Workload:
    """The bench's ``mlp`` or ``transformer`` config on the meta device, with the
    bench's optimizer (plain SGD for the recipe's MLP, AdamW for the GPT)."""
    if config == "mlp":
        return model_zoo.mlp(sizes["layers"], sizes["width"], sizes["batch"], "sgd")
    if config == "transformer":
        return model_zoo.gpt(
            sizes["n_layer"],
            sizes["n_embd"],
            sizes["n_head"],
            sizes["block_size"],
            sizes["batch"],
            sizes["vocab_size"],
        )
    raise ValueError(f"unknown bench config {config!r}; the bench has mlp, transformer")


def measured_vs_estimated(report: dict, efficiency: Efficiency = FITTED) -> list[dict]:
    """Each measured row of a bench report with the estimate of the same step,
    priced with ``efficiency`` (the fitted one, or a GPU profile's:
    ``microbench.efficiency_of``).

    Rows: ``config``, ``precision``, ``measured_ms``, ``estimated_ms``, ``regime``
    and both speed-ups against the config's fp32 row. Empty where the report's GPU
    is not in the estimate's table or no row was timed.
    """
    gpu = gpu_key(report.get("device_name") or report.get("gpu") or "")
    if gpu is None or report.get("synthetic"):  # made-up numbers: nothing to check
        return []
    out, fp32 = [], {}
    for row in report["results"]:
        precision = row["precision"]
        sizes = report.get("sizes", {}).get(row["config"])
        if (
            row.get("step_ms") is None
            or sizes is None
            or not GPUS[gpu].supports(precision)
        ):
            continue
        w = bench_workload(row["config"], sizes)
        # the bench's step: torch's default (foreach) optimizer, clipping at 1.0;
        # its fp8 row as bench_fp8 runs it: the ends in bf16, the model compiled
        fp8 = precision == FP8
        e = estimate_step(
            w.model,
            w.inputs,
            gpu,
            precision,
            w.optimizer,
            w.loss_fn,
            efficiency,
            implementation="foreach",
            clip=True,
            compiled=fp8,
            fp8_filter=filter_first_and_last(w.model) if fp8 else None,
        )
        if precision == "fp32":
            fp32[row["config"]] = (row["step_ms"], e.seconds * 1e3)
        out.append(
            {
                "config": row["config"],
                "precision": precision,
                "measured_ms": row["step_ms"],
                "estimated_ms": e.seconds * 1e3,
                "regime": e.regime,
                "by_group": estimate_groups(e.by_kind),
            }
        )
    for r in out:
        base = fp32.get(r["config"])
        r["measured_speedup"] = base and base[0] / r["measured_ms"]
        r["estimated_speedup"] = base and base[1] / r["estimated_ms"]
    return out


def _fit_date() -> str:
    """The date the fitted efficiencies were recorded (``published_fit.json``)."""
    return json.loads(FIT_FILE.read_text())["date"]


def estimate_section(report: dict) -> str:
    """The summary page's table: measured and estimated step times, side by side."""
    rows = measured_vs_estimated(report)
    if not rows:
        return ""
    lines = [
        "## Measured here vs the first-principles estimate",
        "",
        "The estimate (`python -m amp_lessons estimate`, efficiencies fitted on "
        f"published rows, not on this run: the fit of {_fit_date()}, "
        "`amp_lessons/measure/data/published_fit.json`) of the same two configs on "
        "this GPU, each step as the bench runs it (the fp8 row compiled, its first "
        "and last Linear in bf16). A later fit estimates again; the README states "
        "today's beside this record.",
        "",
        "| config | precision | measured ms | estimated ms | estimate / measured "
        "| measured vs fp32 | estimated vs fp32 | dominant (estimate) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    lines += [_table_row(r, r["regime"]) for r in rows]
    return "\n".join(lines)


def _table_row(r: dict, *more: str) -> str:
    """One config of ``measured_vs_estimated`` as a markdown row: times, their ratio
    and both speed-ups over fp32, then ``more`` cells."""
    cells = [
        r["config"],
        r["precision"],
        f"{r['measured_ms']:.2f}",
        f"{r['estimated_ms']:.2f}",
        f"{r['estimated_ms'] / r['measured_ms']:.2f}",
        _ratio_text(r["measured_speedup"]),
        _ratio_text(r["estimated_speedup"]),
        *more,
    ]
    return "| " + " | ".join(cells) + " |"


def profile_section(report: dict, profile: dict) -> str:
    """The summary page's second table: the same configs priced with this GPU's own
    profile (``microbench``) instead of the fitted efficiencies, beside what was
    measured; empty where the GPU is not in the estimate's table."""
    from amp_lessons.measure.microbench import efficiency_of

    gpu = gpu_key(report.get("device_name") or report.get("gpu") or "")
    if gpu is None or report.get("synthetic"):
        return ""
    eff = efficiency_of(profile, GPUS[gpu])
    rows = measured_vs_estimated(report, eff)
    if not rows:
        return ""
    lines = [
        "## The estimate with this GPU's own profile",
        "",
        "`make gpu-check` measured the numbers the estimate otherwise takes from its "
        f"fit (`amp_lessons.measure.microbench`, {profile['date']}): "
        f"{_gemm_words(profile, eff)}{_attention_words(eff)}"
        + (f"; a copy {eff.memory:.0%} of the bandwidth" if profile["copy"] else "")
        + f"; a tiny kernel takes {eff.kernel_us:.1f} us of GPU time back to back "
        "(replayed from a CUDA graph: a lower bound on an eager launch) and "
        f"{eff.cpu_us:.1f} us of CPU time to issue. Priced with them (the fitted "
        "estimate is in the table above; a precision the profile lacks keeps the "
        "fit's efficiency):",
        "",
        "| config | precision | measured ms | profile ms | profile / measured "
        "| measured vs fp32 | profile vs fp32 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [_table_row(r) for r in rows]
    lines += _split_lines(rows, profile)
    return "\n".join(lines)


def _split_lines(rows: list[dict], profile: dict) -> list[str]:
    """The transformer's step kernel group by kernel group, measured (the profile's
    ``step_split``) beside the profile-priced estimate's groups; nothing where the
    profile has no split."""
    splits = {s["precision"]: s["groups"] for s in profile.get("step_split", [])}
    pairs = [
        (r, splits[r["precision"]])
        for r in rows
        if r["config"] == "transformer" and r["precision"] in splits
    ]
    if not pairs:
        return []
    lines = [
        "",
        "Where the transformer's step goes: each GPU kernel's time in one step "
        "under `torch.profiler`, summed by group by the kernel's name "
        "(`amp_lessons.measure.step_profile`), beside the same groups of the "
        "estimate priced with this profile. A group far off is where the estimate "
        "misses.",
        "",
    ]
    if not any(sum(groups.values()) for _row, groups in pairs):
        return [*lines, "The profiler recorded no GPU kernel: no split to show."]
    lines += [
        "| precision | kernels | measured ms | profile ms | profile / measured |",
        "|---|---|---:|---:|---:|",
    ]
    for r, groups in pairs:
        estimated = r["by_group"]
        for group in (*GROUPS, "all"):
            measured = sum(groups.values()) if group == "all" else groups[group]
            priced = sum(estimated.values()) if group == "all" else estimated[group]
            ratio = f"{priced / measured:.2f}" if measured else "-"
            lines.append(
                f"| {r['precision']} | {group} | {measured:.2f} | {priced:.2f} "
                f"| {ratio} |"
            )
    return lines


def _gemm_words(profile: dict, eff: Efficiency) -> str:
    """What the profile's GEMMs reached, naming only the arithmetic measured."""
    maths = {r["math"] for r in profile["gemm"]}
    parts = [
        f"{value:.0%} in {name}"
        for value, name, measured in (
            (eff.tensor, "fp16/bf16", maths & {"fp16", "bf16"}),
            (eff.tf32, "TF32", "tf32" in maths),
            (eff.fp32, "fp32", "fp32" in maths),
        )
        if measured
    ]
    if not parts:
        return "no GEMM was measured"
    return "of the peaks, large GEMMs reach " + ", ".join(parts)


def _attention_words(eff: Efficiency) -> str:
    """What the profile's fused attention reached, where it was measured."""
    parts = [
        f"{value:.0%} of the {peak} peak in {name}"
        for value, peak, name in (
            (eff.attention_tensor, "tensor-core", "fp16/bf16"),
            (eff.attention_fp32, "CUDA-core", "fp32"),
        )
        if value is not None
    ]
    if not parts:
        return ""
    return "; fused attention (forward and backward) " + ", ".join(parts)


def _ratio_text(value: float | None) -> str:
    # as gpu_report.ratio_text writes it: that module imports this one (lazily, to
    # stay free of torch), so this one cannot import it back
    return "-" if value is None else f"{value:.2f}x"
