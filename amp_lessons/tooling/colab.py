"""Run a lesson without installing anything: Colab links and each lesson's set-up cell.

The course's repository URL is written once, in ``pyproject.toml``
(``[project.urls] Repository = "https://github.com/OWNER/REPO"``). From it come the
"Open in Colab" links (the site's lesson pages and each notebook's first cell) and the
first code cell of every lesson, which in Colab installs the course from that
repository and anywhere else does nothing. A notebook cannot read pyproject.toml in
Colab, so the cell's text is generated: ``python -m amp_lessons.tooling.colab``
rewrites it in every lesson (``--check`` only reports the ones that disagree).

The site workflow (``.github/workflows/site.yml``) publishes a fork's own copy: it
builds the site with the repository it runs in (``GITHUB_REPOSITORY``) and pushes a
*Colab edition* of the lessons, whose set-up cells install that repository at that
commit, to the branch ``colab``, where the site's Colab links point
(``python -m amp_lessons.tooling.colab --edition DIR --repository OWNER/NAME``).

Example: with ``Repository = "https://github.com/ada/amp"``,
``colab_url("02_underflow.ipynb", "https://github.com/ada/amp")`` is
``"https://colab.research.google.com/github/ada/amp/blob/colab/notebooks/02_underflow.ipynb"``
(the branch ``colab`` holds the student edition: a learner never opens a solution).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from amp_lessons.tooling.student_edition import read_student_notebook

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
NOTEBOOKS_DIR = ROOT / "notebooks"
CELL_ID = "colab-setup"
TAG = "colab-setup"
# Tests (and anyone) can install from elsewhere, e.g. file:///path/to/the/course
INSTALL_ENV = "AMP_LESSONS_SOURCE"
BADGE_START = "Run it without installing:"
# Where the site workflow publishes the Colab edition, the student edition of every
# lesson (no solution, no hidden test): every "Open in Colab" link opens it there
COLAB_BRANCH = "colab"

# The cell stays tiny and collapsed: outside Colab it tests one dict key and prints
# nothing; in Colab it installs the course, or says in one line how to.
CELL_TEMPLATE = """\
# In Google Colab this installs the course; anywhere else it does nothing.
import os
import subprocess
import sys

source = os.environ.get("{env}", "{source}")
if "google.colab" in sys.modules and not source:
    print("{not_configured}")
elif "google.colab" in sys.modules:
    print(f"Colab: installing the course (amp_lessons) from {{source}}")
    {install}
    # Colab forgets a runtime's files when it ends, your progress among them. To keep
    # it in Google Drive, run this in a cell before the exercises:
    #   from google.colab import drive; drive.mount("/content/drive")
    #   %env JUPYTER_DATA_DIR=/content/drive/MyDrive/amp_lessons
    # or carry it: python -m amp_lessons progress --export FILE, then --import FILE
    print("Your progress ends with this runtime: open this cell to keep it in Drive.")
"""


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip carries tomli
        from pip._vendor import tomli as tomllib
    return tomllib.loads(Path(path).read_text(encoding="utf-8"))


def repository_url(pyproject: Path = PYPROJECT) -> str | None:
    """``[project.urls] Repository`` of pyproject.toml, without a trailing ``/`` or
    ``.git``; None where it is not set.

    Example: ``repository_url()`` is None while the course has no public home.
    """
    urls = _toml(pyproject).get("project", {}).get("urls", {})
    url = next((v for k, v in urls.items() if k.lower() == "repository"), None)
    if not url:
        return None
    url = url.strip().rstrip("/")
    return url[:-4] if url.endswith(".git") else url


def github_url(slug: str) -> str:
    """``github_url("ada/amp")`` -> ``"https://github.com/ada/amp"`` (what
    ``GITHUB_REPOSITORY`` holds in a workflow); anything else is refused."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", slug or ""):
        raise ValueError(f"repository must be OWNER/NAME as on GitHub, got {slug!r}")
    return f"https://github.com/{slug}"


def colab_url(
    notebook: str,
    repository: str | None,
    folder: str = "notebooks",
    branch: str = COLAB_BRANCH,
) -> str | None:
    """The "Open in Colab" address of ``<folder>/<notebook>`` on ``branch``
    (``folder="notebooks/es"`` for the Spanish edition), None without a GitHub
    repository (Colab opens notebooks from GitHub only)."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", repository or "")
    if not match:
        return None
    owner, repo = match.groups()
    name = Path(notebook).name
    return (
        "https://colab.research.google.com/github/"
        f"{owner}/{repo}/blob/{branch}/{folder}/{name}"
    )


def install_source(repository: str | None, ref: str | None = None) -> str:
    """What pip installs the course from: ``git+<repository>`` (at ``ref``, a commit
    or branch, when given), or "" unset."""
    if not repository:
        return ""
    return f"git+{repository}" + (f"@{ref}" if ref else "")


# The cell's two long lines (a notebook may pass 88 columns; this module may not)
NOT_CONFIGURED = (
    "The course's repository is not configured ([project.urls] "
    "Repository in pyproject.toml), so Colab cannot install it: upload "
    "the course folder and run `pip install -e <folder>`."
)
INSTALL = (
    'subprocess.run([sys.executable, "-m", "pip", "install", "-q", '
    'f"amp_lessons @ {source}"], check=True)'
)


def setup_cell_source(repository: str | None, ref: str | None = None) -> str:
    """The text of every lesson's first code cell for this repository URL."""
    return CELL_TEMPLATE.format(
        env=INSTALL_ENV,
        source=install_source(repository, ref),
        not_configured=NOT_CONFIGURED,
        install=INSTALL,
    )


def badge_line(
    notebook: str,
    repository: str | None,
    folder: str = "notebooks",
    branch: str = COLAB_BRANCH,
) -> str | None:
    url = colab_url(notebook, repository, folder, branch)
    return f"{BADGE_START} [open this lesson in Colab]({url})." if url else None


def _with_badge(markdown: str, line: str | None) -> str:
    kept = [
        ln for ln in markdown.rstrip("\n").split("\n") if not ln.startswith(BADGE_START)
    ]
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept + (["", line] if line else []))


def refresh_notebook(
    nb,
    name: str,
    repository: str | None,
    ref: str | None = None,
    folder: str = "notebooks",
    branch: str = COLAB_BRANCH,
) -> bool:
    """Put the set-up cell first among the code cells and the Colab line at the end of
    the first markdown cell, both as ``repository`` says; True when ``nb`` changed."""
    before = nbformat.writes(nb)
    cells = [c for c in nb.cells if c.get("id") != CELL_ID]
    cell = nbformat.v4.new_code_cell(setup_cell_source(repository, ref))
    cell.id = CELL_ID
    cell.metadata = {
        "jupyter": {"source_hidden": True},  # set-up, not the lesson
        "slideshow": {"slide_type": "skip"},
        "tags": [TAG],
    }
    # right after the title cell: the first code cell, outside any section
    first_code = next(
        (i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells)
    )
    cells.insert(min(first_code, 1 if cells[0].cell_type == "markdown" else 0), cell)
    if cells[0].cell_type == "markdown":
        cells[0].source = _with_badge(
            cells[0].source, badge_line(name, repository, folder, branch)
        )
    nb.cells = cells
    return nbformat.writes(nb) != before


def notebook_problems(path: Path, repository: str | None) -> list[str]:
    """Why a lesson's set-up cell or Colab line disagrees with pyproject (empty: ok)."""
    nb = nbformat.read(path, as_version=4)
    problems = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code or code[0].get("id") != CELL_ID:
        problems.append(f"{path.name}: the first code cell is not the Colab cell")
    elif code[0].source != setup_cell_source(repository):
        problems.append(f"{path.name}: the Colab set-up cell is out of date")
    if refresh_notebook(nb, path.name, repository) and not problems:
        problems.append(f"{path.name}: the Colab line of the first cell is out of date")
    return problems


# The READMEs' line about the test workflow (.github/workflows/test.yml): its status
# badge where pyproject names the repository, else where the badge will come from
CI_MARK = "<!-- ci-status: written by python -m amp_lessons.tooling.colab -->"
READMES = {"en": ROOT / "README.md", "es": ROOT / "README.es.md"}
CI_TEXT = {
    "en": (
        "Tests: [`.github/workflows/test.yml`](.github/workflows/test.yml) runs "
        "`bash .ci/run` on every push and pull request"
    ),
    "es": (
        "Pruebas: [`.github/workflows/test.yml`](.github/workflows/test.yml) "
        "ejecuta `bash .ci/run` en cada push y cada pull request"
    ),
}
CI_NO_BADGE = {
    "en": "; its status badge shows here once pyproject.toml names the repository.",
    "es": (
        "; su insignia de estado aparece aquí cuando pyproject.toml indique el "
        "repositorio."
    ),
}


def ci_status_line(repository: str | None, lang: str = "en") -> str:
    """The READMEs' test-workflow line: the badge of ``repository``'s runs, or
    where it will come from while no repository is set."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", repository or "")
    if not match:
        return f"{CI_MARK}\n{CI_TEXT[lang]}{CI_NO_BADGE[lang]}"
    runs = f"{repository}/actions/workflows/test.yml"
    return f"{CI_MARK}\n[![tests]({runs}/badge.svg)]({runs}) {CI_TEXT[lang]}."


def refresh_readme(text: str, repository: str | None, lang: str = "en") -> str:
    """``text`` (a README) with its test-workflow line as `ci_status_line` says."""
    if CI_MARK not in text:
        raise ValueError(f"the README has no {CI_MARK!r} line to rewrite")
    head, tail = text.split(CI_MARK, 1)
    rest = tail.split("\n", 2)[2] if tail.count("\n") >= 2 else ""
    return f"{head}{ci_status_line(repository, lang)}\n{rest}"


def readme_problems(repository: str | None) -> list[str]:
    """Which README's test-workflow line disagrees with pyproject (empty: none)."""
    return [
        f"{path.name}: the test workflow's line is out of date"
        for lang, path in READMES.items()
        if refresh_readme(path.read_text(encoding="utf-8"), repository, lang)
        != path.read_text(encoding="utf-8")
    ]


def lesson_notebooks(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    return sorted(p for p in Path(notebooks_dir).glob("*.ipynb") if p.is_file())


def write_colab_edition(
    out: Path, repository: str, ref: str, notebooks_dir: Path = NOTEBOOKS_DIR
) -> list[Path]:
    """The lessons as Colab should open them, in ``out/notebooks`` (and
    ``out/notebooks/es``): the student edition (`student_notebook`: stubs where the
    answers were, no hidden test, no output), each set-up cell installing
    ``repository`` at ``ref``, each Colab line pointing at the branch
    ``COLAB_BRANCH``. Returns the files written.

    Example: ``write_colab_edition(Path("build/colab"), github_url("ada/amp"),
    "3f2c1e0")`` -> ``[.../notebooks/00_amp_in_10_minutes.ipynb, ...]``.
    """
    written = []
    for folder in ("notebooks", "notebooks/es"):
        source = Path(notebooks_dir).parent / folder
        for path in lesson_notebooks(source) if source.is_dir() else []:
            nb = read_student_notebook(path)
            refresh_notebook(nb, path.name, repository, ref, folder, COLAB_BRANCH)
            dest = Path(out) / folder / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, dest)
            written.append(dest)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m amp_lessons.tooling.colab",
        description="Write each lesson's Colab cell and link from pyproject.toml.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a lesson disagrees",
    )
    parser.add_argument(
        "--edition",
        type=Path,
        metavar="DIR",
        help="write the Colab edition of every lesson into DIR "
        f"(for the branch {COLAB_BRANCH}) instead; needs "
        "--repository and --ref",
    )
    parser.add_argument(
        "--repository",
        metavar="OWNER/NAME",
        help="the GitHub repository the Colab edition installs",
    )
    parser.add_argument("--ref", help="the commit it installs")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    if args.edition:
        if not (args.repository and args.ref):
            parser.error("--edition needs --repository OWNER/NAME and --ref COMMIT")
        try:
            written = write_colab_edition(
                args.edition, github_url(args.repository), args.ref
            )
        except ValueError as error:
            parser.error(str(error))
        print(
            f"wrote {len(written)} lessons into {args.edition}: they install "
            f"{args.repository} at {args.ref}"
        )
        return 0
    repository = repository_url()
    paths = args.notebooks or lesson_notebooks()
    if args.check:
        problems = [p for path in paths for p in notebook_problems(path, repository)]
        problems += readme_problems(repository)
        print("\n".join(problems) or f"{len(paths)} lessons agree with pyproject.toml")
        return 1 if problems else 0
    changed = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if refresh_notebook(nb, path.name, repository):
            nbformat.write(nb, path)
            changed += 1
    for lang, path in READMES.items():
        text = path.read_text(encoding="utf-8")
        path.write_text(refresh_readme(text, repository, lang), encoding="utf-8")
    where = repository or "no repository set: the cell says how to install instead"
    print(f"{changed} of {len(paths)} lessons rewritten ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
