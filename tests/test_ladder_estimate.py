"""The ladder as the estimate prices it (amp_lessons.measure.ladder_estimate): the same
step as the bench check's estimate, each switch faster, the compiled rungs priced as
Inductor fuses, a recorded climb priced row by row, speed-ups in tokens a second,
records refused without provenance."""

from __future__ import annotations

import json

import pytest
from paths import RESULTS_DIR

from amp_lessons.i18n import set_language
from amp_lessons.measure import ladder, ladder_estimate
from amp_lessons.measure.bench import GPU_SIZES
from amp_lessons.measure.bench_results import load_results
from amp_lessons.measure.estimate_check import measured_vs_estimated

H200 = "H200-SXM-141GB"


@pytest.fixture(scope="module")
def h200_ladder():
    return ladder_estimate.estimated_ladder(H200)


def test_the_eager_rungs_are_the_bench_checks_estimates(h200_ladder):
    # the bench's fp32, TF32 and bf16 steps, priced as the H200 record's check does
    report = load_results(RESULTS_DIR / "bench_h200.json")
    checked = {
        r["precision"]: r["estimated_ms"]
        for r in measured_vs_estimated(report)
        if r["config"] == "transformer"
    }
    assert report["sizes"]["transformer"] == ladder_estimate.gpu_sizes(H200)
    by_rung = {r["rung"]: r["estimated_ms"] for r in h200_ladder}
    assert by_rung["eager fp32"] == pytest.approx(checked["fp32"])
    assert by_rung["TF32"] == pytest.approx(checked["tf32"])
    assert by_rung["bf16 autocast"] == pytest.approx(checked["bf16"])


def test_each_switch_is_faster(h200_ladder):
    assert [r["rung"] for r in h200_ladder] == [r.name for r in ladder.RUNGS]
    times = [r["estimated_ms"] for r in h200_ladder[:5]]  # the same batch
    assert times == sorted(times, reverse=True) and len(set(times)) == 5
    # the larger batch takes longer a step, and does more a second
    mfu = [r["mfu_vs_bf16_peak"] for r in h200_ladder]
    assert mfu == sorted(mfu) and len(set(mfu)) == 6
    for r in h200_ladder:  # the bench's FLOPs over the estimated time and bf16 peak
        flops = r["mfu_vs_bf16_peak"] * r["estimated_ms"] * 1e-3 * 989.4e12
        assert flops == pytest.approx(
            ladder.train_flops(
                "transformer", {**GPU_SIZES["transformer"], "batch": r["batch"]}
            )
        )
    assert h200_ladder[-1]["batch"] == 2 * h200_ladder[0]["batch"]
    compiled, fused = h200_ladder[4]["estimate"], h200_ladder[3]["estimate"]
    assert compiled.memory_s < 0.85 * fused.memory_s  # what compile attacks
    assert compiled.compute_s == pytest.approx(fused.compute_s)


def test_the_speed_up_is_in_tokens_a_second(h200_ladder):
    table = ladder_estimate.format_estimated_ladder(h200_ladder)
    last = table.splitlines()[-1].split()
    first = h200_ladder[0]["estimated_ms"] / h200_ladder[0]["batch"]
    per_token = h200_ladder[-1]["estimated_ms"] / h200_ladder[-1]["batch"]
    assert f"{first / per_token:.2f}x" in last  # not the ratio of step times
    rows = _record()["rows"][:5] + [
        {**_record()["rows"][4], "batch": 64, "step_ms": 150.0, "tokens_per_s": 6e5}
    ]
    measured = ladder.format_ladder(rows).splitlines()
    assert "| 2.00x |" in measured[-1] and "| 1.00x |" in measured[-2]


def test_the_ladder_is_priced_on_the_gpu_of_a_recorded_run():
    report = load_results(RESULTS_DIR / "bench_h200.json")
    assert ladder_estimate.ladder_gpu([report]) == H200
    unknown = dict(report, device_name="NVIDIA B200", gpu="NVIDIA B200")
    assert ladder_estimate.ladder_gpu([unknown, report]) == H200
    assert ladder_estimate.ladder_gpu([unknown]) == ladder_estimate.DEFAULT_GPU
    assert ladder_estimate.ladder_gpu([]) == "H100-SXM5-80GB"
    # a GPU the lesson's text does not describe is left out (a V100 lacks bf16)
    for name in ("Tesla V100-SXM2-32GB", "NVIDIA GeForce RTX 4090"):
        other = dict(report, device_name=name, gpu=name)
        assert ladder_estimate.ladder_gpu([other, report]) == H200


def test_the_batch_follows_the_gpus_memory():
    assert ladder_estimate.gpu_sizes(H200)["batch"] == 32
    assert ladder_estimate.gpu_sizes("A100-SXM4-80GB")["batch"] == 32
    assert ladder_estimate.gpu_sizes("V100-SXM2-32GB")["batch"] == 8  # 29.8 GiB


def _record(gpu="NVIDIA H200"):
    """A made-up climb (these numbers were never measured): every rung timed at
    100 ms but the last, skipped."""
    sizes = ladder_estimate.gpu_sizes(H200)
    rows = []
    for rung in ladder.RUNGS:
        scaled = {**sizes, "batch": sizes["batch"] * rung.batch_scale}
        rows.append({**vars(rung), "rung": rung.name, "sizes": scaled})
        rows[-1] |= {"batch": scaled["batch"], "step_ms": 100.0, "tflops": 200.0}
        rows[-1] |= {"tokens_per_s": 3e5, "mfu": 0.4, "mfu_vs_bf16_peak": 0.2}
        rows[-1] |= {"peak_mem_bytes": 2**34, "resident_bytes": 2**30}
    rows[-1] = {**vars(ladder.RUNGS[-1]), "rung": rows[-1]["rung"]}
    rows[-1] |= {"sizes": scaled, "skipped": "made up for a test"}
    return {
        "gpu": gpu,
        "torch": "2.11.0",
        "date": "2026-12-07",
        "command": "x",
        "rows": rows,
    }


def test_a_recorded_climb_is_priced_row_by_row(h200_ladder):
    estimates = ladder_estimate.record_estimates(_record())
    assert estimates == pytest.approx([r["estimated_ms"] for r in h200_ladder])
    assert ladder_estimate.record_estimates(_record("NVIDIA B200")) == [None] * 6
    v100 = ladder_estimate.record_estimates(_record("Tesla V100-SXM2-32GB"))
    assert v100[0] > 0 and v100[1:] == [None] * 5  # no TF32 or bf16 on a V100
    table = ladder.format_ladder(_record()["rows"], estimates)
    assert table.splitlines()[0].endswith("| estimated ms |")
    lines = table.splitlines()
    assert lines[2].endswith(f"| {estimates[0]:.2f} |")
    assert lines[-2].endswith(f"| {estimates[4]:.2f} |")  # the compiled rung
    # a rung that was not measured keeps its estimate
    assert lines[-1].endswith(f"| {estimates[5]:.2f} |")
    assert "not measured: made up" in lines[-1]
    no_price = [*estimates[:5], None]
    assert ladder.format_ladder(_record()["rows"], no_price).endswith("|  |")
    assert "estimated ms" not in ladder.format_ladder(_record()["rows"])


def test_records_without_provenance_are_refused(tmp_path):
    assert ladder_estimate.recorded_ladders(tmp_path) == []
    (tmp_path / "ladder_h200.json").write_text(json.dumps(_record()))
    assert ladder_estimate.recorded_ladders(tmp_path)[0]["gpu"] == "NVIDIA H200"
    (tmp_path / "ladder_h100.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="ladder_h100.json is not a ladder record"):
        ladder_estimate.recorded_ladders(tmp_path)


def test_the_tables_speak_spanish(h200_ladder):
    english = ladder_estimate.format_estimated_ladder(h200_ladder)
    assert english.splitlines()[0].split()[:3] == ["rung", "batch", "ms"]
    set_language("es")
    try:
        spanish = ladder_estimate.format_estimated_ladder(h200_ladder)
        measured = ladder.format_ladder(_record()["rows"])
    finally:
        set_language("en")
    assert "peldaño" in spanish and "sobrecoste" in spanish
    assert "AdamW fusionado" in spanish and "rung" not in spanish
    assert "no medido: made up for a test" in measured
