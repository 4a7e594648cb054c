"""The course's lessons in reading order, and each one's graded exercises, read from
the notebooks themselves (nothing typed in twice).

The order is the README's lesson table (``00_amp_in_10_minutes``, ``00_welcome``,
``01_number_formats`` ... ``11_fp8``); a lesson's exercises are its graded test cells,
in notebook order, each named by its nbgrader ``grade_id`` and by the check it calls
(the title ``grade()`` reports, so a check run can be traced to its exercise). Both
editions share the file names, grade_ids and checks, so the English notebooks are read.

What they say is kept in the package, ``teaching/data/lessons.json``, written from
them by ``python -m amp_lessons.teaching.lessons`` (``--check``: exit 1 when it is not
current), because a kernel that records a check does not always see the course's
folder: the grading sandbox, Colab (which installs the package alone).

Example:
    >>> [e.function for e in course_exercises()["03_loss_scaling"]]
    ['update_scale', 'unscale_grads']
    >>> exercise_of("check_update_rule").grade_id
    '03_update_rule_test'
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = ROOT / "notebooks"
README = ROOT / "README.md"
# The index the package reads: the notebooks and the README, as `read_course` read
# them when it was written (tests/test_progress.py checks it is current)
INDEX = Path(__file__).resolve().parent / "data" / "lessons.json"
INDEX_SOURCE = (
    "written by python -m amp_lessons.teaching.lessons from README.md's lesson table "
    "and the notebooks' graded test cells; do not edit"
)
HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"
# a row of the README's lesson table: | 03 | `03_loss_scaling` | ...
README_ROW = re.compile(r"^\|\s*\d\d\s*\|\s*`(\w+)`", re.M)


@dataclass(frozen=True)
class Exercise:
    """A graded exercise: its lesson (the notebook's stem), its test cell's grade_id,
    the check's title and the function the learner writes."""

    lesson: str
    grade_id: str
    check: str
    function: str


def _check_calls(source: str) -> list[tuple[str, str]]:
    """(title, function) of each check a test cell calls in its visible part:
    ``_checks.check_quick_check(quick_check_answers, "why_scale")`` ->
    ``("check_quick_check[why_scale]", "quick_check_answers")``, the title as
    `grade` names it."""
    try:
        tree = ast.parse(source.split(HIDDEN_TESTS)[0])
    except SyntaxError:
        return []
    calls = []
    for node in ast.walk(tree):
        name = getattr(getattr(node, "func", None), "attr", None) or getattr(
            getattr(node, "func", None), "id", ""
        )
        if not (isinstance(node, ast.Call) and name.startswith("check_")):
            continue
        args = node.args
        function = args[0].id if args and isinstance(args[0], ast.Name) else name
        if len(args) > 1 and isinstance(args[1], ast.Constant):
            name, function = f"{name}[{args[1].value}]", f"{function}[{args[1].value}]"
        calls.append((name, function))
    return calls


def _exercises_of(path: Path) -> tuple[Exercise, ...]:
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return ()
    found = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or not meta.get("grade"):
            continue
        for check, function in _check_calls("".join(cell.get("source", ""))):
            found.append(Exercise(path.stem, meta["grade_id"], check, function))
    return tuple(found)


def _readme_order(notebooks_dir: Path, readme: Path) -> list[str]:
    """The lessons' stems in the README's table order; a notebook the table does not
    list comes after, by name (and without a README, all by name, the same order)."""
    stems = sorted(p.stem for p in Path(notebooks_dir).glob("*.ipynb"))
    try:
        listed = README_ROW.findall(Path(readme).read_text(encoding="utf-8"))
    except OSError:
        listed = []
    ordered = [s for s in dict.fromkeys(listed) if s in stems]
    return ordered + [s for s in stems if s not in ordered]


def read_course(
    notebooks_dir: Path = NOTEBOOKS_DIR, readme: Path = README
) -> dict[str, tuple[Exercise, ...]]:
    """Each lesson's graded exercises, read from the notebooks now, lessons in the
    README's order (a lesson with none maps to an empty tuple)."""
    return {
        stem: _exercises_of(Path(notebooks_dir) / f"{stem}.ipynb")
        for stem in _readme_order(Path(notebooks_dir), Path(readme))
    }


def write_index(path: Path = INDEX) -> None:
    """Write `read_course()` to the package's index (``python -m
    amp_lessons.teaching.lessons`` does, after a lesson's exercises change)."""
    lessons = [
        {
            "lesson": stem,
            "exercises": [
                {"grade_id": e.grade_id, "check": e.check, "function": e.function}
                for e in exercises
            ],
        }
        for stem, exercises in read_course().items()
    ]
    document = {"source": INDEX_SOURCE, "lessons": lessons}
    Path(path).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


@functools.lru_cache(maxsize=1)
def course_exercises() -> dict[str, tuple[Exercise, ...]]:
    """Each lesson's graded exercises, lessons in reading order, from the package's
    index (the same in a sandbox, in Colab and in a learner's copy, where the
    course's notebooks may not be at hand)."""
    lessons = json.loads(INDEX.read_text(encoding="utf-8"))["lessons"]
    return {
        item["lesson"]: tuple(Exercise(item["lesson"], **e) for e in item["exercises"])
        for item in lessons
    }


def lesson_order() -> tuple[str, ...]:
    """The lessons' stems in the README's order."""
    return tuple(course_exercises())


def exercise_of(check: str) -> Exercise | None:
    """The exercise a check title belongs to, None for an unknown title. Should two
    lessons use one check, the one the kernel's notebook is (Jupyter's
    ``JPY_SESSION_NAME``) wins."""
    matches = [
        e for found in course_exercises().values() for e in found if e.check == check
    ]
    session = Path(os.environ.get("JPY_SESSION_NAME", "")).stem
    mine = [e for e in matches if e.lesson == session]
    return (mine or matches or [None])[0]


def main(argv: list[str] | None = None) -> int:
    """``python -m amp_lessons.teaching.lessons [--check]``."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        current = read_course() == course_exercises()
        if not current:
            print(f"{INDEX} is not current: run python -m amp_lessons.teaching.lessons")
        return 0 if current else 1
    write_index()
    print(f"wrote {INDEX}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
