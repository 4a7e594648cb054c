"""amp_lessons.teaching.autocast_table: the live per-op dtype table, its renderers,
run_under_autocast.

Expected dtypes come from direct runs of torch ops under torch.amp.autocast and from
PyTorch's documented autocast lists, never from the module under test.
"""

import pytest
import torch
import torch.nn.functional as F

from amp_lessons.teaching import autocast_table as ac

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


@pytest.fixture(scope="module")
def cpu_bf16():
    return ac.rows_by_op(ac.autocast_dtype_table("cpu", BF16))


@pytest.fixture(scope="module")
def cpu_fp16():
    return ac.rows_by_op(ac.autocast_dtype_table("cpu", FP16))


@pytest.fixture(scope="module")
def cuda_fp16_fake():
    return ac.rows_by_op(ac.autocast_dtype_table("cuda", FP16, fake=True))


def direct(fn, dtype=BF16, device_type="cpu"):
    with torch.amp.autocast(device_type, dtype=dtype):
        return fn().dtype


def test_table_agrees_with_direct_runs(cpu_bf16):
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    low = a.to(BF16)
    assert cpu_bf16["matmul"].output == direct(lambda: a @ b) == BF16
    assert cpu_bf16["relu"].output == direct(lambda: torch.relu(a)) == FP32
    assert cpu_bf16["relu"].low_inputs_output == direct(lambda: torch.relu(low))
    assert cpu_bf16["softmax"].output == direct(lambda: a.softmax(-1)) == FP32
    assert cpu_bf16["softmax"].low_inputs_output == direct(lambda: low.softmax(-1))
    target = torch.tensor([0, 2])
    assert cpu_bf16["cross_entropy"].low_inputs_output == direct(
        lambda: F.cross_entropy(low, target)
    )
    assert cpu_bf16["cat"].output == direct(lambda: torch.cat([a, low])) == FP32


def test_cpu_bf16_categories_as_torch_documents(cpu_bf16):
    # torch's docs: CPU "ops that can autocast to bfloat16" / "... to float32"
    for op in ("matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d"):
        assert cpu_bf16[op].category == ac.LOW, op
        assert cpu_bf16[op].output == BF16
    for op in ("mse_loss", "cross_entropy", "nll_loss", "binary_cross_entropy", "prod"):
        assert cpu_bf16[op].category == ac.FP32, op
        assert cpu_bf16[op].low_inputs_output == FP32
    for op in ("relu", "add", "mul"):
        assert cpu_bf16[op].category == ac.FOLLOWS, op
    assert cpu_bf16["cat"].category == ac.WIDEST
    assert cpu_bf16["cat"].inputs == (FP32, BF16)
    assert cpu_bf16["matmul"].inputs == (FP32, FP32)
    assert not any(row.error for row in cpu_bf16.values())


def test_table_follows_the_autocast_dtype(cpu_bf16, cpu_fp16):
    assert cpu_fp16["matmul"].output == FP16 and cpu_fp16["matmul"].category == ac.LOW
    assert cpu_fp16["cat"].inputs == (FP32, FP16)
    changed = {op for op in cpu_bf16 if cpu_bf16[op].output != cpu_fp16[op].output}
    low_ops = {op for op, row in cpu_bf16.items() if row.category == ac.LOW}
    assert changed == low_ops and "linear" in changed
    # categories are about the rule, not the dtype: same on CPU for bf16 and fp16
    assert ac.compare_tables(list(cpu_bf16.values()), list(cpu_fp16.values())) == []


def test_fake_cuda_table_reads_cudas_rules(cpu_bf16, cuda_fp16_fake):
    cuda = cuda_fp16_fake
    assert cuda["matmul"].output == FP16 and cuda["linear"].category == ac.LOW
    # CUDA's float32 list has softmax, layer_norm, sum; CPU's does not
    for op in ("softmax", "log_softmax", "layer_norm", "sum", "cross_entropy"):
        assert cuda[op].category == ac.FP32, op
    assert cuda["relu"].category == ac.FOLLOWS
    assert cuda["binary_cross_entropy"].category == ac.ERROR
    assert "unsafe to autocast" in cuda["binary_cross_entropy"].error
    diffs = ac.compare_tables(list(cpu_bf16.values()), list(cuda.values()))
    assert ("softmax", ac.FOLLOWS, ac.FP32) in diffs
    assert ("binary_cross_entropy", ac.FP32, ac.ERROR) in diffs
    assert all(op not in {d[0] for d in diffs} for op in ("matmul", "relu", "cat"))
    # the forced state was restored
    assert not torch.is_autocast_enabled("cuda")


@pytest.mark.gpu
def test_fake_cuda_table_matches_real_cuda():
    fake = ac.autocast_dtype_table("cuda", FP16, fake=True)
    real = ac.autocast_dtype_table("cuda", FP16, fake=False)
    assert [(r.op, r.output, r.category) for r in fake] == [
        (r.op, r.output, r.category) for r in real
    ]


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="bfloat16 or torch.float16"):
        ac.autocast_dtype_table("cpu", FP32)
    with pytest.raises(ValueError, match="device_type"):
        ac.autocast_dtype_table("tpu", BF16)
    with pytest.raises(ValueError, match="unknown op"):
        ac.measure_op("matmull")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="fake=True"):
            ac.autocast_dtype_table("cuda", FP16, fake=False)


def test_renderers_show_every_row_and_error():
    rows = ac.autocast_dtype_table("cpu", BF16, ops=["mm", "softmax"])
    rows.append(ac.AutocastRow("bad<op>", (FP32,), None, None, ac.ERROR, "E: <x>"))
    text = ac.format_autocast_table(rows, BF16)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["op", "inputs", "output"]
    assert any(line.split()[:4] == ["mm", "fp32,", "fp32", "bf16"] for line in lines)
    assert "bad<op>: E: <x>" in text
    page = ac.table_html(rows, BF16, title="CPU")
    assert page.count("<tr style") == 3 and "&lt;x&gt;" in page and "<x>" not in page


def test_linear_output_is_low_but_weight_stays_fp32():
    model, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    with torch.amp.autocast("cpu", dtype=BF16):
        out = model(x)
    assert out.dtype == BF16 and model.weight.dtype == FP32
    expected = F.linear(x.to(BF16), model.weight.to(BF16), model.bias.to(BF16))
    assert torch.equal(out, expected)


def test_run_under_autocast():
    assert ac.run_under_autocast(lambda: torch.ones(2, 2) @ torch.ones(2, 2)) == (
        BF16,
        "",
    )
    out, error = ac.run_under_autocast(
        lambda: torch.cat([torch.ones(1, dtype=FP16), torch.ones(1, dtype=BF16)])
    )
    assert out is None and "RuntimeError" in error


def test_short_dtype():
    assert [ac.short_dtype(d) for d in (FP32, FP16, BF16, None)] == [
        "fp32",
        "fp16",
        "bf16",
        "-",
    ]
    assert ac.short_dtype(torch.int64) == "int64"


def test_autocast_rules_reads_each_devices_lists_with_or_without_the_device():
    for device, low in (("cpu", BF16), ("cuda", FP16)):
        with ac.autocast_rules(device, low):
            a = torch.randn(2, 2, device=device)
            mm, softmax = (a @ a).dtype, torch.softmax(a @ a, -1).dtype
        assert mm == low  # matmul: the lower-precision list on both devices
        # softmax of that low output: CUDA's float32 list only, as the tables say
        assert softmax == (FP32 if device == "cuda" else low)
        row = ac.rows_by_op(ac.autocast_dtype_table(device, low, ops=["softmax"]))
        assert softmax == row["softmax"].low_inputs_output
    assert not torch.is_autocast_enabled("cuda")
    assert not torch.is_autocast_enabled("cpu")
    with (
        pytest.raises(ValueError, match="autocast dtype must be"),
        ac.autocast_rules("cpu", FP32),
    ):
        pass
