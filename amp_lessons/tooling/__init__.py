"""Course tooling: setting up the environment (``bootstrap``), starting JupyterLab
safely (``lab``), teaching with nbgrader (``grading``), the site, Colab cells,
translations, and the whole GPU proof in one run (``gpu_check``: the bench, the
``gpu``-marked tests and every lesson executed, ``python -m amp_lessons gpu-check``).

It may import every other layer (``teaching``, ``measure``, ``core``); none imports it
(only the command line, ``amp_lessons.cli``, runs ``gpu_check``).
"""

import os


def usable_cores() -> int:
    """The cores this process may run on: a container's CPU set, where
    ``os.cpu_count()`` can be the host's (the grader's jobs, gpu-check's lanes)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
