"""Checks a built site must pass: nothing loaded from another host, no solution line,
every lesson page linked from its edition's index (the English one at the root, the
Spanish one in ``es/``).

``build`` runs them after Sphinx and refuses to leave a site that fails any;
tests/test_site.py runs them again and shows each one rejecting a spoiled site.

Example: ``leak_problems(Path("build/site"), solution_lines(nbs)) == []``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from pathlib import Path

from amp_lessons.tooling.grading.slides import offline_problems
from amp_lessons.tooling.site.sanitize import leaked

VENDORED = ("_static/mathjax/",)  # copied verbatim from a package: no lesson text
LESSON_PAGE = "[0-9][0-9]_*.html"
TEXT_SUFFIXES = {".html", ".js", ".json", ".txt", ".ipynb", ".md", ".xml", ".inv"}


def page_text(path: Path) -> str:
    """A file as a reader or the search sees it: for HTML, the text without tags
    (syntax highlighting splits a code line into many spans) and unescaped."""
    raw = Path(path).read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        raw = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", " ", raw, flags=re.S | re.I)
        raw = html.unescape(re.sub(r"<[^>]+>", "", raw))
    return raw


def site_files(site: Path) -> list[Path]:
    """Every file of the site that can carry lesson text (search index included)."""
    site = Path(site)
    return sorted(p for p in site.rglob("*") if p.is_file()
                  and p.suffix in TEXT_SUFFIXES
                  and not any(f"/{v}" in "/" + p.relative_to(site).as_posix()
                              for v in VENDORED))


def leak_problems(site: Path, leaks: set[str]) -> list[str]:
    """Solution lines found anywhere in the site, as "page: line" (empty: none)."""
    problems = []
    for path in site_files(site):
        for line in leaked(page_text(path), leaks):
            problems.append(f"{path.relative_to(site)}: {line}")
    return problems


def remote_problems(site: Path) -> list[str]:
    """What any page would fetch from another host or miss on disk (empty: none):
    scripts, styles, images, fonts (in linked stylesheets)."""
    site = Path(site)
    # each edition's _static/ holds the theme's Jinja macro files (*.html), not pages
    pages = [p for p in sorted(site.rglob("*.html"))
             if "_static" not in p.relative_to(site).parts]
    problems = []
    for page in pages:
        folder = page.parent.relative_to(site).as_posix()
        prefix = "" if folder == "." else f"{folder}/"  # es/02_underflow.html: ...
        problems += [prefix + problem for problem in offline_problems(page)]
    return problems


def index_problems(site: Path, editions: dict[str, Iterable[str]]) -> list[str]:
    """What is wrong with each edition's lesson pages and index (empty: none).

    ``editions`` maps each edition's folder in the site ("" for the English root,
    "es") to the lessons built there (stems). Each lesson must have its page, the
    folder no other lesson page, its ``index.html`` must link every one, and every
    page of the site that index links (the other edition's index among them) must
    exist.
    """
    site = Path(site)
    problems = []
    for folder, stems in editions.items():
        base = site / folder
        where = f"{folder}/" if folder else ""
        index = base / "index.html"
        if not index.is_file():
            problems.append(f"{where}index.html is missing")
            continue
        links = set(re.findall(r'href="([^"#?]+)', index.read_text(encoding="utf-8")))
        pages = {p.stem for p in base.glob(LESSON_PAGE)}
        for stem in sorted(set(stems) | pages):
            if stem not in stems:
                problems.append(f"{where}{stem}.html is not a lesson of this build")
            elif stem not in pages:
                problems.append(f"{where}{stem}.html is missing")
            if f"{stem}.html" not in links:
                problems.append(f"{where}index.html does not link {stem}.html")
        for link in sorted(links):
            if (link.endswith(".html") and not re.match(r"^([a-z]+:)?//", link, re.I)
                    and not (base / link).is_file()):
                problems.append(f"{where}index.html links {link}, missing at "
                                f"{where}{link}")
    return problems
