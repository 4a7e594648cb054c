"""Lesson 09's graders (amp_lessons.teaching.checks.practice): reference, known-wrong
answers with their hints, the stub, answers that raise or return anything at all, steps
that only call the package's own gan_step (by any name), and the fixed state the
references run in."""

import sys

import pytest
import torch
import torch.nn.functional as F
from grader_harness import grader_tests

from amp_lessons.core import nan_hunt
from amp_lessons.core.nan_hunt import OverflowDetector, find_first_overflow
from amp_lessons.teaching import practice
from amp_lessons.teaching.checks import check_first_overflow, check_gan_step
from amp_lessons.teaching.checks import practice as checks_practice
from amp_lessons.teaching.practice import (
    gan_step as package_gan_step,  # bound before any check
)

pytestmark = pytest.mark.usefixtures("one_thread")

# --- reference solutions (copy into the solution cells) -------------------------


def gan_step(generator, discriminator, opt_g, opt_d, scaler, real, noise):
    def bce(logits, target):
        return F.binary_cross_entropy_with_logits(
            logits, torch.full_like(logits, target)
        )

    opt_d.zero_grad(set_to_none=True)
    with torch.amp.autocast(real.device.type, dtype=torch.float16):
        fake = generator(noise)
        d_loss = bce(discriminator(real), 1.0) + bce(discriminator(fake.detach()), 0.0)
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    opt_g.zero_grad(set_to_none=True)
    with torch.amp.autocast(real.device.type, dtype=torch.float16):
        g_loss = bce(discriminator(fake), 1.0)
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
    return d_loss.item(), g_loss.item()


def first_overflow(model, x):
    seen = []

    def hook(name):
        def record(module, inputs, output):
            if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
                seen.append(name)

        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()]
    try:
        with torch.no_grad(), torch.amp.autocast("cpu", dtype=torch.float16):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen[0] if seen else None


# --- known-wrong GAN steps ---------------------------------------------------------


def _bce(logits, target):
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))


def _gan(generator, discriminator, opt_g, opt_d, scaler, real, noise, *,
         scaler_g=None, updates="once", g_step="scaler", d_step="scaler",
         extra_unscale=False, update_first=False, detach=True, zero_g=True,
         d_step_last=False, floats=True):  # fmt: skip
    scaler_g = scaler_g or scaler
    if update_first:
        scaler.update()
    opt_d.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        fake = generator(noise)
        d_real = discriminator(real)
        d_fake = discriminator(fake.detach() if detach else fake)
        d_loss = _bce(d_real, 1.0) + _bce(d_fake, 0.0)
    scaler.scale(d_loss).backward()
    if extra_unscale:  # e.g. once to clip, and once more "to be sure"
        scaler.unscale_(opt_d)
        scaler.unscale_(opt_d)
    if d_step == "optimizer":
        opt_d.step()
    elif not d_step_last:
        scaler.step(opt_d)
    if updates == "each":
        scaler.update()
    if zero_g:
        opt_g.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        g_loss = _bce(discriminator(fake), 1.0)
    scaler_g.scale(g_loss).backward()
    if d_step_last:  # both backwards first: G's loss adds to D's gradients
        scaler.step(opt_d)
    if g_step == "optimizer":
        opt_g.step()
    else:
        scaler_g.step(opt_g)
    if scaler_g is not scaler:
        scaler_g.update()
    if updates in ("once", "each"):
        scaler.update()
    return (d_loss.item(), g_loss.item()) if floats else (d_loss, g_loss)


def gan_two_updates(*args):
    return _gan(*args, updates="each")


_SECOND = {}


def gan_two_scalers(*args):
    scaler_g = _SECOND.setdefault(id(args[2]), torch.amp.GradScaler("cpu"))
    return _gan(*args, scaler_g=scaler_g)


def gan_new_scaler_inside(*args):
    return _gan(*args, scaler_g=torch.amp.GradScaler("cpu"))


def gan_update_before_step(*args):
    return _gan(*args, update_first=True)


def gan_unscale_twice(*args):
    return _gan(*args, extra_unscale=True)


def gan_optimizer_step(*args):
    return _gan(*args, g_step="optimizer")


def gan_optimizer_steps(*args):
    return _gan(*args, g_step="optimizer", d_step="optimizer")


def gan_fake_not_detached(*args):
    return _gan(*args, detach=False)


def gan_keeps_g_grads(*args):
    return _gan(*args, zero_g=False)


def gan_both_backwards_then_steps(*args):
    return _gan(*args, d_step_last=True)


def gan_returns_tensors(*args):
    return _gan(*args, floats=False)


def gan_no_update(*args):
    return _gan(*args, updates="never")


def gan_returns_none(*args):
    gan_step(*args)


def gan_scaled_losses(generator, discriminator, opt_g, opt_d, scaler, real, noise):
    d_loss, g_loss = gan_step(generator, discriminator, opt_g, opt_d, scaler, real,
                              noise)  # fmt: skip
    return d_loss * 1024, g_loss * 1024


def gan_exits(*args):
    sys.exit(3)


class _Nasty:
    def __repr__(self):
        raise RuntimeError("no repr")

    def __float__(self):
        raise RuntimeError("no float")


def gan_returns_nasty(*args):
    gan_step(*args)
    return _Nasty(), _Nasty()


def gan_breaks_the_optimizers(generator, discriminator, opt_g, *args):
    for param in generator.parameters():
        opt_g.state[param] = {"step": "not a tensor"}
    return 0.0, 0.0


# --- steps that only call the package's own answer, under any name ----------------

SHORTCUT = "you called the package's own amp_lessons.teaching.practice.gan_step"


def gan_calls_the_package(*args):
    return practice.gan_step(*args)


def gan_calls_an_alias(*args):
    return package_gan_step(*args)  # imported at the top, before the check ran


def gan_default_argument(*args, step=practice.gan_step):
    return step(*args)


def _closing_over(step):
    def gan_closure(*args):
        return step(*args)

    return gan_closure


def gan_through_train_gan(generator, discriminator, opt_g, opt_d, scaler, real, noise):
    practice.train_gan(scaler, 1)  # its default step is the package's gan_step
    return gan_step(generator, discriminator, opt_g, opt_d, scaler, real, noise)


def gan_swallows_the_tripwire(*args):
    try:
        package_gan_step(*args)
    except BaseException:  # what the tripwire raises: hidden, yet the call counts
        pass
    return gan_step(*args)


# --- known-wrong overflow finders --------------------------------------------------


class _Found:
    def __init__(self, name, kind):
        self.name, self.kind = name, kind


def _findings(model, x, dtype=torch.float16, watch=torch.float16):
    """Each module whose output holds inf/nan, or is of dtype ``watch`` (None: any)
    and above 65504, in hook order, found with hooks of their own: the check fails a
    function that runs anything of nan_hunt, so the shortcuts below do not use it."""
    found = []

    def hook(name):
        def record(module, inputs, output):
            finite = torch.isfinite(output)
            big = finite.any() and output[finite].float().abs().max() > 65504
            if not finite.all() or ((watch is None or output.dtype == watch) and big):
                found.append(_Found(name, type(module).__name__))

        return record

    ctx = torch.amp.autocast("cpu", dtype=dtype or torch.bfloat16,
                             enabled=dtype is not None)  # fmt: skip
    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()]
    try:
        with torch.no_grad(), ctx:
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return found


def overflow_last(model, x):
    found = _findings(model, x)
    return found[-1].name if found else None


def overflow_leaves_only(model, x):
    found = [f for f in _findings(model, x)
             if not list(model.get_submodule(f.name).children())]  # fmt: skip
    return found[0].name if found else None


def overflow_in_fp32(model, x):
    found = _findings(model, x, dtype=None, watch=None)
    return found[0].name if found else None


def overflow_inf_only(model, x):
    # every output kept, then the first with an inf: blind to nan without inf
    outputs = []
    handles = [
        m.register_forward_hook(lambda m, i, out, n=n: outputs.append((n, out)))
        for n, m in model.named_modules()
    ]
    with torch.no_grad(), torch.amp.autocast("cpu", dtype=torch.float16):
        model(x)
    for handle in handles:
        handle.remove()
    return next((n for n, out in outputs if out.isinf().any()), None)


def overflow_any_dtype(model, x):
    found = _findings(model, x, watch=None)
    return found[0].name if found else None


def overflow_class_name(model, x):
    found = _findings(model, x)
    return found[0].kind if found else None


def overflow_finding(model, x):
    found = _findings(model, x)
    return found[0] if found else None


def overflow_keeps_hooks(model, x):
    answer = first_overflow(model, x)
    model.register_forward_hook(lambda *a: None)
    return answer


def overflow_always_none(model, x):
    return None


def overflow_always_wo(model, x):
    return "blocks.3.wo"


def overflow_raises_keyboardish(model, x):
    raise GeneratorExit("odd")


def overflow_returns_an_array(model, x):
    import numpy as np

    return np.array(["2", "blocks.3.wo"])  # == gives an array, not a bool


class _WeirdStr(str):
    def __eq__(self, other):
        raise RuntimeError("no comparing me")

    __hash__ = str.__hash__


def overflow_returns_a_weird_str(model, x):
    return _WeirdStr(first_overflow(model, x) or "")


def overflow_one_line_nan_hunt(model, x):
    # right on every case, but the course's detector is the exercise's answer
    found = nan_hunt.find_first_overflow(model, x, dtype=torch.float16)
    return found.name if found is not None else None


def overflow_imported_detector(model, x):
    # `from amp_lessons.core.nan_hunt import OverflowDetector`, atop the notebook
    with torch.no_grad(), torch.amp.autocast("cpu", dtype=torch.float16):
        with OverflowDetector(model, dtype=torch.float16) as detector:
            model(x)
    return detector.first.name if detector.first else None


def _my_helper(model, x):
    return find_first_overflow(model, x)


def overflow_nan_hunt_in_a_helper(model, x):
    found = _my_helper(model, x)
    return found.name if found is not None else None


CASES = {
    "gan": (check_gan_step, gan_step, [
        (gan_two_updates, False, "counts every iteration twice"),
        (gan_two_scalers, False, "went through a second scaler"),
        (gan_new_scaler_inside, False, "went through a second scaler"),
        (gan_update_before_step, False, "update ran before the steps"),
        (gan_unscale_twice, False, "unscale_ ran twice on opt_d"),
        (gan_optimizer_step, False, "opt_g.step() ran directly"),
        (gan_optimizer_steps, False, "opt_d.step() ran directly"),
        (gan_no_update, False, "the scaler's update never ran"),
        (gan_returns_none, False, "return the two losses as Python floats"),
        (gan_scaled_losses, False, "returned a scaled loss"),
        (gan_exits, False, "your function called exit() or sys.exit()"),
        (gan_returns_nasty, False, "return the two losses as Python floats"),
        (gan_breaks_the_optimizers, False, "the models or optimizers could not"),
        (gan_fake_not_detached, False, "fake points it judged were still attached"),
        (gan_keeps_g_grads, False, "generator's gradients from the previous"),
        (gan_both_backwards_then_steps, False, "before the discriminator stepped"),
        (gan_returns_tensors, False, "a loss tensor keeps its autograd graph"),
        (gan_two_updates, True, "counts every iteration twice"),
        (gan_new_scaler_inside, True, "went through a second scaler"),
        (gan_calls_the_package, False, SHORTCUT),
        (gan_calls_the_package, True, SHORTCUT),
        (gan_calls_an_alias, False, SHORTCUT),
        (gan_calls_an_alias, True, SHORTCUT),
        (gan_default_argument, False, SHORTCUT),
        (_closing_over(package_gan_step), True, SHORTCUT),
        (practice.gan_step, False, SHORTCUT),  # the package's own, handed in
        (gan_through_train_gan, False, SHORTCUT),
        (gan_swallows_the_tripwire, False, SHORTCUT),
    ]),
    "overflow": (check_first_overflow, first_overflow, [
        (overflow_last, False, "LAST module"),
        (overflow_in_fp32, False, "where fp32 values pass 65504"),
        (overflow_class_name, False, "not its class name"),
        (overflow_finding, False, "return the module's name (a str"),
        (overflow_keeps_hooks, False, "forward hook(s) are still on the model"),
        (overflow_always_none, False, "nothing found"),
        (overflow_inf_only, False, "holds nan, not inf"),
        (overflow_always_wo, False, "return None"),
        (overflow_raises_keyboardish, False, "raised GeneratorExit"),
        (overflow_returns_an_array, False, "return the module's name (a str"),
        (overflow_returns_a_weird_str, False, "return the module's name (a str"),
        (overflow_one_line_nan_hunt, False,
         "called amp_lessons.core.nan_hunt.find_first_overflow"),
        (overflow_imported_detector, False,
         "called amp_lessons.core.nan_hunt.OverflowDetector"),
        (overflow_nan_hunt_in_a_helper, False, "Write the hook yourself"),
        (overflow_leaves_only, True, "only leaf modules were watched"),
        (overflow_any_dtype, True, "an fp32 output above 65504 is fine"),
        (overflow_one_line_nan_hunt, True, "may not be used"),
    ]),
}  # fmt: skip

(test_reference_passes, test_wrong_answer_rejected_with_hint,
 test_stub_is_not_attempted) = grader_tests(CASES)  # fmt: skip


@pytest.mark.parametrize(
    "check, reference",
    [(check_gan_step, gan_step), (check_first_overflow, first_overflow)],
)
def test_references_run_in_a_fixed_state(check, reference, capsys):
    # called from a notebook in no_grad with float64 as the default dtype: the
    # references still run with grad mode on and float32, and the state comes back
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            check(reference)
            assert not torch.is_grad_enabled()
        assert torch.get_default_dtype() is torch.float64
    finally:
        torch.set_default_dtype(old)
    assert "passed" in capsys.readouterr().out


def test_a_student_that_changes_global_state_does_not_break_the_next_case(capsys):
    def sloppy(*args):
        result = gan_step(*args)
        torch.set_default_dtype(torch.float64)  # left behind
        torch.set_grad_enabled(False)
        return result

    try:
        check_gan_step(sloppy)  # every case still passes: the state is reset
    finally:
        torch.set_grad_enabled(True)
    assert torch.get_default_dtype() is torch.float32
    assert "all 3 cases passed" in capsys.readouterr().out


def test_graders_leave_the_global_rng_alone():
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    check_first_overflow(first_overflow)
    check_gan_step(gan_step, hidden=True)
    assert torch.equal(torch.rand(2), expected)


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
def test_a_one_line_nan_hunt_call_fails_and_a_hook_of_ones_own_passes(hidden, capsys):
    # the one-line answer gives the right name on every case, and still fails each:
    # the exercise asks for the hooks, and nan_hunt's detector is its answer
    cases = 3 if hidden else 5
    with pytest.raises(AssertionError, match=rf"{cases} of {cases} cases failed"):
        check_first_overflow(overflow_one_line_nan_hunt, hidden=hidden)
    out = capsys.readouterr().out
    assert out.count("called nan_hunt") == cases
    assert "may not be used" in " ".join(out.split())  # the hint, wrapped over lines
    assert sys.getprofile() is None  # the watch is gone after the check
    # a hook written by hand passes, the T5-like model's own nan_hunt code included
    assert check_first_overflow(first_overflow, hidden=hidden) is None
    assert "passed" in capsys.readouterr().out


def test_the_nan_hunt_watch_puts_a_profiler_back():
    calls = []

    def profiler(frame, event, arg):
        calls.append(event)

    sys.setprofile(profiler)
    try:
        with pytest.raises(AssertionError):
            check_first_overflow(overflow_one_line_nan_hunt)
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)


def test_the_package_gan_step_is_whole_again_after_a_check(capsys):
    code = practice.gan_step.__code__
    with pytest.raises(AssertionError):
        check_gan_step(gan_calls_an_alias)
    assert practice.gan_step.__code__ is code
    assert practice.gan_step.__kwdefaults__ is None
    assert package_gan_step is practice.gan_step
    # it still trains, and the reference still passes beside it
    assert practice.train_gan(torch.amp.GradScaler("cpu"), 2).scales == [65536.0] * 2
    check_gan_step(gan_step)
    assert "all 3 cases passed" in capsys.readouterr().out


def test_wrong_answers_get_their_hints_in_spanish(capsys, spanish):
    with pytest.raises(AssertionError, match="casos fallaron"):
        check_gan_step(gan_two_updates)
    with pytest.raises(AssertionError, match="casos fallaron"):
        check_first_overflow(overflow_last)
    out = " ".join(capsys.readouterr().out.split())
    assert "escalas 1024, 1024, 2048" in out  # the expected scales, in Spanish
    assert "pista: la actualización del escalador se ejecutó 2 veces" in out
    assert "pista: ese es el ÚLTIMO módulo que contiene un inf" in out
    assert "pila al estilo de T5" in out  # a case label


# --- GAN hints come from the calls the step made, and never write the line ---------

# the lines the exercise asks for: no hint may spell one out
ANSWER_LINES = ("scaler.scale(", "scaler.step(", "scaler.unscale_(", "scaler.update()",
                ".backward()", "autocast(", "zero_grad(", ".item()")  # fmt: skip
GAN_FAULTS = [
    (gan_two_updates, "counts every iteration twice"),
    (gan_two_scalers, "went through a second scaler"),
    (gan_new_scaler_inside, "went through a second scaler"),
    (gan_update_before_step, "update ran before the steps"),
    (gan_unscale_twice, "unscale_ ran twice on opt_d"),
    (gan_optimizer_step, "opt_g.step() ran directly"),
    (gan_optimizer_steps, "opt_d.step() ran directly"),
    (gan_no_update, "the scaler's update never ran"),
    (gan_scaled_losses, "returned a scaled loss"),
    (practice.wrong_gan_step("no_g_step"), "opt_g never stepped"),
    (practice.wrong_gan_step("g_first"), "the generator was stepped before"),
    (practice.wrong_gan_step("unscaled_g_backward"),
     "the generator's loss went backward unscaled"),
]  # fmt: skip


@pytest.mark.parametrize(("step", "fragment"), GAN_FAULTS)
def test_gan_hint_names_the_fault_and_leaves_the_line(step, fragment):
    rows = checks_practice._gan_rows(step, False) + checks_practice._gan_rows(
        step, True
    )
    hints = [row.hint for row in rows if not row.ok]
    hints = [hint for hint in hints if hint != "the same as above"]
    assert hints and all(fragment in hint for hint in hints), hints
    for hint in hints:
        said = hint.split("(The error:")[0]  # torch's own words may follow
        assert not [line for line in ANSWER_LINES if line in said], hint


def test_gan_hint_does_not_match_the_error_text():
    # torch's words, raised by a step that never called the scaler
    def raises_torch_words(*args):
        raise RuntimeError("step() has already been called since the last update().")

    rows = checks_practice._gan_rows(raises_torch_words, hidden=False)
    assert rows and all("update never ran" not in row.hint for row in rows)
