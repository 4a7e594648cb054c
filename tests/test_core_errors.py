"""The core speaks Python: its errors name the argument or TrainConfig field a caller
set, never a command-line flag or a lesson, and the command line words them as flags
in one place (``amp_lessons.cli.flags.in_flags``)."""

import ast
import pickle
import re
from pathlib import Path

import pytest
import torch
from paths import PACKAGE

from amp_lessons.cli.flags import in_flags
from amp_lessons.core import distributed, models
from amp_lessons.core.checkpoints import load_checkpoint
from amp_lessons.core.errors import CheckpointNotFound, SettingError
from amp_lessons.core.train import TrainConfig, plan_training, train

CORE = PACKAGE / "core"
FLAG = re.compile(r"(?<![\w-])--[a-z]")  # --steps; not "a -- b" nor "x--y"
LESSON = re.compile(r"\b(lesson|notebook)s?\b", re.I)  # not amp_lessons

# None left: what the machine means for the lessons (device.what_this_means) moved to
# amp_lessons.teaching.machine. Each entry must still be in the source (checked below).
PENDING_LESSON_MENTIONS: set[tuple[str, str]] = set()
# torchrun's own flags, in the command line launch.launch builds
COMMAND_LINE_PARTS = {
    ("launch.py", "--standalone"),
    ("launch.py", "--nproc_per_node="),
}


def test_a_setting_error_reads_as_python_and_renders_for_a_front_end():
    e = SettingError("`resume=True` needs `checkpoint_path`")
    assert str(e) == "resume=True needs checkpoint_path"
    assert isinstance(e, ValueError)
    assert e.render(lambda name, value: f"<{name}|{value}>") == (
        "<resume|True> needs <checkpoint_path|None>"
    )
    assert in_flags(e) == "--resume needs --checkpoint"
    missing = CheckpointNotFound("no checkpoint at x: `resume=True`")
    assert isinstance(missing, FileNotFoundError)
    assert str(missing).endswith("resume=True")
    copy = pickle.loads(pickle.dumps(missing))  # e.g. from a worker process
    assert type(copy) is CheckpointNotFound and in_flags(copy).endswith("--resume")


def sharded_folder(tmp_path):
    folder = tmp_path / "run.dcp"
    folder.mkdir()
    (folder / distributed.META_FILE).write_text("{}")
    return folder


def saved_run(tmp_path):
    path = tmp_path / "run.pt"
    train(TrainConfig(device="cpu", num_steps=2, checkpoint_path=str(path)))
    return str(path)


# (what is wrong, a call that raises, words its message must have: Python's names)
BAD_INPUTS = [
    ("steps", lambda p: plan_training(TrainConfig(num_steps=0)), "num_steps must be"),
    ("lr", lambda p: plan_training(TrainConfig(lr=float("inf"))), "lr must be"),
    ("clip", lambda p: plan_training(TrainConfig(clip=-1.0)), "clip=None for no"),
    ("seed", lambda p: plan_training(TrainConfig(seed=-1)), "seed must be"),
    (
        "scale",
        lambda p: plan_training(TrainConfig(init_scale=1e39)),
        "init_scale must be",
    ),
    (
        "resume alone",
        lambda p: plan_training(TrainConfig(resume=True)),
        "resume=True needs checkpoint_path",
    ),
    (
        "every, no path",
        lambda p: plan_training(TrainConfig(checkpoint_every=2)),
        "checkpoint_every needs checkpoint_path",
    ),
    (
        "fsdp2 + ours",
        lambda p: plan_training(
            TrainConfig(
                precision="fp16", scaler="ours", distributed="fsdp2", device="cpu"
            )
        ),
        "scaler='auto'",
    ),
    (
        "scaler with bf16",
        lambda p: plan_training(TrainConfig(scaler="torch", device="cpu")),
        "use scaler='auto'",
    ),
    (
        "half model",
        lambda p: plan_training(
            TrainConfig(precision="fp32", device="cpu"), models.MLP((2, 4, 3)).half()
        ),
        "pick precision='fp16'",
    ),
    (
        "a directory",
        lambda p: plan_training(TrainConfig(device="cpu", checkpoint_path=str(p))),
        "checkpoint_path ",
    ),
    (
        "no checkpoint",
        lambda p: plan_training(
            TrainConfig(device="cpu", checkpoint_path=str(p / "none.pt"), resume=True)
        ),
        "without resume=True (with checkpoint_path)",
    ),
    (
        "sharded, one file asked",
        lambda p: plan_training(
            TrainConfig(device="cpu", checkpoint_path=str(sharded_folder(p)))
        ),
        "run with distributed='fsdp2'",
    ),
    (
        "nothing left",
        lambda p: plan_training(
            TrainConfig(
                device="cpu", num_steps=2, checkpoint_path=saved_run(p), resume=True
            )
        ),
        "Set num_steps above 2",
    ),
    (
        "other settings",
        lambda p: plan_training(
            TrainConfig(
                device="cpu",
                seed=1,
                num_steps=4,
                checkpoint_path=saved_run(p),
                resume=True,
            )
        ),
        "another checkpoint_path",
    ),
    ("load a folder", lambda p: load_checkpoint(p), "distributed='ddp'"),
    (
        "meta of a file",
        lambda p: distributed.read_meta(saved_run(p)),
        "distributed='none'",
    ),
    (
        "uneven batch",
        lambda p: distributed.World("ddp", 0, 3).check_batch(64),
        "batch_size=64 is the global batch",
    ),
]
if not torch.cuda.is_available():
    BAD_INPUTS.append(
        (
            "no CUDA",
            lambda p: plan_training(TrainConfig(device="cuda")),
            "use device='cpu'",
        )
    )


@pytest.mark.parametrize(
    "case, call, words", BAD_INPUTS, ids=[case for case, *_ in BAD_INPUTS]
)
def test_core_errors_name_python_settings_not_flags_or_lessons(
    case, call, words, tmp_path
):
    with pytest.raises((ValueError, RuntimeError, OSError)) as info:
        call(tmp_path)
    message = str(info.value)
    assert words in message
    assert not FLAG.search(message) and not LESSON.search(message), message
    assert "`" not in message and "`" not in in_flags(info.value)  # marks all worded


def test_a_process_launched_without_a_distributed_mode_is_named_in_python(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SettingError) as info:
        distributed.start_world("none", torch.device("cpu"))
    assert "use distributed='ddp'" in str(info.value)
    assert "Fix: use --distributed ddp (or --distributed fsdp2)" in in_flags(info.value)


def messages(path: Path):
    """The string literals of a module that are not docstrings, with their lines."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
    ]


def test_no_core_string_names_a_flag_or_a_lesson():
    found, pending = [], set()
    for path in sorted(CORE.glob("*.py")):
        for line, text in messages(path):
            if (path.name, text) in PENDING_LESSON_MENTIONS:
                pending.add((path.name, text))
            elif (path.name, text) not in COMMAND_LINE_PARTS and (
                FLAG.search(text) or LESSON.search(text)
            ):
                found.append(f"{path.name}:{line}: {text[:70]!r}")
    assert not found
    assert pending == PENDING_LESSON_MENTIONS  # a stale entry here is removed
