"""Whether a learner works on their own, with no instructor to grade: then every
check grades what it can where the learner sees it.

Lesson 08's quick check keeps five of its ten questions for the instructor's hidden
tests: in a class, their visible cells only check that an answer was given. A
learner on their own has no hidden tests, so those five would never be graded;
there, the visible cells grade them too (and progress records real passes).

On your own means: the learner's lab (``make lab`` sets ``AMP_LESSONS_SELF_STUDY=1``
for JupyterLab and its kernels) or Google Colab. Grading (the sandbox, nbgrader)
sets it to ``0``.

Example:
    >>> os.environ[ENV] = "1"; on_your_own()
    True
"""

from __future__ import annotations

import os
import sys

__all__ = ["ENV", "on_your_own"]

ENV = "AMP_LESSONS_SELF_STUDY"


def on_your_own() -> bool:
    """True in the learner's lab (``ENV`` is "1") and in Colab (unless ``ENV`` is
    "0", as grading sets it)."""
    value = os.environ.get(ENV)
    if value is not None:
        return value == "1"
    return "google.colab" in sys.modules
