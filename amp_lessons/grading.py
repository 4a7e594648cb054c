"""Entry point kept for ``python -m amp_lessons.grading ...`` (the COURSE.md contract):
the grading tooling itself lives in ``amp_lessons.tooling.grading``.

Example: ``python -m amp_lessons.grading --course build/course autograde``.
"""

import sys

from amp_lessons.tooling.grading import *  # noqa: F403  (the same names, one place)
from amp_lessons.tooling.grading import __all__  # noqa: F401
from amp_lessons.tooling.grading.cli import main

if __name__ == "__main__":
    sys.exit(main())
