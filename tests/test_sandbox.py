"""Grading that student code cannot subvert: the one form of a test cell and its lint,
`verify_pristine`, the guard's audit hook, the static scan, the tamper cross-check,
and (slow) one grading run of lesson 08 with a solved, a blank and one submission
per attack from issue 12.

The fast tests run the hook in a child Python (an audit hook cannot be removed); the
slow one needs bubblewrap and user namespaces, and fails rather than skips in CI.
"""

import ast
import dis
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import nbformat
import pytest
from notebook_lint_rules import optional_cells
from paths import LESSONS, NOTEBOOKS_DIR, ROOT

from amp_lessons.tooling import grading
from amp_lessons.tooling.grading import (
    autograder,
    cli,
    guard,
    review,
    runner,
    sandbox,
    testcells,
)

GRADED = [p for p in LESSONS if grading.is_graded(p)]
PYTHON_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run_python(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=PYTHON_ENV,
        timeout=timeout,
        cwd=ROOT,
    )


def graded_cell(source: str, grade_id: str = "x_test"):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": grade_id,
        "locked": True,
        "points": 1,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    return cell


# ---------------------------------------------------------------------------------
# The one form of a test cell


@pytest.mark.parametrize("path", GRADED, ids=lambda p: p.name)
def test_course_test_cells_take_their_checks_from_the_package(path):
    assert testcells.lint_test_cells(path) == []
    nb = nbformat.read(path, as_version=4)
    tests = [c for c in nb.cells if grading.is_test_cell(c)]
    assert tests and all(testcells.check_calls(c.source) for c in tests)
    for cell in nb.cells:  # no notebook name a solution cell could rebind
        assert not re.search(r"(?<![\w.])check_\w+\s*\(", cell.source), cell.source


def test_fix_tests_rewrites_the_old_form_once(tmp_path):
    old = (
        "check_amp_step_order(amp_step_order)\n### BEGIN HIDDEN TESTS\n"
        "check_amp_step_order(amp_step_order, hidden=True)\n### END HIDDEN TESTS"
    )
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "from amp_lessons.teaching.checks import check_unscale"
            ),
            nbformat.v4.new_code_cell(
                "from amp_lessons.teaching.checks import AMP_STEPS, "
                "check_amp_step_order\n"
                "x = 1"
            ),
            graded_cell(old, "05_test"),
        ]
    )
    path = tmp_path / "05.ipynb"
    nbformat.write(nb, path)
    found = "\n".join(testcells.lint_test_cells(path))
    assert "must start with `import amp_lessons.teaching.checks as _checks`" in found
    assert "fix-tests" in found
    assert grading.main(["--notebooks", str(tmp_path), "fix-tests", str(path)]) == 0
    fixed = nbformat.read(path, as_version=4)
    assert [c.source for c in fixed.cells] == [
        # the import-only cell went
        "from amp_lessons.teaching.checks import AMP_STEPS\nx = 1",
        "import amp_lessons.teaching.checks as _checks\n_checks.verify_pristine()\n"
        "_checks.check_amp_step_order(amp_step_order)\n### BEGIN HIDDEN TESTS\n"
        "_checks.check_amp_step_order(amp_step_order, hidden=True)\n"
        "### END HIDDEN TESTS",
    ]
    assert testcells.lint_test_cells(path) == []
    assert testcells.check_calls(fixed.cells[1].source) == [
        ("check_amp_step_order", False),
        ("check_amp_step_order", True),
    ]
    assert testcells.fix_test_cells(path) == 0  # idempotent


@pytest.mark.parametrize(
    "source, problem",
    [
        ("check_unscale(f)", "must start with"),
        (
            "from amp_lessons.teaching.checks import check_unscale\ncheck_unscale(f)",
            "must start",
        ),
        (
            "import amp_lessons.teaching.checks as _checks\n_checks.verify_pristine()\n"
            "check_unscale(f)",
            "holds only `_checks.check_*(...)` calls",
        ),
        (
            "import amp_lessons.teaching.checks as _checks\n_checks.verify_pristine()\n"
            "f = lambda *a: 1\n_checks.check_unscale(f)",
            "holds only",
        ),
        (
            "import amp_lessons.teaching.checks as _checks\n_checks.verify_pristine()",
            "calls no `_checks.check_*`",
        ),
    ],
)
def test_lint_refuses_every_other_form(source, problem):
    assert any(problem in p for p in testcells.test_cell_problems(source))


def test_plain_assert_test_cells_stay_allowed():
    assert testcells.test_cell_problems("assert double(2) == 4") == []


# ---------------------------------------------------------------------------------
# verify_pristine: the checks vouch for themselves


def test_verify_pristine_catches_each_rebinding(monkeypatch, tmp_path):
    import amp_lessons.teaching.checks as checks
    from amp_lessons.teaching.checks import _engine, _pristine, quiz

    assert _pristine.tampering() == []
    checks.verify_pristine()
    cases = [
        (_engine, "grade", "_engine.grade is not the function in the file"),
        (quiz, "grade", "quiz.grade is not amp_lessons.teaching.checks._engine.grade"),
        (quiz, "_quiz_rows", "quiz._quiz_rows is not the function in the file"),
        (checks, "check_quick_check", "check_quick_check is not its module's own"),
        (_engine.Row, "__init__", None),  # dataclass: its methods are generated
    ]
    for owner, name, problem in cases:
        with monkeypatch.context() as patch:
            patch.setattr(owner, name, lambda *a, **k: None)
            if problem:
                assert any(problem in p for p in _pristine.tampering()), name
                with pytest.raises(AssertionError, match="grading code in this kernel"):
                    checks.verify_pristine()
    assert _pristine.tampering() == []
    fake = type(sys)("amp_lessons.teaching.checks.quiz")
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "amp_lessons.teaching.checks.quiz", fake)
        assert any("is not loaded from" in p for p in _pristine.tampering())
    seal = tmp_path / "seal.json"
    seal.write_text(json.dumps({**_pristine.seal(), "quiz.py": "0" * 64}))
    monkeypatch.setenv(_pristine.SEAL_ENV, str(seal))
    assert _pristine.tampering() == ["checks/quiz.py differs from the grader's seal"]
    seal.write_text(json.dumps(_pristine.seal()))
    assert _pristine.tampering() == []


def test_verify_pristine_catches_patched_builtins_and_a_swapped_package():
    done = run_python("""
        import builtins, sys, types
        import amp_lessons.teaching.checks as checks
        from amp_lessons.teaching.checks import _pristine
        real = builtins.isinstance
        builtins.isinstance = lambda *a: True
        print(_pristine.tampering())
        builtins.isinstance = real
        fake = types.ModuleType("amp_lessons.teaching.checks")
        fake.__dict__.update(vars(checks))
        fake.check_quick_check = lambda *a, **k: None
        sys.modules["amp_lessons.teaching.checks"] = fake
        import amp_lessons.teaching.checks as swapped
        print(_pristine.tampering())
    """)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first == "['builtins.isinstance was replaced']"
    assert (
        "amp_lessons.teaching.checks.check_quick_check is not its module's own"
        in second
    )


def test_every_check_reports_its_verdict_to_audit_hooks():
    done = run_python("""
        import sys
        seen = []
        sys.addaudithook(lambda e, a: seen.append((e, a)) if e.startswith(
            "amp_lessons.check") else None)
        from amp_lessons.teaching.checks import check_amp_step_order, AMP_STEPS
        from amp_lessons.teaching.checks.step_order import _REFERENCE_ORDER as _ORDER
        try:
            check_amp_step_order(lambda: [])
        except AssertionError:
            pass
        check_amp_step_order(lambda: list(_ORDER), hidden=True)
        print(seen)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        "[('amp_lessons.check.start', ('check_amp_step_order',)), "
        "('amp_lessons.check', ('check_amp_step_order', False, False)), "
        "('amp_lessons.check.start', ('check_amp_step_order',)), "
        "('amp_lessons.check', ('check_amp_step_order', True, True))]"
    )


# ---------------------------------------------------------------------------------
# The guard's audit hook, in a child Python standing in for the kernel

GUARD_SCRIPT = """
import json, os, socket, sqlite3, sys
from amp_lessons.tooling.grading import guard, sandbox
from amp_lessons.teaching.checks import _engine
import amp_lessons.teaching.checks, amp_lessons.teaching.quiz, amp_lessons.core.formats
import amp_lessons.core.distributed
TEST_CELL = ("import amp_lessons.teaching.checks as _checks\\n"
             "_checks.check_amp_step_order(f)")
config = {"key": "ab" * 32, "workdir": "/tmp/work", "package_root": %(root)r,
          "test_cells": {"7": TEST_CELL}, "course_cells": [], "protected": [%(root)r]}
lines = []
hook = guard.make_hook(config, guard.take_snapshot(), _engine.grade,
                       guard.check_codes(), lines.append)
sys.addaudithook(hook)
cell = guard.cell_names([TEST_CELL])[0]
student = cell.rsplit("/", 1)[0] + "/424242.py"

def run(source, name=student, **names):
    space = {"__name__": "__main__", **names}
    exec(compile(source, name, "exec"), space)
    return space

run('''
import gc, socket, sqlite3, subprocess
try: open(%(root)r + "/amp_lessons/teaching/checks/quiz.py", "a")
except OSError: pass
try: open("/srv/course/gradebook.db")
except OSError: pass
try: sqlite3.connect("/nonexistent/gradebook.db")
except Exception: pass
try: socket.create_connection(("127.0.0.1", 9), timeout=1)
except OSError: pass
gc.get_objects()
import amp_lessons.core.formats as f
type(f.FORMATS["fp16"]).__repr__ = lambda self: "x"
''')
open("/tmp/ok-for-course-cells", "w").close()  # a library frame: not reported
space = run('''
import sys
def honest():
    return []
def peeking():
    sys._getframe(1)
    return []
''')
honest = space["honest"]
for fn in (honest, space["peeking"]):
    try:
        run(TEST_CELL, cell, f=fn)
    except AssertionError:
        pass
import torch._dynamo  # wraps torch.manual_seed with torch's own code: not tampering
run('import sys\\nsys.audit("amp_lessons.check", "check_amp_step_order", False, True)')
# what torch.compile does to nn.Module (wraps __init__, __setstate__): not tampering
torch._dynamo.mutation_guard.install_generation_tagging_init()
# a lesson's own run ends a process group, kept in distributed's runtime state
amp_lessons.core.distributed._ENDED_GROUPS.append(object())
# a Spanish lesson's first cell switches the language: i18n's runtime state
amp_lessons.set_language("es")
try:
    run(TEST_CELL, cell, f=honest)
except AssertionError:
    pass
amp_lessons.set_language("en")
amp_lessons.teaching.quiz.QUESTIONS.clear()
run("import functools, torch\\ntorch.max = functools.wraps(torch.max)(lambda *a: 0)\\n"
    "torch.nn.Module.__repr__ = lambda self: 'a student wrote this'")
try:
    run(TEST_CELL, cell, f=honest)
except AssertionError:
    pass
lines.append(b"0" * 64 + b' {"kind":"check","passed":true,"seq":99}\\n')
records, forged = sandbox.verify_records(b"".join(lines), config["key"])
print(json.dumps({"records": records, "forged": forged}))
"""


@pytest.fixture(scope="module")
def guard_records():
    done = run_python(GUARD_SCRIPT % {"root": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_guard_reports_what_student_code_does(guard_records):
    events = [r["detail"] for r in guard_records["records"] if r["kind"] == "event"]
    assert f"writes code to {ROOT}/amp_lessons/teaching/checks/quiz.py" in events
    assert "opens /srv/course/gradebook.db" in events
    assert any(
        e.startswith("sqlite3.connect /nonexistent/gradebook.db") for e in events
    )
    assert any(e.startswith("socket.connect") for e in events)
    assert any(e.startswith("gc.get_objects") for e in events)
    assert not any("ok-for-course-cells" in e for e in events)
    assert not any("LC_MESSAGES" in e for e in events)  # the course's own cell
    assert all(
        r["cell"].endswith("/424242.py")
        for r in guard_records["records"]
        if r["kind"] == "event"
    )


def test_guard_vouches_only_for_real_untampered_checks(guard_records):
    checks = [r for r in guard_records["records"] if r["kind"] == "check"]
    honest, peeking, forged, compiled, after_clear = checks
    assert compiled["genuine"] and not any(
        "nn.modules.module.Module" in c for c in compiled["changed"]
    )
    assert not any("_ENDED_GROUPS" in c for c in compiled["changed"])
    assert not any("i18n" in c for c in compiled["changed"])  # set_language("es")
    assert "class torch.nn.modules.module.Module changed" in after_clear["changed"]
    assert (honest["cell"], honest["genuine"], honest["passed"]) == (7, True, False)
    assert honest["tainted"] == []
    assert peeking["genuine"] and peeking["tainted"] == ["sys._getframe"]
    assert forged["passed"] and not forged["genuine"] and forged["cell"] is None
    changed = after_clear["changed"]
    assert "the contents of amp_lessons.teaching.quiz.QUESTIONS changed" in changed
    assert "torch.max replaced" in changed  # a student's wrapper is not torch's
    assert not any("manual_seed" in c for c in changed)
    assert "class amp_lessons.core.formats.Format changed" in honest["changed"]
    assert guard_records["forged"] == 1  # the line without a valid HMAC


TRIPWIRE_SCRIPT = """
import json, sys
from amp_lessons.tooling.grading import guard, sandbox
from amp_lessons.teaching.checks import _engine
import amp_lessons.teaching.checks
TEST_CELL = ("import amp_lessons.teaching.checks as _checks\\n"
             "_checks.check_underflow_fraction(f)")
STUDENT_CELL = '''
import torch
from amp_lessons.teaching.underflow import underflow_fraction as alias
def written(grads, scale):
    nonzero = grads != 0
    if not nonzero.any():
        return 0.0
    lost = (grads[nonzero] * scale).to(torch.float16) == 0
    return lost.sum().item() / nonzero.sum().item()
def delegating(grads, scale):
    return alias(grads, scale)
'''
config = {"key": "ab" * 32, "workdir": "/tmp/work", "package_root": %(root)r,
          "test_cells": {"7": TEST_CELL}, "course_cells": [], "protected": [%(root)r]}
lines = []
sys.addaudithook(guard.make_hook(config, guard.take_snapshot(), _engine.grade,
                                 guard.check_codes(), lines.append))
cell = guard.cell_names([TEST_CELL])[0]
space = {}
exec(compile(STUDENT_CELL, cell.rsplit("/", 1)[0] + "/424242.py", "exec"), space)
for fn in (space["written"], space["delegating"]):
    try:
        exec(compile(TEST_CELL, cell, "exec"), {"f": fn})
    except AssertionError:
        pass
records, forged = sandbox.verify_records(b"".join(lines), config["key"])
print(json.dumps(records))
"""


def test_the_guard_takes_a_check_with_tripwires_for_an_untampered_one():
    # call_student swaps the package answer's __code__ while the student's function
    # runs (checks/_engine.py): the grader's doing, not the student's
    done = run_python(TRIPWIRE_SCRIPT % {"root": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    records = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["kind"] for r in records] == ["hello", "check", "check"]  # no events
    written, delegating = records[1:]
    assert (written["passed"], delegating["passed"]) == (True, False)
    for check in (written, delegating):
        assert check["genuine"] and check["changed"] == [] and check["tainted"] == []


# ---------------------------------------------------------------------------------
# The guard's parts, one at a time (in this process: nothing is installed as a hook)


def guard_config(**changes) -> dict:
    config = {
        "key": "ab" * 32,
        "workdir": "/tmp/work",
        "package_root": str(ROOT),
        "test_cells": {"7": "print('a test cell')"},
        "course_cells": [],
        "protected": [str(ROOT)],
    }
    return {**config, **changes}


def guard_functions(function) -> list:
    """``function`` and every function of the guard's modules it reaches through its
    closure, directly or as a value of a dict there (the routes, reached by their
    ``get``)."""
    folder = os.path.dirname(guard.__file__)  # amp_lessons/tooling/grading/guard
    found, todo = {}, [function]
    while todo:
        fn = todo.pop()
        if id(fn) in found or os.path.dirname(fn.__code__.co_filename) != folder:
            continue
        found[id(fn)] = fn
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # not bound yet
                continue
            if isinstance(getattr(value, "__self__", None), dict):
                value = value.__self__  # a dict's bound get: the routes
            values = list(value.values()) if isinstance(value, dict) else [value]
            todo += [v for v in values if isinstance(v, types.FunctionType)]
    return list(found.values())


def test_the_hook_looks_up_no_global_or_builtin_name():
    """Student code can rebind builtins and the guard's globals; the hook and its
    parts, in each module of the guard, bind everything they use before the first
    cell runs."""
    from amp_lessons.teaching.checks import grade

    hook = guard.make_hook(
        guard_config(), guard.take_snapshot(), grade, guard.check_codes(), [].append
    )
    functions = guard_functions(hook)
    names = {fn.__name__ for fn in functions}
    assert {
        "hook",
        "student_file",
        "send",
        "changes",
        "done",
        "genuine",
        "frame_access",
        "opening",
        "always",
        "remember",
        "fingerprint",
        "rewrapped",
    } <= names
    assert {os.path.basename(fn.__code__.co_filename) for fn in functions} == {
        "__init__.py",
        "channel.py",
        "events.py",
        "stacks.py",
        "tamper.py",
        "verdicts.py",
    }
    for fn in functions:
        codes = [fn.__code__]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
            looked_up = [
                i.argval
                for i in dis.get_instructions(code)
                if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
            ]
            assert looked_up == [], (fn.__qualname__, looked_up)


def test_the_sender_signs_numbers_and_caps_each_record():
    lines = []
    send = guard.channel.make_sender(
        bytes.fromhex("cd" * 32), lines.append, max_records=2
    )
    send(
        {
            "kind": "event",
            "detail": "x" * 500,
            "cells": list(range(30)),
            "odd": 1.5,
            "ok": True,
            "none": None,
        }
    )
    send({"kind": "hello"})
    send({"kind": "dropped"})
    records, forged = sandbox.verify_records(b"".join(lines), "cd" * 32)
    assert forged == 0 and len(lines) == 2
    first, second = records
    assert first == {
        "kind": "event",
        "detail": "x" * guard.channel.TEXT_LIMIT,
        "cells": list(range(guard.channel.LIST_LIMIT)),
        "odd": "?",
        "ok": True,
        "none": None,
        "seq": 1,
    }
    assert second == {"kind": "hello", "seq": 2}


@pytest.mark.parametrize(
    "value",
    [
        b"plain ascii " * 200,
        "é€😀".encode() * 400,
        b"\xff\xfe" * 700,
        ("x" * 299 + "😀" * 10).encode(),
        b"\xf0\x9f\x98" * 500,
        "a str" * 100,
        42,
        object(),
    ],
    ids=range(8),
)
def test_clipped_text_is_the_start_of_the_whole_text(value):
    """marshal.loads gets a module's bytecode: the guard decodes only the bytes the
    record keeps, and must get the same text as decoding them all."""
    text, clipped = guard.channel.make_text_readers()
    assert clipped(value) == text(value)[: guard.channel.TEXT_LIMIT]


def test_paths_are_resolved_as_text():
    absolute = guard.events.make_path_resolver("/tmp/work")
    assert absolute("notes.txt") == "/tmp/work/notes.txt"
    assert absolute("../../srv/./course//gradebook.db") == "/srv/course/gradebook.db"
    assert absolute("/a/b/../../../etc") == "/etc"


def test_event_details_say_what_is_evidence():
    details = guard.events.make_event_details(guard_config())
    opening = details["open"]
    assert (
        opening("open", ("/srv/course/gradebook.db", "r", 0))
        == "opens /srv/course/gradebook.db"
    )
    assert (
        opening("open", ("../source/08/08.ipynb", "r", 0))
        == "opens /tmp/source/08/08.ipynb"
    )
    assert (
        opening("open", (f"{ROOT}/amp_lessons/core/train.py", "r", 0))
        == f"opens {ROOT}/amp_lessons/core/train.py"
    )
    assert opening("open", ("/proc/1/environ", "r", 0)) == "opens /proc/1/environ"
    assert opening("open", ("/etc/hosts", "a", 0)) == "writes /etc/hosts"
    assert opening("open", ("/tmp/x.py", "w", 0)) == "writes code to /tmp/x.py"
    assert opening("open", (b"/etc/x", None, os.O_WRONLY)) == "writes /etc/x"
    for harmless in (
        ("results/run.json", "w", 0),
        ("/usr/lib/x.py", "r", 0),
        ("/tmp/scratch.txt", "w", 0),
        (3, "r", 0),
    ):
        assert opening("open", harmless) is None, harmless
    assert details["os.listdir"]("os.listdir", ("/proc/1/fd",)) == "lists /proc/1/fd"
    assert details["os.scandir"]("os.scandir", ("/proc/self/fd",)) is None
    assert (
        details["os.remove"]("os.remove", ("/etc/passwd", -1))
        == "os.remove /etc/passwd"
    )
    assert details["os.remove"]("os.remove", ("old.json", -1)) is None
    patch = details["object.__setattr__"]
    assert (
        patch("object.__setattr__", (dict, "get", None))
        == "object.__setattr__ get on dict"
    )
    assert patch("object.__setattr__", (object(), "x", None)) is None


def frames_of(source: str, filename: str, **names) -> dict:
    space = dict(names)
    exec(compile(textwrap.dedent(source), filename, "exec"), space)
    return space


def test_the_stack_reader_finds_student_frames_above_and_under_known_clean_ones():
    """Walks remember the clean module-body frames of the stack and stop at one met
    again; never a frame that can be resumed under another caller (a cell with a
    top-level ``await`` is a coroutine)."""
    student_file, test_cell, forget = guard.stacks.make_stack_reader(
        guard_config(), guard.stacks.library_roots(str(ROOT))
    )
    library_file = os.path.join(sys.base_prefix, "lib", "fake_library.py")
    library = frames_of(
        """
        import sys
        def probe(reader):
            return reader(sys._getframe(0))
        def innermost(reader):
            frame = sys._getframe(0)
            return reader(frame, frame.f_back)
        class Pause:
            def __await__(self):
                yield
    """,
        library_file,
    )
    cell = guard.cell_names([""])[0].rsplit("/", 1)[0] + "/424242.py"
    student = frames_of(
        """
        def call(fn, *args):
            return fn(*args)
    """,
        cell,
    )
    found = frames_of(
        """
        import sys
        alone = reader(sys._getframe(0))  # remembers this module body's frame
        again = probe(reader)  # stops at it
        via_student = call(probe, reader)  # the student's frame is above it
        again_after = probe(reader)
    """,
        library_file.replace("fake_library", "fake_module"),
        reader=student_file,
        probe=library["probe"],
        call=student["call"],
    )
    assert (
        found["alone"],
        found["again"],
        found["via_student"],
        found["again_after"],
    ) == (None, None, cell, None)
    assert student["call"](library["probe"], student_file) == cell
    assert student["call"](library["innermost"], student_file) is None
    awaiting = compile(
        "import sys\nfirst = reader(sys._getframe(0))\n"
        "await Pause()\nsecond = reader(sys._getframe(0))\n",
        library_file.replace("fake_library", "fake_cell"),
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
    )
    space = {"reader": student_file, "Pause": library["Pause"]}
    body = eval(awaiting, space)  # a coroutine: its frame runs in two parts
    body.send(None)
    assert space["first"] is None
    with pytest.raises(StopIteration):
        student["call"](body.send, None)  # resumed by the student
    assert space["second"] == cell
    forget(threading.get_ident())
    in_test_cell = frames_of(
        """
        import sys
        def where(reader):
            return reader(sys._getframe(0))
    """,
        guard.cell_names(["print('a test cell')"])[0],
    )["where"]
    assert in_test_cell(test_cell) == 7 and test_cell(sys._getframe(0)) is None
    assert guard.stacks.RESUMABLE == (
        inspect.CO_GENERATOR
        | inspect.CO_COROUTINE
        | inspect.CO_ITERABLE_COROUTINE
        | inspect.CO_ASYNC_GENERATOR
    )


def test_clean_stacks_drop_the_frames_above_the_one_met_again():
    positions, remember, forget = guard.stacks.make_clean_stacks(limit=4)
    bottom, middle, top, other = (object() for _ in range(4))
    remember(1, None, [top, middle, bottom])  # top first
    assert positions(1) == {bottom: 0, middle: 1, top: 2} and positions(2) == {}
    remember(1, 0, [other])  # met bottom again: middle and top have returned
    assert positions(1) == {bottom: 0, other: 1}
    remember(1, None, [object() for _ in range(5)])  # past the limit: nothing kept
    assert positions(1) == {}
    remember(1, None, [top])
    forget(1)
    assert positions(1) == {}


def test_the_tamper_watch_reports_each_change(monkeypatch):
    module = types.ModuleType("amp_lessons._guard_test")
    exec(
        "DATA = [1, 2]\nclass Kind:\n    size = 1\ndef helper():\n    return 1",
        vars(module),
    )
    monkeypatch.setitem(sys.modules, module.__name__, module)
    changes = guard.tamper.make_tamper_watch(
        {module.__name__: (module, dict(vars(module)))},
        guard.stacks.library_roots(str(ROOT)),
    )
    assert changes() == []
    name = module.__name__
    with monkeypatch.context() as patch:
        patch.setattr(module, "helper", lambda: 2)
        assert changes() == [f"{name}.helper replaced"]
    with monkeypatch.context() as patch:
        patch.setattr(module.Kind, "size", 2)
        assert changes() == [f"class {name}.Kind changed"]
    module.DATA.append(3)
    assert changes() == [f"the contents of {name}.DATA changed"]
    module.DATA.pop()
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, name, types.ModuleType(name))
        assert changes() == [f"sys.modules[{name!r}] replaced"]
    assert changes() == []


def test_the_runner_runs_cells_as_nbgrader_execute_does(tmp_path):
    """The runner sets nbgrader's Execute settings on nbclient itself (importing
    nbgrader costs each submission 0.6 to 1.2 s of CPU): every setting, and what an
    error reply adds to a cell, must be nbgrader's."""
    from nbclient import NotebookClient
    from nbgrader.preprocessors import Execute

    ours = runner.notebook_client(nbformat.v4.new_notebook(), tmp_path, 180)
    theirs = Execute(timeout=180)
    differ = [
        name
        for name in NotebookClient.class_trait_names()
        if name not in ("nb", "resources", "on_cell_executed")
        and getattr(ours, name) != getattr(theirs, name)
    ]
    assert differ == []
    assert ours.resources == {"metadata": {"path": str(tmp_path)}}
    error = {
        "status": "error",
        "ename": "CellTimeoutError",
        "evalue": "",
        "traceback": [],
    }
    shown = nbformat.v4.new_output(
        "error", ename="CellTimeoutError", evalue="", traceback=["shown"]
    )
    for content, outputs in [
        ({"status": "ok"}, []),
        (error, []),
        (error, [shown]),
        ({**error, "traceback": ["hidden"]}, []),
    ]:
        cells = [nbformat.v4.new_code_cell(outputs=list(outputs)) for _ in range(2)]
        reply = {"content": content}
        runner.record_error_reply(cell=cells[0], cell_index=0, execute_reply=reply)
        theirs.on_cell_executed(cell=cells[1], cell_index=0, execute_reply=reply)
        assert cells[0].outputs == cells[1].outputs, content


# ---------------------------------------------------------------------------------
# The static scan and the tamper cross-check

ATTACKS = {
    "shadow": "check_quick_check = lambda *a, **k: None",
    "monkeypatch": "import amp_lessons.teaching.checks._engine as e\ne.grade = print",
    "swap": "import sys\nsys.modules['amp_lessons.teaching.checks'] = None",
    "write_package": "open(amp_lessons.__file__, 'a')",
    "read_source": "import json\njson.load(open('/x/source/08/08.ipynb'))",
    "gradebook": "import sqlite3\nsqlite3.connect('gradebook.db')",
    "exit": "import os\nos._exit(0)",
    "hide_errors": "get_ipython().showtraceback = lambda *a: None",
    "frames": "import sys\nsys._getframe(1).f_back",
    "builtins": "__builtins__.isinstance = lambda *a: True",
    "computed_getattr": "getattr(torch, 'ma' + 'x')",
    "exec": "exec('1')",
    "shell": "!cat /etc/passwd",
}


@pytest.mark.parametrize("name", ATTACKS)
def test_scan_flags_each_reach_into_grading(name):
    flags = review.scan_source(ATTACKS[name], 5)
    assert flags and all(f.startswith("scan: cell 5 line ") for f in flags), flags


@pytest.mark.parametrize("path", GRADED, ids=lambda p: p.name)
def test_scan_leaves_the_course_solutions_alone(path):
    nb = nbformat.read(path, as_version=4)
    assert review.scan_notebook(nb, nb) == []


def test_student_cells_are_solutions_and_cells_not_the_courses():
    source = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import torch"), graded_cell("assert f()")]
    )
    sol = nbformat.v4.new_code_cell("def f(): return 1")
    sol.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "s"}
    submitted = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("import torch"),
            sol,
            nbformat.v4.new_code_cell("import os  # added by the student"),
            graded_cell("assert f()"),
        ]
    )
    assert review.student_cells(submitted, source) == [1, 2]


def check_cell(*reports):
    cell = graded_cell(
        "import amp_lessons.teaching.checks as _checks\n"
        "_checks.verify_pristine()\n"
        "_checks.check_quick_check(f)\n"
        "_checks.check_quick_check(f, hidden=True)",
        "08_test",
    )
    cell.outputs = [nbformat.v4.new_output("stream", text="all cases passed\n")]
    cell.execution_count = 1
    nb = nbformat.v4.new_notebook(cells=[cell])
    good = {
        "kind": "check",
        "cell": 0,
        "title": "check_quick_check",
        "passed": True,
        "genuine": True,
        "changed": [],
        "tainted": [],
    }
    records = [{**good, "hidden": hidden, **change} for hidden, change in reports]
    return nb, records


@pytest.mark.parametrize(
    "reports, why",
    [
        ([(False, {}), (True, {})], None),
        ([(False, {})], "check_quick_check never reported a verdict (hidden cases)"),
        (
            [(False, {}), (True, {"passed": False})],
            "reported a failure, but the notebook",
        ),
        ([(False, {"genuine": False}), (True, {})], "not called by the real check"),
        (
            [(False, {"tainted": ["sys._getframe"]}), (True, {})],
            "reached sys._getframe",
        ),
        ([(False, {"changed": ["x.y replaced"]}), (True, {})], "changed: x.y replaced"),
        ([(False, {"cell": 3}), (True, {})], "never reported"),
    ],
)
def test_cross_check_fails_every_pass_no_check_vouched_for(reports, why):
    nb, records = check_cell(*reports)
    flags = review.cross_check(nb, records)
    outputs = [o.output_type for o in nb.cells[0].outputs]
    if why is None:
        assert flags == [] and outputs == ["stream"]
    else:
        assert len(flags) == 1 and why in flags[0], flags
        assert flags[0].startswith("tamper: cell 0 (08_test) scored 0")
        assert outputs == ["stream", "error"]  # nbgrader now scores it 0


def test_a_cell_a_crash_kept_from_running_fails_without_a_tamper_flag():
    nb, records = check_cell((False, {}))
    assert review.cross_check(nb, records, "crash: DeadKernelError") == []
    assert nb.cells[0].outputs[-1].evalue == "not run: crash: DeadKernelError"


def test_a_test_cell_the_kernel_never_reached_fails_whatever_it_holds():
    ran, not_reached = graded_cell("assert f() == 1"), graded_cell("assert f() == 1")
    ran.execution_count = 3
    nb = nbformat.v4.new_notebook(cells=[ran, not_reached])
    assert review.cross_check(nb, [], "crash: DeadKernelError") == []
    assert ran.outputs == []  # it ran without an error: nbgrader's verdict stands
    not_run = [o.evalue for o in not_reached.outputs]
    assert not_run == ["not run: crash: DeadKernelError"]
    assert review._scored(ran) and not review._scored(not_reached)


def test_a_run_that_could_not_start_scores_a_blank_notebook_zero(tmp_path, monkeypatch):
    """The hole a broken sandbox opened: bwrap exits at once, no cell runs, and
    nbgrader would score every test cell without an error as passed."""
    blank = nbformat.v4.new_notebook(
        cells=[
            graded_cell("assert double(2) == 4", "a_test"),
            graded_cell(
                "import amp_lessons.teaching.checks as _checks\n"
                "_checks.verify_pristine()\n"
                "_checks.check_quick_check(f)",
                "b_test",
            ),
        ]
    )
    blank.cells[0].execution_count = 7  # a count left over from the student's run
    (tmp_path / "source" / "01").mkdir(parents=True)
    nbformat.write(blank, tmp_path / "source" / "01" / "lesson.ipynb")
    crashed = sandbox.Run(None, "crash: the sandboxed run ended with exit 1", None)
    monkeypatch.setattr(sandbox, "run_notebook", lambda *a, **k: crashed)
    resources = {
        "nbgrader": {
            "db_url": f"sqlite:///{tmp_path / 'gradebook.db'}",
            "assignment": "01",
            "student": "s",
            "notebook": "lesson",
        },
        "metadata": {"path": str(tmp_path)},
    }
    executed, _ = autograder.SandboxExecute().preprocess(blank, resources)
    assert [review._scored(c) for c in executed.cells] == [False, False]
    assert all(
        c.outputs[-1].evalue.startswith("not run: crash") for c in executed.cells
    )
    assert review.read_review(tmp_path, "s", "01")[0].startswith("crash: ")


# ---------------------------------------------------------------------------------
# No sandbox, no grading (unless asked)


def test_grading_refuses_without_bubblewrap_and_says_how_to_get_it(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox._probe.cache_clear()
    try:
        problem = sandbox.sandbox_problem()
        assert "bubblewrap (bwrap) is not installed" in problem
        assert "apt-get install bubblewrap" in problem
        assert "GRADE_ARGS=--unsafe-no-sandbox" in problem
        (tmp_path / "submitted" / "alice" / "08_quick_check").mkdir(parents=True)
        with pytest.raises(RuntimeError, match="refusing to grade without a sandbox"):
            autograder.autograde(tmp_path)
        assert cli.main(["--course", str(tmp_path), "autograde"]) == 2
    finally:
        sandbox._probe.cache_clear()


# ---------------------------------------------------------------------------------
# One grading run of lesson 08: solved, blank, and each attack of issue 12

LESSON = "08_quick_check"
STUB = "raise NotImplementedError()"
ATTACK_CODE = {
    # the one-liner: the old test cell looked the check up in the notebook
    "c_shadow": "check_quick_check = lambda *a, **k: None\n",
    "d_monkeypatch": (
        "import amp_lessons.teaching.checks._engine as engine\n"
        "import amp_lessons.teaching.checks.quiz as quiz\n"
        "engine.grade = quiz.grade = lambda *a, **k: None\n"
    ),
    "e_swap": (
        "import sys, types\nimport amp_lessons\n"
        "fake = types.ModuleType('amp_lessons.teaching.checks')\n"
        "fake.verify_pristine = lambda: None\n"
        "fake.check_quick_check = lambda *a, **k: None\n"
        "sys.modules['amp_lessons.teaching.checks'] = fake\n"
        "amp_lessons.teaching.checks = fake\n"
    ),
    "f_write_package": (
        "import amp_lessons.teaching.checks.quiz as quiz\n"
        "try:\n"
        "    with open(quiz.__file__, 'a') as f:\n"
        "        f.write('\\ncheck_quick_check = lambda *a, **k: None\\n')\n"
        "except OSError as exc:\n"
        "    print('read-only:', exc)\n"
    ),
    "h_gradebook": (
        "import sqlite3\n"
        "try:\n"
        "    db = sqlite3.connect({gradebook!r})\n"
        "    db.execute('UPDATE grade SET auto_score = 0')\n"
        "    db.commit()\n"
        "except Exception as exc:\n"
        "    print('no gradebook here:', exc)\n"
    ),
    "i_exit": "import os\nos._exit(0)\n",
    "k_hide_errors": "get_ipython().showtraceback = lambda *a, **k: None\n",
}
READ_SOURCE = """
import ast, json, re

def quick_check_answers():
    for path in {paths!r}:
        try:
            cells = json.load(open(path))["cells"]
        except OSError:
            continue
        text = "".join("".join(c["source"]) for c in cells)
        return ast.literal_eval(re.search(r"return (\\{{.*?\\}})", text, re.S)[1])
    raise FileNotFoundError("no instructor source to copy from")
"""
FRAMES = """
import sys

def _force(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "make_rows":
        for row in arg:  # the check's own rows, on their way back to it
            object.__setattr__(row, "ok", True)
    return _force

def quick_check_answers():
    caller = sys._getframe(1)
    while caller is not None and caller.f_code.co_name != "make_rows":
        caller = caller.f_back
    caller.f_trace = _force
    sys.settrace(lambda *a: None)  # tracing on, so the frame's f_trace runs
    return {}
"""
EXPECTED_FLAG = {  # a flag each attack must raise, beside its 0
    "c_shadow": "rebinds the name of a check (check_quick_check)",
    "d_monkeypatch": "imports the grading code (amp_lessons.teaching.checks._engine)",
    "e_swap": "check_quick_check never reported a verdict",
    "f_write_package": "writes code to {package}/teaching/checks/quiz.py",
    "g_read_source": "opens {course}/source/08_quick_check/08_quick_check.ipynb",
    "h_gradebook": "sqlite3.connect {course}/gradebook.db",
    "i_exit": "crash: DeadKernelError",
    "j_corrupt": "corrupt: 08_quick_check.ipynb cannot be read as a notebook",
    "k_hide_errors": "reaches .showtraceback",
    "l_frames": "its function reached",
}


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def require_sandbox() -> None:
    """Skip without a usable bwrap; in CI (.ci/run installs it) fail instead."""
    problem = sandbox.sandbox_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"CI must grade in a sandbox: {problem}")
        pytest.skip(problem)


def core_path_only(lesson: Path, folder: Path) -> Path:
    """A copy of ``lesson`` without its optional parts: every graded cell stays, so
    each attack meets the real exercise and its test cells, and each of the many
    sandboxed runs below skips the optional part's live measurements (CI time)."""
    nb = nbformat.read(lesson, as_version=4)
    optional = optional_cells(nb)
    nb.cells = [c for i, c in enumerate(nb.cells) if i not in optional]
    folder.mkdir()
    nbformat.write(nb, folder / lesson.name)
    return folder / lesson.name


@pytest.fixture(scope="module")
def attack_run(tmp_path_factory):
    require_sandbox()
    base = tmp_path_factory.mktemp("attacks")
    course = base / "course"
    lesson = core_path_only(NOTEBOOKS_DIR / f"{LESSON}.ipynb", base / "lesson")
    grading.build_course([lesson], course)
    grading.generate_student_edition(course)
    released = course / "release" / LESSON / f"{LESSON}.ipynb"
    paths = [str(course / "source" / LESSON / f"{LESSON}.ipynb"), str(lesson)]
    solutions = dict(
        ATTACK_CODE, g_read_source=READ_SOURCE.format(paths=paths), l_frames=FRAMES
    )
    files = {"a_solved": lesson, "b_blank": released}
    for student, code in solutions.items():
        nb = nbformat.read(released, as_version=4)
        cell = next(c for c in nb.cells if grading.is_solution_cell(c))
        code = code.replace("{gradebook!r}", repr(str(course / "gradebook.db")))
        cell.source = (
            code if "def quick_check_answers" in code else code + "\n" + cell.source
        )
        assert STUB in cell.source or "def quick_check_answers" in code
        files[student] = base / student / f"{LESSON}.ipynb"
        files[student].parent.mkdir()
        nbformat.write(nb, files[student])
    files["j_corrupt"] = base / "j_corrupt" / f"{LESSON}.ipynb"
    files["j_corrupt"].parent.mkdir()
    files["j_corrupt"].write_text('{"cells": [{"cell_type": "code", "sour')
    for student, path in files.items():
        grading.submit(student, [path], course)
    before = tree_digest(sandbox.PACKAGE_DIR), tree_digest(course / "source")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "amp_lessons.grading",
            "--course",
            str(course),
            "autograde",
        ],
        capture_output=True,
        text=True,
        env=PYTHON_ENV,
        cwd=ROOT,
        timeout=3000,
    )
    after = tree_digest(sandbox.PACKAGE_DIR), tree_digest(course / "source")
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "amp_lessons.grading",
            "--course",
            str(course),
            "grades",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=PYTHON_ENV,
        cwd=ROOT,
        timeout=300,
    )
    print(f"\n{done.stdout}\n{done.stderr[-2000:]}")
    return course, done, json.loads(shown.stdout), before, after, files


@pytest.mark.slow
def test_graded_run_ends_with_the_full_table(attack_run):
    _, done, _, _, _, files = attack_run
    students = sorted(files)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("student "))
    rows = [line.split()[0] for line in lines[header + 1 : header + 1 + len(students)]]
    assert rows == students


@pytest.mark.slow
def test_solved_gets_full_marks_blank_zero_and_neither_is_flagged(attack_run):
    _, _, grades, _, _, _ = attack_run
    by_student = {g["student"]: g for g in grades}
    solved, blank = by_student["a_solved"], by_student["b_blank"]
    assert solved["score"] == solved["max_score"] > 0 and solved["flags"] == []
    assert blank["score"] == 0 and blank["flags"] == []
    contract = {"flags", "lesson", "max_score", "score", "student"}  # COURSE.md's
    assert all(contract <= set(g) for g in grades)


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted(EXPECTED_FLAG))
def test_each_attack_scores_zero_and_is_flagged(attack_run, student):
    course, _, grades, _, _, _ = attack_run
    [grade] = [g for g in grades if g["student"] == student]
    assert grade["score"] == 0 and grade["lesson"] == LESSON
    expected = EXPECTED_FLAG[student].format(package=sandbox.PACKAGE_DIR, course=course)
    assert any(expected in flag for flag in grade["flags"]), grade["flags"]


@pytest.mark.slow
def test_package_source_and_other_grades_untouched(attack_run):
    course, _, grades, before, after, files = attack_run
    assert after == before  # the course package and the instructor's source
    assert [g["student"] for g in grades] == sorted(files)  # one row each
    scores = {s.student: s.score for s in grading.read_scores(course)}
    assert scores["a_solved"] == 10  # graded first, untouched by the later attacks


@pytest.mark.slow
def test_the_frames_attack_is_real_outside_the_guard(attack_run):
    """In a plain kernel (no guard) the trace-function solution passes every case:
    only the guard's taint check stands between it and 10/10."""
    from nbclient import NotebookClient

    course, _, _, _, _, files = attack_run
    nb = nbformat.read(files["l_frames"], as_version=4)
    folder = course / "source" / LESSON
    source = nbformat.read(folder / f"{LESSON}.ipynb", as_version=4)
    graded = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in source.cells
        if grading.is_test_cell(c)
    }
    tests = [c for c in nb.cells if grading.is_test_cell(c)]
    for test in tests:  # with their hidden cases, as nbgrader restores them
        test.source = graded[test.metadata["nbgrader"]["grade_id"]]
    NotebookClient(
        nb,
        timeout=180,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
    ).execute()
    assert len(tests) == len(graded) > 0
    for test in tests:
        text = "".join(o.get("text", "") for o in test.outputs)
        # printed text only, no error (the kernel may send it in several pieces)
        assert {o.output_type for o in test.outputs} == {"stream"}, test.outputs
        assert "hidden case passed" in text or "hidden cases passed" in text, text


def tiny_notebook(*sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


@pytest.mark.slow
def test_a_notebook_past_its_time_is_stopped_with_a_reason(tmp_path):
    require_sandbox()
    nb = tiny_notebook("print('started')", "import time\nwhile True: time.sleep(1)")
    run = sandbox.run_notebook(
        nb, tmp_path, test_cells={}, course_cells=[], protected=[], timeout=8
    )  # sleeps: keep it short
    assert run.notebook is None and run.seconds < 30
    assert run.reason == "timeout: the notebook ran past 8 s and was stopped"


@pytest.mark.slow
def test_without_a_sandbox_the_guard_still_reports(tmp_path):
    """--unsafe-no-sandbox: no protection of files, but evidence and verdicts."""
    test = (
        "import amp_lessons.teaching.checks as _checks\n_checks.verify_pristine()\n"
        "_checks.check_amp_step_order(amp_step_order)"
    )
    solution = "def amp_step_order():\n    open('/nonexistent-course/gradebook.db')\n"
    nb = tiny_notebook(solution, test)
    run = sandbox.run_notebook(
        nb,
        tmp_path,
        test_cells={1: test},
        course_cells=[test],
        protected=[],
        sandbox=False,
        timeout=300,
    )
    assert run.reason is None and run.forged == 0
    [verdict] = [r for r in run.records if r["kind"] == "check"]
    assert verdict["cell"] == 1 and verdict["genuine"] and not verdict["passed"]
    flags = review.runtime_flags(run.notebook, run.records, run.forged)
    assert flags == ["runtime: cell 0: opens /nonexistent-course/gradebook.db"]


@pytest.mark.slow
def test_a_result_forged_through_proc_is_not_taken(tmp_path):
    """bwrap's init holds the grader's pipe and student code can open it through
    /proc/1/fd/1: only the runner's signed document counts."""
    require_sandbox()
    forge = (
        "import json, os\n"
        "fake = {'notebook': {'cells': [], 'metadata': {}, 'nbformat': 4,"
        " 'nbformat_minor': 5}, 'reason': None, 'cell': None}\n"
        "pipe = os.open('/proc/1/fd/1', os.O_WRONLY)\n"
        "os.write(pipe, json.dumps(fake).encode())"
    )
    run = sandbox.run_notebook(
        tiny_notebook(forge, "print('after')"),
        tmp_path,
        test_cells={},
        course_cells=[],
        protected=[],
    )
    assert run.notebook is None and "the result did not verify" in run.reason
    flags = review.runtime_flags(tiny_notebook(forge), run.records, run.forged)
    assert "runtime: cell 0: writes /proc/1/fd/1" in flags


@pytest.mark.slow
def test_torchrun_works_inside_the_sandbox(tmp_path):
    """Lesson 10 launches torchrun, whose rendezvous looks up "localhost" and the
    hostname: in the sandbox's empty network namespace both must name loopback (CI's
    rehearsal once timed out there on 'Temporary failure in name resolution')."""
    require_sandbox()
    lookup = (
        "import socket\n"
        "print(sorted({socket.getaddrinfo(h, 0)[0][4][0] for h in "
        "('localhost', socket.gethostname())}))"
    )
    launch = (
        "import json\nfrom amp_lessons.core import distributed\n"
        "done = distributed.launch(['train', '--device', 'cpu', '--distributed',"
        " 'ddp', '--precision', 'fp32', '--steps', '2', '--batch-size', '8',"
        " '--json', 'run.json'], timeout=90, stream=None)\n"
        "print(done.returncode, json.load(open('run.json'))['world_size'])"
    )
    run = sandbox.run_notebook(
        tiny_notebook(lookup, launch),
        tmp_path,
        test_cells={},
        course_cells=[],
        protected=[],
        timeout=180,
    )
    assert run.reason is None, run.reason
    outputs = [
        "".join(o.get("text", "") for o in cell.outputs) for cell in run.notebook.cells
    ]
    assert outputs == ["['127.0.0.1']\n", "0 2\n"], outputs


@pytest.mark.slow
def test_feedback_shows_no_hidden_case_package_frame_or_path(attack_run):
    """Each attacker's feedback page: no hidden test or case, no traceback, none of
    the instructor's paths, and no forged "passed" where the pass was not trusted."""
    import html

    from amp_lessons.tooling.grading import feedback

    course, _, grades, _, _, _ = attack_run
    pages = feedback.write_feedback(course)
    assert len(pages) == len(grades)
    for grade in grades:
        page = course / "feedback" / grade["student"] / LESSON / f"{LESSON}.html"
        text = html.unescape(page.read_text())
        assert not re.search(r"\d+ hidden cases", text), grade["student"]
        for secret in ("BEGIN HIDDEN", "hidden=True", "Traceback", "_engine.py"):
            assert secret not in text, (grade["student"], secret)
        for path in (str(course), str(ROOT), str(sandbox.PACKAGE_DIR), "/tmp/"):
            assert path not in text, (grade["student"], path)
        tampered = [f for f in grade["flags"] if f.startswith("tamper:")]
        assert (feedback.TEXTS["en"]["untrusted"] in text) == bool(tampered), grade
