"""Lesson 10's grader: the bytes one rank holds for one fp32 parameter under DDP and
under FSDP2 (its parameter, its gradient and AdamW's two moments).

The expected bytes are ``amp_lessons.teaching.rank_memory.expected_bytes``, the formula
the lesson checks against the storages every rank of a 2-process run really holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    NOT_SHOWN,
    Raised,
    Row,
    as_float,
    call_student,
    grade,
    show_value,
    type_hint,
)
from amp_lessons.teaching.rank_memory import expected_bytes, shard_rows

__all__ = ["check_rank_bytes"]

# (shape, mode, world_size, rank): uneven shards, empty shards, 1-D tensors
_CASES = [
    ((5, 2), "ddp", 2, 0),
    ((5, 2), "fsdp2", 2, 0),
    ((5, 2), "fsdp2", 2, 1),
    ((3, 64), "ddp", 8, 5),
    ((3, 64), "fsdp2", 2, 1),
    ((64, 2), "fsdp2", 2, 1),
    ((3,), "fsdp2", 4, 3),
]
_HIDDEN = [
    ((7, 3), "fsdp2", 4, 3),
    ((4096, 4096), "fsdp2", 8, 7),
    ((1,), "fsdp2", 2, 1),
    ((50257, 768), "fsdp2", 64, 63),
    ((50257, 768), "ddp", 64, 63),
    ((11008, 4096), "fsdp2", 64, 0),
]


def _expected(shape, mode: str, world_size: int, rank: int) -> int:
    parts = expected_bytes([shape], mode, world_size, rank, adam_step=False)
    return sum(parts.values())


# the hint for two different wrong answers under DDP
_DDP_WHOLE = N_(
    "DDP keeps a whole copy of every parameter, gradient and moment on "
    "every rank: 16 bytes x {numel} values, whatever the world size"
)


def _hint(shape, mode: str, world_size: int, rank: int, got: float) -> str:
    rows, rest = shape[0], math.prod(shape[1:])
    numel = rows * rest
    held = shard_rows(rows, world_size, rank) * rest
    padded = math.ceil(rows / world_size) * rest
    want = _expected(shape, mode, world_size, rank)
    moments = 8 * (numel if mode == "ddp" else held)
    # the structural mistakes first: a coincidence can make them look like an
    # off-by-4 or a forgotten moment on small shapes
    if got == want * 8:
        return _("count bytes, not bits (a float32 is 4 bytes)")
    if (
        mode == "ddp"
        and got != want
        and got in (want / world_size, _expected(shape, "fsdp2", world_size, rank))
    ):
        return _(_DDP_WHOLE).format(numel=numel)
    if mode == "fsdp2" and got == 16 * numel / world_size:
        return _(
            "FSDP2 shards whole rows (torch.chunk on dim 0), not numel / N: "
            "{rows} rows on {world_size} ranks are chunks of "
            "ceil({rows}/{world_size}) = {chunk} row(s)"
        ).format(rows=rows, world_size=world_size, chunk=math.ceil(rows / world_size))
    if got == want + 4:
        return _(
            "leave out AdamW's 4-byte `step` counter: count the parameter, its "
            "gradient and the two moments"
        )
    if got == want - moments:
        return _(
            "AdamW keeps two fp32 moments per parameter (exp_avg and "
            "exp_avg_sq): 8 more bytes for each value this rank optimizes"
        )
    if mode == "ddp":
        return _(_DDP_WHOLE).format(numel=numel)
    if got == 16 * held:
        return _(
            "the parameter and gradient shards are padded to ceil(rows / N) rows "
            "on every rank (so the all-gather buffers line up); only Adam's "
            "moments follow the rows this rank really has"
        )
    if got == 16 * padded:
        return _(
            "Adam's moments are zeros_like(the shard): they follow the rows this "
            "rank really has, without the padding"
        )
    if got == 16 * numel:
        return _(
            "under FSDP2 a rank keeps only its shard of each tensor, not all of it"
        )
    return _(
        "parameter + gradient ({padded} padded values each) + two moments "
        "({held} values each), 4 bytes per value"
    ).format(padded=padded, held=held)


def _rows(rank_bytes: Callable, hidden: bool) -> list[Row]:
    rows = []
    for shape, mode, world_size, rank in _HIDDEN if hidden else _CASES:
        want = _expected(shape, mode, world_size, rank)
        case = f"{mode} {'x'.join(map(str, shape))} N={world_size} r={rank}"
        got = call_student(rank_bytes, shape, mode, world_size, rank)
        # visible cases never print the answer (it is the exercise); hidden ones may
        expected = f"{want:_}" if hidden else NOT_SHOWN
        value = None if isinstance(got, Raised) else as_float(got)
        if value is None or type(got) not in (int, float):  # no int/float look-alikes
            rows.append(
                Row(
                    case,
                    expected,
                    show_value(got, 22),
                    False,
                    type_hint(got, N_("an int number of bytes")),
                )
            )
            continue
        ok = value == want
        shown = (
            f"{int(value):_}"
            if math.isfinite(value) and value == int(value)
            else repr(value)
        )
        rows.append(
            Row(
                case,
                expected,
                shown,
                ok,
                "" if ok else _hint(shape, mode, world_size, rank, value),
            )
        )
    return rows


def check_rank_bytes(
    rank_bytes: Callable[[tuple, str, int, int], Any], hidden: bool = False
) -> None:
    """Check ``rank_bytes(shape, mode, world_size, rank) -> int``: the bytes ``rank``
    holds at ``optimizer.step()`` for one fp32 parameter of ``shape`` trained with
    AdamW under ``mode`` (``"ddp"`` or ``"fsdp2"``): the parameter, its gradient and
    the two moments, without the 4-byte step counter.

    Example:
        >>> check_rank_bytes(rank_bytes)  # ddp 5x2 on 2 ranks -> 160 on each
    """
    grade("check_rank_bytes", rank_bytes, hidden, _rows)
