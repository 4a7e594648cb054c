"""Running the course's training loop across processes: DDP and FSDP2 under torchrun.

Lesson 10. ``torchrun`` starts one process per device and tells each its ``RANK`` and
``WORLD_SIZE``; a ``World`` joins them (gloo on a CPU, nccl on CUDA). The loop in
``amp_lessons.core.train`` stays one loop: it asks its ``World`` to wrap the model, to
cut each rank's slice out of the global batch, to average the loss and to agree on
skipped steps. With ``mode="none"`` every one of those is the identity, so one process
runs exactly the lesson-05 loop.

* **DDP** keeps a full fp32 model on every rank and all-reduces (averages) the
  gradients during backward; autocast does the mixed precision, as on one device.
* **FSDP2** (``torch.distributed.fsdp.fully_shard``) keeps 1/N of every parameter,
  gradient and optimizer state per rank. Its ``MixedPrecisionPolicy`` replaces
  autocast: before each unit's forward it all-gathers the shards *cast to*
  ``param_dtype`` (so every op of that unit runs in bf16/fp16, not per-op like
  autocast), frees them after use (no weight-copy cache to grow), and reduce-scatters
  the gradients in ``reduce_dtype`` (fp32 here) into fp32 sharded gradients.

Checkpoints use ``torch.distributed.checkpoint`` (DCP): each rank writes its own shards,
and a later run with another world size reads back the pieces it owns. Starting the
processes from a notebook or a test is ``amp_lessons.core.launch``'s (named here too).

Not covered here: tensor/pipeline parallelism, HSDP (2-D meshes), CPU offload.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from amp_lessons.core.errors import (
    CheckpointNotFound,
    SettingError,
    SettingUnavailable,
    in_python_terms,
)

# launch() starts these processes from a notebook; lesson 10 and the tests import it
# from here, beside the World the processes make (its home is core/launch.py)
from amp_lessons.core.launch import Launch as Launch
from amp_lessons.core.launch import launch as launch
from amp_lessons.i18n import _

MODES = ("none", "ddp", "fsdp2")
# fully_shard became public in torch.distributed.fsdp in 2.6 (its docs page dates from
# Dec 2024); it runs on a CPU from 2.7, once CPU streams got no-op record_event and
# wait_event (pytorch/pytorch#145935, Feb 2025; 2.6 still refused non-CUDA devices).
FSDP2_MIN_TORCH = (2, 6)
FSDP2_CPU_MIN_TORCH = (2, 7)
CHECKPOINT_FORMAT = "amp_lessons.core.distributed/1"
META_FILE = "amp_lessons.json"  # beside DCP's own .metadata and shard files
# A one-process group's collectives complete at once; this only bounds a broken one
ONE_PROCESS_TIMEOUT = timedelta(seconds=120)


def fsdp2_unsupported_reason(device_type: str = "cpu") -> str | None:
    """Why FSDP2 cannot run here (old torch, no torch.distributed), or None.

    Example: on torch 2.13 ``fsdp2_unsupported_reason("cpu") is None``; on torch 2.6
    it says "FSDP2 on a CPU needs torch 2.7 or newer ...".
    """
    why = _fsdp2_problem(device_type)
    return in_python_terms(why) if why else None


def _fsdp2_problem(device_type: str) -> str | None:
    # the reason with its settings marked (amp_lessons.core.errors), for start_world
    from torch.torch_version import TorchVersion

    version = TorchVersion(torch.__version__)
    if not torch.distributed.is_available():
        return f"this torch ({torch.__version__}) was built without torch.distributed"
    if version < FSDP2_MIN_TORCH:
        return (
            "FSDP2 (torch.distributed.fsdp.fully_shard) is public from torch "
            f"2.6; this is {torch.__version__}. Upgrade torch, or use "
            "`distributed='ddp'`."
        )
    if device_type == "cpu" and version < FSDP2_CPU_MIN_TORCH:
        return (
            f"FSDP2 on a CPU needs torch 2.7 or newer (2.6 sets up its streams "
            f"for GPUs only); this is {torch.__version__}. Upgrade torch, run on "
            "a GPU, or use `distributed='ddp'`."
        )
    return None


# Process groups that ended, kept until ``end_groups()``. A DDP model's Reducer holds
# its group; when the model goes after the group ended, the Reducer's last reference
# destroys the gloo group while holding the GIL and joins gloo's worker threads, one
# of which may still need the GIL to free a tensor of the last all-reduce: a deadlock
# (pytorch/pytorch#56297; it hung CI in the one-process DDP test). Kept here, a group
# is destroyed long idle, after the models that used it are gone. Not at interpreter
# exit: there a gloo thread freeing a tensor finds the GIL gone and is ended with
# pthread_exit inside a noexcept destructor: "terminate called without an active
# exception", SIGABRT (issue 21; pytorch/pytorch#179291, #190489). So ``end_groups``
# runs at the end of a launched rank's main, and from atexit, before finalization.
# Open (torch 2.13): once a DDP or FSDP2 model was built on a group, 10 references
# to the group's Python object outlive the model (none in a Python container), so
# end_groups cannot destroy that group and its threads run on to exit.
_ENDED_GROUPS: list = []
# module state that grows as lessons run: the grading guard does not take it for
# tampering with the course's data (tooling/grading/guard/tamper.py)
__runtime_state__ = ("_ENDED_GROUPS",)


def _live_groups() -> list:
    """Every process group torch.distributed holds now (the default one at least)."""
    from torch.distributed import distributed_c10d

    groups = getattr(getattr(distributed_c10d, "_world", None), "pg_map", None)
    return list(groups or [torch.distributed.group.WORLD])


def end_groups() -> int:
    """Destroy the process groups ended so far, now, while the interpreter is whole;
    return how many were let go.

    Call it once the models, optimizers and results that used them are dropped (a
    DDP Reducer or an FSDP2 unit holds its group): ``gc.collect()`` first lets those
    still in reference cycles go. Registered with atexit as well, so a group is never
    left to interpreter finalization. Example: after ``world.close()`` and ``del
    model``, ``end_groups()`` -> ``1`` (the default group).
    """
    if not _ENDED_GROUPS:
        return 0  # nothing ended: spare every interpreter exit two full collections
    import gc

    gc.collect()
    n = len(_ENDED_GROUPS)
    _ENDED_GROUPS.clear()  # the last references: ~ProcessGroupGloo joins its threads
    gc.collect()
    return n


atexit.register(end_groups)


def exit_rank(code: int | None) -> None:
    """End a process that torchrun launched, once its work is done: its groups ended
    (`end_groups`), its output flushed, then ``os._exit``, past interpreter
    finalization. A group that a DDP or FSDP2 model used cannot be destroyed before
    exit on torch 2.13 (see ``_ENDED_GROUPS``), and at finalization its gloo threads
    may free a tensor with the GIL gone, which aborts the rank (SIGABRT, "terminate
    called without an active exception": issue 21; pytorch/pytorch#179291). A finished
    rank has nothing left to finalize: every file it writes is closed (written
    atomically). Outside torchrun it returns and the process exits normally.

    Example (a module's entry point): ``exit_rank(main()); sys.exit(...)``.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    end_groups()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))


@dataclass
class World:
    """The processes of one run: who this one is, how many there are, how they talk.

    Example (2 processes under torchrun, global batch 8)::

        world = start_world("ddp", torch.device("cpu"))
        x_local, y_local = world.split(x, y)    # rank 1 gets rows 4..7
        world.mean(local_loss)                  # the loss of all 8 rows
    """

    mode: str
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False  # this World created the process group, so it ends it

    @property
    def distributed(self) -> bool:
        return self.mode != "none"

    def check_batch(self, batch_size: int) -> None:
        """Refuse a global batch that does not split evenly over the processes."""
        if batch_size % self.world_size:
            n = self.world_size
            lower = batch_size - batch_size % n
            raise SettingError(
                _(
                    "`batch_size={batch_size}` is the global batch, split over {n} "
                    "processes, and {batch_size} is not a multiple of {n}. Fix: use a "
                    "multiple, e.g. {lower} or {higher}."
                ).format(batch_size=batch_size, n=n, lower=lower or n, higher=lower + n)
            )

    def split(
        self, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's equal slice of a global batch (rows rank*b .. rank*b + b - 1)."""
        self.check_batch(len(x))
        b = len(x) // self.world_size
        rows = slice(self.rank * b, (self.rank + 1) * b)
        return x[rows], y[rows]

    def combine(self, loss: torch.Tensor, skipped: bool) -> tuple[float, bool]:
        """One step's loss averaged over ranks, and its skip flag checked to agree.

        With equal slices the mean of the ranks' mean losses is the mean over the
        global batch. A skipped step must be skipped everywhere: a rank that stepped
        alone would leave its parameters different from the others' for good, so a
        disagreement is a RuntimeError. One all-reduce does both.

        Example: ranks with losses 1.0 and 3.0, neither skipped -> ``(2.0, False)``.
        """
        if self.world_size == 1:  # nothing to average, no one to disagree with
            return loss.item(), skipped
        # [sum of losses, ranks that skipped, ranks that stepped]
        summary = torch.stack(
            [
                loss.detach().float().reshape(()),
                torch.tensor(float(skipped), device=loss.device),
                torch.tensor(float(not skipped), device=loss.device),
            ]
        )
        torch.distributed.all_reduce(summary)  # SUM: gloo has no AVG
        total, n_skipped, n_stepped = summary.tolist()
        if n_skipped and n_stepped:
            raise RuntimeError(
                f"the ranks disagree on skipping this step ({n_skipped:g} of "
                f"{self.world_size} found inf/NaN gradients): their parameters would "
                "drift apart. Use torch.amp.GradScaler, whose found_inf is the same "
                "on every rank under DDP (gradients are all-reduced before the check) "
                "and FSDP2 (DTensor max-reduces it over the shards)."
            )
        return total / self.world_size, skipped

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    def close(self) -> None:
        """End the process group if this World started it (see ``_ENDED_GROUPS``; it
        is destroyed by ``end_groups``). Call ``barrier()`` first on the success path,
        so no rank ends its group while a peer still talks to it."""
        if self.owns_group and torch.distributed.is_initialized():
            _ENDED_GROUPS.extend(_live_groups())
            torch.distributed.destroy_process_group()
            self.owns_group = False


def start_world(mode: str, device: torch.device) -> World:
    """Join the processes torchrun started (or make a world of one) for ``mode``.

    Reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` from the environment. Without
    them (``python -m amp_lessons train --distributed ddp``) it starts a one-process
    group, so the same code runs. On CUDA each rank takes GPU ``LOCAL_RANK``.

    Example: ``start_world("none", torch.device("cpu")).world_size == 1``.
    """
    if mode not in MODES:
        raise ValueError(
            f"unknown distributed mode {mode!r}; use one of: {', '.join(MODES)}"
        )
    if mode == "none":
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise SettingError(
                f"{os.environ['WORLD_SIZE']} processes were launched (torchrun?), but "
                "`distributed='none'`: each would train alone on the whole batch. "
                "Fix: use `distributed='ddp'` (or `distributed='fsdp2'`)."
            )
        return World("none", device=device)
    _refuse_unavailable(mode, device)
    device = _rank_device(device)
    owns = _join_group("nccl" if device.type == "cuda" else "gloo")
    return World(
        mode,
        torch.distributed.get_rank(),
        torch.distributed.get_world_size(),
        device,
        owns,
    )


def _refuse_unavailable(mode: str, device: torch.device) -> None:
    """Raise if this torch or ``device`` cannot run ``mode`` (ddp or fsdp2)."""
    if not torch.distributed.is_available():
        raise SettingUnavailable(
            f"this torch ({torch.__version__}) was built "
            "without torch.distributed; use "
            "`distributed='none'`"
        )
    if mode == "fsdp2" and (why := _fsdp2_problem(device.type)):
        raise SettingUnavailable(why)
    if device.type not in ("cpu", "cuda"):
        raise SettingError(
            f"`distributed={mode!r}` runs on cpu (gloo) or cuda "
            f"(nccl), not {device.type}. Fix: use `device='cpu'` or "
            "`device='cuda'`."
        )


def _rank_device(device: torch.device) -> torch.device:
    """On CUDA, this rank's own GPU (``LOCAL_RANK``), made the current one; a CPU as
    it is."""
    if device.type != "cuda":
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError(
            f"local rank {local_rank} has no GPU of its own (this "
            f"node has {torch.cuda.device_count()}): start at most "
            "that many processes per node (torchrun's "
            "nproc_per_node)"
        )
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def _join_group(backend: str) -> bool:
    """Start the process group unless one is running; True if this call started it
    (then the World that asked owns it and ends it)."""
    owns = not torch.distributed.is_initialized()
    if owns and "RANK" in os.environ:
        torch.distributed.init_process_group(backend)  # torchrun's env:// rendezvous
    elif owns:
        # One process, nothing to rendezvous: an in-memory store, and a short timeout,
        # so a collective that cannot complete raises instead of waiting gloo's
        # default 30 minutes.
        store = torch.distributed.HashStore()
        torch.distributed.init_process_group(
            backend, store=store, rank=0, world_size=1, timeout=ONE_PROCESS_TIMEOUT
        )
    return owns


@contextmanager
def world_of(mode: str, device: torch.device) -> Iterator[World]:
    """``start_world`` as a context: the process group ends with the block."""
    world = start_world(mode, device)
    try:
        yield world
    finally:
        world.close()


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The submodules FSDP2 shards one by one: the layers of the model's first
    ``nn.Sequential`` that own parameters (MLP: its Linears; GPT: its Blocks).

    Each unit is all-gathered just before its forward and freed after, so only one
    unit's full weights exist at a time; the root takes whatever is left (embeddings,
    the head). Example: ``len(shard_units(MLP((2, 64, 64, 3)))) == 3``.
    """
    for module in model.modules():
        if isinstance(module, nn.Sequential):
            return [m for m in module if any(True for _ in m.parameters())]
    return []


def mixed_precision_policy(precision: Any, root: bool = False):
    """FSDP2's policy for a course precision (an ``amp_lessons`` Precision).

    fp16/bf16: parameters all-gathered in that dtype, gradients reduced in fp32, and
    for the root module only (``root=True``) the output cast to fp32, so the loss is
    computed in fp32 as autocast does for ``cross_entropy``; inner units hand bf16
    on to the next. fp32/tf32: no casting at all.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if not precision.autocast:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(
        param_dtype=precision.dtype,
        reduce_dtype=torch.float32,
        output_dtype=torch.float32 if root else None,
    )


def wrap_model(
    model: nn.Module, world: World, precision: Any, autocast_ctx: Any
) -> tuple[nn.Module, Any]:
    """Wrap a model for ``world.mode``; return it and the context for its forward.

    none: the model and autocast, unchanged. ddp: ``DistributedDataParallel`` and
    autocast. fsdp2: ``fully_shard`` on each unit and on the root with the precision's
    ``MixedPrecisionPolicy``, and no autocast (the policy casts instead).

    Example: ``model, ctx = wrap_model(MLP((2, 8, 3)), world, bf16, autocast_ctx)``.
    """
    model.to(world.device)
    if world.mode == "none":
        return model, autocast_ctx
    if world.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [world.device.index] if world.device.type == "cuda" else None
        # bucket views: the gradients live inside DDP's all-reduce buckets instead of
        # being copied out of them, so DDP holds one fp32 gradient copy, not two
        return DDP(model, device_ids=ids, gradient_as_bucket_view=True), autocast_ctx
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(world.device.type, (world.world_size,))
    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=mixed_precision_policy(precision))
    fully_shard(model, mesh=mesh, mp_policy=mixed_precision_policy(precision, True))
    return model, nullcontext()


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (FSDP2 changes the module in place)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    return model.module if isinstance(model, DDP) else model


@dataclass
class Observed:
    """One module with a weight, seen during a forward: dtypes in and out."""

    name: str
    weight: torch.dtype  # the weight's dtype while the module ran
    input: torch.dtype
    output: torch.dtype


def observe_dtypes(
    model: nn.Module, ctx: Any, x: torch.Tensor
) -> tuple[list[Observed], torch.dtype]:
    """Run one forward under ``ctx`` and record, for every module that has its own
    ``weight``, the weight's dtype while it ran and the dtypes going in and out;
    return those records and the model output's dtype.

    Under autocast every weight stays fp32 and each op picks its dtype; under FSDP2's
    bf16 policy the weights themselves are bf16 while their unit runs. Example:
    ``observe_dtypes(GPT(64, 16, 1, 2, 32), autocast_ctx, x)[0][2]`` ->
    ``Observed('blocks.0.ln1', float32, float32, float32)``.
    """
    seen: list[Observed] = []
    handles = []
    for name, module in unwrap(model).named_modules():
        if isinstance(getattr(module, "weight", None), torch.Tensor):

            def record(module, args, output, name=name) -> None:
                seen.append(
                    Observed(name, module.weight.dtype, args[0].dtype, output.dtype)
                )

            # prepend: run before FSDP2's own hook frees the unit's low-precision copy
            handles.append(module.register_forward_hook(record, prepend=True))
    try:
        with torch.no_grad(), ctx:
            output = model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen, output.dtype


# ---------------------------------------------------------------------------
# Checkpoints with torch.distributed.checkpoint
# ---------------------------------------------------------------------------


def save_sharded(
    path: str | os.PathLike,
    world: World,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tensors: dict[str, torch.Tensor],
    meta: dict,
) -> None:
    """Write a DCP checkpoint directory: every rank its shards, rank 0 ``meta``.

    ``get_state_dict`` names parameters the same way under DDP, FSDP2 or neither
    (no ``module.`` prefix; FSDP2's are DTensors that know their shard), which is what
    lets a run of another world size, or the other mode, read it. ``tensors`` are
    replicated extras (RNG states); ``meta`` is plain JSON data (config, step,
    records, the scaler's state). Written to ``path.tmp`` first and renamed, so a
    crash leaves the previous checkpoint whole.

    Example: ``save_sharded("run.dcp", world, model, optimizer,
    {"data_rng": generator.get_state()}, {"step": 10})``.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if world.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    world.barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save(
        {"model": model_state, "optimizer": optim_state, **tensors},
        checkpoint_id=str(tmp),
    )
    if world.rank == 0:
        (tmp / META_FILE).write_text(json.dumps({"format": CHECKPOINT_FORMAT, **meta}))
        old = path.with_name(path.name + ".old")
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        if old.is_dir():
            shutil.rmtree(old)
        elif old.exists():
            old.unlink()  # a single-file checkpoint this run replaced
    world.barrier()


def read_meta(path: str | os.PathLike) -> dict:
    """The plain part of a checkpoint written by ``save_sharded``, touching nothing.

    Example: ``read_meta("run.dcp")["step"]`` -> ``10``.
    """
    path = Path(path)
    if path.is_file():
        raise SettingError(
            f"{path} is a single-file checkpoint (written with "
            "`distributed='none'`): resume it with "
            "`distributed='none'`, or start a new run with another "
            "`checkpoint_path`"
        )
    if not (path / META_FILE).is_file():
        raise CheckpointNotFound(
            _(
                "no checkpoint at {path}: run once without `resume=True` (with "
                "`checkpoint_path`) to create it"
            ).format(path=path)
        )
    meta = json.loads((path / META_FILE).read_text())
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path} was not written by amp_lessons.core.distributed "
            f"(expected format {CHECKPOINT_FORMAT!r})"
        )
    return meta


def load_sharded(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tensors: dict[str, torch.Tensor],
) -> None:
    """Read a ``save_sharded`` checkpoint into this run's model, optimizer, tensors.

    Each rank reads the pieces its own shards need, whatever the world size that
    wrote them. ``tensors`` are filled in place (give tensors of the saved shapes).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # the optimizer's state is created (as zeros) here, so DCP has tensors to fill
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state, **tensors}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )
    for name, tensor in tensors.items():
        if state[name] is not tensor:
            tensor.copy_(state[name])
