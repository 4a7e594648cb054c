"""Lesson 05's graders (amp_lessons.teaching.checks.step_order,
amp_lessons.teaching.checks.train_step): reference, known-wrong answers with their
hints, the stub, and reference runs with a real torch.amp.GradScaler that overflow, back
off and grow."""

import pytest
import torch
import torch.nn.functional as F
from grader_harness import grader_tests, other_correct_test
from reference_solutions import amp_step_order, amp_train_step

from amp_lessons.teaching.checks import (
    AMP_STEPS,
    check_amp_step_order,
    check_amp_train_step,
)
from amp_lessons.teaching.checks import train_step as graders

# --- reference solutions (copy into the solution cells) -------------------------
# (amp_step_order, amp_train_step: in tests/reference_solutions.py, which
# tests/test_checks.py uses too)


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def order_clip_first():
    return [
        "zero_grad",
        "with autocast: forward",
        "scaler.scale(loss).backward()",
        "clip_grad_norm_",
        "scaler.unscale_(optimizer)",
        "scaler.step(optimizer)",
        "scaler.update()",
    ]


def order_update_first():
    order = amp_step_order()
    order[5], order[6] = order[6], order[5]
    return order


def order_zero_grad_between():
    order = amp_step_order()[1:]
    order.insert(3, "zero_grad")  # after unscale_, before clip
    return order


def order_nanogpt():
    return amp_step_order()[1:] + ["zero_grad"]


def order_missing_unscale():
    return [s for s in amp_step_order() if s != "scaler.unscale_(optimizer)"]


def train_no_unscale(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def train_optimizer_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss.item()


def train_no_update(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.item()


def train_unscaled_backward(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def order_zero_grad_after_forward():
    order = amp_step_order()[1:]
    order.insert(1, "zero_grad")  # between forward and backward: still correct
    return order


def train_bf16_autocast(model, optimizer, scaler, x, y, max_norm):
    """The step under bf16 autocast: the exercise's step is fp16 AMP."""
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def train_clips_before_unscale(model, optimizer, scaler, x, y, max_norm):
    """The classic mistake: the scaled gradients clipped, then unscaled."""
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def train_returns_the_loss_tensor(model, optimizer, scaler, x, y, max_norm):
    """The loss as a tensor, where the exercise asks for a Python float."""
    loss_value = amp_train_step(model, optimizer, scaler, x, y, max_norm)
    return torch.tensor(loss_value)


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "order": (
        check_amp_step_order,
        amp_step_order,
        [
            (order_clip_first, False, "clips the SCALED grads"),
            (order_update_first, False, "No inf checks were recorded"),
            (order_zero_grad_between, False, "wipes the grads"),
            (order_zero_grad_between, True, "trains the model differently"),
            (order_missing_unscale, False, "missing: 'scaler.unscale_(optimizer)'"),
        ],
    ),
    "train": (
        check_amp_train_step,
        amp_train_step,
        [
            (train_no_unscale, False, "nothing unscaled the gradients before"),
            (train_optimizer_step, False, "then called optimizer.step() yourself"),
            (train_optimizer_step, True, "then called optimizer.step() yourself"),
            (train_no_update, False, "the scaler's update never ran"),
            (train_unscaled_backward, False, "backward ran on the loss itself"),
            (train_returns_the_loss_tensor, False, "a tensor keeps its graph"),
            (train_bf16_autocast, False, "a dtype other than float16"),
            (train_clips_before_unscale, False, "clip_grad_norm_ ran before unscale_"),
            (train_clips_before_unscale, True, "clip_grad_norm_ ran before unscale_"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)
test_other_correct_answers_pass = other_correct_test(
    [
        (check_amp_step_order, order_nanogpt, "nanogpt-order"),
        (
            check_amp_step_order,
            order_zero_grad_after_forward,
            "zero-grad-after-forward",
        ),
    ]
)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_check_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    check_amp_train_step(amp_train_step)
    assert torch.equal(torch.get_rng_state(), before)


def test_train_cases_include_real_overflow_and_growth():
    runs = {
        c.name: graders._run_train_case(amp_train_step, c) for c in graders._TRAIN_CASES
    }
    assert runs["1 step, overflow (scale 2**40)"][1] == 2.0**39  # skipped, backed off
    assert runs["3 steps, growth_interval 2"][1] == 2.0**11  # grew once
    adam = graders._run_train_case(amp_train_step, graders._TRAIN_HIDDEN[0])
    assert adam[1] == 2.0**15  # the overflow at step 2 of 3 was seen


def test_steps_for_the_notebook_list_every_step():
    assert set(AMP_STEPS) == set(amp_step_order())


# --- fair grading: the visible table does not print the order ----------------------


def test_visible_order_table_does_not_give_the_order_away(capsys):
    with pytest.raises(AssertionError):
        check_amp_step_order(lambda: list(AMP_STEPS))  # AMP_STEPS is shuffled
    out = capsys.readouterr().out
    assert " before " not in out.split("hint:")[0] and "1 or 7" not in out
    # a failed table is compact (at most 15 lines): the failing rows, hints, a count
    rows = [line for line in out.splitlines() if " vs " in line]
    assert len(rows) == 3 and all("(not shown)" in row for row in rows)
    assert "(5 of 8 cases passed)" in out
    for row in rows:  # each pair is named alphabetically, whatever its order
        first, second = row.split()[0], row.split()[2]
        assert first < second


def test_an_order_that_cannot_run_is_explained_in_spanish(capsys, spanish):
    # the reference order with backward before the forward
    forward_late = list(amp_step_order())
    forward_late[1], forward_late[2] = forward_late[2], forward_late[1]
    with pytest.raises(AssertionError, match="2 de 3 casos fallaron"):
        check_amp_step_order(lambda: forward_late, hidden=True)
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "pista: ejecutar su orden lanzó: propagación hacia atrás antes de cualquier "
        "paso forward: todavía no hay pérdida"
    ) in out


# --- hints come from the calls the step made, and never write the line -------------

# the lines the exercise asks for: no hint may spell one out
ANSWER_LINES = ("scaler.scale(", "scaler.step(", "scaler.unscale_(", "scaler.update()",
                ".backward()", "autocast(", "zero_grad(", "loss.item()")  # fmt: skip


def _train_body(model, optimizer, scaler, x, y, max_norm, *, mistake=""):
    if mistake != "no_zero_grad":
        optimizer.zero_grad(set_to_none=True)
    if mistake == "half":
        model.half()
    with torch.amp.autocast("cpu", dtype=torch.float16, enabled=mistake != "fp32"):
        loss = F.mse_loss(model(x), y)
    scaled = scaler.scale(loss)
    scaled.backward()
    if mistake != "unscale_late":
        scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    if mistake == "unscale_late":
        scaler.unscale_(optimizer)
    scaler.update()
    if mistake == "update_twice":
        scaler.update()
    return scaled.item() if mistake == "scaled_loss" else loss.item()


def _mistake(name):
    def step(*args):
        return _train_body(*args, mistake=name)

    return step


TRAIN_FAULTS = [
    (train_no_unscale, "nothing unscaled the gradients"),
    (train_optimizer_step, "then called optimizer.step() yourself"),
    (train_no_update, "the scaler's update never ran"),
    (train_unscaled_backward, "backward ran on the loss itself"),
    (_mistake("no_zero_grad"), "added this step's gradients to the last step's"),
    (_mistake("half"), "the model's weights are float16"),
    (_mistake("fp32"), "the forward pass ran outside fp16 autocast"),
    (_mistake("unscale_late"), "unscale_ ran after the scaler's step"),
    (_mistake("update_twice"), "the scaler's update ran twice in one step"),
    (_mistake("scaled_loss"), "returned the scaled loss"),
]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(("step", "fragment"), TRAIN_FAULTS)
def test_train_hint_names_the_fault_and_leaves_the_line(step, fragment):
    rows = graders._train_rows(step, hidden=False) + graders._train_rows(step, True)
    hints = [row.hint for row in rows if not row.ok]
    hints = [hint for hint in hints if hint != "the same as above"]
    assert hints and all(fragment in hint for hint in hints), hints
    for hint in hints:
        said = hint.split("(The error:")[0]  # torch's own words may follow
        assert not [line for line in ANSWER_LINES if line in said], hint


def test_train_hint_does_not_match_the_error_text():
    # the same RuntimeError text, raised by a step that never called the scaler
    def raises_torch_words(model, optimizer, scaler, x, y, max_norm):
        raise RuntimeError("unscale_() has already been called on this optimizer")

    rows = graders._train_rows(raises_torch_words, hidden=False)
    assert all("update" not in row.hint for row in rows)


def test_train_hint_in_spanish(capsys, spanish):
    with pytest.raises(AssertionError, match="casos fallaron"):
        check_amp_train_step(train_no_update)
    out = " ".join(capsys.readouterr().out.split())
    assert "la actualización del escalador no se ejecutó nunca" in out
    assert "(El error: RuntimeError: unscale_() is being called after step().)" in out
