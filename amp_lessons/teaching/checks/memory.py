"""Lesson 06's grader: the bytes that weights, gradients and Adam's state keep in fp32
training and in AMP, measured on a real model."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from amp_lessons.i18n import _
from amp_lessons.teaching.checks._engine import (
    NOT_SHOWN,
    Raised,
    Row,
    bytes_type_hint,
    call_student,
    grade,
    let_interrupt_through,
    show_value,
)

__all__ = ["check_memory_budget"]


_BUDGET_PARTS = ("weights", "grads", "adam_state")


def _measure_budget(n_params: int, amp: bool) -> dict[str, int]:
    """Bytes kept by a real n-parameter model after one Adam step, fp32 or AMP."""
    model = nn.Linear(n_params, 1, bias=False)
    optimizer = torch.optim.Adam(model.parameters())
    # scale 1: the default 65536 would overflow this one-sample fp16 backward
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0, enabled=amp)
    with torch.amp.autocast("cpu", dtype=torch.float16, enabled=amp):
        loss = model(torch.ones(1, n_params)).float().sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    params = list(model.parameters())
    states = [optimizer.state[p] for p in params]
    return {
        "weights": sum(p.nbytes for p in params),
        "grads": sum(p.grad.nbytes for p in params),
        # the moments; Adam's 4-byte step counter per tensor is left out
        "adam_state": sum(
            s[k].nbytes for s in states for k in ("exp_avg", "exp_avg_sq")
        ),
    }


def _memory_budget(n_params: int) -> dict[str, dict[str, int]]:
    built = min(n_params, 4096)  # bytes grow exactly linearly: build small, scale
    budget = {}
    for regime in ("fp32", "amp"):
        measured = _measure_budget(built, amp=regime == "amp")
        budget[regime] = {k: v * n_params // built for k, v in measured.items()}
    return budget


def _memory_hint(n: int, regime: str, part: str, expected: int, got: Any) -> str:
    value = _as_bytes(got)
    if value is None:  # a float: its mistake first, if its value has one
        whole = isinstance(got, float) and math.isfinite(got) and got.is_integer()
        if not whole or int(got) == expected:
            return bytes_type_hint(got)
        value = int(got)
    got = value
    if got == expected * 8:
        return _("count bytes, not bits (a float32 is 4 bytes)")
    if regime == "amp" and got * 2 == expected:
        return {
            "weights": _(
                "AMP keeps fp32 master weights: autocast makes fp16 copies "
                "on the fly for the forward, the stored weights stay float32"
            ),
            "grads": _(
                "param.grad has the parameter's dtype: the weights are float32, "
                "so their grads are float32 too, even with AMP"
            ),
            "adam_state": _(
                "Adam's moments live next to the float32 master weights: "
                "still float32 with AMP"
            ),
        }[part]
    if regime == "amp" and part == "weights" and got == expected * 3 // 2:
        return _(
            "autocast's fp16 weight copies last only for the forward pass (the "
            "cache is cleared when autocast exits): not kept after the step"
        )
    if part == "adam_state" and got * 2 == expected:
        return _("Adam keeps TWO moments per parameter (exp_avg and exp_avg_sq)")
    if part == "adam_state" and got == expected * 3 // 2:
        return _("adam_state is the two moments only: do not count the weights again")
    return _("{part}: {n} parameters x bytes per value x values per parameter").format(
        part=part, n=f"{n:_}"
    )


def _part(got: Any, regime: str, part: str) -> Any:
    """got[regime][part] from plain dicts, or None when it is not there."""
    inner = dict.get(got, regime) if isinstance(got, dict) else None
    return dict.get(inner, part) if isinstance(inner, dict) else None


def _as_bytes(answer: Any) -> int | None:
    """A whole number of bytes (an int, numpy's ints too), else None: a float is
    not one, even 4000.0, since the exercise asks for ints (4.0 * n is a float)."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return int.__int__(answer)  # the number, whatever a subclass overrides
    if isinstance(answer, numbers.Integral):  # numpy's ints
        return _int_of(answer)
    return None


def _int_of(answer: numbers.Integral) -> int | None:
    try:
        value = int(answer)
    except BaseException as exc:
        let_interrupt_through(exc)
        return None
    return value if type(value) is int else None


def _memory_rows(memory_budget: Callable, hidden: bool) -> list[Row]:
    rows = []
    for n in (1, 124_439_808, 7_000_000_000) if hidden else (1000, 1_000_000):
        expected = _memory_budget(n)
        got = call_student(memory_budget, n)
        for regime in ("fp32", "amp"):
            for part in _BUDGET_PARTS:
                want = expected[regime][part]
                answer = got if isinstance(got, Raised) else _part(got, regime, part)
                value = _as_bytes(answer)
                ok = value is not None and value == want
                shown = f"{value:_}" if value is not None else show_value(answer, 22)
                hint = ""
                if answer is None:
                    hint = _("return {example}, each with keys {keys}").format(
                        example="{'fp32': {...}, 'amp': {...}}",
                        keys=", ".join(_BUDGET_PARTS),
                    )
                elif not ok:
                    hint = _memory_hint(n, regime, part, want, answer)
                rows.append(
                    Row(
                        f"n={n:_} {regime} {part.removesuffix('_state')}",
                        # visible: n = 1000 bytes would give away bytes per parameter
                        f"{want:_}" if hidden else NOT_SHOWN,
                        shown,
                        ok,
                        hint,
                    )
                )
    return rows


def check_memory_budget(
    memory_budget: Callable[[int], dict[str, dict[str, int]]], hidden: bool = False
) -> None:
    """Check `memory_budget(n_params) -> {"fp32": {...}, "amp": {...}}` in bytes.

    Each inner dict has "weights", "grads" and "adam_state" (Adam's two moments) for
    plain fp32 training and for AMP with fp32 master weights. Expected by training a
    real model (one Adam step, fp32 and fp16 autocast + GradScaler) and summing the
    `nbytes` of its tensors; large n is built small and scaled, bytes being linear.
    The visible table does not print the expected bytes: bytes per parameter, read
    off n = 1000, would be the whole answer.

    Example:
        >>> check_memory_budget(memory_budget)  # 1000 -> weights 4000 in both
    """
    grade("check_memory_budget", memory_budget, hidden, _memory_rows)
