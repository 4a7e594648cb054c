"""The learner's progress file (amp_lessons.teaching.progress): every visible check run
appends one record; two kernels at once lose nothing; a damaged file is set aside in
one line; nothing is written where progress is off (the grading sandbox, nbgrader,
make test); ``python -m amp_lessons progress`` reads, exports, imports and resets it;
the welcome lesson's table and each lesson's last line read the same file."""

import itertools
import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from paths import NOTEBOOKS_DIR, ROOT

from amp_lessons.cli import main
from amp_lessons.teaching import progress, self_study
from amp_lessons.teaching.lessons import (
    course_exercises,
    exercise_of,
    lesson_order,
    read_course,
)
from amp_lessons.teaching.progress_report import (
    lesson_end,
    next_step,
    progress_table,
)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """Progress on, in a data folder of the test's own (never the real one)."""
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter"))
    return tmp_path / "jupyter"


def learner_env(data: Path) -> dict:
    """A learner's kernel's environment: progress on, the data folder `data`."""
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    env["JUPYTER_DATA_DIR"] = str(data)
    return env


def run_python(code: str, env: dict) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_visible_check_is_recorded_with_its_lesson_and_exercise(data_dir):
    progress.record("check_update_rule", hidden=False, passed=True)
    progress.record("check_update_rule", hidden=True, passed=True)  # not recorded
    (entry,) = progress.read_records()
    assert (entry.lesson, entry.exercise, entry.check, entry.passed) == (
        "03_loss_scaling",
        "03_update_rule_test",
        "check_update_rule",
        True,
    )
    assert progress.progress_file() == data_dir / "amp_lessons" / "progress.jsonl"


def test_two_kernels_recording_at_once_lose_nothing(data_dir):
    code = """
        from amp_lessons.teaching import progress
        for i in range(200):
            progress.record("check_unscale", hidden=False, passed=i % 2 == 0)
    """
    env = learner_env(data_dir)
    kernels = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env)
        for _ in range(2)
    ]
    assert [k.wait(timeout=300) for k in kernels] == [0, 0]
    lines = progress.progress_file().read_text().splitlines()
    assert len(lines) == 400
    assert all(progress.Record.parse(line) for line in lines)
    assert not list(data_dir.glob("amp_lessons/progress.damaged-*"))


def test_a_truncated_file_is_set_aside_in_one_line_and_a_fresh_one_started(
    data_dir, capsys
):
    path = progress.progress_file()
    path.parent.mkdir(parents=True)
    good = progress.Record(
        progress.now(), "03_loss_scaling", "03_unscale_test", "check_unscale", True
    )
    damaged = good.line() + good.line()[:30]  # a crash in the middle of a line
    path.write_text(damaged)
    progress.record("check_update_rule", hidden=False, passed=False)
    said = capsys.readouterr().out.splitlines()
    assert len(said) == 1 and "set aside" in said[0], said
    (aside,) = path.parent.glob("progress.damaged-*.jsonl")
    assert aside.read_text() == damaged and aside.name in said[0]
    records = progress.read_records()  # the fresh file: the readable record, the new
    assert [r.exercise for r in records] == ["03_unscale_test", "03_update_rule_test"]
    assert capsys.readouterr().out == ""  # the fresh file is sound


def test_garbage_is_set_aside_when_read(data_dir, capsys):
    path = progress.progress_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"time": 1}\n\xff\xfe not json\n')
    assert progress.read_records() == []
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert path.read_text() == "" and len(list(path.parent.glob("*damaged*"))) == 1


def test_nothing_is_written_where_progress_is_off(data_dir, monkeypatch):
    monkeypatch.setenv(progress.ENV, "off")
    progress.record("check_update_rule", hidden=False, passed=True)
    assert not data_dir.exists()
    end = lesson_end("03_loss_scaling")
    assert "AMP_LESSONS_PROGRESS=off" in str(end) and end.next_lesson == "04_autocast"
    assert not data_dir.exists()


def test_make_test_records_nothing():
    """conftest.py turns progress off for every process the tests start, and the
    Makefile for its test targets (a notebook named alone never loads conftest)."""
    assert not progress.enabled()
    make = subprocess.run(
        ["make", "-pn", "test-notebook", "NB=x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    for target in ("test", "test-notebook", "test-newest-torch-tests"):
        assert f"{target}: AMP_LESSONS_PROGRESS = off" in make, target


def test_a_kernel_started_by_the_tests_writes_nothing(tmp_path):
    # what a make-test kernel inherits, with the data folder pointed at tmp_path
    env = {**os.environ, "JUPYTER_DATA_DIR": str(tmp_path)}
    run_python(
        """
        from amp_lessons.teaching import progress
        progress.record("check_update_rule", hidden=False, passed=True)
        """,
        env,
    )
    assert list(tmp_path.iterdir()) == []


def test_the_grading_sandbox_and_nbgrader_run_with_progress_off(tmp_path, monkeypatch):
    from amp_lessons.tooling.grading import runner
    from amp_lessons.tooling.grading.course import jupyter_env

    monkeypatch.delenv(progress.ENV, raising=False)
    assert jupyter_env(tmp_path)[progress.ENV] == "off"  # autograde, site, slides
    assert jupyter_env(tmp_path)[self_study.ENV] == "0"  # the hidden tests grade
    monkeypatch.setattr(os, "environ", dict(os.environ))
    job = {
        "workdir": str(tmp_path / "work"),
        "name": "lesson.ipynb",
        "notebook": {},
        "private_dir": str(tmp_path / "private"),
        **dict.fromkeys(
            ("key", "fifo", "package_root", "test_cells", "course_cells", "protected")
        ),
    }
    runner._prepare(job)  # the environment the sandboxed kernel starts with
    assert os.environ[progress.ENV] == "off"
    assert os.environ[self_study.ENV] == "0"


def test_lessons_and_totals_come_from_the_notebooks():
    assert course_exercises() == read_course(), (
        "amp_lessons/teaching/data/lessons.json is not current: run "
        "python -m amp_lessons.teaching.lessons"
    )
    order = lesson_order()
    assert order[:3] == ("00_amp_in_10_minutes", "00_welcome", "01_number_formats")
    assert order == tuple(sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb")))
    exercises = course_exercises()
    for path in NOTEBOOKS_DIR.glob("*.ipynb"):
        graded = [
            c
            for c in json.loads(path.read_text())["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")
        ]
        assert len(exercises[path.stem]) == len(graded), path.name
        for e in exercises[path.stem]:
            assert exercise_of(e.check) == e
    assert exercise_of("check_quick_check[why_scale]").grade_id == (
        "08_quick_check_why_scale"
    )


def test_next_step_is_the_next_exercise_then_the_next_lesson(data_dir):
    assert next_step(progress_table().rows) == ("00_amp_in_10_minutes", None)
    progress.record("check_update_rule", hidden=False, passed=True)
    lesson, exercise = next_step(progress_table().rows)
    assert (lesson, exercise.function) == ("03_loss_scaling", "unscale_grads")
    progress.record("check_unscale", hidden=False, passed=True)
    assert next_step(progress_table().rows) == ("04_autocast", None)
    end = lesson_end("03_loss_scaling")
    assert (end.passed, end.total, end.next_lesson) == (2, 2, "04_autocast")
    assert "[04_autocast](04_autocast.ipynb)" in end._repr_markdown_()


def test_a_lesson_of_one_exercise_says_whether_it_is_passed(data_dir):
    assert len(course_exercises()["04_autocast"]) == 1
    end = str(lesson_end("04_autocast"))
    assert "Your progress in 04_autocast: its one exercise is not passed yet." in end
    (exercise,) = course_exercises()["04_autocast"]
    progress.record(exercise.check, hidden=False, passed=True)
    end = str(lesson_end("04_autocast"))
    assert "Your progress in 04_autocast: its one exercise is passed." in end
    assert "of 1 exercises" not in end
    progress.record("check_update_rule", hidden=False, passed=True)
    two = str(lesson_end("03_loss_scaling"))  # two or more: counted as before
    assert "Your progress in 03_loss_scaling: 1 of 2 exercises passed." in two


@pytest.fixture
def ordered_clock(monkeypatch):
    """Records a millisecond apart, in the order made (the lesson worked on last is
    the one recorded last)."""
    clock = itertools.count()
    start = datetime(2026, 12, 7, tzinfo=timezone.utc)
    monkeypatch.setattr(
        progress,
        "now",
        lambda: (start + timedelta(milliseconds=next(clock))).isoformat(
            timespec="milliseconds"
        ),
    )


def test_lessons_left_behind_are_named_beside_the_next_step(data_dir, ordered_clock):
    for lesson in ("04_autocast", "06_speed_memory"):  # 03 and 05 skipped
        for exercise in course_exercises()[lesson]:
            progress.record(exercise.check, hidden=False, passed=True)
    table = progress_table()
    assert next_step(table.rows) == ("07_clinic", None)
    text = str(table)
    assert "Next, from where you left off: open 07_clinic." in text
    assert (
        "Still to do in earlier lessons: 00_amp_in_10_minutes, 01_number_formats, "
        "02_underflow, 03_loss_scaling, 05_amp_loop." in text
    )
    assert table.as_dict()["left_behind"][-2:] == ["03_loss_scaling", "05_amp_loop"]
    assert progress_table([]).left_behind("00_amp_in_10_minutes") == []


def test_after_the_last_lesson_the_next_step_is_what_is_left(data_dir, ordered_clock):
    # lesson 11 done, the rest not: the course is not complete, the next step is
    # the first exercise left in reading order
    for exercise in course_exercises()["11_fp8"]:
        progress.record(exercise.check, hidden=False, passed=True)
    lesson, exercise = next_step(progress_table().rows)
    first = course_exercises()["00_amp_in_10_minutes"][0]
    assert (lesson, exercise) == ("00_amp_in_10_minutes", first)
    end = str(lesson_end("11_fp8"))
    assert "course is complete" not in end and "This was the last lesson." in end
    assert f"Still to do in the course: write {first.function} in" in end
    assert "the course is complete" not in str(progress_table())
    assert (  # not "from where you left off": that was lesson 11
        f"Next, the first exercise still to do: write {first.function} in"
        in str(progress_table())
    )
    for exercises in course_exercises().values():
        for exercise in exercises:
            progress.record(exercise.check, hidden=False, passed=True)
    assert next_step(progress_table().rows) == (None, None)
    end = str(lesson_end("11_fp8"))
    assert "the course is complete" in end and "Still to do" not in end
    assert "the course is complete" in str(progress_table())


@pytest.mark.slow
def test_after_a_restart_the_welcome_table_counts_the_pass(tmp_path):
    """The entry exercise solved and checked in one kernel; a new kernel (a
    restart) shows it passed, and `progress` names the next exercise."""
    nb = json.loads((NOTEBOOKS_DIR / "00_amp_in_10_minutes.ipynb").read_text())
    cells = {
        c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): c
        for c in nb["cells"]
    }
    solution = "".join(cells["00_entry_amp_step"]["source"])
    check = "".join(cells["00_entry_amp_step_test"]["source"]).split(
        "### BEGIN HIDDEN TESTS"
    )[0]
    env = learner_env(tmp_path)
    out = run_python(
        "import torch\nimport torch.nn.functional as F\n" + solution + "\n" + check,
        env,
    )
    assert "all" in out and "passed" in out, out
    # a new process (the restart): the welcome's table, then the command line
    shown = run_python(
        """
        from amp_lessons.cli import main
        from amp_lessons.teaching.progress_report import progress_table
        print(progress_table())
        print("---")
        main(["progress", "--json"])
        """,
        env,
    )
    table, _, as_json = shown.partition("---\n")
    row = next(line for line in table.splitlines() if "00_amp_in_10_minutes" in line)
    assert "1 of 2" in row, table
    data = json.loads(as_json)
    assert data["next"]["exercise"] == "00_entry_quiz_test", data["next"]


def run_cli(*argv, stdin=""):
    import io

    sys.stdin = io.StringIO(stdin)
    try:
        return main(["progress", *argv])
    finally:
        sys.stdin = sys.__stdin__


def test_cli_json_export_import_and_reset(data_dir, tmp_path, capsys):
    progress.record("check_update_rule", hidden=False, passed=True)
    assert run_cli("--json") == 0
    data = json.loads(capsys.readouterr().out)
    row = next(r for r in data["lessons"] if r["lesson"] == "03_loss_scaling")
    assert (row["passed"], row["total"]) == (1, 2)
    assert data["next"]["function"] == "unscale_grads"

    exported = tmp_path / "elsewhere.jsonl"
    assert run_cli("--export", str(exported)) == 0
    assert run_cli("--reset", stdin="n\n") == 1  # asks first; No leaves it
    assert len(progress.read_records()) == 1
    assert run_cli("--reset", "--yes") == 0
    assert progress.read_records() == []
    progress.record("check_unscale", hidden=False, passed=False)
    capsys.readouterr()
    for merged in (1, 0):  # a second import adds nothing: identical records
        assert run_cli("--import", str(exported)) == 0
        assert f"{merged} new records" in capsys.readouterr().out
    assert sorted(r.check for r in progress.read_records()) == [
        "check_unscale",
        "check_update_rule",
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a record\n")
    assert run_cli("--import", str(bad)) == 2
    assert "line 1 is not a progress record" in capsys.readouterr().err


def test_cli_speaks_spanish(data_dir, capsys):
    assert main(["progress", "--lang", "es"]) == 0
    out = capsys.readouterr().out
    assert "lección" in out and "Siguiente" in out, out


@pytest.mark.slow
def test_a_sandboxed_grading_records_nothing_and_the_lesson_still_ends(tmp_path):
    """One submission graded in bwrap: its check runs and the lesson's last cell
    prints its line (the index travels with the package), progress off."""
    from test_sandbox import require_sandbox, tiny_notebook

    from amp_lessons.tooling.grading import sandbox

    require_sandbox()
    test = (
        "import amp_lessons.teaching.checks as _checks\n_checks.verify_pristine()\n"
        "_checks.check_amp_step_order(amp_step_order)"
    )
    end = (
        "from amp_lessons.teaching import progress\n"
        "from amp_lessons.teaching.progress_report import lesson_end\n"
        "print(progress.enabled())\n"
        'print(lesson_end("05_amp_loop"))'
    )
    nb = tiny_notebook("def amp_step_order():\n    return []\n", test, end)
    run = sandbox.run_notebook(
        nb, tmp_path, test_cells={1: test}, course_cells=[test], protected=[]
    )
    assert run.reason is None, run.reason
    [verdict] = [r for r in run.records if r["kind"] == "check"]
    assert verdict["genuine"] and not verdict["passed"]
    outputs = run.notebook.cells[2].outputs
    text = "".join(o.get("text", "") for o in outputs)
    assert {o.output_type for o in outputs} == {"stream"}, outputs
    assert text.startswith("False\n") and "06_speed_memory" in text, text


def test_the_site_and_the_slides_leave_the_progress_cells_out():
    """A static page has no learner: the site drops the welcome's table and each
    lesson's last line; the slides skip them."""
    import nbformat

    from amp_lessons.tooling.site.sanitize import sanitize

    for stem in ("00_welcome", "03_loss_scaling"):
        nb = nbformat.read(NOTEBOOKS_DIR / f"{stem}.ipynb", as_version=4)
        ours = [
            c
            for c in nb.cells
            if {"lesson-end", "learner-progress"} & set(c.metadata.get("tags", []))
        ]
        assert len(ours) == (5 if stem == "00_welcome" else 2)
        assert all(c.metadata["slideshow"]["slide_type"] == "skip" for c in ours)
        page = sanitize(nb, leaks=set())
        assert not any("lesson_end" in c.source for c in page.cells), stem
        assert not any("progress_table" in c.source for c in page.cells), stem


@pytest.mark.slow
def test_gpu_check_runs_the_lessons_with_progress_off(tmp_path, monkeypatch):
    import time

    import nbformat

    from amp_lessons.tooling import gpu_check

    monkeypatch.delenv(progress.ENV, raising=False)  # as make gpu-check starts
    cell = nbformat.v4.new_code_cell(f"import os\nprint(os.environ[{progress.ENV!r}])")
    nb = nbformat.v4.new_notebook(cells=[cell])
    src = tmp_path / "lesson.ipynb"
    nbformat.write(nb, src)
    dest = tmp_path / "ran.ipynb"
    assert gpu_check.execute_lesson(src, dest, time.time() + 120) == ""
    ran = nbformat.read(dest, as_version=4)
    assert ran.cells[0].outputs[0]["text"] == "off\n"
