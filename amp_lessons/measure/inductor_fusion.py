"""What ``torch.compile(model)`` changes in a traced step: Inductor's fusion.

Eager PyTorch runs every elementwise op, norm and cast as its own kernel, which reads
its inputs from GPU memory and writes its output back. ``torch.compile``'s default
backend, Inductor, keeps matmuls, convolutions and attention as library kernels
(cuBLAS, cuDNN, flash attention: "extern kernels" in its generated code) and fuses
the memory-bound ops between them into generated Triton kernels. A fused kernel
reads what it needs from memory once and writes only what something else reads
later: the intermediates of a chain (a residual add, the LayerNorm after it, the
cast to bf16 before the next matmul) stay in registers.

``inductor_fusion`` applies that to a trace recorded with dataflow
(``trace_step(..., dataflow=True)``), in the model's forward and backward only (the
loss and the optimizer run eagerly, as ``torch.compile(model)`` leaves them):

* the memory-bound kernels between two extern kernels form a run (Inductor
  respects the order the extern kernels impose);
* within a run, kernels joined by a tensor that one writes and another reads, or
  that both read, become one generated kernel (Inductor's vertical and horizontal
  fusion); unrelated ones stay apart;
* a fused kernel reads each tensor from outside it once, and writes each tensor
  that something outside it reads (or nothing in the trace reads: a gradient, a
  result), once.

What it leaves out: the recomputation Inductor's partitioner may choose instead of
saving an activation (less memory, a little more work), fusion across an extern
kernel where Inductor reorders, and CUDA graphs (``mode="reduce-overhead"``), the
last two of which would make the step faster still. The CPU's time per launched
kernel is kept at eager's. On a small GPT it groups the forward into as many
generated kernels as Inductor's C++ backend generates on the CPU, and the backward
into a few more (``tests/test_inductor_fusion.py``).

Example::

    trace = trace_step(model, inputs, "bf16", loss_fn, dataflow=True)
    len(inductor_fusion(trace).kernels) < len(trace.kernels)  # True
"""

from __future__ import annotations

from amp_lessons.measure.kernels import Kernel, Trace

# the regions ``torch.compile(model)`` compiles (``Kernel.region``)
COMPILED_REGIONS = frozenset({"forward", "backward"})


def fusible(kernel: Kernel) -> bool:
    """A kernel Inductor generates: memory-bound (no FLOPs), in the compiled model,
    with its dataflow recorded. Matmuls, convolutions and attention stay library
    kernels, and so does a kernel whose tensors the trace does not know."""
    return (
        kernel.region in COMPILED_REGIONS
        and not kernel.flops
        and bool(kernel.reads or kernel.writes)
    )


def inductor_fusion(trace: Trace) -> Trace:
    """``trace`` as the compiled model runs it (see the module's docstring): each
    group of fused kernels replaced by one kernel, in place of its first member."""
    kernels = trace.kernels
    readers = _readers(kernels)
    fused: list[Kernel] = []
    for run in _runs(kernels):
        if not fusible(kernels[run[0]]):
            fused += [kernels[i] for i in run]
            continue
        for group in _connected(kernels, run):
            fused.append(_fused_kernel([kernels[i] for i in group], group, readers))
    return Trace(fused, trace.dispatched_ops)


def _runs(kernels: list[Kernel]) -> list[list[int]]:
    """Kernel indices cut into runs: each fusible run (same region, nothing else
    between) as one list, every other kernel alone."""
    runs: list[list[int]] = []
    for i, k in enumerate(kernels):
        previous = kernels[runs[-1][-1]] if runs else None
        if (
            previous is not None
            and fusible(k)
            and fusible(previous)
            and k.region == previous.region
        ):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _connected(kernels: list[Kernel], run: list[int]) -> list[list[int]]:
    """The run's kernels grouped by the storages they share (union-find), each
    group in trace order, groups in the order of their first kernel."""
    parent = {i: i for i in run}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}  # storage -> the first kernel of the run touching it
    for i in run:
        for storage, _, _ in (*kernels[i].reads, *kernels[i].writes):
            if storage in owner:
                parent[root(i)] = root(owner[storage])
            else:
                owner[storage] = i
    groups: dict[int, list[int]] = {}
    for i in run:
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values())


def _readers(kernels: list[Kernel]) -> dict[int, set[int]]:
    """Each storage's reading kernels, by index."""
    readers: dict[int, set[int]] = {}
    for i, k in enumerate(kernels):
        for storage, _, _ in k.reads:
            readers.setdefault(storage, set()).add(i)
    return readers


def _fused_kernel(
    members: list[Kernel], indices: list[int], readers: dict[int, set[int]]
) -> Kernel:
    """One generated kernel for ``members``: it reads each view from outside the
    group once (a storage counts as outside until a member has written it), and
    writes each view that a kernel outside the group reads, or that no kernel
    reads, once."""
    if len(members) == 1:  # nothing to fuse: the kernel eager PyTorch runs
        return members[0]
    inside = set(indices)
    written: set[int] = set()
    reads: dict[tuple, tuple] = {}
    writes: dict[tuple, tuple] = {}
    for k in members:
        for access in k.reads:
            if access[0] not in written:
                reads.setdefault(access[:2], access)
        for access in k.writes:
            written.add(access[0])
            if readers.get(access[0], set()) - inside or access[0] not in readers:
                writes.setdefault(access[:2], access)
    names = list(dict.fromkeys(k.name for k in members))
    return Kernel(
        "fused_" + "_".join(names[:4]),
        "fused",
        0,
        sum(a[2] for a in (*reads.values(), *writes.values())),
        dtype=members[-1].dtype,
        region=members[0].region,
        reads=tuple(reads.values()),
        writes=tuple(writes.values()),
    )
