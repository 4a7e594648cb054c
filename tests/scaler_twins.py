"""The twin-run harness of tests/test_scaler.py and tests/test_scaler_fused.py: the same
tiny fp16-autocast model trained twice from one seed, once with torch.amp.GradScaler
and once with LossScaler, with scripted overflows, recording after every iteration
the scale, the growth tracker, the state_dict, what step() returned and the bits of
every parameter, gradient and optimizer-state tensor; and a signalling NaN."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lessons.core.formats import tensor_bits
from amp_lessons.core.scaler import LossScaler

SCALERS = {"torch": torch.amp.GradScaler, "ours": LossScaler}

OPTIMIZERS: dict[str, Callable[[list[torch.Tensor]], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1),
    "sgd_momentum": lambda params: torch.optim.SGD(
        params, lr=0.05, momentum=0.9, weight_decay=1e-3
    ),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-2),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1),
    # fused=True: the optimizer unscales and skips inside its own kernel (on the CPU
    # too since torch 2.4); tests/test_scaler_fused.py has the cases special to them.
    "adam_fused": lambda params: torch.optim.Adam(params, lr=1e-2, fused=True),
    "adamw_fused": lambda params: torch.optim.AdamW(
        params, lr=1e-2, weight_decay=0.1, fused=True
    ),
    "sgd_fused": lambda params: torch.optim.SGD(
        params, lr=0.05, momentum=0.9, weight_decay=1e-3, fused=True
    ),
    "adagrad_fused": lambda params: torch.optim.Adagrad(params, lr=0.1, fused=True),
}


class Mismatch(AssertionError):
    """The two runs differ (and not for any other reason)."""


def assert_same(a: Any, b: Any, path: str = "run") -> None:
    """Recursively equal, bit for bit for tensors and with the same Python types."""
    try:
        _assert_same(a, b, path)
    except AssertionError as error:
        raise Mismatch(str(error)) from None


def _assert_same(a: Any, b: Any, path: str) -> None:
    assert type(a) is type(b), f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a} vs {b}"
        assert torch.equal(a, b), f"{path}: bits differ\n{a}\n{b}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{path}: keys {a.keys()} vs {b.keys()}"
        for key in a:
            _assert_same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), f"{path}: nan vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def grad_bits(p: torch.Tensor) -> Any:
    if p.grad is None:
        return None
    if p.grad.is_sparse:
        return (tensor_bits(p.grad._indices()), tensor_bits(p.grad._values()))
    return tensor_bits(p.grad)


def snapshot(scaler, model, optimizers, returned) -> dict[str, Any]:
    states = [opt.state_dict()["state"] for opt in optimizers]
    return {
        "scale": scaler.get_scale(),
        "growth_tracker": scaler._get_growth_tracker(),
        "state_dict": scaler.state_dict(),
        "returned": returned,
        "params": [tensor_bits(p) for p in model.parameters()],
        "grads": [grad_bits(p) for p in model.parameters()],
        "optimizer_state": [
            {
                i: {
                    k: tensor_bits(v) if torch.is_tensor(v) else v for k, v in s.items()
                }
                for i, s in state.items()
            }
            for state in states
        ],
    }


def make_model(dtype: torch.dtype = torch.float32) -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)
    )
    return model.to(dtype)


def train(
    scaler_cls: type,
    *,
    scaler_kwargs: dict | None = None,
    optimizer: str = "adam",
    num_optimizers: int = 1,
    num_steps: int = 10,
    inject: dict[int, list[tuple]] | None = None,
    unscale_first: bool = False,
    clip: float | None = None,
    accumulate: int = 1,
    new_scale: dict[int, Any] | None = None,
    after_update: dict[int, Callable] | None = None,
    model_dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> list[dict[str, Any]]:
    """One scripted run; returns a snapshot per iteration.

    inject[step] holds events: ("loss", factor) multiplies the first micro-batch's
    loss; ("grad", i, value) writes value into a gradient of optimizer i.
    after_update[step](scaler) returns the scaler to go on with (checkpoint/resume).
    """
    inject, new_scale, after_update = inject or {}, new_scale or {}, after_update or {}
    model = make_model(model_dtype).to(device)
    layers = [model[0], model[2], model[4]]
    # One optimizer: all layers. Two: the first two layers, and the last one.
    parts = [layers] if num_optimizers == 1 else [layers[:2], layers[2:]]
    optimizers = [
        OPTIMIZERS[optimizer]([p for layer in part for p in layer.parameters()])
        for part in parts
    ]
    scaler = scaler_cls(device, **(scaler_kwargs or {}))
    data = torch.Generator().manual_seed(1)
    trace = []
    for step in range(num_steps):
        events = inject.get(step, [])
        for micro in range(accumulate):
            x = torch.randn(4, 6, generator=data).to(device, model_dtype) * 2
            y = torch.randn(4, 3, generator=data).to(device, model_dtype)
            with torch.amp.autocast(device, dtype=torch.float16):
                loss = F.mse_loss(model(x), y)
            for event in events:
                if event[0] == "loss" and micro == 0:
                    loss = loss * event[1]
            scaler.scale(loss / accumulate).backward()
        for event in events:
            if event[0] == "grad":
                _, i, value = event
                optimizers[i].param_groups[0]["params"][0].grad.view(-1)[0] = value
        if unscale_first or clip is not None:
            for opt in optimizers:
                scaler.unscale_(opt)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        returned = [scaler.step(opt) for opt in optimizers]
        scaler.update(new_scale.get(step))
        trace.append(snapshot(scaler, model, optimizers, returned))
        if step in after_update:
            scaler = after_update[step](scaler)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
    return trace


def assert_twins(**script) -> list[dict[str, Any]]:
    """Run the script with both scalers: they must agree bit for bit; torch's run."""
    expected = train(torch.amp.GradScaler, **script)
    assert_same(expected, train(LossScaler, **script))
    return expected


SIGNALLING_NAN_BITS = {torch.float32: 0x7FA00001, torch.float64: 0x7FF4000000000001,
                       torch.float16: 0xFC01 - 2**16,  # negative in 16 bits
                       torch.bfloat16: 0xFF81 - 2**16}  # fmt: skip


def signalling_nan(dtype: torch.dtype) -> torch.Tensor:
    """A NaN with its quiet bit clear and a payload: arithmetic rewrites such bits,
    a copy keeps them."""
    int_dtype = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    return torch.tensor(SIGNALLING_NAN_BITS[dtype], dtype=int_dtype).view(dtype)
