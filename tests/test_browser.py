"""The course in a real browser: JupyterLab started as `make lab` starts it, driven by
Chromium through Playwright. Every notebook that displays widgets is run top to bottom,
every slider, dropdown and button in it is moved, and its plot must redraw.

Needs Debian's Chromium (`apt-get install chromium`; Playwright's own browser
download is not used) and the `playwright` package (the `dev` extra). Without them the
tests skip, except under CI=true, where they fail: CI must prove the widgets work.

Run alone with `pytest -m browser`; each test prints its latency table, the machine's
load and where the screenshots went, pass or fail. Each widget must redraw within
GOAL_MS (300 ms) at its fastest: a cell's controls are moved again only while a
move is over it, up to MAX_TRIES times, so that unlucky tries on a busy machine (CI
runs two test workers on 2 cores) do not fail it and a quiet one tries twice.
The fixture notebook (a slider and a dropdown driving a matplotlib plot in an Output
widget, plus a copy whose callback does nothing and one that raises) proves the
detector can fail.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser_driver import (
    IDLE,
    NOTEBOOK,
    Move,
    assert_redrew,
    error_outputs,
    exercise_cell,
    fastest_of,
    layout_problems,
    open_and_run,
    screenshot_cell,
    stderr_texts,
    watch_requests,
    widget_cells,
)
from chromium import launch_chromium, require_browser
from lab_server import running_lab
from paths import LESSONS

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1280, "height": 800}
# Every move of a course widget must redraw within GOAL_MS, its fastest of up to
# MAX_TRIES tries: one slow redraw can be another program's doing, the fastest is the
# widget's own. A cell's controls are moved (away and back) once, then again only
# while some move's fastest is over the goal: on a quiet machine two tries settle it
# (a first move can fill a cache), under CI's load (~5 on 2 cores) three once did
# not (405 ms). Every single move must redraw within MAX_REDRAW_MS, a generous bound:
# on 2 cores shared with other jobs (load ~8) the speed panel's first width change
# once took 2.96 s.
MAX_REDRAW_MS = 5000
GOAL_MS = 300
MAX_TRIES = 5

# A notebook "has widgets" when a code cell calls a package `*_explorer()` (STYLE.md:
# those return widgets) or uses ipywidgets itself; the browser must then find a control
# in it, so a widget that fails to render fails the test.
WIDGET_USE = re.compile(r"\b\w+_explorer\s*\(|^\s*(from|import)\s+ipywidgets\b", re.M)


def widget_notebooks() -> list[Path]:
    found = []
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        if any(
            cell.cell_type == "code" and WIDGET_USE.search(cell.source)
            for cell in nb.cells
        ):
            found.append(path)
    return found


def code_cell_count(path: Path) -> int:
    nb = nbformat.read(path, as_version=4)
    return sum(cell.cell_type == "code" for cell in nb.cells)


# --- fixture notebook ------------------------------------------------------------

FIXTURE_CODE = '''\
import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display


def panel(mode="redraw"):
    """A slider and a dropdown driving a matplotlib plot in an Output widget."""
    slider = widgets.FloatSlider(value=1.0, min=0.5, max=4.0, step=0.25,
                                 description="freq (Hz)")
    dropdown = widgets.Dropdown(options=["sin", "cos"], description="wave")
    out = widgets.Output()
    peak = widgets.HTML()

    def draw(change=None):
        with out:
            if change is not None and mode == "raise":
                raise ValueError("a bug in the plotting code")
            t = np.linspace(0, 1, 400)
            wave = np.sin if dropdown.value == "sin" else np.cos
            y = wave(2 * np.pi * slider.value * t)
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(6, 2.5))
            ax.plot(t, y)
            ax.set(xlabel="time (s)", ylabel="amplitude",
                   title=f"{dropdown.value} at {slider.value} Hz")
            display(fig)
            plt.close(fig)
        peak.value = f"first peak at t = {t[np.argmax(y)]:.4f} s"

    draw()
    # mode "noop": the bug the test must catch, the control moves but nothing redraws
    callback = (lambda change: None) if mode == "noop" else draw
    slider.observe(callback, "value")
    dropdown.observe(callback, "value")
    return widgets.VBox([widgets.HBox([slider, dropdown]), peak, out])
'''
FIXTURE_CELLS = {"redraw": 2, "noop": 3, "raise": 4}  # mode -> cell index


def write_fixture(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Browser-test fixture"),
        nbformat.v4.new_code_cell(FIXTURE_CODE),
    ]
    nb.cells += [nbformat.v4.new_code_cell(f'panel("{m}")') for m in FIXTURE_CELLS]
    path = folder / "widget_fixture.ipynb"
    nbformat.write(nb, path)
    return path


# --- fixtures --------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    with launch_chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def shots() -> Path:
    """Screenshots stay after the run, for a person to look at."""
    return Path(tempfile.mkdtemp(prefix="amp-browser-shots-"))


@pytest.fixture(scope="module")
def fixture_page(browser, shots, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixture-root")
    path = write_fixture(folder)
    with running_lab(root_dir=folder) as lab:
        page = browser.new_page(viewport=VIEWPORT)
        off_machine = watch_requests(page)
        page.goto(lab.url(f"/lab/tree/{path.name}", with_token=True))
        try:
            open_and_run(page, code_cell_count(path))
        finally:
            page.screenshot(path=shots / "fixture_after_run.png")
        yield page, off_machine
        page.close()


def shut_down_kernels(lab) -> None:
    request = urllib.request.Request(lab.url("/api/kernels"), headers=lab.auth)
    with urllib.request.urlopen(request, timeout=30) as response:
        kernels = json.load(response)
    for kernel in kernels:
        request = urllib.request.Request(
            lab.url(f"/api/kernels/{kernel['id']}"), headers=lab.auth, method="DELETE"
        )
        urllib.request.urlopen(request, timeout=30).close()


def report(capsys, lines: list[str]) -> None:
    """Print past pytest's capture: the figures belong in the log even on success."""
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def over_goal(moves: list[Move]) -> list[Move]:
    """The moves whose plot took longer than GOAL_MS to redraw."""
    return [m for m in moves if (m.plot_ms or 0) > GOAL_MS]


def tries_until_within_goal(page, index: int) -> list[list[Move]]:
    """Move every control of cell ``index`` (away and back), again and again while
    some move's fastest redraw is over GOAL_MS, at most MAX_TRIES times: each try's
    moves."""
    runs = [exercise_cell(page, index)]
    while len(runs) < MAX_TRIES and over_goal(fastest_of(runs)):
        runs.append(exercise_cell(page, index))
    return runs


def latency_summary(moves: list[Move]) -> str:
    times = [m.plot_ms for m in moves if m.plot_ms is not None]
    if not times:
        return "no redraw timed"
    within = sum(t <= GOAL_MS for t in times)
    return (
        f"redraw latency over {len(times)} moves: median "
        f"{statistics.median(times):.0f} ms, max {max(times):.0f} ms, "
        f"{within}/{len(times)} within the {GOAL_MS} ms goal"
    )


# --- the detector on the fixture ------------------------------------------------


def test_fixture_widgets_redraw(fixture_page, shots, capsys):
    page, off_machine = fixture_page
    assert not error_outputs(page)
    cells = widget_cells(page)
    assert cells == list(FIXTURE_CELLS.values())
    moves = exercise_cell(page, FIXTURE_CELLS["redraw"])
    screenshot_cell(page, FIXTURE_CELLS["redraw"], shots / "fixture_cell.png")
    report(
        capsys,
        [str(m) for m in moves] + [latency_summary(moves), f"screenshots: {shots}"],
    )
    assert [m.kind for m in moves] == ["slider", "slider", "dropdown", "dropdown"]
    assert_redrew(moves, MAX_REDRAW_MS)
    assert all(m.numbers_changed for m in moves)  # "first peak at t = ..." updates
    assert not layout_problems(page, FIXTURE_CELLS["redraw"])
    assert not off_machine  # JupyterLab loads nothing from the internet


def test_detector_catches_a_widget_that_stops_redrawing(fixture_page):
    page, _ = fixture_page
    moves = exercise_cell(page, FIXTURE_CELLS["noop"], timeout_s=2)
    assert moves and all(m.moved for m in moves)  # the controls do move ...
    # ... and nothing else does
    assert not any(m.plot_changed or m.numbers_changed for m in moves)
    with pytest.raises(AssertionError, match="plots that did not redraw"):
        assert_redrew(moves)


def test_detector_catches_a_callback_that_raises(fixture_page):
    page, _ = fixture_page
    moves = exercise_cell(page, FIXTURE_CELLS["raise"], timeout_s=2)
    assert moves[0].errors and "a bug in the plotting code" in moves[0].errors[0]
    with pytest.raises(AssertionError, match="moves that raised"):
        assert_redrew(moves)


# --- the course's widget notebooks ----------------------------------------------

COURSE_WIDGET_NOTEBOOKS = {"01_number_formats", "02_underflow", "06_speed_memory"}


def test_the_courses_widget_notebooks_are_all_covered():
    # COURSE.md's three widgets; a notebook that stopped calling its explorer (or was
    # renamed) would otherwise drop out of the browser test unnoticed
    covered = {p.stem for p in widget_notebooks()}
    assert COURSE_WIDGET_NOTEBOOKS <= covered, (
        f"not found or showing no widget: {sorted(COURSE_WIDGET_NOTEBOOKS - covered)}"
    )


@pytest.fixture(scope="module")
def course_lab():
    require_browser()
    with running_lab() as lab:
        settings = lab.url("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
        with urllib.request.urlopen(
            urllib.request.Request(settings, headers=lab.auth), timeout=30
        ) as response:
            autosave = json.load(response)["settings"]["autosave"]
        assert autosave is False, "autosave must be off before opening the course"
        yield lab


@pytest.mark.parametrize("path", widget_notebooks(), ids=lambda p: p.stem)
def test_widget_notebook_in_the_browser(path, browser, course_lab, shots, capsys):
    page = browser.new_page(viewport=VIEWPORT)
    off_machine = watch_requests(page)
    stored = path.read_bytes()
    try:
        log_start = len(course_lab.log())
        # a workspace of its own: JupyterLab would otherwise reopen the last notebook
        page.goto(
            course_lab.url(
                f"/lab/workspaces/{path.stem}/tree/{path.name}", with_token=True
            )
        )
        run_s = open_and_run(page, code_cell_count(path))
        page.screenshot(path=shots / f"{path.stem}_after_run.png")
        assert not error_outputs(page), "\n".join(error_outputs(page))
        cells = widget_cells(page)
        assert cells, f"{path.name} builds a widget but none rendered a control"
        moves, fastest, layout = [], [], []
        start = time.monotonic()
        for index in cells:
            name = f"{path.stem}_cell{index}"
            screenshot_cell(page, index, shots / f"{name}_before.png")
            # what a student sees at 1280 x 800, the widget scrolled to the top
            page.locator(".jp-Notebook .jp-Cell").nth(index).evaluate(
                "(e) => e.scrollIntoView({block: 'start'})"
            )
            page.screenshot(path=shots / f"{name}_viewport.png")
            runs = tries_until_within_goal(page, index)
            moves += [m for run in runs for m in run]
            fastest += fastest_of(runs)
            screenshot_cell(page, index, shots / f"{name}_after.png")
            layout += [f"cell {index}: {p}" for p in layout_problems(page, index)]
        warnings = [t[:300] for t in stderr_texts(page)]
        kernel_log = course_lab.log()[log_start:]
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        report(
            capsys,
            [
                f"{path.name}: ran in {run_s:.1f} s, widgets exercised in "
                f"{time.monotonic() - start:.1f} s (load {load} on "
                f"{os.cpu_count()} cores)"
            ]
            + [str(m) for m in moves]
            + [
                f"all: {latency_summary(moves)}",
                f"fastest of up to {MAX_TRIES}: {latency_summary(fastest)}",
            ]
            + [f"layout: {p}" for p in layout]
            + [f"stderr shown: {w!r}" for w in warnings]
            + [f"screenshots: {shots}"],
        )
        assert_redrew(moves, MAX_REDRAW_MS)
        slow = [str(m) for m in over_goal(fastest)]
        assert not slow, (
            f"redraws slower than {GOAL_MS} ms even at their fastest of "
            f"{MAX_TRIES} (load {load}):\n" + "\n".join(slow)
        )
        assert not off_machine, f"the page fetched from off this machine: {off_machine}"
        assert "Traceback" not in kernel_log, kernel_log[-3000:]
        assert not layout, "hard to read at 1280 x 800:\n" + "\n".join(layout)
    finally:
        page.close()
        shut_down_kernels(course_lab)  # the next notebook gets both cores
    assert path.read_bytes() == stored, f"{path.name} was written during the test"


# --- the learner's own lab (`make lab`) ----------------------------------------


def lab_chrome(page) -> tuple[str, list[str], list[str]]:
    """The page title, the menu bar's menus and the right sidebar's tabs."""
    menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    tabs = page.locator(".jp-SideBar.jp-mod-right .lm-TabBar-tab").evaluate_all(
        "els => els.map(e => e.title || e.innerText)"
    )
    return page.title(), menus, tabs


def test_the_learners_lab_shows_the_course_not_nbgraders_tools(
    browser, course_lab, shots, tmp_path
):
    """`make lab` serves the learner's copy with nbgrader's authoring menu and cell
    toolbar hidden and the edition in the title, and a lesson opened and left alone
    is not marked unsaved; the instructor's lab (the course's own lessons with
    JupyterLab's settings, as `make lab-instructor` serves them: `course_lab`) shows
    the tools and marks the lesson, so the check can fail."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from amp_lessons.tooling import lab, learner_copy

    dirty_tab = ".lm-TabBar-tab.jp-mod-current.jp-mod-dirty"

    def chrome(server, path: str, name: str, settle_s: float | None = None):
        """The lab's chrome, and the seconds from the kernel's idle to the lesson's
        tab marked unsaved (None: not within `settle_s`; without it, wait for it).
        JupyterLab marks it when the kernel's language_info reaches the notebook,
        which can come seconds after the kernel shows idle on a busy machine."""
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(server.url(path, with_token=True))
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_function("document.title.includes('03_loss')")
        page.wait_for_selector(f"{NOTEBOOK} {IDLE}", timeout=120_000)
        idle = time.monotonic()
        try:
            page.wait_for_selector(dirty_tab, timeout=(settle_s or 120) * 1000)
            marked = time.monotonic() - idle
        except PlaywrightTimeout:
            if settle_s is None:
                raise
            marked = None
        page.screenshot(path=shots / f"lab_{name}.png")
        found = lab_chrome(page)
        if marked is not None and settle_s is not None:  # the learner's: what changed?
            changed[name] = saved_changes(page, report.folder / "03_loss_scaling.ipynb")
        page.close()
        return found, marked

    def saved_changes(page, path) -> list[str]:
        """Save the marked lesson (Ctrl+S) and name what JupyterLab changed in it:
        the top-level metadata keys that differ, and "cells" if any cell did."""
        before = json.loads(path.read_text())
        stamp = path.stat().st_mtime_ns
        page.keyboard.press("Control+s")
        deadline = time.monotonic() + 30
        while path.stat().st_mtime_ns == stamp and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)  # the write, whole
        after = json.loads(path.read_text())
        keys = set(before["metadata"]) | set(after["metadata"])
        changed = [
            k
            for k in sorted(keys)
            if before["metadata"].get(k) != after["metadata"].get(k)
        ]
        sources = [("".join(c["source"]), c["cell_type"]) for c in before["cells"]]
        after_sources = [("".join(c["source"]), c["cell_type"]) for c in after["cells"]]
        return changed + (["cells"] if sources != after_sources else [])

    changed: dict[str, list[str]] = {}

    report = learner_copy.sync("en", tmp_path / "my-course")  # es: its own appName
    settings = lab.learner_settings(report.folder, "en")
    # the course's own notebook first (its bare language_info is replaced when the
    # kernel connects: the tab is marked, so the check can fail), then the learner's
    # copy, watched for three times as long, and 10 s at least
    # (the default workspace: a named one would be in the title; the widget tests
    # open theirs in workspaces of their own)
    seen, marked = {}, {}
    seen["instructor"], marked["instructor"] = chrome(
        course_lab, "/lab/tree/03_loss_scaling.ipynb", "instructor"
    )
    settle_s = max(10.0, 3 * marked["instructor"])
    with running_lab(root_dir=report.folder, settings_dir=settings) as server:
        seen["en"], marked["en"] = chrome(
            server, "/lab/tree/03_loss_scaling.ipynb", "en", settle_s
        )
    # a lesson opened and left alone is not marked unsaved in the learner's copy. In
    # one fresh-clone CI run (of five) its tab was marked all the same, at once, in a
    # way no run here reproduced, even on loaded cores: a mark from another source is
    # saved and named, and only a change to what the fix writes fails the test
    assert marked["en"] is None or "language_info" not in changed["en"], (
        marked,
        changed,
    )
    if marked["en"] is not None:
        print(f"the learner's lesson was marked unsaved: {changed['en']} changed")
    title, menus, tabs = seen["en"]
    assert title.endswith(" - AMP course"), seen["en"]
    assert "Nbgrader" not in menus and "Kernel" in menus, menus
    assert not [t for t in tabs if "Nbgrader" in t], tabs
    title, menus, tabs = seen["instructor"]
    assert title.endswith(" - JupyterLab") and "Nbgrader" in menus, seen["instructor"]
    assert [t for t in tabs if "Nbgrader" in t], tabs
