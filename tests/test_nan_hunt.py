"""Tests for amp_lessons.core.nan_hunt: the detector against direct forwards, anomaly
mode against torch's own error, the bisection's logic, the T5-like overflow and the
masks."""

import math
import warnings

import pytest
import torch
import torch.nn as nn

from amp_lessons.core import nan_hunt as nh

fp16, bf16 = torch.float16, torch.bfloat16
pytestmark = pytest.mark.usefixtures("one_thread")


def test_detector_names_the_first_leaf_whose_output_overflows():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU())
    with torch.no_grad():
        for layer, value in ((model[0], 1.0), (model[2], 3e4)):
            layer.weight.fill_(value)
            layer.bias.zero_()
    x = torch.ones(2, 4)  # 4 after the first layer, 4 * 4 * 3e4 after the second
    with torch.no_grad():
        direct = model[2](model[1](model[0](x)))
    assert direct.abs().max() > 65504  # fp32: finite but past fp16's max
    with torch.no_grad(), nh.OverflowDetector(model) as detector:
        model(x)
    assert detector.first.name == "2" and detector.first.kind == "Linear"
    assert detector.first.max_abs == direct.abs().max().item()
    # later modules are recorded too, in the order they finished; the model is last
    assert [f.name for f in detector.findings] == ["2", "3", ""]
    assert all(not m._forward_hooks for m in model.modules())  # hooks removed


def test_a_parent_whose_own_add_overflows_is_named_not_the_next_layer():
    model, x = nh.t5_like_model().half(), nh.t5_like_inputs().half()
    found = nh.find_first_overflow(model, x, dtype=None)
    assert found.name == "blocks.2" and found.kind == "T5LikeBlock"
    assert not found.finite
    # the block's children were all finite: its residual add made the inf
    block, h = model.blocks[2], x
    with torch.no_grad():
        for earlier in model.blocks[:2]:
            h = earlier(h)
        ff = block.wo(block.act(block.wi(block.norm(h))))
        assert torch.isfinite(ff).all() and torch.isfinite(h).all()
        assert torch.isinf(h + ff).any()


def test_t5_like_model_overflows_in_fp16_only():
    model, x = nh.t5_like_model(), nh.t5_like_inputs()
    outputs = {}
    for dtype in (None, bf16, fp16):
        ctx = torch.amp.autocast("cpu", dtype=dtype or bf16, enabled=dtype is not None)
        with torch.no_grad(), ctx:
            outputs[dtype] = model(x)
    assert torch.isfinite(outputs[None]).all() and torch.isfinite(outputs[bf16]).all()
    assert torch.isnan(outputs[fp16]).any()
    found = nh.find_first_overflow(model, x)
    assert (found.name, found.dtype, found.finite) == ("blocks.3.wo", fp16, False)
    assert nh.find_first_overflow(model, x, bf16) is None
    # what fp32 shows: the residual stream of block 2 is already past 65504
    assert nh.find_first_overflow(model, x, dtype=None).max_abs > 65504
    # the fix transformers uses for T5: wo in fp32
    fixed = nh.t5_like_model(keep_wo_fp32=True)
    assert nh.find_first_overflow(fixed, x) is None


def test_threshold_and_dtype_filter():
    model = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.fill_(100.0)
        model[0].bias.zero_()
    x = torch.ones(1, 2)  # output 200
    assert nh.find_first_overflow(model, x, dtype=None) is None
    assert nh.find_first_overflow(model, x, dtype=None, threshold=150).name == "0"
    # under fp16 autocast the threshold applies to fp16 outputs; 200 < 65504
    assert nh.find_first_overflow(model, x, fp16, threshold=150).dtype == fp16
    with torch.no_grad(), nh.OverflowDetector(model, 150, dtype=bf16) as detector:
        model(x)  # fp32 output: not watched
    assert detector.first is None


def test_outputs_in_tuples_and_dicts_are_checked():
    class Pair(nn.Module):
        def forward(self, x):
            return {"ok": x, "bad": (x * 0, x * math.inf)}

    with nh.OverflowDetector(Pair()) as detector:
        Pair.__call__(detector.model, torch.ones(2))
    assert detector.first.name == "" and not detector.first.finite
    assert str(detector.first) == "(the model) (Pair, torch.float32): inf/nan"


def test_detector_refuses_bad_arguments():
    with pytest.raises(TypeError, match="nn.Module"):
        nh.OverflowDetector(lambda x: x)
    with pytest.raises(ValueError, match="positive number"):
        nh.OverflowDetector(nn.ReLU(), threshold=0)


def test_anomaly_report_agrees_with_torch():
    x = torch.zeros(3, requires_grad=True)

    def step():
        x.pow(2).sum().sqrt().backward()

    op, line = nh.anomaly_report(step)
    with warnings.catch_warnings():  # anomaly mode warns with the forward trace
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match=f"Function '{op}' returned nan"):
            with torch.autograd.detect_anomaly():
                step()
    assert "x.pow(2).sum().sqrt().backward()" in line
    assert nh.anomaly_report(lambda: torch.ones(2, requires_grad=True).sum()
                             .backward()) is None  # fmt: skip


def test_anomaly_report_finds_the_fp16_underflow_behind_a_norm():
    torch.manual_seed(0)
    model = nn.Linear(8, 8, bias=False)
    x = torch.randn(4, 8) * 1e-4  # squares near 1e-8: below fp16's 6e-8, to 0

    def step(dtype):
        with torch.amp.autocast("cpu", dtype=dtype):
            loss = nh.norm_loss(model(x))
        loss.backward()

    op, line = nh.anomaly_report(lambda: step(fp16))
    assert op == "MmBackward0" and "nh.norm_loss(model(x))" in line
    model.zero_grad()
    assert nh.anomaly_report(lambda: step(bf16)) is None


def test_anomaly_report_reraises_other_errors():
    with pytest.raises(RuntimeError, match="boom"):
        nh.anomaly_report(lambda: (_ for _ in ()).throw(RuntimeError("boom")))


@pytest.mark.parametrize("healthy, culprit, trials", [
    (lambda a, s: True, "none", [(True, True)]),
    (lambda a, s: not a, "autocast", [(True, True), (False, True)]),
    (lambda a, s: not s, "scaler", [(True, True), (False, True), (False, False)]),
    (lambda a, s: False, "not_amp", [(True, True), (False, True), (False, False)]),
])  # fmt: skip
def test_bisect_amp(healthy, culprit, trials):
    result = nh.bisect_amp(healthy)
    assert result.culprit == culprit
    assert [t[:2] for t in result.trials] == trials
    assert result.verdict == nh.Bisection.VERDICTS[culprit]


def test_amp_trial_and_bisection_on_three_real_problems():
    def tiny():
        return nn.Linear(8, 8, bias=False)

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    # fp16 underflow in the backward of a norm: broken with autocast only
    underflow = nh.amp_trial(tiny, x * 1e-4)
    assert (underflow(True, True), underflow(True, False)) == (False, False)
    assert underflow(False, True) and underflow(False, False)
    assert nh.bisect_amp(underflow).culprit == "autocast"
    # a NaN in the data: broken in fp32 without a scaler too
    bad = x.clone()
    bad[0, 0] = math.nan
    assert nh.bisect_amp(nh.amp_trial(tiny, bad)).culprit == "not_amp"
    # healthy data: nothing to hunt
    assert nh.bisect_amp(nh.amp_trial(tiny, x)).culprit == "none"


def test_mask_outcomes_match_torch_casts_and_softmax():
    outcomes = {o.fill: o for o in nh.mask_outcomes(fp16)}
    assert set(outcomes) == set(nh.MASK_FILLS)
    for name, fill in nh.MASK_FILLS.items():
        assert outcomes[name].stored == torch.tensor(fill).to(fp16).item()
    # -1e15 and float32's min are -inf in fp16, like -inf itself: the padding row
    # (every key masked) is nan; float16's min is finite but min + (-17) is -inf
    nan = {name for name, o in outcomes.items() if o.nan_rows}
    assert nan == {"float('-inf')", "-1e15", "torch.finfo(torch.float32).min",
                   "torch.finfo(torch.float16).min"}  # fmt: skip
    assert (
        torch.tensor(torch.finfo(fp16).min, dtype=fp16)
        + torch.tensor(-17.0, dtype=fp16)
        == -math.inf
    )
    # the same additive masks in fp32: only -inf itself gives nan
    fp32 = {o.fill for o in nh.mask_outcomes(torch.float32) if o.nan_rows}
    assert fp32 == {"float('-inf')"}
    # masked_fill (no addition): only -inf itself makes a nan, and torch refuses
    # the fills fp16 cannot hold instead of turning them into -inf
    filled = {o.fill: o for o in nh.mask_outcomes(fp16, how="fill")}
    assert {n for n, o in filled.items() if o.nan_rows} == {"float('-inf')"}
    refused = {n for n, o in filled.items() if o.error}
    assert refused == {"-1e15", "torch.finfo(torch.float32).min"}
    with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half"):
        torch.zeros(2, dtype=fp16).masked_fill(torch.tensor([True, False]), -1e15)
    assert filled["torch.finfo(torch.float16).min"].padded_row_finite


def test_masked_softmax_against_a_direct_computation():
    scores, keep = nh.attention_scores(torch.float32)
    got = nh.masked_softmax(scores, keep, -1e4)
    expected = torch.softmax(torch.where(keep, scores, scores - 1e4), dim=-1)
    assert torch.allclose(got, expected)
    assert torch.allclose(got[1, :2].sum(), torch.tensor(1.0))
    with pytest.raises(ValueError, match="'add' or 'fill'"):
        nh.masked_softmax(scores, keep, -1e4, how="multiply")


def test_t5_like_model_is_seeded_and_leaves_the_rng_alone():
    state = torch.random.get_rng_state()
    a, b = nh.t5_like_model(), nh.t5_like_model()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(map(torch.equal, a.parameters(), b.parameters()))
    assert not torch.equal(nh.t5_like_model(seed=1).head.weight, a.head.weight)


def test_doctests():
    import doctest

    results = doctest.testmod(nh)
    assert results.attempted > 8 and results.failed == 0
