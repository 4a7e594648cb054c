"""``python -m amp_lessons.tooling.grading``: the same command line as
``python -m amp_lessons.grading``."""

import sys

from amp_lessons.tooling.grading.cli import main

sys.exit(main())
