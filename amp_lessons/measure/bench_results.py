"""Recorded bench results: a bench run with its provenance (``bench_report``), the
files lesson 06 reads, their names, and the schema ``save_results`` and
``load_results`` enforce.

A results file is a ``bench_report`` written as JSON
(``python -m amp_lessons bench --device cuda --record``), kept in
``notebooks/results/bench_<gpu>.json`` with its provenance: device, torch and CUDA
versions, date and the command that made it. Lesson 06 shows every valid one.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from amp_lessons.core.device import resolve_device
from amp_lessons.core.output_files import write_atomically
from amp_lessons.i18n import N_
from amp_lessons.measure.bench import (
    BENCH_PRECISIONS,
    CONFIGS,
    DEFAULT_STEPS,
    device_name,
    merge_sizes,
    peak_tflops,
    run_bench,
)

SCHEMA = "amp_lessons.measure.bench/1"
FLOPS_NOTE = N_(
    "FLOPs = matmul FLOPs of one training step, counted from the shapes: 2*m*n*k per "
    "matmul forward, twice that backward (input and weight gradients; the first MLP "
    "layer needs no input gradient), plus attention's QK^T and AV over the full T x T "
    "square (causal kernels skip about half of it, so this follows nanoGPT/PaLM's "
    "convention). Elementwise ops, norms and the optimizer are not counted."
)
PEAK_NOTE = N_(
    "peak_mem_bytes is None on {device}: torch tracks allocations on CUDA only. "
    "activation_bytes is exact on every device."
)
REPORT_NOTES = (FLOPS_NOTE, PEAK_NOTE)  # a report's notes, matched to translate them


def find_results_dir() -> Path:
    """``notebooks/results`` in a clone of the course; ``./results`` otherwise.

    A student edition ships its notebooks with a ``results/`` folder beside them and
    the package installed from a wheel, where no ``notebooks/`` sits next to it.
    """
    in_clone = Path(__file__).resolve().parents[2] / "notebooks" / "results"
    return in_clone if in_clone.is_dir() else Path("results").resolve()


RESULTS_DIR = find_results_dir()


def bench_report(
    device: str = "auto",
    configs: Sequence[str] = CONFIGS,
    precisions: Sequence[str] | None = None,
    sizes: dict[str, dict[str, int]] | None = None,
    warmup: int | None = None,
    iters: int | None = None,
    command: str | None = None,
    progress: Callable[[str], None] | None = None,
    threads: int | None = None,
) -> dict:
    """``run_bench`` plus the provenance a results file needs.

    Example: ``bench_report("cpu")["results"][0]["config"] == "mlp"``.
    """
    dev = resolve_device(device)
    all_sizes = merge_sizes(dev, sizes)
    default_warmup, default_iters = DEFAULT_STEPS[dev.type]
    warmup = default_warmup if warmup is None else warmup
    iters = default_iters if iters is None else iters
    skipped: list[dict] = []
    if threads is None and dev.type == "cpu":
        threads = 1  # see run_bench
    results = run_bench(
        str(dev), configs, precisions, sizes, warmup, iters, skipped, progress, threads
    )
    name = device_name(dev)
    notes = [FLOPS_NOTE]
    if dev.type != "cuda":
        notes.append(PEAK_NOTE.format(device=dev.type))
    return {
        "schema": SCHEMA,
        "device": dev.type,
        "device_name": name,
        "gpu": name if dev.type == "cuda" else None,
        "compute_capability": (
            ".".join(map(str, torch.cuda.get_device_capability(dev)))
            if dev.type == "cuda"
            else None
        ),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command or f"bench_results.bench_report(device={device!r})",
        "sizes": {c: all_sizes[c] for c in configs},
        "warmup": warmup,
        "iters": iters,
        "cpu_threads": threads if threads is not None else torch.get_num_threads(),
        "peak_tflops": peak_tflops(name) if dev.type == "cuda" else None,
        "notes": notes,
        "skipped": skipped,
        "results": results,
    }


def results_filename(device_name: str) -> str:
    """The file lesson 06 looks for: ``"NVIDIA H200"`` -> ``"bench_h200.json"``."""
    slug = re.sub(r"[^a-z0-9]+", "_", device_name.lower()).strip("_")
    slug = slug.removeprefix("nvidia_")
    return f"bench_{slug or 'unknown'}.json"


def save_results(report: dict, path: str | os.PathLike) -> Path:
    """Validate and write a report as JSON (atomically: temporary file + rename, with
    the user's umask).

    Example: ``save_results(bench_report("cpu"), "out.json")``.
    """
    validate_report(report, "the report")
    validate_destination(report, path)
    text = json.dumps(report, indent=1, allow_nan=False) + "\n"
    return write_atomically(path, lambda f: f.write(text.encode()))


REQUIRED_TOP = {
    "device": str,
    "torch": str,
    "date": str,
    "command": str,
    "results": list,
}
REQUIRED_ROW = {
    "config": str,
    "precision": str,
    "step_ms": float,
    "peak_mem_bytes": (int, None),
    "activation_bytes": int,
    "tflops": float,
    "mfu": (float, None),
    "speedup_vs_fp32": (float, None),
}


def load_results(path: str | os.PathLike) -> dict:
    """Read a results file and check its schema; raise ValueError naming what is off.

    Example::

        report = load_results("notebooks/results/bench_h200.json")
        report["gpu"], report["results"][0]["step_ms"]
    """
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read bench results {path}: {e}") from None
    validate_report(report, str(path))
    if _is_inside(path, RESULTS_DIR):
        validate_recorded(report, str(path))
    return report


def validate_report(report, where: str = "report") -> None:
    """Check a report's keys and types. Example: ``validate_report({})`` raises."""
    if not isinstance(report, dict):
        raise ValueError(
            f"{where}: expected a JSON object, got {type(report).__name__}"
        )
    for key, kind in REQUIRED_TOP.items():
        if key not in report:
            raise ValueError(
                f"{where}: missing top-level key {key!r}; a bench results "
                "file comes from `python -m amp_lessons bench --json`"
            )
        if not isinstance(report[key], kind):
            raise ValueError(f"{where}: {key!r} should be a {kind.__name__}")
    if not report["results"]:
        raise ValueError(f"{where}: 'results' is empty")
    for i, row in enumerate(report["results"]):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: results[{i}] is not an object")
        for key, kind in REQUIRED_ROW.items():
            if key not in row:
                raise ValueError(f"{where}: results[{i}] lacks {key!r}")
            if not _is(row[key], kind):
                raise ValueError(
                    f"{where}: results[{i}][{key!r}] = {row[key]!r} is "
                    "not of the expected type"
                )
        if row["precision"] not in BENCH_PRECISIONS:
            raise ValueError(
                f"{where}: results[{i}] has unknown precision {row['precision']!r}"
            )
        if not (row["step_ms"] > 0 and math.isfinite(row["step_ms"])):
            raise ValueError(f"{where}: results[{i}] step_ms must be > 0")


def _is(value, kind) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is None and value is None:
            return True
        if (
            k is float
            and isinstance(value, int | float)
            and not isinstance(value, bool)
        ):
            return True
        if k is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if k is str and isinstance(value, str):
            return True
    return False


def validate_destination(report: dict, path: str | os.PathLike) -> None:
    """Refuse to write a report into the recorded results unless it passes
    ``validate_recorded``: a test's synthetic numbers never land there.

    Example: ``validate_destination({"synthetic": True, ...},
    RESULTS_DIR / "bench_x.json")`` raises ValueError; under ``/tmp`` it passes.
    """
    if _is_inside(path, RESULTS_DIR):
        validate_recorded(report, str(path))


def validate_recorded(report: dict, where: str = "report") -> None:
    """Check the provenance a recorded GPU result must carry; raise ValueError if not.

    Recorded results are real CUDA runs: ``device == "cuda"``, a GPU name, an ISO date,
    the command that made them, and no ``"synthetic": true`` (what tests write).
    """
    if report.get("synthetic"):
        raise ValueError(
            f"{where}: a synthetic report (made-up numbers from a test) "
            "never goes into the recorded results; write it elsewhere"
        )
    if report.get("device") != "cuda" or not report.get("gpu"):
        raise ValueError(
            f"{where}: recorded results come from a CUDA GPU, this one "
            f"from device {report.get('device')!r}; record with "
            "`python -m amp_lessons gpu-check` on a GPU"
        )
    try:
        dt.datetime.fromisoformat(str(report.get("date")))
    except ValueError:
        raise ValueError(
            f"{where}: date {report.get('date')!r} is not an ISO date"
        ) from None
    if "amp_lessons" not in str(report.get("command")):
        raise ValueError(
            f"{where}: command {report.get('command')!r} does not name "
            "the amp_lessons command that produced it"
        )


def _is_inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


def recorded_results(folder: str | os.PathLike = RESULTS_DIR) -> list[dict]:
    """Every valid ``bench_*.json`` in a folder (lesson 06 shows them without a GPU).

    Example: ``[r["gpu"] for r in recorded_results()]`` -> ``["NVIDIA H200"]``.
    """
    return [load_results(p) for p in sorted(Path(folder).glob("bench_*.json"))]
