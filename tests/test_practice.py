"""Tests for amp_lessons.teaching.practice: the GAN step against the AMP examples' rule,
each known mistake seen to change the run, the two-scalers error, the gradient penalty
and the scheduler run, all against torch computed directly."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.teaching import practice as pr
from amp_lessons.teaching.scaler_vs_torch import first_difference

pytestmark = pytest.mark.usefixtures("one_thread")


def test_models_and_batches_are_seeded_and_leave_the_rng_alone():
    torch.manual_seed(1)
    expected = torch.rand(2)
    torch.manual_seed(1)
    (g1, d1), (g2, d2) = pr.make_gan(), pr.make_gan()
    real, noise = pr.gan_batch(3)
    assert torch.equal(torch.rand(2), expected)
    for a, b in ((g1, g2), (d1, d2)):
        assert all(map(torch.equal, a.parameters(), b.parameters()))
    assert torch.equal(pr.gan_batch(3)[0], real) and not torch.equal(
        pr.gan_batch(4)[0], real
    )
    assert torch.allclose(real.norm(dim=1).mean(), torch.tensor(2.0), atol=0.05)


def test_gan_step_is_the_amp_examples_recipe_written_out():
    # The same iteration by hand: D on real and detached fake, step D; G through D,
    # step G; one update. Bit-identical parameters and scale.
    runs = []
    for by_hand in (False, True):
        generator, discriminator = pr.make_gan()
        opt_g, opt_d = pr.make_gan_optimizers(generator, discriminator)
        scaler = torch.amp.GradScaler("cpu", growth_interval=1)
        real, noise = pr.gan_batch(0)
        if by_hand:
            bce = F.binary_cross_entropy_with_logits
            with torch.amp.autocast("cpu", dtype=torch.float16):
                fake = generator(noise)
                d_r, d_f = discriminator(real), discriminator(fake.detach())
                d_loss = (bce(d_r, torch.ones_like(d_r))
                          + bce(d_f, torch.zeros_like(d_f)))  # fmt: skip
            scaler.scale(d_loss).backward()
            scaler.step(opt_d)
            opt_g.zero_grad()
            with torch.amp.autocast("cpu", dtype=torch.float16):
                out = discriminator(fake)
                g_loss = bce(out, torch.ones_like(out))
            scaler.scale(g_loss).backward()
            scaler.step(opt_g)
            scaler.update()
            losses = (d_loss.item(), g_loss.item())
        else:
            losses = pr.gan_step(generator, discriminator, opt_g, opt_d, scaler,
                                 real, noise)  # fmt: skip
        params = [
            p.detach().clone()
            for p in [*generator.parameters(), *discriminator.parameters()]
        ]
        runs.append((losses, params, scaler.get_scale()))
    (la, pa, sa), (lb, pb, sb) = runs
    assert la == lb and sa == sb == 2.0**17
    assert all(map(torch.equal, pa, pb))


def test_every_known_mistake_changes_the_run_or_raises():
    kwargs = dict(num_steps=5, overflow={3: "d", 4: "g"})
    right = pr.train_gan(torch.amp.GradScaler("cpu", growth_interval=2), **kwargs)
    for mistake in pr.GAN_MISTAKES:
        scaler = torch.amp.GradScaler("cpu", growth_interval=2)
        try:
            wrong = pr.train_gan(scaler, step_fn=pr.wrong_gan_step(mistake), **kwargs)
        except (RuntimeError, AssertionError):
            continue  # the state machine refused it: also visible
        assert first_difference(right.history, wrong.history) is not None, mistake
    with pytest.raises(ValueError, match="unknown mistake"):
        pr.wrong_gan_step("no_such_thing")


def test_two_updates_count_each_iteration_twice():
    scales = {}
    for name, step in (("once", pr.gan_step),
                       ("twice", pr.wrong_gan_step("two_updates"))):  # fmt: skip
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=4)
        scales[name] = pr.train_gan(scaler, num_steps=9, step_fn=step).scales
    assert scales["once"] == [1024] * 4 + [2048] * 4 + [4096]  # every 4 iterations
    assert scales["twice"] == [1024, 1024, 2048, 2048, 4096, 4096, 8192, 8192, 16384]


def test_an_overflow_in_one_network_skips_only_its_optimizer():
    run = pr.train_gan(torch.amp.GradScaler("cpu", init_scale=2.0**10), num_steps=2,
                       overflow={2: "g"})  # fmt: skip
    before, after = run.history[0]["params"], run.history[1]["params"]
    n_g = len(list(pr.make_gan()[0].parameters()))
    assert all(map(torch.equal, before[:n_g], after[:n_g]))  # G skipped
    assert not all(map(torch.equal, before[n_g:], after[n_g:]))  # D stepped
    assert run.history[1]["scale"] == 512.0


def test_mixed_scale_error_is_the_predicted_factor():
    # g = g_a + (scale_b / scale_a) g_b: check against the fp32 gradients directly
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    grads = []
    for loss_fn in (F.mse_loss, F.l1_loss):
        model.zero_grad()
        loss_fn(model(x), y).backward()
        grads.append(model.weight.grad.clone())
    predicted = ((0.5 - 1) * grads[1]).norm() / (grads[0] + grads[1]).norm()
    assert pr.mixed_scale_error() == pytest.approx(predicted.item(), rel=2e-2)
    assert pr.mixed_scale_error(2.0**16, 2.0**16) < 1e-3


def test_penalty_is_the_norm_of_the_true_gradients():
    torch.manual_seed(0)
    model, x, y = nn.Linear(4, 2), torch.randn(8, 4), torch.randn(8, 2)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss.float() * 1024, list(model.parameters()))
    expected = torch.cat([g.flatten() / 1024 for g in grads]).norm().item()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    _, penalty = pr.penalty_step(model, optimizer, scaler, x, y)
    assert penalty == pytest.approx(expected, rel=1e-3)
    model.zero_grad()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    _, wrong = pr.penalty_step(model, optimizer, scaler, x, y, unscale=False)
    assert wrong == pytest.approx(1024 * expected, rel=1e-3)


def test_scheduled_run_counts_skips_and_the_warning():
    run = pr.scheduled_run(torch.amp.GradScaler("cpu", init_scale=2.0**17))
    assert run.skipped == [True, True, True, False, False, False]
    assert run.lrs == [0.01, 0.01, 0.005, 0.005, 0.0025, 0.0025]  # every iteration
    assert len(run.warnings) == 1 and "before `optimizer.step()`" in run.warnings[0]
    real = pr.scheduled_run(torch.amp.GradScaler("cpu", init_scale=2.0**17),
                            only_after_real_steps=True)  # fmt: skip
    assert real.lrs == [0.01] * 5 + [0.005] and real.warnings == []
    clean = pr.scheduled_run(torch.amp.GradScaler("cpu", init_scale=2.0**10))
    assert clean.num_skipped == 0 and clean.warnings == []


def test_doctests():
    import doctest

    results = doctest.testmod(pr)
    assert results.attempted > 8 and results.failed == 0
    assert math.isfinite(pr.mixed_scale_error())
