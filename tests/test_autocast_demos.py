"""amp_lessons.teaching.autocast_demos: dtype traces, nested regions, custom functions,
casts.

Expected dtypes come from direct runs of torch ops under torch.amp.autocast and from
PyTorch's documented autocast behaviour, never from the module under test.
"""

import pytest
import torch
import torch.nn.functional as F

from amp_lessons.teaching import autocast_demos as ad

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def test_trace_dtypes_forward_backward():
    model, x, y = ad.tiny_model(), torch.randn(2, 8), torch.tensor([0, 3])
    trace = ad.trace_dtypes(model, x, y, BF16)
    # Linear -> LayerNorm -> ReLU -> Linear: all bf16 on CPU (layer_norm follows)
    assert trace.forward == [("0", BF16), ("1", BF16), ("2", BF16), ("3", BF16)]
    assert trace.loss == FP32
    assert trace.backward == [("3", BF16), ("2", BF16), ("1", BF16), ("0", BF16)]
    assert set(trace.params.values()) == {FP32} == set(trace.grads.values())
    # hooks do not change the numbers: same grads as a plain AMP step
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    with torch.amp.autocast("cpu", dtype=BF16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    for name, param in model.named_parameters():
        assert torch.equal(param.grad, grads[name]), name
    with pytest.raises(ValueError):
        ad.trace_dtypes(model, x, y, FP32)


def test_nested_regions_and_query_functions():
    states = ad.nested_regions("cpu", BF16)
    got = [(s.enabled, s.dtype, s.matmul) for s in states]
    assert got == [
        (False, BF16, FP32),  # outside: CPU's default autocast dtype is bf16
        (True, BF16, BF16),
        (False, BF16, FP32),  # disabled region, h.float() @ w
        (False, BF16, None),  # disabled region, bf16 h @ fp32 w raises
        (True, FP16, FP16),
        (True, BF16, BF16),
        (False, BF16, FP32),
    ]
    assert "same dtype" in states[3].error
    assert not torch.is_autocast_enabled("cpu")


def test_custom_function_variants():
    plain, custom, fp32 = ad.custom_function_demo("cpu", BF16)
    assert plain.forward_inputs == (BF16, FP32) and plain.forward_autocast
    assert plain.output == BF16
    assert plain.backward_autocast is False and "same dtype" in plain.error
    assert custom.backward_autocast is True and custom.error == ""
    assert (custom.x_grad, custom.w_grad) == (BF16, FP32)  # each grad matches its leaf
    assert fp32.forward_inputs == (FP32, FP32) and not fp32.forward_autocast
    assert fp32.output == FP32 and fp32.backward_autocast is False
    assert (fp32.x_grad, fp32.w_grad) == (BF16, FP32)
    with pytest.raises(ValueError, match="variant"):
        ad.make_matmul_function("cpu", "fancy")


def test_custom_fwd_cast_inputs_matches_an_fp32_matmul():
    fn = ad.make_matmul_function("cpu", "custom_fwd(cast_inputs=float32)")
    x, w = torch.randn(2, 3).to(BF16), torch.randn(3, 4)
    with torch.amp.autocast("cpu", dtype=BF16):
        out = fn.apply(x, w, ad.FunctionLog())
    assert torch.equal(out, x.float() @ w)


def test_record_casts_shows_the_weight_cache():
    model, x = torch.nn.Linear(4, 3), torch.randn(2, 4)

    def twice(cache):
        with torch.amp.autocast("cpu", dtype=BF16, cache_enabled=cache):
            model(x)
            model(x)

    cached = ad.record_casts(lambda: twice(True))
    uncached = ad.record_casts(lambda: twice(False))
    shapes = [c.shape for c in cached]
    assert sorted(shapes) == sorted([(3, 4), (3,), (2, 4), (2, 4)])
    assert sorted(c.shape for c in uncached) == sorted([(3, 4), (3,), (2, 4)] * 2)
    assert {(c.source, c.target) for c in cached} == {(FP32, BF16)}
    assert ad.record_casts(lambda: model(x)) == []  # no autocast, no casts
