"""Lesson 05's first grader: the calls of an AMP training step in their order, each
ordering rule shown with the error torch raises when it is broken, and the student's
order run against the reference loop with a real `torch.amp.GradScaler`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lessons.core.formats import same_bits
from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    NOT_SHOWN,
    Row,
    answer_of_type,
    as_choice,
    grade,
    show_value,
)

__all__ = ["AMP_STEPS", "check_amp_step_order"]


_ZERO, _FWD, _BWD = (
    "zero_grad",
    "with autocast: forward",
    "scaler.scale(loss).backward()",
)
_UNSCALE, _CLIP = "scaler.unscale_(optimizer)", "clip_grad_norm_"
_STEP, _UPDATE = "scaler.step(optimizer)", "scaler.update()"
AMP_STEPS: tuple[str, ...] = (_UPDATE, _CLIP, _FWD, _STEP, _ZERO, _BWD, _UNSCALE)
"""The vocabulary `amp_step_order()` must put in order (shown here shuffled)."""
_REFERENCE_ORDER = (_ZERO, _FWD, _BWD, _UNSCALE, _CLIP, _STEP, _UPDATE)
_SHORT = dict(
    zip(
        _REFERENCE_ORDER,
        ("zero_grad", "forward", "backward", "unscale_", "clip", "step", "update"),
        strict=True,
    )
)


def _live_error(action: Callable[[torch.amp.GradScaler, Any], None]) -> str:
    """The message torch raises for a misuse, reproduced on a one-parameter model."""
    param = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale((param * 2).sum()).backward()
    try:
        action(scaler, optimizer)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return _("no error")


def _order_rules() -> list[tuple[str, str, str]]:
    """(first, then, why) pairs that any correct AMP loop satisfies."""
    update_first = _live_error(lambda s, o: s.update())
    unscale_late = _live_error(lambda s, o: (s.step(o), s.unscale_(o)))
    return [
        (_FWD, _BWD, _("backward needs the loss that the forward pass computes")),
        (_BWD, _UNSCALE, _("unscale_ divides the gradients that backward just made; "
         "before backward there is nothing (or last step's grads) to unscale")),
        (_UNSCALE, _CLIP, _("clip_grad_norm_ before unscale_ clips the SCALED grads: "
         "their norm is ~scale times too big, so clipping shrinks the real grads to "
         "almost nothing")),
        (_CLIP, _STEP, _("clipping after the step changes nothing: the optimizer "
         "already used the unclipped grads")),
        (_UNSCALE, _STEP, _("unscale_ after step fails: {error}").format(
            error=unscale_late)),
        (_STEP, _UPDATE, _("update() needs the inf checks that step records; called "
         "first it fails: {error}").format(error=update_first)),
    ]  # fmt: skip


def _read_order(
    fn: Callable, steps: Sequence[str], wanted: str, not_in: str, case: str
) -> tuple[list[str], Row]:
    """The step names ``fn`` returns, and the row that says whether each of ``steps``
    is there once and nothing else (``wanted``: the type hint's words; ``not_in``,
    ``case``: the row's labels, translated by the caller)."""
    got = answer_of_type(fn, list | tuple, "list", wanted)
    # each name as a plain str, compared by its characters; anything else is unknown
    order = [as_choice(s, steps) for s in got]
    unknown = [
        show_value(s, 30) for s, name in zip(got, order, strict=True) if name is None
    ]
    order = [name for name in order if name is not None]
    missing = [repr(s) for s in steps if s not in order]
    twice = [repr(s) for s in steps if order.count(s) > 1]
    problems = (
        (not_in, unknown),
        (_("missing"), missing),
        (_("more than once"), twice),
    )
    hint = "; ".join(f"{what}: {', '.join(items)}" for what, items in problems if items)
    complete = not hint
    return order, Row(case, _("yes"), _("yes") if complete else _("no"), complete, hint)


def _order_rows(amp_step_order: Callable, hidden: bool) -> list[Row]:
    order, row = _read_order(
        amp_step_order,
        AMP_STEPS,
        N_("a list of the names in AMP_STEPS"),
        _("not in AMP_STEPS"),
        _("each of the 7 steps once"),
    )
    complete = row.ok
    rows = [row]
    if hidden:
        return rows + _order_run_rows(order if complete else None)
    for first, then, why in _order_rules():
        where, right = _("right order"), True
        if first not in order or then not in order:
            where, right = _("missing"), False
        elif order.index(first) > order.index(then):
            where, right = _("wrong order"), False
        # the pair named alphabetically: the label must not give the order away
        label = " vs ".join(sorted((_SHORT[first], _SHORT[then])))
        rows.append(Row(label, NOT_SHOWN, where, right, why))
    ok = _ZERO in order and not (
        _BWD in order
        and _STEP in order
        and order.index(_BWD) < order.index(_ZERO) < order.index(_STEP)
    )
    where = (
        _("missing")
        if _ZERO not in order
        else _("position {n}").format(n=order.index(_ZERO) + 1)
    )
    rows.append(
        Row(
            _("where zero_grad goes"),
            NOT_SHOWN,
            where,
            ok,
            _(
                "zero_grad between backward and step wipes the grads you just "
                "computed. Put it first (the seed's loop) or last with "
                "set_to_none=True (nanoGPT's): both are fine"
            ),
        )
    )
    return rows


def _order_run(order: Sequence[str], overflow: bool) -> Any:
    """Run an order of AMP_STEPS for 3 iterations on a tiny model; return its state."""
    torch.manual_seed(7)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2)
    gen = torch.Generator().manual_seed(8)
    state: dict[str, Any] = {"loss": None}

    def forward(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.amp.autocast("cpu", dtype=torch.float16):
            state["loss"] = F.mse_loss(model(x), y)

    def backward() -> None:
        if state["loss"] is None:
            raise RuntimeError(_("backward before any forward: there is no loss yet"))
        scaler.scale(state["loss"]).backward()

    for i in range(3):
        x = torch.randn(8, 4, generator=gen)
        y = torch.randn(8, 2, generator=gen) * (1e6 if overflow and i == 1 else 1)
        actions = {
            _ZERO: lambda: optimizer.zero_grad(set_to_none=True),
            _FWD: lambda x=x, y=y: forward(x, y),
            _BWD: backward,
            _UNSCALE: lambda: scaler.unscale_(optimizer),
            _CLIP: lambda: nn.utils.clip_grad_norm_(model.parameters(), 0.05),
            _STEP: lambda: scaler.step(optimizer),
            _UPDATE: scaler.update,
        }
        for name in order:
            actions[name]()
    return [p.detach().clone() for p in model.parameters()] + [scaler.get_scale()]


def _order_run_rows(order: list[str] | None) -> list[Row]:
    rows = []
    for case, overflow in (
        (_("your order run 3 iterations"), False),
        (_("same, overflow at iteration 2"), True),
    ):
        same = _("same params")
        expected = _order_run(_REFERENCE_ORDER, overflow)
        if order is None:
            rows.append(
                Row(case, same, _("not run"), False, _("fix the list of steps first"))
            )
            continue
        try:
            got = _order_run(order, overflow)
        except Exception as exc:
            rows.append(
                Row(
                    case,
                    same,
                    _("raised {name}").format(name=type(exc).__name__),
                    False,
                    _("running your order raised: {error}").format(error=exc),
                )
            )
            continue
        ok = all(same_bits(a, b) for a, b in zip(got[:-1], expected[:-1], strict=True))
        ok = ok and got[-1] == expected[-1]
        rows.append(
            Row(
                case,
                same,
                same if ok else _("differ"),
                ok,
                _(
                    "your order trains the model differently from scale -> "
                    "backward -> unscale_ -> clip -> step -> update"
                ),
            )
        )
    return rows


def check_amp_step_order(
    amp_step_order: Callable[[], list[str]], hidden: bool = False
) -> None:
    """Check `amp_step_order() -> list[str]`: the names of AMP_STEPS in loop order.

    Visible cases check each ordering rule (with the real error torch raises when it
    is broken), saying right or wrong order without printing the order; hidden cases
    run the student's order on a tiny fp16-autocast model with clipping, and with an
    overflow, and compare the parameters bit for bit with the reference loop.
    zero_grad may come first or last.

    Example:
        >>> check_amp_step_order(lambda: ["zero_grad", "with autocast: forward", ...])
    """
    grade("check_amp_step_order", amp_step_order, hidden, _order_rows)
