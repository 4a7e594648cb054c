"""The GPU profile (amp_lessons.measure.microbench): measured on a CPU here (the code
path; `make gpu-check` measures it on a GPU), turned into the estimate's Efficiency,
read by the estimate command, refused when broken."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
from paths import RESULTS_DIR, ROOT

from amp_lessons.cli import main
from amp_lessons.measure import microbench
from amp_lessons.measure.bench_results import load_results
from amp_lessons.measure.estimate import FITTED, estimate_step
from amp_lessons.measure.estimate_check import profile_section
from amp_lessons.measure.fused_kernels import attention_flops, fused_attention
from amp_lessons.measure.gemm_model import gemm_efficiency
from amp_lessons.measure.gpus import GPUS
from amp_lessons.measure.kernels import KernelRecorder
from amp_lessons.measure.model_zoo import gpt

H200 = "H200-SXM-141GB"


def h200_profile(attention: dict | None = None, **tflops) -> dict:
    """A made-up profile of the H200 (these numbers were never measured): large
    GEMMs at ``tflops`` per arithmetic, a copy at 4 TB/s, and fused attention at
    ``attention``'s TFLOP/s per arithmetic where given."""
    profile = {
        "schema": microbench.SCHEMA,
        "device_name": "NVIDIA H200",
        "torch": torch.__version__,
        "date": "made up for a test",
        "command": "",
        "gemm": [
            {"math": math, "n": 8192, "seconds": 2 * 8192**3 / (t * 1e12), "tflops": t}
            for math, t in tflops.items()
        ],
        "copy": [{"mib": 1024, "seconds": 2**31 / 4e12, "gbs": 4000.0}],
        "kernel_us": 2.5,
        "cpu_us": 6.0,
    }
    if attention is not None:
        shape = list(microbench.ATTENTION_SHAPE["cuda"])
        profile["attention"] = [
            {"math": math, "shape": shape, "seconds": 1e-3, "tflops": t}
            for math, t in attention.items()
        ]
    return profile


def test_a_cpu_profile_has_every_measurement_and_its_provenance(one_thread):
    profile = microbench.measure_profile("cpu", "pytest")
    microbench.check_profile(profile)
    assert profile["device_name"] == "cpu" and profile["torch"] == torch.__version__
    assert profile["command"] == "pytest" and profile["date"]
    sides = microbench.GEMM_SIDES["cpu"]
    assert [(r["math"], r["n"]) for r in profile["gemm"]] == [
        (math, n) for math in microbench.GEMM_MATHS for n in sides
    ]
    for r in profile["gemm"]:  # the rate is the FLOPs of that product over its time
        assert r["tflops"] == pytest.approx(2 * r["n"] ** 3 / r["seconds"] / 1e12)
    shape = microbench.ATTENTION_SHAPE["cpu"]
    assert [(r["math"], r["shape"]) for r in profile["attention"]] == [
        (math, list(shape)) for math in microbench.ATTENTION_MATHS
    ]
    for r in profile["attention"]:  # forward and backward, causal, as the estimate
        forward = attention_flops(shape, shape[2], causal=True)
        assert r["tflops"] == pytest.approx(3.5 * forward / r["seconds"] / 1e12)
    assert [r["mib"] for r in profile["copy"]] == list(microbench.COPY_MIB["cpu"])
    assert profile["kernel_us"] > 0 and profile["cpu_us"] > 0
    assert torch.backends.cuda.matmul.allow_tf32 is False  # left as it was
    with pytest.raises(ValueError, match="'cuda' or 'cpu'"):
        microbench.measure_profile("mps")


def test_efficiency_is_achieved_over_peak_over_the_wave_model():
    gpu = GPUS[H200]
    eff = microbench.efficiency_of(h200_profile(bf16=700.0, fp16=650.0), gpu)
    wave = gemm_efficiency((1, 8192, 8192, 8192), gpu.sms)
    assert eff.tensor == pytest.approx(700e12 / gpu.peak("bf16") / wave)  # the best
    assert eff.memory == pytest.approx(4000.0 / gpu.bandwidth_gbs)
    assert (eff.kernel_us, eff.cpu_us) == (2.5, 6.0)
    # what the profile lacks keeps the fit's
    assert (eff.tf32, eff.fp32) == (FITTED.tf32, FITTED.fp32)
    slower = microbench.efficiency_of(h200_profile(bf16=350.0, tf32=200.0), gpu)
    assert slower.tensor == pytest.approx(eff.tensor / 2)
    assert slower.tf32 == pytest.approx(200e12 / gpu.peak("tf32") / wave)
    # the largest side measured is the one that counts
    two = h200_profile(tf32=200.0)
    two["gemm"].append(dict(two["gemm"][0], n=1024, tflops=20.0))
    assert microbench.efficiency_of(two, gpu).tf32 == pytest.approx(slower.tf32)


def test_a_slower_tf32_profile_slows_the_tf32_estimate_and_nothing_else():
    gpu = GPUS[H200]
    fast = microbench.efficiency_of(h200_profile(tf32=400.0, bf16=700.0), gpu)
    slow = microbench.efficiency_of(h200_profile(tf32=200.0, bf16=700.0), gpu)

    def step(precision, eff):
        w = gpt(4, 1024, 16, 512, 8, 32768)
        return estimate_step(
            w.model, w.inputs, H200, precision, w.optimizer, w.loss_fn, eff
        )

    assert step("tf32", slow).compute_s > 1.5 * step("tf32", fast).compute_s
    assert step("bf16", slow).seconds == step("bf16", fast).seconds


def test_a_timing_of_several_calls_gives_the_time_of_one(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(microbench.time, "perf_counter", lambda: clock[0])

    def call():  # each call takes 2 ms on the fake clock
        clock[0] += 0.002

    assert microbench._seconds(call, "cpu", calls=10) == pytest.approx(0.002)
    assert microbench._seconds(call, "cpu") == pytest.approx(0.002)


def test_attention_counts_the_flops_the_estimate_records_for_that_call():
    shape = microbench.ATTENTION_SHAPE["cuda"]
    b, h, t, d = shape
    assert attention_flops(shape, t, causal=True) == 2 * b * h * t * t * d  # by hand
    assert attention_flops(shape, t, causal=False) == 4 * b * h * t * t * d
    recorder = KernelRecorder()
    q = torch.empty(shape, device="meta", dtype=torch.bfloat16, requires_grad=True)
    out = fused_attention(recorder, q, q, q, is_causal=True)
    out.sum().backward()
    traced = sum(k.flops for k in recorder.kernels if k.kind == "attention")
    assert traced == 3.5 * attention_flops(shape, t, causal=True)


def test_a_profile_prices_attention_with_its_own_rate_and_nothing_else():
    gpu = GPUS[H200]
    fast = h200_profile({"fp32": 60.0, "bf16": 500.0}, tf32=400.0, bf16=700.0)
    eff = microbench.efficiency_of(fast, gpu)
    assert eff.attention_fp32 == pytest.approx(60e12 / gpu.peak("fp32"))
    assert eff.attention_tensor == pytest.approx(500e12 / gpu.peak("bf16"))
    # a profile from before attention was measured prices it as a GEMM, as fitted
    old = microbench.efficiency_of(h200_profile(tf32=400.0, bf16=700.0), gpu)
    assert (old.attention_fp32, old.attention_tensor) == (None, None)
    assert (FITTED.attention_fp32, FITTED.attention_tensor) == (None, None)
    slow = h200_profile({"fp32": 30.0, "bf16": 500.0}, tf32=400.0, bf16=700.0)

    def step(precision, profile):
        w = gpt(2, 768, 12, 1024, 8, 8192)
        return estimate_step(
            w.model,
            w.inputs,
            H200,
            precision,
            w.optimizer,
            w.loss_fn,
            microbench.efficiency_of(profile, gpu),
        ).by_kind

    # float32 attention (fp32 and TF32 alike) takes twice as long at half the rate
    for precision in ("fp32", "tf32"):
        fast_kinds, slow_kinds = step(precision, fast), step(precision, slow)
        assert slow_kinds["attention"] == pytest.approx(2 * fast_kinds["attention"])
        assert slow_kinds["matmul"] == fast_kinds["matmul"]
    assert step("bf16", slow) == step("bf16", fast)  # 16-bit attention: its own rate
    # and 16-bit attention at half its rate: bf16's attention only
    slow16 = h200_profile({"fp32": 60.0, "bf16": 250.0}, tf32=400.0, bf16=700.0)
    fast_kinds, slow_kinds = step("bf16", fast), step("bf16", slow16)
    assert slow_kinds["attention"] == pytest.approx(2 * fast_kinds["attention"])
    assert slow_kinds["matmul"] == fast_kinds["matmul"]
    assert step("tf32", slow16) == step("tf32", fast)


BROKEN = {
    "no kernel time": (
        lambda p: p.pop("kernel_us"),
        "not a GPU profile (no kernel_us)",
    ),
    "another schema": (lambda p: p.update(schema=99), "schema 99, this course reads 1"),
    "a zero rate": (
        lambda p: p["gemm"][0].update(tflops=0.0),
        "rates and times must all be positive",
    ),
    "a row without its rate": (
        lambda p: p["copy"][0].pop("gbs"),
        "rates and times must all be positive",
    ),
    "a GEMM without its side": (
        lambda p: p["gemm"][0].pop("n"),
        "rates and times must all be positive",
    ),
    "a time as text": (
        lambda p: p.update(kernel_us="3"),
        "rates and times must all be positive",
    ),
    "a time as a bool": (
        lambda p: p.update(cpu_us=True),
        "rates and times must all be positive",
    ),
    "an infinite rate": (
        lambda p: p["gemm"][0].update(tflops=float("inf")),
        "rates and times must all be positive",
    ),
    "no date": (lambda p: p.pop("date"), "not a GPU profile (no date)"),
    "attention in an unknown arithmetic": (
        lambda p: p["attention"][0].update(math="tf32"),
        "attention rows each need fp32, fp16 or bf16, a shape of 4 sizes",
    ),
    "attention without its shape": (
        lambda p: p["attention"][0].update(shape=[16, 12, 1024]),
        "attention rows each need fp32, fp16 or bf16, a shape of 4 sizes",
    ),
    "attention at a negative rate": (
        lambda p: p["attention"][0].update(tflops=-1.0),
        "attention rows each need fp32, fp16 or bf16, a shape of 4 sizes",
    ),
    "attention rows that are not a list": (
        lambda p: p.update(attention={"fp32": 1.0}),
        "attention rows each need fp32, fp16 or bf16, a shape of 4 sizes",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_each_broken_profile_is_refused_in_one_sentence(case, tmp_path):
    spoil, message = BROKEN[case]
    profile = h200_profile({"fp32": 50.0}, bf16=700.0)
    spoil(profile)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    with pytest.raises(ValueError, match=re.escape(message)):
        microbench.load_profile(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        microbench.load_profile(path)
    with pytest.raises(ValueError, match="cannot read the GPU profile"):
        microbench.load_profile(tmp_path / "missing.json")


def test_the_estimate_command_prices_with_a_profile_of_its_gpu_only(tmp_path, capsys):
    path = tmp_path / "gpu_profile_h200.json"
    path.write_text(json.dumps(h200_profile(tf32=150.0, bf16=700.0)))
    args = [
        "estimate",
        "--gpu",
        H200,
        "--model",
        "mlp",
        "--precision",
        "tf32",
        "--json",
    ]
    assert main(args) == 0
    fitted = json.loads(capsys.readouterr().out)[0]
    assert main([*args, "--profile", str(path)]) == 0
    profiled = json.loads(capsys.readouterr().out)[0]
    assert profiled["seconds"] > fitted["seconds"]  # 150 of 495 TF32 TFLOP/s
    assert main(["estimate", "--gpu", "A100-SXM4-80GB", "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: the profile {path} was measured on NVIDIA H200: it prices that GPU "
        f"only (--gpu {H200})"
    )


def test_the_summary_sets_the_profile_estimate_beside_the_h200_record():
    report = load_results(RESULTS_DIR / "bench_h200.json")
    text = profile_section(report, h200_profile(tf32=300.0, bf16=700.0))
    rows = [line for line in text.splitlines() if line.startswith("| transformer")]
    assert [r.split(" | ")[1] for r in rows] == ["fp32", "tf32", "fp16", "bf16"]
    assert "made up for a test" in text and "63% in TF32" in text
    assert "in fp32" not in text  # not measured: the fit's, and not called measured
    assert "attention" not in text
    text = profile_section(report, h200_profile({"fp32": 33.5}, bf16=700.0))
    words = "fused attention (forward and backward) 50% of the CUDA-core peak in fp32"
    assert words in text
    assert "fp16/bf16 peak" not in text and "tensor-core peak" not in text
    assert profile_section(dict(report, synthetic=True), h200_profile(bf16=1.0)) == ""


def test_the_gpu_check_worker_writes_a_profile(tmp_path):
    out = tmp_path / "profile.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "amp_lessons.tooling.gpu_check",
            "microbench-worker",
            str(out),
            "--device",
            "cpu",
            "--command",
            "make gpu-check",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "microbench: 8 GEMMs, 3 attentions, 2 copies, tiny kernel "
    )
    profile = microbench.load_profile(out)
    assert profile["command"] == "make gpu-check" and profile["device_name"] == "cpu"
    assert [s["precision"] for s in profile["step_split"]] == ["tf32", "bf16", "fp32"]


@pytest.mark.gpu
def test_cuda_attention_runs_at_a_plausible_rate():
    # a small shape: gpu-check's test step stays short; the rate is the FLOPs the
    # estimate counts over CUDA events' time, between 1 TFLOP/s and the bf16 peak
    rows = microbench.attention_rows("cuda", (4, 8, 512, 64))
    assert [r["math"] for r in rows] == list(microbench.ATTENTION_MATHS)[: len(rows)]
    for r in rows:
        assert 1.0 < r["tflops"] < 2000.0, r
