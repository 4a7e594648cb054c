"""The optimizer's step and gradient clipping, traced as torch runs them.

The step after backward costs a pass over every parameter, and how many passes and
kernels depends on the implementation: ``torch.optim.AdamW(fused=True)`` runs one
kernel over all of them, the default on CUDA (``foreach``) one kernel per math op
per chunk of tensors (76 bytes a parameter for Adam), and a Python loop a
kernel per op per parameter. ``clip_grad_norm_`` adds a norm and a scaling pass.
Here each is traced on the meta device through torch's own code, so the kernels
are the ones that implementation launches. (torch refuses its foreach and fused
paths on meta tensors; ``_meta_allowed`` lets them run there while tracing.)

Example:
    >>> params = [torch.empty(1024, 1024, device="meta")]
    >>> kernels = optimizer_kernels(params, "adam", "foreach")
    >>> sum(k.bytes for k in kernels) // params[0].numel()
    76
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from unittest import mock

import torch
import torch.optim.optimizer as optim_module
import torch.utils._foreach_utils as foreach_utils

from amp_lessons.measure.kernels import Kernel, KernelRecorder

IMPLEMENTATIONS = ("fused", "foreach", "loop")
_FLAGS = {
    "fused": {"fused": True},
    "foreach": {"foreach": True},
    "loop": {"foreach": False},
}


@contextmanager
def _meta_allowed():
    """torch's foreach and fused optimizer paths (and clipping's) accept meta
    tensors while this is on: their device lists get "meta" added."""
    with ExitStack() as stack:
        for module, name in (
            (foreach_utils, "_get_foreach_kernels_supported_devices"),
            (optim_module, "_get_foreach_kernels_supported_devices"),
            (optim_module, "_get_fused_kernels_supported_devices"),
        ):
            devices = getattr(module, name)()
            stack.enter_context(
                mock.patch.object(module, name, lambda d=devices: [*d, "meta"])
            )
        yield


def _torch_optimizer(name: str, params, implementation: str):
    flags = _FLAGS[implementation]
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, **flags)
    if name in ("sgd", "sgd_momentum"):
        momentum = 0.9 if name == "sgd_momentum" else 0.0
        return torch.optim.SGD(params, lr=1e-3, momentum=momentum, **flags)
    raise ValueError(
        f"optimizer {name!r} has no torch.optim implementation to trace: "
        f"price it with implementation='fused' (apex's fused kernel)"
    )


def _leaves(params) -> list[torch.Tensor]:
    # fresh meta tensors of the same shapes, with gradients: the model is untouched
    out = []
    for p in params:
        t = torch.empty(p.shape, device="meta", requires_grad=True)
        t.grad = torch.empty(p.shape, device="meta")
        out.append(t)
    return out


def lamb_loop_kernels(params) -> list[Kernel]:
    """LAMB as a Python loop over the parameters calling a TorchScript function per
    parameter (Transformer-XL's ``jitlamb``: NVIDIA/DeepLearningExamples,
    PyTorch/LanguageModeling/Transformer-XL/pytorch/lamb.py, ``JITLamb.step`` and
    ``lamb_kernel``). Per parameter the function runs, in order: the two moments and
    the Adam direction with weight decay (elementwise), the parameter's norm (a
    reduction), its clamp, the direction's norm (a reduction), then the trust
    ratio and the update of the parameter (elementwise). TorchScript's fuser merges
    each run of elementwise ops between reductions into one kernel, so a parameter
    costs 5 launches: 3 elementwise kernels and 2 norms. Bytes, fp32: the first
    reads p, g, m, v and writes m, v and the direction (7 x 4 B a value); each norm
    reads its tensor once; the clamp touches one number; the update reads p and the
    direction and writes p (3 x 4 B).

    Example: three parameters cost 15 launches.
        >>> p = [torch.empty(8, device="meta")] * 3
        >>> len(lamb_loop_kernels(p)), sum(k.bytes for k in lamb_loop_kernels(p))
        (15, 1176)
    """
    kernels = []
    for p in params:
        n = p.numel() * 4
        kernels += [
            Kernel("lamb_moments", "optimizer", 0, 7 * n),
            Kernel("lamb_weight_norm", "optimizer", 0, n),
            Kernel("lamb_clamp", "optimizer", 0, 8),
            Kernel("lamb_update_norm", "optimizer", 0, n),
            Kernel("lamb_apply", "optimizer", 0, 3 * n),
        ]
    return kernels


def optimizer_kernels(params, name: str, implementation: str) -> list[Kernel]:
    """The kernels of one optimizer step (``adam``, ``sgd``, ``sgd_momentum``) as
    ``implementation`` runs it; the state exists already (a step in steady state).
    ``lamb`` has a ``loop`` only, Transformer-XL's (``lamb_loop_kernels``)."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"unknown implementation {implementation!r}; choose one of: "
            f"{', '.join(IMPLEMENTATIONS)}"
        )
    if name == "lamb" and implementation == "loop":
        return lamb_loop_kernels(params)
    leaves = _leaves(params)
    with _meta_allowed():
        optimizer = _torch_optimizer(name, leaves, implementation)
        optimizer.step()  # creates the state (moments, momentum buffers)
        with KernelRecorder() as recorder:
            optimizer.step()
    return [k for k in recorder.kernels if not k.name.startswith("_record_function")]


def clip_kernels(params, implementation: str) -> list[Kernel]:
    """The kernels of ``clip_grad_norm_(params, 1.0)``: each gradient's norm, their
    norm, and the scaling of every gradient (foreach unless ``loop``)."""
    leaves = _leaves(params)
    with _meta_allowed(), KernelRecorder() as recorder:
        torch.nn.utils.clip_grad_norm_(leaves, 1.0, foreach=implementation != "loop")
    return recorder.kernels
