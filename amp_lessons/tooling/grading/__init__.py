"""Teaching the course: student edition, autograding, metadata lint and offline slides.

One module per step: ``course`` (the nbgrader course and its runs; ``nbgrader_main``
starts nbgrader's command), ``handin`` (filing what students hand back),
``gradebook`` (the grades to post: per exercise, core and optional apart),
``feedback`` (each student's page, without hidden cases), ``autograder``
(each submission on its own, sandboxed, never stopping for a bad one), ``sandbox``
(bubblewrap around one notebook's run), ``runner`` and ``guard`` (what runs inside:
nbclient set up as nbgrader's executor, and the audited kernel), ``review`` (flags
and tamper checks), ``testcells`` (the one form of a graded test cell),
``rehearsal`` (the course graded against itself), ``lint`` (metadata and leaks),
``slides`` (offline decks; ``deck_layout`` stubs their exercises and cuts their
slides to the stage, from ``slide_heights``' estimates) and ``cli`` (the command
line). The names below are re-exported so
``from amp_lessons.tooling import grading`` reaches all of them; each
is imported when first used, so the sandbox's runner and guarded kernel, which start
as ``-m amp_lessons.tooling.grading.<module>`` for every submission, do not pay for
nbgrader, nbconvert and the slide tooling they never call.

The instructor's side of the notebooks, built on the real nbgrader. Each lesson
notebook is one nbgrader assignment named after it (``02_underflow``), so a class can
be given and graded one lesson at a time; ``grade_id``\\s are unique across the course.
Everything generated lands in git-ignored folders: ``build/course/`` (the nbgrader
course: config, gradebook, submissions), ``student/`` (the edition to hand out) and
``build/slides/`` (reveal.js decks that load nothing from the internet).

Example (what ``make student``, ``make grade`` and ``make slides`` run)::

    python -m amp_lessons.grading student            # -> student/02_underflow.ipynb ...
    python -m amp_lessons.grading submit alice ~/Downloads/alice/*.ipynb
    python -m amp_lessons.grading autograde          # sandboxed -> gradebook + table
    python -m amp_lessons.grading grades --json      # scores and review flags
    python -m amp_lessons.grading grades --csv g.csv # per exercise, to post
    python -m amp_lessons.grading feedback           # -> feedback/<student>/...
    python -m amp_lessons.grading rehearse           # solved = full marks, blank = 0
    python -m amp_lessons.grading lint               # nbgrader + slideshow metadata
    python -m amp_lessons.grading fix-tests          # test cells into the one form
    python -m amp_lessons.grading slides             # -> build/slides/*.slides.html

Not covered here: nbgrader's exchange (release/collect on a shared JupyterHub); its
own commands work unchanged in ``build/course`` (see notebooks/INSTRUCTORS.md).
"""

from __future__ import annotations

from importlib import import_module

# Each public name -> the module that defines it (imported on first use: PEP 562).
_HOMES = {
    "autograder": ("Outcome", "SandboxExecute", "autograde", "grade_one", "grades"),
    "cli": ("main",),
    "course": (
        "BUILD_DIR",
        "CELL_TIMEOUT_S",
        "CODE_STUB",
        "COURSE_DIR",
        "COURSE_ID",
        "NOTEBOOKS_DIR",
        "ROOT",
        "STUDENT_DIR",
        "NotebookScore",
        "autograded_path",
        "build_course",
        "course_notebooks",
        "export_student_edition",
        "format_scores",
        "generate_student_edition",
        "graded_notebooks",
        "is_graded",
        "is_solution_cell",
        "is_test_cell",
        "jupyter_env",
        "locate",
        "nbgrader_config",
        "nbgrader_meta",
        "read_scores",
        "run_nbgrader",
        "write_install_kit",
    ),
    "feedback": ("write_feedback",),
    "gradebook": ("exercises", "rows", "write_csv"),
    "handin": ("file_hand_ins", "find_lesson", "safe_student_id", "submit"),
    "lint": (
        "GRADE_ID_PATTERN",
        "HIDDEN_MARKERS",
        "LEAK_MIN_CHARS",
        "SLIDE_TYPES",
        "SOLUTION_MARKERS",
        "lint_course",
        "lint_notebook",
        "lint_slides",
        "lint_student_edition",
    ),
    "rehearsal": (
        "BLANK_STUDENT",
        "REFERENCE_STUDENT",
        "REHEARSAL_MARK",
        "Rehearsal",
        "blank_run_problems",
        "rehearse",
        "solved_run_problems",
    ),
    "review": ("scan_source",),
    "sandbox": ("run_notebook", "sandbox_problem"),
    "slides": (
        "SLIDES_DIR",
        "copy_slide_assets",
        "execute_notebooks",
        "export_deck",
        "export_slides",
        "offline_problems",
        "slides_exporter",
    ),
    "testcells": ("fix_test_cells", "lint_test_cells"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_HOME_OF)


def __getattr__(name: str):
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once is enough
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
