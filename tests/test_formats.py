"""amp_lessons.core.formats against PyTorch: torch.finfo, torch's casts,
torch.nextafter."""

import math
import random
from itertools import pairwise

import pytest
import torch

from amp_lessons.core.formats import (
    FORMATS,
    Format,
    decompose,
    from_bits,
    neighbours,
    relative_error,
    resolve_format,
    round_to,
    same_bits,
    tensor_bits,
    torch_bits,
    zones,
)

TORCH_NAMES = [name for name, fmt in FORMATS.items() if fmt.dtype is not None]
SMALL_NAMES = [name for name in TORCH_NAMES if FORMATS[name].bits <= 16]
INT_VIEW = {8: torch.uint8, 16: torch.int16, 32: torch.int32}


def torch_patterns(x: torch.Tensor, fmt: Format) -> list[int]:
    """Bit patterns torch stores when it casts the float32/float64 tensor `x`."""
    ints = x.to(fmt.dtype).view(INT_VIEW[fmt.bits]).tolist()
    return [i & (2**fmt.bits - 1) for i in ints]


def tf32_patterns(x32: torch.Tensor) -> list[int]:
    """tf32 reference written independently: integer round-to-nearest-even on the fp32
    bits (the trick torch uses for bf16), keeping sign, 8 exponent and 10 mantissa bits.
    """
    bits = x32.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    lowest_kept = (bits >> 13) & 1
    return ((bits + 0xFFF + lowest_kept) >> 13).tolist()


def reference(x: torch.Tensor, name: str) -> list[int]:
    if name == "tf32":
        return tf32_patterns(x.to(torch.float32))
    return torch_patterns(x, FORMATS[name])


def mismatches(x: torch.Tensor, name: str, rounder=None) -> list[str]:
    """Values whose bits from `rounder` (default: decompose) differ from the reference.

    x must hold no nan (nan payloads are checked in their own test).
    """
    rounder = rounder or (lambda v: decompose(v, name).pattern)
    ours = [rounder(v) for v in x.tolist()]
    return [
        f"{v!r}: reference {hex(want)}, got {hex(got)}"
        for v, want, got in zip(x.tolist(), reference(x, name), ours, strict=True)
        if want != got
    ]


def every_value(fmt: Format) -> torch.Tensor:
    """All values of an 8 or 16 bit format, decoded by torch, as float32."""
    codes = torch.arange(2**fmt.bits, dtype=torch.int32)
    if fmt.bits == 8:
        codes = codes.to(torch.uint8)
    else:
        codes = (codes - 2**15).to(torch.int16)
    return codes.view(fmt.dtype).to(torch.float32)


def ties_and_neighbours(values: torch.Tensor, count: int | None = None) -> torch.Tensor:
    """Exact midpoints between consecutive non-negative `values` (round-to-nearest-even
    ties), the float32 values either side of each, and the same negated."""
    finite = values[values.isfinite() & (values >= 0)].unique()  # sorted
    lo, hi = finite[:-1].double(), finite[1:].double()
    if count is not None and len(lo) > count:
        # both ends (subnormals, the top binades) and a random sample in between
        g = torch.Generator().manual_seed(0)
        ends = torch.cat(
            [torch.arange(count // 4), len(lo) - 1 - torch.arange(count // 4)]
        )
        keep = torch.cat([ends, torch.randint(0, len(lo), (count // 2,), generator=g)])
        lo, hi = lo[keep], hi[keep]
    mid = ((lo + hi) / 2).float()
    assert torch.equal(mid.double(), (lo + hi) / 2), "midpoints must be exact in fp32"
    # the midpoint above max is the overflow tie
    top = finite[-1:].double() + (finite[-1:].double() - finite[-2:-1].double()) / 2
    mid = torch.cat([mid, top.float()])
    near = torch.cat(
        [mid, torch.nextafter(mid, mid + 1), torch.nextafter(mid, mid - 1)]
    )
    return torch.cat([near, -near])


def log_uniform(fmt: Format, count: int, seed: int) -> torch.Tensor:
    """Random magnitudes from well below min_subnormal to well above max, both signs."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = math.log2(fmt.min_subnormal) - 3, min(math.log2(fmt.max) + 3, 127.9)
    magnitudes = torch.exp2(
        lo + (hi - lo) * torch.rand(count, generator=g, dtype=torch.float64)
    )
    signs = torch.randint(0, 2, (count,), generator=g) * 2 - 1
    return (magnitudes * signs).float()


def specials(fmt: Format) -> torch.Tensor:
    """Edge values of `fmt` and of float32, both signs."""
    f32 = torch.finfo(torch.float32)
    sub = fmt.min_subnormal
    big = [fmt.max, fmt.max * 1.0001, 2 * fmt.max, 1e30, f32.max, math.inf]
    ones = [1.0, 1 + fmt.eps / 2, 1 + fmt.eps * 1.5]
    small = [fmt.min_normal, fmt.min_normal * 0.999, f32.tiny, 2.0**-149, 2.0**-150]
    tiny = [sub, sub / 2, sub * 0.75, sub / 4, 0.0]  # sub / 2 is a tie: flushes to 0
    magnitudes = [v for v in big + ones + small + tiny if v <= f32.max or v == math.inf]
    return torch.tensor(magnitudes + [-v for v in magnitudes], dtype=torch.float32)


def same(a: float, b: float) -> bool:
    """Equal bit for bit as floats: -0.0 differs from 0.0, nan equals nan."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


# ---- constants ---------------------------------------------------------------------


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_constants_equal_torch_finfo(name):
    fmt = FORMATS[name]
    info = torch.finfo(fmt.dtype)
    assert fmt.bits == info.bits
    assert fmt.max == info.max
    assert fmt.min_normal == info.smallest_normal == info.tiny
    assert fmt.eps == info.eps

    # torch.finfo has no smallest subnormal or bias: read them from torch's decoding
    # of the bit patterns 0...01 and 0 bias 0...0
    def as_value(code: int) -> float:
        ints = torch.tensor([code], dtype=torch.int64).to(INT_VIEW[fmt.bits])
        return ints.view(fmt.dtype).item()

    assert fmt.min_subnormal == as_value(1)
    assert as_value(fmt.bias << fmt.mantissa_bits) == 1.0
    top_exponent = (2**fmt.exponent_bits - 1) << fmt.mantissa_bits
    assert math.isinf(as_value(top_exponent)) == fmt.has_inf


def test_reference_facts():
    fp16, bf16 = FORMATS["fp16"], FORMATS["bf16"]
    assert (fp16.max, fp16.min_normal, fp16.min_subnormal) == (65504, 2**-14, 2**-24)
    assert (bf16.exponent_bits, bf16.mantissa_bits, bf16.eps) == (8, 7, 2**-7)
    assert FORMATS["fp8_e4m3"].max == 448 and not FORMATS["fp8_e4m3"].has_inf
    assert FORMATS["fp8_e5m2"].max == 57344
    assert round_to(1 + 0.0001, "fp16") == 1.0
    assert round_to(2.0**-25, "fp16") == 0.0  # a tie: to the even neighbour, zero
    assert round_to(2.0**-25 * (1 + 2**-20), "fp16") == 2.0**-24
    assert round_to(65519, "fp16") == 65504 and round_to(65520, "fp16") == math.inf
    assert round_to(61440, "fp8_e5m2") == math.inf  # tie above 57344: to even, inf
    assert round_to(464, "fp8_e4m3") == 448  # tie above 448 (mantissa 110): stays


def test_tf32_constants():
    tf32, f32 = FORMATS["tf32"], torch.finfo(torch.float32)
    assert (tf32.bias, tf32.min_normal) == (127, f32.smallest_normal)  # fp32's range
    assert tf32.eps == 2.0**-10  # fp16's precision
    largest = torch.tensor([0x7F7FE000], dtype=torch.int32).view(torch.float32).item()
    assert tf32.max == largest and tf32.min_subnormal == 2.0**-136


def test_a_wrong_layout_is_caught():
    """The finfo comparison can fail: a typo in the layout changes the constants."""
    info = torch.finfo(torch.float16)
    assert Format("fp16?", 5, 9, has_inf=True, dtype=None).eps != info.eps
    assert Format("fp16?", 5, 10, has_inf=False, dtype=None).max != info.max
    assert Format("fp16?", 6, 10, has_inf=True, dtype=None).min_normal != info.tiny


# ---- decompose against torch's casts ------------------------------------------------


@pytest.mark.parametrize("name", SMALL_NAMES)
def test_decompose_matches_torch_casts(name):
    fmt = FORMATS[name]
    everything = every_value(fmt)
    x = torch.cat(
        [
            everything[~everything.isnan()],
            ties_and_neighbours(everything, count=None if fmt.bits == 8 else 6000),
            log_uniform(fmt, 3000, seed=1),
            specials(fmt),
        ]
    )
    if fmt.bits == 16:  # a sample: every value's round trip is tested below
        x = x[
            torch.randperm(len(x), generator=torch.Generator().manual_seed(2))[:15000]
        ]
    assert mismatches(x, name) == []


def random_fp32(count: int, seed: int) -> torch.Tensor:
    """Uniformly random fp32 bit patterns (every exponent equally likely), no nan."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31 - 1, (count,), generator=g, dtype=torch.int64)
    x = bits.to(torch.int32).view(torch.float32)
    return x[~x.isnan()]


def test_decompose_matches_fp32_rounding_of_doubles():
    """Python floats (doubles) rounded to fp32: exact ties between consecutive fp32
    values, and the doubles either side of them."""
    x32 = random_fp32(4000, seed=3)
    x32 = x32[x32.isfinite()]
    up = torch.nextafter(x32, torch.tensor(math.inf))
    mid = ((x32.double() + up.double()) / 2)[up.isfinite()]
    extra = torch.tensor([2.0**-150, 3 * 2.0**-151, 2.0**128 - 2.0**103, -1e-50, 1e300])
    x = torch.cat(
        [
            mid,
            torch.nextafter(mid, mid + 1),
            torch.nextafter(mid, mid - 1),
            random_fp32(2000, seed=4).double(),
            specials(FORMATS["fp32"]).double(),
            extra.double(),
        ]
    )
    assert mismatches(x, "fp32") == []


def test_decompose_matches_tf32_rounding():
    """tf32 keeps the top 10 of fp32's 23 mantissa bits: set the 13 dropped bits to a
    tie (0x1000), just under and over it, and at random."""
    g = torch.Generator().manual_seed(5)
    high = torch.randint(-(2**18), 2**18, (2500,), generator=g, dtype=torch.int64) << 13
    low = [torch.full((2500,), tail) for tail in (0x1000, 0x0FFF, 0x1001, 0)]
    low.append(torch.randint(0, 2**13, (2500,), generator=g))
    x = torch.cat([(high | tail).to(torch.int32).view(torch.float32) for tail in low])
    x = torch.cat([x[x.isfinite()], specials(FORMATS["tf32"])])
    assert mismatches(x, "tf32") == []


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_decompose_matches_the_contract_cast_of_python_floats(name):
    """The 0-dim path of the contract, from Python floats (doubles), double rounding
    through fp32 included."""
    fmt, rng = FORMATS[name], random.Random(4)
    values = [1 + 2.0**-11 + 2.0**-30, 1 + fmt.eps / 2 + 2.0**-40, 1e-50, -1e300]
    for _ in range(300):
        v = math.copysign(2 ** rng.uniform(-155, 130), rng.random() - 0.5)
        # bits below fp32's last: where rounding twice can differ from once
        values.append(v * (1 + rng.choice([2.0**-30, -(2.0**-30), 2.0**-40, 0.0])))
    wrong = [v for v in values if decompose(v, fmt).pattern != torch_bits(v, fmt)]
    assert wrong == []


def test_skipping_the_fp32_step_is_caught():
    """1 + 2**-11 + 2**-30 rounds to 1 + 2**-11 in fp32, a tie that fp16 sends to 1.0;
    rounded straight from the double it would go up. A check that skipped the fp32
    step would fail here."""
    from amp_lessons.core.formats import (
        _encode,  # the one-step rounding, to show the trap
    )

    value = 1 + 2.0**-11 + 2.0**-30
    assert torch_bits(value, "fp16") == decompose(value, "fp16").pattern == 0x3C00
    assert _encode(value, FORMATS["fp16"]) == 0x3C01


def test_ties_away_from_zero_is_caught():
    """The tie values really test round-half-to-even: rounding ties away from zero
    (nudge each value up to the next fp32 first) disagrees with torch on them."""
    x = ties_and_neighbours(every_value(FORMATS["fp16"]), count=400)
    positive = x[x > 0]

    def ties_away(v: float) -> int:
        nudged = torch.nextafter(torch.tensor(v), torch.tensor(math.inf)).item()
        return decompose(nudged, "fp16").pattern

    assert mismatches(positive, "fp16") == []
    assert len(mismatches(positive, "fp16", ties_away)) > 100


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_nan_inf_and_signed_zero(name):
    fmt = FORMATS[name]
    for value in (math.nan, -math.nan):
        d = decompose(value, fmt)
        assert d.kind == "nan" and math.isnan(d.value)
        assert d.pattern == torch_bits(value, fmt)  # sign included
    for value in (math.inf, -math.inf):
        d = decompose(value, fmt)
        assert d.pattern == torch_bits(value, fmt)
        expected_kind = {"inf": "inf", "nan": "nan", "saturate": "normal"}[fmt.overflow]
        assert d.kind == expected_kind
    d = decompose(-0.0, fmt)
    assert (d.sign, d.kind, d.pattern) == (1, "zero", torch_bits(-0.0, fmt))
    assert math.copysign(1, d.value) == -1


def test_a_negative_nan_loses_its_sign_in_bf16_only_as_in_torch():
    # torch's scalar bf16 cast writes 0x7FC0 for every nan; fp16 and fp8 keep the sign.
    for name, pattern in (("bf16", 0x7FC0), ("fp16", 0xFE00), ("fp8_e5m2", 0xFF)):
        assert decompose(-math.nan, name).pattern == torch_bits(-math.nan, name)
        assert torch_bits(-math.nan, name) == pattern
    # Documented in decompose: a payload is not kept (torch's fp16 cast keeps some).
    payload = torch.tensor(0x7FC12345, dtype=torch.int32).view(torch.float32).item()
    assert decompose(payload, "fp16").pattern == 0x7E00 != torch_bits(payload, "fp16")


def test_e4m3_overflow_follows_this_torch():
    """torch changed e4m3fn overflow from nan to saturation (PR #178817, 2026):
    FORMATS measures it, and decompose follows the torch installed here."""
    fmt = FORMATS["fp8_e4m3"]
    assert fmt.overflow in ("nan", "saturate")
    for value in (465.0, 1e4, math.inf):
        stored = torch.tensor(value).to(torch.float8_e4m3fn).float().item()
        assert same(round_to(value, fmt), stored)
        assert same(round_to(-value, fmt), -stored)


# ---- bits <-> values ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["fp16", "fp8_e4m3", "fp8_e5m2", "bf16"])
def test_from_bits_round_trips_every_pattern(name):
    fmt = FORMATS[name]
    torch_values = every_value(fmt).tolist()
    codes = range(-(2**15), 2**15) if fmt.bits == 16 else range(256)
    rng = random.Random(5)
    for code, want in zip(codes, torch_values, strict=True):
        code &= 2**fmt.bits - 1
        sign = code >> (fmt.bits - 1)
        exponent = (code >> fmt.mantissa_bits) & (2**fmt.exponent_bits - 1)
        mantissa = code & (2**fmt.mantissa_bits - 1)
        value = from_bits(sign, exponent, mantissa, fmt)
        assert same(value, want), (hex(code), value, want)
        # bf16: decompose a sample (every pattern takes a second)
        if math.isnan(value) or (name == "bf16" and rng.random() > 0.1):
            continue
        d = decompose(value, fmt)
        assert d.pattern == code, (hex(code), value, d)


def kind_of(value: float, fmt: Format) -> str:
    magnitude = abs(value)
    if math.isnan(magnitude) or math.isinf(magnitude):
        return "nan" if math.isnan(magnitude) else "inf"
    if magnitude == 0:
        return "zero"
    return "subnormal" if magnitude < fmt.min_normal else "normal"


def test_decompose_bits_reconstruct_the_value():
    for name, fmt in FORMATS.items():
        for value in log_uniform(fmt, 300, seed=6).tolist() + [0.0, -0.0, -math.inf]:
            d = decompose(value, name)
            assert (len(d.exponent), len(d.mantissa)) == (
                fmt.exponent_bits,
                fmt.mantissa_bits,
            )
            assert same(from_bits(d.sign, d.exponent, d.mantissa, name), d.value)
            assert d.kind == kind_of(d.value, fmt)


def test_from_bits_reads_strings_and_explains_bad_fields():
    assert from_bits("0", "01111", "0000000000", "fp16") == 1.0
    assert from_bits("1", "00000", "0000000001", "fp16") == -(2.0**-24)
    assert from_bits(0, 0b1111, 0b110, "fp8_e4m3") == 448.0
    assert math.isnan(from_bits(0, 0b1111, 0b111, "fp8_e4m3"))
    d = decompose(-2.5, "fp16")
    assert d.bits == "1 10000 0100000000" and str(d).endswith("= -2.5 (normal)")
    with pytest.raises(ValueError, match="exponent needs 5 bits"):
        from_bits("0", "0111", "0000000000", "fp16")
    with pytest.raises(ValueError, match="mantissa needs 10 bits"):
        from_bits("0", "01111", "000000000x", "fp16")
    with pytest.raises(ValueError, match=r"sign needs an integer in \[0, 2\)"):
        from_bits(2, 0, 0, "fp16")


# ---- the bit-equality oracle: tensor_bits, same_bits --------------------------------


def test_tensor_bits_tell_nan_and_signed_zero_apart():
    nan = torch.tensor(math.nan)
    assert torch.equal(tensor_bits(nan), tensor_bits(nan.clone()))
    zeros = tensor_bits(torch.tensor([-0.0, 0.0]))
    assert zeros[0] != zeros[1]
    half = torch.tensor([1.0, -2.0], dtype=torch.float16)
    assert tensor_bits(half).dtype is torch.int16
    assert tensor_bits(half).tolist() == [15360, -16384]  # 0x3C00, 0xC000
    assert tensor_bits(torch.tensor([1.0], dtype=torch.float64)).dtype is torch.int64
    for name in SMALL_NAMES:  # agrees with torch_bits, read one value at a time
        x = torch.tensor([0.1, -3.0], dtype=torch.float32).to(FORMATS[name].dtype)
        mask = 2 ** FORMATS[name].bits - 1
        assert [b & mask for b in tensor_bits(x).tolist()] == [
            torch_bits(0.1, name),
            torch_bits(-3.0, name),
        ]


def test_tensor_bits_is_a_snapshot_not_a_view():
    weight = torch.ones(3)
    before = tensor_bits(weight)
    weight.mul_(2.0)  # an optimizer step updates parameters in place
    assert not torch.equal(before, tensor_bits(weight))
    grad = torch.ones(4, 4).t()  # not contiguous
    assert tensor_bits(grad).tolist() == tensor_bits(grad.contiguous()).tolist()


def test_same_bits_is_bit_identity():
    a = torch.tensor([1.0, math.nan, -0.0, math.inf])
    assert same_bits(a, a.clone())
    assert not torch.equal(a, a.clone())  # the values test fails on the nan
    assert not same_bits(a, torch.tensor([1.0, math.nan, 0.0, math.inf]))  # -0.0
    assert not same_bits(a, a.double())  # same values, other dtype
    assert not same_bits(a, a.reshape(2, 2))  # same bits, other shape
    other_nan = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert not same_bits(a[1:2], other_nan)  # a nan matches only the same nan
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    assert not same_bits(x / 3.0, x * (1 / 3.0))  # a last-bit difference is seen


def test_tensor_bits_explains_bad_input():
    with pytest.raises(ValueError, match="needs a torch.Tensor, got list"):
        tensor_bits([1.0])
    with pytest.raises(ValueError, match="real tensors"):
        tensor_bits(torch.zeros(2, dtype=torch.complex64))


# ---- neighbours, relative error, zones ----------------------------------------------


@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16"])
def test_neighbours_match_torch_nextafter(name):
    fmt = FORMATS[name]
    x = torch.cat([log_uniform(fmt, 1500, seed=7), specials(fmt)])
    stored = x.to(fmt.dtype)
    down = torch.nextafter(stored, torch.tensor(-math.inf, dtype=fmt.dtype)).tolist()
    up = torch.nextafter(stored, torch.tensor(math.inf, dtype=fmt.dtype)).tolist()
    for value, want_down, want_up in zip(x.tolist(), down, up, strict=True):
        n = neighbours(value, fmt)
        assert same(n.down, want_down) and same(n.up, want_up), (value, n)
        away = want_up if n.value >= 0 else want_down
        if math.isfinite(away) and math.isfinite(n.value):
            assert n.gap == abs(away - n.value), (value, n)


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_neighbours_fp8_against_every_value(name):
    """torch has no nextafter for fp8: use the sorted list of all its values."""
    fmt = FORMATS[name]
    values = sorted(set(v for v in every_value(fmt).tolist() if not math.isnan(v)))
    for i, v in enumerate(values[1:-1], start=1):
        n = neighbours(v, fmt)
        down, up = values[i - 1], values[i + 1]
        if v == 0:  # -0.0 and 0.0 are one entry of the set
            down, up = -fmt.min_subnormal, fmt.min_subnormal
        assert (n.down, n.value, n.up) == (down, v, up)
    top = neighbours(fmt.max, fmt)
    assert top.gap == fmt.max - top.down
    assert math.isinf(top.up) if fmt.has_inf else math.isnan(top.up)


def test_neighbours_example_and_gap():
    assert neighbours(1.0, "fp16") == (1 - 2.0**-11, 1.0, 1 + 2.0**-10, 2.0**-10)
    assert neighbours(2049.0, "fp16") == (2047.0, 2048.0, 2050.0, 2.0)
    assert neighbours(0.0, "bf16").up == FORMATS["bf16"].min_subnormal
    assert all(math.isnan(v) for v in neighbours(math.nan, "fp16"))


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_relative_error_matches_torch(name):
    fmt = FORMATS[name]
    x = log_uniform(fmt, 500, seed=8)
    x = x[(x.abs() > fmt.min_normal) & (x.abs() < fmt.max)]
    want = (x.to(fmt.dtype).double() - x.double()).abs() / x.double().abs()
    for value, expected in zip(x.tolist(), want.tolist(), strict=True):
        assert relative_error(value, fmt) == pytest.approx(expected, rel=1e-12, abs=0)
        assert relative_error(value, fmt) <= fmt.eps / 2  # the normal range's bound
    # subnormals lose relative precision: 1.5 * min_subnormal is a tie, stored as 2x
    assert relative_error(1.5 * fmt.min_subnormal, fmt) == pytest.approx(1 / 3)
    assert relative_error(0.0, fmt) == 0.0 and math.isnan(relative_error(math.nan, fmt))


@pytest.mark.parametrize("name", list(FORMATS))
def test_zones_are_where_rounding_puts_values(name):
    fmt = FORMATS[name]
    zs = zones(fmt)
    assert [z.name for z in zs] == ["zero", "subnormal", "normal", "overflow"]
    assert zs[0].lo == 0 and zs[-1].hi == math.inf
    assert all(a.hi == b.lo and a.lo < a.hi for a, b in pairwise(zs))

    def nudge(edge, direction):
        # the nearest input on that side: a double for fp32, else an fp32 value
        if name == "fp32":
            return math.nextafter(edge, direction)
        t = torch.tensor(edge, dtype=torch.float32)
        return torch.nextafter(t, torch.tensor(direction, dtype=torch.float32)).item()

    overflow_kind = {"inf": "inf", "nan": "nan", "saturate": "normal"}[fmt.overflow]
    kind_in = {kind: kind for kind in ("zero", "subnormal", "normal")}
    kind_in["overflow"] = overflow_kind
    for below, above in pairwise(zs):
        edge = below.hi
        assert decompose(nudge(edge, 0.0), fmt).kind == kind_in[below.name]
        assert decompose(nudge(edge, math.inf), fmt).kind == kind_in[above.name]
    # the edges themselves are ties, settled by the even neighbour
    assert decompose(zs[0].hi, fmt).kind == "zero"
    assert decompose(zs[1].hi, fmt).value == fmt.min_normal
    top = decompose(zs[2].hi, fmt)
    assert top.value == fmt.max if not fmt.has_inf else top.kind == overflow_kind
    if fmt.dtype is not None:
        for edge in (z.hi for z in zs[:3]):
            assert decompose(edge, fmt).pattern == torch_bits(edge, fmt)


# ---- bad input ---------------------------------------------------------------------


def test_resolve_format_is_the_one_lookup():
    assert resolve_format("fp16") is FORMATS["fp16"]
    odd = Format("odd", 4, 3, has_inf=False, dtype=None)
    assert resolve_format(odd) is odd  # a Format is taken as it is
    assert resolve_format("tf32").dtype is None
    for bad in ("FP16", "float16", torch.float16, None):
        with pytest.raises(
            ValueError,
            match=r"unknown format .*; pass one of fp32, "
            r"tf32, fp16, bf16, fp8_e4m3, fp8_e5m2 \(or a Format",
        ):
            resolve_format(bad)
    with pytest.raises(
        ValueError,
        match="tf32 has no torch storage dtype .* pick one "
        "of fp32, fp16, bf16, fp8_e4m3, fp8_e5m2",
    ):
        resolve_format("tf32", castable=True)
    assert resolve_format("bf16", castable=True).dtype is torch.bfloat16


def test_unknown_format_names_the_valid_ones():
    valid = "fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2"
    with pytest.raises(ValueError, match=f"unknown format 'fp64'; pass one of {valid}"):
        decompose(1.0, "fp64")
    for call in (lambda: zones("FP16"), lambda: from_bits(0, 0, 0, 16)):
        with pytest.raises(ValueError, match=valid):
            call()
    with pytest.raises(ValueError, match="no torch storage dtype"):
        torch_bits(1.0, "tf32")
    with pytest.raises(ValueError, match="overflow must be one of"):
        Format("odd", 4, 3, has_inf=False, dtype=None, overflow="clip")


@pytest.mark.gpu
@pytest.mark.parametrize("name", TORCH_NAMES)
def test_decompose_matches_cuda_casts(name):
    fmt = FORMATS[name]
    x = torch.cat([log_uniform(fmt, 3000, seed=9), specials(fmt)])
    if fmt.bits <= 16:
        x = torch.cat([x, ties_and_neighbours(every_value(fmt), count=2000)])
    cuda = x.cuda().to(fmt.dtype).view(INT_VIEW[fmt.bits]).cpu().tolist()
    ours = [decompose(v, fmt).pattern for v in x.tolist()]
    assert [c & (2**fmt.bits - 1) for c in cuda] == ours
