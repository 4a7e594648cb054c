"""The gradebook an instructor can post: one row per student and handed-in lesson,
each exercise's score, the core and the optional points apart, when it was handed
in, and the review flags with their reasons (what ``grades --json`` and
``grades --csv FILE`` write).

An exercise is a graded test cell; it is optional when a heading it sits under says
so ("## Exercise (optional): ...", or "(opcional)" in the Spanish edition, at any
level above it). Lessons without points (``00_welcome``) and lessons nobody handed
in have no row: nbgrader's own ``export`` lists every lesson for every student, the
unassigned ones as 0, the same as a blank hand-in.

Example::

    python -m amp_lessons.grading grades --csv grades.csv
    # student,lesson,score,max_score,core_score,core_max,optional_score,...
    # alice,03_loss_scaling,3,6,0,3,3,3,2026-12-06T10:00:00,,0,3
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from amp_lessons.tooling.grading import review
from amp_lessons.tooling.grading.course import (
    COURSE_DIR,
    COURSE_ID,
    is_test_cell,
    nbgrader_meta,
)

HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
OPTIONAL = re.compile(r"\((optional|opcional)\)", re.IGNORECASE)
COLUMNS = (
    "student",
    "lesson",
    "score",
    "max_score",
    "core_score",
    "core_max",
    "optional_score",
    "optional_max",
    "submitted_at",
    "flags",
)


@dataclass(frozen=True)
class Exercise:
    """One graded test cell of a lesson and the heading it sits under."""

    grade_id: str
    title: str
    points: float
    optional: bool


def exercises(nb) -> list[Exercise]:
    """The graded test cells of a lesson notebook, in order, each with the nearest
    heading above it and whether a heading above it says "(optional)".

    Example: lesson 03 gives ``03_update_rule_test`` (core, 3 points) and
    ``03_unscale_test`` (optional, 3 points).
    """
    stack: list[tuple[int, str]] = []  # (level, text) of the headings above
    found = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = HEADING.match(line.strip())
                if match:
                    level = len(match.group(1))
                    stack = [h for h in stack if h[0] < level]
                    stack.append((level, match.group(2).strip()))
        elif is_test_cell(cell):
            meta = nbgrader_meta(cell)
            found.append(
                Exercise(
                    meta.get("grade_id", ""),
                    stack[-1][1] if stack else "",
                    float(meta.get("points") or 0),
                    any(OPTIONAL.search(text) for _, text in stack),
                )
            )
    return found


def lesson_exercises(course_dir: Path, lesson: str) -> list[Exercise]:
    """`exercises` of the lesson's source notebook in the course (none if absent)."""
    path = Path(course_dir) / "source" / lesson / f"{lesson}.ipynb"
    return exercises(nbformat.read(path, as_version=4)) if path.exists() else []


def _times(course_dir: Path) -> dict[tuple[str, str], str]:
    """(student, lesson) -> when it was handed in (ISO, UTC), from the gradebook."""
    from nbgrader.api import Gradebook

    db = Path(course_dir) / "gradebook.db"
    if not db.exists():
        return {}
    times = {}
    with Gradebook(f"sqlite:///{db.resolve()}", COURSE_ID) as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                stamp = submission.timestamp
                key = (submission.student.id, assignment.name)
                times[key] = stamp.isoformat(timespec="seconds") if stamp else ""
    return times


def rows(course_dir: Path = COURSE_DIR) -> list[dict]:
    """One dict per student and handed-in lesson with points (see module doc):
    ``student, lesson, score, max_score, flags`` (the contract of ``grades --json``)
    and ``core_score, core_max, optional_score, optional_max, submitted_at`` and
    ``exercises`` ({grade_id: {"title", "score", "max_score", "optional"}})."""
    from amp_lessons.tooling.grading.course import read_scores

    times, cache, out = _times(course_dir), {}, []
    for s in read_scores(course_dir):
        if s.max_score <= 0:
            continue  # a lesson without points, e.g. 00_welcome
        if s.notebook not in cache:
            cache[s.notebook] = lesson_exercises(course_dir, s.notebook)
        graded = {}
        for ex in cache[s.notebook]:
            score, most = s.cells.get(ex.grade_id, (0.0, ex.points))
            graded[ex.grade_id] = {
                "title": ex.title,
                "score": score,
                "max_score": most,
                "optional": ex.optional,
            }
        parts = {
            kind: [g for g in graded.values() if g["optional"] is (kind == "optional")]
            for kind in ("core", "optional")
        }
        row = {
            "student": s.student,
            "lesson": s.notebook,
            "score": s.score,
            "max_score": s.max_score,
            "flags": review.read_review(course_dir, s.student, s.notebook),
        }
        for kind, part in parts.items():
            row[f"{kind}_score"] = sum(g["score"] for g in part)
            row[f"{kind}_max"] = sum(g["max_score"] for g in part)
        row["submitted_at"] = times.get((s.student, s.notebook), "")
        row["exercises"] = graded
        out.append(row)
    return out


def _exercise_column(grade_id: str, graded: dict) -> str:
    kind = "optional" if graded["optional"] else "core"
    return f"{grade_id.removesuffix('_test')} ({kind}, /{graded['max_score']:g})"


def write_csv(table: list[dict], path: Path) -> Path:
    """``rows`` as a CSV: the `COLUMNS`, then one column per exercise (empty on
    the rows of other lessons); flags joined with " | "."""
    exercise_columns: dict[str, None] = {}
    for row in table:
        for grade_id, graded in row["exercises"].items():
            exercise_columns[_exercise_column(grade_id, graded)] = None
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*COLUMNS, *exercise_columns])
        for row in table:
            by_column = {
                _exercise_column(g, graded): f"{graded['score']:g}"
                for g, graded in row["exercises"].items()
            }
            writer.writerow(
                [
                    *(
                        " | ".join(row[c])
                        if c == "flags"
                        else f"{row[c]:g}"
                        if isinstance(row[c], float)
                        else row[c]
                        for c in COLUMNS
                    ),
                    *(by_column.get(c, "") for c in exercise_columns),
                ]
            )
    return path
