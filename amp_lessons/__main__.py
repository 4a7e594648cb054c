"""``python -m amp_lessons train|bench|estimate|gpu-check``: the command line, which
lives in ``amp_lessons.cli``. Its ``main`` stays importable from here too (lesson 05
calls ``amp_lessons.__main__.main`` in its kernel)."""

import sys

from amp_lessons.cli import main

if __name__ == "__main__":
    from amp_lessons.core.distributed import exit_rank

    code = main()
    exit_rank(code)  # under torchrun: leaves here, past finalization (issue 21)
    sys.exit(code)
