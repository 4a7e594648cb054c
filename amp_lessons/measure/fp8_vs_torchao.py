"""Checking the fp8 twin against torchao: the same model converted twice, run once
each, compared bit for bit.

torchao is optional (``pip install 'torchao>=0.18,<0.19'``): every function here says
so when it is missing instead of failing on import. Notebook 11 and tests/test_fp8.py
use this harness, and the bench's fp8 row (``bench_fp8``) its quiet torchao import;
``amp_lessons.core.fp8`` itself never imports torchao. A measurement, not library:
it measures how far our twin is from torchao's, bit for bit.

On a CPU-only torch, importing torchao logs a warning for each of its CUDA kernel
libraries it cannot load (``_C_mxfp8``, ``_C_cutlass_90a``) and one deprecation note
from ``torch.utils._pytree``. The emulated fp8 path is plain PyTorch and needs none of
them, so ``import_torchao_float8`` raises those two loggers to ERROR while importing.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import logging
from types import ModuleType

import torch
from torch import nn

from amp_lessons.core.formats import same_bits
from amp_lessons.core.fp8 import ROWWISE, TENSORWISE, ModuleFilter, Recipe, to_float8

__all__ = [
    "INSTALL_HINT",
    "TORCHAO_REQUIREMENT",
    "compare_with_torchao",
    "convert_with_torchao",
    "import_torchao_float8",
    "torchao_missing",
]

TORCHAO_REQUIREMENT = "torchao>=0.18,<0.19"  # the twin matches 0.18, bit for bit
INSTALL_HINT = f"pip install '{TORCHAO_REQUIREMENT}'"
# who logs what while torchao loads on a CPU-only torch
_NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


def import_torchao_float8() -> ModuleType | None:
    """``torchao.float8``, imported without its CPU-only load warnings; None if absent.

    Example::

        float8 = import_torchao_float8()
        float8.convert_to_float8_training(model, config=float8.Float8LinearConfig())
    """
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    try:
        return importlib.import_module("torchao.float8")
    except ImportError:
        return None
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)


def torchao_missing() -> str | None:
    """Why the torchao comparison cannot run here (with the install line), or None."""
    if import_torchao_float8() is None:
        return f"torchao is not installed; to compare with it: {INSTALL_HINT}"
    return None


def _config(recipe: Recipe):
    float8 = import_torchao_float8()
    if float8 is None:
        raise ModuleNotFoundError(torchao_missing())
    if recipe == TENSORWISE:
        return float8.Float8LinearConfig(emulate=True)
    if recipe == ROWWISE:
        config = float8.Float8LinearConfig.from_recipe_name("rowwise")
        return dataclasses.replace(config, emulate=True)
    raise ValueError(
        f"torchao has no recipe matching {recipe}; use TENSORWISE or ROWWISE"
    )


def convert_with_torchao(
    model: nn.Module,
    recipe: Recipe = TENSORWISE,
    module_filter: ModuleFilter | None = None,
) -> nn.Module:
    """torchao's ``convert_to_float8_training`` with ``emulate=True``, in place.

    Raises ModuleNotFoundError (with the install line) when torchao is absent.
    """
    float8 = import_torchao_float8()
    config = _config(recipe)
    return float8.convert_to_float8_training(
        model, module_filter_fn=module_filter, config=config
    )


def _forward_backward(
    model: nn.Module, x: torch.Tensor, autocast_dtype: torch.dtype | None
) -> dict[str, torch.Tensor]:
    x = x.detach().clone().requires_grad_(x.is_floating_point())
    with torch.autocast(
        x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None
    ):
        y = model(x)
    # a fixed, uneven weight per output element: every gradient differs
    weight = torch.linspace(-1.0, 1.0, y.numel(), device=y.device).reshape(y.shape)
    (y.float() * weight).sum().backward()
    tensors = {"output": y.detach()}
    if x.grad is not None:
        tensors["input grad"] = x.grad
    tensors.update(
        {
            f"{name} grad": p.grad
            for name, p in model.named_parameters()
            if p.grad is not None
        }
    )
    return tensors


def compare_with_torchao(
    model: nn.Module,
    x: torch.Tensor,
    recipe: Recipe = TENSORWISE,
    autocast_dtype: torch.dtype | None = None,
    module_filter: ModuleFilter | None = None,
) -> list[dict]:
    """Convert two copies of ``model`` (ours: ``to_float8``; theirs: torchao), run
    ``model(x)`` and one backward under the same autocast, and compare bits.

    Returns one row per tensor: ``{"tensor", "dtype", "same_bits"}`` for the output,
    the input gradient and each parameter gradient. ``model`` itself is not changed.

    Example::

        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        rows = compare_with_torchao(model, torch.randn(8, 16))
        all(row["same_bits"] for row in rows)   # True
    """
    theirs = convert_with_torchao(copy.deepcopy(model), recipe, module_filter)
    ours = to_float8(copy.deepcopy(model), module_filter, recipe)
    a = _forward_backward(theirs, x, autocast_dtype)
    b = _forward_backward(ours, x, autocast_dtype)
    if a.keys() != b.keys():
        raise AssertionError(f"different tensors: {sorted(a)} vs {sorted(b)}")
    return [
        {
            "tensor": name,
            "dtype": str(b[name].dtype).removeprefix("torch."),
            "same_bits": same_bits(a[name], b[name]),
        }
        for name in a
    ]
