"""Exactly which bytes training keeps, part by part, in fp32 and with AMP.

Notebook 06 uses this module. The bytes a forward pass keeps for backward are read
from autograd itself: ``torch.autograd.graph.saved_tensors_hooks`` is told about
every tensor an op saves, and we add up the distinct storages behind them that are
still alive when the forward ends. Nothing is estimated.

The finding this makes visible: AMP does not simply halve memory. Weights, gradients
and optimizer state stay fp32; autocast adds low-precision copies of the weights,
which backward keeps; so for a weight-heavy model at a small batch, AMP keeps MORE
bytes for backward than fp32, and only when activations dominate (large batch) does
it come close to halving them.

Not covered here: allocator rounding and fragmentation, temporaries that live only
inside one op or inside backward, CUDA context and cuBLAS workspaces (notebook 06
measures those with ``torch.cuda.max_memory_allocated``), tensors a custom
``autograd.Function`` stores as ``ctx`` attributes instead of ``save_for_backward``,
Python numbers autograd wraps into 0-dim CPU tensors (``x / 4.0`` keeps an 8-byte
float64 4.0 that saved-tensor hooks are never shown), and activation checkpointing
(``torch.utils.checkpoint`` installs saved-tensor hooks of its own).
"""

from __future__ import annotations

import weakref
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from amp_lessons.i18n import N_, _

AUTOCAST_DTYPES = (torch.float16, torch.bfloat16)

# Tensors an optimizer keeps per parameter, as multiples of the parameter's bytes,
# plus fixed bytes: Adam's "step" counter is a 0-dim float32 tensor per parameter.
OPTIMIZER_STATE = {
    "none": (0, 0),  # plain SGD: no state
    "sgd": (0, 0),
    "sgd_momentum": (1, 0),  # momentum_buffer
    "adam": (2, 4),  # exp_avg, exp_avg_sq, step
    "adamw": (2, 4),
}

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def byte_unit(n: int | float) -> tuple[str, int]:
    """The binary unit `n` bytes read best in, and its size: ``(name, bytes)``.

    The largest unit not above |n|, so a picture can put a set of counts on one axis
    in the unit of the largest: ``byte_unit(3 * 2**20) -> ('MiB', 1048576)``.
    """
    if isinstance(n, bool) or not isinstance(n, int | float) or n != n:
        raise ValueError(f"a number of bytes is needed, got {n!r}")
    power = 0
    while power < len(_UNITS) - 1 and abs(n) >= 1024 ** (power + 1):
        power += 1
    return _UNITS[power], 1024**power


def format_bytes(n: int | float) -> str:
    """A byte count in binary units, one decimal: ``format_bytes(1536) -> '1.5 KiB'``.

    Whole bytes are printed as they are (``format_bytes(512) -> '512 B'``); negative
    counts keep their sign, so a difference such as AMP minus fp32 reads naturally.
    """
    unit, size = byte_unit(n)
    if size == 1:
        return f"{n:g} B"
    return f"{n / size:.1f} {unit}"


# ---- what autograd saves -------------------------------------------------------


@dataclass(frozen=True)
class SavedStorage:
    """One distinct storage that autograd keeps alive for backward.

    `shape` and `dtype` are those of the first tensor seen saved on it (a view may be
    smaller than its storage; `nbytes` is the whole storage). `kind` is
    ``"weight_copy"`` for a storage made by casting a parameter (autocast's
    low-precision weights), else ``"activation"``.
    """

    nbytes: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    kind: str


class _Box:
    """Holds one saved tensor; a weak reference to the box tells us whether autograd
    still keeps it (a box of a discarded branch dies with that branch's graph)."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class _ParameterCasts(TorchDispatchMode):
    """Records the storages of every cast (``aten._to_copy``) of a parameter.

    Autocast casts below the Python API, so a dispatch mode is where its casts can be
    seen (torch's own autocast tests watch them the same way). The cast tensors are
    kept referenced until the forward ends so that no later tensor can reuse their
    addresses and be mistaken for one.
    """

    def __init__(self, parameter_ptrs: set[int]) -> None:
        super().__init__()
        self.parameter_ptrs = parameter_ptrs
        self.casts: list[torch.Tensor] = []
        self.cast_ptrs: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and isinstance(out, torch.Tensor):
            source = args[0]
            if _storage_ptr(source) in self.parameter_ptrs:
                self.casts.append(out)
                self.cast_ptrs.add(_storage_ptr(out))
        return out


def _storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _validate_inputs(inputs) -> tuple[tuple, torch.device]:
    if isinstance(inputs, torch.Tensor):
        return (inputs,), inputs.device
    if isinstance(inputs, tuple | list):
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        if tensors:
            return tuple(inputs), tensors[0].device
    raise ValueError(
        "inputs must be a tensor, or a tuple/list of arguments with at least one "
        f"tensor (passed as model(*inputs)); got {type(inputs).__name__}"
    )


def _validate_dtype(dtype) -> torch.dtype | None:
    """The autocast dtype, or None for a plain run (None or torch.float32)."""
    if dtype is None or dtype is torch.float32:
        return None
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"dtype must be a floating-point torch.dtype, got {dtype!r}; use "
            "torch.bfloat16 or torch.float16 for autocast, None for plain fp32"
        )
    if dtype not in AUTOCAST_DTYPES:
        raise ValueError(
            f"autocast runs in torch.float16 or torch.bfloat16, not {dtype}; "
            "use None (or torch.float32) for a run without autocast"
        )
    return dtype


def _model_state_ptrs(model: nn.Module) -> set[int]:
    """Storages of the model's own parameters and buffers: not activations."""
    state = [*model.parameters(), *model.buffers()]
    return {_storage_ptr(t) for t in state if t.device.type != "meta"}


def saved_storages(
    model: nn.Module, inputs, dtype: torch.dtype | None = None
) -> list[SavedStorage]:
    """The distinct storages one forward of ``model(inputs)`` keeps for backward.

    Parameters and buffers of `model` are left out (they exist anyway); a
    low-precision copy of a weight made by autocast is listed, as a ``"weight_copy"``.
    Runs under ``torch.amp.autocast(<inputs' device type>, dtype=dtype)`` when
    `dtype` is torch.float16 or torch.bfloat16; None or torch.float32 runs plain.

    Example:
        >>> mlp = nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(),
        ...                     nn.Linear(16, 4, bias=False))
        >>> [(s.nbytes, s.kind) for s in saved_storages(mlp, torch.randn(3, 8),
        ...                                              torch.bfloat16)]
        [(48, 'activation'), (96, 'activation'), (128, 'weight_copy')]

    The input cast to bf16 (3*8*2), ReLU's output (3*16*2, saved by ReLU and by the
    second matmul: one storage) and the bf16 copy of the second weight (16*4*2).
    The first weight's copy is not kept: the input needs no gradient, so nothing
    in backward multiplies by that weight.
    """
    return _saved_storages(model, inputs, dtype, find_weight_copies=True)


def _saved_storages(
    model: nn.Module, inputs, dtype: torch.dtype | None, find_weight_copies: bool
) -> list[SavedStorage]:
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"model must be a torch.nn.Module, got {type(model).__name__}; wrap a "
            "function in a Module to measure it"
        )
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            "autograd saves nothing under torch.inference_mode(); measure outside it"
        )
    args, device = _validate_inputs(inputs)
    autocast_dtype = _validate_dtype(dtype)
    state_ptrs = _model_state_ptrs(model)
    parameter_ptrs = {_storage_ptr(p) for p in model.parameters()}

    boxes: list[weakref.ref] = []

    def pack(t: torch.Tensor) -> _Box:
        # detach: keeping the tensor itself would tie a saved output to its own
        # grad_fn, a cycle that C++ autograd never frees (pytorch PR #153049)
        box = _Box(t.detach())
        boxes.append(weakref.ref(box))
        return box

    def unpack(box: _Box) -> torch.Tensor:
        return box.tensor

    # the dispatch mode costs a one-time import of torch._dynamo (seconds on a
    # laptop), so activation_bytes, which needs no kinds, runs without it
    casts = _ParameterCasts(parameter_ptrs)
    watch = casts if find_weight_copies else nullcontext()
    ctx = nullcontext()
    if autocast_dtype is not None:
        ctx = torch.amp.autocast(device.type, dtype=autocast_dtype)
    with torch.enable_grad(), watch, ctx:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = model(*args)
    # `out` holds the graph: every box still alive is kept for backward
    found: dict[int, SavedStorage] = {}
    for ref in boxes:
        box = ref()
        if box is None:
            continue  # saved by a branch whose result was thrown away
        t = box.tensor
        ptr = _storage_ptr(t)
        if ptr in state_ptrs or ptr in found:
            continue
        kind = "weight_copy" if ptr in casts.cast_ptrs else "activation"
        found[ptr] = SavedStorage(
            t.untyped_storage().nbytes(), tuple(t.shape), t.dtype, kind
        )
    del out
    return list(found.values())


def activation_bytes(model: nn.Module, inputs, dtype: torch.dtype | None = None) -> int:
    """Bytes of the distinct storages autograd keeps alive for backward after one
    forward of ``model(inputs)`` (``model(*inputs)`` for a tuple), the model's own
    parameters and buffers excluded, under autocast to `dtype` on the inputs' device
    when `dtype` is given. Autocast's low-precision weight copies ARE counted: they
    are new tensors, kept for backward. Exact on CPU and CUDA.

    Example: ``nn.Linear(8, 4, bias=False)`` on a (3, 8) float32 input keeps only the
    input for the weight's gradient, 3*8*4 = 96 bytes; under bf16 autocast it keeps
    the bf16 input, 48 bytes (and with an input that requires grad, also the bf16
    weight copy, 4*8*2 = 64 bytes more).
    """
    saved = _saved_storages(model, inputs, dtype, find_weight_copies=False)
    return sum(s.nbytes for s in saved)


# ---- the whole budget ----------------------------------------------------------


def optimizer_state_bytes(model: nn.Module, optimizer: str | None = "adam") -> int:
    """Bytes of the state `optimizer` keeps for `model` once it has stepped.

    Adam/AdamW: two moments shaped like each trainable parameter (in its dtype, so
    fp32 with AMP) plus a 4-byte float32 step counter each; SGD with momentum: one
    buffer; plain SGD: none. Matches ``torch.optim``'s state after one step.

    Example: ``optimizer_state_bytes(nn.Linear(1000, 1000))`` -> 8_008_008:
    2 * 4 bytes * 1_001_000 parameters + 4 bytes * 2 step counters.
    """
    key = "none" if optimizer is None else optimizer
    if key not in OPTIMIZER_STATE:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; pass one of "
            f"{', '.join(map(repr, OPTIMIZER_STATE))} or None"
        )
    per_param, fixed = OPTIMIZER_STATE[key]
    trainable = [p for p in model.parameters() if p.requires_grad]
    return sum(per_param * p.nbytes + fixed for p in trainable)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes training holds, by part. `dtype` is the autocast dtype (None: fp32).

    `activations` and `weight_copies` together are ``activation_bytes``.
    `total` is the sum of the parts: roughly what a training step holds between
    forward and backward when the previous step's gradients are still allocated
    (no ``zero_grad(set_to_none=True)``); the allocator's peak adds temporaries and
    rounding.
    """

    dtype: torch.dtype | None
    optimizer: str | None
    weights: int
    buffers: int
    gradients: int
    optimizer_state: int
    activations: int
    weight_copies: int

    PARTS = (
        "weights",
        "buffers",
        "gradients",
        "optimizer_state",
        "activations",
        "weight_copies",
    )

    @property
    def total(self) -> int:
        return sum(getattr(self, part) for part in self.PARTS)

    def as_dict(self) -> dict[str, int]:
        """The parts and the total, in bytes."""
        return {
            **{part: getattr(self, part) for part in self.PARTS},
            "total": self.total,
        }

    def __str__(self) -> str:
        name = "fp32" if self.dtype is None else str(self.dtype).replace("torch.", "")
        lines = [f"{name} training, optimizer {self.optimizer}:"]
        lines += [f"  {k:<16}{format_bytes(v):>12}" for k, v in self.as_dict().items()]
        return "\n".join(lines)


def memory_breakdown(
    model: nn.Module,
    inputs,
    dtype: torch.dtype | None = None,
    optimizer: str | None = "adam",
) -> MemoryBreakdown:
    """What training `model` on `inputs` holds, part by part, in fp32 (`dtype` None)
    or with AMP (`dtype` torch.float16 / torch.bfloat16).

    Weights, buffers, gradients (the parameters' dtype: fp32 even with AMP) and
    optimizer state are counted from the parameters; activations and weight copies
    are measured by running one forward (see ``saved_storages``). A weight copy is a
    saved storage that came out of an ``aten._to_copy`` of a parameter, recorded as
    the forward runs: exact, not guessed from shapes.

    Example (CPU): a weight-heavy MLP, three ``nn.Linear(64, 64, bias=False)`` with
    ReLUs, batch 2:
        >>> fp32 = memory_breakdown(mlp, torch.randn(2, 64))
        >>> amp = memory_breakdown(mlp, torch.randn(2, 64), torch.bfloat16)
        >>> fp32.activations, amp.activations, amp.weight_copies
        (1536, 768, 16384)
    AMP keeps 17_152 bytes for backward against fp32's 1_536; at batch 2048 it is
    802_816 against 1_572_864, about half.
    """
    optimizer_state = optimizer_state_bytes(model, optimizer)  # checks the name
    saved = saved_storages(model, inputs, dtype)
    params = list(model.parameters())
    return MemoryBreakdown(
        dtype=_validate_dtype(dtype),
        optimizer=optimizer,
        weights=sum(p.nbytes for p in params),
        buffers=sum(b.nbytes for b in model.buffers()),
        gradients=sum(p.nbytes for p in params if p.requires_grad),
        optimizer_state=optimizer_state,
        activations=sum(s.nbytes for s in saved if s.kind == "activation"),
        weight_copies=sum(s.nbytes for s in saved if s.kind == "weight_copy"),
    )


# what a table calls each part and the total, in the reader's language (the names
# are code: attributes of MemoryBreakdown)
PART_LABELS = {
    "weights": N_("weights"),
    "buffers": N_("buffers"),
    "gradients": N_("gradients"),
    "optimizer_state": N_("optimizer state"),
    "activations": N_("activations"),
    "weight_copies": N_("weight copies"),
    "total": N_("total"),
}


# what a table calls each kind of saved storage (`saved_storages`' .kind is code)
SAVED_KIND_LABELS = {
    "activation": N_("activation"),
    "weight_copy": N_("weight copy"),
}


def format_breakdowns(breakdowns: dict[int, dict[str, MemoryBreakdown]]) -> str:
    """``{batch: compare_precisions(...)}`` as a table: a row per batch and
    precision, a column per part and the total, in binary units; its words in the
    reader's language (``amp_lessons.set_language``).

    Example (lesson 06): a row ``batch    2 bf16  48.8 KiB ... 211.8 KiB``.
    """
    labels = [_(label) for label in PART_LABELS.values()]
    widths = [max(12, len(label)) for label in labels]
    first = [
        f"{_('batch')} {batch:>4} {name}"
        for batch in breakdowns
        for name in breakdowns[batch]
    ]
    lead = max(len(text) for text in first)
    rows = [
        " " * lead + "".join(f"  {t:>{w}}" for t, w in zip(labels, widths, strict=True))
    ]
    cells = (
        [format_bytes(m.as_dict()[part]) for part in PART_LABELS]
        for by_name in breakdowns.values()
        for m in by_name.values()
    )
    for text, row in zip(first, cells, strict=True):
        rows.append(
            f"{text:<{lead}}"
            + "".join(f"  {c:>{w}}" for c, w in zip(row, widths, strict=True))
        )
    return "\n".join(rows)


def compare_precisions(
    model: nn.Module,
    inputs,
    dtypes: tuple[torch.dtype | None, ...] = (None, torch.bfloat16),
    optimizer: str | None = "adam",
) -> dict[str, MemoryBreakdown]:
    """``memory_breakdown`` for each dtype, keyed "fp32", "bf16" or "fp16"."""
    names: dict[torch.dtype | None, str] = {
        None: "fp32",
        torch.float32: "fp32",
        torch.bfloat16: "bf16",
        torch.float16: "fp16",
    }
    out = {}
    for dtype in dtypes:
        if dtype not in names:
            _validate_dtype(dtype)  # raises the explanatory error
        out[names[dtype]] = memory_breakdown(model, inputs, dtype, optimizer)
    return out
