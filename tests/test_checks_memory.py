"""Lesson 06's grader (amp_lessons.teaching.checks.memory): reference, known-wrong
answers with their hints, the stub, and a budget measured on a real model."""

import re

import pytest
from grader_harness import grader_tests
from reference_solutions import memory_budget

from amp_lessons.teaching.checks import check_memory_budget
from amp_lessons.teaching.checks import memory as graders

# --- reference solutions (copy into the solution cells) -------------------------
# (memory_budget: in tests/reference_solutions.py, which tests/test_checks.py
# uses too)


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


def memory_as_floats(n_params):  # "as ints", the exercise says: 4.0 * n is a float
    return {
        regime: {part: float(b) for part, b in parts.items()}
        for regime, parts in memory_budget(n_params).items()
    }


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "memory": (
        check_memory_budget,
        memory_budget,
        [
            (memory_halved_weights, False, "fp32 master weights"),
            (memory_halved_everything, True, "grads are float32 too"),
            (memory_one_moment, False, "TWO moments"),
            (memory_as_floats, False, "not a float"),
            (memory_as_floats, True, "not a float"),
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


# --- fair grading: the visible table does not hand out the answer ------------------


def memory_in_bits(n_params):
    return {
        regime: {k: 8 * v for k, v in parts.items()}
        for regime, parts in memory_budget(n_params).items()
    }


def test_visible_table_never_prints_the_expected_bytes(capsys):
    # n = 1000 -> 4_000 bytes of weights was printed: bytes per parameter, the answer
    with pytest.raises(AssertionError):
        check_memory_budget(memory_in_bits)
    out = capsys.readouterr().out
    numbers = set(re.findall(r"\d[\d_]*", out))
    for n in (1000, 1_000_000):
        for regime in memory_budget(n).values():
            for value in regime.values():
                assert f"{value:_}" not in numbers and str(value) not in numbers
    # a failed table is compact (at most 15 lines): 10 rows, then a count of the rest
    rows = [line for line in out.splitlines() if line.startswith("  n=")]
    assert len(rows) == 10 and all("(not shown)" in row for row in rows)
    assert "... 2 more failing: n=1_000_000 amp grads; n=1_000_000 amp adam" in out
    assert "count bytes, not bits" in out


def test_hidden_table_may_print_them(capsys):
    with pytest.raises(AssertionError):
        check_memory_budget(memory_in_bits, hidden=True)
    assert f"{4 * 124_439_808:_}" in capsys.readouterr().out
