"""Autograde every submission on its own, in a sandbox, and never stop for one bad
notebook: what ``make grade`` runs.

For each submitted lesson of each student, one ``nbgrader autograde`` run does what
nbgrader always does (restore the locked and test cells from the source, check the
metadata, score the test cells, write the gradebook), except that the notebook is
executed by `SandboxExecute`: in bwrap (``sandbox``), in the guarded kernel
(``guard``), with a time limit; then ``review`` flags what the student's code did
and fails every test cell whose pass its checks did not vouch for. A corrupt file,
a kernel that dies (``os._exit``), a timeout, or nbgrader itself failing gives that
submission 0 with the reason as a flag, and grading goes on with the next one.
Several submissions are graded at once (``jobs``: one a core unless told), each in its
own nbgrader process and sandbox; the gradebook and the flags are the same as one at
a time. Grading refuses to start without a working bwrap unless asked, loudly, to run
without one (``sandboxed=False``: ``--unsafe-no-sandbox``).

Not covered here: what the sandbox lets a notebook see (``sandbox``), what counts as
tampering (``guard``, ``review``).

Example (what ``make grade`` runs)::

    python -m amp_lessons.grading autograde             # every submission
    python -m amp_lessons.grading autograde --student alice --timeout 300
    python -m amp_lessons.grading autograde --jobs 4    # four at once
    python -m amp_lessons.grading autograde --lesson 03_loss_scaling --all
    python -m amp_lessons.grading grades --json
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from traitlets import Bool, Float, Integer

from amp_lessons.tooling import usable_cores
from amp_lessons.tooling.grading import nbgrader_main, review, sandbox
from amp_lessons.tooling.grading.course import (
    CELL_TIMEOUT_S,
    COURSE_DIR,
    COURSE_ID,
    ROOT,
    is_test_cell,
    jupyter_env,
)
from amp_lessons.tooling.grading.sandbox import NOTEBOOK_TIMEOUT_S
from amp_lessons.tooling.grading.testcells import check_calls

UNSAFE_WARNING = (
    "WARNING: grading WITHOUT a sandbox (--unsafe-no-sandbox): each "
    "submission runs with your rights and can read, change or delete "
    "anything you can, the gradebook and the course included. Scores "
    "and flags are still checked; your files are not protected."
)
SEAL_NAME = "checks.seal.json"  # the checks' sources at `make student` (release)
# Runs of nbgrader that found the gradebook locked by another job's write (SQLite
# waits 5 s for it) and are run again
LOCKED_RETRIES = 2


class SandboxExecute(NbGraderPreprocessor):
    """nbgrader's Execute step, done in a sandbox, then reviewed (see module doc).

    The course's ``nbgrader_config.py`` puts it in place of ``Execute`` in
    ``Autograde.autograde_preprocessors``, so a plain ``nbgrader autograde`` in the
    course folder is sandboxed too.
    """

    sandbox = Bool(True, help="run in bwrap; False only with --unsafe-no-sandbox").tag(
        config=True
    )
    notebook_timeout = Float(NOTEBOOK_TIMEOUT_S, help="seconds per notebook").tag(
        config=True
    )
    timeout = Integer(CELL_TIMEOUT_S, help="seconds per cell").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        course_dir = Path(info["db_url"].removeprefix("sqlite:///"))
        course_dir = course_dir.parent
        lesson, student = info["assignment"], info["student"]
        source_nb = nbformat.read(
            course_dir / "source" / lesson / f"{info['notebook']}.ipynb", as_version=4
        )
        test_cells = {
            i: c.source
            for i, c in enumerate(nb.cells)
            if is_test_cell(c) and check_calls(c.source)
        }
        course_cells = [c.source for c in source_nb.cells if c.cell_type == "code"]
        run = sandbox.run_notebook(
            nb,
            Path(resources["metadata"]["path"]),
            test_cells=test_cells,
            course_cells=course_cells,
            sandbox=self.sandbox,
            timeout=self.notebook_timeout,
            cell_timeout=self.timeout,
            protected=[str(course_dir.resolve()), str(ROOT)],
        )
        flags = [run.reason] if run.reason else []
        executed = run.notebook if run.notebook is not None else nb
        if run.notebook is None:
            for cell in executed.cells:  # nothing ran: no cell keeps a result
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = [], None
        flags += review.scan_notebook(executed, source_nb)
        flags += review.runtime_flags(executed, run.records, run.forged)
        flags += review.cross_check(executed, run.records, run.reason)
        review.write_review(course_dir, student, lesson, flags)
        self.log.info(
            "%s/%s ran in %.0f s; %d flag(s)", student, lesson, run.seconds, len(flags)
        )
        return executed, resources


class ReleasedCells(OverwriteCells):
    """nbgrader's OverwriteCells, quiet about a test cell left as it was released.

    The student edition's test cells lack their hidden tests, so their checksum never
    matches the source's: plain OverwriteCells warns "Attribute 'checksum' for cell
    ... has changed!" on every untouched notebook. A locked cell whose source is the
    source cell's with its hidden tests cut is given the source back first, silently;
    any other change is still reported (and overwritten) as nbgrader does.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id is not None and cell.cell_type == "code":
            from nbgrader.api import MissingEntry

            try:
                source = self.gradebook.find_source_cell(
                    grade_id, self.notebook_id, self.assignment_id
                )
            except MissingEntry:
                source = None
            if (
                source is not None
                and source.locked
                and cell.source != source.source
                and cell.source.strip() == released_source(source.source).strip()
            ):
                cell.source = source.source
        return super().preprocess_cell(cell, resources, cell_index)


def released_source(source: str) -> str:
    """``source`` as the student edition has it: its hidden tests cut."""
    from nbgrader.preprocessors import ClearHiddenTests

    cell = nbformat.v4.new_code_cell(source)
    ClearHiddenTests()._remove_hidden_test_region(cell)
    return cell.source


@dataclass
class Outcome:
    """One submission's grading: what happened, in one line, and its flags."""

    student: str
    lesson: str
    ok: bool
    flags: list[str] = field(default_factory=list)


def nbgrader_overrides(sandboxed: bool, timeout: float) -> list[str]:
    """Command-line config that every autograde run gets."""
    return [
        f"--SandboxExecute.sandbox={sandboxed}",
        f"--SandboxExecute.notebook_timeout={timeout}",
    ]


def _zero(course_dir: Path, student: str, lesson: str) -> bool:
    """Record 0 for every graded cell of this submission (as nbgrader does for a
    missing notebook); False when the lesson is not in the gradebook at all."""
    from nbgrader.api import Gradebook, MissingEntry

    path = Path(course_dir) / "gradebook.db"
    if not path.exists():  # no lesson in it: nothing to record 0 for
        return False
    db = f"sqlite:///{path.resolve()}"
    with warnings.catch_warnings(), Gradebook(db, COURSE_ID) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes on new rows
        try:
            gb.update_or_create_student(student)
            submission = gb.update_or_create_submission(lesson, student)
        except MissingEntry:
            return False
        stamp = Path(course_dir) / "submitted" / student / lesson / "timestamp.txt"
        if stamp.exists() and submission.timestamp is None:
            # nbgrader reads it when it grades; a file it could not grade keeps it too
            from nbgrader.utils import parse_utc

            try:
                submission.timestamp = parse_utc(stamp.read_text().strip())
            except ValueError:
                pass
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                grade.auto_score, grade.needs_manual_grade = 0, False
        gb.db.commit()
    return True


def _readable(path: Path) -> str | None:
    try:
        nb = nbformat.read(path, as_version=4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except Exception as exc:  # JSON, schema, encoding: all mean "cannot grade this"
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
    return None


def _corrupt_files(course_dir: Path, student: str, lesson: str) -> list[str]:
    """A flag for each submitted notebook of this lesson that cannot be read."""
    flags = []
    for path in sorted(
        (Path(course_dir) / "submitted" / student / lesson).glob("*.ipynb")
    ):
        problem = _readable(path)
        if problem:
            flags.append(
                f"corrupt: {path.name} cannot be read as a notebook "
                f"({problem}); scored 0"
            )
    return flags


def _run_nbgrader(
    course_dir: Path, student: str, lesson: str, sandboxed: bool, timeout: float
) -> str | None:
    """One ``nbgrader autograde`` of this submission: None when it succeeded, else
    its last error line. Raises subprocess.TimeoutExpired."""
    command = nbgrader_main.command(
        "autograde",
        lesson,
        f"--student={student}",
        "--force",
        *nbgrader_overrides(sandboxed, timeout),
    )
    for _ in range(1 + LOCKED_RETRIES):
        done = subprocess.run(
            command,
            cwd=course_dir,
            env=jupyter_env(course_dir),
            capture_output=True,
            text=True,
            timeout=timeout * 2 + 120,
        )
        log = done.stdout + done.stderr
        if done.returncode == 0:
            return None
        if "database is locked" not in log:  # another job was writing: try again
            break
    errors = [line for line in log.splitlines() if "[ERROR]" in line]
    return (errors or log.splitlines() or ["?"])[-1][-200:]


def grade_one(
    course_dir: Path,
    student: str,
    lesson: str,
    *,
    sandboxed: bool = True,
    timeout: float = NOTEBOOK_TIMEOUT_S,
    stopping: threading.Event | None = None,
) -> Outcome:
    """Autograde one submitted lesson; a failure becomes a 0 with its reason.

    ``stopping``: set when grading was interrupted (Ctrl-C, which stops nbgrader
    too); a run that fails after that records nothing and raises KeyboardInterrupt.
    """
    flags = _corrupt_files(course_dir, student, lesson)
    if not flags:
        try:
            error = _run_nbgrader(course_dir, student, lesson, sandboxed, timeout)
            if error is None:
                return Outcome(
                    student,
                    lesson,
                    True,
                    review.read_review(course_dir, student, lesson),
                )
            # nbgrader failed before or after our preprocessor: nothing to keep
            flags.append(
                f"error: nbgrader failed on this submission ({error}); scored 0"
            )
        except subprocess.TimeoutExpired:
            flags.append(
                f"timeout: nbgrader did not finish in {timeout * 2 + 120:g} s; scored 0"
            )
        if stopping is not None and stopping.is_set():
            raise KeyboardInterrupt(f"grading stopped during {student}/{lesson}")
    _zero(course_dir, student, lesson)
    review.write_review(course_dir, student, lesson, flags)
    return Outcome(student, lesson, False, flags)


def submissions(
    course_dir: Path, student: str = "*", lesson: str = "*"
) -> list[tuple[str, str]]:
    """(student, lesson) for every submitted lesson folder, sorted."""
    folder = Path(course_dir) / "submitted"
    return sorted(
        (p.parent.name, p.name)
        for p in folder.glob(f"{student}/{lesson}")
        if p.is_dir()
    )


def _changed(course_dir: Path, todo: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The submissions of ``todo`` not graded as they are now (or missing from the
    gradebook: a new one, say); says how many kept."""
    from amp_lessons.tooling.grading.course import read_scores

    graded = {(s.student, s.notebook) for s in read_scores(course_dir)}
    kept = [p for p in todo if p in graded and unchanged(course_dir, *p)]
    if kept:
        print(
            f"{len(kept)} submission(s) unchanged since graded: kept "
            "(--all regrades them)",
            flush=True,
        )
    return [pair for pair in todo if pair not in kept]


def fingerprint(course_dir: Path, student: str, lesson: str) -> str:
    """A hash of what grading this submission reads: the files handed in (not their
    timestamp), the lesson's source notebook and the checks' sources."""
    from amp_lessons.teaching.checks import seal

    digest = hashlib.sha256(json.dumps(seal(), sort_keys=True).encode())
    folder = Path(course_dir) / "submitted" / student / lesson
    source = Path(course_dir) / "source" / lesson / f"{lesson}.ipynb"
    files = [p for p in sorted(folder.rglob("*")) if p.name != "timestamp.txt"]
    for path in [*files, source]:
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _fingerprint_path(course_dir: Path, student: str, lesson: str) -> Path:
    return review.review_path(course_dir, student, lesson).with_suffix(".sha256")


def unchanged(course_dir: Path, student: str, lesson: str) -> bool:
    """Whether this submission was graded as it is now (see `fingerprint`)."""
    path = _fingerprint_path(course_dir, student, lesson)
    try:
        return path.read_text() == fingerprint(course_dir, student, lesson)
    except OSError:
        return False


def check_package(course_dir: Path) -> list[str]:
    """Warnings when the checks changed since the student edition was released."""
    from amp_lessons.teaching.checks import seal

    path = Path(course_dir) / SEAL_NAME
    if not path.exists():
        return []
    sealed, now = json.loads(path.read_text()), seal()
    changed = sorted(n for n in set(sealed) | set(now) if sealed.get(n) != now.get(n))
    if not changed:
        return []
    return [
        f"WARNING: amp_lessons/teaching/checks changed since `make student` "
        f"({', '.join(changed)}): edited on purpose, or by a submission graded "
        "without a sandbox? Grading uses the files as they are now."
    ]


def write_seal(course_dir: Path) -> Path:
    """Record the checks' sources at release (`make student`)."""
    from amp_lessons.teaching.checks import seal

    path = Path(course_dir) / SEAL_NAME
    path.write_text(json.dumps(seal(), indent=1))
    return path


def default_jobs() -> int:
    """How many submissions ``autograde`` grades at once unless told: one for each
    core this process may run on (a container's limit included)."""
    return usable_cores()


def _add_students(course_dir: Path, students: list[str]) -> None:
    """Put these students in the gradebook. nbgrader adds a submission's student when
    it grades it; two lessons of a new student graded at once would both insert the
    same row, and one would fail."""
    from nbgrader.api import Gradebook

    db = f"sqlite:///{(Path(course_dir) / 'gradebook.db').resolve()}"
    with warnings.catch_warnings(), Gradebook(db, COURSE_ID) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes on new rows
        for student in students:
            gb.update_or_create_student(student)


def _grade_all(
    course_dir: Path, todo: list[tuple[str, str]], jobs: int, **options
) -> list[Outcome]:
    """``grade_one`` for each (student, lesson), ``jobs`` at a time, in submission
    order; a line for each as it ends. Each run is its own nbgrader process and
    sandbox: the threads here only wait for them. A change on disk to the course's
    checks is flagged on every submission that ends after it."""
    from amp_lessons.teaching.checks import seal

    checks = sandbox.PACKAGE_DIR / "teaching" / "checks"
    before, stopping = seal(checks), threading.Event()

    def grade(who: str, lesson: str) -> Outcome:
        seen = fingerprint(course_dir, who, lesson)
        outcome = grade_one(course_dir, who, lesson, stopping=stopping, **options)
        path = _fingerprint_path(course_dir, who, lesson)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(seen)
        if seal(checks) != before:
            outcome.flags.append(
                "runtime: the course's checks changed on disk while this submission ran"
            )
            review.write_review(course_dir, who, lesson, outcome.flags)
        return outcome

    pool, outcomes = ThreadPoolExecutor(max_workers=jobs), {}
    try:
        futures = {pool.submit(grade, *pair): pair for pair in todo}
        for future in as_completed(futures):
            (who, lesson), outcome = futures[future], future.result()
            print(
                f"graded {who}/{lesson}"
                + ("" if outcome.ok else ": not run, scored 0")
                + (
                    f" ({len(outcome.flags)} flag(s) to review)"
                    if outcome.flags
                    else ""
                ),
                flush=True,
            )
            outcomes[(who, lesson)] = outcome
    except BaseException:
        stopping.set()  # the runs the interrupt stopped record nothing
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [outcomes[pair] for pair in todo]


def autograde(
    course_dir: Path = COURSE_DIR,
    student: str = "*",
    *,
    lesson: str = "*",
    changed_only: bool = False,
    sandboxed: bool = True,
    timeout: float = NOTEBOOK_TIMEOUT_S,
    jobs: int | None = None,
) -> list[Outcome]:
    """Grade each submission of ``student`` on ``lesson`` (glob patterns) on its own
    (see module docstring), ``jobs`` at a time (default: ``default_jobs()``), each in
    its own sandbox; print progress, then how many a minute. The outcomes and the
    gradebook are the same whatever ``jobs``. ``changed_only``: skip a submission
    graded before whose files and lesson have not changed since (`unchanged`).

    Raises RuntimeError when nothing was submitted, or when ``sandboxed`` and bwrap
    cannot sandbox here (the message says how to install it); ValueError when
    ``jobs`` is below 1.
    """
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be 1 or more, not {jobs}")
    todo = submissions(course_dir, student, lesson)
    if not todo:
        raise RuntimeError(
            f"nothing submitted in {Path(course_dir) / 'submitted'}"
            + ("" if (student, lesson) == ("*", "*") else f" for {student}/{lesson}")
            + ": file notebooks with `python -m amp_lessons.grading submit "
            "STUDENT FILES...`"
        )
    if changed_only:
        todo = _changed(course_dir, todo)
        if not todo:
            return []
    if sandboxed:
        problem = sandbox.sandbox_problem()
        if problem:
            raise RuntimeError(f"refusing to grade without a sandbox: {problem}")
    else:
        print(UNSAFE_WARNING, file=sys.stderr)
    for line in check_package(course_dir):
        print(line, file=sys.stderr)
    if jobs > 1 and (Path(course_dir) / "gradebook.db").exists():
        _add_students(course_dir, sorted({who for who, _ in todo}))
    start = time.perf_counter()
    outcomes = _grade_all(
        course_dir, todo, min(jobs, len(todo)), sandboxed=sandboxed, timeout=timeout
    )
    seconds = time.perf_counter() - start
    # a rate from under a second of work (a corrupt file) says nothing
    took = (
        f"in {seconds:.0f} s, {len(todo) * 60 / seconds:.1f} a minute"
        if seconds >= 1
        else "in under a second"
    )
    print(f"graded {len(todo)} submission(s) {took} (--jobs {jobs})", flush=True)
    return outcomes


def grades(course_dir: Path = COURSE_DIR) -> list[dict]:
    """The gradebook with each submission's flags: what ``grades --json`` prints,
    one row per student and handed-in lesson with points (``gradebook.rows``)."""
    from amp_lessons.tooling.grading import gradebook

    return gradebook.rows(course_dir)
