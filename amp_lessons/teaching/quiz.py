"""The quick check (lesson 08): the seed lesson's "Comprobación rápida", ten
multiple-choice questions over the whole course, with the reason each wrong choice is
wrong.

Notebook 08 prints them with `quick_check_text()`; the student answers in
`quick_check_answers()`, graded by `amp_lessons.teaching.checks.check_quick_check`.
"""

from __future__ import annotations

from typing import Any

from amp_lessons.i18n import N_, _

__all__ = ["QUESTIONS", "QUICK_CHECK", "quick_check_text"]

QUESTIONS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "autocast_scope": (
        N_("What should `with torch.amp.autocast(device_type):` wrap?"), {
        "a": (N_("The whole step: forward, backward and optimizer.step()"),
              N_("backward already runs each op in the dtype autocast chose for it in "
              "the forward; the docs advise against wrapping backward")),
        "b": (N_("Only the forward pass, including the loss"), ""),
        "c": (N_("Only the backward pass"), N_("autocast chooses dtypes as ops are "
              "recorded in the forward; backward just follows them")),
        "d": (N_("Only optimizer.step()"), N_("the optimizer updates the fp32 master "
              "weights; it has no matmuls to speed up")),
    }),
    "why_scale": (N_("Why does GradScaler multiply the loss by a large factor before "
                  "backward?"), {
        "a": (N_("To prevent overflow in fp16"),
              N_("scaling makes values BIGGER, so it "
              "risks overflow; GradScaler handles that by skipping and backing off")),
        "b": (N_("To make training converge in fewer steps"), N_("the scale is removed "
              "before the optimizer step: the update is the same, only saved")),
        "c": (N_("So small gradients do not underflow to zero in fp16"), ""),
        "d": (N_("To save memory"), N_("the scaled grads take exactly as many bytes")),
    }),
    "step_with_inf": (N_("What does scaler.step(optimizer) do when the gradients "
                      "contain inf or NaN?"), {
        "a": (N_("It raises an error"),
              N_("an overflow is expected now and then; it is "
              "handled silently")),
        "b": (N_("It replaces the infs with zeros and steps"),
              N_("nothing is replaced; "
              "the grads are unscaled in place as they are")),
        "c": (N_("It clips the gradients and steps"), N_("clipping an inf still gives "
              "nan; GradScaler does not clip")),
        "d": (N_("It skips optimizer.step() for this iteration"), ""),
    }),
    "update_after_overflow": (N_("After a step whose gradients had inf/NaN, what does "
                              "scaler.update() do (default settings)?"), {
        "a": (N_("Multiplies the scale by 0.5 and restarts the growth count"), ""),
        "b": (N_("Leaves the scale as it is, so that training keeps its pace"),
              N_("then the next step would overflow again")),
        "c": (N_("Doubles the scale, to get past the overflow sooner"),
              N_("growth happens after 2000 steps WITHOUT overflow")),
        "d": (N_("Resets the scale to its starting value, 65536"),
              N_("it backs off from the current scale; "
              "it does not reset it")),
    }),
    "memory_saving": (N_("The seed promises '~2x less memory'. What is true?"), {
        "a": (N_("Every tensor of training halves: weights, gradients, Adam state and "
                 "activations"),
              N_("weights, grads and Adam state stay fp32 with AMP (lesson 06 "
                 "measures it)")),
        "b": (N_("Activations kept for backward roughly halve; weights, grads and Adam "
                 "state stay fp32, so the total often saves far less"), ""),
        "c": (N_("Memory halves on a GPU with tensor cores, and not on a CPU"),
              N_("tensor cores change the speed, not the sizes: a 16-bit value takes "
                 "2 bytes on any device")),
        "d": (N_("The weights halve, since autocast keeps them in fp16; activations "
                 "do not"),
              N_("the other way round: the master weights stay fp32; saved "
                 "activations are fp16")),
    }),
    "bf16_scaler": (N_("Training with bf16 autocast: do you need a GradScaler?"), {
        "a": (N_("Yes, always"), N_("bf16 has fp32's 8 exponent bits, so gradients do "
              "not underflow")),
        "b": (N_("Yes, with a larger init_scale"), N_("there is nothing to scale away "
              "from: bf16's range is fp32's")),
        "c": (N_("No: bf16 has fp32's exponent range, so gradients do not underflow"),
              ""),
        "d": (N_("No, because bf16 has more mantissa bits than fp16"),
              N_("it has fewer "
              "(7 vs 10); its advantage is range, not precision")),
    }),
    "backward_call": (N_("Which call belongs in the AMP loop?"), {
        "a": (N_("scaler.scale(loss).backward()"), ""),
        "b": (N_("loss.backward(), then scaler.scale(loss)"), N_("then the grads were "
              "computed unscaled: small ones already underflowed")),
        "c": (N_("Both loss.backward() and scaler.scale(loss).backward()"),
              N_("the grads "
              "would add up, scaled and unscaled; call backward once, on the "
              "scaled loss")),
        "d": (N_("scaler.backward(loss)"), N_("GradScaler has no backward method")),
    }),
    "where_fastest": (N_("Where does AMP speed training up the most?"), {
        "a": (N_("On any modern CPU"), N_("most CPUs run fp16/bf16 matmuls SLOWER than "
              "fp32 (lesson 06 measures it)")),
        "b": (N_("On older GPUs without tensor cores (Pascal and earlier)"),
              N_("it depends "
              "on the chip, and tensor cores beat both: a Tesla P100 runs fp16 at "
              "twice its fp32 rate (21.2 vs 10.6 TFLOPS), while consumer Pascal cards "
              "(GTX 10-series) run fp16 arithmetic at 1/64 of their fp32 rate, far "
              "slower than fp32")),
        "c": (N_("Equally on every device"), N_("the speed-up comes from special "
              "hardware: it depends on the device")),
        "d": (N_("On GPUs with tensor cores (Volta and later: V100, A100, H100)"), ""),
    }),
    "deprecated_api": (N_("The seed imports autocast and GradScaler from the old "
                       "CUDA-only amp submodule of torch.cuda (notebook 05 shows "
                       "it). What do you write today?"), {
        "a": (N_("The same CUDA-only imports: they are the current API"), N_("that "
              "spelling is deprecated: it warns and only covers CUDA")),
        "b": (N_('torch.amp.autocast("cuda", ...) and torch.amp.GradScaler("cuda")'),
              ""),
        "c": (N_("apex.amp"),
              N_("NVIDIA apex's amp was retired in favour of torch.amp")),
        "d": (N_("torch.half() on the model"), N_("that is pure fp16, not mixed "
              "precision: no fp32 master weights, no scaling")),
    }),
    "where_clip": (N_("You clip gradients with clip_grad_norm_ in an AMP loop. "
                   "Where?"), {
        "a": (N_("Before scaler.scale(loss).backward(), on the last gradients"),
              N_("there are no new grads yet to clip")),
        "b": (N_("Right after backward, before scaler.unscale_(optimizer)"),
              N_("the grads are still scaled: the norm is ~scale times too big")),
        "c": (N_("After scaler.unscale_(optimizer), before scaler.step(optimizer)"),
              ""),
        "d": (N_("After scaler.update(), once the step is done"),
              N_("the step already used the unclipped grads")),
    }),
}  # fmt: skip
"""question id -> (question, {letter: (choice, why it is wrong, or "" if right)}).
Exactly one choice per question is right; `check_quick_check` shows the reason
under each wrong one."""

QUICK_CHECK: dict[str, dict[str, Any]] = {
    qid: {"question": question, "choices": {k: c for k, (c, _) in choices.items()}}
    for qid, (question, choices) in QUESTIONS.items()
}
"""question id -> {"question": text, "choices": {letter: text}}, for the notebook (in
English; `quick_check_text` prints them in the current language)."""


def quick_check_text() -> str:
    """The quick-check questions and choices as text, ready to print, in the language
    `amp_lessons.set_language` chose.

    Example:
        >>> print(quick_check_text().splitlines()[0])
        autocast_scope: What should `with torch.amp.autocast(device_type):` wrap?
    """
    lines = []
    for qid, item in QUICK_CHECK.items():
        lines.append(f"{qid}: {_(item['question'])}")
        lines += [f"   ({k}) {_(text)}" for k, text in item["choices"].items()]
    return "\n".join(lines)
