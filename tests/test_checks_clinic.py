"""Lesson 07's grader (amp_lessons.teaching.checks.clinic): reference, known-wrong
answers with their clues, the stub, and the clinic's texts (amp_lessons.teaching.clinic)
quoting torch's own error messages."""

import pytest
from grader_harness import grader_tests

from amp_lessons.teaching.checks import check_clinic_diagnosis
from amp_lessons.teaching.checks.step_order import _live_error
from amp_lessons.teaching.clinic import CAUSES, DIAGNOSES, SYMPTOMS, clinic_text

# --- reference solutions (copy into the solution cells) -------------------------


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


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def diagnose_everything_overflow(symptom):
    return "fp16_overflow"


def diagnose_swapped(symptom):
    cause = diagnose(symptom)
    swap = {"nan_in_forward": "fp16_overflow", "clip_before_unscale": "no_loss_scaling"}
    return swap.get(cause, cause)


# (check, reference solution, [(wrong answer, hidden?, fragment of its hint)])
CASES = {
    "clinic": (
        check_clinic_diagnosis,
        diagnose,
        [
            (diagnose_everything_overflow, False, "Clue:"),
            (diagnose_swapped, True, "no scale can fix a NaN"),
            (diagnose_swapped, False, "measured on scaled grads"),
            (lambda s: "overflow", False, "not a key of CAUSES"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


# --- the expected answers agree with PyTorch and with the course's facts ---------


def test_clinic_error_messages_are_torchs_own():
    assert "ValueError: Attempting to unscale FP16 gradients." in SYMPTOMS
    # the "forgot update()" error: iteration 1 stepped, iteration 2 calls unscale_
    message = _live_error(lambda s, o: (s.unscale_(o), s.step(o), s.unscale_(o)))
    assert any(symptom.endswith(message) for symptom in SYMPTOMS)
    assert set(cause for _, cause, _ in DIAGNOSES) == set(CAUSES)


def test_texts_for_the_notebooks_list_everything():
    clinic = " ".join(clinic_text().split())  # undo the line wrapping
    assert all(symptom in clinic for symptom in SYMPTOMS)
    assert all(key in clinic for key in CAUSES)


# --- fair grading: right or wrong, and what the chosen cause means; never the key ---


def test_visible_table_never_prints_the_right_cause(capsys):
    with pytest.raises(AssertionError):
        check_clinic_diagnosis(diagnose_everything_overflow)
    out = capsys.readouterr().out
    for _, cause, _ in DIAGNOSES[:5]:
        if cause != "fp16_overflow":  # the one this answer got right
            assert cause not in out, cause
    assert "'fp16_overflow' means " + CAUSES["fp16_overflow"] in " ".join(out.split())


def test_a_key_that_is_no_cause_gets_the_clue(capsys):
    with pytest.raises(AssertionError):
        check_clinic_diagnosis(lambda symptom: ["fp16_overflow"])
    out = " ".join(capsys.readouterr().out.split())
    assert "not a key of CAUSES. Clue:" in out


def test_a_wrong_cause_is_explained_in_spanish(capsys, spanish):
    with pytest.raises(AssertionError, match="casos fallaron"):
        check_clinic_diagnosis(diagnose_everything_overflow)
    out = " ".join(capsys.readouterr().out.split())
    assert "pista: 'fp16_overflow' es la causa «una activación o la pérdida" in out
    assert "que no produce este síntoma. Indicio: los propios gradientes" in out
    # a failed table is compact (at most 15 lines): the passing rows are counted
    assert "(2 de 6 casos pasaron)" in out
