"""Tests for amp_lessons.teaching.clinic: each reproduction against the same thing
written directly with torch, and the symptoms (clinic.SYMPTOMS) against what torch
raises."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.core import train as tr
from amp_lessons.teaching import autocast_table as ac
from amp_lessons.teaching import clinic as cl
from amp_lessons.teaching.clinic import SYMPTOMS

fp16, bf16 = torch.float16, torch.bfloat16


def _same(a: nn.Module, b: nn.Module) -> bool:
    pairs = zip(a.parameters(), b.parameters(), strict=True)
    return all(torch.equal(p, q) for p, q in pairs)


def test_data_is_seeded_and_raw_features_pass_fp16_max():
    x, y = cl.clinic_data()
    x_raw, y_raw = cl.clinic_data(raw=True)
    assert x.shape == (64, 16) and torch.equal(y, y_raw)
    assert torch.equal(x_raw, x * cl.RAW_SCALE)
    assert x.abs().max() < 5 < 65504 < x_raw.abs().max()
    assert set(y.tolist()) == {0, 1, 2}
    assert torch.equal(cl.clinic_data()[0], x)


def test_model_is_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b = cl.clinic_model(), cl.clinic_model()
    assert torch.equal(torch.rand(3), expected)
    assert _same(a, b)
    assert not torch.equal(cl.clinic_model(seed=1)[0].weight, a[0].weight)


def test_activation_report_matches_a_direct_forward_and_removes_its_hooks():
    model = cl.clinic_model()
    x_raw, _ = cl.clinic_data(raw=True)
    rows = cl.activation_report(model, x_raw)
    assert [(r.name, r.kind) for r in rows] == [
        ("0", "Linear"),
        ("1", "LayerNorm"),
        ("2", "ReLU"),
        ("3", "Linear"),
    ]
    with torch.no_grad():
        first = model[0](x_raw)
        assert rows[0].max_abs == first.abs().max().item()
        assert rows[-1].max_abs == model(x_raw).abs().max().item()
    assert [r.past_fp16 for r in rows] == [True, False, False, False]
    assert all(not m._forward_hooks for m in model.modules())
    rows16 = cl.activation_report(model, x_raw, fp16)
    assert [r.dtype for r in rows16] == [fp16] * 4  # CPU LayerNorm follows its input
    assert not rows16[0].finite and rows16[0].past_fp16
    # what autocast did, by hand: the cast input is already inf
    assert torch.isinf(x_raw.half()).any()


def test_run_in_fp32_is_the_plain_fp32_module_inside_autocast():
    layer = nn.Linear(4, 3)
    wrapped = cl.RunInFp32(layer)
    x = torch.randn(2, 4)
    with torch.amp.autocast("cpu", dtype=fp16):
        out = wrapped(x.half())  # an fp16 activation from the layer before
        plain = layer(x)
    assert out.dtype is torch.float32 and plain.dtype is fp16
    assert torch.equal(out, layer(x.half().float()))
    out.sum().backward()
    assert layer.weight.grad.dtype is torch.float32


def test_train_amp_fp32_is_plain_sgd():
    x, y = cl.clinic_data()
    run = cl.train_amp(cl.clinic_model(), x, y, num_steps=4, lr=0.1)
    model = cl.clinic_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(4):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert run.losses == losses and run.scales == [1.0] * 4
    assert run.skipped == [False] * 4


def test_train_amp_fp16_matches_the_course_training_step():
    x, y = cl.clinic_data()
    ours = cl.clinic_model()
    run = cl.train_amp(
        ours,
        x,
        y,
        fp16,
        num_steps=5,
        clip=1.0,
        scaler=torch.amp.GradScaler("cpu", growth_interval=2),
    )
    model = cl.clinic_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", growth_interval=2)
    ctx = torch.amp.autocast("cpu", dtype=fp16)
    stats = [
        tr.train_step(
            model, optimizer, scaler, ctx, [(x, y)], F.cross_entropy, clip=1.0
        )
        for _ in range(5)
    ]
    assert run.losses == [s.loss.item() for s in stats]
    assert run.scales == [s.scale for s in stats]
    assert run.grad_norms == [s.grad_norm.item() for s in stats]
    assert _same(ours, model)


def test_clipping_before_unscale_measures_scale_times_the_norm_and_stalls():
    x, y = cl.clinic_data()
    kwargs = dict(num_steps=5, clip=1.0)
    right = cl.train_amp(
        cl.clinic_model(), x, y, fp16, scaler=torch.amp.GradScaler("cpu"), **kwargs
    )
    wrong = cl.train_amp(
        cl.clinic_model(),
        x,
        y,
        fp16,
        scaler=torch.amp.GradScaler("cpu"),
        clip_before_unscale=True,
        **kwargs,
    )
    assert math.isclose(
        wrong.grad_norms[0] / right.grad_norms[0], 2.0**16, rel_tol=1e-2
    )
    assert right.losses[-1] < 0.9 * right.losses[0]
    assert wrong.losses[-1] > 0.999 * wrong.losses[0]


def test_nan_in_the_data_halves_the_scale_every_step_and_never_steps():
    x, y = cl.clinic_data()
    x[0, 0] = math.nan
    model = cl.clinic_model()
    run = cl.train_amp(
        model, x, y, fp16, num_steps=6, scaler=torch.amp.GradScaler("cpu")
    )
    assert run.scales == [2.0 ** (16 - k) for k in range(6)]
    assert run.skipped == [True] * 6 and all(map(math.isnan, run.losses))
    assert _same(model, cl.clinic_model())  # never stepped
    assert math.isnan(cl.train_amp(cl.clinic_model(), x, y, num_steps=1).losses[0])


def test_train_amp_refuses_bad_arguments():
    x, y = cl.clinic_data()
    with pytest.raises(ValueError, match="needs both clip= and scaler="):
        cl.train_amp(cl.clinic_model(), x, y, fp16, clip_before_unscale=True)
    with pytest.raises(ValueError, match="num_steps must be a positive int"):
        cl.train_amp(cl.clinic_model(), x, y, num_steps=0)
    with pytest.raises(ValueError, match="dtype must be torch.float16"):
        cl.train_amp(cl.clinic_model(), x, y, torch.float64)
    with pytest.raises(ValueError, match="dtype must be torch.float16"):
        cl.activation_report(cl.clinic_model(), x, torch.int8)
    fp32 = cl.activation_report(cl.clinic_model(), x, torch.float32)
    assert fp32 == cl.activation_report(cl.clinic_model(), x)


def _direct(actions):
    """torch's message for scaler calls written out by hand (no clinic code)."""
    param = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    try:
        for action in actions:
            if action == "backward":
                scaler.scale((param * 2).sum()).backward()
            else:
                getattr(scaler, action)(*(() if action == "update" else (optimizer,)))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize("name", [n for n, (_, half) in cl.MISUSES.items() if not half])
def test_misuse_errors_are_the_ones_torch_raises_directly(name):
    calls, _ = cl.MISUSES[name]
    result = cl.run_calls(calls)
    essential = [c for c in calls if c in ("backward", "unscale_", "step", "update")]
    assert result.error == _direct(essential)
    if result.error:
        assert len(result.done) < len(calls)
        assert result.failed.startswith(calls[len(result.done)])
    else:
        assert result.done == tuple(calls) and result.failed is None


def test_forgetting_update_fails_on_the_second_iteration_as_symptom_5_says():
    calls, _ = cl.MISUSES["forgot scaler.update(), loop with clipping"]
    result = cl.run_calls(calls)
    assert result.failed == "unscale_ (iteration 2)"
    assert any(s.endswith(result.error) and "second iteration" in s for s in SYMPTOMS)


def test_where_a_misuse_stopped_is_shown_in_the_learners_language(spanish):
    calls, _ = cl.MISUSES["forgot scaler.update(), loop with clipping"]
    result = cl.run_calls(calls)
    assert result.failed == "unscale_ (iteration 2)"  # the key lesson 07 asserts on
    assert result.failed_shown == "unscale_ (iteración 2)"
    right = cl.run_calls(cl.MISUSES["the right loop, two iterations"][0])
    assert right.failed is None and right.failed_shown is None


def test_half_model_error_is_symptom_2():
    result = cl.run_calls(*cl.MISUSES["model.half() with a GradScaler"])
    assert result.error == "ValueError: Attempting to unscale FP16 gradients."
    assert result.error in SYMPTOMS
    assert cl.run_calls(cl.MISUSES["the right loop, two iterations"][0]).error == ""


def test_run_calls_refuses_unknown_calls():
    with pytest.raises(ValueError, match="unknown calls"):
        cl.run_calls(["backward", "optimizer.step"])


def test_zero_grad_fraction_fp16_flushes_bf16_does_not():
    assert cl.zero_grad_fraction(fp16) > 0.5
    assert cl.zero_grad_fraction(bf16) == 0.0
    assert cl.zero_grad_fraction(fp16, scale=1024.0) == 0.0
    # the CPU fp16 mse_loss backward applies 2/N before the scaled gradient
    assert cl.zero_grad_fraction(fp16, scale=1024.0, mse_loss=True) > 0.5
    assert cl.zero_grad_fraction(torch.float32) == 0.0


def test_bce_error_under_cuda_autocast_is_symptom_8():
    # a real GPU when there is one, else CUDA's autocast kernels on fake tensors
    (row,) = ac.autocast_dtype_table("cuda", fp16, ops=["binary_cross_entropy"])
    assert row.error in SYMPTOMS
