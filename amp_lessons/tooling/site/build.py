"""Build ``build/site/``: the lessons, executed and sanitized, as a Sphinx site.

Sphinx + myst-nb + sphinx-book-theme are pure Python and build offline; MathJax 2 is
copied from jupyter-server-mathjax beside the pages, and myst-nb's widget scripts
(require.js and the widget manager, from CDNs) are switched off: pages show a static
picture of each widget instead (``sanitize``). After Sphinx, ``verify`` must find no
remote script, style, font or image and no solution line, or the build fails.

The Spanish edition (``notebooks/es/``, the lessons translated so far) is a second
Sphinx project built beside the first, into ``es/``, with ``language = "es"`` (the
theme's labels and the search's stemmer in Spanish; what the catalogues leave in
English, such as the search box's "Search...", from `SPANISH_CHROME`), the same
sanitizing and the same checks; each index links the other edition. Its pages load
the one MathJax copy of the English site (``../_static/mathjax``).

Example: ``build_site(executed=Path("ci/executed"))`` -> ``build/site`` with
``index.html``, ``00_welcome.html`` ... ``11_fp8.html`` and ``search.html``, and
``es/index.html``, ``es/00_welcome.html`` ... ``es/11_fp8.html``, from
``ci/executed/<lesson>.ipynb`` and ``ci/executed/es/<lesson>.ipynb``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from amp_lessons.tooling.colab import (
    BADGE_START,
    COLAB_BRANCH,
    colab_url,
    repository_url,
)
from amp_lessons.tooling.site import sanitize, verify
from amp_lessons.tooling.site.execute import execute_lessons, executed_info

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS_DIR = ROOT / "notebooks"
SITE_DIR = ROOT / "build" / "site"
README = ROOT / "README.md"
TITLE = "AMP from the bits up"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"  # one jupyter-server-mathjax ships
MATHJAX = "mathjax/MathJax.js"  # under _static/ (Sphinx joins mathjax_path to it)
SPANISH = "es"  # the Spanish edition: notebooks/es/ -> build/site/es/
# Each index's link to the other edition: raw HTML, since the other edition is a page
# of another Sphinx project (a MyST link would be looked up as a document of this one)
EDITION_LINKS = {
    "en": (
        '<p class="edition-link"><a href="es/index.html" hreflang="es" lang="es">'
        "Versión en español</a></p>"
    ),
    "es": (
        '<p class="edition-link"><a href="../index.html" hreflang="en" lang="en">'
        "English version</a></p>"
    ),
}

# The Spanish edition's words for what the theme, Sphinx and myst-nb print in English
# whatever ``language`` says: the search box's placeholder (a theme option), text
# written into their templates, and messages their Spanish catalogues lack. Each
# Spanish page is rewritten with them after Sphinx (`translate_chrome`), and
# ``verify.chrome_problems`` fails the build on any English one left.
SEARCH_BAR_TEXT = {"es": "Buscar..."}  # the theme's own: "Search..." (booktheme)
SPANISH_CHROME = (
    ('title="Link to this heading"', 'title="Enlace a este encabezado"'),
    ('aria-label="Main"', 'aria-label="Navegación principal"'),
    ('aria-label="Page"', 'aria-label="Contenido de la página"'),
    (
        'title="Toggle primary sidebar"',
        'title="Mostrar u ocultar la barra lateral principal"',
    ),
    (
        'title="Toggle secondary sidebar"',
        'title="Mostrar u ocultar la barra lateral secundaria"',
    ),
    # myst-nb's collapsed cells (the proof cells): "Show code cell {type}"
    (
        'aria-label="Toggle hidden content"',
        'aria-label="Mostrar u ocultar el contenido plegado"',
    ),
    *(
        (f">{verb} code cell {kind}<", f">{verbo} {what}<")
        for verb, verbo in (("Show", "Mostrar"), ("Hide", "Ocultar"))
        for kind, what in (
            ("source", "el código de la celda"),
            ("outputs", "la salida de la celda"),
            ("output", "la salida de la celda"),
            ("content", "la celda"),
        )
    ),
)
# Sphinx's search page messages that its Spanish catalogue leaves empty (the count of
# pages found) or garbles ("ningún documentos ... usted allá seleccionado"); a script
# loaded after its translations.js puts these in their place
SPANISH_SEARCH_SCRIPT = "search_es.js"
SPANISH_SEARCH_MESSAGES = {
    "Your search did not match any documents. Please make sure that all words are "
    "spelled correctly and that you've selected enough categories.": (
        "Su búsqueda no coincide con ninguna página. Compruebe que todas las "
        "palabras están bien escritas."
    ),
    # one, a million (Spanish "many"), any other number: Sphinx's plural_expr for es
    "Search finished, found one page matching the search query.": [
        "Búsqueda terminada: una página coincide con la consulta.",
        "Búsqueda terminada: ${resultCount} páginas coinciden con la consulta.",
        "Búsqueda terminada: ${resultCount} páginas coinciden con la consulta.",
    ],
}

# The course's icon: a 16-bit float's three fields (sign, exponent, mantissa)
FAVICON = """\
<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">
<rect width="16" height="16" rx="3" fill="#1f2937"/>
<rect x="2" y="5" width="2" height="6" fill="#f87171"/>
<rect x="5" y="5" width="4" height="6" fill="#60a5fa"/>
<rect x="10" y="5" width="4" height="6" fill="#34d399"/>
</svg>
"""

CONF = """\
# Written by amp_lessons.tooling.site.build for this build only.
project = {title!r}
author = {title!r}  # the theme prints "By <author>"; unset, "Author name not set"
html_title = {title!r}
language = {language!r}
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
# Chromium asks every site for an icon: without one, /favicon.ico is a 404 it logs
html_favicon = "_static/favicon.svg"
html_copy_source = False        # the sources hold nothing more, but copy nothing
html_show_sourcelink = False
mathjax_path = "{mathjax}?config={mathjax_config}"
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
html_js_files = {js_files!r}
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


BANNER = {
    "en": {
        "executed": (
            "**Executed on** torch {torch}, {device} ({device_name}), "
            "{date}: every output on this page comes from that run. Run "
            "the lesson to measure your own machine."
        ),
        "unrecorded": (
            "**Executed on**: not recorded (this copy was not executed "
            "by `python -m amp_lessons.tooling.site execute`)."
        ),
        "colab": BADGE_START + " [open this lesson in Colab]({url}).",
    },
    "es": {
        "executed": (
            "**Ejecutada en** torch {torch}, {device} ({device_name}), "
            "{date}: cada salida de esta página procede de esa ejecución. "
            "Ejecute la lección para medir su propia máquina."
        ),
        "unrecorded": (
            "**Ejecutada en**: no consta (esta copia no la ejecutó "
            "`python -m amp_lessons.tooling.site execute`)."
        ),
        "colab": ("Ejecútela sin instalar nada: [abra esta lección en Colab]({url})."),
    },
}


@dataclass(frozen=True)
class Home:
    """Where the site sends a reader to run a lesson: the GitHub repository and the
    branch Colab opens the lessons from, ``colab``: the student edition the site
    workflow publishes there. Default: pyproject.toml's repository; the site
    workflow passes the repository it runs in."""

    repository: str | None = None
    branch: str = COLAB_BRANCH

    @classmethod
    def from_pyproject(cls) -> Home:
        return cls(repository_url())


def banner(
    nb,
    name: str,
    repository: str | None,
    lang: str = "en",
    branch: str = COLAB_BRANCH,
) -> str:
    """What the page says under its title: what executed it, where to run it (the
    lesson on ``branch`` of ``repository``, in Colab)."""
    text = BANNER[lang]
    info = executed_info(nb)
    lines = [text["executed"].format(**info) if info else text["unrecorded"]]
    folder = "notebooks" if lang == "en" else f"notebooks/{lang}"
    url = colab_url(name, repository, folder, branch)
    if url:
        lines.append(text["colab"].format(url=url))
    return "\n\n".join(lines)


def spanish_study_time(nb) -> str:
    """A Spanish lesson's study time as its first cell states it: "36 min + 11 min"
    (core path + optional parts), or "7 min" (none optional); "" if not stated.

    Example: "Tiempo de estudio: ruta principal, unos 36 min; partes opcionales, unos
    11 min (...)" -> "36 min + 11 min".
    """
    text = " ".join(nb.cells[0].source.split())
    stated = re.search(r"Tiempo de estudio:([^(]*)", text)
    if not stated:
        return ""
    core = re.search(r"unos (\d+) min", stated.group(1))
    optional = re.search(r"opcionales, unos (\d+) min", stated.group(1))
    if not core:
        return ""
    return f"{core.group(1)} min" + (f" + {optional.group(1)} min" if optional else "")


def _toctree(stems: Iterable[str]) -> str:
    return "\n".join(["```{toctree}", ":hidden:", ":maxdepth: 1", "", *stems, "```"])


def readme_intro(readme: Path = README) -> str:
    """The README's first paragraph of prose, what the course is: not its title, the
    line under it that links the Spanish README (README.es.md), nor the test
    workflow's status line."""
    paragraphs = Path(readme).read_text(encoding="utf-8").split("\n\n")
    return next(
        p
        for p in paragraphs
        if not p.startswith(("#", "<!--")) and "(README.es.md)" not in p
    )


def index_page(
    titles: dict[str, str], table: dict[str, dict[str, str]], other_edition: str = ""
) -> str:
    """The front page: what the course is and the lesson table (from the README);
    ``other_edition``: the link to the Spanish edition (`EDITION_LINKS`), if built."""
    intro = readme_intro()
    rows = [
        "| # | lesson | you leave knowing | widget | study time: core + optional |",
        "|---|---|---|---|---|",
    ]
    for stem, title in titles.items():
        row = table.get(stem, {})
        study = next((v for k, v in row.items() if k.startswith("study time")), "")
        rows.append(
            f"| {stem[:2]} | {{doc}}`{title} <{stem}>` | "
            f"{row.get('you leave knowing', '')} | {row.get('widget', '')} | "
            f"{study} |"
        )
    return "\n\n".join(
        [
            f"# {TITLE}",
            *([other_edition] if other_edition else []),
            intro,
            "Each lesson below was executed for this site; its page says on what. "
            "Exercises show their starting point and hint, never the solution: run "
            "the lessons (JupyterLab, or Colab where linked) to solve them and get "
            "feedback. "
            "Widgets are pictures here; they move in JupyterLab.",
            "\n".join(rows),
            _toctree(titles),
            "",
        ]
    )


def spanish_index_page(
    titles: dict[str, str],
    times: dict[str, str],
    english_titles: dict[str, str],
    untranslated: Iterable[str] | None = None,
) -> str:
    """The Spanish edition's front page. Its lesson table holds what the Spanish
    notebooks themselves say (the README's table is in English): each one's first
    heading and its study time (`spanish_study_time`); the lessons not translated
    (yet), ``untranslated`` (stems: those with no Spanish notebook; by default every
    English lesson not in ``titles``), are named by their English titles, with a link
    to the English edition. A Spanish lesson left out of a partial build is not one."""
    rows = [
        "| # | lección | tiempo de estudio: ruta principal + partes opcionales |",
        "|---|---|---|",
    ]
    for stem, title in titles.items():
        rows.append(
            f"| {stem[:2]} | {{doc}}`{title} <{stem}>` | {times.get(stem, '')} |"
        )
    missing = (
        set(english_titles) - set(titles) if untranslated is None else set(untranslated)
    )
    only_english = [title for stem, title in english_titles.items() if stem in missing]
    parts = [
        f"# {TITLE}",
        EDITION_LINKS["es"],
        "Un curso práctico de entrenamiento con precisión mixta en PyTorch: desde los "
        "bits de un float16 hasta un bucle de entrenamiento real con `torch.amp`, "
        "pasando por gradientes reales que sufren underflow en fp16 y un escalador de "
        "la pérdida escrito desde cero que se comporta bit a bit como "
        "`torch.amp.GradScaler`. Cada número que se muestra se mide en la ejecución, "
        "y cada afirmación la comprueba un `assert`.",
        "Cada lección de la tabla se ejecutó para este sitio; su página indica en qué "
        "máquina. Los ejercicios muestran su punto de partida y su pista, nunca la "
        "solución: ejecute las lecciones (en JupyterLab, o en Colab donde haya enlace) "
        "para resolverlos y recibir la corrección al momento. Aquí los widgets son "
        "imágenes; en JupyterLab se mueven.",
        "\n".join(rows),
    ]
    if only_english:
        parts.append(
            'Aún solo en inglés (en la <a href="../index.html" hreflang="en">'
            "versión en inglés</a> de este sitio): " + "; ".join(only_english) + "."
        )
    return "\n\n".join([*parts, _toctree(titles), ""])


def _mathjax() -> Path:
    from amp_lessons.tooling.grading.slides import _package_dir

    return _package_dir("jupyter_server_mathjax", "MathJax") / "static"


def write_sources(
    executed: dict[str, Path],
    src: Path,
    notebooks_dir: Path = NOTEBOOKS_DIR,
    lang: str = "en",
    index: Callable[[dict[str, str]], str] | None = None,
    leaks: set[str] | None = None,
    home: Home | None = None,
) -> tuple[set[str], dict[str, str]]:
    """The Sphinx project of one edition in ``src``: its sanitized lessons (sources in
    ``notebooks_dir``), conf, and its index: ``index(titles)``, by default the English
    one. ``leaks``: the solution lines no page may show, by default those of these
    lessons and their executed copies (which may come from another commit). ``home``:
    where its Colab links and repository button point (default: pyproject's).
    Returns the leaks and each page's title."""
    copies = {
        stem: nbformat.read(path, as_version=4) for stem, path in executed.items()
    }
    if leaks is None:
        sources = [
            nbformat.read(Path(notebooks_dir) / f"{stem}.ipynb", as_version=4)
            for stem in executed
        ]
        leaks = sanitize.solution_lines([*sources, *copies.values()])
    home = home or Home.from_pyproject()
    titles = _write_pages(copies, src, leaks, lang, home)
    if index is None:

        def index(titles):
            return index_page(titles, readme_lessons())

    (src / "index.md").write_text(index(titles), encoding="utf-8")
    _write_static(src, lang)
    _write_conf(src, lang, home.repository)
    if lang == "en":
        shutil.copytree(_mathjax(), src / "_static" / "mathjax")
    return leaks, titles


def _write_pages(
    copies: dict[str, nbformat.NotebookNode],
    src: Path,
    leaks: set[str],
    lang: str,
    home: Home,
) -> dict[str, str]:
    """Each executed copy as its page's notebook in ``src``: sanitized, its banner
    under the title, the Colab line of the lesson's first cell gone (the banner
    links Colab). Returns each page's title."""
    titles = {}
    for stem, nb in copies.items():
        said = banner(nb, f"{stem}.ipynb", home.repository, lang, home.branch)
        page = sanitize.sanitize(nb, leaks, said, lang)
        page.cells[0].source = sanitize.strip_colab_line(
            page.cells[0].source, BADGE_START
        )
        titles[stem] = lesson_title(page)
        nbformat.write(page, src / f"{stem}.ipynb")
    return titles


def _write_static(src: Path, lang: str) -> None:
    """The files Sphinx copies as they are: the favicon, and for the Spanish edition
    the search messages Sphinx's Spanish catalogue lacks."""
    (src / "_static").mkdir(exist_ok=True)
    (src / "_static" / "favicon.svg").write_text(FAVICON, encoding="utf-8")
    if lang == SPANISH:
        (src / "_static" / SPANISH_SEARCH_SCRIPT).write_text(
            "// Written by amp_lessons.tooling.site.build: what Sphinx's Spanish "
            "catalogue lacks\nObject.assign(Documentation.TRANSLATIONS, "
            + json.dumps(SPANISH_SEARCH_MESSAGES, ensure_ascii=False, indent=1)
            + ");\n",
            encoding="utf-8",
        )


def _write_conf(src: Path, lang: str, repository: str | None) -> None:
    """``conf.py``: the theme's options, the edition's language, scripts and
    MathJax."""
    # one search box: the sidebar's (the header's would be a second one)
    options = {
        "use_download_button": False,
        "use_source_button": False,
        "home_page_in_toc": True,
        "show_navbar_depth": 1,
        "navbar_persistent": [],
    }
    if repository:
        options.update(repository_url=repository, use_repository_button=True)
    if lang in SEARCH_BAR_TEXT:
        options["search_bar_text"] = SEARCH_BAR_TEXT[lang]
    js_files = []
    if lang == SPANISH:  # after Sphinx's translations.js (priority 500)
        js_files.append((SPANISH_SEARCH_SCRIPT, {"priority": 800}))
    # the Spanish pages, one folder down, load the English site's MathJax
    mathjax = MATHJAX if lang == "en" else f"../../_static/{MATHJAX}"
    (src / "conf.py").write_text(
        CONF.format(
            title=TITLE,
            language=lang,
            theme_options=options,
            mathjax=mathjax,
            mathjax_config=MATHJAX_CONFIG,
            js_files=js_files,
        )
    )


def _sphinx(src: Path, html: Path, doctrees: Path) -> None:
    """Build ``src`` into ``html``; myst-nb also writes ``html/../jupyter_execute``."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-q",
            "-E",
            "-d",
            str(doctrees),
            str(src),
            str(html),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError("Sphinx failed:\n" + (result.stdout + result.stderr)[-4000:])
    if result.stderr.strip():
        print(result.stderr.strip()[-3000:], file=sys.stderr)
    (html / ".buildinfo").unlink(missing_ok=True)


def translate_chrome(html_dir: Path) -> None:
    """Rewrite the Spanish edition's pages in ``html_dir`` with `SPANISH_CHROME`: the
    theme's, Sphinx's and myst-nb's English labels in Spanish."""
    for page in Path(html_dir).rglob("*.html"):
        if "_static" in page.relative_to(html_dir).parts:
            continue  # the theme's macro files, not pages
        text = original = page.read_text(encoding="utf-8")
        for english, spanish in SPANISH_CHROME:
            text = text.replace(english, spanish)
        if text != original:
            page.write_text(text, encoding="utf-8")


def build_site(
    executed: Path | None = None,
    out: Path = SITE_DIR,
    notebooks_dir: Path = NOTEBOOKS_DIR,
    spanish: Iterable[str] | None = None,
    home: Home | None = None,
) -> Path:
    """Build the site into ``out`` from executed copies ``executed/<stem>.ipynb`` (all
    lessons) and ``executed/es/<stem>.ipynb`` (the Spanish ones), or, without
    ``executed``, execute the lessons first. ``spanish``: the Spanish lessons to
    build (stems), every one of ``notebooks_dir/es`` by default, none for ``()``.
    ``home``: where the Colab links point (``Home``)."""
    out = Path(out)
    chosen = _choose_lessons(Path(notebooks_dir), spanish)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="site-", dir=out.parent) as tmp:
        tmp = Path(tmp)
        if executed is None:
            execute_lessons(chosen.lessons, tmp / "executed")
            execute_lessons(chosen.es_lessons, tmp / "executed" / SPANISH)
            executed = tmp / "executed"
        src, es_src = tmp / "src", tmp / "src-es"
        leaks, editions = _write_editions(Path(executed), chosen, src, es_src, home)
        staged = tmp / "html"
        _sphinx(src, staged, tmp / "doctrees")
        if SPANISH in editions:
            # built apart, then moved in: myst-nb writes its notebook copies
            # (jupyter_execute/) beside the output folder, which would be in the site
            _sphinx(es_src, tmp / SPANISH / "html", tmp / SPANISH / "doctrees")
            translate_chrome(tmp / SPANISH / "html")
            shutil.move(str(tmp / SPANISH / "html"), staged / SPANISH)
        _refuse_unfit(staged, leaks, editions)
        shutil.rmtree(out, ignore_errors=True)
        shutil.move(str(staged), out)
    return out


@dataclass(frozen=True)
class _Lessons:
    """The lessons one build publishes: every English one, the Spanish ones chosen,
    and the stems of the English lessons with no Spanish notebook."""

    notebooks_dir: Path
    lessons: list[Path]
    es_dir: Path
    es_lessons: list[Path]
    untranslated: set[str]


def _choose_lessons(notebooks_dir: Path, spanish: Iterable[str] | None) -> _Lessons:
    """The lessons in ``notebooks_dir`` and the Spanish ones in its es/ named by
    ``spanish`` (stems; all of them for None). An unknown stem raises
    FileNotFoundError."""
    from amp_lessons.tooling.colab import lesson_notebooks

    lessons = lesson_notebooks(notebooks_dir)
    es_dir = notebooks_dir / SPANISH
    es_lessons = lesson_notebooks(es_dir) if es_dir.is_dir() else []
    # the lessons with no Spanish notebook: the only ones the Spanish index sends to
    # the English edition (a partial build leaves out Spanish lessons, not lessons)
    untranslated = {p.stem for p in lessons} - {p.stem for p in es_lessons}
    if spanish is not None:
        wanted = set(spanish)
        unknown = wanted - {p.stem for p in es_lessons}
        if unknown:
            raise FileNotFoundError("no Spanish lesson " + ", ".join(sorted(unknown)))
        es_lessons = [p for p in es_lessons if p.stem in wanted]
    return _Lessons(notebooks_dir, lessons, es_dir, es_lessons, untranslated)


def _executed_copies(
    executed: Path, chosen: _Lessons
) -> tuple[dict[str, Path], dict[str, Path]]:
    """The executed copy of each English and each Spanish lesson, by stem, from
    ``executed`` and its es/; one missing raises FileNotFoundError."""
    copies = {p.stem: executed / p.name for p in chosen.lessons}
    es_copies = {p.stem: executed / SPANISH / p.name for p in chosen.es_lessons}
    missing = [
        str(p) for p in [*copies.values(), *es_copies.values()] if not p.is_file()
    ]
    if missing:
        raise FileNotFoundError("no executed copy of " + ", ".join(missing))
    return copies, es_copies


def _write_editions(
    executed: Path, chosen: _Lessons, src: Path, es_src: Path, home: Home | None
) -> tuple[set[str], dict[str, list[str]]]:
    """The English project in ``src`` and, if Spanish lessons are built, the Spanish
    one in ``es_src``, each index linking the other edition. Returns the solution
    lines no page may show and each edition's pages ("" is the English one)."""
    copies, es_copies = _executed_copies(executed, chosen)
    # one set of solution lines for the whole site: a line that a student
    # edition shows in either language is no secret, and no page of either
    # edition may show any other
    leaks = sanitize.solution_lines(
        nbformat.read(p, as_version=4)
        for p in [
            *chosen.lessons,
            *chosen.es_lessons,
            *copies.values(),
            *es_copies.values(),
        ]
    )
    src.mkdir()
    link = EDITION_LINKS["en"] if es_copies else ""
    _, titles = write_sources(
        copies,
        src,
        chosen.notebooks_dir,
        index=lambda titles: index_page(titles, readme_lessons(), link),
        leaks=leaks,
        home=home,
    )
    editions = {"": list(titles)}
    if es_copies:
        es_src.mkdir()
        times = {
            p.stem: spanish_study_time(nbformat.read(p, as_version=4))
            for p in chosen.es_lessons
        }
        _, es_titles = write_sources(
            es_copies,
            es_src,
            chosen.es_dir,
            SPANISH,
            index=lambda es: spanish_index_page(es, times, titles, chosen.untranslated),
            leaks=leaks,
            home=home,
        )
        editions[SPANISH] = list(es_titles)
    return leaks, editions


def _refuse_unfit(
    staged: Path, leaks: set[str], editions: dict[str, list[str]]
) -> None:
    """Raise RuntimeError naming every problem ``verify`` finds in the built site:
    a remote resource, a solution line, an index or a label out of place."""
    problems = (
        verify.remote_problems(staged)
        + verify.leak_problems(staged, leaks)
        + verify.index_problems(staged, editions)
        + verify.chrome_problems(staged, [e for e in editions if e])
    )
    if problems:
        raise RuntimeError("the site is not fit to publish:\n" + "\n".join(problems))


def lesson_pages(site: Path = SITE_DIR) -> list[Path]:
    return sorted(p for p in Path(site).glob("[0-9][0-9]_*.html"))
