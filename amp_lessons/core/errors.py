"""Errors about a setting, worded in the caller's terms.

The core is a library: its errors name the Python argument or ``TrainConfig`` field the
caller set (``num_steps``, ``distributed='fsdp2'``), never a command-line flag, and the
command line (``amp_lessons.cli.flags``) rewrites those names as its flags, in one
place.

A message marks each setting it names with backticks, alone or with a value as
Python writes it: "`num_steps` must be ..." or "use `distributed='fsdp2'`".
``str(error)`` reads as Python, the marks dropped; ``error.render(spell)`` writes each
mark as ``spell(name, value)`` says, which is how the command line turns them into
``--steps`` and ``--distributed fsdp2``.

Example::

    e = SettingError("`resume=True` needs `checkpoint_path`")
    str(e)       # 'resume=True needs checkpoint_path'
    e.render(lambda name, value: "--" + name)  # '--resume needs --checkpoint_path'
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = [
    "CheckpointNotFound",
    "NamesSettings",
    "SettingError",
    "SettingUnavailable",
    "in_python_terms",
]

# `name` or `name=value`: a setting named in a message
_MARK = re.compile(r"`(?P<name>[A-Za-z_]\w*)(?:=(?P<value>[^`]*))?`")

Spelling = Callable[[str, "str | None"], str]


def python_spelling(name: str, value: str | None) -> str:
    """How a Python caller writes a setting: ``num_steps`` or ``num_steps=10``."""
    return name if value is None else f"{name}={value}"


def in_python_terms(message: str, spell: Spelling = python_spelling) -> str:
    """`message` with each marked setting written by `spell` (default: as Python).

    Example: ``in_python_terms("use `device='cpu'`")`` -> ``"use device='cpu'"``.
    """
    return _MARK.sub(lambda m: spell(m["name"], m["value"]), message)


class NamesSettings:
    """Mixed into an exception whose message names settings (see the module's
    docstring); the marked message is kept, so a front end can word it its way."""

    def __init__(self, message: str):
        self.marked = message
        super().__init__(in_python_terms(message))

    def render(self, spell: Spelling) -> str:
        """The message with each setting written as ``spell(name, value)``."""
        return in_python_terms(self.marked, spell)

    def __reduce__(self):  # pickled (e.g. between processes) with its marks
        return type(self), (self.marked,)


class SettingError(NamesSettings, ValueError):
    """A setting whose value cannot work (``num_steps=0``, a scaler with bf16, ...)."""


class SettingUnavailable(NamesSettings, RuntimeError):
    """A setting this machine cannot run (``device='cuda'`` without CUDA, ...).

    A RuntimeError, as before these errors named settings: callers catch it as one.
    """


class CheckpointNotFound(NamesSettings, FileNotFoundError):
    """A resume from a path where no checkpoint is."""
