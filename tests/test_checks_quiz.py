"""Lesson 08's grader (amp_lessons.checks.quiz): reference, known-wrong answers with the
reason for each wrong choice, the stub, and the questions of amp_lessons.quiz."""

from grader_harness import grader_tests

from amp_lessons.checks import check_quick_check
from amp_lessons.quiz import QUESTIONS, QUICK_CHECK, quick_check_text

# --- reference solutions (copy into the solution cells) -------------------------


def quick_check_answers():
    return {
        "autocast_scope": "b",
        "why_scale": "c",
        "step_with_inf": "d",
        "update_after_overflow": "a",
        "memory_saving": "b",
        "bf16_scaler": "c",
        "backward_call": "a",
        "where_fastest": "d",
        "deprecated_api": "b",
        "where_clip": "c",
    }


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def quiz_all_a():
    return {qid: "a" for qid in QUICK_CHECK}


def quiz_one_wrong():
    return {**quick_check_answers(), "autocast_scope": "a", "bf16_scaler": "d"}


def quiz_older_gpus():
    return {**quick_check_answers(), "where_fastest": "b"}


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "quiz": (
        check_quick_check,
        quick_check_answers,
        [
            (quiz_all_a, False, "the docs advise against wrapping backward"),
            (quiz_one_wrong, True, "its advantage is range, not precision"),
            # P100: fp16 at 2x fp32; consumer Pascal: 1/64 (the option is wrong both
            # ways, and the hint says so)
            (quiz_older_gpus, True, "twice its fp32 rate (21.2 vs 10.6 TFLOPS)"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_quiz_has_one_right_choice_and_a_reason_for_every_wrong_one():
    for _, choices in QUESTIONS.values():
        reasons = [why for _, why in choices.values()]
        assert sum(not why for why in reasons) == 1
    text = quick_check_text()
    assert all(qid in text for qid in QUICK_CHECK)
