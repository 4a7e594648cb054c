"""Lesson 10's torchrun launches, run again and again while a busy loop loads the cores.

A launch that fails only on a loaded machine (issue 21: a rank died with SIGABRT,
``terminate called without an active exception``, while another job ran) needs many
tries under load to show up. This runs each distinct launch the notebook makes N times
in a row with ``--busy-cores`` cores kept busy: child processes spin on the cores that
other work leaves idle (none under `make test`'s two workers), for at most the run's
length (always killed at the end), and prints, per launch kind, the runs, the failures
and the failing ranks' own error lines. Exit status 1 on any failure.

A test harness, not course tooling: tests/test_launch_stress.py runs it briefly, and a
longer run is by hand, from the repository's root::

    python tests/launch_stress.py --launches 20 --busy-cores 1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import tempfile
import time
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

COMMON = ["--device", "cpu", "--batch-size", "64", "--log-every", "5"]


def launch_kinds(work: Path) -> dict[str, tuple[list[str], str]]:
    """Every distinct launch of notebook 10: name -> (arguments, module)."""
    from amp_lessons.core.distributed import fsdp2_unsupported_reason

    mode = "ddp" if fsdp2_unsupported_reason("cpu") else "fsdp2"
    return {
        # cell "One process per device": DDP fp32 with a DCP checkpoint (resumed in 1)
        "ddp_checkpoint": (
            [
                "train",
                *COMMON,
                "--distributed",
                "ddp",
                "--precision",
                "fp32",
                "--steps",
                "10",
                "--checkpoint",
                str(work / "run.dcp"),
                "--json",
                str(work / "ddp.json"),
            ],
            "amp_lessons",
        ),
        f"{mode}_fp16": (
            [
                "train",
                *COMMON,
                "--distributed",
                mode,
                "--precision",
                "fp16",
                "--steps",
                "20",
                "--init-scale",
                str(2.0**24),
                "--json",
                str(work / "fp16.json"),
            ],
            "amp_lessons",
        ),
        "rank_memory": (
            ["--json", str(work / "memory.json")],
            "amp_lessons.teaching.rank_memory",
        ),
    }


def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


def cores_in_use(seconds: float = 1.0) -> float:
    """How many cores' worth of CPU time the whole machine used over ``seconds``
    (Linux's /proc/stat; elsewhere 0: as if idle)."""

    def busy_and_total() -> tuple[int, int]:
        ticks = [int(t) for t in Path("/proc/stat").read_text().split()[1:9]]
        return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # minus idle, iowait

    try:
        busy0, total0 = busy_and_total()
        time.sleep(seconds)
        busy1, total1 = busy_and_total()
    except OSError:
        return 0.0
    return (os.cpu_count() or 1) * (busy1 - busy0) / max(total1 - total0, 1)


def spinners_needed(cores: int) -> int:
    """Spinning processes that keep ``cores`` cores busy beside what already runs."""
    return max(0, cores - round(cores_in_use()))


@contextmanager
def busy(cores: int, seconds: float):
    """``cores`` processes spinning for at most ``seconds``, killed when the block
    ends."""
    deadline = time.monotonic() + seconds
    spawn = mp.get_context("spawn")
    procs = [
        spawn.Process(target=_spin, args=(deadline,), daemon=True) for _ in range(cores)
    ]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.join()


def error_lines(output: str) -> list[str]:
    """The ranks' own error lines of a failed launch (torchrun's summary left out)."""
    lines = [
        line
        for line in output.splitlines()
        if "elastic" not in line
        and "ChildFailed" not in line
        and re.search(r"Error|error:|terminate|what\(\)|Abort|Signal|exitcode", line)
    ]
    return list(dict.fromkeys(lines))


def stress(
    launches: int,
    busy_cores: int,
    kinds: Sequence[str] | None = None,
    timeout: float = 180,
    verbose: bool = False,
) -> list[dict]:
    """Run each launch kind ``launches`` times under load; one dict per kind."""
    from amp_lessons.core.distributed import launch

    results = []
    with tempfile.TemporaryDirectory(prefix="launch-stress-") as tmp:
        table = launch_kinds(Path(tmp))
        for name, (args, module) in table.items():
            if kinds and name not in kinds:
                continue
            failures, errors, seconds = 0, [], 0.0
            with busy(spinners_needed(busy_cores), launches * timeout):
                for i in range(launches):
                    t0 = time.perf_counter()
                    try:
                        run = launch(
                            args,
                            nproc=2,
                            timeout=timeout,
                            module=module,
                            stream=print if verbose else None,
                        )
                        output = run.output  # an abort at exit may still exit 0
                        failed = run.returncode != 0 or "terminate called" in output
                    except TimeoutError as e:
                        failed, output = True, f"TimeoutError: {e}"
                    seconds += time.perf_counter() - t0
                    if failed:
                        failures += 1
                        errors += [
                            f"run {i + 1}: {line}" for line in error_lines(output)[:6]
                        ]
                    print(
                        f"{name} run {i + 1}/{launches}: "
                        f"{'FAILED' if failed else 'ok'} "
                        f"({time.perf_counter() - t0:.1f} s)",
                        flush=True,
                    )
            results.append(
                {
                    "kind": name,
                    "runs": launches,
                    "failures": failures,
                    "seconds": seconds,
                    "errors": errors,
                }
            )
    return results


def format_results(results: Sequence[dict]) -> str:
    lines = [f"{'launch kind':<16} {'runs':>5} {'failures':>9} {'mean s':>7}"]
    for r in results:
        lines.append(
            f"{r['kind']:<16} {r['runs']:>5} {r['failures']:>9} "
            f"{r['seconds'] / max(r['runs'], 1):>7.1f}"
        )
        lines += [f"    {e[:200]}" for e in r["errors"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tests/launch_stress.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--launches", type=int, default=20, help="runs of each kind")
    parser.add_argument(
        "--busy-cores",
        type=int,
        default=1,
        help="cores kept busy beside the launches (spinners fill what is idle)",
    )
    parser.add_argument(
        "--kind",
        action="append",
        default=None,
        help="only this launch kind (repeatable)",
    )
    parser.add_argument("--timeout", type=float, default=180, help="seconds per launch")
    parser.add_argument("--verbose", action="store_true", help="stream the launches")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    results = stress(
        args.launches, args.busy_cores, args.kind, args.timeout, args.verbose
    )
    print(format_results(results))
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
