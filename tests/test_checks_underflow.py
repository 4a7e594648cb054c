"""Lesson 02's graders (amp_lessons.teaching.checks.underflow): reference, known-wrong
answers with their hints, the stub, answers that only call the package's own
underflow_fraction (by any name) or cast_outcome, and expectations that come from
torch's fp16 cast through the lesson's own
`amp_lessons.teaching.underflow.underflow_fraction`."""

import math

import pytest
import torch
from grader_harness import grader_tests

from amp_lessons.teaching import underflow as package
from amp_lessons.teaching.checks import (
    check_choose_loss_scale,
    check_underflow_fraction,
)
from amp_lessons.teaching.checks import underflow as graders
from amp_lessons.teaching.underflow import (
    underflow_fraction as package_fraction,  # bound early
)

# --- reference solutions (copy into the solution cells) -------------------------


def underflow_fraction(grads, scale):
    nonzero = grads != 0
    if nonzero.sum() == 0:
        return 0.0
    flushed = (grads[nonzero] * scale).to(torch.float16) == 0
    return flushed.sum().item() / nonzero.sum().item()


def choose_loss_scale(grads):
    k = 0
    while not torch.isfinite((grads * 2.0**k).half()).all():
        k -= 1
    while torch.isfinite((grads * 2.0 ** (k + 1)).half()).all():
        k += 1
    return 2.0**k


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def underflow_counts_zeros(grads, scale):
    return ((grads * scale).half() == 0).float().mean().item()


def underflow_no_scale(grads, scale):
    return underflow_fraction(grads, 1.0)


def underflow_below_min_normal(grads, scale):
    nonzero = grads[grads != 0]
    if nonzero.numel() == 0:
        return 0.0
    return ((nonzero * scale).abs() < 2**-14).float().mean().item()


def underflow_below_min_subnormal(grads, scale):
    nonzero = grads[grads != 0]
    if nonzero.numel() == 0:
        return 0.0
    return ((nonzero * scale).abs() < 2**-24).float().mean().item()


# answers that only call the package's own: each case fails with this hint
SHORTCUT = (
    "you called the package's own amp_lessons.teaching.underflow.underflow_fraction"
)


def underflow_calls_the_package(grads, scale):
    return package.underflow_fraction(grads, scale)


def underflow_calls_an_alias(grads, scale):
    return package_fraction(grads, scale)  # imported at the top, before the check ran


def underflow_default_argument(grads, scale, answer=package.underflow_fraction):
    return answer(grads, scale)


def underflow_cast_outcome(grads, scale):
    return package.cast_outcome(grads, scale).zero  # the same number


def underflow_swallows_the_tripwire(grads, scale):
    try:
        return package_fraction(grads, scale)
    except BaseException:  # what the tripwire raises: hidden, yet the call counts
        return underflow_fraction(grads, scale)


def loss_scale_le_65504(grads):
    return 2.0 ** math.floor(math.log2(65504 / grads.abs().max().item()))


def loss_scale_floor_of_65536(grads):  # 65536 at a power-of-two max|g|: inf
    return 2.0 ** math.floor(math.log2(65536 / grads.abs().max().item()))


def loss_scale_not_power_of_two(grads):
    return 65504 / grads.abs().max().item()


def loss_scale_signed_max(grads):
    return 2.0 ** math.floor(math.log2(65504 / grads.max().item()))


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "underflow": (
        check_underflow_fraction,
        underflow_fraction,
        [
            (underflow_counts_zeros, False, "already zero"),
            (underflow_no_scale, False, "multiply the grads by scale"),
            (underflow_below_min_normal, False, "become subnormals"),
            (underflow_below_min_subnormal, True, "round UP to 2^-24"),
            (underflow_calls_the_package, False, SHORTCUT),
            (underflow_calls_the_package, True, SHORTCUT),
            (underflow_calls_an_alias, False, SHORTCUT),
            (underflow_calls_an_alias, True, SHORTCUT),
            (underflow_default_argument, False, SHORTCUT),
            (package.underflow_fraction, True, SHORTCUT),  # the package's own
            (
                underflow_cast_outcome,
                False,
                "you called the package's own "
                "amp_lessons.teaching.underflow.cast_outcome",
            ),
            (underflow_swallows_the_tripwire, False, SHORTCUT),
            # the exercise asks for a Python float: a tensor is told so
            (
                lambda g, s: torch.tensor(underflow_fraction(g, s)),
                False,
                "return a Python float, not a tensor",
            ),
        ],
    ),
    "loss_scale": (
        check_choose_loss_scale,
        choose_loss_scale,
        [
            (loss_scale_le_65504, True, "rounds it DOWN to 65504"),
            (loss_scale_not_power_of_two, False, "must be a power of two"),
            (loss_scale_signed_max, True, "use grads.abs().max()"),
            (lambda g: 2 * choose_loss_scale(g), False, "overflows fp16"),
            (loss_scale_floor_of_65536, False, "max|g| * S = 65536 overflows"),
            (loss_scale_floor_of_65536, True, "overflows fp16"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_loss_scale_edge_cases_straddle_65504():
    assert graders._largest_safe_scale(torch.tensor([65510 * 2.0**-20])) == 2.0**20
    assert graders._largest_safe_scale(torch.tensor([65520 * 2.0**-20])) == 2.0**19
    assert graders._largest_safe_scale(torch.tensor([1e5])) == 0.5


def test_expectations_are_the_lessons_underflow_fraction():
    """The grader's expected fraction is
    amp_lessons.teaching.underflow.underflow_fraction; on every case it equals the
    exercise's definition computed directly with torch."""
    cases = graders._underflow_cases(hidden=False) + graders._underflow_cases(True)
    for _, grads, scale in cases:
        nonzero = grads != 0
        lost = (grads[nonzero] * scale).to(torch.float16) == 0
        direct = lost.sum().item() / nonzero.sum().item() if nonzero.any() else 0.0
        lesson = graders.underflow_fraction(grads, scale)
        assert lesson == direct == underflow_fraction(grads, scale)  # and the solution
    # the cases reach from nothing lost to nearly half lost
    fractions = [graders.underflow_fraction(g, s) for _, g, s in cases]
    assert min(fractions) == 0.0 and max(fractions) > 0.4


def test_the_package_answers_are_whole_again_after_a_check(capsys):
    codes = (package.underflow_fraction.__code__, package.cast_outcome.__code__)
    with pytest.raises(AssertionError, match="5 of 5 cases failed"):
        check_underflow_fraction(underflow_calls_an_alias)

    def stopped(grads, scale):  # the stop button, while the tripwires are set
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_underflow_fraction(stopped)
    assert package.underflow_fraction.__code__ is codes[0]
    assert package.cast_outcome.__code__ is codes[1]
    assert package.underflow_fraction.__kwdefaults__ is None
    assert package_fraction(torch.tensor([1e-9, 1.0, 0.0])) == 0.5  # it answers again
    check_underflow_fraction(underflow_fraction)
    assert "all 5 cases passed" in capsys.readouterr().out
