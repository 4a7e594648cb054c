"""Tests for amp_lessons.teaching.compiled: the timing record's arithmetic, eager and
compiled results compared, and the autocast-disabled-region bug of this torch with its
fix."""

import functools
import math

import pytest
import torch

from amp_lessons.teaching import compiled as cp

pytestmark = pytest.mark.usefixtures("one_thread")


def test_break_even_arithmetic():
    timing = cp.CompileTiming(first_call_s=2.0, eager_s=0.003, compiled_s=0.001,
                              max_diff=0.0, bit_identical=True)  # fmt: skip
    assert timing.speedup == pytest.approx(3.0)
    # the first call costs 2 s instead of 1 ms; each later one saves 2 ms
    assert timing.break_even_calls == pytest.approx((2.0 - 0.001) / 0.002)
    slower = cp.CompileTiming(2.0, 0.001, 0.002, 0.0, True)
    assert slower.break_even_calls == math.inf


def test_time_compile_compares_what_the_calls_returned():
    # the eager backend: dynamo traces, nothing is compiled, results are the same
    timing = cp.time_compile(cp.gelu_chain, torch.randn(1000), backend="eager",
                             repeats=2, number=2)  # fmt: skip
    assert timing.bit_identical and timing.max_diff == 0.0
    assert timing.first_call_s > 0 and timing.eager_s > 0 and timing.compiled_s > 0


def test_gelu_chain_is_gelu():
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    expected = torch.nn.functional.gelu(x, approximate="tanh").sum()
    assert cp.gelu_chain(x).item() == pytest.approx(expected.item(), rel=1e-12)


def test_amp_step_is_repeatable_and_runs_under_autocast():
    model = cp.small_mlp()
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(0))
    first, second = cp.amp_step(model, x), cp.amp_step(model, x)
    assert all(map(torch.equal, first, second))
    assert [t.dtype for t in first] == [torch.float32] * 5  # loss, then fp32 grads
    timing = cp.time_compile(functools.partial(cp.amp_step, model), x,
                             backend="aot_eager", repeats=1, number=1)  # fmt: skip
    assert timing.max_diff < 1e-2


@pytest.mark.slow
def test_disabled_region_bug_and_its_fix():
    import torch._functorch.config as functorch_config

    # the bug depends on this torch's default; if a later torch changes it, the
    # first assert tells so
    assert functorch_config.backward_pass_autocast == "same_as_forward"
    assert cp.disabled_region_grads() is False
    assert cp.disabled_region_grads("same_as_forward") is False
    assert cp.disabled_region_grads("off") is True
    assert functorch_config.backward_pass_autocast == "same_as_forward"  # restored
    assert cp.backward_pass_autocast() == "same_as_forward"


@pytest.mark.slow
def test_same_as_forward_is_eager_with_backward_inside_autocast():
    # what lesson 09 teaches: "same_as_forward" traces the backward as if backward()
    # ran inside the autocast block; "off" as eager AMP code runs it, after the block
    after = cp.disabled_region_grad()
    inside = cp.disabled_region_grad(backward_under_autocast=True)
    assert not torch.equal(after, inside)
    assert torch.equal(cp.disabled_region_grad(True, "same_as_forward"), inside)
    assert torch.equal(cp.disabled_region_grad(True, "off"), after)
    assert after.dtype == inside.dtype == torch.float32
