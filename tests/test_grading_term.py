"""The instructor's term around the grading: hand-in under messy names, the
gradebook an instructor can post (per exercise, core and optional apart, times,
flags), feedback a student may see, and regrading only what changed.

The fast tests check each piece on its own; ``test_a_class_of_six`` files a class
of six under the names browsers, JupyterLab and an LMS give, grades it with two jobs
and checks the CSV, the feedback pages and a resubmission (about a minute).
"""

import csv
import datetime
import json
import re

import nbformat
import pytest
from paths import LESSONS as LESSON_PATHS
from test_grading import code, graded_test, md, sol, solution, write
from test_tooling import served  # noqa: F401 (a fixture)

from amp_lessons.tooling import grading
from amp_lessons.tooling.grading import (
    autograder,
    feedback,
    gradebook,
    handin,
    sandbox,
)

LESSONS = ["00_amp_in_10_minutes", "00_welcome", "03_loss_scaling", "01_pair"]


# ---------------------------------------------------------------------------------
# Hand-in


@pytest.mark.parametrize(
    ("name", "lesson"),
    [
        ("03_loss_scaling.ipynb", "03_loss_scaling"),
        ("03_loss_scaling-Copy1.ipynb", "03_loss_scaling"),
        ("03_loss_scaling-Copy12.ipynb", "03_loss_scaling"),
        ("03_loss_scaling (1).ipynb", "03_loss_scaling"),
        ("03_loss_scaling - Alice Smith.ipynb", "03_loss_scaling"),
        ("03_Loss_Scaling.IPYNB", "03_loss_scaling"),
        ("alice_1234_assignsubmission_file_03_loss_scaling.ipynb", "03_loss_scaling"),
        ("03 loss scaling.ipynb", "03_loss_scaling"),
        ("00_amp_in_10_minutes-Copy2.ipynb", "00_amp_in_10_minutes"),
    ],
)
def test_a_lesson_is_found_in_a_messy_name(name, lesson):
    assert handin.find_lesson(name, LESSONS) == lesson


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("notes.ipynb", "not a lesson of this course"),
        ("03_loss_scaling.py", "not a notebook"),
        ("03_loss_scaling and 01_pair.ipynb", "names 01_pair and 03_loss_scaling"),
        ("03_loss.ipynb", "not a lesson of this course"),
    ],
)
def test_a_name_that_is_no_lesson_or_two_is_refused_in_one_line(name, refusal):
    with pytest.raises(ValueError, match=refusal) as info:
        handin.find_lesson(name, LESSONS)
    assert "\n" not in str(info.value)


def test_a_student_id_becomes_a_safe_folder_name():
    assert handin.safe_student_id("alice") == "alice"
    assert handin.safe_student_id("Alice Smith") == "Alice_Smith"
    assert handin.safe_student_id("  José  Núñez ") == "Jose_Nunez"
    assert handin.safe_student_id("a.b@uni.edu") == "a.b@uni.edu"
    for bad in ["../bob", "a/b", "", "..", "***"]:
        with pytest.raises(ValueError, match="student id"):
            handin.safe_student_id(bad)


def _tiny_course(tmp_path):
    """A course with one lesson, 01_pair, without running nbgrader."""
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    write(notebooks / "01_pair.ipynb", [md("# 01 · Pair"), code("x = 1")])
    return grading.build_course([notebooks / "01_pair.ipynb"], tmp_path / "course")


def test_a_resubmission_keeps_the_earlier_one_with_its_time(tmp_path, capsys):
    course = _tiny_course(tmp_path)
    first, second = tmp_path / "01_pair.ipynb", tmp_path / "01_pair (1).ipynb"
    first.write_text('{"first": 1}')
    second.write_text('{"second": 2}')
    monday = datetime.datetime(2026, 12, 7, 9, 30, tzinfo=datetime.UTC)
    [filed] = handin.file_hand_ins("Alice Smith", [first], course, at=monday)
    assert filed.student == "Alice_Smith" and filed.kept is None
    folder = course / "submitted" / "Alice_Smith" / "01_pair"
    assert (folder / "timestamp.txt").read_text() == "2026-12-07 09:30:00.000000 UTC"
    assert len((folder / "submission_secret.txt").read_text()) == 128
    from nbgrader.utils import parse_utc  # nbgrader reads our time

    assert parse_utc((folder / "timestamp.txt").read_text()) == monday.replace(
        tzinfo=None
    )
    code_ = grading.main(
        ["--course", str(course), "submit", "Alice Smith", str(second)]
    )
    out = capsys.readouterr().out
    assert code_ == 0
    assert "student id 'Alice Smith' filed as 'Alice_Smith'" in out
    assert "the earlier hand-in is kept" in out
    assert json.loads((folder / "01_pair.ipynb").read_text()) == {"second": 2}
    [kept] = (course / "history" / "Alice_Smith" / "01_pair").glob("*.ipynb")
    assert kept.name.startswith("20261207093000")
    assert json.loads(kept.read_text()) == {"first": 1}
    assert kept.with_suffix(".timestamp.txt").read_text().startswith("2026-12-07")


def test_every_submit_refusal_is_one_line(tmp_path, capsys):
    course = _tiny_course(tmp_path)
    notebook = tmp_path / "01_pair.ipynb"
    notebook.write_text("{}")
    for argv, says in [
        (["submit", "alice", str(tmp_path / "notes.ipynb")], "not a lesson"),
        (["submit", "../bob", str(notebook)], "student id"),
        (["submit", "alice", str(tmp_path / "01_pair-Copy1.ipynb")], "no such file"),
        (["submit", "alice", str(notebook), str(notebook)], "a second file"),
    ]:
        assert grading.main(["--course", str(course), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert grading.main(["--course", str(empty), "submit", "a", str(notebook)]) == 2
    assert "run `make student` first" in capsys.readouterr().err


def test_the_generated_config_names_modules_that_exist():
    """nbgrader_config.py's comments and settings name the course's modules."""
    from pathlib import Path

    text = grading.nbgrader_config(Path("build/course"))
    grading_dir = Path(grading.__file__).parent
    for module in re.findall(r"amp_lessons/tooling/grading/(\w+)\.py", text):
        assert (grading_dir / f"{module}.py").exists(), module
    for dotted in re.findall(r"'(amp_lessons\.tooling\.grading\.\w+)\.\w+'", text):
        assert (grading_dir / f"{dotted.rsplit('.', 1)[1]}.py").exists(), dotted


# ---------------------------------------------------------------------------------
# Exercises: core and optional


def test_optional_exercises_are_read_from_the_headings_above_them():
    from paths import NOTEBOOKS_DIR

    optional = {
        ex.grade_id
        for path in grading.graded_notebooks(NOTEBOOKS_DIR)
        for ex in gradebook.exercises(nbformat.read(path, as_version=4))
        if ex.optional
    }
    # what INSTRUCTORS.md's table marks "(optional)"
    guide = (NOTEBOOKS_DIR / "INSTRUCTORS.md").read_text()
    marked = set(re.findall(r"`(\w+)` \(optional\)", guide))
    named = {
        re.sub(r"^\d+_(formats_|practice_)?", "", g).removesuffix("_test")
        for g in optional
    }
    assert named == marked, (named, marked)
    spanish = {
        ex.grade_id
        for path in grading.graded_notebooks(NOTEBOOKS_DIR / "es")
        for ex in gradebook.exercises(nbformat.read(path, as_version=4))
        if ex.optional
    }
    assert spanish == optional


# ---------------------------------------------------------------------------------
# Feedback: only what a student may see


def _test_cell(outputs):
    cell = nbformat.v4.new_code_cell("check()")
    cell.outputs = outputs
    cell.execution_count = 3
    return cell


def _stream(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _error(ename, evalue):
    return nbformat.v4.new_output(
        "error",
        ename=ename,
        evalue=evalue,
        traceback=["File /home/teacher/amp/_engine.py line 3", "secret frame"],
    )


def test_feedback_keeps_the_visible_table_and_cuts_the_hidden_one():
    visible = (
        "check_update_rule: 2 cases\n  case  expected  got  result\n"
        "  overflow  0.5  0.5  ok\nall 2 cases passed\n"
    )
    hidden = (
        "check_update_rule: 3 hidden cases\n  secret_case  1024.0  2048.0  FAIL\n"
        "      hint: halve it\n"
    )
    cell = _test_cell(
        [_stream(visible + hidden), _error("AssertionError", "1 of 3 cases failed")]
    )
    shown, error, hidden_failed = feedback.visible_output(cell)
    assert "overflow" in shown and "all 2 cases passed" in shown
    assert "secret_case" not in shown and "hidden" not in shown
    assert error is None and hidden_failed  # said in a sentence instead
    # an error after the visible cases passed, before the hidden ones ran: shown
    pristine = _test_cell(
        [_stream(visible), _error("AssertionError", "the grading code was changed")]
    )
    assert feedback.visible_output(pristine)[1:] == (
        "AssertionError: the grading code was changed",
        False,
    )
    spanish = _test_cell(
        [
            _stream(
                "check_x: 2 casos\n  a  1  1  ok\ntodos los 2 casos superados\n"
                "check_x: 3 casos ocultos\n  secreto  1  2  FALLO\n"
            )
        ]
    )
    from amp_lessons import i18n

    i18n.set_language("es")
    try:
        header = i18n._("{title}: {total} hidden cases").format(
            title="check_x", total=3
        )
    finally:
        i18n.set_language("en")
    spanish.outputs[0].text = spanish.outputs[0].text.replace(
        "check_x: 3 casos ocultos", header
    )
    shown, _, _ = feedback.visible_output(spanish)
    assert "secreto" not in shown and "a  1  1  ok" in shown


@pytest.mark.parametrize("lang", ["en", "es"])
@pytest.mark.parametrize("total", [1, 3])
def test_feedback_cuts_each_hidden_header_the_checks_print(lang, total):
    """The headers as checks/_table.py prints them (one case in the singular), in
    each language: the hidden table is cut, the visible one kept."""
    from amp_lessons import i18n
    from amp_lessons.teaching.checks._table import header

    i18n.set_language(lang)
    try:
        visible = header("check_x", total, hidden=False)
        hidden = header("check_x", total, hidden=True)
    finally:
        i18n.set_language("en")
    assert ("case" in visible) == (lang == "en") and visible != hidden
    cell = _test_cell(
        [
            _stream(
                f"{visible}\n  shown_case  1  1  ok\n{hidden}\n  secret  1  2  FAIL\n"
            )
        ]
    )
    # a header form feedback.py does not know leaves the hidden table on the page
    shown, _, _ = feedback.visible_output(cell)
    assert "shown_case" in shown and "secret" not in shown and visible in shown


def test_feedback_shows_an_error_in_one_line_without_paths():
    cell = _test_cell(
        [
            _stream("check_x: 2 cases\n  a  1  2  FAIL\n"),
            _error("NameError", "name 'f' is not defined in /home/teacher/x/nb.py"),
        ]
    )
    shown, error, _ = feedback.visible_output(cell)
    assert error == "NameError: name 'f' is not defined in nb.py"
    assert feedback.without_paths("C:\\Users\\t\\a.py and /tmp/ipykernel_1/2.py") == (
        "a.py and 2.py"
    )


def test_a_feedback_page_says_each_flag_plainly_and_hides_a_forged_pass():
    row = {
        "student": "cheater",
        "lesson": "01_pair",
        "score": 0.0,
        "max_score": 3.0,
        "core_score": 0.0,
        "core_max": 2.0,
        "optional_score": 0.0,
        "optional_max": 1.0,
        "submitted_at": "",
        "flags": [
            "tamper: cell 4 (01_pair_double_test) scored 0: check_double's pass is "
            "not trustworthy: changed: /home/teacher/amp/_engine.py",
            "scan: cell 3 line 1: imports os (`import os`)",
        ],
        "exercises": {
            "01_pair_double_test": {
                "title": "Exercise: double",
                "score": 0.0,
                "max_score": 2.0,
                "optional": False,
            }
        },
    }
    cell = _test_cell([_stream("check_double: 2 cases\nall 2 cases passed\n")])
    cell.metadata["nbgrader"] = {
        "grade": True,
        "solution": False,
        "grade_id": "01_pair_double_test",
        "points": 2,
    }
    nb = nbformat.v4.new_notebook(cells=[cell])
    page = feedback.feedback_html(row, nb)
    assert "all 2 cases passed" not in page  # the forged pass
    assert "could not be trusted" in page
    assert "imports os" in page
    assert "/home/" not in page and "_engine" not in page
    assert "Handed in: -" in page
    assert "Comentarios" in feedback.feedback_html(row, nb, "es")


# ---------------------------------------------------------------------------------
# A class of six on two lessons


def _class_lessons(folder):
    folder.mkdir(parents=True)
    hidden_table = (
        "### BEGIN HIDDEN TESTS\n"
        "print('check_double: 1 hidden case')\n"
        "print('  secret_case  -6  FAIL')\n"
        "assert double(-3) == -6\n"
        "### END HIDDEN TESTS"
    )
    pair = write(
        folder / "01_pair.ipynb",
        [
            md("# 01 · Pair", "slide"),
            md("## Exercise: double", "subslide"),
            solution("def double(x):\n" + sol("return 2 * x"), "01_pair_double"),
            graded_test(
                "print('check_double: 1 case')\nprint('  two  4  ok')\n"
                "assert double(2) == 4\nprint('the case passed')\n" + hidden_table,
                "01_pair_double_test",
                points=2,
            ),
            md("## Exercise (optional): half", "subslide"),
            solution("def half(x):\n" + sol("return x / 2"), "01_pair_half"),
            graded_test("assert half(3) == 1.5", "01_pair_half_test", points=1),
        ],
    )
    other = write(
        folder / "02_other.ipynb",
        [
            md("# 02 · Other", "slide"),
            md("## Exercise: triple", "subslide"),
            solution("def triple(x):\n" + sol("return 3 * x"), "02_other_triple"),
            graded_test("assert triple(1) == 3", "02_other_triple_test", points=1),
        ],
    )
    plain = write(folder / "00_intro.ipynb", [md("# 00 · Intro", "slide")])
    return [plain, pair, other]


def _variant(source, dest, old, new):
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = source.read_text()
    assert old in text, old
    dest.write_text(text.replace(old, new))
    return dest


@pytest.mark.slow
def test_a_class_of_six(tmp_path, capsys):
    plain, pair, other = _class_lessons(tmp_path / "nb")
    course = grading.build_course([plain, pair, other], tmp_path / "course")
    grading.generate_student_edition(course)
    blank = course / "release" / "01_pair" / "01_pair.ipynb"
    inbox = tmp_path / "inbox"
    hand_ins = {
        "amy": [
            _variant(pair, inbox / "amy" / "01_pair-Copy1.ipynb", "", ""),
            _variant(other, inbox / "amy" / "02_Other (1).ipynb", "", ""),
        ],
        "Bob Jones": [_variant(blank, inbox / "01_pair - Bob Jones.ipynb", "", "")],
        # core wrong, optional right: 1 of 3, 0 core
        "cy": [
            _variant(pair, inbox / "cy" / "01_pair.ipynb", "return 2 * x", "return x")
        ],
        # passes the visible case, fails the hidden one
        "dee": [
            _variant(
                pair,
                inbox / "dee" / "01_pair.ipynb",
                "return 2 * x",
                "return 4 if x == 2 else 0",
            )
        ],
        # an exception, and a scan flag
        "eve": [
            _variant(
                pair,
                inbox / "eve" / "01_pair.ipynb",
                "return 2 * x",
                "import os\\n    raise ValueError(os.sep)",
            )
        ],
        # a corrupt file
        "fay": [_variant(other, inbox / "fay" / "02_other.ipynb", "{", "{{")],
    }
    for student, files in hand_ins.items():
        assert (
            grading.main(["--course", str(course), "submit", student, *map(str, files)])
            == 0
        )
    sandboxed = sandbox.sandbox_problem() is None
    options = {"sandboxed": sandboxed, "jobs": 2, "changed_only": True}
    outcomes = autograder.autograde(course, **options)
    assert len(outcomes) == 7
    table = {(r["student"], r["lesson"]): r for r in gradebook.rows(course)}
    assert sorted(table) == sorted(
        [
            ("amy", "01_pair"),
            ("amy", "02_other"),
            ("Bob_Jones", "01_pair"),
            ("cy", "01_pair"),
            ("dee", "01_pair"),
            ("eve", "01_pair"),
            ("fay", "02_other"),
        ]
    )  # nothing for lessons not handed in, nothing for 00_intro
    score = {k: (r["core_score"], r["optional_score"]) for k, r in table.items()}
    assert score[("amy", "01_pair")] == (2, 1)
    assert score[("Bob_Jones", "01_pair")] == (0, 0)
    assert score[("cy", "01_pair")] == (0, 1)
    assert score[("dee", "01_pair")] == (0, 1)
    assert table[("fay", "02_other")]["flags"][0].startswith("corrupt:")
    assert any("imports os" in f for f in table[("eve", "01_pair")]["flags"])
    assert all(r["submitted_at"] for r in table.values())

    csv_path = tmp_path / "grades.csv"
    assert (
        grading.main(["--course", str(course), "grades", "--csv", str(csv_path)]) == 0
    )
    with csv_path.open() as f:
        written = list(csv.DictReader(f))
    assert len(written) == 7
    amy = next(r for r in written if (r["student"], r["lesson"]) == ("amy", "01_pair"))
    assert amy["01_pair_double (core, /2)"] == "2"
    assert amy["01_pair_half (optional, /1)"] == "1"
    assert amy["02_other_triple (core, /1)"] == ""
    fay = next(r for r in written if r["student"] == "fay")
    assert "corrupt" in fay["flags"]
    capsys.readouterr()
    assert grading.main(["--course", str(course), "grades", "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert {"student", "lesson", "score", "max_score", "flags"} <= set(as_json[0])

    pages = feedback.write_feedback(course)
    assert len(pages) == 7
    for page in pages:
        text = page.read_text()
        assert "secret_case" not in text and "1 hidden case" not in text
        assert "BEGIN HIDDEN" not in text and "assert double(-3)" not in text
        assert "Traceback" not in text and "_engine" not in text
        assert str(tmp_path) not in text and "/home/" not in text
    dee = (course / "feedback" / "dee" / "01_pair" / "01_pair.html").read_text()
    assert "two  4  ok" in dee and "failed hidden cases" in dee
    assert "Exercise (optional): half: 1 of 1 points" in dee
    assert (course / "feedback" / "dee" / "01_pair" / "timestamp.txt").exists()

    # a resubmission: the first is kept, and only it is graded again
    fixed = _variant(pair, inbox / "cy2" / "01_pair (2).ipynb", "", "")
    assert grading.main(["--course", str(course), "submit", "cy", str(fixed)]) == 0
    assert len(list((course / "history" / "cy" / "01_pair").glob("*.ipynb"))) == 1
    again = autograder.autograde(course, **options)
    assert [(o.student, o.lesson) for o in again] == [("cy", "01_pair")]
    assert "unchanged since graded" in capsys.readouterr().out
    new = {(r["student"], r["lesson"]): r["score"] for r in gradebook.rows(course)}
    assert new[("cy", "01_pair")] == 3
    assert autograder.autograde(course, **options) == []
    # a new gradebook: nothing in it is kept for being unchanged on disk
    (course / "gradebook.db").rename(course / "old.db")
    grading.run_nbgrader(course, "generate_assignment", "*", "--force")
    assert len(autograder.autograde(course, lesson="02_other", **options)) == 2
    # nbgrader's own autograde of an untouched student edition warns of nothing
    log = grading.run_nbgrader(course, "autograde", "01_pair", "--student=Bob_Jones")
    assert "has changed" not in log and "Bob_Jones" in log


# ---------------------------------------------------------------------------------
# Handouts: the decks without answers


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def _solution_lines(nb) -> set[str]:
    """The lines of the solutions that appear nowhere else in the lesson."""
    elsewhere = {
        line.strip()
        for c in nb.cells
        if not grading.is_solution_cell(c)
        for line in c.source.splitlines()
    }
    lines = set()
    for cell in nb.cells:
        if grading.is_solution_cell(cell) and cell.cell_type == "code":
            inside = False
            for line in cell.source.splitlines():
                if "BEGIN SOLUTION" in line or "END SOLUTION" in line:
                    inside = "BEGIN" in line
                elif inside and len(line.strip()) > 6:
                    lines.add(line.strip())
    return lines - elsewhere


@pytest.mark.parametrize("path", [p for p in LESSON_PATHS if grading.is_graded(p)])
def test_a_handout_holds_no_line_of_a_solution(path):
    from amp_lessons.tooling.grading import deck_layout

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # as if executed: what the checks print of the answers
        if grading.is_test_cell(cell):
            cell.outputs = [_stream("all 3 cases passed\n  key: B  ok\n")]
    solution_lines = _solution_lines(nb)
    assert solution_lines, "a graded lesson has solution lines"
    handout = deck_layout.lay_out_deck(nb, handout=True)
    shown = "\n".join(
        [c.source for c in handout.cells]
        + [o.get("text", "") for c in handout.cells for o in c.get("outputs", [])]
    )
    assert solution_lines.isdisjoint(_lines(shown))
    assert "key: B" not in shown and "HIDDEN TESTS" not in shown
    assert not any(
        c.metadata.get("slideshow", {}).get("slide_type") == "notes"
        for c in handout.cells
    )
    presenter = deck_layout.lay_out_deck(nb)
    shown = "\n".join(c.source for c in presenter.cells)
    assert not solution_lines.isdisjoint(_lines(shown))  # the test can fail


def test_slides_of_one_lesson_with_its_handout(tmp_path, capsys):
    from paths import NOTEBOOKS_DIR

    out = tmp_path / "slides"
    argv = ["slides", "08", "--no-execute", "--out", str(out)]
    assert grading.main(argv) == 0
    assert sorted(p.name for p in out.glob("*.slides.html")) == [
        "08_quick_check.slides.html"
    ]
    handout = (out / "handout" / "08_quick_check.slides.html").read_text()
    nb = nbformat.read(NOTEBOOKS_DIR / "08_quick_check.ipynb", as_version=4)
    import html as html_lib

    text = html_lib.unescape(re.sub(r"<[^>]+>", "", handout))
    assert _solution_lines(nb).isdisjoint(_lines(text))
    presenter = html_lib.unescape(
        re.sub(r"<[^>]+>", "", (out / "08_quick_check.slides.html").read_text())
    )
    assert not _solution_lines(nb).isdisjoint(_lines(presenter))
    assert (out / "handout" / "_assets" / "reveal.js" / "dist" / "reveal.js").exists()
    assert grading.main(["slides", "nope", "--out", str(out)]) == 2
    assert "'nope' is no lesson" in capsys.readouterr().err


# ---------------------------------------------------------------------------------
# The student install: CPU torch on a Linux machine without an NVIDIA GPU


def _fake_course_wheel(folder):
    """A stand-in amp_lessons wheel that needs torch, as the real one does."""
    import zipfile

    wheel = folder / "amp_lessons-0.1.0-py3-none-any.whl"
    info = "amp_lessons-0.1.0.dist-info/"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("amp_lessons/__init__.py", "")
        archive.writestr(
            info + "METADATA",
            "Metadata-Version: 2.1\nName: amp_lessons\nVersion: 0.1.0\n"
            "Requires-Dist: torch>=2.13,<3\n",
        )
        archive.writestr(
            info + "WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n",
        )
        archive.writestr(info + "RECORD", "")
    return wheel


@pytest.mark.slow
def test_the_student_install_gets_the_cpu_torch_the_instructor_grades_on(
    tmp_path,
    served,  # noqa: F811 (test_tooling's fixture)
):
    import os
    import shutil
    import subprocess
    import sys

    from paths import ROOT
    from test_tooling import fake_torch_index

    folder, url = served
    fake_torch_index(folder / "cpu", "2.13.0+cpu")  # PyTorch's CPU index
    fake_torch_index(folder / "pypi", "2.14.1")  # PyPI: the CUDA build, newer
    student = tmp_path / "student"
    student.mkdir()
    _fake_course_wheel(student)
    for name, dest in grading.course.INSTALL_FILES.items():
        shutil.copyfile(ROOT / "amp_lessons" / "tooling" / name, student / dest)
    (student / grading.course.TORCH_PIN).write_text("2.13.0\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_CACHE_DIR="1",
        PIP_INDEX_URL=f"{url}pypi/",
        AMP_LESSONS_TORCH_INDEX=f"{url}cpu/",
        AMP_LESSONS_GPU="0",
    )
    done = subprocess.run(
        [sys.executable, "install.py"],
        cwd=student,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installed torch 2.13.0+cpu, the CPU build" in done.stdout
    assert "-m amp_lessons.tooling.lab ." in done.stdout
    version = subprocess.run(
        [
            str(student / ".venv/bin/python"),
            "-c",
            "import torch; print(torch.__version__)",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert version == "2.13.0+cpu"


# ---------------------------------------------------------------------------------
# The instructor guides say what the commands do

GUIDES = ["INSTRUCTORS.md", "es/INSTRUCTORES.md"]


def _guide(name):
    from paths import NOTEBOOKS_DIR

    return (NOTEBOOKS_DIR / name).read_text()


def _grading_command_lines(text):
    """Each `python -m amp_lessons.grading ...` (or `... grading ...`) the guide
    shows, in a code block or in backticks, as its arguments."""
    import shlex

    spans = re.findall(r"```bash\n(.*?)```", text, re.S)
    spans = [
        line for block in spans for line in block.replace("\\\n", " ").splitlines()
    ]
    spans += re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    found = []
    for span in spans:
        span = " ".join(span.split()).split(" # ")[0]
        match = re.search(
            r"(?:-m amp_lessons\.grading|^\.\.\. (?:grading )?)(.*)", span
        )
        if match and match.group(1).strip():
            found.append(shlex.split(match.group(1)))
    return found


@pytest.mark.parametrize("name", GUIDES)
def test_every_grading_command_in_the_guide_parses(name):
    from amp_lessons.tooling.grading import cli

    commands = _grading_command_lines(_guide(name))
    assert len(commands) >= 8, commands
    parser = cli._build_parser()
    known = set(cli.COMMANDS)
    for args in commands:
        if not (set(args) & known):
            continue  # "... --course build/course-es grades": a fragment
        first = next(i for i, a in enumerate(args) if a in known)
        options = args[:first]
        if options and not options[0].startswith("--"):
            continue
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{name}: `{' '.join(args)}` does not parse")


@pytest.mark.parametrize("name", GUIDES)
def test_the_guide_runs_python_from_the_venv(name):
    """A bare `python` fails outside the venv: every command names .venv's (or a
    student's python3 before there is one)."""
    bare = re.findall(r"(?:^|[`\s])python(?= -[mc] | tests/)", _guide(name), re.M)
    assert bare == []


@pytest.mark.parametrize("name", GUIDES)
def test_the_guide_lists_the_student_files_the_course_has(name):
    from paths import NOTEBOOKS_DIR

    stems = [p.stem for p in grading.course_notebooks(NOTEBOOKS_DIR)]
    listed = re.findall(
        r"`student/(?:es/)?(\w+)\.ipynb` \.\.\.\s+`student/(?:es/)?(\w+)\.ipynb`",
        _guide(name),
    )
    assert listed == [(stems[0], stems[-1])]


def test_no_rate_for_a_run_under_a_second(tmp_path, capsys):
    """A corrupt file is scored 0 at once: "1735.6 a minute" said nothing."""
    course = _tiny_course(tmp_path)
    broken = tmp_path / "01_pair.ipynb"
    broken.write_text('{"cells": [')
    handin.submit("amy", [broken], course)
    [outcome] = autograder.autograde(
        course, sandboxed=sandbox.sandbox_problem() is None, jobs=1
    )
    assert outcome.flags[0].startswith("corrupt:")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "in under a second (--jobs 1)" in line or re.search(
        r"in \d+ s, [\d.]+ a minute", line
    ), line


@pytest.mark.slow
def test_make_student_puts_the_wheel_and_its_installer_beside_the_notebooks(tmp_path):
    import importlib.util

    import torch

    wheel = grading.course.write_install_kit(tmp_path)
    assert wheel.name.startswith("amp_lessons-") and wheel.suffix == ".whl"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [wheel.name, "install.py", "_bootstrap.py", "torch-version.txt"]
    )
    assert (tmp_path / "torch-version.txt").read_text().strip() == (
        torch.__version__.split("+")[0]
    )
    spec = importlib.util.spec_from_file_location("install", tmp_path / "install.py")
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    assert re.fullmatch(r"torch[<>=,.\d]+", install.torch_requirement(wheel))
    assert install.torch_pin(tmp_path) == "torch==" + torch.__version__.split("+")[0]
    assert install.wheel_path(tmp_path) == str(wheel)
