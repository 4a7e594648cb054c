"""The flags several commands share, and the one place where the core's Python names
meet the command line's flags.

The argparse types here check the range of the command line's own settings (the
bench's and the estimate's sizes, --threads); the train command's numbers are
``TrainConfig`` fields, converted by argparse and checked by the core. The core's errors
name those fields (``num_steps``); ``in_flags`` words them as the flags that set them
(``--steps``).

Example: the core's error "num_steps must be a positive integer, got 0" reads, through
``in_flags``, "--steps must be a positive integer, got 0".
"""

from __future__ import annotations

import argparse
import ast
import shlex

from amp_lessons.core.errors import NamesSettings, python_spelling
from amp_lessons.i18n import _


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


def add_device_option(p: argparse.ArgumentParser) -> None:
    """--device, as the train and bench commands take it."""
    p.add_argument(
        "--device",
        default="auto",
        help=_("auto, cpu, cuda, cuda:N or mps (default: %(default)s)"),
    )


# Each TrainConfig field the train command sets, and its flag: the one place where the
# core's Python names and the command line's meet. The train command builds its
# config from it (cli.train.train_config), and in_flags words the core's errors, which
# name fields, as flags.
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
