"""The lessons as a student reads them: proof out of the way, study time stated.

A *proof cell* is a code cell that holds an ``assert``: it verifies what the cell
before it showed. It stays in the notebook (nbval runs it) but is collapsed in
JupyterLab and skipped in slides, so a lesson reads as a lesson.

Study time is estimated once, here, from words and cells (the rule RULE states, which
the README and notebooks/INSTRUCTORS.md quote): prose at 200 words a minute, read
carefully, and printed prose counts as prose (the words of the strings a cell prints,
and the quiz and clinic text the package prints); a code cell the student runs and
reads costs one minute, plus one for every ten lines past ten (proof cells, collapsed,
and cells that only import are not counted); an exercise the largest of two minutes a
point, two minutes a multiple-choice question (lesson 08 prices each of its ten at a
point) and 1.25 minutes per statement of its reference solution (``exercise_minutes``
says how and why). A part of a lesson is *optional* from a heading marked "(optional)"
to the next heading of the same or a higher level that is not.
"""

import ast
import importlib
import json
import math
import re
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# 00-08: COURSE.md. The entry lesson (a name with "10_min", COURSE.md's round 3) is a
# 10-minute door over the same ground, taken instead of the core path or before it,
# so it has its own budget (its header test) and is not counted in the four hours.
ENTRY = [p for p in NOTEBOOKS if "10_min" in p.name]
CORE_COURSE = [p for p in NOTEBOOKS if int(p.name[:2]) <= 8 and p not in ENTRY]
MAX_ENTRY_MINUTES = 10

WORDS_PER_MINUTE = 200
MINUTES_PER_CODE_CELL = 1
FREE_CODE_LINES = 10  # a longer cell costs a minute more for every ten lines past ten
MINUTES_PER_POINT = 2
MINUTES_PER_QUESTION = 2  # a multiple-choice question: lesson 08's, a point each
MINUTES_PER_SOLUTION_STATEMENT = 1.25
MAX_CORE_MINUTES = 45  # per lesson
# Lessons 00-08 together, the core course: 4 hours under the first rule, which did not
# count printed text, long cells or each question (issue 31); about 5 hours now.
MAX_COURSE_CORE_MINUTES = 300
RULE = ("200 words a minute of prose, printed text included; 1 minute per code cell, "
        "plus 1 for every 10 lines past 10; an exercise the largest of 2 minutes a "
        "point, 2 minutes a multiple-choice question and 1.25 minutes per statement of "
        "its solution")
# Functions whose printed text is prose a student reads (a quiz, the clinic's cases):
# the module that defines each, so the lint can print it as the lesson does.
PRINTED_PROSE = {
    "quick_check_text": "amp_lessons.teaching.quiz",
    "clinic_text": "amp_lessons.teaching.clinic",
}
SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*### END SOLUTION",
                      re.S | re.M)
HEADER = re.compile(r"core path about (\d+) min(?:, optional parts about (\d+) min)?")
# Where the rule is stated in full: a lesson's header only names it.
RULE_STATED_IN = ("README.md", "notebooks/INSTRUCTORS.md", "notebooks/00_welcome.ipynb")


def _python(source: str) -> str:
    """The cell's source with IPython magics and shell lines commented out."""
    return "\n".join("#" + line if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_proof_cell(cell) -> bool:
    """A code cell, not an exercise's, whose source holds an ``assert`` statement."""
    if cell["cell_type"] != "code" or nbgrader(cell):
        return False
    tree = ast.parse(_python("".join(cell["source"])))
    return any(isinstance(node, ast.Assert) for node in ast.walk(tree))


def is_collapsed(cell) -> bool:
    meta = cell.get("metadata", {})
    return (meta.get("jupyter", {}).get("source_hidden") is True
            and meta.get("slideshow", {}).get("slide_type") == "skip")


def heading(cell) -> tuple[int, str] | None:
    """(level, text) of a markdown cell's first heading line, else None."""
    if cell["cell_type"] != "markdown":
        return None
    for line in "".join(cell["source"]).splitlines():
        match = re.match(r"(#{1,6})\s+(.*)", line)
        if match:
            return len(match.group(1)), match.group(2)
    return None


def optional_cells(nb) -> set[int]:
    """Indices of the cells in optional parts ("(optional)" in a heading)."""
    optional, level = set(), None
    for i, cell in enumerate(nb["cells"]):
        h = heading(cell)
        if h is not None:
            if "(optional)" in h[1].lower():
                if level is None or h[0] <= level:
                    level = h[0]
            elif level is not None and h[0] <= level:
                level = None
        if level is not None:
            optional.add(i)
    return optional


def _sets_language(node) -> bool:
    """``amp_lessons.set_language(...)``: the line a translated edition adds to its
    imports (amp_lessons/tooling/translations.py), set-up like them."""
    call = getattr(node, "value", None)
    return (isinstance(node, ast.Expr) and isinstance(call, ast.Call)
            and getattr(call.func, "attr", "") == "set_language")


def only_imports(cell) -> bool:
    """A code cell with nothing to read: import statements (and magics) only, and the
    translated edition's ``set_language`` line."""
    body = ast.parse(_python("".join(cell["source"]))).body
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) or _sets_language(node)
               for node in body)


def printed_words(cell) -> int:
    """Words a code cell prints as prose: the text of the string literals in its
    ``print(...)`` calls (an f-string's fixed parts), and the text of each
    PRINTED_PROSE function it prints."""
    words = 0
    for node in ast.walk(ast.parse(_python("".join(cell["source"])))):
        if getattr(getattr(node, "func", None), "id", "") != "print":
            continue
        for part in ast.walk(node):
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                words += len(re.findall(r"[^\W\d_]{2,}", part.value))
            elif getattr(getattr(part, "func", None), "id", "") in PRINTED_PROSE:
                name = part.func.id
                text = getattr(importlib.import_module(PRINTED_PROSE[name]), name)()
                words += len(text.split())
    return words


def code_lines(cell) -> int:
    return sum(1 for line in "".join(cell["source"]).splitlines() if line.strip())


def cell_minutes(cell) -> float:
    """Study minutes of one cell read or run, by the rule in this module's docstring;
    an exercise's cells count 0 here: ``exercise_minutes`` counts them together."""
    if cell["cell_type"] == "markdown":
        return len("".join(cell["source"]).split()) / WORDS_PER_MINUTE
    if cell["cell_type"] != "code" or is_proof_cell(cell) or only_imports(cell):
        return 0.0
    if "colab-setup" in cell.get("metadata", {}).get("tags", []):
        return 0.0  # set-up, not study: installs the course in Colab (tooling/colab.py)
    if nbgrader(cell).get("grade") or nbgrader(cell).get("solution"):
        return 0.0  # written and checked, not run and read: see exercise_minutes
    past = max(0, code_lines(cell) - FREE_CODE_LINES)
    return (MINUTES_PER_CODE_CELL * (1 + math.ceil(past / FREE_CODE_LINES))
            + printed_words(cell) / WORDS_PER_MINUTE)


def solution_statements(cell) -> int:
    """Python statements between the cell's ``### BEGIN SOLUTION`` and ``### END
    SOLUTION`` markers (a compound statement counts 1, plus its body's; a dict literal
    over twelve lines counts 1); blank lines and comments count nothing."""
    count = 0
    for block in SOLUTION.findall("".join(cell["source"])):
        tree = ast.parse(_python(textwrap.dedent(block)))
        count += sum(isinstance(node, ast.stmt) for node in ast.walk(tree))
    return count


def choice_questions(cell) -> int:
    """Multiple-choice questions a solution answers: the one-letter string values of
    the dict literals in its solution (``{question id: letter}``)."""
    count = 0
    for block in SOLUTION.findall("".join(cell["source"])):
        for node in ast.walk(ast.parse(_python(textwrap.dedent(block)))):
            if isinstance(node, ast.Dict):
                count += sum(isinstance(v, ast.Constant) and isinstance(v.value, str)
                             and len(v.value) == 1 for v in node.values)
    return count


def exercise_minutes(nb) -> dict[int, float]:
    """{index of an exercise's first cell: the exercise's study minutes}.

    An exercise is a solution cell and the graded cells that follow it (the quick
    check's one answer cell has ten, a point each); a graded cell with no solution cell
    before it is an exercise of its own. It costs the larger of two estimates:

    - 2 minutes a point (``MINUTES_PER_POINT``): a short answer, a letter or a name per
      question, is thought through, not typed; the quick check's ten points, 20 min;
    - 1.25 minutes per statement of the reference solution
      (``MINUTES_PER_SOLUTION_STATEMENT``): on a first pass, writing code is slower
      than reading it; the learner works out each line, runs the check, reads a failed
      row's hint and fixes it. Lesson 09's GAN step, 16 statements, comes to 20 min;
      a 3-statement function stays at its points' 4 to 6 min.

    Statements, not lines: the answers that are data (a dict of letters, a list of step
    names) are one statement however many lines they take, and the points price them.
    The task's own words are prose, counted at 200 words a minute where they stand.
    """
    found: dict[int, float] = {}
    first, points, statements, questions = None, 0, 0, 0

    def close():
        if first is not None:
            found[first] = max(MINUTES_PER_POINT * points,
                               MINUTES_PER_QUESTION * questions,
                               MINUTES_PER_SOLUTION_STATEMENT * statements)

    for i, cell in enumerate(nb["cells"]):
        meta = nbgrader(cell) if cell["cell_type"] == "code" else {}
        if meta.get("solution") or (meta.get("grade") and first is None):
            close()
            first, points, statements, questions = i, 0, 0, 0
        if meta.get("solution"):
            statements += solution_statements(cell)
            questions += choice_questions(cell)
        if meta.get("grade"):
            points += meta.get("points", 0)
        elif not meta.get("solution") and cell["cell_type"] == "code":
            close()  # a plain code cell ends the exercise
            first = None
    close()
    return found


def study_minutes(nb) -> tuple[float, float]:
    """(core path, optional parts) study minutes of a notebook (a dict from JSON)."""
    optional = optional_cells(nb)
    minutes = [cell_minutes(c) for c in nb["cells"]]
    for i, exercise in exercise_minutes(nb).items():
        minutes[i] += exercise
    core = sum(m for i, m in enumerate(minutes) if i not in optional)
    extra = sum(m for i, m in enumerate(minutes) if i in optional)
    return core, extra


def stated_minutes(nb) -> tuple[int, int] | None:
    """(core, optional) minutes the first cell states, None where it states none."""
    match = HEADER.search(" ".join("".join(nb["cells"][0]["source"]).split()))
    if not match:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def read(path: Path) -> dict:
    return json.loads(Path(path).read_text())


# ---- the lint ------------------------------------------------------------------


def visible_proof_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb["cells"])
            if is_proof_cell(c) and not is_collapsed(c)]


def hidden_lesson_cells(nb) -> list[int]:
    """Collapsed code cells that hold no assert: lesson code a student cannot see
    (the Colab set-up cell, collapsed on purpose, is set-up, not the lesson)."""
    return [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and c.get("metadata", {}).get("jupyter", {}).get("source_hidden")
            and not is_proof_cell(c)
            and "colab-setup" not in c.get("metadata", {}).get("tags", [])]


# Test technique: mocks, and code that moves a widget's controls (tests/ does that)
TECHNIQUE = re.compile(r"\bmock\b|\.\w+\.value\s*=[^=]")


def technique_on_core_path(nb) -> list[int]:
    optional = optional_cells(nb)
    return [i for i, c in enumerate(nb["cells"]) if i not in optional
            and c["cell_type"] == "code" and TECHNIQUE.search("".join(c["source"]))]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_proof_cells_are_collapsed_and_skipped_in_slides(path):
    nb = read(path)
    assert not visible_proof_cells(nb), (
        f"{path.name}: cells {visible_proof_cells(nb)} hold asserts but are shown: "
        'set metadata "jupyter": {"source_hidden": true} and "slideshow": '
        '{"slide_type": "skip"}, or move the lesson code to a cell of its own')
    assert not hidden_lesson_cells(nb), (
        f"{path.name}: cells {hidden_lesson_cells(nb)} are collapsed but hold no "
        "assert")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_test_technique_on_the_core_path(path):
    nb = read(path)
    assert not technique_on_core_path(nb), (
        f"{path.name}: cells {technique_on_core_path(nb)} patch with mock or drive a "
        "widget: move them to tests/ or to an '(optional)' part")


def crafted(cells) -> dict:
    nb = nbformat.v4.new_notebook(cells=cells)
    return json.loads(nbformat.writes(nb))


def test_lint_rejects_a_visible_assert_cell(tmp_path):
    show = nbformat.v4.new_code_cell("x = 1 + 1\nprint(x)")
    proof = nbformat.v4.new_code_cell("for v in (x,):\n    assert v == 2")
    path = tmp_path / "visible.ipynb"
    path.write_text(json.dumps(crafted([show, proof])))
    with pytest.raises(AssertionError, match=r"cells \[1\] hold asserts but are shown"):
        test_proof_cells_are_collapsed_and_skipped_in_slides(path)
    proof.metadata.update({"jupyter": {"source_hidden": True},
                           "slideshow": {"slide_type": "skip"}})
    path.write_text(json.dumps(crafted([show, proof])))
    test_proof_cells_are_collapsed_and_skipped_in_slides(path)  # collapsed: fine
    show.metadata["jupyter"] = {"source_hidden": True}  # lesson code hidden: not fine
    path.write_text(json.dumps(crafted([show, proof])))
    with pytest.raises(AssertionError, match=r"cells \[0\] are collapsed"):
        test_proof_cells_are_collapsed_and_skipped_in_slides(path)


def test_proof_cells_are_found_by_their_asserts_not_their_looks():
    assert is_proof_cell(nbformat.v4.new_code_cell("%matplotlib inline\nassert 1"))
    assert not is_proof_cell(nbformat.v4.new_code_cell("print('assert')  # no assert"))
    graded = nbformat.v4.new_code_cell("assert f() == 1")
    graded.metadata["nbgrader"] = {"grade": True, "points": 1}
    assert not is_proof_cell(graded)  # an exercise's test cell is graded, not proof


def test_technique_lint_sees_mocks_and_widget_driving():
    nb = crafted([nbformat.v4.new_code_cell("explorer.slider.value = 2.0**10"),
                  nbformat.v4.new_code_cell("with mock.patch.object(m, 'f', g): ..."),
                  nbformat.v4.new_code_cell("assert explorer.slider.value == 1")])
    assert technique_on_core_path(nb) == [0, 1]
    nb["cells"].insert(0, nbformat.v4.new_markdown_cell("## Under the hood (optional)"))
    assert technique_on_core_path(nb) == []


# ---- study time ------------------------------------------------------------------


def test_optional_parts_end_at_the_next_heading_of_their_level():
    md = nbformat.v4.new_markdown_cell
    code = nbformat.v4.new_code_cell
    nb = crafted([md("# Title"), md("## A"), code("1"), md("### A.1 (optional)"),
                  code("2"), md("#### deeper"), code("3"), md("### A.2"), code("4"),
                  md("## B (optional)"), md("### B.1"), code("5"), md("## C")])
    assert optional_cells(nb) == {3, 4, 5, 6, 9, 10, 11}


def exercise(body: str, *points: int) -> list:
    """A solution cell whose solution is `body`, and one graded cell per point count."""
    code = nbformat.v4.new_code_cell
    lines = "".join(f"    {line}\n" if line else "\n" for line in body.splitlines())
    solution = code("def answer():\n    ### BEGIN SOLUTION\n" + lines
                    + "    ### END SOLUTION")
    solution.metadata["nbgrader"] = {"grade": False, "solution": True}
    tests = [code("check(answer)") for _ in points]
    for test, n in zip(tests, points, strict=True):
        test.metadata["nbgrader"] = {"grade": True, "points": n, "solution": False}
    return [solution, *tests]


def test_study_minutes_follow_the_stated_rule():
    md = nbformat.v4.new_markdown_cell
    code = nbformat.v4.new_code_cell
    short = exercise("x = 1  # one\n\n# a comment\nreturn x", 2)  # 2 statements
    data = exercise('return {\n    "a": "b",\n    "c": "d",\n}', 1)  # 2 questions
    written = exercise("total = 0\nfor v in values:\n    if v:\n        total += v\n"
                       "return total", 1)  # 5 statements
    nb = crafted([md(" ".join(["word"] * 400)), code("print(1)"), code("assert 1"),
                  code("%matplotlib inline\nimport math"), *short, *data,
                  md("## More (optional)"), code("print(2)"), *written])
    assert [solution_statements(nb["cells"][i]) for i in (4, 6, 10)] == [2, 1, 5]
    assert choice_questions(nb["cells"][6]) == 2
    assert exercise_minutes(nb) == {4: 2 * 2, 6: 2 * 2, 10: 1.25 * 5}
    core, extra = study_minutes(nb)
    assert core == 400 / 200 + 1 + 0 + 0 + max(2 * 2, 1.25 * 2) + max(2 * 1, 2 * 2)
    assert extra == 3 / 200 + 1 + max(2 * 1, 1.25 * 5)


def test_a_long_cell_costs_a_minute_more_for_every_ten_lines_past_ten():
    code = nbformat.v4.new_code_cell
    for lines, minutes in ((1, 1), (10, 1), (11, 2), (20, 2), (21, 3), (35, 4)):
        cell = code("\n\n".join(f"x{i} = {i}" for i in range(lines)))  # blanks: free
        assert cell_minutes(cell) == minutes, lines


def test_printed_prose_counts_as_prose():
    code = nbformat.v4.new_code_cell
    said = " ".join(["word"] * 200)
    assert cell_minutes(code(f"print('{said}')")) == 1 + 1
    assert cell_minutes(code(f"print(f'{{x:.2f}} {said} {{y}}')")) == 1 + 1
    assert cell_minutes(code(f"label = '{said}'")) == 1  # not printed: not read out
    assert cell_minutes(code("print(2.5, 'x')")) == 1  # numbers and 1-letter names
    from amp_lessons.teaching.quiz import quick_check_text
    quiz = code("print(quick_check_text())")
    assert cell_minutes(quiz) == 1 + len(quick_check_text().split()) / 200


def test_every_printed_text_function_is_priced():
    """A lesson that prints a function's text (``print(x_text())``) reads prose the
    lint must count: each such function is in PRINTED_PROSE."""
    for path in NOTEBOOKS:
        for cell in read(path)["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse(_python("".join(cell["source"])))):
                if getattr(getattr(node, "func", None), "id", "") == "print":
                    for arg in node.args:
                        name = getattr(getattr(arg, "func", None), "id", "")
                        assert not name.endswith("_text") or name in PRINTED_PROSE, (
                            f"{path.name}: print({name}()) is prose: add it to "
                            "PRINTED_PROSE")


def test_lesson_09s_gan_step_costs_what_writing_it_takes():
    """The calibration the docstring states: about 20 min for the GAN step."""
    nb = read(ROOT / "notebooks" / "09_amp_in_practice.ipynb")
    cell = next(i for i, c in enumerate(nb["cells"])
                if nbgrader(c).get("grade_id") == "09_practice_gan_step")
    assert 20 <= exercise_minutes(nb)[cell] <= 25


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_header_states_the_study_time_it_takes(path):
    nb = read(path)
    stated = stated_minutes(nb)
    assert stated is not None, (
        f"{path.name}: the first cell must state 'core path about N min' (and "
        "', optional parts about M min' where there are optional parts)")
    core, extra = study_minutes(nb)
    for what, said, computed in (("core", stated[0], core),
                                 ("optional", stated[1], extra)):
        assert abs(said - computed) <= max(3, 0.15 * computed), (
            f"{path.name}: the header says {said} min {what}; the estimate gives "
            f"{computed:.0f} min")
    assert core <= MAX_CORE_MINUTES, f"{path.name}: core path {core:.0f} min"


@pytest.mark.parametrize("where", RULE_STATED_IN)
def test_the_rule_is_stated_where_readers_look(where):
    text = (ROOT / where).read_text()
    if where.endswith(".ipynb"):
        text = "".join(json.loads(text)["cells"][0]["source"])
    assert RULE in " ".join(text.split()), f"{where} must state the rule: {RULE!r}"


def test_entry_lesson_fits_in_ten_minutes():
    for path in [*ENTRY, *(ROOT / "notebooks" / "es" / p.name for p in ENTRY)]:
        core, extra = study_minutes(read(path))
        assert core + extra <= MAX_ENTRY_MINUTES, f"{path.name}: {core + extra:.1f} min"


def test_whole_core_path_fits_in_four_hours():
    total = sum(study_minutes(read(p))[0] for p in CORE_COURSE)
    assert total <= MAX_COURSE_CORE_MINUTES, f"core path {total:.0f} min"


def test_readme_table_shows_each_lessons_study_time():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        row = next((line for line in readme.splitlines()
                    if line.startswith(f"| {path.name[:2]} |")
                    and f"`{path.stem}`" in line), None)
        assert row is not None, f"README: no row for {path.name}"
        stated = stated_minutes(read(path))
        assert stated and f"| {stated[0]} min" in row, (
            f"README row of {path.name} must show its core study time, {stated} min")


def report() -> str:
    """The estimate per lesson, for a terminal: python tests/test_notebook_lint.py."""
    lines, total = [], 0.0
    for path in NOTEBOOKS:
        core, extra = study_minutes(read(path))
        total += core if path in CORE_COURSE else 0
        lines.append(f"{path.name:28s} core {core:5.1f} min   "
                     f"optional {extra:5.1f} min")
    return "\n".join([*lines, f"{'core path, lessons 00-08':28s} {total:5.1f} min"])


if __name__ == "__main__":
    print(report())
