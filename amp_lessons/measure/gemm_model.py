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
