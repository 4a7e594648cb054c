"""Lesson 04's grader: which dtype each op produces under CPU bf16 autocast and under
CUDA fp16 autocast, read live from the installed torch (CUDA on fake tensors when there
is no GPU)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from amp_lessons.i18n import N_, _
from amp_lessons.teaching.autocast_table import autocast_rules
from amp_lessons.teaching.checks._engine import (
    NOT_SHOWN,
    Row,
    answer_of_type,
    answered_row,
    grade,
    show_value,
)

__all__ = ["AUTOCAST_DEVICES", "AUTOCAST_OPS", "check_autocast_dtypes"]


def _autocast_inputs(device: str) -> SimpleNamespace:
    # only the dtypes matter; on fake CUDA tensors there are no values at all
    return SimpleNamespace(
        x=torch.randn(4, 4, device=device), w=torch.randn(4, 4, device=device),
        y=torch.randn(4, 4, device=device), t=torch.arange(4, device=device),
        img=torch.randn(1, 2, 5, 5, device=device),
        k=torch.randn(3, 2, 3, 3, device=device),
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
each op runs inside each of `AUTOCAST_DEVICES`' autocast regions."""
AUTOCAST_DEVICES: dict[str, torch.dtype] = {
    "cpu": torch.bfloat16,
    "cuda": torch.float16,
}
"""The two regions predicted: ``torch.amp.autocast("cpu", dtype=torch.bfloat16)`` and
``torch.amp.autocast("cuda", dtype=torch.float16)``."""
# The visible cases grade every op on both devices: the answer is the table itself,
# so a wrong dtype left to the hidden cases passed the learner's check unseen (and was
# kept as a misconception). The hidden cases grade these five again, for nbgrader.
_AUTOCAST_HIDDEN = set(AUTOCAST_OPS[6:]) - {"softmax(linear(x, w))"}
# ops CUDA's autocast runs in float32 but CPU's does not (from torch's autocast docs)
_CUDA_FP32_ONLY = {"softmax", "sum", "layer_norm", "log_softmax", "exp", "cumsum"}


def _autocast_dtypes(name: str, device: str = "cpu") -> tuple[torch.dtype, str]:
    """(output dtype, why) of one op, run live under `device`'s autocast.

    "why" is "low" or "fp32" when autocast itself changed the op's dtype (the op is
    on one of its lists), "promote" when mixed inputs decided it, else "follow".
    """
    make_args, op = _AUTOCAST_TABLE[name]
    low = AUTOCAST_DEVICES[device]
    with autocast_rules(device, low):
        args = make_args(_autocast_inputs(device))
        out = op(*args).dtype
        with torch.amp.autocast(device, enabled=False):  # the same inputs, no autocast
            plain = op(*args).dtype
    inputs = {a.dtype for a in args if a.is_floating_point()}
    if out != plain:
        return out, "low" if out == low else "fp32"
    return out, "promote" if len(inputs) > 1 else "follow"


def _autocast_hint(
    name: str, expected: torch.dtype, why: str, got: Any, device: str = "cpu"
) -> str:
    # explains the dtype the student chose; the right one is never printed
    low = AUTOCAST_DEVICES[device]
    low_name, where = show_value(low), device.upper()
    if isinstance(got, str):
        return _("use dtype objects (torch.bfloat16, torch.float32), not strings")
    if got is None:
        return _("add an entry for {name} under {device}").format(
            name=repr(name), device=repr(device)
        )
    if not isinstance(got, torch.dtype):
        return _(
            "give a torch.dtype for {name} under {device}, e.g. torch.float32"
        ).format(name=repr(name), device=repr(device))
    if got in AUTOCAST_DEVICES.values() and got is not low:
        return _("this is {where}'s {low} autocast: it never produces {got}").format(
            where=where, low=low_name, got=show_value(got)
        )
    said, op = show_value(got), name.split("(")[0]
    if why == "low":
        return _(
            "you said {said}, as if autocast left {op} alone; but matmul-like ops "
            "(matmul, linear, conv, bmm) are exactly what its lower-precision list is "
            "for, on both devices"
        ).format(said=said, op=op)
    if why == "fp32":
        note = _(" (the CPU and CUDA lists differ)") if op in _CUDA_FP32_ONLY else ""
        return _(
            "you said {said}, as if {op} followed its low-precision input; but losses "
            "and precision-hungry reductions are on {where} autocast's other list, the "
            "one for ops it will not run in low precision{note}"
        ).format(said=said, op=op, where=where, note=note)
    if why == "promote":
        return _(
            "you said {said}; but this op is on neither autocast list, and its inputs "
            "have two different dtypes: type promotion decides"
        ).format(said=said)
    note = ""
    if op in _CUDA_FP32_ONLY:
        note = _(
            " (the CPU and CUDA lists differ, which is why lesson 04 reads them from "
            "the running torch)"
        )
    return _(
        "you said {said}; but {op} is on neither of {where} autocast's lists: it runs "
        "in the dtype of its input; which dtype does its input have here?{note}"
    ).format(said=said, op=op, where=where, note=note)


def _autocast_rows(predict_autocast_dtypes: Callable, hidden: bool) -> list[Row]:
    want = N_('a dict {"cpu": {op name: torch dtype}, "cuda": {op name: torch dtype}}')
    got = answer_of_type(predict_autocast_dtypes, dict, "dict", want)
    if set(got) & set(AUTOCAST_OPS):
        hint = _("one answer per device now: return {want}").format(want=_(want))
        return [Row(_('keys "cpu" and "cuda"'), _("yes"), _("op names"), False, hint)]
    rows = []
    per_device = {
        d: got.get(d) if isinstance(got.get(d), dict) else {} for d in AUTOCAST_DEVICES
    }
    if not hidden:
        bad = [
            f"{d}: {n}"
            for d in AUTOCAST_DEVICES
            for n in AUTOCAST_OPS
            if not isinstance(per_device[d].get(n), torch.dtype)
        ]
        hint = _(
            "return {want}, a torch.dtype for every name in AUTOCAST_OPS on "
            "both devices; missing or not a dtype: {names}"
        ).format(
            want=_(want), names=", ".join(bad[:6]) + (", ..." if len(bad) > 6 else "")
        )
        case = _("all {total} ops answered on both devices").format(
            total=len(AUTOCAST_OPS)
        )
        rows.append(answered_row(case, bad, hint))
    for device in AUTOCAST_DEVICES:
        for name in AUTOCAST_OPS:
            if hidden and name not in _AUTOCAST_HIDDEN:
                continue
            expected, why = _autocast_dtypes(name, device)
            answer = per_device[device].get(name)
            ok = isinstance(answer, torch.dtype) and answer is expected
            hint = "" if ok else _autocast_hint(name, expected, why, answer, device)
            shown = _("missing") if answer is None else show_value(answer, 24)
            rows.append(Row(f"{device}: {name}", NOT_SHOWN, shown, ok, hint))
    return rows


def check_autocast_dtypes(
    predict_autocast_dtypes: Callable[[], dict[str, dict[str, torch.dtype]]],
    hidden: bool = False,
) -> None:
    """Check `predict_autocast_dtypes() -> {"cpu": {op: dtype}, "cuda": {op: dtype}}`.

    Each op of AUTOCAST_OPS runs live on tiny float32 tensors inside
    `torch.amp.autocast("cpu", dtype=torch.bfloat16)` and inside
    `torch.amp.autocast("cuda", dtype=torch.float16)` (on fake CUDA tensors without a
    GPU: the installed torch's CUDA autocast kernels, no data), so the expected dtypes
    are those of the installed torch. The visible cases grade every op on both
    devices; the hidden cases grade five of them again. The table says right or wrong
    and explains the dtype chosen; it never prints the right one.

    Example:
        >>> check_autocast_dtypes(lambda: {"cpu": {"matmul(x, w)": torch.bfloat16,
        ...     ...}, "cuda": {"matmul(x, w)": torch.float16, ...}})
    """
    grade("check_autocast_dtypes", predict_autocast_dtypes, hidden, _autocast_rows)
