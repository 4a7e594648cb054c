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
    bytes_type_hint,
    call_student,
    grade,
    show_value,
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
    ((5, 2), "fsdp2", 4, 2),  # torch.chunk makes 3 chunks for 4 ranks
]
_HIDDEN = [
    ((7, 3), "fsdp2", 4, 3),
    ((5, 2), "fsdp2", 4, 3),
    ((4096, 4096), "fsdp2", 8, 7),
    ((1,), "fsdp2", 2, 1),
    ((50257, 768), "fsdp2", 64, 63),
    ((50257, 768), "ddp", 64, 63),
    ((11008, 4096), "fsdp2", 64, 0),
]


def _expected(shape, mode: str, world_size: int, rank: int) -> int:
    parts = expected_bytes([shape], mode, world_size, rank, adam_step=False)
    return sum(parts.values())


# The usual wrong answers, each with its hint. A value alone can fit two of them
# (on 3x64 over 2 ranks, forgetting the padding and forgetting the moments both give
# 1_024), so the answer is diagnosed over every case at once: the mistake that
# explains the most of its values gives each row's hint.
_DDP_WHOLE = N_(
    "DDP keeps a whole copy of every parameter, gradient and moment on "
    "every rank: 16 bytes x {numel} values, whatever the world size"
)
_HINTS = {
    "bits": N_("count bytes, not bits (a float32 is 4 bytes)"),
    "ddp_shards": _DDP_WHOLE,
    "ddp_divided": _DDP_WHOLE,
    "numel_over_n": N_(
        "FSDP2 shards whole rows (torch.chunk on dim 0), not numel / N: "
        "{rows} rows on {world_size} ranks are chunks of "
        "ceil({rows}/{world_size}) = {chunk} row(s)"
    ),
    "step": N_(
        "leave out AdamW's 4-byte `step` counter: count the parameter, its "
        "gradient and the two moments"
    ),
    "no_moments": N_(
        "AdamW keeps two fp32 moments per parameter (exp_avg and "
        "exp_avg_sq): 8 more bytes for each value this rank optimizes"
    ),
    "no_padding": N_(
        "the parameter and gradient shards are padded to ceil(rows / N) rows "
        "on every rank (so the all-gather buffers line up); only Adam's "
        "moments follow the rows this rank really has"
    ),
    "rows_held": N_(
        "torch.chunk hands out ceil({rows}/{world_size}) = {chunk} row(s) per rank "
        "until the rows run out: rank {rank} holds {mine} of the {rows} rows here, "
        "so a rank before the last can hold less than a chunk, or none"
    ),
    "floor_chunk": N_(
        "torch.chunk rounds the rows per rank up, not down: {rows} rows on "
        "{world_size} ranks are chunks of ceil({rows}/{world_size}) = {chunk} "
        "row(s), and the last ranks hold what is left"
    ),
    "padded_moments": N_(
        "Adam's moments are zeros_like(the shard): they follow the rows this "
        "rank really has, without the padding"
    ),
    "whole": N_(
        "under FSDP2 a rank keeps only its shard of each tensor, not all of it"
    ),
}


def _mistakes(shape, mode: str, world_size: int, rank: int) -> dict[str, float]:
    """What each usual wrong answer returns for this case (a key of `_HINTS`)."""
    rows, rest = shape[0], math.prod(shape[1:])
    numel, chunk = rows * rest, math.ceil(rows / world_size)
    held, padded = shard_rows(rows, world_size, rank) * rest, chunk * rest
    want = _expected(shape, mode, world_size, rank)
    found = {"bits": 8 * want, "step": want + 4}
    if mode == "ddp":
        sharded = _expected(shape, "fsdp2", world_size, rank)
        return found | {
            "ddp_shards": sharded,
            "ddp_divided": want / world_size,
            "no_moments": 8 * numel,
        }
    # "the last rank gets the rest": every other rank a whole chunk
    last_rows = chunk if rank < world_size - 1 else rows - chunk * (world_size - 1)
    low = rows // world_size  # rows per rank rounded down
    low_mine = max(0, min(low, rows - rank * low))
    return found | {
        "numel_over_n": 16 * numel / world_size,
        "no_moments": 8 * padded,
        "no_padding": 16 * held,
        "padded_moments": 16 * padded,
        "whole": 16 * numel,
        "rows_held": 8 * padded + 8 * last_rows * rest,
        "floor_chunk": 8 * low * rest + 8 * low_mine * rest,
    }


def _ranked_mistakes(answered: list[tuple[tuple, float]]) -> list[str]:
    """The keys of `_HINTS`, the mistakes that explain most of the wrong values in
    `answered` ((case, value) pairs) first; ties keep `_HINTS`' order."""
    score = dict.fromkeys(_HINTS, 0)
    for case, got in answered:
        if got != _expected(*case):
            for key, value in _mistakes(*case).items():
                score[key] += got == value
    return sorted(_HINTS, key=lambda key: -score[key])


def _hint(case: tuple, got: float, ranked: list[str]) -> str:
    shape, mode, world_size, rank = case
    rows, rest = shape[0], math.prod(shape[1:])
    chunk = math.ceil(rows / world_size)
    facts = {
        "numel": rows * rest,
        "rows": rows,
        "world_size": world_size,
        "rank": rank,
        "chunk": chunk,
        "mine": shard_rows(rows, world_size, rank),
    }
    predicted = _mistakes(*case)
    for key in ranked:
        if key in predicted and predicted[key] == got:
            return _(_HINTS[key]).format(**facts)
    if mode == "ddp":
        return _(_DDP_WHOLE).format(**facts)
    return _(
        "parameter + gradient ({padded} padded values each) + two moments "
        "({held} values each), 4 bytes per value"
    ).format(padded=chunk * rest, held=facts["mine"] * rest)


def _row_hint(case: tuple, value: float, want: int, got: Any, ranked: list[str]) -> str:
    """The mistake the value shows; a right value as a float is told to be an int."""
    if value != want:
        return _hint(case, value, ranked)
    return "" if type(got) is int else bytes_type_hint(got)


def _rows(rank_bytes: Callable, hidden: bool) -> list[Row]:
    answers = []  # (case, value or None, what was returned)
    for case in _HIDDEN if hidden else _CASES:
        got = call_student(rank_bytes, *case)
        value = None if isinstance(got, Raised) else as_float(got)
        if type(got) not in (int, float):  # no int/float look-alikes
            value = None
        answers.append((case, value, got))
    ranked = _ranked_mistakes([(c, v) for c, v, _got in answers if v is not None])
    rows = []
    for case, value, got in answers:
        shape, mode, world_size, rank = case
        want = _expected(*case)
        label = f"{mode} {'x'.join(map(str, shape))} N={world_size} r={rank}"
        # visible cases never print the answer (it is the exercise); hidden ones may
        expected = f"{want:_}" if hidden else NOT_SHOWN
        if value is None:
            hint = bytes_type_hint(got)
            rows.append(Row(label, expected, show_value(got, 22), False, hint))
            continue
        ok = value == want and type(got) is int  # "Return an int", the exercise says
        shown = (  # a float shows as one (1024.0): its type is the mistake
            f"{int(value):_}"
            if type(got) is int and math.isfinite(value) and value == int(value)
            else repr(value)
        )
        rows.append(
            Row(label, expected, shown, ok, _row_hint(case, value, want, got, ranked))
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
