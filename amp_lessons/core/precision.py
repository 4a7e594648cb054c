"""Precision settings: what fp32, tf32, fp16 and bf16 each turn on, and the pieces that
make one training loop run them all (autocast context, loss scaler, TF32 mode).

Notebook 05 uses them (``amp_lessons.core.train`` builds its loop from them); notebook
01 uses ``tf32_mode``.
For fp32 and bf16 the scaler is simply disabled (every call is a no-op), so a loop
built from ``autocast_context`` and ``make_scaler`` has one path, not four.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from amp_lessons.core.device import EMULATION_NOTE
from amp_lessons.core.errors import SettingError, SettingUnavailable
from amp_lessons.i18n import N_, _


@dataclass(frozen=True)
class Precision:
    """How one precision setting runs: what autocast casts to, TF32, the scaler."""

    name: str
    dtype: torch.dtype  # autocast's target dtype (float32: autocast stays off)
    autocast: bool
    tf32: bool  # let fp32 matmuls use TF32 tensor cores (CUDA Ampere+ only)
    needs_scaler: bool  # fp16's 5 exponent bits make small gradients flush to zero
    summary: str  # English, marked with N_: shown as _(summary)


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision(
            "fp32",
            torch.float32,
            False,
            False,
            False,
            N_("float32 everywhere, TF32 off: the reference"),
        ),
        Precision(
            "tf32",
            torch.float32,
            False,
            True,
            False,
            N_("float32 tensors, matmuls on TF32 tensor cores (10-bit mantissa)"),
        ),
        Precision(
            "fp16",
            torch.float16,
            True,
            False,
            True,
            N_("autocast to float16 + loss scaling, fp32 master weights"),
        ),
        Precision(
            "bf16",
            torch.bfloat16,
            True,
            False,
            False,
            N_("autocast to bfloat16, fp32 master weights, no scaler needed"),
        ),
    )
}
SCALERS = ("auto", "torch", "ours", "none")


class SlowOnThisDeviceWarning(UserWarning):
    """A precision that works here but runs much slower than fp32 (fp16 on a CPU)."""


def resolve_precision(
    name: str, device: torch.device | str = "cpu", warn: bool = True
) -> Precision:
    """Look up a precision and check the device can run it.

    Warns (SlowOnThisDeviceWarning) for fp16 on a CPU, where it works but is slow;
    ``warn=False`` leaves that to the caller (see ``slow_note``).

    Example: ``resolve_precision("bf16").dtype is torch.bfloat16``;
    ``resolve_precision("fp8")`` raises "unknown precision 'fp8'; use one of: ...".
    """
    if name not in PRECISIONS:
        raise ValueError(
            _("unknown precision {value}; use one of: {choices}").format(
                value=repr(name), choices=", ".join(PRECISIONS)
            )
        )
    precision = PRECISIONS[name]
    device = torch.device(device)
    if name == "bf16" and device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < (8, 0):
            gpu = torch.cuda.get_device_name(device)
            raise SettingUnavailable(
                f"bf16 needs a GPU with native bfloat16 (compute capability 8.0+, "
                f"Ampere or newer); {gpu} is {capability[0]}.{capability[1]}, where "
                "torch would emulate it slowly. Fix: use `precision='fp16'` (with its "
                "loss scaler)."
            )
    note = slow_note(precision, device)
    if warn and note:
        warnings.warn(note, SlowOnThisDeviceWarning, stacklevel=2)
    return precision


def slow_note(precision: Precision, device: torch.device | str) -> str | None:
    """A note when a precision works on a device but is slow there, else None.

    Example: ``slow_note(PRECISIONS["fp16"], "cpu")`` -> "fp16 on a CPU works but ...".
    """
    if precision.name == "fp16" and torch.device(device).type == "cpu":
        return _("fp16 on a CPU works but is slow. ") + _(EMULATION_NOTE)
    return None


@contextmanager
def tf32_mode(enabled: bool, device_type: str = "cuda") -> Iterator[None]:
    """Allow (or forbid) TF32 for fp32 matmuls and convolutions, then restore.

    TF32 exists on NVIDIA GPUs from Ampere on; for any other ``device_type`` nothing
    is touched (so CPU math never changes).

    Example::

        with tf32_mode(False):   # an honest fp32 baseline, even where TF32 is on
            y = a @ b
    """
    if device_type != "cuda":
        yield
        return
    b = torch.backends
    # torch >= 2.9 keeps a legacy flag and a per-backend `fp32_precision` and raises
    # when they disagree. The legacy setters update both, so inside they agree; on
    # the way out every readable setting is put back as it was.
    per_backend = {
        obj: obj.fp32_precision
        for obj in (
            b.cuda.matmul,
            getattr(b.cudnn, "conv", None),
            getattr(b.cudnn, "rnn", None),
            getattr(b.mkldnn, "matmul", None),
        )
        if obj is not None and hasattr(obj, "fp32_precision")
    }
    matmul = _read_or_none(torch.get_float32_matmul_precision)
    cudnn = _read_or_none(lambda: b.cudnn.allow_tf32)
    b.cuda.matmul.allow_tf32 = b.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        if matmul in ("highest", "high"):
            b.cuda.matmul.allow_tf32 = matmul == "high"
        elif matmul is not None:
            torch.set_float32_matmul_precision(matmul)
        if cudnn is not None:
            b.cudnn.allow_tf32 = cudnn
        for obj, value in per_backend.items():
            obj.fp32_precision = value


def _read_or_none(getter: Callable[[], Any]) -> Any:
    try:
        return getter()
    except RuntimeError:  # the caller mixed torch's two TF32 APIs: unreadable
        return None


def autocast_context(precision: Precision, device: torch.device | str):
    """The autocast context for a precision: on for fp16/bf16, a no-op otherwise.

    Example::

        ctx = autocast_context(PRECISIONS["bf16"], "cpu")
        with ctx:
            assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype is torch.bfloat16
    """
    device_type = torch.device(device).type
    return torch.amp.autocast(
        device_type, dtype=precision.dtype, enabled=precision.autocast
    )


def make_scaler(
    precision: Precision,
    device: torch.device | str,
    scaler: str = "auto",
    init_scale: float = 2.0**16,
    growth_interval: int = 2000,
):
    """The loss scaler for a precision: enabled only for fp16.

    ``scaler``: ``"auto"`` (torch's GradScaler for fp16, disabled otherwise),
    ``"torch"`` (torch.amp.GradScaler), ``"ours"`` (amp_lessons.core.scaler.LossScaler,
    written in lesson 03) or ``"none"`` (disabled: fp16 without scaling, to watch
    gradients underflow). Asking for a scaler with any precision but fp16 is an error.

    Example: ``make_scaler(PRECISIONS["fp16"], "cpu").get_scale() == 65536.0``;
    ``make_scaler(PRECISIONS["bf16"], "cpu").is_enabled() is False``.
    """
    validate_scaler_choice(precision, scaler)
    device_type = torch.device(device).type
    enabled = precision.needs_scaler and scaler != "none"
    if enabled and scaler == "ours":
        from amp_lessons.core.scaler import LossScaler  # written alongside, lesson 03

        return LossScaler(
            device_type, init_scale=init_scale, growth_interval=growth_interval
        )
    return torch.amp.GradScaler(
        device_type,
        init_scale=init_scale,
        growth_interval=growth_interval,
        enabled=enabled,
    )


def validate_scaler_choice(precision: Precision, scaler: str) -> None:
    """Refuse an unknown scaler name, or a scaler with a precision that needs none.

    Example: ``validate_scaler_choice(PRECISIONS["bf16"], "torch")`` raises "a loss
    scaler is not needed with bf16: ...".
    """
    if scaler not in SCALERS:
        raise ValueError(
            _("unknown scaler {value}; use one of: {choices}").format(
                value=repr(scaler), choices=", ".join(SCALERS)
            )
        )
    if scaler in ("torch", "ours") and not precision.needs_scaler:
        why = (
            _(
                "bf16 has fp32's 8 exponent bits, so gradients do not underflow the "
                "way they do in fp16"
            )
            if precision.name == "bf16"
            else _("{precision} gradients are float32").format(precision=precision.name)
        )
        raise SettingError(
            _(
                "a loss scaler is not needed with {precision}: {why}. Scaling "
                "would only cost time. Fix: use `scaler='auto'` (or `scaler='none'`), "
                "or `precision='fp16'` if you want to study loss scaling."
            ).format(precision=precision.name, why=why)
        )
