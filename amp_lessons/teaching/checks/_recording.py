"""What a learner's AMP step did, seen from inside: a `torch.amp.GradScaler` that
notes each call the learner's code makes on it, and each backward that reaches the
model, so a check can name the mistake from the calls themselves (not from the text
of the error torch raised, nor by guessing from the numbers).

The scaler behaves exactly as torch's (every method is torch's own, called through);
it only appends to `calls`. A backward is noted as ``"backward"`` when it ran through
a tensor this scaler's `scale` returned and ``"backward_unscaled"`` when it did not;
``"optimizer.step"`` is a step of the optimizer that the scaler's own `step` did not
make. Calls the scaler makes on itself (its `step` unscales first) are not noted.

Example:
    >>> model = torch.nn.Linear(2, 1)
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> scaler = RecordingScaler("cpu")
    >>> scaler.watch(model, optimizer)
    >>> model(torch.ones(1, 2)).sum().backward()
    >>> optimizer.step()
    >>> scaler.calls
    ['backward_unscaled', 'optimizer.step']
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RecordingScaler"]


class RecordingScaler(torch.amp.GradScaler):
    """torch's GradScaler, noting in `calls` what the code using it did, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self._inside = (
            0  # > 0 while one of our methods runs: its own calls are not noted
        )
        self._through_scaled = False  # the running backward passed a scaled tensor

    def watch(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Note each backward that reaches `model` and each step of `optimizer` made
        outside the scaler's `step`."""
        first = next(p for p in model.parameters() if p.requires_grad)
        first.register_hook(self._reached_model)  # every backward reaches every param
        optimizer.register_step_pre_hook(self._optimizer_step)

    def _note(self, name: str) -> None:
        if not self._inside:
            self.calls.append(name)

    def _through(self, name: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        self._note(name)
        self._inside += 1
        try:
            return method(*args, **kwargs)
        finally:
            self._inside -= 1

    def _mark_scaled(self, grad: torch.Tensor) -> None:
        self._through_scaled = True

    def _reached_model(self, grad: torch.Tensor) -> None:
        self.calls.append("backward" if self._through_scaled else "backward_unscaled")
        self._through_scaled = False

    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._note("optimizer.step")

    def scale(self, outputs: Any) -> Any:
        scaled = self._through("scale", super().scale, outputs)
        if isinstance(scaled, torch.Tensor) and scaled.requires_grad:
            scaled.register_hook(self._mark_scaled)
        return scaled

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        return self._through("unscale_", super().unscale_, optimizer)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        return self._through("step", super().step, optimizer, *args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        return self._through("update", super().update, new_scale)
