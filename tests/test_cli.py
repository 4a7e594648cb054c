"""``python -m amp_lessons``: help, train, bench, and one-line errors with status 2:
output paths checked before any work, bad numbers and foreign checkpoints refused,
files written with the user's umask, and no leftovers after a killed save; all of it
in Spanish when the locale or --lang says so."""

import os
import re
import signal
import stat
import subprocess
import sys
from unittest import mock

import pytest
import torch

from amp_lessons import i18n
from amp_lessons.cli import main
from amp_lessons.cli.language import LOCALE_VARIABLES, environment_language
from amp_lessons.core import train, train_config
from amp_lessons.core.distributed import fsdp2_unsupported_reason
from amp_lessons.measure import bench_results

TINY_BENCH = [
    "--mlp-width",
    "32",
    "--mlp-batch",
    "8",
    "--gpt-layers",
    "1",
    "--gpt-embd",
    "16",
    "--gpt-block",
    "16",
    "--gpt-batch",
    "2",
    "--gpt-vocab",
    "32",
    "--warmup",
    "0",
    "--iters",
    "1",
]


@pytest.fixture(autouse=True)
def restore_threads():
    old = torch.get_num_threads()  # `train` sets one thread for the tiny model
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def english_locale(monkeypatch):
    # the command line speaks the locale's language: these tests read English, here
    # and in the processes they start, whatever the machine's locale
    for variable in LOCALE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")


def run_module(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "amp_lessons", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_help_lists_train_and_bench():
    done = run_module("--help")
    assert done.returncode == 0
    assert re.search(r"^\s+train\s", done.stdout, re.M)
    assert re.search(r"^\s+bench\s", done.stdout, re.M)


def test_a_mistake_is_one_line_on_stderr_with_status_2():
    done = run_module("train", "--device", "cpu", "--precision", "fp8")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip() == (
        "error: unknown precision 'fp8'; use one of: fp32, tf32, fp16, bf16"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--device", "tpu"], "unknown device 'tpu'; use one of: auto, cpu, cuda"),
        (
            ["--precision", "bf16", "--scaler", "torch"],
            "not needed with bf16: bf16 has fp32's 8 exponent bits, so gradients do "
            "not underflow the way they do in fp16. Scaling would only cost time. "
            "Fix: use --scaler auto (or --scaler none), or --precision fp16 if you "
            "want to study loss scaling.",
        ),
        (["--accum", "0"], "--accum must be a positive integer, got 0"),
        (["--resume"], "--resume needs --checkpoint, the checkpoint to continue from"),
        (
            ["--distributed", "fsdp2", "--precision", "fp16", "--scaler", "ours"],
            "Fix: --scaler auto (torch's GradScaler) with fsdp2, or 'ours' with "
            "--distributed ddp or 'none'.",
        ),
    ],
)
def test_train_errors(capsys, args, message):
    assert main(["train", "--device", "cpu", *args]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err and out == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda(capsys):
    assert main(["train", "--device", "cuda"]) == 2
    assert "--device cpu" in capsys.readouterr().err


def test_usage_mistakes_exit_2(capsys):
    assert main(["train", "--steps", "many"]) == 2
    assert main([]) == 2
    assert "invalid int value" in capsys.readouterr().err


def test_train_bf16_learns_and_prints_loss_scale_and_skips(capsys):
    assert (
        main(
            [
                "train",
                "--device",
                "cpu",
                "--precision",
                "bf16",
                "--steps",
                "60",
                "--log-every",
                "20",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("step")]
    assert [int(line.split()[1]) for line in lines] == [1, 20, 40, 60]
    assert all("| scale 1 | skipped 0 |" in line for line in lines)
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < 0.4 * first


def test_train_fp16_counts_skips_and_notes_cpu_slowness(capsys):
    assert (
        main(
            [
                "train",
                "--device",
                "cpu",
                "--precision",
                "fp16",
                "--steps",
                "30",
                "--init-scale",
                str(2.0**40),
                "--log-every",
                "30",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    skipped = int(re.search(r"skipped (\d+) of 30 steps", out).group(1))
    assert skipped >= 5
    assert f"| skipped {skipped} |" in out.splitlines()[-2]
    assert "note: fp16 on a CPU works but is slow" in err


def step_lines(out):
    """Printed step lines without their wall time, which differs run to run."""
    return [
        line.rsplit("|", 1)[0] for line in out.splitlines() if line.startswith("step")
    ]


def test_train_resume_from_the_command_line_continues_the_same_run(capsys, tmp_path):
    ckpt = str(tmp_path / "run.pt")
    args = [
        "train",
        "--device",
        "cpu",
        "--precision",
        "fp16",
        "--scaler",
        "ours",
        "--log-every",
        "5",
        "--accum",
        "2",
        "--batch-size",
        "32",
    ]
    assert main([*args, "--steps", "20"]) == 0
    full = step_lines(capsys.readouterr().out)
    assert main([*args, "--steps", "10", "--checkpoint", ckpt]) == 0
    assert f"checkpoint: {ckpt} (step 10)" in capsys.readouterr().out
    assert main([*args, "--steps", "20", "--checkpoint", ckpt, "--resume"]) == 0
    resumed = step_lines(capsys.readouterr().out)
    assert resumed == [line for line in full if int(line.split()[1]) > 10]


@pytest.mark.skipif(
    fsdp2_unsupported_reason("cpu") is not None,
    reason=str(fsdp2_unsupported_reason("cpu")),
)
def test_resuming_a_sharded_checkpoint_without_distributed_names_the_flag(tmp_path):
    # it said "run.dcp is a directory; give a file name inside it"
    ckpt = str(tmp_path / "run.dcp")
    args = ["train", "--device", "cpu", "--checkpoint", ckpt]
    done = run_module(*args, "--distributed", "fsdp2", "--steps", "2")
    assert done.returncode == 0, done.stderr
    refused = run_module(*args, "--distributed", "none", "--steps", "4", "--resume")
    assert refused.returncode == 2
    assert one_line_error(refused.stderr) == (
        f"error: --checkpoint {ckpt} is a sharded checkpoint (a torch.distributed."
        "checkpoint folder written by --distributed ddp or --distributed fsdp2), not "
        "a --distributed none file. Fix: resume with --distributed fsdp2 (or "
        "--distributed ddp), which also works in one process."
    )
    resumed = run_module(*args, "--distributed", "fsdp2", "--steps", "4", "--resume")
    assert resumed.returncode == 0, resumed.stderr  # one process, as the fix says
    assert f"checkpoint: {ckpt} (step 4)" in resumed.stdout
    plain = run_module(*args[:3], "--checkpoint", str(tmp_path), "--resume")
    assert "is a directory; give a file name inside it" in plain.stderr


def test_bench_prints_a_table_and_writes_json(capsys, tmp_path):
    path = tmp_path / "out.json"
    assert main(["bench", "--device", "cpu", "--json", str(path), *TINY_BENCH]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and f"wrote {path}" in out
    report = bench_results.load_results(path)
    assert report["command"].startswith("python -m amp_lessons bench --device cpu")
    assert report["sizes"]["mlp"]["width"] == 32
    assert len(report["results"]) == 8
    assert (
        sum(1 for line in out.splitlines() if line.startswith(("mlp ", "transformer ")))
        == 8
    )


def test_bench_size_mistakes(capsys):
    assert (
        main(["bench", "--device", "cpu", "--gpt-embd", "30", "--gpt-heads", "4"]) == 2
    )
    assert "multiple of n_head" in capsys.readouterr().err


def test_record_is_for_gpu_results_only(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["bench", "--device", "cpu", "--record"]) == 2
    assert "use --json PATH" in capsys.readouterr().err


# --- output paths, numbers and checkpoints are checked before any work ---------------


def one_line_error(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def unwritable_paths(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    paths = {
        "a directory": tmp_path,
        "under a file": tmp_path / "a_file" / "out",
        "read-only /proc": "/proc/amp_lessons_out",
    }
    if os.geteuid() != 0:  # root writes anywhere: the permission bits stop no one
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        paths["no write permission"] = locked / "out"
    return paths


@pytest.mark.parametrize(
    "case", ["a directory", "under a file", "read-only /proc", "no write permission"]
)
def test_train_refuses_a_checkpoint_path_before_training(case, tmp_path, capsys):
    # `train --checkpoint /tmp` trained to the end, then failed "Is a directory"
    paths = unwritable_paths(tmp_path)
    if case not in paths:
        pytest.skip("running as root: permission bits do not stop root")
    assert (
        main(
            [
                "train",
                "--device",
                "cpu",
                "--steps",
                "30",
                "--checkpoint",
                str(paths[case]),
            ]
        )
        == 2
    )
    out, err = capsys.readouterr()
    assert out == ""  # not even the header: nothing was trained
    assert "--checkpoint" in one_line_error(err)


@pytest.mark.parametrize(
    "case", ["a directory", "under a file", "read-only /proc", "no write permission"]
)
def test_bench_refuses_a_json_path_before_measuring(case, tmp_path, capsys):
    paths = unwritable_paths(tmp_path)
    if case not in paths:
        pytest.skip("running as root: permission bits do not stop root")
    assert (
        main(["bench", "--device", "cpu", "--json", str(paths[case]), *TINY_BENCH]) == 2
    )
    out, err = capsys.readouterr()
    assert out == "" and "measuring" not in err
    assert "--json" in one_line_error(err)


def test_a_missing_parent_folder_is_created(tmp_path, capsys):
    path = tmp_path / "new" / "folder" / "out.json"
    assert (
        main(
            [
                "bench",
                "--device",
                "cpu",
                "--json",
                str(path),
                "--configs",
                "mlp",
                "--precisions",
                "fp32",
                *TINY_BENCH,
            ]
        )
        == 0
    )
    assert bench_results.load_results(path)["results"]


@pytest.mark.parametrize(
    "args",
    [
        ["--lr", "inf"],
        ["--lr", "nan"],
        ["--lr", "0"],
        ["--lr", "-0.001"],
        ["--clip", "inf"],
        ["--clip", "-1"],
        ["--init-scale", "inf"],
        ["--init-scale", "0"],
        ["--steps", "0"],
        ["--batch-size", "-8"],
        ["--growth-interval", "0"],
        ["--log-every", "-1"],
        ["--checkpoint-every", "-2"],
        ["--threads", "0"],
        ["--seed", "-1"],
        ["--seed", str(2**64)],
    ],
    ids=" ".join,
)
def test_train_refuses_bad_numbers_with_the_reason(args, capsys):
    # `--lr inf` trained on NaN and exited 0. TrainConfig's checks word it ("--lr must
    # be a finite number > 0, got inf ..."); --threads, no config field, is argparse's
    assert main(["train", "--device", "cpu", "--steps", "5", *args]) == 2
    out, err = capsys.readouterr()
    line = one_line_error(err)
    assert args[0] in line and "must be" in line and out == ""
    assert "None" not in line  # Python's words for no clipping stay in Python


@pytest.mark.parametrize(
    "args",
    [
        ["--warmup", "-1"],
        ["--iters", "0"],
        ["--mlp-width", "0"],
        ["--gpt-batch", "-1"],
        ["--threads", "0"],
    ],
    ids=" ".join,
)
def test_bench_refuses_bad_numbers_with_the_reason(args, capsys):
    assert main(["bench", "--device", "cpu", *TINY_BENCH, *args]) == 2
    out, err = capsys.readouterr()
    assert f"argument {args[0]}: must be" in one_line_error(err) and out == ""


class NotOurs:
    """A pickled object of some other program: weights_only loading refuses it."""


def foreign_checkpoints(tmp_path):
    real = tmp_path / "real.pt"
    assert (
        main(
            [
                "train",
                "--device",
                "cpu",
                "--steps",
                "3",
                "--log-every",
                "0",
                "--checkpoint",
                str(real),
            ]
        )
        == 0
    )
    files = {}
    files["right format, no config"] = tmp_path / "no_config.pt"
    torch.save(
        {"format": train.CHECKPOINT_FORMAT, "step": 3}, files["right format, no config"]
    )
    files["a tensor"] = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), files["a tensor"])
    files["truncated"] = tmp_path / "truncated.pt"
    files["truncated"].write_bytes(real.read_bytes()[: real.stat().st_size // 2])
    files["a foreign object"] = tmp_path / "foreign.pt"
    torch.save(
        {"format": train.CHECKPOINT_FORMAT, "model": NotOurs()},
        files["a foreign object"],
    )
    files["text"] = tmp_path / "notes.pt"
    files["text"].write_text("hello")
    state = torch.load(real, weights_only=True)
    state["records"] = state["records"][:1]
    files["step records cut"] = tmp_path / "cut.pt"
    torch.save(state, files["step records cut"])
    return files


def test_a_checkpoint_that_is_not_ours_is_refused_in_one_line(tmp_path, capsys):
    # a dict with the right format key but no config gave a KeyError traceback
    for case, path in foreign_checkpoints(tmp_path).items():
        capsys.readouterr()
        assert (
            main(
                [
                    "train",
                    "--device",
                    "cpu",
                    "--steps",
                    "10",
                    "--resume",
                    "--checkpoint",
                    str(path),
                ]
            )
            == 2
        ), case
        out, err = capsys.readouterr()
        line = one_line_error(err)
        assert str(path) in line and "checkpoint" in line and out == "", case


@pytest.mark.parametrize("steps", ["10", "4"])
def test_resume_with_nothing_left_to_train_says_so(steps, tmp_path, capsys):
    # `--resume --steps` at or below the saved step silently did nothing
    path = str(tmp_path / "run.pt")
    args = ["train", "--device", "cpu", "--log-every", "0", "--checkpoint", path]
    assert main([*args, "--steps", "10"]) == 0
    capsys.readouterr()
    assert main([*args, "--steps", steps, "--resume"]) == 2
    out, err = capsys.readouterr()
    line = one_line_error(err)
    assert "already at step 10" in line and "--steps above 10" in line and out == ""


def test_a_train_run_checks_once_and_reads_its_checkpoint_once(
    tmp_path, capsys, monkeypatch
):
    # the flags' types, run_train and train() each checked the numbers, and --resume
    # read the checkpoint twice; now the flags are only converted, and the core's one
    # plan_training both checks the run and carries the checkpoint into train()
    path = str(tmp_path / "run.pt")
    args = ["train", "--device", "cpu", "--log-every", "0", "--checkpoint", path]
    assert main([*args, "--steps", "3"]) == 0
    counts = {}
    for owner, name in (
        (train, "plan_training"),
        (train_config, "validate_config"),
        (torch, "load"),
    ):
        counts[name] = mock.Mock(wraps=getattr(owner, name))
        monkeypatch.setattr(owner, name, counts[name])
    assert main([*args, "--steps", "5", "--resume"]) == 0
    assert f"checkpoint: {path} (step 5)" in capsys.readouterr().out
    assert {name: c.call_count for name, c in counts.items()} == {
        "plan_training": 1,
        "validate_config": 1,
        "load": 1,
    }


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002], ids=lambda m: f"{m:03o}")
def test_files_are_written_with_the_users_umask(umask, tmp_path, capsys):
    # mkstemp made them 0600 whatever the umask, and `make student` copied them so
    old = os.umask(umask)
    try:
        ckpt, out = tmp_path / "run.pt", tmp_path / "out.json"
        assert (
            main(
                [
                    "train",
                    "--device",
                    "cpu",
                    "--steps",
                    "2",
                    "--log-every",
                    "0",
                    "--checkpoint",
                    str(ckpt),
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "bench",
                    "--device",
                    "cpu",
                    "--json",
                    str(out),
                    "--configs",
                    "mlp",
                    "--precisions",
                    "fp32",
                    *TINY_BENCH,
                ]
            )
            == 0
        )
    finally:
        os.umask(old)
    for path in (ckpt, out):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


KILLED_SAVE = """
import sys, time
import torch
from amp_lessons.core import train

def hangs(state, f):
    f.write(b"half a checkpoint")
    f.flush()
    print("writing", flush=True)
    time.sleep(120)

torch.save = hangs
train.save_checkpoint(sys.argv[1], {"format": train.CHECKPOINT_FORMAT})
"""


def test_a_killed_save_leaves_nothing_after_the_next_run(tmp_path, capsys):
    # a SIGKILL mid-save left a .tmp beside the checkpoint, for good
    path = tmp_path / "run.pt"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert (
        main(
            [
                "train",
                "--device",
                "cpu",
                "--steps",
                "2",
                "--log-every",
                "0",
                "--checkpoint",
                str(path),
            ]
        )
        == 0
    )
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]


# -- the language: the locale's (LANGUAGE, LC_ALL, LC_MESSAGES, LANG) or --lang's --

TINY_TRAIN = [
    "train",
    "--device",
    "cpu",
    "--precision",
    "fp32",
    "--steps",
    "3",
    "--log-every",
    "1",
    "--batch-size",
    "16",
]


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({"LANG": "es_ES.UTF-8"}, "es"),
        ({"LANG": "es_MX"}, "es"),
        ({"LC_MESSAGES": "es_ES.UTF-8", "LANG": "en_US.UTF-8"}, "es"),
        ({"LC_ALL": "en_GB.UTF-8", "LC_MESSAGES": "es_ES.UTF-8"}, "en"),
        (
            {"LANGUAGE": "fr:es", "LANG": "en_US.UTF-8"},
            "es",
        ),  # a list: the first spoken
        ({"LANG": "fr_FR.UTF-8"}, "en"),  # a language the package does not speak
        ({"LC_ALL": "fr_FR.UTF-8", "LANG": "es_ES.UTF-8"}, "en"),  # LC_ALL decides
        ({"LANG": "C.UTF-8"}, "en"),
        ({"LANG": ""}, "en"),
        ({}, "en"),
    ],
)
def test_the_language_is_the_locales_in_gettexts_order(environ, expected):
    assert environment_language(environ) == expected


def test_spanish_locale_prints_spanish_help():
    done = run_module("train", "--help", LANG="es_ES.UTF-8")
    assert done.returncode == 0 and done.stderr == ""
    out = done.stdout
    assert out.startswith("uso: python -m amp_lessons train [-h]")
    assert "\nopciones:\n" in out
    assert "muestra este mensaje de ayuda y termina" in out
    assert "pasos limpios antes de que la escala se duplique" in " ".join(out.split())
    # flag names, choices and defaults are not translated
    assert "--growth-interval GROWTH_INTERVAL" in out and "{spirals,gpt}" in out
    assert "options:" not in out and "show this help" not in out


def test_lang_es_prints_the_run_in_spanish_and_leaves_the_language(capsys):
    assert main(["--lang", "es", *TINY_TRAIN]) == 0
    assert i18n.language() == "en"  # main() leaves the package as it found it
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("entrenamiento de spirals en cpu | fp32: ")
    assert lines[0].endswith("| 3 pasos de 16 x 1 microlote(s)")
    steps = [line for line in lines if line.startswith("paso ")]
    assert [int(line.split()[1]) for line in steps] == [1, 2, 3]
    assert all(
        "| pérdida " in line and "| escala " in line and "| omitidos 0 |" in line
        for line in steps
    )
    assert re.fullmatch(
        r"terminado en [\d.]+ s en cpu: pérdida [\d.]+ -> [\d.]+ "
        r"\(primer y último paso\), pérdida de "
        r"evaluación [\d.]+, exactitud [\d.]+%, 0 de 3 pasos "
        r"omitidos, escala final 1",
        lines[-1],
    )


def test_lang_en_wins_over_a_spanish_locale(capsys, monkeypatch):
    monkeypatch.setenv("LANG", "es_ES.UTF-8")
    assert main([*TINY_TRAIN, "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("train spirals on cpu | fp32: ")
    assert "step    1 | loss " in out and "\ndone in " in out
    assert "paso" not in out and "pérdida" not in out


def test_an_unsupported_locale_falls_back_to_english_silently():
    done = run_module("train", "--help", LANG="fr_FR.UTF-8")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: python -m amp_lessons train [-h]")
    assert "show this help message and exit" in done.stdout


def test_a_bad_flag_value_is_one_spanish_line(capsys, monkeypatch):
    monkeypatch.setenv("LANG", "es_ES.UTF-8")
    assert main(["bench", "--device", "cpu", "--iters", "0"]) == 2
    assert main(["train", "--lang", "es", "--task", "mnist"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "error: argumento --iters: debe ser un entero >= 1; se recibió 0 (consulte "
        "python -m amp_lessons bench --help)",
        "error: argumento --task: opción no válida: 'mnist' (elija entre 'spirals', "
        "'gpt') (consulte python -m amp_lessons train --help)",
    ]


@pytest.mark.parametrize("argv", [["--lang", "fr", "train"], ["train", "--lang=fr"]])
def test_lang_fr_is_an_error_naming_en_and_es(argv, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "error: argument --lang: unsupported language 'fr'; use one of: "
        "en (English), es (Spanish) (see python -m amp_lessons"
        f"{' train' if argv[0] == 'train' else ''} --help)\n"
    )


# -- every mistake of the command line, and its first log line, in Spanish ---------
# words of English prose that Spanish never uses (flags, paths, dtype and API names are
# taken out first): an error left in English shows several
ENGLISH_PROSE = {
    "the", "must", "needs", "unknown", "got", "is", "was", "has", "give", "with",
    "without", "and", "to", "of", "choose", "asked", "nothing", "written", "sees",
    "none", "directory", "file", "run", "once", "create", "it", "or", "newer",
    "integer", "number", "positive", "needed", "master", "weights", "everywhere",
    "width", "layers", "batch", "heads",
}  # fmt: skip


def english_left(text: str) -> list[str]:
    """The English prose words of ``text`` (backticked, flagged, quoted and path
    words removed: those stay as they are in every language)."""
    text = re.sub(
        r"`[^`]*`|--[\w-]+(?: [\w.:-]+)?|'[^']*'|\S*[/.]\S*|\S*\(\)\S*", " ", text
    )
    return [w for w in re.findall(r"[a-z]+", text.lower()) if w in ENGLISH_PROSE]


def test_english_left_is_caught():
    assert english_left("error: --steps must be a positive integer, got -1")
    assert not english_left("error: --steps debe ser un entero positivo; se recibió -1")


SPANISH_ERRORS = {
    "steps": ["train", "--steps", "-1"],
    "precision": ["train", "--precision", "fp64"],
    "cuda": ["train", "--device", "cuda"],
    "resume": ["train", "--resume"],
    "resume-missing": ["train", "--resume", "--checkpoint", "{tmp}/none.pt"],
    "lr": ["train", "--lr", "-1"],
    "batch-size": ["train", "--batch-size", "0"],
    "checkpoint-folder": ["train", "--checkpoint", "{tmp}"],
    "bench-precision": ["bench", "--precisions", "fp64"],
    "estimate-bf16": ["estimate", "--gpu", "V100-SXM2-16GB", "--precision", "bf16"],
    "gpu-check": ["gpu-check"],
    "scaler-bf16": ["train", "--precision", "bf16", "--scaler", "torch"],
}


@pytest.mark.parametrize("case", SPANISH_ERRORS)
def test_a_mistake_is_one_spanish_line(case, capsys, monkeypatch, tmp_path):
    """Under LANGUAGE=es each mistake is one line of Spanish on stderr (the flags,
    paths and values as they are), exit status 2, nothing on stdout."""
    monkeypatch.setenv("LANGUAGE", "es")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU or not
    argv = [a.replace("{tmp}", str(tmp_path)) for a in SPANISH_ERRORS[case]]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("error: ")
    assert not english_left(err), f"English in {err!r}: {english_left(err)}"
    assert i18n.language() == "en"


def test_the_first_log_line_and_the_bench_help_are_spanish(capsys, monkeypatch):
    monkeypatch.setenv("LANGUAGE", "es")
    for precision in ("fp32", "fp16", "bf16"):
        argv = [*TINY_TRAIN, "--precision", precision]
        assert main(argv) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith(f"entrenamiento de spirals en cpu | {precision}: ")
        assert not english_left(first), first
    assert main(["bench", "--help"]) == 0
    sizes = capsys.readouterr().out.partition("\ntamaños:\n")[2]
    assert "--gpt-batch N" in sizes and not english_left(sizes), sizes
    assert main(["--help"]) == 0
    assert "command" not in capsys.readouterr().out


def test_the_bench_table_and_its_notes_are_spanish(capsys, monkeypatch):
    """`bench` under LANGUAGE=es: the table's column names and the report's notes
    (recorded in English in a results file) are printed in Spanish."""
    monkeypatch.setenv("LANGUAGE", "es")
    argv = ["bench", "--device", "cpu", "--configs", "mlp", "--precisions", "fp32"]
    sizes = ["--mlp-width", "8", "--mlp-layers", "1", "--mlp-batch", "2"]
    assert main([*argv, "--warmup", "0", "--iters", "1", *sizes]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next((line for line in lines if line.startswith("modelo ")), "")
    assert "ms por paso" in header and "acel." in header and "pico/fp32" in header
    notes = [line for line in lines if line.startswith("nota: ")]
    python_none = re.compile(r"\bNone\b")  # peak_mem_bytes's value, not a word
    assert len(notes) == 2, notes
    assert not any(english_left(python_none.sub("", n)) for n in notes), notes
