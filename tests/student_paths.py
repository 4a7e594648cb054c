"""Run a lesson the ways a student does, not the way CI does: Run All twice in one
kernel, with long pauses between cells, and with the exercises unsolved or wrong.

`tests/test_student_paths.py` runs the course this way. Each run is one kernel,
started by nbclient from the test process (no nbconvert or nbgrader process per run),
running this very Python (as nbval's ``--nbval-current-env``), from the notebook's own
folder so ``results/`` resolves. Errors do not stop a run: a student's Run All goes on
past a failed cell too, and every error is reported.

Pauses are simulated, not waited for: `PAUSE_CLOCK` makes the kernel's wall clocks
(``time.time``, ``perf_counter``, ``monotonic`` and their ``_ns`` twins) jump
`pause_s` seconds ahead before each cell. The jump happens between cells only: inside
one cell the clocks run at their real rate, so a cell that times its own work (a
benchmark, a deadline) measures what it measured before, while a cell that compares
the clock with a value taken in an earlier cell sees every pause. (``datetime.now``
and ``process_time`` are left alone: no lesson compares them across cells.)

Example:
    nb = nbformat.read("notebooks/02_underflow.ipynb", as_version=4)
    run = run_in_one_kernel([nb, nb], cwd=Path("notebooks"), pause_s=300)
    assert run.errors() == []   # Run All twice, five minutes before every cell
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

CELL_TIMEOUT_S = 180  # nbval's limit (pyproject.toml)
STUB = re.compile(r"^(\s*)raise NotImplementedError\(\)", re.M)  # nbgrader's stub
WRONG_ANSWER = "return None"

# Runs first, once, in the kernel. A name bound with `from time import perf_counter`
# holds the real function: before each cell it is swapped for the patched one too,
# in the user's namespace and in the course's modules.
PAUSE_CLOCK = r"""
def _amp_pause_between_cells(pause_s):
    import sys
    import time

    names = ("time", "perf_counter", "monotonic")
    real = {n: getattr(time, n) for n in names + tuple(f"{n}_ns" for n in names)}
    offset = [0.0]

    def ahead(fn):
        return lambda: fn() + offset[0]

    def ahead_ns(fn):
        return lambda: fn() + int(offset[0] * 1e9)

    fake = {n: (ahead_ns if n.endswith("_ns") else ahead)(fn) for n, fn in real.items()}
    swap = {id(fn): (fn, fake[n]) for n, fn in real.items()}
    for n, fn in fake.items():
        setattr(time, n, fn)
    ip = get_ipython()  # noqa: F821

    def pause(*_):
        offset[0] += pause_s
        spaces = [ip.user_ns] + [vars(m) for k, m in list(sys.modules.items())
                                 if k.split(".")[0] == "amp_lessons" and m]
        for space in spaces:
            for key, value in list(space.items()):
                hit = swap.get(id(value))
                if hit and value is hit[0]:
                    space[key] = hit[1]

    ip.events.register("pre_run_cell", pause)


_amp_pause_between_cells(PAUSE_S)
del _amp_pause_between_cells
"""


@dataclass
class CellRun:
    """One execution of one code cell: the pass (1 = first Run All), its index in
    the notebook, and the error it raised (None: it ran)."""

    pass_no: int
    index: int
    first_line: str
    graded: bool
    error: str | None
    seconds: float

    def __str__(self) -> str:
        return (
            f"pass {self.pass_no}, cell {self.index} ({self.first_line!r}): "
            f"{self.error or 'ran'}"
        )


@dataclass
class KernelRun:
    """Every cell execution of one kernel, in order, and its wall time."""

    cells: list[CellRun] = field(default_factory=list)
    seconds: float = 0.0

    def errors(self, pass_no: int | None = None) -> list[str]:
        return [
            str(c)
            for c in self.cells
            if c.error and (pass_no is None or c.pass_no == pass_no)
        ]

    def __repr__(self) -> str:  # pytest prints fixtures that hold runs
        return (
            f"KernelRun({len(self.cells)} cells, {len(self.errors())} errors, "
            f"{self.seconds:.1f} s)"
        )

    def pass_seconds(self, pass_no: int) -> float:
        return sum(c.seconds for c in self.cells if c.pass_no == pass_no)


def _error_of(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}"[:2000]
    return None


def _first_line(source: str) -> str:
    lines = source.strip().splitlines()
    return lines[0][:60] if lines else "(empty)"


def is_graded_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader") or {}
    return bool(meta.get("grade") and not meta.get("solution"))


def _kernel_manager():
    """A kernel of this very Python, whatever ``python3`` kernelspec is installed."""
    import ipykernel.kernelspec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return self.kernel_spec_class(
                resource_dir=ipykernel.kernelspec.RESOURCES,
                **ipykernel.kernelspec.get_kernel_dict(),
            )

    return KernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())


def _run_harness_code(client, source: str) -> None:
    """Run the harness's own `source` in the client's kernel (the clock patch, a
    pass's set-up); RuntimeError, naming the error, if it fails."""
    cell = nbformat.v4.new_code_cell(source)
    client.nb = nbformat.v4.new_notebook(cells=[cell])
    client.execute_cell(cell, 0)
    if _error_of(cell):
        raise RuntimeError(
            f"the harness's code failed in the kernel: {_error_of(cell)}"
        )


def run_in_one_kernel(
    notebooks: Sequence,
    cwd: Path,
    pause_s: float = 0.0,
    timeout_s: float = CELL_TIMEOUT_S,
    before_pass: dict[int, str] | None = None,
    first_cell: dict[int, int] | None = None,
) -> KernelRun:
    """Run All on each notebook node of `notebooks` in turn, in ONE kernel.

    ``[nb, nb]`` is Run All twice; ``[unsolved, wrong]`` is a student who runs the
    lesson, then types answers and runs it all again. With `pause_s`, the kernel's
    clocks jump that far ahead before every cell (see the module docstring).
    ``before_pass`` maps a pass number (1 = the first) to code the harness runs in
    the kernel just before that pass (not a cell of the lesson: nothing recorded).
    ``first_cell`` maps a pass number to the index of the cell it starts at, as
    JupyterLab's "Run Selected Cell and All Below" does (default: the first).
    """
    from nbclient import NotebookClient

    client = NotebookClient(
        nbformat.v4.new_notebook(),
        km=_kernel_manager(),
        timeout=timeout_s,
        allow_errors=True,
        resources={"metadata": {"path": str(cwd)}},
    )
    run = KernelRun()
    start = time.perf_counter()
    with client.setup_kernel():
        if pause_s:
            _run_harness_code(client, PAUSE_CLOCK.replace("PAUSE_S", repr(pause_s)))
        for pass_no, nb in enumerate(notebooks, start=1):
            if pass_no in (before_pass or {}):
                _run_harness_code(client, before_pass[pass_no])
            client.nb = nb
            start = (first_cell or {}).get(pass_no, 0)
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code" or index < start:
                    continue
                t0 = time.perf_counter()
                client.execute_cell(cell, index)
                run.cells.append(
                    CellRun(
                        pass_no,
                        index,
                        _first_line(cell.source),
                        is_graded_test(cell),
                        _error_of(cell),
                        time.perf_counter() - t0,
                    )
                )
    run.seconds = time.perf_counter() - start
    return run


# Before the Spanish pass: figures drawn as SVG with real text beside the PNG, so
# that the words of every plot can be read (tests/spanish_outputs.py), as nbval's
# Spanish kernels drew them.
SVG_TEXT_FIGURES = """
import matplotlib
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png", "svg")
matplotlib.rcParams["svg.fonttype"] = "none"
"""


@dataclass
class LessonRun:
    """A lesson run twice with pauses (`paused_twice`): the notebook with the outputs
    of its first pass (what the slide test and the site render), and its Spanish
    edition with the outputs of the second (None for a lesson without one)."""

    run: KernelRun
    executed: nbformat.NotebookNode
    spanish: nbformat.NotebookNode | None = None


def spanish_twin(path: Path) -> Path | None:
    """The Spanish edition of an English lesson (``notebooks/es/NAME``), if any."""
    twin = Path(path).parent / "es" / Path(path).name
    return twin if twin.exists() else None


def paused_twice(path: Path, cache: dict, pause_s: float = 300.0) -> LessonRun:
    """Run All with `pause_s` before every cell, then Run All again, in one kernel;
    kept in `cache` (conftest's session-wide ``lesson_runs``), so that the path
    tests, the slide test and the site run each lesson once between them.

    The second Run All is the lesson's Spanish edition where it has one: the same
    code cells (the edition is generated from this notebook, only its strings and
    comments translated, `amp_lessons.tooling.translations`), so it is still the
    lesson's code run again in a kernel that has run it once, and it is also the
    run of the Spanish lesson, whose outputs the language check reads: two runs
    where three were (CI's budget). For a Spanish ``path`` it is that second pass
    of its English twin (``executed`` is then the Spanish notebook)."""
    path = Path(path)
    if path.parent.name == "es":
        english = path.parent.parent / path.name
        lesson = paused_twice(english, cache, pause_s)
        return LessonRun(lesson.run, lesson.spanish, lesson.spanish)
    if path not in cache:
        first = nbformat.read(path, as_version=4)
        twin = spanish_twin(path)
        again = nbformat.read(twin or path, as_version=4)
        run = run_in_one_kernel(
            [first, again],
            path.parent,  # both passes: notebooks/es/results links to results/
            pause_s=pause_s,
            before_pass={2: SVG_TEXT_FIGURES} if twin else {},
        )
        cache[path] = LessonRun(run, first, again if twin else None)
    return cache[path]


def answer_wrongly(nb) -> int:
    """Replace the stub ``raise NotImplementedError()`` in each solution cell of a
    student edition by ``return None``, a wrong answer; returns how many."""
    count = 0
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        if (
            meta.get("solution")
            and cell.cell_type == "code"
            and STUB.search(cell.source)
        ):
            cell.source = STUB.sub(rf"\g<1>{WRONG_ANSWER}", cell.source)
            count += 1
    return count


def unsolved_path(
    released: Path, pause_s: float = 0.0, then=None
) -> tuple[KernelRun, int, nbformat.NotebookNode]:
    """Run a student edition with every exercise answered wrongly (``return None``),
    then untouched, in one kernel. ``then`` turns the wrongly answered notebook into
    the one run (the tests skip its optional parts, `core_path`: first, in a fresh
    kernel, so that nothing an optional cell defines is there). Returns the run, the
    number of answers and the wrongly answered notebook, executed.

    The untouched edition runs from its first cell that differs from the first
    pass's (the first exercise, or an optional part the first pass skipped) down,
    as a student who clears an answer and runs everything below it: the cells above
    are the same cells, run in this kernel already, so every cell of the edition runs
    unsolved, top to bottom, in one kernel (lesson 10's three torchrun launches,
    above its exercise, run once instead of twice: CI's time)."""
    wrong = nbformat.read(released, as_version=4)
    unsolved = nbformat.read(released, as_version=4)
    answers = answer_wrongly(wrong)
    if then is not None:
        wrong = then(wrong)
    run = run_in_one_kernel(
        [wrong, unsolved],
        Path(released).parent,
        pause_s,
        first_cell={2: first_difference(wrong, unsolved)},
    )
    return run, answers, wrong


def first_difference(a, b) -> int:
    """The index of the first cell where notebooks ``a`` and ``b`` differ (type or
    source); the length of the shorter one if neither has such a cell."""
    pairs = zip(a.cells, b.cells, strict=False)
    return next(
        (
            i
            for i, (x, y) in enumerate(pairs)
            if (x.cell_type, x.source) != (y.cell_type, y.source)
        ),
        min(len(a.cells), len(b.cells)),
    )


PASS_NAMES = {1: "answered wrongly", 2: "unsolved"}


def unsolved_path_problems(run: KernelRun) -> list[str]:
    """What breaks a student who has not solved the exercises (empty: nothing).

    Only graded test cells may fail, and they must: a later cell that fails uses the
    student's function (or, in a pass without the optional parts, needs one of
    them); a graded cell that passes grades nothing. Answered wrongly, a graded
    cell must fail with the check's verdict, an AssertionError: any other error is
    a check that crashed on an answer, or one that needs a cell the run skipped.
    """
    problems = []
    for c in run.cells:
        how = PASS_NAMES.get(c.pass_no, f"pass {c.pass_no}")
        where = f"cell {c.index} ({c.first_line!r}), exercises {how}"
        if c.graded and not c.error:
            problems.append(
                f"{where}: the graded test cell passes, so it grades nothing"
            )
        elif (
            c.graded
            and how == "answered wrongly"
            and not c.error.startswith("AssertionError")
        ):
            problems.append(
                f"{where}: {c.error}; a graded test cell must fail with "
                "the check's verdict (AssertionError), not crash or miss "
                "a name"
            )
        elif not c.graded and c.error:
            problems.append(
                f"{where}: {c.error}; only graded test cells may fail "
                "here: later cells must not use the student's function "
                "nor, on the core path, an optional part"
            )
    return problems
