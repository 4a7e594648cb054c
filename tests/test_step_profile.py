"""A training step's time by kernel group (amp_lessons.measure.step_profile): the
kernels' names sorted into the estimate's groups, a profiler trace summed, the CPU
run of the bench's step, and the split on the GPU check's summary page."""

from __future__ import annotations

import json
import time

import pytest
import torch
from paths import RESULTS_DIR
from test_microbench import h200_profile

from amp_lessons.measure import microbench, step_profile
from amp_lessons.measure.bench import CPU_SIZES
from amp_lessons.measure.bench_results import load_results
from amp_lessons.measure.estimate_check import profile_section

# Kernel names as CUDA profilers print them, copied from public profiles of PyTorch
# runs: the memory-efficient attention of float32 and flash attention of bf16 (a
# training report comparing SDPA's fp32 and bf16 kernels), cuDNN's attention (the
# bf16 default on Hopper from torch 2.11, pytorch/pytorch#196678; name prefixes),
# cuBLAS on Hopper (nvjet_*, sm90_xmma_*), Ampere and Volta (ampere_sgemm_*,
# volta_sgemm_*), cuBLASLt's split-K and epilogue kernels, CUTLASS's SIMT SGEMM, the
# multi-tensor kernels of foreach optimizers and clip_grad_norm_, and elementwise,
# norm, softmax and loss kernels.
NAMED = {
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80": "attention",
    "fmha_cutlassB_f32_aligned_64x64_k64_sm80": "attention",
    "pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16": "attention",
    "nvjet_sm90_tst_": "matmul",
    "cublasLt::splitKreduce_kernel": "matmul",
    "cublasLt::epilogue::impl::globalKernel": "matmul",
    "lpnorm_cleanup": "optimizer",
    "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN": "matmul",
    "nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT": "matmul",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cublas": "matmul",
    "ampere_sgemm_128x64_tn": "matmul",
    "volta_sgemm_128x64_nt": "matmul",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm": "matmul",
    "splitKreduce_kernel": "matmul",
    "multi_tensor_apply_kernel": "optimizer",
    "unrolled_elementwise_kernel": "other",
    "elementwise_kernel_with_index": "other",
    "vectorized_layer_norm_kernel": "other",
    "cunn_SoftMaxForward": "other",
    "nll_loss_forward_reduce_cuda_kernel_2d": "other",
    # and the aten ops of a CPU run
    "aten::mm": "matmul",
    "aten::addmm": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::_foreach_mul_": "optimizer",
    "aten::linear": "other",  # its own time only: the aten::mm inside is matmul
    "aten::matmul": "other",
    "aten::gelu": "other",
}


@pytest.mark.parametrize("name", NAMED)
def test_each_kernel_falls_in_its_group(name):
    assert step_profile.kernel_group(name) == NAMED[name]


def test_a_trace_sums_kernels_and_copies_only():
    def event(name, cat, dur):
        return {"ph": "X", "cat": cat, "name": name, "dur": dur}

    trace = {
        "traceEvents": [
            event("ampere_sgemm_128x64_tn", "kernel", 1500.0),
            event("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "kernel", 500),
            event("fmha_cutlassB_f32_aligned_64x64_k64_sm80", "kernel", 2000),
            event("multi_tensor_apply_kernel", "kernel", 250),
            event("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 100),
            event("aten::mm", "cpu_op", 9999),  # the CPU's side: not GPU time
            event("cudaLaunchKernel", "cuda_runtime", 9999),
            {"ph": "i", "cat": "kernel", "name": "ampere_sgemm", "dur": 9999},
        ]
    }
    assert step_profile.groups_from_trace(trace) == {
        "matmul": 2.0,
        "attention": 2.0,
        "optimizer": 0.25,
        "other": 0.1,
    }
    assert step_profile.groups_from_trace({}) == dict.fromkeys(step_profile.GROUPS, 0)


def test_the_estimate_kinds_fall_in_the_same_groups():
    by_kind = {"matmul": 0.010, "attention": 0.004, "optimizer": 0.002, "clip": 0.001}
    by_kind |= {"scaler": 0.001, "pointwise": 0.003, "norm": 0.001, "cast": 0.0005}
    groups = step_profile.estimate_groups(by_kind)
    assert groups == pytest.approx(
        {"matmul": 10.0, "attention": 4.0, "optimizer": 4.0, "other": 4.5}
    )
    assert sum(groups.values()) == pytest.approx(1e3 * sum(by_kind.values()))


def test_the_bench_step_splits_on_the_cpu(one_thread):
    was = torch.backends.cuda.matmul.allow_tf32
    split = step_profile.profile_step(
        "transformer", "bf16", "cpu", CPU_SIZES["transformer"]
    )
    assert split["config"] == "transformer" and split["precision"] == "bf16"
    groups = split["groups"]
    assert set(groups) == set(step_profile.GROUPS)
    # the GPT's Linears, its SDPA, AdamW's and clipping's foreach ops all ran
    assert all(groups[g] > 0 for g in ("matmul", "attention", "optimizer"))
    assert torch.backends.cuda.matmul.allow_tf32 is was


def test_the_splits_stop_before_the_deadline(one_thread):
    saved = []
    done = step_profile.bench_splits("cpu", time.time() + 300, saved.append, ("fp32",))
    assert [s["precision"] for s in done] == ["fp32"] and saved == [done]
    assert step_profile.bench_splits("cpu", time.time() + 3) == []  # < the margin


def test_a_failed_split_costs_only_its_precision(monkeypatch, capsys):
    def profile_step(config, precision, device, sizes):
        if precision == "bf16":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return _split(precision, matmul=1.0)

    monkeypatch.setattr(step_profile, "profile_step", profile_step)
    done = step_profile.bench_splits("cpu", time.time() + 300)
    assert [s["precision"] for s in done] == ["tf32", "fp32"]
    assert capsys.readouterr().out == (
        "step split bf16 failed: OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2 GiB\n"
    )


def _split(precision, **ms):
    groups = dict.fromkeys(step_profile.GROUPS, 0.0) | ms
    return {"config": "transformer", "precision": precision, "groups": groups}


def test_the_summary_sets_each_group_beside_the_estimate():
    report = load_results(RESULTS_DIR / "bench_h200.json")
    profile = h200_profile(tf32=400.0, bf16=700.0)
    assert "Where the transformer's step goes" not in profile_section(report, profile)
    profile["step_split"] = [
        _split("tf32", matmul=60.0, attention=80.0, optimizer=2.0, other=20.0)
    ]
    text = profile_section(report, profile)
    rows = [line for line in text.splitlines() if line.startswith("| tf32 |")]
    assert [r.split(" | ")[1] for r in rows] == [*step_profile.GROUPS, "all"]
    assert rows[1].startswith("| tf32 | attention | 80.00 | ")
    assert rows[-1].startswith("| tf32 | all | 162.00 | ")
    assert "| fp32 | matmul |" not in text  # no split measured in fp32
    profile["step_split"] = [_split("tf32")]  # a profiler that saw no kernel
    assert "recorded no GPU kernel" in profile_section(report, profile)


BROKEN_SPLITS = {
    "a group missing": {"precision": "tf32", "groups": {"matmul": 1.0}},
    "a negative time": _split("tf32", matmul=-1.0),
    "a time as a bool": _split("tf32", matmul=True),
    "a time as text": _split("tf32", other="2"),
    "no precision": {"groups": _split("tf32")["groups"]},
    "a precision no split measures": _split("fp8"),
    "not a dict": ["tf32", 1.0],
}


@pytest.mark.parametrize("case", BROKEN_SPLITS)
def test_a_broken_split_is_refused(case):
    profile = h200_profile(bf16=700.0)
    profile["step_split"] = [_split("fp32"), BROKEN_SPLITS[case]]
    with pytest.raises(ValueError, match="step splits each need a precision"):
        microbench.check_profile(profile)
    profile["step_split"] = [_split("fp32", matmul=1.0)]
    microbench.check_profile(profile)  # the same profile with a sound split passes
    json.dumps(profile)


@pytest.mark.gpu
def test_a_cuda_step_splits_into_its_kernel_groups():
    # the GPU's real kernel names (cuBLAS, SDPA's backends, foreach AdamW) fall in
    # their groups; a tiny GPT, so that gpu-check's test step stays short
    sizes = {"n_layer": 2, "n_head": 4, "n_embd": 256, "block_size": 256}
    sizes |= {"batch": 8, "vocab_size": 1024}
    for precision in ("tf32", "bf16"):
        if torch.cuda.get_device_capability() < (8, 0):
            pytest.skip("TF32 and bf16 need compute capability 8.0+")
        groups = step_profile.profile_step("transformer", precision, "cuda", sizes)[
            "groups"
        ]
        assert all(groups[g] > 0 for g in ("matmul", "attention", "optimizer")), groups
