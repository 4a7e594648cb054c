"""Number formats from the bits up: fp32, tf32, fp16, bf16 and the two fp8s.

Notebook 01 uses this module. A format is a bit layout: 1 sign bit, `exponent_bits`,
`mantissa_bits`. Every constant (bias, max, smallest normal and subnormal, eps) is
computed from that layout, and `decompose` rounds a value to the format in plain
Python, round to nearest, ties to even, so the rounding can be read line by line. The
tests check both against `torch.finfo` and torch's own casts, bit for bit.

Not covered: AMD's fp8 "fnuz" variants, fp4/MX block formats, stochastic rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import torch

OVERFLOW_RULES = ("inf", "nan", "saturate")


@dataclass(frozen=True)
class Format:
    """A binary floating-point layout: 1 sign bit, exponent bits, mantissa bits.

    `has_inf=False` means the "fn" layout of fp8 e4m3fn: no infinity, the all-ones
    exponent holds numbers too, and only S.1111.111 is nan. `overflow` is what a cast
    does to a value beyond `max`: "inf", "nan" or "saturate" (to +-max). The
    constants are computed from the layout once, on first use.

    Example:
        >>> fp16 = FORMATS["fp16"]
        >>> fp16.bias, fp16.max, fp16.min_normal, fp16.min_subnormal, fp16.eps
        (15, 65504.0, 6.103515625e-05, 5.960464477539063e-08, 0.0009765625)
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    has_inf: bool
    dtype: torch.dtype | None  # None for tf32: a tensor-core input format, not storage
    overflow: str = "inf"

    def __post_init__(self) -> None:
        if self.overflow not in OVERFLOW_RULES:
            raise ValueError(
                f"overflow must be one of {OVERFLOW_RULES}, got {self.overflow!r}"
            )

    @cached_property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @cached_property
    def bias(self) -> int:
        """Stored exponent field minus the real exponent: 2**(e-1) - 1 (fp16: 15)."""
        return 2 ** (self.exponent_bits - 1) - 1

    @cached_property
    def max_exponent(self) -> int:
        """The real exponent of the largest finite value (fp16: 15, e4m3fn: 8)."""
        # IEEE formats keep the all-ones exponent field for inf and nan; e4m3fn
        # spends it on numbers and keeps only S.1111.111 for nan.
        top_field = 2**self.exponent_bits - 1
        return (top_field - 1 if self.has_inf else top_field) - self.bias

    @cached_property
    def max(self) -> float:
        """Largest finite value: all-ones mantissa at the top exponent (fp16: 65504)."""
        # e4m3fn: the all-ones mantissa at the top exponent is nan, so one less.
        mantissa = 2**self.mantissa_bits - (1 if self.has_inf else 2)
        return math.ldexp(1 + mantissa / 2**self.mantissa_bits, self.max_exponent)

    @cached_property
    def min_normal(self) -> float:
        """Smallest positive normal value, 2**(1 - bias) (fp16: 2**-14)."""
        return math.ldexp(1.0, 1 - self.bias)

    @cached_property
    def min_subnormal(self) -> float:
        """Smallest positive value: exponent field 0, mantissa 0...01 (fp16: 2**-24)."""
        return math.ldexp(1.0, 1 - self.bias - self.mantissa_bits)

    @cached_property
    def eps(self) -> float:
        """Gap between 1.0 and the next value, 2**-mantissa_bits (fp16: 2**-10)."""
        return math.ldexp(1.0, -self.mantissa_bits)


def _measured_overflow(dtype: torch.dtype) -> str:
    """What this torch's cast does to a value beyond the format's max.

    Measured rather than assumed because it changed: torch's float32 -> e4m3fn cast
    gave nan on overflow (and for inf) until April 2026 (pytorch PR #178817) and
    saturates to +-448 since.
    """
    stored = torch.tensor(2 * torch.finfo(dtype).max).to(dtype).float().item()
    if math.isnan(stored):
        return "nan"
    return "inf" if math.isinf(stored) else "saturate"


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("fp32", 8, 23, has_inf=True, dtype=torch.float32),
        Format("tf32", 8, 10, has_inf=True, dtype=None),
        Format("fp16", 5, 10, has_inf=True, dtype=torch.float16),
        Format("bf16", 8, 7, has_inf=True, dtype=torch.bfloat16),
        Format(
            "fp8_e4m3",
            4,
            3,
            has_inf=False,
            dtype=torch.float8_e4m3fn,
            overflow=_measured_overflow(torch.float8_e4m3fn),
        ),
        Format("fp8_e5m2", 5, 2, has_inf=True, dtype=torch.float8_e5m2),
    )
}
_FP32 = FORMATS["fp32"]


def resolve_format(fmt: str | Format, *, castable: bool = False) -> Format:
    """The Format `fmt` names: a key of FORMATS, or a Format given as it is.

    With `castable`, refuse a format torch has no storage dtype for (tf32: torch
    only rounds to it inside matmuls), for code that casts tensors to it.

    Example:
        >>> resolve_format("fp16") is FORMATS["fp16"]
        True
        >>> resolve_format("float16")  # ValueError: unknown format 'float16'; pass ...
    """
    if isinstance(fmt, Format):
        found = fmt
    elif isinstance(fmt, str) and fmt in FORMATS:
        found = FORMATS[fmt]
    else:
        raise ValueError(
            f"unknown format {fmt!r}; pass one of {', '.join(FORMATS)} "
            "(or a Format from FORMATS)"
        )
    if castable and found.dtype is None:
        dtypes = [name for name, f in FORMATS.items() if f.dtype is not None]
        raise ValueError(
            f"{found.name} has no torch storage dtype (torch only rounds to it inside "
            f"matmuls), so tensors cannot be cast to it; pick one of "
            f"{', '.join(dtypes)} (decompose() gives its bits)"
        )
    return found


def _split(pattern: int, fmt: Format) -> tuple[int, int, int]:
    m, e = fmt.mantissa_bits, fmt.exponent_bits
    return pattern >> (e + m), (pattern >> m) & (2**e - 1), pattern & (2**m - 1)


def _kind(pattern: int, fmt: Format) -> str:
    _, exponent, mantissa = _split(pattern, fmt)
    all_ones = 2**fmt.exponent_bits - 1
    if exponent == all_ones and fmt.has_inf:
        return "nan" if mantissa else "inf"
    if exponent == all_ones and mantissa == 2**fmt.mantissa_bits - 1:
        return "nan"  # e4m3fn: the only nan
    if exponent == 0:
        return "subnormal" if mantissa else "zero"
    return "normal"


def _decode(pattern: int, fmt: Format) -> float:
    """The value a bit pattern stands for (the inverse of `_encode`)."""
    sign, exponent, mantissa = _split(pattern, fmt)
    s = -1.0 if sign else 1.0
    kind = _kind(pattern, fmt)
    if kind == "nan":
        return math.copysign(math.nan, s)
    if kind == "inf":
        return s * math.inf
    m = fmt.mantissa_bits
    if kind in ("zero", "subnormal"):
        # No implicit leading 1, and the exponent stays at the smallest normal one.
        return s * math.ldexp(mantissa, 1 - fmt.bias - m)
    return s * math.ldexp(2**m + mantissa, exponent - fmt.bias - m)


def _nan_pattern(fmt: Format) -> int:
    # The nan torch's casts write: the IEEE quiet nan (mantissa 10...0) in the 16 and
    # 32 bit formats; every mantissa bit set in fp8 (e4m3fn has no other nan).
    m = fmt.mantissa_bits
    mantissa = 2**m - 1 if fmt.bits == 8 else 2 ** (m - 1)
    return (2**fmt.exponent_bits - 1) << m | mantissa


def _overflow_pattern(fmt: Format) -> int:
    m = fmt.mantissa_bits
    if fmt.overflow == "nan":
        return _nan_pattern(fmt)
    if fmt.overflow == "inf":
        return (2**fmt.exponent_bits - 1) << m
    max_mantissa = 2**m - (1 if fmt.has_inf else 2)
    return (fmt.max_exponent + fmt.bias) << m | max_mantissa


def _encode(x: float, fmt: Format) -> int:
    """Round a Python float to `fmt` (nearest, ties to even); return its bit pattern."""
    m = fmt.mantissa_bits
    sign_bit = int(math.copysign(1.0, x) < 0) << (fmt.bits - 1)
    if math.isnan(x):
        # torch's scalar bf16 cast (c10::BFloat16) writes 0x7FC0 for every nan,
        # dropping the sign; its other casts keep it.
        return (0 if fmt.dtype == torch.bfloat16 else sign_bit) | _nan_pattern(fmt)
    if math.isinf(x):
        return sign_bit | _overflow_pattern(fmt)
    # Near |x| the format's values are spaced 2**(exponent - m) apart; the exponent
    # stops falling at the smallest normal one, where the evenly spaced subnormals lie.
    exponent = max(math.frexp(abs(x))[1] - 1, 1 - fmt.bias)
    step = math.ldexp(1.0, exponent - m)
    n = round(abs(x) / step)  # the division is exact; round() sends ties to even
    if n * step > fmt.max:  # rounded first, then checked: 65519 -> 65504, 65520 -> inf
        return sign_bit | _overflow_pattern(fmt)
    if n < 2**m:  # only at the smallest exponent: a subnormal (or zero)
        return sign_bit | n
    if n == 2 ** (m + 1):  # rounding carried into the next power of two
        n, exponent = n // 2, exponent + 1
    return sign_bit | (exponent + fmt.bias) << m | (n - 2**m)


# ---- public API --------------------------------------------------------------


@dataclass(frozen=True)
class Decomposed:
    """A value as one format stores it: sign bit, exponent and mantissa bit strings."""

    sign: int
    exponent: str
    mantissa: str
    value: float
    kind: str
    fmt: Format

    @property
    def bits(self) -> str:
        """The fields separated by spaces, e.g. '0 01111 0000000000' for fp16 1.0."""
        return f"{self.sign} {self.exponent} {self.mantissa}"

    @property
    def pattern(self) -> int:
        """The bit pattern as an unsigned integer, e.g. 0x3C00 for fp16 1.0."""
        return int(f"{self.sign}{self.exponent}{self.mantissa}", 2)

    def __str__(self) -> str:
        return f"{self.fmt.name} {self.bits} = {self.value!r} ({self.kind})"


def decompose(value: float, fmt: str | Format) -> Decomposed:
    """Round `value` the way torch casts it to `fmt`, and show the stored bits.

    The stored value is that of ``torch.tensor(value, dtype=torch.float32).to(dtype)``:
    first rounded to fp32, then to the format (round to nearest, ties to even; tf32:
    the fp32 mantissa rounded to 10 bits). Beyond `max` the format's `overflow` rule
    applies; e4m3fn, which has no inf, follows it for inf too.

    A nan becomes the format's one nan pattern (a payload is not kept), with its sign,
    except in bf16: there that cast writes 0x7FC0 for every nan, so -nan loses its
    sign too. (torch's vectorized cast of a float32 tensor writes yet another bf16
    nan, 0xFFFF on x86 CPUs: torch itself has no single bf16 nan.)

    Example:
        >>> d = decompose(0.1, "fp16")
        >>> d.sign, d.exponent, d.mantissa, d.value, d.kind
        (0, '01011', '1001100110', 0.0999755859375, 'normal')
        >>> decompose(1 + 0.0001, "fp16").value  # why 1 + 0.0001 == 1 in fp16
        1.0
    """
    fmt = resolve_format(fmt)
    as_fp32 = _decode(_encode(float(value), _FP32), _FP32)
    pattern = _encode(as_fp32, fmt)
    sign, exponent, mantissa = _split(pattern, fmt)
    return Decomposed(
        sign=sign,
        exponent=format(exponent, f"0{fmt.exponent_bits}b"),
        mantissa=format(mantissa, f"0{fmt.mantissa_bits}b"),
        value=_decode(pattern, fmt),
        kind=_kind(pattern, fmt),
        fmt=fmt,
    )


def _field(bits: int | str, width: int, what: str, fmt: Format) -> int:
    if isinstance(bits, str):
        if len(bits) != width or set(bits) - {"0", "1"}:
            raise ValueError(
                f"{fmt.name} {what} needs {width} bits of '0'/'1', got {bits!r}"
            )
        return int(bits, 2)
    if not 0 <= int(bits) < 2**width:
        raise ValueError(
            f"{fmt.name} {what} needs an integer in [0, {2**width}), got {bits!r}"
        )
    return int(bits)


def from_bits(
    sign: int | str, exponent: int | str, mantissa: int | str, fmt: str | Format
) -> float:
    """The value of a bit pattern: the inverse of `decompose`.

    Each field is a bit string (most significant bit first) or an integer.

    Example:
        >>> from_bits("0", "11110", "1111111111", "fp16")  # fp16's largest finite
        65504.0
        >>> from_bits(0, 0, 1, "fp16")  # smallest subnormal, 2**-24
        5.960464477539063e-08
    """
    fmt = resolve_format(fmt)
    pattern = _field(sign, 1, "sign", fmt) << (fmt.bits - 1)
    pattern |= _field(exponent, fmt.exponent_bits, "exponent", fmt) << fmt.mantissa_bits
    pattern |= _field(mantissa, fmt.mantissa_bits, "mantissa", fmt)
    return _decode(pattern, fmt)


def round_to(value: float, fmt: str | Format) -> float:
    """The value `fmt` stores for `value`.

    Example:
        >>> round_to(0.1, "bf16"), round_to(70000.0, "fp16"), round_to(1e-8, "fp16")
        (0.10009765625, inf, 0.0)
    """
    return decompose(value, fmt).value


class Neighbours(NamedTuple):
    down: float  # the next value below `value` (towards -inf)
    value: float  # what the format stores
    up: float  # the next value above (towards +inf)
    gap: float  # spacing of the format's values at this magnitude (one ulp)


def neighbours(value: float, fmt: str | Format) -> Neighbours:
    """The stored value, the representable values either side, and the gap there.

    `down` and `up` are what ``torch.nextafter`` gives in the format: past the largest
    finite value comes inf (or, in e4m3fn, the nan pattern S.1111.111); around zero
    come -+min_subnormal.

    Example:
        >>> neighbours(2049.0, "fp16")  # fp16 counts in 2s from 2048, in 1s below
        Neighbours(down=2047.0, value=2048.0, up=2050.0, gap=2.0)
    """
    d = decompose(value, fmt)
    fmt = d.fmt
    if d.kind == "nan":
        return Neighbours(math.nan, d.value, math.nan, math.nan)
    sign_bit = d.pattern & (1 << (fmt.bits - 1))
    magnitude = d.pattern - sign_bit
    if d.kind == "zero":
        tiny = fmt.min_subnormal
        return Neighbours(-tiny, d.value, tiny, tiny)
    larger = d.value if d.kind == "inf" else _decode(sign_bit | magnitude + 1, fmt)
    smaller = _decode(sign_bit | magnitude - 1, fmt)
    if d.kind == "inf":
        gap = math.inf
    else:
        exponent = max(int(d.exponent, 2), 1) - fmt.bias  # field 0: subnormal spacing
        gap = math.ldexp(1.0, exponent - fmt.mantissa_bits)
    down, up = (larger, smaller) if d.sign else (smaller, larger)
    return Neighbours(down, d.value, up, gap)


def relative_error(value: float, fmt: str | Format) -> float:
    """|stored - value| / |value|: at most eps/2 for values in the normal range.

    Example:
        >>> f"{relative_error(0.1, 'fp16'):.2e}"  # under fp16's eps/2 = 2**-11 = 4.9e-4
        '2.44e-04'
    """
    value = float(value)
    stored = round_to(value, fmt)
    if stored == value:
        return 0.0
    if math.isnan(value) or math.isinf(value):
        return math.nan
    return abs(stored - value) / abs(value)


class Zone(NamedTuple):
    name: str  # "zero", "subnormal", "normal" or "overflow"
    lo: float  # magnitude where the zone starts
    hi: float  # magnitude where it ends


def zones(fmt: str | Format) -> list[Zone]:
    """Magnitude ranges by what the format makes of them, for a number-line plot.

    A magnitude in "zero" flushes to 0, in "subnormal" or "normal" it is stored as
    that kind, in "overflow" the format's `overflow` rule applies. The edges are
    rounding ties, sent to the even neighbour: min_subnormal/2 flushes to 0, the
    midpoint below min_normal becomes min_normal, and max + gap/2 overflows where max
    ends in mantissa bit 1 (IEEE formats) but stays max in e4m3fn (mantissa 110).

    Example:
        >>> for zone in zones("fp8_e4m3"):
        ...     print(zone)
        Zone(name='zero', lo=0.0, hi=0.0009765625)
        Zone(name='subnormal', lo=0.0009765625, hi=0.0146484375)
        Zone(name='normal', lo=0.0146484375, hi=464.0)
        Zone(name='overflow', lo=464.0, hi=inf)
    """
    fmt = resolve_format(fmt)
    half_step = fmt.min_subnormal / 2
    top_gap = math.ldexp(1.0, fmt.max_exponent - fmt.mantissa_bits)
    overflow_at = fmt.max + top_gap / 2
    return [
        Zone("zero", 0.0, half_step),
        Zone("subnormal", half_step, fmt.min_normal - half_step),
        Zone("normal", fmt.min_normal - half_step, overflow_at),
        Zone("overflow", overflow_at, math.inf),
    ]


_INT_VIEW = {8: torch.uint8, 16: torch.int16, 32: torch.int32}


def torch_bits(value: float, fmt: str | Format) -> int:
    """The bit pattern torch stores for `value`: the reference `decompose` must match.

    Casts as ``torch.tensor(value, dtype=torch.float32).to(dtype)`` and reads the
    bits through an integer view.

    Example:
        >>> hex(torch_bits(1.0, "fp16")), hex(torch_bits(-2.0, "bf16"))
        ('0x3c00', '0xc000')
    """
    fmt = resolve_format(fmt, castable=True)
    stored = torch.tensor(float(value), dtype=torch.float32).to(fmt.dtype)
    return stored.view(_INT_VIEW[fmt.bits]).item() & (2**fmt.bits - 1)


# One signed integer type per element size: a view as integers is the stored bits.
_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def tensor_bits(t: torch.Tensor) -> torch.Tensor:
    """A copy of the raw bits of `t`, as a same-size signed integer tensor.

    Compared with ``torch.equal``, bits tell apart what values do not: nan equals
    the same nan, and -0.0 differs from 0.0. A copy, so a snapshot of a parameter
    stays as it was when the parameter is updated in place.

    Example:
        >>> tensor_bits(torch.tensor([1.0, -0.0, 0.0])).tolist()
        [1065353216, -2147483648, 0]
        >>> nan = torch.tensor(float("nan"))
        >>> torch.equal(nan, nan), torch.equal(tensor_bits(nan), tensor_bits(nan))
        (False, True)
    """
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"tensor_bits needs a torch.Tensor, got {type(t).__name__}")
    if t.element_size() not in _INT_OF_SIZE or t.is_complex():
        raise ValueError(
            f"tensor_bits handles real tensors of 1, 2, 4 or 8 bytes per element; "
            f"got {t.dtype}"
        )
    return t.detach().contiguous().view(_INT_OF_SIZE[t.element_size()]).clone()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when `a` and `b` have the same shape, dtype and stored bits.

    The one test of "bit-identical" in the course: a nan matches only the same nan
    pattern, and -0.0 does not match 0.0.

    Example:
        >>> same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
        False
        >>> nan = torch.tensor([float("nan")])
        >>> same_bits(nan, nan.clone()), same_bits(nan, nan.half())
        (True, False)
    """
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(tensor_bits(a), tensor_bits(b))
