import pytest
import torch

from amp_lessons.core.device import (
    cpu_matmul_emulated,
    cuda_bf16_native,
    describe_machine,
    device_present,
    read_cpu_flags,
    resolve_device,
)
from amp_lessons.teaching.machine import what_this_means


def test_report_matches_running_torch():
    report = describe_machine()
    assert report.torch_version == torch.__version__
    assert report.device_type == resolve_device().type
    assert report.cpu_capability == torch.backends.cpu.get_cpu_capability()
    if not torch.cuda.is_available():
        assert report.compute_capability is None and not report.tensor_cores


def test_cpu_flags_are_read_from_proc_cpuinfo(tmp_path):
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor : 0\nflags\t\t: fpu avx2 avx512_bf16 amx_bf16\n")
    assert {"avx2", "avx512_bf16", "amx_bf16"} <= read_cpu_flags(fake)
    assert read_cpu_flags(tmp_path / "missing") == frozenset()


def test_bf16_is_native_from_ampere_on():
    assert not cuda_bf16_native((7, 5))  # T4
    assert cuda_bf16_native((8, 0))  # A100
    assert cuda_bf16_native((9, 0))  # H100/H200


def test_meaning_on_a_cpu_without_bf16_warns_of_slowness():
    report = describe_machine()
    if report.device_type != "cpu":
        return
    from dataclasses import replace

    slow = replace(
        report, bf16_native=False, cpu_bf16_emulated=True, cpu_flags=frozenset({"avx2"})
    )
    onednn = replace(
        report,
        bf16_native=False,
        cpu_bf16_emulated=False,
        cpu_flags=frozenset({"avx2", "avx512bw"}),
    )
    fast = replace(
        report,
        bf16_native=True,
        cpu_bf16_emulated=False,
        cpu_flags=frozenset({"amx_bf16"}),
    )
    assert "SLOWER than fp32" in " ".join(what_this_means(slow))
    assert "oneDNN" in " ".join(what_this_means(onednn))
    assert "SLOWER" not in " ".join(what_this_means(onednn) + what_this_means(fast))


def test_report_says_emulated_exactly_when_onednn_cannot_run_bf16():
    from amp_lessons.core.device import cpu_matmul_emulated

    assert describe_machine().cpu_bf16_emulated == cpu_matmul_emulated(torch.bfloat16)


def test_meaning_on_an_old_gpu_suggests_fp16():
    from dataclasses import replace

    t4 = replace(
        describe_machine(),
        device_type="cuda",
        device_name="Tesla T4",
        compute_capability=(7, 5),
        tensor_cores=True,
        bf16_native=False,
    )
    assert "use fp16 autocast with a GradScaler" in " ".join(what_this_means(t4))


def test_cpu_matmul_emulated_matches_onednn_and_the_clock():
    import pytest

    from amp_lessons.measure.bench import cpu_threads, time_steps

    assert cpu_matmul_emulated(torch.float32) is False
    assert cpu_matmul_emulated(torch.bfloat16) is (
        not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )
    assert cpu_matmul_emulated(torch.float16) is (
        not torch.ops.mkldnn._is_mkldnn_fp16_supported()
    )
    with pytest.raises(ValueError, match="float32, bfloat16 and float16"):
        cpu_matmul_emulated(torch.float64)
    if cpu_matmul_emulated(torch.bfloat16):  # the fallback loop: far slower than fp32
        a = torch.randn(96, 96)
        b = a.bfloat16()
        with cpu_threads(1):
            fp32 = min(time_steps(lambda: a @ a, "cpu", 1, 5))
            bf16 = min(time_steps(lambda: b @ b, "cpu", 1, 3))
        assert bf16 > 3 * fp32, (bf16, fp32)  # min of each: noise only adds


def test_meaning_without_a_gpu_does_not_promise_recorded_results():
    from dataclasses import replace

    cpu = replace(
        describe_machine(),
        device_type="cpu",
        compute_capability=None,
        tensor_cores=False,
    )
    text = " ".join(what_this_means(cpu))
    assert "recorded GPU results if notebooks/results/ has any" in text


@pytest.mark.parametrize("name", ["tpu", "npu", "cuda:x"])
def test_unknown_device_lists_the_valid_ones(name):
    with pytest.raises(ValueError, match="unknown device.*auto, cpu, cuda"):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_says_what_to_use_and_is_not_present():
    with pytest.raises(RuntimeError, match="CUDA was asked for.*device='cpu'"):
        resolve_device("cuda")
    assert device_present("cpu") and not device_present("cuda")


def test_resolve_device_accepts_the_course_devices_only():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device().type == (
        "cuda"
        if torch.cuda.is_available()
        else "mps"
        if device_present("mps")
        else "cpu"
    )
    with pytest.raises(ValueError, match="device must be a string"):
        resolve_device(torch.device("cpu"))
    assert not device_present("xpu")  # not a course device: a ValueError inside
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        with pytest.raises(RuntimeError, match=f"only {n} CUDA device"):
            resolve_device(f"cuda:{n}")
