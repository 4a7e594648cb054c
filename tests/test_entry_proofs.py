"""The entry lesson's proof cells fail when the claim they prove is made false.

Each mutation changes what the lesson shows (a visible cell's code, or the published
or recorded data it quotes) so that one of its claims no longer holds, and runs the
lesson up to the proof cell of that claim: the proof must raise AssertionError. The
unchanged lesson passes every proof cell.
"""

import dataclasses
import re

import nbformat
import pytest
from notebook_lint_rules import in_process_code
from paths import ENTRY

from amp_lessons.measure import bench_results, published

PROOFS = ("e005", "e008")


def run_until(proof_id: str, replace: dict[str, tuple[str, str]] | None = None) -> None:
    """Execute the lesson's code cells up to the proof ``proof_id`` (the Colab cell
    and the graded cells skipped), with ``replace[cell id] = (old, new)`` applied."""
    namespace: dict = {}
    for cell_id, source in in_process_code(ENTRY):
        old, new = (replace or {}).get(cell_id, ("", ""))
        if old:
            assert old in source, f"{cell_id}: {old!r} is not in the cell"
            source = source.replace(old, new)
        exec(compile(source, cell_id, "exec"), namespace)
        if cell_id == proof_id:
            return
    raise AssertionError(f"no proof cell {proof_id}")


@pytest.mark.parametrize("proof_id", PROOFS)
def test_each_proof_passes_on_the_lesson(proof_id, one_thread):
    run_until(proof_id)


MUTATIONS = {
    "autocast off: fp16 keeps every gradient": (
        "e005",
        {"e004": ("enabled=dtype != torch.float32", "enabled=False")},
    ),
    "no loss scale: the scaled run loses them too": (
        "e005",
        {"e004": ("loss * scale, layer.weight", "loss, layer.weight")},
    ),
    "gradients of 2^-24: fp16 keeps them": (
        "e005",
        {
            "e004": (
                "layer, x, target = tiny_gradient_layer()",
                "layer, x, target = tiny_gradient_layer()\n"
                "target = layer(x).detach() + 2**-11",
            )
        },
    ),
    "bf16 run in fp16": (
        "e005",
        {
            "e001": (
                "from amp_lessons.teaching.entry import RUNS,",
                "from amp_lessons.teaching.entry import RUNS as _RUNS,",
            ),
            "e004": (
                "for name, dtype, scale in RUNS:",
                "RUNS = [(n, torch.float16 if n == 'bf16' else d, s) "
                "for n, d, s in _RUNS]\nfor name, dtype, scale in RUNS:",
            ),
        },
    ),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_false_claim_fails_its_proof(name, one_thread):
    proof_id, replace = MUTATIONS[name]
    with pytest.raises(AssertionError):
        run_until(proof_id, replace)


def _published_with(row_id: str, **changes):
    rows = published.load_rows()
    return lambda: [
        dataclasses.replace(r, **changes) if r.id == row_id else r for r in rows
    ]


@pytest.mark.parametrize(
    "changes",
    [
        {"amp_throughput": 1.0},  # the speed-up the table quotes is no longer published
        {"gpu": "T4"},
        {"full_precision": "fp32"},
        {"source": "a blog"},
    ],
    ids=["speed-up", "gpu", "against", "source"],
)
def test_the_gpu_table_proof_fails_when_a_published_row_changes(
    monkeypatch, changes, one_thread
):
    monkeypatch.setattr(
        published, "load_rows", _published_with("resnet50_a100_80gb", **changes)
    )
    with pytest.raises(AssertionError):
        run_until("e008")


def test_the_gpu_table_proof_fails_when_the_recorded_run_changes(
    monkeypatch, one_thread
):
    recorded = bench_results.recorded_results()

    def slower():  # the recorded bf16 rows at half their speed-up
        return [
            {
                **report,
                "results": [
                    {**row, "speedup_vs_fp32": row["speedup_vs_fp32"] / 2}
                    if row["precision"] == "bf16"
                    else row
                    for row in report["results"]
                ],
            }
            for report in recorded
        ]

    monkeypatch.setattr(bench_results, "recorded_results", slower)
    with pytest.raises(AssertionError):
        run_until("e008")


def test_the_table_in_the_text_is_the_table_the_proof_checks():
    """The proof holds the numbers the markdown shows: read both from the lesson."""
    cells = {c.get("id"): c.source for c in nbformat.read(ENTRY, as_version=4).cells}
    table = re.findall(
        r"^\| (.+?) \| (\w+) \| (\w+) \| ([\d.]+)x \|$", cells["e007"], re.M
    )
    proof = re.findall(r'\("(\w+)", "(\w+)", ([\d.]+)\)', cells["e008"])
    assert [(gpu, against.lower(), speed) for _, gpu, against, speed in table] == proof
    assert "7.3x" in cells["e007"] and "== 7.3" in cells["e008"]
    assert "2.7x" in cells["e007"] and "== 2.7" in cells["e008"]


def test_the_lesson_takes_the_prediction_then_shows_it_beside_the_count(
    capsys, one_thread
):
    """The guess is echoed when its cell runs, without a verdict; the count's cell
    holds it up against what was measured. Nothing grades it."""
    run_until("e005", {"e003": ('prediction = ""', 'prediction = "a"')})
    out = capsys.readouterr().out
    taken, _, revealed = out.partition("Your prediction: (a)")[2].partition("not 0:")
    assert "right" not in taken and "not what happened" not in taken
    assert "that is (b)" in revealed and "You predicted (a): not what" in revealed
