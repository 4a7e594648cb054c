"""amp_lessons.core.precision: the precision table, the scaler factory, autocast
and TF32."""

import os
import sys

import pytest
import torch

from amp_lessons.core import precision as pr
from amp_lessons.core.device import EMULATION_NOTE
from amp_lessons.core.precision import PRECISIONS


def test_the_table_says_what_each_precision_turns_on():
    assert [p.name for p in PRECISIONS.values()] == ["fp32", "tf32", "fp16", "bf16"]
    assert {n for n, p in PRECISIONS.items() if p.autocast} == {"fp16", "bf16"}
    assert {n for n, p in PRECISIONS.items() if p.needs_scaler} == {"fp16"}
    assert {n for n, p in PRECISIONS.items() if p.tf32} == {"tf32"}
    assert pr.resolve_precision("bf16").dtype is torch.bfloat16
    with pytest.raises(ValueError, match="unknown precision 'fp8'.*fp32, tf32"):
        pr.resolve_precision("fp8")


def test_slow_note_is_the_emulation_note_for_fp16_on_a_cpu_only():
    assert pr.slow_note(PRECISIONS["fp16"], "cpu").endswith(EMULATION_NOTE)
    assert "~150x" in EMULATION_NOTE
    assert all(
        pr.slow_note(p, "cpu") is None for n, p in PRECISIONS.items() if n != "fp16"
    )
    with pytest.warns(pr.SlowOnThisDeviceWarning, match="fp16 on a CPU"):
        pr.resolve_precision("fp16", "cpu")


def test_make_scaler_is_enabled_for_fp16_only():
    from amp_lessons.core.scaler import LossScaler

    fp16 = PRECISIONS["fp16"]
    assert pr.make_scaler(fp16, "cpu").get_scale() == 2.0**16
    assert isinstance(pr.make_scaler(fp16, "cpu", "ours"), LossScaler)
    assert not pr.make_scaler(fp16, "cpu", "none").is_enabled()
    for name in ("fp32", "tf32", "bf16"):
        assert not pr.make_scaler(PRECISIONS[name], "cpu").is_enabled(), name


def test_scaler_choice_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="unknown scaler 'apex'.*auto, torch"):
        pr.validate_scaler_choice(PRECISIONS["fp16"], "apex")
    with pytest.raises(ValueError, match="not needed with bf16.*exponent bits"):
        pr.validate_scaler_choice(PRECISIONS["bf16"], "torch")
    with pytest.raises(ValueError, match="not needed with fp32.*float32"):
        pr.make_scaler(PRECISIONS["fp32"], "cpu", "ours")
    for name in ("auto", "torch", "ours", "none"):
        pr.validate_scaler_choice(PRECISIONS["fp16"], name)  # all fine with fp16


def test_bf16_on_a_pre_ampere_gpu_suggests_fp16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla T4")
    with pytest.raises(RuntimeError, match=r"Tesla T4 is 7\.5.*precision='fp16'"):
        pr.resolve_precision("bf16", torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    assert pr.resolve_precision("bf16", torch.device("cuda")).dtype is torch.bfloat16


TF32_GETTERS = {
    "matmul precision": lambda: torch.get_float32_matmul_precision(),
    "matmul allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "matmul fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
    "cudnn allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "conv fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
    "rnn fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,
    "mkldnn matmul": lambda: torch.backends.mkldnn.matmul.fp32_precision,
}


TF32_SETUPS = {  # how a user may have set TF32 before calling us (both torch APIs)
    "untouched": lambda: None,
    "legacy on": lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True),
    "legacy off": lambda: (
        setattr(torch.backends.cuda.matmul, "allow_tf32", False),
        setattr(torch.backends.cudnn, "allow_tf32", False),
    ),
    "precision high": lambda: torch.set_float32_matmul_precision("high"),
    "precision medium": lambda: torch.set_float32_matmul_precision("medium"),
    "new api tf32": lambda: setattr(
        torch.backends.cuda.matmul, "fp32_precision", "tf32"
    ),
    "new api ieee": lambda: (
        setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee"),
        setattr(torch.backends.cudnn.conv, "fp32_precision", "ieee"),
    ),
}


def tf32_settings():
    """Every TF32 setting torch shows; None where torch refuses to read it (it
    raises when the legacy and the new API were mixed)."""
    return {name: pr._read_or_none(get) for name, get in TF32_GETTERS.items()}


def tf32_scenario(setup):
    """Run in a forked child, so each scenario starts from torch's pristine flags."""
    TF32_SETUPS[setup]()
    before = tf32_settings()
    for enabled in (True, False, True):
        with pr.tf32_mode(enabled):
            inside = tf32_settings()
            # both APIs agree inside: torch checks that before cuBLAS calls
            assert inside["matmul allow_tf32"] is enabled, inside
            assert inside["matmul fp32_precision"] == ("tf32" if enabled else "ieee")
            assert inside["cudnn allow_tf32"] is enabled, inside
        after = tf32_settings()
        assert all(after[k] == v for k, v in before.items() if v is not None), (
            before,
            after,
        )


@pytest.mark.skipif(not hasattr(torch.backends.cudnn, "conv"), reason="torch < 2.9")
@pytest.mark.parametrize("setup", list(TF32_SETUPS))
def test_tf32_mode_agrees_inside_and_restores_every_setting(setup):
    pid = os.fork()
    if pid == 0:  # child: report by exit status only
        try:
            tf32_scenario(setup)
            code = 0
        except BaseException as e:  # any exception is a failure
            print(f"{setup}: {e!r}", file=sys.stderr)
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"scenario {setup!r} failed"


def test_tf32_mode_leaves_other_devices_alone():
    before = tf32_settings()
    with pr.tf32_mode(True, "cpu"):
        assert tf32_settings() == before
    assert tf32_settings() == before


def test_autocast_context_casts_matmuls_only_for_fp16_and_bf16():
    a = torch.ones(2, 2)
    for name, precision in PRECISIONS.items():
        with pr.autocast_context(precision, "cpu"):
            out = a @ a
        expected = precision.dtype if precision.autocast else torch.float32
        assert out.dtype is expected, name
