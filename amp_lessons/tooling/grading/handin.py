"""Filing what students hand back, under whatever name it arrived with: what
``python -m amp_lessons.grading submit STUDENT FILES...`` runs.

A file goes to ``submitted/<student>/<lesson>/<lesson>.ipynb`` with a
``timestamp.txt`` and a ``submission_secret.txt``, as nbgrader's exchange writes them
(the export's time column and late penalties read the first, ``release_feedback``
both). The lesson is found in the file's name whatever was added
to it: JupyterLab's ``03_loss_scaling-Copy1``, a browser's ``03_loss_scaling (1)``, an
LMS's ``03_loss_scaling - Alice Smith`` or ``alice_123_03_loss_scaling``, any case.
A student id is a folder name: one with spaces or accents becomes a safe id
(``Alice Smith`` -> ``Alice_Smith``, said in the result). An earlier hand-in of the
same lesson is kept in ``history/<student>/<lesson>/`` under its time, not
overwritten. Every refusal is one line (ValueError or RuntimeError).

Example::

    filed = file_hand_ins("Alice Smith", [Path("03_loss_scaling - Alice Smith.ipynb")])
    filed[0].dest  # build/course/submitted/Alice_Smith/03_loss_scaling/...
"""

from __future__ import annotations

import datetime
import filecmp
import re
import secrets
import shutil
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from amp_lessons.tooling.grading.course import COURSE_DIR

SAFE_ID = re.compile(r"[A-Za-z0-9_.@-]+")
# nbgrader's own timestamp form (nbgrader.utils.parse_utc reads it)
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"


@dataclass(frozen=True)
class Filed:
    """One hand-in filed: where it went, and what was done on the way."""

    source: Path
    dest: Path
    student: str
    lesson: str
    kept: Path | None = None  # the earlier hand-in, moved into history/


def safe_student_id(student_id: str) -> str:
    """``student_id`` as a folder name: accents dropped, every run of other
    characters one ``_``. Raises ValueError for a path or an id with nothing left.

    Example: ``safe_student_id("José Núñez") == "Jose_Nunez"``.
    """
    if (
        not student_id
        or student_id.strip() in {"", ".", ".."}
        or any(sep in student_id for sep in "/\\")
    ):
        raise ValueError(
            f"student id {student_id!r}: not a name (it becomes a folder name; "
            "use letters, digits, '_', '-', '.', '@')"
        )
    plain = unicodedata.normalize("NFKD", student_id.strip())
    plain = "".join(ch for ch in plain if not unicodedata.combining(ch))
    safe = re.sub(r"[^A-Za-z0-9_.@-]+", "_", plain).strip("_.")
    if not safe:
        raise ValueError(
            f"student id {student_id!r}: nothing usable in it (use letters, "
            "digits, '_', '-', '.', '@')"
        )
    return safe


def _words(text: str) -> str:
    """Lower case, and every run of spaces, dashes or dots one ``_``."""
    return "_" + re.sub(r"[\s\-.()\[\]]+", "_", text.casefold()).strip("_") + "_"


def find_lesson(name: str, lessons: Iterable[str]) -> str:
    """The lesson a handed-in file is, from its name (see module doc).

    Raises ValueError (one line) when it is no lesson's, or when it names two.
    Example: ``find_lesson("03_Loss_Scaling-Copy1.ipynb", ["03_loss_scaling"])``
    is ``"03_loss_scaling"``.
    """
    path = Path(name)
    if path.suffix.casefold() != ".ipynb":
        raise ValueError(f"{path.name}: not a notebook (.ipynb)")
    stem = _words(path.stem)
    found = [lesson for lesson in lessons if _words(lesson) in stem]
    # 00_amp inside 00_amp_in_10_minutes: the longer name is the one meant
    found = [
        a for a in found if not any(a != b and _words(a) in _words(b) for b in found)
    ]
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(
            f"{path.name}: names {' and '.join(sorted(found))}; rename it to the "
            "lesson it is"
        )
    raise ValueError(
        f"{path.name}: not a lesson of this course; expected one of "
        f"{', '.join(sorted(lessons))} (.ipynb)"
    )


def _lessons(course_dir: Path) -> list[str]:
    source = Path(course_dir) / "source"
    lessons = (
        sorted(p.name for p in source.iterdir() if p.is_dir())
        if source.is_dir()
        else []
    )
    if not lessons:
        raise RuntimeError(f"no course in {course_dir}: run `make student` first")
    return lessons


def _keep_earlier(folder: Path, dest: Path, history: Path) -> Path:
    """Move the earlier hand-in (and its timestamp) into ``history`` under its time."""
    stamp_file = folder / "timestamp.txt"
    stamp = (
        stamp_file.read_text().strip()
        if stamp_file.exists()
        else datetime.datetime.fromtimestamp(
            dest.stat().st_mtime, datetime.UTC
        ).strftime(TIMESTAMP_FORMAT)
    )
    tag = re.sub(r"[^0-9]", "", stamp)[:14] or "earlier"
    history.mkdir(parents=True, exist_ok=True)
    kept = history / f"{tag}-{dest.name}"
    n = 1
    while kept.exists():
        n += 1
        kept = history / f"{tag}-{n}-{dest.name}"
    shutil.move(dest, kept)
    kept.with_suffix(".timestamp.txt").write_text(stamp)
    return kept


def submit(
    student_id: str, notebooks: Iterable[Path], course_dir: Path = COURSE_DIR
) -> list[Path]:
    """File a student's returned notebooks (`file_hand_ins`, handed in now); return
    where each went.

    Example: ``submit("alice", [Path("~/Downloads/02_underflow (1).ipynb")])`` ->
    ``[build/course/submitted/alice/02_underflow/02_underflow.ipynb]``.
    """
    return [filed.dest for filed in file_hand_ins(student_id, notebooks, course_dir)]


def file_hand_ins(
    student_id: str,
    notebooks: Iterable[Path],
    course_dir: Path = COURSE_DIR,
    at: datetime.datetime | None = None,
) -> list[Filed]:
    """File a student's returned notebooks where ``nbgrader autograde`` looks, handed
    in ``at`` (default: now), and say what was done with each (see module doc).
    Every file is checked before any is filed.
    """
    student = safe_student_id(student_id)
    lessons = _lessons(course_dir)
    paths = [Path(p) for p in notebooks]
    plan = []
    for path in paths:
        lesson = find_lesson(path.name, lessons)
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
        if any(lesson == seen for _, seen in plan):
            raise ValueError(f"{path.name}: a second file for {lesson}; hand in one")
        plan.append((path, lesson))
    at = at or datetime.datetime.now(datetime.UTC)
    stamp = at.astimezone(datetime.UTC).strftime(TIMESTAMP_FORMAT)
    filed = []
    for path, lesson in plan:
        folder = Path(course_dir) / "submitted" / student / lesson
        dest = folder / f"{lesson}.ipynb"
        kept = None
        if dest.exists() and filecmp.cmp(dest, path, shallow=False):
            filed.append(Filed(path, dest, student, lesson))  # the same file again
            continue
        if dest.exists():
            history = Path(course_dir) / "history" / student / lesson
            kept = _keep_earlier(folder, dest, history)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        (folder / "timestamp.txt").write_text(stamp)
        # as nbgrader's exchange writes it: release_feedback needs one for each
        # student, or it stops at the first hand-in filed here
        (folder / "submission_secret.txt").write_text(secrets.token_hex(64))
        filed.append(Filed(path, dest, student, lesson, kept))
    return filed
