"""The quick check (lesson 08): the seed lesson's "Comprobación rápida", ten
multiple-choice questions over the whole course, with the reason each wrong choice is
wrong.

Notebook 08 prints them with `quick_check_text()`; the student answers in
`quick_check_answers()`, graded by `amp_lessons.checks.check_quick_check`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QUESTIONS", "QUICK_CHECK", "quick_check_text"]

QUESTIONS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "autocast_scope": ("What should `with torch.amp.autocast(device_type):` wrap?", {
        "a": ("The whole step: forward, backward and optimizer.step()",
              "backward already runs each op in the dtype autocast chose for it in "
              "the forward; the docs advise against wrapping backward"),
        "b": ("Only the forward pass, including the loss", ""),
        "c": ("Only the backward pass", "autocast chooses dtypes as ops are "
              "recorded in the forward; backward just follows them"),
        "d": ("Only optimizer.step()", "the optimizer updates the fp32 master "
              "weights; it has no matmuls to speed up"),
    }),
    "why_scale": ("Why does GradScaler multiply the loss by a large factor before "
                  "backward?", {
        "a": ("To prevent overflow in fp16", "scaling makes values BIGGER, so it "
              "risks overflow; GradScaler handles that by skipping and backing off"),
        "b": ("To make training converge in fewer steps", "the scale is removed "
              "before the optimizer step: the update is the same, only saved"),
        "c": ("So small gradients do not underflow to zero in fp16", ""),
        "d": ("To save memory", "the scaled grads take exactly as many bytes"),
    }),
    "step_with_inf": ("What does scaler.step(optimizer) do when the gradients "
                      "contain inf or NaN?", {
        "a": ("It raises an error", "an overflow is expected now and then; it is "
              "handled silently"),
        "b": ("It replaces the infs with zeros and steps", "nothing is replaced; "
              "the grads are unscaled in place as they are"),
        "c": ("It clips the gradients and steps", "clipping an inf still gives "
              "nan; GradScaler does not clip"),
        "d": ("It skips optimizer.step() for this iteration", ""),
    }),
    "update_after_overflow": ("After a step whose gradients had inf/NaN, what does "
                              "scaler.update() do (default settings)?", {
        "a": ("Multiplies the scale by 0.5 and restarts the growth count", ""),
        "b": ("Leaves the scale as it is", "then the next step would overflow "
              "again"),
        "c": ("Doubles the scale", "growth happens after 2000 steps WITHOUT "
              "overflow"),
        "d": ("Resets the scale to 65536", "it backs off from the current scale; "
              "it does not reset it"),
    }),
    "memory_saving": ("The seed promises '~2x less memory'. What is true?", {
        "a": ("Every tensor of training halves", "weights, grads and Adam state "
              "stay fp32 with AMP (lesson 06 measures it)"),
        "b": ("Activations kept for backward roughly halve; weights, grads and Adam "
              "state stay fp32, so the total saving is often far below 2x, and "
              "with small batches memory can even grow", ""),
        "c": ("Memory halves only on CPU", "no device halves everything; on CPU "
              "it is no different"),
        "d": ("Weights halve but activations do not", "the other way round: the "
              "master weights stay fp32; saved activations are fp16"),
    }),
    "bf16_scaler": ("Training with bf16 autocast: do you need a GradScaler?", {
        "a": ("Yes, always", "bf16 has fp32's 8 exponent bits, so gradients do "
              "not underflow"),
        "b": ("Yes, with a larger init_scale", "there is nothing to scale away "
              "from: bf16's range is fp32's"),
        "c": ("No: bf16 has fp32's exponent range, so gradients do not underflow",
              ""),
        "d": ("No, because bf16 has more mantissa bits than fp16", "it has fewer "
              "(7 vs 10); its advantage is range, not precision"),
    }),
    "backward_call": ("Which call belongs in the AMP loop?", {
        "a": ("scaler.scale(loss).backward()", ""),
        "b": ("loss.backward(), then scaler.scale(loss)", "then the grads were "
              "computed unscaled: small ones already underflowed"),
        "c": ("Both loss.backward() and scaler.scale(loss).backward()", "the grads "
              "would add up, scaled and unscaled; call backward once, on the "
              "scaled loss"),
        "d": ("scaler.backward(loss)", "GradScaler has no backward method"),
    }),
    "where_fastest": ("Where does AMP speed training up the most?", {
        "a": ("On any modern CPU", "most CPUs run fp16/bf16 matmuls SLOWER than "
              "fp32 (lesson 06 measures it)"),
        "b": ("On older GPUs without tensor cores (Pascal and earlier)", "it depends "
              "on the chip, and tensor cores beat both: a Tesla P100 runs fp16 at "
              "twice its fp32 rate (21.2 vs 10.6 TFLOPS), while consumer Pascal cards "
              "(GTX 10-series) run fp16 arithmetic at 1/64 of their fp32 rate, far "
              "slower than fp32"),
        "c": ("Equally on every device", "the speed-up comes from special "
              "hardware: it depends on the device"),
        "d": ("On GPUs with tensor cores (Volta and later: V100, A100, H100)", ""),
    }),
    "deprecated_api": ("The seed imports autocast and GradScaler from the old "
                       "CUDA-only amp submodule of torch.cuda (notebook 05 shows "
                       "it). What do you write today?", {
        "a": ("The same CUDA-only imports: they are the current API", "that "
              "spelling is deprecated: it warns and only covers CUDA"),
        "b": ('torch.amp.autocast("cuda", ...) and torch.amp.GradScaler("cuda")',
              ""),
        "c": ("apex.amp", "NVIDIA apex's amp was retired in favour of torch.amp"),
        "d": ("torch.half() on the model", "that is pure fp16, not mixed "
              "precision: no fp32 master weights, no scaling"),
    }),
    "where_clip": ("You clip gradients with clip_grad_norm_ in an AMP loop. "
                   "Where?", {
        "a": ("Before scaler.scale(loss).backward()", "there are no new grads "
              "yet to clip"),
        "b": ("Right after backward, before unscale_", "the grads are still "
              "scaled: the norm is ~scale times too big"),
        "c": ("After scaler.unscale_(optimizer), before scaler.step(optimizer)", ""),
        "d": ("After scaler.update()", "the step already used the unclipped "
              "grads"),
    }),
}  # fmt: skip
"""question id -> (question, {letter: (choice, why it is wrong, or "" if right)}).
Exactly one choice per question is right; `check_quick_check` shows the reason
under each wrong one."""

QUICK_CHECK: dict[str, dict[str, Any]] = {
    qid: {"question": question, "choices": {k: c for k, (c, _) in choices.items()}}
    for qid, (question, choices) in QUESTIONS.items()
}
"""question id -> {"question": text, "choices": {letter: text}}, for the notebook."""


def quick_check_text() -> str:
    """The quick-check questions and choices as text, ready to print.

    Example:
        >>> print(quick_check_text().splitlines()[0])
        autocast_scope: What should `with torch.amp.autocast(device_type):` wrap?
    """
    lines = []
    for qid, item in QUICK_CHECK.items():
        lines.append(f"{qid}: {item['question']}")
        lines += [f"   ({k}) {text}" for k, text in item["choices"].items()]
    return "\n".join(lines)
