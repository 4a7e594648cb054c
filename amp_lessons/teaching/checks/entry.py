"""The entry lesson's graders (notebooks/00_amp_in_10_minutes): the AMP step the reader
writes, and one question on the scaler (the prediction the lesson asks for first is
not graded).

`check_entry_amp_step` runs the reader's `amp_step` for a few steps on a tiny model
beside the same step written with a real `torch.amp.GradScaler`, and compares the
parameters, the scale and the growth tracker bit for bit, an overflow included. A
wrong run's hint comes from what the step did (the calls `RecordingScaler` saw, in
order): it names the fault and why it is one, and leaves the line to the reader.
`check_entry_quiz` says why a wrong letter is wrong, never which letter is right.
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
    Raised,
    Row,
    answer_of_type,
    call_student,
    choice_row,
    grade,
    show_value,
)
from amp_lessons.teaching.checks._recording import RecordingScaler
from amp_lessons.teaching.checks._step_faults import STEP_FAULTS, with_the_error

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


# What each fault did wrong and why, named from the calls the reader's step made
# (`RecordingScaler`); never the line to write: that is the exercise.
_FAULTS = {
    **STEP_FAULTS,  # the faults every step grader names
    "direct_step_scaled": N_(
        "optimizer.step() ran directly, on gradients still multiplied by the scale; "
        "it never skips an inf/NaN step, and update() finds no inf check. The "
        "scaler's own step unscales, checks, then steps or skips."),
    "no_step": N_(
        "update() ran with no step before it: the weights did not move, and update() "
        "acts on the inf check the scaler's step makes. That step goes between "
        "backward and update()."),
    "update_twice": N_(
        "scaler.update() ran twice in one step: the lesson's cell already calls it "
        "after your lines, and the second call finds no inf check left. Your lines "
        "end with the step."),
    "no_update": N_(
        "scaler.update() never ran, so the scale never changes: keep the given "
        "update() at the end of the step."),
}  # fmt: skip


def _faults(calls: list[str], finished: bool) -> list[str]:
    """The faults (keys of `_FAULTS`) one step's `calls` show. `finished`: the step
    returned; when it raised, what it never reached is not called missing."""
    count = calls.count
    backward = [i for i, c in enumerate(calls) if c.startswith("backward")]
    stepped = "step" in calls or "optimizer.step" in calls
    reached_end = finished or "update" in calls
    faults = []
    if "backward_unscaled" in calls:
        faults.append("scaled_unused" if "scale" in calls else "unscaled")
    elif len(backward) > 1:
        faults.append("backward_twice")
    if "step" in calls and (not backward or calls.index("step") < backward[0]):
        faults.append("step_before_backward")
    elif not backward and reached_end:
        faults.append("no_backward")
    if "optimizer.step" in calls:
        before = calls[: calls.index("optimizer.step")]
        if "unscale_" in before:
            faults.append("unscale_then_direct_step")
        elif "backward" in before and "backward_unscaled" not in before:
            faults.append("direct_step_scaled")
        else:
            faults.append("direct_step")
    elif not stepped and reached_end:
        faults.append("no_step")
    for call in ("step", "unscale_", "update"):
        if count(call) > 1:
            faults.append(f"{call}_twice")
    if finished and not count("update"):
        faults.append("no_update")
    return faults


def _fault_hint(trace: list[list[str]], finished: bool) -> str:
    """The hint for the first step of `trace` that shows a fault (at most two of its
    faults, each with why), or "" when every step called the scaler as it should."""
    for i, calls in enumerate(trace):
        faults = _faults(calls, finished or i < len(trace) - 1)
        if faults:
            count = len([c for c in calls if c.startswith("backward")])
            return " ".join(_(_FAULTS[f]).format(count=count) for f in faults[:2])
    return ""


def _make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-2)
    return torch.optim.SGD(params, lr=0.1)


@dataclass
class _Run:
    """What a case's run left: (params, scale, growth tracker), or Raised; and the
    calls each step made (`RecordingScaler.calls`), up to the one that raised."""

    result: Any
    trace: list[list[str]]


def _run(amp_step: Callable, case: _StepCase) -> _Run:
    torch.manual_seed(11)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = _make_optimizer(case.optimizer, model.parameters())
    scaler = RecordingScaler(
        "cpu", init_scale=case.init_scale, growth_interval=case.growth_interval
    )
    scaler.watch(model, optimizer)
    gen = torch.Generator().manual_seed(12)
    trace = []
    for size in case.targets:
        x = torch.randn(16, 4, generator=gen) * 2**-6  # small: gradients near 2^-24
        y = torch.randn(16, 2, generator=gen) * size * 2**-6
        scaler.calls = []
        got = call_student(amp_step, model, optimizer, scaler, x, y)
        calls = scaler.calls  # the reader's code can reach it: take only names
        trace.append(
            [c for c in calls if type(c) is str] if type(calls) is list else []
        )
        if isinstance(got, Raised):
            return _Run(got, trace)
    params = [p.detach().clone() for p in model.parameters()]
    return _Run(
        (params, scaler.get_scale(), scaler.state_dict()["_growth_tracker"]), trace
    )


def _same_run(a: Any, b: Any) -> bool:
    if isinstance(a, Raised) or isinstance(b, Raised):
        return False
    (pa, *sa), (pb, *sb) = a, b
    return sa == sb and all(same_bits(x, y) for x, y in zip(pa, pb, strict=True))


def _step_hint(run: _Run) -> str:
    got = run.result
    raised = isinstance(got, Raised)
    hint = _fault_hint(run.trace, finished=not raised)
    if hint and raised:  # the error's own words too, its first sentence
        return with_the_error(hint, got)
    if hint:
        return hint
    if raised:
        return got.hint
    if any(not torch.isfinite(p).all() for p in got[0]):
        return _(
            "a parameter is inf or NaN: a step with inf/NaN gradients was not "
            "skipped; the scaler's step skips such a step"
        )
    return _(
        "your step calls the scaler in the right order, yet the weights differ from "
        "torch's: keep the given lines (zero_grad, the forward pass under autocast, "
        "the final update()) as they are, and scale, backward and step once each"
    )


def _describe(run: Any) -> str:
    if isinstance(run, Raised):
        return str(run)
    return _("scale {scale}").format(scale=show_value(run[1]))


def _step_rows(amp_step: Callable, hidden: bool) -> list[Row]:
    rows, last_hint = [], ""
    for case in _HIDDEN if hidden else _CASES:
        expected, run = _run(_reference_step, case).result, _run(amp_step, case)
        got = run.result
        ok = _same_run(got, expected)
        shown = _describe(got)
        if not ok and not isinstance(got, Raised) and got[1:] == expected[1:]:
            shown = _("params differ")
        hint = "" if ok else _step_hint(run)
        # the same fault in the next case: said once, the table stays short
        shown_hint = _("the same as above") if hint and hint == last_hint else hint
        last_hint = hint or last_hint
        rows.append(Row(_(case.name), _describe(expected), shown, ok, shown_hint))
    return rows


def check_entry_amp_step(amp_step: Callable, hidden: bool = False) -> None:
    """Check `amp_step(model, optimizer, scaler, x, y)`: one AMP step in which the
    reader writes the scaled backward and the scaler's step.

    Each case runs the reader's step for 3 steps on a tiny model (fp16 autocast on
    the CPU) beside the reference step with a real `torch.amp.GradScaler`;
    parameters, scale and growth tracker must match bit for bit. The visible cases
    include an overflow; the hidden ones use Adam and a scale that grows every step.
    A failing case's hint names the fault from the calls the step made (recorded by
    `RecordingScaler`), and why it is one, never the line to write.

    Example:
        >>> check_entry_amp_step(amp_step)
    """
    grade("check_entry_amp_step", amp_step, hidden, _step_rows)


# --- the two questions --------------------------------------------------------------

ENTRY_QUESTIONS: dict[str, tuple[str, ...]] = {"scale_after_32": ("a", "b", "c", "d")}
"""The entry lesson's graded question (its text is the lesson's) and its choices. The
prediction before the count is not graded: the lesson takes it and shows it beside
the count (`amp_lessons.teaching.entry.note_prediction`, `reveal_prediction`)."""
_RIGHT = {"scale_after_32": "b"}
_WHY_WRONG = {
    "scale_after_32": {
        "a": N_(
            "an overflow is not the only thing that moves the scale: GradScaler "
            "also raises it, and 32 clean steps did not trigger that"),
        "c": N_(
            "autocast never touches the scale: it lives in the GradScaler, and only "
            "its update() changes it"),
        "d": N_(
            "each of the 32 AMP steps ended with update(), as an AMP step does: the "
            "scale stayed by the rule update() applies"),
    },
}  # fmt: skip


def _quiz_rows(quiz_answers: Callable, hidden: bool) -> list[Row]:
    got = answer_of_type(quiz_answers, dict, "dict", N_("a dict {question id: letter}"))
    return [
        choice_row(
            qid,
            _RIGHT[qid],
            got.get(qid),
            choices,
            lambda c, qid=qid: f"({c}) {_(_WHY_WRONG[qid][c])}",
            _("answer {qid} with one of {letters}").format(
                qid=qid, letters=", ".join(choices)
            ),
        )
        for qid, choices in ENTRY_QUESTIONS.items()
    ]


def check_entry_quiz(
    quiz_answers: Callable[[], dict[str, str]], hidden: bool = False
) -> None:
    """Check `quiz_answers() -> {question id: letter}` for ENTRY_QUESTIONS, asked
    after the lesson has shown the scaler at work.

    A wrong letter gets the reason it is wrong, never the right letter; the hidden
    cases grade the same question again for the instructor. The prediction the lesson
    asks for before its count is not graded (the lesson shows it beside the count).

    Example:
        >>> check_entry_quiz(lambda: {"scale_after_32": "b"})
    """
    grade("check_entry_quiz", quiz_answers, hidden, _quiz_rows)
