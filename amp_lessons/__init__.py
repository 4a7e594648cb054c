"""AMP from the bits up: the package behind the mixed-precision notebooks.

Four layers, each a subpackage; a layer imports only the ones below it (import-linter's
contract in pyproject.toml holds this):

- ``core``: the AMP library a learner reuses, one module per concept in teaching order:
  ``device`` (00), ``formats`` (01), ``scaler`` (03: LossScaler), ``precision`` (05),
  ``models``, ``train`` with ``checkpoints`` and ``output_files`` (05), ``memory``
  (06), ``nan_hunt`` (09), ``distributed`` (10: torchrun, DDP, FSDP2, DCP), ``fp8``
  with ``fp8_scaling`` (11); ``errors``: the errors that name a setting as Python does.
- ``measure``: ``bench`` (fp32 vs fp16 vs bf16 in one run) with ``bench_results``,
  ``bench_fp8`` and ``scaler_bench``; ``fp8_vs_torchao`` (11: the fp8 twin against
  torchao, bit for bit); ``gpu_report`` (the GPU check's goals and summary page);
  ``estimate`` (what AMP would buy on a GPU, from first principles, 06) with
  ``trace``, ``gpus``, ``model_zoo``, ``published_models``, ``published`` (the
  published runs and the fit) and ``estimate_check``.
- ``teaching``: the lessons' material: ``underflow`` (02), ``scaler_vs_torch`` (03),
  ``autocast_table`` (04: the per-op dtype table) and ``autocast_demos`` (04),
  ``clinic`` (07, 09), ``quiz`` (08), ``practice``, ``compiled`` and
  ``reproductions`` (09), ``rank_memory``, ``gradient_sync`` and ``accelerate_loop``
  (10), ``plots``, ``widgets``, ``estimate_widget`` (06) and ``checks`` (the exercise
  graders: ``_engine`` plus one module per lesson).
- ``tooling``: ``bootstrap``, ``lab``, ``grading``, ``site``, ``colab``,
  ``translations`` and ``gpu_check`` (the whole GPU proof in one run, ``python -m
  amp_lessons gpu-check``: it runs the tests and executes lessons).

Beside them: ``i18n`` (standard library only; ``set_language("es")`` makes the checks,
widgets and plots speak Spanish, as the Spanish notebooks do in their first cell),
and ``grading`` (the ``python -m amp_lessons.grading`` entry point).

Import the module you need, e.g. ``from amp_lessons.core.formats import decompose``;
nothing heavy is imported here.
"""

__all__ = ["language", "set_language"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # lazy (PEP 562): `import amp_lessons` stays free of imports
    if name in __all__:
        from amp_lessons import i18n

        return getattr(i18n, name)
    raise AttributeError(f"module 'amp_lessons' has no attribute {name!r}")
