"""amp_lessons.teaching.scaler_vs_torch, notebook 03's harness: equal runs compare
equal, and a planted or real difference is found at the step and key where it is."""

from __future__ import annotations

import copy
import doctest
import math

import pytest
import torch

from amp_lessons.core import scaler as scaler_module
from amp_lessons.core.scaler import LossScaler
from amp_lessons.teaching import scaler_vs_torch
from amp_lessons.teaching.scaler_vs_torch import first_difference, scripted_run

INJECT = {3: math.inf, 7: math.nan}
KWARGS = {"init_scale": 2.0**16, "growth_interval": 2}


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen))
        for _ in range(12)
    ]


@pytest.fixture(scope="module")
def runs(data):
    """(torch's history, ours) over the same data and injections."""
    return (
        scripted_run(torch.amp.GradScaler("cpu", **KWARGS), data, INJECT),
        scripted_run(LossScaler("cpu", **KWARGS), data, INJECT),
    )


def test_torch_and_ours_give_identical_histories(runs):
    theirs, ours = runs
    assert first_difference(theirs, ours) is None
    assert len(ours) == 12
    skipped = {t for t, h in enumerate(ours, start=1) if h["skipped"]}
    assert set(INJECT) <= skipped  # the injected steps really were skipped ...
    assert skipped == {t for t, h in enumerate(theirs, start=1) if h["skipped"]}
    assert len({h["scale"] for h in ours}) >= 3  # ... and the scale moved both ways
    assert len(ours[-1]["adam"]) == 3 * 4  # step, exp_avg, exp_avg_sq per parameter


@pytest.mark.parametrize(
    "key", ["scale", "skipped", "state_dict", "grads", "params", "adam"]
)
def test_first_difference_finds_a_planted_difference(runs, key):
    theirs, ours = runs
    planted = copy.deepcopy(ours)
    value = planted[4][key]
    if isinstance(value, list):
        value[-1].view(-1)[-1] ^= 1  # one bit of the last tensor
    elif isinstance(value, bool):
        planted[4][key] = not value
    elif isinstance(value, float):
        planted[4][key] = value * 2
    else:
        planted[4][key] = value + " "
    assert first_difference(theirs, planted) == (5, key)
    assert first_difference(theirs, ours) is None  # the deepcopy left ours alone


def test_first_difference_catches_a_wrong_update_rule(data, runs):
    def naive_update(
        scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval
    ):  # an overflow does not restart the count
        tracker = (growth_tracker + 1) % growth_interval
        scale = scale * backoff_factor if found_inf else scale
        return (scale * growth_factor if tracker == 0 else scale), tracker

    theirs, _ = runs
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scaler_module, "next_scale", naive_update)
        wrong = scripted_run(LossScaler("cpu", **KWARGS), data, INJECT)
    step, key = first_difference(theirs, wrong)
    assert step <= 3 and key in {"scale", "state_dict"}


def test_run_is_reproducible_and_leaves_the_global_seed_alone(data):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = scripted_run(LossScaler("cpu", **KWARGS), data[:2])
    assert torch.equal(torch.rand(3), expected)
    second = scripted_run(LossScaler("cpu", **KWARGS), data[:2])
    assert first_difference(first, second) is None
    other_seed = scripted_run(LossScaler("cpu", **KWARGS), data[:2], seed=1)
    assert first_difference(first, other_seed) == (1, "grads")


def test_bad_input_raises_value_error(data, runs):
    with pytest.raises(ValueError, match="outside this run's steps 1..12"):
        scripted_run(LossScaler("cpu"), data, {0: math.inf})
    with pytest.raises(ValueError, match="data is empty"):
        scripted_run(LossScaler("cpu"), [])
    with pytest.raises(ValueError, match="12 and 11 steps"):
        first_difference(runs[0], runs[1][:-1])


def test_docstring_examples_run():
    results = doctest.testmod(scaler_vs_torch)
    assert results.attempted >= 10 and results.failed == 0
