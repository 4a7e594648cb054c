"""Build ``build/site/``: the lessons, executed and sanitized, as a Sphinx site.

Sphinx + myst-nb + sphinx-book-theme are pure Python and build offline; MathJax 2 is
copied from jupyter-server-mathjax beside the pages, and myst-nb's widget scripts
(require.js and the widget manager, from CDNs) are switched off: pages show a static
picture of each widget instead (``sanitize``). After Sphinx, ``verify`` must find no
remote script, style, font or image and no solution line, or the build fails.

Example: ``build_site(executed=Path("ci/executed"))`` -> ``build/site`` with
``index.html``, ``00_welcome.html`` ... ``11_fp8.html`` and ``search.html``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from amp_lessons.tooling.colab import BADGE_START, colab_url, repository_url
from amp_lessons.tooling.site import sanitize, verify
from amp_lessons.tooling.site.execute import execute_lessons, executed_info

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS_DIR = ROOT / "notebooks"
SITE_DIR = ROOT / "build" / "site"
README = ROOT / "README.md"
TITLE = "AMP from the bits up"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"  # one jupyter-server-mathjax ships

CONF = """\
# Written by amp_lessons.tooling.site.build for this build only.
project = {title!r}
html_title = {title!r}
extensions = ["myst_nb"]
exclude_patterns = ["_build", ".*"]
nb_execution_mode = "off"       # executed before, once (tooling.site.execute)
nb_ipywidgets_js = {{}}           # require.js and the widget manager come from CDNs
myst_enable_extensions = ["dollarmath"]
html_theme = "sphinx_book_theme"
html_theme_options = {theme_options!r}
# unset, the theme's script logs "Got invalid theme mode" on every page
html_context = {{"default_mode": "light"}}
html_static_path = ["_static"]
html_copy_source = False        # the sources hold nothing more, but copy nothing
html_show_sourcelink = False
mathjax_path = "mathjax/MathJax.js?config={mathjax_config}"
# MathJax 2 (what jupyter-server-mathjax ships): its STIX-Web fonts only; math only
# in Sphinx's .math spans (myst-nb marks the notebook areas tex2jax_ignore)
myst_update_mathjax = False     # its settings are MathJax 3's
mathjax2_config = {{
    # MathJax_Blank's url('about:blank') is a cross-origin font load Chromium logs
    # as an error on every page with math: local() loads nothing
    "HTML-CSS": {{"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web",
                 "imageFont": None,
                 "styles": {{"@font-face": {{"font-family": "MathJax_Blank",
                                            "src": "local('MathJax_Blank')"}}}}}},
    "menuSettings": {{"assistiveMML": False}},
    "tex2jax": {{"inlineMath": [["\\\\(", "\\\\)"]],
                "displayMath": [["\\\\[", "\\\\]"]],
                "processEscapes": False, "processEnvironments": False,
                "processClass": "math",
                "ignoreClass": "tex2jax_ignore|mathjax_ignore"}},
}}
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]
"""


def lesson_title(nb) -> str:
    """The first heading of the lesson's first cell, e.g. "00 · Welcome: ..."."""
    for line in nb.cells[0].source.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return "untitled"


def readme_lessons(readme: Path = README) -> dict[str, dict[str, str]]:
    """The README's lesson table, by notebook stem: {"00_welcome": {"#": "00",
    "you leave knowing": ..., "widget": ..., "study time: core + optional": ...}}."""
    rows, header = {}, None
    for line in Path(readme).read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None if rows else header
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells if "notebook" in cells else None
        elif not set(line) <= set("|-: "):
            row = dict(zip(header, cells, strict=False))
            rows[row["notebook"].strip("`")] = row
    return rows


def banner(nb, name: str, repository: str | None) -> str:
    """What the page says under its title: what executed it, where to run it."""
    info = executed_info(nb)
    if info:
        lines = [f"**Executed on** torch {info['torch']}, {info['device']} "
                 f"({info['device_name']}), {info['date']}: every output on this page "
                 "comes from that run. Run the lesson to measure your own machine."]
    else:
        lines = ["**Executed on**: not recorded (this copy was not executed by "
                 "`python -m amp_lessons.tooling.site execute`)."]
    url = colab_url(name, repository)
    if url:
        lines.append(f"{BADGE_START} [open this lesson in Colab]({url}).")
    return "\n\n".join(lines)


def index_page(titles: dict[str, str], table: dict[str, dict[str, str]]) -> str:
    """The front page: what the course is and the lesson table (from the README)."""
    intro = README.read_text(encoding="utf-8").split("\n\n")[1]
    rows = ["| # | lesson | you leave knowing | widget | study time: core + optional |",
            "|---|---|---|---|---|"]
    for stem, title in titles.items():
        row = table.get(stem, {})
        study = next((v for k, v in row.items() if k.startswith("study time")), "")
        rows.append(f"| {stem[:2]} | {{doc}}`{title} <{stem}>` | "
                    f"{row.get('you leave knowing', '')} | {row.get('widget', '')} | "
                    f"{study} |")
    toctree = "\n".join(["```{toctree}", ":hidden:", ":maxdepth: 1", "",
                         *titles, "```"])
    return "\n\n".join([
        f"# {TITLE}", intro,
        "Each lesson below was executed for this site; its page says on what. "
        "Exercises show their starting point and hint, never the solution: run the "
        "lessons (JupyterLab, or Colab where linked) to solve them and get feedback. "
        "Widgets are pictures here; they move in JupyterLab.",
        "\n".join(rows), toctree, ""])


def _mathjax() -> Path:
    from amp_lessons.tooling.grading.slides import _package_dir

    return _package_dir("jupyter_server_mathjax", "MathJax") / "static"


def write_sources(executed: dict[str, Path], src: Path,
                  notebooks_dir: Path = NOTEBOOKS_DIR) -> set[str]:
    """The Sphinx project in ``src``: sanitized lessons, index, conf, MathJax.
    Returns the solution lines no page may show: those of the lessons and of the
    executed copies (which may come from another commit)."""
    copies = {stem: nbformat.read(path, as_version=4)
              for stem, path in executed.items()}
    sources = [nbformat.read(Path(notebooks_dir) / f"{stem}.ipynb", as_version=4)
               for stem in executed]
    leaks = sanitize.solution_lines([*sources, *copies.values()])
    repository = repository_url()
    titles = {}
    for stem, nb in copies.items():
        page = sanitize.sanitize(nb, leaks, banner(nb, f"{stem}.ipynb", repository))
        page.cells[0].source = sanitize.strip_colab_line(page.cells[0].source,
                                                         BADGE_START)
        titles[stem] = lesson_title(page)
        nbformat.write(page, src / f"{stem}.ipynb")
    (src / "index.md").write_text(index_page(titles, readme_lessons()),
                                  encoding="utf-8")
    options = {"use_download_button": False, "use_source_button": False,
               "home_page_in_toc": True, "show_navbar_depth": 1}
    if repository:
        options.update(repository_url=repository, use_repository_button=True)
    (src / "conf.py").write_text(CONF.format(title=TITLE, theme_options=options,
                                             mathjax_config=MATHJAX_CONFIG))
    shutil.copytree(_mathjax(), src / "_static" / "mathjax")
    return leaks


def build_site(executed: Path | None = None, out: Path = SITE_DIR,
               notebooks_dir: Path = NOTEBOOKS_DIR) -> Path:
    """Build the site into ``out`` from executed copies ``executed/<stem>.ipynb`` (all
    lessons), or, without ``executed``, execute the lessons first."""
    from amp_lessons.tooling.colab import lesson_notebooks

    out = Path(out)
    lessons = lesson_notebooks(notebooks_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="site-", dir=out.parent) as tmp:
        tmp = Path(tmp)
        if executed is None:
            execute_lessons(lessons, tmp / "executed")
            executed = tmp / "executed"
        copies = {p.stem: Path(executed) / p.name for p in lessons}
        missing = [str(p) for p in copies.values() if not p.is_file()]
        if missing:
            raise FileNotFoundError("no executed copy of " + ", ".join(missing))
        src = tmp / "src"
        src.mkdir()
        leaks = write_sources(copies, src, notebooks_dir)
        staged = tmp / "html"
        result = subprocess.run(
            [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E",
             "-d", str(tmp / "doctrees"), str(src), str(staged)],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError("Sphinx failed:\n"
                               + (result.stdout + result.stderr)[-4000:])
        if result.stderr.strip():
            print(result.stderr.strip()[-3000:], file=sys.stderr)
        (staged / ".buildinfo").unlink(missing_ok=True)
        problems = verify.remote_problems(staged) + verify.leak_problems(staged, leaks)
        if problems:
            raise RuntimeError("the site is not fit to publish:\n"
                               + "\n".join(problems))
        shutil.rmtree(out, ignore_errors=True)
        shutil.move(str(staged), out)
    return out


def lesson_pages(site: Path = SITE_DIR) -> list[Path]:
    return sorted(p for p in Path(site).glob("[0-9][0-9]_*.html"))

