"""Published GPU measurements of AMP, and the estimate fitted and checked on them.

``data/published_speedups.csv`` (beside this module) holds single-GPU training
throughputs, full precision (fp32 or TF32) against AMP, each row with its source
(repository, file, table, row). Rows with ``role`` ``fit`` fit the estimate's six
efficiencies (``amp_lessons.measure.estimate.Efficiency``) by a grid search; rows
with ``role`` ``check`` are only predicted. Each fit row's leave-one-out error is its
error when the fit has not seen it.

``python -m amp_lessons.measure.published`` prints the table (``--json`` for the
numbers); lesson 06 plots it.

Example:
    >>> rows = load_rows()
    >>> rows[0].speedup > 1
    True
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import itertools
import json
import math
import statistics
import sys
import textwrap
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import torch

from amp_lessons.i18n import _
from amp_lessons.measure import model_zoo, published_models
from amp_lessons.measure.estimate import (
    Efficiency,
    Estimate,
    cpu_launches,
    find_gpu,
    layout_kernels,
    price,
    shape_efficiency,
    step_kernels,
)
from amp_lessons.measure.optimizer_step import IMPLEMENTATIONS
from amp_lessons.measure.trace import Trace, trace_step

# Package data, so that the lessons find them wherever the course is installed (Colab,
# the grading sandbox), not only in a clone of the repository
DATA_DIR = Path(__file__).resolve().parent / "data"
DATA_FILE = DATA_DIR / "published_speedups.csv"
FIT_FILE = DATA_DIR / "published_fit.json"  # the fit as run, for lesson 06 to read
FAMILIES = {
    "transformer": model_zoo.transformer,
    "gpt": model_zoo.gpt,
    "mlp": model_zoo.mlp,
    "resnet50": model_zoo.resnet50,
    "seq2seq": published_models.seq2seq,
    "unet": published_models.unet,
    "fastpitch": published_models.fastpitch,
    "dlrm": published_models.dlrm,
    "transformer_xl": published_models.transformer_xl,
}
# The grid the fit searches: each efficiency's candidate values (16-bit and TF32
# tensor cores apart, each a large GEMM's share of the peak: smaller GEMMs lose more
# by gemm_model's tile and wave quantization, which is not fitted).
# Fractions of a peak stop where good kernels stop (about 90% of a datasheet's peak
# for large GEMMs and copies). The time grids reach well past what a kernel launch
# or a Python-level op costs, since the fit uses them for more (see estimate.FITTED).
GRID = {
    "tensor": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "tf32": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "fp32": (0.5, 0.6, 0.7, 0.8, 0.9),
    "memory": (0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    "kernel_us": (2.0, 3.0, 4.0, 5.0, 6.0, 8.0),
    "cpu_us": (3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0),
}
# The throughputs themselves count too, less than the speed-ups: they pin the scale
# that speed-ups alone leave free (faster kernels and larger fixed costs cancel).
ABSOLUTE_WEIGHT = 0.3


@dataclass(frozen=True)
class Row:
    """One published measurement: ``full`` precision vs AMP on one GPU."""

    id: str
    role: str
    model: str
    gpu: str
    full_precision: str
    amp_precision: str
    full_throughput: float
    amp_throughput: float
    unit: str
    full_batch: int
    amp_batch: int
    shape: str  # the model family and its sizes, as the builder's arguments
    amp_mode: str  # "autocast", or "half": model.half() with fp32 master weights
    source: str
    amp_layout: str = "n/a"  # the activations' layout, AMP run (and full precision)
    # how the source runs its optimizer: "fused", "foreach" or "loop", or
    # "full;AMP" where the two runs differ ("loop;fused": BERT SQuAD's BertAdam,
    # then apex's FusedAdam)
    optimizer_implementation: str = "fused"

    @property
    def speedup(self) -> float:
        return self.amp_throughput / self.full_throughput

    def implementation(self, amp: bool) -> str:
        """The optimizer's implementation in the AMP (or full-precision) run."""
        parts = self.optimizer_implementation.split(";")
        return parts[-1] if amp else parts[0]

    def sizes(self) -> dict:
        """The builder's arguments: ``"family=transformer;layers=24"`` -> a dict."""
        out = {}
        for item in filter(None, self.shape.split(";")):
            key, _, value = item.partition("=")
            out[key.strip()] = _number(value.strip())
        return out


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def load_rows(path: Path | None = None) -> list[Row]:
    """The data file's rows, checked: known GPUs and precisions, positive numbers."""
    rows, path = [], path or DATA_FILE
    with open(path, newline="") as f:
        for n, rec in enumerate(csv.DictReader(f), start=2):
            source = " / ".join(
                rec[k]
                for k in ("source_repo", "source_file", "source_table", "source_row")
            )
            row = Row(
                rec["id"],
                rec["role"],
                rec["model"],
                rec["gpu"],
                rec["full_precision"],
                rec.get("amp_precision") or "fp16",
                float(rec["full_throughput"]),
                float(rec["amp_throughput"]),
                rec["unit"],
                int(rec["full_batch"]),
                int(rec["amp_batch"]),
                rec["shape"],
                rec["amp_mode"],
                source,
                rec.get("amp_layout") or "n/a",
                rec.get("optimizer_implementation") or "fused",
            )
            find_gpu(row.gpu)
            if (
                row.role not in ("fit", "check")
                or row.full_throughput <= 0
                or row.amp_mode not in ("autocast", "half")
                or row.amp_throughput <= 0
                or row.sizes().get("family") not in FAMILIES
                or {row.implementation(False), row.implementation(True)}
                - set(IMPLEMENTATIONS)
            ):
                raise ValueError(
                    f"{path.name} line {n}: bad row {rec['id']!r} (role "
                    f"fit/check, amp_mode autocast/half, positive "
                    f"throughputs, a family of "
                    f"{', '.join(FAMILIES)}, an optimizer implementation of "
                    f"{', '.join(IMPLEMENTATIONS)})"
                )
            rows.append(row)
    return rows


def workload(row: Row, amp: bool) -> model_zoo.Workload:
    """The row's model at the batch its full-precision or AMP run used; a step's
    items are the builder's (samples, tokens, mel frames)."""
    return _workload(row.shape, row.amp_batch if amp else row.full_batch)


def _workload(shape_text: str, batch: int) -> model_zoo.Workload:
    shape = Row.sizes(SimpleNamespace(shape=shape_text))
    family = FAMILIES[shape.pop("family")]
    return family(batch=batch, **shape)


@dataclass(frozen=True)
class Step:
    """One traced training step: its kernels, the optimizer's (and GradScaler's)
    kernels after them, and the items it processes."""

    trace: Trace
    extra: list
    items: int


@dataclass(frozen=True)
class Traced:
    """A row's two traced steps, full precision and AMP."""

    row: Row
    full: Step
    amp: Step


def channels_last(row: Row, amp: bool) -> bool:
    """Whether the row's AMP (or full-precision) run keeps its activations channels
    last, as the data file's ``amp_layout`` records it: ``"NHWC (channels_last)
    for AMP; NCHW for TF32"`` -> True for AMP, False for TF32."""
    part = row.amp_layout.split(";")[0 if amp else -1]
    if ";" not in row.amp_layout and not amp:
        return False  # one layout named: the AMP run's
    return "NHWC" in part or "NDHWC" in part


@cache
def traced(row: Row) -> Traced:
    """Trace a row's full-precision and AMP steps once (seconds, on the CPU). Rows
    that run the same step (the same model, batch, precision, mode and layout on
    another GPU) share one trace."""
    steps = [
        _traced_step(
            row.shape,
            row.amp_batch if amp else row.full_batch,
            precision,
            amp and row.amp_mode == "half",
            channels_last(row, amp),
            row.implementation(amp),
        )
        for amp, precision in ((False, row.full_precision), (True, row.amp_precision))
    ]
    return Traced(row, *steps)


@cache
def _traced_step(
    shape: str,
    batch: int,
    precision: str,
    half: bool,
    nhwc: bool,
    implementation: str = "fused",
) -> Step:
    """One step of the model ``shape`` describes, at ``batch``, in ``precision``;
    ``half``: the model itself in fp16, as apex's O2 and BERT's fp16 pre-training
    run it (the optimizer keeps fp32 master weights), no autocast casts; ``nhwc``:
    activations channels last, so convolutions on tensor cores need no transposes;
    ``implementation``: the optimizer's (``estimate.step_kernels``)."""
    w = _workload(shape, batch)
    if half:
        w.model.half()
        w.inputs = tuple(
            t.half() if t.is_floating_point() else t
            for t in (w.inputs if isinstance(w.inputs, tuple) else (w.inputs,))
        )
    trace = trace_step(w.model, w.inputs, precision, w.loss_fn, autocast=not half)
    extra = step_kernels(w.model, precision, w.optimizer, implementation)
    if not nhwc:
        extra += layout_kernels(trace.kernels)
    return Step(trace, extra, w.items)


def estimates(t: Traced, eff: Efficiency) -> tuple[Estimate, Estimate]:
    """The row's full-precision and AMP estimates under ``eff``."""
    gpu = find_gpu(t.row.gpu)
    return (
        price(t.full.trace, gpu, t.row.full_precision, eff, t.full.extra),
        price(t.amp.trace, gpu, t.row.amp_precision, eff, t.amp.extra),
    )


# ---- the fit: every grid point priced at once ---------------------------------------


def _grid_seconds(step: Step, gpu) -> torch.Tensor:
    """Step seconds at every point of ``grid()``, as ``price`` computes them,
    vectorized: the GPU's time over the first five efficiencies, then the CPU's.
    Kernels that are the same in every respect (a model's repeated layers) are
    priced once and counted as many times as they run; a kernel with alternatives
    (cuDNN's Winograd) costs its cheapest way at each grid point."""
    kernels = [*step.trace.kernels, *step.extra]
    plain: dict[tuple, int] = {}
    choices: dict = {}
    for k in kernels:
        if k.alternatives:
            choices[k] = choices.get(k, 0) + 1
        else:
            key = _grid_key(k, gpu)
            plain[key] = plain.get(key, 0) + 1
    gpu_part = _gpu_grid()
    gpu_s = _grid_kernel_seconds(list(plain), gpu, gpu_part) @ torch.tensor(
        list(plain.values()), dtype=torch.float64
    )
    if choices:
        gpu_s = gpu_s + _cheapest_ways(choices, gpu, gpu_part)
    cpu_s = (
        cpu_launches(kernels) * torch.tensor(GRID["cpu_us"], dtype=torch.float64) * 1e-6
    )
    return torch.maximum(gpu_s[:, None], cpu_s[None, :]).reshape(-1)


@cache
def _gpu_grid() -> torch.Tensor:
    """The grid's first five efficiencies (the GPU's), every combination."""
    return torch.tensor(
        list(itertools.product(*list(GRID.values())[:5])), dtype=torch.float64
    )


def _cheapest_ways(choices: dict, gpu, gpu_part: torch.Tensor) -> torch.Tensor:
    """The seconds of kernels with alternatives, each at its cheapest way at every
    grid point, times how often it runs: every way's kernels priced in one pass,
    summed per way, the least way kept per kernel."""
    keys, way_of_key, kernel_of_way = [], [], []
    for i, k in enumerate(choices):
        for way in ((k,), *k.alternatives):
            keys += [_grid_key(p, gpu) for p in way]
            way_of_key += [len(kernel_of_way)] * len(way)
            kernel_of_way.append(i)
    seconds = _grid_kernel_seconds(keys, gpu, gpu_part)  # grid points x keys
    sums = torch.zeros(len(keys), len(kernel_of_way), dtype=torch.float64)
    sums[torch.arange(len(keys)), torch.tensor(way_of_key)] = 1.0
    per_way = seconds @ sums  # grid points x ways
    owner = torch.tensor(kernel_of_way).expand_as(per_way)
    best = torch.full((len(gpu_part), len(choices)), math.inf, dtype=torch.float64)
    best = best.scatter_reduce(1, owner, per_way, reduce="amin")
    return best @ torch.tensor(list(choices.values()), dtype=torch.float64)


def _grid_key(k, gpu) -> tuple:
    """What a kernel's price depends on: its math's column of the grid, its seconds
    at efficiency 1 (FLOPs over the peak, the shapes' efficiency included), its
    bytes and its launches."""
    ideal = k.flops / (gpu.peak(k.math) * shape_efficiency(k, gpu)) if k.flops else 0.0
    return (
        {"fp32": 2, "tf32": 1}.get(k.math, 0),
        ideal,
        float(k.bytes),
        float(k.launches),
    )


def _grid_kernel_seconds(
    keys: list[tuple], gpu, gpu_part: torch.Tensor
) -> torch.Tensor:
    """Each kernel's seconds (``_grid_key``) at each point of the GPU's grid:
    grid points x kernels."""
    if not keys:
        return torch.zeros(len(gpu_part), 0, dtype=torch.float64)
    table = torch.tensor([key[1:] for key in keys], dtype=torch.float64)
    column = torch.tensor([key[0] for key in keys])
    eff = gpu_part[:, :3][:, column]  # each kernel's math efficiency
    compute = table[:, 0] / eff
    memory = table[:, 1] / (gpu.bandwidth_gbs * 1e9 * gpu_part[:, 3:4])
    floor = table[:, 2] * gpu_part[:, 4:5] * 1e-6
    return torch.maximum(torch.maximum(compute, memory), floor)


def grid() -> torch.Tensor:
    """Every combination of ``GRID``'s values, one per row."""
    return torch.tensor(list(itertools.product(*GRID.values())), dtype=torch.float64)


def _log_errors(all_traced: list[Traced]):
    """Per row and grid point: log(predicted / published) speed-up, and the two
    throughputs' log errors."""
    speedup, absolute = [], []
    for t in all_traced:
        gpu = find_gpu(t.row.gpu)
        full = t.full.items / _grid_seconds(t.full, gpu)
        amp = t.amp.items / _grid_seconds(t.amp, gpu)
        speedup.append(torch.log(amp / full / t.row.speedup))
        absolute.append(
            torch.log(full / t.row.full_throughput) ** 2
            + torch.log(amp / t.row.amp_throughput) ** 2
        )
    return torch.stack(speedup), torch.stack(absolute)


def _best(
    speedup_err: torch.Tensor, absolute_err: torch.Tensor, keep: torch.Tensor
) -> int:
    loss = (speedup_err[keep] ** 2).mean(0) + ABSOLUTE_WEIGHT * absolute_err[keep].mean(
        0
    ) / 2
    return int(loss.argmin())


@dataclass(frozen=True)
class FitRow:
    """One row of the fit's report: published and predicted speed-ups."""

    id: str
    role: str
    model: str
    gpu: str
    published: float
    predicted: float
    error: float  # predicted / published - 1
    loo_predicted: float | None  # fit rows: predicted by the fit without this row
    loo_error: float | None
    full_regime: str
    amp_regime: str
    full: dict  # the full-precision estimate's compute/memory/overhead seconds
    amp: dict
    # estimated throughput / published, full precision and AMP
    throughput_ratios: tuple[float, float] = (1.0, 1.0)


@dataclass(frozen=True)
class Fit:
    efficiency: Efficiency
    rows: list[FitRow]

    def errors(self, role: str = "fit", loo: bool = False) -> list[float]:
        return [
            abs(r.loo_error if loo else r.error) for r in self.rows if r.role == role
        ]

    def median_error(self, loo: bool = False) -> float:
        return statistics.median(self.errors("fit", loo))

    def at_grid_bounds(self) -> list[str]:
        """The efficiencies the fit left at the edge of ``GRID``: the data pull them
        further, so each row's leave-one-out fit often lands on the same point."""
        return [
            name
            for name, values in GRID.items()
            if getattr(self.efficiency, name) in (values[0], values[-1])
        ]

    def throughput_range(self) -> tuple[float, float]:
        """The smallest and largest estimated / published throughput, both precisions
        of every row: how far the absolute estimate is off, where speed-ups agree."""
        ratios = [x for r in self.rows for x in r.throughput_ratios]
        return min(ratios), max(ratios)

    def summary(self) -> str:
        """One sentence of the fit's quality, as the README states it."""
        misses = [r for r in self.rows if abs(r.error) > 0.35]
        return _(
            "median error {median:.0%} over the {fitted} fitted rows "
            "(leave-one-out {loo:.0%}); {within} of {total} rows within 35% "
            "(misses: {misses})"
        ).format(
            median=self.median_error(),
            fitted=len(self.errors()),
            loo=self.median_error(loo=True),
            within=len(self.rows) - len(misses),
            total=len(self.rows),
            misses=", ".join(r.id for r in misses) or _("none"),
        )


def _parts(e: Estimate) -> dict:
    return {
        "seconds": e.seconds,
        "compute_s": e.compute_s,
        "memory_s": e.memory_s,
        "overhead_s": e.overhead_s,
    }


def fit(rows: list[Row] | None = None) -> Fit:
    """Fit the efficiencies on the ``fit`` rows; predict every row, and each fit row
    again without it (leave-one-out)."""
    rows = load_rows() if rows is None else rows
    all_traced = [traced(r) for r in rows]
    combos = grid()
    speedup_err, absolute_err = _log_errors(all_traced)
    is_fit = torch.tensor([r.role == "fit" for r in rows])
    best = Efficiency(*combos[_best(speedup_err, absolute_err, is_fit)].tolist())
    report = []
    for i, t in enumerate(all_traced):
        full, amp = estimates(t, best)
        predicted = (t.amp.items / amp.seconds) / (t.full.items / full.seconds)
        loo = None
        if rows[i].role == "fit":
            keep = is_fit.clone()
            keep[i] = False
            j = _best(speedup_err, absolute_err, keep)
            loo = math.exp(float(speedup_err[i, j])) * rows[i].speedup
        report.append(
            FitRow(
                rows[i].id,
                rows[i].role,
                rows[i].model,
                rows[i].gpu,
                rows[i].speedup,
                predicted,
                predicted / rows[i].speedup - 1,
                loo,
                None if loo is None else loo / rows[i].speedup - 1,
                full.regime,
                amp.regime,
                _parts(full),
                _parts(amp),
                (
                    t.full.items / full.seconds / rows[i].full_throughput,
                    t.amp.items / amp.seconds / rows[i].amp_throughput,
                ),
            )
        )
    return Fit(best, report)


def format_fit(result: Fit) -> str:
    """The fit as a table a reader can check line by line, 80 columns wide (a row's id
    names its GPU; "LOO": the fit without that row; check rows are marked *)."""
    e = result.efficiency
    lines = [
        _(
            "fitted: tensor {tensor:.0%}, tf32 {tf32:.0%}, fp32 {fp32:.0%}, memory "
            "{memory:.0%} of peak; {kernel_us:g} us a kernel, {cpu_us:g} us a CPU op"
        ).format(
            tensor=e.tensor,
            tf32=e.tf32,
            fp32=e.fp32,
            memory=e.memory,
            kernel_us=e.kernel_us,
            cpu_us=e.cpu_us,
        ),
        f"{_('row'):31} {_('published'):>9} {_('estimate'):>8} {_('error'):>6} "
        f"{'LOO':>6}  " + _("regime full/AMP"),
    ]
    for r in result.rows:
        loo = "" if r.loo_error is None else f"{r.loo_error:+.1%}"
        star = " " if r.role == "fit" else "*"
        lines.append(
            f"{r.id + star:31} {r.published:8.2f}x {r.predicted:7.2f}x "
            f"{r.error:+6.1%} {loo:>6}  {_(r.full_regime)}/{_(r.amp_regime)}"
        )
    lines.append(_("* a check row, never fitted"))
    lines += textwrap.wrap(result.summary(), 80)
    if result.at_grid_bounds():
        lines.append(
            _("at the grid's bound: {names}").format(
                names=", ".join(result.at_grid_bounds())
            )
        )
    return "\n".join(lines)


def markdown_table(result: Fit) -> str:
    """Every row's published and estimated speed-up, as the README shows it."""
    lines = [
        "| row | GPU | published | estimate | error | leave-one-out |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result.rows:
        loo = "-" if r.loo_error is None else f"{r.loo_error:+.1%}"
        check = "" if r.role == "fit" else " (check)"
        lines.append(
            f"| {r.id}{check} | {r.gpu} | {r.published:.2f}x | "
            f"{r.predicted:.2f}x | {r.error:+.1%} | {loo} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m amp_lessons.measure.published",
        description="Fit the estimate on the published measurements and print each "
        "row's published and predicted AMP speed-up.",
    )
    parser.add_argument("--json", action="store_true", help="print the fit as JSON")
    parser.add_argument(
        "--write",
        action="store_true",
        help="record the fit in amp_lessons/measure/data/published_fit.json"
        " (lesson 06 reads it; a test refits and compares)",
    )
    args = parser.parse_args(argv)
    result = fit()
    if args.json or args.write:
        record = fit_record(result, "python -m amp_lessons.measure.published --write")
        if args.write:
            FIT_FILE.write_text(json.dumps(record, indent=1) + "\n")
            print(f"wrote {FIT_FILE}")
        else:
            print(json.dumps(record, indent=1))
    print(format_fit(result), file=sys.stderr if args.json else sys.stdout)
    return 0


def data_digest(path: Path | None = None) -> str:
    """The data file's SHA-256: a recorded fit names the data it was fitted on."""
    return hashlib.sha256((path or DATA_FILE).read_bytes()).hexdigest()


def fit_record(result: Fit, command: str) -> dict:
    """The fit with its provenance, as ``FIT_FILE`` holds it."""
    return {
        "command": command,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "data_file": DATA_FILE.name,
        "data_sha256": data_digest(),
        "efficiency": {name: getattr(result.efficiency, name) for name in GRID},
        "rows": [asdict(r) for r in result.rows],
    }


def load_fit(path: Path | None = None) -> Fit:
    """The recorded fit; refused if the data file changed since it was written."""
    path = path or FIT_FILE
    record = json.loads(path.read_text())
    if record["data_sha256"] != data_digest():
        raise ValueError(
            f"{path.name} was fitted on another version of "
            f"{DATA_FILE.name}: run `python -m amp_lessons.measure."
            f"published --write`"
        )
    return Fit(
        Efficiency(**record["efficiency"]), [FitRow(**r) for r in record["rows"]]
    )


if __name__ == "__main__":
    sys.exit(main())
