"""`python -m amp_lessons gpu-check` on a CPU: up to the CUDA boundary.

What needs a GPU (the steps' real work) runs only there; here the refusal, the plan,
the budget, the per-row bench, the lesson runner, the goals and the summary are
checked, the last two on a results file marked synthetic that lives in tmp_path only.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import torch
from paths import NOTEBOOKS_DIR, ROOT

from amp_lessons.measure import bench, bench_results, ladder
from amp_lessons.measure import gpu_report as gr
from amp_lessons.tooling import gpu_check

MiB, GiB = 2**20, 2**30


def synthetic_report(gpu="NVIDIA H200", ms=None, peak=None, drop=()):
    """A bench report of made-up numbers, marked ``"synthetic": true``."""
    ms = {
        ("mlp", "fp32"): 3.0,
        ("mlp", "tf32"): 1.5,
        ("mlp", "fp16"): 0.9,
        ("mlp", "bf16"): 0.9,
        ("transformer", "fp32"): 90.0,
        ("transformer", "tf32"): 40.0,
        ("transformer", "fp16"): 26.0,
        ("transformer", "bf16"): 25.0,
        **(ms or {}),
    }
    peak = {
        ("mlp", "fp32"): 400 * MiB,
        ("mlp", "tf32"): 400 * MiB,
        ("mlp", "fp16"): 440 * MiB,
        ("mlp", "bf16"): 440 * MiB,
        ("transformer", "fp32"): 24 * GiB,
        ("transformer", "tf32"): 24 * GiB,
        ("transformer", "fp16"): 12 * GiB,
        ("transformer", "bf16"): 12 * GiB,
        **(peak or {}),
    }
    rows = []
    for (config, precision), step_ms in ms.items():
        if (config, precision) in drop:
            continue
        tflops = 1e13 / (step_ms * 1e-3) / 1e12
        rows.append(
            {
                "config": config,
                "precision": precision,
                "step_ms": step_ms,
                "times_ms": [step_ms],
                "peak_mem_bytes": peak[config, precision],
                "resident_bytes": peak[config, precision] // 2,
                "activation_bytes": 1000,
                "param_bytes": 10,
                "flops_per_step": 10**13,
                "tflops": tflops,
                "mfu": tflops / 989,
                "note": "",
            }
        )
    return {
        "schema": bench_results.SCHEMA,
        "synthetic": True,
        "device": "cuda",
        "device_name": gpu,
        "gpu": gpu,
        "compute_capability": "9.0",
        "cuda": "13.0",
        "torch": torch.__version__,
        "date": "2026-01-01T00:00:00+00:00",
        "command": "tests/test_gpu_check.py (synthetic)",
        "sizes": {"mlp": {"width": 4096, "layers": 3, "batch": 512}},
        "warmup": 5,
        "iters": 20,
        "notes": [],
        "skipped": [{"config": "mlp", "precision": "fp8", "reason": "synthetic"}],
        "results": bench.add_ratios(rows),
    }


@pytest.fixture
def fake_h200(monkeypatch):
    """CUDA mocked at the boundary only: what torch.cuda says about the machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda i=0: SimpleNamespace(total_memory=141 * GiB),
    )
    # torch's optimizers ask it when CUDA is available: on a CUDA build of torch
    # (the GPU machine's) the real call would reach for a driver this machine lacks
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)


def snapshot(folder: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


# -- without CUDA ----------------------------------------------------------------------


def test_refuses_fast_without_cuda_with_one_line_and_writes_nothing(tmp_path):
    before = snapshot(bench_results.RESULTS_DIR)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "amp_lessons", "gpu-check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.perf_counter() - start
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: gpu-check needs a CUDA GPU"
    ), result.stderr
    assert "nothing was run or written" in lines[0]
    assert seconds < 30  # "in seconds": ~3 s here, most of it importing torch
    assert snapshot(bench_results.RESULTS_DIR) == before
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_lists_it_plans_it_and_refuses_a_bad_budget(
    tmp_path, monkeypatch, capsys
):
    from amp_lessons.cli import main

    assert main(["--help"]) == 0 and "gpu-check" in capsys.readouterr().out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from amp_lessons.tooling.gpu_check import plan

    wheels = tmp_path / "wheels"
    monkeypatch.setattr(plan, "WHEELS_DIR", wheels)
    # no torchao wheel carried: the plan says what the GPU machine would lack
    assert main(["gpu-check", "--plan", "--out", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("gpu-check plan on a CUDA GPU (none here), budget 480 s:")
    steps = [line.split(" (")[0] for line in out.splitlines()[1:]]
    assert steps[:5] == [
        "1. wheels",  # first: the tests import what it may install (ipywidgets)
        "2. tests",
        "3. bench",
        "4. microbench",
        "5. lesson 10_distributed_amp",  # the longest of those side by side first
    ]
    assert "side by side with 6 others, 4 at a time" in out.splitlines()[5]
    assert steps[19] == "20. ladder"
    lacking = out.splitlines()[-6:]
    assert lacking[:2] == [
        "what a GPU run would lack (no network there):",
        f"- wheels: no torchao wheel in {wheels} (the GPU machine has no network): "
        "run `make gpu-wheels` here first",
    ]
    assert [line.split()[3] for line in lacking[2:]] == list(gpu_check.RUNNER_WHEELS)
    wheels.mkdir()
    (wheels / "torchao-0.18.0-cp310-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    for name in gpu_check.RUNNER_WHEELS:
        (wheels / f"{name}-1.0-py3-none-any.whl").write_bytes(b"")
    assert main(["gpu-check", "--plan", "--out", str(tmp_path / "out")]) == 0
    assert "would lack" not in capsys.readouterr().out
    assert not (tmp_path / "out").exists()  # a plan runs and writes nothing
    assert main(["gpu-check", "--budget", "0"]) == 2
    assert "--budget must be > 0" in capsys.readouterr().err


def test_run_gpu_check_raises_before_writing_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    calls = []
    with pytest.raises(gpu_check.NoCudaError, match="needs a CUDA GPU"):
        gpu_check.run_gpu_check(tmp_path / "out", runner=lambda *a: calls.append(a))
    assert calls == [] and not (tmp_path / "out").exists()


# -- the plan, CUDA mocked at the boundary ---------------------------------------------


def test_plan_runs_tests_wheels_bench_every_lesson_and_the_ladder(fake_h200, tmp_path):
    info = gpu_check.gpu_info()
    assert info["name"] == "NVIDIA H200" and info["capability"] == (9, 0)
    out, work = tmp_path / "results", tmp_path / "work"
    wheels = tmp_path / "wheels"  # as `make gpu-wheels` leaves it
    wheels.mkdir()
    (wheels / "torchao-0.18.0-cp310-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
    steps = gpu_check.plan_steps(out, work, wheels_dir=wheels)
    english = sorted(p.stem for p in NOTEBOOKS_DIR.glob("*.ipynb"))
    assert len(english) == 13
    side_by_side = [
        "10_distributed_amp",  # the longest first: each starts as a lane frees
        "05_amp_loop",
        "02_underflow",
        "03_loss_scaling",
        "04_autocast",
        "00_welcome",
        "01_number_formats",
    ]
    assert [s.name for s in steps] == [
        "wheels",
        "tests",
        "bench",
        "microbench",
        *(f"lesson {name}" for name in side_by_side),
        *(f"lesson {name}" for name in english if name not in side_by_side),
        "lesson es/00_amp_in_10_minutes",
        "lesson es/06_speed_memory",
        "ladder",
    ]
    # the lessons that time the GPU run alone, as do the tests, bench and ladder
    alone = {s.name for s in steps if not s.side_by_side}
    for name in ("00_amp_in_10_minutes", "06_speed_memory"):
        assert {f"lesson {name}", f"lesson es/{name}"} <= alone
    timed = ("07_clinic", "08_quick_check", "09_amp_in_practice", "11_fp8")
    assert {f"lesson {name}" for name in timed} <= alone
    assert {"tests", "bench", "microbench", "ladder"} <= alone
    [unit] = [u for u in gpu_check.step_units(steps) if len(u) > 1]
    assert [s.name for s in unit] == [f"lesson {name}" for name in side_by_side]
    threads = str(max(1, len(os.sched_getaffinity(0)) // gpu_check.LANES))
    # lesson 10's torchrun ranks take one thread each unless told otherwise
    assert "OMP_NUM_THREADS" not in unit[0].env
    assert all(s.env["OMP_NUM_THREADS"] == threads for s in unit[1:])
    by_name = {s.name: s for s in steps}
    b = by_name["bench"].command
    assert b[b.index("--configs") + 1 : b.index("--precisions")] == (
        "mlp",
        "transformer",
    )
    assert set(b[b.index("--precisions") + 1 :]) == {
        "fp32",
        "tf32",
        "fp16",
        "bf16",
        "fp8",
    }
    assert by_name["bench"].output.parent == work  # partial rows, not the record
    t = by_name["tests"].command
    assert t[t.index("-m", 2) + 1] == "gpu" and any(
        a.startswith("--junitxml=") for a in t
    )
    files = {Path(a).name for a in t if a.endswith(".py")}
    assert {
        "test_scaler.py",
        "test_bench.py",
        "test_memory.py",
        "test_autocast.py",
        "test_train.py",
    } <= files
    assert "test_repo.py" not in files and "test_gpu_check.py" not in files
    for lesson in gpu_check.LESSONS:
        step = by_name[f"lesson {lesson}"]
        src = Path(step.command[-2])
        assert src == NOTEBOOKS_DIR / f"{lesson}.ipynb" and src.exists()
        assert step.output == out / "executed" / f"{lesson}.ipynb" != src
    # the carried wheels go into a folder of the check's own, on every step's path
    w = by_name["wheels"].command
    site = w[2]
    assert Path(w[1]).name == "install_wheels.py" and site == str(work / "site")
    assert w[w.index("--torchao") + 1].endswith(".whl")
    for step in steps:
        path = step.env["PYTHONPATH"].split(os.pathsep)
        assert path[:2] == [str(ROOT), site]
    assert by_name["ladder"].command[-2:] == (
        "ladder-worker",
        str(work / "ladder.json"),
    )
    m = by_name["microbench"].command
    assert m[m.index("microbench-worker") + 1] == str(work / "profile.json")


def test_the_plan_names_what_a_gpu_machine_would_lack(fake_h200, tmp_path):
    """`gpu-check --plan`, on the CPU: every lesson and test there, and the carried
    torchao wheel, or one line saying how to fetch it."""
    wheels = tmp_path / "wheels"
    steps = gpu_check.plan_steps(tmp_path, tmp_path, wheels_dir=wheels)
    missing, *runner = gpu_check.plan_problems(steps, wheels)
    assert "no torchao wheel" in missing and "make gpu-wheels" in missing
    assert len(runner) == len(gpu_check.RUNNER_WHEELS) == 4
    assert all("make gpu-wheels" in line for line in runner)
    assert "no nbclient wheel" in runner[0]
    # without a wheel the step fails, saying why, instead of installing nothing
    step = next(s for s in steps if s.name == "wheels")
    assert "--torchao" not in step.command  # the step says so (install_wheels)
    wheels.mkdir()
    wheel = wheels / "torchao-0.18.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    for name in gpu_check.RUNNER_WHEELS:
        (wheels / f"{name}-1.0-py3-none-any.whl").write_bytes(b"")
    steps = gpu_check.plan_steps(tmp_path, tmp_path, wheels_dir=wheels)
    assert gpu_check.plan_problems(steps, wheels) == []
    assert str(wheel) in next(s for s in steps if s.name == "wheels").command
    # a lesson that is gone is named
    gone = gpu_check.Step(
        "lesson 99_gone", ("x", "lesson-worker", "/no/99.ipynb", "o"), 1
    )
    assert gpu_check.plan_problems([gone], wheels) == [
        "lesson 99_gone: no notebook at /no/99.ipynb"
    ]
    # and make gpu-wheels downloads the course's torchao into that folder
    dry = subprocess.run(
        ["make", "-n", "gpu-wheels"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    assert "pip download -q --no-deps -d build/gpu-wheels 'torchao==0.18.0'" in dry
    # and the lessons' runner with its dependencies, for the GPU machine's Python
    runner = dry[dry.index("--only-binary=:all:") :]
    assert (
        "--python-version 3.12" in runner
        and "--platform manylinux_2_28_x86_64" in runner
    )
    assert "-d build/gpu-wheels nbclient nbformat ipykernel ipywidgets" in runner
    assert dry.index("rm -rf build/gpu-wheels") < dry.index("pip download")


def test_the_check_installs_torchao_and_what_this_python_lacks(tmp_path):
    """Carried wheels: torchao's always (paired with the GPU machine's torch); the
    others only where this Python lacks their distribution, so that the image's own
    packages stay in use. Here pytest is installed and the made-up package is not."""
    for name in (
        "torchao-0.18.0-cp310-abi3-manylinux_2_28_x86_64.whl",
        "pytest-9.0.0-py3-none-any.whl",
        "amp_lessons_absent-1.0-py3-none-any.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    chosen = [w.name.split("-")[0] for w in gpu_check.plan.wheels_to_install(tmp_path)]
    assert chosen == ["torchao", "amp_lessons_absent"]
    step = gpu_check.plan_steps(tmp_path, tmp_path, wheels_dir=tmp_path)[0]
    runner = step.command[step.command.index("--runner") + 1 : -2]
    assert step.name == "wheels" and runner == (
        str(tmp_path / "amp_lessons_absent-1.0-py3-none-any.whl"),
    )
    assert step.command[-2:] == (
        "--torchao",
        str(tmp_path / "torchao-0.18.0-cp310-abi3-manylinux_2_28_x86_64.whl"),
    )
    assert gpu_check.plan.wheels_to_install(tmp_path / "none") == []


def make_wheel(folder: Path, name: str) -> Path:
    """A real wheel of one module, ``name``, whose ``VALUE`` is 42."""
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}.py", "VALUE = 42\n")
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
        )
        archive.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.mark.parametrize("use_pip", [True, False])
def test_install_wheels_puts_them_on_the_path_with_pip_or_without(tmp_path, use_pip):
    from amp_lessons.tooling.gpu_check import install_wheels

    site = tmp_path / "site"
    wheel = make_wheel(tmp_path, "carried_demo")
    assert install_wheels.install([wheel], site, use_pip=use_pip) == ""
    found = subprocess.run(
        [sys.executable, "-c", "import carried_demo; print(carried_demo.VALUE)"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == "42", found.stderr
    broken = tmp_path / "broken-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    error = install_wheels.install([broken], tmp_path / "s2", use_pip=use_pip)
    assert error and "\n" not in error


def test_the_wheels_step_installs_the_runner_even_without_torchao(tmp_path):
    """The runner and torchao go in separate calls: without torchao's wheel the
    runner is installed all the same, and the step fails, its last line saying how
    to fetch torchao; a broken runner wheel leaves torchao installed."""
    make_wheel(tmp_path, "runner_demo")
    step = gpu_check.plan_steps(tmp_path, tmp_path, wheels_dir=tmp_path)[0]
    result, lines = gpu_check.run_step(step, 120, echo=lambda line: None)
    assert result.status == "failed" and "make gpu-wheels" in lines[-1]
    assert (tmp_path / "site" / "runner_demo.py").exists()
    torchao = make_wheel(tmp_path, "torchao")  # stands in for the real one
    (tmp_path / "runner_demo-1.0-py3-none-any.whl").write_bytes(b"broken")
    shutil.rmtree(tmp_path / "site")
    step = gpu_check.plan_steps(tmp_path, tmp_path, wheels_dir=tmp_path)[0]
    assert step.command[-1] == str(torchao)
    result, lines = gpu_check.run_step(step, 120, echo=lambda line: None)
    assert result.status == "failed" and "runner_demo" in lines[-1]
    assert (tmp_path / "site" / "torchao.py").exists()


def test_a_module_the_wheels_installed_counts_as_there(tmp_path):
    """A step's needs are looked up on its PYTHONPATH (the wheels' folder) too: the
    main process never imports them, its workers do."""
    (tmp_path / "carried_only_here").mkdir()
    (tmp_path / "carried_only_here" / "__init__.py").write_text("")
    step = gpu_check.Step("lesson x", ("true",), 1.0, ("carried_only_here",))
    assert "needs carried_only_here" in gpu_check.run._skipped(step, 100.0)[1]
    step = gpu_check.Step(
        "lesson x",
        ("true",),
        1.0,
        ("carried_only_here",),
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert gpu_check.run._skipped(step, 100.0) is None
    assert gpu_check.WHEELS_DIR == ROOT / "build" / "gpu-wheels"


def test_the_plan_fits_the_budget_and_gives_each_step_real_time(fake_h200, tmp_path):
    steps = gpu_check.plan_steps(tmp_path, tmp_path)
    text = gpu_check.format_plan(steps, 480)
    limits = [
        float(line.split("at most ")[1].split(" s")[0]) for line in text.splitlines()
    ]
    assert len(limits) == len(steps)
    # steps side by side share one limit: count it once
    units = gpu_check.step_units(steps)
    per_unit, at = [], 0
    for unit in units:
        assert len(set(limits[at : at + len(unit)])) == 1
        per_unit.append(limits[at])
        at += len(unit)
    assert sum(per_unit) <= 480 - gpu_check.RESERVE_S + len(per_unit)  # rounding
    assert min(limits) > gpu_check.MIN_STEP_S
    # the ladder, last, the longest: two torch.compile rungs
    assert limits[-1] == max(limits)
    # what the steps are expected to take (a share is about a tenth of a step's
    # seconds on an H100/H200) fits in the budget now that lessons share lanes
    expected = 10 * sum(map(gpu_check.unit_share, units))
    assert expected < 480 - gpu_check.RESERVE_S < 10 * sum(s.share for s in steps)


def test_steps_side_by_side_share_the_lanes_longest_first():
    def step(share):
        return gpu_check.Step(f"s{share}", ("x",), share, side_by_side=True)

    unit = [step(x) for x in (3, 2, 1.5, 1.5, 1.4, 1.2, 1.2)]
    # lanes: 3 | 2 + 1.2 | 1.5 + 1.4 | 1.5 + 1.2 -> 3.2, with the margin
    assert gpu_check.unit_share(unit) == pytest.approx(3.2 * 1.25)
    assert gpu_check.unit_share(unit[:1]) == 3  # alone: its own share
    assert gpu_check.unit_share(unit[:4]) == pytest.approx(3 * 1.25)
    # only neighbours side by side form a unit
    alone = gpu_check.Step("alone", ("x",), 1.0)
    units = gpu_check.step_units([alone, *unit[:2], alone, unit[2]])
    assert [[s.name for s in u] for u in units] == [
        ["alone"],
        ["s3", "s2"],
        ["alone"],
        ["s1.5"],
    ]


def test_step_timeouts_reuse_time_a_step_left_and_never_exceed_what_is_left():
    assert gpu_check.step_timeout(460, 3.0, 10.2) == pytest.approx(135.3, abs=0.1)
    assert gpu_check.step_timeout(100, 1.0, 1.0) == 100  # the last step gets all
    assert gpu_check.step_timeout(-5, 1.0, 2.0) == 0


# the bench transformer's sizes at the fake climb's batch (ladder.climb records them)
FAKE_SIZES = {**bench.GPU_SIZES["transformer"], "batch": 8}
FAKE_LADDER = [  # made up: what the ladder worker would write
    {
        "name": "eager fp32",
        "precision": "fp32",
        "fused": False,
        "compiled": False,
        "batch_scale": 1,
        "rung": "eager fp32",
        "batch": 8,
        "sizes": FAKE_SIZES,
        "step_ms": 100.0,
        "tokens_per_s": 81920.0,
        "tflops": 50.0,
        "mfu": 0.75,
        "mfu_vs_bf16_peak": 0.05,
        "peak_mem_bytes": 2**30,
    },
    {
        "name": "+ 2x batch",
        "precision": "bf16",
        "fused": True,
        "compiled": True,
        "batch_scale": 2,
        "rung": "+ 2x batch",
        "sizes": {**FAKE_SIZES, "batch": 16},
        "skipped": "no time left",
    },
]


FAKE_PROFILE = {  # made up: what the microbench worker would write on the H200
    "schema": 1,
    "device_name": "NVIDIA H200",
    "torch": "2.11.0",
    "date": "2026-12-06 12:00 UTC",
    "command": "python -m amp_lessons gpu-check",
    "gemm": [{"math": "bf16", "n": 8192, "seconds": 0.0016, "tflops": 700.0}],
    "attention": [
        {"math": "fp32", "shape": [16, 12, 1024, 64], "seconds": 0.002, "tflops": 30.0}
    ],
    "copy": [{"mib": 1024, "seconds": 0.00054, "gbs": 4000.0}],
    "kernel_us": 2.5,
    "cpu_us": 6.0,
    "step_split": [
        {
            "config": "transformer",
            "precision": "tf32",
            "groups": {"matmul": 60.0, "attention": 80.0, "optimizer": 2, "other": 20},
        }
    ],
}


class FakeRunner:
    """Stands in for the processes that would use the GPU: writes what each would."""

    def __init__(self, report, failed_tests=0, profile=None):
        self.report, self.failed_tests, self.limits = report, failed_tests, {}
        self.profile = FAKE_PROFILE if profile is None else profile

    def __call__(self, step, timeout_s):
        self.limits[step.name] = timeout_s
        if step.name == "bench":
            bench_results.save_results(self.report, step.output)
        elif step.name == "ladder":
            step.output.write_text(json.dumps(FAKE_LADDER))
        elif step.name == "microbench":
            step.output.write_text(json.dumps(self.profile))
        elif step.name == "wheels":
            pass
        elif step.name == "tests":
            cases = "".join(f'<testcase classname="t" name="p{i}"/>' for i in range(5))
            cases += "".join(
                f'<testcase classname="t" name="f{i}"><failure/></testcase>'
                for i in range(self.failed_tests)
            )
            step.output.write_text(
                f"<testsuites><testsuite>{cases}</testsuite></testsuites>"
            )
        else:
            step.output.parent.mkdir(parents=True, exist_ok=True)
            step.output.write_text("{}")
        return gr.StepResult(step.name, "ok", 0.1, timeout_s), []


def test_a_whole_check_with_fake_steps_writes_the_record_and_the_summary(
    fake_h200, tmp_path
):
    out = tmp_path / "results"
    runner = FakeRunner(synthetic_report())
    status = gpu_check.run_gpu_check(
        out, 480, "python -m amp_lessons gpu-check", runner, echo=lambda line: None
    )
    assert status == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "bench_h200.json",
        "executed",
        "gpu_check_h200.md",
        "gpu_profile_h200.json",
        "ladder_h200.json",
    ]
    assert json.loads((out / "gpu_profile_h200.json").read_text()) == FAKE_PROFILE
    ladder = json.loads((out / "ladder_h200.json").read_text())
    assert ladder["gpu"] == "NVIDIA H200" and ladder["rows"] == FAKE_LADDER
    page = (out / "gpu_check_h200.md").read_text()
    assert "## AMP at full speed: the ladder" in page
    eager = next(line for line in page.splitlines() if line.startswith("| eager fp32"))
    assert float(eager.split(" | ")[-1].rstrip(" |")) > 0  # the estimate, priced
    assert "could not price" not in page
    report = bench_results.load_results(out / "bench_h200.json")
    page = (out / "gpu_check_h200.md").read_text()
    gr.verify_summary(page, report, "bench_h200.json")
    assert "SYNTHETIC" in page and "5 passed, 0 failed" in page
    assert "1 GEMMs, 1 attentions, 1 copies, 1 step splits -> gpu_profile" in page
    assert "| 06_speed_memory | ok | 0 | `executed/06_speed_memory.ipynb` |" in page
    # each step finished at once, so each later step was offered more than its share
    assert sum(runner.limits.values()) > 480
    assert max(runner.limits.values()) <= 480 - gpu_check.RESERVE_S


class SlowLessons(FakeRunner):
    """Lessons side by side take a second each; counts how many ran at once."""

    def __init__(self, report):
        super().__init__(report)
        self.running = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, step, timeout_s):
        if not step.side_by_side:
            return super().__call__(step, timeout_s)
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(1.0)
        with self.lock:
            self.running -= 1
        return super().__call__(step, timeout_s)


def test_lessons_side_by_side_run_four_at_a_time_within_one_limit(
    fake_h200, tmp_path, monkeypatch
):
    runner = SlowLessons(synthetic_report())
    status = gpu_check.run_gpu_check(tmp_path / "a", 480, "cmd", runner, lambda l: 0)
    assert status == 0 and runner.most == gpu_check.LANES
    names = [f"lesson {name}" for name in gpu_check.plan.lesson_order()[:7]]
    first, later = names[: gpu_check.LANES], names[gpu_check.LANES :]
    limit = runner.limits[first[0]]
    # the first four start at once; the others when a lane frees, with what is left
    assert all(abs(runner.limits[n] - limit) < 0.5 for n in first)
    assert all(runner.limits[n] < limit - 0.5 for n in later)
    lines = (tmp_path / "a" / "gpu_check_h200.md").read_text().splitlines()
    steps = [line.split(" | ")[0][2:] for line in lines[lines.index("## Steps") :]]
    assert steps[8:15] == names  # the steps table (after its head): the plan's order
    table = lines.index("| lesson | result | seconds | executed copy |")
    lessons = [line.split(" | ")[0][2:] for line in lines[table + 2 : table + 17]]
    assert lessons == sorted(gpu_check.LESSONS)  # the lessons table: the course's
    # a lesson that would start with less than a step's minimum left is skipped
    monkeypatch.setattr(gpu_check.run, "MIN_STEP_S", limit - 0.5)
    runner = SlowLessons(synthetic_report())
    status = gpu_check.run_gpu_check(tmp_path / "b", 480, "cmd", runner, lambda l: 0)
    assert status == 1 and set(first) <= set(runner.limits)
    assert not set(later) & set(runner.limits)
    page = (tmp_path / "b" / "gpu_check_h200.md").read_text()
    for name in later:
        assert f"| {name} | skipped | 0 |" in page and "no time left" in page


def test_a_failing_test_or_goal_makes_the_exit_status_1(fake_h200, tmp_path):
    status = gpu_check.run_gpu_check(
        tmp_path / "a",
        480,
        "cmd",
        FakeRunner(synthetic_report(), failed_tests=1),
        echo=lambda line: None,
    )
    assert status == 1
    assert "5 passed, 1 failed" in (tmp_path / "a" / "gpu_check_h200.md").read_text()
    slow = synthetic_report(ms={("transformer", "bf16"): 60.0})
    assert (
        gpu_check.run_gpu_check(
            tmp_path / "b", 480, "cmd", FakeRunner(slow), echo=lambda line: None
        )
        == 1
    )


def test_a_profile_the_worker_broke_fails_its_step_and_is_not_recorded(
    fake_h200, tmp_path
):
    broken = dict(FAKE_PROFILE, kernel_us=0.0)
    status = gpu_check.run_gpu_check(
        tmp_path, 480, "cmd", FakeRunner(synthetic_report(), profile=broken), print
    )
    assert status == 1 and not (tmp_path / "gpu_profile_h200.json").exists()
    page = (tmp_path / "gpu_check_h200.md").read_text()
    assert "no profile: a GPU profile's rates and times must all be positive" in page


def test_a_profile_that_cannot_price_the_bench_still_leaves_the_summary(
    fake_h200, tmp_path, monkeypatch
):
    from amp_lessons.measure import estimate_check

    def broken(report, profile):
        raise RuntimeError("boom")

    monkeypatch.setattr(estimate_check, "profile_section", broken)
    status = gpu_check.run_gpu_check(
        tmp_path, 480, "cmd", FakeRunner(synthetic_report()), echo=lambda line: None
    )
    assert status == 0 and (tmp_path / "gpu_profile_h200.json").exists()
    page = (tmp_path / "gpu_check_h200.md").read_text()
    assert "could not be priced with this GPU's profile: RuntimeError('boom')" in page


def test_a_budget_too_small_skips_steps_but_still_writes_the_summary(
    fake_h200, tmp_path
):
    runner = FakeRunner(synthetic_report())
    status = gpu_check.run_gpu_check(tmp_path, 20, "cmd", runner, echo=lambda l: None)
    assert status == 1 and runner.limits == {}
    page = (tmp_path / "gpu_check_h200.md").read_text()
    # steps table: every step; lessons table: each lesson again
    assert page.count("no time left in the budget") == 5 + 2 * len(gpu_check.LESSONS)
    assert "No bench row was measured" in page and "| NO DATA" in page


# -- running a step --------------------------------------------------------------------


def test_a_step_past_its_limit_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); "
        "print('started', flush=True); time.sleep(60)"
    )
    step = gpu_check.Step("sleeper", (sys.executable, "-c", script), 1.0)
    start = time.perf_counter()
    result, lines = gpu_check.run_step(step, 3, echo=lambda line: None)
    assert result.status == "timed out" and "3 s limit" in result.detail
    assert time.perf_counter() - start < 20 and lines == ["started"]
    child = int(pid_file.read_text())
    for _ in range(50):  # the kill is sent; give the kernel a moment to reap it
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the step's child process outlived the step's time limit")


def test_a_step_past_its_limit_takes_down_children_in_sessions_of_their_own(tmp_path):
    """A notebook's kernel, and torchrun's ranks, start sessions of their own, out
    of the step's process group: they are found first and killed all the same."""
    psutil = pytest.importorskip("psutil")
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(60)'], start_new_session=True); "
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); "
        "print('started', flush=True); time.sleep(60)"
    )
    step = gpu_check.Step("sleeper", (sys.executable, "-c", script), 1.0)
    result, _ = gpu_check.run_step(step, 3, echo=lambda line: None)
    assert result.status == "timed out"
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        pytest.fail("a child in a session of its own outlived the step's time limit")


def test_on_a_gpu_in_exclusive_mode_every_step_runs_alone(
    fake_h200, tmp_path, monkeypatch
):
    class Counting(FakeRunner):
        running = most = 0
        lock = threading.Lock()

        def __call__(self, step, timeout_s):
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            time.sleep(0.2 if step.name.startswith("lesson 0") else 0)
            with self.lock:
                self.running -= 1
            return super().__call__(step, timeout_s)

    smi = tmp_path / "bin" / "nvidia-smi"  # what nvidia-smi says of such a GPU
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho Exclusive_Process\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    lines = []
    runner = Counting(synthetic_report())
    assert (
        gpu_check.run_gpu_check(tmp_path / "out", 480, "cmd", runner, lines.append) == 0
    )
    assert runner.most == 1 and any("exclusive compute mode" in ln for ln in lines)
    smi.write_text("#!/bin/sh\necho Default\n")
    runner = Counting(synthetic_report())
    gpu_check.run_gpu_check(tmp_path / "out2", 480, "cmd", runner, lambda l: 0)
    assert runner.most == gpu_check.LANES


def test_a_ladder_killed_at_its_limit_records_every_rung(fake_h200, tmp_path):
    class KilledLadder(FakeRunner):
        def __call__(self, step, timeout_s):
            if step.name != "ladder":
                return super().__call__(step, timeout_s)
            step.output.write_text(json.dumps(FAKE_LADDER[:1]))  # then killed
            return gr.StepResult(step.name, "timed out", timeout_s, timeout_s), []

    runner = KilledLadder(synthetic_report())
    assert gpu_check.run_gpu_check(tmp_path, 480, "cmd", runner, lambda l: 0) == 1
    rows = json.loads((tmp_path / "ladder_h200.json").read_text())["rows"]
    assert [r["rung"] for r in rows] == [r.name for r in ladder.RUNGS]
    assert rows[1]["skipped"] == "the ladder step's time limit ran out first"
    page = (tmp_path / "gpu_check_h200.md").read_text()
    assert page.count("not measured: the ladder step's time limit ran out") == 5


def test_a_step_whose_runner_raises_fails_alone(fake_h200, tmp_path):
    class Raising(FakeRunner):
        def __call__(self, step, timeout_s):
            if step.name == "lesson 02_underflow":  # side by side with others
                raise OSError("no such file")
            return super().__call__(step, timeout_s)

    runner = Raising(synthetic_report())
    assert gpu_check.run_gpu_check(tmp_path, 480, "cmd", runner, lambda l: 0) == 1
    page = (tmp_path / "gpu_check_h200.md").read_text()
    assert "| 02_underflow | failed: OSError('no such file') |" in page
    assert "| 03_loss_scaling | ok |" in page and "| ladder | ok |" in page


def test_a_step_knows_its_deadline_and_reports_its_exit_status():
    code = (
        f"import os, time; d = float(os.environ[{gpu_check.DEADLINE_ENV!r}]); "
        "print(round(d - time.time())); raise SystemExit(3)"
    )
    step = gpu_check.Step("x", (sys.executable, "-c", code), 1.0)
    result, lines = gpu_check.run_step(step, 100, echo=lambda line: None)
    assert result.status == "failed" and result.detail == "exit status 3"
    assert 100 - gpu_check.GRACE_S - 10 < int(lines[-1]) <= 100 - gpu_check.GRACE_S


def test_a_step_side_by_side_says_whose_each_line_is():
    step = gpu_check.Step(
        "lesson 01", (sys.executable, "-c", "print('ok')"), 1.0, side_by_side=True
    )
    echoed = []
    result, lines = gpu_check.run_step(step, 60, echo=echoed.append)
    assert result.status == "ok" and lines == ["ok"]
    assert echoed == ["    lesson 01: ok"]


# -- the bench, row by row -------------------------------------------------------------


def test_bench_rows_measures_each_row_and_reports_what_it_could_not(
    tmp_path, monkeypatch
):
    real = bench_results.bench_report

    def oom_on_transformer_fp32(device, configs, precisions, *args, **kwargs):
        if list(configs) == ["transformer"] and list(precisions) == ["fp32"]:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 GiB")
        return real(device, configs, precisions, *args, **kwargs)

    monkeypatch.setattr(bench_results, "bench_report", oom_on_transformer_fp32)
    partial = tmp_path / "bench.json"
    report = gpu_check.bench_rows(
        partial,
        ["mlp", "transformer"],
        ["fp32", "bf16", "fp8"],
        "python -m amp_lessons x",
        time.time() + 300,
        device="cpu",
        warmup=0,
        iters=1,
    )
    measured = [(r["config"], r["precision"]) for r in report["results"]]
    # fp8 is measured or skipped with a reason, once the fp8 lesson's bench has it
    assert [m for m in measured if m[1] != "fp8"] == [
        ("mlp", "fp32"),
        ("mlp", "bf16"),
        ("transformer", "bf16"),
    ]
    skipped = {(s["config"], s["precision"]): s for s in report["skipped"]}
    oom = skipped["transformer", "fp32"]
    assert oom["error"] and oom["reason"].startswith("CUDA out of memory")
    # on a CPU the bench's fp8 row says why it cannot run: not an error
    assert "compute capability 8.9" in skipped["mlp", "fp8"]["reason"]
    assert not skipped["mlp", "fp8"].get("error")
    rows = gr.index_rows(report)
    assert rows["mlp", "bf16"]["speedup_vs_fp32"] == pytest.approx(
        rows["mlp", "fp32"]["step_ms"] / rows["mlp", "bf16"]["step_ms"]
    )
    assert rows["transformer", "bf16"]["speedup_vs_fp32"] is None  # no fp32 row
    assert bench_results.load_results(partial)["results"] == report["results"]


def test_bench_rows_past_its_deadline_runs_nothing(tmp_path):
    partial = tmp_path / "bench.json"
    assert (
        gpu_check.bench_rows(partial, ["mlp"], ["fp32"], "x", time.time(), device="cpu")
        is None
    )
    assert not partial.exists()


# -- the lessons -----------------------------------------------------------------------


def lesson(tmp_path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_lesson_that_fails_an_assert_names_the_cell_and_keeps_its_outputs(tmp_path):
    src = lesson(
        tmp_path,
        "x = 1 + 1\nprint(x)",
        "assert x == 3, 'two is not three'",
        "print('never')",
    )
    clean = src.read_text()
    dest = tmp_path / "executed" / "lesson.ipynb"
    error = gpu_check.execute_lesson(src, dest, time.time() + 120)
    assert error == "cell 2 of 3: AssertionError: two is not three"
    ran = nbformat.read(dest, as_version=4)
    assert ran.cells[0].outputs[0]["text"] == "2\n"
    assert ran.cells[1].outputs[0]["output_type"] == "error"
    assert ran.cells[2].outputs == []
    assert src.read_text() == clean  # the lesson itself stays clean


def test_a_lesson_that_passes_returns_no_error_and_one_past_its_deadline_stops(
    tmp_path,
):
    src = lesson(tmp_path, "import os, sys\nprint(os.getcwd())\nprint(sys.executable)")
    assert gpu_check.execute_lesson(src, tmp_path / "ok.ipynb", time.time() + 120) == ""
    ran = nbformat.read(tmp_path / "ok.ipynb", as_version=4)
    # it runs beside the lesson (results/ resolves), in this Python (this venv)
    assert ran.cells[0].outputs[0]["text"].split() == [str(tmp_path), sys.executable]
    src = lesson(tmp_path, "import time\ntime.sleep(60)")
    start = time.perf_counter()
    error = gpu_check.execute_lesson(src, tmp_path / "slow.ipynb", time.time() + 3)
    assert error == "cell 1 of 1: the time limit ran out"
    assert time.perf_counter() - start < 45


# -- goals, on crafted numbers both ways -----------------------------------------------


def test_goals_pass_on_an_h200_that_meets_them():
    goals = gr.evaluate_goals(synthetic_report())
    assert [(g.status, g.required) for g in goals] == [
        ("PASS", True),
        ("PASS", True),
        ("PASS", True),
        ("PASS", False),
    ]
    assert [round(g.measured, 3) for g in goals] == [3.6, 1.6, 0.5, 1.1]
    assert all(g.met for g in goals)


def test_goals_fail_on_an_h200_that_misses_them():
    report = synthetic_report(
        ms={("transformer", "fp32"): 60.0, ("transformer", "tf32"): 30.0},
        peak={("transformer", "bf16"): 17 * GiB, ("mlp", "bf16"): 360 * MiB},
    )
    goals = gr.evaluate_goals(report)
    assert [g.status for g in goals] == ["FAIL", "FAIL", "FAIL", "FAIL"]
    assert [g.met for g in goals] == [False, False, False, True]  # the last: reported


def test_goal_thresholds_are_inclusive():
    at = synthetic_report(
        ms={("transformer", "fp32"): 75.0, ("transformer", "tf32"): 32.5},
        peak={("transformer", "fp32"): 20 * GiB, ("transformer", "bf16"): 13 * GiB},
    )  # 0.65 exactly
    assert [g.status for g in gr.evaluate_goals(at)][:3] == ["PASS"] * 3
    below = synthetic_report(
        ms={("transformer", "fp32"): 74.9, ("transformer", "tf32"): 32.4},
        peak={
            ("transformer", "fp32"): 20 * GiB,
            ("transformer", "bf16"): int(0.651 * 20 * GiB),
        },
    )
    assert [g.status for g in gr.evaluate_goals(below)][:3] == ["FAIL"] * 3


def test_speed_goals_are_for_h100_class_gpus_and_missing_rows_are_no_data():
    a100 = gr.evaluate_goals(synthetic_report(gpu="NVIDIA A100-SXM4-80GB"))
    assert [(g.status, g.required) for g in a100[:2]] == [("N/A", False)] * 2
    assert a100[2].status == "PASS" and a100[2].required  # memory: every GPU
    gone = gr.evaluate_goals(synthetic_report(drop={("transformer", "bf16")}))
    assert gone[0].status == gone[1].status == "NO DATA" and not gone[0].met
    assert "fp16" in gone[2].name and gone[2].status == "PASS"  # pre-Ampere: fp16


# -- test counts -----------------------------------------------------------------------


def test_test_counts_from_junit_and_from_a_cut_short_log(tmp_path):
    suite = ET.Element("testsuite")
    for name, child in (
        ("a", None),
        ("b", "failure"),
        ("c", "error"),
        ("d", "skipped"),
        ("e", None),
    ):
        case = ET.SubElement(suite, "testcase", classname="tests.test_x", name=name)
        if child:
            ET.SubElement(case, child)
    ET.ElementTree(suite).write(tmp_path / "j.xml")
    counts = gr.count_junit(tmp_path / "j.xml")
    assert (counts.passed, counts.failed, counts.errors, counts.skipped) == (2, 1, 1, 1)
    assert counts.failing == ("tests.test_x::b", "tests.test_x::c") and not counts.ok
    assert gr.count_junit(tmp_path / "missing.xml").source == "none"
    log = gr.count_log(
        [
            "tests/test_x.py::a PASSED [ 50%]",
            "tests/test_x.py::b FAILED [100%]",
            "noise",
        ]
    )
    assert (log.passed, log.failed, log.source) == (1, 1, "log")
    assert gr.TestCounts(passed=3, source="junit").ok
    assert not gr.TestCounts(source="junit").ok  # nothing ran is not a pass


# -- the summary and the validation of results -----------------------------------------


def test_summary_from_a_synthetic_report_shows_every_number_and_is_verified(tmp_path):
    report = synthetic_report()
    path = bench_results.save_results(report, tmp_path / "bench_h200.json")
    report = bench_results.load_results(path)
    steps = [
        gr.StepResult("bench", "ok", 40, 137, "8 rows"),
        gr.StepResult(
            "lesson 04_autocast",
            "failed",
            12,
            46,
            "cell 9 of 50: AssertionError: x",
            "executed/04.ipynb",
        ),
    ]
    page = gr.summary_markdown(
        report,
        path.name,
        gr.TestCounts(40, 0, 0, 2, source="junit"),
        steps,
        gr.evaluate_goals(report),
        {
            "gpu": "NVIDIA H200",
            "command": "cmd",
            "wall_s": 300,
            "budget_s": 480,
            "exit_status": 1,
            "date": report["date"],
        },
    )
    written = gpu_check.write_summary(page, tmp_path / "gpu_check_h200.md", report)
    text = written.read_text()
    assert text.startswith("# GPU check: NVIDIA H200\n") and "SYNTHETIC" in text
    assert (
        "| transformer: bf16 speed-up vs strict fp32 (TF32 off) | >= 3.0x on "
        "H100/H200 | 3.60x | PASS |"
    ) in text
    assert (
        "| transformer | bf16 | 25.00 | 3.60x | 1.60x | 12,288 | 0.50x | 400.0 | "
        "40.4% |" in text
    )
    assert "40 passed, 0 failed, 0 errors, 2 skipped, of 42" in text
    assert "| 04_autocast | failed: cell 9 of 50: AssertionError: x | 12 |" in text
    assert "Not measured: mlp fp8: synthetic" in text
    assert len(text.splitlines()) < 60  # one page
    gr.verify_summary(written, report, path.name)
    for edit in (("3.60x | 1.60x", "4.60x | 1.60x"), ("| PASS |", "| FAIL |")):
        with pytest.raises(ValueError, match="does not match"):
            gr.verify_summary(text.replace(*edit, 1), report, path.name)


def test_a_synthetic_report_is_refused_in_the_recorded_results():
    report = synthetic_report()
    dest = bench_results.RESULTS_DIR / "bench_synthetic_test.json"
    try:
        with pytest.raises(ValueError, match="synthetic"):
            bench_results.save_results(report, dest)
        with pytest.raises(ValueError, match="synthetic"):
            gpu_check.write_summary(
                "# x\n", bench_results.RESULTS_DIR / "gpu_check_x.md", report
            )
        assert not dest.exists()
        assert not (bench_results.RESULTS_DIR / "gpu_check_x.md").exists()
    finally:  # a broken refusal must not leave a synthetic file in the repo
        dest.unlink(missing_ok=True)
        (bench_results.RESULTS_DIR / "gpu_check_x.md").unlink(missing_ok=True)


def test_reading_recorded_results_checks_their_provenance(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_results, "RESULTS_DIR", tmp_path / "results")
    tmp_path = bench_results.RESULTS_DIR
    tmp_path.mkdir()
    real = {**synthetic_report(), "command": "python -m amp_lessons gpu-check"}
    del real["synthetic"]
    (tmp_path / "bench_h200.json").write_text(json.dumps(real))
    loaded = bench_results.load_results(tmp_path / "bench_h200.json")
    assert loaded["gpu"] == "NVIDIA H200"
    for change, message in (
        ({"synthetic": True}, "synthetic"),
        ({"device": "cpu", "gpu": None}, "CUDA GPU"),
        ({"date": "yesterday"}, "ISO date"),
        ({"command": "typed in"}, "does not name"),
    ):
        (tmp_path / "bench_h200.json").write_text(json.dumps({**real, **change}))
        with pytest.raises(ValueError, match=message):
            bench_results.recorded_results(tmp_path)
    # outside the recorded results a CPU or synthetic report is fine (tests, --json)
    bench_results.save_results({**real, "synthetic": True}, tmp_path.parent / "b.json")


def recorded_problems(folder: Path) -> list[str]:
    """What is wrong with the recorded results in a folder (empty: nothing)."""
    problems = []
    for path in sorted(folder.rglob("bench_*.json")):
        try:
            report = json.loads(path.read_text())
            bench_results.validate_report(report, path.name)
            bench_results.validate_recorded(report, path.name)
        except (ValueError, json.JSONDecodeError) as e:
            problems.append(str(e))
    for page in sorted(folder.glob("gpu_check_*.md")):
        if "SYNTHETIC" in page.read_text():
            problems.append(f"{page.name} is synthetic")
        json_file = page.name.replace("gpu_check_", "bench_").replace(".md", ".json")
        if not (folder / json_file).exists():
            problems.append(f"{page.name} has no {json_file} beside it")
            continue
        try:
            report = bench_results.load_results(folder / json_file)
            gr.verify_summary(page, report, json_file)
        except ValueError as e:
            problems.append(str(e))
    return problems


def test_no_committed_results_file_is_synthetic_or_unproven(tmp_path):
    assert recorded_problems(bench_results.RESULTS_DIR) == []
    # the same check on a folder holding a synthetic run finds it
    bench_results.save_results(synthetic_report(), tmp_path / "bench_h200.json")
    (tmp_path / "gpu_check_h200.md").write_text("> **SYNTHETIC**\n")
    problems = recorded_problems(tmp_path)
    assert any("synthetic report" in p for p in problems)
    assert "gpu_check_h200.md is synthetic" in problems


def test_checking_a_steps_modules_leaves_setuptools_importable():
    # importlib.util.find_spec("pip") switches setuptools' distutils shim off for
    # the process, and a later `import setuptools` (torch.compile's C++ build, as in
    # tests/test_ladder.py after a whole fake check here) fails: a fresh process
    # shows it. The check's own lookup must not do that.
    probe = (
        "import sys; from amp_lessons.tooling.gpu_check import run\n"
        "from amp_lessons.tooling.gpu_check.plan import Step\n"
        "step = Step('wheels', ('true',), 1.0, ('pip', 'no_such_module_here'))\n"
        "print(run._skipped(step, 100.0)[1])\n"
        "import setuptools  # the shim still on: setuptools' own distutils\n"
        "print(sys.modules['distutils'].__file__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    missing, distutils_file = done.stdout.splitlines()
    assert missing == "needs no_such_module_here: install them (make setup-dev)"
    assert "setuptools" in distutils_file
