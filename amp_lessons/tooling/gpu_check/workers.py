"""The GPU check's workers, one process per step:
``python -m amp_lessons.tooling.gpu_check bench-worker|lesson-worker`` (``plan`` writes
their command lines). Each stops itself before the deadline its step was given.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from amp_lessons.tooling.gpu_check.plan import CONFIGS, DEADLINE_ENV, WANTED_PRECISIONS


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


def ladder_rows(out: Path, deadline: float, device: str = "cuda") -> list[dict]:
    """Climb the ladder (`amp_lessons.measure.ladder`), rung by rung, stopping
    before ``deadline``; ``out`` holds the rows measured so far after each rung."""
    import json

    from amp_lessons.measure import ladder

    def save(rows: list[dict]) -> None:
        print(f"ladder: {rows[-1]['rung']}: {rows[-1].get('step_ms')}", flush=True)
        out.write_text(json.dumps(rows, indent=1))

    return ladder.climb(device, deadline=deadline - 20, on_row=save)


def microbench_profile(
    out: Path, command: str, device: str = "cuda", deadline: float | None = None
) -> dict:
    """Measure this GPU's profile (`amp_lessons.measure.microbench`) into ``out``,
    then the bench transformer's step split kernel group by kernel group
    (`amp_lessons.measure.step_profile`), saved after each precision, as far as
    ``deadline`` allows: the profile is kept if the splits run out of time."""
    import json

    from amp_lessons.core.output_files import write_atomically
    from amp_lessons.measure.microbench import measure_profile
    from amp_lessons.measure.step_profile import bench_splits

    def write(profile: dict) -> None:  # a kill mid-write must not lose the profile
        text = json.dumps(profile, indent=1)
        write_atomically(out, lambda f: f.write(text.encode()))

    profile = measure_profile(device, command)
    write(profile)
    print(
        f"microbench: {len(profile['gemm'])} GEMMs, "
        f"{len(profile['attention'])} attentions, {len(profile['copy'])} copies, "
        f"tiny kernel {profile['kernel_us']:.1f} us, issue {profile['cpu_us']:.1f} us",
        flush=True,
    )

    def save(splits: list[dict]) -> None:
        profile["step_split"] = splits
        write(profile)
        print(f"step split: {splits[-1]['precision']}", flush=True)

    bench_splits(device, deadline or deadline_from_env(), save)
    return profile


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
        # starts the kernel (recording no learner's progress: amp_lessons.teaching.
        # progress), runs every cell, shuts the kernel down
        client.execute(env={**os.environ, "AMP_LESSONS_PROGRESS": "off"})
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
    ladder = workers.add_parser("ladder-worker")
    ladder.add_argument("out", type=Path)
    ladder.add_argument("--device", default="cuda")
    micro = workers.add_parser("microbench-worker")
    micro.add_argument("out", type=Path)
    micro.add_argument("--command", default="")
    micro.add_argument("--device", default="cuda")
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
    if args.worker == "ladder-worker":
        rows = ladder_rows(args.out, deadline, args.device)
        return 0 if all("step_ms" in r for r in rows) else 1
    if args.worker == "microbench-worker":
        microbench_profile(args.out, args.command, args.device, deadline)
        return 0
    error = execute_lesson(args.src, args.dest, deadline)
    if error:
        print(f"LESSON FAILED: {error}", flush=True)
        return 1
    return 0
