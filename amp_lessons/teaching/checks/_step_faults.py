"""What one AMP step did wrong, and why, in the words every step grader shares (the
entry lesson's and lesson 05's): each fault named from the calls the learner's step
made (`_recording.RecordingScaler`), never the line to write, which is the exercise.
Each grader adds the faults only its exercise can show.
"""

from __future__ import annotations

from amp_lessons.i18n import N_, _

STEP_FAULTS = {
    "unscaled": N_(
        "backward ran on the loss itself, not on the scaled loss: fp16 flushes "
        "gradients below 2^-24 to zero on the way back, and the scaler has nothing "
        "to divide back. The scaler's scale method gives the loss to run backward on."),
    "scaled_unused": N_(
        "you scaled the loss but ran backward on the unscaled one: scale returns a "
        "new tensor (loss times scale) and leaves the loss as it was; backward must "
        "start from that new tensor."),
    "no_backward": N_(
        "no backward ran: the parameters got no gradients to step with."),
    "backward_twice": N_(
        "backward ran {count} times in one step: gradients add up, so the step "
        "applied {count} times the gradient. Once per step."),
    "step_before_backward": N_(
        "the scaler's step ran before backward, when this batch had no gradients yet "
        "(no loss even scaled, so torch refused). Backward first, then the step."),
    "direct_step": N_(
        "optimizer.step() ran directly: it never skips an inf/NaN step, and update() "
        "finds no inf check. The scaler's own step unscales, checks, then steps or "
        "skips."),
    "unscale_then_direct_step": N_(
        "you unscaled, then called optimizer.step() yourself: it never skips, so on "
        "the overflow step it wrote inf/NaN into the weights. The scaler's own step "
        "checks what unscale_ found and skips such a step."),
    "step_twice": N_(
        "the scaler's step ran twice in one step: the second would apply the same "
        "gradients again, so torch refuses it. Once per step."),
    "unscale_twice": N_(
        "unscale_ ran twice in one step: the second would divide the gradients by "
        "the scale again, so torch refuses it. The scaler's step unscales by itself."),
}  # fmt: skip


def with_the_error(hint: str, raised) -> str:
    """A fault's hint, then the first sentence of the error the learner's step raised
    (``raised``: the grader's `Raised`), so torch's own words are there too."""
    said = raised.message.split(". ")[0].strip().rstrip(".")
    error = f"{type(raised.exc).__name__}: {said}." if said else str(raised)
    return hint + " " + _("(The error: {error})").format(error=error)
