"""The whole GPU proof in one run: ``python -m amp_lessons gpu-check`` (make gpu-check).

On a CUDA machine, within one time budget (8 minutes by default, sized for one
H100/H200), each step runs in its own process under its own time limit, so a step that
hangs or runs out of memory costs its share of the budget and nothing more:

1. **wheels**: the carried wheels (``make gpu-wheels``: torchao, and the lessons'
   runner where this Python lacks it) installed into the check's own folder, on
   every later step's path;
2. **tests**: every ``gpu``-marked test (``pytest -m gpu``, counted from a junit file);
3. **bench**: the recipe's MLP (3 x Linear 4096, batch 512: weight-heavy) and the GPT
   (12 x 768, T=1024: activation-heavy) in fp32, tf32, fp16, bf16 and fp8, one row at
   a time, so a CUDA OOM or an unsupported dtype ends that row only;
   -> ``notebooks/results/bench_<gpu>.json``, provenance included;
4. **microbench**: the estimate's constants measured on this GPU
   -> ``gpu_profile_<gpu>.json``;
5. **lessons**: every English lesson and the Spanish 00 and 06 executed on the GPU,
   asserts included, those that time nothing on the GPU side by side (``LANES`` at a
   time); the executed copies go to ``notebooks/results/executed/``;
6. **ladder**: AMP at full speed, one switch more a rung -> ``ladder_<gpu>.json``;
7. **the summary** ``notebooks/results/gpu_check_<gpu>.md`` (written by
   ``amp_lessons.measure.gpu_report``): speed-ups, memory ratios, MFU, tests, the
   ladder, and the goals judged PASS/FAIL.

Without CUDA it prints one line and exits with status 2 in seconds, writing nothing.
Exit status 0 means every step ran, every test passed and every required goal passed;
1 means something did not (the summary says what).

Course tooling, not measurement: it runs the test suite (pytest) and executes lessons;
what it measures and reports comes from ``amp_lessons.measure`` (``bench``,
``bench_results``, ``gpu_report``).
"""

from amp_lessons.tooling.gpu_check.plan import (
    BUDGET_S,
    CONFIGS,
    DEADLINE_ENV,
    GRACE_S,
    LANES,
    LESSONS,
    MIN_STEP_S,
    RESERVE_S,
    RUNNER_WHEELS,
    SHARES,
    SIDE_BY_SIDE,
    WANTED_PRECISIONS,
    WHEELS_DIR,
    NoCudaError,
    Step,
    carried_wheels,
    format_plan,
    gpu_info,
    gpu_test_files,
    plan_problems,
    plan_steps,
    refusal,
    result_names,
    step_timeout,
    step_units,
    unit_share,
    wheels_to_install,
)
from amp_lessons.tooling.gpu_check.run import run_gpu_check, run_step, write_summary
from amp_lessons.tooling.gpu_check.workers import (
    bench_rows,
    deadline_from_env,
    execute_lesson,
)

__all__ = [
    "BUDGET_S",
    "CONFIGS",
    "DEADLINE_ENV",
    "GRACE_S",
    "LANES",
    "LESSONS",
    "MIN_STEP_S",
    "RESERVE_S",
    "RUNNER_WHEELS",
    "SHARES",
    "SIDE_BY_SIDE",
    "WANTED_PRECISIONS",
    "WHEELS_DIR",
    "NoCudaError",
    "Step",
    "carried_wheels",
    "bench_rows",
    "deadline_from_env",
    "execute_lesson",
    "format_plan",
    "gpu_info",
    "gpu_test_files",
    "plan_problems",
    "plan_steps",
    "refusal",
    "result_names",
    "run_gpu_check",
    "run_step",
    "step_timeout",
    "step_units",
    "unit_share",
    "wheels_to_install",
    "write_summary",
]
