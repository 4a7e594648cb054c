"""amp_lessons.teaching.underflow: every fraction is compared with a direct torch cast
classified with torch.finfo, histograms with numpy, training runs with thresholds."""

import math

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.teaching.underflow import (
    CastOutcome,
    backward_demo,
    cast_outcome,
    collect_gradients,
    log2_histogram,
    pure_fp16_task,
    swamping,
    train_pure_fp16,
    underflow_fraction,
)

matplotlib.use("Agg")

DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
EDGES = torch.tensor(
    [2.0**-25, 1.5 * 2.0**-25, 2.0**-24, 2.0**-14, 65504.0, 65519.0, 65520.0, -1e-30,
     -3e-6, 1e-3, 0.0, 1e30]
)  # fmt: skip


@pytest.fixture(scope="module")
def grads() -> torch.Tensor:
    return collect_gradients(backward_demo())


def direct_outcome(grads: torch.Tensor, scale: float, fmt: str) -> tuple:
    """The reference: cast with torch, classify with torch.finfo."""
    dtype = DTYPES[fmt]
    x = grads[grads != 0].float() * scale
    c = x.to(dtype).float()
    info = torch.finfo(dtype)
    over = ~torch.isfinite(c)
    if fmt == "fp8_e4m3":  # saturates to 448; 464 = 448 + half a gap ties to 448
        over |= x.abs() > 464
    zero = c == 0
    sub = ~zero & ~over & (c.abs() < info.tiny)
    n = x.numel()
    return tuple(m.sum().item() / n for m in (zero, sub, ~zero & ~over & ~sub, over))


# ---- gradients -------------------------------------------------------------------


def test_collect_gradients_is_every_grad_in_float32():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).half()
    model(torch.randn(5, 3).half()).float().sum().backward()
    got = collect_gradients(model)
    expected = torch.cat([p.grad.float().flatten() for p in model.parameters()])
    assert got.dtype == torch.float32 and got.dim() == 1
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="backward"):
        collect_gradients(nn.Linear(2, 2))


def test_demo_gradients_span_many_binades(grads):
    assert grads.numel() == sum(p.numel() for p in backward_demo().parameters())
    assert (grads != 0).all()  # GELU: no dead units, so no zeros before any cast
    logs = grads.abs().log2()
    assert logs.max() - logs.min() > 25  # more than 25 powers of two
    before = torch.get_rng_state()
    backward_demo(seed=3)
    assert torch.equal(torch.get_rng_state(), before)  # global RNG untouched


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_demo_gradients_lose_a_third_in_fp16(seed):
    outcome = cast_outcome(collect_gradients(backward_demo(seed)))
    assert 0.2 < outcome.zero < 0.45
    assert outcome.subnormal > 0.3 and outcome.normal > 0.1
    assert outcome.overflow == 0.0


# ---- casts -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("scale", [1.0, 2.0**8, 2.0**16, 2.0**24, 1000.0])
def test_cast_outcome_matches_torch(grads, fmt, scale):
    for values in (grads, EDGES, grads[:100] * 1e4):
        got = cast_outcome(values, scale, fmt)
        expected = direct_outcome(values, scale, fmt)
        assert (got.zero, got.subnormal, got.normal, got.overflow) == expected
        assert got.nonzero == (values != 0).sum().item()
        assert math.isclose(sum(expected), 1.0)


def test_cast_outcome_by_hand():
    g = torch.tensor([2.0**-25, 2.0**-24, 2.0**-14, 65504.0, 65520.0, -1e-30, 0.0])
    # 2**-25 ties to even (0) and -1e-30 flushes; 2**-24 is the smallest subnormal;
    # 65520 is the midpoint above 65504 and rounds up to inf
    assert cast_outcome(g) == CastOutcome(2 / 6, 1 / 6, 2 / 6, 1 / 6, 6)
    assert cast_outcome(g, fmt="bf16") == CastOutcome(0.0, 0.0, 1.0, 0.0, 6)
    # e4m3 saturates instead of making inf: 465 becomes 448, and still overflowed
    sat = torch.tensor([448.0, 464.0, 465.0, 1e4])
    assert sat.to(torch.float8_e4m3fn).float().tolist() == [448.0] * 4
    assert cast_outcome(sat, fmt="fp8_e4m3").overflow == 0.5


def test_scaling_trades_underflow_for_overflow(grads):
    assert cast_outcome(grads, fmt="bf16").zero == 0.0  # fp32's exponent range
    assert cast_outcome(grads, 2.0**16).zero == 0.0
    assert cast_outcome(grads, 2.0**16).overflow == 0.0
    assert cast_outcome(grads, 2.0**20).overflow > 0.0  # max |g| ~0.1 * 2**20 > 65504
    zeros = [underflow_fraction(grads, 2.0**k) for k in range(0, 18, 2)]
    assert zeros == sorted(zeros, reverse=True) and zeros[0] > 0.2


def test_underflow_fraction_is_the_zero_share():
    g = torch.tensor([1e-9, -1e-9, 1e-6, 1e-3, 0.0, 0.0])
    assert underflow_fraction(g) == 0.5
    assert underflow_fraction(g, scale=2.0**10) == 0.0  # 1e-9 * 1024 > 2**-25
    assert underflow_fraction(torch.zeros(4)) == 0.0
    nz = g[g != 0]
    assert underflow_fraction(g) == ((nz * 1.0).to(torch.float16) == 0).float().mean()


# ---- histogram ---------------------------------------------------------------------


def test_log2_histogram_matches_numpy(grads):
    hist = log2_histogram(grads)
    edges = hist.edges.numpy()
    assert np.array_equal(edges, np.arange(edges[0], edges[-1] + 1))  # binades
    logs = np.log2(np.abs(grads.double().numpy()))
    expected, _ = np.histogram(logs, bins=edges)
    assert np.array_equal(hist.counts.numpy(), expected)
    assert hist.counts.sum() == grads.numel()
    counts, edges = log2_histogram(grads, bins=7)
    assert np.array_equal(counts.numpy(), np.histogram(logs, bins=7)[0])
    assert len(edges) == 8


def test_log2_histogram_puts_powers_of_two_in_their_binade():
    values = torch.tensor([2.0**-24, -(2.0**-24), 2.0**-14, 0.0, float("inf")])
    counts, edges = log2_histogram(values)
    assert edges.tolist() == list(range(-24, -12))
    assert counts.tolist() == [2] + [0] * 9 + [1]
    counts, _ = log2_histogram(values, bins=torch.tensor([-30.0, -20.0, 0.0]))
    assert counts.tolist() == [2, 1]
    assert log2_histogram(torch.zeros(3)).counts.numel() == 0
    with pytest.raises(ValueError, match="bins"):
        log2_histogram(values, bins=0)


# ---- pure fp16 training --------------------------------------------------------------


def scaled_grads(loss_fn, scale: float, seed: int = 0) -> torch.Tensor:
    model, x, y = pure_fp16_task(seed)
    (loss_fn(model(x), y) * scale).backward()
    return collect_gradients(model) / scale


def mean_squared(pred, y):
    return (pred - y).pow(2).mean()


@pytest.mark.parametrize("seed", [0, 1])
def test_pure_fp16_gradients_vanish_without_scaling(seed):
    model, x, y = pure_fp16_task(seed)
    assert {t.dtype for t in (model.weight, x, y)} == {torch.float16}
    # the mechanism, in float64: each output's gradient 2 * error / N is below 2**-25
    per_output = 2 * (model(x).double() - y.double()) / y.numel()
    assert (per_output.abs() < 2.0**-25).float().mean() > 0.999
    plain = scaled_grads(mean_squared, 1.0, seed)
    scaled = scaled_grads(mean_squared, 1024.0, seed)
    assert (plain == 0).float().mean() > 0.85  # most exactly 0 ...
    assert plain.abs().max() < 0.01 * scaled.abs().max()  # ... the rest 100x too small
    assert (scaled != 0).all()


def test_fp16_mse_loss_backward_flushes_even_when_scaled():
    """Why train_pure_fp16 writes (pred - y).pow(2).mean(): torch's CPU fp16
    mse_loss backward scales the error by 2/N before the incoming gradient."""
    mse = scaled_grads(F.mse_loss, 1024.0)
    assert (mse == 0).float().mean() > 0.85
    assert mse.abs().max() < 0.01 * scaled_grads(mean_squared, 1024.0).abs().max()


@pytest.mark.parametrize("seed", [0, 1])
def test_pure_fp16_stops_learning_without_scaling(seed):
    flat = train_pure_fp16(num_steps=12, seed=seed)
    scaled = train_pure_fp16(scale=1024.0, num_steps=12, seed=seed)
    assert flat[0] == scaled[0]
    assert flat[-1] / flat[0] > 0.9
    assert scaled[-1] / scaled[0] < 1e-2


def test_pure_fp16_scale_too_large_overflows():
    losses = train_pure_fp16(scale=2.0**16, num_steps=2)  # 65536 is inf in fp16
    assert math.isfinite(losses[0]) and math.isnan(losses[1])


# ---- swamping ----------------------------------------------------------------------


def test_swamping_fp16():
    s = swamping()
    one = torch.tensor(1.0, dtype=torch.float16)
    tiny = torch.tensor(1e-4, dtype=torch.float16)
    assert (one + tiny).item() == 1.0 and s.one_step == 1.0 and s.swamped
    assert s.low_precision == 1.0  # a thousand updates, none landed
    assert s.exact == 1.0 + 1000 * 1e-4
    gap32 = 2.0**-23
    assert abs(s.master - s.exact) < 1000 * gap32 / 2  # fp32: each add off by <= 1/2
    assert s.master - 1.0 > 0.0999


def test_swamping_depends_on_the_gap():
    assert not swamping(update=1e-3).swamped  # 1e-3 > half of fp16's 2**-10 gap
    assert swamping(update=1e-3).one_step == 1.0009765625
    assert swamping(update=1e-3, fmt="bf16").swamped  # bf16's gap above 1: 2**-7
    s = swamping(update=1e-4, fmt="fp32")
    assert not s.swamped and s.low_precision == s.master
    s = swamping(weight=1.0, update=0.03, fmt="fp8_e4m3", num_steps=5)
    assert s.swamped and s.low_precision == 1.0  # e4m3's gap above 1 is 0.125


# ---- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: cast_outcome(torch.ones(2), fmt="float16"), "fp16, bf16"),
        (lambda: cast_outcome(torch.ones(2), fmt="tf32"), "no torch storage dtype"),
        (lambda: underflow_fraction(torch.ones(2), scale=0.0), "positive"),
        (lambda: underflow_fraction(torch.ones(2), scale=-2.0), "positive"),
        (lambda: underflow_fraction(torch.ones(2), scale=math.inf), "finite"),
        (lambda: underflow_fraction(torch.ones(2), scale=math.nan), "finite"),
        (lambda: underflow_fraction(torch.ones(2), scale="8"), "number"),
        (lambda: cast_outcome([1e-3]), "tensor"),
        (lambda: cast_outcome(torch.tensor([1.0, math.nan])), "nan"),
        (lambda: swamping(fmt="fp64"), "fp16"),
        (lambda: swamping(update=math.inf), "finite"),
        (lambda: swamping(num_steps=0), "num_steps"),
        (lambda: train_pure_fp16(scale=-1.0), "positive"),
        (lambda: train_pure_fp16(num_steps=0), "num_steps"),
        (lambda: backward_demo(depth=0), "depth"),
    ],
)
def test_bad_input_is_explained(call, words):
    with pytest.raises(ValueError, match=words):
        call()
