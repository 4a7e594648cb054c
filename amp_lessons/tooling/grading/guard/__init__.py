"""The kernel a submission is graded in: ipykernel behind a Python audit hook that
tells the grader, over a signed channel, what the student's code did and what each
check concluded.

The grader cannot trust a notebook's outputs: the student's code runs in the same
interpreter as the test cells and can hide an error (``get_ipython().showtraceback =
...``), replace a check, or swap a module. So this kernel, before any student code
runs, imports the course package, snapshots every loaded module's namespace, and
installs an audit hook (PEP 578; it cannot be removed). Each check's engine raises
``amp_lessons.check`` with its verdict; the hook accepts it only from the real engine
called by a real check, with every snapshotted module unchanged and no frame, gc,
ctypes or tracing access by student code while the check ran. The hook also reports
student code that writes outside its folder, opens the gradebook, a notebook or the
course package's files, starts processes, uses the network, ctypes or gc, or patches
classes. Each report is one line, ``HMAC-SHA256 hex + " " + JSON``, written at once
to a FIFO the grader reads from outside the sandbox; the key never reaches student
code (its file is deleted before the first cell runs), so a forged line does not
verify and is itself evidence.

"Student code" is any frame whose file is not a library file (the venv, the Python
installation, the course package) and not one of the course's own cells, which the
grader names in advance (ipykernel names a cell's file after a hash of its source).

The hook never calls student code: it touches only exact ``str``/``bytes``/``int``
values, C functions captured before the first cell, and frames. It is built from
parts, each made by a ``make_*`` function before student code runs and each testable
alone, one module a part: the signed channel (``channel.make_sender``), the stack
(``stacks.make_stack_reader``), the snapshot's watch (``tamper.make_tamper_watch``),
the checks' verdicts (``verdicts.make_check_watch``) and the events that are evidence
(``events.make_event_routes``); ``make_hook``, here, puts them together. A part's
functions look up no global or builtin name at run time (tests/test_sandbox.py
checks it), so rebinding ``builtins.any`` or the guard's globals changes nothing in
them.

It has to be cheap: a lesson raises some 18,000 audit events, and walking the stack
for the few that need it read 700,000 frames, each read (``frame.f_code``) one more
event. So the hook looks an event's name up once, in a dict of the few dozen that
matter, and returns at once for the rest; frame reads count only while a check
runs; a walk remembers each file's verdict and the clean frames of the stack, and
reads only the frames above the last one it knows (``stacks.make_clean_stacks``).

Not covered here: what the grader does with the reports (``review``); anything done
outside Python (a C extension built at run time is seen only as ctypes or a process).

Example (run by the sandbox's kernelspec; never by hand)::

    python -m amp_lessons.tooling.grading.guard -f /tmp/kernel-1.json
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from amp_lessons.tooling.grading.guard.channel import make_sender, open_channel
from amp_lessons.tooling.grading.guard.events import make_event_routes
from amp_lessons.tooling.grading.guard.stacks import (
    cell_names,
    library_roots,
    make_stack_reader,
)
from amp_lessons.tooling.grading.guard.tamper import make_tamper_watch, take_snapshot
from amp_lessons.tooling.grading.guard.verdicts import (
    FRAMES,
    check_codes,
    make_check_watch,
)

__all__ = [
    "CONFIG_ENV",
    "cell_names",
    "check_codes",
    "main",
    "make_hook",
    "take_snapshot",
]

CONFIG_ENV = "AMP_GUARD_CONFIG"  # path of the JSON config the runner writes


def make_hook(
    config: dict,
    snapshot: dict,
    grade: Callable,
    check_codes: frozenset,
    write: Callable[[bytes], None],
) -> Callable[[str, tuple], None]:
    """The audit hook. ``grade`` is the real engine (``checks.grade``);
    ``check_codes`` every code object of the checks package; ``write(bytes)`` sends
    one line. The parts are made here, before student code runs (see the module
    docstring); the hook only routes each event to its part.
    """
    import _thread

    from amp_lessons.teaching.checks import CHECK_DONE, CHECK_START

    _BaseException, startswith = BaseException, str.startswith
    get_ident = _thread.get_ident
    libraries = library_roots(config["package_root"])
    send = make_sender(bytes.fromhex(config["key"]), write)
    stack = make_stack_reader(config, libraries)
    taints: dict[int, list[str]] = {}  # thread -> what tainted the check it runs
    start, frame_access, done = make_check_watch(
        grade, check_codes, stack, make_tamper_watch(snapshot, libraries), send, taints
    )
    routes, always = make_event_routes(config, stack, send, taints)
    routes.update(
        {CHECK_START: start, CHECK_DONE: done, **dict.fromkeys(FRAMES, frame_access)}
    )
    route_of, busy = routes.get, set()

    def hook(event: str, args: tuple) -> None:
        route = route_of(event)  # an audit event's name is always an exact str
        if route is None:
            if not startswith(event, "ctypes."):
                return  # import, builtins.id ...: most events, nothing to check
            route = always
        elif route is frame_access and not taints:
            return  # frames read outside a check: libraries do it all the time
        me = get_ident()
        if me in busy:
            return  # raised by the hook's own work (each frame.f_code it reads)
        busy.add(me)
        try:
            route(event, args)
        except _BaseException:  # never break the event, never show a hook frame
            pass
        finally:
            busy.discard(me)

    send({"kind": "hello", "pid": os.getpid()})
    return hook


def main() -> None:
    """Read and delete the config, snapshot, install the hook, become the kernel."""
    path = os.environ.pop(CONFIG_ENV)
    with open(path) as f:
        config = json.load(f)
    os.unlink(path)
    from ipykernel import kernelapp

    # the checks (and torch, which they rely on) are loaded before the snapshot
    from amp_lessons.teaching.checks import grade

    hook = make_hook(
        config, take_snapshot(), grade, check_codes(), open_channel(config["fifo"])
    )
    sys.addaudithook(hook)
    del config, hook
    kernelapp.launch_new_instance()
