"""The course graded against itself: every solved lesson must earn full marks and its
untouched student edition zero, and both must run through without stray errors.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat

from amp_lessons.tooling.grading import review, sandbox
from amp_lessons.tooling.grading.autograder import autograde
from amp_lessons.tooling.grading.course import (
    BUILD_DIR,
    NotebookScore,
    autograded_path,
    build_course,
    generate_student_edition,
    is_graded,
    is_test_cell,
    locate,
    read_scores,
)
from amp_lessons.tooling.grading.handin import submit

REHEARSAL_MARK = ".amp-rehearsal"  # rehearse() only ever deletes folders carrying it
REFERENCE_STUDENT = "reference"  # submits the solved source notebooks
BLANK_STUDENT = "blank"  # submits the student edition untouched


def _errors(cell) -> list[str]:
    return [
        f"{o.get('ename')}: {o.get('evalue')}"
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def _stderr(cell) -> str:
    return "".join(
        o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stderr"
    )


def solved_run_problems(path: Path) -> list[str]:
    """Problems in an executed solved notebook: any error, any stderr in a test cell.

    nbgrader scores a test cell zero when it writes to stderr (a warning counts), so a
    test cell must be silent on the solution.
    """
    nb = nbformat.read(path, as_version=4)
    problems = []
    for i, cell in enumerate(nb.cells):
        for error in _errors(cell):
            problems.append(f"{locate(path, i, cell)} fails on the solution: {error}")
        if is_test_cell(cell) and _stderr(cell):
            problems.append(
                f"{locate(path, i, cell)} writes to stderr on the solution "
                f"(nbgrader scores it zero): {_stderr(cell)[:300]!r}"
            )
    return problems


def blank_run_problems(path: Path) -> list[str]:
    """Problems in an executed student edition: an error outside a graded test cell.

    A student must be able to run the lesson top to bottom: only test cells may fail
    before the exercise is solved.
    """
    nb = nbformat.read(path, as_version=4)
    problems = []
    for i, cell in enumerate(nb.cells):
        if is_test_cell(cell):
            continue
        for error in _errors(cell):
            problems.append(
                f"{locate(path, i, cell)} fails in the student edition "
                f"({error}); only graded test cells may fail there: later "
                "cells must not use the student's function"
            )
    return problems


@dataclass
class Rehearsal:
    """The result of grading the solved and the blank edition of each graded lesson."""

    scores: list[NotebookScore]
    problems: list[str]
    seconds: float
    course_dir: Path  # the scratch course: autograded/ holds every executed notebook
    sandboxed: bool = True


def _scratch_course(course_dir: Path | None) -> Path:
    """``course_dir`` emptied and marked as a rehearsal's (by default a new
    ``build/rehearsal-*``); a folder that holds anything but a rehearsal is refused."""
    if course_dir is None:
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        course_dir = Path(tempfile.mkdtemp(prefix="rehearsal-", dir=BUILD_DIR))
    course_dir = Path(course_dir)
    if course_dir.exists() and any(course_dir.iterdir()):
        if not (course_dir / REHEARSAL_MARK).exists():
            raise ValueError(
                f"{course_dir} is not empty and not a rehearsal folder; "
                "rehearse() wipes its folder: give it a new one"
            )
        shutil.rmtree(course_dir)
    course_dir.mkdir(parents=True, exist_ok=True)
    (course_dir / REHEARSAL_MARK).write_text("scratch course of amp_lessons.grading\n")
    return course_dir


def _submit_editions(
    notebooks: Sequence[Path], course_dir: Path, blank: bool
) -> list[Path]:
    """Build the course in ``course_dir`` and submit each graded lesson solved, and
    with ``blank`` its student edition untouched; return the graded notebooks."""
    build_course(notebooks, course_dir)
    generate_student_edition(course_dir)
    graded = [Path(p) for p in notebooks if is_graded(Path(p))]
    if not graded:
        raise ValueError("none of these notebooks has graded cells: nothing to grade")
    released = [course_dir / "release" / p.stem / p.name for p in graded]
    submit(REFERENCE_STUDENT, graded, course_dir)
    if blank:
        submit(BLANK_STUDENT, released, course_dir)
    return graded


def _score_problems(course_dir: Path, score: NotebookScore) -> list[str]:
    """What is wrong with one graded edition: a review flag, marks it should not have
    (short of full for the solved one, any for the blank one), or its executed
    notebook's problems."""
    where = f"{score.notebook} ({score.student})"
    problems = [
        f"{where}: flagged for review: {flag}"
        for flag in review.read_review(course_dir, score.student, score.notebook)
    ]
    if score.student == REFERENCE_STUDENT and score.score != score.max_score:
        lost = {k: v for k, v in score.cells.items() if v[0] != v[1]}
        problems.append(
            f"{where}: the solved notebook scores {score.score:g} / "
            f"{score.max_score:g}; cells short of full marks: {lost}"
        )
    if score.student == BLANK_STUDENT:
        scored = {k: v for k, v in score.cells.items() if v[0] != 0}
        if scored:
            problems.append(f"{where}: unsolved cells earn points: {scored}")
    if score.max_score == 0:
        problems.append(f"{where}: no points to earn (graded cells lost?)")
    run = autograded_path(course_dir, score.student, score.notebook)
    if score.student == REFERENCE_STUDENT:
        problems += solved_run_problems(run)
    else:
        problems += blank_run_problems(run)
    return problems


def _missing_from_gradebook(
    scores: list[NotebookScore], graded: list[Path], blank: bool
) -> list[str]:
    """A problem for each submitted edition the gradebook has no score for."""
    in_gradebook = {(s.student, s.notebook) for s in scores}
    return [
        f"{path.stem} ({student}): not in the gradebook"
        for path in graded
        for student in (REFERENCE_STUDENT, BLANK_STUDENT)[: 2 if blank else 1]
        if (student, path.stem) not in in_gradebook
    ]


def rehearse(
    notebooks: Sequence[Path],
    course_dir: Path | None = None,
    sandboxed: bool | None = None,
    blank: bool = True,
) -> Rehearsal:
    """Grade the course against itself: solved -> full marks, blank -> zero.

    Builds a fresh course from ``notebooks`` in ``course_dir``, generates the student
    edition of all of them, then submits each graded lesson twice: its source (solved)
    notebook as student ``reference`` and its student edition untouched as ``blank``.
    Both are autograded as students' work is (`autograde`); the gradebook, the
    review flags (neither edition may raise one) and the executed notebooks are then
    checked (see `solved_run_problems` and `blank_run_problems`). ``blank=False``
    grades the solved notebooks only (CI, whose student-path tests run every blank
    edition and whose attack test grades lesson 08's blank one). ``sandboxed``:
    by default in the bwrap sandbox when this machine has one, else without (the
    course's own notebooks are not untrusted code).

    ``course_dir`` must be new, empty or an earlier rehearsal (never a real course:
    it is wiped); by default a fresh ``build/rehearsal-*`` folder.

    Example: ``rehearse(course_notebooks()).problems == []`` on a healthy course.
    """
    start = time.perf_counter()
    course_dir = _scratch_course(course_dir)
    graded = _submit_editions(notebooks, course_dir, blank)
    if sandboxed is None:
        sandboxed = sandbox.sandbox_problem() is None
    autograde(course_dir, sandboxed=sandboxed)
    scores = read_scores(course_dir)
    problems = [p for score in scores for p in _score_problems(course_dir, score)]
    problems += _missing_from_gradebook(scores, graded, blank)
    return Rehearsal(
        scores, problems, time.perf_counter() - start, course_dir, sandboxed
    )
