"""Lesson 11's grader (amp_lessons.teaching.checks.fp8): the reference passes, each
known-wrong answer is rejected with its own hint, the stub is "not attempted", and the
expected answers are amp_lessons.core.fp8's (checked against torchao in
tests/test_fp8.py)."""

import pytest
import torch
from grader_harness import grader_tests, other_correct_test

from amp_lessons.core.fp8 import E4M3, E5M2, cast_to_fp8, scale_from_amax
from amp_lessons.teaching.checks import check_fp8_cast
from amp_lessons.teaching.checks import fp8 as graders

# --- reference solution (copy into the solution cell) -----------------------------


def to_fp8_tensorwise(x, dtype=torch.float8_e4m3fn, amax=None):
    if amax is None:
        amax = x.abs().max()
    biggest = torch.finfo(dtype).max
    scale = (biggest / torch.clamp(amax.double(), min=1e-12)).float()
    x_fp8 = (x.float() * scale).clamp(-biggest, biggest).to(dtype)
    return x_fp8, scale


# --- right in another form ----------------------------------------------------------


def in_float32(x, dtype=E4M3, amax=None):
    """All in float32: the same bits (448 / amax rounds once either way), and the
    floor at 1e-12 in float32 only moves the scale of an all-zero tensor, whose fp8
    values are zeros anyway."""
    amax = x.abs().max().float() if amax is None else amax.float()
    biggest = torch.finfo(dtype).max
    scale = biggest / amax.clamp(min=1e-12)
    return (x.float() * scale).clamp(-biggest, biggest).to(dtype), scale


# --- known-wrong answers, each with a fragment of the hint it must get --------------


def scale_left_in_float64(x, dtype=E4M3, amax=None):
    x_fp8, scale = to_fp8_tensorwise(x, dtype, amax)
    return x_fp8, scale.double()  # the division's float64, never rounded


def scale_as_a_python_float(x, dtype=E4M3, amax=None):
    x_fp8, scale = to_fp8_tensorwise(x, dtype, amax)
    return x_fp8, scale.item()


def amax_without_abs(x, dtype=E4M3, amax=None):
    return to_fp8_tensorwise(x, dtype, x.max() if amax is None else amax)


def scale_not_floored(x, dtype=E4M3, amax=None):
    amax = x.abs().max() if amax is None else amax
    biggest = torch.finfo(dtype).max
    scale = (biggest / amax.double()).float()
    return (x.float() * scale).clamp(-biggest, biggest).to(dtype), scale


def scale_inverted(x, dtype=E4M3, amax=None):
    amax = x.abs().max() if amax is None else amax
    biggest = torch.finfo(dtype).max
    scale = (torch.clamp(amax.double(), min=1e-12) / biggest).float()
    return (x.float() * scale).clamp(-biggest, biggest).to(dtype), scale


def cast_without_saturation(x, dtype=E4M3, amax=None):
    _, scale = to_fp8_tensorwise(x, dtype, amax)
    return (x.float() * scale).to(dtype), scale  # e5m2 overflows to inf


def always_e5m2(x, dtype=E4M3, amax=None):
    return to_fp8_tensorwise(x, E5M2, amax)


def max_of_e4m3_for_every_format(x, dtype=E4M3, amax=None):
    amax = x.abs().max() if amax is None else amax
    scale = (448.0 / torch.clamp(amax.double(), min=1e-12)).float()
    biggest = torch.finfo(dtype).max
    return (x.float() * scale).clamp(-biggest, biggest).to(dtype), scale


def ignores_the_given_amax(x, dtype=E4M3, amax=None):
    return to_fp8_tensorwise(x, dtype)


def returns_the_dequantized_values(x, dtype=E4M3, amax=None):
    data, scale = to_fp8_tensorwise(x, dtype, amax)
    return data.float() / scale, scale


def returns_only_the_data(x, dtype=E4M3, amax=None):
    return to_fp8_tensorwise(x, dtype, amax)[0]


CASES = {
    "fp8_cast": (
        check_fp8_cast,
        to_fp8_tensorwise,
        [
            (amax_without_abs, False, "largest magnitude, x.abs().max()"),
            (amax_without_abs, True, "largest magnitude"),
            (scale_not_floored, False, "torch.clamp(amax, min=1e-12)"),
            (scale_not_floored, True, "0 * inf is nan"),
            (scale_inverted, False, "the scale is inverted"),
            (cast_without_saturation, False, "the cast made inf: clamp"),
            (cast_without_saturation, True, "saturate"),
            (always_e5m2, False, "cast to the dtype asked for"),
            (max_of_e4m3_for_every_format, False, "57344 for e5m2, not 448"),
            (ignores_the_given_amax, False, "amax was given"),
            (ignores_the_given_amax, True, "delayed scaling"),
            (returns_the_dequantized_values, False, "cast to the dtype asked for"),
            (returns_only_the_data, False, "return a tuple (x_fp8, scale)"),
            (scale_left_in_float64, False, "divide in float64, then .float()"),
            (scale_as_a_python_float, False, "not a Python float"),
        ],
    ),
}
OTHER_CORRECT = [(check_fp8_cast, in_float32, "all-in-float32")]

(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)
test_other_correct_answers_pass = other_correct_test(OTHER_CORRECT)


@pytest.mark.parametrize("hidden", [False, True])
def test_cases_cover_both_formats_a_stale_amax_and_zeros(hidden):
    cases = graders._cases(hidden)
    assert {dtype for _, _, dtype, _ in cases} == {E4M3, E5M2}
    assert any(given is not None for *_, given in cases)
    assert any(not x.any() for _, x, _, _ in cases)
    saturating = [
        label
        for label, x, dtype, given in cases
        if given is not None
        and (
            x.float().abs() * scale_from_amax(given, dtype) > torch.finfo(dtype).max
        ).any()
    ]
    assert saturating  # a stale amax that x exceeds: the clamp matters


def test_expected_answers_are_the_lessons_module():
    x = torch.tensor([0.1, -0.3, 1.75])
    data, scale = to_fp8_tensorwise(x)
    assert scale.item() == 256.0 and torch.equal(
        data.float(), cast_to_fp8(x, torch.tensor(256.0)).float()
    )
    assert data.float().tolist() == [26.0, -80.0, 448.0]
