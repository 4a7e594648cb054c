"""A training step's memory per precision, from the same meta-device trace.

Training holds the fp32 weights, their fp32 gradients, the optimizer's state
(``amp_lessons.core.memory.optimizer_state_bytes``: Adam's two moments) and what the
forward saves for backward: the activations, and under AMP autocast's low-precision
weight copies. The saved tensors are found as ``amp_lessons.core.memory`` finds them
(``saved_tensors_hooks``), but on the meta device under CUDA autocast's policy
(``autocast_policy``), with attention saving what the fused kernel saves (q, k, v
and the output), so any model and any GPU can be asked without allocating a byte.
The allocator's own peak adds temporaries (a backward's largest gradient buffers)
and rounding on top.

Example:
    >>> with torch.device("meta"):
    ...     model = torch.nn.Linear(1024, 1024)
    >>> x = torch.empty(8, 1024, device="meta")
    >>> m = estimate_memory(model, x, "A100-SXM4-80GB", "bf16")
    >>> m.weights, m.gradients
    (4198400, 4198400)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from amp_lessons.core.memory import optimizer_state_bytes
from amp_lessons.measure.autocast_policy import LOW_DTYPES, AutocastPolicy
from amp_lessons.measure.gpus import find_gpu
from amp_lessons.measure.kernels import KernelRecorder


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a training step holds, by part, and the batch that would fill the GPU."""

    precision: str
    weights: int
    gradients: int
    optimizer_state: int
    activations: int  # saved for backward, autocast's weight copies included
    gpu_bytes: int
    batch: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_state + self.activations

    @property
    def largest_batch(self) -> int:
        """The batch at which the parts would fill the GPU, activations growing in
        proportion to the batch (0 if even the fixed parts do not fit)."""
        fixed = self.total - self.activations
        per_item = self.activations / max(self.batch, 1)
        if fixed >= self.gpu_bytes:
            return 0
        return math.floor((self.gpu_bytes - fixed) / per_item) if per_item else 0


def saved_bytes(model: torch.nn.Module, inputs, precision: str) -> int:
    """Bytes of the distinct storages the forward of ``model(*inputs)`` saves for
    backward under CUDA autocast's policy for ``precision``, the model's own
    parameters and buffers excluded (``core.memory.activation_bytes`` on meta)."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    state = {
        t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())
    }
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor):
        saved.append(t.detach())
        return t

    low = LOW_DTYPES.get(precision)
    # a recorder nobody enters: the policy then saves what the fused kernels save
    with torch.enable_grad(), AutocastPolicy(low, KernelRecorder()):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(*inputs)
    found: dict[int, int] = {}
    for t in saved:
        key = t.untyped_storage()._cdata
        if key not in state:
            found[key] = t.untyped_storage().nbytes()
    del out
    return sum(found.values())


def estimate_memory(
    model: torch.nn.Module, inputs, gpu: str, precision: str, optimizer: str = "adam"
) -> MemoryEstimate:
    """Training memory of ``model(*inputs)`` (meta tensors) in ``precision`` on
    ``gpu``: fp32 weights, gradients and ``optimizer``'s state whatever the
    precision, and the bytes saved for backward, which AMP shrinks."""
    device = find_gpu(gpu)
    params = [p for p in model.parameters() if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    first = inputs[0] if isinstance(inputs, tuple) else inputs
    return MemoryEstimate(
        precision,
        weights,
        sum(p.numel() * p.element_size() for p in params),
        optimizer_state_bytes(model, None if optimizer == "none" else optimizer)
        if optimizer != "lamb"
        else optimizer_state_bytes(model, "adam"),  # LAMB keeps Adam's two moments
        saved_bytes(model, inputs, precision),
        int(device.memory_gb * 2**30),
        first.shape[0] if first.dim() else 1,
    )
