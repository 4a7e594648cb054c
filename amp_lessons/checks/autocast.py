"""Lesson 04's grader: which dtype each op produces under CPU bf16 autocast, read live
from the installed torch."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from amp_lessons.checks._engine import (
    NOT_SHOWN,
    Row,
    answer_of_type,
    answered_row,
    grade,
    show_value,
)

__all__ = ["AUTOCAST_OPS", "check_autocast_dtypes"]


def _autocast_inputs() -> SimpleNamespace:
    gen = torch.Generator().manual_seed(6)
    return SimpleNamespace(
        x=torch.randn(4, 4, generator=gen), w=torch.randn(4, 4, generator=gen),
        y=torch.randn(4, 4, generator=gen), t=torch.tensor([0, 1, 2, 3]),
        img=torch.randn(1, 2, 5, 5, generator=gen),
        k=torch.randn(3, 2, 3, 3, generator=gen),
    )  # fmt: skip


def _lin(t: SimpleNamespace) -> torch.Tensor:
    return F.linear(t.x, t.w)


# name -> (the op's arguments, computed under autocast; the op itself)
_AUTOCAST_TABLE: dict[str, tuple[Callable, Callable]] = {
    "matmul(x, w)": (lambda t: (t.x, t.w), torch.matmul),
    "linear(x, w)": (lambda t: (t.x, t.w), F.linear),
    "relu(x)": (lambda t: (t.x,), F.relu),
    "relu(linear(x, w))": (lambda t: (_lin(t),), F.relu),
    "linear(x, w) + x": (lambda t: (_lin(t), t.x), torch.add),
    "mse_loss(linear(x, w), linear(y, w))": (
        lambda t: (_lin(t), F.linear(t.y, t.w)),
        F.mse_loss,
    ),
    "conv2d(img, k)": (lambda t: (t.img, t.k), F.conv2d),
    "softmax(linear(x, w))": (lambda t: (_lin(t),), lambda a: F.softmax(a, dim=-1)),
    "sum(linear(x, w))": (lambda t: (_lin(t),), torch.sum),
    "cross_entropy(linear(x, w), t)": (lambda t: (_lin(t), t.t), F.cross_entropy),
    "prod(linear(x, w))": (lambda t: (_lin(t),), torch.prod),
    "layer_norm(linear(x, w))": (lambda t: (_lin(t),), lambda a: F.layer_norm(a, (4,))),
}
AUTOCAST_OPS: tuple[str, ...] = tuple(_AUTOCAST_TABLE)
"""The ops whose output dtype `predict_autocast_dtypes()` must predict, in this order.
x, w, y are float32 4x4, t int64 class indices, img and k a float32 image and kernel;
every op runs inside `torch.amp.autocast("cpu", dtype=torch.bfloat16)`."""
_AUTOCAST_HIDDEN = set(AUTOCAST_OPS[6:])
# ops CUDA's autocast runs in float32 but CPU's does not (from torch's autocast docs)
_CUDA_FP32_ONLY = {"softmax", "sum", "layer_norm", "log_softmax", "exp", "cumsum"}


def _autocast_dtypes(name: str) -> tuple[torch.dtype, str]:
    """(output dtype, why) of one op, run live under CPU autocast.

    "why" is "low" or "fp32" when autocast itself changed the op's dtype (the op is
    on one of its lists), "promote" when mixed inputs decided it, else "follow".
    """
    make_args, op = _AUTOCAST_TABLE[name]
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        args = make_args(_autocast_inputs())
        out = op(*args).dtype
    plain = op(*args).dtype  # the same inputs without autocast
    inputs = {a.dtype for a in args if a.is_floating_point()}
    if out != plain:
        return out, "low" if out == torch.bfloat16 else "fp32"
    return out, "promote" if len(inputs) > 1 else "follow"


def _autocast_hint(name: str, expected: torch.dtype, why: str, got: Any) -> str:
    # explains the dtype the student chose; the right one is never printed
    if isinstance(got, str):
        return "use dtype objects (torch.bfloat16, torch.float32), not strings"
    if got is None:
        return f"add an entry for {name!r}"
    if not isinstance(got, torch.dtype):
        return f"give a torch.dtype for {name!r}, e.g. torch.float32"
    if got is torch.float16:
        return "this is bf16 autocast: it never produces float16"
    said = f"you said {show_value(got)}"
    op = name.split("(")[0]
    if why == "low":
        return (
            f"{said}, as if autocast left {op} alone; but matmul-like ops (matmul, "
            "linear, conv, bmm) are exactly what its lower-precision list is for"
        )
    if why == "fp32":
        return (
            f"{said}, as if {op} followed its low-precision input; but losses and a "
            "few precision-hungry reductions (prod, cdist) are on the other autocast "
            "list, the one for ops it will not run in low precision"
        )
    if why == "promote":
        return (
            f"{said}; but this op is on neither autocast list, and its inputs have "
            "two different dtypes: type promotion decides"
        )
    note = ""
    if op in _CUDA_FP32_ONLY:
        note = (
            " (CUDA's autocast would run it in float32: the CPU and CUDA lists "
            "differ, which is why lesson 04 reads them from the running torch)"
        )
    return (
        f"{said}; but {op} is on neither of CPU autocast's lists: it runs in the "
        f"dtype of its input; which dtype does its input have here?{note}"
    )


def _autocast_rows(predict_autocast_dtypes: Callable, hidden: bool) -> list[Row]:
    got = answer_of_type(
        predict_autocast_dtypes, dict, "dict", "a dict {op name: torch dtype}"
    )
    rows = []
    if not hidden:
        bad = [n for n in AUTOCAST_OPS if not isinstance(got.get(n), torch.dtype)]
        hint = "give a torch.dtype for every name in AUTOCAST_OPS; missing or not a "
        hint += "dtype: " + ", ".join(bad)
        rows.append(answered_row(f"all {len(AUTOCAST_OPS)} ops answered", bad, hint))
    for name in AUTOCAST_OPS:
        if (name in _AUTOCAST_HIDDEN) != hidden:
            continue
        expected, why = _autocast_dtypes(name)
        answer = got.get(name)
        ok = isinstance(answer, torch.dtype) and answer is expected
        hint = "" if ok else _autocast_hint(name, expected, why, answer)
        shown = "missing" if answer is None else show_value(answer, 24)
        rows.append(Row(name, NOT_SHOWN, shown, ok, hint))
    return rows


def check_autocast_dtypes(
    predict_autocast_dtypes: Callable[[], dict[str, torch.dtype]], hidden: bool = False
) -> None:
    """Check `predict_autocast_dtypes() -> {op name: dtype}` for AUTOCAST_OPS.

    Each op runs live on tiny float32 CPU tensors inside
    `torch.amp.autocast("cpu", dtype=torch.bfloat16)`, so the expected dtypes are
    those of the installed torch. The visible cases grade the first six ops; the
    hidden cases the other six. The table says right or wrong and explains the dtype
    chosen; it never prints the right one.

    Example:
        >>> check_autocast_dtypes(lambda: {"matmul(x, w)": torch.bfloat16, ...})
    """
    grade("check_autocast_dtypes", predict_autocast_dtypes, hidden, _autocast_rows)
