"""Lesson 10's launches end cleanly (issue 21): a rank destroys its process groups in
its own main, before interpreter exit, so no gloo thread is left to meet a finalizing
interpreter (SIGABRT, "terminate called without an active exception")."""

from __future__ import annotations

import os
import sys

import launch_stress  # tests/launch_stress.py, the harness beside this file
import pytest
import torch

from amp_lessons.core import distributed
from amp_lessons.core.distributed import end_groups, world_of

CPU = torch.device("cpu")
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="counts threads in /proc/self/task"
)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))  # native ones too: gloo's workers


@linux_only
def test_end_groups_joins_gloos_threads_before_exit():
    end_groups()  # groups an earlier test ended
    before = _threads()
    with world_of("ddp", CPU) as world:
        assert world.combine(torch.tensor(0.5), False) == (0.5, False)
        assert _threads() > before  # gloo's worker and transport threads
    assert not torch.distributed.is_initialized()
    assert distributed._ENDED_GROUPS  # kept past close (the Reducer/GIL deadlock)
    assert end_groups() == 1 and not distributed._ENDED_GROUPS
    assert end_groups() == 0  # nothing left: returns at once (no gc at every exit)
    # without end_groups these threads live on into interpreter finalization
    assert _threads() == before


def test_error_lines_keep_the_ranks_own_and_drop_torchruns():
    output = (
        "[rank0]: terminate called without an active exception\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "[rank0]: terminate called without an active exception\n"
    )
    assert launch_stress.error_lines(output) == [
        "[rank0]: terminate called without an active exception"
    ]


@pytest.mark.slow
def test_rank_memory_launch_survives_a_busy_core(capsys):
    # the launch that died with SIGABRT in issue 21 ("terminate called without an
    # active exception" at interpreter exit), 3 times with a core kept busy (by a
    # spinning process where nothing else keeps it busy): no run may fail or print it
    results = launch_stress.stress(3, busy_cores=1, kinds=["rank_memory"], timeout=60)
    print(launch_stress.format_results(results))
    assert [(r["kind"], r["runs"], r["failures"]) for r in results] == [
        ("rank_memory", 3, 0)
    ], results


def test_spinners_make_up_only_the_cores_left_idle(monkeypatch):
    with launch_stress.busy(1, seconds=10):
        assert launch_stress.cores_in_use(0.5) >= 0.8  # the spinner is measured
    for in_use, spinners in [(0.0, 1), (0.4, 1), (0.6, 0), (2.0, 0)]:
        monkeypatch.setattr(launch_stress, "cores_in_use", lambda x=in_use: x)
        assert launch_stress.spinners_needed(1) == spinners, in_use
    monkeypatch.setattr(launch_stress, "cores_in_use", lambda: 0.9)
    assert launch_stress.spinners_needed(2) == 1


def test_exit_rank_leaves_only_under_torchrun(monkeypatch):
    """Outside torchrun a module's entry point exits the normal way (exit_rank
    returns); under it, the rank leaves past finalization (tested by every launch)."""
    from amp_lessons.core.distributed import exit_rank

    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert exit_rank(0) is None
