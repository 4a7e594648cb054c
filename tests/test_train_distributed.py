"""The course loop across processes: ``torchrun --nproc_per_node=2 -m amp_lessons
train --distributed ...`` on 2 CPU processes (gloo), against one process.

Each launch costs a few seconds of process start-up, so the runs are tiny and few.
"""

import json
import warnings

import pytest

from amp_lessons.cli import main
from amp_lessons.core.distributed import fsdp2_unsupported_reason, launch
from amp_lessons.core.train import TrainConfig, train

pytestmark = pytest.mark.slow
COMMON = ["--device", "cpu", "--batch-size", "64", "--log-every", "0"]
needs_fsdp2 = pytest.mark.skipif(
    fsdp2_unsupported_reason("cpu") is not None,
    reason=str(fsdp2_unsupported_reason("cpu")),
)


def run_2(tmp_path, *args, name="run.json"):
    """Launch 2 processes; return rank 0's --json summary."""
    out = tmp_path / name
    result = launch(
        ["train", *COMMON, *args, "--json", out], nproc=2, timeout=240, stream=None
    )
    assert result.returncode == 0, result.output[-3000:]
    return json.loads(out.read_text())


def one_process(**kwargs):
    config = TrainConfig(device="cpu", batch_size=64, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fp16 on a CPU is slow: known
        return train(config)


def test_ddp_on_2_processes_equals_one_process_step_by_step(tmp_path, one_thread):
    two = run_2(
        tmp_path, "--distributed", "ddp", "--precision", "fp32", "--steps", "15"
    )
    one = one_process(precision="fp32", num_steps=15)
    assert (two["world_size"], two["distributed"], two["final_scale"]) == (
        2,
        "ddp",
        None,
    )
    assert [s for s, _ in two["losses"]] == list(range(1, 16))
    for (_, loss2), record in zip(two["losses"], one.records, strict=True):
        assert abs(loss2 - record.loss) <= 1e-5, (loss2, record.loss)


def test_fp16_ddp_skips_the_same_steps_everywhere_and_learns(tmp_path):
    # 2^24 overflows fp16 gradients at first: the scaler skips and halves the scale.
    # A rank that disagreed would end the run (World.combine raises).
    run = run_2(
        tmp_path,
        "--distributed",
        "ddp",
        "--precision",
        "fp16",
        "--steps",
        "30",
        "--init-scale",
        str(2.0**24),
    )
    losses = [loss for _, loss in run["losses"]]
    assert run["skipped_steps"] and run["skipped_steps"][0] == 1
    assert run["final_scale"] < 2.0**24
    assert sum(losses[-5:]) / 5 < 0.6 * losses[0]


@needs_fsdp2
def test_bf16_fsdp2_learns(tmp_path):
    run = run_2(
        tmp_path, "--distributed", "fsdp2", "--precision", "bf16", "--steps", "30"
    )
    losses = [loss for _, loss in run["losses"]]
    assert (
        run["distributed"],
        run["precision"],
        run["skipped_steps"],
        run["final_scale"],
    ) == ("fsdp2", "bf16", [], None)
    assert sum(losses[-5:]) / 5 < 0.6 * losses[0]


@needs_fsdp2
def test_2_process_fsdp2_checkpoint_resumes_in_one_process(tmp_path, one_thread):
    path = tmp_path / "run.dcp"
    run_2(
        tmp_path,
        "--distributed",
        "fsdp2",
        "--precision",
        "fp32",
        "--steps",
        "6",
        "--checkpoint",
        path,
    )
    resumed = one_process(
        precision="fp32",
        num_steps=12,
        distributed="fsdp2",
        checkpoint_path=str(path),
        resume=True,
    )
    unbroken = one_process(precision="fp32", num_steps=12, distributed="fsdp2")
    assert resumed.world_size == 1 and len(resumed.records) == 12
    for a, b in zip(resumed.records, unbroken.records, strict=True):
        assert a.step == b.step and abs(a.loss - b.loss) <= 1e-5, (a, b)


@needs_fsdp2
def test_1_process_fsdp2_checkpoint_resumes_on_2_ddp_processes(tmp_path, one_thread):
    path = tmp_path / "run.dcp"
    one_process(
        precision="fp32", num_steps=6, distributed="fsdp2", checkpoint_path=str(path)
    )
    # DCP names parameters the same under FSDP2 and DDP: either can read the other
    two = run_2(
        tmp_path,
        "--distributed",
        "ddp",
        "--precision",
        "fp32",
        "--steps",
        "12",
        "--checkpoint",
        path,
        "--resume",
    )
    unbroken = one_process(precision="fp32", num_steps=12)
    assert two["world_size"] == 2 and [s for s, _ in two["losses"]] == list(
        range(1, 13)
    )
    for (_, loss), record in zip(two["losses"], unbroken.records, strict=True):
        assert abs(loss - record.loss) <= 1e-5


def test_json_in_one_process_has_the_same_keys(tmp_path, capsys):
    out = tmp_path / "one.json"
    assert (
        main(
            [
                "train",
                *COMMON,
                "--steps",
                "3",
                "--precision",
                "fp16",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads(out.read_text())
    assert set(summary) == {
        "world_size",
        "distributed",
        "precision",
        "losses",
        "skipped_steps",
        "final_scale",
    }
    assert (summary["world_size"], summary["distributed"]) == (1, "none")
    assert summary["final_scale"] == 65536.0 and len(summary["losses"]) == 3


def test_a_global_batch_that_does_not_split_is_refused_before_training(
    monkeypatch, capsys
):
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun --nproc_per_node=2 sets
    assert (
        main(
            [
                "train",
                "--device",
                "cpu",
                "--distributed",
                "ddp",
                "--batch-size",
                "63",
                "--steps",
                "2",
            ]
        )
        == 2
    )
    out, err = capsys.readouterr()
    assert out == "" and "not a multiple of 2" in err and "e.g. 62 or 64" in err
