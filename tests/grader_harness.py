"""The tests every exercise grader gets, built from one lesson's table of cases.

A tests/test_checks_<lesson>.py file defines
``CASES = {name: (check, reference solution, [(wrong answer, hidden?, fragment of its
hint)])}`` and, for answers that are right in another form, ``OTHER_CORRECT = [(check,
answer, id)]``, then takes its tests from ``grader_tests(CASES)`` and
``other_correct_test(OTHER_CORRECT)``:
the reference passes (visible and hidden cases), each wrong answer is rejected with
its own hint, the nbgrader stub is reported "not attempted", and nothing reaches
stderr (nbgrader scores a test cell that writes there zero).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest


def stub(*args, **kwargs):
    ### BEGIN SOLUTION
    ### END SOLUTION
    raise NotImplementedError()


def grader_tests(
    cases: dict[str, tuple[Callable, Callable, list[tuple[Callable, bool, str]]]],
) -> tuple[Callable[..., Any], ...]:
    """(test_reference_passes, test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted) for `cases`."""
    hidden_param = pytest.mark.parametrize(
        "hidden", [False, True], ids=["visible", "hidden"]
    )
    wrong = [
        pytest.param(name, answer, hidden, fragment, id=f"{name}-{answer.__name__}-{i}")
        for name, (_, _, wrongs) in cases.items()
        for i, (answer, hidden, fragment) in enumerate(wrongs)
    ]

    @hidden_param
    @pytest.mark.parametrize("name", cases)
    def test_reference_passes(name, hidden, capsys):
        check, reference, _ = cases[name]
        assert check(reference, hidden=hidden) is None
        out, err = capsys.readouterr()
        assert "FAIL" not in out and "passed" in out
        assert "expected" in out and "got" in out  # the table was printed
        assert err == ""

    @pytest.mark.parametrize(("name", "wrong", "hidden", "fragment"), wrong)
    def test_wrong_answer_rejected_with_hint(name, wrong, hidden, fragment, capsys):
        check = cases[name][0]
        failed = r"(\d+ of \d+ cases|the case) failed — see (hints|the hint)"
        with pytest.raises(AssertionError, match=failed):
            check(wrong, hidden=hidden)
        out, err = capsys.readouterr()
        assert "FAIL" in out and "hint:" in out
        assert fragment in " ".join(out.split()), out  # hints are wrapped over lines
        assert err == ""

    @hidden_param
    @pytest.mark.parametrize("name", cases)
    def test_stub_is_not_attempted(name, hidden, capsys):
        with pytest.raises(AssertionError, match="not attempted"):
            cases[name][0](stub, hidden=hidden)
        out, err = capsys.readouterr()
        assert out.startswith("not attempted: stub() still raises NotImplementedError")
        assert err == ""

    return (
        test_reference_passes,
        test_wrong_answer_rejected_with_hint,
        test_stub_is_not_attempted,
    )


def other_correct_test(
    answers: Sequence[tuple[Callable, Callable, str]],
) -> Callable[..., Any]:
    """test_other_correct_answers_pass: each (check, answer, id) is right in another
    form (a tensor for a float, a list for a tuple, another valid order) and passes."""

    @pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
    @pytest.mark.parametrize(
        ("check", "answer"), [pytest.param(c, a, id=i) for c, a, i in answers]
    )
    def test_other_correct_answers_pass(check, answer, hidden, capsys):
        check(answer, hidden=hidden)
        assert capsys.readouterr().err == ""

    return test_other_correct_answers_pass
