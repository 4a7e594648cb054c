"""What a graded submission did that an instructor should look at, and which test
cells earned no points whatever the notebook shows.

Three sources, each a list of flags (plain sentences, prefixed by their source):

- ``scan:`` a static read of the code the student wrote (solution cells, and any
  code cell that is not the course's own): imports beyond the numeric ones, dynamic
  code (``exec``, ``getattr`` of a computed name), and any reach into grading
  internals: ``sys.modules``, the checks module, builtins, frames, IPython, files.
- ``runtime:`` what the guard saw the student's code do while it ran (see ``guard``).
- ``tamper:`` a test cell the notebook shows as passed although its checks did not
  report a genuine, untainted pass; nbgrader then scores it 0 (an error output is
  added to it before scoring).

``crash:``/``timeout:``/``corrupt:`` flags come from ``autograde`` itself.

Flags are kept beside the gradebook, one JSON file per submission, in
``<course>/review/<student>/<lesson>.json``; ``grades --json`` reports them.

Not covered here: deciding a penalty. A flag asks for a human look; only
``tamper`` (and a run that did not finish) change a score.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode

from amp_lessons.tooling.grading.course import is_solution_cell, is_test_cell
from amp_lessons.tooling.grading.testcells import check_calls

ALLOWED_IMPORTS = frozenset(
    {
        "math",
        "cmath",
        "torch",
        "numpy",
        "fractions",
        "decimal",
        "struct",
        "itertools",
        "functools",
        "collections",
        "statistics",
        "operator",
        "numbers",
        "dataclasses",
        "typing",
        "random",
        "copy",
        "re",
        "enum",
        "string",
        "textwrap",
        "warnings",
        "contextlib",
        "bisect",
        "heapq",
        "array",
        "amp_lessons",
    }
)
FORBIDDEN_PACKAGES = (
    "amp_lessons.teaching.checks",
    "amp_lessons.tooling",
    "amp_lessons.grading",
)
DYNAMIC_NAMES = frozenset(
    {
        "__import__",
        "exec",
        "eval",
        "compile",
        "globals",
        "locals",
        "vars",
        "setattr",
        "delattr",
        "open",
        "breakpoint",
        "get_ipython",
        "__builtins__",
        "__loader__",
        "__spec__",
        "memoryview",
        "input",
        "_checks",
    }
)
REACHING_ATTRS = frozenset(
    {
        "__dict__",
        "__globals__",
        "__code__",
        "__closure__",
        "__class__",
        "__subclasses__",
        "__bases__",
        "__mro__",
        "__builtins__",
        "__getattribute__",
        "__setattr__",
        "__delattr__",
        "__import__",
        "__loader__",
        "__spec__",
        "__self__",
        "__func__",
        "__defaults__",
        "__kwdefaults__",
        "__traceback__",
        "__reduce__",
        "__reduce_ex__",
        "tb_frame",
        "tb_next",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "co_code",
        "modules",
        "_engine",
        "_pristine",
        "checks",
        "verify_pristine",
        "grading",
        "showtraceback",
        "set_custom_exc",
        "excepthook",
        "displayhook",
        "settrace",
        "setprofile",
        "addaudithook",
        "audit",
        "environ",
        "system",
        "popen",
        "_exit",
        "kill",
        "fork",
        "_getframe",
        "run_cell",
        "user_ns",
        "kernel",
    }
)
SUSPECT_TEXT = (
    "gradebook",
    "sys.modules",
    "amp_lessons.teaching.checks",
    "_engine",
    "_pristine",
    ".ipynb",
    "nbgrader",
    "builtins",
    "/source",
    "/submitted",
    "/autograded",
    "checks.py",
    "__",
)
MAX_FLAGS_PER_CELL = 8


def _flag(index: int, node: ast.AST | None, what: str, source: str) -> str:
    line = getattr(node, "lineno", None)
    text = ast.get_source_segment(source, node) if node is not None else None
    where = f"cell {index}" + (f" line {line}" if line else "")
    return f"scan: {where}: {what}" + (f" (`{text[:60]}`)" if text else "")


def scan_source(source: str, index: int) -> list[str]:
    """Static flags of one student-written code cell (empty: nothing to review).

    Example: ``scan_source("import sys\\nsys.modules.clear()", 5)`` flags both lines.
    """
    flags = []
    for number, line in enumerate(source.splitlines(), 1):
        if line.lstrip().startswith(("!", "%")):
            flags.append(
                f"scan: cell {index} line {number}: shell or magic command "
                f"(`{line.strip()[:60]}`)"
            )
    try:
        tree = ast.parse(_without_magics(source))
    except SyntaxError:
        return flags
    for node in ast.walk(tree):
        what = _judge(node)
        if what:
            flags.append(_flag(index, node, what, source))
    return list(dict.fromkeys(flags))[:MAX_FLAGS_PER_CELL]


def _without_magics(source: str) -> str:
    return "\n".join(
        "pass" if line.lstrip().startswith(("!", "%")) else line
        for line in source.splitlines()
    )


def _judge(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import | ast.ImportFrom):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
        for name in names:
            if name.split(".")[0] not in ALLOWED_IMPORTS or node_level(node):
                return f"imports {name or 'a relative module'}"
            if name.startswith(FORBIDDEN_PACKAGES):
                return f"imports the grading code ({name})"
        if isinstance(node, ast.ImportFrom) and any(
            a.name.startswith("check_") or a.name == "*" for a in node.names
        ):
            return "imports a check into the notebook's names"
    elif isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES:
        return f"uses {node.id}"
    elif (
        isinstance(node, ast.Name)
        and node.id.startswith("check_")
        and isinstance(node.ctx, ast.Store | ast.Del)
    ):
        return f"rebinds the name of a check ({node.id})"
    elif isinstance(
        node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    ) and node.name.startswith("check_"):
        return f"defines {node.name}, the name of a check"
    elif isinstance(node, ast.Attribute) and node.attr in REACHING_ATTRS:
        return f"reaches .{node.attr}"
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and not (len(node.args) > 1 and isinstance(node.args[1], ast.Constant))
    ):
        return "getattr of a computed name"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        found = [t for t in SUSPECT_TEXT if t in node.value]
        if found:
            return f"a string mentions {found[0]!r}"
    elif isinstance(node, ast.Global | ast.Nonlocal) and any(
        n.startswith("check_") for n in node.names
    ):
        return "rebinds the name of a check"
    return None


def node_level(node: ast.AST) -> int:
    return getattr(node, "level", 0) or 0


def student_cells(nb: NotebookNode, source_nb: NotebookNode) -> list[int]:
    """Indices of the code cells the student wrote: solution cells, and code cells
    whose source is not one of the course's own."""
    course = {
        c.source
        for c in source_nb.cells
        if c.cell_type == "code" and not is_solution_cell(c)
    }
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and (is_solution_cell(c) or (c.source not in course and not is_test_cell(c)))
    ]


def scan_notebook(nb: NotebookNode, source_nb: NotebookNode) -> list[str]:
    """`scan_source` over every cell the student wrote."""
    return [
        flag
        for i in student_cells(nb, source_nb)
        for flag in scan_source(nb.cells[i].source, i)
    ]


def _cell_files(nb: NotebookNode, pid: int | None) -> dict[str, int]:
    """The file name ipykernel gave each code cell in the kernel with this pid."""
    if pid is None:
        return {}
    from ipykernel.compiler import get_tmp_hash_seed, murmur2_x86

    return {
        f"/tmp/ipykernel_{pid}/{murmur2_x86(c.source, get_tmp_hash_seed())}.py": i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
    }


def runtime_flags(nb: NotebookNode, records: list[dict], forged: int) -> list[str]:
    """Flags from the guard's records: what student code did while it ran."""
    hello = next((r for r in records if r.get("kind") == "hello"), None)
    files = _cell_files(nb, hello.get("pid") if hello else None)
    flags = []
    if forged:
        flags.append(
            f"runtime: {forged} line(s) on the guard's channel did not verify "
            "(written by the notebook's own code?)"
        )
    for record in records:
        if record.get("kind") == "event":
            where = files.get(record.get("cell"))
            where = (
                f"cell {where}"
                if where is not None
                else f"code from {record.get('cell')}"
            )
            flags.append(f"runtime: {where}: {record.get('detail')}")
        elif record.get("kind") == "check" and not record.get("genuine"):
            flags.append(
                f"runtime: a verdict for {record.get('title')} was raised by "
                "code that is not that check (forged?)"
            )
    return list(dict.fromkeys(flags))[:40]


def _scored(cell: NotebookNode) -> bool:
    """Whether nbgrader would give this test cell points (no error, no stderr)."""
    from nbgrader.utils import determine_grade

    score, _ = determine_grade(cell)
    return bool(score)


def _distrust(cell: NotebookNode, why: str) -> None:
    cell.outputs.append(
        nbformat.v4.new_output(
            "error",
            ename="GradingTamperError",
            evalue=why,
            traceback=[f"GradingTamperError: {why}"],
        )
    )


def _reports_by_cell(records: list[dict]) -> dict[int, list[dict]]:
    """The checks' verdicts (guard records of kind ``check``) by test cell index."""
    reports: dict[int, list[dict]] = {}
    for record in records:
        if record.get("kind") == "check" and isinstance(record.get("cell"), int):
            reports.setdefault(record["cell"], []).append(record)
    return reports


def _why_untrusted(name: str, heard: list[dict]) -> str:
    """Why the reports ``heard`` from check ``name`` hold no pass to trust."""
    if not heard:
        return f"{name} never reported a verdict"
    if not any(r.get("passed") for r in heard):
        return f"{name} reported a failure, but the notebook shows none"
    bad = heard[0]
    return f"{name}'s pass is not trustworthy: " + "; ".join(
        (["not called by the real check"] if not bad.get("genuine") else [])
        + [f"changed: {', '.join(bad.get('changed', [])[:3])}"]
        * bool(bad.get("changed"))
        + [f"its function reached {', '.join(bad.get('tainted', [])[:3])}"]
        * bool(bad.get("tainted"))
    )


def _first_distrusted_call(
    cell: NotebookNode, reports: list[dict]
) -> tuple[str, bool] | None:
    """``(why, heard)`` for the first check this test cell calls that did not report
    a genuine, untainted pass among ``reports`` (the cell's own); ``heard``: whether
    that check reported at all. None when every call has its pass, or the cell calls
    no check (a plain-assert cell that ran: its outputs are the verdict).

    A pass vouches for one call only: it is taken out of ``reports``.
    """
    for name, hidden in check_calls(cell.source):
        heard = [
            r
            for r in reports
            if str(r.get("title")).split("[")[0] == name and r.get("hidden") is hidden
        ]  # check_quick_check[question]
        trusted = [
            r
            for r in heard
            if r.get("genuine")
            and r.get("passed")
            and not r.get("changed")
            and not r.get("tainted")
        ]
        if trusted:
            reports.remove(trusted[0])
            continue
        why = _why_untrusted(name, heard) + (" (hidden cases)" if hidden else "")
        return why, bool(heard)
    return None


def cross_check(
    nb: NotebookNode, records: list[dict], stopped: str | None = None
) -> list[str]:
    """Fail (in ``nb``, in place) every test cell the notebook shows as passed whose
    checks did not each report a genuine, untainted pass; return ``tamper`` flags.

    ``stopped``: why the run ended early (a crash, a timeout). A check that then
    never reported is a cell that did not run: it fails, without a tamper flag. So
    does every graded test cell the kernel never executed (no execution count),
    whatever it holds.
    """
    reports = _reports_by_cell(records)
    flags = []
    for index, cell in enumerate(nb.cells):
        if not is_test_cell(cell) or not _scored(cell):
            continue
        if cell.get("execution_count") is None:
            # nbgrader scores a test cell without an error as passed, and a cell the
            # kernel never reached has no output at all: a plain-assert cell after a
            # crash, or every cell of a run that could not start, would score full
            # marks on a blank notebook.
            _distrust(cell, f"not run: {stopped or 'the kernel never reached it'}")
            continue
        distrusted = _first_distrusted_call(cell, reports.get(index, []))
        if distrusted is None:
            continue
        why, heard = distrusted
        if stopped and not heard:
            _distrust(cell, f"not run: {stopped}")
        else:
            _distrust(cell, why)
            grade_id = cell.metadata["nbgrader"].get("grade_id")
            flags.append(f"tamper: cell {index} ({grade_id}) scored 0: {why}")
    return flags


SEVERITY = (
    "tamper",
    "crash",
    "timeout",
    "corrupt",
    "error",
    "output",
    "runtime",
    "scan",
)


def by_severity(flags: list[str]) -> list[str]:
    """Flags that changed a score first, then what ran, then what the scan read."""

    def rank(flag: str) -> int:
        kind = flag.split(":", 1)[0]
        return SEVERITY.index(kind) if kind in SEVERITY else len(SEVERITY)

    return sorted(flags, key=rank)


def review_path(course_dir: Path, student: str, lesson: str) -> Path:
    return Path(course_dir) / "review" / student / f"{lesson}.json"


def write_review(course_dir: Path, student: str, lesson: str, flags: list[str]) -> None:
    """Replace this submission's flags (atomically)."""
    path = review_path(course_dir, student, lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"flags": by_severity(flags)}, indent=1))
    os.replace(tmp, path)


def read_review(course_dir: Path, student: str, lesson: str) -> list[str]:
    path = review_path(course_dir, student, lesson)
    try:
        return list(json.loads(path.read_text())["flags"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def short(flags: list[str], width: int = 60) -> str:
    """One table cell: how many flags, and the first one cut to ``width``."""
    if not flags:
        return ""
    first = re.sub(r"\s+", " ", flags[0])
    first = first if len(first) <= width else first[: width - 1] + "…"
    return f"{len(flags)} flag(s): {first}"
