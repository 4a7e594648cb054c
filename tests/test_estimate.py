"""The first-principles estimate: its trace counted by hand, its autocast policy
against torch's own, its errors, the fit computed from the published data file."""

import json
import re
import time
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from amp_lessons.cli import main
from amp_lessons.measure import model_zoo, published, published_models
from amp_lessons.measure.estimate import FITTED, GPUS, Efficiency, estimate_step, price
from amp_lessons.measure.trace import (
    AutocastPolicy,
    Kernel,
    KernelRecorder,
    Trace,
    trace_step,
)

META = torch.device("meta")


def _linear(n_in=1024, n_out=512):
    with META:
        return torch.nn.Linear(n_in, n_out)


def test_linear_flops_and_bytes_by_hand():
    model, batch = _linear(), 8
    x = torch.empty(batch, 1024, device=META)  # no grad: backward is the weight's only
    kernels = trace_step(model, x, "fp32").kernels
    mms = [k for k in kernels if k.flops]
    assert [k.name for k in mms] == ["addmm", "mm"]
    assert all(k.flops == 2 * batch * 1024 * 512 for k in mms)
    # forward: reads bias, x, W; writes y
    assert mms[0].bytes == 4 * (512 + batch * 1024 + 1024 * 512 + batch * 512)
    # weight gradient: reads dy and x, writes dW. dy is sum()'s gradient, one value
    # expanded to B x 512 (stride 0): read once
    assert mms[1].bytes == 4 * (1 + batch * 1024 + 512 * 1024)
    assert {k.math for k in mms} == {"fp32"}
    assert {k.math for k in trace_step(model, x, "tf32").kernels if k.flops} == {"tf32"}


def test_bf16_casts_the_weight_once_and_runs_the_matmuls_in_bf16():
    model, x = _linear(), torch.empty(8, 1024, device=META)
    kernels = trace_step(model, x, "bf16").kernels
    assert {(k.math, k.dtype) for k in kernels if k.flops} == {("bf16", torch.bfloat16)}
    weight_casts = [
        k for k in kernels if k.name == "_to_copy" and k.bytes == 1024 * 512 * (4 + 2)
    ]
    assert len(weight_casts) == 2  # forward fp32 -> bf16, its gradient bf16 -> fp32


def test_fused_attention_counted_as_one_kernel_each_way():
    B, H, T, D = 2, 4, 128, 64
    q = torch.empty(B, H, T, D, device=META, requires_grad=True)

    class SDPA(torch.nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    kernels = trace_step(SDPA(), q, "bf16").kernels
    fwd, bwd = (k for k in kernels if k.kind == "attention")
    # causal: flash attention skips the masked half of the 4*B*H*T*T*D
    assert fwd.flops == 2 * B * H * T * T * D and bwd.flops == int(2.5 * fwd.flops)
    assert fwd.bytes == 4 * B * H * T * D * 2  # q, k, v read, output written: bf16
    assert not any(k.name in ("bmm", "_softmax") for k in kernels)  # no math fallback
    # full precision gets the same fused kernel (memory-efficient attention, on CUDA
    # cores even with TF32 on), not the T x T math path meta tensors would take
    for precision in ("fp32", "tf32"):
        kernels = trace_step(SDPA(), q, precision).kernels
        assert [k.math for k in kernels if k.kind == "attention"] == ["fp32", "fp32"]
        assert not any(k.name in ("bmm", "_softmax") for k in kernels)


def test_bytes_of_writes_copies_and_gathers():
    with META:
        table = torch.nn.Embedding(100_000, 128)
    ids = torch.zeros(64, dtype=torch.long, device=META)
    kernels = trace_step(table, ids, "fp32").kernels
    lookup = next(k for k in kernels if k.name == "embedding")
    # the 64 rows it picks (read and written) and the ids, not the 51 MB table
    assert lookup.bytes == 2 * 64 * 128 * 4 + 64 * 8
    fill = next(k for k in kernels if k.name == "ones_like")  # sum()'s gradient
    assert fill.bytes == 4  # written only


def test_explicit_attention_block_flops_by_hand():
    B, T, C, heads = 2, 64, 256, 4
    with META:
        block = model_zoo.Attention(C, heads, explicit=True).eval()
    x = torch.empty(B, T, C, device=META, requires_grad=True)
    kernels = trace_step(block, x, "fp32").kernels
    forward = sum(
        k.flops
        for k in kernels[
            : kernels.index(next(k for k in kernels if k.name == "ones_like"))
        ]
    )
    projections = 2 * B * T * C * (C + 2 * C + C)  # q, k and v, output
    scores_and_mix = 2 * 2 * B * T * T * C  # q k^T and p v, all heads
    assert forward == projections + scores_and_mix
    total = sum(k.flops for k in kernels)
    assert total == 3 * forward  # backward: two matmuls per forward matmul


def test_policy_dtypes_softmax_and_loss_in_fp32_matmuls_in_fp16():
    with META:
        model = model_zoo.Attention(64, 2, explicit=True)
    x = torch.empty(2, 16, 64, device=META)
    recorder = KernelRecorder()
    with recorder, AutocastPolicy(torch.float16, recorder):
        out = model(x)
        loss = F.mse_loss(out, torch.zeros_like(out))
    by_name = {}
    for k in recorder.kernels:
        by_name.setdefault(k.name, set()).add(k.dtype)
    assert by_name["bmm"] == {torch.float16} and by_name["addmm"] == {torch.float16}
    assert by_name["_softmax"] == {torch.float32}
    assert loss.dtype == torch.float32 and out.dtype == torch.float16


# Where the CPU's and CUDA's autocast lists agree (torch.amp documentation), the
# policy must give what torch.autocast gives on real CPU tensors.
AGREE = {
    "linear": lambda x, w: F.linear(x, w),
    "matmul": lambda x, w: x @ w,
    "bmm": lambda x, w: torch.bmm(x[None], w[None]),
    "addmm": lambda x, w: torch.addmm(x, x, w),
    "conv2d": lambda x, w: F.conv2d(x[None, None], w[None, None]),
    "mse_loss": lambda x, w: F.mse_loss(x, w),
    "l1_loss": lambda x, w: F.l1_loss(x, w),
    "cross_entropy": lambda x, w: F.cross_entropy(x, torch.zeros(8, dtype=torch.long)),
    "bce_with_logits": lambda x, w: F.binary_cross_entropy_with_logits(x, w),
    "prod": lambda x, w: x.prod(),
    # more ops on both lists (autocast_mode.cpp: AutocastCPU and AT_FORALL_* for CUDA)
    "conv1d": lambda x, w: F.conv1d(x[None], w[..., None]),
    "conv3d": lambda x, w: F.conv3d(x[None, None, None], w[None, None, None]),
    "conv_transpose2d": lambda x, w: F.conv_transpose2d(x[None, None], w[None, None]),
    "baddbmm": lambda x, w: torch.baddbmm(x[None], x[None], w[None]),
    "addbmm": lambda x, w: torch.addbmm(x, x[None], w[None]),
    "prelu": lambda x, w: F.prelu(x, w[0, :1]),
    "sdpa": lambda x, w: F.scaled_dot_product_attention(x[None], w[None], w[None]),
    "nll_loss": lambda x, w: F.nll_loss(x, torch.zeros(8, dtype=torch.long)),
    "smooth_l1_loss": lambda x, w: F.smooth_l1_loss(x, w),
    "huber_loss": lambda x, w: F.huber_loss(x, w),
    "kl_div": lambda x, w: F.kl_div(x, w, reduction="batchmean"),
    "soft_margin_loss": lambda x, w: F.soft_margin_loss(x, w),
    "cdist": lambda x, w: torch.cdist(x, w),
}


@pytest.mark.parametrize("op", AGREE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_policy_matches_cpu_autocast(op, dtype):
    x, w = torch.randn(8, 8).to(dtype), torch.randn(8, 8).to(dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = AGREE[op](x, w).dtype
    with AutocastPolicy(torch.bfloat16):
        assert AGREE[op](x, w).dtype == expected


def test_policy_follows_cuda_where_cpu_differs():
    # CUDA autocast runs softmax in fp32; the CPU's list leaves it in bf16
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert F.softmax(x, -1).dtype == torch.bfloat16
    with AutocastPolicy(torch.bfloat16):
        assert F.softmax(x, -1).dtype == torch.float32


class _Log(torch.utils._python_dispatch.TorchDispatchMode):
    """Every aten op dispatched, with its outputs' dtypes."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        dtypes = [
            t.dtype
            for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)
        ]
        self.ops.append((func._overloadpacket.__name__, tuple(dtypes)))
        return out


@pytest.mark.gpu
def test_policy_matches_cuda_autocast_kernel_by_kernel():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.manual_seed(0)
    model = model_zoo.Layer(64, 4, 256, explicit=True).cuda()
    x = torch.randn(2, 16, 64, device="cuda")

    def step(ctx):
        model.zero_grad(set_to_none=True)  # else backward accumulates (add_)
        forward, backward = _Log(), _Log()
        with forward, ctx:
            loss = F.mse_loss(model(x), torch.zeros_like(x))
        with backward:
            loss.backward()
        return forward.ops, backward.ops

    for low in (torch.float16, torch.bfloat16):
        (real_fwd, real_bwd), (our_fwd, our_bwd) = (
            step(torch.autocast("cuda", dtype=low)),
            step(AutocastPolicy(low)),
        )
        assert our_fwd == real_fwd, low  # the same ops, dtypes and order
        # the same kernels; autograd may accumulate independent gradients in
        # another order (seen on an H200: one add and one detach swapped)
        assert Counter(our_bwd) == Counter(real_bwd), low


def test_fp8_prices_linears_on_fp8_tensor_cores():
    w = model_zoo.mlp(layers=2, width=1024, batch=256)
    kernels = trace_step(w.model, w.inputs, "fp8", w.loss_fn).kernels
    maths = {k.math for k in kernels if k.flops}
    assert maths == {"fp8"}
    assert any(k.name == "amax" for k in kernels)  # the scaling costs kernels too
    with pytest.raises(ValueError, match="fp8 tensor cores"):
        estimate_step(w.model, w.inputs, "A100-SXM4-80GB", "fp8")


def test_fp8_keeps_the_linears_torchaos_filter_leaves_in_bf16():
    from amp_lessons.core.fp8 import filter_first_and_last
    from amp_lessons.measure.estimate import fp8_kept_weights

    w = model_zoo.gpt(layers=2, width=256, heads=4, seq=64, batch=4, vocab=512)
    linears = [m for m in w.model.modules() if isinstance(m, torch.nn.Linear)]
    kept = fp8_kept_weights(w.model, filter_first_and_last(w.model))
    assert kept == {id(linears[0].weight), id(linears[-1].weight)}  # the two ends

    def fp8_matmuls(kept_ids):
        trace = trace_step(w.model, w.inputs, "fp8", w.loss_fn, fp8_kept=kept_ids)
        return Counter(k.math for k in trace.kernels if k.flops and k.kind == "matmul")

    every = fp8_matmuls(frozenset())
    assert every["fp8"] == 3 * len(linears) and "bf16" not in every  # fwd, 2 bwd
    ends = fp8_matmuls(kept)
    assert ends["fp8"] == 3 * (len(linears) - 2)
    assert ends["bf16"] >= 2 * 2  # each end: its forward and backward matmuls
    assert fp8_kept_weights(w.model, None) == frozenset()


@pytest.mark.parametrize(
    "gpu, precision, message",
    [
        ("H300", "bf16", "unknown gpu 'H300'; choose one of: V100-SXM2-16GB"),
        ("A100-SXM4-80GB", "fp64", "unknown precision 'fp64'; choose one of: fp32"),
        ("V100-SXM2-32GB", "bf16", "no bf16 tensor cores: bf16 needs 8.0"),
        ("T4", "tf32", "no tf32 tensor cores"),
    ],
)
def test_clear_errors(gpu, precision, message):
    w = model_zoo.mlp(layers=1, width=64, batch=4)
    with pytest.raises(ValueError, match=message):
        estimate_step(w.model, w.inputs, gpu, precision)


def test_refuses_real_tensors_and_unknown_optimizer():
    model = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match="meta device, found cpu"):
        estimate_step(model, torch.zeros(2, 4), "A100-SXM4-80GB", "bf16")
    w = model_zoo.mlp(layers=1, width=64, batch=4)
    with pytest.raises(ValueError, match="unknown optimizer 'adagrad'"):
        estimate_step(w.model, w.inputs, "A100-SXM4-80GB", "bf16", optimizer="adagrad")


def test_breakdown_adds_up_and_regimes_follow_the_model():
    big = model_zoo.gpt(layers=4, width=4096, heads=32, seq=2048, batch=8)
    e = estimate_step(
        big.model, big.inputs, "H100-SXM5-80GB", "bf16", "adam", big.loss_fn
    )
    assert e.compute_s + e.memory_s + e.overhead_s == pytest.approx(e.seconds)
    # the kernels' time by kind, plus the time the GPU waits for the CPU (none here)
    assert sum(e.by_kind.values()) == pytest.approx(e.seconds)
    assert e.regime == "compute" and e.by_kind["optimizer"] > 0
    tiny = model_zoo.mlp(layers=2, width=64, batch=8)
    t = estimate_step(tiny.model, tiny.inputs, "H100-SXM5-80GB", "bf16")
    assert t.regime == "overhead"


def test_gpu_table_holds_the_issue_s_gpus_with_sources():
    for name in (
        "V100-SXM2-16GB",
        "V100-SXM2-32GB",
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "H100-SXM5-80GB",
        "H200-SXM-141GB",
        "T4",
        "L4",
        "RTX-4090",
    ):
        gpu = GPUS[name]
        assert gpu.source and gpu.bandwidth_gbs > 0 and gpu.fp16 > gpu.fp32
    assert GPUS["V100-SXM2-16GB"].bf16 is None and GPUS["T4"].bf16 is None
    # COURSE.md's reference facts: H100 dense fp16 ~989, TF32 ~495, fp32 ~67
    assert GPUS["H100-SXM5-80GB"].fp16 == pytest.approx(989, rel=0.01)


def test_bert_large_is_estimated_in_seconds():
    start = time.perf_counter()
    w = model_zoo.transformer(layers=24, width=1024, heads=16, seq=512, batch=32)
    estimate_step(w.model, w.inputs, "A100-SXM4-80GB", "bf16", "lamb", w.loss_fn)
    assert time.perf_counter() - start < 10


def test_a_slower_memory_makes_memory_bound_steps_slower():
    w = model_zoo.mlp(layers=2, width=4096, batch=8192)
    trace = trace_step(w.model, w.inputs, "bf16", w.loss_fn)
    fast = price(trace, GPUS["H200-SXM-141GB"], "bf16")
    slow = price(trace, GPUS["H100-SXM5-80GB"], "bf16")
    assert slow.memory_s > fast.memory_s and slow.compute_s == fast.compute_s
    # the CPU's time a launched kernel is the floor of a step (a view costs none)
    tiny = Kernel("add", "pointwise", 0, 4, launches=10**6)
    cpu_bound = price(
        Trace([tiny], 10**7),
        GPUS["H200-SXM-141GB"],
        "bf16",
        Efficiency(kernel_us=4, cpu_us=10),
    )
    assert cpu_bound.seconds == pytest.approx(10.0) and cpu_bound.regime == "overhead"


# ---- the published rows and the fit -----------------------------------------------


@pytest.fixture(scope="module")
def fit():
    return published.fit()


def test_data_file_has_sourced_rows():
    rows = published.load_rows()
    assert sum(r.role == "fit" for r in rows) >= 12

    def written(x):  # as a table writes it: 317, 61.5, 2880000 (commas dropped)
        return str(int(x)) if x == int(x) else str(x)

    for r in rows:
        repo, file, table, row = r.source.split(" / ", 3)
        assert repo in ("NVIDIA/DeepLearningExamples", "huggingface/transformers"), r.id
        assert ".md" in file and table and r.unit
        # the table row quoted holds both published numbers, each a whole cell or
        # number (so 12 does not pass inside 128)
        numbers = re.findall(r"\d+(?:\.\d+)?", row.replace(",", ""))
        assert written(r.full_throughput) in numbers, r.id
        assert written(r.amp_throughput) in numbers, r.id


def test_fitted_constants_are_the_fit_of_the_data_file(fit):
    assert fit.efficiency == FITTED  # estimate.py's FITTED is refitted here


def test_estimated_throughputs_are_in_the_published_units(fit):
    # a row whose items were counted in another unit (samples for mel frames) would be
    # off by orders of magnitude; the absolute estimate is within 4x everywhere
    for r in fit.rows:
        assert all(0.25 < ratio < 4 for ratio in r.throughput_ratios), r


def test_fit_meets_the_goals_and_reports_leave_one_out(fit):
    errors = fit.errors()
    assert sum(e > 0.35 for e in errors) <= 2, published.format_fit(fit)
    assert fit.median_error() <= 0.15, published.format_fit(fit)
    assert all(r.loo_error is not None for r in fit.rows if r.role == "fit")
    assert all(r.loo_error is None for r in fit.rows if r.role == "check")
    # the table is computed from the file: change a published number, its error moves
    rows = published.load_rows()
    doubled = [
        published.Row(**{**r.__dict__, "amp_throughput": 2 * r.amp_throughput})
        if i == 0
        else r
        for i, r in enumerate(rows)
    ]
    other = published.fit(doubled)
    assert other.rows[0].published == pytest.approx(2 * fit.rows[0].published)
    assert other.rows[0].error != pytest.approx(fit.rows[0].error)


def test_bad_data_rows_are_refused(tmp_path):
    text = published.DATA_FILE.read_text().splitlines()
    header, first = text[0], text[1]
    bad = tmp_path / "bad.csv"
    bad.write_text(header + "\n" + first.replace(",fit,", ",maybe,", 1) + "\n")
    with pytest.raises(ValueError, match="bad row"):
        published.load_rows(bad)


# ---- the command line -------------------------------------------------------------


def test_cli_table_and_json(capsys):
    assert (
        main(
            [
                "estimate",
                "--gpu",
                "A100-SXM4-80GB",
                "--model",
                "transformer",
                "--layers",
                "2",
                "--width",
                "256",
                "--seq",
                "128",
                "--batch",
                "8",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "estimated (not measured)" in out
    assert [line.split()[0] for line in out.splitlines()[2:]] == [
        "fp32",
        "tf32",
        "fp16",
        "bf16",
    ]
    assert (
        main(
            [
                "estimate",
                "--gpu",
                "H100-SXM5-80GB",
                "--model",
                "mlp",
                "--width",
                "512",
                "--json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["precision"] for r in rows] == ["fp32", "tf32", "fp16", "bf16", "fp8"]
    assert {r["regime"] for r in rows} <= {"compute", "memory", "overhead"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gpu", "H300"], "invalid choice: 'H300' (choose from 'V100-SXM2-16GB'"),
        (["--precision", "fp64"], "invalid choice: 'fp64' (choose from 'fp32'"),
        (
            ["--gpu", "T4", "--precision", "bf16"],
            "T4 (compute capability 7.5) has no bf16",
        ),
        (["--model", "resnet50", "--width", "64"], "resnet50 has no size width"),
    ],
)
def test_cli_mistakes_get_one_line(capsys, argv, message):
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_recorded_fit_is_the_fit_of_the_data_file(fit):
    recorded = published.load_fit()
    assert recorded.efficiency == fit.efficiency
    for mine, theirs in zip(recorded.rows, fit.rows, strict=True):
        assert (mine.id, mine.full_regime, mine.amp_regime) == (
            theirs.id,
            theirs.full_regime,
            theirs.amp_regime,
        )
        assert mine.predicted == pytest.approx(theirs.predicted, rel=1e-9)
        assert mine.loo_predicted == pytest.approx(theirs.loo_predicted, rel=1e-9)
        assert mine.full == pytest.approx(theirs.full, rel=1e-9)
        assert mine.amp == pytest.approx(theirs.amp, rel=1e-9)


def test_recorded_fit_refused_after_the_data_changed(tmp_path, monkeypatch):
    data = tmp_path / "published_speedups.csv"
    data.write_text(published.DATA_FILE.read_text().replace("317", "318", 1))
    monkeypatch.setattr(published, "DATA_FILE", data)
    with pytest.raises(ValueError, match="another version"):
        published.load_fit()


# ---- the panel (headless) -----------------------------------------------------------


def test_panel_redraws_and_offers_only_what_the_gpu_has(no_pyplot_figures):
    from amp_lessons.teaching.estimate_widget import estimate_explorer

    w = estimate_explorer("A100-SXM4-80GB")
    assert [e.precision for e in w.estimates] == ["fp32", "tf32", "fp16", "bf16"]
    picture = w.image.value
    w.gpu.value = "V100-SXM2-16GB"
    assert [e.precision for e in w.estimates] == ["fp32", "fp16"]
    assert w.image.value != picture and "V100-SXM2-16GB" in w.message.value
    w.gpu.value = "H100-SXM5-80GB"
    assert w.estimates[-1].precision == "fp8"
    # the panel prices shared traces: the same numbers as estimate_step
    w.model.value, w.width.value, w.layers.value, w.batch.value = "gpt", 512, 2, 4
    direct = model_zoo.build("gpt", layers=2, width=512, batch=4, seq=512)
    for e in w.estimates:
        expected = estimate_step(
            direct.model,
            direct.inputs,
            "H100-SXM5-80GB",
            e.precision,
            direct.optimizer,
            direct.loss_fn,
        )
        assert e.seconds == pytest.approx(expected.seconds, rel=1e-12), e.precision
    picture = w.image.value
    w.batch.value = 256
    assert w.image.value != picture


def test_readme_shows_the_recorded_fit_row_by_row():
    readme = " ".join((published.DATA_DIR.parents[2] / "README.md").read_text().split())
    fit = published.load_fit()
    assert " ".join(published.markdown_table(fit).split()) in readme
    assert fit.summary() in readme
    low, high = fit.throughput_range()
    assert f"between {low:.1f}x and {high:.1f}x of the published" in readme
    e = fit.efficiency
    assert (
        f"a large GEMM reaches {e.tensor:.0%} on 16-bit tensor cores, {e.tf32:.0%} on "
        f"TF32 tensor cores and {e.fp32:.0%} on CUDA cores"
    ) in readme
    assert (
        f"pointwise kernels {e.memory:.0%} of the bandwidth; a kernel takes at least "
        f"{e.kernel_us:.0f} us and the CPU {e.cpu_us:.0f} us a launched kernel"
    ) in readme


# ---- the estimate beside a recorded GPU run ----------------------------------------


def _report(**changes):
    from amp_lessons.measure.bench_results import load_results

    report = load_results(
        published.DATA_DIR.parents[2] / "notebooks" / "results" / "bench_h200.json"
    )
    return {**report, **changes}


def test_estimate_beside_the_recorded_h200_run():
    from amp_lessons.measure import estimate_check

    rows = estimate_check.measured_vs_estimated(_report())
    precisions = ("fp32", "tf32", "fp16", "bf16")
    assert {(r["config"], r["precision"]) for r in rows} == {
        (c, p) for c in ("mlp", "transformer") for p in precisions
    }
    for r in rows:
        assert 1 / 3 < r["estimated_ms"] / r["measured_ms"] < 3, r
        if r["precision"] == "fp32":
            assert r["measured_speedup"] == r["estimated_speedup"] == 1
    section = estimate_check.estimate_section(_report())
    assert section.count("\n| transformer |") == 4
    fitted = json.loads(published.FIT_FILE.read_text())["date"]
    assert f"the fit of {fitted}" in section  # which fit the page shows
    # nothing to set beside: a GPU the estimate does not know, or made-up numbers
    assert (
        estimate_check.measured_vs_estimated(
            _report(device_name="Tesla K80", gpu="Tesla K80")
        )
        == []
    )
    assert estimate_check.estimate_section(_report(synthetic=True)) == ""
    no_fp32 = _report(
        results=[r for r in _report()["results"] if r["precision"] != "fp32"]
    )
    assert all(
        r["measured_speedup"] is None
        for r in estimate_check.measured_vs_estimated(no_fp32)
    )


@pytest.mark.parametrize(
    "build, sizes, message",
    [
        (
            published_models.unet,
            {"patch": 100},
            "multiple of 2\\*\\*\\(depth - 1\\) = 32",
        ),
        (
            published_models.unet,
            {"dims": 3, "patch": "192x160"},
            "must give 1 or 3 sides",
        ),
        (model_zoo.transformer, {"width": 100, "heads": 16}, "multiple of heads 16"),
        (model_zoo.transformer, {"seq": 64, "predictions": 80}, "must not exceed seq"),
        (published_models.fastpitch, {"kernel": 4}, "kernel must be odd"),
        (published_models.dlrm, {"bottom": "512-256-64"}, "end at the embedding width"),
        (model_zoo.resnet50, {"image": 32, "batch": 1}, "too small"),
    ],
)
def test_model_sizes_that_cannot_be_built_are_refused_by_name(build, sizes, message):
    with pytest.raises(ValueError, match=message):
        build(**sizes)


def test_an_fp8_row_is_priced_as_the_bench_runs_it():
    # bench_fp8: torchao's Float8Linear but for the first and last Linear, compiled
    from amp_lessons.core.fp8 import filter_first_and_last
    from amp_lessons.measure import estimate_check

    report = _report()
    bf16 = next(
        r
        for r in report["results"]
        if r["config"] == "transformer" and r["precision"] == "bf16"
    )
    fp8_row = {**bf16, "precision": "fp8", "step_ms": 40.0}  # made up: no fp8 run yet
    rows = estimate_check.measured_vs_estimated(
        _report(results=[*report["results"], fp8_row])
    )
    fp8 = next(r for r in rows if r["precision"] == "fp8")
    w = estimate_check.bench_workload("transformer", report["sizes"]["transformer"])

    def fp8_step(**how):  # the bench's step: foreach AdamW, clipping at 1.0
        return estimate_step(
            w.model, w.inputs, "H200-SXM-141GB", "fp8", w.optimizer, w.loss_fn,
            implementation="foreach", clip=True, **how,
        )  # fmt: skip

    expected = fp8_step(compiled=True, fp8_filter=filter_first_and_last(w.model))
    assert fp8["estimated_ms"] == pytest.approx(expected.seconds * 1e3)
    eager = fp8_step()
    assert expected.seconds < 0.8 * eager.seconds  # compile fuses amax and casts


def test_readme_states_the_estimate_against_the_recorded_h200_run():
    from amp_lessons.measure import estimate_check

    ratios = [
        r["estimated_ms"] / r["measured_ms"]
        for r in estimate_check.measured_vs_estimated(_report())
    ]
    readme = " ".join((published.DATA_DIR.parents[2] / "README.md").read_text().split())
    assert f"at {min(ratios):.2f}x to {max(ratios):.2f}x of the measured ones" in readme


def test_h200_record_speedups_as_the_readme_states_them():
    """The GPT's bf16 speed-up on the H200 record: over fp32 within the issue's 25%
    (6.56x estimated, 7.32x measured); over TF32 not (1.79x against 2.65x): the
    estimated TF32 step is 29% too fast, a miss the README states."""
    from amp_lessons.measure import estimate_check

    rows = {
        r["precision"]: r
        for r in estimate_check.measured_vs_estimated(_report())
        if r["config"] == "transformer"
    }
    bf16 = rows["bf16"]
    assert bf16["estimated_speedup"] / bf16["measured_speedup"] == pytest.approx(
        1, abs=0.25
    )
    over_tf32 = {
        kind: rows["tf32"][f"{kind}_ms"] / bf16[f"{kind}_ms"]
        for kind in ("measured", "estimated")
    }
    readme = " ".join((published.DATA_DIR.parents[2] / "README.md").read_text().split())
    assert (
        f"bf16 speed-up over fp32 on the GPT is {bf16['estimated_speedup']:.2f}x where "
        f"{bf16['measured_speedup']:.2f}x was measured, but over TF32 "
        f"{over_tf32['estimated']:.2f}x where {over_tf32['measured']:.2f}x was"
    ) in readme
    too_fast = 1 - rows["tf32"]["estimated_ms"] / rows["tf32"]["measured_ms"]
    assert f"TF32 step is {too_fast:.0%} too fast" in readme


# ---- counts: convolutions, in-place writes, the optimizer's step ------------------


@pytest.mark.parametrize("groups", [1, 32, 256])
def test_grouped_convolution_flops_by_hand(groups):
    """Each output value of a convolution sums (C_in / groups) * k * k products:
    forward 2 * N * C_out * H * W * (C_in / groups) * k * k FLOPs, and backward the
    same again for the input's gradient and again for the weight's (torch 2.13's
    flop_counter ignores groups in the weight's: 1 + groups times the forward)."""
    n, c, h, k = 8, 256, 28, 3
    with META:
        conv = torch.nn.Conv2d(c, c, k, padding=1, groups=groups, bias=False)
    x = torch.empty(n, c, h, h, device=META, requires_grad=True)
    kernels = trace_step(conv, x, "fp32").kernels
    forward = 2 * n * c * h * h * (c // groups) * k * k
    (fwd,) = [k for k in kernels if k.name == "convolution"]
    (bwd,) = [k for k in kernels if k.name == "convolution_backward"]
    assert fwd.flops == forward and bwd.flops == 2 * forward


def test_in_place_writes_are_counted():
    """An op that writes into its arguments writes bytes too: add_ reads two tensors
    and writes one; a fused AdamW step reads p, g, m, v and writes p, g, m, v."""
    from amp_lessons.measure.kernels import KernelRecorder

    n = 1 << 20
    a, b = (torch.empty(n, device=META) for _ in "ab")
    with KernelRecorder() as recorder:
        a.add_(b)
        torch._foreach_mul_([a, b], 2.0)
    add, foreach = recorder.kernels
    assert add.bytes == 3 * 4 * n and foreach.bytes == 4 * 4 * n


@pytest.mark.parametrize(
    "optimizer, implementation, per_param",
    [
        ("adam", "fused", 28),
        ("adam", "foreach", 76),  # 11 passes: the step's math one op at a time
        ("sgd_momentum", "foreach", 32),
        ("sgd", "foreach", 12),
    ],
)
def test_optimizer_step_priced_as_its_implementation_runs(
    optimizer, implementation, per_param
):
    w = model_zoo.mlp(layers=2, width=1024, batch=8)
    numel = sum(p.numel() for p in w.model.parameters())
    from amp_lessons.measure.estimate import step_kernels

    kernels = step_kernels(w.model, "bf16", optimizer, implementation)
    assert {k.kind for k in kernels} == {"optimizer"}
    moved = sum(k.bytes for k in kernels)
    assert moved == pytest.approx(per_param * numel, rel=0.01)
    loop = step_kernels(w.model, "bf16", optimizer, "loop")
    # a Python loop: the same passes, one launch per parameter tensor each
    assert sum(k.launches for k in loop) > sum(k.launches for k in kernels)
    clipped = step_kernels(w.model, "bf16", optimizer, implementation, clip=True)
    clip = [k for k in clipped if k.kind == "clip"]
    # each gradient read for its norm, then read and written scaled
    assert sum(k.bytes for k in clip) == pytest.approx(12 * numel, rel=0.01)


def test_lamb_has_a_fused_step_and_transformer_xls_loop():
    """apex's FusedLAMB is one multi-tensor step; Transformer-XL's jitlamb loops
    over the parameters, 5 kernels each (lamb.py's lamb_kernel with TorchScript's
    elementwise fusion: moments and direction, two norms, the clamp, the update).
    Three parameters of 8 x 8, 8 and 8 x 8 values: 15 launches, 12 fp32 passes over
    their 136 values and the clamp's 8 bytes each."""
    with META:
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 8), torch.nn.Linear(8, 8, bias=False)
        )
    from amp_lessons.measure.estimate import step_kernels

    loop = step_kernels(model, "fp32", "lamb", "loop")
    assert len(loop) == sum(k.launches for k in loop) == 15
    assert {k.kind for k in loop} == {"optimizer"}
    assert sum(k.bytes for k in loop) == 12 * 4 * 136 + 3 * 8
    (fused,) = step_kernels(model, "fp32", "lamb", "fused")
    assert fused.launches == 2 and fused.bytes == 40 * 136
    w = model_zoo.mlp(layers=1, width=64, batch=4)
    with pytest.raises(ValueError, match="no torch.optim implementation"):
        estimate_step(
            w.model,
            w.inputs,
            "A100-SXM4-80GB",
            "bf16",
            "lamb",
            implementation="foreach",
        )


def test_transformer_xl_as_its_source_builds_it():
    """mem_transformer.py's model, by hand for 2 layers of width 64, 4 heads of 16,
    feed-forward 128, a vocabulary of 1000 cut at 100 and 300 (div_val 1): one
    table of 1000 x 64 with a bias of 1000, 2 cluster rows and biases, the two
    position biases (4 x 16 each), and per layer a qkv projection 64 x 192, the
    position projection and the output projection 64 x 64 each (no biases), two
    LayerNorms and the feed-forward (64 x 128 + 128, 128 x 64 + 64). Each layer runs
    two score products (content and position) and one with the values; the head's
    logits cover the 100 shortlisted words and the 2 clusters."""
    sizes = dict(width=64, heads=4, ffn=128, seq=8, memory=4, vocab=1000, batch=2)
    w = published_models.transformer_xl(layers=2, cutoffs="100-300", **sizes)
    layer = 64 * 192 + 2 * 64 * 64 + 2 * 128 + 64 * 128 + 128 + 128 * 64 + 64
    expected = 1000 * 64 + 1000 + 2 * 64 + 2 + 2 * 4 * 16 + 2 * layer
    assert sum(p.numel() for p in w.model.parameters()) == expected
    assert w.items == 8 * 2 and len(w.inputs) == 1 + 2  # ids and one memory a layer
    with KernelRecorder() as recorder:
        out = w.model(*w.inputs)
    assert out.shape == (8, 2, 100 + 2)
    # per layer: content scores (batch x heads) of 8 queries by 12 keys (8 + 4 in
    # memory) over 16 dimensions, position scores (per head, all queries of the
    # batch against 12 positions), and the values' product
    products = Counter(k.gemms for k in recorder.kernels if k.name == "bmm")
    assert products == {
        ((2 * 4, 8, 12, 16),): 2,
        ((4, 8 * 2, 12, 16),): 2,
        ((2 * 4, 8, 16, 12),): 2,
    }
    large = published_models.transformer_xl(
        layers=1, cutoffs="100-300", div_val=4, **sizes
    )
    # div_val 4: tables of 100 x 64, 200 x 16 and 700 x 4, each with a projection
    # to the width and a bias, and the softmax's own 64 x 64 projection
    tables = 100 * 64 + 200 * 16 + 700 * 4 + 64 * (64 + 16 + 4) + 1000 + 64 * 64
    assert sum(p.numel() for p in large.model.parameters()) == tables + 2 * 64 + 2 + (
        2 * 4 * 16 + layer
    )


def test_rows_record_the_optimizer_implementation_their_source_runs():
    """Transformer-XL's rows loop (jitlamb); BERT SQuAD's full-precision run loops
    (BertAdam), its AMP run is fused (FusedAdam); the loop is priced per parameter."""
    rows = {r.id: r for r in published.load_rows()}
    xl = rows["transformer_xl_base_v100_16gb"]
    assert xl.implementation(False) == xl.implementation(True) == "loop"
    squad = rows["bert_large_squad_a100_80gb"]
    assert (squad.implementation(False), squad.implementation(True)) == (
        "loop",
        "fused",
    )
    assert rows["resnet50_a100_80gb"].implementation(True) == "fused"
    t = published.traced(xl)
    params = sum(1 for k in t.amp.extra if k.name == "lamb_moments")
    assert params and sum(k.kind == "optimizer" for k in t.amp.extra) == 5 * params


# ---- validation on rows the fit never saw ----------------------------------------


def test_validation_on_check_rows_reports_beside_the_naive_guess(fit, capsys):
    """The figures the README and lesson 06 state, on the check rows only, beside
    a guess of one speed-up per GPU generation taken from the fit rows. The
    issue's goals (85% within 35%, median 15%, 0.75x the guess's median, rank
    correlation 0.5 per generation) are printed against what is reached."""
    from amp_lessons.measure import validation

    report = validation.validate(fit)
    with capsys.disabled():
        print("\n" + report.summary())
    rows = published.load_rows()
    assert report.check_rows == sum(r.role == "check" for r in rows) >= 27
    assert len(rows) >= 41
    # the issue's four goals, all reached (torch 2.13, the recorded fit): 100% within
    # 35% (27 of 27), median error 13%, 0.51x the guess's median error, rank
    # correlation V100 0.72, A100 0.93
    assert report.within_35 >= 0.85
    assert report.median_error <= 0.15
    assert report.median_error <= 0.75 * report.naive_median_error
    assert all(g.spearman >= 0.5 for g in report.generations)
    assert {g.name for g in report.generations} == {"Volta", "Ampere"}
    assert set(report.family_out) >= {"ResNet-50", "nnU-Net", "Transformer-XL"}
    # the guess comes from fit rows alone: a check row's published number moves
    # the check error, never the guess
    guess = validation.naive_guess(fit)
    assert guess == {
        "Volta": pytest.approx(3.95, abs=0.5),
        "Ampere": pytest.approx(1.8, abs=0.3),
    }
    assert validation.spearman([1, 2, 3], [10, 30, 20]) == pytest.approx(0.5)


def readers_model():
    """What a reader passes as --model test_estimate:readers_model."""
    with META:
        model = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    return model, torch.empty(8, 64, 256, device=META)


def test_cli_estimates_a_readers_own_model_on_every_gpu(capsys):
    argv = ["estimate", "--model", "test_estimate:readers_model", "--gpu", "all"]
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["gpu"] for r in rows} == set(GPUS)
    assert {r["precision"] for r in rows if r["gpu"] == "V100-SXM2-16GB"} == {
        "fp32",
        "fp16",
    }
    assert main([*argv, "--precision", "bf16"]) == 0  # the GPUs that take bf16
    out = capsys.readouterr().out
    assert "H200-SXM-141GB" in out and "V100-SXM2-16GB" not in out


@pytest.mark.parametrize(
    "model, message",
    [
        ("nosuchpackage.models:vit", "cannot import 'nosuchpackage.models'"),
        ("test_estimate:no_such_function", "test_estimate has no function"),
        ("test_estimate:_linear", "must return \\(model, inputs\\)"),
        (
            "vit",
            "unknown model 'vit'; choose one of: transformer, gpt, mlp, resnet50, or",
        ),
        (":vit", "neither a family"),
    ],
)
def test_cli_readers_model_mistakes_get_one_line(capsys, model, message):
    assert main(["estimate", "--model", model]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert (
        main(["estimate", "--model", "test_estimate:readers_model", "--layers", "2"])
        == 2
    )
    assert "--layers sizes a built-in family" in capsys.readouterr().err


# ---- memory per precision ---------------------------------------------------------


@pytest.mark.parametrize("batch", [2, 2048])
@pytest.mark.parametrize("precision, dtype", [("fp32", None), ("bf16", torch.bfloat16)])
def test_saved_bytes_on_meta_equal_the_exact_cpu_count(batch, precision, dtype):
    """The bytes saved for backward, found on the meta device under the policy, are
    core.memory's exact count on real CPU tensors under CPU autocast (whose list
    agrees with CUDA's for Linear and ReLU): weight copies included."""
    from amp_lessons.core import memory
    from amp_lessons.core.models import MLP
    from amp_lessons.measure.memory_estimate import saved_bytes

    real = MLP((64,) * 4)
    with META:
        meta = MLP((64,) * 4)
    exact = memory.activation_bytes(real, torch.randn(batch, 64), dtype)
    assert saved_bytes(meta, torch.empty(batch, 64, device=META), precision) == exact


def test_memory_estimate_beside_the_recorded_h200_run(capsys):
    """Peak memory of the H200 record's bench configs (torch.cuda.max_memory_
    allocated) beside the estimate's peak, in every precision: within 10% (measured
    today: 0.98x-1.00x). The parts summed miss it (0.84x-0.93x): the peak comes at
    the start of backward, where the loss's log-probabilities and two logit-sized
    gradients are held beside every activation, and cuBLAS's workspaces count."""
    from amp_lessons.measure.estimate_check import bench_workload
    from amp_lessons.measure.memory_estimate import estimate_memory

    report = _report()
    ratios, parts = {}, {}
    for r in report["results"]:
        w = bench_workload(r["config"], report["sizes"][r["config"]])
        m = estimate_memory(
            w.model, w.inputs, "H200-SXM-141GB", r["precision"], w.optimizer, w.loss_fn
        )
        ratios[r["config"], r["precision"]] = m.peak / r["peak_mem_bytes"]
        parts[r["config"], r["precision"]] = m.total / r["peak_mem_bytes"]
        assert m.largest_batch > m.batch  # the bench's batch fits an H200
    with capsys.disabled():
        print(
            "\nestimated / measured peak memory, H200:",
            {f"{c} {p}": round(v, 3) for (c, p), v in ratios.items()},
        )
    assert len(ratios) == 8
    assert all(0.9 <= v <= 1.1 for v in ratios.values()), ratios
    assert all(v < 0.95 for v in parts.values()), parts  # why the peak is modelled
    # AMP shrinks the transformer's peak as measured (0.63x), not the MLP's
    for config in ("transformer", "mlp"):
        measured = {
            r["precision"]: r["peak_mem_bytes"]
            for r in report["results"]
            if r["config"] == config
        }
        estimated = ratios[config, "bf16"] * measured["bf16"]
        estimated /= ratios[config, "fp32"] * measured["fp32"]
        assert estimated == pytest.approx(measured["bf16"] / measured["fp32"], rel=0.1)


def test_live_bytes_follow_each_storage_to_its_last_reference():
    """exp saves its output for backward: x (not counted, it exists before), then
    y = x.exp() (held by autograd), z = y * 2 (a temporary the sum frees), the
    sum; in backward the loss's gradient (a scalar), the gradient of y, then of x.
    Peak: y, its gradient and x's gradient (3 x 4 KiB) and the two scalars."""
    from amp_lessons.measure.memory_estimate import LiveBytes

    x = torch.empty(1024, device=META, requires_grad=True)
    with LiveBytes([x]) as live:
        loss = (x.exp() * 2).sum()
        during_forward = live.now
        loss.backward()
    assert during_forward == 4096 + 4  # y saved by exp, and the loss; z was freed
    assert live.peak == 3 * 4096 + 2 * 4
    x.grad = None
