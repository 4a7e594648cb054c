"""``python -m amp_lessons``: help, train, bench, and one-line errors with status 2."""

import re
import subprocess
import sys

import pytest
import torch

from amp_lessons import bench_results
from amp_lessons.__main__ import main

TINY_BENCH = ["--mlp-width", "32", "--mlp-batch", "8", "--gpt-layers", "1",
              "--gpt-embd", "16", "--gpt-block", "16", "--gpt-batch", "2",
              "--gpt-vocab", "32", "--warmup", "0", "--iters", "1"]


@pytest.fixture(autouse=True)
def restore_threads():
    old = torch.get_num_threads()  # `train` sets one thread for the tiny model
    yield
    torch.set_num_threads(old)


def run_module(*args):
    return subprocess.run([sys.executable, "-m", "amp_lessons", *args],
                          capture_output=True, text=True, timeout=300)


def test_help_lists_train_and_bench():
    done = run_module("--help")
    assert done.returncode == 0
    assert re.search(r"^\s+train\s", done.stdout, re.M)
    assert re.search(r"^\s+bench\s", done.stdout, re.M)


def test_a_mistake_is_one_line_on_stderr_with_status_2():
    done = run_module("train", "--device", "cpu", "--precision", "fp8")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == ("error: unknown precision 'fp8'; use one of: "
                                   "fp32, tf32, fp16, bf16")


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "unknown device 'tpu'; use one of: auto, cpu, cuda"),
    (["--precision", "bf16", "--scaler", "torch"], "not needed with bf16"),
    (["--accum", "0"], "accum_steps must be a positive integer"),
    (["--resume"], "resume=True needs checkpoint_path"),
])
def test_train_errors(capsys, args, message):
    assert main(["train", "--device", "cpu", *args]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err and out == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda(capsys):
    assert main(["train", "--device", "cuda"]) == 2
    assert "--device cpu" in capsys.readouterr().err


def test_usage_mistakes_exit_2(capsys):
    assert main(["train", "--steps", "many"]) == 2
    assert main([]) == 2
    assert "invalid int value" in capsys.readouterr().err


def test_train_bf16_learns_and_prints_loss_scale_and_skips(capsys):
    assert main(["train", "--device", "cpu", "--precision", "bf16", "--steps", "60",
                 "--log-every", "20"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("step")]
    assert [int(line.split()[1]) for line in lines] == [1, 20, 40, 60]
    assert all("| scale 1 | skipped 0 |" in line for line in lines)
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < 0.4 * first


def test_train_fp16_counts_skips_and_notes_cpu_slowness(capsys):
    assert main(["train", "--device", "cpu", "--precision", "fp16", "--steps", "30",
                 "--init-scale", str(2.0**40), "--log-every", "30"]) == 0
    out, err = capsys.readouterr()
    skipped = int(re.search(r"skipped (\d+) of 30 steps", out).group(1))
    assert skipped >= 5
    assert f"| skipped {skipped} |" in out.splitlines()[-2]
    assert "note: fp16 on a CPU works but is slow" in err


def step_lines(out):
    """Printed step lines without their wall time, which differs run to run."""
    return [line.rsplit("|", 1)[0] for line in out.splitlines()
            if line.startswith("step")]


def test_train_resume_from_the_command_line_continues_the_same_run(capsys, tmp_path):
    ckpt = str(tmp_path / "run.pt")
    args = ["train", "--device", "cpu", "--precision", "fp16", "--scaler", "ours",
            "--log-every", "5", "--accum", "2", "--batch-size", "32"]
    assert main([*args, "--steps", "20"]) == 0
    full = step_lines(capsys.readouterr().out)
    assert main([*args, "--steps", "10", "--checkpoint", ckpt]) == 0
    assert f"checkpoint: {ckpt} (step 10)" in capsys.readouterr().out
    assert main([*args, "--steps", "20", "--checkpoint", ckpt, "--resume"]) == 0
    resumed = step_lines(capsys.readouterr().out)
    assert resumed == [line for line in full if int(line.split()[1]) > 10]


def test_bench_prints_a_table_and_writes_json(capsys, tmp_path):
    path = tmp_path / "out.json"
    assert main(["bench", "--device", "cpu", "--json", str(path), *TINY_BENCH]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and f"wrote {path}" in out
    report = bench_results.load_results(path)
    assert report["command"].startswith("python -m amp_lessons bench --device cpu")
    assert report["sizes"]["mlp"]["width"] == 32
    assert len(report["results"]) == 8
    assert sum(1 for line in out.splitlines()
               if line.startswith(("mlp ", "transformer "))) == 8


def test_bench_size_mistakes(capsys):
    assert main(["bench", "--device", "cpu", "--gpt-embd", "30", "--gpt-heads",
                 "4"]) == 2
    assert "multiple of n_head" in capsys.readouterr().err


def test_record_is_for_gpu_results_only(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["bench", "--device", "cpu", "--record"]) == 2
    assert "use --json PATH" in capsys.readouterr().err
