"""Lesson 03's graders (amp_lessons.teaching.checks.scaler): reference, known-wrong
answers with their hints, the stub, and expectations from a real torch.amp.GradScaler,
which the lesson's `amp_lessons.core.scaler.next_scale` must agree with."""

import json
import math
import random
import re

import pytest
import torch
from grader_harness import grader_tests, other_correct_test
from paths import NOTEBOOKS_DIR

from amp_lessons.core.scaler import next_scale
from amp_lessons.teaching.checks import check_unscale, check_update_rule
from amp_lessons.teaching.checks import scaler as graders

NOTEBOOK = NOTEBOOKS_DIR / "03_loss_scaling.ipynb"

# --- reference solutions (copy into the solution cells) -------------------------


def update_scale(
    scale,
    growth_tracker,
    found_inf,
    growth_factor=2.0,
    backoff_factor=0.5,
    growth_interval=2000,
):
    if found_inf:
        return scale * backoff_factor, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        grown = torch.tensor(scale * growth_factor, dtype=torch.float32).item()
        return (grown if math.isfinite(grown) else scale), 0
    return scale, growth_tracker


def unscale_grads(grads, scale):
    inv_scale = 1.0 / scale  # float64 reciprocal; mul_ rounds it to float32
    found_inf = False
    for g in grads:
        found_inf = found_inf or not torch.isfinite(g).all().item()
        g.mul_(inv_scale)
    return found_inf


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def update_no_tracker_reset_on_inf(scale, tracker, found_inf, *args, **kwargs):
    new_scale, new_tracker = update_scale(scale, tracker, found_inf, *args, **kwargs)
    return new_scale, (tracker if found_inf else new_tracker)


def update_grows_on_inf(scale, tracker, found_inf, growth_factor=2.0, *args, **kw):
    if found_inf:
        return scale * growth_factor, 0
    return update_scale(scale, tracker, found_inf, growth_factor, *args, **kw)


def update_off_by_one(
    scale,
    tracker,
    found_inf,
    growth_factor=2.0,
    backoff_factor=0.5,
    growth_interval=2000,
):
    if found_inf:
        return scale * backoff_factor, 0
    if tracker == growth_interval:  # checks before counting this step
        return scale * growth_factor, 0
    return scale, tracker + 1


def update_forgets_to_grow(
    scale,
    tracker,
    found_inf,
    growth_factor=2.0,
    backoff_factor=0.5,
    growth_interval=2000,
):
    if found_inf:
        return scale * backoff_factor, 0
    if tracker + 1 == growth_interval:  # the streak restarts, the scale stays
        return scale, 0
    return scale, tracker + 1


def update_no_reset_after_growth(scale, tracker, found_inf, *args, **kwargs):
    new_scale, new_tracker = update_scale(scale, tracker, found_inf, *args, **kwargs)
    return new_scale, (tracker + 1 if new_scale > scale else new_tracker)


def update_unbounded_growth(
    scale,
    tracker,
    found_inf,
    growth_factor=2.0,
    backoff_factor=0.5,
    growth_interval=2000,
):
    if found_inf:
        return scale * backoff_factor, 0
    if tracker + 1 == growth_interval:
        return scale * growth_factor, 0
    return scale, tracker + 1


def unscale_not_in_place(grads, scale):
    found_inf = any(not torch.isfinite(g).all() for g in grads)
    grads = [g * (1.0 / scale) for g in grads]
    return found_inf


def unscale_divide(grads, scale):
    for g in grads:
        g.div_(scale)
    return any(not torch.isfinite(g).all() for g in grads)


def unscale_misses_nan(grads, scale):
    found_inf = any(torch.isinf(g).any() for g in grads)
    for g in grads:
        g.mul_(1.0 / scale)
    return bool(found_inf)


def unscale_stops_at_the_first_inf(grads, scale):
    for g in grads:
        if not torch.isfinite(g).all():
            return True  # the grads after this one stay scaled
        g.mul_(1.0 / scale)
    return False


def unscale_skips_on_inf(grads, scale):
    if any(not torch.isfinite(g).all() for g in grads):
        return True
    for g in grads:
        g.mul_(1.0 / scale)
    return False


def update_grows_one_late(scale, tracker, found_inf, growth_factor=2.0, **factors):
    """`tracker > growth_interval` after counting: growth one step late (a walk's
    answer, told before to use the arguments it did use)."""
    if found_inf:
        return scale * factors.get("backoff_factor", 0.5), 0
    tracker += 1
    if tracker > factors.get("growth_interval", 2000):
        return scale * growth_factor, 0
    return scale, tracker


def update_grows_past_the_interval(scale, growth_tracker, found_inf, **factors):
    """`>=` where torch has `==`: it differs once a tracker is past the interval."""
    interval = factors.get("growth_interval", 2000)
    if not found_inf and growth_tracker + 1 > interval:
        factors = {**factors, "growth_interval": growth_tracker + 1}
    return update_scale(scale, growth_tracker, found_inf, **factors)


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "update": (
        check_update_rule,
        update_scale,
        [
            (update_no_tracker_reset_on_inf, False, "growth_tracker goes back to 0"),
            (update_grows_on_inf, False, "never grow on an overflow step"),
            (update_off_by_one, False, "torch counts this step"),
            (update_forgets_to_grow, False, "the scale grows by growth_factor (2.0)"),
            (update_no_reset_after_growth, False, "after growing, reset"),
            (update_unbounded_growth, True, "stored in float32"),
            (update_grows_past_the_interval, True, "grew too early"),
            (update_grows_one_late, False, "torch counts this step"),
            # "a float, an int", the exercise says: a tensor is told so
            (
                lambda *a, **k: tuple(map(torch.tensor, update_scale(*a, **k))),
                False,
                "not a tensor",
            ),
        ],
    ),
    "unscale": (
        check_unscale,
        unscale_grads,
        [
            (unscale_not_in_place, False, "unscale IN PLACE"),
            (unscale_divide, False, "you divided by scale: the right unscaling"),
            (unscale_misses_nan, False, "nan counts too"),
            (unscale_skips_on_inf, False, "even when an inf/nan is found"),
            (unscale_stops_at_the_first_inf, False, "even when an inf/nan is found"),
            # True or False, the exercise says: a one-element tensor is told so
            (lambda g, s: torch.tensor(unscale_grads(g, s)), False, "not a tensor"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)
test_other_correct_answers_pass = other_correct_test(
    [
        (check_update_rule, lambda *a, **k: list(update_scale(*a, **k)), "list"),
    ]
)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_next_scale_matches_gradscaler_on_random_states():
    # the grader's expectation is a real GradScaler; the lesson's rule must agree
    rng = random.Random(0)
    cases = list(graders._UPDATE_CASES + graders._UPDATE_HIDDEN)
    for _ in range(40):
        interval = rng.choice([1, 2, 3, 5])
        cases.append(
            (
                2.0 ** rng.randint(-5, 127),
                rng.randrange(interval),
                rng.random() < 0.3,
                {"growth_factor": rng.choice([2.0, 3.0]), "growth_interval": interval},
            )
        )
    for scale, tracker, found_inf, factors in cases:
        settings = {**graders._DEFAULTS, **factors}
        assert graders._torch_update(scale, tracker, found_inf, **factors) == (
            next_scale(scale, tracker, found_inf, **settings)
        )


def test_unscale_cases_tell_division_from_multiplication():
    x = graders._unscale_cases(hidden=False)[1][1][0]
    assert not torch.equal(x / 3.0, x * (1 / 3.0))
    unscaled, found = graders._torch_unscale([x], 3.0)
    assert torch.equal(unscaled[0], x * (1 / 3.0)) and not found


# --- fair grading: bit-identity is what this exercise checks, and it says why ------


def test_dividing_is_rejected_with_why_bit_identity_is_the_point(capsys):
    with pytest.raises(AssertionError):
        check_unscale(unscale_divide)
    out = " ".join(capsys.readouterr().out.split())
    assert "the right unscaling, rounded differently" in out
    assert "Bit-identity is the point of this exercise" in out
    assert "must train to the very same bits" in out


def test_the_exercise_says_bit_identity_is_the_point_and_why():
    notebook = json.loads(NOTEBOOK.read_text())
    question = next(
        "".join(c["source"])
        for c in notebook["cells"]
        if "".join(c["source"]).startswith("## Exercise")
        and "unscale with the inf check" in "".join(c["source"])
    )
    question = " ".join(question.split())
    assert "Bit-identity is the point here" in question
    assert "g.div_(scale)" in question and "the very same bits" in question


# --- hints that fit what the answer did --------------------------------------------


def test_a_scale_that_does_not_grow_is_not_blamed_on_the_count(capsys):
    # the tracker was counted and reset right: the hint sent the learner looking
    # for an off-by-one that was not there
    with pytest.raises(AssertionError):
        check_update_rule(update_forgets_to_grow)
    out = " ".join(capsys.readouterr().out.split())
    assert "the tracker restarts from 0, as you have it" in out
    assert "torch counts this step" not in out


def test_the_got_column_shows_the_scale_as_returned(capsys):
    # 2**127 * 2 is a finite Python float: shown rounded to float32 it read "inf",
    # which the answer never returned
    def no_ceiling(scale, tracker, found_inf, *args, **kwargs):
        if scale == 2.0**127:
            return scale * 2, 0
        return update_scale(scale, tracker, found_inf, *args, **kwargs)

    with pytest.raises(AssertionError):
        check_update_rule(no_ceiling)
    out = capsys.readouterr().out
    assert "(2**128, 0)" in out and "(inf, 0)" not in out, out
    assert "stored in float32" in " ".join(out.split())


def test_an_unscale_that_returns_at_the_first_inf_gets_one_hint(capsys):
    # the grads before the inf unscaled, the ones after left: the inf row had the
    # generic hint, the nan row (nothing unscaled) the real reason
    with pytest.raises(AssertionError):
        check_unscale(unscale_stops_at_the_first_inf)
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("even when an inf/nan is found") == 2, out
    assert "multiply every grad in place" not in out


@pytest.mark.parametrize(
    "wrong", [unscale_not_in_place, unscale_divide, unscale_skips_on_inf]
)
def test_no_unscale_hint_writes_the_line(wrong, capsys):
    with pytest.raises(AssertionError):
        check_unscale(wrong)
    out = capsys.readouterr().out
    assert "mul_(" not in out, out


def test_a_count_of_differing_values_is_not_cut(capsys):
    with pytest.raises(AssertionError):
        check_unscale(unscale_divide)
    assert re.search(r"found_inf=False, \d+ differ ", capsys.readouterr().out)


def test_growth_one_step_late_is_not_told_to_use_the_arguments(capsys):
    """`>` where torch has `==` leaves the scale unmoved on the growth step, which
    the defaults would explain too: the hint is the growth count, not "use the
    arguments" (that answer used them)."""
    with pytest.raises(AssertionError, match="cases failed"):
        check_update_rule(update_grows_one_late)
    out = " ".join(capsys.readouterr().out.split())
    assert "torch counts this step" in out
    assert "not the default values" not in out
