"""The entry lesson's graders (amp_lessons.teaching.checks.entry): reference,
known-wrong answers with their hints, the stub, a table that never gives the answer
away, and the notebook grading them in the locked form."""

import json
from pathlib import Path

import pytest
from grader_harness import grader_tests, other_correct_test

from amp_lessons.teaching.checks import (
    ENTRY_QUESTIONS,
    ENTRY_STEPS,
    check_entry_quiz,
    check_entry_step_order,
    entry_quiz_text,
)
from amp_lessons.teaching.quiz import QUESTIONS

NOTEBOOK = (Path(__file__).resolve().parent.parent / "notebooks"
            / "00_amp_in_10_minutes.ipynb")

# --- reference solutions (copy into the solution cells) -------------------------


def quick_check_answers():
    return {
        "why_scale": "c",
        "autocast_scope": "b",
        "step_with_inf": "d",
        "backward_call": "a",
        "where_fastest": "d",
    }


def seed_loop_order():
    return [
        "zero_grad",
        "forward under autocast",
        "scaler.scale(loss).backward()",
        "scaler.step(optimizer)",
        "scaler.update()",
    ]


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def quiz_overflow():
    return {**quick_check_answers(), "why_scale": "a"}


def quiz_wrap_everything():
    return {**quick_check_answers(), "autocast_scope": "a"}


def quiz_one_missing():
    answers = quick_check_answers()
    del answers["step_with_inf"]
    return answers


def quiz_backward_twice():
    return {**quick_check_answers(), "backward_call": "c"}


def quiz_cpu_fastest():
    return {**quick_check_answers(), "where_fastest": "a"}


def order_update_first():
    return ["zero_grad", "forward under autocast", "scaler.scale(loss).backward()",
            "scaler.update()", "scaler.step(optimizer)"]


def order_step_before_backward():
    return ["zero_grad", "forward under autocast", "scaler.step(optimizer)",
            "scaler.scale(loss).backward()", "scaler.update()"]


def order_zero_grad_between():
    return ["forward under autocast", "scaler.scale(loss).backward()", "zero_grad",
            "scaler.step(optimizer)", "scaler.update()"]


def order_with_unscale():
    return [*seed_loop_order()[:3], "scaler.unscale_(optimizer)",
            *seed_loop_order()[3:]]


def order_nanogpt():  # zero_grad last: right too
    return [*seed_loop_order()[1:], "zero_grad"]


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "quiz": (
        check_entry_quiz,
        quick_check_answers,
        [
            (quiz_overflow, False, "scaling makes values BIGGER"),
            (quiz_wrap_everything, False, "the docs advise against wrapping backward"),
            (quiz_one_missing, False, "missing or invalid: step_with_inf"),
            (quiz_backward_twice, True, "call backward once, on the scaled loss"),
            (quiz_cpu_fastest, True, "SLOWER than fp32"),
        ],
    ),
    "order": (
        check_entry_step_order,
        seed_loop_order,
        [
            (order_update_first, False, "No inf checks were recorded"),
            (order_step_before_backward, False, "step on last iteration's gradients"),
            (order_zero_grad_between, False, "wipes the grads"),
            (order_zero_grad_between, True, "raised: No inf checks were recorded"),
            (order_step_before_backward, True, "running your order raised"),
            (order_with_unscale, False, "not in ENTRY_STEPS: 'scaler.unscale_"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)
test_other_correct_answers_pass = other_correct_test(
    [(check_entry_step_order, order_nanogpt, "zero-grad-last")]
)


# --- the questions are lesson 08's, the steps lesson 05's ---------------------------


def test_questions_and_steps_come_from_the_course():
    assert set(ENTRY_QUESTIONS) <= set(QUESTIONS)
    assert all(qid in entry_quiz_text() for qid in ENTRY_QUESTIONS)
    assert sorted(ENTRY_STEPS) == sorted(seed_loop_order())
    assert list(ENTRY_STEPS) != seed_loop_order()  # shown shuffled


# --- fair grading: the tables never print the right answer -------------------------


def test_quiz_table_never_prints_the_right_choice(capsys):
    def all_wrong():
        return {q: next(k for k, (_, why) in QUESTIONS[q][1].items() if why)
                for q in ENTRY_QUESTIONS}

    for hidden in (False, True):
        with pytest.raises(AssertionError):
            check_entry_quiz(all_wrong, hidden=hidden)
    flat = " ".join(capsys.readouterr().out.split())
    for qid in ENTRY_QUESTIONS:
        right = next(c for c, why in QUESTIONS[qid][1].values() if not why)
        assert right not in flat


def test_order_table_does_not_give_the_order_away(capsys):
    with pytest.raises(AssertionError):
        check_entry_step_order(lambda: list(ENTRY_STEPS))
    rows = [line for line in capsys.readouterr().out.splitlines() if " vs " in line]
    assert len(rows) == 3 and all("(not shown)" in row for row in rows)
    assert all(row.split()[0] < row.split()[2] for row in rows)  # named alphabetically


# --- the notebook grades both, in the locked form -----------------------------------


def test_notebook_grades_both_exercises():
    if not NOTEBOOK.exists():
        pytest.skip("the entry lesson is not written yet")
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    graded = ["".join(c["source"]) for c in cells
              if c["metadata"].get("nbgrader", {}).get("grade")]
    assert len(graded) == 2
    assert "_checks.check_entry_quiz(quick_check_answers)" in graded[0]
    assert "_checks.check_entry_step_order(seed_loop_order)" in graded[1]
    assert all("hidden=True" in text for text in graded)
