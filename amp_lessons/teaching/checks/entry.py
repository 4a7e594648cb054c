"""The entry lesson's graders (notebooks/00_amp_in_10_minutes): the seed's quick check,
five of lesson 08's questions answered in one cell, and the seed's loop put in order.

Both reuse what lesson 08 and lesson 05 already grade with: the questions, choices and
reasons of `amp_lessons.teaching.quiz`, and the step names, torch's live errors and the
reference run of `step_order`. Only the selection is new: the five questions the entry
lesson teaches, and the five calls of the seed's loop (no unscale_, no clipping).
"""

from __future__ import annotations

from collections.abc import Callable

from amp_lessons.core.formats import same_bits
from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    NOT_SHOWN,
    Row,
    answer_of_type,
    answered_row,
    as_choice,
    grade,
    same_float,
)
from amp_lessons.teaching.checks.quiz import _answered_row, _question_row
from amp_lessons.teaching.checks.step_order import (
    _BWD,
    _FWD,
    _SHORT,
    _STEP,
    _UPDATE,
    _ZERO,
    _live_error,
    _order_run,
    _read_order,
)
from amp_lessons.teaching.quiz import QUICK_CHECK

__all__ = [
    "ENTRY_QUESTIONS",
    "ENTRY_STEPS",
    "check_entry_quiz",
    "check_entry_step_order",
    "entry_quiz_text",
]

ENTRY_QUESTIONS: tuple[str, ...] = (
    "why_scale", "autocast_scope", "step_with_inf", "backward_call", "where_fastest",
)
"""The quick check of the entry lesson: ids of `amp_lessons.teaching.quiz.QUESTIONS`,
one per section of the seed (underflow, autocast, step, tip 1, tip 3)."""
_VISIBLE = ENTRY_QUESTIONS[:3]  # the hidden cases grade the other two

_SEED_ORDER = (_ZERO, _FWD, _BWD, _STEP, _UPDATE)
ENTRY_STEPS: tuple[str, ...] = (_UPDATE, _FWD, _STEP, _ZERO, _BWD)
"""The five calls of the seed's loop, shuffled: `seed_loop_order()` puts them in
order."""


def entry_quiz_text() -> str:
    """The entry lesson's questions and choices as text, ready to print.

    Example:
        >>> print(entry_quiz_text().splitlines()[1])
           (a) To prevent overflow in fp16
    """
    lines = []
    for qid in ENTRY_QUESTIONS:
        item = QUICK_CHECK[qid]
        lines.append(f"{qid}: {_(item['question'])}")
        lines += [f"   ({k}) {_(text)}" for k, text in item["choices"].items()]
    return "\n".join(lines)


def _quiz_rows(quick_check_answers: Callable, hidden: bool) -> list[Row]:
    got = answer_of_type(
        quick_check_answers, dict, "dict", N_("a dict {question id: letter}")
    )
    if hidden:
        return [_question_row(q, got) for q in ENTRY_QUESTIONS if q not in _VISIBLE]
    bad = [q for q in ENTRY_QUESTIONS
           if as_choice(got.get(q), QUICK_CHECK[q]["choices"]) is None]
    hint = _("answer every question id printed above with one of its letters; "
             "missing or invalid: {ids}").format(ids=", ".join(bad))
    case = _("all {total} questions answered").format(total=len(ENTRY_QUESTIONS))
    rows = [answered_row(case, bad, hint)]
    rows += [_question_row(q, got) for q in _VISIBLE]
    return rows + [_answered_row(q, got) for q in ENTRY_QUESTIONS
                   if q not in _VISIBLE]


def check_entry_quiz(
    quick_check_answers: Callable[[], dict[str, str]], hidden: bool = False
) -> None:
    """Check `quick_check_answers() -> {question id: letter}` for ENTRY_QUESTIONS.

    The visible cases check that all five are answered and grade the first three; the
    hidden cases grade the other two. A wrong choice gets the reason it is wrong; the
    table never prints the right letter.

    Example:
        >>> check_entry_quiz(lambda: {"why_scale": "c", ...})
    """
    grade("check_entry_quiz", quick_check_answers, hidden, _quiz_rows)


def _rules() -> list[tuple[str, str, str]]:
    """(first, then, why) pairs that the seed's loop satisfies."""
    update_first = _live_error(lambda s, o: s.update())
    return [
        (_FWD, _BWD, _("backward needs the loss that the forward pass computes")),
        (_BWD, _STEP, _("scaler.step unscales and applies the gradients that backward "
         "makes; before backward it would step on last iteration's gradients")),
        (_STEP, _UPDATE, _("update() needs the inf checks that step records; called "
         "first it fails: {error}").format(error=update_first)),
    ]  # fmt: skip


def _order_of(seed_loop_order: Callable) -> tuple[list[str], Row]:
    return _read_order(seed_loop_order, ENTRY_STEPS,
                       N_("a list of the names in ENTRY_STEPS"),
                       _("not in ENTRY_STEPS"), _("each of the 5 calls once"))


def _zero_grad_row(order: list[str]) -> Row:
    ok = _ZERO in order and not (
        _BWD in order and _STEP in order
        and order.index(_BWD) < order.index(_ZERO) < order.index(_STEP)
    )
    where = _("missing") if _ZERO not in order else _("position {n}").format(
        n=order.index(_ZERO) + 1)
    return Row(_("where zero_grad goes"), NOT_SHOWN, where, ok,
               _("zero_grad between backward and step wipes the grads you just "
                 "computed. Put it first (the seed's loop) or last: both are fine"))


def _run_rows(order: list[str] | None) -> list[Row]:
    rows = []
    same = _("same params")
    for case, overflow in ((_("your loop, 3 iterations"), False),
                           (_("same, overflow at iteration 2"), True)):
        if order is None:
            rows.append(Row(case, same, _("not run"), False,
                            _("fix the list of calls first")))
            continue
        expected = _order_run(_SEED_ORDER, overflow)
        try:
            got = _order_run(order, overflow)
        except Exception as exc:  # torch's own error for a misordered loop
            rows.append(Row(case, same,
                            _("raised {name}").format(name=type(exc).__name__), False,
                            _("running your order raised: {error}").format(error=exc)))
            continue
        ok = all(same_bits(a, b) for a, b in zip(got[:-1], expected[:-1], strict=True))
        ok = ok and same_float(got[-1], expected[-1])
        rows.append(Row(case, same, same if ok else _("differ"), ok,
                        _("your order trains the model differently from zero_grad -> "
                          "forward -> scale(loss).backward() -> step -> update")))
    return rows


def _step_order_rows(seed_loop_order: Callable, hidden: bool) -> list[Row]:
    order, complete = _order_of(seed_loop_order)
    if hidden:
        return [complete, *_run_rows(order if complete.ok else None)]
    rows = [complete]
    for first, then, why in _rules():
        where, ok = _("right order"), True
        if first not in order or then not in order:
            where, ok = _("missing"), False
        elif order.index(first) > order.index(then):
            where, ok = _("wrong order"), False
        label = " vs ".join(sorted((_SHORT[first], _SHORT[then])))  # no giveaway
        rows.append(Row(label, NOT_SHOWN, where, ok, why))
    return [*rows, _zero_grad_row(order)]


def check_entry_step_order(
    seed_loop_order: Callable[[], list[str]], hidden: bool = False
) -> None:
    """Check `seed_loop_order() -> list[str]`: the names of ENTRY_STEPS in the order
    one iteration of the seed's loop runs them.

    Visible cases check each ordering rule (quoting the error torch raises when one is
    broken) without printing the order; hidden cases run the student's order for 3
    iterations of a tiny fp16-autocast model, with and without an overflow, and
    compare the parameters and the scale with the seed's order, bit for bit.
    zero_grad may come first or last.

    Example:
        >>> check_entry_step_order(lambda: ["zero_grad", "forward under autocast", ...])
    """
    grade("check_entry_step_order", seed_loop_order, hidden, _step_order_rows)
