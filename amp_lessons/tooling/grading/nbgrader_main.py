"""What the grader runs instead of ``python -m nbgrader``: the same application, started
without the grammar that jsonschema builds on import for its ``iri`` format.

nbformat imports jsonschema, which imports ``rfc3987_syntax`` when it is installed (the
Jupyter stack installs it) and compiles a grammar: 0.9 s of every process that reads
a notebook. No notebook or gradebook schema uses that format, and grading starts an
nbgrader process (and a sandbox runner) per submission, so both skip it.

Example (what ``course.run_nbgrader`` and ``autograder.grade_one`` start)::

    python -m amp_lessons.tooling.grading.nbgrader_main autograde 02_underflow
"""

from __future__ import annotations

import sys


def skip_iri_grammar() -> None:
    """Make ``import rfc3987_syntax`` fail as if it were not installed, so jsonschema
    leaves its ``iri`` format unchecked; call it before anything imports nbformat."""
    sys.modules.setdefault("rfc3987_syntax", None)


def command(*args: str) -> list[str]:
    """The command line of ``nbgrader ARGS`` with this Python."""
    return [sys.executable, "-m", "amp_lessons.tooling.grading.nbgrader_main", *args]


if __name__ == "__main__":
    skip_iri_grammar()
    from nbgrader.apps.nbgraderapp import main

    sys.exit(main())
