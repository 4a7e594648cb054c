"""LossScaler against torch.amp.GradScaler: bit-identical runs and the same errors.

The harness (tests/scaler_twins.py) trains the same tiny fp16-autocast model twice,
once per scaler, from the same seed and data, with scripted overflows, and records
after every iteration the scale, the growth tracker, the state_dict, what step()
returned, and the bits of every parameter, gradient and optimizer-state tensor. The
two records must be identical. `test_harness_catches_wrong_scalers` shows the harness
fails on plausible mistakes.
"""

from __future__ import annotations

import copy
import doctest
import math
import pickle
import warnings
from collections.abc import Callable

import pytest
import torch
from scaler_twins import (
    OPTIMIZERS,
    SCALERS,
    Mismatch,
    assert_same,
    assert_twins,
    make_model,
    signalling_nan,
    snapshot,
    train,
)
from torch import nn

from amp_lessons.core import scaler as scaler_module
from amp_lessons.core.formats import tensor_bits
from amp_lessons.core.scaler import (
    LossScaler,
    next_scale,
    round_to_float32,
    unscale_grads_,
)

INF, NAN = math.inf, math.nan


# ---- reading the harness's records (tests/scaler_twins.py runs them) ---------------


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def scales(trace) -> list[float]:
    return [snap["scale"] for snap in trace]


def same_tensors(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# Overflow of every kind, at steps an interval of 3 lets us reason about.
MIXED_OVERFLOWS = {
    1: [("loss", INF)],  # inf loss: inf and nan gradients everywhere
    3: [("grad", 0, NAN)],
    4: [("grad", 0, -INF)],  # only a min catches this one
    8: [("grad", 0, INF)],
}


# ---- bit-identical runs ------------------------------------------------------------


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_same_run_as_torch_with_overflows(optimizer):
    trace = assert_twins(optimizer=optimizer, inject=MIXED_OVERFLOWS, num_steps=10)
    # The script did what it says: 4 backoffs from 2**16, and real steps otherwise.
    assert scales(trace)[-1] == 2.0**16 / 2**4
    assert not same_tensors(trace[0]["params"], trace[-1]["params"])


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam"])
def test_same_run_as_torch_on_cuda(optimizer):
    trace = assert_twins(
        optimizer=optimizer,
        device="cuda",
        scaler_kwargs={"init_scale": 3000.0, "growth_interval": 3},
        inject=MIXED_OVERFLOWS,
        num_steps=10,
    )
    assert len(set(scales(trace))) > 2


def test_growth_at_the_interval():
    trace = assert_twins(
        scaler_kwargs={"init_scale": 4.0, "growth_interval": 3},
        inject={4: [("grad", 0, NAN)]},
        num_steps=12,
    )
    # grow after steps 2; back off at 4; the count restarts: grow after 7, 10.
    assert scales(trace) == [4, 4, 8, 8, 4, 4, 4, 8, 8, 8, 16, 16]
    assert [snap["growth_tracker"] for snap in trace][:5] == [1, 2, 0, 1, 0]


def test_natural_overflow_backs_off():
    # 2**24 is too big for this loss: real fp16 overflows in backward, no injection.
    trace = assert_twins(scaler_kwargs={"init_scale": 2.0**24}, num_steps=8)
    assert scales(trace)[:3] == [2.0**23, 2.0**22, 2.0**21]


def test_odd_hyperparameters():
    assert_twins(
        scaler_kwargs={
            "init_scale": 3000.0,
            "growth_factor": 3,
            "backoff_factor": 0.25,
            "growth_interval": 2,
        },
        inject=MIXED_OVERFLOWS,
        num_steps=10,
    )


def test_factors_whose_products_need_rounding_to_float32():
    # 1.1 and 0.3 are inexact in binary: every new scale is rounded to float32.
    trace = assert_twins(
        scaler_kwargs={
            "init_scale": 1000.1,
            "growth_factor": 1.1,
            "backoff_factor": 0.3,
            "growth_interval": 1,
        },
        inject={2: [("grad", 0, NAN)], 5: [("loss", INF)]},
        num_steps=8,
    )
    assert scales(trace)[0] == round_to_float32(round_to_float32(1000.1) * 1.1)


def test_growth_stops_short_of_float32_overflow():
    trace = assert_twins(
        scaler_kwargs={"init_scale": 2.0**126, "growth_interval": 1},
        inject={s: [("loss", 0.0)] for s in range(4)},  # zero gradients, no inf
        num_steps=4,
    )
    assert scales(trace) == [2.0**127] * 4  # 2**128 would be inf: kept at 2**127


def test_several_optimizers_only_one_overflows():
    trace = assert_twins(
        optimizer="sgd_momentum",
        num_optimizers=2,
        inject={2: [("grad", 1, INF)], 5: [("grad", 0, -INF)]},
        num_steps=7,
    )
    # At step 2 the first optimizer stepped and the second skipped; update()
    # backed off the shared scale all the same.
    before, after = trace[1]["params"], trace[2]["params"]
    assert not same_tensors(before[:4], after[:4])
    assert same_tensors(before[4:], after[4:])
    assert scales(trace)[2] == scales(trace)[1] / 2


def test_unscale_then_clip_grad_norm():
    assert_twins(clip=0.05, inject=MIXED_OVERFLOWS, optimizer="sgd", num_steps=10)


def test_explicit_unscale_then_step():
    assert_twins(unscale_first=True, inject=MIXED_OVERFLOWS, num_steps=10)


def test_gradient_accumulation():
    assert_twins(
        accumulate=3,
        scaler_kwargs={"growth_interval": 2},
        inject={2: [("loss", INF)], 4: [("grad", 0, NAN)]},
        num_steps=7,
    )


def test_scale_below_one_and_a_huge_finite_gradient():
    # 1e38 * 4 overflows after unscaling, but the *scaled* value was finite, so
    # torch steps (with an inf gradient). The check must look before multiplying.
    trace = assert_twins(
        optimizer="sgd",
        new_scale={0: 0.25},
        inject={2: [("grad", 0, 1e38)]},
        num_steps=4,
    )
    assert trace[2]["returned"] == [None] and scales(trace)[2] == 0.25


def test_bf16_gradients():
    # bf16 parameters: the unscale multiply runs in float32 and rounds to bf16.
    assert_twins(
        model_dtype=torch.bfloat16,
        optimizer="sgd",
        scaler_kwargs={"init_scale": 3000.0},
        inject={3: [("grad", 0, NAN)]},
        num_steps=6,
    )


@pytest.mark.parametrize("value", [1024.0, torch.tensor(300.0), torch.tensor(7.5e-3)])
def test_update_with_new_scale(value):
    trace = assert_twins(
        scaler_kwargs={"growth_interval": 3}, new_scale={2: value}, num_steps=6
    )
    assert scales(trace)[2] == round_to_float32(float(value))


def test_update_with_new_scale_as_other_dtypes():
    # copy_() converts: a float64 tensor and an fp16 tensor are accepted by torch.
    for value in [torch.tensor(0.1, dtype=torch.float64), torch.tensor(3.0).half()]:
        assert_twins(new_scale={1: value}, num_steps=3)


def test_disabled_is_a_pass_through():
    trace = assert_twins(
        scaler_kwargs={"enabled": False}, inject={2: [("grad", 0, 1.5)]}, num_steps=4
    )
    assert trace[0]["scale"] == 1.0 and trace[0]["state_dict"] == {}


def resume_with(scaler_cls: type) -> Callable:
    """Checkpoint the scaler and go on with a fresh one of scaler_cls."""

    def resume(scaler):
        state = pickle.loads(pickle.dumps(scaler.state_dict()))
        fresh = scaler_cls("cpu")
        fresh.load_state_dict(state)
        return fresh

    return resume


@pytest.mark.parametrize("first, then", [("torch", "ours"), ("ours", "torch")])
def test_state_dict_resume_across_implementations(first, then):
    script = {
        "scaler_kwargs": {
            "init_scale": 3000.0,
            "growth_factor": 3,
            "backoff_factor": 0.25,
            "growth_interval": 3,
        },
        "inject": MIXED_OVERFLOWS,
        "num_steps": 10,
    }
    expected = train(torch.amp.GradScaler, **script)
    # Resume at step 5, between a backoff and a growth: the tracker matters.
    resume = resume_with(SCALERS[then])
    resumed = train(SCALERS[first], after_update={5: resume}, **script)
    assert_same(expected, resumed)


def test_load_state_dict_into_a_used_scaler():
    state = {
        "scale": 512.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 3,
        "_growth_tracker": 10,
    }

    def load(scaler):
        scaler.load_state_dict(state)
        return scaler

    # A tracker past the interval never equals it: no growth until a backoff.
    trace = assert_twins(
        after_update={1: load}, inject={6: [("grad", 0, NAN)]}, num_steps=11
    )
    assert scales(trace)[2:] == [512.0] * 4 + [256.0] * 3 + [512.0] * 2


def stage(scaler, optimizer) -> str:
    record = scaler._per_optimizer_states[id(optimizer)]
    return (record["stage"] if isinstance(record, dict) else record.stage).name


def test_state_machine_stages_match_torch():
    seen = {}
    for name, cls in SCALERS.items():
        model, opt, scaler = fresh(cls)
        backward(model, scaler)
        seen[name] = [stage(scaler, opt)]
        scaler.unscale_(opt)
        seen[name].append(stage(scaler, opt))
        scaler.step(opt)
        seen[name].append(stage(scaler, opt))
        scaler.update()
        seen[name].append(stage(scaler, opt))
    assert seen["ours"] == seen["torch"] == ["READY", "UNSCALED", "STEPPED", "READY"]


def test_step_returns_what_optimizer_step_returns():
    for cls in SCALERS.values():
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = cls("cpu")
        scaler.scale(model(torch.ones(1, 6)).sum()).backward()
        assert scaler.step(optimizer, lambda: 42.0) == 42.0  # a positional closure
        scaler.update()
        scaler.scale(model(torch.ones(1, 6)).sum() * INF).backward()
        assert scaler.step(optimizer, lambda: 42.0) is None  # skipped


def test_unscale_and_update_without_step():
    for cls in SCALERS.values():
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = cls("cpu", growth_interval=1)
        scaler.scale(model(torch.ones(1, 6)).sum()).backward()
        scaler.unscale_(optimizer)
        scaler.update()
        assert scaler.get_scale() == 2.0**17


def test_sparse_gradients():
    def run(cls):
        torch.manual_seed(0)
        embedding = nn.Embedding(10, 4, sparse=True)
        optimizer = torch.optim.SGD(embedding.parameters(), lr=0.1)
        scaler = cls("cpu", init_scale=3000.0)
        out = []
        for step, ids in enumerate([[1, 2, 2], [3, 3, 9], [0, 1, 2]]):
            loss = embedding(torch.tensor(ids)).square().sum()
            scaler.scale(loss * (INF if step == 1 else 1)).backward()
            scaler.step(optimizer)
            scaler.update()
            out.append(snapshot(scaler, embedding, [optimizer], None))
            optimizer.zero_grad()
        return out

    assert_same(run(torch.amp.GradScaler), run(LossScaler))


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_empty_gradients():
    def run(cls):
        torch.manual_seed(0)
        empty, full = nn.Linear(0, 3), nn.Linear(3, 3)
        optimizers = [
            torch.optim.SGD(empty.parameters(), lr=0.1),  # weight (3, 0): no values
            torch.optim.SGD([empty.weight], lr=0.1),  # only empty gradients
            torch.optim.SGD(full.parameters(), lr=0.1),
        ]
        scaler = cls("cpu")
        out = []
        for step in range(3):
            loss = full(empty(torch.ones(2, 0))).sum() * (INF if step == 1 else 1)
            scaler.scale(loss).backward()
            out.append([scaler.step(opt) for opt in optimizers])
            scaler.update()
            out.append(snapshot(scaler, nn.Sequential(empty, full), optimizers, None))
            for opt in optimizers:
                opt.zero_grad()
        return out

    assert_same(run(torch.amp.GradScaler), run(LossScaler))


def test_scale_handles_tensors_and_nested_iterables():
    outputs = [torch.tensor(1.5), (torch.tensor([2.0, 3.0]), [torch.tensor(0.5)])]
    results = {}
    for name, cls in SCALERS.items():
        scaler = cls("cpu", init_scale=3.0)
        results[name] = (
            scaler.scale(torch.tensor(2.0).half()),
            scaler.scale(outputs),
            list(scaler.scale(t for t in [torch.tensor(1.0)])),  # lazy map
        )
    assert_same(results["torch"], results["ours"])
    assert isinstance(results["ours"][1][1], tuple)


def test_getters_setters_and_fresh_state_match_torch():
    for kwargs in [{}, {"init_scale": 0.1, "growth_factor": 3, "growth_interval": 7}]:
        twins = [cls("cpu", **kwargs) for cls in SCALERS.values()]
        for s in twins:
            s.set_growth_factor(4.0)
            s.set_backoff_factor(0.125)
            s.set_growth_interval(5)

        def view(s):
            return (
                s.get_scale(),
                s.get_growth_factor(),
                s.get_backoff_factor(),
                s.get_growth_interval(),
                s._get_growth_tracker(),
                s.is_enabled(),
                s.state_dict(),
            )

        assert_same(*[view(s) for s in twins])
        # get_scale before the first scale() is the argument itself, unrounded.
        for s in twins:
            s.scale(torch.ones(()))
        assert_same(*[view(s) for s in twins])


def test_deepcopy_and_pickle_between_iterations():
    def checkpoint_by_copy(scaler):
        return copy.deepcopy(scaler)

    assert_twins(after_update={3: checkpoint_by_copy}, inject=MIXED_OVERFLOWS)
    ours = LossScaler("cpu", init_scale=3000.0)
    ours.scale(torch.ones(()))
    assert pickle.loads(pickle.dumps(ours)).state_dict() == ours.state_dict()


def test_device_cuda_without_cuda_disables_like_torch():
    if torch.cuda.is_available():
        pytest.skip("CUDA is present here")
    for cls in SCALERS.values():
        with pytest.warns(UserWarning, match="CUDA is not available"):
            assert not cls().is_enabled()


# ---- the two building blocks against torch's own kernels -----------------------------


def scaled_gradients(dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(2)
    grads = [torch.randn(n, generator=generator) * 3000 for n in (1, 7, 40, 300)]
    grads[1][3] = 1e38  # finite, but not after multiplying by a factor above 1
    return [g.to(dtype) for g in grads]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("scale", [65536.0, 3000.0, 1.0, 0.25, 1e-40, 0.0, INF, NAN])
@pytest.mark.parametrize("bad", [None, INF, -INF, NAN, "signalling_nan"])
def test_unscale_grads_matches_torch_kernel(dtype, scale, bad):
    # At a scale of 1.0 the kernel leaves float32 and float64 values alone, so a
    # signalling NaN keeps its bits; bf16 makes a float32 round trip that rewrites it.
    grads = scaled_gradients(dtype)
    if bad is not None:
        grads[2][17] = signalling_nan(dtype) if bad == "signalling_nan" else bad
    theirs = [g.clone() for g in grads]
    inv_scale = torch.tensor(scale).double().reciprocal().float()
    found_inf = torch.zeros(())
    torch._amp_foreach_non_finite_check_and_unscale_(theirs, found_inf, inv_scale)
    found = unscale_grads_(grads, inv_scale)
    assert bool(found) == bool(found_inf) == (bad is not None)
    if math.isnan(scale) and bad == "signalling_nan":
        # The documented difference: NaN * NaN may keep the other NaN's bits.
        assert theirs[2][17].isnan() and grads[2][17].isnan()
        theirs[2][17] = grads[2][17]
    assert_same([tensor_bits(g) for g in theirs], [tensor_bits(g) for g in grads])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_unscale_grads_rewrites_every_16_bit_nan_as_torch_does(dtype, scale):
    # Every fp16 and bf16 bit pattern: the multiply even by 1 must rewrite the NaNs
    # exactly as the kernel's float32 round trip does (and leave the rest alone).
    every_pattern = torch.arange(-(2**15), 2**15, dtype=torch.int32).short().view(dtype)
    theirs, ours = every_pattern.clone(), every_pattern.clone()
    inv_scale = torch.tensor(1 / scale)
    torch._amp_foreach_non_finite_check_and_unscale_([theirs], torch.zeros(()),
                                                     inv_scale)  # fmt: skip
    unscale_grads_([ours], inv_scale)
    assert_same(tensor_bits(theirs), tensor_bits(ours))


def test_a_scale_of_one_keeps_a_signalling_nan_gradient_as_torch_does():
    # scaler.unscale_ at scale 1.0: torch's kernel does not multiply, so the injected
    # NaN's bits stay in the gradient (a multiply by 1 would set its quiet bit).
    trace = assert_twins(scaler_kwargs={"init_scale": 1.0},
                         inject={1: [("grad", 0, signalling_nan(torch.float32))]},
                         num_steps=3)  # fmt: skip
    assert trace[1]["grads"][0].view(-1)[0] == 0x7FA00001


def torch_update_rule(scale, tracker, found_inf, growth, backoff, interval):
    scale_t = torch.tensor(scale, dtype=torch.float32)
    tracker_t = torch.tensor(tracker, dtype=torch.int32)
    found_t = torch.tensor(float(found_inf))
    torch._amp_update_scale_(scale_t, tracker_t, found_t, growth, backoff, interval)
    return scale_t.item(), tracker_t.item()


SCALES = [65536, 3000, 0.1, 1e-45, 3e38, 2.0**127, INF]


@pytest.mark.parametrize("scale", [round_to_float32(s) for s in SCALES])
@pytest.mark.parametrize("growth, backoff", [(2.0, 0.5), (3, 0.25), (1.1, 0.3)])
def test_next_scale_matches_torch_kernel(scale, growth, backoff):
    for tracker in (0, 1, 2, 5):
        for interval in (1, 3):
            for found_inf in (False, True):
                args = (scale, tracker, found_inf, growth, backoff, interval)
                assert next_scale(*args) == torch_update_rule(*args), args


@pytest.mark.parametrize("interval", [2**31 - 1, 2**31, 2**32 + 1, 2**40])
def test_next_scale_wraps_the_growth_tracker_at_int32_like_torch(interval):
    # torch's tracker is an int32 tensor: one step past 2**31 - 1 it reads -2**31,
    # so an interval of 2**31 or more is never reached (2**32 + 1 is not taken
    # modulo 2**32 either: the kernel compares in 64 bits).
    for tracker in (2**31 - 2, 2**31 - 1, -(2**31), -1, 0):
        args = (1024.0, tracker, False, 2.0, 0.5, interval)
        assert next_scale(*args) == torch_update_rule(*args), args
    assert next_scale(1024.0, 2**31 - 1, False, growth_interval=2**40) == (
        1024.0, -(2**31))  # fmt: skip


def test_a_scaler_counts_past_int32_like_torch():
    # 2**31 clean steps are out of reach: load a tracker near int32's end, with an
    # interval too large to reset it first.
    trace = assert_twins(scaler_kwargs={"growth_interval": 2**40}, num_steps=3,
                         after_update={0: set_growth_tracker(2**31 - 2)})  # fmt: skip
    assert [snap["growth_tracker"] for snap in trace] == [1, 2**31 - 1, -(2**31)]


def test_float32_reciprocal_would_be_the_same_number():
    # Why a "float32 inverse" is not among the wrong scalers below: on IEEE hardware
    # the float64 reciprocal rounded to float32 equals the float32 reciprocal (53 >=
    # 2 * 24 + 2 makes double rounding harmless for division). torch still takes the
    # float64 path because some GPU compile options make float32 division inexact.
    scale = torch.rand(100_000, generator=torch.Generator().manual_seed(3)) * 1e6
    via_float64 = scale.double().reciprocal().float()
    assert torch.equal(scale.reciprocal(), via_float64)


def test_round_to_float32():
    assert round_to_float32(0.1) == 0.10000000149011612
    assert round_to_float32(1e39) == INF
    assert round_to_float32(3.0) == 3.0


# ---- misuse: the same exception type and message as torch ----------------------------


def fresh(cls, model_dtype=torch.float32):
    model = make_model(model_dtype)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), cls("cpu")


def backward(model, scaler):
    x = torch.ones(2, 6, dtype=model[0].weight.dtype)
    scaler.scale(model(x).sum()).backward()


def misuse_unscale_twice(model, opt, scaler):
    backward(model, scaler)
    scaler.unscale_(opt)
    scaler.unscale_(opt)


def misuse_unscale_after_step(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt)
    scaler.unscale_(opt)


def misuse_step_twice(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt)
    scaler.step(opt)


def misuse_update_before_scale(model, opt, scaler):
    scaler.update()


def misuse_step_before_scale(model, opt, scaler):
    scaler.step(opt)


def misuse_unscale_before_scale(model, opt, scaler):
    scaler.unscale_(opt)


def misuse_update_without_step(model, opt, scaler):
    backward(model, scaler)
    scaler.update()


def misuse_step_without_gradients(model, opt, scaler):
    scaler.scale(torch.ones(()))
    scaler.step(opt)


def misuse_closure_keyword(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt, closure=lambda: 0.0)


def misuse_load_empty_state_dict(model, opt, scaler):
    scaler.load_state_dict({})


def misuse_load_incomplete_state_dict(model, opt, scaler):
    scaler.load_state_dict({"scale": 2.0})


def misuse_new_scale_two_elements(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt)
    scaler.update(torch.tensor([1.0, 2.0]))


def misuse_new_scale_requires_grad(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt)
    scaler.update(torch.tensor(1.0, requires_grad=True))


def misuse_new_scale_beyond_float32(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt)
    scaler.update(1e40)


def misuse_new_scale_on_another_device(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt)
    scaler.update(torch.tensor(1.0, device="meta"))


def misuse_load_growth_tracker_past_int32(model, opt, scaler):
    scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": 2**31})
    backward(model, scaler)  # torch fills its int32 tracker here, and fails


def misuse_load_growth_tracker_past_int32_mid_run(model, opt, scaler):
    backward(model, scaler)
    scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": -(2**31) - 1})


def misuse_scale_a_number(model, opt, scaler):
    scaler.scale(3)


def misuse_pickle_mid_iteration(model, opt, scaler):
    backward(model, scaler)
    scaler.step(opt)
    pickle.dumps(scaler)


MISUSES = [f for name, f in sorted(globals().items()) if name.startswith("misuse_")]


@pytest.mark.parametrize("misuse", MISUSES, ids=lambda f: f.__name__[7:])
def test_misuse_raises_like_torch(misuse):
    raised = {}
    for name, cls in SCALERS.items():
        with pytest.raises(Exception) as info:
            misuse(*fresh(cls))
        raised[name] = (type(info.value), str(info.value))
    assert raised["ours"] == raised["torch"]


def test_fp16_gradients_raise_like_torch():
    raised = {}
    for name, cls in SCALERS.items():
        model, opt, scaler = fresh(cls, torch.float16)
        backward(model, scaler)
        with pytest.raises(ValueError) as info:
            scaler.step(opt)
        raised[name] = str(info.value)
    assert raised["ours"] == raised["torch"] == "Attempting to unscale FP16 gradients."


def test_new_scale_of_another_type_is_a_clear_type_error():
    # torch fails here with "AttributeError: 'int' object has no attribute 'device'".
    model, opt, scaler = fresh(LossScaler)
    backward(model, scaler)
    scaler.step(opt)
    with pytest.raises(TypeError, match="new_scale should be a float .* Got int"):
        scaler.update(1024)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"init_scale": 0.0}, "init_scale"),
        ({"init_scale": -1.0}, "init_scale"),
        ({"init_scale": NAN}, "init_scale"),
        ({"init_scale": INF}, "init_scale"),
        ({"init_scale": 1e39}, "init_scale"),  # inf in float32
        ({"init_scale": 1e-50}, "init_scale"),  # 0 in float32
        ({"init_scale": "65536"}, "init_scale"),
        ({"growth_factor": 1.0}, "growth_factor"),
        ({"growth_factor": 0.5}, "growth_factor"),
        ({"growth_factor": NAN}, "growth_factor"),
        ({"growth_factor": INF}, "growth_factor"),
        ({"backoff_factor": 0.0}, "backoff_factor"),
        ({"backoff_factor": 1.0}, "backoff_factor"),
        ({"backoff_factor": NAN}, "backoff_factor"),
        ({"growth_interval": 0}, "growth_interval"),
        ({"growth_interval": -5}, "growth_interval"),
        ({"growth_interval": 2.5}, "growth_interval"),
        ({"growth_interval": True}, "growth_interval"),
    ],
)
def test_bad_constructor_arguments_raise_value_error(kwargs, word):
    with pytest.raises(ValueError, match=word) as info:
        LossScaler("cpu", **kwargs)
    assert repr(next(iter(kwargs.values()))) in str(info.value)


# ---- the harness can fail ------------------------------------------------------------


def divide_by_scale(grads, inv_scale):
    """Wrong: divides by the scale instead of multiplying by its rounded inverse."""
    found = unscale_grads_([g.clone() for g in grads], inv_scale)
    torch._foreach_div_(grads, inv_scale.double().reciprocal().float())
    return found


def keep_scaled_on_inf(grads, inv_scale):
    """Wrong: leaves the gradients scaled when an inf is found."""
    found = unscale_grads_([g.clone() for g in grads], inv_scale)
    if not found:
        torch._foreach_mul_(grads, inv_scale)
    return found


def check_max_only(grads, inv_scale):
    """Wrong: a max misses -inf."""
    found = ~torch.stack(torch._foreach_max(grads)).isfinite().all()
    torch._foreach_mul_(grads, inv_scale)
    return found


def check_after_multiply(grads, inv_scale):
    """Wrong: with a scale below 1 a finite gradient can become inf."""
    torch._foreach_mul_(grads, inv_scale)
    return unscale_grads_(grads, torch.ones(()))


def unrounded_next_scale(scale, tracker, found_inf, growth, backoff, interval):
    """Wrong: keeps the float64 product instead of rounding it to float32."""
    new, tracker = next_scale(scale, tracker, found_inf, growth, backoff, interval)
    if new != scale:
        new = scale * (backoff if found_inf else growth)
    return new, tracker


def grow_past_interval(scale, tracker, found_inf, growth, backoff, interval):
    """Wrong: `>=` instead of torch's `==`."""
    return next_scale(
        scale, min(tracker, interval - 1), found_inf, growth, backoff, interval
    )


def last_optimizer_decides(self):
    """Wrong: backs off only when the last optimizer overflowed."""
    record = list(self._per_optimizer_states.values())[-1]
    return bool(record.found_inf)


def set_growth_tracker(value: int) -> Callable:
    def load(scaler):
        scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": value})
        return scaler

    return load


WRONG_SCALERS = {
    # name: (attribute of the scaler module or LossScaler to replace, the script)
    "divide_by_scale": (
        "unscale_grads_",
        divide_by_scale,
        {"scaler_kwargs": {"init_scale": 3000.0}, "num_steps": 2},
    ),
    "keep_scaled_on_inf": (
        "unscale_grads_",
        keep_scaled_on_inf,
        {"inject": {1: [("grad", 0, NAN)]}, "num_steps": 2},
    ),
    "check_max_only": (
        "unscale_grads_",
        check_max_only,
        {"inject": {1: [("grad", 0, -INF)]}, "num_steps": 2},
    ),
    "check_after_multiply": (
        "unscale_grads_",
        check_after_multiply,
        {"new_scale": {0: 0.25}, "inject": {1: [("grad", 0, 1e38)]}, "num_steps": 2},
    ),
    "unrounded_next_scale": (
        "next_scale",
        unrounded_next_scale,
        {
            "scaler_kwargs": {
                "init_scale": 1000.1,
                "growth_factor": 1.1,
                "growth_interval": 1,
            },
            "num_steps": 2,
        },
    ),
    "grow_past_interval": (
        "next_scale",
        grow_past_interval,
        {
            "scaler_kwargs": {"growth_interval": 3},
            "after_update": {0: set_growth_tracker(10)},
            "num_steps": 3,
        },
    ),
    "last_optimizer_decides": (
        "LossScaler._found_inf_in_any_optimizer",
        last_optimizer_decides,
        {"num_optimizers": 2, "inject": {1: [("grad", 0, NAN)]}, "num_steps": 3},
    ),
}


@pytest.mark.parametrize("name", WRONG_SCALERS)
def test_harness_catches_wrong_scalers(name, monkeypatch):
    target, wrong, script = WRONG_SCALERS[name]
    assert_twins(**script)  # the right scaler passes this very script
    if target.startswith("LossScaler."):
        monkeypatch.setattr(LossScaler, target.split(".")[1], wrong)
    else:
        monkeypatch.setattr(scaler_module, target, wrong)
    with pytest.raises(Mismatch):
        assert_twins(**script)


def test_no_private_amp_kernels_or_torch_scaler_in_the_module():
    source = open(scaler_module.__file__).read()
    # ("grad_scaler" alone is the name of a deprecated step() argument it refuses.)
    for forbidden in (
        "_amp_foreach",
        "_amp_update",
        "GradScaler(",
        "amp.grad_scaler",
        "from torch.amp import",
        "import grad_scaler",
    ):
        assert forbidden not in source, forbidden
    assert not issubclass(LossScaler, torch.amp.GradScaler)


def test_docstring_examples_run():
    results = doctest.testmod(scaler_module, optionflags=doctest.ELLIPSIS)
    assert results.attempted > 5 and results.failed == 0


def test_warning_free_on_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_twins(num_steps=2)
