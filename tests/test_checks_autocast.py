"""Lesson 04's grader (amp_lessons.checks.autocast): reference, known-wrong answers with
their hints, the stub, and expected dtypes read live from this torch's CPU autocast."""

import pytest
import torch
from grader_harness import grader_tests

from amp_lessons.checks import AUTOCAST_OPS, check_autocast_dtypes
from amp_lessons.checks import autocast as graders

# --- reference solutions (copy into the solution cells) -------------------------


def predict_autocast_dtypes():
    low, f32 = torch.bfloat16, torch.float32
    return {
        "matmul(x, w)": low,
        "linear(x, w)": low,
        "relu(x)": f32,
        "relu(linear(x, w))": low,
        "linear(x, w) + x": f32,
        "mse_loss(linear(x, w), linear(y, w))": f32,
        "conv2d(img, k)": low,
        "softmax(linear(x, w))": low,
        "sum(linear(x, w))": low,
        "cross_entropy(linear(x, w), t)": f32,
        "prod(linear(x, w))": f32,
        "layer_norm(linear(x, w))": low,
    }


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def autocast_cuda_style():
    answers = predict_autocast_dtypes()
    for name in (
        "softmax(linear(x, w))",
        "sum(linear(x, w))",
        "layer_norm(linear(x, w))",
    ):
        answers[name] = torch.float32
    return answers


def autocast_everything_low():
    return {name: torch.bfloat16 for name in AUTOCAST_OPS}


def autocast_strings():
    return {
        n: str(d).removeprefix("torch.") for n, d in predict_autocast_dtypes().items()
    }


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "autocast": (
        check_autocast_dtypes,
        predict_autocast_dtypes,
        [
            (autocast_cuda_style, True, "CUDA's autocast would run it in float32"),
            (autocast_everything_low, False, "runs in the dtype of its input"),
            (autocast_everything_low, False, "ops it will not run in low precision"),
            (autocast_everything_low, False, "type promotion"),
            (autocast_strings, False, "not strings"),
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
    dtypes = {name: graders._autocast_dtypes(name)[0] for name in AUTOCAST_OPS}
    assert dtypes == predict_autocast_dtypes()  # this torch's CPU autocast lists
    assert dtypes["matmul(x, w)"] is torch.bfloat16
    assert dtypes["mse_loss(linear(x, w), linear(y, w))"] is torch.float32


# --- fair grading: right or wrong, and why the chosen dtype is wrong; never the dtype


def test_visible_table_never_prints_the_right_dtype(capsys):
    with pytest.raises(AssertionError):
        check_autocast_dtypes(autocast_everything_low)  # wrong wherever float32 is
    out = capsys.readouterr().out
    assert "float32" not in out
    rows = [line for line in out.splitlines() if line.strip().startswith(AUTOCAST_OPS)]
    assert rows and all("(not shown)" in line for line in rows)
    assert "you said bfloat16" in out
