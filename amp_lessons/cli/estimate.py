"""The estimate command: ``python -m amp_lessons estimate``, a training step's time on a
GPU you do not have, per precision, predicted from its datasheet
(``amp_lessons.measure.estimate``), and what dominates it. No GPU needed.

Example: ``python -m amp_lessons estimate --gpu A100-SXM4-80GB --model transformer
--layers 24 --width 1024 --seq 512 --batch 32``.
"""

from __future__ import annotations

import argparse
import json

from amp_lessons.cli.flags import positive_int
from amp_lessons.i18n import N_, _

# an estimate's three parts, in its table's order (its regime names the largest)
REGIMES = {"compute": N_("compute"), "memory": N_("memory"), "overhead": N_("overhead")}


def add_command(commands) -> argparse.ArgumentParser:
    """The estimate command's parser, with its options."""
    p = commands.add_parser(
        "estimate",
        help=_(
            "predict a training step's time on a GPU you do not have, "
            "per precision, and what dominates it (no GPU needed)"
        ),
        description=_(
            "The first-principles estimate (amp_lessons.measure.estimate): "
            "the model is traced on the meta device under CUDA autocast's op "
            "policy and each kernel priced from the GPU's datasheet, with "
            "efficiencies fitted on published measurements."
        ),
    )
    _add_estimate(p)
    return p


def _add_estimate(p: argparse.ArgumentParser) -> None:
    from amp_lessons.measure.estimate import GPUS, OPTIMIZERS
    from amp_lessons.measure.gpus import PRECISIONS as GPU_PRECISIONS

    p.add_argument(
        "--gpu",
        choices=[*GPUS, "all"],
        default="A100-SXM4-80GB",
        help=_("all: every GPU of the table, one after the other"),
    )
    p.add_argument(
        "--model",
        default="transformer",
        help=_(
            "transformer: a BERT-style encoder; gpt: a GPT-style "
            "decoder; mlp: Linear layers; resnet50; or your own, "
            "package.module:function, a function that returns (model, inputs) "
            "or (model, inputs, loss_fn) built on the meta device (default: "
            "%(default)s)"
        ),
    )
    p.add_argument(
        "--layers",
        type=positive_int,
        default=None,
        help=_("transformer, gpt, mlp: layers (default: the family's own)"),
    )
    p.add_argument(
        "--width",
        type=positive_int,
        default=None,
        help=_("transformer, gpt, mlp: hidden width"),
    )
    p.add_argument(
        "--seq",
        type=positive_int,
        default=None,
        help=_("transformer, gpt: tokens a sequence"),
    )
    p.add_argument("--batch", type=positive_int, default=None)
    p.add_argument(
        "--image",
        type=positive_int,
        default=None,
        help=_("resnet50: image side in pixels (default 224)"),
    )
    p.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=None,
        help=_("default: the family's own (sgd_momentum for resnet50, adam otherwise)"),
    )
    p.add_argument(
        "--precision",
        nargs="+",
        choices=GPU_PRECISIONS,
        default=None,
        help=_("default: every precision the GPU's tensor cores take"),
    )
    _add_pricing_options(p)


def _add_pricing_options(p: argparse.ArgumentParser) -> None:
    """What the estimate is priced with (--profile) and how it is printed (--json)."""
    p.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help=_(
            "price with the profile `make gpu-check` measured on that GPU "
            "(notebooks/results/gpu_profile_<gpu>.json) instead of the fitted "
            "efficiencies"
        ),
    )
    p.add_argument("--json", action="store_true", help=_("print the estimates as JSON"))


def run_estimate(args: argparse.Namespace) -> int:
    from amp_lessons.measure.estimate import GPUS

    sizes = {
        k: getattr(args, k)
        for k in ("layers", "width", "seq", "batch", "image", "optimizer")
        if getattr(args, k) is not None
    }
    if ":" in args.model and sizes:
        raise ValueError(
            _("--{flag} sizes a built-in family, not a --model function").format(
                flag=next(iter(sizes))
            )
        )
    gpus = list(GPUS) if args.gpu == "all" else [args.gpu]
    efficiency = _profiled_efficiency(args.profile, args.gpu)
    results = [(gpu, *_estimate_rows(args, gpu, sizes, efficiency)) for gpu in gpus]
    if args.json:
        print(_estimates_json([(rows, items) for _gpu, rows, items in results]))
        return 0
    for gpu, rows, items in results:
        if not rows:  # --gpu all: this GPU takes none of the precisions asked
            continue
        print(
            _(
                "{model} {sizes} on {gpu}: {items} samples a step, estimated "
                "(not measured)"
            ).format(
                model=args.model,
                sizes=sizes or _("(default sizes)"),
                gpu=gpu,
                items=items,
            )
        )
        _print_estimate_table(rows, items)
    return 0


def _profiled_efficiency(path: str | None, gpu: str):
    """The fitted efficiencies, or those of a GPU profile measured on ``gpu``."""
    from amp_lessons.measure.estimate import FITTED, GPUS
    from amp_lessons.measure.estimate_check import gpu_key
    from amp_lessons.measure.microbench import efficiency_of, load_profile

    if path is None:
        return FITTED
    profile = load_profile(path)
    measured_on = gpu_key(profile["device_name"])
    if measured_on != gpu:
        raise ValueError(
            _(
                "the profile {file} was measured on {device}: it prices that GPU "
                "only ({choice})"
            ).format(
                file=path,
                device=profile["device_name"],
                choice=(
                    f"--gpu {measured_on}"
                    if measured_on
                    else _("a GPU the estimate's table does not have")
                ),
            )
        )
    return efficiency_of(profile, GPUS[gpu])


def _workload(args: argparse.Namespace, sizes: dict):
    from amp_lessons.measure.model_zoo import build, from_function

    if ":" in args.model:
        return from_function(args.model)
    return build(args.model, **sizes)


def _estimate_rows(args: argparse.Namespace, gpu_name: str, sizes: dict, efficiency):
    """One estimate per precision asked for (default: every one the GPU takes; with
    --gpu all, those of the asked ones each GPU takes), and the samples a step."""
    from amp_lessons.measure.estimate import GPUS, estimate_step

    gpu = GPUS[gpu_name]
    precisions = args.precision or ["fp32", "tf32", "fp16", "bf16", "fp8"]
    if args.gpu == "all" or not args.precision:
        precisions = [p for p in precisions if gpu.supports(p)]
    rows, items = [], 0
    for precision in precisions:
        w = _workload(args, sizes)  # a fresh model: a trace leaves nothing behind
        items = w.items
        rows.append(
            estimate_step(
                w.model,
                w.inputs,
                gpu_name,
                precision,
                w.optimizer,
                w.loss_fn,
                efficiency,
            )
        )
    return rows, items


def _estimates_json(results: list) -> str:
    from dataclasses import asdict

    return json.dumps(
        [
            {**asdict(e), "regime": e.regime, "items_per_s": items / e.seconds}
            for rows, items in results
            for e in rows
        ],
        indent=1,
    )


def _print_estimate_table(rows: list, items: int) -> None:
    """Each precision's step time, speed-up over the first row, samples/s and the
    shares of compute, memory and overhead."""
    # each column as wide as its heading, which a translation may lengthen
    headings = [
        _("precision"),
        _("step ms"),
        _("vs {precision}").format(precision=rows[0].precision),
        _("samples/s"),
        *(_(REGIMES[regime]) for regime in REGIMES),
    ]
    widths = [
        max(width, len(heading))
        for width, heading in zip((9, 9, 8, 10, 8, 8, 8), headings, strict=True)
    ]
    print(_table_line(headings, widths) + "  " + _("dominant"))
    for e in rows:
        cells = [
            e.precision,
            f"{e.seconds * 1e3:.2f}",
            f"{rows[0].seconds / e.seconds:.2f}x",
            f"{items / e.seconds:.1f}",
            *(
                f"{part / e.seconds:.0%}"
                for part in (e.compute_s, e.memory_s, e.overhead_s)
            ),
        ]
        dominant = _(REGIMES[e.regime]) if e.regime in REGIMES else e.regime
        print(_table_line(cells, widths) + "  " + dominant)


def _table_line(cells: list[str], widths: list[int]) -> str:
    # the first column (the precision) to the left, the numbers to the right
    first, *rest = cells
    return " ".join(
        [
            f"{first:{widths[0]}}",
            *(f"{cell:>{width}}" for cell, width in zip(rest, widths[1:], strict=True)),
        ]
    )
