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

It speaks the user's language: Spanish when the locale says so (LANGUAGE, LC_ALL,
LC_MESSAGES, LANG, in gettext's order: ``LANG=es_ES.UTF-8``) or ``--lang es`` does (the
flag wins); English otherwise, a locale the package does not speak included. The help,
the run's log lines and the one-line errors are translated; flag names, dtype names,
identifiers and torch's own messages are not.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import sys
import time
import warnings
from collections.abc import Sequence

from amp_lessons.core.distributed import MODES
from amp_lessons.core.errors import NamesSettings, python_spelling
from amp_lessons.core.precision import PRECISIONS, SCALERS
from amp_lessons.core.train import TASKS, TrainConfig
from amp_lessons.i18n import LANGUAGES, N_, _, language, set_language

# -- the language: the locale's, or --lang's; set before anything is printed --
LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")  # gettext's order
LANGUAGE_NAMES = {"en": N_("English"), "es": N_("Spanish")}


def environment_language(environ=None) -> str:
    """The language the locale asks for, read as gettext reads it: the first set of
    LANGUAGE (a list, ``fr:es``), LC_ALL, LC_MESSAGES and LANG. ``es_ES.UTF-8`` ->
    ``"es"``; English when it names no language the package speaks (fr_FR, C)."""
    environ = os.environ if environ is None else environ
    for variable in LOCALE_VARIABLES:
        if environ.get(variable):
            for entry in environ[variable].split(":"):
                code = re.split(r"[_.@-]", entry, maxsplit=1)[0].lower()
                if code in LANGUAGES:
                    return code
            return "en"
    return "en"


def language_code(text: str) -> str:
    """An argparse type for --lang: en or es."""
    if text.lower() not in LANGUAGES:
        choices = ", ".join(f"{code} ({_(LANGUAGE_NAMES[code])})" for code in LANGUAGES)
        raise argparse.ArgumentTypeError(
            _("unsupported language {value}; use one of: {choices}").format(
                value=repr(text), choices=choices
            )
        )
    return text.lower()


def flag_language(argv: Sequence[str]) -> str | None:
    """The language --lang asks for in `argv` (the last one), read before the parser is
    built: its help is written in it. None without one, or for a language the package
    does not speak (the parser then says so)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--lang="):
            found = arg.partition("=")[2]
    return found.lower() if found and found.lower() in LANGUAGES else None


# -- argparse in the package's language --
# argparse words its help and errors through its own gettext domain, which nobody
# translates: its headings and the -h help go through our catalogue in the formatter,
# and its usual error messages are re-worded by pattern (one it does not know stays
# as argparse wrote it). Our own help text is translated where the parser is built.
ARGPARSE_HEADINGS = (N_("options"), N_("positional arguments"))
ARGPARSE_HELP = N_("show this help message and exit")
ARGPARSE_ARGUMENT = re.compile(r"argument (?P<flag>\S+?): (?P<message>.*)", re.S)
ARGPARSE_ERRORS = tuple(
    (re.compile(pattern, re.S), template)
    for pattern, template in (
        (
            r"invalid choice: (?P<value>.*) \(choose from (?P<choices>.*)\)",
            N_("invalid choice: {value} (choose from {choices})"),
        ),
        (
            r"invalid (?P<type>\w+) value: (?P<value>.*)",
            N_("invalid {type} value: {value}"),
        ),
        (r"expected one argument", N_("expected one argument")),
        (r"expected at least one argument", N_("expected at least one argument")),
        (
            r"the following arguments are required: (?P<names>.*)",
            N_("the following arguments are required: {names}"),
        ),
        (
            r"unrecognized arguments: (?P<names>.*)",
            N_("unrecognized arguments: {names}"),
        ),
        (
            r"ambiguous option: (?P<option>\S+) could match (?P<matches>.*)",
            N_("ambiguous option: {option} could match {matches}"),
        ),
    )
)


def argparse_message(message: str) -> str:
    """One of argparse's error messages in the package's language, where it is one of
    the usual ones (``argument --iters: invalid int value: 'x'``); else as it is."""
    match = ARGPARSE_ARGUMENT.fullmatch(message)
    if match:
        return _("argument {flag}: {message}").format(
            flag=match["flag"], message=argparse_message(match["message"])
        )
    for pattern, template in ARGPARSE_ERRORS:
        match = pattern.fullmatch(message)
        if match:
            return _(template).format(**match.groupdict())
    return message


class LocalizedHelpFormatter(argparse.HelpFormatter):
    """argparse's help with its own words (usage:, options, -h's help) translated."""

    def add_usage(self, usage, actions, groups, prefix=None):
        super().add_usage(
            usage, actions, groups, _("usage: ") if prefix is None else prefix
        )

    def start_section(self, heading):
        super().start_section(_(heading) if heading in ARGPARSE_HEADINGS else heading)

    def _get_help_string(self, action):  # argparse's documented override point
        help_text = super()._get_help_string(action)
        return _(help_text) if help_text == ARGPARSE_HELP else help_text


class OneLineParser(argparse.ArgumentParser):
    """argparse, reporting a usage mistake in one line like every other mistake, in
    the package's language."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", LocalizedHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # argparse's hook; it must not return
        self.exit(
            2,
            _("error: {message} (see {prog} --help)").format(
                message=argparse_message(message), prog=self.prog
            )
            + "\n",
        )


def _add_lang(p: argparse.ArgumentParser) -> None:
    # SUPPRESS: absent, it sets nothing (a subcommand's default would overwrite the
    # main parser's --lang); main() has read it from argv already
    p.add_argument(
        "--lang",
        type=language_code,
        default=argparse.SUPPRESS,
        metavar="{en,es}",
        help=_(
            "the language of the help, the log and the errors: en or es "
            "(default: the locale's, from LANGUAGE, LC_ALL, LC_MESSAGES "
            "or LANG; English when it is neither)"
        ),
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``amp-lessons`` argument parser with its ``train`` and ``bench`` commands,
    worded in the package's current language (``amp_lessons.i18n.language()``)."""
    parser = OneLineParser(
        prog="python -m amp_lessons",
        description=_(
            "AMP from the bits up: run the course's training loop or its "
            "speed/memory benchmark."
        ),
    )
    _add_lang(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    # the help lists the commands in this order
    for add_command, add_options in (
        (_train_command, _add_train),
        (_bench_command, _add_bench),
        (_estimate_command, _add_estimate),
        (_gpu_check_command, _add_gpu_check),
    ):
        sub = add_command(commands)
        add_options(sub)
        _add_lang(sub)
    return parser


def _train_command(commands) -> argparse.ArgumentParser:
    return commands.add_parser(
        "train",
        help=_(
            "train a synthetic task with the AMP loop, printing loss, "
            "scale and skipped steps"
        ),
        description=_(
            "The real AMP loop (amp_lessons.core.train) on a built-in "
            "synthetic task: nothing is downloaded."
        ),
    )


def _bench_command(commands) -> argparse.ArgumentParser:
    return commands.add_parser(
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


def _estimate_command(commands) -> argparse.ArgumentParser:
    return commands.add_parser(
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


def _gpu_check_command(commands) -> argparse.ArgumentParser:
    return commands.add_parser(
        "gpu-check",
        help=_(
            "the whole GPU proof in one run: gpu tests, the bench, "
            "lessons 00/04/06/07 and a summary (CUDA only)"
        ),
        description=_(
            "On a CUDA GPU, within one time budget: every gpu-marked test, "
            "the bench on both configs in every precision (recorded as "
            "bench_<gpu>.json), lessons 00, 04, 06 and 07 executed (copies "
            "in executed/), and the one-page summary gpu_check_<gpu>.md. "
            "Without CUDA it exits with status 2 at once and writes "
            "nothing."
        ),
    )


# The bench's and the estimate's sizes, and --threads, are the command line's own
# settings (no config object checks them), so their argparse types check the range.
# The train command's numbers are TrainConfig fields: converted here, checked there.
def _integer(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("invalid {type} value: {value}").format(type="int", value=repr(text))
        ) from None
    if value < low:
        raise argparse.ArgumentTypeError(
            _("must be an integer >= {low}, got {value}").format(low=low, value=value)
        )
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (bench sizes, timed steps, threads)."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (the bench's warm-up steps)."""
    return _integer(text, 0)


def _add_train(p: argparse.ArgumentParser) -> None:
    # in the order the help lists them
    _add_task_options(p)
    _add_optimization_options(p)
    _add_scaler_options(p)
    _add_checkpoint_options(p)
    _add_run_options(p)


def _add_device_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default="auto",
        help=_("auto, cpu, cuda, cuda:N or mps (default: %(default)s)"),
    )


def _add_task_options(p: argparse.ArgumentParser) -> None:
    """What is trained, on which device, in which precision."""
    p.add_argument(
        "--task",
        choices=TASKS,
        default="spirals",
        help=_(
            "spirals: 3-class MLP (seconds on a CPU); gpt: small "
            "transformer (default: %(default)s)"
        ),
    )
    _add_device_option(p)
    p.add_argument(
        "--precision",
        default="bf16",
        help=_("{precisions} (default: %(default)s)").format(
            precisions=", ".join(PRECISIONS)
        ),
    )


def _add_optimization_options(p: argparse.ArgumentParser) -> None:
    """Steps, batches, learning rate and clipping."""
    # numbers are only converted here: TrainConfig's checks (plan_training) own them
    p.add_argument(
        "--steps",
        type=int,
        default=200,
        help=_(
            "optimizer steps in all, a resumed run's included (default: %(default)s)"
        ),
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=128,
        help=_(
            "examples (or sequences) per micro-batch, all processes "
            "together: the global batch, split evenly over them "
            "(default: %(default)s)"
        ),
    )
    p.add_argument(
        "--accum",
        type=int,
        default=1,
        help=_("micro-batches per optimizer step (default: %(default)s)"),
    )
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help=_("AdamW learning rate (default: 1e-2 spirals, 3e-3 gpt)"),
    )
    p.add_argument(
        "--clip",
        type=float,
        default=1.0,
        help=_(
            "max gradient norm, applied after unscale_; 0 turns "
            "clipping off (default: %(default)s)"
        ),
    )


def _add_scaler_options(p: argparse.ArgumentParser) -> None:
    """Which loss scaler, and how it starts and grows."""
    p.add_argument(
        "--scaler",
        choices=SCALERS,
        default="auto",
        help=_(
            "auto: torch.amp.GradScaler for fp16 only; ours: "
            "amp_lessons.core.scaler.LossScaler; none: fp16 unscaled "
            "(default: %(default)s)"
        ),
    )
    p.add_argument(
        "--init-scale",
        type=float,
        default=2.0**16,
        help=_("initial loss scale (default: %(default)g)"),
    )
    p.add_argument(
        "--growth-interval",
        type=int,
        default=2000,
        help=_("clean steps before the scale doubles (default: %(default)s)"),
    )


def _add_checkpoint_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=None,
        help=_(
            "save model, optimizer, scaler, step and RNG states here "
            "(atomically) at the end"
        ),
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="N",
        help=_("also save every N steps"),
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help=_(
            "continue from --checkpoint (bit-exact on a CPU; a "
            "ddp/fsdp2 checkpoint resumes with any number of "
            "processes)"
        ),
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """Over how many processes, with which seed and threads; what it logs and writes."""
    p.add_argument(
        "--distributed",
        choices=MODES,
        default="none",
        help=_(
            "none: one process; ddp or fsdp2: one process per device, "
            "launched by torchrun --standalone --nproc_per_node=N -m "
            "amp_lessons train ... (gloo on a CPU, nccl on CUDA; "
            "default: %(default)s)"
        ),
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help=_(
            "rank 0 writes {world_size, distributed, precision, losses: "
            "[[step, loss], ...], skipped_steps, final_scale} here"
        ),
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--log-every",
        type=int,
        default=10,
        metavar="N",
        help=_("print every N steps (default: %(default)s)"),
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help=_(
            "CPU threads for torch (default: 1 for the tiny spirals "
            "model on a CPU, where thread hand-offs cost more than the "
            "math; torch's own default otherwise)"
        ),
    )


def _add_bench(p: argparse.ArgumentParser) -> None:
    # in the order the help lists them
    _add_bench_selection_options(p)
    _add_bench_step_options(p)
    _add_bench_size_options(p)
    _add_bench_run_options(p)


def _add_bench_selection_options(p: argparse.ArgumentParser) -> None:
    """Which device, models and precisions are measured."""
    from amp_lessons.measure.bench import CONFIGS

    _add_device_option(p)
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
    for flag, config, key in SIZE_FLAGS:
        sizes.add_argument(
            flag, type=positive_int, default=None, metavar="N", help=f"{config} {key}"
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


def _add_estimate(p: argparse.ArgumentParser) -> None:
    from amp_lessons.measure.estimate import GPUS, OPTIMIZERS
    from amp_lessons.measure.gpus import PRECISIONS as GPU_PRECISIONS
    from amp_lessons.measure.model_zoo import CLI_FAMILIES

    p.add_argument("--gpu", choices=GPUS, default="A100-SXM4-80GB")
    p.add_argument(
        "--model",
        choices=CLI_FAMILIES,
        default="transformer",
        help=_(
            "transformer: a BERT-style encoder; gpt: a GPT-style "
            "decoder; mlp: Linear layers; resnet50 (default: "
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
    p.add_argument("--json", action="store_true", help=_("print the estimates as JSON"))


def run_estimate(args: argparse.Namespace) -> int:
    sizes = {
        k: getattr(args, k)
        for k in ("layers", "width", "seq", "batch", "image", "optimizer")
        if getattr(args, k) is not None
    }
    rows, items = _estimate_rows(args, sizes)
    if args.json:
        print(_estimates_json(rows, items))
        return 0
    print(
        _(
            "{model} {sizes} on {gpu}: {items} samples a step, estimated (not measured)"
        ).format(
            model=args.model,
            sizes=sizes or _("(default sizes)"),
            gpu=args.gpu,
            items=items,
        )
    )
    _print_estimate_table(rows, items)
    return 0


def _estimate_rows(args: argparse.Namespace, sizes: dict) -> tuple[list, int]:
    """One estimate per precision asked for (default: every one the GPU takes), and
    the samples a step."""
    from amp_lessons.measure.estimate import GPUS, estimate_step
    from amp_lessons.measure.model_zoo import build

    gpu = GPUS[args.gpu]
    precisions = args.precision or [
        p for p in ("fp32", "tf32", "fp16", "bf16", "fp8") if gpu.supports(p)
    ]
    rows = []
    for precision in precisions:
        w = build(args.model, **sizes)  # a fresh model: a trace leaves nothing behind
        rows.append(
            estimate_step(
                w.model, w.inputs, args.gpu, precision, w.optimizer, w.loss_fn
            )
        )
    return rows, w.items


def _estimates_json(rows: list, items: int) -> str:
    from dataclasses import asdict

    return json.dumps(
        [
            {**asdict(e), "regime": e.regime, "items_per_s": items / e.seconds}
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


# an estimate's three parts, in its table's order (its regime names the largest)
REGIMES = {"compute": N_("compute"), "memory": N_("memory"), "overhead": N_("overhead")}


def _add_gpu_check(p: argparse.ArgumentParser) -> None:
    from amp_lessons.tooling.gpu_check import BUDGET_S

    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help=_("where the results go (default: notebooks/results)"),
    )
    p.add_argument(
        "--budget",
        type=float,
        default=BUDGET_S,
        metavar="SECONDS",
        help=_(
            "total time budget; each step gets its share (default: "
            "%(default).0f, sized for one H100/H200)"
        ),
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help=_("print the steps and their time limits; run nothing"),
    )


SIZE_FLAGS = (
    ("--mlp-width", "mlp", "width"),
    ("--mlp-layers", "mlp", "layers"),
    ("--mlp-batch", "mlp", "batch"),
    ("--gpt-layers", "transformer", "n_layer"),
    ("--gpt-heads", "transformer", "n_head"),
    ("--gpt-embd", "transformer", "n_embd"),
    ("--gpt-block", "transformer", "block_size"),
    ("--gpt-batch", "transformer", "batch"),
    ("--gpt-vocab", "transformer", "vocab_size"),
)


# Each TrainConfig field the train command sets, and its flag: the one place where the
# core's Python names and the command line's meet. It builds the config from the
# parsed flags, and words the core's errors, which name fields, as flags (in_flags).
TRAIN_FLAGS = {
    "task": "--task",
    "device": "--device",
    "precision": "--precision",
    "scaler": "--scaler",
    "num_steps": "--steps",
    "batch_size": "--batch-size",
    "accum_steps": "--accum",
    "lr": "--lr",
    "clip": "--clip",
    "init_scale": "--init-scale",
    "growth_interval": "--growth-interval",
    "seed": "--seed",
    "log_every": "--log-every",
    "checkpoint_path": "--checkpoint",
    "checkpoint_every": "--checkpoint-every",
    "resume": "--resume",
    "distributed": "--distributed",
}


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig the train command's flags ask for, unchecked (its checks are
    the core's: ``plan_training``)."""
    values = {
        field: getattr(args, flag[2:].replace("-", "_"))
        for field, flag in TRAIN_FLAGS.items()
    }
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
        across = (
            _(" | {mode} over {world} process(es), {each} examples each").format(
                mode=config.distributed,
                world=world_size,
                each=config.batch_size // world_size,
            )
            if config.distributed != "none"
            else ""
        )
        if config.distributed == "fsdp2" and p.autocast:
            across += _(" | FSDP2 casts with MixedPrecisionPolicy instead of autocast")
        print(
            _(
                "train {task} on {device} | {precision}: {summary} | {steps} steps of "
                "{batch} x {accum} micro-batch(es){across}"
            ).format(
                task=config.task,
                device=device,
                precision=p.name,
                summary=p.summary,
                steps=config.num_steps,
                batch=config.batch_size,
                accum=config.accum_steps,
                across=across,
            ),
            flush=True,
        )
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(plan, log=lambda line: print(line, flush=True))
    if result.rank:
        return 0  # rank 0 reports for all
    for w in caught:
        print(_("note: {message}").format(message=w.message), file=sys.stderr)
    if args.json:
        text = json.dumps(run_summary(result))
        write_atomically(args.json, lambda f: f.write(text.encode()))
    _print_done(result, time.perf_counter() - t0)
    return 0


def _print_done(result, seconds: float) -> None:
    losses = result.losses
    first, last = _mean(losses[:10]), _mean(losses[-10:])
    print(
        _(
            "done in {seconds} s on {device}: loss {first} -> {last} (mean of "
            "first/last 10 steps), eval loss {eval_loss}, accuracy {accuracy}%, "
            "skipped {skipped} of {steps} steps, final scale {scale}"
        ).format(
            seconds=f"{seconds:.1f}",
            device=result.device,
            first=f"{first:.3f}",
            last=f"{last:.3f}",
            eval_loss=f"{result.eval_loss:.3f}",
            accuracy=f"{100 * result.eval_accuracy:.1f}",
            skipped=result.num_skipped,
            steps=len(result.records),
            scale=f"{result.scaler.get_scale():g}",
        )
    )
    if result.config.checkpoint_path:
        print(
            _("checkpoint: {path} (step {step})").format(
                path=result.config.checkpoint_path, step=len(result.records)
            )
        )


def run_summary(result) -> dict:
    """What ``--json`` writes: the run as plain data, the same in every mode.

    ``losses`` are ``[step, loss]`` pairs, each the mean over the global batch;
    ``skipped_steps`` the steps whose update the scaler skipped; ``final_scale`` is
    None without a scaler. Example: ``{"world_size": 2, "distributed": "ddp",
    "precision": "fp16", "losses": [[1, 1.09], ...], "skipped_steps": [1],
    "final_scale": 32768.0}``.
    """
    scaler = result.scaler
    return {
        "world_size": result.world_size,
        "distributed": result.config.distributed,
        "precision": result.config.precision,
        "losses": [[r.step, r.loss] for r in result.records],
        "skipped_steps": [r.step for r in result.records if r.skipped],
        "final_scale": scaler.get_scale() if scaler.is_enabled() else None,
    }


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


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
    for flag, config, key in SIZE_FLAGS:
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
    from amp_lessons.measure import bench

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
        print(_("note: {message}").format(message=note))


def run_gpu_check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from amp_lessons.tooling import gpu_check

    if args.budget <= 0:
        raise ValueError(
            _("--budget must be > 0 seconds, got {budget}").format(
                budget=f"{args.budget:g}"
            )
        )
    command = shlex.join(["python", "-m", "amp_lessons", *argv])
    if args.plan:
        import tempfile
        from pathlib import Path

        from amp_lessons.measure.bench_results import RESULTS_DIR

        info = gpu_check.gpu_info() or {"name": _("a CUDA GPU (none here)")}
        steps = gpu_check.plan_steps(
            Path(args.out or RESULTS_DIR),
            Path(tempfile.gettempdir()) / "amp_gpu_check",
            command,
        )
        print(
            _("gpu-check plan on {name}, budget {budget} s:").format(
                name=info["name"], budget=f"{args.budget:.0f}"
            )
        )
        print(gpu_check.format_plan(steps, args.budget))
        return 0
    return gpu_check.run_gpu_check(args.out, args.budget, command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 2 a usage mistake).

    It speaks --lang's language, else the locale's (`environment_language`), and
    leaves the package's language as it found it.

    Example: ``main(["train", "--device", "cpu", "--steps", "50"])`` -> ``0``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    previous = language()
    # before the parser is built: its help is written in the language set now
    set_language(flag_language(argv) or environment_language())
    try:
        return _run(argv)
    finally:
        set_language(previous)


def _run(argv: list[str]) -> int:
    import torch

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2): argparse printed it
        return int(e.code or 0)
    if getattr(args, "lang", language()) != language():  # e.g. an abbreviated --la
        set_language(args.lang)
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
        print(
            _(
                "error: out of GPU memory ({detail}). Fix: lower the batch size "
                "(--batch-size, --mlp-batch, --gpt-batch)."
            ).format(detail=str(e).splitlines()[0]),
            file=sys.stderr,
        )
        return 2
    except (ValueError, RuntimeError, OSError) as e:
        print(_("error: {message}").format(message=in_flags(e)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_("interrupted"), file=sys.stderr)
        return 130


if __name__ == "__main__":
    from amp_lessons.core.distributed import exit_rank

    code = main()
    exit_rank(code)  # under torchrun: leaves here, past finalization (issue 21)
    sys.exit(code)
