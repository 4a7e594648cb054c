"""``bench --precision fp8``: refused with its reason where fp8 cannot run (any CPU,
a GPU before compute capability 8.9, no torchao), and its row built like the others
(checked on a CPU with torchao's emulation, eager; on a capable GPU for real)."""

from __future__ import annotations

import functools

import pytest
import torch

from amp_lessons.cli import main
from amp_lessons.core.precision import PRECISIONS
from amp_lessons.measure import bench, bench_fp8, bench_results
from amp_lessons.measure.fp8_vs_torchao import import_torchao_float8

pytestmark = pytest.mark.usefixtures("one_thread")
TINY_MLP = {"width": 32, "layers": 3, "batch": 8}


def fake_gpu(monkeypatch, capability, name="NVIDIA Test GPU"):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)


def test_a_cpu_is_refused_with_the_reason():
    reason = bench_fp8.fp8_unavailable("cpu")
    assert "compute capability 8.9" in reason and "this run is on cpu" in reason
    assert bench_fp8.default_precisions("cpu") == tuple(PRECISIONS)  # no fp8 by default


def test_an_older_gpu_is_refused_naming_its_capability(monkeypatch):
    fake_gpu(monkeypatch, (8, 6), "NVIDIA A10")
    reason = bench_fp8.fp8_unavailable("cuda")
    assert reason.startswith("NVIDIA A10 has compute capability 8.6")
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H100")
    monkeypatch.setattr(bench_fp8, "import_torchao_float8", lambda: None)
    assert "pip install 'torchao" in bench_fp8.fp8_unavailable("cuda")


@pytest.mark.skipif(import_torchao_float8() is None, reason="needs torchao")
def test_a_capable_gpu_with_torchao_gets_fp8_by_default(monkeypatch):
    fake_gpu(monkeypatch, (9, 0), "NVIDIA H200")
    assert bench_fp8.fp8_unavailable("cuda") is None
    assert bench_fp8.default_precisions("cuda") == (*PRECISIONS, "fp8")


def test_run_bench_skips_fp8_with_its_reason():
    skipped = []
    assert (
        bench.run_bench("cpu", ["mlp"], ["fp8"], {"mlp": TINY_MLP}, 0, 1, skipped) == []
    )
    assert "compute capability 8.9" in skipped[0]["reason"]
    skipped = []
    rows = bench.run_bench(
        "cpu", ["mlp"], ["fp32", "fp8"], {"mlp": TINY_MLP}, 0, 1, skipped
    )
    assert [r["precision"] for r in rows] == ["fp32"]
    assert [s["precision"] for s in skipped] == ["fp8"]
    with pytest.raises(ValueError, match="unknown precision 'fp4'.*fp8"):
        bench.run_bench("cpu", ["mlp"], ["fp4"])


def test_the_command_line_says_why_and_exits_2(capsys):
    assert main(["bench", "--precision", "fp8", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: fp8 cannot run here") and "8.9" in err
    assert "Traceback" not in err


@pytest.mark.skipif(import_torchao_float8() is None, reason="needs torchao")
def test_the_fp8_row_is_built_like_the_others_keeping_the_ends(monkeypatch):
    converted = []
    real = functools.partial(bench_fp8.prepare_fp8, emulate=True, compile=False)

    def emulated(model):
        out = real(model)
        converted.extend(
            n for n, m in out.named_modules() if type(m).__name__ == "Float8Linear"
        )
        return out

    monkeypatch.setattr(bench_fp8, "prepare_fp8", emulated)
    row = bench.bench_one("mlp", "fp8", "cpu", TINY_MLP, warmup=0, iters=1)
    assert converted == ["net.2"]  # of net.0, net.2, net.4: the ends stay bf16
    assert row["precision"] == "fp8" and row["note"] == bench_fp8.FP8_NOTE
    assert row["mfu"] is None and row["step_ms"] > 0 and row["activation_bytes"] > 0
    report = {
        "device": "cuda",
        "torch": torch.__version__,
        "date": "2026-01-01",
        "command": "test",
        "results": bench.add_ratios([row]),
    }
    bench_results.validate_report(report)  # a results file may hold fp8 rows


@pytest.mark.gpu
def test_fp8_row_on_a_real_gpu():
    if bench_fp8.fp8_unavailable("cuda"):
        pytest.skip(bench_fp8.fp8_unavailable("cuda"))
    rows = bench.run_bench(
        "cuda",
        ["mlp"],
        ["bf16", "fp8"],
        {"mlp": {"width": 2048, "layers": 3, "batch": 2048}},
        3,
        5,
    )
    fp8 = next(r for r in rows if r["precision"] == "fp8")
    assert fp8["peak_mem_bytes"] > 0 and fp8["step_ms"] > 0


def test_the_fp8_matmul_shape_rule_is_torchs_own():
    assert bench_fp8.scaled_mm_shape_error(30, 64, 128) is None  # M is free
    assert bench_fp8.scaled_mm_shape_error(32, 48, 16) is None
    assert "divisible by 16" in bench_fp8.scaled_mm_shape_error(32, 40, 128)  # K
    assert "divisible by 16" in bench_fp8.scaled_mm_shape_error(32, 64, 40)  # N
