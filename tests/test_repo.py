"""The course's frame: dependency lists agree, notebooks are stored clean, lint passes,
and nothing advertises an unsafe launch (the tooling itself: test_tooling.py)."""

import json
import re
import subprocess
import sys

import nbformat
import pytest
from paths import LESSONS, NOTEBOOKS_DIR, ROOT, SPANISH_DIR


def requirement_lines(text: str) -> list[str]:
    lines = [line.split("#")[0].strip() for line in text.splitlines()]
    return [line for line in lines if line]


def test_environment_yml_agrees_with_requirements():
    required = requirement_lines((ROOT / "requirements.txt").read_text())
    env = (ROOT / "environment.yml").read_text()
    pip_section = env.split("- pip:", 1)[1]
    listed = [m.strip() for m in re.findall(r"^\s+- (.+)$", pip_section, re.M)]
    assert [item for item in listed if item != "-e ."] == required


def test_pyproject_dependencies_agree_with_requirements():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    required = requirement_lines((ROOT / "requirements.txt").read_text())
    assert pyproject["project"]["dependencies"] == required


def test_torch_lower_bound_is_the_release_ci_pins():
    """The oldest torch the requirements promise is one CI runs: .ci/run installs it
    before the tests (and runs the notebooks on the newest one too)."""
    torch_line = next(
        r
        for r in requirement_lines((ROOT / "requirements.txt").read_text())
        if r.startswith("torch")
    )
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(torch_line.removeprefix("torch"))
    pinned = re.search(r"torch==([\d.]+)", (ROOT / ".ci" / "run").read_text())[1]
    lower = next(s.version for s in spec if s.operator == ">=")
    assert pinned.startswith(lower + ".") or pinned == lower, (pinned, lower)
    assert pinned in spec and "2.12.1" not in spec and "3.0.0" not in spec


def test_at_least_the_welcome_notebook_exists():
    assert (NOTEBOOKS_DIR / "00_welcome.ipynb") in LESSONS


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_notebook_is_valid_and_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: cells {dirty} keep outputs; run nbstripout"


def test_clean_check_rejects_a_notebook_with_outputs(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    result = nbformat.v4.new_output("execute_result", {"text/plain": "2"})
    nb.cells[0].outputs = [result]
    nb.cells[0].execution_count = 1
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, tmp_path / "dirty.ipynb")
    with pytest.raises(AssertionError, match="keep outputs"):
        test_notebook_is_valid_and_stored_clean(tmp_path / "dirty.ipynb")


def test_pre_commit_strips_notebook_outputs():
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    assert "nbstripout" in config


def test_ruff_passes():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_the_code_as_it_is():
    """One formatting style: the code is as `ruff format` writes it (the notebooks are
    excluded in pyproject.toml: the Spanish catalogues key a cell by its source)."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_never_uses_the_deprecated_cuda_amp_spelling():
    offenders = [
        p.name
        for p in (ROOT / "amp_lessons").rglob("*.py")
        if "torch.cuda.amp" in p.read_text()
    ]
    assert not offenders


def test_nothing_advertises_an_unsafe_launch():
    paths = [
        ROOT / "README.md",
        ROOT / "Makefile",
        ROOT / ".ci" / "run",
        *ROOT.glob("amp_lessons/**/*.py"),
    ]
    texts = {p: p.read_text() for p in paths}
    for path, text in texts.items():
        assert "0.0.0.0" not in text, path
        assert not re.search(r"token=['\"]{2}|token=\s*$", text, re.M), path
        assert "disable_check_xsrf" not in text, path
    assert "--allow-root" not in texts[ROOT / "README.md"]


def test_readme_names_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_notebook_sequence_is_numbered_in_order():
    names = [p.stem for p in LESSONS]
    # the entry lesson (COURSE.md: a name containing "10_min") sorts first, just
    # before 00_welcome; every other lesson has a number of its own, in order
    entry = [name for name in names if "10_min" in name]
    assert entry in ([], ["00_amp_in_10_minutes"]) and names[: len(entry)] == entry
    assert names[len(entry)] == "00_welcome"
    numbers = [int(name[:2]) for name in names[len(entry) :]]
    assert numbers == sorted(set(numbers))
    assert json.loads(LESSONS[0].read_text())["cells"][0]["cell_type"] == "markdown"


# ---- the Spanish README and instructor guide (translated by hand) ------------------

# each English document and its Spanish translation
TRANSLATED_DOCS = {
    "README.md": "README.es.md",
    "notebooks/INSTRUCTORS.md": "notebooks/es/INSTRUCTORES.md",
}


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d+)*", text))


@pytest.mark.parametrize("english", TRANSLATED_DOCS)
def test_spanish_translation_states_the_same_numbers(english):
    """A number changed in the English README or guide must change in its translation
    too (study times, measurements, limits, versions): both state the same ones."""
    spanish = TRANSLATED_DOCS[english]
    said = {doc: _numbers((ROOT / doc).read_text()) for doc in (english, spanish)}
    assert said[english] - said[spanish] == set(), (
        f"{spanish} lacks numbers {english} states: update the translation"
    )
    assert said[spanish] - said[english] == set(), (
        f"{spanish} states numbers {english} does not: update the translation"
    )


def test_readmes_link_each_other_at_the_top():
    english = (ROOT / "README.md").read_text().split("\n\n")
    spanish = (ROOT / "README.es.md").read_text().split("\n\n")
    assert english[1] == "Versión en español: [README.es.md](README.es.md)"
    assert spanish[1] == "English version: [README.md](README.md)"
    guide = (ROOT / "notebooks/es/INSTRUCTORES.md").read_text().split("\n\n")
    assert guide[1] == "English version: [INSTRUCTORS.md](../INSTRUCTORS.md)"


def test_spanish_readme_table_shows_each_lessons_study_time():
    """The Spanish README's lesson table: a row per lesson, in the English table's
    order, with its study time, which is the one the Spanish lesson states."""
    from amp_lessons.tooling.site.build import readme_lessons, spanish_study_time

    time = "study time: core + optional"
    tiempo = "tiempo de estudio: ruta principal + partes opcionales"
    english = readme_lessons(ROOT / "README.md")
    spanish = readme_lessons(ROOT / "README.es.md")
    assert list(spanish) == list(english) == [p.stem for p in LESSONS]
    for stem, row in spanish.items():
        assert row["#"] == english[stem]["#"], stem
        assert row[tiempo] == english[stem][time], stem
        translated = SPANISH_DIR / f"{stem}.ipynb"
        if translated.is_file():
            said = spanish_study_time(nbformat.read(translated, as_version=4))
            assert row[tiempo] == said, stem


def test_spanish_guide_times_each_lesson_as_the_english_one():
    """The instructor guides' lesson tables (section 6), row by row: the same run
    time, live time and study time."""

    def rows(path):
        return [
            [cell.strip() for cell in line.strip("|").split("|")]
            for line in (ROOT / path).read_text().splitlines()
            if re.match(r"\| \d\d ", line)
        ]

    english = rows("notebooks/INSTRUCTORS.md")
    spanish = rows("notebooks/es/INSTRUCTORES.md")
    assert len(spanish) == len(english) == len(LESSONS)
    for en, es in zip(english, spanish, strict=True):
        assert en[0][:2] == es[0][:2]
        for column in (1, 2, 3):  # runs in, live, study time
            assert re.findall(r"\d+", en[column]) == re.findall(r"\d+", es[column]), (
                en[0],
                column,
            )
        names = [re.findall(r"`([^`]+)`", row[4]) for row in (en, es)]
        assert names[0] == names[1], en[0]  # the exercises: check_* names
