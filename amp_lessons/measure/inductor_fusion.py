"""What ``torch.compile(model)`` changes in a traced step: Inductor's fusion.

Eager PyTorch runs every elementwise op, norm and cast as its own kernel, which reads
its inputs from GPU memory and writes its output back. ``torch.compile``'s default
backend, Inductor, keeps matmuls, convolutions and attention as library kernels
(cuBLAS, cuDNN, flash attention: "extern kernels" in its generated code) and fuses
the memory-bound ops between them into generated Triton kernels. A fused kernel
reads what it needs from memory once and writes only what it must keep: what a
later kernel reads (the residual stream, an activation saved for backward) and
results such as gradients. The intermediates of a chain (a LayerNorm's output, its
cast to bf16 before the next matmul) stay in registers.

``inductor_fusion`` applies that to a trace recorded with dataflow
(``trace_step(..., dataflow=True)``), in the model's forward and backward only (the
loss and the optimizer run eagerly, as ``torch.compile(model)`` leaves them):

* the memory-bound kernels between two extern kernels form a run (Inductor
  respects the order the extern kernels impose);
* within a run, kernels joined by a tensor that one writes and another reads, or
  that both read, become one generated kernel (Inductor's vertical and horizontal
  fusion); unrelated ones stay apart;
* a fused kernel reads each tensor from outside it once, and writes, once, each
  tensor that something outside it reads, that nothing reads (a gradient), or that
  it updates in place.

It is optimistic where Inductor is more careful. It fuses whatever shares a tensor
within a run, where Inductor splits kernels whose loops differ (a LayerNorm
backward's input gradient from its weight's, a reduction along another axis): on a
small GPT it groups the step into up to a fifth fewer kernels than Inductor's C++
backend launches on the CPU, which can fuse more than its GPU backend, one C++
kernel holding several loop nests (``tests/test_inductor_fusion.py``). What it
leaves out: the recomputation Inductor's partitioner may choose instead of saving an
activation (less memory, a little more work), fusion across an extern kernel where
Inductor reorders, and CUDA graphs (``mode="reduce-overhead"``). An fp8 Linear's
amax fuses with the cast that reads the same tensor, one pass where Inductor needs
two (the cast waits for the whole tensor's amax): optimistic too. The CPU's time per
launched kernel is kept at eager's. ``estimate_step`` also drops a compiled model's
NCHW transposes: Inductor's layout optimization runs a network of convolutions
channels-last.

Example::

    trace = trace_step(model, inputs, "bf16", loss_fn, dataflow=True)
    len(inductor_fusion(trace).kernels) < len(trace.kernels)  # True
"""

from __future__ import annotations

from dataclasses import dataclass

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
    uses = _uses(kernels)
    fused: list[Kernel] = []
    for run in _runs(kernels):
        if not fusible(kernels[run[0]]):
            fused += [kernels[i] for i in run]
            continue
        for group in _connected(kernels, run):
            members = [kernels[i] for i in group]
            fused.append(_fused_kernel(members, group, uses, trace.storage_bytes))
    return Trace(fused, trace.dispatched_ops, trace.storage_bytes)


@dataclass(frozen=True)
class _Uses:
    """How the trace uses each storage: the kernels that read it, and the kernel
    that created it (its first access, a write that does not read it; none for a
    storage that existed before, such as a parameter or an input updated in
    place)."""

    readers: dict[int, set[int]]
    creator: dict[int, int]


def _uses(kernels: list[Kernel]) -> _Uses:
    readers: dict[int, set[int]] = {}
    first: dict[int, int | None] = {}
    for i, k in enumerate(kernels):
        for storage, _, _ in k.reads:  # reads first: an in-place op reads, then writes
            readers.setdefault(storage, set()).add(i)
            first.setdefault(storage, None)
        for storage, _, _ in k.writes:
            first.setdefault(storage, i)
    return _Uses(readers, {s: i for s, i in first.items() if i is not None})


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


def _fused_kernel(
    members: list[Kernel],
    indices: list[int],
    uses: _Uses,
    storage_bytes: dict[int, int],
) -> Kernel:
    """One generated kernel for ``members``. It reads each view from outside the
    group once (a storage counts as outside until a member has written it). It
    writes each view it must keep, once: what a kernel outside the group reads, a
    result nothing reads (a gradient), and every storage it did not create (an
    update in place). Only what it creates and reads itself stays in registers.
    Views of one storage (``x`` and ``x.t()``) move at most the storage's bytes."""
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
            if _kept(access[0], inside, uses):
                writes.setdefault(access[:2], access)
    names = list(dict.fromkeys(k.name for k in members))
    return Kernel(
        "fused_" + "_".join(names[:4]),
        "fused",
        0,
        _moved(reads.values(), storage_bytes) + _moved(writes.values(), storage_bytes),
        dtype=members[-1].dtype,
        region=members[0].region,
        reads=tuple(reads.values()),
        writes=tuple(writes.values()),
    )


def _kept(storage: int, inside: set[int], uses: _Uses) -> bool:
    """Whether a group's write to ``storage`` must reach memory (``_fused_kernel``)."""
    readers = uses.readers.get(storage, set())
    return (
        uses.creator.get(storage) not in inside  # it existed before the group
        or bool(readers - inside)  # something outside reads it
        or not readers  # a result: nothing in the step reads it
    )


def _moved(accesses, storage_bytes: dict[int, int]) -> int:
    """Bytes of distinct views, each storage's capped at its size (where known)."""
    by_storage: dict[int, int] = {}
    for storage, _, size in accesses:
        by_storage[storage] = by_storage.get(storage, 0) + size
    return sum(
        min(size, storage_bytes.get(storage, size))
        for storage, size in by_storage.items()
    )
