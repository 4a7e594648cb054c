"""The guard's stack reader: which frames are student code, and which graded test
cell a check was called from.

"Student code" is any frame whose file is not a library file (the venv, the Python
installation, the course package: ``library_roots``) and not one of the course's own
cells, which the grader names in advance (ipykernel names a cell's file after a hash
of its source: ``cell_names``). ``make_file_judge`` gives a file's verdict and
remembers it; ``make_clean_stacks`` remembers the frames of each thread's stack known
to have no student frame below them, so a walk reads only the frames above the last
one it knows; ``make_stack_reader`` puts the two together.

It has to be cheap: a lesson raises some 18,000 audit events, and walking the stack
for the few that need it read 700,000 frames, each read (``frame.f_code``) one more
event.

Example::

    student_file, test_cell, forget = make_stack_reader(config, libraries)
    student_file(sys._getframe(0))  # None here; a student cell's file under one
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

KNOWN_FILES = 4096  # file names whose verdict (student code or not) a walk remembers
CLEAN_FRAMES = 2048  # frames per thread known to have no student frame below them
# co_flags of code whose frame can be suspended and resumed under another caller:
# generators, coroutines, iterable coroutines, async generators (inspect.CO_*)
RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200
# The frames a walk remembers: module bodies (cells, imported modules) and the import
# system's, which lie under most walks; a function's frame could hold a large object
# (a batch, a model) past its return, so none is kept
_IMPORT_SYSTEM = "<frozen importlib."
# getframe() depth of the code that raised an event, seen from a route function: the
# route is called by the hook, which is called by the code raising the event
RAISER = 2


def cell_names(sources: list[str]) -> list[str]:
    """The file names ipykernel gives these cells in this process (a hash each)."""
    from ipykernel.compiler import get_file_name

    return [get_file_name(source) for source in sources]


def library_roots(package_root: str) -> tuple[str, ...]:
    """Where library code lives: the Python installation, the venv, the course
    package, and the code torch.compile generates (student code writing a ``.py``
    anywhere is reported)."""
    import tempfile

    roots = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        package_root,
    }
    found = sorted(os.path.join(os.path.realpath(r), "") for r in roots if r)
    return (*found, os.path.join(tempfile.gettempdir(), "torchinductor_"))


# Each make_* runs before student code; the functions it returns use only what it
# bound then (builtins included, as locals): never a global (tests/test_sandbox.py).


def make_clean_stacks(limit: int = CLEAN_FRAMES) -> tuple[Callable, Callable, Callable]:
    """``(positions, remember, forget)``: for each thread, the frames of its stack
    known to have no student frame at or below them, bottom first.

    Sound: a plain function's frame (not a generator's or a coroutine's, which can
    be resumed under another caller) keeps the frames below it for as long as it
    runs, and is never run again once it returns; so a known frame met again on the
    stack still has the frames below it that were walked. Worth it: the events of
    one import come from one stack some 100 frames deep, and each walk now reads only
    the frames above the last known one. The frames are held until the next walk in
    the thread moves past them, or ``forget``.

    ``positions(thread)``: frame -> index, a dict (empty when none is known).
    ``remember(thread, hit, walked)``: a walk found no student frame; it ended at the
    known frame of index ``hit`` (None: at the bottom of the stack), and ``walked``
    are the plain frames above that one, top first. ``forget(thread)``.
    """
    _len, _reversed = len, reversed
    stacks: dict[int, tuple[list, dict]] = {}
    stacks_get, none_known = stacks.get, {}

    def positions(me: int) -> dict:
        known = stacks_get(me)
        return none_known if known is None else known[1]

    def remember(me: int, hit: int | None, walked: list) -> None:
        known = stacks_get(me)
        if known is None or hit is None:
            order, index = [], {}
        else:  # the frames above the hit have returned since: not on this stack
            order, index = known
            for gone in order[hit + 1 :]:
                del index[gone]
            del order[hit + 1 :]
        for frame in _reversed(walked):
            index[frame] = _len(order)
            order.append(frame)
        if _len(order) > limit:
            stacks.pop(me, None)
        else:
            stacks[me] = (order, index)

    def forget(me: int) -> None:
        stacks.pop(me, None)

    return positions, remember, forget


def _test_cell_files(config: dict) -> dict[str, int]:
    """The file name of each graded test cell -> its index in the notebook."""
    return dict(
        zip(
            cell_names(list(config["test_cells"].values())),
            (int(i) for i in config["test_cells"]),
            strict=True,
        )
    )


def make_file_judge(
    config: dict, libraries: tuple[str, ...]
) -> tuple[Callable, Callable]:
    """``(known, judge)``: ``judge(name)`` says whether a file (an exact str) is
    student code and remembers it (KNOWN_FILES names); ``known(name)`` is what it
    said, or None. A cell's file is student code unless the course named it; any
    other file is unless it is a library's or made up (``<string>``)."""
    _len, startswith = len, str.startswith
    course = frozenset(cell_names(config["course_cells"])) | frozenset(
        _test_cell_files(config)
    )
    cell_prefix = cell_names([""])[0].rsplit("/", 1)[0] + "/"
    verdicts: dict[str, bool] = {}
    limit = KNOWN_FILES

    def judge(name: str) -> bool:
        student = name not in course and (
            startswith(name, cell_prefix)
            or not (startswith(name, libraries) or startswith(name, "<"))
        )
        if _len(verdicts) < limit:
            verdicts[name] = student
        return student

    return verdicts.get, judge


def make_stack_reader(
    config: dict, libraries: tuple[str, ...]
) -> tuple[Callable, Callable, Callable]:
    """``(student_file, test_cell, forget)``, which read the stack from a frame down.

    ``student_file(frame, stop=None)``: the file of the first student frame, or None;
    the walk ends before ``stop`` (``student_file(frame, frame.f_back)`` looks at
    ``frame`` alone). A file whose name is not an exact str is ``"<odd file
    name>"``, student code. Files' verdicts are remembered (``make_file_judge``), and
    so are the clean module-body and import-system frames of the thread's stack
    (``make_clean_stacks``): a walk reads a frame's code only above the last known
    one. ``test_cell(frame)``: the
    index of the first graded test cell on the way, or None. ``forget(thread)`` lets
    go of the frames known in that thread.
    """
    import _thread

    _type, _str, get_ident, resumable = type, str, _thread.get_ident, RESUMABLE
    startswith, import_system = str.startswith, _IMPORT_SYSTEM
    test_cells = _test_cell_files(config)
    known, judge = make_file_judge(config, libraries)
    positions, remember, forget = make_clean_stacks()

    def student_file(frame, stop=None) -> str | None:
        me = get_ident()
        position = positions(me).get
        walked, hit = [], None
        while frame is not None and frame is not stop:
            hit = position(frame)  # frames hash by identity: no student code runs
            if hit is not None:
                break
            code = frame.f_code
            name = code.co_filename
            if _type(name) is not _str:
                return "<odd file name>"
            student = known(name)
            if student is None:
                student = judge(name)
            if student:
                return name
            if not code.co_flags & resumable and (
                code.co_name == "<module>" or startswith(name, import_system)
            ):
                walked.append(frame)
            frame = frame.f_back
        if stop is None or hit is not None:  # all the way down: all of it is clean
            remember(me, hit, walked)
        return None

    def test_cell(frame) -> int | None:
        while frame is not None:
            name = frame.f_code.co_filename
            if _type(name) is _str and name in test_cells:
                return test_cells[name]
            frame = frame.f_back
        return None

    return student_file, test_cell, forget
