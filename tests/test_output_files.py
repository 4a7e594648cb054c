"""amp_lessons.core.output_files: paths refused before any work, atomic writes with the
user's umask, and the leftovers of a killed write told apart from a live one."""

import os
import stat
import subprocess
import sys

import pytest

from amp_lessons.core.output_files import (
    remove_stale_temps,
    validate_output_path,
    write_atomically,
)


def test_write_gets_the_umask_and_replaces_atomically(tmp_path):
    path = tmp_path / "out.json"
    old = os.umask(0o027)
    try:
        write_atomically(path, lambda f: f.write(b"one"))
    finally:
        os.umask(old)
    assert path.read_bytes() == b"one" and stat.S_IMODE(path.stat().st_mode) == 0o640

    def fails(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, fails)
    assert path.read_bytes() == b"one" and list(tmp_path.iterdir()) == [path]


def test_leftovers_of_dead_writers_go_and_a_live_writers_stays(tmp_path):
    path = tmp_path / "run.pt"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".run.pt.{int(dead.stdout)}.0badc0de.tmp"
        legacy = tmp_path / "run.pt.k2j3h4l5.tmp"  # tempfile.mkstemp's old name
        busy = tmp_path / f".run.pt.{live.pid}.0badc0de.tmp"
        other = tmp_path / ".other.pt.1.0badc0de.tmp"  # another file's: not ours
        for p in (stale, legacy, busy, other):
            p.write_bytes(b"partial")
        assert sorted(remove_stale_temps(path)) == sorted([stale, legacy])
        assert busy.exists() and other.exists()
    finally:
        live.kill()
        live.wait()


@pytest.mark.parametrize("case", ["directory", "under a file", "proc"])
def test_unwritable_paths_are_refused_with_what_to_do(case, tmp_path):
    (tmp_path / "f").write_text("x")
    path = {
        "directory": tmp_path,
        "under a file": tmp_path / "f" / "out.json",
        "proc": "/proc/amp_lessons_out.json",
    }[case]
    with pytest.raises(ValueError, match="--json") as info:
        validate_output_path(path, "--json")
    message = str(info.value)
    assert "\n" not in message
    assert {
        "directory": "is a directory; give a file name inside it, e.g.",
        "under a file": "is a file, not a folder",
        "proc": "choose a folder you can write to",
    }[case] in message


def test_a_missing_parent_is_fine_and_not_created_by_the_check(tmp_path):
    path = tmp_path / "a" / "b" / "out.json"
    assert validate_output_path(path, "--json") == path
    assert list(tmp_path.iterdir()) == []  # no folder, no probe file left
    write_atomically(path, lambda f: f.write(b"{}"))
    assert path.read_bytes() == b"{}"
