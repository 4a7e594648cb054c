"""The grading engine every exercise shares: call the student's function, turn each
case into a row (case, expected, got, ok, hint), print the table, pass or fail.

A grader module (one per lesson) builds its rows with `call_student`, `float_row` and
the formatting helpers here, and hands a row builder to `grade`, which prints the
table to stdout, says "not attempted" for nbgrader's unsolved stub, and raises
`AssertionError` when any case failed. Not covered here: what any exercise expects;
that lives in the lesson's grader module.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from amp_lessons.checks._pristine import CHECK_DONE, CHECK_START, verify_pristine

__all__ = [
    "NotAttempted",
    "Raised",
    "Row",
    "WrongKind",
    "answer_of_type",
    "answered_row",
    "as_float",
    "call_student",
    "cut",
    "float_row",
    "grade",
    "print_table",
    "same_float",
    "show_value",
    "type_hint",
]


@dataclass
class Row:
    """One case of a check: what was asked, what was expected and got, and a hint."""

    case: str
    expected: str
    got: str
    ok: bool
    hint: str = ""


@dataclass
class Raised:
    """What the student's function raised instead of returning a value."""

    exc: BaseException

    def __str__(self) -> str:
        return f"raised {type(self.exc).__name__}"

    @property
    def hint(self) -> str:
        return f"your function raised {type(self.exc).__name__}: {self.exc}"


class NotAttempted(Exception):
    """The student's function is still nbgrader's `raise NotImplementedError()`."""


class WrongKind(Exception):
    """The student's answer is not even the kind of value asked for: the table is
    this one failing row."""

    def __init__(self, row: Row) -> None:
        super().__init__(row.hint)
        self.row = row


def _is_stub(fn: Callable, exc: BaseException) -> bool:
    # The stub raises in the student's own frame; a NotImplementedError from deeper
    # down (a torch op, another unsolved helper) is a failed case, not "not attempted".
    code = getattr(fn, "__code__", None)
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return code is None or tb is None or tb.tb_frame.f_code is code


def call_student(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """The student's return value, or `Raised` if it raised (the stub aborts)."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        if _is_stub(fn, exc):
            raise NotAttempted() from None
        return Raised(exc)
    except Exception as exc:  # any bug in student code is a failed case, not a crash
        return Raised(exc)


def cut(text: str, width: int) -> str:
    """`text`, shortened with an ellipsis to at most `width` characters."""
    return text if len(text) <= width else text[: width - 1] + "…"


def print_table(title: str, rows: Sequence[Row], hidden: bool) -> None:
    """Print one line per case and, under each failing one, its hint."""
    kind = "hidden cases" if hidden else "cases"
    print(f"{title}: {len(rows)} {kind}")
    widths = [
        min(max(len(head), *(len(getattr(r, head)) for r in rows)), cap)
        for head, cap in (("case", 30), ("expected", 24), ("got", 24))
    ]
    head = ("case", "expected", "got")
    print(
        "  "
        + "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
        + "  result"
    )
    for row in rows:
        cells = (row.case, row.expected, row.got)
        line = "  ".join(cut(c, w).ljust(w) for c, w in zip(cells, widths, strict=True))
        print(f"  {line}  {'ok' if row.ok else 'FAIL'}")
        if not row.ok and row.hint:
            print(
                textwrap.fill(
                    row.hint,
                    width=88,
                    initial_indent="      hint: ",
                    subsequent_indent="            ",
                )
            )


def grade(
    title: str,
    fn: Callable,
    hidden: bool,
    make_rows: Callable[[Callable, bool], list[Row]],
) -> None:
    """Run one check: build its rows, print the table, raise if any case failed.

    The grading code must be pristine before the student's function runs and still
    after it (`verify_pristine`); the verdict is raised as a `sys.audit` event that
    the grading sandbox's guard reads where the notebook cannot reach it. The guard
    trusts the verdict only from this function, called directly by the check named
    `title`, with `make_rows` (this parameter's name) a function of the checks
    package: keep those three when changing it (tests/test_sandbox.py shows why).
    """
    passed = False
    sys.audit(CHECK_START, title)
    try:
        verify_pristine()
        _run_rows(title, fn, hidden, make_rows)
        verify_pristine()  # the student's function ran: is the grader still ours?
        passed = True
    finally:
        sys.audit(CHECK_DONE, title, hidden is True, passed)


def _run_rows(
    title: str,
    fn: Callable,
    hidden: bool,
    make_rows: Callable[[Callable, bool], list[Row]],
) -> None:
    if not callable(fn):
        raise ValueError(
            f"{title} expects the function you wrote, e.g. {title}(my_function); "
            f"got {type(fn).__name__}. Run your solution cell first."
        )
    name = getattr(fn, "__name__", "your function")
    # stdout only (nbgrader zeroes a cell that writes to stderr), and leave the
    # notebook's random state as it was
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stderr(sys.stdout),
        torch.random.fork_rng(devices=[]),
    ):
        warnings.simplefilter("ignore")
        try:
            rows = make_rows(fn, hidden)
        except WrongKind as wrong:
            rows = [wrong.row]
        except NotAttempted:
            message = (
                f"not attempted: {name}() still raises NotImplementedError; write it "
                "in its solution cell, run that cell, then run this one again"
            )
            print(message)
            raise AssertionError(message) from None
    print_table(title, rows, hidden)
    failed = sum(not row.ok for row in rows)
    if failed:
        raise AssertionError(f"{failed} of {len(rows)} cases failed — see hints above")
    print(f"all {len(rows)} {'hidden cases' if hidden else 'cases'} passed")


def show_value(value: Any) -> str:
    """Short, exact text for a table cell: powers of two as 2**k, floats by repr."""
    if isinstance(value, Raised):
        return str(value)
    if isinstance(value, float) and math.isfinite(value) and value != 0:
        mantissa, exponent = math.frexp(abs(value))
        if mantissa == 0.5 and not -4 <= exponent - 1 <= 11:
            return f"{'-' if value < 0 else ''}2**{exponent - 1}"
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return repr(value)


def as_float(value: Any) -> float | None:
    """The student's answer as a float, or None if it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):  # int, float, numpy scalars
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    return None


def same_float(a: float, b: float) -> bool:
    """Exactly the same float, nan equal to nan and -0.0 different from 0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def type_hint(got: Any, want: str = "a Python float") -> str:
    """The hint for an answer of the wrong type (or one that raised)."""
    if isinstance(got, Raised):
        return got.hint
    return f"return {want}; got {type(got).__name__} {cut(repr(got), 40)}"


def float_row(
    case: str,
    expected: float,
    got: Any,
    same: Callable[[float, float], bool],
    hint_of: Callable[[float], str],
    show: Callable[[Any], str] | None = None,
) -> Row:
    """One table row for an exercise whose answer is a single float."""
    show = show or show_value
    value = as_float(got)
    if value is None:
        return Row(case, show(expected), show_value(got), False, type_hint(got))
    ok = same(value, expected)
    return Row(case, show(expected), show(value), ok, "" if ok else hint_of(value))


def answer_of_type(fn: Callable, kind: Any, label: str, want: str) -> Any:
    """Call the student's argument-free function and return its answer; when that is
    not an instance of `kind`, the table becomes one failing row "returns a <label>"
    (`want` says what to return instead)."""
    got = call_student(fn)
    if not isinstance(got, kind):
        hint = type_hint(got, want)
        raise WrongKind(
            Row(f"returns a {label}", label, cut(repr(got), 22), False, hint)
        )
    return got


def answered_row(
    case: str,
    bad: Sequence[str],
    hint: str,
    expected: str = "yes",
    fault: str = "missing",
) -> Row:
    """The row "every question got a valid answer", failing with how many did not
    (`bad`: those questions) and `hint`."""
    got = "yes" if not bad else f"{len(bad)} {fault}"
    return Row(case, expected, got, not bad, hint)
