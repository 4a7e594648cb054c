"""The student edition of a lesson, written without nbgrader: what `make lab` copies
for a learner and what Colab opens.

It is the notebook nbgrader's ``generate_assignment`` writes for the instructor's
``make student`` (tests/test_learner_copy.py compares the two, cell by cell), made
here because a learner's set-up has no nbgrader: each solution block becomes the stub
in the lesson's language (a solution cell without markers becomes the stub whole),
hidden tests go, outputs and execution counts go, graded and locked cells are locked
against deletion (and test cells against editing), and each graded, solution or
locked cell carries nbgrader's checksum, so a learner's copy can be handed in and
graded like one from ``make student``.

Example: ``student_notebook(nbformat.read("notebooks/03_loss_scaling.ipynb", 4))``
has ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` where the answer of
``update_scale`` was, and no ``### BEGIN HIDDEN TESTS`` anywhere.
"""

from __future__ import annotations

import copy
import hashlib

import nbformat

from amp_lessons.tooling.grading.course import CODE_STUBS, TEXT_STUBS

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
# nbconvert's ClearOutputPreprocessor drops these with the outputs
VIEW_METADATA = ("collapsed", "scrolled")


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_solution_cell(cell) -> bool:
    return bool(_meta(cell).get("solution")) or BEGIN_SOLUTION in cell.source


def is_test_cell(cell) -> bool:
    return bool(_meta(cell).get("grade")) and not is_solution_cell(cell)


def between(source: str, begin: str, end: str) -> tuple[list[str], list[list[str]]]:
    """(lines outside the begin/end blocks, the blocks' inner lines); each begin
    marker is kept among the outside lines, for the caller to replace."""
    kept, blocks, inside = [], [], None
    for line in source.split("\n"):
        if inside is None and line.strip() == begin:
            inside = []
            kept.append(line)
        elif inside is not None and line.strip() == end:
            blocks.append(inside)
            inside = None
        elif inside is not None:
            inside.append(line)
        else:
            kept.append(line)
    if inside is not None:
        raise ValueError(f"{begin!r} without {end!r}")
    return kept, blocks


def clear_solution(source: str, code: bool = True, lang: str = "en") -> str:
    """The source with each solution block replaced by the stub in ``lang``, as
    nbgrader's ClearSolutions does in the student edition (a cell without markers
    becomes the stub).

    Example: a body ``### BEGIN SOLUTION`` / ``return 1`` / ``### END SOLUTION``,
    indented 4, becomes ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` (in
    Spanish, ``# ESCRIBA SU CÓDIGO AQUÍ`` and the same ``raise``).
    """
    stub = (CODE_STUBS if code else TEXT_STUBS)[lang]
    if BEGIN_SOLUTION not in source:
        return stub
    kept, _ = between(source, BEGIN_SOLUTION, END_SOLUTION)
    out = []
    for line in kept:
        if line.strip() == BEGIN_SOLUTION:
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + s for s in stub.split("\n"))
        else:
            out.append(line)
    return "\n".join(out)


def clear_hidden_tests(source: str) -> str:
    kept, _ = between(source, BEGIN_HIDDEN, END_HIDDEN)
    return "\n".join(ln for ln in kept if ln.strip() != BEGIN_HIDDEN).rstrip("\n")


def checksum(cell) -> str:
    """nbgrader's checksum of a graded, solution or locked cell
    (``nbgrader.utils.compute_checksum``): what its autograde compares to tell a
    changed test cell."""
    meta = _meta(cell)
    solution, grade = bool(meta.get("solution")), bool(meta.get("grade"))
    locked = not solution and (grade or bool(meta.get("locked")))
    digest = hashlib.md5()
    for part in (cell.source, cell.cell_type, str(grade), str(solution), str(locked)):
        digest.update(part.encode("utf-8"))
    digest.update(meta["grade_id"].encode("utf-8"))
    if grade:
        digest.update(str(float(meta["points"])).encode("utf-8"))
    return digest.hexdigest()


def _lock(cell) -> None:
    # nbgrader's LockCells with its defaults: solution cells cannot be deleted, test
    # and read-only cells can be neither deleted nor edited
    meta = _meta(cell)
    if meta.get("solution"):
        cell.metadata["deletable"] = False
    elif meta.get("grade") or meta.get("locked"):
        cell.metadata["deletable"] = False
        cell.metadata["editable"] = False


def _clear_output(cell) -> None:
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
    for key in VIEW_METADATA:
        cell.metadata.pop(key, None)


def student_notebook(nb, lang: str | None = None):
    """A copy of the lesson ``nb`` as its student edition (the module's docstring);
    ``lang`` (default: the notebook's ``language`` metadata) picks the stubs."""
    nb = copy.deepcopy(nb)
    lang = lang or nb.metadata.get("language", "en")
    if lang not in CODE_STUBS:
        lang = "en"
    for cell in nb.cells:
        meta = _meta(cell)
        if meta:
            _lock(cell)
        if is_solution_cell(cell):
            cell.source = clear_solution(cell.source, cell.cell_type == "code", lang)
        _clear_output(cell)
        if BEGIN_HIDDEN in cell.source:
            cell.source = clear_hidden_tests(cell.source)
        if meta.get("grade") or meta.get("solution") or meta.get("locked"):
            meta["checksum"] = checksum(cell)
            meta["cell_type"] = cell.cell_type
    nb.metadata.pop("celltoolbar", None)
    nb.metadata.pop("widgets", None)  # saved widget state: outputs, not the lesson
    return nb


def leftover_secrets(nb) -> list[str]:
    """Where a notebook still shows an answer or a hidden test (empty: none).

    Example: ``leftover_secrets(student_notebook(nb)) == []`` for every lesson.
    """
    found = []
    for index, cell in enumerate(nb.cells):
        for marker in (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN):
            if marker in cell.source:
                found.append(f"cell {index}: {marker}")
        if cell.cell_type == "code" and (cell.get("outputs") or cell.execution_count):
            found.append(f"cell {index}: outputs")
    return found


def read_student_notebook(path) -> nbformat.NotebookNode:
    """The student edition of the lesson saved at ``path``."""
    return student_notebook(nbformat.read(path, as_version=4))
