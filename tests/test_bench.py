"""The benchmark: FLOP counts against torch's counter, timing, the table, and the
speed/memory panel's measurement (results files: test_bench_results.py)."""

import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from amp_lessons.core.memory import (
    activation_bytes,
    format_bytes,
    optimizer_state_bytes,
)
from amp_lessons.core.models import MLP
from amp_lessons.core.precision import PRECISIONS
from amp_lessons.measure import bench, speed_memory

TINY = {
    "mlp": {"width": 32, "layers": 3, "batch": 8},
    "transformer": {
        "n_layer": 1,
        "n_head": 2,
        "n_embd": 16,
        "block_size": 16,
        "batch": 2,
        "vocab_size": 32,
    },
}


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def counted_flops(config, sizes):
    """FLOPs of one training step as torch's FlopCounterMode sees them, and the part
    it counted in scaled_dot_product_attention (none on a CPU: no formula there)."""
    model, x, y, loss_fn, _ = bench.build(config, sizes, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(x), y).backward()
    sdpa = sum(
        n
        for op, n in counter.get_flop_counts()["Global"].items()
        if "attention" in str(op)
    )
    return counter.get_total_flops(), sdpa


def test_mlp_flops_equal_torchs_flop_counter():
    sizes = {"width": 48, "layers": 4, "batch": 5}
    assert bench.train_flops("mlp", sizes) == counted_flops("mlp", sizes)[0]
    assert bench.train_flops("mlp", bench.GPU_SIZES["mlp"]) == 8 * 2 * 512 * 4096**2


def test_transformer_flops_equal_torchs_flop_counter_plus_attention():
    sizes = {
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 24,
        "block_size": 12,
        "batch": 3,
        "vocab_size": 40,
    }
    total, sdpa = counted_flops("transformer", sizes)
    tokens, T, C, L = 3 * 12, 12, 24, 2
    attention = 3 * tokens * 4 * T * C * L  # QK^T and AV, forward and backward
    assert total - sdpa == bench.train_flops("transformer", sizes) - attention
    assert total - sdpa > 0


@pytest.mark.parametrize(
    "name, precision, expected",
    [
        ("NVIDIA H200", "bf16", 989),
        ("NVIDIA H100 80GB HBM3", "tf32", 495),
        ("NVIDIA H100 PCIe", "fp16", 756),
        ("NVIDIA A100-SXM4-40GB", "tf32", 156),
        ("NVIDIA A100 80GB PCIe", "fp32", 19.5),
        ("NVIDIA L4", "bf16", 121),
        ("Tesla T4", "fp16", 65),
        ("Tesla V100-SXM2-16GB", "tf32", 15.7),
    ],
)
def test_peak_tflops_by_gpu_name(name, precision, expected):
    assert bench.peak_tflops(name)[precision] == expected


@pytest.mark.parametrize("name", ["NVIDIA L40S", "NVIDIA GeForce RTX 3060", "cpu"])
def test_unknown_gpus_have_no_peak_so_no_mfu(name):
    assert bench.peak_tflops(name) is None


def test_time_steps_stops_at_the_deadline_after_one_timed_step():
    calls = []

    def step():
        calls.append(1)
        time.sleep(0.01)

    past = time.perf_counter()  # already passed: one timed step, after the warm-up
    assert len(bench.time_steps(step, "cpu", warmup=2, iters=5, deadline=past)) == 1
    assert len(calls) == 3
    far = time.perf_counter() + 3600
    assert len(bench.time_steps(step, "cpu", warmup=0, iters=4, deadline=far)) == 4


@pytest.mark.parametrize(
    "name, kind, momentum",
    [
        ("adam", torch.optim.Adam, None),
        ("adamw", torch.optim.AdamW, None),
        ("sgd", torch.optim.SGD, 0.0),
        ("sgd_momentum", torch.optim.SGD, 0.9),
    ],
)
def test_make_optimizer_keeps_the_state_memory_counts(name, kind, momentum):
    model = MLP((8, 8, 8))
    optimizer = bench.make_optimizer(name, model.parameters(), lr=0.5)
    assert type(optimizer) is kind and optimizer.defaults["lr"] == 0.5
    if momentum is not None:
        assert optimizer.defaults["momentum"] == momentum
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    state = sum(t.nbytes for s in optimizer.state.values() for t in s.values())
    assert state == optimizer_state_bytes(model, name)
    with pytest.raises(ValueError, match="unknown optimizer 'lion'; use one of adam"):
        bench.make_optimizer("lion", model.parameters())


def test_time_steps_warms_up_untimed_then_times_each_step():
    calls = []

    def step():
        calls.append(1)
        time.sleep(0.01)

    times = bench.time_steps(step, "cpu", warmup=2, iters=3)
    assert len(calls) == 5 and len(times) == 3
    assert all(9.0 <= t < 1000 for t in times)


def test_sizes_merge_and_refuse_unknown_names():
    sizes = bench.merge_sizes("cpu", {"mlp": {"width": 512}})
    assert sizes["mlp"] == {**bench.CPU_SIZES["mlp"], "width": 512}
    assert bench.CPU_SIZES["mlp"]["width"] != 512  # the defaults were not changed
    with pytest.raises(ValueError, match="unknown bench config 'cnn'"):
        bench.merge_sizes("cpu", {"cnn": {}})
    with pytest.raises(ValueError, match="unknown size 'depth' for mlp; sizes are"):
        bench.merge_sizes("cpu", {"mlp": {"depth": 3}})
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        bench.merge_sizes("cpu", {"mlp": {"batch": 0}})
    with pytest.raises(ValueError, match="multiple of n_head"):
        bench.merge_sizes("cpu", {"transformer": {"n_embd": 30, "n_head": 4}})
    with pytest.raises(ValueError, match="unknown precision 'fp64'"):
        bench.run_bench("cpu", precisions=["fp64"])


@pytest.fixture(scope="module")
def tiny_rows():
    return bench.run_bench("cpu", sizes=TINY, warmup=1, iters=2)


def test_cpu_threads_are_set_while_measuring_then_restored():
    torch.set_num_threads(2)
    seen = []
    with bench.cpu_threads(1):
        seen.append(torch.get_num_threads())
    with bench.cpu_threads(None):
        seen.append(torch.get_num_threads())
    assert seen == [1, 2] and torch.get_num_threads() == 2
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        with bench.cpu_threads(0):
            pass


def test_tiny_bench_has_every_config_and_precision(tiny_rows):
    rows = tiny_rows
    assert [(r["config"], r["precision"]) for r in rows] == [
        (c, p) for c in bench.CONFIGS for p in PRECISIONS
    ]
    for r in rows:
        assert r["step_ms"] > 0 and len(r["times_ms"]) == 2
        assert r["peak_mem_bytes"] is None and r["mfu"] is None  # CPU: not tracked
        assert r["activation_bytes"] > 0 and r["tflops"] > 0
        assert r["flops_per_step"] == bench.train_flops(r["config"], TINY[r["config"]])
    fp32 = [r for r in rows if r["precision"] == "fp32"]
    assert all(r["speedup_vs_fp32"] == 1.0 for r in fp32)
    assert "fp32 again" in rows[1]["note"]  # tf32 on a CPU says what it is


def test_amp_keeps_more_bytes_for_the_mlp_and_fewer_for_the_transformer(tiny_rows):
    """Lesson 06's point: weight copies make AMP keep MORE for a small-batch MLP."""
    act = {(r["config"], r["precision"]): r["activation_bytes"] for r in tiny_rows}
    for low in ("fp16", "bf16"):
        assert act["mlp", low] > act["mlp", "fp32"]
        assert act["transformer", low] < act["transformer", "fp32"]
    assert act["mlp", "tf32"] == act["mlp", "fp32"]


def test_activation_bytes_are_memory_modules_count(tiny_rows):
    model, x, *_ = bench.build("mlp", TINY["mlp"], torch.device("cpu"))
    row = next(r for r in tiny_rows if (r["config"], r["precision"]) == ("mlp", "bf16"))
    assert row["activation_bytes"] == activation_bytes(model, x, torch.bfloat16)


def test_table_shows_bytes_with_units_and_numbers_the_notes(tiny_rows):
    text = bench.format_table(tiny_rows)
    header, _, first, *rest = text.splitlines()
    assert header.split()[:4] == ["config", "prec", "step", "ms"]
    assert "peak" in header.split() and "act" in header.split()
    fp32 = tiny_rows[0]
    assert f" {format_bytes(fp32['activation_bytes'])} " in first  # memory's formatter
    assert first.split()[4] == "-"  # no peak on a CPU
    assert "[1] TF32 is an NVIDIA GPU mode" in text


def test_ratios_are_against_the_same_configs_fp32():
    rows = bench.add_ratios(
        [
            {
                "config": "a",
                "precision": "fp32",
                "step_ms": 10.0,
                "peak_mem_bytes": 100,
                "activation_bytes": 40,
            },
            {
                "config": "a",
                "precision": "bf16",
                "step_ms": 4.0,
                "peak_mem_bytes": 60,
                "activation_bytes": 20,
            },
            {
                "config": "b",
                "precision": "bf16",
                "step_ms": 1.0,
                "peak_mem_bytes": None,
                "activation_bytes": 5,
            },
        ]
    )
    assert rows[1]["speedup_vs_fp32"] == 2.5
    assert rows[1]["peak_mem_ratio_vs_fp32"] == 0.6
    assert rows[1]["activation_ratio_vs_fp32"] == 0.5
    assert rows[2]["speedup_vs_fp32"] is None  # no fp32 row for config b


# -- GPU -----------------------------------------------------------------------------

GPU_MID = {
    "mlp": {"width": 4096, "layers": 3, "batch": 512},
    "transformer": {
        "n_layer": 4,
        "n_head": 8,
        "n_embd": 512,
        "block_size": 512,
        "batch": 16,
        "vocab_size": 4096,
    },
}


@pytest.fixture(scope="module")
def cuda_rows():
    return bench.run_bench("cuda", sizes=GPU_MID, warmup=3, iters=10)


@pytest.mark.gpu
def test_cuda_bench_measures_peak_memory_and_mfu(cuda_rows):
    name = torch.cuda.get_device_name()
    for r in cuda_rows:
        assert isinstance(r["peak_mem_bytes"], int) and r["peak_mem_bytes"] > 0
        assert r["peak_mem_bytes"] >= r["resident_bytes"] > 0
        assert (r["mfu"] is not None) == (bench.peak_tflops(name) is not None)
        if r["mfu"] is not None:
            assert 0 < r["mfu"] < 1.2


@pytest.mark.gpu
def test_bf16_is_faster_and_smaller_on_a_tensor_core_gpu(cuda_rows):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("bf16 needs compute capability 8.0+")
    row = {(r["config"], r["precision"]): r for r in cuda_rows}
    bf16 = row["transformer", "bf16"]
    assert bf16["speedup_vs_fp32"] > 1.5
    assert bf16["peak_mem_ratio_vs_fp32"] < 0.9
    assert row["transformer", "fp16"]["speedup_vs_fp32"] > 1.5
    assert row["mlp", "bf16"]["speedup_vs_fp32"] > 1.5


@pytest.mark.gpu
def test_tf32_mode_really_changes_cuda_matmuls():
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 needs compute capability 8.0+")
    from amp_lessons.core.precision import tf32_mode

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(1024, 1024, device="cuda", generator=g)
    exact = (a.double() @ a.double()).float()
    with tf32_mode(False):
        err_fp32 = (a @ a - exact).abs().max().item()
    with tf32_mode(True):
        err_tf32 = (a @ a - exact).abs().max().item()
    assert err_tf32 > 10 * err_fp32


# -- the speed/memory panel's measurement ---------------------------------------------


def test_measure_speed_memory_counts_memory_exactly_and_times_each_precision():
    rows = speed_memory.measure_speed_memory(
        16, 4, ("fp32", "bf16"), iters=2, optimizer="sgd_momentum"
    )
    assert [r["precision"] for r in rows] == ["fp32", "bf16"]
    model = MLP((16,) * 4)
    x = torch.randn(4, 16)
    weights = sum(p.nbytes for p in model.parameters())
    for row, dtype in zip(rows, (None, torch.bfloat16), strict=True):
        m = row["memory"]
        assert m["weights"] == m["gradients"] == row["param_bytes"] == weights
        assert m["optimizer_state"] == weights  # one momentum buffer per parameter
        assert row["activation_bytes"] == activation_bytes(model, x, dtype)
        assert len(row["times_ms"]) == 2 and row["step_ms"] > 0
        assert row["peak_mem_bytes"] is None  # CPU: not tracked
    # a spent budget: each precision still gets its warm-up and ONE timed step
    rows = speed_memory.measure_speed_memory(
        16, 4, ("fp32", "bf16"), iters=3, budget_ms=0
    )
    assert [len(r["times_ms"]) for r in rows] == [1, 1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"width": 0}, "width must be a positive int"),
        ({"warmup": -1}, "warmup must be an int >= 0"),
        ({"precisions": ()}, "no precision chosen"),
        ({"precisions": ("fp8",)}, "unknown precision"),
        ({"optimizer": "lion"}, "unknown optimizer 'lion'"),
    ],
)
def test_measure_speed_memory_refuses_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        speed_memory.measure_speed_memory(**kwargs)


def test_measure_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    speed_memory.measure_speed_memory(16, 4, ("fp32",), time_steps=False)
    assert torch.equal(torch.random.get_rng_state(), state)
