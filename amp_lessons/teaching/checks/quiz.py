"""Lesson 08's grader: the answers to the quick check, one question per test cell (one
point each). The questions, choices and the reason each wrong choice is wrong are the
lesson's own, in `amp_lessons.teaching.quiz`."""

from __future__ import annotations

from collections.abc import Callable

from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    Row,
    answer_of_type,
    answered_row,
    as_choice,
    choice_row,
    grade,
    show_value,
)
from amp_lessons.teaching.quiz import QUESTIONS
from amp_lessons.teaching.self_study import on_your_own

__all__ = ["check_quick_check"]

# the visible cases grade the first five questions, the hidden ones the other five
_QUIZ_HIDDEN = set(list(QUESTIONS)[5:])


def _not_a_letter(answer: object, choices: dict) -> str:
    """The hint for an answer that is not one of the letters: the letter alone when
    it is one in another form ('B', '(c)', 'd '), else the letters to choose from."""
    if isinstance(answer, str):
        letter = answer.strip().strip("()").strip().lower()
        if letter in choices:
            return _(
                "write the letter alone, in lower case: {letter!r}, not {answer!r}"
            ).format(letter=letter, answer=answer)
    return _("answer with one of {letters}").format(letters=", ".join(choices))


def _question_row(qid: str, got: dict) -> Row:
    choices = QUESTIONS[qid][1]
    right = next(k for k, (choice, why) in choices.items() if not why)
    return choice_row(
        qid,
        right,
        got.get(qid),
        choices,
        lambda c: f"({c}) {_(choices[c][0])}: {_(choices[c][1])}",  # why it is wrong
        _not_a_letter(got.get(qid), choices),
    )


def _answered_row(qid: str, got: dict) -> Row:
    """For a question graded by the hidden tests: only that it was answered."""
    choices = QUESTIONS[qid][1]
    answer = got.get(qid)
    ok = as_choice(answer, choices) is not None
    hint = _("answer {qid} with one of {letters}").format(
        qid=qid, letters=", ".join(choices)
    )
    return Row(
        _("{qid} answered").format(qid=qid),
        _("a letter"),
        show_value(answer, 22),
        ok,
        "" if ok else hint,
        _("right or wrong is for the hidden tests to say"),
    )


def _quiz_rows(question: str | None) -> Callable[[Callable, bool], list[Row]]:
    def make_rows(quick_check_answers: Callable, hidden: bool) -> list[Row]:
        got = answer_of_type(
            quick_check_answers, dict, "dict", N_("a dict {question id: letter}")
        )
        if question is not None:
            # on one's own no hidden test will ever grade it: graded here
            if hidden or question not in _QUIZ_HIDDEN or on_your_own():
                return [_question_row(question, got)]
            return [_answered_row(question, got)]
        rows = []
        if not hidden:
            bad = [
                q
                for q, (_text, choices) in QUESTIONS.items()
                if as_choice(got.get(q), choices) is None
            ]
            hint = _(
                "answer every question id of QUICK_CHECK with one of its "
                "letters; missing or invalid: {ids}"
            ).format(ids=", ".join(bad))
            case = _("all {total} questions answered").format(total=len(QUESTIONS))
            rows.append(answered_row(case, bad, hint))
        return rows + [
            _question_row(qid, got)
            for qid in QUESTIONS
            if (qid in _QUIZ_HIDDEN) == hidden
        ]

    return make_rows


def check_quick_check(
    quick_check_answers: Callable[[], dict[str, str]],
    question: str | None = None,
    hidden: bool = False,
) -> None:
    """Check `quick_check_answers() -> {question id: letter}` for QUICK_CHECK.

    With `question` (a question id), one question: notebook 08 has one test cell,
    one point, per question. The first five questions are graded in the visible
    cases; for the other five the visible case checks only that the answer is one of
    the letters, and the hidden cases grade it (on one's own, with no hidden tests,
    ``self_study.on_your_own()``, the visible case grades it too). Without
    `question`, all of them: the visible cases grade the first five (and that all
    ten are answered), the hidden cases the other five. A wrong choice gets the
    reason it is wrong; the table never prints the right letter.

    Example:
        >>> check_quick_check(lambda: {"autocast_scope": "b"}, "autocast_scope")
    """
    if question is not None and question not in QUESTIONS:
        raise ValueError(
            f"unknown question {question!r}; the ids are: {', '.join(QUESTIONS)}"
        )
    title = "check_quick_check" + (f"[{question}]" if question else "")
    grade(title, quick_check_answers, hidden, _quiz_rows(question))
