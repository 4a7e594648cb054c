"""The AMP clinic: the mistakes people make with AMP, each reproduced small, and fixed.

Notebook 07 uses this module. Each function runs one mistake (or its fix) on a tiny
model and returns what happened: the losses, the loss scale and the skipped steps,
the gradient norms, the activations that left fp16's range, or the exact error torch
raised. Nothing is simulated: every run is a real ``torch.amp.autocast`` region and a
real ``torch.amp.GradScaler``, so the messages are the installed torch's own.
The diagnosis exercise's symptoms, their causes and the clues live here too
(``SYMPTOMS``, ``CAUSES``, ``DIAGNOSES``, ``clinic_text``); its grader is
``amp_lessons.teaching.checks.check_clinic_diagnosis``. ``REAL_WORLD`` is lesson 09's
table: 15 frequently reported AMP problems from public trackers, each with its
sources, reproduced (by ``amp_lessons.teaching.reproductions``) or explained.

Not covered here: distributed training (each rank's scaler must agree).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch._functorch.config as _functorch_config
import torch.nn as nn
import torch.nn.functional as F

from amp_lessons.i18n import N_, _
from amp_lessons.teaching.underflow import pure_fp16_task

FP16_MAX = torch.finfo(torch.float16).max  # 65504
RAW_SCALE = 1e5  # raw features in the hundreds of thousands: a price in cents, a count
NUM_FEATURES, NUM_CLASSES, NUM_SAMPLES = 16, 3, 64


# ---- a tiny classifier and its data ----------------------------------------------


def clinic_model(seed: int = 0, hidden: int = 32) -> nn.Sequential:
    """Linear(16, hidden) -> LayerNorm -> ReLU -> Linear(hidden, 3), seeded.

    The LayerNorm makes the model indifferent to the scale of its input in fp32:
    raw features of ~1e5 train as well as standardized ones, until fp16 meets them.

    Example: ``clinic_model()(torch.randn(2, 16)).shape == (2, 3)``.
    """
    with torch.random.fork_rng():  # leave the caller's global RNG as it was
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(NUM_FEATURES, hidden),
            nn.LayerNorm(hidden),
            nn.ReLU(),
            nn.Linear(hidden, NUM_CLASSES),
        )


def clinic_data(seed: int = 0, raw: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``: 64 samples of 16 standardized features and a class 0..2 for each.

    The class is the argmax of a fixed random linear map of x, so there is something
    to learn. ``raw=True`` returns the same features before standardization, scaled
    by ``RAW_SCALE`` (1e5): values up to about 3e5, past fp16's largest 65504.

    Example: ``clinic_data(raw=True)[0].abs().max() > 65504`` is True.
    """
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=gen)
    y = (x @ torch.randn(NUM_FEATURES, NUM_CLASSES, generator=gen)).argmax(dim=1)
    return (x * RAW_SCALE if raw else x), y


class RunInFp32(nn.Module):
    """Run a submodule in fp32 inside an autocast region: the disabled-region fix.

    Autocast is switched off around the submodule and its floating-point inputs are
    cast back to fp32 (what it receives may already be fp16 from the layer before).

    Example::

        model = nn.Sequential(RunInFp32(nn.Linear(16, 32)), nn.ReLU())
        with torch.amp.autocast("cpu", dtype=torch.float16):
            model(torch.randn(2, 16))  # the Linear computes in fp32
    """

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        device_type = args[0].device.type
        with torch.amp.autocast(device_type, enabled=False):
            return self.module(
                *(a.float() if a.is_floating_point() else a for a in args)
            )


def _autocast(device_type: str, dtype: torch.dtype | None):
    """autocast to fp16/bf16, or a disabled region for None / float32."""
    if dtype not in (None, torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(
            f"dtype must be torch.float16, torch.bfloat16, or None (or "
            f"torch.float32) for plain fp32; got {dtype}"
        )
    low = dtype in (torch.float16, torch.bfloat16)
    return torch.amp.autocast(
        device_type, dtype=dtype if low else torch.bfloat16, enabled=low
    )


# ---- where a forward pass leaves fp16's range --------------------------------------


@dataclass(frozen=True)
class LayerOutput:
    """One leaf module's output in one forward pass."""

    name: str  # as in model.named_modules()
    kind: str  # the module's class name
    dtype: torch.dtype
    max_abs: float  # largest |value| among the finite ones (0.0 if none)
    finite: bool  # False: the output holds inf or nan

    @property
    def past_fp16(self) -> bool:
        """Would (or did) this output overflow fp16?"""
        return not self.finite or self.max_abs > FP16_MAX


def activation_report(
    model: nn.Module, x: torch.Tensor, dtype: torch.dtype | None = None
) -> list[LayerOutput]:
    """The output of every leaf module of one forward of ``model(x)``, in order.

    Runs under ``torch.amp.autocast(x.device.type, dtype=dtype)`` when `dtype` is
    given (plain fp32 otherwise), without autograd. Run it in fp32 to see which
    layers WOULD overflow fp16 (``past_fp16``); run it in fp16 to see the first inf.

    Example (raw features of ~1e5):
        >>> rows = activation_report(clinic_model(), clinic_data(raw=True)[0])
        >>> rows[0].kind, rows[0].max_abs > 65504, rows[1].max_abs < 10
        ('Linear', True, True)
    """
    rows: list[LayerOutput] = []
    names = {m: n for n, m in model.named_modules()}

    def hook(module: nn.Module, _inputs, output: torch.Tensor) -> None:
        finite = torch.isfinite(output)
        values = output.detach()[finite].float().abs()
        rows.append(
            LayerOutput(
                names[module],
                type(module).__name__,
                output.dtype,
                values.max().item() if values.numel() else 0.0,
                bool(finite.all()),
            )
        )

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    ctx = _autocast(x.device.type, dtype)
    try:
        with torch.no_grad(), ctx:
            model(x)
    finally:
        for h in handles:
            h.remove()
    return rows


# ---- a training run, the right way or with one mistake ------------------------------


@dataclass
class AmpRun:
    """What ``train_amp`` saw at each optimizer step (step 1 first)."""

    losses: list[float] = field(default_factory=list)  # nan when the forward made one
    scales: list[float] = field(default_factory=list)  # the scale the step used
    skipped: list[bool] = field(default_factory=list)  # inf/nan grads: no step taken
    grad_norms: list[float] = field(default_factory=list)  # what clipping measured

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped)


def train_amp(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    dtype: torch.dtype | None = None,
    *,
    num_steps: int = 10,
    lr: float = 0.1,
    scaler: torch.amp.GradScaler | None = None,
    clip: float | None = None,
    clip_before_unscale: bool = False,
) -> AmpRun:
    """Train `model` in place on one full batch with SGD; return what each step saw.

    `dtype`: autocast's dtype (None: plain fp32). `scaler`: a GradScaler, or None for
    plain ``loss.backward()``. `clip`: a max gradient norm. With
    ``clip_before_unscale=True`` the gradients are clipped BEFORE
    ``scaler.unscale_`` (the mistake): ``grad_norms`` then holds the norm of the
    scaled gradients, as ``clip_grad_norm_`` returned it. Otherwise the loop is the
    right one: scale -> backward -> unscale_ -> clip -> step -> update -> zero_grad.
    A step counts as skipped when the scaler lowered the scale: it found inf/nan.

    Example:
        >>> x, y = clinic_data()
        >>> run = train_amp(clinic_model(), x, y, torch.float16, num_steps=3,
        ...                 scaler=torch.amp.GradScaler("cpu"))
        >>> run.scales, run.num_skipped
        ([65536.0, 65536.0, 65536.0], 0)
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
    if clip_before_unscale and (clip is None or scaler is None):
        raise ValueError(
            "clip_before_unscale=True needs both clip= and scaler=: it "
            "reproduces clipping the scaled gradients"
        )
    ctx = _autocast(x.device.type, dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    params = [p for p in model.parameters() if p.requires_grad]
    run = AmpRun()
    for _step in range(num_steps):
        with ctx:
            loss = F.cross_entropy(model(x), y)
        scale = scaler.get_scale() if scaler is not None else 1.0
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None and not clip_before_unscale:
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        norm = nn.utils.clip_grad_norm_(params, clip if clip is not None else math.inf)
        if scaler is not None:
            scaler.step(optimizer)  # unscales here if unscale_ was not called
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        run.losses.append(loss.item())
        run.scales.append(scale)
        run.skipped.append(scaler is not None and scaler.get_scale() < scale)
        run.grad_norms.append(norm.item())
    return run


# ---- misusing the scaler's state machine --------------------------------------------

CALLS = ("backward", "unscale_", "clip", "step", "update", "zero_grad")
_RIGHT = ("backward", "unscale_", "clip", "step", "update", "zero_grad")

MISUSES: dict[str, tuple[Sequence[str], bool]] = {
    N_("the right loop, two iterations"): (_RIGHT * 2, False),
    N_("forgot scaler.update(), loop with clipping"): (
        ("backward", "unscale_", "clip", "step", "zero_grad") * 2, False),
    N_("forgot scaler.update(), loop without clipping"): (
        ("backward", "step", "zero_grad") * 2, False),
    N_("scaler.step(optimizer) twice"): (("backward", "step", "step"), False),
    N_("scaler.unscale_(optimizer) twice"): (
        ("backward", "unscale_", "unscale_"), False),
    N_("scaler.unscale_ after scaler.step"): (("backward", "step", "unscale_"), False),
    N_("scaler.update() without scaler.step"): (("backward", "update"), False),
    N_("model.half() with a GradScaler"): (_RIGHT, True),
}  # fmt: skip
"""name -> (the calls of the loop in order, whether the model was .half()'d). A name
is an English key in code; ``_(name)`` shows it in the student's language."""


@dataclass(frozen=True)
class CallsResult:
    """How far a sequence of scaler calls got, and what torch raised."""

    done: tuple[str, ...]  # calls that returned; the next one (if any) raised
    error: str  # "RuntimeError: ..." as torch phrased it, or "" when none
    raised_in: tuple[str, int] | None = None  # (call, iteration) that raised

    @property
    def failed(self) -> str | None:
        """The call that raised, e.g. "unscale_ (iteration 2)": the key lesson 07
        asserts on, in English."""
        return (
            None
            if self.raised_in is None
            else "{} (iteration {})".format(*self.raised_in)
        )

    @property
    def failed_shown(self) -> str | None:
        """`failed` in the learner's language, e.g. "unscale_ (iteración 2)"."""
        if self.raised_in is None:
            return None
        call, iteration = self.raised_in
        return _("{call} (iteration {n})").format(call=call, n=iteration)


def run_calls(calls: Sequence[str], half: bool = False) -> CallsResult:
    """Run scaler calls in order on a one-weight model under fp16 autocast.

    `calls`: names from ``CALLS``; each "backward" starts an iteration (a forward
    under autocast, then ``scaler.scale(loss).backward()``). `half`: convert the model
    with ``.half()`` first. Returns where it stopped and torch's message.

    Example:
        >>> run_calls(["backward", "step", "step"]).error
        'RuntimeError: step() has already been called since the last update().'
    """
    unknown = [c for c in calls if c not in CALLS]
    if unknown:
        raise ValueError(f"unknown calls {unknown}; use names from {CALLS}")
    gen = torch.Generator().manual_seed(0)
    model = nn.Linear(4, 1)
    x = torch.randn(8, 4, generator=gen)
    if half:
        model, x = model.half(), x.half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    actions = {
        "unscale_": lambda: scaler.unscale_(optimizer),
        "clip": lambda: nn.utils.clip_grad_norm_(model.parameters(), 1.0),
        "step": lambda: scaler.step(optimizer),
        "update": scaler.update,
        "zero_grad": lambda: optimizer.zero_grad(set_to_none=True),
    }
    done: list[str] = []
    iteration = 0
    for call in calls:
        iteration += call == "backward"
        try:
            if call == "backward":
                with torch.amp.autocast("cpu", dtype=torch.float16):
                    loss = model(x).float().pow(2).mean()
                scaler.scale(loss).backward()
            else:
                actions[call]()
        except Exception as exc:  # the message is the result
            return CallsResult(
                tuple(done), f"{type(exc).__name__}: {exc}", (call, iteration)
            )
        done.append(call)
    return CallsResult(tuple(done), "")


# ---- bf16 vs fp16 gradients ---------------------------------------------------------


def zero_grad_fraction(
    dtype: torch.dtype, scale: float = 1.0, mse_loss: bool = False
) -> float:
    """Fraction of the weight gradient that is exactly 0 when the whole model of
    ``underflow.pure_fp16_task`` (tiny targets, gradients near 2**-27) runs in `dtype`.

    The loss is multiplied by `scale` before backward. ``mse_loss=True`` uses
    ``F.mse_loss`` instead of ``(pred - y).pow(2).mean()``: torch's CPU fp16
    mse_loss backward multiplies by 2/N before the incoming (scaled) gradient, so it
    flushes to 0 even with a scale.

    Example: ``zero_grad_fraction(torch.float16)`` -> 0.92;
    ``zero_grad_fraction(torch.bfloat16)`` -> 0.0 (bf16 has fp32's range).
    """
    model, x, y = pure_fp16_task()
    model, x, y = model.to(dtype), x.to(dtype), y.to(dtype)
    pred = model(x)
    loss = F.mse_loss(pred, y) if mse_loss else (pred - y).pow(2).mean()
    (loss * scale).backward()
    return (model.weight.grad == 0).float().mean().item()


# ---- the diagnosis exercise: symptoms, causes and clues ---------------------------

CAUSES: dict[str, str] = {
    "fp16_overflow": N_(
        "an activation or the loss exceeds fp16's max 65504 in the forward pass"
    ),
    "nan_in_forward": N_(
        "the forward pass itself makes nan or inf (bad data, log(0), "
        "0/0), whatever the precision"
    ),
    "no_loss_scaling": N_(
        "small gradients underflow to zero in fp16 because the loss is not scaled"
    ),
    "clip_before_unscale": N_(
        "gradients are clipped while they are still multiplied by the scale"
    ),
    "missing_update": N_("scaler.update() is not called at the end of each iteration"),
    "model_half_with_scaler": N_(
        "the model was converted with model.half(), so its "
        "grads are fp16, which GradScaler refuses to unscale"
    ),
    "use_bce_with_logits": N_(
        "BCELoss after a sigmoid under CUDA autocast; "
        "BCEWithLogitsLoss is the autocast-safe form"
    ),
    "no_tensor_cores": N_(
        "the hardware has no fast fp16/bf16 matrix units (a CPU, or "
        "a "
        "GPU older than Volta)"
    ),
    "weight_copies_small_batch": N_(
        "autocast caches low-precision copies of the "
        "weights "
        "next to the fp32 ones, and small activations cannot pay for them"
    ),
    "scaler_with_bf16": N_(
        "a GradScaler used with bf16, which has fp32's range and needs no loss scaling"
    ),
}
"""Cause keys `diagnose(symptom)` may return, with what each one means."""

DIAGNOSES: tuple[tuple[str, str, str], ...] = (
    ("The loss is inf or NaN from the very first fp16 step; the same model trains "
     "fine in fp32 and in bf16.", "fp16_overflow",
     N_("fine in fp32 AND in bf16 (which has fp32's range but less precision): the "
     "problem is range, in the forward pass")),
    ("ValueError: Attempting to unscale FP16 gradients.", "model_half_with_scaler",
     N_("the gradients themselves are fp16: where do fp16 grads come from, when "
     "autocast keeps the weights fp32?")),
    ("After adding clip_grad_norm_(model.parameters(), 1.0) the model barely "
     "learns, and the norm it returns is about 65536 times the fp32 one.",
     "clip_before_unscale", N_("65536 is the default initial scale: the norm was "
     "measured on scaled grads")),
    ("With AMP on a laptop CPU every training step is slower than in fp32.",
     "no_tensor_cores", N_("AMP's speed comes from hardware matrix units for 16-bit "
     "floats; a CPU without them computes fp16/bf16 matmuls slowly")),
    ("In a loop that clips after scaler.unscale_(optimizer), the second iteration "
     "stops with RuntimeError: unscale_() is being called after step().",
     "missing_update", N_("it fires on the SECOND iteration: the first one's step() "
     "was never closed by the call that resets the per-step state")),
    ("scaler.get_scale() halves on every step (65536, 32768, ... 1e-20) and no "
     "step is ever taken; with AMP switched off the loss is NaN as well.",
     "nan_in_forward", N_("NaN without AMP too: no scale can fix a NaN the forward "
     "pass makes itself")),
    ("Pure fp16 training (model.half(), no scaler): the loss plateaus early and "
     "many gradients are exactly 0.", "no_loss_scaling", N_("gradients exactly 0 in "
     "fp16: they fell below 2^-24")),
    ("RuntimeError: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss "
     "are unsafe to autocast.", "use_bce_with_logits", N_("torch itself names the "
     "safe alternative in the rest of this message")),
    ("With AMP, the peak memory of a large MLP trained with a small batch went UP.",
     "weight_copies_small_batch", N_("weight-heavy model, small activations: what "
     "does autocast add next to the fp32 weights?")),
    ("With bfloat16 autocast and a GradScaler, no step is ever skipped and the "
     "scale only grows.", "scaler_with_bf16", N_("bf16 has 8 exponent bits like fp32: "
     "its gradients neither underflow nor overflow")),
)  # fmt: skip
"""(symptom, cause key, clue) for each case of the diagnosis exercise; the clue is
the hint a wrong diagnosis gets. The symptoms stay in English in every language: a
student's `diagnose` matches their words (some are torch's own error messages)."""
SYMPTOMS: tuple[str, ...] = tuple(symptom for symptom, _, _ in DIAGNOSES)
"""What a student sees; `diagnose(symptom)` returns the matching key of CAUSES."""


def clinic_text() -> str:
    """The numbered symptoms and the cause keys as text, ready to print.

    Example:
        >>> print(clinic_text().splitlines()[1])
        #1  The loss is inf or NaN from the very first fp16 step; the same model ...
    """
    lines = [_("Symptoms:")]
    for i, symptom in enumerate(SYMPTOMS, start=1):
        lines.append(textwrap.fill(f"#{i:<3}{symptom}", 88, subsequent_indent=" " * 4))
    lines += ["", _("Causes:")]
    for key, meaning in CAUSES.items():
        lines.append(
            textwrap.fill(f"{key:26} {_(meaning)}", 88, subsequent_indent=" " * 27)
        )
    return "\n".join(lines)


# ---- AMP in real code: 15 problems public trackers report often (lesson 09) ---------

# The autocast state a compiled backward is traced under, as this torch ships it
# (torch/_functorch/config.py); problem 14's fix names it.
_BACKWARD_PASS_AUTOCAST = _functorch_config.backward_pass_autocast


@dataclass(frozen=True)
class FieldReport:
    """One problem people report with AMP in real code, and where they report it."""

    key: str  # the key of its reproduction in amp_lessons.teaching.reproductions
    problem: str  # what people see (English, marked N_: _(problem) shows it)
    cause: str
    fix: str
    status: str  # "reproduced" (on the CPU, with and without the fix) or "explained"
    sources: tuple[str, ...]  # public threads: "owner/repo#number"
    note: str = ""  # how it is reproduced, or why it is only explained (N_ too)


REAL_WORLD: tuple[FieldReport, ...] = (
    FieldReport("t5_fp16_nan", N_("NaN loss in fp16"),
                "activations above 65504; T5 was pretrained in bf16",
                "train in bf16, or keep the overflowing layer in fp32 (transformers "
                "keeps T5's wo in fp32), or clamp", "reproduced",
                ("huggingface/transformers#9295",
                 "google-research/text-to-text-transfer-transformer#539",
                 "huggingface/transformers#9487"),
                N_("a tiny T5-like stack whose feed-forward outputs grow with depth")),
    FieldReport("mask_softmax_nan", N_("softmax turns to NaN"),
                "masks of -1e15 or -inf (or float32's min) are -inf in fp16; a fully "
                "masked row is then 0/0",
                "masked_fill with torch.finfo(scores.dtype).min, or softmax in fp32",
                "reproduced",
                ("huggingface/transformers#17306", "pytorch/pytorch#131060")),
    FieldReport("unscale_fp16_gradients",
                N_("\"Attempting to unscale FP16 gradients\""),
                "model.half(): fp16 weights have fp16 gradients",
                "keep the model in fp32; autocast makes the fp16 copies",
                "reproduced", ("pytorch/pytorch#74739",)),
    FieldReport("unscale_twice_accumulation",
                N_("\"unscale_() has already been called\""),
                "gradient accumulation with unscale_ (and clipping) in every "
                "micro-batch", "unscale_ and clip once, right before scaler.step",
                "reproduced",
                ("microsoft/Swin-Transformer#311", "huggingface/accelerate#641")),
    FieldReport("clip_without_unscale", N_("clipping has no effect"),
                "clip_grad_norm_ before scaler.unscale_: it measures the scaled "
                "gradients", "scaler.unscale_(optimizer) before clipping",
                "reproduced", ("rwth-i6/returnn#1590", "milesial/Pytorch-UNet#468")),
    FieldReport("scheduler_warning", N_("lr_scheduler.step() warning"),
                "the first steps were skipped after an overflow, so optimizer.step "
                "never ran before the scheduler's first step",
                "harmless: a few steps of the schedule; count skips by the scale "
                "going down, or step the scheduler only after real steps",
                "reproduced", ("pytorch/pytorch#44511", "pytorch/pytorch#55585")),
    FieldReport("gan_scalers", N_("confusion over scalers in a GAN"),
                "two losses and two optimizers sharing one scaler: update() called "
                "after each optimizer's step, or a second scaler made",
                "one scaler: scale each loss, step each optimizer, update() once",
                "reproduced",
                ("neosr-project/neosr#31", "neosr-project/neosr#50",
                 "neosr-project/neosr#9"),
                N_("update() after each optimizer makes the growth clock run twice "
                   "as fast; two scalers mix two scales in shared gradients")),
    FieldReport("custom_function_dtype",
                N_("\"expected scalar type Half but found Float\""),
                "a custom autograd Function under autocast: its backward runs "
                "outside autocast, with mixed dtypes",
                "decorate forward with torch.amp.custom_fwd and backward with "
                "torch.amp.custom_bwd", "reproduced",
                ("pytorch/pytorch#38487", "pytorch/pytorch#47906"),
                N_("this torch words it 'expected m1 and m2 to have the same "
                   "dtype'")),
    FieldReport("autocast_threads", N_("outputs not in fp16"),
                "autocast's state is per thread; DataParallel runs replicas in "
                "threads", "enter autocast inside the thread (in forward)",
                "reproduced", ("pytorch/pytorch#60540", "pytorch/pytorch#60706"),
                N_("the mechanism, with a plain thread: DataParallel needs several "
                   "GPUs, and its workers now re-enter autocast themselves")),
    FieldReport("resume_without_scaler",
                N_("overflow or loss spike after resume"),
                "the scaler's state was not saved: the scale starts again at 65536",
                "save and load scaler.state_dict() with the checkpoint",
                "reproduced",
                ("huggingface/transformers#11663", "ultralytics/ultralytics#22189")),
    FieldReport("bf16_emulated", N_("bf16 silently slow"),
                "emulated on pre-Ampere GPUs; is_bf16_supported() is True on a T4",
                "check the compute capability (>= 8.0), or "
                "is_bf16_supported(including_emulation=False); use fp16 there",
                "explained", ("pytorch/pytorch#148322", "MakazhanAlpamys/Soup#387"),
                N_("needs a pre-Ampere GPU; lesson 00 measures the same emulation "
                   "on this CPU")),
    FieldReport("layernorm_fp16_cpu", N_("fp16 LayerNorm fails on CPU"),
                "older torch had no fp16 LayerNorm kernel on the CPU "
                "('LayerNormKernelImpl not implemented for Half')",
                "upgrade torch, or run LayerNorm in fp32 on the CPU", "explained",
                ("pytorch/pytorch#52291",),
                N_("gone in this torch: fp16 layer_norm runs on the CPU")),
    FieldReport("bce_under_autocast", N_("BCE refused under autocast"),
                "sigmoid + BCELoss: its backward can make gradients fp16 cannot hold",
                "BCEWithLogitsLoss on the logits", "explained",
                ("pytorch/pytorch#61098",),
                N_("the refusal is CUDA autocast's (the CPU runs BCE in fp32); the "
                   "hazard itself is reproduced: an fp16 sigmoid of exactly 1.0")),
    FieldReport("compile_disabled_region",
                N_("compiled model gives different gradients"),
                "autocast(enabled=False) regions inside torch.compile: the compiled "
                "backward ran under the forward's autocast",
                "torch._functorch.config.backward_pass_autocast = 'off' before "
                "compiling; this torch's default is "
                f"{_BACKWARD_PASS_AUTOCAST!r} (read at import), and a PR to make "
                "'off' the default was closed: the docs warn instead",
                "reproduced",
                ("pytorch/pytorch#179804", "pytorch/pytorch#177287",
                 "pytorch/pytorch#184839")),
    FieldReport("scaler_in_loop", N_("the scaler never works"),
                "scaler created inside the loop: every one starts again at 65536",
                "create the GradScaler once, before the loop", "reproduced",
                ("conservationtechlab/animl-py#298",
                 "conservationtechlab/animl-py#304"),
                N_("per epoch in the source; per iteration here, where a loss that "
                   "overflows at 65536 never takes a step")),
)  # fmt: skip
"""The 15 problems of lesson 09, each reproduced
(``amp_lessons.teaching.reproductions``) or explained, with the public threads that
report it."""


def real_world_table() -> str:
    """``REAL_WORLD`` as a text table: number, problem, status and sources, in the
    student's language (the sources as they are).

    Example:
        >>> print(real_world_table().splitlines()[1])
         1  NaN loss in fp16                          reproduced  huggingface/...
    """
    shown = {"reproduced": _("reproduced"), "explained": _("explained")}
    width = max(map(len, shown.values()))  # "reproducido" is 11 letters
    lines = [f"{'#':>2}  {_('problem'):40}  {_('status'):{width}}  {_('sources')}"]
    for i, report in enumerate(REAL_WORLD, start=1):
        problem = _(report.problem)
        problem = problem if len(problem) <= 40 else problem[:39] + "…"
        lines.append(f"{i:>2}  {problem:40}  {shown[report.status]:{width}}  "
                     + ", ".join(report.sources))  # fmt: skip
    return "\n".join(lines)
