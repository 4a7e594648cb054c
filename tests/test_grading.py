"""The grading pipeline with the real nbgrader, on a small fixture course and on the
course itself: solved -> full marks, student edition -> zero on every graded cell and
runs top to bottom, metadata lint, silent test cells, offline slides.

The fixture course proves each check can fail; the real-course tests grade whatever
notebooks in notebooks/ carry graded cells (they skip while none do).
"""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from paths import LESSONS, NOTEBOOKS_DIR

from amp_lessons.tooling import grading
from amp_lessons.tooling.grading import autograder, nbgrader_main, review, sandbox

GRADED = [p for p in LESSONS if grading.is_graded(p)]


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_nbgrader_main_is_nbgrader_without_the_iri_grammar():
    ours = subprocess.run(
        nbgrader_main.command("--version"), capture_output=True, text=True, check=True
    )
    theirs = subprocess.run(
        [sys.executable, "-m", "nbgrader", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ours.stdout == theirs.stdout and "nbgrader" in ours.stdout.lower()
    probe = (
        "import nbformat, sys; print('rfc3987_syntax' in sys.modules and "
        "sys.modules['rfc3987_syntax'] is not None)"
    )
    skip = (
        "from amp_lessons.tooling.grading.nbgrader_main import skip_iri_grammar; "
        "skip_iri_grammar(); "
    )
    assert _python(skip + probe) == "False"
    assert _python(probe) == "True"  # what it spares: the Jupyter stack installs it


def test_nbgrader_main_leaves_nbgraders_server_extensions_out():
    """Its nbgrader imports no jupyter_server (0.3 s a process), and a stand-in
    refuses, in words, to be loaded into a server."""
    probe = (
        "import sys, nbgrader.apps.nbgraderapp; print('jupyter_server' in sys.modules)"
    )
    skip = (
        "from amp_lessons.tooling.grading.nbgrader_main import "
        "skip_server_extensions; skip_server_extensions(); "
    )
    assert _python(skip + probe) == "False"
    assert _python(probe) == "True"  # what it spares
    load = (
        "import nbgrader\ntry:\n    nbgrader._load_jupyter_server_extension(None)\n"
        "except RuntimeError as e:\n    print(e)"
    )
    assert "leaves nbgrader's server extensions out" in _python(skip + load)


def test_the_gradebook_revision_is_the_one_alembic_heads_prints(tmp_path):
    """nbgrader_main reads the newest schema revision in-process: the same revision
    nbgrader's own ``alembic heads`` subprocess gives, and what a new gradebook of
    a course made through nbgrader_main records."""
    from nbgrader.api import get_alembic_version  # nbgrader's, not patched here

    env = dict(
        os.environ,
        PATH=os.pathsep.join(
            [str(Path(sys.executable).parent), os.environ.get("PATH", "")]
        ),
    )
    theirs = subprocess.run(
        [
            sys.executable,
            "-c",
            "import nbgrader.api; print(nbgrader.api.get_alembic_version())",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.strip()
    assert get_alembic_version is not nbgrader_main.alembic_head
    assert nbgrader_main.alembic_head() == theirs and len(theirs) == 12
    notebooks = write_fixture_course(tmp_path / "nb")
    course = grading.build_course([notebooks["plain"]], tmp_path / "course")
    grading.generate_student_edition(course)
    with sqlite3.connect(course / "gradebook.db") as db:
        [(recorded,)] = db.execute("SELECT version_num FROM alembic_version")
    assert recorded == theirs


def test_the_sandboxed_processes_start_without_the_grading_tooling():
    """The runner and the guarded kernel start as ``-m amp_lessons.tooling.grading.X``
    once per submission: the package's names load lazily, so neither pays for
    nbgrader, nbconvert or the slides on start-up."""
    loaded = _python(
        "import sys, amp_lessons.tooling.grading.guard, "
        "amp_lessons.tooling.grading.runner; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'nbgrader', 'nbconvert', 'nbformat'}))"
    )
    assert loaded == "[]"
    assert grading.rehearse.__module__ == "amp_lessons.tooling.grading.rehearsal"
    for name in grading.__all__:  # each name is where _HOMES says it is
        assert getattr(grading, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'rehearsee'"):
        grading.rehearsee  # noqa: B018


# ---------------------------------------------------------------------------------
# A tiny course written with nbformat: a plain lesson, a healthy graded lesson and a
# flawed one with one defect of each kind the rehearsal must catch.


def md(text, slide="-"):
    cell = nbformat.v4.new_markdown_cell(text)
    cell.metadata["slideshow"] = {"slide_type": slide}
    return cell


def code(text, slide="-"):
    cell = nbformat.v4.new_code_cell(text)
    cell.metadata["slideshow"] = {"slide_type": slide}
    return cell


def solution(text, grade_id):
    cell = code(text)
    cell.metadata["nbgrader"] = {
        "grade": False,
        "grade_id": grade_id,
        "locked": False,
        "schema_version": 3,
        "solution": True,
        "task": False,
    }
    return cell


def graded_test(text, grade_id, points=1):
    cell = code(text)
    cell.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": grade_id,
        "locked": True,
        "points": points,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    return cell


def write(path, cells):
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:03d}"
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return path


def sol(body):
    return f"    ### BEGIN SOLUTION\n    {body}\n    ### END SOLUTION"


def write_fixture_course(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results").mkdir(exist_ok=True)
    (folder / "results" / "recorded.json").write_text(json.dumps({"speedup": 2.5}))
    plain = write(
        folder / "00_intro.ipynb",
        [
            md("# 00 · Intro", "slide"),
            code("print('intro ran')"),
        ],
    )
    good = write(
        folder / "01_good.ipynb",
        [
            md("# 01 · Good", "slide"),
            code(
                "import json\nrecorded = json.load(open('results/recorded.json'))\n"
                "print('recorded speedup', recorded['speedup'])"
            ),
            md("## Exercise: double", "subslide"),
            solution("def double(x):\n" + sol("return 2 * x"), "01_good_double"),
            graded_test(
                "print('case | ok')\nassert double(2) == 4\n"
                "### BEGIN HIDDEN TESTS\nassert double(-3) == -6\n"
                "### END HIDDEN TESTS",
                "01_good_double_test",
                points=2,
            ),
            md("## Exercise: half", "subslide"),
            solution("def half(x):\n" + sol("return x / 2"), "01_good_half"),
            graded_test("assert half(3) == 1.5", "01_good_half_test", points=1),
            code("print('later cells do not use the exercises')"),
        ],
    )
    flawed = write(
        folder / "02_flawed.ipynb",
        [
            md("# 02 · Flawed", "slide"),
            solution("def noisy(x):\n" + sol("return x"), "02_flawed_noisy"),
            # a warning goes to stderr: nbgrader scores the cell zero even when it
            # passes
            graded_test(
                "import warnings\nwarnings.warn('careful')\nassert noisy(1) == 1",
                "02_flawed_noisy_test",
            ),
            solution("def wrong(x):\n" + sol("return x + 1"), "02_flawed_wrong"),
            graded_test(
                "assert wrong(1) == 1, 'wrong(1) should be 1'", "02_flawed_wrong_test"
            ),
            solution("def free(x):\n" + sol("return x"), "02_flawed_free"),
            graded_test(
                "assert True  # passes whatever the student wrote",
                "02_flawed_free_test",
            ),
            code(
                "print(noisy(5))  # uses the student's function: breaks when unsolved"
            ),
        ],
    )
    return {"plain": plain, "good": good, "flawed": flawed}


@pytest.fixture(scope="module")
def fixture_course(tmp_path_factory):
    base = tmp_path_factory.mktemp("fixture")
    notebooks = write_fixture_course(base / "notebooks")
    start = time.perf_counter()
    result = grading.rehearse(list(notebooks.values()), base / "course")
    print(f"\nfixture rehearsal: {time.perf_counter() - start:.1f} s")
    return notebooks, base / "course", result


def problems_of(result, lesson):
    return [
        p for p in result.problems if p.startswith(lesson) or f"{lesson}.ipynb" in p
    ]


def score_of(result, student, lesson):
    return next(
        s for s in result.scores if s.student == student and s.notebook == lesson
    )


def test_fixture_solved_gets_full_marks_and_blank_gets_zero(fixture_course):
    _, _, result = fixture_course
    assert problems_of(result, "01_good") == []
    reference = score_of(result, grading.REFERENCE_STUDENT, "01_good")
    blank = score_of(result, grading.BLANK_STUDENT, "01_good")
    assert (reference.score, reference.max_score) == (3, 3)
    assert reference.cells == {
        "01_good_double_test": (2, 2),
        "01_good_half_test": (1, 1),
    }
    assert blank.max_score == 3
    assert blank.cells == {"01_good_double_test": (0, 2), "01_good_half_test": (0, 1)}


def test_fixture_plain_lesson_is_released_but_not_graded(fixture_course):
    _, course, result = fixture_course
    assert (course / "release" / "00_intro" / "00_intro.ipynb").exists()
    assert "00_intro" not in {s.notebook for s in result.scores}


def test_rehearsal_catches_each_defect(fixture_course):
    _, _, result = fixture_course
    found = "\n".join(problems_of(result, "02_flawed"))
    # the warning in a passing test cell: stderr, and so no points on the solution
    assert "writes to stderr on the solution" in found and "careful" in found
    assert "'02_flawed_noisy_test': (0.0, 1.0)" in found
    # a solution that fails its own test
    assert "fails on the solution: AssertionError: wrong(1) should be 1" in found
    assert "'02_flawed_wrong_test': (0.0, 1.0)" in found
    # a test that cannot fail earns points unsolved
    assert "unsolved cells earn points: {'02_flawed_free_test': (1.0, 1.0)}" in found
    # a later cell that calls the student's function breaks the student edition
    assert "fails in the student edition (NotImplementedError" in found
    assert "print(noisy(5))" in found


def test_student_edition_is_stubbed_and_clean(fixture_course, tmp_path):
    notebooks, course, _ = fixture_course
    written = grading.export_student_edition(course, tmp_path / "student")
    assert [p.name for p in written] == [
        "00_intro.ipynb",
        "01_good.ipynb",
        "02_flawed.ipynb",
    ]
    assert (tmp_path / "student" / "results" / "recorded.json").exists()
    good = nbformat.read(tmp_path / "student" / "01_good.ipynb", as_version=4)
    text = "\n".join(c.source for c in good.cells)
    assert "raise NotImplementedError()" in text and "def double(x):" in text
    assert "return 2 * x" not in text and "double(-3)" not in text
    assert "assert double(2) == 4" in text  # the visible test stays
    for name, source in notebooks.items():
        assert (
            grading.lint_student_edition(source, tmp_path / "student" / source.name)
            == []
        ), name


def test_student_edition_lint_catches_leaks(fixture_course, tmp_path):
    notebooks, _, _ = fixture_course
    leaky = nbformat.read(notebooks["good"], as_version=4)  # the solved source itself
    leaky.cells[1].outputs = [nbformat.v4.new_output("stream", text="hi\n")]
    leaky.cells[1].execution_count = 1
    nbformat.write(leaky, tmp_path / "01_good.ipynb")
    found = "\n".join(
        grading.lint_student_edition(notebooks["good"], tmp_path / "01_good.ipynb")
    )
    assert "marker text left" in found
    assert "return 2 * x" in found and "assert double(-3) == -6" in found
    assert "outputs left" in found


def test_student_edition_lint_tells_leaks_from_coincidences(tmp_path):
    source = write(
        tmp_path / "src.ipynb",
        [
            md("# 06", "slide"),
            solution(
                "def table():\n    ### BEGIN SOLUTION\n    return {\n"
                "        'fp16': 'overflows past 65504',\n    }\n"
                "    ### END SOLUTION",
                "06_table",
            ),
        ],
    )
    released = write(
        tmp_path / "rel.ipynb",
        [
            md("# 06\n\nA dict ends like this:\n\n    }", "slide"),  # a lone brace
            solution(
                "def table():\n    # YOUR CODE HERE\n    raise NotImplementedError()",
                "06_table",
            ),
            md("Hint: 'fp16': 'overflows past 65504',"),  # a whole solution line
        ],
    )
    found = grading.lint_student_edition(source, released)
    assert len(found) == 1 and "rel.ipynb cell 2" in found[0], found


def test_gradebook_table_lists_every_submission(fixture_course):
    _, course, result = fixture_course
    table = grading.format_scores(grading.read_scores(course))
    assert "reference        01_good                      3 / 3" in table
    assert "blank            01_good                      0 / 3" in table
    assert len(table.splitlines()) == 1 + len(result.scores) == 5


# ---------------------------------------------------------------------------------
# Metadata lint (no nbgrader run needed)


def test_lint_accepts_the_fixture_course(tmp_path):
    notebooks = write_fixture_course(tmp_path)
    assert grading.lint_course(list(notebooks.values())) == []


def test_lint_catches_each_metadata_defect(tmp_path):
    bad_points = graded_test("assert True", "03_points_test")
    del bad_points.metadata["nbgrader"]["points"]
    old_schema = graded_test("assert True", "03_schema_test")
    old_schema.metadata["nbgrader"]["schema_version"] = 1
    unlocked = graded_test("assert True", "03_unlocked_test")
    unlocked.metadata["nbgrader"]["locked"] = False
    graded_solution = solution("def f():\n" + sol("return 1"), "03_manual")
    graded_solution.metadata["nbgrader"].update(grade=True, points=1)
    path = write(
        tmp_path / "03_bad.ipynb",
        [
            md("# 03", "slide"),
            solution("def f(x):\n    return x", "03_no_markers"),
            solution("def g(x):\n    ### BEGIN SOLUTION\n    return x", "03_unclosed"),
            graded_test(
                "### BEGIN HIDDEN TESTS\nassert True", "03_unclosed_hidden_test"
            ),
            code("x = 1  ### BEGIN SOLUTION"),
            solution("def h():\n" + sol("return 1"), "bad id!"),
            bad_points,
            old_schema,
            unlocked,
            graded_solution,
            graded_test("assert True", "01_good_double_test"),  # taken by 01_good
        ],
    )
    good = write_fixture_course(tmp_path / "fixture")["good"]
    found = "\n".join(grading.lint_course([good, path]))
    assert (
        "03_bad.ipynb cell 1" in found
        and "nbgrader would replace the whole cell" in found
    )
    assert "'BEGIN SOLUTION' without 'END SOLUTION'" in found
    assert "'BEGIN HIDDEN TESTS' without 'END HIDDEN TESTS'" in found
    assert "markers in a cell without nbgrader metadata" in found
    assert "grade_id 'bad id!'" in found
    assert "graded cell needs points > 0, has None" in found
    assert "schema_version 1, expected 3" in found
    assert "graded test cell must be locked" in found
    assert "needs manual grading" in found
    assert (
        "'01_good_double_test' in 03_bad.ipynb is already used in 01_good.ipynb"
        in found
    )


def test_lint_catches_markers_in_the_wrong_cells(tmp_path):
    hidden_in_solution = solution(
        "def f():\n"
        + sol("return 1")
        + "\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS",
        "04_f",
    )
    solution_in_test = graded_test(
        "### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "04_f_test"
    )
    path = write(
        tmp_path / "04.ipynb",
        [md("# 04", "slide"), hidden_in_solution, solution_in_test],
    )
    found = "\n".join(grading.lint_notebook(path))
    assert "cell 1" in found and "hidden-test markers outside a graded test" in found
    assert "cell 2" in found and "solution markers outside a solution cell" in found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_course_notebook_nbgrader_metadata(path):
    assert grading.lint_notebook(path) == []


def test_course_grade_ids_are_unique():
    assert grading.lint_course(LESSONS) == []


def test_quick_check_is_graded_once_written():
    quick = NOTEBOOKS_DIR / "08_quick_check.ipynb"
    if not quick.exists():
        pytest.skip("notebooks/08_quick_check.ipynb not written yet")
    assert grading.is_graded(quick)


# ---------------------------------------------------------------------------------
# The real course, graded end to end


@pytest.fixture(scope="module")
def course_rehearsal(tmp_path_factory):
    """Every graded lesson's solved notebook, autograded in the sandbox. The blank
    editions are not graded here: tests/test_student_paths.py runs every lesson's
    blank edition (only its graded cells may fail, and each must), the fixture
    rehearsal above grades a blank one end to end, and tests/test_sandbox.py's
    attack run grades lesson 08's blank edition in the sandbox."""
    if not GRADED:
        pytest.skip("no notebook in notebooks/ has graded cells yet")
    course = tmp_path_factory.mktemp("course")
    result = grading.rehearse(LESSONS, course, blank=False)
    print(f"\ncourse rehearsal: {len(GRADED)} graded notebooks, {result.seconds:.0f} s")
    return course, result


@pytest.mark.slow
def test_course_solved_full_marks_and_runs(course_rehearsal):
    _, result = course_rehearsal
    assert result.problems == []
    graded = {p.stem for p in GRADED}
    assert {
        s.notebook for s in result.scores if s.student == grading.REFERENCE_STUDENT
    } == graded
    assert not any(s.student == grading.BLANK_STUDENT for s in result.scores)


@pytest.mark.slow
def test_course_student_edition_has_no_solutions(course_rehearsal):
    course, _ = course_rehearsal
    for path in LESSONS:
        released = course / "release" / path.stem / path.name
        assert grading.lint_student_edition(path, released) == []


# ---------------------------------------------------------------------------------
# Slides: metadata on every cell, and decks that load nothing from the network


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_course_notebook_slideshow_metadata(path):
    assert grading.lint_slides(path) == []


def test_slide_lint_catches_missing_and_bad_types(tmp_path):
    untyped = nbformat.v4.new_code_cell("1 + 1")
    path = write(
        tmp_path / "05.ipynb", [md("# 05", "fragment"), untyped, code("2", "slid")]
    )
    found = "\n".join(grading.lint_slides(path))
    assert "cell 0" in found and "first cell must be a 'slide', not 'fragment'" in found
    assert "cell 1" in found and "slide_type None" in found
    assert "cell 2" in found and "slide_type 'slid'" in found


def test_course_slides_export_offline(tmp_path):
    decks = grading.export_slides(LESSONS, tmp_path)
    assert [d.name for d in decks] == [f"{p.stem}.slides.html" for p in LESSONS]
    for deck in decks:
        text = deck.read_text()
        assert "_assets/reveal.js/dist/reveal.js" in text
        assert text.count("<section") >= 2  # the first cell is a slide, and more follow
        assert grading.offline_problems(deck) == []


def test_executed_slides_show_outputs_and_notes(tmp_path):
    notebooks = write_fixture_course(tmp_path / "nb")
    nb = nbformat.read(notebooks["plain"], as_version=4)
    nb.cells.append(md("Say: this is a speaker note.", "notes"))
    nbformat.write(nb, notebooks["plain"])
    decks = grading.export_slides(
        [notebooks["plain"], notebooks["good"]], tmp_path / "slides", execute=True
    )
    plain, good = (d.read_text() for d in decks)
    assert "intro ran" in plain
    assert '<aside class="notes">' in plain and "speaker note" in plain
    assert "recorded speedup 2.5" in good  # ran beside its results/ folder
    assert all(grading.offline_problems(d) == [] for d in decks)


def test_offline_check_catches_remote_and_missing_files(tmp_path):
    (tmp_path / "local.css").write_text("@import url(https://fonts.example/x.css);")
    page = tmp_path / "deck.slides.html"
    page.write_text(
        '<html><head><script src="https://cdn.example/reveal.js"></script>'
        '<link rel="stylesheet" href="//cdn.example/theme.css">'
        '<link rel="stylesheet" href="local.css">'
        '<script src="_assets/missing.js"></script>'
        "<style>@import url('http://fonts.example/y.css');</style>"
        '<img src="data:image/png;base64,AAAA"></head></html>'
    )
    found = "\n".join(grading.offline_problems(page))
    assert "loads https://cdn.example/reveal.js from the network" in found
    assert "loads //cdn.example/theme.css from the network" in found
    assert "local.css (linked by deck.slides.html) imports a remote" in found
    assert "_assets/missing.js, missing" in found
    assert "an inline style imports from the network" in found
    assert "data:image" not in found


# ---------------------------------------------------------------------------------
# Filing submissions


def test_submit_files_by_lesson_and_refuses_strangers(tmp_path):
    notebooks = write_fixture_course(tmp_path / "nb")
    course = grading.build_course(list(notebooks.values()), tmp_path / "course")
    config = (course / "nbgrader_config.py").read_text()
    assert f"c.Execute.timeout = {grading.CELL_TIMEOUT_S}" in config
    download = tmp_path / "dl" / "01_good (1).ipynb"
    download.parent.mkdir()
    download.write_bytes(notebooks["good"].read_bytes())
    [dest] = grading.submit("alice", [download], course)
    assert dest == course / "submitted" / "alice" / "01_good" / "01_good.ipynb"
    with pytest.raises(ValueError, match="not a lesson of this course"):
        grading.submit("alice", [tmp_path / "notes.ipynb"], course)
    with pytest.raises(ValueError, match="student id"):
        grading.submit("../bob", [notebooks["good"]], course)
    with pytest.raises(RuntimeError, match="nothing submitted"):
        grading.autograde(tmp_path / "empty")


@pytest.mark.slow
def test_grading_two_at_a_time_leaves_what_one_at_a_time_does(tmp_path):
    """``autograde --jobs 2`` (two nbgrader runs, two sandboxes at once) writes the
    same gradebook and flags as ``--jobs 1``, with two lessons of one new student
    graded at the same time."""
    notebooks = write_fixture_course(tmp_path / "nb")
    course = grading.build_course(list(notebooks.values()), tmp_path / "course")
    grading.generate_student_edition(course)
    wrong = tmp_path / "cy" / "01_good.ipynb"
    wrong.parent.mkdir()
    wrong.write_text(notebooks["good"].read_text().replace("return x / 2", "return x"))
    # three submissions (a blank one scores 0 in the fixture rehearsal above): each
    # sandboxed grading costs seconds of CI
    grading.submit("amy", [notebooks["good"], notebooks["flawed"]], course)
    grading.submit("cy", [wrong], course)
    sandboxed = sandbox.sandbox_problem() is None
    one = autograder.autograde(course, sandboxed=sandboxed, jobs=1)
    graded = autograder.grades(course)
    for outcome in one:  # nothing from the first run may stand in for the second
        autograder._zero(course, outcome.student, outcome.lesson)
        review.write_review(course, outcome.student, outcome.lesson, [])
    two = autograder.autograde(course, sandboxed=sandboxed, jobs=2)
    assert autograder.grades(course) == graded
    assert [(o.student, o.lesson, o.ok, o.flags) for o in two] == [
        (o.student, o.lesson, o.ok, o.flags) for o in one
    ]
    scores = {(g["student"], g["lesson"]): g["score"] for g in graded}
    assert scores[("amy", "01_good")] == 3
    assert scores[("cy", "01_good")] == 2  # half() is wrong, double() is right
    assert len(graded) == 3


def test_autograde_jobs_must_be_one_or_more(tmp_path, capsys):
    with pytest.raises(SystemExit):
        grading.main(["--course", str(tmp_path), "autograde", "--jobs", "0"])
    assert "must be 1 or more" in capsys.readouterr().err
    with pytest.raises(ValueError, match="jobs must be 1 or more"):
        autograder.autograde(tmp_path, jobs=0)


@pytest.mark.browser
def test_slides_present_offline_in_a_browser(tmp_path):
    """Reveal starts, moves, renders math and shows no error with the network cut."""
    from chromium import CHROMIUM_ARGS, chromium_path, require_browser

    require_browser()
    from playwright.sync_api import sync_playwright

    notebooks = write_fixture_course(tmp_path / "nb")
    nb = nbformat.read(notebooks["good"], as_version=4)
    nb.cells.insert(
        1,
        md(
            "fp16's smallest subnormal is $2^{-24}$:\n\n"
            "$$x_{min} = 2^{-14} \\cdot 2^{-10}$$",
            "subslide",
        ),
    )
    nbformat.write(nb, notebooks["good"])
    [deck] = grading.export_slides([notebooks["good"]], tmp_path / "slides")
    remote, errors = [], []
    args = CHROMIUM_ARGS + (["--no-sandbox"] if os.geteuid() == 0 else [])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=args)
        page = browser.new_page(viewport={"width": 1280, "height": 800})

        def only_files(route):
            if route.request.url.startswith(("file:", "data:")):
                route.continue_()
            else:
                remote.append(route.request.url)
                route.abort()

        page.route("**/*", only_files)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(deck.as_uri())
        page.wait_for_function("window.Reveal && Reveal.isReady()", timeout=30_000)
        assert page.evaluate("Reveal.getTotalSlides()") >= 4
        page.keyboard.press("ArrowRight")
        page.wait_for_function("Reveal.getIndices().v === 1")
        rendered = (
            "(() => { const s = document.querySelector('.present');"
            " return s.querySelectorAll('.MathJax').length >= 2 &&"
            " !s.innerText.includes('Math Processing Error'); })()"
        )
        page.wait_for_function(rendered, timeout=30_000)
        text = page.inner_text(".present")
        page.screenshot(path=tmp_path / "math_slide.png")
        browser.close()
    assert "Math Processing Error" not in text
    assert remote == [] and errors == []


def test_rehearsal_never_wipes_a_real_course(tmp_path):
    notebooks = write_fixture_course(tmp_path / "nb")
    course = grading.build_course(list(notebooks.values()), tmp_path / "course")
    with pytest.raises(ValueError, match="not a rehearsal folder"):
        grading.rehearse(list(notebooks.values()), course)
    assert (course / "nbgrader_config.py").exists()


def test_the_course_leaves_out_executed_lessons_beside_the_results(tmp_path):
    """gpu-check keeps executed copies of the solved lessons in results/executed/:
    copied into the course, they would reach students with every solution."""
    notebooks = write_fixture_course(tmp_path / "notebooks")
    executed = tmp_path / "notebooks" / "results" / "executed"
    executed.mkdir()
    (executed / "01_good.ipynb").write_text(notebooks["good"].read_text())
    course = grading.build_course([notebooks["good"]], tmp_path / "course")
    copied = course / "source" / "01_good" / "results"
    assert (copied / "recorded.json").exists()
    assert not (copied / "executed").exists()
