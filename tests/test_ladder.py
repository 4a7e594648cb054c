"""AMP at full speed (amp_lessons.measure.ladder): the ladder's code runs on the CPU
at a tiny size, every rung, torch.compile included. Its timings here are not a
GPU's (CPU 16-bit matmuls are usually emulated); make gpu-check records the GPU's."""

from __future__ import annotations

import torch

from amp_lessons.core.models import GPT
from amp_lessons.measure import ladder


def test_each_rung_keeps_the_ones_below_it():
    rungs = ladder.RUNGS
    assert [r.name for r in rungs] == [
        "eager fp32",
        "TF32",
        "bf16 autocast",
        "+ fused AdamW",
        "+ torch.compile",
        "+ 2x batch",
    ]
    for below, above in zip(rungs[2:], rungs[3:], strict=False):
        assert above.precision == below.precision == "bf16"
        assert above.fused >= below.fused and above.compiled >= below.compiled
        assert above.batch_scale >= below.batch_scale


def test_the_ladder_climbs_on_the_cpu_at_a_tiny_size():
    # the last rung uncompiled: its batch scaling is what it adds (one compile is
    # enough to prove the compiled rung runs; each costs seconds of CPU)
    rungs = (
        *ladder.RUNGS[:5],
        ladder.Rung("+ 2x batch", "bf16", fused=True, batch_scale=2),
    )
    saved = []
    rows = ladder.climb(
        "cpu", ladder.TINY, warmup=1, iters=1, rungs=rungs, on_row=saved.append
    )
    assert [r["rung"] for r in rows] == [r.name for r in rungs]
    assert len(saved) == len(rungs)
    for row in rows:
        assert row["step_ms"] > 0 and row["tflops"] > 0
        assert row["mfu"] is None and row["peak_mem_bytes"] is None  # CPU: no peaks
    assert rows[-1]["batch"] == 2 * rows[0]["batch"]
    assert rows[-1]["tokens_per_s"] > 0
    table = ladder.format_ladder(rows)
    assert table.count("\n") == len(rows) + 1 and "| eager fp32 | 2 |" in table
    assert "1.00x" in table.splitlines()[2]


def test_each_compiled_rung_compiles_for_its_own_batch(monkeypatch):
    """The 2x-batch rung compiles the model afresh for its batch, as a run at that
    batch would. Without a reset, dynamo recompiles the forward the rung below
    compiled, this time with the batch dimension dynamic (automatic dynamic shapes):
    the forward's code then holds two compiled entries, not one."""
    compile_ = torch.compile
    # dynamo's caching is the same with its eager backend, which skips Inductor
    monkeypatch.setattr(torch, "compile", lambda m: compile_(m, backend="eager"))
    rows = ladder.climb("cpu", ladder.TINY, warmup=1, iters=1, rungs=ladder.RUNGS[-2:])
    assert [r["batch"] for r in rows] == [2, 4] and all(r["step_ms"] for r in rows)
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(GPT.forward)
    assert len(entries) == 1


def test_rungs_a_killed_climb_never_wrote_are_rows_saying_why():
    first = {
        **ladder.asdict(ladder.RUNGS[0]),
        "rung": ladder.RUNGS[0].name,
        "sizes": ladder.TINY,
        "step_ms": 1.0,
    }
    rows = ladder.rows_not_reached([first], "killed")
    assert [r["rung"] for r in rows] == [r.name for r in ladder.RUNGS[1:]]
    assert all(r["skipped"] == "killed" and "step_ms" not in r for r in rows)
    assert rows[-1]["sizes"] == {**ladder.TINY, "batch": 2 * ladder.TINY["batch"]}
    assert ladder.rows_not_reached([], "killed") == []  # nothing to size them by


def test_a_rung_that_cannot_run_is_a_row_saying_why(monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")

    monkeypatch.setattr(ladder, "measure_rung", oom)
    rows = ladder.climb("cpu", ladder.TINY, rungs=ladder.RUNGS[:1])
    assert rows == [
        {
            "name": "eager fp32",
            "precision": "fp32",
            "fused": False,
            "compiled": False,
            "batch_scale": 1,
            "rung": "eager fp32",
            "sizes": ladder.TINY,
            "skipped": "CUDA out of memory: "
            "CUDA out of memory. Tried to allocate 2 GiB",
        }
    ]
    assert "not measured: CUDA out of memory" in ladder.format_ladder(rows)
    late = ladder.climb("cpu", ladder.TINY, rungs=ladder.RUNGS[:1], deadline=0)
    assert late[0]["skipped"] == "no time left"
