"""amp_lessons.core.fp8 (+ fp8_scaling, measure.fp8_vs_torchao): the arithmetic against
hand computations, the twin against torchao bit for bit (skipped, with the install line,
where torchao is absent), and deliberately wrong variants that the comparison
rejects, so the comparison is shown able to fail."""

from __future__ import annotations

import ast
import copy
import doctest
import inspect
import itertools
import subprocess
import sys

import pytest
import torch
from paths import ROOT
from torch import nn

from amp_lessons.core import fp8, fp8_scaling
from amp_lessons.core.fp8 import (
    E4M3,
    E5M2,
    ROWWISE,
    TENSORWISE,
    Float8Linear,
    Recipe,
    amax,
    cast_to_fp8,
    filter_first_and_last,
    scale_from_amax,
    scaled_mm,
    to_float8,
    to_fp8,
)
from amp_lessons.core.fp8_scaling import DelayedScaling, compare_scaling, row_errors
from amp_lessons.core.models import GPT
from amp_lessons.measure import fp8_vs_torchao
from amp_lessons.measure.fp8_vs_torchao import (
    INSTALL_HINT,
    TORCHAO_REQUIREMENT,
    compare_with_torchao,
    convert_with_torchao,
    import_torchao_float8,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

needs_torchao = pytest.mark.skipif(
    import_torchao_float8() is None,
    reason=f"torchao is not installed; to run the twin tests: {INSTALL_HINT}",
)


@pytest.mark.parametrize("module", [fp8, fp8_scaling, fp8_vs_torchao])
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.failed == 0


# ---- the arithmetic, by hand ---------------------------------------------------------


def test_amax_uses_the_magnitude():
    x = torch.tensor([[1.0, -5.0], [2.0, 0.5]])
    assert amax(x) == 5.0  # not 2.0, the largest signed value
    assert amax(x, dim=-1).tolist() == [[5.0], [2.0]]
    assert amax(x, dim=0).tolist() == [[2.0, 5.0]]


def test_scale_is_format_max_over_amax_in_float32():
    assert scale_from_amax(torch.tensor(3.5)).item() == 448 / 3.5 == 128.0
    assert scale_from_amax(torch.tensor(3.5), E5M2).item() == 57344 / 3.5
    s = scale_from_amax(torch.tensor(3.0))
    assert s.dtype == torch.float32
    # float64 quotient rounded once to float32
    assert s.item() == torch.tensor(448 / 3.0, dtype=torch.float32).item()
    assert scale_from_amax(torch.tensor(3.0), power_of_2=True).item() == 128.0
    assert scale_from_amax(torch.tensor(0.01), power_of_2=True).item() == 32768.0


def test_scale_of_an_all_zero_tensor_is_finite():
    s = scale_from_amax(torch.tensor(0.0))
    assert torch.isfinite(s) and s.item() == torch.tensor(448e12).item()
    q = to_fp8(torch.zeros(3))
    assert q.data.float().tolist() == [0.0, 0.0, 0.0]
    assert not q.dequantize().isnan().any()


def test_bad_dtype_is_refused_with_the_two_choices():
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        scale_from_amax(torch.tensor(1.0), torch.float16)
    with pytest.raises(ValueError, match="float8_e5m2"):
        Recipe(grad_dtype=torch.bfloat16)


def test_cast_saturates_where_a_plain_cast_would_not():
    x = torch.tensor([1e6, -1e6, 100.0])
    e5m2 = cast_to_fp8(x, torch.tensor(1.0), E5M2).float()
    assert e5m2.tolist() == [57344.0, -57344.0, 96.0]
    assert x.to(E5M2).float()[:2].isinf().all()  # without the clamp: inf
    assert cast_to_fp8(x, torch.tensor(1.0), E4M3).float().tolist() == [448, -448, 96]
    assert cast_to_fp8(torch.tensor([float("nan")]), torch.tensor(1.0)).isnan().all()


def test_cast_rounds_to_nearest_even_on_the_e4m3_grid():
    # 256..512 has a spacing of 32: 336 is a tie between 320 (even) and 352
    assert cast_to_fp8(
        torch.tensor([336.0, 337.0]), torch.tensor(1.0)
    ).float().tolist() == [320.0, 352.0]
    # the smallest subnormal is 2**-9; half of it is a tie that goes to 0
    tiny = torch.tensor([2.0**-9, 2.0**-10])
    assert cast_to_fp8(tiny, torch.tensor(1.0)).float().tolist() == [2.0**-9, 0.0]


def test_round_trip_of_a_tensorwise_cast_by_hand():
    x = torch.tensor([0.1, -0.3, 1.75])
    q = to_fp8(x)
    assert q.scale.item() == 256.0
    assert q.data.float().tolist() == [26.0, -80.0, 448.0]  # 25.6, -76.8, 448
    assert q.dequantize().tolist() == [26 / 256, -80 / 256, 448 / 256]


def test_scaled_mm_divides_each_operand_by_its_scale():
    a, b = to_fp8(torch.tensor([[1.0, 2.0]])), to_fp8(torch.tensor([[3.0], [4.0]]))
    expected = (1 * 224 / 224) * (320 / 112) + (448 / 224) * (448 / 112)
    assert scaled_mm(a, b, torch.float32).item() == pytest.approx(expected, rel=1e-7)
    assert scaled_mm(a, b, torch.bfloat16).dtype == torch.bfloat16


def test_rowwise_scales_each_row_of_the_left_and_each_column_of_the_right():
    x = torch.tensor([[1.0, 2.0], [100.0, 50.0]])
    f32 = torch.tensor([224.0, 4.48, 8.96]).tolist()  # 4.48 and 8.96 as float32
    assert to_fp8(x, dim=-1).scale.flatten().tolist() == [f32[0], f32[1]]
    assert to_fp8(x, dim=0).scale.flatten().tolist() == [f32[1], f32[2]]


# ---- Float8Linear and to_float8 ------------------------------------------------------


def test_to_float8_swaps_in_place_and_shares_the_parameters():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    weights = [p for p in model.parameters()]
    out = to_float8(model)
    assert out is model and all(isinstance(model[i], Float8Linear) for i in (0, 2))
    assert all(a is b for a, b in zip(weights, model.parameters(), strict=True))
    assert to_float8(model) is model and isinstance(model[0], Float8Linear)  # twice


def test_to_float8_of_a_bare_linear_returns_the_new_layer():
    linear = nn.Linear(4, 4)
    new = to_float8(linear)
    assert isinstance(new, Float8Linear) and new.weight is linear.weight


def test_from_linear_draws_nothing_from_the_random_generator():
    linear = nn.Linear(64, 64)
    state = torch.get_rng_state()
    Float8Linear.from_linear(linear)
    assert torch.equal(state, torch.get_rng_state())


def test_module_filter_gets_module_and_fqn_and_is_respected():
    model = GPT(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=32)
    seen = []

    def only_mlp(module, fqn):
        seen.append(fqn)
        return ".mlp." in fqn

    to_float8(model, only_mlp)
    converted = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert converted == {f"blocks.{i}.mlp.{j}" for i in range(2) for j in (0, 2)}
    assert "head" in seen and "blocks.0.attn.qkv" in seen


def test_filter_first_and_last_keeps_the_ends_as_accelerate_does():
    model = GPT(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=32)
    to_float8(model, filter_first_and_last(model))
    kept = {
        n
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and not isinstance(m, Float8Linear)
    }
    assert kept == {"blocks.0.attn.qkv", "head"}
    odd = nn.Sequential(
        nn.Linear(16, 16), nn.Linear(16, 24), nn.Linear(24, 16), nn.Linear(16, 16)
    )
    keep = filter_first_and_last(odd)
    assert [keep(m, n) for n, m in odd.named_children()] == [False, False, False, False]


def test_float8_linear_trains():
    torch.manual_seed(0)
    model = to_float8(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


# ---- the twin against torchao --------------------------------------------------------

SHAPES = [(4, 16), (2, 5, 32), (7, 48)]


def _mlp(in_features: int, bias: bool, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(in_features, 64, bias=bias), nn.GELU(), nn.Linear(64, 16, bias=bias)
    )


def _input(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + 100)) * 3


def _all_same(rows):
    return {r["tensor"]: r["same_bits"] for r in rows}


@needs_torchao
@pytest.mark.parametrize("recipe", [TENSORWISE, ROWWISE], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("autocast_dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("shape,seed", list(itertools.product(SHAPES, [0, 1])))
def test_bit_identical_to_torchao(shape, seed, bias, autocast_dtype, recipe):
    rows = compare_with_torchao(
        _mlp(shape[-1], bias, seed), _input(shape, seed), recipe, autocast_dtype
    )
    same = _all_same(rows)
    expected = {"output", "input grad", "0.weight grad", "2.weight grad"}
    if bias:
        expected |= {"0.bias grad", "2.bias grad"}
    assert set(same) == expected
    assert all(same.values()), same
    output = next(r for r in rows if r["tensor"] == "output")
    assert output["dtype"] == ("bfloat16" if autocast_dtype else "float32")


@needs_torchao
def test_bit_identical_on_a_gpt_with_the_ends_kept():
    model = GPT(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=32)
    x = torch.randint(32, (4, 8), generator=torch.Generator().manual_seed(0))
    for dtype in (None, torch.bfloat16):
        rows = compare_with_torchao(
            model, x, TENSORWISE, dtype, filter_first_and_last(model)
        )
        assert len(rows) == 1 + len(list(model.parameters()))  # ids: no input grad
        assert all(_all_same(rows).values()), _all_same(rows)


@needs_torchao
def test_non_contiguous_input_matches_torchao():
    x = _input((32, 6), 0).t()  # (6, 32), transposed strides
    assert all(_all_same(compare_with_torchao(_mlp(32, True, 0), x)).values())


@needs_torchao
@pytest.mark.parametrize("recipe", [TENSORWISE, ROWWISE], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_input_feature_and_one_row_match_torchao(seed, recipe):
    # in_features == 1: the weight operand of the input gradient has torchao's
    # layout (see the next test), else the input gradient is 1-2 ulps off.
    rows = compare_with_torchao(_mlp(1, True, seed), _input((1, 1), seed), recipe)
    assert all(_all_same(rows).values()), _all_same(rows)


@pytest.mark.parametrize("recipe", [TENSORWISE, ROWWISE], ids=["tensorwise", "rowwise"])
def test_the_input_gradient_takes_the_weight_in_torchaos_layout(recipe, monkeypatch):
    # torchao casts w.t() and transposes the fp8 tensor back: for a (64, 1) weight
    # the strides (1, 64), not the (1, 1) of casting w itself. BLAS picks its
    # summation order from the strides. (Checked here without torchao.)
    layouts = []

    def recording_mm(a, b, out_dtype):
        layouts.append((tuple(b.data.shape), b.data.stride()))
        return scaled_mm(a, b, out_dtype)

    monkeypatch.setattr(fp8, "scaled_mm", recording_mm)
    layer = to_float8(nn.Linear(1, 64), recipe=recipe)
    layer(torch.ones(1, 1, requires_grad=True)).sum().backward()
    _, grad_input, _ = layouts  # forward, input gradient, weight gradient
    assert grad_input == ((64, 1), (1, 64))


@needs_torchao
def test_torchao_converts_the_same_modules_with_the_same_filter():
    model = GPT(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=32)
    calls = {"ours": [], "theirs": []}

    def recorder(name):
        def module_filter(module, fqn):
            calls[name].append(fqn)
            return fqn.endswith("proj") or fqn == "head"

        return module_filter

    ours = to_float8(copy.deepcopy(model), recorder("ours"))
    theirs = convert_with_torchao(
        copy.deepcopy(model), module_filter=recorder("theirs")
    )
    assert calls["ours"] == calls["theirs"]  # same modules asked, in the same order
    kinds = [
        [n for n, m in net.named_modules() if type(m).__name__ == "Float8Linear"]
        for net in (ours, theirs)
    ]
    assert kinds[0] == kinds[1] == ["blocks.0.attn.proj", "blocks.1.attn.proj", "head"]


# Each wrong variant changes one detail of the numerics; the comparison must see it.


def _reciprocal_mm(a, b, out_dtype):
    return torch.mm(a.data.float() * (1 / a.scale), b.data.float() * (1 / b.scale)).to(
        out_dtype
    )


def _bf16_mm(a, b, out_dtype):
    return torch.mm(
        a.data.to(out_dtype) / a.scale.to(out_dtype),
        b.data.to(out_dtype) / b.scale.to(out_dtype),
    )


def _no_scale(x, dtype=E4M3, dim=None, power_of_2=False):
    return fp8.Fp8Tensor(x.float().to(dtype), torch.tensor(1.0), x.dtype)


WRONG = {
    "multiply by the reciprocal scale": ("scaled_mm", _reciprocal_mm, None),
    "matmul in bf16": ("scaled_mm", _bf16_mm, torch.bfloat16),
    "no scaling at all": ("to_fp8", _no_scale, None),
}


@needs_torchao
@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_variant_is_caught(name, monkeypatch):
    attribute, replacement, autocast_dtype = WRONG[name]
    model, x = _mlp(16, True, 0), _input((8, 16), 0)
    assert all(
        _all_same(compare_with_torchao(model, x, TENSORWISE, autocast_dtype)).values()
    )
    monkeypatch.setattr(fp8, attribute, replacement)
    assert not all(
        _all_same(compare_with_torchao(model, x, TENSORWISE, autocast_dtype)).values()
    )


@needs_torchao
def test_wrong_gradient_format_is_caught():
    model, x = _mlp(16, True, 0), _input((8, 16), 0)
    e4m3_grads = Recipe(grad_dtype=E4M3)
    theirs = convert_with_torchao(copy.deepcopy(model))
    ours = to_float8(copy.deepcopy(model), recipe=e4m3_grads)
    for net in (theirs, ours):
        net(x).sum().backward()
    assert not torch.equal(theirs[0].weight.grad, ours[0].weight.grad)


@needs_torchao
def test_casting_the_input_under_cpu_autocast_is_caught(monkeypatch):
    """torchao casts the input only under CUDA autocast; doing it on CPU differs."""
    model, x = _mlp(16, True, 0), _input((8, 16), 0)
    real = Float8Linear.forward

    def cast_input_too(self, x):
        if torch.is_autocast_enabled("cpu"):
            x = x.to(torch.bfloat16)
        return real(self, x)

    monkeypatch.setattr(Float8Linear, "forward", cast_input_too)
    assert not all(
        _all_same(compare_with_torchao(model, x, TENSORWISE, torch.bfloat16)).values()
    )


def test_import_is_quiet_on_a_cpu_only_torch():
    code = (
        "from amp_lessons.measure.fp8_vs_torchao import import_torchao_float8\n"
        "print(import_torchao_float8() is not None)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    if torch.version.cuda is None and "True" in run.stdout:  # a CPU-only torch
        plain = subprocess.run(
            [sys.executable, "-c", "import torchao.float8"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert "Failed to load" in plain.stderr  # what the quiet import hides


def test_without_torchao_every_entry_point_says_how_to_install(monkeypatch):
    def absent(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(fp8_vs_torchao.importlib, "import_module", absent)
    assert import_torchao_float8() is None
    assert INSTALL_HINT in fp8_vs_torchao.torchao_missing()
    with pytest.raises(ModuleNotFoundError, match="pip install 'torchao"):
        convert_with_torchao(nn.Linear(4, 4))
    # our own twin does not need it, and is written without it
    assert isinstance(to_float8(nn.Linear(4, 4)), Float8Linear)
    tree = ast.parse(inspect.getsource(fp8))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "torch" in imported and not any("torchao" in name for name in imported)


def test_the_optional_requirement_is_declared_the_same_everywhere():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["fp8"] == [TORCHAO_REQUIREMENT]
    assert TORCHAO_REQUIREMENT in (ROOT / "requirements.txt").read_text()
    assert TORCHAO_REQUIREMENT in (ROOT / "environment.yml").read_text()
    assert all(
        not line.split("#")[0].strip().startswith("torchao")
        for line in (ROOT / "requirements.txt").read_text().splitlines()
    )  # optional


# ---- delayed vs dynamic, tensorwise vs rowwise --------------------------------------


def test_delayed_scale_starts_at_one_and_ignores_zero_and_inf():
    s = DelayedScaling(history_len=3)
    assert s.scale.item() == 1.0
    s.record(torch.tensor(0.0))
    assert s.scale.item() == 1.0
    s.record(torch.tensor(2.0))
    assert s.scale.item() == 224.0
    s.record(torch.tensor(float("inf")))
    assert s.scale.item() == 224.0  # max of the history is inf: keep the old scale


def test_delayed_scale_uses_the_history_max_and_forgets_after_its_length():
    s = DelayedScaling(history_len=2, margin=1)
    for a in (4.0, 1.0):
        s.record(torch.tensor(a))
    assert s.scale.item() == 448 / 4 / 2  # max(4, 1), halved by the margin
    s.record(torch.tensor(1.0))  # 4.0 leaves the two-step window
    assert s.scale.item() == 448 / 1 / 2
    with pytest.raises(ValueError, match="history_len"):
        DelayedScaling(history_len=0)


def test_delayed_scaling_saturates_on_a_spike_and_dynamic_does_not():
    rows = compare_scaling([1.0] * 4 + [1e4] + [1.0] * 6, history_len=4)
    assert [r["step"] for r in rows if r["delayed_saturated"] > 0] == [5]
    assert rows[4]["delayed_saturated"] > 0.9 and rows[4]["delayed_error"] > 0.9
    assert all(r["dynamic_saturated"] == 0 and r["dynamic_error"] < 0.03 for r in rows)
    # after the spike the history keeps the scale small for 4 steps: less precision
    after = [r["delayed_error"] for r in rows[5:9]]
    assert min(after) > 1.4 * max(r["dynamic_error"] for r in rows[5:9])
    assert rows[9]["delayed_error"] == rows[9]["dynamic_error"]  # caught up


def test_one_outlier_row_hurts_every_other_row_only_with_one_scale():
    x = fp8_scaling.outlier_matrix(rows=8, outlier_row=3, factor=1e5)
    errors = row_errors(x)
    others = [i for i in range(8) if i != 3]
    assert min(errors["tensorwise"][i] for i in others) > 0.3
    assert min(errors["tensorwise_zeros"][i] for i in others) > 0.4
    assert max(errors["rowwise"]) < 0.03 and max(errors["rowwise_zeros"]) < 0.01
    assert errors["tensorwise"][3] == pytest.approx(errors["rowwise"][3], abs=0.01)
    with pytest.raises(ValueError, match="outlier_row"):
        fp8_scaling.outlier_matrix(rows=4, outlier_row=4)


# ---- the pictures draw what was measured ---------------------------------------------


@pytest.mark.usefixtures("no_pyplot_figures")
def test_plot_scaling_stream_draws_each_rows_error_and_marks_saturation():
    from amp_lessons.teaching.plots import plot_scaling_stream

    rows = compare_scaling([1.0, 1.0, 1e3, 1.0], history_len=2)
    fig = plot_scaling_stream(rows)
    top, bottom = fig.axes
    lines = {line.get_label(): line for line in bottom.lines}
    assert list(lines["delayed"].get_ydata()) == [r["delayed_error"] for r in rows]
    assert list(lines["delayed: saturated"].get_xdata()) == [3]
    assert "dynamic: saturated" not in lines
    planned = {line.get_label(): line for line in top.lines}
    scales = [r["dynamic_scale"] for r in rows]
    assert list(planned["dynamic: amax the scale fits (448 / scale)"].get_ydata()) == [
        448.0 / s for s in scales
    ]
    with pytest.raises(ValueError, match="compare_scaling"):
        plot_scaling_stream([])


@pytest.mark.usefixtures("no_pyplot_figures")
def test_plot_row_errors_bars_are_the_errors():
    from amp_lessons.teaching.plots import plot_row_errors

    errors = row_errors(fp8_scaling.outlier_matrix(rows=4, outlier_row=1))
    ax = plot_row_errors(errors, outlier_row=1).axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == errors["tensorwise"] + errors["rowwise"]
    assert "(outlier)" in ax.get_xticklabels()[1].get_text()
    with pytest.raises(ValueError, match="row_errors"):
        plot_row_errors({"tensorwise": [0.1]})


@needs_torchao
@pytest.mark.gpu
@pytest.mark.parametrize("autocast_dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_bit_identical_to_torchao_on_cuda(autocast_dtype):
    """Under CUDA autocast torchao casts the input itself: the twin must too."""
    model = _mlp(32, True, 0).cuda()
    x = _input((2, 8, 32), 0).cuda()
    rows = compare_with_torchao(model, x, TENSORWISE, autocast_dtype)
    assert all(_all_same(rows).values()), _all_same(rows)


# ---- the range explorer on the fp8 formats ------------------------------------------


def test_range_explorer_shows_the_fp8_casts():
    from amp_lessons.teaching.widgets import RangeExplorer

    w = RangeExplorer(448.0, fmt="fp8_e4m3")
    first = w.image.value

    def stored(name):
        return next(r["stored"] for r in w.rows if r["format"] == name)

    for text, e4m3 in (("464", 448.0), ("2^-10", 0.0), ("0.001953125", 2.0**-9)):
        w.text.value = text
        assert (
            stored("fp8_e4m3")
            == e4m3
            == torch.tensor(float(w.value)).to(E4M3).float().item()
        )
    w.fmt.value = "fp8_e5m2"
    w.text.value = "61440"  # the tie between 57344 and the next step, inf
    assert stored("fp8_e5m2") == float("inf") == torch.tensor(61440.0).to(E5M2).item()
    assert w.image.value != first
