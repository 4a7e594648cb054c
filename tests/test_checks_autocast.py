"""Lesson 04's grader (amp_lessons.teaching.checks.autocast): reference, known-wrong
answers with their hints, the stub, and expected dtypes read live from this torch's CPU
autocast."""

import pytest
import torch
from grader_harness import grader_tests
from reference_solutions import predict_autocast_dtypes

from amp_lessons.teaching.checks import AUTOCAST_OPS, check_autocast_dtypes
from amp_lessons.teaching.checks import autocast as graders

# --- reference solutions (copy into the solution cells) -------------------------
# (predict_autocast_dtypes: in tests/reference_solutions.py, which tests/test_checks.py
# uses too)


# --- known-wrong answers, each with a fragment of the hint it must get ------------

CUDA_ONLY_FP32 = (
    "softmax(linear(x, w))",
    "sum(linear(x, w))",
    "layer_norm(linear(x, w))",
)


def autocast_cuda_lists_on_the_cpu():
    answers = predict_autocast_dtypes()
    for name in CUDA_ONLY_FP32:
        answers["cpu"][name] = torch.float32
    return answers


def autocast_cpu_lists_on_cuda():
    answers = predict_autocast_dtypes()
    for name in CUDA_ONLY_FP32:
        answers["cuda"][name] = torch.float16
    return answers


def autocast_everything_low():
    return {
        "cpu": {name: torch.bfloat16 for name in AUTOCAST_OPS},
        "cuda": {name: torch.float16 for name in AUTOCAST_OPS},
    }


def autocast_bf16_on_cuda():
    answers = predict_autocast_dtypes()
    answers["cuda"]["matmul(x, w)"] = torch.bfloat16
    return answers


def autocast_strings():
    return {
        device: {n: str(d).removeprefix("torch.") for n, d in answers.items()}
        for device, answers in predict_autocast_dtypes().items()
    }


def autocast_one_device_only():
    return predict_autocast_dtypes()["cpu"]  # the lesson's old, CPU-only form


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "autocast": (
        check_autocast_dtypes,
        predict_autocast_dtypes,
        [
            (
                autocast_cuda_lists_on_the_cpu,
                True,
                "the CPU and CUDA lists differ, which is why",
            ),
            (autocast_cpu_lists_on_cuda, True, "(the CPU and CUDA lists differ)"),
            (autocast_everything_low, False, "runs in the dtype of its input"),
            (autocast_everything_low, False, "ops it will not run in low precision"),
            (autocast_everything_low, False, "type promotion"),
            (autocast_bf16_on_cuda, False, "it never produces bfloat16"),
            (autocast_strings, False, "not strings"),
            (autocast_one_device_only, False, "one answer per device now"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_autocast_expectations_are_read_live_and_mix_dtypes():
    dtypes = {
        device: {
            name: graders._autocast_dtypes(name, device)[0] for name in AUTOCAST_OPS
        }
        for device in graders.AUTOCAST_DEVICES
    }
    assert dtypes == predict_autocast_dtypes()  # this torch's CPU and CUDA lists
    assert dtypes["cpu"]["matmul(x, w)"] is torch.bfloat16
    assert dtypes["cuda"]["matmul(x, w)"] is torch.float16
    assert dtypes["cpu"]["mse_loss(linear(x, w), linear(y, w))"] is torch.float32
    differ = [
        n
        for n in AUTOCAST_OPS
        if (dtypes["cpu"][n] is torch.float32) != (dtypes["cuda"][n] is torch.float32)
    ]
    assert differ == list(CUDA_ONLY_FP32)  # the lists differ, on these three


def test_cuda_expectations_leave_no_autocast_state_behind():
    graders._autocast_dtypes("softmax(linear(x, w))", "cuda")
    assert not torch.is_autocast_enabled("cuda")
    assert torch.get_autocast_dtype("cuda") is torch.float16


# --- fair grading: right or wrong, and why the chosen dtype is wrong; never the dtype


def test_visible_table_never_prints_the_right_dtype(capsys):
    with pytest.raises(AssertionError):
        check_autocast_dtypes(autocast_everything_low)  # wrong wherever float32 is
    out = capsys.readouterr().out
    assert "float32" not in out
    rows = [
        line
        for line in out.splitlines()
        if line.strip().startswith(("cpu: ", "cuda: "))
    ]
    assert rows and all("(not shown)" in line for line in rows)
    assert "you said bfloat16" in out


def test_every_op_is_graded_where_the_learner_sees_it(capsys):
    # a learner's walk: wrong dtypes for sum, layer_norm (CUDA), conv2d and prod (CPU),
    # all then graded only in the hidden cases, passed the visible check
    answers = predict_autocast_dtypes()
    answers["cuda"]["sum(linear(x, w))"] = torch.float16
    answers["cuda"]["layer_norm(linear(x, w))"] = torch.float16
    answers["cpu"]["conv2d(img, k)"] = torch.float32
    answers["cpu"]["prod(linear(x, w))"] = torch.bfloat16
    with pytest.raises(AssertionError, match="4 of 25 cases failed"):
        check_autocast_dtypes(lambda: answers)
    capsys.readouterr()
