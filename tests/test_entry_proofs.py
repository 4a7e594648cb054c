"""The entry lesson's proof cells fail when the claim they prove is made false."""

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ENTRY = NOTEBOOKS / "00_amp_in_10_minutes.ipynb"
INSIDE = """with torch.amp.autocast(device_type, dtype=torch.float16):
    out = model(x)
    out.register_hook(lambda g: seen.append(torch.is_autocast_enabled(device_type)))
    loss = criterion(out, y)
    scaler.scale(loss).backward()  # inside the `with`: the mistake tip 2 warns of
"""


def run_until(cell_id: str, replace: tuple[str, str] | None = None) -> None:
    """Execute the lesson's code cells up to ``cell_id`` (the Colab cell skipped),
    with ``replace`` applied to that last cell."""
    nb = nbformat.read(ENTRY, as_version=4)
    namespace: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.get("id") == "colab-setup":
            continue
        source = cell.source
        if cell.get("id") == cell_id and replace:
            assert replace[0] in source
            source = source.replace(*replace)
        exec(compile(source.replace("%matplotlib inline", ""), cell_id, "exec"),
             namespace)
        if cell.get("id") == cell_id:
            return


def test_tip_2_proof_passes_and_fails_when_backward_runs_under_autocast(one_thread):
    proof = nbformat.read(ENTRY, as_version=4).cells
    source = next(c.source for c in proof if c.get("id") == "e014")
    start = source.index("with torch.amp.autocast")
    end = source.index("assert seen == [False]")
    run_until("e014")
    with pytest.raises(AssertionError):
        run_until("e014", (source[start:end], INSIDE))
