"""Inductor's fusion as the estimate models it (amp_lessons.measure.inductor_fusion):
each group's bytes counted by hand (a chain, a shared input, two views of one tensor,
an update in place, a gradient nothing reads), unrelated kernels kept apart, an fp8
Linear's amax fused with its cast, the loss left eager, the trace unchanged by
recording its dataflow, and the kernel count against Inductor's own on this CPU."""

from __future__ import annotations

import re
import shutil
from collections import Counter

import pytest
import torch

from amp_lessons.core.models import GPT
from amp_lessons.measure import ladder_estimate, model_zoo
from amp_lessons.measure.estimate import estimate_step
from amp_lessons.measure.inductor_fusion import fusible, inductor_fusion
from amp_lessons.measure.trace import trace_step

META = torch.device("meta")
N = 1024  # a 1024 x 1024 float32 tensor: 4 MiB
MIB4 = N * N * 4


class Chain(torch.nn.Module):
    """x -> x * 2 + 1 -> relu -> @ w: three elementwise kernels, then a matmul."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(N, N, device=META))

    def forward(self, x):
        return torch.relu(x * 2 + 1) @ self.w


def _fused(model, x, loss_fn=None, precision="fp32"):
    trace = trace_step(model, x, precision, loss_fn, dataflow=True)
    return trace, inductor_fusion(trace)


def test_a_chain_reads_its_input_once_and_writes_only_what_leaves_it():
    x = torch.empty(N, N, device=META)  # no grad: the chain's backward is relu's
    trace, fused = _fused(Chain(), x)
    forward = [k for k in fused.kernels if k.region == "forward"]
    assert [k.name for k in forward] == ["fused_mul_add_relu", "mm"]
    # eager: mul reads x, writes t1; add reads t1, writes t2; relu reads t2, writes
    # t3: six passes. Fused: x read once, relu's output written once (mm reads it,
    # and backward's threshold_backward reads it too)
    eager = [k for k in trace.kernels if k.region == "forward" and not k.flops]
    assert sum(k.bytes for k in eager) == 6 * MIB4
    assert forward[0].bytes == 2 * MIB4 and forward[0].launches == 1
    mm = next(k for k in trace.kernels if k.name == "mm")
    assert forward[1] == mm  # the library kernel as it was


def test_an_intermediate_something_else_reads_is_written():
    class SavesTheMiddle(torch.nn.Module):
        def forward(self, x):
            middle = x * 2
            return torch.sigmoid(middle) @ middle  # the matmul reads the middle

    x = torch.empty(N, N, device=META, requires_grad=True)
    _, fused = _fused(SavesTheMiddle(), x)
    first = fused.kernels[0]
    assert first.name == "fused_mul_sigmoid"
    # reads x, writes the middle (the matmul reads it) and the sigmoid's output
    assert first.bytes == 3 * MIB4


def test_kernels_that_read_one_tensor_fuse_and_read_it_once():
    class TwoOfX(torch.nn.Module):
        def forward(self, x):
            a, b = x * 2, x + 1  # both read x: Inductor's horizontal fusion
            return a @ (b * b.sin())  # b read twice in one kernel: once from memory

    x = torch.empty(N, N, device=META, requires_grad=True)
    _, fused = _fused(TwoOfX(), x)
    first = fused.kernels[0]
    assert first.name == "fused_mul_add_sin"
    # reads x once; writes a (the matmul reads it), and b and sin(b), which the
    # backward of b * sin(b) reads, and their product (the matmul's)
    assert first.bytes == 5 * MIB4


def test_a_gradient_nothing_reads_is_written():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.empty(N, N, device=META))
            self.w = torch.nn.Parameter(torch.empty(N, N, device=META))

        def forward(self, x):
            return torch.relu(x * self.scale) @ self.w

    x = torch.empty(N, N, device=META)
    _, fused = _fused(Scaled(), x)
    backward = [k for k in fused.kernels if k.region == "backward" and not k.flops]
    assert [k.name for k in backward] == ["fused_threshold_backward_mul"]
    # reads the matmul's gradient, relu's output and x; writes the scale's gradient,
    # which the optimizer reads after the step (nothing in the trace does)
    assert backward[0].bytes == 4 * MIB4


def test_two_views_of_one_tensor_are_read_once():
    class Transposed(torch.nn.Module):
        def forward(self, x):
            return (x * 2 + x.t()) @ x  # x and its transpose: one storage

    x = torch.empty(N, N, device=META, requires_grad=True)
    _, fused = _fused(Transposed(), x)
    first = fused.kernels[0]
    assert first.name == "fused_mul_add"
    assert first.bytes == 2 * MIB4  # x read once, the sum written once


def test_unrelated_kernels_stay_apart():
    class TwoCasts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.empty(N, N, device=META))
            self.b = torch.nn.Parameter(torch.empty(N, N, device=META))

        def forward(self, x):
            a, b = self.a * 2, self.b * 3  # two kernels in a row
            return x @ a @ b

    x = torch.empty(N, N, device=META)
    trace, fused = _fused(TwoCasts(), x)
    # each weight's product feeds its own matmul: neither shares a tensor with
    # the other, so no fusion at all
    assert [k.name for k in fused.kernels[:3]] == ["mul", "mul", "mm"]
    assert fused.kernels[:2] == trace.kernels[:2]


def test_an_update_in_place_reads_what_was_there_and_is_written():
    class Accumulates(torch.nn.Module):
        def __init__(self, read_after: bool):
            super().__init__()
            self.read_after = read_after

        def forward(self, x, acc):
            acc.add_(x * 2)
            return (acc if self.read_after else x) @ x

    x = torch.empty(N, N, device=META, requires_grad=True)
    for read_after in (True, False):  # a running statistic nothing reads later too
        acc = torch.empty(N, N, device=META)
        _, fused = _fused(Accumulates(read_after), (x, acc), lambda out: out.sum())
        first = fused.kernels[0]
        assert first.name == "fused_mul_add_"
        # reads x and the accumulator's old value, writes the accumulator
        assert first.bytes == 3 * MIB4


def test_an_fp8_linears_scaling_fuses_with_its_cast():
    w = model_zoo.gpt(layers=1, width=64, heads=2, seq=32, batch=2, vocab=128)
    trace, fused = _fused(w.model, w.inputs, w.loss_fn, "fp8")
    model = ("forward", "backward")
    assert sum(k.name == "amax" for k in trace.kernels if k.region in model) >= 3
    assert not any(k.name == "amax" for k in fused.kernels if k.region in model)
    assert any("amax" in k.name for k in fused.kernels if k.kind == "fused")


def test_the_loss_and_its_backward_stay_eager():
    w = model_zoo.gpt(layers=1, width=64, heads=2, seq=32, batch=2, vocab=128)
    trace, fused = _fused(w.model, w.inputs, w.loss_fn, "bf16")
    for region in ("loss", "loss_backward"):
        eager = [k for k in trace.kernels if k.region == region]
        assert eager and [k for k in fused.kernels if k.region == region] == eager
    # the regions come in the step's order
    order = list(dict.fromkeys(k.region for k in trace.kernels))
    assert order == ["forward", "loss", "loss_backward", "backward"]
    assert sum(k.flops for k in fused.kernels) == sum(k.flops for k in trace.kernels)


def test_recording_dataflow_leaves_the_trace_as_it_was():
    # holding the step's tensors to name their storages would make autograd copy
    # each parameter's gradient (13 extra copy_ kernels here): the numbers are kept
    # apart from the tensors
    w = model_zoo.gpt(layers=1, width=64, heads=2, seq=32, batch=2, vocab=128)
    plain = trace_step(w.model, w.inputs, "bf16", w.loss_fn)
    recorded = trace_step(w.model, w.inputs, "bf16", w.loss_fn, dataflow=True)
    assert recorded.kernels == plain.kernels  # names, FLOPs, bytes, launches
    assert all(not k.reads and not k.writes for k in plain.kernels)
    assert all(k.reads or k.writes for k in recorded.kernels)
    # without dataflow nothing is fusible: the compiled trace is the eager one
    assert inductor_fusion(plain).kernels == plain.kernels


def test_compile_speeds_up_the_memory_bound_step_and_not_the_compute_bound_one():
    gpu = "H100-SXM5-80GB"
    w = model_zoo.gpt(layers=12, width=768, heads=12, seq=1024, batch=32, vocab=8192)

    def step(precision, compiled):
        return estimate_step(
            w.model, w.inputs, gpu, precision, "adam", w.loss_fn, compiled=compiled
        )

    bf16, bf16_compiled = step("bf16", False), step("bf16", True)
    fp32, fp32_compiled = step("fp32", False), step("fp32", True)
    assert bf16_compiled.flops == bf16.flops
    assert bf16_compiled.memory_s < 0.9 * bf16.memory_s
    assert bf16_compiled.kernels < 0.8 * bf16.kernels
    assert bf16_compiled.seconds < 0.9 * bf16.seconds  # bf16 is memory-heavy
    assert 0.97 * fp32.seconds < fp32_compiled.seconds < fp32.seconds  # compute


def test_the_compiled_rungs_are_the_compiled_estimate():
    sizes = ladder_estimate.gpu_sizes("H200-SXM-141GB")
    rows = ladder_estimate.estimated_ladder("H200-SXM-141GB", sizes)
    compiled = next(r for r in rows if r["rung"] == "+ torch.compile")
    w = model_zoo.gpt(12, 768, 12, 1024, sizes["batch"], sizes["vocab_size"])
    e = estimate_step(
        w.model,
        w.inputs,
        "H200-SXM-141GB",
        "bf16",
        "adam",
        w.loss_fn,
        implementation="fused",
        clip=True,
        compiled=True,
    )
    assert compiled["estimated_ms"] == pytest.approx(e.seconds * 1e3)


def _inductor_cpu_kernels(model, x) -> tuple[int, int]:
    """The kernels Inductor's C++ backend launches for the compiled forward and
    backward of ``model(x).float().sum()`` on this CPU: calls, not definitions (two
    layers' identical kernels share one definition)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()  # a cached graph would generate no code
    compiled = torch.compile(model)

    def step():
        compiled(x).float().sum().backward()

    _, codes = run_and_get_code(step)
    forward, backward = (
        len(re.findall(r"^\s+cpp_fused_\w+\(", code, re.M)) for code in codes
    )
    return forward, backward


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="Inductor's C++ backend needs a C++ compiler",
)
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("layers", [1, 2])
def test_the_model_fuses_a_little_more_than_inductor_does_on_this_cpu(layers):
    # Inductor's C++ backend can fuse more than its GPU one (a C++ kernel may hold
    # several loop nests): the model, which fuses whatever shares a tensor, launches
    # at most a fifth fewer kernels than it, and far fewer than eager
    torch.manual_seed(0)
    real = GPT(vocab_size=64, block_size=16, n_layer=layers, n_head=2, n_embd=32)
    inductor = _inductor_cpu_kernels(real, torch.randint(0, 64, (2, 16)))
    w = model_zoo.gpt(layers, 32, 2, 16, 2, 64)
    trace = trace_step(
        w.model, w.inputs, "fp32", lambda out: out.float().sum(), dataflow=True
    )
    generated = Counter(k.region for k in inductor_fusion(trace).kernels if fusible(k))
    eager = Counter(k.region for k in trace.kernels if fusible(k))
    for i, region in enumerate(("forward", "backward")):
        assert 0.75 * inductor[i] <= generated[region] <= inductor[i], region
        assert generated[region] < 0.7 * eager[region], region
