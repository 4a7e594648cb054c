"""What a learner's AMP step did, seen from inside: a `torch.amp.GradScaler` that
notes each call the learner's code makes on it, and each backward that reaches the
model, so a check can name the mistake from the calls themselves (not from the text
of the error torch raised, nor by guessing from the numbers).

The scaler behaves exactly as torch's (every method is torch's own, called through);
it only appends to `calls`. A backward is noted as ``"backward"`` when it ran through
a tensor this scaler's `scale` returned and ``"backward_unscaled"`` when it did not;
``"optimizer.step"`` is a step of the optimizer that the scaler's own `step` did not
make. Calls the scaler makes on itself (its `step` unscales first) are not noted.
With two models (a GAN), each is watched under a name: its notes end in ``:name``
(``"backward:g"``, ``"step:d"``), a backward noting each watched model it reached;
``"other_scaler"`` comes before a step of a watched optimizer that another scaler
made; ``"stale_grads:name"``, before the first backward to reach a model since
`calls` was last emptied, when that model's gradients were not cleared (a backward
adds to them). `scaled` keeps what `scale` returned, to tell a scaled loss handed back.

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

import sys
from typing import Any

import torch

__all__ = ["RecordingScaler"]


class RecordingScaler(torch.amp.GradScaler):
    """torch's GradScaler, noting in `calls` what the code using it did, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.scaled: list[torch.Tensor] = []  # what scale returned, in order
        self._inside = (
            0  # > 0 while one of our methods runs: its own calls are not noted
        )
        self._names: dict[int, str] = {}  # id(optimizer) -> ":name" (or "")
        self._watched: set[str] = set()
        self._scaled_for: set[str] = set()  # models the running scaled backward owes
        # the step's max_norm, when a check knows it: gradients whose norm is already
        # max_norm when unscale_ comes were clipped while still scaled
        self.max_norm: float | None = None

    def watch(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, name: str = ""
    ) -> None:
        """Note each backward that reaches `model` and each step of `optimizer` made
        outside the scaler's `step` (under `name` when several are watched)."""
        suffix = f":{name}" if name else ""
        self._names[id(optimizer)] = suffix
        self._watched.add(suffix)
        first = next(p for p in model.parameters() if p.requires_grad)
        # every backward through the model reaches every parameter, the first too
        first.register_hook(lambda grad: self._reached_model(suffix, first))
        optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: self._optimizer_step(suffix)
        )

    def _of(self, optimizer: Any) -> str:
        return self._names.get(id(optimizer), "")

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
        self._scaled_for = set(self._watched)
        # forgotten when this backward ends, so a later plain backward is not scaled
        engine = torch.autograd.Variable._execution_engine
        engine.queue_callback(self._scaled_for.clear)

    def _reached_model(self, suffix: str, first: torch.Tensor) -> None:
        scaled = suffix in self._scaled_for
        self._scaled_for.discard(suffix)
        reached = ("backward" + suffix, "backward_unscaled" + suffix)
        if not any(call in reached for call in self.calls):  # first time this round:
            old = first.grad  # gradients still there from before are added to
            if old is not None and bool(old.detach().ne(0).any()):
                self.calls.append("stale_grads" + suffix)
        self.calls.append(reached[0] if scaled else reached[1])

    def _optimizer_step(self, suffix: str) -> None:
        if self._inside:
            return
        frame = sys._getframe(1)
        while frame is not None:  # a step made by another scaler's step
            owner = frame.f_locals.get("self")
            if issubclass(type(owner), torch.amp.GradScaler) and owner is not self:
                self.calls.append("other_scaler")
                break
            frame = frame.f_back
        self.calls.append("optimizer.step" + suffix)

    def scale(self, outputs: Any) -> Any:
        scaled = self._through("scale", super().scale, outputs)
        if isinstance(scaled, torch.Tensor):
            self.scaled.append(scaled.detach())
            if scaled.requires_grad:
                scaled.register_hook(self._mark_scaled)
        return scaled

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        name = "unscale_" + self._of(optimizer)
        if not self._inside and self._clipped_already(optimizer):
            self.calls.append("clipped_scaled")
        return self._through(name, super().unscale_, optimizer)

    def _clipped_already(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the still-scaled gradients' total norm is max_norm: clipping
        ran before unscale_ (a scaled norm is the scale times the true one, and
        lands on max_norm only by clip_grad_norm_)."""
        if self.max_norm is None:
            return False
        grads = [
            p.grad.detach().float()
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None
        ]
        if not grads:
            return False
        norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        return bool(torch.isclose(norm, torch.tensor(float(self.max_norm)), rtol=1e-3))

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        name = "step" + self._of(optimizer)
        return self._through(name, super().step, optimizer, *args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        return self._through("update", super().update, new_scale)
