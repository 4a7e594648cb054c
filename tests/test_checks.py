"""Tests for amp_lessons.checks: each check passes its reference solution, rejects each
known-wrong answer with its own hint, and reports the nbgrader stub "not attempted".

The reference solutions below are written the way a student would write them in a
notebook's solution cell; the notebooks paste them between `### BEGIN SOLUTION` and
`### END SOLUTION`.
"""

import math
import random

import pytest
import torch
import torch.nn.functional as F

from amp_lessons import checks
from amp_lessons.checks import (
    AMP_STEPS,
    AUTOCAST_OPS,
    CAUSES,
    QUICK_CHECK,
    SYMPTOMS,
)

# =================================================================================
# Reference solutions (copy into the solution cells)
# =================================================================================


# --- 01 number formats ---------------------------------------------------------
def decode_fp16(bits):
    sign = -1.0 if bits >> 15 else 1.0
    exponent = (bits >> 10) & 0x1F  # 5 bits, bias 15
    mantissa = bits & 0x3FF  # 10 bits
    if exponent == 0x1F:  # all ones: inf or nan
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:  # subnormal (or zero): no implicit 1, exponent 1 - 15
        return sign * mantissa * 2.0**-24
    return sign * (1 + mantissa / 1024) * 2.0 ** (exponent - 15)


def round_to_fp16(x):
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    exponent = max(math.frexp(abs(x))[1] - 1, -14)  # subnormals share 2**-14's step
    step = 2.0 ** (exponent - 10)  # 10 mantissa bits
    rounded = round(abs(x) / step) * step  # Python's round() ties to even
    if rounded > 65504:  # 65520 and above round past the largest fp16
        rounded = math.inf
    return math.copysign(rounded, x)


def fp16_spacing(x):
    h = torch.tensor(x, dtype=torch.float16)
    above = torch.nextafter(h, torch.tensor(math.inf, dtype=torch.float16))
    return (above.float() - h.float()).item()


# --- 02 the underflow problem --------------------------------------------------
def underflow_fraction(grads, scale):
    nonzero = grads != 0
    if nonzero.sum() == 0:
        return 0.0
    flushed = (grads[nonzero] * scale).to(torch.float16) == 0
    return flushed.sum().item() / nonzero.sum().item()


def choose_loss_scale(grads):
    k = 0
    while not torch.isfinite((grads * 2.0**k).half()).all():
        k -= 1
    while torch.isfinite((grads * 2.0 ** (k + 1)).half()).all():
        k += 1
    return 2.0**k


# --- 03 loss scaling from scratch -------------------------------------------------
def update_scale(
    scale,
    growth_tracker,
    found_inf,
    growth_factor=2.0,
    backoff_factor=0.5,
    growth_interval=2000,
):
    if found_inf:
        return scale * backoff_factor, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        grown = torch.tensor(scale * growth_factor, dtype=torch.float32).item()
        return (grown if math.isfinite(grown) else scale), 0
    return scale, growth_tracker


def unscale_grads(grads, scale):
    inv_scale = 1.0 / scale  # float64 reciprocal; mul_ rounds it to float32
    found_inf = False
    for g in grads:
        found_inf = found_inf or not torch.isfinite(g).all().item()
        g.mul_(inv_scale)
    return found_inf


# --- 04 autocast ----------------------------------------------------------------
def predict_autocast_dtypes():
    low, f32 = torch.bfloat16, torch.float32
    return {
        "matmul(x, w)": low,
        "linear(x, w)": low,
        "relu(x)": f32,
        "relu(linear(x, w))": low,
        "linear(x, w) + x": f32,
        "mse_loss(linear(x, w), linear(y, w))": f32,
        "conv2d(img, k)": low,
        "softmax(linear(x, w))": low,
        "sum(linear(x, w))": low,
        "cross_entropy(linear(x, w), t)": f32,
        "prod(linear(x, w))": f32,
        "layer_norm(linear(x, w))": low,
    }


# --- 05 the full AMP loop -------------------------------------------------------
def amp_step_order():
    return [
        "zero_grad",
        "forward under autocast",
        "scaler.scale(loss).backward()",
        "scaler.unscale_(optimizer)",
        "clip_grad_norm_",
        "scaler.step(optimizer)",
        "scaler.update()",
    ]


def amp_train_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


# --- 06 speed and memory -------------------------------------------------------
def memory_budget(n_params):
    fp32 = {"weights": 4 * n_params, "grads": 4 * n_params, "adam_state": 8 * n_params}
    return {"fp32": fp32, "amp": dict(fp32)}  # master weights: AMP keeps all in fp32


# --- 07 AMP clinic -------------------------------------------------------------
def diagnose(symptom):
    clues = {
        "first fp16 step": "fp16_overflow",
        "Attempting to unscale FP16": "model_half_with_scaler",
        "clip_grad_norm_": "clip_before_unscale",
        "laptop CPU": "no_tensor_cores",
        "unscale_() is being called after step()": "missing_update",
        "halves on every step": "nan_in_forward",
        "Pure fp16": "no_loss_scaling",
        "BCELoss": "use_bce_with_logits",
        "peak memory": "weight_copies_small_batch",
        "bfloat16 autocast and a GradScaler": "scaler_with_bf16",
    }
    return next(cause for clue, cause in clues.items() if clue in symptom)


# --- 08 quick check ------------------------------------------------------------
def quick_check_answers():
    return {
        "autocast_scope": "b",
        "why_scale": "c",
        "step_with_inf": "d",
        "update_after_overflow": "a",
        "memory_saving": "b",
        "bf16_scaler": "c",
        "backward_call": "a",
        "where_fastest": "d",
        "deprecated_api": "b",
        "where_clip": "c",
    }


# =================================================================================
# Known-wrong answers, each with a fragment of the hint it must get
# =================================================================================


def decode_no_implicit_one(bits):
    e, m = (bits >> 10) & 0x1F, bits & 0x3FF
    if e == 0x1F:
        return decode_fp16(bits)
    return (-1.0 if bits >> 15 else 1.0) * (m / 1024) * 2.0 ** (max(e, 1) - 15)


def decode_bias_127(bits):
    e, m = (bits >> 10) & 0x1F, bits & 0x3FF
    if e in (0, 0x1F):
        return decode_fp16(bits)
    return (-1.0 if bits >> 15 else 1.0) * (1 + m / 1024) * 2.0 ** (e - 127)


def decode_subnormal_as_normal(bits):
    e, m = (bits >> 10) & 0x1F, bits & 0x3FF
    if e == 0 and m:
        return (-1.0 if bits >> 15 else 1.0) * (1 + m / 1024) * 2.0**-15
    return decode_fp16(bits)


def decode_no_nan(bits):
    e = (bits >> 10) & 0x1F
    return (-1.0 if bits >> 15 else 1.0) * math.inf if e == 0x1F else decode_fp16(bits)


def round_truncate(x):
    if x == 0 or math.isinf(x) or abs(x) >= 65520:
        return round_to_fp16(x)
    step = 2.0 ** (max(math.frexp(abs(x))[1] - 1, -14) - 10)
    return math.copysign(math.floor(abs(x) / step) * step, x)


def round_overflow_at_max(x):
    return math.copysign(math.inf, x) if abs(x) > 65504 else round_to_fp16(x)


def round_flush_subnormals(x):
    return 0.0 if abs(x) < 2.0**-14 else round_to_fp16(x)


def round_ties_away(x):
    if x == 0 or math.isinf(x):
        return x
    step = 2.0 ** (max(math.frexp(abs(x))[1] - 1, -14) - 10)
    rounded = math.floor(abs(x) / step + 0.5) * step
    return math.copysign(math.inf if rounded > 65504 else rounded, x)


def spacing_fp32(x):
    return 2.0 ** (math.frexp(fp16_value(x))[1] - 1 - 23) if x else 2.0**-149


def spacing_normal_formula(x):
    h = fp16_value(x)
    return 2.0 ** (math.frexp(h)[1] - 1 - 10) if h else 2.0**-24


def spacing_at_x(x):
    return 2.0 ** (math.frexp(x)[1] - 1 - 10) if x >= 2**-14 else 2.0**-24


def spacing_next_value(x):
    return fp16_value(x) + fp16_spacing(x)


def fp16_value(x):
    return torch.tensor(x, dtype=torch.float16).item()


def underflow_counts_zeros(grads, scale):
    return ((grads * scale).half() == 0).float().mean().item()


def underflow_no_scale(grads, scale):
    return underflow_fraction(grads, 1.0)


def underflow_below_min_normal(grads, scale):
    nonzero = grads[grads != 0]
    if nonzero.numel() == 0:
        return 0.0
    return ((nonzero * scale).abs() < 2**-14).float().mean().item()


def underflow_below_min_subnormal(grads, scale):
    nonzero = grads[grads != 0]
    if nonzero.numel() == 0:
        return 0.0
    return ((nonzero * scale).abs() < 2**-24).float().mean().item()


def loss_scale_le_65504(grads):
    return 2.0 ** math.floor(math.log2(65504 / grads.abs().max().item()))


def loss_scale_not_power_of_two(grads):
    return 65504 / grads.abs().max().item()


def loss_scale_signed_max(grads):
    return 2.0 ** math.floor(math.log2(65504 / grads.max().item()))


def update_no_tracker_reset_on_inf(scale, tracker, found_inf, *args, **kwargs):
    new_scale, new_tracker = update_scale(scale, tracker, found_inf, *args, **kwargs)
    return new_scale, (tracker if found_inf else new_tracker)


def update_grows_on_inf(scale, tracker, found_inf, growth_factor=2.0, *args, **kw):
    if found_inf:
        return scale * growth_factor, 0
    return update_scale(scale, tracker, found_inf, growth_factor, *args, **kw)


def update_off_by_one(
    scale,
    tracker,
    found_inf,
    growth_factor=2.0,
    backoff_factor=0.5,
    growth_interval=2000,
):
    if found_inf:
        return scale * backoff_factor, 0
    if tracker == growth_interval:  # checks before counting this step
        return scale * growth_factor, 0
    return scale, tracker + 1


def update_no_reset_after_growth(scale, tracker, found_inf, *args, **kwargs):
    new_scale, new_tracker = update_scale(scale, tracker, found_inf, *args, **kwargs)
    return new_scale, (tracker + 1 if new_scale > scale else new_tracker)


def update_unbounded_growth(
    scale,
    tracker,
    found_inf,
    growth_factor=2.0,
    backoff_factor=0.5,
    growth_interval=2000,
):
    if found_inf:
        return scale * backoff_factor, 0
    if tracker + 1 == growth_interval:
        return scale * growth_factor, 0
    return scale, tracker + 1


def unscale_not_in_place(grads, scale):
    found_inf = any(not torch.isfinite(g).all() for g in grads)
    grads = [g * (1.0 / scale) for g in grads]
    return found_inf


def unscale_divide(grads, scale):
    for g in grads:
        g.div_(scale)
    return any(not torch.isfinite(g).all() for g in grads)


def unscale_misses_nan(grads, scale):
    found_inf = any(torch.isinf(g).any() for g in grads)
    for g in grads:
        g.mul_(1.0 / scale)
    return bool(found_inf)


def unscale_skips_on_inf(grads, scale):
    if any(not torch.isfinite(g).all() for g in grads):
        return True
    for g in grads:
        g.mul_(1.0 / scale)
    return False


def autocast_cuda_style():
    answers = predict_autocast_dtypes()
    for name in (
        "softmax(linear(x, w))",
        "sum(linear(x, w))",
        "layer_norm(linear(x, w))",
    ):
        answers[name] = torch.float32
    return answers


def autocast_everything_low():
    return {name: torch.bfloat16 for name in AUTOCAST_OPS}


def autocast_strings():
    return {
        n: str(d).removeprefix("torch.") for n, d in predict_autocast_dtypes().items()
    }


def order_clip_first():
    return [
        "zero_grad",
        "forward under autocast",
        "scaler.scale(loss).backward()",
        "clip_grad_norm_",
        "scaler.unscale_(optimizer)",
        "scaler.step(optimizer)",
        "scaler.update()",
    ]


def order_update_first():
    order = amp_step_order()
    order[5], order[6] = order[6], order[5]
    return order


def order_zero_grad_between():
    order = amp_step_order()[1:]
    order.insert(3, "zero_grad")  # after unscale_, before clip
    return order


def order_nanogpt():
    return amp_step_order()[1:] + ["zero_grad"]


def order_missing_unscale():
    return [s for s in amp_step_order() if s != "scaler.unscale_(optimizer)"]


def train_no_unscale(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def train_optimizer_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return loss.item()


def train_no_update(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return loss.item()


def train_unscaled_backward(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    loss.backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def memory_halved_weights(n_params):
    budget = memory_budget(n_params)
    budget["amp"] = {**budget["amp"], "weights": 2 * n_params}
    return budget


def memory_halved_everything(n_params):
    budget = memory_budget(n_params)
    budget["amp"] = {k: v // 2 for k, v in budget["amp"].items()}
    return budget


def memory_one_moment(n_params):
    budget = memory_budget(n_params)
    for regime in budget.values():
        regime["adam_state"] = 4 * n_params
    return budget


def diagnose_everything_overflow(symptom):
    return "fp16_overflow"


def diagnose_swapped(symptom):
    cause = diagnose(symptom)
    swap = {"nan_in_forward": "fp16_overflow", "clip_before_unscale": "no_loss_scaling"}
    return swap.get(cause, cause)


def quiz_all_a():
    return {qid: "a" for qid in QUICK_CHECK}


def quiz_one_wrong():
    return {**quick_check_answers(), "autocast_scope": "a", "bf16_scaler": "d"}


def stub(*args, **kwargs):
    ### BEGIN SOLUTION
    ### END SOLUTION
    raise NotImplementedError()


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "decode": (
        checks.check_decode_fp16,
        decode_fp16,
        [
            (decode_no_implicit_one, False, "implicit leading 1"),
            (decode_bias_127, False, "bias 127"),
            (decode_subnormal_as_normal, False, "no implicit 1, value = m * 2^-24"),
            (decode_no_nan, False, "any other mantissa, nan"),
            (decode_no_nan, True, "any other mantissa, nan"),
        ],
    ),
    "round": (
        checks.check_round_to_fp16,
        round_to_fp16,
        [
            (round_truncate, False, "rounds to the NEAREST"),
            (round_overflow_at_max, False, "only >= 65520 becomes inf"),
            (round_flush_subnormals, False, "only |x| <= 2^-25 rounds to 0"),
            (round_ties_away, False, "ties to the even neighbour"),
            (round_ties_away, True, "ties to the even neighbour"),
            (lambda x: x, False, "you returned x unchanged"),
        ],
    ),
    "spacing": (
        checks.check_fp16_spacing,
        fp16_spacing,
        [
            (spacing_fp32, False, "fp32's spacing"),
            (spacing_normal_formula, False, "stays 2^-24 all the way down"),
            (spacing_at_x, True, "not at x"),
            (spacing_next_value, False, "not the next number itself"),
        ],
    ),
    "underflow": (
        checks.check_underflow_fraction,
        underflow_fraction,
        [
            (underflow_counts_zeros, False, "already zero"),
            (underflow_no_scale, False, "multiply the grads by scale"),
            (underflow_below_min_normal, False, "become subnormals"),
            (underflow_below_min_subnormal, True, "round UP to 2^-24"),
        ],
    ),
    "loss_scale": (
        checks.check_choose_loss_scale,
        choose_loss_scale,
        [
            (loss_scale_le_65504, True, "rounds it DOWN to 65504"),
            (loss_scale_not_power_of_two, False, "must be a power of two"),
            (loss_scale_signed_max, True, "use grads.abs().max()"),
            (lambda g: 2 * choose_loss_scale(g), False, "overflows fp16"),
        ],
    ),
    "update": (
        checks.check_update_rule,
        update_scale,
        [
            (update_no_tracker_reset_on_inf, False, "growth_tracker goes back to 0"),
            (update_grows_on_inf, False, "never grow on an overflow step"),
            (update_off_by_one, False, "torch counts this step"),
            (update_no_reset_after_growth, False, "after growing, reset"),
            (update_unbounded_growth, True, "stored in float32"),
        ],
    ),
    "unscale": (
        checks.check_unscale,
        unscale_grads,
        [
            (unscale_not_in_place, False, "unscale IN PLACE"),
            (unscale_divide, False, "you divided by scale"),
            (unscale_misses_nan, False, "nan counts too"),
            (unscale_skips_on_inf, False, "even when an inf/nan is found"),
        ],
    ),
    "autocast": (
        checks.check_autocast_dtypes,
        predict_autocast_dtypes,
        [
            (autocast_cuda_style, True, "CUDA's autocast would run it in float32"),
            (autocast_everything_low, False, "runs in the dtype of its input"),
            (autocast_everything_low, False, "on its float32 list"),
            (autocast_everything_low, False, "type promotion"),
            (autocast_strings, False, "not strings"),
        ],
    ),
    "order": (
        checks.check_amp_step_order,
        amp_step_order,
        [
            (order_clip_first, False, "clips the SCALED grads"),
            (order_update_first, False, "No inf checks were recorded"),
            (order_zero_grad_between, False, "wipes the grads"),
            (order_zero_grad_between, True, "trains the model differently"),
            (order_missing_unscale, False, "missing: 'scaler.unscale_(optimizer)'"),
        ],
    ),
    "train": (
        checks.check_amp_train_step,
        amp_train_step,
        [
            (train_no_unscale, False, "ran on the SCALED grads"),
            (train_optimizer_step, False, "optimizer.step() ran on inf/nan grads"),
            (train_optimizer_step, True, "optimizer.step() ran on inf/nan grads"),
            (train_no_update, False, "call scaler.update()"),
            (train_unscaled_backward, False, "backward on the SCALED loss"),
        ],
    ),
    "memory": (
        checks.check_memory_budget,
        memory_budget,
        [
            (memory_halved_weights, False, "fp32 master weights"),
            (memory_halved_everything, True, "grads are float32 too"),
            (memory_one_moment, False, "TWO moments"),
        ],
    ),
    "clinic": (
        checks.check_clinic_diagnosis,
        diagnose,
        [
            (diagnose_everything_overflow, False, "Clue:"),
            (diagnose_swapped, True, "no scale can fix a NaN"),
            (diagnose_swapped, False, "measured on scaled grads"),
            (lambda s: "overflow", False, "not a key of CAUSES"),
        ],
    ),
    "quiz": (
        checks.check_quick_check,
        quick_check_answers,
        [
            (quiz_all_a, False, "the docs advise against wrapping backward"),
            (quiz_one_wrong, True, "its advantage is range, not precision"),
        ],
    ),
}
WRONG = [
    pytest.param(name, wrong, hidden, fragment, id=f"{name}-{wrong.__name__}-{i}")
    for name, (_, _, wrongs) in CASES.items()
    for i, (wrong, hidden, fragment) in enumerate(wrongs)
]


# =================================================================================
# Tests
# =================================================================================


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize("name", CASES)
def test_reference_passes(name, hidden, capsys):
    check, reference, _ = CASES[name]
    assert check(reference, hidden=hidden) is None
    out, err = capsys.readouterr()
    assert "FAIL" not in out and "passed" in out
    assert "expected" in out and "got" in out  # the table was printed
    assert err == ""


@pytest.mark.parametrize(("name", "wrong", "hidden", "fragment"), WRONG)
def test_wrong_answer_rejected_with_hint(name, wrong, hidden, fragment, capsys):
    check = CASES[name][0]
    with pytest.raises(AssertionError, match=r"\d+ of \d+ cases failed — see hints"):
        check(wrong, hidden=hidden)
    out, err = capsys.readouterr()
    assert "FAIL" in out and "hint:" in out
    assert fragment in " ".join(out.split()), out  # hints are wrapped over lines
    assert err == ""


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize("name", CASES)
def test_stub_is_not_attempted(name, hidden, capsys):
    with pytest.raises(AssertionError, match="not attempted"):
        CASES[name][0](stub, hidden=hidden)
    out, err = capsys.readouterr()
    assert out.startswith("not attempted: stub() still raises NotImplementedError")
    assert err == ""


def order_zero_grad_after_forward():
    order = amp_step_order()[1:]
    order.insert(1, "zero_grad")  # between forward and backward: still correct
    return order


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize(
    ("check", "other_correct"),
    [
        (checks.check_amp_step_order, order_nanogpt),
        (checks.check_amp_step_order, order_zero_grad_after_forward),
        (
            checks.check_underflow_fraction,
            lambda g, s: torch.tensor(underflow_fraction(g, s)),
        ),
        (checks.check_update_rule, lambda *a, **k: list(update_scale(*a, **k))),
        (checks.check_unscale, lambda g, s: torch.tensor(unscale_grads(g, s))),
    ],
    ids=["nanogpt-order", "zero-grad-after-forward", "tensor", "list", "tensor-bool"],
)
def test_other_correct_answers_pass(check, other_correct, hidden, capsys):
    check(other_correct, hidden=hidden)
    assert capsys.readouterr().err == ""


def test_other_exception_is_a_failed_case_with_its_message(capsys):
    def decode_fp16(bits):
        raise ValueError(f"cannot decode {bits}")

    with pytest.raises(AssertionError, match="10 of 10 cases failed"):
        checks.check_decode_fp16(decode_fp16)
    out, err = capsys.readouterr()
    assert "raised ValueError" in out and "cannot decode 15360" in out
    assert err == ""


def test_not_callable_is_a_value_error():
    with pytest.raises(ValueError, match="expects the function you wrote"):
        checks.check_decode_fp16(None)


def test_warnings_in_student_code_stay_off_stderr(capsys):
    import sys
    import warnings

    def noisy(bits):
        warnings.warn("student warning", UserWarning, stacklevel=1)
        print("debug print", file=sys.stderr)
        return decode_fp16(bits)

    checks.check_decode_fp16(noisy)
    out, err = capsys.readouterr()
    assert err == "" and "debug print" in out


def test_check_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    checks.check_amp_train_step(amp_train_step)
    assert torch.equal(torch.get_rng_state(), before)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_decode_cases_cover_every_kind_of_fp16():
    values = [checks._fp16_from_bits(b) for b in checks._DECODE_CASES]
    assert any(math.isnan(v) for v in values) and math.inf in values
    assert 2.0**-24 in values and 65504.0 in values and -2.0 in values
    assert any(str(v) == "-0.0" for v in values)


def test_round_cases_are_exact_in_float32_and_match_torchs_cast():
    # torch rounds a Python float to fp16 via float32; the ties and edges must be
    # exact there, and the plain-Python rounding must agree with torch's cast
    for x in (1 + 2**-11, 1 + 3 * 2**-11, 65519.0, 65520.0, 2049.0, 2.0**-25):
        assert torch.tensor(x, dtype=torch.float32).item() == x
    for x in checks._ROUND_CASES + checks._ROUND_HIDDEN:
        assert checks._same(round_to_fp16(torch.tensor(x).item()), checks._fp16(x))


def test_spacing_examples_from_the_docstring():
    assert checks._fp16_spacing(1.0) == 2.0**-10
    assert checks._fp16_spacing(2048.0) == 2.0
    assert checks._fp16_spacing(0.0) == 2.0**-24
    assert checks._fp16_spacing(2047.9) == 2.0  # rounds to 2048 first


def test_loss_scale_edge_cases_straddle_65504():
    assert checks._largest_safe_scale(torch.tensor([65510 * 2.0**-20])) == 2.0**20
    assert checks._largest_safe_scale(torch.tensor([65520 * 2.0**-20])) == 2.0**19
    assert checks._largest_safe_scale(torch.tensor([1e5])) == 0.5


def test_update_replica_matches_gradscaler_on_random_states():
    rng = random.Random(0)
    cases = list(checks._UPDATE_CASES + checks._UPDATE_HIDDEN)
    for _ in range(40):
        interval = rng.choice([1, 2, 3, 5])
        cases.append(
            (
                2.0 ** rng.randint(-5, 127),
                rng.randrange(interval),
                rng.random() < 0.3,
                {"growth_factor": rng.choice([2.0, 3.0]), "growth_interval": interval},
            )
        )
    for scale, tracker, found_inf, factors in cases:
        settings = {**checks._DEFAULTS, **factors}
        assert checks._torch_update(scale, tracker, found_inf, **factors) == (
            checks._update_replica(scale, tracker, found_inf, **settings)
        )


def test_unscale_cases_tell_division_from_multiplication():
    x = checks._unscale_cases(hidden=False)[1][1][0]
    assert not torch.equal(x / 3.0, x * (1 / 3.0))
    unscaled, found = checks._torch_unscale([x], 3.0)
    assert torch.equal(unscaled[0], x * (1 / 3.0)) and not found


def test_autocast_expectations_are_read_live_and_mix_dtypes():
    dtypes = {name: checks._autocast_dtypes(name)[0] for name in AUTOCAST_OPS}
    assert dtypes == predict_autocast_dtypes()  # this torch's CPU autocast lists
    assert dtypes["matmul(x, w)"] is torch.bfloat16
    assert dtypes["mse_loss(linear(x, w), linear(y, w))"] is torch.float32


def test_train_cases_include_real_overflow_and_growth():
    runs = {
        c.name: checks._run_train_case(amp_train_step, c) for c in checks._TRAIN_CASES
    }
    assert runs["1 step, overflow (scale 2**40)"][1] == 2.0**39  # skipped, backed off
    assert runs["3 steps, growth_interval 2"][1] == 2.0**11  # grew once
    adam = checks._run_train_case(amp_train_step, checks._TRAIN_HIDDEN[0])
    assert adam[1] == 2.0**15  # the overflow at step 2 of 3 was seen


def test_memory_budget_is_measured_and_fp32_in_both_regimes():
    budget = checks._memory_budget(1000)
    assert budget["fp32"] == budget["amp"]
    assert budget["amp"] == {"weights": 4000, "grads": 4000, "adam_state": 8000}


def test_clinic_error_messages_are_torchs_own():
    assert "ValueError: Attempting to unscale FP16 gradients." in SYMPTOMS
    # the "forgot update()" error: iteration 1 stepped, iteration 2 calls unscale_
    message = checks._live_error(lambda s, o: (s.unscale_(o), s.step(o), s.unscale_(o)))
    assert any(symptom.endswith(message) for symptom in SYMPTOMS)
    assert set(cause for _, cause, _ in checks._DIAGNOSES) == set(CAUSES)


def test_quiz_has_one_right_choice_and_a_reason_for_every_wrong_one():
    for _, choices in checks._QUIZ.values():
        reasons = [why for _, why in choices.values()]
        assert sum(not why for why in reasons) == 1
    text = checks.quick_check_text()
    assert all(qid in text for qid in QUICK_CHECK)


def test_texts_for_the_notebooks_list_everything():
    clinic = " ".join(checks.clinic_text().split())  # undo the line wrapping
    assert all(symptom in clinic for symptom in SYMPTOMS)
    assert all(key in clinic for key in CAUSES)
    assert set(AMP_STEPS) == set(amp_step_order())
