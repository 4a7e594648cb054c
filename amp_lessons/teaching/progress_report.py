"""What the learner's progress file says: per lesson, the exercises passed of its
total, the last activity and the next step; the same table in the welcome lesson, in
``python -m amp_lessons progress`` and, one line of it, at the end of every lesson.

An exercise is passed once any of its visible check runs passed (``progress``); a
lesson's total is its graded test cells (``lessons``). The next step is the first
exercise not passed yet in the lesson worked on last, else the next lesson in the
README's order.

Example:
    >>> print(lesson_end("03_loss_scaling"))  # doctest: +SKIP
    Your progress in 03_loss_scaling: 1 of 2 exercises passed.
    Last activity: 2026-12-06 14:31.
    Still to do here: unscale_grads.
    Next lesson: 04_autocast.ipynb
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from amp_lessons.i18n import _
from amp_lessons.teaching import progress
from amp_lessons.teaching.lessons import Exercise, course_exercises, lesson_order

LAST_CORE_LESSON = "08_quick_check"  # lessons 00-08 are the core course
# Where to read next after the last lesson: the references the course is built on
# (torch.amp's docs and recipe, torchao's float8, Micikevicius et al. 2018 and 2022)
READ_NEXT = (
    "https://docs.pytorch.org/docs/stable/amp.html",
    "https://docs.pytorch.org/tutorials/recipes/recipes/amp_recipe.html",
    "https://github.com/pytorch/ao/tree/main/torchao/float8",
    "https://arxiv.org/abs/1710.03740",
    "https://arxiv.org/abs/2209.05433",
)


@dataclass(frozen=True)
class LessonProgress:
    """One lesson's row: passed exercises (their grade_ids), the total, the time of
    the last record (UTC, ISO 8601, or None) and the first exercise not passed."""

    lesson: str
    passed: tuple[str, ...]
    total: int
    last: str | None
    next_exercise: Exercise | None

    def as_dict(self) -> dict:
        nxt = self.next_exercise
        return {
            "lesson": self.lesson,
            "passed": len(self.passed),
            "total": self.total,
            "passed_exercises": list(self.passed),
            "last_activity": self.last,
            "next_exercise": nxt.grade_id if nxt else None,
            "next_function": nxt.function if nxt else None,
        }


def lesson_rows(records: list[progress.Record]) -> list[LessonProgress]:
    """Each lesson's progress, lessons in reading order."""
    rows = []
    for lesson, exercises in course_exercises().items():
        mine = [r for r in records if r.lesson == lesson]
        done = {r.exercise for r in mine if r.passed}
        passed = tuple(e.grade_id for e in exercises if e.grade_id in done)
        todo = [e for e in exercises if e.grade_id not in done]
        last = max((r.time for r in mine), default=None)
        rows.append(
            LessonProgress(lesson, passed, len(exercises), last, (todo or [None])[0])
        )
    return rows


def next_lesson(lesson: str) -> str | None:
    """The lesson after `lesson` in the README's order (None after the last)."""
    order = lesson_order()
    i = order.index(lesson) if lesson in order else -1
    return order[i + 1] if 0 <= i < len(order) - 1 else None


def next_step(rows: list[LessonProgress]) -> tuple[str | None, Exercise | None]:
    """(lesson, exercise) to do next: the first exercise not passed in the lesson
    worked on last, else the next lesson not passed whole; after the last lesson,
    the first exercise not passed in the whole course; the first lesson before any
    record. (None, None) only when every exercise is passed."""
    latest = latest_worked(rows)
    if latest is None:
        return (rows[0].lesson if rows else None), None
    if latest.next_exercise:
        return latest.lesson, latest.next_exercise
    # the next lesson not yet passed whole (one without exercises: to read)
    after = rows[rows.index(latest) + 1 :]  # rows are in reading order
    following = next((r for r in after if r.next_exercise or not r.total), None)
    if following is not None:
        return following.lesson, None
    return first_left(rows)


def latest_worked(rows: list[LessonProgress]) -> LessonProgress | None:
    """The row of the lesson with the latest record, or None before any record."""
    return max((r for r in rows if r.last), key=lambda r: r.last, default=None)


def first_left(rows: list[LessonProgress]) -> tuple[str | None, Exercise | None]:
    """The first exercise not passed, in reading order: (lesson, exercise), or
    (None, None) when every exercise is passed."""
    left = next((r for r in rows if r.next_exercise), None)
    return (left.lesson, left.next_exercise) if left else (None, None)


def _local(time: str | None) -> str:
    if not time:
        return "-"
    return datetime.fromisoformat(time).astimezone().strftime("%Y-%m-%d %H:%M")


def _step_text(lesson: str | None, exercise: Exercise | None) -> str:
    if lesson is None:
        return _("the course is complete")
    if exercise is None:
        return _("open {lesson}").format(lesson=lesson)
    return _("write {function} in {lesson}").format(
        function=exercise.function, lesson=lesson
    )


@dataclass(frozen=True)
class ProgressTable:
    """The whole table; shown as text in a notebook, ``str()`` for a terminal."""

    rows: tuple[LessonProgress, ...]
    path: Path
    recording: bool

    def __str__(self) -> str:
        head = (_("lesson"), _("passed"), _("last activity"), _("next step"))
        cells = [
            (
                r.lesson,
                _("{passed} of {total}").format(passed=len(r.passed), total=r.total)
                if r.total
                else "-",
                _local(r.last),
                (r.next_exercise.function if r.next_exercise else _("done"))
                if r.total
                else "-",
            )
            for r in self.rows
        ]
        widths = [max(len(c[i]) for c in [head, *cells]) for i in range(4)]
        lines = [self.source_line()]
        for row in [head, *cells]:
            lines.append(
                "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
            )
        lesson, exercise = next_step(list(self.rows))
        step = _step_text(lesson, exercise)
        lines.append(
            _("Next, the first exercise still to do: {step}.").format(step=step)
            if self._went_back(lesson)
            else _("Next, from where you left off: {step}.").format(step=step)
        )
        behind = self.left_behind(lesson)
        if behind:
            lines.append(
                _("Still to do in earlier lessons: {lessons}.").format(
                    lessons=", ".join(behind)
                )
            )
        return "\n".join(line.rstrip() for line in lines)

    def left_behind(self, lesson: str | None) -> list[str]:
        """The lessons before `lesson` (the next step's) with exercises not passed:
        going on from where one left off must not hide them (a walk passed 04 and
        06, and the table sent it to 07 without a word about 03 and 05)."""
        order = [r.lesson for r in self.rows]
        if lesson not in order:
            return []
        return [r.lesson for r in self.rows[: order.index(lesson)] if r.next_exercise]

    def _went_back(self, lesson: str | None) -> bool:
        """Whether the next step lies before the lesson worked on last (after the
        last lesson, the first exercise left in the course)."""
        order = [r.lesson for r in self.rows]
        latest = latest_worked(list(self.rows))
        if lesson not in order or latest is None:
            return False
        return order.index(lesson) < order.index(latest.lesson)

    def source_line(self) -> str:
        if not self.recording:
            return _(
                "Progress is not recorded here ({env}=off): the table shows nothing "
                "passed."
            ).format(env=progress.ENV)
        return _("Your progress, from {path}:").format(path=self.path)

    def __repr__(self) -> str:
        return str(self)

    def as_dict(self) -> dict:
        lesson, exercise = next_step(list(self.rows))
        return {
            "file": str(self.path),
            "recording": self.recording,
            "lessons": [r.as_dict() for r in self.rows],
            "next": {
                "lesson": lesson,
                "exercise": exercise.grade_id if exercise else None,
                "function": exercise.function if exercise else None,
            },
            "left_behind": self.left_behind(lesson),
        }


def progress_table(records: list[progress.Record] | None = None) -> ProgressTable:
    """The table of the progress file (`records`, else the file's; none at all where
    progress is off). The welcome lesson shows it; so does ``progress``.

    Example: ``progress_table([])`` lists every lesson with nothing passed yet.
    """
    recording = progress.enabled()
    if records is None:
        records = progress.read_records() if recording else []
    return ProgressTable(
        tuple(lesson_rows(records)), progress.progress_file(), recording
    )


@dataclass(frozen=True)
class LessonEnd:
    """A lesson's last word: its line of the table, and the lesson that comes next
    (a link in JupyterLab, its file name in text)."""

    lesson: str
    passed: int
    total: int
    next_lesson: str | None
    lines: tuple[str, ...]
    course_complete: bool = False

    def __str__(self) -> str:
        return "\n".join([*self.lines, self._ending()])

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        link = f"[{self.next_lesson}]({self.next_lesson}.ipynb)"
        return "  \n".join([*self.lines, self._ending(link)])

    def _ending(self, link: str | None = None) -> str:
        following = self.next_lesson
        if following is None:
            links = ", ".join(READ_NEXT)
            if self.course_complete:
                return _(
                    "This was the last lesson: the course is complete. Read next: "
                    "{links}"
                ).format(links=links)
            return _("This was the last lesson. Read next: {links}").format(links=links)
        link = link or f"{following}.ipynb"
        if self.lesson == LAST_CORE_LESSON:
            return _(
                "This was the last lesson of the core course (00-08). Going "
                "further: {link}"
            ).format(link=link)
        return _("Next lesson: {link}").format(link=link)


def _progress_line(lesson: str, passed: int, total: int) -> str:
    """The lesson's line, e.g. "Your progress in 03_loss_scaling: 1 of 2 exercises
    passed."; a lesson of one exercise says whether it is passed (not "0 of 1
    exercises")."""
    if total == 1 and passed:
        form = _("Your progress in {lesson}: its one exercise is passed.")
    elif total == 1:
        form = _("Your progress in {lesson}: its one exercise is not passed yet.")
    else:
        form = _("Your progress in {lesson}: {passed} of {total} exercises passed.")
    return form.format(lesson=lesson, passed=passed, total=total)


def lesson_end(lesson: str) -> LessonEnd:
    """The line a lesson ends with: its exercises passed of its total (where
    progress is recorded), what is left in it and which lesson comes next.

    Example: ``lesson_end("03_loss_scaling").next_lesson == "04_autocast"``.
    """
    table = progress_table()
    row = next((r for r in table.rows if r.lesson == lesson), None)
    if row is None:
        raise ValueError(f"lesson must be one of {', '.join(lesson_order())}")
    lines = []
    following = next_lesson(lesson)
    complete = False  # the whole course passed: known only where progress is kept
    if not table.recording:
        lines.append(table.source_line())
    elif row.total:
        lines.append(_progress_line(lesson, len(row.passed), row.total))
        if row.last:
            lines.append(_("Last activity: {last}.").format(last=_local(row.last)))
        if row.next_exercise:
            lines.append(
                _("Still to do here: {function}.").format(
                    function=row.next_exercise.function
                )
            )
    if table.recording and following is None:  # the last lesson: what is left
        left, exercise = first_left(list(table.rows))
        complete = left is None
        if exercise is not None and left != lesson:
            lines.append(
                _("Still to do in the course: {step}.").format(
                    step=_step_text(left, exercise)
                )
            )
    return LessonEnd(
        lesson, len(row.passed), row.total, following, tuple(lines), complete
    )
