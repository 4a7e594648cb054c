"""The learner's progress: one line per visible check run, kept in one file.

Every visible check a learner runs (``check_update_rule(update_scale)``) appends one
record, ``{"time", "lesson", "exercise", "check", "passed"}``, to
``<jupyter data dir>/amp_lessons/progress.jsonl`` (``jupyter --data-dir``: the same
folder for both editions, every kernel and the command line). Records are only ever
appended, each in ONE ``write`` on a file opened with ``O_APPEND`` (POSIX puts it
whole at the end), under an exclusive ``flock`` on ``progress.lock`` beside it, so two
kernels checking at once lose nothing. A damaged file (a line cut short by a crash,
garbage) is set aside under a timestamped name, said in one line, and a fresh file is
started with the records that could still be read: the learner's work goes on.

Nothing is recorded where ``AMP_LESSONS_PROGRESS=off`` (the grading sandbox, nbgrader,
``make test``, the site's and the slides' runs set it), nor for hidden cases.

Example:
    >>> record("check_update_rule", hidden=False, passed=True)  # from grade()
    >>> [r.exercise for r in read_records()]
    ['03_update_rule_test']
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from amp_lessons.i18n import _
from amp_lessons.teaching.lessons import exercise_of

try:  # not on Windows: there the single O_APPEND write is all the safety there is
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

ENV = "AMP_LESSONS_PROGRESS"
OFF = ("off", "0", "no", "false")
FOLDER = "amp_lessons"
FILE_NAME = "progress.jsonl"
LOCK_NAME = "progress.lock"
FIELDS = {"time": str, "lesson": str, "exercise": str, "check": str, "passed": bool}


@dataclass(frozen=True)
class Record:
    """One visible check run: when (UTC, ISO 8601), which lesson and exercise (the
    test cell's nbgrader grade_id), which check, and whether every case passed."""

    time: str
    lesson: str
    exercise: str
    check: str
    passed: bool

    def line(self) -> str:
        """The record as its line in the file (keys sorted: equal records, equal
        lines, which is how an import recognises one it already has)."""
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def parse(cls, line: str) -> Record | None:
        """The record a line holds, or None when it holds none."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or set(data) != set(FIELDS):
            return None
        if any(type(data[k]) is not kind for k, kind in FIELDS.items()):
            return None
        return cls(**data)


def enabled() -> bool:
    """False where ``AMP_LESSONS_PROGRESS`` is off (off, 0, no, false)."""
    return os.environ.get(ENV, "").strip().lower() not in OFF


def progress_file() -> Path:
    """The progress file, in Jupyter's per-user data folder (``JUPYTER_DATA_DIR``
    moves it, e.g. to a Google Drive folder in Colab)."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / FOLDER / FILE_NAME


def now() -> str:
    """The current time as a record writes it: UTC, to the millisecond."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def record(check: str, hidden: bool, passed: bool) -> None:
    """Append one record for a visible check run, unless progress is off. Never
    raises (a check must end with its own verdict): a failure records nothing."""
    try:
        if hidden or not enabled():
            return
        exercise = exercise_of(check)
        lesson, exercise_id = (
            (exercise.lesson, exercise.grade_id) if exercise else ("", check)
        )
        entry = Record(now(), lesson, exercise_id, check, passed is True)
        append_records([entry])
    except Exception:
        return


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the progress folder's lock (every reader and writer takes it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _append(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, text.encode())  # one write: O_APPEND puts it whole at the end
    finally:
        os.close(fd)


def _scan(path: Path) -> tuple[list[Record], bool]:
    """The records the file holds, and whether it is damaged: a line that is no
    record, or a last line cut short (every line a writer ends ends in a newline)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], False
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text, damaged = raw.decode(errors="replace"), True
    else:
        damaged = bool(text) and not text.endswith("\n")
    records = []
    for line in text.splitlines():
        entry = Record.parse(line)
        damaged = damaged or entry is None
        if entry is not None:
            records.append(entry)
    return records, damaged


def _set_aside(path: Path, records: list[Record], notice: Callable[[str], None]):
    """Rename a damaged file to a timestamped name; start a fresh one holding the
    records that could be read; say so in one line."""
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"progress.damaged-{stamp}.jsonl")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"progress.damaged-{stamp}-{n}.jsonl")
    os.replace(path, aside)
    fresh = path.with_name(path.name + ".new")
    fresh.write_text("".join(r.line() for r in records))
    os.replace(fresh, path)
    notice(
        _(
            "progress: {path} was damaged; set aside as {aside}, and a fresh one "
            "started with its {count} readable records"
        ).format(path=path, aside=aside.name, count=len(records))
    )


def read_records(
    path: Path | None = None, notice: Callable[[str], None] = print
) -> list[Record]:
    """Every record in the progress file (none if there is none). A damaged file
    is set aside first (`notice` gets the one line that says so)."""
    path = progress_file() if path is None else Path(path)
    if not path.exists():
        return []
    with _locked(path):
        records, damaged = _scan(path)
        if damaged:
            _set_aside(path, records, notice)
    return records


def append_records(
    records: Iterable[Record],
    path: Path | None = None,
    notice: Callable[[str], None] = print,
) -> None:
    """Append records in one write; a damaged file is set aside first, so a record
    is never glued to a cut-off line."""
    path = progress_file() if path is None else Path(path)
    text = "".join(r.line() for r in records)
    with _locked(path):
        if path.exists() and path.stat().st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                cut_short = f.read(1) != b"\n"
            if cut_short:
                _set_aside(path, _scan(path)[0], notice)
        _append(path, text)


def merge_records(
    records: Iterable[Record],
    path: Path | None = None,
    notice: Callable[[str], None] = print,
) -> int:
    """Add the records the file does not hold yet (an identical record is one it
    holds); return how many were added. ``progress --import`` uses it."""
    path = progress_file() if path is None else Path(path)
    with _locked(path):
        held, damaged = _scan(path)
        if damaged:
            _set_aside(path, held, notice)
        seen = {r.line() for r in held}
        new = []
        for entry in records:
            if entry.line() not in seen:
                seen.add(entry.line())
                new.append(entry)
        if new:
            _append(path, "".join(r.line() for r in new))
    return len(new)


def load_export(path: Path) -> list[Record]:
    """The records of an exported file; ValueError naming the first line that holds
    none (an import takes a whole file or nothing)."""
    records = []
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        entry = Record.parse(line)
        if entry is None:
            raise ValueError(f"{path}: line {number} is not a progress record")
        records.append(entry)
    return records


def reset(path: Path | None = None) -> Path | None:
    """Start over: the file is renamed ``progress.reset-<time>.jsonl`` (kept, in
    case); returns that name, or None when there was nothing to reset."""
    path = progress_file() if path is None else Path(path)
    with _locked(path):
        if not path.exists():
            return None
        stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
        kept = path.with_name(f"progress.reset-{stamp}.jsonl")
        os.replace(path, kept)
    return kept
