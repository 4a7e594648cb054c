"""Where the course's files are, for every test: the repository, its folders, and the
lessons of each edition in teaching order (a test imports these instead of working
them out from ``__file__`` itself)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "amp_lessons"
NOTEBOOKS_DIR = ROOT / "notebooks"
SPANISH_DIR = NOTEBOOKS_DIR / "es"
RESULTS_DIR = NOTEBOOKS_DIR / "results"  # the recorded GPU runs (bench_*.json, ...)


def lessons(folder: Path) -> list[Path]:
    """The lesson notebooks in ``folder``, in teaching order (their names sort so)."""
    return sorted(p for p in folder.glob("*.ipynb") if p.is_file())


LESSONS = lessons(NOTEBOOKS_DIR)  # the English edition
ES_LESSONS = lessons(SPANISH_DIR)  # the Spanish edition, generated from the English

# The entry lesson (COURSE.md's round 3): a 10-minute door over the core path's ground,
# taken instead of it or before it.
ENTRY = NOTEBOOKS_DIR / "00_amp_in_10_minutes.ipynb"
# 00-08 (COURSE.md), the entry lesson aside: the four hours' path.
CORE_COURSE = [p for p in LESSONS if int(p.name[:2]) <= 8 and p != ENTRY]

# The Spanish edition's student paths with exercises unsolved and wrong
# (tests/test_student_paths.py) run on a subset, to keep CI within its budget: the
# entry lesson, where a Spanish reader of the seed starts, and lesson 02; both graded.
# Every Spanish lesson runs whole, as the second Run All of its English twin's kernel.
ES_STUDENT_PATHS = [
    p
    for p in (
        SPANISH_DIR / f"{name}.ipynb"
        for name in ("00_amp_in_10_minutes", "02_underflow")
    )
    if p.exists()
]
