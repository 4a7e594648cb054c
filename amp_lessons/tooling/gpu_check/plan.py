"""The GPU check's plan: its steps, their shares of the time budget, and the facts
of the GPU it runs on. Nothing here runs a step (``run`` does).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from amp_lessons.tooling import usable_cores
from amp_lessons.tooling.gpu_check import install_wheels

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = ROOT / "notebooks"
TESTS = ROOT / "tests"
# Every English lesson, and the Spanish edition's entry lesson and lesson 06 (the
# ones whose printed numbers come from this GPU): "es/NAME" is notebooks/es/NAME
LESSONS = tuple(
    sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    + ["es/00_amp_in_10_minutes", "es/06_speed_memory"]
)
# torchao for the GPU machine's torch, carried as a wheel (`make gpu-wheels`): no
# network there. Installed by the check into its own folder before the bench and
# lessons, which find it on PYTHONPATH (lesson 11's cross-check, the fp8 rows).
WHEELS_DIR = ROOT / "build" / "gpu-wheels"
WHEELS = ("torchao",)
# What runs the lessons (and the widget tests), which the GPU machine's image lacks
# (the run of 2026-12-04 carried them): `make gpu-wheels` downloads them with their
# dependencies for the image's Python (3.12) into the same folder, and the check
# installs each of those wheels whose distribution that Python lacks, so that what
# the image has (packaging, psutil, pygments, ...) stays in use.
RUNNER_WHEELS = ("nbclient", "nbformat", "ipykernel", "ipywidgets")
WANTED_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
CONFIGS = ("mlp", "transformer")

BUDGET_S = 480.0  # the 8 minutes on one H100/H200
# Kept back from the steps: the summary (< 1 s), killing a step that overruns its limit
# (up to 10 s) and the seconds of start-up (importing torch) before the clock starts.
RESERVE_S = 20.0
MIN_STEP_S = 10.0  # a step offered less than this is skipped, not started
GRACE_S = 5.0  # a worker stops itself this long before its hard limit
# Each step's share of the budget. A step that ends early leaves its time to the
# steps after it: each one gets remaining * share / (shares still to run).
# Each step's share is its expected seconds on an H100/H200 / 10 (the H200 run of
# 2026-12-04: tests 31 s, bench 40 s without fp8, lessons 00/04/06/07 6/14/46/14 s;
# the others guessed from their CPU times; microbench: about 10 s of kernels and
# three profiled steps of the bench transformer, each after two warm-up steps). The
# tests run second, after the few seconds of the wheels, so little time can be left
# to them: their share covers the 31 s measured plus the gpu tests added since, with
# a margin. The ladder comes last and uses what the others left: two torch.compile
# rungs are most of it.
# The bench's fp8 rows compile the model for each config (the MLP, the GPT) with
# torchao's Float8Linear: about 40 s more, a guess until a GPU run measures it. The
# wheels: the runner's 40 took 2-6 s to install on a 2-core machine; a step killed
# half-way would cost every lesson, so it gets a margin.
SHARES = {"tests": 4.0, "wheels": 2.0, "bench": 8.0, "microbench": 3.0, "ladder": 8.5}
LESSON_SHARE = 1.2  # no step gets under MIN_STEP_S (10 s) if all use theirs
LESSON_SHARES = {
    "02_underflow": 1.5,
    "03_loss_scaling": 1.5,
    "04_autocast": 1.4,
    "05_amp_loop": 2.0,
    # its GPU bench took 28 s of its 46 on the H200 at 25 steps a row; 13 now
    "06_speed_memory": 3.3,
    "07_clinic": 1.4,
    "09_amp_in_practice": 2.5,  # torch.compile
    "10_distributed_amp": 3.0,  # three torchrun launches
    "11_fp8": 2.0,
    "es/06_speed_memory": 3.3,
}
# Lessons that time nothing on the GPU (what they time, they time on the CPU, and
# they assert no speed-up) run side by side, LANES at a time, each given its share of
# the CPU's cores: one after another they would take about 110 s of the 460 (lesson
# 10's three torchrun launches the longest), side by side about 40 s. The lessons
# that measure the GPU (00's and 06's speed-ups, 07's and 08's matmuls, 09's compile,
# 11's fp8 step), the tests (their speed-ups), the bench, the microbench and the
# ladder run alone, so that no number they print is slowed by another process.
SIDE_BY_SIDE = (
    "00_welcome",
    "01_number_formats",
    "02_underflow",
    "03_loss_scaling",
    "04_autocast",
    "05_amp_loop",
    "10_distributed_amp",
)
LANES = 4
# Its torchrun ranks take one thread each (core.launch), unless an OMP_NUM_THREADS
# they inherit says otherwise: it is not given the lanes' share of the cores
OWN_THREADS = ("10_distributed_amp",)
# Lessons side by side share the GPU, the disk and the CPU's caches: a margin on
# the time their lanes would take alone (a guess, not a measurement)
SIDE_BY_SIDE_MARGIN = 1.25
DEADLINE_ENV = "AMP_LESSONS_DEADLINE"  # epoch seconds a worker must end by


class NoCudaError(RuntimeError):
    """gpu-check was asked for on a machine where torch sees no CUDA GPU."""


@dataclass(frozen=True)
class Step:
    """One process the check runs: what, its share of the budget, what it needs."""

    name: str
    command: tuple[str, ...]
    share: float
    needs: tuple[str, ...] = ()  # importable modules; missing ones skip the step
    output: Path | None = None  # the file it writes
    env: dict[str, str] = field(default_factory=dict)
    side_by_side: bool = False  # runs beside its neighbours that are too (LANES)


# ---------------------------------------------------------------------------
# The CUDA boundary and the plan
# ---------------------------------------------------------------------------


def gpu_info() -> dict | None:
    """The GPU this check would run on, or None where torch sees no CUDA.

    Example on an H200: ``{"name": "NVIDIA H200", "capability": (9, 0),
    "memory_bytes": 150_...}``, plus ``torch`` and ``cuda`` versions.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    return {
        "name": torch.cuda.get_device_name(0),
        "capability": tuple(torch.cuda.get_device_capability(0)),
        "memory_bytes": torch.cuda.get_device_properties(0).total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def refusal() -> str:
    """The one line printed where there is no CUDA GPU."""
    import torch

    why = (
        " (this torch is a CPU-only build)"
        if torch.version.cuda is None
        else f" (torch built for CUDA {torch.version.cuda})"
    )
    return (
        f"gpu-check needs a CUDA GPU and torch {torch.__version__} sees none{why}; "
        "nothing was run or written. Run it on a machine with an NVIDIA GPU "
        "(see notebooks/results/README.md)."
    )


def gpu_test_files(tests_dir: Path = TESTS) -> list[Path]:
    """The test files holding ``gpu``-marked tests: only these are collected, so a
    module that cannot import here (a missing browser, say) cannot stop the run."""
    return sorted(
        p for p in tests_dir.glob("test_*.py") if "pytest.mark.gpu" in p.read_text()
    )


def result_names(gpu_name: str) -> tuple[str, str]:
    """``("bench_h200.json", "gpu_check_h200.md")`` for ``"NVIDIA H200"``."""
    from amp_lessons.measure.bench_results import results_filename

    bench_file = results_filename(gpu_name)
    slug = bench_file.removeprefix("bench_").removesuffix(".json")
    return bench_file, f"gpu_check_{slug}.md"


def plan_steps(
    out_dir: Path,
    work_dir: Path,
    command: str = "python -m amp_lessons gpu-check",
    python: str = sys.executable,
    wheels_dir: Path | None = None,
) -> list[Step]:
    """Every step the check runs on this GPU, in order (nothing is run here).

    Example: ``[s.name for s in plan_steps(out, tmp)]`` -> ``["wheels", "tests",
    "bench", "microbench", "lesson 10_distributed_amp", ... (the lessons side by
    side, longest first), "lesson 00_amp_in_10_minutes", ...,
    "lesson es/06_speed_memory", "ladder"]``.
    """
    site = work_dir / "site"  # where the carried wheels are installed
    env = _worker_env(site)
    me = (python, "-m", "amp_lessons.tooling.gpu_check")
    return [
        # first: the tests import ipywidgets, which the GPU machine may only have
        # from the carried wheels
        _wheels_step(python, site, wheels_dir or WHEELS_DIR, env),
        _tests_step(python, work_dir, env),
        _bench_step(me, work_dir, command, env),
        Step(  # the estimate's constants, measured (amp_lessons.measure.microbench)
            "microbench",
            (
                *me,
                "microbench-worker",
                str(work_dir / "profile.json"),
                "--command",
                command,
            ),
            SHARES["microbench"],
            ("torch",),
            work_dir / "profile.json",
            env,
        ),
        *(_lesson_step(me, lesson, out_dir, env) for lesson in lesson_order()),
        Step(
            "ladder",
            (*me, "ladder-worker", str(work_dir / "ladder.json")),
            SHARES["ladder"],
            ("torch",),
            work_dir / "ladder.json",
            env,
        ),
    ]


def lesson_order() -> list[str]:
    """The lessons in the order they run: those side by side first, the longest
    first (each starts when a lane is free, so the longest must not start last)."""

    def key(lesson: str) -> tuple:
        alone = lesson not in SIDE_BY_SIDE
        return (alone, 0.0 if alone else -LESSON_SHARES.get(lesson, LESSON_SHARE))

    return sorted(LESSONS, key=key)  # stable: the others keep LESSONS' order


def step_units(steps: Sequence[Step]) -> list[list[Step]]:
    """The steps as the check runs them: each alone, but neighbours that run side by
    side together, as one unit."""
    units: list[list[Step]] = []
    for step in steps:
        if step.side_by_side and units and units[-1][-1].side_by_side:
            units[-1].append(step)
        else:
            units.append([step])
    return units


def unit_share(unit: Sequence[Step]) -> float:
    """A unit's share of the budget: a step's own; for steps side by side, the time
    their lanes take if each step takes its share, started in order as a lane frees
    (``SIDE_BY_SIDE_MARGIN`` more).

    Example: shares 3, 2, 1.5, 1.5, 1.4, 1.2, 1.2 on 4 lanes end at 3.2 (the lane of
    2, 1.2), so the unit's share is 3.2 x 1.25 = 4.0, where one after another they
    would take 11.8.
    """
    if len(unit) == 1:
        return unit[0].share
    lanes = [0.0] * LANES
    for step in unit:
        lanes[lanes.index(min(lanes))] += step.share
    return max(lanes) * SIDE_BY_SIDE_MARGIN


def carried_wheels(
    wheels_dir: Path | None = None, names: Sequence[str] = WHEELS + RUNNER_WHEELS
) -> dict[str, Path | None]:
    """Each named wheel found in the wheels folder (the newest), or None."""
    folder = Path(wheels_dir or WHEELS_DIR)
    found = {}
    for name in names:
        wheels = sorted(folder.glob(f"{name}-*.whl")) if folder.is_dir() else []
        found[name] = wheels[-1] if wheels else None
    return found


def wheels_to_install(wheels_dir: Path | None = None) -> list[Path]:
    """The carried wheels the check installs: torchao's always (the release paired
    with the GPU machine's torch), and every other one whose distribution this
    Python lacks (the lessons' runner and its dependencies)."""
    folder = Path(wheels_dir or WHEELS_DIR)
    chosen = [w for w in carried_wheels(folder, WHEELS).values() if w]
    others = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    for wheel in others:
        name = wheel.name.split("-")[0]  # a wheel's file name starts with its name
        if name not in WHEELS and not _has_distribution(name):
            chosen.append(wheel)
    return chosen


def _has_distribution(name: str) -> bool:
    """Whether this Python has the distribution ``name`` installed (its metadata
    found on sys.path, under any spelling of the name: jupyter_client or -client)."""
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def plan_problems(steps: Sequence[Step], wheels_dir: Path | None = None) -> list[str]:
    """What the check would lack on a GPU machine, found here (empty: all there):
    a lesson's notebook, the gpu tests, a carried wheel."""
    problems = []
    for step in steps:
        if step.name.startswith("lesson ") and not Path(step.command[-2]).is_file():
            problems.append(f"{step.name}: no notebook at {step.command[-2]}")
    if not gpu_test_files():
        problems.append("tests: no test file holds a gpu-marked test")
    for name, wheel in carried_wheels(wheels_dir).items():
        if wheel is None:
            problems.append(
                f"wheels: no {name} wheel in {Path(wheels_dir or WHEELS_DIR)} (the GPU "
                "machine has no network): run `make gpu-wheels` here first"
            )
    return problems


def _wheels_step(python: str, site: Path, wheels_dir: Path, env: dict) -> Step:
    """The carried wheels installed into `site` (``install_wheels``, run as a
    script): the lessons' runner where this Python lacks it, then torchao's; a
    missing torchao wheel fails the step, saying how to fetch it."""
    torchao = carried_wheels(wheels_dir, WHEELS)["torchao"]
    runner = [str(w) for w in wheels_to_install(wheels_dir) if w != torchao]
    return Step(
        "wheels",
        (
            python,
            str(Path(install_wheels.__file__)),
            str(site),
            "--runner",
            *runner,
            *(("--torchao", str(torchao)) if torchao else ()),
        ),
        SHARES["wheels"],
        (),  # no pip needed: without it the wheels are unpacked
        site,
        env,
    )


def _worker_env(site: Path) -> dict[str, str]:
    """What each step's process adds to the environment: this checkout first on
    PYTHONPATH, so a worker imports the package under test, installed or not, then
    the folder the carried wheels go to."""
    return {
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), str(site), os.environ.get("PYTHONPATH", "")) if p
        )
    }


def _bench_step(
    me: tuple[str, ...], work_dir: Path, command: str, env: dict[str, str]
) -> Step:
    """The bench worker, which rewrites ``bench.json`` in `work_dir` after each row."""
    return Step(
        "bench",
        (
            *me,
            "bench-worker",
            str(work_dir / "bench.json"),
            "--command",
            command,
            "--configs",
            *CONFIGS,
            "--precisions",
            *WANTED_PRECISIONS,
        ),
        SHARES["bench"],
        ("torch",),
        work_dir / "bench.json",
        env,
    )


def _tests_step(python: str, work_dir: Path, env: dict[str, str]) -> Step:
    """pytest on the gpu-marked tests, counted afterwards from its junit file."""
    junit = work_dir / "junit.xml"
    return Step(
        "tests",
        (
            python,
            "-m",
            "pytest",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu",
            "-v",
            "-rfE",
            "--continue-on-collection-errors",
            f"--junitxml={junit}",
            *map(str, gpu_test_files()),
        ),
        SHARES["tests"],
        ("pytest",),
        junit,
        env,
    )


def _lesson_step(
    me: tuple[str, ...], lesson: str, out_dir: Path, env: dict[str, str]
) -> Step:
    """The lesson worker for one notebook ("es/NAME": the Spanish one); its executed
    copy goes to `out_dir`/executed/ (executed/es/ for the Spanish ones)."""
    src = NOTEBOOKS / f"{lesson}.ipynb"
    dest = out_dir / "executed" / f"{lesson}.ipynb"
    side_by_side = lesson in SIDE_BY_SIDE
    if side_by_side and lesson not in OWN_THREADS:  # its share of the cores
        env = {**env, "OMP_NUM_THREADS": str(max(1, usable_cores() // LANES))}
    return Step(
        f"lesson {lesson}",
        (*me, "lesson-worker", str(src), str(dest)),
        LESSON_SHARES.get(lesson, LESSON_SHARE),
        ("nbclient", "nbformat", "ipykernel", "ipywidgets"),
        dest,
        env,
        side_by_side,
    )


def step_timeout(remaining_s: float, share: float, shares_left: float) -> float:
    """A step's time limit: its share of the time left (the reserve already taken off).

    Example: with 460 s left and shares 3 of 10.2 still to run, the bench gets 135 s.
    """
    return max(0.0, remaining_s) * share / shares_left


def format_plan(steps: Sequence[Step], budget_s: float = BUDGET_S) -> str:
    """The plan as lines: each step, its time limit if all before it use theirs
    (steps side by side share theirs)."""
    lines, left, n = [], budget_s - RESERVE_S, 0
    units = step_units(steps)
    for i, unit in enumerate(units):
        limit = step_timeout(left, unit_share(unit), sum(map(unit_share, units[i:])))
        left -= limit
        together = (
            f", side by side with {len(unit) - 1} others, {LANES} at a time"
            if len(unit) > 1
            else ""
        )
        for step in unit:
            n += 1
            lines.append(
                f"{n}. {step.name} (at most {limit:.0f} s{together}): "
                + " ".join(step.command)
            )
    return "\n".join(lines)
