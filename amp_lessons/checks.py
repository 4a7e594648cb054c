"""Graded exercise checks: run a student's function on cases, print a table with hints.

Every notebook exercise has a solution cell where the student writes a function, and a
locked test cell that calls one `check_*` here with that function. The check calls it
on a set of cases whose expected answers come from PyTorch itself (casts,
`torch.nextafter`, `torch.amp.GradScaler`, ops run under autocast), prints one row per
case (case, expected, got, ok/FAIL) with a hint under each failing row aimed at the
likely mistake, and raises `AssertionError` when any case fails, so nbgrader scores the
cell. `hidden=True` runs a second, different set of cases: the ones between nbgrader's
`### BEGIN HIDDEN TESTS` markers. The unsolved stub (`raise NotImplementedError()`) is
reported as "not attempted" and fails too. Output goes to stdout only: nbgrader scores
a test cell that writes to stderr zero, so warnings are silenced inside each check.

Example:
    >>> def decode_fp16(bits):
    ...     raise NotImplementedError()
    >>> check_decode_fp16(decode_fp16)
    not attempted: decode_fp16() still raises NotImplementedError ...
    Traceback (most recent call last):
    AssertionError: not attempted: decode_fp16() still raises NotImplementedError ...

Not covered here: free-text answers; every exercise is a function with checkable output.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import operator
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "AMP_STEPS",
    "AUTOCAST_OPS",
    "CAUSES",
    "QUICK_CHECK",
    "SYMPTOMS",
    "check_amp_step_order",
    "check_amp_train_step",
    "check_autocast_dtypes",
    "check_choose_loss_scale",
    "check_clinic_diagnosis",
    "check_decode_fp16",
    "check_fp16_spacing",
    "check_memory_budget",
    "check_quick_check",
    "check_round_to_fp16",
    "check_underflow_fraction",
    "check_unscale",
    "check_update_rule",
    "clinic_text",
    "quick_check_text",
]

# ---------------------------------------------------------------------------------
# Shared machinery: call the student's function, print the table, pass or fail.
# ---------------------------------------------------------------------------------


@dataclass
class Row:
    """One case of a check: what was asked, what was expected and got, and a hint."""

    case: str
    expected: str
    got: str
    ok: bool
    hint: str = ""


@dataclass
class Raised:
    """What the student's function raised instead of returning a value."""

    exc: BaseException

    def __str__(self) -> str:
        return f"raised {type(self.exc).__name__}"

    @property
    def hint(self) -> str:
        return f"your function raised {type(self.exc).__name__}: {self.exc}"


class _NotAttempted(Exception):
    """The student's function is still nbgrader's `raise NotImplementedError()`."""


def _is_stub(fn: Callable, exc: BaseException) -> bool:
    # The stub raises in the student's own frame; a NotImplementedError from deeper
    # down (a torch op, another unsolved helper) is a failed case, not "not attempted".
    code = getattr(fn, "__code__", None)
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return code is None or tb is None or tb.tb_frame.f_code is code


def _call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """The student's return value, or `Raised` if it raised (the stub aborts)."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        if _is_stub(fn, exc):
            raise _NotAttempted() from None
        return Raised(exc)
    except Exception as exc:  # any bug in student code is a failed case, not a crash
        return Raised(exc)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_table(title: str, rows: Sequence[Row], hidden: bool) -> None:
    """Print one line per case and, under each failing one, its hint."""
    kind = "hidden cases" if hidden else "cases"
    print(f"{title}: {len(rows)} {kind}")
    widths = [
        min(max(len(head), *(len(getattr(r, head)) for r in rows)), cap)
        for head, cap in (("case", 30), ("expected", 24), ("got", 24))
    ]
    head = ("case", "expected", "got")
    print(
        "  "
        + "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
        + "  result"
    )
    for row in rows:
        cells = (row.case, row.expected, row.got)
        line = "  ".join(
            _cut(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)
        )
        print(f"  {line}  {'ok' if row.ok else 'FAIL'}")
        if not row.ok and row.hint:
            print(
                textwrap.fill(
                    row.hint,
                    width=88,
                    initial_indent="      hint: ",
                    subsequent_indent="            ",
                )
            )


def _grade(
    title: str,
    fn: Callable,
    hidden: bool,
    make_rows: Callable[[Callable, bool], list[Row]],
) -> None:
    """Run one check: build its rows, print the table, raise if any case failed."""
    if not callable(fn):
        raise ValueError(
            f"{title} expects the function you wrote, e.g. {title}(my_function); "
            f"got {type(fn).__name__}. Run your solution cell first."
        )
    name = getattr(fn, "__name__", "your function")
    # stdout only (nbgrader zeroes a cell that writes to stderr), and leave the
    # notebook's random state as it was
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stderr(sys.stdout),
        torch.random.fork_rng(devices=[]),
    ):
        warnings.simplefilter("ignore")
        try:
            rows = make_rows(fn, hidden)
        except _NotAttempted:
            message = (
                f"not attempted: {name}() still raises NotImplementedError; write it "
                "in its solution cell, run that cell, then run this one again"
            )
            print(message)
            raise AssertionError(message) from None
    _print_table(title, rows, hidden)
    failed = sum(not row.ok for row in rows)
    if failed:
        raise AssertionError(f"{failed} of {len(rows)} cases failed — see hints above")
    print(f"all {len(rows)} {'hidden cases' if hidden else 'cases'} passed")


def _fmt(value: Any) -> str:
    """Short, exact text for a table cell: powers of two as 2**k, floats by repr."""
    if isinstance(value, Raised):
        return str(value)
    if isinstance(value, float) and math.isfinite(value) and value != 0:
        mantissa, exponent = math.frexp(abs(value))
        if mantissa == 0.5 and not -4 <= exponent - 1 <= 11:
            return f"{'-' if value < 0 else ''}2**{exponent - 1}"
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return repr(value)


def _as_float(value: Any) -> float | None:
    """The student's answer as a float, or None if it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):  # int, float, numpy scalars
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    return None


def _same(a: float, b: float) -> bool:
    """Exactly the same float, nan equal to nan and -0.0 different from 0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _type_hint(got: Any, want: str = "a Python float") -> str:
    if isinstance(got, Raised):
        return got.hint
    return f"return {want}; got {type(got).__name__} {_cut(repr(got), 40)}"


def _float_row(
    case: str,
    expected: float,
    got: Any,
    same: Callable[[float, float], bool],
    hint_of: Callable[[float], str],
    show: Callable[[Any], str] | None = None,
) -> Row:
    """One table row for an exercise whose answer is a single float."""
    show = show or _fmt
    value = _as_float(got)
    if value is None:
        return Row(case, show(expected), _fmt(got), False, _type_hint(got))
    ok = same(value, expected)
    return Row(case, show(expected), show(value), ok, "" if ok else hint_of(value))


def _bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (so -0.0 differs from 0.0), nan matching nan."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(
        a.masked_fill(nan, 0).view(bits), b.masked_fill(nan, 0).view(bits)
    )


def _fp16(x: float) -> float:
    """torch's cast of float32(x) to fp16, as a Python float."""
    return torch.tensor(x, dtype=torch.float32).to(torch.float16).item()


def _log2_floor(x: float) -> int:
    return math.frexp(abs(x))[1] - 1


# ---------------------------------------------------------------------------------
# 01 number formats
# ---------------------------------------------------------------------------------

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
    rule = (
        "normal: (-1)^s * (1 + m/1024) * 2^(e-15); subnormal (e = 0): "
        "(-1)^s * m * 2^-24; e = 31: inf (m = 0) or nan"
    )
    if e == 31:
        if math.isfinite(got):
            return (
                "exponent bits 11111 are reserved: inf if the mantissa is 0, else nan"
            )
        return "exponent 11111 with mantissa 0 is inf; with any other mantissa, nan"
    known = []
    if 0 < e < 31:
        known += [
            (sign * 2.0 ** (e - 15) * (m / 1024), "you forgot the implicit leading 1: "
             "a normal fp16 is 1.mantissa, i.e. (1 + m/1024) * 2^(e-15)"),
            (sign * 2.0 ** (e - 127) * (1 + m / 1024), "you used fp32's bias 127; "
             "fp16 has 5 exponent bits, so its bias is 2^4 - 1 = 15"),
            (sign * 2.0 ** (e - 16) * (1 + m / 1024), "exponent bias off by one: "
             "fp16's bias is 15 (subtract 15 from the exponent field)"),
            (sign * 2.0 ** (e - 14) * (1 + m / 1024), "exponent bias off by one: "
             "fp16's bias is 15 (subtract 15 from the exponent field)"),
        ]  # fmt: skip
    if e == 0 and m:
        known += [
            (sign * 2.0**-15 * (m / 1024), "a subnormal's exponent is 1 - 15 = -14 "
             "(not 0 - 15): value = m/1024 * 2^-14 = m * 2^-24"),
            (sign * 2.0**-15 * (1 + m / 1024), "exponent bits 00000 mean subnormal: "
             "no implicit 1, value = m * 2^-24"),
            (sign * 2.0**-14 * (1 + m / 1024), "exponent bits 00000 mean subnormal: "
             "no implicit 1, value = m * 2^-24"),
        ]  # fmt: skip
    known.append((abs(_fp16_from_bits(bits)), "bit 15 is the sign: 1 means negative"))
    for value, hint in known:
        if _same(got, value):
            return hint
    return (
        f"split the 16 bits as sign {s} | exponent {e:05b} | mantissa {m:010b}; {rule}"
    )


def _decode_rows(decode_fp16: Callable, hidden: bool) -> list[Row]:
    rows = []
    for bits in _DECODE_HIDDEN if hidden else _DECODE_CASES:
        s, e, m = bits >> 15, (bits >> 10) & 0x1F, bits & 0x3FF
        rows.append(_float_row(
            f"0x{bits:04X} = {s} {e:05b} {m:010b}", _fp16_from_bits(bits),
            _call(decode_fp16, bits), _same, lambda got, b=bits: _decode_hint(b, got)))
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
    _grade("check_decode_fp16", decode_fp16, hidden, _decode_rows)


# torch casts a Python float to fp16 through float32, which could round a value twice:
# the ties and edges here are exact in float32, the others far from any fp16 tie.
_ROUND_CASES = (1.0, 0.1, 1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 65520.0, 1e5, 1e-5,
                2.0**-25, -3.140625)  # fmt: skip
_ROUND_HIDDEN = (2049.0, 2051.0, 65504.0, -65520.0, 2.0**-25 * 1.5, 2.0**-26,
                 -(2.0**-26), 6e-8, 0.333, 1e-4)  # fmt: skip


def _round_hint(x: float, expected: float, got: float) -> str:
    if _same(got, x) or _same(got, float(torch.tensor(x, dtype=torch.float32))):
        return (
            "you returned x unchanged (as stored in float32); fp16 keeps only 11 "
            "significant bits"
        )
    if abs(x) >= 65504 and math.isinf(expected) and math.isfinite(got):
        return (
            "65520 = 65504 + half a step (the step at the top is 32) is a tie that "
            "rounds to the even neighbour 65536, which overflows: inf"
        )
    if math.isinf(got) and math.isfinite(expected) and abs(x) > 65504:
        return (
            "not every value above 65504 overflows: anything below 65520 rounds "
            "down to 65504; only >= 65520 becomes inf"
        )
    if got == 0 and expected != 0:
        return (
            "fp16 has subnormals down to 2^-24 (5.96e-08): below 2^-14 the values "
            "keep a fixed step of 2^-24; only |x| <= 2^-25 rounds to 0"
        )
    if got == 0 and expected == 0:
        return "the sign survives underflow: a tiny negative number becomes -0.0"
    e = max(_log2_floor(expected if expected != 0 else x), -14)
    step = 2.0 ** (e - 10)
    if abs(x) / step % 1 == 0.5:
        return (
            f"x is exactly halfway between two fp16 numbers ({step!r} apart): IEEE "
            "rounds ties to the even neighbour (last mantissa bit 0), not away from 0"
        )
    if abs(got) < abs(x) < abs(expected) or abs(got) > abs(x) > abs(expected):
        return (
            "you truncated (rounded toward zero) or rounded the wrong way: fp16 "
            f"rounds to the NEAREST multiple of the step, here 2^{e - 10}"
        )
    return (
        f"fp16(x) is the multiple of 2^(e-10) nearest to x, with e = floor(log2|x|) "
        f"(e = -14 below 2^-14); here e = {e}, step = {step!r}"
    )


def _round_rows(round_to_fp16: Callable, hidden: bool) -> list[Row]:
    rows = []
    for x in _ROUND_HIDDEN if hidden else _ROUND_CASES:
        expected = _fp16(x)
        rows.append(_float_row(
            f"x = {_fmt(x)}", expected, _call(round_to_fp16, x), _same,
            lambda got, x=x, want=expected: _round_hint(x, want, got)))
    return rows


def check_round_to_fp16(
    round_to_fp16: Callable[[float], float], hidden: bool = False
) -> None:
    """Check `round_to_fp16(x) -> float`: the value fp16 stores for x.

    Round to nearest, ties to even, subnormals, overflow to inf at 65520; the
    expected value is torch's cast `torch.tensor(x).to(torch.float16)`.

    Example:
        >>> check_round_to_fp16(lambda x: ...)  # e.g. 0.1 -> 0.0999755859375
    """
    _grade("check_round_to_fp16", round_to_fp16, hidden, _round_rows)


_SPACING_CASES = (1.0, 1000.0, 2048.0, 0.1, 1e-5, 0.0)
_SPACING_HIDDEN = (2047.9, 0.5, 60000.0, 6.103515625e-05, 3e-8, 1 + 2**-10, 2.0**-12)


def _fp16_spacing(x: float) -> float:
    h = torch.tensor(x, dtype=torch.float32).to(torch.float16)
    above = torch.nextafter(h, torch.tensor(math.inf, dtype=torch.float16))
    return (above.double() - h.double()).item()


def _spacing_hint(x: float, expected: float, got: float) -> str:
    h = _fp16(x)
    e = max(_log2_floor(h), -14) if h != 0 else -14
    if 0 < abs(h) < 2**-14 and got == 2.0 ** (_log2_floor(h) - 10):
        return (
            "below 2^-14 fp16 is subnormal: the spacing stops shrinking and stays "
            "2^-24 all the way down to 0"
        )
    moved = h != 0 and x != 0 and _log2_floor(h) != _log2_floor(x)
    if moved and got == 2.0 ** (_log2_floor(x) - 10):
        return (
            f"measure the gap at fp16(x) = {h!r}, not at x: x is rounded to fp16 "
            "first, and here that moves it into the next binade"
        )
    if _same(got, h + expected):
        return "return the gap (next fp16 minus fp16(x)), not the next number itself"
    if x == 0:
        return "fp16(0) = 0 and the next fp16 above it is the smallest subnormal, 2^-24"
    known = {
        2.0 ** (e - 23): "that is fp32's spacing (23 mantissa bits); fp16 has 10",
        2.0 ** (e - 7): "that is bf16's spacing (7 mantissa bits); fp16 has 10",
        2.0 ** (e - 9): "off by one mantissa bit: the spacing is 2^(e - 10)",
        2.0 ** (e - 11): "off by one mantissa bit: the spacing is 2^(e - 10)",
    }
    if got in known:
        return known[got]
    if got == abs(h) * 2**-10:
        return (
            "the spacing is a power of two, 2^(floor(log2|x|) - 10); x * 2^-10 is "
            "right only when x is itself a power of two"
        )
    return (
        f"spacing = 2^(e - 10) with e = floor(log2 fp16(x)) (e = -14 for subnormals); "
        f"here fp16(x) = {h!r}, e = {e}"
    )


def _spacing_rows(fp16_spacing: Callable, hidden: bool) -> list[Row]:
    rows = []
    for x in _SPACING_HIDDEN if hidden else _SPACING_CASES:
        expected = _fp16_spacing(x)
        rows.append(_float_row(
            f"x = {_fmt(x)}", expected, _call(fp16_spacing, x), _same,
            lambda got, x=x, want=expected: _spacing_hint(x, want, got)))
    return rows


def check_fp16_spacing(
    fp16_spacing: Callable[[float], float], hidden: bool = False
) -> None:
    """Check `fp16_spacing(x) -> float`: gap from fp16(x) to the next fp16 above it.

    For x >= 0. Expected from `torch.nextafter` in float16.

    Example:
        >>> check_fp16_spacing(lambda x: ...)  # 1.0 -> 2**-10, 2048.0 -> 2.0
    """
    _grade("check_fp16_spacing", fp16_spacing, hidden, _spacing_rows)


# ---------------------------------------------------------------------------------
# 02 the underflow problem
# ---------------------------------------------------------------------------------


def _grad_sample(
    seed: int, n: int = 400, lo: float = -45, hi: float = -4
) -> torch.Tensor:
    """Gradient-like values: random signs, log2|g| uniform in [lo, hi], 10% zeros."""
    gen = torch.Generator().manual_seed(seed)
    log2 = torch.empty(n).uniform_(lo, hi, generator=gen)
    sign = torch.randint(0, 2, (n,), generator=gen) * 2 - 1
    grads = sign * torch.exp2(log2)
    return grads.masked_fill(torch.rand(n, generator=gen) < 0.1, 0.0)


_TIES = torch.tensor(
    [0.0, 2.0**-25, -1.5 * 2.0**-25, 2.0**-24, 3e-8, 1e-3, -(2.0**-30)]
)


def _underflow_cases(hidden: bool) -> list[tuple[str, torch.Tensor, float]]:
    if not hidden:
        a = _grad_sample(0)
        return [
            ("400 grads, scale 1", a, 1.0),
            ("same, scale 2**10", a, 2.0**10),
            ("same, scale 2**16", a, 2.0**16),
            ("other 400, scale 2**8", _grad_sample(1, lo=-40, hi=-2), 2.0**8),
        ]
    c = _grad_sample(2, n=300, lo=-55, hi=-10)
    return [
        ("300 tiny grads, scale 2**24", c, 2.0**24),
        ("same, scale 1000", c, 1000.0),
        ("7 hand-picked, scale 1", _TIES, 1.0),
        ("all zeros, scale 2**16", torch.zeros(5), 2.0**16),
    ]


def _underflow_fraction(grads: torch.Tensor, scale: float) -> float:
    nonzero = grads != 0
    if not nonzero.any():
        return 0.0
    cast = (grads[nonzero] * scale).to(torch.float16)
    return (cast == 0).sum().item() / nonzero.sum().item()


def _underflow_hint(
    grads: torch.Tensor, scale: float, expected: float, got: float
) -> str:
    nz = grads != 0
    n_nz = max(int(nz.sum()), 1)
    scaled = (grads * scale).abs()
    lost = (grads * scale).to(torch.float16) == 0
    known = [
        (lost.float().mean().item(), "you counted grads that were already zero: "
         "count only NONZERO grads that the fp16 cast turns into 0"),
        ((lost & nz).sum().item() / grads.numel(), "divide by the number of nonzero "
         "grads, not by all grads"),
        (_underflow_fraction(grads, 1.0), "multiply the grads by scale before "
         "casting: that is what loss scaling does"),
        ((scaled[nz] < 2**-14).sum().item() / n_nz, "values below 2^-14 (fp16's "
         "min normal) do not vanish: they become subnormals with fewer bits; only "
         "values below 2^-25 (and 2^-25 itself) round to 0"),
        ((scaled[nz] < 2**-24).sum().item() / n_nz, "values in [2^-25, 2^-24) round "
         "UP to 2^-24 (and exactly 2^-25 ties down to 0): use the real cast, "
         "(grads * scale).to(torch.float16) == 0"),
        (100 * expected, "return a fraction in [0, 1], not a percentage"),
        (1 - expected, "you returned the fraction that SURVIVED the cast"),
    ]  # fmt: skip
    for value, hint in known:
        if not math.isclose(value, expected, abs_tol=1e-6) and math.isclose(
            got, value, abs_tol=1e-6
        ):
            return hint
    if not nz.any():
        return "no grad is nonzero, so none can underflow: the fraction is 0.0"
    return (
        "fraction = (number of nonzero g with fp16(g * scale) == 0) / "
        "(number of nonzero g)"
    )


def _underflow_rows(underflow_fraction: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case, grads, scale in _underflow_cases(hidden):
        expected = _underflow_fraction(grads, scale)
        rows.append(_float_row(
            case, expected, _call(underflow_fraction, grads.clone(), scale),
            lambda a, b: math.isclose(a, b, abs_tol=1e-6),
            lambda got, g=grads, s=scale, want=expected: _underflow_hint(
                g, s, want, got),
            show=lambda v: f"{v:.4f}"))
    return rows


def check_underflow_fraction(
    underflow_fraction: Callable[[torch.Tensor, float], float], hidden: bool = False
) -> None:
    """Check `underflow_fraction(grads, scale) -> float`.

    The fraction of the NONZERO float32 `grads` that become 0 when `grads * scale`
    is cast to fp16 (0.0 if no grad is nonzero). Expected from torch's cast.

    Example:
        >>> check_underflow_fraction(lambda grads, scale: ...)
    """
    _grade("check_underflow_fraction", underflow_fraction, hidden, _underflow_rows)


def _largest_safe_scale(grads: torch.Tensor) -> float:
    for k in range(127, -150, -1):
        if torch.isfinite((grads * 2.0**k).to(torch.float16)).all():
            return 2.0**k
    raise ValueError("no power of two keeps these grads finite in fp16")


def _loss_scale_cases(hidden: bool) -> list[tuple[str, torch.Tensor]]:
    if not hidden:
        return [
            ("max |g| = 1e-3", torch.tensor([1e-3, -2e-4, 5e-7, 0.0])),
            ("max |g| = 3.0", torch.tensor([0.5, 3.0, -1e-6])),
            ("max |g| = 65504", torch.tensor([65504.0, 1.0])),
            ("max |g| = 1e5", torch.tensor([1e5, -2.0])),
            ("400 gradient-like", _grad_sample(3)),
        ]
    return [
        ("max |g| = 65510 * 2**-20", torch.tensor([0.01, 65510 * 2.0**-20, 0.03])),
        ("max |g| = 65520 * 2**-20", torch.tensor([65520 * 2.0**-20, 1e-9])),
        ("largest |g| negative", torch.tensor([2e-3, -0.9, 0.3])),
        ("max |g| = 1e-8", torch.tensor([1e-8, 3e-9, -1e-12])),
        ("300 tiny gradient-like", _grad_sample(4, n=300, lo=-45, hi=-20)),
    ]


def _loss_scale_hint(grads: torch.Tensor, expected: float, got: float) -> str:
    peak = grads.abs().max().item()
    if got <= 0 or not math.isfinite(got) or math.frexp(got)[0] != 0.5:
        return (
            "S must be a power of two (2**k): multiplying by a power of two is exact, "
            "so scaling changes no bits except the exponent"
        )
    if got == expected / 2 and 65504 < peak * expected < 65520:
        return (
            f"max|g| * S = {peak * expected!r} is above 65504 but below 65520, so "
            "fp16 rounds it DOWN to 65504: still finite. Test the cast, not <= 65504"
        )
    if got == _largest_safe_scale(grads.clamp(min=0)) and got != expected:
        return "the largest MAGNITUDE here is negative: use grads.abs().max()"
    if got > expected:
        return (
            f"too big: max|g| * S = {peak * got:.6g} overflows fp16 (from 65520 up, "
            "a cast gives inf)"
        )
    if got == expected / 2:
        return "off by one power: twice your S is still finite in fp16"
    if got < expected:
        return (
            f"too small: the largest safe S is the 2**k with max|g| * 2**k < 65520; "
            f"max|g| = {peak:.6g}"
        )
    return "S = 2**k with the largest k for which fp16(g * 2**k) is finite for all g"


def _loss_scale_rows(choose_loss_scale: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case, grads in _loss_scale_cases(hidden):
        expected = _largest_safe_scale(grads)
        rows.append(_float_row(
            case, expected, _call(choose_loss_scale, grads.clone()), operator.eq,
            lambda got, g=grads, want=expected: _loss_scale_hint(g, want, got)))
    return rows


def check_choose_loss_scale(
    choose_loss_scale: Callable[[torch.Tensor], float], hidden: bool = False
) -> None:
    """Check `choose_loss_scale(grads) -> float`: the largest safe static loss scale.

    The largest power of two S = 2**k (k may be negative) such that fp16(g * S) is
    finite for every g in `grads` (float32; not all zero). Expected by trying every
    k with torch's cast.

    Example:
        >>> check_choose_loss_scale(lambda grads: ...)  # [1e-3, ...] -> 2**25
    """
    _grade("check_choose_loss_scale", choose_loss_scale, hidden, _loss_scale_rows)


# ---------------------------------------------------------------------------------
# 03 loss scaling from scratch
# ---------------------------------------------------------------------------------

_DEFAULTS = {"growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
_UPDATE_CASES = (
    (65536.0, 0, False, {}),
    (65536.0, 1998, False, {}),
    (65536.0, 1999, False, {}),
    (65536.0, 1500, True, {}),
    (1.0, 1999, True, {}),
)
_UPDATE_HIDDEN = (
    (1024.0, 0, False, {"growth_interval": 1}),
    (
        8.0,
        2,
        False,
        {"growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 3},
    ),
    (8.0, 1, False, {"growth_interval": 3}),
    (8.0, 0, True, {"growth_factor": 4.0, "backoff_factor": 0.25}),
    (2.0**127, 1999, False, {}),
    (3.0, 7, True, {"backoff_factor": 0.3}),
)


def _torch_update(
    scale: float, tracker: int, found_inf: bool, **factors: Any
) -> tuple[float, int]:
    """(new scale, new growth tracker) from a real `torch.amp.GradScaler.update()`."""
    settings = {**_DEFAULTS, **factors}
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict({"scale": scale, "_growth_tracker": tracker, **settings})
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.0)
    scaler.scale(torch.ones(()))  # creates the scale and tracker tensors
    param.grad = torch.full((1,), math.inf if found_inf else 1.0)
    scaler.step(optimizer)  # records found_inf for update()
    scaler.update()
    return scaler.get_scale(), scaler.state_dict()["_growth_tracker"]


def _update_replica(
    scale: float,
    tracker: int,
    found_inf: bool,
    growth_factor: float,
    backoff_factor: float,
    growth_interval: int,
) -> tuple[float, int]:
    """torch's rule in plain Python (tests cross-check it with GradScaler)."""
    if found_inf:
        return _f32(scale * backoff_factor), 0
    if tracker + 1 == growth_interval:
        grown = _f32(scale * growth_factor)  # the scale is a float32 tensor
        return (grown if math.isfinite(grown) else scale), 0
    return scale, tracker + 1


def _update_hint(case: tuple, got_scale: float, got_tracker: int) -> str:
    scale, tracker, found_inf, factors = case
    settings = {**_DEFAULTS, **factors}
    gf, bf, gi = (settings[k] for k in _DEFAULTS)
    got = (_f32(got_scale), got_tracker)
    if factors and got == _update_replica(scale, tracker, found_inf, **_DEFAULTS):
        return (
            "use the growth_factor, backoff_factor and growth_interval arguments, "
            "not the default values"
        )
    if found_inf:
        if got[0] != _f32(scale * bf):
            return (
                f"an inf/nan was found: multiply the scale by backoff_factor ({bf}); "
                "never grow on an overflow step"
            )
        return "an inf/nan was found: growth_tracker goes back to 0 (the streak broke)"
    grows = tracker + 1 == gi
    if grows and math.isinf(_f32(scale * gf)):
        if got[0] == scale:
            return "even when growth is refused, the tracker restarts from 0"
        return (
            f"the scale is stored in float32: {_fmt(scale)} * {gf} is inf there, so "
            "torch keeps the old scale (it grows only when the result is finite)"
        )
    if grows and got[0] == scale:
        return (
            "torch counts this step: it grows when tracker + 1 == growth_interval "
            f"(here {tracker} + 1 == {gi})"
        )
    if not grows and got[0] != scale:
        return (
            "grew too early: growth happens only when tracker + 1 == "
            f"growth_interval (here {tracker} + 1 != {gi})"
        )
    if grows and got_tracker != 0:
        return "after growing, reset growth_tracker to 0 to count a new streak"
    if not grows and got_tracker != tracker + 1:
        return "a step without inf/nan adds 1 to growth_tracker"
    return (
        "on inf: scale *= backoff_factor, tracker = 0; otherwise tracker += 1, and "
        "when it reaches growth_interval: scale *= growth_factor, tracker = 0"
    )


def _f32(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float64).to(torch.float32))


def _update_rows(update_scale: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case in _UPDATE_HIDDEN if hidden else _UPDATE_CASES:
        scale, tracker, found_inf, factors = case
        expected = _torch_update(scale, tracker, found_inf, **factors)
        # default factors are left to the student's own defaults on purpose
        got = _call(update_scale, scale, tracker, found_inf, **factors)
        # growth_factor -> gf, backoff_factor -> bf, growth_interval -> gi
        extra = "".join(
            f" {k[0]}{k.split('_')[1][0]}={v:g}" for k, v in factors.items()
        )
        label = f"{_fmt(scale)}, {tracker}, {'inf' if found_inf else 'ok'}{extra}"
        shown = f"({_fmt(expected[0])}, {expected[1]})"
        try:
            got_scale, got_tracker = got  # exactly two values
            got_scale, got_tracker = float(got_scale), int(got_tracker)
        except (TypeError, ValueError):
            hint = _type_hint(got, "a tuple (new_scale, new_tracker)")
            rows.append(Row(label, shown, _fmt(got), False, hint))
            continue
        # the scale lives in a float32 tensor: compare in float32
        ok = _f32(got_scale) == expected[0] and got_tracker == expected[1]
        hint = "" if ok else _update_hint(case, got_scale, got_tracker)
        rows.append(
            Row(label, shown, f"({_fmt(_f32(got_scale))}, {got_tracker})", ok, hint)
        )
    return rows


def check_update_rule(
    update_scale: Callable[..., tuple[float, int]], hidden: bool = False
) -> None:
    """Check `update_scale(scale, growth_tracker, found_inf, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000) -> (new_scale, new_tracker)`.

    Expected from a real `torch.amp.GradScaler("cpu")`: its state is loaded, one step
    with (or without) an inf gradient is taken, and `update()` is called.

    Example:
        >>> check_update_rule(update_scale)  # (65536.0, 1999, False) -> (131072.0, 0)
    """
    _grade("check_update_rule", update_scale, hidden, _update_rows)


def _unscale_cases(hidden: bool) -> list[tuple[str, list[torch.Tensor], float]]:
    gen = torch.Generator().manual_seed(5)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 100

    inf, nan = math.inf, math.nan
    if not hidden:
        return [
            ("1 tensor, scale 2**16", [rand(6)], 2.0**16),
            ("2 tensors, scale 3.0", [rand(64), rand(4, 4)], 3.0),
            ("inf in 2nd, scale 1024", [rand(5), torch.tensor([1.0, inf, -3])], 1024.0),
            (
                "nan only, scale 2**16",
                [torch.tensor([2.0, nan, 7.0]), rand(3)],
                2.0**16,
            ),
        ]
    return [
        ("3 tensors, scale 1000", [rand(50), rand(7), rand(2, 3)], 1000.0),
        ("-inf, scale 7.0", [rand(30), torch.tensor([-inf, 5.0, 6.0])], 7.0),
        ("nan and inf, scale 0.1", [torch.tensor([nan, 0.5, inf]), rand(9)], 0.1),
        ("2-D, scale 3 * 2**16", [rand(8, 8)], 3.0 * 2**16),
    ]


def _torch_unscale(
    grads: list[torch.Tensor], scale: float
) -> tuple[list[torch.Tensor], bool]:
    """Grads after `GradScaler.unscale_`, and whether it found an inf/nan."""
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=10**9)
    params = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad.clone()
    optimizer = torch.optim.SGD(params, lr=0.0)
    scaler.scale(torch.ones(()))
    scaler.unscale_(optimizer)
    unscaled = [param.grad.clone() for param in params]
    scaler.step(optimizer)
    scaler.update()  # backs off exactly when unscale_ found an inf/nan
    return unscaled, scaler.get_scale() < scale


def _unscale_hint(
    grads: list[torch.Tensor], scale: float, expected: tuple, after: list, found: Any
) -> str:
    ref, ref_found = expected
    if all(_bit_equal(a, r) for a, r in zip(after, ref, strict=True)):
        # the grads are right: the found_inf answer is wrong
        nans = any(torch.isnan(g).any() for g in grads)
        if ref_found and nans and not any(torch.isinf(g).any() for g in grads):
            return "nan counts too: check with torch.isfinite (false for inf and nan)"
        if ref_found:
            return "found_inf must be True if ANY grad tensor has an inf or nan"
        return "found_inf is True only when some grad is inf or nan"
    if all(_bit_equal(a, g) for a, g in zip(after, grads, strict=True)):
        if ref_found:
            return (
                "unscale the grads in place even when an inf/nan is found: torch "
                "multiplies every grad and only skips the optimizer step"
            )
        return (
            "the grads did not change: unscale IN PLACE (g.mul_(inv_scale)); "
            "g = g * inv_scale only rebinds a local name"
        )
    if all(_bit_equal(a, g / _f32(scale)) for a, g in zip(after, grads, strict=True)):
        return (
            "you divided by scale; torch multiplies by inv_scale = 1/scale computed "
            "in float64 and rounded to float32. x / s and x * (1/s) differ in the last "
            "bit for many x when s is not a power of two"
        )
    if all(
        _bit_equal(a, (g.double() / scale).float())
        for a, g in zip(after, grads, strict=True)
    ):
        return (
            "you divided in float64: torch multiplies the float32 grads by the "
            "float32-rounded reciprocal, g.mul_(1 / scale)"
        )
    return "multiply every grad in place by inv_scale = float32(1 / scale)"


def _unscale_rows(unscale_grads: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case, grads, scale in _unscale_cases(hidden):
        ref, ref_found = _torch_unscale(grads, scale)
        mine = [g.clone() for g in grads]
        got = _call(unscale_grads, list(mine), scale)
        shown = f"found_inf={ref_found}, exact"
        if isinstance(got, Raised):
            rows.append(Row(case, shown, str(got), False, got.hint))
            continue
        same = [_bit_equal(a, r) for a, r in zip(mine, ref, strict=True)]
        differ = sum(
            int((a != r).sum())
            for a, r, s in zip(mine, ref, same, strict=True)
            if not s
        )
        ok_type = isinstance(got, bool) or (
            isinstance(got, torch.Tensor) and got.numel() == 1
        )
        found = bool(got) if ok_type else None
        ok = ok_type and found == ref_found and all(same)
        got_text = f"found_inf={found}, " + (
            "exact" if all(same) else f"{differ} differ"
        )
        if not ok_type:
            hint = _type_hint(got, "a bool (True if any inf/nan)")
        else:
            hint = (
                "" if ok else _unscale_hint(grads, scale, (ref, ref_found), mine, got)
            )
        rows.append(Row(case, shown, got_text, ok, hint))
    return rows


def check_unscale(
    unscale_grads: Callable[[list[torch.Tensor], float], bool], hidden: bool = False
) -> None:
    """Check `unscale_grads(grads, scale) -> bool`: unscale in place, report inf/nan.

    The float32 tensors in `grads` must end up bit-identical to what
    `torch.amp.GradScaler.unscale_` leaves in `param.grad`, and the result must say
    whether any value is inf or nan.

    Example:
        >>> check_unscale(unscale_grads)  # ([tensor([2., inf])], 2.0) -> True
    """
    _grade("check_unscale", unscale_grads, hidden, _unscale_rows)


# ---------------------------------------------------------------------------------
# 04 autocast
# ---------------------------------------------------------------------------------


def _autocast_inputs() -> SimpleNamespace:
    gen = torch.Generator().manual_seed(6)
    return SimpleNamespace(
        x=torch.randn(4, 4, generator=gen), w=torch.randn(4, 4, generator=gen),
        y=torch.randn(4, 4, generator=gen), t=torch.tensor([0, 1, 2, 3]),
        img=torch.randn(1, 2, 5, 5, generator=gen),
        k=torch.randn(3, 2, 3, 3, generator=gen),
    )  # fmt: skip


def _lin(t: SimpleNamespace) -> torch.Tensor:
    return F.linear(t.x, t.w)


# name -> (the op's arguments, computed under autocast; the op itself)
_AUTOCAST_TABLE: dict[str, tuple[Callable, Callable]] = {
    "matmul(x, w)": (lambda t: (t.x, t.w), torch.matmul),
    "linear(x, w)": (lambda t: (t.x, t.w), F.linear),
    "relu(x)": (lambda t: (t.x,), F.relu),
    "relu(linear(x, w))": (lambda t: (_lin(t),), F.relu),
    "linear(x, w) + x": (lambda t: (_lin(t), t.x), torch.add),
    "mse_loss(linear(x, w), linear(y, w))": (
        lambda t: (_lin(t), F.linear(t.y, t.w)),
        F.mse_loss,
    ),
    "conv2d(img, k)": (lambda t: (t.img, t.k), F.conv2d),
    "softmax(linear(x, w))": (lambda t: (_lin(t),), lambda a: F.softmax(a, dim=-1)),
    "sum(linear(x, w))": (lambda t: (_lin(t),), torch.sum),
    "cross_entropy(linear(x, w), t)": (lambda t: (_lin(t), t.t), F.cross_entropy),
    "prod(linear(x, w))": (lambda t: (_lin(t),), torch.prod),
    "layer_norm(linear(x, w))": (lambda t: (_lin(t),), lambda a: F.layer_norm(a, (4,))),
}
AUTOCAST_OPS: tuple[str, ...] = tuple(_AUTOCAST_TABLE)
"""The ops whose output dtype `predict_autocast_dtypes()` must predict, in this order.
x, w, y are float32 4x4, t int64 class indices, img and k a float32 image and kernel;
every op runs inside `torch.amp.autocast("cpu", dtype=torch.bfloat16)`."""
_AUTOCAST_HIDDEN = set(AUTOCAST_OPS[6:])
# ops CUDA's autocast runs in float32 but CPU's does not (from torch's autocast docs)
_CUDA_FP32_ONLY = {"softmax", "sum", "layer_norm", "log_softmax", "exp", "cumsum"}


def _autocast_dtypes(name: str) -> tuple[torch.dtype, str]:
    """(output dtype, why) of one op, run live under CPU autocast.

    "why" is "low" or "fp32" when autocast itself changed the op's dtype (the op is
    on one of its lists), "promote" when mixed inputs decided it, else "follow".
    """
    make_args, op = _AUTOCAST_TABLE[name]
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        args = make_args(_autocast_inputs())
        out = op(*args).dtype
    plain = op(*args).dtype  # the same inputs without autocast
    inputs = {a.dtype for a in args if a.is_floating_point()}
    if out != plain:
        return out, "low" if out == torch.bfloat16 else "fp32"
    return out, "promote" if len(inputs) > 1 else "follow"


def _autocast_hint(name: str, expected: torch.dtype, why: str, got: Any) -> str:
    if isinstance(got, str):
        return f"use dtype objects such as torch.{_fmt(expected)}, not strings"
    if got is None:
        return f"add an entry for {name!r}"
    if got == torch.float16:
        return "this is bf16 autocast: its lower precision is torch.bfloat16"
    op = name.split("(")[0]
    if why == "low":
        return (
            "autocast casts its float32 inputs down and runs it in bfloat16: "
            "matmul-like ops (matmul, linear, conv, bmm) are on its lower-precision "
            "list"
        )
    if why == "fp32":
        return (
            "autocast casts its bfloat16 input UP and runs it in float32: losses and "
            "a few precision-hungry reductions (prod, cdist) are on its float32 list"
        )
    if why == "promote":
        return (
            "its inputs are bfloat16 and float32; an op on neither autocast list "
            "follows type promotion, and bfloat16 + float32 gives float32"
        )
    note = ""
    if op in _CUDA_FP32_ONLY:
        note = (
            " (CUDA's autocast would run it in float32: the CPU and CUDA lists "
            "differ, which is why lesson 04 reads them from the running torch)"
        )
    return (
        f"{op} is on neither of CPU autocast's lists: it runs in the dtype of its "
        f"input, here {_fmt(expected)}{note}"
    )


def _autocast_rows(predict_autocast_dtypes: Callable, hidden: bool) -> list[Row]:
    got = _call(predict_autocast_dtypes)
    if not isinstance(got, dict):
        hint = _type_hint(got, "a dict {op name: torch dtype}")
        return [Row("returns a dict", "dict", _cut(repr(got), 22), False, hint)]
    rows = []
    if not hidden:
        bad = [n for n in AUTOCAST_OPS if not isinstance(got.get(n), torch.dtype)]
        hint = "give a torch.dtype for every name in AUTOCAST_OPS; missing or not a "
        hint += "dtype: " + ", ".join(bad)
        rows.append(
            Row(
                f"all {len(AUTOCAST_OPS)} ops answered",
                "yes",
                "yes" if not bad else f"{len(bad)} missing",
                not bad,
                hint,
            )
        )
    for name in AUTOCAST_OPS:
        if (name in _AUTOCAST_HIDDEN) != hidden:
            continue
        expected, why = _autocast_dtypes(name)
        answer = got.get(name)
        ok = answer == expected
        hint = "" if ok else _autocast_hint(name, expected, why, answer)
        shown = "missing" if answer is None else _fmt(answer)
        rows.append(Row(name, _fmt(expected), shown, ok, hint))
    return rows


def check_autocast_dtypes(
    predict_autocast_dtypes: Callable[[], dict[str, torch.dtype]], hidden: bool = False
) -> None:
    """Check `predict_autocast_dtypes() -> {op name: dtype}` for AUTOCAST_OPS.

    Each op runs live on tiny float32 CPU tensors inside
    `torch.amp.autocast("cpu", dtype=torch.bfloat16)`, so the expected dtypes are
    those of the installed torch. The visible cases grade the first six ops; the
    hidden cases the other six.

    Example:
        >>> check_autocast_dtypes(lambda: {"matmul(x, w)": torch.bfloat16, ...})
    """
    _grade("check_autocast_dtypes", predict_autocast_dtypes, hidden, _autocast_rows)


# ---------------------------------------------------------------------------------
# 05 the full AMP loop
# ---------------------------------------------------------------------------------

_ZERO, _FWD, _BWD = (
    "zero_grad",
    "forward under autocast",
    "scaler.scale(loss).backward()",
)
_UNSCALE, _CLIP = "scaler.unscale_(optimizer)", "clip_grad_norm_"
_STEP, _UPDATE = "scaler.step(optimizer)", "scaler.update()"
AMP_STEPS: tuple[str, ...] = (_UPDATE, _CLIP, _FWD, _STEP, _ZERO, _BWD, _UNSCALE)
"""The vocabulary `amp_step_order()` must put in order (shown here shuffled)."""
_REFERENCE_ORDER = (_ZERO, _FWD, _BWD, _UNSCALE, _CLIP, _STEP, _UPDATE)
_SHORT = dict(
    zip(
        _REFERENCE_ORDER,
        ("zero_grad", "forward", "backward", "unscale_", "clip", "step", "update"),
        strict=True,
    )
)


def _live_error(action: Callable[[torch.amp.GradScaler, Any], None]) -> str:
    """The message torch raises for a misuse, reproduced on a one-parameter model."""
    param = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale((param * 2).sum()).backward()
    try:
        action(scaler, optimizer)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _order_rules() -> list[tuple[str, str, str]]:
    """(first, then, why) pairs that any correct AMP loop satisfies."""
    update_first = _live_error(lambda s, o: s.update())
    unscale_late = _live_error(lambda s, o: (s.step(o), s.unscale_(o)))
    return [
        (_FWD, _BWD, "backward needs the loss that the forward pass computes"),
        (_BWD, _UNSCALE, "unscale_ divides the gradients that backward just made; "
         "before backward there is nothing (or last step's grads) to unscale"),
        (_UNSCALE, _CLIP, "clip_grad_norm_ before unscale_ clips the SCALED grads: "
         "their norm is ~scale times too big, so clipping shrinks the real grads to "
         "almost nothing"),
        (_CLIP, _STEP, "clipping after the step changes nothing: the optimizer "
         "already used the unclipped grads"),
        (_UNSCALE, _STEP, f"unscale_ after step fails: {unscale_late}"),
        (_STEP, _UPDATE, f"update() needs the inf checks that step records; called "
         f"first it fails: {update_first}"),
    ]  # fmt: skip


def _order_rows(amp_step_order: Callable, hidden: bool) -> list[Row]:
    got = _call(amp_step_order)
    if isinstance(got, Raised) or not isinstance(got, list | tuple):
        hint = _type_hint(got, "a list of the names in AMP_STEPS")
        return [Row("returns a list", "list", _cut(repr(got), 22), False, hint)]
    order = list(got)
    unknown = [s for s in order if s not in AMP_STEPS]
    missing = [s for s in AMP_STEPS if s not in order]
    twice = sorted({s for s in order if order.count(s) > 1})
    complete = not (unknown or missing or twice)
    hint = "; ".join(
        f"{what}: {', '.join(map(repr, items))}"
        for what, items in (
            ("not in AMP_STEPS", unknown),
            ("missing", missing),
            ("more than once", twice),
        )
        if items
    )
    rows = [
        Row(
            "each of the 7 steps once",
            "yes",
            "yes" if complete else "no",
            complete,
            hint,
        )
    ]
    if hidden:
        return rows + _order_run_rows(order if complete else None)
    for first, then, why in _order_rules():
        where = "before"
        if first not in order or then not in order:
            where = "missing"
        elif order.index(first) > order.index(then):
            where = "after"
        label = f"{_SHORT[first]} before {_SHORT[then]}"
        rows.append(Row(label, "before", where, where == "before", why))
    ok = _ZERO in order and not (
        _BWD in order
        and _STEP in order
        and order.index(_BWD) < order.index(_ZERO) < order.index(_STEP)
    )
    where = "missing" if _ZERO not in order else f"position {order.index(_ZERO) + 1}"
    rows.append(
        Row(
            "zero_grad not in bwd..step",
            "1 or 7",
            where,
            ok,
            "zero_grad between backward and step wipes the grads you just "
            "computed. Put it first (the seed's loop) or last with "
            "set_to_none=True (nanoGPT's): both are fine",
        )
    )
    return rows


def _order_run(order: Sequence[str], overflow: bool) -> Any:
    """Run an order of AMP_STEPS for 3 iterations on a tiny model; return its state."""
    torch.manual_seed(7)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2)
    gen = torch.Generator().manual_seed(8)
    state: dict[str, Any] = {"loss": None}

    def forward(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.amp.autocast("cpu", dtype=torch.float16):
            state["loss"] = F.mse_loss(model(x), y)

    def backward() -> None:
        if state["loss"] is None:
            raise RuntimeError("backward before any forward: there is no loss yet")
        scaler.scale(state["loss"]).backward()

    for i in range(3):
        x = torch.randn(8, 4, generator=gen)
        y = torch.randn(8, 2, generator=gen) * (1e6 if overflow and i == 1 else 1)
        actions = {
            _ZERO: lambda: optimizer.zero_grad(set_to_none=True),
            _FWD: lambda x=x, y=y: forward(x, y),
            _BWD: backward,
            _UNSCALE: lambda: scaler.unscale_(optimizer),
            _CLIP: lambda: nn.utils.clip_grad_norm_(model.parameters(), 0.05),
            _STEP: lambda: scaler.step(optimizer),
            _UPDATE: scaler.update,
        }
        for name in order:
            actions[name]()
    return [p.detach().clone() for p in model.parameters()] + [scaler.get_scale()]


def _order_run_rows(order: list[str] | None) -> list[Row]:
    rows = []
    for case, overflow in (
        ("your order run 3 iterations", False),
        ("same, overflow at iteration 2", True),
    ):
        expected = _order_run(_REFERENCE_ORDER, overflow)
        if order is None:
            rows.append(
                Row(
                    case, "same params", "not run", False, "fix the list of steps first"
                )
            )
            continue
        try:
            got = _order_run(order, overflow)
        except Exception as exc:
            rows.append(
                Row(
                    case,
                    "same params",
                    f"raised {type(exc).__name__}",
                    False,
                    f"running your order raised: {exc}",
                )
            )
            continue
        ok = all(_bit_equal(a, b) for a, b in zip(got[:-1], expected[:-1], strict=True))
        ok = ok and got[-1] == expected[-1]
        rows.append(
            Row(
                case,
                "same params",
                "same params" if ok else "differ",
                ok,
                "your order trains the model differently from scale -> "
                "backward -> unscale_ -> clip -> step -> update",
            )
        )
    return rows


def check_amp_step_order(
    amp_step_order: Callable[[], list[str]], hidden: bool = False
) -> None:
    """Check `amp_step_order() -> list[str]`: the names of AMP_STEPS in loop order.

    Visible cases check each ordering rule (with the real error torch raises when it
    is broken); hidden cases run the student's order on a tiny fp16-autocast model
    with clipping, and with an overflow, and compare the parameters bit for bit with
    the reference loop. zero_grad may come first or last.

    Example:
        >>> check_amp_step_order(lambda: ["zero_grad", "forward under autocast", ...])
    """
    _grade("check_amp_step_order", amp_step_order, hidden, _order_rows)


@dataclass(frozen=True)
class _StepCase:
    name: str
    layers: tuple[int, ...]
    optimizer: str
    init_scale: float
    growth_interval: int
    steps: tuple[tuple[float, float], ...]  # (target size, max_norm) per step


_TRAIN_CASES = (
    _StepCase("1 step, clipping active", (4, 8, 2), "sgd", 2.0**10, 2000,
              ((1.0, 0.05),)),
    _StepCase("1 step, overflow (scale 2**40)", (4, 8, 2), "sgd", 2.0**40, 2000,
              ((1.0, 1.0),)),
    _StepCase("3 steps, growth_interval 2", (4, 8, 2), "sgd", 2.0**10, 2,
              ((1.0, 10.0), (1.0, 10.0), (1.0, 10.0))),
)  # fmt: skip
_TRAIN_HIDDEN = (
    _StepCase("Adam, overflow at step 2 of 3", (3, 6, 6, 2), "adam", 2.0**16, 2000,
              ((1.0, 0.5), (1e6, 0.5), (1.0, 0.5))),
    _StepCase("momentum, 2 steps, no clipping", (5, 4, 3), "momentum", 2.0**16, 1,
              ((1.0, 1e9), (2.0, 1e9))),
    _StepCase("tight clip 1e-3, scale 2**20", (4, 8, 2), "sgd", 2.0**20, 2000,
              ((1.0, 1e-3), (1.0, 1e-3))),
)  # fmt: skip


def _reference_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def _wrong_step(mistake: str) -> Callable:
    """The reference step with one known mistake, to recognise it in a student's run."""

    def step(model, optimizer, scaler, x, y, max_norm):
        if mistake != "no_zero_grad":
            optimizer.zero_grad(set_to_none=True)
        with torch.amp.autocast(
            "cpu", dtype=torch.float16, enabled=mistake != "no_autocast"
        ):
            loss = F.mse_loss(model(x), y)
        if mistake == "unscaled_backward":
            scaler.scale(loss)  # scaled, but the result is thrown away
            loss.backward()
        else:
            scaler.scale(loss).backward()
        if mistake != "no_unscale":
            scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if mistake == "optimizer_step":
            optimizer.step()
        else:
            scaler.step(optimizer)
        if mistake != "no_update":
            scaler.update()
        return scaler.scale(loss).item() if mistake == "scaled_loss" else loss.item()

    return step


_TRAIN_MISTAKES = {
    "no_unscale": "clip_grad_norm_ ran on the SCALED grads: call "
    "scaler.unscale_(optimizer) right before clipping",
    "optimizer_step": "optimizer.step() ran on inf/nan grads: call "
    "scaler.step(optimizer), which skips the step when an inf/nan was found",
    "no_update": "the scale never changed: call scaler.update() at the end of the step",
    "unscaled_backward": "call backward on the SCALED loss, "
    "scaler.scale(loss).backward(); unscale_ then divides unscaled grads by the scale",
    "no_autocast": "run the forward pass (model and loss) inside "
    "torch.amp.autocast(x.device.type, dtype=torch.float16)",
    "no_zero_grad": "grads accumulated across steps: call "
    "optimizer.zero_grad(set_to_none=True) each step",
    "scaled_loss": "return the loss itself (loss.item()), not the scaled loss",
}
_TRAIN_ERRORS = {
    "has already been called on this optimizer since the last update": "unscale_ "
    "ran twice before update(): call scaler.update() once at the end of every step",
    "is being called after step": "the previous step's scaler.step() was never "
    "followed by scaler.update(): call it at the end of every step (and unscale_ "
    "before step)",
    "No inf checks were recorded": "call scaler.step(optimizer) before scaler.update()",
    "_scale is None": "call backward on the SCALED loss, "
    "scaler.scale(loss).backward(); the scaler is set up by its first scale() call",
    "Attempting to unscale FP16 gradients": "keep the model in float32 (no "
    "model.half()): autocast makes the fp16 copies",
}


def _make_optimizer(kind: str, model: nn.Module) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-2)
    momentum = 0.9 if kind == "momentum" else 0.0
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)


def _run_train_case(amp_train_step: Callable, case: _StepCase) -> Any:
    """(params, scale, tracker, losses) after running the steps, or Raised."""
    torch.manual_seed(9)
    layers: list[nn.Module] = []
    for n_in, n_out in zip(case.layers, case.layers[1:], strict=False):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    optimizer = _make_optimizer(case.optimizer, model)
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=case.init_scale, growth_interval=case.growth_interval
    )
    gen = torch.Generator().manual_seed(10)
    losses = []
    for size, max_norm in case.steps:
        x = torch.randn(8, case.layers[0], generator=gen)
        y = torch.randn(8, case.layers[-1], generator=gen) * size
        got = _call(amp_train_step, model, optimizer, scaler, x, y, max_norm)
        if isinstance(got, Raised):
            return got
        losses.append(_as_float(got))
    params = [p.detach().clone() for p in model.parameters()]
    return params, scaler.get_scale(), scaler.state_dict()["_growth_tracker"], losses


def _same_run(a: Any, b: Any) -> bool:
    if isinstance(a, Raised) or isinstance(b, Raised):
        return False
    (pa, sa, ta, la), (pb, sb, tb, lb) = a, b
    same_loss = len(la) == len(lb) and all(
        x is not None
        and y is not None
        and (math.isclose(x, y, rel_tol=1e-6) or (math.isnan(x) and math.isnan(y)))
        for x, y in zip(la, lb, strict=True)
    )
    params = len(pa) == len(pb) and all(
        _bit_equal(x, y) for x, y in zip(pa, pb, strict=True)
    )
    return params and sa == sb and ta == tb and same_loss


def _train_hint(case: _StepCase, got: Any) -> str:
    if isinstance(got, Raised):
        for fragment, hint in _TRAIN_ERRORS.items():
            if fragment in str(got.exc):
                return f"{got.hint.rstrip('.')}. {hint[0].upper()}{hint[1:]}"
        return got.hint
    if any(loss is None for loss in got[3]):
        return "return the loss as a Python float: loss.item()"
    for mistake, hint in _TRAIN_MISTAKES.items():
        if _same_run(got, _run_train_case(_wrong_step(mistake), case)):
            return hint
    return (
        "the reference order: zero_grad, forward + mse_loss under autocast (fp16), "
        "scaler.scale(loss).backward(), scaler.unscale_(optimizer), "
        "clip_grad_norm_(model.parameters(), max_norm), scaler.step(optimizer), "
        "scaler.update(); return loss.item()"
    )


def _describe_run(run: Any) -> str:
    if isinstance(run, Raised):
        return str(run)
    loss = run[3][-1]
    return f"scale {_fmt(run[1])}" + (f", loss {loss:.3g}" if loss is not None else "")


def _train_rows(amp_train_step: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case in _TRAIN_HIDDEN if hidden else _TRAIN_CASES:
        expected = _run_train_case(_reference_step, case)
        got = _run_train_case(amp_train_step, case)
        ok = _same_run(got, expected)
        if not ok and not isinstance(got, Raised) and got[1:] == expected[1:]:
            shown = "params differ"
        else:
            shown = _describe_run(got)
        hint = "" if ok else _train_hint(case, got)
        rows.append(Row(case.name, _describe_run(expected), shown, ok, hint))
    return rows


def check_amp_train_step(
    amp_train_step: Callable[..., float], hidden: bool = False
) -> None:
    """Check `amp_train_step(model, optimizer, scaler, x, y, max_norm) -> float`.

    One full AMP step with clipping: mse_loss under fp16 autocast, scaled backward,
    unscale_, clip_grad_norm_, step, update; it returns the (unscaled) loss. The
    reference runs on an identical tiny model with a real
    `torch.amp.GradScaler("cpu")`; parameters must match bit for bit, and the scale,
    growth tracker and losses too, including cases with an overflow.

    Example:
        >>> check_amp_train_step(amp_train_step)
    """
    _grade("check_amp_train_step", amp_train_step, hidden, _train_rows)


# ---------------------------------------------------------------------------------
# 06 speed and memory
# ---------------------------------------------------------------------------------

_BUDGET_PARTS = ("weights", "grads", "adam_state")


def _measure_budget(n_params: int, amp: bool) -> dict[str, int]:
    """Bytes kept by a real n-parameter model after one Adam step, fp32 or AMP."""
    model = nn.Linear(n_params, 1, bias=False)
    optimizer = torch.optim.Adam(model.parameters())
    # scale 1: the default 65536 would overflow this one-sample fp16 backward
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0, enabled=amp)
    with torch.amp.autocast("cpu", dtype=torch.float16, enabled=amp):
        loss = model(torch.ones(1, n_params)).float().sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    params = list(model.parameters())
    states = [optimizer.state[p] for p in params]
    return {
        "weights": sum(p.nbytes for p in params),
        "grads": sum(p.grad.nbytes for p in params),
        # the moments; Adam's 4-byte step counter per tensor is left out
        "adam_state": sum(
            s[k].nbytes for s in states for k in ("exp_avg", "exp_avg_sq")
        ),
    }


def _memory_budget(n_params: int) -> dict[str, dict[str, int]]:
    built = min(n_params, 4096)  # bytes grow exactly linearly: build small, scale
    budget = {}
    for regime in ("fp32", "amp"):
        measured = _measure_budget(built, amp=regime == "amp")
        budget[regime] = {k: v * n_params // built for k, v in measured.items()}
    return budget


def _memory_hint(n: int, regime: str, part: str, expected: int, got: Any) -> str:
    if not isinstance(got, int | float) or isinstance(got, bool):
        return _type_hint(got, "an int number of bytes")
    if got == expected * 8:
        return "count bytes, not bits (a float32 is 4 bytes)"
    if regime == "amp" and got * 2 == expected:
        return {
            "weights": "AMP keeps fp32 master weights: autocast makes fp16 copies "
            "on the fly for the forward, the stored weights stay float32",
            "grads": "param.grad has the parameter's dtype: the weights are float32, "
            "so their grads are float32 too, even with AMP",
            "adam_state": "Adam's moments live next to the float32 master weights: "
            "still float32 with AMP",
        }[part]
    if regime == "amp" and part == "weights" and got == expected * 3 // 2:
        return (
            "autocast's fp16 weight copies last only for the forward pass (the "
            "cache is cleared when autocast exits): not kept after the step"
        )
    if part == "adam_state" and got * 2 == expected:
        return "Adam keeps TWO moments per parameter (exp_avg and exp_avg_sq)"
    if part == "adam_state" and got == expected * 3 // 2:
        return "adam_state is the two moments only: do not count the weights again"
    return f"{part}: {n:_} parameters x bytes per value x values per parameter"


def _memory_rows(memory_budget: Callable, hidden: bool) -> list[Row]:
    rows = []
    for n in (1, 124_439_808, 7_000_000_000) if hidden else (1000, 1_000_000):
        expected = _memory_budget(n)
        got = _call(memory_budget, n)
        for regime in ("fp32", "amp"):
            for part in _BUDGET_PARTS:
                want = expected[regime][part]
                try:
                    answer = got[regime][part]
                except Exception:
                    answer = got if isinstance(got, Raised) else None
                ok = isinstance(answer, int | float) and not isinstance(answer, bool)
                ok = ok and answer == want
                if isinstance(answer, int | float) and math.isfinite(answer):
                    shown = f"{int(answer):_}"
                else:
                    shown = _cut(str(answer), 22)
                hint = ""
                if answer is None:
                    hint = "return {'fp32': {...}, 'amp': {...}}, each with keys "
                    hint += ", ".join(_BUDGET_PARTS)
                elif not ok:
                    hint = _memory_hint(n, regime, part, want, answer)
                rows.append(
                    Row(
                        f"n={n:_} {regime} {part.removesuffix('_state')}",
                        f"{want:_}",
                        shown,
                        ok,
                        hint,
                    )
                )
    return rows


def check_memory_budget(
    memory_budget: Callable[[int], dict[str, dict[str, int]]], hidden: bool = False
) -> None:
    """Check `memory_budget(n_params) -> {"fp32": {...}, "amp": {...}}` in bytes.

    Each inner dict has "weights", "grads" and "adam_state" (Adam's two moments) for
    plain fp32 training and for AMP with fp32 master weights. Expected by training a
    real model (one Adam step, fp32 and fp16 autocast + GradScaler) and summing the
    `nbytes` of its tensors; large n is built small and scaled, bytes being linear.

    Example:
        >>> check_memory_budget(memory_budget)  # 1000 -> weights 4000 in both
    """
    _grade("check_memory_budget", memory_budget, hidden, _memory_rows)


# ---------------------------------------------------------------------------------
# 07 AMP clinic
# ---------------------------------------------------------------------------------

CAUSES: dict[str, str] = {
    "fp16_overflow": "an activation or the loss exceeds fp16's max 65504 in the "
    "forward pass",
    "nan_in_forward": "the forward pass itself makes nan or inf (bad data, log(0), "
    "0/0), whatever the precision",
    "no_loss_scaling": "small gradients underflow to zero in fp16 because the loss "
    "is not scaled",
    "clip_before_unscale": "gradients are clipped while they are still multiplied "
    "by the scale",
    "missing_update": "scaler.update() is not called at the end of each iteration",
    "model_half_with_scaler": "the model was converted with model.half(), so its "
    "grads are fp16, which GradScaler refuses to unscale",
    "use_bce_with_logits": "BCELoss after a sigmoid under CUDA autocast; "
    "BCEWithLogitsLoss is the autocast-safe form",
    "no_tensor_cores": "the hardware has no fast fp16/bf16 matrix units (a CPU, or a "
    "GPU older than Volta)",
    "weight_copies_small_batch": "autocast caches low-precision copies of the weights "
    "next to the fp32 ones, and small activations cannot pay for them",
    "scaler_with_bf16": "a GradScaler used with bf16, which has fp32's range and needs "
    "no loss scaling",
}
"""Cause keys `diagnose(symptom)` may return, with what each one means."""

_DIAGNOSES: tuple[tuple[str, str, str], ...] = (
    ("The loss is inf or NaN from the very first fp16 step; the same model trains "
     "fine in fp32 and in bf16.", "fp16_overflow",
     "fine in fp32 AND in bf16 (which has fp32's range but less precision): the "
     "problem is range, in the forward pass"),
    ("ValueError: Attempting to unscale FP16 gradients.", "model_half_with_scaler",
     "the gradients themselves are fp16: where do fp16 grads come from, when "
     "autocast keeps the weights fp32?"),
    ("After adding clip_grad_norm_(model.parameters(), 1.0) the model barely "
     "learns, and the norm it returns is about 65536 times the fp32 one.",
     "clip_before_unscale", "65536 is the default initial scale: the norm was "
     "measured on scaled grads"),
    ("With AMP on a laptop CPU every training step is slower than in fp32.",
     "no_tensor_cores", "AMP's speed comes from hardware matrix units for 16-bit "
     "floats; a CPU without them computes fp16/bf16 matmuls slowly"),
    ("In a loop that clips after scaler.unscale_(optimizer), the second iteration "
     "stops with RuntimeError: unscale_() is being called after step().",
     "missing_update", "it fires on the SECOND iteration: the first one's step() "
     "was never closed by the call that resets the per-step state"),
    ("scaler.get_scale() halves on every step (65536, 32768, ... 1e-20) and no "
     "step is ever taken; with AMP switched off the loss is NaN as well.",
     "nan_in_forward", "NaN without AMP too: no scale can fix a NaN the forward "
     "pass makes itself"),
    ("Pure fp16 training (model.half(), no scaler): the loss plateaus early and "
     "many gradients are exactly 0.", "no_loss_scaling", "gradients exactly 0 in "
     "fp16: they fell below 2^-24"),
    ("RuntimeError: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss "
     "are unsafe to autocast.", "use_bce_with_logits", "torch itself names the "
     "safe alternative in the rest of this message"),
    ("With AMP, the peak memory of a large MLP trained with a small batch went UP.",
     "weight_copies_small_batch", "weight-heavy model, small activations: what "
     "does autocast add next to the fp32 weights?"),
    ("With bfloat16 autocast and a GradScaler, no step is ever skipped and the "
     "scale only grows.", "scaler_with_bf16", "bf16 has 8 exponent bits like fp32: "
     "its gradients neither underflow nor overflow"),
)  # fmt: skip
SYMPTOMS: tuple[str, ...] = tuple(symptom for symptom, _, _ in _DIAGNOSES)
"""What a student sees; `diagnose(symptom)` returns the matching key of CAUSES."""


def clinic_text() -> str:
    """The numbered symptoms and the cause keys as text, ready to print.

    Example:
        >>> print(clinic_text().splitlines()[1])
        #1  The loss is inf or NaN from the very first fp16 step; the same model ...
    """
    lines = ["Symptoms:"]
    for i, symptom in enumerate(SYMPTOMS, start=1):
        lines.append(textwrap.fill(f"#{i:<3}{symptom}", 88, subsequent_indent=" " * 4))
    lines += ["", "Causes:"]
    for key, meaning in CAUSES.items():
        lines.append(
            textwrap.fill(f"{key:26} {meaning}", 88, subsequent_indent=" " * 27)
        )
    return "\n".join(lines)


def _clinic_rows(diagnose: Callable, hidden: bool) -> list[Row]:
    answers = {symptom: _call(diagnose, symptom) for symptom in SYMPTOMS}
    rows = []
    if not hidden:
        bad = [s for s, a in answers.items() if a not in CAUSES]
        hint = "return one of the keys of CAUSES for every symptom in SYMPTOMS; "
        hint += "not a key: " + "; ".join(
            f"#{SYMPTOMS.index(s) + 1} -> {_cut(str(answers[s]), 30)!r}" for s in bad
        )
        rows.append(
            Row(
                f"all {len(SYMPTOMS)} symptoms answered",
                "keys of CAUSES",
                "yes" if not bad else f"{len(bad)} not keys",
                not bad,
                hint,
            )
        )
    chosen = _DIAGNOSES[5:] if hidden else _DIAGNOSES[:5]
    first = 6 if hidden else 1
    for number, (symptom, cause, clue) in enumerate(chosen, start=first):
        got = answers[symptom]
        ok = got == cause
        if isinstance(got, Raised):
            hint = got.hint
        elif got not in CAUSES:
            hint = f"{got!r} is not a key of CAUSES. Clue: {clue}"
        else:
            hint = f"not {got!r}. Clue: {clue}"
        shown = _cut(str(got), 24)
        rows.append(Row(f"#{number} {symptom}", cause, shown, ok, "" if ok else hint))
    return rows


def check_clinic_diagnosis(
    diagnose: Callable[[str], str], hidden: bool = False
) -> None:
    """Check `diagnose(symptom) -> str`: the CAUSES key behind each of SYMPTOMS.

    Visible cases grade the first five symptoms (and that every symptom gets a valid
    key); hidden cases the other five.

    Example:
        >>> check_clinic_diagnosis(lambda symptom: "fp16_overflow")
    """
    _grade("check_clinic_diagnosis", diagnose, hidden, _clinic_rows)


# ---------------------------------------------------------------------------------
# 08 quick check (the seed lesson's "Comprobación rápida")
# ---------------------------------------------------------------------------------

# question id -> (question, {letter: (choice, why it is wrong or "" if right)})
_QUIZ: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "autocast_scope": ("What should `with torch.amp.autocast(device_type):` wrap?", {
        "a": ("The whole step: forward, backward and optimizer.step()",
              "backward already runs each op in the dtype autocast chose for it in "
              "the forward; the docs advise against wrapping backward"),
        "b": ("Only the forward pass, including the loss", ""),
        "c": ("Only the backward pass", "autocast chooses dtypes as ops are "
              "recorded in the forward; backward just follows them"),
        "d": ("Only optimizer.step()", "the optimizer updates the fp32 master "
              "weights; it has no matmuls to speed up"),
    }),
    "why_scale": ("Why does GradScaler multiply the loss by a large factor before "
                  "backward?", {
        "a": ("To prevent overflow in fp16", "scaling makes values BIGGER, so it "
              "risks overflow; GradScaler handles that by skipping and backing off"),
        "b": ("To make training converge in fewer steps", "the scale is removed "
              "before the optimizer step: the update is the same, only saved"),
        "c": ("So small gradients do not underflow to zero in fp16", ""),
        "d": ("To save memory", "the scaled grads take exactly as many bytes"),
    }),
    "step_with_inf": ("What does scaler.step(optimizer) do when the gradients "
                      "contain inf or NaN?", {
        "a": ("It raises an error", "an overflow is expected now and then; it is "
              "handled silently"),
        "b": ("It replaces the infs with zeros and steps", "nothing is replaced; "
              "the grads are unscaled in place as they are"),
        "c": ("It clips the gradients and steps", "clipping an inf still gives "
              "nan; GradScaler does not clip"),
        "d": ("It skips optimizer.step() for this iteration", ""),
    }),
    "update_after_overflow": ("After a step whose gradients had inf/NaN, what does "
                              "scaler.update() do (default settings)?", {
        "a": ("Multiplies the scale by 0.5 and restarts the growth count", ""),
        "b": ("Leaves the scale as it is", "then the next step would overflow "
              "again"),
        "c": ("Doubles the scale", "growth happens after 2000 steps WITHOUT "
              "overflow"),
        "d": ("Resets the scale to 65536", "it backs off from the current scale; "
              "it does not reset it"),
    }),
    "memory_saving": ("The seed promises '~2x less memory'. What is true?", {
        "a": ("Every tensor of training halves", "weights, grads and Adam state "
              "stay fp32 with AMP (lesson 06 measures it)"),
        "b": ("Activations kept for backward roughly halve; weights, grads and Adam "
              "state stay fp32, so the total saving is often far below 2x, and "
              "with small batches memory can even grow", ""),
        "c": ("Memory halves only on CPU", "no device halves everything; on CPU "
              "it is no different"),
        "d": ("Weights halve but activations do not", "the other way round: the "
              "master weights stay fp32; saved activations are fp16"),
    }),
    "bf16_scaler": ("Training with bf16 autocast: do you need a GradScaler?", {
        "a": ("Yes, always", "bf16 has fp32's 8 exponent bits, so gradients do "
              "not underflow"),
        "b": ("Yes, with a larger init_scale", "there is nothing to scale away "
              "from: bf16's range is fp32's"),
        "c": ("No: bf16 has fp32's exponent range, so gradients do not underflow",
              ""),
        "d": ("No, because bf16 has more mantissa bits than fp16", "it has fewer "
              "(7 vs 10); its advantage is range, not precision"),
    }),
    "backward_call": ("Which call belongs in the AMP loop?", {
        "a": ("scaler.scale(loss).backward()", ""),
        "b": ("loss.backward(), then scaler.scale(loss)", "then the grads were "
              "computed unscaled: small ones already underflowed"),
        "c": ("Both loss.backward() and scaler.scale(loss).backward()", "the grads "
              "would add up, scaled and unscaled; call backward once, on the "
              "scaled loss"),
        "d": ("scaler.backward(loss)", "GradScaler has no backward method"),
    }),
    "where_fastest": ("Where does AMP speed training up the most?", {
        "a": ("On any modern CPU", "most CPUs run fp16/bf16 matmuls SLOWER than "
              "fp32 (lesson 06 measures it)"),
        "b": ("On older GPUs without tensor cores", "there fp16 math is barely "
              "faster; the gain is mostly memory bandwidth"),
        "c": ("Equally on every device", "the speed-up comes from special "
              "hardware: it depends on the device"),
        "d": ("On GPUs with tensor cores (Volta and later: V100, A100, H100)", ""),
    }),
    "deprecated_api": ("The seed imports autocast and GradScaler from the old "
                       "CUDA-only amp submodule of torch.cuda (notebook 05 shows "
                       "it). What do you write today?", {
        "a": ("The same CUDA-only imports: they are the current API", "that "
              "spelling is deprecated: it warns and only covers CUDA"),
        "b": ('torch.amp.autocast("cuda", ...) and torch.amp.GradScaler("cuda")',
              ""),
        "c": ("apex.amp", "NVIDIA apex's amp was retired in favour of torch.amp"),
        "d": ("torch.half() on the model", "that is pure fp16, not mixed "
              "precision: no fp32 master weights, no scaling"),
    }),
    "where_clip": ("You clip gradients with clip_grad_norm_ in an AMP loop. "
                   "Where?", {
        "a": ("Before scaler.scale(loss).backward()", "there are no new grads "
              "yet to clip"),
        "b": ("Right after backward, before unscale_", "the grads are still "
              "scaled: the norm is ~scale times too big"),
        "c": ("After scaler.unscale_(optimizer), before scaler.step(optimizer)", ""),
        "d": ("After scaler.update()", "the step already used the unclipped "
              "grads"),
    }),
}  # fmt: skip
QUICK_CHECK: dict[str, dict[str, Any]] = {
    qid: {"question": question, "choices": {k: c for k, (c, _) in choices.items()}}
    for qid, (question, choices) in _QUIZ.items()
}
"""question id -> {"question": text, "choices": {letter: text}}, for the notebook."""
_QUIZ_HIDDEN = set(list(_QUIZ)[5:])


def quick_check_text() -> str:
    """The quick-check questions and choices as text, ready to print.

    Example:
        >>> print(quick_check_text().splitlines()[0])
        autocast_scope: What should `with torch.amp.autocast(device_type):` wrap?
    """
    lines = []
    for qid, item in QUICK_CHECK.items():
        lines.append(f"{qid}: {item['question']}")
        lines += [f"   ({k}) {text}" for k, text in item["choices"].items()]
    return "\n".join(lines)


def _quiz_rows(quick_check_answers: Callable, hidden: bool) -> list[Row]:
    got = _call(quick_check_answers)
    if not isinstance(got, dict):
        hint = _type_hint(got, "a dict {question id: letter}")
        return [Row("returns a dict", "dict", _cut(repr(got), 22), False, hint)]
    rows = []
    if not hidden:
        bad = [q for q in _QUIZ if got.get(q) not in _QUIZ[q][1]]
        hint = "answer every question id of QUICK_CHECK with one of its letters; "
        hint += "missing or invalid: " + ", ".join(bad)
        rows.append(
            Row(
                f"all {len(_QUIZ)} questions answered",
                "yes",
                "yes" if not bad else f"{len(bad)} missing",
                not bad,
                hint,
            )
        )
    for qid, (_, choices) in _QUIZ.items():
        if (qid in _QUIZ_HIDDEN) != hidden:
            continue
        right = next(k for k, (_, why) in choices.items() if not why)
        answer = got.get(qid)
        ok = answer == right
        if answer in choices:
            hint = f"({answer}) {choices[answer][0]}: {choices[answer][1]}"
        else:
            hint = f"answer with one of {', '.join(choices)}"
        rows.append(
            Row(
                qid,
                right,
                _cut(str(answer) if isinstance(answer, str) else repr(answer), 22),
                ok,
                "" if ok else hint,
            )
        )
    return rows


def check_quick_check(
    quick_check_answers: Callable[[], dict[str, str]], hidden: bool = False
) -> None:
    """Check `quick_check_answers() -> {question id: letter}` for QUICK_CHECK.

    Visible cases grade the first five questions (and that all ten are answered);
    hidden cases the other five. Each wrong choice gets its own explanation.

    Example:
        >>> check_quick_check(lambda: {"autocast_scope": "b", ...})
    """
    _grade("check_quick_check", quick_check_answers, hidden, _quiz_rows)
