"""The offline decks as a room sees them: every slide of every lesson rendered in
Chromium at 1280 x 720, executed (the outputs of conftest's ``lesson_runs``, shared
with test_student_paths). No slide's content may run off the stage, and no exercise
slide may show its solution: the solution is in the speaker notes and on a later
slide.

Fixture decks prove both checks can fail: a lesson exported without
``deck_layout`` (as the decks were before it) and a slide too long to cut.
"""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path

import nbformat
import pytest
from chromium import launch_chromium
from paths import LESSONS
from student_paths import paused_twice

from amp_lessons.tooling import grading
from amp_lessons.tooling.grading import deck_layout, lint, slide_heights, slides

pytestmark = pytest.mark.browser

STAGE = {"width": slide_heights.STAGE_W, "height": slide_heights.STAGE_H}

# Shows each slide in turn (as an instructor's arrow key would), lets MathJax and the
# deck's fit-to-stage script finish, and reads what the slide shows.
VISIT_SLIDES = r"""
async () => {
  const mathDone = () => new Promise((resolve) => {
    if (window.MathJax && MathJax.Hub) MathJax.Hub.Queue(resolve); else resolve();
  });
  const seen = [];
  for (const slide of Reveal.getSlides()) {
    const at = Reveal.getIndices(slide);
    Reveal.slide(at.h, at.v, -1);
    await mathDone();
    await new Promise(requestAnimationFrame);
    const notes = [...slide.querySelectorAll("aside.notes")];
    // content cut off inside a box that clips or scrolls (a long printed line)
    const clipped = [...slide.querySelectorAll("*")].filter((e) =>
      e.scrollWidth > e.clientWidth + 2 && e.clientWidth > 0
      && !e.closest("aside.notes") && getComputedStyle(e).overflowX !== "visible")
      .map((e) => `${e.tagName.toLowerCase()}.${[...e.classList].join(".")} `
                  + `${e.scrollWidth} px in ${e.clientWidth}`);
    const heading = slide.querySelector("h1, h2, h3, p.amp-continued");
    seen.push({h: at.h, v: at.v, content: slide.scrollHeight, room: slide.clientHeight,
               wide: slide.scrollWidth, width: slide.clientWidth,
               zoom: slide.dataset.ampZoom || null, clipped,
               title: heading ? heading.innerText.slice(0, 70) : "",
               text: slide.innerText, notes: notes.map((n) => n.innerText).join("\n")});
  }
  return seen;
}
"""


@pytest.fixture(scope="module")
def page():
    with launch_chromium() as browser:
        page = browser.new_page(viewport=STAGE)
        page.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(("file:", "data:"))
                else route.abort()
            ),
        )  # offline
        yield page


def visit(page, deck: Path) -> list[dict]:
    page.goto(deck.as_uri())
    page.wait_for_function("window.Reveal && Reveal.isReady()", timeout=30_000)
    return page.evaluate(VISIT_SLIDES)


def overflows(deck: Path, seen: list[dict]) -> list[str]:
    """Slides whose content is taller or wider than the stage (at the smallest zoom
    the deck allows), or cut off inside a box (a printed line too long)."""
    found = []
    for s in seen:
        where = f"{deck.name} slide {s['h']}/{s['v']} ({s['title']!r})"
        if s["content"] > s["room"] + 1 or s["wide"] > s["width"] + 1:
            found.append(
                f"{where}: content {s['content']} x {s['wide']} px on a "
                f"{s['width']} x {s['room']} slide (zoom {s['zoom']})"
            )
        if s["clipped"]:
            found.append(f"{where}: cut off on the right: {s['clipped'][:3]}")
    return found


def solution_shown_early(source, deck: Path, seen: list[dict]) -> list[str]:
    """For each exercise: the slide with its stub must not show its solution, the
    solution must be in that slide's notes, and shown only on a later slide."""
    problems = []
    for cell in source.cells:
        if not grading.is_solution_cell(cell):
            continue
        secret = sorted(
            line
            for line in lint._secret_lines(cell)
            if len(line) >= lint.LEAK_MIN_CHARS
        )
        header = cell.source.strip().splitlines()[0]  # "def f(x):", kept by the stub
        where = f"{deck.name}, exercise {header!r}"
        first = next((i for i, s in enumerate(seen) if header in s["text"]), None)
        if first is None:
            problems.append(f"{where}: on no slide")
            continue
        if "raise NotImplementedError()" not in seen[first]["text"]:
            problems.append(f"{where}: its first slide shows no stub")
        for i, s in enumerate(seen):
            shown = [line for line in secret if line in s["text"]]
            if shown and i <= first:
                problems.append(
                    f"{where}: slide {s['h']}/{s['v']} shows the solution "
                    f"before the instructor moves on: {shown[:2]}"
                )
        if secret and not all(line in seen[first]["notes"] for line in secret):
            problems.append(f"{where}: the solution is not in the speaker notes")
        if secret and not any(secret[0] in s["text"] for s in seen[first + 1 :]):
            problems.append(f"{where}: no later slide reveals the solution")
    return problems


@pytest.fixture(scope="module")
def course_decks(tmp_path_factory, lesson_runs) -> dict[Path, Path]:
    out = tmp_path_factory.mktemp("decks")
    slides.copy_slide_assets(out)
    exporter = slides.slides_exporter()
    return {
        path: slides.export_deck(
            paused_twice(path, lesson_runs).executed, path.stem, out, exporter
        )
        for path in LESSONS
    }


@pytest.fixture(scope="module")
def visits(course_decks, page) -> dict:
    return {}  # path -> what each slide showed, filled on first use


def seen_in(path: Path, course_decks, page, visits, capsys=None) -> list[dict]:
    if path not in visits:
        start = time.perf_counter()
        visits[path] = seen = visit(page, course_decks[path])
        zoomed = [float(s["zoom"]) for s in seen if s["zoom"] and float(s["zoom"]) < 1]
        if capsys is not None:
            with capsys.disabled():
                print(
                    f"\n{course_decks[path].name}: {len(seen)} slides, {len(zoomed)} "
                    f"shrunk to fit (smallest zoom {min(zoomed, default=1)}), "
                    f"rendered in {time.perf_counter() - start:.1f} s"
                )
    return visits[path]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_slide_overflows(path, course_decks, page, visits, capsys):
    seen = seen_in(path, course_decks, page, visits, capsys)
    problems = overflows(course_decks[path], seen)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "path", [p for p in LESSONS if grading.is_graded(p)], ids=lambda p: p.stem
)
def test_no_exercise_slide_shows_its_solution(path, course_decks, page, visits):
    seen = seen_in(path, course_decks, page, visits)
    problems = solution_shown_early(
        nbformat.read(path, as_version=4), course_decks[path], seen
    )
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------
# The checks can fail


def test_checks_catch_a_deck_laid_out_as_before(tmp_path, page, lesson_runs):
    path = next(p for p in LESSONS if p.stem.startswith("02_"))
    executed = paused_twice(path, lesson_runs).executed
    slides.copy_slide_assets(tmp_path)
    body, _ = slides.slides_exporter().from_notebook_node(
        copy.deepcopy(executed), {"metadata": {"name": path.stem}}
    )  # no deck_layout
    deck = tmp_path / f"{path.stem}.slides.html"
    deck.write_text(body, encoding="utf-8")
    seen = visit(page, deck)
    assert len(overflows(deck, seen)) >= 5
    leaks = solution_shown_early(nbformat.read(path, as_version=4), deck, seen)
    assert any("shows the solution before the instructor" in p for p in leaks), leaks
    assert any("not in the speaker notes" in p for p in leaks), leaks


def test_overflow_check_catches_a_slide_too_long_to_cut(tmp_path, page):
    nb = nbformat.v4.new_notebook()
    rows = "".join(f"    'row {i}': {i},\n" for i in range(60))
    long_code = "table = {\n" + rows + "}  # one statement: nowhere to cut it"
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A fixture deck"),
        nbformat.v4.new_code_cell(long_code),
    ]
    nb.cells[0].metadata["slideshow"] = {"slide_type": "slide"}
    slides.copy_slide_assets(tmp_path)
    deck = slides.export_deck(nb, "99_fixture", tmp_path)
    found = overflows(deck, visit(page, deck))
    assert len(found) == 1 and "zoom 0.800" in found[0], found


@pytest.mark.parametrize(
    "path", [p for p in LESSONS if grading.is_graded(p)][:1], ids=lambda p: p.stem
)
def test_deck_layout_is_deterministic_and_drops_the_markers(path):
    nb = nbformat.read(path, as_version=4)
    laid = deck_layout.lay_out_deck(nb)
    assert laid == deck_layout.lay_out_deck(nb)  # the same deck from the same lesson
    text = nbformat.writes(laid)
    assert not re.search("BEGIN (SOLUTION|HIDDEN TESTS)", text)
    assert nb == nbformat.read(path, as_version=4)  # the lesson itself is untouched
