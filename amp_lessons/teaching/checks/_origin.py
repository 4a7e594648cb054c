"""Where what a student's function raised came from: its frames, whether torch
raised it, the learner's line, and whether the function is still nbgrader's stub or
an answer above a leftover ``raise NotImplementedError()``.

The engine (`_engine`) asks these while it turns an exception into a failed case.
Not covered here: the hints themselves (`_engine.Raised`).
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import textwrap
import types
from collections.abc import Callable

import torch

__all__ = [
    "STUB_MARKER",
    "at_call",
    "frames",
    "is_stub",
    "lines_of",
    "origin",
    "written",
]

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep  # frames of torch's own code
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep
_traceback_of = BaseException.__dict__["__traceback__"].__get__  # not a subclass's


def lines_of(exc: BaseException) -> list[tuple[types.CodeType, int]]:
    """(code, line number) of each frame `exc` went through, outermost first."""
    found, tb = [], _traceback_of(exc)
    while isinstance(tb, types.TracebackType):
        found.append((tb.tb_frame.f_code, tb.tb_lineno))
        tb = tb.tb_next
    return found


def frames(exc: BaseException) -> list:
    """The code object of each frame `exc` went through, outermost first."""
    return [code for code, _line in lines_of(exc)]


def origin(exc: BaseException) -> tuple[bool, str]:
    """Whether torch raised `exc` (a frame of torch's code, or a torch exception
    class), and the source of the deepest line outside torch and this package: the
    learner's line it came from ("" when unknown)."""
    lines = lines_of(exc)
    by_torch = type(exc).__module__.startswith("torch") or any(
        code.co_filename.startswith(_TORCH_DIR) for code, _line in lines
    )
    line = ""
    for code, number in reversed(lines):
        name = code.co_filename
        if not name.startswith((_TORCH_DIR, _PACKAGE_DIR)):
            # the line without its comment (PEP 8's two spaces before a #)
            line = linecache.getline(name, number).split("  #")[0].strip()
            break
    # a plain RuntimeError from a call on the learner's line: torch's C++ code (the
    # exercises call no other library; Python's own are subclasses)
    by_torch |= type(exc) is RuntimeError and not line.startswith(("raise", "assert"))
    return by_torch, line


def is_stub(fn: Callable, exc: BaseException) -> bool:
    # The stub raises in the student's own frame; a NotImplementedError from deeper
    # down (a torch op, another unsolved helper) is a failed case, not "not attempted".
    code = getattr(fn, "__code__", None)
    seen = frames(exc)
    return code is None or not seen or seen[-1] is code


STUB_MARKER = "# YOUR CODE HERE"  # nbgrader's comment above the stub's raise


def written(fn: Callable, exc: BaseException) -> bool:
    """Whether `fn`, which raised NotImplementedError in its own frame, holds more
    than nbgrader's stub (its docstring, then ``# YOUR CODE HERE`` and the raise).

    Statements besides those are the learner's, except when nbgrader's marker sits
    right above the raise with statements both before it and after the raise: the
    exercise's given lines around the stub (the entry lesson's step). Without
    source (code made by exec), any name but NotImplementedError is an answer.
    """
    lines = lines_of(exc)
    try:
        source, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(source)))
    except KeyboardInterrupt:
        raise
    except BaseException:  # no source (exec'd code), or a lambda's line
        names = getattr(getattr(fn, "__code__", None), "co_names", ())
        return bool(set(names) - {"NotImplementedError"})
    func = tree.body[0] if tree.body else None
    if not lines or not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    at = lines[-1][1] - first + 1  # the raise, as a line of `source`
    body = func.body[1:] if ast.get_docstring(func) is not None else func.body
    body = [node for node in body if not isinstance(node, ast.Pass)]
    before = any(node.end_lineno < at for node in body)
    after = any(node.lineno > at for node in body)
    nested = any(node.lineno < at <= node.end_lineno for node in body)
    above = [line.strip() for line in source[: at - 1] if line.strip()]
    if above and above[-1].startswith(STUB_MARKER) and not nested:
        return before != after
    return before or after or nested


def at_call(fn: Callable, exc: BaseException) -> bool:
    # a TypeError that never entered the student's function: the arguments did not
    # fit its parameters
    code = getattr(fn, "__code__", None)
    return isinstance(exc, TypeError) and code is not None and code not in frames(exc)
