"""The entry lesson's graders (amp_lessons.teaching.checks.entry): the reference passes,
each mistake readers make fails with a hint that names it from the calls the step made
(never the line to write), a correct step written differently passes, a wrong letter
is told why, and the notebook grades the step and the question, not the prediction."""

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
from amp_lessons.teaching.entry import (
    PREDICTION_CHOICES,
    measured_choice,
    note_prediction,
    reveal_prediction,
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
    return {"scale_after_32": "b"}


# --- known-wrong answers, each with a fragment of the hint it must get ------------

# The three commonest (the lesson's own "often ends" pair, the optimizer stepped
# directly, and the usual recipe's update() beside the given one), then the others.
the_broken_step = _step_ending(lambda loss, opt, scaler: (loss.backward(), opt.step()))
optimizer_step = _step_ending(
    lambda loss, opt, scaler: (scaler.scale(loss).backward(), opt.step())
)
own_update_too = _step_ending(
    lambda loss, opt, scaler: (
        scaler.scale(loss).backward(),
        scaler.step(opt),
        scaler.update(),
    )
)
unscaled_backward = _step_ending(
    lambda loss, opt, scaler: (loss.backward(), scaler.step(opt))
)
scaled_but_unused = _step_ending(
    lambda loss, opt, scaler: (scaler.scale(loss), loss.backward(), scaler.step(opt))
)
step_before_backward = _step_ending(
    lambda loss, opt, scaler: (scaler.step(opt), scaler.scale(loss).backward())
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
nothing_written = _step_ending(lambda loss, opt, scaler: None)
no_step = _step_ending(lambda loss, opt, scaler: scaler.scale(loss).backward())


def quiz_wrong():
    return {"scale_after_32": "a"}


def quiz_missing():
    return {"fp16_and_bf16": "b"}


def quiz_not_a_letter():
    return {"scale_after_32": ["b"]}


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "amp_step": (
        check_entry_amp_step,
        amp_step,
        [
            (the_broken_step, False, "backward ran on the loss itself"),
            (the_broken_step, False, "optimizer.step() ran directly"),
            (optimizer_step, False, "ran directly, on gradients still multiplied"),
            (optimizer_step, True, "never skips an inf/NaN step"),
            (own_update_too, False, "scaler.update() ran twice in one step"),
            (own_update_too, True, "the lesson's cell already calls it"),
            (own_update_too, False, "No inf checks were recorded prior to update."),
            (unscaled_backward, True, "backward ran on the loss itself"),
            (scaled_but_unused, False, "ran backward on the unscaled one"),
            (step_before_backward, False, "the scaler's step ran before backward"),
            (step_before_backward, True, "Backward first, then the step"),
            (unscale_then_optimizer_step, False, "optimizer.step() yourself"),
            (unscale_then_optimizer_step, True, "on the overflow step it wrote inf"),
            (step_twice, False, "the scaler's step ran twice"),
            (step_twice, True, "RuntimeError: step() has already been called"),
            (backward_twice, True, "backward ran 2 times in one step"),
            (nothing_written, False, "no backward ran"),
            (no_step, False, "update() ran with no step before it"),
        ],
    ),
    "quiz": (
        check_entry_quiz,
        quiz_answers,
        [
            (quiz_wrong, False, "(a) an overflow is not the only thing"),
            (quiz_wrong, True, "(a) an overflow is not the only thing"),
            (quiz_missing, False, "answer scale_after_32 with one of a, b, c, d"),
            (quiz_not_a_letter, False, "answer scale_after_32 with one of"),
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


# --- hints that teach: the fault named from the calls, the line left to write ------

ANSWER_LINES = ("scaler.scale(loss).backward()", "scaler.step(optimizer)")
WRONG_STEPS = [w for w, _, _ in CASES["amp_step"][2]]


@pytest.mark.parametrize("wrong", dict.fromkeys(WRONG_STEPS), ids=lambda w: w.__name__)
@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
def test_no_hint_writes_the_answer_line(wrong, hidden, capsys):
    with pytest.raises(AssertionError):
        check_entry_amp_step(wrong, hidden=hidden)
    out = " ".join(capsys.readouterr().out.split())
    assert "hint:" in out
    assert not any(line in out for line in ANSWER_LINES), out


COMMON_MISTAKES = {  # wrong step: (its fault, hints of faults it did not make)
    the_broken_step: (
        ["backward ran on the loss itself", "optimizer.step() ran directly"],
        ["ran twice", "before backward"],
    ),
    optimizer_step: (
        ["optimizer.step() ran directly"],
        ["backward ran on the loss itself", "ran twice", "before backward"],
    ),
    own_update_too: (
        ["scaler.update() ran twice"],
        ["optimizer.step() ran", "before backward", "backward ran on"],
    ),
    step_before_backward: (
        ["the scaler's step ran before backward"],
        ["backward ran on the loss itself", "optimizer.step() ran", "ran twice"],
    ),
}


@pytest.mark.parametrize("wrong", COMMON_MISTAKES, ids=lambda w: w.__name__)
def test_each_common_mistake_gets_its_own_fault_and_no_other(wrong, capsys):
    """The hint says what this step did wrong, not a fault it did not make: on main
    the recipe's own update() and the step before backward were told to add a line
    they already had."""
    with pytest.raises(AssertionError):
        check_entry_amp_step(wrong)
    out = " ".join(capsys.readouterr().out.split())
    said, not_said = COMMON_MISTAKES[wrong]
    assert all(s in out for s in said), out
    assert not any(s in out for s in not_said), out


def test_a_repeated_hint_is_printed_once(capsys):
    with pytest.raises(AssertionError):
        check_entry_amp_step(the_broken_step)
    out = capsys.readouterr().out
    assert out.count("backward ran on the loss itself") == 1
    assert "the same as above" in out
    assert len(out.splitlines()) <= 15


def test_the_hint_follows_the_calls_not_the_error_text(capsys):
    """The same torch error (no inf checks before update) from two different
    faults gets two different hints."""
    hints = []
    for wrong in (optimizer_step, own_update_too):
        with pytest.raises(AssertionError):
            check_entry_amp_step(wrong)
        hints.append(capsys.readouterr().out.split("hint:")[1])
    assert hints[0] != hints[1]


def test_the_quiz_never_prints_the_right_letter(capsys):
    for letter in (c for c in ENTRY_QUESTIONS["scale_after_32"] if c != "b"):
        with pytest.raises(AssertionError):
            check_entry_quiz(lambda letter=letter: {"scale_after_32": letter})
        out = capsys.readouterr().out
        assert f"({letter})" in out and "(b)" not in out


# --- the notebook grades both, in the locked form -----------------------------------


def test_notebook_grades_the_step_and_the_question_not_the_prediction():
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
    source = {c.get("id"): "".join(c["source"]) for c in cells}
    prediction = next(c for c in cells if "note_prediction(" in "".join(c["source"]))
    assert "nbgrader" not in prediction["metadata"]  # a guess, not an answer
    assert "prediction" not in source["e013"]  # the quiz does not read it
    assert "reveal_prediction(prediction, kept)" in source["e004"]


# --- the prediction: taken and shown beside the count, never graded ---------------


@pytest.mark.parametrize("letter", PREDICTION_CHOICES)
def test_the_prediction_is_acknowledged_the_same_way_right_or_wrong(letter, capsys):
    note_prediction(letter)
    said = capsys.readouterr().out
    note_prediction("b")
    assert said == capsys.readouterr().out.replace("(b)", f"({letter})")
    assert f"({letter})" in said and "right" not in said


@pytest.mark.parametrize("odd", ["", None, "e", 3, ["b"]])
def test_a_missing_or_odd_prediction_is_told_what_to_write(odd, capsys):
    note_prediction(odd)  # never raises: Run All goes on
    out = capsys.readouterr().out
    assert "a to d" in out and "(" not in out.split(":")[0]


def test_each_choice_is_the_count_it_names():
    for letter, (fp16, bf16) in PREDICTION_CHOICES.items():
        assert measured_choice(fp16, bf16) == letter
    assert measured_choice(20, 64) == "d" and measured_choice(60, 64) is None
    assert measured_choice(0, 63) is None


def test_the_reveal_compares_the_prediction_with_the_count(capsys):
    kept = {"fp16": 0, "bf16": 64}
    for guess, verdict in (("b", "right"), ("a", "not what happened"), ("", "no")):
        reveal_prediction(guess, kept)
        out = capsys.readouterr().out
        assert "fp16 kept 0 of 64, bf16 64 of 64: that is (b)" in out
        assert verdict in out
    reveal_prediction("b", {"fp16": 64, "bf16": 64})  # the measured count decides
    assert "that is (a)" in capsys.readouterr().out


# --- the exercise cell itself, written as readers write it ------------------------

FIRST_TRIES = {  # what readers write: the three commonest mistakes, then one more
    "loss.backward()\noptimizer.step()": "backward ran on the loss itself",
    "scaler.scale(loss).backward()\noptimizer.step()": "optimizer.step() ran directly",
    "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()": (
        "scaler.update() ran twice in one step"
    ),
    "scaler.step(optimizer)\nscaler.scale(loss).backward()": (
        "the scaler's step ran before backward"
    ),
}


def run_exercise(lines: str) -> None:
    """Run the lesson's visible test cell on its solution cell with `lines`
    in place of the solution (raises AssertionError when the check fails)."""
    cells = {
        c.get("id"): "".join(c["source"])
        for c in json.loads(NOTEBOOK.read_text())["cells"]
    }
    solution, test = cells["e010"], cells["e011"].split("### BEGIN HIDDEN TESTS")[0]
    head, rest = solution.split("    ### BEGIN SOLUTION\n")
    tail = rest.split("    ### END SOLUTION\n")[1]
    written = "".join(f"    {line}\n" for line in lines.splitlines())
    namespace: dict = {}
    exec(cells["e001"], namespace)  # the lesson's imports
    exec(head + written + tail, namespace)
    exec(test, namespace)


@pytest.mark.parametrize("lines", FIRST_TRIES, ids=range(len(FIRST_TRIES)))
def test_each_first_try_in_the_exercise_cell_gets_its_own_hint(lines, capsys):
    with pytest.raises(AssertionError):
        run_exercise(lines)
    out = " ".join(capsys.readouterr().out.split())
    assert FIRST_TRIES[lines] in out
    assert not any(answer in out for answer in ANSWER_LINES), out


def test_the_exercise_cell_passes_with_the_two_lines(capsys):
    run_exercise("scaler.scale(loss).backward()\nscaler.step(optimizer)")
    assert "all 2 cases passed" in capsys.readouterr().out


def test_a_step_that_tampers_with_the_record_still_gets_a_table(capsys):
    """The record is the hint's source, never the verdict's: a step that rewrites
    it is graded on what it did to the weights, and the check does not crash."""

    def meddling(model, optimizer, scaler, x, y):
        optimizer.zero_grad()
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scaler.calls = [None, 3]
        return loss

    with pytest.raises(AssertionError, match="cases? failed"):
        check_entry_amp_step(meddling)
    assert "hint:" in capsys.readouterr().out
