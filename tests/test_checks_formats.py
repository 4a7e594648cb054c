"""Lesson 01's graders (amp_lessons.teaching.checks.formats): each passes its reference
solution, rejects each known-wrong answer with its own hint, says "not attempted" for
the stub, and expects what torch's float16 does."""

import math

import pytest
import torch
from grader_harness import grader_tests
from reference_solutions import decode_fp16

from amp_lessons.teaching.checks import (
    check_decode_fp16,
    check_fp16_spacing,
    check_round_to_fp16,
)
from amp_lessons.teaching.checks import formats as graders
from amp_lessons.teaching.checks._engine import same_float

# --- reference solutions (copy into the solution cells) -------------------------
# (decode_fp16: in tests/reference_solutions.py, which tests/test_checks.py
# uses too)


def round_to_fp16(x):
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    exponent = max(math.frexp(abs(x))[1] - 1, -14)  # subnormals share 2**-14's step
    step = 2.0 ** (exponent - 10)  # 10 mantissa bits
    rounded = round(abs(x) / step) * step  # Python's round() ties to even
    if rounded > 65504:  # 65520 and above round past the largest fp16
        rounded = math.inf
    return math.copysign(rounded, x)


def fp16_spacing(x):
    h = torch.tensor(x, dtype=torch.float16)
    above = torch.nextafter(h, torch.tensor(math.inf, dtype=torch.float16))
    return (above.float() - h.float()).item()


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def decode_no_implicit_one(bits):
    e, m = (bits >> 10) & 0x1F, bits & 0x3FF
    if e == 0x1F:
        return decode_fp16(bits)
    return (-1.0 if bits >> 15 else 1.0) * (m / 1024) * 2.0 ** (max(e, 1) - 15)


def decode_bias_127(bits):
    e, m = (bits >> 10) & 0x1F, bits & 0x3FF
    if e in (0, 0x1F):
        return decode_fp16(bits)
    return (-1.0 if bits >> 15 else 1.0) * (1 + m / 1024) * 2.0 ** (e - 127)


def decode_subnormal_as_normal(bits):
    e, m = (bits >> 10) & 0x1F, bits & 0x3FF
    if e == 0 and m:
        return (-1.0 if bits >> 15 else 1.0) * (1 + m / 1024) * 2.0**-15
    return decode_fp16(bits)


def decode_no_nan(bits):
    e = (bits >> 10) & 0x1F
    return (-1.0 if bits >> 15 else 1.0) * math.inf if e == 0x1F else decode_fp16(bits)


def round_truncate(x):
    if x == 0 or math.isinf(x) or abs(x) >= 65520:
        return round_to_fp16(x)
    step = 2.0 ** (max(math.frexp(abs(x))[1] - 1, -14) - 10)
    return math.copysign(math.floor(abs(x) / step) * step, x)


def round_overflow_at_max(x):
    return math.copysign(math.inf, x) if abs(x) > 65504 else round_to_fp16(x)


def round_flush_subnormals(x):
    return 0.0 if abs(x) < 2.0**-14 else round_to_fp16(x)


def round_ties_away(x):
    if x == 0 or math.isinf(x):
        return x
    step = 2.0 ** (max(math.frexp(abs(x))[1] - 1, -14) - 10)
    rounded = math.floor(abs(x) / step + 0.5) * step
    return math.copysign(math.inf if rounded > 65504 else rounded, x)


def spacing_fp32(x):
    return 2.0 ** (math.frexp(fp16_value(x))[1] - 1 - 23) if x else 2.0**-149


def spacing_normal_formula(x):
    h = fp16_value(x)
    return 2.0 ** (math.frexp(h)[1] - 1 - 10) if h else 2.0**-24


def spacing_at_x(x):
    return 2.0 ** (math.frexp(x)[1] - 1 - 10) if x >= 2**-14 else 2.0**-24


def spacing_next_value(x):
    return fp16_value(x) + fp16_spacing(x)


def fp16_value(x):
    return torch.tensor(x, dtype=torch.float16).item()


def round_truncate_int(x):  # as a learner wrote it: int() instead of round()
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    step = 2.0 ** (max(math.frexp(abs(x))[1] - 1, -14) - 10)
    rounded = int(abs(x) / step) * step
    return math.copysign(math.inf if rounded > 65504 else rounded, x)


def round_without_subnormals(x):  # the exponent not floored at -14
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    step = 2.0 ** (math.frexp(abs(x))[1] - 1 - 10)
    rounded = round(abs(x) / step) * step
    return math.copysign(math.inf if rounded > 65504 else rounded, x)


# what does the cast for the learner: each fails, whatever it returns
def round_by_torch(x):
    return torch.tensor(x).to(torch.float16).item()


def round_by_numpy(x):
    import numpy as np

    return float(np.float16(x))


def round_by_struct(x):
    import struct

    try:
        return struct.unpack("e", struct.pack("e", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def decode_by_torch(bits):
    as_int16 = torch.tensor([bits], dtype=torch.int32).to(torch.int16)
    return as_int16.view(torch.float16).item()


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "decode": (
        check_decode_fp16,
        decode_fp16,
        [
            (decode_no_implicit_one, False, "implicit leading 1"),
            (decode_bias_127, False, "bias 127"),
            (decode_subnormal_as_normal, False, "no implicit 1, value = m * 2^-24"),
            (decode_no_nan, False, "any other mantissa, nan"),
            (decode_no_nan, True, "any other mantissa, nan"),
            (decode_by_torch, False, "used torch ("),
            (decode_by_torch, True, "rules by hand"),
            (lambda bits: torch.tensor(decode_fp16(bits)), False, "not a tensor"),
            (lambda bits: torch.tensor(decode_fp16(bits)).half(), False, "by hand"),
        ],
    ),
    "round": (
        check_round_to_fp16,
        round_to_fp16,
        [
            (round_truncate, False, "rounds to the NEAREST"),
            (round_overflow_at_max, False, "only >= 65520 becomes inf"),
            (round_flush_subnormals, False, "only |x| <= 2^-25 rounds to 0"),
            (round_ties_away, False, "ties to the even neighbour"),
            (round_ties_away, True, "ties to the even neighbour"),
            (lambda x: x, False, "you returned x unchanged"),
            (round_truncate_int, False, "you truncated (rounded toward zero)"),
            (round_without_subnormals, False, "e stops at -14"),
            (round_without_subnormals, True, "e stops at -14"),
            (round_by_torch, False, "used torch ("),
            (round_by_numpy, False, "used numpy,"),
            (round_by_struct, False, "used struct,"),
            (round_by_struct, True, "rules by hand"),
        ],
    ),
    "spacing": (
        check_fp16_spacing,
        fp16_spacing,
        [
            (spacing_fp32, False, "fp32's spacing"),
            (spacing_normal_formula, False, "stays 2^-24 all the way down"),
            (spacing_at_x, True, "not at x"),
            (spacing_next_value, False, "not the next number itself"),
            (lambda x: torch.tensor(fp16_spacing(x)), False, ".item() gives"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_decode_cases_cover_every_kind_of_fp16():
    values = [graders._fp16_from_bits(b) for b in graders._DECODE_CASES]
    assert any(math.isnan(v) for v in values) and math.inf in values
    assert 2.0**-24 in values and 65504.0 in values and -2.0 in values
    assert any(str(v) == "-0.0" for v in values)


def test_round_cases_are_exact_in_float32_and_match_torchs_cast():
    # torch rounds a Python float to fp16 via float32; the ties and edges must be
    # exact there, and the plain-Python rounding must agree with torch's cast
    for x in (1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 65520.0, 2049.0, 2.0**-25):
        assert torch.tensor(x, dtype=torch.float32).item() == x
    for x in graders._ROUND_CASES + graders._ROUND_HIDDEN:
        assert same_float(round_to_fp16(torch.tensor(x).item()), graders._fp16(x))


def test_spacing_examples_from_the_docstring():
    assert graders._fp16_spacing(1.0) == 2.0**-10
    assert graders._fp16_spacing(2048.0) == 2.0
    assert graders._fp16_spacing(0.0) == 2.0**-24
    assert graders._fp16_spacing(2047.9) == 2.0  # rounds to 2048 first


def test_a_wrong_decode_gets_the_rule_in_spanish(capsys, spanish):
    with pytest.raises(AssertionError, match="casos fallaron"):
        check_decode_fp16(lambda bits: 0.0)
    out = " ".join(capsys.readouterr().out.split())
    assert "pista: separe los 16 bits como signo 1 | exponente 10000" in out
    assert "subnormal (e = 0): (-1)^s * m * 2^-24; e = 31: inf (m = 0) o nan" in out


def test_a_by_hand_answer_that_uses_torch_for_nothing_else_is_not_flagged(capsys):
    """Only what the learner's function calls counts: the check's own torch calls
    around it (saving and restoring torch's state) are not the learner's."""
    check_round_to_fp16(round_to_fp16)
    check_decode_fp16(decode_fp16)

    def round_with_torch_constants(x):  # torch for its facts, not for the cast
        assert torch.finfo(torch.float16).max == 65504
        return round_to_fp16(torch.tensor(x, dtype=torch.float64).item())

    check_round_to_fp16(round_with_torch_constants)
    assert "by hand" not in capsys.readouterr().out
