"""Checks a built site must pass: nothing loaded from another host, no solution line,
every lesson page linked from its edition's index (the English one at the root, the
Spanish one in ``es/``), and no label of the theme left in English on a Spanish page.

``build`` runs them after Sphinx and refuses to leave a site that fails any;
tests/test_site.py runs them again and shows each one rejecting a spoiled site.

Example: ``leak_problems(Path("build/site"), solution_lines(nbs)) == []``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from html.parser import HTMLParser
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
    return sorted(
        p
        for p in site.rglob("*")
        if p.is_file()
        and p.suffix in TEXT_SUFFIXES
        and not any(f"/{v}" in "/" + p.relative_to(site).as_posix() for v in VENDORED)
    )


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
    pages = [
        p
        for p in sorted(site.rglob("*.html"))
        if "_static" not in p.relative_to(site).parts
    ]
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
            if (
                link.endswith(".html")
                and not re.match(r"^([a-z]+:)?//", link, re.I)
                and not (base / link).is_file()
            ):
                problems.append(
                    f"{where}index.html links {link}, missing at {where}{link}"
                )
    return problems


# Theme text that reads the same in every language: the search shortcut's key names
SAME_IN_EVERY_LANGUAGE = frozenset({"Ctrl", "K", "+"})
LABELS = ("title", "aria-label", "placeholder", "alt")
# a label that is only a file's name or path (myst-nb gives an output's image its path
# as ``alt``): no words to translate, and the same in both editions whenever the
# figure's bytes are (a figure with no text in it)
FILE_NAME = re.compile(r"[^\s]*[\w-]\.(png|jpe?g|svg|gif|webp|pdf|html)", re.I)


class _Chrome(HTMLParser):
    """A page's own labels, not its lesson: the labels (`LABELS`) of every element
    but ``<link>`` (whose title is another page's), a file's name excepted
    (`FILE_NAME`: text is judged, not paths), and the text of its buttons,
    form labels and the prompts of collapsed cells (``<summary>``)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: set[str] = set()
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag != "link":
            self.found.update(
                " ".join(value.split())
                for name, value in attrs
                if name in LABELS
                and value
                and value.strip()
                and not FILE_NAME.fullmatch(value.strip())
            )
        if tag in ("button", "label", "summary"):
            self.open.append(tag)

    def handle_endtag(self, tag) -> None:
        if self.open and self.open[-1] == tag:
            self.open.pop()

    def handle_data(self, data) -> None:
        if self.open and data.strip():
            self.found.add(" ".join(data.split()))


def chrome_text(page: Path) -> set[str]:
    """The labels and prompts of the theme, Sphinx and myst-nb on a page (`_Chrome`).

    Example: ``"Search..." in chrome_text(Path("build/site/index.html"))`` (the search
    box's placeholder).
    """
    parser = _Chrome()
    parser.feed(Path(page).read_text(encoding="utf-8"))
    return parser.found


def chrome_problems(site: Path, editions: Iterable[str]) -> list[str]:
    """The theme's labels a translated edition left in English (empty: none).

    For each page of each edition's folder (``es``) that has an English twin (the
    page of the same name at the site's root), every label or prompt both pages
    show, but for `SAME_IN_EVERY_LANGUAGE`, is English on the translated page: e.g.
    ``es/search.html: theme text in English: 'Search...'``.
    """
    site = Path(site)
    problems = []
    for folder in editions:
        for page in sorted((site / folder).glob("*.html")):
            twin = site / page.name
            if not twin.is_file():
                continue
            shared = chrome_text(page) & chrome_text(twin) - SAME_IN_EVERY_LANGUAGE
            problems += [
                f"{folder}/{page.name}: theme text in English: {text!r}"
                for text in sorted(shared)
            ]
    return problems
