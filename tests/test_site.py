"""The static site (`make site`) and the Colab set-up cell.

The site is built once per session from the lessons as the student-path tests executed
them (each lesson runs once per test run), or from copies executed before
(``AMP_EXECUTED_NOTEBOOKS=DIR``, from ``python -m amp_lessons.tooling.site execute
DIR``). Then every page is opened in Chromium, served from 127.0.0.1: no console
error, no request to another host, every image loads. No line of a solution or of a
hidden test may appear in any page or in the search index. Each check is also shown
rejecting a site spoiled on purpose.

The Spanish edition (``es/``) is built beside it from the Spanish lessons the student
paths run: two of them (`ES_TESTED`), not all thirteen, to keep the run short (see
there).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from html import escape
from pathlib import Path

import nbformat
import pytest
from paths import ES_LESSONS, ES_STUDENT_PATHS, LESSONS, ROOT

from amp_lessons.tooling import colab, student_edition
from amp_lessons.tooling.site import build, sanitize, verify
from amp_lessons.tooling.site.execute import executed_info

STEMS = [p.stem for p in LESSONS]
ES_STEMS = [p.stem for p in ES_LESSONS]
# The Spanish lessons the site test is built with: those the student paths run (the
# entry lesson, with an exercise and a graded quick check, and 02, with a widget and
# an exercise), as the lesson runs executed them. The lesson runs execute all
# thirteen, but each page costs build and browser time on 2 CPU cores; `make site`
# and `execute DIR` build all of them.
ES_TESTED = [p.stem for p in ES_STUDENT_PATHS]


# ---- the Colab set-up cell ---------------------------------------------------------


def test_every_lesson_starts_with_the_colab_cell_pyproject_describes():
    repository = colab.repository_url()
    problems = [
        p for path in LESSONS for p in colab.notebook_problems(path, repository)
    ]
    assert problems == [], "run `python -m amp_lessons.tooling.colab`:\n" + "\n".join(
        problems
    )


def test_colab_cell_check_rejects_a_stale_cell(tmp_path):
    nb = nbformat.read(LESSONS[0], as_version=4)
    stale = tmp_path / LESSONS[0].name
    cell = next(c for c in nb.cells if c.get("id") == colab.CELL_ID)
    cell.source = colab.setup_cell_source("https://github.com/someone/else")
    nbformat.write(nb, stale)
    assert colab.notebook_problems(stale, None) == [
        f"{stale.name}: the Colab set-up cell is out of date"
    ]
    nb.cells.remove(cell)
    nbformat.write(nb, stale)
    assert "not the Colab cell" in colab.notebook_problems(stale, None)[0]


def test_repository_url_and_colab_link_come_from_pyproject(tmp_path):
    toml = tmp_path / "pyproject.toml"
    toml.write_text('[project]\nname = "x"\n')
    assert colab.repository_url(toml) is None
    toml.write_text(
        '[project]\nname = "x"\n[project.urls]\n'
        'Repository = "https://github.com/ada/amp.git"\n'
    )
    url = colab.repository_url(toml)
    assert url == "https://github.com/ada/amp"
    # the branch colab: the student edition, never the solved lessons of main
    assert colab.colab_url("02_underflow.ipynb", url) == (
        "https://colab.research.google.com/github/ada/amp/blob/colab/notebooks/"
        "02_underflow.ipynb"
    )
    assert colab.colab_url("02_underflow.ipynb", "https://gitlab.com/a/b") is None
    assert colab.colab_url("02_underflow.ipynb", None) is None
    assert 'f"amp_lessons @ {source}"' in colab.setup_cell_source(url)
    assert '"git+https://github.com/ada/amp"' in colab.setup_cell_source(url)
    # the repository's own pyproject sets none today: no link anywhere
    assert colab.repository_url() is None
    assert all("colab.research.google.com" not in p.read_text() for p in LESSONS)


def test_refresh_puts_the_colab_line_and_cell_where_a_url_says():
    nb = nbformat.read(LESSONS[2], as_version=4)
    url = "https://github.com/ada/amp"
    assert colab.refresh_notebook(nb, LESSONS[2].name, url)
    link = colab.colab_url(LESSONS[2].name, url)
    assert nb.cells[0].source.endswith(
        f"{colab.BADGE_START} [open this lesson in Colab]({link})."
    )
    assert nb.cells[1].id == colab.CELL_ID
    assert nb.cells[1].source == colab.setup_cell_source(url)
    assert not colab.refresh_notebook(nb, LESSONS[2].name, url)  # idempotent
    # the URL removed again: the line goes, the cell says how to install
    assert colab.refresh_notebook(nb, LESSONS[2].name, None)
    assert nbformat.writes(nb) == nbformat.writes(nbformat.read(LESSONS[2], 4))
    page = build.banner(nb, LESSONS[2].name, url)
    assert f"[open this lesson in Colab]({link})" in page
    assert "Colab" not in build.banner(nb, LESSONS[2].name, None)


def run_cell(source: str, in_colab: bool, monkeypatch) -> tuple[str, list]:
    """Execute the set-up cell as a kernel would, with or without a fake
    ``google.colab`` module, pip stubbed: (what it printed, the commands it ran)."""
    import io

    calls = []
    monkeypatch.setattr(
        subprocess, "run", lambda cmd, **kw: calls.append((cmd, kw)) or None
    )
    if in_colab:
        fake = type(sys)("google.colab")
        monkeypatch.setitem(sys.modules, "google.colab", fake)
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<colab-cell>", "exec"), {})
    return out.getvalue(), calls


def test_colab_cell_does_nothing_outside_colab(monkeypatch):
    for repository in (None, "https://github.com/ada/amp"):
        printed, calls = run_cell(
            colab.setup_cell_source(repository), False, monkeypatch
        )
        assert (printed, calls) == ("", [])


def test_colab_cell_installs_from_the_repository_in_colab(monkeypatch):
    monkeypatch.delenv(colab.INSTALL_ENV, raising=False)
    source = colab.setup_cell_source("https://github.com/ada/amp")
    printed, calls = run_cell(source, True, monkeypatch)
    assert printed.strip().splitlines() == [
        "Colab: installing the course (amp_lessons) from git+https://github.com/ada/amp",
        # Colab's files go with its runtime: the cell says how to keep progress
        "Your progress ends with this runtime: open this cell to keep it in Drive.",
    ]
    [(cmd, kw)] = calls
    assert cmd[1:] == [
        "-m",
        "pip",
        "install",
        "-q",
        "amp_lessons @ git+https://github.com/ada/amp",
    ]
    assert kw == {"check": True}


def test_colab_cell_without_repository_says_how_to_install(monkeypatch):
    monkeypatch.delenv(colab.INSTALL_ENV, raising=False)
    printed, calls = run_cell(colab.setup_cell_source(None), True, monkeypatch)
    assert calls == []
    assert "repository is not configured" in printed
    assert "pip install -e" in printed
    assert len(printed.strip().splitlines()) == 1


@pytest.mark.slow
def test_colab_cell_really_installs_the_course_from_a_local_source(
    tmp_path, monkeypatch
):
    """The cell's pip command, run for real in a throwaway venv, with the install
    source pointed (AMP_LESSONS_SOURCE) at a copy of this folder: no network
    (--no-deps: the venv only has to import the package itself)."""
    source = tmp_path / "course"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "amp_lessons",
        source / "amp_lessons",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # the build backend: this environment's setuptools, lent through PYTHONPATH (a
    # fresh venv's may lack bdist_wheel, and nothing may be downloaded)
    backend = tmp_path / "backend"
    backend.mkdir()
    import setuptools

    for name in ("setuptools", "_distutils_hack", "pkg_resources", "wheel"):
        found = Path(setuptools.__file__).parent.parent / name
        if found.exists():
            (backend / name).symlink_to(found)
    # PIP_NO_BUILD_ISOLATION=0 turns isolation off (pip's double negative): the
    # venv's own setuptools builds it, nothing is downloaded
    env = {
        **os.environ,
        colab.INSTALL_ENV: source.as_uri(),
        "PIP_NO_DEPS": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_NO_INDEX": "1",
        "PYTHONPATH": str(backend),
        "PYTHONNOUSERSITE": "1",
    }
    script = (
        "import sys, types\n"
        "sys.modules['google.colab'] = types.ModuleType('google.colab')\n"
        + colab.setup_cell_source(None)
        + "\nimport os, amp_lessons\n"
        "print(os.path.dirname(amp_lessons.__file__))\n"
    )
    result = subprocess.run(
        [str(python), "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == (
        f"Colab: installing the course (amp_lessons) from {source.as_uri()}"
    )
    assert lines[-1].startswith(str(venv)), lines


# ---- what a page may show -----------------------------------------------------------


def _fixture_notebook():
    nb = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell(
        "def update_scale(scale):\n    ### BEGIN SOLUTION\n"
        "    return scale * 0.5  # the secret rule\n    ### END SOLUTION\n"
    )
    solution.metadata["nbgrader"] = {
        "solution": True,
        "grade": False,
        "grade_id": "x",
        "schema_version": 3,
    }
    solution.outputs = [nbformat.v4.new_output("stream", text="solved\n")]
    test = nbformat.v4.new_code_cell(
        "check(update_scale)\n### BEGIN HIDDEN TESTS\n"
        "check(update_scale, hidden_answers=[0.25, 0.125])\n### END HIDDEN TESTS"
    )
    test.metadata["nbgrader"] = {
        "grade": True,
        "solution": False,
        "points": 1,
        "grade_id": "x_test",
        "schema_version": 3,
    }
    test.outputs = [nbformat.v4.new_output("stream", text="case 1: right is 0.5\n")]
    later = nbformat.v4.new_code_cell("print(inspect.getsource(reference))")
    later.outputs = [
        nbformat.v4.new_output(
            "stream",
            text=("def reference(scale):\n    return scale * 0.5  # the secret rule\n"),
        )
    ]
    proof = nbformat.v4.new_code_cell("assert True")
    proof.metadata["jupyter"] = {"source_hidden": True}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 · Fixture"),
        solution,
        test,
        later,
        proof,
    ]
    return nb


def test_sanitize_keeps_the_stub_and_drops_every_answer():
    nb = _fixture_notebook()
    leaks = sanitize.solution_lines([nb])
    assert leaks == {
        "return scale * 0.5 # the secret rule",
        "check(update_scale, hidden_answers=[0.25, 0.125])",
    }
    page = sanitize.sanitize(nb, leaks, banner="**Executed on** here")
    text = nbformat.writes(page)
    assert "secret rule" not in text and "hidden_answers" not in text
    assert "right is 0.5" not in text  # the check's table, made by the answer
    solution, test, later, proof = page.cells[2:]
    assert solution.source == (
        "def update_scale(scale):\n    # YOUR CODE HERE\n"
        "    raise NotImplementedError()"
    )
    # the Spanish edition's pages show the stub its student edition has
    es = sanitize.sanitize(nb, leaks, lang="es").cells[1]
    assert es.source == (
        "def update_scale(scale):\n    # ESCRIBA SU CÓDIGO AQUÍ\n"
        "    raise NotImplementedError()"
    )
    assert solution.outputs == []
    assert test.source == "check(update_scale)"
    assert sanitize.TEST_NOTE in test.outputs[0].text
    assert sanitize.LEAK_NOTE in later.outputs[0].text
    assert "hide-input" in proof.metadata.tags
    assert page.cells[1].source == "**Executed on** here"


def test_sanitize_turns_a_widget_into_its_picture():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("fp16_range_explorer()")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                sanitize.WIDGET_VIEW: {"model_id": "box", "version_major": 2},
                "text/plain": "VBox(...)",
            },
        )
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), cell]
    nb.metadata["widgets"] = {
        sanitize.WIDGET_STATE: {
            "state": {
                "box": {
                    "model_name": "VBoxModel",
                    "state": {"children": ["IPY_MODEL_img", "IPY_MODEL_html"]},
                },
                "img": {
                    "model_name": "ImageModel",
                    "state": {"format": "png"},
                    "buffers": [
                        {
                            "path": ["value"],
                            "encoding": "base64",
                            "data": "iVBORw0KGgo=",
                        }
                    ],
                },
                "html": {"model_name": "HTMLModel", "state": {"value": "<b>1e-4</b>"}},
            }
        }
    }
    page = sanitize.sanitize(nb, set())
    outputs = page.cells[1].outputs
    assert [list(o.get("data", {})) for o in outputs] == [
        ["image/png"],
        ["text/html"],
        [],
    ]
    assert "JupyterLab" in outputs[-1].text
    assert "widgets" not in page.metadata


def test_index_table_comes_from_the_readme():
    table = build.readme_lessons()
    assert list(table) == STEMS
    # each lesson's own time (tests/test_notebook_lint.py holds the rows to them)
    for row in table.values():
        assert re.fullmatch(
            r"\d+ min( \+ \d+ min)?", row["study time: core + optional"]
        ), row


def test_index_opens_with_the_readmes_intro_not_its_spanish_link():
    intro = build.readme_intro()
    assert intro.startswith("A hands-on JupyterLab course")
    page = build.index_page({}, {})
    assert intro in page and "README.es.md" not in page


def test_spanish_index_reads_each_lessons_study_time_from_its_first_cell():
    """The Spanish table's study times come from the Spanish lessons themselves; they
    agree with the README's (English) table, lesson by lesson."""
    table = build.readme_lessons()
    for path in ES_LESSONS:
        said = build.spanish_study_time(nbformat.read(path, as_version=4))
        assert said == table[path.stem]["study time: core + optional"], path.stem
    untimed = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# 99 · x")]
    )
    assert build.spanish_study_time(untimed) == ""


# ---- the built site -----------------------------------------------------------------


@pytest.fixture(scope="session")
def executed_dir(tmp_path_factory, lesson_runs) -> Path:
    """Every lesson as executed once for the whole run: the first pass of the
    student-path kernels (conftest's ``lesson_runs``, which the slides use too), with
    what ran them; those kernels run this very Python, so it is probed here. The
    Spanish lessons `ES_TESTED` (their kernels' second pass) go to ``es/``.
    AMP_EXECUTED_NOTEBOOKS=DIR takes copies executed elsewhere instead (all of them,
    the Spanish ones in DIR/es, as ``execute DIR`` writes them)."""
    given = os.environ.get("AMP_EXECUTED_NOTEBOOKS")
    if given:
        return Path(given)
    from student_paths import paused_twice

    from amp_lessons.tooling.site.execute import probe_here, record

    out = tmp_path_factory.mktemp("executed")
    (out / build.SPANISH).mkdir()
    info = probe_here()
    spanish = [p for p in ES_LESSONS if p.stem in ES_TESTED]
    for path in LESSONS + spanish:
        lesson = paused_twice(path, lesson_runs)
        nb = copy.deepcopy(lesson.executed)
        pass_no = 2 if path in spanish else 1  # the Spanish run is the second pass
        record(nb, dict(info, seconds=round(lesson.run.pass_seconds(pass_no), 1)))
        folder = out / build.SPANISH if path in spanish else out
        nbformat.write(without_svg_copies(nb), folder / path.name)
    return out


def without_svg_copies(nb):
    """The figures as a lesson shows them, PNG: the Spanish pass also drew each one
    as SVG with real text, for the language check to read."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                data.pop("image/svg+xml", None)
    return nb


@pytest.fixture(scope="session")
def es_stems() -> list[str]:
    """The Spanish lessons the site is built with (see `ES_TESTED`)."""
    return ES_STEMS if os.environ.get("AMP_EXECUTED_NOTEBOOKS") else ES_TESTED


@pytest.fixture(scope="session")
def site(executed_dir, es_stems, tmp_path_factory) -> Path:
    from importlib.util import find_spec

    if not (find_spec("myst_nb") and find_spec("sphinx_book_theme")):
        message = "the site needs the site extra: pip install -e '.[site]'"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return build.build_site(
        executed=executed_dir,
        spanish=es_stems,
        out=tmp_path_factory.mktemp("site") / "site",
    )


@pytest.fixture(scope="session")
def leaks() -> set[str]:
    """The lines no page of either edition may show."""
    return sanitize.solution_lines(
        nbformat.read(p, as_version=4) for p in [*LESSONS, *ES_LESSONS]
    )


def test_site_has_a_page_per_lesson_and_the_index_links_each(site):
    assert [p.stem for p in build.lesson_pages(site)] == STEMS
    index = (site / "index.html").read_text()
    linked = set(re.findall(r'href="(\d\d_[\w]+)\.html"', index))
    assert linked == set(STEMS)
    assert (site / "search.html").is_file() and (site / "searchindex.js").is_file()


def test_spanish_site_has_a_page_per_lesson_and_its_index_links_each(site, es_stems):
    es = site / build.SPANISH
    assert [p.stem for p in build.lesson_pages(es)] == es_stems
    index = (es / "index.html").read_text()
    linked = set(re.findall(r'href="(\d\d_[\w]+)\.html"', index))
    assert linked == set(es_stems)
    assert (es / "search.html").is_file() and (es / "searchindex.js").is_file()
    # the table names each lesson by its Spanish heading; every lesson has its
    # Spanish notebook (09-11 too), so the index sends a Spanish reader to no English
    # lesson, even when this build leaves some Spanish lessons out
    text = " ".join(verify.page_text(es / "index.html").split())
    for path in ES_LESSONS:
        title = build.lesson_title(nbformat.read(path, as_version=4))
        assert (title in text) == (path.stem in es_stems), title
    assert ES_STEMS == STEMS
    assert {"09_amp_in_practice", "10_distributed_amp", "11_fp8"} <= set(ES_STEMS)
    assert "Aún solo en inglés" not in text
    for path in LESSONS:
        english = build.lesson_title(nbformat.read(path, as_version=4))
        assert english not in text, english
    assert not re.search(r'href="\.\./\d\d_', (es / "index.html").read_text())
    assert verify.index_problems(site, {"": STEMS, build.SPANISH: es_stems}) == []


def test_spanish_index_sends_to_english_only_the_lessons_with_no_spanish_notebook():
    """A lesson with no Spanish notebook is named by its English title, with a link
    to the English edition; a Spanish lesson that a partial build leaves out is not."""
    english = {"01_a": "01 · One", "02_b": "02 · Two", "03_c": "03 · Three"}
    spanish = {"01_a": "01 · Uno"}
    page = build.spanish_index_page(spanish, {}, english, {"03_c"})
    assert "versión en inglés</a> de este sitio): 03 · Three." in page
    assert "02 · Two" not in page and "01 · One" not in page
    whole = build.spanish_index_page(spanish, {}, english, ())
    assert "Aún solo en inglés" not in whole and "Three" not in whole


def test_spanish_pages_say_they_are_in_spanish(site, es_stems):
    for name in ["index.html", "search.html", *(f"{s}.html" for s in es_stems)]:
        html = (site / build.SPANISH / name).read_text()
        assert re.search(r'<html lang="es"[ >]', html), name
    assert re.search(r'<html lang="en"[ >]', (site / "index.html").read_text())
    # the theme's own labels, from its Spanish catalogue (Sphinx's `language`)
    text = verify.page_text(site / build.SPANISH / "02_underflow.html")
    assert "Saltar al contenido principal" in text
    assert "Skip to main content" not in text
    assert "Skip to main content" in verify.page_text(site / "02_underflow.html")
    # ... and what those catalogues lack: the search box, the sidebar toggles, the
    # prompts of the collapsed proof cells (build.SPANISH_CHROME)
    for name in ["index.html", "search.html", *(f"{s}.html" for s in es_stems)]:
        labels = verify.chrome_text(site / build.SPANISH / name)
        assert "Buscar..." in labels and "Search..." not in labels, name
        assert "Search..." in verify.chrome_text(site / name), name
    labels = verify.chrome_text(site / build.SPANISH / "02_underflow.html")
    assert {
        "Mostrar el código de la celda",
        "Enlace a este encabezado",
        "Mostrar u ocultar la barra lateral principal",
    } <= labels
    assert verify.chrome_problems(site, [build.SPANISH]) == []


def test_chrome_check_rejects_english_labels_on_a_spanish_page(site, tmp_path):
    spoiled = _spoiled_copy(site, tmp_path)
    page = spoiled / build.SPANISH / "02_underflow.html"
    text = page.read_text()
    for spanish, english in (
        ('placeholder="Buscar..."', 'placeholder="Search..."'),
        (">Ocultar el código de la celda<", ">Hide code cell source<"),
    ):
        assert spanish in text
        text = text.replace(spanish, english)
    page.write_text(text)
    assert verify.chrome_problems(spoiled, [build.SPANISH]) == [
        "es/02_underflow.html: theme text in English: 'Hide code cell source'",
        "es/02_underflow.html: theme text in English: 'Search...'",
    ]


def test_chrome_check_judges_text_not_file_names(tmp_path):
    """A figure identical in both editions (no text in it) has the same file, and
    myst-nb gives its <img> that path as ``alt``: a path is no English label; an
    English ``alt`` or button is (issue 42, item 9: ``make site`` failed on
    ``es/06_speed_memory.html: theme text in English: '_images/8c7f...png'``)."""
    image = '<img alt="../_images/8c7fb349e0.png" src="../_images/8c7fb349e0.png">'
    (tmp_path / "es").mkdir()
    (tmp_path / "06_speed_memory.html").write_text(
        f'<p>{image}<img alt="A bar chart" src="a.svg"><button>Copy</button></p>'
    )
    (tmp_path / "es" / "06_speed_memory.html").write_text(
        f'<p>{image}<img alt="A bar chart" src="a.svg"><button>Copy</button></p>'
    )
    assert verify.chrome_problems(tmp_path, ["es"]) == [
        "es/06_speed_memory.html: theme text in English: 'A bar chart'",
        "es/06_speed_memory.html: theme text in English: 'Copy'",
    ]


def test_each_index_links_the_other_edition(site):
    english = (site / "index.html").read_text()
    spanish = (site / build.SPANISH / "index.html").read_text()
    assert re.search(r'<a href="es/index.html"[^>]*>Versión en español</a>', english)
    assert re.search(r'<a href="../index.html"[^>]*>English version</a>', spanish)
    assert "Versión en español" not in spanish and "English version" not in english


def test_index_check_rejects_an_unlinked_or_missing_page_and_a_broken_edition_link(
    site, es_stems, tmp_path
):
    spoiled = _spoiled_copy(site, tmp_path)
    unlinked, gone = "02_underflow", "00_amp_in_10_minutes"
    index = spoiled / build.SPANISH / "index.html"
    index.write_text(index.read_text().replace(f'href="{unlinked}.html"', 'href="#"'))
    (spoiled / build.SPANISH / f"{gone}.html").unlink()
    index = spoiled / "index.html"
    index.write_text(
        index.read_text().replace('href="es/index.html"', 'href="es/indice.html"')
    )
    assert verify.index_problems(spoiled, {"": STEMS, build.SPANISH: es_stems}) == [
        "index.html links es/indice.html, missing at es/indice.html",
        f"es/{gone}.html is missing",
        f"es/index.html does not link {unlinked}.html",
        f"es/index.html links {gone}.html, missing at es/{gone}.html",
    ]


def test_each_page_says_what_executed_it(site, executed_dir, es_stems):
    pages = [("", stem, "Executed on") for stem in STEMS]
    pages += [("es/", stem, "Ejecutada en") for stem in es_stems]
    for folder, stem, said in pages:
        info = executed_info(nbformat.read(executed_dir / f"{folder}{stem}.ipynb", 4))
        assert info, f"{folder}{stem}: the executed copy records nothing"
        text = verify.page_text(site / f"{folder}{stem}.html")
        assert (
            f"{said} torch {info['torch']}, {info['device']} "
            f"({info['device_name']}), {info['date']}"
        ) in text, folder + stem


def test_one_search_box_and_an_icon_on_every_page(site, es_stems):
    pages = [
        site / "index.html",
        *(site / f"{s}.html" for s in STEMS),
        site / "es" / "index.html",
        *(site / "es" / f"{s}.html" for s in es_stems),
    ]
    for page in pages:
        html = page.read_text(encoding="utf-8")
        # the sidebar's search field (the header's persistent one is switched off)
        assert html.count("search-button-field") == 1, page.name
        # an icon of its own: else Chromium asks for /favicon.ico and logs a 404
        assert '<link rel="icon" href="_static/favicon.svg"/>' in html, page.name
    for edition in (site, site / "es"):
        assert (edition / "_static" / "favicon.svg").read_text().startswith("<svg")


def test_every_page_names_the_course_as_its_author(site):
    # the theme's footer says "By <author>"; Sphinx's placeholder must never show
    pages = sorted(site.rglob("*.html"))
    unnamed = [p.name for p in pages if "Author name not set" in p.read_text()]
    assert pages and not unnamed
    assert "By AMP from the bits up" in (site / "index.html").read_text()


def test_proof_cells_are_collapsed(site):
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        hidden = sum(
            1
            for c in nb.cells  # the Colab cell, the learner's progress: not on the page
            if c.metadata.get("jupyter", {}).get("source_hidden")
            and not set(sanitize.LEFT_OUT_TAGS) & set(c.metadata.get("tags", []))
        )
        html = (site / f"{path.stem}.html").read_text()
        assert html.count('<details class="admonition hide above-input">') == hidden


def test_widgets_show_a_picture_and_say_where_they_move(site, executed_dir, es_stems):
    shown = {"en": 0, "es": 0}
    pages = [("", stem, "en") for stem in STEMS]
    pages += [("es/", stem, "es") for stem in es_stems]
    for folder, stem, lang in pages:
        nb = nbformat.read(executed_dir / f"{folder}{stem}.ipynb", as_version=4)
        views = sum(
            1
            for c in nb.cells
            for o in c.get("outputs", [])
            if sanitize.WIDGET_VIEW in o.get("data", {})
        )
        text = verify.page_text(site / f"{folder}{stem}.html")
        assert text.count(sanitize.NOTES[lang]["widget"]) == views, folder + stem
        assert "widget-view" not in (site / f"{folder}{stem}.html").read_text()
        shown[lang] += views
    assert shown["en"] >= 4  # lessons 01, 02, 06 and 11 each show one
    assert shown["es"] >= 1  # 02 (01 and 06 too, where built)


def test_no_solution_or_hidden_test_line_anywhere(site, leaks):
    assert len(leaks) > 50  # the course's exercises: the check has lines to look for
    scanned = [p.relative_to(site).as_posix() for p in verify.site_files(site)]
    assert "searchindex.js" in scanned and "index.html" in scanned
    assert "es/searchindex.js" in scanned and "es/index.html" in scanned
    assert not [p for p in scanned if "/mathjax/" in p]
    assert verify.leak_problems(site, leaks) == []
    assert not list(site.rglob("*.ipynb")), "a notebook copy is published"


def _spoiled_copy(site: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "spoiled"
    shutil.copytree(site, copy, ignore=shutil.ignore_patterns("mathjax"))
    return copy


def test_leak_check_rejects_a_page_or_index_holding_a_solution_line(
    site, leaks, tmp_path
):
    spoiled = _spoiled_copy(site, tmp_path)
    line = sorted(leaks, key=len)[len(leaks) // 2]
    words = line.split(" ")
    # as highlighted code: the line split over spans, quotes escaped
    html = "".join(f'<span class="n">{w}</span> ' for w in words).replace('"', "&quot;")
    page = spoiled / "03_loss_scaling.html"
    page.write_text(page.read_text().replace("</main>", f"<pre>{html}</pre></main>", 1))
    index = spoiled / "searchindex.js"
    index.write_text(index.read_text() + f"\n// {line}\n")
    found = verify.leak_problems(spoiled, leaks)
    assert f"03_loss_scaling.html: {line}" in found
    assert f"searchindex.js: {line}" in found


def test_leak_check_rejects_a_spanish_page_holding_a_solution_line(
    site, leaks, tmp_path
):
    """A line only the Spanish edition has (a solution's translated comment)."""
    english = sanitize.solution_lines(nbformat.read(p, as_version=4) for p in LESSONS)
    spanish_only = sorted(leaks - english)
    assert spanish_only, "the Spanish solutions have no line of their own"
    line = spanish_only[len(spanish_only) // 2]
    spoiled = _spoiled_copy(site, tmp_path)
    html = "".join(f'<span class="c1">{escape(w)}</span> ' for w in line.split(" "))
    page = spoiled / build.SPANISH / "02_underflow.html"
    page.write_text(page.read_text().replace("</main>", f"<pre>{html}</pre></main>", 1))
    index = spoiled / build.SPANISH / "searchindex.js"
    index.write_text(index.read_text() + f"\n// {line}\n")
    found = verify.leak_problems(spoiled, leaks)
    assert f"es/02_underflow.html: {line}" in found
    assert f"es/searchindex.js: {line}" in found
    assert not [f for f in found if not f.startswith("es/")]


def test_no_page_loads_anything_from_another_host(site):
    assert verify.remote_problems(site) == []
    assert (site / "_static" / "mathjax" / "MathJax.js").is_file()
    assert not (site / build.SPANISH / "_static" / "mathjax").exists()  # shared
    conf_mathjax = build.CONF.split("mathjax_path = ")[1].splitlines()[0]
    assert "://" not in conf_mathjax


def test_offline_check_rejects_remote_scripts_styles_and_fonts(site, tmp_path):
    spoiled = _spoiled_copy(site, tmp_path)
    page = spoiled / "01_number_formats.html"
    page.write_text(
        page.read_text().replace(
            "</head>",
            '<script src="https://cdn.example.org/require.js"></script>'
            '<link rel="stylesheet" href="//fonts.example.org/css"></head>',
            1,
        )
    )
    css = spoiled / "_static" / "pygments.css"
    css.write_text(
        "@import url(https://fonts.googleapis.com/css?family=Lato);\n" + css.read_text()
    )
    found = "\n".join(verify.remote_problems(spoiled))
    assert "01_number_formats.html loads https://cdn.example.org/require.js" in found
    assert "01_number_formats.html loads //fonts.example.org/css" in found
    assert "pygments.css (linked by index.html) imports a remote" in found
    page = spoiled / build.SPANISH / "02_underflow.html"
    page.write_text(
        page.read_text().replace(
            "</head>", '<script src="https://cdn.example.org/es.js"></script></head>', 1
        )
    )
    found = "\n".join(verify.remote_problems(spoiled))
    assert "es/02_underflow.html loads https://cdn.example.org/es.js" in found


# ---- in Chromium -------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(site):
    """The site over HTTP on 127.0.0.1 (a free port), as `python -m http.server`."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    from chromium import launch_chromium

    with launch_chromium() as browser:
        yield browser


def visit(browser, url: str) -> dict:
    """Open ``url``; report console errors, requests to another host (blocked), and
    images that did not load."""
    origin = re.match(r"https?://[^/]+", url).group(0)
    page = browser.new_page()
    seen = {"errors": [], "remote": [], "broken_images": [], "images": 0}
    page.on("console", lambda m: m.type == "error" and seen["errors"].append(m.text))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))

    def route(r):
        if r.request.url.startswith((origin + "/", "data:", "blob:")):
            r.continue_()
        else:
            seen["remote"].append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(url, wait_until="load")
    page.wait_for_timeout(300)  # deferred scripts and their requests
    images = page.evaluate("""() => [...document.images].map(
        (i) => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}))""")
    seen["images"] = len(images)
    seen["broken_images"] = [i["src"] for i in images if not i["ok"]]
    seen["text"] = page.inner_text("body")
    page.close()
    return seen


def image_outputs(nb) -> int:
    return sum(
        1
        for c in nb.cells
        for o in c.get("outputs", [])
        if {"image/png", "image/jpeg", "image/svg+xml"} & set(o.get("data", {}))
    )


@pytest.mark.browser
def test_every_page_renders_offline_in_chromium(
    site, served, browser, executed_dir, es_stems
):
    _, base = served
    pages = [
        "index.html",
        "search.html",
        *(f"{s}.html" for s in STEMS),
        "es/index.html",
        "es/search.html",
        *(f"es/{s}.html" for s in es_stems),
    ]
    problems = []
    for name in pages:
        seen = visit(browser, f"{base}/{name}")
        problems += [f"{name}: console: {e}" for e in seen["errors"]]
        problems += [f"{name}: requested {u}" for u in seen["remote"]]
        problems += [f"{name}: image did not load: {u}" for u in seen["broken_images"]]
        if Path(name).name[:2].isdigit():
            executed = nbformat.read(executed_dir / name.replace(".html", ".ipynb"), 4)
            page = sanitize.sanitize(executed, set())
            if seen["images"] < image_outputs(page):
                problems.append(
                    f"{name}: {seen['images']} images, the lesson has "
                    f"{image_outputs(page)} image outputs"
                )
    assert problems == []


@pytest.mark.browser
@pytest.mark.parametrize(
    "search, title, box, found",
    [
        (
            "search.html?q=GradScaler",
            "Loss scaling",
            "Search...",
            r"Search finished, found (one page|\d+ pages) matching the search query\.",
        ),
        (
            "es/search.html?q=underflow",
            "El problema del underflow",
            "Buscar...",
            r"Búsqueda terminada: (una página coincide|\d+ páginas coinciden) con la "
            r"consulta\.",
        ),
    ],
    ids=["english", "spanish"],
)
def test_search_works_offline(served, browser, search, title, box, found):
    _, base = served
    seen = visit(browser, f"{base}/{search}")
    assert seen["remote"] == [] and seen["errors"] == []
    page = browser.new_page()
    page.goto(f"{base}/{search}")
    page.wait_for_selector("#search-results ul li", timeout=20_000)
    # the count, written once the last hit is shown (Sphinx's catalogue for Spanish
    # has none: build.SPANISH_SEARCH_MESSAGES)
    summary = "#search-results p.search-summary"
    page.wait_for_function(f"document.querySelector('{summary}').innerText")
    status = page.inner_text(summary)
    hits = page.locator("#search-results ul li a").all_inner_texts()
    # the search boxes in the edition's language (the page's own and the sidebar's)
    boxes = page.locator("input[name=q]").evaluate_all(
        "inputs => inputs.map(i => i.placeholder)"
    )
    page.close()
    assert any(title in h for h in hits), hits
    assert re.fullmatch(found, status), status
    assert boxes and set(boxes) == {box}, boxes


@pytest.mark.browser
def test_the_edition_links_lead_from_one_index_to_the_other(served, browser):
    _, base = served
    page = browser.new_page()
    page.goto(f"{base}/index.html")
    page.click("text=Versión en español")
    page.wait_for_url(f"{base}/es/index.html")
    spanish = page.get_attribute("html", "lang")
    page.click("text=English version")
    page.wait_for_url(f"{base}/index.html")
    english = page.get_attribute("html", "lang")
    page.close()
    assert (spanish, english) == ("es", "en")


@pytest.mark.browser
def test_browser_check_rejects_errors_remote_requests_and_broken_images(
    site, served, browser, tmp_path
):
    _, base = served
    spoiled = site / "spoiled.html"
    spoiled.write_text(
        "<html><body><script>console.error('boom')</script>"
        '<script src="https://cdn.example.org/x.js"></script>'
        '<img src="_images/missing.png"></body></html>'
    )
    try:
        seen = visit(browser, f"{base}/spoiled.html")
    finally:
        spoiled.unlink()
    assert "boom" in " ".join(seen["errors"])
    assert seen["remote"] == ["https://cdn.example.org/x.js"]
    assert seen["broken_images"] == ["_images/missing.png"]


@pytest.mark.browser
def test_math_renders_offline_with_the_bundled_mathjax(
    executed_dir, es_stems, browser, monkeypatch, tmp_path
):
    """No lesson has math today: a site whose indexes have one formula each shows
    that MathJax (copied beside the English pages, loaded by the Spanish ones from
    there) typesets it, with no error or request out. Built from one lesson in each
    edition: the indexes are what is checked, and each page costs a Sphinx build."""
    index_page, spanish_index_page = build.index_page, build.spanish_index_page
    monkeypatch.setattr(
        build,
        "index_page",
        lambda *a: index_page(*a).replace(
            "Widgets are pictures here", "Math: $2^{-24}$. Widgets are pictures here"
        ),
    )
    monkeypatch.setattr(
        build,
        "spanish_index_page",
        lambda *a: spanish_index_page(*a).replace(
            "Aquí los widgets", "Fórmula: $2^{-24}$. Aquí los widgets"
        ),
    )
    lessons = tmp_path / "notebooks"
    (lessons / build.SPANISH).mkdir(parents=True)
    stem = es_stems[0]
    shutil.copy(ROOT / "notebooks" / f"{stem}.ipynb", lessons)
    shutil.copy(
        ROOT / "notebooks" / build.SPANISH / f"{stem}.ipynb", lessons / build.SPANISH
    )
    site = build.build_site(
        executed=executed_dir, notebooks_dir=lessons, out=tmp_path / "site"
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    results = []
    try:
        for name in ("index.html", "es/index.html"):
            seen = visit(browser, f"{base}/{name}")
            page = browser.new_page()
            page.goto(f"{base}/{name}")
            page.wait_for_selector(".math span.MathJax", timeout=20_000)
            typeset = page.locator(".math span.MathJax").count()
            page.close()
            results.append((name, seen["errors"], seen["remote"], typeset))
    finally:
        server.shutdown()
    assert results == [("index.html", [], [], 1), ("es/index.html", [], [], 1)]
    assert "_static/mathjax/MathJax.js" in (site / "index.html").read_text()
    assert "../_static/mathjax/MathJax.js" in (site / "es" / "index.html").read_text()


def test_build_refuses_a_missing_executed_copy(tmp_path):
    with pytest.raises(FileNotFoundError, match="no executed copy"):
        build.build_site(executed=tmp_path, out=tmp_path / "site")
    assert not (tmp_path / "site").exists()


# ---- the site publishes itself (.github/workflows/site.yml) ------------------------

WORKFLOW = ROOT / ".github" / "workflows" / "site.yml"
TEST_WORKFLOW = ROOT / ".github" / "workflows" / "test.yml"


@pytest.mark.parametrize("workflow", [WORKFLOW, TEST_WORKFLOW], ids=lambda p: p.name)
def test_workflow_validates_against_githubs_schema(workflow):
    check = shutil.which("check-jsonschema") or str(
        Path(sys.executable).parent / "check-jsonschema"
    )
    result = subprocess.run(
        [check, "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # and the check can fail: a job without runs-on is refused
    broken = workflow.read_text().replace("    runs-on: ubuntu-latest\n", "", 1)
    assert broken != workflow.read_text()
    bad = ROOT / "build" / f"broken-{workflow.name}"
    bad.parent.mkdir(exist_ok=True)
    bad.write_text(broken)
    try:
        result = subprocess.run(
            [check, "--builtin-schema", "vendor.github-workflows", str(bad)],
            capture_output=True,
            text=True,
        )
    finally:
        bad.unlink()
    assert result.returncode != 0


def test_the_test_workflow_runs_ci_on_every_push_and_pull_request():
    text = TEST_WORKFLOW.read_text()
    on = text.split("\non:\n", 1)[1].split("\n\n", 1)[0]
    assert "  push:" in on and "  pull_request:" in on and "branches" not in on
    # the very script CI runs here, as root (it installs Debian packages)
    assert 'run: sudo env "PATH=$PATH" CI=true bash .ci/run' in text
    assert (ROOT / ".ci" / "run").is_file()
    # and the README shows its status: the badge once pyproject names the repository
    for lang, readme in colab.READMES.items():
        text = readme.read_text()
        assert colab.ci_status_line(colab.repository_url(), lang) in text, readme
        badged = colab.refresh_readme(text, "https://github.com/ada/amp", lang)
        badge = "https://github.com/ada/amp/actions/workflows/test.yml/badge.svg"
        assert badge in badged and badged.count(colab.CI_MARK) == 1
        assert len(badged.splitlines()) == len(text.splitlines())
        assert colab.refresh_readme(badged, colab.repository_url(), lang) == text


def test_workflow_runs_the_make_targets_for_its_own_repository():
    text = WORKFLOW.read_text()
    assert "make site REPOSITORY=${{ github.repository }}" in text
    assert (
        "make colab-edition REPOSITORY=${{ github.repository }} REF=${{ github.sha }}"
    ) in text
    assert "actions/deploy-pages" in text and "branches: [main]" in text
    dry = subprocess.run(
        ["make", "-n", "site", "colab-edition", "REPOSITORY=ada/amp", "REF=abc123"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert "-m amp_lessons.tooling.site --repository ada/amp" in dry.stdout
    assert '--repository "ada/amp" --ref "abc123"' in dry.stdout


def test_site_colab_links_open_the_given_repository_on_the_colab_branch():
    nb = nbformat.read(LESSONS[0], as_version=4)
    home = build.Home(colab.github_url("ada/amp"), colab.COLAB_BRANCH)
    said = build.banner(nb, LESSONS[0].name, home.repository, "en", home.branch)
    assert (
        f"https://colab.research.google.com/github/ada/amp/blob/colab/notebooks/"
        f"{LESSONS[0].name}"
    ) in said
    es = build.banner(nb, LESSONS[0].name, home.repository, "es", home.branch)
    assert f"/ada/amp/blob/colab/notebooks/es/{LESSONS[0].name}" in es
    assert build.Home.from_pyproject() == build.Home(colab.repository_url(), "colab")
    for bad in ("ada", "ada/amp/extra", "https://github.com/ada/amp", "ada amp/x"):
        with pytest.raises(ValueError, match="OWNER/NAME"):
            colab.github_url(bad)


def test_colab_edition_installs_the_repository_at_the_commit(tmp_path):
    written = colab.write_colab_edition(tmp_path, colab.github_url("ada/amp"), "abc123")
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    assert {f"notebooks/{p.name}" for p in LESSONS} <= names
    assert {f"notebooks/es/{p.name}" for p in ES_LESSONS} <= names
    for path in written:
        nb = nbformat.read(path, as_version=4)
        setup = next(c for c in nb.cells if c.get("id") == colab.CELL_ID)
        assert '"git+https://github.com/ada/amp@abc123"' in setup.source
        folder = path.parent.relative_to(tmp_path).as_posix()
        assert (
            f"](https://colab.research.google.com/github/ada/amp/blob/colab/"
            f"{folder}/{path.name})"
        ) in nb.cells[0].source
    # the student edition: no solution, no hidden test, no output in any lesson
    for path in written:
        nb = nbformat.read(path, as_version=4)
        assert student_edition.leftover_secrets(nb) == [], path
        assert not any("### BEGIN" in c.source or c.get("outputs") for c in nb.cells), (
            path
        )
    # and every answer of the course is gone: no solution line survives in it
    edition_text = " ".join(
        " ".join(c.source.split())
        for path in written
        for c in nbformat.read(path, as_version=4).cells
    )
    leaks = sanitize.solution_lines(
        nbformat.read(p, as_version=4) for p in LESSONS + ES_LESSONS
    )
    assert leaks and not [line for line in leaks if line in edition_text]
    # the lessons themselves are left as they are
    assert colab.main(["--check"]) == 0
