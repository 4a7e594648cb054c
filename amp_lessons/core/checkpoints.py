"""Checkpoints of a one-process training run: written atomically, and read back only
when they are ours (notebook 05; sharded ddp/fsdp2 checkpoints are
``amp_lessons.core.distributed``'s)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from amp_lessons.core.errors import CheckpointNotFound, SettingError
from amp_lessons.core.output_files import write_atomically
from amp_lessons.i18n import _

CHECKPOINT_FORMAT = "amp_lessons.core.train/1"


@dataclass
class StepRecord:
    """One optimizer step, as the notebooks plot it."""

    step: int  # 1-based count of optimizer steps, skipped ones included
    loss: float  # mean loss of the step's micro-batches (unscaled)
    scale: float  # loss scale used for this step (1.0 without a scaler)
    skipped: bool  # inf/NaN gradients: the scaler skipped optimizer.step()
    grad_norm: float  # total gradient norm after unscale_, before clipping
    time_ms: float  # wall time of the step, results on the host included


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """``torch.save`` to a temporary file, then rename: a crash leaves no half file.

    The file gets the user's umask; a killed save's leftover is cleaned up by the
    next one (``amp_lessons.core.output_files``).

    Example: ``save_checkpoint("run.pt", {"model": model.state_dict()})``.
    """
    write_atomically(path, lambda f: torch.save(state, f))


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint written by ``train`` (tensors and plain data only).

    Anything else (another program's .pt, a truncated file, a dict that lacks what
    ``train`` saves) is refused with one line saying what is wrong.

    Example: ``load_checkpoint("run.pt")["step"]`` -> ``100``.
    """
    path = Path(path)
    if path.is_dir():
        raise SettingError(
            f"{path} is a sharded checkpoint (written with `distributed='ddp'` or "
            "`distributed='fsdp2'`): resume it with `distributed='ddp'` or "
            "`distributed='fsdp2'` (one process works too)"
        )
    if not path.is_file():
        raise CheckpointNotFound(
            _(
                "no checkpoint at {path}: run once without `resume=True` (with "
                "`checkpoint_path`) to create it"
            ).format(path=path)
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle errors come in many types, some many lines long
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise SettingError(
            f"{path} is not a readable checkpoint ({reason[:120]}); "
            "delete it or point `checkpoint_path` elsewhere"
        ) from None
    problem = _checkpoint_problem(state)
    if problem:
        raise SettingError(
            f"{path} is not a checkpoint written by "
            f"amp_lessons.core.train ({problem}); point "
            "`checkpoint_path` at one, or at a new path to start a "
            "new run"
        )
    return state


_CHECKPOINT_PARTS = {
    "step": int,
    "config": dict,
    "model": dict,
    "optimizer": dict,
    "scaler": dict,
    "data_rng": torch.Tensor,
    "torch_rng": torch.Tensor,
    "records": list,
}


def _checkpoint_problem(state: Any) -> str:
    """What makes `state` not one of ours ("" when it is)."""
    if not isinstance(state, dict):
        return f"it holds a {type(state).__name__}, not a dict"
    if state.get("format") != CHECKPOINT_FORMAT:
        return f"format {state.get('format')!r}, expected {CHECKPOINT_FORMAT!r}"
    for key, kind in _CHECKPOINT_PARTS.items():
        if not isinstance(state.get(key), kind):
            return f"{key!r} is missing or not a {kind.__name__}"
    if "cuda_rng" not in state or not (
        state["cuda_rng"] is None or isinstance(state["cuda_rng"], list)
    ):
        return "'cuda_rng' is missing or not a list of states"
    names = {f.name for f in fields(StepRecord)}
    if not all(isinstance(r, dict) and set(r) == names for r in state["records"]):
        return "its step records do not have the fields of StepRecord"
    if state["step"] != len(state["records"]):
        return f"step {state['step']} but {len(state['records'])} step records"
    return ""
