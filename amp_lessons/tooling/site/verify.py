"""Checks a built site must pass: nothing loaded from another host, no solution line.

``build`` runs both after Sphinx and refuses to leave a site that fails either;
tests/test_site.py runs them again and shows each one rejecting a spoiled site.

Example: ``leak_problems(Path("build/site"), solution_lines(nbs)) == []``.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from amp_lessons.tooling.grading.slides import offline_problems
from amp_lessons.tooling.site.sanitize import leaked

VENDORED = ("_static/mathjax/",)  # copied verbatim from a package: no lesson text
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
                  and not p.relative_to(site).as_posix().startswith(VENDORED))


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
    # _static/ holds the theme's Jinja macro files (*.html), not pages
    pages = [p for p in sorted(site.rglob("*.html"))
             if not p.relative_to(site).as_posix().startswith("_static/")]
    return [problem for page in pages for problem in offline_problems(page)]
