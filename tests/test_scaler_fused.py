"""LossScaler against torch.amp.GradScaler in real code: fused optimizers, a GAN step,
a gradient penalty and an LR scheduler with skipped steps, bit for bit.

tests/test_scaler.py already runs its scripted overflows with the fused optimizers
(the OPTIMIZERS table of tests/scaler_twins.py); here are the cases special to them,
and the lesson-09 loops (amp_lessons.teaching.practice) run once per scaler and
compared. Each comparison is shown to fail on a plausible wrong implementation of the
fused path.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from scaler_twins import (
    Mismatch,
    assert_same,
    assert_twins,
    make_model,
    signalling_nan,
)
from torch import nn

from amp_lessons.core.formats import tensor_bits
from amp_lessons.core.scaler import LossScaler, OptState
from amp_lessons.teaching import practice

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

INF, NAN = math.inf, math.nan
FUSED = ["adam_fused", "adamw_fused", "sgd_fused", "adagrad_fused"]
# Overflows at steps an interval of 3 lets us reason about, from a scale of 2**10
# that this model never overflows by itself.
OVERFLOWS = {1: [("loss", INF)], 3: [("grad", 0, NAN)], 4: [("grad", 0, -INF)]}
ODD = {"init_scale": 1000.1, "growth_factor": 1.1, "backoff_factor": 0.3,
       "growth_interval": 2}  # fmt: skip


def test_torch_has_fused_cpu_kernels_for_these_optimizers():
    # What the tests below rely on: fused=True exists on the CPU in this torch.
    params = [nn.Parameter(torch.ones(2))]
    for cls in (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD,
                torch.optim.Adagrad):  # fmt: skip
        assert cls(params, lr=0.1, fused=True)._step_supports_amp_scaling


# ---- the scripted runs of test_scaler, fused --------------------------------------


@pytest.mark.parametrize("optimizer", FUSED)
@pytest.mark.parametrize("kwargs", [{"init_scale": 2.0**10, "growth_interval": 3}, ODD],
                         ids=["powers_of_two", "odd_factors"])  # fmt: skip
def test_fused_step_without_unscale(optimizer, kwargs):
    # The scaler only checks; the fused kernel divides by grad_scale itself. With a
    # scale that is not a power of two, a division and a multiplication by 1/scale
    # differ in the last bit: this would catch unscaling on the scaler's side.
    trace = assert_twins(optimizer=optimizer, scaler_kwargs=kwargs,
                         inject=OVERFLOWS, num_steps=8)  # fmt: skip
    assert len({snap["scale"] for snap in trace}) > 2


@pytest.mark.parametrize("optimizer", FUSED)
def test_fused_clipping_after_unscale(optimizer):
    # unscale_ first: the scaler unscales (multiply by 1/scale) and the fused step
    # gets grad_scale=None and the found_inf flag.
    assert_twins(optimizer=optimizer, scaler_kwargs=ODD, inject=OVERFLOWS,
                 clip=0.05, num_steps=8)  # fmt: skip


@pytest.mark.parametrize("optimizer", ["adam_fused", "sgd_fused"])
def test_fused_accumulation_and_two_optimizers(optimizer):
    assert_twins(
        optimizer=optimizer,
        num_optimizers=2,
        accumulate=2,
        scaler_kwargs={"init_scale": 2.0**10, "growth_interval": 2},
        inject={2: [("grad", 1, INF)], 4: [("grad", 0, NAN)]},
        num_steps=6,
    )


def test_a_fused_step_that_skips_still_calls_the_optimizer():
    # The fused kernel skips inside: optimizer.step runs, so Adam's state exists
    # (step 0) after an overflow on the very first step. A scaler that skipped the
    # call, as for a plain optimizer, would leave it empty: the twins must differ.
    trace = assert_twins(optimizer="adam_fused", inject={0: [("loss", INF)]},
                         num_steps=1)  # fmt: skip
    state = trace[0]["optimizer_state"][0]
    zero = tensor_bits(torch.tensor(0.0))
    assert state and all(s["step"] == zero for s in state.values())
    plain = assert_twins(optimizer="adam", inject={0: [("loss", INF)]}, num_steps=1)
    assert plain[0]["optimizer_state"] == [{}]


def _wrong_fused_steps():
    def unscale_first(self, optimizer, record, *args, **kwargs):
        # unscale by 1/scale, then hand over no scale: bits differ from torch's
        if record.stage is OptState.READY:
            self.unscale_(optimizer)
        return original(self, optimizer, record, *args, **kwargs)

    def skip_on_inf(self, optimizer, record, *args, **kwargs):
        if record.stage is OptState.READY:
            record.found_inf = self._check_grads(optimizer, None)
        if record.found_inf.item():
            record.stage = OptState.STEPPED
            return None
        return original(self, optimizer, record, *args, **kwargs)

    original = LossScaler._fused_step
    return {"unscale_first": unscale_first, "skip_on_inf": skip_on_inf}


@pytest.mark.parametrize("name", ["unscale_first", "skip_on_inf"])
def test_the_fused_comparison_fails_on_a_wrong_fused_path(name, monkeypatch):
    # (an overflow at step 0: skipping the call leaves Adam's state uncreated)
    script = dict(optimizer="adam_fused", scaler_kwargs=ODD, num_steps=6,
                  inject={0: [("loss", INF)], **OVERFLOWS})  # fmt: skip
    assert_twins(**script)
    monkeypatch.setattr(LossScaler, "_fused_step", _wrong_fused_steps()[name])
    with pytest.raises(Mismatch):
        assert_twins(**script)


# ---- fused details ----------------------------------------------------------------


def _fused_setup(scaler_cls, dtype=torch.float32):
    model = make_model(dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    scaler = scaler_cls("cpu", init_scale=1000.1)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)).to(dtype)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    return model, optimizer, scaler


@pytest.mark.parametrize("cls", [torch.amp.GradScaler, LossScaler])
def test_grad_scale_and_found_inf_are_set_only_for_the_call(cls):
    model, optimizer, scaler = _fused_setup(cls)
    seen = {}
    original = optimizer.step

    def spy(*args, **kwargs):
        seen["grad_scale"] = optimizer.grad_scale.item()
        seen["found_inf"] = optimizer.found_inf.item()
        return original(*args, **kwargs)

    optimizer.step = spy
    scaler.step(optimizer)
    assert seen == {"grad_scale": scaler.get_scale(), "found_inf": 0.0}
    assert not hasattr(optimizer, "grad_scale") and not hasattr(optimizer, "found_inf")


def test_a_grad_scale_set_by_the_caller_is_multiplied_in():
    results = {}
    for name, cls in (("torch", torch.amp.GradScaler), ("ours", LossScaler)):
        model, optimizer, scaler = _fused_setup(cls)
        optimizer.grad_scale = torch.tensor(4.0)
        scaler.step(optimizer)
        scaler.update()
        results[name] = [tensor_bits(p) for p in model.parameters()]
    assert_same(results["torch"], results["ours"])


def test_fp16_gradients_are_allowed_on_the_fused_path_only():
    # model.half() with a fused optimizer: torch's step() only looks for inf/nan
    # (fp16 allowed); an explicit unscale_ still refuses fp16 gradients.
    results = {}
    for name, cls in (("torch", torch.amp.GradScaler), ("ours", LossScaler)):
        model, optimizer, scaler = _fused_setup(cls, torch.float16)
        scaler.step(optimizer)
        scaler.update()
        results[name] = [tensor_bits(p) for p in model.parameters()]
        model, optimizer, scaler = _fused_setup(cls, torch.float16)
        with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
            scaler.unscale_(optimizer)
    assert_same(results["torch"], results["ours"])


def test_the_deprecated_grad_scaler_argument_is_refused_clearly():
    class OldStyle(torch.optim.SGD):
        _step_supports_amp_scaling = True

        def step(self, closure=None, grad_scaler=None):
            return super().step(closure)

    model = make_model()
    optimizer = OldStyle(model.parameters(), lr=0.1)
    scaler = LossScaler("cpu")
    scaler.scale(model(torch.ones(2, 6)).sum()).backward()
    with pytest.raises(NotImplementedError, match="grad_scale and self.found_inf"):
        scaler.step(optimizer)


def test_the_attributes_are_removed_even_when_the_step_raises():
    model, optimizer, scaler = _fused_setup(LossScaler)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    optimizer.step = broken
    with pytest.raises(RuntimeError, match="boom"):
        scaler.step(optimizer)
    assert not hasattr(optimizer, "grad_scale") and not hasattr(optimizer, "found_inf")


# ---- lesson 09's loops, once per scaler ---------------------------------------------


def _gan_twins(**kwargs):
    runs = {}
    for name, cls in (("torch", torch.amp.GradScaler), ("ours", LossScaler)):
        scaler = cls("cpu", init_scale=2.0**10, growth_interval=2)
        runs[name] = practice.train_gan(scaler, **kwargs)
    assert_same(runs["torch"].history, runs["ours"].history)
    assert runs["torch"].d_losses == runs["ours"].d_losses
    assert runs["torch"].g_losses == runs["ours"].g_losses
    return runs["torch"]


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_gan_step_two_losses_two_optimizers_one_scaler(fused):
    run = _gan_twins(num_steps=7, fused=fused, overflow={2: "d", 5: "g"})
    # 2: D overflowed: D skipped, G stepped, the shared scale halved; same at 5.
    assert run.scales == [1024, 1024, 512, 512, 1024, 512, 512]
    before, after = run.history[0]["params"], run.history[1]["params"]
    generator_params = len(list(practice.make_gan()[0].parameters()))
    assert not all(map(torch.equal, before[:generator_params],
                       after[:generator_params]))  # fmt: skip
    assert all(map(torch.equal, before[generator_params:], after[generator_params:]))


def test_gan_twins_differ_when_ours_is_wrong(monkeypatch):
    # The GAN comparison is not vacuous: a scaler that backs off only when the LAST
    # optimizer overflowed (here G is stepped last, the overflow is in D) differs.
    def last_only(self):
        records = list(self._per_optimizer_states.values())
        return bool(records[-1].found_inf.item())

    monkeypatch.setattr(LossScaler, "_found_inf_in_any_optimizer", last_only)
    with pytest.raises(Mismatch):
        _gan_twins(num_steps=4, overflow={2: "d"})


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_gradient_penalty(fused):
    # autograd.grad on the scaled loss with create_graph=True, unscaled by hand; the
    # first steps overflow (2**20), so the scaler's backoff is in the run too.
    runs = {
        name: practice.penalty_run(
            cls("cpu", init_scale=2.0**20, growth_interval=2), 8, fused=fused
        )
        for name, cls in (("torch", torch.amp.GradScaler), ("ours", LossScaler))
    }
    assert_same(runs["torch"], runs["ours"])
    scales = [r["scale"] for r in runs["torch"]]
    assert scales[0] < 2.0**20 and max(scales[4:]) > min(scales)  # backed off, grew


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_lr_scheduler_with_skipped_steps(fused):
    runs = {}
    for name, cls in (("torch", torch.amp.GradScaler), ("ours", LossScaler)):
        runs[name] = practice.scheduled_run(cls("cpu", init_scale=2.0**17),
                                            num_steps=8, fused=fused)  # fmt: skip
    assert runs["torch"] == runs["ours"]
    assert runs["torch"].skipped[:3] == [True] * 3 and runs["torch"].num_skipped == 3
    # A plain optimizer's first step was skipped, so the scheduler warns; a fused
    # one is always called (it skips inside its kernel), so it does not.
    warned = any("lr_scheduler.step()" in w for w in runs["torch"].warnings)
    assert warned is not fused


def test_scheduler_twins_with_parameters_compared():
    # scheduled_run compares lrs and skips; here the weights too, with fused Adam.
    results = {}
    for name, cls in (("torch", torch.amp.GradScaler), ("ours", LossScaler)):
        torch.manual_seed(0)
        model = nn.Linear(8, 1)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 / (k + 1))
        scaler = cls("cpu", init_scale=2.0**18)
        gen = torch.Generator().manual_seed(2)
        for _ in range(6):
            x = torch.randn(16, 8, generator=gen)
            with torch.amp.autocast("cpu", dtype=torch.float16):
                loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
        results[name] = ([tensor_bits(p) for p in model.parameters()],
                         scaler.get_scale(), scheduler.get_last_lr())  # fmt: skip
    assert_same(results["torch"], results["ours"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_fused_look_rewrites_16_bit_nans_as_torch_does(dtype):
    # torch's fused step looks for inf/nan with its unscale kernel and a dummy scale
    # of 1: fp16 and bf16 gradients make a float32 round trip, which rewrites their
    # NaNs (bf16's to 0x7fc0 or 0xffff, by code path). Ours must leave the same bits.
    injected = signalling_nan(dtype)
    trace = assert_twins(optimizer="adam_fused", model_dtype=dtype,
                         inject={1: [("grad", 0, injected)]}, num_steps=2)  # fmt: skip
    assert trace[1]["grads"][0].view(-1)[0] != tensor_bits(injected)  # rewritten
