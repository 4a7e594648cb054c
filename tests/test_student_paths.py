"""A student's path never breaks (COURSE.md, truth rules): every lesson passes with
five-minute pauses between cells, Run All twice in one kernel, and as the student
edition with its exercises answered wrongly and its optional parts skipped, and
with its exercises unsolved; and what a Spanish lesson shows is Spanish.

nbval runs a notebook once, straight through, as fast as it can: none of these
paths. The kernels here are driven by `student_paths` (nbclient, in this process).
To keep CI short, the first two paths share one kernel per lesson: Run All with the
clock jumping 5 minutes before every cell, then Run All again, the second time as
the lesson's Spanish edition (the same code cells, generated from the English: the
run of the lesson again in a used kernel, and the Spanish lesson's run, whose output
the language check reads). Conftest's ``lesson_runs`` keeps that kernel's run for the
slides and the site too. This stands in for nbval in make test (pyproject.toml's
testpaths leave the notebooks out of nbval, which runs the English ones on the
newest torch): an error in the first pass is a plain failure or a pause problem, its
message says which cell; an error only in the second pass is a re-run problem (or a
Spanish one: the message says which). Paths 3 and 4 share one kernel per graded
lesson too (every lesson with optional parts is graded): the student edition's core
path answered wrongly, then the whole edition unsolved, from its first cell that
differs on (the cells above ran in the first pass, in this kernel: lesson 10's
torchrun launches run once, not twice). The fixture notebooks below
prove each test can fail, and that the clock jump leaves a cell's own timing alone.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from notebook_lint_rules import optional_cells
from paths import ES_STUDENT_PATHS, LESSONS
from spanish_outputs import notebook_verdict
from student_paths import (
    first_difference,
    paused_twice,
    run_in_one_kernel,
    spanish_twin,
    unsolved_path,
    unsolved_path_problems,
)

from amp_lessons.tooling import grading

GRADED = [p for p in LESSONS if grading.is_graded(p)]
PAUSE_S = 300.0  # a five-minute pause before every cell


def lesson_id(path: Path) -> str:
    return f"es-{path.stem}" if path.parent.name == "es" else path.stem


def report(capsys, text: str) -> None:
    with capsys.disabled():
        print("\n" + text)


# ---------------------------------------------------------------------------------
# Paths 1 and 2: Run All with pauses, then Run All again (the Spanish edition), in
# one kernel per lesson


@pytest.mark.parametrize("path", LESSONS, ids=lesson_id)
def test_lesson_survives_five_minute_pauses(path, lesson_runs, capsys):
    run = paused_twice(path, lesson_runs, PAUSE_S).run
    report(
        capsys,
        f"{path.name}: Run All with pauses {run.pass_seconds(1):.1f} s, "
        f"again {run.pass_seconds(2):.1f} s (kernel {run.seconds:.1f} s)",
    )
    errors = run.errors(pass_no=1)
    assert not errors, (
        f"{path.name} fails in Run All, with the clock jumping {PAUSE_S:.0f} s "
        "before each cell (`make test-notebook NB=...` runs it without pauses: "
        "an error there too is a plain failure, one only here compares the clock "
        "across cells):\n" + "\n".join(errors)
    )


@pytest.mark.parametrize("path", LESSONS, ids=lesson_id)
def test_lesson_runs_twice_in_one_kernel(path, lesson_runs):
    run = paused_twice(path, lesson_runs, PAUSE_S).run
    errors = run.errors(pass_no=2)
    first = run.errors(pass_no=1)
    again = f", run as its Spanish edition es/{path.name}" if spanish_twin(path) else ""
    assert not errors, (
        f"{path.name} fails on the second Run All in the same kernel{again}:\n"
        + "\n".join(errors)
        + (f"\n(the first pass failed too: {first})" if first else "")
    )


@pytest.mark.parametrize(
    "path", [p for p in LESSONS if spanish_twin(p)], ids=lambda p: f"es-{p.stem}"
)
def test_a_spanish_lesson_shows_spanish(path, lesson_runs):
    """What the Spanish edition printed and drew in its run (the second pass of its
    English twin's kernel) reads as Spanish: tests/spanish_outputs.py."""
    spanish = paused_twice(path, lesson_runs, PAUSE_S).spanish
    problem = notebook_verdict(f"es/{path.name}", spanish)
    assert problem is None, problem


# ---------------------------------------------------------------------------------
# Paths 3 and 4: the student edition answered wrongly on its core path (the optional
# parts skipped), then unsolved, in one kernel


@pytest.fixture(scope="module")
def student_edition(tmp_path_factory) -> dict[str, Path]:
    """The student edition of every graded lesson, made the way `make student` makes
    it (nbgrader generate_assignment in an nbgrader course)."""
    if not GRADED:
        pytest.skip("no lesson has graded exercises")
    course = grading.build_course(GRADED, tmp_path_factory.mktemp("student-course"))
    return {p.stem: p for p in grading.generate_student_edition(course)}


@pytest.mark.parametrize("path", GRADED, ids=lambda p: p.stem)
def test_student_edition_runs_unsolved_and_answered_wrongly(
    path, student_edition, capsys
):
    released = student_edition[path.stem]
    run, answers, _ = unsolved_path(released, then=core_path)
    report(
        capsys,
        f"{path.name}: answered wrongly on the core path "
        f"{run.pass_seconds(1):.1f} s, unsolved {run.pass_seconds(2):.1f} s "
        f"({answers} answers)",
    )
    assert answers == sum(
        grading.is_solution_cell(c) for c in nbformat.read(released, as_version=4).cells
    ), "a solution cell of the student edition has no stub to answer"
    problems = unsolved_path_problems(run)
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def spanish_student_edition(tmp_path_factory) -> dict[str, Path]:
    """The Spanish subset's student edition, in an nbgrader course of its own (the
    same lesson names as the English one: `make student EDITION=es`)."""
    if not ES_STUDENT_PATHS:
        pytest.skip("no Spanish edition generated")
    course = grading.build_course(
        ES_STUDENT_PATHS, tmp_path_factory.mktemp("student-course-es")
    )
    return {p.stem: p for p in grading.generate_student_edition(course)}


@pytest.mark.parametrize("path", ES_STUDENT_PATHS, ids=lesson_id)
def test_spanish_edition_runs_unsolved_and_wrong_with_spanish_hints(
    path, spanish_student_edition
):
    released = spanish_student_edition[path.stem]
    run, _, wrong = unsolved_path(released, then=core_path)
    problems = unsolved_path_problems(run)
    assert not problems, "\n".join(problems)
    printed = "\n".join(
        o.get("text", "") + o.get("evalue", "")
        for c in wrong.cells
        if grading.is_test_cell(c)
        for o in c.get("outputs", [])
    )
    # the checks' tables speak Spanish: their verdict and hint labels
    failed = ("casos fallaron", "el caso falló", "falló 1 de")
    assert any(verdict in printed for verdict in failed), printed[-2000:]
    assert "pista" in printed.lower(), printed[-2000:]


def core_path(nb):
    """`nb` with its optional parts (the cells under an "(optional)" heading) turned
    into raw cells: not run, and every other cell keeps its index for the reports."""
    skipped = optional_cells(nb)
    core = nbformat.from_dict(dict(nb))
    core.cells = [
        nbformat.v4.new_raw_cell(c.source) if i in skipped else c
        for i, c in enumerate(nb.cells)
    ]
    return core


WITH_OPTIONAL = [p for p in LESSONS if optional_cells(nbformat.read(p, 4))]


def test_every_lesson_with_optional_parts_runs_its_core_path_above():
    """The core path runs as the second pass of the student edition's run (paths 3
    and 4), so a lesson with optional parts and no graded cell would be left out."""
    assert [p for p in WITH_OPTIONAL if p not in GRADED] == []


# ---------------------------------------------------------------------------------
# Each test can fail: fixture notebooks with the defect it looks for


def notebook(*sources: str, graded: dict[int, str] | None = None):
    """A notebook of code cells; `graded` marks cells as nbgrader solution or test."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    for index, kind in (graded or {}).items():
        nb.cells[index].metadata["nbgrader"] = {
            "grade": kind == "test",
            "solution": kind == "solution",
            "locked": False,
            "grade_id": f"g{index}",
            "schema_version": 3,
            **({"points": 1} if kind == "test" else {}),
        }
    return nb


def test_pauses_catch_a_wall_time_assert_across_cells(tmp_path):
    nb = notebook(
        "import time\nfrom time import perf_counter\n"
        "start, start_from_name = time.perf_counter(), perf_counter()",
        # times its own work: a pause before the cell must not show up in it
        "t0 = time.monotonic()\nsum(range(10**5))\nassert time.monotonic() - t0 < 30",
        "assert time.perf_counter() - start < 60, 'the lesson took over a minute'",
        "assert perf_counter() - start_from_name < 60  # imported by name",
        "assert time.time_ns() > 0",
    )
    start = time.perf_counter()
    plain = run_in_one_kernel([nb], tmp_path)
    paused = run_in_one_kernel([nb], tmp_path, pause_s=PAUSE_S)
    assert plain.errors() == []
    failed = {c.index for c in paused.cells if c.error}
    assert failed == {2, 3}, paused.errors()
    assert "the lesson took over a minute" in paused.cells[2].error
    assert time.perf_counter() - start < 60  # simulated: nothing waited 5 minutes


def test_second_run_catches_state_left_by_the_first(tmp_path):
    nb = notebook(
        "import decimal\nassert decimal.getcontext().prec == 28  # the default",
        "decimal.getcontext().prec = 6  # a later cell changes global state",
    )
    run = run_in_one_kernel([nb, nb], tmp_path)
    assert run.errors(pass_no=1) == []
    assert [c.index for c in run.cells if c.error] == [0]
    assert run.cells[2].pass_no == 2 and "AssertionError" in run.cells[2].error


def test_unsolved_path_catches_cells_that_use_the_students_function(tmp_path):
    stub = "    # YOUR CODE HERE\n    raise NotImplementedError()"
    edition = notebook(
        f"def double(x):\n{stub}",  # 0 solution
        "assert double(2) == 4",  # 1 test
        "print(double(5))",  # 2 uses it
        "try:\n    y = double(2)\nexcept NotImplementedError:\n    y = 4\n"
        "assert y == 4",  # 3 only if wrong
        f"def half(x):\n{stub}",  # 4 solution
        "assert True  # grades nothing",  # 5 test
        "print('a later cell of its own')",  # 6 fine
        graded={0: "solution", 1: "test", 4: "solution", 5: "test"},
    )
    released = tmp_path / "99_fixture.ipynb"
    nbformat.write(edition, released)
    run, answers, _ = unsolved_path(released)
    assert answers == 2
    found = unsolved_path_problems(run)
    text = "\n".join(found)
    assert len(found) == 4, text
    uses = "cell 2 ('print(double(5))'), exercises"
    assert f"{uses} unsolved: NotImplementedError" in text
    assert f"{uses} answered wrongly" not in text  # print(None) runs
    assert "cell 3 ('try:'), exercises answered wrongly: AssertionError" in text
    assert "cell 3 ('try:'), exercises unsolved" not in text
    assert text.count("cell 5 ('assert True  # grades nothing')") == 2
    assert "cell 6" not in text and "cell 1 " not in text


def test_the_unsolved_pass_runs_from_the_first_cell_that_differs(tmp_path):
    """The second pass starts where the untouched edition first differs from the
    first pass's notebook: there an optional part the first pass skipped, then the
    exercise; the cell above both ran once, in the first pass, in this kernel."""
    stub = "    # YOUR CODE HERE\n    raise NotImplementedError()"
    edition = notebook(
        "runs = globals().get('runs', 0) + 1",  # 0 the same in both passes
        "## A detour (optional)",
        "detour = 1",  # 1, 2
        "## Back on the core path",  # 3
        f"def double(x):\n{stub}",  # 4 solution
        "assert double(2) == 4",  # 5 test
        "assert runs == 1",  # 6 the top cell ran once
        graded={4: "solution", 5: "test"},
    )
    for i in (1, 3):
        edition.cells[i] = nbformat.v4.new_markdown_cell(edition.cells[i].source)
    released = tmp_path / "99_fixture.ipynb"
    nbformat.write(edition, released)
    run, _, _ = unsolved_path(released, then=core_path)
    assert [c.index for c in run.cells if c.pass_no == 1] == [0, 4, 5, 6]
    assert [c.index for c in run.cells if c.pass_no == 2] == [2, 4, 5, 6]
    assert unsolved_path_problems(run) == []
    run, _, _ = unsolved_path(released)  # nothing skipped: from the exercise on
    assert [c.index for c in run.cells if c.pass_no == 2] == [4, 5, 6]
    assert first_difference(edition, edition) == len(edition.cells)


def test_core_pass_catches_what_needs_an_optional_part_and_a_crashing_check(tmp_path):
    """The first pass of paths 3 and 4: answered wrongly, the optional parts
    skipped, in a fresh kernel (the unsolved pass after it runs them)."""
    stub = "    # YOUR CODE HERE\n    raise NotImplementedError()"
    edition = notebook(
        f"def double(x):\n{stub}",  # 0 solution
        "assert double(2) == 4",  # 1 test: fine
        "## A detour (optional)",
        "scale = 2",  # 2, 3
        "## Back on the core path",  # 4
        "print(scale)",  # 5 needs 3
        "assert double(2) == 2 * scale",  # 6 test needs 3
        "assert len(double(2)) == 1",  # 7 test crashes
        graded={0: "solution", 1: "test", 6: "test", 7: "test"},
    )
    for i in (2, 4):
        edition.cells[i] = nbformat.v4.new_markdown_cell(edition.cells[i].source)
    released = tmp_path / "99_fixture.ipynb"
    nbformat.write(edition, released)
    run, _, executed = unsolved_path(released, then=core_path)
    text = "\n".join(unsolved_path_problems(run))
    assert executed.cells[3].cell_type == "raw" and "outputs" not in executed.cells[3]
    assert "cell 5 ('print(scale)'), exercises answered wrongly: NameError" in text
    assert (
        "cell 6 ('assert double(2) == 2 * scale'), exercises answered wrongly: "
        "NameError" in text
    )
    assert (
        "cell 7 ('assert len(double(2)) == 1'), exercises answered wrongly: "
        "TypeError" in text
    )
    assert "unsolved" not in text and "cell 1 " not in text, text
    assert len(unsolved_path_problems(run)) == 3, text


def test_core_path_catches_a_cell_that_needs_an_optional_part(tmp_path):
    nb = notebook(
        "x = 1",
        "## A detour (optional)",
        "y = 2",
        "### Inside the detour",
        "z = 3",
        "## Back on the core path",
        "print(x + y)",
    )
    for i in (1, 3, 5):
        nb.cells[i] = nbformat.v4.new_markdown_cell(nb.cells[i].source)
    core = core_path(nb)
    assert [c.source for c in core.cells if c.cell_type == "code"] == [
        "x = 1",
        "print(x + y)",
    ]
    run = run_in_one_kernel([core], tmp_path)
    assert run_in_one_kernel([nb], tmp_path).errors() == []
    assert len(run.errors()) == 1 and "NameError" in run.errors()[0]
