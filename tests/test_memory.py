"""amp_lessons.core.memory: exact bytes kept for backward, checked against hand counts,
against autograd's own graph (the ``_saved_*`` attributes of its nodes), against real
torch.optim state, and on CUDA against the caching allocator."""

from contextlib import nullcontext

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.core.memory import (
    MemoryBreakdown,
    activation_bytes,
    byte_unit,
    compare_precisions,
    format_bytes,
    memory_breakdown,
    optimizer_state_bytes,
    saved_storages,
)

LOW = [torch.bfloat16, torch.float16]  # both run under CPU autocast in torch >= 2.3


def mlp(width: int = 64, depth: int = 3, bias: bool = False) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(width, width, bias=bias)]
        if i < depth - 1:
            layers += [nn.ReLU()]
    return nn.Sequential(*layers)


def graph_saved_bytes(model: nn.Module, inputs, dtype=None) -> int:
    """Independent count: walk the autograd graph and read each node's ``_saved_*``
    tensors (no hooks involved), deduplicated by storage, model state excluded."""
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    ctx = nullcontext() if dtype is None else torch.amp.autocast("cpu", dtype=dtype)
    with ctx:
        out = model(*args)
    state = {
        t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]
    }
    seen, stack, storages = set(), [out.grad_fn], {}
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            value = getattr(node, name)
            for t in value if isinstance(value, tuple | list) else [value]:
                # a Python number autograd wrapped into a 0-dim CPU float64 tensor
                # (`x / 4.0`): saved, but never shown to saved-tensor hooks
                wrapped = isinstance(t, torch.Tensor) and t.dim() == 0
                wrapped = wrapped and t.dtype == torch.float64 and not t.is_cuda
                if isinstance(t, torch.Tensor) and not wrapped:
                    s = t.untyped_storage()
                    if s.data_ptr() not in state:
                        storages[s.data_ptr()] = s.nbytes()
        stack.extend(fn for fn, _ in node.next_functions)
    return sum(storages.values())


# ---- hand-computed counts ----------------------------------------------------------


def test_linear_keeps_its_input():
    lin = nn.Linear(8, 4, bias=False)
    x = torch.randn(3, 8)
    assert activation_bytes(lin, x) == 3 * 8 * 4
    # with a bias, addmm still keeps only the input: the bias grad needs no tensor
    assert activation_bytes(nn.Linear(8, 4), x) == 3 * 8 * 4


@pytest.mark.parametrize("dtype", LOW)
def test_linear_under_autocast_keeps_the_cast_input(dtype):
    lin = nn.Linear(8, 4, bias=False)
    x = torch.randn(3, 8)
    (saved,) = saved_storages(lin, x, dtype)
    assert (saved.nbytes, saved.dtype, saved.kind) == (3 * 8 * 2, dtype, "activation")
    # when x needs a gradient, backward multiplies by the weight: its copy is kept
    parts = memory_breakdown(lin, x.requires_grad_(), dtype)
    assert (parts.activations, parts.weight_copies) == (3 * 8 * 2, 4 * 8 * 2)
    assert activation_bytes(lin, x, dtype) == 3 * 8 * 2 + 4 * 8 * 2


def test_the_weight_itself_is_never_counted():
    lin = nn.Linear(8, 4, bias=False)
    x = torch.randn(3, 8, requires_grad=True)
    ptrs = []

    def pack(t):
        ptrs.append(t.untyped_storage().data_ptr())
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lin(x)
    # fp32 backward does keep weight.t(), a view of the parameter, for x's gradient
    assert lin.weight.untyped_storage().data_ptr() in ptrs
    assert activation_bytes(lin, x) == 3 * 8 * 4


def test_relu_mlp_by_hand():
    model = mlp(width=16, depth=2)  # Linear(16,16) ReLU Linear(16,16)
    x = torch.randn(3, 16)
    # x, and ReLU's output (saved by ReLU and by the 2nd matmul: one storage)
    assert activation_bytes(model, x) == 3 * 16 * 4 + 3 * 16 * 4
    for dtype in LOW:
        saved = saved_storages(model, x, dtype)
        assert [(s.nbytes, s.kind) for s in saved] == [
            (3 * 16 * 2, "activation"),
            (3 * 16 * 2, "activation"),
            (16 * 16 * 2, "weight_copy"),  # only the 2nd weight: x needs no grad
        ]
        assert all(s.dtype == dtype for s in saved)


def test_sigmoid_keeps_its_output_gelu_its_input():
    x = torch.randn(5, 6)
    lin = nn.Linear(6, 6, bias=False)
    base = 5 * 6 * 4  # lin keeps x
    assert activation_bytes(nn.Sequential(lin, nn.Sigmoid()), x) == base + 5 * 6 * 4
    assert activation_bytes(nn.Sequential(lin, nn.GELU()), x) == base + 5 * 6 * 4
    # two elementwise ops in a row on the same tensor: still one storage each
    model = nn.Sequential(lin, nn.Sigmoid(), nn.Tanh())
    assert activation_bytes(model, x) == base + 2 * 5 * 6 * 4


class Square(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        y = self.lin(x)
        return y * y  # saves y twice (as self and as other)


class SliceScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))

    def forward(self, x):
        return x[:, :2] * self.w  # saves a view of x: the storage is all of x


class DeadBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        unused = torch.exp(self.lin(x) * 3)  # saves tensors, then is thrown away
        del unused
        return self.lin(x)


def test_distinct_storages_whole_storage_and_only_what_is_kept():
    x = torch.randn(3, 4)
    assert activation_bytes(Square(), x) == 3 * 4 * 4 + 3 * 4 * 4  # x, y once
    assert activation_bytes(SliceScale(), torch.randn(3, 8)) == 3 * 8 * 4
    assert activation_bytes(DeadBranch(), x) == 3 * 4 * 4


def test_buffers_are_model_state_not_activations():
    bn = nn.BatchNorm1d(4)  # training mode: saves input, weight, running stats,
    x = torch.randn(5, 4)  # and the batch mean and inverse std
    assert activation_bytes(bn, x) == 5 * 4 * 4 + 4 * 4 + 4 * 4
    assert memory_breakdown(bn, x).buffers == 4 * 4 + 4 * 4 + 8  # + num_batches


# ---- against autograd's own graph --------------------------------------------------


class Attention(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
        return F.gelu(self.out(att @ v)).sum()


def conv_net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 5),
        nn.LogSoftmax(dim=-1),
    )


@pytest.mark.parametrize("dtype", [None, *LOW])
@pytest.mark.parametrize(
    "make, shape",
    [(lambda: mlp(32, 3, bias=True), (4, 32)), (Attention, (2, 5, 16)),
     (conv_net, (2, 3, 8, 8))],
    ids=["mlp", "attention", "conv"],
)  # fmt: skip
def test_agrees_with_the_graphs_saved_tensors(make, shape, dtype):
    torch.manual_seed(0)
    model, x = make(), torch.randn(shape)
    expected = graph_saved_bytes(model, x, dtype)
    assert expected > 0
    assert activation_bytes(model, x, dtype) == expected


def test_tuple_inputs_and_float32_means_plain():
    class Add(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4, bias=False)

        def forward(self, a, b, scale):
            return self.lin(a + b) * scale

    a, b = torch.randn(2, 4), torch.randn(2, 4)
    assert activation_bytes(Add(), (a, b, 2.0)) == 2 * 4 * 4  # a + b, for lin
    model = mlp(8, 2)
    x = torch.randn(2, 8)
    assert activation_bytes(model, x, torch.float32) == activation_bytes(model, x)


def test_leaves_no_state_behind():
    model = mlp(8, 2)
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert activation_bytes(model, x, torch.bfloat16) > 0  # grad turned on inside
        assert not torch.is_grad_enabled()
    assert not torch.is_autocast_enabled("cpu")
    # the hooks are gone: a later forward's saved tensors are plain tensors again
    out = model(x)
    assert isinstance(out.grad_fn._saved_self, torch.Tensor)


# ---- the budget: weights, grads, optimizer state -----------------------------------


@pytest.mark.parametrize(
    "name, make",
    [
        ("adam", lambda ps: torch.optim.Adam(ps)),
        ("adamw", lambda ps: torch.optim.AdamW(ps)),
        ("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
        ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ],
)
def test_optimizer_state_matches_torch_optim(name, make):
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    model[2].bias.requires_grad_(False)  # frozen: no grad, no state
    optimizer = make([p for p in model.parameters() if p.requires_grad])
    model(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    real = sum(
        t.nbytes
        for state in optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor)
    )
    assert optimizer_state_bytes(model, name) == real
    if name == "adam":
        assert real == 2 * 4 * (6 * 5 + 5 + 5 * 3) + 4 * 3


def test_breakdown_parts():
    model = mlp(64, 3)
    x = torch.randn(2, 64)
    fp32 = memory_breakdown(model, x)
    amp = memory_breakdown(model, x, torch.bfloat16)
    weights = 3 * 64 * 64 * 4
    for parts in (fp32, amp):  # AMP keeps fp32 weights, grads and Adam moments
        assert (parts.weights, parts.gradients) == (weights, weights)
        assert parts.optimizer_state == 2 * weights + 3 * 4
    assert (fp32.activations, fp32.weight_copies) == (3 * 2 * 64 * 4, 0)
    assert (amp.activations, amp.weight_copies) == (3 * 2 * 64 * 2, 2 * 64 * 64 * 2)
    assert amp.total == sum(amp.as_dict()[p] for p in MemoryBreakdown.PARTS)
    assert amp.as_dict()["total"] == amp.total
    assert "weight_copies" in str(amp) and "bfloat16" in str(amp)
    assert compare_precisions(model, x)["bf16"] == amp


def test_amp_keeps_more_at_small_batch_and_about_half_at_large_batch():
    """Lesson 06's finding: autocast's weight copies outweigh the halved activations
    when the batch is small; when activations dominate, AMP roughly halves them."""
    model = mlp(64, 3)
    small = torch.randn(2, 64)
    assert activation_bytes(model, small, torch.bfloat16) > 10 * activation_bytes(
        model, small
    )
    large = torch.randn(2048, 64)
    ratio = activation_bytes(model, large, torch.bfloat16) / activation_bytes(
        model, large
    )
    assert 0.5 < ratio < 0.52  # 802_816 / 1_572_864


# ---- errors and formatting ---------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"dtype": torch.int32}, "floating-point"),
        ({"dtype": torch.float64}, "float16 or torch.bfloat16"),
        ({"dtype": "bf16"}, "floating-point"),
        ({"inputs": "x"}, "inputs must be a tensor"),
        ({"inputs": (1, 2)}, "at least one tensor"),
        ({"model": lambda x: x}, "nn.Module"),
    ],
)
def test_bad_input_is_explained(kwargs, words):
    args = {"model": mlp(4, 1), "inputs": torch.randn(2, 4), "dtype": None}
    args.update(kwargs)
    with pytest.raises(ValueError, match=words):
        activation_bytes(**args)


def test_bad_optimizer_and_inference_mode():
    with pytest.raises(ValueError, match="'adam'"):
        optimizer_state_bytes(mlp(4, 1), "rmsprop")
    with torch.inference_mode(), pytest.raises(RuntimeError, match="inference_mode"):
        activation_bytes(mlp(4, 1), torch.randn(2, 4))


def test_format_bytes():
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(0) == "0 B"
    assert format_bytes(1024) == "1.0 KiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"
    assert format_bytes(-1536) == "-1.5 KiB"
    assert format_bytes(2**60) == "1024.0 PiB"
    with pytest.raises(ValueError):
        format_bytes("12")


def test_byte_unit_is_the_unit_format_bytes_writes():
    assert byte_unit(512) == ("B", 1)
    assert byte_unit(3 * 2**20) == ("MiB", 2**20)
    assert byte_unit(-3 * 2**30) == ("GiB", 2**30)
    assert byte_unit(2**70) == ("PiB", 2**50)  # the largest unit, however big
    for n in (0, 1023, 1024, 1536, 2**20 - 1, 5 * 2**40, -(2**11)):
        unit, size = byte_unit(n)
        assert format_bytes(n).endswith(f" {unit}")
        assert size == 1 or 1 <= abs(n) / size < 1024
    with pytest.raises(ValueError, match="a number of bytes"):
        byte_unit(float("nan"))


# ---- CUDA --------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [None, torch.float16, torch.bfloat16])
def test_cuda_counts_equal_cpu_counts(dtype):
    model = mlp(64, 3)
    x = torch.randn(32, 64)
    on_cpu = activation_bytes(model, x, dtype)
    assert activation_bytes(model.cuda(), x.cuda(), dtype) == on_cpu


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [None, torch.float16])
def test_cuda_allocator_agrees(dtype):
    """memory_allocated grows by exactly the saved bytes plus the output (all sizes
    are multiples of the allocator's 512-byte rounding), less the input if the
    saved input is x itself."""
    model = mlp(256, 3).cuda()
    x = torch.randn(64, 256, device="cuda")
    ctx = nullcontext() if dtype is None else torch.amp.autocast("cuda", dtype=dtype)
    with ctx:
        model(x)  # warm-up: cuBLAS workspaces are allocated once, here
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with ctx:
        out = model(x)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    already_there = x.nbytes if dtype is None else 0
    assert grown == activation_bytes(model, x, dtype) - already_there + out.nbytes
