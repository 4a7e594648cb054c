"""The whole GPU proof in one run: ``python -m amp_lessons gpu-check`` (make gpu-check).

On a CUDA machine, within one time budget (8 minutes by default, sized for one
H100/H200), each step runs in its own process under its own time limit, so a step that
hangs or runs out of memory costs its share of the budget and nothing more:

1. **bench**: the recipe's MLP (3 x Linear 4096, batch 512: weight-heavy) and the GPT
   (12 x 768, T=1024: activation-heavy) in fp32, tf32, fp16, bf16 and fp8 where the
   bench has it, one row at a time, so a CUDA OOM or an unsupported dtype ends that row
   only; -> ``notebooks/results/bench_<gpu>.json``, provenance included;
2. **tests**: every ``gpu``-marked test (``pytest -m gpu``, counted from a junit file);
3. **lessons** 00, 04, 06 and 07 executed on the GPU, asserts included; the executed
   copies go to ``notebooks/results/executed/``, the lessons themselves stay clean;
4. **the summary** ``notebooks/results/gpu_check_<gpu>.md`` (written by
   ``amp_lessons.measure.gpu_report``): speed-ups, memory ratios, MFU, tests, and the
   goals judged PASS/FAIL.

Without CUDA it prints one line and exits with status 2 in seconds, writing nothing.
Exit status 0 means every step ran, every test passed and every required goal passed;
1 means something did not (the summary says what).

Course tooling, not measurement: it runs the test suite (pytest) and executes lessons;
what it measures and reports comes from ``amp_lessons.measure`` (``bench``,
``bench_results``, ``gpu_report``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from amp_lessons.measure import gpu_report as gr

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
TESTS = ROOT / "tests"
LESSONS = ("00_welcome", "04_autocast", "06_speed_memory", "07_clinic")
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
SHARES = {
    "bench": 3.0,
    "tests": 2.2,
    "lesson 00_welcome": 0.5,
    "lesson 04_autocast": 1.0,
    "lesson 06_speed_memory": 2.3,
    "lesson 07_clinic": 1.2,
}
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
) -> list[Step]:
    """Every step the check runs on this GPU, in order (nothing is run here).

    Example: ``[s.name for s in plan_steps(out, tmp)]`` -> ``["bench", "tests",
    "lesson 00_welcome", "lesson 04_autocast", "lesson 06_speed_memory",
    "lesson 07_clinic"]``.
    """
    env = _worker_env()
    me = (python, "-m", "amp_lessons.tooling.gpu_check")
    return [
        _bench_step(me, work_dir, command, env),
        _tests_step(python, work_dir, env),
        *(_lesson_step(me, lesson, out_dir, env) for lesson in LESSONS),
    ]


def _worker_env() -> dict[str, str]:
    """What each step's process adds to the environment: this checkout first on
    PYTHONPATH, so a worker imports the package under test, installed or not."""
    return {
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
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
    """The lesson worker for one notebook; its executed copy goes to `out_dir`."""
    src = NOTEBOOKS / f"{lesson}.ipynb"
    dest = out_dir / "executed" / f"{lesson}.ipynb"
    return Step(
        f"lesson {lesson}",
        (*me, "lesson-worker", str(src), str(dest)),
        SHARES[f"lesson {lesson}"],
        ("nbclient", "nbformat", "ipykernel", "ipywidgets"),
        dest,
        env,
    )


def step_timeout(remaining_s: float, share: float, shares_left: float) -> float:
    """A step's time limit: its share of the time left (the reserve already taken off).

    Example: with 460 s left and shares 3 of 10.2 still to run, the bench gets 135 s.
    """
    return max(0.0, remaining_s) * share / shares_left


def format_plan(steps: Sequence[Step], budget_s: float = BUDGET_S) -> str:
    """The plan as lines: each step, its time limit if all before it use theirs."""
    lines, left = [], budget_s - RESERVE_S
    for i, step in enumerate(steps):
        limit = step_timeout(left, step.share, sum(s.share for s in steps[i:]))
        left -= limit
        lines.append(
            f"{i + 1}. {step.name} (at most {limit:.0f} s): " + " ".join(step.command)
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Running a step
# ---------------------------------------------------------------------------


def run_step(
    step: Step, timeout_s: float, echo: Callable[[str], None] = print
) -> tuple[gr.StepResult, list[str]]:
    """Run one step's process under a hard time limit; its lines are echoed live.

    The process gets its own session, so a timeout kills it and its children (a
    notebook's kernel) together. Returns the result and the last 400 lines.
    """
    deadline = time.time() + timeout_s - GRACE_S
    env = {
        **os.environ,
        **step.env,
        DEADLINE_ENV: str(deadline),
        "PYTHONUNBUFFERED": "1",
    }
    start = time.monotonic()
    proc = subprocess.Popen(
        step.command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    lines: deque[str] = deque(maxlen=400)

    def pump():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            echo(f"    {line.rstrip()}")

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout_s)
        status = "ok" if rc == 0 else "failed"
        detail = "" if rc == 0 else f"exit status {rc}"
    except subprocess.TimeoutExpired:
        _kill(proc)
        status, detail = "timed out", f"killed after its {timeout_s:.0f} s limit"
    reader.join(timeout=5)
    seconds = time.monotonic() - start
    return gr.StepResult(step.name, status, seconds, timeout_s, detail), list(lines)


def _kill(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------------------
# The whole check
# ---------------------------------------------------------------------------


def run_gpu_check(
    out_dir: str | os.PathLike | None = None,
    budget_s: float = BUDGET_S,
    command: str = "python -m amp_lessons gpu-check",
    runner: Callable = run_step,
    echo: Callable[[str], None] = print,
) -> int:
    """Run every step on this machine's GPU and write the results; the exit status.

    Raises NoCudaError, before anything is written, where torch sees no CUDA GPU.
    Example: ``run_gpu_check()`` on an H200 writes ``bench_h200.json``,
    ``gpu_check_h200.md`` and ``executed/*.ipynb`` into ``notebooks/results/`` and
    returns 0 if all passed.
    """
    start = time.monotonic()
    info = gpu_info()
    if info is None:
        raise NoCudaError(refusal())
    from amp_lessons.measure import bench_results

    out_dir = Path(out_dir) if out_dir is not None else bench_results.RESULTS_DIR
    bench_file, summary_file = result_names(info["name"])
    check = _Check(info, command, budget_s, start, out_dir, bench_file, summary_file)
    echo(
        f"gpu-check on {info['name']} (compute capability "
        f"{'.'.join(map(str, info['capability']))}, "
        f"{info['memory_bytes'] / 2**30:.0f} GiB), torch {info['torch']}, CUDA "
        f"{info['cuda']}; budget {budget_s:.0f} s; results -> {out_dir}"
    )
    with tempfile.TemporaryDirectory(prefix="amp_gpu_check_") as tmp:
        steps = plan_steps(out_dir, Path(tmp), command)
        outcome = _run_steps(check, steps, runner, echo)
    return _write_outcome(check, outcome, echo)


@dataclass(frozen=True)
class _Check:
    """What one check knows before its first step: the GPU, the command that ran it,
    its budget and start (``time.monotonic()``), and where its results go."""

    info: dict
    command: str
    budget_s: float
    start: float
    out_dir: Path
    bench_file: str
    summary_file: str


@dataclass
class _Outcome:
    """What the steps left for the summary: each step's result, the bench's report
    (None until a row is measured) and the gpu tests' counts."""

    results: list[gr.StepResult] = field(default_factory=list)
    report: dict | None = None
    tests: gr.TestCounts = field(default_factory=gr.TestCounts)


def _run_steps(
    check: _Check, steps: list[Step], runner: Callable, echo: Callable[[str], None]
) -> _Outcome:
    """Run the steps in order, each under its share of the time still left."""
    outcome = _Outcome()
    for i, step in enumerate(steps):
        left = check.budget_s - RESERVE_S - (time.monotonic() - check.start)
        limit = step_timeout(left, step.share, sum(s.share for s in steps[i:]))
        counter = f"[{i + 1}/{len(steps)}] {step.name}"
        skipped = _skipped(step, limit)
        if skipped:
            result, why = skipped
            outcome.results.append(result)
            echo(f"{counter}: skipped, {why}")
            continue
        echo(f"{counter} (at most {limit:.0f} s)")
        result, lines = runner(step, limit)
        result = _finish_step(check, step, result, lines, outcome, echo)
        echo(
            f"    -> {result.status} in {result.seconds:.0f} s"
            + (f": {result.detail}" if result.detail else "")
        )
        outcome.results.append(result)
    return outcome


def _skipped(step: Step, limit: float) -> tuple[gr.StepResult, str] | None:
    """The result of a step that will not start and why, as the log says it; None
    for a step that runs. A missing module is named first: no time would fix it."""
    missing = [m for m in step.needs if importlib.util.find_spec(m) is None]
    if missing:
        detail = f"needs {', '.join(missing)}: install them (make setup-dev)"
        return gr.StepResult(step.name, "skipped", 0, limit, detail), detail
    if limit < MIN_STEP_S:
        detail = "no time left in the budget"
        return gr.StepResult(step.name, "skipped", 0, limit, detail), "no time left"
    return None


def _finish_step(
    check: _Check,
    step: Step,
    result: gr.StepResult,
    lines: list[str],
    outcome: _Outcome,
    echo: Callable[[str], None],
) -> gr.StepResult:
    """Read what a step that ran left behind into `outcome`; its final result."""
    if step.name == "bench":
        dest = check.out_dir / check.bench_file
        outcome.report, result = _finish_bench(step, result, dest, echo)
        return result
    if step.name == "tests":
        tests = gr.count_junit(step.output)
        if tests.source == "none":  # no junit file: count pytest's own lines
            tests = gr.count_log(lines)
        outcome.tests = tests
        result = _with(result, _tests_detail(tests, result))
        if result.status == "ok" and not tests.ok:
            result = _with(result, result.detail, "failed")
        return result
    return _finish_lesson(step, result, lines, check.out_dir)


def _write_outcome(
    check: _Check, outcome: _Outcome, echo: Callable[[str], None]
) -> int:
    """Judge the goals, write the summary page and return the exit status: 0 only
    if every step ran, every test passed and every goal was met."""
    report = outcome.report
    goals = gr.evaluate_goals(report or {})
    exit_status = (
        0
        if (
            all(r.ok for r in outcome.results)
            and outcome.tests.ok
            and all(g.met for g in goals)
        )
        else 1
    )
    context = {
        "gpu": check.info["name"],
        "command": check.command,
        "torch": check.info["torch"],
        "cuda": check.info["cuda"],
        "wall_s": time.monotonic() - check.start,
        "budget_s": check.budget_s,
        "exit_status": exit_status,
        "date": (report or {}).get("date") or _now(),
    }
    page = gr.summary_markdown(
        report,
        check.bench_file if report else None,
        outcome.tests,
        outcome.results,
        goals,
        context,
    )
    summary = check.out_dir / check.summary_file
    write_summary(page, summary, report or {})
    for g in goals:
        measured = gr.ratio_text(g.measured)
        echo(f"goal {g.status:7s} {g.name}: {measured} (target {g.target})")
    echo(f"wrote {summary}; exit status {exit_status}")
    return exit_status


def write_summary(page: str, path: Path, report: dict) -> Path:
    """Write the summary page, refusing a synthetic one in the recorded results."""
    from amp_lessons.measure.bench_results import validate_destination

    validate_destination(report, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


def _finish_bench(step, result, dest: Path, echo):
    from amp_lessons.measure.bench import format_table
    from amp_lessons.measure.bench_results import save_results

    try:
        report = json.loads(step.output.read_text())
    except (OSError, json.JSONDecodeError):
        detail = "; ".join(d for d in (result.detail, "no bench row was measured") if d)
        return None, _with(result, detail, "failed")
    echo(format_table(report["results"]))
    for skip in report.get("skipped", []):
        echo(
            f"not measured: {skip.get('config', '')} {skip['precision']}: "
            f"{skip['reason']}"
        )
    save_results(report, dest)
    # an OOM, a crash or no time, as opposed to a dtype this GPU or bench lacks
    failed = [s for s in report.get("skipped", []) if s.get("error")]
    detail = "; ".join(
        d
        for d in (
            result.detail,
            f"{len(report['results'])} rows -> {dest.name}",
            f"{len(failed)} rows failed" if failed else "",
        )
        if d
    )
    status = "failed" if failed and result.status == "ok" else result.status
    return report, _with(result, detail, status, dest.name)


def _finish_lesson(step, result, lines, out_dir: Path):
    failure = next(
        (
            ln.removeprefix("LESSON FAILED: ")
            for ln in reversed(lines)
            if ln.startswith("LESSON FAILED: ")
        ),
        "",
    )
    output = str(step.output.relative_to(out_dir)) if step.output.exists() else None
    return _with(result, failure or result.detail, output=output)


def _tests_detail(t: gr.TestCounts, result) -> str:
    if t.source == "none":
        return result.detail or "no test result was recorded"
    text = (
        f"{t.passed} passed, {t.failed} failed, {t.errors} errors, {t.skipped} skipped"
    )
    return f"{result.detail}; {text}" if result.status == "timed out" else text


def _with(
    result: gr.StepResult,
    detail: str,
    status: str | None = None,
    output: str | None = None,
) -> gr.StepResult:
    return gr.StepResult(
        result.name,
        status or result.status,
        result.seconds,
        result.timeout_s,
        detail,
        output or result.output,
    )


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------
# The workers: one process per step
# ---------------------------------------------------------------------------


def deadline_from_env(default_s: float = 600.0) -> float:
    """The epoch time a worker must finish by (set by ``run_step``)."""
    value = os.environ.get(DEADLINE_ENV)
    return float(value) if value else time.time() + default_s


def bench_rows(
    partial: Path,
    configs: Sequence[str],
    precisions: Sequence[str],
    command: str,
    deadline: float,
    device: str = "cuda",
    sizes: dict | None = None,
    warmup: int | None = None,
    iters: int | None = None,
    row_margin_s: float = 15.0,
) -> dict | None:
    """Bench each (config, precision) row on its own; rewrite ``partial`` after each.

    A CUDA OOM, an unsupported dtype or a missing precision ends that row only and is
    listed in ``skipped`` with its reason (``error: True`` for failures). Rows not
    started ``row_margin_s`` before ``deadline`` are listed as not run. Returns the
    report (None if no row was measured).
    Example: ``bench_rows(Path("b.json"), ["mlp"], ["fp32", "bf16"], "cmd", t + 60,
    device="cpu")["results"][1]["speedup_vs_fp32"]``.
    """
    from amp_lessons.measure.bench_fp8 import BENCH_PRECISIONS
    from amp_lessons.measure.bench_results import bench_report

    def bench(configs: Sequence[str], precisions: Sequence[str]) -> dict:
        # looked up at each call: a test swaps bench_results.bench_report for a fake
        return bench_report(
            device, configs, precisions, sizes, warmup, iters, command=command
        )

    report = bench(configs, [])  # provenance, no rows yet
    known = list(BENCH_PRECISIONS)  # fp8 too: skipped with its reason where it
    # cannot run (before compute capability 8.9, without torchao)
    rows, skipped = [], []
    for config in configs:
        for precision in precisions:
            why = _why_not_run(precision, known, deadline - row_margin_s)
            if why:
                skipped.append({"config": config, "precision": precision, **why})
                continue
            print(f"bench {config} {precision} ...", flush=True)
            measured, skips = _bench_row(bench, config, precision)
            rows += measured
            skipped += skips
            _save_partial(report, rows, skipped, partial)
    return report if rows else None


def _why_not_run(precision: str, known: list[str], start_by: float) -> dict | None:
    """Why a row is not started, as its skip entry's fields: a precision this bench
    lacks, or past `start_by` (epoch s; ``error: True``, the check ran short of
    time); None to run it."""
    if precision not in known:
        return {
            "reason": f"this version of the bench has no "
            f"{precision} precision (it has {', '.join(known)})"
        }
    if time.time() > start_by:
        return {"reason": "not run: the bench's time limit was spent", "error": True}
    return None


def _bench_row(
    bench: Callable[[Sequence[str], Sequence[str]], dict], config: str, precision: str
) -> tuple[list[dict], list[dict]]:
    """One row's measured results and skip entries. A CUDA OOM or an error ends this
    row only: one skip entry with ``error: True``, and its memory goes back first."""
    import torch

    try:
        one = bench([config], [precision])
    except torch.OutOfMemoryError as e:
        reason = "CUDA out of memory: " + str(e).splitlines()[0]
    except (RuntimeError, TypeError, NotImplementedError) as e:
        reason = f"{type(e).__name__}: " + (str(e).splitlines() or [""])[0]
    else:
        return one["results"], [{"config": config, **s} for s in one["skipped"]]
    if torch.cuda.is_available():  # the failed row's tensors, back to the GPU
        gc.collect()
        torch.cuda.empty_cache()
    return [], [
        {"config": config, "precision": precision, "reason": reason, "error": True}
    ]


def _save_partial(report, rows, skipped, partial) -> None:
    from amp_lessons.measure.bench import add_ratios
    from amp_lessons.measure.bench_results import save_results

    report["results"] = add_ratios([dict(r) for r in rows])
    report["skipped"] = skipped
    if rows:
        save_results(report, partial)


def execute_lesson(src: Path, dest: Path, deadline: float) -> str:
    """Run a lesson top to bottom with this Python's kernel; write the executed copy.

    Each cell may run until ``deadline``. Returns "" on success, else one line naming
    the failing cell. The copy is written either way, so a failure can be read there.
    Example: ``execute_lesson(Path("notebooks/00_welcome.ipynb"), Path("out.ipynb"),
    time.time() + 60)`` -> ``""``.
    """
    import ipykernel.kernelspec
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError
    from traitlets import default

    class ThisPython(KernelSpecManager):  # "python3" is this venv's Python, always
        def get_kernel_spec(self, kernel_name):
            return self.kernel_spec_class(
                resource_dir=ipykernel.kernelspec.RESOURCES,
                **ipykernel.kernelspec.get_kernel_dict(),
            )

    class ThisPythonKernel(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _this_python(self):
            return ThisPython(data_dir=self.data_dir)

    nb = nbformat.read(src, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        kernel_manager_class=ThisPythonKernel,
        timeout_func=lambda cell: max(1, int(deadline - time.time())),
        startup_timeout=60,
        resources={"metadata": {"path": str(src.parent)}},
    )
    error = ""
    try:
        client.execute()  # starts the kernel, runs every cell, shuts the kernel down
    except CellTimeoutError:
        error = f"{_failing_cell(nb)}: the time limit ran out"
    except CellExecutionError as e:
        error = f"{_failing_cell(nb)}: {e.ename}: {str(e.evalue).splitlines()[0]}"
    finally:
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, dest)
    return error


def _failing_cell(nb) -> str:
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    for i in code:
        if any(o.get("output_type") == "error" for o in nb.cells[i].get("outputs", [])):
            return f"cell {i + 1} of {len(nb.cells)}"
    for i in code:  # a timeout: the first cell that never finished
        if nb.cells[i].get("execution_count") is None:
            return f"cell {i + 1} of {len(nb.cells)}"
    return "a cell"


def main(argv: Sequence[str] | None = None) -> int:
    """The workers' command line (the check itself is ``python -m amp_lessons
    gpu-check``)."""
    parser = argparse.ArgumentParser(prog="python -m amp_lessons.tooling.gpu_check")
    workers = parser.add_subparsers(dest="worker", required=True)
    b = workers.add_parser("bench-worker")
    b.add_argument("partial", type=Path)
    b.add_argument("--command", required=True)
    b.add_argument("--configs", nargs="+", default=list(CONFIGS))
    b.add_argument("--precisions", nargs="+", default=list(WANTED_PRECISIONS))
    b.add_argument("--device", default="cuda")
    n = workers.add_parser("lesson-worker")
    n.add_argument("src", type=Path)
    n.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    deadline = deadline_from_env()
    if args.worker == "bench-worker":
        report = bench_rows(
            args.partial,
            args.configs,
            args.precisions,
            args.command,
            deadline,
            args.device,
        )
        return 0 if report else 1
    error = execute_lesson(args.src, args.dest, deadline)
    if error:
        print(f"LESSON FAILED: {error}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
