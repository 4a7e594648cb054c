"""Command line: ``python -m amp_lessons train|bench|estimate|gpu-check`` (or
``amp-lessons``).

Examples::

    python -m amp_lessons train --device cpu --precision bf16
    python -m amp_lessons train --precision fp16 --scaler ours --checkpoint run.pt
    torchrun --standalone --nproc_per_node=2 -m amp_lessons train --distributed ddp \
        --precision bf16 --json run.json   # lesson 10: one process per device
    python -m amp_lessons bench --device cpu --json out.json
    python -m amp_lessons bench --device cuda --record  # notebooks/results/bench_*
    python -m amp_lessons gpu-check  # the whole GPU proof, <= 8 min (exit 2 without)
    python -m amp_lessons estimate --gpu A100-SXM4-80GB --model transformer \
        --layers 24 --width 1024 --seq 512 --batch 32  # a GPU's step time, predicted

Mistakes (an unknown precision, CUDA asked without CUDA, a scaler with bf16, ...) end
with one line on stderr saying what to do instead, and exit status 2.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import sys
import time
import warnings
from collections.abc import Sequence

from amp_lessons.core.distributed import MODES
from amp_lessons.core.errors import NamesSettings, python_spelling
from amp_lessons.core.precision import PRECISIONS, SCALERS
from amp_lessons.core.train import TASKS, TrainConfig


class OneLineParser(argparse.ArgumentParser):
    """argparse, reporting a usage mistake in one line like every other mistake."""

    def error(self, message: str):  # argparse's hook; it must not return
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``amp-lessons`` argument parser with its ``train`` and ``bench`` commands."""
    parser = OneLineParser(
        prog="python -m amp_lessons",
        description="AMP from the bits up: run the course's training loop or its "
                    "speed/memory benchmark.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    _add_train(commands.add_parser(
        "train", help="train a synthetic task with the AMP loop, printing loss, "
                      "scale and skipped steps",
        description="The real AMP loop (amp_lessons.core.train) on a built-in "
                    "synthetic task: nothing is downloaded."))
    _add_bench(commands.add_parser(
        "bench", help="time fp32/tf32/fp16/bf16 (and fp8 on Ada/Hopper GPUs) "
                      "training steps and measure memory (--json for a results file)",
        description="Step time, peak memory, saved activations, TFLOP/s and MFU for "
                    "fp32 (TF32 off), tf32, fp16 and bf16, side by side."))
    _add_estimate(commands.add_parser(
        "estimate", help="predict a training step's time on a GPU you do not have, per "
                         "precision, and what dominates it (no GPU needed)",
        description="The first-principles estimate (amp_lessons.measure.estimate): the "
                    "model is traced on the meta device under CUDA autocast's op "
                    "policy and each kernel priced from the GPU's datasheet, with "
                    "efficiencies fitted on published measurements."))
    _add_gpu_check(commands.add_parser(
        "gpu-check", help="the whole GPU proof in one run: gpu tests, the bench, "
                          "lessons 00/04/06/07 and a summary (CUDA only)",
        description="On a CUDA GPU, within one time budget: every gpu-marked test, "
                    "the bench on both configs in every precision (recorded as "
                    "bench_<gpu>.json), lessons 00, 04, 06 and 07 executed (copies in "
                    "executed/), and the one-page summary gpu_check_<gpu>.md. Without "
                    "CUDA it exits with status 2 at once and writes nothing."))
    return parser


# The bench's and the estimate's sizes, and --threads, are the command line's own
# settings (no config object checks them), so their argparse types check the range.
# The train command's numbers are TrainConfig fields: converted here, checked there.
def _integer(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (bench sizes, timed steps, threads)."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (the bench's warm-up steps)."""
    return _integer(text, 0)


def _add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", choices=TASKS, default="spirals",
                   help="spirals: 3-class MLP (seconds on a CPU); gpt: small "
                        "transformer (default: %(default)s)")
    p.add_argument("--device", default="auto",
                   help="auto, cpu, cuda, cuda:N or mps (default: %(default)s)")
    p.add_argument("--precision", default="bf16",
                   help=f"{', '.join(PRECISIONS)} (default: %(default)s)")
    # numbers are only converted here: TrainConfig's checks (plan_training) own them
    p.add_argument("--steps", type=int, default=200, help="optimizer steps "
                   "in all, a resumed run's included (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=128,
                   help="examples (or sequences) per micro-batch, all processes "
                        "together: the global batch, split evenly over them "
                        "(default: %(default)s)")
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches per optimizer step (default: %(default)s)")
    p.add_argument("--lr", type=float, default=None,
                   help="AdamW learning rate (default: 1e-2 spirals, 3e-3 gpt)")
    p.add_argument("--clip", type=float, default=1.0,
                   help="max gradient norm, applied after unscale_; 0 turns clipping "
                        "off (default: %(default)s)")
    p.add_argument("--scaler", choices=SCALERS, default="auto",
                   help="auto: torch.amp.GradScaler for fp16 only; ours: "
                        "amp_lessons.core.scaler.LossScaler; none: fp16 unscaled "
                        "(default: %(default)s)")
    p.add_argument("--init-scale", type=float, default=2.0**16,
                   help="initial loss scale (default: %(default)g)")
    p.add_argument("--growth-interval", type=int, default=2000,
                   help="clean steps before the scale doubles (default: %(default)s)")
    p.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="save model, optimizer, scaler, step and RNG states here "
                        "(atomically) at the end")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="also save every N steps")
    p.add_argument("--resume", action="store_true",
                   help="continue from --checkpoint (bit-exact on a CPU; a ddp/fsdp2 "
                        "checkpoint resumes with any number of processes)")
    p.add_argument("--distributed", choices=MODES, default="none",
                   help="none: one process; ddp or fsdp2: one process per device, "
                        "launched by torchrun --standalone --nproc_per_node=N -m "
                        "amp_lessons train ... (gloo on a CPU, nccl on CUDA; "
                        "default: %(default)s)")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="rank 0 writes {world_size, distributed, precision, losses: "
                        "[[step, loss], ...], skipped_steps, final_scale} here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10, metavar="N",
                   help="print every N steps (default: %(default)s)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="CPU threads for torch (default: 1 for the tiny spirals "
                        "model on a CPU, where thread hand-offs cost more than the "
                        "math; torch's own default otherwise)")


def _add_bench(p: argparse.ArgumentParser) -> None:
    from amp_lessons.measure.bench import CONFIGS

    p.add_argument("--device", default="auto",
                   help="auto, cpu, cuda, cuda:N or mps (default: %(default)s)")
    p.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS),
                   help="which models (default: both)")
    p.add_argument("--precisions", nargs="+", default=None, metavar="PRECISION",
                   help=f"any of {', '.join(PRECISIONS)}, fp8 (fp8: torchao, "
                        "compiled, on a GPU of compute capability 8.9+; --precision "
                        "fp8 works too) (default: all four, plus fp8 where it can "
                        "run)")
    p.add_argument("--warmup", type=non_negative_int, default=None,
                   help="untimed steps first (default: 3 on cpu, 5 on cuda)")
    p.add_argument("--iters", type=positive_int, default=None,
                   help="timed steps; the median is reported (default: 8 on cpu, "
                        "20 on cuda)")
    sizes = p.add_argument_group(
        "sizes", "override the device's defaults (cpu: tiny; cuda: the recipe's "
                 "4096-wide MLP at batch 512 and a 12 x 768 GPT at T=1024)")
    for flag, config, key in SIZE_FLAGS:
        sizes.add_argument(flag, type=positive_int, default=None, metavar="N",
                           help=f"{config} {key}")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="CPU threads for torch while measuring (default: 1 on a CPU, "
                        "where the tiny models lose more to thread hand-offs than "
                        "they gain)")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the results and their provenance as JSON")
    p.add_argument("--record", action="store_true",
                   help="also write notebooks/results/bench_<device>.json, the "
                        "file lesson 06 shows")


def _add_estimate(p: argparse.ArgumentParser) -> None:
    from amp_lessons.measure.estimate import GPUS, OPTIMIZERS
    from amp_lessons.measure.gpus import PRECISIONS as GPU_PRECISIONS
    from amp_lessons.measure.model_zoo import CLI_FAMILIES

    p.add_argument("--gpu", choices=GPUS, default="A100-SXM4-80GB")
    p.add_argument("--model", choices=CLI_FAMILIES, default="transformer",
                   help="transformer: a BERT-style encoder; gpt: a GPT-style decoder; "
                        "mlp: Linear layers; resnet50 (default: %(default)s)")
    p.add_argument("--layers", type=positive_int, default=None,
                   help="transformer, gpt, mlp: layers (default: the family's own)")
    p.add_argument("--width", type=positive_int, default=None,
                   help="transformer, gpt, mlp: hidden width")
    p.add_argument("--seq", type=positive_int, default=None,
                   help="transformer, gpt: tokens a sequence")
    p.add_argument("--batch", type=positive_int, default=None)
    p.add_argument("--image", type=positive_int, default=None,
                   help="resnet50: image side in pixels (default 224)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="default: the family's own (sgd_momentum for resnet50, adam "
                        "otherwise)")
    p.add_argument("--precision", nargs="+", choices=GPU_PRECISIONS, default=None,
                   help="default: every precision the GPU's tensor cores take")
    p.add_argument("--json", action="store_true", help="print the estimates as JSON")


def run_estimate(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from amp_lessons.measure.estimate import GPUS, estimate_step
    from amp_lessons.measure.model_zoo import build

    sizes = {k: getattr(args, k) for k in ("layers", "width", "seq", "batch", "image",
                                           "optimizer") if getattr(args, k) is not None}
    gpu = GPUS[args.gpu]
    precisions = args.precision or [p for p in ("fp32", "tf32", "fp16", "bf16", "fp8")
                                    if gpu.supports(p)]
    rows = []
    for precision in precisions:
        w = build(args.model, **sizes)  # a fresh model: a trace leaves nothing behind
        rows.append(estimate_step(w.model, w.inputs, args.gpu, precision, w.optimizer,
                                  w.loss_fn))
    if args.json:
        print(json.dumps([{**asdict(e), "regime": e.regime, "items_per_s":
                           w.items / e.seconds} for e in rows], indent=1))
        return 0
    print(f"{args.model} {sizes or '(default sizes)'} on {args.gpu}: {w.items} "
          f"samples a step, estimated (not measured)")
    print(f"{'precision':9} {'step ms':>9} {'vs ' + rows[0].precision:>8} "
          f"{'samples/s':>10} {'compute':>8} {'memory':>8} {'overhead':>8}"
          "  dominant")
    for e in rows:
        parts = (e.compute_s, e.memory_s, e.overhead_s)
        speedup = rows[0].seconds / e.seconds
        shares = " ".join(f"{part / e.seconds:8.0%}" for part in parts)
        print(f"{e.precision:9} {e.seconds * 1e3:9.2f} {speedup:7.2f}x "
              f"{w.items / e.seconds:10.1f} {shares}  {e.regime}")
    return 0


def _add_gpu_check(p: argparse.ArgumentParser) -> None:
    from amp_lessons.tooling.gpu_check import BUDGET_S

    p.add_argument("--out", metavar="DIR", default=None,
                   help="where the results go (default: notebooks/results)")
    p.add_argument("--budget", type=float, default=BUDGET_S, metavar="SECONDS",
                   help="total time budget; each step gets its share (default: "
                        "%(default).0f, sized for one H100/H200)")
    p.add_argument("--plan", action="store_true",
                   help="print the steps and their time limits; run nothing")


SIZE_FLAGS = (
    ("--mlp-width", "mlp", "width"), ("--mlp-layers", "mlp", "layers"),
    ("--mlp-batch", "mlp", "batch"),
    ("--gpt-layers", "transformer", "n_layer"), ("--gpt-heads", "transformer",
                                                  "n_head"),
    ("--gpt-embd", "transformer", "n_embd"), ("--gpt-block", "transformer",
                                              "block_size"),
    ("--gpt-batch", "transformer", "batch"), ("--gpt-vocab", "transformer",
                                              "vocab_size"),
)


# Each TrainConfig field the train command sets, and its flag: the one place where the
# core's Python names and the command line's meet. It builds the config from the
# parsed flags, and words the core's errors, which name fields, as flags (in_flags).
TRAIN_FLAGS = {
    "task": "--task", "device": "--device", "precision": "--precision",
    "scaler": "--scaler", "num_steps": "--steps", "batch_size": "--batch-size",
    "accum_steps": "--accum", "lr": "--lr", "clip": "--clip",
    "init_scale": "--init-scale", "growth_interval": "--growth-interval",
    "seed": "--seed", "log_every": "--log-every", "checkpoint_path": "--checkpoint",
    "checkpoint_every": "--checkpoint-every", "resume": "--resume",
    "distributed": "--distributed",
}


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the train command's flags ask for, unchecked (its checks are
    the core's: ``plan_training``)."""
    values = {field: getattr(args, flag[2:].replace("-", "_"))
              for field, flag in TRAIN_FLAGS.items()}
    values["clip"] = values["clip"] or None  # --clip 0: no clipping, clip=None
    return TrainConfig(**values)


def flag_spelling(name: str, value: str | None) -> str:
    """A setting the core named (``num_steps``, ``distributed='fsdp2'``) as the flag
    that sets it (``--steps``, ``--distributed fsdp2``); one without a flag as is."""
    flag = TRAIN_FLAGS.get(name)
    if flag is None:
        return python_spelling(name, value)
    if value is None:
        return flag
    try:
        literal = ast.literal_eval(value)
    except (ValueError, SyntaxError):  # e.g. inf: a float repr that is no literal
        return f"{flag} {value}"
    if literal is True:  # a switch: resume=True is --resume
        return flag
    if name == "clip" and literal is None:
        return "--clip 0"  # clip=None, no clipping, is --clip 0 here
    return f"{flag} {shlex.quote(str(literal))}"


def in_flags(error: BaseException) -> str:
    """An error's message as the command line says it: the settings the core named
    (``amp_lessons.core.errors``) written as flags, any other message unchanged."""
    if isinstance(error, NamesSettings):
        return error.render(flag_spelling)
    return str(error)


def run_train(args: argparse.Namespace) -> int:
    import torch

    from amp_lessons.core.output_files import validate_output_path, write_atomically
    from amp_lessons.core.train import plan_training, train

    # every check of the run, once, before the header: a mistake prints nothing else
    plan = plan_training(train_config(args))
    config, device, p = plan.config, plan.device, plan.precision
    if args.json:
        validate_output_path(args.json, "--json")
    threads = args.threads
    if threads is None and config.task == "spirals" and device.type == "cpu":
        threads = 1
    if threads is not None:
        torch.set_num_threads(threads)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        across = (f" | {config.distributed} over {world_size} process(es), "
                  f"{config.batch_size // world_size} examples each"
                  if config.distributed != "none" else "")
        if config.distributed == "fsdp2" and p.autocast:
            across += " | FSDP2 casts with MixedPrecisionPolicy instead of autocast"
        print(f"train {config.task} on {device} | {p.name}: {p.summary} | "
              f"{config.num_steps} steps of {config.batch_size} x "
              f"{config.accum_steps} micro-batch(es){across}", flush=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(plan, log=lambda line: print(line, flush=True))
    if result.rank:
        return 0  # rank 0 reports for all
    for w in caught:
        print(f"note: {w.message}", file=sys.stderr)
    if args.json:
        text = json.dumps(run_summary(result))
        write_atomically(args.json, lambda f: f.write(text.encode()))
    _print_done(result, time.perf_counter() - t0)
    return 0


def _print_done(result, seconds: float) -> None:
    losses = result.losses
    first, last = _mean(losses[:10]), _mean(losses[-10:])
    print(f"done in {seconds:.1f} s on {result.device}: loss "
          f"{first:.3f} -> {last:.3f} (mean of first/last 10 steps), eval loss "
          f"{result.eval_loss:.3f}, accuracy {100 * result.eval_accuracy:.1f}%, "
          f"skipped {result.num_skipped} of {len(result.records)} steps, final "
          f"scale {result.scaler.get_scale():g}")
    if result.config.checkpoint_path:
        print(f"checkpoint: {result.config.checkpoint_path} (step "
              f"{len(result.records)})")


def run_summary(result) -> dict:
    """What ``--json`` writes: the run as plain data, the same in every mode.

    ``losses`` are ``[step, loss]`` pairs, each the mean over the global batch;
    ``skipped_steps`` the steps whose update the scaler skipped; ``final_scale`` is
    None without a scaler. Example: ``{"world_size": 2, "distributed": "ddp",
    "precision": "fp16", "losses": [[1, 1.09], ...], "skipped_steps": [1],
    "final_scale": 32768.0}``.
    """
    scaler = result.scaler
    return {"world_size": result.world_size,
            "distributed": result.config.distributed,
            "precision": result.config.precision,
            "losses": [[r.step, r.loss] for r in result.records],
            "skipped_steps": [r.step for r in result.records if r.skipped],
            "final_scale": scaler.get_scale() if scaler.is_enabled() else None}


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def run_bench(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from amp_lessons.core.device import resolve_device
    from amp_lessons.core.output_files import validate_output_path
    from amp_lessons.measure import bench, bench_results

    overrides: dict[str, dict[str, int]] = {}
    for flag, config, key in SIZE_FLAGS:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is not None:
            overrides.setdefault(config, {})[key] = value
    command = shlex.join(["python", "-m", "amp_lessons", *argv])
    if args.record and resolve_device(args.device).type != "cuda":
        raise ValueError("--record writes notebooks/results/bench_<gpu>.json, the GPU "
                         "results lesson 06 shows on machines without one; run it "
                         "with --device cuda, or use --json PATH for this device")
    # every file this run will write, checked before the minutes of measuring
    paths = [validate_output_path(args.json, "--json")] if args.json else []
    if args.record:
        name = bench.device_name(resolve_device(args.device))
        record = bench_results.RESULTS_DIR / bench_results.results_filename(name)
        paths.append(validate_output_path(record, "--record"))
    report = bench_results.bench_report(
        args.device, args.configs, args.precisions, overrides, args.warmup,
        args.iters, command=command,
        progress=lambda s: print(f"  measuring {s}", file=sys.stderr, flush=True),
        threads=args.threads)
    if not report["results"]:  # e.g. --precision fp8 on a CPU
        raise ValueError("; ".join(f"{s['precision']} cannot run here: {s['reason']}"
                                   for s in report["skipped"]) or "nothing to bench")
    print(f"bench on {report['device']} ({report['device_name']}), torch "
          f"{report['torch']}, {report['warmup']} warm-up + {report['iters']} timed "
          f"steps, median; {report['cpu_threads']} CPU thread(s)")
    for config, sizes in report["sizes"].items():
        print(f"  {config}: " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    print(bench.format_table(report["results"]))
    for skip in report["skipped"]:
        print(f"skipped {skip['precision']}: {skip['reason']}")
    for note in report["notes"]:
        print(f"note: {note}")
    for path in paths:
        print(f"wrote {bench_results.save_results(report, path)}")
    return 0


def run_gpu_check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from amp_lessons.tooling import gpu_check

    if args.budget <= 0:
        raise ValueError(f"--budget must be > 0 seconds, got {args.budget:g}")
    command = shlex.join(["python", "-m", "amp_lessons", *argv])
    if args.plan:
        import tempfile
        from pathlib import Path

        from amp_lessons.measure.bench_results import RESULTS_DIR

        info = gpu_check.gpu_info() or {"name": "a CUDA GPU (none here)"}
        steps = gpu_check.plan_steps(info, Path(args.out or RESULTS_DIR),
                                     Path(tempfile.gettempdir()) / "amp_gpu_check",
                                     command)
        print(f"gpu-check plan on {info['name']}, budget {args.budget:.0f} s:")
        print(gpu_check.format_plan(steps, args.budget))
        return 0
    return gpu_check.run_gpu_check(args.out, args.budget, command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 2 a usage mistake).

    Example: ``main(["train", "--device", "cpu", "--steps", "50"])`` -> ``0``.
    """
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2): argparse printed it
        return int(e.code or 0)
    try:
        if args.command == "train":
            try:
                return run_train(args)
            finally:  # its result (model, optimizer) is gone: destroy ended groups
                from amp_lessons.core.distributed import end_groups

                end_groups()  # here, not at interpreter exit (issue 21)
        if args.command == "gpu-check":
            return run_gpu_check(args, argv)
        if args.command == "estimate":
            return run_estimate(args)
        return run_bench(args, argv)
    except torch.OutOfMemoryError as e:
        print(f"error: out of GPU memory ({str(e).splitlines()[0]}). Fix: lower the "
              "batch size (--batch-size, --mlp-batch, --gpt-batch).", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError, OSError) as e:
        print(f"error: {in_flags(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    from amp_lessons.core.distributed import exit_rank

    code = main()
    exit_rank(code)  # under torchrun: leaves here, past finalization (issue 21)
    sys.exit(code)
