"""Every rule an exercise states has a visible case: for each graded exercise, one
small mutation of the reference answer per rule its lesson states, and each mutant
fails the check the learner runs (``hidden=False``), not only the hidden one.

A rule here is a sentence of the exercise's own text (its markdown cell or the
check's docstring), quoted beside its mutant. Not covered here: the matching and
choice items of lessons 07 and 08, whose lessons state that the visible check grades
the first half of the items and the hidden one the rest (a wrong answer to a hidden
item is not a broken rule), and the entry lesson's quiz (its own tests); the answers
to the visible items are mutated here.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from reference_solutions import (
    amp_step_order,
    amp_train_step,
    decode_fp16,
    memory_budget,
    predict_autocast_dtypes,
)
from test_checks_clinic import diagnose
from test_checks_distributed import rank_bytes
from test_checks_entry import _step_ending
from test_checks_entry import amp_step as entry_amp_step
from test_checks_formats import fp16_spacing, round_to_fp16
from test_checks_fp8 import to_fp8_tensorwise
from test_checks_practice import first_overflow, gan_step
from test_checks_quiz import quick_check_answers
from test_checks_scaler import unscale_grads, update_scale
from test_checks_underflow import choose_loss_scale, underflow_fraction

from amp_lessons.teaching import checks
from amp_lessons.teaching.quiz import QUESTIONS

pytestmark = pytest.mark.usefixtures("one_thread")

# --- 01 number formats ---------------------------------------------------------------


def decode_with(bias=15, implicit_one=True, subnormal=True, signed_zero=True):
    def decode(bits):
        sign = -1.0 if bits >> 15 else 1.0
        exponent, mantissa = (bits >> 10) & 0x1F, bits & 0x3FF
        if exponent == 0x1F:
            return sign * math.inf if mantissa == 0 else math.nan
        if exponent == 0 and subnormal:
            value = sign * mantissa * 2.0**-24
            return value if signed_zero or value != 0 else 0.0
        lead = 1 if implicit_one else 0
        return sign * (lead + mantissa / 1024) * 2.0 ** (exponent - bias)

    return decode


def decode_no_sign(bits):
    return abs(decode_fp16(bits))


def decode_inf_as_nan(bits):
    return math.nan if (bits >> 10) & 0x1F == 0x1F else decode_fp16(bits)


def decode_nan_as_inf(bits):
    value = decode_fp16(bits)
    return math.inf if math.isnan(value) else value


def round_with(ties_even=True, subnormals=True, overflow=True, signed=True):
    def rounding(x):
        if math.isnan(x) or math.isinf(x) or x == 0:
            return x
        exponent = math.frexp(abs(x))[1] - 1
        if subnormals:
            exponent = max(exponent, -14)
        elif exponent < -14:
            return math.copysign(0.0, x)
        step = 2.0 ** (exponent - 10)
        q = abs(x) / step
        rounded = (round(q) if ties_even else math.floor(q + 0.5)) * step
        if rounded > 65504:
            rounded = math.inf if overflow else 65504.0
        return math.copysign(rounded, x) if signed else rounded

    return rounding


def round_truncates(x):
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    step = 2.0 ** (max(math.frexp(abs(x))[1] - 1, -14) - 10)
    return math.copysign(math.floor(abs(x) / step) * step, x)


def spacing_at_x(x):  # x itself, not fp16(x)
    e = max(math.floor(math.log2(x)), -14) if x > 0 else -14
    return 2.0 ** (e - 10)


def spacing_log2_of_subnormals(x):
    h = torch.tensor(x, dtype=torch.float16).item()
    return 2.0 ** (math.floor(math.log2(h)) - 10) if h > 0 else 2.0**-24


def spacing_zero_is_zero(x):
    return 0.0 if x == 0 else fp16_spacing(x)


# --- 02 underflow ------------------------------------------------------------------


def underflow_counts_zeros(grads, scale):
    return ((grads * scale).to(torch.float16) == 0).float().mean().item()


def underflow_threshold(grads, scale):  # compares instead of letting the cast round
    nonzero = grads != 0
    if nonzero.sum() == 0:
        return 0.0
    lost = (grads[nonzero] * scale).abs() < 2.0**-24
    return lost.sum().item() / nonzero.sum().item()


def underflow_no_empty_case(grads, scale):
    nonzero = grads != 0
    flushed = (grads[nonzero] * scale).to(torch.float16) == 0
    return flushed.sum().item() / nonzero.sum().item()


def underflow_ignores_scale(grads, scale):
    return underflow_fraction(grads, 1.0)


def loss_scale_not_power_of_two(grads):
    return 65504.0 / grads.abs().max().item()


def loss_scale_never_below_one(grads):
    return max(choose_loss_scale(grads), 1.0)


def loss_scale_threshold(grads):  # max * S <= 65504 instead of the cast
    k = 0
    biggest = grads.abs().max().item()
    while biggest * 2.0**k > 65504:
        k -= 1
    while biggest * 2.0 ** (k + 1) <= 65504:
        k += 1
    return 2.0**k


def loss_scale_signed_max(grads):
    return choose_loss_scale(grads.max().reshape(1))


def loss_scale_one_too_small(grads):
    return choose_loss_scale(grads) / 2


# --- 03 loss scaling -----------------------------------------------------------------


def update_with(**changes):
    """update_scale with one rule changed: inf_scale, inf_tracker, count, grow_at,
    grown_tracker, ceiling, refused_tracker, defaults."""

    def update(
        scale,
        tracker,
        found_inf,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=2000,
    ):
        if changes.get("defaults"):
            growth_factor, backoff_factor, growth_interval = 2.0, 0.5, 2000
        if found_inf:
            return (
                scale if changes.get("inf_scale") else scale * backoff_factor,
                tracker if changes.get("inf_tracker") else 0,
            )
        tracker += 0 if changes.get("count") else 1
        if tracker == growth_interval + changes.get("grow_at", 0):
            grown = scale * growth_factor
            if not changes.get("ceiling"):
                grown = torch.tensor(grown, dtype=torch.float32).item()
                if not math.isfinite(grown):
                    return scale, tracker if changes.get("refused_tracker") else 0
            return grown, tracker if changes.get("grown_tracker") else 0
        return scale, tracker

    return update


def unscale_with(in_place=True, divide=False, on_inf=True, nan=True, every=True):
    def unscale(grads, scale):
        found = False
        for i, g in enumerate(grads):
            bad = torch.isinf(g).any() if not nan else ~torch.isfinite(g).all()
            found = found or (bool(bad) and (every or i == 0))
        if found and not on_inf:
            return True
        for g in grads:
            if not in_place:
                g = g * (1.0 / scale)
            elif divide:
                g.div_(scale)
            else:
                g.mul_(1.0 / scale)
        return found

    return unscale


# --- 04 autocast, 05 the AMP loop, 06 memory -----------------------------------------


def autocast_with(device, name, dtype):
    def predict():
        answer = copy.deepcopy(predict_autocast_dtypes())
        answer[device][name] = dtype
        return answer

    return predict


def autocast_same_lists():  # CUDA predicted from the CPU's lists
    answer = predict_autocast_dtypes()
    cpu = answer["cpu"]
    low = {torch.bfloat16: torch.float16}
    return {"cpu": cpu, "cuda": {n: low.get(d, d) for n, d in cpu.items()}}


def order_swapped(a, b):
    def order():
        steps = amp_step_order()
        i, j = steps.index(a), steps.index(b)
        steps[i], steps[j] = steps[j], steps[i]
        return steps

    return order


def order_zero_grad_between():
    steps = amp_step_order()[1:]
    return steps[:4] + ["zero_grad"] + steps[4:]


def train_with(**changes):
    """amp_train_step with one rule changed."""

    def step(model, optimizer, scaler, x, y, max_norm):
        if not changes.get("no_zero_grad"):
            optimizer.zero_grad(set_to_none=True)
        dtype = changes.get("dtype", torch.float16)
        with torch.amp.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
            loss = F.mse_loss(model(x), y)
        if changes.get("unscaled_backward"):
            loss.backward()
        else:
            scaler.scale(loss).backward()
        if changes.get("clip_first"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.unscale_(optimizer)
        if not changes.get("clip_first") and not changes.get("no_clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if changes.get("optimizer_step"):
            optimizer.step()
        else:
            scaler.step(optimizer)
        if not changes.get("no_update"):
            scaler.update()
        if changes.get("scaled_loss"):
            return scaler.scale(loss).item()
        return loss.item()

    return step


def memory_with(regime, part, factor):
    def budget(n_params):
        answer = copy.deepcopy(memory_budget(n_params))
        answer[regime][part] = int(answer[regime][part] * factor)
        return answer

    return budget


# --- 07 clinic, 08 quick check (the visible items) -----------------------------------


def diagnose_first_wrong(symptom):
    cause = diagnose(symptom)
    return "no_tensor_cores" if cause == "fp16_overflow" else cause


def quiz_with(qid, letter):
    return lambda: {**quick_check_answers(), qid: letter}


def _wrong_letter(qid):
    return next(k for k, (_, why) in QUESTIONS[qid][1].items() if why)


# --- 09 AMP in practice --------------------------------------------------------------


def gan_with(**changes):
    """gan_step with one rule changed."""

    def step(generator, discriminator, opt_g, opt_d, scaler, real, noise):
        def bce(logits, target):
            return F.binary_cross_entropy_with_logits(
                logits, torch.full_like(logits, target)
            )

        dtype = changes.get("dtype", torch.float16)
        ctx = torch.amp.autocast(real.device.type, dtype=dtype)
        if not changes.get("keep_d_grads"):
            opt_d.zero_grad(set_to_none=True)
        with ctx:
            fake = generator(noise)
            d_loss = bce(discriminator(real), 1.0)
            if not changes.get("no_fake_term"):
                d_loss = d_loss + bce(discriminator(fake.detach()), 0.0)
        scaler.scale(d_loss).backward()
        if changes.get("optimizer_step"):
            opt_d.step()
        else:
            scaler.step(opt_d)
        if changes.get("update_twice"):
            scaler.update()
        if not changes.get("keep_g_grads"):
            opt_g.zero_grad(set_to_none=True)
        with ctx:
            g_loss = bce(discriminator(fake), changes.get("g_target", 1.0))
        if changes.get("unscaled_backward"):
            g_loss.backward()
        else:
            scaler.scale(g_loss).backward()
        scaler.step(opt_g)
        if not changes.get("no_update"):
            scaler.update()
        return d_loss.item(), g_loss.item()

    return step


def overflow_with(leaves_only=False, last=False, fp32=False, keep_hooks=False):
    def find(model, x):
        seen = []

        def hook(name):
            def record(module, inputs, output):
                if (
                    isinstance(output, torch.Tensor)
                    and not torch.isfinite(output).all()
                ):
                    seen.append(name)

            return record

        modules = [
            (n, m)
            for n, m in model.named_modules()
            if not leaves_only or not list(m.children())
        ]
        handles = [m.register_forward_hook(hook(n)) for n, m in modules]
        with (
            torch.no_grad(),
            torch.amp.autocast("cpu", torch.float16, enabled=not fp32),
        ):
            model(x)
        if not keep_hooks:
            for handle in handles:
                handle.remove()
        if not seen:
            return None
        return seen[-1] if last else seen[0]

    return find


def overflow_skips_the_model_itself(model, x):
    class Without(torch.nn.Module):  # the model's own output is not watched
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return self.inner(x)

    found = first_overflow(Without(), x)
    return None if found in (None, "inner") else found.removeprefix("inner.")


# --- 10 distributed, 11 fp8 ----------------------------------------------------------


def rank_with(**changes):
    def bytes_of(shape, mode, world_size, rank):
        rows, rest = shape[0], math.prod(shape[1:])
        if mode == "ddp" and not changes.get("ddp_sharded"):
            return 16 * rows * rest
        rounding = math.floor if changes.get("floor") else math.ceil
        chunk = max(rounding(rows / world_size), 1)
        mine = max(0, min(chunk, rows - rank * chunk))
        if changes.get("no_padding"):
            return 16 * mine * rest
        moments = chunk if changes.get("pad_moments") else mine
        total = 8 * chunk * rest + 8 * moments * rest + 4 * changes.get("step", 0)
        return total * changes.get("bits", 1)

    return bytes_of


def fp8_with(**changes):
    def cast(x, dtype=torch.float8_e4m3fn, amax=None):
        if amax is None or changes.get("ignore_amax"):
            amax = x.max() if changes.get("no_abs") else x.abs().max()
        biggest = torch.finfo(dtype).max
        floor = 0.0 if changes.get("no_floor") else 1e-12
        scale = biggest / torch.clamp(amax.double(), min=floor)
        scale = (1 / scale if changes.get("inverted") else scale).float()
        scaled = x.float() * scale
        if not changes.get("no_clamp"):
            scaled = scaled.clamp(-biggest, biggest)
        return scaled.to(changes.get("dtype", dtype)), scale

    return cast


# (exercise, check, reference, [(rule the exercise states, mutant)])
RULES = [
    ("00 amp_step", checks.check_entry_amp_step, entry_amp_step, [
        ("backward on the scaled loss: scaler.scale(loss).backward()",
         _step_ending(lambda loss, opt, s: (loss.backward(), s.step(opt)))),
        ("step through the scaler, so an overflowed step is skipped",
         _step_ending(lambda loss, opt, s: (s.scale(loss).backward(), opt.step()))),
    ]),
    ("01 decode_fp16", checks.check_decode_fp16, decode_fp16, [
        ("the sign bit", decode_no_sign),
        ("exponent bias 15", decode_with(bias=16)),
        ("normals have an implicit leading 1", decode_with(implicit_one=False)),
        ("subnormals: no implicit 1, exponent 1 - 15", decode_with(subnormal=False)),
        ("both zeros (0x8000 is -0.0)", decode_with(signed_zero=False)),
        ("exponent all ones, mantissa 0: inf", decode_inf_as_nan),
        ("exponent all ones, any other mantissa: nan", decode_nan_as_inf),
    ]),
    ("01 round_to_fp16", checks.check_round_to_fp16, round_to_fp16, [
        ("round to nearest (not truncate)", round_truncates),
        ("the tie rule: ties to even", round_with(ties_even=False)),
        ("the subnormals, step 2^-24 below 2^-14", round_with(subnormals=False)),
        ("overflow to inf from 65520 on", round_with(overflow=False)),
        ("negative numbers keep their sign", round_with(signed=False)),
    ]),
    ("01 fp16_spacing", checks.check_fp16_spacing, fp16_spacing, [
        ("x rounded to fp16 first", spacing_at_x),
        ("e = -14 for subnormals", spacing_log2_of_subnormals),
        ("e = -14 for zero", spacing_zero_is_zero),
    ]),
    ("02 underflow_fraction", checks.check_underflow_fraction, underflow_fraction, [
        ("gradients already 0 are left out", underflow_counts_zeros),
        ("let the cast round, no threshold", underflow_threshold),
        ("0.0 when no gradient is nonzero", underflow_no_empty_case),
        ("multiply by scale first", underflow_ignores_scale),
    ]),
    ("02 choose_loss_scale", checks.check_choose_loss_scale, choose_loss_scale, [
        ("a power of two", loss_scale_not_power_of_two),
        ("k may be negative", loss_scale_never_below_one),
        ("the largest one", loss_scale_one_too_small),
        ("let the cast decide at the top (65504 < x < 65520 rounds down)",
         loss_scale_threshold),
        ("finite for EVERY g: the largest magnitude", loss_scale_signed_max),
    ]),
    ("03 update_scale", checks.check_update_rule, update_scale, [
        ("found_inf: scale *= backoff_factor", update_with(inf_scale=True)),
        ("found_inf: the tracker goes back to 0", update_with(inf_tracker=True)),
        ("a clean step: tracker + 1", update_with(count=True)),
        ("grows when the tracker reaches growth_interval", update_with(grow_at=1)),
        ("after growing, the tracker goes back to 0", update_with(grown_tracker=True)),
        ("grows only when the grown scale is finite in float32",
         update_with(ceiling=True)),
        ("growth refused: the tracker still goes back to 0",
         update_with(refused_tracker=True)),
        ("the growth_factor, backoff_factor, growth_interval arguments",
         update_with(defaults=True)),
    ]),
    ("03 unscale_grads", checks.check_unscale, unscale_grads, [
        ("multiply every tensor in place", unscale_with(in_place=False)),
        ("by torch's inverse scale (not a division)", unscale_with(divide=True)),
        ("also when some value is inf or nan", unscale_with(on_inf=False)),
        ("True if any value was inf OR nan", unscale_with(nan=False)),
        ("of ANY tensor", unscale_with(every=False)),
    ]),
    ("04 predict_autocast_dtypes", checks.check_autocast_dtypes,
     predict_autocast_dtypes, [
        ("matmul runs in the low dtype",
         autocast_with("cpu", "matmul(x, w)", torch.float32)),
        ("an op on no list follows its input",
         autocast_with("cpu", "relu(x)", torch.bfloat16)),
        ("an input may be a previous op's low output",
         autocast_with("cuda", "relu(linear(x, w))", torch.float32)),
        ("mixed inputs promote to the widest",
         autocast_with("cpu", "linear(x, w) + x", torch.bfloat16)),
        ("losses run in float32",
         autocast_with("cuda", "mse_loss(linear(x, w), linear(y, w))", torch.float16)),
        ("CUDA autocast is fp16",
         autocast_with("cuda", "linear(x, w)", torch.bfloat16)),
        ("the two devices' lists differ", autocast_same_lists),
    ]),
    ("05 amp_step_order", checks.check_amp_step_order, amp_step_order, [
        ("forward before backward",
         order_swapped("with autocast: forward", "scaler.scale(loss).backward()")),
        ("unscale_ after backward",
         order_swapped("scaler.scale(loss).backward()", "scaler.unscale_(optimizer)")),
        ("clip after unscale_",
         order_swapped("scaler.unscale_(optimizer)", "clip_grad_norm_")),
        ("step after clipping",
         order_swapped("clip_grad_norm_", "scaler.step(optimizer)")),
        ("update after step",
         order_swapped("scaler.step(optimizer)", "scaler.update()")),
        ("zero_grad first or last", order_zero_grad_between),
    ]),
    ("05 amp_train_step", checks.check_amp_train_step, amp_train_step, [
        ("start with optimizer.zero_grad", train_with(no_zero_grad=True)),
        ("fp16 autocast", train_with(dtype=torch.bfloat16)),
        ("under autocast", train_with(dtype=None)),
        ("backward on the scaled loss", train_with(unscaled_backward=True)),
        ("unscale_ before clipping", train_with(clip_first=True)),
        ("clip to max_norm", train_with(no_clip=True)),
        ("step through the scaler", train_with(optimizer_step=True)),
        ("update the scaler", train_with(no_update=True)),
        ("return the unscaled loss", train_with(scaled_loss=True)),
    ]),
    ("06 memory_budget", checks.check_memory_budget, memory_budget, [
        ("fp32 weights: 4 bytes each", memory_with("fp32", "weights", 0.5)),
        ("grads: 4 bytes each", memory_with("fp32", "grads", 2)),
        ("adam_state: two moments", memory_with("fp32", "adam_state", 0.5)),
        ("AMP keeps fp32 master weights", memory_with("amp", "weights", 0.5)),
        ("AMP's grads are fp32 too", memory_with("amp", "grads", 0.5)),
        ("AMP's Adam state is fp32", memory_with("amp", "adam_state", 0.5)),
    ]),
    ("07 diagnose (visible items)", checks.check_clinic_diagnosis, diagnose, [
        ("a key of CAUSES for every symptom", lambda symptom: "overflow"),
        ("the cause behind symptom 1", diagnose_first_wrong),
    ]),
    ("08 quick_check_answers (visible items)", checks.check_quick_check,
     quick_check_answers, [
        ("a letter for every question", quiz_with("where_clip", "z")),
        *[(f"question {qid}", quiz_with(qid, _wrong_letter(qid)))
          for qid in list(QUESTIONS)[:5]],
    ]),
    ("09 gan_step", checks.check_gan_step, gan_step, [
        ("zero opt_d's gradients", gan_with(keep_d_grads=True)),
        ("zero opt_g's gradients", gan_with(keep_g_grads=True)),
        ("d_loss has the fake term", gan_with(no_fake_term=True)),
        ("g_loss = bce(D(fake), 1.0)", gan_with(g_target=0.0)),
        ("fp16 autocast", gan_with(dtype=torch.bfloat16)),
        ("backward on the scaled loss", gan_with(unscaled_backward=True)),
        ("step opt_d through the scaler", gan_with(optimizer_step=True)),
        ("update the scaler", gan_with(no_update=True)),
        ("update the scaler once", gan_with(update_twice=True)),
    ]),
    ("09 first_overflow", checks.check_first_overflow, first_overflow, [
        ("a hook on every module, not only the leaves",
         overflow_with(leaves_only=True)),
        ("the first module", overflow_with(last=True)),
        ("under fp16 autocast", overflow_with(fp32=True)),
        ("remove the hooks", overflow_with(keep_hooks=True)),
        ('"" for the model itself', overflow_skips_the_model_itself),
    ]),
    ("10 rank_bytes", checks.check_rank_bytes, rank_bytes, [
        ("ddp: every rank holds everything", rank_with(ddp_sharded=True)),
        ("fsdp2: torch.chunk's rows per rank (ceil)", rank_with(floor=True)),
        ("fsdp2: param and grad padded", rank_with(no_padding=True)),
        ("fsdp2: moments not padded", rank_with(pad_moments=True)),
        ("leave out AdamW's step counter", rank_with(step=1)),
        ("bytes", rank_with(bits=8)),
    ]),
    ("11 to_fp8_tensorwise", checks.check_fp8_cast, to_fp8_tensorwise, [
        ("amax: the largest magnitude", fp8_with(no_abs=True)),
        ("a given amax is used instead", fp8_with(ignore_amax=True)),
        ("amax floored at 1e-12", fp8_with(no_floor=True)),
        ("scale = max / amax", fp8_with(inverted=True)),
        ("clamped to ±max", fp8_with(no_clamp=True)),
        ("cast to dtype", fp8_with(dtype=torch.float8_e5m2)),
    ]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("check", "reference"),
    [pytest.param(check, ref, id=name) for name, check, ref, _ in RULES],
)
def test_the_reference_passes_the_visible_check(check, reference, capsys):
    check(reference)
    assert "FAIL" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("check", "mutant"),
    [
        pytest.param(check, mutant, id=f"{name}: {rule}")
        for name, check, _, mutants in RULES
        for rule, mutant in mutants
    ],
)
def test_each_stated_rule_has_a_visible_case(check, mutant, capsys):
    with pytest.raises(AssertionError, match="cases? failed"):
        check(mutant)
    out = capsys.readouterr().out
    assert "FAIL" in out and "hint:" in out
    assert len(out.splitlines()) < checks._engine.FAILED_LINES  # the error line: 1
