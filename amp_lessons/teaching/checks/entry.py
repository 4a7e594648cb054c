"""The entry lesson's graders (notebooks/00_amp_in_10_minutes): the AMP step the reader
writes, and the reader's prediction and one question, graded as a pair.

`check_entry_amp_step` runs the reader's `amp_step` for a few steps on a tiny model
beside the same step written with a real `torch.amp.GradScaler`, and compares the
parameters, the scale and the growth tracker bit for bit, an overflow included. A
wrong run is matched against the mistakes readers make (each run the same way) to
name the one made. `check_entry_quiz` says only whether both answers are right: told
which one is wrong, a reader could pass by trying letters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from amp_lessons.core.formats import same_bits
from amp_lessons.i18n import N_, _
from amp_lessons.teaching.checks._engine import (
    NOT_SHOWN,
    Raised,
    Row,
    answer_of_type,
    answered_row,
    as_choice,
    call_student,
    grade,
    show_value,
)

__all__ = ["ENTRY_QUESTIONS", "check_entry_amp_step", "check_entry_quiz"]


# --- the AMP step ---------------------------------------------------------------


@dataclass(frozen=True)
class _StepCase:
    name: str
    optimizer: str
    init_scale: float
    growth_interval: int
    targets: tuple[float, ...]  # the size of each step's target: 1e6 overflows


_CASES = (
    _StepCase(N_("3 steps, SGD"), "sgd", 2.0**16, 2000, (1.0, 1.0, 1.0)),
    _StepCase(N_("overflow at step 2 of 3"), "sgd", 2.0**16, 2000, (1.0, 1e6, 1.0)),
)
_HIDDEN = (
    _StepCase(N_("Adam, overflow at step 1 of 3"), "adam", 2.0**16, 2000,
              (1e6, 1.0, 1.0)),
    _StepCase(N_("growth after every clean step"), "sgd", 2.0**8, 1, (1.0, 1.0, 1.0)),
)  # fmt: skip


def _reference_step(model, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def _mistaken_step(mistake: str) -> Callable:
    """The lesson's step with one mistake readers make, to recognise it in a run."""

    def step(model, optimizer, scaler, x, y):
        optimizer.zero_grad()
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if mistake == "unscale_then_optimizer_step":
            scaler.unscale_(optimizer)
            optimizer.step()
        else:
            scaler.step(optimizer)
        scaler.update()
        return loss

    return step


_MISTAKES = {
    "unscale_then_optimizer_step": N_(
        "on the overflow step your step applied inf: optimizer.step() never skips. "
        "scaler.step(optimizer) unscales and skips a step whose gradients hold "
        "inf/NaN"),
}  # fmt: skip
_ERRORS = {
    "No inf checks were recorded": N_(
        "the gradients went to the optimizer without scaler.step(optimizer), so "
        "scaler.update() found no inf check to act on: call scaler.step(optimizer) "
        "instead of optimizer.step()"),
    "_scale is None": N_(
        "backward ran on the unscaled loss, so the scaler has no scale to divide "
        "by (and in fp16 the gradients below 2^-24 were already lost): call "
        "scaler.scale(loss).backward()"),
    "step() has already been called since the last update()": N_(
        "scaler.step ran twice in one step: call it once, then the given "
        "scaler.update()"),
    "has already been called on this optimizer since the last update": N_(
        "the scaler unscaled twice in one step: call scaler.step(optimizer) once"),
}  # fmt: skip


def _make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-2)
    return torch.optim.SGD(params, lr=0.1)


def _run(amp_step: Callable, case: _StepCase) -> Any:
    """(params, scale, growth tracker) after the case's steps, or Raised."""
    torch.manual_seed(11)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = _make_optimizer(case.optimizer, model.parameters())
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=case.init_scale, growth_interval=case.growth_interval
    )
    gen = torch.Generator().manual_seed(12)
    for size in case.targets:
        x = torch.randn(16, 4, generator=gen) * 2**-6  # small: gradients near 2^-24
        y = torch.randn(16, 2, generator=gen) * size * 2**-6
        got = call_student(amp_step, model, optimizer, scaler, x, y)
        if isinstance(got, Raised):
            return got
    params = [p.detach().clone() for p in model.parameters()]
    return params, scaler.get_scale(), scaler.state_dict()["_growth_tracker"]


def _same_run(a: Any, b: Any) -> bool:
    if isinstance(a, Raised) or isinstance(b, Raised):
        return False
    (pa, *sa), (pb, *sb) = a, b
    return sa == sb and all(same_bits(x, y) for x, y in zip(pa, pb, strict=True))


def _step_hint(case: _StepCase, got: Any) -> str:
    if isinstance(got, Raised):
        for fragment, hint in _ERRORS.items():
            if fragment in got.message:
                return _(hint)
        return got.hint
    for mistake, hint in _MISTAKES.items():
        if _same_run(got, _run(_mistaken_step(mistake), case)):
            return _(hint)
    if any(not torch.isfinite(p).all() for p in got[0]):
        return _(
            "a parameter is inf or NaN: a step with inf/NaN gradients was not "
            "skipped; scaler.step(optimizer) skips it"
        )
    return _(
        "write the two lines the lesson names: scaler.scale(loss).backward(), "
        "then scaler.step(optimizer); zero_grad, the forward pass and "
        "scaler.update() are given"
    )


def _describe(run: Any) -> str:
    if isinstance(run, Raised):
        return str(run)
    return _("scale {scale}").format(scale=show_value(run[1]))


def _step_rows(amp_step: Callable, hidden: bool) -> list[Row]:
    rows = []
    for case in _HIDDEN if hidden else _CASES:
        expected, got = _run(_reference_step, case), _run(amp_step, case)
        ok = _same_run(got, expected)
        shown = _describe(got)
        if not ok and not isinstance(got, Raised) and got[1:] == expected[1:]:
            shown = _("params differ")
        rows.append(
            Row(
                _(case.name),
                _describe(expected),
                shown,
                ok,
                "" if ok else _step_hint(case, got),
            )
        )
    return rows


def check_entry_amp_step(amp_step: Callable, hidden: bool = False) -> None:
    """Check `amp_step(model, optimizer, scaler, x, y)`: one AMP step in which the
    reader writes the scaled backward and the scaler's step.

    Each case runs the reader's step for 3 steps on a tiny model (fp16 autocast on
    the CPU) beside the reference step with a real `torch.amp.GradScaler`;
    parameters, scale and growth tracker must match bit for bit. The visible cases
    include an overflow; the hidden ones use Adam and a scale that grows every step.

    Example:
        >>> check_entry_amp_step(amp_step)
    """
    grade("check_entry_amp_step", amp_step, hidden, _step_rows)


# --- the two questions --------------------------------------------------------------

ENTRY_QUESTIONS: dict[str, tuple[str, ...]] = {
    "fp16_and_bf16": ("a", "b", "c", "d"),
    "scale_after_32": ("a", "b", "c", "d"),
}
"""The entry lesson's questions (their text is the lesson's) and their choices: the
prediction made before the gradients are counted, and a question on the scaler."""
_RIGHT = {"fp16_and_bf16": "b", "scale_after_32": "b"}
_WHERE = N_("the lesson's table of gradients and the paragraph on GradScaler")


def _quiz_rows(quiz_answers: Callable, hidden: bool) -> list[Row]:
    got = answer_of_type(quiz_answers, dict, "dict", N_("a dict {question id: letter}"))
    choices = {q: as_choice(got.get(q), c) for q, c in ENTRY_QUESTIONS.items()}
    bad = [q for q, choice in choices.items() if choice is None]
    rows = [
        answered_row(
            _("both questions answered"),
            bad,
            _(
                "answer each question id with one of its letters; missing or invalid: "
                "{ids}"
            ).format(ids=", ".join(bad)),
        )
    ]
    if bad:
        return rows
    right = all(choices[q] == _RIGHT[q] for q in ENTRY_QUESTIONS)
    rows.append(
        Row(
            _("both answers right"),
            NOT_SHOWN,
            _("yes") if right else _("no"),
            right,
            _(
                "at least one answer is wrong (the check does not say which): "
                "reread {where}"
            ).format(where=_(_WHERE)),
        )
    )
    if hidden:  # the instructor's grade: each question on its own
        rows += [
            Row(
                q,
                NOT_SHOWN,
                _("right") if choices[q] == _RIGHT[q] else _("wrong"),
                choices[q] == _RIGHT[q],
            )
            for q in ENTRY_QUESTIONS
        ]
    return rows


def check_entry_quiz(
    quiz_answers: Callable[[], dict[str, str]], hidden: bool = False
) -> None:
    """Check `quiz_answers() -> {question id: letter}` for ENTRY_QUESTIONS.

    The table says whether both answers are right, never which one is wrong, so
    trying letters one question at a time does not work; the hidden cases also grade
    each question on its own for the instructor.

    Example:
        >>> check_entry_quiz(lambda: {"fp16_and_bf16": "b", "scale_after_32": "b"})
    """
    grade("check_entry_quiz", quiz_answers, hidden, _quiz_rows)
