"""The entry lesson's graders (amp_lessons.teaching.checks.entry): the reference passes,
each mistake readers make fails with its own hint, a correct step written differently
passes, the quiz never says which answer is wrong, and the notebook grades both."""

import json

import pytest
import torch
import torch.nn.functional as F
from grader_harness import grader_tests, other_correct_test
from paths import NOTEBOOKS_DIR

from amp_lessons.teaching.checks import (
    ENTRY_QUESTIONS,
    check_entry_amp_step,
    check_entry_quiz,
)

NOTEBOOK = NOTEBOOKS_DIR / "00_amp_in_10_minutes.ipynb"


def _step_ending(tail):
    """The lesson's `amp_step` with `tail(loss, optimizer, scaler)` for the two lines
    the reader writes."""

    def amp_step(model, optimizer, scaler, x, y):
        optimizer.zero_grad()
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        tail(loss, optimizer, scaler)
        scaler.update()
        return loss

    return amp_step


# --- reference solutions (copy into the solution cells) -------------------------

amp_step = _step_ending(
    lambda loss, opt, scaler: (scaler.scale(loss).backward(), scaler.step(opt))
)


def quiz_answers():
    return {"fp16_and_bf16": "b", "scale_after_32": "b"}


# --- known-wrong answers, each with a fragment of the hint it must get ------------

the_broken_step = _step_ending(lambda loss, opt, scaler: (loss.backward(), opt.step()))
unscaled_backward = _step_ending(
    lambda loss, opt, scaler: (loss.backward(), scaler.step(opt))
)
optimizer_step = _step_ending(
    lambda loss, opt, scaler: (scaler.scale(loss).backward(), opt.step())
)
unscale_then_optimizer_step = _step_ending(
    lambda loss, opt, scaler: (
        scaler.scale(loss).backward(),
        scaler.unscale_(opt),
        opt.step(),
    )
)
step_twice = _step_ending(
    lambda loss, opt, scaler: (
        scaler.scale(loss).backward(),
        scaler.step(opt),
        scaler.step(opt),
    )
)
backward_twice = _step_ending(
    lambda loss, opt, scaler: (
        scaler.scale(loss).backward(retain_graph=True),
        scaler.scale(loss).backward(),
        scaler.step(opt),
    )
)


def quiz_one_wrong():
    return {**quiz_answers(), "scale_after_32": "a"}


def quiz_prediction_wrong():
    return {**quiz_answers(), "fp16_and_bf16": "a"}


def quiz_one_missing():
    return {"fp16_and_bf16": "b"}


def quiz_not_a_letter():
    return {**quiz_answers(), "scale_after_32": ["b"]}


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "amp_step": (
        check_entry_amp_step,
        amp_step,
        [
            (the_broken_step, False, "backward ran on the unscaled loss"),
            (unscaled_backward, True, "call scaler.scale(loss).backward()"),
            (optimizer_step, False, "instead of optimizer.step()"),
            (unscale_then_optimizer_step, False, "optimizer.step() never skips"),
            (unscale_then_optimizer_step, True, "optimizer.step() never skips"),
            (step_twice, False, "scaler.step ran twice"),
            (backward_twice, True, "write the two lines the lesson names"),
        ],
    ),
    "quiz": (
        check_entry_quiz,
        quiz_answers,
        [
            (quiz_one_wrong, False, "the check does not say which"),
            (quiz_prediction_wrong, False, "the check does not say which"),
            (quiz_one_wrong, True, "the check does not say which"),
            (quiz_one_missing, False, "missing or invalid: scale_after_32"),
            (quiz_not_a_letter, False, "missing or invalid: scale_after_32"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


def scaled_by_hand(model, optimizer, scaler, x, y):
    """Right, written another way: the scaled loss as a variable, autograd.backward,
    an explicit unscale_, and the step."""
    optimizer.zero_grad(set_to_none=False)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        prediction = model(x)
    loss = F.mse_loss(prediction.float(), y)
    scaled = scaler.scale(loss)
    torch.autograd.backward(scaled)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


test_other_correct_answers_pass = other_correct_test(
    [(check_entry_amp_step, scaled_by_hand, "scaled-by-hand")]
)


# --- fair grading -------------------------------------------------------------------


def test_quiz_table_never_says_which_answer_is_wrong(capsys):
    """Told which answer is wrong, a reader passes by trying letters: the visible table
    reads the same whichever of the two is wrong."""
    tables = []
    for wrong in (quiz_one_wrong, quiz_prediction_wrong):
        with pytest.raises(AssertionError):
            check_entry_quiz(wrong)
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1]
    assert all(qid not in tables[0] for qid in ENTRY_QUESTIONS)


def test_every_wrong_letter_pair_fails():
    for first in ENTRY_QUESTIONS["fp16_and_bf16"]:
        for second in ENTRY_QUESTIONS["scale_after_32"]:
            answers = {"fp16_and_bf16": first, "scale_after_32": second}
            if answers == quiz_answers():
                continue
            with pytest.raises(AssertionError):
                check_entry_quiz(lambda answers=answers: answers)


# --- the notebook grades both, in the locked form -----------------------------------


def test_notebook_grades_both_exercises():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    graded = [
        "".join(c["source"])
        for c in cells
        if c["metadata"].get("nbgrader", {}).get("grade")
    ]
    assert len(graded) == 2
    assert "_checks.check_entry_amp_step(amp_step)" in graded[0]
    assert "_checks.check_entry_quiz(quiz_answers)" in graded[1]
    assert all("hidden=True" in text for text in graded)
