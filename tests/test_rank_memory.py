"""amp_lessons.teaching.rank_memory: the per-rank byte formulas against torch.chunk,
against the storages one process really holds, and against every rank of a 2-process
run."""

import json
import math

import pytest
import torch

from amp_lessons.core.distributed import launch
from amp_lessons.core.models import MLP
from amp_lessons.teaching import rank_memory
from amp_lessons.teaching.rank_memory import (
    expected_bytes,
    held_bytes,
    llama_7b_shapes,
    paper_table,
    shard_rows,
)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 7, 64, 65])
def test_shard_rows_follows_torch_chunk(rows, world_size):
    chunks = torch.arange(rows).chunk(world_size)
    got = [shard_rows(rows, world_size, r) for r in range(world_size)]
    assert got == [len(c) for c in chunks] + [0] * (world_size - len(chunks))


def test_one_process_holds_exactly_what_ddp_predicts():
    torch.manual_seed(0)
    model = MLP((2, 16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 2)).sum().backward()
    optimizer.step()
    shapes = [p.shape for p in model.parameters()]
    numel = sum(p.numel() for p in model.parameters())
    want = {
        "parameters": 4 * numel,
        "gradients": 4 * numel,
        "optimizer": 8 * numel + 4 * len(shapes),
    }
    assert held_bytes(model, optimizer) == want == expected_bytes(shapes, "ddp")


def test_fsdp2_formula_pads_parameters_but_not_moments():
    # one 5 x 2 weight on 2 ranks: 3 + 2 rows, both padded to 3 rows
    assert expected_bytes([(5, 2)], "fsdp2", 2, 0) == {
        "parameters": 24,
        "gradients": 24,
        "optimizer": 2 * 24 + 4,
    }
    assert expected_bytes([(5, 2)], "fsdp2", 2, 1) == {
        "parameters": 24,
        "gradients": 24,
        "optimizer": 2 * 16 + 4,
    }
    with pytest.raises(ValueError, match="rank must be in 0..1"):
        expected_bytes([(5, 2)], "fsdp2", 2, 2)
    with pytest.raises(ValueError, match="mode must be"):
        expected_bytes([(5, 2)], "zero3", 2, 0)


def test_llama_7b_has_its_published_parameter_count():
    assert sum(math.prod(s) for s in llama_7b_shapes()) == 6_738_415_616


def test_7b_on_paper_ddp_never_fits_80_gb_and_fsdp2_does():
    shapes = llama_7b_shapes()
    rows = {(r.mode, r.precision, r.world_size): r for r in paper_table(shapes)}
    n = 6_738_415_616
    ddp = rows["ddp", "bf16", 8]
    assert ddp.total == 16 * n + 4 * len(shapes)  # ~107.8 GB on every GPU
    assert ddp.total > 80e9 and rows["ddp", "fp32", 64].total == ddp.total
    assert rows["fsdp2", "bf16", 8].total < 14e9
    assert rows["fsdp2", "bf16", 64].total < 2e9
    table = rank_memory.format_table(list(rows.values()), 1e9, budget=80)
    assert "fits" in table.splitlines()[0] and " no" in table and " yes" in table


@pytest.mark.slow
def test_every_rank_of_a_2_process_run_holds_what_is_predicted(tmp_path):
    out = tmp_path / "memory.json"
    run = launch(
        ["--json", out],
        nproc=2,
        timeout=180,
        stream=None,
        module="amp_lessons.teaching.rank_memory",
    )
    assert run.returncode == 0, run.output
    measured = json.loads(out.read_text())["measured"]
    assert {(m["mode"], m["precision"], m["rank"]) for m in measured} == {
        (mode, p, r)
        for mode in ("ddp", "fsdp2")
        for p in ("fp32", "bf16")
        for r in (0, 1)
    }
    for m in measured:
        assert m["held"] == m["expected"], m
    by = {(m["mode"], m["precision"], m["rank"]): m["held"] for m in measured}
    # the bf16 policy stores what fp32 stores; FSDP2 holds about half of DDP
    assert by["fsdp2", "bf16", 0] == by["fsdp2", "fp32", 0]
    assert by["ddp", "bf16", 1] == by["ddp", "fp32", 1]
    ddp = sum(by["ddp", "fp32", 0].values())
    fsdp2 = sum(by["fsdp2", "fp32", 0].values())
    assert 0.45 < fsdp2 / ddp < 0.55
