"""amp_lessons.core.distributed in one process: the World's arithmetic, wrapping, DCP
checkpoints, the FSDP2 version gate and the torchrun launcher. Runs across real
processes live in test_train_distributed.py."""

import sys

import pytest
import torch

from amp_lessons.core import distributed
from amp_lessons.core.distributed import (
    World,
    launch,
    start_world,
    world_of,
    wrap_model,
)
from amp_lessons.core.models import MLP
from amp_lessons.core.precision import PRECISIONS, autocast_context

CPU = torch.device("cpu")


def test_split_gives_each_rank_its_equal_slice_of_the_global_batch():
    x, y = torch.arange(8.0)[:, None], torch.arange(8)
    parts = [World("ddp", r, 2).split(x, y) for r in range(2)]
    assert [p[1].tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert torch.equal(torch.cat([p[0] for p in parts]), x)


def test_a_batch_that_does_not_split_evenly_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"not a multiple of 3.*e\.g\. 9 or 12"):
        World("ddp", 0, 3).check_batch(10)
    World("ddp", 0, 3).check_batch(12)


def test_one_process_combine_is_the_identity():
    assert World("none").combine(torch.tensor(0.25), True) == (0.25, True)


def test_mode_none_under_several_processes_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="use distributed='ddp'"):
        start_world("none", CPU)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="none, ddp, fsdp2"):
        start_world("deepspeed", CPU)


def test_fsdp2_gate_names_the_torch_it_needs(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.6.0")
    assert "needs torch 2.7" in distributed.fsdp2_unsupported_reason("cpu")
    assert distributed.fsdp2_unsupported_reason("cuda") is None
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    assert "public from torch 2.6" in distributed.fsdp2_unsupported_reason("cuda")
    with pytest.raises(RuntimeError, match="public from torch 2.6"):
        start_world("fsdp2", CPU)


def test_shard_units_are_the_layers_that_own_parameters():
    model = MLP((2, 8, 8, 3))
    assert [type(m).__name__ for m in distributed.shard_units(model)] == ["Linear"] * 3


def test_ddp_world_of_one_process_wraps_and_combines():
    with world_of("ddp", CPU) as world:
        assert (world.rank, world.world_size, world.owns_group) == (0, 1, True)
        gloo = torch.distributed.group.WORLD._get_backend(CPU)
        assert gloo.options._timeout == distributed.ONE_PROCESS_TIMEOUT  # not 30 min
        bf16 = PRECISIONS["bf16"]
        ctx = autocast_context(bf16, CPU)
        model, ctx = wrap_model(MLP((2, 8, 3)), world, bf16, ctx)
        assert type(model).__name__ == "DistributedDataParallel"
        with ctx:
            assert model(torch.randn(4, 2)).dtype is torch.bfloat16  # autocast
        assert world.combine(torch.tensor(0.5), False) == (0.5, False)
        group = torch.distributed.group.WORLD
    assert not torch.distributed.is_initialized()
    # kept alive, so dropping `model` (its Reducer) cannot destroy the group under the
    # GIL while a gloo thread waits for it: the deadlock that hung CI here
    assert any(g is group for g in distributed._ENDED_GROUPS)


def test_fsdp2_casts_parameters_inside_the_forward_only():
    with world_of("fsdp2", CPU) as world:
        bf16 = PRECISIONS["bf16"]
        ctx = autocast_context(bf16, CPU)
        model, ctx = wrap_model(MLP((2, 8, 3)), world, bf16, ctx)
        inside = []
        model.net[0].register_forward_hook(  # prepend: before FSDP2 frees the copy
            lambda m, args, out: inside.append((m.weight.dtype, out.dtype)),
            prepend=True,
        )
        with ctx:
            out = model(torch.randn(4, 2))
        assert inside == [(torch.bfloat16, torch.bfloat16)]
        assert out.dtype is torch.float32  # the policy's output_dtype
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        assert {type(p).__name__ for p in model.parameters()} == {"DTensor"}


def test_sharded_checkpoint_round_trip_in_one_process(tmp_path):
    path = tmp_path / "run.dcp"
    with world_of("fsdp2", CPU) as world:
        fp32 = PRECISIONS["fp32"]
        torch.manual_seed(0)
        model, _ = wrap_model(MLP((2, 8, 3)), world, fp32, None)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        model(torch.randn(4, 2)).sum().backward()
        optimizer.step()
        rng = torch.Generator().manual_seed(7).get_state()
        distributed.save_sharded(
            path, world, model, optimizer, {"rng": rng}, {"step": 1}
        )
        assert distributed.read_meta(path)["step"] == 1
        torch.manual_seed(1)  # a different model, then the checkpoint over it
        other, _ = wrap_model(MLP((2, 8, 3)), world, fp32, None)
        other_opt = torch.optim.AdamW(other.parameters(), lr=0.1)
        into = torch.Generator().get_state()
        distributed.load_sharded(path, other, other_opt, {"rng": into})
        assert torch.equal(into, rng)
        for p, q in zip(model.parameters(), other.parameters(), strict=True):
            assert torch.equal(p.full_tensor(), q.full_tensor())
            assert torch.equal(
                optimizer.state[p]["exp_avg"].full_tensor(),
                other_opt.state[q]["exp_avg"].full_tensor(),
            )


def test_read_meta_explains_wrong_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="run once without resume=True"):
        distributed.read_meta(tmp_path / "missing")
    (tmp_path / "single.pt").write_bytes(b"x")
    with pytest.raises(ValueError, match="resume it with distributed='none'"):
        distributed.read_meta(tmp_path / "single.pt")


@pytest.mark.slow
def test_launch_streams_the_output_of_every_rank():
    lines = []
    # one write per line: print() writes the text and the newline separately, and
    # two unbuffered processes sharing one pipe could interleave them
    say = "import os, sys; sys.stdout.write('rank ' + os.environ['RANK'] + '\\n')"
    run = launch(
        ["-n", "1", "-r", "1", say],
        nproc=2,
        timeout=60,
        stream=lines.append,
        module="timeit",
    )
    assert run.returncode == 0, run.output
    # each rank's line came through `stream`; timeit's own result line is printed in
    # two writes, so the other rank's line can land inside it, on a line of its own
    streamed = "\n".join(lines)
    assert "rank 0\n" in streamed + "\n" and "rank 1\n" in streamed + "\n", lines
    assert run.command[:3] == [sys.executable, "-m", "torch.distributed.run"]


def test_a_failed_launch_raises_with_the_ranks_own_error_first():
    ok = distributed.Launch(0, "fine\n", ["torchrun"])
    ok.raise_for_status()  # nothing to say
    output = (
        "rank 1 says\nterminate called after throwing 'gloo::IoException'\n"
        "Traceback (most recent call last):\n"
        '  File "/x/torch/distributed/elastic/multiprocessing/api.py", line 9\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "  exitcode  : -6 (pid: 7)\n"
    )
    with pytest.raises(RuntimeError) as failed:
        distributed.Launch(1, output, ["torchrun"]).raise_for_status()
    first, _, end = str(failed.value).partition("\n")
    assert first == (
        "the launch failed (exit 1): terminate called after throwing "
        "'gloo::IoException'"
    )
    assert end.endswith("exitcode  : -6 (pid: 7)")


@pytest.mark.slow
def test_launch_kills_a_run_past_its_timeout():
    with pytest.raises(TimeoutError, match="ran past 3 s"):
        launch(
            ["-n", "1", "import time; time.sleep(60)"],
            nproc=1,
            timeout=3,
            stream=None,
            module="timeit",
        )


def test_fsdp2_bf16_trains_the_gpt_task_in_one_process(one_thread):
    # inner units hand bf16 on (LayerNorm gets bf16 in, bf16 weight); only the root
    # casts its output to fp32 for the loss
    from amp_lessons.core.train import TrainConfig, train

    result = train(
        TrainConfig(
            task="gpt",
            device="cpu",
            precision="bf16",
            distributed="fsdp2",
            num_steps=3,
            batch_size=4,
            n_layer=1,
            n_embd=32,
            block_size=16,
        )
    )
    assert result.world_size == 1 and len(result.records) == 3
    assert all(r.loss == r.loss for r in result.records)  # finite, not NaN


def test_observe_dtypes_autocast_per_op_policy_per_unit():
    from amp_lessons.core.models import GPT

    torch.manual_seed(0)
    x = torch.randint(64, (2, 16))
    bf16 = PRECISIONS["bf16"]
    seen, out = distributed.observe_dtypes(
        GPT(64, 16, 1, 2, 32), autocast_context(bf16, CPU), x
    )
    by = {o.name: o for o in seen}
    assert {o.weight for o in seen} == {torch.float32}  # autocast casts op inputs
    assert by["blocks.0.attn.qkv"].output is torch.bfloat16  # a matmul: low
    assert by["blocks.0.ln1"].output is torch.float32  # LayerNorm on fp32: kept
    assert out is torch.bfloat16
    with world_of("fsdp2", CPU) as world:
        model, ctx = wrap_model(GPT(64, 16, 1, 2, 32), world, bf16, None)
        seen, out = distributed.observe_dtypes(model, ctx, x)
    assert {o.weight for o in seen} == {o.output for o in seen} == {torch.bfloat16}
    assert out is torch.float32  # the root's output_dtype
