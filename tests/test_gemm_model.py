"""The tile and wave model of a GEMM's efficiency, and the NCHW transposes of a
convolution on tensor cores, by hand."""

import math

import pytest
import torch

from amp_lessons.measure.estimate import (
    FITTED,
    GPUS,
    estimate_step,
    layout_kernels,
    shape_efficiency,
)
from amp_lessons.measure.gemm_model import (
    TILES,
    conv_gemms,
    gemm_efficiency,
    tile_efficiency,
)
from amp_lessons.measure.kernels import Kernel
from amp_lessons.measure.trace import trace_step

META = torch.device("meta")


def test_the_guides_wave_example_on_an_a100():
    """NVIDIA's guide: an A100's 108 SMs run 108 tiles of 256 x 128 in one wave, so
    one more tile costs a second wave. 108 tiles of 256 x 128 are a 2304 x 1536
    output (9 x 12 tiles): one full wave; 2304 x 1664 is 9 x 13 = 117 tiles."""
    one_wave = gemm_efficiency((1, 2304, 1536, 4096), sms=108)
    two_waves = gemm_efficiency((1, 2304, 1664, 4096), sms=108)
    assert one_wave == pytest.approx(1.0)
    # 256 x 128 tiles: 117 of 216 slots busy (0.54); 128 x 128 tiles do better,
    # 234 tiles in three waves of 108 (0.72), and are the ones picked
    assert two_waves == pytest.approx(234 / 324)
    # the same matrix on a GPU with as many SMs as tiles loses nothing
    assert gemm_efficiency((1, 2304, 1664, 4096), sms=117) == pytest.approx(1.0)


def test_tile_quantization_pays_for_whole_tiles():
    """M = 257 computes two rows of tiles where one would hold 256: the best tile
    then is a smaller one, but some work is lost either way."""
    exact = gemm_efficiency((1, 256 * 54, 1024, 1024), sms=108)
    one_more = gemm_efficiency((1, 256 * 54 + 1, 1024, 1024), sms=108)
    assert one_more < exact
    assert tile_efficiency(256, 128) == tile_efficiency(128, 128) == 1.0
    assert tile_efficiency(64, 64) == 0.5  # reuse 32 against 128 x 128's 64
    assert (256, 128) in TILES and (64, 64) in TILES


def test_skinny_and_small_gemms_lose_most():
    big = gemm_efficiency((1, 8192, 8192, 8192), sms=132)
    skinny = gemm_efficiency((1, 8, 8192, 8192), sms=132)
    assert big > 0.9 and skinny < 0.1
    # split-K: a weight gradient of 1024 x 1024 over 65536 tokens fills the SMs
    assert gemm_efficiency((1, 1024, 1024, 65536), sms=132) > 0.9
    assert gemm_efficiency((0, 8, 8, 8), sms=132) == 1.0


def test_convolution_as_implicit_gemms_by_hand():
    """Forward: M = N*P*Q, N = K, K = C*R*S; input gradient: M = N*H*W, N = C,
    K = K*R*S; weight gradient: M = K, N = C*R*S, K = N*P*Q."""
    n, c, k, h = 8, 64, 128, 56
    gemms = conv_gemms((n, c, h, h), (k, c, 3, 3), (n, k, h, h), 1, False)
    assert gemms == (
        (1, n * h * h, k, c * 9),
        (1, n * h * h, c, k * 9),
        (1, k, c * 9, n * h * h),
    )
    for b, m, nn, kk in gemms:  # each is the forward's multiply-adds
        assert b * m * nn * kk == n * h * h * k * c * 9
    assert conv_gemms((n, c, h, h), (k, 2, 3, 3), (n, k, h, h), 32, False) == ()
    # the recorder attaches them to the traced kernels
    with META:
        conv = torch.nn.Conv2d(c, k, 3, padding=1)
    x = torch.empty(n, c, h, h, device=META, requires_grad=True)
    kernels = {kk.name: kk for kk in trace_step(conv, x, "bf16").kernels}
    assert kernels["convolution"].gemms == gemms[:1]
    assert kernels["convolution_backward"].gemms == gemms[1:]


def test_matmul_shapes_recorded_and_priced():
    with META:
        model = torch.nn.Linear(1024, 4096)
    x = torch.empty(8, 1024, device=META)
    kernels = trace_step(model, x, "bf16").kernels
    addmm = next(k for k in kernels if k.name == "addmm")
    assert addmm.gemms == ((1, 8, 4096, 1024),)
    h100 = GPUS["H100-SXM5-80GB"]
    assert shape_efficiency(addmm, h100) == pytest.approx(
        gemm_efficiency((1, 8, 4096, 1024), 132)
    )
    assert shape_efficiency(Kernel("add", "pointwise", 0, 4), h100) == 1.0


def test_tf32_and_16_bit_tensor_cores_have_their_own_efficiency():
    with META:
        model = torch.nn.Linear(4096, 4096, bias=False)
    x = torch.empty(8192, 4096, device=META)
    a100 = "A100-SXM4-80GB"
    tf32 = estimate_step(model, x, a100, "tf32", "none")
    bf16 = estimate_step(model, x, a100, "bf16", "none")
    # compute-bound: the ratio of the two peaks times that of the two efficiencies
    ratio = tf32.compute_s / bf16.compute_s
    assert ratio == pytest.approx(2 * FITTED.tensor / FITTED.tf32, rel=0.02)


def test_nchw_convolutions_on_tensor_cores_pay_transposes():
    with META:
        conv = torch.nn.Conv2d(64, 64, 3, padding=1)
    x = torch.empty(32, 64, 56, 56, device=META)
    fp32 = trace_step(conv, x, "fp32").kernels
    bf16 = trace_step(conv, x, "bf16").kernels
    assert layout_kernels(fp32) == []  # CUDA cores run NCHW as it is
    transposes = layout_kernels(bf16)
    convs = [k for k in bf16 if k.kind == "convolution"]
    assert len(transposes) == len(convs) == 2
    assert sum(k.bytes for k in transposes) == 2 * sum(k.bytes for k in convs)
    gpu = "A100-SXM4-80GB"
    nchw = estimate_step(conv, x, gpu, "bf16", "none")
    nhwc = estimate_step(conv, x, gpu, "bf16", "none", channels_last=True)
    assert nchw.seconds > nhwc.seconds
    assert math.isclose(nchw.by_kind["layout"], nchw.seconds - nhwc.seconds)


# ---- cuDNN's Winograd for 3x3 convolutions ------------------------------------------


def test_winograd_price_of_one_3x3_convolution_by_hand():
    """F(4x4, 3x3) (Lavin & Gray 2016): 36 multiplies for a 4 x 4 output tile, 4x
    fewer than the direct 144. A 256 -> 256 3x3 convolution over 8 x 16 x 16: 8 *
    4 * 4 = 128 tiles; the GEMMs are 36 of 128 x 256 by 256 x 256; the transforms
    move the input, its 36 / 16 = 2.25x larger transform, the products and the
    output (fp32: 4 bytes each). The step prices the cheaper of the two ways."""
    n, c, h = 8, 256, 16
    with META:
        conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
    x = torch.empty(n, c, h, h, device=META)
    forward = next(
        k for k in trace_step(conv, x, "fp32").kernels if k.kind == "convolution"
    )
    direct_flops = 2 * n * h * h * c * c * 9
    assert forward.flops == direct_flops
    (option,) = forward.alternatives
    names = [k.name for k in option]
    assert names == [
        "winograd_input_transform",
        "winograd_filter_transform",
        "winograd_gemm",
        "winograd_output_transform",
    ]
    tiles, act = n * 4 * 4, n * c * h * h
    gemm = option[2]
    assert gemm.flops * 4 == direct_flops == 2 * 36 * tiles * c * c * 4
    assert gemm.gemms == ((36, tiles, c, c),)
    assert option[0].bytes == 4 * (act + 36 * tiles * c)  # reads x, writes 2.25x
    assert 36 * tiles * c == 2.25 * act
    assert option[1].bytes == 4 * (9 * c * c + 36 * c * c)
    assert gemm.bytes == 4 * (36 * tiles * c * 2 + 36 * c * c)
    assert option[3].bytes == option[0].bytes
    # priced: the cheaper of the direct kernel and the four Winograd kernels
    v100 = GPUS["V100-SXM2-32GB"]
    eff = FITTED

    def seconds(k):
        compute = (
            k.flops / (v100.peak("fp32") * eff.fp32 * shape_efficiency(k, v100))
            if k.flops
            else 0.0
        )
        memory = k.bytes / (v100.bandwidth_gbs * 1e9 * eff.memory)
        return max(compute, memory, eff.kernel_us * 1e-6)

    by_winograd = sum(seconds(k) for k in option)
    assert by_winograd < seconds(forward)  # 256 channels: Winograd pays on a V100
    est = estimate_step(conv, x, "V100-SXM2-32GB", "fp32", "none")
    assert est.by_kind["convolution"] == pytest.approx(
        by_winograd
        + sum(
            min(seconds(k), min(sum(seconds(p) for p in o) for o in k.alternatives))
            for k in trace_step(conv, x, "fp32").kernels
            if k.name == "convolution_backward"
        )
    )


def test_winograd_only_where_cudnn_runs_it():
    """Strided, 1x1, grouped, depthwise, dilated, transposed, 1D and 3D convolutions
    have no Winograd alternative; a 3x3 one's backward has three (the data
    gradient, the filter gradient or both by Winograd)."""
    x = torch.empty(2, 32, 16, 16, device=META, requires_grad=True)

    def alternatives(module, inp=x):
        kernels = trace_step(module, inp, "fp32").kernels
        return [len(k.alternatives) for k in kernels if k.kind == "convolution"]

    with META:
        plain = torch.nn.Conv2d(32, 32, 3, padding=1)
        others = [
            torch.nn.Conv2d(32, 32, 3, stride=2, padding=1),
            torch.nn.Conv2d(32, 32, 1),
            torch.nn.Conv2d(32, 32, 3, padding=1, groups=4),
            torch.nn.Conv2d(32, 32, 3, padding=1, groups=32),
            torch.nn.Conv2d(32, 32, 3, padding=2, dilation=2),
            torch.nn.ConvTranspose2d(32, 32, 3, padding=1),
        ]
        conv1d, conv3d = torch.nn.Conv1d(32, 32, 3), torch.nn.Conv3d(32, 32, 3)
    assert alternatives(plain) == [1, 3]
    for module in others:
        assert alternatives(module) == [0, 0], module
    seq = torch.empty(2, 32, 16, device=META, requires_grad=True)
    vol = torch.empty(2, 32, 8, 8, 8, device=META, requires_grad=True)
    assert alternatives(conv1d, seq) == alternatives(conv3d, vol) == [0, 0]


def test_the_fits_grid_prices_winograd_as_price_does():
    """The fit's vectorized pricing takes the cheaper way at every grid point, as
    ``price`` does at one."""
    from amp_lessons.measure import published
    from amp_lessons.measure.estimate import Efficiency, price

    with META:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(16, 256, 3, padding=1),
            torch.nn.Conv2d(256, 256, 3, padding=1),
        )
    x = torch.empty(8, 16, 32, 32, device=META)
    trace = trace_step(model, x, "fp32")
    assert any(k.alternatives for k in trace.kernels)
    step = published.Step(trace, [], 8)
    gpu = GPUS["V100-SXM2-32GB"]
    seconds = published._grid_seconds(step, gpu)
    combos = published.grid()
    for i in (0, len(combos) // 3, len(combos) - 1):
        eff = Efficiency(*combos[i].tolist())
        assert float(seconds[i]) == pytest.approx(
            price(trace, gpu, "fp32", eff).seconds
        )
