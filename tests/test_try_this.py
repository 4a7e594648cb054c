"""A "Try this" invitation leaves the lesson working: the setting it asks the reader
to change flows through the cells after it, which print what the changed run did
(no "4 clean steps" when the interval is 10) and whose proofs hold for it.

Lesson 03 asks for `growth_interval` 1 or 10 in `CONFIGS`; its cells are run here in
this process (as tests/test_entry_proofs.py runs the entry lesson's), from the first
cell to the proof of the mutation comparison, with that one value changed.
"""

import contextlib
import io

import pytest
from notebook_lint_rules import in_process_code
from paths import NOTEBOOKS_DIR

LESSON = NOTEBOOKS_DIR / "03_loss_scaling.ipynb"
LAST = "c050"  # the proof after the mutation comparison: the bench after it is left out
SETTING = "growth_interval=4)"  # the "short interval" run's, in CONFIGS (cell c042)


def run_lesson(replace: tuple[str, str]) -> dict[str, str]:
    """{cell id: what it printed}, the lesson's code cells run up to LAST (the Colab
    cell and the graded test cells skipped, IPython's magics left out), with
    ``replace`` applied to cell c042."""
    namespace: dict = {}
    printed = {}
    for cell_id, source in in_process_code(LESSON):
        if cell_id == "c042":
            assert replace[0] in source, "CONFIGS changed: update SETTING"
            source = source.replace(replace[0], replace[1], 1)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(source, cell_id, "exec"), namespace)
        printed[cell_id] = out.getvalue()
        if cell_id == LAST:
            return printed
    raise AssertionError(f"no cell {LAST}")


@pytest.mark.parametrize("interval", [1, 10])
def test_another_growth_interval_leaves_lesson_03_working(interval, one_thread):
    printed = run_lesson((SETTING, f"growth_interval={interval})"))  # no cell raised
    said = printed["c042"] + printed["c047"]
    assert f"{interval} clean step(s) in a row" in said
    assert "4 clean step" not in said
    assert f"'growth_interval': {interval}" in printed["c042"]
    if interval == 10:  # no real overflow in 40 steps: said so, not "all at the top"
        assert "no real overflow in 40 steps" in printed["c047"]
    # the mutation comparison keeps its own setting: caught where the text says
    assert "at step 9, in 'state_dict'" in printed["c049"]


def test_the_lessons_own_setting_prints_its_reading(one_thread):
    printed = run_lesson((SETTING, SETTING))
    assert "x2 after 4 clean step(s) in a row" in printed["c047"]
    assert "real overflows at steps [" in printed["c047"]
