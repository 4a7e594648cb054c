"""The grading engine (amp_lessons.checks._engine), through a real grader: a student's
exception is a failed case with its message, a non-function is a clear error, and
nothing the student's code prints or warns reaches stderr.

Each lesson's graders have their own file, tests/test_checks_<lesson>.py, with the
reference solutions, the known-wrong answers and their hints; the tests every grader
gets are built by tests/grader_harness.py.
"""

import sys
import warnings

import pytest
from test_checks_formats import decode_fp16

from amp_lessons import checks


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
    with pytest.raises(AssertionError, match="1 of 1 cases failed"):
        checks.check_decode_fp16(None)
    out, err = capsys.readouterr()
    assert "expects the function itself" in out and "FAIL" in out and err == ""


def test_warnings_in_student_code_stay_off_stderr(capsys):
    def noisy(bits):
        warnings.warn("student warning", UserWarning, stacklevel=1)
        print("debug print", file=sys.stderr)
        return decode_fp16(bits)

    checks.check_decode_fp16(noisy)
    out, err = capsys.readouterr()
    assert err == "" and "debug print" in out
