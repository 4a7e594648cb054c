"""amp_lessons.teaching.accelerate_loop: on one process Accelerate gives the course
loop's losses bit for bit, and what it does under the hood is what the lesson says."""

import pytest
import torch

pytest.importorskip("accelerate")

from amp_lessons.core.train import TrainConfig, train  # noqa: E402
from amp_lessons.teaching.accelerate_loop import (  # noqa: E402
    accelerator_for,
    skipped_step_demo,
    train_with_accelerate,
    under_the_hood,
)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_accelerate_matches_the_course_loop_bit_for_bit(precision, one_thread):
    config = TrainConfig(device="cpu", precision=precision, num_steps=12, batch_size=32)
    ours = [r.loss for r in train(config).records]
    theirs = train_with_accelerate(config)
    assert theirs.losses == ours
    assert theirs.skipped == [False] * 12 and theirs.final_scale is None


def test_fp16_on_a_cpu_is_plain_fp32_in_accelerate(one_thread):
    fp16 = TrainConfig(device="cpu", precision="fp16", num_steps=6, batch_size=32)
    fp32 = TrainConfig(device="cpu", precision="fp32", num_steps=6, batch_size=32)
    result = train_with_accelerate(fp16)
    assert result.facts["autocast"] is False and result.facts["scaler"] is None
    assert result.losses == train_with_accelerate(fp32).losses


def test_under_the_hood_autocast_inside_fp32_outside():
    facts = under_the_hood("bf16")
    assert facts["inside"] is torch.bfloat16 and facts["returned"] is torch.float32
    assert facts["parameters"] is torch.float32  # master weights stay fp32
    assert facts["forward_wrapped"] and facts["scaler"] is None
    assert under_the_hood("fp16")["inside"] is torch.float32  # no autocast on a CPU


def test_a_scaler_skip_shows_in_step_was_skipped():
    assert skipped_step_demo(8.0) == {
        "skipped": True,
        "weights_unchanged": True,
        "scale_before": 8.0,
        "scale_after": 4.0,
    }


def test_two_precisions_in_one_process_work_one_after_the_other():
    for precision in ("fp16", "bf16", "fp32"):
        with accelerator_for(precision, torch.device("cpu")) as accelerator:
            assert accelerator.mixed_precision == {"fp32": "no"}.get(
                precision, precision
            )


def test_unknown_precision_and_accumulation_are_refused():
    with pytest.raises(ValueError, match="fp32, bf16 or fp16"):
        under_the_hood("tf32")
    with pytest.raises(ValueError, match="accum_steps=1"):
        train_with_accelerate(TrainConfig(device="cpu", accum_steps=2))
