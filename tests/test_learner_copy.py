"""The learner's own copy of the course (`make lab`): the student edition, written
without nbgrader yet the same as nbgrader's, kept in step with the course without
ever writing over the learner's work, in a folder git ignores."""

from __future__ import annotations

import json
import subprocess

import nbformat
import pytest
from paths import ES_LESSONS, LESSONS, NOTEBOOKS_DIR, ROOT, SPANISH_DIR

from amp_lessons.tooling import grading, learner_copy
from amp_lessons.tooling.site import sanitize
from amp_lessons.tooling.student_edition import (
    leftover_secrets,
    read_student_notebook,
    student_notebook,
)


@pytest.mark.parametrize("lessons", [LESSONS, ES_LESSONS], ids=["english", "spanish"])
def test_the_student_edition_is_nbgraders_own_byte_for_byte(lessons, tmp_path):
    course = grading.build_course(lessons, tmp_path / "course")
    released = {p.name: p for p in grading.generate_student_edition(course)}
    assert set(released) == {p.name for p in lessons}
    for path in lessons:
        ours = nbformat.writes(read_student_notebook(path))
        theirs = nbformat.writes(nbformat.read(released[path.name], as_version=4))
        assert ours == theirs, path.name


def test_the_student_edition_shows_no_answer_and_no_hidden_test():
    leaks = sanitize.solution_lines(
        nbformat.read(p, as_version=4) for p in LESSONS + ES_LESSONS
    )
    assert leaks  # the lessons do hold answers: the check below can fail
    for path in LESSONS + ES_LESSONS:
        nb = read_student_notebook(path)
        assert leftover_secrets(nb) == [], path.name
        text = " ".join(" ".join(c.source.split()) for c in nb.cells)
        assert not [line for line in leaks if line in text], path.name
    # and the check can fail: the solved lesson is caught
    solved = nbformat.read(LESSONS[4], as_version=4)
    assert any("BEGIN SOLUTION" in p for p in leftover_secrets(solved))


def test_spanish_stubs_are_spanish():
    nb = read_student_notebook(SPANISH_DIR / "03_loss_scaling.ipynb")
    stubs = [c.source for c in nb.cells if "NotImplementedError()" in c.source]
    assert stubs and all("ESCRIBA SU CÓDIGO AQUÍ" in s for s in stubs)
    english = student_notebook(
        nbformat.read(SPANISH_DIR / "03_loss_scaling.ipynb", 4), "en"
    )
    assert any("YOUR CODE HERE" in c.source for c in english.cells)


def _answer(path, text="# my answer\n"):
    """Write into the first exercise of the learner's lesson at ``path``."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "NotImplementedError()" in c.source)
    cell.source = text + cell.source
    nbformat.write(nb, path)
    return path.read_bytes()


def _course(tmp_path, names):
    """A scratch course of the named English lessons, to change under the copy."""
    course = tmp_path / "notebooks"
    course.mkdir()
    for name in names:
        (course / name).write_bytes((NOTEBOOKS_DIR / name).read_bytes())
    (course / "results" / "executed").mkdir(parents=True)
    (course / "results" / "README.md").write_text("recorded runs")
    (course / "results" / "executed" / "solved.ipynb").write_text("{}")
    return course


def _change_markdown(path, text):
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source += text
    nbformat.write(nb, path)


def test_the_copy_is_made_once_and_never_written_over(tmp_path):
    names = ["02_underflow.ipynb", "03_loss_scaling.ipynb", "04_autocast.ipynb"]
    course = _course(tmp_path, names[:2])
    mine = tmp_path / "my-course"
    report = learner_copy.sync("en", mine, course)
    folder = mine / "en"
    assert report.folder == folder and report.added == names[:2]
    assert report.summary().endswith("made just now: start with 02_underflow.ipynb")
    for name in names[:2]:
        assert leftover_secrets(nbformat.read(folder / name, as_version=4)) == []
    # the data the lessons read comes along, never gpu-check's solved copies
    assert (folder / "results" / "README.md").is_file()
    assert not (folder / "results" / "executed").exists()

    # the learner works on 03 and runs 02 (outputs are no change); nothing new
    work = _answer(folder / "03_loss_scaling.ipynb")
    ran = nbformat.read(folder / "02_underflow.ipynb", as_version=4)
    next(c for c in ran.cells if c.cell_type == "code").outputs = [
        nbformat.v4.new_output("stream", text="ran")
    ]
    nbformat.write(ran, folder / "02_underflow.ipynb")
    again = learner_copy.sync("en", mine, course)
    assert (again.added, again.updated, again.offered) == ([], [], [])
    assert (folder / "03_loss_scaling.ipynb").read_bytes() == work

    # the course changes 02 and 03 and adds 04
    for name in names[:2]:
        _change_markdown(course / name, "\n\nA new paragraph.")
    (course / names[2]).write_bytes((NOTEBOOKS_DIR / names[2]).read_bytes())
    update = learner_copy.sync("en", mine, course)
    assert update.added == ["04_autocast.ipynb"]
    assert update.updated == ["02_underflow.ipynb"]  # untouched by the learner
    assert "A new paragraph." in (folder / "02_underflow.ipynb").read_text()
    assert (folder / "03_loss_scaling.ipynb").read_bytes() == work  # theirs, kept
    [offer] = update.offered
    assert offer.startswith("03_loss_scaling.update-") and offer.endswith(".ipynb")
    assert "A new paragraph." in (folder / offer).read_text()
    assert leftover_secrets(nbformat.read(folder / offer, as_version=4)) == []
    said = update.summary()
    assert offer in said and "03_loss_scaling.ipynb" in said and "\n" in said
    dicho = update.summary("es")
    assert offer in dicho and "usted había editado" in dicho

    # told once; a deleted lesson comes back; the learner's work is still theirs
    (folder / "04_autocast.ipynb").unlink()
    last = learner_copy.sync("en", mine, course)
    assert (last.added, last.updated, last.offered) == (["04_autocast.ipynb"], [], [])
    assert (folder / "03_loss_scaling.ipynb").read_bytes() == work
    manifest = json.loads((folder / learner_copy.MANIFEST).read_text())
    assert set(manifest) == set(names)


def test_an_unreadable_lesson_is_the_learners_and_stays(tmp_path):
    course = _course(tmp_path, ["02_underflow.ipynb"])
    mine = tmp_path / "my-course"
    learner_copy.sync("en", mine, course)
    broken = mine / "en" / "02_underflow.ipynb"
    broken.write_text('{"cells": [')  # a half-saved file
    _change_markdown(course / "02_underflow.ipynb", "\n\nChanged.")
    report = learner_copy.sync("en", mine, course)
    assert broken.read_text() == '{"cells": [' and len(report.offered) == 1


def test_the_spanish_copy_has_the_glossary_and_no_catalogues(tmp_path):
    report = learner_copy.sync("es", tmp_path)
    names = {p.name for p in report.folder.iterdir()}
    assert {p.name for p in ES_LESSONS} <= names
    assert "GLOSARIO.md" in names and "results" in names
    assert "po" not in names and "INSTRUCTORES.md" not in names
    assert not (report.folder / "results" / "executed").exists()


def test_git_ignores_the_learners_copy():
    paths = ["my-course/en/03_loss_scaling.ipynb", "my-course/es/.course.json"]
    result = subprocess.run(
        ["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True
    )
    assert result.stdout.split() == paths


def test_sync_refuses_an_unknown_edition(tmp_path):
    with pytest.raises(ValueError, match="edition 'fr'"):
        learner_copy.sync("fr", tmp_path)


def test_a_copied_lesson_says_what_its_kernel_will_report(tmp_path):
    # JupyterLab writes the kernel's language_info into a notebook on connect: with
    # the course's bare {"name": "python"} each lesson opened marked unsaved
    # (test_browser.py checks the tab in a real JupyterLab)
    import sys

    report = learner_copy.sync("en", tmp_path)
    nb = nbformat.read(report.folder / LESSONS[0].name, as_version=4)
    info = nb.metadata["language_info"]
    assert info["name"] == "python" and info["version"] == sys.version.split()[0]
    assert nbformat.read(LESSONS[0], as_version=4).metadata["language_info"] == {
        "name": "python"
    }  # the course's own notebooks stay as stored
