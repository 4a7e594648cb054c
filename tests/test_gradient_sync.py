"""amp_lessons.teaching.gradient_sync: what DDP and FSDP2 send, accumulate and clip
under AMP, in one process and on every rank of a 2-process run."""

import inspect
import json
import math

import pytest
import torch

from amp_lessons.core.distributed import (
    fsdp2_unsupported_reason,
    launch,
    mixed_precision_policy,
)
from amp_lessons.core.precision import PRECISIONS
from amp_lessons.teaching import gradient_sync

needs_fsdp2 = pytest.mark.skipif(
    fsdp2_unsupported_reason("cpu") is not None,
    reason=str(fsdp2_unsupported_reason("cpu")),
)


def test_rounds_to_tells_which_values_a_dtype_holds():
    assert gradient_sync.rounds_to([torch.tensor([0.5, 1.0])], torch.float16)
    assert not gradient_sync.rounds_to([torch.tensor([0.1])], torch.float16)


def test_ddp_sends_fp32_buckets_under_autocast(one_thread):
    facts = gradient_sync.ddp_gradients()
    n = sum(p.numel() for p in gradient_sync.lesson_task().make_model().parameters())
    assert facts["parameters"] == facts["gradients"] == {torch.float32}
    assert facts["buckets"] == [(torch.float32, n)]
    assert (facts["in_no_sync"], facts["after_no_sync"]) == (0, 1)
    # the fp16 hook's average went through fp16 and came back into fp32 gradients
    assert facts["fp16_hook_rounds"] and not facts["plain_rounds"]
    assert facts["fp16_hook_gradients"] == {torch.float32}


@needs_fsdp2
def test_fsdp2_accumulates_without_sync_in_reduce_dtype(one_thread):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    course = mixed_precision_policy(PRECISIONS["bf16"])
    bare = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    synced = gradient_sync.fsdp2_accumulate(course, sync_every=True)
    fp32 = gradient_sync.fsdp2_accumulate(course, sync_every=False)
    bf16 = gradient_sync.fsdp2_accumulate(bare, sync_every=False)
    assert synced["grad_before_last"] and not fp32["grad_before_last"]
    assert torch.equal(fp32["gradient"], synced["gradient"])
    assert not torch.equal(bf16["gradient"], synced["gradient"])
    assert gradient_sync.rounds_to([bf16["gradient"]], torch.bfloat16)


@needs_fsdp2
def test_the_accumulation_dtype_is_reduce_dtype_in_torchs_source():
    # where the notebook's claim comes from; private code: a torch that changes it
    # should send us back to the lesson's text
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    source = inspect.getsource(_fsdp_param.FSDPParam.to_accumulated_grad_if_needed)
    assert "self.unsharded_accumulated_grad = unsharded_grad.to(self.reduce_dtype)" in (
        source
    )


@needs_fsdp2
def test_fsdp2_clip_norm_is_the_whole_gradients(one_thread):
    clip = gradient_sync.fsdp2_clip(max_norm=0.1)
    assert clip["gradient_type"] == "DTensor"
    assert clip["norm_placements"] == "(Replicate(),)"
    assert math.isclose(clip["norm"], clip["whole_norm"], rel_tol=1e-5)
    assert clip["norm"] > 0.1 and math.isclose(clip["norm_after"], 0.1, rel_tol=1e-4)


@pytest.mark.slow
@needs_fsdp2
def test_on_2_processes_one_clip_norm_and_bf16_reduction_without_reduce_dtype(tmp_path):
    out = tmp_path / "sync.json"
    run = launch(
        ["--json", out],
        nproc=2,
        module="amp_lessons.teaching.gradient_sync",
        stream=None,
    )
    run.raise_for_status()
    ranks = json.loads(out.read_text())
    assert [r["rank"] for r in ranks] == [0, 1]
    norms = {r["clip"]["norm"] for r in ranks}
    assert len(norms) == 1  # the same clipping factor on every rank
    for r in ranks:
        assert r["clip"]["norm_placements"] == "(Replicate(),)"
        assert math.isclose(r["clip"]["norm"], r["clip"]["whole_norm"], rel_tol=1e-5)
        assert not r["course: reduced in bf16"]  # reduce_dtype=float32
        assert r["param_dtype only: reduced in bf16"]  # reduce_dtype=None
