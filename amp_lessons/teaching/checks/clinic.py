"""Lesson 07's grader: the cause behind each of the clinic's symptoms. The symptoms,
causes and clues are the lesson's own, in `amp_lessons.teaching.clinic`."""

from __future__ import annotations

from collections.abc import Callable

from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    Row,
    answered_row,
    as_choice,
    call_student,
    choice_row,
    grade,
    show_value,
)
from amp_lessons.teaching.clinic import CAUSES, DIAGNOSES, SYMPTOMS

__all__ = ["check_clinic_diagnosis"]


def _clinic_rows(diagnose: Callable, hidden: bool) -> list[Row]:
    answers = {symptom: call_student(diagnose, symptom) for symptom in SYMPTOMS}
    rows = []
    if not hidden:
        bad = [s for s, a in answers.items() if as_choice(a, CAUSES) is None]
        hint = _(
            "return one of the keys of CAUSES for every symptom in SYMPTOMS; "
            "not a key: {answers}"
        ).format(
            answers="; ".join(
                f"#{SYMPTOMS.index(s) + 1} -> {show_value(answers[s], 30)}" for s in bad
            )
        )
        case = _("all {total} symptoms answered").format(total=len(SYMPTOMS))
        rows.append(answered_row(case, bad, hint, N_("keys of CAUSES"), N_("not keys")))
    chosen = DIAGNOSES[5:] if hidden else DIAGNOSES[:5]
    first = 6 if hidden else 1
    for number, (symptom, cause, clue) in enumerate(chosen, start=first):
        rows.append(
            choice_row(
                f"#{number} {symptom}",
                cause,
                answers[symptom],
                CAUSES,
                # the chosen cause's meaning, and the clue: never the right key
                lambda key, clue=clue: _(
                    "{key} means {meaning}: that does not "
                    "produce this symptom. Clue: {clue}"
                ).format(key=repr(key), meaning=_(CAUSES[key]), clue=_(clue)),
                _("not a key of CAUSES. Clue: {clue}").format(clue=_(clue)),
            )
        )
    return rows


def check_clinic_diagnosis(
    diagnose: Callable[[str], str], hidden: bool = False
) -> None:
    """Check `diagnose(symptom) -> str`: the CAUSES key behind each of SYMPTOMS.

    Visible cases grade the first five symptoms (and that every symptom gets a valid
    key); hidden cases the other five. A wrong key gets what it means and the
    symptom's clue; the table never prints the right key.

    Example:
        >>> check_clinic_diagnosis(lambda symptom: "fp16_overflow")
    """
    grade("check_clinic_diagnosis", diagnose, hidden, _clinic_rows)
