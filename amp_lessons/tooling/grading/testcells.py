"""The one form of a graded test cell: the check comes from the package itself and
vouches for itself first, so a solution cell cannot shadow or replace it unseen::

    import amp_lessons.teaching.checks as _checks
    _checks.verify_pristine()
    _checks.check_decode_fp16(decode_fp16)
    ### BEGIN HIDDEN TESTS
    _checks.check_decode_fp16(decode_fp16, hidden=True)
    ### END HIDDEN TESTS

``python -m amp_lessons.grading fix-tests [NOTEBOOK ...]`` rewrites a lesson's test
cells into this form (``check_x(f)`` becomes ``_checks.check_x(f)``, the two header
lines go first, ``check_*`` names leave the notebook's ``from
amp_lessons.teaching.checks import`` lines); the lint (`test_cell_problems`) refuses any
other form of a test cell that calls a check. The grader reads which checks a cell must
hear from with `check_calls`.

Not covered here: test cells of plain ``assert``s (allowed; the sandbox protects them,
but only a check's own report is tamper-evident).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from amp_lessons.tooling.grading.course import is_test_cell, locate

MODULE = "amp_lessons.teaching.checks"
ALIAS = "_checks"
HEADER = (f"import {MODULE} as {ALIAS}", f"{ALIAS}.verify_pristine()")
_BARE_CALL = re.compile(r"(?<![\w.])(check_\w+)(\s*\()")
_IMPORT = re.compile(r"^(\s*)from\s+amp_lessons\.teaching\.checks\s+import\s+(.+)$")


def _statements(source: str) -> list[ast.stmt] | None:
    try:
        return ast.parse(source).body
    except SyntaxError:
        return None


def _is_check_call(node: ast.AST, names=("check_",)) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == ALIAS
        and node.func.attr.startswith(names)
    )


def calls_a_check(source: str) -> bool:
    """True when the cell names any check (new form or old)."""
    return bool(re.search(r"\bcheck_\w+\s*\(", source)) or MODULE in source


def check_calls(source: str) -> list[tuple[str, bool]]:
    """``[(check name, hidden)]`` of a new-form test cell, in order.

    Example: ``check_calls("...\\n_checks.check_unscale(f, hidden=True)")`` ends
    with ``("check_unscale", True)``.
    """
    calls = []
    for node in _statements(source) or []:
        if isinstance(node, ast.Expr) and _is_check_call(node.value):
            hidden = any(
                k.arg == "hidden"
                and isinstance(k.value, ast.Constant)
                and k.value.value is True
                for k in node.value.keywords
            )
            calls.append((node.value.func.attr, hidden))
    return calls


def test_cell_problems(source: str) -> list[str]:
    """Why a test cell that calls a check is not in the one form (empty: fine)."""
    if not calls_a_check(source):
        return []
    body = _statements(source)
    if body is None:
        return ["does not parse as Python"]
    fix = "; run `python -m amp_lessons.grading fix-tests NOTEBOOK`"
    header = [ast.unparse(node) for node in body[:2]]
    if tuple(header) != HEADER:
        return [
            "must start with `" + "` and `".join(HEADER) + "` (the check comes "
            "from the package, not from a name the notebook can rebind)" + fix
        ]
    problems = []
    for node in body[2:]:
        if not (isinstance(node, ast.Expr) and _is_check_call(node.value)):
            problems.append(
                f"`{ast.unparse(node)[:60]}`: after the header a test "
                f"cell holds only `{ALIAS}.check_*(...)` calls" + fix
            )
    if not check_calls(source):
        problems.append(f"calls no `{ALIAS}.check_*`")
    return problems


def rewrite_test_source(source: str) -> str:
    """The new form of a test cell's source (unchanged when already in it).

    Example: ``rewrite_test_source("check_unscale(unscale_grads)")`` is the header
    and ``_checks.check_unscale(unscale_grads)``.
    """
    if not calls_a_check(source) or not test_cell_problems(source):
        return source
    lines = [
        line
        for line in source.splitlines()
        if not _IMPORT.match(line) and line.strip() not in HEADER
    ]
    body = "\n".join(_BARE_CALL.sub(rf"{ALIAS}.\1\2", line) for line in lines)
    return "\n".join(HEADER) + "\n" + body.lstrip("\n")


def _drop_check_imports(source: str) -> str:
    """``from amp_lessons.teaching.checks import AMP_STEPS, check_x`` -> ``... import
    AMP_STEPS`` (single-line imports; the line goes when nothing is left)."""
    out = []
    for line in source.splitlines():
        match = _IMPORT.match(line)
        if match and "(" not in line:
            names = [n.strip() for n in match.group(2).split("#")[0].split(",")]
            kept = [n for n in names if n and not n.startswith("check_")]
            if kept != names:
                if kept:
                    indent, names = match.group(1), ", ".join(kept)
                    out.append(f"{indent}from {MODULE} import {names}")
                continue
        out.append(line)
    return "\n".join(out)


def fix_test_cells(path: Path) -> int:
    """Rewrite a notebook's test cells in place into the one form (a cell left empty
    by the dropped imports is removed); return how many cells changed (0 leaves the
    file untouched)."""
    nb = nbformat.read(path, as_version=4)
    changed, kept = 0, []
    for cell in nb.cells:
        if cell.cell_type == "code":
            new = (
                rewrite_test_source(cell.source)
                if is_test_cell(cell)
                else _drop_check_imports(cell.source)
            )
            if new != cell.source:
                cell.source, changed = new, changed + 1
                if not new.strip():
                    continue  # a cell that only imported checks goes
        kept.append(cell)
    nb.cells = kept
    if changed:
        nbformat.write(nb, path)
    return changed


def lint_test_cells(path: Path) -> list[str]:
    """`test_cell_problems` of every graded test cell of a notebook, located."""
    nb = nbformat.read(path, as_version=4)
    return [
        f"{locate(path, i, cell)}: test cell {problem}"
        for i, cell in enumerate(nb.cells)
        if is_test_cell(cell)
        for problem in test_cell_problems(cell.source)
    ]
