"""The files the command line writes (checkpoints, bench results): checked before any
work starts, written atomically with the user's umask, and the leftovers of a run
killed mid-write cleaned up.

A long run that only finds out at the end that its output path is a directory loses
the run; so ``train`` and ``bench`` call `validate_output_path` first. Writes go to a
temporary file beside the target, then a rename: a crash leaves the previous file
whole. The temporary file is created with mode 0o666, so the kernel applies the
user's umask (``tempfile.mkstemp`` would make it 0o600, and the file would stay
private after the rename). Its name carries the writer's process id, so the next
write can tell a leftover of a killed run from a file another run is writing now.

Not covered here: locking, for two runs writing the same path at once (the last
rename wins).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from amp_lessons.core.errors import SettingError
from amp_lessons.i18n import _

__all__ = ["remove_stale_temps", "validate_output_path", "write_atomically"]


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _temp_pattern(path: Path) -> re.Pattern:
    # ours: .NAME.PID.HEX.tmp; older versions (tempfile.mkstemp): NAME.XXXXXXXX.tmp
    name = re.escape(path.name)
    return re.compile(rf"^(?:\.{name}\.(?P<pid>\d+)\.[0-9a-f]+|{name}\.\w{{8}})\.tmp$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files a killed write of `path` left beside it; return them.

    A temporary file whose writer is still running (another run saving the same
    path) is left alone.

    Example: after ``kill -9`` during a save of ``run.pt``,
    ``remove_stale_temps("run.pt")`` -> ``[PosixPath('.run.pt.4242.9f3a1c2e.tmp')]``.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return []
    pattern = _temp_pattern(path)
    removed = []
    for entry in path.parent.iterdir():
        found = pattern.match(entry.name)
        if not found or (found["pid"] and _alive(int(found["pid"]))):
            continue
        try:
            entry.unlink()
            removed.append(entry)
        except OSError:
            pass  # not ours to delete, or gone already
    return removed


def validate_output_path(path: str | os.PathLike, what: str = "output file") -> Path:
    """Refuse, before any work, a path the run could not write at the end.

    Refused with a ValueError (a ``SettingError``) that says what to do: a directory,
    a path whose parent is a file, a folder that cannot be written (permissions, a
    read-only file system). A missing parent folder is fine: the write creates it.
    Leftovers of a killed write of this path are removed. ``what`` names the path in
    the message; a setting in backticks, as ``amp_lessons.core.errors`` marks them,
    is worded the caller's way.

    Example: ``validate_output_path("/tmp", "`checkpoint_path`")`` raises
    "checkpoint_path /tmp is a directory; give a file name inside it, e.g.
    /tmp/run.pt".
    """
    path = Path(path).expanduser()
    if path.is_dir():
        example = path / ("results.json" if "json" in what else "run.pt")
        raise SettingError(
            _(
                "{what} {path} is a directory; give a file name inside it, e.g. "
                "{example}"
            ).format(what=what, path=path, example=example)
        )
    if path.exists() and not path.is_file():
        raise SettingError(
            f"{what} {path} exists and is not a regular file; choose another path"
        )
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the nearest folder that exists
    if not folder.is_dir():
        raise SettingError(
            f"{what} {path}: {folder} is a file, not a folder; choose another path"
        )
    probe = _temp_name(folder / path.name)
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        os.unlink(probe)
    except OSError as e:
        raise SettingError(
            f"cannot write {what} {path}: {e.strerror} in "
            f"{folder}; choose a folder you can write to"
        ) from None
    remove_stale_temps(path)
    return path


def write_atomically(
    path: str | os.PathLike, write: Callable[[BinaryIO], object]
) -> Path:
    """Call ``write(f)`` on a temporary file beside `path`, then rename it onto `path`.

    The file gets the user's umask (0o644 under the usual 022); on any failure the
    temporary file is removed and a previous `path` is left as it was.

    Example: ``write_atomically("out.json", lambda f: f.write(b"{}"))``.
    """
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)  # umask applies
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
