"""The paths a student takes through a lesson, each run in a real kernel.

nbval runs every cell once, in order, at machine speed. A student also runs a lesson
twice in one kernel (Run All again), pauses for minutes between cells, and skips the
optional parts. Each of those paths must pass too. (The fourth, the unsolved student
edition, is tests/test_grading.py's rehearsal: only the graded test cells may fail.)
"""

import copy
import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_notebook_lint import optional_cells

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PAUSE_S = 300  # five minutes of reading between two cells

# Every clock a lesson could read, moved forward by the pauses so far.
CLOCK = """\
import time as _time
_pauses = [0.0]
for _name in ("time", "perf_counter", "monotonic"):
    setattr(_time, _name, (lambda real: lambda: real() + _pauses[0])(
        getattr(_time, _name)))
    setattr(_time, _name + "_ns", (lambda real: lambda: real() + int(
        _pauses[0] * 1e9))(getattr(_time, _name + "_ns")))
"""
PAUSE = f"_pauses[0] += {PAUSE_S}"


def run(nb) -> None:
    """Execute `nb` in a fresh python3 kernel in notebooks/; raise on any error."""
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.execute()


def lesson(path: Path):
    return nbformat.read(path, as_version=4)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_run_all_twice_in_one_kernel(path):
    nb = lesson(path)
    nb.cells = nb.cells + copy.deepcopy(nb.cells)
    run(nb)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_long_pauses_between_cells(path):
    run(with_pauses(lesson(path)))


def with_pauses(nb):
    """`nb` with the kernel's clocks moved PAUSE_S forward after every cell."""
    cells = [nbformat.v4.new_code_cell(CLOCK)]
    for cell in nb.cells:
        cells += [cell, nbformat.v4.new_code_cell(PAUSE)]
    nb.cells = cells
    return nb


def test_pauses_catch_an_assert_on_the_readers_pace():
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import time\nstart = time.perf_counter()"),
        nbformat.v4.new_code_cell("assert time.perf_counter() - start < 60"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    run(copy.deepcopy(nb))  # at machine speed it passes ...
    with pytest.raises(CellExecutionError, match="AssertionError"):
        run(with_pauses(nb))  # ... a reader who pauses gets the error


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_core_path_runs_without_the_optional_parts(path):
    nb = lesson(path)
    skipped = optional_cells(json.loads(path.read_text()))
    nb.cells = [c for i, c in enumerate(nb.cells) if i not in skipped]
    run(nb)


def test_pause_cells_move_every_clock_the_kernel_reads():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(CLOCK),
        nbformat.v4.new_code_cell(
            "import time\nt0 = (time.time(), time.perf_counter(), time.monotonic())"),
        nbformat.v4.new_code_cell(PAUSE),
        nbformat.v4.new_code_cell(
            "t1 = (time.time(), time.perf_counter(), time.monotonic())\n"
            f"assert all({PAUSE_S} <= b - a < {PAUSE_S} + 60 for a, b in zip(t0, t1))\n"
            "assert 0 <= time.perf_counter_ns() / 1e9 - t1[1] < 60  # _ns too"),
        nbformat.v4.new_code_cell(
            "from time import perf_counter\nstart = perf_counter()"),
        nbformat.v4.new_code_cell(PAUSE),
        nbformat.v4.new_code_cell(
            f"assert perf_counter() - start >= {PAUSE_S}  # read through the module"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    run(nb)  # raises if a clock did not move
