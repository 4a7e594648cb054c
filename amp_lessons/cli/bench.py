"""The bench command: ``python -m amp_lessons bench``, step time, peak memory, saved
activations, TFLOP/s and MFU per precision on this device, side by side
(``amp_lessons.measure.bench_results`` measures; this module reads the flags and
prints).

Example: ``python -m amp_lessons bench --device cpu --json out.json``; ``--device cuda
--record`` writes notebooks/results/bench_<gpu>.json, the file lesson 06 shows.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

from amp_lessons.cli.flags import add_device_option, non_negative_int, positive_int
from amp_lessons.core.precision import PRECISIONS
from amp_lessons.i18n import N_, _

# the sizes flags, each a config's setting: --mlp-width 64 is {"mlp": {"width": 64}};
# and the help that says which
SIZE_FLAGS = (
    ("--mlp-width", "mlp", "width", N_("the MLP's width (features per layer)")),
    ("--mlp-layers", "mlp", "layers", N_("the MLP's number of layers")),
    ("--mlp-batch", "mlp", "batch", N_("the MLP's batch size")),
    ("--gpt-layers", "transformer", "n_layer", N_("the transformer's layers")),
    ("--gpt-heads", "transformer", "n_head", N_("the transformer's attention heads")),
    ("--gpt-embd", "transformer", "n_embd", N_("the transformer's embedding width")),
    (
        "--gpt-block",
        "transformer",
        "block_size",
        N_("the transformer's sequence length"),
    ),
    ("--gpt-batch", "transformer", "batch", N_("the transformer's batch size")),
    (
        "--gpt-vocab",
        "transformer",
        "vocab_size",
        N_("the transformer's vocabulary size"),
    ),
)


def add_command(commands) -> argparse.ArgumentParser:
    """The bench command's parser, its options in the order the help lists them."""
    p = commands.add_parser(
        "bench",
        help=_(
            "time fp32/tf32/fp16/bf16 (and fp8 on Ada/Hopper GPUs) "
            "training steps and measure memory (--json for a results "
            "file)"
        ),
        description=_(
            "Step time, peak memory, saved activations, TFLOP/s and MFU for "
            "fp32 (TF32 off), tf32, fp16 and bf16, side by side."
        ),
    )
    _add_bench_selection_options(p)
    _add_bench_step_options(p)
    _add_bench_size_options(p)
    _add_bench_run_options(p)
    return p


def _add_bench_selection_options(p: argparse.ArgumentParser) -> None:
    """Which device, models and precisions are measured."""
    from amp_lessons.measure.bench import CONFIGS

    add_device_option(p)
    p.add_argument(
        "--configs",
        nargs="+",
        choices=CONFIGS,
        default=list(CONFIGS),
        help=_("which models (default: both)"),
    )
    p.add_argument(
        "--precisions",
        nargs="+",
        default=None,
        metavar="PRECISION",
        help=_(
            "any of {precisions}, fp8 (fp8: torchao, compiled, on a GPU "
            "of compute capability 8.9+; --precision fp8 works too) "
            "(default: all four, plus fp8 where it can run)"
        ).format(precisions=", ".join(PRECISIONS)),
    )


def _add_bench_step_options(p: argparse.ArgumentParser) -> None:
    """How many steps warm up, and how many are timed."""
    p.add_argument(
        "--warmup",
        type=non_negative_int,
        default=None,
        help=_("untimed steps first (default: 3 on cpu, 5 on cuda)"),
    )
    p.add_argument(
        "--iters",
        type=positive_int,
        default=None,
        help=_("timed steps; the median is reported (default: 8 on cpu, 20 on cuda)"),
    )


def _add_bench_size_options(p: argparse.ArgumentParser) -> None:
    sizes = p.add_argument_group(
        _("sizes"),
        _(
            "override the device's defaults (cpu: tiny; cuda: the recipe's "
            "4096-wide MLP at batch 512 and a 12 x 768 GPT at T=1024)"
        ),
    )
    for flag, _config, _key, what in SIZE_FLAGS:
        sizes.add_argument(
            flag, type=positive_int, default=None, metavar="N", help=_(what)
        )


def _add_bench_run_options(p: argparse.ArgumentParser) -> None:
    """The CPU threads it measures with, and the files it writes."""
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help=_(
            "CPU threads for torch while measuring (default: 1 on a "
            "CPU, where the tiny models lose more to thread hand-offs "
            "than they gain)"
        ),
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help=_("write the results and their provenance as JSON"),
    )
    p.add_argument(
        "--record",
        action="store_true",
        help=_(
            "also write notebooks/results/bench_<device>.json, the file lesson 06 shows"
        ),
    )


def run_bench(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from amp_lessons.measure import bench_results

    overrides = _size_overrides(args)
    command = shlex.join(["python", "-m", "amp_lessons", *argv])
    paths = _bench_output_paths(args)
    report = bench_results.bench_report(
        args.device,
        args.configs,
        args.precisions,
        overrides,
        args.warmup,
        args.iters,
        command=command,
        progress=lambda s: print(
            "  " + _("measuring {what}").format(what=s), file=sys.stderr, flush=True
        ),
        threads=args.threads,
    )
    if not report["results"]:  # e.g. --precision fp8 on a CPU
        raise ValueError(
            "; ".join(
                _("{precision} cannot run here: {reason}").format(
                    precision=s["precision"], reason=s["reason"]
                )
                for s in report["skipped"]
            )
            or _("nothing to bench")
        )
    _print_bench_report(report)
    for path in paths:
        print(_("wrote {path}").format(path=bench_results.save_results(report, path)))
    return 0


def _size_overrides(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    """The sizes flags set, per config: ``{"mlp": {"width": 64}}``."""
    overrides: dict[str, dict[str, int]] = {}
    for flag, config, key, _what in SIZE_FLAGS:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is not None:
            overrides.setdefault(config, {})[key] = value
    return overrides


def _bench_output_paths(args: argparse.Namespace) -> list:
    """Every file the bench will write (--json, --record), checked before the minutes
    of measuring."""
    from amp_lessons.core.device import resolve_device
    from amp_lessons.core.output_files import validate_output_path
    from amp_lessons.measure import bench, bench_results

    if args.record and resolve_device(args.device).type != "cuda":
        raise ValueError(
            _(
                "--record writes notebooks/results/bench_<gpu>.json, the "
                "GPU results lesson 06 shows on machines without one; run "
                "it with --device cuda, or use --json PATH for this "
                "device"
            )
        )
    paths = [validate_output_path(args.json, "--json")] if args.json else []
    if args.record:
        name = bench.device_name(resolve_device(args.device))
        record = bench_results.RESULTS_DIR / bench_results.results_filename(name)
        paths.append(validate_output_path(record, "--record"))
    return paths


def _print_bench_report(report: dict) -> None:
    """The run's settings, its table, and what it skipped or notes."""
    from amp_lessons.measure import bench, bench_results

    print(
        _(
            "bench on {device} ({name}), torch {torch}, {warmup} warm-up + {iters} "
            "timed steps, median; {threads} CPU thread(s)"
        ).format(
            device=report["device"],
            name=report["device_name"],
            torch=report["torch"],
            warmup=report["warmup"],
            iters=report["iters"],
            threads=report["cpu_threads"],
        )
    )
    for config, sizes in report["sizes"].items():
        print(f"  {config}: " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    print(bench.format_table(report["results"]))
    for skip in report["skipped"]:
        print(
            _("skipped {precision}: {reason}").format(
                precision=skip["precision"], reason=skip["reason"]
            )
        )
    for note in report["notes"]:
        shown = bench.translated_note(note, bench_results.REPORT_NOTES)
        print(_("note: {message}").format(message=shown))
