"""The course's lessons in reading order, and each one's graded exercises, read from
the notebooks themselves (nothing typed in twice).

The order is the README's lesson table (``00_amp_in_10_minutes``, ``00_welcome``,
``01_number_formats`` ... ``11_fp8``); a lesson's exercises are its graded test cells,
in notebook order, each named by its nbgrader ``grade_id`` and by the check it calls
(the title ``grade()`` reports, so a check run can be traced to its exercise). Both
editions share the file names, grade_ids and checks, so the English notebooks are read.

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


@functools.lru_cache(maxsize=4)
def lesson_order(notebooks_dir: Path = NOTEBOOKS_DIR, readme: Path = README):
    """The lessons' stems in the README's table order; a notebook the table does not
    list comes after, by name (and without a README, all by name, the same order)."""
    stems = sorted(p.stem for p in Path(notebooks_dir).glob("*.ipynb"))
    try:
        listed = README_ROW.findall(Path(readme).read_text(encoding="utf-8"))
    except OSError:
        listed = []
    ordered = [s for s in dict.fromkeys(listed) if s in stems]
    return tuple(ordered + [s for s in stems if s not in ordered])


@functools.lru_cache(maxsize=4)
def course_exercises(
    notebooks_dir: Path = NOTEBOOKS_DIR, readme: Path = README
) -> dict[str, tuple[Exercise, ...]]:
    """Each lesson's graded exercises, lessons in reading order (a lesson with none
    maps to an empty tuple). Read once per process."""
    return {
        stem: _exercises_of(Path(notebooks_dir) / f"{stem}.ipynb")
        for stem in lesson_order(Path(notebooks_dir), Path(readme))
    }


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
