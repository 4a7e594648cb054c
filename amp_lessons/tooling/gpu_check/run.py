"""Running the GPU check: each step in its own process under its own time limit, then
the results files and the one-page summary (``amp_lessons.measure.gpu_report``).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from amp_lessons.measure import gpu_report as gr
from amp_lessons.tooling.gpu_check.plan import (
    BUDGET_S,
    DEADLINE_ENV,
    GRACE_S,
    LANES,
    MIN_STEP_S,
    RESERVE_S,
    ROOT,
    NoCudaError,
    Step,
    gpu_info,
    plan_steps,
    refusal,
    result_names,
    step_timeout,
    step_units,
    unit_share,
)

# ---------------------------------------------------------------------------
# Running a step
# ---------------------------------------------------------------------------


def say(line: str) -> None:
    """Print one line in one write: steps side by side print from several threads,
    and ``print`` writes a line and its newline apart, so two lines could mix."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_step(
    step: Step, timeout_s: float, echo: Callable[[str], None] = say
) -> tuple[gr.StepResult, list[str]]:
    """Run one step's process under a hard time limit; its lines are echoed live.

    The process gets its own session, so a timeout kills it and its children
    together, and then the descendants that started sessions of their own (a
    notebook's kernel, torchrun's ranks). Returns the result and the last 400 lines.
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

    # steps side by side print at once: each line says whose it is
    prefix = f"    {step.name}: " if step.side_by_side else "    "

    def pump():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            echo(f"{prefix}{line.rstrip()}")

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
    # a notebook's kernel, and torchrun's ranks, start sessions of their own, out of
    # reach of the step's process group: found first, killed after it
    descendants = _descendants(proc.pid)
    _kill_group(proc)
    for child in descendants:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - gone already, or not ours to kill
            pass


def _descendants(pid: int) -> list:
    """The processes ``pid`` started, and theirs (psutil's, where it is installed:
    the GPU machine's image has it)."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - no psutil, or the process is gone
        return []


def _kill_group(proc: subprocess.Popen) -> None:
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
    echo: Callable[[str], None] = say,
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
        if _exclusive_gpu():
            alone = "the GPU takes one process at a time (exclusive compute mode)"
            echo(f"{alone}: every step runs alone")
            steps = [replace(s, side_by_side=False) for s in steps]
        outcome = _run_steps(check, steps, runner, echo)
    return _write_outcome(check, outcome, echo)


def _exclusive_gpu() -> bool:
    """Whether the GPU lets one process at a time use it (an administrator's
    Exclusive_Process compute mode): steps side by side would then fail to start on
    it. False where nvidia-smi cannot say."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_mode", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return "exclusive" in done.stdout.lower()


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
    ladder: dict | None = None  # the ladder's record, once a rung is measured
    profile: dict | None = None  # the GPU's profile (microbench), once measured


def _run_steps(
    check: _Check, steps: list[Step], runner: Callable, echo: Callable[[str], None]
) -> _Outcome:
    """Run the steps in order, each under its share of the time still left; steps
    side by side run together, ``LANES`` at a time, within their unit's share."""
    outcome = _Outcome()
    units = step_units(steps)
    counters = {s.name: f"[{i + 1}/{len(steps)}] {s.name}" for i, s in enumerate(steps)}
    for i, unit in enumerate(units):
        left = check.budget_s - RESERVE_S - (time.monotonic() - check.start)
        limit = step_timeout(left, unit_share(unit), sum(map(unit_share, units[i:])))
        one = partial(
            _run_one,
            check,
            deadline=time.monotonic() + limit,
            runner=runner,
            outcome=outcome,
            echo=echo,
            counters=counters,
        )
        if len(unit) == 1:
            outcome.results.append(one(unit[0]))
            continue
        echo(f"{len(unit)} steps side by side, {LANES} at a time, {limit:.0f} s")
        with ThreadPoolExecutor(max_workers=LANES) as pool:
            outcome.results.extend(pool.map(one, unit))  # in the plan's order
    return outcome


def _run_one(
    check: _Check,
    step: Step,
    deadline: float,
    runner: Callable,
    outcome: _Outcome,
    echo: Callable[[str], None],
    counters: dict[str, str],
) -> gr.StepResult:
    """Run one step until ``deadline`` (``time.monotonic()``), or skip it; its
    result. A step side by side starts when a lane is free, with what is left."""
    limit = max(0.0, deadline - time.monotonic())
    counter = counters[step.name]
    skipped = _skipped(step, limit)
    if skipped:
        result, why = skipped
        echo(f"{counter}: skipped, {why}")
        return result
    echo(f"{counter} (at most {limit:.0f} s)")
    try:
        result, lines = runner(step, limit)
        result = _finish_step(check, step, result, lines, outcome, echo)
    except Exception as e:  # noqa: BLE001 - one step's failure, not the check's
        seconds = limit - max(0.0, deadline - time.monotonic())
        result = gr.StepResult(step.name, "failed", seconds, limit, repr(e))
    echo(
        f"    -> {step.name + ': ' if step.side_by_side else ''}{result.status} in "
        f"{result.seconds:.0f} s" + (f": {result.detail}" if result.detail else "")
    )
    return result


def _installed(module: str, step: Step) -> bool:
    """Whether a top-level ``module`` is on the step's path (its PYTHONPATH, where
    the carried wheels went, then ``sys.path``), found without importing it.

    Not ``importlib.util.find_spec``: asked for "pip", setuptools' distutils shim
    (a ``sys.meta_path`` finder) switches itself off for the rest of the process,
    and a later ``import setuptools`` (``torch.compile``'s C++ build does one) then
    fails on Python < 3.12. ``PathFinder`` searches the path past that shim.
    """
    extra = step.env.get("PYTHONPATH", "").split(os.pathsep)
    path = [p for p in extra if p] + sys.path
    return importlib.machinery.PathFinder.find_spec(module, path) is not None


def _skipped(step: Step, limit: float) -> tuple[gr.StepResult, str] | None:
    """The result of a step that will not start and why, as the log says it; None
    for a step that runs. A missing module is named first: no time would fix it."""
    missing = [m for m in step.needs if not _installed(m, step)]
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
    if step.name == "ladder":
        outcome.ladder, result = _finish_ladder(check, step, result)
        return result
    if step.name == "microbench":
        outcome.profile, result = _finish_microbench(check, step, result)
        return result
    if step.name == "wheels":
        return result if result.status == "ok" else _with(result, _last(lines))
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
    if outcome.ladder:
        page = page.rstrip("\n") + "\n\n" + ladder_section(outcome.ladder) + "\n"
    beside = (
        _profile_text(report, outcome.profile) if outcome.profile and report else ""
    )
    if beside:
        page = page.rstrip("\n") + "\n\n" + beside
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


def _finish_ladder(check: _Check, step: Step, result: gr.StepResult):
    """The ladder's rows, recorded with their provenance beside the bench's record
    (``ladder_h200.json``); None where no rung was written."""
    from amp_lessons.measure.ladder import rows_not_reached

    try:
        rows = json.loads(step.output.read_text())
    except (OSError, json.JSONDecodeError):
        return None, _with(result, result.detail or "no rung was measured", "failed")
    if result.status == "timed out":  # the rung it was on, and any after it
        rows += rows_not_reached(rows, "the ladder step's time limit ran out first")
    record = {
        "gpu": check.info["name"],
        "torch": check.info["torch"],
        "cuda": check.info["cuda"],
        "date": _now(),
        "command": check.command,
        "rows": rows,
    }
    dest = check.out_dir / check.bench_file.replace("bench_", "ladder_", 1)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=1))
    measured = [r for r in rows if "step_ms" in r]
    detail = f"{len(measured)} of {len(rows)} rungs -> {dest.name}"
    if result.detail:
        detail = f"{result.detail}; {detail}"
    return record, _with(result, detail, output=dest.name)


def _finish_microbench(check: _Check, step: Step, result: gr.StepResult):
    """The GPU's profile, recorded beside the bench's record
    (``gpu_profile_h200.json``); None where the worker wrote none or a broken one."""
    from amp_lessons.measure.microbench import check_profile, profile_filename

    try:
        profile = json.loads(step.output.read_text())
        check_profile(profile)
    except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
        detail = "; ".join(d for d in (result.detail, f"no profile: {e}") if d)
        return None, _with(result, detail, "failed")
    dest = check.out_dir / profile_filename(check.info["name"])
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(profile, indent=1))
    detail = (
        f"{len(profile['gemm'])} GEMMs, {len(profile.get('attention', []))} "
        f"attentions, {len(profile['copy'])} copies, "
        f"{len(profile.get('step_split', []))} step splits -> {dest.name}"
    )
    if result.detail:
        detail = f"{result.detail}; {detail}"
    return profile, _with(result, detail, output=dest.name)


def _profile_text(report: dict, profile: dict) -> str:
    """The profile's table for the summary page, or one line saying why there is
    none: pricing with it must not cost the page (the profile is recorded anyway)."""
    from amp_lessons.measure.estimate_check import profile_section

    try:
        section = profile_section(report, profile)
    except Exception as e:  # noqa: BLE001 - the summary is written whatever happens
        return f"The estimate could not be priced with this GPU's profile: {e!r}\n"
    return section + "\n" if section else ""


def ladder_section(record: dict) -> str:
    """The summary page's ladder: provenance, then the table, with the estimate's
    time of each rung (``ladder_estimate``; left out, and said, where pricing
    fails: it must not cost the page)."""
    from amp_lessons.measure.ladder import format_ladder
    from amp_lessons.measure.ladder_estimate import record_estimates

    try:
        estimates, why = record_estimates(record), ""
    except Exception as e:  # noqa: BLE001 - the summary is written whatever happens
        estimates, why = None, f" The estimate could not price the rungs: {e!r}."
    return (
        "## AMP at full speed: the ladder\n\n"
        f"The bench's transformer on {record['gpu']}, torch {record['torch']}, "
        "one switch more a row (`amp_lessons.measure.ladder`); speed-up in "
        "tokens a second; MFU against the dense peak of the row's precision and "
        "of bf16; the estimate's time of each rung, priced with the fitted "
        "efficiencies, not this run's profile (`amp_lessons.measure."
        "ladder_estimate`; a compiled rung as `amp_lessons.measure.inductor_fusion` "
        f"models Inductor's fusion).{why}\n\n"
        + format_ladder(record["rows"], estimates)
    )


def _last(lines: list[str]) -> str:
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


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
