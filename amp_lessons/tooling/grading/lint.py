"""Notebook metadata lint: nbgrader cells as nbgrader and this course need them, a
student edition that leaks no solution, and slideshow types on every cell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import nbformat

from amp_lessons.tooling.grading.course import (
    is_test_cell,
    locate,
    nbgrader_meta,
)
from amp_lessons.tooling.grading.testcells import lint_test_cells

SOLUTION_MARKERS = ("BEGIN SOLUTION", "END SOLUTION")  # nbgrader matches substrings
HIDDEN_MARKERS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
GRADE_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")  # what nbgrader accepts
SLIDE_TYPES = ("slide", "subslide", "fragment", "-", "skip", "notes")


def _marker_problems(text: str, markers: tuple[str, str], where: str) -> list[str]:
    """BEGIN/END pairs in order, not nested, none left open."""
    begin, end = markers
    depth, problems = 0, []
    for line in text.splitlines():
        if begin in line:
            if depth:
                problems.append(f"{where}: nested {begin!r}")
            depth += 1
        elif end in line:
            if not depth:
                problems.append(f"{where}: {end!r} without {begin!r}")
            depth = max(0, depth - 1)
    if depth:
        problems.append(f"{where}: {begin!r} without {end!r}")
    return problems


def _has(text: str, markers: tuple[str, str]) -> bool:
    return any(m in text for m in markers)


def lint_notebook(path: Path) -> list[str]:
    """nbgrader metadata problems of one source notebook (empty list: fine).

    Checks what nbgrader needs and what this course adds: schema_version 3, a valid
    grade_id, points on every graded cell, test cells locked, code solution cells with
    matched BEGIN/END SOLUTION markers (without them nbgrader replaces the whole cell,
    function header included), hidden tests only in test cells with matched markers,
    no solution cell that is also graded (that needs a human grader), and test cells
    that call a check in the one tamper-evident form (``testcells``).
    """
    nb = nbformat.read(path, as_version=4)
    problems = []
    for i, cell in enumerate(nb.cells):
        where, meta, text = locate(path, i, cell), nbgrader_meta(cell), cell.source
        if meta is None:
            if _has(text, SOLUTION_MARKERS) or _has(text, HIDDEN_MARKERS):
                problems.append(
                    f"{where}: nbgrader markers in a cell without nbgrader "
                    "metadata (they would reach students)"
                )
            continue
        if meta.get("schema_version") != 3:
            problems.append(
                f"{where}: schema_version {meta.get('schema_version')!r}, expected 3"
            )
        grade_id = meta.get("grade_id", "")
        if not GRADE_ID_PATTERN.match(str(grade_id)):
            problems.append(
                f"{where}: grade_id {grade_id!r} must be letters, digits, '_' or '-'"
            )
        if meta.get("grade"):
            points = meta.get("points")
            if not isinstance(points, (int, float)) or points <= 0:
                problems.append(
                    f"{where}: graded cell needs points > 0, has {points!r}"
                )
        if meta.get("grade") and meta.get("solution"):
            problems.append(
                f"{where}: a graded solution cell needs manual grading; "
                "grade with a separate locked test cell"
            )
        if is_test_cell(cell) and not meta.get("locked"):
            problems.append(f"{where}: graded test cell must be locked")
        solution_ok = meta.get("solution") and cell.cell_type == "code"
        if solution_ok and not _has(text, SOLUTION_MARKERS):
            problems.append(
                f"{where}: solution cell without ### BEGIN/END SOLUTION: "
                "nbgrader would replace the whole cell"
            )
        if _has(text, SOLUTION_MARKERS) and not meta.get("solution"):
            problems.append(f"{where}: solution markers outside a solution cell")
        if _has(text, HIDDEN_MARKERS) and not is_test_cell(cell):
            problems.append(f"{where}: hidden-test markers outside a graded test cell")
        problems += _marker_problems(text, SOLUTION_MARKERS, where)
        problems += _marker_problems(text, HIDDEN_MARKERS, where)
    return problems + lint_test_cells(path)


def lint_course(notebooks: Sequence[Path]) -> list[str]:
    """``lint_notebook`` on each, plus grade_ids unique across the whole course."""
    problems, seen = [], {}
    for path in notebooks:
        problems += lint_notebook(path)
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            meta = nbgrader_meta(cell)
            if not meta or "grade_id" not in meta:
                continue
            grade_id = meta["grade_id"]
            if grade_id in seen:
                problems.append(
                    f"grade_id {grade_id!r} in {Path(path).name} is "
                    f"already used in {seen[grade_id]}; make it unique "
                    "in the course"
                )
            seen[grade_id] = Path(path).name
    return problems


def _region_lines(text: str, markers: tuple[str, str]) -> tuple[set[str], set[str]]:
    """(lines inside marker regions, lines outside), stripped, blank lines dropped."""
    begin, end = markers
    inside, outside, depth = set(), set(), 0
    for line in text.splitlines():
        if begin in line:
            depth += 1
        elif end in line:
            depth = max(0, depth - 1)
        elif line.strip():
            (inside if depth else outside).add(line.strip())
    return inside, outside


def _secret_lines(cell) -> set[str]:
    """Lines only found inside a cell's solution or hidden-test regions."""
    secret = set()
    for markers in (SOLUTION_MARKERS, HIDDEN_MARKERS):
        inside, outside = _region_lines(cell.source, markers)
        secret |= inside - outside
    return secret


# A solution line this long reaching any other cell is a leak, not a coincidence
# like a lone "}" or "return x".
LEAK_MIN_CHARS = 20


def lint_student_edition(source: Path, student: Path) -> list[str]:
    """Problems of a released notebook against its source (empty list: fine).

    No marker text, no line of a solution or hidden test in the released version of
    its cell (nor any long such line anywhere), no outputs, and the same graded cells
    as the source.
    """
    src = nbformat.read(source, as_version=4)
    rel = nbformat.read(student, as_version=4)
    problems, name = [], Path(student).name
    by_id = {}
    for cell in src.cells:
        grade_id = (nbgrader_meta(cell) or {}).get("grade_id")
        if grade_id:
            by_id[grade_id] = _secret_lines(cell)
    everywhere = {
        line
        for lines in by_id.values()
        for line in lines
        if len(line) >= LEAK_MIN_CHARS and re.search("[A-Za-z]", line)
    }
    for i, cell in enumerate(rel.cells):
        where = f"{name} cell {i}"
        if _has(cell.source, SOLUTION_MARKERS) or _has(cell.source, HIDDEN_MARKERS):
            problems.append(
                f"{where}: nbgrader marker text left in the student edition"
            )
        own = by_id.get((nbgrader_meta(cell) or {}).get("grade_id"), set())
        leaked = [line for line in cell.source.splitlines() if line.strip() in own]
        leaked += [line for line in everywhere if line in cell.source]
        leaked = list(dict.fromkeys(s.strip() for s in leaked))
        if leaked:
            problems.append(
                f"{where}: solution or hidden-test text in the student "
                f"edition: {leaked[:3]}"
            )
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count):
            problems.append(f"{where}: outputs left in the student edition")
    ids = [
        [
            (nbgrader_meta(c) or {}).get("grade_id")
            for c in nb.cells
            if (nbgrader_meta(c) or {}).get("grade")
        ]
        for nb in (src, rel)
    ]
    if ids[0] != ids[1]:
        problems.append(
            f"{name}: graded cells {ids[1]} differ from the source's {ids[0]}"
        )
    return problems


def lint_slides(path: Path) -> list[str]:
    """Slideshow metadata problems: every cell typed, the first one a "slide".

    Example: a notebook whose first cell is a "fragment" gets one problem.
    """
    nb = nbformat.read(path, as_version=4)
    problems = []
    for i, cell in enumerate(nb.cells):
        kind = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
        if kind not in SLIDE_TYPES:
            problems.append(
                f"{locate(path, i, cell)}: slideshow.slide_type {kind!r} "
                f"not in {SLIDE_TYPES}"
            )
        elif i == 0 and kind != "slide":
            problems.append(
                f"{locate(path, i, cell)}: the first cell must be a "
                f"'slide', not {kind!r}"
            )
    if not nb.cells:
        problems.append(f"{Path(path).name}: no cells")
    return problems
