"""The grading engine (amp_lessons.teaching.checks._engine), through real graders: a
student's exception is a failed case with its message, a non-function is a failed case,
nothing the student's code prints or warns reaches stderr, and the answers students
really write (a next() that finds nothing, a huge int, a list where a key was asked, an
exit) fail with a hint instead of crashing the check. tests/test_checks_fuzz.py does the
same for every grader and far more answers.

Each lesson's graders have their own file, tests/test_checks_<lesson>.py, with the
reference solutions, the known-wrong answers and their hints; the tests every grader
gets are built by tests/grader_harness.py.
"""

import subprocess
import sys
import warnings

import pytest
import torch
from reference_solutions import (
    amp_step_order,
    amp_train_step,
    decode_fp16,
    memory_budget,
    predict_autocast_dtypes,
)

from amp_lessons.teaching import checks
from amp_lessons.teaching.checks import AUTOCAST_OPS
from amp_lessons.teaching.quiz import QUESTIONS


def test_other_exception_is_a_failed_case_with_its_message(capsys):
    def decode_fp16(bits):
        raise ValueError(f"cannot decode {bits}")

    with pytest.raises(AssertionError, match="10 of 10 cases failed"):
        checks.check_decode_fp16(decode_fp16)
    out, err = capsys.readouterr()
    assert "raised ValueError" in out and "cannot decode 15360" in out
    assert err == ""


def test_not_callable_is_a_failed_case_with_a_table(capsys):
    # an AssertionError with a table, like every other mistake, not a ValueError
    with pytest.raises(AssertionError, match="the case failed"):
        checks.check_decode_fp16(None)
    out, err = capsys.readouterr()
    said = " ".join(out.split())
    assert "check_decode_fp16 calls the function your solution cell defines" in said
    assert "got a NoneType instead" in said and "FAIL" in out and err == ""


def test_warnings_in_student_code_stay_off_stderr(capsys):
    def noisy(bits):
        warnings.warn("student warning", UserWarning, stacklevel=1)
        print("debug print", file=sys.stderr)
        return decode_fp16(bits)

    checks.check_decode_fp16(noisy)
    out, err = capsys.readouterr()
    assert err == "" and "debug print" in out


# --- answers students really write: each one a failed case with a hint, never a crash


def test_clinic_diagnosis_survives_a_next_that_finds_nothing(capsys):
    # the reference's next(...) raises StopIteration when no clue matches; the check
    # used to crash with "unhashable type: 'Raised'"
    def diagnose(symptom):
        clues = {"no symptom says this": "fp16_overflow"}
        return next(cause for clue, cause in clues.items() if clue in symptom)

    with pytest.raises(AssertionError, match="cases? failed"):
        checks.check_clinic_diagnosis(diagnose)
    out, err = capsys.readouterr()
    assert "raised StopIteration" in out and "next(...)" in " ".join(out.split())
    assert err == ""


FLOAT_CHECKS = {
    "decode_fp16": (checks.check_decode_fp16, lambda bits: 10**400),
    "round_to_fp16": (checks.check_round_to_fp16, lambda x: 10**400),
    "fp16_spacing": (checks.check_fp16_spacing, lambda x: 10**400),
    "underflow_fraction": (checks.check_underflow_fraction, lambda g, s: 10**400),
    "choose_loss_scale": (checks.check_choose_loss_scale, lambda g: 10**400),
    "update_rule": (checks.check_update_rule, lambda *a, **k: (10**400, 0)),
    "amp_train_step": (checks.check_amp_train_step, lambda *a: 10**400),
}


@pytest.mark.parametrize("name", FLOAT_CHECKS)
def test_a_huge_int_is_a_wrong_answer_not_an_overflow_error(name, capsys):
    check, answer = FLOAT_CHECKS[name]
    with pytest.raises(AssertionError, match="cases? failed"):
        check(answer)
    out, err = capsys.readouterr()
    assert "FAIL" in out and "hint:" in out and err == ""


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (checks.check_clinic_diagnosis, lambda symptom: ["fp16_overflow"]),
        (checks.check_quick_check, lambda: {"autocast_scope": ["b"]}),
        (checks.check_autocast_dtypes, lambda: {"matmul(x, w)": [torch.bfloat16]}),
        (checks.check_amp_step_order, lambda: [["zero_grad"]] * 7),
        (checks.check_memory_budget, lambda n: {"fp32": [4 * n], "amp": {}}),
    ],
    ids=["clinic", "quiz", "autocast", "step_order", "memory"],
)
def test_unhashable_answers_are_wrong_answers(check, answer, capsys):
    with pytest.raises(AssertionError, match="cases? failed"):
        check(answer)
    out, err = capsys.readouterr()
    assert "FAIL" in out and err == ""


class AlwaysEqual:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (checks.check_clinic_diagnosis, lambda symptom: AlwaysEqual()),
        (checks.check_quick_check, lambda: {q: AlwaysEqual() for q in QUESTIONS}),
        (
            checks.check_autocast_dtypes,
            lambda: dict.fromkeys(AUTOCAST_OPS, AlwaysEqual()),
        ),
        (checks.check_amp_step_order, lambda: [AlwaysEqual()] * 7),
    ],
    ids=["clinic", "quiz", "autocast", "step_order"],
)
def test_an_object_equal_to_everything_never_passes(check, answer, hidden, capsys):
    # the hidden cases have no "all answered" row: they used to pass it
    with pytest.raises(AssertionError, match="cases? failed"):
        check(answer, hidden=hidden)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("exc", [SystemExit(0), SystemExit("bye"), GeneratorExit()])
def test_exit_in_student_code_is_a_failed_case(exc, capsys):
    def decode_fp16(bits):
        raise exc

    with pytest.raises(AssertionError, match="10 of 10 cases failed"):
        checks.check_decode_fp16(decode_fp16)
    out, err = capsys.readouterr()
    assert f"raised {type(exc).__name__}" in out and err == ""


def test_wrong_arity_says_the_check_could_not_call_it(capsys):
    def decode_fp16():
        return 1.0

    with pytest.raises(AssertionError, match="10 of 10 cases failed"):
        checks.check_decode_fp16(decode_fp16)
    out = " ".join(capsys.readouterr().out.split())
    assert "could not call your function" in out and "keep the parameters" in out


NOTEBOOK_STATES = {
    "grad disabled": (
        lambda: torch.set_grad_enabled(False),
        lambda: torch.set_grad_enabled(True),
    ),
    "default float64": (
        lambda: torch.set_default_dtype(torch.float64),
        lambda: torch.set_default_dtype(torch.float32),
    ),
}


@pytest.mark.parametrize("state", NOTEBOOK_STATES)
@pytest.mark.parametrize(
    ("check", "reference"),
    [
        (checks.check_memory_budget, memory_budget),
        (checks.check_amp_step_order, amp_step_order),
        (checks.check_amp_train_step, amp_train_step),
        (checks.check_autocast_dtypes, predict_autocast_dtypes),
    ],
    ids=["memory_budget", "amp_step_order", "amp_train_step", "autocast"],
)
def test_what_the_notebook_set_before_does_not_change_the_grade(
    check, reference, state, capsys
):
    # torch.set_grad_enabled(False) or set_default_dtype(float64) earlier in the
    # notebook made these fail or crash on correct answers
    set_state, restore = NOTEBOOK_STATES[state]
    set_state()
    try:
        for hidden in (False, True):
            check(reference, hidden=hidden)
        assert torch.is_grad_enabled() is (state != "grad disabled")
        dtype = torch.float64 if state == "default float64" else torch.float32
        assert torch.get_default_dtype() is dtype  # the notebook's, put back
    finally:
        restore()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("mode", [False, True])
@pytest.mark.parametrize("warn_only", [False, True])
def test_a_check_runs_deterministic_and_restores_both_flags(mode, warn_only):
    from amp_lessons.teaching.checks._state import fixed_torch_state

    def flags():
        return (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )

    before = flags()
    try:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        with fixed_torch_state():
            assert flags() == (True, True)
        assert flags() == (mode, warn_only)
    finally:
        torch.use_deterministic_algorithms(*before[:1], warn_only=before[1])


def test_a_check_does_not_import_the_compiler():
    # torch.use_deterministic_algorithms imports torch._inductor, and with it dynamo
    # (1.3 s): the first check of every kernel paid it
    code = (
        "import sys\n"
        "from amp_lessons.teaching import checks\n"
        "from amp_lessons.teaching.checks._state import fixed_torch_state\n"
        "with fixed_torch_state():\n"
        "    pass\n"
        "print('torch._dynamo' in sys.modules, 'torch._inductor' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
