"""Lesson 06's grader (amp_lessons.checks.memory): reference, known-wrong answers with
their hints, the stub, and a budget measured on a real model."""

from grader_harness import grader_tests

from amp_lessons.checks import check_memory_budget
from amp_lessons.checks import memory as graders

# --- reference solutions (copy into the solution cells) -------------------------


def memory_budget(n_params):
    fp32 = {"weights": 4 * n_params, "grads": 4 * n_params, "adam_state": 8 * n_params}
    return {"fp32": fp32, "amp": dict(fp32)}  # master weights: AMP keeps all in fp32


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def memory_halved_weights(n_params):
    budget = memory_budget(n_params)
    budget["amp"] = {**budget["amp"], "weights": 2 * n_params}
    return budget


def memory_halved_everything(n_params):
    budget = memory_budget(n_params)
    budget["amp"] = {k: v // 2 for k, v in budget["amp"].items()}
    return budget


def memory_one_moment(n_params):
    budget = memory_budget(n_params)
    for regime in budget.values():
        regime["adam_state"] = 4 * n_params
    return budget


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "memory": (
        check_memory_budget,
        memory_budget,
        [
            (memory_halved_weights, False, "fp32 master weights"),
            (memory_halved_everything, True, "grads are float32 too"),
            (memory_one_moment, False, "TWO moments"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_memory_budget_is_measured_and_fp32_in_both_regimes():
    budget = graders._memory_budget(1000)
    assert budget["fp32"] == budget["amp"]
    assert budget["amp"] == {"weights": 4000, "grads": 4000, "adam_state": 8000}
