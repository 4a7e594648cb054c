"""``python -m amp_lessons.tooling.gpu_check``: a worker of the check (``workers``)."""

import sys

from amp_lessons.tooling.gpu_check.workers import main

sys.exit(main())
