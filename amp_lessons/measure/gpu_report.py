"""What a GPU check showed: its goals judged PASS/FAIL and its one-page summary.

``amp_lessons.tooling.gpu_check`` runs the steps on a GPU; this module turns what they
left (a bench report, a pytest junit file, the executed lessons) into
``notebooks/results/gpu_check_<gpu>.md``. Every number on that page is read from the
bench report saved beside it (``bench_section`` rebuilds its table from the JSON, so a
hand-edited page is caught by ``verify_summary``), or counted from the test run.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# The goals for the transformer config on an H100/H200: bf16 at least 3x
# strict fp32 (TF32 off) and 1.3x TF32; AMP peak memory at least 35% lower.
SPEEDUP_VS_FP32 = 3.0
SPEEDUP_VS_TF32 = 1.3
PEAK_RATIO_MAX = 0.65
H100_CLASS = re.compile(r"H100|H200")

PASS, FAIL, NO_DATA, NOT_APPLICABLE = "PASS", "FAIL", "NO DATA", "N/A"


@dataclass(frozen=True)
class Goal:
    """One goal: what was measured against what target, and the verdict."""

    name: str
    target: str
    measured: float | None
    status: str  # PASS, FAIL, NO DATA or N/A
    required: bool  # a required goal that is not PASS fails the whole check
    note: str = ""

    @property
    def met(self) -> bool:
        return self.status == PASS or not self.required


@dataclass(frozen=True)
class TestCounts:
    """Outcome of ``pytest -m gpu``; ``source`` says where the counts were read."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failing: tuple[str, ...] = ()
    source: str = "none"  # "junit", "log" (the run was cut short) or "none"

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped

    @property
    def ok(self) -> bool:
        return (
            self.source != "none"
            and self.failed == self.errors == 0
            and (self.passed > 0)
        )


@dataclass(frozen=True)
class StepResult:
    """How one step of the check ended."""

    name: str
    status: str  # "ok", "failed", "timed out" or "skipped"
    seconds: float
    timeout_s: float
    detail: str = ""
    output: str | None = None  # the file it wrote, relative to the results folder

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ---------------------------------------------------------------------------
# Goals
# ---------------------------------------------------------------------------


def index_rows(report: dict) -> dict[tuple[str, str], dict]:
    """``{(config, precision): row}`` of a bench report."""
    return {(r["config"], r["precision"]): r for r in report.get("results", [])}


def amp_precision(rows: dict[tuple[str, str], dict], config: str) -> str:
    """bf16 where it was measured (Ampere and newer), else fp16."""
    return "bf16" if (config, "bf16") in rows else "fp16"


def evaluate_goals(report: dict) -> list[Goal]:
    """Judge a bench report against the course's GPU goals.

    Example: transformer fp32 90 ms, tf32 40 ms, bf16 25 ms on an "NVIDIA H200" give
    3.6x vs fp32 (PASS, >= 3x) and 1.6x vs TF32 (PASS, >= 1.3x).
    """
    rows = index_rows(report)
    gpu = report.get("gpu") or report.get("device_name") or ""
    hopper = bool(H100_CLASS.search(gpu))
    amp = amp_precision(rows, "transformer")
    goals = [
        _speed_goal(
            rows,
            "fp32",
            SPEEDUP_VS_FP32,
            hopper,
            gpu,
            "transformer: bf16 speed-up vs strict fp32 (TF32 off)",
        ),
        _speed_goal(
            rows,
            "tf32",
            SPEEDUP_VS_TF32,
            hopper,
            gpu,
            "transformer: bf16 speed-up vs TF32",
        ),
    ]
    ratio = _peak_ratio(rows, "transformer", amp)
    goals.append(
        _judge(
            f"transformer (activation-heavy): {amp} AMP peak memory vs fp32",
            f"<= {PEAK_RATIO_MAX:.2f}x ({100 * (1 - PEAK_RATIO_MAX):.0f}% lower)",
            ratio,
            None if ratio is None else ratio <= PEAK_RATIO_MAX,
            required=True,
        )
    )
    mlp_amp = amp_precision(rows, "mlp")
    ratio = _peak_ratio(rows, "mlp", mlp_amp)
    goals.append(
        _judge(
            f"mlp (weight-heavy): {mlp_amp} AMP peak memory vs fp32, expected to RISE",
            "> 1.00x (reported, not required)",
            ratio,
            None if ratio is None else ratio > 1,
            required=False,
            note="autocast keeps low-precision copies of the fp32 weights",
        )
    )
    return goals


def _speed_goal(
    rows, base: str, threshold: float, hopper: bool, gpu: str, name: str
) -> Goal:
    bf16, ref = rows.get(("transformer", "bf16")), rows.get(("transformer", base))
    measured = ref["step_ms"] / bf16["step_ms"] if bf16 and ref else None
    target = f">= {threshold:.1f}x on H100/H200"
    if not hopper:
        return Goal(
            name,
            target,
            measured,
            NOT_APPLICABLE,
            False,
            f"the target is for H100/H200; this GPU is {gpu or 'unknown'}",
        )
    return _judge(
        name,
        target,
        measured,
        None if measured is None else measured >= threshold,
        required=True,
    )


def _peak_ratio(rows, config: str, precision: str) -> float | None:
    row = rows.get((config, precision))
    ref = rows.get((config, "fp32"))
    if (
        not row
        or not ref
        or not row.get("peak_mem_bytes")
        or not ref.get("peak_mem_bytes")
    ):
        return None
    return row["peak_mem_bytes"] / ref["peak_mem_bytes"]


def _judge(name, target, measured, passed, required, note="") -> Goal:
    if passed is None:
        return Goal(
            name,
            target,
            None,
            NO_DATA,
            required,
            note or "a row it needs was not measured (see the bench table)",
        )
    return Goal(name, target, measured, PASS if passed else FAIL, required, note)


# ---------------------------------------------------------------------------
# Test counts
# ---------------------------------------------------------------------------


def count_junit(path: str | Path) -> TestCounts:
    """Counts from a pytest ``--junitxml`` file; ``source="none"`` if it is missing.

    Example: a file with 3 passing tests and 1 failing one gives
    ``TestCounts(passed=3, failed=1, failing=("tests/test_x.py::test_y",), ...)``.
    """
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return TestCounts()
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failing = []
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if "error" in kinds:
            counts["errors"] += 1
            failing.append(name)
        elif "failure" in kinds:
            counts["failed"] += 1
            failing.append(name)
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return TestCounts(**counts, failing=tuple(failing), source="junit")


_VERBOSE_LINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)")


def count_log(lines: Iterable[str]) -> TestCounts:
    """Counts from ``pytest -v`` lines, for a run cut short before its junit file.

    Example: ``count_log(["tests/a.py::t PASSED [ 50%]"]).passed == 1``.
    """
    counts = {"PASSED": 0, "FAILED": 0, "ERROR": 0, "SKIPPED": 0}
    failing = []
    for line in lines:
        m = _VERBOSE_LINE.match(line.strip())
        if m:
            counts[m.group(2)] += 1
            if m.group(2) in ("FAILED", "ERROR"):
                failing.append(m.group(1))
    if not any(counts.values()):
        return TestCounts()
    return TestCounts(
        counts["PASSED"],
        counts["FAILED"],
        counts["ERROR"],
        counts["SKIPPED"],
        tuple(failing),
        source="log",
    )


# ---------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------


def ratio_text(value: float | None) -> str:
    """A ratio as a table shows it: ``2.71x``, or ``-`` where none was measured."""
    return "-" if value is None else f"{value:.2f}x"


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f}"


def bench_section(report: dict, filename: str) -> str:
    """The summary's speed and memory table, rebuilt from the bench report alone.

    Example first row: ``| mlp | fp32 | 3.10 | 1.00x | 0.31x | 1,050 | 1.00x | 44.2 |
    66.0% |``.
    """
    rows = index_rows(report)
    lines = [f"## Speed and memory (`{filename}`)", ""]
    for config, sizes in report.get("sizes", {}).items():
        lines.append(f"- {config}: " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    lines += [
        f"- {report.get('warmup')} warm-up + {report.get('iters')} timed steps, "
        "median step time; peak = `torch.cuda.max_memory_allocated`",
        "",
        "| config | precision | step ms | vs fp32 | vs TF32 | peak MiB | "
        "peak vs fp32 | TFLOP/s | MFU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.get("results", []):
        tf32 = rows.get((r["config"], "tf32"))
        vs_tf32 = tf32["step_ms"] / r["step_ms"] if tf32 else None
        mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        lines.append(
            f"| {r['config']} | {r['precision']} | {r['step_ms']:.2f} | "
            f"{ratio_text(r.get('speedup_vs_fp32'))} | {ratio_text(vs_tf32)} | "
            f"{_mib(r.get('peak_mem_bytes'))} | "
            f"{ratio_text(r.get('peak_mem_ratio_vs_fp32'))} | "
            f"{r['tflops']:.1f} | {mfu} |"
        )
    for skip in report.get("skipped", []):
        where = f"{skip['config']} " if skip.get("config") else ""
        lines.append(f"\nNot measured: {where}{skip['precision']}: {skip['reason']}")
    return "\n".join(lines)


def summary_markdown(
    report: dict | None,
    bench_file: str | None,
    tests: TestCounts,
    steps: Sequence[StepResult],
    goals: Sequence[Goal],
    context: dict,
) -> str:
    """The one-page summary of a GPU check, as Markdown.

    ``context`` holds what the report does not: ``gpu``, ``command``, ``date``,
    ``wall_s``, ``budget_s``, ``exit_status``.
    """
    r = report or {}
    lines = [f"# GPU check: {context['gpu']}", ""]
    if r.get("synthetic"):
        lines += [
            "> **SYNTHETIC**: made-up numbers written by a test, never a "
            "measurement. Such a file is refused in `notebooks/results/`.",
            "",
        ]
    lines += [_run_line(r, context), "", *_goals_table(goals), ""]
    if report:
        lines.append(bench_section(report, bench_file or "?"))
        from amp_lessons.measure.estimate_check import estimate_section

        beside = estimate_section(report)
        lines += ["", beside] if beside else []
    else:
        lines.append("## Speed and memory\n\nNo bench row was measured (see Steps).")
    lines += ["", "## Tests: `pytest -m gpu`", "", _tests_line(tests)]
    lines += _lessons_table(steps) + _steps_table(steps)
    return "\n".join(lines) + "\n"


def _run_line(r: dict, context: dict) -> str:
    """Who ran the check, when, on what (GPU, torch, CUDA), for how long, and how it
    ended; the report's versions, else the context's."""
    return (
        f"Run by `{context['command']}` on {context['date']}: {context['gpu']}"
        + (
            f", compute capability {r['compute_capability']}"
            if r.get("compute_capability")
            else ""
        )
        + f"; torch {r.get('torch', context.get('torch', '?'))}, CUDA "
        f"{r.get('cuda', context.get('cuda', '?'))}. It took "
        f"{context['wall_s']:.0f} s of its {context['budget_s']:.0f} s budget; "
        f"exit status {context['exit_status']}."
    )


def _goals_table(goals: Sequence[Goal]) -> list[str]:
    lines = [
        "## Goals",
        "",
        "| goal | target | measured | result |",
        "|---|---|---:|---|",
    ]
    for g in goals:
        verdict = g.status + (
            "" if g.required or g.status == NOT_APPLICABLE else " (reported)"
        )
        note = f" ({g.note})" if g.note and g.status != PASS else ""
        lines.append(
            f"| {g.name} | {g.target} | {ratio_text(g.measured)} | {verdict}{note} |"
        )
    return lines


def _lessons_table(steps: Sequence[StepResult]) -> list[str]:
    """The executed lessons' rows, after a blank line; none without a lesson."""
    lessons = [s for s in steps if s.name.startswith("lesson ")]
    if not lessons:
        return []
    lines = [
        "",
        "## Lessons executed on the GPU, asserts included",
        "",
        "| lesson | result | seconds | executed copy |",
        "|---|---|---:|---|",
    ]
    # in the course's order (the English lessons, then the Spanish ones), whatever
    # order they ran in (some run side by side)
    for s in sorted(lessons, key=lambda s: (s.name.startswith("lesson es/"), s.name)):
        copy = f"`{s.output}`" if s.output else "-"
        detail = f": {s.detail}" if s.detail and not s.ok else ""
        lines.append(
            f"| {s.name.removeprefix('lesson ')} | {s.status}{detail} | "
            f"{s.seconds:.0f} | {copy} |"
        )
    return lines


def _steps_table(steps: Sequence[StepResult]) -> list[str]:
    lines = [
        "",
        "## Steps",
        "",
        "| step | result | seconds | time limit | detail |",
        "|---|---|---:|---:|---|",
    ]
    for s in steps:
        lines.append(
            f"| {s.name} | {s.status} | {s.seconds:.0f} | {s.timeout_s:.0f} | "
            f"{s.detail.replace('|', '/')} |"
        )
    return lines


def _tests_line(t: TestCounts) -> str:
    if t.source == "none":
        return "No test result was recorded (see Steps)."
    line = (
        f"{t.passed} passed, {t.failed} failed, {t.errors} errors, {t.skipped} "
        f"skipped, of {t.total}"
    )
    if t.source == "log":
        line += " (the run was cut short: counted from its log)"
    if t.failing:
        line += "\n\nFailing: " + ", ".join(f"`{n}`" for n in t.failing)
    return line


def verify_summary(summary: str | Path, report: dict, bench_file: str) -> None:
    """Check a summary page shows exactly its bench report's table; raise if not.

    Example: ``verify_summary("gpu_check_h200.md", load_results("bench_h200.json"),
    "bench_h200.json")``.
    """
    text = Path(summary).read_text() if isinstance(summary, Path) else summary
    if bench_section(report, bench_file) not in text:
        raise ValueError(
            f"the summary's speed and memory table does not match "
            f"{bench_file}: regenerate it with `python -m amp_lessons "
            "gpu-check` instead of editing it"
        )
    for goal in evaluate_goals(report):
        row = f"| {goal.name} | {goal.target} | {ratio_text(goal.measured)} |"
        if f"{row} {goal.status}" not in text:
            raise ValueError(
                f"the summary's goal {goal.name!r} does not match {bench_file}"
            )
