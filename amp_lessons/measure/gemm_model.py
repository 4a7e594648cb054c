"""How much of a tensor core's peak one GEMM can reach, from its shape alone.

A GPU computes C = A @ B (M x K times K x N) by cutting C into tiles, one thread
block each; the blocks run in *waves* of one block per SM. Two losses follow from
the shape alone (NVIDIA, "Matrix Multiplication Background User's Guide",
docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication,
sections "Tile Quantization" and "Wave Quantization"):

* **tile quantization**: a tile at C's edge computes its whole tile whether or not
  the matrix fills it (M = 257 with 256-row tiles costs two rows of tiles);
* **wave quantization**: the last wave runs with SMs idle (the guide's example: an
  A100's 108 SMs take 108 tiles of 256 x 128 at once, so 109 tiles take two waves).

The guide lists the tile sizes cuBLAS picks from, from 256x128 down to 64x64 (six
of them are used here: 256x128, 128x256, 128x128, 128x64, 64x128, 64x64), and says
that larger tiles reuse more data, so use less
bandwidth per FLOP and run more efficiently, while smaller tiles make more blocks
for a small problem (CUTLASS says the same of its convolutions: "Larger tiles achieve
greater reuse ... but launch fewer CTAs"). ``gemm_efficiency`` picks the tile that
finishes first, as cuBLAS's heuristics aim to, with each tile's own efficiency set
by its data reuse (below). A GEMM with fewer tiles than SMs and a long K is taken
to split K across blocks (split-K: "Parallelized Reductions" in NVIDIA/cutlass
media/docs/efficient_gemm.md), as a weight gradient over many tokens allows.

Habitat (Yu et al., "Habitat: A Runtime-Based Computational Performance Predictor
for Deep Learning Training", USENIX ATC 2021) scales kernels between GPUs with the
same wave model; here it is applied to the traced shapes directly.

Example:
    >>> round(gemm_efficiency((1, 4096, 4096, 4096), sms=108), 3)
    0.948
    >>> gemm_efficiency((1, 8, 4096, 4096), sms=108) < 0.2  # a skinny GEMM
    True
"""

from __future__ import annotations

import math
from functools import cache

# (rows, columns) of C per thread block, as the guide lists them
TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
# A tile of tm x tn reads tm + tn values of A and B per step of K and does tm * tn
# multiply-adds: its reuse is tm * tn / (tm + tn). The guide's largest tiles all run
# at full speed; a tile reusing less than a 128 x 128 tile (reuse 64) is taken to
# slow in proportion, its operand traffic no longer hidden behind the math.
FULL_REUSE = 128 * 128 / (128 + 128)
SPLIT_K_MIN = 512  # the shortest K slice a split-K block takes


def tile_efficiency(tm: int, tn: int) -> float:
    """A tile's speed relative to the largest tiles': 1 down to 128 x 128, then in
    proportion to its data reuse (``tile_efficiency(64, 64)`` -> 0.5)."""
    return min(1.0, tm * tn / (tm + tn) / FULL_REUSE)


@cache
def gemm_efficiency(gemm: tuple[int, int, int, int], sms: int) -> float:
    """The fraction of a large GEMM's speed that a ``(batch, m, n, k)`` GEMM reaches
    on a GPU of ``sms`` SMs: its useful work over the time of the tile that
    finishes first (whole tiles, whole waves, each tile at its own efficiency)."""
    batch, m, n, k = gemm
    if min(gemm) <= 0 or sms <= 0:
        return 1.0
    ideal = batch * m * n / sms  # C's elements per SM with no quantization
    best = math.inf
    for tm, tn in TILES:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        # too few tiles to fill the GPU: split K across more blocks
        splits = max(1, min(sms // tiles, k // SPLIT_K_MIN)) if tiles < sms else 1
        waves = math.ceil(tiles * splits / sms)
        best = min(best, waves * tm * tn / splits / tile_efficiency(tm, tn))
    return min(1.0, ideal / best)


def conv_gemms(
    x_shape, w_shape, out_shape, groups: int, transposed: bool, mask=(True, True, True)
) -> tuple[tuple[int, int, int, int], ...]:
    """A convolution as implicit GEMMs: forward GEMM_M = N * P * Q (output pixels),
    GEMM_N = K (output channels), GEMM_K = C * R * S (input channels times the
    filter's size), as NVIDIA/cutlass media/docs/implicit_gemm_convolution.md maps
    it; the input's gradient and the weight's are the same products with the roles
    turned (M = N * H * W, N = C, K = K * R * S; and M = K, N = C * R * S,
    K = N * P * Q). ``mask``: which of forward,
    input gradient, weight gradient. Grouped convolutions give none: cuDNN runs
    them with kernels of their own, priced without the tile model."""
    if groups != 1:
        return ()
    if transposed:  # a transposed convolution is the other one's input gradient
        x_shape, out_shape = out_shape, x_shape
        c_out, c_in = w_shape[0], w_shape[1]
    else:
        c_out, c_in = w_shape[0], w_shape[1]
    n = x_shape[0]
    window = math.prod(w_shape[2:])
    out_pixels = math.prod(out_shape[2:])
    in_pixels = math.prod(x_shape[2:])
    forward, dgrad, wgrad = mask
    gemms = []
    if forward:
        gemms.append((1, n * out_pixels, c_out, c_in * window))
    if dgrad:
        gemms.append((1, n * in_pixels, c_in, c_out * window))
    if wgrad:
        gemms.append((1, c_out, c_in * window, n * out_pixels))
    return tuple(gemms)


# ---- Winograd: the other way cuDNN runs a 3x3 convolution -----------------------
# Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016,
# arXiv 1509.09308): F(m x m, r x r) computes an m x m output tile of an r x r filter
# from an (m + r - 1)^2 input tile with (m + r - 1)^2 multiplications instead of
# m^2 r^2; F(4x4, 3x3) takes 36 for 16 outputs instead of 144 (4x fewer). Over a
# batch it is (m + r - 1)^2 GEMMs (one per point of the transformed tile) of tiles x
# input channels by input channels x output channels, between transforms of the
# input, the filter and the output, which cuDNN's WINOGRAD_NONFUSED algorithms run
# as kernels of their own (their transformed tensors written to a workspace), so
# each transform is priced by the bytes it reads and writes. cuDNN has it for the
# forward pass, the data gradient and the filter gradient, on CUDA cores and on
# tensor cores (cuDNN developer guide, Legacy API, "Tensor Core operations ...
# Supported Algorithms": *_WINOGRAD_NONFUSED for cudnnConvolutionForward,
# BackwardData and BackwardFilter); with cudnn.benchmark the fastest is picked, so
# the estimate prices a convolution as the cheaper of the two (``estimate.price``).
WINOGRAD_M = 4  # output tile side: F(4x4, 3x3)
WINOGRAD_R = 3  # filter side
WINOGRAD_ALPHA = WINOGRAD_M + WINOGRAD_R - 1  # transformed tile side: 6


def winograd_eligible(w_shape, stride, dilation, groups: int, transposed: bool) -> bool:
    """Whether cuDNN's Winograd can run this convolution: 2D, a 3 x 3 filter,
    stride 1, no dilation, not grouped (grouped and depthwise, strided, 1 x 1, 1D
    and 3D convolutions run without it)."""
    return (
        len(w_shape) == 4
        and tuple(w_shape[2:]) == (WINOGRAD_R, WINOGRAD_R)
        and all(s == 1 for s in stride)
        and all(d == 1 for d in dilation)
        and groups == 1
        and not transposed
    )


def winograd_phases(a_shape, b_shape, c_in: int, c_out: int, wgrad: bool = False):
    """The kernels of one Winograd pass, as ``(name, flops, elements moved, gemms)``
    each (bytes = elements x the element size). A forward pass (and, turned round,
    a data gradient) maps ``a_shape`` (N, c_in, H, W) to ``b_shape`` (N, c_out, P,
    Q): transform the input, transform the filter, 36 GEMMs of tiles x c_in by c_in
    x c_out, transform the output. A filter gradient (``wgrad``) transforms both
    activations, runs 36 GEMMs of c_in x tiles by tiles x c_out and transforms the
    36 x c_in x c_out products back to 3 x 3 filters.

    Example: a 3x3 convolution of 64 to 64 channels over 1 x 64 x 8 x 8 has 4 tiles
    of 4 x 4, so 2 * 36 * 4 * 64 * 64 FLOPs: 4x fewer than the direct 2 * 64 * 9 *
    64 * 64.
        >>> [(n, f) for n, f, _, _ in winograd_phases((1, 64, 8, 8), (1, 64, 8, 8),
        ...                                          64, 64)][2]
        ('winograd_gemm', 1179648)
    """
    a2 = WINOGRAD_ALPHA**2
    n, p, q = b_shape[0], b_shape[2], b_shape[3]
    tiles = n * math.ceil(p / WINOGRAD_M) * math.ceil(q / WINOGRAD_M)
    a_numel, b_numel = math.prod(a_shape), math.prod(b_shape)
    t_in, t_out, t_filter = a2 * tiles * c_in, a2 * tiles * c_out, a2 * c_in * c_out
    flops = 2 * a2 * tiles * c_in * c_out
    filter_numel = WINOGRAD_R**2 * c_in * c_out
    if wgrad:
        return (
            ("winograd_input_transform", 0, a_numel + t_in, ()),
            ("winograd_grad_transform", 0, b_numel + t_out, ()),
            (
                "winograd_gemm",
                flops,
                t_in + t_out + t_filter,
                ((a2, c_in, c_out, tiles),),
            ),
            ("winograd_filter_transform", 0, t_filter + filter_numel, ()),
        )
    return (
        ("winograd_input_transform", 0, a_numel + t_in, ()),
        ("winograd_filter_transform", 0, filter_numel + t_filter, ()),
        ("winograd_gemm", flops, t_in + t_filter + t_out, ((a2, tiles, c_out, c_in),)),
        ("winograd_output_transform", 0, t_out + b_numel, ()),
    )
