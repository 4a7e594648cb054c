"""The guard's check watch: whether a check's verdict is the real engine's, and what
happened while the check ran.

Each check's engine raises ``CHECK_START`` when it begins and ``CHECK_DONE`` with its
verdict (``amp_lessons.teaching.checks``). ``make_check_watch`` gives the routes of
those events and of frame reads: while a check runs in a thread, student code that
reads frames (``FRAMES``: it could rewrite the check's rows through them) or does
anything that is evidence (``events``) taints it; when it ends, the verdict is sent
with whether it is genuine (``make_verdict_test``: raised by the real engine, called
by a real check, whose code objects ``check_codes`` lists), what changed of the
snapshot (``tamper``) and what tainted it.

Example (a verdict as the grader reads it)::

    {"kind": "check", "cell": 7, "title": "check_amp_step_order", "hidden": false,
     "passed": true, "genuine": true, "changed": [], "tainted": [], "seq": 3}
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from amp_lessons.tooling.grading.guard.channel import make_text_readers
from amp_lessons.tooling.grading.guard.stacks import RAISER

# Frame access: normal in libraries, so it only counts while a check is running
# (then the student's function could rewrite the check's rows through frames).
FRAMES = frozenset({"sys._getframe", "object.__getattr__"})


# Each make_* runs before student code; the functions it returns use only what it
# bound then (builtins included, as locals): never a global (tests/test_sandbox.py).


def make_verdict_test(grade: Callable, check_codes: frozenset) -> Callable:
    """``genuine(caller, title)``: the verdict raised in ``caller``, the frame that
    raised ``CHECK_DONE``, is the engine's (``grade``, with the builtins it was
    loaded with), called by a check of the package named as ``title`` says, with the
    package's ``make_rows``. Membership in ``check_codes`` is by identity (hashing a
    code object hashes its constants, which could be student objects)."""
    import builtins
    import types

    _type, _str, _id = type, str, id
    function_type, builtins_dict = types.FunctionType, vars(builtins)
    grade_code, grade_globals = grade.__code__, grade.__globals__
    check_ids = frozenset(_id(code) for code in check_codes)
    locals_get, split = dict.get, str.split

    def genuine(caller, title) -> bool:
        check = caller.f_back
        make_rows = locals_get(caller.f_locals, "make_rows")
        return (
            caller.f_code is grade_code
            and caller.f_globals is grade_globals
            and caller.f_builtins is builtins_dict
            and check is not None
            and _id(check.f_code) in check_ids
            and _type(title) is _str
            and check.f_code.co_name == split(title, "[")[0]  # check_quick_check[q]
            and _type(make_rows) is function_type
            and _id(make_rows.__code__) in check_ids
        )

    return genuine


def make_check_watch(
    grade: Callable,
    check_codes: frozenset,
    stack: tuple,
    changes: Callable,
    send: Callable,
    taints: dict,
) -> tuple:
    """``(start, frame_access, done)``, the routes of a check's events.

    ``start``: a check began in this thread; ``taints[thread]`` collects what taints
    it. ``frame_access``: a frame read; it taints the running check when student
    code is on the stack. ``done``: the verdict, sent with whether it is genuine
    (``make_verdict_test``), what changed and what tainted it; the stack reader
    lets go of the check's frames.
    """
    import _thread

    get_ident, getframe, raiser = _thread.get_ident, sys._getframe, RAISER
    genuine = make_verdict_test(grade, check_codes)
    student_file, test_cell, forget = stack
    text, _ = make_text_readers()

    def start(event: str, args: tuple) -> None:
        taints[get_ident()] = []

    def frame_access(event: str, args: tuple) -> None:
        running = taints.get(get_ident())
        if running is not None and student_file(getframe(raiser)):
            running.append(event if event == "sys._getframe" else text(args[1]))

    def done(event: str, args: tuple) -> None:
        me, caller = get_ident(), getframe(raiser)
        title, hidden, passed = (args + (None, None, None))[:3]
        vouched = genuine(caller, title)
        tainted = taints.pop(me, [])
        forget(me)  # the check's frames, and what the student's function left in them
        send(
            {
                "kind": "check",
                "cell": test_cell(caller),
                "title": text(title),
                "hidden": hidden is True,
                "passed": passed is True,
                "genuine": vouched,
                "changed": changes(),
                "tainted": tainted[:5],
            }
        )

    return start, frame_access, done


def check_codes() -> frozenset:
    """The code objects of the loaded checks' functions, nested ones included: a
    frame running one of them is the grader's, not the student's."""
    codes, code_type = set(), type(check_codes.__code__)
    for name, module in list(sys.modules.items()):
        if name.startswith("amp_lessons.teaching.checks"):
            for value in vars(module).values():
                stack = [getattr(value, "__code__", None)]
                while stack:
                    code = stack.pop()
                    if isinstance(code, code_type):
                        codes.add(code)
                        stack += [c for c in code.co_consts if isinstance(c, code_type)]
    return frozenset(codes)
