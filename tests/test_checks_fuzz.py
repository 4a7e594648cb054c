"""Every grader that `amp_lessons.teaching.checks` exports, fed hostile answers and run
from a hostile notebook state.

Hostile answers: functions that return None, huge ints, nan, unhashable or
always-equal objects, objects whose every method raises, tensors of the wrong dtype,
shape or device; that raise every kind of exception (StopIteration and SystemExit
included); that take the wrong arguments, or mutate their inputs. Each one must fail
with the table and a hint, raise nothing but AssertionError, write nothing to stderr,
never reach the engine's last-resort "could not grade" row, and leave the notebook's
torch state as it was.

Hostile states: what a notebook may have set before the test cell (grad mode off,
inference mode, float64 as default dtype, an open autocast region, flush-to-zero,
strict deterministic mode, ...). The reference solution must still pass, and the
state must still be the notebook's afterwards.

The graders are found in `checks.__all__`, so a new one is covered automatically; a
grader with parameters beyond (function, hidden) needs an entry in VARIANTS.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import math
import pathlib

import pytest
import torch
from torch import nn

from amp_lessons.teaching import checks
from amp_lessons.teaching.clinic import CAUSES
from amp_lessons.teaching.quiz import QUESTIONS

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest.py

CHECK_NAMES = sorted(n for n in checks.__all__ if n.startswith("check_"))

# graders with parameters beyond (function, hidden): the ways notebooks call them
VARIANTS = {
    "check_quick_check": {
        "all": {},
        "visible question": {"question": list(QUESTIONS)[0]},
        "hidden question": {"question": list(QUESTIONS)[-1]},
    },
}


def variants() -> list[tuple[str, str, dict]]:
    found = []
    for name in CHECK_NAMES:
        params = list(inspect.signature(getattr(checks, name)).parameters)[1:]
        if set(params) - {"hidden"}:
            assert name in VARIANTS, f"{name} takes {params}: add it to VARIANTS"
            found += [(name, v, kw) for v, kw in VARIANTS[name].items()]
        else:
            found.append((name, "", {}))
    return found


def check_of(name: str, kwargs: dict):
    return functools.partial(getattr(checks, name), **kwargs)


def ids(variant: tuple[str, str, dict]) -> str:
    return f"{variant[0]}[{variant[1]}]" if variant[1] else variant[0]


# --- hostile values ----------------------------------------------------------------


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return "AlwaysEqual()"


class EqualStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class EqualFloat(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class EqualInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class EverythingDict(dict):
    """Claims to hold every key, with an always-equal value under each."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return AlwaysEqual()

    def get(self, key, default=None):
        return AlwaysEqual()


class EverythingList(list):
    """Seven always-equal items that also claim to be in order."""

    def __init__(self):
        super().__init__([AlwaysEqual() for _ in range(7)])

    def __contains__(self, item):
        return True

    def count(self, item):
        return 1

    def index(self, *args):
        return 0


def _raiser(exc: BaseException):
    def method(self, *args, **kwargs):
        raise exc

    return method


def liar(exc: BaseException) -> object:
    """An object whose every special method raises `exc`."""
    names = (
        "__repr__",
        "__str__",
        "__float__",
        "__int__",
        "__index__",
        "__bool__",
        "__len__",
        "__iter__",
        "__getitem__",
        "__eq__",
        "__hash__",
        "__lt__",
        "__format__",
        "__abs__",
        "__contains__",
    )
    return type("Liar", (), {n: _raiser(exc) for n in names})()


class BrokenMessage(Exception):
    def __str__(self):
        raise RuntimeError("no message")


class CustomBase(BaseException):
    pass


ALL_KEYS = [*QUESTIONS, *checks.AUTOCAST_OPS, *CAUSES, "fp32", "amp"]
PARTS = ("weights", "grads", "adam_state")


def keyed(value) -> dict:
    """Every key any dict-returning exercise asks for, each holding `value`."""
    inner = dict.fromkeys(PARTS, value)
    return {**dict.fromkeys(ALL_KEYS, value), "fp32": inner, "amp": dict(inner)}


nan, inf = math.nan, math.inf
VALUES = {
    "None": None,
    "huge int": 10**400,
    "-huge int": -(10**400),
    "unprintable int": 10**5000,
    "nan": nan,
    "inf": inf,
    "-inf": -inf,
    "True": True,
    "zero": 0,
    "empty str": "",
    "some str": "b",
    "empty list": [],
    "empty dict": {},
    "empty tuple": (),
    "list of None": [None] * 7,
    "nested list": [[]],
    "dict of lists": {"a": [1]},
    "set": set(),
    "object": object(),
    "always equal": AlwaysEqual(),
    "equal str": EqualStr("?"),
    "equal float": EqualFloat(nan),
    "equal int": EqualInt(3),
    "everything dict": EverythingDict(),
    "everything list": EverythingList(),
    "liar": liar(RuntimeError("liar")),
    "exiting liar": liar(SystemExit(3)),
    "nan pair": (nan, nan),
    "huge pair": (10**400, 10**400),
    "inf tracker": (1.0, inf),
    "liar pair": [liar(ValueError()), liar(ValueError())],
    "tensor nan": torch.tensor(nan),
    "tensor 3": torch.zeros(3),
    "tensor empty": torch.zeros(0),
    "tensor f64": torch.zeros((), dtype=torch.float64),
    "tensor int 2x2": torch.zeros(2, 2, dtype=torch.int64),
    "tensor complex": torch.tensor(1 + 1j),
    "tensor meta": torch.empty(1, device="meta"),
    "tensor bool": torch.tensor(True),
    "function": lambda: None,
    "generator": (i for i in range(2)),
    "Ellipsis": ...,
    "dtype": torch.float16,
    "class": type,
    "module": torch,
    "path": pathlib.Path("."),
    "keyed lists": keyed([1]),
    "keyed always equal": keyed(AlwaysEqual()),
    "keyed liars": keyed(liar(RuntimeError())),
    "keyed huge": keyed(10**400),
    "keyed nan": keyed(nan),
    "keyed equal str": keyed(EqualStr("z")),
}
EXCEPTIONS = {
    "StopIteration": StopIteration(),
    "SystemExit 0": SystemExit(0),
    "SystemExit 1": SystemExit(1),
    "GeneratorExit": GeneratorExit(),
    "ValueError": ValueError("bad"),
    "TypeError": TypeError("bad"),
    "ZeroDivisionError": ZeroDivisionError(),
    "MemoryError": MemoryError(),
    "AssertionError": AssertionError("the student's own assert"),
    "KeyError": KeyError("k"),
    "OverflowError": OverflowError(),
    "RuntimeError": RuntimeError("bad"),
    "custom BaseException": CustomBase(),
    "broken message": BrokenMessage(),
}
if hasattr(builtins, "ExceptionGroup"):  # Python 3.11+
    EXCEPTIONS["ExceptionGroup"] = builtins.ExceptionGroup("two", [ValueError()])


def returning(value):
    def answer(*args, **kwargs):
        return value

    return answer


def raising(exc):
    def answer(*args, **kwargs):
        raise exc

    return answer


def helper_not_implemented(*args, **kwargs):
    return _unsolved_helper()  # a NotImplementedError from deeper down: not the stub


def _unsolved_helper():
    raise NotImplementedError()


def recursing(*args, **kwargs):
    return recursing(*args, **kwargs)


def no_arguments():
    return 1.0


def too_many_arguments(a, b, c, d, e, f, g, h):
    return 1.0


def keyword_only(*, answer):
    return answer


def mutate_inputs(*args, **kwargs):
    """Spoil every argument in place, as a buggy solution might."""
    for arg in [*args, *kwargs.values()]:
        if isinstance(arg, torch.Tensor) and arg.is_floating_point():
            arg.fill_(nan)
        elif isinstance(arg, list):
            for item in arg:
                if isinstance(item, torch.Tensor):
                    item.resize_(1).fill_(inf)
            arg.append(None)
        elif isinstance(arg, nn.Module):
            arg.double()
        elif isinstance(arg, torch.optim.Optimizer):
            arg.param_groups[0]["lr"] = nan
        elif isinstance(arg, torch.amp.GradScaler):
            arg.update(new_scale=nan)
    return None


def spoil_global_state(*args, **kwargs):
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(1234)
    return None


HOSTILE = {
    **{f"returns {k}": returning(v) for k, v in VALUES.items()},
    **{f"raises {k}": raising(v) for k, v in EXCEPTIONS.items()},
    "NotImplementedError from a helper": helper_not_implemented,
    "infinite recursion": recursing,
    "no arguments": no_arguments,
    "too many arguments": too_many_arguments,
    "keyword-only": keyword_only,
    "mutates its inputs": mutate_inputs,
    "spoils global state": spoil_global_state,
}


def torch_state() -> tuple:
    """What a check must leave as it found it."""
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch.get_default_device(),
        torch.get_float32_matmul_precision(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.get_autocast_dtype("cpu"),
        torch.get_rng_state().tolist(),
    )


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("variant", variants(), ids=ids)
def test_hostile_answer_fails_with_a_table_and_only_assertion_error(
    variant, hostile, capsys
):
    name, _, kwargs = variant
    check = check_of(name, kwargs)
    for hidden in (False, True):
        before = torch_state()
        with pytest.raises(AssertionError):  # and nothing else; never a pass
            check(HOSTILE[hostile], hidden=hidden)
        out, err = capsys.readouterr()
        assert err == ""
        assert "expected" in out and "got" in out and "FAIL" in out, out
        assert "hint:" in out, out
        assert "could not grade" not in out, out  # each grader handles it itself
        assert torch_state() == before


# --- hostile notebook states --------------------------------------------------------


def references() -> dict:
    """check name -> its reference solution, from the tests/test_checks_<lesson>.py
    tables."""
    found = {}
    for path in sorted(pathlib.Path(__file__).parent.glob("test_checks_*.py")):
        module = importlib.import_module(path.stem)
        for check, reference, _ in getattr(module, "CASES", {}).values():
            found[check.__name__] = reference
    return found


REFERENCES = references()


def test_every_check_has_a_reference_solution():
    assert set(CHECK_NAMES) <= set(REFERENCES)


def _in_context(make):
    def enter():
        context = make()
        context.__enter__()
        return lambda: context.__exit__(None, None, None)

    return enter


def _setting(set_to, restore):
    def enter():
        set_to()
        return restore

    return enter


STATES = {
    "grad disabled": _setting(
        lambda: torch.set_grad_enabled(False), lambda: torch.set_grad_enabled(True)
    ),
    "inference mode": _in_context(torch.inference_mode),
    "default float64": _setting(
        lambda: torch.set_default_dtype(torch.float64),
        lambda: torch.set_default_dtype(torch.float32),
    ),
    "default device meta": _setting(
        lambda: torch.set_default_device("meta"), lambda: torch.set_default_device(None)
    ),
    "bf16 autocast region": _in_context(
        lambda: torch.amp.autocast("cpu", dtype=torch.bfloat16)
    ),
    "fp16 autocast region": _in_context(
        lambda: torch.amp.autocast("cpu", dtype=torch.float16)
    ),
    "strict deterministic": _setting(
        lambda: torch.use_deterministic_algorithms(True),
        lambda: torch.use_deterministic_algorithms(False),
    ),
    "flush denormals": _setting(
        lambda: torch.set_flush_denormal(True), lambda: torch.set_flush_denormal(False)
    ),
    "medium matmul precision": _setting(
        lambda: torch.set_float32_matmul_precision("medium"),
        lambda: torch.set_float32_matmul_precision("highest"),
    ),
    "another seed": _setting(
        lambda: torch.manual_seed(12345), lambda: torch.manual_seed(0)
    ),
}


def with_spoiled_state(reference):
    """A right answer that also spoils global state: still right."""

    @functools.wraps(reference)
    def answer(*args, **kwargs):
        result = reference(*args, **kwargs)
        spoil_global_state()
        return result

    return answer


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("variant", variants(), ids=ids)
def test_reference_passes_whatever_the_notebook_set_before(variant, state, capsys):
    name, _, kwargs = variant
    check = check_of(name, kwargs)
    leave = STATES[state]()
    try:
        before = torch_state()
        for hidden in (False, True):
            check(REFERENCES[name], hidden=hidden)
            assert torch_state() == before  # the notebook's state, untouched
    finally:
        leave()
    out, err = capsys.readouterr()
    assert err == "" and "FAIL" not in out


@pytest.mark.parametrize("variant", variants(), ids=ids)
def test_a_right_answer_that_spoils_global_state_still_passes(variant, capsys):
    name, _, kwargs = variant
    before = torch_state()
    for hidden in (False, True):
        check_of(name, kwargs)(with_spoiled_state(REFERENCES[name]), hidden=hidden)
    assert torch_state() == before
    assert capsys.readouterr().err == ""


def test_keyboard_interrupt_stops_the_check(capsys):
    # the stop button must still stop a cell: not turned into a failed case
    def interrupted(bits):
        raise KeyboardInterrupt

    before = torch_state()
    with pytest.raises(KeyboardInterrupt):
        checks.check_decode_fp16(interrupted)
    assert torch_state() == before
    assert capsys.readouterr().err == ""
