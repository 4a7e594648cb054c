"""The study-time rule and the notebook reading behind the lint
(tests/test_notebook_lint.py states the rule in full): a cell's study minutes, an
exercise's, a notebook's core path and optional parts, the minutes its header
states, and what a proof cell and an optional part are."""

import ast
import importlib
import json
import math
import re
import textwrap
from pathlib import Path

WORDS_PER_MINUTE = 200
MINUTES_PER_CODE_CELL = 1
FREE_CODE_LINES = 10  # a longer cell costs a minute more for every ten lines past ten
MINUTES_PER_POINT = 2
MINUTES_PER_QUESTION = 2  # a multiple-choice question: lesson 08's, a point each
MINUTES_PER_SOLUTION_STATEMENT = 1.25
RULE = (
    "200 words a minute of prose, printed text included; 1 minute per code cell, "
    "plus 1 for every 10 lines past 10; an exercise the largest of 2 minutes a "
    "point, 2 minutes a multiple-choice question and 1.25 minutes per statement of "
    "its solution"
)
# Functions whose printed text is prose a student reads (a quiz, the clinic's cases):
# the module that defines each, so the lint can print it as the lesson does.
PRINTED_PROSE = {
    "quick_check_text": "amp_lessons.teaching.quiz",
    "clinic_text": "amp_lessons.teaching.clinic",
}
SOLUTION = re.compile(
    r"^[ \t]*### BEGIN SOLUTION[^\n]*\n(.*?)^[ \t]*### END SOLUTION", re.S | re.M
)
HEADER = re.compile(r"core path about (\d+) min(?:, optional parts about (\d+) min)?")


def as_python(source: str) -> str:
    """The cell's source with IPython magics and shell lines commented out."""
    return "\n".join(
        "#" + line if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )


def nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_proof_cell(cell) -> bool:
    """A code cell, not an exercise's, whose source holds an ``assert`` statement."""
    if cell["cell_type"] != "code" or nbgrader(cell):
        return False
    tree = ast.parse(as_python("".join(cell["source"])))
    return any(isinstance(node, ast.Assert) for node in ast.walk(tree))


def is_collapsed(cell) -> bool:
    meta = cell.get("metadata", {})
    return (
        meta.get("jupyter", {}).get("source_hidden") is True
        and meta.get("slideshow", {}).get("slide_type") == "skip"
    )


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
    return (
        isinstance(node, ast.Expr)
        and isinstance(call, ast.Call)
        and getattr(call.func, "attr", "") == "set_language"
    )


def only_imports(cell) -> bool:
    """A code cell with nothing to read: import statements (and magics) only, and the
    translated edition's ``set_language`` line."""
    body = ast.parse(as_python("".join(cell["source"]))).body
    return all(
        isinstance(node, (ast.Import, ast.ImportFrom)) or _sets_language(node)
        for node in body
    )


def printed_words(cell) -> int:
    """Words a code cell prints as prose: the text of the string literals in its
    ``print(...)`` calls (an f-string's fixed parts), and the text of each
    PRINTED_PROSE function it prints."""
    words = 0
    for node in ast.walk(ast.parse(as_python("".join(cell["source"])))):
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
    if "lesson-end" in cell.get("metadata", {}).get("tags", []):
        return 0.0  # way-finding, not study: the lesson's progress line and the next
    if nbgrader(cell).get("grade") or nbgrader(cell).get("solution"):
        return 0.0  # written and checked, not run and read: see exercise_minutes
    past = max(0, code_lines(cell) - FREE_CODE_LINES)
    return (
        MINUTES_PER_CODE_CELL * (1 + math.ceil(past / FREE_CODE_LINES))
        + printed_words(cell) / WORDS_PER_MINUTE
    )


def solution_statements(cell) -> int:
    """Python statements between the cell's ``### BEGIN SOLUTION`` and ``### END
    SOLUTION`` markers (a compound statement counts 1, plus its body's; a dict literal
    over twelve lines counts 1); blank lines and comments count nothing."""
    count = 0
    for block in SOLUTION.findall("".join(cell["source"])):
        tree = ast.parse(as_python(textwrap.dedent(block)))
        count += sum(isinstance(node, ast.stmt) for node in ast.walk(tree))
    return count


def choice_questions(cell) -> int:
    """Multiple-choice questions a solution answers: the one-letter string values of
    the dict literals in its solution (``{question id: letter}``)."""
    count = 0
    for block in SOLUTION.findall("".join(cell["source"])):
        for node in ast.walk(ast.parse(as_python(textwrap.dedent(block)))):
            if isinstance(node, ast.Dict):
                count += sum(
                    isinstance(v, ast.Constant)
                    and isinstance(v.value, str)
                    and len(v.value) == 1
                    for v in node.values
                )
    return count


def exercise_minutes(nb) -> dict[int, float]:
    """{index of an exercise's first cell: the exercise's study minutes}.

    An exercise is a solution cell and the graded cells that follow it (the quick
    check's one answer cell has ten, a point each); a graded cell with no solution cell
    before it is an exercise of its own. It costs the largest of three estimates:

    - 2 minutes a point (``MINUTES_PER_POINT``): a short answer, a letter or a name per
      question, is thought through, not typed; the quick check's ten points, 20 min;
    - 2 minutes a multiple-choice question (``MINUTES_PER_QUESTION``): an exercise that
      answers several questions for one point (the entry lesson's prediction and its
      question) costs what lesson 08 charges for each;
    - 1.25 minutes per statement of the reference solution
      (``MINUTES_PER_SOLUTION_STATEMENT``): on a first pass, writing code is slower
      than reading it; the learner works out each line, runs the check, reads a failed
      row's hint and fixes it. Lesson 09's GAN step, 16 statements, comes to 20 min;
      a 3-statement function stays at its points' 4 to 6 min.

    Statements, not lines: the answers that are data (a dict of letters, a list of step
    names) are one statement however many lines they take; the points and questions
    price them.
    The task's own words are prose, counted at 200 words a minute where they stand.
    """
    found: dict[int, float] = {}
    first, points, statements, questions = None, 0, 0, 0

    def close():
        if first is not None:
            found[first] = max(
                MINUTES_PER_POINT * points,
                MINUTES_PER_QUESTION * questions,
                MINUTES_PER_SOLUTION_STATEMENT * statements,
            )

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


def in_process_code(path: Path) -> list[tuple[str, str]]:
    """(cell id, source) of a lesson's code cells as a test runs them with exec() in
    its own process: the Colab cell and the graded test cells skipped, IPython's
    magics (``%matplotlib inline``) left out."""
    import nbformat

    return [
        (
            cell.get("id"),
            "\n".join(
                line for line in cell.source.splitlines() if not line.startswith("%")
            ),
        )
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "code"
        and cell.get("id") != "colab-setup"
        and not nbgrader(cell).get("grade")
    ]
