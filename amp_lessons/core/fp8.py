"""fp8 training from scratch: one scale per tensor, a saturating cast, a Float8Linear.

Lesson 03 scaled the whole loss by one number so that fp16 gradients would not
underflow. fp8 is too narrow for one number to serve a whole network: e4m3 covers
2**-9 to 448, about 18 binades. So every tensor that enters a matmul gets its own
scale, ``max_of_format / amax(tensor)``, is multiplied by it, cast to fp8 (saturating
at the format's max), multiplied in fp8, and the product is divided by both scales.
Forward operands (input, weight) use e4m3; the output gradient uses e5m2 (more range,
less precision), as in Micikevicius et al. 2022, "FP8 Formats for Deep Learning".

The numerics are those of torchao's ``convert_to_float8_training`` with
``Float8LinearConfig(emulate=True)`` (torchao 0.18), bit for bit; tests/test_fp8.py
compares outputs and every gradient with torchao. This module does not import torchao.
On a GPU with fp8 tensor cores (compute capability 8.9+) the same scaled matmul is one
``torch._scaled_mm`` kernel; here it is emulated in float32.

Not covered here: delayed scaling and the rowwise demo (``fp8_scaling``), fp8
all-gather under FSDP, fp8 attention, MXFP8 block scales.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "E4M3",
    "E5M2",
    "EPS",
    "ROWWISE",
    "TENSORWISE",
    "Float8Linear",
    "Fp8Tensor",
    "ModuleFilter",
    "Recipe",
    "amax",
    "cast_to_fp8",
    "filter_first_and_last",
    "scale_from_amax",
    "scaled_mm",
    "to_float8",
    "to_fp8",
]

E4M3 = torch.float8_e4m3fn  # weights and activations: max 448, no inf
E5M2 = torch.float8_e5m2  # gradients: max 57344, has inf
EPS = 1e-12  # torchao's floor under amax: an all-zero tensor still gets a finite scale


# ---- the arithmetic: amax -> scale -> saturating cast -> scaled matmul ---------------


def amax(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """The largest magnitude in ``x``: one number, or one per slice along ``dim``.

    Example:
        >>> amax(torch.tensor([[1.0, -3.0], [0.5, 2.0]]))
        tensor(3.)
        >>> amax(torch.tensor([[1.0, -3.0], [0.5, 2.0]]), dim=-1)  # one per row
        tensor([[3.],
                [2.]])
    """
    if dim is None:
        return torch.max(torch.abs(x))
    return torch.amax(torch.abs(x), dim=dim, keepdim=True)


def scale_from_amax(
    amax: torch.Tensor, dtype: torch.dtype = E4M3, power_of_2: bool = False
) -> torch.Tensor:
    """The float32 scale that maps ``amax`` onto the format's max: ``max / amax``.

    Computed in float64 and rounded to float32 (what torchao does, so that eager and
    compiled code agree), with amax floored at ``EPS``. ``power_of_2=True`` rounds the
    scale down to a power of two, so multiplying by it is exact.

    Example:
        >>> scale_from_amax(torch.tensor(3.5))  # 448 / 3.5
        tensor(128.)
        >>> scale_from_amax(torch.tensor(3.5), E5M2)  # 57344 / 3.5
        tensor(16384.)
        >>> scale_from_amax(torch.tensor(0.0)).item()  # 448 / 1e-12 in float32, not inf
        447999985582080.0
        >>> scale_from_amax(torch.tensor(3.0), power_of_2=True)  # 149.3 -> 128
        tensor(128.)
    """
    _check_fp8(dtype)
    scale = torch.finfo(dtype).max / torch.clamp(amax.to(torch.float64), min=EPS)
    scale = scale.to(torch.float32)
    if power_of_2:
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    return scale


def cast_to_fp8(
    x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = E4M3
) -> torch.Tensor:
    """``x * scale`` in float32, clamped to the format's +-max, cast to ``dtype``.

    The clamp matters whenever the scale is not this tensor's own (delayed scaling)
    or a value rounds past max: e5m2 would give inf, and e4m3fn gave nan in torch
    until pytorch PR #178817 (April 2026; it saturates since). The clamp makes every
    version agree; like torchao's, it also sends +-inf to +-448 and keeps nan.

    Example:
        >>> x = torch.tensor([1.0, 3.5, 100.0])
        >>> cast_to_fp8(x, torch.tensor(128.0)).float()  # 100 * 128 is past 448
        tensor([128., 448., 448.])
        >>> cast_to_fp8(x, torch.tensor(128.0), E5M2).float()  # e5m2 has room
        tensor([  128.,   448., 12288.])
    """
    _check_fp8(dtype)
    big = torch.finfo(dtype).max
    return (x.to(torch.float32) * scale).clamp(min=-big, max=big).to(dtype)


@dataclass(frozen=True)
class Fp8Tensor:
    """fp8 ``data`` with the ``scale`` it was multiplied by, and the dtype it came from.

    ``data / scale`` is the value it stands for; ``dequantize()`` gives it back in
    ``hp_dtype`` (the "high precision" dtype: float32 or bfloat16).
    """

    data: torch.Tensor
    scale: torch.Tensor
    hp_dtype: torch.dtype

    def dequantize(self) -> torch.Tensor:
        return self.data.to(self.hp_dtype) / self.scale

    def t(self) -> Fp8Tensor:
        """The transpose; a per-row scale becomes a per-column one."""
        return Fp8Tensor(self.data.t(), self.scale.t(), self.hp_dtype)


def to_fp8(
    x: torch.Tensor,
    dtype: torch.dtype = E4M3,
    dim: int | None = None,
    power_of_2: bool = False,
) -> Fp8Tensor:
    """Scale ``x`` by its own amax (one scale, or one per slice along ``dim``) and cast.

    Example:
        >>> q = to_fp8(torch.tensor([0.1, -0.3, 1.75]))  # amax 1.75 -> scale 256
        >>> q.scale, q.data.float()
        (tensor(256.), tensor([ 26., -80., 448.]))
        >>> q.dequantize()  # 76.8 -> 80: e4m3 keeps 3 mantissa bits
        tensor([ 0.1016, -0.3125,  1.7500])
    """
    scale = scale_from_amax(amax(x, dim), dtype, power_of_2)
    return Fp8Tensor(cast_to_fp8(x, scale, dtype), scale, x.dtype)


def scaled_mm(a: Fp8Tensor, b: Fp8Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``a @ b`` from fp8 operands: each divided by its scale, one float32 matmul,
    rounded to ``out_dtype``.

    The emulation torchao runs with ``emulate=True``. An Ada or Hopper GPU (compute
    capability 8.9+) does the same in one ``torch._scaled_mm`` call (fp8 inputs,
    float32 accumulation, both inverse scales applied to the result). Autocast is
    switched off inside: the matmul stays float32.

    Example:
        >>> a = to_fp8(torch.tensor([[1.0, 2.0]]))  # scale 224: 224, 448, exact
        >>> b = to_fp8(torch.tensor([[3.0], [4.0]]))  # scale 112: 336 is stored as 320
        >>> scaled_mm(a, b, torch.float32)  # 1 * 320/112 + 2 * 4, not 11
        tensor([[10.8571]])
    """
    with torch.autocast(a.data.device.type, enabled=False):
        product = torch.mm(a.data.float() / a.scale, b.data.float() / b.scale)
    return product.to(out_dtype)


def _check_fp8(dtype: torch.dtype) -> None:
    if dtype not in (E4M3, E5M2):
        raise ValueError(
            f"dtype must be torch.float8_e4m3fn (E4M3) or "
            f"torch.float8_e5m2 (E5M2), got {dtype}"
        )


# ---- recipes: which dtype and which scale granularity each operand gets --------------


@dataclass(frozen=True)
class Recipe:
    """How a Float8Linear scales its operands.

    ``rowwise=False``: one scale per tensor (torchao's "tensorwise", the default).
    ``rowwise=True``: one scale per row of the left operand and per column of the
    right one, always along the dimension the matmul sums over, so the scales can be
    pulled out of each dot product (torchao's "rowwise" recipe, which also uses e4m3
    for gradients and power-of-two scales).
    """

    rowwise: bool = False
    grad_dtype: torch.dtype = E5M2
    power_of_2: bool = False

    def __post_init__(self) -> None:
        _check_fp8(self.grad_dtype)


TENSORWISE = Recipe()
ROWWISE = Recipe(rowwise=True, grad_dtype=E4M3, power_of_2=True)


def _matmul_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a matmul of ``x`` returns: autocast's where it is on, else x's own."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type) and x.dtype != torch.float64:
        return torch.get_autocast_dtype(device_type)
    return x.dtype


def _cast(
    x: torch.Tensor, dtype: torch.dtype, summed_dim: int, recipe: Recipe
) -> Fp8Tensor:
    """``x`` cast to fp8 as the recipe says; a rowwise scale spans ``summed_dim``,
    the dimension the matmul sums over."""
    return to_fp8(x, dtype, summed_dim if recipe.rowwise else None, recipe.power_of_2)


def _fp8_mm(
    a: torch.Tensor,
    a_dtype: torch.dtype,
    b: torch.Tensor,
    b_dtype: torch.dtype,
    recipe: Recipe,
) -> torch.Tensor:
    """``a @ b`` (2-D) with both operands cast to fp8 as the recipe says."""
    a8, b8 = _cast(a, a_dtype, -1, recipe), _cast(b, b_dtype, 0, recipe)
    return scaled_mm(a8, b8, _matmul_dtype(a))


class _Float8Matmul(torch.autograd.Function):
    """``x @ weight.t()`` with fp8 operands in all three matmuls of a linear layer.

    forward:  y  = fp8(x, e4m3)  @ fp8(w.t(), e4m3)
    backward: dx = fp8(dy, e5m2) @ fp8(w, e4m3)
              dw = fp8(dy.t(), e5m2) @ fp8(x, e4m3)
    Saved for backward: x and w in high precision (as torchao does); they are cast
    again there, which gives the same fp8 bits.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, recipe: Recipe):
        ctx.save_for_backward(x, weight)
        ctx.recipe = recipe
        x2 = x.reshape(-1, x.shape[-1])
        y = _fp8_mm(x2, E4M3, weight.t(), E4M3, recipe)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        x, weight = ctx.saved_tensors
        r = ctx.recipe
        g = grad_y.reshape(-1, grad_y.shape[-1])
        # torchao casts w.t() (what its forward saved) and transposes the fp8 tensor
        # back: the bits of casting w, but for in_features == 1 another memory layout
        # (strides (1, out) instead of (1, 1)), so BLAS sums in another order.
        w8 = _cast(weight.t(), E4M3, -1, r).t()
        grad_x = scaled_mm(_cast(g, r.grad_dtype, -1, r), w8, _matmul_dtype(g))
        grad_w = _fp8_mm(g.t(), r.grad_dtype, x.reshape(-1, x.shape[-1]), E4M3, r)
        # autograd casts each gradient to its input's dtype (bf16 -> fp32 weights)
        return grad_x.reshape(*grad_y.shape[:-1], grad_x.shape[-1]), grad_w, None


class Float8Linear(nn.Linear):
    """An ``nn.Linear`` whose three matmuls run in (emulated) fp8 (``_Float8Matmul``).

    Parameters stay in their own dtype (the master weights); only the matmul operands
    are cast, on every call. The bias is added after the matmul, in the output dtype.

    Example:
        >>> torch.manual_seed(0) and None
        >>> layer = Float8Linear.from_linear(nn.Linear(4, 2))
        >>> layer(torch.ones(3, 4)).shape
        torch.Size([3, 2])
    """

    def __init__(self, *args, recipe: Recipe = TENSORWISE, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.recipe = recipe

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, recipe: Recipe = TENSORWISE
    ) -> Float8Linear:
        """A Float8Linear sharing ``linear``'s weight and bias Parameters (an optimizer
        built on the old layer still updates the new one)."""
        with torch.device("meta"):  # no init: no memory, no draw from the RNG
            new = cls(linear.in_features, linear.out_features, False, recipe=recipe)
        new.weight, new.bias = linear.weight, linear.bias
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torchao casts the input to the *CUDA* autocast dtype only; under CPU
        # autocast the input keeps its dtype and only the matmul output is bf16.
        if torch.is_autocast_enabled("cuda"):
            x = x.to(torch.get_autocast_dtype("cuda"))
        y = _Float8Matmul.apply(x, self.weight, self.recipe)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    def extra_repr(self) -> str:
        kind = "rowwise" if self.recipe.rowwise else "tensorwise"
        grads = "e4m3" if self.recipe.grad_dtype is E4M3 else "e5m2"
        return f"{super().extra_repr()}, fp8={kind}, grads={grads}"


ModuleFilter = Callable[[nn.Module, str], bool]


def to_float8(
    model: nn.Module,
    module_filter: ModuleFilter | None = None,
    recipe: Recipe = TENSORWISE,
) -> nn.Module:
    """Swap every ``nn.Linear`` in ``model`` for a ``Float8Linear``, in place.

    ``module_filter(module, fqn)`` (fqn: the dotted name, e.g. ``"blocks.0.mlp.0"``)
    returns False to keep a layer as it is: the same signature as torchao's
    ``module_filter_fn``. Children are visited before parents, as torchao does.
    Returns ``model``, or the new layer when ``model`` itself is a Linear.

    Example:
        >>> model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        >>> model = to_float8(model, module_filter=lambda m, fqn: fqn != "2")
        >>> [type(m).__name__ for m in model]
        ['Float8Linear', 'ReLU', 'Linear']
    """

    def wanted(module: nn.Module, fqn: str) -> bool:
        return (
            isinstance(module, nn.Linear)
            and not isinstance(module, Float8Linear)
            and (module_filter is None or module_filter(module, fqn))
        )

    if wanted(model, ""):
        if any(True for _ in model.children()):
            raise ValueError(f"cannot convert a Linear that has children: {model}")
        return Float8Linear.from_linear(model, recipe)

    def visit(module: nn.Module, fqn: str) -> None:
        for name, child in module.named_children():
            child_fqn = f"{fqn}.{name}" if fqn else name
            visit(child, child_fqn)
            if wanted(child, child_fqn):
                setattr(module, name, Float8Linear.from_linear(child, recipe))

    visit(model, "")
    return model


def filter_first_and_last(model: nn.Module) -> ModuleFilter:
    """A ``module_filter`` that keeps the first and last Linear of ``model`` (in
    ``named_modules`` order) and any Linear whose sizes are not multiples of 16 in
    high precision: Hugging Face Accelerate's rule for torchao fp8 (the ends of a
    network are the most sensitive; fp8 tensor cores need multiples of 16).

    Example:
        >>> sizes = [(16, 32), (32, 32), (32, 8)]
        >>> model = nn.Sequential(*(nn.Linear(n_in, n_out) for n_in, n_out in sizes))
        >>> keep = filter_first_and_last(model)
        >>> [keep(m, name) for name, m in model.named_children()]
        [False, True, False]
    """
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    ends = {names[0], names[-1]} if names else set()

    def module_filter(module: nn.Module, fqn: str) -> bool:
        if isinstance(module, nn.Linear) and (
            module.in_features % 16 or module.out_features % 16
        ):
            return False
        return fqn not in ends

    return module_filter
