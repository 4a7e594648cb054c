"""The command line: ``python -m amp_lessons.grading [--course DIR] student|submit|
autograde|grades|feedback|rehearse|lint|fix-tests|slides`` (what ``make student``,
``make grade`` and ``make slides`` run). A refusal is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from amp_lessons.tooling.grading import (
    autograder,
    course,
    feedback,
    gradebook,
    handin,
    lint,
    rehearsal,
    review,
    slides,
    testcells,
)


def _report(problems: list[str], ok: str) -> int:
    for problem in problems:
        print("PROBLEM:", problem)
    print(ok if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def _table(course_dir: Path) -> str:
    # a lesson without points (00_welcome) has nothing to report
    scores = [s for s in course.read_scores(course_dir) if s.max_score > 0]
    flags = {
        (s.student, s.notebook): review.short(
            review.read_review(course_dir, s.student, s.notebook)
        )
        for s in scores
    }
    return course.format_scores(scores, {k: v for k, v in flags.items() if v})


def _when(text: str) -> datetime.datetime:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: write it as 2026-12-06 17:30"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


# ---- the arguments, grouped by what a command is for --------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m amp_lessons.grading",
        description="Student edition, autograding, lint and offline slides.",
    )
    parser.add_argument(
        "--notebooks",
        type=Path,
        default=course.NOTEBOOKS_DIR,
        help="the lesson notebooks (default: notebooks/)",
    )
    parser.add_argument(
        "--course",
        type=Path,
        default=course.COURSE_DIR,
        help="the nbgrader course folder (default: build/course)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    # added in the order `--help` lists them
    _add_handout_commands(sub)
    _add_grading_commands(sub)
    _add_gradebook_commands(sub)
    _add_upkeep_commands(sub)
    return parser


def _add_handout_commands(sub) -> None:
    """What goes out to students and what comes back: student, submit."""
    p = sub.add_parser("student", help="generate the student edition")
    p.add_argument("--out", type=Path, default=course.STUDENT_DIR)
    p.add_argument(
        "--no-wheel",
        action="store_true",
        help="the notebooks only: no wheel and install.py beside them",
    )
    p = sub.add_parser(
        "submit",
        help="file a student's returned notebooks (any name that holds the "
        "lesson's: '03_loss_scaling-Copy1', '03_loss_scaling - Alice Smith'); an "
        "earlier hand-in is kept in history/",
    )
    p.add_argument("student", help="the student's id (spaces become '_')")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument(
        "--at",
        type=_when,
        default=None,
        help="when it was handed in, e.g. '2026-12-06 17:30' (UTC; default: now)",
    )


def _add_grading_commands(sub) -> None:
    """autograde and rehearse."""
    p = sub.add_parser(
        "autograde",
        help="autograde every submission, each in its own "
        "bubblewrap sandbox; print the scores and what to review",
    )
    p.add_argument("--student", default="*", help="one student's id (default: all)")
    p.add_argument("--lesson", default="*", help="one lesson (default: all)")
    p.add_argument(
        "--all",
        action="store_true",
        help="regrade every submission, not only the new or changed ones",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=autograder.NOTEBOOK_TIMEOUT_S,
        help="seconds each notebook may run (default %(default)g)",
    )
    p.add_argument(
        "--jobs",
        type=_positive,
        default=autograder.default_jobs(),
        help="submissions graded at once, each in its own sandbox "
        "(default: one a core, %(default)s here)",
    )
    p.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run submissions with YOUR rights (no bwrap): only for a "
        "machine you do not mind student code touching",
    )
    p = sub.add_parser(
        "rehearse",
        help="solved -> full marks, blank -> zero, in a "
        "scratch course (never --course)",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="the scratch course (default: a new build/rehearsal-*)",
    )


def _add_gradebook_commands(sub) -> None:
    """What comes out of grading: grades and feedback."""
    p = sub.add_parser(
        "grades",
        help="print the gradebook: one row per student and handed-in lesson",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="as JSON: [{student, lesson, score, max_score, flags, core_score, "
        "core_max, optional_score, optional_max, submitted_at, exercises}]",
    )
    p.add_argument(
        "--csv",
        type=Path,
        metavar="FILE",
        help="write it as CSV to FILE: the same columns, one per exercise too",
    )
    p = sub.add_parser(
        "feedback",
        help="each student's feedback on each graded lesson, without hidden cases",
    )
    p.add_argument("--student", default="*", help="one student's id (default: all)")
    p.add_argument("--lesson", default="*", help="one lesson (default: all)")


def _add_upkeep_commands(sub) -> None:
    """What keeps the lesson notebooks in shape: lint, fix-tests, slides."""
    sub.add_parser("lint", help="nbgrader and slideshow metadata of every notebook")
    p = sub.add_parser(
        "fix-tests", help="rewrite graded test cells into the one tamper-evident form"
    )
    p.add_argument(
        "paths", nargs="*", type=Path, help="notebooks (default: every course notebook)"
    )
    p = sub.add_parser(
        "slides",
        help="offline reveal.js decks into build/slides: the presenter's, and "
        "handouts without solutions in build/slides/handout",
    )
    p.add_argument(
        "lessons",
        nargs="*",
        help="only these lessons, e.g. 03_loss_scaling or 03 (default: all)",
    )
    p.add_argument("--out", type=Path, default=slides.SLIDES_DIR)
    p.add_argument(
        "--no-execute",
        action="store_true",
        help="export the code only, without running the lessons first",
    )


# ---- one function a command: (parsed arguments, the course notebooks) -> exit code --


def _student(args, notebooks: list[Path]) -> int:
    """Build the course, release it and check the student edition for leaks."""
    problems = lint.lint_course(notebooks)
    if problems:
        return _report(problems, "")
    course.build_course(notebooks, args.course)
    course.generate_student_edition(args.course)
    autograder.write_seal(args.course)
    written = course.export_student_edition(args.course, args.out)
    for source in notebooks:
        problems += lint.lint_student_edition(source, args.out / source.name)
    print(f"student edition: {len(written)} notebooks in {args.out}")
    if not args.no_wheel:
        wheel = course.write_install_kit(args.out)
        print(f"and {wheel.name} with install.py (students run `python3 install.py`)")
    return _report(problems, f"hand out {args.out} (zip it, or see INSTRUCTORS.md)")


def _submit(args, notebooks: list[Path]) -> int:
    try:
        filed = handin.file_hand_ins(args.student, args.files, args.course, at=args.at)
    except (ValueError, RuntimeError) as exc:
        print(f"submit: {exc}", file=sys.stderr)
        return 2
    for one in filed:
        if one.student != args.student:
            print(f"student id {args.student!r} filed as {one.student!r}")
            break
    for one in filed:
        print(f"filed {one.source.name} as {one.lesson}: {one.dest}")
        if one.kept:
            print(f"  the earlier hand-in is kept: {one.kept}")
    return 0


def _autograde(args, notebooks: list[Path]) -> int:
    """Grade, then always print the whole table (and every flag in full)."""
    try:
        outcomes = autograder.autograde(
            args.course,
            args.student,
            lesson=args.lesson,
            changed_only=not args.all,
            sandboxed=not args.unsafe_no_sandbox,
            timeout=args.timeout,
            jobs=args.jobs,
        )
    except RuntimeError as exc:
        print(f"autograde: {exc}", file=sys.stderr)
        return 2
    finally:
        print(_table(args.course))
    for outcome in outcomes:
        for flag in outcome.flags:
            print(f"  {outcome.student}/{outcome.lesson}: {flag}")
    return 0


def _grades(args, notebooks: list[Path]) -> int:
    if args.csv:
        table = gradebook.rows(args.course)
        gradebook.write_csv(table, args.csv)
        print(f"{len(table)} row(s) in {args.csv}", file=sys.stderr)
    if args.json:
        print(json.dumps(autograder.grades(args.course), indent=1))
    elif not args.csv:
        print(_table(args.course))
    return 0


def _feedback(args, notebooks: list[Path]) -> int:
    written = feedback.write_feedback(args.course, args.student, args.lesson)
    folder = args.course / "feedback"
    print(f"{len(written)} feedback file(s) in {folder}/<student>/<lesson>/")
    return 0


def _rehearse(args, notebooks: list[Path]) -> int:
    """Grade the solved and the blank edition in a scratch course."""
    if not course.graded_notebooks(args.notebooks):
        print("no graded notebooks yet")
        return 0
    result = rehearsal.rehearse(notebooks, args.dir)
    print(_table(result.course_dir))
    if not result.sandboxed:
        print("(graded without a sandbox: bwrap is not usable here)")
    print(
        f"({result.seconds:.0f} s; executed notebooks in "
        f"{result.course_dir / 'autograded'})"
    )
    return _report(result.problems, "solved: full marks; blank: zero; all good")


def _lint(args, notebooks: list[Path]) -> int:
    problems = lint.lint_course(notebooks)
    for path in notebooks:
        problems += lint.lint_slides(path)
    return _report(problems, f"{len(notebooks)} notebooks: metadata fine")


def _fix_tests(args, notebooks: list[Path]) -> int:
    for path in args.paths or notebooks:
        changed = testcells.fix_test_cells(path)
        print(
            f"{path}: {changed} cell(s) rewritten"
            if changed
            else f"{path}: already in the one form"
        )
    return 0


def pick_lessons(notebooks: list[Path], names: Sequence[str]) -> list[Path]:
    """The notebooks ``names`` pick (a stem, a file name or a unique start such as
    ``03``); all of them when ``names`` is empty. Raises ValueError (one line)."""
    picked = []
    for name in names:
        stem = Path(name).stem if name.endswith(".ipynb") else name
        found = [p for p in notebooks if p.stem == stem] or [
            p for p in notebooks if p.stem.startswith(stem)
        ]
        if len(found) != 1:
            choices = ", ".join(p.stem for p in (found or notebooks))
            raise ValueError(
                f"{name!r} is {'no' if not found else 'more than one'} lesson: "
                f"one of {choices}"
            )
        picked += [p for p in found if p not in picked]
    return picked or notebooks


def _slides(args, notebooks: list[Path]) -> int:
    try:
        chosen = pick_lessons(notebooks, args.lessons)
    except ValueError as exc:
        print(f"slides: {exc}", file=sys.stderr)
        return 2
    decks = slides.export_slides(
        chosen, args.out, execute=not args.no_execute, handout=True
    )
    problems = [p for deck in decks for p in slides.offline_problems(deck)]
    print(
        f"{len(chosen)} presenter deck(s) in {args.out} (open one in a browser, press "
        f"s for the speaker notes); handouts without solutions in "
        f"{args.out / slides.HANDOUT}"
    )
    return _report(problems, "no network needed")


COMMANDS = {
    "student": _student,
    "submit": _submit,
    "autograde": _autograde,
    "grades": _grades,
    "feedback": _feedback,
    "rehearse": _rehearse,
    "lint": _lint,
    "fix-tests": _fix_tests,
    "slides": _slides,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command on the course notebooks; return its exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    notebooks = course.course_notebooks(args.notebooks)
    if not notebooks:
        parser.error(f"no notebooks in {args.notebooks}")
    return COMMANDS[args.command](args, notebooks)


if __name__ == "__main__":
    sys.exit(main())
