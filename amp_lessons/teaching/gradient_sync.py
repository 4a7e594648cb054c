"""Gradients between processes: what DDP and FSDP2 send, accumulate and clip under AMP.

Lesson 10. Each function runs one step of the lesson's MLP (lesson 05's spirals task)
and reports what it saw. The notebook calls them in its own kernel, a world of one
process; ``python -m amp_lessons.teaching.gradient_sync`` runs them on every rank under
torchrun, where the tests check what needs two ranks (one clipping norm everywhere,
bf16 reduction when ``reduce_dtype`` is None).

* ``ddp_gradients``: under autocast DDP's parameters and gradients stay fp32, so the
  buckets it all-reduces are fp32; ``no_sync()`` sends no bucket at all; a comm hook
  such as ``fp16_compress_hook`` casts each bucket to 16 bits for the all-reduce
  (half the bytes) and copies the rounded average back into the fp32 gradients.
* ``fsdp2_accumulate``: with ``set_requires_gradient_sync(False)`` FSDP2
  accumulates micro-batch gradients in the policy's ``reduce_dtype`` (fp32 in the
  course), or in the compute dtype (bf16) when ``reduce_dtype`` is None.
* ``fsdp2_clip``: ``clip_grad_norm_`` on FSDP2's DTensor gradients, after
  ``scaler.unscale_``, returns the norm of the whole gradient as a replicated DTensor:
  the same number on every rank.

Not covered here: PowerSGD and other lossy hooks, HSDP, overlapping communication.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from amp_lessons.core.distributed import shard_units, world_of, wrap_model
from amp_lessons.core.precision import PRECISIONS, autocast_context
from amp_lessons.core.train import Task, TrainConfig

CPU = torch.device("cpu")


def lesson_task(seed: int = 0) -> Task:
    """The lesson's task: lesson 05's spirals MLP (2 -> 64 -> 64 -> 3), batch 64."""
    return Task(
        TrainConfig(device="cpu", precision="bf16", batch_size=64, seed=seed), CPU
    )


def rounds_to(tensors: list[torch.Tensor], dtype: torch.dtype) -> bool:
    """Whether every value is exactly a ``dtype`` value (it went through ``dtype``).

    Example: ``rounds_to([torch.tensor([0.1])], torch.float16)`` -> ``False``.
    """
    flat = torch.cat([t.detach().flatten().float() for t in tensors])
    return torch.equal(flat, flat.to(dtype).float())


def ddp_gradients(seed: int = 0) -> dict[str, Any]:
    """A bf16-autocast step of the lesson's MLP under DDP, seen from a comm hook.

    The hook records each bucket (dtype, elements) before all-reducing it as DDP
    would. Then one backward inside ``no_sync()`` and one after it; then the same
    step with ``fp16_compress_hook``. Example (a world of one)::

        ddp_gradients() -> {"parameters": {torch.float32}, "gradients": {torch.float32},
                            "buckets": [(torch.float32, 4547)], "in_no_sync": 0,
                            "after_no_sync": 1, "fp16_hook_rounds": True,
                            "plain_rounds": False, ...}
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    bf16 = PRECISIONS["bf16"]
    task = lesson_task(seed)
    x, y = task.batch()  # the global batch; each rank takes its slice below
    buckets: list[tuple[torch.dtype, int]] = []

    def recording_hook(state, bucket):
        buckets.append((bucket.buffer().dtype, bucket.buffer().numel()))
        return default_hooks.allreduce_hook(state, bucket)

    def step(model, ctx) -> None:
        with ctx:
            loss = task.loss_fn(model(x), y)
        loss.backward()

    with world_of("ddp", CPU) as world:
        x, y = world.split(x, y)
        facts: dict[str, Any] = {"world_size": world.world_size}
        for hook in (recording_hook, default_hooks.fp16_compress_hook):
            torch.manual_seed(seed)
            model, ctx = wrap_model(
                task.make_model(), world, bf16, autocast_context(bf16, CPU)
            )
            model.register_comm_hook(state=None, hook=hook)
            step(model, ctx)
            grads = [p.grad for p in model.parameters()]
            if hook is recording_hook:
                facts["parameters"] = {p.dtype for p in model.parameters()}
                facts["gradients"] = {g.dtype for g in grads}
                facts["buckets"] = list(buckets)
                facts["plain_rounds"] = rounds_to(grads, torch.float16)
                buckets.clear()
                with model.no_sync():  # forward and backward both inside
                    step(model, ctx)
                facts["in_no_sync"] = len(buckets)
                step(model, ctx)  # all-reduces the sum of both backward passes
                facts["after_no_sync"] = len(buckets)
            else:
                facts["fp16_hook_rounds"] = rounds_to(grads, torch.float16)
                facts["fp16_hook_gradients"] = {g.dtype for g in grads}
            del model
    return facts


def fsdp2_accumulate(
    policy: Any, sync_every: bool, micro_batches: int = 4, seed: int = 0
) -> dict[str, Any]:
    """``micro_batches`` backward passes of the lesson's MLP under FSDP2, every unit
    and the root under ``policy``; return the whole gradient the optimizer would get.

    ``sync_every=False`` turns gradient sync off for all but the last micro-batch
    (``set_requires_gradient_sync``): until then no sharded ``.grad`` exists, and
    FSDP2 accumulates the whole, unsharded gradients itself, in ``reduce_dtype``.
    Example: with the course's policy (reduce in fp32) the ``"gradient"`` of
    ``sync_every=True`` and of ``False`` are ``torch.equal``; ``"grad_before_last"``
    is False for ``sync_every=False``.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    task = lesson_task(seed)
    x, y = task.batch()
    with world_of("fsdp2", CPU) as world:
        x, y = world.split(x, y)
        torch.manual_seed(seed)
        model = task.make_model()
        mesh = init_device_mesh("cpu", (world.world_size,))
        for unit in shard_units(model):
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        chunks = list(zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True))
        for i, (x_i, y_i) in enumerate(chunks):
            last = i == len(chunks) - 1
            if last:
                grad_before_last = any(p.grad is not None for p in model.parameters())
            model.set_requires_gradient_sync(sync_every or last)
            (task.loss_fn(model(x_i).float(), y_i) / len(chunks)).backward()
        grad = torch.cat([p.grad.full_tensor().flatten() for p in model.parameters()])
        del model
    return {"gradient": grad, "grad_before_last": grad_before_last}


def fsdp2_clip(max_norm: float = 0.1, seed: int = 0) -> dict[str, Any]:
    """One fp16-policy step of the lesson's MLP under FSDP2 with the course's order:
    scale -> backward -> unscale_ -> clip_grad_norm_ on the DTensor gradients.

    Example (a world of one): ``fsdp2_clip()`` -> ``{"gradient_type": "DTensor",
    "gradient_placements": "(Shard(dim=0),)", "norm_placements": "(Replicate(),)",
    "norm": 0.5, "whole_norm": 0.5, "norm_after": 0.1, ...}``.
    """
    fp16 = PRECISIONS["fp16"]
    task = lesson_task(seed)
    x, y = task.batch()
    with world_of("fsdp2", CPU) as world:
        x, y = world.split(x, y)
        torch.manual_seed(seed)
        model, ctx = wrap_model(task.make_model(), world, fp16, None)
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        with ctx:
            loss = task.loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        grads = [p.grad for p in model.parameters()]
        whole = torch.cat([g.full_tensor().flatten() for g in grads]).norm().item()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        after = torch.cat([g.full_tensor().flatten() for g in grads]).norm().item()
        facts = {
            "gradient_type": type(grads[0]).__name__,
            "gradient_placements": str(getattr(grads[0], "placements", None)),
            "norm_type": type(norm).__name__,
            "norm_placements": str(getattr(norm, "placements", None)),
            "norm": norm.full_tensor().item(),
            "whole_norm": whole,
            "norm_after": after,
            "max_norm": max_norm,
        }
        scaler.step(optimizer)
        scaler.update()
        del model, optimizer
    return facts


def main(argv: list[str] | None = None) -> int:
    """``torchrun --nproc_per_node=2 -m amp_lessons.teaching.gradient_sync --json
    FILE``: every rank's clipping norm, and whether the reduced gradient is bf16-valued
    under the course's policy and under
    ``MixedPrecisionPolicy(param_dtype=torch.bfloat16)``."""
    import argparse
    import json

    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from amp_lessons.core.distributed import (
        end_groups,
        mixed_precision_policy,
        start_world,
    )

    prog = "python -m amp_lessons.teaching.gradient_sync"
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--json", metavar="FILE", default=None)
    args = parser.parse_args(argv)
    world = start_world("fsdp2", CPU)  # the functions below join this group
    try:
        bare = MixedPrecisionPolicy(param_dtype=torch.bfloat16)  # reduce_dtype None
        policies = {
            "course": mixed_precision_policy(PRECISIONS["bf16"]),
            "param_dtype only": bare,
        }
        mine = {"rank": world.rank, "clip": fsdp2_clip()}
        for name, policy in policies.items():
            run = fsdp2_accumulate(policy, sync_every=True, micro_batches=1)
            mine[f"{name}: reduced in bf16"] = rounds_to(
                [run["gradient"]], torch.bfloat16
            )
        gathered: list = [None] * world.world_size
        dist.all_gather_object(gathered, mine)
        world.barrier()
    finally:
        world.close()
    end_groups()
    if world.rank == 0:
        for facts in gathered:
            print(facts)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(gathered, f, indent=1)
    return 0


if __name__ == "__main__":
    from amp_lessons.core.distributed import exit_rank

    code = main()
    exit_rank(code)  # under torchrun: leaves here, past finalization (issue 21)
    raise SystemExit(code)
