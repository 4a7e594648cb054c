"""Lesson 01's graders: decoding, rounding to and spacing of fp16, each checked against
torch's own float16 (a bit view, a cast, `torch.nextafter`)."""

from __future__ import annotations

import functools
import math
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from amp_lessons.i18n import _
from amp_lessons.teaching.checks._engine import (
    Row,
    call_student,
    float_row,
    grade,
    same_float,
    show_value,
)

__all__ = ["check_decode_fp16", "check_round_to_fp16", "check_fp16_spacing"]

# Decoding and rounding are fp16's rules by hand: the exercises say so. Anything that
# does the cast for the student (torch's view or cast, numpy's float16, struct's
# "e" format) gives the check's own answer and would pass without the rules learnt.
# Torch is caught as it runs (a call of the student's that makes an fp16 tensor),
# numpy and struct by the names the function's code uses.
_NUMPY = frozenset({"np", "numpy"})
_FP16_NAMES = frozenset({"float16", "half"})


class _Fp16Casts(TorchFunctionMode):
    """Records the torch calls made by `code` (the student's function, however deep)
    that return an fp16 tensor; the check's own torch calls around it, and the
    student's other torch calls, are not recorded."""

    def __init__(self, code: types.CodeType | None) -> None:
        super().__init__()
        self.code = code
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor) and result.dtype == torch.float16:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code is not self.code:
                frame = frame.f_back
            if frame is not None:
                self.names.append(getattr(func, "__name__", "a torch function"))
        return result


def _names_used(code: types.CodeType) -> set[str]:
    """The global and attribute names a function's code (nested functions too) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


def _by_hand(student: Callable, *args: Any) -> tuple[Any, str | None]:
    """The student's answer, and what did the cast for them (None if nothing)."""
    code = getattr(student, "__code__", None)
    code = code if isinstance(code, types.CodeType) else None
    with _Fp16Casts(code) as seen:
        got = call_student(student, *args)
    if seen.names:
        return got, f"torch ({seen.names[0]})"
    used = _names_used(code) if code else set()
    if "struct" in used:
        return got, "struct"
    if used & _NUMPY and used & _FP16_NAMES:
        return got, "numpy"
    return got, None


def _shortcut_row(case: str, expected: float, got: Any, shortcut: str) -> Row:
    return Row(
        case,
        show_value(expected),
        show_value(got, 24),
        False,
        _(
            "this exercise is fp16's rules by hand: your function used {name}, "
            "which does the cast the check compares with; write the arithmetic "
            "(math and int operations) yourself"
        ).format(name=shortcut),
    )


def _fp16(x: float) -> float:
    """torch's cast of float32(x) to fp16, as a Python float."""
    return torch.tensor(x, dtype=torch.float32).to(torch.float16).item()


def _log2_floor(x: float) -> int:
    return math.frexp(abs(x))[1] - 1


_DECODE_CASES = (0x3C00, 0xC000, 0x7BFF, 0x3555, 0x0400, 0x03FF, 0x0001, 0x8000,
                 0x7C00, 0x7E00)  # fmt: skip
_DECODE_HIDDEN = (0x5640, 0x3BFF, 0xBC01, 0x0200, 0x8001, 0x0000, 0xFC00, 0xFE00,
                  0x7C01, 0x1400)  # fmt: skip


def _fp16_from_bits(bits: int) -> float:
    signed = bits - 0x10000 if bits >= 0x8000 else bits
    return torch.tensor(signed, dtype=torch.int16).view(torch.float16).item()


def _decode_hint(bits: int, got: float) -> str:
    s, e, m = bits >> 15, (bits >> 10) & 0x1F, bits & 0x3FF
    sign = -1.0 if s else 1.0
    rule = _(
        "normal: (-1)^s * (1 + m/1024) * 2^(e-15); subnormal (e = 0): "
        "(-1)^s * m * 2^-24; e = 31: inf (m = 0) or nan"
    )
    if e == 31:
        if math.isfinite(got):
            return _(
                "exponent bits 11111 are reserved: inf if the mantissa is 0, else nan"
            )
        return _("exponent 11111 with mantissa 0 is inf; with any other mantissa, nan")
    known = []
    if 0 < e < 31:
        known += [
            (sign * 2.0 ** (e - 15) * (m / 1024), _("you forgot the implicit leading "
                                                    "1: "
             "a normal fp16 is 1.mantissa, i.e. (1 + m/1024) * 2^(e-15)")),
            (sign * 2.0 ** (e - 127) * (1 + m / 1024), _("you used fp32's bias 127; "
             "fp16 has 5 exponent bits, so its bias is 2^4 - 1 = 15")),
            (sign * 2.0 ** (e - 16) * (1 + m / 1024), _("exponent bias off by one: "
             "fp16's bias is 15 (subtract 15 from the exponent field)")),
            (sign * 2.0 ** (e - 14) * (1 + m / 1024), _("exponent bias off by one: "
             "fp16's bias is 15 (subtract 15 from the exponent field)")),
        ]  # fmt: skip
    if e == 0 and m:
        known += [
            (sign * 2.0**-15 * (m / 1024), _("a subnormal's exponent is 1 - 15 = -14 "
             "(not 0 - 15): value = m/1024 * 2^-14 = m * 2^-24")),
            (sign * 2.0**-15 * (1 + m / 1024), _("exponent bits 00000 mean subnormal: "
             "no implicit 1, value = m * 2^-24")),
            (sign * 2.0**-14 * (1 + m / 1024), _("exponent bits 00000 mean subnormal: "
             "no implicit 1, value = m * 2^-24")),
        ]  # fmt: skip
    known.append(
        (abs(_fp16_from_bits(bits)), _("bit 15 is the sign: 1 means negative"))
    )
    for value, hint in known:
        if same_float(got, value):
            return hint
    return _(
        "split the 16 bits as sign {s} | exponent {e} | mantissa {m}; {rule}"
    ).format(s=s, e=f"{e:05b}", m=f"{m:010b}", rule=rule)


def _decode_rows(decode_fp16: Callable, hidden: bool) -> list[Row]:
    rows = []
    for bits in _DECODE_HIDDEN if hidden else _DECODE_CASES:
        s, e, m = bits >> 15, (bits >> 10) & 0x1F, bits & 0x3FF
        case, expected = f"0x{bits:04X} = {s} {e:05b} {m:010b}", _fp16_from_bits(bits)
        got, shortcut = _by_hand(decode_fp16, bits)
        if shortcut:
            rows.append(_shortcut_row(case, expected, got, shortcut))
            continue
        rows.append(
            float_row(
                case,
                expected,
                got,
                same_float,
                lambda got, b=bits: _decode_hint(b, got),
            )
        )
    return rows


def check_decode_fp16(
    decode_fp16: Callable[[int], float], hidden: bool = False
) -> None:
    """Check `decode_fp16(bits) -> float`: the value of a 16-bit fp16 pattern.

    Cases cover normals, subnormals, both zeros, inf, nan and negatives; the expected
    value is torch's: the int16 pattern viewed as float16.

    Example:
        >>> check_decode_fp16(lambda bits: ...)  # e.g. 0x3C00 -> 1.0, 0x0001 -> 2**-24
    """
    grade("check_decode_fp16", decode_fp16, hidden, _decode_rows)


# torch casts a Python float to fp16 through float32, which could round a value twice:
# the ties and edges here are exact in float32, the others far from any fp16 tie.
_ROUND_CASES = (1.0, 0.1, 1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 65520.0, 1e5, 1e-5,
                2.0**-25, -3.140625)  # fmt: skip
_ROUND_HIDDEN = (2049.0, 2051.0, 65504.0, -65520.0, 2.0**-25 * 1.5, 2.0**-26,
                 -(2.0**-26), 6e-8, 0.333, 1e-4)  # fmt: skip


def _round_hint(x: float, expected: float, got: float) -> str:
    if 0 < abs(x) < 2**-14 and math.isfinite(got):
        free_step = 2.0 ** (_log2_floor(x) - 10)  # e let fall below -14
        free = math.copysign(round(abs(x) / free_step) * free_step, x)
        if same_float(got, free) or same_float(got, x):
            return _(
                "below 2^-14 fp16 is subnormal: e stops at -14, so the step stays "
                "2^-24; you rounded to a finer step, as if e kept falling"
            )
    if same_float(got, x) or same_float(
        got, float(torch.tensor(x, dtype=torch.float32))
    ):
        return _(
            "you returned x unchanged (as stored in float32); fp16 keeps only 11 "
            "significant bits"
        )
    if abs(x) >= 65504 and math.isinf(expected) and math.isfinite(got):
        return _(
            "65520 = 65504 + half a step (the step at the top is 32) is a tie that "
            "rounds to the even neighbour 65536, which overflows: inf"
        )
    if math.isinf(got) and math.isfinite(expected) and abs(x) > 65504:
        return _(
            "not every value above 65504 overflows: anything below 65520 rounds "
            "down to 65504; only >= 65520 becomes inf"
        )
    if got == 0 and expected != 0:
        return _(
            "fp16 has subnormals down to 2^-24 (5.96e-08): below 2^-14 the values "
            "keep a fixed step of 2^-24; only |x| <= 2^-25 rounds to 0"
        )
    if got == 0 and expected == 0:
        return _("the sign survives underflow: a tiny negative number becomes -0.0")
    e = max(_log2_floor(expected if expected != 0 else x), -14)
    step = 2.0 ** (e - 10)
    if abs(x) / step % 1 == 0.5 and abs(got) > abs(x):  # a tie, rounded away from 0
        return _(
            "x is exactly halfway between two fp16 numbers ({step} apart): IEEE "
            "rounds ties to the even neighbour (last mantissa bit 0), not away from 0"
        ).format(step=repr(step))
    if abs(got) < abs(x) < abs(expected) or abs(got) > abs(x) > abs(expected):
        return _(
            "you truncated (rounded toward zero) or rounded the wrong way: fp16 "
            "rounds to the NEAREST multiple of the step, here 2^{power}"
        ).format(power=e - 10)
    return _(
        "fp16(x) is the multiple of 2^(e-10) nearest to x, with e = floor(log2|x|) "
        "(e = -14 below 2^-14); here e = {e}, step = {step}"
    ).format(e=e, step=repr(step))


def _x_rows(
    cases: tuple[float, ...],
    hidden_cases: tuple[float, ...],
    oracle: Callable[[float], float],
    hint_of: Callable[[float, float, float], str],
    by_hand: bool = False,
) -> Callable[[Callable, bool], list[Row]]:
    """The row builder of an exercise f(x) -> float: one row per x, torch's
    `oracle(x)` against the student's answer, `hint_of(x, expected, got)` if wrong.
    `by_hand`: an answer that lets torch, numpy or struct do the cast fails."""

    def make_rows(student: Callable, hidden: bool) -> list[Row]:
        rows = []
        for x in hidden_cases if hidden else cases:
            expected = oracle(x)
            if by_hand:
                got, shortcut = _by_hand(student, x)
            else:
                got, shortcut = call_student(student, x), None
            if shortcut:
                case = f"x = {show_value(x)}"
                rows.append(_shortcut_row(case, expected, got, shortcut))
                continue
            hint = functools.partial(hint_of, x, expected)  # called with the answer
            rows.append(
                float_row(f"x = {show_value(x)}", expected, got, same_float, hint)
            )
        return rows

    return make_rows


def check_round_to_fp16(
    round_to_fp16: Callable[[float], float], hidden: bool = False
) -> None:
    """Check `round_to_fp16(x) -> float`: the value fp16 stores for x.

    Round to nearest, ties to even, subnormals, overflow to inf at 65520; the
    expected value is torch's cast `torch.tensor(x).to(torch.float16)`.

    Example:
        >>> check_round_to_fp16(lambda x: ...)  # e.g. 0.1 -> 0.0999755859375
    """
    rows = _x_rows(_ROUND_CASES, _ROUND_HIDDEN, _fp16, _round_hint, by_hand=True)
    grade("check_round_to_fp16", round_to_fp16, hidden, rows)


_SPACING_CASES = (1.0, 1000.0, 2048.0, 2047.9, 0.1, 1e-5, 0.0)  # 2047.9: fp16 2048
_SPACING_HIDDEN = (2047.9, 0.5, 60000.0, 6.103515625e-05, 3e-8, 1 + 2**-10, 2.0**-12)


def _fp16_spacing(x: float) -> float:
    h = torch.tensor(x, dtype=torch.float32).to(torch.float16)
    above = torch.nextafter(h, torch.tensor(math.inf, dtype=torch.float16))
    return (above.double() - h.double()).item()


def _spacing_hint(x: float, expected: float, got: float) -> str:
    h = _fp16(x)
    e = max(_log2_floor(h), -14) if h != 0 else -14
    if 0 < abs(h) < 2**-14 and got == 2.0 ** (_log2_floor(h) - 10):
        return _(
            "below 2^-14 fp16 is subnormal: the spacing stops shrinking and stays "
            "2^-24 all the way down to 0"
        )
    moved = h != 0 and x != 0 and _log2_floor(h) != _log2_floor(x)
    if moved and got == 2.0 ** (_log2_floor(x) - 10):
        return _(
            "measure the gap at fp16(x) = {h}, not at x: x is rounded to fp16 "
            "first, and here that moves it into the next binade"
        ).format(h=repr(h))
    if same_float(got, h + expected):
        return _("return the gap (next fp16 minus fp16(x)), not the next number itself")
    if x == 0:
        return _(
            "fp16(0) = 0 and the next fp16 above it is the smallest subnormal, 2^-24"
        )
    known = {
        2.0 ** (e - 23): _("that is fp32's spacing (23 mantissa bits); fp16 has 10"),
        2.0 ** (e - 7): _("that is bf16's spacing (7 mantissa bits); fp16 has 10"),
        2.0 ** (e - 9): _("off by one mantissa bit: the spacing is 2^(e - 10)"),
        2.0 ** (e - 11): _("off by one mantissa bit: the spacing is 2^(e - 10)"),
    }
    if got in known:
        return known[got]
    if got == abs(h) * 2**-10:
        return _(
            "the spacing is a power of two, 2^(floor(log2|x|) - 10); x * 2^-10 is "
            "right only when x is itself a power of two"
        )
    return _(
        "spacing = 2^(e - 10) with e = floor(log2 fp16(x)) (e = -14 for subnormals); "
        "here fp16(x) = {h}, e = {e}"
    ).format(h=repr(h), e=e)


def check_fp16_spacing(
    fp16_spacing: Callable[[float], float], hidden: bool = False
) -> None:
    """Check `fp16_spacing(x) -> float`: gap from fp16(x) to the next fp16 above it.

    For x >= 0. Expected from `torch.nextafter` in float16.

    Example:
        >>> check_fp16_spacing(lambda x: ...)  # 1.0 -> 2**-10, 2048.0 -> 2.0
    """
    rows = _x_rows(_SPACING_CASES, _SPACING_HIDDEN, _fp16_spacing, _spacing_hint)
    grade("check_fp16_spacing", fp16_spacing, hidden, rows)
