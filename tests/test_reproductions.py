"""Each reproduction shows its symptom without the fix and not with it, with the
evidence torch itself gives (its messages, dtypes and numbers)."""

import pytest
import torch

from amp_lessons import reproductions as rp

pytestmark = pytest.mark.usefixtures("one_thread")

EVIDENCE = {
    "t5_fp16_nan": ("loss nan", "loss "),
    "mask_softmax_nan": ("1 of 3 rows", "0 of 3 rows"),
    "unscale_fp16_gradients": ("ValueError: Attempting to unscale FP16 gradients.",
                               "no error"),
    "unscale_twice_accumulation": ("unscale_() has already been called", "no error"),
    "clip_without_unscale": ("e+04 x", "measured 1 x"),
    "scheduler_warning": ("Detected call of `lr_scheduler.step()`", "no warning"),
    "gan_scalers": ("grew 2 times", "grew 1 times"),
    "custom_function_dtype": ("same dtype", "weight.grad is torch.float32"),
    "autocast_threads": ("worker thread: torch.float32",
                         "worker thread: torch.float16"),
    "resume_without_scaler": ("4 of 4 steps skipped", "0 of 4 steps skipped"),
    "bce_under_autocast": ("nan", "gradient [0.5"),
    "compile_disabled_region": ("differ", "equal"),
    "scaler_in_loop": ("8 of 8 steps skipped", "of 8 steps skipped"),
}  # fmt: skip


def test_every_reproduction_has_its_evidence_listed():
    assert set(rp.REPRODUCTIONS) == set(EVIDENCE)


@pytest.mark.parametrize("key", sorted(EVIDENCE))
def test_symptom_without_the_fix_and_not_with_it(key):
    if key == "compile_disabled_region":
        pytest.importorskip("torch._functorch.config")
    broken, fixed = rp.REPRODUCTIONS[key](False), rp.REPRODUCTIONS[key](True)
    assert broken.broken and not fixed.broken, (broken, fixed)
    want_broken, want_fixed = EVIDENCE[key]
    assert want_broken in broken.evidence and want_fixed in fixed.evidence


def test_reproductions_leave_the_global_rng_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    for key, reproduce in rp.REPRODUCTIONS.items():
        if key != "compile_disabled_region":  # slow; it forks the RNG as well
            reproduce(False)
    assert torch.equal(torch.rand(3), expected)
