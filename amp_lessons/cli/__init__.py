"""Command line: ``python -m amp_lessons train|bench|estimate|gpu-check|progress`` (or
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
    python -m amp_lessons progress  # the exercises you passed, and what comes next

Mistakes (an unknown precision, CUDA asked without CUDA, a scaler with bf16, ...) end
with one line on stderr saying what to do instead, and exit status 2.

It speaks the user's language: Spanish when the locale says so (LANGUAGE, LC_ALL,
LC_MESSAGES, LANG, in gettext's order: ``LANG=es_ES.UTF-8``) or ``--lang es`` does (the
flag wins); English otherwise, a locale the package does not speak included. The help,
the run's log lines and the one-line errors are translated; flag names, dtype names,
identifiers and torch's own messages are not.

One module a command (``train``, ``bench``, ``estimate``, ``gpu_check``,
``progress``), each adding its parser and running it; ``language`` chooses the
language and makes argparse speak it; ``flags`` holds the flags several commands
share and words the core's errors as flags. ``amp_lessons.__main__`` only calls
``main``.

The top of the package: it may import every layer (``core``, ``measure``, ``tooling``)
and ``i18n``; none imports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from amp_lessons.cli import bench, estimate, gpu_check, progress, train
from amp_lessons.cli.flags import in_flags
from amp_lessons.cli.language import (
    OneLineParser,
    add_lang_option,
    environment_language,
    flag_language,
)
from amp_lessons.i18n import _, language, set_language


def build_parser() -> argparse.ArgumentParser:
    """The ``amp-lessons`` argument parser with its ``train``, ``bench``, ``estimate``
    and ``gpu-check`` commands, worded in the package's current language
    (``amp_lessons.i18n.language()``)."""
    parser = OneLineParser(
        prog="python -m amp_lessons",
        description=_(
            "AMP from the bits up: run the course's training loop or its "
            "speed/memory benchmark."
        ),
    )
    add_lang_option(parser)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar=_("command")
    )
    # the help lists the commands in this order
    for command in (train, bench, estimate, gpu_check, progress):
        add_lang_option(command.add_command(commands))
    return parser


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
                return train.run_train(args)
            finally:  # its result (model, optimizer) is gone: destroy ended groups
                from amp_lessons.core.distributed import end_groups

                end_groups()  # here, not at interpreter exit (issue 21)
        if args.command == "gpu-check":
            return gpu_check.run_gpu_check(args, argv)
        if args.command == "estimate":
            return estimate.run_estimate(args)
        if args.command == "progress":
            return progress.run_progress(args)
        return bench.run_bench(args, argv)
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
