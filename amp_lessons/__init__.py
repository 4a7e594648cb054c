"""AMP from the bits up: the package behind the mixed-precision notebooks.

One module per concept, in teaching order (the lesson that teaches it in brackets):
``device`` (00: the machine report, ``resolve_device``, ``EMULATION_NOTE``), ``formats``
(01: number formats, the one format lookup and bit-equality oracle), ``underflow`` (02),
``scaler`` (03: LossScaler) with ``scaler_vs_torch`` (03: checks it against torch bit
for bit) and ``scaler_bench``, ``autocast`` (04: the per-op dtype table) with
``autocast_demos`` (04: traces, regions, custom functions, casts), ``precision`` (05:
the precision table, autocast context, scaler factory, TF32), ``models`` (MLP, GPT,
synthetic data), ``train`` (05: the loop) with ``checkpoints`` (05: its checkpoints) and
``output_files`` (paths checked first, atomic writes), ``memory`` (06), ``bench`` (06:
timing, the benchmark) with ``bench_results`` (06: recorded results), ``clinic`` (07,
and lesson 09's table of real-world problems), ``quiz`` (08), ``practice`` (09: several
losses and optimizers, gradient penalty, schedulers), ``compiled`` (09: torch.compile),
``nan_hunt`` (09: finding the first inf), ``reproductions`` (09: the real-world problems
reproduced), ``distributed`` (10: the loop under torchrun, DDP, FSDP2, DCP checkpoints)
with ``gradient_sync`` (10: gradients between ranks: dtype, comm hooks, accumulation,
clipping), ``rank_memory`` (10: bytes per rank) and ``accelerate_loop`` (10: the same
task under Hugging Face Accelerate), ``fp8`` (11: per-tensor scales and a Float8Linear
from scratch) with ``fp8_vs_torchao`` (11: checks it against torchao), ``fp8_scaling``
(11: delayed and rowwise scales) and ``bench_fp8`` (the bench's fp8 row); beside them
``plots`` (every plot), ``widgets`` (the explorers) and ``checks`` (the exercise
graders, a package: ``_engine`` plus one module per lesson). Course tooling lives apart
in ``tooling`` (``bootstrap``, ``lab``, ``grading``); ``grading`` here is its command-
line entry point. ``gpu_check`` is the whole GPU proof in one run (``python -m
amp_lessons gpu-check``), with ``gpu_report`` (its goals and one-page summary).

Import the module you need, e.g. ``from amp_lessons.formats import decompose``; nothing
heavy is imported here. ``set_language("es")`` (from ``i18n``, standard library only)
makes the checks, widgets and plots speak Spanish, as the Spanish edition's notebooks
do in their first cell.
"""

__all__ = ["language", "set_language"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # lazy (PEP 562): `import amp_lessons` stays free of imports
    if name in __all__:
        from amp_lessons import i18n

        return getattr(i18n, name)
    raise AttributeError(f"module 'amp_lessons' has no attribute {name!r}")
