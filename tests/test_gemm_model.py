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
