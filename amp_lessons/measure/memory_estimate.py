"""A training step's memory per precision, from the same meta-device trace.

Training holds the fp32 weights, their fp32 gradients, the optimizer's state
(``amp_lessons.core.memory.optimizer_state_bytes``: Adam's two moments) and what the
forward saves for backward: the activations, and under AMP autocast's low-precision
weight copies. The saved tensors are found as ``amp_lessons.core.memory`` finds them
(``saved_tensors_hooks``), but on the meta device under CUDA autocast's policy
(``autocast_policy``), with attention saving what the fused kernel saves (q, k, v
and the output), so any model and any GPU can be asked without allocating a byte.

The parts do not all live at once, so their sum is not the peak. The allocator's
peak (``torch.cuda.max_memory_allocated``) comes at the start of backward, where
every saved activation is still held, the loss has saved its own tensors (the
log-probabilities of a cross-entropy over the vocabulary) and the loss's backward
holds two gradients of the logits' size at once, while most weight gradients do not
exist yet. ``step_peak_bytes`` finds that moment by replaying the step on the meta
device and following every storage from the op that allocates it to the moment its
last reference dies (a storage's Python object lives exactly as long as the storage
itself, so a ``weakref.finalize`` on it fires when the allocator would free it). On
top come what the step does not allocate: the weights, the optimizer's state, the
inputs, and cuBLAS's workspaces (``CUBLAS_WORKSPACE_BYTES``).

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
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from amp_lessons.core.memory import optimizer_state_bytes
from amp_lessons.measure.autocast_policy import LOW_DTYPES, AutocastPolicy
from amp_lessons.measure.gpus import find_gpu
from amp_lessons.measure.kernels import KernelRecorder, _tensors

# cuBLAS's workspace: NVIDIA's cuBLAS documentation (cublasSetWorkspace) recommends
# 32 MiB on Hopper (compute capability 9.x) and 4 MiB before it. PyTorch allocates
# its workspaces through the caching allocator, so they count in
# max_memory_allocated. Two of them are counted (cuBLAS's and cuBLASLt's, as we read
# it): the H200 record's resident bytes hold 65-66 MiB beyond weights, optimizer
# state and inputs in both of its configs; the count of two is taken from that
# record, not from a source, and before Hopper it is not checked against any run.
CUBLAS_WORKSPACE_BYTES = {9: 2 * 32 * 2**20}
CUBLAS_WORKSPACE_BYTES_BEFORE_HOPPER = 2 * 4 * 2**20


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
    inputs: int = 0  # the step's input tensors
    workspace: int = 0  # cuBLAS's workspaces
    step_peak: int = 0  # the most the forward and backward hold at once

    @property
    def total(self) -> int:
        """The parts summed: weights, gradients, optimizer state, activations."""
        return self.weights + self.gradients + self.optimizer_state + self.activations

    @property
    def peak(self) -> int:
        """The allocator's peak: what lives through the step (weights, optimizer
        state, inputs, workspaces) and the most the step itself holds at once."""
        return (
            self.weights
            + self.optimizer_state
            + self.inputs
            + self.workspace
            + self.step_peak
        )

    @property
    def largest_batch(self) -> int:
        """The batch at which the peak would fill the GPU, what the step holds (and
        its inputs) growing in proportion to the batch (0 if even the fixed parts do
        not fit)."""
        per_item = (self.step_peak + self.inputs) / max(self.batch, 1)
        fixed = self.peak - self.step_peak - self.inputs
        if fixed >= self.gpu_bytes:
            return 0
        return math.floor((self.gpu_bytes - fixed) / per_item) if per_item else 0


class LiveBytes(TorchDispatchMode):
    """The bytes of every storage the ops allocate, from allocation to the moment
    its last reference dies, and their peak. Storages that exist before (weights,
    inputs) are not counted: ``existing``."""

    def __init__(self, existing=()):
        super().__init__()
        self.now = self.peak = 0
        self.seen = {t.untyped_storage()._cdata for t in existing}

    def _free(self, key: int, nbytes: int) -> None:
        self.now -= nbytes
        self.seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in _tensors(out):
            storage = t.untyped_storage()
            if storage._cdata not in self.seen:  # new: not a view of a known one
                self.seen.add(storage._cdata)
                self.now += storage.nbytes()
                weakref.finalize(storage, self._free, storage._cdata, storage.nbytes())
        self.peak = max(self.peak, self.now)
        return out


def step_peak_bytes(
    model: torch.nn.Module, inputs, precision: str, loss_fn=None
) -> int:
    """The most the forward, the loss and the backward of ``model(*inputs)`` hold at
    once under CUDA autocast's policy for ``precision`` (meta tensors): activations,
    temporaries and gradients as they are allocated and freed."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    state = [*model.parameters(), *model.buffers()]
    state += [t for t in inputs if isinstance(t, torch.Tensor)]
    for p in model.parameters():
        p.grad = None
    live = LiveBytes(state)
    with torch.enable_grad(), live:
        with AutocastPolicy(LOW_DTYPES.get(precision), KernelRecorder()):
            out = model(*inputs)
            loss = loss_fn(out) if loss_fn else out.float().sum()
        del out  # the caller keeps the loss, not the output
        loss.backward()
    for p in model.parameters():
        p.grad = None
    return live.peak


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
    model: torch.nn.Module,
    inputs,
    gpu: str,
    precision: str,
    optimizer: str = "adam",
    loss_fn=None,
) -> MemoryEstimate:
    """Training memory of ``model(*inputs)`` (meta tensors) in ``precision`` on
    ``gpu``: fp32 weights, gradients and ``optimizer``'s state whatever the
    precision, the bytes saved for backward, which AMP shrinks, and the peak the
    allocator reaches (``MemoryEstimate.peak``) with ``loss_fn`` as the loss."""
    device = find_gpu(gpu)
    tensors = inputs if isinstance(inputs, tuple) else (inputs,)
    major = int(device.capability.split(".")[0])
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
        sum(
            t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)
        ),
        CUBLAS_WORKSPACE_BYTES.get(major, CUBLAS_WORKSPACE_BYTES_BEFORE_HOPPER),
        step_peak_bytes(model, inputs, precision, loss_fn),
    )
