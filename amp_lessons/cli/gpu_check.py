"""The gpu-check command: ``python -m amp_lessons gpu-check``, the whole GPU proof in
one run (``amp_lessons.tooling.gpu_check``: the gpu tests, the bench, four lessons and
a summary); without CUDA it exits with status 2 at once and writes nothing.

Example: ``python -m amp_lessons gpu-check --plan`` prints the steps and their time
limits.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence

from amp_lessons.i18n import _


def add_command(commands) -> argparse.ArgumentParser:
    """The gpu-check command's parser, with its options."""
    p = commands.add_parser(
        "gpu-check",
        help=_(
            "the whole GPU proof in one run: gpu tests, the bench, "
            "lessons 00/04/06/07 and a summary (CUDA only)"
        ),
        description=_(
            "On a CUDA GPU, within one time budget: every gpu-marked test, "
            "the bench on both configs in every precision (recorded as "
            "bench_<gpu>.json), lessons 00, 04, 06 and 07 executed (copies "
            "in executed/), and the one-page summary gpu_check_<gpu>.md. "
            "Without CUDA it exits with status 2 at once and writes "
            "nothing."
        ),
    )
    _add_gpu_check(p)
    return p


def _add_gpu_check(p: argparse.ArgumentParser) -> None:
    from amp_lessons.tooling.gpu_check import BUDGET_S

    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help=_("where the results go (default: notebooks/results)"),
    )
    p.add_argument(
        "--budget",
        type=float,
        default=BUDGET_S,
        metavar="SECONDS",
        help=_(
            "total time budget; each step gets its share (default: "
            "%(default).0f, sized for one H100/H200)"
        ),
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help=_("print the steps and their time limits; run nothing"),
    )


def run_gpu_check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from amp_lessons.tooling import gpu_check

    if args.budget <= 0:
        raise ValueError(
            _("--budget must be > 0 seconds, got {budget}").format(
                budget=f"{args.budget:g}"
            )
        )
    command = shlex.join(["python", "-m", "amp_lessons", *argv])
    if args.plan:
        import tempfile
        from pathlib import Path

        from amp_lessons.measure.bench_results import RESULTS_DIR

        info = gpu_check.gpu_info() or {"name": _("a CUDA GPU (none here)")}
        steps = gpu_check.plan_steps(
            Path(args.out or RESULTS_DIR),
            Path(tempfile.gettempdir()) / "amp_gpu_check",
            command,
        )
        print(
            _("gpu-check plan on {name}, budget {budget} s:").format(
                name=info["name"], budget=f"{args.budget:.0f}"
            )
        )
        print(gpu_check.format_plan(steps, args.budget))
        problems = gpu_check.plan_problems(steps)
        if problems:
            print(_("what a GPU run would lack (no network there):"))
            print("\n".join(f"- {p}" for p in problems))
        return 1 if problems else 0
    try:
        return gpu_check.run_gpu_check(args.out, args.budget, command)
    except gpu_check.NoCudaError:  # the tooling's English line, said in ours
        raise RuntimeError(_no_cuda()) from None


def _no_cuda() -> str:
    """The one line printed where there is no CUDA GPU (the command line's wording of
    ``tooling.gpu_check.refusal``)."""
    import torch

    why = (
        _(" (this torch is a CPU-only build)")
        if torch.version.cuda is None
        else _(" (torch built for CUDA {cuda})").format(cuda=torch.version.cuda)
    )
    return _(
        "gpu-check needs a CUDA GPU and torch {version} sees none{why}; nothing was "
        "run or written. Run it on a machine with an NVIDIA GPU (see "
        "notebooks/results/README.md)."
    ).format(version=torch.__version__, why=why)
