"""The grading engine every exercise shares: call the student's function, turn each
case into a row (case, expected, got, ok, hint), print the table, pass or fail.

A grader module (one per lesson) builds its rows with `call_student`, `float_row` and
the formatting helpers here, and hands a row builder to `grade`, which prints the
table to stdout (`_table`: a failed one in at most 15 lines), says "not attempted"
for nbgrader's unsolved stub (`_origin` tells it from an answer above a leftover
raise), and raises `CheckFailed`, an `AssertionError` that IPython shows as one line,
when any case failed.

Whatever the student's function returns or raises, a check ends the same way: a
table with a hint and, unless every case passed, `AssertionError`, never another
exception. What it raises (SystemExit and StopIteration included) is a failed case;
only KeyboardInterrupt goes through, so the stop button still stops the cell. Answers
are compared in their canonical form (`as_float`, `as_choice`), so an object whose
``==`` is always true cannot pass, and shown with `show_value`, which survives any
``repr``. Each check runs in one fixed torch state (`fixed_torch_state`: grad mode on,
float32 default dtype on the CPU, autocast off, its own seeded RNG, deterministic
kernels), whatever the notebook set before, and leaves the notebook's state as it
was. A grader names the package's own functions that compute its exercise's answer
(`call_student`'s ``answers``): a case in which the student's function calls one of
them fails with a hint, whatever it returned. Not covered here: what any exercise
expects; that lives in the lesson's grader module.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from amp_lessons.i18n import N_, _
from amp_lessons.teaching import progress
from amp_lessons.teaching.checks._origin import (
    at_call,
    is_stub,
    lines_of,
    origin,
    written,
)
from amp_lessons.teaching.checks._pristine import (
    CHECK_DONE,
    CHECK_START,
    verify_pristine,
)
from amp_lessons.teaching.checks._state import fixed_torch_state
from amp_lessons.teaching.checks._table import (
    FAILED_LINES,
    NOT_SHOWN,
    cut,
    print_table,
)

__all__ = [
    "FAILED_LINES",
    "NOT_SHOWN",
    "AnswerCalled",
    "CheckFailed",
    "NotAttempted",
    "Raised",
    "Row",
    "WrongKind",
    "answer_of_type",
    "answered_row",
    "as_choice",
    "as_float",
    "bytes_type_hint",
    "call_student",
    "choice_row",
    "cut",
    "fixed_torch_state",
    "float_row",
    "grade",
    "let_interrupt_through",
    "print_table",
    "same_float",
    "show_value",
    "type_hint",
]


class CheckFailed(AssertionError):
    """A failed check, raised after its table was printed.

    IPython shows an exception's ``_render_traceback_()`` lines instead of its
    traceback (``IPython/core/interactiveshell.py``, ``showtraceback``; ipykernel
    sends them as the error's traceback), so the learner reads one line under the
    table, not forty through the grading code. Still an AssertionError: nbgrader
    and the grading sandbox count that as a failed test cell.
    """

    def __init__(self, message: str, shown: str | None = None) -> None:
        super().__init__(message)
        self.shown = message if shown is None else shown

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mAssertionError\x1b[0m: {self.shown}"]


# ipykernel names an error by its class's __name__ (the ename nbgrader, the
# rehearsal and the student-path tests read): to them this is an AssertionError
CheckFailed.__name__ = "AssertionError"


@dataclass
class Row:
    """One case of a check: what was asked, what was expected and got, and a hint."""

    case: str
    expected: str
    got: str
    ok: bool
    hint: str = ""
    note: str = ""  # printed under the row whether it passed or not

    def __post_init__(self) -> None:
        for name in ("case", "expected", "got", "hint", "note"):
            value = getattr(self, name)
            if type(value) is not str:  # a student's object must never reach print
                setattr(self, name, show_value(value))
        self.ok = self.ok is True


@dataclass
class Raised:
    """What the student's function raised instead of returning a value."""

    exc: BaseException
    at_call: bool = False  # raised by the call itself: the wrong number of arguments

    def __str__(self) -> str:
        if isinstance(self.exc, AnswerCalled):
            return _("called {name}").format(name=self.exc.name)
        return _("raised {name}").format(name=type(self.exc).__name__)

    @property
    def message(self) -> str:
        """The exception's message, however broken its ``__str__``."""
        try:
            text = str(self.exc)
        except BaseException as exc:
            let_interrupt_through(exc)
            text = ""
        return cut(text if type(text) is str else "", 300)

    @property
    def hint(self) -> str:
        name = type(self.exc).__name__
        if isinstance(self.exc, AnswerCalled):
            return _(
                "you called the package's own {name}, which computes this "
                "exercise's answer: write it yourself"
            ).format(name=f"{self.exc.module}.{self.exc.name}")
        if self.at_call:
            return _(
                "the check could not call your function ({name}: {message}): "
                "keep the parameters its docstring and the exercise give"
            ).format(name=name, message=self.message)
        if isinstance(self.exc, SystemExit):
            return _(
                "your function called exit() or sys.exit(): return the answer instead"
            )
        if isinstance(self.exc, StopIteration):
            return _(
                "your function raised StopIteration: a next(...) over a generator "
                "found no item (give next a default, or make sure one matches)"
            )
        return self._raised_hint(name)

    def _raised_hint(self, name: str) -> str:
        # where it came from: torch's own code, or the learner's line that raised
        by_torch, line = origin(self.exc)
        where = _(" at `{line}`").format(line=cut(line, 60)) if line else ""
        message = " ".join(self.message.split())
        if by_torch and message:
            return _("torch raised {name}{where}; torch's message: {message}").format(
                name=name, where=where, message=message
            )
        if message:
            return _("your function raised {name}: {message}").format(
                name=name, message=message
            )
        if isinstance(self.exc, NotImplementedError):
            return _(
                "your function raised NotImplementedError{where}: a function it "
                "calls is not written yet (it is still a stub)"
            ).format(where=where)
        return _("your function raised {name}{where}, with no message").format(
            name=name, where=where
        )


class AnswerCalled(BaseException):
    """Raised, and recorded, when the student's function calls one of the package's
    own answers (`call_student`'s ``answers``). A BaseException, so that the student's
    ``except Exception`` does not swallow it (the call is recorded anyway)."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"{module}.{name}")
        self.module, self.name = module, name


class NotAttempted(Exception):
    """The student's function is still nbgrader's `raise NotImplementedError()`."""


class LeftoverStub(NotAttempted):
    """The student wrote an answer but left nbgrader's `raise NotImplementedError()`
    line, which their function still reaches: the table is one row saying so (a
    NotAttempted, so that graders that let the stub through let this through too)."""

    def __init__(self, row: Row) -> None:
        super().__init__(row.hint)
        self.row = row


class WrongKind(Exception):
    """The student's answer is not even the kind of value asked for: the table is
    this one failing row."""

    def __init__(self, row: Row) -> None:
        super().__init__(row.hint)
        self.row = row


def let_interrupt_through(exc: BaseException) -> None:
    """Re-raise `exc` if it is KeyboardInterrupt, the one exception a check lets
    through (the stop button must stop the cell); any other is the answer's fault."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc


def _leftover_row(fn: Callable, exc: BaseException) -> Row:
    number = lines_of(exc)[-1][1]
    return Row(
        _("the function you wrote"),
        _("a returned answer"),
        _("raised NotImplementedError"),
        False,
        _(
            "your code runs, then reaches the leftover `raise "
            "NotImplementedError()` (line {line} of the cell): delete that line"
        ).format(line=number),
    )


def _tripwire(
    *args: Any, _amp_answer_called: Callable[[], None], **kwargs: Any
) -> None:
    # The code a package answer runs while the student's function runs (see
    # `_tripwires`): its keyword default, set on the answer, records and raises.
    _amp_answer_called()


@contextlib.contextmanager
def _tripwires(answers: Sequence[Callable]) -> Iterator[list[AnswerCalled]]:
    """While the block runs, each of `answers` (plain module-level functions of the
    package) answers no call: it records it in the list yielded and raises
    `AnswerCalled`. Everything is put back on the way out, whatever happened.

    The function OBJECT is changed, not the module attribute: its ``__code__`` becomes
    `_tripwire`'s (its ``__kwdefaults__`` carry the recorder). Every way the
    student's code can reach the answer holds that same object: ``practice.gan_step``,
    an alias bound earlier (``from amp_lessons.teaching.practice import gan_step as
    g``), a default argument, a closure cell, a ``functools.partial``, a dict entry,
    ``train_gan``'s default step; and a call runs the code the object holds at that
    moment, so each of them trips. Rebinding ``practice.gan_step`` would miss all but
    the first; searching the student's globals, closures and defaults for the object
    would miss the indirect ones (a helper of theirs that calls an alias). Not caught:
    a new function made from the answer's code or source (it needs ``.__code__`` or
    ``exec``, which the grading review flags in the student's cells).
    """
    called: list[AnswerCalled] = []

    def trip(answer: AnswerCalled) -> None:
        called.append(answer)
        raise answer

    saved = [(f, f.__code__, f.__kwdefaults__) for f in answers]
    try:
        for answer, _code, _defaults in saved:
            wire = functools.partial(
                trip, AnswerCalled(answer.__module__, answer.__name__)
            )
            answer.__kwdefaults__ = {"_amp_answer_called": wire}
            answer.__code__ = _tripwire.__code__
        yield called
    finally:
        for answer, code, defaults in saved:
            answer.__code__, answer.__kwdefaults__ = code, defaults


def call_student(
    fn: Callable, *args: Any, answers: Sequence[Callable] = (), **kwargs: Any
) -> Any:
    """The student's return value, or `Raised` if it raised (the stub aborts).

    Any exception is a failed case, SystemExit and StopIteration included; only
    KeyboardInterrupt goes through (the student asked to stop). Whatever global torch
    state the function changes (grad mode, default dtype, the RNG, ...) is put back.
    `answers`: the package's own functions that compute this exercise's answer; if
    the student's function calls one (however it reached it), the case is
    ``Raised(AnswerCalled)``, whatever it returned, with a hint to write it.

    Example:
        >>> from amp_lessons.teaching import underflow
        >>> got = call_student(lambda g, s: underflow.underflow_fraction(g, s),
        ...                    torch.ones(2), 1.0,
        ...                    answers=[underflow.underflow_fraction])
        >>> str(got)
        'called underflow_fraction'
    """
    with _tripwires(answers) as called:
        got = _call_student(fn, args, kwargs)
    return Raised(called[0]) if called else got


def _call_student(fn: Callable, args: tuple, kwargs: dict) -> Any:
    try:
        with fixed_torch_state(seed=None):
            return fn(*args, **kwargs)
    except KeyboardInterrupt:
        raise
    except NotImplementedError as exc:
        if is_stub(fn, exc):
            if written(fn, exc):
                raise LeftoverStub(_leftover_row(fn, exc)) from None
            raise NotAttempted() from None
        return Raised(exc)
    except BaseException as exc:  # any bug in student code is a failed case
        return Raised(exc, at_call=at_call(fn, exc))


def _name_of(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    return name if type(name) is str and name.isidentifier() else _("your function")


def _could_not_grade(exc: BaseException) -> Row:
    # a safety net: a grader that meets an answer it did not foresee still fails the
    # case with a table (tests/test_checks_fuzz.py makes sure no answer gets here)
    return Row(
        _("grading your answer"),
        _("a gradable answer"),
        _("check raised {name}").format(name=type(exc).__name__),
        False,
        _(
            "the check could not grade what your function returned; return what the "
            "exercise asks for (see its docstring). If your answer has that form, tell "
            "your instructor: {name}: {message}"
        ).format(name=type(exc).__name__, message=Raised(exc).message),
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
    `title` (or `title` up to a "["), with `make_rows` (this parameter's name) a
    function of the checks package: keep those three when changing it
    (tests/test_sandbox.py shows why).
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
        progress.record(title, hidden is True, passed)  # never raises; off in grading


def _not_a_function_row(title: str, fn: Any) -> Row:
    """The one failed row of a check handed something other than a function."""
    return Row(
        _("the function you wrote"),
        _("a function"),
        show_value(fn, 22),
        False,
        _(
            "{check} calls the function your solution cell defines with def, "
            "and got a {kind} instead (a value assigned to the name, or the "
            "function's result): define the function, run its cell, then this one"
        ).format(check=title.split("[")[0], kind=type(fn).__name__),
    )


def _run_rows(
    title: str,
    fn: Callable,
    hidden: bool,
    make_rows: Callable[[Callable, bool], list[Row]],
) -> None:
    """Run one check: build its rows, print the table, raise AssertionError if any
    case failed. The rows are built in `fixed_torch_state`, with warnings off and
    stderr sent to stdout (nbgrader zeroes a cell that writes to stderr)."""
    if not callable(fn):
        rows = [_not_a_function_row(title, fn)]
    else:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stderr(sys.stdout),
            fixed_torch_state(seed=0),
        ):
            warnings.simplefilter("ignore")
            try:
                rows = make_rows(fn, hidden)
            except (WrongKind, LeftoverStub) as wrong:
                rows = [wrong.row]
            except NotAttempted:
                message = _(
                    "not attempted: {name}() still raises "
                    "NotImplementedError; write it in its solution cell, run that "
                    "cell, then run this one again"
                ).format(name=_name_of(fn))
                print(message)
                shown = _("not attempted (see above)")
                raise CheckFailed(message, shown) from None
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                rows = [_could_not_grade(exc)]
    print_table(title, rows, hidden)
    failed = sum(not row.ok for row in rows)
    if failed:
        raise CheckFailed(_verdict_failed(failed, len(rows)))
    print(_verdict_passed(len(rows), hidden))


def _verdict_failed(failed: int, total: int) -> str:
    """The error under a failed table; one case in the singular (see `header`)."""
    if total == 1:
        return _("the case failed — see the hint above")
    if failed == 1:  # Spanish says "falló 1 de 4", not "1 de 4 fallaron"
        return _("1 of {total} cases failed — see the hint above").format(total=total)
    return _("{failed} of {total} cases failed — see hints above").format(
        failed=failed, total=total
    )


def _verdict_passed(total: int, hidden: bool) -> str:
    if total == 1:
        return _("the hidden case passed") if hidden else _("the case passed")
    form = (
        _("all {total} hidden cases passed")
        if hidden
        else _("all {total} cases passed")
    )
    return form.format(total=total)


def _safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except BaseException as exc:  # a broken __repr__, or an int too long to print
        let_interrupt_through(exc)
        text = None
    if type(text) is not str:
        text = _("<{name} that cannot be shown>").format(name=type(value).__name__)
    return text


def show_value(value: Any, width: int | None = None) -> str:
    """Short, exact text for a table cell: powers of two as 2**k, floats by repr;
    any object at all, cut to `width` characters when given."""
    if isinstance(value, Raised):
        text = str(value)
    elif isinstance(value, float):
        value = float.__float__(value)  # the number, whatever a subclass overrides
        mantissa, exponent = math.frexp(abs(value))
        if mantissa == 0.5 and not -4 <= exponent - 1 <= 11:
            text = f"{'-' if value < 0 else ''}2**{exponent - 1}"
        else:
            text = repr(value)
    elif isinstance(value, torch.dtype):
        text = str(value).removeprefix("torch.")
    elif type(value) is int and value.bit_length() > 64:
        digits = len(str(value)) if value.bit_length() < 14000 else None
        text = (
            _("an int of {digits} digits").format(digits=digits)
            if digits
            else _("an int of many digits")
        )
    else:
        text = _safe_repr(value)
    return text if width is None else cut(text, width)


def as_float(value: Any) -> float | None:
    """The student's answer as a float, or None if it is not a number (or too big
    for one: an int past 1.8e308)."""
    try:
        if isinstance(value, bool):
            return None
        if isinstance(value, numbers.Real):  # int, float, numpy scalars
            result = float(value)
        elif isinstance(value, torch.Tensor) and value.numel() == 1:
            if value.is_complex() or value.dtype is torch.bool:
                return None
            result = float(value.detach().cpu().item())
        else:
            return None
    except BaseException as exc:  # OverflowError for a huge int, a bad __float__...
        let_interrupt_through(exc)
        return None
    return result if type(result) is float else None


def as_choice(value: Any, choices: Any) -> str | None:
    """The student's answer as one of `choices` (strings), or None: only a real str
    counts, compared by its characters, so an object equal to everything is None.

    Example: ``as_choice("b", "abcd") == "b"``, ``as_choice(["b"], "abcd") is None``.
    """
    if not isinstance(value, str):
        return None
    text = str.__str__(value)  # the characters, whatever a subclass overrides
    return text if text in choices else None


def choice_row(
    case: str,
    right: str,
    got: Any,
    choices: Any,
    explain: Callable[[str], str],
    invalid: str,
) -> Row:
    """One multiple-choice or matching item: right or wrong, and why the chosen
    option is wrong (`explain(choice)`), never the right answer itself (`invalid`:
    the hint for an answer that is not one of `choices`)."""
    if isinstance(got, Raised):
        return Row(case, NOT_SHOWN, str(got), False, got.hint)
    choice = as_choice(got, choices)
    if choice is None:
        return Row(case, NOT_SHOWN, show_value(got, 24), False, invalid)
    ok = choice == right
    return Row(case, NOT_SHOWN, cut(choice, 24), ok, "" if ok else explain(choice))


def same_float(a: float, b: float) -> bool:
    """Exactly the same float, nan equal to nan and -0.0 different from 0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def bytes_type_hint(got: Any) -> str:
    """The hint for a number of bytes that is not an int (a float first: 4.0 * n)."""
    if isinstance(got, float):
        return _(
            "return an int number of bytes, not a float: got {value}; * and // "
            "keep ints, while / and 4.0 make floats"
        ).format(value=show_value(got, 24))
    return type_hint(got, N_("an int number of bytes"))


def type_hint(got: Any, want: str = N_("a Python float")) -> str:
    """The hint for an answer of the wrong type (or one that raised); `want` is
    translated here (mark a caller's with `N_`)."""
    if isinstance(got, Raised):
        return got.hint
    want = _(want)
    if isinstance(got, torch.Tensor):
        return _(
            "return {want}, not a tensor: got {value}; .item() gives the number a "
            "one-element tensor holds"
        ).format(want=want, value=show_value(got, 40))
    if isinstance(got, int) and not isinstance(got, bool) and as_float(got) is None:
        return _("return {want}; got an int too large for any float ({value})").format(
            want=want, value=show_value(got)
        )
    return _("return {want}; got {kind} {value}").format(
        want=want, kind=type(got).__name__, value=show_value(got, 40)
    )


def float_row(
    case: str,
    expected: float,
    got: Any,
    same: Callable[[float, float], bool],
    hint_of: Callable[[float], str],
    show: Callable[[Any], str] | None = None,
) -> Row:
    """One table row for an exercise whose answer is a single float: a Python
    number (a tensor is not one, whatever its value: the exercises say "a Python
    float", and a check that passed one taught that the spec does not matter)."""
    show = show or show_value
    value = None if isinstance(got, torch.Tensor) else as_float(got)
    if value is None:
        return Row(case, show(expected), show_value(got, 24), False, type_hint(got))
    ok = same(value, expected)
    return Row(case, show(expected), show(value), ok, "" if ok else hint_of(value))


def answer_of_type(fn: Callable, kind: Any, label: str, want: str) -> Any:
    """Call the student's argument-free function and return its answer as a plain
    copy of `kind` (a dict subclass's overrides do not come along); when it is not an
    instance of `kind`, the table becomes one failing row "returns a <label>" (`want`
    says what to return instead)."""
    got = call_student(fn)
    if not isinstance(got, kind):
        hint = type_hint(got, want)
        raise WrongKind(
            Row(
                _("returns a {label}").format(label=label),
                label,
                show_value(got, 22),
                False,
                hint,
            )
        )
    if isinstance(got, dict):
        return dict.copy(got)
    if isinstance(got, list | tuple):
        return list(
            list.__iter__(got) if isinstance(got, list) else tuple.__iter__(got)
        )
    return got


def answered_row(
    case: str,
    bad: Sequence[str],
    hint: str,
    expected: str = N_("yes"),
    fault: str = N_("missing"),
) -> Row:
    """The row "every question got a valid answer", failing with how many did not
    (`bad`: those questions) and `hint`."""
    got = _("yes") if not bad else f"{len(bad)} {_(fault)}"
    return Row(case, _(expected), got, not bad, hint)
