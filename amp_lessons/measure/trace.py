"""One training step traced on the meta device: every kernel's FLOPs, bytes and dtypes.

The estimate (``amp_lessons.measure.estimate``) prices a step op by op, so it needs
what each kernel computes and moves, in the dtype it would run in under AMP, without
a GPU and without allocating a byte. Three modules do that, one concept each:

* ``autocast_policy``: CUDA autocast's op lists applied at the aten level, above
  autograd, where CUDA applies them (``torch.autocast`` ignores meta tensors);
* ``kernels``: the recorder below autograd that turns every aten op of the forward,
  the backward and the loss into a ``Kernel`` (FLOPs, bytes read and written);
* ``fused_kernels``: the kernels a GPU runs where meta tensors take another path
  (fused attention, cuDNN's RNN, fp8 matmuls).

Example:
    >>> model = torch.nn.Linear(1024, 1024, device="meta")
    >>> trace = trace_step(model, torch.empty(8, 1024, device="meta"), "bf16")
    >>> [k.name for k in trace.kernels if k.flops]
    ['addmm', 'mm']
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from amp_lessons.measure.autocast_policy import LOW_DTYPES, AutocastPolicy
from amp_lessons.measure.kernels import Kernel, KernelRecorder, Trace, kind_of

__all__ = [
    "LOW_DTYPES",
    "AutocastPolicy",
    "Kernel",
    "KernelRecorder",
    "Trace",
    "kind_of",
    "trace_step",
]


def trace_step(
    model: torch.nn.Module,
    inputs,
    precision: str,
    loss_fn: Callable | None = None,
    autocast: bool = True,
    dataflow: bool = False,
    fp8_kept: frozenset[int] = frozenset(),
) -> Trace:
    """The kernels of one forward and backward of ``model(*inputs)`` (no optimizer).

    ``precision`` is ``fp32``, ``tf32``, ``fp16``, ``bf16`` or ``fp8`` (bf16 autocast
    with fp8 Linears). The loss is ``loss_fn(output)`` computed under the policy, as
    it would be under autocast, or the output's float sum. ``autocast=False`` runs
    the model in its own dtypes (a model already in fp16, as apex's O2 makes it).
    Each kernel's ``region`` says whether it is the model's or the loss's, forward
    or backward; ``dataflow`` records the tensors each kernel reads and writes
    (what ``measure.inductor_fusion`` needs). In fp8, the Linears whose weight's
    ``id`` is in ``fp8_kept`` stay in bf16.
    """
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    # a gradient left by an earlier trace would be accumulated into (one more add_)
    leaves = [
        t
        for t in (*model.parameters(), *torch.utils._pytree.tree_leaves(inputs))
        if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad
    ]
    for t in leaves:
        t.grad = None
    recorder = KernelRecorder(tf32=precision == "tf32", dataflow=dataflow)
    low = LOW_DTYPES.get(precision) if autocast else None
    with recorder:
        with AutocastPolicy(
            low, recorder, fp8_linears=precision == "fp8", fp8_kept=fp8_kept
        ):
            recorder.region = "forward"
            out = model(*inputs)
            recorder.region = "loss"
            loss = loss_fn(out) if loss_fn else out.float().sum()
        recorder.region = "loss_backward"
        _on_output_gradient(out, lambda: setattr(recorder, "region", "backward"))
        loss.backward()
    for t in leaves:
        t.grad = None
    return Trace(recorder.kernels, recorder.dispatched_ops, recorder.storage_bytes)


def _on_output_gradient(out, callback: Callable[[], None]) -> None:
    """Call ``callback`` when backward reaches the model's output: the loss's
    backward is over, the model's begins."""
    for t in torch.utils._pytree.tree_leaves(out):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.register_hook(lambda grad: callback())
