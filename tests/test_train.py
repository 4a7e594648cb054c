"""The AMP training loop: learning in every precision, skips, resume, clear errors."""

import io
import math
import warnings
from itertools import pairwise
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from amp_lessons.core import models, train_config
from amp_lessons.core import precision as pr
from amp_lessons.core import train as tr
from amp_lessons.core.precision import PRECISIONS
from amp_lessons.core.train import TrainConfig, train
from amp_lessons.teaching.plots import plot_losses

FAST = dict(device="cpu", num_steps=80, batch_size=64)


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def quiet_train(config, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pr.SlowOnThisDeviceWarning)
        return train(config, **kwargs)


def mean(xs):
    return sum(xs) / len(xs)


# -- every precision learns --------------------------------------------------------


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_every_precision_learns_the_spirals(precision):
    result = quiet_train(TrainConfig(precision=precision, **FAST))
    first, last = mean(result.losses[:10]), mean(result.losses[-10:])
    assert first > 0.5 and last < 0.35 * first, (first, last)
    assert result.eval_accuracy > 0.9
    assert result.num_skipped == 0
    assert all(math.isfinite(r.grad_norm) and r.time_ms > 0 for r in result.records)
    scale = 2.0**16 if precision == "fp16" else 1.0
    assert result.scales == [scale] * 80
    assert isinstance(result.scaler, torch.amp.GradScaler)
    assert result.scaler.is_enabled() is (precision == "fp16")
    # master weights stay float32 whatever autocast computed in
    assert {p.dtype for p in result.model.parameters()} == {torch.float32}


@pytest.mark.parametrize("scaler", ["torch", "ours"])
def test_fp16_learns_with_each_scaler(scaler):
    result = quiet_train(TrainConfig(precision="fp16", scaler=scaler, **FAST))
    assert mean(result.losses[-10:]) < 0.35 * mean(result.losses[:10])
    assert result.scaler.is_enabled()


def test_gpt_learns_and_is_causal():
    config = TrainConfig(
        task="gpt",
        precision="fp32",
        device="cpu",
        num_steps=60,
        lr=1e-2,
        batch_size=16,
        block_size=16,
        n_embd=32,
        vocab_size=32,
    )
    result = quiet_train(config)
    assert mean(result.losses[-5:]) < 0.6 * mean(result.losses[:5])
    model = result.model.eval()
    x, _ = models.make_tokens(2, 16, 32, torch.Generator().manual_seed(0))
    changed = x.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 32  # edit the future only
    with torch.no_grad():
        a, b = model(x), model(changed)
    assert torch.equal(a[:, :10], b[:, :10])
    assert not torch.equal(a[:, 10:], b[:, 10:])


# -- the step itself, against a loop written out by hand ---------------------------


def reference_loop(model, batches, clip, lr):
    """The PyTorch AMP recipe's loop, written out: what train_step must equal."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    scaler = torch.amp.GradScaler("cpu")
    for x, y in batches:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return model


def test_train_step_matches_the_recipe_loop_bit_for_bit():
    torch.manual_seed(0)
    model = models.MLP((2, 16, 3))
    ref = models.MLP((2, 16, 3))
    ref.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randn(32, 2, generator=g), torch.randint(3, (32,), generator=g))
        for _ in range(5)
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    precision = PRECISIONS["fp16"]
    scaler = pr.make_scaler(precision, "cpu")
    ctx = pr.autocast_context(precision, "cpu")
    norms = [
        tr.train_step(
            model, optimizer, scaler, ctx, [b], tr.Task.loss_fn, clip=0.05
        ).grad_norm
        for b in batches
    ]
    assert max(norms) > 0.05  # clipping really happened
    reference_loop(ref, batches, clip=0.05, lr=1e-2)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)


def test_gradient_accumulation_equals_one_big_batch():
    torch.manual_seed(0)
    model_a, model_b = models.MLP((2, 16, 3)), models.MLP((2, 16, 3))
    model_b.load_state_dict(model_a.state_dict())
    x, y = torch.randn(64, 2), torch.randint(3, (64,))
    precision = PRECISIONS["fp32"]
    stats = []
    for model, batches in (
        (model_a, [(x, y)]),
        (model_b, [(x[:32], y[:32]), (x[32:], y[32:])]),
    ):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        stats.append(
            tr.train_step(
                model,
                optimizer,
                pr.make_scaler(precision, "cpu"),
                pr.autocast_context(precision, "cpu"),
                batches,
                tr.Task.loss_fn,
            )
        )
    assert torch.allclose(stats[0].loss, stats[1].loss, rtol=1e-6)
    for p, q in zip(model_a.parameters(), model_b.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-7)
    assert not torch.equal(model_a.net[0].weight, models.MLP((2, 16, 3)).net[0].weight)


def test_accumulation_in_train_records_mean_micro_batch_loss():
    result = quiet_train(TrainConfig(precision="bf16", accum_steps=3, **FAST))
    assert len(result.records) == 80
    assert mean(result.losses[-10:]) < 0.35 * mean(result.losses[:10])


# -- skipped steps -----------------------------------------------------------------


@pytest.mark.parametrize("scaler", ["torch", "ours"])
def test_overflow_steps_are_skipped_and_counted(scaler):
    # 2**40 times the loss overflows fp16 in backward: the scaler halves until it fits
    config = TrainConfig(
        precision="fp16",
        scaler=scaler,
        init_scale=2.0**40,
        growth_interval=1000,
        **FAST,
    )
    result = quiet_train(config)
    skipped = [r for r in result.records if r.skipped]
    assert 5 <= len(skipped) < 40
    assert all(r.skipped for r in result.records[: len(skipped)])  # all at the start
    for a, b in pairwise(result.records):
        assert b.scale == (a.scale / 2 if a.skipped else a.scale)
        assert not math.isfinite(a.grad_norm) if a.skipped else True
    # the optimizer really took only the non-skipped steps
    steps = {int(s["step"]) for s in result.optimizer.state.values()}
    assert steps == {80 - len(skipped)}
    assert mean(result.losses[-10:]) < 0.5 * result.losses[0]


def test_fp16_without_a_scaler_is_allowed_for_study():
    result = quiet_train(TrainConfig(precision="fp16", scaler="none", **FAST))
    assert not result.scaler.is_enabled() and result.scales == [1.0] * 80


# -- checkpoint and resume ---------------------------------------------------------


def bits(records):
    """Each record's numbers as exact bit patterns (so NaN == NaN, 0.0 != -0.0)."""
    return [
        (r.step, r.loss.hex(), r.scale.hex(), r.skipped, r.grad_norm.hex())
        for r in records
    ]


def assert_same_run(a, b):
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    for key in sa["state"]:
        for name, value in sa["state"][key].items():
            assert torch.equal(
                torch.as_tensor(value), torch.as_tensor(sb["state"][key][name])
            )
    assert a.scaler.state_dict() == b.scaler.state_dict()
    assert bits(a.records) == bits(b.records)
    assert (a.eval_loss, a.eval_accuracy) == (b.eval_loss, b.eval_accuracy)


@pytest.mark.parametrize("scaler", ["torch", "ours"])
def test_resume_is_bit_exact_with_scaler_state(tmp_path, scaler):
    # growth_interval=4 and a huge init_scale: skips, backoffs and growths on both
    # sides of the checkpoint, so the scaler's growth tracker must survive it
    common = dict(
        precision="fp16",
        scaler=scaler,
        init_scale=2.0**30,
        growth_interval=4,
        accum_steps=2,
        device="cpu",
        batch_size=32,
    )
    full = quiet_train(TrainConfig(num_steps=30, **common))
    path = tmp_path / "ckpt.pt"
    quiet_train(TrainConfig(num_steps=13, checkpoint_path=str(path), **common))
    assert tr.load_checkpoint(path)["step"] == 13
    resumed = quiet_train(
        TrainConfig(num_steps=30, checkpoint_path=str(path), resume=True, **common)
    )
    assert_same_run(full, resumed)
    scales = full.scales
    assert any(b < a for a, b in pairwise(scales))
    assert any(b > a for a, b in pairwise(scales))
    assert list(tmp_path.iterdir()) == [path]  # no temporary files left behind


def test_resume_is_bit_exact_for_gpt_with_periodic_checkpoints(tmp_path):
    common = dict(
        task="gpt",
        precision="bf16",
        device="cpu",
        batch_size=4,
        block_size=8,
        n_embd=16,
        vocab_size=16,
        n_layer=1,
    )
    full = quiet_train(TrainConfig(num_steps=10, **common))
    path = tmp_path / "gpt.pt"
    # checkpoint every 3 steps, "crash" after 7: the last save is step 6... then 7
    quiet_train(
        TrainConfig(
            num_steps=7, checkpoint_path=str(path), checkpoint_every=3, **common
        )
    )
    resumed = quiet_train(
        TrainConfig(num_steps=10, checkpoint_path=str(path), resume=True, **common)
    )
    assert_same_run(full, resumed)


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    tr.save_checkpoint(path, {"format": tr.CHECKPOINT_FORMAT, "step": 1})
    before = path.read_bytes()

    def broken_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        tr.save_checkpoint(path, {"format": tr.CHECKPOINT_FORMAT, "step": 2})
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


# -- errors: each names the fix, and touches nothing -------------------------------


def test_unknown_precision_lists_the_valid_ones():
    with pytest.raises(
        ValueError, match="unknown precision 'fp8'.*fp32, tf32, fp16, bf16"
    ):
        train(TrainConfig(precision="fp8", device="cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_says_what_to_use():
    with pytest.raises(RuntimeError, match="CUDA was asked for.*device='cpu'"):
        train(TrainConfig(device="cuda"))


@pytest.mark.parametrize("scaler", ["torch", "ours"])
def test_a_scaler_with_bf16_is_refused_with_the_reason(scaler):
    with pytest.raises(ValueError, match="not needed with bf16.*exponent bits"):
        train(TrainConfig(precision="bf16", scaler=scaler, device="cpu"))
    with pytest.raises(ValueError, match="not needed with fp32"):
        pr.make_scaler(PRECISIONS["fp32"], "cpu", scaler)


def test_half_model_with_a_scaler_is_refused_before_training(tmp_path):
    model = models.MLP((2, 64, 64, 3)).half()
    before = [p.clone() for p in model.parameters()]
    path = tmp_path / "never.pt"
    with pytest.raises(
        ValueError, match="float16.*Attempting to unscale FP16 gradients.*float32"
    ):
        train(
            TrainConfig(precision="fp16", device="cpu", checkpoint_path=str(path)),
            model=model,
        )
    assert all(
        torch.equal(p, q) and p.dtype is torch.float16
        for p, q in zip(model.parameters(), before, strict=True)
    )
    assert not path.exists()


def test_torch_really_fails_that_way_with_a_half_model():
    """The message we quote is torch's own: GradScaler refuses fp16 gradients."""
    model = torch.nn.Linear(2, 2).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 2, dtype=torch.half)).float().sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(optimizer)


def test_fp16_on_cpu_warns_that_it_is_slow():
    with pytest.warns(pr.SlowOnThisDeviceWarning, match="slow"):
        result = train(TrainConfig(precision="fp16", device="cpu", num_steps=2))
    assert "slow" in result.notes[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = train(TrainConfig(precision="bf16", device="cpu", num_steps=2))
    assert result.notes == []


def test_bad_config_values_are_named():
    with pytest.raises(ValueError, match="accum_steps must be a positive integer"):
        train(TrainConfig(accum_steps=0, device="cpu"))
    with pytest.raises(ValueError, match="unknown task 'mnist'.*spirals, gpt"):
        train(TrainConfig(task="mnist", device="cpu"))
    with pytest.raises(ValueError, match="resume=True needs checkpoint_path"):
        train(TrainConfig(resume=True, device="cpu"))
    with pytest.raises(ValueError, match="unknown scaler 'apex'"):
        train(TrainConfig(precision="fp16", scaler="apex", device="cpu"))


def test_resume_errors_leave_the_checkpoint_untouched(tmp_path):
    path = tmp_path / "ckpt.pt"
    with pytest.raises(FileNotFoundError, match="run once without resume=True"):
        train(TrainConfig(device="cpu", checkpoint_path=str(path), resume=True))
    quiet_train(
        TrainConfig(
            num_steps=3,
            checkpoint_path=str(path),
            **{k: v for k, v in FAST.items() if k != "num_steps"},
        )
    )
    before = path.read_bytes()
    with pytest.raises(ValueError, match="precision: checkpoint 'bf16' vs now 'fp32'"):
        train(
            TrainConfig(
                precision="fp32",
                device="cpu",
                batch_size=64,
                checkpoint_path=str(path),
                resume=True,
            )
        )
    from amp_lessons import i18n  # lesson 05 invites this error: in its language

    i18n.set_language("es")
    try:
        with pytest.raises(ValueError, match="'bf16' en el checkpoint, 'fp32' ahora"):
            train(
                TrainConfig(
                    precision="fp32",
                    device="cpu",
                    batch_size=64,
                    checkpoint_path=str(path),
                    resume=True,
                )
            )
    finally:
        i18n.set_language("en")
    with pytest.raises(ValueError, match="unknown precision"):
        train(
            TrainConfig(
                precision="fp64", device="cpu", checkpoint_path=str(path), resume=True
            )
        )
    assert path.read_bytes() == before
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        train(TrainConfig(device="cpu", checkpoint_path=str(path), resume=True))


# -- the pieces ---------------------------------------------------------------------


def test_evaluate_runs_without_autograd_and_restores_train_mode():
    model = models.MLP((2, 8, 3)).train()
    x, y = models.make_spirals(30, generator=torch.Generator().manual_seed(0))
    ctx = pr.autocast_context(PRECISIONS["bf16"], "cpu")
    loss, accuracy = tr.evaluate(model, x, y, ctx)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    with torch.no_grad(), ctx:  # the same forward, written out
        out = model.eval()(x)
        expected_loss = F.cross_entropy(out, y)  # in fp32: autocast's fp32 list
    assert out.dtype is torch.bfloat16 and expected_loss.dtype is torch.float32
    assert accuracy == pytest.approx((out.argmax(-1) == y).sum().item() / 30, abs=1e-7)
    assert loss == pytest.approx(expected_loss.item(), rel=1e-6)


def fixed_logits(logits_of_class):
    """A model whose logits are ``logits_of_class[c]`` for an input one_hot(c)."""
    model = torch.nn.Linear(3, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(logits_of_class, dtype=torch.float32).T)
    return model


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_evaluate_gives_hand_computed_accuracy_and_loss(precision):
    y = torch.arange(30) % 3  # 10 of each class
    x = F.one_hot(y, 3).float()
    ctx = pr.autocast_context(PRECISIONS[precision], "cpu")
    # right class scores 4, others 0: accuracy 1, loss -log(e^4 / (e^4 + 2))
    perfect = fixed_logits([[4, 0, 0], [0, 4, 0], [0, 0, 4]])
    loss, accuracy = tr.evaluate(perfect, x, y, ctx)
    assert accuracy == 1.0
    assert loss == pytest.approx(math.log(1 + 2 * math.exp(-4)), rel=1e-3)
    # always class 0 (logits 1, 0, 0): accuracy = class 0's share, 1/3; loss is
    # log(e + 2) - 1 on the 10 class-0 rows and log(e + 2) on the 20 others
    constant = fixed_logits([[1, 0, 0]] * 3)
    loss, accuracy = tr.evaluate(constant, x, y, ctx)
    assert accuracy == pytest.approx(10 / 30, abs=1e-7)
    assert loss == pytest.approx(math.log(math.e + 2) - 1 / 3, rel=1e-3)
    # one class off everywhere: accuracy 0
    shifted = fixed_logits([[0, 4, 0], [0, 0, 4], [4, 0, 0]])
    assert tr.evaluate(shifted, x, y, ctx)[1] == 0.0


# -- GPU -----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_every_precision_learns_on_cuda(precision):
    result = quiet_train(
        TrainConfig(precision=precision, device="cuda", num_steps=80, batch_size=64)
    )
    assert mean(result.losses[-10:]) < 0.35 * mean(result.losses[:10])
    assert result.device.startswith("cuda")


@pytest.mark.gpu
def test_resume_on_cuda_reproduces_the_run(tmp_path):
    common = dict(task="gpt", precision="fp16", device="cuda", batch_size=8)
    full = quiet_train(TrainConfig(num_steps=8, **common))
    path = tmp_path / "gpt.pt"
    quiet_train(TrainConfig(num_steps=4, checkpoint_path=str(path), **common))
    resumed = quiet_train(
        TrainConfig(num_steps=8, checkpoint_path=str(path), resume=True, **common)
    )
    # cuBLAS may pick other kernels run to run; the run must match closely
    for a, b in zip(full.losses, resumed.losses, strict=True):
        assert a == pytest.approx(b, rel=1e-3)


# -- plotting ------------------------------------------------------------------------


def test_plot_losses_draws_each_run_and_marks_skipped_steps():
    def record(step, loss, skipped=False):
        return tr.StepRecord(step, loss, 1.0, skipped, 1.0, 1.0)

    runs = {
        "fp32": [record(1, 1.0), record(2, 0.5), record(3, 0.25)],
        "fp16": [record(1, 1.1, skipped=True), record(2, 0.6), record(3, 0.3)],
    }
    fig = plot_losses(runs)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"fp32", "fp16", "fp16: skipped step"}
    assert list(lines["fp32"].get_ydata()) == [1.0, 0.5, 0.25]
    assert list(lines["fp16"].get_xdata()) == [1, 2, 3]
    assert list(lines["fp16: skipped step"].get_xdata()) == [1]
    assert lines["fp16: skipped step"].get_color() == lines["fp16"].get_color()
    assert ax.get_yscale() == "log"
    fig.savefig(io.BytesIO(), format="png")  # it renders, headless, without pyplot
    with pytest.raises(ValueError, match="at least one run"):
        plot_losses({})
    with pytest.raises(ValueError, match="run 'bf16': expected a non-empty list"):
        plot_losses({"bf16": [0.5, 0.4]})


def test_plot_losses_of_a_real_run():
    result = quiet_train(
        TrainConfig(
            precision="fp16",
            init_scale=2.0**40,
            device="cpu",
            num_steps=12,
            batch_size=16,
        )
    )
    fig = plot_losses({"fp16": result.records})
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["fp16"].get_ydata()) == result.losses
    assert len(lines["fp16: skipped step"].get_xdata()) == result.num_skipped > 0


@pytest.mark.parametrize(
    "field, value",
    [
        ("lr", math.inf),
        ("lr", math.nan),
        ("clip", math.inf),
        ("weight_decay", -0.1),
        ("weight_decay", math.nan),
        ("seed", -1),
        ("seed", 2**64),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_refused(field, value):
    # TrainConfig(lr=inf) trained every weight into NaN without a word
    with pytest.raises(ValueError, match=f"{field} must be"):
        train(TrainConfig(device="cpu", num_steps=2, **{field: value}))


def test_train_refuses_a_checkpoint_directory_before_building_anything(tmp_path):
    with pytest.raises(ValueError, match="is a directory; give a file name inside"):
        train(TrainConfig(device="cpu", num_steps=2, checkpoint_path=str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


def test_resume_with_num_steps_at_the_saved_step_is_refused(tmp_path):
    path = str(tmp_path / "run.pt")
    quiet_train(TrainConfig(device="cpu", num_steps=5, checkpoint_path=path))
    for num_steps in (5, 3):
        with pytest.raises(ValueError, match="already at step 5.*nothing to train"):
            train(
                TrainConfig(
                    device="cpu", num_steps=num_steps, checkpoint_path=path, resume=True
                )
            )


def spy(monkeypatch, owner, name):
    """Count the calls of ``owner.name`` (it still runs)."""
    counted = mock.Mock(wraps=getattr(owner, name))
    monkeypatch.setattr(owner, name, counted)
    return counted


def test_train_checks_once_and_reads_a_resumed_checkpoint_once(tmp_path, monkeypatch):
    # train() checked everything, the command line had checked it all before, and a
    # resume read its checkpoint twice: once to check it, once to restore it
    path = str(tmp_path / "run.pt")
    quiet_train(TrainConfig(device="cpu", num_steps=3, checkpoint_path=path))
    plans = spy(monkeypatch, tr, "plan_training")
    fields = spy(monkeypatch, train_config, "validate_config")
    loads = spy(monkeypatch, torch, "load")
    resumed = quiet_train(
        TrainConfig(device="cpu", num_steps=5, checkpoint_path=path, resume=True)
    )
    assert len(resumed.records) == 5
    assert (plans.call_count, fields.call_count, loads.call_count) == (1, 1, 1)
    plan = tr.plan_training(TrainConfig(device="cpu", num_steps=2))
    fields.reset_mock()
    quiet_train(plan)  # a plan is taken as checked
    assert fields.call_count == 0
    with pytest.raises(TypeError, match="pass it to plan_training"):
        train(plan, model=models.MLP((2, 64, 64, 3)))


def test_a_plan_keeps_its_own_copy_of_the_config():
    config = TrainConfig(device="cpu", num_steps=2)
    plan = tr.plan_training(config)
    config.num_steps = 0  # after the checks: the plan is not changed by it
    assert quiet_train(plan).config.num_steps == 2


def test_load_checkpoint_names_what_is_missing(tmp_path):
    path = tmp_path / "no_config.pt"
    torch.save({"format": tr.CHECKPOINT_FORMAT, "step": 0}, path)
    with pytest.raises(
        ValueError,
        match="not a checkpoint written by amp_lessons"
        r".core.train \('config' is missing",
    ):
        tr.load_checkpoint(path)
