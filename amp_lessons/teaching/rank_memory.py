"""Memory per rank: the exact bytes of parameters, gradients and optimizer state that
each process holds under DDP and under FSDP2, with fp32 and with the bf16 policy.

Lesson 10. Predicted from the parameter shapes alone (``expected_bytes``), checked
against the tensors a rank really holds (``held_bytes``), then applied on paper to a
7B model on 8 and 64 GPUs. What the numbers say:

* DDP keeps everything whole on every rank: 4 (weights) + 4 (gradients) + 8 (Adam's
  two moments) = 16 bytes per parameter, whatever the number of GPUs.
* FSDP2 keeps 1/N of each. A shard is whole rows (``torch.chunk`` on dim 0, so a
  5-row weight on 2 ranks is 3 + 2 rows); parameter and gradient shards are padded
  to ``ceil(rows / N)`` rows so the all-gather buffers line up, while Adam's moments
  follow the unpadded shard.
* bf16 changes none of these: autocast and FSDP2's ``MixedPrecisionPolicy`` both keep
  fp32 master weights, gradients and optimizer state. What bf16 adds are short-lived
  low-precision copies of the weights while a unit computes.

Not counted: activations (see ``amp_lessons.core.memory``), communication buffers, the
CUDA caching allocator's slack.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn

from amp_lessons import i18n
from amp_lessons.i18n import N_, _

STATE_KINDS = (N_("parameters"), N_("gradients"), N_("optimizer"))  # also keys
HEADER = (N_("mode"), N_("precision"), N_("ranks"), N_("rank"))  # format_table's
ADAM_STEP_BYTES = 4  # AdamW's per-parameter `step` counter: a 0-d float32 tensor


def shard_rows(rows: int, world_size: int, rank: int) -> int:
    """Rows of a ``rows``-row tensor that FSDP2 gives ``rank``: ``torch.chunk`` rules.

    Example: ``[shard_rows(5, 2, r) for r in (0, 1)] == [3, 2]``;
    ``[shard_rows(3, 4, r) for r in range(4)] == [1, 1, 1, 0]``.
    """
    chunk = math.ceil(rows / world_size)
    return max(0, min(chunk, rows - rank * chunk))


def expected_bytes(
    shapes: Iterable[Sequence[int]],
    mode: str,
    world_size: int = 1,
    rank: int = 0,
    dtype_bytes: int = 4,
    adam_step: bool = True,
) -> dict[str, int]:
    """Bytes of parameters, gradients and AdamW state on ``rank`` at optimizer.step().

    ``mode``: ``"ddp"`` (or ``"none"``) keeps whole tensors; ``"fsdp2"`` keeps padded
    parameter and gradient shards and unpadded moment shards. ``dtype_bytes`` is the
    stored (master) dtype's size: 4 for fp32, with or without a bf16 policy.

    Example (one 5 x 2 fp32 weight, FSDP2 on 2 ranks, rank 1 holds 2 of 5 rows)::

        expected_bytes([(5, 2)], "fsdp2", 2, rank=1)
        # {'parameters': 24, 'gradients': 24, 'optimizer': 36}  (3 padded rows x 2 x 4;
        #  2 moments x 2 rows x 2 x 4 + the 4-byte step)
    """
    if mode not in ("none", "ddp", "fsdp2"):
        raise ValueError(f"mode must be none, ddp or fsdp2, got {mode!r}")
    if not (0 <= rank < world_size):
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    total = dict.fromkeys(STATE_KINDS, 0)
    for shape in shapes:
        rows, rest = (shape[0], math.prod(shape[1:])) if len(shape) else (1, 1)
        if mode == "fsdp2":
            padded = math.ceil(rows / world_size) * rest
            held = shard_rows(rows, world_size, rank) * rest
        else:
            padded = held = rows * rest
        total["parameters"] += padded * dtype_bytes
        total["gradients"] += padded * dtype_bytes
        total["optimizer"] += 2 * held * dtype_bytes + ADAM_STEP_BYTES * adam_step
    return total


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the distinct storages behind this rank's parameters, gradients and
    optimizer state (DTensors are counted by their local shard's storage).

    Storages, not tensors: DDP's gradients are views into its all-reduce buckets and
    FSDP2's into one reduce-scatter buffer per unit, and counting each view's
    ``numel`` would miss the padding. Call it after ``optimizer.step()``, before
    ``zero_grad``.

    Example: ``held_bytes(nn.Linear(2, 3), AdamW(...))`` after one step ->
    ``{'parameters': 36, 'gradients': 36, 'optimizer': 80}``.
    """

    def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
        seen: dict[int, int] = {}
        for t in tensors:
            local = t.to_local() if hasattr(t, "to_local") else t
            storage = local.untyped_storage()
            seen[storage.data_ptr() or id(local)] = storage.nbytes()
        return sum(seen.values())

    params = list(model.parameters())
    states = [
        v
        for p in params
        for v in optimizer.state.get(p, {}).values()
        if isinstance(v, torch.Tensor)
    ]
    return {
        "parameters": storage_bytes(params),
        "gradients": storage_bytes(p.grad for p in params if p.grad is not None),
        "optimizer": storage_bytes(states),
    }


def llama_7b_shapes() -> list[tuple[int, ...]]:
    """The parameter shapes of Llama-2-7B (6,738,415,616 parameters): 32 layers of
    width 4096, MLP 11008, vocabulary 32000, untied input and output embeddings.

    Example: ``sum(math.prod(s) for s in llama_7b_shapes()) == 6_738_415_616``.
    """
    d, ffn, vocab = 4096, 11008, 32000
    layer = [(d, d)] * 4 + [(ffn, d), (ffn, d), (d, ffn), (d,), (d,)]
    return [(vocab, d)] + layer * 32 + [(d,), (vocab, d)]


@dataclass
class MemoryRow:
    """One line of the per-rank table."""

    mode: str  # ddp | fsdp2
    precision: str  # fp32 | bf16
    world_size: int
    rank: int
    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def paper_table(
    shapes: Sequence[Sequence[int]], world_sizes: Sequence[int] = (8, 64)
) -> list[MemoryRow]:
    """Per-rank bytes on paper for DDP and FSDP2 at each world size (rank 0, the
    largest shard), fp32 and bf16 alike: the policy does not change stored state.

    Example: for Llama-2-7B, DDP on 8 GPUs needs 107.8 GB per GPU before any
    activation (it does not fit in 80 GB); FSDP2 on 8 needs 13.5 GB.
    """
    rows = []
    for n in world_sizes:
        for mode in ("ddp", "fsdp2"):
            for precision in ("fp32", "bf16"):
                rows.append(
                    MemoryRow(
                        mode, precision, n, 0, **expected_bytes(shapes, mode, n, 0)
                    )
                )
    return rows


def format_table(
    rows: Sequence[MemoryRow], unit: float = 1.0, budget: float | None = None
) -> str:
    """The rows as an aligned text table; ``unit=1e9`` prints GB, ``budget`` (in the
    same unit) adds a "fits" column. Its words and numbers are the reader's language's
    (``amp_lessons.set_language``).

    Example: ``print(format_table(paper_table(llama_7b_shapes()), 1e9, budget=80))``.
    """

    def number(value: int) -> str:  # 131,072 in English, 131072 in Spanish
        return i18n.number(value) if unit == 1 else i18n.number(value / unit, ".2f")

    header = [_(word) for word in (*HEADER, *STATE_KINDS, "total")]
    if budget is not None:
        header.append(_("fits"))
    lines = [header]
    for r in rows:
        line = [
            r.mode,
            r.precision,
            str(r.world_size),
            str(r.rank),
            *(number(getattr(r, k)) for k in STATE_KINDS),
            number(r.total),
        ]
        if budget is not None:
            line.append(_("yes") if r.total / unit <= budget else _("no"))
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True))
        for line in lines
    )


def measure_ranks(sizes: Sequence[int] = (2, 64, 64, 3), seed: int = 0) -> list[dict]:
    """Run one AdamW step of an MLP under DDP and FSDP2, fp32 and bf16, on this rank;
    return, per configuration, what the rank holds and what ``expected_bytes`` says.

    Runs inside a process group (``torchrun ... -m amp_lessons.teaching.rank_memory``);
    every rank returns its own rows. bf16 is autocast under DDP and the policy under
    FSDP2.
    """
    import torch.distributed as dist

    from amp_lessons.core.distributed import World, wrap_model
    from amp_lessons.core.models import MLP
    from amp_lessons.core.precision import PRECISIONS, autocast_context

    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    rows = []
    for mode in ("ddp", "fsdp2"):
        for name in ("fp32", "bf16"):
            torch.manual_seed(seed)
            model = MLP(sizes)
            shapes = [tuple(p.shape) for p in model.parameters()]
            precision = PRECISIONS[name]
            world = World(mode, rank, world_size, device)
            model, ctx = wrap_model(
                model, world, precision, autocast_context(precision, device)
            )
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            x = torch.randn(8, sizes[0], generator=torch.Generator().manual_seed(seed))
            with ctx:
                loss = model(x).float().pow(2).mean()
            loss.backward()
            optimizer.step()
            rows.append(
                {
                    "mode": mode,
                    "precision": name,
                    "world_size": world_size,
                    "rank": rank,
                    "held": held_bytes(model, optimizer),
                    "expected": expected_bytes(shapes, mode, world_size, rank),
                }
            )
            optimizer.zero_grad(set_to_none=True)
    return rows


def rows_from(measured: Sequence[dict], key: str = "held") -> list[MemoryRow]:
    """``MemoryRow``s from ``measure_ranks`` results (``key``: held or expected)."""
    return [
        MemoryRow(m["mode"], m["precision"], m["world_size"], m["rank"], **m[key])
        for m in measured
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``torchrun --nproc_per_node=2 -m amp_lessons.teaching.rank_memory [--json F]``:
    print (and save to F) what every rank holds beside what ``expected_bytes`` says."""
    import argparse
    import json

    import torch.distributed as dist

    parser = argparse.ArgumentParser(prog="python -m amp_lessons.teaching.rank_memory")
    parser.add_argument("--json", metavar="FILE", default=None)
    args = parser.parse_args(argv)
    from amp_lessons.core.distributed import end_groups, start_world
    from amp_lessons.i18n import LANGUAGES, _, set_language

    # launch() passes on the language its caller prints in (a Spanish lesson's)
    lang = os.environ.get("LANGUAGE", "")
    set_language(lang if lang in LANGUAGES else "en")

    world = start_world("ddp", torch.device("cpu"))
    try:
        mine = measure_ranks()  # its DDP and FSDP2 models are gone when it returns
        gathered: list = [None] * world.world_size
        dist.all_gather_object(gathered, mine)
        world.barrier()  # every rank done talking before any ends the group
    finally:
        world.close()
    end_groups()  # destroyed here, not at interpreter exit (issue 21)
    if world.rank:
        return 0
    measured = sorted(
        (m for ms in gathered for m in ms),
        key=lambda m: (m["mode"], m["precision"], m["rank"]),
    )
    print(
        _("bytes each rank holds after one AdamW step ({n} ranks):").format(
            n=world.world_size
        )
    )
    print(format_table(rows_from(measured)))
    wrong = [m for m in measured if m["held"] != m["expected"]]
    for m in wrong:
        print(
            f"MISMATCH {m['mode']} {m['precision']} rank {m['rank']}: held "
            f"{m['held']}, expected {m['expected']}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"measured": measured, "torch": torch.__version__}, f, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    from amp_lessons.core.distributed import exit_rank

    code = main()
    exit_rank(code)  # under torchrun: leaves here, past finalization (issue 21)
    raise SystemExit(code)
