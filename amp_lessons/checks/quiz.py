"""Lesson 08's grader: the answers to the quick check. The questions, choices and the
reason each wrong choice is wrong are the lesson's own, in `amp_lessons.quiz`."""

from __future__ import annotations

from collections.abc import Callable

from amp_lessons.checks._engine import Row, answer_of_type, answered_row, cut, grade
from amp_lessons.quiz import QUESTIONS

__all__ = ["check_quick_check"]

# the visible cases grade the first five questions, the hidden ones the other five
_QUIZ_HIDDEN = set(list(QUESTIONS)[5:])


def _quiz_rows(quick_check_answers: Callable, hidden: bool) -> list[Row]:
    got = answer_of_type(
        quick_check_answers, dict, "dict", "a dict {question id: letter}"
    )
    rows = []
    if not hidden:
        bad = [q for q in QUESTIONS if got.get(q) not in QUESTIONS[q][1]]
        hint = "answer every question id of QUICK_CHECK with one of its letters; "
        hint += "missing or invalid: " + ", ".join(bad)
        rows.append(answered_row(f"all {len(QUESTIONS)} questions answered", bad, hint))
    for qid, (_, choices) in QUESTIONS.items():
        if (qid in _QUIZ_HIDDEN) != hidden:
            continue
        right = next(k for k, (_, why) in choices.items() if not why)
        answer = got.get(qid)
        ok = answer == right
        if answer in choices:
            hint = f"({answer}) {choices[answer][0]}: {choices[answer][1]}"
        else:
            hint = f"answer with one of {', '.join(choices)}"
        rows.append(
            Row(
                qid,
                right,
                cut(str(answer) if isinstance(answer, str) else repr(answer), 22),
                ok,
                "" if ok else hint,
            )
        )
    return rows


def check_quick_check(
    quick_check_answers: Callable[[], dict[str, str]], hidden: bool = False
) -> None:
    """Check `quick_check_answers() -> {question id: letter}` for QUICK_CHECK.

    Visible cases grade the first five questions (and that all ten are answered);
    hidden cases the other five. Each wrong choice gets its own explanation.

    Example:
        >>> check_quick_check(lambda: {"autocast_scope": "b", ...})
    """
    grade("check_quick_check", quick_check_answers, hidden, _quiz_rows)
