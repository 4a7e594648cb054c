"""Course tooling: setting up the environment (``bootstrap``), starting JupyterLab
safely (``lab``), teaching with nbgrader (``grading``), the site, Colab cells,
translations, and the whole GPU proof in one run (``gpu_check``: the bench, the
``gpu``-marked tests and four lessons executed, ``python -m amp_lessons gpu-check``).

It may import every other layer (``teaching``, ``measure``, ``core``); none imports it
(only the command line, ``amp_lessons.cli``, runs ``gpu_check``).
"""
