"""The nbgrader course: reading the lesson notebooks, laying them out as one assignment
each, and running nbgrader on them (student edition, submissions, scores). Grading
the submissions is ``autograder``'s.

Everything generated lands in git-ignored folders: ``build/course/`` (config,
gradebook, submissions) and ``student/`` (the edition to hand out).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from amp_lessons.teaching import progress, self_study
from amp_lessons.tooling.grading import nbgrader_main

# amp_lessons/tooling/grading/course.py -> the repository
ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS_DIR = ROOT / "notebooks"
BUILD_DIR = ROOT / "build"
COURSE_DIR = BUILD_DIR / "course"
SLIDES_DIR = BUILD_DIR / "slides"
STUDENT_DIR = ROOT / "student"

COURSE_ID = "amp_lessons"
CELL_TIMEOUT_S = 180  # the same per-cell limit nbval gets in pyproject.toml
# What nbgrader puts where a solution was; the student edition must still run past it.
# Its comment is in the lessons' language (the Spanish edition's notebooks say
# "language": "es" in their metadata); the line after it never changes: the checks
# tell an unsolved exercise by the NotImplementedError it raises.
CODE_STUBS = {
    "en": "# YOUR CODE HERE\nraise NotImplementedError()",
    "es": "# ESCRIBA SU CÓDIGO AQUÍ\nraise NotImplementedError()",
}
TEXT_STUBS = {"en": "YOUR ANSWER HERE", "es": "ESCRIBA SU RESPUESTA AQUÍ"}
CODE_STUB = CODE_STUBS["en"]
# nbgrader's Autograde.sanitize_preprocessors (0.9), OverwriteCells replaced by ours
# (quiet about test cells left as released: their hidden tests were cut)
SANITIZE_PREPROCESSORS = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "amp_lessons.tooling.grading.autograder.ReleasedCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# nbgrader's Autograde.autograde_preprocessors (0.9), Execute replaced by ours
AUTOGRADE_PREPROCESSORS = [
    "amp_lessons.tooling.grading.autograder.SandboxExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]


# ---------------------------------------------------------------------------------
# Reading notebooks


def course_notebooks(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The lesson notebooks in teaching order (checkpoints excluded).

    Example: ``[p.name for p in course_notebooks()][:1] == ["00_welcome.ipynb"]``.
    """
    return sorted(p for p in Path(notebooks_dir).glob("*.ipynb") if p.is_file())


def nbgrader_meta(cell) -> dict | None:
    """A cell's nbgrader metadata, or None for an ordinary cell."""
    return cell.get("metadata", {}).get("nbgrader")


def is_test_cell(cell) -> bool:
    """A graded test cell: nbgrader gives its points when it runs without error."""
    meta = nbgrader_meta(cell)
    return bool(meta and meta.get("grade") and not meta.get("solution"))


def is_solution_cell(cell) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta and meta.get("solution"))


def is_graded(path: Path) -> bool:
    """True when a notebook has nbgrader solution or graded cells.

    Example: ``is_graded(Path("notebooks/00_welcome.ipynb")) is False``.
    """
    nb = nbformat.read(path, as_version=4)
    return any(is_test_cell(c) or is_solution_cell(c) for c in nb.cells)


def graded_notebooks(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The course notebooks that carry graded exercises."""
    return [p for p in course_notebooks(notebooks_dir) if is_graded(p)]


def _first_line(cell) -> str:
    lines = cell.source.strip().splitlines()
    return lines[0][:60] if lines else "(empty)"


def locate(path: Path, index: int, cell) -> str:
    """``"02_underflow.ipynb cell 7 ('def f(x):')"``: where a problem is."""
    return f"{Path(path).name} cell {index} ({_first_line(cell)!r})"


# ---------------------------------------------------------------------------------
# The nbgrader course directory


def lessons_language(notebooks: Iterable[Path]) -> str:
    """The language the stubs of a course are written in: the one every notebook's
    metadata states ("language": "es" in the Spanish edition), else English.

    Example: ``lessons_language(Path("notebooks/es").glob("*.ipynb")) == "es"``.
    """
    stated = {
        nbformat.read(p, as_version=4).metadata.get("language", "en") for p in notebooks
    }
    return stated.pop() if len(stated) == 1 and stated <= CODE_STUBS.keys() else "en"


def nbgrader_config(course_dir: Path, language: str = "en") -> str:
    """The text of the generated ``nbgrader_config.py`` for ``course_dir``, whose
    stubs are in ``language`` (`CODE_STUBS`)."""
    return "\n".join(
        [
            "# Generated by `python -m amp_lessons.grading`: edit "
            "amp_lessons/tooling/grading/course.py,",
            "# not this file (it is rewritten on every `make student`).",
            "c = get_config()  # noqa: F821",
            f"c.CourseDirectory.root = {str(Path(course_dir).resolve())!r}",
            f"c.CourseDirectory.course_id = {COURSE_ID!r}",
            f"c.ClearSolutions.code_stub = {{'python': {ascii(CODE_STUBS[language])}}}",
            f"c.ClearSolutions.text_stub = {ascii(TEXT_STUBS[language])}",
            f"c.Execute.timeout = {CELL_TIMEOUT_S}",
            "# Autograde executes each notebook in a bubblewrap sandbox, in a",
            "# guarded kernel, then reviews it",
            "# (amp_lessons/tooling/grading/autograder.py): the same steps as",
            "# nbgrader's own list with Execute replaced.",
            f"c.Autograde.autograde_preprocessors = {AUTOGRADE_PREPROCESSORS!r}",
            "# ... and OverwriteCells replaced, so that a test cell as released (its",
            "# hidden tests cut) is not reported as changed.",
            f"c.Autograde.sanitize_preprocessors = {SANITIZE_PREPROCESSORS!r}",
            f"c.SandboxExecute.timeout = {CELL_TIMEOUT_S}",
            "",
        ]
    )


def _kernel_home(course_dir: Path) -> Path:
    """A Jupyter data dir whose ``python3`` kernel is this very Python.

    Put first on JUPYTER_PATH, it wins over any other ``python3`` kernelspec the
    instructor has (a conda base, a user-wide one): grading runs in the course's venv.
    """
    home = Path(course_dir) / ".jupyter"
    spec_dir = home / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return home


def jupyter_env(course_dir: Path) -> dict[str, str]:
    """The environment nbgrader and nbconvert run in: this venv first on PATH, its
    own ``python3`` kernel first on JUPYTER_PATH, and no progress recorded."""
    env = dict(os.environ)
    # nbgrader shells out to `alembic` when it creates a gradebook: this venv's one
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "")]
    )
    paths = [str(_kernel_home(course_dir)), env.get("JUPYTER_PATH", "")]
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in paths if p)
    # nbgrader imports the sandboxed Execute from this very package
    paths = [str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    # the checks these runs call (autograde, the site, the slides) are nobody's
    # progress: the learner's file stays theirs
    env[progress.ENV] = "off"
    env[self_study.ENV] = "0"  # graded here: the hidden tests are there
    return env


# Never copied into a course: gpu-check's executed/ copies are the solved lessons with
# their outputs, so a student edition carrying them would hand out every solution.
NOT_SHIPPED = (".ipynb_checkpoints", "executed")
# Folders beside the notebooks that no lesson reads, never copied into a course:
# notebooks/es/ is the Spanish edition, its lessons with their solutions (an English
# student edition carried them all), and notebooks/es/po/ the catalogues the Spanish
# lessons are generated from (the English text of every cell)
NOT_SUPPORT = ("es", "po")


def _support_dirs(notebooks_dir: Path) -> list[Path]:
    """Folders beside the notebooks that they read at run time (e.g. ``results/``)."""
    return sorted(
        p
        for p in Path(notebooks_dir).iterdir()
        if p.is_dir()
        and not p.name.startswith((".", "_"))
        and p.name not in NOT_SUPPORT
    )


def build_course(notebooks: Sequence[Path], course_dir: Path = COURSE_DIR) -> Path:
    """Lay out an nbgrader course: config and ``source/<lesson>/<lesson>.ipynb``.

    Each notebook becomes its own assignment, with copies of the folders beside it
    (``results/``) so it runs from there as it does from ``notebooks/``.

    Example: ``build_course([Path("notebooks/02_underflow.ipynb")], Path("build/c"))``
    writes ``build/c/nbgrader_config.py`` and
    ``build/c/source/02_underflow/02_underflow.ipynb``.
    """
    if not notebooks:
        raise ValueError("no notebooks given: pass the lesson .ipynb files to grade")
    course_dir = Path(course_dir)
    course_dir.mkdir(parents=True, exist_ok=True)
    (course_dir / "nbgrader_config.py").write_text(
        nbgrader_config(course_dir, lessons_language(notebooks)), encoding="utf-8"
    )
    source = course_dir / "source"
    shutil.rmtree(source, ignore_errors=True)  # a generated copy: never edited here
    for path in notebooks:
        path = Path(path)
        dest = source / path.stem
        dest.mkdir(parents=True)
        shutil.copy(path, dest / path.name)
        for folder in _support_dirs(path.parent):
            shutil.copytree(
                folder, dest / folder.name, ignore=shutil.ignore_patterns(*NOT_SHIPPED)
            )
    return course_dir


def run_nbgrader(course_dir: Path, *args: str) -> str:
    """Run ``nbgrader ARGS`` in ``course_dir`` with this Python; return its log.

    Raises RuntimeError with the end of nbgrader's log when it fails.
    """
    command = nbgrader_main.command(*args)
    result = subprocess.run(
        command,
        cwd=course_dir,
        env=jupyter_env(course_dir),
        capture_output=True,
        text=True,
    )
    log = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(
            f"`nbgrader {' '.join(args)}` failed in {course_dir} "
            f"(exit {result.returncode}):\n{log[-4000:]}"
        )
    return log


def generate_student_edition(course_dir: Path = COURSE_DIR) -> list[Path]:
    """``nbgrader generate_assignment`` for every lesson in the course.

    Solutions become the stub, hidden tests vanish, outputs are cleared; the result is
    ``release/<lesson>/<lesson>.ipynb``.
    """
    run_nbgrader(course_dir, "generate_assignment", "*", "--force")
    return sorted((Path(course_dir) / "release").glob("*/*.ipynb"))


def export_student_edition(
    course_dir: Path = COURSE_DIR, out_dir: Path = STUDENT_DIR
) -> list[Path]:
    """Copy the released lessons into one flat folder to hand out (notebooks + data).

    Example: after ``make student``, ``student/`` holds ``00_welcome.ipynb`` ...
    ``08_quick_check.ipynb`` and ``results/``, ready to zip.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for lesson in sorted(
        p for p in (Path(course_dir) / "release").iterdir() if p.is_dir()
    ):
        for item in lesson.iterdir():
            dest = out_dir / item.name
            # copyfile: the contents only, so each file gets the user's umask, not
            # the mode it had (a results file written 0600 would stay private)
            if item.is_dir():
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(item, dest, copy_function=shutil.copyfile)
            else:
                dest.unlink(missing_ok=True)  # a new file, so a new mode
                shutil.copyfile(item, dest)
                if item.suffix == ".ipynb":
                    written.append(dest)
    return sorted(written)


# What `student` puts beside the notebooks so that `python3 install.py` sets the folder
# up: this file's source -> its name there (the set-up it reuses, imported by name)
INSTALL_FILES = {"student_install.py": "install.py", "bootstrap.py": "_bootstrap.py"}
TORCH_PIN = "torch-version.txt"  # the torch the instructor grades on


def write_install_kit(out_dir: Path = STUDENT_DIR) -> Path:
    """Put the course's wheel, ``install.py`` (``tooling/student_install.py``) and
    the instructor's torch version into ``out_dir``: ``python3 install.py`` there
    makes ``.venv`` with torch's CPU build on a Linux machine without an NVIDIA GPU,
    and the torch version the instructor grades on. Returns the wheel.

    Example: after ``make student``, ``student/amp_lessons-0.1.0-py3-none-any.whl``.
    """
    import torch

    out_dir = Path(out_dir)
    for old in out_dir.glob("amp_lessons-*.whl"):
        old.unlink()
    # no build isolation: the venv's setuptools, so it builds offline too
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        + ["--disable-pip-version-check", "-q", "-w", str(out_dir), str(ROOT)],
        capture_output=True,
        text=True,
    )
    wheels = sorted(out_dir.glob("amp_lessons-*.whl"))
    if done.returncode != 0 or not wheels:
        raise RuntimeError(
            f"could not build the course's wheel: {(done.stdout + done.stderr)[-400:]}"
        )
    tooling = Path(__file__).resolve().parents[1]
    for name, dest in INSTALL_FILES.items():
        shutil.copyfile(tooling / name, out_dir / dest)
    (out_dir / TORCH_PIN).write_text(torch.__version__.split("+")[0] + "\n")
    return wheels[-1]


@dataclass(frozen=True)
class NotebookScore:
    """One student's score on one lesson, and per graded cell (grade_id -> points)."""

    student: str
    notebook: str
    score: float
    max_score: float
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)


def read_scores(course_dir: Path = COURSE_DIR) -> list[NotebookScore]:
    """Every autograded notebook in the gradebook, sorted by student then lesson."""
    from nbgrader.api import Gradebook

    db = Path(course_dir) / "gradebook.db"
    if not db.exists():
        return []
    scores = []
    with Gradebook(f"sqlite:///{db.resolve()}", COURSE_ID) as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                for nb in submission.notebooks:
                    cells = {
                        g.name: (float(g.score), float(g.max_score)) for g in nb.grades
                    }
                    scores.append(
                        NotebookScore(
                            submission.student.id,
                            nb.name,
                            float(nb.score),
                            float(nb.max_score),
                            cells,
                        )
                    )
    return sorted(scores, key=lambda s: (s.student, s.notebook))


def format_scores(
    scores: Sequence[NotebookScore], flags: dict[tuple[str, str], str] | None = None
) -> str:
    """The gradebook as a plain table (student, lesson, score / max), with a last
    column of what to review when ``flags`` maps (student, lesson) to it."""
    if not scores:
        return "(no graded submissions yet)"
    flags = flags or {}
    head = f"{'student':<16} {'lesson':<24} {'score':>12}"
    rows = [head + ("  review" if flags else "")]
    for s in scores:
        row = f"{s.student:<16} {s.notebook:<24} {s.score:>5g} / {s.max_score:g}"
        note = flags.get((s.student, s.notebook))
        rows.append(f"{row:<55}  {note}" if note else row)
    return "\n".join(rows)


def autograded_path(course_dir: Path, student_id: str, lesson: str) -> Path:
    return Path(course_dir) / "autograded" / student_id / lesson / f"{lesson}.ipynb"
